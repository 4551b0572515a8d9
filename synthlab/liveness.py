"""Whether a sweep worker is alive: pids on this host, heartbeats from other machines.

A RUNNING trial names its worker (host, pid, the process's start time, so a reused pid is
told apart); on the same host a dead pid frees its cell at once and a live silent one is
paused, not dead; from another machine only the heartbeat (``Heartbeat``, a thread writing
``heartbeat`` every ``interval`` seconds) can tell, within the grace period. The rules are
:mod:`synthlab.scheduler`'s; this module is how they read a process.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from synthlab.progress import LiveTrial


def proc_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if start is not None and Path("/proc").is_dir():
        now = proc_start(pid)
        if now is None or now != start:
            return False
    return True


def worker_id() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": proc_start(os.getpid())}


def _started_at(t) -> float:
    return t.datetime_start.timestamp() if t.datetime_start is not None else time.time()


def claim_key(me: dict[str, Any]) -> str:
    return f"claim:{me['pid']}@{me['host']}"


def stale_reason(t, grace_period: float, me: dict[str, Any]) -> str | None:
    """Why RUNNING trial ``t`` is dead, or None if it may still be alive."""
    w = t.user_attrs.get("worker")
    last = t.user_attrs.get("heartbeat", _started_at(t))
    if not isinstance(w, dict):  # taken, its owner not written yet: the owner is one of the claimants
        claims = [c for k, c in t.user_attrs.items() if k.startswith("claim:") and isinstance(c, dict)]
        if claims and all(c.get("host") == me["host"] and (c.get("pid"), c.get("start")) != (me["pid"], me["start"])
                          and not pid_alive(int(c["pid"]), c.get("start")) for c in claims):
            return f"worker process {claims[0]['pid']} on {claims[0]['host']} is gone"
    if isinstance(w, dict) and w.get("host") == me["host"]:
        if w.get("pid") == me["pid"] and w.get("start") == me["start"]:
            return None  # our own trial
        if not pid_alive(int(w["pid"]), w.get("start")):
            return f"worker process {w['pid']} on {w['host']} is gone"
        # alive here but silent: paused (SIGSTOP, a suspended batch job, a sleeping laptop),
        # not dead; its heartbeat resumes with it. The grace period judges other machines only.
        return None
    if time.time() - float(last) > grace_period:
        return f"no heartbeat for {time.time() - float(last):.0f} s (grace period {grace_period:.0f} s)"
    return None


def is_live(t, retried: set[int]) -> bool:
    """Whether trial ``t`` holds (or will hold) its cell's result. A failed run does, until a
    --retry-failed sweep sets it aside (its number in ``retried``)."""
    from optuna.trial import TrialState

    if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE):
        return True
    return t.state == TrialState.FAIL and "record" in t.user_attrs and t.number not in retried


class Heartbeat:
    """A thread that writes ``heartbeat = time.time()`` on a running trial every ``interval`` s,
    and ``progress`` (step, steps, loss: ``live.snapshot()``) when it has moved on, for the main
    process's progress view of a helper's cell (:mod:`synthlab.progress`)."""

    def __init__(self, storage, trial_id: int, interval: float, live: LiveTrial | None = None) -> None:
        self.storage, self.trial_id, self.interval, self.live = storage, trial_id, interval, live
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="synthlab-heartbeat")

    def _run(self) -> None:
        written = None
        while not self._stop.wait(self.interval):
            try:
                self.storage.set_trial_user_attr(self.trial_id, "heartbeat", time.time())
                snap = self.live.snapshot() if self.live is not None else None
                if snap is not None and snap != written:
                    self.storage.set_trial_user_attr(self.trial_id, "progress", snap)
                    written = snap
            except Exception:  # a finished trial or a storage hiccup: the next beat retries
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
