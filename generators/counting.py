"""Symbolic counting (CoPE paper Sec. 5.3, Tables 3-4)."""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from .base import Param, Sample, Task, positive

SEMI, EQ, INC, PASS, PRINT = ";", "=", "++", "pass", "print"
SET_S, INC_S, PASS_S = 0, 1, 2  # statement kinds


def _weight(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


class Counting(Task):
    """A program of U{3..max_steps} statements ``a = 0 ;`` (set), ``a ++ ;`` (increment),
    ``pass ;`` (no-op) over ``n_vars`` variables ``a b c ...``, then ``print v`` and the value
    of ``v`` (0..max_value): ``pass ; a = 0 ; pass ; a ++ ; a ++ ; print a 2``.

    Statement law (paper): kinds drawn with weights w_set = 1, w_incr = 7, w_pass; a set picks
    any variable uniformly; an increment picks a uniformly random already-set variable and the
    whole statement is redrawn when no variable is set yet or the value would pass max_value.
    ``v`` is a uniformly random variable that was set. The number of statements stays
    U{3..max_steps}: the program is conditioned on containing a set, by drawing the position of
    the first set from its (truncated geometric) law; before it only passes are possible.

    Scored: the token ``v`` after ``print`` (its target is the answer). Metric: error %.
    Splits: train / test w_pass = 50, ``ood-long`` w_pass = 100, ``ood-short`` w_pass = 10.
    The OOD splits can produce the same program as train (short programs), so they are held
    out by the input hash too (``HELD_OUT_SPLITS``); the statement count is drawn before that
    rejection (:meth:`draw_params`), so every split keeps n ~ U{3..max_steps}. BiPE separator: ``;``.
    """

    name = "counting"
    family = "counting"
    description = "value of a variable after set / increment / pass statements"
    paper = "CoPE Sec. 5.3"
    metrics = ("error",)
    HELD_OUT_SPLITS = ("test", "ood-long", "ood-short")
    PARAMS = {
        "n_vars": Param(1, int, "number of variables (paper: 1, 3, 5)", positive),
        "max_steps": Param(512, int, "statements per program are U{3..max_steps}", positive),
        "max_value": Param(10, int, "largest value a variable can reach", positive),
        "w_set": Param(1.0, float, "weight of set statements", _weight),
        "w_incr": Param(7.0, float, "weight of increment statements", _weight),
        "w_pass": Param(50.0, float, "weight of pass in train / test", _weight),
        "w_pass_long": Param(100.0, float, "weight of pass in ood-long", _weight),
        "w_pass_short": Param(10.0, float, "weight of pass in ood-short", _weight),
    }

    def validate(self) -> None:
        p = self.params
        if p["n_vars"] > 26:
            raise ValueError(
                f"task 'counting': parameter 'n_vars' must be <= 26 (variable names a..z), got {p['n_vars']}"
            )
        if p["max_steps"] < 3:
            raise ValueError(f"task 'counting': parameter 'max_steps' must be >= 3, got {p['max_steps']}")

    @property
    def vocab(self) -> list[str]:
        names = list(string.ascii_lowercase[: self.params["n_vars"]])
        return [SEMI, EQ, INC, PASS, PRINT] + names + [str(v) for v in range(self.params["max_value"] + 1)]

    @property
    def separators(self) -> tuple[str, ...]:
        return (SEMI,)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood-long", "ood-short")

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        w_pass = {"ood-long": p["w_pass_long"], "ood-short": p["w_pass_short"]}.get(split, p["w_pass"])
        return {k: p[k] for k in ("n_vars", "max_steps", "max_value", "w_set", "w_incr")} | {"w_pass": w_pass}

    #: 2: the statement count drawn once, before the hash rejection (draw_params); 1 redrew it
    #: with each rejected program, reweighting the held-out splits' counts
    REVISION = 2

    #: a statement count with (almost) no program on a split's side of the hash partition
    #: (3-5 statements: a few programs carry the mass) is redrawn after this many tries
    REDRAW_AFTER = 500

    def draw_params(self, rng: np.random.Generator, p: dict[str, Any]) -> dict[str, Any]:
        """The statement count n ~ U{3..max_steps}, drawn before the hash rejection (the same
        draw generate() makes first, so an accepted first try is the same program): redrawn
        with each rejected program, n would follow the held-out bucket's share of each count,
        and a few short programs carry most of a short count's mass (max_steps 64, 1 variable:
        4-statement programs were 6.1 % of test instead of 1.6 %, one of them 5.4 % of it)."""
        return {**p, "n_statements": int(rng.integers(3, p["max_steps"] + 1))}

    def _statements(self, rng: np.random.Generator, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """(kinds, vars) of one program and the final values. The Python loop runs over the
        non-pass candidate statements only (the state check of the rejection rule). n: drawn
        by :meth:`draw_params` (in sample_one), else here."""
        nv, top = p["n_vars"], p["max_value"]
        w = np.array([p["w_set"], p["w_incr"], p["w_pass"]])
        probs = w / w.sum()
        n = int(p["n_statements"]) if "n_statements" in p else int(rng.integers(3, p["max_steps"] + 1))
        # first set at position j in 0..n-1: P(j) ~ (1 - q)^j, q = P(set | nothing set yet)
        q = p["w_set"] / (p["w_set"] + p["w_pass"])
        u = rng.random()
        j = int(np.floor(np.log1p(-u * -np.expm1(n * np.log1p(-q))) / np.log1p(-q)))
        j = min(max(j, 0), n - 1)
        kinds = np.full(n, PASS_S, dtype=np.int64)
        vars_ = np.zeros(n, dtype=np.int64)
        first = int(rng.integers(0, nv))
        kinds[j], vars_[j] = SET_S, first
        values = [-1] * nv  # -1: not set
        values[first] = 0
        filled = j + 1
        while filled < n:
            k = n - filled + 16
            ck = rng.choice(3, size=k, p=probs)  # candidate kinds
            cv = rng.integers(0, nv, size=k)  # candidate set variable
            cu = rng.random(k)  # picks the increment variable among the set ones
            keep = np.ones(k, dtype=bool)
            rejected, stop = 0, k
            for c in np.flatnonzero(ck != PASS_S).tolist():
                if c - rejected + filled >= n:
                    stop = c
                    break
                if ck[c] == SET_S:
                    values[cv[c]] = 0
                    continue
                live = [i for i in range(nv) if values[i] >= 0]
                var = live[int(cu[c] * len(live))]
                if values[var] >= top:
                    keep[c] = False
                    rejected += 1
                    continue
                values[var] += 1
                cv[c] = var
            take = np.flatnonzero(keep[:stop])[: n - filled]
            kinds[filled : filled + len(take)] = ck[take]
            vars_[filled : filled + len(take)] = cv[take]
            filled += len(take)
        return kinds, vars_, values

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        nv = p["n_vars"]
        kinds, vars_, values = self._statements(rng, p)
        var0 = 5  # id of variable 'a'
        val0 = var0 + nv  # id of value '0'
        # each statement as 4 token slots, -1 = unused: set "v = 0 ;", incr "v ++ ;", pass "pass ;"
        slots = np.full((len(kinds), 4), -1, dtype=np.int64)  # (n, 4)
        is_set, is_inc, is_pass = kinds == SET_S, kinds == INC_S, kinds == PASS_S
        slots[is_set] = np.stack(
            [
                var0 + vars_[is_set],
                np.full(is_set.sum(), 1),
                np.full(is_set.sum(), val0),
                np.zeros(is_set.sum(), dtype=np.int64),
            ],
            axis=1,
        )
        slots[is_inc, 0] = var0 + vars_[is_inc]
        slots[is_inc, 1] = 2
        slots[is_inc, 2] = 0
        slots[is_pass, 0] = 3
        slots[is_pass, 1] = 0
        body = slots[slots >= 0]
        live = [i for i in range(nv) if values[i] >= 0]
        v = live[int(rng.integers(0, len(live)))]
        ids = np.concatenate([body, [4, var0 + v, val0 + values[v]]]).astype(np.int64)
        scored = np.array([len(ids) - 2], dtype=np.int64)
        return ids, scored, ids[-1:]

    def solve(self, sample: Sample) -> list[str]:
        toks = sample.tokens
        values: dict[str, int] = {}
        k = 0
        while toks[k] != PRINT:
            if toks[k] == PASS:
                assert toks[k + 1] == SEMI
                k += 2
            elif toks[k + 1] == "=":
                values[toks[k]] = int(toks[k + 2])
                assert toks[k + 3] == SEMI
                k += 4
            elif toks[k + 1] == INC:
                values[toks[k]] += 1
                assert toks[k + 2] == SEMI
                k += 3
            else:
                raise ValueError(f"counting: bad statement at token {k}: {toks[k : k + 4]}")
        return [str(values[toks[k + 1]])]


TASKS = {"counting": Counting}
