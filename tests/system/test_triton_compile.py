"""CoPE's Triton kernels compile for real GPUs, without one: sm_90 (H100) and sm_80 (A100), every
configuration ``_CoPEQKVTritonKernel`` launches on CUDA at head sizes 16 to 128, npos 16 and 64,
with a table (CoPE) and with slopes (CoPE-ALiBi); each gives a cubin and asks for no more shared
memory than a block of that architecture may have. test_triton_cope.py runs the same kernels in
Triton's interpreter, which checks the arithmetic but not what only the compiler sees (tl.dot's
shape rules, layouts, shared memory); ``scripts/triton_aot.py`` compiles with the
ptxas that the triton wheel ships. And the configurations compiled are the launcher's own: its
launches, recorded on meta tensors, have the same constexprs, num_warps and argument types.

A compile takes about a second on 2 cores (cached on disk by Triton afterwards): a few cases run
always, the rest are marked slow (CI runs them; ``-m 'not slow'`` skips them)."""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed (pip install 'synthlab-pe[gpu]'; Linux only)")

from synthlab.model.native import cope_triton as ct  # noqa: E402

if ct.INTERPRETED:  # TRITON_INTERPRET=1: the kernels are the interpreter's, nothing to compile
    pytest.skip("kernels defined for Triton's interpreter (TRITON_INTERPRET=1)", allow_module_level=True)
if tuple(int(x) for x in __import__("triton").__version__.split(".")[:2]) < (3, 6):
    # triton_aot.py calls triton.compile(ASTSource(fn, signature, constexprs, attrs), ...): run with
    # 3.9 (CI) and 3.6 (the GPU machines' image); older releases are not checked
    pytest.skip("ahead-of-time compiles are checked with triton 3.6 and 3.9", allow_module_level=True)

# the ahead-of-time helpers are a script's module, not the installed package's
_spec = importlib.util.spec_from_file_location(
    "triton_aot", Path(__file__).resolve().parents[2] / "scripts" / "triton_aot.py"
)
ta = sys.modules["triton_aot"] = importlib.util.module_from_spec(_spec)  # its dataclasses look it up
_spec.loader.exec_module(ta)

compiles = pytest.mark.skipif(ta.nvidia_tool("ptxas") is None, reason="no ptxas in the triton install")

ARCHS = (90, 80)
HEAD_SIZES = (16, 32, 64, 128)
NPOS = (16, 64, 512)  # 512: the query kernel's table gradient in chunks
FAST = (64, 64, True)  # (d_h, npos, has_table) of the cases that run without the slow ones


@pytest.fixture(autouse=True)
def _fp_fusion(monkeypatch):
    """Triton 3.9 warns at each compile while TRITON_DEFAULT_FP_FUSION is unset; 1 is its
    default (what the launches use). Set for the test only, a value already there kept."""
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"))


def _cases():
    """One pytest param per distinct compile: the forward and key kernels do not depend on npos
    (16 and 64 launch them alike), so they appear once, named after the first configuration
    that launches them. Precision "tf32" over the whole grid, "ieee" and "tf32x3" (torch's
    default "highest" and "high") at the FAST configuration."""
    grid = [(*FAST, p) for p in ("tf32", "ieee", "tf32x3")]  # first: the fast ones keep their ids
    grid += [(d, n, t, "tf32") for d in HEAD_SIZES for n in NPOS for t in (True, False)]
    seen, out = set(), []
    for arch in ARCHS:
        for d_h, npos, has_table, precision in grid:
            for cfg in ta.cope_launch_configs(d_h, npos, has_table, precision):
                key = (arch, cfg.name, tuple(sorted(cfg.constexprs.items())), cfg.num_warps, cfg.aligned)
                if key in seen:
                    continue
                seen.add(key)
                fast = (d_h, npos, has_table) == FAST and (arch == 90 or precision == "tf32")
                name = cfg.name.removeprefix("_cope_").removesuffix("_kernel")
                out.append(
                    pytest.param(
                        cfg,
                        arch,
                        marks=() if fast else pytest.mark.slow,
                        id=f"sm{arch}-{name}-d{d_h}-npos{npos}-{'table' if has_table else 'alibi'}-{precision}",
                    )
                )
    return out


@compiles
@pytest.mark.parametrize("cfg, arch", _cases())
def test_kernel_compiles_within_shared_memory(cfg, arch):
    res = cfg.compile(arch)
    assert res.cubin, "no cubin"
    limit = ta.MAX_SHARED_OPTIN[arch]
    assert 0 < res.shared_bytes <= limit, (
        f"{cfg.name} {cfg.tiles()} num_warps {cfg.num_warps} needs {res.shared_bytes} bytes of shared memory; "
        f"sm_{arch} allows {limit} per block"
    )
    if res.registers is not None:  # cuobjdump found; spills are slow, not wrong, so only reported
        assert 0 < res.registers <= 255 and res.stack_bytes >= 0


class _Recorder:
    """Stands in for a kernel: ``kernel[grid](*args, **kwargs)`` records instead of launching."""

    def __init__(self, kernel, calls):
        self.kernel, self.calls = kernel, calls

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((self.kernel, args, kwargs))

    def warmup(self, *args, grid, **kwargs):  # what builds() calls: compile, do not launch
        self.calls.append((self.kernel, args, kwargs))


def _launched(monkeypatch, d_h, npos, has_table, precision):
    """The launcher's kernel calls for one forward and backward, on meta tensors, with CUDA's
    tile sizes and ``precision``: [(kernel, args, kwargs)] in launch order. B 2, H 3, T 300: no
    size Triton specializes on (1, multiples of 16) besides d_h and npos, nor a single key block."""
    calls = []
    for name in ("_cope_fwd_kernel", "_cope_bwd_query_kernel", "_cope_bwd_key_kernel"):
        monkeypatch.setattr(ct, name, _Recorder(getattr(ct, name), calls))
    sizes = ct.block_sizes
    monkeypatch.setattr(ct, "block_sizes", lambda device, d_pad, npos_pad: sizes(torch.device("cuda"), d_pad, npos_pad))
    monkeypatch.setattr(ct, "_precision", lambda device: precision)
    B, H, T = 2, 3, 300
    q, k, v = (torch.empty(B, H, T, d_h, device="meta", requires_grad=True) for _ in range(3))
    table = torch.empty(B, H, T, npos, device="meta", requires_grad=True) if has_table else None
    slopes = None if has_table else torch.empty(H, device="meta")
    y = ct._CoPEQKVTritonKernel.apply(q, k, v, table, slopes, npos, 0.125)[0]
    torch.autograd.grad(y.sum(), [q, k, v])
    launched = list(calls)
    calls.clear()
    ct._compile_all(torch.device("meta"), H, T, d_h, npos, has_table)  # builds(): compiles what a call launches
    assert [_as_compiled(*c) for c in calls] == [_as_compiled(*c) for c in launched]
    return launched


def _as_compiled(kernel, args, kwargs):
    """(signature, constexprs, num_warps, aligned, num_stages) that Triton's launcher derives
    from a call."""
    kwargs = dict(kwargs)
    num_warps, num_stages = kwargs.pop("num_warps"), kwargs.pop("num_stages", None)
    signature, aligned = {}, []
    kept = {p.name for p in kernel.params if getattr(p, "do_not_specialize", False)}  # no value variants
    for name, value in zip(kernel.arg_names, args):
        if isinstance(value, torch.Tensor):
            assert value.dtype == torch.float32, name
            signature[name] = "*fp32"
            aligned.append(name)  # fresh / contiguous allocations
            continue
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{name}: {value!r}"
        if isinstance(value, int):
            assert (value != 1 or name in kept) and abs(value) < 2**31, (name, value)  # 1 would be a constexpr
            signature[name] = "i32"
            if value % 16 == 0 and name not in kept:
                aligned.append(name)
        else:
            signature[name] = "fp32"
    assert len(args) == len(signature), "constexprs passed by position"
    return signature, kwargs, num_warps, tuple(aligned), num_stages


@pytest.mark.parametrize(
    "d_h, npos, has_table, precision", [(64, 64, True, "tf32"), (128, 16, False, "ieee"), (24, 10, True, "tf32x3")]
)
def test_configs_are_the_launchers(monkeypatch, d_h, npos, has_table, precision):
    expected = ta.cope_launch_configs(d_h, npos, has_table, precision)  # before the kernels are swapped out
    calls = _launched(monkeypatch, d_h, npos, has_table, precision)
    assert [kernel for kernel, _, _ in calls] == [cfg.kernel for cfg in expected]
    for (kernel, args, kwargs), cfg in zip(calls, expected):
        assert _as_compiled(kernel, args, kwargs) == (
            cfg.signature,
            cfg.constexprs,
            cfg.num_warps,
            cfg.aligned,
            cfg.num_stages,
        ), cfg.name


# ---- DAPE's kernels (native/dape_triton.py) ----


def _dape_cases():
    """H 4, D 32 (the paper size's kerple+dape), k 1 / 3 / 5, with a bias (its gradient too) or
    none, causal or encoder, P or A: sm_90 and sm_80 at torch's default precision ("ieee"),
    "tf32" at sm_90. The layer's own case (k 3, bias, causal, P) runs always."""
    out = []
    for arch, precision in ((90, "ieee"), (80, "ieee"), (90, "tf32")):
        for k, has_bias, causal, softmax in (
            (3, True, True, True),
            (1, True, True, True),
            (5, True, True, False),
            (3, False, True, True),
            (3, True, False, True),
        ):
            fast = (arch, precision, k, has_bias, causal, softmax) == (90, "ieee", 3, True, True, True)
            for cfg in ta.dape_launch_configs(4, 32, k, has_bias, causal, softmax, precision):
                name = cfg.name.removeprefix("_dape_").removesuffix("_kernel")
                out.append(
                    pytest.param(
                        cfg,
                        arch,
                        marks=() if fast else pytest.mark.slow,
                        id=f"sm{arch}-dape-{name}-k{k}-{'bias' if has_bias else 'nobias'}-"
                        f"{'causal' if causal else 'encoder'}-{'P' if softmax else 'A'}-"
                        f"{precision}",
                    )
                )
    return out


@compiles
@pytest.mark.parametrize("cfg, arch", _dape_cases())
def test_dape_kernel_compiles_within_shared_memory(cfg, arch):
    test_kernel_compiles_within_shared_memory(cfg, arch)


@pytest.mark.parametrize(
    "k, has_bias, shared_bias, causal, softmax, precision",
    [
        (3, True, True, True, True, "ieee"),
        (1, False, False, True, False, "tf32"),
        (5, True, False, False, True, "tf32x3"),
    ],
)
def test_dape_configs_are_the_launchers(monkeypatch, k, has_bias, shared_bias, causal, softmax, precision):
    """dape_launch_configs equals what _DAPETritonKernel launches (forward and backward on meta
    tensors, CUDA's tile sizes): B 2, H 4, D 32, T 300."""
    from synthlab.model.native import dape_triton as dt

    expected = ta.dape_launch_configs(4, 32, k, has_bias, causal, softmax, precision)
    calls = []
    for name in ("_dape_fwd_kernel", "_dape_bwd_kernel"):
        monkeypatch.setattr(dt, name, _Recorder(getattr(dt, name), calls))
    sizes = dt.block_sizes
    monkeypatch.setattr(dt, "block_sizes", lambda device: sizes(torch.device("cuda")))
    monkeypatch.setattr(dt, "_precision", lambda device: precision)
    B, H, T, D = 2, 4, 300, 32
    C = 2 * H if has_bias else H
    meta = dict(device="meta", requires_grad=True)
    S = torch.empty(B, H, T, T, **meta)
    bias = torch.empty(1 if shared_bias else B, H, T, T, **meta) if has_bias else None
    weights = [
        torch.empty(D, C, 1, k, **meta),
        torch.empty(D, **meta),
        torch.empty(H, D, 1, k, **meta),
        torch.empty(H, **meta),
    ]
    out = dt._DAPETritonKernel.apply(S, bias, *weights, causal, softmax)
    torch.autograd.grad(out.sum(), [S] + ([bias] if has_bias else []))
    assert [kernel for kernel, _, _ in calls] == [cfg.kernel for cfg in expected]
    launched = [_as_compiled(*c) for c in calls]
    assert launched == [(cfg.signature, cfg.constexprs, cfg.num_warps, cfg.aligned, cfg.num_stages) for cfg in expected]
    calls.clear()
    dt._compile_all(torch.device("meta"), H, C, T, D, k, has_bias, causal, softmax)  # what builds() compiles
    compiled = [_as_compiled(*c) for c in calls]
    assert all(c in compiled for c in launched)  # (and the backward without the bias's gradient too)


@compiles
@pytest.mark.slow
def test_resources_script_prints_a_row_per_launch(capsys):
    """scripts/triton_resources.py at one size: a Markdown row per kernel and variant, none failed
    (last in the file: the compiles above leave these in Triton's cache)."""
    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "triton_resources.py"))
    script["main"](["--arch", "90", "--d-h", "64", "--npos", "64"])
    rows = capsys.readouterr().out.strip().splitlines()[2:]
    assert len(rows) == 6 and not any("failed" in r or "(over)" in r for r in rows), rows
    assert all(r.startswith("| _cope_") and r.count("|") == 12 for r in rows), rows


@compiles
@pytest.mark.parametrize("precision", ["ieee", "tf32"])
def test_paper_size_launches_spill_nothing(precision):
    """The tile sizes were chosen from ptxas's report (no GPU to time them): at the flip-flop
    paper size (d_h 64, CoPE npos 64; kerple+dape H 4, D 32, k 1 and 3) no kernel spills
    registers on sm_90, at torch's default precision (IEEE) and TF32. The first CoPE tiles
    spilled up to 3,424 bytes a thread there. Registers depend on the compiler: checked with the
    triton releases whose reports were read, 3.9 (the tiles were chosen with it; CI) and 3.6 (the
    GPU machines' image)."""
    import triton

    if not triton.__version__.startswith(("3.9.", "3.6.")):
        pytest.skip(f"register report of triton {triton.__version__}; the tiles were checked with 3.9 and 3.6")
    configs = ta.cope_launch_configs(64, 64, True, precision) + [
        cfg for k in (1, 3) for cfg in ta.dape_launch_configs(4, 32, k, True, True, True, precision)
    ]
    configs.append(ta.cope_launch_configs(64, 512, True, precision)[1])  # cope:npos=512 (the T 512 lead)
    spills = {}
    for cfg in configs:
        res = cfg.compile(90)
        if res.stack_bytes:
            spills[f"{cfg.name} {cfg.constexprs.get('K', '')}"] = res.stack_bytes
    assert not spills, spills


def test_a_kernel_that_does_not_compile_leaves_the_pytorch_path_on(monkeypatch):
    """builds(): the first call for new sizes compiles every kernel (here: fails, as a kernel
    the installed triton cannot build would); CoPE then takes its PyTorch path, with one warning
    for the process, and does not try again; sizes compiled before are not retried either."""
    from synthlab.model.encoders.contextual import CoPE
    from synthlab.model.native.triton_build import KernelBuilds

    tries = []

    def compile_all(device, H, T, D, npos, has_table):
        tries.append(T)
        if T == 24:
            raise RuntimeError("PTXASError: ptxas fatal: Unsupported .version 9.4\nmore lines")

    monkeypatch.setattr(ct, "BUILDS", KernelBuilds("CoPE", "SYNTHLAB_COPE_TRITON"))
    monkeypatch.setattr(ct, "_compile_all", compile_all)
    monkeypatch.setattr(ct, "triton_available", lambda device: True)
    monkeypatch.delenv("SYNTHLAB_COPE_TRITON", raising=False)
    cope = CoPE(d_model=16, n_heads=2)

    class LooksCuda(torch.Tensor):
        is_cuda = property(lambda self: True)

    def q(T):
        return torch.zeros(1, 2, T, 8).as_subclass(LooksCuda)

    from synthlab.model.native.cope import triton_applies

    def compiles(t):
        return triton_applies(t, cope.npos, True)

    assert compiles(q(12)) and compiles(q(12)) and tries == [12]  # compiled once per sizes
    with pytest.warns(RuntimeWarning, match=r"CoPE's Triton kernels do not compile here \(RuntimeError: PTXASError"):
        assert not compiles(q(24))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert not compiles(q(24)) and not compiles(q(12)) and not compiles(q(40))
    assert tries == [12, 24]


@pytest.mark.parametrize("argv", [["--precision", "fp8"], ["--dape", "--k", "2"], ["--d-h", "0"]])
def test_resources_script_refuses_bad_input_with_exit_2(argv, capsys):
    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "triton_resources.py"))
    with pytest.raises(SystemExit) as exit_:
        script["main"](argv)
    assert exit_.value.code == 2
    err = capsys.readouterr()
    assert err.out == "" and ": error: " in err.err.strip().splitlines()[-1]  # argparse's one line


class _StandInCudaDriver:
    """What triton's launch path asks of the active driver before it compiles: a device, its
    stream, and the target (here an H100's, sm_90). Nothing is launched, so nothing more."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


@compiles
@pytest.mark.parametrize("path", ["cope", "dape"])
def test_builds_compile_through_triton_launch_path_for_an_h100(monkeypatch, path):
    """``builds()`` compiles with ``JITFunction.warmup``: triton's own launch path (argument
    binding, specialization, options, the compile), the first thing a GPU runs, untouched by the
    launcher-equality tests above (they record the launches). Here with a stand-in driver that
    names sm_90 and CPU tensors for the CUDA operands: every kernel compiles, with no warning
    (a failure would leave the GPU on the PyTorch path), and each kernel's PTX is the one
    triton_aot compiles from its config, so the resource tables describe what a GPU runs. (PTX,
    not the cubin: ptxas writes the source file's modification time into its line table.)"""
    import warnings

    from triton.runtime.driver import driver

    from synthlab.model.native import dape_triton as dt
    from synthlab.model.native.triton_build import KernelBuilds

    kernels = (
        [ct._cope_fwd_kernel, ct._cope_bwd_query_kernel, ct._cope_bwd_key_kernel]
        if path == "cope"
        else [dt._dape_fwd_kernel, dt._dape_bwd_kernel]
    )
    for kernel in kernels:  # compiles land in a fresh per-device cache, dropped after the test
        monkeypatch.setattr(kernel, "device_caches", type(kernel.device_caches)(kernel.create_binder))
    monkeypatch.setattr(driver, "_active", _StandInCudaDriver())
    empty = torch.empty
    monkeypatch.setattr(
        torch,
        "empty",
        lambda *size, device=None, **kw: empty(
            *size, device="cpu" if device is not None and torch.device(device).type == "cuda" else device, **kw
        ),
    )
    cuda = torch.device("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if path == "cope":
            monkeypatch.setattr(ct, "BUILDS", KernelBuilds("CoPE", "SYNTHLAB_COPE_TRITON"))
            # H, T, d_h, npos; T and its 7 key blocks no multiples of 16, as the configs take them
            assert ct.builds(cuda, 4, 200, 64, 64, True)
            configs = ta.cope_launch_configs(64, 64, True, "ieee")
        else:
            monkeypatch.setattr(dt, "BUILDS", KernelBuilds("DAPE", "SYNTHLAB_DAPE_TRITON"))
            assert dt.builds(cuda, 4, 8, 200, 32, 3, True, True, True)  # H, C = 2H with a bias, T, D, k
            configs = ta.dape_launch_configs(4, 32, 3, True, True, True, "ieee")
    built = {}
    for kernel in kernels:
        cache = kernel.device_caches[0][0]
        assert cache, f"{kernel.__name__} was not compiled"
        for compiled in cache.values():
            assert compiled.metadata.target.arch == 90
            built.setdefault(kernel.__name__, []).append(compiled.asm["ptx"])
    for cfg in configs:
        assert cfg.compile(90).ptx in built[cfg.name], f"{cfg.name}: the launch path compiled other code"
