"""Several models of one config trained as one stacked model (batched seeds).

The S models' parameters are stacked along a new leading dim
(``torch.func.stack_module_state``) and one forward runs all S through ``torch.func.vmap``
over ``functional_call`` of one template; slice s equals model s on its own within float
rounding. Needs one config, one batch shape (S, B, T) and dropout 0 in training.
Usage and constraints: docs/architecture.md, "Batched seeds: one stacked model".
"""

from __future__ import annotations

import copy
from typing import Iterator, Sequence

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap


def _dropout_modules(model: nn.Module) -> list[str]:
    return [
        name or type(model).__name__
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0
    ]


class StackedModels:
    """S models of one config as one: ``base`` (a copy of the first model: the template for
    ``functional_call``, and its buffers), ``params`` (name -> stacked leaf (S, ...), requires
    grad) and ``buffers`` (name -> the base's buffers, unbatched). See the module docstring."""

    def __init__(self, base: nn.Module, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor]):
        self.base, self.params, self.buffers = base, params, buffers
        self.size = next(iter(params.values())).shape[0]

    def parameters(self) -> Iterator[torch.Tensor]:
        """The stacked parameters, for an optimiser."""
        return iter(self.params.values())

    def train(self, mode: bool = True) -> "StackedModels":
        self.base.train(mode)
        return self

    def eval(self) -> "StackedModels":
        return self.train(False)

    def _one(self, params: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        return functional_call(self.base, (params, self.buffers), (ids,))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (S, B, T) -> logits (S, B, T, V): slice s is model s on ids[s]."""
        if ids.dim() != 3 or ids.shape[0] != self.size:
            raise ValueError(f"ids must have shape (S={self.size}, B, T), got {tuple(ids.shape)}")
        if self.base.training and (drop := _dropout_modules(self.base)):
            raise ValueError(
                f"stacked seeds cannot train with dropout > 0 ({', '.join(drop[:3])}"
                f"{' ...' if len(drop) > 3 else ''}): vmap draws the masks differently from "
                "separate runs; use dropout 0, or eval() for evaluation"
            )
        return vmap(self._one)(self.params, ids)

    __call__ = forward

    def unstack(self) -> list[nn.Module]:
        """S separate models (copies of the base) holding the stacked parameters' current values."""
        models = []
        for s in range(self.size):
            m = copy.deepcopy(self.base)
            with torch.no_grad():
                for name, p in m.named_parameters():  # tied weights once, as stacked
                    p.copy_(self.params[name][s])
            models.append(m)
        return models


def stack_models(models: Sequence[nn.Module]) -> StackedModels:
    """Stack S >= 1 models of one config (see the module docstring); the models are not changed
    (the stacked parameters are new leaves, copies of theirs). ValueError where the models differ
    in class, parameter names or shapes, or buffers."""
    models = list(models)
    if not models:
        raise ValueError("stack_models needs at least one model")
    first = models[0]
    names = {n: p.shape for n, p in first.named_parameters()}
    bufs = dict(first.named_buffers())
    for i, m in enumerate(models[1:], 1):
        if type(m) is not type(first) or {n: p.shape for n, p in m.named_parameters()} != names:
            raise ValueError(f"stack_models: model {i} differs from model 0 in class or parameters (not one config)")
        other = dict(m.named_buffers())
        if other.keys() != bufs.keys() or any(not torch.equal(other[n], b) for n, b in bufs.items()):
            raise ValueError(f"stack_models: model {i} has other buffers than model 0 (not one config)")
    params, _ = stack_module_state(models)  # detached copies, requires_grad as the originals
    base = copy.deepcopy(first)
    base.zero_grad(set_to_none=True)
    return StackedModels(base, params, dict(base.named_buffers()))
