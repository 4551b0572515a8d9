"""Drawing helpers shared by the pictures: figures without pyplot, token axes, scored rows."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

MAX_TICKS = 64  # token labels per axis; longer sequences label every k-th token
RIGHT, WRONG = "tab:green", "tab:red"


def figure(w: float, h: float) -> Any:
    """A w x h inch Figure (capped), constrained layout, not registered with pyplot."""
    from matplotlib.figure import Figure  # no pyplot: nothing global, any backend

    return Figure(figsize=(min(w, 40.0), min(h, 60.0)), layout="constrained")


def panel_side(T: int) -> float:
    """Inches per side of a T x T map: room for T token labels."""
    return float(np.clip(0.1 * T + 1.5, 3.0, 12.0))


def _ticks(tokens: Sequence[str]) -> tuple[list[int], list[str]]:
    stride = max(1, math.ceil(len(tokens) / MAX_TICKS))
    idx = list(range(0, len(tokens), stride))
    return idx, [tokens[i] for i in idx]


def token_axes(
    ax: Any, xtokens: Sequence[str], ytokens: Sequence[str] | None, xlabel: str = "", ylabel: str = ""
) -> None:
    """Token strings on the axes (every k-th when there are more than MAX_TICKS)."""
    size = 7 if len(xtokens) <= 40 else 6
    idx, labels = _ticks(xtokens)
    ax.set_xticks(idx, labels, fontsize=size, rotation=90)
    ax.set_xlabel(xlabel)
    if ytokens is not None:
        idx, labels = _ticks(ytokens)
        ax.set_yticks(idx, labels, fontsize=size)
        ax.set_ylabel(ylabel)


def mark_scored(ax: Any, scored: np.ndarray, right: np.ndarray | None, T: int) -> None:
    """Scored query rows: a triangle just right of the map, and their row labels coloured
    (green right / red wrong; black where correctness is not drawn)."""
    if not len(scored):
        return
    colours = ["k"] * len(scored) if right is None else [RIGHT if r else WRONG for r in right]
    ax.scatter(np.full(len(scored), T - 0.1), scored, marker="<", s=14, c=colours, clip_on=False, zorder=3)
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(T - 0.5, -0.5)
    rows = dict(zip((int(s) for s in scored), colours))
    for tick, label in zip(ax.get_yticks(), ax.get_yticklabels()):
        if int(tick) in rows:
            label.set_color(rows[int(tick)])
            label.set_fontweight("bold")
