"""The machine a run ran on, as its record keeps it: CPU model, vector instruction set, GPU, and
the releases of Python, torch, Lightning, numpy and Optuna.

A run's metrics repeat exactly only on the same CPU family and thread count (float rounding
differs between vector widths), so a committed result says where it came from.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

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


def _version_of(module: str, distribution: str | None = None) -> str:
    """The running release of ``module``: its ``__version__`` when it is imported already, else
    the installed distribution's metadata (nothing imported: Optuna costs a second); "" when
    it is not installed."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return loaded.__version__
    try:
        return importlib.metadata.version(distribution or module)
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.lru_cache(maxsize=1)
def _host() -> dict[str, str]:
    info = _cpuinfo()
    arch = platform.machine()
    flags = set(info.get("flags", info.get("Features", "")).split())
    isa = next((name for flag, name in _ISA_ORDER if flag in flags), "")
    if not isa and arch in ("aarch64", "arm64"):
        isa = "neon"  # every AArch64 CPU has Advanced SIMD
    cpu = info.get("model name") or info.get("Model") or platform.processor() or arch
    return {
        "cpu": cpu,
        "arch": arch,
        "isa": isa or "generic",
        "torch": _version_of("torch"),
        "python": platform.python_version(),
        "lightning": _version_of("lightning"),
        "numpy": _version_of("numpy"),
        "optuna": _version_of("optuna"),
    }


def describe(device: Any = None) -> dict[str, str]:
    """{"cpu": model name, "arch": machine, "isa": the widest vector set the CPU has, "torch",
    "python", "lightning", "numpy", "optuna": their versions}, "torch_isa" (:func:`torch_isa`) when
    torch is imported, and "gpu": the device's name when
    ``device`` (a ``torch.device`` or string, the one the run trained on) is a CUDA device.
    Records older than a key lack it (readers use ``.get``)."""
    out = dict(_host())
    if "torch" in sys.modules:  # the vector width of torch's own kernels, which the rounding follows
        out["torch_isa"] = torch_isa()
    if device is not None and str(device).startswith("cuda"):
        import torch

        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return out


# what caps the vector width of the libraries under torch (scripts/as_avx2.sh sets them all)
VECTOR_CAPS = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "SYNTHLAB_NATIVE_MARCH")


def torch_isa() -> str:
    """The vector set torch's own CPU kernels dispatch to ("AVX512", "AVX2", "DEFAULT", ...):
    the CPU's widest unless ``ATEN_CPU_CAPABILITY`` lowers it."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def vector_paths() -> str:
    """One line for a benchmark's header: the CPU, its widest vector set, the set torch's kernels
    use, and any cap set on MKL, oneDNN or synthlab's native build."""
    host = _host()
    caps = [f"{k}={os.environ[k]}" for k in VECTOR_CAPS if os.environ.get(k)]
    return f"CPU {host['cpu']} ({host['arch']}, {host['isa']}); torch's kernels {torch_isa()}" + (
        f"; capped: {', '.join(caps)}" if caps else ""
    )


def label(machine: dict[str, str] | None) -> str:
    """One line for a report: ``AMD EPYC (x86_64, avx512), torch 2.13.0`` (``, GPU name`` when the
    runs trained on one)."""
    if not machine:
        return "not recorded"
    gpu = f", {machine['gpu']}" if machine.get("gpu") else ""
    isa = machine.get("isa", "?")
    if machine.get("torch_isa") and machine["torch_isa"].lower() != isa.lower():
        isa += f", torch's kernels {machine['torch_isa']}"
    return f"{machine.get('cpu', '?')} ({machine.get('arch', '?')}, {isa}), torch {machine.get('torch', '?')}{gpu}"
