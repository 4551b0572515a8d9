"""`synthlab encodings`: every encoding, logit processor and index scheme, one line each, with its paper.

Encodings from installed plugins (entry-point group ``synthlab.encodings``, docs/plugins.md)
are listed with the distribution they came from: ``"plugin"`` in ``--json`` (null for a
built-in), and a ``plugin`` column in the table when there is one.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._common import format_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "encodings",
        help="list every positional encoding, logit processor and index scheme with its paper",
        description=(
            "List every positional encoding, logit processor and index scheme with its paper. "
            "Components combine with '+' and take parameters after ':' (e.g. kerple+dape:k=3, cope:npos=16)."
        ),
        epilog=(
            "examples: synthlab encodings;  synthlab encodings --json;  synthlab train flipflop --pe kerple+dape:k=3"
        ),
    )
    p.add_argument("--json", action="store_true", help="print one JSON array instead of a table")


def run(args: argparse.Namespace) -> int:
    from synthlab.model.registry import COMPONENTS, INDEX_SCHEMES

    rows: list[dict[str, Any]] = []
    for name, c in COMPONENTS.items():
        kind = {
            "none": "encoder",
            "absolute": "encoder",
            "rotary": "encoder",
            "bias": "encoder",
            "contextual": "encoder",
            "composite": "encoder",
            "processor": "processor",
        }[c.role]
        params = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in c.params.items())
        rows.append(
            {
                "name": name,
                "kind": kind,
                "role": c.role,
                "params": params,
                "causal_only": c.causal_only,
                "description": c.description,
                "paper": c.paper,
                "plugin": COMPONENTS.origin(name),
            }
        )
    for name, (desc, paper) in INDEX_SCHEMES.items():
        rows.append(
            {
                "name": name,
                "kind": "index",
                "role": "index",
                "params": "",
                "causal_only": False,
                "description": desc,
                "paper": paper,
                "plugin": None,
            }
        )
    plugins = any(r["plugin"] for r in rows)
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=1))
        return 0
    table = [
        [
            r["name"],
            r["kind"] if r["kind"] != "encoder" else r["role"],
            r["params"],
            r["description"] + (" [causal only]" if r["causal_only"] and "causal only" not in r["description"] else ""),
            r["paper"],
        ]
        + ([r["plugin"] or "-"] if plugins else [])
        for r in rows
    ]
    print(
        format_table(
            table, ["name", "kind", "parameters (defaults)", "description", "paper"] + (["plugin"] if plugins else [])
        )
    )
    return 0
