"""synthlab.study.progress: the sweep's progress lines, heartbeat lines and bar, from trials as the
scheduler hands them over (stand-ins here: no study, no training)."""

from __future__ import annotations

import io
import os
import socket
import time
import types
from datetime import datetime

import pytest

from synthlab.study import progress
from synthlab.study.progress import BAR, LINES, QUIET, LiveTrial, SweepProgress

LABELS = {"k0": "pe=rope seed=0", "k1": "pe=rope seed=1", "k2": "pe=nope seed=0", "k3": "pe=nope seed=1"}


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def trial(number, key, state="COMPLETE", value=0.75, record=None, worker=None, started=None, **attrs):
    from optuna.trial import TrialState

    user_attrs = {"cell_key": key, **attrs}
    if record is not None:
        user_attrs["record"] = record
    if worker is not None:
        user_attrs["worker"] = worker
    return types.SimpleNamespace(
        number=number,
        state=getattr(TrialState, state),
        user_attrs=user_attrs,
        values=[value] if state == "COMPLETE" else None,
        datetime_start=started,
    )


def me(pid=None):
    return {"host": socket.gethostname(), "pid": os.getpid() if pid is None else pid, "start": "1"}


def test_the_mode_follows_quiet_and_the_terminal():
    assert progress.mode_for(True, Tty()) == QUIET
    assert progress.mode_for(False, Tty()) == BAR
    assert progress.mode_for(False, io.StringIO()) == LINES


@pytest.mark.parametrize("seconds,text", [(0.04, "0.0 s"), (42.04, "42.0 s"), (185, "3m 05s"), (7440, "2h 04m")])
def test_duration(seconds, text):
    assert progress.duration(seconds) == text


def test_a_line_per_finished_cell_with_done_total_objective_and_wall_time():
    out = io.StringIO()
    view = SweepProgress(LINES, LABELS, "ood-sparse/token_acc", every=60, stream=out)
    view.start([trial(0, "k0", record={"wall_s": 3.0})], [])  # finished before this sweep: no line
    try:
        one = [trial(0, "k0"), trial(1, "k1", value=0.8125, record={"wall_s": 65.2})]
        view.observe(one, [])
        view.observe(one, [])  # seen: no second line
        failed = trial(2, "k2", state="FAIL", record={"status": "failed", "error": "diverged", "wall_s": 1.25})
        view.observe([*one, failed], [])
    finally:
        view.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "[sweep] 2/4 cells done: pe=rope seed=1 ok, ood-sparse/token_acc 0.8125, 1m 05s (trial 1); ETA "
    )
    assert (
        lines[1]
        == "[sweep] 3/4 cells done: pe=nope seed=0 failed (diverged), 1.2 s (trial 2); ETA " + lines[1].split("ETA ")[1]
    )
    assert view.done == {"k0", "k1", "k2"}
    view.observe(one, [])  # k2's failure set aside (--retry-failed elsewhere): no longer done
    assert view.done == {"k0", "k1"}


def test_the_last_cell_has_no_eta_and_a_cell_of_another_grid_is_named_so():
    out = io.StringIO()
    view = SweepProgress(LINES, {"k0": "pe=rope"}, "test/token_acc", stream=out)
    view.start([], [])
    view.observe([trial(0, "k0", record={"wall_s": 2.0})], [])
    view.close()
    assert out.getvalue() == "[sweep] 1/1 cells done: pe=rope ok, test/token_acc 0.7500, 2.0 s (trial 0)\n"
    assert view._label(trial(5, "elsewhere")) == "a cell of another grid"


def test_heartbeat_lines_for_a_running_cell_every_interval_with_step_and_loss():
    out = io.StringIO()
    view = SweepProgress(LINES, LABELS, "ood-sparse/token_acc", every=60, stream=out)
    live = LiveTrial(4, "pe=rope seed=0", steps=1000)
    view.started(live)
    t0 = live.started
    view.beat(t0 + 30)  # not due yet
    live.update(400, {"loss": 0.23456})
    view.beat(t0 + 61)
    view.beat(t0 + 62)  # the last line is 1 s old
    live.update(800, {"ood-sparse/token_acc": 0.5})  # an evaluation: the loss shown stays the last one
    view.beat(t0 + 125)
    view.ended(4)
    view.beat(t0 + 500)  # ended: no more lines
    assert out.getvalue().splitlines() == [
        "[sweep] trial 4 started: pe=rope seed=0",
        "[sweep] trial 4 running: pe=rope seed=0: step 400/1000, loss 0.2346, 1m 01s elapsed",
        "[sweep] trial 4 running: pe=rope seed=0: step 800/1000, loss 0.2346, 2m 05s elapsed",
    ]
    assert live.snapshot() == {"step": 800, "steps": 1000, "loss": 0.23456}


def test_a_cell_with_no_report_yet_shows_its_elapsed_time():
    out = io.StringIO()
    view = SweepProgress(LINES, LABELS, "x", every=10, stream=out)
    live = LiveTrial(1, "pe=nope seed=1", steps=None)
    view.started(live)
    view.beat(live.started + 11)
    assert out.getvalue().splitlines()[-1] == "[sweep] trial 1 running: pe=nope seed=1: 11.0 s elapsed"


def test_helpers_cells_are_announced_and_get_heartbeats_from_their_progress_attr():
    out = io.StringIO()
    view = SweepProgress(LINES, LABELS, "x", every=60, stream=out)
    view.watch(lambda: ([], []), [4242], poll=1.0)
    started = datetime.fromtimestamp(time.time() - 90)
    helper = trial(
        7, "k3", state="RUNNING", worker=me(4242), started=started, progress={"step": 30, "steps": 60, "loss": 1.5}
    )
    stranger = trial(8, "k2", state="RUNNING", worker=me(999999), started=started)  # another sweep's process
    view.observe([], [helper, stranger])
    view.observe([], [helper, stranger])  # announced once
    view.beat(time.time() + 61)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[sweep] trial 7 started: pe=nope seed=1 (worker pid 4242)"
    assert len(lines) == 2 and lines[1].startswith(
        "[sweep] trial 7 running: pe=nope seed=1: step 30/60, loss 1.5000, 2m"
    )
    view.observe([trial(7, "k3", value=0.5, record={"wall_s": 100.0})], [])
    assert "1/4 cells done: pe=nope seed=1 ok" in out.getvalue().splitlines()[-1]


def test_the_watch_thread_polls_the_source():
    out = io.StringIO()
    view = SweepProgress(LINES, LABELS, "x", every=0.05, stream=out)
    polls = []

    def source():
        polls.append(1)
        return [trial(0, "k0", record={"wall_s": 1.0})], []

    view.start([], [])
    view.watch(source, [], poll=0.05)
    deadline = time.time() + 10
    while "1/4 cells done" not in out.getvalue() and time.time() < deadline:
        time.sleep(0.02)
    view.close()
    assert "1/4 cells done" in out.getvalue() and len(polls) >= 1


def test_quiet_prints_nothing():
    out = io.StringIO()
    view = SweepProgress(QUIET, LABELS, "x", every=0.01, stream=out)
    view.start([], [])
    live = LiveTrial(0, "a", 10)
    view.started(live)
    view.write("[sweep] something")
    view.beat(time.time() + 100)
    view.observe([trial(0, "k0")], [])
    view.close()
    assert out.getvalue() == ""


def test_on_a_terminal_a_sweep_bar_with_done_total_and_the_lines_above_it():
    out = Tty()
    view = SweepProgress(BAR, LABELS, "ood-sparse/token_acc", stream=out)
    view.start([trial(0, "k0")], [])
    view.observe([trial(0, "k0"), trial(1, "k1", record={"wall_s": 2.0})], [])
    assert view._bar.pos == 0 and view._bar.n == 2 and view._bar.total == 4
    view.close()
    text = out.getvalue()
    assert "sweep:" in text and "2/4" in text
    assert "[sweep] 2/4 cells done: pe=rope seed=1 ok, ood-sparse/token_acc 0.7500, 2.0 s (trial 1)" in text


def test_a_non_positive_interval_is_refused():
    with pytest.raises(ValueError, match="positive number of seconds"):
        SweepProgress(LINES, LABELS, "x", every=0)
