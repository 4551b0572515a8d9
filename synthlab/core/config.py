"""Typed run configuration (task, model, encoding, training) and its typed overrides.

A run is fully described by a :class:`RunConfig` (task and parameters, the encoding spec
``pe``, ``positions``, ``rope_scaling``, the axes ``dape_k`` / ``pose_chunks``, a
:class:`ModelConfig` and a :class:`TrainConfig`);
:func:`synthlab.run.training.resolve_config` builds one from a preset plus ``--set`` overrides
and validates it before anything runs. Presets and the ``--set`` keys (dotted, or bare when
unambiguous; booleans read by :func:`parse_bool`): docs/interfaces.md, "Commands", "Presets".
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

# the one true/false reading, kept at the lowest layer (synthlab.generators imports nothing else from synthlab)
from synthlab.generators.base import FALSE_WORDS, SEED_MAX, TRUE_WORDS, parse_bool  # noqa: F401 (re-exported)

PRESETS = ("smoke", "quick", "paper")
SCHEDULES = ("linear", "cosine", "constant")
ROPE_SCALINGS = ("linear", "ntk", "yarn")
# train.precision -> Lightning's name for it. bf16-mixed: matmuls under torch.autocast in
# bfloat16, weights, optimizer state and the position arithmetic (CoPE's gate sums) in float32
PRECISIONS = {"fp32": "32-true", "bf16-mixed": "bf16-mixed"}
# torch.compile's modes (train.compile_mode); reduce-overhead replays a step's GPU launches as CUDA graphs
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
MAX_STEPS = 10**9  # a step count needs no memory; past this it is a typo, not a run
# sanity limits (besides each field's range): a model whose weights, gradients and AdamW state
# (16 bytes a parameter) exceed any single machine's memory is refused before anything is built
MAX_PARAMS = 10**10


def _ge(lo: float) -> Any:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def _gt(lo: float) -> Any:
    return lambda v: None if v > lo else f"must be > {lo}"


def _range(lo: float, hi: float) -> Any:
    """lo <= v <= hi; the upper bound is a sanity limit (nothing larger can run here)."""
    return lambda v: f"must be >= {lo}" if v < lo else f"must be <= {hi:,}" if v > hi else None


def _in(*allowed: Any) -> Any:
    return lambda v: None if v in allowed else f"must be one of {', '.join(map(str, allowed))}"


def _unit_interval_open_right(v: float) -> str | None:
    return None if 0.0 <= v < 1.0 else "must be in [0, 1)"


def _opt(check: Any) -> Any:
    """``check`` for a value that may also be None."""
    return lambda v: None if v is None else check(v)


def _f(default: Any, check: Any = None, help: str = "") -> Any:
    return field(default=default, metadata={"check": check, "help": help})


@dataclass
class ModelConfig:
    """The Transformer's shape (pre-LN decoder; ``causal=False`` = bidirectional encoder)."""

    d_model: int = _f(64, _range(1, 2**16), "hidden size")
    n_layers: int = _f(2, _range(1, 1024), "number of layers")
    n_heads: int = _f(4, _range(1, 2**16), "attention heads (must divide d_model)")
    dropout: float = _f(0.0, _unit_interval_open_right, "dropout probability")
    tie_embeddings: bool = _f(False, None, "share input embedding and output head")
    causal: bool = _f(True, None, "causal decoder (True) or bidirectional encoder (False)")
    max_len: int | None = _f(
        None,
        _opt(_range(1, 2**20)),
        "position table size; none = longest evaluated sequence "
        "(then, on tasks of varied lengths, train.eval_samples sizes the learned / relative / "
        "BiPE tables and so the random init of every weight drawn after them)",
    )


@dataclass
class TrainConfig:
    """Optimisation (AdamW, warmup then linear/cosine decay to 0) and evaluation sizes."""

    steps: int = _f(1000, _range(1, MAX_STEPS), "optimizer steps")
    batch_size: int = _f(32, _range(1, 2**14), "sequences per step")
    lr: float = _f(1e-3, _gt(0.0), "peak learning rate")
    warmup: int = _f(0, _range(0, MAX_STEPS), "linear warmup steps")
    schedule: str = _f("linear", _in(*SCHEDULES), "decay after warmup")
    weight_decay: float = _f(
        0.1,
        _ge(0.0),
        "AdamW weight decay on the parameters of 2+ dims: weight matrices, the "
        "token embedding and the learned position tables (learned APE, T5 / Shaw tables, CoPE's "
        "pos_emb, DAPE's and FIRE's MLP weights); none on biases, LayerNorm, Kerple's and FIRE's scalars",
    )
    grad_clip: float = _f(1.0, _ge(0.0), "max gradient norm (0 = off)")
    n_train: int | None = _f(None, _opt(_range(1, 10**7)), "fixed training set size; none = fresh samples every step")
    eval_samples: int = _f(500, _range(1, 10**6), "evaluation samples per split (per length group)")
    data_workers: int | None = _f(
        None,
        _opt(_range(0, 64)),
        "processes building training batches ahead of the "
        "steps (none = 2 on a GPU, 0 on CPU, whose cores train); the same batches either way",
    )
    eval_batch_size: int = _f(64, _range(1, 2**14), "evaluation batch size")
    eval_every: int | None = _f(
        None,
        _opt(lambda v: None if v >= 1 else "must be >= 1 (none = off)"),
        "learning curve: evaluate the held-out splits every N steps and at the last "
        "(record['curve']); none = off. Changes no weight or metric",
    )
    seed: int = _f(0, _range(0, SEED_MAX), "run seed (data, init, positions)")
    threads: int = _f(0, _range(0, 4096), "CPU threads for this run (0 = torch's default); tiny models run faster on 1")
    precision: str = _f(
        "fp32",
        _in(*PRECISIONS),
        "fp32, or bf16-mixed (autocast: matmuls in bfloat16, weights and "
        "optimizer state in float32; evaluation under the same autocast)",
    )
    compile: bool = _f(
        False,
        None,
        "torch.compile the model for training (the first steps pay the compilation; evaluation runs eagerly)",
    )
    compile_mode: str = _f(
        "default",
        _in(*COMPILE_MODES),
        "torch.compile's mode with train.compile: default, "
        "reduce-overhead (CUDA graphs on a GPU: a step's launches "
        "replayed at once; as default on CPU), max-autotune[-no-cudagraphs]",
    )
    deterministic: bool = _f(
        False,
        None,
        "GPU: deterministic algorithms only (cuBLAS workspace, no atomics; slower). "
        "CPU runs repeat exactly for a given thread count either way",
    )
    checkpoint_every: int = _f(
        1000,
        _ge(0),
        "save a resumable checkpoint every N steps under OUT/.checkpoints/ (0 = off; never at the last step)",
    )
    checkpoint_minutes: float = _f(
        10.0, _ge(0.0), "also save one when this many minutes passed since the last (0 = off)"
    )
    check_memory: bool = _f(True, None, "refuse a run whose estimated memory exceeds what this machine has available")


@dataclass
class RunConfig:
    """Everything one run needs; ``to_dict`` is what ``config.json`` holds."""

    task: str
    task_params: dict[str, Any]
    pe: str
    preset: str = "quick"
    positions: str | None = None
    rope_scaling: str | None = None
    # sweep axes that set one parameter of pe / positions: DAPE's kernel, PoSE's chunk number
    # (applied where the encoding and the scheme are built: parse_pe / parse_positions)
    dape_k: int | None = None
    pose_chunks: int | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """The inverse of ``to_dict``. Keys it does not know are dropped, so a run's
        ``config.json`` (which adds max_len, run_id, ...) reads back too."""
        known = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        for name, section in (("model", ModelConfig), ("train", TrainConfig)):
            names = {f.name for f in dataclasses.fields(section)}
            d[name] = section(**{k: v for k, v in (d.get(name) or {}).items() if k in names})
        return cls(**d)


# ----------------------------------------------------------------------------------------
# typed overrides

_SECTIONS = {"model": ModelConfig, "train": TrainConfig}
_TOP_LEVEL = {"pe": str, "positions": str | None, "rope_scaling": str | None}
_NONE_WORDS = ("none", "null", "")


def field_types(cls: type) -> dict[str, Any]:
    return dict(_field_types(cls))


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:  # get_type_hints is slow; a sweep resolves every cell
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def coerce(key: str, value: Any, tp: Any) -> Any:
    """Convert ``value`` (often a string from the command line) to type ``tp`` or raise a
    ValueError naming ``key`` and the expected type."""
    args = typing.get_args(tp)
    optional = (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args
    if optional:
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
            return None
        tp = next(a for a in args if a is not type(None))
    if tp is bool:
        try:
            return parse_bool(value)
        except ValueError:
            raise ValueError(f"{key}: expected true or false, got {value!r}") from None
    if tp is int:
        if isinstance(value, bool):
            raise ValueError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            s = value.strip().replace("_", "")
            try:
                return int(s)
            except ValueError:
                try:
                    f = float(s)
                except ValueError:
                    f = math.nan
                if math.isfinite(f) and f.is_integer():
                    return int(f)
        raise ValueError(f"{key}: expected an integer{' or none' if optional else ''}, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{key}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            out = float(value)
        elif isinstance(value, str):
            try:
                out = float(value.strip())
            except ValueError:
                raise ValueError(f"{key}: expected a number, got {value!r}") from None
        else:
            raise ValueError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(out):
            raise ValueError(f"{key}: expected a finite number, got {value!r}")
        return out
    if tp is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"{key}: expected a string, got {value!r}")
    raise TypeError(f"unsupported config type {tp!r} for {key}")  # pragma: no cover


def check_fields(obj: Any, section: str) -> None:
    """Range checks of a config dataclass; ValueError naming ``section.field``."""
    for f in dataclasses.fields(obj):
        check = f.metadata.get("check")
        value = getattr(obj, f.name)
        if check is not None:
            problem = check(value)
            if problem:
                raise ValueError(f"{section}.{f.name} {problem}, got {value!r}")


def setting_keys(task_params: dict[str, Any] | None = None) -> list[str]:
    """Every dotted key ``--set`` accepts (task parameters included when given)."""
    keys = [f"{s}.{name}" for s, cls in _SECTIONS.items() for name in field_types(cls)]
    keys += list(_TOP_LEVEL)
    keys += [f"task.{k}" for k in (task_params or {})]
    return keys


def resolve_key(key: str, task_param_names: list[str] | tuple[str, ...]) -> tuple[str, str]:
    """``"d_model"`` -> ``("model", "d_model")``; ``"task.n_pairs"`` -> ``("task", "n_pairs")``;
    ``"pe"`` -> ``("", "pe")``. ValueError for an unknown or ambiguous key."""
    from synthlab.core.errors import did_you_mean

    key = key.strip()
    section, dot, name = key.partition(".")
    if dot:
        if section == "task":
            if name in task_param_names:
                return "task", name
            allowed = ", ".join(f"task.{k}" for k in task_param_names) or "none"
            hint = did_you_mean(key, [f"task.{k}" for k in task_param_names])
            raise ValueError(f"unknown setting {key!r}{hint or f' (task parameters: {allowed})'}")
        if section in _SECTIONS and name in field_types(_SECTIONS[section]):
            return section, name
        raise ValueError(f"unknown setting {key!r}{_closest(key, task_param_names)}")
    hits = [(s, key) for s, cls in _SECTIONS.items() if key in field_types(cls)]
    if key in _TOP_LEVEL:
        hits.append(("", key))
    if key in task_param_names:
        hits.append(("task", key))
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        names = ", ".join(f"{s}.{n}" if s else n for s, n in hits)
        raise ValueError(f"setting {key!r} is ambiguous (use one of: {names})")
    raise ValueError(f"unknown setting {key!r}{_closest(key, task_param_names)}")


def _closest(key: str, task_param_names: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean model.d_model?)``: the closest keys (bare or dotted) to a typo, one line,
    not the list of every key (`synthlab train --help` and docs/results.md list them)."""
    from synthlab.core.errors import did_you_mean

    dotted = setting_keys(dict.fromkeys(task_param_names))
    bare = {k.partition(".")[2] or k: k for k in dotted}
    hint = did_you_mean(key, dotted)
    if not hint and "." not in key:
        hint = did_you_mean(key, bare)
        close = hint[len(" (did you mean ") : -len("?)")].split(" or ") if hint else []
        hint = f" (did you mean {' or '.join(bare[c] for c in close)}?)" if close else ""
    return hint or " (the settings: `synthlab train --help`; task parameters: `synthlab tasks`)"


def apply_overrides(
    cfg: RunConfig, overrides: dict[str, Any] | None, task_param_names: list[str] | tuple[str, ...]
) -> RunConfig:
    """A copy of ``cfg`` with ``overrides`` applied (typed; range checks are separate)."""
    cfg = copy.deepcopy(cfg)
    for key, value in (overrides or {}).items():
        section, name = resolve_key(str(key), task_param_names)
        if section == "task":
            cfg.task_params[name] = value  # typed and checked by the task itself
        elif section == "":
            setattr(cfg, name, coerce(name, value, _TOP_LEVEL[name]))
        else:
            obj = getattr(cfg, section)
            setattr(obj, name, coerce(f"{section}.{name}", value, field_types(type(obj))[name]))
    return cfg


def validate_fields(cfg: RunConfig) -> None:
    """Range and cross-field checks of the model / train sections."""
    check_fields(cfg.model, "model")
    check_fields(cfg.train, "train")
    if cfg.model.d_model % cfg.model.n_heads:
        raise ValueError(
            f"model.d_model ({cfg.model.d_model}) must be divisible by model.n_heads ({cfg.model.n_heads})"
        )
    m = cfg.model
    if 12 * m.n_layers * m.d_model**2 > MAX_PARAMS:  # 12 L d^2: attention + MLP weights
        raise ValueError(
            f"model.d_model={m.d_model} x model.n_layers={m.n_layers} is about "
            f"{12 * m.n_layers * m.d_model**2:.1e} parameters, over the limit of {MAX_PARAMS:.0e} "
            "(16 bytes each to train: more memory than any one machine has)"
        )
    if cfg.train.compile_mode != "default" and not cfg.train.compile:
        raise ValueError(f"train.compile_mode={cfg.train.compile_mode} needs train.compile=true")
    if cfg.train.warmup > cfg.train.steps:
        raise ValueError(f"train.warmup must be <= train.steps ({cfg.train.steps}), got {cfg.train.warmup}")
    if cfg.train.eval_every is not None and cfg.train.eval_every > cfg.train.steps:
        raise ValueError(
            f"train.eval_every must be <= train.steps ({cfg.train.steps}; none = off), got {cfg.train.eval_every}"
        )
    if cfg.rope_scaling is not None and cfg.rope_scaling not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling must be one of none, {', '.join(ROPE_SCALINGS)}; got {cfg.rope_scaling!r}")
    for name in ("dape_k", "pose_chunks"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer or none, got {value!r}")
    if not isinstance(cfg.pe, str) or not cfg.pe.strip():
        raise ValueError(f"pe must be a non-empty encoding spec string (see `synthlab encodings`), got {cfg.pe!r}")
