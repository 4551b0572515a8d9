"""Result records -> tidy table -> grids (seaborn heatmaps, CSV, Markdown).

:func:`grid` pivots a tidy table (:func:`tidy`) into rows ``y`` x columns ``x``, each cell the
mean and spread over seeds of the headline metric in percent; a cell with no finished run is
NaN, never 0. :meth:`Grid.save` writes PNG + CSV + Markdown (all three or none); no figure is
left open and the backend is never switched. How a grid is built: docs/results.md, "How a
grid is built (the code)"; how to read one: "Reading the grids".
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Iterable

from synthlab.analysis.lineplots import by_length
from synthlab.analysis.tables import (
    SMOKE_NOTE,
    check_records,
    composite,
    in_percent,
    per_seed,
    pooled_axes,
    pooled_labels,
    same,
)
from synthlab.analysis.tables import cell_settings as _cell_settings
from synthlab.analysis.tables import tidy_with_presets as tidy
from synthlab.core.errors import check_input_file, naming
from synthlab.plan.papers import canonical
from synthlab.plan.sweepfile import installed_sweeps, is_error, parse_sweep
from synthlab.run.records import read_results

__all__ = [
    "KINDS",
    "Grid",
    "grid",
    "load_results",
    "make_grid",
    "pooled_axes",
    "sweep_grids",
    "sweep_spec_for",
    "read_results",
    "tidy",
]

KINDS = ("capacity", "ood")


@dataclasses.dataclass
class Grid:
    """A grid: ``mean``/``std``/``n`` (rows y x columns x, percent) and its labels."""

    kind: str
    x: str
    y: str
    metric: str
    show: str
    mean: Any  # pandas DataFrame
    std: Any
    n: Any
    n_failed: Any
    title: str = ""
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    best_of: tuple[str, ...] = ()  # cells are the best run over seeds x these settings (see make_grid)
    # (row, column) -> the source paper's number for that cell (synthlab.plan.papers.PaperValue)
    paper: dict[tuple[Any, Any], Any] = dataclasses.field(default_factory=dict)
    # (row, column) -> what every run of the cell shares: its settings (pe, d_model, n_layers,
    # task.<param>, ...), its preset and the split (length) it reads; mark_papers matches by it
    settings: dict[tuple[Any, Any], dict[str, Any]] = dataclasses.field(default_factory=dict)
    runs: int = 0  # the runs the grid was made from, and how many of them failed
    runs_failed: int = 0
    # an OOD grid's per-length results, one row per run x split x length (synthlab.analysis.lineplots.
    # by_length), drawn beside the heatmap by save(); None when the records have no by_length
    lengths: Any = None

    def mark_papers(self, papers: Iterable[Any]) -> None:
        """Attach the papers' numbers to the cells they describe. A paper value (a
        :class:`synthlab.plan.papers.PaperValue`) goes beside a cell when the cell's runs come from a
        preset it lists (``presets``, default the paper preset: never beside a smaller scale)
        and share every key its cell names (``pe``, ``split``, ``d_model``, ``n_layers``, a task
        parameter...), whether the grid shows that key as a row, a column, part of a row label
        or not at all. A key the paper cell does not name does not matter to it, so a paper
        cell names every setting its paper fixes (CoPE Table 8: d_model, n_layers, n_heads).
        The cells' settings come from :func:`make_grid`, their preset from :func:`tidy`."""
        for key, have in self.settings.items():
            if key in self.paper:
                continue
            for p in papers:
                if _paper_matches(p, have):
                    self.paper[key] = p
                    break

    def labels(self) -> list[list[str]]:
        out = []
        for yi in self.mean.index:
            row = []
            for xi in self.mean.columns:
                m, s, n = self.mean.at[yi, xi], self.std.at[yi, xi], self.n.at[yi, xi]
                nf = int(self.n_failed.at[yi, xi])
                if not math.isfinite(m):  # no finished run: failed, or not run (blank)
                    text = f"failed\n({nf} run{'s' if nf > 1 else ''})" if nf else ""
                elif self.best_of:
                    text = f"{m:.1f}\nbest of {n}"
                elif n > 1 and math.isfinite(s):
                    text = f"{m:.1f}\n±{s:.1f} (n {n})"
                else:
                    text = f"{m:.1f}\n(n {n})"
                if nf and math.isfinite(m):
                    text = text[:-1] + f", {nf} failed)" if text.endswith(")") else text + f" ({nf} failed)"
                p = self.paper.get((yi, xi))
                row.append(text + (f"\npaper {p.label()}" if p is not None else ""))
            out.append(row)
        return out

    def markdown(self) -> str:
        what = (
            f"the best of n runs over seeds x {', '.join(self.best_of)}" if self.best_of else "mean ± std over n seeds"
        )
        head = (
            f"**{self.title}** ({self.show} %, {what}; blank = not run{self._failed_note('; ')}"
            + ("; paper: the source paper's number" if self.paper else "")
            + ")\n\n"
        )
        if any(cell.get("preset") == "smoke" for cell in self.settings.values()):
            head = f"*{SMOKE_NOTE}*\n\n" + head
        cols = [str(c) for c in self.mean.columns]
        corner = self.y if self.x == "split" else f"{self.y} / {self.x}"  # rows / columns
        lines = ["| " + " | ".join([corner, *cols]) + " |", "|" + "---|" * (len(cols) + 1)]
        for yi, row in zip(self.mean.index, self.labels()):
            lines.append(
                "| " + " | ".join([str(yi), *(c.replace("\npaper", " · paper").replace("\n", " ") for c in row)]) + " |"
            )
        return head + "\n".join(lines) + "\n"

    def _failed_note(self, sep: str) -> str:
        if not self.runs_failed:
            return ""
        return f"{sep}{self.runs_failed} of {self.runs} runs failed (cells marked failed)"

    def long(self):
        """The grid as a long table: y, x, mean, std, n, n_failed, paper, paper_spread, paper_source."""
        import pandas as pd

        rows = []
        for yi in self.mean.index:
            for xi in self.mean.columns:
                p = self.paper.get((yi, xi))
                rows.append(
                    {
                        self.y: yi,
                        self.x: xi,
                        "mean": self.mean.at[yi, xi],
                        "std": self.std.at[yi, xi],
                        "n": int(self.n.at[yi, xi]),
                        "n_failed": int(self.n_failed.at[yi, xi]),
                        "paper": p.value if p is not None else math.nan,
                        "paper_spread": p.spread if p is not None and p.spread is not None else math.nan,
                        "paper_source": p.source if p is not None else "",
                    }
                )
        return pd.DataFrame(rows)

    def save(self, png: str | os.PathLike) -> dict[str, str]:
        """Write the heatmap PNG and the same table as CSV and Markdown beside it, and with
        :attr:`lengths` the line plot of accuracy vs test length and its table
        (``<stem>-by-length.png`` / ``.csv``): all or none (:func:`synthlab.core.outputs.write_files`)."""
        from synthlab.core.outputs import png_writer, same_text, text_writer, write_files

        png = Path(png)
        side = png.with_name(f"{png.stem}-by-length.png")
        texts = {
            "csv": (png.with_suffix(".csv"), self.long().to_csv(index=False)),
            "md": (png.with_suffix(".md"), self.markdown()),
        }
        if self.lengths is not None:
            texts["by_length_csv"] = (side.with_suffix(".csv"), self.lengths.to_csv(index=False))
        pngs = {"png": png, **({"by_length_png": side} if self.lengths is not None else {})}
        if all(p.is_file() for p in pngs.values()) and all(same_text(p, t) for p, t in texts.values()):
            # the pictures of this very table are there (a finished sweep run again): not drawn again
            self.files = {k: str(p) for k, p in [*pngs.items(), *((k, p) for k, (p, _) in texts.items())]}
            return self.files
        png.parent.mkdir(parents=True, exist_ok=True)
        files = {"png": (png, png_writer(self.plot()[0])), **{k: (p, text_writer(t)) for k, (p, t) in texts.items()}}
        if self.lengths is not None:
            files["by_length_png"] = (side, png_writer(self.plot_lengths()))
        self.files = write_files(files, "grid file")
        return self.files

    def plot(self, ax=None):
        """The seaborn heatmap (fixed 0-100 % colour scale, annotated cells, NaN blank) as
        (Figure, Axes): drawn on ``ax``, or on a new Figure that pyplot does not manage (no
        backend switched, nothing left open; a notebook shows it with ``display(fig)``)."""
        import numpy as np
        import seaborn as sns
        from matplotlib.figure import Figure

        data = self.mean.astype(float)
        h, w = data.shape
        if ax is None:
            ax = Figure(figsize=(max(4.0, 1.1 * w + 2.5), max(2.5, 0.6 * h + 1.5))).subplots()
        fig = ax.figure
        sns.heatmap(
            data,
            vmin=0.0,
            vmax=100.0,
            cmap="viridis_r" if self.show == "error" else "viridis",
            annot=np.array(self.labels(), dtype=object),
            fmt="",
            annot_kws={"fontsize": 8},
            linewidths=0.5,
            linecolor="white",
            cbar_kws={"label": f"{self.show} (%)"},
            ax=ax,
        )
        self._mark_failed(ax)
        ax.set_xlabel(self.x)
        ax.set_ylabel(self.y)
        ax.set_title(self.title + self._failed_note("\n"), fontsize=10)
        fig.tight_layout()
        return fig, ax

    def plot_lengths(self):
        """The line plot of :attr:`lengths` (accuracy or error vs test length, a line per
        encoding, mean ± sd over seeds; :func:`synthlab.analysis.lineplots.draw_by_length`), a Figure."""
        from synthlab.analysis.lineplots import draw_by_length

        if self.lengths is None:
            raise ValueError("this grid has no per-length results to draw (its records' by_length is null)")
        return draw_by_length(self.lengths, self.show)

    def _mark_failed(self, ax) -> None:
        """Hatch and label the cells whose every run failed (seaborn leaves NaN cells bare)."""
        from matplotlib.patches import Rectangle

        for i, (yi, row) in enumerate(zip(self.mean.index, self.labels())):
            for j, (xi, text) in enumerate(zip(self.mean.columns, row)):
                if math.isfinite(self.mean.at[yi, xi]) or not self.n_failed.at[yi, xi]:
                    continue
                ax.add_patch(Rectangle((j, i), 1, 1, facecolor="#f4f4f4", hatch="//", edgecolor="#d9a0a0", linewidth=0))
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    text,
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="#b22222",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5},
                )


def _paper_matches(p: Any, have: dict[str, Any]) -> bool:
    """Paper value ``p`` describes a grid cell whose runs share ``have`` (Grid.settings)."""
    if have.get("preset") not in p.presets or have.get("departs", "?") != "":
        return False  # another preset, or runs that depart from its table (or not all alike)
    for k, v in canonical(p.cell).items():
        col = k if k in have else f"task.{k}"
        if col not in have or not same(have[col], v):
            return False
    return True


def _order(values: Iterable[Any]) -> list[Any]:
    """Numbers (d_model, lengths, seeds) ascending; names (encodings, tasks, splits) in the
    order they first appear, i.e. the sweep file's axis order for a sweep's records."""
    vals = list(dict.fromkeys(v for v in values if not (isinstance(v, float) and math.isnan(v))))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return sorted(vals)
    return vals


def _defaults_for(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Metric, display and splits from the installed sweep file of the records' task."""
    out: dict[str, Any] = {
        "metric": "token_acc",
        "show": "accuracy",
        "in_dist": "test",
        "ood": None,
        "ood_x": "split",
        "ood_y": "pe",
        "capacity_x": "d_model",
        "capacity_y": "pe",
        "spec": None,
    }
    tasks = {r.get("task") for r in records}
    studies = {str(r.get("study") or "") for r in records}
    try:
        # the sweep that wrote the records first (a study is named <sweep>-<preset> by default:
        # flipflop_lm-quick), then any sweep of their task
        installed = installed_sweeps()
        named = [n for n in installed if studies and all(st.startswith(f"{n}-") for st in studies)]
        for name in sorted(named, key=len, reverse=True) + [n for n in installed if n not in named]:
            text = installed[name]
            spec = parse_sweep(text, f"sweeps/{name}.toml", name=name)
            if tasks and tasks <= set(spec.tasks):
                out.update(
                    metric=spec.metric,
                    show=spec.show,
                    in_dist=spec.in_dist,
                    ood=spec.ood or None,
                    ood_x=spec.ood_x,
                    ood_y=spec.ood_y,
                    capacity_x=spec.capacity_x,
                    capacity_y=spec.capacity_y,
                    spec=spec,
                )
                break
    except ValueError:
        pass
    return out


def sweep_spec_for(records: list[dict[str, Any]]):
    """The installed sweep file whose tasks cover the records' (None if none does)."""
    return _defaults_for(records)["spec"]


def make_grid(
    table,
    kind: str,
    x: str,
    y: str,
    metric: str = "token_acc",
    show: str = "accuracy",
    split: str | list[str] | None = None,
    title: str = "",
    best_of: tuple[str, ...] = (),
) -> Grid:
    """Pivot a tidy table (see :func:`tidy`) into a :class:`Grid`.

    ``best_of`` (e.g. ``("lr",)``): the cell is the best single run over the seeds and these
    settings (the maximum accuracy, or the minimum error), as the CHE papers report, instead of
    the mean over seeds; ``n`` counts the runs it chose from, ``std`` is NaN.

    ``split``: for x = ``split`` the list of columns; otherwise the split the cells read
    (for x = ``length``, the split whose per-length rows are used).
    """
    import numpy as np
    import pandas as pd

    if kind not in KINDS:
        raise ValueError(f"--kind {kind!r} is not allowed (allowed: {', '.join(KINDS)})")
    if show not in ("accuracy", "error"):
        raise ValueError(f"show {show!r} is not allowed (allowed: accuracy, error)")
    df = table.copy()
    for field in (x, y):
        parts = field.split(",")
        if len(parts) > 1 and all(p in df.columns for p in parts):  # composite, e.g. "task,pe"
            df[field] = composite(df, parts)
        if field not in ("split", "length") and field not in df.columns:
            allowed = sorted(c for c in df.columns if c not in ("record", "error", "status"))
            raise ValueError(
                f"grid field {field!r} is not in the results (allowed: split, length, {', '.join(allowed)})"
            )
    if metric not in df.columns:
        df[metric] = math.nan
    tuned = {b.rsplit(".", 1)[-1] for b in best_of}  # "lr" or "train.lr": a best-of cell picks among them
    pooled = [a for a in pooled_axes(df, x, y) if a.rsplit(".", 1)[-1] not in tuned]
    if pooled:  # never average over a grid axis as if it were seeds: it joins the rows instead
        y, labels = pooled_labels(df, y, pooled)
        df[y] = labels
    failed = df[df["status"] != "ok"]
    ok = df[df["status"] == "ok"]
    if x == "length" or y == "length":
        ok = ok[ok["length"].notna()]
        if split is not None and not isinstance(split, list):
            ok = ok[ok["split"] == split]
        if ok.empty and (df["status"] == "ok").any():  # finished runs, none evaluated per length
            raise ValueError(_no_lengths(df, split))
        value_col = "token_acc" if metric not in ok.columns or ok[metric].isna().all() else metric
    else:
        ok = ok[ok["length"].isna()]
        value_col = metric
        if x == "split" or y == "split":
            splits = split if isinstance(split, list) else _order(ok["split"])
            ok = ok[ok["split"].isin(splits)]
        elif split is not None:
            ok = ok[ok["split"] == split]
    vals = ok[value_col].astype(float)
    ok = ok.assign(_v=in_percent(vals, value_col, show))  # in show's unit, whichever kind the metric is
    if x == "split" or y == "split":
        col_split = split if isinstance(split, list) else _order(ok["split"])
    key_y = _order(list(ok[y]) + ([] if y in ("split", "length") else list(failed[y])))
    key_x = col_split if x == "split" else _order(list(ok[x]) + ([] if x == "length" else list(failed[x])))
    if y == "split":
        key_y = col_split
    if not key_x and len(failed):  # every run failed before any column was known: one column
        key_x = ["(failed)"]
    mean = pd.DataFrame(np.nan, index=key_y, columns=key_x)
    std, n, nf = mean.copy(), pd.DataFrame(0, index=key_y, columns=key_x), pd.DataFrame(0, index=key_y, columns=key_x)
    # one value per seed per cell (n counts seeds: tables.per_seed); a best-of cell picks among runs
    per_run = (
        ok.groupby([y, x, "record"], dropna=True)["_v"].mean().reset_index() if best_of else per_seed(ok, [y, x], "_v")
    )
    for (yi, xi), grp in per_run.groupby([y, x]):
        v = grp["_v"].dropna().to_numpy()
        if yi in mean.index and xi in mean.columns and len(v):
            if best_of:
                mean.at[yi, xi] = float(v.min() if show == "error" else v.max())
            else:
                mean.at[yi, xi] = float(v.mean())
                std.at[yi, xi] = float(v.std(ddof=1)) if len(v) > 1 else math.nan
            n.at[yi, xi] = len(v)
    if x not in ("split", "length") and y not in ("split", "length"):
        for (yi, xi), grp in failed.groupby([y, x]):
            if yi in nf.index and xi in nf.columns:
                nf.at[yi, xi] = grp["record"].nunique()
    else:
        other = y if x in ("split", "length") else x
        for oi, grp in failed.groupby(other):
            if x in ("split", "length") and oi in nf.index:
                nf.loc[oi, :] = grp["record"].nunique()
            elif oi in nf.columns:
                nf.loc[:, oi] = grp["record"].nunique()
    settings = _cell_settings(ok, failed, x, y, split, list(mean.index), list(mean.columns))
    # lengths and chunk numbers arrive as floats (NaN-able columns): label them 256, not 256.0
    rows, cols = _whole_numbers(mean.index), _whole_numbers(mean.columns)
    mean, std, n, nf = (f.rename(index=rows, columns=cols) for f in (mean, std, n, nf))
    settings = {(rows.get(yi, yi), cols.get(xi, xi)): have for (yi, xi), have in settings.items()}
    return Grid(
        kind=kind,
        x=x,
        y=y,
        metric=value_col,
        show=show,
        mean=mean,
        std=std,
        n=n,
        n_failed=nf,
        title=title,
        best_of=tuple(best_of),
        runs=int(df["record"].nunique()),
        runs_failed=int(failed["record"].nunique()),
        settings=settings,
    )


def _no_lengths(df, split: Any) -> str:
    """Why a grid over lengths has nothing to draw."""
    with_lengths = sorted({str(v) for v in df.loc[df["length"].notna(), "split"].dropna()})
    if with_lengths:
        return (
            f"these results have no per-length metrics on split {split!r} (per-length splits: "
            f"{', '.join(with_lengths)})"
        )
    tasks = ", ".join(sorted({str(t) for t in df["task"].dropna()}))
    return (
        f"these results have no per-length metrics ({tasks}: evaluated per split, by_length is null); "
        "draw them with --x split"
    )


def _whole_numbers(labels) -> dict[float, int]:
    """{256.0: 256, ...} when every label of an axis is a whole float (lengths, chunk counts);
    nothing for an axis with fractions or huge values (a learning-rate axis keeps 1e+30)."""
    vals = list(labels)
    if vals and all(isinstance(v, float) and v.is_integer() and abs(v) < 2**53 for v in vals):
        return {v: int(v) for v in vals}
    return {}


def grid(
    results: str | os.PathLike | list[dict[str, Any]],
    kind: str = "ood",
    x: str | None = None,
    y: str | None = None,
    out: str | os.PathLike | None = None,
    metric: str | None = None,
    show: str | None = None,
) -> Grid:
    """The ``kind`` grid of a results file (or list of records); with ``out`` (a .png path) also
    write PNG + CSV + Markdown, and for an OOD grid of records with per-length results the
    by-length line plot beside them (:meth:`Grid.save`). Defaults (metric, splits, axes) come
    from the task's sweep file."""
    if kind not in KINDS:
        raise ValueError(f"--kind {kind!r} is not allowed (allowed: {', '.join(KINDS)})")
    if out is not None and Path(out).suffix.lower() != ".png":
        raise ValueError(f"-o {str(out)!r}: expected a .png path (CSV and Markdown go beside it)")
    if isinstance(results, (str, os.PathLike)):
        records = load_results(results)
    else:
        records = list(results)
        check_records(records, "results", _known_tasks())
    if not records:
        raise ValueError("no result records to draw")
    d = _defaults_for(records)
    metric = metric or d["metric"]
    show = show or d["show"]
    table = tidy(records, d["spec"])
    if kind == "capacity":
        x = x or d["capacity_x"]
        y = y or d["capacity_y"]
        split = d["in_dist"]
        title = f"capacity: {_what(metric, show)} on {split}"
    else:
        x = x or d["ood_x"]
        y = y or d["ood_y"]
        if x == "split" or y == "split":
            present = _order(s for s in table["split"].dropna())
            wanted = [d["in_dist"], *(d["ood"] or [s for s in present if s != d["in_dist"]])]
            split = [s for s in dict.fromkeys(wanted) if s in present] or present or wanted
        elif x == "length" or y == "length":
            split = d["ood"][0] if d["ood"] and d["ood_x"] == "length" else None
        else:
            split = (d["ood"] or [d["in_dist"]])[0]
        title = f"OOD: {_what(metric, show)}" + (f" on {split}" if isinstance(split, str) else "")
    tasks = sorted({str(r.get("task")) for r in records})
    g = make_grid(
        table,
        kind,
        x,
        y,
        metric=metric,
        show=show,
        split=split,
        title=f"{', '.join(tasks[:3])}{'...' if len(tasks) > 3 else ''} {title}",
    )
    if d["spec"] is not None and metric == d["spec"].metric and show == d["spec"].show:
        g.mark_papers(d["spec"].papers)
    if kind == "ood":
        g.lengths = by_length(table)
    if out is not None:
        g.save(Path(out))
    return g


def _known_tasks() -> list[str]:
    from synthlab import generators

    return list(generators.TASKS)


def load_results(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a results file, checked as a grid needs them: ValueError for a missing
    file, a directory, or values synthlab never writes (NaN, text metrics, an unknown task);
    OSError naming the file when it cannot be read."""
    check_input_file(path, "results file")
    with naming(path):
        records = read_results(path)
    check_records(records, f"results file {str(path)!r}", _known_tasks())
    return records


def _what(metric: str, show: str) -> str:
    return metric if (show == "error") == is_error(metric) else f"{show} = 1 - {metric}"


def sweep_grids(
    records: list[dict[str, Any]],
    spec,
    out_dir: str | os.PathLike | None,
    best_of: tuple[str, ...] = (),
    stem: str = "",
) -> list[Grid]:
    """The grids a sweep file asks for: capacity when its x axis varies, ood when it has OOD
    splits; saved as ``out_dir/<kind>.png`` (+ .csv, .md; ``out_dir`` None: not saved, the
    tables only). With ``best_of`` (a tuned sweep's parameters) each cell is the best run over
    seeds x those settings, saved as ``<kind>-best.png``."""
    if not records:
        return []
    out_dir = Path(out_dir) if out_dir is not None else None
    table = tidy(records, spec)
    suffix = stem or ("-best" if best_of else "")
    best_title = f", best of seeds x {', '.join(best_of)}" if best_of else ""
    title = spec.name
    grids: list[Grid] = []
    cap_x = spec.capacity_x
    if cap_x in table.columns and table[cap_x].nunique(dropna=True) > 1:
        g = make_grid(
            table,
            "capacity",
            cap_x,
            spec.capacity_y,
            spec.metric,
            spec.show,
            split=spec.in_dist,
            title=f"{title}: capacity ({_what(spec.metric, spec.show)} on {spec.in_dist}{best_title})",
            best_of=best_of,
        )
        g.mark_papers(spec.papers)
        if out_dir is not None:
            g.save(out_dir / f"capacity{suffix}.png")
        grids.append(g)
    if spec.ood or spec.ood_x not in ("split",):
        if spec.ood_x == "split":
            split: Any = [spec.in_dist, *spec.ood]
        elif spec.ood_x == "length":
            split = spec.ood[0] if spec.ood else spec.in_dist
        else:
            split = spec.ood[0] if spec.ood else spec.in_dist
        x, y = spec.ood_x, spec.ood_y
        if x in table.columns or x in ("split", "length"):
            g = make_grid(
                table,
                "ood",
                x,
                y,
                spec.metric,
                spec.show,
                split=split,
                title=f"{title}: OOD ({_what(spec.metric, spec.show)}"
                f"{'' if isinstance(split, list) else ' on ' + split}{best_title})",
                best_of=best_of,
            )
            g.mark_papers(spec.papers)
            g.lengths = by_length(table, best_of)
            if out_dir is not None:
                g.save(out_dir / f"ood{suffix}.png")
            grids.append(g)
    return grids
