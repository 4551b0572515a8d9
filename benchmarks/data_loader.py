"""What a training batch costs the training process: built in-process vs received from loader workers.

    python benchmarks/data_loader.py [--workers 0,1,2] [--batches 300] [--step-ms 4]

On a GPU the host's time a step is its kernel launches plus getting the next batch, and a
small model's step is host-bound, so this time is step time. For each task at its quick preset
(and flip-flop at its paper preset) the script iterates synthlab's training batches
(``TrainBatches`` through ``StepLoader``, as a run does) and reports the training process's own
CPU time a batch (``time.process_time``: the workers' time is theirs), with the process sleeping
``--step-ms`` after each batch, as it would while a step runs, so that the workers can keep
ahead. ``train.data_workers`` (2 on a GPU by default, 0 on CPU) is chosen from this table: a
worker moves the generation out of the training process, at the price of receiving the batch
(shared-memory tensors through a queue). The last column is the wall time a batch, which
exceeds the step when the workers do not keep up.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from synthlab import generators
from synthlab.plan.presets import build_config
from synthlab.run.data import StepLoader, TrainBatches, TrainStream

CASES = [
    ("flipflop", "quick"),
    ("flipflop", "paper"),
    ("selective_copy", "quick"),
    ("mqar", "quick"),
    ("arithmetic", "quick"),
    ("counting", "quick"),
    ("even_pairs", "quick"),
]


def per_batch(task_name: str, preset: str, workers: int, batches: int, step_s: float) -> tuple[float, float, int, int]:
    """(training-process CPU seconds a batch, wall seconds a batch, batch size, length)."""
    cfg = build_config(task_name, "rope", preset)
    task = generators.get_task(task_name, **cfg.task_params)
    stream = TrainStream(task, 0, cfg.train.batch_size)
    warm = 10
    loader = StepLoader.for_trainer(TrainBatches(stream, warm + batches), None, workers, [stream])
    it = iter(loader)
    for _ in range(warm):
        ids, _ = next(it)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in it:
        time.sleep(step_s)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu / batches, wall / batches, cfg.train.batch_size, stream.max_len


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="0,1,2", help="comma list of loader worker counts")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--step-ms", type=float, default=4.0, help="the training process sleeps this long a batch")
    args = ap.parse_args()
    torch.set_num_threads(1)
    counts = [int(w) for w in args.workers.split(",")]
    print(
        f"torch {torch.__version__}, {os.cpu_count()} CPUs; training-process CPU ms a batch "
        f"(wall ms a batch), {args.step_ms:g} ms step"
    )
    print(f"{'task':16s} {'preset':7s} {'B':>4s} {'T':>5s} " + " ".join(f"{f'{w} workers':>18s}" for w in counts))
    for task, preset in CASES:
        cells, shape = [], None
        for w in counts:
            cpu, wall, B, T = per_batch(task, preset, w, args.batches, args.step_ms / 1e3)
            shape = (B, T)
            cells.append(f"{cpu * 1e3:.2f} ({wall * 1e3:.2f})")
        print(f"{task:16s} {preset:7s} {shape[0]:4d} {shape[1]:5d} " + " ".join(f"{c:>18s}" for c in cells))


if __name__ == "__main__":
    main()
