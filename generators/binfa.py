"""Bilevel automata languages (BiPE Sec. 3.3, Theorems 3.1-3.2): ``binfa`` and its flat
control ``nfa``. The experiment design is synthlab's own (the paper has no such task)."""

from __future__ import annotations

import string
import zlib
from abc import abstractmethod
from contextvars import ContextVar
from typing import Any

import numpy as np

from .base import Param, Sample, Task, positive

SEP, YES, NO = "#", "Y", "N"

#: the split :meth:`_AutomatonTask.sample_one` is drawing (generate() keeps its hash bucket)
_SPLIT: ContextVar[str | None] = ContextVar("automaton_split", default=None)


def _density(v: Any) -> str | None:
    return None if 0.0 < v <= 1.0 else "must be in (0, 1]"


def symbol_names(s: int) -> list[str]:
    return list(string.ascii_lowercase[:s]) if s <= 26 else [f"s{i}" for i in range(s)]


def _digits(count: int, base: int, width: int) -> np.ndarray:
    """The numbers 0..count-1 as ``width`` digits in ``base``, most significant first, (count, width)."""
    return np.arange(count)[:, None] // base ** np.arange(width - 1, -1, -1)[None, :] % base


def _random_subset(rng: np.random.Generator, n: int, prob: float) -> np.ndarray:
    """A random non-empty subset of range(n) as a bool mask: each kept with prob ``prob``; an
    empty draw keeps one uniform element instead."""
    keep = rng.random(n) < prob
    if not keep.any():
        keep[rng.integers(0, n)] = True
    return keep


class _AutomatonTask(Task):
    """Shared machinery: strings, labels balanced per segment count, simulation by Boolean
    transfer matrices."""

    PARAMS = {
        "n_sets": Param(4, int, "k: number of state sets Q_1..Q_k", positive),
        "set_size": Param(4, int, "m: states per set", positive),
        "n_symbols": Param(4, int, "s: alphabet size (besides #)", positive),
        "density": Param(0.25, float, "probability that a transition keeps each possible target", _density),
        "seg_len": Param(8, int, "a segment has U{1..seg_len} symbols, then #", positive),
        "max_segments": Param(16, int, "N: train / test strings have U{1..N} segments", positive),
        "ood_max_segments": Param(64, int, "ood-segments strings have U{N+1..this} segments", positive),
        "automaton_seed": Param(0, int, "seed of the automaton (fixed per task instance)"),
        "trace": Param(False, bool, "also score the label after every #"),
    }
    #: an automaton is kept when random strings of train and of ood-segments each have at
    #: least this share of either label (then balancing by rejection stays cheap)
    MIN_CLASS_RATE = 0.1
    #: ... and when random strings of every segment count 1..ood_max_segments have at least
    #: this share of either label (estimated on RATE_STRINGS strings): the label is balanced
    #: within each segment count by rejection, so no count may (almost) never give one label
    MIN_SEGMENT_RATE = 0.02
    RATE_STRINGS = 400
    MAX_DRAWS = 50
    #: largest table of precomputed block products (floats); 4-token blocks for small automata
    BLOCK_TABLE_FLOATS = 1 << 21

    def validate(self) -> None:
        p = self.params
        if p["ood_max_segments"] <= p["max_segments"]:
            raise ValueError(
                f"task {self.name!r}: parameter 'ood_max_segments' must be > max_segments="
                f"{p['max_segments']}, got {p['ood_max_segments']}"
            )
        if p["automaton_seed"] < 0:
            raise ValueError(f"task {self.name!r}: parameter 'automaton_seed' must be >= 0, got {p['automaton_seed']}")
        self._check_structure()
        # the automaton: the first draw from automaton_seed whose language is not degenerate
        # (random NFAs often accept almost everything or almost nothing, and often one label
        # at some segment count, e.g. after one segment); labels are then balanced within
        # each segment count by rejection sampling in generate()
        for attempt in range(self.MAX_DRAWS):
            key = [p["automaton_seed"], zlib.crc32(self.name.encode()), attempt]
            rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))
            self.set_automaton(*self._build(rng))
            check = np.random.Generator(np.random.PCG64(np.random.SeedSequence(key + [1])))
            rates = [self._label_rate(check, self.split_params(split), 200) for split in ("train", "ood-segments")]
            if min(min(r, 1.0 - r) for r in rates) < self.MIN_CLASS_RATE:
                continue
            check = np.random.Generator(np.random.PCG64(np.random.SeedSequence(key + [2])))
            per_count = self.segment_label_rates(check, p["ood_max_segments"], self.RATE_STRINGS)
            if np.minimum(per_count, 1.0 - per_count).min() >= self.MIN_SEGMENT_RATE:
                self.automaton_draw = attempt
                return
        raise ValueError(
            f"task {self.name!r}: parameter 'density'={p['density']} (automaton_seed={p['automaton_seed']}) gives no "
            f"automaton in {self.MAX_DRAWS} draws whose language has >= {self.MIN_CLASS_RATE:.0%} of each label "
            f"(train and ood-segments) and >= {self.MIN_SEGMENT_RATE:.0%} of each at every segment count "
            f"1..{p['ood_max_segments']}; try density near 0.25 or another automaton_seed"
        )

    def _check_structure(self) -> None:
        """Cross-parameter checks of the automaton's shape (each subclass has its own)."""

    def set_automaton(self, delta: np.ndarray, start: int, accept: np.ndarray) -> None:
        """Install an automaton: ``delta`` (s+1, Q, Q) bool (last symbol ``#``), start state,
        accepting states (Q,) bool; precomputes the float matrices the simulation uses."""
        self.delta, self.start, self.accept = delta, int(start), accept
        self._cell_tables: dict[tuple, dict] = {}  # generate()'s enumerated strings, per automaton
        Q = delta.shape[1]
        d = delta.astype(np.float32)
        self._ext = np.concatenate([d[:-1], np.eye(Q, dtype=np.float32)[None]])  # index -1 = identity
        self._hash_mat = d[-1]
        ext2 = np.concatenate([d, np.eye(Q, dtype=np.float32)[None]])  # (B, Q, Q): symbols, '#', identity
        # products of every block of 1, 2 or 4 tokens, tabulated while the table stays small:
        # block (t_1..t_b) has index sum t_i B^(b-i) (the first tree levels become one lookup)
        table, self._block = ext2, 1
        while self._block < 4 and len(table) ** 2 * Q * Q <= self.BLOCK_TABLE_FLOATS:
            table = np.minimum(table[:, None] @ table[None, :], 1.0).reshape(-1, Q, Q)
            self._block *= 2
        self._ext2, self._table = ext2, table
        self._acc = accept.astype(np.float32)

    @abstractmethod
    def _build(self, rng: np.random.Generator) -> tuple[np.ndarray, int, np.ndarray]:
        """(delta (s+1, Q, Q) bool with ``#`` last, start state, accepting (Q,) bool)."""

    # -- vocabulary: symbols, #, Y, N ---------------------------------------------------------
    @property
    def vocab(self) -> list[str]:
        return symbol_names(self.params["n_symbols"]) + [SEP, YES, NO]

    @property
    def separators(self) -> tuple[str, ...]:
        return (SEP,)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood-segments")

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        lo, hi = (p["max_segments"] + 1, p["ood_max_segments"]) if split == "ood-segments" else (1, p["max_segments"])
        return {"seg_min": lo, "seg_max": hi, "seg_len": p["seg_len"], "n_symbols": p["n_symbols"], "trace": p["trace"]}

    # -- generation -------------------------------------------------------------------------
    #: candidate strings simulated together in the first draw (the first with the wanted
    #: label on the split's side of the hash partition is kept); each further draw doubles
    #: them, up to MAX_CANDIDATES
    CANDIDATES = 2
    MAX_CANDIDATES = 64
    #: draws per (segment count, label) before another pair is drawn: ~12,600 candidates.
    #: validate() keeps every label rate >= MIN_SEGMENT_RATE, so outside the held-out bucket
    #: a miss has probability < 1e-100, inside it (1/16 of the strings) < 1e-6
    MAX_TRIES = 200
    #: (segment count, label) pairs per sample before giving up
    MAX_CELLS = 50

    def _draw_strings(
        self, rng: np.random.Generator, p: dict[str, Any], c: int, n_seg: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``c`` strings as symbols (c, S, W) with -1 padding (after a segment's end, and whole
        segments after a string's end), and their segment counts (c,): each U{seg_min..seg_max},
        or all ``n_seg`` when given. W = seg_len rounded up to a power of two, S = the longest
        string's segment count."""
        if n_seg is None:
            n_seg = rng.integers(p["seg_min"], p["seg_max"] + 1, size=c)  # (c,)
        else:
            n_seg = np.full(c, int(n_seg))
        S, L = int(n_seg.max()), p["seg_len"]
        W = 1 << (L - 1).bit_length()  # (the tree product wants a power of two)
        lens = rng.integers(1, L + 1, size=(c, S))  # (c, S)
        lens[np.arange(S)[None, :] >= n_seg[:, None]] = 0
        sym = rng.integers(0, p["n_symbols"], size=(c, S, W))
        sym[np.arange(W)[None, None, :] >= lens[:, :, None]] = -1
        return sym, n_seg

    def _labels(self, sym: np.ndarray, n_seg: np.ndarray) -> np.ndarray:
        """Accept (bool) after each segment's ``#``, (c, S): subset simulation with 0/1
        transfer matrices, a tree product over the positions of each segment, then a prefix
        scan (Hillis-Steele) over the segments."""
        c, S, W = sym.shape
        if W & (W - 1):  # pad positions to a power of two (identity)
            sym = np.concatenate([sym, np.full((c, S, (1 << (W - 1).bit_length()) - W), -1)], axis=2)
        M = self._ext[sym]  # (c, S, W, Q, Q); padding = identity
        while M.shape[2] > 1:  # product over the positions of a segment
            M = np.minimum(M[:, :, 0::2] @ M[:, :, 1::2], 1.0)
        M = M[:, :, 0]  # (c, S, Q, Q)
        real = np.arange(S)[None, :] < n_seg[:, None]  # (c, S) segments that exist (end in '#')
        M = np.where(real[..., None, None], np.minimum(M @ self._hash_mat, 1.0), M)
        d = 1
        while d < S:  # prefix products: P_i = M_0 ... M_i
            M = np.concatenate([M[:, :d], np.minimum(M[:, :-d] @ M[:, d:], 1.0)], axis=1)
            d *= 2
        return M[:, :, self.start] @ self._acc > 0  # (c, S)

    def _final_labels(self, sym: np.ndarray, n_seg: np.ndarray) -> np.ndarray:
        """Accept (bool) after the last ``#`` only, (c,): the tokens of each string packed
        to the left (padding = identity at the end), blocks of ``_block`` tokens looked up in
        the product table, then one tree product over the blocks (about T / block matrix
        products for T tokens, no per-segment padding)."""
        c, S, W = sym.shape
        real = np.arange(S)[None, :] < n_seg[:, None]  # (c, S)
        hash_col = np.where(real, len(self._ext2) - 2, -1)[..., None]  # '#' closes real segments
        flat = np.concatenate([sym, hash_col], axis=2).reshape(c, -1)  # (c, S*(W+1))
        valid = flat >= 0
        order = np.argsort(~valid, axis=1, kind="stable")  # tokens first, in order
        B, b = len(self._ext2), self._block
        T = -(-int(valid.sum(axis=1).max()) // b) * b  # rounded up to whole blocks
        flat = (
            np.take_along_axis(flat, order[:, :T], axis=1)
            if T <= flat.shape[1]
            else np.concatenate([np.take_along_axis(flat, order, axis=1), np.full((c, T - flat.shape[1]), -1)], axis=1)
        )
        flat = np.where(flat >= 0, flat, B - 1).reshape(c, T // b, b)  # -1 -> identity index
        M = self._table[flat @ B ** np.arange(b - 1, -1, -1)]  # (c, T / b, Q, Q)
        while M.shape[1] > 1:
            if M.shape[1] % 2:
                M = np.concatenate([M, np.broadcast_to(self._ext2[-1], (c, 1) + M.shape[2:])], axis=1)
            M = np.minimum(M[:, 0::2] @ M[:, 1::2], 1.0)
        return M[:, 0, self.start] @ self._acc > 0  # (c,)

    def _simulate(self, sym: np.ndarray) -> np.ndarray:
        """Labels after each segment of one string given as (n_seg, W) symbols (-1 padding)."""
        return self._labels(sym[None], np.array([len(sym)]))[0]

    def _label_rate(self, rng: np.random.Generator, p: dict[str, Any], n: int) -> float:
        sym, n_seg = self._draw_strings(rng, p, n)
        return float(self._final_labels(sym, n_seg).mean())

    def segment_label_rates(self, rng: np.random.Generator, max_segments: int, n: int) -> np.ndarray:
        """Share of accepted strings at every segment count 1..max_segments, (max_segments,):
        ``n`` random strings of max_segments segments, the state set pushed token by token
        (one small matrix product per position for all strings) and read after each ``#``
        (the first j segments of a random string are a random j-segment string)."""
        p = {
            "seg_min": max_segments,
            "seg_max": max_segments,
            "seg_len": self.params["seg_len"],
            "n_symbols": self.params["n_symbols"],
        }
        sym, _ = self._draw_strings(rng, p, n)  # (n, S, W), -1 padding
        B, Q = self._ext2.shape[:2]
        step = self._ext2.transpose(1, 0, 2).reshape(Q, B * Q)  # v @ step -> v @ M_b for every b
        tok = np.where(sym >= 0, sym, B - 1)  # padding -> identity
        v = np.zeros((n, Q), dtype=np.float32)
        v[:, self.start] = 1.0
        rows = np.arange(n)
        accepted = np.empty((n, max_segments), dtype=bool)
        for j in range(max_segments):
            for w in [*range(sym.shape[2]), None]:  # the segment's positions, then '#'
                b = tok[:, j, w] if w is not None else np.full(n, B - 2)
                v = np.minimum((v @ step).reshape(n, B, Q)[rows, b], 1.0)
            accepted[:, j] = v @ self._acc > 0
        return accepted.mean(axis=0)

    def sample_one(
        self,
        split: str,
        seed: int,
        index: int,
        overrides: dict[str, Any] | None = None,
        p: dict[str, Any] | None = None,
    ) -> Sample:
        # generate() reads the split: it keeps only candidates of the split's hash bucket, so
        # that the hash partition cannot reweight the labels of a segment count (see generate)
        token = _SPLIT.set(split)
        try:
            return super().sample_one(split, seed, index, overrides, p)
        finally:
            _SPLIT.reset(token)

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        """One string: its segment count n ~ U{seg_min..seg_max} as before, then its final
        label uniformly, then a string of n segments with that label on the split's side of
        the hash partition (:meth:`Task._accept`; chosen here, not by rejection in
        :meth:`sample_one`, which would redraw n and the label and so weight them by the
        held-out bucket's share of each: on the quick preset's test split P(Y | 1 segment)
        would be ~0.66). So P(Y | n) = 1/2 on every split and no rule that reads only the
        length (the number of ``#``) beats chance.

        The string: candidates of n segments until one qualifies; or, where the strings of n
        segments number at most ENUM_MAX (tiny spaces, e.g. one segment of <= 5 symbols over
        4), drawn from the exact law of the qualifying ones (enumerated once). Where none
        qualifies (such a tiny space whose held-out sixteenth, or train's rest, lacks a label
        at n; or, beyond ENUM_MAX, none among MAX_TRIES draws, ~12,600 candidates), the
        sample draws another (n, label). Called outside :meth:`sample_one`, no partition
        applies."""
        split = _SPLIT.get()
        for _ in range(self.MAX_CELLS):
            n = int(rng.integers(p["seg_min"], p["seg_max"] + 1))
            want = bool(rng.integers(0, 2))
            table = self._cell_table(p, n, split)
            if table is not None:
                samples, cum = table[want]
                if len(samples):
                    ids, scored = samples[int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))]
                    ids, scored = ids.copy(), scored.copy()  # the table's arrays stay unshared
                    return ids, scored, ids[scored + 1]
                continue  # no such string on this side of the partition: another (n, label)
            # a held-out split keeps 1/HASH_BUCKETS of the candidates: start with that many more
            c = self.CANDIDATES * (self.HASH_BUCKETS if split in self.HELD_OUT_SPLITS else 1)
            for _ in range(self.MAX_TRIES):
                sym, n_seg = self._draw_strings(rng, p, c, n)  # (c, n, W)
                labels = self._labels(sym, n_seg) if p["trace"] else self._final_labels(sym, n_seg)[:, None]
                for k in np.flatnonzero(labels[:, -1] == want):
                    ids, scored = self._assemble(p, sym[k], labels[k])
                    if split is None or self._accept(ids, split):
                        return ids, scored, ids[scored + 1]
                c = min(2 * c, self.MAX_CANDIDATES)
        raise ValueError(
            f"task {self.name!r}: split {split!r} has too few distinct strings of each label at its segment "
            f"counts {p['seg_min']}..{p['seg_max']} (automaton_seed={self.params['automaton_seed']}); "
            "try larger seg_len or n_symbols, or another automaton_seed"
        )

    def _assemble(self, p: dict[str, Any], sym: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, scored) of one string given as (n, W) symbols with -1 padding and its labels:
        (n,) after every segment with ``trace``, else (1,) the final one."""
        s = p["n_symbols"]
        sep, yes, no = s, s + 1, s + 2
        n = len(sym)
        label_ids = np.where(labels, yes, no)
        if p["trace"]:
            # each row: symbols, '#', label; then drop padding
            rows = np.concatenate([sym, np.full((n, 1), sep), label_ids[:, None]], axis=1)
            ids = rows[rows >= 0].astype(np.int64)
            scored = np.flatnonzero(ids == sep)
        else:
            rows = np.concatenate([sym, np.full((n, 1), sep)], axis=1)
            ids = np.append(rows[rows >= 0], label_ids[-1]).astype(np.int64)
            scored = np.array([len(ids) - 2])
        return ids, scored.astype(np.int64)

    #: segment counts with at most this many distinct strings are enumerated (see generate)
    ENUM_MAX = 4096

    def _cell_table(self, p: dict[str, Any], n: int, split: str | None):
        """For a segment count n with at most ENUM_MAX strings: {label: (samples (ids, scored)
        of the strings of n segments with that final label on ``split``'s side of the hash
        partition, cumulative probabilities)}, built once per task; None for a larger count."""
        L, s = p["seg_len"], p["n_symbols"]
        K = total = 0
        for length in range(1, L + 1):  # K: strings of one segment
            K += s**length
            if K > self.ENUM_MAX:
                return None
        for _ in range(n):  # K^n: strings of n segments
            total = max(total, 1) * K
            if total > self.ENUM_MAX:
                return None
        key = (n, split, L, s, bool(p["trace"]))
        if key not in self._cell_tables:
            W = 1 << (L - 1).bit_length()
            seg = np.full((K, W), -1)
            prob = np.empty(K)
            i = 0
            for length in range(1, L + 1):  # every segment of `length` symbols: P = 1/L * s^-length
                seg[i : i + s**length, :length] = _digits(s**length, s, length)
                prob[i : i + s**length] = s ** -float(length) / L
                i += s**length
            combo = _digits(total, K, n)  # (K^n, n): the segments of each string
            sym, pr = seg[combo], prob[combo].prod(axis=1)  # (K^n, n, W), (K^n,)
            n_seg = np.full(len(sym), n)
            labels = self._labels(sym, n_seg) if p["trace"] else self._final_labels(sym, n_seg)[:, None]
            table = {}
            for want in (False, True):
                samples, weights = [], []
                for k in np.flatnonzero(labels[:, -1] == want):
                    ids, scored = self._assemble(p, sym[k], labels[k])
                    if split is None or self._accept(ids, split):
                        samples.append((ids, scored))
                        weights.append(pr[k])
                table[want] = (samples, np.cumsum(weights))
            self._cell_tables[key] = table
        return self._cell_tables[key]

    # -- independent check ------------------------------------------------------------------
    def solve(self, sample: Sample) -> list[str]:
        """Token-by-token subset simulation with Python sets (labels after each '#')."""
        names = symbol_names(self.params["n_symbols"])
        index = {t: i for i, t in enumerate(names)}
        index[SEP] = len(names)
        succ = {
            (q, a): set(np.flatnonzero(self.delta[a, q]).tolist())
            for a in range(self.delta.shape[0])
            for q in range(self.delta.shape[1])
        }
        final = set(np.flatnonzero(self.accept).tolist())
        active = {self.start}
        labels = []
        for t in sample.tokens:
            if t in (YES, NO):
                continue
            active = set().union(*(succ[(q, index[t])] for q in active))
            if t == SEP:
                labels.append(YES if active & final else NO)
        return labels if self.params["trace"] else labels[-1:]


class BiNFA(_AutomatonTask):
    """A Bi-NFA drawn from ``automaton_seed``: k state sets Q_1..Q_k of m states (state j of
    Q_i is i*m + j; the start state q*_i of Q_i is i*m). A symbol moves q in Q_i to a random
    non-empty subset of Q_i (each target kept with prob ``density``); ``#`` moves q in Q_i to a
    random subset of {q*_1..q*_k} (each kept with prob ``density``; may be empty: the run
    dies). Start q*_1; accepting F = a random non-empty proper subset of the start states
    (needs k >= 2). The automaton is the first draw (attempt 0, 1, ...) from
    ``automaton_seed`` whose language has >= 10% of each label on random strings of train and
    of ood-segments (random NFAs mostly accept all or nothing); ``automaton_draw`` says which.

    A string: n_seg segments of U{1..seg_len} uniform symbols each closed by ``#``, then the
    label ``Y``/``N`` (accepted after the last ``#``, subset simulation). Final labels are
    balanced within each segment count on every split (draw the count, then the label, then a
    string of that count with that label: P(Y | number of ``#``) = 1/2, so a rule that reads
    only the length scores chance; validate() keeps only automata with >= 2 % of each label
    at every count 1..ood_max_segments; see ``generate`` for tiny string spaces). Before
    this, the label was drawn first and the count with the string, so P(Y | count) followed
    the acceptance rate at each length (quick preset: P(Y) ~0.2 after one segment; a
    majority-per-count rule scored ~56 % on test). ``trace=true``: a label after every
    ``#``, all scored (only the final one is balanced per count; the earlier ones follow the
    acceptance rate of their prefix). Splits: train / test n_seg ~ U{1..N}; ``ood-segments`` n_seg ~
    U{N+1..ood_max_segments}, disjoint from train by construction (more ``#``). Metric:
    accuracy (chance 50%). BiPE separator: ``#``.
    """

    name = "binfa"
    family = "binfa"
    description = "accept / reject strings of a random bilevel NFA"
    paper = "BiPE Sec. 3.3 (synthlab design)"
    metrics = ("accuracy",)

    def _check_structure(self) -> None:
        if self.params["n_sets"] < 2:
            raise ValueError(
                f"task 'binfa': parameter 'n_sets' must be >= 2 (F is a proper subset of the start "
                f"states), got {self.params['n_sets']}"
            )

    def _build(self, rng: np.random.Generator):
        k, m, s, dens = (self.params[x] for x in ("n_sets", "set_size", "n_symbols", "density"))
        Q = k * m
        delta = np.zeros((s + 1, Q, Q), dtype=bool)
        starts = np.arange(k) * m
        for a in range(s):
            for q in range(Q):
                i = q // m
                delta[a, q, i * m : (i + 1) * m] = _random_subset(rng, m, dens)
        for q in range(Q):
            delta[s, q, starts[rng.random(k) < dens]] = True  # may be empty: the run dies
        accept = np.zeros(Q, dtype=bool)
        while True:
            f = rng.random(k) < 0.5
            if 0 < f.sum() < k:
                break
        accept[starts[f]] = True
        return delta, 0, accept


class FlatNFA(_AutomatonTask):
    """The control for ``binfa``: one flat NFA with the same number of states k*m drawn from
    ``automaton_seed``; every symbol moves each state to a random non-empty subset of all k*m
    states, each target kept with prob density / k (the same expected out-degree as inside a
    Bi-NFA set); ``#`` is an ordinary symbol with the same law except that, as in binfa, its
    subsets may be empty. Start state 0;
    accepting F = a random non-empty proper subset of the states. Same draw-until-balanced
    rule, strings, labels, splits, scoring and separator as ``binfa``.
    """

    name = "nfa"
    family = "binfa"
    description = "accept / reject strings of a random flat NFA (control for binfa)"
    paper = "BiPE Sec. 3.3 (synthlab design)"
    metrics = ("accuracy",)

    def _check_structure(self) -> None:
        if self.params["n_sets"] * self.params["set_size"] < 2:
            raise ValueError(
                "task 'nfa': parameters 'n_sets' * 'set_size' must be >= 2 states, got "
                f"{self.params['n_sets'] * self.params['set_size']}"
            )

    def _build(self, rng: np.random.Generator):
        k, m, s, dens = (self.params[x] for x in ("n_sets", "set_size", "n_symbols", "density"))
        Q = k * m
        delta = np.zeros((s + 1, Q, Q), dtype=bool)
        for a in range(s):
            for q in range(Q):
                delta[a, q] = _random_subset(rng, Q, dens / k)
        for q in range(Q):  # '#' as in binfa: may be empty (the run dies)
            delta[s, q] = rng.random(Q) < dens / k
        while True:
            accept = rng.random(Q) < 0.5
            if 0 < accept.sum() < Q:
                break
        return delta, 0, accept


TASKS = {"binfa": BiNFA, "nfa": FlatNFA}
