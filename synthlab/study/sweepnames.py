"""The names a sweep file gives, checked against its tasks before anything runs.

A metric, split, axis or claim / paper cell that names nothing its tasks have is refused
(ValueError: exit 2, one line naming the file and the entry), with the tasks built from the
file's parameters (:func:`check_file`) or the grid about to run (:func:`check_cells`). The
rules: docs/interfaces.md, "Sweep files".
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Iterable

from synthlab.core.errors import did_you_mean

# columns of every results table (synthlab.analysis.tables._base_row), whatever the task
_COLUMNS = (
    "record",
    "study",
    "trial",
    "run_id",
    "status",
    "error",
    "task",
    "pe",
    "positions",
    "rope_scaling",
    "seed",
    "task_revision",
    "pe_revision",
    "d_model",
    "n_layers",
    "n_heads",
    "params",
    "steps",
    "batch_size",
    "lr",
    "train_len",
    "wall_s",
    "dape_k",
    "pose_chunks",
    "split",
    "length",
    "slot",
    "preset",
)
_MAX_COMBOS = 64  # task-parameter axis values built together; more: each value on its own


def _task_class(name: str, where: str, what: str):
    from synthlab import generators

    if name in generators.TASKS:
        return generators.TASKS[name]
    raise ValueError(f"{where}: {what}: unknown task {name!r}{did_you_mean(name, list(generators.TASKS))}")


_BUILT: dict[str, Any] = {}  # (task, params) -> task: some tasks take a tenth of a second to build


def _build(cls, params: dict[str, Any]):
    """The task with ``params``, or None when they cannot make one (the trainer says why)."""
    key = json.dumps([cls.name, params], sort_keys=True, default=str)
    if key not in _BUILT:
        try:
            _BUILT[key] = cls(**params)
        except (ValueError, TypeError):
            _BUILT[key] = None
    return _BUILT[key]


def _task_params(cls, settings: dict[str, Any]) -> dict[str, Any]:
    """The task parameters among ``settings`` (``task.n_pairs``, a bare ``n_vars``)."""
    from synthlab.core.config import resolve_key

    out = {}
    for k, v in settings.items():
        try:
            section, name = resolve_key(str(k), tuple(cls.PARAMS))
        except ValueError:
            continue
        if section == "task":
            out[name] = v
    return out


def preset_tasks(spec, presets: Iterable[str] | None = None) -> dict[str, list[Any]]:
    """Task name -> the tasks the presets build (their task settings, each combination of their
    task-parameter axes; each value alone where there are more than ``_MAX_COMBOS``)."""
    out: dict[str, list[Any]] = {}
    names = list(spec.file_tasks or spec.axes["task"])
    for task in names:
        cls = _task_class(task, spec.path, "axes.task" if len(names) > 1 else "sweep.task")
        built = out.setdefault(task, [])
        for preset in presets or spec.presets:
            p = spec.presets[preset]
            base = _task_params(cls, p["overrides"])
            axes = {k: v for k, v in spec.preset_axes(preset).items() if k not in ("task", "pe", "seed")}
            params = {k: n for k in axes for n in _task_params(cls, {k: 0})}
            varied = [(params[k], axes[k]) for k in params]
            if varied and _product(len(v) for _, v in varied) <= _MAX_COMBOS:
                combos = [
                    dict(zip([n for n, _ in varied], vals)) for vals in itertools.product(*(v for _, v in varied))
                ]
            else:
                combos = [{}] + [{n: v} for n, vals in varied for v in vals]
            for c in combos:
                t = _build(cls, {**base, **c})
                if t is not None and all(t is not b for b in built):
                    built.append(t)
    return out


def cell_tasks(cells) -> dict[str, list[Any]]:
    """Task name -> the tasks the cells of a grid build (with their --set and axis values)."""
    from synthlab import generators

    seen: set[str] = set()
    out: dict[str, list[Any]] = {}
    for c in cells:
        cls = generators.TASKS.get(c.task)
        built = out.setdefault(c.task, [])
        if cls is None:
            continue
        params = _task_params(cls, c.overrides)
        key = json.dumps([c.task, params], sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        t = _build(cls, params)
        if t is not None:
            built.append(t)
    return out


def _product(ns: Iterable[int]) -> int:
    n = 1
    for x in ns:
        n *= x
    return n


def metrics_of(task) -> set[str]:
    """The metric names a run of ``task`` records per split (synthlab.run.evaluation)."""
    names = {"token_acc", "seq_acc", *task.metrics}
    if task.scoring == "greedy":
        names.add("answer_acc")
        counts = task.op_counts("test-mix") if hasattr(task, "op_counts") and "test-mix" in task.splits else ()
        names.update(f"answer_acc_ops_{k}" for k in counts or ())
    return names


def _splits(tasks: list[Any]) -> list[str]:
    return list(dict.fromkeys(s for t in tasks for s in t.splits))


def _check_grid_names(spec, tasks: dict[str, list[Any]], at: str, in_dist: bool = True) -> None:
    """[sweep]'s metric and splits (given or defaulted; ``in_dist`` only where ``in_dist``)
    against every task of the grid."""
    where = spec.path
    for task, built in tasks.items():
        if not built:  # its parameters make no task: the trainer names the parameter
            continue
        splits = _splits(built)
        metrics = sorted(set().union(*(metrics_of(t) for t in built)))
        if spec.metric not in metrics:
            raise ValueError(
                f"{where}: sweep.metric: task {task!r} records no metric {spec.metric!r}"
                f"{did_you_mean(spec.metric, metrics)} (its metrics{at}: {', '.join(metrics)})"
            )
        named = [("sweep.in_dist" + ("" if "in_dist" in spec.given else " (default)"), spec.in_dist)] if in_dist else []
        named += [("sweep.ood", s) for s in spec.ood]
        if spec.objective_split is not None:
            named.append(("sweep.objective_split", spec.objective_split))
        elif not spec.ood and not in_dist:  # the objective is read on in_dist
            named.append(("sweep.in_dist" + ("" if "in_dist" in spec.given else " (default)"), spec.in_dist))
        for key, split in named:
            if split not in splits:
                raise ValueError(
                    f"{where}: {key}: task {task!r} has no split {split!r}"
                    f"{did_you_mean(split, splits)} (its splits{at}: {', '.join(splits)})"
                )


def _known_column(name: str, spec, tasks: dict[str, list[Any]]) -> bool:
    from synthlab.core.config import resolve_key

    if name in _COLUMNS:
        return True
    axes = set().union(*(spec.preset_axes(p) for p in spec.presets))
    if name in axes:
        return True
    from synthlab import generators

    for task in tasks:
        params = tuple(generators.TASKS[task].PARAMS)
        try:
            resolve_key(name, params)
            return True
        except ValueError as e:
            if "ambiguous" in str(e):
                return True
    return False


def _column_names(spec, tasks: dict[str, list[Any]]) -> list[str]:
    from synthlab import generators
    from synthlab.core.config import setting_keys

    names = set(_COLUMNS) | set().union(*(spec.preset_axes(p) for p in spec.presets)) | set(setting_keys())
    for task in tasks:
        params = generators.TASKS[task].PARAMS
        names |= set(params) | {f"task.{k}" for k in params}
    return sorted(names)


def _check_axis_names(spec, tasks: dict[str, list[Any]]) -> None:
    for key in ("capacity_x", "capacity_y", "ood_x", "ood_y"):
        value = getattr(spec, key)
        for part in str(value).split(","):
            part = part.strip()
            if not part or not _known_column(part, spec, tasks):
                raise ValueError(
                    f"{spec.path}: sweep.{key}: {part!r} names no setting or record field"
                    f"{did_you_mean(part, _column_names(spec, tasks))}"
                )


def _axis_values(spec, preset: str, key: str, task_params: tuple[str, ...]) -> list[Any] | None:
    """What ``key`` takes in ``preset``'s grid: its axis values, or the preset's setting;
    None where the preset leaves it to the defaults (or it is no setting: the split...)."""
    from synthlab.core.config import resolve_key
    from synthlab.plan.cells import _norm_key

    def canon(k: str) -> str | None:
        if k in ("dape_k", "pose_chunks"):
            return k
        try:
            section, name = resolve_key(_norm_key(k), task_params)
        except ValueError:
            return None
        return f"{section}.{name}" if section else name

    want = canon(key)
    if want is None:
        return None
    for k, values in spec.preset_axes(preset).items():
        if k not in ("task", "pe", "seed") and canon(k) == want:
            return list(values)
    for k, v in spec.presets[preset]["overrides"].items():
        if canon(k) == want:
            return [v]
    return None


def _check_cell(
    spec,
    where: str,
    cell: dict[str, Any],
    presets: tuple[str, ...],
    tasks: dict[str, list[Any]],
    all_tasks: dict[str, list[Any]],
) -> None:
    """One paper or claim cell: its keys name columns, its encoding parses, its task is the
    file's, its split one its task has, and an axis value is a value of that axis."""
    from synthlab import generators
    from synthlab.analysis.tables import same
    from synthlab.model import parse_pe

    for k in cell:
        if not _known_column(k, spec, all_tasks):
            raise ValueError(
                f"{where}.{k}: names no setting or record field{did_you_mean(k, _column_names(spec, all_tasks))}"
            )
    if "pe" in cell:
        try:
            parse_pe(str(cell["pe"]), dape_k=int(cell["dape_k"]) if "dape_k" in cell else None)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}.pe: {' '.join(str(e).split())}") from None
    if "task" in cell and cell["task"] not in tasks:
        raise ValueError(
            f"{where}.task: {cell['task']!r} is no task of this sweep"
            f"{did_you_mean(str(cell['task']), list(tasks))} (its tasks: {', '.join(tasks)})"
        )
    named = [cell["task"]] if "task" in cell else list(tasks)
    if "split" in cell:
        splits = _splits([t for n in named for t in tasks[n]])
        if splits and cell["split"] not in splits:
            raise ValueError(
                f"{where}.split: no task of this sweep has a split {cell['split']!r}"
                f"{did_you_mean(str(cell['split']), splits)} (splits: {', '.join(splits)})"
            )
    for k, v in cell.items():
        if k in ("pe", "task", "split", "length", "seed"):
            continue
        params = tuple(dict.fromkeys(p for n in named for p in generators.TASKS[n].PARAMS))
        per_preset = [_axis_values(spec, p, k, params) for p in presets]
        if any(vals is None for vals in per_preset):
            continue  # a preset leaves it at its default: the value may be that
        allowed = [x for vals in per_preset if vals is not None for x in vals]
        if not any(same(v, x) for x in allowed):
            shown = ", ".join(dict.fromkeys(map(str, allowed)))
            raise ValueError(
                f"{where}.{k}: {v!r} is not a value this sweep gives {k} at its presets {', '.join(presets)} ({shown})"
            )


def check_file(spec) -> None:
    """Every name the file gives, against the tasks its presets build (ValueError naming it)."""
    tasks = preset_tasks(spec)
    _check_grid_names(spec, tasks, "")
    _check_axis_names(spec, tasks)
    for i, paper in enumerate(spec.papers):
        ptasks = preset_tasks(spec, paper.presets)
        _check_cell(spec, f"{spec.path}: paper[{i}].cell", paper.cell, paper.presets, ptasks, tasks)
    for i, claim in enumerate(spec.claims):
        ctasks = preset_tasks(spec, claim.presets)
        for side in ("better", "worse", "cell"):
            cell = getattr(claim, side)
            if cell is not None:
                _check_cell(spec, f"{spec.path}: claim[{i}].{side}", cell, claim.presets, ctasks, tasks)


def check_cells(spec, preset: str, cells) -> None:
    """[sweep]'s metric and splits against the tasks the cells about to run build (--set
    included). ``in_dist`` only where this grid reads it (a preset may make a task without
    it: CHE's smoke lengths leave no test split, and its grids and objective read ``ood``):
    the OOD grid's first column (``ood_x = "split"``), a capacity grid, or the objective."""
    axes = spec.preset_axes(preset)
    capacity = len(axes.get(spec.capacity_x, ())) > 1
    reads = (spec.ood_x == "split" and bool(spec.ood)) or (spec.ood_x != "split" and not spec.ood) or capacity
    _check_grid_names(spec, cell_tasks(cells), f" at preset {preset}", in_dist=reads)
