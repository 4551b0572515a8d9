"""Token-level passkey retrieval (PoSE Sec. 4.3, after Mohtashami & Jaggi 2023)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Param, Sample, Task, positive

# the filler of Mohtashami & Jaggi, one token per word
FILLER = "The grass is green . The sky is blue . The sun is yellow . Here we go . There and back again .".split()
WORDS = sorted(set(FILLER))
KEY, QUERY = "<key>", "<query>"
DIGITS = [str(d) for d in range(10)]
VOCAB = DIGITS + [KEY, QUERY] + WORDS
_WORD_ID = {w: len(DIGITS) + 2 + i for i, w in enumerate(WORDS)}
PATTERN = np.array([_WORD_ID[w] for w in FILLER], dtype=np.int64)  # (P,)


class Passkey(Task):
    """``length`` tokens: the filler pattern (``The grass is green . The sky is blue . ...``)
    repeated, with ``<key> d_1 .. d_k`` inserted at a uniform depth (any of the filler gaps),
    and ``<query> d_1 .. d_k`` at the end. The key is ``k_digits`` uniform digits.

    Scored: ``<query>`` and the first k-1 answer digits (targets: the k key digits; with teacher
    forcing all right <=> greedy exact match). Metric: sequence accuracy.
    Splits: train / test at ``length`` (PoSE's L_c; paper 2k); ``ood-length``: one eval group
    per length 2 L_c, 4 L_c, ... up to ``target_length`` (L_t, paper 16k), each disjoint from
    train by construction (another length); ``test`` by the input hash.
    BiPE separators: ``.`` (the filler's sentence ends).
    """

    name = "passkey"
    family = "passkey"
    description = "retrieve a k-digit key hidden in repeated filler"
    paper = "PoSE Sec. 4.3; Mohtashami & Jaggi 2023"
    metrics = ("seq_acc",)
    length_param = "length"
    PARAMS = {
        "length": Param(2048, int, "sequence length L_c in train / test (paper 2k)", positive),
        "target_length": Param(16384, int, "largest ood-length length L_t (paper 16k)", positive),
        "k_digits": Param(5, int, "digits of the key (paper 5)", positive),
    }

    def validate(self) -> None:
        p = self.params
        need = 2 * p["k_digits"] + 2
        if p["length"] < need:
            raise ValueError(
                f"task 'passkey': parameter 'k_digits'={p['k_digits']} too large for length={p['length']} "
                f"(length must be >= 2 k_digits + 2 = {need})"
            )
        if p["target_length"] <= p["length"]:
            raise ValueError(
                f"task 'passkey': parameter 'target_length' must be > length={p['length']}, got {p['target_length']}"
            )

    @property
    def vocab(self) -> list[str]:
        return VOCAB

    @property
    def separators(self) -> tuple[str, ...]:
        return (".",)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood-length")

    def _ood_lengths(self) -> list[int]:
        L, Lt = self.params["length"], self.params["target_length"]
        out, x = [], 2 * L
        while x < Lt:
            out.append(x)
            x *= 2
        return out + [Lt]

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        L = self._ood_lengths()[0] if split == "ood-length" else p["length"]
        return {"length": L, "k_digits": p["k_digits"]}

    def eval_groups(self, split: str) -> list[dict[str, Any]] | None:
        return [{"length": L} for L in self._ood_lengths()] if split == "ood-length" else None

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        L, k = p["length"], p["k_digits"]
        n_fill = L - 2 * (k + 1)
        if n_fill < 0:
            raise ValueError(f"task 'passkey': parameter 'k_digits'={k} too large for length={L}")
        key = rng.integers(0, 10, size=k)  # digit ids are the digits
        depth = int(rng.integers(0, n_fill + 1))
        reps = n_fill // len(PATTERN) + 1
        ids = np.empty(L, dtype=np.int64)  # (L,)
        filler = np.tile(PATTERN, reps)[:n_fill]
        ids[:depth] = filler[:depth]
        ids[depth] = VOCAB.index(KEY)
        ids[depth + 1 : depth + 1 + k] = key
        ids[depth + 1 + k : L - k - 1] = filler[depth:]
        ids[L - k - 1] = VOCAB.index(QUERY)
        ids[L - k :] = key
        scored = np.arange(L - k - 1, L - 1, dtype=np.int64)
        return ids, scored, key.astype(np.int64)

    def solve(self, sample: Sample) -> list[str]:
        toks = sample.tokens
        out = []
        for t in toks[toks.index(KEY) + 1 :]:
            if t not in DIGITS:
                break
            out.append(t)
        return out


TASKS = {"passkey": Passkey}
