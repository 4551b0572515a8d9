"""synthlab: a synthetic-task laboratory for positional encodings in small Transformers.

The public API is what notebooks and tests use (``train``, ``train_seeds``, ``sweep``,
``grid``, ``results``, ``judge_claims``, ``compare_seeds``, ``build_model``, ``load_run``,
``plot``, ``generators``); the CLI is a thin layer over it. Heavy modules (torch, lightning,
optuna, seaborn) are imported on first use, so ``import synthlab`` and ``synthlab tasks`` stay
fast. Each name with its signature and module: docs/api/index.md.
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
