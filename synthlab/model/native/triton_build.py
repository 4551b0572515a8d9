"""Whether an optional Triton path compiles on this machine, found out before it is relied on.

Each Triton path (``cope_triton``, ``dape_triton``) compiles all its kernels for a new set of
sizes before its first call (``triton.JITFunction.warmup``: nothing launched); if that fails it
warns once and the PyTorch path runs for the rest of the process. Why: docs/native.md,
"Fused CoPE kernels: CPU (C++) and GPU (Triton)".
"""

from __future__ import annotations

import warnings
from typing import Callable, Hashable


class KernelBuilds:
    """One Triton path's build state in this process: the size keys compiled, or the first
    failure (after which :meth:`ready` is false for every key)."""

    def __init__(self, what: str, switch: str):
        self.what, self.switch = what, switch
        self.failure: str | None = None
        self.compiled: set[Hashable] = set()

    def ready(self, key: Hashable, compile_all: Callable[[], None]) -> bool:
        if self.failure is not None:
            return False
        if key in self.compiled:
            return True
        try:
            compile_all()
        except Exception as e:  # noqa: BLE001 - any compile failure: the PyTorch path instead
            first = (str(e).strip().splitlines() or [""])[0][:300]
            self.failure = f"{type(e).__name__}: {first}"
            warnings.warn(
                f"{self.what}'s Triton kernels do not compile here ({self.failure}); its PyTorch path "
                f"runs instead for this process (same results, slower; {self.switch}=0 skips the "
                f"attempt)",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        self.compiled.add(key)
        return True
