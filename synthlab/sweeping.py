"""Sweeps: an exhaustive grid of training runs, one Optuna trial per grid cell.

A sweep file (``sweeps/<name>.toml``, data only) names the task, the encodings, the grid axes
(encodings x d_model x n_heads x DAPE kernel x PoSE chunk number x task parameters x seeds),
fixed settings per preset (smoke / quick / paper) and optional tuned parameters with a trial
budget per cell. :func:`sweep` expands it into cells and runs each cell once as one trial of an
Optuna study; the result record is stored on the trial (user attr ``record``) and appended to
``results.jsonl``.

Scheduling, exactly once over any storage (journal file, SQLite, PostgreSQL, ...):

- every cell is *enqueued* as a WAITING trial carrying its ``cell_key``; a worker takes a trial
  with the storage's atomic WAITING -> RUNNING transition (Optuna's own queue), so two workers
  never take the same trial;
- two workers starting together may both enqueue a cell; a taken trial therefore runs only if
  no *lower-numbered live* trial exists for its cell (live: waiting, running, finished with a
  record), otherwise it is closed as PRUNED with ``duplicate_of``. Trial numbers are assigned
  atomically, so exactly one trial per cell runs;
- a running trial carries ``worker`` (host, pid, process start time) and a ``heartbeat`` user
  attr refreshed every ``heartbeat_interval`` seconds. A RUNNING trial whose process is gone
  (same host: pid dead; any host: no heartbeat for ``grace_period`` seconds) is failed (the
  atomic RUNNING -> FAIL transition picks one reaper) and its cell enqueued again: a cell that
  was running when its process was killed is re-run once, finished cells are never re-run.

Default storage: an Optuna journal file (``JournalFileBackend``) in the output directory. It is
an append-only log written under a lock file with one ``write`` + ``fsync`` per operation, so
several processes on one machine share it without "database is locked" errors (SQLite's
failure mode under concurrent writers), and a hard kill loses at most the operation in flight;
a lock left by a killed process is broken after a short grace period.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import json
import math
import os
import random
import socket
import sys
import threading
import time
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

PRESETS = ("smoke", "quick", "paper")

# --------------------------------------------------------------------------------------------
# sweep files
# --------------------------------------------------------------------------------------------

_SWEEP_KEYS = {
    "name": "the sweep's name (default: the file name)",
    "task": "the task (or use an axes.task list)",
    "description": "one line",
    "default_preset": "smoke, quick or paper",
    "metric": "headline metric in record.metrics[split] (e.g. token_acc)",
    "show": "'accuracy' (100 * metric) or 'error' (100 * (1 - metric))",
    "in_dist": "the in-distribution split (capacity grid)",
    "ood": "list of OOD splits (ood grid)",
    "ood_x": "column of the ood grid: 'split', 'length' or a record field",
    "ood_y": "row of the ood grid (default pe)",
    "capacity_x": "column of the capacity grid (default d_model)",
    "capacity_y": "row of the capacity grid (default pe)",
    "objective_split": "split whose metric is the trial's objective value",
}
_PRESET_KEYS = ("description", "task", "model", "train", "positions", "rope_scaling", "axes", "tune")
_TOP_KEYS = ("sweep", "axes", "tune", "presets", "paper", "claim")
_SHOW = ("accuracy", "error")

# axes with a fixed value type; any other axis is a `--set` key (checked by the trainer)
_AXIS_TYPES: dict[str, type] = {
    "pe": str, "task": str, "positions": str, "seed": int, "dape_k": int, "pose_chunks": int,
    "d_model": int, "n_heads": int, "n_layers": int,
    "model.d_model": int, "model.n_heads": int, "model.n_layers": int,
}
# bare `--set` keys the sweep normalises to dotted ones, so an axis overrides a preset setting
_ALIASES = {
    "d_model": "model.d_model", "n_heads": "model.n_heads", "n_layers": "model.n_layers",
    "lr": "train.lr", "steps": "train.steps", "batch_size": "train.batch_size",
}
_SPECIAL_AXES = ("task", "pe", "seed", "dape_k", "pose_chunks", "positions")


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
    papers: list = dataclasses.field(default_factory=list)  # [[paper]]: synthlab.papers.PaperValue
    claims: list = dataclasses.field(default_factory=list)  # [[claim]]: synthlab.papers.Claim

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
    for key in ("name", "task", "description", "default_preset", "metric", "show", "in_dist",
                "ood_x", "ood_y", "capacity_x", "capacity_y", "objective_split"):
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
        raise ValueError(f"{where}: no task: set sweep.task = \"NAME\" or axes.task = [...]")
    if "pe" not in axes:
        raise ValueError(f"{where}: axes.pe: the encodings list is required (e.g. pe = [\"rope\", \"cope\"])")
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
    from synthlab.papers import parse_claims, parse_papers

    papers = parse_papers(where, raw.get("paper"), PRESETS)
    claims = parse_claims(where, raw.get("claim"), PRESETS)
    default_preset = sw.get("default_preset", "quick")
    if default_preset not in PRESETS:
        raise ValueError(f"{where}: sweep.default_preset: {default_preset!r} is not allowed (allowed: {', '.join(PRESETS)})")
    return SweepSpec(
        name=sw.get("name", name or Path(where).stem), path=where, description=sw.get("description", ""),
        default_preset=default_preset, axes=axes, tune=tune, presets=presets,
        metric=sw.get("metric", "token_acc"), show=show, in_dist=sw.get("in_dist", "test"),
        ood=list(sw.get("ood", [])), ood_x=sw.get("ood_x", "split"), ood_y=sw.get("ood_y", "pe"),
        capacity_x=sw.get("capacity_x", "d_model"), capacity_y=sw.get("capacity_y", "pe"),
        objective_split=sw.get("objective_split"), papers=papers, claims=claims,
    )


def installed_sweeps() -> dict[str, str]:
    """Name -> text of every sweep file installed with the package (``sweeps/*.toml``)."""
    out = {}
    for entry in sorted(resources.files("sweeps").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            out[entry.name[: -len(".toml")]] = entry.read_text(encoding="utf-8")
    return out


def load_sweep(task_or_file: str | os.PathLike) -> SweepSpec:
    """A sweep by installed name (``flipflop``), by a task named in one installed sweep's task
    axis (``even_pairs`` -> ``che`` restricted to that task), or by the path of a .toml file."""
    s = str(task_or_file)
    if s.endswith(".toml") or os.sep in s or (os.altsep and os.altsep in s):
        path = Path(s)
        if not path.is_file():
            raise ValueError(f"sweep file {s!r} does not exist")
        return parse_sweep(path.read_text(encoding="utf-8"), str(path), name=path.stem)
    installed = installed_sweeps()
    if s in installed:
        return parse_sweep(installed[s], f"sweeps/{s}.toml", name=s)
    for name, text in installed.items():
        spec = parse_sweep(text, f"sweeps/{name}.toml", name=name)
        if s in spec.tasks and len(spec.tasks) > 1:
            spec.axes["task"] = [s]
            return spec
    raise ValueError(f"unknown sweep or task {s!r} (allowed: a .toml path or one of {', '.join(installed)}, "
                     "or a task of che.toml)")


# --------------------------------------------------------------------------------------------
# cells
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Cell:
    """One grid cell = one training run."""

    task: str
    pe: str
    seed: int
    overrides: dict[str, Any]
    positions: str | None
    rope_scaling: str | None
    slot: int
    axes: dict[str, Any]  # the axis values that name the cell (for tables)

    @property
    def key(self) -> str:
        return json.dumps({"task": self.task, "pe": self.pe, "seed": self.seed, "positions": self.positions,
                           "rope_scaling": self.rope_scaling, "overrides": self.overrides, "slot": self.slot},
                          sort_keys=True, separators=(",", ":"))

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.axes.items())


def _with_dape_k(pe: str, k: int) -> str:
    """``kerple+dape`` + k=3 -> ``kerple+dape:k=3`` (the DAPE V2 kernel along the key axis)."""
    parts = pe.split("+")
    for i, comp in enumerate(parts):
        name, _, params = comp.partition(":")
        if name == "dape":
            if any(p.split("=")[0] == "k" for p in params.split(",") if p):
                raise ValueError(f"encoding {pe!r} already fixes the DAPE kernel; drop k= or the dape_k axis")
            parts[i] = f"{name}:{params},k={k}" if params else f"{name}:k={k}"
            return "+".join(parts)
    return pe


def _has_dape(pe: str) -> bool:
    return any(c.partition(":")[0] == "dape" for c in pe.split("+"))


def _with_pose_chunks(positions: str | None, n: int) -> str:
    if positions is None:
        return f"pose:chunks={n}"
    scheme, _, params = positions.partition(":")
    if scheme != "pose":
        raise ValueError(f"axis pose_chunks needs positions 'pose:...', got {positions!r}")
    kept = [p for p in params.split(",") if p and p.split("=")[0] != "chunks"]
    return "pose:" + ",".join([f"chunks={n}", *kept])


def _tuned_value(spec: Any, slot: int, n_slots: int) -> Any:
    """Slot ``slot`` of a tuned parameter: list -> value slot mod len; range -> a point of the
    van der Corput sequence (base 2) mapped to [low, high] (log-uniform with log = true)."""
    if isinstance(spec, list):
        return spec[slot % len(spec)]
    u, f, i = 0.0, 0.5, slot + 1
    while i:
        u += f * (i & 1)
        i >>= 1
        f /= 2
    lo, hi = spec["low"], spec["high"]
    if spec["log"]:
        return float(f"{math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))):.4g}")
    return float(f"{lo + u * (hi - lo):.4g}")


def _norm_key(k: str) -> str:
    return _ALIASES.get(k, k)


def expand_cells(spec: SweepSpec, preset: str, pe: list[str] | None = None) -> list[Cell]:
    """Every cell of the grid, in a fixed order (task, pe, other axes, seed, tuned slot)."""
    if preset not in spec.presets:
        raise ValueError(f"--preset {preset!r} is not allowed (allowed: {', '.join(spec.presets)})")
    p = spec.presets[preset]
    axes = spec.preset_axes(preset)
    if pe is not None:
        if not pe or any(not x.strip() for x in pe):
            raise ValueError(f"--pe expects a comma-separated list of encodings, got {','.join(pe)!r}")
        axes["pe"] = [x.strip() for x in pe]
    tune = spec.preset_tune(preset)
    n_slots = tune.get("trials_per_cell", 1)
    tuned = {k: v for k, v in tune.items() if k != "trials_per_cell"}
    other = [k for k in axes if k not in _SPECIAL_AXES]
    cells: list[Cell] = []
    for task in axes["task"]:
        for enc in axes["pe"]:
            dape_ks = axes.get("dape_k", [None]) if _has_dape(enc) else [None]
            chunks = axes.get("pose_chunks", [None])
            positions_axis = axes.get("positions", [p["positions"]])
            for k, nch, pos, values in itertools.product(dape_ks, chunks, positions_axis,
                                                         itertools.product(*(axes[a] for a in other))):
                pe_full = _with_dape_k(enc, k) if k is not None else enc
                positions = _with_pose_chunks(pos, nch) if nch is not None else pos
                for seed in axes["seed"]:
                    for slot in range(n_slots):
                        ov = {_norm_key(a): v for a, v in p["overrides"].items()}
                        named: dict[str, Any] = {"task": task, "pe": pe_full}
                        if k is not None:
                            named["dape_k"] = k
                        if nch is not None:
                            named["pose_chunks"] = nch
                        if "positions" in axes:
                            named["positions"] = pos
                        for a, v in zip(other, values):
                            ov[_norm_key(a)] = v
                            named[a] = v
                        for a, s in tuned.items():
                            v = _tuned_value(s, slot, n_slots)
                            ov[_norm_key(a)] = v
                            named[a] = v
                        named["seed"] = seed
                        if n_slots > 1:
                            named["slot"] = slot
                        cells.append(Cell(task=task, pe=pe_full, seed=int(seed), overrides=dict(sorted(ov.items())),
                                          positions=positions, rope_scaling=p["rope_scaling"], slot=slot, axes=named))
    keys = [c.key for c in cells]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{spec.path}: two grid cells are identical (a repeated axis value?)")
    return cells


def validate_cells(cells: list[Cell], preset: str) -> None:
    """Ask the trainer to resolve every cell's configuration (ValueError names the bad value)."""
    train_mod = _trainer()
    seen: set[str] = set()
    for c in cells:
        probe = json.dumps([c.task, c.pe, c.positions, c.rope_scaling, c.overrides], sort_keys=True)
        if probe in seen:
            continue
        seen.add(probe)
        _call_compatible(train_mod.resolve_config, c.task, c.pe, preset, c.overrides,
                         seed=c.seed, positions=c.positions, rope_scaling=c.rope_scaling)


def _trainer():
    """The training module (``synthlab.training``: ``train`` and ``resolve_config``)."""
    import importlib

    return importlib.import_module("synthlab.training")


def _call_compatible(fn, *args, **kwargs):
    """Call ``fn`` passing only the keyword arguments its signature accepts."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return fn(*args, **kwargs)
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return fn(*args, **kwargs)
    return fn(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters})


# --------------------------------------------------------------------------------------------
# storage
# --------------------------------------------------------------------------------------------

JOURNAL_NAME = "study.journal"


def _is_journal_path(url: str) -> bool:
    return "://" not in url


def normalize_url(url: str) -> str:
    """``postgresql://`` with no driver named: use psycopg2 when it is the one installed
    (SQLAlchemy 2.1 defaults to psycopg 3; the ``postgres`` extra installs psycopg2-binary)."""
    import importlib.util

    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            rest = url[len(bare):]
            if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
                return "postgresql+psycopg2://" + rest
            return "postgresql://" + rest
    return url


def check_storage(url: str) -> None:
    """Fail fast (ValueError) when a storage URL cannot be used; creates nothing."""
    url = normalize_url(url)
    if _is_journal_path(url):
        parent = Path(url).expanduser().resolve().parent
        if not parent.is_dir():
            raise ValueError(f"--storage {url!r}: directory {str(parent)!r} does not exist")
        return
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if path and path != ":memory:":
            parent = Path(path).expanduser().resolve().parent
            if not parent.is_dir():
                raise ValueError(f"--storage {url!r}: directory {str(parent)!r} does not exist")
        return
    try:
        import sqlalchemy
    except ImportError:  # pragma: no cover - optuna depends on it
        raise ValueError("--storage: an RDB URL needs sqlalchemy") from None
    connect_args = {"connect_timeout": 5} if url.startswith(("postgresql", "mysql")) else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=connect_args)
    except ImportError as e:
        hint = " (install the driver: pip install 'synthlab[postgres]')" if url.startswith("postgres") else ""
        raise ValueError(f"--storage {_redact(url)}: cannot load the database driver: {e}{hint}") from None
    except Exception as e:
        raise ValueError(f"--storage {_redact(url)}: not a usable storage URL ({type(e).__name__}: {e}; "
                         "allowed: a journal file path, sqlite:///FILE, postgresql://..., mysql://...)") from None
    try:
        with engine.connect():
            pass
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--storage {_redact(url)}: cannot connect: {msg}") from None
    finally:
        engine.dispose()


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a message."""
    head, sep, tail = url.partition("://")
    if not sep or "@" not in tail:
        return url
    cred, _, host = tail.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in cred else url


def open_storage(url: str):
    """An Optuna storage object for ``url`` (journal file path or RDB URL)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    url = normalize_url(url)
    if _is_journal_path(url):
        path = str(Path(url).expanduser())
        backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path, grace_period=10))
        return JournalStorage(backend)
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 120}}
    with _schema_lock(url):
        return optuna.storages.get_storage(_create_rdb_storage(url, engine_kwargs))


# an arbitrary 64-bit key for pg_advisory_lock: "synthlab" in ASCII
_PG_SCHEMA_LOCK = 0x73796E74686C6162


@contextlib.contextmanager
def _schema_lock(url: str):
    """Serialise Optuna's table creation across workers on PostgreSQL.

    Two workers starting on an empty database both run ``CREATE TYPE`` / ``CREATE TABLE`` and one
    dies with a unique violation (Optuna creates the schema without a lock). A session-level
    advisory lock makes the second wait until the first has created everything."""
    if not url.startswith(("postgresql", "postgres")):
        yield
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_SCHEMA_LOCK})
    finally:
        engine.dispose()


def _create_rdb_storage(url: str, engine_kwargs: dict[str, Any], attempts: int = 6):
    """RDBStorage, retried when a concurrent worker's table creation collides with ours (MySQL,
    or any database without the advisory lock above): the retry finds the tables in place."""
    import sqlalchemy.exc
    from optuna.storages import RDBStorage

    for attempt in range(attempts):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1) + random.random() * 0.2)


# --------------------------------------------------------------------------------------------
# workers
# --------------------------------------------------------------------------------------------

def _proc_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if start is not None and Path("/proc").is_dir():
        now = _proc_start(pid)
        if now is None or now != start:
            return False
    return True


def _worker_id() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _proc_start(os.getpid())}


def _started_at(t) -> float:
    return t.datetime_start.timestamp() if t.datetime_start is not None else time.time()


def _stale_reason(t, grace_period: float, me: dict[str, Any]) -> str | None:
    """Why RUNNING trial ``t`` is dead, or None if it may still be alive."""
    w = t.user_attrs.get("worker")
    last = t.user_attrs.get("heartbeat", _started_at(t))
    if isinstance(w, dict) and w.get("host") == me["host"]:
        if w.get("pid") == me["pid"] and w.get("start") == me["start"]:
            return None  # our own trial
        if not _pid_alive(int(w["pid"]), w.get("start")):
            return f"worker process {w['pid']} on {w['host']} is gone"
    if time.time() - float(last) > grace_period:
        return f"no heartbeat for {time.time() - float(last):.0f} s (grace period {grace_period:.0f} s)"
    return None


def _is_live(t, retried: set[int]) -> bool:
    """Whether trial ``t`` holds (or will hold) its cell's result. A failed run does, until a
    --retry-failed sweep sets it aside (its number in ``retried``)."""
    from optuna.trial import TrialState

    if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE):
        return True
    return t.state == TrialState.FAIL and "record" in t.user_attrs and t.number not in retried


class _Heartbeat:
    """A thread that writes ``heartbeat = time.time()`` on a running trial every ``interval`` s."""

    def __init__(self, storage, trial_id: int, interval: float) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="synthlab-heartbeat")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.storage.set_trial_user_attr(self.trial_id, "heartbeat", time.time())
            except Exception:  # a finished trial or a storage hiccup: the next beat retries
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _section(overrides: dict[str, Any], name: str) -> dict[str, Any]:
    """{"model.d_model": 64, "train.lr": 1e-3} -> {"d_model": 64} for name "model"."""
    return {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(name + ".")}


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None (spec: NaN written as null)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            return _clean(obj.item())
        except Exception:
            return str(obj)
    return obj


def repair_jsonl(path: Path) -> None:
    """End a torn final line (a record cut by a kill) so the next record starts a new line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    line = (json.dumps(_clean(record), sort_keys=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class _Runner:
    def __init__(self, spec: SweepSpec, preset: str, cells: list[Cell], storage, study, out: Path,
                 quiet: bool, heartbeat_interval: float, grace_period: float, poll: float) -> None:
        self.spec, self.preset, self.cells, self.storage, self.study = spec, preset, cells, storage, study
        self.by_key = {c.key: c for c in cells}
        self.out, self.quiet = out, quiet
        self.results = out / "results.jsonl"
        self.heartbeat_interval, self.grace_period, self.poll = heartbeat_interval, grace_period, poll
        self.me = _worker_id()
        self.ran = 0
        self.retried: set[int] = set()

    def log(self, msg: str) -> None:
        if not self.quiet:
            print(msg, file=sys.stderr, flush=True)

    def trials(self):
        """The study's trials; also refreshes ``self.retried``, the failed trials set aside by
        --retry-failed (study attributes ``retried:<number>``: Optuna does not let a finished
        trial's own attributes change, and one key per trial needs no read-modify-write)."""
        self.retried = {int(k.split(":", 1)[1]) for k in self.study.user_attrs if k.startswith("retried:")}
        return self.study.get_trials(deepcopy=False)

    def by_cell(self, trials) -> dict[str, list]:
        out: dict[str, list] = {}
        for t in trials:
            key = t.user_attrs.get("cell_key")
            if key is not None:
                out.setdefault(key, []).append(t)
        return out

    def reap(self, trials) -> None:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        for t in trials:
            if t.state != TrialState.RUNNING or "cell_key" not in t.user_attrs:
                continue
            reason = _stale_reason(t, self.grace_period, self.me)
            if reason is None:
                continue
            try:
                self.storage.set_trial_user_attr(t._trial_id, "stale", reason)
                self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            except (UpdateFinishedTrialError, RuntimeError):
                continue  # another worker reaped it, or it just finished
            cell = self.by_key.get(t.user_attrs["cell_key"])
            self.log(f"[sweep] trial {t.number} ({cell.label() if cell else 'a cell of another grid'}) died: "
                     f"{reason}; its cell runs again")

    def retry_failed(self, trials) -> None:
        """Set aside the failed result of every cell of this grid whose only result is a failure
        (marked ``retried``, kept in the study and in results.jsonl), so the cell is queued
        again."""
        groups = self.by_cell(trials)
        for c in self.cells:
            live = [t for t in groups.get(c.key, []) if _is_live(t, self.retried)]
            failed = [t for t in live if "record" in t.user_attrs and t.user_attrs["record"].get("status") != "ok"]
            if failed and len(failed) == len(live):
                for t in failed:
                    self.study.set_user_attr(f"retried:{t.number}", time.time())
                self.log(f"[sweep] {c.label()} failed before ({failed[0].user_attrs['record'].get('error', '?')}); "
                         "running it again")

    def enqueue_missing(self, trials) -> None:
        groups = self.by_cell(trials)
        for c in self.cells:
            if not any(_is_live(t, self.retried) for t in groups.get(c.key, [])):
                self.study.enqueue_trial({}, user_attrs={"cell_key": c.key, "cell": _clean(c.axes)})

    def pop(self, trials):
        """Take a WAITING trial of one of our cells (atomic WAITING -> RUNNING), or None."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        waiting = sorted((t for t in trials if t.state == TrialState.WAITING
                          and t.user_attrs.get("cell_key") in self.by_key), key=lambda t: t.number)
        for t in waiting:
            try:
                if self.storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                    return t
            except UpdateFinishedTrialError:
                continue
        return None

    def run_trial(self, t) -> None:
        from optuna.trial import TrialState

        sid = t._trial_id
        self.storage.set_trial_user_attr(sid, "worker", self.me)
        self.storage.set_trial_user_attr(sid, "heartbeat", time.time())
        key = t.user_attrs["cell_key"]
        lower = [u for u in self.by_cell(self.trials()).get(key, []) if u.number < t.number and _is_live(u, self.retried)]
        if lower:  # a duplicate enqueue (two workers started together): the lowest trial runs
            self.storage.set_trial_user_attr(sid, "duplicate_of", min(u.number for u in lower))
            self.study.tell(t.number, state=TrialState.PRUNED, skip_if_finished=True)
            return
        cell = self.by_key[key]
        self.log(f"[sweep] trial {t.number}: {cell.label()}")
        try:
            with _Heartbeat(self.storage, sid, self.heartbeat_interval):
                record = self._train(cell, t.number)
        except KeyboardInterrupt:
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            raise
        record = _clean(record)
        self.storage.set_trial_user_attr(sid, "record", record)
        value = _objective(self.spec, record)
        if record.get("status") == "ok" and value is not None:
            self.study.tell(t.number, value, skip_if_finished=True)
        else:
            self.study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            self.log(f"[sweep] trial {t.number} failed: {record.get('error', 'no objective value')}")
        self.ran += 1

    def _train(self, cell: Cell, number: int) -> dict[str, Any]:
        train_mod = _trainer()
        size = self.results.stat().st_size if self.results.exists() else 0
        try:
            return _call_compatible(
                train_mod.train, cell.task, cell.pe, preset=self.preset, seed=cell.seed,
                out=str(self.out / "runs"), positions=cell.positions, rope_scaling=cell.rope_scaling,
                quiet=self.quiet, results=str(self.results), study=self.study.study_name, trial=number,
                overrides=dict(cell.overrides))
        except Exception as e:  # the trainer should return status "failed"; never stop the sweep
            ov = cell.overrides  # what the cell sets, so the failure sits in the right grid row
            record = {"schema": 1, "task": cell.task, "task_params": _section(ov, "task"), "pe": cell.pe,
                      "positions": cell.positions, "model": _section(ov, "model"),
                      "train": {**_section(ov, "train"), "seed": cell.seed}, "overrides": ov,
                      "study": self.study.study_name, "trial": number, "status": "failed",
                      "error": f"{type(e).__name__}: {e}"}
            if not self.results.exists() or self.results.stat().st_size == size:
                _append_jsonl(self.results, record)  # the trainer did not record it itself
            return record

    def loop(self, max_trials: int | None, retry_failed: bool = False) -> None:
        from optuna.trial import TrialState

        if retry_failed:
            self.retry_failed(self.trials())
        self.enqueue_missing(self.trials())
        waited = False
        while max_trials is None or self.ran < max_trials:
            trials = self.trials()
            self.reap(trials)
            trials = self.trials()
            self.enqueue_missing(trials)
            t = self.pop(self.trials())
            if t is not None:
                waited = False
                self.run_trial(t)
                continue
            mine = {c.key for c in self.cells}
            running = [u for u in self.trials() if u.state == TrialState.RUNNING and u.user_attrs.get("cell_key") in mine]
            if not running:
                return
            if not waited:
                self.log(f"[sweep] waiting for {len(running)} cell(s) running in other workers")
                waited = True
            time.sleep(self.poll)

    def cell_records(self) -> list[tuple[Cell, dict[str, Any]]]:
        """Every cell of this grid that has a record, with it (lowest trial per cell)."""
        groups = self.by_cell(self.trials())
        out = []
        for c in self.cells:
            with_record = sorted((t for t in groups.get(c.key, []) if "record" in t.user_attrs
                                  and t.number not in self.retried), key=lambda t: t.number)
            if with_record:
                out.append((c, copy.deepcopy(with_record[0].user_attrs["record"])))
        return out


def best_tuned(spec: SweepSpec, pairs: list[tuple[Cell, dict[str, Any]]], maximize: bool,
               tuned: list[str]) -> list[dict[str, Any]]:
    """The records a grid shows when a sweep tunes parameters (``trials_per_cell`` > 1): of each
    cell's tuned slots, the one whose objective, averaged over seeds, is best; its records for
    every seed. A slot with a failed seed counts that seed as missing; a cell with no finished
    slot keeps slot 0 (drawn blank)."""
    groups: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for cell, rec in pairs:
        named = {k: v for k, v in cell.axes.items() if k not in ("seed", "slot", *tuned)}
        key = json.dumps(_clean(named), sort_keys=True)
        groups.setdefault(key, {}).setdefault(cell.slot, []).append(rec)
    out: list[dict[str, Any]] = []
    for slots in groups.values():
        scored = {}
        for slot, recs in slots.items():
            vals = [v for v in (_objective(spec, r) for r in recs if r.get("status") == "ok") if v is not None]
            if vals:
                scored[slot] = sum(vals) / len(vals)
        if scored:
            best = min(scored, key=lambda s: (-scored[s] if maximize else scored[s], s))  # ties: lowest slot
        else:
            best = min(slots)
        out += slots[best]
    return out


def _lower_is_better(spec: SweepSpec) -> bool:
    return spec.show == "error" and spec.metric.endswith(("error", "_rate"))


def _objective_split(spec: SweepSpec) -> str:
    return spec.objective_split or (spec.ood[0] if spec.ood else spec.in_dist)


def _objective(spec: SweepSpec, record: dict[str, Any]) -> float | None:
    split = _objective_split(spec)
    v = (record.get("metrics") or {}).get(split, {}).get(spec.metric)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _validate_name(name: str, flag: str) -> None:
    if not name or any(ch in name for ch in "/\\\0") or name in (".", ".."):
        raise ValueError(f"{flag} {name!r}: a study name may not be empty or contain '/'")


def sweep(task_or_file: str | os.PathLike, pe: str | list[str] | None = None, preset: str | None = None,
          trials: int | None = None, storage: str | None = None, study: str | None = None,
          out: str | os.PathLike | None = None, quiet: bool = True, *, grids: bool = True,
          retry_failed: bool = False, heartbeat_interval: float = 30.0, grace_period: float = 180.0,
          poll: float = 2.0, workers: int | str = 1) -> list[dict]:
    """Run (or resume) the sweep; return the result records of its grid cells.

    ``pe`` replaces the sweep's encodings axis (list or comma-separated string); ``trials``
    caps how many trials this process runs; ``storage`` is any Optuna storage URL or a journal
    file path (default ``OUT/study.journal``); ``study`` defaults to ``<sweep>-<preset>``;
    ``out`` to ``synthlab-runs/<study>``. A failed cell counts as finished (its record says
    why) unless ``retry_failed``, which runs every failed cell again (the failed records stay
    in results.jsonl). ``workers`` (an integer or ``"auto"``) runs the grid in that many
    processes on this machine (:mod:`synthlab.workers`). Everything is validated before
    anything is written.
    """
    from synthlab import workers as workers_mod

    workers = workers_mod.parse_workers(workers)
    spec = load_sweep(task_or_file)
    preset = preset or spec.default_preset
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r} is not allowed (allowed: {', '.join(PRESETS)})")
    pe_list = [x.strip() for x in pe.split(",")] if isinstance(pe, str) else pe
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise ValueError(f"--trials must be an integer >= 1, got {trials!r}")
    cells = expand_cells(spec, preset, pe_list)
    validate_cells(cells, preset)
    study_name = study or f"{spec.name}-{preset}"
    _validate_name(study_name, "--study")
    out_dir = Path(out) if out is not None else Path("synthlab-runs") / study_name
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {str(out_dir)!r} exists and is not a directory")
    url = storage or str(out_dir / JOURNAL_NAME)
    if storage is not None:
        check_storage(storage)

    # validated: from here on we write
    import optuna

    out_dir.mkdir(parents=True, exist_ok=True)
    repair_jsonl(out_dir / "results.jsonl")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = open_storage(url)
    direction = "minimize" if _lower_is_better(spec) else "maximize"
    st = optuna.create_study(study_name=study_name, storage=store, direction=direction, load_if_exists=True)
    st.set_user_attr("sweep", spec.name)
    runner = _Runner(spec, preset, cells, store, st, out_dir, quiet, heartbeat_interval, grace_period, poll)
    if retry_failed:  # before any helper starts, so none takes a failed cell for finished
        runner.retry_failed(runner.trials())
    runner.enqueue_missing(runner.trials())
    n_workers = workers_mod.resolve(workers, len(cells))
    helpers = []
    if n_workers > 1:
        runner.log(f"[sweep] {n_workers} workers x {workers_mod.threads_per_worker(n_workers)} thread(s)")
        helpers = workers_mod.spawn(n_workers, {
            "task_or_file": str(task_or_file), "pe": pe_list, "preset": preset, "trials": trials, "storage": url,
            "study": study_name, "out": str(out_dir), "quiet": quiet, "heartbeat_interval": heartbeat_interval,
            "grace_period": grace_period, "poll": poll})
    try:
        with (workers_mod.torch_threads(workers_mod.threads_per_worker(n_workers)) if helpers
              else contextlib.nullcontext()):
            runner.loop(trials)
    except BaseException:
        workers_mod.stop(helpers)
        raise
    for code in workers_mod.wait(helpers):
        if code != 0:
            print(f"synthlab sweep: warning: a worker process exited with code {code}; "
                  "its running cell, if any, runs again on the next sweep", file=sys.stderr)
    pairs = runner.cell_records()
    records = [r for _, r in pairs]
    _write_all(out_dir / "study-results.jsonl", records)
    if grids:
        from synthlab import grids as grids_mod

        tuned = spec.preset_tune_keys(preset)
        shown = best_tuned(spec, pairs, not _lower_is_better(spec), tuned) if tuned else records
        tables = grids_mod.sweep_grids(shown, spec, out_dir / "grids")
        if tuned:  # the CHE papers report the best run over seeds x learning rates: show that too
            tables += grids_mod.sweep_grids(records, spec, out_dir / "grids", best_of=tuple(tuned))
        missing = len(cells) - sum(1 for r in records if r.get("status") == "ok")
        print(f"study {study_name}: {len(records)}/{len(cells)} cells finished"
              + (f" ({missing} failed or not run)" if missing else "") + f"; results in {out_dir}")
        if tuned:
            print(f"tuned {', '.join(tuned)}: the grids show, per cell, the best of "
                  f"{spec.preset_tune(preset)['trials_per_cell']} settings by {spec.metric} on {_objective_split(spec)} "
                  "(mean over seeds); study-results.jsonl holds every run")
        for g in tables:
            print()
            print(g.markdown())
        from synthlab import papers

        verdicts = papers.verdicts(shown, spec)
        if verdicts:
            papers.save(verdicts, spec.show, out_dir / "grids")
            print()
            print(papers.markdown(verdicts, spec.show))
    return records


def _write_all(path: Path, records: list[dict[str, Any]]) -> None:
    """Every record of the study's grid, rebuilt from the trials (atomic replace)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(_clean(r)) + "\n")
    os.replace(tmp, path)


def export_results(storage: str, study: str, path: str | os.PathLike) -> int:
    """Rebuild a results JSONL from a study's trials (the records stored in user attrs)."""
    import optuna

    check_storage(storage)
    st = optuna.load_study(study_name=study, storage=open_storage(storage))
    recs = [t.user_attrs["record"] for t in sorted(st.get_trials(deepcopy=False), key=lambda t: t.number)
            if "record" in t.user_attrs]
    _write_all(Path(path), recs)
    return len(recs)
