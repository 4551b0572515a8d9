"""The reference's training mix of operator counts for ``arithmetic``'s ``train_mix``: the share
of each operator count 1..n_ops in the deduplicated training set that Feng et al. 2023 build
(guyuntian/CoT_benchmark, arithmetic/data.py with ``--under``; BiPE Sec. 4.1 trains on its 1M
set), computed by running the reference's procedure with synthlab's own generator
(``Arithmetic.chains``, the law of ``Arithmetic.generate``, vectorised):

  for n = 1 .. n_ops: draw int(n / (1 + ... + n_ops) * size) chains of n operators into a set
  (a chain is its whole token sequence ``E_n = ... = E_0``); then top the set up with
  n_ops-operator chains until it holds ``size`` chains.

Short chains collapse (F_11 holds 473 distinct one-operator chains), so the shares are far
from the draw counts' n / (1 + ... + n_ops). Prints the counts as a comment and the value for
the sweep file's task table:

    python scripts/arithmetic_mix.py [--modulus 11] [--n-ops 6] [--size 1e6] [--seed 2023]

About 20 s and 0.5 GB on 2 cores for the paper's setting (a million chains). Bad input exits 2 with one line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: import synthlab.generators

from synthlab.generators.arithmetic import Arithmetic  # noqa: E402
from synthlab.generators.base import SEED_MAX  # noqa: E402

#: chains drawn at once (the draws, so the counts, depend on it: keep it fixed)
BATCH = 50_000
#: top-up rounds before the n_ops-operator chains count as exhausted
MAX_ROUNDS = 200


def max_chain_length(n: int) -> int:
    """Tokens of the longest chain with n operators: <bos>, E_k of at most 1 + 4k tokens for
    k = 0..n, n '=', <eos>."""
    return 2 + n + sum(1 + 4 * k for k in range(n + 1))


def _rows(ids: np.ndarray, width: int, dtype: type) -> np.ndarray:
    """Each chain (a row of ids, -1 padded to ``width``) as one fixed-size byte string, for
    np.unique (sorting them compares whole rows)."""
    out = np.full((len(ids), width), -1, dtype=dtype)
    out[:, : ids.shape[1]] = ids
    return np.ascontiguousarray(out).view(np.dtype((np.void, out.itemsize * width))).ravel()


def reference_counts(modulus: int, n_ops: int, size: int, seed: int = 2023, batch: int = BATCH) -> list[int]:
    """Distinct chains per operator count 1..n_ops in the reference's training set of ``size``
    chains (sum = size), drawn from ``np.random.default_rng(seed)``. ValueError when the
    n_ops-operator chains cannot fill the set (the reference's top-up would never end)."""
    task = Arithmetic(modulus=modulus, n_ops=n_ops, ood_ops_max=0)  # checks modulus and n_ops
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    rng = np.random.default_rng(seed)
    dtype = np.int16 if len(task.vocab) < 2**15 else np.int32
    w = np.arange(1, n_ops + 1)
    draws = (w / w.sum() * size).astype(np.int64)  # the reference's int(output_list[i])
    counts = []
    for n in range(1, n_ops + 1):
        width = max_chain_length(n)
        seen = np.zeros(0, dtype=np.dtype((np.void, np.dtype(dtype).itemsize * width)))
        todo = int(draws[n - 1])
        while todo:
            k = min(todo, batch)
            seen = np.unique(np.concatenate([seen, _rows(task.chains(rng, n, k), width, dtype)]))
            todo -= k
        if n == n_ops:  # top up to `size` chains in all
            need = size - sum(counts)
            for _ in range(MAX_ROUNDS):
                if len(seen) >= need:
                    break
                k = min(batch, 2 * (need - len(seen)) + 100)
                seen = np.unique(np.concatenate([seen, _rows(task.chains(rng, n, k), width, dtype)]))
            else:
                raise ValueError(
                    f"F_{modulus} has too few distinct {n_ops}-operator chains to fill a set of {size:,} "
                    f"(found {len(seen):,} of the {need:,} needed); choose a smaller size"
                )
            counts.append(need)
        else:
            counts.append(len(seen))
    return counts


def _count(text: str) -> int:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (e.g. 1000000 or 1e6), got {text!r}") from None
    if not np.isfinite(v) or not v.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number (e.g. 1000000 or 1e6), got {text!r}")
    return int(v)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modulus", type=_count, default=11, help="prime p: numbers 0..p-1 (the reference's 11)")
    parser.add_argument("--n-ops", type=_count, default=6, help="L: most operators (the reference's --length)")
    parser.add_argument("--size", type=_count, default=1_000_000, help="chains in the set (the reference's 1e6)")
    parser.add_argument("--seed", type=_count, default=2023, help="seed of the draws (the reference seeds 2023)")
    args = parser.parse_args(argv)
    if not 1 <= args.size <= 10**8:
        parser.error(f"--size must be from 1 to 100,000,000, got {args.size}")
    if not 0 <= args.seed <= SEED_MAX:
        parser.error(f"--seed must be from 0 to {SEED_MAX}, got {args.seed}")
    try:
        counts = reference_counts(args.modulus, args.n_ops, args.size, args.seed)
    except ValueError as e:
        parser.error(str(e))
    print(
        f"# python scripts/arithmetic_mix.py --modulus {args.modulus} --n-ops {args.n_ops} --size {args.size} "
        f"--seed {args.seed}"
    )
    print(f"# distinct chains per operator count 1..{args.n_ops}: {' '.join(map(str, counts))} (sum {sum(counts):,})")
    shares = (
        np.format_float_positional(c / args.size, precision=6, unique=False, fractional=False, trim="-") for c in counts
    )  # 6 significant digits, no exponent
    print('train_mix = "' + ",".join(shares) + '"')


if __name__ == "__main__":
    main()
