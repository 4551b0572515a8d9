"""Line plots: accuracy vs test length beside the OOD heatmaps, and learning curves.

A line per encoding and every other setting that differs between its runs, mean ± sd over
seeds, a panel per task and split, on a Figure pyplot never sees. The rules: docs/results.md,
"How a grid is built (the code)" and "Accuracy vs test length beside the OOD grids".
"""

from __future__ import annotations

import math
from typing import Any

from synthlab.analysis.tables import pooled_axes, pooled_labels

LINE = "encoding"  # the column naming a line: the pe, joined by the settings that differ (pooled_labels)
PANEL = "panel"  # the column naming a panel: task and / or split when there are several


def line_labels(df) -> Any:
    """Each row's line: its ``pe``, joined by the settings that differ between the runs of one
    task and pe (other than the seed). ``df`` has the columns of a :func:`synthlab.analysis.tables.tidy`
    table (one row or more per run, ``record`` naming the run)."""
    d = df.assign(**{"task,pe": df["task"].astype(str) + " " + df["pe"].astype(str)})
    # x "split": the plot's x (length, step) is no setting of a run, so only task and pe group runs
    return pooled_labels(d, "pe", pooled_axes(d, "split", "task,pe"))[1]


def panel_labels(df, keys: tuple[str, ...] = ("task", "split")) -> Any:
    """Each row's panel: the values of those ``keys`` that take more than one value (``""``
    when all rows share one panel)."""
    used = [k for k in keys if df[k].nunique(dropna=False) > 1]
    if not used:
        return df[keys[0]].map(lambda _: "")
    return df[used].astype(str).agg(" · ".join, axis=1)


def by_length(table, best_of: tuple[str, ...] = ()) -> Any | None:
    """The per-length results of a tidy table (finished runs' ``by_length``): columns task,
    split, length, encoding, seed, run_id, accuracy (the by_length value: the task's headline
    accuracy per length group, 0-1), panel. None when no finished run has per-length results
    or for a ``best_of`` grid (its cells pick one run; the mean ± sd plot belongs to the plain grid)."""
    if best_of or "length" not in table.columns:
        return None
    rows = table[(table["status"] == "ok") & table["length"].notna()]
    if rows.empty:
        return None
    out = rows.assign(**{LINE: line_labels(rows)})
    out = out.assign(
        length=out["length"].map(lambda v: int(v) if float(v).is_integer() else v),
        accuracy=out["token_acc"].astype(float),
    )
    out = out[["task", "split", "length", LINE, "seed", "run_id", "accuracy"]].reset_index(drop=True)
    return out.assign(**{PANEL: panel_labels(out)})


def draw_by_length(lengths, show: str = "accuracy") -> Any:
    """The Figure of :func:`by_length`'s table: x = test length, y = accuracy or error in %
    (``show``, as the heatmap beside it), a line per encoding, mean ± sd over seeds."""
    acc = lengths["accuracy"].astype(float)
    data = lengths.assign(value=100.0 * (1.0 - acc) if show == "error" else 100.0 * acc)
    data = one_per_seed(data, "length", "value")
    tasks = list(dict.fromkeys(lengths["task"].astype(str)))
    title = f"{', '.join(tasks[:3])}{'...' if len(tasks) > 3 else ''}: {show} per test length"
    return draw_lines(
        data, "length", "value", title=title, xlabel="test length", ylabel=f"{show} (%)", ylim=(-2.0, 102.0)
    )


def one_per_seed(data, x: str, y: str):
    """One point per panel, line, ``x`` and seed (the mean of its runs), as the grids count
    (:func:`synthlab.analysis.tables.per_seed`): a seed run twice is one sample, not two that narrow the band."""
    return data.groupby([PANEL, LINE, x, "seed"], sort=False, dropna=False, as_index=False)[y].mean()


def draw_lines(
    data, x: str, y: str, *, title: str, xlabel: str, ylabel: str, ylim: tuple[float, float] | None = None
) -> Any:
    """A Figure with one seaborn lineplot per :data:`PANEL` value (a line per :data:`LINE`
    value, mean ± sd of ``y`` over the rows at each ``x``), one legend for all panels."""
    import seaborn as sns
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    panels = list(dict.fromkeys(data[PANEL]))
    lines = list(dict.fromkeys(data[LINE]))
    palette = dict(zip(lines, sns.color_palette(n_colors=len(lines))))
    ncols = min(len(panels), 3)
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(4.3 * ncols + 2.2, 3.3 * nrows + 0.7), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        part = data[data[PANEL] == panel]
        sns.lineplot(
            data=part,
            x=x,
            y=y,
            hue=LINE,
            hue_order=lines,
            palette=palette,
            errorbar="sd",
            marker="o",
            markersize=4,
            legend=False,
            ax=ax,
        )
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if ylim is not None:
            ax.set_ylim(*ylim)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # lengths and steps are whole numbers
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    handles = [Line2D([], [], color=palette[name], marker="o", markersize=4, label=name) for name in lines]
    fig.legend(
        handles=handles,
        title=LINE + " (mean ± sd over seeds)",
        loc="outside right center",
        fontsize=8,
        title_fontsize=8,
    )
    fig.suptitle(title, fontsize=10)
    return fig
