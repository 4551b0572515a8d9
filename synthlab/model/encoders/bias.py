"""Additive attention biases b(i, j) (ALiBi, T5 buckets, KERPLE, FIRE, Shaw relative):
logit_ij = q_i k_j / sqrt(d_h) + b(i, j).

Each module maps the position context to a bias (1 | B, H, T, T) added to the logits
q_i k_j / sqrt(d_h). Values above the diagonal are finite and masked later (causal mode); in
encoder mode (``ctx.causal`` False) every bias is defined on |i - j| (or signed buckets).
Index tensors that depend only on the length are cached (``ctx.memoize``); learned biases are
recomputed from their parameters every call.
"""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..batched import plain
from ..registry import BuildConfig


def alibi_slopes(n_heads: int) -> list[float]:
    """Press et al. 2022 reference rule: m_h = 2^(-8h/H) for H a power of two; otherwise the
    first 2^floor(log2 H) slopes, then every other slope of the 2x set."""

    def pow2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        return pow2(n_heads)
    closest = 2 ** math.floor(math.log2(n_heads))
    return pow2(closest) + alibi_slopes(2 * closest)[0::2][: n_heads - closest]


class ALiBi(nn.Module):
    """ALiBi (Press et al. 2022): b = -m_h (i - j) for keys j <= i (causal). Encoder mode:
    b = m_h (-|i - j| + 0.5 [j < i]), the bidirectional form of the CHE reference
    (Deletang et al. 2023, ``compute_alibi_encodings_biases``): the 0.5 on the keys before the
    query breaks the symmetry, without which a model cannot tell left from right. BiPE-ALiBi
    uses the segment index and ``scale`` = 96 (He et al. 2024, App. D). No parameters: cached
    per length."""

    slopes: torch.Tensor

    @classmethod
    def build(cls, cfg: BuildConfig) -> "ALiBi":
        assert cfg.index is not None, "ALiBi reads an index"
        return cls(
            cfg.n_heads, scale=cfg.params.get("slope_scale", 1.0), index=cfg.index, encoder_break=cfg.revision >= 3
        )  # pe revision <= 2: symmetric in encoder mode

    def __init__(self, n_heads: int, scale: float = 1.0, index: str = "token", encoder_break: bool = True):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)) * scale, persistent=False)  # (H,)
        self.index, self.scale, self.n_heads, self.encoder_break = index, scale, n_heads, encoder_break

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        key = ("alibi", self.index, self.scale, self.n_heads, self.encoder_break)
        return ctx.memoize(key, self.index, lambda: self._bias(ctx))

    def _bias(self, ctx) -> torch.Tensor:
        dist = -ctx.absrel(self.index)  # (T, T) or (B, T, T) float
        if not ctx.causal and self.encoder_break:  # CHE's symmetry break: +0.5 on the keys before the query
            dist = dist + 0.5 * (ctx.rel(self.index) > 0).to(dist)
        bias = self.slopes.to(dist).view(-1, 1, 1) * dist.unsqueeze(-3)  # (1|B, H, T, T)
        return bias if bias.dim() == 4 else bias.unsqueeze(0)

    def score_mod(self, ctx):
        """The bias as a FlexAttention score_mod (``model/flex.py``): token positions 0..T-1 only."""
        if self.index != "token" or not ctx.cacheable("token"):
            return None
        slopes = self.slopes.to(ctx.dtype)
        if ctx.causal or not self.encoder_break:

            def alibi(score, b, h, q_idx, kv_idx):
                return score - slopes[h] * (q_idx - kv_idx).abs()
        else:

            def alibi(score, b, h, q_idx, kv_idx):
                return score + slopes[h] * (0.5 * (kv_idx < q_idx) - (q_idx - kv_idx).abs())

        return alibi

    def masked(self, ctx) -> torch.Tensor:
        """bias + causal -inf mask, the float attn_mask for scaled_dot_product_attention (cached)."""
        key = ("alibi-masked", self.index, self.scale, self.n_heads, self.encoder_break)
        return ctx.memoize(key, self.index, lambda: ctx.apply_mask(self.forward(ctx)))


def t5_buckets(rel: torch.Tensor, causal: bool, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Raffel et al. 2020 bucket of rel = i - j. Causal: n = max(i - j, 0), exact below
    num_buckets/2, log-spaced up to max_distance, last bucket beyond (32/128: 16 -> 16,
    32 -> 21, 64 -> 26, >= 127 -> 31). Bidirectional: half the buckets per direction."""
    ret = torch.zeros_like(rel)
    if causal:
        n = rel.clamp(min=0)
    else:
        num_buckets //= 2
        ret = ret + (rel < 0).long() * num_buckets  # keys after the query
        n = rel.abs()
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = (
        max_exact
        + (
            torch.log(n.float().clamp(min=1) / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return ret + torch.where(is_small, n, large)


class T5Bias(nn.Module):
    """T5 relative bias (Raffel et al. 2020): b_h(i, j) = table[bucket(i - j), h], a learned scalar
    per head per distance bucket (:func:`t5_buckets`). One table for the whole stack, layers 2..
    reuse layer 1's (the paper's setting; ``layer_tables=1`` or pe revision 1: one per layer)."""

    @classmethod
    def build_shared(cls, cfg: BuildConfig) -> "T5Bias | None":
        """The model's one table, built before the layers (None: each layer builds its own)."""
        if cfg.revision < 2 or cfg.params["layer_tables"]:
            return None
        return cls(cfg.n_heads, cfg.params["buckets"], cfg.params["max_distance"], causal=cfg.causal)

    @classmethod
    def build(cls, cfg: BuildConfig) -> "T5Bias":
        if cfg.shared is not None:  # the same module in every layer: tied weights in the state dict
            return cfg.shared
        return cls(cfg.n_heads, cfg.params["buckets"], cfg.params["max_distance"], causal=cfg.causal)

    def __init__(self, n_heads: int, buckets: int = 32, max_distance: int = 128, causal: bool = True):
        super().__init__()
        self.buckets, self.max_distance, self.causal = buckets, max_distance, causal
        self.table = nn.Embedding(buckets, n_heads)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        key = ("t5-buckets", "token", self.buckets, self.max_distance)
        idx = ctx.memoize(
            key, "token", lambda: t5_buckets(ctx.rel("token"), ctx.causal, self.buckets, self.max_distance)
        )
        bias = self.table(idx)  # (.., T, T, H)
        # (.., T, T, H) -> (1|B, H, T, T), contiguous for the attention kernels
        return (bias.movedim(-1, -3) if bias.dim() == 4 else bias.permute(2, 0, 1).unsqueeze(0)).contiguous()

    def score_mod(self, ctx):
        """The bias as a FlexAttention score_mod (``model/flex.py``): token positions 0..T-1 only;
        the bucket of each i - j in -(T-1)..T-1 is looked up in a (2T - 1,) tensor."""
        if not ctx.cacheable("token"):
            return None
        T = ctx.T
        key = ("t5-buckets-by-rel", self.buckets, self.max_distance)
        by_rel = ctx.memoize(
            key,
            "token",
            lambda: t5_buckets(torch.arange(1 - T, T, device=ctx.device), ctx.causal, self.buckets, self.max_distance),
        )
        table = self.table.weight  # (buckets, H)

        def t5(score, b, h, q_idx, kv_idx):
            return score + table[by_rel[q_idx - kv_idx + T - 1], h]

        return t5


class Kerple(nn.Module):
    """KERPLE (Chi et al. 2022). log: b = -r1_h log(1 + r2_h |i - j|); power: b = -a_h |i - j|^p_h.
    Per-head parameters init U(0, 2) / U(0, 1) (log) and U(0, 1) / U(0, 2) (power, a / p).

    They must stay positive (p <= 2 too): as the reference does (chijames/KERPLE,
    megatron/mpu/layers.py, ParallelKerpleLog.forward / ParallelKerplePower.forward), their
    values are projected onto [0.01, ...] in place before each use, outside autograd. The kernel
    then reads the parameters themselves, so the gradient at the floor is the true one (a clamp
    inside the graph would zero it and pin a parameter that drifted below the floor there)."""

    eps = 0.01  # the reference's floor

    @classmethod
    def build(cls, cfg: BuildConfig) -> "Kerple":
        return cls(cfg.n_heads, kind=cfg.params["kind"])

    def __init__(self, n_heads: int, kind: str = "log"):
        super().__init__()
        self.kind = kind
        if kind == "log":
            self.r1 = nn.Parameter(torch.rand(n_heads) * 2)
            self.r2 = nn.Parameter(torch.rand(n_heads))
        else:
            self.a = nn.Parameter(torch.rand(n_heads))
            self.p = nn.Parameter(torch.rand(n_heads) * 2)

    @torch.no_grad()
    def project_(self) -> None:
        """Clamp the parameter values into their domain (after an optimiser step, before use).
        On ``.data``, as the reference does: no autograd version bump, so a graph that already
        holds the values (two forwards before one backward) stays valid."""
        # plain(): under vmap (batched seeds, stacked.py) the parameters are BatchedTensors, whose
        # .data is refused; the stacked tensor they wrap is clamped instead, every seed's at once
        if self.kind == "log":
            plain(self.r1).data.clamp_(min=self.eps)
            plain(self.r2).data.clamp_(min=self.eps)
        else:
            plain(self.a).data.clamp_(min=self.eps)
            plain(self.p).data.clamp_(self.eps, 2.0)

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        self.project_()
        dist = ctx.absrel("token").unsqueeze(-3)  # (1|B, 1, T, T)
        if self.kind == "log":
            bias = -self.r1.view(-1, 1, 1) * torch.log1p(self.r2.view(-1, 1, 1) * dist)
        else:
            bias = -self.a.view(-1, 1, 1) * dist.pow(self.p.view(-1, 1, 1))
        return bias if bias.dim() == 4 else bias.unsqueeze(0)

    def score_mod(self, ctx):
        """The bias as a FlexAttention score_mod (``model/flex.py``): token positions 0..T-1 only."""
        if not ctx.cacheable("token"):
            return None
        self.project_()
        if self.kind == "log":
            r1, r2 = self.r1, self.r2

            def kerple_log(score, b, h, q_idx, kv_idx):
                return score - r1[h] * torch.log1p(r2[h] * (q_idx - kv_idx).abs())

            return kerple_log
        a, p = self.a, self.p

        def kerple_power(score, b, h, q_idx, kv_idx):
            return score - a[h] * (q_idx - kv_idx).abs().to(a.dtype).pow(p[h])

        return kerple_power


class FIRE(nn.Module):
    """FIRE (Li et al. 2023): b(i, j) = f(psi(i - j) / (psi(max(L', i)) + eps)),
    psi(x) = log(|c x| + 1), f an MLP 1 -> width -> H (ReLU), c learned (init 0.1).

    The threshold is L' = |m| L: a learned multiplier m (init 1) on the fixed L (default 512),
    as the paper's listing does (``threshold = abs(L_multiplier * init_L)``, copied e.g. in
    mcleish7/arithmetic, cramming/architectures/embeddings.py, FIRE.forward). Learned raw, L
    moves by at most about the learning rate per Adam step (2 units in 2,000 steps at lr 1e-3,
    so it never reached the training lengths); through m it moves L times faster. Queries past
    L' (i > L') get the progressive interpolation psi(i - j) / psi(i); eps = 1e-6 (the listing's)
    keeps the normaliser > 0 when L' and i are 0.
    """

    @classmethod
    def build(cls, cfg: BuildConfig) -> "FIRE":
        p = cfg.params
        fire = cls(cfg.n_heads, width=p["width"], c=p["c"], L=p["L"])
        if cfg.revision < 2:
            fire.eps = 0.0  # revision 1 had no eps in the normaliser
        return fire

    def __init__(self, n_heads: int, width: int = 32, c: float = 0.1, L: float = 512.0, eps: float = 1e-6):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, n_heads))
        self.c = nn.Parameter(torch.tensor(float(c)))
        self.L_fixed, self.eps = float(L), eps
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))

    @property
    def threshold(self) -> torch.Tensor:
        """The effective threshold L' = |m| L (a 0-dim tensor in the graph)."""
        return (self.L_multiplier * self.L_fixed).abs()

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # runs saved before the multiplier (pe revision 1) learned L itself: the same threshold is m = L / L_fixed
        old = prefix + "L"
        if old in state_dict and prefix + "L_multiplier" not in state_dict:
            state_dict[prefix + "L_multiplier"] = state_dict.pop(old) / self.L_fixed
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        c, L = self.c.abs(), self.threshold
        T = ctx.T
        # The shortcut reads L' on the host: free on CPU, a sync per layer and step on a GPU, where
        # the general form (T^2 MLP rows, no read) runs instead. plain(): under vmap (batched
        # seeds) L' is one per seed; the shortcut then needs it for all
        if ctx.cacheable("token") and c.device.type == "cpu" and T - 1 <= float(plain(L.detach()).min()):
            # every query i <= L': psi(max(L', i)) = psi(L'), so b depends on |i - j| alone: run the
            # MLP on the T distances and look the (T, T) map up (same function, T instead of T^2 rows)
            d = torch.arange(T, device=c.device, dtype=c.dtype)
            vals = self.mlp((torch.log1p(c * d) / (torch.log1p(c * L) + self.eps)).unsqueeze(-1))  # (T, H)
            idx = ctx.memoize(("fire-dist",), "token", lambda: ctx.rel("token").abs())  # (T, T) long
            return vals.t()[:, idx].unsqueeze(0)  # (1, H, T, T)
        dist = ctx.absrel("token")  # (T, T) or (B, T, T)
        qpos = ctx.pos("token").to(dist.dtype).unsqueeze(-1)  # (T, 1) or (B, T, 1)
        num = torch.log1p(c * dist)
        den = torch.log1p(c * torch.maximum(L, qpos)) + self.eps  # (.., T, 1)
        bias = self.mlp((num / den).unsqueeze(-1))  # (.., T, T, H)
        # (.., T, T, H) -> (1|B, H, T, T), contiguous for the attention kernels
        return (bias.movedim(-1, -3) if bias.dim() == 4 else bias.permute(2, 0, 1).unsqueeze(0)).contiguous()

    def score_mod(self, ctx):
        """The bias as a FlexAttention score_mod (``model/flex.py``): token positions 0..T-1 only.
        The general form (no shortcut, so no host read of L'), the MLP written out per element:
        f(x)_h = b2_h + sum_k W2_hk relu(W1_k x + b1_k), a sum over ``width`` terms."""
        if not ctx.cacheable("token"):
            return None
        c, L, eps = self.c.abs(), self.threshold, self.eps
        first, second = cast(nn.Linear, self.mlp[0]), cast(nn.Linear, self.mlp[2])
        w1, b1 = first.weight[:, 0], first.bias  # (width,)
        w2, b2 = second.weight, second.bias  # (H, width), (H,)
        width = w1.shape[0]

        def fire(score, b, h, q_idx, kv_idx):
            x = torch.log1p(c * (q_idx - kv_idx).abs()) / (torch.log1p(c * torch.maximum(L, q_idx.to(L.dtype))) + eps)
            out = b2[h]
            for k in range(width):
                out = out + w2[h, k] * torch.relu(w1[k] * x + b1[k])
            return score + out

        return fire


class Relative(nn.Module):
    """Shaw et al. 2018 relative keys: logit_ij += q_i . e[i - j] / sqrt(d_h), one learned
    d_h-vector per distance, shared by the heads of a layer. ``rows`` = max_len distances;
    ``capped``: distances past the table use its last row (CoPE Sec. 5.5), otherwise an
    error. Encoder mode: 2 rows - 1 signed distances."""

    needs_queries = True  # the bias is q_i . e[i - j]
    capped = False

    @classmethod
    def build(cls, cfg: BuildConfig) -> "Relative":
        return cls(cfg.head_dim, rows=cfg.max_len, capped=cls.capped, causal=cfg.causal)

    def __init__(self, head_dim: int, rows: int, capped: bool = False, causal: bool = True):
        super().__init__()
        self.rows, self.capped, self.causal = rows, capped, causal
        self.table = nn.Parameter(torch.randn(rows if causal else 2 * rows - 1, head_dim) * 0.02)
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        assert q is not None, "relative bias needs the queries"
        if self.causal and ctx.cacheable("token"):
            return self._skewed(ctx, q)
        key = ("relative-idx", "token", self.rows, self.capped)
        idx, used = ctx.memoize(key, "token", lambda: self._index(ctx))
        logits = (q * self.scale) @ self.table[:used].t()  # (B, H, T, used)
        B, H, T, _ = logits.shape
        if idx.dim() == 2:
            idx = idx.expand(B, H, T, T)
        else:
            idx = idx.unsqueeze(1).expand(B, H, T, T)
        return torch.gather(logits, -1, idx)  # (B, H, T, T)

    def _skewed(self, ctx, q: torch.Tensor) -> torch.Tensor:
        """Positions 0..T-1: the 'skewing' trick (Huang et al. 2018, Music Transformer): logits
        against the rows for distances T-1..0, shifted so that column j holds distance i - j."""
        T = q.shape[-2]
        if T > self.rows and not self.capped:
            raise ValueError(
                f"relative: distance {T - 1} past the table of {self.rows} rows (max_len); use relative-capped or "
                "raise max_len"
            )
        # row 0 is a zero vector (the skew's padding column); rows 1.. are distances T-1 .. 0
        rows = ctx.memoize(
            ("relative-rows", self.rows),
            "token",
            lambda: torch.cat(
                [
                    torch.zeros(1, dtype=torch.long, device=q.device),
                    (T - 1 - torch.arange(T, device=q.device)).clamp(max=self.rows - 1) + 1,
                ]
            ),
        )
        table = F.pad(self.table, (0, 0, 1, 0))  # (rows + 1, d_h), row 0 = 0
        rel = (q * self.scale) @ table.index_select(
            0, rows
        ).t()  # (B, H, T, T + 1): column 0 = 0, m + 1 = distance T-1-m
        B, H = rel.shape[:2]
        return rel.view(B, H, T + 1, T)[:, :, 1:]  # (B, H, T, T): [i, j] = distance i - j (j <= i)

    def _index(self, ctx) -> tuple[torch.Tensor, int]:
        rel = ctx.rel("token")
        if self.causal:
            idx = rel.clamp(min=0)
            hi = int(idx.max())
            if hi >= self.rows:
                if not self.capped:
                    raise ValueError(
                        f"relative: distance {hi} past the table of {self.rows} rows (max_len); "
                        "use relative-capped or raise max_len"
                    )
                idx = idx.clamp(max=self.rows - 1)
            return idx, int(idx.max()) + 1
        far = int(rel.abs().max())
        if far >= self.rows:
            if not self.capped:
                raise ValueError(
                    f"relative: distance {far} past the table of {self.rows} rows (max_len); use relative-capped or "
                    "raise max_len"
                )
            rel = rel.clamp(-(self.rows - 1), self.rows - 1)
        return rel + self.rows - 1, 2 * self.rows - 1


class RelativeCapped(Relative):
    """Shaw et al. 2018 relative keys whose distances past the table (max_len) use its last row,
    e[min(i - j, max_len - 1)] (Golovneva et al. 2024, CoPE, Sec. 5.5); see :class:`Relative`."""

    capped = True
