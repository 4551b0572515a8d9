"""CoPE's gates at the read queries of flip-flop runs: does a head count writes alone?

For each run, layer and head, over the scored reads of the first ``--samples`` samples of a
split (ood-sparse by default): the mean gate g_ij of the query (the read) on the write tokens
before it (``w``), the mean gate on every other token up to it (``o``), and the share of reads
whose contextual position at the last write is clamped (p >= npos - 1: the head cannot tell that
write from an older one). A head with ``w`` near 1 and ``o`` near 0 counts writes alone, so the
last write sits at position ~1 however far back it is (the flipflop T 512 notes in
docs/notes/2026-11-28-sweep-file-measurements.md).

    python scripts/cope_gates.py RUN_DIR [RUN_DIR ...] [--samples 16] [--split ood-sparse]

The gates come from :func:`synthlab.plot.maps.cope_positions` (what ``synthlab plot
positions`` draws). Bad input exits 2 with one line.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from synthlab.plot.maps import cope_positions
from synthlab.plot.runs import as_run


@dataclass
class ReadGates:
    """Per (layer, head): mean write gate, mean other-token gate, share of reads clamped."""

    write: np.ndarray  # (L, H)
    other: np.ndarray  # (L, H)
    clamped: np.ndarray  # (L, H)
    reads: int
    npos: int


def read_gates(run, samples: int = 16, split: str = "ood-sparse") -> ReadGates:
    """The statistics of one loaded run (:func:`synthlab.plot.runs.as_run`)."""
    if run.task.name != "flipflop":
        raise ValueError(f"flip-flop runs only (writes are its 'w' tokens), got task {run.task.name!r}")
    sums, reads, npos = None, 0, 0
    for i in range(samples):
        cp = cope_positions(run, i, split)  # gates, positions (L, H, T, T)
        npos = cp.npos
        if sums is None:
            sums = np.zeros((3,) + cp.gates.shape[:2])
        tokens = np.asarray(cp.tokens)
        writes = np.flatnonzero(tokens == "w")
        for q in cp.scored:  # the read token: its prediction is the bit that follows
            before = writes[writes < q]
            if len(before) == 0:
                continue
            others = np.setdiff1d(np.arange(q + 1), before)
            sums[0] += cp.gates[:, :, q, before].mean(-1)
            sums[1] += cp.gates[:, :, q, others].mean(-1)
            sums[2] += cp.positions[:, :, q, before[-1]] >= npos - 1 - 1e-9
            reads += 1
    if not reads:
        raise ValueError(f"no scored read after a write in the first {samples} {split} samples")
    return ReadGates(*(sums / reads), reads=reads, npos=npos)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run directories of flip-flop runs with a CoPE encoding")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--split", default="ood-sparse")
    a = ap.parse_args(argv)
    if a.samples < 1:
        ap.error("--samples must be at least 1")
    for rd in a.runs:
        try:
            run = as_run(rd)
            g = read_gates(run, a.samples, a.split)
        except (ValueError, KeyError, OSError) as e:
            print(f"cope_gates.py: error: {rd}: {e}", file=sys.stderr)
            return 2
        print(f"{rd}: pe {run.model.pe}, npos {g.npos}, {g.reads} reads ({a.split})")
        for layer in range(g.write.shape[0]):
            print(
                f"  layer {layer}: "
                + "  ".join(
                    f"h{h} w {g.write[layer, h]:.2f} o {g.other[layer, h]:.2f} clamp {100 * g.clamped[layer, h]:.0f}%"
                    for h in range(g.write.shape[1])
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
