"""The machine a run ran on, as its record keeps it: CPU model, vector instruction set, torch.

A run's metrics repeat exactly only on the same CPU family and thread count (float rounding
differs between vector widths), so a committed result says where it came from.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

_ISA_ORDER = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4.2"))


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (Linux); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


@functools.lru_cache(maxsize=1)
def describe() -> dict[str, str]:
    """{"cpu": model name, "arch": machine, "isa": the widest vector set the CPU has, "torch": version}."""
    info = _cpuinfo()
    arch = platform.machine()
    flags = set(info.get("flags", info.get("Features", "")).split())
    isa = next((name for flag, name in _ISA_ORDER if flag in flags), "")
    if not isa and arch in ("aarch64", "arm64"):
        isa = "neon"  # every AArch64 CPU has Advanced SIMD
    cpu = info.get("model name") or info.get("Model") or platform.processor() or arch
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - synthlab needs torch to train
        torch_version = ""
    return {"cpu": cpu, "arch": arch, "isa": isa or "generic", "torch": torch_version}


def label(machine: dict[str, str] | None) -> str:
    """One line for a report: ``AMD EPYC (x86_64, avx512), torch 2.13.0``."""
    if not machine:
        return "not recorded"
    return f"{machine.get('cpu', '?')} ({machine.get('arch', '?')}, {machine.get('isa', '?')}), torch {machine.get('torch', '?')}"
