"""Runs, samples and forward passes for the pictures (synthlab.plot)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator, Sequence, Union

import numpy as np
import torch


def as_run(run: Any) -> Any:
    """A loaded run as is, or a run directory loaded (ValueError naming the runs inside a results directory)."""
    from synthlab.runs import LoadedRun, load_run

    if isinstance(run, LoadedRun):
        return run
    if not isinstance(run, (str, os.PathLike)):
        raise ValueError(f"expected a loaded run (synthlab.load_run) or a run directory, got {type(run).__name__}")
    path = Path(run)
    if path.is_dir() and not (path / "config.json").is_file():
        inside = sorted(p.parent.name for p in path.glob("*/config.json"))
        if inside:  # `--out DIR` holds DIR/<run_id>/: name them
            more = " ..." if len(inside) > 3 else ""
            raise ValueError(f"{path}: not a run directory (no config.json); "
                             f"the runs inside it: {', '.join(inside[:3])}{more}")
    return load_run(path)


def resolve_sample(run: Any, sample: Any, split: str) -> Any:
    """An index into the run's evaluation samples of ``split`` (or a Sample) -> Sample."""
    from generators import Sample

    task = run.task
    if isinstance(sample, Sample):
        if sample.task != task.name or list(sample.vocab) != list(task.vocab):
            raise ValueError(f"a sample of task {sample.task!r} given for a run of task {task.name!r}")
        return sample
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)):
        raise ValueError(f"sample must be an index or a generators Sample, got {sample!r}")
    task.check_split(split)
    index, seed = int(sample), int(run.config["train"]["seed"])
    if split == "train":  # the training pool is unbounded
        if index < 0:
            raise ValueError(f"sample {index} out of range: indices are >= 0")
        return task.sample("train", 1, seed=seed, start=index)[0]
    n = int(run.config["train"]["eval_samples"])
    groups = task.eval_groups(split) or [{}]
    if not 0 <= index < n * len(groups):
        have = f"samples 0..{n * len(groups) - 1}" if n else "no samples"
        raise ValueError(f"sample {index} out of range: split {split!r} of this run has {have} "
                         f"(train.eval_samples={n})")
    return task.sample(split, 1, seed=seed, start=index % n, **groups[index // n])[0]


@contextlib.contextmanager
def rope_scaled(run: Any, T: int) -> Iterator[None]:
    """The run's eval-time rope scaling (s = T / train_len) for sequences past its training length."""
    cfg, model = run.config, run.model
    train_len = cfg.get("train_len") or 0
    on = bool(cfg.get("rope_scaling") and cfg.get("rope_factor") is None and model.rotary_encoders()
              and train_len and T > train_len)
    if on:
        model.set_rope_scaling(cfg["rope_scaling"], T / train_len)
    try:
        yield
    finally:
        if on:
            model.set_rope_scaling(None)


def sample_ids(sample: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(sample.ids), dtype=torch.long).unsqueeze(0)  # (1, T)


def capture_qk(model: torch.nn.Module, ids: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Per layer, what its attention computes q and k from, for one forward of ``ids`` (B, T).

    A forward pre-hook on each block's ``attn`` receives ``Attention.forward``'s arguments
    (x, ctx, ...): x is the layer-normed residual stream, and the layer's own
    ``Attention.qkv(x, ctx)`` gives ``q_raw`` / ``k_raw`` (B, H, T, d_h) and ``q`` / ``k``
    after its rotary encoder (the raw ones where it has none). Returns [{"x", "q_raw",
    "k_raw", "q", "k"}] per layer; the model is not changed and the hooks are removed.
    """
    out: list[dict[str, torch.Tensor]] = []

    def hook(attn: Any, args: tuple) -> None:
        x, ctx = args[0], args[1]
        q_raw, k_raw, q, k, _ = attn.qkv(x, ctx)
        out.append({"x": x, "q_raw": q_raw, "k_raw": k_raw, "q": q, "k": k})

    handles = [block.attn.register_forward_pre_hook(hook) for block in model.blocks]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    return out


Layers = Union[Sequence[int], int, None]  # a layer / head choice: all (None), one, or a list


def pick(what: str, chosen: Layers, count: int) -> list[int]:
    """The chosen layers / heads as a list (all for None); ValueError for one out of range."""
    if chosen is None:
        return list(range(count))
    chosen = [chosen] if isinstance(chosen, (int, np.integer)) else list(chosen)
    for c in chosen:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= c < count:
            plural = "s" * (count != 1)
            raise ValueError(f"{what} {c!r} out of range: the model has {count} {what}{plural} (0..{count - 1})")
    if not chosen:
        raise ValueError(f"no {what}s chosen")
    return [int(c) for c in chosen]

