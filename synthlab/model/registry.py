"""Spec strings <-> position components.

Grammar: components joined by ``+``, each optionally followed by ``:key=value[,key=value]``::

    rope   alibi   kerple+dape   kerple+dape:k=3   cope+rope   cope:npos=16   fire+dape:k=5

Every component has a *role* on one of the three position axes (ARCHITECTURE.md):
``absolute`` (added to embeddings), ``rotary`` (rotates q, k), ``bias`` (additive b(i, j)),
``contextual`` (CoPE) and ``processor`` (DAPE). Composite names (``bipe-rope``, ``bipe-alibi``)
expand to an absolute encoder on the intra-segment index plus a rotary / bias encoder on the
segment index. Validation here is pure Python (no torch), so ``synthlab encodings`` and
config checks stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# role order = canonical order of components in a spec string
ROLES = ("none", "absolute", "contextual", "rotary", "bias", "processor")

#: Revision of the encodings' forms; config.json records the one a run was trained with
#: ("pe_revision") and synthlab.load_run rebuilds a run with it (Transformer(revision=...)).
#: Runs saved before it was recorded are revision 1, whose forms were: one CoPE table and one
#: T5 bucket table per layer, CoPE-ALiBi with Press et al.'s ALiBi slopes, token embeddings not
#: scaled by sqrt(d_model) under sinusoidal APE, FIRE's threshold a raw parameter (its state
#: dict key ``L`` is converted on load) and no eps in FIRE's normaliser.
PE_REVISION = 2


@dataclass(frozen=True)
class Component:
    """One registered name: its role, parameters (name -> default) and documentation."""

    name: str
    role: str
    description: str
    paper: str
    params: dict[str, Any] = field(default_factory=dict)
    causal_only: bool = False  # cannot run in encoder (bidirectional) mode
    reads_token_index: bool = True  # consumes token indices (so randomized / PoSE matter)


_C = Component
COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in [
        _C("nope", "none", "no positional information; the causal mask alone", "Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization in Transformers", reads_token_index=False),
        _C("sinusoidal", "absolute", "fixed sin/cos of the index added to the token embeddings", "Vaswani et al. 2017, Attention Is All You Need", {"base": 10000.0}),
        _C("learned", "absolute", "learned table of max_len position embeddings (an index past it is an error)", "Gehring et al. 2017 / Radford et al. 2018 (GPT)"),
        _C("rope", "rotary", "rotate q,k dim pairs by index * base^(-2k/d_h)", "Su et al. 2021, RoFormer", {"base": 10000.0}),
        _C("xpos", "rotary", "RoPE times zeta_k^((i-j)/scale_base), zeta_k = (2k+0.4d)/(1.4d); causal only", "Sun et al. 2023, A Length-Extrapolatable Transformer", {"base": 10000.0, "scale_base": 512.0}, causal_only=True),
        _C("alibi", "bias", "b = -m_h (i - j), geometric head slopes", "Press et al. 2022, Train Short, Test Long (ALiBi)"),
        _C("t5", "bias", "learned scalar per head per log-spaced distance bucket, one table shared by all layers (t5:layer_tables=1: one per layer)", "Raffel et al. 2020, T5", {"buckets": 32, "max_distance": 128, "layer_tables": False}),
        _C("kerple", "bias", "b = -r1 log(1 + r2 (i - j)) (kind=log) or -a (i - j)^p (kind=power), learned per head, kept >= 0.01", "Chi et al. 2022, KERPLE", {"kind": "log"}),
        _C("fire", "bias", "b = MLP(psi(i-j) / psi(max(L', i))), psi(x) = log(c x + 1), c learned, threshold L' = |m| L with m learned (init 1)", "Li et al. 2023, Functional Interpolation for Relative Positions (FIRE)", {"width": 32, "c": 0.1, "L": 512.0}),
        _C("relative", "bias", "learned vector per distance added to keys: q_i (k_j + e[i-j]); distance past the table is an error", "Shaw et al. 2018, Self-Attention with Relative Position Representations"),
        _C("relative-capped", "bias", "relative, distances past the table (max_len) use its last row", "Shaw et al. 2018; Golovneva et al. 2024 (CoPE) Sec. 5.5"),
        _C("cope", "contextual", "gates sigmoid(q k) counted from j to i, interpolated learned position logits, one table shared by all layers (cope:layer_tables=1: one per layer)", "Golovneva et al. 2024, Contextual Position Encoding (CoPE)", {"npos": 64, "sep_keys": False, "alibi": False, "layer_tables": False, "m0": 0.25}, causal_only=True, reads_token_index=False),
        _C("cope-alibi", "contextual", "CoPE with an ALiBi-style bias -m_h p_ij on the contextual position instead of the table, m_h = m0 / 2^h", "Golovneva et al. 2024 (CoPE) App. C, Eq. 10", {"npos": 64, "sep_keys": False, "m0": 0.25}, causal_only=True, reads_token_index=False),
        _C("bipe-rope", "composite", "learned APE on the intra-segment index + RoPE on the segment index", "He et al. 2024, Two Stones Hit One Bird: Bilevel Positional Encoding (BiPE)", {"base": 10000.0}, reads_token_index=False),
        _C("bipe-alibi", "composite", "learned APE on the intra-segment index + ALiBi (slopes x 96) on segment distance", "He et al. 2024, Bilevel Positional Encoding (BiPE)", {"slope_scale": 96.0}, reads_token_index=False),
        _C("dape", "processor", "A = S + B + MLP_heads([S, B]) per (i, j) (2H -> hidden -> H, LeakyReLU); k > 1: DAPE V2", "Zheng et al. 2024, DAPE: Data-Adaptive Positional Encoding", {"k": 1, "hidden": 32}, reads_token_index=False),
        _C("dape-k", "processor", "DAPE V2: the same with causal 1 x k convolutions along the key axis (dape:k=3)", "Zheng et al. 2024, DAPE V2: Process Attention Score as Feature Map, Sec. 3.3 / App. L", {"k": 3, "hidden": 32}, causal_only=True, reads_token_index=False),
    ]
}

# index schemes and eval-time interpolation (a separate option from the pe spec)
INDEX_SCHEMES: dict[str, tuple[str, str]] = {
    "token": ("positions 0..T-1 (default)", "-"),
    "segment": ("BiPE segment index and index within the segment; a separator ends its segment", "He et al. 2024 (BiPE)"),
    "randomized": ("--positions randomized:max=2048: sorted sample of T distinct positions from [0, max), every batch", "Ruoss et al. 2023, Randomized Positional Encodings"),
    "pose": ("--positions pose:chunks=2,target=1024: N chunks with skipping biases drawn per example, training only; "
             "chunks >= T is RandPos; with --rope-scaling, s = target / T fixed in training and evaluation",
             "Zhu et al. 2024, PoSE (ICLR)"),
    "rope-scaling linear": ("--rope-scaling linear: positions / s (position interpolation), s = L_eval / L_train "
                            "(with PoSE: s = target / T throughout)", "Chen et al. 2023, Position Interpolation"),
    "rope-scaling ntk": ("--rope-scaling ntk: base * s^(d/(d-2))", "bloc97 2023, NTK-aware scaled RoPE"),
    "rope-scaling yarn": ("--rope-scaling yarn: NTK-by-parts ramp (alpha=1, beta=32), logits x (0.1 ln s + 1)^2", "Peng et al. 2023, YaRN"),
}

#: name -> (one-line description, paper) for every pe component (used by `synthlab encodings`)
ENCODINGS: dict[str, tuple[str, str]] = {n: (c.description, c.paper) for n, c in COMPONENTS.items()}


def _parse_value(comp: str, key: str, raw: str, default: Any) -> Any:
    """Type a raw parameter string like its default."""
    try:
        if isinstance(default, bool):
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise ValueError(f"pe parameter {comp}:{key}={raw!r} must be {type(default).__name__}") from None
    return raw


def _check_param(comp: str, key: str, value: Any) -> Any:
    """Range checks shared by the parser and build_model(**pe_params)."""
    if comp in ("dape", "dape-k"):
        if key == "k" and (not isinstance(value, int) or value < 1 or value % 2 == 0):
            raise ValueError(f"pe parameter {comp}:k={value!r} must be an odd integer >= 1 (1, 3, 5, 7, ...)")
        if key == "hidden" and (not isinstance(value, int) or value < 1):
            raise ValueError(f"pe parameter {comp}:hidden={value!r} must be a positive integer")
    if key == "npos" and (not isinstance(value, int) or value < 2):
        raise ValueError(f"pe parameter {comp}:npos={value!r} must be an integer >= 2")
    if comp == "kerple" and key == "kind" and value not in ("log", "power"):
        raise ValueError(f"pe parameter kerple:kind={value!r}; allowed: log, power")
    if comp == "t5" and key in ("buckets", "max_distance") and (not isinstance(value, int) or value < 2):
        raise ValueError(f"pe parameter t5:{key}={value!r} must be an integer >= 2")
    if key in ("base", "scale_base", "slope_scale", "c", "L", "m0") and not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"pe parameter {comp}:{key}={value!r} must be a positive number")
    if key == "width" and (not isinstance(value, int) or value < 1):
        raise ValueError(f"pe parameter {comp}:width={value!r} must be a positive integer")
    return value


@dataclass(frozen=True)
class PESpec:
    """A parsed spec string. ``name`` is canonical; ``params`` maps component -> its full params."""

    components: tuple[str, ...]
    params: dict[str, dict[str, Any]]

    @property
    def name(self) -> str:
        parts = []
        for c in self.components:
            defaults = COMPONENTS[c].params
            changed = {k: v for k, v in self.params.get(c, {}).items() if defaults.get(k) != v}
            if c == "cope" and changed.pop("alibi", False):
                c = "cope-alibi"  # cope:alibi=1 is written with its registered name
            if changed:
                kv = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in changed.items())
                parts.append(f"{c}:{kv}")
            else:
                parts.append(c)
        return "+".join(parts)

    def __str__(self) -> str:
        return self.name

    @property
    def causal_only(self) -> bool:
        return any(COMPONENTS[c].causal_only for c in self.components) or self.dape_k > 1

    @property
    def dape_k(self) -> int:
        return int(self.params.get("dape", {}).get("k", 0))

    @property
    def reads_token_index(self) -> bool:
        return any(COMPONENTS[c].reads_token_index for c in self.components)

    def has(self, name: str) -> bool:
        return name in self.components

    @property
    def rotary(self) -> bool:
        return any(c in ("rope", "xpos", "bipe-rope") for c in self.components)

    @property
    def bipe(self) -> bool:
        return any(c.startswith("bipe-") for c in self.components)

    def with_params(self, **pe_params: Any) -> "PESpec":
        """Apply flat keyword params (``k=3``, ``npos=16``) to the component that owns each."""
        params = {c: dict(p) for c, p in self.params.items()}
        for key, value in pe_params.items():
            owners = [c for c in self.components if key in COMPONENTS[c].params]
            if not owners:
                allowed = sorted({k for c in self.components for k in COMPONENTS[c].params})
                raise ValueError(f"unknown pe parameter {key!r} for pe={self.name!r}; allowed: {', '.join(allowed) or 'none'}")
            if len(owners) > 1:
                raise ValueError(f"pe parameter {key!r} is ambiguous in pe={self.name!r} (components {owners}); write it in the spec string, e.g. {owners[0]}:{key}=...")
            comp = owners[0]
            default = COMPONENTS[comp].params[key]
            if isinstance(value, str) and not isinstance(default, str):
                value = _parse_value(comp, key, value, default)
            elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            params[comp][key] = _check_param(comp, key, value)
        return _finish(tuple(self.components), params)


def _finish(components: tuple[str, ...], params: dict[str, dict[str, Any]]) -> PESpec:
    """Normalise aliases, check the combination, sort into canonical order."""
    comps = list(components)
    # aliases: dape-k == dape:k=3 ; cope-alibi == cope:alibi=1
    if "dape-k" in comps:
        p = params.pop("dape-k")
        comps[comps.index("dape-k")] = "dape"
        params["dape"] = {"k": COMPONENTS["dape-k"].params["k"], **p}
    if "cope-alibi" in comps:
        p = params.pop("cope-alibi")
        comps[comps.index("cope-alibi")] = "cope"
        params["cope"] = {**p, "alibi": True}
    if len(set(comps)) != len(comps):
        dup = sorted({c for c in comps if comps.count(c) > 1})
        raise ValueError(f"pe component {dup[0]!r} given twice")
    if "nope" in comps and len(comps) > 1 and set(comps) - {"nope", "dape"}:
        others = [c for c in comps if c not in ("nope", "dape")]
        raise ValueError(f"pe 'nope' cannot be combined with {'+'.join(others)} (nope means no positional encoder; only +dape may follow it)")
    roles: dict[str, list[str]] = {}
    for c in comps:
        role = COMPONENTS[c].role
        if c == "bipe-rope":
            roles.setdefault("absolute", []).append(c)
            roles.setdefault("rotary", []).append(c)
        elif c == "bipe-alibi":
            roles.setdefault("absolute", []).append(c)
            roles.setdefault("bias", []).append(c)
        else:
            roles.setdefault(role, []).append(c)
    if len(roles.get("rotary", [])) > 1:
        raise ValueError(f"pe combines two rotary encoders ({' and '.join(roles['rotary'])}); use at most one of rope, xpos, bipe-rope")
    if len(roles.get("absolute", [])) > 1:
        raise ValueError(f"pe combines two absolute encoders ({' and '.join(roles['absolute'])}); use at most one of sinusoidal, learned, bipe-*")
    if any(c.startswith("bipe-") for c in comps) and len([c for c in comps if c.startswith("bipe-")]) > 1:
        raise ValueError("pe combines bipe-rope and bipe-alibi; choose one")
    order = {r: i for i, r in enumerate(ROLES)}

    def key(c: str) -> tuple[int, int]:
        role = COMPONENTS[c].role
        rank = order.get(role, 0) if role != "composite" else order["absolute"]
        return rank, list(COMPONENTS).index(c)

    comps.sort(key=key)
    full = {c: {**COMPONENTS[c].params, **params.get(c, {})} for c in comps}
    cope = full.get("cope")
    if cope is not None and cope["alibi"] and cope["layer_tables"]:
        raise ValueError("pe parameter layer_tables does not apply to cope-alibi (it has no position table)")
    if cope is not None and not cope["alibi"] and cope["m0"] != COMPONENTS["cope"].params["m0"]:
        raise ValueError("pe parameter cope:m0 sets CoPE-ALiBi's slopes; write cope-alibi:m0=... (or cope:alibi=1,m0=...)")
    return PESpec(components=tuple(comps), params={c: full[c] for c in comps})


def parse_pe(spec: "str | PESpec") -> PESpec:
    """Parse ``'kerple+dape:k=3'`` into a :class:`PESpec`; ValueError names the bad part."""
    if isinstance(spec, PESpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"pe must be a non-empty spec string like 'rope' or 'kerple+dape:k=3', got {spec!r}")
    comps: list[str] = []
    params: dict[str, dict[str, Any]] = {}
    for part in spec.strip().lower().split("+"):
        part = part.strip()
        name, _, rest = part.partition(":")
        name = name.strip()
        if name not in COMPONENTS:
            raise ValueError(f"unknown pe component {name!r} in {spec!r}; allowed: {', '.join(COMPONENTS)}")
        comp = COMPONENTS[name]
        given: dict[str, Any] = {}
        if rest.strip():
            for kv in rest.split(","):
                k, eq, v = kv.partition("=")
                k, v = k.strip().replace("-", "_"), v.strip()
                k = {n.lower(): n for n in comp.params}.get(k, k)  # the spec is lower-cased; FIRE's key is L
                if not eq or not k or not v:
                    raise ValueError(f"pe parameter {kv!r} of {name!r} must be key=value")
                if k == "alibi" and name != "cope":
                    raise ValueError(f"pe parameter {name}:alibi (cope-alibi) requires cope; write cope:alibi=1 or cope-alibi")
                if k == "sep_keys" and name not in ("cope", "cope-alibi"):
                    raise ValueError(f"pe parameter {name}:sep_keys (cope sep-keys) requires cope")
                if k not in comp.params:
                    raise ValueError(f"unknown parameter {k!r} for pe component {name!r}; allowed: {', '.join(comp.params) or 'none'}")
                given[k] = _check_param(name, k, _parse_value(name, k, v, comp.params[k]))
        comps.append(name)
        params[name] = given
    return _finish(tuple(comps), params)
