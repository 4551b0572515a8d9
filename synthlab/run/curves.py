"""Learning curves (``train.eval_every``) and the ``report`` hook of a run.

Every ``eval_every`` steps and at the last, :func:`curve_callback` evaluates the held-out splits
with the final evaluation's sets and code (the last point equals the record's ``metrics``),
keeping torch's random state, so a curve never changes the trained weights. How points are
taken and where they go: docs/results.md, "Learning curves"; the hook (:class:`SafeReport`):
docs/interfaces.md, "Settings and hooks for observers".
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any, Callable, Iterator

import torch

from synthlab.run.evaluation import EvalContext, evaluate

Report = Callable[[int, dict[str, float]], None]


class SafeReport:
    """A user's ``report`` hook whose exceptions are caught (the first one warns)."""

    def __init__(self, fn: Report) -> None:
        self.fn = fn
        self.failures = 0

    def __call__(self, step: int, values: dict[str, float]) -> None:
        try:
            self.fn(step, values)
        except Exception as e:  # noqa: BLE001 - an observer's bug must not kill the run it observes
            self.failures += 1
            if self.failures == 1:
                warnings.warn(
                    f"report hook raised {type(e).__name__}: {e} (at step {step}); the run goes on, "
                    "later errors of the hook are not shown",
                    RuntimeWarning,
                    stacklevel=2,
                )


def check_report(report: Any) -> SafeReport | None:
    """The run's hook, wrapped; ValueError for something that is not callable."""
    if report is None:
        return None
    if not callable(report):
        raise ValueError(f"report must be a callable report(step, values), got {type(report).__name__}")
    return SafeReport(report)


def flat(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
    """``{"test": {"acc": 0.9}}`` -> ``{"test/acc": 0.9}``, finite numbers only."""
    return {
        f"{split}/{name}": float(v)
        for split, m in metrics.items()
        for name, v in m.items()
        if isinstance(v, (int, float)) and math.isfinite(v)
    }


def eval_context(
    cfg: Any,
    task: Any,
    spec: Any,
    scheme: Any,
    pad_id: int,
    device: torch.device,
    rope_factor: float | None,
    train_len: int,
) -> EvalContext:
    """What evaluation needs besides the model and the sets: one place for the curve's points
    and the final evaluation. ``rope_factor``: PoSE's static interpolation (then no scaling at
    evaluation); ``train_len``: the longest training sequence so far."""
    from synthlab.run.data import PositionSampler

    tc = cfg.train
    return EvalContext(
        task=task,
        pad_id=pad_id,
        batch_size=tc.eval_batch_size,
        device=device,
        causal=cfg.model.causal,
        rope_scaling=cfg.rope_scaling if rope_factor is None else None,
        rotary=spec.rotary,
        train_len=train_len,
        positions=PositionSampler(scheme, tc.seed + 1) if scheme is not None and scheme.at_eval else None,
        precision=tc.precision,
    )


@contextlib.contextmanager
def rng_kept(device: torch.device) -> Iterator[None]:
    """torch's random state (CPU, and the run's GPU) as it was before the block."""
    gpus = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=gpus):
        yield


def curve_callback(
    every: int,
    steps: int,
    model: torch.nn.Module,
    sets: dict[str, Any],
    context: Callable[[], EvalContext],
    report: Report | None = None,
    logger: Any = None,
) -> Any:
    """The Lightning callback that evaluates ``model`` on ``sets`` after step ``k * every`` and
    after the last step; its ``points`` are the curve. ``context()``: the evaluation context
    at that moment; ``logger``: a :class:`synthlab.run.loggers.RunLogger` or None."""
    import lightning as L

    class Curve(L.Callback):
        def __init__(self) -> None:
            self.points: list[dict[str, Any]] = []

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = int(trainer.global_step)
            if getattr(pl_module, "failure", None) is not None or not (step % every == 0 or step >= steps):
                return
            ctx = context()
            with rng_kept(ctx.device):
                metrics, _groups = evaluate(model, sets, ctx)
            self.points += [{"step": step, "split": split, **m} for split, m in metrics.items()]
            values = flat(metrics)
            if report is not None:
                report(step, values)
            if logger is not None:
                logger.log(values, step)

        def state_dict(self) -> dict[str, Any]:
            return {"points": [dict(p) for p in self.points]}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.points = [dict(p) for p in state_dict.get("points", [])]

    return Curve()
