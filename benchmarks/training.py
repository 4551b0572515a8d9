"""Training-path speed: synthlab (LightningModule + DataModule + Trainer) vs a plain PyTorch loop.

1. Overhead: the same model, data (synthlab's addressable batches), AdamW, schedule and
   gradient clipping, trained by a hand-written loop and by ``synthlab.run.fitting.fit``;
   steady-state time per step (after warm-up steps) for both. Target: synthlab <= 1.15x plain.
2. Model FLOP utilisation at batch 16, length 256, d 256, 4 layers for nope / rope / alibi:
   6 * N_matmul + 12 * L * T * d FLOPs per token (forward + backward; Kaplan / PaLM
   accounting, causal attention counted in full) per measured step, over the measured dense
   float32 matmul rate of this machine (torch.mm of the model's own shapes and of 2048^2).
   Target >= 45%.

    python benchmarks/training.py            # quick-size overhead + MFU table
    python benchmarks/training.py --steps 60 # fewer steps (faster, noisier)
    python benchmarks/training.py --threads 1 --clock cpu   # on a shared / loaded machine
    python benchmarks/training.py --device cuda --size paper --encodings rope,alibi,cope,kerple+dape:k=3
    python benchmarks/training.py --device cuda --precision bf16-mixed --compile   # both loops alike
    python benchmarks/training.py --device cuda --compile --compile-mode reduce-overhead   # CUDA graphs

``--device cuda`` times both loops on the GPU, each as the mean step between two synchronized
clock readings (after the warm-up, after the last step), so the host may queue a step while the
GPU runs the last one, as in a real run. There the plain loop builds its batches in two
DataLoader workers, pinned, checks the loss for a NaN every 16 steps and uses fused AdamW, as
synthlab does on a GPU (no MFU part on a GPU). The targets there: synthlab <= 1.2x the
plain loop, CoPE and DAPE <= 1.5x RoPE. ``--size paper`` is the CoPE flip-flop paper size (T 512,
d 256, 4 layers, 4 heads, batch 16). The last column compares each encoding's synthlab step with
RoPE's.

``--size host`` (T 16, d 16, 1 layer, batch 4) leaves next to no arithmetic: what remains is
each loop's host work a step (Python, Lightning, data), what a small model's GPU step costs
while the device waits for its launches.

``--precision bf16-mixed`` trains both loops under bfloat16 autocast (``train.precision``) and
``--compile`` both through ``torch.compile`` (``train.compile``; the warm-up steps it skips
include the compilation).

``--clock cpu`` times with process CPU time instead of wall time, so other processes on a
shared machine distort the numbers less (use it with ``--threads 1``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import lightning as L
import torch
import torch.nn.functional as F

from synthlab import generators
from synthlab.core.config import COMPILE_MODES, apply_overrides
from synthlab.model import build_model
from synthlab.plan.presets import build_config
from synthlab.run.data import DataModule, TrainBatches, TrainStream
from synthlab.run.fitting import fit, quiet_lightning
from synthlab.run.modules import lr_factor, make_module

CLOCK = time.perf_counter  # or time.process_time (--clock cpu)
DEVICE = torch.device("cpu")  # --device
# --size: the flip-flop settings of the quick preset (as it is) and of CoPE's paper size
SIZES = {
    "quick": ({}, "flipflop: T 128, d 64, 2 layers, 4 heads, batch 32"),
    "paper": (
        {"n_pairs": 256, "d_model": 256, "n_layers": 4, "n_heads": 4, "batch_size": 16, "warmup": 0},
        "flipflop: T 512, d 256, 4 layers, 4 heads, batch 16",
    ),
    # next to no arithmetic: the per-step host work of each loop (Python, Lightning, data), which
    # on a GPU is what a small model's step costs while the device waits for launches
    "host": (
        {"n_pairs": 8, "d_model": 16, "n_layers": 1, "n_heads": 2, "batch_size": 4, "warmup": 0},
        "flipflop: T 16, d 16, 1 layer, 2 heads, batch 4",
    ),
}


SKIP = 20  # warm-up steps left out of a measurement (set by main from --steps)


def now(step: int, steps: int) -> float:
    """The clock at the end of ``step`` (both loops read it the same way). On a GPU only at the
    end of the warm-up and of the last step, after a synchronize: a synchronize every step would
    stop the host from queueing the next step while the GPU runs this one, and hide what the
    asynchronous path gains (pinned batches, no host reads); in between the reading is unused."""
    if DEVICE.type == "cuda" and step in (SKIP, steps - 1):
        torch.cuda.synchronize(DEVICE)
    return CLOCK()


class StepClock(L.Callback):
    """The clock at the end of every training step."""

    def __init__(self, steps: int) -> None:
        self.t: list[float] = []
        self.steps = steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.t.append(now(len(self.t), self.steps))


def steady(times: list[float], skip: int) -> float:
    """Seconds per step after ``skip`` warm-up steps: on CPU the median step; on a GPU the mean
    over the span from the warm-up's end to the last step (the two synchronized readings)."""
    if DEVICE.type == "cuda":
        return (times[-1] - times[skip]) / (len(times) - 1 - skip)
    d = [b - a for a, b in zip(times[skip:], times[skip + 1 :])]
    return statistics.median(d)


def make(task_name: str, pe: str, overrides: dict) -> tuple:
    cfg = build_config(task_name, pe, "quick")
    cfg = apply_overrides(cfg, overrides, tuple(generators.TASKS[task_name].PARAMS))
    task = generators.get_task(task_name, **cfg.task_params)
    torch.manual_seed(0)
    stream = TrainStream(task, 0, cfg.train.batch_size)
    T = stream.batch(0).ids.shape[1]
    model = build_model(
        pe=pe,
        vocab_size=len(task.vocab) + 1,
        d_model=cfg.model.d_model,
        n_layers=cfg.model.n_layers,
        n_heads=cfg.model.n_heads,
        max_len=T,
        dropout=cfg.model.dropout,
    )
    return cfg, task, model


def plain_loop(task_name: str, pe: str, overrides: dict, steps: int) -> list[float]:
    """The reference: a hand-written loop with the same pieces as synthlab's path."""
    cfg, task, model = make(task_name, pe, overrides)
    tc = cfg.train
    stream = TrainStream(task, 0, tc.batch_size)
    model.to(DEVICE).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": tc.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=tc.lr,
        betas=(0.9, 0.999),
        eps=1e-8,
        fused=DEVICE.type == "cuda" or None,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, tc.steps, tc.warmup, tc.schedule))
    net = torch.compile(model, mode=tc.compile_mode) if tc.compile else model
    bf16 = tc.precision == "bf16-mixed"
    times = []
    # on a GPU the usual loader: two worker processes building batches ahead, pinned (as synthlab's)
    cuda = DEVICE.type == "cuda"
    workers = 2 * int(cuda) if tc.data_workers is None else tc.data_workers
    loader = torch.utils.data.DataLoader(
        TrainBatches(stream, steps),
        batch_size=None,
        num_workers=workers,
        pin_memory=cuda,
        prefetch_factor=4 if workers else None,
    )
    for s, (ids, targets) in enumerate(loader):
        ids, targets = ids.to(DEVICE, non_blocking=True), targets.to(DEVICE, non_blocking=True)
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=bf16):
            logits = net(ids)
        n = (targets != -100).sum().clamp_min(1)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum") / n
        if (DEVICE.type == "cpu" or s % 16 == 0) and not torch.isfinite(loss):  # as synthlab checks
            raise RuntimeError("diverged")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        sched.step()
        times.append(now(s, steps))
    return times


def synthlab_path(task_name: str, pe: str, overrides: dict, steps: int) -> list[float]:
    cfg, task, model = make(task_name, pe, {**overrides, "steps": steps})
    tc = cfg.train
    dm = DataModule(task, tc.seed, tc.batch_size, tc.steps, workers=tc.data_workers)
    module = make_module(model, cfg, log_every=max(1, tc.steps // 200))
    clock = StepClock(steps)
    L_trainer_fit_with_clock(module, dm, cfg, clock)
    return clock.t


def L_trainer_fit_with_clock(module, dm, cfg, clock) -> None:
    """synthlab's fit (the same Trainer settings as a run; no logger) with a timing callback."""
    fit(module, dm, cfg, callbacks=[clock])


def matmul_rate(shapes: list[tuple[int, int, int]], reps: int = 20) -> float:
    """Best float32 FLOP/s of torch.mm over ``shapes`` (m, k, n)."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        t0 = CLOCK()
        for _ in range(reps):
            a @ b
        dt = (CLOCK() - t0) / reps
        best = max(best, 2 * m * k * n / dt)
    return best


def mfu_table(steps: int) -> None:
    B, T, d, layers, heads = 16, 256, 256, 4, 4
    tokens = B * T
    peak_big = matmul_rate([(2048, 2048, 2048)], reps=5)
    peak_model = matmul_rate([(tokens, d, 3 * d), (tokens, d, 4 * d), (tokens, 4 * d, d), (tokens, d, d)])
    peak = max(peak_big, peak_model)
    print(
        f"\nfloat32 matmul rate: {peak_big / 1e9:.1f} GFLOP/s (2048^2), {peak_model / 1e9:.1f} GFLOP/s (model shapes); "
        f"reference = {peak / 1e9:.1f} GFLOP/s"
    )
    print(f"{'pe':6s} {'params':>9s} {'ms/step':>9s} {'GFLOP/step':>11s} {'GFLOP/s':>8s} {'MFU':>6s}")
    for pe in ("nope", "rope", "alibi"):
        over = {"n_pairs": T // 2, "d_model": d, "n_layers": layers, "n_heads": heads, "batch_size": B, "warmup": 0}
        times = synthlab_path("flipflop", pe, over, steps)
        dt = steady(times, skip=min(10, steps // 3))
        _, task, model = make("flipflop", pe, over)
        n_matmul = sum(
            p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "wpe" not in n
        )
        flops = tokens * (6 * n_matmul + 12 * layers * T * d)
        print(
            f"{pe:6s} {n_matmul:9d} {dt * 1e3:9.1f} {flops / 1e9:11.2f} {flops / dt / 1e9:8.1f} "
            f"{100 * flops / dt / peak:5.1f}%"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=150, help="steps per measurement (overhead part)")
    ap.add_argument("--mfu-steps", type=int, default=30, help="steps per encoding (MFU part)")
    ap.add_argument("--skip-mfu", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall time or process CPU time")
    ap.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where both loops train (synthlab's Trainer picks the GPU when one is visible: for a CPU "
        "measurement on a GPU machine set CUDA_VISIBLE_DEVICES=)",
    )
    ap.add_argument("--size", choices=tuple(SIZES), default="quick")
    ap.add_argument("--encodings", default="rope,nope,alibi", help="comma list (the first is the ratio's reference)")
    ap.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32", help="train.precision, both loops")
    ap.add_argument("--compile", action="store_true", help="train.compile: torch.compile in both loops")
    ap.add_argument(
        "--data-workers",
        type=int,
        default=None,
        help="train.data_workers for both loops (default: synthlab's, 2 on a GPU, 0 on CPU)",
    )
    ap.add_argument(
        "--compile-mode",
        choices=COMPILE_MODES,
        default="default",
        help="train.compile_mode (with --compile): reduce-overhead = CUDA graphs on a GPU",
    )
    args = ap.parse_args()
    global CLOCK, DEVICE
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible")
    if args.device == "cpu" and torch.cuda.is_available():
        ap.error(
            "--device cpu with a visible GPU: synthlab's Trainer would train on the GPU; set CUDA_VISIBLE_DEVICES="
        )
    DEVICE = torch.device(args.device)
    if DEVICE.type == "cuda":
        args.skip_mfu = True  # the MFU part compares with this CPU's matmul rate
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, lightning {L.__version__}, clock {args.clock}")
    if DEVICE.type == "cpu":
        from synthlab.model import native
        from synthlab.run import machine

        print(machine.vector_paths())  # the vector set torch's kernels use, and any cap on it
        print(native.describe())  # the instruction set and -march the CPU kernels were built for
    overrides, label = SIZES[args.size]
    overrides = {
        **overrides,
        "train.precision": args.precision,
        "train.compile": args.compile,
        "train.compile_mode": args.compile_mode if args.compile else "default",
        "train.data_workers": args.data_workers,
    }
    print(
        f"\n{args.size} size ({label}), "
        f"{args.precision}{f', compiled ({args.compile_mode})' if args.compile else ''}, steady-state ms/step"
    )
    print(f"{'pe':16s} {'plain':>8s} {'synthlab':>9s} {'ratio':>6s} {'vs ' + args.encodings.split(',')[0]:>9s}")
    global SKIP
    SKIP = skip = min(20, args.steps // 3)
    reference = None
    with quiet_lightning():
        for pe in args.encodings.split(","):
            # alternate twice and keep the best of each: CPU timings drift
            plain, ours = [], []
            for _ in range(2):
                plain.append(steady(plain_loop("flipflop", pe, overrides, args.steps), skip))
                ours.append(steady(synthlab_path("flipflop", pe, overrides, args.steps), skip))
            p, o = min(plain), min(ours)
            reference = o if reference is None else reference
            print(f"{pe:16s} {p * 1e3:8.2f} {o * 1e3:9.2f} {o / p:6.3f} {o / reference:9.3f}")
        if not args.skip_mfu:
            mfu_table(args.mfu_steps)


if __name__ == "__main__":
    main()
