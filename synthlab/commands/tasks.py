"""`synthlab tasks`: every task with its splits, parameters and defaults."""

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
    import generators

    infos = [cls().describe() for cls in generators.TASKS.values()]
    if args.json:
        print(json.dumps(infos, indent=1))
    elif args.names:
        print("\n".join(i["name"] for i in infos))
    else:
        rows = []
        for i in infos:
            params = " ".join(f"{k}={v}" for k, v in i["params"].items())
            rows.append([i["name"], i["family"], ",".join(i["splits"]), params])
        print(format_table(rows, ["task", "family", "splits", "parameters (defaults)"]))
    return 0
