"""Chomsky Hierarchy Evaluation: 15 tasks (Deletang et al. 2023; Ruoss et al. 2023; DAPE V2
App. G), outputs predicted at placeholder tokens (see :mod:`synthlab.generators.che.base`).

    >>> from synthlab.generators.che import TASKS
    >>> task = TASKS["parity_check"]()
    >>> s = task.sample("train", n=1, seed=0, length=5)[0]
    >>> s.tokens[-1], task.solve(s) == s.targets
    ('?', True)
"""

from __future__ import annotations

from . import cs, dcf, regular
from .base import EOS, PLACEHOLDER, CheTask

#: in the order of the benchmark's table (regular, DCF, CS)
TASKS: dict[str, type[CheTask]] = {**regular.TASKS, **dcf.TASKS, **cs.TASKS}

__all__ = ["EOS", "PLACEHOLDER", "TASKS", "CheTask"]
