"""DAPE / DAPE V2 fused on the GPU: Triton kernels for the processed logits, the softmax over
them, and the backward, without the hidden map in memory.

Same contract as the CPU kernel's Functions (``processors._FusedDAPE`` / ``_FusedDAPESoftmax``);
the hidden map is recomputed, never stored; no atomics (deterministic). Opt in:
``SYNTHLAB_DAPE_TRITON=1`` for CUDA tensors. The math, the design and the tests:
docs/native.md, "DAPE on the GPU" and "DAPE's Triton kernels: the math and the design".
"""

from __future__ import annotations

import os

import torch

from synthlab.core.config import TRUE_WORDS
from synthlab.model.batched import fold_vmap
from synthlab.model.native.cope_triton import (
    INTERPRETED,
    _compile_only,
    _dense32,
    _jit,
    _launch,
    _pow2,
    _precision,
    tl,
    triton,
    triton_available,
)
from synthlab.model.native.triton_build import KernelBuilds

__all__ = ["DAPETriton", "builds", "enabled", "triton_available"]


def enabled() -> bool:
    """The env switch SYNTHLAB_DAPE_TRITON: off unless set to a true word (read at each call)."""
    return os.environ.get("SYNTHLAB_DAPE_TRITON", "0").strip().lower() in TRUE_WORDS


def _jit_kernel(fn):
    """triton.jit for the two launched kernels: no specialization on the values of taps (k = 1
    would become a constant, the tap loop unrolled and its weights hoisted into registers,
    which then spill) nor bias_bstride (0 or H T^2: no variant per bias layout)."""
    return triton.jit(do_not_specialize=["taps", "bias_bstride"])(fn) if triton is not None else fn


# ---- kernels ----
#
# A tile is E = BLOCK_M x BLOCK_N entries (i, j) of one batch element, flattened to E rows, so
# that each convolution is a matmul over channels (tl.dot): the input tile unfolded over the k
# taps ("im2col": column s C + m holds channel m at the column offset s - c) times w1 unfolded
# the same way gives conv1; conv2 and the gradients likewise. Channel counts are padded to
# tl.dot's least 16 (H 4 -> 16, C k 24 -> 32 at the paper size).


@_jit
def _entries(first_row, n, T, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tile's rows and columns, one per flattened entry: (E, 1) each."""
    e = tl.arange(0, BLOCK_M * BLOCK_N)
    return (first_row + e // BLOCK_N)[:, None], (n * BLOCK_N + e % BLOCK_N)[:, None]


@_jit
def _unfolded_inputs(
    s_base,
    bias_base,
    rows,
    cols,
    T,
    SHIFT,
    H: tl.constexpr,
    C: tl.constexpr,
    K: tl.constexpr,
    CK_PAD: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """(E, CK_PAD): column s C + m = input channel m (S's head m, or the bias's head m - H) at
    column offset SHIFT + s - c; zero outside the map and, in causal mode, above the diagonal."""
    q = tl.arange(0, CK_PAD)[None, :]
    m, at = q % C, cols + (SHIFT + q // C - K // 2)  # (1, CK_PAD), (E, CK_PAD)
    ok = (q < C * K) & (rows < T) & (at >= 0) & (at < T)
    if CAUSAL:
        ok = ok & (at <= rows)
    off = rows * T + at
    x = tl.load(s_base + m * T * T + off, mask=ok & (m < H), other=0.0)
    if HAS_BIAS:
        x += tl.load(bias_base + (m - H) * T * T + off, mask=ok & (m >= H), other=0.0)
    return x


@_jit
def _conv1_weights(W1, D, C: tl.constexpr, K: tl.constexpr, CK_PAD: tl.constexpr, D_PAD: tl.constexpr):
    """w1 unfolded as the inputs: (CK_PAD, D_PAD), row s C + m = w1[:, m, s]."""
    q = tl.arange(0, CK_PAD)[:, None]
    d = tl.arange(0, D_PAD)[None, :]
    return tl.load(W1 + d * (C * K) + (q % C) * K + q // C, mask=(q < C * K) & (d < D), other=0.0)


@_jit
def _hidden_pre(x, w1, b1, PRECISION: tl.constexpr):
    """conv1 before its LeakyReLU: (E, D_PAD)."""
    return tl.dot(x, w1, input_precision=PRECISION) + b1[None, :]


@_jit
def _leaky(pre, cols, T):
    """LeakyReLU(0.01) of the hidden map, zero at columns outside [0, T) (conv2's padding)."""
    h = tl.where(pre > 0.0, pre, 0.01 * pre)
    return tl.where((cols >= 0) & (cols < T), h, 0.0)


@_jit_kernel
def _dape_fwd_kernel(
    S,
    BIAS,
    W1,
    B1,
    W2,
    B2,
    OUT,
    T,
    D,
    bias_bstride,
    taps,
    H: tl.constexpr,
    C: tl.constexpr,
    K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_PAD: tl.constexpr,
    H_PAD: tl.constexpr,
    CK_PAD: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """A for the program's BLOCK_M query rows of batch element b, all heads, all key blocks."""
    b = tl.program_id(0)
    first_row = tl.program_id(1) * BLOCK_M
    hid = tl.arange(0, D_PAD)
    heads = tl.arange(0, H_PAD)[None, :]  # (1, H_PAD)
    b1 = tl.load(B1 + hid, mask=hid < D, other=0.0)
    b2 = tl.load(B2 + heads, mask=heads < H, other=0.0)
    w1 = _conv1_weights(W1, D, C, K, CK_PAD, D_PAD)
    s_base = S + b.to(tl.int64) * H * T * T  # this batch element's (H, T, T)
    bias_base = BIAS + b.to(tl.int64) * bias_bstride
    out_base = OUT + b.to(tl.int64) * H * T * T

    n_blocks = tl.cdiv(T, BLOCK_N)
    n_live = n_blocks
    if CAUSAL:
        n_live = tl.cdiv(tl.minimum(first_row + BLOCK_M, T), BLOCK_N)  # up to the last row's diagonal
    for n in range(0, n_live):
        rows, cols = _entries(first_row, n, T, BLOCK_M, BLOCK_N)  # (E, 1)
        out = tl.zeros([BLOCK_M * BLOCK_N, H_PAD], dtype=tl.float32)
        for sig in range(0, taps):  # the hidden values at column offset sig - c (taps = K at run time: a loop
            # the compiler keeps, not unrolled with its weights hoisted into registers: fewer registers)
            x = _unfolded_inputs(s_base, bias_base, rows, cols, T, sig - K // 2, H, C, K, CK_PAD, HAS_BIAS, CAUSAL)
            h = _leaky(_hidden_pre(x, w1, b1, PRECISION), cols + (sig - K // 2), T)  # (E, D_PAD)
            d = hid[:, None]
            w2 = tl.load(W2 + heads * (D * K) + d * K + sig, mask=(heads < H) & (d < D), other=0.0)  # w2[:, :, sig]^T
            out += tl.dot(h, w2, input_precision=PRECISION)  # (E, H_PAD)
        live = (rows < T) & (cols < T) & (heads < H)
        if CAUSAL:
            live = live & (cols <= rows)
        at = heads * T * T + rows * T + cols  # (E, H_PAD)
        base = tl.load(s_base + at, mask=live, other=0.0)
        if HAS_BIAS:
            base += tl.load(bias_base + at, mask=live, other=0.0)
        a = tl.where(live, base + out + b2, float("-inf"))
        tl.store(out_base + at, a, mask=(rows < T) & (cols < T) & (heads < H))
    for n in range(n_live, n_blocks):  # causal: key blocks wholly above the diagonal
        rows, cols = _entries(first_row, n, T, BLOCK_M, BLOCK_N)
        tl.store(
            out_base + heads * T * T + rows * T + cols,
            tl.full([BLOCK_M * BLOCK_N, H_PAD], float("-inf"), dtype=tl.float32),
            mask=(rows < T) & (cols < T) & (heads < H),
        )


@_jit
def _grad_logits(g_base, p_base, delta_base, rows, cols, head, ok, T, SOFTMAX: tl.constexpr, CAUSAL: tl.constexpr):
    """dL/dA of the given heads at the given entries (broadcast shapes): the incoming gradient
    (of A), or softmax's backward P (dP - <dP, P>) (of P); zero off the live entries (the
    mask's gradient) and where not ``ok``."""
    live = ok & (rows < T) & (cols >= 0) & (cols < T)
    if CAUSAL:
        live = live & (cols <= rows)
    at = head * T * T + rows * T + cols
    g = tl.load(g_base + at, mask=live, other=0.0)
    if SOFTMAX:
        p = tl.load(p_base + at, mask=live, other=0.0)
        g = p * (g - tl.load(delta_base + head * T + rows, mask=live, other=0.0))
    return g


@_jit_kernel
def _dape_bwd_kernel(
    S,
    BIAS,
    W1,
    B1,
    W2,
    G,
    P,
    DELTA,
    GS,
    GBIAS,
    GW1,
    GB1,
    GW2,
    GB2,
    T,
    D,
    bias_bstride,
    taps,
    H: tl.constexpr,
    C: tl.constexpr,
    K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    CAUSAL: tl.constexpr,
    SOFTMAX: tl.constexpr,
    NEED_GBIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_PAD: tl.constexpr,
    C_PAD: tl.constexpr,
    CK_PAD: tl.constexpr,
    HK_PAD: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """dS, d bias (this batch element's) over the program's rows, and its partial sums of the
    weight gradients at row ``program`` of GW1 (CK_PAD, D_PAD; row s C + m = d/dw1[:, m, s]),
    GB1 (D_PAD), GW2 (HK_PAD, D_PAD; row s H + o = d/dw2[o, :, s]) and GB2 (C_PAD; its first H)."""
    b = tl.program_id(0)
    program = b * tl.num_programs(1) + tl.program_id(1)
    first_row = tl.program_id(1) * BLOCK_M
    c = K // 2
    hid = tl.arange(0, D_PAD)
    d = hid[:, None]  # (D_PAD, 1)
    chans = tl.arange(0, C_PAD)[None, :]  # (1, C_PAD)
    hk = tl.arange(0, HK_PAD)[None, :]  # (1, HK_PAD): column s H + o
    hk_rows = tl.arange(0, HK_PAD)[:, None]
    b1 = tl.load(B1 + hid, mask=hid < D, other=0.0)
    w1 = _conv1_weights(W1, D, C, K, CK_PAD, D_PAD)
    # w2 unfolded as dA below: (HK_PAD, D_PAD), row s H + o = w2[o, :, s]
    w2 = tl.load(
        W2 + (hk_rows % H) * (D * K) + hid[None, :] * K + hk_rows // H,
        mask=(hk_rows < H * K) & (hid[None, :] < D),
        other=0.0,
    )
    s_base = S + b.to(tl.int64) * H * T * T
    bias_base = BIAS + b.to(tl.int64) * bias_bstride
    g_base = G + b.to(tl.int64) * H * T * T
    p_base = P + b.to(tl.int64) * H * T * T
    delta_base = DELTA + b.to(tl.int64) * H * T
    gs_base = GS + b.to(tl.int64) * H * T * T
    gbias_base = GBIAS + b.to(tl.int64) * H * T * T

    gw1 = tl.zeros([CK_PAD, D_PAD], dtype=tl.float32)
    gb1 = tl.zeros([D_PAD], dtype=tl.float32)
    gw2 = tl.zeros([HK_PAD, D_PAD], dtype=tl.float32)
    gb2 = tl.zeros([C_PAD], dtype=tl.float32)
    n_blocks = tl.cdiv(T, BLOCK_N)
    n_live = n_blocks
    if CAUSAL:  # hidden values up to c past the diagonal get gradients (conv1's weights see them)
        n_live = tl.cdiv(tl.minimum(first_row + BLOCK_M + c, T), BLOCK_N)
    for n in range(0, n_live):
        rows, cols = _entries(first_row, n, T, BLOCK_M, BLOCK_N)  # (E, 1)
        gx = tl.zeros([BLOCK_M * BLOCK_N, C_PAD], dtype=tl.float32)  # d/d[S, bias] through f
        for tau in range(0, taps):  # the hidden values at column offset tau - c (a kept loop, as the forward's)
            x = _unfolded_inputs(s_base, bias_base, rows, cols, T, tau - c, H, C, K, CK_PAD, HAS_BIAS, CAUSAL)
            pre = _hidden_pre(x, w1, b1, PRECISION)  # (E, D_PAD)
            # dL/dh(j + tau - c) = sum_{s, o} w2[o, :, s] dA_o(j + tau - s): dA unfolded the same way
            da = _grad_logits(
                g_base, p_base, delta_base, rows, cols + (tau - hk // H), hk % H, hk < H * K, T, SOFTMAX, CAUSAL
            )  # (E, HK_PAD)
            dh = tl.dot(da, w2, input_precision=PRECISION)  # (E, D_PAD)
            hcols = cols + (tau - c)
            dpre = tl.where((hcols >= 0) & (hcols < T), tl.where(pre > 0.0, dh, 0.01 * dh), 0.0)
            if tau == c:  # the tile's own hidden columns: each counted once for conv1's weights
                gb1 += tl.sum(dpre, axis=0)
                gw1 += tl.dot(tl.trans(x), dpre, input_precision=PRECISION)  # (CK_PAD, D_PAD)
            # conv2's weights: d/dw2[o, :, tau] = sum_j dA_o(j) h(j + tau - c), into rows tau H + o
            da0 = _grad_logits(g_base, p_base, delta_base, rows, cols, hk % H, hk // H == tau, T, SOFTMAX, CAUSAL)
            gw2 += tl.dot(tl.trans(da0), _leaky(pre, hcols, T), input_precision=PRECISION)
            # the inputs at j fed the hidden values at j + c - s through tap s = 2c - tau
            w1t = tl.load(W1 + d * (C * K) + chans * K + (2 * c - tau), mask=(d < D) & (chans < C), other=0.0)
            gx += tl.dot(dpre, w1t, input_precision=PRECISION)  # (E, C_PAD)
        # A = S + bias + ...: the direct paths (channel m gets head m mod H), and conv2's bias
        da0 = _grad_logits(g_base, p_base, delta_base, rows, cols, chans % H, chans < C, T, SOFTMAX, CAUSAL)
        gb2 += tl.sum(da0, axis=0)
        gx += da0
        ok = (rows < T) & (cols < T)
        if CAUSAL:
            gx = tl.where(cols <= rows, gx, 0.0)  # tril's gradient
        at = rows * T + cols
        tl.store(gs_base + chans * T * T + at, gx, mask=ok & (chans < H))
        if NEED_GBIAS:
            tl.store(gbias_base + (chans - H) * T * T + at, gx, mask=ok & (chans >= H) & (chans < C))
    for n in range(n_live, n_blocks):  # causal: key blocks wholly above the diagonal
        rows, cols = _entries(first_row, n, T, BLOCK_M, BLOCK_N)
        zero = tl.zeros([BLOCK_M * BLOCK_N, C_PAD], dtype=tl.float32)
        at = rows * T + cols
        ok = (rows < T) & (cols < T)
        tl.store(gs_base + chans * T * T + at, zero, mask=ok & (chans < H))
        if NEED_GBIAS:
            tl.store(gbias_base + (chans - H) * T * T + at, zero, mask=ok & (chans >= H) & (chans < C))
    q = tl.arange(0, CK_PAD)[:, None]
    tl.store(GW1 + program * CK_PAD * D_PAD + q * D_PAD + hid[None, :], gw1)
    tl.store(GB1 + program * D_PAD + hid, gb1)
    tl.store(GW2 + program * HK_PAD * D_PAD + hk_rows * D_PAD + hid[None, :], gw2)
    tl.store(GB2 + program * C_PAD + tl.arange(0, C_PAD), gb2)


# ---- launch ----


def block_sizes(device: torch.device) -> dict[str, int]:
    """Tile sizes: rows x columns of one tile (the matmuls' M = their product, at least 16).
    Small under the interpreter (numpy per program). On a GPU one row of 32 keys, 4 warps, no
    software pipelining (num_stages 1: its double buffers of the gathered tiles took 120-280 KB
    of shared memory, over the H100's 227 KB in the backward): the size at which both kernels
    compile for sm_90 without spilling at the paper's H 4, D 32, k 1 and 3 (ptxas: 48-168
    registers, no stack; scripts/triton_resources.py). Untimed: no GPU was at hand."""
    if device.type != "cuda":
        return dict(block_m=2, block_n=8, num_warps=4, num_stages=1)
    return dict(block_m=1, block_n=32, num_warps=4, num_stages=1)


def _bias_operand(bias: torch.Tensor | None) -> tuple[torch.Tensor | None, bool]:
    """(the kernels' float32 bias, whether it is one map for the whole batch: leading dim 1, or
    a broadcast with batch stride 0; then only its first map is passed)."""
    if bias is None:
        return None, False
    shared = bias.shape[0] == 1 or bias.stride(0) == 0
    return _dense32(bias[:1] if shared else bias), shared


def _padded(H: int, C: int, D: int, k: int) -> dict[str, int]:
    """Channel counts padded to powers of two of at least 16 (tl.dot's least)."""
    return dict(D_PAD=_pow2(D), H_PAD=_pow2(H), C_PAD=_pow2(C), CK_PAD=_pow2(C * k), HK_PAD=_pow2(H * k))


def _forward_launch(launch, device, B, H, C, T, D, k, has_bias, causal, S, bias, w1, b1, w2, b2, A, bias_bstride):
    """The forward kernel's launch (``launch`` = _launch, or _compile_only for ``builds``)."""
    tiles, pads = block_sizes(device), _padded(H, C, D, k)
    launch(
        _dape_fwd_kernel,
        (B, triton.cdiv(T, tiles["block_m"])),
        S,
        bias,
        w1,
        b1,
        w2,
        b2,
        A,
        T,
        D,
        bias_bstride,
        k,
        H=H,
        C=C,
        K=k,
        HAS_BIAS=has_bias,
        CAUSAL=causal,
        BLOCK_M=tiles["block_m"],
        BLOCK_N=tiles["block_n"],
        D_PAD=pads["D_PAD"],
        H_PAD=pads["H_PAD"],
        CK_PAD=pads["CK_PAD"],
        PRECISION=_precision(device),
        num_warps=tiles["num_warps"],
        num_stages=tiles["num_stages"],
    )


def _backward_launch(
    launch,
    device,
    B,
    H,
    C,
    T,
    D,
    k,
    has_bias,
    causal,
    softmax,
    need_gbias,
    S,
    bias,
    w1,
    b1,
    w2,
    g,
    P,
    delta,
    gS,
    g_bias,
    gw1,
    gb1,
    gw2,
    gb2,
    bias_bstride,
):
    """The backward kernel's launch (as ``_forward_launch``)."""
    tiles, pads = block_sizes(device), _padded(H, C, D, k)
    launch(
        _dape_bwd_kernel,
        (B, triton.cdiv(T, tiles["block_m"])),
        S,
        bias,
        w1,
        b1,
        w2,
        g,
        P,
        delta,
        gS,
        g_bias,
        gw1,
        gb1,
        gw2,
        gb2,
        T,
        D,
        bias_bstride,
        k,
        H=H,
        C=C,
        K=k,
        HAS_BIAS=has_bias,
        CAUSAL=causal,
        SOFTMAX=softmax,
        NEED_GBIAS=need_gbias,
        BLOCK_M=tiles["block_m"],
        BLOCK_N=tiles["block_n"],
        D_PAD=pads["D_PAD"],
        C_PAD=pads["C_PAD"],
        CK_PAD=pads["CK_PAD"],
        HK_PAD=pads["HK_PAD"],
        PRECISION=_precision(device),
        num_warps=tiles["num_warps"],
        num_stages=tiles["num_stages"],
    )


def _compile_all(device, H, C, T, D, k, has_bias, causal, softmax) -> None:
    """Compile the forward and the backward (with and without the bias's gradient) as a call
    on these sizes launches them; one small float32 tensor stands for every operand."""
    x = torch.empty(16, device=device)
    _forward_launch(_compile_only, device, 1, H, C, T, D, k, has_bias, causal, x, x, x, x, x, x, x, 0)
    for need_gbias in (False, True) if has_bias else (False,):
        _backward_launch(
            _compile_only,
            device,
            1,
            H,
            C,
            T,
            D,
            k,
            has_bias,
            causal,
            softmax,
            need_gbias,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            x,
            0,
        )


BUILDS = KernelBuilds("DAPE", "SYNTHLAB_DAPE_TRITON")


def builds(device, H: int, C: int, T: int, D: int, k: int, has_bias: bool, causal: bool, softmax: bool) -> bool:
    """Whether the kernels for these sizes compile on this machine (see ``cope_triton.builds``)."""
    if INTERPRETED:
        return True
    key = (str(device), H, C, T, D, k, has_bias, causal, softmax, torch.get_float32_matmul_precision())
    return BUILDS.ready(key, lambda: _compile_all(torch.device(device), H, C, T, D, k, has_bias, causal, softmax))


class _DAPETritonKernel(torch.autograd.Function):
    """A (``softmax=False``) or P = softmax(A) (``softmax=True``; torch's softmax over the
    kernel's A, its backward fused into the kernel's) on float32 operands. setup_context style
    with a vmap rule (batched seeds): the seeds fold into the batch where the weights are
    shared, one call per seed where each has its own (``fold_vmap``)."""

    @staticmethod
    def forward(S, bias, w1, b1, w2, b2, causal: bool, softmax: bool):
        B, H, T, _ = S.shape
        D, C, _, k = w1.shape
        S = _dense32(S)
        b_in, shared = _bias_operand(bias)
        A = torch.empty_like(S)
        _forward_launch(
            _launch,
            S.device,
            B,
            H,
            C,
            T,
            D,
            k,
            b_in is not None,
            bool(causal),
            S,
            S if b_in is None else b_in,
            _dense32(w1),
            _dense32(b1),
            _dense32(w2),
            _dense32(b2),
            A,
            0 if shared or b_in is None else H * T * T,
        )
        return torch.softmax(A, dim=-1) if softmax else A

    @staticmethod
    def setup_context(ctx, inputs, output):
        S, bias, w1, b1, w2, b2, causal, softmax = inputs
        ctx.meta = (bool(causal), bool(softmax), None if bias is None else bias.shape, w1.shape, w2.shape)
        b_in, ctx.shared = _bias_operand(bias)
        ctx.save_for_backward(_dense32(S), b_in, _dense32(w1), _dense32(b1), _dense32(w2), output if softmax else None)

    @staticmethod
    def backward(ctx, g):
        S, b_in, w1, b1, w2, P = ctx.saved_tensors
        causal, softmax, bias_shape, w1_shape, w2_shape = ctx.meta
        B, H, T, _ = S.shape
        D, C, _, k = w1.shape
        g = g.float().contiguous()
        delta = (g * P).sum(-1) if softmax else g.new_zeros(1)  # (B, H, T): <dP, P> per row
        need_gbias = b_in is not None and ctx.needs_input_grad[1]
        tiles, pads = block_sizes(S.device), _padded(H, C, D, k)
        n_programs = B * triton.cdiv(T, tiles["block_m"])
        gS = torch.empty_like(S)
        g_bias = torch.empty_like(S) if need_gbias else None
        gw1 = S.new_empty(n_programs, pads["CK_PAD"], pads["D_PAD"])
        gb1 = S.new_empty(n_programs, pads["D_PAD"])
        gw2 = S.new_empty(n_programs, pads["HK_PAD"], pads["D_PAD"])
        gb2 = S.new_empty(n_programs, pads["C_PAD"])
        _backward_launch(
            _launch,
            S.device,
            B,
            H,
            C,
            T,
            D,
            k,
            b_in is not None,
            causal,
            softmax,
            need_gbias,
            S,
            S if b_in is None else b_in,
            w1,
            b1,
            w2,
            g,
            S if P is None else P,
            delta,
            gS,
            S if g_bias is None else g_bias,
            gw1,
            gb1,
            gw2,
            gb2,
            0 if ctx.shared or b_in is None else H * T * T,
        )
        # the programs' partial sums, added in program order (torch's sum: a fixed reduction)
        g_w1 = gw1.sum(0)[: C * k, :D].view(k, C, D).permute(2, 1, 0).reshape(w1_shape)
        g_w2 = gw2.sum(0)[: H * k, :D].view(k, H, D).permute(1, 2, 0).reshape(w2_shape)
        if g_bias is not None and bias_shape[0] == 1:
            g_bias = g_bias.sum(0, keepdim=True)
        return gS, g_bias, g_w1, gb1.sum(0)[:D], g_w2, gb2.sum(0)[:H], None, None

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(_DAPETritonKernel.apply, info, in_dims, args, _ROLES)


# S and the bias per batch element (the bias also once for the batch); the weights shared
_ROLES = ("batch", "batch|1", "shared", "shared", "shared", "shared", None, None)


class DAPETriton:
    """DAPE's processed logits A (``softmax=False``, -inf above the diagonal in causal mode) or
    the attention weights softmax(A) (``softmax=True``) by the Triton kernels; the operands in
    any float dtype (float32 inside), the result in S's dtype, gradients for S, the bias and
    the four weights."""

    @staticmethod
    def apply(S, bias, w1, b1, w2, b2, causal: bool, softmax: bool) -> torch.Tensor:
        out = _DAPETritonKernel.apply(
            _dense32(S),
            bias if bias is None else bias.float(),
            _dense32(w1),
            _dense32(b1),
            _dense32(w2),
            _dense32(b2),
            causal,
            softmax,
        )
        return out.to(S.dtype)
