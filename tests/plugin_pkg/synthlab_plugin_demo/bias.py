"""The plugin encoding's module: b(i, j) = -w |i - j| (ALiBi with one learned slope)."""

from __future__ import annotations

import torch
import torch.nn as nn


class LinearDistanceBias(nn.Module):
    """b(i, j) = -w |i - j|, one learned scalar w (initial value the row's ``w0``), every head alike."""

    @classmethod
    def build(cls, cfg) -> "LinearDistanceBias":  # cfg: synthlab.model.registry.BuildConfig
        return cls(cfg.n_heads, cfg.params["w0"])

    def __init__(self, n_heads: int, w0: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.w = nn.Parameter(torch.tensor(float(w0)))

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        dist = ctx.absrel("token")  # (T, T) or (B, T, T)
        bias = (-self.w * dist).unsqueeze(-3)  # (1, T, T) or (B, 1, T, T)
        bias = bias if bias.dim() == 4 else bias.unsqueeze(0)  # (1|B, 1, T, T)
        return bias.expand(bias.shape[0], self.n_heads, ctx.T, ctx.T)  # (1|B, H, T, T)
