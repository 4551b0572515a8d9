"""Contextual position encoding: CoPE (Golovneva et al. 2024)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from ..batched import fold_vmap
from ..native import cope_kernel, ptr
from ..registry import COMPONENTS, BuildConfig
from .bias import alibi_slopes


def _dense(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()  # the same tensor where it is contiguous already


# The native Functions below are written in the setup_context style (forward without ctx) and
# have a ``vmap`` rule, so that they run under torch.func.vmap over stacked seeds (batched seeds,
# synthlab/model/stacked.py): the kernels treat each batch element independently, so the
# rule folds the vmapped dim into the batch, (S, B, ...) -> (S*B, ...) (batched.fold_vmap). So
# does the Triton kernels' Function (native/cope_triton.py), which CoPE.attend takes on CUDA.


class _FusedCoPE(torch.autograd.Function):
    """CoPE's positions, clamp and interpolation by the native CPU kernel
    (``native/cope_cpu.cpp``), one pass per query row each way. gates = sigmoid(logits) with
    the future not yet zeroed (the kernel reads the lower triangle only); table = q . pos_emb
    (B, H, T, npos), or None with ``slopes`` (H,) for CoPE-ALiBi. Returns the additive term,
    0 above the diagonal."""

    @staticmethod
    def forward(gates, table, slopes, npos: int):
        lib = cope_kernel()
        assert lib is not None, "called only where the kernel loaded"
        B, H, T, _ = gates.shape
        gates, table = gates.contiguous(), _dense(table)
        slopes = None if slopes is None else slopes.reshape(H).contiguous()
        out = torch.empty_like(gates)
        lib.cope_forward(ptr(gates), ptr(table), ptr(slopes), ptr(out), B, H, T, npos, torch.get_num_threads())
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        gates, table, slopes, npos = inputs
        slopes = None if slopes is None else slopes.reshape(gates.shape[1]).contiguous()
        ctx.save_for_backward(gates.contiguous(), _dense(table), slopes)
        ctx.npos = npos

    @staticmethod
    def backward(ctx, g):
        lib = cope_kernel()
        assert lib is not None, "called only where the kernel loaded"
        gates, table, slopes = ctx.saved_tensors
        B, H, T, _ = gates.shape
        g = g.contiguous()
        g_gates = torch.empty_like(gates)
        g_table = None if table is None else torch.empty_like(table)
        lib.cope_backward(ptr(gates), ptr(table), ptr(slopes), ptr(g), ptr(g_gates), ptr(g_table), B, H, T, ctx.npos,
                          torch.get_num_threads())
        return g_gates, g_table, None, None

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(_FusedCoPE.apply, info, in_dims, args, ("batch", "batch", "shared", None))


class _FusedCoPEAttention(torch.autograd.Function):
    """The attention weights softmax_j(S_ij + CoPE term_ij) over j <= i (0 above the diagonal)
    by the native CPU kernel, gates made inside from ``G`` (the gate logits; None: S itself);
    the softmax's, the interpolation's, the scan's and the sigmoid's backward fused too. For a
    layer whose only position term is CoPE; equal to the PyTorch path within float rounding."""

    @staticmethod
    def forward(S, G, table, slopes, npos: int):
        lib = cope_kernel()
        assert lib is not None, "called only where the kernel loaded"
        B, H, T, _ = S.shape
        S, G, table = S.contiguous(), _dense(G), _dense(table)
        slopes = None if slopes is None else slopes.reshape(H).contiguous()
        att = torch.empty_like(S)
        lib.cope_attention_forward(ptr(S), ptr(G), ptr(table), ptr(slopes), ptr(att), B, H, T, npos,
                                   torch.get_num_threads())
        return att

    @staticmethod
    def setup_context(ctx, inputs, output):
        S, G, table, slopes, npos = inputs
        slopes = None if slopes is None else slopes.reshape(S.shape[1]).contiguous()
        ctx.save_for_backward(S.contiguous() if G is None else None, _dense(G), _dense(table), slopes, output)
        ctx.npos = npos

    @staticmethod
    def backward(ctx, g):
        lib = cope_kernel()
        assert lib is not None, "called only where the kernel loaded"
        S, G, table, slopes, att = ctx.saved_tensors
        B, H, T, _ = att.shape
        g = g.contiguous()
        gS = torch.empty_like(att)
        gG = None if G is None else torch.empty_like(G)
        g_table = None if table is None else torch.empty_like(table)
        lib.cope_attention_backward(ptr(S), ptr(G), ptr(table), ptr(slopes), ptr(att), ptr(g), ptr(gS), ptr(gG),
                                    ptr(g_table), B, H, T, ctx.npos, torch.get_num_threads())
        return gS, gG, g_table, None, None

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(_FusedCoPEAttention.apply, info, in_dims, args, ("batch", "batch", "batch", "shared", None))


class _CoPEQKVKernel(torch.autograd.Function):
    """The kernel Function behind :class:`_FusedCoPEQKV`: returns (y, lse), the log-sum-exp
    (B, H, T) of each row an output only so that ``setup_context`` can save it for the backward
    (not differentiable)."""

    @staticmethod
    def forward(q, k, v, table, slopes, npos: int, scale: float):
        lib = cope_kernel()
        assert lib is not None, "called only where the kernel loaded"
        B, H, T, D = q.shape
        q, k, v, table = q.contiguous(), k.contiguous(), v.contiguous(), _dense(table)
        slopes = None if slopes is None else slopes.reshape(H).contiguous()
        y = torch.empty_like(q)
        lse = q.new_empty(B, H, T)
        lib.cope_qkv_forward(ptr(q), ptr(k), ptr(v), ptr(table), ptr(slopes), ptr(y), ptr(lse), B, H, T, D, npos,
                             scale, torch.get_num_threads())
        return y, lse

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, table, slopes, npos, scale = inputs
        slopes = None if slopes is None else slopes.reshape(q.shape[1]).contiguous()
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(q.contiguous(), k.contiguous(), v.contiguous(), _dense(table), slopes, output[1])
        ctx.npos, ctx.scale = npos, scale

    @staticmethod
    def backward(ctx, gy, _g_lse):
        lib = cope_kernel()
        assert lib is not None, "called only where the kernel loaded"
        q, k, v, table, slopes, lse = ctx.saved_tensors
        B, H, T, D = q.shape
        gy = gy.contiguous()
        gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        g_table = None if table is None else torch.empty_like(table)
        lib.cope_qkv_backward(ptr(q), ptr(k), ptr(v), ptr(table), ptr(slopes), ptr(lse), ptr(gy), ptr(gq), ptr(gk),
                              ptr(gv), ptr(g_table), B, H, T, D, ctx.npos, ctx.scale, torch.get_num_threads())
        return gq, gk, gv, g_table, None, None, None

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(_CoPEQKVKernel.apply, info, in_dims, args,
                         ("batch", "batch", "batch", "batch", "shared", None, None))


class _FusedCoPEQKV:
    """The whole causal attention softmax_j(q_i k_j scale + CoPE term_ij) v_j of a layer whose
    only position term is CoPE (gates from the attention logits), from q, k, v (B, H, T, d_h)
    by the native CPU kernel, flash-attention style: no (B, H, T, T) tensor is made either way
    (the backward recomputes each row from its saved log-sum-exp). table = q_raw . pos_emb
    (B, H, T, npos), or None with ``slopes`` (H,) for CoPE-ALiBi. Equal to the PyTorch path
    within float rounding. ``apply`` returns y (B, H, T, d_h) (:class:`_CoPEQKVKernel`)."""

    @staticmethod
    def apply(q, k, v, table, slopes, npos: int, scale: float) -> torch.Tensor:
        # q, k, v made dense here, in the graph: setup_context then saves the forward's very operands
        return _CoPEQKVKernel.apply(q.contiguous(), k.contiguous(), v.contiguous(), table, slopes, npos, scale)[0]


def _cpu_autocast() -> bool:
    """Whether autocast is on for CPU tensors (train.precision=bf16-mixed)."""
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def _at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """Half-precision values (bf16 autocast) in float32; float32 and float64 as they are."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


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
        return cls(cfg.d_model, cfg.n_heads, npos=p["npos"], sep_keys=p["sep_keys"], alibi=p["alibi"],
                   pos_emb=cfg.shared, slopes=slopes)

    slopes: torch.Tensor  # CoPE-ALiBi's (H, 1, 1), a buffer

    def __init__(self, d_model: int, n_heads: int, npos: int = 64, sep_keys: bool = False, alibi: bool = False,
                 pos_emb: nn.Parameter | None = None, slopes: list[float] | None = None):
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

    def attention(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
        """softmax(S + the CoPE term) with the causal mask (B, H, T, T), by the native kernel
        in one pass, for a layer with no other position term; None where the kernel does not
        apply (GPU, float64, no compiler): the caller then adds ``forward``'s term."""
        if not self._native(S):
            return None
        G = None if self.gate_key is None else self.gate_logits(q, S, x)
        table = None if self.alibi else q @ self.pos_emb  # (B, H, T, npos)
        return _FusedCoPEAttention.apply(S, G, table, self.slopes if self.alibi else None, self.npos)

    def attend(self, q_raw: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               scale: float) -> torch.Tensor | None:
        """The layer's whole attention output sum_j a_ij v_j (B, H, T, d_h) from q, k, v by the
        native kernel without any (T, T) tensor, for a layer with no other position term and
        gates from the attention logits (not ``sep_keys``); q_raw is the content query of the
        table term. None where the kernel does not apply: the caller then goes through
        ``attention`` or ``forward``. CUDA tensors go to the Triton kernels
        (``native/cope_triton.py``) where triton imports and SYNTHLAB_COPE_TRITON is not 0. Both
        kernels' Functions have vmap rules: under vmap (batched seeds) they run as well, the
        seeds folded into the batch."""
        if self.gate_key is not None:
            return None
        fused: Any
        if self._native(q):
            fused = _FusedCoPEQKV
        elif self._triton(q):  # under vmap too (batched seeds): the Function has a vmap rule
            from ..native import cope_triton  # here: CPU-only runs never import triton

            fused = cope_triton.CoPEQKVTriton
        else:
            return None
        table = None if self.alibi else q_raw @ self.pos_emb  # (B, H, T, npos)
        return fused.apply(q, k, v, table, self.slopes if self.alibi else None, self.npos, scale)

    def _triton(self, q: torch.Tensor) -> bool:
        """Whether ``attend`` runs the Triton kernels: CUDA tensors of a float type they take
        (float64 keeps the PyTorch path), the switch on, triton importable, the kernels compiled
        for these sizes (a compile failure warns once and leaves the PyTorch path on)."""
        if not (q.is_cuda and q.dtype in (torch.float32, torch.bfloat16, torch.float16)):
            return False
        from ..native import cope_triton

        H, T, D = q.shape[-3:]
        return (cope_triton.enabled() and cope_triton.triton_available(q.device)
                and cope_triton.builds(q.device, H, T, D, self.npos, not self.alibi))

    def _native(self, G: torch.Tensor) -> bool:
        """Whether the C++ kernel runs: float32 CPU operands and no CPU autocast. The kernel reads
        every operand as float32, and under autocast the table q . pos_emb is a bfloat16 matmul
        even where q is float32 (under vmap, batched seeds: nn.Linear with stacked weights and
        bias is not autocast), so autocast keeps the PyTorch path, as it does for a single model."""
        params = [] if self.alibi else [self.pos_emb]
        return (not _cpu_autocast() and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in [G, *params])
                and cope_kernel() is not None)

    @staticmethod
    def positions(gates: torch.Tensor) -> torch.Tensor:
        """p_ij = sum_{t=j..i} g_it for gates (.., T, T) with future gates already 0."""
        return (gates.sum(-1, keepdim=True) + gates).sub_(gates.cumsum(-1))

    def gate_logits(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The logits whose sigmoid are the gates (B, H, T, T), future not yet masked: the
        attention logits S, or with ``sep_keys`` q . k'_j / sqrt(d_h) for a separate key
        projection k' of the layer input x."""
        if self.gate_key is None:
            return S
        B, T, C = x.shape
        kg = self.gate_key(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, d_h)
        return (q @ kg.transpose(-2, -1)) * self.scale

    def gates_positions(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor, future: torch.Tensor,
                        G: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The gates g_ij (future ones exactly 0) and positions p_ij clamped to [0, npos - 1],
        each (B, H, T, T), as the PyTorch path computes them (``G``: the gate logits, if made)."""
        G = self.gate_logits(q, S, x) if G is None else G
        # in float32 under bf16 autocast too: a bfloat16 sum of 100 gates is only good to 0.5
        gates = torch.sigmoid(_at_least_float32(G)).masked_fill(future, 0.0)
        return gates, self.positions(gates).clamp(0.0, self.npos - 1)  # (rounding can give -1e-7 past the diagonal)

    def forward(self, q: torch.Tensor, S: torch.Tensor, x: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
        """q (B, H, T, d_h), S = q k^T / sqrt(d_h) (B, H, T, T), x (B, T, C) the layer input,
        future (T, T) bool -> the additive term (B, H, T, T)."""
        G = self.gate_logits(q, S, x)
        if self._native(G):
            table = None if self.alibi else q @ self.pos_emb  # (B, H, T, npos)
            return _FusedCoPE.apply(torch.sigmoid(G), table, self.slopes if self.alibi else None, self.npos)
        _, p = self.gates_positions(q, S, x, future, G)
        if self.alibi:
            return -self.slopes.to(p) * p
        logits_int = _at_least_float32(q @ self.pos_emb)  # (B, H, T, npos)
        table = torch.cat([logits_int, logits_int[..., -1:]], dim=-1)  # row npos repeats the last: no clamp for lo + 1
        lo = p.long()  # p >= 0: truncation is the floor
        w = p - lo  # (B, H, T, T) interpolation weight
        low = torch.gather(table, -1, lo)
        return torch.addcmul(low, w, torch.gather(table, -1, lo + 1).sub_(low))  # low + w (high - low)
