"""The journal's lock names its holder: on this machine a dead holder's lock is broken at
once and a live (paused) holder's never; elsewhere, or unnamed, after the grace period.

Before, any lock that stood still for 10 s was broken: a worker paused (SIGSTOP, Ctrl-Z, a
suspended batch job) while it held the lock lost it, and a killed worker's lock held every other
worker up for 10 s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from synthlab import liveness, storage


def _lock(path: Path, grace: float):
    lock = storage._repairing_lock_class()(str(path))
    lock.grace_period = grace
    return lock


def _name(pid: int, start: str | None, **other) -> bytes:
    me = liveness.worker_id()
    return json.dumps({"host": me["host"], "space": me["space"], "pid": pid, "start": start, **other}).encode()


def _acquire_within(lock, seconds: float) -> bool:
    done = threading.Event()

    def take():
        lock.acquire()
        done.set()

    threading.Thread(target=take, daemon=True).start()
    return done.wait(seconds)


def test_a_dead_holders_lock_on_this_machine_is_broken_at_once(tmp_path):
    path = tmp_path / "study.journal"
    path.write_bytes(b"")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    Path(str(path) + ".lock").write_bytes(_name(gone.pid, None))
    lock = _lock(path, grace=1000)  # the grace period plays no part here
    assert _acquire_within(lock, 10)
    assert json.loads(Path(str(path) + ".lock").read_bytes())["pid"] == os.getpid()
    lock.release()
    assert not Path(str(path) + ".lock").exists()


def test_a_paused_holders_lock_on_this_machine_is_kept_past_the_grace_period(tmp_path):
    path = tmp_path / "study.journal"
    path.write_bytes(b"")
    paused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        paused.send_signal(signal.SIGSTOP)
        held = _name(paused.pid, liveness.proc_start(paused.pid))
        Path(str(path) + ".lock").write_bytes(held)
        lock = _lock(path, grace=0.2)
        assert not _acquire_within(lock, 2.0)  # ten grace periods: still the paused holder's
        assert Path(str(path) + ".lock").read_bytes() == held
        paused.kill()
        paused.wait()
        assert _acquire_within(lock, 10)  # gone: broken at once
    finally:
        if paused.poll() is None:
            paused.kill()
            paused.wait()


def test_an_unnamed_or_half_named_lock_and_one_from_elsewhere_are_broken_after_the_grace_period(tmp_path):
    path = tmp_path / "study.journal"
    path.write_bytes(b"")
    for content in (b"", b'{"host": "x", "sp', _name(1, "1", space="another-boot pid:[1]")):
        Path(str(path) + ".lock").write_bytes(content)
        lock = _lock(path, grace=0.3)
        assert _acquire_within(lock, 10), content
        lock.release()


def test_breaking_a_lock_puts_back_one_taken_since(tmp_path):
    """Two waiters judge one dead lock; the first breaks it and takes the lock; the second's
    break must not remove the first's."""
    path = tmp_path / "study.journal"
    lockfile = Path(str(path) + ".lock")
    lockfile.write_bytes(_name(123456, "1"))
    st = os.stat(lockfile)
    judged = (st.st_ino, st.st_mtime_ns, lockfile.read_bytes())
    lockfile.unlink()
    lockfile.write_bytes(_name(os.getpid(), liveness.proc_start(os.getpid())))  # the first waiter's
    _lock(path, grace=10)._break(judged)
    assert json.loads(lockfile.read_bytes())["pid"] == os.getpid()
    assert [p.name for p in tmp_path.iterdir()] == ["study.journal.lock"]
