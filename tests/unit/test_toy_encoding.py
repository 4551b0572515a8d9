"""A new encoding in one hop: one row plus one small module, registered from this file
alone, parses, builds, combines with DAPE and trains end to end."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from synthlab.model import COMPONENTS, ENCODINGS, build_model, parse_pe
from synthlab.model.registry import POSITIVE, BuildConfig, Encoding, register, unregister
from synthlab.run.training import train


class LinearDistanceBias(nn.Module):
    """Toy bias b(i, j) = -w |i - j| with one learned scalar w (ALiBi with a single learned slope)."""

    @classmethod
    def build(cls, cfg: BuildConfig) -> "LinearDistanceBias":
        return cls(cfg.n_heads, cfg.params["w0"])

    def __init__(self, n_heads: int, w0: float):
        super().__init__()
        self.n_heads = n_heads
        self.w = nn.Parameter(torch.tensor(float(w0)))

    def forward(self, ctx, q: torch.Tensor | None = None) -> torch.Tensor:
        dist = ctx.absrel("token")  # (T, T) or (B, T, T)
        bias = (-self.w * dist).unsqueeze(-3)  # (1|B, 1, T, T) after the next line
        bias = bias if bias.dim() == 4 else bias.unsqueeze(0)
        return bias.expand(bias.shape[0], self.n_heads, ctx.T, ctx.T)  # (1|B, H, T, T)


TOY = Encoding(
    "toy-linear",
    "bias",
    "b = -w |i - j|, one learned scalar w",
    "test_toy_encoding.py (no paper)",
    build=LinearDistanceBias,
    params={"w0": 0.1},
    checks={"w0": POSITIVE},
)


@pytest.fixture
def toy():
    before = list(COMPONENTS)
    register(TOY)
    yield TOY.name
    unregister(TOY.name)
    assert list(COMPONENTS) == before and TOY.name not in ENCODINGS


def test_toy_parses_checks_and_builds(toy):
    assert toy in ENCODINGS
    assert parse_pe(f"{toy}:w0=0.5").name == f"{toy}:w0=0.5"
    assert parse_pe(f"dape+{toy}").name == f"{toy}+dape"  # a bias sorts before a processor
    with pytest.raises(ValueError, match="positive"):
        parse_pe(f"{toy}:w0=0")
    torch.manual_seed(0)
    m = build_model(pe=f"{toy}+dape:k=3", vocab_size=11, d_model=32, n_layers=2, n_heads=4, max_len=64)
    assert isinstance(m.blocks[1].attn.biases[0], LinearDistanceBias) and m.blocks[1].attn.dape.with_bias
    assert "blocks.0.attn.biases.0.w" in m.state_dict()
    x = torch.randint(0, 11, (2, 16))
    logits, att = m(x, return_attention=True)
    assert logits.shape == (2, 16, 11) and torch.all(att[0].triu(1) == 0)


def test_toy_trains_end_to_end(toy, tmp_path):
    rec = train("flipflop", toy, preset="smoke", out=tmp_path)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["pe"] == toy and rec["pe_params"] == {toy: {"w0": 0.1}}
    acc = rec["metrics"]["test"]["token_acc"]
    assert math.isfinite(acc) and 0.0 <= acc <= 1.0
    assert (tmp_path / rec["run_id"] / "model.safetensors").exists()
