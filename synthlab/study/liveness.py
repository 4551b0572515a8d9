"""Whether a sweep worker is alive: pids on this host, heartbeats from other machines.

In the same pid space a dead pid frees its cell at once and a live silent one is paused, not
dead; from anywhere else only the heartbeat (:class:`Heartbeat`) tells, its silence timed on
this machine's clock (:class:`SilenceWatch`, up to :data:`CLOCK_SKEW` tolerated). The rules are
:mod:`synthlab.study.scheduler`'s: docs/architecture.md, "The sweep queue's rules".
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, Callable

from synthlab.core.processes import DEFAULT_BEAT, pid_alive, same_pid_space
from synthlab.study.progress import LiveTrial


class SilenceWatch:
    """How long each trial's heartbeat value has stood still, on this machine's monotonic clock.

    The value is written with the worker's clock; comparing it with ``time.time()`` here is
    only as good as the two clocks' agreement. A value seen unchanged for ``s`` seconds here
    means no beat for at least ``s`` seconds, whatever the clocks say. The first sighting
    starts the watch (0 s)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: dict[Any, tuple[Any, float]] = {}
        self._clock = clock

    def still_for(self, key: Any, value: Any) -> float:
        now = self._clock()
        seen = self._seen.get(key)
        if seen is None or seen[0] != value:
            self._seen[key] = (value, now)
            return 0.0
        return now - seen[1]


def _started_at(t) -> float:
    return t.datetime_start.timestamp() if t.datetime_start is not None else time.time()


def claim_key(me: dict[str, Any]) -> str:
    """The user attr a worker's claim goes under: unique per process, even where two machines or
    containers share a host name and a pid."""
    space = me.get("space")
    tag = f"/{hashlib.sha1(space.encode()).hexdigest()[:8]}" if space else ""
    return f"claim:{me['pid']}@{me['host']}{tag}"


#: how far two machines' clocks may disagree before a live worker elsewhere could be reaped at the
#: first look (its heartbeat then reads older than the grace period plus this); within it a
#: heartbeat older than the grace period is only trusted once it stood still here (SilenceWatch)
CLOCK_SKEW = 600.0


def stale_reason(t, grace_period: float, me: dict[str, Any], watch: SilenceWatch | None = None) -> str | None:
    """Why RUNNING trial ``t`` is dead, or None if it may still be alive. A worker elsewhere is
    dead once its last heartbeat is older than the grace period plus :data:`CLOCK_SKEW` by this
    machine's clock (at the first look), or older than the grace period and unchanged here for
    three of its beats, or unchanged here for the grace period whatever its time says (a clock
    ahead). With ``watch=None`` the clocks alone decide (they must agree within the grace period)."""
    w = t.user_attrs.get("worker")
    last = float(t.user_attrs.get("heartbeat", _started_at(t)))
    if not isinstance(w, dict):  # taken, its owner not written yet: the owner is one of the claimants
        claims = [c for k, c in t.user_attrs.items() if k.startswith("claim:") and isinstance(c, dict)]
        if claims and all(
            same_pid_space(c, me)
            and (c.get("pid"), c.get("start")) != (me["pid"], me["start"])
            and not pid_alive(int(c["pid"]), c.get("start"))
            for c in claims
        ):
            return f"worker process {claims[0]['pid']} on {claims[0]['host']} is gone"
    if isinstance(w, dict) and same_pid_space(w, me):
        if w.get("pid") == me["pid"] and w.get("start") == me["start"]:
            return None  # our own trial
        if not pid_alive(int(w["pid"]), w.get("start")):
            return f"worker process {w['pid']} on {w['host']} is gone"
        # alive here but silent: paused (SIGSTOP, a suspended batch job, a sleeping laptop),
        # not dead; its heartbeat resumes with it. The grace period judges other machines only.
        return None
    age = time.time() - last
    if age > grace_period + (CLOCK_SKEW if watch is not None else 0.0):
        return f"no heartbeat for {age:.0f} s (grace period {grace_period:.0f} s)"
    if watch is None:
        return None
    still = watch.still_for(getattr(t, "number", id(t)), last)
    beat = float(w.get("beat") or DEFAULT_BEAT) if isinstance(w, dict) else DEFAULT_BEAT
    if still >= grace_period:
        return f"heartbeat unchanged for {still:.0f} s on this machine's clock (grace period {grace_period:.0f} s)"
    if age > grace_period and still >= min(grace_period, 3 * beat):
        return f"no heartbeat for {age:.0f} s (grace period {grace_period:.0f} s), unchanged for {still:.0f} s here"
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
    process's progress view of a helper's cell (:mod:`synthlab.study.progress`)."""

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
