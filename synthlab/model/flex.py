"""Additive biases through FlexAttention (``torch.nn.attention.flex_attention``), on CUDA, opt in.

The default path adds a bias b(i, j) by handing ``scaled_dot_product_attention`` a float mask
(bias + causal -inf, a (1 | B, H, T, T) tensor) that its kernels read in full, and whose
gradient is a (B, H, T, T) tensor when the bias is learned. FlexAttention (Dong et al. 2024,
"Flex Attention: A Programming Model for Generating Optimized Attention Kernels") compiles the
bias into the attention kernel as a ``score_mod(score, b, h, q_idx, kv_idx)``: nothing of size
T x T is read or written, and a causal ``BlockMask`` skips the key blocks above the diagonal.

Each bias module that can (ALiBi, KERPLE, T5, FIRE below its threshold) gives its
``score_mod(ctx)``; the closures read small tensors (slopes, per-head parameters, a bucket table,
FIRE's MLP on the T distances), whose gradients flex's backward returns.
Used where every bias of a layer has one, the positions are the default 0..T-1, the tensors are
on a CUDA device, nothing is vmapped (batched seeds) and there is no attention dropout in
training. ``SYNTHLAB_FLEX_ATTENTION=1`` turns it on (read at each call); it is off by default
because whether it beats the float mask on a GPU has not been measured yet (the GPU
session kit times both: ``scripts/gpu_session.sh flex``). FlexAttention has no backward on CPU,
so CPU runs keep the float mask; tests check the score_mods against the biases' dense tensors
(values and gradients) and the flex forward against the float-mask path on CPU.
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
