"""Shared machinery of the Chomsky Hierarchy Evaluation tasks (Deletang et al. 2023).

Protocol (spec "che"): a sample is the input string followed by one placeholder token ``?``
per output (the reference's "dummy token"); the model predicts output ``k`` at placeholder
``k``, so no answer is ever an input (``scoring = "placeholder"``).

    ids        = input tokens (n_in,) + placeholders (n_out,)
    scored     = the first ``n_scored`` placeholder positions
    target_ids = the first ``n_scored`` outputs
    loss       = every placeholder, with the full output (padding included), as the
                 reference trains (its loss sums over all outputs, its accuracy is masked)

``n_scored == n_out`` except for the tasks whose outputs end with a terminator and padding
(stack_manipulation, binary_addition, binary_multiplication): they score the outputs up to
and including the terminator ``<eos>`` (the reference's ``accuracy_mask``), and the padding
(the reference pads with class 0, here the token ``0``) is in the loss only.

Lengths: ``N`` (parameter ``length``) is the task's length argument of the reference
``sample_batch(rng, batch_size, length)``; each task says how N maps to its input and output
lengths. One length per training batch: ``train_overrides(rng)`` draws
N ~ U{min_length..train_max_length}. Without an override (a plain ``sample("train", n)``)
each sample draws its own N from the split's range with its own generator.

Splits
- ``train``: N in min_length..train_max_length.
- ``test``: N in test_lo..train_max_length, hash-disjoint from train (base class). test_lo is
  the smallest N whose input space holds at least ``HELD_OUT_MIN_INPUTS`` (1024) distinct
  strings, so bucket 0 of 16 still holds ~64 of them; shorter lengths are train-only (train
  accepts every string there, so its short-length law is the reference's, and no test string
  has that length). If test_lo > train_max_length the task has no ``test`` split.
- ``ood``: N in test_min_length..test_max_length (default 41..500), no hash constraint (the
  lengths are never trained on). ``eval_groups`` gives one group per N for test and ood.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ..base import Param, Sample, Task, _check_type, input_hash_bucket, positive

PLACEHOLDER = "?"
EOS = "<eos>"
#: held-out lengths need this many distinct inputs (so 1/16 of them is a usable test set)
HELD_OUT_MIN_INPUTS = 1024


def _at_least(minimum: int):
    def check(v: Any) -> str | None:
        return None if v >= minimum else f"must be >= {minimum}"

    return check


def che_params(min_length: int) -> dict[str, Param]:
    """The four parameters every CHE task has (``length`` None: drawn per split)."""
    return {
        "length": Param(
            None, int, "fix N for every split (default: drawn from the split's range)", _at_least(min_length)
        ),
        "train_max_length": Param(40, int, "train N ~ U{min_length..train_max_length}", _at_least(min_length)),
        "test_min_length": Param(41, int, "first OOD length", positive),
        "test_max_length": Param(500, int, "last OOD length", positive),
    }


# -- little helpers shared by the tasks ---------------------------------------------------


def bits_to_int(bits: np.ndarray, little_endian: bool = True) -> int:
    """The integer whose binary digits are ``bits`` (0/1 array)."""
    if not little_endian:
        bits = bits[::-1]
    return int.from_bytes(np.packbits(bits.astype(np.uint8), bitorder="little").tobytes(), "little")


def int_to_bits(x: int, length: int, little_endian: bool = True) -> np.ndarray:
    """The ``length`` lowest binary digits of ``x`` (int64 array, little-endian by default)."""
    nbytes = max(1, (length + 7) // 8)
    bits = np.unpackbits(np.frombuffer(x.to_bytes(nbytes, "little"), dtype=np.uint8), bitorder="little")[:length]
    bits = bits.astype(np.int64)
    return bits if little_endian else bits[::-1].copy()


def nonzero_bits(rng: np.random.Generator, length: int) -> np.ndarray:
    """``length`` uniform bits, not all zero: the digits of x ~ U{1..2^length - 1}."""
    while True:
        bits = rng.integers(0, 2, size=length)
        if bits.any():
            return bits


class CheTask(Task):
    """Base class of the 15 CHE tasks. A subclass sets ``INPUTS`` / ``OUTPUTS`` (token
    strings; an output string equal to an input string is the same token), ``MIN_LENGTH``,
    and implements ``output_length(N)``, ``n_inputs(N)`` and ``make(rng, N)``."""

    family = "che"
    paper = "Deletang et al. 2023 (ICLR); Ruoss et al. 2023; DAPE V2 App. G"
    scoring = "placeholder"
    #: the CHE score: per-token accuracy on the scored outputs, averaged over test lengths
    metrics = ("length_mean_acc",)
    length_param = "length"

    level: ClassVar[str] = ""  # "R" (regular), "DCF" (deterministic context-free), "CS"
    MIN_LENGTH: ClassVar[int] = 1
    INPUTS: ClassVar[tuple[str, ...]] = ()
    OUTPUTS: ClassVar[tuple[str, ...]] = ()
    SEPARATORS: ClassVar[tuple[str, ...]] = ()
    #: the padding output after the terminator (reference: class 0)
    OUTPUT_PAD: ClassVar[str | None] = None
    PARAMS = che_params(1)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        vocab = list(cls.INPUTS) + [t for t in cls.OUTPUTS if t not in cls.INPUTS] + [PLACEHOLDER]
        cls._VOCAB = vocab
        cls._ID = {t: i for i, t in enumerate(vocab)}

    # -- per task -------------------------------------------------------------------------
    def output_length(self, n: int) -> int:
        """Number of placeholders (outputs) for length N."""
        return 1

    def input_length(self, n: int) -> int:
        """Number of input tokens for length N."""
        return n

    @abstractmethod
    def n_inputs(self, n: int) -> int:
        """Number of distinct input strings of length N (decides the held-out lengths)."""

    @abstractmethod
    def make(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(input ids (n_in,), output ids (n_out,), n_scored) for one example of length N."""

    # -- protocol -------------------------------------------------------------------------
    def validate(self) -> None:
        p = self.params
        if p["test_min_length"] <= p["train_max_length"]:
            raise ValueError(
                f"task {self.name!r}: parameter 'test_min_length' must be > train_max_length "
                f"({p['train_max_length']}) so OOD lengths are unseen, got {p['test_min_length']}"
            )
        if p["test_max_length"] < p["test_min_length"]:
            raise ValueError(
                f"task {self.name!r}: parameter 'test_max_length' must be >= test_min_length "
                f"({p['test_min_length']}), got {p['test_max_length']}"
            )
        self.test_lo = self._first_held_out_length()
        self._held_out_min_tokens = self.input_length(self.test_lo)
        self._placeholder = self._ID[PLACEHOLDER]

    def _first_held_out_length(self) -> int:
        n = self.MIN_LENGTH
        while self.n_inputs(n) < HELD_OUT_MIN_INPUTS:
            n += 1
        return n

    @property
    def vocab(self) -> list[str]:
        return self._VOCAB

    @property
    def separators(self) -> tuple[str, ...]:
        return self.SEPARATORS

    @property
    def has_test(self) -> bool:
        return self.test_lo <= self.params["train_max_length"]

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood") if self.has_test else ("train", "ood")

    def length_range(self, split: str) -> tuple[int, int]:
        p = self.params
        if split == "train":
            return self.MIN_LENGTH, p["train_max_length"]
        if split == "test":
            return self.test_lo, p["train_max_length"]
        return p["test_min_length"], p["test_max_length"]

    def split_params(self, split: str) -> dict[str, Any]:
        lo, hi = self.length_range(split)
        return {"length": self.params["length"], "min_length": lo, "max_length": hi}

    def resolved_split_params(self, split: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        if overrides:
            overrides = {
                k: (None if v is None else _check_type(k, v, self.PARAMS["length"])) for k, v in overrides.items()
            }
        p = super().resolved_split_params(split, overrides)
        lo = self.test_lo if split == "test" else self.MIN_LENGTH
        why = "the shortest held-out test length" if split == "test" else f"{self.name} needs it"
        for key in ("length", "min_length"):
            if p[key] is not None and p[key] < lo:
                raise ValueError(
                    f"task {self.name!r}: parameter {key!r} must be >= {lo} in split {split!r} ({why}), got {p[key]}"
                )
        if p["max_length"] < p["min_length"]:
            raise ValueError(
                f"task {self.name!r}: parameter 'max_length' must be >= min_length "
                f"({p['min_length']}), got {p['max_length']}"
            )
        return p

    def eval_groups(self, split: str) -> list[dict[str, Any]] | None:
        self.check_split(split)
        if split == "train":
            return None
        lo, hi = self.length_range(split)
        return [{"length": n} for n in range(lo, hi + 1)]

    def train_overrides(self, rng: np.random.Generator) -> dict[str, Any]:
        """One length per training batch: N ~ U{min_length..train_max_length}."""
        lo, hi = self.length_range("train")
        return {"length": int(rng.integers(lo, hi + 1))}

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        n = p["length"]
        if n is None:
            n = int(rng.integers(p["min_length"], p["max_length"] + 1))
        inp, out, n_scored = self.make(rng, n)
        n_in = len(inp)
        ids = np.empty(n_in + len(out), dtype=np.int64)  # (n_in + n_out,)
        ids[:n_in] = inp
        ids[n_in:] = self._placeholder
        return ids, np.arange(n_in, n_in + n_scored), out[:n_scored]

    def loss_positions(self, ids, scored, target_ids, p):
        """Every placeholder; after the scored outputs the targets are the padding."""
        pos = np.flatnonzero(ids == self._placeholder)
        if len(pos) == len(scored):
            return scored, target_ids
        tgt = np.full(len(pos), self._ID[self.OUTPUT_PAD], dtype=np.int64)
        tgt[: len(target_ids)] = target_ids
        return pos, tgt

    def _accept(self, ids: np.ndarray, split: str) -> bool:
        n_in = len(ids) - int(np.count_nonzero(ids == self._placeholder))
        if n_in < self._held_out_min_tokens:  # a train-only length: no test string is this long
            return split not in self.HELD_OUT_SPLITS
        bucket0 = input_hash_bucket(ids, self.HASH_BUCKETS) == 0
        if split == "train":
            return not bucket0
        if split in self.HELD_OUT_SPLITS:
            return bucket0
        return True

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["level"] = self.level
        d["test_lengths"] = list(self.length_range("test")) if self.has_test else None
        return d

    # -- solver helpers ---------------------------------------------------------------------
    @staticmethod
    def split_sample(sample: Sample) -> tuple[list[str], int]:
        """(input tokens, number of placeholders) of a sample, from its tokens alone."""
        toks = sample.tokens
        inp = [t for t in toks if t != PLACEHOLDER]
        return inp, len(toks) - len(inp)


@lru_cache(maxsize=None)
def count_bracket_expressions(length: int, n_ops: int, modulus: int = 5) -> int:
    """Number of expressions of ``length`` characters in the reference grammar
    E -> d | -d | (d) | (-d) | (E op E) (unambiguous, so = number of derivations)."""
    if length <= 4:
        return modulus
    return n_ops * sum(
        count_bracket_expressions(left, n_ops, modulus) * count_bracket_expressions(length - 3 - left, n_ops, modulus)
        for left in range(1, length - 3)
    )
