"""RESULTS.md is generated from the committed reference results (results/), never typed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from synthlab.cli import main
from synthlab.report import report

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_report_is_what_the_committed_results_give():
    """Fails when a results folder changed and RESULTS.md was not regenerated
    (`synthlab report results -o RESULTS.md`)."""
    assert (REPO / "RESULTS.md").read_text(encoding="utf-8") == report(REPO / "results"), \
        "RESULTS.md is stale: run `synthlab report results -o RESULTS.md` from the repository root"


def _flipflop_folder(root: Path, rope_errors: list[float]) -> Path:
    from test_verdicts import COPE, _records

    folder = root / "flipflop-quick"
    folder.mkdir(parents=True)
    recs = _records(COPE[:len(rope_errors)], rope_errors)
    for r in recs:
        r.update(machine={"cpu": "AMD EPYC", "arch": "x86_64", "isa": "avx2", "torch": "2.13.0"}, git="abc1234")
        r["train"]["threads"] = 1
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return folder


def test_report_names_machine_grids_and_claims(tmp_path):
    from test_verdicts import ROPE

    folder = _flipflop_folder(tmp_path / "results", ROPE)
    (folder / "run.json").write_text(json.dumps({"command": "synthlab sweep flipflop --pe cope,rope --seeds 10"}))
    text = report(tmp_path / "results")
    assert "## flipflop, quick preset (`results/flipflop-quick/`)" in text
    assert "`synthlab sweep flipflop --pe cope,rope --seeds 10`" in text
    assert "- AMD EPYC (x86_64, avx2), torch 2.13.0, 1 thread(s) a run, synthlab abc1234: 20 runs" in text
    assert "| rope | 0.0 ±0.0 (n 10) | 16.1 ±11.4 (n 10) |" in text
    assert "**supported**: the claimed way" in text and "20 runs (0 failed), seeds 0-9" in text
    # an --until-decided run: judged as its looks judged it
    (folder / "run.json").write_text(json.dumps({"command": "...", "looks": [8, 10], "reached": 10}))
    assert "(look 1 of 2, 8 seeds" in report(tmp_path / "results")


def test_report_command_writes_checks_and_refuses_bad_input(tmp_path, capsys):
    from test_verdicts import ROPE

    _flipflop_folder(tmp_path / "results", ROPE[:6])
    out = tmp_path / "R.md"
    assert main(["report", str(tmp_path / "results"), "-o", str(out)]) == 0
    assert main(["report", str(tmp_path / "results"), "-o", str(out), "--check"]) == 0
    out.write_text(out.read_text() + "typed by hand\n")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "results"), "-o", str(out), "--check"]) == 1
    assert "is stale" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "X.md")]) == 2
    assert not (tmp_path / "X.md").exists() and "not a directory of results" in capsys.readouterr().err
    bad = tmp_path / "results" / "flipflop-quick" / "run.json"
    bad.write_text("{not json")
    assert main(["report", str(tmp_path / "results"), "-o", str(tmp_path / "X.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run.json" in err[0] and not (tmp_path / "X.md").exists()
