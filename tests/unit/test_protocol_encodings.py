"""Encodings as their papers and reference code define them: FIRE's learned threshold,
sqrt(d) token scaling under sinusoidal APE, CoPE's and T5's tables shared across layers, CoPE-ALiBi's
App. C slopes, KERPLE's projected (not clamped) parameters, and the reload of runs saved before."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_model

import synthlab
from synthlab import generators
from synthlab.core.errors import DamagedFile
from synthlab.model import build_model, parse_pe
from synthlab.model.encoders.bias import FIRE, Kerple, alibi_slopes
from synthlab.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")


V = 11


def _model(pe: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    return build_model(pe=pe, **{"vocab_size": V, "d_model": 32, "n_layers": 3, "n_heads": 4, "max_len": 64, **kw})


def _fire(T: int, **kw) -> tuple[FIRE, object]:
    """A FIRE module and the position context of a (1, T) batch with positions 0..T-1."""
    m = _model("fire", n_layers=1, **kw)
    return m.blocks[0].attn.biases[0], m._context(torch.zeros(1, T, dtype=torch.long), None, None)


# ---- FIRE: the threshold is learned through a multiplier ---------------------------------------


@pytest.mark.parametrize("direction", [-1.0, 1.0])
def test_fire_threshold_moves_under_training(direction):
    """Li et al. 2023 learn L' = |m| L_fixed. With L learned raw, Adam moves it by about lr per step,
    so it stayed at 511-512 in whole runs; through m it moves L_fixed times faster. The loss here
    wants larger normalised distances psi(i-j) / psi(max(L', i)) (direction -1: a smaller L') or
    smaller ones (+1: a larger L')."""
    fire, ctx = _fire(32)
    with torch.no_grad():  # f increasing in its input, so the bias grows with the normalised distance
        fire.mlp[0].weight.fill_(1.0), fire.mlp[0].bias.zero_(), fire.mlp[2].weight.fill_(1.0), fire.mlp[2].bias.zero_()
    opt = torch.optim.Adam(fire.parameters(), lr=1e-2)
    start = fire.threshold.item()
    assert start == 512.0
    for _ in range(30):
        opt.zero_grad()
        (direction * fire(ctx).mean()).backward()
        opt.step()
    moved = fire.threshold.item() - start
    assert moved * direction > 50.0, f"threshold moved by {moved:.2f} only"  # raw L: <= 0.3 in 30 steps of 1e-2


def test_fire_interpolates_progressively_past_the_threshold():
    """Queries i > L' use psi(i - j) / psi(i): the bias at one distance then changes with i, while
    for i <= L' it is the same at every i."""
    T, d = 32, 3
    fire, ctx = _fire(T)
    with torch.no_grad():
        fire.L_multiplier.fill_(8.0 / 512.0)  # L' = 8 < T
        bias = fire(ctx)[0, 0]  # (T, T), head 0
    diag = torch.stack([bias[i, i - d] for i in range(d, T)])  # b(i, i - d), i = d..T-1
    below, above = diag[: 8 - d + 1], diag[8 - d + 1 :]  # i <= 8, i > 8
    assert torch.allclose(below, below[0].expand_as(below), atol=1e-6)
    assert (above[1:] - above[:-1]).abs().min() > 1e-6  # changes with every step of i


@pytest.mark.parametrize("L", [30.0, 31.0, 31.5, 200.0])
def test_fire_fast_path_equals_full_map_at_the_switch(L):
    """The distance lookup (T - 1 <= L') and the full (T, T) map are the same function, on both
    sides of the switch (T = 32)."""
    m = _model("fire", n_layers=1)
    with torch.no_grad():
        m.blocks[0].attn.biases[0].L_multiplier.fill_(L / 512.0)
    x = torch.randint(0, V, (2, 32), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(m(x), m(x, positions=torch.arange(32).expand(2, 32)), atol=1e-6)


def test_fire_normaliser_has_eps():
    """psi(max(L', i)) + eps (the FIRE listing): with L' = 0 the query at i = 0 divides 0 by eps, not by 0."""
    fire, ctx = _fire(6)
    with torch.no_grad():
        fire.L_multiplier.zero_()
        assert torch.isfinite(fire(ctx)).all()


def test_fire_loads_a_state_dict_with_the_raw_threshold():
    """Runs saved before the multiplier hold ``L`` (the threshold itself): the same threshold loads."""
    fire, ctx = _fire(20)
    state = {k: v for k, v in fire.state_dict().items() if k != "L_multiplier"}
    fire.load_state_dict({**state, "L": torch.tensor(-12.0)})  # used as |L|
    assert fire.threshold.item() == pytest.approx(12.0)


def test_fire_threshold_can_be_set_in_the_spec_string():
    """The spec string is lower-cased, so ``fire:L=64`` once failed ("unknown parameter 'l'")."""
    spec = parse_pe("fire:L=64")
    assert spec.params["fire"]["L"] == 64.0 and parse_pe(spec.name) == spec
    assert _model("fire:L=64").blocks[0].attn.biases[0].threshold.item() == 64.0


# ---- sinusoidal APE: token embeddings scaled by sqrt(d) -----------------------------------------


def _embedding_parts(m: Transformer, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(input of the first block, the token part of it): the residual stream before block 0."""
    seen = {}
    hook = m.drop.register_forward_hook(lambda mod, inp, out: seen.setdefault("x", inp[0].detach()))
    with torch.no_grad():
        m(tokens)
    hook.remove()
    return seen["x"], m.wte(tokens).detach()


@pytest.mark.parametrize("d", [64, 256])
def test_sinusoidal_token_to_position_rms_at_init(d):
    """Token : position RMS at init is 0.02 sqrt(d) : sqrt(1/2) (the CHE reference's scaling), not
    0.02 : sqrt(1/2) = 1 : 35 (the position signal swamping the tokens)."""
    torch.manual_seed(0)
    m = build_model(pe="sinusoidal", vocab_size=2048, d_model=d, n_layers=1, n_heads=4, max_len=128)
    tokens = torch.randperm(2048)[:1024].view(8, 128)
    x, _ = _embedding_parts(m, tokens)
    pos = m.abs_enc(torch.arange(128))  # (T, d), RMS sqrt(1/2) exactly (sin^2 + cos^2 = 1 per pair)
    ratio = float((x - pos).pow(2).mean().sqrt() / pos.pow(2).mean().sqrt())
    assert ratio == pytest.approx(0.02 * math.sqrt(2 * d), rel=0.05)


@pytest.mark.parametrize("pe", ["learned", "bipe-rope", "rope", "nope", "cope", "alibi"])
def test_token_embeddings_unscaled_without_a_sinusoid(pe):
    """A learned table starts at the token embeddings' scale (std 0.02 both, GPT-2): 1 : 1, unscaled.
    Without an absolute encoder the residual stream starts at the token embeddings as before."""
    torch.manual_seed(0)
    m = build_model(pe=pe, vocab_size=2048, d_model=64, n_layers=1, n_heads=4, max_len=128)
    tokens = torch.randperm(2048)[:1024].view(8, 128)
    x, tok = _embedding_parts(m, tokens)
    if pe == "learned":
        pos = x - tok
        assert torch.allclose(pos, m.abs_enc(torch.arange(128)).detach().expand_as(pos), atol=1e-7)
        assert float(tok.pow(2).mean().sqrt() / pos.pow(2).mean().sqrt()) == pytest.approx(1.0, rel=0.1)
    elif pe != "bipe-rope":
        assert torch.equal(x, tok)


# ---- CoPE and T5: one table for the whole model ------------------------------------------------


def _tables(m: Transformer, pe: str) -> list[torch.Tensor]:
    if pe.startswith("cope"):
        return [b.attn.cope.pos_emb for b in m.blocks]
    return [b.attn.biases[0].table.weight for b in m.blocks]


@pytest.mark.parametrize(
    "pe,per_layer",
    [
        ("cope", "cope:layer_tables=1"),
        ("t5", "t5:layer_tables=1"),
        ("cope+rope", "cope:layer_tables=1+rope"),
        ("cope:sep_keys=1", "cope:sep_keys=1,layer_tables=1"),
    ],
)
def test_one_table_shared_by_every_layer(pe, per_layer):
    """CoPE (Golovneva et al. 2024; per-layer tables are App. D's ablation) and T5 (Raffel et al.
    2020) share one table across layers: one tensor, whose gradient sums every layer's use."""
    m = _model(pe)
    tables = _tables(m, pe)
    assert all(t is tables[0] for t in tables)
    assert _model(per_layer).num_params() - m.num_params() == (len(m.blocks) - 1) * tables[0].numel()
    x = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tables[0].normal_()
    m(x).square().mean().backward()
    # the same weights with a copy of the table per layer: the shared gradient is the sum of theirs
    sep = _model(per_layer)
    sep.load_state_dict(m.state_dict())  # the shared table appears under every layer's name
    sep(x).square().mean().backward()
    assert tables[0].grad.abs().sum() > 0
    assert torch.allclose(tables[0].grad, sum(t.grad for t in _tables(sep, pe)), atol=1e-6)


@pytest.mark.parametrize("pe", ["cope:layer_tables=1", "t5:layer_tables=1"])
def test_layer_tables_give_each_layer_its_own(pe):
    tables = _tables(_model(pe), pe)
    assert len({id(t) for t in tables}) == len(tables)
    assert parse_pe(pe).name == pe


def test_cope_alibi_uses_the_app_c_slopes():
    """App. C: 4 heads, slopes {m0, m0/2, m0/4, m0/8} for m0 in {1, 1/4, 1/16}; default m0 = 1/4
    (Press et al.'s 2^(-8h/H) are App. D's Wikitext ablation)."""
    m = _model("cope-alibi")
    for b in m.blocks:
        assert b.attn.cope.slopes.flatten().tolist() == [1 / 4, 1 / 8, 1 / 16, 1 / 32]
    assert _model("cope-alibi:m0=1").blocks[0].attn.cope.slopes.flatten().tolist() == [1, 1 / 2, 1 / 4, 1 / 8]
    assert parse_pe("cope-alibi:m0=0.0625").name == "cope-alibi:m0=0.0625"


# ---- KERPLE: parameters projected, gradient kept -------------------------------------------------


@pytest.mark.parametrize("kind,names", [("log", ("r1", "r2")), ("power", ("a", "p"))])
def test_kerple_gradient_flows_at_the_floor(kind, names):
    """The reference (chijames/KERPLE) clamps the values in place before use: a parameter that an
    optimiser step took below 0.01 is used at 0.01 and still gets its gradient (a clamp inside the
    graph gives it 0 and pins it there)."""
    m = _model(f"kerple:kind={kind}", n_layers=1)
    k: Kerple = m.blocks[0].attn.biases[0]
    with torch.no_grad():
        for n in names:
            getattr(k, n)[0] = -0.5
        getattr(k, names[0])[1] = 0.01
    x = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(0))
    m(x).square().mean().backward()
    for n in names:
        p = getattr(k, n)
        assert p.grad[0].item() != 0.0
        assert p[0].item() == pytest.approx(0.01)  # projected
    assert getattr(k, names[0]).grad[1].item() != 0.0


def test_kerple_values_stay_positive_under_training():
    """A loss that wants r1 and r2 negative: after each step they are used at >= 0.01."""
    m = _model("kerple", n_layers=1)
    k: Kerple = m.blocks[0].attn.biases[0]
    ctx = m._context(torch.zeros(1, 16, dtype=torch.long), None, None)
    opt = torch.optim.SGD([k.r1, k.r2], lr=0.5)
    for _ in range(10):
        opt.zero_grad()
        bias = k(ctx)  # (1, H, T, T), -r1 log(1 + r2 d) <= 0
        assert torch.isfinite(bias).all() and (bias <= 0).all()
        (-bias).sum().backward()  # wants r1, r2 smaller
        assert k.r1.grad.abs().min() > 0 and k.r2.grad.abs().min() > 0
        opt.step()
    k(ctx)
    assert k.r1.min().item() == pytest.approx(0.01) and k.r2.min().item() == pytest.approx(0.01)


# ---- runs saved before this revision reload as they were trained ---------------------------------


def _save_run(run_dir, model: Transformer, pe: str, revision: int | None) -> None:
    cfg = {
        "task": "flipflop",
        "task_params": {},
        "pe": pe,
        "max_len": model.max_len,
        "rotary_pairs": "interleaved",
        "model": {
            "d_model": model.d_model,
            "n_layers": model.n_layers,
            "n_heads": model.n_heads,
            "dropout": 0.0,
            "tie_embeddings": False,
            "causal": True,
        },
    }
    if revision is not None:
        cfg["pe_revision"] = revision
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg))
    save_model(model, str(run_dir / "model.safetensors"))


@pytest.mark.parametrize("pe", ["cope", "t5", "cope+dape:k=3"])
def test_old_run_with_per_layer_tables_reloads_exactly(tmp_path, pe):
    """A run saved before config.json recorded ``pe_revision`` had one table per layer: load_run
    rebuilds it with per-layer tables (the same function); read as the current revision, its
    weights do not fit (an error, not a silently different model)."""
    comp = pe.split("+")[0]
    vocab = len(generators.get_task("flipflop").vocab) + 1
    torch.manual_seed(0)
    old = build_model(
        pe=pe.replace(comp, f"{comp}:layer_tables=1", 1),
        vocab_size=vocab,
        d_model=32,
        n_layers=3,
        n_heads=4,
        max_len=64,
    ).eval()
    with torch.no_grad():
        for t in _tables(old, comp):
            t.normal_()  # a different table in every layer
    _save_run(tmp_path / "old", old, pe, revision=None)
    run = synthlab.load_run(tmp_path / "old")
    assert len({id(t) for t in _tables(run.model, comp)}) == 3
    x = torch.randint(0, vocab - 1, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(run.model(x), old(x))
    _save_run(tmp_path / "new", old, pe, revision=2)
    with pytest.raises(DamagedFile, match="state_dict"):  # exit 1 naming the file, never a different model
        synthlab.load_run(tmp_path / "new")


def test_current_run_reloads_with_its_shared_tables(tmp_path):
    vocab = len(generators.get_task("flipflop").vocab) + 1
    torch.manual_seed(0)
    m = build_model(pe="cope+rope", vocab_size=vocab, d_model=32, n_layers=3, n_heads=4, max_len=64).eval()
    with torch.no_grad():
        _tables(m, "cope")[0].normal_()
    _save_run(tmp_path / "run", m, "cope+rope", revision=2)
    run = synthlab.load_run(tmp_path / "run")
    x = torch.randint(0, vocab - 1, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(run.model(x), m(x))


def test_revision_1_keeps_the_old_forms():
    """Revision 1 (runs saved before): Press slopes for CoPE-ALiBi, unscaled tokens under sinusoidal APE."""
    spec = parse_pe("cope-alibi")
    old = Transformer(spec, vocab_size=V, d_model=32, n_layers=2, n_heads=4, revision=1)
    assert old.blocks[0].attn.cope.slopes.flatten().tolist() == pytest.approx(alibi_slopes(4))
    sin = Transformer(parse_pe("sinusoidal"), vocab_size=V, d_model=32, n_layers=1, n_heads=4, revision=1)
    tokens = torch.randint(0, V, (2, 10))
    x, tok = _embedding_parts(sin, tokens)
    assert torch.allclose(x - tok, sin.abs_enc(torch.arange(10)).expand_as(x), atol=1e-6)
    with pytest.raises(ValueError, match="revision"):
        Transformer(spec, vocab_size=V, revision=4)


# ---- ALiBi in encoder mode: the CHE reference's symmetry break -----------------------------


def _che_reference_alibi(n_heads: int, T: int) -> torch.Tensor:
    """models/positional_encodings.py of google-deepmind/neural_networks_chomsky_hierarchy,
    compute_alibi_encodings_biases, transcribed: -|i - j| + 0.5 below the diagonal, x slopes."""

    def tri(k: int) -> torch.Tensor:
        return torch.tril(torch.ones(T, T, dtype=torch.float64), diagonal=k)

    alibi = torch.zeros(T, T, dtype=torch.float64)
    alibi -= sum(tri(-i) for i in range(1, T))
    alibi -= sum(tri(-i).T for i in range(1, T))
    alibi += 0.5 * tri(-1)
    return alibi * torch.tensor(alibi_slopes(n_heads), dtype=torch.float64).view(-1, 1, 1)


@pytest.mark.parametrize("n_heads", [4, 6])
def test_alibi_encoder_bias_is_the_che_reference(n_heads):
    from synthlab.model.attention import PositionContext
    from synthlab.model.cache import TensorCache

    model = build_model(pe="alibi", vocab_size=V, d_model=8 * n_heads, n_layers=1, n_heads=n_heads, causal=False)
    alibi = model.blocks[0].attn.biases[0]
    ctx = PositionContext(
        9, False, torch.arange(9), True, None, None, TensorCache(), torch.device("cpu"), torch.float64
    )
    assert torch.allclose(alibi(ctx)[0], _che_reference_alibi(n_heads, 9))


def test_alibi_encoder_model_tells_left_from_right():
    """With a symmetric bias (pe revision 2) the whole encoder commutes with reversing the input:
    it cannot tell the token before from the token after. Revision 3 breaks that."""
    torch.manual_seed(0)
    x = torch.randint(0, V - 1, (2, 12))
    gaps = {}
    for revision in (2, 3):
        torch.manual_seed(0)
        m = Transformer(
            parse_pe("alibi"), vocab_size=V, d_model=32, n_layers=2, n_heads=4, causal=False, revision=revision
        ).eval()
        with torch.no_grad():
            gaps[revision] = (m(x.flip(1)).flip(1) - m(x)).abs().max().item()
    assert gaps[2] < 1e-5 and gaps[3] > 1e-3
