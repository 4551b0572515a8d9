"""Arithmetic in F_p with chain of thought (Feng et al. 2023; BiPE Sec. 4.1, App. D.1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Param, Sample, Task, input_hash_bucket, positive, prime

OPS = ("+", "-", "*", "/")
BOS, EOS = "<bos>", "<eos>"


def _ood_max(v: Any) -> str | None:
    return None if v >= 0 else "must be >= 0 (0: no ood-ops splits)"


UNIFORM = "uniform"


def _train_mix(value: Any) -> str:
    """``train_mix`` as one string: "uniform", or weights per operator count 1..n_ops,
    comma-separated (a list or tuple of numbers is joined so; its length is checked against
    n_ops in :meth:`Arithmetic.validate`)."""
    what = "task 'arithmetic': parameter 'train_mix'"
    if isinstance(value, (list, tuple)):
        if not value or not all(
            isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in value
        ):
            raise ValueError(f'{what} must be "uniform" or weights per operator count 1..n_ops, got {value!r}')
        value = ",".join(repr(float(x)) for x in value)
    if not isinstance(value, str):
        raise ValueError(f'{what} must be "uniform" or weights per operator count 1..n_ops, got {value!r}')
    text = value.strip()
    if text.lower() == UNIFORM:
        return UNIFORM
    parts = [x.strip() for x in text.split(",")]
    try:
        w = np.array([float(x) for x in parts])
    except ValueError:
        raise ValueError(
            f'{what} must be "uniform" or comma-separated weights per operator count 1..n_ops '
            f'(e.g. "1,2,3"), got {value!r}'
        ) from None
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"{what}: weights must be finite, >= 0 and not all 0, got {value!r}")
    return ",".join(parts)


def mix_weights(train_mix: str, n_ops: int) -> np.ndarray:
    """Weights of operator counts 1..n_ops, (n_ops,) float: ``train_mix``'s, or all 1
    for "uniform"."""
    return np.ones(n_ops) if train_mix == UNIFORM else np.array([float(x) for x in train_mix.split(",")])


class Arithmetic(Task):
    """``<bos> E_n = E_(n-1) = ... = E_0 <eos>`` over F_p (numbers ``0..p-1``, ``+ - * /``,
    brackets; ``/`` multiplies by the inverse).

    Generation with n operators: E_0 is one uniform number; expansion k picks a number leaf of
    E_(k-1) uniformly and replaces its value x by ``( a op b )`` with op uniform, a uniform in
    0..p-1 and b solving ``a op b = x`` (impossible (op, a) pairs are redrawn: ``a * b = x``
    with a = 0 != x, ``a / b = x`` needing b = 0; where b is free it is uniform). Brackets are
    kept only where precedence needs them: previous token ``/``; or the new op is ``+``/``-``
    and the previous token is ``*``/``-`` or the next one is ``*``/``/``. So each chain step
    E_k -> E_(k-1) evaluates exactly the operator inserted last.

    Splits, after the reference (guyuntian/CoT_benchmark, arithmetic/data.py: ``get(length)``
    for the test set, the ``--under`` block for the training mix):
    ``train``: n drawn per sample by ``train_mix``: "uniform" (synthlab's own mix, the
    default) is n ~ U{min_ops..n_ops}; a list of weights per operator count 1..n_ops (zero
    below min_ops) draws n with those shares. The reference's 1M training set draws
    int(size n / (1 + ... + n_ops)) chains of n operators for each n into a deduplicated set,
    then tops it up with n_ops-operator chains: the few short chains collapse (F_11, 6
    operators: 0.05 % / 3.5 % / 14 % / 19 % / 24 % / 40 % for n = 1..6);
    ``scripts/arithmetic_mix.py`` computes those shares with this generator (:meth:`chains`)
    and the sweep presets set them. Samples are drawn independently with these shares (no
    deduplication);
    ``test``: exactly n_ops operators, as the reference's test set (and BiPE Fig. 3);
    ``test-mix`` (only when train draws more than one operator count): the training mix,
    reported per operator count (``op_counts``: metrics ``answer_acc_ops_k`` besides
    ``answer_acc``);
    ``ood-ops-k`` for k = n_ops+1..ood_ops_max: exactly k operators (more ``=`` segments),
    disjoint from train by construction (another operator count). ``test`` and ``test-mix``
    are disjoint from train by the hash of the prompt ``<bos> E_n =`` (not of the whole chain),
    so a held-out prompt is never a training prompt (the reference deduplicates whole chains).

    Scoring (``scoring = "greedy"``): the record holds the whole chain; loss / scored positions
    are the first ``=`` .. the token before ``<eos>`` (targets: every token after the first
    ``=`` through ``<eos>``). Evaluation decodes greedily from the prompt
    ``ids[:prompt_length(sample)]`` and compares the token before the generated ``<eos>`` with
    ``answer_id(sample)`` (metric ``answer_acc``); teacher-forced token accuracy is secondary.
    BiPE separator: ``=``.
    """

    name = "arithmetic"
    family = "arithmetic"
    description = "evaluate an F_p expression step by step (chain of thought)"
    paper = "Feng et al. 2023; BiPE Sec. 4.1"
    scoring = "greedy"
    metrics = ("answer_acc",)
    HELD_OUT_SPLITS = ("test", "test-mix")
    PARAMS = {
        "modulus": Param(11, int, "prime modulus p (numbers 0..p-1)", prime),
        "n_ops": Param(6, int, "most operators in train; test has exactly n_ops", positive),
        "min_ops": Param(1, int, "fewest operators in train / test-mix (paper mixes 1..n_ops)", positive),
        "ood_ops_max": Param(8, int, "ood-ops-k splits for k = n_ops+1..ood_ops_max (0: none)", _ood_max),
        "train_mix": Param(
            UNIFORM,
            _train_mix,
            'operator counts of train / test-mix: "uniform" over '
            "min_ops..n_ops, or weights per count 1..n_ops, comma-separated (the reference's: "
            "scripts/arithmetic_mix.py)",
        ),
    }

    def validate(self) -> None:
        p = self.params
        if p["min_ops"] > p["n_ops"]:
            raise ValueError(
                f"task 'arithmetic': parameter 'min_ops' must be <= n_ops={p['n_ops']}, got {p['min_ops']}"
            )
        if p["ood_ops_max"] and p["ood_ops_max"] <= p["n_ops"]:
            raise ValueError(
                f"task 'arithmetic': parameter 'ood_ops_max' must be 0 (none) or > n_ops={p['n_ops']}, "
                f"got {p['ood_ops_max']}"
            )
        if p["train_mix"] != UNIFORM:
            w = mix_weights(p["train_mix"], len(p["train_mix"].split(",")))
            if len(w) != p["n_ops"]:
                raise ValueError(
                    f"task 'arithmetic': parameter 'train_mix' must give {p['n_ops']} weights (operator "
                    f"counts 1..n_ops={p['n_ops']}), got {len(w)}: {p['train_mix']!r}"
                )
            if w[: p["min_ops"] - 1].any():
                raise ValueError(
                    f"task 'arithmetic': parameter 'train_mix' must give weight 0 to operator counts "
                    f"below min_ops={p['min_ops']}, got {p['train_mix']!r}"
                )
        counts = self._mix_counts()
        self._mix_cdf = np.cumsum(mix_weights(p["train_mix"], p["n_ops"])[counts - 1])  # (len(counts),)

    @property
    def vocab(self) -> list[str]:
        return [str(i) for i in range(self.params["modulus"])] + list(OPS) + ["(", ")", "=", BOS, EOS]

    @property
    def separators(self) -> tuple[str, ...]:
        return ("=",)

    @property
    def splits(self) -> tuple[str, ...]:
        p = self.params
        ood = tuple(f"ood-ops-{k}" for k in range(p["n_ops"] + 1, p["ood_ops_max"] + 1)) if p["ood_ops_max"] else ()
        mix = ("test-mix",) if len(self._mix_counts()) > 1 else ()
        return ("train", "test") + mix + ood

    def _mix_counts(self) -> np.ndarray:
        """The operator counts train draws: min_ops..n_ops, those with weight > 0 under a
        weighted ``train_mix``."""
        p = self.params
        counts = np.arange(p["min_ops"], p["n_ops"] + 1)
        return counts[mix_weights(p["train_mix"], p["n_ops"])[counts - 1] > 0]

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        if split in ("train", "test-mix"):
            return {"modulus": p["modulus"], "min_ops": p["min_ops"], "n_ops": p["n_ops"]}
        k = p["n_ops"] if split == "test" else int(split.rsplit("-", 1)[1])  # test, ood-ops-k
        return {"modulus": p["modulus"], "min_ops": k, "n_ops": k}

    def op_counts(self, split: str) -> tuple[int, ...]:
        """Operator counts whose answer accuracy is reported separately on ``split``
        (``answer_acc_ops_k``): the counts train draws (min_ops..n_ops, less those of weight 0)
        on ``test-mix``, none elsewhere (one count)."""
        return tuple(int(k) for k in self._mix_counts()) if split == "test-mix" else ()

    def op_count(self, sample: Sample) -> int:
        """n, the operators of the prompt ``E_n`` (one per chain step)."""
        return sum(t in OPS for t in sample.tokens[: self.prompt_length(sample)])

    # ids: numbers 0..p-1, then + - * / ( ) = <bos> <eos>
    def _ids(self, p: dict[str, Any]) -> dict[str, int]:
        m = p["modulus"]
        return {t: m + i for i, t in enumerate(list(OPS) + ["(", ")", "=", BOS, EOS])}

    def draw_params(self, rng: np.random.Generator, p: dict[str, Any]) -> dict[str, Any]:
        """The operator count n, drawn before the prompt-hash rejection: a prompt space of one
        count (small for n = 1) can hold more or less than 1/16 of its mass in the held-out
        bucket, which would otherwise reweight the counts of ``test-mix``. On train and
        test-mix (min_ops < n_ops) n follows ``train_mix``: U{min_ops..n_ops} for "uniform"
        (the draw synthlab always made), else the weights' shares; one count elsewhere."""
        mixed = (p["min_ops"], p["n_ops"]) == (self.params["min_ops"], self.params["n_ops"])
        if mixed and p["min_ops"] < p["n_ops"] and self.params["train_mix"] != UNIFORM:
            counts = self._mix_counts()
            k = np.searchsorted(self._mix_cdf, rng.random() * self._mix_cdf[-1], side="right")
            n = int(counts[min(int(k), len(counts) - 1)])  # (u * total rounds up to total at worst)
        else:
            n = int(rng.integers(p["min_ops"], p["n_ops"] + 1))
        return {**p, "min_ops": n, "n_ops": n}

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        """One chain with n operators, ``p["min_ops"] <= n <= p["n_ops"]`` (one count once
        :meth:`draw_params` has fixed it)."""
        m = p["modulus"]
        tid = self._ids(p)
        plus, minus, times, div, lp, rp = (tid[t] for t in ("+", "-", "*", "/", "(", ")"))
        n = int(rng.integers(p["min_ops"], p["n_ops"] + 1))
        # a, op draws with spares for redraws; leaf picks as uniforms
        draws_a = rng.integers(0, m, size=(n, 8))
        draws_op = rng.integers(0, 4, size=(n, 8))
        free_b = rng.integers(0, m, size=n)  # b of a * b = 0 with a = 0
        free_nz = rng.integers(1, m, size=n)  # b of 0 / b = 0
        leaf_u = rng.random(n)
        expr = [int(rng.integers(0, m))]  # E_0
        chain = [expr]
        for k in range(n):
            leaves = [i for i, t in enumerate(expr) if t < m]
            pos = leaves[int(leaf_u[k] * len(leaves))]
            x = expr[pos]
            r = 0
            while True:
                if r == 8:  # spares used up: draw more (rare)
                    draws_a[k] = rng.integers(0, m, size=8)
                    draws_op[k] = rng.integers(0, 4, size=8)
                    r = 0
                a, op = int(draws_a[k, r]), int(draws_op[k, r])
                r += 1
                if op == 0:
                    b = (x - a) % m
                elif op == 1:
                    b = (a - x) % m
                elif op == 2:
                    if a == 0:
                        if x != 0:
                            continue
                        b = int(free_b[k])
                    else:
                        b = x * pow(a, m - 2, m) % m
                else:
                    if x == 0:
                        if a != 0:
                            continue
                        b = int(free_nz[k])
                    else:
                        if a == 0:
                            continue
                        b = a * pow(x, m - 2, m) % m
                break
            op_id = plus + op
            prev = expr[pos - 1] if pos > 0 else None
            nxt = expr[pos + 1] if pos + 1 < len(expr) else None
            bracket = prev == div or (op_id in (plus, minus) and (prev in (times, minus) or nxt in (times, div)))
            new = [lp, a, op_id, b, rp] if bracket else [a, op_id, b]
            expr = expr[:pos] + new + expr[pos + 1 :]
            chain.append(expr)
        eq = tid["="]
        seq = [tid[BOS]]
        for e in reversed(chain):
            seq += e
            seq.append(eq)
        seq[-1] = tid[EOS]
        ids = np.array(seq, dtype=np.int64)  # (T,)
        first_eq = len(chain[-1]) + 1
        scored = np.arange(first_eq, len(ids) - 1, dtype=np.int64)
        return ids, scored, ids[scored + 1]

    def chains(self, rng: np.random.Generator, n: int, count: int) -> np.ndarray:
        """``count`` chains of ``n`` operators, vectorised: ids (count, T) int64, each row
        ``<bos> E_n = ... = E_0 <eos>`` left-aligned with -1 padding. The law of
        :meth:`generate` (E_0 uniform; each expansion a uniform number leaf, (a, op) redrawn
        until possible, b solved or free, the same bracket rule), not its bytes: the draws
        are made for all chains at once (scripts/arithmetic_mix.py counts distinct chains
        of a million draws with it)."""
        m = self.params["modulus"]
        if n < 1 or count < 0:
            raise ValueError(
                f"task 'arithmetic': chains need n >= 1 operators and count >= 0, got n={n}, count={count}"
            )
        tid = self._ids(self.params)
        plus, minus, times, div, lp, rp = (tid[t] for t in ("+", "-", "*", "/", "(", ")"))
        inv = np.array([0] + [pow(i, m - 2, m) for i in range(1, m)], dtype=np.int64)  # inverse in F_m (0: unused)
        rows = np.arange(count)
        expr = rng.integers(0, m, size=(count, 1))  # E_0, (count, W) with -1 padding
        length = np.ones(count, dtype=np.int64)
        history = [expr]
        for k in range(n):
            W = expr.shape[1]
            leaf = (expr >= 0) & (expr < m)  # (count, W); every row has k + 1 leaves
            j = (rng.random(count) * (k + 1)).astype(np.int64)
            pos = np.argmax(np.cumsum(leaf, axis=1) == (j + 1)[:, None], axis=1)  # the j-th leaf
            x = expr[rows, pos]
            a = rng.integers(0, m, size=count)
            op = rng.integers(0, 4, size=count)
            while True:  # redraw (a, op) where a op b = x has no b
                bad = ((op == 2) & (a == 0) & (x != 0)) | ((op == 3) & ((a == 0) != (x == 0)))
                if not bad.any():
                    break
                a[bad] = rng.integers(0, m, size=int(bad.sum()))
                op[bad] = rng.integers(0, 4, size=int(bad.sum()))
            free_b = rng.integers(0, m, size=count)  # b of a * b = 0 with a = 0
            free_nz = rng.integers(1, m, size=count)  # b of 0 / b = 0
            b = np.select(
                [op == 0, op == 1, (op == 2) & (a != 0), op == 2, x != 0],
                [(x - a) % m, (a - x) % m, x * inv[a] % m, free_b, a * inv[x] % m],
                free_nz,
            )
            op_id = plus + op
            prev = np.where(pos > 0, expr[rows, np.maximum(pos - 1, 0)], -1)
            nxt = np.where(pos + 1 < length, expr[rows, np.minimum(pos + 1, W - 1)], -1)
            bracket = (prev == div) | (
                ((op_id == plus) | (op_id == minus))
                & ((prev == times) | (prev == minus) | (nxt == times) | (nxt == div))
            )
            width = np.where(bracket, 5, 3)
            new = np.where(
                bracket[:, None],
                np.stack([np.full(count, lp), a, op_id, b, np.full(count, rp)], axis=1),
                np.stack([a, op_id, b, np.full(count, -1), np.full(count, -1)], axis=1),
            )  # (count, 5)
            t = np.arange(W + 4)[None, :]
            off = t - pos[:, None]
            old = np.where(off < 0, t, t - width[:, None] + 1)  # source position in the old expression
            from_old = expr[rows[:, None], np.clip(old, 0, W - 1)]
            from_old = np.where(old < W, from_old, -1)
            from_new = new[rows[:, None], np.clip(off, 0, 4)]
            expr = np.where((off >= 0) & (off < width[:, None]), from_new, from_old)  # (count, W + 4)
            length = length + width - 1
            history.append(expr)
        eq, bos, eos = tid["="], tid[BOS], tid[EOS]
        parts = [np.full((count, 1), bos)]
        for e in reversed(history):
            parts += [e, np.full((count, 1), eq)]
        parts[-1] = np.full((count, 1), eos)
        flat = np.concatenate(parts, axis=1)  # (count, total) with -1 holes
        valid = flat >= 0
        dest = np.cumsum(valid, axis=1) - 1  # each token's place once the holes are gone
        out = np.full((count, int(dest[:, -1].max()) + 1 if count else 0), -1, dtype=np.int64)
        r, c = np.nonzero(valid)
        out[r, dest[r, c]] = flat[r, c]
        return out

    # -- what the trainer uses -----------------------------------------------------------
    def prompt_length(self, sample: Sample) -> int:
        """Tokens of the prompt ``<bos> E_n =`` (greedy decoding starts after them)."""
        return sample.tokens.index("=") + 1

    def answer_id(self, sample: Sample) -> int:
        """Id of the final answer (the token before ``<eos>``)."""
        return int(sample.ids[-2])

    def _accept(self, ids: np.ndarray, split: str) -> bool:
        # hash the prompt only: a test prompt must never be a training prompt, whatever its chain
        if split not in ("train", *self.HELD_OUT_SPLITS):
            return True
        eq = self.params["modulus"] + 6
        cut = int(np.argmax(ids == eq)) + 1
        bucket = input_hash_bucket(ids[:cut], self.HASH_BUCKETS)
        return bucket != 0 if split == "train" else bucket == 0

    # -- independent check ---------------------------------------------------------------
    def solve(self, sample: Sample) -> list[str]:
        """Check the chain (every step keeps the value in F_p and evaluates exactly one
        operator ``a op b``) and return the targets (tokens after the first ``=``). Raises
        ValueError on an invalid chain."""
        toks = sample.tokens
        m = self.params["modulus"]
        if toks[0] != BOS or toks[-1] != EOS:
            raise ValueError("arithmetic chain must start with <bos> and end with <eos>")
        exprs, cur = [], []
        for t in toks[1:-1]:
            if t == "=":
                exprs.append(cur)
                cur = []
            else:
                cur.append(t)
        exprs.append(cur)
        values = [evaluate(e, m) for e in exprs]
        if len(set(values)) != 1:
            raise ValueError(f"arithmetic chain changes value: {values}")
        if len(exprs[-1]) != 1:
            raise ValueError("arithmetic chain must end with a single number")
        for hi, lo in zip(exprs, exprs[1:]):
            if not _one_step(hi, lo, m):
                raise ValueError(
                    f"arithmetic step does not evaluate exactly one operator: {' '.join(hi)} -> {' '.join(lo)}"
                )
        return toks[toks.index("=") + 1 :]


def _one_step(hi: list[str], lo: list[str], m: int) -> bool:
    """``lo`` is ``hi`` with one ``a op b`` or ``( a op b )`` (numbers a, b) replaced by its value."""
    n_ops = lambda e: sum(t in OPS for t in e)  # noqa: E731
    if n_ops(hi) != n_ops(lo) + 1:
        return False
    for width in (3, 5):
        if len(hi) - width + 1 != len(lo):
            continue
        for i in range(len(hi) - width + 1):
            win = hi[i : i + width]
            if hi[:i] != lo[:i] or hi[i + width :] != lo[i + 1 :]:
                continue
            core = win[1:4] if width == 5 else win
            if width == 5 and (win[0] != "(" or win[4] != ")"):
                continue
            a, op, b = core
            if not (a.isdigit() and b.isdigit() and op in OPS):
                continue
            if lo[i].isdigit() and _apply(int(a), op, int(b), m) == int(lo[i]):
                return True
    return False


def _apply(a: int, op: str, b: int, m: int) -> int:
    if op == "+":
        return (a + b) % m
    if op == "-":
        return (a - b) % m
    if op == "*":
        return a * b % m
    if b % m == 0:
        raise ValueError("division by zero in F_p")
    return a * pow(b, m - 2, m) % m


def evaluate(tokens: list[str], m: int) -> int:
    """Value of an infix expression in F_p (``* /`` bind tighter, left-associative)."""
    pos = 0

    def expr() -> int:
        nonlocal pos
        v = term()
        while pos < len(tokens) and tokens[pos] in ("+", "-"):
            op = tokens[pos]
            pos += 1
            v = _apply(v, op, term(), m)
        return v

    def term() -> int:
        nonlocal pos
        v = atom()
        while pos < len(tokens) and tokens[pos] in ("*", "/"):
            op = tokens[pos]
            pos += 1
            v = _apply(v, op, atom(), m)
        return v

    def atom() -> int:
        nonlocal pos
        t = tokens[pos]
        pos += 1
        if t == "(":
            v = expr()
            if tokens[pos] != ")":
                raise ValueError("unbalanced brackets")
            pos += 1
            return v
        if not t.isdigit():
            raise ValueError(f"expected a number, got {t!r}")
        return int(t) % m

    v = expr()
    if pos != len(tokens):
        raise ValueError(f"trailing tokens in expression: {tokens[pos:]}")
    return v


TASKS = {"arithmetic": Arithmetic}
