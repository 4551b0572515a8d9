"""Looking inside a run (docs/inspection.md): the hook points' names and shapes, the cached
pattern against the model's own attention, CoPE's gates and positions against the attention
they make, encode / decode, token lists in synthlab.plot, and results()' run_dir column.
Runs on the lessons' shipped checkpoints (notebooks/checkpoints), which load in a second."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import synthlab
from synthlab import plot
from synthlab.run.runs import LoadedRun

CKPT = Path(__file__).resolve().parents[2] / "notebooks" / "checkpoints"


@pytest.fixture(scope="module")
def runs():
    names = {
        "rope": "flipflop-rope",
        "cope": "flipflop-cope",
        "bipe-rope": "arithmetic-bipe-rope",
        "nope+dape:k=3": "mqar-nope-dape3",
        "t5": "flipflop-t5",
    }
    return {pe: synthlab.load_run(CKPT / name) for pe, name in names.items()}


def _sample_ids(run, split="test", i=0):
    s = run.task.sample(split, 1, seed=0, start=i)[0]
    return torch.as_tensor(s.ids).unsqueeze(0)


@pytest.mark.parametrize("pe", ["rope", "cope", "bipe-rope", "nope+dape:k=3", "t5"])
def test_hook_points_have_the_documented_names_and_shapes(runs, pe):
    run = runs[pe]
    ids = torch.cat([_sample_ids(run, i=0), _sample_ids(run, i=0)])  # B = 2 (same length)
    B, T = ids.shape
    logits, cache = run.run_with_cache(ids)
    m = run.model
    H, d_h = m.n_heads, m.d_model // m.n_heads
    assert logits.shape == (B, T, m.vocab_size)
    expected = {}
    for i in range(m.n_layers):
        for what, shape in (
            ("q", (B, H, T, d_h)),
            ("k", (B, H, T, d_h)),
            ("v", (B, H, T, d_h)),
            ("scores", (B, H, T, T)),
            ("pattern", (B, H, T, T)),
        ):
            expected[f"blocks.{i}.attn.{what}"] = shape
        if m.spec.has("cope"):
            expected[f"blocks.{i}.attn.cope.gates"] = expected[f"blocks.{i}.attn.cope.positions"] = (B, H, T, T)
    if m.spec.bipe:
        expected["bipe.segments"] = expected["bipe.intra"] = (B, T)
    assert {k: tuple(v.shape) for k, v in cache.items()} == expected
    assert cache.tokens == [run.decode(ids[0])] * 2
    assert re.search(rf"^blocks\.0\.attn\.pattern +\({B}, {H}, {T}, {T}\)$", repr(cache), re.M)
    # the names are the attention modules' own names
    assert {n.rsplit(".", 1)[0] for n in expected if n.startswith("blocks.") and ".cope." not in n} <= {
        name for name, _ in m.named_modules()
    }


@pytest.mark.parametrize("pe", ["rope", "cope", "bipe-rope", "nope+dape:k=3", "t5"])
def test_cached_pattern_is_the_models_attention_and_logits_unchanged(runs, pe):
    run = runs[pe]
    ids = _sample_ids(run, "test", 3)
    with torch.no_grad():
        fast = run.model(ids)
        logits_att, atts = run.model(ids, return_attention=True)
    logits, cache = run.run_with_cache(ids)
    for i, att in enumerate(atts):
        torch.testing.assert_close(cache[f"blocks.{i}.attn.pattern"], att, rtol=0, atol=0)
    torch.testing.assert_close(logits, logits_att, rtol=0, atol=0)
    torch.testing.assert_close(logits, fast, rtol=1e-4, atol=1e-5)  # the fast path rounds otherwise
    rows = cache["blocks.0.attn.pattern"].sum(-1)
    torch.testing.assert_close(rows, torch.ones_like(rows))


def test_scores_are_q_k_over_sqrt_d_and_make_the_pattern_without_a_position_term(runs):
    run = runs["rope"]
    _, cache = run.run_with_cache(_sample_ids(run))
    q, k = cache["blocks.1.attn.q"], cache["blocks.1.attn.k"]
    S = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    torch.testing.assert_close(cache["blocks.1.attn.scores"], S, rtol=1e-5, atol=1e-5)
    T = S.shape[-1]
    A = torch.softmax(S.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")), -1)
    torch.testing.assert_close(cache["blocks.1.attn.pattern"], A, rtol=1e-4, atol=1e-6)


def test_cope_gates_and_positions_make_the_cached_pattern(runs):
    """softmax(scores + q . e[p]) with e interpolated at the cached positions is the pattern:
    the gates and positions are the ones the layer used."""
    run = runs["cope"]
    _, cache = run.run_with_cache(_sample_ids(run, "ood-sparse", 1))
    for i, block in enumerate(run.model.blocks):
        g, p = cache[f"blocks.{i}.attn.cope.gates"], cache[f"blocks.{i}.attn.cope.positions"]
        T = g.shape[-1]
        future = torch.ones(T, T, dtype=torch.bool).triu(1)
        assert (g[..., future] == 0).all() and (g >= 0).all() and (g <= 1).all()
        # p_ij = sum of the gates from j to i, clamped to npos - 1
        torch.testing.assert_close(
            p, g.flip(-1).cumsum(-1).flip(-1).clamp(max=block.attn.cope.npos - 1), rtol=1e-4, atol=1e-4
        )  # sums of 128 gates in another order
        table = cache[f"blocks.{i}.attn.q"] @ block.attn.cope.pos_emb.detach()  # flip-flop cope: no rotary, q = q_raw
        table = torch.cat([table, table[..., -1:]], -1)
        lo = p.long()
        low, high = torch.gather(table, -1, lo), torch.gather(table, -1, lo + 1)
        logits = cache[f"blocks.{i}.attn.scores"] + low + (p - lo) * (high - low)
        A = torch.softmax(logits.masked_fill(future, float("-inf")), -1)
        torch.testing.assert_close(cache[f"blocks.{i}.attn.pattern"], A, rtol=1e-4, atol=1e-5)


def test_bipe_ids_count_segments_and_restart_after_each_equals(runs):
    run = runs["bipe-rope"]
    text = "<bos> 2 - ( 4 - 4 ) = 2 - 0 = 2 <eos>"
    _, cache = run.run_with_cache(text)
    assert cache["bipe.segments"][0].tolist() == [0] * 9 + [1] * 4 + [2] * 2
    assert cache["bipe.intra"][0].tolist() == [*range(9), *range(4), *range(2)]


def test_encode_decode_round_trip_and_errors(runs):
    run = runs["rope"]
    text = "w 1 i 0 r 1"
    ids = run.encode(text)
    assert ids.dtype == torch.long and ids.shape == (6,)
    assert ids.tolist() == [run.task.token_id(t) for t in text.split()]
    assert run.decode(ids) == text.split() and run.encode(text.split()).tolist() == ids.tolist()
    assert run.decode(torch.stack([ids, ids])) == [text.split()] * 2
    s = run.task.sample("test", 1, seed=0)[0]
    assert run.decode(run.encode(s.tokens)) == s.tokens
    assert run.decode([run.pad_id]) == ["<pad>"]
    with pytest.raises(ValueError, match="'x' is not in task 'flipflop'"):
        run.encode("w 1 x")
    with pytest.raises(ValueError, match="0..5"):
        run.decode([99])
    with pytest.raises(ValueError, match="non-empty"):
        run.encode([])


def test_run_with_cache_takes_text_tokens_ids_and_samples_alike(runs):
    run = runs["rope"]
    s = run.task.sample("ood-sparse", 1, seed=0)[0]
    caches = [run.run_with_cache(x)[1] for x in (" ".join(s.tokens), s.tokens, s.ids, torch.as_tensor(s.ids), s)]
    for c in caches[1:]:
        torch.testing.assert_close(c["blocks.1.attn.pattern"], caches[0]["blocks.1.attn.pattern"], rtol=0, atol=0)


def test_run_with_cache_refuses_a_users_model(runs):
    r = runs["rope"]
    other = LoadedRun(r.run_dir, r.config, r.task, torch.nn.Linear(2, 2), r.metrics)
    with pytest.raises(ValueError, match="user's factory"):
        other.run_with_cache("w 1")


def test_attention_maps_and_positions_take_a_token_list(runs):
    run = runs["cope"]
    s = run.task.sample("test", 1, seed=0)[0]
    by_sample, by_tokens = plot.attention_maps(run, s), plot.attention_maps(run, s.tokens)
    np.testing.assert_array_equal(by_tokens.maps, by_sample.maps)
    assert by_tokens.tokens == s.tokens and by_tokens.scored.size == 0 and "your tokens" in by_tokens.title
    pos = plot.cope_positions(run, " ".join(s.tokens[:20]))
    assert pos.gates.shape == (2, 4, 20, 20)
    assert len(plot.attention(run, "w 1 i 0 r", layers=[1], heads=[0]).axes) >= 1


def test_results_has_a_run_dir_column(tmp_path):
    rec = synthlab.train("flipflop", "rope", preset="smoke", out=tmp_path)
    df = synthlab.results(tmp_path)
    assert set(df.run_dir) == {str(tmp_path / rec["run_id"])}
    assert synthlab.load_run(df.run_dir.iloc[0]).config["run_id"] == rec["run_id"]
    # records whose directories are not beside them: empty
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "results.jsonl").write_text(json.dumps(rec) + "\n")
    assert synthlab.results(moved).run_dir.isna().all()
