"""Batches from the generators: addressable training stream, fixed sets, vectorised padding.

Training batch ``s`` holds training samples ``s*B .. (s+1)*B - 1`` under the run seed, so the
stream is the same whatever the workers or where a run resumes. Inputs are right-padded with
``pad_id = len(task.vocab)``; targets hold ``IGNORE = -100`` where nothing is scored. The rules:
docs/architecture.md, "Determinism".
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import lightning as L
import numpy as np
import torch

IGNORE = -100
_TRAIN_BATCH = zlib.crc32(b"train-batch")
_EPOCH = zlib.crc32(b"train-epoch")
_POSITIONS = zlib.crc32(b"positions")


def _rng(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(k) for k in key])))


def pad_ids(seqs: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad 1-D int arrays into one (B, T) array; also returns the lengths (B,)."""
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    B, T = len(seqs), int(lengths.max(initial=0))
    out = np.full((B, T), pad_id, dtype=np.int64)
    if B and T:
        flat = np.concatenate(seqs).astype(np.int64, copy=False)
        rows = np.repeat(np.arange(B), lengths)
        starts = np.cumsum(lengths) - lengths
        cols = np.arange(len(flat)) - np.repeat(starts, lengths)
        out[rows, cols] = flat
    return out, lengths


def scatter_targets(
    positions: Sequence[np.ndarray], targets: Sequence[np.ndarray], shape: tuple[int, int]
) -> np.ndarray:
    """A (B, T) array of IGNORE with ``targets[b]`` written at ``positions[b]`` of row b."""
    out = np.full(shape, IGNORE, dtype=np.int64)
    counts = np.fromiter((len(p) for p in positions), dtype=np.int64, count=len(positions))
    if counts.sum():
        rows = np.repeat(np.arange(len(positions)), counts)
        out[rows, np.concatenate(positions)] = np.concatenate(targets)
    return out


@dataclass
class Batch:
    """Padded tensors of a list of samples."""

    ids: torch.Tensor  # (B, T) input ids, right-padded with pad_id
    targets: torch.Tensor  # (B, T) loss targets, IGNORE where no loss goes
    scored: torch.Tensor  # (B, T) scored targets, IGNORE where nothing is scored
    lengths: torch.Tensor  # (B,) real lengths

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(self.ids.to(device), self.targets.to(device), self.scored.to(device), self.lengths.to(device))


def collate(samples: Sequence[Any], pad_id: int, scored: bool = True) -> Batch:
    """Samples -> :class:`Batch` (vectorised; no per-token Python loop)."""
    ids, lengths = pad_ids([s.ids for s in samples], pad_id)
    shape = ids.shape
    loss_pos = [s.loss_positions if s.loss_positions is not None else s.scored for s in samples]
    loss_tgt = [s.loss_targets if s.loss_targets is not None else s.target_ids for s in samples]
    targets = scatter_targets(loss_pos, loss_tgt, shape)
    sc = scatter_targets([s.scored for s in samples], [s.target_ids for s in samples], shape) if scored else targets
    return Batch(torch.from_numpy(ids), torch.from_numpy(targets), torch.from_numpy(sc), torch.from_numpy(lengths))


def has_batch_overrides(task: Any) -> bool:
    """Whether the task draws per-batch overrides for training (CHE: one length per batch)."""
    return bool(task.train_overrides(_rng(0, _TRAIN_BATCH, 0)))


class TrainStream:
    """The training batches of one run, addressable by step.

    ``batch(s)`` is a pure function of (task, seed, batch_size, n_train, s).
    """

    def __init__(self, task: Any, seed: int, batch_size: int, n_train: int | None = None) -> None:
        self.task, self.seed, self.batch_size, self.n_train = task, int(seed), int(batch_size), n_train
        self.pad_id = len(task.vocab)
        self.per_batch = has_batch_overrides(task)
        self.max_len = 0  # longest training sequence produced so far
        self._fixed: list[Any] | None = None
        self._fixed_batches: list[list[Any]] | None = None
        self._p_cache: dict[str, dict[str, Any]] = {}
        if n_train is not None:
            self._build_fixed()

    def _params(self, overrides: dict[str, Any]) -> dict[str, Any]:
        key = repr(sorted(overrides.items()))
        if key not in self._p_cache:
            self._p_cache[key] = self.task.resolved_split_params("train", overrides)
        return self._p_cache[key]

    def _fresh(self, step: int) -> list[Any]:
        """Samples step*B .. (step+1)*B - 1 of the training split."""
        B = self.batch_size
        ov = self.task.train_overrides(_rng(self.seed, _TRAIN_BATCH, step)) if self.per_batch else {}
        p = self._params(ov)
        return [self.task.sample_one("train", self.seed, i, ov or None, p) for i in range(step * B, (step + 1) * B)]

    def _build_fixed(self) -> None:
        assert self.n_train is not None, "a fixed training set has n_train"
        n, B = int(self.n_train), self.batch_size
        if self.per_batch:
            # one override per batch: the fixed set is the first ceil(n / B) fresh batches
            batches = [self._fresh(s) for s in range(-(-n // B))]
            batches[-1] = batches[-1][: n - B * (len(batches) - 1)]
            self._fixed_batches = batches
        else:
            p = self._params({})
            self._fixed = [self.task.sample_one("train", self.seed, i, None, p) for i in range(n)]
        self.max_len = max(len(s) for s in self._all_fixed())

    def _all_fixed(self) -> Iterator[Any]:
        if self._fixed is not None:
            yield from self._fixed
        for b in self._fixed_batches or []:
            yield from b

    def samples(self, step: int) -> list[Any]:
        if self.n_train is None:
            return self._fresh(step)
        if self._fixed_batches is not None:
            nb = len(self._fixed_batches)
            epoch, k = divmod(step, nb)
            return self._fixed_batches[int(_rng(self.seed, _EPOCH, epoch).permutation(nb)[k])]
        assert self._fixed is not None
        n, B = len(self._fixed), self.batch_size
        per_epoch = max(1, n // B)  # drop the ragged tail of each epoch's permutation
        epoch, k = divmod(step, per_epoch)
        perm = _rng(self.seed, _EPOCH, epoch).permutation(n)
        return [self._fixed[i] for i in perm[k * B : (k + 1) * B]] if n >= B else [self._fixed[i] for i in perm]

    def batch(self, step: int) -> Batch:
        b = collate(self.samples(step), self.pad_id, scored=False)
        self.max_len = max(self.max_len, int(b.ids.shape[1]))
        return b


class PositionSampler:
    """Training-time position indices (randomized / PoSE) for batch ``s``, from a torch
    Generator seeded by (seed, s): one (T,) tensor shared by the batch, or (B, T), one row
    per example, for a scheme with ``per_example`` (PoSE Sec. 3.2)."""

    def __init__(self, scheme: Any, seed: int) -> None:
        self.scheme, self.seed = scheme, int(seed)
        self.gen = torch.Generator()

    def __call__(self, T: int, step: int, B: int = 1) -> torch.Tensor:
        self.gen.manual_seed(int(np.random.SeedSequence([self.seed, _POSITIONS, int(step)]).generate_state(1)[0]))
        if getattr(self.scheme, "per_example", False):
            return self.scheme.sample_rows(B, T, self.gen)  # (B, T)
        return self.scheme.sample(T, self.gen)  # (T,)


class TrainBatches(torch.utils.data.IterableDataset):
    """Steps ``start .. steps - 1`` of a :class:`TrainStream` as (ids, targets[, positions]).

    ``len`` is ``steps`` whatever ``start``: the one epoch of a run, which a resumed run
    (Lightning restores the batch count) continues at batch ``start``."""

    def __init__(
        self, stream: TrainStream, steps: int, positions: PositionSampler | None = None, start: int = 0
    ) -> None:
        super().__init__()
        self.stream, self.steps, self.positions, self.start = stream, int(steps), positions, int(start)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        for s in worker_steps(self.start, self.steps):
            b = self.stream.batch(s)
            if self.positions is None:
                yield b.ids, b.targets
            else:
                yield b.ids, b.targets, self.positions(b.ids.shape[1], s, b.ids.shape[0])


def worker_steps(start: int, steps: int) -> range:
    """The steps this process builds: all of them in-process; with k loader workers, worker w
    builds steps start + w, start + w + k, ... The DataLoader takes one batch from each worker
    in turn, so the batches arrive in step order, the same sequence as in-process."""
    info = torch.utils.data.get_worker_info()
    return range(start, steps) if info is None else range(start + info.id, steps, info.num_workers)


def eval_sets(task: Any, seed: int, n: int) -> dict[str, list[tuple[str | None, dict[str, Any], list[Any]]]]:
    """Every non-train split: a list of (group key, overrides, samples); key None when the
    split is one group. Samples 0..n-1 of each split (per group) under ``seed``."""
    out: dict[str, list[tuple[str | None, dict[str, Any], list[Any]]]] = {}
    for split in task.splits:
        if split == "train":
            continue
        groups = task.eval_groups(split)
        if not groups:
            out[split] = [(None, {}, task.sample(split, n, seed=seed))]
        else:
            out[split] = [(group_key(g), dict(g), task.sample(split, n, seed=seed, **g)) for g in groups]
    return out


def group_key(overrides: dict[str, Any]) -> str:
    """``{"length": 41}`` -> ``"41"``; several keys -> ``"a=1,b=2"``."""
    if len(overrides) == 1:
        return str(next(iter(overrides.values())))
    return ",".join(f"{k}={v}" for k, v in sorted(overrides.items()))


def probe_train_length(task: Any, seed: int, n: int = 2) -> int:
    """The longest of the first ``n`` training samples (each batch's overrides applied)."""
    train_len = 0
    for s in range(n):
        ov = task.train_overrides(_rng(seed, _TRAIN_BATCH, s))
        train_len = max(train_len, *(len(x) for x in task.sample("train", 1, seed=seed, start=s, **ov)))
    return train_len


def probe_lengths(task: Any, seed: int, n: int = 2) -> tuple[int, int]:
    """(longest training length, longest evaluation length) over a few samples per split and
    group: a cheap estimate for validation before a run (the run itself uses the real sets)."""
    train_len = probe_train_length(task, seed, n)
    eval_len = 0
    for split in task.splits:
        if split == "train":
            continue
        for g in task.eval_groups(split) or [{}]:
            eval_len = max(eval_len, *(len(x) for x in task.sample(split, n, seed=seed, **g)))
    return train_len, eval_len


class DataModule(L.LightningDataModule):
    """A task's training stream (and its evaluation sets) for a Lightning Trainer."""

    def __init__(
        self,
        task: Any,
        seed: int,
        batch_size: int,
        steps: int,
        n_train: int | None = None,
        positions: Any = None,
        eval_samples: int = 0,
        workers: int | None = None,
    ) -> None:
        super().__init__()
        self.task, self.seed, self.steps, self.workers = task, int(seed), int(steps), workers
        self.stream = TrainStream(task, seed, batch_size, n_train)
        self.positions = PositionSampler(positions, seed) if positions is not None else None
        self.eval_samples = int(eval_samples)
        self._eval: dict[str, Any] | None = None

    @property
    def pad_id(self) -> int:
        return self.stream.pad_id

    def eval_sets(self) -> dict[str, list[tuple[str | None, dict[str, Any], list[Any]]]]:
        if self._eval is None:
            self._eval = eval_sets(self.task, self.seed, self.eval_samples)
        return self._eval

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        # batches are built in-process (num_workers=0): generation is cheap and a worker
        # pool would cost more than it saves at these model sizes. A resumed run starts at the
        # step its checkpoint restored (the trainer's global step).
        start = int(self.trainer.global_step) if self.trainer is not None else 0
        ds = TrainBatches(self.stream, self.steps, self.positions, start=start)
        return StepLoader.for_trainer(ds, self.trainer, self.workers, [self.stream])


class StepLoader(torch.utils.data.DataLoader):
    """A DataLoader that Lightning treats as resumable: its position is the step the trainer
    restores, so it has no state of its own."""

    streams: list[Any] = []  # the TrainStreams whose longest batch to note (batches built elsewhere)

    @classmethod
    def for_trainer(
        cls,
        dataset: torch.utils.data.IterableDataset,
        trainer: Any,
        workers: int | None = None,
        streams: list[Any] | None = None,
    ) -> "StepLoader":
        """The batches of ``dataset`` as they come (``batch_size=None``) for ``trainer``.

        On a CUDA device in pinned memory: Lightning copies a batch to the device with
        ``non_blocking=True``; from pageable memory the driver stages that copy through its own
        buffer and may hold the host (CUDA's "API synchronization behavior"; PyTorch's guide to
        non_blocking and pin_memory), from pinned memory it is queued on the stream.

        ``workers`` (``train.data_workers``; None: 2 on a CUDA device, 0 on CPU) processes build
        the batches ahead of the steps. On a GPU the host's time a step is its launches plus the
        batch: built in-process 1.6-5.1 ms at the quick presets, received from a worker 0.7-1.0
        ms whatever its size (the tensors cross in shared memory; ``benchmarks/data_loader.py``);
        a worker spends about that more than the generation, so two keep ahead of short steps.
        On CPU the cores are training. ``streams``: whose ``max_len`` (the record's train_len)
        to keep up to date with the batches that arrive, since a worker's copy of the stream is
        not this process's."""
        device = getattr(getattr(trainer, "strategy", None), "root_device", None)
        cuda = getattr(device, "type", None) == "cuda"
        n = (2 if cuda else 0) if workers is None else int(workers)
        loader = cls(dataset, batch_size=None, num_workers=n, pin_memory=cuda, prefetch_factor=4 if n else None)
        loader.streams = list(streams or []) if n else []
        return loader

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # the batches, not a DataLoader iterator
        if not self.streams:
            yield from super().__iter__()
            return
        for batch in super().__iter__():
            width = int(batch[0].shape[-1])
            for st in self.streams:
                st.max_len = max(st.max_len, width)
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
