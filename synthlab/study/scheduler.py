"""Scheduling a sweep's cells as Optuna trials, exactly once over any storage, whenever a
process is killed.

Cells are enqueued as WAITING trials and taken by the storage's atomic WAITING -> RUNNING
transition; the lowest-numbered live trial of a cell runs; a dead worker's trial is reaped and
its cell enqueued again; a record goes onto the trial, then into ``results.jsonl``, then the
trial is closed. This module owns those rules and :class:`Runner`, one worker's loop, batched
seeds included (a taken cell's sibling seeds trained as one stacked model). The rules one by
one: docs/architecture.md, "The sweep queue's rules" and "Batched seeds: one stacked model".
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from pathlib import Path
from typing import Any

from synthlab.core.processes import pid_alive, worker_id
from synthlab.plan.cells import Cell
from synthlab.plan.sweepfile import SweepSpec, objective
from synthlab.run.records import append_record, clean, failed_record, scan_records, with_cell
from synthlab.study.dashboard import AxisParams, Intermediate, TrialPlan, metric_attrs
from synthlab.study.liveness import Heartbeat, SilenceWatch, claim_key, is_live, stale_reason
from synthlab.study.optuna_api import trial_id
from synthlab.study.progress import QUIET, LiveTrial, SweepProgress
from synthlab.study.trialhooks import trial_report
from synthlab.study.workers import stops_deferred

SCRATCH = ".record-"  # OUT/runs/.record-<trial>-<pid>.jsonl: the trainer's own record of a run


def seed_group(cell: Cell) -> str:
    """A cell's key without its seed: the cells that batched seeds train together."""
    return json.dumps(
        {
            "task": cell.task,
            "pe": cell.pe,
            "positions": cell.positions,
            "rope_scaling": cell.rope_scaling,
            "overrides": cell.overrides,
            "slot": cell.slot,
        },
        sort_keys=True,
        separators=(",", ":"),
    )


class Runner:
    """One worker's loop over a grid's cells in a study (see the module docstring)."""

    def __init__(
        self,
        spec: SweepSpec,
        preset: str,
        cells: list[Cell],
        storage,
        study,
        out: Path,
        quiet: bool,
        heartbeat_interval: float,
        grace_period: float,
        poll: float,
        *,
        progress: SweepProgress | None = None,
        plans: dict[str, TrialPlan] | None = None,
        logger: str | None = None,
        batch_seeds: bool = False,
        configs: dict[str, Any] | None = None,
    ) -> None:
        """``quiet``: the trainer's (no per-run bar); ``progress``: where lines go (none: quiet);
        ``batch_seeds``: a taken cell's sibling seeds still waiting are taken too and trained
        with it as one stacked model (:mod:`synthlab.run.seedbatch`);
        ``plans``: each cell's steps and intermediate values (:func:`synthlab.study.dashboard.plan`;
        none: the loss, steps unknown); ``logger``: the trainer's ``logger`` (None: its default);
        ``configs``: each cell's resolved RunConfig (:func:`synthlab.study.sweeping.validate_cells`;
        a cell without one is resolved when it trains, see :meth:`config`)."""
        self.spec, self.preset, self.cells, self.storage, self.study = spec, preset, cells, storage, study
        self.configs = dict(configs or {})
        self.by_key = {c.key: c for c in cells}
        self.out, self.quiet, self.logger, self.plans = out, quiet, logger, plans or {}
        self.progress = progress if progress is not None else SweepProgress(QUIET, {}, "")
        self.params = AxisParams(cells)
        self.results = out / "results.jsonl"
        self.heartbeat_interval, self.grace_period, self.poll = heartbeat_interval, grace_period, poll
        self.me = worker_id(heartbeat_interval)
        self.silence = SilenceWatch()  # other machines' heartbeats, timed on this clock
        self.ran = 0
        self.held: list[Any] = []  # trials this worker took and has not trained yet
        self.retried: set[int] = set()
        self.batch_seeds = batch_seeds
        self.unbatchable: set[str] = set()  # seed groups found not batchable: one by one from then on
        # this study's records in results.jsonl: by cell key, by trial number (records without
        # a cell key), and how far the file has been read
        self._recorded: dict[str, dict[str, Any]] = {}
        self._recorded_by_trial: dict[int, dict[str, Any]] = {}
        self._read_to = 0
        self._clear_scratch()

    def log(self, msg: str) -> None:
        self.progress.write(msg)

    def trials(self):
        """The study's trials; also refreshes ``self.retried``, the failed trials set aside by
        --retry-failed (study attributes ``retried:<number>``: Optuna does not let a finished
        trial's own attributes change, and one key per trial needs no read-modify-write)."""
        self.retried = _retried(self.study)
        return self.study.get_trials(deepcopy=False)

    def grid_state(self, trials, retried: set[int]) -> tuple[list, list]:
        """This grid's trials that finished its cells (ok or failed, not set aside by
        --retry-failed), and its running ones: what the progress view shows."""
        from optuna.trial import TrialState

        mine = [t for t in trials if t.user_attrs.get("cell_key") in self.by_key]
        finished = [t for t in mine if t.state.is_finished() and is_live(t, retried)]
        return finished, [t for t in mine if t.state == TrialState.RUNNING]

    def snapshot(self) -> tuple[list, list]:
        """:meth:`grid_state` read from the study now, changing nothing here (the progress
        view's thread polls it while this worker trains)."""
        return self.grid_state(self.study.get_trials(deepcopy=False), _retried(self.study))

    def by_cell(self, trials) -> dict[str, list]:
        out: dict[str, list] = {}
        for t in trials:
            key = t.user_attrs.get("cell_key")
            if key is not None:
                out.setdefault(key, []).append(t)
        return out

    # ---- results.jsonl

    def _read_results(self) -> None:
        """Read what was appended to results.jsonl since the last call."""
        size = self.results.stat().st_size if self.results.exists() else 0
        if size < self._read_to:  # replaced or cut: read it again
            self._recorded, self._recorded_by_trial, self._read_to = {}, {}, 0
        recs, self._read_to = scan_records(self.results, self._read_to)
        for r in recs:
            if r.get("study") != self.study.study_name:
                continue
            if isinstance(r.get("cell"), str):
                self._recorded[r["cell"]] = r
            elif isinstance(r.get("trial"), int):
                self._recorded_by_trial[r["trial"]] = r

    def recorded(self, cell: Cell, trials) -> dict[str, Any] | None:
        """The latest record of ``cell`` in results.jsonl, or None."""
        self._read_results()
        if cell.key in self._recorded:
            return self._recorded[cell.key]
        # a record from before records carried their cell: by its trial, if it names this cell
        for t in trials:
            r = self._recorded_by_trial.get(t.number)
            if r is not None and t.user_attrs.get("cell_key") == cell.key and _names(r, cell):
                return r
        return None

    def ensure_recorded(self, record: dict[str, Any], key: str) -> None:
        """Append ``record`` to results.jsonl unless it is there already (a reaped trial's)."""
        self._read_results()
        there = self._recorded.get(key)
        if there is None or there.get("run_id") != record.get("run_id"):
            append_record(self.results, record)

    def _clear_scratch(self) -> None:
        """Remove the trainer's record files that killed workers left behind."""
        for p in (self.out / "runs").glob(f"{SCRATCH}*.jsonl"):
            try:
                pid = int(p.stem.rsplit("-", 1)[1])
            except (IndexError, ValueError):
                continue
            if pid != os.getpid() and not pid_alive(pid, None):
                p.unlink(missing_ok=True)

    # ---- the trials

    def close(self, trial_id: int, number: int, record: dict[str, Any], reaping: bool = False) -> bool:
        """Close a running trial from its record: COMPLETE with the objective, or FAIL. When
        reaping, through the atomic transition (False: another worker closed it first)."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        value = objective(self.spec, record)
        ok = record.get("status") == "ok" and value is not None
        try:  # before the close: a finished trial's attributes cannot change
            for k, v in metric_attrs(self.spec, record).items():
                self.storage.set_trial_user_attr(trial_id, k, v)
        except (UpdateFinishedTrialError, RuntimeError):
            if reaping:
                return False  # another worker closed it
        if reaping:
            try:
                self.storage.set_trial_state_values(
                    trial_id,
                    TrialState.COMPLETE if ok else TrialState.FAIL,
                    [float(value)] if ok and value is not None else None,
                )
            except (UpdateFinishedTrialError, RuntimeError):
                return False
        elif ok:
            self.study.tell(number, value, skip_if_finished=True)
        else:
            self.study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
        return True  # the progress view prints the cell's line (ok or failed)

    def reap(self, trials) -> None:
        from optuna.trial import TrialState

        for t in trials:
            if t.state != TrialState.RUNNING or "cell_key" not in t.user_attrs:
                continue
            if "slurm_job" in t.user_attrs or any(k.startswith("slurm:") for k in t.user_attrs):
                continue  # a SLURM task's: SLURM owns its liveness (synthlab.study.launchers.SlurmLauncher.reap)
            reason = stale_reason(t, self.grace_period, self.me, self.silence)
            if reason is not None and not self.close_from_record(t, reason):
                self.fail_stale(t, reason, f" died: {reason}")

    def _label(self, t) -> str:
        cell = self.by_key.get(t.user_attrs["cell_key"])
        return cell.label() if cell else "a cell of another grid"

    def close_from_record(self, t, reason: str) -> bool:
        """Close a RUNNING trial whose run was recorded but whose worker or task died before the
        close; False if it has no record. Another worker closing it first counts as closed."""
        from optuna.exceptions import UpdateFinishedTrialError

        record = t.user_attrs.get("record")
        if record is None:
            return False
        try:
            self.storage.set_trial_user_attr(trial_id(t), "closed_from_record", reason)
        except (UpdateFinishedTrialError, RuntimeError):
            return True
        # the line first, then the close, as for a run that just ended: a kill between
        # the two then leaves a RUNNING trial that the next sweep reaps again
        self.ensure_recorded(record, t.user_attrs["cell_key"])
        if self.close(trial_id(t), t.number, record, reaping=True):
            self.log(
                f"[sweep] trial {t.number} ({self._label(t)}) was recorded but not closed ({reason}): "
                "closed from its record"
            )
        return True

    def fail_stale(self, t, reason: str, said: str) -> None:
        """Fail a RUNNING trial without a record whose worker or task is gone (``reason``), so its
        cell runs again; ``said``: what the log line says after the trial's label."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        try:
            self.storage.set_trial_user_attr(trial_id(t), "stale", reason)
            self.storage.set_trial_state_values(trial_id(t), TrialState.FAIL)
        except (UpdateFinishedTrialError, RuntimeError):
            return  # another worker reaped it, or it just finished
        self.log(f"[sweep] trial {t.number} ({self._label(t)}){said}; its cell runs again")

    def retry_failed(self, trials) -> None:
        """Set aside the failed result of every cell of this grid whose only result is a failure
        (marked ``retried``, kept in the study and in results.jsonl), so the cell is queued
        again."""
        groups = self.by_cell(trials)
        for c in self.cells:
            live = [t for t in groups.get(c.key, []) if is_live(t, self.retried)]
            failed = [t for t in live if "record" in t.user_attrs and t.user_attrs["record"].get("status") != "ok"]
            if failed and len(failed) == len(live):
                for t in failed:
                    self.study.set_user_attr(f"retried:{t.number}", time.time())
                self.log(
                    f"[sweep] {c.label()} failed before ({failed[0].user_attrs['record'].get('error', '?')}); "
                    "running it again"
                )

    def enqueue_missing(self, trials) -> None:
        """Enqueue a WAITING trial, holding the cell's axes as params, for each cell of the
        grid with no live trial."""
        groups = self.by_cell(trials)
        missing = [c for c in self.cells if not any(is_live(t, self.retried) for t in groups.get(c.key, []))]
        if not missing:
            return
        self.params.learn(trials)
        for c in missing:
            self.params.enqueue(self.study, c, {"cell_key": c.key, "cell": clean(c.axes)})
        for line in self.params.notes():
            self.log(f"[sweep] {line}")

    def pop(self, trials):
        """Take a WAITING trial of one of our cells (atomic WAITING -> RUNNING), or None."""
        from optuna.trial import TrialState

        waiting = sorted(
            (t for t in trials if t.state == TrialState.WAITING and t.user_attrs.get("cell_key") in self.by_key),
            key=lambda t: t.number,
        )
        return next((t for t in waiting if self._take(t)), None)

    def _take(self, t) -> bool:
        """Claim then take ``t`` (atomic WAITING -> RUNNING); False if another worker took it."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        try:
            with stops_deferred():  # taken and noted in ``held`` together: a stop comes after both or neither
                # a claim before the take: a kill between the take and ``worker`` leaves a pid to check
                self.storage.set_trial_user_attr(trial_id(t), claim_key(self.me), self.me)
                if not self.storage.set_trial_state_values(trial_id(t), state=TrialState.RUNNING):
                    return False
                self.held.append(t)
                return True
        except UpdateFinishedTrialError:
            return False

    def run_trial(self, t) -> None:
        cell = self.begin(t)
        if cell is not None:
            self.train_one(t, cell)

    def train_one(self, t, cell: Cell) -> None:
        plan = self.plans.get(cell.key, TrialPlan(0, "loss"))
        live = LiveTrial(t.number, cell.label(), plan.steps or None)
        self.progress.started(live)
        try:
            with Heartbeat(self.storage, trial_id(t), self.heartbeat_interval, live):
                record = self._train(
                    cell, t.number, trial_report(live.update, Intermediate(self.storage, trial_id(t), plan))
                )
        except (KeyboardInterrupt, OSError):  # Ctrl-C, or the disk (full, read-only): no record, so the
            self._give_back([t])  # cell runs again
            raise
        finally:
            self.progress.ended(t.number)
        self._let_go([t])
        self._record(t, cell, record)

    def _let_go(self, ts) -> None:
        """Trained: from here a stop leaves these trials to their record, not to the queue."""
        done = {t.number for t in ts}
        self.held = [u for u in self.held if u.number not in done]

    def _give_back(self, ts) -> None:
        from optuna.trial import TrialState

        for t in ts:
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)

    def begin(self, t) -> Cell | None:
        """A taken trial's cell to train, or None where the trial is closed here instead (a
        duplicate of a lower trial, or a cell already in results.jsonl)."""
        from optuna.trial import TrialState

        sid = trial_id(t)
        self.storage.set_trial_user_attr(sid, "worker", self.me)
        key = t.user_attrs["cell_key"]
        trials = self.trials()
        lower = [u for u in self.by_cell(trials).get(key, []) if u.number < t.number and is_live(u, self.retried)]
        if lower:  # a duplicate enqueue (two workers started together): the lowest trial runs
            self.storage.set_trial_user_attr(sid, "duplicate_of", min(u.number for u in lower))
            self.study.tell(t.number, state=TrialState.PRUNED, skip_if_finished=True)
            return None
        cell = self.by_key[key]
        if not set(cell.axes) <= set(t.params):  # enqueued before trials carried their cell's params
            self.params.learn(trials)
            self.params.fill(self.storage, t, cell)
            for line in self.params.notes():
                self.log(f"[sweep] {line}")
        done = self.recorded(cell, trials)
        if done is not None and done.get("status") == "ok":
            self.storage.set_trial_user_attr(sid, "record", with_cell(done, key))
            self.close(sid, t.number, done)
            self.log(
                f"[sweep] trial {t.number}: {cell.label()} is in results.jsonl already (trial "
                f"{done.get('trial')}): closed from that record, not trained again"
            )
            return None
        return cell

    def _record(self, t, cell: Cell, record: dict[str, Any]) -> None:
        """A trained cell's record onto its trial (first: from then on a kill cannot lose the
        run), into results.jsonl, and the trial closed."""
        from optuna.exceptions import UpdateFinishedTrialError

        sid, key = trial_id(t), cell.key
        record = with_cell(clean(record), key)
        try:
            self.storage.set_trial_user_attr(sid, "record", record)  # first: from here on a kill cannot lose the run
        except UpdateFinishedTrialError:  # reaped while it ran: silent past the grace period (paused?)
            self.log(
                f"[sweep] trial {t.number} ({cell.label()}) was closed as stale by another worker while "
                f"this one ran it (no heartbeat for the grace period): its cell runs again there; this "
                f"run's directory is kept, its result not recorded"
            )
            return
        append_record(self.results, record)
        self.close(sid, t.number, record)
        self.ran += 1

    def config(self, cell: Cell) -> Any:
        """The cell's resolved RunConfig: the one handed in, or resolved from the cell alone (its
        overrides are its whole preset), as :func:`synthlab.study.sweeping.validate_cells` does."""
        if cell.key not in self.configs:
            from synthlab.run import training

            self.configs[cell.key] = training.cell_config(cell, self.preset, probe=False)
        return self.configs[cell.key]

    def _scratch(self, number: int) -> Path:
        # the trainer appends its record to a file of its own: the runner writes results.jsonl
        # (with the cell's key, after the trial has the record)
        scratch = self.out / "runs" / f"{SCRATCH}{number}-{os.getpid()}.jsonl"
        scratch.parent.mkdir(parents=True, exist_ok=True)
        return scratch

    def _failures(self, cells: list[Cell], numbers: list[int], scratch: Path, e: Exception) -> list[dict[str, Any]]:
        """Each cell's record of a run that raised: the trainer's own failure record where it
        wrote one before raising, else one saying why."""
        own = [r for r in scan_records(scratch)[0] if r.get("status") == "failed"]
        by_seed = {r.get("train", {}).get("seed"): r for r in own}
        if len(cells) == 1 and own:
            by_seed[cells[0].seed] = own[-1]
        return [
            by_seed.get(c.seed)
            or failed_record(
                c.task, c.pe, c.positions, c.overrides, c.seed, self.study.study_name, n, f"{type(e).__name__}: {e}"
            )
            for c, n in zip(cells, numbers)
        ]

    def _train(self, cell: Cell, number: int, report) -> dict[str, Any]:
        from synthlab.run import training  # torch and lightning: loaded once a trial runs

        scratch = self._scratch(number)
        options: dict[str, Any] = (
            {"logger": self.logger} if self.logger is not None else {}
        )  # None: the trainer's default
        try:
            return training.run(
                self.config(cell),
                out=str(self.out / "runs"),
                results=str(scratch),
                quiet=self.quiet,
                study=self.study.study_name,
                trial=number,
                report=report,
                **options,
            )
        except OSError:  # the environment, not the cell's failure: this worker stops (exit 1)
            raise
        except Exception as e:  # the trainer should return status "failed"; never stop the sweep
            return self._failures([cell], [number], scratch, e)[0]
        finally:
            scratch.unlink(missing_ok=True)

    # ---- batched seeds: a taken cell's sibling seeds still waiting, trained as one stacked model

    def pop_siblings(self, t, trials, limit: int | None = None) -> list:
        """Take the WAITING trials of ``t``'s cell's other seeds (at most ``limit``)."""
        from optuna.trial import TrialState

        group = seed_group(self.by_key[t.user_attrs["cell_key"]])
        waiting = sorted(
            (
                u
                for u in trials
                if u.state == TrialState.WAITING
                and u.number != t.number
                and (c := self.by_key.get(u.user_attrs.get("cell_key"))) is not None
                and seed_group(c) == group
            ),
            key=lambda u: u.number,
        )
        taken: list[Any] = []
        for u in waiting:
            if limit is not None and len(taken) >= limit:
                break
            if self._take(u):
                taken.append(u)
        return taken

    def run_group(self, ts) -> None:
        """Taken trials of one cell's seeds, trained as one stacked model."""
        begun = [(t, c) for t in ts if (c := self.begin(t)) is not None]
        if len(begun) <= 1:
            for t, c in begun:
                self.train_one(t, c)
            return
        lives, reports = [], []
        for t, c in begun:
            plan = self.plans.get(c.key, TrialPlan(0, "loss"))
            live = LiveTrial(t.number, c.label(), plan.steps or None)
            self.progress.started(live)
            lives.append(live)
            reports.append(trial_report(live.update, Intermediate(self.storage, trial_id(t), plan)))
        try:
            with contextlib.ExitStack() as beats:
                for (t, _), live in zip(begun, lives):
                    beats.enter_context(Heartbeat(self.storage, trial_id(t), self.heartbeat_interval, live))
                records = self._train_batch([c for _, c in begun], [t.number for t, _ in begun], reports)
        except (KeyboardInterrupt, OSError):
            self._give_back([t for t, _ in begun])
            raise
        finally:
            for t, _ in begun:
                self.progress.ended(t.number)
        self._let_go([t for t, _ in begun])
        for (t, c), record in zip(begun, records):
            self._record(t, c, record)

    def _train_batch(self, cells: list[Cell], numbers: list[int], reports: list) -> list[dict[str, Any]]:
        """:meth:`_train` for the seeds of one cell, as one stacked model; one by one where
        they cannot be (logged once per cell)."""
        from synthlab.run import seedbatch

        c0 = cells[0]
        scratch = self._scratch(numbers[0])
        try:
            return seedbatch.run_seeds(
                [self.config(c) for c in cells],
                out=str(self.out / "runs"),
                results=str(scratch),
                quiet=self.quiet,
                study=self.study.study_name,
                trials=numbers,
                reports=reports,
            )
        except seedbatch.NotBatchable as e:
            self.unbatchable.add(seed_group(c0))
            label = " ".join(p for p in c0.label().split() if not p.startswith("seed="))
            self.log(f"[sweep] the seeds of {label} train one by one: {e}")
            return [self._train(c, n, r) for c, n, r in zip(cells, numbers, reports)]
        except OSError:
            raise
        except Exception as e:  # every seed's record says why (written by the trainer, or here)
            return self._failures(cells, numbers, scratch, e)
        finally:
            scratch.unlink(missing_ok=True)

    def loop(self, max_trials: int | None, retry_failed: bool = False) -> None:
        self._loop(max_trials, retry_failed)
        self.progress.observe(*self.grid_state(self.trials(), self.retried))  # the last cell's line

    def _loop(self, max_trials: int | None, retry_failed: bool) -> None:
        from optuna.trial import TrialState

        if retry_failed:
            self.retry_failed(self.trials())
        self.enqueue_missing(self.trials())
        waited = False
        while max_trials is None or self.ran < max_trials:
            trials = self.trials()
            self.progress.observe(*self.grid_state(trials, self.retried))
            self.reap(trials)
            trials = self.trials()
            self.enqueue_missing(trials)
            self.held = []
            try:
                t = self.pop(self.trials())
                if t is not None:
                    waited = False
                    group = seed_group(self.by_key[t.user_attrs["cell_key"]])
                    if self.batch_seeds and group not in self.unbatchable:
                        room = None if max_trials is None else max_trials - self.ran - 1
                        self.run_group([t, *self.pop_siblings(t, self.trials(), room)])
                    else:
                        self.run_trial(t)
                    continue
            except (KeyboardInterrupt, OSError):  # between a take and its training: back to the queue
                self._give_back(self.held)
                raise
            mine = {c.key for c in self.cells}
            running = [
                u for u in self.trials() if u.state == TrialState.RUNNING and u.user_attrs.get("cell_key") in mine
            ]
            if not running:
                return
            if not waited:
                self.log(f"[sweep] waiting for {len(running)} cell(s) running in other workers")
                waited = True
            time.sleep(self.poll)

    def cell_records(self) -> list[tuple[Cell, dict[str, Any]]]:
        """Every cell of this grid that has a record, with it (lowest trial per cell)."""
        trials = self.trials()
        return _cell_records(self.cells, self.by_cell(trials), self.retried)


def _cell_records(cells: list[Cell], groups: dict[str, list], retried: set[int]) -> list[tuple[Cell, dict[str, Any]]]:
    out = []
    for c in cells:
        with_record = sorted(
            (t for t in groups.get(c.key, []) if "record" in t.user_attrs and t.number not in retried),
            key=lambda t: t.number,
        )
        if with_record:
            out.append((c, copy.deepcopy(with_record[0].user_attrs["record"])))
    return out


def finished_grid(
    cells: list[Cell], trials, study_attrs: dict[str, Any], retry_failed: bool
) -> list[tuple[Cell, dict[str, Any]]] | None:
    """:meth:`Runner.cell_records` when a study has nothing left to do for ``cells``: every
    cell has a finished trial holding its record, none of them waits or runs, and with
    ``retry_failed`` none failed; else None. Reads the trials only (a finished sweep run again
    need not start a Runner, nor the trainer)."""
    from optuna.trial import TrialState

    retried = _retried_of(study_attrs)
    groups: dict[str, list] = {}
    for t in trials:
        groups.setdefault(t.user_attrs.get("cell_key"), []).append(t)
    for c in cells:
        mine = groups.get(c.key, [])
        if any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in mine):
            return None
        done = [t for t in mine if t.state.is_finished() and is_live(t, retried) and "record" in t.user_attrs]
        if not done or (retry_failed and all(t.user_attrs["record"].get("status") != "ok" for t in done)):
            return None
    return _cell_records(cells, groups, retried)


def _retried(study) -> set[int]:
    return _retried_of(study.user_attrs)


def _retried_of(study_attrs: dict[str, Any]) -> set[int]:
    return {int(k.split(":", 1)[1]) for k in study_attrs if k.startswith("retried:")}


def _names(record: dict[str, Any], cell: Cell) -> bool:
    """Whether a record without a cell key is a run of ``cell`` (its task, seed and encoding)."""
    from synthlab.model import parse_pe

    if record.get("task") != cell.task or (record.get("train") or {}).get("seed") != cell.seed:
        return False
    try:
        return record.get("pe") in (cell.pe, parse_pe(cell.pe).name)
    except ValueError:
        return record.get("pe") == cell.pe
