"""Runs, samples and forward passes for the pictures (synthlab.plot)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence, Union, cast

import numpy as np
import torch


def as_run(run: Any) -> Any:
    """A loaded run as is, or a run directory loaded (ValueError naming the runs inside a results directory)."""
    from synthlab.run.runs import LoadedRun, load_run

    if isinstance(run, LoadedRun):
        return run
    if not isinstance(run, (str, os.PathLike)):
        raise ValueError(f"expected a loaded run (synthlab.load_run) or a run directory, got {type(run).__name__}")
    path = Path(run)
    if path.is_dir() and not (path / "config.json").is_file():
        inside = sorted(p.parent.name for p in path.glob("*/config.json"))
        if inside:  # `--out DIR` holds DIR/<run_id>/: name them
            more = " ..." if len(inside) > 3 else ""
            raise ValueError(
                f"{path}: not a run directory (no config.json); the runs inside it: {', '.join(inside[:3])}{more}"
            )
    return load_run(path)


def resolve_sample(run: Any, sample: Any, split: str) -> Any:
    """An index into the run's evaluation samples of ``split``, a Sample, or tokens of one's own
    (a text or a list of tokens: a Sample of split "tokens" with nothing scored) -> Sample."""
    from synthlab.generators import Sample

    task = run.task
    if isinstance(sample, str) or (isinstance(sample, (list, tuple)) and sample and isinstance(sample[0], str)):
        ids = run.encode(sample).numpy()
        none = np.zeros(0, dtype=np.int64)
        return Sample(
            task=task.name,
            split="tokens",
            seed=0,
            index=0,
            params={},
            vocab=list(task.vocab),
            ids=ids,
            scored=none,
            target_ids=none,
        )
    if isinstance(sample, Sample):
        if sample.task != task.name or list(sample.vocab) != list(task.vocab):
            raise ValueError(f"a sample of task {sample.task!r} given for a run of task {task.name!r}")
        return sample
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)):
        raise ValueError(f"sample must be an index or a synthlab.generators Sample, got {sample!r}")
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
        raise ValueError(
            f"sample {index} out of range: split {split!r} of this run has {have} (train.eval_samples={n})"
        )
    return task.sample(split, 1, seed=seed, start=index % n, **groups[index // n])[0]


def capture_qk(model: torch.nn.Module, ids: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Per layer, the queries and keys (B, H, T, d_h) its attention scored ``ids`` (B, T) with:
    [{"q", "k"}] after the rotary encoder where there is one, from the model's hook points
    (``activations``; docs/inspection.md). ``LoadedRun.run_with_cache`` gives them all by name."""
    activations: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        model(ids, activations=activations)
    return [
        {"q": activations[f"{b.attn.name}.q"], "k": activations[f"{b.attn.name}.k"]} for b in cast(Any, model).blocks
    ]


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
