"""Selective copying (Gu & Dao 2023; CoPE paper Sec. 5.2, Table 2)."""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from .base import Param, Sample, Task, non_negative, positive

BLANK, SEP = "_", "|"


def data_names(n_data: int) -> list[str]:
    """Data symbol names: ``A..Z`` when they fit, else ``d0 d1 ...``."""
    if n_data <= 26:
        return list(string.ascii_uppercase[:n_data])
    return [f"d{i}" for i in range(n_data)]


class SelectiveCopy(Task):
    """``n_copy`` data tokens (i.i.d. uniform over ``n_data`` symbols) in order, with
    ``n_blank`` blanks ``_`` at uniformly random places (any of the C(n_copy + n_blank,
    n_blank) arrangements, blanks after the last data token included), then ``|``, then the
    data tokens again without the blanks: ``D _ _ C F _ F _ E | D C F F E``.

    T = 2 n_copy + n_blank + 1. Scored: the ``n_copy`` output tokens (positions ``|`` ..
    second-to-last, teacher forcing: each output is the next non-blank after the previous).
    Splits (paper): train / test n_blank = 256, ``ood-dense`` 128, ``ood-sparse`` 512 blanks,
    n_copy = 256 everywhere. The OOD splits differ from train in length (validate() insists
    on different blank counts), so they are disjoint from train by construction; ``test`` is
    kept disjoint by the input hash. BiPE separator: ``|``.
    """

    name = "selective_copy"
    family = "selective_copy"
    description = "copy the non-blank tokens in order"
    paper = "Gu & Dao 2023; CoPE Sec. 5.2"
    metrics = ("token_error", "seq_error")
    PARAMS = {
        "n_data": Param(16, int, "number of data symbols (paper: vocab 16)", positive),
        "n_copy": Param(256, int, "data tokens to copy", positive),
        "n_blank": Param(256, int, "blanks in train / test", non_negative),
        "n_blank_dense": Param(128, int, "blanks in ood-dense", non_negative),
        "n_blank_sparse": Param(512, int, "blanks in ood-sparse", non_negative),
    }

    def validate(self) -> None:
        p = self.params
        for k in ("n_blank_dense", "n_blank_sparse"):
            if p[k] == p["n_blank"]:
                raise ValueError(
                    f"task 'selective_copy': parameter {k!r} must differ from n_blank="
                    f"{p['n_blank']} (an OOD split needs another blank count), got {p[k]}"
                )

    @property
    def vocab(self) -> list[str]:
        return data_names(self.params["n_data"]) + [BLANK, SEP]

    @property
    def separators(self) -> tuple[str, ...]:
        return (SEP,)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood-dense", "ood-sparse")

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        blanks = {"ood-dense": p["n_blank_dense"], "ood-sparse": p["n_blank_sparse"]}.get(split, p["n_blank"])
        return {"n_data": p["n_data"], "n_copy": p["n_copy"], "n_blank": blanks}

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        n, b, v = p["n_copy"], p["n_blank"], p["n_data"]
        blank_id, sep_id = v, v + 1
        data = rng.integers(0, v, size=n)  # (n,)
        # data slots: a uniform n-subset of the n + b input slots, kept in order
        keys = rng.random(n + b)
        slots = np.sort(np.argpartition(keys, n - 1)[:n]) if b else np.arange(n)
        ids = np.full(2 * n + b + 1, blank_id, dtype=np.int64)  # (T,)
        ids[slots] = data
        ids[n + b] = sep_id
        ids[n + b + 1 :] = data
        scored = np.arange(n + b, 2 * n + b, dtype=np.int64)
        return ids, scored, data

    def solve(self, sample: Sample) -> list[str]:
        toks = sample.tokens
        cut = toks.index(SEP)
        return [t for t in toks[:cut] if t != BLANK]


TASKS = {"selective_copy": SelectiveCopy}
