"""SIGTERM (a batch scheduler's preemption, `timeout`) stops `synthlab train` as Ctrl-C does:
exit 130, one line, nothing left behind (no run directory, no record)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_train_stopped_by_a_signal_exits_130_and_leaves_nothing(tmp_path, sig):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "synthlab.cli",
            "train",
            "flipflop",
            "--pe",
            "rope",
            "--preset",
            "quick",
            "--out",
            str(out),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (out.exists() and any(out.iterdir())) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)  # the run directory exists: training has started
    assert proc.poll() is None, proc.communicate()
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["synthlab: interrupted"]
    assert not out.exists() or not any(p for p in out.rglob("*") if p.is_file()), sorted(out.rglob("*"))


def test_a_stop_caught_inside_a_string_evaluation_still_exits_130(tmp_path):
    """`python -m synthlab.cli` stopped while an import made a namedtuple printed its line and
    then died by SIGINT (returncode -2): CPython's flag for an unhandled Ctrl-C was left set by
    the KeyboardInterrupt leaving the namedtuple's `eval`, though main() caught it."""
    (tmp_path / "stopped_in_eval.py").write_text(
        "from synthlab.cli import exit_as_main\n"
        "try:\n"
        "    eval('(_ for _ in ()).throw(KeyboardInterrupt)')  # as a signal inside namedtuple()\n"
        "except KeyboardInterrupt:\n"
        "    pass\n"
        "exit_as_main(130)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run([sys.executable, "-m", "stopped_in_eval"], cwd=tmp_path, env=env, capture_output=True)
    assert proc.returncode == 130, proc.stderr
