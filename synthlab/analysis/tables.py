"""Result records -> the tidy table that grids and the papers' verdicts read.

:func:`tidy` gives one row per record x split x length; a failed record one row of NaN metrics,
so it shows up as missing. A row names its run by every setting it has (revisions included),
so runs that differ in more than the seed are never averaged as if they were seeds.
The columns and helpers: docs/results.md, "How a grid is built (the code)".
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable

from synthlab.core.config import PRESETS, resolve_key
from synthlab.plan.sweepfile import SweepSpec, is_error
from synthlab.run.records import read_results

# what a record's run was, besides its seed: the candidates for a grid axis, and what the runs
# a paper's cell pools must agree on
SETTING_COLUMNS = (
    "task",
    "pe",
    "positions",
    "rope_scaling",
    "d_model",
    "n_layers",
    "n_heads",
    "steps",
    "batch_size",
    "lr",
    "task_revision",
    "pe_revision",
)
# prefixed columns that are settings too: task parameters, and a sweep cell's other --set keys
SETTING_PREFIXES = ("task.", "model.", "train.")


# a sweep cell's --set keys that the columns above already hold, and those that change no result
# (how a run is executed); every other model. / train. key of a cell is a column of its own
_COVERED = (
    "model.d_model",
    "model.n_layers",
    "model.n_heads",
    "train.steps",
    "train.batch_size",
    "train.lr",
    "train.seed",
)
RUN_OPTIONS = (
    "train.threads",
    "train.data_workers",
    "train.eval_batch_size",
    "train.eval_every",
    "train.compile",
    "train.compile_mode",
    "train.deterministic",
    "train.checkpoint_every",
    "train.checkpoint_minutes",
    "train.check_memory",
)


# settings a record holds besides the columns above (records older than them lack them: unknown)
RECORD_SETTINGS = {
    "model": ("dropout", "causal", "tie_embeddings"),
    "train": ("warmup", "schedule", "weight_decay", "grad_clip", "n_train", "eval_samples"),
}

# printed above a grid or claims table of smoke runs: they train a few steps, to check the plumbing
SMOKE_NOTE = "smoke preset: a plumbing check, not a result"


def in_percent(values, metric: str, show: str):
    """Fractions of ``metric`` in a grid's unit: percent accuracy (``show`` accuracy) or percent
    error (``show`` error), whichever kind the metric is: token_acc shown as error is
    100 (1 - m), read_error shown as error 100 m (as accuracy 100 (1 - m))."""
    return 100.0 * (1.0 - values) if (show == "error") != is_error(metric) else 100.0 * values


def _num(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _or_nan(v: int | None) -> float:
    return math.nan if v is None else float(v)


def _scheme(r: dict[str, Any], field: str) -> Any:
    """A run's ``positions`` / ``rope_scaling``: ``"none"`` where the record says null (the token
    index, no scaling: a setting, which must not pool with ``pose:...`` or ``linear`` as if it
    were unknown), None where the record lacks the field (a failed run's record knows no scaling)."""
    v = r.get(field)
    return v if v is not None else ("none" if field in r else None)


# records from before the dape_k / pose_chunks fields (and a failed run's, which names only its
# pe and positions) keep the axes in their encoding and scheme: read from there
def _legacy_dape_k(r: dict[str, Any]) -> int | None:
    from synthlab.model import parse_pe

    try:
        spec = parse_pe(r.get("pe", ""))
    except ValueError:
        return None
    return int(spec.params["dape"]["k"]) if spec.has("dape") else None


def _legacy_pose_chunks(r: dict[str, Any]) -> int | None:
    positions = r.get("positions")
    if not isinstance(positions, str) or not positions.strip():
        return None
    from synthlab.model import PoSE, parse_positions  # torch: only records with positions pay for it

    try:
        scheme = parse_positions(positions)
    except ValueError:
        return None
    return scheme.chunks if isinstance(scheme, PoSE) else None


def _base_row(r: dict[str, Any], i: int) -> dict[str, Any]:
    model = r.get("model") or {}
    train = r.get("train") or {}
    row: dict[str, Any] = {
        "record": i,
        "study": r.get("study"),
        "trial": r.get("trial"),
        "run_id": r.get("run_id"),
        "status": r.get("status"),
        "error": r.get("error"),
        "task": r.get("task"),
        "pe": r.get("pe"),
        "positions": _scheme(r, "positions"),
        "rope_scaling": _scheme(r, "rope_scaling"),
        "seed": train.get("seed"),
        # a generator's revision (records from before it was recorded: 1, the first); the
        # encodings' (unknown before it was recorded: pools with any)
        "task_revision": r.get("task_revision", 1),
        "pe_revision": r.get("pe_revision"),
        "d_model": model.get("d_model"),
        "n_layers": model.get("n_layers"),
        "n_heads": model.get("n_heads"),
        "params": model.get("params"),
        "steps": train.get("steps"),
        "batch_size": train.get("batch_size"),
        "lr": train.get("lr"),
        "train_len": train.get("train_len"),
        "wall_s": r.get("wall_s"),
        "dape_k": _or_nan(r["dape_k"] if "dape_k" in r else _legacy_dape_k(r)),
        "pose_chunks": _or_nan(r["pose_chunks"] if "pose_chunks" in r else _legacy_pose_chunks(r)),
    }
    for k, v in (r.get("task_params") or {}).items():
        if isinstance(v, (int, float, str, bool)) or v is None:
            row[f"task.{k}"] = v
            row.setdefault(k, v)
    for section, names in RECORD_SETTINGS.items():
        for k in names:
            if k in (r.get(section) or {}):  # None is a setting too (n_train none: fresh samples)
                v = r[section][k]
                row[f"{section}.{k}"] = "none" if v is None else v
    for k, v in cell_overrides(r).items():  # a sweep axis on a --set key the record's fields do not hold
        key = _dotted(k, r)
        if key is not None and key not in _COVERED + RUN_OPTIONS and isinstance(v, (int, float, str)):
            row.setdefault(key, v)
    return row


def _dotted(key: str, r: dict[str, Any]) -> str | None:
    """A cell's model / train ``--set`` key as ``section.name`` (a bare ``weight_decay`` too);
    None for a task parameter (a ``task.`` column already) or a key synthlab does not know."""
    try:
        section, name = resolve_key(key, tuple(r.get("task_params") or {}))
    except ValueError:
        return None
    return f"{section}.{name}" if section in ("model", "train") else None


def cell_overrides(r: dict[str, Any]) -> dict[str, Any]:
    """A sweep run's ``--set`` settings: the overrides in its cell key (a failed run's record: its own)."""
    cell = r.get("cell")
    if isinstance(cell, str):
        try:
            key = json.loads(cell)
        except ValueError:
            key = None
        if isinstance(key, dict) and isinstance(key.get("overrides"), dict):
            return key["overrides"]
    overrides = r.get("overrides")
    return overrides if isinstance(overrides, dict) else {}


def tidy(records: Iterable[dict[str, Any]] | str | os.PathLike):
    """One row per record x split x length (pandas DataFrame); see the module docstring."""
    import pandas as pd

    if isinstance(records, (str, os.PathLike)):
        records = read_results(records)
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(records):
        base = _base_row(r, i)
        metrics = r.get("metrics") or {}
        if r.get("status") != "ok" or not metrics:
            rows.append({**base, "split": None, "length": math.nan})
            continue
        for split, m in metrics.items():
            row = {**base, "split": split, "length": math.nan}
            for name, v in (m or {}).items():
                if not isinstance(v, dict):
                    row[name] = _num(v)
            rows.append(row)
        for split, length, v in _length_entries(r.get("by_length"), metrics):
            rows.append({**base, "split": split, "length": length, "token_acc": v})
    return pd.DataFrame(rows)


def _length_entries(by_length: Any, metrics: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(split, length, accuracy) of a record's ``by_length``: ``{"41": acc}`` (one grouped
    split), ``{"ood/41": acc}`` (several) or ``{"ood": {"41": acc}}``; a group of several
    settings (mqar's ``"length=512,n_kv=32"``, :func:`synthlab.run.data.group_key`) by its length."""
    out: list[tuple[str, float, float]] = []
    if not isinstance(by_length, dict):
        return out
    for key, v in by_length.items():
        if isinstance(v, dict):
            out += [(str(key), _group_length(k), _num(a)) for k, a in v.items()]
        elif "/" in str(key):
            split, _, length = str(key).rpartition("/")
            out.append((split, _group_length(length), _num(v)))
        else:
            out.append((_length_split(metrics), _group_length(key), _num(v)))
    return out


def _group_length(key: Any) -> float:
    """An evaluation group's length: ``"41"``, or the ``length`` of ``"length=512,n_kv=32"``."""
    key = str(key)
    if "=" not in key:
        return _num(key)
    settings = dict(part.partition("=")[::2] for part in key.split(","))
    return _num(settings.get("length"))


def _length_split(metrics: dict[str, Any]) -> str:
    ood = [s for s in metrics if s.startswith("ood")]
    if len(ood) == 1:
        return ood[0]
    return "test"


def per_seed(rows, keys: list[str], col: str):
    """One value of ``col`` per seed of each ``keys`` group (a DataFrame: keys, ``seed_unit``,
    ``col``): a run's rows averaged, then the runs of one seed averaged, so that the n of a
    mean ± sd counts seeds. The same seed trained twice (two ``synthlab train`` runs, or a cell
    of two studies' files joined) is one sample, not two: counted twice it would shrink the sd
    (two identical CPU runs: sd 0). A run with no value (NaN) is left out; a run without a seed
    (never written by synthlab) counts as its own."""
    import pandas as pd

    runs = rows.groupby([*keys, "record"], dropna=True)[col].mean().dropna().reset_index()
    if runs.empty:
        return pd.DataFrame(columns=[*keys, "seed_unit", col])
    seeds = rows.drop_duplicates("record").set_index("record")["seed"]
    runs["seed_unit"] = [
        f"seed {_fmt(_num(seeds.get(r)))}" if math.isfinite(_num(seeds.get(r))) else f"run {r}" for r in runs["record"]
    ]
    return runs.groupby([*keys, "seed_unit"], dropna=True, sort=False)[col].mean().reset_index()


def _axis_col(df, name: str) -> str:
    return f"task.{name}" if f"task.{name}" in df.columns else name


def _fmt(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:  # 64 not 64.0; 1e+30 stays
        return str(int(v))
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def composite(df, parts: list[str]):
    """Each row's values of ``parts`` joined by spaces (a composite axis ``d_model,n_heads``:
    ``"64 4"``), whole numbers without ``.0`` and a missing value (a failed run's record that
    never named the setting) as ``-``."""
    return df[parts].apply(lambda col: col.map(_fmt)).agg(" ".join, axis=1)


def pooled_axes(df, x: str, y: str) -> list[str]:
    """Settings that differ between the runs a cell would average (other than the seed),
    e.g. ``n_vars`` in an encoding x split grid of a sweep over 1 and 3 variables. Named by
    the bare task parameter (``n_vars``) or the setting (``d_model``). ``y`` is a column of
    ``df`` (a composite ``task,pe`` included); ``x`` one too unless it is split or length."""
    used = {*x.split(","), *y.split(",")}
    cols = [c for c in SETTING_COLUMNS if c in df.columns]
    cols += [c for c in df.columns if c.startswith(SETTING_PREFIXES)]
    keys = [y] + ([] if x in ("split", "length") else [x])
    per_run = df.drop_duplicates("record")
    out = []
    for c in cols:
        name = c.removeprefix("task.")
        if name in used or c in used:
            continue
        # an unknown value (a run that failed before it was configured) is not a distinct one
        if (per_run.groupby(keys, dropna=False)[c].nunique(dropna=True) > 1).any():
            out.append(name)
    return out


def pooled_labels(df, y: str, pooled: list[str]) -> tuple[str, Any]:
    """(name, labels): column ``y`` joined with the ``pooled`` settings, ``("pe, d_model",
    "rope d_model=16")``: how a grid's rows and a line plot's lines name runs that differ in
    more than ``y``, so that they are never averaged as if they were seeds."""
    name = ", ".join([*y.split(","), *pooled])  # "task,pe" + d_model -> "task, pe, d_model"
    joined = df[y].map(_fmt)  # a run that never named y (a failed one): "-", never a NaN label that drops it
    for a in pooled:
        joined = joined + f" {a}=" + df[_axis_col(df, a)].map(_fmt)
    return name, joined


def check_records(records: list[dict[str, Any]], where: str, known_tasks: Iterable[str] | None = None) -> None:
    """What a grid draws must be what synthlab writes: metrics and per-length values are
    numbers or null (never NaN, infinity, text or true/false) and, with ``known_tasks``, every
    task is one of them. ValueError naming ``where``, the record and the value."""
    known = set(known_tasks) if known_tasks is not None else None
    for i, r in enumerate(records, 1):
        name = f"{where}: record {i} (run {r.get('run_id') or '?'})"
        if known is not None and r.get("task") not in known:
            raise ValueError(f"{name}: unknown task {r.get('task')!r} (the tasks: `synthlab tasks`)")
        for field in ("metrics", "by_length"):
            bad = _bad_value(r.get(field), field)
            if bad is not None:
                path, v = bad
                what = "NaN or infinite" if isinstance(v, float) else f"not a number ({v!r})"
                raise ValueError(f"{name}: {path} is {what}; a result holds numbers, null for a missing one")


def _bad_value(v: Any, path: str) -> tuple[str, Any] | None:
    """(where, value) of the first value under ``v`` that is no finite number or null."""
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)):
        return None
    if isinstance(v, dict):
        for k, x in v.items():
            bad = _bad_value(x, f"{path}.{k}")
            if bad is not None:
                return bad
        return None
    if isinstance(v, list):
        for k, x in enumerate(v):
            bad = _bad_value(x, f"{path}[{k}]")
            if bad is not None:
                return bad
        return None
    return path, v


def preset_differences(r: dict[str, Any], spec: SweepSpec | None) -> tuple[str, ...]:
    """Where a run departs from its preset's table in sweep file ``spec`` (a SweepSpec; None judges nothing):
    ``("task.n_pairs 256 (preset 64)",)`` for ``sweep flipflop --set task.n_pairs=256``; () for a
    run that follows it. A key the preset sweeps (an axis) or tunes is no difference, nor is a
    run option (threads, evaluation batch) or a field an older record lacks (unknown); a
    preset the file does not have (a failed run's record names none) cannot be judged: ()."""
    preset = r.get("preset")
    if spec is None or not isinstance(preset, str) or preset not in spec.presets:
        return ()
    presets = spec.presets
    names = tuple(r.get("task_params") or {})
    free = set()
    for key in [*spec.preset_axes(preset), *spec.preset_tune_keys(preset)]:
        try:
            free.add(".".join(resolve_key(str(key), names)))
        except ValueError:  # pe, dape_k, pose_chunks: name the run, not a preset setting
            continue
    out = []
    for key, want in presets[preset]["overrides"].items():
        if key in free or key in RUN_OPTIONS:
            continue
        section, _, name = key.partition(".")
        have = (r.get("task_params") if section == "task" else r.get(section)) or {}
        if name in have and not same(want, have[name]):
            out.append(f"{key} {have[name]} (preset {want})")
    return tuple(out)


def same(a: Any, b: Any) -> bool:
    """A cell key's (or a preset's) value against a table (or a record's) value: numbers by value
    (64 == 64.0), else text."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return False
    if isinstance(b, (int, float)) and not isinstance(b, bool):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def tidy_with_presets(records: Iterable[dict[str, Any]] | str | os.PathLike, spec: SweepSpec | None = None):
    """:func:`tidy` with each row's ``preset`` (the record's; a failed run's record has none:
    the preset of the finished runs of its study, where they have one), which the grids mark
    the papers' numbers by, and ``departs``: where the run departs from that preset's table in
    ``spec`` (the sweep file the records are judged against; :func:`preset_differences`
    joined by "; "), empty where it follows it. No paper number and no claim treats a run that
    departs as its preset."""
    if isinstance(records, (str, os.PathLike)):
        records = read_results(records)
    records = list(records)
    table = tidy(records)

    def own(r: dict[str, Any]) -> tuple[Any, str]:
        return r.get("preset"), "; ".join(preset_differences(r, spec))

    by_study: dict[Any, set] = {}
    for r in records:
        if r.get("preset") in PRESETS:
            by_study.setdefault(r.get("study"), set()).add(own(r))

    def preset_of(r: dict[str, Any]) -> tuple[Any, str]:
        if r.get("preset") is not None:
            return own(r)
        known = by_study.get(r.get("study")) if r.get("study") is not None else None
        return next(iter(known)) if known and len(known) == 1 else (None, "")

    presets = [preset_of(r) for r in records]
    rows = [presets[int(i)] for i in table["record"]] if len(table) else []
    table["preset"] = [p for p, _ in rows]
    table["departs"] = [d for _, d in rows]
    return table


def _shared(rows, cols: list[str]) -> dict[str, Any]:
    """The columns in which ``rows`` hold one value (missing values aside), and that value."""
    out = {}
    for c in cols:
        vals = rows[c].dropna().unique()
        if len(vals) == 1:
            out[c] = vals[0].item() if hasattr(vals[0], "item") else vals[0]
    return out


def cell_settings(ok, failed, x: str, y: str, split: Any, index: list[Any], columns: list[Any]):
    """(row, column) -> the settings every run of the cell shares (SETTING_COLUMNS, the DAPE
    kernel, the PoSE chunk number, the task parameters, the preset and how the runs depart from
    it) and the split / length the
    cell reads: what a paper cell is matched against (Grid.mark_papers)."""
    cols = [
        c
        for c in ok.columns
        if c in SETTING_COLUMNS or c.startswith("task.") or c in ("dape_k", "pose_chunks", "preset", "departs")
    ]
    axes = {x, y} & {"split", "length"}
    groups: dict[tuple[Any, Any], list] = {}
    for (yi, xi), grp in ok.groupby([y, x], dropna=True):
        groups.setdefault((yi, xi), []).append(grp)
    if not axes:
        for (yi, xi), grp in failed.groupby([y, x], dropna=True):
            groups.setdefault((yi, xi), []).append(grp)
    else:  # a failed run has no split or length: it belongs to its whole row (column)
        other = y if x in axes else x
        for oi, grp in failed.groupby(other, dropna=True):
            for key in [(oi, xi) for xi in columns] if other == y else [(yi, oi) for yi in index]:
                groups.setdefault(key, []).append(grp)
    import pandas as pd

    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    for yi in index:
        for xi in columns:
            parts = groups.get((yi, xi))
            have = _shared(pd.concat(parts), cols) if parts else {}
            for field, label in ((y, yi), (x, xi)):
                if field in ("split", "length"):
                    have[field] = label
            if "split" not in axes and isinstance(split, str):
                have["split"] = split
            out[(yi, xi)] = have
    return out
