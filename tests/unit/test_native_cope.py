"""The native CPU kernel of CoPE (synthlab/model/native/cope_cpu.cpp): the same term and
gradients as CoPE's PyTorch path (Listing 1 of the paper), clamp included, and deterministic;
its fused attention (term, causal mask and softmax in one pass) equals softmax of that path,
and its attention fused from q, k, v (no (T, T) tensor) equals softmax(...) @ v of that path."""

from __future__ import annotations

import pytest
import torch

from synthlab.model import build_model, native
from synthlab.model.encoders.contextual import CoPE, cope_term
from synthlab.model.native import cope as native_cope

needs_kernel = pytest.mark.skipif(
    native._compiler() is None or native.cope_kernel() is None,
    reason="native CoPE kernel unavailable (no C++ compiler)",
)


def _trained_looking_cope(H, d_h, npos, alibi, sep_keys):
    """A CoPE module whose table is not zero (it starts at zero), so positions matter."""
    cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, sep_keys=sep_keys, alibi=alibi)
    if not alibi:
        with torch.no_grad():
            cope.pos_emb.normal_()
    return cope


def _native(cope, t):
    """Whether the dispatchers take the C++ kernel for this module and operand."""
    return native_cope.native_applies(t, None if cope.alibi else cope.pos_emb)


def _run(cope, q, S, x, future, g):
    term = cope(q, S, x, future)
    grads = torch.autograd.grad(
        (term.masked_fill(future, 0.0) * g).sum(), [q, S, *cope.parameters()], allow_unused=True
    )
    return term.masked_fill(future, 0.0).detach(), grads


@needs_kernel
@pytest.mark.parametrize(
    "H,T,npos,alibi,sep_keys",
    [
        (4, 1, 64, False, False),
        (4, 9, 64, False, False),
        (4, 40, 8, False, False),  # 8: most positions clamp
        (3, 33, 16, False, False),
        (1, 20, 4, False, True),
        (6, 17, 64, True, False),
        (4, 50, 5, True, False),
        (2, 130, 64, False, False),
    ],
)
def test_native_equals_pytorch_path_in_float64(H, T, npos, alibi, sep_keys):
    """Against the PyTorch path run in float64 (its float32 p = total - cumsum + g loses a few
    bits to cancellation; the kernel's direct suffix sum does not)."""
    torch.manual_seed(T * 7 + H)
    d_h = 8
    cope = _trained_looking_cope(H, d_h, npos, alibi, sep_keys)
    q = torch.randn(2, H, T, d_h, requires_grad=True)
    # logits spread so that gates reach both ends (0 and 1) and positions cross integer cells
    S = (3 * torch.randn(2, H, T, T)).requires_grad_()
    x = torch.randn(2, T, H * d_h)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    g = torch.randn(2, H, T, T)
    assert _native(cope, S)
    fast, fast_grads = _run(cope, q, S, x, future, g)

    ref_cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, sep_keys=sep_keys, alibi=alibi).double()
    ref_cope.load_state_dict(cope.state_dict())
    q64, S64 = q.detach().double().requires_grad_(), S.detach().double().requires_grad_()
    assert not _native(ref_cope, S64)
    ref, ref_grads = _run(ref_cope, q64, S64, x.double(), future, g.double())

    def close(a, b):  # float32 against float64, relative to the tensor's scale
        return (a.double() - b).abs().max() <= 5e-5 * b.abs().max().clamp_min(1.0)

    assert close(fast, ref)
    for name, a, b in zip(["q", "S", "params"], fast_grads, ref_grads):
        assert (a is None) == (b is None)
        assert a is None or close(a, b), f"gradient of {name} differs"
    if not sep_keys:  # no gradient reaches a future logit
        assert torch.all(fast_grads[1][..., future] == 0)


@needs_kernel
@pytest.mark.parametrize(
    "H,T,npos,alibi,sep_keys",
    [
        (4, 1, 64, False, False),
        (4, 2, 64, False, False),
        (4, 40, 8, False, False),
        (3, 33, 16, False, True),
        (5, 17, 64, True, False),
        (1, 20, 4, True, True),
        (2, 130, 64, False, False),
    ],
)
def test_fused_attention_equals_softmax_of_pytorch_path_in_float64(H, T, npos, alibi, sep_keys):
    """CoPE.attention (the native kernel's one pass: gates, positions, term, mask, softmax and
    the backward of all five) against softmax(masked(S + term)) by the PyTorch path in float64;
    gradients reach q (through S, the table and the gate keys), k and the CoPE parameters."""
    torch.manual_seed(T * 5 + H)
    d_h = 8
    cope = _trained_looking_cope(H, d_h, npos, alibi, sep_keys)
    q, k = torch.randn(2, H, T, d_h, requires_grad=True), torch.randn(2, H, T, d_h, requires_grad=True)
    x = torch.randn(2, T, H * d_h, requires_grad=True)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    w = torch.randn(2, H, T, T)

    def attention(c, q, k, x):  # logits spread so gates reach both ends and positions cross cells
        S = 3 * (q @ k.transpose(-2, -1))
        return c.attention(q, S, x, future)

    att = attention(cope, q, k, x)
    assert _native(cope, q)  # the fused path
    grads = torch.autograd.grad((att * w).sum(), [q, k, x, *cope.parameters()], allow_unused=True)
    ref_cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, sep_keys=sep_keys, alibi=alibi).double()
    ref_cope.load_state_dict(cope.state_dict())
    q64, k64, x64 = (t.detach().double().requires_grad_() for t in (q, k, x))
    ref = attention(ref_cope, q64, k64, x64)
    ref_grads = torch.autograd.grad(
        (ref * w.double()).sum(), [q64, k64, x64, *ref_cope.parameters()], allow_unused=True
    )

    def close(a, b):
        return (a.double() - b).abs().max() <= 5e-5 * b.abs().max().clamp_min(1.0)

    assert close(att, ref) and torch.all(att[..., future] == 0)
    assert torch.allclose(att.sum(-1), torch.ones(2, H, T), atol=1e-5)
    for name, a, b in zip(["q", "k", "x", "params"], grads, ref_grads):
        assert (a is None) == (b is None), name
        assert a is None or close(a, b), f"gradient of {name} differs"


def _cope_attention_by_pytorch(cope, q, k, v, future):
    """softmax(masked(q k^T / sqrt(d_h) + CoPE term)) @ v by the reference (any dtype)"""
    S = (q * cope.scale) @ k.transpose(-2, -1)
    term = cope_term(
        S, None if cope.alibi else q @ cope.pos_emb, cope.slopes if cope.alibi else None, cope.npos, future
    )
    att = torch.softmax((S + term).masked_fill(future, float("-inf")), dim=-1)
    return att @ v


@needs_kernel
@pytest.mark.parametrize(
    "H,T,d_h,npos,alibi",
    [
        (4, 1, 16, 64, False),
        (4, 2, 16, 64, False),
        (4, 17, 16, 8, False),  # 8: most positions clamp
        (3, 64, 16, 16, False),
        (2, 70, 32, 64, False),
        (3, 33, 8, 16, False),
        (2, 20, 7, 4, False),  # d_h % 16 != 0
        (5, 17, 16, 64, True),
        (4, 50, 24, 5, True),
        (2, 130, 16, 64, False),
        (2, 90, 16, 33, False),
        (2, 90, 16, 47, False),
        (2, 120, 16, 100, False),  # table in registers up to 64, then loads
    ],
)
def test_qkv_attention_equals_pytorch_path_in_float64(H, T, d_h, npos, alibi):
    """CoPE.attend (the kernel from q, k, v: scores, gates, positions, term, mask, softmax and
    the values in one pass per row; the backward recomputing each row from its log-sum-exp)
    against softmax(masked(S + term)) @ v by the PyTorch path in float64, values and the
    gradients of q, k, v and the table."""
    torch.manual_seed(T * 3 + d_h)
    cope = _trained_looking_cope(H, d_h, npos, alibi, False)
    # q, k spread so that gates reach both ends and positions cross integer cells
    q, k, v = (s * torch.randn(2, H, T, d_h) for s in (2.0, 2.0, 1.0))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    w = torch.randn(2, H, T, d_h)
    assert _native(cope, q)
    y = cope.attend(q, q, k, v, None, future, cope.scale)
    assert y.shape == (2, H, T, d_h)
    grads = torch.autograd.grad((y * w).sum(), [q, k, v, *cope.parameters()], allow_unused=True)

    ref_cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, alibi=alibi).double()
    ref_cope.load_state_dict(cope.state_dict())
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    assert not _native(ref_cope, q64)  # float64: no kernel
    ref = _cope_attention_by_pytorch(ref_cope, q64, k64, v64, future)
    ref_grads = torch.autograd.grad(
        (ref * w.double()).sum(), [q64, k64, v64, *ref_cope.parameters()], allow_unused=True
    )

    # float32 itself: the same PyTorch path in float32 (at T 130 the positions' rounding moves the
    # interpolated term by ~1e-4); the kernel may be off by a few times that, or 5e-5 of the scale
    q32, k32, v32 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    ref32 = _cope_attention_by_pytorch(cope, q32, k32, v32, future)
    ref32_grads = torch.autograd.grad((ref32 * w).sum(), [q32, k32, v32, *cope.parameters()], allow_unused=True)

    def close(a, b, a32):
        err, err32 = (a.double() - b).abs().max(), (a32.double() - b).abs().max()
        return err <= max(5e-5 * b.abs().max().clamp_min(1.0), 4 * err32)

    assert close(y, ref, ref32)
    for name, a, b, c in zip(["q", "k", "v", "table"], grads, ref_grads, ref32_grads):
        assert (a is None) == (b is None), name
        assert a is None or close(a, b, c), f"gradient of {name} differs"


@needs_kernel
def test_qkv_attention_rows_independent_of_batch_and_threads():
    """Each batch element is one work unit: its output does not depend on the others or on the
    thread count (the same bits)."""
    torch.manual_seed(1)
    cope = _trained_looking_cope(4, 16, 64, False, False)
    q, k, v = (torch.randn(5, 4, 40, 16) for _ in range(3))
    table = q @ cope.pos_emb
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.synthlab.cope_attention(q, k, v, table, None, 64, cope.scale)[0]
        torch.set_num_threads(2)
        two = torch.ops.synthlab.cope_attention(q, k, v, table, None, 64, cope.scale)[0]
    finally:
        torch.set_num_threads(before)
    alone = torch.ops.synthlab.cope_attention(q[3:4], k[3:4], v[3:4], table[3:4], None, 64, cope.scale)[0]
    assert torch.equal(one, two) and torch.equal(one[3:4], alone)


@needs_kernel
@pytest.mark.parametrize(
    "pe,dropout,train,fused",
    [
        ("cope", 0.0, True, True),
        ("cope-alibi", 0.0, True, True),
        ("cope+rope", 0.0, False, True),
        ("cope", 0.1, True, False),
        ("cope", 0.1, False, True),  # attention dropout needs the weights
        ("cope:sep_keys=1", 0.0, True, False),
        ("cope+t5", 0.0, True, False),
    ],
)
def test_model_takes_the_qkv_kernel_where_it_applies(pe, dropout, train, fused, monkeypatch):
    calls = []
    real = native_cope._attention
    monkeypatch.setattr(native_cope, "_attention", lambda *a: calls.append(1) or real(*a))
    m = build_model(pe=pe, vocab_size=11, d_model=32, n_layers=2, n_heads=2, max_len=24, dropout=dropout)
    m.train(train)
    m(torch.randint(0, 11, (2, 24)))
    assert len(calls) == (2 if fused else 0)


@needs_kernel
@pytest.mark.parametrize("alibi", [False, True])
def test_native_clamp_by_hand(alibi):
    """Logits 0: every gate is 0.5 (sigmoid' = 0.25), so p_ij = (i - j + 1) / 2, clamped at
    npos - 1 = 3 from i - j + 1 = 7 on. Table e[p] = p (q = 1): the term is min(p, 3) (CoPE-ALiBi:
    -m min(p, 3)); d term_ij / d S_it = 0.25 (x -m) for j <= t <= i while p_ij < 3, and 0 once
    p_ij is clamped."""
    T, npos, i = 12, 4, 11
    cope = CoPE(d_model=1, n_heads=1, npos=npos, alibi=alibi)
    if not alibi:
        with torch.no_grad():
            cope.pos_emb.copy_(torch.arange(4.0).view(1, 4))
    slope = -float(cope.slopes.flatten()[0]) if alibi else 1.0
    S = torch.zeros(1, 1, T, T, requires_grad=True)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert _native(cope, S)
    term = cope(torch.ones(1, 1, T, 1), S, torch.zeros(1, T, 1), future)[0, 0]
    ii, jj = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    p = ((ii - jj + 1) / 2).clamp(max=npos - 1)
    assert torch.allclose(term[~future], slope * p[~future], atol=1e-6)
    unclamped, clamped = i - 3, i - 8  # i - j + 1 = 4 (p = 2) and 9 (p = 4.5 -> 3)
    (g,) = torch.autograd.grad(term[i, unclamped], [S])
    want = torch.zeros(T)
    want[unclamped : i + 1] = 0.25 * slope
    assert torch.allclose(g[0, 0, i], want, atol=1e-7)
    (g,) = torch.autograd.grad(cope(torch.ones(1, 1, T, 1), S, torch.zeros(1, T, 1), future)[0, 0, i, clamped], [S])
    assert torch.all(g == 0)


@needs_kernel
def test_native_deterministic():
    torch.manual_seed(0)
    m = build_model(pe="cope", vocab_size=11, d_model=32, n_layers=2, n_heads=4, max_len=40)
    x = torch.randint(0, 11, (3, 40))

    def run():
        m.zero_grad(set_to_none=True)
        out = m(x)
        out.square().mean().backward()
        return [out.detach()] + [p.grad.clone() for p in m.parameters() if p.grad is not None]

    for a, b in zip(run(), run()):
        assert torch.equal(a, b)


@needs_kernel
@pytest.mark.parametrize(
    "pe,n_heads",
    [
        ("cope", 4),
        ("cope", 2),
        ("cope+rope", 4),
        ("cope-alibi", 4),
        ("cope:sep_keys=1", 4),
        ("cope+dape:k=3", 4),
        ("cope+t5", 4),
    ],
)
def test_model_same_logits_and_grads_with_and_without_kernel(pe, n_heads, monkeypatch):
    torch.manual_seed(0)
    m = build_model(pe=pe, vocab_size=11, d_model=32, n_layers=2, n_heads=n_heads, max_len=24)
    with torch.no_grad():  # a trained-looking table (it starts at zero)
        for blk in m.blocks:
            if getattr(blk.attn.cope, "pos_emb", None) is not None:
                blk.attn.cope.pos_emb.normal_()
    x = torch.randint(0, 11, (2, 24))

    def run():
        m.zero_grad(set_to_none=True)
        out = m(x)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]

    fast, fast_grads = run()
    monkeypatch.setenv("SYNTHLAB_NATIVE", "0")
    slow, slow_grads = run()
    assert torch.allclose(fast, slow, atol=1e-5)
    for a, b in zip(fast_grads, slow_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_a_kernel_operand_that_is_not_contiguous_float32_is_refused():
    """The ctypes kernels read raw float32 buffers: a bfloat16 or strided operand raised
    nothing and was read past its end (NaN logits, a crash); now it is a TypeError."""
    import torch

    from synthlab.model.native import ptr

    ok = torch.zeros(2, 3)
    assert ptr(ok) == ok.data_ptr() and ptr(None) is None
    with pytest.raises(TypeError, match="contiguous float32"):
        ptr(ok.to(torch.bfloat16))
    with pytest.raises(TypeError, match="strided"):
        ptr(ok.t())


@needs_kernel
@pytest.mark.parametrize("alibi", [False, True])
def test_custom_ops_pass_opcheck(alibi):
    """The C++ kernel's torch.library ops: schema, autograd registration, fake tensors (meta
    shapes for torch.compile) and AOT autograd against eager, on small inputs."""
    torch.manual_seed(0)
    B, H, T, D, npos = 2, 2, 5, 4, 3

    def leaf(*shape):
        return torch.randn(*shape, requires_grad=True)

    table = None if alibi else leaf(B, H, T, npos)
    slopes = torch.tensor([0.5, 0.25]) if alibi else None
    S, G = leaf(B, H, T, T), leaf(B, H, T, T)
    gates = torch.sigmoid(G).detach().requires_grad_()
    cases = [
        (torch.ops.synthlab.cope_term, (gates, table, slopes, npos)),
        (torch.ops.synthlab.cope_probabilities, (S, None, table, slopes, npos)),
        (torch.ops.synthlab.cope_probabilities, (S, G, table, slopes, npos)),
        (
            torch.ops.synthlab.cope_attention,
            (leaf(B, H, T, D), leaf(B, H, T, D), leaf(B, H, T, D), table, slopes, npos, 0.5),
        ),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)
