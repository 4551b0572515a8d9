"""synthlab.model: the Transformer and every positional encoding (README "Encodings").

Three independent position axes: indices (``indices.py``), encoders (``encoders/``) and logit
processors (``processors.py``); a spec string (``registry.py``) names a combination, e.g.
``rope``, ``kerple+dape:k=3``, ``cope+rope``, ``bipe-alibi``; other distributions add
encodings through the entry-point group ``synthlab.encodings``. Usage and the axes:
docs/architecture.md, "The three position axes"; plugins: docs/plugins.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Sequence

from .cpu import tune_cpu_allocator
from .registry import COMPONENTS, ENCODINGS, INDEX_SCHEMES, Encoding, PESpec, names_of, parse_pe, register, unregister

if TYPE_CHECKING:  # torch-backed names load on first use, so `synthlab encodings` stays fast
    from .indices import PoSE, PositionScheme, Randomized, bipe_segments, parse_positions
    from .transformer import Transformer

_LAZY = {
    "Transformer": ".transformer",
    "PoSE": ".indices",
    "PositionScheme": ".indices",
    "Randomized": ".indices",
    "bipe_segments": ".indices",
    "parse_positions": ".indices",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_model(
    pe: "str | PESpec" = "rope",
    vocab_size: int = 16,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    max_len: int = 512,
    dropout: float = 0.0,
    tie_embeddings: bool = False,
    causal: bool = True,
    separator_ids: Sequence[int] = (),
    segment_start_ids: Sequence[int] = (),
    **pe_params: Any,
) -> "Transformer":
    """Build the decoder-only Transformer for a pe spec; ``pe_params`` (e.g. ``k=3``,
    ``npos=16``) go to the component that owns them (ValueError if unknown / ambiguous)."""
    from .transformer import Transformer

    spec = parse_pe(pe)
    if pe_params:
        spec = spec.with_params(**pe_params)
    return Transformer(
        spec,
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        max_len=max_len,
        dropout=dropout,
        tie_embeddings=tie_embeddings,
        causal=causal,
        separator_ids=separator_ids,
        segment_start_ids=segment_start_ids,
    )


def validate_combination(
    pe: "str | PESpec",
    positions: "str | PositionScheme | None" = None,
    causal: bool = True,
    max_len: int = 512,
    eval_len: int | None = None,
    rope_scaling: str | None = None,
) -> None:
    """Raise ValueError naming the conflict for an impossible pe x positions x mode x length
    combination (encoder mode with a causal-only encoding, PoSE / randomized positions with an
    encoding that reads no token index, a learned table shorter than the positions used, rope
    scaling without a rotary encoder ...)."""
    from .indices import parse_positions

    spec = parse_pe(pe)
    scheme = parse_positions(positions)
    eval_len = max_len if eval_len is None else eval_len
    if not isinstance(eval_len, int) or eval_len < 1:
        raise ValueError(f"eval_len must be a positive integer, got {eval_len!r}")
    if not causal and spec.causal_only:
        raise ValueError(
            f"pe {spec.name!r} is causal only ({', '.join(spec.causal_only_parts)}); "
            "it cannot run in encoder mode (causal=False)"
        )
    if scheme is not None:
        kind = scheme.name.split(":")[0]
        if spec.bipe:
            raise ValueError(
                f"--positions {kind} cannot be combined with {spec.name}: BiPE reads segment indices, not token indices"
            )
        if not spec.reads_token_index:
            raise ValueError(
                f"--positions {kind} needs an encoding that reads token indices; pe {spec.name!r} ignores them"
            )
        if kind == "randomized" and scheme.max_position < eval_len:
            raise ValueError(
                f"--positions randomized:max={scheme.max_position} must cover the longest evaluated sequence "
                f"({eval_len})"
            )
    needed = max(eval_len, scheme.max_position if scheme is not None else 0)
    for c in spec.components:  # the encodings whose tables stop at max_len (row max_len_hint)
        hint = COMPONENTS[c].max_len_hint
        if hint is not None and needed > max_len:
            raise ValueError(
                f"pe {c} has a table of max_len={max_len} rows, shorter than the positions used ({needed}); {hint}"
            )
    if rope_scaling not in (None, "none", "linear", "ntk", "yarn"):
        raise ValueError(f"--rope-scaling {rope_scaling!r} unknown; allowed: none, linear, ntk, yarn")
    if rope_scaling not in (None, "none") and not spec.rotary:
        raise ValueError(
            f"--rope-scaling {rope_scaling} needs a rotary encoder ({', '.join(names_of('rotary'))}); pe "
            f"{spec.name!r} has none"
        )
    # BiPE's intra-segment table needs only the longest segment; the model checks it at run time


__all__ = [
    "build_model",
    "parse_pe",
    "parse_positions",
    "validate_combination",
    "ENCODINGS",
    "INDEX_SCHEMES",
    "COMPONENTS",
    "Encoding",
    "register",
    "unregister",
    "PESpec",
    "tune_cpu_allocator",
    "PositionScheme",
    "Randomized",
    "PoSE",
    "Transformer",
    "bipe_segments",
]
