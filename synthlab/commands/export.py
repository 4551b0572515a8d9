"""`synthlab export`: the results as one flat table (``synthlab.results``) in Parquet or CSV."""

from __future__ import annotations

import argparse
from pathlib import Path

FORMATS = ("csv", "parquet")
EXTENSIONS = {"csv": ".csv", "parquet": ".parquet"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write results as one flat table (Parquet or CSV), one row per run x split",
        description="Write the result records of RESULTS (results files or the --out directories of "
        "synthlab train / sweep; several are joined, each sweep cell counted once: its latest record) as one "
        "table, one row per run x split: the run's settings, status, the split's metrics, then task.*, pe.*, "
        "train.*, set.* columns (docs/results.md lists every column). Parquet needs pyarrow "
        "(pip install 'synthlab-pe[parquet]'). Everything is checked before the file is written; it is written "
        "to a temporary file and renamed.",
        epilog="examples:\n"
        "  synthlab export synthlab-runs/flipflop-quick --format parquet\n"
        "  synthlab export m1/results.jsonl m2/results.jsonl --format csv -o all.csv",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "results",
        metavar="RESULTS",
        nargs="+",
        help="results JSONL file(s) or OUT directories (from synthlab train or sweep)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default=None, help="csv or parquet (default: the one -o's suffix names, else csv)"
    )
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="file to write (default: beside the first RESULTS: results.csv / results.parquet)",
    )


def run(args: argparse.Namespace) -> int:
    from synthlab.analysis.frames import frame, load_records, result_files, run_dirs
    from synthlab.core.errors import check_output_file
    from synthlab.core.outputs import csv_writer, pick_format, require_pyarrow, write_files

    fmt = pick_format(args.format, args.output, FORMATS)
    if fmt == "parquet":
        require_pyarrow("--format parquet")
    files = result_files(args.results)
    out = Path(args.output) if args.output else files[0].with_suffix(EXTENSIONS[fmt])
    check_output_file(out, "-o", parent_must_exist=True)
    records = load_records(files)
    df = frame(records, run_dirs(files, records))
    if fmt == "parquet":
        write = lambda path: df.to_parquet(path, index=False, engine="pyarrow")  # noqa: E731
    else:
        write = csv_writer(df)
    write_files({"out": (out, write)}, "-o")
    print(f"wrote {out} ({len(df)} rows: {len(records)} runs x their splits, {len(df.columns)} columns)")
    return 0
