"""Fault tolerance without training: torn journals, records read once per cell, the scheduler's
kill windows (a fake trainer; the real processes are in tests/system/test_fault_injection.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synthlab.run import records
from synthlab.study import journallock, storage, sweeping

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from sweep_kit import FakeTrain, as_run, completed_keys, study_trials, write_sweep  # noqa: E402


def _journal_with_trials(path: Path, n: int = 3) -> list[int]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(study_name="s", storage=storage.open_storage(str(path)), load_if_exists=True)
    for i in range(n):
        st.enqueue_trial({}, user_attrs={"cell_key": f"k{i}"})
    return [t.number for t in st.get_trials()]


def _trials(path: Path):
    import optuna

    return optuna.load_study(study_name="s", storage=storage.open_storage(str(path))).get_trials()


@pytest.mark.parametrize(
    "tail",
    [
        b'{"op_code":5,"worker_id":"w","trial_id":0,"user_attr":{"x":',  # a write cut by a kill
        b"\x00" * 300,  # a power loss: the size grew, the data never came
        b'{"op_code":5,"worker_id":"w","tri\n',  # torn, then a newline from elsewhere
        b"garbage\n",
    ],
)
def test_a_torn_last_entry_is_cut_off_kept_aside_and_the_study_goes_on(tmp_path, capsys, tail):
    path = tmp_path / "study.journal"
    numbers = _journal_with_trials(path)
    whole = path.read_bytes()
    with open(path, "ab") as f:
        f.write(tail)
    assert [t.number for t in _trials(path)] == numbers
    assert path.read_bytes() == whole
    side = tmp_path / f"study.journal.torn-{len(whole)}"
    assert side.read_bytes() == tail
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning" in err[0] and f"byte {len(whole)}" in err[0] and str(side) in err[0]
    # the study is writable again
    _journal_with_trials(path, 1)
    assert len(_trials(path)) == len(numbers) + 1


def test_a_writer_that_breaks_a_killed_writers_lock_repairs_before_it_appends(tmp_path, capsys):
    """A worker killed mid-append leaves torn bytes (and its lock); the next writer must not
    append behind them (that made today's 'Expecting ':' delimiter' for good)."""
    import optuna

    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    st = optuna.load_study(study_name="s", storage=storage.open_storage(str(path)))  # a live worker
    with open(path, "ab") as f:
        f.write(b'{"op_code":5,"worker_id":"dead","trial_id":0,"user_at')  # another worker, killed
    st.enqueue_trial({}, user_attrs={"cell_key": "after"})  # the live worker writes on
    assert "torn" in capsys.readouterr().err
    assert [t.user_attrs["cell_key"] for t in _trials(path)] == ["k0", "after"]
    assert storage.first_bad_entry(path) is None


def test_corruption_before_the_last_entry_is_refused_with_its_offset(tmp_path, capsys):
    path = tmp_path / "study.journal"
    _journal_with_trials(path)
    lines = path.read_bytes().split(b"\n")
    bad_at = len(lines[0]) + 1
    path.write_bytes(b"\n".join([lines[0], b'{"op_code": 4, "wor', *lines[1:]]))
    before = path.read_bytes()
    with pytest.raises(ValueError, match=f"study.journal' is corrupt at byte {bad_at} .*entry 2"):
        storage.open_storage(str(path))
    assert path.read_bytes() == before  # nothing cut
    # the sweep command: exit 2 with that one line
    from synthlab.cli import main

    sweep = write_sweep(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "study.journal").write_bytes(before)
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"corrupt at byte {bad_at}" in err[0]


def test_readers_keep_one_record_per_cell_the_latest_in_the_first_place():
    def rec(run_id, cell=None, seed=0, study="s", status="ok", lr=1e-3):
        r = {
            "task": "flipflop",
            "pe": "rope",
            "model": {"d_model": 16},
            "train": {"seed": seed, "lr": lr},
            "study": study,
            "trial": 0,
            "status": status,
            "run_id": run_id,
        }
        if cell is not None:
            r["cell"] = cell
        return r

    recs = [
        rec("a", "c1", status="failed"),
        rec("b", "c2"),
        rec("c", "c1"),  # c1 retried: c is its latest
        rec("old1", seed=5),
        rec("old2", seed=5),
        rec("old3", seed=6),  # before cell keys: by settings
        rec("t1", study=None),
        rec("t2", study=None),  # `synthlab train` runs: all count
        rec("x", "c1", study="other"),
    ]
    assert [r["run_id"] for r in records.latest_records(recs)] == ["c", "b", "old2", "old3", "t1", "t2", "x"]
    assert records.with_cell({"study": "s", "trial": 3, "status": "ok"}, "K") == {
        "study": "s",
        "trial": 3,
        "cell": "K",
        "status": "ok",
    }


def test_scan_records_reads_complete_lines_from_an_offset(tmp_path):
    p = tmp_path / "r.jsonl"
    assert records.scan_records(p) == ([], 0)
    p.write_text('{"a": 1}\nnot json\n{"b": 2}\n{"c":')
    got, end = records.scan_records(p)
    assert got == [{"a": 1}, {"b": 2}] and end == len('{"a": 1}\nnot json\n{"b": 2}\n')
    with open(p, "a") as f:
        f.write(" 3}\n")
    assert records.scan_records(p, end) == ([{"c": 3}], p.stat().st_size)


# ---- the scheduler's kill windows, with a fake trainer


@pytest.fixture
def fake(monkeypatch):
    import synthlab.run.training

    f = FakeTrain()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    return f


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _running_trial(out: Path, cell, attrs: dict):
    """A trial of ``cell`` taken by a worker that is gone (RUNNING, its pid dead)."""
    import optuna

    out.mkdir(exist_ok=True)
    store = storage.open_storage(str(out / storage.JOURNAL_NAME))
    st = optuna.create_study(study_name="tiny-smoke", storage=store, direction="maximize", load_if_exists=True)
    st.enqueue_trial({}, user_attrs={"cell_key": cell.key, "cell": cell.axes})
    t = st.ask()
    for k, v in attrs.items():
        store.set_trial_user_attr(t._trial_id, k, v)
    return t


def _ok_lines(out: Path) -> list[dict]:
    return [r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines()) if r["status"] == "ok"]


def test_a_run_recorded_on_its_trial_but_not_closed_is_closed_from_it(tmp_path, fake):
    """Killed after storing the record on the trial (in results.jsonl or not yet): no retraining."""
    from optuna.trial import TrialState

    path = write_sweep(tmp_path)
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    out = tmp_path / "out"
    rec = FakeTrain()(cells[0].task, cells[0].pe, seed=cells[0].seed, study="tiny-smoke", trial=0)
    rec = records.with_cell(rec, cells[0].key)
    me = {"host": socket.gethostname(), "pid": _dead_pid(), "start": "1"}
    t = _running_trial(out, cells[0], {"worker": me, "record": rec})
    sweeping.sweep(path, out=out, grids=False)
    assert len(fake.calls) == 3 and (cells[0].task, cells[0].pe, cells[0].seed) not in [c[:3] for c in fake.calls]
    _, trials = study_trials(out, "tiny-smoke")
    closed = next(x for x in trials if x.number == t.number)
    assert closed.state == TrialState.COMPLETE and "is gone" in closed.user_attrs["closed_from_record"]
    assert sorted(completed_keys(trials)) == sorted(c.key for c in cells)
    assert sorted(r["cell"] for r in _ok_lines(out)) == sorted(c.key for c in cells)  # appended once, by the reaper
    sweeping.sweep(path, out=out, grids=False)  # and a rerun appends nothing
    assert len(_ok_lines(out)) == 4


def test_a_cell_in_results_jsonl_is_not_trained_again_when_the_journal_lost_it(tmp_path, fake):
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    sweeping.sweep(path, out=out, grids=False)
    assert len(fake.calls) == 4
    (out / storage.JOURNAL_NAME).unlink()  # the journal is gone (or was cut before the cells ended)
    recs = sweeping.sweep(path, out=out, grids=False)
    assert len(fake.calls) == 4 and len(recs) == 4 and all(r["status"] == "ok" for r in recs)
    assert len(_ok_lines(out)) == 4
    # records from before records carried their cell: found by trial number, task, seed, encoding
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    (out / "results.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "cell"}) + "\n" for r in lines)
    )
    (out / storage.JOURNAL_NAME).unlink()
    recs = sweeping.sweep(path, out=out, grids=False)
    assert len(fake.calls) == 4 and sorted(r["run_id"] for r in recs) == sorted(r["run_id"] for r in lines)


def test_a_trial_taken_by_a_worker_killed_before_it_wrote_its_name_is_rerun_at_once(tmp_path, fake):
    """Killed between the take (WAITING -> RUNNING) and writing ``worker``: its claim names it."""
    from optuna.trial import TrialState

    path = write_sweep(tmp_path)
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    out = tmp_path / "out"
    pid = _dead_pid()
    t = _running_trial(
        out, cells[0], {f"claim:{pid}@{socket.gethostname()}": {"host": socket.gethostname(), "pid": pid, "start": "1"}}
    )
    start = time.time()
    sweeping.sweep(path, out=out, grids=False)  # grace period 180 s: not waited for
    assert time.time() - start < 60 and len(fake.calls) == 4
    _, trials = study_trials(out, "tiny-smoke")
    old = next(x for x in trials if x.number == t.number)
    assert old.state == TrialState.FAIL and "is gone" in old.user_attrs["stale"]


def test_interrupted_while_waiting_for_the_lock_leaves_the_holders_lock(tmp_path):
    """Ctrl-C / SIGTERM while another process holds the journal's lock: the Ctrl-C comes
    through, and the other's lock stays (Optuna's own acquire removed it)."""
    import signal

    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    held = Path(str(path) + ".lock")
    held.touch()  # another process's
    lock = storage._repairing_lock_class()(str(path))

    def interrupt(*_):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert held.exists()


HOLDER = """
import sys, time
from synthlab.study import journallock, storage
journallock._local_fs = lambda folder: True  # whatever the test machine's /tmp is
lock = storage._repairing_lock_class()(sys.argv[1])
lock._take()
print("held", flush=True)
time.sleep(120)
"""


def test_a_live_holders_lock_is_never_broken_a_killed_ones_is(tmp_path, monkeypatch, capsys):
    """A lock held for longer than the grace period by a live process here (paused: SIGSTOP, a
    suspended job) stays its own; before, it was broken after the grace period and the paused
    holder, resumed, wrote beside the breaker. Killed, its lock is broken as before."""
    import signal
    import subprocess
    import sys
    import threading

    monkeypatch.setattr(journallock, "_WAIT_WARNING", 1.0)
    monkeypatch.setattr(journallock, "_local_fs", lambda folder: True)
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGSTOP)
        lock = storage._repairing_lock_class()(str(path))
        lock.grace_period = 0.5
        got = threading.Event()
        waiter = threading.Thread(target=lambda: (lock.acquire(), got.set()), daemon=True)
        waiter.start()
        assert not got.wait(3.0), "the lock of a live (paused) holder was broken"
        assert Path(str(path) + ".lock").exists()
        assert f"held for over 0.5 s by process {holder.pid} on this machine" in capsys.readouterr().err
        holder.kill()
        holder.wait()
        assert got.wait(10.0), "a killed holder's lock was never broken"
        lock.release()
        assert not Path(str(path) + ".lock").exists()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_breaker_removes_only_the_lock_file_that_stood_still(tmp_path, monkeypatch):
    """Optuna's breaker removed whichever lock file was there once the old one had stood still
    for the grace period: a new holder's, taken in the meantime, too (two writers)."""
    monkeypatch.setattr(journallock, "_local_fs", lambda folder: True)  # whatever the test machine's /tmp is
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    lock_file = Path(str(path) + ".lock")
    lock_file.touch()
    os.utime(lock_file, (time.time() - 60, time.time() - 60))
    st = lock_file.stat()
    old = (st.st_dev, st.st_ino, st.st_mtime_ns)
    lock_file.unlink()  # its holder let go; a new holder took the lock
    new_holder = storage._repairing_lock_class()(str(path))
    new_holder._take()
    breaker = storage._repairing_lock_class()(str(path))
    assert breaker._break(old) is True  # the file it watched is gone: watch again
    assert lock_file.exists()  # the new holder's lock stays
    st = lock_file.stat()
    assert breaker._break((st.st_dev, st.st_ino, st.st_mtime_ns)) is False  # held by a live process (this one)
    assert lock_file.exists()
    new_holder.release()
    assert not lock_file.exists()


def test_a_lock_taken_by_an_interrupted_acquire_is_used_by_the_next_one(tmp_path):
    """Ctrl-C after the lock was taken but before Optuna's ``try`` that releases it: the
    worker's next write (its re-queue) waited forever on its own flock."""
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    lock = storage._repairing_lock_class()(str(path))
    lock.acquire()  # ... and the KeyboardInterrupt arrives before `try: yield finally: release()`
    import threading

    lock.grace_period = 0.2
    got = threading.Event()
    threading.Thread(target=lambda: (lock.acquire(), got.set()), daemon=True).start()
    assert got.wait(2.0), "waited on its own lock"
    lock.release()
    assert not Path(str(path) + ".lock").exists()
    other = storage._repairing_lock_class()(str(path))
    other.acquire()
    other.release()


def test_a_holder_whose_new_lock_was_broken_before_it_held_it_does_not_take_it(tmp_path, monkeypatch):
    """Paused between creating the lock file and its flock for longer than the grace period: a
    breaker removed the file, another process took the lock; resumed, the first took the flock of
    the removed file and wrote as a second holder (review finding, reproduced)."""
    import fcntl

    monkeypatch.setattr(journallock, "_local_fs", lambda folder: True)
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    lock_file = Path(str(path) + ".lock")
    slow = storage._repairing_lock_class()(str(path))
    other = storage._repairing_lock_class()(str(path))
    real_flock, taken = fcntl.flock, []

    def flock(fd, op):
        if not taken and op == fcntl.LOCK_EX:  # the pause: the lock is broken and taken meanwhile
            taken.append(True)
            lock_file.unlink()
            other._take()
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    assert slow._create() is False and slow._fd is None
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert other._fd is not None and lock_file.read_text().strip() == str(os.getpid())
    other.release()
    assert not lock_file.exists()


def test_on_a_shared_file_system_the_grace_period_alone_decides(tmp_path, monkeypatch):
    """NFS and the like: an flock there may stay on one client or outlive a crashed one at the
    lock server, so a lock that stood still is broken as Optuna breaks it."""
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    monkeypatch.setattr(journallock, "_local_fs", lambda folder: False)
    holder = storage._repairing_lock_class()(str(path))
    holder._take()
    breaker = storage._repairing_lock_class()(str(path))
    st = Path(str(path) + ".lock").stat()
    assert breaker._break((st.st_dev, st.st_ino, st.st_mtime_ns)) is True
    assert not Path(str(path) + ".lock").exists()
    with pytest.raises(RuntimeError, match="was broken while this process held it"):  # the broken holder learns it
        holder.release()


def test_the_file_system_type_decides_the_flock(tmp_path, monkeypatch):
    """By the mount id of the folder (a btrfs subvolume's device is in no mount line)."""
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            mnt = next(line.split()[1] for line in f.read().splitlines() if line.startswith("mnt_id:"))
    finally:
        os.close(fd)
    for fstype, local in (
        ("ext4", True),
        ("xfs", True),
        ("btrfs", True),
        ("tmpfs", True),
        ("overlay", True),
        ("nfs4", False),
        ("nfs", False),
        ("cifs", False),
        ("fuse.sshfs", False),
        ("lustre", False),
    ):
        info = (
            f"{int(mnt) + 1} 1 0:99 / /elsewhere rw - ext4 /dev/y rw\n"
            f"{mnt} 1 0:12 / /data rw,relatime shared:1 - {fstype} /dev/x rw\n"
        )
        monkeypatch.setattr("builtins.open", _fake_open("/proc/self/mountinfo", info))
        assert journallock._local_fs(str(tmp_path)) is local, fstype
        monkeypatch.undo()


def _fake_open(name: str, text: str):
    import builtins
    import io

    real = builtins.open

    def fake(file, *args, **kwargs):
        return io.StringIO(text) if file == name else real(file, *args, **kwargs)

    return fake


FORK_HOLDER = """
import os, sys, time
from synthlab.study import journallock, storage
journallock._local_fs = lambda folder: True  # whatever the test machine's /tmp is
lock = storage._repairing_lock_class()(sys.argv[1])
lock._take()
if os.fork() == 0:  # a child forked while the lock is held (a DataLoader worker) lives on
    time.sleep(60)
    os._exit(0)
print("held", flush=True)
time.sleep(120)
"""


def test_a_child_forked_while_the_lock_was_held_does_not_keep_it(tmp_path, monkeypatch):
    """The child shares the holder's open lock file and so its flock: with the holder killed, the
    lock stayed until the child exited (review finding: 8 s for an 8-s child)."""
    import signal
    import subprocess
    import sys
    import threading

    monkeypatch.setattr(journallock, "_local_fs", lambda folder: True)
    path = tmp_path / "study.journal"
    _journal_with_trials(path, 1)
    holder = subprocess.Popen(
        [sys.executable, "-c", FORK_HOLDER, str(path)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.kill()
        holder.wait()
        lock = storage._repairing_lock_class()(str(path))
        lock.grace_period = 0.5
        got = threading.Event()
        threading.Thread(target=lambda: (lock.acquire(), got.set()), daemon=True).start()
        assert got.wait(15.0), "the forked child kept the killed holder's lock"
        lock.release()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
