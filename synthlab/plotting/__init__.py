"""The implementation of :mod:`synthlab.plot` (use that module: it is the public API).

- ``runs``: runs, samples, rope scaling past the training length, the q / k of each layer
  (:func:`runs.capture_qk`, from the model's hook points: docs/inspection.md),
- ``maps``: attention maps, CoPE gates / positions and BiPE ids of one sample,
- ``distance``: an encoding's position signal and flip-flop read errors against distance,
- ``draw``: figures without pyplot, token axes, scored-row marks.
"""
