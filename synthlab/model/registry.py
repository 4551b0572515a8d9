"""The table of encodings, and spec strings <-> position components.

A spec string joins components with ``+``, each with optional ``:key=value[,...]``
(``kerple+dape:k=3``). Each encoding is one row (:class:`Encoding`: its kind, index, checks and
a lazy builder) plus one module class with ``build(cfg)``; the transformer builds whatever the
rows say and tests no names, and parsing a spec imports no torch. Grammar, kinds and adding an
encoding: docs/architecture.md, "Adding an encoding"; from another package: docs/plugins.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from synthlab.core.config import parse_bool
from synthlab.generators.plugins import PluginRegistry

# kind order = canonical order of components in a spec string
ROLES = ("none", "absolute", "contextual", "rotary", "bias", "processor")
INDICES = ("token", "segment", "intra", None)  # None: reads no index (contextual, processors)
_ONE_PER_MODEL = ("rotary", "absolute", "contextual", "processor")  # kinds with one slot (bias: a list)

#: Revision of the encodings' forms; config.json records the one a run was trained with
#: ("pe_revision") and synthlab.load_run rebuilds a run with it (Transformer(revision=...)).
#: Runs saved before it was recorded are revision 1, whose forms were: one CoPE table and one
#: T5 bucket table per layer, CoPE-ALiBi with Press et al.'s ALiBi slopes, token embeddings not
#: scaled by sqrt(d_model) under sinusoidal APE, FIRE's threshold a raw parameter (its state
#: dict key ``L`` is converted on load) and no eps in FIRE's normaliser. Revision 2 had ALiBi
#: symmetric in encoder mode (revision 3: the CHE reference's +0.5 m_h on the keys before the query).
PE_REVISION = 3


# ---- parameter checks -------------------------------------------------------------------


class Check(NamedTuple):
    """A parameter's range check: ``ok(value)``, else ValueError 'pe parameter name:key=value <why>'."""

    ok: Callable[[Any], bool]
    why: str


POSITIVE = Check(lambda v: isinstance(v, (int, float)) and v > 0, "must be a positive number")
POSITIVE_INT = Check(lambda v: isinstance(v, int) and v >= 1, "must be a positive integer")
INT_AT_LEAST_2 = Check(lambda v: isinstance(v, int) and v >= 2, "must be an integer >= 2")
ODD = Check(lambda v: isinstance(v, int) and v >= 1 and v % 2 == 1, "must be an odd integer >= 1 (1, 3, 5, 7, ...)")


def one_of(*allowed: str) -> Check:
    return Check(lambda v: v in allowed, f"must be one of: {', '.join(allowed)}")


# ---- rows ---------------------------------------------------------------------------------


class Part(NamedTuple):
    """One module an encoding puts into the model."""

    kind: str  # absolute | rotary | bias | contextual | processor
    # the index it reads: token | segment | intra | None (a field may shadow tuple.index)
    index: str | None  # type: ignore[assignment]
    build: Any  # the class (its build(cfg) makes the module), or "module:Class" (".module" under synthlab.model)


@dataclass(frozen=True)
class Encoding:
    """One registered name: a row of the table."""

    name: str
    kind: str  # one of ROLES: where its module goes; "none" puts no module in the model
    description: str
    paper: str
    build: Any = None  # see Part.build
    index: str | None = "token"  # see Part.index
    params: dict[str, Any] = field(default_factory=dict)  # name -> default; a given value is typed like it
    checks: dict[str, Check] = field(default_factory=dict)  # name -> its range check
    check: Callable[[dict[str, Any]], None] | None = None  # rules across the full params (raises ValueError)
    causal_only: bool = False  # no encoder mode (causal=False is refused)
    also: Part | None = None  # a composite's second module (BiPE: a learned table on the intra-segment index)
    alias: tuple[str, dict[str, Any]] | None = None  # shorthand for another row with params set (dape-k = dape:k=3)
    hints: dict[str, str] = field(default_factory=dict)  # a key of this row written on another one -> what to write
    max_len_hint: str | None = None  # indices must stay below max_len (a table): the fix to suggest

    @property
    def parts(self) -> tuple[Part, ...]:
        if self.kind == "none" or self.alias is not None:
            return ()
        return (Part(self.kind, self.index, self.build),) + ((self.also,) if self.also else ())

    @property
    def role(self) -> str:
        """The kind, or "composite" for two modules (what `synthlab encodings` shows)."""
        return "composite" if self.also else self.kind

    @property
    def reads_token_index(self) -> bool:  # so randomized / PoSE positions matter
        return any(p.index == "token" for p in self.parts)

    def check_param(self, key: str, value: Any) -> Any:
        """The value if it passes its range check (parser and build_model(**pe_params) alike)."""
        c = self.checks.get(key)
        if c is not None and not c.ok(value):
            raise ValueError(f"pe parameter {self.name}:{key}={value!r} {c.why}")
        return value


def _check_cope(p: dict[str, Any]) -> None:
    if p["alibi"] and p["layer_tables"]:
        raise ValueError("pe parameter layer_tables does not apply to cope-alibi (it has no position table)")
    if not p["alibi"] and p["m0"] != COMPONENTS["cope"].params["m0"]:
        raise ValueError(
            "pe parameter cope:m0 sets CoPE-ALiBi's slopes; write cope-alibi:m0=... (or cope:alibi=1,m0=...)"
        )


_E = Encoding
_BASE = {"base": POSITIVE}
_COPE = {"npos": INT_AT_LEAST_2, "m0": POSITIVE}
_DAPE = {"k": ODD, "hidden": POSITIVE_INT}
_BIPE_TABLE = Part("absolute", "intra", ".encoders.absolute:Learned")
_ROWS = [
    _E(
        "nope",
        "none",
        "no positional information; the causal mask alone",
        "Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization in Transformers",
        index=None,
    ),
    _E(
        "sinusoidal",
        "absolute",
        "fixed sin/cos of the index added to the token embeddings",
        "Vaswani et al. 2017, Attention Is All You Need",
        ".encoders.absolute:Sinusoidal",
        params={"base": 10000.0},
        checks=_BASE,
    ),
    _E(
        "learned",
        "absolute",
        "learned table of max_len position embeddings (an index past it is an error)",
        "Gehring et al. 2017 / Radford et al. 2018 (GPT)",
        ".encoders.absolute:Learned",
        max_len_hint="raise max_len",
    ),
    _E(
        "rope",
        "rotary",
        "rotate q,k dim pairs by index * base^(-2k/d_h)",
        "Su et al. 2021, RoFormer",
        ".encoders.rotary:Rotary",
        params={"base": 10000.0},
        checks=_BASE,
    ),
    _E(
        "xpos",
        "rotary",
        "RoPE times zeta_k^((i-j)/scale_base), zeta_k = (2k+0.4d)/(1.4d); causal only",
        "Sun et al. 2023, A Length-Extrapolatable Transformer",
        ".encoders.rotary:XPos",
        params={"base": 10000.0, "scale_base": 512.0},
        checks={**_BASE, "scale_base": POSITIVE},
        causal_only=True,
    ),
    _E(
        "alibi",
        "bias",
        "b = -m_h (i - j), geometric head slopes",
        "Press et al. 2022, Train Short, Test Long (ALiBi)",
        ".encoders.bias:ALiBi",
    ),
    _E(
        "t5",
        "bias",
        "learned scalar per head per log-spaced distance bucket, one table shared by all layers (t5:layer_tables=1: "
        "one per layer)",
        "Raffel et al. 2020, T5",
        ".encoders.bias:T5Bias",
        params={"buckets": 32, "max_distance": 128, "layer_tables": False},
        checks={"buckets": INT_AT_LEAST_2, "max_distance": INT_AT_LEAST_2},
    ),
    _E(
        "kerple",
        "bias",
        "b = -r1 log(1 + r2 (i - j)) (kind=log) or -a (i - j)^p (kind=power), learned per head, kept >= 0.01",
        "Chi et al. 2022, KERPLE",
        ".encoders.bias:Kerple",
        params={"kind": "log"},
        checks={"kind": one_of("log", "power")},
    ),
    _E(
        "fire",
        "bias",
        "b = MLP(psi(i-j) / psi(max(L', i))), psi(x) = log(c x + 1), c learned, threshold L' = |m| L with m learned "
        "(init 1), L 512 as the FIRE listing's init_L",
        "Li et al. 2023, Functional Interpolation for Relative Positions (FIRE)",
        ".encoders.bias:FIRE",
        params={"width": 32, "c": 0.1, "L": 512.0},
        checks={"width": POSITIVE_INT, "c": POSITIVE, "L": POSITIVE},
    ),
    _E(
        "relative",
        "bias",
        "learned vector per distance added to keys: q_i (k_j + e[i-j]); distance past the table is an error",
        "Shaw et al. 2018, Self-Attention with Relative Position Representations",
        ".encoders.bias:Relative",
        max_len_hint="raise max_len or use relative-capped",
    ),
    _E(
        "relative-capped",
        "bias",
        "relative, distances past the table (max_len) use its last row; max_len defaults to the longest evaluated "
        "length, so CoPE Sec. 5.5's cap at the training context needs --set model.max_len=<training length>",
        "Shaw et al. 2018; Golovneva et al. 2024 (CoPE) Sec. 5.5",
        ".encoders.bias:RelativeCapped",
    ),
    _E(
        "cope",
        "contextual",
        "gates sigmoid(q k) counted from j to i, interpolated learned position logits, one table shared by all "
        "layers (cope:layer_tables=1: one per layer)",
        "Golovneva et al. 2024, Contextual Position Encoding (CoPE)",
        ".encoders.contextual:CoPE",
        index=None,
        params={"npos": 64, "sep_keys": False, "alibi": False, "layer_tables": False, "m0": 0.25},
        checks=_COPE,
        check=_check_cope,
        causal_only=True,
        hints={
            "alibi": "(cope-alibi) requires cope; write cope:alibi=1 or cope-alibi",
            "sep_keys": "(cope sep-keys) requires cope",
        },
    ),
    _E(
        "cope-alibi",
        "contextual",
        "CoPE with an ALiBi-style bias -m_h p_ij on the contextual position instead of the table, m_h = m0 / 2^h "
        "(Eq. 10 writes + m p_ij with m > 0; the minus is ALiBi's)",
        "Golovneva et al. 2024 (CoPE) App. C, Eq. 10",
        index=None,
        params={"npos": 64, "sep_keys": False, "m0": 0.25},
        checks=_COPE,
        causal_only=True,
        alias=("cope", {"alibi": True}),
    ),
    _E(
        "bipe-rope",
        "rotary",
        "learned APE on the intra-segment index + RoPE on the segment index",
        "He et al. 2024, Two Stones Hit One Bird: Bilevel Positional Encoding (BiPE)",
        ".encoders.rotary:Rotary",
        index="segment",
        params={"base": 10000.0},
        checks=_BASE,
        also=_BIPE_TABLE,
    ),
    _E(
        "bipe-alibi",
        "bias",
        "learned APE on the intra-segment index + ALiBi (slopes x 96) on segment distance",
        "He et al. 2024, Bilevel Positional Encoding (BiPE)",
        ".encoders.bias:ALiBi",
        index="segment",
        params={"slope_scale": 96.0},
        checks={"slope_scale": POSITIVE},
        also=_BIPE_TABLE,
    ),
    _E(
        "dape",
        "processor",
        "A = S + B + MLP_heads([S, B]) per (i, j) (2H -> hidden -> H, LeakyReLU); k > 1: DAPE V2",
        "Zheng et al. 2024, DAPE: Data-Adaptive Positional Encoding",
        ".processors:DAPE",
        index=None,
        params={"k": 1, "hidden": 32},
        checks=_DAPE,
    ),
    _E(
        "dape-k",
        "processor",
        "DAPE V2: the same with 1 x k convolutions along the key axis (dape:k=3), on tril([S, B]) when causal",
        "Zheng et al. 2024, DAPE V2: Process Attention Score as Feature Map, Sec. 3.3 / App. L",
        index=None,
        params={"k": 3, "hidden": 32},
        checks=_DAPE,
        alias=("dape", {}),
    ),
]


def _check_row(row: Encoding) -> None:
    """ValueError for a malformed row (the built-ins pass it at import, plugins when they load)."""
    name = row.name
    if not isinstance(name, str) or not name or name != name.strip().lower() or any(ch in name for ch in "+:,= "):
        raise ValueError(f"encoding name {name!r} must be lower case without '+', ':', ',', '=' or spaces")
    if row.kind not in ROLES or row.index not in INDICES:
        raise ValueError(f"encoding {name!r}: kind must be one of {ROLES} and index one of {INDICES}")
    if row.alias is None and row.kind != "none" and row.build is None:
        raise ValueError(f"encoding {name!r} has no builder")
    if set(row.checks) - set(row.params):
        raise ValueError(
            f"encoding {name!r} checks parameters it does not have: {sorted(set(row.checks) - set(row.params))}"
        )


def _adopt(entry_point: str, row: object) -> None:
    """Register an encoding plugin: an :class:`Encoding` row named like its entry point."""
    if not isinstance(row, Encoding):
        raise TypeError(f"the entry point names {row!r}, not a synthlab.model.registry.Encoding row")
    if row.name != entry_point:
        raise ValueError(f"the entry point is named {entry_point!r} but the encoding's name is {row.name!r}")
    if entry_point in COMPONENTS.builtins or COMPONENTS.get(entry_point) is not row:  # else its module registered it
        register(row)


for _row in _ROWS:
    _check_row(_row)

#: name -> row, in registration order (the order `synthlab encodings` lists them): the
#: built-ins, then (on first read) the plugins of the entry-point group synthlab.encodings
COMPONENTS: PluginRegistry[Encoding] = PluginRegistry(
    "synthlab.encodings", "encoding", {r.name: r for r in _ROWS}, adopt=_adopt
)


class _Descriptions(Mapping[str, tuple[str, str]]):
    """name -> (one-line description, paper) of every row: a view of COMPONENTS, never a copy."""

    def __getitem__(self, name: str) -> tuple[str, str]:
        row = COMPONENTS[name]
        return row.description, row.paper

    def __iter__(self) -> Iterator[str]:
        return iter(COMPONENTS)

    def __len__(self) -> int:
        return len(COMPONENTS)


#: name -> (one-line description, paper) for every pe component (used by `synthlab encodings`)
ENCODINGS: Mapping[str, tuple[str, str]] = _Descriptions()


def register(row: Encoding) -> Encoding:
    """Add an encoding to the table (ValueError if the name is taken or the row is malformed)."""
    _check_row(row)
    if row.name in COMPONENTS:
        by = COMPONENTS.origin(row.name)
        raise ValueError(f"encoding {row.name!r} is already registered" + (f" (by plugin {by})" if by else ""))
    COMPONENTS[row.name] = row
    return row


def unregister(name: str) -> None:
    """Remove a registered encoding (tests that register a toy one clean up with it)."""
    COMPONENTS.pop(name, None)


def names_of(kind: str) -> list[str]:
    """The names whose modules include one of ``kind`` (for messages: "rope, xpos, bipe-rope")."""
    return [n for n, r in COMPONENTS.items() if any(p.kind == kind for p in r.parts)]


def builder(part: Part) -> Any:
    """The class that builds a part (imported on first use: the rows stay torch-free)."""
    if not isinstance(part.build, str):
        return part.build
    module, _, name = part.build.partition(":")
    return getattr(importlib.import_module(module, package=__package__), name)


@dataclass(frozen=True)
class BuildConfig:
    """What a builder gets: the model's shape, its encoding's full params and the index it reads."""

    params: dict[str, Any]
    index: str | None
    d_model: int
    n_heads: int
    max_len: int
    causal: bool
    revision: int = PE_REVISION
    scores_bias: bool = False  # the layers add a bias or contextual term to the scores (DAPE's input)
    shared: Any = None  # what the class's build_shared(cfg) made once for all layers (tied tables)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


# index schemes and eval-time interpolation (a separate option from the pe spec)
INDEX_SCHEMES: dict[str, tuple[str, str]] = {
    "token": ("positions 0..T-1 (default)", "-"),
    "segment": (
        "BiPE segment index and index within the segment; a separator ends its segment",
        "He et al. 2024 (BiPE)",
    ),
    "randomized": (
        "--positions randomized:max=2048: sorted sample of T distinct positions from [0, max), every batch",
        "Ruoss et al. 2023, Randomized Positional Encodings",
    ),
    "pose": (
        "--positions pose:chunks=2,target=1024: N chunks with skipping biases drawn per example, training only; "
        "u_0 = 0 and chunk lengths from uniform cut points (first chunk 1..T-1 at N = 2, the paper's Fig. 6 code; "
        "the released train_pose.py draws it from 1..(T+1)//2); "
        "chunks >= T is RandPos; with --rope-scaling, s = target / T fixed in training and evaluation",
        "Zhu et al. 2024, PoSE (ICLR)",
    ),
    "rope-scaling linear": (
        "--rope-scaling linear: positions / s (position interpolation), s = L_eval / L_train "
        "(with PoSE: s = target / T throughout)",
        "Chen et al. 2023, Position Interpolation",
    ),
    "rope-scaling ntk": ("--rope-scaling ntk: base * s^(d/(d-2))", "bloc97 2023, NTK-aware scaled RoPE"),
    "rope-scaling yarn": (
        "--rope-scaling yarn: NTK-by-parts ramp (alpha=1, beta=32; linear in r as the paper's formula, "
        "the reference code ramps over the pair index), logits x (0.1 ln s + 1)^2",
        "Peng et al. 2023, YaRN",
    ),
}


# ---- spec strings -------------------------------------------------------------------------


def _parse_value(comp: str, key: str, raw: str, default: Any) -> Any:
    """Type a raw parameter string like its default."""
    try:
        if isinstance(default, bool):
            return parse_bool(raw)  # the true/false words of every setting (synthlab.core.config)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise ValueError(f"pe parameter {comp}:{key}={raw!r} must be {type(default).__name__}") from None
    return raw


@dataclass(frozen=True)
class PESpec:
    """A parsed spec string. ``name`` is canonical; ``params`` maps component -> its full params."""

    components: tuple[str, ...]
    params: dict[str, dict[str, Any]]

    def _part_name(self, c: str) -> str:
        """How component ``c`` is written: its name (or an alias's) and the params not at their default."""
        defaults = COMPONENTS[c].params
        changed = {k: v for k, v in self.params.get(c, {}).items() if defaults.get(k) != v}
        for alias, row in COMPONENTS.items():  # cope:alibi=1 is written with its registered name, cope-alibi
            if (
                row.alias
                and row.alias[0] == c
                and row.alias[1]
                and all(changed.get(k) == v for k, v in row.alias[1].items())
            ):
                c, changed = alias, {k: v for k, v in changed.items() if k not in row.alias[1]}
                break
        if not changed:
            return c
        return c + ":" + ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in changed.items())

    @property
    def name(self) -> str:
        return "+".join(self._part_name(c) for c in self.components)

    def __str__(self) -> str:
        return self.name

    @property
    def causal_only_parts(self) -> list[str]:
        """The components that cannot run in encoder mode, as written ("xpos", "dape:k=3")."""
        return [self._part_name(c) for c in self.components if COMPONENTS[c].causal_only]

    @property
    def causal_only(self) -> bool:
        return bool(self.causal_only_parts)

    @property
    def reads_token_index(self) -> bool:
        return any(COMPONENTS[c].reads_token_index for c in self.components)

    def has(self, name: str) -> bool:
        return name in self.components

    @property
    def parts(self) -> list[tuple[str, Part]]:
        """(component, part) for every module the spec puts into the model, in canonical order."""
        return [(c, p) for c in self.components for p in COMPONENTS[c].parts]

    @property
    def rotary(self) -> bool:
        return any(p.kind == "rotary" for _, p in self.parts)

    @property
    def bipe(self) -> bool:
        """Reads BiPE's segment ids (segment or intra-segment index)."""
        return any(p.index in ("segment", "intra") for _, p in self.parts)

    def with_params(self, **pe_params: Any) -> "PESpec":
        """Apply flat keyword params (``k=3``, ``npos=16``) to the component that owns each."""
        params = {c: dict(p) for c, p in self.params.items()}
        for key, value in pe_params.items():
            owners = [c for c in self.components if key in COMPONENTS[c].params]
            if not owners:
                allowed = sorted({k for c in self.components for k in COMPONENTS[c].params})
                raise ValueError(
                    f"unknown pe parameter {key!r} for pe={self.name!r}; allowed: {', '.join(allowed) or 'none'}"
                )
            if len(owners) > 1:
                raise ValueError(
                    f"pe parameter {key!r} is ambiguous in pe={self.name!r} (components {owners}); write it in the "
                    f"spec string, e.g. {owners[0]}:{key}=..."
                )
            comp = owners[0]
            default = COMPONENTS[comp].params[key]
            if isinstance(value, str) and not isinstance(default, str):
                value = _parse_value(comp, key, value, default)
            elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            params[comp][key] = COMPONENTS[comp].check_param(key, value)
        return _finish(tuple(self.components), params)


def _finish(components: tuple[str, ...], params: dict[str, dict[str, Any]]) -> PESpec:
    """Resolve aliases, check the combination, sort into canonical order."""
    comps = list(components)
    for i, c in enumerate(comps):  # dape-k == dape:k=3 ; cope-alibi == cope:alibi=1
        row = COMPONENTS[c]
        if row.alias is not None:
            target, fixed = row.alias
            params[target] = {**row.params, **params.pop(c, {}), **fixed}
            comps[i] = target
    if len(set(comps)) != len(comps):
        dup = sorted({c for c in comps if comps.count(c) > 1})
        raise ValueError(f"pe component {dup[0]!r} given twice")
    for lone in (c for c in comps if COMPONENTS[c].kind == "none"):  # nope: nothing but a processor may follow
        others = [c for c in comps if COMPONENTS[c].kind not in ("none", "processor")]
        if others:
            processors = " / +".join(n for n, r in COMPONENTS.items() if r.kind == "processor" and r.alias is None)
            raise ValueError(
                f"pe {lone!r} cannot be combined with {'+'.join(others)} "
                f"({lone} means no positional encoder; only +{processors} may follow it)"
            )
    for kind in _ONE_PER_MODEL:
        have = [c for c in comps if any(p.kind == kind for p in COMPONENTS[c].parts)]
        if len(have) > 1:
            raise ValueError(
                f"pe combines two {kind} encoders ({' and '.join(have)}); use at most one of "
                f"{', '.join(names_of(kind))}"
            )
    order = {r: i for i, r in enumerate(ROLES)}
    names = list(COMPONENTS)

    def key(c: str) -> tuple[int, int]:
        row = COMPONENTS[c]
        return min((order[p.kind] for p in row.parts), default=order[row.kind]), names.index(c)

    comps.sort(key=key)
    full = {c: {**COMPONENTS[c].params, **params.get(c, {})} for c in comps}
    for c in comps:
        if (check := COMPONENTS[c].check) is not None:
            check(full[c])
    return PESpec(components=tuple(comps), params=full)


def parse_pe(spec: "str | PESpec", *, dape_k: int | None = None) -> PESpec:
    """Parse ``'kerple+dape:k=3'`` into a :class:`PESpec`; ValueError names the bad part.
    ``dape_k`` (a sweep's dape_k axis, a run config's field): the kernel of the encoding's DAPE,
    ``parse_pe("kerple+dape", dape_k=3)`` is ``kerple+dape:k=3``; an encoding without DAPE has
    none to set, and one whose spec fixes a kernel other than DAPE's default is refused."""
    if dape_k is not None:
        return _with_dape_k(parse_pe(spec), dape_k)
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
                if k not in comp.params:
                    hint = next((r.hints[k] for r in COMPONENTS.values() if k in r.hints), None)
                    if hint is not None:
                        raise ValueError(f"pe parameter {name}:{k} {hint}")
                    raise ValueError(
                        f"unknown parameter {k!r} for pe component {name!r}; allowed: "
                        f"{', '.join(comp.params) or 'none'}"
                    )
                given[k] = comp.check_param(k, _parse_value(name, k, v, comp.params[k]))
        comps.append(name)
        params[name] = given
    return _finish(tuple(comps), params)


def _with_dape_k(spec: PESpec, k: int) -> PESpec:
    if not spec.has("dape"):
        return spec
    if spec.params["dape"]["k"] != COMPONENTS["dape"].params["k"]:
        raise ValueError(f"encoding {spec.name!r} already fixes the DAPE kernel; drop k= or the dape_k axis")
    return spec.with_params(k=k)
