"""Where a synthlab training step's time goes: torch.profiler over steady-state steps.

    python benchmarks/profile_step.py --pe cope                          # CPU, quick size
    python benchmarks/profile_step.py --device cuda --size paper --pe rope,cope --trace-dir $OUT

Runs ``synthlab.run.fitting.fit`` (the Trainer a run uses, no logger) on flip-flop at the size of
``benchmarks/training.py --size``, profiles ``--steps`` steps after ``--warmup`` steps, and
prints per encoding: the top operators by self time on the device (CPU or CUDA), the host time
a step, and the calls a step that make the host wait for the device (``.item()`` /
``_local_scalar_dense``, blocking copies, stream and device synchronizes): on a GPU these
should be 0 but for the NaN check every 16 steps (``tests/integration/test_cuda.py`` asserts
it). ``--trace-dir`` also writes a Chrome trace per encoding (chrome://tracing, Perfetto).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path

import lightning as L
import torch
from torch.profiler import ProfilerActivity, profile

from synthlab.run.data import DataModule
from synthlab.run.fitting import fit, quiet_lightning
from synthlab.run.modules import make_module

# the training benchmark's model / data / sizes (a script beside this one, not a package)
_spec = importlib.util.spec_from_file_location("training_benchmark", Path(__file__).resolve().parent / "training.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# names of profiler events that make the host wait for the device
WAITS = (
    "aten::_local_scalar_dense",
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaMemcpy",
    "cudaEventSynchronize",
)


class Window(L.Callback):
    """Profiles steps warmup .. warmup + steps - 1."""

    def __init__(self, warmup: int, steps: int, cuda: bool) -> None:
        self.warmup, self.steps, self.cuda = warmup, steps, cuda
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.prof = profile(activities=acts)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup:
            if self.cuda:
                torch.cuda.synchronize()
            self.prof.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup + self.steps:  # global_step counts this step already
            if self.cuda:
                torch.cuda.synchronize()
            self.prof.__exit__(None, None, None)


def profile_pe(pe: str, overrides: dict, warmup: int, steps: int, cuda: bool, trace_dir: str | None) -> None:
    cfg, task, model = bench.make("flipflop", pe, {**overrides, "steps": warmup + steps + 1})
    tc = cfg.train
    dm = DataModule(task, tc.seed, tc.batch_size, tc.steps, workers=tc.data_workers)
    module = make_module(model, cfg, log_every=max(1, tc.steps // 200))
    window = Window(warmup, steps, cuda)
    fit(module, dm, cfg, callbacks=[window])
    events = window.prof.key_averages()
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(f"\n== {pe}: {steps} steps after {warmup}")
    print(events.table(sort_by=sort, row_limit=18, max_name_column_width=48))
    host = sum(e.self_cpu_time_total for e in events) / steps / 1e3
    waits = {e.key: e.count / steps for e in events if e.key in WAITS and e.count}
    what = "calls a step that wait for the device" if cuda else "host reads a step (free on CPU: AdamW's own)"
    print(
        f"host (CPU) time a step: {host:.2f} ms; {what}: "
        + (", ".join(f"{k} {v:.2f}" for k, v in sorted(waits.items())) or "none")
    )
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
        path = os.path.join(trace_dir, f"trace-{pe.replace(':', '_').replace('+', '_')}.json")
        window.prof.export_chrome_trace(path)
        print(f"trace: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pe", default="rope,cope", help="comma list of encodings")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--size", choices=tuple(bench.SIZES), default="quick")
    ap.add_argument("--warmup", type=int, default=20, help="steps before the profiled ones")
    ap.add_argument("--steps", type=int, default=10, help="profiled steps")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    ap.add_argument("--trace-dir", default=None, help="write a Chrome trace per encoding here")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is visible")
    if args.device == "cpu" and torch.cuda.is_available():
        ap.error("--device cpu with a visible GPU: the Trainer would train on the GPU; set CUDA_VISIBLE_DEVICES=")
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = bench.SIZES[args.size][0]
    with quiet_lightning():
        for pe in args.pe.split(","):
            profile_pe(pe, overrides, args.warmup, args.steps, args.device == "cuda", args.trace_dir)


if __name__ == "__main__":
    main()
