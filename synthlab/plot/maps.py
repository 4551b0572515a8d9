"""Attention maps and input-dependent positions (CoPE gates / positions, BiPE ids) of one sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .draw import figure, mark_scored, panel_side, token_axes
from .runs import Layers, as_run, pick, resolve_sample


@dataclass
class AttentionMaps:
    """One sample's attention: ``maps`` (L, H, T, T), row i = query i, column j = key j."""

    tokens: list[str]
    scored: np.ndarray  # (S,) scored positions
    right: np.ndarray  # (S,) bool: the prediction there is the target
    maps: np.ndarray  # (L, H, T, T)
    title: str


def attention_maps(run: Any, sample: Any, split: str = "test") -> AttentionMaps:
    """The attention maps of every layer and head for one sample (see :func:`attention`): the
    ``blocks.<i>.attn.pattern`` hook points of :meth:`LoadedRun.run_with_cache`. ``sample`` may
    also be tokens of one's own (a text or a list of tokens; nothing is scored then)."""
    run = as_run(run)
    s = resolve_sample(run, sample, split)
    logits, cache = run.run_with_cache(s)
    maps = torch.stack([cache[f"blocks.{i}.attn.pattern"][0] for i in range(run.model.n_layers)])
    scored = np.asarray(s.scored, dtype=np.int64)
    # teacher-forced, as evaluation scores it (CHE's placeholder targets are not inputs: the same holds)
    right = logits[0, torch.as_tensor(scored, dtype=torch.long)].argmax(-1).numpy() == np.asarray(s.target_ids)
    return AttentionMaps(s.tokens, scored, right, maps.double().numpy(), _title(run, s))


def _title(run: Any, s: Any) -> str:
    return f"{run.config['pe']} · " + ("your tokens" if s.split == "tokens" else f"{s.split} sample {s.index}")


def attention(run: Any, sample: Any, layers: Layers = None, heads: Layers = None, split: str = "test") -> Any:
    """Attention maps of one sample: a panel per (layer, head), rows = layers, columns = heads.

    Row i is the query at position i, column j the key at position j; colour is the weight
    a_ij (0 white .. 1 dark on a square-root scale, so weak weights stay visible; each row
    sums to 1, causal models leave the right of the diagonal empty). Both axes carry the
    tokens. Scored positions (flip-flop: the reads) are marked at the right edge and in the row
    labels: green where the model's prediction is right, red where it is wrong, so a glitch is
    a red row whose weight sits on the wrong key.
    """
    from matplotlib.colors import PowerNorm

    data = attention_maps(run, sample, split)
    L, H, T, _ = data.maps.shape
    layers, heads = pick("layer", layers, L), pick("head", heads, H)
    side = panel_side(T)
    fig = figure(len(heads) * side + 1.0, len(layers) * side + 0.6)
    axes = fig.subplots(len(layers), len(heads), squeeze=False)
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r][c]
            im = ax.imshow(
                data.maps[layer, head], cmap="Blues", norm=PowerNorm(0.5, vmin=0.0, vmax=1.0), interpolation="nearest"
            )
            token_axes(ax, data.tokens, data.tokens, xlabel="key", ylabel="query")
            mark_scored(ax, data.scored, data.right, T)
            ax.set_title(f"layer {layer} · head {head}")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight")
    fig.suptitle(f"{data.title}: attention (rows: queries; marks: scored, green right / red wrong)")
    return fig


@dataclass
class CopePositions:
    """CoPE's gates ``gates`` (L, H, T, T) and positions ``positions`` (L, H, T, T); 0 above the diagonal."""

    tokens: list[str]
    scored: np.ndarray
    gates: np.ndarray
    positions: np.ndarray
    npos: int
    title: str


def cope_positions(run: Any, sample: Any, split: str = "test") -> CopePositions:
    """CoPE's g_ij = sigmoid(q_i . k_j / sqrt(d_h)) (future keys 0) and p_ij = sum_{t=j..i} g_it,
    clamped to npos - 1 as the model clamps it: the ``blocks.<i>.attn.cope.gates`` and
    ``.positions`` hook points (:meth:`LoadedRun.run_with_cache`; the gates read q, k after a
    rotary encoder when the spec has one, or CoPE's separate gate keys with ``sep_keys``)."""
    run = as_run(run)
    model = run.model
    if not model.spec.has("cope"):
        raise ValueError(f"pe {model.pe!r} has no CoPE: contextual positions exist for cope and cope-alibi")
    s = resolve_sample(run, sample, split)
    _, cache = run.run_with_cache(s)
    layers = range(model.n_layers)
    gates = np.stack([cache[f"blocks.{i}.attn.cope.gates"][0].double().numpy() for i in layers])
    pos = np.stack([cache[f"blocks.{i}.attn.cope.positions"][0].double().numpy() for i in layers])
    npos = model.blocks[0].attn.cope.npos
    return CopePositions(s.tokens, np.asarray(s.scored), gates, pos, npos, _title(run, s))


@dataclass
class BipeIds:
    """BiPE's ``segments`` (T,) and ``intra`` (T,) ids of one sample."""

    tokens: list[str]
    segments: np.ndarray
    intra: np.ndarray
    title: str


def bipe_ids(run: Any, sample: Any, split: str = "test") -> BipeIds:
    """BiPE's segment id and index within the segment of every token, as the model derives
    them (the ``bipe.segments`` / ``bipe.intra`` hook points; the run's separators / segment starts)."""
    run = as_run(run)
    model = run.model
    if not model.spec.bipe:
        raise ValueError(f"pe {model.pe!r} has no BiPE: segment ids exist for bipe-rope, bipe-alibi")
    s = resolve_sample(run, sample, split)
    _, cache = run.run_with_cache(s)
    return BipeIds(s.tokens, cache["bipe.segments"][0].numpy(), cache["bipe.intra"][0].numpy(), _title(run, s))


def positions(run: Any, sample: Any, layers: Layers = None, heads: Layers = None, split: str = "test") -> Any:
    """The positions an input-dependent encoding computes for one sample.

    CoPE (a row of two panels per layer and head): left, the gates g_ij in [0, 1], whether key
    j counts for query i; right, the contextual position p_ij = sum of the gates from j to i,
    how far back j is in counted tokens (the model looks up a position embedding at p_ij).
    A head that counts only some tokens (say flip-flop's writes) shows p rising in steps
    at those tokens only, where token distance i - j rises at every token.
    BiPE: the segment id (a step at each segment start) and the index within the segment
    (back to 0 there) of every token. Other encodings: ValueError.
    """
    run = as_run(run)
    spec = run.model.spec
    if not (spec.has("cope") or spec.bipe):
        raise ValueError(
            f"pe {spec.name!r} has no input-dependent positions to draw; `plot positions` is for "
            "cope, cope-alibi (gates and positions) and bipe-rope, bipe-alibi (segment ids)"
        )
    cope = cope_positions(run, sample, split) if spec.has("cope") else None
    bipe = bipe_ids(run, sample, split) if spec.bipe else None
    pairs: list[tuple[int, int]] = []
    if cope is None and (layers is not None or heads is not None):
        raise ValueError("BiPE's ids are one per token, not per layer or head: leave out layers / heads")
    if cope is not None:
        L, H = cope.gates.shape[:2]
        pairs = [(layer, h) for layer in pick("layer", layers, L) for h in pick("head", heads, H)]
    T = len((cope or bipe).tokens)  # type: ignore[union-attr]
    side = panel_side(T)
    strip = 2.4 if bipe is not None else 0.0
    width = 2 * side + 1.6 if pairs else max(6.0, 0.22 * min(T, 64) + 2)
    fig = figure(width, len(pairs) * side + strip + 0.6)
    heights = [side] * len(pairs) + ([strip] if bipe is not None else [])
    grid = fig.add_gridspec(len(heights), 2, height_ratios=heights)
    for r, (layer, head) in enumerate(pairs):
        assert cope is not None, "pairs are CoPE's layers and heads"
        ax_g, ax_p = fig.add_subplot(grid[r, 0]), fig.add_subplot(grid[r, 1])
        im_g = ax_g.imshow(cope.gates[layer, head], cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        im_p = ax_p.imshow(
            np.ma.masked_where(np.triu(np.ones((T, T), bool), 1), cope.positions[layer, head]),
            cmap="viridis",
            vmin=0,
            interpolation="nearest",
        )
        for ax, what in ((ax_g, "gates g_ij"), (ax_p, "positions p_ij")):
            token_axes(ax, cope.tokens, cope.tokens, xlabel="key j", ylabel="query i")
            mark_scored(ax, cope.scored, None, T)
            ax.set_title(f"layer {layer} · head {head}: {what}")
        fig.colorbar(im_g, ax=ax_g, shrink=0.7)
        fig.colorbar(im_p, ax=ax_p, shrink=0.7)
    if bipe is not None:
        ax = fig.add_subplot(grid[len(pairs), :])
        x = np.arange(T)
        ax.step(x, bipe.segments, where="mid", label="segment id")
        ax.step(x, bipe.intra, where="mid", label="index within segment")
        ax.set_xlim(-0.5, T - 0.5)
        token_axes(ax, bipe.tokens, None, xlabel="token")
        ax.legend(loc="upper left", fontsize="small")
        ax.set_title("BiPE ids")
    fig.suptitle(f"{(cope or bipe).title}: positions")  # type: ignore[union-attr]
    return fig
