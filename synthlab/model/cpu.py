"""CPU allocator tuning for training on CPU (optional, process-wide).

glibc returns every large block (> 128 KiB .. 32 MiB, adaptive) to the OS on free and maps
it again on the next allocation, so each big attention-sized tensor pays page faults on
first touch. Materialising encodings (DAPE, CoPE) allocate several (B, H|D, T, T) tensors
per layer and step; keeping freed memory in the heap makes them ~30% faster on a 2-core
CPU (benchmarks/encodings.py). This is the same advice as PyTorch's CPU performance guide
(jemalloc / tcmalloc), done with glibc's own ``mallopt``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_DONE = False


def tune_cpu_allocator(
    mmap_threshold: int = 2**31 - 1, trim_threshold: int = 2**31 - 1, top_pad: int = 256 * 2**20
) -> bool:
    """Keep freed large blocks in the heap (glibc ``mallopt``). Idempotent; returns True when
    applied, False where unavailable (not Linux/glibc). Affects the whole process."""
    global _DONE
    if _DONE:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    ok = all(
        mallopt(opt, val) == 1
        for opt, val in ((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold), (M_TOP_PAD, top_pad))
    )
    _DONE = ok
    return ok
