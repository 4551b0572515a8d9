"""Batched seeds (synthlab.run.seedbatch, ``sweep --batch-seeds``): the seeds of a cell trained as
one stacked model give what separate runs give (within float rounding), each its own run,
record and trial; seeds that cannot stack are refused before anything is written, and a
sweep then trains them one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import synthlab
from sweep_kit import TINY as TINY_SWEEP
from synthlab.run import seedbatch
from synthlab.run.seedbatch import NotBatchable, train_seeds
from synthlab.study import sweeping

SEEDS = [0, 1, 2]
TINY = {"steps": 30, "eval_samples": 32}


def _weights(out: Path, rec: dict) -> dict[str, torch.Tensor]:
    return load_file(out / rec["run_id"] / "model.safetensors")


@pytest.mark.parametrize("pe", ["rope", "cope", "kerple+dape:k=3"])
def test_batched_seeds_equal_separate_runs(pe, tmp_path):
    batched = train_seeds("flipflop", pe, SEEDS, preset="smoke", overrides=TINY, out=tmp_path / "b")
    for seed, rec in zip(SEEDS, batched):
        alone = synthlab.train("flipflop", pe, preset="smoke", seed=seed, overrides=TINY, out=tmp_path / "s")
        assert rec["status"] == "ok" and rec["train"]["seed"] == seed and rec["train"]["batched"] == 3
        assert rec["machine"] == alone["machine"] and "numpy" in rec["machine"]  # the releases it ran with
        for split, m in alone["metrics"].items():
            assert rec["metrics"][split]["token_acc"] == pytest.approx(m["token_acc"], abs=0.02), (seed, split)
        a, b = _weights(tmp_path / "b", rec), _weights(tmp_path / "s", alone)
        assert a.keys() == b.keys()
        for k in a:  # float rounding differs (vmap's batched kernels), nothing else
            assert torch.allclose(a[k], b[k], atol=2e-3), (seed, k, (a[k] - b[k]).abs().max())
    lines = (tmp_path / "b" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["train"]["seed"] for x in lines] == SEEDS
    run = synthlab.load_run(tmp_path / "b" / batched[1]["run_id"])  # each seed is a run load_run rebuilds
    assert run.model is not None


# every kind of learned position parameter: absolute table, T5 buckets, Kerple's per-head
# scalars (projected in place), FIRE's MLP and scalars, DAPE's convolutions, Shaw's table
@pytest.mark.parametrize("pe", ["rope", "learned", "t5", "kerple", "fire", "nope+dape", "relative"])
def test_each_seed_is_clipped_and_decayed_by_its_own(pe, tmp_path):
    # a tiny clip threshold clips every step: global clipping over the stacked tensors would
    # scale each seed by the norm of all three, and the runs would part; a large weight decay
    # makes a decay applied to other parameters than a single run's (or none) show too
    ov = {**TINY, "grad_clip": 0.05, "weight_decay": 1.0, "steps": 15, "threads": 1}
    batched = train_seeds("flipflop", pe, SEEDS, preset="smoke", overrides=ov, out=tmp_path / "b")
    for seed, rec in zip(SEEDS, batched):
        alone = synthlab.train("flipflop", pe, preset="smoke", seed=seed, overrides=ov, out=tmp_path / "s")
        a, b = _weights(tmp_path / "b", rec), _weights(tmp_path / "s", alone)
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4


@pytest.mark.parametrize(
    "task, overrides, match",
    [
        ("flipflop", {"dropout": 0.1}, "dropout"),
        ("flipflop", {"eval_every": 10}, "eval_every"),
        ("even_pairs", {"warmup": 0}, "one length per batch"),
    ],
)
def test_seeds_that_cannot_stack_are_refused_before_writing(task, overrides, match, tmp_path):
    with pytest.raises(NotBatchable, match=match):
        train_seeds(
            task,
            "rope",
            SEEDS,
            preset="smoke" if task == "flipflop" else "quick",
            overrides={**TINY, **overrides},
            out=tmp_path / "out",
        )
    assert not (tmp_path / "out").exists()


def test_a_diverged_batch_records_each_seed_as_failed(tmp_path):
    recs = train_seeds(
        "flipflop", "rope", SEEDS, preset="smoke", overrides={**TINY, "lr": 1e9, "grad_clip": 0}, out=tmp_path
    )
    assert [r["status"] for r in recs] == ["failed"] * 3
    assert all(r["error"].startswith("diverged") for r in recs)


# test_sweep's tiny flip-flop sweep with three seeds a cell and CoPE beside RoPE
SWEEP = (
    TINY_SWEEP.replace('pe = ["rope", "nope"]', 'pe = ["rope", "cope"]')
    .replace("seed = [0, 1]", "seed = [0, 1, 2]")
    .replace("steps = 10,", "steps = 20, lr = 3e-3,")
)
assert SWEEP.count("seed = [0, 1, 2]") == 1 and "cope" in SWEEP and "steps = 20" in SWEEP


def test_sweep_batch_seeds_records_every_cell_as_separate_runs_do(tmp_path, capsys):
    (tmp_path / "s.toml").write_text(SWEEP)
    plain = sweeping.sweep(tmp_path / "s.toml", out=tmp_path / "plain", grids=False)
    batched = sweeping.sweep(tmp_path / "s.toml", out=tmp_path / "batched", grids=False, batch_seeds=True)
    assert len(plain) == len(batched) == 6
    by_cell = {(r["pe"], r["train"]["seed"]): r for r in plain}
    for r in batched:
        assert r["status"] == "ok" and r["train"]["batched"] == 3
        other = by_cell[(r["pe"], r["train"]["seed"])]
        assert r["metrics"]["ood-sparse"]["token_acc"] == pytest.approx(
            other["metrics"]["ood-sparse"]["token_acc"], abs=0.02
        )
    # a rerun finds every cell finished and trains nothing
    again = sweeping.sweep(tmp_path / "s.toml", out=tmp_path / "batched", grids=False, batch_seeds=True)
    assert sorted(r["run_id"] for r in again) == sorted(r["run_id"] for r in batched)


def test_ctrl_c_in_a_batch_gives_every_taken_cell_back(tmp_path, monkeypatch):
    (tmp_path / "s.toml").write_text(SWEEP)
    calls = []

    def interrupted(*a, **kw):
        calls.append(kw.get("trials"))
        raise KeyboardInterrupt

    monkeypatch.setattr(seedbatch, "run_seeds", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweeping.sweep(tmp_path / "s.toml", out=tmp_path / "o", grids=False, batch_seeds=True)
    assert len(calls) == 1 and len(calls[0]) == 3  # one cell's three seeds were taken together
    monkeypatch.undo()
    recs = sweeping.sweep(tmp_path / "s.toml", out=tmp_path / "o", grids=False, batch_seeds=True)
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs)


def test_a_sweep_trains_seeds_that_cannot_stack_one_by_one(tmp_path, capsys):
    (tmp_path / "s.toml").write_text(SWEEP.replace("model = {", "model = { dropout = 0.1,"))
    recs = sweeping.sweep(tmp_path / "s.toml", out=tmp_path / "o", grids=False, batch_seeds=True, quiet=False)
    assert len(recs) == 6 and all(r["status"] == "ok" and "batched" not in r["train"] for r in recs)
    assert capsys.readouterr().err.count("train one by one") == 2  # once per cell, not per seed


def test_a_killed_batch_resumes_from_its_checkpoint_with_the_same_results(tmp_path, monkeypatch):
    from synthlab.run import checkpoints

    ov = {**TINY, "checkpoint_every": 5, "threads": 1}
    whole = train_seeds("flipflop", "cope", SEEDS, preset="smoke", overrides=ov, out=tmp_path / "whole")
    orig = checkpoints._callback

    def stop_at_12(ck):  # a Ctrl-C after step 12: the checkpoint of step 10 stays
        cb = orig(ck)
        end = cb.on_train_batch_end

        def on_end(trainer, pl_module, *args):
            end(trainer, pl_module, *args)
            if trainer.global_step == 12:
                raise KeyboardInterrupt

        cb.on_train_batch_end = on_end
        return cb

    with monkeypatch.context() as mp:
        mp.setattr(checkpoints, "_callback", stop_at_12)
        with pytest.raises(KeyboardInterrupt):
            train_seeds("flipflop", "cope", SEEDS, preset="smoke", overrides=ov, out=tmp_path / "cut")
    (ckdir,) = (tmp_path / "cut" / checkpoints.DIRNAME).iterdir()
    ids = json.loads((ckdir / "run.json").read_text())["run_id"].split("|")
    assert len(ids) == 3 and not (tmp_path / "cut" / "results.jsonl").exists()
    again = train_seeds("flipflop", "cope", SEEDS, preset="smoke", overrides=ov, out=tmp_path / "cut")
    assert [r["run_id"] for r in again] == ids  # every seed keeps its run id
    for a, b in zip(whole, again):
        assert a["metrics"] == b["metrics"]
        wa, wb = _weights(tmp_path / "whole", a), _weights(tmp_path / "cut", b)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
        la = (tmp_path / "whole" / a["run_id"] / "metrics.jsonl").read_text()
        lb = (tmp_path / "cut" / b["run_id"] / "metrics.jsonl").read_text()
        assert la == lb  # the loss curve restored from the checkpoint
    assert not (tmp_path / "cut" / checkpoints.DIRNAME).exists()


@pytest.mark.parametrize("task", ["arithmetic", "counting", "binfa", "nfa"])
def test_tasks_that_pad_per_batch_are_refused(task, tmp_path):
    with pytest.raises(NotBatchable, match="differ in shape"):
        train_seeds(task, "rope", SEEDS, preset="smoke", overrides={"steps": 5}, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["make", "_save"])
def test_a_full_disk_leaves_no_seed_recorded_and_no_run_directory(where, tmp_path, monkeypatch):
    import errno

    from synthlab.run import rundir

    orig, calls = getattr(rundir, where), []

    def full_on_the_second(*a, **kw):
        calls.append(1)
        if len(calls) == 2:  # the second seed's directory / weights
            raise OSError(errno.ENOSPC, "No space left on device")
        return orig(*a, **kw)

    monkeypatch.setattr(rundir, where, full_on_the_second)
    with pytest.raises(OSError, match="No space"):
        train_seeds("flipflop", "rope", SEEDS, preset="smoke", overrides=TINY, out=tmp_path)
    assert not (tmp_path / "results.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # not even the first seed's directory
    monkeypatch.undo()
    recs = train_seeds("flipflop", "rope", SEEDS, preset="smoke", overrides=TINY, out=tmp_path)
    assert [r["status"] for r in recs] == ["ok"] * 3
