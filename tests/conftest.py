"""Shared test setup: a PostgreSQL server that this pytest session started is stopped at its end;
`synthlab sweep` without --workers runs one process (the tests stand fake trainers in for the
real one in-process, which helper processes would not see; a test that wants workers says so).

tests/system/test_postgres.py starts a private server with .ci/postgres.sh when
$SYNTHLAB_PG_URL is not set; a server that was running before the session (CI's, a developer's)
is left alone. tests/system/test_slurm.py likewise starts a one-node SLURM cluster with
.ci/slurm.sh when $SLURM_CONF is not set; one this session started is stopped at its end.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

os.environ["SYNTHLAB_WORKERS"] = "1"  # synthlab.study.workers.ENV_DEFAULT; the CLI's own default is auto

PG_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres.sh"
SLURM_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "slurm.sh"
_WAS_RUNNING = pytest.StashKey[bool]()
_SLURM_WAS_RUNNING = pytest.StashKey[bool]()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread avoids OpenMP start-up costs on a busy 2-core machine
    (a module asks for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tasks_built_once(monkeypatch):
    """synthlab.generators.get_task builds a task once per distinct name and parameters for the test
    that asks (configuration checks that resolve every sweep cell, some two or three times: a
    binfa / nfa task's build checks its automata's label rates, 0.1 s a build). The task's own
    checks still run, once per parameter set."""
    import json

    from synthlab import generators

    built: dict[str, object] = {}
    get_task = generators.get_task

    def once(task: str, **params):
        key = json.dumps([task, params], sort_keys=True, default=repr)
        if key not in built:
            built[key] = get_task(task, **params)
        return built[key]

    monkeypatch.setattr(generators, "get_task", once)


INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``interpreted`` (Triton kernels on CPU tensors) run only under Triton's
    interpreter, which must be chosen before triton is first imported (triton.jit reads
    TRITON_INTERPRET when a function is decorated; torch imports triton early) and would then
    stay on for the whole process: so they run in a child pytest process of their file
    (``interpreted_child``) and are skipped here."""
    if INTERPRETER:
        return
    skip = pytest.mark.skip(reason="runs in its file's test_kernels_under_the_interpreter (TRITON_INTERPRET=1 child)")
    for item in items:
        if "interpreted" in item.keywords:
            item.add_marker(skip)


# the files whose tests ask for ``interpreted_child``: one xdist process takes them all, so the
# session's one interpreter child (``_interpreted_run``, which covers every such file) runs once
INTERPRETED_FILES = "test_triton_*.py"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (scripts/test.sh), with the interpreted files as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return INTERPRETED_FILES if Path(scope).match(INTERPRETED_FILES) else scope

    return Scheduling(config, log)


@pytest.fixture(scope="session")
def _interpreted_run(request, tmp_path_factory):
    """One child pytest process with TRITON_INTERPRET=1 over every file of this session that asks
    for ``interpreted_child`` (torch and triton imported once, not once a file): the files, the
    child's exit code and output, and its per-test outcomes (junit XML) as
    {file: {"passed": n, "failed": [test ids]}}."""
    import sys
    import xml.etree.ElementTree as ET

    if INTERPRETER:
        pytest.skip("the parent of the interpreter run")
    broken = _interpreter_broken_by_numpy()
    if broken:
        pytest.skip(broken)
    root = Path(__file__).resolve().parents[1]
    files = sorted(
        {
            Path(str(item.fspath)).resolve()
            for item in request.session.items
            if "interpreted_child" in getattr(item, "fixturenames", ())
        }
    )
    xml = tmp_path_factory.mktemp("interpreted") / "junit.xml"
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *map(str, files), "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900 * len(files),
    )
    out = proc.stdout + proc.stderr
    outcomes: dict[Path, dict] = {f: {"passed": 0, "failed": []} for f in files}
    modules = {".".join(f.relative_to(root).with_suffix("").parts): f for f in files}
    if xml.is_file():
        for case in ET.parse(xml).iter("testcase"):
            classname = case.get("classname", "")
            module = next((m for m in modules if classname == m or classname.startswith(m + ".")), None)
            if module is None:
                continue
            verdict = {child.tag for child in case}
            if verdict & {"failure", "error"}:
                outcomes[modules[module]]["failed"].append(case.get("name"))
            elif "skipped" not in verdict:
                outcomes[modules[module]]["passed"] += 1
    return proc.returncode, out, outcomes


@pytest.fixture
def interpreted_child(_interpreted_run):
    """run(test_file): the file's tests, run in the session's one child pytest process with
    TRITON_INTERPRET=1 (``_interpreted_run``), all passed, at least as many as the file marks
    ``@pytest.mark.interpreted``. Skips in the child itself (the test that asks for it is the
    parent's)."""
    returncode, out, outcomes = _interpreted_run

    def run(test_file: str, timeout: int = 900) -> None:  # timeout: the child's is 900 s a file
        here = Path(test_file).resolve()
        got = outcomes.get(here)
        assert got is not None, f"{here} was not in the interpreter run"
        n_interpreted = sum(1 for line in here.read_text().splitlines() if line.strip() == "@pytest.mark.interpreted")
        assert returncode in (0, 1), out[-6000:]  # 1: some test failed (which, below); else the run broke
        assert not got["failed"] and got["passed"] >= n_interpreted, (got, out[-6000:])

    return run


def _version(text: str) -> tuple[int, int]:
    return tuple(int(x) for x in text.split(".")[:2])


def _interpreter_broken_by_numpy() -> str | None:
    """Why Triton's interpreter cannot run here, or None. Before triton 3.7 it turns a kernel's
    scalar into a Python int with ``int(array)`` on a one-element array (a loop bound like
    ``range(0, last_block + 1)``), which numpy 2.4 refuses (TypeError): every kernel test would fail
    inside triton, not in the kernels. (Seen with triton 3.6, the GPU machines' release, and numpy
    2.4 / 2.5; the same tests pass with 3.6 and numpy 2.3, and with 3.7's fix.)"""
    import numpy
    import triton

    if _version(triton.__version__) < (3, 7) and _version(numpy.__version__) >= (2, 4):
        return (
            f"triton {triton.__version__}'s interpreter cannot run with numpy {numpy.__version__} "
            f"(fixed in triton 3.7; numpy < 2.4 also works)"
        )
    return None


def _script(command: str, script: Path = PG_SCRIPT) -> int:
    try:
        return subprocess.run(["bash", str(script), command], capture_output=True, timeout=120).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 1


def pytest_sessionstart(session) -> None:
    session.config.stash[_WAS_RUNNING] = not PG_SCRIPT.is_file() or _script("status") == 0
    session.config.stash[_SLURM_WAS_RUNNING] = not SLURM_SCRIPT.is_file() or _script("status", SLURM_SCRIPT) == 0


def pytest_sessionfinish(session, exitstatus) -> None:
    if not session.config.stash.get(_WAS_RUNNING, True) and _script("status") == 0:
        _script("stop")
    if not session.config.stash.get(_SLURM_WAS_RUNNING, True) and _script("status", SLURM_SCRIPT) == 0:
        _script("stop", SLURM_SCRIPT)
