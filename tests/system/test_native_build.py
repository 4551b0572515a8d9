"""How the native kernels are built and threaded (synthlab/model/native/__init__.py): OpenMP only
on the OpenMP runtime torch already runs, otherwise std::thread, with the same results either way;
and a clang build where clang is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

from synthlab.model import native
from synthlab.model.native.dape import native_applies
from synthlab.model.processors import DAPE

pytestmark = pytest.mark.skipif(native._compiler() is None, reason="no C++ compiler: the PyTorch paths run")


@pytest.mark.parametrize(
    "name, is_runtime",
    [
        ("libgomp.so.1", True),
        ("libgomp.so.1.0.0", True),
        ("libgomp-a34b3233.so.1", True),  # GCC; vendored by auditwheel
        ("libomp.so.5", True),
        ("libomp.so", True),
        ("libomp.dylib", True),
        ("libiomp5.so", True),  # LLVM; Intel
        ("libgompx.so", False),
        ("libcomp.so", False),
        ("libtorch_cpu.so", False),
        ("libgomp.txt", False),
    ],
)
def test_openmp_runtime_names(name, is_runtime):
    assert bool(native._OPENMP_LIB.match(name)) == is_runtime


def test_torch_openmp_runtime_is_found_on_linux():
    if not sys.platform.startswith("linux") or "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("torch's OpenMP runtime is looked up in /proc/self/maps (Linux, an OpenMP build of torch)")
    found = native._openmp_runtimes()
    assert found, "torch runs OpenMP but no runtime was found among the process's mappings"


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """A loader with nothing loaded yet and an empty kernel cache."""
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(native, "_OPENMP_USABLE", {})
    monkeypatch.setenv("SYNTHLAB_CACHE_DIR", str(tmp_path))
    return tmp_path


def _dape_output_and_grads():
    torch.manual_seed(0)
    d = DAPE(4, with_bias=True, hidden=8, k=3)
    S = torch.randn(2, 4, 40, 40, requires_grad=True)
    bias = torch.randn(1, 4, 40, 40, requires_grad=True)
    future = torch.ones(40, 40, dtype=torch.bool).triu(1)
    assert native_applies(S, bias, d.conv1.weight)
    out = d(S, bias, future)
    g = torch.randn_like(out).masked_fill(future, 0)
    grads = torch.autograd.grad((out.masked_fill(future, 0) * g).sum(), [S, bias, *d.parameters()])
    ref = d.forward_full(S, bias, future)
    assert torch.allclose(out.masked_fill(future, 0), ref.masked_fill(future, 0), atol=1e-5)
    return out.detach(), grads


def test_no_known_torch_runtime_builds_with_std_thread(fresh_loader, monkeypatch):
    monkeypatch.setattr(native, "_TORCH_OPENMP", set())  # as on macOS: mappings unreadable
    lib = native.kernel("dape")
    assert lib is not None and not lib._name.endswith("-omp.so")
    assert "std::thread" in native.describe()
    threaded, threaded_grads = _dape_output_and_grads()
    # the OpenMP build, where this machine allows it, gives the same function and gradients
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(native, "_TORCH_OPENMP", None)
    native.kernel("dape")
    omp, omp_grads = _dape_output_and_grads()
    assert torch.allclose(threaded, omp, atol=1e-6)
    for a, b in zip(threaded_grads, omp_grads):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_a_build_that_brings_its_own_openmp_runtime_is_not_used(fresh_loader, monkeypatch):
    torch_runtime = {"/opt/torch/lib/libgomp.so.1"}
    monkeypatch.setattr(native, "_TORCH_OPENMP", torch_runtime)
    loads = []

    def mappings():  # read once the OpenMP build is loaded: it brought a second runtime
        loads.append(1)
        return torch_runtime | {"/usr/lib/llvm/libomp.so.5"}

    monkeypatch.setattr(native, "_openmp_runtimes", mappings)
    lib = native.kernel("dape")
    assert lib is not None and not lib._name.endswith("-omp.so")
    assert native._OPENMP_USABLE == {native._compiler(): False}
    assert not native.kernel("cope")._name.endswith("-omp.so")
    assert len(loads) == 1, "the second kernel tried OpenMP again"
    assert sorted(p.name.endswith("-omp.so") for p in fresh_loader.rglob("*.so")) == [False, False, True]


def test_default_build_runs_on_torchs_gnu_openmp():
    """The common case (Linux, GCC, torch's libgomp) must keep OpenMP: std::thread measured
    20-40 % slower there (benchmarks/encodings.py), torch's idle workers spinning on the cores."""
    cxx = native._compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    if (
        native.kernel("dape") is None
        or "clang" in version.lower()
        or not any("libgomp" in p for p in native._TORCH_OPENMP or ())
    ):
        pytest.skip("not GCC beside a torch that runs libgomp")
    assert native._OPENMP_USABLE.get(cxx) is True and native.kernel("dape")._name.endswith("-omp.so")
    assert "OpenMP, on torch's runtime" in native.describe()


@pytest.mark.skipif(shutil.which("clang++") is None, reason="clang++ not installed (apt install clang)")
def test_clang_build_matches(fresh_loader, monkeypatch):
    expected = _dape_output_and_grads() if native.kernel("dape") else None
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("CXX", "clang++")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "kernel unavailable" fallback
        lib = native.kernel("dape")
        assert lib is not None and native.kernel("cope") is not None
    out, grads = _dape_output_and_grads()
    if expected is not None:
        assert torch.allclose(out, expected[0], atol=1e-6)
        for a, b in zip(grads, expected[1]):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_a_compiler_without_openmp_falls_back_once(fresh_loader, monkeypatch):
    """Apple clang, or clang without libomp: the OpenMP build fails, the std::thread one runs, and
    later processes do not try OpenMP again with that compiler (a marker in the cache)."""
    real = native._compiler()
    log = fresh_loader / "calls.log"
    fake = fresh_loader / "cxx-without-openmp"
    fake.write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        f'case " $* " in *" -fopenmp "*) echo \'fatal error: omp.h: not found\' >&2; exit 1;; esac\n'
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setattr(native, "_TORCH_OPENMP", {"/opt/torch/lib/libgomp.so.1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lib = native.kernel("dape")
    assert lib is not None and not lib._name.endswith("-omp.so")
    assert any("-fopenmp" in line for line in log.read_text().splitlines())
    assert len(list(fresh_loader.rglob("*.failed"))) == 1
    _dape_output_and_grads()
    # a new process (fresh loader state): the marker spares the failing OpenMP compiles
    log.write_text("")
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(native, "_OPENMP_USABLE", {})
    assert native.kernel("dape") is not None
    assert not any("-fopenmp" in line for line in log.read_text().splitlines())


def test_a_new_build_prunes_libraries_unused_for_a_month(fresh_loader, monkeypatch):
    import os
    import time

    lib_dir = fresh_loader / "native"
    lib_dir.mkdir()
    month = native.PRUNE_DAYS * 86400
    stale = [lib_dir / "dape_cpu-0000old.so", lib_dir / "dape_cpu-0000old-omp.failed"]
    recent, other = lib_dir / "dape_cpu-1111new.so", lib_dir / "cope_cpu-0000old.so"
    for f in (*stale, recent, other):
        f.write_text("x")
    for f in (*stale, other):
        os.utime(f, (time.time() - month - 60, time.time() - month - 60))
    assert native.kernel("dape") is not None  # a build: the cache holds no library of this source
    assert not any(f.exists() for f in stale)
    assert recent.exists() and other.exists()  # used lately; another kernel's library
    # loading a cached library marks it used, so an old but busy library is kept
    built = [p for p in lib_dir.glob("dape_cpu-*.so") if p != recent]
    for p in built:
        os.utime(p, (time.time() - month - 60, time.time() - month - 60))
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setattr(native, "_OPENMP_USABLE", {})
    native.kernel("dape")
    assert any(time.time() - p.stat().st_mtime < 60 for p in built)


def _cpu_has(*flags: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            have = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return all(flag in have for flag in flags)


@pytest.mark.parametrize("march, isa, needs", [("x86-64", "sse2", ()), ("haswell", "avx2+fma", ("avx2", "fma"))])
def test_march_override_builds_for_that_instruction_set(fresh_loader, monkeypatch, march, isa, needs):
    """SYNTHLAB_NATIVE_MARCH builds an older CPU's kernels here (its own cached library), which
    say what they were built for and compute what the native build computes."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64") or not _cpu_has(*needs):
        pytest.skip(f"-march={march} code does not run on this CPU")
    monkeypatch.delenv("SYNTHLAB_NATIVE_MARCH", raising=False)  # the baseline: this CPU's own build
    native_lib = native.kernel("dape")
    expected = _dape_output_and_grads()
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("SYNTHLAB_NATIVE_MARCH", march)
    assert native.kernel("dape")._name != native_lib._name  # the flags are part of the cache key
    assert native.isa("dape") == isa and native.isa("cope") == isa
    assert f"-march={march}" in native.describe() and f"[{isa}]" in native.describe()
    out, grads = _dape_output_and_grads()
    assert torch.allclose(out, expected[0], atol=1e-5)
    for a, b in zip(grads, expected[1]):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-g++") is None,
    reason="no aarch64 cross compiler (apt install g++-aarch64-linux-gnu)",
)
@pytest.mark.parametrize("name", sorted(native.KERNELS))
def test_kernel_compiles_for_arm64_neon(name, tmp_path):
    """The kernels' portable vector code (NEON's four lanes on arm64: Apple, Graviton) compiles,
    and its inner products are NEON's four-lane fused multiply-adds (``fmla vN.4s``), not scalar
    ones; it cannot run here."""
    source = native._DIR / native.KERNELS[name][0]
    cmd = ["aarch64-linux-gnu-g++", *native._BASE_FLAGS, "-march=armv8-a", str(source), "-o", str(tmp_path / "k.so")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    asm = tmp_path / "k.s"
    proc = subprocess.run([*cmd[:-2], "-S", "-o", str(asm)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    vector_fmas = re.findall(r"\bfmla\s+v\d+\.4s", asm.read_text())
    assert len(vector_fmas) >= 16, f"{len(vector_fmas)} four-lane fmla in {source.name}'s arm64 build"
