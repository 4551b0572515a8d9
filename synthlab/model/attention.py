"""Multi-head self-attention that applies indices -> encoders -> processors.

``Attention.forward`` is SDPA or materialise: ``F.scaled_dot_product_attention`` (is_causal=True,
or a float mask = additive bias + causal -inf; FlexAttention where switched on, ``flex.py``)
whenever the scores need no (B, H, T, T) term of their own; else S = q k^T / sqrt(d_h) is
materialised, changed by CoPE / DAPE through their dispatchers (``native/``), softmax, times v.

Hook points (docs/inspection.md): a forward given an ``activations`` dict (``ctx.activations``)
takes the materialised path and writes q, k, v, scores, pattern and CoPE's gates and positions
into it under this layer's name (``blocks.<i>.attn``); without one nothing is kept.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import flex
from .batched import is_batched
from .cache import TensorCache
from .encoders.bias import ALiBi
from .encoders.contextual import CoPE
from .encoders.rotary import Rotary
from .processors import DAPE


class PositionContext:
    """What the position components of one forward pass may read.

    positions: token indices (T,) or (B, T); segments / intra: BiPE ids (B, T) or None.
    ``memoize`` caches length-only tensors across forwards in the model's cache when the
    index is the default 0..T-1 (``cacheable``), else for this forward only (shared by layers).
    ``activations``: the dict the hook points write into (:meth:`keep`), or None.
    """

    def __init__(
        self,
        T: int,
        causal: bool,
        positions: torch.Tensor,
        default_positions: bool,
        segments: torch.Tensor | None,
        intra: torch.Tensor | None,
        cache: TensorCache,
        device: torch.device,
        dtype: torch.dtype,
        activations: dict[str, torch.Tensor] | None = None,
    ):
        self.T, self.causal, self.device, self.dtype = T, causal, device, dtype
        self.activations = activations
        self._index = {"token": positions, "segment": segments, "intra": intra}
        self._cacheable = {"token": default_positions, "segment": False, "intra": False}
        self._cache = cache
        self._memo: dict = {}

    def pos(self, index: str) -> torch.Tensor:
        t = self._index[index]
        if t is None:
            raise ValueError(f"this encoding needs {index} ids but none were derived")
        return t

    def keep(self, name: str, tensor: torch.Tensor) -> None:
        """A hook point: ``tensor`` stored under ``name`` when this forward keeps activations."""
        if self.activations is not None:  # a copy: the forward masks some tensors in place afterwards
            self.activations[name] = tensor.detach().clone()

    def cacheable(self, index: str) -> bool:
        return self._cacheable[index]

    def memoize(self, key: tuple, index: str, fn: Callable[[], Any]) -> Any:
        if self._cacheable[index]:
            return self._cache.get((*key, self.T, self.causal, self.device, self.dtype), fn)
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def rel(self, index: str) -> torch.Tensor:
        """p_i - p_j, (T, T) or (B, T, T) long."""

        def make():
            p = self.pos(index)
            return p.unsqueeze(-1) - p.unsqueeze(-2)

        return self.memoize(("rel", index), index, make)

    def absrel(self, index: str) -> torch.Tensor:
        """|p_i - p_j| as float, (T, T) or (B, T, T)."""
        return self.memoize(("absrel", index), index, lambda: self.rel(index).abs().to(self.dtype))

    @property
    def future(self) -> torch.Tensor:
        """(T, T) bool, True above the diagonal (keys after the query)."""
        T, dev = self.T, self.device
        return self._cache.get(("future", T, dev), lambda: torch.ones(T, T, dtype=torch.bool, device=dev).triu(1))

    def apply_mask(self, bias: torch.Tensor) -> torch.Tensor:
        """bias + (-inf above the diagonal) in causal mode; bias unchanged otherwise."""
        return bias.masked_fill(self.future, float("-inf")) if self.causal else bias


def _sdpa_backend(q: torch.Tensor) -> Any:
    """SDPA's math backend under vmap (batched seeds, ``stacked.py``), its own choice otherwise.
    The fused kernels have no batching rule: the CPU flash kernel runs seed by seed (and has no
    gradient for a learned bias, one per seed, which reads requires_grad False inside vmap), and
    vmap over the CUDA flash kernel failed on an H100 ("LSE is not correctly aligned"); the math
    backend is matmuls and a softmax, which batch."""
    return sdpa_kernel(SDPBackend.MATH) if is_batched(q) else contextlib.nullcontext()


class Attention(nn.Module):
    """Self-attention with pluggable position components (built by the transformer)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float,
        causal: bool,
        n_layers: int,
        rotary: Rotary | None = None,
        biases: list[nn.Module] | None = None,
        cope: CoPE | None = None,
        dape: DAPE | None = None,
    ):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.n_heads, self.head_dim, self.causal, self.dropout = n_heads, d_model // n_heads, causal, dropout
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        nn.init.normal_(self.c_attn.weight, std=0.02)
        nn.init.zeros_(self.c_attn.bias)
        nn.init.normal_(self.c_proj.weight, std=0.02 / math.sqrt(2 * n_layers))
        nn.init.zeros_(self.c_proj.bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.rotary = rotary
        self.biases = nn.ModuleList(biases or [])
        self.cope = cope
        self.dape = dape
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.name = "attn"  # its hook points' prefix; the transformer names it blocks.<i>.attn
        # a (B, H, T, T) bias that depends on the queries (Shaw relative) is cheaper materialised
        # than through scaled_dot_product_attention's masked math path (measured on CPU)
        self._query_bias = any(getattr(b, "needs_queries", False) for b in self.biases)
        self._cope_alone = cope is not None and not self.biases and dape is None  # CoPE's fused kernels apply

    def qkv(self, x: torch.Tensor, ctx: PositionContext) -> tuple[torch.Tensor, ...]:
        """(q_raw, k_raw, q, k, v), each (B, H, T, d_h): the heads' content queries and keys,
        the same after the rotary encoder (unchanged without one), and the values. The one
        place they are made; ``synthlab.plot`` reads them here too."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d_h)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        q_raw, k_raw = q, k  # content query: CoPE's and Shaw's position terms q . e[.] stay relative under RoPE
        if self.rotary is not None:
            idx = self.rotary.index
            q, k = self.rotary(q, k, ctx.pos(idx), ctx.cacheable(idx))
        return q_raw, k_raw, q, k, v

    def forward(self, x: torch.Tensor, ctx: PositionContext, return_attention: bool = False):
        """x (B, T, C) -> (y (B, T, C), the attention weights (B, H, T, T) or None where none
        were made). SDPA where the scores need no (B, H, T, T) term of their own; else the
        scores materialised, changed by the position components, softmax, times v."""
        B, T, C = x.shape
        q_raw, _, q, k, v = self.qkv(x, ctx)
        weights = return_attention or ctx.activations is not None  # the hook points need the maps
        if weights or self.cope is not None or self.dape is not None or self._query_bias:
            y, att = self._materialised(x, ctx, q_raw, q, k, v, weights)
        else:
            y, att = self._sdpa(ctx, q_raw, q, k, v), None
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y, att

    def _sdpa(self, ctx: PositionContext, q_raw, q, k, v) -> torch.Tensor:
        """F.scaled_dot_product_attention (B, H, T, d_h), an additive bias as its float mask
        (bias + causal -inf), or through FlexAttention where switched on (``flex.py``, CUDA)."""
        p = self.dropout if self.training else 0.0
        if not self.biases:
            with _sdpa_backend(q):
                return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        if flex.usable(q, training_dropout=p > 0) and (mod := self._score_mod(ctx)) is not None:
            return flex.attend(q, k, v, mod, self.causal)
        if len(self.biases) == 1 and isinstance(self.biases[0], ALiBi):
            mask = self.biases[0].masked(ctx)  # cached bias + causal mask
        else:
            mask = ctx.apply_mask(self._bias(ctx, q_raw))
        with _sdpa_backend(q):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), dropout_p=p)

    def _materialised(
        self, x: torch.Tensor, ctx: PositionContext, q_raw, q, k, v, weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """softmax(S + the position terms) v with S = q k^T / sqrt(d_h) (B, H, T, T): (y, att)."""
        if self._cope_alone and not weights and not (self.training and self.dropout > 0):
            assert self.cope is not None, "a CoPE layer"  # its fused kernels make no (T, T) tensor at all
            return self.cope.attend(q_raw, q, k, v, x, ctx.future, self.scale), None
        S = (q * self.scale) @ k.transpose(-2, -1)  # (B, H, T, T); scaling q touches T x d_h values, not T x T
        if ctx.activations is not None:
            self._keep(ctx, q_raw, q, k, v, S, x)
        add = self._bias(ctx, q_raw) if self.biases else None
        if self._cope_alone:  # term, mask and softmax fused where a kernel applies
            assert self.cope is not None, "a CoPE layer"
            att = self.cope.attention(q_raw, S, x, ctx.future)  # (B, H, T, T)
        else:
            if self.cope is not None:
                term = self.cope(q_raw, S, x, ctx.future)
                add = term if add is None else add + term
            if (
                self.dape is not None
            ):  # softmax of the masked logits (the native kernel fuses mask and softmax backward)
                att = self.dape.attention(S, add, ctx.future if self.causal else None)  # (B, H, T, T)
            else:
                A = S if add is None else S + add
                if self.causal:  # in place: A is a fresh tensor whose producer's backward does not need it
                    A = A.masked_fill_(ctx.future, float("-inf"))
                att = F.softmax(A, dim=-1)  # (B, H, T, T)
        ctx.keep(f"{self.name}.pattern", att)
        return self.attn_dropout(att) @ v, att  # (B, H, T, d_h)

    def _keep(self, ctx: PositionContext, q_raw, q, k, v, S, x) -> None:
        """The layer's hook points before the softmax (docs/inspection.md has their shapes)."""
        for what, t in (("q", q), ("k", k), ("v", v), ("scores", S)):
            ctx.keep(f"{self.name}.{what}", t)
        if self.cope is not None:  # recomputed here: the fused kernels never materialise them
            gates, positions = self.cope.gates_positions(q_raw, S, x, ctx.future)
            ctx.keep(f"{self.name}.cope.gates", gates)
            ctx.keep(f"{self.name}.cope.positions", positions.masked_fill(ctx.future, 0.0))  # future: rounding, unused

    def _score_mod(self, ctx: PositionContext) -> flex.ScoreMod | None:
        """The layer's biases as one FlexAttention score_mod, or None if one of them has none."""
        mods = [cast(Any, b).score_mod(ctx) if hasattr(b, "score_mod") else None for b in self.biases]
        return None if any(m is None for m in mods) else flex.total_score_mod([m for m in mods if m is not None])

    def _bias(self, ctx: PositionContext, q: torch.Tensor) -> torch.Tensor:
        total = None
        for b in self.biases:
            t = b(ctx, q)
            total = t if total is None else total + t
        assert total is not None, "a layer with biases has one at least"
        return total.to(q.dtype)
