"""Calibrated comparisons of seeds: the statistics behind a claim's verdict.

Exact permutation tests (sign-flip when the arms share seeds, two-sample otherwise, sign-flip
of the distance past a bound for a threshold), their inverted 95 % interval, Holm's adjustment
over the claims judged together, and :func:`seeds_needed` for an inconclusive claim. The rule,
fixed before any data is seen, and why it keeps its error rate: docs/results.md, "How a claim
is decided".
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Sequence

import numpy as np

ALPHA = 0.05
POWER = 0.8
EXACT_LIMIT = 2**12  # arrangements enumerated exactly; beyond, this many random ones (seeded)
RNG_SEED = 0
MAX_SEEDS_NEEDED = 200  # beyond this, seeds_needed says None (an effect too small for seeds to settle)

SUPPORTED = "supported"
CONTRADICTED = "contradicted"
INCONCLUSIVE = "inconclusive"

PAIRED = "sign-flip permutation (paired by seed)"
UNPAIRED = "two-sample permutation (unpaired)"
ONE_SAMPLE = "sign-flip permutation (one arm vs the bound)"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One claim's evidence in goodness units (positive: the claimed way)."""

    estimate: float  # mean difference (paired / unpaired) or mean distance past the bound
    low: float  # 95 % interval (the test inverted); -inf / inf where no shift is rejected
    high: float
    p: float  # two-sided p of "no difference"
    test: str  # PAIRED, UNPAIRED or ONE_SAMPLE
    n: tuple[int, ...]  # seeds used per arm (paired: pairs, the same number twice)
    unpaired_left_out: int = 0  # seeds of one arm only, left out of a paired test
    exact: bool = True  # every arrangement enumerated (else Monte Carlo, EXACT_LIMIT draws)
    sd: float = math.nan  # the spread the power calculation reads (paired differences; pooled)

    def interval(self, digits: int = 1) -> str:
        def f(x: float) -> str:
            return "-inf" if x == -math.inf else "inf" if x == math.inf else f"{x:+.{digits}f}"

        return f"[{f(self.low)}, {f(self.high)}]"


# --------------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------------


def _arrangements_one(n: int) -> int:
    return 2**n


def _arrangements_two(n1: int, n2: int) -> int:
    return math.comb(n1 + n2, n1)


@functools.lru_cache(maxsize=64)
def _sign_matrix(n: int) -> np.ndarray:
    """Sign vectors of a sign-flip test: all 2^n up to EXACT_LIMIT, else EXACT_LIMIT seeded draws."""
    if 2**n <= EXACT_LIMIT:
        codes = np.arange(2**n)[:, None] >> np.arange(n)[None, :]
        return 1.0 - 2.0 * (codes & 1)
    return np.random.default_rng(RNG_SEED).choice([-1.0, 1.0], size=(EXACT_LIMIT, n))


@functools.lru_cache(maxsize=64)
def _label_matrix(n1: int, n2: int) -> np.ndarray:
    """Group-1 masks of a two-sample permutation test: every way to pick n1 of n1 + n2 up to
    EXACT_LIMIT, else EXACT_LIMIT seeded draws."""
    n = n1 + n2
    if math.comb(n, n1) <= EXACT_LIMIT:
        out = np.zeros((math.comb(n, n1), n))
        for i, g in enumerate(itertools.combinations(range(n), n1)):
            out[i, list(g)] = 1.0
        return out
    rng = np.random.default_rng(RNG_SEED)
    out = np.zeros((EXACT_LIMIT, n))
    for i in range(EXACT_LIMIT):
        out[i, rng.permutation(n)[:n1]] = 1.0
    return out


class _LinearTest:
    """A permutation test whose statistic is linear in a shift delta of the first arm: each
    arrangement's value is ``null0 - delta * slope``, the observed one ``observed0 - delta``.
    Its two-sided p is scipy.stats.permutation_test's: twice the smaller tail, each tail
    counting ties within 100 float eps of the observed value, plus one for the observed
    arrangement when the arrangements are drawn (Monte Carlo); tests/unit/test_inference.py
    checks it against scipy."""

    def __init__(self, null0: np.ndarray, slope: np.ndarray, observed0: float, exact: bool):
        self.null0, self.slope, self.observed0, self.exact = null0, slope, observed0, exact

    def p(self, delta: float = 0.0) -> float:
        obs = self.observed0 - delta
        null = self.null0 - delta * self.slope if delta else self.null0
        gamma = abs(np.finfo(float).eps * 100 * obs)
        adj = 0 if self.exact else 1
        less = (np.count_nonzero(null <= obs + gamma) + adj) / (null.size + adj)
        greater = (np.count_nonzero(null >= obs - gamma) + adj) / (null.size + adj)
        return float(min(1.0, 2 * min(less, greater)))


def _sign_flip(d: np.ndarray) -> _LinearTest:
    """The sign-flip test of mean(d) = delta: a sign vector s gives mean(s * (d - delta)) =
    (s . d - delta * sum(s)) / n."""
    s = _sign_matrix(d.size)
    return _LinearTest(s @ d / d.size, s.sum(axis=1) / d.size, float(d.mean()), 2**d.size <= EXACT_LIMIT)


def _two_sample(a: np.ndarray, b: np.ndarray) -> _LinearTest:
    """The two-sample permutation test of mean(a) - mean(b) = delta: with z = (a - delta, b) and
    a relabelling m (1: first group), the statistic m . z / n1 - (1 - m) . z / n2 is linear in
    delta through z's first n1 entries."""
    n1, n2 = a.size, b.size
    m = _label_matrix(n1, n2)
    w = m / n1 - (1 - m) / n2  # the statistic's weights per arrangement
    first = np.concatenate([np.ones(n1), np.zeros(n2)])
    return _LinearTest(
        w @ np.concatenate([a, b]), w @ first, float(a.mean() - b.mean()), math.comb(n1 + n2, n1) <= EXACT_LIMIT
    )


def _invert(test: _LinearTest, estimate: float, lo_end: float, hi_end: float, alpha: float) -> tuple[float, float]:
    """The 1 - alpha interval of the shift: the shifts whose test p is >= alpha, searched
    outward from the estimate (p 1 there) by bisection. Beyond ``lo_end`` / ``hi_end`` the data
    are all on one side of the shift, where p is at its floor: if that floor is not below
    alpha, no shift is rejected and the bound is infinite."""
    span = max(hi_end - lo_end, abs(estimate), 1e-12)
    out = []
    for end, sign in ((lo_end - span, -1.0), (hi_end + span, 1.0)):
        if test.p(end) >= alpha:
            out.append(sign * math.inf)
            continue
        inside, outside = estimate, end
        for _ in range(60):
            if abs(outside - inside) <= 1e-6 * span:
                break
            mid = 0.5 * (inside + outside)
            if test.p(mid) >= alpha:
                inside = mid
            else:
                outside = mid
        out.append(inside)
    return out[0], out[1]


def paired(
    better: Sequence[float] | np.ndarray,
    worse: Sequence[float] | np.ndarray,
    *,
    interval: bool = True,
    alpha: float = ALPHA,
) -> Comparison:
    """Paired comparison of two arms' per-seed goodness (same order: one seed per position)."""
    d = np.asarray(better, dtype=float) - np.asarray(worse, dtype=float)
    if d.size == 0:
        raise ValueError("paired: no seed in both arms")
    est = float(d.mean())
    if d.size < 2 or not np.any(d):  # one seed can never decide; all 0: nothing to flip
        p, lo, hi = 1.0, (-math.inf if d.size < 2 else 0.0), (math.inf if d.size < 2 else 0.0)
    else:
        test = _sign_flip(d)
        p = test.p()
        lo, hi = _invert(test, est, float(d.min()), float(d.max()), alpha) if interval else (math.nan, math.nan)
    sd = float(d.std(ddof=1)) if d.size > 1 else math.nan
    return Comparison(est, lo, hi, p, PAIRED, (d.size, d.size), exact=_arrangements_one(d.size) <= EXACT_LIMIT, sd=sd)


def unpaired(
    better: Sequence[float], worse: Sequence[float], *, interval: bool = True, alpha: float = ALPHA
) -> Comparison:
    """Unpaired comparison of two arms' per-seed goodness (difference of means)."""
    a, b = np.asarray(better, dtype=float), np.asarray(worse, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("unpaired: an arm has no seed")
    est = float(a.mean() - b.mean())
    if min(a.size, b.size) < 2:  # an arm of one seed is never decided (p >= 2 / (n + 1))
        p, lo, hi = 1.0, -math.inf, math.inf
    else:
        test = _two_sample(a, b)
        p = test.p()
        lo, hi = (
            _invert(test, est, float(a.min() - b.max()), float(a.max() - b.min()), alpha)
            if interval
            else (math.nan, math.nan)
        )
    pooled = math.nan
    if a.size + b.size > 2:
        pooled = math.sqrt(
            (
                (a.size - 1) * (a.var(ddof=1) if a.size > 1 else 0.0)
                + (b.size - 1) * (b.var(ddof=1) if b.size > 1 else 0.0)
            )
            / (a.size + b.size - 2)
        )
    return Comparison(
        est, lo, hi, p, UNPAIRED, (a.size, b.size), exact=_arrangements_two(a.size, b.size) <= EXACT_LIMIT, sd=pooled
    )


def one_arm(
    values: Sequence[float], bound: float, *, at_least: bool, interval: bool = True, alpha: float = ALPHA
) -> Comparison:
    """One arm against a bound: the mean's distance past it, positive the claimed way
    (above for ``at_least``, below for ``at_most``)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("one_arm: no seed")
    d = (x - bound) if at_least else (bound - x)
    c = paired(d, np.zeros_like(d), interval=interval, alpha=alpha)
    return dataclasses.replace(c, test=ONE_SAMPLE, n=(x.size,))


def compare(better: dict[str, float], worse: dict[str, float], *, interval: bool = True) -> Comparison:
    """The rule for two arms given as {seed: goodness}: paired over the seeds both have when
    they share at least 2, else unpaired over all."""
    shared = [s for s in better if s in worse]
    if len(shared) >= 2:
        c = paired([better[s] for s in shared], [worse[s] for s in shared], interval=interval)
        left = (len(better) - len(shared)) + (len(worse) - len(shared))
        return dataclasses.replace(c, unpaired_left_out=left)
    return unpaired(list(better.values()), list(worse.values()), interval=interval)


# --------------------------------------------------------------------------------------------
# several claims at once, and the verdict
# --------------------------------------------------------------------------------------------


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of the p-values of one family of claims (NaN: not tested,
    left out of the family and returned as NaN): the k-th smallest of m is multiplied by
    m - k + 1, then made non-decreasing, capped at 1. Written out because statsmodels'
    ``multipletests`` runs a full garbage collection per call (0.1 s in a sweep's process);
    tests/unit/test_inference.py checks it against statsmodels."""
    idx = [i for i, p in enumerate(ps) if not math.isnan(p)]
    out = [math.nan] * len(ps)
    running = 0.0
    for k, i in enumerate(sorted(idx, key=lambda i: ps[i])):
        running = max(running, min(1.0, (len(idx) - k) * ps[i]))
        out[i] = running
    return out


def decide(estimate: float, p_adjusted: float, alpha: float = ALPHA) -> str:
    if not math.isnan(p_adjusted) and p_adjusted < alpha:
        if estimate > 0:
            return SUPPORTED
        if estimate < 0:
            return CONTRADICTED
    return INCONCLUSIVE


def min_seeds(test: str = PAIRED, alpha: float = ALPHA) -> int:
    """The fewest seeds per arm with which ``test`` can reach a two-sided p below ``alpha`` at all
    (all differences one way): below it no data decide."""
    for n in range(1, 64):
        floor = 2.0 / (_arrangements_two(n, n) if test == UNPAIRED else _arrangements_one(n))
        if floor < alpha:
            return n
    raise ValueError(f"alpha {alpha} too small")


def seeds_needed(c: Comparison, family: int = 1, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """About how many seeds per arm would detect the observed difference with ``power`` at
    Holm's strictest level (alpha / family): the t-test's sample size at the observed effect
    size (mean / sd), which the permutation test approaches, and never fewer than the test's
    own minimum. None when no difference was seen (the estimate is 0), the spread is unknown
    (one seed) or more than MAX_SEEDS_NEEDED would be needed."""
    level = alpha / max(family, 1)
    floor = min_seeds(UNPAIRED if c.test == UNPAIRED and min(c.n) >= 2 else PAIRED, level)
    if c.estimate == 0 or math.isnan(c.estimate):
        return None
    if c.sd == 0:
        return floor
    if math.isnan(c.sd):
        return None
    from statsmodels.stats.power import TTestIndPower, TTestPower

    effect = abs(c.estimate) / c.sd
    ns = np.arange(max(floor, 2), MAX_SEEDS_NEEDED + 1)
    if c.test == UNPAIRED:  # n seeds in each arm
        reached = TTestIndPower().power(effect_size=effect, nobs1=ns, alpha=level, ratio=1.0, alternative="two-sided")
    else:
        reached = TTestPower().power(effect_size=effect, nobs=ns, alpha=level, alternative="two-sided")
    # the non-central t's cdf gives NaN where the miss probability underflows (a gap of several
    # sd): the power there is 1 to float precision
    reached = np.nan_to_num(np.asarray(reached, dtype=float), nan=1.0)
    hit = np.flatnonzero(reached >= power)  # power rises with n: the first n that reaches it
    return int(ns[hit[0]]) if hit.size else None


# --------------------------------------------------------------------------------------------
# adding seeds until the claims are decided (group-sequential looks)
# --------------------------------------------------------------------------------------------

# seeds a side at which a sweep run --until-decided looks: the first look, 8, is the fewest at
# which the sign-flip floor (2 / 2^8) lies below that look's level at the default cap (0.026)
PLANNED_LOOKS = (8, 12, 16, 20, 30, 40)
DEFAULT_MAX_SEEDS = 20


def looks(max_seeds: int = DEFAULT_MAX_SEEDS) -> list[int]:
    """The planned seed counts below ``max_seeds``, which is always the last look."""
    floor = min_seeds(PAIRED)
    if isinstance(max_seeds, bool) or not isinstance(max_seeds, int) or max_seeds < floor:
        raise ValueError(
            f"--max-seeds must be an integer of at least {floor} (fewer seeds a side never decide "
            f"a claim), got {max_seeds!r}"
        )
    return [n for n in PLANNED_LOOKS if n < max_seeds] + [max_seeds]


def spent(t: float, alpha: float = ALPHA) -> float:
    """Lan-DeMets' Pocock-type spending function: the error allowed by information fraction t."""
    return alpha * math.log(1 + (math.e - 1) * min(max(t, 0.0), 1.0))


def look_levels(plan: Sequence[int], alpha: float = ALPHA) -> list[float]:
    """The level each look tests at: the error spent between it and the look before. Spent by
    the union bound (the looks' tests are treated as if independent of each other), the levels
    add up to ``alpha``, so stopping at the first look that decides keeps the error rate at or
    below ``alpha``; conservative, since the looks share their first seeds."""
    total = plan[-1]
    out, before = [], 0.0
    for n in plan:
        now = spent(n / total, alpha)
        out.append(now - before)
        before = now
    return out
