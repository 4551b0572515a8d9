"""The presets of ``train`` (smoke / quick / paper), read from the task family's sweep file.

A preset is written once, in the ``[presets.<name>]`` tables of ``sweeps/<family>.toml``;
``synthlab train TASK --preset P`` reads it here and that file's sweep cells carry the same
tables, so a train run and a sweep cell cannot drift apart. The rules: docs/interfaces.md,
"Presets" and "Sweep files".
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from synthlab import generators
from synthlab.core.config import PRESETS, RunConfig, apply_overrides
from synthlab.core.errors import did_you_mean
from synthlab.plan.sweepfile import installed_sweeps, load_sweep, parse_sweep


@functools.lru_cache(maxsize=None)
def preset_files() -> dict[str, str]:
    """task -> the installed sweep file (``sweeps/<name>.toml``) holding its presets: the one
    file that lists the task; where several do (``flipflop``, ``flipflop_lm``), the file named
    after the task's family. Derived from the files, so a new sweep file is the only edit."""
    listed: dict[str, list[str]] = {}
    for name, text in installed_sweeps().items():
        for task in parse_sweep(text, f"sweeps/{name}.toml", name=name).tasks:
            listed.setdefault(task, []).append(name)
    out = {}
    for task, files in listed.items():
        family = getattr(generators.TASKS.get(task), "family", None)
        out[task] = files[0] if len(files) == 1 else family if family in files else min(files)
    return out


def preset_family(task: str) -> str | None:
    """The sweep file whose presets ``task`` uses (the fifteen CHE tasks share ``che``); None
    for a registered task that no installed sweep file lists (it trains with the defaults)."""
    if task not in generators.TASKS:
        hint = did_you_mean(task, list(generators.TASKS)) or " (see `synthlab tasks`)"
        raise ValueError(f"unknown task {task!r}{hint}")
    return preset_files().get(task)


@functools.lru_cache(maxsize=None)
def _file_settings(family: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """(where, preset -> dotted settings) of one installed sweep file, parsed once a process
    (a sweep resolves every cell against it)."""
    spec = load_sweep(family)
    return spec.path, {name: p["overrides"] for name, p in spec.presets.items()}


def preset_settings(task: str, name: str = "quick") -> dict[str, Any]:
    """Preset ``name`` of ``task`` as dotted ``--set`` keys: ``{"task.n_pairs": 64,
    "model.d_model": 64, "train.steps": 1000, ...}`` (a fresh copy); empty for a task no
    installed sweep file lists (a task registered by the user: the config defaults apply)."""
    if name not in PRESETS:
        raise ValueError(f"preset {name!r} is unknown (allowed: {', '.join(PRESETS)})")
    family = preset_family(task)
    return {} if family is None else copy.deepcopy(_file_settings(family)[1][name])


def preset(task: str, name: str = "quick") -> dict[str, dict[str, Any]]:
    """Preset ``name`` of ``task`` by section: ``{"task": {...}, "model": {...}, "train": {...}}``."""
    out: dict[str, dict[str, Any]] = {"task": {}, "model": {}, "train": {}}
    for key, value in preset_settings(task, name).items():
        section, _, field = key.partition(".")
        out[section][field] = value
    return out


def build_config(
    task: str,
    pe: str,
    preset_name: str = "quick",
    seed: int = 0,
    positions: str | None = None,
    rope_scaling: str | None = None,
    *,
    installed: bool = True,
) -> RunConfig:
    """The preset's RunConfig for ``task`` (no overrides, not yet validated): the config
    defaults with the installed sweep file's preset tables applied, or without ``installed``
    the defaults alone (a sweep cell, whose overrides are its whole preset); ``seed`` is the
    run's, never the file's."""
    if preset_name not in PRESETS:
        raise ValueError(f"preset {preset_name!r} is unknown (allowed: {', '.join(PRESETS)})")
    settings = preset_settings(task, preset_name) if installed else {}
    cfg = RunConfig(
        task=task, task_params={}, pe=pe, preset=preset_name, positions=positions, rope_scaling=rope_scaling
    )
    try:
        cfg = apply_overrides(cfg, settings, tuple(generators.TASKS[task].PARAMS))
    except ValueError as e:  # a bad table in the sweep file: name it
        where = _file_settings(preset_family(task))[0]
        raise ValueError(f"{where}: presets.{preset_name}: {e}") from None
    cfg.train.seed = seed
    return cfg
