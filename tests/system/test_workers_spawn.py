"""workers.spawn: the helpers' devices and threads, and an interrupted start stops the helpers it had started."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synthlab.study import workers


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


class _Started:
    """A Popen stand-in that records what each helper would have been started with."""

    calls: list = []

    def __init__(self, args, env=None, **kw):
        _Started.calls.append((args, env))

    def poll(self):
        return 0


@pytest.mark.parametrize(
    "visible, expect",
    [
        (None, ["1", "0", "1", "0"]),  # helpers 1..4 round robin over GPUs 0, 1; the main process is worker 0 on GPU 0
        ("2,3", ["3", "2", "3", "2"]),  # a visible-device list is honoured, never widened
    ],
)
def test_helpers_are_spread_round_robin_over_the_visible_gpus(monkeypatch, visible, expect):
    _Started.calls = []
    monkeypatch.setattr(workers.subprocess, "Popen", _Started)
    monkeypatch.setattr(workers, "gpu_count", lambda: 2)
    monkeypatch.setattr(workers, "cpu_cores", lambda: 16)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    workers.spawn(5, "synthlab.nothing", {"task": "flipflop"})
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in _Started.calls] == expect
    # 5 workers on 16 cores: 3 threads each, in the environment and in the payload
    assert all(env["OMP_NUM_THREADS"] == "3" for _, env in _Started.calls)
    assert all(json.loads(args[-1])["threads"] == 3 for args, _ in _Started.calls)


def test_on_a_cpu_the_helpers_see_no_gpu_setting(monkeypatch):
    _Started.calls = []
    monkeypatch.setattr(workers.subprocess, "Popen", _Started)
    monkeypatch.setattr(workers, "gpu_count", lambda: 0)
    monkeypatch.setattr(workers, "cpu_cores", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    workers.spawn(2, "synthlab.nothing", {})
    ((args, env),) = _Started.calls
    assert "CUDA_VISIBLE_DEVICES" not in env and env["OMP_NUM_THREADS"] == "1"
