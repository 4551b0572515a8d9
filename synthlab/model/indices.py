"""Indices: which numbers the positions are (axis 1 of docs/architecture.md).

- token index 0..T-1 (default),
- BiPE segment index / index within the segment (:func:`bipe_segments`),
- randomized positions (Ruoss et al. 2023) and PoSE skip-wise positions (Zhu et al. 2024),
  parsed from ``--positions`` strings by :func:`parse_positions`.

Rope scaling (linear / NTK / YaRN) lives with the rotary encoder (``encoders/rotary.py``)
because it changes frequencies, not only indices; a scheme only says whether it pairs with
one static factor for the whole run (:meth:`PositionScheme.rope_factor`: PoSE, L_t / L_c).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch


def bipe_segments(
    tokens: torch.Tensor, separator_ids: Sequence[int] = (), segment_start_ids: Sequence[int] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """BiPE (He et al. 2024) segment ids and intra-segment ids of a (B, T) token batch.

    A separator ENDS its segment (``a b SEP c`` -> segment 0 0 0 1, intra 0 1 2 0); a
    segment-start token BEGINS a new one (flip-flop's ``w``). Causal: ids at t depend on
    tokens <= t only.
    """
    # zeros_like, not zeros(B, T): under vmap (batched seeds) the in-place |= below writes batched values
    new = torch.zeros_like(tokens, dtype=torch.bool)
    if len(separator_ids):
        sep = _isin(tokens, separator_ids)
        new[:, 1:] |= sep[:, :-1]
    if len(segment_start_ids):
        start = _isin(tokens, segment_start_ids)
        new[:, 1:] |= start[:, 1:]
    return _ids_from_boundaries(new)


def _isin(tokens: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """torch.isin(tokens, ids) by comparison: the same booleans, and vmap (batched seeds) has a
    batching rule for it (isin has none: a per-slice loop)."""
    return (tokens.unsqueeze(-1) == torch.as_tensor(list(ids), device=tokens.device)).any(-1)


def intra_from_segments(segments: torch.Tensor) -> torch.Tensor:
    """Index within the segment for explicit (B, T) segment ids (a new segment where the id changes)."""
    new = torch.zeros_like(segments, dtype=torch.bool)
    new[:, 1:] = segments[:, 1:] != segments[:, :-1]
    return _ids_from_boundaries(new)[1]


def _ids_from_boundaries(new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """new[b, t] = a segment starts at t (t > 0) -> (segment ids, intra ids), both (B, T)."""
    B, T = new.shape
    seg = new.long().cumsum(-1)  # (B, T)
    idx = torch.arange(T, device=new.device).expand(B, T)
    start = torch.where(new, idx, torch.zeros_like(idx)).cummax(-1).values  # (B, T) start of own segment
    return seg, idx - start


class PositionScheme(ABC):
    """A training-time index scheme: ``sample_rows(B, T, generator) -> LongTensor (B, T)``.

    ``per_example``: the training batch gets one row of positions per example (B, T) (PoSE),
    or one row (T,) shared by the batch (randomized); :class:`synthlab.run.data.PositionSampler`
    reads it.
    """

    name: str
    params: dict[str, Any]
    at_eval: bool  # whether evaluation also samples (randomized) or uses plain 0..T-1 (pose)
    per_example: ClassVar[bool] = False

    @abstractmethod
    def sample_rows(self, B: int, T: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(B, T): B independent draws of sorted, distinct training indices for length T."""

    def sample(self, T: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(T,): one draw (the first row of :meth:`sample_rows`)."""
        return self.sample_rows(1, T, generator)[0]

    def rope_factor(self, train_len: int) -> float | None:
        """A static rope-scaling factor for the whole run (training and evaluation), or None:
        rope scaling then stays eval-time only, with s = L_eval / L_train."""
        return None

    @property
    @abstractmethod
    def max_position(self) -> int:
        """Largest index the scheme can produce + 1."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


@dataclass(repr=False)
class Randomized(PositionScheme):
    """Ruoss et al. 2023: a sorted sample of T distinct positions from [0, L_max).

    Resampled every batch, shared by the batch, also at evaluation (as the reference does);
    L_max must cover the longest test sequence. PoSE's RandPos arm draws one per example.
    """

    max: int = 2048
    at_eval: bool = True
    params: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.max, int) or self.max < 1:
            raise ValueError(f"--positions randomized:max={self.max!r} must be a positive integer")
        self.params = {"max": self.max}

    @property
    def name(self) -> str:  # type: ignore[override]  # read-only here; PositionScheme declares the attribute
        return f"randomized:max={self.max}"

    @property
    def max_position(self) -> int:
        return self.max

    def sample_rows(self, B: int, T: int, generator: torch.Generator | None = None) -> torch.Tensor:
        if T > self.max:
            raise ValueError(f"randomized positions: sequence length {T} exceeds max={self.max}; raise randomized:max")
        rows = [torch.randperm(self.max, generator=generator)[:T] for _ in range(B)]  # B x (T,)
        return torch.stack(rows).sort(-1).values  # (B, T)


@dataclass(repr=False)
class PoSE(PositionScheme):
    """PoSE (Zhu et al. 2024, Sec. 3.2): skip-wise positions for a window L_c = T, target L_t.

    The window is split into N chunks of random positive lengths l_c (sum T); chunk c keeps
    its natural offset st_c = sum_{c'<c} l_c' plus a skipping bias u_c with
    0 = u_0 <= u_1 <= ... <= u_{N-1} <= L_t - L_c, each u_c ~ U{u_{c-1}, ..., L_t - L_c}:
    PoSE(c) = {u_c + st_c, ..., u_c + st_c + l_c - 1}. Content stays contiguous; evaluation
    uses plain positions (training only).

    Chunk lengths come from N - 1 distinct uniform cut points in 1..T-1, so at N = 2 the first
    chunk is l_0 ~ U{1..T-1}, as the paper's Fig. 6 code draws it (App. B, ``l0 =
    random.randint(1, Lc-1)``); the released script (src/train_pose.py,
    ``train_preprocess_function_pose``, two chunks only) draws ``rt1 = random.randint(1,
    (len_chunk+1)//2)``, a first chunk of at most half the window. Both set u_0 = 0.

    Lengths and skips are drawn anew for every training example (Sec. 3.2; the reference,
    dwzhu-pku/PoSE src/train_pose.py ``train_preprocess_function_pose``, draws them inside its
    loop over examples), so the batch gets (B, T) positions.

    N >= T (the paper's N = L_c arm, App. B, Fig. 6 and Table 5 "2048 chunks") is RandPos:
    a sorted sample of T distinct positions from [0, L_t) per example (Ruoss et al. 2023; the
    reference's ``train_preprocess_function_randomized``). The sequential law above would
    saturate there instead (each u_c halves the room left on average: ~log2(L_t - L_c) real
    jumps, then a contiguous tail).

    With rope scaling, PoSE interpolates at one static factor alpha = L_t / L_c, in training
    and at evaluation (Sec. 3.2 "we perform position interpolation", linear by default,
    Sec. 4.1; reference: ``train()`` of src/train_pose.py sets ``config.rope_scaling =
    {"type", "factor"}`` and src/eval_passkey.py evaluates with the same factor): see
    :meth:`rope_factor`.
    """

    chunks: int = 2
    target: int = 1024
    at_eval: bool = False
    params: dict[str, Any] = field(init=False)
    per_example: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.chunks, int) or self.chunks < 1:
            raise ValueError(f"--positions pose:chunks={self.chunks!r} must be a positive integer")
        if not isinstance(self.target, int) or self.target < 1:
            raise ValueError(f"--positions pose:target={self.target!r} must be a positive integer")
        self.params = {"chunks": self.chunks, "target": self.target}

    @property
    def name(self) -> str:  # type: ignore[override]  # read-only here; PositionScheme declares the attribute
        return f"pose:chunks={self.chunks},target={self.target}"

    @property
    def max_position(self) -> int:
        return self.target

    def rope_factor(self, train_len: int) -> float:
        """alpha = L_t / L_c (PoSE Sec. 3.1: positions m -> m / alpha for linear interpolation)."""
        return self.target / train_len

    def sample_rows(self, B: int, T: int, generator: torch.Generator | None = None) -> torch.Tensor:
        if T > self.target:
            raise ValueError(
                f"pose: training window {T} exceeds target={self.target}; target must be >= the training length"
            )
        if self.chunks >= T:  # N = L_c: RandPos over the target range, per example
            return Randomized(self.target).sample_rows(B, T, generator)
        n, room = self.chunks, self.target - T
        idx = torch.arange(T)  # (T,) natural offsets st_c + (index within the chunk)
        if n == 1:  # plain training
            return idx.expand(B, T).clone()
        # chunk lengths: N - 1 distinct cut points in 1..T-1 per example (chunk starts)
        cuts = torch.stack([torch.randperm(T - 1, generator=generator)[: n - 1] for _ in range(B)]) + 1  # (B, N-1)
        cuts = cuts.sort(-1).values
        # skips: u_0 = 0, u_c = u_{c-1} + U{0 .. room - u_{c-1}}, all examples at once
        u = torch.zeros(B, n, dtype=torch.long)  # (B, N)
        for c in range(1, n):
            left = room - u[:, c - 1] + 1  # (B,) choices
            draw = (torch.rand(B, generator=generator, dtype=torch.float64) * left).long()  # (B,) uniform 0..left-1
            u[:, c] = u[:, c - 1] + draw
        chunk = torch.searchsorted(cuts, idx.expand(B, T).contiguous(), right=True)  # (B, T) chunk of each token
        return idx + u.gather(1, chunk)  # (B, T)


def parse_positions(spec: "str | PositionScheme | None", *, pose_chunks: int | None = None) -> PositionScheme | None:
    """``'pose:chunks=2,target=1024'`` / ``'randomized:max=2048'`` / None -> scheme (or None).
    ``pose_chunks`` (a sweep's pose_chunks axis, a run config's field): PoSE's chunk number,
    over the scheme's own; no scheme is PoSE's defaults, another scheme is refused."""
    if pose_chunks is not None:
        scheme = parse_positions(spec) or PoSE()
        if not isinstance(scheme, PoSE):
            raise ValueError(f"pose_chunks needs positions 'pose:...', got {scheme.name!r}")
        return PoSE(chunks=pose_chunks, target=scheme.target)
    if spec is None or isinstance(spec, PositionScheme):
        return spec
    if not isinstance(spec, str):
        raise ValueError(
            f"--positions must be a string like 'randomized:max=2048' or 'pose:chunks=2,target=1024', got {spec!r}"
        )
    text = spec.strip().lower()
    if text in ("", "none", "token"):
        return None
    name, _, rest = text.partition(":")
    kinds = {"randomized": (Randomized, {"max"}), "pose": (PoSE, {"chunks", "target"})}
    if name not in kinds:
        raise ValueError(f"unknown --positions scheme {name!r}; allowed: randomized[:max=N], pose[:chunks=N,target=L]")
    cls, allowed = kinds[name]
    kw: dict[str, int] = {}
    for kv in filter(None, (x.strip() for x in rest.split(","))):
        k, eq, v = kv.partition("=")
        k = k.strip()
        if not eq or k not in allowed:
            raise ValueError(f"bad --positions parameter {kv!r} for {name}; allowed: {', '.join(sorted(allowed))}")
        try:
            kw[k] = int(v)
        except ValueError:
            raise ValueError(f"--positions {name}:{k}={v!r} must be an integer") from None
    return cls(**kw)
