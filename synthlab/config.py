"""Typed run configuration (task, model, encoding, training) and the per-task presets.

A run is fully described by a :class:`RunConfig`: the task and its parameters, the encoding
spec string (``pe``), the training-time index scheme (``positions``), the eval-time rope
scaling, a :class:`ModelConfig` and a :class:`TrainConfig`. ``resolve_config`` in
:mod:`synthlab.training` builds one from a preset plus ``--set key=value`` overrides and
validates all of it before anything runs.

Presets (spec/interfaces.md):
- ``smoke``: seconds; tests and CI only (tiny model, tens of steps, short sequences).
- ``quick``: minutes on a 2-core CPU, sized so the paper's qualitative ordering still shows
  (spec/tasks.md, "Quick-scale evidence").
- ``paper``: the source paper's settings (GPU-scale).

Override keys: dotted (``model.d_model=32``, ``train.lr=3e-4``, ``task.n_pairs=64``) or bare
when unambiguous (``d_model=32``, ``steps=100``, ``n_pairs=64``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

PRESETS = ("smoke", "quick", "paper")
SCHEDULES = ("linear", "cosine", "constant")
ROPE_SCALINGS = ("linear", "ntk", "yarn")

#: the fifteen Chomsky Hierarchy Evaluation tasks (Deletang et al. 2023); they share one preset
CHE_TASKS = (
    "even_pairs", "modular_arithmetic", "parity_check", "cycle_navigation",
    "stack_manipulation", "reverse_string", "modular_arithmetic_brackets", "solve_equation",
    "duplicate_string", "missing_duplicate_string", "odds_first", "binary_addition",
    "binary_multiplication", "compute_sqrt", "bucket_sort",
)


def _ge(lo: float) -> Any:
    return lambda v: None if v >= lo else f"must be >= {lo}"


def _gt(lo: float) -> Any:
    return lambda v: None if v > lo else f"must be > {lo}"


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

    d_model: int = _f(64, _ge(1), "hidden size")
    n_layers: int = _f(2, _ge(1), "number of layers")
    n_heads: int = _f(4, _ge(1), "attention heads (must divide d_model)")
    dropout: float = _f(0.0, _unit_interval_open_right, "dropout probability")
    tie_embeddings: bool = _f(False, None, "share input embedding and output head")
    causal: bool = _f(True, None, "causal decoder (True) or bidirectional encoder (False)")
    max_len: int | None = _f(None, _opt(_ge(1)), "position table size; none = longest evaluated sequence")


@dataclass
class TrainConfig:
    """Optimisation (AdamW, warmup then linear/cosine decay to 0) and evaluation sizes."""

    steps: int = _f(1000, _ge(1), "optimizer steps")
    batch_size: int = _f(32, _ge(1), "sequences per step")
    lr: float = _f(1e-3, _gt(0.0), "peak learning rate")
    warmup: int = _f(0, _ge(0), "linear warmup steps")
    schedule: str = _f("linear", _in(*SCHEDULES), "decay after warmup")
    weight_decay: float = _f(0.1, _ge(0.0), "AdamW weight decay (matrices only)")
    grad_clip: float = _f(1.0, _ge(0.0), "max gradient norm (0 = off)")
    n_train: int | None = _f(None, _opt(_ge(1)), "fixed training set size; none = fresh samples every step")
    eval_samples: int = _f(500, _ge(1), "evaluation samples per split (per length group)")
    eval_batch_size: int = _f(64, _ge(1), "evaluation batch size")
    seed: int = _f(0, _ge(0), "run seed (data, init, positions)")
    threads: int = _f(0, _ge(0), "CPU threads for this run (0 = torch's default); tiny models run faster on 1")
    deterministic: bool = _f(False, None, "GPU: deterministic algorithms only (cuBLAS workspace, no atomics; slower). "
                                          "CPU runs repeat exactly for a given thread count either way")


@dataclass
class RunConfig:
    """Everything one run needs; ``to_dict`` is what ``config.json`` holds."""

    task: str
    task_params: dict[str, Any]
    pe: str
    preset: str = "quick"
    positions: str | None = None
    rope_scaling: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        d = dict(d)
        d["model"] = ModelConfig(**d.get("model", {}))
        d["train"] = TrainConfig(**d.get("train", {}))
        return cls(**d)


# ----------------------------------------------------------------------------------------
# presets: family -> preset -> {"task": params, "model": {...}, "train": {...}}
# Task parameters not named here keep the generator's defaults (= the paper's settings).

_CHE_PAPER_TEST = {"train_max_length": 40, "test_min_length": 41, "test_max_length": 500}

_PRESETS: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "flipflop": {
        "smoke": {"task": {"n_pairs": 16},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "eval_samples": 32}},
        # spec/tasks.md quick-scale evidence: T = 128, RoPE ~0.01% in-dist read error. The loss
        # is on the read bits only (task option loss=reads): with the paper's whole-sequence
        # loss, 1,000 steps at this size still leave ~30% read error (RoPE and CoPE alike).
        # Same budget as sweeps/flipflop.toml's quick preset
        "quick": {"task": {"n_pairs": 64, "loss": "reads"},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 4},
                  "train": {"steps": 1000, "batch_size": 32, "lr": 2e-3, "warmup": 50, "weight_decay": 0.1,
                            "eval_samples": 500}},
        # CoPE App. C: d 256, 4 layers, 4 heads, 10k steps, batch 16, AdamW lr 3e-4, linear decay
        "paper": {"task": {"n_pairs": 256},
                  "model": {"d_model": 256, "n_layers": 4, "n_heads": 4},
                  "train": {"steps": 10_000, "batch_size": 16, "lr": 3e-4, "warmup": 0, "weight_decay": 0.1,
                            "eval_samples": 1000}},
    },
    "selective_copy": {
        "smoke": {"task": {"n_copy": 4, "n_blank": 4, "n_blank_dense": 2, "n_blank_sparse": 8},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "eval_samples": 32}},
        "quick": {"task": {"n_copy": 16, "n_blank": 16, "n_blank_dense": 8, "n_blank_sparse": 32},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 2},
                  "train": {"steps": 2000, "batch_size": 32, "lr": 1e-3, "warmup": 50, "eval_samples": 500}},
        # CoPE Sec. 5.2 (after Gu & Dao): d 64, 2 layers, 2 heads, 100k steps
        "paper": {"task": {"n_copy": 256, "n_blank": 256},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 2},
                  "train": {"steps": 100_000, "batch_size": 32, "lr": 1e-3, "warmup": 1000, "eval_samples": 1000}},
    },
    "counting": {
        "smoke": {"task": {"n_vars": 1, "max_steps": 8},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "eval_samples": 32}},
        "quick": {"task": {"n_vars": 3, "max_steps": 64},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 4},
                  "train": {"steps": 2000, "batch_size": 32, "lr": 1e-3, "warmup": 50, "n_train": 10_000,
                            "eval_samples": 500}},
        # CoPE Sec. 5.3: 10k training samples, 4 layers, d 256, 4 heads
        "paper": {"task": {"n_vars": 3, "max_steps": 512},
                  "model": {"d_model": 256, "n_layers": 4, "n_heads": 4},
                  "train": {"steps": 10_000, "batch_size": 16, "lr": 3e-4, "warmup": 0, "n_train": 10_000,
                            "eval_samples": 1000}},
    },
    "arithmetic": {
        "smoke": {"task": {"n_ops": 2, "ood_ops_max": 3},
                  "model": {"d_model": 24, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "eval_samples": 16}},
        # quick: 4 operators in F_5 (the paper: 6 in F_11). At n_ops = 6 a CPU budget leaves every
        # encoding near chance (spec/tasks.md quick-scale evidence), and so does F_11 at 3-4
        # operators (2,000-3,000 steps: 8-16 % answers); F_5's smaller tables are learnt (~60 %).
        # Same budget as sweeps/arithmetic.toml's quick preset.
        "quick": {"task": {"modulus": 5, "n_ops": 4, "ood_ops_max": 6},
                  "model": {"d_model": 48, "n_layers": 3, "n_heads": 4},
                  "train": {"steps": 2000, "batch_size": 64, "lr": 2e-3, "warmup": 100, "weight_decay": 0.01,
                            "eval_samples": 500}},
        # BiPE App. D.1: 3 layers, 4 heads, d 48 (also 64, 256), batch 512, lr 1e-4, dropout 0.1,
        # wd 0.01, 100 epochs of 1M samples (~195k steps)
        "paper": {"task": {"n_ops": 6},
                  "model": {"d_model": 48, "n_layers": 3, "n_heads": 4, "dropout": 0.1},
                  "train": {"steps": 195_000, "batch_size": 512, "lr": 1e-4, "warmup": 1000, "weight_decay": 0.01,
                            "n_train": 1_000_000, "eval_samples": 10_000, "eval_batch_size": 512}},
    },
    "binfa": {
        "smoke": {"task": {"max_segments": 2, "seg_len": 3, "ood_max_segments": 4},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "eval_samples": 32}},
        "quick": {"task": {"max_segments": 8, "seg_len": 6, "ood_max_segments": 24},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 4},
                  "train": {"steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup": 50, "eval_samples": 500}},
        # no source experiment (synthlab's own design): a GPU-sized version of quick
        "paper": {"task": {},
                  "model": {"d_model": 128, "n_layers": 4, "n_heads": 4},
                  "train": {"steps": 20_000, "batch_size": 64, "lr": 3e-4, "warmup": 500, "eval_samples": 2000}},
    },
    "mqar": {
        "smoke": {"task": {"vocab_size": 32, "length": 32, "n_kv": 4, "ood_lengths": "64"},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "eval_samples": 32}},
        "quick": {"task": {"vocab_size": 128, "length": 64, "n_kv": 8, "ood_lengths": "128,256"},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 4},
                  "train": {"steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup": 50, "eval_samples": 500}},
        # Zoology (Arora et al. 2024): 2 layers, d 64..512, lr swept around 1e-3
        "paper": {"task": {},
                  "model": {"d_model": 128, "n_layers": 2, "n_heads": 4},
                  "train": {"steps": 20_000, "batch_size": 64, "lr": 1e-3, "warmup": 500, "eval_samples": 2000}},
    },
    "passkey": {
        "smoke": {"task": {"length": 32, "target_length": 64, "k_digits": 2},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 8, "lr": 3e-3, "warmup": 2, "eval_samples": 8}},
        "quick": {"task": {"length": 128, "target_length": 512, "k_digits": 5},
                  "model": {"d_model": 64, "n_layers": 2, "n_heads": 4},
                  "train": {"steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup": 50, "eval_samples": 200}},
        # PoSE Sec. 4.3 uses a 7B LLaMA; this is a GPU-sized synthetic version
        "paper": {"task": {},
                  "model": {"d_model": 256, "n_layers": 4, "n_heads": 4},
                  "train": {"steps": 10_000, "batch_size": 32, "lr": 3e-4, "warmup": 500, "eval_samples": 200,
                            "eval_batch_size": 4}},
    },
    "che": {
        "smoke": {"task": {"train_max_length": 5, "test_min_length": 6, "test_max_length": 8},
                  "model": {"d_model": 32, "n_layers": 1, "n_heads": 2},
                  "train": {"steps": 20, "threads": 1, "batch_size": 16, "lr": 3e-3, "warmup": 2, "weight_decay": 0.0,
                            "eval_samples": 8}},
        # spec/tasks.md: quick trains N <= 20 and tests 21..100
        "quick": {"task": {"train_max_length": 20, "test_min_length": 21, "test_max_length": 100},
                  "model": {"d_model": 64, "n_layers": 3, "n_heads": 4},
                  "train": {"steps": 2000, "batch_size": 32, "lr": 1e-3, "warmup": 100, "weight_decay": 0.0,
                            "eval_samples": 32}},
        # Deletang et al. 2023: 5 layers, d 64, 8 heads, dropout 0.1, Adam + clip 1, batch 128,
        # 1M steps, lr in {1e-4, 3e-4, 5e-4}; train N <= 40, test 41..500
        "paper": {"task": dict(_CHE_PAPER_TEST),
                  "model": {"d_model": 64, "n_layers": 5, "n_heads": 8, "dropout": 0.1},
                  "train": {"steps": 1_000_000, "batch_size": 128, "lr": 3e-4, "warmup": 0, "weight_decay": 0.0,
                            "schedule": "constant", "eval_samples": 128, "eval_batch_size": 128}},
    },
}
_PRESETS["nfa"] = _PRESETS["binfa"]


def preset_family(task: str) -> str:
    """The preset table a task uses (the fifteen CHE tasks share ``che``)."""
    if task in CHE_TASKS:
        return "che"
    if task in _PRESETS:
        return task
    allowed = ", ".join([*sorted(k for k in _PRESETS if k != "che"), *CHE_TASKS])
    raise ValueError(f"task {task!r} has no preset (allowed: {allowed})")


def preset(task: str, name: str = "quick") -> dict[str, dict[str, Any]]:
    """A deep copy of preset ``name`` for ``task``: {"task": ..., "model": ..., "train": ...}."""
    if name not in PRESETS:
        raise ValueError(f"preset {name!r} is unknown (allowed: {', '.join(PRESETS)})")
    return copy.deepcopy(_PRESETS[preset_family(task)][name])


# ----------------------------------------------------------------------------------------
# typed overrides

_SECTIONS = {"model": ModelConfig, "train": TrainConfig}
_TOP_LEVEL = {"pe": str, "positions": str | None, "rope_scaling": str | None}
_NONE_WORDS = ("none", "null", "")


def field_types(cls: type) -> dict[str, Any]:
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
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        raise ValueError(f"{key}: expected true or false, got {value!r}")
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
    key = key.strip()
    section, dot, name = key.partition(".")
    if dot:
        if section == "task":
            if name in task_param_names:
                return "task", name
            allowed = ", ".join(f"task.{k}" for k in task_param_names) or "none"
            raise ValueError(f"unknown setting {key!r} (task parameters: {allowed})")
        if section in _SECTIONS and name in field_types(_SECTIONS[section]):
            return section, name
        raise ValueError(f"unknown setting {key!r} (allowed: {', '.join(setting_keys(dict.fromkeys(task_param_names)))})")
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
    raise ValueError(f"unknown setting {key!r} (allowed: {', '.join(setting_keys(dict.fromkeys(task_param_names)))})")


def apply_overrides(cfg: RunConfig, overrides: dict[str, Any] | None, task_param_names: list[str] | tuple[str, ...]) -> RunConfig:
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


def build_config(task: str, pe: str, preset_name: str = "quick", seed: int = 0, positions: str | None = None,
                 rope_scaling: str | None = None) -> RunConfig:
    """The preset's RunConfig for ``task`` (no overrides, not yet validated)."""
    p = preset(task, preset_name)
    model = ModelConfig(**p["model"])
    train = TrainConfig(**p["train"])
    train.seed = seed
    return RunConfig(task=task, task_params=dict(p["task"]), pe=pe, preset=preset_name, positions=positions,
                     rope_scaling=rope_scaling, model=model, train=train)


def validate_fields(cfg: RunConfig) -> None:
    """Range and cross-field checks of the model / train sections."""
    check_fields(cfg.model, "model")
    check_fields(cfg.train, "train")
    if cfg.model.d_model % cfg.model.n_heads:
        raise ValueError(f"model.d_model ({cfg.model.d_model}) must be divisible by model.n_heads ({cfg.model.n_heads})")
    if cfg.train.warmup > cfg.train.steps:
        raise ValueError(f"train.warmup must be <= train.steps ({cfg.train.steps}), got {cfg.train.warmup}")
    if cfg.rope_scaling is not None and cfg.rope_scaling not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling must be one of none, {', '.join(ROPE_SCALINGS)}; got {cfg.rope_scaling!r}")
    if not isinstance(cfg.pe, str) or not cfg.pe.strip():
        raise ValueError(f"pe must be a non-empty encoding spec string (see `synthlab encodings`), got {cfg.pe!r}")
