"""What optuna-dashboard reads from a sweep's study: each trial's cell as Optuna params, its
run's headline metric per split as flat numeric user attrs, its learning curve as intermediate
values.

Trials are taken by the scheduler's atomic transition, not ``study.ask``, so nothing suggests
parameters: this module writes them, with the enqueue. None of it decides anything in the
scheduling. What the study holds and how it gets it: docs/observability.md, "optuna-dashboard".
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Any, Iterable, TypeGuard

from synthlab.plan.cells import Cell
from synthlab.plan.sweepfile import SweepSpec, objective_split
from synthlab.study.optuna_api import trial_id

MAX_POINTS = 50  # intermediate values written per trial, at most (about)
MIN_INTERVAL = 0.5  # seconds between two intermediate-value writes of one trial
LOSS = "loss"
# axes that are int params (an IntDistribution from the grid's lowest to its highest value), not
# categorical ones: a study's trials may then hold other ranges (more seeds later)
INT_AXES = ("seed",)


def _scalar(v: Any) -> Any:
    """An axis value as a categorical choice (None, bool, int, float, str; anything else as JSON)."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v, sort_keys=True)


def _index(choices: Iterable[Any], v: Any) -> int | None:
    """Where ``v`` is among ``choices``, types compared too (``1``, ``1.0`` and ``True`` are
    three choices, though Python finds them equal)."""
    for i, c in enumerate(choices):
        if type(c) is type(v) and c == v:
            return i
    return None


def _holds(d: Any, v: Any) -> bool:
    """Whether distribution ``d`` (categorical or int) has the value ``v``."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(d, CategoricalDistribution):
        return _index(d.choices, v) is not None
    return isinstance(d, IntDistribution) and isinstance(v, int) and not isinstance(v, bool) and d.low <= v <= d.high


def _internal(d: Any, v: Any) -> float:
    """``v`` as Optuna stores it under ``d``: a categorical's index (types told apart), an int itself."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(d, CategoricalDistribution):
        i = _index(d.choices, v)
        assert i is not None, "a value the distribution holds (_fits)"
        return float(i)
    return float(v)


def axis_choices(cells: list[Cell]) -> dict[str, tuple[Any, ...]]:
    """Each axis's values across the grid, in the grid's order."""
    out: dict[str, list[Any]] = {}
    for c in cells:
        for name, v in c.axes.items():
            seen = out.setdefault(name, [])
            v = _scalar(v)
            if _index(seen, v) is None:
                seen.append(v)
    return {k: tuple(v) for k, v in out.items()}


class AxisParams:
    """The Optuna params of a grid's cells in one study (see the module docstring)."""

    def __init__(self, cells: list[Cell]) -> None:
        self.choices = axis_choices(cells)
        self.fixed: dict[str, Any] = {}  # param name -> the study's distribution of it
        self.left_off: dict[str, list[Any]] = {}  # param name -> values its distribution lacks
        self._noted: set[str] = set()  # names whose left-off values :meth:`notes` gave

    def learn(self, trials: Iterable[Any]) -> None:
        """Take in the distributions the study's trials hold: the first trial (by number) that
        holds a name fixes it, as the storages check."""
        held: dict[str, Any] = {}
        for t in sorted(trials, key=lambda t: t.number):
            for name, d in t.distributions.items():
                held.setdefault(name, d)
        self.fixed.update(held)

    def of(self, cell: Cell) -> dict[str, tuple[Any, Any]]:
        """Param name -> (value, distribution) for ``cell``; an axis value its study's
        distribution lacks is left out (and noted in ``left_off``)."""
        out: dict[str, tuple[Any, Any]] = {}
        for name, v in cell.axes.items():
            v = _scalar(v)
            own = self._own(name)
            d = self.fixed.setdefault(name, own)
            if type(d) is type(own) and name in INT_AXES:  # Optuna checks an int's kind, not its range
                d = own
            if _holds(d, v):
                out[name] = (v, d)
            elif _index(self.left_off.setdefault(name, []), v) is None:
                self.left_off[name].append(v)
        return out

    def _own(self, name: str) -> Any:
        """This grid's distribution of ``name``: an int range over its values for an
        :data:`INT_AXES` axis of integers, else a categorical over its values."""
        from optuna.distributions import CategoricalDistribution, IntDistribution

        values = self.choices[name]
        if name in INT_AXES and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return IntDistribution(min(values), max(values))
        return CategoricalDistribution(values)

    def enqueue(self, study: Any, cell: Cell, user_attrs: dict[str, Any]) -> None:
        """Add ``cell``'s WAITING trial to ``study``. An RDB storage refuses a param whose
        choices another grid fixed a moment ago (ValueError): learn the study's, retry once."""
        try:
            study.add_trial(self.waiting_trial(cell, user_attrs))
        except ValueError:
            self.learn(study.get_trials(deepcopy=False))
            study.add_trial(self.waiting_trial(cell, user_attrs))

    def waiting_trial(self, cell: Cell, user_attrs: dict[str, Any]) -> Any:
        """A WAITING trial of ``cell`` holding its params (for ``study.add_trial``)."""
        from optuna.trial import TrialState, create_trial

        params = self.of(cell)
        return create_trial(
            state=TrialState.WAITING,
            params={k: v for k, (v, _) in params.items()},
            distributions={k: d for k, (_, d) in params.items()},
            user_attrs=user_attrs,
        )

    def fill(self, storage: Any, trial: Any, cell: Cell) -> None:
        """Write the params a taken trial lacks (one enqueued before trials carried them). A
        name another process fixed differently meanwhile is left off."""
        missing = {k: vd for k, vd in self.of(cell).items() if k not in trial.params}
        for name, (v, d) in missing.items():
            try:
                storage.set_trial_param(trial_id(trial), name, _internal(d, v), d)
            except ValueError:  # "does not support dynamic value space": another grid fixed it first
                self.left_off.setdefault(name, []).append(v)

    def notes(self) -> list[str]:
        """One line for each param some of this grid's values could not join (each once)."""
        lines = []
        for name, values in self.left_off.items():
            if name in self._noted:
                continue
            self._noted.add(name)
            d = self.fixed.get(name)
            held = ", ".join(map(repr, getattr(d, "choices", ())))
            lines.append(
                f"param {name!r}: this study fixed its choices at ({held}) before; trials of "
                f"{name}={', '.join(map(repr, values))} carry no {name!r} param (Optuna keeps one "
                "distribution per name; their 'cell' user attr names them; a new --study shows them)"
            )
        return lines


# ---- the finished run


def metric_attrs(spec: SweepSpec, record: dict[str, Any]) -> dict[str, float]:
    """``<split>/<metric>`` for every split of ``record`` and the sweep's headline metric, and
    ``wall_s``; finite numbers only."""
    out: dict[str, float] = {}
    for split, values in (record.get("metrics") or {}).items():
        v = (values or {}).get(spec.metric)
        if _number(v):
            out[f"{split}/{spec.metric}"] = float(v)
    if _number(record.get("wall_s")):
        out["wall_s"] = float(record["wall_s"])
    return out


def _number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---- the learning curve


@dataclasses.dataclass(frozen=True)
class TrialPlan:
    """What a cell's trial reports: its steps and the ``report`` key of its intermediate values."""

    steps: int
    intermediate: str


def objective_name(spec: SweepSpec) -> str:
    """The trials' value, named as the trainer's ``report`` hook names it: ``<split>/<metric>``."""
    return f"{objective_split(spec)}/{spec.metric}"


def plan(spec: SweepSpec, cfg: Any) -> TrialPlan:
    """A cell's :class:`TrialPlan` from its resolved config: the sweep's objective when the
    config evaluates periodically (``train.eval_every``), else the training loss."""
    every = getattr(cfg.train, "eval_every", None)
    return TrialPlan(int(cfg.train.steps), objective_name(spec) if every else LOSS)


def describe(plans: Iterable[TrialPlan]) -> str:
    """The study's ``intermediate`` user attr: what its trials' intermediate values are."""
    keys = sorted({p.intermediate for p in plans})
    if len(keys) <= 1:
        return keys[0] if keys else LOSS
    other = [k for k in keys if k != LOSS]
    return f"{', '.join(other)} (cells with train.eval_every), {LOSS} (the others)"


class Intermediate:
    """``report(step, values)`` -> the trial's intermediate values, throttled: a point when the
    step has moved on by ``steps / MAX_POINTS`` and ``MIN_INTERVAL`` seconds have passed (the
    last step always). A storage error never reaches the run."""

    def __init__(self, storage: Any, trial_id: int, plan: TrialPlan) -> None:
        self.storage, self.trial_id, self.key, self.last_step = storage, trial_id, plan.intermediate, plan.steps - 1
        self.every = max(1, math.ceil(plan.steps / MAX_POINTS))
        self.next_step = 0
        self.written_at = -math.inf
        self.points = 0

    def __call__(self, step: int, values: dict[str, float]) -> None:
        v = values.get(self.key)
        if not _number(v):
            return
        final = step >= self.last_step
        if not final and (step < self.next_step or time.monotonic() - self.written_at < MIN_INTERVAL):
            return
        try:
            self.storage.set_trial_intermediate_value(self.trial_id, int(step), float(v))
        except Exception:  # a reaped trial, a storage hiccup: the curve misses a point, the run goes on
            return
        self.next_step, self.written_at = step + self.every, time.monotonic()
        self.points += 1
