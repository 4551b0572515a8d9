"""Launchers: where a sweep's cells train. The seam between the grid and the machines.

:func:`synthlab.study.sweeping.sweep` opens the study; a launcher gets the cells not finished
trained: ``local`` (:class:`LocalLauncher`, this process and ``--workers`` helpers) or ``slurm``
(:class:`SlurmLauncher`, one job array through submitit, SLURM owning liveness). Settings come
from ``--set launcher.KEY=VALUE`` and ``[launcher]``, checked before anything is submitted.
Both, and how to add another (Ray, Kubernetes): docs/scaling.md.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from synthlab.plan.sweepfile import LAUNCHER_KEYS
from synthlab.study.optuna_api import trial_id

NAMES = ("local", "slurm")
HELPER_MODULE = "synthlab.study.sweeping"  # whose _helper runs one helper process of a local sweep
# key -> what it is (the settings a [launcher] table or --set launcher.KEY may give)
SLURM_KEYS = {
    "partition": "the partition (sbatch --partition; default: the cluster's default)",
    "time": "each task's time limit: minutes, MM:SS, HH:MM:SS, D-HH or D-HH:MM[:SS] (default 60)",
    "gpus_per_task": "GPUs per task (default 0)",
    "cpus_per_task": "CPU cores per task (default 1)",
    "array_parallelism": "tasks of the array running at once (default 64)",
    "mem_gb": "memory per task in GB (default: the cluster's)",
    "max_requeues": "how many times a timed-out task is requeued (default 3)",
}
PREFIX = "launcher."
assert tuple(SLURM_KEYS) == LAUNCHER_KEYS


def split_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` items -> (the cells' settings, the launcher's: ``launcher.`` stripped)."""
    cells = {k: v for k, v in settings.items() if not k.startswith(PREFIX)}
    launcher = {k[len(PREFIX) :]: v for k, v in settings.items() if k.startswith(PREFIX)}
    return cells, launcher


def parse_minutes(value: Any, what: str) -> int:
    """A SLURM time limit (``90``, ``"90"``, ``"1:30:00"``, ``"2-00"``, ``"1-12:00:00"``) -> minutes (>= 1)."""
    text = str(value).strip()
    if isinstance(value, bool):
        text = ""
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not m:
        raise ValueError(f"{what}={value!r}: a time limit is minutes, MM:SS, HH:MM:SS, D-HH or D-HH:MM[:SS]")
    days, a, b, c = m.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # HH:MM:SS
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # MM:SS
        seconds = int(a) * 60 + int(b)
    else:
        seconds = int(a) * 60
    minutes = math.ceil(seconds / 60)
    if not 1 <= minutes <= 366 * 24 * 60:
        raise ValueError(f"{what}={value!r}: a time limit is 1 minute to 366 days")
    return minutes


def _int(value: Any, what: str, low: int, high: int) -> int:
    try:
        n = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
    except ValueError:
        raise ValueError(f"{what}={value!r}: an integer from {low} to {high}") from None
    if not low <= n <= high:
        raise ValueError(f"{what}={value!r}: an integer from {low} to {high}")
    return n


@dataclasses.dataclass
class Grid:
    """What a launcher gets: a validated sweep with its study open (see :mod:`synthlab.study.sweeping`)."""

    spec: Any  # SweepSpec
    preset: str
    cells: list  # [Cell]
    study_name: str
    out: Path
    url: str  # the study's storage (a journal file path or a database URL)
    storage: Any  # the opened Optuna storage
    study: Any  # the Optuna study
    plans: dict  # cell key -> dashboard.TrialPlan
    quiet: bool
    retry_failed: bool
    logger: str | None
    progress_every: float
    poll: float
    configs: dict = dataclasses.field(default_factory=dict)  # cell key -> its resolved RunConfig
    helper: dict = dataclasses.field(default_factory=dict)  # a helper process's sweep() arguments (local)

    def progress_view(self):
        """The sweep's progress view (bar, lines or quiet) over this grid's cells."""
        from synthlab.study import dashboard
        from synthlab.study import progress as progress_mod

        labels = {c.key: c.label() for c in self.cells}
        mode = progress_mod.mode_for(self.quiet)
        return progress_mod.SweepProgress(mode, labels, dashboard.objective_name(self.spec), self.progress_every)


class Launcher(abc.ABC):
    """Gets a grid's unfinished cells trained (see the module docstring)."""

    name = "?"

    def check(self) -> None:  # noqa: B027 - optional: a launcher without settings has nothing to check
        """Before anything is written: ValueError for settings or a machine that cannot work."""

    detach = False  # return once the cells are handed over (the launcher keeps them running)

    @abc.abstractmethod
    def run(self, grid: Grid) -> list:
        """Train the grid's cells not finished; each finished cell with its record
        (:meth:`synthlab.study.scheduler.Runner.cell_records`), once the grid is done or, detached,
        once its cells are handed over."""


@dataclasses.dataclass
class LocalLauncher(Launcher):
    """This machine: this process runs the queue (:class:`synthlab.study.scheduler.Runner`) and
    ``workers - 1`` helper processes run the same loop (:mod:`synthlab.study.workers`), all
    taking cells from the study until none is left."""

    name = "local"
    workers: int | str = 1  # a count or "auto" (workers.resolve)
    trials: int | None = None  # at most this many cells trained by this process
    heartbeat_interval: float = 30.0
    grace_period: float = 180.0
    batch_seeds: bool = False

    def run(self, grid: Grid) -> list:
        from synthlab.study import progress as progress_mod
        from synthlab.study import workers
        from synthlab.study.scheduler import Runner

        view = grid.progress_view()
        runner = Runner(
            grid.spec,
            grid.preset,
            grid.cells,
            grid.storage,
            grid.study,
            grid.out,
            view.mode != progress_mod.BAR,  # the trainer's own per-run bar only under the sweep's bar
            self.heartbeat_interval,
            self.grace_period,
            grid.poll,
            progress=view,
            plans=grid.plans,
            logger=grid.logger,
            batch_seeds=self.batch_seeds,
            configs=grid.configs,
        )
        helpers: list[subprocess.Popen] = []
        try:
            if grid.retry_failed:  # before any helper starts, so none takes a failed cell for finished
                runner.retry_failed(runner.trials())
            view.start(*runner.snapshot())  # the cells done before (a failure set aside just now is not)
            runner.enqueue_missing(runner.trials())
            finished = {t.user_attrs["cell_key"] for t in runner.snapshot()[0]}
            n_workers = workers.resolve(self.workers, len(grid.cells) - len(finished))  # none for a finished grid
            threads = workers.threads_per_worker(n_workers)
            if n_workers > 1:
                runner.log(f"[sweep] {n_workers} workers x {threads} thread(s)")
                # helpers print nothing but errors: this process shows their cells (view.watch)
                helpers = workers.spawn(n_workers, HELPER_MODULE, grid.helper)
                view.watch(runner.snapshot, [p.pid for p in helpers], grid.poll)
            with workers.torch_threads(threads) if helpers else contextlib.nullcontext():
                runner.loop(self.trials)
            codes = workers.wait(helpers)
            view.observe(*runner.snapshot())  # the helpers' last cells
        except BaseException:
            workers.stop(helpers)
            raise
        finally:
            view.close()
        if any(codes):
            _warn_dead_helpers(helpers, codes, runner.trials(), runner.by_key)
        return runner.cell_records()


def _warn_dead_helpers(helpers, codes: list[int], trials, cells: dict) -> None:
    """One line per helper that did not exit cleanly, and the cell it left running, if any (one
    that died while this process still ran the grid had its cell reaped and run again here)."""
    from optuna.trial import TrialState

    from synthlab.core.processes import same_pid_space, worker_id

    me = worker_id()

    def by(t, pid: int) -> bool:  # the helper's, not a same-numbered pid's on another machine
        w = t.user_attrs.get("worker") or {}
        return w.get("pid") == pid and same_pid_space(w, me)

    for p, code in zip(helpers, codes):
        if code == 0:
            continue
        left = [
            cells[k].label() if k in cells else f"trial {t.number}"
            for t in trials
            if t.state == TrialState.RUNNING and by(t, p.pid)
            for k in [t.user_attrs.get("cell_key")]
        ]
        print(
            f"synthlab sweep: warning: worker process {p.pid} exited with code {code}"
            + (f"; its running cell ({', '.join(left)}) runs again on the next sweep" if left else ""),
            file=sys.stderr,
        )


@dataclasses.dataclass
class SlurmSettings:
    partition: str | None = None
    time_min: int = 60
    gpus_per_task: int = 0
    cpus_per_task: int = 1
    array_parallelism: int = 64
    mem_gb: float | None = None
    max_requeues: int = 3


def slurm_settings(given: dict[str, Any], where: dict[str, str]) -> SlurmSettings:
    """Typed and checked settings; ``where[key]``: how the user gave it (``--set launcher.time``)."""
    s = SlurmSettings()
    for key, value in given.items():
        what = where.get(key, f"launcher.{key}")
        if key not in SLURM_KEYS:
            raise ValueError(f"{what}: unknown launcher setting (allowed: {', '.join(SLURM_KEYS)})")
        if key == "partition":
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64})*", str(value)):
                raise ValueError(
                    f"{what}={value!r}: a partition name (letters, digits, '_', '.', '-'; several separated by ',')"
                )
            s.partition = str(value)
        elif key == "time":
            s.time_min = parse_minutes(value, what)
        elif key == "gpus_per_task":
            s.gpus_per_task = _int(value, what, 0, 64)
        elif key == "cpus_per_task":
            s.cpus_per_task = _int(value, what, 1, 1024)
        elif key == "array_parallelism":
            s.array_parallelism = _int(value, what, 1, 100_000)
        elif key == "max_requeues":
            s.max_requeues = _int(value, what, 0, 100)
        elif key == "mem_gb":
            try:
                mem = float(str(value).strip())
            except ValueError:
                mem = float("nan")
            if not (
                isinstance(value, (int, float, str))
                and not isinstance(value, bool)
                and math.isfinite(mem)
                and 0 < mem <= 65536
            ):
                raise ValueError(f"{what}={value!r}: memory in GB, more than 0 and at most 65536")
            s.mem_gb = mem
    return s


def make_launcher(
    name: str | None, given: dict[str, Any], table: dict[str, Any] | None = None, **local: Any
) -> Launcher:
    """The launcher ``--launcher NAME`` asks for, with its settings checked (ValueError: one line).

    ``given``: ``--set launcher.KEY`` items (strings); ``table``: the sweep file's ``[launcher]``;
    ``local``: :class:`LocalLauncher`'s fields (the sweep's workers, trials, ...)."""
    name = name or "local"
    if name not in NAMES:
        raise ValueError(f"--launcher {name!r} is not allowed (allowed: {', '.join(NAMES)})")
    if name == "local":
        if given:
            raise ValueError(f"--set launcher.{next(iter(given))}: launcher settings go with --launcher slurm")
        return LocalLauncher(**local)
    merged = {**(table or {}), **given}
    where = {k: (f"--set launcher.{k}" if k in given else f"[launcher] {k}") for k in merged}
    launcher = SlurmLauncher(slurm_settings(merged, where), where)
    launcher.check()
    return launcher


def _run(cmd: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def queue_states(job_ids: set[str]) -> dict[str, str] | None:
    """The queue's state of each of ``job_ids`` (``123_4``: array job 123, task 4) that is still in
    SLURM's queue (pending, running, requeued, completing...), or None when squeue cannot answer
    (then nobody is judged gone). A job not in the result has left the queue."""
    if not job_ids:
        return {}
    try:
        out = _run(["squeue", "--noheader", "--array", "--format=%i|%T", "--states=all"])
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    live = (
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "CONFIGURING",
        "COMPLETING",
        "STAGE_OUT",
        "SIGNALING",
        "RESV_DEL_HOLD",
        "STOPPED",
    )
    states = {}
    for line in out.stdout.splitlines():
        jid, _, state = line.strip().partition("|")
        if jid in job_ids and state in live:
            states[jid] = state
    return states


class SlurmLauncher(Launcher):
    """One SLURM job array through submitit, one task per cell not finished (module docstring)."""

    name = "slurm"

    def __init__(self, settings: SlurmSettings, where: dict[str, str] | None = None) -> None:
        self.settings, self.where = settings, where or {}

    def check(self) -> None:
        import importlib.util

        if importlib.util.find_spec("submitit") is None:
            raise ValueError("--launcher slurm needs submitit: pip install 'synthlab-pe[slurm]'")
        for tool in ("sbatch", "squeue", "scontrol"):
            if shutil.which(tool) is None:
                raise ValueError(f"--launcher slurm: {tool} is not on PATH (run the sweep on a SLURM login node)")
        p = self.settings.partition
        if p is not None:
            try:
                out = _run(["sinfo", "--noheader", "--format=%R"])
            except (OSError, subprocess.SubprocessError) as e:
                raise ValueError(f"--launcher slurm: sinfo did not answer ({e})") from None
            if out.returncode != 0:
                line = (out.stderr.strip().splitlines() or ["no answer"])[-1]
                raise ValueError(f"--launcher slurm: sinfo failed: {line}")
            known = set(out.stdout.split())
            for name in p.split(","):
                if name not in known:
                    raise ValueError(
                        f"{self.where.get('partition', 'launcher.partition')}={name!r}: no such partition (the "
                        "cluster has: "
                        f"{', '.join(sorted(known)) or 'none'})"
                    )

    # ---- the study's view of the cells

    @staticmethod
    def jobs_of(t) -> set[str]:
        """The SLURM tasks that may hold trial ``t``: its ``slurm_job``, or, taken but not yet
        named, the tasks that claimed it."""
        if isinstance(t.user_attrs.get("slurm_job"), str):
            return {t.user_attrs["slurm_job"]}
        return {k.split(":", 1)[1] for k in t.user_attrs if k.startswith("slurm:")}

    def reap(self, runner, trials, states: dict[str, str]) -> None:
        """Close each RUNNING trial of the grid whose SLURM task has left the queue: from its
        record when it has one (the task died between the record and the close), else failed
        (``stale``), so that its cell is submitted again."""
        from optuna.trial import TrialState

        for t in trials:
            jobs = self.jobs_of(t)
            if t.state != TrialState.RUNNING or t.user_attrs.get("cell_key") not in runner.by_key or not jobs:
                continue
            if any(j in states for j in jobs):
                continue
            reason = f"SLURM task {', '.join(sorted(jobs))} left the queue"
            if not runner.close_from_record(t, reason):
                runner.fail_stale(t, reason, f": {reason} without a record")

    def to_submit(self, runner, trials, states: dict[str, str]) -> list:
        """The WAITING trials of the grid's cells that no task in the queue holds: one per cell
        with nothing running or finished (the lowest)."""
        from optuna.trial import TrialState

        from synthlab.study.liveness import is_live

        out = []
        for c in runner.cells:
            live = [t for t in runner.by_cell(trials).get(c.key, []) if is_live(t, runner.retried)]
            if any(t.state != TrialState.WAITING for t in live):
                continue  # finished, or running (in a task, or in a local worker)
            waiting = sorted(live, key=lambda t: t.number)
            if not waiting or any(j in states for t in waiting for j in self.jobs_of(t)):
                continue  # submitted already and still queued
            out.append(waiting[0])
        return out

    # ---- submission

    def executor(self, folder: Path, job_name: str):
        import submitit

        s = self.settings
        ex = submitit.SlurmExecutor(folder=str(folder), max_num_timeout=s.max_requeues)
        params: dict[str, Any] = dict(
            time=s.time_min,
            job_name=job_name,
            array_parallelism=s.array_parallelism,
            cpus_per_task=s.cpus_per_task,
            ntasks_per_node=1,
            nodes=1,
        )
        if s.partition is not None:
            params["partition"] = s.partition
        if s.gpus_per_task:
            params["gpus_per_task"] = s.gpus_per_task
        if s.mem_gb is not None:
            params["mem"] = f"{max(1, int(s.mem_gb * 1024))}MB"
        ex.update_parameters(**params)
        return ex

    def submit(self, grid: Grid, runner, waiting: list) -> list[str]:
        """One job array for ``waiting`` (trials); each trial gets its task's id (``slurm_job``)."""
        from synthlab.study.slurmtask import CellTask

        folder = grid.out.resolve() / "slurm"
        folder.mkdir(parents=True, exist_ok=True)
        jobs_in = []
        for t in waiting:
            cell = runner.by_key[t.user_attrs["cell_key"]]
            jobs_in.append(
                dict(
                    spec=grid.spec,
                    preset=grid.preset,
                    cell=cell,
                    trial=t.number,
                    study=grid.study_name,
                    storage=_absolute(grid.url),
                    out=str(grid.out.resolve()),
                    logger=grid.logger,
                    plan=grid.plans.get(cell.key),
                    config=grid.configs.get(cell.key),
                    threads=self.settings.cpus_per_task,
                )
            )
        ex = self.executor(folder, f"synthlab-{grid.study_name}"[:100])
        jobs = ex.map_array(CellTask(), jobs_in)
        for t, job in zip(waiting, jobs):
            runner.storage.set_trial_user_attr(trial_id(t), "slurm_job", str(job.job_id))
        return [str(j.job_id) for j in jobs]

    # ---- the launcher

    def run(self, grid: Grid) -> list:
        from synthlab.study.slurmtask import SlurmRunner

        view = grid.progress_view()
        view.slurm = True
        runner = SlurmRunner(
            grid.spec,
            grid.preset,
            grid.cells,
            grid.storage,
            grid.study,
            grid.out,
            True,
            progress=view,
            plans=grid.plans,
            logger=grid.logger,
            configs=grid.configs,
        )
        try:
            if grid.retry_failed:
                runner.retry_failed(runner.trials())
            trials = runner.trials()
            states = queue_states({j for t in trials for j in self.jobs_of(t)})
            if states is None:
                raise OSError("squeue: SLURM's queue cannot be read (is slurmctld up? is SLURM_CONF right?)")
            self.reap(runner, trials, states)
            runner.enqueue_missing(runner.trials())
            waiting = self.to_submit(runner, runner.trials(), states)
            view.start(*runner.snapshot())
            if waiting:
                ids = self.submit(grid, runner, waiting)
                array = ids[0].split("_")[0]
                runner.log(
                    f"[sweep] submitted {len(ids)} cell(s) to SLURM as job array {array} (logs in {grid.out / 'slurm'})"
                )
            if self.detach:
                left = len(grid.cells) - len(runner.snapshot()[0])
                print(
                    f"study {grid.study_name}: {left} of {len(grid.cells)} cells queued or running in SLURM; "
                    "run the same command again to gather the results and draw the grids",
                    file=sys.stderr,
                )
                return runner.cell_records()
            self.wait(runner, view, grid.poll)
        finally:
            view.close()
        return runner.cell_records()

    def wait(self, runner, view, poll: float) -> None:
        """Show the grid's progress until no task of it is in SLURM's queue any more; then close
        the trials of tasks that left it without closing them."""
        missed = 0
        while True:
            trials = runner.trials()
            view.observe(*runner.grid_state(trials, runner.retried))
            mine = {
                j
                for t in trials
                if t.user_attrs.get("cell_key") in runner.by_key and not t.state.is_finished()
                for j in self.jobs_of(t)
            }
            states = queue_states(mine)
            if states is None:
                missed += 1
                if missed == 10:
                    runner.log("[sweep] squeue does not answer; still waiting")
            elif not states:
                break
            else:
                missed = 0
            time.sleep(poll)
        trials = runner.trials()
        states = queue_states({j for t in trials for j in self.jobs_of(t)})
        if states is not None:
            self.reap(runner, trials, states)
        view.observe(*runner.grid_state(runner.trials(), runner.retried))


def _absolute(url: str) -> str:
    """A journal file's path made absolute (tasks start in another directory); URLs as they are."""
    return str(Path(url).resolve()) if "://" not in url else url


if __name__ == "__main__":  # pragma: no cover
    sys.exit("synthlab.study.launchers is a library module")
