"""Regenerate the small trained checkpoints the lessons start from (notebooks/checkpoints/).

    python notebooks/make_checkpoints.py                 # all of them, 2 at a time
    python notebooks/make_checkpoints.py flipflop-rope   # one (or several) by name
    python notebooks/make_checkpoints.py --list          # names, settings, what each lesson needs

Each checkpoint is a run directory exactly as ``synthlab train --out DIR`` writes it
(``config.json``, ``metrics.jsonl``, ``model.safetensors``), so ``synthlab.load_run`` opens
it; it is trained with the public API (``synthlab.train``) at the task's ``quick`` preset
with the overrides listed below, then moved to ``checkpoints/<name>/``. Every run's result
record is kept in ``checkpoints/results.jsonl`` (one line per checkpoint, the latest wins),
which lesson 6 reads as a small results file.

Every run uses one torch thread (``train.threads = 1``), so a rerun with the same code on the
same kind of CPU gives the same weights (docs/results.md, "What repeats exactly"); another thread count,
or code that orders a sum differently, rounds differently, and a single run may land elsewhere:
the flip-flop checkpoints (made 2026-11-24, commit b0b832d) remade on 2026-11-27 matched the
shipped loss curves to the last digit for 35 steps, then in the seventh digit, and ended with RoPE
at 7 % ood-sparse read error instead of 22 %, KERPLE at 19 % instead of 0 %. The
flip-flop and MQAR checkpoints are therefore kept as made then; arithmetic (the reference's
operator mix) and counting (generator revision 2) were remade on 2026-11-27. The numbers each
lesson states were measured on the shipped checkpoints; after regenerating, rerun the lessons
(``run_lessons.py``, and ``pytest -m slow tests/system/test_notebooks.py``) to check the
effects still show.

Run time on a 2-core CPU at 2 jobs: 328 and 330 s for the two arithmetic runs, 357 and 374 s
for counting, 114-166 s a flip-flop run (the same CPU busy with two other trainings: 2.6 hours
for all 11 at 1 job, 425 s for mqar-nope to 1,935 s for counting-cope).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKPOINTS_DIR = HERE / "checkpoints"

ONE_THREAD = {"train.threads": 1}

#: name -> (task, pe, overrides on top of the quick preset, the lesson that uses it)
CHECKPOINTS: dict[str, tuple[str, str, dict, str]] = {
    # lesson 1: the quick preset as measured in the README (RoPE glitches on ood-sparse, CoPE not)
    "flipflop-rope": ("flipflop", "rope", {}, "01 flip-flop glitches, 02 encodings (rope scaling)"),
    "flipflop-cope": ("flipflop", "cope", {}, "01 flip-flop glitches"),
    # lesson 2: what training makes of the learned biases (same task, same budget as RoPE)
    "flipflop-t5": ("flipflop", "t5", {}, "02 encodings"),
    "flipflop-kerple": ("flipflop", "kerple", {}, "02 encodings"),
    "flipflop-fire": ("flipflop", "fire", {}, "02 encodings"),
    # lesson 3: one variable, the quick preset
    "counting-cope": ("counting", "cope", {}, "03 counting with CoPE"),
    "counting-relative": ("counting", "relative", {}, "03 counting with CoPE"),
    # lesson 4: the quick preset's smallest model (d 32), BiPE-RoPE against RoPE
    "arithmetic-bipe-rope": ("arithmetic", "bipe-rope", {"model.d_model": 32}, "04 BiPE on arithmetic"),
    "arithmetic-rope": ("arithmetic", "rope", {"model.d_model": 32}, "04 BiPE on arithmetic"),
    # lesson 5: the quick preset's smallest model (d 32), the 1 x 3 kernel without PE against NoPE
    "mqar-nope-dape3": ("mqar", "nope+dape:k=3", {"model.d_model": 32}, "05 DAPE associative recall"),
    "mqar-nope": ("mqar", "nope", {"model.d_model": 32}, "05 DAPE associative recall"),
}

SEED = 0
PRESET = "quick"


def train_one(name: str) -> dict:
    """Train checkpoint ``name`` and move its run directory to checkpoints/<name>/."""
    import synthlab

    task, pe, overrides, _ = CHECKPOINTS[name]
    CHECKPOINTS_DIR.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=CHECKPOINTS_DIR, prefix=".work-") as tmp:
        record = synthlab.train(
            task, pe, preset=PRESET, seed=SEED, out=tmp, overrides={**overrides, **ONE_THREAD}, logger="none"
        )  # the loss curve is in metrics.jsonl; no logs/ to ship
        if record.get("status") != "ok":
            raise RuntimeError(f"{name}: the run failed: {record.get('error') or record.get('status')}")
        target = CHECKPOINTS_DIR / name
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(Path(tmp) / record["run_id"]), target)
    record["checkpoint"] = name
    print(
        f"{name}: {time.perf_counter() - t0:.0f} s, {(target / 'model.safetensors').stat().st_size / 1024:.0f} KB",
        flush=True,
    )
    return record


def save_records(records: list[dict]) -> None:
    """Merge the new records into checkpoints/results.jsonl (one line per checkpoint, in CHECKPOINTS order)."""
    import fcntl

    path = CHECKPOINTS_DIR / "results.jsonl"
    with open(CHECKPOINTS_DIR / ".results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two invocations at once merge, never overwrite each other
        old = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    old[rec["checkpoint"]] = rec
        old.update({r["checkpoint"]: r for r in records})
        lines = [json.dumps(old[n], sort_keys=True) for n in CHECKPOINTS if n in old]
        path.write_text("".join(line + "\n" for line in lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="checkpoints to (re)make; default: all")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time (each on one thread)")
    ap.add_argument("--list", action="store_true", help="list the checkpoints and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, (task, pe, ov, lesson) in CHECKPOINTS.items():
            sets = " ".join(f"--set {k}={v}" for k, v in {**ov, **ONE_THREAD}.items())
            print(f"{name:22s} synthlab train {task} --pe {pe} --preset {PRESET} --seed {SEED} {sets}   # {lesson}")
        return 0
    names = args.names or list(CHECKPOINTS)
    unknown = [n for n in names if n not in CHECKPOINTS]
    if unknown:
        print(f"unknown checkpoint(s): {', '.join(unknown)} (known: {', '.join(CHECKPOINTS)})", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    failed = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(train_one, n): n for n in names}
        for fut in as_completed(futures):
            try:
                save_records([fut.result()])  # as each ends: a later failure keeps the others
            except Exception as e:  # noqa: BLE001 - report every failed checkpoint, then exit 1
                failed.append(futures[fut])
                print(f"{futures[fut]}: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
