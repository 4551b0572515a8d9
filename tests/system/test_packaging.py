"""What installs, and under which names: the repository's generators/ and sweeps/ folders are the
packages synthlab.generators and synthlab.sweeps (pyproject.toml's package-dir), never top-level
``generators`` / ``sweeps`` (PyPI projects hold those names), and nothing in the repository
imports them under their old names. The built wheel itself: tests/system/test_wheel.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from synthlab import _checkout

ROOT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]

# `import generators`, `from sweeps.x import y`, a doctest's `>>> import generators`, an entry
# point's value "generators.flipflop:FlipFlop": each names a top-level package that is not installed
OLD_IMPORT = re.compile(
    r"""^\s*(>>>\s*)?(import|from)\s+(generators|sweeps)\b|["']\s*(generators|sweeps)[.:]\w""", re.M
)


def _package_folders(folder: Path, name: str) -> set[str]:
    return {".".join([name, *p.parent.relative_to(folder).parts]) for p in folder.rglob("__init__.py")}


def test_the_packages_listed_are_the_folders_holding_an_init():
    """pyproject.toml lists the packages (package-dir maps folders discovery cannot name): a new
    subpackage left off the list would be missing from the wheel."""
    expected = _package_folders(ROOT / "synthlab", "synthlab")
    for name, folder in SETUPTOOLS["package-dir"].items():
        expected |= _package_folders(ROOT / folder, name)
    assert sorted(SETUPTOOLS["packages"]) == sorted(expected)
    assert all(p == "synthlab" or p.startswith("synthlab.") for p in SETUPTOOLS["packages"])


def test_the_checkout_finder_maps_the_folders_pyproject_maps():
    assert _checkout.FOLDERS == SETUPTOOLS["package-dir"]
    assert SETUPTOOLS["package-data"]["synthlab.sweeps"] == ["*.toml"]


def test_the_sweep_files_are_read_as_package_data_of_synthlab_sweeps():
    from synthlab.plan.sweepfile import installed_sweeps

    installed = installed_sweeps()
    assert set(installed) == {p.stem for p in (ROOT / "sweeps").glob("*.toml")}
    assert installed["flipflop"] == (ROOT / "sweeps" / "flipflop.toml").read_text(encoding="utf-8")


def _sources() -> dict[str, str]:
    """Repository path -> the text its imports are in: Python files, the Markdown docs, the
    lessons' code cells, the sweep files' comments, pyproject files (entry points)."""
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.ipynb", "*.toml"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    out = {}
    for rel in files:
        text = (ROOT / rel).read_text(encoding="utf-8")
        if rel.endswith(".ipynb"):
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code")
        out[rel] = text
    return out


def test_nothing_imports_generators_or_sweeps_by_their_old_top_level_names():
    sources = _sources()
    assert {"synthlab/run/training.py", "docs/plugins.md", "notebooks/encodings.ipynb"} <= set(sources)
    # the changelog tells users the old names; this file holds examples of them
    told = {"CHANGELOG.md", Path(__file__).relative_to(ROOT).as_posix()}
    old = {
        rel: m.group(0).strip()
        for rel, text in sources.items()
        if rel not in told
        for m in [OLD_IMPORT.search(text)]
        if m
    }
    assert not old, f"imports of the old top-level packages (use synthlab.generators / synthlab.sweeps): {old}"


def test_the_old_import_pattern_catches_what_it_is_for():
    caught = [
        "import generators",
        "    from generators.base import X",
        ">>> import generators",
        'flipflop = "generators.flipflop:FlipFlop"',
        "from sweeps import x",
    ]
    passed = [
        "from synthlab import generators",
        "import synthlab.generators",
        "from synthlab.generators import che",
        "generators/flipflop.py scores",
        "the generators import numpy",
        "sweeps/flipflop.toml",
        "task = generators.get_task('flipflop')",
    ]
    assert all(OLD_IMPORT.search(s) for s in caught)
    assert not any(OLD_IMPORT.search(s) for s in passed)


def _import_in(tree: Path, code: str) -> subprocess.CompletedProcess:
    """``code`` run with ``tree`` alone on the import path (-S: no site-packages, where an install
    of synthlab would answer first)."""
    env = {"PYTHONPATH": str(tree), "PATH": os.environ.get("PATH", "")}
    return subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=tree, env=env, capture_output=True, text=True, timeout=60
    )


def _copy_tree(dest: Path, *, with_pyproject: bool) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "_version.py")
    for folder in ("synthlab", "generators", "sweeps"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    if with_pyproject:
        shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


FIND = (
    "import importlib.util as u, json; "
    "print(json.dumps({n: getattr(u.find_spec(n), 'origin', None) for n in "
    "['synthlab.generators', 'synthlab.sweeps']}))"
)


def test_a_checkout_imported_without_an_install_finds_its_generators_and_sweeps(tmp_path):
    tree = _copy_tree(tmp_path, with_pyproject=True)
    proc = _import_in(tree, FIND)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["synthlab.generators"] == str(tree / "generators" / "__init__.py")
    assert found["synthlab.sweeps"] == str(tree / "sweeps" / "__init__.py")
    sweeps = _import_in(
        tree,
        "from importlib import resources; print(sorted(e.name for e in resources.files('synthlab.sweeps').iterdir()))",
    )
    assert "flipflop.toml" in sweeps.stdout, sweeps.stderr


def test_folders_named_generators_beside_an_installed_synthlab_are_not_taken_for_its_own(tmp_path):
    """No pyproject.toml beside the package (site-packages): a top-level ``generators`` there
    (another project's) is never imported as synthlab.generators."""
    tree = _copy_tree(tmp_path, with_pyproject=False)
    proc = _import_in(tree, FIND)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["synthlab.generators"] is None and found["synthlab.sweeps"] is None
