"""Logit processors (axis 3 of docs/architecture.md): DAPE and DAPE V2 (1 x k convolutions)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .batched import fold_vmap
from .cache import TensorCache
from .native import dape_kernel, ptr
from .registry import BuildConfig

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
            gather[r, c + at: c + at + L] = i * T + torch.arange(L)
            zero[r, c + at: c + at + L] = False
            scatter[i, :L] = r * W + at + torch.arange(L)
            hidden_pad[r, at: at + min(L + c, T)] = False  # the row and the c hidden values after it, inside the map
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
# synthlab/model/stacked.py). The PyTorch path's helpers move the vmapped dim into a
# dim they treat alike; the native kernels fold it into their batch (batched.fold_vmap).


class _Shifts(torch.autograd.Function):
    """(C, ..., W + 2c) -> (C, k, ..., W): the k = 2c + 1 windows X[..., s : s + W] (im2col along
    the key axis). Hand-written backward: one buffer instead of k zero-filled slices."""

    @staticmethod
    def forward(X: torch.Tensor, k: int) -> torch.Tensor:
        W = X.shape[-1] - (k - 1)
        return torch.stack([X[..., s: s + W] for s in range(k)], dim=1)

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
            gX[..., s: s + W] += g[:, s]
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
                gY[s, ..., W + off:] = 0
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


class _FusedDAPE(torch.autograd.Function):
    """A = S + bias + f([S, bias]), -inf above the diagonal in causal mode, by the native CPU
    kernel (``native/dape_cpu.cpp``): both convolutions and the LeakyReLU fused per strip of
    query rows, the hidden map recomputed in backward instead of stored. The same function as
    ``DAPE.forward_full`` followed by the causal mask."""

    @staticmethod
    def forward(S, bias, w1, b1, w2, b2, causal: bool):
        return _dape_forward(S, bias, w1, b1, w2, b2, causal)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*_dape_saved(ctx, *inputs))

    @staticmethod
    def backward(ctx, g):
        S, b_in, w1c, b1, w2c = ctx.saved_tensors
        return _dape_backward(ctx, g, None, S, b_in, w1c, b1, w2c)

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(_FusedDAPE.apply, info, in_dims, args, _DAPE_ROLES)


class _FusedDAPESoftmax(torch.autograd.Function):
    """P = softmax(A) with A as in ``_FusedDAPE``; the backward hands dP and P to the kernel,
    which forms dA = P (dP - <dP, P>) row by row as it loads them (softmax's backward fused:
    one pass over B x H x T^2 instead of three). What the attention of a DAPE layer uses."""

    @staticmethod
    def forward(S, bias, w1, b1, w2, b2, causal: bool):
        return torch.softmax(_dape_forward(S, bias, w1, b1, w2, b2, causal), dim=-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*_dape_saved(ctx, *inputs), output)

    @staticmethod
    def backward(ctx, g):
        S, b_in, w1c, b1, w2c, P = ctx.saved_tensors
        return _dape_backward(ctx, g, P, S, b_in, w1c, b1, w2c)

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(_FusedDAPESoftmax.apply, info, in_dims, args, _DAPE_ROLES)


# S and the bias per batch element (the bias also once for the batch); the weights shared by the
# batch, so seeds with their own weights run one kernel call each
_DAPE_ROLES = ("batch", "batch|1", "shared", "shared", "shared", "shared", None)


def _dape_operands(S, bias, w1, w2):
    """The kernel's dense operands: (S, b_in, shared, w1c, w2c); b_in is one (1, H, T, T) map
    for the whole batch where the bias is (``shared``)."""
    H = S.shape[1]
    D, C, _, k = w1.shape
    shared = bias is not None and (bias.shape[0] == 1 or bias.stride(0) == 0)
    b_in = None if bias is None else (bias[:1].contiguous() if shared else bias.contiguous())
    return S.contiguous(), b_in, shared, w1.reshape(D, C, k).contiguous(), w2.reshape(H, D, k).contiguous()


def _dape_forward(S, bias, w1, b1, w2, b2, causal: bool):
    """The kernel's forward for both Functions -> A."""
    lib = dape_kernel()
    assert lib is not None, "called only where the kernel loaded"
    B, H, T, _ = S.shape
    D, C, _, k = w1.shape
    S, b_in, shared, w1c, w2c = _dape_operands(S, bias, w1, w2)
    out = torch.empty_like(S)
    lib.dape_forward(ptr(S), ptr(b_in), 0 if shared else H * T * T, ptr(out), ptr(w1c), ptr(b1),
                     ptr(w2c), ptr(b2), B, T, H, C, D, k, int(causal), torch.get_num_threads())
    return out


def _dape_saved(ctx, S, bias, w1, b1, w2, b2, causal: bool):
    """Both Functions' setup_context: ctx.meta and the tensors the backward needs (the forward's
    operands again: views or the same tensors, no copy where they were dense already)."""
    S, b_in, shared, w1c, w2c = _dape_operands(S, bias, w1, w2)
    ctx.meta = (causal, shared, None if bias is None else bias.shape, w1.shape, w2.shape)
    return S, b_in, w1c, b1, w2c

def _dape_backward(ctx, g, P, S, b_in, w1c, b1, w2c):
    """The kernel's backward for both Functions (g is dA, or dP when P is given)."""
    lib = dape_kernel()
    assert lib is not None, "called only where the kernel loaded"
    causal, shared, bias_shape, w1_shape, w2_shape = ctx.meta
    B, H, T, _ = S.shape
    D, C, k = w1c.shape
    g = g.contiguous()
    gS = torch.empty_like(S)
    g_bias_rows = torch.empty_like(S) if b_in is not None and ctx.needs_input_grad[1] else None
    gw1, gb1, gw2, gb2 = (torch.empty_like(w1c), torch.empty_like(b1), torch.empty_like(w2c),
                          torch.empty(H, dtype=S.dtype))
    lib.dape_backward(ptr(S), ptr(b_in), 0 if shared else H * T * T, ptr(g), ptr(P), ptr(gS), ptr(g_bias_rows),
                      ptr(w1c), ptr(b1), ptr(w2c), ptr(gw1), ptr(gb1), ptr(gw2), ptr(gb2),
                      B, T, H, C, D, k, int(causal), torch.get_num_threads())
    g_bias = None  # the direct path (gA) and the one through f, summed by the kernel
    if g_bias_rows is not None:
        g_bias = g_bias_rows.sum(0, keepdim=True) if bias_shape[0] == 1 else g_bias_rows
    return gS, g_bias, gw1.view(w1_shape), gb1, gw2.view(w2_shape), gb2, None



class DAPE(nn.Module):
    """DAPE (Zheng et al. 2024) and DAPE V2 (Sec. 3.3, App. L).

    A = S + B + f([S, B]): f maps the per-(i, j) vector of heads [S, B] (2H channels; H with
    no bias, e.g. nope / rope) to H channels through two convolutions of kernel (1, k) along
    the key axis with a LeakyReLU between, hidden width D (32). k = 1 is DAPE (an MLP across
    heads); k > 1 is DAPE V2 (stride 1, same padding k // 2). In causal mode the input is
    zeroed above the diagonal once, before the first convolution (Eq. 5, f(tril([S, B])); App. L;
    the authors' code: chuanyang-Zheng/DAPE, megatron/model/positional_embeddings.py,
    Kerple_DAPEV2.forward, ``self.mlp2(torch.tril(x_a_bias))``). Each convolution runs along one
    query row, whose inputs past i are then zero, so no future score reaches a past query; the
    hidden map is not zeroed: the second convolution at (i, j) reads the hidden values (i, i+1 ..
    j+c), LeakyReLU of conv1's bias and row i's last inputs. f sees the finite pre-mask scores.
    In encoder mode (``causal=False``) nothing is zeroed: the convolutions run along each whole
    row of the T x T map. DAPE V2 reports CHE (Table 6) in Ruoss et al.'s setting, a
    bidirectional encoder; its released code has only the causal form, so this is synthlab's
    reading of App. L without the mask.

    On CPU in float32 the native kernel (``native/dape_cpu.cpp``) computes A directly: the
    convolutions on the lower triangle only, both fused with the LeakyReLU so the hidden map
    stays in cache. ``attention`` (what the attention layer calls) returns softmax(A), with the
    softmax's backward fused into the kernel's; ``forward`` returns A itself. Elsewhere (GPU,
    float64, no C++ compiler) ``forward_packed`` runs them as GEMMs on the lower triangle folded
    into ceil(T/2) rows (see ``_packing``), and
    ``forward_full`` is the plain version on the whole T x T map (encoder mode, tests). On a CUDA
    GPU with ``SYNTHLAB_DAPE_TRITON=1`` Triton kernels (``native/dape_triton.py``) compute A or
    softmax(A) with the hidden map recomputed in registers (opt-in: not yet measured on a GPU).
    """

    @classmethod
    def build(cls, cfg: BuildConfig) -> "DAPE":
        return cls(cfg.n_heads, with_bias=cfg.scores_bias, hidden=cfg.params["hidden"], k=cfg.params["k"], causal=cfg.causal)

    def __init__(self, n_heads: int, with_bias: bool, hidden: int = 32, k: int = 1, causal: bool = True):
        super().__init__()
        if k % 2 == 0 or k < 1:
            raise ValueError(f"dape:k={k} must be an odd integer >= 1")
        c_in = 2 * n_heads if with_bias else n_heads
        self.k, self.causal, self.with_bias = k, causal, with_bias
        self.conv1 = nn.Conv2d(c_in, hidden, kernel_size=(1, k), padding=(0, k // 2))
        self.conv2 = nn.Conv2d(hidden, n_heads, kernel_size=(1, k), padding=(0, k // 2))

    def _inputs(self, S: torch.Tensor, bias: torch.Tensor | None):
        if self.with_bias:
            if bias is None:
                raise ValueError("dape was built for a bias but got none")
            return S + bias
        return S

    def _native(self, S: torch.Tensor, bias: torch.Tensor | None) -> bool:
        tensors = [S, self.conv1.weight, self.conv2.weight] + ([] if bias is None else [bias])
        return all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors) and dape_kernel() is not None

    def forward(self, S: torch.Tensor, bias: torch.Tensor | None, future: torch.Tensor | None) -> torch.Tensor:
        """S (B, H, T, T), bias (1|B, H, T, T) or None, future (T, T) bool -> A (B, H, T, T),
        with the causal mask applied (-inf above the diagonal) in causal mode."""
        if self._native(S, bias):
            return _FusedDAPE.apply(S, bias if self.with_bias else None, self.conv1.weight, self.conv1.bias,
                                    self.conv2.weight, self.conv2.bias, self.causal)
        if self._triton(S, softmax=False):
            return self._by_triton(S, bias, softmax=False)
        if not self.causal:
            return self.forward_full(S, bias, None)
        # in place: a fresh tensor whose producer's backward does not need it
        assert future is not None, "causal mode has its mask"
        return self.forward_packed(S, bias, self._inputs(S, bias)).masked_fill_(future, float("-inf"))

    def attention(self, S: torch.Tensor, bias: torch.Tensor | None, future: torch.Tensor | None) -> torch.Tensor:
        """softmax(forward(S, bias, future)) over the keys: the attention weights (B, H, T, T),
        with the softmax's backward fused into the native kernel's."""
        if self._native(S, bias):
            return _FusedDAPESoftmax.apply(S, bias if self.with_bias else None, self.conv1.weight, self.conv1.bias,
                                           self.conv2.weight, self.conv2.bias, self.causal)
        if self._triton(S):
            return self._by_triton(S, bias, softmax=True)
        return F.softmax(self(S, bias, future), dim=-1)

    def _triton(self, S: torch.Tensor, softmax: bool = True) -> bool:
        """Whether the Triton kernels (``native/dape_triton.py``) run: CUDA tensors of a float
        type they take, SYNTHLAB_DAPE_TRITON=1 (off by default until a GPU has measured them),
        triton importable, the kernels compiled for these sizes (a failure warns once)."""
        if not (S.is_cuda and S.dtype in (torch.float32, torch.bfloat16, torch.float16)):
            return False
        from .native import dape_triton  # here: CPU-only runs never import triton

        D, C, _, k = self.conv1.weight.shape
        H, T = S.shape[-3], S.shape[-1]
        return (dape_triton.enabled() and dape_triton.triton_available(S.device)
                and dape_triton.builds(S.device, H, C, T, D, k, self.with_bias, self.causal, softmax))

    def _by_triton(self, S: torch.Tensor, bias: torch.Tensor | None, softmax: bool) -> torch.Tensor:
        from .native import dape_triton

        return dape_triton.DAPETriton.apply(S, bias if self.with_bias else None, self.conv1.weight, self.conv1.bias,
                                            self.conv2.weight, self.conv2.bias, self.causal, softmax)

    def forward_packed(self, S: torch.Tensor, bias: torch.Tensor | None, base: torch.Tensor) -> torch.Tensor:
        """The PyTorch path in causal mode (GPU, float64, or no C++ compiler): the lower triangle
        folded into ceil(T/2) rows, the convolutions as GEMMs."""
        B, H, T, _ = S.shape
        k, c = self.k, self.k // 2
        gather, zero, scatter, _ = _packing(T, c, S.device)
        R, Wp = zero.shape
        W = Wp - 2 * c
        D = self.conv1.out_channels

        zero_flat = zero.flatten()  # (R*(W+2c),)

        def pack(t: torch.Tensor) -> torch.Tensor:  # (b, C, T, T) -> channel-major (C, b, R, W + 2c), zeros at seams / ends
            t = t.transpose(0, 1).flatten(2).index_select(-1, gather).masked_fill_(zero_flat, 0.0)
            return t.view(t.shape[0], t.shape[1], R, Wp)

        X = pack(S)
        if self.with_bias:
            assert bias is not None, "with_bias: the scores' bias is given"
            X = torch.cat([X, pack(bias).expand(-1, B, -1, -1)], dim=0)  # (2H, B, R, W + 2c)
        C = X.shape[0]
        # conv1 as one GEMM over shifted copies of the (small) input: (D, C k) @ (C k, B R W)
        Xu = X if k == 1 else _Shifts.apply(X, k)  # (C, k, B, R, W)
        b1, b2 = self.conv1.bias, self.conv2.bias
        assert b1 is not None and b2 is not None, "DAPE's convolutions have biases"
        P = torch.addmm(b1.unsqueeze(1), self.conv1.weight.reshape(D, C * k), Xu.reshape(C * k, -1))  # (D, B*R*W)
        if k > 1:  # LeakyReLU, then zeros where the full map has conv2's padding (in place)
            h = _PaddedLeakyReLU.apply(P, _hidden_pad_index(T, c, B, S.device))
        else:  # k = 1: a position outside the rows reaches no output that is kept
            h = F.leaky_relu_(P)  # (D, B*R*W)
        # conv2 as one GEMM to k shifted outputs, then a shifted sum on the (small) result
        w2 = self.conv2.weight[:, :, 0, :].permute(2, 0, 1).reshape(k * H, D)  # row s*H + o
        Y = (w2 @ h).view(k, H, B, R, W)
        out = Y[0] if k == 1 else _ShiftSum.apply(Y)  # out[w] = sum_s Y[s, w + s - c]
        out = out + b2.view(H, 1, 1, 1)  # (H, B, R, W)
        out = out.flatten(2).index_select(-1, scatter).view(H, B, T, T).transpose(0, 1)
        return base + out  # values above the diagonal are placeholders, masked later

    def forward_full(self, S: torch.Tensor, bias: torch.Tensor | None, future: torch.Tensor | None) -> torch.Tensor:
        """The same on the whole T x T map, as App. L writes it (future=None: no zeroing, encoder
        mode). Not masked: values above the diagonal are placeholders."""
        base = self._inputs(S, bias)
        X = torch.cat([S, bias.expand_as(S)], dim=1) if self.with_bias and bias is not None else S  # (B, C, T, T)
        if future is not None:
            X = X.masked_fill(future, 0.0)  # torch.tril, once
        return base + self.conv2(F.leaky_relu(self.conv1(X)))
