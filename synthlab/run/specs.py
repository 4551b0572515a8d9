"""The encoding and the positions scheme a run config builds, its axes applied.

A config names them by ``pe`` and ``positions``; the sweep axes ``dape_k`` (DAPE's kernel) and
``pose_chunks`` (PoSE's chunk number) are fields of their own (``RunConfig.dape_k``,
``RunConfig.pose_chunks``), applied here, where the model's spec and the training scheme are
built, and kept in the run's record as fields, which the tables read.
"""

from __future__ import annotations

from typing import Any

from synthlab import model as m
from synthlab.core.config import RunConfig
from synthlab.model import PESpec


def encoding(cfg: RunConfig, base: PESpec | None = None) -> PESpec:
    """``cfg.pe`` (or its parsed ``base``) with the ``dape_k`` axis's kernel; ValueError for
    a kernel on an encoding without DAPE, or on one whose spec fixes another."""
    spec = m.parse_pe(cfg.pe if base is None else base)
    if cfg.dape_k is None:
        return spec
    if not spec.has("dape"):
        raise ValueError(f"dape_k={cfg.dape_k} needs an encoding with DAPE, got pe={spec.name!r}")
    return m.parse_pe(spec, dape_k=cfg.dape_k)


def position_scheme(cfg: RunConfig) -> Any:
    """The training-time scheme (a :class:`synthlab.model.PositionScheme`, or None):
    ``cfg.positions`` with the ``pose_chunks`` axis's chunk number."""
    return m.parse_positions(cfg.positions, pose_chunks=cfg.pose_chunks)


def record_fields(cfg: RunConfig, spec: PESpec) -> dict[str, Any]:
    """A record's ``positions`` (the scheme as built) and the axes as fields: the encoding's
    DAPE kernel, PoSE's chunk number (None where the run has none)."""
    scheme = position_scheme(cfg)
    return {
        "positions": scheme.name if scheme is not None else None,
        "dape_k": spec.params["dape"]["k"] if spec.has("dape") else None,
        "pose_chunks": scheme.chunks if isinstance(scheme, m.PoSE) else None,
    }
