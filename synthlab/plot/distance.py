"""Pictures against distance: an encoding's content-free position signal, flip-flop read errors."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from synthlab.run.runs import rope_scaled

from .draw import WRONG, figure
from .runs import Layers, as_run, pick

# bias: the content-free position signal of an encoding


@dataclass
class BiasCurves:
    """``bias[layer]`` (H, D + 1): b(i, i - d) for d = 0..D, query i = D; ``rotary`` (D + 1,):
    <R(i) q, R(i - d) q>; ``rotary_mean``: the same averaged over query directions. ``q`` (d_h,)
    is the fixed random unit query of the rotary curve and of Shaw's relative bias."""

    pe: str
    n_heads: int
    distance: np.ndarray
    index: str  # "token" or "segment" (BiPE)
    bias: dict[int, np.ndarray]
    rotary: np.ndarray | None
    rotary_mean: np.ndarray | None
    q: np.ndarray
    initial: bool  # learned position parameters at their initialisation (built from a pe spec)


_BIAS_NAMES = (
    "alibi, t5, kerple, fire, relative, relative-capped, bipe-alibi (additive biases) and rope, xpos, "
    "bipe-rope (rotary)"
)


def _bias_model(pe_or_run: Any, max_distance: int, d_model: int, n_heads: int, seed: int) -> tuple[Any, bool]:
    """(model, built): the run's (or given) model, or a fresh seeded one for a pe spec."""
    from synthlab.run.runs import LoadedRun

    if (
        isinstance(pe_or_run, LoadedRun)
        or isinstance(pe_or_run, os.PathLike)
        or (isinstance(pe_or_run, str) and (os.sep in pe_or_run or "/" in pe_or_run or Path(pe_or_run).exists()))
    ):
        return as_run(pe_or_run).model, False
    if isinstance(pe_or_run, torch.nn.Module):  # a built model (synthlab.build_model)
        return pe_or_run, False
    if not isinstance(pe_or_run, str):
        raise ValueError(f"expected a pe spec, a loaded run or a run directory, got {type(pe_or_run).__name__}")
    from synthlab.model import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(
            pe_or_run, vocab_size=8, d_model=d_model, n_layers=1, n_heads=n_heads, max_len=max(512, max_distance + 1)
        )
    return model.eval(), True


def bias_curves(
    pe_or_run: Any, max_distance: int = 64, layers: Layers = None, seed: int = 0, d_model: int = 64, n_heads: int = 4
) -> BiasCurves:
    """The numbers :func:`bias` draws. ``pe_or_run``: a pe spec (a one-layer model of
    ``d_model`` / ``n_heads`` is built, seeded), a run, a run directory or a built model."""
    from synthlab.core.errors import MAX_DISTANCE
    from synthlab.model.attention import PositionContext
    from synthlab.model.cache import TensorCache

    if isinstance(max_distance, bool) or not isinstance(max_distance, int) or not 1 <= max_distance <= MAX_DISTANCE:
        raise ValueError(
            f"max_distance must be an integer from 1 to {MAX_DISTANCE:,} (the biases are heads x "
            f"(D + 1)^2 floats), got {max_distance!r}"
        )
    model, built = _bias_model(pe_or_run, max_distance, d_model, n_heads, seed)
    spec = model.spec
    has_bias = any(len(b.attn.biases) for b in model.blocks)
    if not (has_bias or spec.rotary):
        why = "no bias, no rotation"
        if spec.has("cope"):
            why = "CoPE's positions depend on the input: see `plot positions`"
        raise ValueError(
            f"pe {spec.name!r} has no content-free position signal to draw ({why}); `plot bias` is for {_BIAS_NAMES}"
        )
    layers = pick("layer", layers, model.n_layers)
    T, H = max_distance + 1, model.n_heads
    d_h = model.d_model // H
    index = "segment" if spec.bipe else "token"
    ar = torch.arange(T)
    # every token its own segment, so segment distance = token distance
    ctx = PositionContext(
        T,
        model.causal,
        ar,
        True,
        ar.unsqueeze(0),
        torch.zeros(1, T, dtype=torch.long),
        TensorCache(),
        torch.device("cpu"),
        torch.float32,
    )
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(d_h, generator=gen, dtype=torch.float64)
    q = (q / q.norm()).float()  # unit length: similarities in [-1, 1] for rope
    bias: dict[int, np.ndarray] = {}
    with torch.no_grad():
        for layer in layers:
            biases = model.blocks[layer].attn.biases
            if len(biases):
                qh = q.expand(1, H, T, d_h)  # Shaw's relative bias reads the query: q at every position
                total = sum(b(ctx, qh) for b in biases).expand(1, H, T, T)  # a bias may broadcast over heads
                bias[layer] = total[0, :, T - 1, T - 1 - torch.arange(T)].double().numpy()  # (H, D + 1)
        rot = rot_mean = None
        if spec.rotary:
            r = next(b.attn.rotary for b in model.blocks if b.attn.rotary is not None)
            pos = torch.arange(T)
            sims = []
            # q, then ones / sqrt(d_h): every pair's energy equal, which is the mean over directions
            for v in (q, torch.full((d_h,), d_h**-0.5)):
                x = v.expand(1, 1, T, d_h).contiguous()
                rq, rk = r(x, x, pos, False)
                sims.append((rq[0, 0, T - 1] * rk[0, 0, T - 1 - torch.arange(T)]).sum(-1).double().numpy())
            rot, rot_mean = sims
    initial = built and any(p.numel() for blk in model.blocks for b in blk.attn.biases for p in b.parameters())
    return BiasCurves(spec.name, H, np.arange(T), index, bias, rot, rot_mean, q.double().numpy(), initial)


def bias(
    pe_or_run: Any,
    max_distance: int = 64,
    layers: Layers = None,
    heads: Layers = None,
    seed: int = 0,
    d_model: int = 64,
    n_heads: int = 4,
) -> Any:
    """An encoding's position signal as a function of distance d = i - j, content aside.

    Additive biases (alibi, t5, kerple, fire, relative, bipe-alibi): one panel per layer,
    a line per head, the bias b(i, j) added to the logit of query i = max_distance for the key
    d tokens back (for relative, q . e[d] / sqrt(d_h) with a fixed random unit q). Lower =
    less attention to that distance: ALiBi's straight lines -m_h d, T5's steps per bucket,
    KERPLE's log curves. Rotary (rope, xpos, bipe-rope): <R(i) q, R(i - d) q> for a fixed
    random unit q (solid; 1 at d = 0) and averaged over directions (dashed): how much a key
    matching the query still scores d tokens away. BiPE: d counts segments. From a pe spec
    the learned encodings show their initialisation (pass a run for trained values).
    DAPE's processing of the logits is not drawn (it reads them). CoPE, NoPE, absolute
    encodings: ValueError (nothing content-free to draw).
    """
    data = bias_curves(pe_or_run, max_distance, layers, seed, d_model, n_heads)
    if heads is not None and not data.bias:
        raise ValueError("the rotary similarity is the same for every head: leave out heads")
    chosen = pick("head", heads, data.n_heads)
    panels = [("bias", layer) for layer in data.bias] + ([("rotary", None)] if data.rotary is not None else [])
    fig = figure(7.0, 3.2 * len(panels) + 0.6)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    unit = "segments" if data.index == "segment" else "tokens"
    for ax, (kind, layer) in zip(axes, panels):
        if kind == "bias":
            assert layer is not None, "a bias panel has its layer"
            curves = data.bias[layer]
            for h in chosen:
                ax.plot(data.distance, curves[h], label=f"head {h}")
            ax.set_ylabel("bias b(i, i - d)")
            ax.set_title(f"layer {layer}: additive bias per head")
            ax.legend(fontsize="small", ncol=2)
        else:
            ax.plot(data.distance, data.rotary, label="fixed random unit q = k")
            ax.plot(data.distance, data.rotary_mean, "--", label="mean over directions")
            ax.axhline(0.0, color="0.7", lw=0.8)
            ax.set_ylabel("<R(i) q, R(i - d) q>")
            ax.set_title("rotary similarity of a query with itself d back")
            ax.legend(fontsize="small")
        ax.set_xlabel(f"distance d = i - j ({unit})")
        ax.set_xlim(0, data.distance[-1])
    fig.suptitle(f"{data.pe}: position signal vs distance" + (" (untrained: initial values)" if data.initial else ""))
    return fig


# glitches: flip-flop read errors by distance to the last write


@dataclass
class Glitches:
    """Read errors of a flip-flop split bucketed by distance (tokens) from each read to the last write."""

    pe: str
    split: str
    n_samples: int
    edges: np.ndarray  # (K + 1,) bucket k holds edges[k] <= distance < edges[k + 1]
    reads: np.ndarray  # (K,) reads per bucket
    errors: np.ndarray  # (K,) wrong reads per bucket
    distance: np.ndarray  # (R,) every read's distance, samples in order
    wrong: np.ndarray  # (R,) bool

    @property
    def error_rate(self) -> np.ndarray:
        """(K,) errors / reads, NaN for a bucket with no read."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.reads > 0, self.errors / np.maximum(self.reads, 1), np.nan)

    @property
    def labels(self) -> list[str]:
        return [f"{lo}" if hi - lo == 1 else f"{lo}-{hi - 1}" for lo, hi in zip(self.edges[:-1], self.edges[1:])]


def glitch_rates(
    run: Any, split: str = "ood-sparse", n: int | None = None, edges: Sequence[int] | None = None
) -> Glitches:
    """The numbers :func:`glitches` draws: samples 0..n-1 of ``split`` (default n: the run's
    eval_samples, so the totals are the run's read error on that split), teacher-forced; a
    read is wrong when the argmax at the ``r`` token is not the bit last written. Buckets:
    ``edges`` (increasing), default powers of two 2, 4, 8, .. past the sequence length."""
    from synthlab.run.data import pad_ids

    run = as_run(run)
    task = run.task
    if task.family != "flipflop":
        raise ValueError(f"glitches are drawn for flip-flop runs only; this run's task is {task.name!r}")
    task.check_split(split)
    n = int(run.config["train"]["eval_samples"]) if n is None else n
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of samples, got {n!r}")
    samples = task.sample(split, int(n), seed=int(run.config["train"]["seed"]))
    T = max(len(s.ids) for s in samples)
    e = np.asarray(edges if edges is not None else 2 ** np.arange(1, max(2, math.ceil(math.log2(T))) + 1))
    if e.ndim != 1 or len(e) < 2 or not np.issubdtype(e.dtype, np.integer) or np.any(np.diff(e) <= 0):
        raise ValueError(f"edges must be at least two increasing integers, got {edges!r}")
    w_id, pad = task.token_id("w"), len(task.vocab)
    dist, wrong = [], []
    size = int(run.config["train"].get("eval_batch_size") or 64)
    with torch.no_grad():
        for start in range(0, len(samples), size):
            chunk = samples[start : start + size]
            ids, _ = pad_ids([s.ids for s in chunk], pad)
            with rope_scaled(run, ids.shape[1]):
                pred = run.model(torch.from_numpy(ids)).argmax(-1).numpy()  # (B, T)
            for b, s in enumerate(chunk):
                t = np.arange(len(s.ids))
                last_w = np.maximum.accumulate(np.where(s.ids == w_id, t, 0))  # the first instruction is a write
                dist.append(s.scored - last_w[s.scored])
                wrong.append(pred[b, s.scored] != s.target_ids)
    d, w = np.concatenate(dist).astype(np.int64), np.concatenate(wrong).astype(bool)
    k = np.searchsorted(e, d, side="right") - 1  # bucket of each read; outside the edges: none
    inside = (k >= 0) & (k < len(e) - 1)
    reads = np.bincount(k[inside], minlength=len(e) - 1)
    errors = np.bincount(k[inside], weights=w[inside], minlength=len(e) - 1).astype(np.int64)
    return Glitches(run.config["pe"], split, len(samples), e, reads, errors, d, w)


def glitches(run: Any, split: str = "ood-sparse", n: int | None = None, edges: Sequence[int] | None = None) -> Any:
    """Flip-flop attention glitches: read error by distance from the read to the last write.

    Each bar is a bucket of reads whose last ``w`` lies that many tokens back (2-3, 4-7, ...),
    its height the share of those reads answered wrongly (teacher-forced), its label
    wrong / reads. A model that finds the last write wherever it is has flat, low bars; one
    that glitches on long gaps (token-index encodings on ood-sparse) has bars rising with
    distance. Flip-flop runs only (ValueError otherwise)."""
    g = glitch_rates(run, split, n, edges)
    rate = 100 * g.error_rate
    fig = figure(max(5.0, 0.9 * len(rate) + 2.5), 4.0)
    ax = fig.subplots()
    x = np.arange(len(rate))
    bars = ax.bar(x, np.nan_to_num(rate), color=WRONG, alpha=0.8)
    ax.bar_label(bars, [f"{e}/{r}" if r else "no reads" for e, r in zip(g.errors, g.reads)], fontsize="small")
    ax.set_xticks(x, g.labels)
    ax.set_xlabel("distance from the read to the last write (tokens)")
    ax.set_ylabel("read error (%)")
    top = np.nanmax(rate) if np.isfinite(rate).any() else 0.0
    ax.set_ylim(0, max(5.0, min(110.0, 1.2 * top + 2)))
    total = f"{int(g.wrong.sum())}/{len(g.wrong)} reads wrong"
    ax.set_title(f"{g.pe} · {g.split} ({g.n_samples} samples): {total}")
    return fig
