"""A sweep's seeds from the command line or the Python API (``sweep --seeds``).

``--seeds 10`` is a count (seeds 0 to 9); ``--seeds 3-9`` an inclusive range; ``--seeds 0,4,7``
a list, whose items may be ranges too (``0-2,7``). One seed ``N`` alone is ``N-N``. The
standard library only: the command line checks the flag before anything heavy is imported.
"""

from __future__ import annotations

import re
from typing import Any

from synthlab.generators.base import SEED_MAX

# more seeds than this is a slip (a count typed for a seed, an extra digit): refused, even with
# --yes (a grid's own size limit, --yes apart, is the sweep command's)
MAX_SEEDS = 10_000

_INT = re.compile(r"\d+")
_RANGE = re.compile(r"(\d+)-(\d+)")
_FORMS = "a count N (seeds 0 to N-1), a range A-B or a list A,B,C"


def parse_seeds(value: Any, flag: str = "--seeds") -> list[int]:
    """``value`` as a list of seeds (in the order given): an int is a count; a string is a
    count, a range or a list; a list or tuple holds the seeds themselves. ValueError (one line
    naming ``flag``) for anything else: no seed, a negative or too large seed, a backward range,
    a repeated seed, more than :data:`MAX_SEEDS` seeds."""
    if isinstance(value, bool):
        raise ValueError(f"{flag} {value!r}: expected {_FORMS}")
    if isinstance(value, int):
        return _count(value, flag, repr(value))
    if isinstance(value, str):
        return _parse_text(value.strip(), flag)
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{flag} []: expected at least one seed")
        if len(value) > MAX_SEEDS:
            raise ValueError(f"{flag}: {len(value):,} seeds, over the {MAX_SEEDS:,} a sweep takes")
        for s in value:
            if isinstance(s, bool) or not isinstance(s, int):
                raise ValueError(f"{flag}: seed {s!r} is not an integer")
            _check_seed(s, flag)
        return _no_repeats([int(s) for s in value], flag, repr(list(value)))
    raise ValueError(f"{flag} {value!r}: expected {_FORMS}")


def _parse_text(text: str, flag: str) -> list[int]:
    shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}..."
    if _INT.fullmatch(text):
        return _count(int(text), flag, shown)
    seeds: list[int] = []
    for item in text.split(","):
        item = item.strip()
        m = _RANGE.fullmatch(item)
        if _INT.fullmatch(item):
            lo = hi = int(item)
        elif m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo:
                raise ValueError(f"{flag} {shown}: range {item} ends before it starts")
        elif item.startswith("-") and _INT.fullmatch(item[1:]):
            raise ValueError(f"{flag} {shown}: seeds are integers from 0 to {SEED_MAX}, got {item}")
        else:
            raise ValueError(f"{flag} {shown}: expected {_FORMS}")
        _check_seed(hi, flag)
        if len(seeds) + hi - lo + 1 > MAX_SEEDS:  # counted before the list is made (0-4294967295)
            raise ValueError(f"{flag} {shown}: more than {MAX_SEEDS:,} seeds, over the {MAX_SEEDS:,} a sweep takes")
        seeds.extend(range(lo, hi + 1))
    return _no_repeats(seeds, flag, shown)


def _count(n: int, flag: str, shown: str) -> list[int]:
    if n < 1:
        raise ValueError(f"{flag} {shown}: a count of seeds is at least 1")
    if n > MAX_SEEDS:
        raise ValueError(f"{flag} {shown}: {n:,} seeds, over the {MAX_SEEDS:,} a sweep takes")
    return list(range(n))


def _check_seed(s: int, flag: str) -> None:
    if not 0 <= s <= SEED_MAX:
        raise ValueError(f"{flag}: seeds are integers from 0 to {SEED_MAX}, got {s}")


def _no_repeats(seeds: list[int], flag: str, shown: str) -> list[int]:
    seen: set[int] = set()
    for s in seeds:
        if s in seen:
            raise ValueError(f"{flag} {shown}: seed {s} is repeated")
        seen.add(s)
    return seeds
