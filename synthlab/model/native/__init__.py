"""Native CPU kernels, compiled on first use with the system C++ compiler and loaded by ctypes.

Only one so far: DAPE / DAPE V2's two (1 x k) convolutions fused per query row
(``dape_cpu.cpp``), which keeps the D-channel hidden map in cache instead of writing
D x B x T^2 floats to memory several times per step (the unfused version is memory-bound).

The shared library is built once per (source, compiler, flags, CPU) into a cache directory
(``$SYNTHLAB_CACHE_DIR`` or ``~/.cache/synthlab``) and reused by every process; the build
takes about a second. Where no compiler is found or the build fails, ``dape_kernel()``
returns None once with a warning and DAPE runs its PyTorch path (same results, slower).
``SYNTHLAB_NATIVE=0`` turns the kernels off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

_SOURCE = Path(__file__).with_name("dape_cpu.cpp")
_ABI_VERSION = 3
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL | None] = {}
_BASE_FLAGS = ["-O3", "-std=c++17", "-ffp-contract=fast", "-shared", "-fPIC", "-pthread", "-fno-math-errno"]
# OpenMP first: the library then links the libgomp torch already loaded (same soname) and runs on
# torch's own warm worker threads; -march=native (x86, Linux ARM), -mcpu=native (Apple clang on
# arm64), then portable code; each with and without OpenMP (Apple clang has none by default).
_ARCH_FLAGS = [[*omp, *arch] for arch in (["-march=native"], ["-mcpu=native"], []) for omp in (["-fopenmp"], [])]


def cache_dir() -> Path:
    return Path(os.environ.get("SYNTHLAB_CACHE_DIR") or Path.home() / ".cache" / "synthlab") / "native"


def enabled() -> bool:
    return os.environ.get("SYNTHLAB_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _compiler() -> str | None:
    for cand in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cand and shutil.which(cand):
            return shutil.which(cand)
    return None


def _cpu_signature() -> str:
    """What -march=native depends on: the CPU's feature flags (a cache shared over NFS by
    different machines then keeps one library per CPU kind)."""
    sig = platform.machine() + platform.system()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features", "model name")):
                    sig += line
    except OSError:
        sig += platform.processor()
    return sig


def _build(cxx: str, out: Path) -> None:
    errors = []
    for arch in _ARCH_FLAGS:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = [cxx, *_BASE_FLAGS, *arch, str(_SOURCE), "-o", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            os.replace(tmp, out)  # atomic: concurrent builders (sweep workers) never see a partial file
            return
        os.unlink(tmp)
        errors.append(f"{' '.join(cmd)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    raise RuntimeError("; ".join(errors))


def _load(name: str) -> ctypes.CDLL | None:
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX, or install g++ / clang++)")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([_SOURCE.read_text(), cxx, version, " ".join(_BASE_FLAGS), _cpu_signature()])
                         .encode()).hexdigest()[:20]
    path = cache_dir() / f"{name}-{key}.so"
    if not path.exists():
        _build(cxx, path)
    lib = ctypes.CDLL(str(path))
    if lib.dape_abi_version() != _ABI_VERSION:
        raise RuntimeError(f"{path} has ABI version {lib.dape_abi_version()}, expected {_ABI_VERSION}")
    f32, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.dape_forward.argtypes = [f32, f32, i64, f32, f32, f32, f32, f32] + [i32] * 8
    lib.dape_forward.restype = i32
    lib.dape_backward.argtypes = [f32, f32, i64, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32] + [i32] * 8
    lib.dape_backward.restype = i32
    return lib


def dape_kernel() -> ctypes.CDLL | None:
    """The fused DAPE library, or None (disabled, or it could not be built: warned once)."""
    if not enabled():
        return None
    with _LOCK:
        if "dape" not in _LOADED:
            try:
                _LOADED["dape"] = _load("dape_cpu")
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                warnings.warn(f"synthlab: the native DAPE kernel is unavailable ({e}); "
                              "using the slower PyTorch path", RuntimeWarning, stacklevel=2)
                _LOADED["dape"] = None
        return _LOADED["dape"]
