"""Plugins from outside the package: a distribution installed in the test (a copy of
tests/plugin_pkg, pip-installed into a temporary --target directory, found through its
.dist-info on PYTHONPATH, so the venv is never changed) adds a task and an encoding that
`synthlab tasks`, `synthlab encodings` and `synthlab train` use; a distribution of broken entry
points warns one line each and changes nothing else; a plugin whose module registers itself on
import (``@synthlab.generators.register``) is taken without a warning."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synthlab import generators
from synthlab.model.registry import COMPONENTS

PLUGIN_PKG = Path(__file__).resolve().parents[1] / "plugin_pkg"
BROKEN = "synthlab-plugin-broken 0.0.1"
# entry point -> what its warning must say (each broken in one way)
BROKEN_TASKS = {
    "missing_task": ("synthlab_no_such_module:Task", "ModuleNotFoundError"),
    "flipflop": ("synthlab.generators.flipflop:FlipFlop", "task 'flipflop' is already registered"),
    "not_a_task": ("synthlab.generators:Param", "not a synthlab.generators.Task subclass"),
    "renamed": ("synthlab.generators.flipflop:FlipFlop", "the task's name is 'flipflop'"),
}
SELF_REGISTERED = (
    "self_registered = synthlab_plugin_selfreg_task:SelfRegistered",
    "self-registered = synthlab_plugin_selfreg_pe:ROW",
)
BROKEN_ENCODINGS = {
    "rope": ("synthlab_plugin_broken:ROPE", "encoding 'rope' is already registered"),
    "raises": ("synthlab_plugin_raises:ROW", "RuntimeError: broken on purpose"),
    "not_a_row": ("synthlab_plugin_broken:NOT_A_ROW", "not a synthlab.model.registry.Encoding row"),
}


@pytest.fixture(scope="module")
def broken_dist(tmp_path_factory) -> Path:
    """A directory holding an installed distribution (its .dist-info written out, as pip would)
    whose entry points are broken, but for one task and one encoding that register themselves
    when their module is imported."""
    root = tmp_path_factory.mktemp("broken")
    (root / "synthlab_plugin_broken.py").write_text(
        "from synthlab.model.registry import Encoding\n"
        "ROPE = Encoding('rope', 'rotary', 'a second rope', 'none', build='synthlab_plugin_broken:Nothing')\n"
        "NOT_A_ROW = 'rope'\n"
    )
    (root / "synthlab_plugin_selfreg_task.py").write_text(
        "from synthlab import generators\n"
        "from synthlab.generators.flipflop import FlipFlop\n"
        "@generators.register\n"
        "class SelfRegistered(FlipFlop):\n"
        "    name = 'self_registered'\n"
    )
    (root / "synthlab_plugin_selfreg_pe.py").write_text(
        "from synthlab.model.registry import Encoding, register\n"
        "ROW = register(Encoding('self-registered', 'bias', 'ALiBi again', 'none', build='.encoders.bias:ALiBi'))\n"
    )
    (root / "synthlab_plugin_raises.py").write_text("raise RuntimeError('broken on purpose')\n")
    info = root / "synthlab_plugin_broken-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: synthlab-plugin-broken\nVersion: 0.0.1\n")
    groups = {"synthlab.tasks": BROKEN_TASKS, "synthlab.encodings": BROKEN_ENCODINGS}
    (info / "entry_points.txt").write_text(
        "".join(
            f"[{g}]\n" + "".join(f"{name} = {value}\n" for name, (value, _) in eps.items()) + f"{self_reg}\n\n"
            for (g, eps), self_reg in zip(groups.items(), SELF_REGISTERED)
        )
    )
    return root


def _run(argv: list[str], path: list[Path], cwd: Path, python: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, path), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, *argv] if python else [sys.executable, "-m", "synthlab.cli", *argv]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _check_warnings(stderr: str, broken: dict[str, tuple[str, str]], what: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.startswith(f"synthlab: warning: {what} plugin ")]
    assert len(lines) == len(broken), stderr
    for name, (value, reason) in broken.items():
        line = next(ln for ln in lines if ln.startswith(f"synthlab: warning: {what} plugin {name!r} "))
        assert f"({BROKEN}, {value}) skipped: " in line and reason in line, line


def test_broken_plugins_warn_once_each_and_are_skipped(broken_dist, tmp_path):
    tasks = _run(["tasks", "--names"], [broken_dist], tmp_path)
    assert tasks.returncode == 0, tasks.stderr
    assert tasks.stdout.split() == [*generators.TASKS, "self_registered"]  # the built-ins, the good one
    _check_warnings(tasks.stderr, BROKEN_TASKS, "task")
    assert "encoding plugin" not in tasks.stderr  # listing tasks loads no encoding plugin

    encodings = _run(["encodings", "--json"], [broken_dist], tmp_path)
    assert encodings.returncode == 0, encodings.stderr
    rows = json.loads(encodings.stdout)
    assert [r["name"] for r in rows if r["kind"] != "index"] == [*COMPONENTS, "self-registered"]
    assert {r["name"]: r["plugin"] for r in rows if r["plugin"]} == {"self-registered": BROKEN}
    assert next(r for r in rows if r["name"] == "rope")["description"] == COMPONENTS["rope"].description
    _check_warnings(encodings.stderr, BROKEN_ENCODINGS, "encoding")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """tests/plugin_pkg installed (pip) into a temporary --target directory."""
    src = tmp_path_factory.mktemp("src") / "plugin_pkg"
    shutil.copytree(PLUGIN_PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path_factory.mktemp("site")
    # the build backend from this environment when it has one (offline); else pip's isolated build
    local = ["--no-build-isolation", "--no-index"] if importlib.util.find_spec("setuptools") else []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *local, "--target", str(target), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(target.glob("synthlab_plugin_demo-0.1.0.dist-info"))
    return target


@pytest.mark.slow
def test_an_installed_plugin_lists_and_trains(installed, broken_dist, tmp_path):
    path = [installed, broken_dist]  # a broken plugin beside it changes nothing for the good one
    demo = "synthlab-plugin-demo 0.1.0"

    tasks = _run(["tasks"], path, tmp_path)
    assert tasks.returncode == 0, tasks.stderr
    row = next(ln for ln in tasks.stdout.splitlines() if ln.startswith("plugin_task "))
    assert row.split()[1:4] == ["plugin_demo", "train,test,ood", "n=6"] and row.endswith(demo)
    assert next(ln for ln in tasks.stdout.splitlines() if ln.startswith("flipflop ")).endswith(" -")
    _check_warnings(tasks.stderr, BROKEN_TASKS, "task")

    # listing encodings imports no torch, plugin rows included (their module is a lazy path)
    script = (
        "import sys; from synthlab.cli import main; code = main(['encodings']); "
        "assert 'torch' not in sys.modules, 'torch imported'; raise SystemExit(code)"
    )
    encodings = _run(["-c", script], path, tmp_path, python=True)
    assert encodings.returncode == 0, encodings.stderr
    row = next(ln for ln in encodings.stdout.splitlines() if ln.startswith("plugin_pe "))
    assert row.split()[1:3] == ["bias", "w0=0.1"] and row.endswith(demo)

    out = tmp_path / "runs"
    train = _run(
        [
            "train",
            "plugin_task",
            "--pe",
            "plugin_pe+dape",
            "--out",
            str(out),
            *[
                a
                for kv in ("steps=20", "d_model=16", "n_layers=1", "n_heads=2", "batch_size=8", "eval_samples=8")
                for a in ("--set", kv)
            ],
        ],
        path,
        tmp_path,
    )
    assert train.returncode == 0, train.stderr
    assert train.stdout.startswith("plugin_task  pe=plugin_pe+dape  seed=0  status=ok")
    (rec,) = [json.loads(ln) for ln in (out / "results.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok" and rec["task"] == "plugin_task" and rec["pe"] == "plugin_pe+dape"
    assert rec["task_params"] == {"n": 6, "ood_n": 9} and rec["pe_params"]["plugin_pe"] == {"w0": 0.1}
    assert set(rec["metrics"]) == {"test", "ood"}
    assert (out / rec["run_id"] / "model.safetensors").is_file()
