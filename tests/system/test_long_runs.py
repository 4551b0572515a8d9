"""Long runs: a run killed after a checkpoint resumes to the weights and metrics of an
uninterrupted run (CPU, one thread); a run that cannot fit in memory is refused up front."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import synthlab.run.checkpoints as checkpoints
from synthlab.cli import main
from synthlab.run.checkpoints import DIRNAME
from synthlab.run.training import train

# dropout and randomized positions: the resumed run must restore the RNG and address the data by step
OV = {"train.checkpoint_every": 5, "train.threads": 1, "model.dropout": 0.1}
POS = "randomized:max=128"
KW = dict(preset="smoke", seed=3, positions=POS, overrides=OV)


def _run_files(out, rec):
    d = Path(out) / rec["run_id"]
    return load_file(str(d / "model.safetensors")), (d / "metrics.jsonl").read_text()


def _assert_same(a, out_a, b, out_b):
    assert a["status"] == b["status"] == "ok"
    assert a["metrics"] == b["metrics"]
    wa, la = _run_files(out_a, a)
    wb, lb = _run_files(out_b, b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert la == lb  # the loss curve (restored from the checkpoint) and the evaluation lines


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    return train("flipflop", "rope", out=out, **KW), out


def _stop_at(monkeypatch, step, exc=KeyboardInterrupt):
    """Make the checkpoint callback raise ``exc`` after step ``step`` (a Ctrl-C there)."""
    orig = checkpoints._callback

    def patched(ck):
        cb = orig(ck)
        end = cb.on_train_batch_end

        def on_end(trainer, pl_module, *args):
            end(trainer, pl_module, *args)
            if trainer.global_step == step:
                raise exc

        cb.on_train_batch_end = on_end
        return cb

    monkeypatch.setattr(checkpoints, "_callback", patched)


def _state(out):
    (d,) = (Path(out) / DIRNAME).iterdir()
    return d, json.loads((d / "run.json").read_text())


def test_interrupted_run_resumes_bit_identical(uninterrupted, tmp_path, monkeypatch):
    a, out_a = uninterrupted
    with monkeypatch.context() as mp:
        _stop_at(mp, 12)
        with pytest.raises(KeyboardInterrupt):
            train("flipflop", "rope", out=tmp_path, **KW)
    ckdir, state = _state(tmp_path)
    assert torch.load(ckdir / "last.ckpt", weights_only=True)["global_step"] == 10
    assert not (tmp_path / state["run_id"]).exists() and not (tmp_path / "results.jsonl").exists()
    b = train("flipflop", "rope", out=tmp_path, **KW)
    assert b["run_id"] == state["run_id"]  # the run id is kept across the resume
    _assert_same(a, out_a, b, tmp_path)
    assert not (tmp_path / DIRNAME).exists()  # gone once the run has its record
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 1


def test_time_based_checkpoints_resume_too(uninterrupted, tmp_path, monkeypatch):
    a, out_a = uninterrupted
    kw = {**KW, "overrides": {**OV, "train.checkpoint_every": 0, "train.checkpoint_minutes": 1e-9}}  # every step
    with monkeypatch.context() as mp:
        _stop_at(mp, 7)
        with pytest.raises(KeyboardInterrupt):
            train("flipflop", "rope", out=tmp_path, **kw)
    ckdir, _ = _state(tmp_path)
    assert torch.load(ckdir / "last.ckpt", weights_only=True)["global_step"] == 7
    _assert_same(a, out_a, train("flipflop", "rope", out=tmp_path, **kw), tmp_path)


def test_short_runs_save_no_checkpoint_and_leave_nothing(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(checkpoints.RunCheckpoints, "save", lambda self, trainer: saved.append(trainer.global_step))
    rec = train("flipflop", "rope", preset="smoke", out=tmp_path)  # 20 steps: the defaults save none
    assert rec["status"] == "ok" and saved == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([rec["run_id"], "results.jsonl"])


def test_ctrl_c_before_the_first_checkpoint_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with monkeypatch.context() as mp:
        _stop_at(mp, 3)
        with pytest.raises(KeyboardInterrupt):
            train("flipflop", "rope", out=out, **KW)
    assert not out.exists()


def test_a_failed_run_drops_its_checkpoints(tmp_path, monkeypatch):
    with monkeypatch.context() as mp:
        _stop_at(mp, 6, RuntimeError("boom"))
        with pytest.raises(RuntimeError, match="boom"):
            train("flipflop", "rope", out=tmp_path, **KW)
    assert not (tmp_path / DIRNAME).exists()
    (line,) = (tmp_path / "results.jsonl").read_text().splitlines()
    assert json.loads(line)["status"] == "failed"


def test_a_checkpoint_of_another_task_revision_is_not_resumed(tmp_path, monkeypatch):
    """A generator fix (Task.REVISION raised) gives one seed other samples: a run killed before
    it must start over, not resume on the old data under a record naming the new revision."""
    from synthlab import generators

    with monkeypatch.context() as mp:
        _stop_at(mp, 12)
        with pytest.raises(KeyboardInterrupt):
            train("flipflop", "rope", out=tmp_path, **KW)
    old_dir, state = _state(tmp_path)
    monkeypatch.setattr(generators.TASKS["flipflop"], "REVISION", generators.TASKS["flipflop"].REVISION + 1)
    rec = train("flipflop", "rope", out=tmp_path, **KW)
    assert rec["task_revision"] == generators.TASKS["flipflop"].REVISION
    assert rec["run_id"] != state["run_id"]  # a new run, not the old one resumed
    assert (old_dir / "last.ckpt").exists()  # the old revision's checkpoint was not taken


def test_a_run_killed_after_its_record_is_not_resumed_and_recorded_twice(tmp_path, monkeypatch):
    """Killed between its record and its checkpoint's removal: the same command again is a new
    run, not the recorded one resumed under the same run id (a second record of it, its
    finished directory removed and trained again)."""

    def killed(self):  # the process dies here: the checkpoint stays, unlocked
        self.release()
        raise SystemExit("killed")

    with monkeypatch.context() as mp:
        mp.setattr(checkpoints.RunCheckpoints, "finish", killed)
        with pytest.raises(SystemExit):
            train("flipflop", "rope", out=tmp_path, **KW)
    (first,) = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert (tmp_path / DIRNAME).exists()
    again = train("flipflop", "rope", out=tmp_path, **KW)
    ids = [json.loads(x)["run_id"] for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert ids == [first["run_id"], again["run_id"]] and again["run_id"] != first["run_id"]
    assert (tmp_path / first["run_id"] / "model.safetensors").exists()  # the recorded run's files kept
    assert not (tmp_path / DIRNAME).exists()


@pytest.mark.slow
def test_sigkilled_run_resumes_bit_identical(uninterrupted, tmp_path):
    """A real kill (SIGKILL right after the checkpoint of step 10 is written), then a resume."""
    a, out_a = uninterrupted
    script = textwrap.dedent(f"""
        import os, signal, sys
        import synthlab.run.checkpoints as C
        save = C.RunCheckpoints.save
        def killing_save(self, trainer):
            save(self, trainer)
            if trainer.global_step == 10:
                os.kill(os.getpid(), signal.SIGKILL)
        C.RunCheckpoints.save = killing_save
        from synthlab.run.training import train
        train("flipflop", "rope", out=sys.argv[1], preset="smoke", seed=3, positions={POS!r}, overrides={OV!r})
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    _, state = _state(tmp_path)
    assert (tmp_path / state["run_id"] / "config.json").exists()  # what the kill left
    b = train("flipflop", "rope", out=tmp_path, **KW)
    assert b["run_id"] == state["run_id"]
    _assert_same(a, out_a, b, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([b["run_id"], "results.jsonl"])


# ---- runs too large for this machine: one line, exit 2, nothing written


@pytest.mark.parametrize(
    "sets",
    [
        ["n_pairs=1000000"],  # sequences of 2M tokens
        ["n_pairs=4096", "batch_size=16384"],  # attention maps of petabytes
        ["d_model=65536", "n_layers=2", "n_heads=1"],  # 100 G parameters' worth of AdamW
        ["steps=1e15"],  # a typo, not a run
    ],
)
def test_too_large_runs_are_refused_before_anything_is_written(sets, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["train", "flipflop", "--pe", "cope", "--preset", "smoke", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error:" in err
    assert not out.exists()


def test_the_memory_message_names_the_estimate_and_what_to_lower(tmp_path, capsys):
    argv = [
        "train",
        "flipflop",
        "--pe",
        "cope",
        "--preset",
        "smoke",
        "--out",
        str(tmp_path / "o"),
        "--set",
        "n_pairs=4096",
        "--set",
        "batch_size=4096",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs ~" in err and "available" in err and "lower batch_size" in err and "attention maps" in err


def test_check_memory_false_skips_the_check(monkeypatch, tmp_path):
    import synthlab.run.sizing as sizing

    monkeypatch.setattr(sizing, "host_available", lambda: 1)  # a machine with one byte free
    with pytest.raises(ValueError, match="needs ~"):
        train("flipflop", "rope", preset="smoke", overrides={"steps": 2, "warmup": 0})
    rec = train("flipflop", "rope", preset="smoke", overrides={"steps": 2, "warmup": 0, "check_memory": False})
    assert rec["status"] == "ok"


SWEEP_FILE = """
[sweep]
task = "flipflop"
description = "one cell, checkpointed every 5 steps"
default_preset = "smoke"
metric = "token_acc"
in_dist = "test"
ood = ["ood-sparse"]

[axes]
pe = ["rope"]

[presets.smoke]
task = { n_pairs = 8 }
model = { d_model = 32, n_layers = 1, n_heads = 2 }
train = { steps = 20, batch_size = 8, eval_samples = 16, threads = 1, checkpoint_every = 5 }

[presets.quick]
[presets.paper]
"""


@pytest.mark.slow
def test_a_sigkilled_sweep_cell_resumes_from_its_checkpoint(tmp_path):
    """A sweep cell killed after its step-10 checkpoint: the re-run sweep resumes the cell (one
    record, the uninterrupted cell's metrics) and drops the checkpoint."""
    from synthlab.study.sweeping import sweep

    spec = tmp_path / "one.toml"
    spec.write_text(SWEEP_FILE)
    whole = sweep(str(spec), out=str(tmp_path / "whole"), quiet=True)
    script = textwrap.dedent("""
        import os, signal, sys
        import synthlab.run.checkpoints as C
        save = C.RunCheckpoints.save
        def killing_save(self, trainer):
            save(self, trainer)
            if trainer.global_step == 10:
                os.kill(os.getpid(), signal.SIGKILL)
        C.RunCheckpoints.save = killing_save
        from synthlab.study.sweeping import sweep
        sweep(sys.argv[1], out=sys.argv[2], quiet=True)
    """)
    out = tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, "-c", script, str(spec), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert any((out / "runs" / ".checkpoints").rglob("last.ckpt"))  # what the kill left
    resumed = sweep(str(spec), out=str(out), quiet=True)
    assert [r["metrics"] for r in resumed] == [r["metrics"] for r in whole]
    ok = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if '"ok"' in x]
    assert len(ok) == 1 and not any((out / "runs" / ".checkpoints").rglob("last.ckpt"))
