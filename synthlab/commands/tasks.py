"""`synthlab tasks`: every task with its splits, parameters and defaults.

Tasks from installed plugins (entry-point group ``synthlab.tasks``, docs/plugins.md) are listed
with the distribution they came from: ``"plugin"`` in ``--json`` (null for a built-in), and a
``plugin`` column in the table when there is one.
"""

from __future__ import annotations

import argparse
import json

from ._common import format_table


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tasks",
        help="list every task with its splits, parameters and defaults",
        description="List every task with its splits, parameters and defaults.",
        epilog="example: synthlab tasks --json | jq '.[0]'",
    )
    p.add_argument("--json", action="store_true", help="print one JSON array instead of a table")
    p.add_argument("--names", action="store_true", help="print only the task names, one per line")


def run(args: argparse.Namespace) -> int:
    from synthlab import generators

    infos = [{**cls().describe(), "plugin": generators.TASKS.origin(name)} for name, cls in generators.TASKS.items()]
    if args.json:
        print(json.dumps(infos, indent=1))
    elif args.names:
        print("\n".join(i["name"] for i in infos))
    else:
        plugins = any(i["plugin"] for i in infos)
        rows = []
        for i in infos:
            params = " ".join(f"{k}={v}" for k, v in i["params"].items())
            rows.append(
                [i["name"], i["family"], ",".join(i["splits"]), params] + ([i["plugin"] or "-"] if plugins else [])
            )
        print(
            format_table(rows, ["task", "family", "splits", "parameters (defaults)"] + (["plugin"] if plugins else []))
        )
    return 0
