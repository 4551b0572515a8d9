"""synthlab: a synthetic-task laboratory for positional encodings in small Transformers.

The public API (what notebooks and tests use; the CLI is a thin layer over it):

- ``synthlab.build_model(pe="rope", vocab_size=..., d_model=..., ...)`` -> ``torch.nn.Module``
- ``synthlab.train(task, pe, preset="quick", **overrides)`` -> result record (dict)
- ``synthlab.train_seeds(task, pe, seeds=[0, 1, 2])`` -> one record per seed, trained as one
  stacked model (batched seeds; :mod:`synthlab.run.seedbatch`)
- ``synthlab.sweep(task_or_file, pe=..., preset=...)`` -> list of result records
- ``synthlab.grid(results, kind="ood")`` -> tidy table + heatmaps
- ``synthlab.results(path_or_dir)`` -> a flat DataFrame, one row per run x split (docs/results.md)
- ``synthlab.judge_claims(results)`` -> the sweep file's claims judged on these results (the
  claims table's rows; docs/results.md "How a claim is decided")
- ``synthlab.compare_seeds(better, worse)`` -> that test on two arms given as {seed: goodness}
- ``synthlab.generators.get_task(name, **params)`` for the data alone (numpy only; importing
  it imports none of the modules above)

Heavy modules (torch, lightning, optuna, seaborn) are imported on first use, so
``import synthlab`` and ``synthlab tasks`` stay fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from synthlab import _checkout

_checkout.add_finder()  # a checkout imported without an install: its generators/ and sweeps/

try:  # written by setuptools-scm when synthlab is built or installed (pyproject.toml)
    from synthlab._version import __version__  # type: ignore[import-not-found, unused-ignore]  # written at install
except ImportError:  # a source tree never installed (PYTHONPATH=checkout): no version file
    __version__ = "0+unknown"

# public name -> (module, attribute). Modules and layer folders are named apart from the
# functions (training / sweeping; analysis / study) so that importing one never shadows a function.
_LAZY = {
    "build_model": ("synthlab.model", "build_model"),
    "parse_pe": ("synthlab.model", "parse_pe"),
    "train": ("synthlab.run.training", "train"),
    "train_seeds": ("synthlab.run.seedbatch", "train_seeds"),
    "sweep": ("synthlab.study.sweeping", "sweep"),
    "grid": ("synthlab.analysis.grids", "grid"),
    "tidy": ("synthlab.analysis.grids", "tidy"),
    "results": ("synthlab.analysis.frames", "results"),
    "judge_claims": ("synthlab.analysis.claims", "judge_claims"),
    "compare_seeds": ("synthlab.analysis.inference", "compare"),
    "load_run": ("synthlab.run.runs", "load_run"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'synthlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["__version__", *_LAZY]
