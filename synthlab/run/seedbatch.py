"""Batched seeds: the seeds of one cell trained together as one stacked model.

``train_seeds(task, pe, seeds=[0, 1, 2])`` trains S runs, built exactly as S calls of
:func:`synthlab.train` would be, as one stacked model (:mod:`synthlab.run.stacking`), through
the same pipeline as one run (:mod:`synthlab.run.pipeline`), then evaluates, saves and records
each seed as its own run. Seeds that cannot stack raise :class:`NotBatchable` before anything is
written. Why the slices equal separate runs, where it applies, and how a batch checkpoints:
docs/architecture.md, "Sweeps: exactly once" (batched seeds) and "Batched seeds: one stacked model".
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

from synthlab.core.config import RunConfig
from synthlab.run.configs import resolve
from synthlab.run.curves import Report
from synthlab.run.pipeline import run_pipeline
from synthlab.run.stacking import NotBatchable, check_batchable

__all__ = ["train_seeds", "run_seeds", "NotBatchable", "check_batchable"]


def train_seeds(
    task: str,
    pe: str,
    seeds: Sequence[int],
    preset: str = "quick",
    out: str | os.PathLike | None = None,
    results: str | os.PathLike | None = None,
    quiet: bool = True,
    study: str | None = None,
    trials: Sequence[int | None] | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    positions: str | None = None,
    rope_scaling: str | None = None,
    reports: Sequence[Report | None] | None = None,
) -> list[dict[str, Any]]:
    """Train ``seeds`` of one (task, pe, preset, overrides) as one stacked model; returns their
    records in the order of ``seeds``, each as :func:`synthlab.train` would return it (with
    ``train.batched`` = S). ``trials``: each seed's sweep trial number; ``reports``: each seed's
    report hook. Bad input raises ValueError, settings batched seeds do not support
    :class:`NotBatchable` (a ValueError), before anything is written."""
    t0 = time.perf_counter()
    seeds = [int(s) for s in seeds]
    resolved = [
        resolve(task, pe, preset, overrides, seed=s, positions=positions, rope_scaling=rope_scaling, probe=False)
        for s in seeds
    ]
    return run_seeds(
        [c for c, _ in resolved],
        out=out,
        results=results,
        quiet=quiet,
        study=study,
        trials=trials,
        reports=reports,
        spec=resolved[0][1],
        t0=t0,
    )


def run_seeds(
    cfgs: Sequence[RunConfig],
    out: str | os.PathLike | None = None,
    results: str | os.PathLike | None = None,
    quiet: bool = True,
    study: str | None = None,
    trials: Sequence[int | None] | None = None,
    reports: Sequence[Report | None] | None = None,
    *,
    spec: Any = None,
    t0: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`train_seeds` for resolved configs (one per seed)."""
    cfgs = list(cfgs)
    check_batchable(cfgs)
    S = len(cfgs)
    return run_pipeline(
        cfgs,
        stacked=True,
        out=out,
        results=results,
        quiet=quiet,
        study=study,
        trials=list(trials) if trials is not None else [None] * S,
        reports=list(reports) if reports is not None else [None] * S,
        spec=spec,
        t0=t0,
        logger="none",
    )
