"""Reopen a finished run: its config, task and trained model (for notebooks and plots), and look
inside it (docs/inspection.md).

A run directory (``synthlab train ... --out DIR`` -> ``DIR/<run_id>/``) holds ``config.json``,
``metrics.jsonl`` and ``model.safetensors``. Weights are read with safetensors only, never
with pickle.

    >>> run = synthlab.load_run("runs/<run_id>")
    >>> ids = run.encode("w 1 i 0 r")                 # LongTensor (T,); run.decode(ids) -> the tokens
    >>> logits, cache = run.run_with_cache(ids)       # cache["blocks.0.attn.pattern"]: (1, H, T, T)
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, cast

import numpy as np
import torch

from synthlab.core.errors import DamagedFile


class ActivationCache(dict):
    """Hook point name -> tensor of one forward (:meth:`LoadedRun.run_with_cache`), detached, on
    the CPU; ``tokens``: the input's tokens, one list per sequence. Printing it lists every
    name with its shape."""

    def __init__(self, activations: dict[str, torch.Tensor], tokens: list[list[str]]):
        super().__init__(activations)
        self.tokens = tokens

    def __repr__(self) -> str:
        width = max((len(k) for k in self), default=0)
        return "\n".join(f"{k:{width}s}  {tuple(v.shape)}" for k, v in self.items()) or "ActivationCache()"


@dataclass
class LoadedRun:
    """What :func:`load_run` returns."""

    run_dir: Path
    config: dict[str, Any]
    task: Any  # synthlab.generators.Task
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

    @property
    def pad_id(self) -> int:
        """The id :meth:`batch` pads with (one past the task's vocabulary)."""
        return len(self.task.vocab)

    def encode(self, tokens: str | list[str] | tuple[str, ...]) -> torch.Tensor:
        """Token ids (T,) of a text (tokens separated by spaces) or a list of tokens; ValueError
        naming a token the task does not know."""
        toks = tokens.split() if isinstance(tokens, str) else list(tokens)
        if not toks or not all(isinstance(t, str) for t in toks):
            raise ValueError(f"encode takes a text or a non-empty list of tokens, got {tokens!r}")
        index = {t: i for i, t in enumerate(self.task.vocab)}
        unknown = [t for t in toks if t not in index]
        if unknown:
            vocab = self.task.vocab
            shown = " ".join(vocab[:24]) + (f" ... ({len(vocab)} tokens)" if len(vocab) > 24 else "")
            raise ValueError(f"token {unknown[0]!r} is not in task {self.task.name!r}'s vocabulary: {shown}")
        return torch.tensor([index[t] for t in toks], dtype=torch.long)

    def decode(self, ids: Any) -> list[str] | list[list[str]]:
        """The tokens of ids (T,) -> [str], or of (B, T) -> one list per row; the pad id reads "<pad>"."""
        arr = np.asarray(ids.detach().cpu() if isinstance(ids, torch.Tensor) else ids)
        if arr.ndim not in (1, 2) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"decode takes integer ids of shape (T,) or (B, T), got {arr.dtype} {arr.shape}")
        names = [*self.task.vocab, "<pad>"]
        if arr.size and not 0 <= int(arr.min()) <= int(arr.max()) < len(names):
            raise ValueError(f"ids must lie in 0..{len(names) - 1} (the vocabulary and the pad id)")
        return [names[i] for i in arr] if arr.ndim == 1 else [[names[i] for i in row] for row in arr]

    def as_ids(self, inputs: Any) -> torch.Tensor:
        """(B, T) ids of a text, a list of tokens, ids (T,) or (B, T), or a synthlab.generators Sample."""
        if isinstance(inputs, str) or (isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], str)):
            return self.encode(inputs).unsqueeze(0)
        ids = getattr(inputs, "ids", inputs)  # a Sample's ids
        ids = torch.as_tensor(np.asarray(ids) if not isinstance(ids, torch.Tensor) else ids)
        if ids.dim() == 1:
            ids = ids.unsqueeze(0)
        self.decode(ids)  # checks the shape and range
        return ids.long()

    def run_with_cache(self, inputs: Any) -> tuple[torch.Tensor, ActivationCache]:
        """One forward of ``inputs`` (see :meth:`as_ids`) keeping every hook point: (logits
        (B, T, V), :class:`ActivationCache`). Names and shapes: docs/inspection.md. Past the
        training length the run's rope scaling applies as its evaluation applied it."""
        from synthlab.model.transformer import Transformer

        if not isinstance(self.model, Transformer):
            raise ValueError(
                f"run_with_cache reads synthlab's Transformer; this run's model is a "
                f"{type(self.model).__name__} (a user's factory): register forward hooks on it instead"
            )
        ids = self.as_ids(inputs)
        activations: dict[str, torch.Tensor] = {}
        with rope_scaled(self, ids.shape[1]), torch.no_grad():
            logits = self.model(ids, activations=activations)
        return logits, ActivationCache(activations, cast("list[list[str]]", self.decode(ids)))  # ids: (B, T)


@contextlib.contextmanager
def rope_scaled(run: Any, T: int) -> Iterator[None]:
    """The run's eval-time rope scaling (s = T / train_len) for sequences past its training length."""
    cfg, model = run.config, run.model
    train_len = cfg.get("train_len") or 0
    on = bool(
        cfg.get("rope_scaling")
        and cfg.get("rope_factor") is None
        and model.rotary_encoders()
        and train_len
        and T > train_len
    )
    if on:
        model.set_rope_scaling(cfg["rope_scaling"], T / train_len)
    try:
        yield
    finally:
        if on:
            model.set_rope_scaling(None)


# config.json's parts load_run reads, and what each must be
_CONFIG_FIELDS = {"task": str, "task_params": dict, "pe": str, "model": dict, "max_len": int}


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
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    from synthlab import generators
    from synthlab.core.config import RunConfig
    from synthlab.model.encoders.rotary import PAIR_LAYOUTS, Rotary
    from synthlab.run.configs import model_for
    from synthlab.run.usermodel import saved_model

    run_dir = Path(run_dir)
    cfg_path, weights = run_dir / "config.json", run_dir / "model.safetensors"
    if not cfg_path.is_file():
        raise ValueError(f"{run_dir}: not a run directory (no config.json)")
    if not weights.is_file():
        raise ValueError(f"{run_dir}: the run kept no weights (model.safetensors missing; did it fail?)")
    cfg = _read_config(cfg_path)
    try:
        task = generators.get_task(cfg["task"], **{k: v for k, v in cfg["task_params"].items() if v is not None})
    except (ValueError, TypeError) as e:  # a value no run writes (a task not installed reads the same)
        raise DamagedFile(cfg_path, f"its task does not build ({e})") from None
    # runs saved before config.json recorded the encodings' forms are pe revision 1 (registry.PE_REVISION)
    model = saved_model(cfg, task, model, where=str(run_dir))  # a user's factory's module, or None
    if model is None:  # synthlab's Transformer
        try:
            run_cfg = RunConfig.from_dict(cfg)
            model = model_for(run_cfg, task, max_len=cfg["max_len"], revision=cfg.get("pe_revision", 1))
        except (KeyError, TypeError, AttributeError, ValueError) as e:  # a part of it is not what a run writes
            raise DamagedFile(cfg_path, f"not a run's config ({type(e).__name__}: {e})") from None
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
            metrics = [
                json.loads(line) for line in metrics_path.read_text(encoding="utf-8").splitlines() if line.strip()
            ]
        except ValueError as e:  # not UTF-8, not JSON lines
            raise DamagedFile(metrics_path, f"not JSON lines ({e})") from None
    return LoadedRun(run_dir=run_dir, config=cfg, task=task, model=model, metrics=metrics)
