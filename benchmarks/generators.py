"""Generator throughput: tokens / second on one core, batch of 256 train samples.

    python benchmarks/generators.py [--batch 256] [--repeats 3] [--only flipflop,mqar]

Length ~512 where the task has a length parameter (targets: >= 1M tokens/s for flipflop,
selective_copy, mqar, passkey and bit-string CHE tasks; >= 100k tokens/s for the others).
Each timing includes everything ``Task.sample`` does (per-example rng, hash partition).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

from synthlab import generators  # noqa: E402 (after the thread settings, before numpy loads)

# (task params for ~512-token samples, target tokens/s)
CONFIGS: dict[str, tuple[dict, float]] = {
    "flipflop": ({"n_pairs": 256}, 1e6),
    "selective_copy": ({"n_copy": 128, "n_blank": 256, "n_blank_dense": 128, "n_blank_sparse": 512}, 1e6),
    "mqar": ({"length": 512, "n_kv": 32, "ood_lengths": "1024"}, 1e6),
    "passkey": ({"length": 512, "target_length": 2048}, 1e6),
    "counting": ({"max_steps": 512}, 1e5),  # default: ~560 tokens on average
    "arithmetic": ({}, 1e5),  # paper default n_ops <= 6 (~40 tokens on average)
    "binfa": ({}, 1e5),  # defaults (~50 tokens)
    "nfa": ({}, 1e5),
}
BIT_CHE = {
    "even_pairs",
    "parity_check",
    "reverse_string",
    "duplicate_string",
    "missing_duplicate_string",
    "odds_first",
    "binary_addition",
    "binary_multiplication",
    "compute_sqrt",
    "stack_manipulation",
}


def che_configs() -> dict[str, tuple[dict, float]]:
    try:
        from synthlab.generators import che
    except ImportError:
        return {}
    out = {}
    for name, cls in getattr(che, "TASKS", {}).items():
        params = {cls.length_param: 512} if cls.length_param and cls.length_param in cls.PARAMS else {}
        out[name] = (params, 1e6 if name in BIT_CHE else 1e5)
    return out


def bench(name: str, params: dict, batch: int, repeats: int) -> tuple[float, float, float]:
    """(tokens per wall second, tokens per CPU second of this process, tokens per sample),
    best of ``repeats`` batches. On a shared machine the CPU-time rate is the fair one-core
    figure (wall time also counts the time other processes hold the core)."""
    task = generators.get_task(name, **params)
    task.sample("train", 8, seed=0)  # warm-up
    wall = cpu = float("inf")
    tokens = 0
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        samples = task.sample("train", batch, seed=1, start=r * batch)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        tokens = sum(len(s) for s in samples)
    return tokens / wall, tokens / max(cpu, 1e-9), tokens / batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated task names")
    args = ap.parse_args()
    configs = {**CONFIGS, **che_configs()}
    if args.only:
        keep = set(args.only.split(","))
        configs = {k: v for k, v in configs.items() if k in keep}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'task':<28}{'tokens/sample':>14}{'tokens/s wall':>15}{'tokens/s cpu':>15}{'target':>10}  ok (cpu)")
    for name, (params, target) in configs.items():
        try:
            rate, cpu_rate, per = bench(name, params, args.batch, args.repeats)
        except Exception as e:  # a broken task must not hide the others' numbers
            print(f"{name:<28}  error: {type(e).__name__}: {e}")
            continue
        ok = "yes" if cpu_rate >= target else "NO"
        print(f"{name:<28}{per:>14.0f}{rate:>15,.0f}{cpu_rate:>15,.0f}{target:>10.0e}  {ok}")


if __name__ == "__main__":
    main()
