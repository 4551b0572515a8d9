"""DAPE's fused operations: the C++ kernel (``dape_cpu.cpp``) as a torch.library custom op, and one
dispatcher per operation that picks the C++ kernel (float32 CPU operands; ``SYNTHLAB_NATIVE=0``
turns it off), the Triton kernels (CUDA, ``SYNTHLAB_DAPE_TRITON=1``; ``dape_triton.py``), the
packed GEMM path (causal; ``dape_packed.py``) or the caller's PyTorch reference
(``DAPE.forward_full``, ``model/processors.py``). The op has autograd, fake-tensor and vmap
rules (batched seeds fold into the batch: ``batched.fold_vmap``). docs/native.md.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..batched import fold_vmap
from . import dape_kernel, ptr
from .dape_packed import dape_packed

Reference = Callable[[], Tensor]


def _lib():
    lib = dape_kernel()
    assert lib is not None, "called only where the kernel loaded"
    return lib


def _operands(S: Tensor, bias: Tensor | None, w1: Tensor, w2: Tensor):
    """The kernel's dense operands: (S, b_in, shared, w1c, w2c); b_in is one (1, H, T, T) map
    for the whole batch where the bias is (``shared``)."""
    H = S.shape[1]
    D, C, _, k = w1.shape
    shared = bias is not None and (bias.shape[0] == 1 or bias.stride(0) == 0)
    b_in = None if bias is None else (bias[:1].contiguous() if shared else bias.contiguous())
    return S.contiguous(), b_in, shared, w1.reshape(D, C, k).contiguous(), w2.reshape(H, D, k).contiguous()


@torch.library.custom_op("synthlab::dape_scores", mutates_args=())
def _scores(
    S: Tensor, bias: Tensor | None, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, causal: bool, softmax: bool
) -> Tensor:
    """A = S + bias + f([S, bias]), -inf above the diagonal in causal mode (the same function as
    ``DAPE.forward_full`` followed by the mask), or softmax(A) with ``softmax``: both
    convolutions and the LeakyReLU fused per strip of query rows, the hidden map recomputed in
    the backward instead of stored (which, given softmax's dP and P, forms dA row by row)."""
    B, H, T, _ = S.shape
    D, C, _, k = w1.shape
    S, b_in, shared, w1c, w2c = _operands(S, bias, w1, w2)
    out = torch.empty_like(S)
    _lib().dape_forward(
        ptr(S),
        ptr(b_in),
        0 if shared else H * T * T,
        ptr(out),
        ptr(w1c),
        ptr(b1),
        ptr(w2c),
        ptr(b2),
        B,
        T,
        H,
        C,
        D,
        k,
        int(causal),
        torch.get_num_threads(),
    )
    return torch.softmax(out, dim=-1) if softmax else out


@torch.library.custom_op("synthlab::dape_scores_backward", mutates_args=())
def _scores_backward(
    S: Tensor,
    bias: Tensor | None,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    grad: Tensor,
    P: Tensor | None,
    causal: bool,
    need_gbias: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(gS, g_bias per batch row (empty where not needed), gw1 (D, C, k), gb1, gw2 (H, D, k), gb2)
    from dA, or from dP given P = softmax(A)."""
    B, H, T, _ = S.shape
    D, C, _, k = w1.shape
    S, b_in, shared, w1c, w2c = _operands(S, bias, w1, w2)
    grad = grad.contiguous()
    gS = torch.empty_like(S)
    g_bias_rows = torch.empty_like(S) if b_in is not None and need_gbias else None
    gw1, gb1, gw2, gb2 = (
        torch.empty_like(w1c),
        torch.empty_like(b1),
        torch.empty_like(w2c),
        torch.empty(H, dtype=S.dtype),
    )
    _lib().dape_backward(
        ptr(S),
        ptr(b_in),
        0 if shared else H * T * T,
        ptr(grad),
        ptr(P),
        ptr(gS),
        ptr(g_bias_rows),
        ptr(w1c),
        ptr(b1),
        ptr(w2c),
        ptr(gw1),
        ptr(gb1),
        ptr(gw2),
        ptr(gb2),
        B,
        T,
        H,
        C,
        D,
        k,
        int(causal),
        torch.get_num_threads(),
    )
    return gS, S.new_empty(0) if g_bias_rows is None else g_bias_rows, gw1, gb1, gw2, gb2


@_scores.register_fake
def _(S, bias, w1, b1, w2, b2, causal, softmax):
    return torch.empty_like(S)


@_scores_backward.register_fake
def _(S, bias, w1, b1, w2, grad, P, causal, need_gbias):
    H, (D, C, _, k) = S.shape[1], w1.shape
    rows = torch.empty_like(S) if bias is not None and need_gbias else S.new_empty(0)
    return (
        torch.empty_like(S),
        rows,
        w1.new_empty(D, C, k),
        torch.empty_like(b1),
        w2.new_empty(H, D, k),
        S.new_empty(H),
    )


def _scores_setup(ctx, inputs, output):
    S, bias, w1, b1, w2, b2, causal, softmax = inputs
    ctx.save_for_backward(S, bias, w1, b1, w2, output if softmax else None)
    ctx.causal = causal


def _scores_grad(ctx, g):
    S, bias, w1, b1, w2, P = ctx.saved_tensors
    need_gbias = bias is not None and ctx.needs_input_grad[1]
    gS, g_bias_rows, gw1, gb1, gw2, gb2 = _scores_backward(S, bias, w1, b1, w2, g, P, ctx.causal, need_gbias)
    g_bias = None  # the direct path (gA) and the one through f, summed by the kernel
    if need_gbias:
        g_bias = g_bias_rows.sum(0, keepdim=True) if bias.shape[0] == 1 else g_bias_rows
    return gS, g_bias, gw1.view(w1.shape), gb1, gw2.view(w2.shape), gb2, None, None


_scores.register_autograd(_scores_grad, setup_context=_scores_setup)
# S and the bias per batch element (the bias also once for the batch); the weights shared by the
# batch, so seeds with their own weights run one kernel call each
_ROLES = ("batch", "batch|1", "shared", "shared", "shared", "shared", None, None)
_scores.register_vmap(lambda info, dims, *a: fold_vmap(_scores, info, dims, a, _ROLES))


def native_applies(*operands: Tensor | None) -> bool:
    """Whether the C++ kernel runs: float32 CPU operands, the kernel built and not switched off."""
    return (
        all(t.device.type == "cpu" and t.dtype == torch.float32 for t in operands if t is not None)
        and dape_kernel() is not None
    )


def triton_applies(S: Tensor, w1: Tensor, with_bias: bool, causal: bool, softmax: bool) -> bool:
    """Whether the Triton kernels run: CUDA tensors of a float type they take,
    SYNTHLAB_DAPE_TRITON=1 (off by default until a GPU has measured them), triton importable, the
    kernels compiled for these sizes (a failure warns once)."""
    if not (S.is_cuda and S.dtype in (torch.float32, torch.bfloat16, torch.float16)):
        return False
    from . import dape_triton  # here: CPU-only runs never import triton

    D, C, _, k = w1.shape
    H, T = S.shape[-3], S.shape[-1]
    return (
        dape_triton.enabled()
        and dape_triton.triton_available(S.device)
        and dape_triton.builds(S.device, H, C, T, D, k, with_bias, causal, softmax)
    )


# ---- the dispatchers: what the DAPE module calls ----


def dape_scores(
    S: Tensor,
    bias: Tensor | None,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    causal: bool,
    future: Tensor | None,
    reference: Reference,
) -> Tensor:
    """DAPE's processed logits A (B, H, T, T), -inf above the diagonal in causal mode: S (B, H,
    T, T), bias (1|B, H, T, T) or None (a DAPE without one), the convolutions' weights. The C++
    kernel, the Triton kernels, in causal mode the packed GEMMs, else ``reference()`` (unmasked:
    encoder mode has no mask)."""
    if native_applies(S, bias, w1, w2):
        return _scores(S, bias, w1, b1, w2, b2, causal, False)
    if triton_applies(S, w1, bias is not None, causal, softmax=False):
        from . import dape_triton

        return dape_triton.DAPETriton.apply(S, bias, w1, b1, w2, b2, causal, False)
    if not causal:
        return reference()
    assert future is not None, "causal mode has its mask"
    base = S if bias is None else S + bias
    # in place: a fresh tensor whose producer's backward does not need it
    return dape_packed(S, bias, base, w1, b1, w2, b2).masked_fill_(future, float("-inf"))


def dape_attention(
    S: Tensor,
    bias: Tensor | None,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    causal: bool,
    future: Tensor | None,
    reference: Reference,
) -> Tensor:
    """softmax(A) over the keys, A as in :func:`dape_scores`: the attention weights (B, H, T, T),
    the softmax's backward fused into the kernels' where one applies."""
    if native_applies(S, bias, w1, w2):
        return _scores(S, bias, w1, b1, w2, b2, causal, True)
    if triton_applies(S, w1, bias is not None, causal, softmax=True):
        from . import dape_triton

        return dape_triton.DAPETriton.apply(S, bias, w1, b1, w2, b2, causal, True)
    return F.softmax(dape_scores(S, bias, w1, b1, w2, b2, causal, future, reference), dim=-1)
