"""Less waiting before and after the work: what the listings and a finished sweep
run again import, checked in fresh processes (the module lists, not timings).

A finished sweep run again (same command, nothing left to run) reads the study, writes nothing
to it, never imports the trainer (torch, Lightning) and redraws no picture whose table is
unchanged (no matplotlib); the listings import neither torch nor Optuna.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synthlab.study import sweeping

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_kit import FakeTrain, as_run, write_sweep  # noqa: E402  (the fake trainer and tiny sweep file)

HEAVY = ("torch", "lightning", "optuna", "matplotlib", "seaborn", "pandas")

# runs the CLI in this process, then prints the exit code and which heavy modules it loaded
PROBE = """
import json, sys
from synthlab.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "loaded": [m for m in %r if m in sys.modules]}), file=sys.stderr)
""" % (HEAVY,)


def probe(argv: list[str], cwd: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    return json.loads(r.stderr.strip().splitlines()[-1]), r.stdout


@pytest.mark.parametrize("argv", [["--help"], ["tasks"], ["encodings"], ["sweep", "--help"], ["train", "--help"]])
def test_the_listings_import_no_torch_and_no_optuna(tmp_path, argv):
    got, out = probe(argv, tmp_path)
    assert got["code"] == 0 and out.strip()
    assert not {"torch", "lightning", "optuna"} & set(got["loaded"]), got


def test_a_finished_sweep_run_again_imports_no_trainer_and_writes_nothing_to_the_study(tmp_path, monkeypatch):
    import synthlab.run.training

    monkeypatch.setattr(synthlab.run.training, "run", as_run(FakeTrain()))
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    first = sweeping.sweep(path, out=out, quiet=True)  # the cells' records, made in this process
    journal = (out / sweeping.JOURNAL_NAME).read_bytes()
    drawn = {p.name: p.stat().st_mtime_ns for p in (out / "grids").iterdir()}
    got, printed = probe(["sweep", str(path), "--out", str(out), "--quiet"], tmp_path)
    assert got["code"] == 0
    assert not {"torch", "lightning", "matplotlib", "seaborn"} & set(got["loaded"]), got
    assert "study tiny-smoke: 4/4 cells finished" in printed and "| rope |" in printed
    assert (out / sweeping.JOURNAL_NAME).read_bytes() == journal  # read only
    assert {p.name: p.stat().st_mtime_ns for p in (out / "grids").iterdir()} == drawn  # nothing redrawn
    assert sorted(
        r["run_id"] for r in map(json.loads, (out / "study-results.jsonl").read_text().splitlines())
    ) == sorted(r["run_id"] for r in first)
    # a picture that is gone is drawn again
    (out / "grids" / "ood.png").unlink()
    got, _ = probe(["sweep", str(path), "--out", str(out), "--quiet"], tmp_path)
    assert got["code"] == 0 and "matplotlib" in got["loaded"] and "torch" not in got["loaded"]
    assert (out / "grids" / "ood.png").is_file()
    # a bad setting is no finished cell: the trainer validates it and refuses it, as before
    got, _ = probe(["sweep", str(path), "--out", str(out), "--quiet", "--set", "steps=1e15"], tmp_path)
    assert got["code"] == 2 and "torch" in got["loaded"]


def test_only_a_grid_with_nothing_left_to_run_takes_the_short_path(tmp_path, monkeypatch):
    """A failed cell is finished, unless --retry-failed; another study, or more seeds, is not."""
    import synthlab.run.training
    from sweep_kit import failing_fake

    monkeypatch.setattr(synthlab.run.training, "run", as_run(failing_fake()))
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    sweeping.sweep(path, out=out, quiet=True)
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    url = str(out / sweeping.JOURNAL_NAME)
    assert sweeping._finished(cells, url, "tiny-smoke", retry_failed=False) is not None
    assert sweeping._finished(cells, url, "tiny-smoke", retry_failed=True) is None
    assert sweeping._finished(cells, url, "another-study", retry_failed=False) is None
    more = sweeping.expand_cells(sweeping.load_sweep(path), "smoke", seeds=[0, 1, 2])
    assert sweeping._finished(more, url, "tiny-smoke", retry_failed=False) is None
