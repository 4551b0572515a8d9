"""What the model code needs to run under ``torch.func.vmap`` over stacked seeds (batched
seeds; see ``stacked.py``): tell a vmapped tensor from a plain one, read the values of
all vmapped slices at once for a host-side check, and the vmap rule of the native kernels'
custom ops and autograd Functions.

Under vmap a tensor is a BatchedTensor: ``.item()``, ``int()``, ``.data`` and Python branches on
its values are refused. The few places that need host values (range checks, a fast-path choice,
KERPLE's in-place projection) read them with :func:`plain` for every slice together.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def _functorch_batched() -> tuple[Callable[[torch.Tensor], bool], Callable[[torch.Tensor], torch.Tensor]]:
    """torch's (is a BatchedTensor, unwrap one level): private, since torch.func's only public
    unwrap, ``debug_unwrap``, is for debugging and cannot tell a vmap wrapper from a grad one.
    No upstream request for a public one yet (torch.compile treats ``is_batchedtensor`` as a
    query it can trace: https://github.com/pytorch/pytorch/pull/149541)."""
    try:
        from torch._C._functorch import get_unwrapped, is_batchedtensor
    except ImportError:  # a torch that moved them: no tensor is taken for a vmapped one
        return (lambda t: False), (lambda t: t)
    return is_batchedtensor, get_unwrapped


_IS_BATCHED, _UNWRAPPED = _functorch_batched()


def is_batched(t: Any) -> bool:
    """Whether ``t`` is a tensor being vmapped over (inside a vmapped function)."""
    return isinstance(t, torch.Tensor) and _IS_BATCHED(t)


def plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself, or under vmap the tensor it wraps (every vmapped slice, the vmapped dims
    included): for host-side checks and choices that must hold for all slices at once."""
    while is_batched(t):
        t = _UNWRAPPED(t)
    return t


def fold_vmap(
    apply: Callable[..., Any],
    info: Any,
    in_dims: Sequence[int | None],
    args: Sequence[Any],
    roles: Sequence[str | None],
) -> tuple[Any, Any]:
    """The ``vmap`` staticmethod of an autograd.Function whose kernel treats each element of its
    leading batch dimension independently: returns (outputs, out_dims).

    ``roles`` names each argument's part: ``"batch"`` (leading dim = the kernel's batch B; an
    unbatched one is expanded over the vmapped slices), ``"batch|1"`` (the same, or leading dim
    1 = one for the whole batch, which stays shared where it is not vmapped: DAPE's bias),
    ``"shared"`` (one for the whole batch: CoPE-ALiBi's slopes, DAPE's weights) or None (not a
    tensor). With every shared operand unbatched, the vmapped dim is folded into the batch,
    (V, B, ...) -> (V*B, ...), one kernel call, and the outputs unfolded; a vmapped shared
    operand (each seed's own DAPE weights) gives one call per slice instead, stacked."""
    V = info.batch_size
    if any(d is not None and r == "shared" for d, r in zip(in_dims, roles)):
        outs = [apply(*(a if d is None else a.select(d, i) for a, d in zip(args, in_dims))) for i in range(V)]
        if isinstance(outs[0], tuple):
            return tuple(torch.stack(o) for o in zip(*outs)), (0,) * len(outs[0])
        return torch.stack(outs), 0
    lead, d0 = next((a, d) for a, d, r in zip(args, in_dims, roles) if r == "batch")
    B = lead.shape[0] if d0 is None else (lead.shape[:d0] + lead.shape[d0 + 1 :])[0]  # the kernel's batch per slice

    def fold(a: Any, d: int | None, r: str | None) -> Any:
        if r not in ("batch", "batch|1") or a is None or (d is None and r == "batch|1" and a.shape[0] == 1):
            return a  # not per batch element, or one for the whole (folded) batch
        a = a.expand(V, *a.shape) if d is None else a.movedim(d, 0)  # (V, B or 1, ...)
        return a.expand(V, B, *a.shape[2:]).reshape(V * B, *a.shape[2:])

    folded = [fold(a, d, r) for a, d, r in zip(args, in_dims, roles)]
    out = apply(*folded)
    if isinstance(out, tuple):
        return tuple(o.reshape(V, B, *o.shape[1:]) for o in out), (0,) * len(out)
    return out.reshape(V, B, *out.shape[1:]), 0
