"""The result commands end to end: `synthlab export` (CSV / Parquet), `synthlab generate --format
parquet`, `synthlab curves`, `synthlab grid`'s by-length plot; bad input exits 2 with one line and
writes nothing."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from synthlab.cli import main


def rec(pe="rope", seed=0, acc=0.9, curve=True, by_length=None, task="flipflop"):
    r = {
        "schema": 1,
        "run_id": f"{pe}-{seed}",
        "task": task,
        "task_params": {"n_pairs": 16, "loss": "reads"},
        "pe": pe,
        "pe_params": {pe: {"base": 10000.0}},
        "positions": None,
        "rope_scaling": None,
        "preset": "smoke",
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "params": 1},
        "train": {"steps": 20, "batch_size": 4, "lr": 1e-3, "seed": seed, "train_len": 32, "threads": 1},
        "metrics": {"test": {"token_acc": acc, "seq_acc": acc}, "ood-sparse": {"token_acc": acc / 2}},
        "by_length": by_length,
        "wall_s": 1.0,
        "device": "cpu",
        "study": None,
        "trial": None,
        "status": "ok",
    }
    if curve:
        r["curve"] = [
            {"step": s, "split": sp, "token_acc": acc * s / 20, "seq_acc": acc * s / 40}
            for s in (0, 10, 20)
            for sp in ("test", "ood-sparse")
        ]
    return r


def listing(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text(
        "".join(json.dumps(rec(pe, s, a)) + "\n" for pe, a in (("rope", 0.8), ("cope", 1.0)) for s in (0, 1))
    )
    (tmp_path / "plain.jsonl").write_text(json.dumps(rec(curve=False)) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "adir").mkdir()
    return tmp_path


def run_cli(argv, capsys):
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own refusals (an unknown choice)
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, [ln for ln in captured.err.splitlines() if ln.strip()]


def test_export_csv_and_parquet_hold_the_same_table(ws, capsys):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'synthlab-pe[parquet]')")
    code, out, _ = run_cli(["export", "out"], capsys)  # an OUT directory; csv beside its results.jsonl
    assert code == 0 and "wrote out/results.csv (8 rows" in out
    csv = pd.read_csv(ws / "out" / "results.csv")
    assert len(csv) == 8 and list(csv.columns[:3]) == ["run_id", "study", "trial"]
    assert run_cli(["export", "out/results.jsonl", "-o", "r.parquet"], capsys)[0] == 0  # format from the suffix
    pq = pd.read_parquet(ws / "r.parquet")
    assert list(pq.columns) == list(csv.columns) and len(pq) == 8
    assert pq["token_acc"].tolist() == pytest.approx(csv["token_acc"].tolist(), nan_ok=True)
    assert pq["seed"].tolist() == csv["seed"].tolist() and str(pq["seed"].dtype) == "Int64"
    assert [p.name for p in ws.iterdir() if p.name.startswith(".")] == []  # no temporary file left


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["export", "out", "--format", "xlsx"], "invalid choice: 'xlsx'"),
        (["export", "missing.jsonl"], "results file 'missing.jsonl' does not exist"),
        (["export", "adir"], "'adir' is a directory without results.jsonl"),
        (["export", "empty.jsonl"], "holds no result records"),
        (["export", "out", "-o", "adir"], "'adir' is a directory"),
        (["export", "out", "-o", "nodir/x.csv"], "directory 'nodir' does not exist"),
        (["export", "out", "--format", "csv", "-o", "x.parquet"], "--format csv but -o 'x.parquet' names a parquet"),
        pytest.param(
            ["generate", "flipflop", "--format", "parquet"],
            "give -o FILE.parquet",  # pyarrow is asked for first
            marks=pytest.mark.skipif(
                importlib.util.find_spec("pyarrow") is None,
                reason="pyarrow is not installed (pip install 'synthlab-pe[parquet]')",
            ),
        ),
        (["curves", "plain.jsonl"], "no learning curves in 'plain.jsonl': train with --set train.eval_every=N"),
        (["curves", "out", "--metric", "loss"], "--metric 'loss' is not in the learning curves"),
        (["curves", "out", "--out", "plain.jsonl"], "'plain.jsonl' is a file, not a directory"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(ws, capsys, argv, needle):
    before = listing(ws)
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err) == 1 and needle in err[0], err
    assert listing(ws) == before


@pytest.mark.parametrize(
    "argv", [["export", "out", "--format", "parquet"], ["generate", "flipflop", "-o", "s.parquet"]]
)
def test_parquet_without_pyarrow_names_the_extra_and_writes_nothing(ws, capsys, monkeypatch, argv):
    for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    before = listing(ws)
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and len(err) == 1 and "pip install 'synthlab-pe[parquet]'" in err[0]
    assert listing(ws) == before


def test_generate_parquet_is_the_jsonl_content_in_a_flat_schema(ws, capsys, monkeypatch):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (pip install 'synthlab-pe[parquet]')")

    from synthlab.commands import generate

    monkeypatch.setattr(generate, "CHUNK", 8)  # several row groups, and a last one that is partial
    for name in ("a.jsonl", "a.parquet", "b.parquet"):
        assert (
            main(
                [
                    "generate",
                    "flipflop",
                    "--split",
                    "ood-sparse",
                    "-n",
                    "20",
                    "--seed",
                    "5",
                    "--set",
                    "n_pairs=8",
                    "-o",
                    name,
                ]
            )
            == 0
        )
    table = pq.read_table(ws / "a.parquet")
    assert [str(t) for t in table.schema.types] == [
        "string",
        "string",
        "int64",
        "int64",
        "string",
        "list<element: string>",
        "list<element: int64>",
        "list<element: int64>",
        "list<element: string>",
    ]
    rows = table.to_pylist()
    for r in rows:
        r["params"] = json.loads(r["params"])
    assert rows == [json.loads(line) for line in (ws / "a.jsonl").read_text().splitlines()]
    assert pq.ParquetFile(ws / "a.parquet").num_row_groups == 3 and len(rows) == 20
    assert pq.read_table(ws / "b.parquet").equals(table)  # same seed, same table
    assert main(["generate", "flipflop", "-n", "0", "--format", "parquet", "-o", "none.pq"]) == 0
    assert pq.read_table(ws / "none.pq").schema.equals(table.schema)  # an empty file keeps the schema


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux): a directory no file can be made in")
def test_generate_parquet_that_cannot_be_written_names_the_output_and_leaves_nothing(capsys):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'synthlab-pe[parquet]')")
    assert main(["generate", "flipflop", "-n", "3", "-o", "/proc/x.parquet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["synthlab generate: error: /proc/x.parquet: No such file or directory"]
    assert not list(Path("/proc").glob(".x.parquet*"))


def test_curves_command_writes_png_and_csv_under_out_grids(ws, capsys):
    code, out, _ = run_cli(["curves", "out", "--metric", "seq_acc"], capsys)
    assert code == 0 and out.strip() == "wrote out/grids/curves-seq_acc.png, out/grids/curves-seq_acc.csv"
    drawn = pd.read_csv(ws / "out" / "grids" / "curves-seq_acc.csv")
    assert (
        len(drawn) == 4 * 6 and set(drawn.encoding) == {"rope", "cope"} and set(drawn.panel) == {"test", "ood-sparse"}
    )
    assert (ws / "out" / "grids" / "curves-seq_acc.png").stat().st_size > 1000
    assert run_cli(["curves", "out/results.jsonl", "--out", "mine"], capsys)[0] == 0  # flipflop's headline metric
    assert sorted(os.listdir(ws / "mine")) == ["curves-token_acc.csv", "curves-token_acc.png"]


def test_grid_command_writes_the_by_length_plot_beside_the_ood_heatmap(ws, capsys):
    recs = [
        rec(pe, s, 0.9, curve=False, task="even_pairs", by_length={"41": 0.9, "50": 0.6 - 0.1 * s})
        for pe in ("rope", "alibi")
        for s in (0, 1)
    ]
    for r in recs:
        r["metrics"] = {"test": {"token_acc": 0.9}, "ood": {"token_acc": 0.7}}
    (ws / "che.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, out, _ = run_cli(["grid", "che.jsonl", "-o", "g.png"], capsys)
    assert code == 0 and "g-by-length.png" in out.splitlines()[-1]
    lengths = pd.read_csv(ws / "g-by-length.csv")
    assert len(lengths) == 8 and sorted(set(lengths.length)) == [41, 50]
    (ws / "h-by-length.csv").mkdir()  # in the way: refused before anything is written
    before = listing(ws)
    code, _, err = run_cli(["grid", "che.jsonl", "-o", "h.png"], capsys)
    assert code == 2 and "'h-by-length.csv' is a directory" in err[0] and listing(ws) == before


def test_every_task_round_trips_through_parquet(ws, capsys):
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (pip install 'synthlab-pe[parquet]')")

    from synthlab import generators

    for task in generators.TASKS:
        assert main(["generate", task, "--split", "test", "-n", "2", "-o", "t.parquet"]) == 0
        assert main(["generate", task, "--split", "test", "-n", "2", "-o", "t.jsonl"]) == 0
        rows = pq.read_table(ws / "t.parquet").to_pylist()
        assert [{**r, "params": json.loads(r["params"])} for r in rows] == [
            json.loads(line) for line in (ws / "t.jsonl").read_text().splitlines()
        ], task


@pytest.mark.slow
def test_real_runs_with_eval_every_draw_their_curves_and_export(tmp_path, capsys):
    """Two tiny runs trained with train.eval_every: the curves drawn end at the record's metrics."""
    from synthlab.run.training import train

    out = tmp_path / "runs"
    recs = [
        train(
            "flipflop",
            pe,
            preset="smoke",
            out=out,
            quiet=True,
            overrides={"train.eval_every": 10, "steps": 20, "d_model": 16},
        )
        for pe in ("rope", "nope")
    ]
    assert all(r["status"] == "ok" and r["curve"] for r in recs)
    assert main(["curves", str(out), "--split", "test"]) == 0
    drawn = pd.read_csv(out / "grids" / "curves-token_acc-test.csv")
    assert sorted(set(drawn.step)) == [10, 20] and set(drawn.encoding) == {"rope", "nope"}
    for r in recs:
        last = drawn[(drawn.run_id == r["run_id"]) & (drawn.step == 20)].token_acc.iloc[0]
        assert last == pytest.approx(r["metrics"]["test"]["token_acc"])
    assert main(["export", str(out), "-o", str(tmp_path / "r.csv")]) == 0
    table = pd.read_csv(tmp_path / "r.csv")
    assert len(table) == 2 * len(recs[0]["metrics"]) and "curve" not in table.columns
    assert set(table.run_id) == {r["run_id"] for r in recs}
