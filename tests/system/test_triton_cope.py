"""The Triton kernels of CoPE attention (synthlab/model/native/cope_triton.py), run on CPU by
Triton's interpreter: softmax(q k^T scale + CoPE term) @ v and its gradients (q, k, v, the table)
equal CoPE's PyTorch path in float64, clamp included, bit-identical run to run; and CoPE.attend
sends CUDA tensors to them unless SYNTHLAB_COPE_TRITON=0. Under torch.func.vmap (batched seeds)
the Function's vmap rule gives a loop of separate calls' outputs and gradients with one kernel
call for all the slices, and CoPE.attend takes the kernels there too.

The interpreter has to be chosen before triton is first imported (triton.jit reads
TRITON_INTERPRET when a function is decorated, triton's own library included, and torch /
Lightning import triton early), and would stay on for the whole process. So the kernel tests
run in a child pytest process of this file with TRITON_INTERPRET=1
(``test_kernels_under_the_interpreter``); in the parent they are skipped, and no other test
module sees the variable."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'synthlab-pe[gpu]'; Linux only)")

from synthlab.model.batched import is_batched, plain  # noqa: E402
from synthlab.model.encoders.contextual import CoPE, cope_alibi_slopes, cope_term  # noqa: E402
from synthlab.model.native import cope_triton as ct  # noqa: E402


def test_kernels_under_the_interpreter(interpreted_child):
    """This file's interpreted tests in a child process with TRITON_INTERPRET=1: all must pass."""
    interpreted_child(__file__, timeout=600)


def _cope(H, d_h, npos, alibi, sep_keys=False):
    """A CoPE module whose table is not zero (it starts at zero), so positions matter."""
    torch.manual_seed(H * 100 + d_h * 10 + npos)
    cope = CoPE(d_model=H * d_h, n_heads=H, npos=npos, alibi=alibi, sep_keys=sep_keys)
    if not alibi:
        with torch.no_grad():
            cope.pos_emb.normal_()
    return cope


def _by_pytorch(cope, q_raw, q, k, v):
    """softmax(masked(q k^T scale + CoPE term)) @ v by CoPE's PyTorch path (its reference)."""
    T = q.shape[-2]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    S = (q * cope.scale) @ k.transpose(-2, -1)
    table = None if cope.alibi else q_raw @ cope.pos_emb  # (B, H, T, npos)
    term = cope_term(S, table, cope.slopes if cope.alibi else None, cope.npos, future)
    att = torch.softmax((S + term).masked_fill(future, float("-inf")), dim=-1)
    return att @ v


def _attend(cope, q_raw, q, k, v, x=None):
    """CoPE.attend with its causal mask: the Triton kernels where they apply, else the reference."""
    T = q.shape[-2]
    return cope.attend(q_raw, q, k, v, x, torch.ones(T, T, dtype=torch.bool).triu(1), cope.scale)


def _by_triton(cope, q_raw, q, k, v):
    table = None if cope.alibi else q_raw @ cope.pos_emb  # (B, H, T, npos)
    return ct.CoPEQKVTriton.apply(q, k, v, table, cope.slopes if cope.alibi else None, cope.npos, cope.scale)


def _run(fn, cope, q_raw, q, k, v, w, dtype=torch.float32, same_query=True):
    """fn(cope, q_raw, q, k, v) on fresh leaves of ``dtype`` (q_raw is q itself when same_query)
    and the gradients of sum(out * w) for the leaves and the CoPE parameters."""
    leaves = [t.detach().to(dtype).clone().requires_grad_() for t in ([q, k, v] if same_query else [q_raw, q, k, v])]
    out = fn(cope, *([leaves[0], *leaves] if same_query else leaves))
    grads = torch.autograd.grad((out * w.to(dtype)).sum(), [*leaves, *cope.parameters()], allow_unused=True)
    return out.detach(), grads


def _check_against_float64(cope, q_raw, q, k, v, same_query=True):
    """The Triton kernels against the PyTorch path in float64, within max(5e-5 of the tensor's
    scale, 4 x the PyTorch path's own float32 error) (test_native_cope.py's rule)."""
    w = torch.randn(q.shape)
    args = (q_raw, q, k, v, w)
    fast, fast_grads = _run(_by_triton, cope, *args, same_query=same_query)
    ref_cope = CoPE(
        d_model=cope.n_heads * cope.head_dim, n_heads=cope.n_heads, npos=cope.npos, alibi=cope.alibi
    ).double()
    ref_cope.load_state_dict(cope.state_dict())
    ref, ref_grads = _run(_by_pytorch, ref_cope, *args, dtype=torch.float64, same_query=same_query)
    cope32 = CoPE(d_model=cope.n_heads * cope.head_dim, n_heads=cope.n_heads, npos=cope.npos, alibi=cope.alibi)
    cope32.load_state_dict(cope.state_dict())
    ref32, ref32_grads = _run(_by_pytorch, cope32, *args, same_query=same_query)

    def close(x, want, x32):
        err, err32 = (x.double() - want).abs().max(), (x32.double() - want).abs().max()
        return err <= max(5e-5 * want.abs().max().clamp_min(1.0), 4 * err32)

    assert fast.dtype == q.dtype and fast.shape == q.shape
    assert close(fast, ref, ref32), "output differs"
    names = (["q", "k", "v"] if same_query else ["q_raw", "q", "k", "v"]) + ["table"]
    for name, x, want, x32 in zip(names, fast_grads, ref_grads, ref32_grads):
        assert (x is None) == (want is None), name
        assert x is None or close(x, want, x32), f"gradient of {name} differs"


def _qkv(B, H, T, d_h, seed):
    # q, k spread so that gates reach both ends (0 and 1) and positions cross integer cells
    torch.manual_seed(seed)
    return tuple(s * torch.randn(B, H, T, d_h) for s in (2.0, 2.0, 1.0))


@pytest.mark.interpreted
def test_kernels_are_interpreted():
    assert ct.INTERPRETED and ct.triton_available("cpu")


@pytest.mark.interpreted
@pytest.mark.parametrize(
    "B,H,T,d_h,npos,alibi",
    [
        (2, 2, 1, 16, 64, False),
        (2, 2, 5, 7, 4, False),  # d_h 7: padded with masks; npos 4 < T: clamping
        (2, 2, 17, 8, 8, False),  # most positions clamp
        (2, 3, 17, 16, 64, True),  # CoPE-ALiBi, npos > T: no clamp
        (1, 2, 40, 24, 5, True),  # CoPE-ALiBi clamped, d_h 24
        (1, 2, 64, 32, 16, False),  # T a multiple of the tiles
        (1, 1, 33, 64, 64, False),
        (1, 1, 130, 16, 64, False),  # T past npos: clamped far from the diagonal only
    ],
)
def test_equals_pytorch_path_in_float64(B, H, T, d_h, npos, alibi):
    q, k, v = _qkv(B, H, T, d_h, seed=T + d_h)
    _check_against_float64(_cope(H, d_h, npos, alibi), q, q, k, v)


@pytest.mark.interpreted
@pytest.mark.parametrize("alibi", [False, True])
def test_gpu_tile_sizes(alibi, monkeypatch):
    """The tile sizes chosen for a CUDA device (the backward's query blocks other than its key
    blocks), run here by the interpreter."""
    gpu_tiles = ct.block_sizes(torch.device("cuda"), 16, 64)
    assert gpu_tiles["bwd_query_m"] != gpu_tiles["block_n"]
    monkeypatch.setattr(ct, "block_sizes", lambda device, d_pad, npos_pad: gpu_tiles)
    q, k, v = _qkv(1, 2, 70, 16, seed=70)
    _check_against_float64(_cope(2, 16, 8, alibi), q, q, k, v)


@pytest.mark.interpreted
def test_table_query_apart_from_attention_query():
    """q_raw (the table's query) other than q (rotary's output): the table's gradient reaches q_raw."""
    cope = _cope(2, 8, 6, False)
    q, k, v = _qkv(2, 2, 21, 8, seed=3)
    _check_against_float64(cope, torch.randn_like(q), q, k, v, same_query=False)


@pytest.mark.interpreted
@pytest.mark.parametrize("alibi", [False, True])
def test_clamp_boundary_by_hand(alibi):
    """q = 0: every gate is 0.5, so p_ij = (i - j + 1) / 2 exactly, and p = npos - 1 = 3 is hit
    exactly (i - j + 1 = 6): the clamp's gradient there and past it as the PyTorch path's."""
    cope = _cope(1, 8, 4, alibi)
    _, k, v = _qkv(1, 1, 20, 8, seed=5)
    q_raw = torch.randn(1, 1, 20, 8)
    _check_against_float64(cope, q_raw, torch.zeros_like(q_raw), k, v, same_query=False)


@pytest.mark.interpreted
def test_table_gradient_in_chunks_across_a_chunk_edge():
    """npos 64 (above the interpreter's chunk of 16 entries: the table's gradient accumulates in
    memory chunk by chunk). q = 0 makes p_ij = (i - j + 1) / 2 exactly; at T 31 the tile of rows
    16-30 and keys 0-15 reaches p = 15.5 at most, whose upper neighbour, entry 16, lies in the
    next chunk: a tile must visit it too."""
    assert ct.npos_chunk_of(ct.block_sizes(torch.device("cpu"), 16, 64), 64) == 16
    cope = _cope(1, 8, 64, False)
    _, k, v = _qkv(1, 1, 31, 8, seed=6)
    q_raw = torch.randn(1, 1, 31, 8)
    _check_against_float64(cope, q_raw, torch.zeros_like(q_raw), k, v, same_query=False)


@pytest.mark.interpreted
def test_half_precision_inputs():
    """bfloat16 / float16 in: float32 inside, q's dtype out, gradients in the inputs' dtypes."""
    cope = _cope(2, 16, 8, False)
    q, k, v = _qkv(1, 2, 17, 16, seed=9)
    want = _by_pytorch(cope, q, q, k, v)
    for dtype in (torch.bfloat16, torch.float16):
        q16, k16, v16 = (t.to(dtype).requires_grad_() for t in (q, k, v))
        table = (q16 @ cope.pos_emb.to(dtype)).detach().requires_grad_()  # as under autocast
        y = ct.CoPEQKVTriton.apply(q16, k16, v16, table, None, cope.npos, cope.scale)
        assert y.dtype == dtype
        y.float().square().sum().backward()
        assert all(t.grad is not None and t.grad.dtype == dtype for t in (q16, k16, v16, table))
        assert (y.float() - want).abs().max() < 0.1  # the inputs' rounding only


@pytest.mark.interpreted
def test_deterministic():
    """No atomics: output and every gradient bit-identical across calls."""
    cope = _cope(2, 16, 8, False)
    q, k, v = _qkv(2, 2, 37, 16, seed=11)
    w = torch.randn(q.shape)
    (y1, g1), (y2, g2) = (_run(_by_triton, cope, q, q, k, v, w) for _ in range(2))
    assert torch.equal(y1, y2) and all(torch.equal(a, b) for a, b in zip(g1, g2))


class _LooksCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA: what CoPE.attend checks to choose the Triton path."""

    @property
    def is_cuda(self):
        return True


def test_attend_sends_cuda_tensors_to_triton(monkeypatch):
    """CoPE.attend's choice (no kernel runs: the Function is replaced by a recorder that returns
    the PyTorch path's result), here in the parent process too."""
    calls = []

    def recorder(q, k, v, table, slopes, npos, scale):
        calls.append((table.shape, slopes, npos, scale))
        plain = [t.as_subclass(torch.Tensor) for t in (q, k, v)]
        return _by_pytorch(cope, plain[0], *plain)

    monkeypatch.setattr(ct.CoPEQKVTriton, "apply", recorder)
    monkeypatch.setattr(ct, "triton_available", lambda device: True)  # no GPU here
    monkeypatch.setattr(ct, "builds", lambda *sizes: True)  # nothing to compile for
    monkeypatch.setenv("SYNTHLAB_NATIVE", "0")  # else the C++ kernel takes the (CPU-resident) tensors first
    monkeypatch.delenv("SYNTHLAB_COPE_TRITON", raising=False)
    cope = _cope(2, 8, 8, False)
    q, k, v = _qkv(1, 2, 12, 8, seed=1)
    gpu = [t.as_subclass(_LooksCuda) for t in (q, k, v)]
    _attend(cope, gpu[0], *gpu)
    assert calls == [((1, 2, 12, 8), None, 8, cope.scale)]

    _attend(cope, q, q, k, v)  # CPU tensors: not the Triton path
    _attend(_cope(2, 8, 8, False).double(), *(t.double().as_subclass(_LooksCuda) for t in (q, q, k, v)))  # float64
    _attend(_cope(2, 8, 8, False, sep_keys=True), gpu[0], *gpu, x=torch.zeros(1, 12, 16))  # sep_keys
    assert len(calls) == 1  # those three took the reference
    monkeypatch.setenv("SYNTHLAB_COPE_TRITON", "0")  # the switch, read at call time
    _attend(cope, gpu[0], *gpu)
    assert len(calls) == 1
    monkeypatch.setenv("SYNTHLAB_COPE_TRITON", "1")
    _attend(cope, gpu[0], *gpu)
    assert len(calls) == 2
    monkeypatch.setattr(ct, "triton_available", lambda device: False)  # triton missing
    _attend(cope, gpu[0], *gpu)
    assert len(calls) == 2


# ---- under torch.func.vmap (batched seeds: model/stacked.py) ----


def _fake_cuda(monkeypatch):
    """Tensors that are a _LooksCuda, or under vmap wrap one (a vmapped tensor does not see the
    subclass's property), say they are on CUDA; every other tensor tells the truth."""
    real = torch.Tensor.is_cuda
    monkeypatch.setattr(
        torch.Tensor, "is_cuda", property(lambda t: real.__get__(t) or isinstance(plain(t), _LooksCuda))
    )


def _kernel_batches(monkeypatch):
    """The batch sizes the kernel Function's forward is called with, recorded call by call."""
    batches = []
    forward = ct._CoPEQKVTritonKernel.forward

    def spy(q, *rest):
        batches.append(q.shape[0])
        return forward(q, *rest)

    monkeypatch.setattr(ct._CoPEQKVTritonKernel, "forward", staticmethod(spy))
    return batches


# q, k, v, table in_dims (None: one tensor shared by the slices; the table None: CoPE-ALiBi) and
# the slopes' (None: the same (H,) for all slices, a buffer under batched seeds)
VMAP_CASES = {
    "table": (False, (0, 0, 0, 0), None),
    "alibi": (True, (0, 0, 0, None), None),
    "dims moved, v shared": (False, (0, 2, None, 4), None),  # k vmapped at dim 2, the table at its last dim
    "alibi, slopes vmapped": (True, (0, 0, 0, None), 0),  # fold_vmap's loop over the slices
}


@pytest.mark.interpreted
@pytest.mark.parametrize("case", list(VMAP_CASES))
def test_vmap_equals_a_loop_of_calls(case, monkeypatch):
    """CoPEQKVTriton.apply under torch.func.vmap over V = 3 stacked sets (B = 2: a rule that
    mixes the two up fails) gives the separate calls' outputs and gradients (autograd on the
    stacked leaves, as batched seeds train), with one kernel call on the V * B batch where the
    slopes are shared."""
    alibi, dims, slopes_dim = VMAP_CASES[case]
    V, B, H, T, d_h, npos = 3, 2, 2, 19, 8, 6  # T: two key blocks of the interpreter's tiles; npos < T: clamps
    torch.manual_seed(21)
    stacks = [s * torch.randn(V, B, H, T, d_h) for s in (2.0, 2.0, 1.0)] + [torch.randn(V, B, H, T, npos)]
    leaves = [
        None if alibi and i == 3 else (x[0] if d is None else x.movedim(0, d).contiguous()).requires_grad_()
        for i, (x, d) in enumerate(zip(stacks, dims))
    ]
    base = torch.tensor(cope_alibi_slopes(H, 0.25)) if alibi else None
    slopes = base if slopes_dim is None or not alibi else torch.stack([base * f for f in (1.0, 3.0, 0.5)])
    in_dims = (
        *(None if t is None else d for t, d in zip(leaves, dims)),
        None if slopes_dim is None or not alibi else slopes_dim,
    )
    scale = 0.35

    batches = _kernel_batches(monkeypatch)
    out = torch.func.vmap(
        lambda q, k, v, table, s: ct.CoPEQKVTriton.apply(q, k, v, table, s, npos, scale), in_dims=in_dims
    )(*leaves, slopes)
    assert batches == ([B] * V if in_dims[4] is not None else [V * B])  # folded: one call for all the slices
    w = torch.randn(V, B, H, T, d_h)
    grads = torch.autograd.grad((out * w).sum(), [t for t in leaves if t is not None])

    def part(t, d, i):
        return None if t is None else (t if d is None else t.select(d, i))

    ref = torch.stack(
        [
            ct.CoPEQKVTriton.apply(*(part(t, d, i) for t, d in zip([*leaves, slopes], in_dims)), npos, scale)
            for i in range(V)
        ]
    )
    ref_grads = torch.autograd.grad((ref * w).sum(), [t for t in leaves if t is not None])
    assert out.shape == (V, B, H, T, d_h)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    for name, g, want in zip([n for n, t in zip("q k v table".split(), leaves) if t is not None], grads, ref_grads):
        assert g.shape == want.shape
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"gradient of {name}: {m}")


class _Attend(torch.nn.Module):
    """CoPE.attend as a module's forward, for torch.func.functional_call over stacked tables."""

    def __init__(self, cope):
        super().__init__()
        self.cope = cope

    def forward(self, q, k, v):
        return _attend(self.cope, q, q, k, v)


@pytest.mark.interpreted
@pytest.mark.parametrize("alibi", [False, True])
def test_attend_under_vmap_runs_the_kernels(alibi, monkeypatch):
    """Batched seeds' shape of it: CoPE.attend vmapped over 3 seeds, each with its own table
    (functional_call over the stacked tables, as model/stacked.py), on "CUDA" tensors: the Triton
    kernels run once on the folded batch, and outputs and gradients (q, k, v, the tables) equal
    a loop over the seeds and the float64 PyTorch path."""
    _fake_cuda(monkeypatch)
    monkeypatch.setenv("SYNTHLAB_NATIVE", "0")
    monkeypatch.delenv("SYNTHLAB_COPE_TRITON", raising=False)
    batches = _kernel_batches(monkeypatch)
    S, B, H, T, d_h, npos = 3, 2, 2, 23, 8, 6
    cope = _cope(H, d_h, npos, alibi)
    module = _Attend(cope)
    torch.manual_seed(5)
    qkv = [(s * torch.randn(S, B, H, T, d_h)).as_subclass(_LooksCuda).requires_grad_() for s in (2.0, 2.0, 1.0)]
    params = {} if alibi else {"cope.pos_emb": torch.randn(S, d_h, npos).requires_grad_()}
    leaves = [*qkv, *params.values()]
    w = torch.randn(S, B, H, T, d_h)

    out = torch.func.vmap(lambda p, q, k, v: torch.func.functional_call(module, p, (q, k, v)))(params, *qkv)
    assert batches == [S * B]
    grads = torch.autograd.grad((out * w).sum(), leaves)

    ref = torch.stack(
        [
            torch.func.functional_call(module, {n: p[s] for n, p in params.items()}, tuple(t[s] for t in qkv))
            for s in range(S)
        ]
    )
    assert batches == [S * B] + [B] * S
    ref_grads = torch.autograd.grad((ref * w).sum(), leaves)
    torch.testing.assert_close(out.as_subclass(torch.Tensor), ref.as_subclass(torch.Tensor), rtol=1e-5, atol=1e-6)
    for g, want in zip(grads, ref_grads):
        torch.testing.assert_close(g.as_subclass(torch.Tensor), want.as_subclass(torch.Tensor), rtol=1e-5, atol=1e-6)

    plain_qkv = [t.detach().as_subclass(torch.Tensor) for t in qkv]
    for s in range(S):  # and the PyTorch path in float64
        ref_cope = _cope(H, d_h, npos, alibi).double()
        if not alibi:
            with torch.no_grad():
                ref_cope.pos_emb.copy_(params["cope.pos_emb"][s])
        want = _by_pytorch(ref_cope, *(t[s].double() for t in (plain_qkv[0], *plain_qkv)))
        assert (out[s].detach().double() - want).abs().max() < 1e-4


def test_attend_sends_cuda_tensors_to_triton_under_vmap(monkeypatch):
    """CoPE.attend under vmap (batched seeds) takes the Triton Function for CUDA tensors, as
    without (no kernel runs: a recorder as above); the switch still turns it off, CPU tensors
    still do not take it."""
    calls = []

    def recorder(q, k, v, table, slopes, npos, scale):
        calls.append((is_batched(q), is_batched(table)))
        return _by_pytorch(cope, q, q, k, v)

    monkeypatch.setattr(ct.CoPEQKVTriton, "apply", recorder)
    monkeypatch.setattr(ct, "triton_available", lambda device: True)  # no GPU here
    monkeypatch.setattr(ct, "builds", lambda *sizes: True)  # nothing to compile for
    monkeypatch.setenv("SYNTHLAB_NATIVE", "0")
    monkeypatch.delenv("SYNTHLAB_COPE_TRITON", raising=False)
    _fake_cuda(monkeypatch)
    cope = _cope(2, 8, 8, False)
    taken = []

    def attend(q, k, v):
        before = len(calls)
        y = _attend(cope, q, q, k, v)
        taken.append(len(calls) > before)
        return y

    torch.manual_seed(2)
    stacks = [torch.randn(3, 2, 2, 12, 8) for _ in range(3)]
    gpu = [t.as_subclass(_LooksCuda) for t in stacks]
    out = torch.func.vmap(attend)(*gpu)
    assert taken == [True] and calls == [(True, True)]
    want = torch.stack([_by_pytorch(cope, *(t[s] for t in (stacks[0], *stacks))) for s in range(3)])
    torch.testing.assert_close(out.as_subclass(torch.Tensor), want)

    torch.func.vmap(attend)(*stacks)  # CPU tensors (the C++ kernel off): the PyTorch path
    monkeypatch.setenv("SYNTHLAB_COPE_TRITON", "0")
    torch.func.vmap(attend)(*gpu)
    assert taken == [True, False, False] and len(calls) == 1
