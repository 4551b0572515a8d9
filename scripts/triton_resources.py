"""What the Triton kernels need on a GPU, measured without one: a Markdown table of shared
memory per block and registers / stack (spill) bytes per thread for every configuration
``_CoPEQKVTritonKernel`` (CoPE) and ``_DAPETritonKernel`` (DAPE, ``--dape``) launch on CUDA,
compiled ahead of time for sm_90 (H100) and sm_80 (A100) by
``scripts/triton_aot.py`` (the ptxas and cuobjdump of the triton wheel). For
choosing tile sizes (``cope_triton.block_sizes``, ``dape_triton.block_sizes``) before a GPU is
at hand: edit them, run this again. A failed compile is a row with the error; shared memory
over the architecture's per-block limit is marked "over".

    python scripts/triton_resources.py [--arch 90,80] [--d-h 16,32,64,128] [--npos 16,64]
                                       [--precision tf32]
    python scripts/triton_resources.py --dape [--heads 4] [--hidden 32] [--k 1,3,5] [--precision ieee]

A compile takes about a second on 2 cores the first time (then Triton's disk cache has it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from itertools import product
from pathlib import Path


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arch", type=_ints, default=[90, 80], help="compute capabilities, e.g. 90,80")
    parser.add_argument("--d-h", type=_ints, default=[16, 32, 64, 128], help="head sizes")
    parser.add_argument("--npos", type=_ints, default=[16, 64], help="CoPE's npos values")
    parser.add_argument(
        "--precision",
        default="tf32",
        help="PRECISION constexprs, comma separated: ieee (torch's default), tf32x3, tf32",
    )
    parser.add_argument("--dape", action="store_true", help="DAPE's kernels instead of CoPE's")
    parser.add_argument("--heads", type=_ints, default=[4], help="DAPE: head counts")
    parser.add_argument("--hidden", type=_ints, default=[32], help="DAPE: hidden widths")
    parser.add_argument("--k", type=_ints, default=[1, 3, 5], help="DAPE: kernel sizes")
    args = parser.parse_args(argv)
    if any(v < 1 for v in [*args.d_h, *args.npos, *args.heads, *args.hidden, *args.k]) or any(
        k % 2 == 0 for k in args.k
    ):
        parser.error("sizes must be positive, and DAPE's k odd")
    if importlib.util.find_spec("triton") is None:
        parser.error('triton is not installed (pip install -e ".[gpu]", Linux)')
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9 warns while unset; 1 is its default

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # triton_aot.py beside it, under runpy too
    import triton_aot as ta

    if bad := [p for p in args.precision.split(",") if p not in ta.PRECISIONS]:
        parser.error(f"--precision {','.join(bad)}: each one of {', '.join(ta.PRECISIONS)}")

    if args.dape:
        _dape_table(ta, args)
        return

    print(
        "| kernel | arch | d_h | npos | has_table | precision | tiles (M x N x D_PAD) | num_warps "
        "| shared bytes | registers | stack bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for arch, precision, d_h, npos, has_table in product(
        args.arch, args.precision.split(","), args.d_h, args.npos, (True, False)
    ):
        for cfg in ta.cope_launch_configs(d_h, npos, has_table, precision):
            row = (
                f"| {cfg.name} | sm_{arch} | {d_h} | {npos} | {has_table} | {precision} | {cfg.tiles()} "
                f"| {cfg.num_warps} |"
            )
            _print_row(ta, cfg, arch, row)


def _dape_table(ta, args) -> None:
    print(
        "| kernel | arch | H | D | k | bias | causal | out | precision | tile (M x N) | num_warps "
        "| shared bytes | registers | stack bytes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    variants = ((True, True, True), (False, True, True), (True, False, True), (True, True, False))  # bias, causal, P
    for arch, precision, H, D, k, (has_bias, causal, softmax) in product(
        args.arch, args.precision.split(","), args.heads, args.hidden, args.k, variants
    ):
        for cfg in ta.dape_launch_configs(H, D, k, has_bias, causal, softmax, precision):
            c = cfg.constexprs
            row = (
                f"| {cfg.name} | sm_{arch} | {H} | {D} | {k} | {has_bias} | {causal} | {'P' if softmax else 'A'} "
                f"| {precision} | {c['BLOCK_M']}x{c['BLOCK_N']} | {cfg.num_warps} |"
            )
            _print_row(ta, cfg, arch, row)


def _print_row(ta, cfg, arch, row) -> None:
    limit = ta.MAX_SHARED_OPTIN.get(arch)
    try:
        res = cfg.compile(arch)
    except Exception as e:  # noqa: BLE001 - a row per failure, the table goes on
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        print(f"{row} compile failed: {type(e).__name__}: {first} | | |", flush=True)
        return
    over = " (over)" if limit is not None and res.shared_bytes > limit else ""
    print(f"{row} {res.shared_bytes}{over} | {res.registers} | {res.stack_bytes} |", flush=True)


if __name__ == "__main__":
    main()
