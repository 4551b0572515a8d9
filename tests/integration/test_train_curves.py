"""Learning curves (train.eval_every) and the report hook (the training side).

A curve evaluates the held-out splits during training with the final evaluation's sets and
code: it changes no weight and no metric (bit for bit on CPU, with dropout and randomized
positions drawing from torch's RNG), its last point is the final metrics, its points reach the
record, metrics.jsonl and the logger, and a resumed run keeps the points from before the kill.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import synthlab.run.checkpoints as checkpoints
from synthlab.cli import main
from synthlab.run.training import resolve_config, train
from test_long_runs import _stop_at

# dropout and randomized positions: the training draws from torch's RNG, which evaluation must not touch
OV = {"steps": 12, "d_model": 16, "eval_samples": 16, "threads": 1, "model.dropout": 0.1}
KW = dict(preset="smoke", seed=2, positions="randomized:max=128")


def _weights(out: Path, rec: dict) -> dict[str, torch.Tensor]:
    return load_file(str(out / rec["run_id"] / "model.safetensors"))


def _lines(out: Path, rec: dict) -> list[dict]:
    return [json.loads(x) for x in (out / rec["run_id"] / "metrics.jsonl").read_text().splitlines()]


def test_a_curve_changes_no_weight_and_ends_at_the_final_metrics(tmp_path):
    # a: no curve and no logger; b: a curve every 5 steps, logged as CSV
    a = train("flipflop", "rope", out=tmp_path / "a", overrides=OV, logger="none", **KW)
    b = train("flipflop", "rope", out=tmp_path / "b", overrides={**OV, "train.eval_every": 5}, **KW)
    assert a["status"] == b["status"] == "ok"
    assert a["curve"] is None
    assert a["metrics"] == b["metrics"]
    wa, wb = _weights(tmp_path / "a", a), _weights(tmp_path / "b", b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    splits = list(b["metrics"])
    assert [(p["step"], p["split"]) for p in b["curve"]] == [(s, sp) for s in (5, 10, 12) for sp in splits]
    for p in b["curve"]:  # flat and numeric, the metric names of record["metrics"]
        assert set(p) == {"step", "split", *b["metrics"][p["split"]]}
    last = {
        p["split"]: {k: v for k, v in p.items() if k not in ("step", "split")} for p in b["curve"] if p["step"] == 12
    }
    assert last == b["metrics"]  # exactly: the same sets, code path and weights

    la, lb = _lines(tmp_path / "a", a), _lines(tmp_path / "b", b)
    assert [x for x in la if "loss" in x] == [x for x in lb if "loss" in x]  # the same loss curve
    assert [x for x in lb if "step" in x and "split" in x] == b["curve"]
    assert [x for x in la if "step" not in x] == [x for x in lb if "step" not in x]  # the final lines

    csv = (tmp_path / "b" / b["run_id"] / "logs" / "metrics.csv").read_text().splitlines()
    head = csv[0].split(",")
    assert {f"{sp}/token_acc" for sp in splits} <= set(head)
    col, step = head.index("test/token_acc"), head.index("step")
    logged = {int(r.split(",")[step]): float(r.split(",")[col]) for r in csv[1:] if r.split(",")[col]}
    assert logged == {p["step"]: p["token_acc"] for p in b["curve"] if p["split"] == "test"}


def test_report_gets_the_loss_at_log_steps_and_the_metrics_at_each_point(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    rec = train(
        "flipflop",
        "nope",
        preset="smoke",
        overrides={"steps": 8, "d_model": 16, "eval_samples": 8, "eval_every": 4},
        report=lambda s, v: calls.append((s, v)),
    )
    assert list(tmp_path.iterdir()) == []  # no out: nothing written, no logger
    assert rec["logs"] is None
    losses = [(s, v) for s, v in calls if "loss" in v]
    assert [s for s, _ in losses] == list(range(8))  # 8 steps: every step is a log step
    assert all(set(v) == {"loss"} and math.isfinite(v["loss"]) for _, v in losses)
    points = [(s, v) for s, v in calls if "loss" not in v]
    assert [s for s, _ in points] == [4, 8]
    want = {f"{sp}/{k}": x for sp, m in rec["metrics"].items() for k, x in m.items()}
    assert points[-1][1] == want
    steps = [s for s, _ in calls]
    assert steps == sorted(steps)  # never backwards: loss of batch 3, the point after 4 updates, loss of batch 4, ...


def test_a_failing_report_hook_warns_once_and_the_run_goes_on():
    seen = []

    def broken(step, values):
        seen.append(step)
        raise RuntimeError("dashboard down")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec = train(
            "flipflop",
            "nope",
            preset="smoke",
            overrides={"steps": 6, "d_model": 16, "eval_samples": 8, "eval_every": 3},
            report=broken,
        )
    assert rec["status"] == "ok"
    assert len(seen) == 6 + 2  # called at every log step and point, in spite of the errors
    mine = [w for w in caught if "report hook raised RuntimeError: dashboard down" in str(w.message)]
    assert len(mine) == 1


@pytest.mark.parametrize(
    "value,match",
    [
        ("0", r"train.eval_every must be >= 1 \(none = off\), got 0"),
        ("-3", r"train.eval_every must be >= 1 \(none = off\), got -3"),
        ("21", r"train.eval_every must be <= train.steps \(20; none = off\), got 21"),
        ("x", "train.eval_every: expected an integer or none"),
    ],
)
def test_bad_eval_every_is_refused(value, match):
    with pytest.raises(ValueError, match=match):
        resolve_config("flipflop", "rope", "smoke", {"eval_every": value})


def test_eval_every_defaults_to_off_and_none_turns_it_off():
    assert resolve_config("flipflop", "rope", "smoke").train.eval_every is None
    assert resolve_config("flipflop", "rope", "smoke", {"train.eval_every": "none"}).train.eval_every is None
    assert resolve_config("flipflop", "rope", "smoke", {"train.eval_every": "20"}).train.eval_every == 20


def test_cli_eval_every_zero_exits_2_with_nothing_written(tmp_path, capsys):
    out = tmp_path / "runs"
    rc = main(
        [
            "train",
            "flipflop",
            "--pe",
            "rope",
            "--preset",
            "smoke",
            "--set",
            "train.eval_every=0",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "train.eval_every must be >= 1" in err[0]
    assert not out.exists()


def test_a_report_that_is_not_callable_is_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="report must be a callable"):
        train("flipflop", "rope", preset="smoke", out=tmp_path / "o", report="print")
    assert not (tmp_path / "o").exists()


def test_the_run_options_are_named_parameters():
    """``report``, ``logger`` and ``model`` are keyword options of train (the sweep passes the
    first two by name), with the defaults docs/interfaces.md states."""
    params = inspect.signature(train).parameters
    assert {"logger", "report", "model"} <= set(params)
    assert params["logger"].default == "csv" and params["report"].default is None


def test_a_resumed_run_keeps_the_points_from_before_the_kill(tmp_path, monkeypatch):
    # a checkpoint at step 5 holds the point of step 5 (the curve runs before the checkpoint)
    ov = {**OV, "train.eval_every": 5, "train.checkpoint_every": 5}
    a = train("flipflop", "rope", out=tmp_path / "a", overrides=ov, **KW)
    with monkeypatch.context() as mp:
        _stop_at(mp, 7)  # Ctrl-C right after the checkpoint callback at step 7
        with pytest.raises(KeyboardInterrupt):
            train("flipflop", "rope", out=tmp_path / "b", overrides=ov, **KW)
    assert (tmp_path / "b" / checkpoints.DIRNAME).is_dir()
    b = train("flipflop", "rope", out=tmp_path / "b", overrides=ov, **KW)
    assert [p["step"] for p in b["curve"] if p["split"] == "test"] == [5, 10, 12]
    assert b["curve"] == a["curve"] and b["metrics"] == a["metrics"]
    assert _lines(tmp_path / "a", a) == _lines(tmp_path / "b", b)
