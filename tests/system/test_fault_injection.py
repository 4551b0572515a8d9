"""Fault injection: `synthlab sweep` killed at random moments and at every step of recording a
run, journals cut at random byte offsets, SIGTERM / SIGINT mid-cell, with one and two workers.

Every check ends the same way: each grid cell has exactly one ok record in results.jsonl and
one COMPLETE trial, and the grids count n seeds a cell. The counts (kills tried, finished cells
trained again, offsets tried / recovered) are printed (``pytest -s`` shows them).

To fit 20+ kills into CI's 2 cores, a sweep runs as a child forked from a process that has
imported torch, Lightning and Optuna once (``DRIVER``), running ``synthlab.cli.main`` as the
command does; the workers test starts real ``python -m synthlab.cli`` processes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from sweep_kit import TINY, child_env, study_trials, trials_so_far, wait_running, write_sweep
from synthlab.analysis import grids
from synthlab.run import records
from synthlab.study import sweeping

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")]

N_KILLS = 22  # SIGKILLs that land before the sweep ends
N_OFFSETS = 24
SEED = 20261124
STUDY = "tiny-smoke"
KILLS = TINY.replace("steps = 10,", "steps = 30,")  # 4 cells: rope, nope x seeds 0, 1

# A process that imports what a sweep needs once, then forks one child per job: the child runs
# `synthlab sweep` (cli.main) with its stdout / stderr in files, optionally set up to SIGKILL
# itself at one point (`crash`); the parent prints the child's pid, signals it when told, and
# prints its exit code.
DRIVER = r'''
import json, os, signal, sys, threading, traceback
# SIGINT as a terminal's foreground job has it: a job started in the background by a
# non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and Python keeps it ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot, seaborn, pandas, optuna, lightning, safetensors.torch
import synthlab.cli, synthlab.run.training, synthlab.study.sweeping, synthlab.analysis.grids, synthlab.model
from synthlab.study import scheduler
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal._file import get_lock_file


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def arm(crash):
    """SIGKILL this process at the crash point, on its nth match."""
    seen = [0]

    def hit(text=""):
        if crash.get("match") and crash["match"] not in text:
            return False
        seen[0] += 1
        return seen[0] == crash["nth"]

    if crash["target"] == "with_cell":  # the run ended; nothing recorded yet
        orig_wc = scheduler.with_cell
        scheduler.with_cell = lambda rec, key: die() if hit() else orig_wc(rec, key)
    elif crash["target"] == "append_record":  # results.jsonl: before, torn, after the write
        orig = scheduler.append_record

        def append_record(path, record, **kw):
            if not hit():
                return orig(path, record, **kw)
            if crash["mode"] == "before":
                die()
            if crash["mode"] == "torn":
                data = (json.dumps(record) + "\n").encode()
                with open(path, "ab") as f:
                    f.write(data[: len(data) // 2])
                die()
            orig(path, record, **kw)
            die()
        scheduler.append_record = append_record
    elif crash["target"] == "journal":  # one journal entry half written, under the lock
        orig_append = JournalFileBackend.append_logs

        def append_logs(self, logs):
            data = "\n".join(json.dumps(x, separators=(",", ":")) for x in logs) + "\n"
            if hit(data):
                with get_lock_file(self._lock):
                    with open(self._file_path, "ab") as f:
                        f.write(data.encode()[: len(data) // 2])
                        f.flush()
                        os.fsync(f.fileno())
                    die()
            return orig_append(self, logs)
        JournalFileBackend.append_logs = append_logs


assert threading.active_count() == 1
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    # opened before the fork: a kill that lands before the child runs must still leave both files
    fds = [os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for name in ("stdout", "stderr")]
    pid = os.fork()
    if pid != 0:
        for fd in fds:
            os.close(fd)
    if pid == 0:
        code = 1
        try:
            for fd, src in zip((1, 2), fds):
                os.dup2(src, fd)
            if job.get("crash"):
                arm(job["crash"])
            code = synthlab.cli.main(job["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(pid, flush=True)
    for cmd in sys.stdin:  # "kill SIG" (the child is not reaped before "wait": its pid is never reused)
        if cmd.startswith("kill"):
            os.kill(pid, int(cmd.split()[1]))
            continue
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
        break
'''


class Driver:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env()
        )
        assert self.proc.stdout.readline().strip() == "ready"
        self.n = 0
        self.pending = False

    def spawn(self, out: Path, *args: str, sweep: Path, crash: dict | None = None) -> int:
        """Start `synthlab sweep SWEEP --out OUT ARGS` in a child; its pid. A child that a failed
        test left unwaited is killed first (the driver would read this job as its "wait", and
        every later test would fail with it)."""
        if self.pending:
            self.kill(signal.SIGKILL)
            self.proc.stdin.write("wait\n")
            self.proc.stdin.flush()
            self.proc.stdout.readline()  # its exit code (its output files may not exist)
        self.pending = True
        self.n += 1
        self.last = (out.parent / f"{out.name}.{self.n}.stdout", out.parent / f"{out.name}.{self.n}.stderr")
        job = {
            "argv": ["sweep", str(sweep), "--out", str(out), *args],
            "stdout": str(self.last[0]),
            "stderr": str(self.last[1]),
            "crash": crash,
        }
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def kill(self, sig: int) -> None:
        """Send ``sig`` to the last child (through the driver, which has not reaped it yet)."""
        self.proc.stdin.write(f"kill {int(sig)}\n")
        self.proc.stdin.flush()

    def wait(self) -> tuple[int, str, str]:
        """The last child's exit code (-9: SIGKILL), stdout and stderr."""
        self.proc.stdin.write("wait\n")
        self.proc.stdin.flush()
        code = int(self.proc.stdout.readline())
        self.pending = False
        return code, self.last[0].read_text(), self.last[1].read_text()

    def run(self, out: Path, *args: str, sweep: Path, crash: dict | None = None) -> tuple[int, str, str]:
        self.spawn(out, *args, sweep=sweep, crash=crash)
        return self.wait()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def driver():
    d = Driver()
    yield d
    d.close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory, driver):
    """The kill sweep file, its cells and one finished study of it, with the seconds a sweep of
    it takes warm: the first run also fills caches (compiled kernels, imports) that every later
    one finds, and kill moments drawn over its longer span land after most sweeps had ended."""
    base = tmp_path_factory.mktemp("fault")
    path = write_sweep(base, KILLS)
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    out = base / "finished"
    code, so, se = driver.run(out, sweep=path)
    assert code == 0 and "4/4 cells finished" in so, se
    t0 = time.time()
    code, so, se = driver.run(base / "timed", sweep=path)
    assert code == 0 and "4/4 cells finished" in so, se
    return path, cells, out, time.time() - t0


def _lines(out: Path) -> list[dict]:
    """Every record line of results.jsonl (a torn line skipped), none deduplicated."""
    return records.scan_records(out / "results.jsonl")[0]


def check_exactly_once(out: Path, cells, recorded: set[str] | None = None) -> int:
    """Assert one ok record per cell in results.jsonl (of the cells in ``recorded``, default
    all: the others ran before this directory's file), one COMPLETE trial per cell, and grids
    with n = 2 seeds a cell; returns how many finished cells were trained again (extra ok
    records: must be 0)."""
    from optuna.trial import TrialState

    keys = sorted(c.key for c in cells)
    ok = Counter(r["cell"] for r in _lines(out) if r["status"] == "ok")
    retrained = sum(n - 1 for n in ok.values())
    assert sorted(ok) == sorted(keys if recorded is None else recorded) and retrained == 0, ok
    _, trials = study_trials(out, STUDY)
    done = Counter(t.user_attrs["cell_key"] for t in trials if t.state == TrialState.COMPLETE)
    assert sorted(done) == keys and set(done.values()) == {1}
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert len(grids.read_results(out / "study-results.jsonl")) == len(cells)
    if recorded is None:
        recs = grids.read_results(out / "results.jsonl")
        assert len(recs) == len(cells)
        g = grids.make_grid(grids.tidy(recs), "ood", "split", "pe", "token_acc", "error", split=["test", "ood-sparse"])
        assert (g.n == 2).all().all()  # two seeds a cell, none counted twice
    assert set(pd.read_csv(out / "grids" / "ood.csv")["n"]) == {2}
    return retrained


def _trial_counts(out: Path) -> Counter:
    """How the study's trials ended: reaped (stale), closed from a record after their process
    died, or closed from results.jsonl."""
    _, trials = study_trials(out, STUDY)
    c = Counter()
    for t in trials:
        rec = t.user_attrs.get("record")
        if "stale" in t.user_attrs:
            c["reaped and re-queued"] += 1
        elif "closed_from_record" in t.user_attrs:
            c["closed from its record"] += 1
        elif rec is not None and rec.get("trial") != t.number:
            c["closed from results.jsonl"] += 1
    return c


def test_a_kill_before_the_child_runs_still_leaves_its_output_files(driver, setup, tmp_path):
    """The driver's own race (CI, 2026-11): a SIGKILL sent at once used to land before the child
    had opened its stdout file, and reading it failed."""
    path = setup[0]
    for i in range(5):
        driver.spawn(tmp_path / f"early{i}", sweep=path)
        driver.kill(signal.SIGKILL)
        code, so, se = driver.wait()
        assert code == -signal.SIGKILL and so == "" and "Traceback" not in se


def test_sigkill_at_random_moments_never_trains_a_finished_cell_again(driver, setup, tmp_path):
    from optuna.trial import TrialState

    path, cells, _, span = setup
    rng = random.Random(SEED)
    stats = Counter()
    rounds: list[Path] = []

    def new_round() -> Path:
        rounds.append(tmp_path / f"round{len(rounds)}")
        return rounds[-1]

    out = new_round()
    for _ in range(3 * N_KILLS):
        if stats["kills"] == N_KILLS:
            break
        driver.spawn(out, sweep=path)
        time.sleep(rng.uniform(0, span))
        driver.kill(signal.SIGKILL)
        code, so, se = driver.wait()
        if code == 0:  # it finished before the kill came
            stats["finished before the kill"] += 1
            out = new_round()
            continue
        assert code == -signal.SIGKILL, se
        stats["kills"] += 1
        stats["kills mid-cell"] += any(t.state == TrialState.RUNNING for t in trials_so_far(out, STUDY))
    retrained = 0
    for out in rounds:
        code, so, se = driver.run(out, sweep=path)
        assert code == 0 and "4/4 cells finished" in so, se
        retrained += check_exactly_once(out, cells)
        stats.update(_trial_counts(out))
    print(
        f"\n[fault-injection] SIGKILL at random moments: {stats['kills']} kills ({stats['kills mid-cell']} mid-cell, "
        f"{stats['finished before the kill']} runs finished first) over {len(rounds)} grids; finished cells "
        f"trained again: {retrained}; trials reaped and re-queued: {stats['reaped and re-queued']}, closed from "
        f"their record: {stats['closed from its record']}, from results.jsonl: {stats['closed from results.jsonl']}"
    )
    assert stats["kills"] == N_KILLS and retrained == 0


CRASH_POINTS = {  # where the process dies, on its second cell; the runs a finished grid then took
    "run ended, nothing recorded": ({"target": "with_cell"}, 5),
    "record on the trial, not in results.jsonl": ({"target": "append_record", "mode": "before"}, 4),
    "results.jsonl line torn": ({"target": "append_record", "mode": "torn"}, 4),
    "record in results.jsonl, trial not closed": ({"target": "append_record", "mode": "after"}, 4),
    "journal entry of the record torn": ({"target": "journal", "match": '"user_attr":{"record"'}, 5),
    "journal entry closing the trial torn": ({"target": "journal", "match": '"state":1,'}, 4),
}


def test_a_kill_at_each_step_of_recording_a_run(driver, setup, tmp_path):
    """Only a cell killed before its record reached the trial trains again (it had not finished)."""
    path, cells, _, _ = setup
    report = []
    for i, (name, (crash, runs)) in enumerate(CRASH_POINTS.items()):
        out = tmp_path / f"point{i}"
        code, _, se = driver.run(out, sweep=path, crash={"nth": 2, **crash})
        assert code == -signal.SIGKILL, f"{name}: the crash point was not reached: {se}"
        code, so, se = driver.run(out, sweep=path)
        assert code == 0 and "4/4 cells finished" in so, f"{name}: {se}"
        if crash["target"] == "journal":  # one warning, the cut entry kept aside
            assert len([x for x in se.splitlines() if "torn or unreadable" in x]) == 1, se
            assert list(out.glob("study.journal.torn-*"))
        assert check_exactly_once(out, cells) == 0
        trained = len(list((out / "runs").glob("*-flipflop-*")))
        assert trained == runs, name
        how = ", ".join(f"{k}: {v}" for k, v in sorted(_trial_counts(out).items()))
        report.append(f"{name}: {trained} runs for 4 cells ({how})")
    print(
        "\n[fault-injection] a kill at each step of recording a run (finished cells trained again: 0):\n  "
        + "\n  ".join(report)
    )


def test_a_kill_while_reaping_a_recorded_trial_loses_no_record(driver, setup, tmp_path):
    """A worker dies after its run was recorded on the trial but before results.jsonl had it;
    the next sweep reaps that trial from its record and is itself killed at its first append.
    Found by the random-kill test: the reaper closed the trial before appending its line, so a
    kill between the two left a COMPLETE trial whose run results.jsonl never got. Now the line
    goes first, as for a run that just ended."""
    path, cells, _, _ = setup
    out = tmp_path / "reap"
    code, _, se = driver.run(out, sweep=path, crash={"nth": 2, "target": "append_record", "mode": "before"})
    assert code == -signal.SIGKILL, se
    code, _, se = driver.run(out, sweep=path, crash={"nth": 1, "target": "append_record", "mode": "before"})
    assert code == -signal.SIGKILL, se
    code, so, se = driver.run(out, sweep=path)
    assert code == 0 and "4/4 cells finished" in so, se
    assert check_exactly_once(out, cells) == 0
    assert len(list((out / "runs").glob("*-flipflop-*"))) == 4  # nothing trained twice


def test_a_journal_cut_at_random_offsets_recovers(driver, setup, tmp_path):
    """A finished study's journal cut anywhere (a torn tail, or the study's end lost): the sweep
    warns, goes on, runs the cells whose end was lost and no finished one; with results.jsonl
    beside it, the lost cells' records are taken from there and nothing trains."""
    import optuna
    from optuna.trial import TrialState

    path, cells, finished, _ = setup
    journal = (finished / "study.journal").read_bytes()
    results = (finished / "results.jsonl").read_bytes()
    ends = {i + 1 for i, b in enumerate(journal) if b == ord("\n")}
    rng = random.Random(SEED + 1)
    stats = Counter()
    for i in range(N_OFFSETS):
        cut = rng.randrange(len(journal))
        with_results = i % 2 == 1
        out = tmp_path / f"cut{i}"
        out.mkdir()
        (out / "study.journal").write_bytes(journal[:cut])
        if with_results:
            (out / "results.jsonl").write_bytes(results)
        # what the cut journal still holds finished (its whole entries, read from a copy)
        probe = tmp_path / f"probe{i}.journal"
        probe.write_bytes(journal[: max(e for e in ends | {0} if e <= cut)])
        store = sweeping.open_storage(str(probe))
        kept = {}
        if any(s.study_name == STUDY for s in store.get_all_studies()):
            kept = {
                t.user_attrs["cell_key"]: t.user_attrs["record"]["run_id"]
                for t in optuna.load_study(study_name=STUDY, storage=store).get_trials()
                if t.state == TrialState.COMPLETE
            }
        code, so, se = driver.run(out, sweep=path)
        assert code == 0 and "4/4 cells finished" in so, f"cut at {cut}: {se}"
        torn = cut not in ends and cut > 0
        assert ("torn or unreadable" in se) == torn, f"cut at {cut}: {se}"
        lost = {c.key for c in cells} - set(kept)
        check_exactly_once(out, cells, None if with_results else lost)  # the lost cells ran once, the rest not
        if with_results:  # nothing trained: every lost cell was closed from results.jsonl
            assert (out / "results.jsonl").read_bytes() == results
            stats["cells taken from results.jsonl"] += len(lost)
        else:
            stats["lost cells re-run"] += len(lost)
        _, trials = study_trials(out, STUDY)
        for t in trials:  # a finished cell keeps its run
            if t.state == TrialState.COMPLETE and t.user_attrs["cell_key"] in kept:
                assert t.user_attrs["record"]["run_id"] == kept[t.user_attrs["cell_key"]]
        stats["recovered"] += 1
        stats["torn tails cut"] += torn
    print(
        f"\n[fault-injection] journal cut at {N_OFFSETS} random offsets: {stats['recovered']} recovered "
        f"({stats['torn tails cut']} torn tails cut with a warning); lost cells re-run: "
        f"{stats['lost cells re-run']}, taken from results.jsonl: {stats['cells taken from results.jsonl']}; "
        "finished cells re-run: 0"
    )
    assert stats["recovered"] == N_OFFSETS


def _wait_running(out: Path, n: int = 1, timeout: float = 180.0, proc=None) -> list:
    return wait_running(out, STUDY, n, timeout, proc)


def _assert_requeued(out: Path) -> None:
    from optuna.trial import TrialState

    trials = study_trials(out, STUDY)[1]
    assert not [t for t in trials if t.state == TrialState.RUNNING]  # back to the queue
    assert not [t for t in trials if "record" in t.user_attrs]  # no failed record
    assert not [r for r in _lines(out) if r["status"] != "ok"]


def test_sigterm_and_sigint_mid_cell_requeue_the_cell_and_exit_130(driver, tmp_path):
    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 3000,").replace("seed = [0, 1]", "seed = [0]"))
    out = tmp_path / "out"
    for sig in (signal.SIGTERM, signal.SIGINT):
        driver.spawn(out, sweep=path)
        _wait_running(out)
        time.sleep(0.5)
        driver.kill(sig)
        code, _, se = driver.wait()
        assert code == 130, se
        assert se.strip().splitlines()[-1] == "synthlab: interrupted" and "Traceback" not in se
        _assert_requeued(out)
    print("\n[fault-injection] SIGTERM and SIGINT mid-cell: exit 130, cell re-queued, no record")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not reaped yet
    except (FileNotFoundError, IndexError):
        return True


def test_two_workers_sigterm_and_sigkill_of_the_main_process(tmp_path):
    """--workers 2 (real processes): SIGTERM stops both workers (130, cells re-queued); SIGKILL
    of the main process stops its helper too (the kernel's SIGTERM), which re-queues its cell."""
    from optuna.trial import TrialState

    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 3000,").replace("seed = [0, 1]", "seed = [0]"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "synthlab.cli", "sweep", str(path), "--out", str(out), "--workers", "2", "--quiet"]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        running = _wait_running(out, 2, proc=proc)
        helper = next(t for t in running if t.user_attrs["worker"]["pid"] != proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == (130 if sig == signal.SIGTERM else -signal.SIGKILL), err
        deadline = time.time() + 60
        while time.time() < deadline and not _gone(helper.user_attrs["worker"]["pid"]):
            time.sleep(0.2)
        assert _gone(helper.user_attrs["worker"]["pid"]), "the helper outlived the sweep"
        if sig == signal.SIGTERM:
            _assert_requeued(out)
        else:  # the helper re-queued its cell; the main process's is left to the next sweep's reaper
            trials = {t.number: t for t in study_trials(out, STUDY)[1]}
            assert trials[helper.number].state == TrialState.FAIL and "record" not in trials[helper.number].user_attrs
    print(
        "\n[fault-injection] --workers 2: SIGTERM -> 130 with both cells re-queued; SIGKILL of the main "
        "process -> its helper stopped and re-queued its cell"
    )


def test_sigkill_at_random_moments_with_batched_seeds(driver, setup, tmp_path):
    """--batch-seeds takes a cell's two seeds together: kills mid-batch, mid-record of one seed
    of the pair, between the pair's records, still leave every cell trained exactly once."""
    path, cells, _, span = setup
    rng = random.Random(SEED + 1)
    kills, finished_first, rounds = 0, 0, [tmp_path / "round0"]
    for _ in range(40):
        if kills == 10:
            break
        driver.spawn(rounds[-1], "--batch-seeds", sweep=path)
        time.sleep(rng.uniform(0, span))
        driver.kill(signal.SIGKILL)
        code, so, se = driver.wait()
        if code == 0:
            finished_first += 1
            rounds.append(tmp_path / f"round{len(rounds)}")
            continue
        assert code == -signal.SIGKILL, se
        kills += 1
    retrained, batched = 0, 0
    for out in rounds:
        code, so, se = driver.run(out, "--batch-seeds", sweep=path)
        assert code == 0 and "4/4 cells finished" in so, se
        retrained += check_exactly_once(out, cells)
        batched += sum(1 for r in _lines(out) if r["status"] == "ok" and r["train"].get("batched"))
    print(
        f"\n[fault-injection] --batch-seeds, SIGKILL at random moments: {kills} kills, {finished_first} runs "
        f"finished first, over {len(rounds)} grids; cells trained in a batch: {batched}; finished cells trained "
        f"again: {retrained}"
    )
    assert kills == 10 and retrained == 0 and batched > 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def test_two_workers_run_nothing_from_a_hostile_working_directory(tmp_path):
    """`sweep --workers 2` run (as the console script runs it: no working directory on
    sys.path) where a jsonlines.py and a *.dist-info declaring a synthlab.tasks entry point lie:
    the helpers imported and ran both; now nothing of it runs, and the grid finishes."""
    from test_bad_input import plant

    path = write_sweep(tmp_path, TINY)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    plant(cwd)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "synthlab.cli",
        "sweep",
        str(path),
        "--out",
        str(out),
        "--workers",
        "2",
        "--quiet",
    ]
    p = subprocess.run(cmd, cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0 and "4/4 cells finished" in p.stdout, p.stderr
    # the helper loads the task plugins whether or not it trains a cell (it validates the grid
    # first), so before the fix the entry point's marker was written even when the main process
    # had run every cell
    assert not list(cwd.glob("PLANTED-*")), "a helper ran code from the working directory"
    print(
        "\n[fault-injection] --workers 2 in a directory with a planted jsonlines.py and entry point: "
        "planted code run: 0"
    )


@pytest.mark.parametrize("delay", [0.0, 0.5, 2.0])
def test_sigterm_while_the_helpers_import_prints_no_traceback(tmp_path, delay):
    """A stop that reached a helper during `import torch` (before its try)
    printed its KeyboardInterrupt traceback; now: exit 130, one line, no cell left running."""
    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 3000,"))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "synthlab.cli", "sweep", str(path), "--out", str(out), "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not _children(proc.pid) and proc.poll() is None:
        time.sleep(0.05)
    assert _children(proc.pid), "no helper started"
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == "synthlab: interrupted", err
    if (out / "study.journal").exists():
        _assert_requeued(out)


def test_a_train_killed_outright_leaves_nothing_the_next_run_keeps(tmp_path, capsys):
    """Kill -9 during `synthlab train` left OUT/<run_id>/ (config.json, logs/) that
    nothing removed. The next run on the same OUT removes it, says so, and leaves alone a run
    directory whose process still runs."""
    from synthlab.cli import main
    from synthlab.run import rundir

    out = tmp_path / "runs"
    live = out / "live-run"  # another train on the same OUT, still running (this process)
    rundir.make(live, {"k": 1})
    cmd = [
        sys.executable,
        "-m",
        "synthlab.cli",
        "train",
        "flipflop",
        "--pe",
        "rope",
        "--preset",
        "smoke",
        "--set",
        "steps=100000",
        "--out",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and not list(out.glob("*-flipflop-*/config.json")):
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    (half,) = [p.parent for p in out.glob("*-flipflop-*/config.json")]
    proc.kill()
    proc.wait()
    assert half.is_dir()  # what the kill left
    assert main(["train", "flipflop", "--pe", "nope", "--preset", "smoke", "--set", "steps=2", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert not half.exists() and f"removed 1 run directory a killed run left half made: {half}" in err, err
    assert (live / "config.json").is_file() and (live / rundir.OWNER).is_file()  # its process (this one) runs
    assert len([p for p in out.glob("*-flipflop-*") if (p / "model.safetensors").is_file()]) == 1
