"""`synthlab generate`: write samples of a task as JSON lines or Parquet (docs/interfaces.md, docs/results.md).

Parquet holds the same content as the JSON lines in a flat schema that
``datasets.load_dataset("parquet", data_files=...)`` reads: one row per sample, the token
strings and targets as lists of strings, ids and scored positions as lists of int64, and
``params`` (the task parameters, a mapping in JSON lines) as its JSON text, so that every
task has the same columns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from synthlab.core.errors import MAX_INDEX, MAX_SAMPLES, UsageError, check_output_file, check_seed, check_size, naming
from synthlab.core.outputs import pick_format, require_pyarrow

from ._common import parse_assignments

FORMATS = ("jsonl", "parquet")
CHUNK = 1024  # samples generated (and, for Parquet, written as one row group) at a time


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="write samples of a task as JSON lines or Parquet",
        description="Write samples start..start+n-1 of one split of a task as JSON lines "
        "(stdout by default) or as a Parquet file (-o; the same fields, params as JSON text; needs "
        "pip install 'synthlab-pe[parquet]'). The same seed gives the same bytes (JSON lines) and the same table "
        "(Parquet).",
        epilog="examples:\n"
        "  synthlab generate flipflop --split ood-sparse -n 1000 --seed 3 --set n_pairs=64 -o ff.jsonl\n"
        "  synthlab generate flipflop -n 10000 -o ff-train.parquet",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("task", help="task name (see `synthlab tasks`)")
    p.add_argument("--split", default="train", help="split name (default: train)")
    p.add_argument("-n", type=int, default=10, help="number of samples, at most 10^9 (default: 10)")
    p.add_argument("--start", type=int, default=0, help="index of the first sample, below 2^63 (default: 0)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default: 0)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="task parameter (repeatable)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="jsonl or parquet (default: parquet for an -o name ending in .parquet, else jsonl)",
    )
    p.add_argument("-o", "--output", help="output file (default: stdout; parquet needs -o)")


def run(args: argparse.Namespace) -> int:
    from synthlab import generators

    # validate everything before writing anything
    check_size(args.n, "-n", 0, MAX_SAMPLES)
    check_size(args.start, "--start", 0, MAX_INDEX - args.n)  # the last index fits Parquet's int64
    check_seed(args.seed, "--seed")
    task = generators.get_task(args.task, **parse_assignments(args.set))
    task.check_split(args.split)
    out_path = Path(args.output) if args.output else None
    fmt = pick_format(args.format, out_path, FORMATS)
    if fmt == "parquet":
        require_pyarrow("--format parquet")
        if out_path is None:
            raise UsageError("--format parquet writes a file: give -o FILE.parquet")
    if out_path is not None:
        check_output_file(out_path, "-o", parent_must_exist=True)

    # generate in chunks so a big -n streams; write to a temporary file, then rename, so a
    # failed run never leaves a truncated file behind
    if out_path is None:
        stream = sys.stdout
        _write(task, args, stream)
        stream.flush()
    else:
        tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.part")
        try:
            with naming(out_path, tmp):
                if fmt == "parquet":
                    _write_parquet(task, args, tmp)
                else:
                    with open(tmp, "w", encoding="utf-8", newline="\n") as stream:
                        _write(task, args, stream)
            with naming(out_path, tmp):
                os.replace(tmp, out_path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    return 0


def _chunks(task, args):
    """The samples' records, CHUNK at a time (a big -n streams)."""
    for first in range(args.start, args.start + args.n, CHUNK):
        count = min(CHUNK, args.start + args.n - first)
        yield [s.to_record() for s in task.sample(args.split, count, seed=args.seed, start=first)]


def _write(task, args, stream) -> None:
    for records in _chunks(task, args):
        for r in records:
            stream.write(json.dumps(r, ensure_ascii=False) + "\n")


def _write_parquet(task, args, path: Path) -> None:
    """The samples as one Parquet file, a row group per chunk, in the flat schema of the
    module docstring (the schema is fixed, so an empty file has it too)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    strings, ints = pa.list_(pa.string()), pa.list_(pa.int64())
    schema = pa.schema(
        [
            ("task", pa.string()),
            ("split", pa.string()),
            ("seed", pa.int64()),
            ("index", pa.int64()),
            ("params", pa.string()),
            ("tokens", strings),
            ("ids", ints),
            ("scored", ints),
            ("targets", strings),
        ]
    )
    # a Python file, not pyarrow's own: its errors (no such directory, a full disk) are OSErrors
    # with an errno that `naming` turns into one line about -o, not pyarrow's text about the .part file
    with open(path, "wb") as f, pq.ParquetWriter(f, schema) as writer:
        for records in _chunks(task, args):
            rows = [{**r, "params": json.dumps(r["params"], ensure_ascii=False)} for r in records]
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
