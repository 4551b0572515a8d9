"""Drawing learning curves: the metrics a run measured every ``train.eval_every`` steps, per encoding.

A run trained with ``--set train.eval_every=N`` records ``curve`` (:mod:`synthlab.run.curves`): a
list of points ``{"step": int, "split": str, <the split's numeric metrics, named as in
record["metrics"]>}`` ordered by step. :func:`curve_table` makes them one tidy table (a row
per run x point) and :func:`draw_curves` draws one metric of it (x = step, a line per
encoding, mean ± sd over seeds, a panel per split and task; :mod:`synthlab.analysis.lineplots`) as
PNG + the CSV of the rows drawn; ``synthlab curves`` is its command. Only finished runs
(status ok) are drawn, as in the grids.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Iterable

from synthlab.analysis.lineplots import LINE, PANEL, draw_lines, line_labels, one_per_seed, panel_labels
from synthlab.analysis.tables import tidy
from synthlab.core.errors import UsageError, check_output_dir

HINT = "train with --set train.eval_every=N"
_KEYS = ("step", "split")
_COLUMNS = ("task", "split", "step", LINE, "seed", "run_id")


def curve_table(records: list[dict[str, Any]], where: str = "results") -> Any | None:
    """One row per finished run x curve point: task, split, step, encoding (the line: pe and
    the settings that differ, :func:`synthlab.analysis.lineplots.line_labels`), seed, run_id, the
    point's metrics, panel. None when no finished run has a curve. ValueError for a point
    synthlab never writes (no integer step, no split, a metric that is not a number or null)."""
    import pandas as pd

    points: list[dict[str, Any]] = []
    for i, r in enumerate(records):
        curve = r.get("curve")
        if r.get("status") != "ok" or not curve:
            continue
        name = f"{where}: record {i + 1} (run {r.get('run_id') or '?'})"
        if not isinstance(curve, list):
            raise ValueError(f"{name}: curve is not a list of points")
        for j, p in enumerate(curve):
            points.append({"record": i, **_point(p, f"{name}: curve[{j}]")})
    if not points:
        return None
    metrics = list(dict.fromkeys(k for p in points for k in p if k not in ("record", *_KEYS)))
    settings = tidy(records).drop_duplicates("record")
    settings = settings[[c for c in settings.columns if c not in (*metrics, "split", "length")]]
    rows = pd.DataFrame(points).merge(settings, on="record", how="left", sort=False)
    rows = rows.assign(**{LINE: line_labels(rows)})
    table = rows[[*_COLUMNS, *metrics]].reset_index(drop=True)
    return table.assign(**{PANEL: panel_labels(table)})


def _point(p: Any, name: str) -> dict[str, Any]:
    if not isinstance(p, dict) or not isinstance(p.get("split"), str):
        raise ValueError(f'{name} has no split (a point is {{"step": int, "split": str, <metrics>}})')
    step = p.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"{name}: step {step!r} is not an integer")
    out: dict[str, Any] = {"step": step, "split": p["split"]}
    for k, v in p.items():
        if k in _KEYS:
            continue
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise ValueError(f"{name}: {k} is {v!r}; a curve holds numbers, null for a missing one")
        out[k] = math.nan if v is None else float(v)
    return out


def draw_curves(
    results: str | os.PathLike | Iterable[str | os.PathLike],
    metric: str | None = None,
    split: str | None = None,
    out: str | os.PathLike | None = None,
) -> dict[str, str]:
    """Draw the learning curves of ``results`` (files or OUT directories, as
    :func:`synthlab.results`): ``metric`` (default: the task's headline metric from its sweep
    file, else the first one recorded), every split with curves or only ``split``; written to
    ``out`` (default: OUT/grids, OUT the directory of the first results file) as
    ``curves-<metric>[-<split>].png`` and ``.csv``. Returns {"png": path, "csv": path}.
    Everything is checked before anything is written: ValueError when no finished run has a
    curve, or for an unknown metric or split."""
    from pathlib import Path

    from synthlab.analysis.frames import load_records, result_files
    from synthlab.analysis.grids import sweep_spec_for
    from synthlab.core.outputs import csv_writer, png_writer, write_files

    given = [results] if isinstance(results, (str, os.PathLike)) else list(results)
    files = result_files(given)
    records = load_records(files)
    named = ", ".join(repr(str(f)) for f in given)
    table = curve_table(records, f"results {named}")
    if table is None:
        raise UsageError(f"no learning curves in {named}: {HINT}")
    recorded = [c for c in table.columns if c not in (*_COLUMNS, PANEL)]
    spec = sweep_spec_for(records)
    if metric is None:
        metric = spec.metric if spec is not None and spec.metric in recorded else recorded[0]
    if metric not in recorded:
        raise UsageError(f"--metric {metric!r} is not in the learning curves (recorded: {', '.join(recorded)})")
    splits = list(dict.fromkeys(table["split"]))
    if split is not None and split not in splits:
        raise UsageError(f"--split {split!r} has no learning curves (splits with curves: {', '.join(splits)})")
    drawn = table[table["split"] == split] if split is not None else table
    drawn = drawn[[*_COLUMNS, metric]].dropna(subset=[metric]).reset_index(drop=True)
    if drawn.empty:
        raise UsageError(
            f"--metric {metric!r} has no values in the learning curves"
            + (f" of split {split!r}" if split is not None else "")
        )
    drawn = drawn.assign(**{PANEL: panel_labels(drawn)})
    out_dir = Path(out) if out is not None else files[0].parent / "grids"
    check_output_dir(out_dir, "--out")
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", f"curves-{metric}" + (f"-{split}" if split is not None else ""))
    tasks = list(dict.fromkeys(drawn["task"].astype(str)))
    fraction = bool(drawn[metric].between(0.0, 1.0).all())  # accuracies, error rates: the grids' fixed scale
    fig = draw_lines(
        one_per_seed(drawn, "step", metric),
        "step",
        metric,
        xlabel="training step",
        ylabel=metric,
        title=f"{', '.join(tasks[:3])}{'...' if len(tasks) > 3 else ''}: learning curves ({metric})",
        ylim=(-0.02, 1.02) if fraction else None,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_files(
        {"png": (out_dir / f"{stem}.png", png_writer(fig)), "csv": (out_dir / f"{stem}.csv", csv_writer(drawn))},
        "--out",
    )
