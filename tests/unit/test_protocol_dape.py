"""DAPE V2 as the paper writes it: every path of synthlab's DAPE module (native kernel, its fused
softmax, the packed PyTorch path, the whole-map path) against DAPE V2's App. L listing run
literally on the full T x T map: ``torch.tril`` once, on the concatenated [S, B], then
Conv2d(1 x k, padding k // 2) -> LeakyReLU -> Conv2d, and A = S + B + f. The authors' code does
the same (chuanyang-Zheng/DAPE, megatron/model/positional_embeddings.py, Kerple_DAPEV2.forward:
``self.mlp2(torch.tril(x_a_bias))``; the causal mask comes later, in the softmax)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dape_bounds import assert_within_float32_bound, sum_of_magnitudes, terms_per_gradient
from synthlab.model import native
from synthlab.model.native.dape import native_applies
from synthlab.model.native.dape_packed import dape_packed
from synthlab.model.processors import DAPE

HAS_KERNEL = native._compiler() is not None and native.dape_kernel() is not None
needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="native DAPE kernel unavailable (no C++ compiler)")


def paper_dape(d: DAPE, S: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """DAPE V2, App. L (DAPEV2.forward) on the module's weights: tril once, then the two
    convolutions with zero padding k // 2 and the LeakyReLU (slope 0.01) between them."""
    base = S + bias if bias is not None else S
    X = torch.cat([S, bias.expand_as(S)], dim=1) if bias is not None else S  # (B, C, T, T)
    X = torch.tril(X)
    pad = (0, d.k // 2)
    h = F.leaky_relu(F.conv2d(X, d.conv1.weight, d.conv1.bias, padding=pad))  # (B, D, T, T), no zeroing
    return base + F.conv2d(h, d.conv2.weight, d.conv2.bias, padding=pad)


def tril_before_each_conv(d: DAPE, S: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The form synthlab used before: the hidden map zeroed above the diagonal too."""
    base = S + bias if bias is not None else S
    X = torch.cat([S, bias.expand_as(S)], dim=1) if bias is not None else S
    pad = (0, d.k // 2)
    h = torch.tril(F.leaky_relu(F.conv2d(torch.tril(X), d.conv1.weight, d.conv1.bias, padding=pad)))
    return base + F.conv2d(h, d.conv2.weight, d.conv2.bias, padding=pad)


def _case(H, T, k, hidden, bias_mode, B=2, seed=0, dtype=torch.float32):
    """A causal DAPE module with weights away from zero (the LeakyReLU's negative side, conv1's
    bias on the positions above the diagonal), scores S and a bias (none / shared / per batch)."""
    torch.manual_seed(seed)
    d = DAPE(H, with_bias=bias_mode != "none", hidden=hidden, k=k, causal=True).to(dtype)
    with torch.no_grad():
        for p in d.parameters():
            p.mul_(3.0)
    S = torch.randn(B, H, T, T, dtype=dtype, requires_grad=True)
    bias = {
        "none": None,
        "shared": torch.randn(1, H, T, T, dtype=dtype, requires_grad=True),
        "batch": torch.randn(B, H, T, T, dtype=dtype, requires_grad=True),
    }[bias_mode]
    return d, S, bias


def _run(path: str, d: DAPE, S, bias, future):
    """The module's output on `path`, with the causal mask's -inf above the diagonal."""
    if path == "native":
        assert native_applies(S, bias, d.conv1.weight)
        return d(S, bias, future)
    if path == "packed":
        weights = (d.conv1.weight, d.conv1.bias, d.conv2.weight, d.conv2.bias)
        return dape_packed(S, bias, d._inputs(S, bias), *weights).masked_fill(future, float("-inf"))
    if path == "full":
        return d.forward_full(S, bias, future).masked_fill(future, float("-inf"))
    raise ValueError(path)


PATHS = [pytest.param("native", marks=needs_kernel), "packed", "full"]
CASES = [  # (H, T, k, hidden, bias): rows shorter than k, odd / even T, several k, T past a 64-wide tile
    (4, 1, 3, 8, "shared"),
    (4, 2, 5, 8, "none"),
    (3, 5, 3, 6, "batch"),
    (4, 6, 7, 8, "shared"),
    (4, 13, 3, 8, "shared"),
    (2, 12, 5, 5, "none"),
    (4, 70, 3, 8, "batch"),
    (1, 9, 7, 4, "shared"),
]


def _inputs_and_names(d, S, bias):
    inputs = [S] + ([bias] if bias is not None else []) + list(d.parameters())
    names = ["S"] + (["bias"] if bias is not None else []) + ["w1", "b1", "w2", "b2"]
    return inputs, names


def _assert_same(got, ref, future, d, S, bias, atol=1e-5):
    """Equal on the lower triangle (values and every gradient of a random loss on it)."""
    low = ~future
    assert torch.allclose(got[..., low], ref[..., low], atol=atol, rtol=1e-5)
    g = torch.randn_like(ref).masked_fill(future, 0.0)
    inputs, names = _inputs_and_names(d, S, bias)
    ga = torch.autograd.grad((got.masked_fill(future, 0.0) * g).sum(), inputs)
    gb = torch.autograd.grad((ref.masked_fill(future, 0.0) * g).sum(), inputs)
    for name, a, b in zip(names, ga, gb):
        scale = b.abs().max().clamp_min(1.0)
        assert torch.allclose(a / scale, b / scale, atol=2 * atol), f"gradient of {name} differs"
    return ga


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("H,T,k,hidden,bias", CASES)
def test_every_path_equals_the_paper_listing_on_the_full_map(path, H, T, k, hidden, bias):
    d, S, b = _case(H, T, k, hidden, bias)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    got = _run(path, d, S, b, future)
    assert torch.all(got[..., future] == float("-inf"))
    ga = _assert_same(got, paper_dape(d, S, b), future, d, S, b)
    # causal: no score above the diagonal reaches the function (tril zeroes it before conv1)
    assert torch.all(ga[0][..., future] == 0)


@pytest.mark.parametrize("k", [3, 5])
def test_float64_packed_path_is_the_paper_listing_exactly(k):
    """float64 (always the PyTorch path): equal to rounding, both directions of every gradient."""
    d, S, b = _case(3, 11, k, 6, "shared", dtype=torch.float64)
    future = torch.ones(11, 11, dtype=torch.bool).triu(1)
    assert not native_applies(S, b, d.conv1.weight)
    _assert_same(d(S, b, future), paper_dape(d, S, b), future, d, S, b, atol=1e-10)


@needs_kernel
@pytest.mark.parametrize("T,k", [(70, 3), (33, 5), (600, 3)])  # 600: a row longer than one 512-position strip
def test_native_attention_is_softmax_of_the_paper_listing(T, k):
    d, S, b = _case(2, T, k, 6, "shared", seed=1)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert native_applies(S, b, d.conv1.weight)
    got = d.attention(S, b, future)
    ref = torch.softmax(paper_dape(d, S, b).masked_fill(future, float("-inf")), dim=-1)
    assert torch.allclose(got, ref, atol=1e-6)
    g = torch.randn_like(got)
    inputs, names = _inputs_and_names(d, S, b)
    # within the float32 bound of each gradient's sums (dape_bounds): conv2's bias's gradient is
    # analytically zero (softmax ignores a row's shift), its B x T^2 terms cancelling
    assert_within_float32_bound(
        names,
        torch.autograd.grad((got * g).sum(), inputs),
        torch.autograd.grad((ref * g).sum(), inputs),
        sum_of_magnitudes(d, S, b, g, True, softmax=True),
        terms_per_gradient(S, d),
    )


@pytest.mark.parametrize("path", PATHS)
def test_no_future_information_reaches_a_past_query(path):
    """Row i's (1 x k) convolutions run along row i only, whose entries past i are zero after
    tril: any change above the diagonal leaves the lower triangle as it was."""
    d, S, b = _case(4, 16, 5, 8, "batch")
    future = torch.ones(16, 16, dtype=torch.bool).triu(1)
    S2, b2 = S.detach().clone(), b.detach().clone()
    S2[..., future] += 50.0 * torch.randn_like(S2[..., future])
    b2[..., future] -= 50.0
    with torch.no_grad():
        a, a2 = _run(path, d, S, b, future), _run(path, d, S2, b2, future)
    assert torch.equal(a[..., ~future], a2[..., ~future])


def test_k1_nothing_changes_and_k3_differs_only_next_to_the_diagonal():
    """With k = 1 (DAPE, a per-(i, j) MLP) the hidden map above the diagonal is never read, so the
    paper's form and the former one (hidden map zeroed too) are the same function. With k > 1 the
    second convolution at (i, j) reads hidden (i, j + 1 .. j + c): they differ exactly on the c
    diagonals next to the main one, where the paper's form sees conv1's bias (and row i's last
    inputs) through the LeakyReLU above the diagonal."""
    T = 12
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    low = ~future
    d, S, b = _case(4, T, 1, 8, "shared")
    with torch.no_grad():
        assert torch.equal(paper_dape(d, S, b)[..., low], tril_before_each_conv(d, S, b)[..., low])
        assert torch.allclose(d(S, b, future)[..., low], paper_dape(d, S, b)[..., low], atol=1e-5)
    d, S, b = _case(4, T, 3, 8, "shared")
    with torch.no_grad():
        diff = (paper_dape(d, S, b) - tril_before_each_conv(d, S, b)).abs().amax(dim=(0, 1))  # (T, T)
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.all(diff[i - j >= 1] == 0)  # strictly below the diagonal: the same
    assert torch.all(diff[i == j][:-1] > 1e-3)  # the main diagonal (c = 1) is where they part,
    assert diff[T - 1, T - 1] == 0  # but for the last row: its hidden (T-1, T) is conv2's zero padding
