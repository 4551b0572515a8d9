"""Absolute encoders: a vector per index added to the token embeddings, x_p = wte(token_p) + e(p)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..batched import plain
from ..registry import BuildConfig


class Sinusoidal(nn.Module):
    """Vaswani et al. 2017: pe[p, 2k] = sin(p / base^(2k/d)), pe[p, 2k+1] = cos(same).

    Its RMS is sqrt(1/2) whatever d is, so the token embeddings it is added to are multiplied
    by sqrt(d) (``scales_tokens``; Vaswani Sec. 3.4, and the CHE reference,
    google-deepmind/neural_networks_chomsky_hierarchy models/transformer.py,
    TransformerEncoder.__call__: ``embeddings *= jnp.sqrt(embedding_dim)``, init std 0.02):
    token : position RMS = 0.02 sqrt(2 d) at init (0.23 at d = 64), instead of 0.02 / sqrt(1/2)
    (1 : 35) unscaled, when the position signal swamps the tokens."""

    scales_tokens = True
    inv_freq: torch.Tensor

    @classmethod
    def build(cls, cfg: BuildConfig) -> "Sinusoidal":
        return cls(cfg.d_model, cfg.params["base"])

    def __init__(self, d_model: int, base: float = 10000.0):
        super().__init__()
        inv = torch.exp(-math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
        self.register_buffer("inv_freq", inv, persistent=False)  # (ceil(d/2),)
        self.d_model = d_model

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        """index (T,) or (B, T) -> (T, d) or (B, T, d)."""
        ang = index.to(self.inv_freq.dtype).unsqueeze(-1) * self.inv_freq  # (..., T, d/2)
        pe = torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(-2)  # interleave sin, cos
        return pe[..., : self.d_model]


class Learned(nn.Module):
    """Learned table of ``rows`` position embeddings, e(p) = E[p] (Gehring et al. 2017; Radford
    et al. 2018, GPT). An index past the table raises ValueError (never a silent clamp). BiPE
    (He et al. 2024) uses one on the intra-segment index.

    Initialised like the token embeddings (std 0.02), so the two signals start 1 : 1 and the
    token embeddings are not rescaled (GPT-2 / nanoGPT add ``wte + wpe`` as is)."""

    scales_tokens = False
    takes_bound = True  # forward(index, bound=...): the model passes an upper bound when it knows one

    @classmethod
    def build(cls, cfg: BuildConfig) -> "Learned":
        return cls(cfg.d_model, cfg.max_len, what="intra-segment position" if cfg.index == "intra" else "position")

    def __init__(self, d_model: int, rows: int, what: str = "position"):
        super().__init__()
        self.table = nn.Embedding(rows, d_model)
        nn.init.normal_(self.table.weight, std=0.02)
        self.rows = rows
        self.what = what

    def forward(self, index: torch.Tensor, bound: int | None = None) -> torch.Tensor:
        """index (T,) or (B, T) -> (T, d) or (B, T, d). ``bound``: an upper bound of the index
        when the model knows one (T - 1 for positions 0..T-1 and for BiPE's intra-segment
        index); inside the table, the index itself is not read (a host sync on a GPU)."""
        if bound is not None and bound < self.rows:
            return self.table(index)
        hi = int(plain(index).max()) if index.numel() else 0  # plain(): under vmap, every slice's indices
        if hi >= self.rows:
            raise ValueError(
                f"learned {self.what} table has {self.rows} rows (max_len) but {self.what} {hi} was requested; "
                f"raise max_len to at least {hi + 1}"
            )
        return self.table(index)
