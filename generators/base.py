"""The task protocol shared by every generator: parameters, splits, addressable seeding.

A task is a small class with
- ``PARAMS``: its parameters (name -> :class:`Param`, with default, type and range check),
- ``vocab``: its token strings (token id = index in the list),
- ``separators``: the tokens that END a BiPE segment,
- ``segment_starts``: the tokens that START one (default none),
- ``split_params(split)``: the parameters one split is drawn with,
- ``generate(rng, p)``: one example as numpy arrays (vectorised inside the example),
- ``solve(sample)``: an independent re-derivation of the targets from the tokens alone.

Sample ``i`` of split ``s`` under seed ``k`` comes from its own
``Generator(PCG64(SeedSequence([k, split_id(s), i, ...])))`` so it is the same whatever the
batch size, order, process or machine.

Train / test disjointness: splits drawn from the training distribution (``HELD_OUT_SPLITS``,
usually ``test``) are separated from ``train`` by a hash of the input tokens: a sample whose
hash falls in bucket 0 of ``HASH_BUCKETS`` belongs to the held-out splits only, every other
sample to ``train`` only (rejection sampling, deterministic). So a test sample can never be a
training sample, whatever the size of the training set.

Numpy only: importing ``synthlab.generators`` never imports torch.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

#: the words read as true / false (any case, surrounding blanks ignored); the one list for
#: ``--set``, sweep-file settings, task parameters and pe spec parameters (here, at the
#: lowest layer: synthlab.generators imports nothing else from synthlab; synthlab.core.config re-exports them)
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def parse_bool(value: Any) -> bool:
    """``True`` / ``False``, or one of :data:`TRUE_WORDS` / :data:`FALSE_WORDS`; else ValueError."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError(f"expected true or false ({', '.join(TRUE_WORDS)} / {', '.join(FALSE_WORDS)}), got {value!r}")


PAD = "<pad>"  # not in any task vocab; the data layer appends it as id len(vocab)

#: the one seed range (data, model initialisation, positions; synthlab.core.errors re-exports it):
#: Lightning's seed_everything and numpy's legacy seeding take 32-bit seeds
SEED_MAX = 2**32 - 1
#: the largest integer task parameter (a length or a count); a seed parameter takes a seed
MAX_SIZE = 1_000_000


def check_seed(seed: Any, what: str = "seed") -> int:
    """``seed`` as an int when it is an integer in 0..SEED_MAX, else ValueError naming ``what``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) <= SEED_MAX:
        raise ValueError(f"{what} must be an integer from 0 to {SEED_MAX} (2**32 - 1), got {seed!r}")
    return int(seed)


@dataclass(frozen=True)
class Param:
    """One task parameter: default, python type, and a range check.

    ``check(value)`` returns None when the value is allowed, else a short phrase saying what
    is allowed (e.g. "must be >= 1").
    """

    default: Any
    type: type
    help: str = ""
    check: Callable[[Any], str | None] | None = None


def positive(v: Any) -> str | None:
    return None if v >= 1 else "must be >= 1"


def non_negative(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0"


def probability(v: Any) -> str | None:
    return None if 0.0 <= v <= 1.0 else "must be in [0, 1]"


def open_probability(v: Any) -> str | None:
    return None if 0.0 < v < 1.0 else "must be in (0, 1)"


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


def prime(v: Any) -> str | None:
    return None if is_prime(v) else "must be a prime number"


def split_id(split: str) -> int:
    """A stable 32-bit id for a split name (Python's hash() is salted per process)."""
    return zlib.crc32(split.encode())


def _overrides_id(overrides: dict[str, Any]) -> int:
    return zlib.crc32(json.dumps(overrides, sort_keys=True).encode())


def example_rng(seed: int, split: str, index: int, overrides: dict[str, Any] | None = None) -> np.random.Generator:
    key = [int(seed), split_id(split), int(index)]
    if overrides:
        key.append(_overrides_id(overrides))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))


def input_hash_bucket(ids: np.ndarray, buckets: int) -> int:
    digest = hashlib.blake2b(np.ascontiguousarray(ids, dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % buckets


@dataclass
class Sample:
    """One example. ``logits[scored[k]]`` must predict ``target_ids[k]``.

    For next-token tasks ``target_ids[k] == ids[scored[k] + 1]``, except MQAR (its values are
    labels only, as in Zoology); for placeholder tasks (CHE) the targets are not part of ``ids``.
    ``loss_positions``/``loss_targets`` say where the training loss goes (defaults: the scored positions).
    """

    task: str
    split: str
    seed: int
    index: int
    params: dict[str, Any]
    vocab: list[str]
    ids: np.ndarray  # (T,) int64, the model's input
    scored: np.ndarray  # (S,) int64 positions
    target_ids: np.ndarray  # (S,) int64
    loss_positions: np.ndarray | None = None  # (L,) int64
    loss_targets: np.ndarray | None = None  # (L,) int64
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> list[str]:
        return [self.vocab[i] for i in self.ids]

    @property
    def targets(self) -> list[str]:
        return [self.vocab[i] for i in self.target_ids]

    def __len__(self) -> int:
        return len(self.ids)

    def to_record(self) -> dict[str, Any]:
        """The JSON-lines record of docs/interfaces.md (a generated sample), exactly these field names."""
        return {
            "task": self.task,
            "split": self.split,
            "seed": self.seed,
            "index": self.index,
            "params": self.params,
            "tokens": self.tokens,
            "ids": [int(i) for i in self.ids],
            "scored": [int(i) for i in self.scored],
            "targets": self.targets,
        }


def _check_type(name: str, value: Any, spec: Param) -> Any:
    want = spec.type
    if want is bool:
        try:  # the words every true/false setting accepts (TRUE_WORDS / FALSE_WORDS above)
            return parse_bool(value)
        except ValueError:
            raise ValueError(f"parameter {name!r}: expected true or false, got {value!r}") from None
    if want is int:
        if isinstance(value, bool):
            raise ValueError(f"parameter {name!r}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
            try:  # "1e3", as --set reads the model and train settings
                f = float(value)
            except ValueError:
                f = float("nan")
            if np.isfinite(f) and f.is_integer():
                return int(f)
        raise ValueError(f"parameter {name!r}: expected an integer, got {value!r}")
    if want is float:
        if isinstance(value, bool):
            raise ValueError(f"parameter {name!r}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ValueError(f"parameter {name!r}: expected a number, got {value!r}")
    if want is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"parameter {name!r}: expected a string, got {value!r}")
    return want(value)


class Task(ABC):
    """Base class of every task. Subclasses set the class attributes and implement
    ``vocab``, ``split_params``, ``generate`` and ``solve``."""

    name: ClassVar[str]
    family: ClassVar[str]
    description: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Param]] = {}
    #: how outputs are read: "next_token" (teacher forcing), "placeholder" (CHE) or
    #: "greedy" (arithmetic: the answer is decoded from the prompt)
    scoring: ClassVar[str] = "next_token"
    #: headline metric names reported besides token_acc / seq_acc
    metrics: ClassVar[tuple[str, ...]] = ()
    #: splits drawn from the training distribution, kept disjoint from train by input hash
    #: the generator's revision: raised whenever one seed and the same parameters give other
    #: samples (a fixed defect, a changed law). Records carry it (``task_revision``) so that grids
    #: never average runs of two revisions; records written before it existed read as 1.
    REVISION: ClassVar[int] = 1
    HELD_OUT_SPLITS: ClassVar[tuple[str, ...]] = ("test",)
    HASH_BUCKETS: ClassVar[int] = 16
    #: after this many rejected draws :meth:`sample_one` calls :meth:`draw_params` again (None:
    #: never): a drawn count whose tiny sample space has no sample on the split's side of the
    #: hash partition (counting: some 3-5 statement programs) must not stall or fail the sample
    REDRAW_AFTER: ClassVar[int | None] = None
    #: the parameter that sets a sample's length, if one does (CHE: "length")
    length_param: ClassVar[str | None] = None
    #: BiPE: tokens that START a segment, for tasks without a natural closing separator
    #: (flip-flop's writes); ``separators`` are the tokens that end one
    segment_starts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.PARAMS))
        if unknown:
            allowed = ", ".join(sorted(self.PARAMS)) or "none"
            raise ValueError(f"task {self.name!r}: unknown parameter {unknown[0]!r} (allowed: {allowed})")
        resolved: dict[str, Any] = {}
        for name, spec in self.PARAMS.items():
            # an optional parameter (default None, e.g. CHE ``length``) may also be passed as None
            if name not in params or (params[name] is None and spec.default is None):
                value = spec.default
            else:
                value = _check_type(name, params[name], spec)
            if spec.type is int and value is not None:
                if name.endswith("seed"):
                    check_seed(value, f"task {self.name!r}: parameter {name!r}")
                elif abs(value) > MAX_SIZE:
                    raise ValueError(
                        f"task {self.name!r}: parameter {name!r} must be at most {MAX_SIZE:,} "
                        f"(a larger size cannot be generated), got {value!r}"
                    )
            if spec.check is not None and value is not None:
                problem = spec.check(value)
                if problem:
                    raise ValueError(f"task {self.name!r}: parameter {name!r} {problem}, got {value!r}")
            resolved[name] = value
        self.params = resolved
        self.validate()

    # -- to override -------------------------------------------------------------------
    def validate(self) -> None:  # noqa: B027 - optional: a task without cross-parameter checks keeps this
        """Cross-parameter checks; raise ValueError naming the parameter."""

    @property
    @abstractmethod
    def vocab(self) -> list[str]: ...

    @property
    def separators(self) -> tuple[str, ...]:
        return ()

    @property
    @abstractmethod
    def splits(self) -> tuple[str, ...]: ...

    @abstractmethod
    def split_params(self, split: str) -> dict[str, Any]: ...

    @abstractmethod
    def generate(self, rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return (ids, scored, target_ids) for one example drawn with parameters ``p``."""
        ...

    @abstractmethod
    def solve(self, sample: Sample) -> list[str]:
        """Recompute the target strings from ``sample.tokens`` alone."""
        ...

    def draw_params(self, rng: np.random.Generator, p: dict[str, Any]) -> dict[str, Any]:
        """Per-sample parameters drawn once, before the hash rejection of :meth:`sample_one`
        (arithmetic: the operator count; counting: the statement count), so that rejection
        cannot reweight them: a held-out split keeps the training mix (drawn again only after
        ``REDRAW_AFTER`` rejections). Default: ``p`` unchanged, nothing drawn."""
        return p

    def loss_positions(
        self, ids: np.ndarray, scored: np.ndarray, target_ids: np.ndarray, p: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Where the training loss goes, and its targets. Default: the scored positions."""
        return scored, target_ids

    def eval_groups(self, split: str) -> list[dict[str, Any]] | None:
        """For splits evaluated per length (or per parameter value): one override dict per
        group, e.g. ``[{"length": 41}, {"length": 42}, ...]``. None: the split is one group."""
        return None

    def train_overrides(self, rng: np.random.Generator) -> dict[str, Any]:
        """Overrides shared by one training batch (CHE: one length per batch)."""
        return {}

    # -- shared machinery --------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def token_id(self, token: str) -> int:
        return self.vocab.index(token)

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"task {self.name!r}: unknown split {split!r} (allowed: {', '.join(self.splits)})")

    def resolved_split_params(self, split: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        self.check_split(split)
        p = dict(self.split_params(split))
        if overrides:
            for k, v in overrides.items():
                if k not in p:
                    raise ValueError(
                        f"task {self.name!r}: {k!r} cannot be overridden per sample (allowed: {', '.join(sorted(p))})"
                    )
                p[k] = v
        return p

    def _accept(self, ids: np.ndarray, split: str) -> bool:
        if not self.HELD_OUT_SPLITS:
            return True
        if split == "train":
            return input_hash_bucket(ids, self.HASH_BUCKETS) != 0
        if split in self.HELD_OUT_SPLITS:
            return input_hash_bucket(ids, self.HASH_BUCKETS) == 0
        return True

    def sample_one(
        self,
        split: str,
        seed: int,
        index: int,
        overrides: dict[str, Any] | None = None,
        p: dict[str, Any] | None = None,
    ) -> Sample:
        if p is None:
            p = self.resolved_split_params(split, overrides)
        rng = example_rng(seed, split, index, overrides)
        q = self.draw_params(rng, p)
        for attempt in range(1, 10_001):
            ids, scored, target_ids = self.generate(rng, q)
            if self._accept(ids, split):
                break
            if self.REDRAW_AFTER and attempt % self.REDRAW_AFTER == 0:
                q = self.draw_params(rng, p)
        else:  # pragma: no cover - only with a degenerate parameter choice
            raise ValueError(f"task {self.name!r}: split {split!r} has too few distinct samples to hold out a test set")
        loss_pos, loss_tgt = self.loss_positions(ids, scored, target_ids, p)
        return Sample(
            task=self.name,
            split=split,
            seed=int(seed),
            index=int(index),
            params=_jsonable(p),
            vocab=self.vocab,
            ids=np.asarray(ids, dtype=np.int64),
            scored=np.asarray(scored, dtype=np.int64),
            target_ids=np.asarray(target_ids, dtype=np.int64),
            loss_positions=np.asarray(loss_pos, dtype=np.int64),
            loss_targets=np.asarray(loss_tgt, dtype=np.int64),
        )

    def sample(self, split: str, n: int, seed: int = 0, start: int = 0, **overrides: Any) -> list[Sample]:
        """Samples ``start .. start + n - 1`` of ``split`` under ``seed``."""
        check_seed(seed)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        p = self.resolved_split_params(split, overrides)
        return [self.sample_one(split, seed, i, overrides or None, p) for i in range(start, start + n)]

    def iter_samples(self, split: str, indices: Iterable[int], seed: int = 0, **overrides: Any) -> list[Sample]:
        check_seed(seed)
        p = self.resolved_split_params(split, overrides)
        return [self.sample_one(split, seed, i, overrides or None, p) for i in indices]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "description": self.description,
            "paper": self.paper,
            "splits": list(self.splits),
            "params": {k: v.default for k, v in self.PARAMS.items()},
            "separators": list(self.separators),
            "scoring": self.scoring,
            "metrics": ["token_acc", "seq_acc", *self.metrics],
        }


def _jsonable(p: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in p.items():
        if isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out
