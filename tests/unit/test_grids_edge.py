"""Grids at their edges: failed cells marked (all or some), a results file synthlab never
writes refused, per-length grids of per-split results refused, PNG + CSV + Markdown all or none."""

from __future__ import annotations

import json
import math

import pytest

from synthlab.analysis import grids
from synthlab.analysis.tables import check_records


def rec(pe, seed, acc, status="ok", task="flipflop", by_length=None):
    r = {
        "schema": 1,
        "run_id": f"{pe}-{seed}",
        "task": task,
        "task_params": {"n_pairs": 16},
        "pe": pe,
        "positions": None,
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "params": 1},
        "train": {"steps": 5, "batch_size": 4, "lr": 1e-3, "seed": seed, "train_len": 32},
        "metrics": {"test": {"token_acc": acc}, "ood-sparse": {"token_acc": acc}, "ood-dense": {"token_acc": acc}},
        "by_length": by_length,
        "study": None,
        "trial": None,
        "status": status,
    }
    if status != "ok":
        r.update(metrics={}, error="diverged")
    return r


def test_an_all_failed_grid_has_its_columns_and_every_cell_marked(tmp_path):
    g = grids.grid([rec("rope", 0, 0, "failed"), rec("cope", 0, 0, "failed")], kind="ood", out=tmp_path / "g.png")
    # flipflop's sweep file names the splits, so the columns are there though no run finished
    assert list(g.mean.columns) == ["test", "ood-sparse", "ood-dense"] and g.mean.isna().all().all()
    assert all(cell.startswith("failed\n(1 run)") for row in g.labels() for cell in row)
    assert (g.runs, g.runs_failed) == (2, 2)
    assert "2 of 2 runs failed" in g.markdown() and "| rope | failed (1 run)" in g.markdown()
    fig, ax = g.plot()
    assert "2 of 2 runs failed" in ax.get_title()
    assert sum(t.get_text().startswith("failed") for t in ax.texts) == 6  # every cell labelled, not blank
    assert len(ax.patches) == 6  # and hatched


def test_a_grid_without_any_known_column_still_shows_the_failures():
    g = grids.make_grid(grids.tidy([rec("rope", 0, 0, "failed")]), "ood", "length", "pe", split="ood")
    assert list(g.mean.columns) == ["(failed)"] and g.labels() == [["failed\n(1 run)"]]


def test_some_failed_seeds_are_counted_in_the_cell():
    recs = [rec("rope", 0, 0.8), rec("rope", 1, 0, "failed")]
    g = grids.make_grid(grids.tidy(recs), "ood", "split", "pe", split=["test"])
    assert g.labels() == [["80.0\n(n 1, 1 failed)"]]
    assert "1 of 2 runs failed" in g.markdown()


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda r: r["metrics"]["test"].update(token_acc=math.nan), r"metrics.test.token_acc is NaN"),
        (lambda r: r["metrics"]["test"].update(token_acc=math.inf), r"is NaN or infinite"),
        (lambda r: r["metrics"]["test"].update(token_acc="0.9"), r"is not a number \('0.9'\)"),
        (lambda r: r["metrics"]["test"].update(token_acc=True), r"is not a number \(True\)"),
        (lambda r: r.update(by_length={"41": math.nan}), r"by_length.41 is NaN"),
        (lambda r: r.update(task="nosuchtask"), r"unknown task 'nosuchtask'"),
    ],
)
def test_values_synthlab_never_writes_are_refused(edit, match):
    r = rec("rope", 0, 0.9)
    edit(r)
    with pytest.raises(ValueError, match=match):
        grids.grid([r])
    check_records([rec("rope", 0, 0.9), {**rec("rope", 1, 0.5), "metrics": {"test": {"token_acc": None}}}], "x")


def test_a_nan_literal_in_a_file_is_refused_naming_the_file_and_record(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps(rec("rope", 0, 0.9)) + "\n" + json.dumps(rec("cope", 0, 0.5)).replace("0.5", "NaN", 1) + "\n"
    )
    with pytest.raises(ValueError, match=r"results file '.*r.jsonl': record 2 \(run cope-0\): metrics.test"):
        grids.grid(path)
    with pytest.raises(ValueError, match="is a directory"):
        grids.grid(tmp_path)


def test_a_length_grid_of_per_split_results_says_why():
    with pytest.raises(ValueError, match=r"no per-length metrics \(flipflop: evaluated per split.*--x split"):
        grids.grid([rec("rope", 0, 0.9)], kind="ood", x="length")
    che = rec("rope", 0, 0.9, task="even_pairs", by_length={"41": 0.5})
    che["metrics"] = {"test": {"token_acc": 0.9}, "ood": {"token_acc": 0.5}}  # the lengths are ood's
    with pytest.raises(ValueError, match=r"no per-length metrics on split 'test' \(per-length splits: ood"):
        grids.make_grid(grids.tidy([che]), "ood", "length", "pe", split="test")
    assert list(grids.grid([che], kind="ood", x="length").mean.columns) == [41]


def test_save_writes_all_three_files_or_none(tmp_path):
    g = grids.grid([rec("rope", 0, 0.9)], kind="ood")
    (tmp_path / "g.md").mkdir()  # the third file cannot be written
    with pytest.raises(ValueError, match="is a directory"):
        g.save(tmp_path / "g.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.md"]
    (tmp_path / "g.md").rmdir()
    assert set(g.save(tmp_path / "g.png")) == {"png", "csv", "md"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.csv", "g.md", "g.png"]  # no temporary file left


def test_save_draws_no_picture_whose_table_is_there_unchanged(tmp_path, monkeypatch):
    """A finished sweep run again saves the same grids: the PNG of a table whose CSV and
    Markdown are there byte for byte is not drawn again (no matplotlib); any change redraws."""
    g = grids.grid([rec("rope", 0, 0.9)], kind="ood")
    files = g.save(tmp_path / "g.png")
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}

    def no_drawing(*a, **k):
        raise AssertionError("drawn again")

    monkeypatch.setattr(grids.Grid, "plot", no_drawing)
    assert g.save(tmp_path / "g.png") == files
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    other = grids.grid([rec("rope", 0, 0.8)], kind="ood")  # another number: drawn
    with pytest.raises(AssertionError, match="drawn again"):
        other.save(tmp_path / "g.png")
    (tmp_path / "g.png").unlink()  # the picture gone: drawn
    with pytest.raises(AssertionError, match="drawn again"):
        g.save(tmp_path / "g.png")
