"""Train one model on one task and evaluate every split: ``synthlab.train(task, pe, ...)``.

``resolve_config`` (preset + overrides, all validated; :mod:`synthlab.run.configs`) -> the run
pipeline (:mod:`synthlab.run.pipeline`: evaluation sets, run directory, Lightning fit,
evaluation of every split) -> one result record appended to ``results.jsonl``. Metric values
are fractions in [0, 1]. The flow: docs/architecture.md, "One run, start to end"; the record:
docs/interfaces.md.
"""

from __future__ import annotations

import os
import time
from typing import Any

from synthlab.core.config import RunConfig
from synthlab.model.registry import PESpec
from synthlab.run import loggers, usermodel
from synthlab.run.configs import cell_config, resolve, resolve_config
from synthlab.run.curves import Report
from synthlab.run.pipeline import run_pipeline

__all__ = ["train", "run", "resolve_config", "cell_config"]  # the configs' two: callers resolve through the trainer


def train(
    task: str,
    pe: str,
    preset: str = "quick",
    seed: int = 0,
    out: str | os.PathLike | None = None,
    positions: str | None = None,
    rope_scaling: str | None = None,
    quiet: bool = True,
    results: str | os.PathLike | None = None,
    study: str | None = None,
    trial: int | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    logger: str = loggers.DEFAULT,
    report: Report | None = None,
    model: usermodel.Factory | None = None,
    **more_overrides: Any,
) -> dict[str, Any]:
    """Train one model on ``task`` with encoding ``pe`` and evaluate every split.

    ``overrides`` (and extra keyword arguments) are ``--set`` settings: ``{"d_model": 32,
    "train.lr": 3e-4, "task.n_pairs": 64}``. With ``out`` the run keeps ``out/<run_id>/``
    (config.json, metrics.jsonl, model.safetensors, the logger's files) and appends its record
    to ``out/results.jsonl`` (or ``results``); with neither, nothing is written.

    Run options (no part of the config or the result): ``logger`` (:mod:`synthlab.run.loggers`:
    csv, tensorboard, wandb, mlflow, none); ``report(step, values)``, called with the loss at
    every log step and with the metrics at each ``train.eval_every`` point
    (:mod:`synthlab.run.curves`); ``model``, a factory of the user's own module used instead of
    synthlab's Transformer (:mod:`synthlab.run.usermodel`).

    Returns the result record (docs/interfaces.md). Bad input raises ValueError before
    anything is written; a diverged run returns ``status: "failed"`` with the reason; an
    OSError (disk full, read-only) or Ctrl-C leaves no run directory and no record.
    """
    t0 = time.perf_counter()
    ov = {**(overrides or {}), **more_overrides}
    cfg, spec = resolve(task, pe, preset, ov, seed=seed, positions=positions, rope_scaling=rope_scaling, probe=False)
    return run(
        cfg,
        out=out,
        results=results,
        quiet=quiet,
        study=study,
        trial=trial,
        t0=t0,
        spec=spec,
        logger=logger,
        report=report,
        model=model,
    )


def run(
    cfg: RunConfig,
    out: str | os.PathLike | None = None,
    results: str | os.PathLike | None = None,
    quiet: bool = True,
    study: str | None = None,
    trial: int | None = None,
    t0: float | None = None,
    *,
    spec: PESpec | None = None,
    logger: str = loggers.DEFAULT,
    report: Report | None = None,
    model: usermodel.Factory | None = None,
) -> dict[str, Any]:
    """Train and evaluate a resolved :class:`RunConfig` (see :func:`train`); ``spec``: its
    parsed ``cfg.pe`` when the caller has it (the spec is parsed once per run)."""
    return run_pipeline(
        [cfg],
        stacked=False,
        out=out,
        results=results,
        quiet=quiet,
        study=study,
        trials=[trial],
        reports=[report],
        spec=spec,
        t0=t0,
        logger=logger,
        factory=model,
    )[0]
