"""Contextual position encoding: CoPE (Golovneva et al. 2024)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..native import cope as native_cope
from ..registry import COMPONENTS, BuildConfig
from .bias import alibi_slopes


def _at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """Half-precision values (bf16 autocast) in float32; float32 and float64 as they are."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


def cope_positions(gates: torch.Tensor) -> torch.Tensor:
    """p_ij = sum_{t=j..i} g_it for gates (.., T, T) with future gates already 0 (Eq. 3)."""
    return (gates.sum(-1, keepdim=True) + gates).sub_(gates.cumsum(-1))


def cope_term(
    G: torch.Tensor, table: torch.Tensor | None, slopes: torch.Tensor | None, npos: int, future: torch.Tensor
) -> torch.Tensor:
    """CoPE's additive term (B, H, T, T), the reference (Golovneva et al. 2024, Sec. 4, Listing 1).
    G (B, H, T, T) the gate logits, future (T, T) bool; table = q . e (B, H, T, npos), or None
    with ``slopes`` (H, 1, 1) for CoPE-ALiBi (App. C, Eq. 10)."""
    # in float32 under bf16 autocast too: a bfloat16 sum of 100 gates is only good to 0.5
    gates = torch.sigmoid(_at_least_float32(G)).masked_fill(future, 0.0)  # (B, H, T, T), g_ij = 0 for j > i
    p = cope_positions(gates).clamp(0.0, npos - 1)  # (rounding can give -1e-7 past the diagonal)
    if table is None:
        assert slopes is not None, "CoPE-ALiBi has its slopes"
        return -slopes.to(p) * p  # -m_h p_ij
    logits_int = _at_least_float32(table)  # (B, H, T, npos): q_i . e[n] at the integer positions n
    padded = torch.cat([logits_int, logits_int[..., -1:]], dim=-1)  # row npos repeats the last: no clamp for lo + 1
    lo = p.long()  # p >= 0: truncation is the floor
    w = p - lo  # (B, H, T, T) interpolation weight
    low = torch.gather(padded, -1, lo)
    return torch.addcmul(low, w, torch.gather(padded, -1, lo + 1).sub_(low))  # low + w (high - low)


def cope_alibi_slopes(n_heads: int, m0: float) -> list[float]:
    """CoPE-ALiBi's fixed head slopes (Golovneva et al. 2024, App. C): m_h = m0 / 2^h. The paper's
    three sets for 4 heads are m0 = 1, 1/4, 1/16; m0 = 1/4 ({1/4, 1/8, 1/16, 1/32}) had the lowest
    OOD error on Flip-Flop (Table 8: 8.7 against 11.4 and 17.1)."""
    return [m0 * 2.0**-h for h in range(n_heads)]


class CoPE(nn.Module):
    """CoPE (Golovneva et al. 2024, Sec. 4 and App. B, Listing 1).

    Gates g_ij = sigmoid(q_i k_j / sqrt(d_h)) on the masked logits (future gates exactly 0),
    positions p_ij = sum_{t=j..i} g_it (reverse cumulative sum) clamped to npos - 1, and
    logit_ij += q_i . e[p_ij] with e linearly interpolated between the two nearest integer
    rows of a learned (d_h x npos) table, zero-initialised. The table is shared by the heads
    and, by default, by every layer of the model (the paper's setting; "layers do not share
    embeddings" is an App. D ablation): the model passes the same ``pos_emb`` Parameter to each
    layer's module; without one the module makes its own (per-layer tables).

    Variants: ``sep_keys`` takes the gates from a separate key projection of the layer input;
    ``alibi`` (CoPE-ALiBi, App. C Eq. 10) adds -m_h p_ij with fixed head ``slopes`` instead of
    the table (the paper writes + m p_ij with m listed positive; the minus keeps ALiBi's
    convention that farther counts are penalised, as the fixed slopes intend). Causal only.
    Pe revision 1 had one table per layer and Press et al.'s ALiBi slopes for CoPE-ALiBi.
    """

    @classmethod
    def build_shared(cls, cfg: BuildConfig) -> nn.Parameter | None:
        """The model's one (d_h, npos) table, built before the layers (None: one per layer)."""
        p = cfg.params
        if cfg.revision < 2 or p["alibi"] or p["layer_tables"]:
            return None
        return nn.Parameter(torch.zeros(cfg.head_dim, p["npos"]))

    @classmethod
    def build(cls, cfg: BuildConfig) -> "CoPE":
        p = cfg.params
        slopes = cope_alibi_slopes(cfg.n_heads, p["m0"]) if cfg.revision >= 2 else alibi_slopes(cfg.n_heads)
        return cls(
            cfg.d_model,
            cfg.n_heads,
            npos=p["npos"],
            sep_keys=p["sep_keys"],
            alibi=p["alibi"],
            pos_emb=cfg.shared,
            slopes=slopes,
        )

    slopes: torch.Tensor  # CoPE-ALiBi's (H, 1, 1), a buffer

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        npos: int = 64,
        sep_keys: bool = False,
        alibi: bool = False,
        pos_emb: nn.Parameter | None = None,
        slopes: list[float] | None = None,
    ):
        super().__init__()
        self.n_heads, self.head_dim, self.npos, self.alibi = n_heads, d_model // n_heads, npos, alibi
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.gate_key = nn.Linear(d_model, d_model, bias=False) if sep_keys else None
        if self.gate_key is not None:
            nn.init.normal_(self.gate_key.weight, std=0.02)
        if alibi:
            slopes = cope_alibi_slopes(n_heads, COMPONENTS["cope"].params["m0"]) if slopes is None else slopes
            self.register_buffer("slopes", torch.tensor(slopes).view(-1, 1, 1), persistent=False)  # (H, 1, 1)
        elif pos_emb is not None:
            assert pos_emb.shape == (self.head_dim, npos), "shared CoPE table of the wrong shape"
            self.pos_emb = pos_emb  # (d_h, npos), the model's shared table
        else:
            self.pos_emb = nn.Parameter(torch.zeros(self.head_dim, npos))  # (d_h, npos)

    positions = staticmethod(cope_positions)

    def _table(self, q: torch.Tensor) -> torch.Tensor | None:
        """q . e (B, H, T, npos): the logits at the integer positions (None for CoPE-ALiBi)."""
        return None if self.alibi else q @ self.pos_emb

    def gate_logits(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The logits whose sigmoid are the gates (B, H, T, T), future not yet masked: the
        attention logits S, or with ``sep_keys`` q . k'_j / sqrt(d_h) for a separate key
        projection k' of the layer input x."""
        if self.gate_key is None:
            return S
        B, T, C = x.shape
        kg = self.gate_key(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d_h)
        return (q @ kg.transpose(-2, -1)) * self.scale

    def gates_positions(
        self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor, future: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The gates g_ij (future ones exactly 0) and positions p_ij clamped to [0, npos - 1],
        each (B, H, T, T), as the reference computes them (the hook points read them)."""
        gates = torch.sigmoid(_at_least_float32(self.gate_logits(q, S, x))).masked_fill(future, 0.0)
        return gates, cope_positions(gates).clamp(0.0, self.npos - 1)

    def forward(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        """q (B, H, T, d_h), S = q k^T / sqrt(d_h) (B, H, T, T), x (B, T, C) the layer input,
        future (T, T) bool -> the additive term (B, H, T, T), for a layer with other terms too."""
        G, table, slopes = self.gate_logits(q, S, x), self._table(q), self.slopes if self.alibi else None
        return native_cope.cope_term(
            G, table, slopes, self.npos, reference=lambda: cope_term(G, table, slopes, self.npos, future)
        )

    def attention(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        """softmax(S + the CoPE term) with the causal mask (B, H, T, T), for a layer whose only
        position term is CoPE (the native kernel does the three in one pass)."""
        G, table, slopes = self.gate_logits(q, S, x), self._table(q), self.slopes if self.alibi else None

        def reference() -> torch.Tensor:
            A = S + cope_term(G, table, slopes, self.npos, future)  # (B, H, T, T)
            return torch.softmax(A.masked_fill_(future, float("-inf")), dim=-1)

        return native_cope.cope_probabilities(
            S, None if self.gate_key is None else G, table, slopes, self.npos, reference
        )

    def attend(
        self,
        q_raw: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        x: torch.Tensor,
        future: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """The layer's attention output softmax(S + the CoPE term) v (B, H, T, d_h), S = q k^T
        scale, for a layer whose only position term is CoPE; q_raw is the content query of the
        table term. The fused kernels (C++ on CPU, Triton on CUDA) make no (T, T) tensor."""

        def reference() -> torch.Tensor:
            return self.attention(q_raw, (q * scale) @ k.transpose(-2, -1), x, future) @ v

        if self.gate_key is not None:  # gates from a separate key projection: the kernels read S's
            return reference()
        return native_cope.cope_attention(
            q, k, v, self._table(q_raw), self.slopes if self.alibi else None, self.npos, scale, reference
        )
