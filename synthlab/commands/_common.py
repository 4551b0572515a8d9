"""Small helpers shared by the command modules."""

from __future__ import annotations

from typing import Any

from synthlab.core.errors import UsageError


def parse_assignments(items: list[str] | None, flag: str = "--set") -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}`` (values stay strings; the consumer types them)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"{flag} expects key=value, got {item!r}")
        out[key] = value.strip()
    return out


def format_table(rows: list[list[Any]], header: list[str]) -> str:
    """A plain aligned text table."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
