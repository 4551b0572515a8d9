"""Flip-Flop language (Liu et al. 2023; CoPE paper Sec. 5.1, Table 2, App. C)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Param, Sample, Task, open_probability, positive

W, R, I, ZERO, ONE = range(5)  # noqa: E741 - the paper's instructions: write, read, ignore
VOCAB = ["w", "r", "i", "0", "1"]


class FlipFlop(Task):
    """``n_pairs`` (instruction, bit) pairs: first ``w``, last ``r``, others i.i.d. with
    P(i) = p_i, P(w) = P(r) = (1 - p_i) / 2. The bit after ``r`` repeats the last written bit.

    Scored: the position of every ``r`` (its output must be the bit that follows).
    Loss: the whole sequence (paper), or only the reads with ``loss="reads"``.
    BiPE segments: each ``w`` starts a segment (there is no natural separator), i.e. the
    token before each ``w`` ends one.
    """

    name = "flipflop"
    family = "flipflop"
    description = "remember the last written bit across ignore instructions"
    paper = "Liu et al. 2023; CoPE Sec. 5.1"
    metrics = ("read_error", "glitch_rate")
    #: ood-sparse / ood-dense use the same length as train, so short sequences could repeat a
    #: training one: they are held out by the input hash as well (ood-length differs in length)
    HELD_OUT_SPLITS = ("test", "ood-sparse", "ood-dense")
    PARAMS = {
        "n_pairs": Param(256, int, "instruction/bit pairs per sequence (T = 2 n_pairs)", positive),
        "p_i": Param(0.8, float, "P(ignore) in train and test", open_probability),
        "p_sparse": Param(0.98, float, "P(ignore) in ood-sparse", open_probability),
        "p_dense": Param(0.1, float, "P(ignore) in ood-dense", open_probability),
        "ood_len_pairs": Param(0, int, "if > 0, an ood-length split with this many pairs (p_i as train)"),
        "loss": Param(
            "all",
            str,
            "'all' (whole-sequence LM loss, paper) or 'reads'",
            lambda v: None if v in ("all", "reads") else "must be 'all' or 'reads'",
        ),
    }

    def validate(self) -> None:
        if self.params["n_pairs"] < 2:
            raise ValueError(
                f"task 'flipflop': parameter 'n_pairs' must be >= 2 (a write and a read), got {self.params['n_pairs']}"
            )
        if self.params["ood_len_pairs"] not in (0,) and self.params["ood_len_pairs"] < 2:
            raise ValueError("task 'flipflop': parameter 'ood_len_pairs' must be 0 (off) or >= 2")
        if self.params["ood_len_pairs"] == self.params["n_pairs"]:
            raise ValueError(
                "task 'flipflop': parameter 'ood_len_pairs' must differ from n_pairs "
                f"({self.params['n_pairs']}), got {self.params['ood_len_pairs']}"
            )

    @property
    def vocab(self) -> list[str]:
        return VOCAB

    @property
    def separators(self) -> tuple[str, ...]:
        return ()

    #: BiPE: tokens that START a segment (flip-flop has no natural closing separator)
    segment_starts = ("w",)

    @property
    def splits(self) -> tuple[str, ...]:
        base = ("train", "test", "ood-sparse", "ood-dense")
        return base + (("ood-length",) if self.params["ood_len_pairs"] else ())

    def split_params(self, split: str) -> dict[str, Any]:
        p = self.params
        q = {"n_pairs": p["n_pairs"], "p_i": p["p_i"], "loss": p["loss"]}
        if split == "ood-sparse":
            q["p_i"] = p["p_sparse"]
        elif split == "ood-dense":
            q["p_i"] = p["p_dense"]
        elif split == "ood-length":
            q["n_pairs"] = p["ood_len_pairs"]
        return q

    def generate(self, rng: np.random.Generator, p: dict[str, Any]):
        n = p["n_pairs"]
        p_wr = (1.0 - p["p_i"]) / 2.0
        instr = rng.choice(3, size=n, p=[p_wr, p_wr, p["p_i"]])  # W=0, R=1, I=2
        instr[0], instr[-1] = W, R
        bits = rng.integers(0, 2, size=n)
        # the bit after each read = the bit of the most recent write (forward-fill write indices)
        write_idx = np.where(instr == W, np.arange(n), 0)
        np.maximum.accumulate(write_idx, out=write_idx)
        reads = instr == R
        bits[reads] = bits[write_idx[reads]]
        ids = np.empty(2 * n, dtype=np.int64)
        ids[0::2] = instr
        ids[1::2] = bits + ZERO
        scored = 2 * np.flatnonzero(reads)
        return ids, scored, ids[scored + 1]

    def loss_positions(self, ids, scored, target_ids, p):
        if p["loss"] == "reads":
            return scored, target_ids
        pos = np.arange(len(ids) - 1)
        return pos, ids[1:]

    def solve(self, sample: Sample) -> list[str]:
        out, last = [], None
        toks = sample.tokens
        for k in range(0, len(toks) - 1, 2):
            op, bit = toks[k], toks[k + 1]
            if op == "w":
                last = bit
            elif op == "r":
                out.append(last)
        return out


TASKS = {"flipflop": FlipFlop}
