"""The Triton kernels of DAPE / DAPE V2 (synthlab/model/native/dape_triton.py), run on CPU by
Triton's interpreter: A = S + bias + f([S, bias]) (masked in causal mode) and softmax(A), and
the gradients of S, the bias and the four weights, equal ``DAPE.forward_full`` (the paper's
listing on the whole map) in float64; bit-identical run to run; under torch.func.vmap (batched
seeds) one kernel call for all the slices; and DAPE sends CUDA tensors to them only with
SYNTHLAB_DAPE_TRITON=1.

As in test_triton_cope.py, the kernel tests run in a child pytest process of this file with
TRITON_INTERPRET=1 (``test_kernels_under_the_interpreter``), since triton reads the variable
when it is first imported."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'synthlab-pe[gpu]'; Linux only)")

from synthlab.model.batched import plain  # noqa: E402
from synthlab.model.native import dape_triton as dt  # noqa: E402
from synthlab.model.processors import DAPE  # noqa: E402


def test_kernels_under_the_interpreter(interpreted_child):
    """This file's interpreted tests in a child process with TRITON_INTERPRET=1: all must pass."""
    interpreted_child(__file__, timeout=900)


def _dape(H, with_bias, k, causal, hidden=6, seed=0):
    torch.manual_seed(seed)
    dape = DAPE(H, with_bias=with_bias, hidden=hidden, k=k, causal=causal)
    with torch.no_grad():  # larger than the default init, so f is not small beside S + bias
        for p in dape.parameters():
            p.mul_(3.0)
    return dape


def _reference(dape, S, bias, softmax):
    """forward_full (tril on the input in causal mode), then the mask and the softmax."""
    T = S.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1) if dape.causal else None
    A = dape.forward_full(S, bias, future)
    if future is not None:
        A = A.masked_fill(future, float("-inf"))
    return A.softmax(-1) if softmax else A


def _by_triton(dape, S, bias, softmax):
    return dt.DAPETriton.apply(
        S, bias, dape.conv1.weight, dape.conv1.bias, dape.conv2.weight, dape.conv2.bias, dape.causal, softmax
    )


def _run(fn, dape, S, bias, softmax, w, dtype):
    """fn on fresh leaves of ``dtype``: output and the gradients of sum(out * w) over the finite
    entries, for S, the bias and the weights."""
    dape = dape.to(dtype)
    leaves = [S.detach().to(dtype).requires_grad_()]
    leaves += [] if bias is None else [bias.detach().to(dtype).requires_grad_()]
    out = fn(dape, leaves[0], None if bias is None else leaves[1], softmax)
    live = torch.isfinite(out)
    loss = (out.masked_fill(~live, 0.0) * w.to(dtype)).sum()
    return out.detach(), live, torch.autograd.grad(loss, [*leaves, *dape.parameters()])


def _check(B, H, T, k, with_bias, bias_rows, causal, softmax, hidden=6, seed=0):
    dape = _dape(H, with_bias, k, causal, hidden, seed)
    torch.manual_seed(seed + 1)
    S = 2.0 * torch.randn(B, H, T, T)
    bias = torch.randn(bias_rows, H, T, T) if with_bias else None
    w = torch.randn(B, H, T, T)
    fast, fast_live, fast_grads = _run(_by_triton, dape, S, bias, softmax, w, torch.float32)
    ref, ref_live, ref_grads = _run(_reference, dape, S, bias, softmax, w, torch.float64)
    assert fast.dtype == torch.float32 and fast.shape == (B, H, T, T)
    assert torch.equal(fast_live, ref_live)  # -inf exactly above the diagonal (A), 0 there (P)
    scale = ref.masked_fill(~ref_live, 0).abs().max().clamp_min(1.0)
    assert (fast.double() - ref).masked_fill(~ref_live, 0.0).abs().max() <= 1e-5 * scale
    names = ["S"] + (["bias"] if with_bias else []) + ["w1", "b1", "w2", "b2"]
    for name, x, want in zip(names, fast_grads, ref_grads):
        assert x.shape == want.shape, name
        assert (x.double() - want).abs().max() <= 2e-5 * want.abs().max().clamp_min(1.0), f"gradient of {name} differs"


@pytest.mark.interpreted
def test_kernels_are_interpreted():
    assert dt.INTERPRETED and dt.triton_available("cpu")


@pytest.mark.interpreted
@pytest.mark.parametrize(
    "B,H,T,k,with_bias,bias_rows,causal,softmax",
    [
        (2, 2, 11, 3, True, 1, True, True),  # the layer's case: kerple+dape:k=3 (one bias map for the batch)
        (2, 2, 11, 3, True, 2, True, False),  # A itself, a bias per batch element
        (1, 2, 9, 1, False, 0, True, True),  # DAPE (k = 1), no bias (rope+dape)
        (1, 3, 17, 1, True, 1, True, False),  # several row and key blocks of the interpreter's tiles
        (1, 2, 10, 5, True, 1, True, True),  # k = 5: conv1 reads 4 columns past the diagonal
        (2, 2, 9, 3, True, 1, False, True),  # encoder mode: whole rows, nothing zeroed
        (1, 2, 1, 3, True, 1, True, True),  # T = 1
    ],
)
def test_equals_the_paper_listing_in_float64(B, H, T, k, with_bias, bias_rows, causal, softmax):
    _check(B, H, T, k, with_bias, bias_rows, causal, softmax)


@pytest.mark.interpreted
def test_gpu_tile_sizes(monkeypatch):
    """The tile sizes chosen for a CUDA device (several key blocks, rows other than keys), run
    here by the interpreter."""
    gpu_tiles = dt.block_sizes(torch.device("cuda"))
    monkeypatch.setattr(dt, "block_sizes", lambda device: gpu_tiles)
    _check(1, 2, 2 * gpu_tiles["block_n"] + 3, 3, True, 1, True, True, hidden=4)


@pytest.mark.interpreted
def test_deterministic():
    """No atomics: output and every gradient bit-identical across calls."""
    dape = _dape(2, True, 3, True, hidden=4)
    torch.manual_seed(3)
    S, bias, w = torch.randn(1, 2, 11, 11), torch.randn(1, 2, 11, 11), torch.randn(1, 2, 11, 11)
    (y1, _, g1), (y2, _, g2) = (_run(_by_triton, dape, S, bias, True, w, torch.float32) for _ in range(2))
    assert torch.equal(y1, y2) and all(torch.equal(a, b) for a, b in zip(g1, g2))


@pytest.mark.interpreted
def test_half_precision_inputs():
    """bfloat16 S and bias in (as under autocast): float32 inside, S's dtype out, gradients in
    the inputs' dtypes."""
    dape = _dape(2, True, 3, True)
    torch.manual_seed(4)
    S, bias = torch.randn(1, 2, 9, 9), torch.randn(1, 2, 9, 9)
    want = _reference(dape, S, bias, True)
    S16, bias16 = S.bfloat16().requires_grad_(), bias.bfloat16().requires_grad_()
    y = _by_triton(dape, S16, bias16, True)
    assert y.dtype == torch.bfloat16
    y.float().square().sum().backward()
    assert S16.grad.dtype == bias16.grad.dtype == torch.bfloat16
    assert (y.float() - want).abs().max() < 0.05  # the inputs' rounding only


def _kernel_batches(monkeypatch):
    batches = []
    forward = dt._DAPETritonKernel.forward

    def spy(S, *rest):
        batches.append(S.shape[0])
        return forward(S, *rest)

    monkeypatch.setattr(dt._DAPETritonKernel, "forward", staticmethod(spy))
    return batches


@pytest.mark.interpreted
@pytest.mark.parametrize("own_weights", [False, True])
def test_vmap_equals_a_loop_of_calls(own_weights, monkeypatch):
    """Under torch.func.vmap over V = 3 stacked score maps (one bias map shared): the separate
    calls' outputs and gradients; one kernel call on the V * B batch where the weights are
    shared, one call per slice where each slice has its own (batched seeds)."""
    V, B, H, T = 3, 2, 2, 6
    dape = _dape(H, True, 3, True, hidden=4)
    torch.manual_seed(6)
    S = torch.randn(V, B, H, T, T, requires_grad=True)
    bias = torch.randn(1, H, T, T, requires_grad=True)
    weights = [p.detach() for p in dape.parameters()]
    if own_weights:
        weights = [torch.stack([p * f for f in (1.0, -0.5, 2.0)]) for p in weights]
    weights = [p.clone().requires_grad_() for p in weights]
    batches = _kernel_batches(monkeypatch)
    wdim = 0 if own_weights else None
    out = torch.func.vmap(
        lambda s, w1, b1, w2, b2: dt.DAPETriton.apply(s, bias, w1, b1, w2, b2, True, True),
        in_dims=(0, wdim, wdim, wdim, wdim),
    )(S, *weights)
    assert batches == ([B] * V if own_weights else [V * B])
    w = torch.randn(V, B, H, T, T)
    leaves = [S, bias, *weights]
    grads = torch.autograd.grad((out * w).sum(), leaves)
    ref = torch.stack(
        [dt.DAPETriton.apply(S[i], bias, *(p[i] if own_weights else p for p in weights), True, True) for i in range(V)]
    )
    ref_grads = torch.autograd.grad((ref * w).sum(), leaves)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    for g, want in zip(grads, ref_grads):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-6)


class _LooksCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA: what DAPE checks to choose the Triton path."""

    @property
    def is_cuda(self):
        return True


def test_dape_sends_cuda_tensors_to_triton_only_when_switched_on(monkeypatch):
    """DAPE.forward / DAPE.attention's choice (no kernel runs: the Function is replaced by a
    recorder that returns the reference), here in the parent process too: CUDA tensors with
    SYNTHLAB_DAPE_TRITON=1 only (off by default), never CPU or float64 tensors."""
    calls = []
    dape = _dape(2, True, 3, True)

    def recorder(S, bias, w1, b1, w2, b2, causal, softmax):
        calls.append((causal, softmax, bias is None))
        return _reference(dape, plain(S).as_subclass(torch.Tensor), bias.as_subclass(torch.Tensor), softmax)

    monkeypatch.setattr(dt.DAPETriton, "apply", recorder)
    monkeypatch.setattr(dt, "triton_available", lambda device: True)  # no GPU here
    monkeypatch.setattr(dt, "builds", lambda *sizes: True)  # nothing to compile for
    monkeypatch.setenv("SYNTHLAB_NATIVE", "0")  # else the C++ kernel takes the (CPU-resident) tensors first
    monkeypatch.delenv("SYNTHLAB_DAPE_TRITON", raising=False)
    torch.manual_seed(7)
    S, bias = torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8)
    future = torch.ones(8, 8, dtype=torch.bool).triu(1)
    gpu_S, gpu_bias = S.as_subclass(_LooksCuda), bias.as_subclass(_LooksCuda)
    dape.attention(gpu_S, gpu_bias, future)
    assert calls == []  # off by default
    monkeypatch.setenv("SYNTHLAB_DAPE_TRITON", "1")
    P = dape.attention(gpu_S, gpu_bias, future)
    A = dape(gpu_S, gpu_bias, future)
    assert calls == [(True, True, False), (True, False, False)]
    torch.testing.assert_close(P.as_subclass(torch.Tensor), _reference(dape, S, bias, True))
    torch.testing.assert_close(A.as_subclass(torch.Tensor), _reference(dape, S, bias, False))
    dape.attention(S, bias, future)  # CPU tensors
    dape64 = _dape(2, True, 3, True).double()
    dape64.attention(S.double().as_subclass(_LooksCuda), bias.double().as_subclass(_LooksCuda), future)  # float64
    assert len(calls) == 2
    monkeypatch.setattr(dt, "triton_available", lambda device: False)  # triton missing
    dape.attention(gpu_S, gpu_bias, future)
    assert len(calls) == 2
