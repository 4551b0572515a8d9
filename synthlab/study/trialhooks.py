"""What a sweep hands the trainer of one cell besides its settings: the ``report`` hook and
the ``logger`` (``synthlab.run.training.train``'s run options, no part of the cell's identity).

The ``report(step, values)`` hook feeds the cell's :class:`synthlab.study.progress.LiveTrial` (step
and loss for the heartbeat lines) and its :class:`synthlab.study.dashboard.Intermediate` (Optuna
intermediate values).
"""

from __future__ import annotations

from typing import Callable

Report = Callable[[int, dict[str, float]], None]


def trial_report(*sinks: Report) -> Report:
    """One ``report`` hook that hands each call to every sink, in order."""

    def report(step: int, values: dict[str, float]) -> None:
        for sink in sinks:
            sink(step, values)

    return report
