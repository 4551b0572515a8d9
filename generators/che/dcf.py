"""CHE deterministic context-free tasks: stack_manipulation, reverse_string,
modular_arithmetic_brackets, solve_equation (Deletang et al. 2023, App. A.2)."""

from __future__ import annotations

import numpy as np

from ..base import Sample
from .base import EOS, CheTask, che_params, count_bracket_expressions

DIGITS = ("0", "1", "2", "3", "4")


class StackManipulation(CheTask):
    """A stack of U{1..N-1} bits (bottom to top), then N - size actions ``POP`` / ``PUSH0`` /
    ``PUSH1`` (uniform; POP on an empty stack is ignored). Output (N + 1 placeholders): the
    final stack top to bottom, ``<eos>``, then padding ``0`` (reference: class 0).

    Scored: the stack and the terminator (the reference's accuracy mask); the padding is in
    the loss only. N = 1 is kept as the reference does: one stack bit, no action, output
    ``b <eos>``.

    Generation (vectorised): the stack height is a random walk reflected at 0,
    h_t = S_t - min(0, min_{u<=t} S_u) with S = size + cumsum(+-1); the element at level k of
    the final stack is the bit of the last push that reached height k, or the initial
    element k if no push ever did (then the stack never went below k).
    """

    name = "stack_manipulation"
    level = "DCF"
    description = "replay POP/PUSH actions on a given stack, output it top to bottom"
    INPUTS = ("0", "1", "POP", "PUSH0", "PUSH1")
    OUTPUTS = ("0", "1", EOS)
    OUTPUT_PAD = "0"

    def output_length(self, n: int) -> int:
        return n + 1

    def n_inputs(self, n: int) -> int:
        if n == 1:
            return 2
        return sum(2**s * 3 ** (n - s) for s in range(1, n))

    def make(self, rng, n):
        size = 1 if n == 1 else int(rng.integers(1, n))
        stack = rng.integers(0, 2, size=size)  # (size,) bottom to top
        actions = rng.integers(2, 5, size=n - size)  # (N - size,) ids of POP, PUSH0, PUSH1
        push = actions != 2
        walk = size + np.cumsum(np.where(push, 1, -1))  # (A,) unreflected heights
        height = walk - np.minimum(0, np.minimum.accumulate(walk))  # (A,) heights after each action
        top = int(height[-1]) if len(actions) else size
        final = np.empty(top, dtype=np.int64)  # bottom to top
        keep = min(top, size)
        final[:keep] = stack[:keep]
        push_at = np.flatnonzero(push)[::-1]  # latest first
        levels, first = np.unique(height[push_at], return_index=True)
        last_push = push_at[first]  # latest push reaching each level
        ok = levels <= top
        final[levels[ok] - 1] = actions[last_push[ok]] - 3  # PUSH0 -> 0, PUSH1 -> 1
        out = np.full(n + 1, self._ID["0"], dtype=np.int64)
        out[:top] = final[::-1]  # bit ids are the bits
        out[top] = self._ID[EOS]
        return np.concatenate([stack, actions]), out, top + 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        stack = [t for t in s if t in ("0", "1")]  # the stack comes first, actions after
        for a in s[len(stack) :]:
            if a == "POP":
                if stack:
                    stack.pop()
            else:
                stack.append(a[-1])
        return stack[::-1] + [EOS]


class ReverseString(CheTask):
    """N bits; output the bits reversed (N placeholders)."""

    name = "reverse_string"
    level = "DCF"
    description = "output the input bits in reverse order"
    INPUTS = ("0", "1")
    OUTPUTS = ("0", "1")

    def output_length(self, n: int) -> int:
        return n

    def n_inputs(self, n: int) -> int:
        return 2**n

    def make(self, rng, n):
        bits = rng.integers(0, 2, size=n)  # (N,)
        return bits, bits[::-1], n

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        return list(reversed(s))


def bracket_expression(u: list[float], length: int, n_ops: int, ids: dict[str, int]) -> tuple[list[int], int]:
    """The reference generator (``generate_one_expression_and_result``, modulus 5) without
    recursion: E(L) = d | -d | (d) | (-d) for L = 1..4, else ( E(l) op E(L - 3 - l) ) with
    l ~ U{1..L-4}, op ~ U(+, -, * if n_ops = 3), digits ~ U{0..4}. ``u`` holds the uniform
    draws (at most L + 1 are used). Returns (token ids, value mod 5)."""
    lp, rp, minus = ids["("], ids[")"], ids["-"]
    op_ids = [ids["+"], ids["-"]] + ([ids["*"]] if n_ops == 3 else [])
    toks: list[int] = []
    vals: list[int] = []
    work = [(0, length)]  # (0, L): expand a node; (1, op): emit op; (2, op): close and combine
    k = 0
    while work:
        kind, x = work.pop()
        if kind == 0:
            if x <= 4:
                d = int(u[k] * 5)
                k += 1
                if x == 1:
                    toks.append(d)
                elif x == 2:
                    toks += (minus, d)
                elif x == 3:
                    toks += (lp, d, rp)
                else:
                    toks += (lp, minus, d, rp)
                vals.append(d if x in (1, 3) else -d % 5)
            else:
                left = 1 + int(u[k] * (x - 4))
                op = int(u[k + 1] * n_ops)
                k += 2
                toks.append(lp)
                work += ((2, op), (0, x - 3 - left), (1, op), (0, left))
        elif kind == 1:
            toks.append(op_ids[x])
        else:
            toks.append(rp)
            b, a = vals.pop(), vals.pop()
            vals.append((a + b) % 5 if x == 0 else (a - b) % 5 if x == 1 else (a * b) % 5)
    return toks, vals[0]


def eval_brackets(tokens: list[str], x: int | None = None) -> int:
    """Value mod 5 of a fully bracketed expression (``-`` before a digit negates it; ``x``
    stands for the digit ``x``). Plain stack evaluation, independent of the generator."""
    st: list = []
    neg, prev = False, None
    for t in tokens:
        if t in DIGITS or t == "x":
            v = int(t) if t != "x" else x
            st.append(-v if neg else v)
            neg = False
        elif t == "-" and (prev is None or prev in ("(", "+", "-", "*")):
            neg = True
        elif t in ("(", "+", "-", "*"):
            st.append(t)
        elif t == ")":
            items = []
            while st[-1] != "(":
                items.append(st.pop())
            st.pop()
            if len(items) == 1:
                st.append(items[0])
            else:
                b, op, a = items
                st.append(a + b if op == "+" else a - b if op == "-" else a * b)
        else:
            raise ValueError(f"unexpected token {t!r}")
        prev = t
    (value,) = st
    return value % 5


class ModularArithmeticBrackets(CheTask):
    """A random bracketed expression of exactly N characters over digits 0..4 and
    ``+ - *`` (the reference grammar, see :func:`bracket_expression`); output its value
    mod 5. code: the benchmark uses ``mult=True`` (a constant ``0`` scores about 31%). All N
    >= 1 are kept (N <= 4: ``d``, ``-d``, ``(d)``, ``(-d)``)."""

    name = "modular_arithmetic_brackets"
    level = "DCF"
    description = "value mod 5 of a random bracketed expression with + - *"
    INPUTS = DIGITS + ("+", "-", "*", "(", ")")
    OUTPUTS = DIGITS

    def n_inputs(self, n: int) -> int:
        return count_bracket_expressions(n, 3)

    def make(self, rng, n):
        toks, value = bracket_expression(rng.random(n + 2).tolist(), n, 3, self._ID)
        return np.array(toks, dtype=np.int64), np.array([value]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        return [str(eval_brackets(s))]


class SolveEquation(CheTask):
    """A bracketed expression of N - 2 characters over digits 0..4 and ``+ -`` (no ``*``,
    so the solution is unique), one digit replaced by ``x``, then ``=`` and the value digit;
    output the hidden digit. code: the digit is the first one at or after a uniform position
    (cyclically). N < 3 is skipped (the reference returns all-zero inputs there):
    ``length`` must be >= 3. BiPE separator: ``=``."""

    name = "solve_equation"
    level = "DCF"
    description = "find the digit x in a bracketed +/- equation mod 5"
    INPUTS = DIGITS + ("+", "-", "(", ")", "x", "=")
    OUTPUTS = DIGITS
    SEPARATORS = ("=",)
    MIN_LENGTH = 3
    PARAMS = che_params(3)

    def n_inputs(self, n: int) -> int:
        # (expression, digit position) pairs map one-to-one to equations: >= #expressions
        return count_bracket_expressions(n - 2, 2)

    def make(self, rng, n):
        m = n - 2
        u = rng.random(m + 3).tolist()
        toks, value = bracket_expression(u, m, 2, self._ID)
        expr = np.array(toks, dtype=np.int64)  # (N - 2,)
        digit_at = np.flatnonzero(expr < 5)
        start = int(u[-1] * m)
        pos = digit_at[np.searchsorted(digit_at, start) % len(digit_at)]
        hidden = int(expr[pos])
        expr[pos] = self._ID["x"]
        inp = np.concatenate([expr, [self._ID["="], value]])
        return inp, np.array([hidden]), 1

    def solve(self, sample: Sample) -> list[str]:
        s, _ = self.split_sample(sample)
        eq = s.index("=")
        expr, rhs = s[:eq], int(s[eq + 1])
        sols = [x for x in range(5) if eval_brackets(expr, x) == rhs]
        if len(sols) != 1:
            raise ValueError(f"equation {' '.join(s)} has solutions {sols}, expected exactly one")
        return [str(sols[0])]


TASKS = {c.name: c for c in (StackManipulation, ReverseString, ModularArithmeticBrackets, SolveEquation)}
