"""Property tests of every positional encoding, processor and index scheme (README "Encodings")."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from synthlab.model import COMPONENTS, ENCODINGS, build_model, parse_pe, parse_positions, validate_combination
from synthlab.model.encoders.bias import alibi_slopes, t5_buckets
from synthlab.model.encoders.contextual import CoPE
from synthlab.model.encoders.rotary import Rotary
from synthlab.model.indices import bipe_segments, intra_from_segments
from synthlab.model.native.dape_packed import dape_packed
from synthlab.model.processors import DAPE

pytestmark = pytest.mark.usefixtures("one_thread")


SEP = 3  # separator id used for BiPE in these tests
V = 11

# every registered name plus the combinations the spec names
ALL_PE = [n for n in COMPONENTS] + [
    "kerple:kind=power",
    "kerple+dape",
    "kerple+dape:k=3",
    "rope+dape:k=3",
    "nope+dape:k=3",
    "cope+rope",
    "cope:npos=16",
    "cope:sep_keys=1",
    "fire+dape:k=5",
    "alibi+dape:k=7",
    "t5+dape:k=3",
    "cope+dape:k=3",
    "bipe-rope+dape:k=3",
    "bipe-alibi+dape",
    "relative+dape:k=3",
]
BIDIRECTIONAL = [
    "nope",
    "sinusoidal",
    "learned",
    "rope",
    "alibi",
    "t5",
    "kerple",
    "kerple:kind=power",
    "fire",
    "relative",
    "relative-capped",
    "bipe-rope",
    "bipe-alibi",
    "dape",
    "rope+dape",
    "kerple+dape",
    "kerple+dape:k=3",
    "nope+dape:k=5",
]


def _model(pe: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    kw = {"vocab_size": V, "d_model": 32, "n_layers": 2, "n_heads": 4, "max_len": 64, "separator_ids": (SEP,), **kw}
    m = build_model(pe=pe, **kw)
    # make zero-initialised tables non-trivial so every term is exercised
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "pos_emb" in name:
                p.normal_(0, 0.5)
    return m.eval()


def test_every_registered_name_has_description_and_paper():
    assert set(ENCODINGS) == set(COMPONENTS)
    for name, (desc, paper) in ENCODINGS.items():
        assert desc and paper, name
        assert parse_pe(name)  # every name parses alone


@pytest.mark.parametrize("pe", ALL_PE)
def test_causality(pe):
    """Changing tokens after t leaves logits at <= t unchanged (fast path and materialised)."""
    m = _model(pe)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, V, (2, 24), generator=g)
    x[:, 5] = SEP  # BiPE: at least one segment boundary before t
    t = 12
    y = x.clone()
    y[:, t + 1 :] = torch.randint(0, V, (2, 24 - t - 1), generator=g)
    y[:, 18] = SEP  # a separator appears only in the perturbed future
    for ra in (False, True):
        a = m(x, return_attention=ra)
        b = m(y, return_attention=ra)
        la, lb = (a[0], b[0]) if ra else (a, b)
        assert torch.allclose(la[:, : t + 1], lb[:, : t + 1], atol=1e-5), (
            f"{pe} leaks the future (return_attention={ra})"
        )
        assert not torch.allclose(la[:, t + 1 :], lb[:, t + 1 :], atol=1e-5)
        if ra:
            for att in a[1]:
                assert torch.allclose(att.sum(-1), torch.ones(()), atol=1e-5)
                assert torch.all(att.triu(1) == 0)


@pytest.mark.parametrize(
    "pe",
    [
        "rope",
        "xpos",
        "alibi",
        "t5",
        "kerple",
        "fire",
        "relative-capped",
        "cope+rope",
        "rope+dape:k=3",
        "kerple+dape:k=3",
    ],
)
def test_relative_encodings_depend_on_differences_only(pe):
    """Shifting all indices by a constant leaves the logits unchanged (rope / xpos relativity)."""
    m = _model(pe)
    x = torch.randint(0, V, (2, 20), generator=torch.Generator().manual_seed(2))
    base = torch.arange(20)
    a = m(x, positions=base)
    b = m(x, positions=base + 37)
    assert torch.allclose(a, b, atol=2e-4), pe
    # and absolute encodings do see the shift
    if pe == "rope":
        learned = _model("sinusoidal")
        assert not torch.allclose(learned(x, positions=base), learned(x, positions=base + 37), atol=1e-4)


def test_xpos_logit_scale_is_relative():
    torch.manual_seed(0)
    rot = Rotary(16, xpos=True)
    q, k = torch.randn(1, 1, 10, 16), torch.randn(1, 1, 10, 16)
    pos = torch.arange(10)
    q1, k1 = rot(q, k, pos)
    q2, k2 = rot(q, k, pos + 100)
    assert torch.allclose(q1 @ k1.transpose(-1, -2), q2 @ k2.transpose(-1, -2), atol=1e-4)
    # the decay: with q = k = ones on dim pair 0 only, the logit scales by zeta_0^((i-j)/512)
    q = torch.zeros(1, 1, 10, 16)
    q[..., 0] = 1
    qa, ka = rot(q, q, pos)
    s = (qa @ ka.transpose(-1, -2))[0, 0]
    zeta0 = 0.4 * 16 / (1.4 * 16)
    i, j = 9, 2
    assert math.isclose(float(s[i, j]) / math.cos((i - j) * 1.0), zeta0 ** ((i - j) / 512), rel_tol=1e-4)


@pytest.mark.parametrize(
    "H,expected",
    [
        (4, [2**-2, 2**-4, 2**-6, 2**-8]),
        (8, [2 ** -(i + 1) for i in range(8)]),
        (12, [2 ** -(i + 1) for i in range(8)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]),
    ],
)
def test_alibi_slopes(H, expected):
    assert alibi_slopes(H) == pytest.approx(expected)


def test_alibi_bias_is_negative_and_linear():
    m = _model("alibi")
    _, att = m(torch.zeros(1, 8, dtype=torch.long), return_attention=True)
    # identical tokens: q.k is the same for every key, so the attention follows the bias alone
    a = att[0][0, 0]  # head 0, slope 1/4
    row = a[7, :8]
    assert torch.all(row[1:] > row[:-1]), "nearer keys must get more weight (negative bias)"
    ratio = row[1:] / row[:-1]
    assert torch.allclose(ratio, torch.full_like(ratio, math.exp(0.25)), rtol=1e-4)


def test_t5_bucket_table():
    rel = torch.tensor([0, 1, 15, 16, 32, 64, 127, 128, 500])
    got = t5_buckets(rel, causal=True).tolist()
    assert got[:3] == [0, 1, 15]  # exact below 16
    assert got[3] == 16
    assert got[4] == 21 and got[5] == 26
    assert got[6:] == [31, 31, 31]
    # every distance < 16 has its own bucket, buckets are monotone and within [0, 32)
    full = t5_buckets(torch.arange(300), causal=True)
    assert torch.all(full[1:] >= full[:-1]) and int(full.max()) == 31
    # bidirectional: keys after the query use the upper half
    bi = t5_buckets(torch.tensor([3, -3]), causal=False).tolist()
    assert bi[0] != bi[1] and bi[1] >= 16


def test_cope_positions_with_gates_forced_to_one_are_relative():
    T = 9
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    gates = torch.sigmoid(torch.full((1, 1, T, T), 100.0)).masked_fill(future, 0.0)
    p = CoPE.positions(gates)[0, 0]
    i, j = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(p[~future], (i - j + 1).float()[~future])
    assert torch.all(p[future].abs() < 1e-6)


def test_cope_counts_only_gated_tokens_and_interpolates():
    torch.manual_seed(0)
    cope = CoPE(d_model=4, n_heads=1, npos=8)
    with torch.no_grad():
        cope.pos_emb.copy_(torch.arange(8.0).expand(4, 8) / 4)  # q . e[p] = p * sum(q) / 4
    T = 5
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    S = torch.full((1, 1, T, T), -100.0)
    S[..., 1] = 100.0  # only key 1 is "counted"
    q = torch.ones(1, 1, T, 4)
    term = cope(q, S, torch.zeros(1, T, 4), future)[0, 0]
    # p_ij = 1 for j <= 1 <= i, else 0 -> term = p * 1
    expect = torch.zeros(T, T)
    expect[1:, :2] = 1.0
    assert torch.allclose(term.masked_fill(future, 0), expect, atol=1e-4)
    # fractional positions interpolate linearly between rows
    S2 = torch.zeros(1, 1, T, T)  # gates 0.5
    p = cope(q, S2, torch.zeros(1, T, 4), future)[0, 0]
    assert torch.allclose(p[4, 0], torch.tensor(2.5), atol=1e-5)


def test_cope_gradients_are_exact():
    torch.manual_seed(0)
    cope = CoPE(d_model=8, n_heads=2, npos=6).double()
    with torch.no_grad():
        cope.pos_emb.normal_()
    T = 5
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    q = torch.randn(1, 2, T, 4, dtype=torch.double, requires_grad=True)
    S = torch.randn(1, 2, T, T, dtype=torch.double, requires_grad=True)
    x = torch.zeros(1, T, 8, dtype=torch.double)
    assert torch.autograd.gradcheck(lambda q, S: cope(q, S, x, future), (q, S))


def _dape_reference(X, conv1, conv2, k):
    """DAPE V2 as in the paper's App. L listing (tril before the first convolution)."""
    seq = torch.nn.Sequential(
        torch.nn.Conv2d(conv1.in_channels, conv1.out_channels, (1, k), padding=(0, k // 2)),
        torch.nn.LeakyReLU(),
        torch.nn.Conv2d(conv2.in_channels, conv2.out_channels, (1, k), padding=(0, k // 2)),
    )
    seq[0].load_state_dict(conv1.state_dict())
    seq[2].load_state_dict(conv2.state_dict())
    return seq(torch.tril(X))


def test_dape_k1_equals_mlp_dape_on_same_weights():
    torch.manual_seed(0)
    H, T = 4, 7
    S, B = torch.randn(2, H, T, T), torch.randn(1, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    d1 = DAPE(H, with_bias=True, hidden=8, k=1)
    # DAPE (Zheng et al. 2024) as a per-(i,j) MLP across heads: Linear(2H, D) -> LeakyReLU -> Linear(D, H)
    X = torch.cat([S, B.expand_as(S)], 1).permute(0, 2, 3, 1)  # (B, T, T, 2H)
    w1, b1 = d1.conv1.weight[:, :, 0, 0], d1.conv1.bias
    w2, b2 = d1.conv2.weight[:, :, 0, 0], d1.conv2.bias
    mlp = torch.nn.functional.leaky_relu(X @ w1.t() + b1) @ w2.t() + b2
    ref = S + B + mlp.permute(0, 3, 1, 2)
    got = d1(S, B, future)
    low = ~future
    assert torch.allclose(got[..., low], ref[..., low], atol=1e-5)
    # dape-k with k = 1 is the same module as dape: model-level identical logits
    a, b = _model("kerple+dape"), _model("kerple+dape-k:k=1")
    x = torch.randint(0, V, (2, 12))
    assert torch.allclose(a(x), b(x), atol=1e-6)


@pytest.mark.parametrize("k", [3, 5, 7])
def test_dape_k_matches_paper_listing_on_lower_triangle(k):
    torch.manual_seed(k)
    H, T = 4, 10
    S, B = torch.randn(2, H, T, T), torch.randn(1, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    d = DAPE(H, with_bias=True, hidden=8, k=k)
    got = d(S, B, future)
    ref = S + B + _dape_reference(torch.cat([S, B.expand_as(S)], 1), d.conv1, d.conv2, k)
    # the listing zeroes only before the first convolution, as DAPE does: the whole lower
    # triangle agrees (the diagonal included, where conv2 reads hidden values above it)
    assert torch.allclose(got[..., ~future], ref[..., ~future], atol=1e-5)
    # and a future score never reaches a past query: perturbing S above the diagonal is invisible
    S2 = S.clone()
    S2[..., future] += 100.0
    assert torch.allclose(d(S2, B, future)[..., ~future], got[..., ~future], atol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("T", [1, 2, 7, 12])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("path", ["forward", "packed"])
def test_dape_causal_paths_equal_full_map(k, T, with_bias, path):
    """The module's causal path (the native kernel where it builds) and the folded
    lower-triangle GEMMs (its PyTorch fallback) equal the plain Conv2d on the tril-zeroed map."""
    torch.manual_seed(T * 10 + k)
    d = DAPE(4, with_bias=with_bias, hidden=8, k=k)
    S = torch.randn(2, 4, T, T, requires_grad=True)
    B = torch.randn(2, 4, T, T) if with_bias else None
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    weights = (d.conv1.weight, d.conv1.bias, d.conv2.weight, d.conv2.bias)
    a = d(S, B, future) if path == "forward" else dape_packed(S, B, d._inputs(S, B), *weights)
    b = d.forward_full(S, B, future)
    assert torch.allclose(a[..., ~future], b[..., ~future], atol=1e-5)
    ga = torch.autograd.grad(a[..., ~future].sum(), [S, *d.parameters()])
    gb = torch.autograd.grad(b[..., ~future].sum(), [S, *d.parameters()])
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, atol=1e-4)
    assert torch.all(ga[0][..., future] == 0)


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dape_encoder_mode_is_the_paper_listing_on_the_whole_map(k, with_bias, dtype):
    """Encoder mode (CHE's reference model is bidirectional): nothing zeroed, both convolutions
    along each whole row, the listing of App. L without tril. float32 takes the native kernel,
    float64 the PyTorch path; values, gradients and softmax(A) (``attention``) agree."""
    torch.manual_seed(10 * k + with_bias)
    H, T = 4, 9
    d = DAPE(H, with_bias=with_bias, hidden=8, k=k, causal=False).to(dtype)
    S = torch.randn(2, H, T, T, dtype=dtype, requires_grad=True)
    B = torch.randn(1, H, T, T, dtype=dtype) if with_bias else None
    X = torch.cat([S, B.expand_as(S)], 1) if with_bias else S
    # App. L's two Conv2d (1, k), same padding, LeakyReLU between, on d's own weights (for the gradients)
    conv = lambda x, c: F.conv2d(x, c.weight, c.bias, padding=(0, k // 2))  # noqa: E731
    ref = S + (B if with_bias else 0) + conv(F.leaky_relu(conv(X, d.conv1)), d.conv2)
    got = d(S, B, None)
    assert torch.allclose(got, ref, atol=1e-5)
    # a score above the diagonal reaches the row's other keys when k > 1 (no mask anywhere)
    S2 = S.detach().clone()
    S2[..., 0, T - 1] += 100.0
    moved = (d(S2, B, None) - got).abs()[..., 0, :].amax(dim=(0, 1)) > 1e-4
    assert moved.tolist() == [j >= T - 1 - 2 * (k // 2) for j in range(T)]
    w = torch.randn(2, H, T, T, dtype=dtype)
    ga = torch.autograd.grad((d.attention(S, B, None) * w).sum(), [S, *d.parameters()])
    gb = torch.autograd.grad((F.softmax(ref, -1) * w).sum(), [S, *d.parameters()])
    for x, y in zip(ga, gb):
        assert torch.allclose(x, y, atol=1e-4)


def test_bipe_segment_ids_hand_example():
    a, b, c, d = 5, 6, 7, 8
    tokens = torch.tensor([[a, b, SEP, c, d, SEP, SEP, a]])
    seg, intra = bipe_segments(tokens, separator_ids=(SEP,))
    assert seg.tolist() == [[0, 0, 0, 1, 1, 1, 2, 3]]
    assert intra.tolist() == [[0, 1, 2, 0, 1, 2, 0, 0]]
    # the spec's example: a b SEP c -> 0 0 0 1 / 0 1 2 0
    seg, intra = bipe_segments(torch.tensor([[a, b, SEP, c]]), separator_ids=(SEP,))
    assert seg.tolist() == [[0, 0, 0, 1]] and intra.tolist() == [[0, 1, 2, 0]]
    # segment-start tokens (flip-flop's w) begin a segment
    W = 9
    seg, intra = bipe_segments(torch.tensor([[W, 1, 2, W, 1, W]]), segment_start_ids=(W,))
    assert seg.tolist() == [[0, 0, 0, 1, 1, 2]] and intra.tolist() == [[0, 1, 2, 0, 1, 0]]
    # explicit segments
    assert intra_from_segments(torch.tensor([[0, 0, 1, 1, 1, 4]])).tolist() == [[0, 1, 0, 1, 2, 0]]


def test_bipe_model_uses_segments():
    m = _model("bipe-rope")
    x = torch.tensor([[1, 2, 4, 5, 6, 7]])
    seg_a = torch.tensor([[0, 0, 0, 1, 1, 1]])
    seg_b = torch.tensor([[0, 0, 1, 1, 1, 1]])
    assert not torch.allclose(m(x, segments=seg_a), m(x, segments=seg_b))
    # derived from separators == explicit ids
    xs = torch.tensor([[1, 2, SEP, 5, 6, SEP, 7]])
    seg, _ = bipe_segments(xs, (SEP,))
    assert torch.allclose(m(xs), m(xs, segments=seg))


def _pose_coverage(chunks: int, Lc: int, Lt: int, n: int, seed: int = 0) -> torch.Tensor:
    scheme = parse_positions(f"pose:chunks={chunks},target={Lt}")
    g = torch.Generator().manual_seed(seed)
    hits = torch.zeros(Lt)
    for _ in range(n):
        pos = scheme.sample(Lc, g)
        d = (pos.unsqueeze(0) - pos.unsqueeze(1)).flatten()
        seen = torch.zeros(Lt, dtype=torch.bool)
        seen[d[d >= 0]] = True
        hits += seen
    return hits / n


def test_pose_positions_and_coverage_grows_with_chunks():
    scheme = parse_positions("pose:chunks=3,target=100")
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        pos = scheme.sample(20, g)
        assert pos.shape == (20,) and int(pos[0]) >= 0 and int(pos.max()) < 100
        steps = pos[1:] - pos[:-1]
        assert torch.all(steps >= 1)  # strictly increasing, chunks contiguous
        assert int((steps > 1).sum()) <= 2  # at most N - 1 skips
    Lc, Lt = 16, 64
    cov = {n: _pose_coverage(n, Lc, Lt, 400) for n in (1, 2, 3, Lc)}
    assert torch.all(cov[1][:Lc] == 1) and torch.all(cov[1][Lc:] == 0)  # N = 1 is plain training
    for n in (2, 3, Lc):
        assert torch.all(cov[n] > 0), f"N={n}: some relative distance in [0, L_t) never reached"
    far = {n: float(cov[n][Lc:].mean()) for n in cov}
    assert far[1] < far[2] < far[3] < far[Lc]
    assert parse_positions("pose").at_eval is False


def test_randomized_positions_sorted_distinct_bounded():
    scheme = parse_positions("randomized:max=300")
    g = torch.Generator().manual_seed(0)
    for T in (1, 50, 300):
        pos = scheme.sample(T, g)
        assert pos.shape == (T,)
        assert torch.all(pos[1:] > pos[:-1]) and int(pos.max()) < 300 and int(pos.min()) >= 0
    a = scheme.sample(50, torch.Generator().manual_seed(5))
    b = scheme.sample(50, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    assert scheme.at_eval and parse_positions("randomized").max_position == 2048
    with pytest.raises(ValueError, match="max=300"):
        scheme.sample(301, g)


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_rope_scaling_changes_logits_only_beyond_training_length(kind):
    m = _model("rope", max_len=64)
    with torch.no_grad():  # sharpen attention so that the scores' changes are visible
        for b in m.blocks:
            b.attn.c_attn.weight.mul_(10)
    x = torch.randint(0, V, (2, 48), generator=torch.Generator().manual_seed(3))
    short, long_ = x[:, :32], x

    def att(inp):
        return torch.stack(m(inp, return_attention=True)[1])

    ref_short, ref_long = att(short), att(long_)
    m.set_rope_scaling(kind, train_len=32)  # dynamic: s = max(1, T / 32)
    assert torch.equal(att(short), ref_short)
    assert (att(long_) - ref_long).abs().max() > 1e-3
    m.set_rope_scaling(kind, factor=1.0, train_len=32)
    assert torch.allclose(att(long_), ref_long, atol=1e-6)
    m.set_rope_scaling(None)
    assert torch.equal(att(long_), ref_long)


def test_rope_scaling_formulas():
    d = 16
    rot = Rotary(d)
    inv = rot.inv_freq.clone()
    rot.set_scaling("linear", 4.0, train_len=32)
    f, pmul, mag = rot._inv_freq(4.0)
    assert pmul == 0.25 and mag == 1.0 and torch.equal(f, inv)
    rot.set_scaling("ntk", 4.0, train_len=32)
    f, _, _ = rot._inv_freq(4.0)
    base = 10000 * 4.0 ** (d / (d - 2))
    assert torch.allclose(f, base ** (-torch.arange(0, d, 2).float() / d))
    rot.set_scaling("yarn", 4.0, train_len=32)
    f, _, mag = rot._inv_freq(4.0)
    assert mag == pytest.approx(0.1 * math.log(4.0) + 1)
    r = 32 * inv / (2 * math.pi)
    assert torch.allclose(f[r > 32], inv[r > 32]) and torch.allclose(f[r < 1], inv[r < 1] / 4)
    # with only the factor (as the trainer calls it: s = L_eval / L_train), L_train = T / s
    only = Rotary(d)
    only.set_scaling("yarn", 4.0)
    assert torch.allclose(only._inv_freq(4.0, 128)[0], f)
    # logits scale by (0.1 ln s + 1)^2 where i = j (rotation cancels)
    q = torch.randn(1, 1, 5, d)
    qs, ks = rot(q, q, torch.arange(5))
    ratio = (qs * ks).sum(-1) / (q * q).sum(-1)
    assert torch.allclose(ratio, torch.full_like(ratio, mag**2), rtol=1e-4)


def test_rope_scaling_needs_rotary():
    with pytest.raises(ValueError, match="rotary"):
        _model("alibi").set_rope_scaling("yarn", 2.0)
    _model("alibi").set_rope_scaling(None)  # resetting is always fine
    with pytest.raises(ValueError, match="linear, ntk, yarn"):
        _model("rope").set_rope_scaling("bogus", 2.0)
    _model("bipe-rope").set_rope_scaling("ntk", 2.0)
    _model("xpos").set_rope_scaling("linear", 2.0)


@pytest.mark.parametrize("pe", BIDIRECTIONAL)
def test_encoder_mode_is_bidirectional(pe):
    m = _model(pe, causal=False)
    x = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(4))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % V
    a, b = m(x), m(y)
    assert not torch.allclose(a[:, 0], b[:, 0], atol=1e-6), "encoder mode must see later tokens"
    la, att = m(x, return_attention=True)
    assert torch.allclose(la, a, atol=1e-5)
    assert torch.all(att[0].triu(1).sum() > 0)


@pytest.mark.parametrize("pe", ["xpos", "cope", "cope-alibi", "cope+rope", "cope+dape:k=3"])
def test_encoder_mode_refuses_causal_only(pe):
    with pytest.raises(ValueError, match="causal"):
        build_model(pe=pe, vocab_size=V, causal=False)
    with pytest.raises(ValueError, match="causal"):
        validate_combination(pe, None, causal=False, max_len=64, eval_len=64)


def test_spec_grammar_canonical_names():
    assert parse_pe("kerple+dape:k=3").name == "kerple+dape:k=3"
    assert parse_pe("dape:k=3+kerple").name == "kerple+dape:k=3"
    assert parse_pe("rope+cope").name == "cope+rope"
    assert parse_pe(" Rope ").name == "rope"
    assert parse_pe("dape-k").name == "dape:k=3"
    assert parse_pe("cope-alibi").name == "cope-alibi"
    assert parse_pe("cope:alibi=1,npos=16").name == "cope-alibi:npos=16"
    spec = parse_pe("fire+dape:k=5")
    assert spec.params["dape"] == {"k": 5, "hidden": 32} and spec.params["fire"]["width"] == 32
    import json

    json.dumps(spec.params)
    assert parse_pe(spec.name) == spec  # round trip
    assert parse_pe("cope").with_params(npos=16).name == "cope:npos=16"


@pytest.mark.parametrize(
    "bad,needle",
    [
        ("rope+xpos", "two rotary"),
        ("bipe-rope+rope", "two rotary"),
        ("rope+alibi:alibi=1", "requires cope"),
        ("alibi:sep_keys=1", "requires cope"),
        ("nope+alibi", "nope"),
        ("learned+sinusoidal", "two absolute"),
        ("bipe-rope+bipe-alibi", "two"),
        ("rope+rope", "twice"),
        ("blah", "unknown pe component 'blah'"),
        ("rope:bse=3", "unknown parameter 'bse'"),
        ("dape:k=4", "odd"),
        ("dape:k=x", "dape:k"),
        ("cope:npos=1", "npos"),
        ("kerple:kind=cubic", "log, power"),
        ("rope:base", "key=value"),
        ("", "non-empty"),
        # shared tables and CoPE-ALiBi's slopes
        ("cope:alibi=1,layer_tables=1", "no position table"),
        ("cope-alibi:layer_tables=1", "unknown parameter 'layer_tables'"),
        ("cope:m0=1", "cope-alibi:m0"),
        ("cope-alibi:m0=0", "positive"),
        ("t5:layer_tables=maybe", "must be bool"),
    ],
)
def test_bad_spec_strings(bad, needle):
    with pytest.raises(ValueError, match=needle):
        parse_pe(bad)


def test_build_model_pe_params():
    m = build_model(pe="dape", vocab_size=V, k=3)
    assert m.pe == "dape:k=3"
    assert build_model(pe="cope", vocab_size=V, npos=16).pe == "cope:npos=16"
    with pytest.raises(ValueError, match="unknown pe parameter 'npos'"):
        build_model(pe="rope", vocab_size=V, npos=16)
    with pytest.raises(ValueError, match="odd"):
        build_model(pe="dape", vocab_size=V, k=2)


@pytest.mark.parametrize(
    "pe,positions,kw,needle",
    [
        ("nope", "pose:chunks=2,target=1024", {}, "reads token indices|ignores"),
        ("cope", "randomized", {}, "ignores"),
        ("bipe-rope", "pose", {}, "segment"),
        ("learned", None, {"max_len": 64, "eval_len": 128}, "learned"),
        ("learned", "randomized:max=2048", {"max_len": 512, "eval_len": 256}, "learned"),
        ("relative", None, {"max_len": 64, "eval_len": 65}, "relative-capped"),
        ("rope", "randomized:max=100", {"max_len": 64, "eval_len": 200}, "cover"),
        ("rope", "pose:chunks=x", {}, "integer"),
        ("rope", "shuffled", {}, "unknown --positions"),
        ("rope", "pose:foo=1", {}, "allowed"),
        ("alibi", None, {"rope_scaling": "yarn"}, "rotary"),
        ("rope", None, {"rope_scaling": "dynamic"}, "linear, ntk, yarn"),
    ],
)
def test_validate_combination_rejects(pe, positions, kw, needle):
    with pytest.raises(ValueError, match=needle):
        validate_combination(pe, positions, **{"causal": True, "max_len": 512, "eval_len": 512, **kw})


def test_validate_combination_accepts():
    validate_combination("rope", "pose:chunks=2,target=1024", True, 128, 1024)
    validate_combination("relative-capped", None, True, 64, 1000)
    validate_combination("alibi", "randomized:max=2048", True, 128, 2048)
    validate_combination("kerple+dape:k=3", None, True, 64, 4096)
    validate_combination("learned", "pose:chunks=2,target=256", True, 256, 256)
    validate_combination("cope+rope", None, True, 64, 256, rope_scaling="yarn")
    assert parse_positions(None) is None and parse_positions("none") is None


def test_learned_table_never_clamps():
    m = _model("learned", max_len=16)
    with pytest.raises(ValueError, match="max_len"):
        m(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        m(torch.zeros(1, 4, dtype=torch.long), positions=torch.tensor([0, 1, 2, 16]))
    r = _model("relative", max_len=16)
    with pytest.raises(ValueError, match="relative-capped"):
        r(torch.zeros(1, 17, dtype=torch.long))
    rc = _model("relative-capped", max_len=16)
    x = torch.randint(0, V, (1, 24))
    out = rc(x)
    assert out.shape == (1, 24, V)


@pytest.mark.parametrize("pe,T", [("relative", 16), ("relative-capped", 16), ("relative-capped", 40)])
def test_relative_skewed_path_equals_gather_path(pe, T):
    """Default positions use the skewing trick; explicit positions gather by distance."""
    m = _model(pe, max_len=16)
    with torch.no_grad():
        for b in m.blocks:
            b.attn.biases[0].table.normal_()
    x = torch.randint(0, V, (2, T))
    assert torch.allclose(m(x), m(x, positions=torch.arange(T).expand(2, T)), atol=1e-5)


@pytest.mark.parametrize("L", [512.0, 10.0])
def test_fire_distance_lookup_equals_full_map(L):
    """Below the threshold FIRE depends on |i - j| only (MLP on T distances); above it, on i too."""
    m = _model("fire", L=L)
    x = torch.randint(0, V, (2, 30))
    fast, full = m(x), m(x, positions=torch.arange(30).expand(2, 30))
    assert torch.allclose(fast, full, atol=1e-6)
    fast.square().sum().backward()
    assert m.blocks[0].attn.biases[0].L_multiplier.grad is not None and m.blocks[0].attn.biases[0].c.grad is not None


def test_relative_capped_uses_last_row_past_table():
    """Capped distances >= rows share the last row, so positions far apart behave alike."""
    m = _model("relative-capped", max_len=8)
    x = torch.randint(0, V, (1, 6), generator=torch.Generator().manual_seed(0))
    a = m(x, positions=torch.tensor([0, 20, 40, 60, 80, 100]))
    b = m(x, positions=torch.tensor([0, 30, 60, 90, 120, 150]))
    assert torch.allclose(a, b, atol=1e-6)


def test_learned_biases_recomputed_after_update_and_alibi_cached():
    x = torch.randint(0, V, (2, 10))
    for pe in ("t5", "kerple", "fire"):
        m = _model(pe)
        a = m(x)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "attn.biases" in name:  # not a constant: T5's table shifted by one constant is softmax-invariant
                    p.add_(torch.linspace(0.1, 0.5, p.numel()).view_as(p))
        assert not torch.allclose(a, m(x), atol=1e-4), f"{pe} bias must follow its parameters"
    m = _model("alibi")
    m(x)
    mask1 = m.blocks[0].attn.biases[0].masked(m._context(x, None, None))
    m(x)
    mask2 = m.blocks[1].attn.biases[0].masked(m._context(x, None, None))
    assert mask1 is mask2  # one cached tensor for every layer and step


@pytest.mark.parametrize(
    "pe", ["rope", "alibi", "t5", "fire", "sinusoidal", "learned", "relative-capped", "xpos", "kerple+dape:k=3"]
)
def test_positions_batch_and_shared_agree(pe):
    m = _model(pe, max_len=256)
    x = torch.randint(0, V, (2, 12))
    pos = parse_positions("randomized:max=200").sample(12, torch.Generator().manual_seed(0))
    a = m(x, positions=pos)
    b = m(x, positions=pos.expand(2, 12))
    assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(a, m(x), atol=1e-5)  # the positions matter


OVERFIT = [
    "nope",
    "sinusoidal",
    "learned",
    "rope",
    "xpos",
    "alibi",
    "t5",
    "kerple",
    "fire",
    "relative",
    "relative-capped",
    "cope",
    "cope-alibi",
    "cope+rope",
    "bipe-rope",
    "bipe-alibi",
    "dape",
    "kerple+dape:k=3",
    "rope+dape:k=3",
    "nope+dape:k=3",
    "fire+dape:k=5",
]


@pytest.mark.parametrize("pe", OVERFIT)
def test_tiny_model_overfits_fixed_batch(pe):
    torch.manual_seed(0)
    m = build_model(pe=pe, vocab_size=8, d_model=32, n_layers=2, n_heads=2, max_len=32, separator_ids=(0,))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 8, (4, 16), generator=g)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.0)
    loss = None
    for _ in range(300):
        logits = m(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 8), x[:, 1:].reshape(-1))
        if loss.item() < 0.05:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1, f"{pe}: loss {loss.item():.3f}"


def _rotate_by_hand(x, cos, sin):
    """Pair k = dims (2k, 2k + 1) as the complex number x_2k + i x_2k+1, times e^(i angle)."""
    out = x.clone()
    for kk in range(x.shape[-1] // 2):
        a, b = x[..., 2 * kk], x[..., 2 * kk + 1]
        out[..., 2 * kk] = a * cos[..., kk] - b * sin[..., kk]
        out[..., 2 * kk + 1] = a * sin[..., kk] + b * cos[..., kk]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rotate_fast_and_real_paths_match_the_formula(dtype):
    from synthlab.model.encoders.rotary import rotate

    torch.manual_seed(0)
    B, T, H, D = 2, 7, 3, 8
    qkv = torch.randn(B, T, 3 * H * D, dtype=dtype, requires_grad=True)
    q = qkv[..., H * D : 2 * H * D].view(B, T, H, D).transpose(1, 2)  # a strided view, as in attention
    ang = torch.rand(T, D // 2, dtype=dtype) * 6
    cos, sin = ang.cos(), ang.sin()
    fast = rotate(q, cos, sin)  # complex product
    hand = _rotate_by_hand(q, cos, sin)
    assert torch.allclose(fast, hand, atol=1e-6)
    g = torch.randn_like(fast)
    (grad_fast,) = torch.autograd.grad((fast * g).sum(), qkv)
    (grad_hand,) = torch.autograd.grad((hand * g).sum(), qkv)
    assert torch.allclose(grad_fast, grad_hand, atol=1e-6)
    # the real-number path (bf16 / MPS) computes the same
    half = rotate(q.detach().to(torch.bfloat16), cos.to(torch.bfloat16), sin.to(torch.bfloat16))
    assert half.dtype == torch.bfloat16 and torch.allclose(half.to(dtype), hand.detach(), atol=5e-2)


def test_rotate_takes_the_real_form_under_torch_compile(monkeypatch):
    # inductor has no complex code generation: traced by torch.compile, rotate is the real form
    from synthlab.model.encoders.rotary import rotate

    torch.manual_seed(0)
    q, ang = torch.randn(2, 3, 7, 8), torch.rand(7, 4) * 6
    calls = []
    as_complex = torch.view_as_complex
    monkeypatch.setattr(torch, "view_as_complex", lambda t: calls.append(1) or as_complex(t))
    want = rotate(q, ang.cos(), ang.sin())
    assert calls == [1]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got = rotate(q, ang.cos(), ang.sin())
    assert calls == [1] and torch.allclose(got, want, atol=1e-6)


def test_half_pair_layout_is_a_permutation_of_the_interleaved_one():
    """Legacy runs (pairs (k, k + d/2)) give the same logits as the current layout on q, k
    whose features are permuted to match: what lets load_run reload them exactly."""
    torch.manual_seed(0)
    rot = Rotary(8)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    pos = torch.arange(6)
    perm = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])  # interleaved dim 2j <- half dim j, 2j+1 <- j + 4
    rq, rk = rot(q[..., perm], k[..., perm], pos)
    rot.pairs = "half"
    hq, hk = rot(q, k, pos)
    assert torch.allclose(rq @ rk.transpose(-1, -2), hq @ hk.transpose(-1, -2), atol=1e-5)
    rot.pairs = "interleaved"  # without the permutation the layouts differ
    iq, ik = rot(q, k, pos)
    assert not torch.allclose(iq @ ik.transpose(-1, -2), hq @ hk.transpose(-1, -2), atol=1e-3)
