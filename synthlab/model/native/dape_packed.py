"""DAPE's causal PyTorch fast path: both convolutions as GEMMs on the lower triangle of the
(T, T) maps folded into ceil(T/2) rows, with hand-written backwards for the shifts. The same
function as ``DAPE.forward_full`` (the reference, ``model/processors.py``) on the causal half.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..cache import TensorCache

_PACK_CACHE = TensorCache(max_bytes=128 * 2**20)  # index maps per (T, c, device), shared by all models


def _packing(T: int, c: int, device: torch.device):
    """Index maps that fold the causal (lower) triangle of a T x T map into R = ceil(T/2) rows of
    width W = T + 1 + 3c: packed row r = [row r (n = r+1 entries) | 2c zeros | row T-1-r (m = T-r
    entries) | c zeros]. A (1 x k) convolution, c = k // 2, with zero padding on the packed rows
    then equals DAPE V2's on the full map (tril once, on the input) on half the positions:

    - conv1 must give the hidden values of the full map on each row plus the c positions after
      it (above the diagonal, where the paper's map holds LeakyReLU(conv1 bias + row i's last
      inputs), read by conv2 at the diagonal). Those positions read inputs up to 2c past the row,
      all zero on the full map: hence a 2c-wide seam (c would let them see the next row).
    - conv2 must see zeros where the full map has its padding: the c positions before a row (the
      second half of the seam) and columns >= T. conv1's bias makes the hidden map non-zero there,
      so those positions are zeroed (``hidden_pad``).

    Returns (gather (R*(W+2c),) into a flattened T*T map, zero (R, W+2c) bool marking the
    input's padding / seams, scatter (T*T,) from the flattened packed (R*W) map back to T x T,
    hidden_pad (R*W,) bool: the hidden positions that are conv2's zero padding on the full map)."""
    return _PACK_CACHE.get(("pack", T, c, device), lambda: _make_packing(T, c, device))


def _make_packing(T: int, c: int, device: torch.device):
    R, W = (T + 1) // 2, T + 1 + 3 * c
    Wp = W + 2 * c
    gather = torch.zeros(R, Wp, dtype=torch.long)
    zero = torch.ones(R, Wp, dtype=torch.bool)
    scatter = torch.zeros(T, T, dtype=torch.long)
    hidden_pad = torch.ones(R, W, dtype=torch.bool)
    for r in range(R):
        other = T - 1 - r  # == r for the middle row of an odd T: it has the packed row to itself
        for i, at in [(r, 0)] + ([(other, r + 1 + 2 * c)] if other != r else []):  # (query row, first position)
            L = i + 1
            gather[r, c + at : c + at + L] = i * T + torch.arange(L)
            zero[r, c + at : c + at + L] = False
            scatter[i, :L] = r * W + at + torch.arange(L)
            hidden_pad[r, at : at + min(L + c, T)] = False  # the row and the c hidden values after it, inside the map
    return gather.flatten().to(device), zero.to(device), scatter.flatten().to(device), hidden_pad.flatten().to(device)


def _hidden_pad_index(T: int, c: int, B: int, device: torch.device) -> torch.Tensor:
    """Flat positions (in the packed hidden map, B*R*W) that are conv2's zero padding on the
    full map (see ``_packing``), for B batch elements (cached)."""

    def make() -> torch.Tensor:  # on the CPU, then moved: nonzero on a GPU would wait for the device
        pad = _packing(T, c, torch.device("cpu"))[3]  # (R*W,)
        per = pad.nonzero().flatten()
        return (torch.arange(B).unsqueeze(1) * pad.numel() + per).flatten().to(device)

    return _PACK_CACHE.get(("hidden_pad", T, c, B, device), make)


# The autograd Functions below are written in the setup_context style (forward without ctx) and
# have a ``vmap`` rule, so that they run under torch.func.vmap over stacked seeds (batched seeds,
# synthlab/model/stacked.py): each moves the vmapped dim into a dim it treats alike.


class _Shifts(torch.autograd.Function):
    """(C, ..., W + 2c) -> (C, k, ..., W): the k = 2c + 1 windows X[..., s : s + W] (im2col along
    the key axis). Hand-written backward: one buffer instead of k zero-filled slices."""

    @staticmethod
    def forward(X: torch.Tensor, k: int) -> torch.Tensor:
        W = X.shape[-1] - (k - 1)
        return torch.stack([X[..., s : s + W] for s in range(k)], dim=1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        X, k = inputs
        ctx.k, ctx.shape = k, X.shape

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        k = ctx.k
        W = g.shape[-1]
        gX = g.new_zeros(ctx.shape)
        for s in range(k):
            gX[..., s : s + W] += g[:, s]
        return gX, None

    @staticmethod
    def vmap(info, in_dims, X, k):  # the vmapped dim as one of the "..." dims: (C, V, ...) -> (C, k, V, ...)
        return _Shifts.apply(X.movedim(in_dims[0], 1), k), 2


class _ShiftSum(torch.autograd.Function):
    """Y (k, ..., W) -> out (..., W) with out[..., w] = sum_s Y[s, ..., w + s - c] (zero outside
    [0, W)), c = k // 2: the key-axis shifts of a (1 x k) convolution after its GEMM."""

    @staticmethod
    def forward(Y: torch.Tensor) -> torch.Tensor:
        k, W = Y.shape[0], Y.shape[-1]
        c = k // 2
        out = Y[c].clone()
        for s in range(k):
            off = s - c
            if off > 0:
                out[..., : W - off] += Y[s, ..., off:]
            elif off < 0:
                out[..., -off:] += Y[s, ..., : W + off]
        return out

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[0].shape[0]

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        W = g.shape[-1]
        k = ctx.k
        gY = g.new_empty((k, *g.shape))
        c = k // 2
        for s in range(k):
            off = s - c
            if off == 0:
                gY[s] = g
            elif off > 0:
                gY[s, ..., off:] = g[..., : W - off]
                gY[s, ..., :off] = 0
            else:
                gY[s, ..., : W + off] = g[..., -off:]
                gY[s, ..., W + off :] = 0
        return gY

    @staticmethod
    def vmap(info, in_dims, Y):  # the vmapped dim as one of the "..." dims: (k, V, ...) -> (V, ...)
        return _ShiftSum.apply(Y.movedim(in_dims[0], 1)), 0


class _PaddedLeakyReLU(torch.autograd.Function):
    """In place on P (D, N): LeakyReLU, then zeros at the columns ``pad`` (conv2's padding on the
    full map). One hidden-sized buffer in backward instead of two."""

    @staticmethod
    def forward(P: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        F.leaky_relu_(P)
        return P.index_fill_(-1, pad, 0.0)  # the last dim: P may carry a vmapped dim in front (vmap below)

    @staticmethod
    def setup_context(ctx, inputs, output):
        P, pad = inputs
        ctx.mark_dirty(P)
        ctx.save_for_backward(output, pad)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        h, pad = ctx.saved_tensors
        gi = torch.ops.aten.leaky_relu_backward(g, h, 0.01, True)
        return gi.index_fill_(-1, pad, 0.0), None

    @staticmethod
    def vmap(info, in_dims, P, pad):
        """The vmapped dim moved to the front keeps P's own last dim last, where ``pad`` indexes:
        in place on (a view of) the vmapped P. A vmapped ``pad`` (its own columns per slice)
        goes slice by slice on copies, out of place (the callers use the result, not P)."""
        if in_dims[1] is None:
            return _PaddedLeakyReLU.apply(P.movedim(in_dims[0], 0), pad), 0
        pads = pad.movedim(in_dims[1], 0)
        Ps = P.movedim(in_dims[0], 0) if in_dims[0] is not None else P.expand(info.batch_size, *P.shape)
        return torch.stack([_PaddedLeakyReLU.apply(Ps[i].clone(), pads[i]) for i in range(info.batch_size)]), 0


def dape_packed(
    S: torch.Tensor,
    bias: torch.Tensor | None,
    base: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
) -> torch.Tensor:
    """DAPE's A = base + f([S, bias]) in causal mode (``bias`` None: f(S)), the convolutions as
    GEMMs on the lower triangle folded into ceil(T/2) rows (see ``_packing``); w1 (D, C, 1, k),
    w2 (H, D, 1, k) the two convolutions' weights. Values above the diagonal are placeholders,
    masked later. What DAPE runs where no kernel applies (GPU, float64, no C++ compiler)."""
    B, H, T, _ = S.shape
    D, k = w1.shape[0], w1.shape[-1]
    c = k // 2
    gather, zero, scatter, _ = _packing(T, c, S.device)
    R, Wp = zero.shape
    W = Wp - 2 * c

    zero_flat = zero.flatten()  # (R*(W+2c),)

    def pack(t: torch.Tensor) -> torch.Tensor:  # (b, C, T, T) -> channel-major (C, b, R, W + 2c), zeros at seams / ends
        t = t.transpose(0, 1).flatten(2).index_select(-1, gather).masked_fill_(zero_flat, 0.0)
        return t.view(t.shape[0], t.shape[1], R, Wp)

    X = pack(S)
    if bias is not None:
        X = torch.cat([X, pack(bias).expand(-1, B, -1, -1)], dim=0)  # (2H, B, R, W + 2c)
    C = X.shape[0]
    # conv1 as one GEMM over shifted copies of the (small) input: (D, C k) @ (C k, B R W)
    Xu = X if k == 1 else _Shifts.apply(X, k)  # (C, k, B, R, W)
    P = torch.addmm(b1.unsqueeze(1), w1.reshape(D, C * k), Xu.reshape(C * k, -1))  # (D, B*R*W)
    if k > 1:  # LeakyReLU, then zeros where the full map has conv2's padding (in place)
        h = _PaddedLeakyReLU.apply(P, _hidden_pad_index(T, c, B, S.device))
    else:  # k = 1: a position outside the rows reaches no output that is kept
        h = F.leaky_relu_(P)  # (D, B*R*W)
    # conv2 as one GEMM to k shifted outputs, then a shifted sum on the (small) result
    w2k = w2[:, :, 0, :].permute(2, 0, 1).reshape(k * H, D)  # row s*H + o
    Y = (w2k @ h).view(k, H, B, R, W)
    out = Y[0] if k == 1 else _ShiftSum.apply(Y)  # out[w] = sum_s Y[s, w + s - c]
    out = out + b2.view(H, 1, 1, 1)  # (H, B, R, W)
    out = out.flatten(2).index_select(-1, scatter).view(H, B, T, T).transpose(0, 1)
    return base + out  # values above the diagonal are placeholders, masked later
