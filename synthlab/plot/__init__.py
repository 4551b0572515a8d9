"""Pictures of how a trained run handles positions; each returns a matplotlib Figure.

``attention``, ``positions`` (CoPE gates and positions, BiPE ids), ``bias`` (an encoding's
signal vs distance) and ``glitches`` (flip-flop read errors vs distance), each with a data
function beside it; built without pyplot, any backend. ``synthlab plot KIND ...`` draws them
from the command line. Arguments, conventions and the modules behind them:
docs/inspection.md, "synthlab.plot: the pictures, their arguments, their modules".
"""

from __future__ import annotations

from synthlab.plot.distance import BiasCurves, Glitches, bias, bias_curves, glitch_rates, glitches
from synthlab.plot.maps import (
    AttentionMaps,
    BipeIds,
    CopePositions,
    attention,
    attention_maps,
    bipe_ids,
    cope_positions,
    positions,
)
from synthlab.plot.runs import capture_qk

#: the pictures, in the order `synthlab plot` lists them
KINDS = ("attention", "positions", "bias", "glitches")

__all__ = [
    "KINDS",
    "attention",
    "positions",
    "bias",
    "glitches",
    "attention_maps",
    "cope_positions",
    "bipe_ids",
    "bias_curves",
    "glitch_rates",
    "capture_qk",
    "AttentionMaps",
    "CopePositions",
    "BipeIds",
    "BiasCurves",
    "Glitches",
]
