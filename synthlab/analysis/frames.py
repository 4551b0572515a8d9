"""Result records -> one flat pandas DataFrame (``synthlab.results``), what ``synthlab export`` writes.

One row per run x split, the runs as :func:`synthlab.run.records.read_results` keeps them (the
latest record of each sweep cell, also across files). Every column, their order and what is
not a column: docs/results.md, "The results table: synthlab.results".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, cast

from synthlab.analysis.tables import cell_overrides, check_records
from synthlab.core.errors import UsageError, check_input_file, naming
from synthlab.run.records import latest_records, read_results

# (column, where in the record): the run's own fields, in this order
RUN_FIELDS = (
    ("run_id", ("run_id",)),
    ("study", ("study",)),
    ("trial", ("trial",)),
    ("cell", ("cell",)),
    ("task", ("task",)),
    ("task_revision", ("task_revision",)),
    ("pe", ("pe",)),
    ("pe_revision", ("pe_revision",)),
    ("positions", ("positions",)),
    ("rope_scaling", ("rope_scaling",)),
    ("preset", ("preset",)),
    ("seed", ("train", "seed")),
    ("d_model", ("model", "d_model")),
    ("n_layers", ("model", "n_layers")),
    ("n_heads", ("model", "n_heads")),
    ("params", ("model", "params")),
    ("steps", ("train", "steps")),
    ("batch_size", ("train", "batch_size")),
    ("lr", ("train", "lr")),
    ("train_len", ("train", "train_len")),
    ("threads", ("train", "threads")),
    ("deterministic", ("train", "deterministic")),
    ("precision", ("train", "precision")),
    ("compile", ("train", "compile")),
    ("compile_mode", ("train", "compile_mode")),
    ("status", ("status",)),
    ("error", ("error",)),
)
RUN_COLUMNS = tuple(c for c, _ in RUN_FIELDS) + ("split",)
TAIL_COLUMNS = ("wall_s", "device", "synthlab", "git", "schema", "run_dir")
# columns whose values are whole numbers (nullable: a failed run may not know them)
INT_COLUMNS = (
    "trial",
    "task_revision",
    "pe_revision",
    "seed",
    "d_model",
    "n_layers",
    "n_heads",
    "params",
    "steps",
    "batch_size",
    "train_len",
    "threads",
    "schema",
)
FLOAT_COLUMNS = ("lr", "wall_s")
# record fields that become the columns above, prefixed columns, or rows elsewhere
_NOT_EXTRA = (
    {f[0] for _, f in RUN_FIELDS}
    | set(TAIL_COLUMNS)
    | {"metrics", "by_length", "curve", "task_params", "pe_params", "overrides"}
)
RESULTS_FILES = ("results.jsonl", "study-results.jsonl")  # what an OUT directory holds, preferred first


def result_files(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """The results files named by ``paths``: a file, or an OUT directory of ``synthlab train`` /
    ``sweep`` (its ``results.jsonl``, else its ``study-results.jsonl``). ValueError for a path
    that is missing, or a directory with neither."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise UsageError("no results given (a results.jsonl file or an OUT directory)")
    out = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = [p / name for name in RESULTS_FILES if os.path.lexists(p / name)]  # a FIFO there: said below
            if not found:
                raise UsageError(
                    f"results {str(item)!r} is a directory without {' or '.join(RESULTS_FILES)} "
                    "(expected a results file or the --out directory of synthlab train / sweep)"
                )
            p = found[0]
        check_input_file(p, "results file")
        out.append(p)
    return out


def load_records(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """The records of ``paths`` (:func:`result_files`) joined, one per run (the latest of each
    sweep cell across the files), checked: values synthlab never writes (NaN, text metrics)
    are refused with ValueError naming the file and record."""
    files = result_files(paths)
    records: list[dict[str, Any]] = []
    for f in files:
        with naming(f):
            recs = read_results(f)
        check_records(recs, f"results file {str(f)!r}")
        records += recs
    return latest_records(records)


def run_dirs(files: list[Path], records: list[dict[str, Any]]) -> dict[str, str]:
    """run_id -> its run directory, for the runs whose directory lies beside their results file
    (``OUT/<run_id>`` of ``synthlab train``, ``OUT/runs/<run_id>`` of a sweep) with its config.json."""
    found: dict[str, str] = {}
    wanted = {r["run_id"] for r in records if isinstance(r.get("run_id"), str)}
    for f in files:
        for run_id in wanted - set(found):
            for d in (f.parent / run_id, f.parent / "runs" / run_id):
                if (d / "config.json").is_file():
                    found[run_id] = str(d)
                    break
    return found


def results(paths: str | os.PathLike | Iterable[str | os.PathLike] | list[dict[str, Any]]):
    """A flat pandas DataFrame of result records: one row per run x split (module docstring,
    docs/results.md). ``paths``: a results file, an OUT directory, several of them, or a list
    of records (used as given)."""
    if isinstance(paths, list) and paths and all(isinstance(r, dict) for r in paths):
        records = paths
        check_records(records, "results")
        return frame(records)
    files = result_files(cast("str | os.PathLike | Iterable[str | os.PathLike]", paths))  # not records
    records = load_records(files)
    return frame(records, run_dirs(files, records))


def frame(records: list[dict[str, Any]], dirs: dict[str, str] | None = None):
    """The DataFrame of :func:`results` from records already read; ``dirs``: run_id -> run
    directory (:func:`run_dirs`; the ``run_dir`` column, empty where a run has none)."""
    dirs = dirs or {}
    import pandas as pd

    rows: list[dict[str, Any]] = []
    metric_names: dict[str, None] = {}
    for r in records:
        base = {col: _get(r, where) for col, where in RUN_FIELDS}
        tail = {col: r.get(col) for col in TAIL_COLUMNS if col != "run_dir"}
        run_id = r.get("run_id")
        tail["run_dir"] = (
            dirs.get(run_id) if isinstance(run_id, str) else None
        )  # not a record field: where the run's files are
        extra = _prefixed(r)
        metrics = r["metrics"] if isinstance(r.get("metrics"), dict) else {}
        splits = [(s, m) for s, m in metrics.items() if isinstance(m, dict)] or [(None, {})]
        for split, m in splits:
            values = {k: v for k, v in m.items() if not isinstance(v, (dict, list))}
            metric_names.update(dict.fromkeys(values))
            rows.append({"base": base, "split": split, "metrics": values, "tail": tail, "extra": extra})
    fixed = set(RUN_COLUMNS) | set(TAIL_COLUMNS)
    named = {m: (f"metric.{m}" if m in fixed else m) for m in metric_names}
    extra_cols: dict[str, None] = {}
    for row in rows:
        extra_cols.update(dict.fromkeys(row["extra"]))
    extra_order = sorted(extra_cols, key=_extra_rank)
    taken = fixed | set(named.values())  # a record's other field never hides a column above
    columns = [*RUN_COLUMNS, *named.values(), *TAIL_COLUMNS, *(c for c in extra_order if c not in taken)]
    data: dict[str, list[Any]] = {c: [] for c in columns}
    for row in rows:
        values = {
            **row["extra"],
            **row["base"],
            "split": row["split"],
            **row["tail"],
            **{named[k]: v for k, v in row["metrics"].items()},
        }
        for c in columns:
            data[c].append(values.get(c))
    metric_columns = set(named.values())
    return pd.DataFrame({c: _column(c, data[c], c in metric_columns) for c in columns}, columns=columns)


def _get(r: dict[str, Any], where: tuple[str, ...]) -> Any:
    v: Any = r
    for k in where:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def _prefixed(r: dict[str, Any]) -> dict[str, Any]:
    """task.<param>, pe.<encoding>.<param>, model.<field>, train.<field>, set.<key> and other
    top-level scalar fields of one record."""
    out: dict[str, Any] = {}
    for k, v in (r.get("task_params") or {}).items():
        out[f"task.{k}"] = v
    for enc, params in (r.get("pe_params") or {}).items():
        for k, v in (params or {}).items() if isinstance(params, dict) else ():
            out[f"pe.{enc}.{k}"] = v
    taken = {where for _, where in RUN_FIELDS}
    for section in ("model", "train"):
        for k, v in (r.get(section) or {}).items():
            if (section, k) not in taken:
                out[f"{section}.{k}"] = v
    for k, v in _cell_settings(r).items():
        out[f"set.{k}"] = v
    for k, v in r.items():
        if k not in _NOT_EXTRA and not isinstance(v, (dict, list)):
            out[k] = v
    return out


def _cell_settings(r: dict[str, Any]) -> dict[str, Any]:
    """A sweep cell's ``--set`` settings: the overrides in its key (a failed record's own
    ``overrides`` when it has no key)."""
    return cell_overrides(r)


_PREFIX_RANK = {"task.": 0, "pe.": 1, "model.": 2, "train.": 3, "set.": 4}


def _extra_rank(col: str) -> tuple[int, str]:
    """Prefixed columns grouped (task., pe., model., train., set.), then other fields; sorted by name."""
    for prefix, rank in _PREFIX_RANK.items():
        if col.startswith(prefix):
            return rank, col
    return len(_PREFIX_RANK), col


def _column(name: str, values: list[Any], metric: bool):
    """One column with the dtype its values share, so that CSV and Parquet both hold it:
    metrics float; whole numbers nullable Int64; true/false nullable boolean; text (and a
    column of mixed kinds: a list or mapping as its JSON) string."""
    import pandas as pd

    present = [v for v in values if v is not None]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present)
    if (
        metric
        or (present and numbers and name not in INT_COLUMNS and not all(isinstance(v, int) for v in present))
        or (not present and name in FLOAT_COLUMNS)
    ):
        return pd.array([float("nan") if v is None else float(v) for v in values], dtype="float64")
    if present and numbers and all(isinstance(v, int) or float(v).is_integer() for v in present):
        return pd.array([None if v is None else int(v) for v in values], dtype="Int64")
    if not present:
        return pd.array(values, dtype="Int64" if name in INT_COLUMNS else "string")
    if all(isinstance(v, bool) for v in present):
        return pd.array(values, dtype="boolean")
    text = [None if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in values]
    return pd.array(text, dtype="string")
