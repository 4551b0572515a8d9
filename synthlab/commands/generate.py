"""`synthlab generate`: write samples of a task as JSON lines (docs/interfaces.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from synthlab.errors import UsageError, check_output_file, check_seed, naming

from ._common import parse_assignments


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="write samples of a task as JSON lines",
        description="Write samples start..start+n-1 of one split of a task as JSON lines "
        "(stdout by default). The same seed gives the same bytes.",
        epilog="example: synthlab generate flipflop --split ood-sparse -n 1000 --seed 3 --set n_pairs=64 -o ff.jsonl",
    )
    p.add_argument("task", help="task name (see `synthlab tasks`)")
    p.add_argument("--split", default="train", help="split name (default: train)")
    p.add_argument("-n", type=int, default=10, help="number of samples (default: 10)")
    p.add_argument("--start", type=int, default=0, help="index of the first sample (default: 0)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default: 0)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="task parameter (repeatable)")
    p.add_argument("-o", "--output", help="output .jsonl file (default: stdout)")


def run(args: argparse.Namespace) -> int:
    import generators

    # validate everything before writing anything
    if args.n < 0:
        raise UsageError(f"-n must be >= 0, got {args.n}")
    if args.start < 0:
        raise UsageError(f"--start must be >= 0, got {args.start}")
    check_seed(args.seed, "--seed")
    task = generators.get_task(args.task, **parse_assignments(args.set))
    task.check_split(args.split)
    out_path = Path(args.output) if args.output else None
    if out_path is not None:
        check_output_file(out_path, "-o", parent_must_exist=True)

    # generate in chunks so a big -n streams; write to a temporary file, then rename, so a
    # failed run never leaves a truncated file behind
    chunk = 1024
    if out_path is None:
        stream = sys.stdout
        _write(task, args, stream, chunk)
        stream.flush()
    else:
        tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.part")
        try:
            with naming(out_path, tmp), open(tmp, "w", encoding="utf-8", newline="\n") as stream:
                _write(task, args, stream, chunk)
            with naming(out_path, tmp):
                os.replace(tmp, out_path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    return 0


def _write(task, args, stream, chunk: int) -> None:
    for first in range(args.start, args.start + args.n, chunk):
        count = min(chunk, args.start + args.n - first)
        for s in task.sample(args.split, count, seed=args.seed, start=first):
            stream.write(json.dumps(s.to_record(), ensure_ascii=False) + "\n")
