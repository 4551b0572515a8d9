"""CHE regular tasks: even_pairs, modular_arithmetic, parity_check, cycle_navigation.

Each has a single output (one placeholder). Deletang et al. 2023, Sec. 4 / App. A.1.
"""

from __future__ import annotations

import numpy as np

from ..base import Sample
from .base import CheTask

DIGITS = ("0", "1", "2", "3", "4")


class EvenPairs(CheTask):
    """N bits; output ``odd`` iff the number of unequal neighbour pairs (01 or 10) is odd,
    i.e. iff first bit != last bit. N = 1 is kept (always ``even``: no pairs)."""

    name = "even_pairs"
    level = "R"
    description = "is the number of 01/10 pairs even (first bit == last bit)?"
    INPUTS = ("0", "1")
    OUTPUTS = ("even", "odd")

    def n_inputs(self, n: int) -> int:
        return 2**n

    def make(self, rng, n):
        bits = rng.integers(0, 2, size=n)  # (N,)
        label = bits[0] ^ bits[-1]
        return bits, np.array([self._ID["even"] + label]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        pairs = sum(1 for a, b in zip(s, s[1:]) if a != b)
        return ["odd" if pairs % 2 else "even"]


# discrete logarithm base 2 in Z_5^*: 2^0 = 1, 2^1 = 2, 2^2 = 4, 2^3 = 3
_LOG2_MOD5 = np.array([0, 0, 1, 3, 2])
_POW2_MOD5 = np.array([1, 2, 4, 3])


class ModularArithmetic(CheTask):
    """Digits 0..4 alternating with ``+ - *`` (uniform), value mod 5 with ``*`` binding first.

    code: the input must have odd length, so an even N becomes N - 1 (N = 2 gives a single
    digit like N = 1). Evaluation (vectorised): subtraction negates the next digit, the
    products of the ``*``-joined terms are taken by discrete logarithms mod 5 (a term with a
    zero factor is 0), then summed mod 5.
    """

    name = "modular_arithmetic"
    level = "R"
    description = "value mod 5 of d op d op ... d (ops + - *, * first)"
    INPUTS = DIGITS + ("+", "-", "*")
    OUTPUTS = DIGITS

    def input_length(self, n: int) -> int:
        return n if n % 2 else n - 1

    def n_inputs(self, n: int) -> int:
        k = self.input_length(n) // 2  # operators
        return 5 ** (k + 1) * 3**k

    def make(self, rng, n):
        m = self.input_length(n)
        k = m // 2
        digits = rng.integers(0, 5, size=k + 1)  # (k+1,)
        ops = rng.integers(0, 3, size=k)  # (k,) 0 '+', 1 '-', 2 '*'
        inp = np.empty(m, dtype=np.int64)
        inp[0::2] = digits
        inp[1::2] = ops + self._ID["+"]
        sign = np.ones(k + 1, dtype=np.int64)
        sign[1:][ops == 1] = -1
        v = (digits * sign) % 5  # (k+1,) signed factors mod 5
        starts = np.concatenate([[0], 1 + np.flatnonzero(ops != 2)])  # first factor of each term
        has_zero = np.add.reduceat((v == 0).astype(np.int64), starts) > 0
        prods = np.where(has_zero, 0, _POW2_MOD5[np.add.reduceat(_LOG2_MOD5[v], starts) % 4])
        return inp, np.array([int(prods.sum()) % 5]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        total, term = 0, int(s[0])
        for op, d in zip(s[1::2], s[2::2]):
            if op == "*":
                term *= int(d)
            else:
                total += term
                term = int(d) if op == "+" else -int(d)
        return [str((total + term) % 5)]


class ParityCheck(CheTask):
    """N bits; output ``odd`` iff the number of 1s is odd."""

    name = "parity_check"
    level = "R"
    description = "is the number of 1s even?"
    INPUTS = ("0", "1")
    OUTPUTS = ("even", "odd")

    def n_inputs(self, n: int) -> int:
        return 2**n

    def make(self, rng, n):
        bits = rng.integers(0, 2, size=n)  # (N,)
        return bits, np.array([self._ID["even"] + int(bits.sum()) % 2]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        return ["odd" if s.count("1") % 2 else "even"]


class CycleNavigation(CheTask):
    """N actions ``L`` (step left), ``S`` (stay), ``R`` (step right) on a 5-cycle from 0;
    output the final position. code: actions a in {0, 1, 2}, answer sum(a - 1) mod 5 (the
    tokens L/S/R are a = 0/1/2)."""

    name = "cycle_navigation"
    level = "R"
    description = "final position on a 5-cycle after L/S/R steps"
    INPUTS = ("L", "S", "R")
    OUTPUTS = DIGITS

    def n_inputs(self, n: int) -> int:
        return 3**n

    def make(self, rng, n):
        actions = rng.integers(0, 3, size=n)  # (N,) = ids of L, S, R
        pos = int((actions - 1).sum()) % 5
        return actions, np.array([self._ID[DIGITS[pos]]]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        pos = 0
        for a in s:
            pos = (pos + {"L": -1, "S": 0, "R": 1}[a]) % 5
        return [str(pos)]


TASKS = {c.name: c for c in (EvenPairs, ModularArithmetic, ParityCheck, CycleNavigation)}
