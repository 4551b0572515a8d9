"""Batched seeds: S models of one config run as one stacked model through
torch.func.vmap (synthlab/model/stacked.py) give, slice by slice, the outputs and gradients of
the S models run separately, for every encoding, on the PyTorch path and with the native CPU
kernels (whose custom ops have vmap rules)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap

from synthlab.model import COMPONENTS, build_model, native, parse_pe
from synthlab.model.processors import DAPE
from synthlab.model.stacked import stack_models

S, B, T, V = 3, 2, 24, 11
SEP = 1  # BiPE's separator token: several segments per row

# every registered encoding, and the combinations / variants the sweeps and the native paths use
SPECS = list(COMPONENTS) + [
    "kerple+dape:k=3",
    "nope+dape",
    "rope+dape",
    "fire+dape:k=5",
    "cope+rope",
    "cope:npos=8",
    "cope:sep_keys=1",
    "cope-alibi:sep_keys=1",
    "cope+t5",
    "cope-alibi+t5",
    "cope:layer_tables=1",
    "t5:layer_tables=1",
    "kerple:kind=power",
    "fire:L=8",
]
BIDIRECTIONAL = [s for s in SPECS if not parse_pe(s).causal_only]

needs_kernels = pytest.mark.skipif(
    native._compiler() is None or native.cope_kernel() is None or native.dape_kernel() is None,
    reason="native kernels unavailable",
)


@pytest.fixture(params=["native", "pytorch"])
def kernels(request, monkeypatch):
    if request.param == "native":
        if native._compiler() is None or native.cope_kernel() is None or native.dape_kernel() is None:
            pytest.skip("native kernels unavailable (no C++ compiler)")
    else:
        monkeypatch.setenv("SYNTHLAB_NATIVE", "0")
    return request.param


def _models(pe, causal=True, n=S, dropout=0.0):
    models = []
    for seed in range(n):
        torch.manual_seed(seed)
        m = build_model(
            pe=pe,
            vocab_size=V,
            d_model=16,
            n_layers=2,
            n_heads=2,
            max_len=32,
            dropout=dropout,
            causal=causal,
            separator_ids=(SEP,),
        )
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "pos_emb" in name:  # CoPE's table starts at 0: make the position term matter
                    p.normal_(0.0, 0.5)
        models.append(m)
    return models


def _loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def _check(pe, causal):
    models = _models(pe, causal)
    stacked = stack_models(models)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, V, (S, B, T), generator=g)
    targets = torch.randint(0, V, (S, B, T), generator=g)

    logits = stacked(ids)
    assert logits.shape == (S, B, T, V)
    sum(_loss(logits[s], targets[s]) for s in range(S)).backward()

    for s, m in enumerate(models):
        ref = m(ids[s])
        _loss(ref, targets[s]).backward()
        torch.testing.assert_close(logits[s], ref, atol=1e-5, rtol=1e-4, msg=lambda msg, s=s: f"seed {s} logits: {msg}")
        for name, p in m.named_parameters():
            got = stacked.params[name].grad
            if p.grad is None:
                assert got is None or not got[s].any(), name
                continue
            torch.testing.assert_close(
                got[s],
                p.grad,
                atol=1e-5,
                rtol=1e-4,
                msg=lambda msg, s=s, name=name: f"seed {s} gradient of {name}: {msg}",
            )


@pytest.mark.parametrize("pe", SPECS)
def test_stacked_equals_separate(pe, kernels):
    _check(pe, causal=True)


@pytest.mark.parametrize("pe", BIDIRECTIONAL)
def test_stacked_equals_separate_bidirectional(pe, kernels):
    _check(pe, causal=False)


def test_unstack_round_trip():
    models = _models("kerple+dape:k=3")
    stacked = stack_models(models)
    ids = torch.randint(0, V, (S, B, T))
    for s, m in enumerate(stacked.unstack()):  # untrained: the same weights
        assert m is not models[s]
        for (n1, p1), (n2, p2) in zip(m.named_parameters(), models[s].named_parameters()):
            assert n1 == n2 and torch.equal(p1, p2)
    opt = torch.optim.SGD(stacked.parameters(), lr=0.1)
    stacked(ids).square().mean().backward()
    opt.step()
    back = stacked.unstack()
    logits = stacked(ids).detach()
    for s, m in enumerate(back):
        for name, p in m.named_parameters():
            assert torch.equal(p, stacked.params[name][s]), name
        assert not torch.equal(back[s].lm_head.weight, models[s].lm_head.weight)  # trained, originals untouched
        torch.testing.assert_close(m(ids[s]), logits[s], atol=1e-5, rtol=1e-4)


def test_tied_tables_stay_tied():
    """CoPE's and T5's tables are one tensor in every layer: stacked once, tied again on unstack."""
    stacked = stack_models(_models("cope+t5"))
    assert sum("pos_emb" in n for n in stacked.params) == 1
    m = stacked.unstack()[1]
    assert m.blocks[0].attn.cope.pos_emb is m.blocks[1].attn.cope.pos_emb


def test_kerple_projection_reaches_the_stacked_parameters():
    """KERPLE clamps its parameters in place before use: under vmap on the stacked tensors."""
    models = _models("kerple")
    with torch.no_grad():
        models[1].blocks[0].attn.biases[0].r1[0] = -0.5
    stacked = stack_models(models)
    ids = torch.randint(0, V, (S, B, T))
    logits = stacked(ids)
    assert stacked.params["blocks.0.attn.biases.0.r1"][1, 0] == 0.01
    torch.testing.assert_close(logits[1], models[1](ids[1]), atol=1e-5, rtol=1e-4)
    assert models[1].blocks[0].attn.biases[0].r1[0] == 0.01
    # outside autograd's version counter, as on one model: two forwards, then one backward
    (logits.sum() + stacked(ids).sum()).backward()


def test_dropout_refused_in_training_mode():
    stacked = stack_models(_models("rope", dropout=0.1))
    ids = torch.randint(0, V, (S, B, T))
    with pytest.raises(ValueError, match="dropout"):
        stacked(ids)
    stacked.eval()  # evaluation draws nothing
    assert stacked(ids).shape == (S, B, T, V)


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        stack_models(_models("rope"))(torch.randint(0, V, (B, T)))
    with pytest.raises(ValueError, match="one config"):
        stack_models(_models("rope", n=1) + _models("alibi", n=1))


@needs_kernels
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias_rows", [0, 1, B, "shared"])
def test_dape_kernel_vmapped_over_inputs_only(causal, bias_rows):
    """The fold branch of the vmap rule: weights shared by the vmapped slices, S vmapped, the
    bias vmapped ((1, H, T, T) or (B, H, T, T) per slice), one (1, H, T, T) for all, or none."""
    torch.manual_seed(0)
    H = 2
    d = DAPE(H, with_bias=bias_rows != 0, hidden=8, k=3, causal=causal)
    Ss = torch.randn(S, B, H, T, T, requires_grad=True)
    w = (d.conv1.weight, d.conv1.bias, d.conv2.weight, d.conv2.bias)

    def run(x, b):
        return torch.ops.synthlab.dape_scores(x, b, *w, causal, False)

    if bias_rows == "shared":
        bias = torch.randn(1, H, T, T, requires_grad=True)
        out = vmap(lambda x: run(x, bias))(Ss)
        ref = torch.stack([run(Ss[s], bias) for s in range(S)])
    else:
        bias = torch.randn(S, max(bias_rows, 1), H, T, T, requires_grad=True) if bias_rows else None
        out = vmap(run)(Ss, bias) if bias is not None else vmap(lambda x: run(x, None))(Ss)
        ref = torch.stack([run(Ss[s], None if bias is None else bias[s]) for s in range(S)])
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref).masked_fill(torch.isinf(ref), 0.0)
    inputs = [Ss, *w] + ([bias] if bias is not None else [])
    got = torch.autograd.grad((out.masked_fill(torch.isinf(out), 0.0) * g).sum(), inputs)
    want = torch.autograd.grad((ref.masked_fill(torch.isinf(ref), 0.0) * g).sum(), inputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("p_dim, pad_dim", [(0, None), (1, None), (2, None), (0, 0), (None, 0)])
def test_padded_leaky_relu_vmap_rule_equals_a_loop(p_dim, pad_dim):
    # DAPE V2's in-place LeakyReLU + column zeroing, vmapped over any dim of P and of pad
    from synthlab.model.native.dape_packed import _PaddedLeakyReLU

    torch.manual_seed(0)
    V, D, N = 3, 4, 7
    P = torch.randn(V, D, N)
    pads = torch.tensor([[0, 6], [1, 3], [2, 5]])
    pad = pads if pad_dim is not None else pads[0]
    want = []
    for i in range(V):
        x = (P[i] if p_dim is not None else P[0]).clone().requires_grad_()
        y = _PaddedLeakyReLU.apply(x.clone(), pad[i] if pad_dim is not None else pad)
        (g,) = torch.autograd.grad((y * torch.arange(N)).sum(), x)
        want.append((y.detach(), g))
    base = (P.movedim(0, p_dim) if p_dim is not None else P[0]).clone().requires_grad_()

    def f(x, q):
        return _PaddedLeakyReLU.apply(x.clone(), q)  # clone keeps the vmapped dim where it is

    out = torch.func.vmap(f, in_dims=(p_dim, pad_dim))(base, pad)
    (grad,) = torch.autograd.grad((out * torch.arange(N)).sum(), base)
    for i in range(V):
        assert torch.equal(out[i].detach(), want[i][0])
    if p_dim is not None:
        assert torch.allclose(grad.movedim(p_dim, 0), torch.stack([g for _, g in want]))
    else:
        assert torch.allclose(grad, sum(g for _, g in want))


@needs_kernels
@pytest.mark.parametrize("pe", ["cope", "cope+rope", "cope-alibi"])
def test_stacked_cope_under_cpu_autocast_keeps_the_pytorch_path(pe, monkeypatch):
    """train.precision=bf16-mixed with batched seeds: under vmap nn.Linear with stacked weights and
    bias is not autocast (q stays float32) while q . pos_emb is a bfloat16 matmul. The C++ kernel,
    which reads every operand as float32, read that bfloat16 table past its end (NaN logits or a
    crash); under CPU autocast the PyTorch path runs, as it does for a single model."""
    from synthlab.model.native import cope as native_cope

    real = native_cope._attention

    def checked(q, k, v, table, *rest):
        assert table is None or table.dtype == torch.float32, f"native CoPE kernel given a {table.dtype} table"
        return real(q, k, v, table, *rest)

    monkeypatch.setattr(native_cope, "_attention", checked)
    stacked = stack_models(_models(pe, n=2))
    ids = torch.randint(0, V, (2, B, T), generator=torch.Generator().manual_seed(7))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = stacked(ids)
        monkeypatch.setenv("SYNTHLAB_NATIVE", "0")
        ref = stacked(ids)
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, ref, atol=0, rtol=0)
