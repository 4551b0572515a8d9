"""Sweep files: the schema of ``sweeps/<name>.toml`` and its parsing into a :class:`SweepSpec`.

A sweep file (data only) names the task, the encodings, the grid axes (encodings x d_model x
n_heads x DAPE kernel x PoSE chunk number x task parameters x seeds), fixed settings per preset
(smoke / quick / paper), optional tuned parameters with a trial budget per cell, how its grids
are drawn (metric, splits, axes) and the papers' numbers and claims beside it
(:mod:`synthlab.plan.papers` parses those two tables). This module owns the file's keys, their
validation, the installed sweeps, and which number a run is judged by (:func:`objective`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

from synthlab.core.config import PRESETS  # a sweep file has one section per preset the trainer knows
from synthlab.core.errors import check_input_file, did_you_mean, naming
from synthlab.plan.papers import parse_claims, parse_papers

_SWEEP_KEYS = {
    "name": "the sweep's name (default: the file name)",
    "task": "the task (or use an axes.task list)",
    "description": "one line",
    "default_preset": "smoke, quick or paper",
    "base": "an installed sweep whose preset tables this file's own go over, key by key (default: none)",
    "metric": "headline metric in record.metrics[split] (e.g. token_acc)",
    "show": "'accuracy' or 'error' in %: 100 * metric, or 100 * (1 - metric) where the metric is the other kind "
    "(token_acc shown as error, read_error as accuracy)",
    "in_dist": "the in-distribution split (capacity grid)",
    "ood": "list of OOD splits (ood grid)",
    "ood_x": "column of the ood grid: 'split', 'length' or a record field",
    "ood_y": "row of the ood grid (default pe)",
    "capacity_x": "column of the capacity grid (default d_model)",
    "capacity_y": "row of the capacity grid (default pe)",
    "objective_split": "split whose metric is the trial's objective value",
}
_PRESET_KEYS = ("description", "task", "model", "train", "positions", "rope_scaling", "axes", "tune")
_TOP_KEYS = ("sweep", "axes", "tune", "presets", "paper", "claim", "launcher")
_SHOW = ("accuracy", "error")

# axes with a fixed value type; any other axis is a `--set` key (checked by the trainer)
_AXIS_TYPES: dict[str, type] = {
    "pe": str,
    "task": str,
    "positions": str,
    "seed": int,
    "dape_k": int,
    "pose_chunks": int,
    "d_model": int,
    "n_heads": int,
    "n_layers": int,
    "model.d_model": int,
    "model.n_heads": int,
    "model.n_layers": int,
}


def _type_name(t: type) -> str:
    return {int: "integers", float: "numbers", str: "strings", bool: "true/false"}[t]


def _check_scalar(where: str, key: str, v: Any, want: type | None) -> None:
    if want is None:
        ok = isinstance(v, (int, float, str, bool))
        allowed = "numbers, strings or true/false"
    elif want is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        allowed = "numbers"
    elif want is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
        allowed = "integers"
    else:
        ok = isinstance(v, want) and not (want is not bool and isinstance(v, bool))
        allowed = _type_name(want)
    if not ok:
        raise ValueError(f"{where}: {key}: value {v!r} has the wrong type (allowed: {allowed})")


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"task": {"n_vars": [1]}}`` -> ``{"task.n_vars": [1]}`` (TOML dotted keys nest)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict) and not (set(v) <= {"low", "high", "log"} and v):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _check_axes(where: str, section: str, axes: Any) -> dict[str, list]:
    if not isinstance(axes, dict):
        raise ValueError(f"{where}: {section} must be a table of lists")
    out: dict[str, list] = {}
    for key, values in _flatten(axes).items():
        name = f"{section}.{key}"
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: {name}: expected a non-empty list of values, got {values!r}")
        for v in values:
            _check_scalar(where, name, v, _AXIS_TYPES.get(key))
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"{where}: {name}: repeated value in {values!r}")
        out[key] = list(values)
    return out


def _check_tune(where: str, section: str, tune: Any) -> dict[str, Any]:
    if not isinstance(tune, dict):
        raise ValueError(f"{where}: {section} must be a table")
    out: dict[str, Any] = {}
    for key, spec in _flatten(tune).items():
        name = f"{section}.{key}"
        if key == "trials_per_cell":
            _check_scalar(where, name, spec, int)
            if spec < 1:
                raise ValueError(f"{where}: {name}: must be >= 1, got {spec}")
            out[key] = spec
        elif isinstance(spec, list):
            if not spec:
                raise ValueError(f"{where}: {name}: expected a non-empty list or {{low, high, log}}")
            for v in spec:
                _check_scalar(where, name, v, None)
            out[key] = list(spec)
        elif isinstance(spec, dict):
            unknown = set(spec) - {"low", "high", "log"}
            if unknown or "low" not in spec or "high" not in spec:
                raise ValueError(f"{where}: {name}: expected {{low = ..., high = ..., log = true|false}}, got {spec!r}")
            _check_scalar(where, f"{name}.low", spec["low"], float)
            _check_scalar(where, f"{name}.high", spec["high"], float)
            _check_scalar(where, f"{name}.log", spec.get("log", False), bool)
            if not spec["low"] < spec["high"] or (spec.get("log") and spec["low"] <= 0):
                raise ValueError(f"{where}: {name}: need 0 < low < high (log) or low < high, got {spec!r}")
            out[key] = {"low": float(spec["low"]), "high": float(spec["high"]), "log": bool(spec.get("log", False))}
        else:
            raise ValueError(f"{where}: {name}: expected a list of values or {{low, high, log}}, got {spec!r}")
    return out


def _check_settings(where: str, section: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: {section} must be a table of key = value settings")
    out = {}
    for k, v in _flatten(table).items():
        _check_scalar(where, f"{section}.{k}", v, None)
        out[k] = v
    return out


def _unknown(where: str, section: str, got: Iterable[str], allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    for k in got:
        if k not in allowed:
            sec = f"{section}." if section else ""
            raise ValueError(f"{where}: unknown key {sec}{k!r} (allowed: {', '.join(allowed)})")


@dataclasses.dataclass
class SweepSpec:
    """A validated sweep file. ``presets[name]`` holds ``overrides`` (dotted `--set` keys),
    ``positions``, ``rope_scaling``, ``axes`` (merged over the file's axes) and ``tune``."""

    name: str
    path: str
    description: str
    default_preset: str
    axes: dict[str, list]
    tune: dict[str, Any]
    presets: dict[str, dict[str, Any]]
    metric: str = "token_acc"
    show: str = "accuracy"
    in_dist: str = "test"
    ood: list[str] = dataclasses.field(default_factory=list)
    ood_x: str = "split"
    ood_y: str = "pe"
    capacity_x: str = "d_model"
    capacity_y: str = "pe"
    objective_split: str | None = None
    papers: list = dataclasses.field(default_factory=list)  # [[paper]]: synthlab.plan.papers.PaperValue
    claims: list = dataclasses.field(default_factory=list)  # [[claim]]: synthlab.plan.papers.Claim
    # [launcher]: the SLURM launcher's settings (synthlab.study.launchers.SLURM_KEYS), no part of a cell
    launcher: dict = dataclasses.field(default_factory=dict)
    given: tuple[str, ...] = ()  # the [sweep] keys the file gives (the others are defaults)
    base: str | None = None  # sweep.base: the installed sweep whose preset settings this file's go over
    file_tasks: tuple[str, ...] = ()  # the file's task list (``tasks`` may be restricted to one)

    @property
    def tasks(self) -> list[str]:
        return list(self.axes["task"])

    def preset_axes(self, preset: str) -> dict[str, list]:
        return {**self.axes, **self.presets[preset]["axes"]}

    def preset_tune(self, preset: str) -> dict[str, Any]:
        return {**self.tune, **self.presets[preset]["tune"]}

    def preset_tune_keys(self, preset: str) -> list[str]:
        """The tuned parameters of a preset (none unless it runs several trials per cell)."""
        tune = self.preset_tune(preset)
        return [k for k in tune if k != "trials_per_cell"] if tune.get("trials_per_cell", 1) > 1 else []


# the keys of a [launcher] table: the SLURM launcher's settings (synthlab.study.launchers checks their values)
LAUNCHER_KEYS = ("partition", "time", "gpus_per_task", "cpus_per_task", "array_parallelism", "mem_gb", "max_requeues")


def _check_launcher(where: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: [launcher] must be a table")
    _unknown(where, "launcher", table, LAUNCHER_KEYS)
    return dict(table)


def parse_sweep(text: str, where: str, name: str | None = None) -> SweepSpec:
    """Parse and validate a sweep file's text (``where`` names it in errors)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: malformed TOML: {e}") from None
    _unknown(where, "", raw, _TOP_KEYS)
    sw = raw.get("sweep", {})
    if not isinstance(sw, dict):
        raise ValueError(f"{where}: [sweep] must be a table")
    _unknown(where, "sweep", sw, _SWEEP_KEYS)
    for key in (
        "name",
        "task",
        "description",
        "default_preset",
        "base",
        "metric",
        "show",
        "in_dist",
        "ood_x",
        "ood_y",
        "capacity_x",
        "capacity_y",
        "objective_split",
    ):
        if key in sw:
            _check_scalar(where, f"sweep.{key}", sw[key], str)
    if "ood" in sw:
        if not isinstance(sw["ood"], list):
            raise ValueError(f"{where}: sweep.ood: expected a list of split names, got {sw['ood']!r}")
        for v in sw["ood"]:
            _check_scalar(where, "sweep.ood", v, str)
    show = sw.get("show", "accuracy")
    if show not in _SHOW:
        raise ValueError(f"{where}: sweep.show: {show!r} is not allowed (allowed: {', '.join(_SHOW)})")

    axes = _check_axes(where, "axes", raw.get("axes", {}))
    if "task" in sw:
        if "task" in axes:
            raise ValueError(f"{where}: give the task either as sweep.task or as axes.task, not both")
        axes = {"task": [sw["task"]], **axes}
    if "task" not in axes:
        raise ValueError(f'{where}: no task: set sweep.task = "NAME" or axes.task = [...]')
    if "pe" not in axes:
        raise ValueError(f'{where}: axes.pe: the encodings list is required (e.g. pe = ["rope", "cope"])')
    axes.setdefault("seed", [0])
    tune = _check_tune(where, "tune", raw.get("tune", {}))

    presets_raw = raw.get("presets", {})
    if not isinstance(presets_raw, dict):
        raise ValueError(f"{where}: [presets] must be a table")
    _unknown(where, "presets", presets_raw, PRESETS)
    missing = [p for p in PRESETS if p not in presets_raw]
    if missing:
        raise ValueError(f"{where}: presets.{missing[0]} is missing (every sweep file has {', '.join(PRESETS)})")
    presets: dict[str, dict[str, Any]] = {}
    for pname, p in presets_raw.items():
        sec = f"presets.{pname}"
        if not isinstance(p, dict):
            raise ValueError(f"{where}: {sec} must be a table")
        _unknown(where, sec, p, _PRESET_KEYS)
        overrides: dict[str, Any] = {}
        for group in ("task", "model", "train"):
            for k, v in _check_settings(where, f"{sec}.{group}", p.get(group, {})).items():
                overrides[f"{group}.{k}"] = v
        for key in ("positions", "rope_scaling", "description"):
            if key in p:
                _check_scalar(where, f"{sec}.{key}", p[key], str)
        paxes = _check_axes(where, f"{sec}.axes", p.get("axes", {}))
        if "task" in paxes:
            raise ValueError(f"{where}: {sec}.axes.task: the task list is set once, in [sweep] or [axes]")
        presets[pname] = {
            "overrides": overrides,
            "positions": p.get("positions"),
            "rope_scaling": p.get("rope_scaling"),
            "axes": paxes,
            "tune": _check_tune(where, f"{sec}.tune", p.get("tune", {})),
            "description": p.get("description", ""),
        }
    if "base" in sw:
        _inherit(where, sw["base"], presets, axes["task"])
    papers = parse_papers(where, raw.get("paper"), PRESETS)
    launcher = _check_launcher(where, raw.get("launcher", {}))
    claims = parse_claims(where, raw.get("claim"), PRESETS)
    default_preset = sw.get("default_preset", "quick")
    if default_preset not in PRESETS:
        raise ValueError(
            f"{where}: sweep.default_preset: {default_preset!r} is not allowed (allowed: {', '.join(PRESETS)})"
        )
    spec = SweepSpec(
        name=sw.get("name", name or Path(where).stem),
        path=where,
        description=sw.get("description", ""),
        default_preset=default_preset,
        axes=axes,
        tune=tune,
        presets=presets,
        metric=sw.get("metric", "token_acc"),
        show=show,
        in_dist=sw.get("in_dist", "test"),
        ood=list(sw.get("ood", [])),
        ood_x=sw.get("ood_x", "split"),
        ood_y=sw.get("ood_y", "pe"),
        capacity_x=sw.get("capacity_x", "d_model"),
        capacity_y=sw.get("capacity_y", "pe"),
        objective_split=sw.get("objective_split"),
        papers=papers,
        claims=claims,
        launcher=launcher,
        given=tuple(sw),
        file_tasks=tuple(axes["task"]),
        base=sw.get("base"),
    )
    return spec


def _inherit(where: str, base: str, presets: dict[str, dict[str, Any]], tasks: list[str]) -> None:
    """``sweep.base``: each preset's settings become the installed sweep ``base``'s, with this
    file's own (``presets``, changed in place) over them key by key; axes, tune, positions and
    rope_scaling stay this file's."""
    installed = installed_sweeps()
    if base not in installed:
        hint = did_you_mean(base, installed) or f" (allowed: {', '.join(installed)})"
        raise ValueError(f"{where}: sweep.base: unknown sweep {base!r}{hint}")
    parent = parse_sweep(installed[base], f"sweeps/{base}.toml", name=base)
    other = [t for t in tasks if t not in parent.tasks]
    if other:
        shown = ", ".join(parent.tasks[:4]) + (", ..." if len(parent.tasks) > 4 else "")
        raise ValueError(
            f"{where}: sweep.base: sweeps/{base}.toml has no presets for task {other[0]!r} (its tasks: {shown})"
        )
    for name, p in presets.items():
        p["overrides"] = {**parent.presets[name]["overrides"], **p["overrides"]}


def installed_sweeps() -> dict[str, str]:
    """Name -> text of every sweep file installed with the package: the repository's
    ``sweeps/*.toml``, installed as the package data of ``synthlab.sweeps``."""
    out = {}
    for entry in sorted(resources.files("synthlab.sweeps").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            out[entry.name[: -len(".toml")]] = entry.read_text(encoding="utf-8")
    return out


def load_sweep(task_or_file: str | os.PathLike) -> SweepSpec:
    """A sweep by installed name (``flipflop``), by a task named in one installed sweep's task
    axis (``even_pairs`` -> ``che`` restricted to that task), or by the path of a .toml file."""
    s = str(task_or_file)
    if s.endswith(".toml") or os.sep in s or (os.altsep and os.altsep in s):
        path = check_input_file(s, "sweep file")  # missing, a directory: ValueError; unreadable: OSError
        try:
            with naming(path):
                text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"sweep file {s!r} is not UTF-8 text (byte {e.start}); a TOML file is UTF-8") from None
        return parse_sweep(text, str(path), name=path.stem)
    installed = installed_sweeps()
    if s in installed:
        return parse_sweep(installed[s], f"sweeps/{s}.toml", name=s)
    for name, text in installed.items():
        spec = parse_sweep(text, f"sweeps/{name}.toml", name=name)
        if s in spec.tasks and len(spec.tasks) > 1:
            spec.axes["task"] = [s]
            return spec
    raise ValueError(
        f"unknown sweep or task {s!r} (allowed: a .toml path or one of {', '.join(installed)}, or a task of che.toml)"
    )


def is_error(metric: str) -> bool:
    """Whether ``metric`` counts misses (``read_error``, ``glitch_rate``, ``seq_error``: lower is
    better) rather than hits (``token_acc``, ``answer_acc``)."""
    return metric.endswith(("error", "_rate"))


def lower_is_better(spec: SweepSpec) -> bool:
    """Whether the objective (the metric itself) is minimised: an error metric, whatever ``show``
    displays (token_acc shown as error is still maximised)."""
    return is_error(spec.metric)


def objective_split(spec: SweepSpec) -> str:
    return spec.objective_split or (spec.ood[0] if spec.ood else spec.in_dist)


def objective(spec: SweepSpec, record: dict[str, Any]) -> float | None:
    """A record's objective value (the sweep's metric on its objective split), or None."""
    split = objective_split(spec)
    v = (record.get("metrics") or {}).get(split, {}).get(spec.metric)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None
