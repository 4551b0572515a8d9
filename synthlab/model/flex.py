"""Additive biases through FlexAttention (``torch.nn.attention.flex_attention``), on CUDA, opt in.

Each bias module that can (ALiBi, KERPLE, T5, FIRE) gives a ``score_mod(ctx)``; a layer whose
biases all have one runs compiled ``flex_attention`` with a causal ``BlockMask`` instead of a
(T, T) float mask. ``SYNTHLAB_FLEX_ATTENTION=1`` turns it on (CUDA only, positions 0..T-1, no
vmap, no attention dropout in training). When it applies, why, and how it is tested:
docs/native.md, "Additive biases through FlexAttention".
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import torch

from synthlab.core.config import TRUE_WORDS

from .batched import is_batched

ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

DEVICES = ("cuda",)  # where the flex path may run (tests add "cpu" for the forward)
_compiled: Callable | None = None


def wanted() -> bool:
    """The env switch SYNTHLAB_FLEX_ATTENTION: off unless set to a true word (read at each call)."""
    return os.environ.get("SYNTHLAB_FLEX_ATTENTION", "0").strip().lower() in TRUE_WORDS


def usable(q: torch.Tensor, training_dropout: bool) -> bool:
    """Whether this call may take the flex path (the biases still have to offer score_mods)."""
    return q.device.type in DEVICES and wanted() and not training_dropout and not is_batched(q)


def total_score_mod(mods: list[ScoreMod]) -> ScoreMod:
    """The sum of several biases (a layer with two additive terms) as one score_mod."""
    if len(mods) == 1:
        return mods[0]

    def mod(score, b, h, q_idx, kv_idx):
        for m in mods:
            score = m(score, b, h, q_idx, kv_idx)
        return score

    return mod


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=64)  # one per length and device, a few KB each
def _block_mask(T: int, device: torch.device):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, None, None, T, T, device=device)


def _flex() -> Callable:
    """flex_attention, compiled on CUDA (its eager form materialises the scores: a reference
    only). One compiled function for the process; dynamo recompiles per new length and then
    marks the length dynamic."""
    global _compiled
    if _compiled is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled = torch.compile(flex_attention)
    return _compiled


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, score_mod: ScoreMod, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_h) + b) v with b given by ``score_mod``; (B, H, T, d_h) in and out."""
    T = q.shape[-2]
    mask = _block_mask(T, q.device) if causal else None
    if q.device.type == "cuda":
        return _flex()(q, k, v, score_mod=score_mod, block_mask=mask)
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)  # CPU: forward only, for the tests


def dense(mod: ScoreMod, B: int, H: int, T: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The (B, H, T, T) bias a score_mod adds to a zero score, by broadcasting its index
    arguments (what flex does element by element): how tests compare a score_mod with the
    module's own bias tensor, gradients included."""
    dev = torch.device(device)
    ar = lambda n: torch.arange(n, device=dev)  # noqa: E731
    zero = torch.zeros(B, H, T, T, device=dev)
    return mod(zero, ar(B).view(B, 1, 1, 1), ar(H).view(1, H, 1, 1), ar(T).view(1, 1, T, 1), ar(T).view(1, 1, 1, T))
