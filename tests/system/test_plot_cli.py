"""`synthlab plot` end to end: each picture writes a PNG; bad input exits 2 with one line on
stderr and writes nothing (spec: cli.py exit codes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from synthlab.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot-cli-runs")
    assert main(["train", "flipflop", "--pe", "cope", "--preset", "smoke", "--out", str(out), "--quiet"]) == 0
    (path,) = [p for p in out.iterdir() if p.is_dir()]
    return path


def _main(argv):
    try:
        return main(argv)
    except SystemExit as e:  # argparse errors and --help
        return e.code


@pytest.mark.parametrize(
    "argv",
    [
        ["attention", "{run}", "--sample", "3", "--split", "ood-sparse", "--layer", "0", "--head", "1"],
        ["positions", "{run}", "--head", "0"],
        ["bias", "alibi", "--max-distance", "16"],
        ["bias", "rope"],
        ["glitches", "{run}", "-n", "8"],
    ],
)
def test_each_picture_writes_a_png(run_dir, tmp_path, capsys, argv):
    out = tmp_path / "pic.png"
    assert _main([a.format(run=run_dir) for a in ["plot", *argv, "-o", str(out)]]) == 0
    assert out.read_bytes()[:8] == PNG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pic.png"]  # no temporary file left
    assert capsys.readouterr().out.strip() == f"wrote {out}"


BAD = {
    "unknown kind": (["heatmap", "{run}"], "invalid choice"),
    "not a run": (["attention", "{empty}"], "not a run directory"),
    "results dir": (["attention", "{parent}"], "runs inside it"),
    "sample out of range": (["attention", "{run}", "--sample", "32"], "out of range"),
    "negative sample": (["positions", "{run}", "--sample", "-1"], "--sample must be an integer from 0"),
    "unknown split": (["attention", "{run}", "--split", "validation"], "unknown split"),
    "layer out of range": (["attention", "{run}", "--layer", "1"], "layer 1 out of range"),
    "no such picture: bias of cope": (["bias", "{run}"], "no content-free position signal"),
    "no such picture: nope": (["bias", "nope"], "no content-free position signal"),
    "bad pe": (["bias", "rope2"], "rope2"),
    "option for another kind": (["bias", "alibi", "--sample", "2"], "--sample does not apply"),
    "glitches with --layer": (["glitches", "{run}", "--layer", "0"], "--layer does not apply"),
    "not png": (["bias", "alibi", "-o", "{tmp}/pic.jpg"], "expected a .png"),
    "missing directory": (["bias", "alibi", "-o", "{tmp}/nowhere/pic.png"], "does not exist"),
    "output is a directory": (["bias", "alibi", "-o", "{tmp}/sub.png"], "is a directory"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_with_one_line_and_writes_nothing(run_dir, tmp_path, capsys, case):
    argv, needle = BAD[case]
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "sub.png").mkdir()
    fill = {"run": run_dir, "empty": empty, "parent": run_dir.parent, "tmp": tmp_path}
    argv = [a.format(**fill) for a in argv]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "pic.png")]
    before = sorted(tmp_path.rglob("*"))
    run_files = sorted(run_dir.iterdir())
    assert _main(["plot", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("synthlab plot: error:") and needle in err, err
    assert sorted(tmp_path.rglob("*")) == before and sorted(run_dir.iterdir()) == run_files


# an environment error (not writable): exit 1 and one line naming the path
@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root writes anywhere")
def test_unwritable_directory_exits_1(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert _main(["plot", "bias", "alibi", "-o", str(locked / "pic.png")]) == 1
        assert capsys.readouterr().err == f"synthlab plot: error: {locked / 'pic.png'}: Permission denied\n"
        assert not any(locked.iterdir())
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc (not writable, even for root)")
def test_unwritable_location_exits_1(capsys):
    assert _main(["plot", "bias", "alibi", "-o", "/proc/synthlab-plot.png"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("synthlab plot: error: /proc/synthlab-plot.png: ")


def test_help_has_an_example(capsys):
    from synthlab import plot
    from synthlab.commands import plot as command

    assert command.KINDS == plot.KINDS  # the command keeps its own copy (no torch import for --help)
    assert _main(["plot", "--help"]) == 0
    out = capsys.readouterr().out
    assert "example" in out and "synthlab plot attention" in out
    for kind in plot.KINDS:
        assert kind in out


def test_the_installed_command_runs_headless(tmp_path):
    """A fresh process without a display: the entry point, the Agg canvas, the exit code."""
    out = tmp_path / "b.png"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND")}
    ok = subprocess.run(
        [sys.executable, "-m", "synthlab.cli", "plot", "bias", "xpos", "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    assert out.read_bytes()[:8] == PNG
    bad = subprocess.run(
        [sys.executable, "-m", "synthlab.cli", "plot", "bias", "cope", "-o", str(tmp_path / "c.png")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c.png").exists()
