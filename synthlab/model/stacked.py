"""Several models of one config trained as one stacked model (batched seeds).

The seeds of a grid cell are S models of the same config that differ only in their random
initialisation (and their data order). Instead of S separate runs, their parameters are stacked
along a new leading dim (``torch.func.stack_module_state``) and one forward runs all S through
``torch.func.vmap`` over ``functional_call`` of one template model::

    stacked = stack_models(models)                 # S models, same config
    logits = stacked(ids)                           # ids (S, B, T) -> logits (S, B, T, V)
    loss = sum(F.cross_entropy(logits[s].flatten(0, 1), targets[s].flatten()) for s in range(S))
    loss.backward()                                 # ordinary autograd: stacked.params[name].grad is (S, ...)
    opt = torch.optim.AdamW(stacked.parameters())   # elementwise optimisers act per seed as in S runs
    models = stacked.unstack()                      # S separate models (copies) with the trained weights

Slice s of every output and gradient equals what model s gives on its own (within float
rounding): every encoding supports it, the native CPU kernels included (their autograd Functions
have vmap rules). Buffers are config-determined constants (rotary frequencies, ALiBi slopes),
identical across the seeds, so they are taken unbatched from the first model.

Constraints: the models share one config (same architecture, parameter shapes and buffers);
every seed gets a batch of the same shape (S, B, T) each step; dropout must be 0 in training
mode, since vmap draws its random masks differently from S separate runs (ValueError otherwise;
evaluation mode is fine). A loss summed over seeds gives each seed its own gradient, but an
optimiser step is only per seed where the optimiser is elementwise (SGD, Adam, AdamW) and
nothing couples the seeds (no global gradient-norm clipping over the stacked tensors).
"""

from __future__ import annotations

import copy
from typing import Iterator, Sequence

import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap


def _dropout_modules(model: nn.Module) -> list[str]:
    return [name or type(model).__name__ for name, m in model.named_modules()
            if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0]


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
            raise ValueError(f"stacked seeds cannot train with dropout > 0 ({', '.join(drop[:3])}"
                             f"{' ...' if len(drop) > 3 else ''}): vmap draws the masks differently from "
                             "separate runs; use dropout 0, or eval() for evaluation")
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
