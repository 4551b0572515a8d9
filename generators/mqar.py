"""Multi-query associative recall (Arora et al. 2024, Zoology; DAPE V2 Proposition 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import MAX_SIZE, Param, Sample, Task, positive

FILLER = "."


def _lengths(v: Any) -> str | None:
    try:
        vals = [int(x) for x in str(v).split(",") if x.strip()]
    except ValueError:
        return "must be comma-separated integers, e.g. '512,1024'"
    if vals and all(1 <= x <= MAX_SIZE for x in vals):
        return None
    return f"must list at least one length, each from 1 to {MAX_SIZE:,}"


def _power(v: Any) -> str | None:
    return None if 0.0 < v <= 1.0 else "must be in (0, 1]"


class MQAR(Task):
    """Zoology's MQAR layout (HazyResearch/zoology, zoology/data/multiquery_ar.py,
    ``multiquery_ar`` with ``random_non_queries=False``): ``n_kv`` pairs ``k v`` (keys distinct,
    from the first half of the vocabulary; values distinct, from the second half), then a query
    region of ``length - 2 n_kv`` tokens of filler ``.`` in which every key is asked once, at
    offset 2g of the region for a gap g. The value is a label only: the input slot after a
    query key stays filler, so no value ever appears in the query region (a visible value would
    let a model eliminate values already shown and score ~H_n/n without any recall). Gaps are
    drawn without replacement with Zoology's power law P(g) ~ g^(power_a - 1),
    g = 1..(length - 2 n_kv)//2, in draw order: the i-th pair of the context is asked at the
    i-th gap drawn, as in Zoology (so most queries come early). Token ids as in Zoology:
    0 = filler, keys 1..V/2-1, values V/2..V-1 (V = ``vocab_size``)::

        input   k2 v8 k4 v7 .  .  k4 .  .  .  .  .  k2 .  .  .
        scored                    ^ v7              ^ v8          (Zoology: label -100 elsewhere)

    Scored: every query key (target: its value; logits at the key predict it, Zoology's
    shifted labels). Metric: accuracy over queries.
    Deviations from Zoology: non-query slots hold the filler token (Zoology's default
    ``random_non_queries=True`` fills them with random tokens; synthlab's design asks for
    a dedicated filler); ``length`` may be odd and need not be below ``vocab_size``; ``test``
    is kept apart from train by the input hash (Zoology draws it with another seed).
    Splits: train / test (``length``, ``n_kv``); ``ood-length``: longer sequences with
    proportionally more pairs, one eval group per entry of ``ood_lengths``
    (n_kv scaled as n_kv * L / length). Every OOD length must differ from ``length``, so
    ood-length is disjoint from train by construction; ``test`` by the input hash.
    BiPE separators: none natural (returns an empty tuple).
    """

    name = "mqar"
    family = "mqar"
    description = "recall the value of every queried key"
    paper = "Arora et al. 2024 (Zoology); DAPE V2 Prop. 1"
    metrics = ("query_acc",)
    length_param = "length"
    PARAMS = {
        "vocab_size": Param(8192, int, "vocabulary: filler, keys 1..V/2-1, values V/2..V-1", positive),
        "length": Param(256, int, "sequence length in train / test", positive),
        "n_kv": Param(16, int, "key-value pairs in train / test", positive),
        "power_a": Param(0.01, float, "power-law exponent of the query placement", _power),
        "ood_lengths": Param(
            "512,1024", str, "ood-length lengths (comma-separated); pairs scale with length", _lengths
        ),
    }

    def validate(self) -> None:
        p = self.params
        n_keys = p["vocab_size"] // 2 - 1
        if p["vocab_size"] < 4:
            raise ValueError(f"task 'mqar': parameter 'vocab_size' must be >= 4, got {p['vocab_size']}")
        for L, n in [(p["length"], p["n_kv"])] + [(g["length"], g["n_kv"]) for g in self._groups()]:
            if n > n_keys:
                raise ValueError(
                    f"task 'mqar': parameter 'n_kv' must be <= vocab_size/2 - 1 = {n_keys} distinct keys, "
                    f"got {n} (length {L})"
                )
            if L < 4 * n:
                raise ValueError(
                    f"task 'mqar': parameter 'length' must be >= 4 * n_kv = {4 * n} "
                    f"(pairs + one query slot per key), got {L}"
                )
        if any(g["length"] == p["length"] for g in self._groups()):
            raise ValueError(f"task 'mqar': parameter 'ood_lengths' must not contain length={p['length']}")

    def _groups(self) -> list[dict[str, Any]]:
        p = self.params
        out = []
        for L in (int(x) for x in p["ood_lengths"].split(",") if x.strip()):
            out.append({"length": L, "n_kv": max(1, p["n_kv"] * L // p["length"])})
        return out

    @property
    def vocab(self) -> list[str]:
        if getattr(self, "_vocab", None) is None:  # built once: 8192 strings per sample would dominate
            half = self.params["vocab_size"] // 2
            self._vocab = (
                [FILLER] + [f"k{i}" for i in range(1, half)] + [f"v{i}" for i in range(half, self.params["vocab_size"])]
            )
        return self._vocab

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood-length")

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        q = {"vocab_size": p["vocab_size"], "length": p["length"], "n_kv": p["n_kv"], "power_a": p["power_a"]}
        if split == "ood-length":
            q.update(self._groups()[0])
        return q

    def eval_groups(self, split: str) -> list[dict[str, Any]] | None:
        return self._groups() if split == "ood-length" else None

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        V, L, n, a = p["vocab_size"], p["length"], p["n_kv"], p["power_a"]
        half = V // 2
        if L < 4 * n or n > half - 1:
            raise ValueError(
                f"task 'mqar': length {L} / n_kv {n} impossible (need length >= 4 n_kv, n_kv < vocab_size/2)"
            )
        keys = 1 + rng.choice(half - 1, size=n, replace=False)  # (n,)
        values = half + rng.choice(V - half, size=n, replace=False)  # (n,)
        space = (L - 2 * n) // 2
        # Zoology: gaps = np.random.choice(space, n, replace=False, p ~ a g^(a-1)), g = 1..space,
        # an ordered draw; Gumbel top-k sorted by score draws the same ordered sample
        score = (a - 1.0) * np.log(np.arange(1, space + 1)) + rng.gumbel(size=space)  # (space,)
        gaps = np.argsort(-score, kind="stable")[:n]  # (n,) the i-th key is asked at gaps[i]
        ids = np.zeros(L, dtype=np.int64)  # 0 = filler, also the slot after every query key
        ids[0 : 2 * n : 2] = keys
        ids[1 : 2 * n : 2] = values
        q = 2 * n + 2 * gaps  # (n,) query positions
        ids[q] = keys
        order = np.argsort(q)
        return ids, q[order], values[order]  # the values are labels only, never inputs here

    def solve(self, sample: Sample) -> list[str]:
        """The value of every key in the query region, in order, read from the pairs
        ``k v`` at the start (every key occurs twice: once in its pair, once as a query)."""
        toks = sample.tokens
        n = sum(1 for t in toks if t.startswith("k")) // 2
        table = {toks[i]: toks[i + 1] for i in range(0, 2 * n, 2)}
        return [table[t] for t in toks[2 * n :] if t in table]


TASKS = {"mqar": MQAR}
