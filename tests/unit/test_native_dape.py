"""The native CPU kernel of DAPE / DAPE V2 (synthlab/model/native): same function and gradients
as the plain Conv2d formulation, deterministic, and a clean fallback when it cannot be built
(the build test covers every native kernel)."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

from dape_bounds import assert_within_float32_bound, sum_of_magnitudes, terms_per_gradient
from synthlab.model import build_model, native
from synthlab.model.native.dape import native_applies
from synthlab.model.processors import DAPE

HAS_KERNEL = native._compiler() is not None and native.dape_kernel() is not None


@pytest.mark.parametrize("name", sorted(native.KERNELS))
def test_every_kernel_builds_where_a_compiler_exists(name):
    if native._compiler() is None:
        pytest.skip(f"no C++ compiler on this machine: {name} runs its PyTorch path")
    lib = native.kernel(name)
    assert lib is not None, f"a compiler exists but the {name} kernel did not build"
    assert getattr(lib, f"{name}_abi_version")() == native.abi_version(name)


needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="native DAPE kernel unavailable (no C++ compiler)")


def _grads(out, mask, g, tensors):
    return torch.autograd.grad((out.masked_fill(mask, 0.0) * g).sum(), tensors, allow_unused=True)


def _dape_case(H, T, k, hidden, bias_mode, causal, B=2, seed=0):
    """A DAPE module with weights away from zero (the LeakyReLU's negative side and the biases
    matter), scores S and a bias ("none", "shared" over the batch, or per "batch" element)."""
    torch.manual_seed(seed)
    d = DAPE(H, with_bias=bias_mode != "none", hidden=hidden, k=k, causal=causal)
    with torch.no_grad():
        for p in d.parameters():
            p.mul_(3.0)
    S = torch.randn(B, H, T, T, requires_grad=True)
    bias = {
        "none": None,
        "shared": torch.randn(1, H, T, T, requires_grad=True),
        "batch": torch.randn(B, H, T, T, requires_grad=True),
    }[bias_mode]
    return d, S, bias


def _assert_grads_close(got_grads, ref_grads, names, d, S, bias, g, causal, softmax):
    """Within the float32 bound of each gradient's sums (dape_bounds): a weight's gradient sums
    B x T^2 terms, and conv2's bias's is analytically zero under a softmax (its terms cancel), so
    no fixed tolerance holds at every T, thread count and vector width."""
    magnitudes = sum_of_magnitudes(d, S, bias, g, causal, softmax)
    assert_within_float32_bound(names, got_grads, ref_grads, magnitudes, terms_per_gradient(S, d))


def _check_against_full_map(H, T, k, hidden, bias_mode, causal, B=2, seed=0):
    d, S, bias = _dape_case(H, T, k, hidden, bias_mode, causal, B, seed)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    mask = future if causal else torch.zeros(T, T, dtype=torch.bool)
    assert native_applies(S, bias, d.conv1.weight), "the module did not take the native path"
    got = d(S, bias, future if causal else None)
    ref = d.forward_full(S, bias, future if causal else None)
    assert torch.allclose(got.masked_fill(mask, 0), ref.masked_fill(mask, 0), atol=1e-5, rtol=1e-5)
    g = torch.randn_like(got)
    inputs = [S] + ([bias] if bias is not None else []) + list(d.parameters())
    names = ["S"] + (["bias"] if bias is not None else []) + ["w1", "b1", "w2", "b2"]
    got_grads, ref_grads = _grads(got, mask, g, inputs), _grads(ref, mask, g, inputs)
    _assert_grads_close(got_grads, ref_grads, names, d, S, bias, g, causal, softmax=False)
    if causal:  # nothing above the diagonal reaches the function or its input gradient
        assert torch.all(got_grads[0][..., future] == 0)


CASES = [
    # (H, T, k, hidden, bias): H not a multiple of 4, hidden not a multiple of 4, rows shorter than
    # one vector, rows crossing a 64-position tile, T > one strip (512 positions)
    *[(4, T, k, 32, b) for T, k, b in itertools.product([1, 5, 70], [1, 3, 5, 7], ["none", "shared", "batch"])],
    (3, 17, 3, 6, "shared"),
    (6, 33, 5, 8, "none"),
    (1, 9, 7, 4, "batch"),
    (2, 130, 3, 10, "shared"),
]


@needs_kernel
@pytest.mark.parametrize("H,T,k,hidden,bias", CASES)
def test_native_causal_equals_conv2d_on_tril_zeroed_map(H, T, k, hidden, bias):
    _check_against_full_map(H, T, k, hidden, bias, causal=True)


@needs_kernel
@pytest.mark.parametrize(
    "H,T,k,bias,causal",
    [
        (4, 1, 1, "none", True),
        (4, 70, 1, "none", True),
        (4, 70, 3, "shared", True),
        (3, 17, 5, "batch", True),
        (2, 600, 3, "shared", True),
        (4, 33, 1, "shared", False),
        (2, 9, 1, "batch", False),
    ],
)
def test_native_attention_fuses_softmax_and_its_backward(H, T, k, bias, causal):
    """DAPE.attention on the kernel (softmax's backward fused into the kernel's) against
    softmax of the Conv2d formulation: probabilities and every gradient."""
    d, S, b = _dape_case(H, T, k, 6, bias, causal, seed=1)
    future = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None
    assert native_applies(S, b, d.conv1.weight)
    got = d.attention(S, b, future)
    ref = d.forward_full(S, b, future)
    ref = torch.softmax(ref.masked_fill(future, float("-inf")) if causal else ref, dim=-1)
    assert torch.allclose(got, ref, atol=1e-6)
    if causal:
        assert torch.all(got[..., future] == 0)
    g = torch.randn_like(got)
    inputs = [S] + ([b] if b is not None else []) + list(d.parameters())
    names = ["S"] + (["bias"] if b is not None else []) + ["w1", "b1", "w2", "b2"]
    _assert_grads_close(
        torch.autograd.grad((got * g).sum(), inputs),
        torch.autograd.grad((ref * g).sum(), inputs),
        names,
        d,
        S,
        b,
        g,
        causal,
        softmax=True,
    )


@needs_kernel
def test_native_row_longer_than_a_strip():
    _check_against_full_map(1, 600, 3, 4, "shared", causal=True, B=1)


@needs_kernel
@pytest.mark.parametrize("bias", ["none", "shared"])
@pytest.mark.parametrize("k", [1, 3, 7])
def test_native_encoder_mode_equals_conv2d(bias, k):
    _check_against_full_map(4, 21, k, 32, bias, causal=False)


@needs_kernel
def test_native_deterministic_and_thread_count_only_reorders_sums():
    torch.manual_seed(1)
    d = DAPE(4, with_bias=True, hidden=32, k=3)
    S = torch.randn(3, 4, 40, 40, requires_grad=True)
    bias = torch.randn(1, 4, 40, 40, requires_grad=True)
    g = torch.randn(3, 4, 40, 40)

    def run(threads):
        n = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            out = torch.ops.synthlab.dape_scores(
                S, bias, d.conv1.weight, d.conv1.bias, d.conv2.weight, d.conv2.bias, True, False
            )
            return [out.detach(), *torch.autograd.grad((out * g).sum(), [S, bias, *d.parameters()])]
        finally:
            torch.set_num_threads(n)

    one, one_again, three = run(1), run(1), run(3)
    for a, b, c in zip(one, one_again, three):
        assert torch.equal(a, b)  # same threads: the same bits
        assert torch.allclose(a, c, atol=1e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("pe", ["kerple+dape:k=3", "rope+dape:k=3", "dape"])
def test_model_same_logits_and_grads_with_and_without_kernel(pe, monkeypatch):
    torch.manual_seed(0)
    m = build_model(pe=pe, vocab_size=11, d_model=32, n_layers=2, n_heads=4, max_len=24, dropout=0.0)
    x = torch.randint(0, 11, (2, 24))

    def run():
        m.zero_grad(set_to_none=True)
        out = m(x)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in m.parameters()]

    fast, fast_grads = run()
    monkeypatch.setenv("SYNTHLAB_NATIVE", "0")
    assert native.dape_kernel() is None
    slow, slow_grads = run()
    assert torch.allclose(fast, slow, atol=1e-5)
    for a, b in zip(fast_grads, slow_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


def test_unbuildable_kernel_warns_once_and_dape_still_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("SYNTHLAB_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "/bin/false")  # a "compiler" that always fails
    with pytest.warns(RuntimeWarning, match="native DAPE kernel is unavailable"):
        assert native.dape_kernel() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call does not warn again
        assert native.dape_kernel() is None
    d = DAPE(4, with_bias=False, hidden=8, k=3)
    S = torch.randn(1, 4, 6, 6)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert not native_applies(S, None, d.conv1.weight)
    assert torch.allclose(d(S, None, future)[..., ~future], d.forward_full(S, None, future)[..., ~future], atol=1e-5)
    assert not list(tmp_path.rglob("*.so")), "a failed build left a library behind"


def test_non_float32_or_disabled_takes_the_pytorch_path(monkeypatch):
    d = DAPE(4, with_bias=False, hidden=8, k=3).double()
    S = torch.randn(1, 4, 6, 6, dtype=torch.double, requires_grad=True)
    assert not native_applies(S, None, d.conv1.weight)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    # float64 gradients of the PyTorch path against finite differences
    assert torch.autograd.gradcheck(lambda s: d(s, None, future).masked_fill(future, 0), (S,))
    monkeypatch.setenv("SYNTHLAB_NATIVE", "off")
    assert not native.enabled() and native.dape_kernel() is None


@needs_kernel
@pytest.mark.parametrize("bias_rows,softmax", [(0, False), (1, True), (2, False), (2, True)])
def test_custom_op_passes_opcheck(bias_rows, softmax):
    """The C++ kernel's torch.library op: schema, autograd registration, fake tensors (meta
    shapes for torch.compile) and AOT autograd against eager, on small inputs."""
    torch.manual_seed(0)
    d = DAPE(2, with_bias=bias_rows > 0, hidden=4, k=3)
    S = torch.randn(2, 2, 6, 6, requires_grad=True)
    bias = torch.randn(bias_rows, 2, 6, 6, requires_grad=True) if bias_rows else None
    args = (S, bias, d.conv1.weight, d.conv1.bias, d.conv2.weight, d.conv2.bias, True, softmax)
    torch.library.opcheck(torch.ops.synthlab.dape_scores, args)
