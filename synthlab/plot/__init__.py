"""Pictures of how a trained run handles positions; each returns a matplotlib Figure.

    >>> from synthlab import plot
    >>> fig = plot.attention("runs/<run_id>", 3, split="ood-sparse", layers=[1])  # attention maps
    >>> fig = plot.positions(run, 0)      # CoPE gates g_ij and positions p_ij, or BiPE ids
    >>> fig = plot.bias("alibi")          # an encoding's position signal vs distance
    >>> fig = plot.glitches(run)          # flip-flop: read error vs distance to the last write
    >>> fig.savefig("x.png")              # or leave it as a notebook cell's value

Figures are built without pyplot (no global state, no plt.show; any backend, Agg included).
Each picture has a data function returning the numbers it draws: :func:`attention_maps`,
:func:`cope_positions`, :func:`bipe_ids`, :func:`bias_curves`, :func:`glitch_rates`.
``synthlab plot KIND ...`` draws them from the command line.

``run``: a :func:`synthlab.load_run` result or a run directory. ``sample``: an index into the
run's evaluation samples of ``split`` (samples 0..eval_samples-1 under the run seed, the ones
its metrics were computed on; a split evaluated per length counts its groups in order) or a
``synthlab.generators`` Sample. Layers and heads count from 0. The model sees positions 0..T-1 (a run
trained with randomized positions samples them at evaluation; a picture does not) and, past
the training length, the run's rope scaling as its evaluation applied it.

The modules behind these names (import from ``synthlab.plot`` itself, the public API):

- ``runs``: runs, samples, rope scaling past the training length, the q / k of each layer
  (:func:`runs.capture_qk`, from the model's hook points: docs/inspection.md),
- ``maps``: attention maps, CoPE gates / positions and BiPE ids of one sample,
- ``distance``: an encoding's position signal and flip-flop read errors against distance,
- ``draw``: figures without pyplot, token axes, scored-row marks.
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
    "KINDS", "attention", "positions", "bias", "glitches", "attention_maps", "cope_positions", "bipe_ids",
    "bias_curves", "glitch_rates", "capture_qk", "AttentionMaps", "CopePositions", "BipeIds", "BiasCurves", "Glitches",
]
