"""`synthlab plot`: one picture of a run (or of an encoding) as a PNG, from synthlab.plot."""

from __future__ import annotations

import argparse
import os
import uuid
from pathlib import Path

from synthlab.core.errors import MAX_DISTANCE, MAX_INDEX, check_output_file, check_size, naming

KINDS = ("attention", "positions", "bias", "glitches")  # = synthlab.plot.KINDS (not imported: keeps --help fast)

# the options each picture takes (the rest are refused, not ignored)
_OPTIONS = {
    "attention": ("sample", "split", "layer", "head"),
    "positions": ("sample", "split", "layer", "head"),
    "bias": ("layer", "head", "max_distance"),
    "glitches": ("split", "n"),
}
_FLAGS = {
    "sample": "--sample",
    "split": "--split",
    "layer": "--layer",
    "head": "--head",
    "max_distance": "--max-distance",
    "n": "-n",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a run's attention maps, CoPE / BiPE positions, an encoding's bias, flip-flop glitches (PNG)",
        description="Draw one picture as a PNG. attention: the attention maps of one sample, a panel per layer "
        "and head, tokens on the axes, scored positions marked (green right, red wrong). positions: CoPE's "
        "gates g_ij and contextual positions p_ij, or BiPE's segment / intra-segment ids, of one sample. "
        "bias: an encoding's position signal vs distance (additive bias per head; rotary similarity); "
        "RUN_OR_PE may be a pe spec (a fresh model: learned biases at their initialisation). glitches "
        "(flip-flop): read error vs distance from the read to the last write. A sample is an index into "
        "the run's evaluation samples of the split. Layers and heads count from 0. Everything is checked "
        "before the file is written.",
        epilog="examples:\n"
        "  synthlab plot attention synthlab-runs/<run_id> --sample 3 --split ood-sparse --layer 1 -o attn.png\n"
        "  synthlab plot positions synthlab-runs/<cope run_id> --head 0 -o cope-positions.png\n"
        "  synthlab plot bias alibi --max-distance 32 -o alibi.png\n"
        "  synthlab plot glitches synthlab-runs/<flipflop run_id> --split ood-sparse -o glitches.png",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kind", choices=KINDS, metavar="KIND", help=f"the picture: {', '.join(KINDS)}")
    p.add_argument(
        "target", metavar="RUN_OR_PE", help="a run directory (OUT/<run_id>/); for bias also a pe spec, e.g. alibi"
    )
    p.add_argument(
        "--sample", type=int, metavar="N", help="attention, positions: sample index in the split (default: 0)"
    )
    p.add_argument(
        "--split", metavar="S", help="attention, positions: the split (default: test); glitches (default: ood-sparse)"
    )
    p.add_argument(
        "--layer", type=int, action="append", metavar="L", help="layer to draw, from 0 (repeatable; default: all)"
    )
    p.add_argument(
        "--head", type=int, action="append", metavar="H", help="head to draw, from 0 (repeatable; default: all)"
    )
    p.add_argument(
        "--max-distance",
        type=int,
        metavar="D",
        help=f"bias: largest distance drawn, at most {MAX_DISTANCE} (default: 64)",
    )
    p.add_argument("-n", type=int, metavar="N", help="glitches: samples of the split (default: the run's eval_samples)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png", help="PNG file to write")


def run(args: argparse.Namespace) -> int:
    # cheap checks first: options, then the output path
    allowed = _OPTIONS[args.kind]
    for opt, flag in _FLAGS.items():
        if getattr(args, opt) is not None and opt not in allowed:
            takes = ", ".join(_FLAGS[o] for o in allowed)
            raise ValueError(f"{flag} does not apply to `plot {args.kind}` (it takes {takes})")
    # sizes: a distance of 10^9 allocated exabytes after minutes of work
    if args.max_distance is not None:
        check_size(args.max_distance, "--max-distance", 1, MAX_DISTANCE)
    if args.sample is not None:
        check_size(args.sample, "--sample", 0, MAX_INDEX)
    if args.n is not None:
        from synthlab.generators.base import MAX_SIZE

        check_size(args.n, "-n", 1, MAX_SIZE)
    out = Path(args.output)
    if out.suffix.lower() != ".png":
        raise ValueError(f"-o {args.output!r}: expected a .png path")
    # a directory in the way, a missing directory: bad input (exit 2); a place that cannot be
    # written: OSError naming -o (exit 1)
    check_output_file(out, "-o", parent_must_exist=True)
    # the picture goes to a temporary file beside the output, renamed at the end: a failure
    # leaves nothing; creating it first is the write check (os.access says yes to root)
    tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.part")
    with naming(out, tmp):
        open(tmp, "xb").close()
    try:
        fig = _draw(args)
        with naming(out, tmp):
            fig.savefig(tmp, format="png", dpi=120)
            os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"wrote {out}")
    return 0


def _draw(args: argparse.Namespace):
    """The Figure; every input check (run, sample, split, layer, head, encoding) raises ValueError first."""
    from synthlab import plot

    if args.kind == "bias":
        d = 64 if args.max_distance is None else args.max_distance
        return plot.bias(args.target, max_distance=d, layers=args.layer, heads=args.head)
    if args.kind == "glitches":
        return plot.glitches(args.target, split=args.split or "ood-sparse", n=args.n)
    sample = 0 if args.sample is None else args.sample
    draw = plot.attention if args.kind == "attention" else plot.positions
    return draw(args.target, sample, layers=args.layer, heads=args.head, split=args.split or "test")
