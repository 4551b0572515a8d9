"""CHE context-sensitive tasks: duplicate_string, missing_duplicate_string, odds_first,
binary_addition, binary_multiplication, compute_sqrt, bucket_sort (Deletang et al. 2023,
App. A.3)."""

from __future__ import annotations

import math
from abc import abstractmethod

import numpy as np

from ..base import Sample
from .base import EOS, CheTask, bits_to_int, che_params, int_to_bits, nonzero_bits

DIGITS = ("0", "1", "2", "3", "4")


class DuplicateString(CheTask):
    """N bits w; output w w (2N placeholders)."""

    name = "duplicate_string"
    level = "CS"
    description = "output the input bits twice"
    INPUTS = ("0", "1")
    OUTPUTS = ("0", "1")

    def output_length(self, n: int) -> int:
        return 2 * n

    def n_inputs(self, n: int) -> int:
        return 2**n

    def make(self, rng, n):
        bits = rng.integers(0, 2, size=n)  # (N,)
        return bits, np.concatenate([bits, bits]), 2 * n

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        return s + s


class MissingDuplicateString(CheTask):
    """w w with w = N // 2 uniform bits and one uniform position replaced by ``_``, then a
    pad ``.`` if N is odd; output the masked bit. N = 1 is skipped (the reference returns a
    constant there): ``length`` must be >= 2."""

    name = "missing_duplicate_string"
    level = "CS"
    description = "recover the masked bit of a duplicated string"
    INPUTS = ("0", "1", "_", ".")
    OUTPUTS = ("0", "1")
    MIN_LENGTH = 2
    PARAMS = che_params(2)

    def n_inputs(self, n: int) -> int:
        h = n // 2
        return 2**h * 2 * h  # (w, masked position) pairs, one-to-one with inputs

    def make(self, rng, n):
        h = n // 2
        w = rng.integers(0, 2, size=h)  # (h,)
        inp = np.empty(n, dtype=np.int64)
        inp[:h] = w
        inp[h : 2 * h] = w
        if n % 2:
            inp[-1] = self._ID["."]
        i = int(rng.integers(0, 2 * h))
        hidden = int(inp[i])
        inp[i] = self._ID["_"]
        return inp, np.array([hidden]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        if s[-1] == ".":
            s = s[:-1]
        h = len(s) // 2
        i = s.index("_")
        return [s[i + h] if i < h else s[i - h]]


class OddsFirst(CheTask):
    """N bits s[0..N-1]; output s[1::2] then s[0::2] (0-indexed), N placeholders.

    code: the reference code puts the 0-indexed odd positions first; its docstring example
    (``00110101 -> 0100 0111``, the 1-indexed reading) disagrees with its code, which gives
    ``0111 0100``. We follow the code."""

    name = "odds_first"
    level = "CS"
    description = "output the bits at odd positions, then those at even positions"
    INPUTS = ("0", "1")
    OUTPUTS = ("0", "1")

    def output_length(self, n: int) -> int:
        return n

    def n_inputs(self, n: int) -> int:
        return 2**n

    def make(self, rng, n):
        bits = rng.integers(0, 2, size=n)  # (N,)
        return bits, np.concatenate([bits[1::2], bits[0::2]]), n

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        return [s[i] for i in range(1, len(s), 2)] + [s[i] for i in range(0, len(s), 2)]


def _le_value(bits: list[str]) -> int:
    return sum(1 << i for i, b in enumerate(bits) if b == "1")


def _le_string(v: int) -> list[str]:
    return list(format(v, "b")[::-1])


class _BinaryOp(CheTask):
    """Shared by binary_addition / binary_multiplication: for N >= 3 the operand lengths are
    l ~ U{1..N-2} and N - 1 - l, the operands x ~ U{1..2^l - 1} written little-endian with
    exactly l digits (so trailing zeros may occur), joined by the operator token. The result
    is little-endian without trailing zeros, then ``<eos>``, then padding ``0``. Scored: the
    result and ``<eos>``. BiPE separator: the operator token."""

    level = "CS"
    OUTPUTS = ("0", "1", EOS)
    OUTPUT_PAD = "0"

    def n_inputs(self, n: int) -> int:
        if n <= 2:
            return 2**n - 1
        return sum((2**k - 1) * (2 ** (n - 1 - k) - 1) for k in range(1, n - 1))

    @abstractmethod
    def combine(self, a: int, b: int) -> int:
        """The operation on the two operands."""

    def make(self, rng, n):
        ln = int(rng.integers(1, n - 1))
        a, b = nonzero_bits(rng, ln), nonzero_bits(rng, n - 1 - ln)  # little-endian digits
        v = self.combine(bits_to_int(a), bits_to_int(b))
        res = int_to_bits(v, v.bit_length())
        return np.concatenate([a, [self._ID[self.SEPARATORS[0]]], b]), self._outputs(res, n), len(res) + 1

    def _outputs(self, res: np.ndarray, n: int) -> np.ndarray:
        out = np.full(self.output_length(n), self._ID["0"], dtype=np.int64)
        out[: len(res)] = res
        out[len(res)] = self._ID[EOS]
        return out

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        op = self.SEPARATORS[0]
        if op not in s:  # binary_addition N <= 2: a single number, its own sum
            return _le_string(_le_value(s)) + [EOS]
        i = s.index(op)
        return _le_string(self.combine(_le_value(s[:i]), _le_value(s[i + 1 :]))) + [EOS]


class BinaryAddition(_BinaryOp):
    """``a + b`` little-endian; output a + b little-endian, ``<eos>``, padding (N + 1
    placeholders). N <= 2 is kept as in the reference: the input is one number
    x ~ U{0..2^N - 2} in N little-endian digits (no ``+``) and the output is x (``0`` for 0)."""

    name = "binary_addition"
    description = "add two little-endian binary numbers"
    INPUTS = ("0", "1", "+")
    SEPARATORS = ("+",)

    def output_length(self, n: int) -> int:
        return n + 1

    def combine(self, a: int, b: int) -> int:
        return a + b

    def make(self, rng, n):
        if n > 2:
            return super().make(rng, n)
        x = int(rng.integers(0, 2**n - 1))
        res = int_to_bits(x, max(1, x.bit_length()))
        return int_to_bits(x, n), self._outputs(res, n), len(res) + 1


class BinaryMultiplication(_BinaryOp):
    """``a * b`` little-endian; output a * b little-endian, ``<eos>``, padding (N
    placeholders: the product has at most N - 1 digits). N <= 2 is skipped (the reference
    outputs a constant there): ``length`` must be >= 3."""

    name = "binary_multiplication"
    description = "multiply two little-endian binary numbers"
    INPUTS = ("0", "1", "*")
    SEPARATORS = ("*",)
    MIN_LENGTH = 3
    PARAMS = che_params(3)

    def output_length(self, n: int) -> int:
        return n

    def combine(self, a: int, b: int) -> int:
        return a * b


class ComputeSqrt(CheTask):
    """x ~ U{1..2^N - 1} as N big-endian bits (code); output floor(sqrt(x)) as ceil(N / 2)
    big-endian bits (leading zeros kept)."""

    name = "compute_sqrt"
    level = "CS"
    description = "floor of the square root of a big-endian binary number"
    INPUTS = ("0", "1")
    OUTPUTS = ("0", "1")

    def output_length(self, n: int) -> int:
        return (n + 1) // 2

    def n_inputs(self, n: int) -> int:
        return 2**n - 1

    def make(self, rng, n):
        bits = nonzero_bits(rng, n)  # (N,) big-endian
        root = math.isqrt(bits_to_int(bits, little_endian=False))
        return bits, int_to_bits(root, (n + 1) // 2, little_endian=False), (n + 1) // 2

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        root = math.isqrt(int("".join(s), 2))
        return list(format(root, f"0{math.ceil(len(s) / 2)}b"))


class BucketSort(CheTask):
    """N symbols from 0..4; output them sorted (N placeholders)."""

    name = "bucket_sort"
    level = "CS"
    description = "sort symbols from 0..4"
    INPUTS = DIGITS
    OUTPUTS = DIGITS

    def output_length(self, n: int) -> int:
        return n

    def n_inputs(self, n: int) -> int:
        return 5**n

    def make(self, rng, n):
        sym = rng.integers(0, 5, size=n)  # (N,)
        return sym, np.sort(sym), n

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        return sorted(s)


TASKS = {
    c.name: c
    for c in (
        DuplicateString,
        MissingDuplicateString,
        OddsFirst,
        BinaryAddition,
        BinaryMultiplication,
        ComputeSqrt,
        BucketSort,
    )
}
