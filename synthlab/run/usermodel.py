"""A user's own model in place of synthlab's Transformer: ``synthlab.train(..., model=factory)``.

``factory(cfg, vocab_size, max_len) -> torch.nn.Module`` mapping ids (B, T) to logits
(B, T, vocab_size); the run is trained, evaluated and recorded like any other, and reopening it
needs the same factory (``load_run(dir, model=factory)``: :func:`saved_model`). The contract:
docs/interfaces.md, "Settings and hooks for observers".
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

Factory = Callable[[Any, int, int], torch.nn.Module]


def factory_name(factory: Any) -> str:
    """``<module>.<qualname>`` of a function or class (a callable object: of its class)."""
    named = factory if hasattr(factory, "__qualname__") else type(factory)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"


def check_factory(factory: Any) -> None:
    """ValueError unless ``factory`` can be called."""
    if not callable(factory):
        raise ValueError(
            f"model must be a factory model(cfg, vocab_size, max_len) -> torch.nn.Module, got {type(factory).__name__}"
        )


def build(factory: Factory, cfg: Any, vocab_size: int, max_len: int) -> torch.nn.Module:
    """``factory``'s module for a run, checked against what the run will ask of it
    (ValueError, before anything is written)."""
    module = factory(cfg, vocab_size, max_len)
    name = factory_name(factory)
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"model factory {name} returned {type(module).__name__}, not a torch.nn.Module")
    if cfg.positions is not None and not _takes(module, "positions"):
        raise ValueError(
            f"--positions {cfg.positions}: the module of model factory {name} takes no positions= argument in forward"
        )
    if cfg.rope_scaling is not None and not hasattr(module, "set_rope_scaling"):
        raise ValueError(
            f"rope_scaling={cfg.rope_scaling!r}: the module of model factory {name} has no set_rope_scaling method"
        )
    if not any(p.requires_grad for p in module.parameters()):
        raise ValueError(f"model factory {name} returned a module without trainable parameters")
    return module


def _takes(module: torch.nn.Module, name: str) -> bool:
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return True  # no signature to read: let the call tell
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def saved_model(config: dict[str, Any], task: Any, factory: Factory | None, where: str = "") -> torch.nn.Module | None:
    """For ``load_run``: the module of a run saved with a model factory, built by ``factory``
    (its weights are not loaded here), or None for a run of synthlab's Transformer. ValueError
    when the run needs a factory and none is given, or a factory is given for a Transformer run."""
    from synthlab.core.config import RunConfig

    used = config.get("model_factory")
    if used is None:
        if factory is not None:
            raise ValueError(f"{where}: this run trained synthlab's Transformer; load it without model=")
        return None
    if factory is None:
        raise ValueError(
            f"{where}: this run trained the model of factory {used}: load it with load_run(dir, model=<that factory>)"
        )
    check_factory(factory)
    return build(factory, RunConfig.from_dict(config), len(task.vocab) + 1, int(config["max_len"]))
