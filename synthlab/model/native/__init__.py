"""Native CPU kernels, compiled on first use with the system C++ compiler and loaded by ctypes.

- ``dape_cpu.cpp``: DAPE / DAPE V2's two (1 x k) convolutions and the LeakyReLU fused per strip
  of query rows; the D-channel hidden map stays in cache instead of going to memory (D x B x T^2
  floats, several times per step: the unfused version is memory-bound).
- ``cope_cpu.cpp``: CoPE's positions (a reverse scan of the gates), clamp and interpolation
  fused per query row, instead of a dozen passes over B x H x T^2 tensors.

Each shared library is built once per (source, compiler, flags, CPU) into a cache directory
(``$SYNTHLAB_CACHE_DIR`` or ``~/.cache/synthlab``) and reused by every process; a build takes
about a second. Where no compiler is found or the build fails, ``kernel(name)`` warns once and
returns None, and the encoding runs its PyTorch path (same results, slower).
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

_DIR = Path(__file__).parent
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL | None] = {}
_BASE_FLAGS = ["-O3", "-std=c++17", "-ffp-contract=fast", "-shared", "-fPIC", "-pthread", "-fno-math-errno"]
# OpenMP first: the library then links the libgomp torch already loaded (same soname) and runs on
# torch's own warm worker threads; -march=native (x86, Linux ARM), -mcpu=native (Apple clang on
# arm64), then portable code; each with and without OpenMP (Apple clang has none by default).
_ARCH_FLAGS = [[*omp, *arch] for arch in (["-march=native"], ["-mcpu=native"], []) for omp in (["-fopenmp"], [])]


def ptr(t) -> int | None:
    """A tensor's data pointer for a kernel argument (None -> NULL)."""
    return None if t is None else t.data_ptr()


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


def _build(cxx: str, source: Path, out: Path) -> None:
    errors = []
    for arch in _ARCH_FLAGS:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = [cxx, *_BASE_FLAGS, *arch, str(source), "-o", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if proc.returncode == 0:
                os.replace(tmp, out)  # atomic: concurrent builders (sweep workers) never see a partial file
                return
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        errors.append(f"{' '.join(cmd)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    raise RuntimeError("; ".join(errors))


def _dape_signatures(lib: ctypes.CDLL) -> None:
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.dape_forward.argtypes = [p, p, i64, p, p, p, p, p] + [i32] * 8
    lib.dape_backward.argtypes = [p, p, i64, p, p, p, p, p, p, p, p, p, p] + [i32] * 8
    lib.dape_forward.restype = lib.dape_backward.restype = i32


def _cope_signatures(lib: ctypes.CDLL) -> None:
    p, i32 = ctypes.c_void_p, ctypes.c_int
    lib.cope_forward.argtypes = [p, p, p, p] + [i32] * 5
    lib.cope_backward.argtypes = [p, p, p, p, p, p] + [i32] * 5
    lib.cope_forward.restype = lib.cope_backward.restype = i32


# name -> (source, ABI version, display name, ctypes signatures)
KERNELS = {
    "dape": ("dape_cpu.cpp", 3, "DAPE", _dape_signatures),
    "cope": ("cope_cpu.cpp", 1, "CoPE", _cope_signatures),
}


def abi_version(name: str) -> int:
    return KERNELS[name][1]


def _load(name: str) -> ctypes.CDLL:
    source_name, abi, _, signatures = KERNELS[name]
    source = _DIR / source_name
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX, or install g++ / clang++)")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    texts = [source.read_text()] + [h.read_text() for h in sorted(_DIR.glob("*.h"))]
    key = hashlib.sha256("\0".join([*texts, cxx, version, repr((_BASE_FLAGS, _ARCH_FLAGS)), _cpu_signature()])
                         .encode()).hexdigest()[:20]
    path = cache_dir() / f"{source.stem}-{key}.so"
    if not path.exists():
        _build(cxx, source, path)
    lib = ctypes.CDLL(str(path))
    got = getattr(lib, f"{name}_abi_version")()
    if got != abi:
        raise RuntimeError(f"{path} has ABI version {got}, expected {abi}")
    signatures(lib)
    return lib


def kernel(name: str) -> ctypes.CDLL | None:
    """The native library of ``name`` (a key of KERNELS), or None (disabled, or it could not be
    built: warned once per process)."""
    if not enabled():
        return None
    with _LOCK:
        if name not in _LOADED:
            try:
                _LOADED[name] = _load(name)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                warnings.warn(f"synthlab: the native {KERNELS[name][2]} kernel is unavailable ({e}); "
                              "using the slower PyTorch path", RuntimeWarning, stacklevel=2)
                _LOADED[name] = None
        return _LOADED[name]


def dape_kernel() -> ctypes.CDLL | None:
    return kernel("dape")


def cope_kernel() -> ctypes.CDLL | None:
    return kernel("cope")
