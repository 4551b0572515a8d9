"""Reopen a finished run: its config, task and trained model (for notebooks and plots).

A run directory (``synthlab train ... --out DIR`` -> ``DIR/<run_id>/``) holds ``config.json``,
``metrics.jsonl`` and ``model.safetensors``. Weights are read with safetensors only, never
with pickle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from synthlab.errors import DamagedFile


@dataclass
class LoadedRun:
    """What :func:`load_run` returns."""

    run_dir: Path
    config: dict[str, Any]
    task: Any  # generators.Task
    model: torch.nn.Module  # in eval mode, on the CPU
    metrics: list[dict[str, Any]]  # the lines of metrics.jsonl

    def batch(self, split: str = "test", n: int = 8, seed: int = 0, **overrides: Any) -> tuple[list[Any], torch.Tensor]:
        """``n`` samples of ``split`` and their ids as one right-padded LongTensor (B, T)."""
        samples = self.task.sample(split, n, seed=seed, **overrides)
        pad = len(self.task.vocab)
        T = max(len(s.ids) for s in samples)
        ids = torch.full((len(samples), T), pad, dtype=torch.long)
        for b, s in enumerate(samples):
            ids[b, : len(s.ids)] = torch.as_tensor(s.ids)
        return samples, ids


# config.json's parts load_run reads, and what each must be
_CONFIG_FIELDS = {"task": str, "task_params": dict, "pe": str, "model": dict, "train": dict, "max_len": int}


def _read_config(path: Path) -> dict[str, Any]:
    """config.json as a run wrote it; DamagedFile (exit 1) naming it when it is not."""
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # not UTF-8, not JSON
        raise DamagedFile(path, f"not a run's config.json ({e})") from None
    if not isinstance(cfg, dict):
        raise DamagedFile(path, f"not a run's config.json (a JSON {type(cfg).__name__}, not an object)")
    for key, kind in _CONFIG_FIELDS.items():
        if key not in cfg:
            raise DamagedFile(path, f"not a run's config.json (no {key!r})")
        if not isinstance(cfg[key], kind) or isinstance(cfg[key], bool):
            raise DamagedFile(path, f"not a run's config.json ({key} is {type(cfg[key]).__name__})")
    return cfg


def load_run(run_dir: str | Path, model: Any = None) -> LoadedRun:
    """Rebuild the model of a finished run and load its weights (ValueError for a bad dir).
    ``model``: the factory a run trained with ``synthlab.train(..., model=factory)`` (such a run
    cannot be rebuilt without it; docs/interfaces.md)."""
    import generators
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    from synthlab.config import RunConfig
    from synthlab.model.encoders.rotary import PAIR_LAYOUTS, Rotary
    from synthlab.training import model_for
    from synthlab.usermodel import saved_model

    run_dir = Path(run_dir)
    cfg_path, weights = run_dir / "config.json", run_dir / "model.safetensors"
    if not cfg_path.is_file():
        raise ValueError(f"{run_dir}: not a run directory (no config.json)")
    if not weights.is_file():
        raise ValueError(f"{run_dir}: the run kept no weights (model.safetensors missing; did it fail?)")
    cfg = _read_config(cfg_path)
    task = generators.get_task(cfg["task"], **{k: v for k, v in cfg["task_params"].items() if v is not None})
    # runs saved before config.json recorded the encodings' forms are pe revision 1 (registry.PE_REVISION)
    model = saved_model(cfg, task, model, where=str(run_dir))  # a user's factory's module, or None
    if model is None:  # synthlab's Transformer
        try:
            run_cfg = RunConfig.from_dict(cfg)
        except (KeyError, TypeError, AttributeError) as e:  # a part of it is not what a run writes
            raise DamagedFile(cfg_path, f"not a run's config ({type(e).__name__}: {e})") from None
        model = model_for(run_cfg, task, max_len=cfg["max_len"], revision=cfg.get("pe_revision", 1))
    # runs saved before the rotary layout was recorded used pairs (k, k + d/2)
    pairs = cfg.get("rotary_pairs", "half")
    if pairs not in PAIR_LAYOUTS:
        raise ValueError(f"{cfg_path}: rotary_pairs {pairs!r} unknown (known: {', '.join(PAIR_LAYOUTS)})")
    for mod in model.modules():
        if isinstance(mod, Rotary):
            mod.pairs = pairs
    try:
        load_model(model, str(weights), device="cpu")
    except SafetensorError as e:  # random bytes, cut short, a pickle: never read any other way
        raise DamagedFile(weights, f"not a safetensors file ({e})") from None
    except RuntimeError as e:  # torch: missing, unexpected or wrongly shaped tensors
        first = str(e).strip().splitlines()
        detail = next((ln.strip() for ln in first[1:] if ln.strip()), first[0] if first else "")
        raise DamagedFile(weights, f"its tensors do not fit the run's model ({detail[:300]})") from None
    if cfg.get("rope_factor") is not None:  # PoSE's static interpolation, as the run trained and was evaluated
        model.set_rope_scaling(cfg["rope_scaling"], cfg["rope_factor"], cfg.get("train_len"))
    model.eval()
    metrics_path = run_dir / "metrics.jsonl"
    metrics = []
    if metrics_path.is_file():
        try:
            metrics = [json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except ValueError as e:  # not UTF-8, not JSON lines
            raise DamagedFile(metrics_path, f"not JSON lines ({e})") from None
    return LoadedRun(run_dir=run_dir, config=cfg, task=task, model=model, metrics=metrics)
