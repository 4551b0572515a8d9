"""The plugin task: ``n`` digits, ``=``, then the same digits in reverse order (numpy only)."""

from __future__ import annotations

import numpy as np

from synthlab.generators import Param, Sample, Task
from synthlab.generators.base import positive


class Reverse(Task):
    """``n`` random digits 0-4, then ``=``, then the digits reversed: the output at ``=`` and
    after it is the digit mirrored about ``=`` (its distance back grows by two a step). The
    ``ood`` split has ``ood_n`` digits, longer than any training sequence."""

    name = "plugin_task"
    family = "plugin_demo"
    description = "repeat n digits in reverse order after '='"
    paper = "synthlab-plugin-demo (no paper)"
    PARAMS = {
        "n": Param(6, int, "digits to reverse", positive),
        "ood_n": Param(9, int, "digits in the ood split", positive),
    }

    def validate(self) -> None:
        if self.params["ood_n"] <= self.params["n"]:
            raise ValueError(
                f"task {self.name!r}: parameter 'ood_n' must be greater than n={self.params['n']}, "
                f"got {self.params['ood_n']}"
            )

    @property
    def vocab(self) -> list[str]:
        return [str(d) for d in range(5)] + ["="]

    @property
    def separators(self) -> tuple[str, ...]:
        return ("=",)

    @property
    def splits(self) -> tuple[str, ...]:
        return ("train", "test", "ood")

    def split_params(self, split: str) -> dict:
        return {"n": self.params["ood_n" if split == "ood" else "n"]}

    def generate(self, rng: np.random.Generator, p: dict):
        n = p["n"]
        digits = rng.integers(0, 5, size=n)  # (n,)
        ids = np.concatenate([digits, [5], digits[::-1]]).astype(np.int64)  # (2n + 1,)
        scored = np.arange(n, 2 * n, dtype=np.int64)  # the outputs at '=' and after it
        return ids, scored, digits[::-1].astype(np.int64)

    def solve(self, sample: Sample) -> list[str]:
        tokens = sample.tokens
        return tokens[: tokens.index("=")][::-1]
