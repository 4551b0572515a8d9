"""`synthlab report`: RESULTS.md generated from the reference results committed as data."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write the results report (RESULTS.md) from committed results folders",
        description="Write a report of every results folder under ROOT (ROOT/<sweep>-<preset>/results.jsonl, "
        "with an optional run.json naming the command): where the runs ran, the sweep file's grids as "
        "tables and its claims judged (difference, 95 %% interval, test, p, n, verdict). Nothing in it is "
        "typed by hand; --check compares the file with what the results give and exits 1 when it is stale.",
        epilog="examples:\n  synthlab report results -o RESULTS.md\n  synthlab report results -o RESULTS.md --check",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("root", metavar="ROOT", nargs="?", default="results",
                   help="the folder of results folders (default: results)")
    p.add_argument("-o", "--output", default="RESULTS.md", help="the report's path (default: RESULTS.md)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the report is not what ROOT gives")


def run(args: argparse.Namespace) -> int:
    from synthlab.errors import check_output_file
    from synthlab.outputs import write_files
    from synthlab.report import report

    out = Path(args.output)
    if not args.check:
        check_output_file(out, "-o", parent_must_exist=True)
    text = report(args.root)
    if args.check:
        try:
            same = out.read_text(encoding="utf-8") == text
        except FileNotFoundError:
            same = False
        if not same:
            print(f"synthlab report: {out} is stale: run `synthlab report {args.root} -o {out}`", file=sys.stderr)
            return 1
        print(f"{out} is up to date")
        return 0
    write_files({"md": (out, lambda path: path.write_text(text, encoding="utf-8"))}, "results report")
    print(f"wrote {out}")
    return 0
