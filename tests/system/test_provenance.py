"""Where a run came from, as its record says: the machine and the releases (synthlab.run.machine),
synthlab's version (setuptools-scm's version file, synthlab/__init__.py) and the commit
(synthlab.run.rundir.git_hash), for a checkout, an installed wheel and a bare source tree."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy
import pytest

import synthlab
from synthlab.run import machine, rundir

PACKAGE = Path(synthlab.__file__).resolve().parent


def test_describe_names_the_releases_a_run_depends_on():
    m = machine.describe()
    assert m["python"] == platform.python_version()
    assert m["numpy"] == numpy.__version__
    assert m["optuna"] == importlib.metadata.version("optuna")
    assert m["lightning"] == importlib.metadata.version("lightning")
    assert m["torch"] and m["cpu"] and m["arch"] and m["isa"]
    assert "gpu" not in m and "gpu" not in machine.describe("cpu")


def test_describe_is_a_fresh_dict_each_time():
    m = machine.describe()
    m["cpu"] = "changed by one record"
    assert machine.describe()["cpu"] != "changed by one record"


def test_a_cuda_run_records_its_gpu(monkeypatch):
    import torch

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: asked.append(d) or "NVIDIA H200")
    assert machine.describe(torch.device("cuda", 0))["gpu"] == "NVIDIA H200"
    assert machine.describe("cuda")["gpu"] == "NVIDIA H200"
    assert asked == [torch.device("cuda", 0), torch.device("cuda")]


def test_a_missing_library_reads_as_empty_not_an_error():
    assert machine._version_of("no_such_module_synthlab_test") == ""


def test_label_reads_old_and_new_records():
    old = {"cpu": "AMD EPYC", "arch": "x86_64", "isa": "avx2", "torch": "2.13.0"}
    assert machine.label(old) == "AMD EPYC (x86_64, avx2), torch 2.13.0"
    assert machine.label({**old, "python": "3.11.9", "numpy": "2.4.6"}) == machine.label(old)
    assert machine.label({**old, "gpu": "NVIDIA H200"}) == "AMD EPYC (x86_64, avx2), torch 2.13.0, NVIDIA H200"
    assert machine.label(None) == "not recorded"


def test_a_record_says_which_vector_set_torchs_kernels_used():
    """ATEN_CPU_CAPABILITY lowers torch's own kernels (and so the rounding) below the CPU's widest
    set: the record keeps it, and the report's machine label shows it where the two differ."""
    import torch

    assert machine.describe()["torch_isa"] == torch.backends.cpu.get_cpu_capability()
    code = (
        "import json, torch; from synthlab.run import machine; "
        "print(json.dumps([machine.describe(), machine.vector_paths()]))"
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}  # every x86 and ARM CPU has it
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    m, line = json.loads(out.stdout)
    assert m["torch_isa"] == "DEFAULT"
    assert "torch's kernels DEFAULT" in line and "capped: ATEN_CPU_CAPABILITY=default" in line
    assert machine.label(m).startswith(f"{m['cpu']} ({m['arch']}, {m['isa']}, torch's kernels DEFAULT)")
    same = {"cpu": "AMD EPYC", "arch": "x86_64", "isa": "avx2", "torch": "2.13.0", "torch_isa": "AVX2"}
    assert machine.label(same) == "AMD EPYC (x86_64, avx2), torch 2.13.0"


def _copy_package(dest: Path) -> Path:
    """synthlab's sources alone under ``dest`` (no version file, no .git): a bare source tree."""
    target = dest / "synthlab"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "_version.py"))
    return target


def _ask(path: Path) -> list[str]:
    code = "import synthlab; from synthlab.run import rundir; print(synthlab.__version__); print(rundir.git_hash())"
    # -S: no site-packages, where an editable install of synthlab would be found before PYTHONPATH
    env = {"PYTHONPATH": str(path), "PATH": os.environ.get("PATH", "")}
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=path, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_source_tree_never_installed_has_no_version_and_no_hash(tmp_path):
    _copy_package(tmp_path)
    assert _ask(tmp_path) == ["0+unknown", "None"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_installed_wheel_names_the_commit_it_was_built_from_not_the_enclosing_repository(tmp_path):
    # a venv inside some other project's repository: `git rev-parse` there answers that project's hash
    repo = tmp_path / "project"
    site = repo / "venv" / "site-packages"
    site.mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "other"], check=True)
    pkg = _copy_package(site)
    (pkg / "_version.py").write_text(
        "__version__ = version = '0.2.1.dev3+g1a2b3c4d5'\n__commit_id__ = commit_id = 'g1a2b3c4d5'\n"
    )
    assert _ask(site) == ["0.2.1.dev3+g1a2b3c4d5", "1a2b3c4"]


def test_built_from_reads_the_version_when_the_file_has_no_commit(monkeypatch):
    fake = type(sys)("synthlab._version")
    fake.version = "0.2.1.dev3+gabcdef12.d20261128"
    monkeypatch.setitem(sys.modules, "synthlab._version", fake)
    monkeypatch.setattr(synthlab, "_version", fake, raising=False)
    assert rundir.built_from() == "abcdef1"
    fake.version = "0.2.0"  # the tagged release itself: no hash in the version
    assert rundir.built_from() is None


def test_this_checkout_gives_its_own_hash():
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=PACKAGE, capture_output=True, text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != PACKAGE.parent:
        pytest.skip("synthlab is not run from a git checkout here")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PACKAGE, capture_output=True, text=True)
    assert rundir.git_hash() == head.stdout.strip()
