"""workers.spawn interrupted half-way stops the helpers it had started."""

from __future__ import annotations

import subprocess
import sys

import pytest

from synthlab import workers


def test_a_ctrl_c_while_helpers_start_stops_the_ones_already_started(monkeypatch):
    """Ctrl-C between two helper starts: the caller never got the list, so the first helper
    ran on (from `synthlab.sweep()` in a notebook that catches KeyboardInterrupt it kept
    training cells); now spawn stops it before the interrupt goes on."""
    started = []
    real = subprocess.Popen

    def popen(args, **kw):
        if started:
            raise KeyboardInterrupt
        p = real([sys.executable, "-c", "import time; time.sleep(60)"], **kw)
        started.append(p)
        return p

    monkeypatch.setattr(workers.subprocess, "Popen", popen)
    monkeypatch.setattr(workers, "gpu_count", lambda: 0)
    with pytest.raises(KeyboardInterrupt):
        workers.spawn(3, "synthlab.nothing", {})
    (first,) = started
    assert first.poll() is not None  # stopped and reaped, not left running
