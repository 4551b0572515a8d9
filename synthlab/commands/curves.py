"""`synthlab curves`: learning curves of runs trained with train.eval_every (PNG + the CSV drawn)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "curves",
        help="draw learning curves (metric vs training step, a line per encoding, mean ± sd over seeds)",
        description="Draw the learning curves of the runs in RESULTS (results files or OUT directories): "
        "x = training step, y = the metric, a line per encoding (and per any other setting that differs "
        "between its runs), mean ± sd over seeds, a panel per split (and task). A run has curves when it was "
        "trained with --set train.eval_every=N. Writes curves-<metric>[-<split>].png and the .csv of the rows "
        "drawn into OUT/grids (the directory of the first RESULTS) or --out.",
        epilog="examples:\n"
        "  synthlab train flipflop --pe rope --preset smoke --set train.eval_every=10 --out runs/ff\n"
        "  synthlab curves runs/ff --metric token_acc --split ood-sparse",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "results",
        metavar="RESULTS",
        nargs="+",
        help="results JSONL file(s) or OUT directories (from synthlab train or sweep)",
    )
    p.add_argument(
        "--metric",
        metavar="M",
        help="the metric to draw (default: the task's headline metric, else the first recorded)",
    )
    p.add_argument("--split", metavar="S", help="draw this split only (default: every split with curves)")
    p.add_argument("--out", metavar="DIR", help="directory for the PNG and CSV (default: OUT/grids)")


def run(args: argparse.Namespace) -> int:
    from synthlab.analysis.curves_plot import draw_curves

    files = draw_curves(args.results, metric=args.metric, split=args.split, out=args.out)
    print(f"wrote {files['png']}, {files['csv']}")
    return 0
