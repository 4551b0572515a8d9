"""Compile Triton kernels ahead of time for an NVIDIA GPU, on a machine without one (a module of
scripts/triton_resources.py and tests/system/test_triton_compile.py, not of the installed package).

Why: CoPE's Triton kernels (``cope_triton.py``) were written and tested without a GPU, under
Triton's interpreter (``TRITON_INTERPRET=1``, tests/system/test_triton_cope.py). The interpreter
runs the kernels' Python with numpy and so never sees what only the compiler checks: tl.dot's
shape and type rules, layout conversions, the shared memory a configuration needs beyond what a
block may have, registers spilled to local memory. ``triton.compile`` builds a kernel for a
named target (``GPUTarget("cuda", 90, 32)``: sm_90, H100) with the ``ptxas`` that the triton
wheel ships, no GPU or driver involved, so those errors and costs surface here: the shared
memory from the compiler's metadata, registers and stack (spill) bytes per thread from
``cuobjdump -res-usage`` of the cubin (also shipped with the wheel).

- :func:`compile_kernel` compiles one ``triton.jit`` kernel for one architecture and returns
  its :class:`Resources`;
- :func:`cope_launch_configs` lists the CoPE kernels' configurations exactly as
  ``_CoPEQKVTritonKernel.forward`` / ``backward`` launch them on CUDA (tile sizes of
  ``block_sizes``, constexprs, num_warps, the arguments' types and what Triton specializes on):
  the one place tests/system/test_triton_compile.py and scripts/triton_resources.py take them from.

The first compile of a configuration takes about a second on 2 cores; Triton caches the result
on disk (``TRITON_CACHE_DIR``, default ~/.triton/cache), so ``compile_seconds`` of a repeat is
the cache lookup. Written against triton 3.9 (``triton.compile(ASTSource(fn, signature,
constexprs, attrs), target, options)``), also run with 3.6, the release on the GPU machines'
image: every launch compiles there and fits (3.6 gives the backward's query kernel up to 16 KB
more shared memory; no spills at the paper size, as with 3.9). Triton 3.9 warns at every compile while
``TRITON_DEFAULT_FP_FUSION`` is unset (the default flips in 3.10); the callers set it to 1, the
value the launches use today.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from synthlab.model.native import cope_triton as ct

# Shared memory one block may have after opting in (cudaDevAttrMaxSharedMemoryPerBlockOptin;
# CUDA C Programming Guide, "Technical Specifications per Compute Capability"). Triton refuses to
# load a kernel whose ``metadata.shared`` exceeds the device's value (OutOfResources).
MAX_SHARED_OPTIN = {80: 166912, 86: 101376, 89: 101376, 90: 232448}  # 163 KiB, 99, 99, 227 KiB

PRECISIONS = ("ieee", "tf32x3", "tf32")  # cope_triton._precision: "highest", "high", "medium"


@dataclass(frozen=True)
class Resources:
    """What one compiled kernel needs per block / thread. ``registers`` and ``stack_bytes``
    (per thread; stack above 0 at 255 registers means spills to local memory) are None where
    cuobjdump cannot be found."""

    kernel: str
    arch: int
    num_warps: int
    shared_bytes: int
    registers: int | None
    stack_bytes: int | None
    compile_seconds: float
    cubin: bytes = field(repr=False)
    ptx: str = field(repr=False, default="")  # the code ptxas was given: equal PTX, equal kernel


def nvidia_tool(name: str) -> str | None:
    """The path of one of the NVIDIA binaries shipped with triton ("ptxas", "cuobjdump"), or
    None where it is missing (``TRITON_<NAME>_PATH`` overrides, as for triton itself)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs, "nvidia"):
        try:
            return getattr(knobs.nvidia, name).path
        except (AttributeError, RuntimeError):  # RuntimeError: "Cannot find <name>"
            return None
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    return path if os.access(path, os.X_OK) else None


def register_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, stack bytes) per thread of the (one) kernel in ``cubin``, read from
    ``cuobjdump -res-usage``: lines like "REG:255 STACK:120 SHARED:1024 LOCAL:0 ...".
    (None, None) without cuobjdump."""
    tool = nvidia_tool("cuobjdump")
    if tool is None:
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    found = re.search(r"REG:(\d+)\s+STACK:(\d+)", out)
    if found is None:
        raise ValueError(f"no REG/STACK line in cuobjdump -res-usage output:\n{out}")
    return int(found.group(1)), int(found.group(2))


def compile_kernel(
    kernel,
    arch: int,
    signature: dict[str, str],
    constexprs: dict,
    num_warps: int,
    aligned: tuple[str, ...] = (),
    num_stages: int | None = None,
) -> Resources:
    """Compile ``kernel`` (a ``triton.jit`` function) for NVIDIA sm_``arch`` (90: H100, 80: A100)
    without a GPU and measure it.

    ``signature`` gives the type of every runtime argument by name ("*fp32", "i32", "fp32"),
    ``constexprs`` the value of every ``tl.constexpr`` one: together exactly the kernel's
    parameters (``kernel.arg_names``), else ValueError. ``aligned`` names the arguments Triton's
    launcher would mark 16-divisible (a pointer whose address, an integer whose value is a
    multiple of 16): the launch compiles that specialization, and it changes the code (vector
    loads, fewer registers), so a faithful measurement names them. Compile errors raise as they
    would at the first launch on a GPU. ``num_stages`` as the launch passes it (None: Triton's
    default, 3 on sm_80 / sm_90: software pipelining with multi-buffered loads)."""
    names = list(kernel.arg_names)
    constexpr_names = {p.name for p in kernel.params if p.is_constexpr}
    problems = []
    if set(signature) != set(names) - constexpr_names:
        problems.append(f"runtime arguments {sorted(signature)} != the kernel's {sorted(set(names) - constexpr_names)}")
    if set(constexprs) != constexpr_names:
        problems.append(f"constexprs {sorted(constexprs)} != the kernel's {sorted(constexpr_names)}")
    if not set(aligned) <= set(signature):
        problems.append(f"aligned {sorted(set(aligned) - set(signature))} are not runtime arguments")
    if problems:
        raise ValueError(f"{kernel.__name__}: " + "; ".join(problems))
    full_signature = {n: signature.get(n, "constexpr") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    start = time.perf_counter()
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=full_signature, constexprs=dict(constexprs), attrs=attrs),
        target=GPUTarget("cuda", arch, 32),
        options=dict(num_warps=num_warps, **({} if num_stages is None else {"num_stages": num_stages})),
    )
    seconds = time.perf_counter() - start
    cubin = compiled.asm["cubin"]
    registers, stack = register_usage(cubin)
    return Resources(
        kernel=kernel.__name__,
        arch=arch,
        num_warps=num_warps,
        shared_bytes=compiled.metadata.shared,
        registers=registers,
        stack_bytes=stack,
        compile_seconds=seconds,
        cubin=cubin,
        ptx=compiled.asm["ptx"],
    )


# ---- CoPE's launches ----

# The launcher's scalar arguments (Python ints, and float(scale)); every other runtime argument
# is a float32 tensor (the launcher converts q, k, v, the table and the slopes with _dense32).
_COPE_SCALARS = {"H": "i32", "T": "i32", "D": "i32", "NPOS": "i32", "N_KEY_BLOCKS": "i32", "scale": "fp32"}


@dataclass(frozen=True)
class LaunchConfig:
    """One kernel launch on CUDA (CoPE's or DAPE's), ready for :func:`compile_kernel`."""

    kernel: Any  # the triton.jit function
    signature: dict
    constexprs: dict
    num_warps: int
    aligned: tuple[str, ...]
    num_stages: int | None = None  # None: Triton's default

    @property
    def name(self) -> str:
        return self.kernel.__name__

    def tiles(self) -> str:
        c = self.constexprs
        return f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['D_PAD']}" + (
            f" npos_pad {c['NPOS_PAD']} chunk {c['NPOS_CHUNK']}" if "NPOS_PAD" in c else ""
        )

    def compile(self, arch: int) -> Resources:
        return compile_kernel(
            self.kernel, arch, self.signature, self.constexprs, self.num_warps, self.aligned, self.num_stages
        )


def _launch(kernel, d_h, npos, constexprs, num_warps, num_stages=None) -> LaunchConfig:
    """The signature and the 16-divisibility Triton's launcher derives from the arguments: every
    tensor aligned (fresh or contiguous float32 allocations), D and NPOS when multiples of 16.
    H, T and N_KEY_BLOCKS are taken as not multiples of 16 (the general variant; a T that is
    one compiles a second, specialized one), and none of them 1 (which Triton makes a
    constexpr)."""
    runtime = [p.name for p in kernel.params if not p.is_constexpr]
    signature = {n: _COPE_SCALARS.get(n, "*fp32") for n in runtime}
    sixteens = {n for n, value in (("D", d_h), ("NPOS", npos)) if value % 16 == 0}
    aligned = tuple(n for n in runtime if signature[n].startswith("*") or n in sixteens)
    return LaunchConfig(kernel, signature, constexprs, num_warps, aligned, num_stages)


def cope_launch_configs(d_h: int, npos: int, has_table: bool, precision: str) -> list[LaunchConfig]:
    """The three kernels' launches for heads of size ``d_h``, ``npos`` positions, a table (CoPE)
    or slopes (CoPE-ALiBi), as ``_CoPEQKVTritonKernel.forward`` and ``backward`` make them on a
    CUDA device: forward, the backward's query kernel, its key kernel. ``precision`` is the
    PRECISION constexpr: "ieee", "tf32x3", "tf32" for torch's float32 matmul precision
    "highest" (torch's default, so what synthlab launches unless a caller changes it), "high",
    "medium"."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {PRECISIONS}")
    d_pad, npos_pad = ct._pow2(d_h), ct._pow2(npos)
    tiles = ct.block_sizes(torch.device("cuda"), d_pad, npos_pad)
    common = dict(HAS_TABLE=has_table, BLOCK_N=tiles["block_n"], D_PAD=d_pad, PRECISION=precision)
    args = (d_h, npos)
    return [
        _launch(ct._cope_fwd_kernel, *args, dict(common, BLOCK_M=tiles["fwd_m"]), tiles["fwd_warps"]),
        _launch(
            ct._cope_bwd_query_kernel,
            *args,
            dict(common, BLOCK_M=tiles["bwd_query_m"], NPOS_PAD=npos_pad, NPOS_CHUNK=ct.npos_chunk_of(tiles, npos_pad)),
            tiles["bwd_query_warps"],
            tiles["bwd_stages"],
        ),
        _launch(
            ct._cope_bwd_key_kernel,
            *args,
            dict(common, BLOCK_M=tiles["bwd_key_m"]),
            tiles["bwd_key_warps"],
            tiles["bwd_stages"],
        ),
    ]


# ---- DAPE's launches ----


def dape_launch_configs(
    H: int, D: int, k: int, has_bias: bool, causal: bool, softmax: bool, precision: str
) -> list[LaunchConfig]:
    """The two kernels' launches (forward, backward) as ``dape_triton._DAPETritonKernel`` makes
    them on CUDA for H heads, hidden width D, k taps, with or without a bias (and its gradient),
    causal or encoder mode, P or A as the output. Every tensor aligned, D where a multiple of 16,
    T taken as none (a T that is one compiles a second variant); taps and bias_bstride are never
    specialized on (``do_not_specialize``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {PRECISIONS}")
    from synthlab.model.native import dape_triton as dt

    C = 2 * H if has_bias else H
    tiles, pads = dt.block_sizes(torch.device("cuda")), dt._padded(H, C, D, k)
    common = dict(
        H=H,
        C=C,
        K=k,
        HAS_BIAS=has_bias,
        CAUSAL=causal,
        BLOCK_M=tiles["block_m"],
        BLOCK_N=tiles["block_n"],
        D_PAD=pads["D_PAD"],
        CK_PAD=pads["CK_PAD"],
        PRECISION=precision,
    )
    scalars = {"T", "D", "bias_bstride", "taps"}
    configs = []
    for kernel, constexprs in (
        (dt._dape_fwd_kernel, dict(common, H_PAD=pads["H_PAD"])),
        (
            dt._dape_bwd_kernel,
            dict(common, SOFTMAX=softmax, NEED_GBIAS=has_bias, C_PAD=pads["C_PAD"], HK_PAD=pads["HK_PAD"]),
        ),
    ):
        runtime = [p.name for p in kernel.params if not p.is_constexpr]
        signature = {n: "i32" if n in scalars else "*fp32" for n in runtime}
        aligned = tuple(n for n in runtime if signature[n].startswith("*") or (n == "D" and D % 16 == 0))
        configs.append(LaunchConfig(kernel, signature, constexprs, tiles["num_warps"], aligned, tiles["num_stages"]))
    return configs
