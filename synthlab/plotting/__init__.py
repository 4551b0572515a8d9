"""The implementation of :mod:`synthlab.plot` (use that module: it is the public API).

- ``runs``: runs, samples, forward passes and the q / k capture (:func:`runs.capture_qk`),
- ``maps``: attention maps, CoPE gates / positions and BiPE ids of one sample,
- ``distance``: an encoding's position signal and flip-flop read errors against distance,
- ``draw``: figures without pyplot, token axes, scored-row marks.
"""
