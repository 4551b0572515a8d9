"""What stacks the seeds of one cell into one model: the check that they can
(:class:`NotBatchable` otherwise, before anything is written), their batches stacked step by
step, and the trained stack split back into S models. Why the slices equal separate runs, and
where it applies: docs/architecture.md, "Batched seeds: one stacked model".
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch

from synthlab.core.config import RunConfig
from synthlab.run.data import DataModule, StepLoader, has_batch_overrides, worker_steps


class NotBatchable(ValueError):
    """These seeds cannot train as one stacked model (raised before anything is written); they
    can still train one by one."""


def check_batchable(cfgs: Sequence[RunConfig]) -> None:
    """NotBatchable unless ``cfgs`` can train as one stacked model (see the module docstring)."""
    if not cfgs:
        raise ValueError("batched seeds need at least one seed")
    seeds = [c.train.seed for c in cfgs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"batched seeds must differ, got {seeds}")

    def without_seed(c: RunConfig) -> dict[str, Any]:
        d = c.to_dict()
        d["train"].pop("seed")
        return d

    first = without_seed(cfgs[0])
    for c in cfgs[1:]:
        if without_seed(c) != first:
            raise NotBatchable(
                "batched seeds need one config but the seed (seed "
                f"{c.train.seed} differs from seed {cfgs[0].train.seed} in more than its seed)"
            )
    c = cfgs[0]
    why = (
        "model.dropout > 0 (vmap would draw other masks than separate runs)"
        if c.model.dropout > 0
        else "a training-time position scheme (--positions)"
        if c.positions
        else "train.eval_every (learning curves)"
        if c.train.eval_every
        else "train.compile"
        if c.train.compile
        else None
    )
    if why:
        raise NotBatchable(f"batched seeds do not support {why}: train these seeds separately")


class StackedBatches(torch.utils.data.IterableDataset):
    """Step s of every seed's stream, stacked: (ids, targets), each (S, B, T)."""

    def __init__(self, streams: list[Any], seeds: list[int], steps: int, start: int = 0) -> None:
        super().__init__()
        self.streams, self.seeds, self.steps, self.start = streams, seeds, int(steps), int(start)

    def __len__(self) -> int:
        return self.steps

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        batches = [st.batch(step) for st in self.streams]
        shapes = {tuple(b.ids.shape) for b in batches}
        if len(shapes) > 1:
            raise ValueError(
                f"batched seeds: the seeds' batches at step {step} differ in shape "
                f"({', '.join(f'seed {s}: {tuple(b.ids.shape)}' for s, b in zip(self.seeds, batches))}); "
                "this task's lengths vary between batches: train its seeds separately"
            )
        return torch.stack([b.ids for b in batches]), torch.stack([b.targets for b in batches])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for s in worker_steps(self.start, self.steps):
            yield self.batch(s)


def check_shapes(task: Any, dms: list[DataModule], seeds: list[int], probe: int = 16) -> None:
    """Refuse, before anything is written, tasks whose batches vary in shape between seeds: the
    first ``probe`` steps of every seed (cheap; tasks that pad to each batch's longest sample,
    arithmetic, counting, binfa, nfa, differ by step 1; flip-flop, selective copy, MQAR and
    passkey have one length). A later mismatch stops the batch with every seed's record failed."""
    if has_batch_overrides(task):
        raise NotBatchable(
            f"batched seeds: task {task.name!r} draws its parameters per batch (one length per "
            "batch): the seeds' batches differ in shape; train its seeds separately"
        )
    batches = StackedBatches([dm.stream for dm in dms], seeds, probe)
    try:
        for s in range(probe):
            batches.batch(s)
    except ValueError as e:
        raise NotBatchable(str(e)) from None


def stacked_datamodule(streams: list[Any], seeds: list[int], steps: int, workers: int | None = None) -> Any:
    """The LightningDataModule of the stacked streams (a resumed batch starts at its step)."""
    import lightning as L

    class StackedDataModule(L.LightningDataModule):
        def train_dataloader(self) -> torch.utils.data.DataLoader:
            start = int(self.trainer.global_step) if self.trainer is not None else 0
            return StepLoader.for_trainer(StackedBatches(streams, seeds, steps, start), self.trainer, workers, streams)

    return StackedDataModule()


def stack_back(module: Any, stacked: Any) -> list[torch.nn.Module]:
    """The S trained models, on the CPU, from the module's stacked parameters."""
    stacked.params = {n: p.detach().cpu() for n, p in module.params().items()}
    stacked.base.cpu()
    return [m.requires_grad_(True) for m in stacked.unstack()]
