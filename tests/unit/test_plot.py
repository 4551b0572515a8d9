"""synthlab.plot: the numbers each picture draws, checked against the model and direct counts,
and the figures' panels, ticks and marks (smoke flip-flop runs trained once per module)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import synthlab
from synthlab import generators, plot
from synthlab.model.encoders.bias import alibi_slopes
from synthlab.run.training import train

RUNS = {"rope": {"model.n_layers": 2}, "cope": {"model.n_layers": 2}, "cope+rope": {}, "bipe-alibi": {}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot-runs")
    paths = {}
    for pe, ov in RUNS.items():
        rec = train("flipflop", pe, preset="smoke", out=out, overrides=ov)
        assert rec["status"] == "ok", rec.get("error")
        paths[pe] = out / rec["run_id"]
    return paths


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _eval_sample(run, split, i):
    """Sample i of the run's evaluation set of ``split``, drawn directly from the generator."""
    return run.task.sample(split, 1, seed=run.config["train"]["seed"], start=i)[0]


# ---- attention ---------------------------------------------------------------------------


def test_attention_one_panel_per_requested_layer_and_head_with_token_ticks(runs):
    run = synthlab.load_run(runs["rope"])
    s = _eval_sample(run, "ood-sparse", 3)
    fig = plot.attention(runs["rope"], 3, layers=[1], heads=[0, 1], split="ood-sparse")
    panels = _panels(fig)
    assert [ax.get_title() for ax in panels] == ["layer 1 · head 0", "layer 1 · head 1"]
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == s.tokens
        assert [t.get_text() for t in ax.get_yticklabels()] == s.tokens
    assert len(_panels(plot.attention(run, 3, split="ood-sparse"))) == 2 * 2  # all layers x heads
    assert len(_panels(plot.attention(run, 0, layers=0, heads=1))) == 1


def test_attention_marks_scored_rows_right_and_wrong(runs):
    run = synthlab.load_run(runs["rope"])
    s = _eval_sample(run, "ood-sparse", 5)
    with torch.no_grad():
        pred = run.model(torch.as_tensor(s.ids).unsqueeze(0))[0].argmax(-1).numpy()
    right = pred[s.scored] == s.target_ids
    data = plot.attention_maps(run, 5, split="ood-sparse")
    assert data.tokens == s.tokens and list(data.scored) == list(s.scored) and list(data.right) == list(right)
    ax = _panels(plot.attention(run, 5, layers=[0], heads=[0], split="ood-sparse"))[0]
    colours = {i: lab.get_color() for i, lab in enumerate(ax.get_yticklabels())}
    for pos, ok in zip(s.scored, right):
        assert colours[int(pos)] == ("tab:green" if ok else "tab:red")
    assert all(c == "black" for i, c in colours.items() if i not in set(s.scored.tolist()))


@pytest.mark.parametrize("pe", ["rope", "cope"])
def test_attention_maps_are_causal_distributions_and_drawn_as_is(runs, pe):
    data = plot.attention_maps(runs[pe], 2)
    L, H, T, _ = data.maps.shape
    assert (L, H, T) == (2, 2, len(data.tokens))
    np.testing.assert_allclose(data.maps.sum(-1), 1.0, atol=1e-5)
    assert np.all(data.maps[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0.0)
    assert data.maps.min() >= 0.0
    ax = _panels(plot.attention(runs[pe], 2, layers=[1], heads=[1]))[0]
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), data.maps[1, 1])


def test_attention_bad_input_is_a_value_error(runs, tmp_path):
    with pytest.raises(ValueError, match="out of range.*0..31"):
        plot.attention(runs["rope"], 32)  # smoke: 32 evaluation samples
    with pytest.raises(ValueError, match="out of range"):
        plot.attention(runs["rope"], -1)
    with pytest.raises(ValueError, match="layer 2 out of range"):
        plot.attention(runs["rope"], 0, layers=[2])
    with pytest.raises(ValueError, match="head 5 out of range"):
        plot.attention(runs["rope"], 0, heads=5)
    with pytest.raises(ValueError, match="unknown split"):
        plot.attention(runs["rope"], 0, split="ood-nope")
    with pytest.raises(ValueError, match="not a run directory"):
        plot.attention(tmp_path, 0)
    with pytest.raises(ValueError, match="runs inside it"):  # the --out directory, not a run
        plot.attention(runs["rope"].parent, 0)
    other = generators.get_task("counting").sample("test", 1)[0]
    with pytest.raises(ValueError, match="task 'counting'"):
        plot.attention(runs["rope"], other)


def test_attention_takes_a_sample_object(runs):
    run = synthlab.load_run(runs["rope"])
    s = run.task.sample("ood-dense", 1, seed=7)[0]
    assert plot.attention_maps(run, s).tokens == s.tokens


# ---- capture and CoPE positions ----------------------------------------------------------


@pytest.mark.parametrize("pe", ["rope", "cope", "cope+rope"])
def test_captured_q_k_are_the_layers_own(runs, pe):
    """capture_qk gives each layer's q and k (the hook points): without a position term beyond
    rotary, softmax(q k^T / sqrt(d_h)) is the model's own attention map."""
    run = synthlab.load_run(runs[pe])
    ids = torch.as_tensor(_eval_sample(run, "test", 1).ids).unsqueeze(0)
    with torch.no_grad():
        _, atts = run.model(ids, return_attention=True)
    caps = plot.capture_qk(run.model, ids)
    _, cache = run.run_with_cache(ids)
    assert len(caps) == run.model.n_layers
    T = ids.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i, (rec, block, att) in enumerate(zip(caps, run.model.blocks, atts)):
        torch.testing.assert_close(rec["q"], cache[f"blocks.{i}.attn.q"], rtol=0, atol=0)
        torch.testing.assert_close(rec["k"], cache[f"blocks.{i}.attn.k"], rtol=0, atol=0)
        if block.attn.cope is None:
            S = (rec["q"] * block.attn.scale) @ rec["k"].transpose(-2, -1)
            A = torch.softmax(S.masked_fill(future, float("-inf")), -1)
            torch.testing.assert_close(A, att, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pe", ["cope", "cope+rope"])
def test_cope_positions_count_the_gates(runs, pe):
    d = plot.cope_positions(runs[pe], 4, split="ood-sparse")
    L, H, T, _ = d.gates.shape
    i, j = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    below = j <= i
    g, p = d.gates, d.positions
    assert np.all(g[..., ~below] == 0) and np.all(p[..., ~below] == 0)
    assert np.all((g >= 0) & (g <= 1))
    # the model's own positions (its float32 sums): exact up to that rounding
    np.testing.assert_allclose(
        np.diagonal(p, axis1=-2, axis2=-1), np.diagonal(g, axis1=-2, axis2=-1), atol=1e-5
    )  # p_ii = g_ii
    assert np.all(np.diff(p, axis=-1)[..., below[:, :-1]] <= 1e-5)  # non-increasing in j up to the diagonal
    assert np.all(p >= 0) and np.all(p[..., below] <= (i - j + 1)[below] + 1e-5)  # at most one per key j..i
    # p_ij = sum of the gates from j to i (summed in float64 here)
    np.testing.assert_allclose(np.flip(np.cumsum(np.flip(g, -1), -1), -1) * below, p, atol=1e-5)


def test_positions_figure_draws_gates_and_positions_per_layer_head(runs):
    fig = plot.positions(runs["cope"], 0, layers=[1], heads=[0])
    panels = _panels(fig)
    assert [ax.get_title() for ax in panels] == ["layer 1 · head 0: gates g_ij", "layer 1 · head 0: positions p_ij"]
    d = plot.cope_positions(runs["cope"], 0)
    np.testing.assert_array_equal(np.asarray(panels[0].images[0].get_array()), d.gates[1, 0])
    np.testing.assert_array_equal(np.ma.getdata(panels[1].images[0].get_array()), d.positions[1, 0])
    assert len(_panels(plot.positions(runs["cope"], 0))) == 2 * 2 * 2


def test_bipe_ids_reset_at_each_segment_start(runs):
    run = synthlab.load_run(runs["bipe-alibi"])
    s = _eval_sample(run, "test", 6)
    d = plot.bipe_ids(run, 6)
    seg, intra = [], []
    for t, tok in enumerate(s.tokens):  # flip-flop: each `w` starts a segment
        if t and tok == "w":
            seg.append(seg[-1] + 1)
            intra.append(0)
        else:
            seg.append(seg[-1] if t else 0)
            intra.append(intra[-1] + 1 if t else 0)
    assert d.segments.tolist() == seg and d.intra.tolist() == intra
    assert max(seg) >= 1  # the sample does have several segments
    ax = _panels(plot.positions(run, 6))[0]
    assert [line.get_label() for line in ax.get_lines()] == ["segment id", "index within segment"]
    assert list(ax.get_lines()[0].get_ydata()) == seg
    assert [t.get_text() for t in ax.get_xticklabels()] == s.tokens


def test_positions_needs_cope_or_bipe(runs):
    with pytest.raises(ValueError, match="cope.*bipe"):
        plot.positions(runs["rope"], 0)
    with pytest.raises(ValueError, match="no CoPE"):
        plot.cope_positions(runs["bipe-alibi"], 0)
    with pytest.raises(ValueError, match="no BiPE"):
        plot.bipe_ids(runs["cope"], 0)
    with pytest.raises(ValueError, match="per token"):
        plot.positions(runs["bipe-alibi"], 0, layers=[0])


# ---- bias --------------------------------------------------------------------------------


def test_alibi_bias_is_minus_slope_times_distance():
    d = plot.bias_curves("alibi", max_distance=20, n_heads=4)
    slopes = synthlab.build_model("alibi", n_heads=4).blocks[0].attn.biases[0].slopes.numpy()
    np.testing.assert_allclose(slopes, alibi_slopes(4))
    assert d.distance.tolist() == list(range(21))
    np.testing.assert_allclose(d.bias[0], -slopes[:, None] * np.arange(21), rtol=1e-6)
    assert d.rotary is None and not d.initial
    ax = _panels(plot.bias("alibi", max_distance=20, heads=[0, 3]))[0]
    assert [line.get_label() for line in ax.get_lines()] == ["head 0", "head 3"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), -slopes[3] * np.arange(21), rtol=1e-6)


def test_bias_of_a_run_reads_its_model(runs):
    run = synthlab.load_run(runs["bipe-alibi"])
    slopes = run.model.blocks[0].attn.biases[0].slopes.numpy()  # x 96 on segment distance
    d = plot.bias_curves(runs["bipe-alibi"], max_distance=10)
    assert d.index == "segment" and not d.initial
    np.testing.assert_allclose(d.bias[0], -slopes[:, None] * np.arange(11), rtol=1e-6)


@pytest.mark.parametrize("pe", ["rope", "xpos"])
def test_rotary_similarity(pe):
    d = plot.bias_curves(pe, max_distance=40, d_model=32, n_heads=2, seed=3)
    q = d.q
    assert d.rotary[0] == pytest.approx(float(q @ q), rel=1e-5)  # |q|^2 at distance 0
    assert d.rotary_mean[0] == pytest.approx(1.0, rel=1e-5)
    if pe == "rope":  # sum over pairs (2k, 2k+1) of their energy times cos(d theta_k)
        theta = 10000.0 ** (-2 * np.arange(8) / 16)
        energy = q[0::2] ** 2 + q[1::2] ** 2
        want = (energy[None, :] * np.cos(np.arange(41)[:, None] * theta[None, :])).sum(-1)
        np.testing.assert_allclose(d.rotary, want, atol=1e-5)
        assert not np.allclose(d.rotary, d.rotary[0])


def test_learned_bias_from_a_spec_is_marked_initial():
    d = plot.bias_curves("kerple", max_distance=8)
    assert d.initial and d.bias[0].shape == (4, 9)
    fig = plot.bias("kerple", max_distance=8)  # the suptitle is one of its texts (get_suptitle is matplotlib 3.8)
    assert any("initial" in t.get_text() for t in fig.texts)


@pytest.mark.parametrize("pe", ["cope", "nope", "learned"])
def test_bias_has_no_picture_for_content_dependent_or_absent_signals(pe):
    with pytest.raises(ValueError, match="alibi.*rope"):
        plot.bias(pe)


# ---- glitches ----------------------------------------------------------------------------


def test_glitch_rates_match_a_direct_count_and_the_runs_read_error(runs):
    run = synthlab.load_run(runs["rope"])
    g = plot.glitch_rates(run, "ood-sparse")
    edges = g.edges.tolist()
    assert edges == [2, 4, 8, 16, 32]
    reads, errors, dist = np.zeros(4, int), np.zeros(4, int), []
    for s in run.task.sample("ood-sparse", 32, seed=0):
        with torch.no_grad():
            pred = run.model(torch.as_tensor(s.ids).unsqueeze(0))[0].argmax(-1)
        last = None
        for t in range(0, len(s.tokens), 2):
            if s.tokens[t] == "w":
                last = t
            elif s.tokens[t] == "r":
                dist.append(t - last)
                b = next(k for k in range(4) if edges[k] <= t - last < edges[k + 1])
                reads[b] += 1
                errors[b] += int(pred[t]) != int(s.ids[t + 1])
    assert g.distance.tolist() == dist
    assert g.reads.tolist() == reads.tolist() and g.errors.tolist() == errors.tolist()
    rate = g.error_rate
    ok = reads > 0
    np.testing.assert_allclose(rate[ok], errors[ok] / reads[ok])
    assert np.all((rate[ok] >= 0) & (rate[ok] <= 1)) and np.all(np.isnan(rate[~ok]))
    # the same samples as the run's evaluation: the totals are its read error on the split
    rec = next(m for m in run.metrics if m.get("split") == "ood-sparse")
    assert g.wrong.mean() == pytest.approx(rec["read_error"], abs=1e-9)
    ax = _panels(plot.glitches(run))[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2-3", "4-7", "8-15", "16-31"]
    np.testing.assert_allclose([b.get_height() for b in ax.patches], 100 * np.nan_to_num(rate))


def test_glitch_rates_custom_edges_and_bad_input(runs):
    run = synthlab.load_run(runs["cope"])
    g = plot.glitch_rates(run, "test", n=8, edges=[2, 10, 100])
    assert g.n_samples == 8 and g.reads.sum() == len(g.distance) and g.labels == ["2-9", "10-99"]
    with pytest.raises(ValueError, match="increasing"):
        plot.glitch_rates(run, edges=[4, 2])
    with pytest.raises(ValueError, match="positive"):
        plot.glitch_rates(run, n=0)
    with pytest.raises(ValueError, match="flip-flop runs only.*counting"):
        plot.glitches(dataclasses.replace(run, task=generators.get_task("counting")))


def test_figures_are_not_pyplot_managed(runs):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plot.bias("rope", max_distance=8)
    plot.glitches(runs["rope"], n=4)
    assert plt.get_fignums() == before
