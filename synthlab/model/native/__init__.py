"""Native CPU kernels, compiled on first use with the system C++ compiler and loaded by ctypes.

``dape_cpu.cpp`` fuses DAPE's convolutions per strip of query rows; ``cope_cpu.cpp`` CoPE's
positions, clamp and interpolation per query row. Without a compiler :func:`kernel` warns once
and returns None: the encoding's PyTorch path runs (same results, slower).
``SYNTHLAB_NATIVE=0`` turns them off. Build, cache, threads and ``-march``: docs/native.md,
"Building and choosing a path".
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

from synthlab.core.config import FALSE_WORDS

_DIR = Path(__file__).parent
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL | None] = {}
_TORCH_OPENMP: set[str] | None = None  # the OpenMP runtimes mapped before any kernel was loaded
_OPENMP_USABLE: dict[str, bool] = {}  # compiler -> whether its OpenMP build runs on torch's runtime
PRUNE_DAYS = 30  # a kernel library unused this long is removed when a new one is built
_BASE_FLAGS = [
    "-O3",
    "-std=c++17",
    "-ffp-contract=fast",
    "-shared",
    "-fPIC",
    "-pthread",
    "-fno-math-errno",
    "-fno-trapping-math",
]  # no FP traps: loops with a float select vectorise without AVX-512 masks
# -march=native (x86, Linux ARM), -mcpu=native (Apple clang on arm64), then portable code.
_NATIVE_ARCH_FLAGS = [["-march=native"], ["-mcpu=native"], []]


def _arch_flags() -> list[list[str]]:
    """The -march choices tried in turn: this CPU's own, or only ``$SYNTHLAB_NATIVE_MARCH``'s."""
    march = os.environ.get("SYNTHLAB_NATIVE_MARCH", "").strip()
    return [[f"-march={march}"]] if march else _NATIVE_ARCH_FLAGS


# OpenMP only where the library then runs on the OpenMP runtime torch already loaded (see
# _openmp_runtimes): torch's own warm worker threads. A second runtime beside torch's (clang's
# libomp next to torch's libgomp, or a libgomp of another soname) measured 2.2-2.8x slower than
# the std::thread build: two pools of spinning threads on the same cores. LLVM's libomp also aborts when a
# second copy of itself starts ("OMP: Error #15").
_OPENMP_FLAGS = ["-fopenmp"]
_OPENMP_LIB = re.compile(r"^lib(g|i|)omp[0-9]*([-.].*)?\.(so|dylib)(\.[0-9]+)*$")


def ptr(t) -> int | None:
    """A tensor's data pointer for a kernel argument (None -> NULL). The kernels read contiguous
    float32 buffers: anything else (a bfloat16 table under autocast) is refused here, where it
    would otherwise be read past its end in silence."""
    if t is None:
        return None
    if str(t.dtype) != "torch.float32" or not t.is_contiguous():
        raise TypeError(
            f"native kernel operand: expected a contiguous float32 tensor, got {t.dtype} "
            f"{'contiguous' if t.is_contiguous() else 'strided'} {tuple(t.shape)}"
        )
    return t.data_ptr()


def cache_dir() -> Path:
    return Path(os.environ.get("SYNTHLAB_CACHE_DIR") or Path.home() / ".cache" / "synthlab") / "native"


def enabled() -> bool:
    # an env switch: on unless set to a false word (any other value, a typo included, keeps it on)
    return os.environ.get("SYNTHLAB_NATIVE", "1").strip().lower() not in FALSE_WORDS


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


def _openmp_runtimes() -> set[str] | None:
    """The OpenMP runtimes mapped into this process (torch's, once torch is imported), by path;
    None where the process's mappings cannot be read (not Linux): OpenMP is then not used."""
    try:
        with open("/proc/self/maps") as f:
            fields = [line.split(None, 5) for line in f]
        paths = {x[5].strip() for x in fields if len(x) == 6}  # the 6th field: the mapped file
    except OSError:
        return None
    return {p for p in paths if _OPENMP_LIB.match(os.path.basename(p))}


def _build(cxx: str, source: Path, out: Path, extra: list[str]) -> None:
    errors = []
    for arch in _arch_flags():
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
        cmd = [cxx, *_BASE_FLAGS, *extra, *arch, str(source), "-o", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if proc.returncode == 0:
                os.replace(tmp, out)  # atomic: concurrent builders (sweep workers) never see a partial file
                return
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        errors.append(
            f"{' '.join(cmd)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
        )
    raise RuntimeError("; ".join(errors))


def _dape_signatures(lib: ctypes.CDLL) -> None:
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    # typeshed's argtypes lists each ctypes kind, not their common base _CData
    lib.dape_forward.argtypes = [p, p, i64, p, p, p, p, p] + [i32] * 8  # type: ignore[assignment]
    lib.dape_backward.argtypes = [p, p, i64, p, p, p, p, p, p, p, p, p, p, p] + [i32] * 8  # type: ignore[assignment]
    lib.dape_forward.restype = lib.dape_backward.restype = i32


def _cope_signatures(lib: ctypes.CDLL) -> None:
    p, i32 = ctypes.c_void_p, ctypes.c_int
    lib.cope_forward.argtypes = [p, p, p, p] + [i32] * 5
    lib.cope_backward.argtypes = [p, p, p, p, p, p] + [i32] * 5
    lib.cope_attention_forward.argtypes = [p, p, p, p, p] + [i32] * 5
    lib.cope_attention_backward.argtypes = [p] * 9 + [i32] * 5
    f32 = ctypes.c_float
    lib.cope_qkv_forward.argtypes = [p] * 7 + [i32] * 5 + [f32, i32]
    lib.cope_qkv_backward.argtypes = [p] * 11 + [i32] * 5 + [f32, i32]
    lib.cope_forward.restype = lib.cope_backward.restype = i32
    lib.cope_attention_forward.restype = lib.cope_attention_backward.restype = i32
    lib.cope_qkv_forward.restype = lib.cope_qkv_backward.restype = i32


# name -> (source, ABI version, display name, ctypes signatures)
KERNELS = {
    "dape": ("dape_cpu.cpp", 5, "DAPE", _dape_signatures),  # 5: DAPE V2's tril once, on the input (App. L)
    "cope": ("cope_cpu.cpp", 3, "CoPE", _cope_signatures),  # 3: the attention fused from q, k, v
}


def abi_version(name: str) -> int:
    return KERNELS[name][1]


def _library(cxx: str, version: str, source: Path, extra: list[str]) -> Path:
    """The cached library of ``source`` built with ``extra`` flags (built now if missing)."""
    texts = [source.read_text()] + [h.read_text() for h in sorted(_DIR.glob("*.h"))]
    key = hashlib.sha256(
        "\0".join([*texts, cxx, version, repr((_BASE_FLAGS, extra, _arch_flags())), _cpu_signature()]).encode()
    ).hexdigest()[:20]
    path = cache_dir() / f"{source.stem}-{key}{'-omp' if extra else ''}.so"
    failed = path.with_suffix(".failed")  # an OpenMP build this compiler cannot do: not retried
    if not path.exists():
        if extra and failed.exists():
            raise RuntimeError(failed.read_text())
        try:
            _build(cxx, source, path, extra)
        except RuntimeError as e:
            if extra:
                failed.write_text(str(e))
            raise
        _prune(source.stem, keep=path)
    else:
        try:
            os.utime(path)  # "last used": what _prune goes by
        except OSError:
            pass  # a read-only shared cache
    return path


def _prune(stem: str, keep: Path) -> None:
    """Remove this kernel's libraries unused for PRUNE_DAYS (older sources, compilers, CPUs of a
    shared cache); one still in use is rebuilt on its next load, in about a second."""
    cutoff = time.time() - PRUNE_DAYS * 86400
    for old in cache_dir().glob(f"{stem}-*"):
        try:
            if old != keep and old.suffix in (".so", ".failed") and old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass  # another process pruned it first


def _load(name: str) -> ctypes.CDLL:
    import torch

    source_name, abi, _, signatures = KERNELS[name]
    source = _DIR / source_name
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX, or install g++ / clang++)")
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    global _TORCH_OPENMP
    if _TORCH_OPENMP is None:
        torch.get_num_threads()  # torch's OpenMP runtime is mapped by now; none of ours yet
        _TORCH_OPENMP = _openmp_runtimes() or set()
    lib = None
    if _TORCH_OPENMP and _OPENMP_USABLE.get(cxx, True):
        try:
            lib = ctypes.CDLL(str(_library(cxx, version, source, _OPENMP_FLAGS)))
        except (OSError, RuntimeError, subprocess.SubprocessError):
            lib = None  # no OpenMP in this compiler (Apple clang, clang without libomp), or it timed out
        if lib is not None and (_openmp_runtimes() or set()) - _TORCH_OPENMP:
            lib = None  # it brought a runtime of its own: use the std::thread build instead
        _OPENMP_USABLE[cxx] = lib is not None
    if lib is None:
        lib = ctypes.CDLL(str(_library(cxx, version, source, [])))
    got = getattr(lib, f"{name}_abi_version")()
    if got != abi:
        raise RuntimeError(f"{name} kernel has ABI version {got}, expected {abi}")
    signatures(lib)
    getattr(lib, f"{name}_isa").restype = ctypes.c_char_p
    return lib


def isa(name: str) -> str | None:
    """The vector instruction set kernel ``name`` was compiled for ("avx512f", "avx2+fma", "neon",
    ...; the compiler's predefined macros), or None where it is off or unavailable."""
    lib = kernel(name)
    return None if lib is None else getattr(lib, f"{name}_isa")().decode()


def build_arch() -> str:
    """The -march the kernels are built with: ``$SYNTHLAB_NATIVE_MARCH`` or "native"."""
    return os.environ.get("SYNTHLAB_NATIVE_MARCH", "").strip() or "native"


def kernel(name: str) -> ctypes.CDLL | None:
    """The native library of ``name`` (a key of KERNELS), or None (disabled, or it could not be
    built: warned once per process)."""
    if not enabled():
        return None
    if name in _LOADED:  # no lock once loaded: entries are written once, and torch.compile cannot trace a lock
        return _LOADED[name]
    with _LOCK:
        if name not in _LOADED:
            try:
                _LOADED[name] = _load(name)
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                warnings.warn(
                    f"synthlab: the native {KERNELS[name][2]} kernel is unavailable ({e}); "
                    "using the slower PyTorch path",
                    RuntimeWarning,
                    stacklevel=2,
                )
                _LOADED[name] = None
        return _LOADED[name]


def describe() -> str:
    """One line on the native kernels of this process: built with what, threaded how."""
    if not enabled():
        return "native kernels: off (SYNTHLAB_NATIVE=0)"
    libs = {name: kernel(name) for name in KERNELS}
    if not any(libs.values()):
        return "native kernels: unavailable (PyTorch paths)"
    cxx = _compiler()
    threads = "OpenMP, on torch's runtime" if cxx is not None and _OPENMP_USABLE.get(cxx) else "std::thread"
    built = ", ".join(f"{n} [{isa(n)}]" for n, lib in libs.items() if lib)
    return f"native kernels: {built} built with {cxx} -march={build_arch()} ({threads})" + "".join(
        f"; {n} unavailable" for n, lib in libs.items() if lib is None
    )


def dape_kernel() -> ctypes.CDLL | None:
    return kernel("dape")


def cope_kernel() -> ctypes.CDLL | None:
    return kernel("cope")
