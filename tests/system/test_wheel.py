"""The built wheel: everything under synthlab/ (generators and the sweep files inside it, no
top-level generators/ or sweeps/), and what it holds imports and reads from an empty directory.
Built offline with this environment's setuptools and setuptools-scm (the test extra's)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _build_requirements_missing() -> str | None:
    """Why the wheel cannot be built without downloading anything, or None."""
    if importlib.util.find_spec("setuptools_scm") is None:
        return "setuptools-scm is not installed (pip install -e '.[test]')"
    major = int(importlib.metadata.version("setuptools").split(".")[0])
    if major < 77:
        return f"setuptools {importlib.metadata.version('setuptools')} is older than pyproject's build floor 77"
    if not (ROOT / ".git").exists():
        return "not a git checkout (setuptools-scm reads the version from git)"
    return None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    missing = _build_requirements_missing()
    if missing:
        pytest.skip(missing)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("synthlab_pe-*.whl")
    return path


def test_the_wheel_installs_everything_inside_synthlab(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"synthlab"}, tops
    sweep_files = {p.name for p in (ROOT / "sweeps").glob("*.toml")}
    assert {
        n.rpartition("/")[2] for n in names if n.startswith("synthlab/sweeps/") and n.endswith(".toml")
    } == sweep_files
    for module in (
        "synthlab/generators/__init__.py",
        "synthlab/generators/che/cs.py",
        "synthlab/generators/plugins.py",
        "synthlab/sweeps/__init__.py",
        "synthlab/py.typed",
        "synthlab/model/native/parallel.h",
        "synthlab/_version.py",
    ):
        assert module in names, module
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert all(zipfile.ZipFile(wheel).read(n).decode().split() == ["synthlab"] for n in top_level)


def test_the_unpacked_wheel_imports_its_generators_and_sweeps_from_an_empty_directory(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    empty = tmp_path / "empty"
    empty.mkdir()
    code = (
        "import json, synthlab.generators as g\n"
        "from synthlab.plan.sweepfile import installed_sweeps\n"
        "print(json.dumps({'synthlab': __import__('synthlab').__file__, 'generators': g.__file__,\n"
        "    'tasks': len(g.TASKS), 'sweeps': sorted(installed_sweeps())}))"
    )
    # the unpacked wheel first on the path; the dependencies from this environment
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["synthlab"] == str(site / "synthlab" / "__init__.py")
    assert got["generators"] == str(site / "synthlab" / "generators" / "__init__.py")
    assert got["tasks"] == 23
    assert got["sweeps"] == sorted(p.stem for p in (ROOT / "sweeps").glob("*.toml"))
