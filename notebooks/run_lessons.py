"""Execute the lesson notebooks top to bottom in a Jupyter kernel and save them with their outputs.

    python notebooks/run_lessons.py                     # every lesson, outputs saved in place
    python notebooks/run_lessons.py encodings.ipynb     # one lesson
    python notebooks/run_lessons.py --check             # run them, save nothing (exit 1 on an error)

Run it after changing a lesson or regenerating the checkpoints (make_checkpoints.py), so the
notebooks render with their pictures on a code host. Needs ``pip install -e ".[notebooks]"``.
Each lesson prints its time; the lessons load the checkpoints and train nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def execute(path: Path, timeout: int = 600, save: bool = True) -> float:
    """Run one notebook in a fresh python3 kernel from the notebooks folder; returns seconds."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    seconds = time.perf_counter() - t0
    if save:
        nbformat.write(nb, path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", help="lesson files (default: every *.ipynb here)")
    ap.add_argument("--check", action="store_true", help="execute only, do not save the outputs")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = ap.parse_args(argv)
    paths = [Path(p) if Path(p).exists() else HERE / p for p in args.notebooks] or sorted(HERE.glob("*.ipynb"))
    failed = 0
    for path in paths:
        try:
            seconds = execute(path.resolve(), args.timeout, save=not args.check)
            print(f"{path.name}: {seconds:.0f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - report every lesson, then fail
            failed += 1
            print(
                f"{path.name}: FAILED: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}",
                file=sys.stderr,
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
