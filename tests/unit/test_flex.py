"""The FlexAttention path of the additive biases (``synthlab/model/flex.py``).

FlexAttention has no backward on CPU, so the score_mods are checked against each bias module's
own dense tensor by broadcasting (values and parameter gradients), and the flex forward of a
whole model against the float-mask path (eval, no gradient). The GPU test (compiled flex,
gradients) is in tests/integration/test_cuda.py."""

from __future__ import annotations

import pytest
import torch

from synthlab.model import build_model, flex

V = 11
FLEX_PE = ["alibi", "t5", "kerple", "kerple:kind=power", "fire", "alibi+t5"]
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]  # CPU: the reference form


def _model(pe: str, causal: bool = True, seed: int = 0, **kw):
    torch.manual_seed(seed)
    kw = {"vocab_size": V, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_len": 64, "causal": causal, **kw}
    m = build_model(pe=pe, **kw)
    with torch.no_grad():  # non-trivial learned biases (T5's table starts near 0)
        for name, p in m.named_parameters():
            if "table" in name:
                p.normal_(0, 0.5)
    return m


def _biases(model):
    return [b for block in model.blocks for b in block.attn.biases]


@pytest.fixture
def flex_on_cpu(monkeypatch):
    monkeypatch.setenv("SYNTHLAB_FLEX_ATTENTION", "1")
    monkeypatch.setattr(flex, "DEVICES", ("cuda", "cpu"))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pe", FLEX_PE)
def test_each_score_mod_is_the_modules_bias_values_and_gradients(pe, causal):
    T, H = 37, 4
    model = _model(pe, causal)
    ctx = model._context(torch.zeros(2, T, dtype=torch.long), None, None)
    q = torch.randn(2, H, T, 8)
    w = torch.randn(2, H, T, T)  # a random linear function of the bias, for its gradient
    for bias in _biases(model)[:2]:
        params = [p for p in bias.parameters() if p.requires_grad]
        want = bias(ctx, q).expand(2, H, T, T)
        got = flex.dense(bias.score_mod(ctx), 2, H, T)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (pe, (got - want).abs().max())
        if params:
            g_want = torch.autograd.grad((w * want).sum(), params)
            g_got = torch.autograd.grad((w * got).sum(), params)
            for a, b in zip(g_got, g_want):
                assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), pe


def test_fire_score_mod_holds_past_the_threshold():
    # queries past L' take the progressive interpolation psi(i - j) / psi(i): the dense module's
    # general branch; the score_mod has one form for both sides
    model = _model("fire")
    fire = _biases(model)[0]
    with torch.no_grad():
        fire.L_multiplier.fill_(10.0 / fire.L_fixed)  # L' = 10 < T - 1
    T = 40
    ctx = model._context(torch.zeros(1, T, dtype=torch.long), None, None)
    want = fire(ctx, None)
    got = flex.dense(fire.score_mod(ctx), 1, 4, T)
    assert torch.allclose(got, want, atol=1e-5)
    g_want = torch.autograd.grad(want.sum(), [fire.L_multiplier, fire.c])
    g_got = torch.autograd.grad(got.sum(), [fire.L_multiplier, fire.c])
    assert all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(g_got, g_want))
    assert g_want[0].abs() > 0  # the threshold is in play


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pe", FLEX_PE)
def test_a_model_on_the_flex_path_equals_the_float_mask_path(pe, causal, flex_on_cpu, monkeypatch):
    model = _model(pe, causal).eval()
    tokens = torch.randint(0, V, (2, 45))
    calls = []
    attend = flex.attend
    monkeypatch.setattr(flex, "attend", lambda *a, **k: calls.append(1) or attend(*a, **k))
    with torch.no_grad():
        got = model(tokens)
        assert len(calls) == 2  # every layer took it
        monkeypatch.setenv("SYNTHLAB_FLEX_ATTENTION", "0")
        want = model(tokens)
    assert len(calls) == 2
    assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (got - want).abs().max()


def test_the_flex_path_is_taken_only_where_it_applies(flex_on_cpu, monkeypatch):
    calls = []
    monkeypatch.setattr(flex, "attend", lambda *a, **k: calls.append(1))
    tokens = torch.randint(0, V, (2, 20))
    with torch.no_grad():
        _model("relative").eval()(tokens)  # Shaw: the bias reads the queries, no score_mod
        _model("alibi").eval()(tokens, positions=torch.arange(20) * 2)  # positions other than 0..T-1
        _model("alibi", dropout=0.1).train()(tokens)  # attention dropout in training
        _model("bipe-alibi").eval()(tokens)  # segment index
        _model("rope").eval()(tokens)  # no bias: plain SDPA
        monkeypatch.setattr(flex, "DEVICES", ("cuda",))
        _model("alibi").eval()(tokens)  # CPU tensors by default
    assert calls == []


def test_the_switch_is_off_unless_set(monkeypatch):
    monkeypatch.delenv("SYNTHLAB_FLEX_ATTENTION", raising=False)
    assert not flex.wanted()
    for word in ("1", "true", "on", "yes"):
        monkeypatch.setenv("SYNTHLAB_FLEX_ATTENTION", word)
        assert flex.wanted()
    monkeypatch.setenv("SYNTHLAB_FLEX_ATTENTION", "0")
    assert not flex.wanted()
