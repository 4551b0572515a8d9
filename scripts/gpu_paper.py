"""The paper-scale check on a lent GPU: CoPE and RoPE on flip-flop at the CoPE paper's
size (``sweeps/flipflop.toml``'s paper preset, the run ``synthlab train --preset paper`` makes:
d 256, 4 layers, 4 heads, T 512, 10k steps of batch 16, lr 3e-4), seeds 0, 1, 2 stacked into
one model per encoding (``synthlab.train_seeds``), one process per encoding on the one GPU.

    python scripts/gpu_paper.py OUT [--pe cope,rope] [--preset paper]

Deviation from the preset, named: learning curves off (``train.eval_every`` none; the preset
evaluates every 500 steps for CoPE Fig. 6), since curves keep seeds from stacking. Records go
to OUT/results.jsonl, runs and checkpoints under OUT/runs: a call cut off by its time limit
resumes from the last checkpoint (every 1,000 steps) when run again on the same machine, and an
encoding whose three records are in OUT/results.jsonl is not trained again.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
from pathlib import Path

SEEDS = [0, 1, 2]


def done(results: Path, pe: str, preset: str) -> bool:
    if not results.exists():
        return False
    seeds = set()
    for line in results.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:  # a torn last line
            continue
        if r.get("pe") == pe and r.get("preset") == preset and r.get("status") == "ok":
            seeds.add(r["train"]["seed"])
    return seeds >= set(SEEDS)


def train(pe: str, out: str, preset: str) -> None:
    import synthlab

    recs = synthlab.train_seeds(
        "flipflop",
        pe,
        SEEDS,
        preset=preset,
        overrides={"train.eval_every": None},
        out=Path(out) / "runs",
        results=Path(out) / "results.jsonl",
    )
    for r in recs:
        errs = {s: round(100 * (1 - m["token_acc"]), 2) for s, m in r["metrics"].items()}
        print(pe, "seed", r["train"]["seed"], r["status"], r.get("error", ""), "read error %", errs, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--pe", default="cope,rope")
    ap.add_argument("--preset", default="paper", help="smoke: a dry run of this script")
    args = ap.parse_args()
    results = Path(args.out) / "results.jsonl"
    todo = [pe for pe in args.pe.split(",") if not done(results, pe, args.preset)]
    print("to train:", todo or "nothing (every record is there)", flush=True)
    ctx = mp.get_context("spawn")  # CUDA in the children: never fork a process that has used it
    procs = [ctx.Process(target=train, args=(pe, args.out, args.preset)) for pe in todo]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
