"""CoPE's fused operations: the C++ kernel (``cope_cpu.cpp``) as torch.library custom ops, and one
dispatcher per operation that picks the C++ kernel (float32 CPU operands outside autocast;
``SYNTHLAB_NATIVE=0`` turns it off), the Triton kernels (CUDA; ``cope_triton.py``) or the
caller's PyTorch reference (``encoders/contextual.py``). The ops have autograd, fake-tensor and
vmap rules (batched seeds fold into the batch: ``batched.fold_vmap``). docs/native.md.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ..batched import fold_vmap
from . import cope_kernel, ptr

Reference = Callable[[], Tensor]


def _dense(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.contiguous()  # the same tensor where it is contiguous already


def _slopes(slopes: Tensor | None, H: int) -> Tensor | None:
    return None if slopes is None else slopes.reshape(H).contiguous()


def _lib():
    lib = cope_kernel()
    assert lib is not None, "called only where the kernel loaded"
    return lib


def _empty_if_none(t: Tensor | None, like: Tensor) -> Tensor:
    return like.new_empty(0) if t is None else t  # a custom op returns tensors, never None


# ---- the C++ kernel as custom ops ----


@torch.library.custom_op("synthlab::cope_term", mutates_args=())
def _term(gates: Tensor, table: Tensor | None, slopes: Tensor | None, npos: int) -> Tensor:
    """The additive CoPE term (B, H, T, T), 0 above the diagonal, from gates = sigmoid(logits)
    (the future not yet zeroed: the kernel reads the lower triangle) and table = q . pos_emb
    (B, H, T, npos), or None with ``slopes`` (H,) for CoPE-ALiBi."""
    B, H, T, _ = gates.shape
    gates, table, slopes = gates.contiguous(), _dense(table), _slopes(slopes, H)
    out = torch.empty_like(gates)
    _lib().cope_forward(ptr(gates), ptr(table), ptr(slopes), ptr(out), B, H, T, npos, torch.get_num_threads())
    return out


@torch.library.custom_op("synthlab::cope_term_backward", mutates_args=())
def _term_backward(
    gates: Tensor, table: Tensor | None, slopes: Tensor | None, grad: Tensor, npos: int
) -> tuple[Tensor, Tensor]:
    B, H, T, _ = gates.shape
    gates, table, slopes, grad = gates.contiguous(), _dense(table), _slopes(slopes, H), grad.contiguous()
    g_gates = torch.empty_like(gates)
    g_table = None if table is None else torch.empty_like(table)
    _lib().cope_backward(
        ptr(gates),
        ptr(table),
        ptr(slopes),
        ptr(grad),
        ptr(g_gates),
        ptr(g_table),
        B,
        H,
        T,
        npos,
        torch.get_num_threads(),
    )
    return g_gates, _empty_if_none(g_table, gates)


@torch.library.custom_op("synthlab::cope_probabilities", mutates_args=())
def _probabilities(S: Tensor, G: Tensor | None, table: Tensor | None, slopes: Tensor | None, npos: int) -> Tensor:
    """The attention weights softmax_j(S_ij + CoPE term_ij) over j <= i (0 above the diagonal),
    the gates made inside from ``G`` (the gate logits; None: S itself)."""
    B, H, T, _ = S.shape
    S, G, table, slopes = S.contiguous(), _dense(G), _dense(table), _slopes(slopes, H)
    att = torch.empty_like(S)
    _lib().cope_attention_forward(
        ptr(S), ptr(G), ptr(table), ptr(slopes), ptr(att), B, H, T, npos, torch.get_num_threads()
    )
    return att


@torch.library.custom_op("synthlab::cope_probabilities_backward", mutates_args=())
def _probabilities_backward(
    S: Tensor | None,
    G: Tensor | None,
    table: Tensor | None,
    slopes: Tensor | None,
    att: Tensor,
    grad: Tensor,
    npos: int,
) -> tuple[Tensor, Tensor, Tensor]:
    B, H, T, _ = att.shape
    S, G, table, slopes = _dense(S), _dense(G), _dense(table), _slopes(slopes, H)
    att, grad = att.contiguous(), grad.contiguous()
    gS = torch.empty_like(att)
    gG = None if G is None else torch.empty_like(G)
    g_table = None if table is None else torch.empty_like(table)
    _lib().cope_attention_backward(
        ptr(S),
        ptr(G),
        ptr(table),
        ptr(slopes),
        ptr(att),
        ptr(grad),
        ptr(gS),
        ptr(gG),
        ptr(g_table),
        B,
        H,
        T,
        npos,
        torch.get_num_threads(),
    )
    return gS, _empty_if_none(gG, att), _empty_if_none(g_table, att)


@torch.library.custom_op("synthlab::cope_attention", mutates_args=())
def _attention(
    q: Tensor, k: Tensor, v: Tensor, table: Tensor | None, slopes: Tensor | None, npos: int, scale: float
) -> tuple[Tensor, Tensor]:
    """(y, lse): y = softmax_j(q_i k_j scale + CoPE term_ij) v_j (B, H, T, d_h) flash-attention
    style (no (T, T) tensor), lse (B, H, T) each row's log-sum-exp, saved for the backward."""
    B, H, T, D = q.shape
    q, k, v, table, slopes = q.contiguous(), k.contiguous(), v.contiguous(), _dense(table), _slopes(slopes, H)
    y = torch.empty_like(q)
    lse = q.new_empty(B, H, T)
    _lib().cope_qkv_forward(
        ptr(q),
        ptr(k),
        ptr(v),
        ptr(table),
        ptr(slopes),
        ptr(y),
        ptr(lse),
        B,
        H,
        T,
        D,
        npos,
        scale,
        torch.get_num_threads(),
    )
    return y, lse


@torch.library.custom_op("synthlab::cope_attention_backward", mutates_args=())
def _attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor | None,
    slopes: Tensor | None,
    lse: Tensor,
    gy: Tensor,
    npos: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    B, H, T, D = q.shape
    q, k, v, table, slopes = q.contiguous(), k.contiguous(), v.contiguous(), _dense(table), _slopes(slopes, H)
    gy = gy.contiguous()
    gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    g_table = None if table is None else torch.empty_like(table)
    _lib().cope_qkv_backward(
        ptr(q),
        ptr(k),
        ptr(v),
        ptr(table),
        ptr(slopes),
        ptr(lse),
        ptr(gy),
        ptr(gq),
        ptr(gk),
        ptr(gv),
        ptr(g_table),
        B,
        H,
        T,
        D,
        npos,
        scale,
        torch.get_num_threads(),
    )
    return gq, gk, gv, _empty_if_none(g_table, q)


# fake tensors (torch.compile, meta): the shapes alone


@_term.register_fake
def _(gates, table, slopes, npos):
    return torch.empty_like(gates)


@_term_backward.register_fake
def _(gates, table, slopes, grad, npos):
    return torch.empty_like(gates), _empty_if_none(None if table is None else torch.empty_like(table), gates)


@_probabilities.register_fake
def _(S, G, table, slopes, npos):
    return torch.empty_like(S)


@_probabilities_backward.register_fake
def _(S, G, table, slopes, att, grad, npos):
    return (
        torch.empty_like(att),
        _empty_if_none(None if G is None else torch.empty_like(G), att),
        _empty_if_none(None if table is None else torch.empty_like(table), att),
    )


@_attention.register_fake
def _(q, k, v, table, slopes, npos, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:-1])


@_attention_backward.register_fake
def _(q, k, v, table, slopes, lse, gy, npos, scale):
    return (
        torch.empty_like(q),
        torch.empty_like(k),
        torch.empty_like(v),
        _empty_if_none(None if table is None else torch.empty_like(table), q),
    )


# autograd: each backward is the kernel's backward op


def _term_setup(ctx, inputs, output):
    gates, table, slopes, npos = inputs
    ctx.save_for_backward(gates, table, slopes)
    ctx.npos = npos


def _term_grad(ctx, g):
    gates, table, slopes = ctx.saved_tensors
    g_gates, g_table = _term_backward(gates, table, slopes, g, ctx.npos)
    return g_gates, None if table is None else g_table, None, None


def _probabilities_setup(ctx, inputs, output):
    S, G, table, slopes, npos = inputs
    ctx.save_for_backward(S if G is None else None, G, table, slopes, output)
    ctx.npos = npos


def _probabilities_grad(ctx, g):
    S, G, table, slopes, att = ctx.saved_tensors
    gS, gG, g_table = _probabilities_backward(S, G, table, slopes, att, g, ctx.npos)
    return gS, None if G is None else gG, None if table is None else g_table, None, None


def _attention_setup(ctx, inputs, output):
    q, k, v, table, slopes, npos, scale = inputs
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(q, k, v, table, slopes, output[1])
    ctx.npos, ctx.scale = npos, scale


def _attention_grad(ctx, gy, _g_lse):
    q, k, v, table, slopes, lse = ctx.saved_tensors
    gq, gk, gv, g_table = _attention_backward(q, k, v, table, slopes, lse, gy, ctx.npos, ctx.scale)
    return gq, gk, gv, None if table is None else g_table, None, None, None


_term.register_autograd(_term_grad, setup_context=_term_setup)
_probabilities.register_autograd(_probabilities_grad, setup_context=_probabilities_setup)
_attention.register_autograd(_attention_grad, setup_context=_attention_setup)

# vmap (batched seeds): each batch element is independent, so the vmapped dim folds into B;
# CoPE-ALiBi's slopes are one for the batch
_term.register_vmap(lambda info, dims, *a: fold_vmap(_term, info, dims, a, ("batch", "batch", "shared", None)))
_probabilities.register_vmap(
    lambda info, dims, *a: fold_vmap(_probabilities, info, dims, a, ("batch", "batch", "batch", "shared", None))
)
_attention.register_vmap(
    lambda info, dims, *a: fold_vmap(
        _attention, info, dims, a, ("batch", "batch", "batch", "batch", "shared", None, None)
    )
)


# ---- which path runs ----


def _cpu_autocast() -> bool:
    """Whether autocast is on for CPU tensors (train.precision=bf16-mixed)."""
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def native_applies(*operands: Tensor | None) -> bool:
    """Whether the C++ kernel runs: float32 CPU operands, no CPU autocast (under it a table
    q . pos_emb is bfloat16 even where q is float32: under vmap nn.Linear with stacked weights is
    not autocast), the kernel built and not switched off."""
    return (
        not _cpu_autocast()
        and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in operands if t is not None)
        and cope_kernel() is not None
    )


def triton_applies(q: Tensor, npos: int, has_table: bool) -> bool:
    """Whether the Triton kernels run: CUDA tensors of a float type they take (float64 keeps the
    PyTorch path), SYNTHLAB_COPE_TRITON not 0, triton importable, the kernels compiled for these
    sizes (a compile failure warns once and leaves the PyTorch path on)."""
    if not (q.is_cuda and q.dtype in (torch.float32, torch.bfloat16, torch.float16)):
        return False
    from . import cope_triton  # here: CPU-only runs never import triton

    H, T, D = q.shape[-3:]
    return (
        cope_triton.enabled()
        and cope_triton.triton_available(q.device)
        and cope_triton.builds(q.device, H, T, D, npos, has_table)
    )


# ---- the dispatchers: what the CoPE module calls ----


def cope_term(G: Tensor, table: Tensor | None, slopes: Tensor | None, npos: int, reference: Reference) -> Tensor:
    """CoPE's additive term (B, H, T, T) from the gate logits G (B, H, T, T) and table
    (B, H, T, npos) (None with ``slopes`` (H, 1, 1): CoPE-ALiBi). The C++ kernel where it
    applies (0 above the diagonal), else ``reference()``."""
    if native_applies(G, table, slopes):
        return _term(torch.sigmoid(G), table, slopes, npos)
    return reference()


def cope_probabilities(
    S: Tensor, G: Tensor | None, table: Tensor | None, slopes: Tensor | None, npos: int, reference: Reference
) -> Tensor:
    """softmax(S + CoPE term) with the causal mask (B, H, T, T); G: the gate logits (None: S).
    The C++ kernel in one pass where it applies, else ``reference()``."""
    if native_applies(S, G, table, slopes):
        return _probabilities(S, G, table, slopes, npos)
    return reference()


def cope_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor | None,
    slopes: Tensor | None,
    npos: int,
    scale: float,
    reference: Reference,
) -> Tensor:
    """The attention output softmax_j(q_i k_j scale + CoPE term_ij) v_j (B, H, T, d_h), gates
    from the attention logits, without any (T, T) tensor: the C++ kernel on CPU, the Triton
    kernels on CUDA, else ``reference()`` (which materialises them)."""
    if native_applies(q, k, v, table, slopes):
        # made dense here, in the graph: the op then saves the forward's very operands
        return _attention(q.contiguous(), k.contiguous(), v.contiguous(), table, slopes, npos, scale)[0]
    if triton_applies(q, npos, table is not None):
        from . import cope_triton

        return cope_triton.CoPEQKVTriton.apply(q, k, v, table, slopes, npos, scale)
    return reference()
