"""What a sweep prints while it runs, on stderr (its stdout holds the grids at the end).

Three modes (:func:`mode_for`): ``quiet``, ``lines`` (not a terminal: start, finish and
heartbeat lines) and ``bar`` (a tqdm bar). With ``--workers N`` the main process alone prints,
watching the study; the counts come from :class:`synthlab.study.scheduler.Runner`, so this
module only formats and times. What each mode prints: docs/observability.md, "Progress on
stderr".
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterable, TextIO

QUIET, LINES, BAR = "quiet", "lines", "bar"
HEARTBEAT_EVERY = 60.0  # seconds between two heartbeat lines of a running cell


def mode_for(quiet: bool, stream: TextIO | None = None) -> str:
    """``quiet``; else a bar on a terminal, lines anywhere else."""
    if quiet:
        return QUIET
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return BAR if tty else LINES


def check_interval(value: Any, what: str = "the progress interval") -> float:
    """``value`` as seconds between heartbeat lines: a positive number (ValueError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def duration(seconds: float) -> str:
    """``42.0 s``, ``3m 05s``, ``2h 04m``."""
    s = max(0.0, float(seconds))
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


class LiveTrial:
    """A trial this process is training: step and loss as the trainer's ``report`` hook gives
    them (read by the heartbeat line and the trial's ``progress`` user attr)."""

    def __init__(self, number: int, label: str, steps: int | None) -> None:
        self.number, self.label, self.steps = number, label, steps
        self.started = time.time()
        self.step: int | None = None
        self.loss: float | None = None

    def update(self, step: int, values: dict[str, float]) -> None:
        self.step = int(step)
        if "loss" in values:
            self.loss = float(values["loss"])

    def snapshot(self) -> dict[str, Any] | None:
        """``{"step", "steps", "loss"}`` once the trainer has reported, else None."""
        if self.step is None:
            return None
        return {"step": self.step, "steps": self.steps, "loss": self.loss}


class TrainHeartbeat:
    """``synthlab train``'s ``report`` hook where stderr is no terminal (a batch job's log, where
    tqdm's bar does not show): a line when the run starts reporting, then one every ``every``
    seconds, as a sweep's heartbeat: ``[train] flipflop rope: step 120/1500, loss 0.5230, 1m 05s
    elapsed``."""

    def __init__(
        self, label: str, steps: int | None, every: float = HEARTBEAT_EVERY, stream: TextIO | None = None
    ) -> None:
        self.live = LiveTrial(0, label, steps)
        self.every, self.stream = check_interval(every), stream
        self._last: float | None = None

    def __call__(self, step: int, values: dict[str, float]) -> None:
        self.live.update(step, values)
        now = time.time()
        if self._last is not None and now - self._last < self.every:
            return
        self._last = now
        snap = self.live.snapshot() or {}
        parts = [f"step {snap['step']}" + (f"/{snap['steps']}" if snap.get("steps") else "")]
        if isinstance(snap.get("loss"), (int, float)):
            parts.append(f"loss {snap['loss']:.4f}")
        parts.append(f"{duration(now - self.live.started)} elapsed")
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"[train] {self.live.label}: {', '.join(parts)}", file=stream, flush=True)


class SweepProgress:
    """The sweep's progress view (see the module docstring). ``labels``: cell key -> label;
    ``objective``: the name of the trials' value (``ood-sparse/token_acc``)."""

    def __init__(
        self,
        mode: str,
        labels: dict[str, str],
        objective: str,
        every: float = HEARTBEAT_EVERY,
        stream: TextIO | None = None,
    ) -> None:
        self.mode, self.labels, self.objective, self.every = mode, labels, objective, check_interval(every)
        self.stream = stream
        self.total = len(labels)
        self.done: set[str] = set()
        self._seen: set[int] = set()  # finished trials already reported
        self._started: set[int] = set()  # running trials already announced
        self._live: dict[int, LiveTrial] = {}  # this process's running trials
        self._others: dict[int, Any] = {}  # the helpers' running trials (FrozenTrial)
        self._beats: dict[int, float] = {}  # trial number -> when its last heartbeat line was due
        self._pids = {(socket.gethostname(), os.getpid())}
        self.slurm = False  # also show the running trials of SLURM tasks (synthlab.study.launchers)
        self._t0 = time.time()
        self._done_here = 0  # cells finished since this sweep started (for the ETA)
        self._lock = threading.RLock()
        self._bar: Any = None
        self._source: Callable[[], tuple[list[Any], list[Any]]] | None = None
        self._poll = 2.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- output

    def _out(self) -> TextIO:
        return sys.stderr if self.stream is None else self.stream

    def write(self, msg: str) -> None:
        """One line (above the bar on a terminal); nothing when quiet."""
        if self.mode == QUIET:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.write(msg, file=self._out())
            else:
                print(msg, file=self._out(), flush=True)

    # ---- lifetime

    def start(self, finished: Iterable[Any], running: Iterable[Any]) -> None:
        """Take in the cells finished before this sweep (no lines for them); open the bar and
        start the timer thread."""
        with self._lock:
            for t in finished:
                self._seen.add(t.number)
                self.done.add(t.user_attrs["cell_key"])
            self._started.update(t.number for t in running)
        if self.mode == QUIET:
            return
        if self.mode == BAR:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=self.total,
                initial=len(self.done),
                desc="sweep",
                unit="cell",
                position=0,
                leave=True,
                dynamic_ncols=True,
                file=self._out(),
            )
        self._thread = threading.Thread(target=self._run, daemon=True, name="synthlab-progress")
        self._thread.start()

    def watch(self, source: Callable[[], tuple[list[Any], list[Any]]], pids: Iterable[int], poll: float) -> None:
        """Also poll ``source()`` -> (finished, running) trials every ``poll`` seconds: the cells
        of helper processes ``pids`` (their running trials get heartbeat lines)."""
        with self._lock:
            self._source, self._poll = source, float(poll)
            self._pids |= {(socket.gethostname(), int(p)) for p in pids}

    def close(self) -> None:
        """Stop the timer thread and leave the bar (its last state) on the terminal."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    # ---- events

    def started(self, live: LiveTrial) -> None:
        """This process took a trial and starts training it."""
        with self._lock:
            self._live[live.number] = live
            self._beats[live.number] = live.started
            self._started.add(live.number)
        self.write(f"[sweep] trial {live.number} started: {live.label}")

    def ended(self, number: int) -> None:
        with self._lock:
            self._live.pop(number, None)
            self._beats.pop(number, None)

    def observe(self, finished: Iterable[Any], running: Iterable[Any]) -> None:
        """All the grid's finished trials (they are what counts as done; a line for each not
        seen yet) and its running ones (the helpers' are announced and get heartbeats)."""
        if self.mode == QUIET:
            return
        finished = sorted(finished, key=lambda t: t.number)
        with self._lock:
            self.done = {t.user_attrs["cell_key"] for t in finished if t.number in self._seen}
            for t in finished:
                self.done.add(t.user_attrs["cell_key"])
                if t.number in self._seen:
                    continue
                self._seen.add(t.number)
                self._others.pop(t.number, None)
                self._beats.pop(t.number, None)
                self._done_here += 1
                self.write(self._finished_line(t))
            if self._bar is not None:
                self._bar.n = len(self.done)
                self._bar.refresh()
            others = {}
            for t in running:
                w = t.user_attrs.get("worker")
                task = t.user_attrs.get("slurm_job") if self.slurm else None
                if t.number in self._live or (
                    task is None and (not isinstance(w, dict) or (w.get("host"), w.get("pid")) not in self._pids)
                ):
                    continue
                others[t.number] = t
                if t.number not in self._started:
                    self._started.add(t.number)
                    self._beats[t.number] = time.time()
                    who = f"SLURM task {task}" if task is not None else f"worker pid {w.get('pid')}"
                    self.write(f"[sweep] trial {t.number} started: {self._label(t)} ({who})")
            self._others = others

    # ---- the lines

    def _label(self, t: Any) -> str:
        return self.labels.get(t.user_attrs.get("cell_key"), "a cell of another grid")

    def _finished_line(self, t: Any) -> str:
        from optuna.trial import TrialState

        rec = t.user_attrs.get("record") or {}
        if t.state == TrialState.COMPLETE and t.values:
            what = f"ok, {self.objective} {t.values[0]:.4f}"
        else:
            what = f"failed ({rec.get('error', 'no objective value')})"
        wall = rec.get("wall_s")
        line = (
            f"[sweep] {len(self.done)}/{self.total} cells done: {self._label(t)} {what}"
            + (f", {duration(wall)}" if isinstance(wall, (int, float)) else "")
            + f" (trial {t.number})"
        )
        left = self.total - len(self.done)
        if left > 0 and self._done_here:
            line += f"; ETA {duration((time.time() - self._t0) / self._done_here * left)}"
        return line

    def _heartbeat_line(self, number: int, label: str, started: float, snap: dict[str, Any] | None, now: float) -> str:
        parts = []
        if snap and snap.get("step") is not None:
            steps = snap.get("steps")
            parts.append(f"step {snap['step']}" + (f"/{steps}" if steps else ""))
            if isinstance(snap.get("loss"), (int, float)):
                parts.append(f"loss {snap['loss']:.4f}")
        parts.append(f"{duration(now - started)} elapsed")
        return f"[sweep] trial {number} running: {label}: {', '.join(parts)}"

    def beat(self, now: float | None = None) -> None:
        """A heartbeat line for each running cell whose last one is ``every`` seconds old."""
        now = time.time() if now is None else now
        with self._lock:
            due = []
            for number, live in self._live.items():
                due.append((number, live.label, live.started, live.snapshot()))
            for number, t in self._others.items():
                start = t.datetime_start.timestamp() if t.datetime_start is not None else now
                snap = t.user_attrs.get("progress")
                due.append((number, self._label(t), start, snap if isinstance(snap, dict) else None))
            for number, label, started, snap in due:
                last = self._beats.setdefault(number, started)
                if now - last >= self.every:
                    self._beats[number] = now
                    if self.mode == LINES:
                        self.write(self._heartbeat_line(number, label, started, snap, now))
            if self._bar is not None:
                self._bar.set_postfix_str(f"{len(due)} running" if due else "", refresh=True)

    def _run(self) -> None:
        polled = time.monotonic()
        while not self._stop.wait(min(self.every, self._poll, 1.0)):
            source = self._source
            if source is not None and time.monotonic() - polled >= self._poll:
                polled = time.monotonic()
                try:
                    self.observe(*source())
                except Exception:  # a storage hiccup: the next poll reads again
                    pass
            self.beat()
