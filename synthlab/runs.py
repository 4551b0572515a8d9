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


def load_run(run_dir: str | Path, model: Any = None) -> LoadedRun:
    """Rebuild the model of a finished run and load its weights (ValueError for a bad dir).
    ``model``: the factory a run trained with ``synthlab.train(..., model=factory)`` (such a run
    cannot be rebuilt without it; docs/interfaces.md)."""
    from safetensors.torch import load_model

    import generators
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
    try:
        cfg = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{cfg_path}: not valid JSON ({e})") from None
    task = generators.get_task(cfg["task"], **{k: v for k, v in cfg["task_params"].items() if v is not None})
    # runs saved before config.json recorded the encodings' forms are pe revision 1 (registry.PE_REVISION)
    model = saved_model(cfg, task, model, where=str(run_dir))  # a user's factory's module, or None
    if model is None:  # synthlab's Transformer
        model = model_for(RunConfig.from_dict(cfg), task, max_len=cfg["max_len"], revision=cfg.get("pe_revision", 1))
    # runs saved before the rotary layout was recorded used pairs (k, k + d/2)
    pairs = cfg.get("rotary_pairs", "half")
    if pairs not in PAIR_LAYOUTS:
        raise ValueError(f"{cfg_path}: rotary_pairs {pairs!r} unknown (known: {', '.join(PAIR_LAYOUTS)})")
    for mod in model.modules():
        if isinstance(mod, Rotary):
            mod.pairs = pairs
    load_model(model, str(weights), device="cpu")
    if cfg.get("rope_factor") is not None:  # PoSE's static interpolation, as the run trained and was evaluated
        model.set_rope_scaling(cfg["rope_scaling"], cfg["rope_factor"], cfg.get("train_len"))
    model.eval()
    metrics_path = run_dir / "metrics.jsonl"
    metrics = []
    if metrics_path.is_file():
        metrics = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    return LoadedRun(run_dir=run_dir, config=cfg, task=task, model=model, metrics=metrics)
