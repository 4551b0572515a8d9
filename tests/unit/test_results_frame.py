"""synthlab.results: one flat row per run x split, the latest record per sweep cell across files,
files or OUT directories, prefixed columns for what varies, dtypes that CSV and Parquet keep."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

import synthlab
from synthlab.analysis.frames import RUN_COLUMNS, TAIL_COLUMNS
from synthlab.run import records


def rec(pe="rope", seed=0, acc=0.9, status="ok", cell=None, study=None, run_id=None, **more):
    r = {
        "schema": 1,
        "run_id": run_id or f"{pe}-{seed}",
        "task": "flipflop",
        "task_params": {"n_pairs": 16, "p_i": 0.8, "loss": "reads"},
        "pe": pe,
        "pe_params": {pe: {"base": 10000.0}},
        "positions": None,
        "rope_scaling": None,
        "preset": "smoke",
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "params": 1234},
        "train": {
            "steps": 5,
            "batch_size": 4,
            "lr": 1e-3,
            "seed": seed,
            "train_len": 32,
            "threads": 1,
            "deterministic": False,
        },
        "metrics": {"test": {"token_acc": acc, "seq_acc": acc / 2}, "ood-sparse": {"token_acc": acc / 3}},
        "by_length": None,
        "wall_s": 1.5,
        "device": "cpu",
        "synthlab": "0.1.0",
        "git": "abc",
        "study": study,
        "trial": 0 if study else None,
        "status": status,
        **more,
    }
    if cell is not None:
        r["cell"] = json.dumps({"overrides": {"model.d_model": 16, "train.lr": 1e-3}, "pe": pe, "seed": seed})
    if status != "ok":
        r.update(metrics={}, error="diverged: non-finite training loss (nan) at step 1")
    return r


def write(path, *recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_one_row_per_run_and_split_with_documented_column_order(tmp_path):
    df = synthlab.results(write(tmp_path / "results.jsonl", rec("rope"), rec("cope"), rec("nope", status="failed")))
    assert len(df) == 2 + 2 + 1
    assert list(df.columns[: len(RUN_COLUMNS)]) == list(RUN_COLUMNS)
    metrics_end = len(RUN_COLUMNS) + 2
    assert list(df.columns[len(RUN_COLUMNS) : metrics_end]) == ["token_acc", "seq_acc"]  # first-seen order
    assert list(df.columns[metrics_end : metrics_end + len(TAIL_COLUMNS)]) == list(TAIL_COLUMNS)
    assert {"task.n_pairs", "task.p_i", "task.loss", "pe.rope.base", "pe.cope.base"} <= set(df.columns)
    row = df[(df.pe == "rope") & (df.split == "ood-sparse")].iloc[0]
    assert row.token_acc == pytest.approx(0.3) and math.isnan(row.seq_acc)  # not measured on that split: NaN
    assert row.seed == 0 and row.d_model == 16 and row.params == 1234 and row["task.n_pairs"] == 16
    failed = df[df.status == "failed"]
    assert len(failed) == 1 and pd.isna(failed.split.iloc[0]) and failed.error.iloc[0].startswith("diverged")
    assert str(df["seed"].dtype) == "Int64" and str(df["lr"].dtype) == "float64"
    assert str(df["deterministic"].dtype) == "boolean" and df["task.p_i"].dtype == "float64"
    # records from before train.precision / train.compile existed leave them empty
    assert df["precision"].isna().all() and str(df["compile"].dtype) in ("string", "boolean")


def test_latest_record_per_cell_across_files_and_directories(tmp_path):
    a, b = tmp_path / "m1", tmp_path / "m2"
    a.mkdir(), b.mkdir()
    write(
        a / "results.jsonl",
        rec("rope", status="failed", cell=True, study="s", run_id="first"),
        rec("cope", cell=True, study="s"),
    )
    write(b / "results.jsonl", rec("rope", acc=0.5, cell=True, study="s", run_id="retried"))
    df = synthlab.results([a, b / "results.jsonl"])
    assert sorted(set(df.run_id)) == ["cope-0", "retried"]  # the failure was replaced by its retry
    assert df.loc[df.run_id == "retried", "token_acc"].iloc[0] == pytest.approx(0.5)
    assert set(df["set.model.d_model"]) == {16} and set(df["set.train.lr"]) == {1e-3}  # the cell's settings
    assert list(synthlab.results(a).run_id.unique()) == ["first", "cope-0"]
    c = tmp_path / "sweep-out"
    c.mkdir()
    write(c / "study-results.jsonl", rec("alibi"))  # an OUT dir with only the rebuilt file
    assert set(synthlab.results(c).pe) == {"alibi"}


def test_records_with_lists_other_fields_and_clashing_metric_names(tmp_path):
    r = rec("rope", checkpoint="flipflop-rope")
    r["task_params"]["ood_lengths"] = [64, 128]
    r["metrics"]["test"]["error"] = 0.1  # a metric named like a column
    r["train"]["eval_every"] = 10
    other = rec("cope")
    other["task_params"]["loss"] = 3  # text in one run, a number in another: text
    df = synthlab.results([r, other])
    assert df.loc[0, "task.ood_lengths"] == "[64, 128]" and df.loc[0, "checkpoint"] == "flipflop-rope"
    assert df.loc[0, "metric.error"] == pytest.approx(0.1) and df["train.eval_every"].iloc[0] == 10
    assert list(df["task.loss"]) == ["reads", "reads", "3", "3"]
    assert "curve" not in df.columns and "by_length" not in df.columns


def test_bad_inputs_say_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        synthlab.results(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="directory without results.jsonl or study-results.jsonl"):
        synthlab.results(tmp_path)
    with pytest.raises(ValueError, match="holds no result records"):
        synthlab.results(write(tmp_path / "empty.jsonl"))
    nan = tmp_path / "nan.jsonl"
    nan.write_text(json.dumps(rec()).replace('"token_acc": 0.9', '"token_acc": NaN') + "\n")
    with pytest.raises(ValueError, match="nan.jsonl.*metrics.test.token_acc is NaN"):
        synthlab.results(nan)
    with pytest.raises(ValueError, match="no results given"):
        synthlab.results([])


def test_a_cell_finished_on_one_machine_and_failed_on_another_is_finished_in_either_order(tmp_path):
    # the latest record by file order let machine 2's failure replace machine 1's finished run
    # whenever the files were given in that order (a grid cell went from n 1 to failed)
    a, b = tmp_path / "m1.jsonl", tmp_path / "m2.jsonl"
    write(a, rec("rope", acc=0.7, cell=True, study="s", run_id="done"))
    write(b, rec("rope", status="failed", cell=True, study="s", run_id="oom"))
    for order in ([a, b], [b, a]):
        df = synthlab.results(order)
        assert list(df.run_id.unique()) == ["done"] and df.token_acc.iloc[0] == pytest.approx(0.7)
    recs = [json.loads(line) for p in (a, b) for line in p.read_text().splitlines()]
    assert [r["run_id"] for r in records.latest_records(recs)] == ["done"]
