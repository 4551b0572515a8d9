"""A sweep's throughput against its number of worker processes: cells per hour with
``--workers 1 .. N`` (pick ``--workers auto`` from this; on a GPU, several workers
per device fill it while one process leaves it idle).

Each measurement runs the same sweep from scratch in a fresh directory (`synthlab sweep SWEEP
--preset P --workers N --out TMP --quiet`), so it times everything a researcher waits for:
start-up, training, evaluation and the grids. Ratios are against one worker.

    python benchmarks/sweep_workers.py                       # flipflop, smoke preset, 1 and 2 workers
    python benchmarks/sweep_workers.py --preset quick --workers 1,2 --pe cope,rope
    python benchmarks/sweep_workers.py --preset paper --workers 1,4,8,12 --pe cope,rope   # on a GPU
    python benchmarks/sweep_workers.py --preset quick --workers 1,4 --batch-seeds both    # stacked seeds vs not

``--batch-seeds both`` measures every worker count with and without ``--batch-seeds`` (each
cell's seeds trained as one stacked model); ``on`` only with it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_sweep(sweep: str, preset: str, pe: str | None, workers: int, batch_seeds: bool = False) -> tuple[float, int]:
    """Wall seconds and the number of cells recorded, for one fresh sweep."""
    with tempfile.TemporaryDirectory(prefix="synthlab-bench-") as tmp:
        out = Path(tmp) / "out"
        cmd = (
            [
                sys.executable,
                "-m",
                "synthlab.cli",
                "sweep",
                sweep,
                "--preset",
                preset,
                "--workers",
                str(workers),
                "--out",
                str(out),
                "--quiet",
            ]
            + (["--pe", pe] if pe else [])
            + (["--batch-seeds"] if batch_seeds else [])
        )
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        lines = (out / "study-results.jsonl").read_text().splitlines()
        return wall, sum(1 for ln in lines if ln.strip() and json.loads(ln).get("status") == "ok")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", default="flipflop")
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--pe", default=None, help="--pe list for the sweep (default: the sweep file's)")
    ap.add_argument("--workers", default="1,2", help="comma list of worker counts")
    ap.add_argument(
        "--batch-seeds",
        choices=("off", "on", "both"),
        default="off",
        help="sweep --batch-seeds: off, on, or both (each worker count twice)",
    )
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.batch_seeds]
    print(f"synthlab sweep {args.sweep} --preset {args.preset}" + (f" --pe {args.pe}" if args.pe else ""))
    print(f"{'workers':>7s} {'batched':>7s} {'cells':>6s} {'wall s':>8s} {'cells/h':>8s} {'vs 1st':>7s}")
    first = None
    for n in counts:
        for batched in modes:
            wall, cells = run_sweep(args.sweep, args.preset, args.pe, n, batched)
            rate = cells / wall * 3600
            first = rate if first is None else first
            print(f"{n:7d} {'yes' if batched else 'no':>7s} {cells:6d} {wall:8.1f} {rate:8.0f} {rate / first:7.2f}")


if __name__ == "__main__":
    main()
