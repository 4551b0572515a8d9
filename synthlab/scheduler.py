"""Scheduling a sweep's cells as Optuna trials, exactly once over any storage.

- every cell is *enqueued* as a WAITING trial carrying its ``cell_key``; a worker takes a trial
  with the storage's atomic WAITING -> RUNNING transition (Optuna's own queue), so two workers
  never take the same trial;
- two workers starting together may both enqueue a cell; a taken trial therefore runs only if
  no *lower-numbered live* trial exists for its cell (live: waiting, running, finished with a
  record), otherwise it is closed as PRUNED with ``duplicate_of``. Trial numbers are assigned
  atomically, so exactly one trial per cell runs;
- a running trial carries ``worker`` (host, pid, process start time) and a ``heartbeat`` user
  attr refreshed every ``heartbeat_interval`` seconds. A RUNNING trial whose process is gone
  (same host: pid dead; any host: no heartbeat for ``grace_period`` seconds) is failed (the
  atomic RUNNING -> FAIL transition picks one reaper) and its cell enqueued again: a cell that
  was running when its process was killed is re-run once, finished cells are never re-run.

This module owns the liveness rules, the heartbeat and :class:`Runner`, one worker's loop
(the result record of a trial is stored on it, user attr ``record``, and appended to
``results.jsonl``).
"""

from __future__ import annotations

import copy
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from synthlab.cells import Cell
from synthlab.records import append_record, clean, failed_record
from synthlab.sweepfile import SweepSpec, objective

def _proc_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if start is not None and Path("/proc").is_dir():
        now = _proc_start(pid)
        if now is None or now != start:
            return False
    return True


def _worker_id() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _proc_start(os.getpid())}


def _started_at(t) -> float:
    return t.datetime_start.timestamp() if t.datetime_start is not None else time.time()


def _stale_reason(t, grace_period: float, me: dict[str, Any]) -> str | None:
    """Why RUNNING trial ``t`` is dead, or None if it may still be alive."""
    w = t.user_attrs.get("worker")
    last = t.user_attrs.get("heartbeat", _started_at(t))
    if isinstance(w, dict) and w.get("host") == me["host"]:
        if w.get("pid") == me["pid"] and w.get("start") == me["start"]:
            return None  # our own trial
        if not _pid_alive(int(w["pid"]), w.get("start")):
            return f"worker process {w['pid']} on {w['host']} is gone"
    if time.time() - float(last) > grace_period:
        return f"no heartbeat for {time.time() - float(last):.0f} s (grace period {grace_period:.0f} s)"
    return None


def _is_live(t, retried: set[int]) -> bool:
    """Whether trial ``t`` holds (or will hold) its cell's result. A failed run does, until a
    --retry-failed sweep sets it aside (its number in ``retried``)."""
    from optuna.trial import TrialState

    if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE):
        return True
    return t.state == TrialState.FAIL and "record" in t.user_attrs and t.number not in retried


class _Heartbeat:
    """A thread that writes ``heartbeat = time.time()`` on a running trial every ``interval`` s."""

    def __init__(self, storage, trial_id: int, interval: float) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="synthlab-heartbeat")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.storage.set_trial_user_attr(self.trial_id, "heartbeat", time.time())
            except Exception:  # a finished trial or a storage hiccup: the next beat retries
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class Runner:
    """One worker's loop over a grid's cells in a study (see the module docstring)."""

    def __init__(self, spec: SweepSpec, preset: str, cells: list[Cell], storage, study, out: Path,
                 quiet: bool, heartbeat_interval: float, grace_period: float, poll: float) -> None:
        self.spec, self.preset, self.cells, self.storage, self.study = spec, preset, cells, storage, study
        self.by_key = {c.key: c for c in cells}
        self.out, self.quiet = out, quiet
        self.results = out / "results.jsonl"
        self.heartbeat_interval, self.grace_period, self.poll = heartbeat_interval, grace_period, poll
        self.me = _worker_id()
        self.ran = 0
        self.retried: set[int] = set()

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=sys.stderr, flush=True)

    def trials(self):
        """The study's trials; also refreshes ``self.retried``, the failed trials set aside by
        --retry-failed (study attributes ``retried:<number>``: Optuna does not let a finished
        trial's own attributes change, and one key per trial needs no read-modify-write)."""
        self.retried = {int(k.split(":", 1)[1]) for k in self.study.user_attrs if k.startswith("retried:")}
        return self.study.get_trials(deepcopy=False)

    def by_cell(self, trials) -> dict[str, list]:
        out: dict[str, list] = {}
        for t in trials:
            key = t.user_attrs.get("cell_key")
            if key is not None:
                out.setdefault(key, []).append(t)
        return out

    def reap(self, trials) -> None:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        for t in trials:
            if t.state != TrialState.RUNNING or "cell_key" not in t.user_attrs:
                continue
            reason = _stale_reason(t, self.grace_period, self.me)
            if reason is None:
                continue
            try:
                self.storage.set_trial_user_attr(t._trial_id, "stale", reason)
                self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            except (UpdateFinishedTrialError, RuntimeError):
                continue  # another worker reaped it, or it just finished
            cell = self.by_key.get(t.user_attrs["cell_key"])
            self.log(f"[sweep] trial {t.number} ({cell.label() if cell else 'a cell of another grid'}) died: "
                     f"{reason}; its cell runs again")

    def retry_failed(self, trials) -> None:
        """Set aside the failed result of every cell of this grid whose only result is a failure
        (marked ``retried``, kept in the study and in results.jsonl), so the cell is queued
        again."""
        groups = self.by_cell(trials)
        for c in self.cells:
            live = [t for t in groups.get(c.key, []) if _is_live(t, self.retried)]
            failed = [t for t in live if "record" in t.user_attrs and t.user_attrs["record"].get("status") != "ok"]
            if failed and len(failed) == len(live):
                for t in failed:
                    self.study.set_user_attr(f"retried:{t.number}", time.time())
                self.log(f"[sweep] {c.label()} failed before ({failed[0].user_attrs['record'].get('error', '?')}); "
                         "running it again")

    def enqueue_missing(self, trials) -> None:
        groups = self.by_cell(trials)
        for c in self.cells:
            if not any(_is_live(t, self.retried) for t in groups.get(c.key, [])):
                self.study.enqueue_trial({}, user_attrs={"cell_key": c.key, "cell": clean(c.axes)})

    def pop(self, trials):
        """Take a WAITING trial of one of our cells (atomic WAITING -> RUNNING), or None."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        waiting = sorted((t for t in trials if t.state == TrialState.WAITING
                          and t.user_attrs.get("cell_key") in self.by_key), key=lambda t: t.number)
        for t in waiting:
            try:
                if self.storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                    return t
            except UpdateFinishedTrialError:
                continue
        return None

    def run_trial(self, t) -> None:
        from optuna.trial import TrialState

        sid = t._trial_id
        self.storage.set_trial_user_attr(sid, "worker", self.me)
        self.storage.set_trial_user_attr(sid, "heartbeat", time.time())
        key = t.user_attrs["cell_key"]
        lower = [u for u in self.by_cell(self.trials()).get(key, []) if u.number < t.number and _is_live(u, self.retried)]
        if lower:  # a duplicate enqueue (two workers started together): the lowest trial runs
            self.storage.set_trial_user_attr(sid, "duplicate_of", min(u.number for u in lower))
            self.study.tell(t.number, state=TrialState.PRUNED, skip_if_finished=True)
            return
        cell = self.by_key[key]
        self.log(f"[sweep] trial {t.number}: {cell.label()}")
        try:
            with _Heartbeat(self.storage, sid, self.heartbeat_interval):
                record = self._train(cell, t.number)
        except KeyboardInterrupt:
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            raise
        record = clean(record)
        self.storage.set_trial_user_attr(sid, "record", record)
        value = objective(self.spec, record)
        if record.get("status") == "ok" and value is not None:
            self.study.tell(t.number, value, skip_if_finished=True)
        else:
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            self.log(f"[sweep] trial {t.number} failed: {record.get('error', 'no objective value')}")
        self.ran += 1

    def _train(self, cell: Cell, number: int) -> dict[str, Any]:
        from synthlab import training  # torch and lightning: loaded once a trial runs

        size = self.results.stat().st_size if self.results.exists() else 0
        try:
            return training.train(
                cell.task, cell.pe, preset=self.preset, seed=cell.seed, out=str(self.out / "runs"),
                positions=cell.positions, rope_scaling=cell.rope_scaling, quiet=self.quiet, results=str(self.results),
                study=self.study.study_name, trial=number, overrides=dict(cell.overrides))
        except Exception as e:  # the trainer should return status "failed"; never stop the sweep
            record = failed_record(cell.task, cell.pe, cell.positions, cell.overrides, cell.seed,
                                   self.study.study_name, number, f"{type(e).__name__}: {e}")
            if not self.results.exists() or self.results.stat().st_size == size:
                append_record(self.results, record, ensure_ascii=True)  # the trainer did not record it itself
            return record

    def loop(self, max_trials: int | None, retry_failed: bool = False) -> None:
        from optuna.trial import TrialState

        if retry_failed:
            self.retry_failed(self.trials())
        self.enqueue_missing(self.trials())
        waited = False
        while max_trials is None or self.ran < max_trials:
            trials = self.trials()
            self.reap(trials)
            trials = self.trials()
            self.enqueue_missing(trials)
            t = self.pop(self.trials())
            if t is not None:
                waited = False
                self.run_trial(t)
                continue
            mine = {c.key for c in self.cells}
            running = [u for u in self.trials() if u.state == TrialState.RUNNING and u.user_attrs.get("cell_key") in mine]
            if not running:
                return
            if not waited:
                self.log(f"[sweep] waiting for {len(running)} cell(s) running in other workers")
                waited = True
            time.sleep(self.poll)

    def cell_records(self) -> list[tuple[Cell, dict[str, Any]]]:
        """Every cell of this grid that has a record, with it (lowest trial per cell)."""
        groups = self.by_cell(self.trials())
        out = []
        for c in self.cells:
            with_record = sorted((t for t in groups.get(c.key, []) if "record" in t.user_attrs
                                  and t.number not in self.retried), key=lambda t: t.number)
            if with_record:
                out.append((c, copy.deepcopy(with_record[0].user_attrs["record"])))
        return out
