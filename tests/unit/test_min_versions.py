"""The declared floors and .ci/min-versions.txt (what the minimum-versions CI step installs) agree:
a floor raised in pyproject.toml and not in the constraints (or the reverse) would leave CI
testing other releases than the ones declared."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# not pinned at its floor: an older torch is a multi-GB download (the constraints file says so)
NOT_AT_FLOOR = {"torch"}
# the test extra's requirements the unit tier needs (scripts/min_versions.sh installs them)
UNIT_TIER = {"pytest", "pytest-xdist", "scipy"}


def _name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _floor(req: str) -> tuple[int, ...] | None:
    m = re.search(r">=\s*([0-9][0-9.]*)", req.split(";")[0])
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _padded(v: tuple[int, ...]) -> tuple[int, ...]:
    return v + (0,) * (4 - len(v))


def _pins() -> dict[str, tuple[int, ...]]:
    pins = {}
    for line in (ROOT / ".ci" / "min-versions.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{line!r}: the constraints pin exact versions (NAME==VERSION)"
            pins[_name(name)] = tuple(int(x) for x in re.match(r"[0-9.]+", version).group(0).rstrip(".").split("."))
    return pins


def test_every_declared_floor_is_pinned_exactly_in_the_constraints():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {_name(r): _floor(r) for r in project["dependencies"]}
    declared |= {_name(r): _floor(r) for r in project["optional-dependencies"]["test"] if _name(r) in UNIT_TIER}
    assert all(declared.values()), f"every dependency has a floor: {declared}"
    pins = _pins()
    assert set(pins) == set(declared), "pyproject.toml's dependencies and .ci/min-versions.txt name other libraries"
    wrong = {
        n: (declared[n], pins[n])
        for n in declared
        if n not in NOT_AT_FLOOR and _padded(declared[n]) != _padded(pins[n])
    }
    assert not wrong, f"floor (pyproject.toml) != pin (.ci/min-versions.txt): {wrong}"
    assert all(_padded(pins[n]) >= _padded(declared[n]) for n in NOT_AT_FLOOR)
