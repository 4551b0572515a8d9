"""The papers beside us: a sweep file's published numbers and claims, judged on its results.

Parses a sweep file's ``[[paper]]`` numbers (one cell each) and ``[[claim]]`` orderings or
thresholds, with their ``kind`` (paper, proxy, prediction). Parsing only:
:mod:`synthlab.analysis.claims` measures the cells and judges the claims. The format:
docs/interfaces.md, "Sweep files"; how they show: docs/results.md, "Reading the grids".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from synthlab.model import parse_pe

DEFAULT_CLAIM_PRESETS = ("quick", "paper")
DEFAULT_PAPER_PRESETS = ("paper",)
_PAPER_KEYS = ("source", "setting", "cell", "value", "spread", "presets")
_CLAIM_KEYS = ("text", "source", "kind", "better", "worse", "cell", "at_least", "at_most", "presets")
# what a claim is (the claims table says it beside the claim)
CLAIM_KINDS = {"paper": "paper's claim", "proxy": "proxy of a paper's claim", "prediction": "synthlab's prediction"}


@dataclasses.dataclass(frozen=True)
class PaperValue:
    """One number a paper reports for one cell (percent, in the grid's unit)."""

    source: str
    setting: str
    cell: dict[str, Any]
    value: float
    spread: float | None = None
    presets: tuple[str, ...] = DEFAULT_PAPER_PRESETS

    def label(self) -> str:
        return f"{self.value:g}" + (f" ± {self.spread:g}" if self.spread is not None else "")


@dataclasses.dataclass(frozen=True)
class Claim:
    """An ordering (``better`` ahead of ``worse``) or a threshold on one ``cell``."""

    text: str
    source: str
    better: dict[str, Any] | None = None
    worse: dict[str, Any] | None = None
    cell: dict[str, Any] | None = None
    at_least: float | None = None
    at_most: float | None = None
    presets: tuple[str, ...] = DEFAULT_CLAIM_PRESETS
    kind: str = "paper"  # CLAIM_KINDS

    def cells(self) -> list[dict[str, Any]]:
        return [c for c in (self.better, self.worse, self.cell) if c is not None]


# --------------------------------------------------------------------------------------------
# parsing (called by the sweep-file parser; errors name the file and the entry)
# --------------------------------------------------------------------------------------------


def _cell(where: str, key: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not v:
        raise ValueError(
            f'{where}: {key}: expected a non-empty inline table of cell keys, e.g. {{ pe = "rope", split = "test" }}'
        )
    for k, x in v.items():
        if isinstance(x, (dict, list)) or isinstance(x, bool):
            raise ValueError(f"{where}: {key}.{k}: expected a string or a number, got {x!r}")
    return dict(v)


def _number(where: str, key: str, v: Any, lo: float = -math.inf, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{where}: {key}: expected a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def _text(where: str, key: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{where}: {key}: expected a non-empty string, got {v!r}")
    return v


def _kind(where: str, key: str, v: Any) -> str:
    if v not in CLAIM_KINDS:
        raise ValueError(f"{where}: {key}: expected one of {', '.join(CLAIM_KINDS)}, got {v!r}")
    return v


def _presets(where: str, key: str, v: Any, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    if v is None:
        return default
    if not isinstance(v, list) or not v or any(p not in allowed for p in v):
        raise ValueError(f"{where}: {key}: expected a list of presets from {', '.join(allowed)}, got {v!r}")
    return tuple(v)


def _entries(where: str, name: str, raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise ValueError(f"{where}: [[{name}]] must be an array of tables")
    return raw


def _known_keys(where: str, sec: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: {sec}: unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})")


def parse_papers(where: str, raw: Any, allowed_presets: tuple[str, ...]) -> list[PaperValue]:
    out = []
    for i, e in enumerate(_entries(where, "paper", raw)):
        sec = f"paper[{i}]"
        _known_keys(where, sec, e, _PAPER_KEYS)
        for req in ("source", "cell", "value"):
            if req not in e:
                raise ValueError(f"{where}: {sec}: {req!r} is required")
        out.append(
            PaperValue(
                source=_text(where, f"{sec}.source", e["source"]),
                setting=_text(where, f"{sec}.setting", e["setting"]) if "setting" in e else "",
                cell=_cell(where, f"{sec}.cell", e["cell"]),
                value=_number(where, f"{sec}.value", e["value"], 0.0, 100.0),
                spread=_number(where, f"{sec}.spread", e["spread"], 0.0, 100.0) if "spread" in e else None,
                presets=_presets(where, f"{sec}.presets", e.get("presets"), allowed_presets, DEFAULT_PAPER_PRESETS),
            )
        )
        if "split" not in out[-1].cell:  # a paper reports a number on one evaluation set
            raise ValueError(
                f'{where}: {sec}.cell: name the split the number is for (split = "test", '
                '"ood-sparse", ...): without one it would stand beside every split'
            )
    return out


def parse_claims(where: str, raw: Any, allowed_presets: tuple[str, ...]) -> list[Claim]:
    out = []
    for i, e in enumerate(_entries(where, "claim", raw)):
        sec = f"claim[{i}]"
        _known_keys(where, sec, e, _CLAIM_KEYS)
        ordering = "better" in e or "worse" in e
        threshold = "cell" in e
        if ordering == threshold:
            raise ValueError(
                f"{where}: {sec}: give either better and worse (an ordering) or cell with "
                "at_least / at_most (a threshold)"
            )
        if ordering and not ("better" in e and "worse" in e):
            raise ValueError(f"{where}: {sec}: an ordering needs both 'better' and 'worse'")
        if threshold and ("at_least" in e) == ("at_most" in e):
            raise ValueError(f"{where}: {sec}: a threshold claim needs exactly one of at_least, at_most")
        if ordering and ("at_least" in e or "at_most" in e):
            raise ValueError(f"{where}: {sec}: at_least / at_most go with 'cell', not with an ordering")
        out.append(
            Claim(
                text=_text(where, f"{sec}.text", e.get("text")),
                source=_text(where, f"{sec}.source", e.get("source")),
                better=_cell(where, f"{sec}.better", e["better"]) if ordering else None,
                worse=_cell(where, f"{sec}.worse", e["worse"]) if ordering else None,
                cell=_cell(where, f"{sec}.cell", e["cell"]) if threshold else None,
                at_least=_number(where, f"{sec}.at_least", e["at_least"], 0.0, 100.0) if "at_least" in e else None,
                at_most=_number(where, f"{sec}.at_most", e["at_most"], 0.0, 100.0) if "at_most" in e else None,
                presets=_presets(where, f"{sec}.presets", e.get("presets"), allowed_presets, DEFAULT_CLAIM_PRESETS),
                kind=_kind(where, f"{sec}.kind", e.get("kind", "paper")),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# cells as records name them
# --------------------------------------------------------------------------------------------


def canonical(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell as records name it: ``pe = "kerple+dape", dape_k = 3`` -> ``pe =
    "kerple+dape:k=3"`` (a record's pe names the encoding its model was built with)."""
    if "pe" not in cell:
        return cell
    cell = dict(cell)
    try:  # the record's own spelling: "nope+dape:k=1" is recorded as "nope+dape" (k = 1 is the default)
        dape_k = int(cell["dape_k"]) if "dape_k" in cell else None
        cell["pe"] = parse_pe(str(cell["pe"]), dape_k=dape_k).name
        cell.pop("dape_k", None)
    except ValueError:  # an encoding synthlab does not know, or a kernel given twice: matches no run
        cell["pe"] = str(cell["pe"])
    return cell
