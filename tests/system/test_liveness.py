"""Liveness of sweep workers across machines: pid spaces and clocks that disagree.

A worker elsewhere is judged by its heartbeat; "elsewhere" is another pid space (another
machine or container, even under the same host name), and the heartbeat's silence is timed on
this machine's clock, so a skewed clock neither reaps a live worker nor keeps a dead one."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from synthlab.core import processes
from synthlab.study import liveness


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def running(worker: dict, heartbeat: float, number: int = 7):
    class Trial:  # what stale_reason reads of a RUNNING trial
        user_attrs = {"worker": worker, "heartbeat": heartbeat}
        datetime_start = None

    Trial.number = number
    return Trial


def elsewhere(beat: float = 30.0) -> dict:
    return {"host": "node-b", "pid": 4242, "start": "1", "space": "another-boot pid:[4026531836]", "beat": beat}


def test_worker_id_names_its_pid_space_and_beat():
    me = processes.worker_id(12.0)
    assert me["beat"] == 12.0 and me["pid"] == os.getpid()
    if os.path.exists("/proc/self/ns/pid"):
        assert me["space"] and me["space"].endswith(os.readlink("/proc/self/ns/pid"))


def test_same_host_name_in_another_pid_space_is_judged_by_its_heartbeat_not_by_a_pid_here():
    """Two containers (or machines) with one host name: a pid that is dead here may be alive
    there. Before, its cell was reaped at once ("is gone") while its worker trained on."""
    me = processes.worker_id()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    other = {"host": me["host"], "pid": gone.pid, "start": "1", "space": "another-boot pid:[4026531836]", "beat": 30.0}
    assert liveness.stale_reason(running(other, time.time()), 180, me, liveness.SilenceWatch()) is None
    # the same worker in this pid space: its pid decides, at once
    here = dict(other, space=me["space"])
    assert "is gone" in liveness.stale_reason(running(here, time.time()), 180, me, liveness.SilenceWatch())
    # a worker named by an older synthlab (no space): the host name decides, as before
    old = {k: v for k, v in other.items() if k not in ("space", "beat")}
    assert "is gone" in liveness.stale_reason(running(old, time.time()), 180, me, liveness.SilenceWatch())


def test_a_live_worker_whose_clock_is_behind_is_never_reaped():
    """Its heartbeats read 500 s old here (more than the grace period, within CLOCK_SKEW), but
    they keep changing. Before, the first look reaped it (its run then could not be recorded,
    and its cell ran twice)."""
    clock, me = Clock(), processes.worker_id()
    watch = liveness.SilenceWatch(clock)
    for beat in range(20):  # one look per beat, for 20 beats
        t = running(elsewhere(), time.time() - 500 + beat * 30)
        assert liveness.stale_reason(t, 180, me, watch) is None
        clock.now += 30


def test_a_dead_worker_whose_clock_is_ahead_is_reaped_after_the_grace_period_here():
    """Its last heartbeat reads 1,000 s in the future here. Before, it was never reaped until
    this machine's clock passed it (its cell never ran again)."""
    clock, me = Clock(), processes.worker_id()
    watch = liveness.SilenceWatch(clock)
    t = running(elsewhere(), time.time() + 1000)
    assert liveness.stale_reason(t, 180, me, watch) is None
    clock.now += 179
    assert liveness.stale_reason(t, 180, me, watch) is None
    clock.now += 2
    assert "unchanged for 181 s" in liveness.stale_reason(t, 180, me, watch)


def test_an_old_heartbeat_is_reaped_once_it_stands_still_for_three_beats_here_or_at_once_beyond_the_skew():
    """A worker dead for a while (its heartbeat old by this clock too) is not made to wait the
    whole grace period after a restart, only three of its beats; one dead for longer than any
    clock skew is reaped at the first look (a batch job with --trials 1 looks once)."""
    clock, me = Clock(), processes.worker_id()
    watch = liveness.SilenceWatch(clock)
    t = running(elsewhere(beat=10.0), time.time() - 300)
    assert liveness.stale_reason(t, 180, me, watch) is None  # first sighting
    clock.now += 29
    assert liveness.stale_reason(t, 180, me, watch) is None
    clock.now += 2
    assert "no heartbeat for 300 s" in liveness.stale_reason(t, 180, me, watch)
    # a worker that names no beat (an older synthlab): 30 s beats, so 90 s here
    t2 = running({k: v for k, v in elsewhere().items() if k != "beat"}, time.time() - 300, number=8)
    assert liveness.stale_reason(t2, 180, me, watch) is None
    clock.now += 89
    assert liveness.stale_reason(t2, 180, me, watch) is None
    clock.now += 2
    assert liveness.stale_reason(t2, 180, me, watch) is not None
    # older than the grace period plus CLOCK_SKEW: at the first look
    t3 = running(elsewhere(), time.time() - 180 - liveness.CLOCK_SKEW - 5, number=9)
    assert "no heartbeat" in liveness.stale_reason(t3, 180, me, liveness.SilenceWatch(clock))


def test_a_killed_helper_not_yet_waited_for_is_dead():
    """A zombie (SIGKILLed or OOM-killed helper whose parent has not waited yet) answers
    kill(pid, 0) and keeps its start time: it was judged alive, so its cell was never reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = processes.proc_start(child.pid)
    try:
        deadline = time.time() + 30
        while processes._zombie(child.pid) is False and time.time() < deadline:
            time.sleep(0.05)
        assert processes._zombie(child.pid)
        assert not processes.pid_alive(child.pid, start)
    finally:
        child.wait()
    me = processes.worker_id()
    assert processes.pid_alive(os.getpid(), me["start"])


def test_claims_of_one_pid_on_one_host_name_in_two_pid_spaces_do_not_collide():
    a = {"host": "worker", "pid": 7, "start": "1", "space": "boot-a pid:[1]"}
    b = dict(a, space="boot-b pid:[1]")
    assert liveness.claim_key(a) != liveness.claim_key(b)
    assert liveness.claim_key(a).startswith("claim:7@worker")
    assert liveness.claim_key({"host": "worker", "pid": 7}) == "claim:7@worker"
