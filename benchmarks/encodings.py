"""Forward+backward time per positional encoding, relative to NoPE (CPU benchmark, not a test).

    python benchmarks/encodings.py                 # quick + large sizes, x-transformers if installed
    python benchmarks/encodings.py --sizes quick --reps 5 --no-xt

Prints, per size, the fastest of ``--reps`` timings of one training step (forward + backward,
dropout 0) per encoding and its ratio to nope, with targets: rope, xpos, alibi, t5, kerple,
fire, relative, bipe-* <= 1.5x nope; cope <= 3x; dape-k: its extra time over the same encoding
without it <= 2x the time its convolution FLOPs take at the measured float32 matmul rate (the
FLOPs of the paper's formulation: two Conv2d over the whole T x T map, forward + backward; the
extra time includes materialising the logits, which the encoding without DAPE does not need).
With x-transformers installed (``pip install x-transformers --no-deps`` + einops, einx, loguru,
frozendict, torch-einops-utils) it also times x-transformers' own rope / alibi / t5 / cope at
identical sizes and prints synthlab's speed ratio (>= 1 means synthlab is at least as fast).
Timings are interleaved round-robin over the encodings so that machine load hits all alike, and
each row keeps its fastest repetition: interference only ever adds time, and the difference of
two medians (the dape rows' "extra") swung 1.4-2.7x for plain dape at the quick size between
back-to-back runs on a 2-core VM, where the minimum held within 1.86-1.98x.
DAPE runs synthlab's native CPU kernel (``synthlab/model/native``); ``(torch)`` rows time its
PyTorch fallback (the lower triangle folded into half the rows, convolutions as GEMMs) and
``(conv2d)`` rows DAPE as the paper writes it (Conv2d on the whole tril-zeroed T x T map), for
comparison. By default the glibc allocator is
tuned (``synthlab.model.tune_cpu_allocator``); ``--no-malloc-tuning`` measures without.
On a shared machine use ``--threads 1 --clock cpu``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from synthlab.model import build_model, native, tune_cpu_allocator
from synthlab.run import machine

SIZES = {
    "quick": dict(batch=32, length=128, d_model=64, n_layers=2, n_heads=4),
    "large": dict(batch=16, length=256, d_model=256, n_layers=4, n_heads=4),
}
ENCODINGS = [
    "nope",
    "sinusoidal",
    "learned",
    "rope",
    "xpos",
    "alibi",
    "t5",
    "kerple",
    "fire",
    "relative",
    "bipe-rope",
    "bipe-alibi",
    "cope",
    "cope+rope",
    "dape",
    "kerple+dape:k=3",
    "rope+dape:k=3",
    "nope+dape:k=3",
    "fire+dape:k=5",
    "kerple+dape:k=3 (torch)",
    "kerple+dape:k=3 (conv2d)",
]
TARGETS = {
    n: 1.5
    for n in [
        "sinusoidal",
        "learned",
        "rope",
        "xpos",
        "alibi",
        "t5",
        "kerple",
        "fire",
        "relative",
        "bipe-rope",
        "bipe-alibi",
    ]
}
TARGETS.update({"cope": 3.0, "cope+rope": 3.0})
VOCAB = 32


def matmul_rate(n: int = 1024, reps: int = 10, clock=time.perf_counter) -> float:
    """Measured float32 matmul FLOP/s on this machine (best of reps)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t = clock()
        a @ b
        best = min(best, clock() - t)
    return 2 * n**3 / best


def dape_conv_flops(size: dict, k: int, with_bias: bool, hidden: int = 32) -> float:
    """FLOPs of the DAPE convolutions in one training step (forward + 2x for backward)."""
    B, T, H, L = size["batch"], size["length"], size["n_heads"], size["n_layers"]
    c_in = 2 * H if with_bias else H
    fwd = 2 * B * T * T * k * (c_in * hidden + hidden * H)
    return 3 * fwd * L


def _step_fn(model, x, y):
    def step():
        model.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()

    return step


def synthlab_step(pe: str, size: dict, x, y):
    torch.manual_seed(0)
    plain_conv = pe.endswith(" (conv2d)")  # the paper's formulation: Conv2d on the whole tril-zeroed T x T map
    torch_path = pe.endswith(" (torch)")  # the PyTorch fallback of the native kernel
    m = build_model(
        pe=pe.split(" (")[0],
        vocab_size=VOCAB,
        d_model=size["d_model"],
        n_layers=size["n_layers"],
        n_heads=size["n_heads"],
        max_len=size["length"],
        separator_ids=(1,),
    ).train()
    for block in m.blocks if plain_conv else []:
        dape = block.attn.dape

        def masked(S, bias, future, _d=dape):  # DAPE.forward's contract: the masked logits
            return _d.forward_full(S, bias, future).masked_fill_(future, float("-inf"))

        dape.forward = masked
        dape.attention = lambda S, bias, future, _f=masked: torch.softmax(_f(S, bias, future), dim=-1)
    step = _step_fn(m, x, y)
    if not torch_path:
        return step

    def without_kernel():  # the dispatchers read SYNTHLAB_NATIVE at each call
        before = os.environ.get("SYNTHLAB_NATIVE")
        os.environ["SYNTHLAB_NATIVE"] = "0"
        try:
            step()
        finally:
            if before is None:
                del os.environ["SYNTHLAB_NATIVE"]
            else:
                os.environ["SYNTHLAB_NATIVE"] = before

    return without_kernel


def xtransformers_step(kind: str, size: dict, x, y):
    import logging

    from x_transformers import Decoder, TransformerWrapper

    logging.disable(logging.WARNING)

    d, H = size["d_model"], size["n_heads"]
    opts = {
        "rope": dict(rotary_pos_emb=True, rotary_emb_dim=d // H, attn_flash=True),
        "alibi": dict(alibi_pos_bias=True, attn_flash=True),
        "t5": dict(rel_pos_bias=True),  # x-transformers: flash is not compatible with its t5 bias
        "cope": dict(attn_use_cope=True, attn_cope_max_pos=64),
        "nope": dict(attn_flash=True),
    }[kind]
    torch.manual_seed(0)
    m = TransformerWrapper(
        num_tokens=VOCAB,
        max_seq_len=size["length"],
        use_abs_pos_emb=False,
        attn_layers=Decoder(dim=d, depth=size["n_layers"], heads=H, attn_dim_head=d // H, **opts),
    ).train()
    return _step_fn(m, x, y)


def time_round_robin(steps: dict, reps: int, warmup: int = 2, clock=time.perf_counter) -> dict[str, float]:
    for fn in steps.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(reps):
        for name, fn in steps.items():
            t = clock()
            fn()
            samples[name].append(clock() - t)
    return {k: min(v) for k, v in samples.items()}


def _without_dape(pe: str) -> str | None:
    """The encoding a dape row is compared with (``kerple+dape:k=3 (torch)`` -> ``kerple``), or None."""
    if "dape" not in pe:
        return None
    return pe.split("+dape")[0] if "+dape" in pe else "nope"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="example: python benchmarks/encodings.py --sizes quick --reps 5"
    )
    ap.add_argument("--sizes", default="quick,large", help="comma list of: " + ", ".join(SIZES))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: leave as is)")
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: perf_counter; cpu: this process's CPU time (robust on a shared machine with --threads 1)",
    )
    ap.add_argument("--encodings", default=",".join(ENCODINGS))
    ap.add_argument("--no-xt", action="store_true", help="skip the x-transformers comparison")
    ap.add_argument(
        "--no-malloc-tuning",
        action="store_true",
        help="leave glibc's allocator as is (default: synthlab.model.tune_cpu_allocator())",
    )
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tuned = False if args.no_malloc_tuning else tune_cpu_allocator()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rate = matmul_rate(clock=clock)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock, "
        f"float32 matmul rate {rate / 1e9:.1f} GFLOP/s (1024^2 sgemm, best of 10), allocator tuning "
        f"{'on' if tuned else 'off'}"
    )
    print(machine.vector_paths())
    print(native.describe())
    encs = [e.strip() for e in args.encodings.split(",") if e.strip()]
    if "nope" not in encs:
        encs.insert(0, "nope")
    for pe in list(encs):  # a dape row is measured against the same encoding without DAPE
        plain = _without_dape(pe)
        if plain is not None and plain not in encs:
            encs.insert(encs.index(pe), plain)
    xt_ok = False
    if not args.no_xt:
        try:
            import x_transformers  # noqa: F401

            xt_ok = True
        except ImportError as e:
            print(f"(x-transformers not importable: {e}; skipping the comparison)")
    for size_name in [s.strip() for s in args.sizes.split(",")]:
        if size_name not in SIZES:
            raise SystemExit(f"--sizes: unknown size {size_name!r}; allowed: {', '.join(SIZES)}")
        size = SIZES[size_name]
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, VOCAB, (size["batch"], size["length"]), generator=g)
        y = torch.randint(0, VOCAB, (size["batch"], size["length"]), generator=g)
        steps = {pe: synthlab_step(pe, size, x, y) for pe in encs}
        xt_kinds = [k for k in ("nope", "rope", "alibi", "t5", "cope") if xt_ok and k in encs]
        for kind in xt_kinds:
            steps[f"xt:{kind}"] = xtransformers_step(kind, size, x, y)
        times = time_round_robin(steps, args.reps, clock=clock)
        base = times["nope"]
        print(f"\n== {size_name}: " + ", ".join(f"{k}={v}" for k, v in size.items()) + " ==")
        print(f"{'encoding':26s} {'ms/step':>9s} {'x nope':>7s}  target / check")
        for pe in encs:
            t = times[pe]
            note = ""
            if pe in TARGETS:
                note = f"<= {TARGETS[pe]:.1f}x  {'ok' if t / base <= TARGETS[pe] else 'MISSED'}"
            plain = _without_dape(pe)
            if plain is not None:
                k = int(pe.split("k=")[1].split()[0]) if "k=" in pe else 1
                with_bias = plain not in ("nope", "rope")
                flops = dape_conv_flops(size, k, with_bias)
                ideal = flops / rate
                extra = t - times[plain]
                verdict = (
                    "comparison, no target"
                    if "(" in pe
                    else f"target <= 2x: {'ok' if extra / ideal <= 2 else 'MISSED'}"
                )
                note = (
                    f"extra {extra * 1e3:.1f} ms vs {plain}; conv FLOPs at matmul rate {ideal * 1e3:.1f} ms "
                    f"-> {extra / ideal:.2f}x ({verdict})"
                )
            print(f"{pe:26s} {t * 1e3:9.1f} {t / base:7.2f}  {note}")
        if xt_kinds:
            print(f"\n{'x-transformers':18s} {'ms/step':>9s} {'synthlab speed-up':>18s}")
            for kind in xt_kinds:
                theirs = times[f"xt:{kind}"]
                ratio = theirs / times[kind]
                print(f"{kind:18s} {theirs * 1e3:9.1f} {ratio:18.2f}  {'ok' if ratio >= 1 else 'slower'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
