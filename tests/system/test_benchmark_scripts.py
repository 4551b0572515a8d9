"""The scripts in benchmarks/ still start against today's modules (they import internals that
move, e.g. ``fit`` into synthlab.run.fitting), each run from its own folder as a user would.
Nothing here times anything: the scripts print the ratios."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=BENCHMARKS)


# Runs each argv of a JSON list (stdin) as `python SCRIPT ARGS...` would, one after the other in
# this one process (runpy, the script's folder first on sys.path), and writes per argv its exit
# code, stdout and stderr as JSON to the file named by argv[1]. Only commands that stop after
# parsing their arguments (--help, a missing GPU) go through it: one interpreter that imports
# torch once instead of one a command (CI's 2 cores: 2-4 s each).
PARSE_ONLY = r"""
import contextlib, io, json, os, runpy, sys, traceback
jobs = json.load(sys.stdin)
sys.path.insert(0, os.getcwd())
results = []
for argv in jobs:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = list(argv)
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append({"argv": argv, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
with open(os.environ["PARSE_ONLY_OUT"], "w") as f:
    json.dump(results, f)
"""


def _parse_only(jobs: list[list[str]], tmp: Path) -> list[dict]:
    """Each argv of ``jobs`` run from benchmarks/ in one child process (``PARSE_ONLY``), with no
    GPU visible: [{"argv", "returncode", "stdout", "stderr"}] in the order given."""
    import json
    import os

    result = tmp / "parse-only.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PARSE_ONLY_OUT": str(result)}
    proc = subprocess.run(
        [sys.executable, "-c", PARSE_ONLY],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCHMARKS,
        env=env,
    )
    assert proc.returncode == 0 and result.is_file(), proc.stderr[-2000:]
    return json.loads(result.read_text())


SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py"))


@pytest.fixture(scope="module")
def helps(tmp_path_factory) -> dict[str, dict]:
    """script -> what `python SCRIPT --help` did, all in one child process."""
    done = _parse_only([[script, "--help"] for script in SCRIPTS], tmp_path_factory.mktemp("bench-help"))
    return {r["argv"][0]: r for r in done}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_script_imports_and_shows_its_help(script, helps):
    proc = helps[script]
    assert proc["returncode"] == 0, proc["stderr"][-2000:]
    assert "usage:" in proc["stdout"]


@pytest.mark.slow
def test_the_training_benchmark_runs_both_loops():
    proc = _run("training.py", "--steps", "4", "--skip-mfu", "--threads", "1", timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.split()[:1] == ["rope"]]
    assert rows and len(rows[0]) == 5  # pe, plain ms, synthlab ms, ratio, against the first encoding


@pytest.mark.slow
def test_the_training_benchmark_runs_under_bf16_autocast():
    proc = _run(
        "training.py",
        "--steps",
        "4",
        "--skip-mfu",
        "--threads",
        "1",
        "--encodings",
        "cope",
        "--precision",
        "bf16-mixed",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bf16-mixed" in proc.stdout and any(ln.split()[:1] == ["cope"] for ln in proc.stdout.splitlines())


def test_the_data_loader_benchmark_runs_in_process_and_with_a_worker():
    proc = _run("data_loader.py", "--batches", "3", "--workers", "0,1", "--step-ms", "0", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.split()[:1] == ["flipflop"]]
    assert len(rows) == 2 and all(len(r) == 8 for r in rows)  # task, preset, B, T, 2 x (cpu (wall))


def test_the_attention_kernel_benchmark_runs_on_cpu():
    proc = _run("attention_kernels.py", "--rounds", "1", "--k", "3", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {ln.split("|")[1].strip(): ln for ln in proc.stdout.splitlines() if ln.startswith("| ") and "---" not in ln}
    assert {"sdpa", "cope pytorch", "cope fused", "cope term fused", "dape:k=3 pytorch", "dape:k=3 fused"} <= set(
        rows
    ), rows
    assert rows["cope fused"].rstrip(" |").endswith("x")  # its ratio over the PyTorch path
    assert rows["cope term fused"].rstrip(" |").endswith("x")
    # which instruction set the kernels were built for, and how
    assert re.search(r"native kernels: .*\[(avx512f|avx2\+fma|avx2|avx|neon|sse2|scalar)\].* -march=", proc.stdout)


def test_the_step_profile_runs_on_cpu(tmp_path):
    proc = _run(
        "profile_step.py",
        "--pe",
        "rope",
        "--size",
        "host",
        "--warmup",
        "2",
        "--steps",
        "2",
        "--threads",
        "1",
        "--trace-dir",
        str(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "== rope" in proc.stdout and "host (CPU) time a step" in proc.stdout
    assert (tmp_path / "trace-rope.json").stat().st_size > 0


def test_the_gpu_paper_script_trains_each_encoding_once(tmp_path):
    # scripts/gpu_paper.py (the paper-scale check on a lent GPU), dry at the smoke preset
    script = BENCHMARKS.parent / "scripts" / "gpu_paper.py"
    for _ in range(2):
        proc = _run(str(script), str(tmp_path), "--pe", "rope", "--preset", "smoke", timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert "nothing (every record is there)" in proc.stdout
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3


def _kit_commands() -> list[list[str]]:
    """Every `python3 benchmarks/...` command line of scripts/gpu_session.sh, as argv lists."""
    import shlex

    text = (BENCHMARKS.parent / "scripts" / "gpu_session.sh").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if "python3 benchmarks/" in line:
            argv = shlex.split(line[line.index("python3 benchmarks/") :])
            out.append([a.replace("$out", "/tmp/kit-out") for a in argv[1:]])
    return out


def test_every_gpu_kit_benchmark_command_parses(tmp_path):
    # a GPU session is rare and short: an option the script no longer takes must fail here, on
    # CPU. A --device cuda command parses all its arguments and then stops at the missing GPU
    # (none is made visible to the child).
    commands = _kit_commands()
    assert len(commands) >= 8
    jobs = [
        [Path(argv[0]).name, *argv[1:]]
        if "--device" in argv[1:]
        # no GPU check before it would run: its options are validated up to --help
        else [Path(argv[0]).name, *argv[1:], "--help"]
        for argv in commands
    ]
    for argv, proc in zip(commands, _parse_only(jobs, tmp_path), strict=True):
        if "--device" in argv[1:]:
            assert proc["returncode"] == 2 and "no CUDA device is visible" in proc["stderr"], (
                argv,
                proc["stderr"][-500:],
            )
        else:
            assert proc["returncode"] == 0 and "usage:" in proc["stdout"], (argv, proc["stderr"][-500:])


def test_the_kit_paper_sweep_counts_against_the_grid_it_runs():
    # gpu_session.sh papersweep prints "K of 48 paper cells finished": 48 must be the grid that
    # `synthlab sweep flipflop --pe cope,rope --preset paper` runs (CoPE Table 8's, 3 seeds)
    from synthlab.study import sweeping

    text = (BENCHMARKS.parent / "scripts" / "gpu_session.sh").read_text()
    assert "sweep flipflop --pe cope,rope --preset paper" in text and "of 48 paper cells" in text
    cells = sweeping.expand_cells(sweeping.load_sweep("flipflop"), "paper", ["cope", "rope"])
    assert len(cells) == 48
