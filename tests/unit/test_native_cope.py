"""The native CPU kernel of CoPE (synthlab/model/native/cope_cpu.cpp): the same term and
gradients as CoPE's PyTorch path (Listing 1 of the paper), clamp included, and deterministic."""

from __future__ import annotations

import pytest
import torch

from synthlab.model import build_model
from synthlab.model import native
from synthlab.model.encoders.contextual import CoPE

needs_kernel = pytest.mark.skipif(native._compiler() is None or native.cope_kernel() is None,
                                  reason="native CoPE kernel unavailable (no C++ compiler)")


def test_kernel_builds_where_a_compiler_exists():
    if native._compiler() is None:
        pytest.skip("no C++ compiler on this machine: CoPE runs its PyTorch path")
    lib = native.cope_kernel()
    assert lib is not None, "a compiler exists but the CoPE kernel did not build"
    assert lib.cope_abi_version() == native.abi_version("cope")


def _run(cope, q, S, x, future, g):
    term = cope(q, S, x, future)
    grads = torch.autograd.grad((term.masked_fill(future, 0.0) * g).sum(), [q, S, *cope.parameters()],
                                allow_unused=True)
    return term.masked_fill(future, 0.0).detach(), grads


@needs_kernel
@pytest.mark.parametrize("H,T,npos,alibi,sep_keys", [
    (4, 1, 64, False, False), (4, 9, 64, False, False), (4, 40, 8, False, False),  # 8: most positions clamp
    (3, 33, 16, False, False), (1, 20, 4, False, True), (6, 17, 64, True, False), (4, 50, 5, True, False),
    (2, 130, 64, False, False),
])
def test_native_equals_pytorch_path_in_float64(H, T, npos, alibi, sep_keys):
    """Against the PyTorch path run in float64 (its float32 p = total - cumsum + g loses a few
    bits to cancellation; the kernel's direct suffix sum does not)."""
    torch.manual_seed(T * 7 + H)
    d_h = 8
    cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, sep_keys=sep_keys, alibi=alibi)
    if not alibi:
        with torch.no_grad():
            cope.pos_emb.normal_()
    q = torch.randn(2, H, T, d_h, requires_grad=True)
    # logits spread so that gates reach both ends (0 and 1) and positions cross integer cells
    S = (3 * torch.randn(2, H, T, T)).requires_grad_()
    x = torch.randn(2, T, H * d_h)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    g = torch.randn(2, H, T, T)
    assert cope._native(S)
    fast, fast_grads = _run(cope, q, S, x, future, g)

    ref_cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, sep_keys=sep_keys, alibi=alibi).double()
    ref_cope.load_state_dict(cope.state_dict())
    q64, S64 = q.detach().double().requires_grad_(), S.detach().double().requires_grad_()
    assert not ref_cope._native(S64)
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
def test_native_clamp_passes_no_gradient_past_npos():
    """Gates all 1 (large logits): p_ij = i - j + 1, clamped at npos - 1 = 3. The term is the
    table's last entry and the logits get no gradient through the positions where p > 3."""
    H, T, npos = 1, 10, 4
    cope = CoPE(d_model=4, n_heads=H, npos=npos)
    with torch.no_grad():
        cope.pos_emb.copy_(torch.arange(4.0).expand(4, 4))  # q . e[p] = p * sum(q)
    q = torch.ones(1, H, T, 4)
    S = torch.full((1, H, T, T), 30.0, requires_grad=True)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    term = cope(q, S, torch.zeros(1, T, 4), future)[0, 0]
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    p = (i - j + 1).clamp(max=npos - 1).float()
    low = ~future
    assert torch.allclose(term[low], 4 * p[low], atol=1e-4)
    (gS,) = torch.autograd.grad(term[low].sum(), [S])
    # d term_ij / d g_it is nonzero only through unclamped p_ij (i - j + 1 <= 3); sigmoid'(30) ~ 1e-13
    assert torch.all(gS[0, 0][future] == 0)


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
@pytest.mark.parametrize("pe", ["cope", "cope+rope", "cope-alibi", "cope+dape:k=3"])
def test_model_same_logits_and_grads_with_and_without_kernel(pe, monkeypatch):
    torch.manual_seed(0)
    m = build_model(pe=pe, vocab_size=11, d_model=32, n_layers=2, n_heads=4, max_len=24)
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
