"""Line plots beside the grids (accuracy vs test length) and learning curves, and plot hygiene:
library code never switches matplotlib's backend and leaves no pyplot figure open."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import matplotlib
import pytest

from synthlab.analysis import grids
from synthlab.analysis.curves_plot import curve_table, draw_curves
from synthlab.analysis.lineplots import by_length, draw_by_length


def rec(pe, seed, acc, task="even_pairs", d_model=16, by_len=True, curve=None, status="ok", study=None):
    r = {
        "schema": 1,
        "run_id": f"{task}-{pe}-{seed}-{d_model}",
        "task": task,
        "task_params": {"length": 40},
        "pe": pe,
        "positions": None,
        "model": {"d_model": d_model, "n_layers": 1, "n_heads": 2, "params": 1},
        "train": {"steps": 30, "batch_size": 4, "lr": 1e-3, "seed": seed, "train_len": 40},
        "metrics": {"test": {"token_acc": acc}, "ood": {"token_acc": acc / 2}},
        "by_length": {"41": acc, "60": acc / 2, "80": acc / 4} if by_len else None,
        "study": study,
        "trial": None,
        "status": status,
    }
    if curve is not None:
        r["curve"] = curve
    if status != "ok":
        r.update(metrics={}, by_length=None, error="diverged")
    return r


def points(final, seed=0, splits=("test", "ood")):
    return [
        {"step": s, "split": sp, "token_acc": final * s / 20 + 0.01 * seed, "seq_acc": None if s == 0 else 0.5}
        for s in (0, 10, 20)
        for sp in splits
    ]


@pytest.fixture
def no_backend_switch(monkeypatch):
    """matplotlib.use fails the test; afterwards no pyplot figure may be open and the backend is the same."""
    import matplotlib.pyplot as plt

    plt.close("all")
    before = matplotlib.get_backend()

    def use(*args, **kwargs):
        raise AssertionError(f"library code switched the matplotlib backend: use{args}")

    monkeypatch.setattr(matplotlib, "use", use)
    monkeypatch.setattr(plt, "switch_backend", use)
    yield
    assert plt.get_fignums() == [], "a pyplot figure was left open"
    assert matplotlib.get_backend() == before


def test_grid_and_its_by_length_plot_draw_without_pyplot_or_a_backend_switch(tmp_path, no_backend_switch):
    recs = [rec(pe, s, a) for pe, a in (("rope", 0.8), ("alibi", 1.0)) for s in (0, 1)]
    recs += [rec("rope", 0, 0.4, d_model=32), rec("nope", 0, 0.0, status="failed")]
    g = grids.grid(recs, kind="ood", out=tmp_path / "g.png")
    assert set(g.files) == {"png", "csv", "md", "by_length_png", "by_length_csv"}
    assert g.files["by_length_png"] == str(tmp_path / "g-by-length.png")
    table = g.lengths
    # a line per encoding and the setting that differs; failed runs are not drawn
    assert list(dict.fromkeys(table.encoding)) == ["rope d_model=16", "alibi d_model=16", "rope d_model=32"]
    assert set(table.length) == {41, 60, 80} and all(type(v) is int for v in table.length)
    csv = (tmp_path / "g-by-length.csv").read_text().splitlines()
    assert csv[0] == "task,split,length,encoding,seed,run_id,accuracy,panel"
    fig = g.plot_lengths()
    ax = fig.axes[0]
    assert ax.get_xlabel() == "test length" and ax.get_ylabel() == "accuracy (%)"
    mean_rope = [line for line in ax.get_lines() if len(line.get_xdata()) == 3][0]
    assert list(mean_rope.get_xdata()) == [41, 60, 80]
    assert list(mean_rope.get_ydata()) == pytest.approx([80.0, 40.0, 20.0])  # mean over the two seeds
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["rope d_model=16", "alibi d_model=16", "rope d_model=32"]
    heat, _ = g.plot()
    assert heat.canvas.manager is None  # a Figure pyplot does not manage


def test_a_grid_without_per_length_results_writes_no_line_plot(tmp_path, no_backend_switch):
    g = grids.grid([rec("rope", 0, 0.9, by_len=False)], kind="ood", out=tmp_path / "g.png")
    assert g.lengths is None and set(g.files) == {"png", "csv", "md"}
    with pytest.raises(ValueError, match="no per-length results"):
        g.plot_lengths()
    cap = grids.grid([rec("rope", 0, 0.9), rec("rope", 0, 0.9, d_model=32)], kind="capacity")
    assert cap.lengths is None  # the line plot goes beside the OOD grid only


def test_the_sweep_grids_draw_the_by_length_plot_beside_the_ood_heatmap(tmp_path, no_backend_switch):
    spec = SimpleNamespace(
        name="t",
        capacity_x="d_model",
        capacity_y="pe",
        metric="token_acc",
        show="error",
        in_dist="test",
        ood=["ood"],
        ood_x="length",
        ood_y="pe",
        papers=[],
    )
    recs = [rec(pe, s, 0.9) for pe in ("rope", "alibi") for s in (0, 1)]
    drawn = grids.sweep_grids(recs, spec, tmp_path / "grids")
    assert [g.kind for g in drawn] == ["ood"]
    assert (tmp_path / "grids" / "ood-by-length.png").stat().st_size > 1000
    lines = (tmp_path / "grids" / "ood-by-length.csv").read_text().splitlines()
    assert len(lines) == 1 + 4 * 3
    grids.sweep_grids(recs, spec, tmp_path / "grids", best_of=("lr",))
    assert not (tmp_path / "grids" / "ood-best-by-length.png").exists()  # best-of cells pick runs: no mean ± sd


def test_by_length_panels_per_task_and_split():
    recs = [rec("rope", 0, 0.9, task="even_pairs"), rec("rope", 0, 0.5, task="parity_check")]
    recs[1]["by_length"] = {"ood/41": 0.5, "test/10": 1.0}
    t = by_length(grids.tidy(recs))
    assert list(dict.fromkeys(t.panel)) == ["even_pairs · ood", "parity_check · ood", "parity_check · test"]
    assert by_length(grids.tidy([rec("rope", 0, 0.9, by_len=False)])) is None


def test_curve_table_lines_and_bad_points():
    recs = [rec("rope", s, 0.8, curve=points(0.8, s)) for s in (0, 1)] + [rec("cope", 0, 1.0, curve=points(1.0))]
    recs.append(rec("nope", 0, 0.5))  # no curve: not drawn
    t = curve_table(recs)
    assert list(t.columns) == ["task", "split", "step", "encoding", "seed", "run_id", "token_acc", "seq_acc", "panel"]
    assert len(t) == 3 * 6 and set(t.encoding) == {"rope", "cope"} and set(t.panel) == {"test", "ood"}
    assert math.isnan(t[(t.step == 0)].seq_acc.iloc[0])  # null in the record: missing, not 0
    assert curve_table([rec("rope", 0, 0.8)]) is None
    bad = rec("rope", 0, 0.8, curve=[{"step": "10", "split": "test", "token_acc": 0.5}])
    with pytest.raises(ValueError, match=r"curve\[0\]: step '10' is not an integer"):
        curve_table([bad])
    bad["curve"] = [{"step": 10, "split": "test", "token_acc": "high"}]
    with pytest.raises(ValueError, match="token_acc is 'high'"):
        curve_table([bad])


def test_curves_draws_mean_and_sd_over_seeds_into_out_grids(tmp_path, no_backend_switch):
    recs = [rec("rope", s, 0.8, task="flipflop", curve=points(0.8, s, ("test", "ood-sparse"))) for s in (0, 1)]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    files = draw_curves(tmp_path, split="ood-sparse")
    assert files == {
        "png": str(tmp_path / "grids" / "curves-token_acc-ood-sparse.png"),
        "csv": str(tmp_path / "grids" / "curves-token_acc-ood-sparse.csv"),
    }
    lines = (tmp_path / "grids" / "curves-token_acc-ood-sparse.csv").read_text().splitlines()
    assert lines[0] == "task,split,step,encoding,seed,run_id,token_acc,panel" and len(lines) == 1 + 2 * 3
    with pytest.raises(
        ValueError, match=r"--metric 'x' is not in the learning curves \(recorded: token_acc, seq_acc\)"
    ):
        draw_curves(path, metric="x")
    with pytest.raises(ValueError, match="--split 'nope' has no learning curves"):
        draw_curves(path, split="nope")


def test_run_pictures_draw_without_pyplot_or_a_backend_switch(tmp_path, no_backend_switch):
    from synthlab import plot

    fig = plot.bias("alibi", max_distance=8)
    fig.savefig(tmp_path / "alibi.png")
    assert fig.canvas.manager is None and (tmp_path / "alibi.png").stat().st_size > 1000


def test_the_by_length_line_counts_a_seed_run_twice_once():
    recs = [rec("rope", 0, 0.5, study="a"), rec("rope", 0, 0.5, study="b"), rec("rope", 1, 0.7, study="a")]
    fig = draw_by_length(by_length(grids.tidy(recs)))
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [41, 60, 80]
    assert line.get_ydata()[0] == pytest.approx(60.0)  # mean of seeds 0 and 1, not of 50, 50, 70


def test_the_learning_curve_band_counts_a_seed_run_twice_once(tmp_path, monkeypatch, no_backend_switch):
    import synthlab.analysis.curves_plot as cp

    drawn = {}
    real = cp.draw_lines
    monkeypatch.setattr(
        cp, "draw_lines", lambda data, *a, **k: drawn.setdefault("data", data) is not None and real(data, *a, **k)
    )
    recs = [rec("rope", 0, 0.8, task="flipflop", curve=points(0.8, 0, ("test",)), study=st) for st in ("a", "b")]
    recs.append(rec("rope", 1, 0.8, task="flipflop", curve=points(0.8, 1, ("test",)), study="a"))
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    draw_curves(path, split="test")
    last = drawn["data"][drawn["data"]["step"] == 20]
    assert sorted(last["seed"]) == [0, 1]  # one point per seed: the band is the sd of two seeds, not three runs
    assert last["token_acc"].mean() == pytest.approx(0.805)
