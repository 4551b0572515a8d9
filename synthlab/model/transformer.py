"""Decoder-only pre-LN Transformer (as nanoGPT's model.py) with a pluggable position pipeline.

token embedding (+ absolute encoder) -> n_layers x [LN -> attention -> residual,
LN -> GELU MLP 4x -> residual] -> final LN -> LM head (optionally tied). ``causal=False``
is encoder (bidirectional) mode for the encodings that define it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence, cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import Attention, PositionContext, TensorCache
from .encoders.rotary import Rotary
from .indices import bipe_segments, intra_from_segments
from .registry import PE_REVISION, BuildConfig, Part, PESpec, builder, names_of


class MLP(nn.Module):
    def __init__(self, d_model: int, dropout: float, n_layers: int):
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.c_proj = nn.Linear(4 * d_model, d_model)
        nn.init.normal_(self.c_fc.weight, std=0.02)
        nn.init.zeros_(self.c_fc.bias)
        nn.init.normal_(self.c_proj.weight, std=0.02 / math.sqrt(2 * n_layers))
        nn.init.zeros_(self.c_proj.bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, d_model: int, dropout: float, n_layers: int, attn: Attention):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = attn
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout, n_layers)

    def forward(self, x: torch.Tensor, ctx: PositionContext, return_attention: bool = False):
        y, att = self.attn(self.ln_1(x), ctx, return_attention)
        x = x + y
        x = x + self.mlp(self.ln_2(x))
        return x, att


# the Attention argument each kind of per-layer module goes to (absolute: the model's abs_enc)
SLOTS = {"rotary": "rotary", "bias": "biases", "contextual": "cope", "processor": "dape"}


def _build_configs(
    spec: PESpec, d_model: int, n_heads: int, max_len: int, causal: bool, revision: int
) -> list[tuple[Part, BuildConfig]]:
    """(part, its build config) for every module the spec names, in canonical order."""
    scores_bias = any(p.kind in ("bias", "contextual") for _, p in spec.parts)
    return [
        (p, BuildConfig(spec.params[c], p.index, d_model, n_heads, max_len, causal, revision, scores_bias))
        for c, p in spec.parts
    ]


def _shared_components(parts: list[tuple[Part, BuildConfig]]) -> list[Any]:
    """What each part shares across the layers (None for most), e.g. CoPE's (d_h x npos) table
    (Golovneva et al. 2024, the paper's default) or T5's bucket table (Raffel et al. 2020: one
    table for the whole stack). None where each layer has its own (``layer_tables=1``, or pe
    revision 1). Each layer holds the same object, so the state dict lists it under every layer,
    as tied weights, and the optimiser sees one tensor."""
    return [getattr(builder(p), "build_shared", lambda cfg: None)(cfg) for p, cfg in parts]


def _layer_components(parts: list[tuple[Part, BuildConfig]], shared: list[Any]) -> dict[str, Any]:
    """One layer's rotary / bias / contextual / processor modules (Attention's arguments), built
    in spec order: that order draws their random initialisation."""
    slots: dict[str, Any] = {**dict.fromkeys(SLOTS.values()), "biases": []}
    for (p, cfg), obj in zip(parts, shared):
        if p.kind == "absolute":
            continue
        module = builder(p).build(replace(cfg, shared=obj))
        if SLOTS[p.kind] == "biases":
            slots["biases"].append(module)
        else:
            slots[SLOTS[p.kind]] = module
    return slots


class Transformer(nn.Module):
    """``forward(tokens (B, T), positions=None, segments=None, return_attention=False, activations=None)``
    -> logits (B, T, V) [, attention list per layer of (B, H, T, T) or None on the fast path].
    ``activations``: a dict the forward fills with its hook points, name -> tensor
    (``blocks.<i>.attn.q`` ...; docs/inspection.md), or None (nothing kept, the fast paths).

    ``revision``: the forms of the encodings (registry.PE_REVISION, the current one, by
    default); synthlab.load_run passes the one a saved run was trained with."""

    def __init__(
        self,
        spec: PESpec,
        vocab_size: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        max_len: int = 512,
        dropout: float = 0.0,
        tie_embeddings: bool = False,
        causal: bool = True,
        separator_ids: Sequence[int] = (),
        segment_start_ids: Sequence[int] = (),
        revision: int = PE_REVISION,
    ):
        super().__init__()
        if not isinstance(revision, int) or isinstance(revision, bool) or not 1 <= revision <= PE_REVISION:
            raise ValueError(f"pe revision must be an integer in 1..{PE_REVISION}, got {revision!r}")
        for name, val, lo in (
            ("vocab_size", vocab_size, 1),
            ("d_model", d_model, 1),
            ("n_layers", n_layers, 1),
            ("n_heads", n_heads, 1),
            ("max_len", max_len, 1),
        ):
            if not isinstance(val, int) or isinstance(val, bool) or val < lo:
                raise ValueError(f"{name} must be a positive integer, got {val!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if not causal and spec.causal_only:
            raise ValueError(
                f"pe {spec.name!r} is causal only ({', '.join(spec.causal_only_parts)}); "
                "it cannot run with causal=False (encoder mode)"
            )
        self.spec, self.pe = spec, spec.name
        self.vocab_size, self.d_model, self.n_layers, self.n_heads = vocab_size, d_model, n_layers, n_heads
        self.max_len, self.causal, self.revision = max_len, causal, revision
        self.separator_ids = tuple(int(i) for i in separator_ids)
        self.segment_start_ids = tuple(int(i) for i in segment_start_ids)

        self.wte = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.wte.weight, std=0.02)
        parts = _build_configs(spec, d_model, n_heads, max_len, causal, revision)
        self.abs_index = "token"
        self.abs_enc: nn.Module | None = None
        for p, cfg in parts:  # at most one (parse_pe checks)
            if p.kind == "absolute":
                assert p.index is not None, "an absolute part reads an index"
                self.abs_enc, self.abs_index = builder(p).build(cfg), p.index  # token, or intra-segment (BiPE)
        # sqrt(d) on the token embeddings where a fixed sinusoid of RMS sqrt(1/2) is added (see
        # Sinusoidal); only there, so the encodings without an absolute encoder train as before
        scaled = self.abs_enc is not None and self.abs_enc.scales_tokens and revision >= 2
        self.embed_scale = math.sqrt(d_model) if scaled else 1.0
        self.drop = nn.Dropout(dropout)
        shared = _shared_components(parts)
        self.blocks = nn.ModuleList(
            Block(
                d_model,
                dropout,
                n_layers,
                Attention(d_model, n_heads, dropout, causal, n_layers, **_layer_components(parts, shared)),
            )
            for _ in range(n_layers)
        )
        for i, block in enumerate(self.blocks):
            cast(Block, block).attn.name = f"blocks.{i}.attn"  # its hook points' names, as named_modules() has them
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.lm_head.weight, std=0.02)
        if tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self._cache = TensorCache()

    # ---- position plumbing -------------------------------------------------------------
    def _context(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None,
        segments: torch.Tensor | None,
        activations: dict[str, torch.Tensor] | None = None,
    ) -> PositionContext:
        B, T = tokens.shape
        dev = tokens.device
        if positions is None:
            pos, default = self._cache.get(("arange", T, dev), lambda: torch.arange(T, device=dev)), True
        else:
            pos = torch.as_tensor(positions, device=dev)
            if pos.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"positions must be an integer tensor, got {pos.dtype}")
            pos = pos.long()
            if pos.shape not in ((T,), (B, T)):
                raise ValueError(f"positions must have shape ({T},) or ({B}, {T}), got {tuple(pos.shape)}")
            if pos.numel() and int(pos.min()) < 0:
                raise ValueError("positions must be non-negative")
            default = False
        seg = intra = None
        if self.spec.bipe:
            if segments is not None:
                seg = torch.as_tensor(segments, device=dev).long()
                if seg.shape != (B, T):
                    raise ValueError(f"segments must have shape ({B}, {T}), got {tuple(seg.shape)}")
                intra = intra_from_segments(seg)
            else:
                seg, intra = bipe_segments(tokens, self.separator_ids, self.segment_start_ids)
        dtype = self.wte.weight.dtype
        ctx = PositionContext(T, self.causal, pos, default, seg, intra, self._cache, dev, dtype, activations)
        if seg is not None and intra is not None:
            ctx.keep("bipe.segments", seg)
            ctx.keep("bipe.intra", intra)
        return ctx

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        segments: torch.Tensor | None = None,
        return_attention: bool = False,
        activations: dict[str, torch.Tensor] | None = None,
    ):
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (B, T), got {tuple(tokens.shape)}")
        ctx = self._context(tokens, positions, segments, activations)
        x = self.wte(tokens)  # (B, T, C)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        if self.abs_enc is not None:
            idx = self.abs_index  # token index, or intra-segment (BiPE)
            if getattr(self.abs_enc, "takes_bound", False) and (ctx.cacheable(idx) or idx == "intra"):
                pe = self.abs_enc(ctx.pos(idx), bound=ctx.T - 1)  # 0..T-1, or within a segment: < T
            else:
                pe = self.abs_enc(ctx.pos(idx))
            x = x + pe.to(x.dtype)
        x = self.drop(x)
        atts = []
        for block in self.blocks:
            x, att = block(x, ctx, return_attention)
            atts.append(att)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        return (logits, atts) if return_attention else logits

    # ---- eval-time interpolation --------------------------------------------------------
    def rotary_encoders(self) -> list[Rotary]:
        return [r for b in self.blocks if (r := cast(Block, b).attn.rotary) is not None]

    def set_rope_scaling(self, kind: str | None, factor: float | None = None, train_len: int | None = None) -> None:
        """Eval-time rope scaling: kind in {None, 'linear', 'ntk', 'yarn'}.

        With ``factor`` s fixed (s = L_eval / L_train; s <= 1 changes nothing); YaRN's ramp
        then uses ``train_len`` or, if not given, L_train = T / s of the sequence at hand.
        With factor=None the scaling is dynamic, s = max(1, T / train_len), train_len
        defaulting to max_len. ValueError if the model has no rotary encoder (and kind is set)."""
        if isinstance(kind, str) and kind.lower() in ("none", ""):
            kind = None
        rots = self.rotary_encoders()
        if kind is not None and not rots:
            raise ValueError(
                f"rope scaling {kind!r} needs a rotary encoder ({', '.join(names_of('rotary'))}); pe={self.pe!r} has "
                "none"
            )
        if factor is None and train_len is None:
            train_len = self.max_len
        for r in rots:
            r.set_scaling(kind, factor, train_len)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
