"""How far a float32 DAPE gradient may be from the exact one: a bound derived from the float32
sums behind it, for the kernel tests (test_native_dape.py, test_protocol_dape.py).

Every gradient of DAPE is a sum of products: a weight's over every position of the map (B x T^2
terms: the kernel sums them in vector lanes and per thread, PyTorch in its own order), a score's
over a few convolution taps, both through softmax's backward dA = P (g - <g, P>), itself a sum
over a row. Summing n float32 terms x_i in any order of pairwise or blocked sums errs by at most
about eps * log2(n) * sum_i |x_i| (Higham, Accuracy and Stability of Numerical Algorithms, 4.2):
the bound scales with the magnitude of the summed terms, not with their total, which is what a
gradient that is analytically zero needs (conv2's bias: softmax does not see a constant shift
of its row, so its terms, as large as any, cancel). ``sum_of_magnitudes`` gives sum_i |x_i| for
every element of every gradient (the same backward on absolute values, in float64: each product
and sum of the chain rule taken on |.|), and ``bound`` the tolerance from it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EPS32 = torch.finfo(torch.float32).eps


def _inputs(S, bias, causal):
    X = torch.cat([S, bias.expand_as(S)], dim=1) if bias is not None else S
    return torch.tril(X) if causal else X


def sum_of_magnitudes(d, S, bias, g, causal: bool, softmax: bool) -> list[torch.Tensor]:
    """sum_i |x_i| of the terms of d loss / d (S, [bias], w1, b1, w2, b2) for loss = sum(g * out)
    with out = softmax(A) (``softmax``) or A (the map with the causal mask), A = S + bias + f([S,
    bias]) as in DAPE V2 (App. L): float64, one tensor per gradient, shaped like it."""
    S64, g64 = S.detach().double(), g.detach().double()
    b64 = None if bias is None else bias.detach().double()
    w1, b1, w2, b2 = (p.detach().double() for p in d.parameters())
    pad = (0, d.k // 2)
    X = _inputs(S64, b64, causal)
    pre = F.conv2d(X, w1, b1, padding=pad)
    slope = torch.where(pre > 0, 1.0, 0.01)  # the LeakyReLU's derivative where the function is
    A = S64 + (b64 if b64 is not None else 0) + F.conv2d(F.leaky_relu(pre), w2, b2, padding=pad)
    T = S.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else torch.zeros(T, T, dtype=torch.bool)
    if softmax:  # dA = P g - P <g, P>: the magnitudes of both terms, and of the dot's terms
        P = torch.softmax(A.masked_fill(future, float("-inf")), dim=-1)
        gA = P * g64.abs() + P * (P * g64.abs()).sum(-1, keepdim=True)
    else:
        gA = g64.abs().masked_fill(future, 0.0)
    leaves = [S64.abs().requires_grad_()] + ([b64.abs().requires_grad_()] if b64 is not None else [])
    weights = [t.abs().requires_grad_() for t in (w1, b1, w2, b2)]
    Xa = _inputs(*(leaves if b64 is not None else (leaves[0], None)), causal)
    hidden = slope * F.conv2d(Xa, weights[0], weights[1], padding=pad)  # >= |LeakyReLU(pre)|
    Aa = sum(leaves) + F.conv2d(hidden, weights[2], weights[3], padding=pad)
    return list(torch.autograd.grad((gA * Aa).sum(), leaves + weights))


def bound(magnitudes: torch.Tensor, n_terms: int) -> torch.Tensor:
    """The elementwise tolerance eps32 * log2(n) * sum |x_i| of sums of up to ``n_terms`` terms,
    for a float32 result against the exact one: the kernel's and the float32 reference's
    rounding each within it, so twice that between the two."""
    return 2 * EPS32 * math.log2(max(n_terms, 2)) * magnitudes


def terms_per_gradient(S, d) -> int:
    """An upper bound on the number of terms summed into one element of any DAPE gradient: every
    position of the map, times the taps of both convolutions (conv1's input and conv2's hidden
    channels), times a row (softmax's backward)."""
    B, H, T, _ = S.shape
    return B * T * T * d.k * d.k * d.conv1.in_channels * d.conv1.out_channels * T


def assert_within_float32_bound(names, got, ref, magnitudes, n_terms):
    for name, a, b, m in zip(names, got, ref, magnitudes):
        err = (a.double() - b.double()).abs()
        tol = bound(m, n_terms)
        worst = (err - tol).flatten().argmax()
        assert torch.all(err <= tol), (
            f"gradient of {name} differs: {err.flatten()[worst]:.3g} against a float32 "
            f"bound of {tol.flatten()[worst]:.3g}"
        )
