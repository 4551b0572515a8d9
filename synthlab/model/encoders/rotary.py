"""Rotary encoders (RoPE, xPos) and their eval-time scaling (linear PI, NTK, YaRN)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..registry import BuildConfig

SCALINGS = (None, "linear", "ntk", "yarn")


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate dim pairs (2k, 2k + 1) of x (B, H, T, d) by angles with cos/sin (.., T, d/2).
    float32 / float64 on CPU or CUDA: pair k as a complex number times cos_k + i sin_k, one pass
    that reads x once and writes once (forward + backward ~3x faster than six real passes);
    other dtypes and devices (bf16 autocast, MPS), and under torch.compile (inductor has no code
    generation for complex numbers; it fuses the real form into one kernel): the same arithmetic
    in real numbers."""
    if (
        x.dtype in (torch.float32, torch.float64)
        and x.device.type in ("cpu", "cuda")
        and not torch.compiler.is_compiling()
    ):
        pairs = x.unflatten(-1, (-1, 2))  # (B, H, T, d/2, 2): a view, even for q, k split off one qkv
        if pairs.stride(-1) != 1 or pairs.storage_offset() % 2 or any(st % 2 for st in pairs.stride()[:-2]):
            pairs = pairs.contiguous()
        return torch.view_as_real(torch.view_as_complex(pairs) * torch.complex(cos, sin)).flatten(-2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def rotate_half_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The pair layout of runs saved before 2026-11-24: dims (k, k + d/2) (GPT-NeoX style); the
    same function class (a fixed permutation of q, k features), kept so their weights reload."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


#: pair layouts by name; config.json records the one a run was trained with ("rotary_pairs")
PAIR_LAYOUTS = {"interleaved": rotate, "half": rotate_half_pairs}
CURRENT_PAIRS = "interleaved"


class Rotary(nn.Module):
    """RoPE (Su et al. 2021): rotate pair k = dims (2k, 2k + 1) of q_i, k_j by the angle
    index * base^(-2k/d_h), so q_i . k_j depends on i - j only. With ``xpos=True`` (Sun et al.
    2023) q_i is also scaled by zeta_k^(i/scale_base) and k_j by zeta_k^(-j/scale_base),
    zeta_k = (2k + 0.4 d_h)/(1.4 d_h), i.e. the logit by zeta^((i-j)/scale_base) (indices
    centred at T//2 for range; causal only).

    ``index`` names which index it reads: "token" (rope/xpos) or "segment" (BiPE-RoPE).

    Eval-time scaling (:meth:`set_scaling`), s = L_eval / L_train (dynamic: max(1, T / L_train)):
    linear PI pos / s; NTK base * s^(d/(d-2)); YaRN ramp over the pairs with alpha = 1,
    beta = 32 on r_k = L_train / wavelength_k, theta'_k = (1 - g) theta_k / s + g theta_k, and
    q, k each scaled by (0.1 ln s + 1) (logits by its square). s <= 1 changes nothing.
    """

    inv_freq: torch.Tensor
    zeta: torch.Tensor

    @classmethod
    def build(cls, cfg: BuildConfig) -> "Rotary":
        assert cfg.index is not None, "a rotary part reads an index"
        return cls(cfg.head_dim, base=cfg.params["base"], index=cfg.index)

    def __init__(
        self, head_dim: int, base: float = 10000.0, xpos: bool = False, scale_base: float = 512.0, index: str = "token"
    ):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary encodings need an even head dim (d_model / n_heads), got {head_dim}")
        self.head_dim, self.base, self.xpos, self.scale_base, self.index = (
            head_dim,
            float(base),
            xpos,
            float(scale_base),
            index,
        )
        k = torch.arange(head_dim // 2, dtype=torch.float32)
        self.register_buffer("inv_freq", base ** (-2 * k / head_dim), persistent=False)  # (d/2,)
        self.register_buffer("zeta", (2 * k + 0.4 * head_dim) / (1.4 * head_dim), persistent=False)  # (d/2,)
        self.kind: str | None = None
        self.factor: float | None = None
        self.train_len: int | None = None
        self._cache: dict = {}
        self.pairs = CURRENT_PAIRS  # "half": runs saved before 2026-11-24 (set by runs.load_run)

    def set_scaling(self, kind: str | None, factor: float | None = None, train_len: int | None = None) -> None:
        if kind not in SCALINGS:
            raise ValueError(f"rope scaling {kind!r} unknown; allowed: none, linear, ntk, yarn")
        if factor is not None and not (factor > 0):
            raise ValueError(f"rope scaling factor must be > 0, got {factor!r}")
        if kind is not None and not train_len and factor is None:
            raise ValueError(f"dynamic rope scaling {kind!r} (no factor) needs train_len (the training length L_train)")
        self.kind, self.factor, self.train_len = kind, factor, train_len
        self._cache.clear()

    def _scale(self, T: int) -> float:
        if self.kind is None:
            return 1.0
        if self.factor is not None:
            s = self.factor
        else:
            assert self.train_len, "set_scaling checks that dynamic scaling has train_len"
            s = T / self.train_len
        return max(1.0, float(s))

    def _inv_freq(self, s: float, T: int | None = None) -> tuple[torch.Tensor, float, float]:
        """-> (inv_freq (d/2,), position multiplier, q/k magnitude multiplier). YaRN's ramp uses
        L_train = train_len, or T / s when only the factor is known (s = L_eval / L_train)."""
        inv = self.inv_freq
        if s <= 1.0 or self.kind is None:
            return inv, 1.0, 1.0
        if self.kind == "linear":
            return inv, 1.0 / s, 1.0
        d = self.head_dim
        if self.kind == "ntk":
            base = self.base * s ** (d / (d - 2)) if d > 2 else self.base * s
            k = torch.arange(d // 2, dtype=torch.float32, device=inv.device)
            return base ** (-2 * k / d), 1.0, 1.0
        # yarn: NTK-by-parts, the ramp gamma(r) linear in r as the paper's Eq. writes it; the
        # reference code (jquesnelle/yarn, transformers' _compute_yarn_parameters) ramps linearly
        # over the pair index between the pairs where r = 32 and r = 1, another curve in between
        train_len = self.train_len if self.train_len else (T or 1) / s
        r = train_len * inv / (2 * math.pi)  # (d/2,) rotations per training window
        g = ((r - 1.0) / (32.0 - 1.0)).clamp(0.0, 1.0)
        return (1 - g) * inv / s + g * inv, 1.0, 0.1 * math.log(s) + 1.0

    def tables(self, pos: torch.Tensor, T: int, dtype: torch.dtype, cacheable: bool):
        """-> (cos_q, sin_q, cos_k, sin_k), each (T, d/2) or (B, 1, T, d/2)."""
        s = self._scale(T)
        key = (T, s, pos.device, dtype)
        if cacheable and key in self._cache:
            return self._cache[key]
        inv, pmul, mag = self._inv_freq(s, T)
        p = pos.to(torch.float32)
        ang = (p * pmul).unsqueeze(-1) * inv  # (..., T, d/2)
        cos, sin = ang.cos() * mag, ang.sin() * mag
        out: tuple[torch.Tensor, ...]
        if self.xpos:
            power = (p - T // 2).unsqueeze(-1) / self.scale_base  # (..., T, 1)
            up = self.zeta**power  # (..., T, d/2)
            out = (cos * up, sin * up, cos / up, sin / up)
        else:
            out = (cos, sin, cos, sin)
        if pos.dim() == 2:  # (B, T, d/2) -> (B, 1, T, d/2)
            out = tuple(t.unsqueeze(1) for t in out)
        out = tuple(t.to(dtype) for t in out)
        if cacheable:
            if len(self._cache) > 16:
                self._cache.clear()
            self._cache[key] = out
        return out

    def forward(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor, cacheable: bool = False):
        """q, k (B, H, T, d_h); pos (T,) or (B, T) -> rotated q, k."""
        T = q.shape[-2]
        cq, sq, ck, sk = self.tables(pos, T, q.dtype, cacheable)
        rot = PAIR_LAYOUTS[self.pairs]
        return rot(q, cq, sq), rot(k, ck, sk)


class XPos(Rotary):
    """xPos (Sun et al. 2023, A Length-Extrapolatable Transformer): RoPE with the logit scaled by
    zeta_k^((i-j)/scale_base), zeta_k = (2k + 0.4 d_h)/(1.4 d_h) (see :class:`Rotary`). Causal only."""

    @classmethod
    def build(cls, cfg: BuildConfig) -> "XPos":
        assert cfg.index is not None, "a rotary part reads an index"
        return cls(
            cfg.head_dim, base=cfg.params["base"], xpos=True, scale_base=cfg.params["scale_base"], index=cfg.index
        )
