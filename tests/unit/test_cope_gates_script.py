"""scripts/cope_gates.py: the gate statistics behind the flipflop T 512 notes
(docs/notes/2026-11-28-sweep-file-measurements.md)."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = ROOT / "notebooks" / "checkpoints"


@pytest.fixture(scope="module")
def script():
    return runpy.run_path(str(ROOT / "scripts" / "cope_gates.py"))


def test_averages_over_reads_of_write_and_other_gates_and_clamps(script, monkeypatch):
    # one layer, one head, tokens w 1 r 1 w 0 i 0 r 0: reads at 2 and 8, npos 2 (clamp at p >= 1)
    from synthlab.plot.maps import CopePositions

    tokens = ["w", "1", "r", "1", "w", "0", "i", "0", "r", "0"]
    T = len(tokens)
    g = np.zeros((1, 1, T, T))
    g[0, 0, 2, :3] = [0.9, 0.1, 0.2]  # read 2: write gate 0.9, others (1, 2) 0.1 / 0.2
    g[0, 0, 8, :9] = [1.0, 0, 0, 0, 0.5, 0, 0.3, 0, 0.6]  # read 8: writes 0, 4; others 0.9 / 7
    p = np.flip(np.cumsum(np.flip(g, -1), -1), -1)  # p_ij = sum_{t >= j} g_it
    fake = CopePositions(tokens, np.array([2, 8]), g, np.minimum(p, 1.0), 2, "fake")
    monkeypatch.setitem(script["read_gates"].__globals__, "cope_positions", lambda run, i, split: fake)

    class Run:
        class task:
            name = "flipflop"

    r = script["read_gates"](Run(), samples=1)
    assert r.reads == 2
    assert r.write[0, 0] == pytest.approx((0.9 + 0.75) / 2)
    assert r.other[0, 0] == pytest.approx((0.3 / 2 + 0.9 / 7) / 2)
    # read 2's last write (key 0): p = 1.2 -> clamped; read 8's (key 4): p = 0.5 + 0.3 + 0.6 = 1.4 -> clamped
    assert r.clamped[0, 0] == pytest.approx(1.0)


def test_a_real_run_prints_every_layer_and_head(script, capsys):
    run = CHECKPOINTS / "flipflop-cope"
    assert script["main"]([str(run), "--samples", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{run}: pe cope, npos 64,")
    assert len(out) == 3 and all(line.count(" w ") == 4 for line in out[1:])  # 2 layers x 4 heads


def test_a_run_of_another_task_exits_2_with_one_line(script, capsys):
    assert script["main"]([str(CHECKPOINTS / "counting-cope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "flip-flop runs only" in err[0]
