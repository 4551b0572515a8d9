"""`synthlab grid`: heatmaps of a results file (PNG) plus the same table as CSV and Markdown."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "grid",
        help="draw capacity / OOD grids of a results file (PNG + CSV + Markdown)",
        description="Capacity grid: encoding x d_model, cell = in-distribution headline metric. OOD grid: "
        "encoding x split (or test length; CHE: task x encoding). Cells show mean and spread over seeds "
        "on a fixed 0-100 % colour scale; a cell whose runs all failed is marked 'failed', one not run is blank. "
        "CSV and Markdown go beside the PNG. With per-length results (by_length), the OOD grid also gets "
        "a line plot of accuracy (or error) vs test length, a line per encoding, mean ± sd over seeds "
        "(<name>-by-length.png + .csv beside it); the claims of the task's sweep file and their verdicts go to "
        "<name>-papers.md + .csv. A results file holds numbers or null (NaN, text metrics and "
        "unknown tasks are refused).",
        epilog="example: synthlab grid synthlab-runs/flipflop-quick/results.jsonl --kind ood -o ff-ood.png",
    )
    p.add_argument(
        "results",
        metavar="RESULTS",
        help="results JSONL, or the OUT directory of synthlab train / sweep (its results.jsonl)",
    )
    p.add_argument("--kind", choices=("capacity", "ood"), default="ood", help="which grid (default: ood)")
    p.add_argument(
        "--x",
        help="column field (split, length, d_model, n_heads, pe, task, seed, ...; default: the "
        "ood_x / capacity_x of the sweep file that lists the records' task, else split / d_model)",
    )
    p.add_argument("--y", help="row field (default: that sweep file's ood_y / capacity_y, else pe)")
    p.add_argument("-o", "--output", help="PNG path (default: grid-<kind>.png beside RESULTS)")


def run(args: argparse.Namespace) -> int:
    from synthlab.analysis import claims
    from synthlab.analysis.frames import result_files
    from synthlab.analysis.grids import grid, load_results, sweep_spec_for
    from synthlab.core.errors import check_output_file

    # a directory is the OUT of synthlab train / sweep (what a sweep prints: "results in DIR")
    results = result_files([args.results])[0] if Path(args.results).is_dir() else Path(args.results)
    # everything is checked before the first file is written: the outputs (a directory in the
    # way is bad input, a read-only place an environment error), then the results
    out = args.output or str(results.with_name(f"grid-{args.kind}.png"))
    if not out.lower().endswith(".png"):
        raise ValueError(f"-o {out!r}: expected a .png path (CSV and Markdown go beside it)")
    png = Path(out)
    side = png.with_name(f"{png.stem}-by-length.png")  # the OOD grid's per-length line plot, if any
    for path in (png, png.with_suffix(".csv"), png.with_suffix(".md"), side, side.with_suffix(".csv")):
        check_output_file(path, "-o", parent_must_exist=True)
    records = load_results(results)
    spec = sweep_spec_for(records)
    if spec is not None:  # the claims table goes beside the grid
        for ext in ("md", "csv"):
            check_output_file(png.with_name(f"{png.stem}-papers.{ext}"), "-o")
    g = grid(records, kind=args.kind, x=args.x, y=args.y, out=out)
    print(g.markdown())
    wrote = list(g.files.values())
    verdicts = claims.verdicts(records, spec) if spec is not None else []
    if verdicts:  # the sweep file's claims, judged on these results
        print(claims.markdown(verdicts, spec.show))
        files = claims.save(verdicts, spec.show, png.parent, stem=f"{png.stem}-papers")
        wrote += [files["md"], files["csv"]]
    print(f"wrote {', '.join(wrote)}")
    return 0
