"""One attention layer's position work, forward + backward, by each path: the fused kernels
against the PyTorch path and against plain causal attention (SDPA: the floor no position term
can beat), and CoPE's Triton kernels at other tile sizes.

    python benchmarks/attention_kernels.py                       # CPU: the C++ kernels, quick size
    python benchmarks/attention_kernels.py --device cuda --size paper
    python benchmarks/attention_kernels.py --device cuda --size paper --precision high   # TF32 matmuls

Rows (milliseconds per forward + backward of the layer's attention, median over rounds; each
round runs every path once, in turn, so a slow patch of the machine hits them alike):

- ``sdpa``: softmax(q k^T / sqrt(d)) v with the causal mask, PyTorch's fused attention;
- ``cope pytorch``: CoPE's PyTorch path, the kernels switched off (S, the gates' cumulative sums, the interpolated table
  term, the masked softmax, @ v: several (B, H, T, T) tensors);
- ``cope term fused`` (CPU): the C++ kernel of CoPE's additive term alone (``CoPE.forward``: what a
  layer with another position term or ``sep_keys`` runs), then the masked softmax and @ v;
- ``cope fused``: ``CoPE.attend``: the C++ kernel on CPU, the Triton kernels on CUDA; on CUDA
  also ``cope triton <tiles>``: the Triton kernels at other tile sizes than ``block_sizes``
  (``--cope-tiles``), to choose them by a timing (they were chosen by the compiler's register
  report, ``scripts/triton_resources.py``, without a GPU);
- ``dape:k pytorch`` / ``dape:k fused``: DAPE (kerple-like bias, hidden 32) after S = q k^T:
  ``DAPE.attention`` with the fused kernel off / on (C++ on CPU; Triton on CUDA, switched on
  here with SYNTHLAB_DAPE_TRITON=1), then @ v.

The last column is each row over ``sdpa``; the fused rows also over their PyTorch path. The
matmuls' precision follows ``--precision`` (torch.set_float32_matmul_precision: "highest" is
torch's default and synthlab's; the Triton kernels follow it too). The target at the paper
size on a GPU is a whole step of CoPE and of DAPE within 1.5x RoPE's (``training.py``); this
script says which kernel is behind a miss.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from synthlab.model.encoders.contextual import CoPE
from synthlab.model.native import cope as native_cope
from synthlab.model.processors import DAPE

SIZES = {  # B, H, T, d_h: the flip-flop quick and paper sizes (one layer), and a tiny one (call overheads)
    "quick": (32, 4, 128, 16),
    "paper": (16, 4, 512, 64),
    "host": (4, 2, 16, 8),
}
# CoPE Triton tile sets to time beside block_sizes (CUDA): the first tiles (before the register
# report) and two neighbours of today's
COPE_TILES = {
    "first": dict(
        fwd_m=64,
        block_n=32,
        bwd_query_m=16,
        bwd_key_m=32,
        fwd_warps=4,
        bwd_query_warps=8,
        bwd_key_warps=4,
        bwd_stages=3,
        npos_whole=512,
        npos_chunk=16,
    ),  # 3: Triton's default num_stages
    "fwd64w8": dict(
        fwd_m=64,
        block_n=32,
        bwd_query_m=16,
        bwd_key_m=32,
        fwd_warps=8,
        bwd_query_warps=8,
        bwd_key_warps=8,
        bwd_stages=1,
        npos_whole=64,
        npos_chunk=16,
    ),
    "keys64": dict(
        fwd_m=32,
        block_n=64,
        bwd_query_m=16,
        bwd_key_m=32,
        fwd_warps=8,
        bwd_query_warps=8,
        bwd_key_warps=8,
        bwd_stages=1,
        npos_whole=64,
        npos_chunk=16,
    ),
}


@contextmanager
def switched(name: str, value: str):
    """The environment variable ``name`` set to ``value`` inside, as it was after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_rounds(paths: dict, rounds: int, device: torch.device, warmup: int = 3) -> dict[str, float]:
    """Median ms of each path's call over ``rounds`` rounds (every path once per round)."""
    for fn in paths.values():
        for _ in range(warmup):  # first calls compile the Triton kernels / build the C++ ones
            fn()
    times = {name: [] for name in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def leaves(B, H, T, d_h, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [(torch.randn(B, H, T, d_h, generator=g) * s).to(device).requires_grad_() for s in (1.0, 1.0, 1.0)]


def backward_of(fn, inputs):
    """A callable: fn(*inputs) forward, then backward of its sum (the inputs' .grad cleared)."""

    def run():
        for t in inputs:
            t.grad = None
        fn(*inputs).sum().backward()

    return run


def cope_paths(B, H, T, d_h, device) -> dict:
    torch.manual_seed(0)
    cope = CoPE(d_model=H * d_h, n_heads=H).to(device)
    with torch.no_grad():
        cope.pos_emb.normal_()
    scale = 1 / math.sqrt(d_h)
    future = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
    q, k, v = leaves(B, H, T, d_h, device)

    def term(q, k, v):  # CoPE.forward's additive term: the native kernel unless switched off
        S = (q * scale) @ k.transpose(-2, -1)
        A = (S + cope(q, S, None, future)).masked_fill(future, float("-inf"))
        return torch.softmax(A, dim=-1) @ v

    def pytorch(q, k, v):
        with switched("SYNTHLAB_NATIVE", "0"):  # read at each call; the backward needs no kernel
            return term(q, k, v)

    def fused(q, k, v):
        assert native_cope.native_applies(q, k, v) or native_cope.triton_applies(q, cope.npos, True), (
            "CoPE.attend takes no kernel here"
        )
        return cope.attend(q, q, k, v, None, future, scale)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    paths = {
        "sdpa": backward_of(sdpa, [q, k, v]),
        "cope pytorch": backward_of(pytorch, [q, k, v]),
        "cope fused": backward_of(fused, [q, k, v]),
    }
    if device.type == "cpu":  # the term kernel, where the fused attention does not apply (cope+rope, sep_keys)
        paths["cope term fused"] = backward_of(term, [q, k, v])
    if device.type == "cuda":
        from synthlab.model.native import cope_triton as ct

        for name, tiles in COPE_TILES.items():

            def with_tiles(q, k, v, tiles=tiles):
                chosen = ct.block_sizes
                ct.block_sizes = lambda device, d_pad, npos_pad: tiles
                try:
                    return fused(q, k, v)
                finally:
                    ct.block_sizes = chosen

            # the backward reads the tiles saved by the forward (ctx.tiles): one set per call
            paths[f"cope triton {name}"] = backward_of(with_tiles, [q, k, v])
    return paths


def dape_paths(B, H, T, d_h, device, k: int) -> dict:
    torch.manual_seed(1)
    dape = DAPE(H, with_bias=True, hidden=32, k=k, causal=True).to(device)
    bias = (
        -torch.arange(T, device=device).float().view(1, 1, T, 1)
        + torch.arange(T, device=device).float().view(1, 1, 1, T)
    ).clamp(max=0).expand(1, H, T, T) * 0.1
    future = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
    scale = 1 / math.sqrt(d_h)
    q, kk, v = leaves(B, H, T, d_h, device, seed=2)
    switch = "SYNTHLAB_DAPE_TRITON" if device.type == "cuda" else "SYNTHLAB_NATIVE"  # read at each call

    def attend(on: bool):
        def run(q, kk, v):
            with switched(switch, "1" if on else "0"):  # the backward needs no switch: the Function is chosen
                S = (q * scale) @ kk.transpose(-2, -1)
                return dape.attention(S, bias, future) @ v

        return run

    return {
        f"dape:k={k} pytorch": backward_of(attend(False), [q, kk, v]),
        f"dape:k={k} fused": backward_of(attend(True), [q, kk, v]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--size", choices=tuple(SIZES), default="quick")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument(
        "--precision",
        choices=("highest", "high", "medium"),
        default="highest",
        help="torch.set_float32_matmul_precision (the Triton kernels follow it)",
    )
    ap.add_argument("--k", default="1,3", help="DAPE kernel sizes")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible")
    device = torch.device(args.device)
    torch.set_float32_matmul_precision(args.precision)
    B, H, T, d_h = SIZES[args.size]
    if device.type == "cpu":
        from synthlab.model import native
        from synthlab.run import machine

        print(f"# {machine.vector_paths()}; {torch.get_num_threads()} threads; {native.describe()}")
    print(
        f"# one layer's attention, forward + backward: B {B}, H {H}, T {T}, d_h {d_h}; {args.device}"
        f"{' ' + torch.cuda.get_device_name() if device.type == 'cuda' else ''}, float32 matmul precision "
        f"{args.precision}; median of {args.rounds} rounds"
    )
    paths = cope_paths(B, H, T, d_h, device)
    for k in (int(x) for x in args.k.split(",") if x.strip()):
        paths.update(dape_paths(B, H, T, d_h, device, k))
    ms = time_rounds(paths, args.rounds, device)
    print("| path | ms | / sdpa | fused / pytorch |")
    print("|---|---|---|---|")
    for name, t in ms.items():
        encoding = name.split(" ")[0]  # "cope", "dape:k=3"
        fast = name.endswith(" fused") or name.startswith("cope triton")
        over = f"{t / ms[encoding + ' pytorch']:.2f}x" if fast else ""
        print(f"| {name} | {t:.2f} | {t / ms['sdpa']:.1f}x | {over} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
