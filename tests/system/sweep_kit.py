"""The shared tiny sweep (``TINY``, ``write_sweep``), the fake trainer (``FakeTrain`` run
through ``as_run``) and the study probes the sweep tests of every tier use."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from synthlab.study import sweeping

TINY = """
[sweep]
task = "flipflop"
default_preset = "smoke"
metric = "token_acc"
show = "error"
ood = ["ood-sparse"]
capacity_x = "lr"

[axes]
pe = ["rope", "nope"]
seed = [0, 1]

[presets.smoke]
task = { n_pairs = 8 }
model = { d_model = 16, n_layers = 1, n_heads = 2 }
train = { steps = 10, batch_size = 8, warmup = 0, eval_samples = 16 }

[presets.quick]
[presets.paper]
"""


def write_sweep(tmp_path: Path, text: str = TINY, name: str = "tiny.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


class FakeTrain:
    """Stands in for synthlab.run.training.train: records calls, appends a record like the real one."""

    def __init__(self, fail_when=None, raise_when=None):
        self.calls: list[tuple] = []
        self.fail_when = fail_when or (lambda pe, seed, ov: False)
        self.raise_when = raise_when or (lambda pe, seed, ov: False)

    def __call__(
        self,
        task,
        pe,
        preset="quick",
        seed=0,
        out=None,
        positions=None,
        rope_scaling=None,
        quiet=True,
        results=None,
        study=None,
        trial=None,
        overrides=None,
        logger="csv",
        report=None,
    ):
        ov = dict(overrides or {})
        self.calls.append((task, pe, seed, json.dumps(ov, sort_keys=True)))
        if self.raise_when(pe, seed, ov):
            raise RuntimeError("CUDA out of memory (fake)")
        acc = 0.9 if pe == "rope" else 0.6
        rec = {
            "schema": 1,
            "run_id": f"{pe}-{seed}-{len(self.calls)}",
            "task": task,
            "task_params": {},
            "pe": pe,
            "positions": positions,
            "model": {"d_model": ov.get("model.d_model", 16), "n_layers": 1, "n_heads": 2, "params": 10},
            "train": {"steps": 10, "batch_size": 8, "lr": ov.get("train.lr", 1e-3), "seed": seed, "train_len": 16},
            "metrics": {"test": {"token_acc": acc}, "ood-sparse": {"token_acc": acc - 0.1 * seed}},
            "by_length": None,
            "study": study,
            "trial": trial,
            "status": "ok",
        }
        if self.fail_when(pe, seed, ov):
            rec.update(status="failed", error="diverged: non-finite training loss (nan) at step 3", metrics={})
        if results is not None:
            with open(results, "a") as f:
                f.write(json.dumps(rec) + "\n")
        return rec


def settings_of(cfg) -> dict:
    """A resolved RunConfig as dotted settings (``task.n_pairs``, ``model.d_model``, ``train.lr``...)."""
    d = cfg.to_dict()
    out = {f"task.{k}": v for k, v in d["task_params"].items()}
    for section in ("model", "train"):
        out.update({f"{section}.{k}": v for k, v in d[section].items()})
    return out


def as_run(train):
    """A stand-in trainer written as synthlab.run.training.train, called as a sweep calls
    synthlab.run.training.run: with each cell's resolved config (its settings as dotted overrides)."""

    def run(cfg, out=None, results=None, quiet=True, study=None, trial=None, t0=None, **options):
        return train(
            cfg.task,
            cfg.pe,
            preset=cfg.preset,
            seed=cfg.train.seed,
            out=out,
            positions=cfg.positions,
            rope_scaling=cfg.rope_scaling,
            quiet=quiet,
            results=results,
            study=study,
            trial=trial,
            overrides=settings_of(cfg),
            **options,
        )

    return run


def failing_fake() -> FakeTrain:
    """nope seed 1 diverges (a failed record), rope seed 1 raises (no record from the trainer)."""
    return FakeTrain(
        fail_when=lambda pe, seed, ov: pe == "nope" and seed == 1,
        raise_when=lambda pe, seed, ov: pe == "rope" and seed == 1,
    )


def study_trials(out: Path, name: str):
    import optuna

    st = optuna.load_study(study_name=name, storage=sweeping.open_storage(str(out / sweeping.JOURNAL_NAME)))
    return st, st.get_trials(deepcopy=False)


def wait_running(out: Path, name: str, n: int = 1, timeout: float = 180.0, proc=None) -> list:
    """The study's running trials once ``n`` of them have a worker (while ``proc`` lives)."""
    from optuna.trial import TrialState

    deadline = time.time() + timeout
    while time.time() < deadline and (proc is None or proc.poll() is None):
        time.sleep(0.2)  # each look replays the journal: not too often on a 2-core CI
        running = [t for t in trials_so_far(out, name) if t.state == TrialState.RUNNING and "worker" in t.user_attrs]
        if len(running) >= n:
            return running
    raise AssertionError(f"no {n} cell(s) running in {out}")


def trials_so_far(out: Path, name: str) -> list:
    """The study's trials, or none while a starting (or killed) sweep has not written it yet: its
    journal is made before the study is created in it."""
    if not (out / sweeping.JOURNAL_NAME).exists():
        return []
    try:
        return study_trials(out, name)[1]
    except KeyError:  # optuna: "Record does not exist."
        return []


def completed_keys(trials):
    from optuna.trial import TrialState

    return [t.user_attrs["cell_key"] for t in trials if t.state == TrialState.COMPLETE]


# a user's sweep file for a shipped task whose presets set one thing
USER = """
[sweep]
task = "flipflop"

[axes]
pe = ["rope"]

[presets.smoke]
model = { d_model = 16 }

[presets.quick]
model = { d_model = 16 }

[presets.paper]
"""


def sweep_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "synthlab.cli", "sweep", *args, "--quiet"]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "ignore"}
