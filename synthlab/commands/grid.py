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
        "on a fixed 0-100 % colour scale; failed runs are blank. CSV and Markdown go beside the PNG.",
        epilog="example: synthlab grid synthlab-runs/flipflop-quick/results.jsonl --kind ood -o ff-ood.png",
    )
    p.add_argument("results", metavar="RESULTS", help="results JSONL (from synthlab train or sweep)")
    p.add_argument("--kind", choices=("capacity", "ood"), default="ood", help="which grid (default: ood)")
    p.add_argument("--x", help="column field (split, length, d_model, n_heads, pe, task, seed, ...)")
    p.add_argument("--y", help="row field (default: pe)")
    p.add_argument("-o", "--output", help="PNG path (default: grid-<kind>.png beside RESULTS)")


def run(args: argparse.Namespace) -> int:
    from synthlab.grids import grid

    out = args.output or str(Path(args.results).with_name(f"grid-{args.kind}.png"))
    if not out.lower().endswith(".png"):
        raise ValueError(f"-o {out!r}: expected a .png path (CSV and Markdown go beside it)")
    if not Path(out).parent.exists():
        raise ValueError(f"-o {out!r}: directory {str(Path(out).parent)!r} does not exist")
    from synthlab import papers
    from synthlab.grids import sweep_spec_for
    from synthlab.records import read_results

    records = read_results(args.results)
    g = grid(records, kind=args.kind, x=args.x, y=args.y, out=out)
    print(g.markdown())
    wrote = [g.files["png"], g.files["csv"], g.files["md"]]
    spec = sweep_spec_for(records)
    verdicts = papers.verdicts(records, spec) if spec is not None else []
    if verdicts:  # the sweep file's claims, judged on these results
        print(papers.markdown(verdicts, spec.show))
        files = papers.save(verdicts, spec.show, Path(out).parent, stem=f"{Path(out).stem}-papers")
        wrote += [files["md"], files["csv"]]
    print(f"wrote {', '.join(wrote)}")
    return 0
