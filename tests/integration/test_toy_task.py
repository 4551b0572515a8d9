"""A new task in one hop: one small Task class, registered from this file alone,
generates addressable samples, is checked by its solver, trains end to end with `train`, and
runs as a sweep from a sweep file the user writes (data, no code)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from synthlab import generators
from synthlab.generators import Param, Sample, Task
from synthlab.generators.base import positive
from synthlab.plan.presets import preset_family
from synthlab.run.training import train
from synthlab.study import sweeping


class CopyBack(Task):
    """``n`` random digits, then ``=``, then the same digits again: after ``=`` each output is
    the digit ``n + 1`` tokens back (an induction-head task)."""

    name = "toy_copy_back"
    family = "toy"
    description = "repeat n digits after '='"
    PARAMS = {"n": Param(6, int, "digits to copy", positive), "ood_n": Param(9, int, "digits in ood", positive)}

    @property
    def vocab(self) -> list[str]:
        return [str(d) for d in range(5)] + ["="]

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood")

    def split_params(self, split: str) -> dict:
        return {"n": self.params["ood_n" if split == "ood" else "n"]}

    def generate(self, rng: np.random.Generator, p: dict):
        n = p["n"]
        digits = rng.integers(0, 5, size=n)  # (n,)
        ids = np.concatenate([digits, [5], digits])  # (2n + 1,)
        scored = np.arange(n, 2 * n)  # outputs at '=' and after it predict the copy
        return ids, scored, digits

    def solve(self, sample: Sample) -> list[str]:
        tokens = sample.tokens
        n = tokens.index("=")
        return tokens[:n]


@pytest.fixture
def toy():
    generators.register(CopyBack)
    yield CopyBack.name
    generators.unregister(CopyBack.name)
    assert CopyBack.name not in generators.TASKS


def test_toy_task_samples_are_solved_and_addressable(toy):
    task = generators.get_task(toy, n=4)
    samples = task.sample("test", n=50, seed=3)
    assert all(task.solve(s) == s.targets for s in samples)
    again = task.sample("test", n=1, seed=3, start=17)[0]
    assert again.ids.tolist() == samples[17].ids.tolist()
    with pytest.raises(ValueError, match="already registered"):
        generators.register(CopyBack)
    with pytest.raises(ValueError, match="Task subclass"):
        generators.register(dict)


def test_toy_task_trains_end_to_end(toy, tmp_path):
    assert preset_family(toy) is None  # no installed sweep file lists it: the config defaults
    rec = train(
        toy,
        "alibi",
        preset="smoke",
        out=tmp_path,
        steps=30,
        d_model=32,
        n_layers=1,
        n_heads=2,
        batch_size=16,
        eval_samples=16,
    )
    assert rec["status"] == "ok" and rec["task"] == toy and rec["task_params"] == {"n": 6, "ood_n": 9}
    assert set(rec["metrics"]) == {"test", "ood"} and 0.0 <= rec["metrics"]["ood"]["token_acc"] <= 1.0
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["run_id"] for x in lines] == [rec["run_id"]]


def test_toy_task_sweeps_from_a_users_sweep_file(toy, tmp_path):
    sweep_file = tmp_path / "copy_back.toml"
    sweep_file.write_text(f"""
[sweep]
task = "{toy}"
description = "toy: copy back with two encodings"
default_preset = "smoke"
metric = "token_acc"
in_dist = "test"
ood = ["ood"]

[axes]
pe = ["nope", "alibi"]

[presets.smoke]
task = {{ n = 4, ood_n = 6 }}
model = {{ d_model = 32, n_layers = 1, n_heads = 2 }}
train = {{ steps = 20, batch_size = 16, eval_samples = 16 }}

[presets.quick]
[presets.paper]
""")
    out = tmp_path / "runs"
    records = sweeping.sweep(str(sweep_file), out=str(out), quiet=True)
    assert sorted(r["pe"] for r in records) == ["alibi", "nope"]
    assert all(r["status"] == "ok" and r["task_params"] == {"n": 4, "ood_n": 6} for r in records)
    assert (out / "grids" / "ood.csv").exists()


def test_train_preset_for_a_task_without_presets_exits_2_before_anything_is_written(toy, tmp_path, capsys):
    """A plugin task has no preset tables: `--preset smoke` ran the config defaults (1,000
    steps at d 64) and recorded them as "smoke". Now refused; no --preset keeps the defaults."""
    from synthlab.cli import main

    assert main(["train", toy, "--pe", "rope", "--preset", "smoke", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no presets" in err[0] and "--set" in err[0]
    assert not (tmp_path / "o").exists()
    assert (
        main(
            [
                "train",
                toy,
                "--pe",
                "rope",
                "--set",
                "steps=5",
                "--set",
                "d_model=16",
                "--set",
                "n_layers=1",
                "--set",
                "eval_samples=8",
                "--quiet",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
