"""CoPE attention fused on the GPU: Triton kernels for the forward and the backward.

``CoPEQKVTriton.apply(q, k, v, table, slopes, npos, scale)`` has the contract of the CPU
kernel's ``_FusedCoPEQKV``; no (B, H, T, T) tensor is made, no atomics (bit-identical run to
run), and a vmap rule folds stacked seeds into the batch. Used by ``CoPE.attend`` for CUDA
tensors; ``SYNTHLAB_COPE_TRITON=0`` turns it off. The math, the design and the tests:
docs/native.md, "Fused CoPE kernels" and "CoPE's Triton kernels: the math and the design".
"""

from __future__ import annotations

import os

import torch

from synthlab.core.config import FALSE_WORDS
from synthlab.model.batched import fold_vmap
from synthlab.model.native.triton_build import KernelBuilds

try:  # optional: Linux only (the `gpu` extra); the package imports fine without it
    import triton
    import triton.language as tl
except ImportError:
    triton = None

    class tl:  # type: ignore[no-redef]  # placeholder so the kernel signatures below still evaluate
        constexpr = None


def _interpreter_on() -> bool:
    knobs = getattr(triton, "knobs", None)  # triton >= 3.4; before, the variable itself
    return bool(knobs.runtime.interpret) if knobs is not None else os.environ.get("TRITON_INTERPRET") == "1"


# Whether the kernels below were defined for Triton's interpreter (TRITON_INTERPRET=1 when this
# module was imported: triton.jit reads it at decoration time). Then they also run on CPU tensors.
INTERPRETED = triton is not None and _interpreter_on()


def _jit(fn):
    return triton.jit(fn) if triton is not None else fn


def enabled() -> bool:
    """The env switch SYNTHLAB_COPE_TRITON: on unless set to a false word (read at each call)."""
    return os.environ.get("SYNTHLAB_COPE_TRITON", "1").strip().lower() not in FALSE_WORDS


def triton_available(device: torch.device | str) -> bool:
    """Whether these kernels can run on tensors of ``device``: triton imports, and the device is
    CUDA, or the kernels were defined for the interpreter (TRITON_INTERPRET=1)."""
    if triton is None:
        return False
    return torch.device(device).type == "cuda" or INTERPRETED


# ---- kernels ----


@_jit
def _block_logits(
    q, k, rows, cols, T, gate_suffix, table_rows, NPOS, slope, HAS_TABLE: tl.constexpr, PRECISION: tl.constexpr
):
    """One (query block, key block) tile: the logits s + term, the gates, and what the backward
    needs. q (BLOCK_M, D_PAD) already scaled, k (BLOCK_N, D_PAD); gate_suffix (BLOCK_M,) the
    row's gates of the key blocks right of this one; table_rows (BLOCK_M, 1) pointers to the
    table rows. Returns (all (BLOCK_M, BLOCK_N); 0 or -inf off ``live``): live (j <= i, both in
    range), the logits, the gates, the clamped positions and d term / d p."""
    live = (cols[None, :] <= rows[:, None]) & (cols[None, :] < T) & (rows[:, None] < T)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
    g = tl.where(live, tl.sigmoid(s), 0.0)  # future gates exactly 0, as the PyTorch path
    p = gate_suffix[:, None] + tl.cumsum(g, axis=1, reverse=True)  # sum_{t=j..i} g_it, >= 0
    top = (NPOS - 1) * 1.0  # float (NPOS may arrive as a constexpr 1)
    pc = tl.minimum(p, top)
    if HAS_TABLE:
        lo = pc.to(tl.int32)  # pc >= 0: truncation is the floor
        hi = tl.minimum(lo + 1, NPOS - 1)  # the repeated last entry: no read past the row
        low = tl.load(table_rows + lo, mask=live, other=0.0)  # gathers from the row's npos values
        high = tl.load(table_rows + hi, mask=live, other=0.0)
        term = low + (pc - lo.to(tl.float32)) * (high - low)
        dterm_dp = high - low  # 0 once clamped: lo = hi = npos - 1
    else:
        term = -slope * pc
        dterm_dp = tl.where(p <= top, -slope, 0.0)  # torch.clamp's gradient: passes at the bound
    logits = tl.where(live, s + term, float("-inf"))
    return live, logits, g, pc, dterm_dp


@_jit
def _cope_fwd_kernel(
    Q,
    K,
    V,
    TABLE,
    SLOPES,
    Y,
    LSE,
    GATE_SUFFIX,
    H,
    T,
    D,
    NPOS,
    N_KEY_BLOCKS,
    scale,
    HAS_TABLE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_PAD: tl.constexpr,
    PRECISION: tl.constexpr,
):
    bh = tl.program_id(0)
    first_row = tl.program_id(1) * BLOCK_M
    rows = first_row + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    dims = tl.arange(0, D_PAD)  # (D_PAD,), head size padded to a power of two
    row_ok, dim_ok = rows < T, dims < D
    qkv = bh.to(tl.int64) * T * D  # this (b, h)'s first element of q, k, v, y
    q = tl.load(Q + qkv + rows[:, None] * D + dims[None, :], mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    q = q * scale  # (q scale) . k, as the PyTorch path; (BLOCK_M, D_PAD)
    slope = 0.0
    if not HAS_TABLE:
        slope = tl.load(SLOPES + bh % H)
    table_rows = TABLE + bh.to(tl.int64) * T * NPOS + rows[:, None] * NPOS  # (BLOCK_M, 1)
    stats = bh.to(tl.int64) * T  # this (b, h)'s first row of lse
    suffix_rows = GATE_SUFFIX + (stats + rows) * N_KEY_BLOCKS  # (BLOCK_M,)

    gate_suffix = tl.zeros([BLOCK_M], dtype=tl.float32)  # gates of the key blocks done so far
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)  # running max (finite: no inf - inf)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    last_block = (tl.minimum(first_row + BLOCK_M, T) - 1) // BLOCK_N  # holds the block's last key
    for step in range(0, last_block + 1):
        n = last_block - step  # descending: the reverse cumulative sum carries leftwards
        cols = n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        kv_mask = (cols[:, None] < T) & dim_ok[None, :]
        k = tl.load(K + qkv + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)  # (BLOCK_N, D_PAD)
        v = tl.load(V + qkv + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
        tl.store(suffix_rows + n, gate_suffix, mask=row_ok)
        live, logits, g, pc, dterm_dp = _block_logits(
            q, k, rows, cols, T, gate_suffix, table_rows, NPOS, slope, HAS_TABLE, PRECISION
        )
        gate_suffix += tl.sum(g, axis=1)
        m_new = tl.maximum(m_i, tl.max(logits, axis=1))
        alpha = tl.exp(m_i - m_new)
        e = tl.exp(logits - m_new[:, None])  # (BLOCK_M, BLOCK_N), 0 off live
        l_i = l_i * alpha + tl.sum(e, axis=1)
        acc = acc * alpha[:, None] + tl.dot(e, v, input_precision=PRECISION)
        m_i = m_new
    l_safe = tl.where(l_i > 0.0, l_i, 1.0)  # rows past T have no keys (and are not stored)
    tl.store(Y + qkv + rows[:, None] * D + dims[None, :], acc / l_safe[:, None], mask=row_ok[:, None] & dim_ok[None, :])
    tl.store(LSE + stats + rows, m_i + tl.log(l_safe), mask=row_ok)


@_jit
def _cope_bwd_query_kernel(
    Q,
    K,
    V,
    TABLE,
    SLOPES,
    LSE,
    DELTA,
    GATE_SUFFIX,
    GY,
    GQ,
    GTABLE,
    DP_PREFIX,
    H,
    T,
    D,
    NPOS,
    N_KEY_BLOCKS,
    scale,
    HAS_TABLE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_PAD: tl.constexpr,
    NPOS_PAD: tl.constexpr,
    NPOS_CHUNK: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """dq, the table's gradient and dp_prefix for one query block, key blocks ascending.

    The table's gradient of a row is sum_j dz_ij max(0, 1 - |p_ij - b|) over its entries b: a
    (BLOCK_M, BLOCK_N, entries) product per key block. With NPOS_CHUNK = NPOS_PAD it is held in
    registers whole; with a smaller NPOS_CHUNK (large npos: at npos 512 the whole product took
    over 10 KB of spilled stack a thread) the program's own rows of GTABLE accumulate it in
    memory, chunk by chunk, and only the chunks the tile's positions reach are visited."""
    bh = tl.program_id(0)
    first_row = tl.program_id(1) * BLOCK_M
    rows = first_row + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D_PAD)
    row_ok, dim_ok = rows < T, dims < D
    row_mask = row_ok[:, None] & dim_ok[None, :]
    qkv = bh.to(tl.int64) * T * D
    q = tl.load(Q + qkv + rows[:, None] * D + dims[None, :], mask=row_mask, other=0.0) * scale
    gy = tl.load(GY + qkv + rows[:, None] * D + dims[None, :], mask=row_mask, other=0.0)  # (BLOCK_M, D_PAD)
    slope = 0.0
    if not HAS_TABLE:
        slope = tl.load(SLOPES + bh % H)
    table_rows = TABLE + bh.to(tl.int64) * T * NPOS + rows[:, None] * NPOS
    stats = bh.to(tl.int64) * T
    lse = tl.load(LSE + stats + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
    delta = tl.load(DELTA + stats + rows, mask=row_ok, other=0.0)  # gy_i . y_i
    block_rows = (stats + rows) * N_KEY_BLOCKS  # (BLOCK_M,), rows of gate_suffix / dp_prefix
    bins = tl.arange(0, NPOS_PAD)  # (NPOS_PAD,) the table's entries
    CHUNKED = NPOS_CHUNK < NPOS_PAD  # a constexpr: which of the two ways below is compiled
    chunk_bins = tl.arange(0, NPOS_CHUNK)
    gtable_rows = GTABLE + bh.to(tl.int64) * T * NPOS + rows[:, None] * NPOS  # (BLOCK_M, 1)
    if HAS_TABLE and CHUNKED:  # the rows accumulate in GTABLE: zero them first
        for c in range(0, NPOS_PAD // NPOS_CHUNK):
            at = c * NPOS_CHUNK + chunk_bins[None, :]
            tl.store(
                gtable_rows + at, tl.zeros([BLOCK_M, NPOS_CHUNK], dtype=tl.float32), mask=row_ok[:, None] & (at < NPOS)
            )
        tl.debug_barrier()

    dq = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    gtable = tl.zeros([BLOCK_M, NPOS_PAD], dtype=tl.float32)
    dp_prefix = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum of dL/dp_ij over the key blocks done
    last_block = (tl.minimum(first_row + BLOCK_M, T) - 1) // BLOCK_N
    for n in range(0, last_block + 1):  # ascending: the prefix sum over j carries rightwards
        cols = n * BLOCK_N + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < T) & dim_ok[None, :]
        k = tl.load(K + qkv + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)  # (BLOCK_N, D_PAD)
        v = tl.load(V + qkv + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
        has_keys = row_ok & (rows >= n * BLOCK_N)  # the forward wrote gate_suffix for these only
        gate_suffix = tl.load(GATE_SUFFIX + block_rows + n, mask=has_keys, other=0.0)
        live, logits, g, pc, dterm_dp = _block_logits(
            q, k, rows, cols, T, gate_suffix, table_rows, NPOS, slope, HAS_TABLE, PRECISION
        )
        a = tl.exp(logits - lse[:, None])  # the forward's weights (BLOCK_M, BLOCK_N), 0 off live
        da = tl.dot(gy, tl.trans(v), input_precision=PRECISION)  # dL/da_ij = gy_i . v_j
        dz = a * (da - delta[:, None])  # softmax's backward: dL/d(s + term)
        dp = dz * dterm_dp  # dL/dp_ij
        if HAS_TABLE and not CHUNKED:  # entry b of row i gets dz_ij max(0, 1 - |p_ij - b|): (1 - w) at lo, w at lo + 1
            hat = tl.maximum(1.0 - tl.abs(pc[:, :, None] - bins[None, None, :].to(tl.float32)), 0.0)
            gtable += tl.sum(dz[:, :, None] * hat, axis=1)  # (BLOCK_M, BLOCK_N, NPOS_PAD) -> (BLOCK_M, NPOS_PAD)
        if HAS_TABLE and CHUNKED:  # the same, over the chunks of entries from floor(min p) to floor(max p) + 1
            first = tl.min(tl.min(tl.where(live, pc, 1.0e9), axis=1), axis=0).to(tl.int32) // NPOS_CHUNK
            last = (tl.max(tl.max(tl.where(live, pc, -1.0), axis=1), axis=0).to(tl.int32) + 1) // NPOS_CHUNK
            for c in range(first, tl.minimum(last, NPOS_PAD // NPOS_CHUNK - 1) + 1):  # none where no entry is live
                at = c * NPOS_CHUNK + chunk_bins  # (NPOS_CHUNK,)
                hat = tl.maximum(1.0 - tl.abs(pc[:, :, None] - at[None, None, :].to(tl.float32)), 0.0)
                keep = row_ok[:, None] & (at[None, :] < NPOS)
                part = tl.load(gtable_rows + at[None, :], mask=keep, other=0.0) + tl.sum(dz[:, :, None] * hat, axis=1)
                tl.store(gtable_rows + at[None, :], part, mask=keep)
                tl.debug_barrier()  # stored by this program's threads, read back by others next time
        tl.store(DP_PREFIX + block_rows + n, dp_prefix, mask=has_keys)
        dg = dp_prefix[:, None] + tl.cumsum(dp, axis=1)  # dL/dg_it = sum_{j <= t} dL/dp_ij
        dp_prefix += tl.sum(dp, axis=1)
        ds = tl.where(live, dz + dg * g * (1.0 - g), 0.0)  # dL/ds_it: softmax's and the gates' paths
        dq += tl.dot(ds, k, input_precision=PRECISION)
    tl.store(GQ + qkv + rows[:, None] * D + dims[None, :], dq * scale, mask=row_mask)
    if HAS_TABLE and not CHUNKED:  # (chunked: GTABLE holds it already)
        tl.store(gtable_rows + bins[None, :], gtable, mask=row_ok[:, None] & (bins[None, :] < NPOS))


@_jit
def _cope_bwd_key_kernel(
    Q,
    K,
    V,
    TABLE,
    SLOPES,
    LSE,
    DELTA,
    GATE_SUFFIX,
    GY,
    DP_PREFIX,
    GK,
    GV,
    H,
    T,
    D,
    NPOS,
    N_KEY_BLOCKS,
    scale,
    HAS_TABLE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    D_PAD: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """dk and dv for one key block (the forward's BLOCK_N), query blocks from the diagonal on."""
    bh = tl.program_id(0)
    n = tl.program_id(1)  # the key block
    cols = n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    dims = tl.arange(0, D_PAD)
    dim_ok = dims < D
    kv_mask = (cols[:, None] < T) & dim_ok[None, :]
    qkv = bh.to(tl.int64) * T * D
    k = tl.load(K + qkv + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)  # (BLOCK_N, D_PAD)
    v = tl.load(V + qkv + cols[:, None] * D + dims[None, :], mask=kv_mask, other=0.0)
    slope = 0.0
    if not HAS_TABLE:
        slope = tl.load(SLOPES + bh % H)
    stats = bh.to(tl.int64) * T

    dk = tl.zeros([BLOCK_N, D_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D_PAD], dtype=tl.float32)
    for m in range((n * BLOCK_N) // BLOCK_M, tl.cdiv(T, BLOCK_M)):  # query rows i >= the block's first key
        rows = m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        row_ok = rows < T
        row_mask = row_ok[:, None] & dim_ok[None, :]
        q = tl.load(Q + qkv + rows[:, None] * D + dims[None, :], mask=row_mask, other=0.0) * scale
        gy = tl.load(GY + qkv + rows[:, None] * D + dims[None, :], mask=row_mask, other=0.0)
        lse = tl.load(LSE + stats + rows, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + stats + rows, mask=row_ok, other=0.0)
        has_keys = row_ok & (rows >= n * BLOCK_N)
        block_rows = (stats + rows) * N_KEY_BLOCKS + n
        gate_suffix = tl.load(GATE_SUFFIX + block_rows, mask=has_keys, other=0.0)
        dp_prefix = tl.load(DP_PREFIX + block_rows, mask=has_keys, other=0.0)
        table_rows = TABLE + bh.to(tl.int64) * T * NPOS + rows[:, None] * NPOS
        live, logits, g, pc, dterm_dp = _block_logits(
            q, k, rows, cols, T, gate_suffix, table_rows, NPOS, slope, HAS_TABLE, PRECISION
        )
        a = tl.exp(logits - lse[:, None])  # (BLOCK_M, BLOCK_N)
        da = tl.dot(gy, tl.trans(v), input_precision=PRECISION)
        dz = a * (da - delta[:, None])
        dg = dp_prefix[:, None] + tl.cumsum(dz * dterm_dp, axis=1)  # as the query kernel: same prefix sums
        ds = tl.where(live, dz + dg * g * (1.0 - g), 0.0)
        dv += tl.dot(tl.trans(a), gy, input_precision=PRECISION)  # (BLOCK_N, D_PAD)
        dk += tl.dot(tl.trans(ds), q, input_precision=PRECISION)  # q carries the scale already
    tl.store(GK + qkv + cols[:, None] * D + dims[None, :], dk, mask=kv_mask)
    tl.store(GV + qkv + cols[:, None] * D + dims[None, :], dv, mask=kv_mask)


# ---- launch ----


def _pow2(n: int, least: int = 16) -> int:
    """n rounded up to a power of two, at least ``least`` (tl.dot wants dimensions >= 16)."""
    return max(least, 1 << (max(n, 1) - 1).bit_length())


def block_sizes(device: torch.device, d_pad: int, npos_pad: int) -> dict[str, int]:
    """Tile sizes: small under the interpreter (numpy per program: small tiles keep the tests
    fast). fwd_m / bwd_query_m / bwd_key_m: the query blocks of the three kernels; block_n: the
    key block of all three (gate_suffix and dp_prefix are kept per key block); *_warps: each
    kernel's num_warps; bwd_stages: the backward kernels' num_stages (1: no software pipelining).

    On a GPU chosen by what the compiler reports, not by timings (no GPU was at hand):
    ``scripts/triton_resources.py`` (ptxas for sm_90, head sizes 16-128, npos 16 / 64, table and
    ALiBi, IEEE float32 and TF32). The earlier tiles (64-row forward, 4 warps, Triton's default
    3 pipeline stages) spilled at torch's default precision (IEEE): at d_h 64 the forward 696
    bytes of stack a thread, the key kernel 3,424 (32 registers left); 32-row forward blocks, 8
    warps and unpipelined backward kernels spill nothing there, and at most 176 bytes anywhere
    on that grid (d_h 128). The query kernel keeps small query blocks: its table gradient holds
    a (BLOCK_M, BLOCK_N, entries) tile: all entries at once up to ``npos_whole``, else chunks of
    ``npos_chunk`` (accumulated in memory; ``npos_chunk_of``). On a GPU that is npos above 64
    (at npos 512 the whole tile spilled 10.8 KB a thread; chunks of 16 spill nothing); under the
    interpreter npos above 16, so the tests see both ways."""
    if device.type != "cuda":
        return dict(
            fwd_m=16,
            block_n=16,
            bwd_query_m=16,
            bwd_key_m=16,
            fwd_warps=4,
            bwd_query_warps=4,
            bwd_key_warps=4,
            bwd_stages=1,
            npos_whole=16,
            npos_chunk=16,
        )
    wide = d_pad > 64
    return dict(
        fwd_m=32,
        block_n=32,
        bwd_query_m=16 if npos_pad > 32 or wide else 32,
        bwd_key_m=32,
        fwd_warps=8,
        bwd_query_warps=8,
        bwd_key_warps=8,
        bwd_stages=1,
        npos_whole=64,
        npos_chunk=16,
    )


def npos_chunk_of(tiles: dict[str, int], npos_pad: int) -> int:
    """The query kernel's NPOS_CHUNK: every entry of the table at once (npos_pad) up to
    ``npos_whole`` entries, else ``npos_chunk`` at a time."""
    return npos_pad if npos_pad <= tiles["npos_whole"] else tiles["npos_chunk"]


def _precision(device: torch.device) -> str:
    if device.type != "cuda":
        return "ieee"
    return {"highest": "ieee", "high": "tf32x3", "medium": "tf32"}[torch.get_float32_matmul_precision()]


def _dense32(t: torch.Tensor | None) -> torch.Tensor | None:
    """float32 and contiguous: the same tensor where it is so already."""
    return None if t is None else t.float().contiguous()


def _slopes32(slopes: torch.Tensor | None, H: int) -> torch.Tensor | None:
    return None if slopes is None else slopes.reshape(H).float().contiguous()


def _launch(kernel, grid, *args, **kwargs) -> None:
    kernel[grid](*args, **kwargs)


def _compile_only(kernel, grid, *args, **kwargs) -> None:
    kernel.warmup(*args, grid=grid, **kwargs)  # compiles (or finds in the cache), launches nothing


def _forward_launch(
    launch, tiles, device, B, H, T, D, npos, scale, has_table, q, k, v, table, slopes, y, lse, gate_suffix
) -> None:
    """The forward kernel's launch (``launch`` = _launch, or _compile_only for ``builds``)."""
    launch(
        _cope_fwd_kernel,
        (B * H, triton.cdiv(T, tiles["fwd_m"])),
        q,
        k,
        v,
        table,
        slopes,
        y,
        lse,
        gate_suffix,
        H,
        T,
        D,
        npos,
        triton.cdiv(T, tiles["block_n"]),
        float(scale),
        HAS_TABLE=has_table,
        BLOCK_M=tiles["fwd_m"],
        BLOCK_N=tiles["block_n"],
        D_PAD=_pow2(D),
        PRECISION=_precision(device),
        num_warps=tiles["fwd_warps"],
    )


def _backward_launch(
    launch,
    tiles,
    device,
    B,
    H,
    T,
    D,
    npos,
    scale,
    has_table,
    q,
    k,
    v,
    table,
    slopes,
    lse,
    delta,
    gate_suffix,
    gy,
    gq,
    gtable,
    dp_prefix,
    gk,
    gv,
) -> None:
    """The backward's two kernel launches (as ``_forward_launch``)."""
    npos_pad, n_key_blocks = _pow2(npos), triton.cdiv(T, tiles["block_n"])
    common = dict(
        HAS_TABLE=has_table,
        BLOCK_N=tiles["block_n"],
        D_PAD=_pow2(D),
        PRECISION=_precision(device),
        num_stages=tiles["bwd_stages"],
    )
    launch(
        _cope_bwd_query_kernel,
        (B * H, triton.cdiv(T, tiles["bwd_query_m"])),
        q,
        k,
        v,
        table,
        slopes,
        lse,
        delta,
        gate_suffix,
        gy,
        gq,
        gtable,
        dp_prefix,
        H,
        T,
        D,
        npos,
        n_key_blocks,
        scale,
        BLOCK_M=tiles["bwd_query_m"],
        NPOS_PAD=npos_pad,
        NPOS_CHUNK=npos_chunk_of(tiles, npos_pad),
        num_warps=tiles["bwd_query_warps"],
        **common,
    )
    launch(
        _cope_bwd_key_kernel,
        (B * H, n_key_blocks),
        q,
        k,
        v,
        table,
        slopes,
        lse,
        delta,
        gate_suffix,
        gy,
        dp_prefix,
        gk,
        gv,
        H,
        T,
        D,
        npos,
        n_key_blocks,
        scale,
        BLOCK_M=tiles["bwd_key_m"],
        num_warps=tiles["bwd_key_warps"],
        **common,
    )


def _compile_all(device: torch.device, H: int, T: int, D: int, npos: int, has_table: bool) -> None:
    """Compile the three kernels as a call on (any B, H, T, D) operands launches them: one small
    float32 tensor stands for every operand (the launches specialize on dtype, alignment and the
    integers, not on sizes)."""
    x = torch.empty(16, device=device)
    tiles = block_sizes(device, _pow2(D), _pow2(npos))
    _forward_launch(_compile_only, tiles, device, 1, H, T, D, npos, 0.125, has_table, *[x] * 8)
    _backward_launch(_compile_only, tiles, device, 1, H, T, D, npos, 0.125, has_table, *[x] * 14)


BUILDS = KernelBuilds("CoPE", "SYNTHLAB_COPE_TRITON")


def builds(device: torch.device, H: int, T: int, D: int, npos: int, has_table: bool) -> bool:
    """Whether the kernels for these sizes compile on this machine (compiled here the first time:
    a failure warns once and keeps the Triton path off for the process; see KernelBuilds).
    Always true under the interpreter, which compiles nothing."""
    if INTERPRETED:
        return True
    key = (str(device), H, T, D, npos, has_table, torch.get_float32_matmul_precision())
    return BUILDS.ready(key, lambda: _compile_all(torch.device(device), H, T, D, npos, has_table))


class _CoPEQKVTritonKernel(torch.autograd.Function):
    """The kernel Function behind :class:`CoPEQKVTriton`, on float32 operands (the wrapper
    converts): returns (y, lse, gate_suffix), the log-sum-exp (B, H, T) and the gates' suffix
    sums (B, H, T, key blocks) outputs only so that ``setup_context`` can save them for the
    backward (not differentiable).

    Written in the setup_context style (forward without ctx) with a ``vmap`` rule, as the CPU
    kernels' Functions (``encoders/contextual.py``), so that it runs under torch.func.vmap over
    stacked seeds (batched seeds; ``model/stacked.py``): each (b, h) is computed
    independently, so the rule folds the vmapped dim into the batch, (S, B, ...) -> (S*B, ...),
    one launch of each kernel, and unfolds the outputs (``batched.fold_vmap``); the backward then
    runs once on the folded tensors too. ``slopes`` (CoPE-ALiBi) is shared by the batch: a
    buffer, so not vmapped under batched seeds; a vmapped one would give one call per slice."""

    @staticmethod
    def forward(q, k, v, table, slopes, npos: int, scale: float):
        B, H, T, D = q.shape
        q, k, v, table, slopes = _dense32(q), _dense32(k), _dense32(v), _dense32(table), _slopes32(slopes, H)
        d_pad = _pow2(D)
        tiles = block_sizes(q.device, d_pad, _pow2(npos))
        n_key_blocks = triton.cdiv(T, tiles["block_n"])
        y = torch.empty_like(q)
        lse = q.new_empty(B, H, T)
        gate_suffix = q.new_empty(B, H, T, n_key_blocks)
        dummy = q  # the pointer of an absent table / slopes (never read)
        _forward_launch(
            _launch,
            tiles,
            q.device,
            B,
            H,
            T,
            D,
            npos,
            scale,
            table is not None,
            q,
            k,
            v,
            dummy if table is None else table,
            dummy if slopes is None else slopes,
            y,
            lse,
            gate_suffix,
        )
        return y, lse, gate_suffix

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, table, slopes, npos, scale = inputs
        y, lse, gate_suffix = output
        ctx.mark_non_differentiable(lse, gate_suffix)
        ctx.save_for_backward(
            _dense32(q), _dense32(k), _dense32(v), _dense32(table), _slopes32(slopes, q.shape[1]), y, lse, gate_suffix
        )
        ctx.npos, ctx.scale = npos, float(scale)
        ctx.tiles = block_sizes(q.device, _pow2(q.shape[-1]), _pow2(npos))  # the forward's

    @staticmethod
    def backward(ctx, gy, _g_lse, _g_gate_suffix):
        q, k, v, table, slopes, y, lse, gate_suffix = ctx.saved_tensors
        B, H, T, D = q.shape
        npos, scale, tiles = ctx.npos, ctx.scale, ctx.tiles
        gy = gy.float().contiguous()
        delta = (gy * y).sum(-1)  # (B, H, T) = sum_j a_ij dL/da_ij
        gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        gtable = None if table is None else torch.empty_like(table)
        dp_prefix = torch.empty_like(gate_suffix)
        dummy = q
        _backward_launch(
            _launch,
            tiles,
            q.device,
            B,
            H,
            T,
            D,
            npos,
            scale,
            table is not None,
            q,
            k,
            v,
            dummy if table is None else table,
            dummy if slopes is None else slopes,
            lse,
            delta,
            gate_suffix,
            gy,
            gq,
            dummy if gtable is None else gtable,
            dp_prefix,
            gk,
            gv,
        )
        return gq, gk, gv, gtable, None, None, None

    @staticmethod
    def vmap(info, in_dims, *args):
        return fold_vmap(
            _CoPEQKVTritonKernel.apply, info, in_dims, args, ("batch", "batch", "batch", "batch", "shared", None, None)
        )


class CoPEQKVTriton:
    """softmax_j(q_i k_j scale + CoPE term_ij) v_j over j <= i by the Triton kernels above; the
    contract of ``_FusedCoPEQKV`` (q, k, v (B, H, T, d_h); table (B, H, T, npos) or None with
    slopes (H,)). Returns q's dtype; gradients of q, k, v and the table (in their dtypes).
    ``apply`` converts the operands to float32 in the graph (autograd brings the gradients back
    to the inputs' dtypes) and runs :class:`_CoPEQKVTritonKernel`, which has a vmap rule: it runs
    under torch.func.vmap (batched seeds) with one launch per kernel for all the slices."""

    @staticmethod
    def apply(q, k, v, table, slopes, npos: int, scale: float) -> torch.Tensor:
        y = _CoPEQKVTritonKernel.apply(_dense32(q), _dense32(k), _dense32(v), _dense32(table), slopes, npos, scale)[0]
        return y.to(q.dtype)
