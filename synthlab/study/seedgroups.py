"""Batched seeds in a sweep: a worker that takes a cell also takes its sibling seeds still
waiting, and trains them together as one stacked model (:mod:`synthlab.run.seedbatch`).

The seeds of a cell are the cells whose key differs only in the seed (:func:`seed_group`).
Each sibling is taken with the same atomic WAITING -> RUNNING transition as any trial and
keeps its own heartbeat, record and trial, so exactly-once holds as for single cells: a
kill gives every taken trial back (Ctrl-C) or leaves it to the reaper. Seeds that cannot stack
(:class:`synthlab.run.seedbatch.NotBatchable`) train one by one, and the worker stops taking that
cell's siblings together.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from synthlab.plan.cells import Cell
from synthlab.run.records import failed_record, scan_records
from synthlab.study.dashboard import Intermediate, TrialPlan
from synthlab.study.liveness import Heartbeat, claim_key
from synthlab.study.optuna_api import trial_id
from synthlab.study.progress import LiveTrial, SweepProgress
from synthlab.study.trialhooks import trial_report

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


class SeedGroups:
    """:class:`synthlab.study.scheduler.Runner`'s batched-seeds part (its ``storage``, ``study``,
    ``by_key``, ``plans``, ``progress``, ``config``, ``_begin``, ``_train``, ``_record``...)."""

    # set and defined by the Runner
    storage: Any
    study: Any
    by_key: dict[str, Cell]
    plans: dict[str, TrialPlan]
    progress: SweepProgress
    me: dict[str, Any]
    heartbeat_interval: float
    out: Path
    preset: str
    quiet: bool
    unbatchable: set[str]

    if TYPE_CHECKING:

        def log(self, msg: str) -> None: ...
        def _begin(self, t: Any) -> Cell | None: ...
        def _train_one(self, t: Any, cell: Cell) -> None: ...
        def _give_back(self, ts: Any) -> None: ...
        def _record(self, t: Any, cell: Cell, record: dict[str, Any]) -> None: ...
        def _train(self, cell: Cell, number: int, report: Any) -> dict[str, Any]: ...
        def config(self, cell: Cell) -> Any: ...

    def pop_siblings(self, t, trials, limit: int | None = None) -> list:
        """Take the WAITING trials of ``t``'s cell's other seeds (at most ``limit``)."""
        from optuna.exceptions import UpdateFinishedTrialError
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
            try:
                self.storage.set_trial_user_attr(trial_id(u), claim_key(self.me), self.me)
                if self.storage.set_trial_state_values(trial_id(u), state=TrialState.RUNNING):
                    taken.append(u)
            except UpdateFinishedTrialError:
                continue
        return taken

    def run_group(self, ts) -> None:
        """Taken trials of one cell's seeds, trained as one stacked model."""
        begun = [(t, c) for t in ts if (c := self._begin(t)) is not None]
        if len(begun) <= 1:
            for t, c in begun:
                self._train_one(t, c)
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
        for (t, c), record in zip(begun, records):
            self._record(t, c, record)

    def _train_batch(self, cells: list[Cell], numbers: list[int], reports: list) -> list[dict[str, Any]]:
        """:meth:`_train` for the seeds of one cell, as one stacked model; one by one where
        they cannot be (logged once per cell)."""
        from synthlab.run import seedbatch

        c0 = cells[0]
        scratch = self.out / "runs" / f"{SCRATCH}{numbers[0]}-{os.getpid()}.jsonl"
        scratch.parent.mkdir(parents=True, exist_ok=True)
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
            own = {r.get("train", {}).get("seed"): r for r in scan_records(scratch)[0] if r.get("status") == "failed"}
            return [
                own.get(c.seed)
                or failed_record(
                    c.task, c.pe, c.positions, c.overrides, c.seed, self.study.study_name, n, f"{type(e).__name__}: {e}"
                )
                for c, n in zip(cells, numbers)
            ]
        finally:
            scratch.unlink(missing_ok=True)
