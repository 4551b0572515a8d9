"""Logit processors (axis 3 of docs/architecture.md): DAPE and DAPE V2 (1 x k convolutions)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .native import dape as native_dape
from .registry import BuildConfig


class DAPE(nn.Module):
    """DAPE (Zheng et al. 2024) and DAPE V2 (Sec. 3.3, App. L).

    A = S + B + f([S, B]): f maps the per-(i, j) vector of heads [S, B] (2H channels; H with
    no bias, e.g. nope / rope) to H channels through two convolutions of kernel (1, k) along
    the key axis with a LeakyReLU between, hidden width D (32). k = 1 is DAPE (an MLP across
    heads); k > 1 is DAPE V2 (stride 1, same padding k // 2). In causal mode the input is
    zeroed above the diagonal once, before the first convolution (Eq. 5, f(tril([S, B])); App. L;
    the authors' code: chuanyang-Zheng/DAPE, megatron/model/positional_embeddings.py,
    Kerple_DAPEV2.forward, ``self.mlp2(torch.tril(x_a_bias))``). Each convolution runs along one
    query row, whose inputs past i are then zero, so no future score reaches a past query; the
    hidden map is not zeroed: the second convolution at (i, j) reads the hidden values (i, i+1 ..
    j+c), LeakyReLU of conv1's bias and row i's last inputs. f sees the finite pre-mask scores.
    In encoder mode (``causal=False``) nothing is zeroed: the convolutions run along each whole
    row of the T x T map. DAPE V2 reports CHE (Table 6) in Ruoss et al.'s setting, a
    bidirectional encoder; its released code has only the causal form, so this is synthlab's
    reading of App. L without the mask.

    ``forward_full`` is the reference: the formula on the whole T x T map. ``forward`` (A) and
    ``attention`` (softmax(A), what the attention layer calls) go through the dispatchers of
    ``native/dape.py``: the C++ kernel on float32 CPU operands (the convolutions on the lower
    triangle only, fused with the LeakyReLU), the Triton kernels on CUDA with
    ``SYNTHLAB_DAPE_TRITON=1``, in causal mode elsewhere the packed GEMMs (``native/dape_packed.py``),
    else the reference.
    """

    @classmethod
    def build(cls, cfg: BuildConfig) -> "DAPE":
        return cls(
            cfg.n_heads, with_bias=cfg.scores_bias, hidden=cfg.params["hidden"], k=cfg.params["k"], causal=cfg.causal
        )

    def __init__(self, n_heads: int, with_bias: bool, hidden: int = 32, k: int = 1, causal: bool = True):
        super().__init__()
        if k % 2 == 0 or k < 1:
            raise ValueError(f"dape:k={k} must be an odd integer >= 1")
        c_in = 2 * n_heads if with_bias else n_heads
        self.k, self.causal, self.with_bias = k, causal, with_bias
        self.conv1 = nn.Conv2d(c_in, hidden, kernel_size=(1, k), padding=(0, k // 2))
        self.conv2 = nn.Conv2d(hidden, n_heads, kernel_size=(1, k), padding=(0, k // 2))

    def _inputs(self, S: torch.Tensor, bias: torch.Tensor | None):
        if self.with_bias:
            if bias is None:
                raise ValueError("dape was built for a bias but got none")
            return S + bias
        return S

    def _operands(
        self, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The dispatchers' operands after S: the bias where f reads one, the four weights."""
        if self.with_bias and bias is None:
            raise ValueError("dape was built for a bias but got none")
        b1, b2 = self.conv1.bias, self.conv2.bias
        assert b1 is not None and b2 is not None, "DAPE's convolutions have biases"
        return bias if self.with_bias else None, self.conv1.weight, b1, self.conv2.weight, b2

    def forward(self, S: torch.Tensor, bias: torch.Tensor | None, future: torch.Tensor | None) -> torch.Tensor:
        """S (B, H, T, T), bias (1|B, H, T, T) or None, future (T, T) bool -> A (B, H, T, T),
        with the causal mask applied (-inf above the diagonal) in causal mode."""
        return native_dape.dape_scores(
            S, *self._operands(bias), self.causal, future, reference=lambda: self.forward_full(S, bias, None)
        )

    def attention(self, S: torch.Tensor, bias: torch.Tensor | None, future: torch.Tensor | None) -> torch.Tensor:
        """softmax(forward(S, bias, future)) over the keys: the attention weights (B, H, T, T),
        with the softmax's backward fused into the fused kernels'."""
        return native_dape.dape_attention(
            S, *self._operands(bias), self.causal, future, reference=lambda: self.forward_full(S, bias, None)
        )

    def forward_full(self, S: torch.Tensor, bias: torch.Tensor | None, future: torch.Tensor | None) -> torch.Tensor:
        """The reference, as App. L writes it: A = S + B + conv2(LeakyReLU(conv1(tril([S, B])))) on
        the whole T x T map (future=None: no zeroing, encoder mode). Not masked: values above
        the diagonal are placeholders."""
        base = self._inputs(S, bias)  # (B, H, T, T)
        X = torch.cat([S, bias.expand_as(S)], dim=1) if self.with_bias and bias is not None else S  # (B, C, T, T)
        if future is not None:
            X = X.masked_fill(future, 0.0)  # torch.tril, once
        return base + self.conv2(F.leaky_relu(self.conv1(X)))  # (B, C, T, T) -> (B, D, T, T) -> (B, H, T, T)
