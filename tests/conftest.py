"""Shared test setup: a PostgreSQL server that this pytest session started is stopped at its end;
`synthlab sweep` without --workers runs one process (the tests stand fake trainers in for the
real one in-process, which helper processes would not see; a test that wants workers says so).

tests/integration/test_postgres.py starts a private server with .ci/postgres.sh when
$SYNTHLAB_PG_URL is not set; a server that was running before the session (CI's, a developer's)
is left alone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

os.environ["SYNTHLAB_WORKERS"] = "1"  # synthlab.workers.ENV_DEFAULT; the CLI's own default is auto

PG_SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "postgres.sh"
_WAS_RUNNING = pytest.StashKey[bool]()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread avoids OpenMP start-up costs on a busy 2-core machine
    (a module asks for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _pg(command: str) -> int:
    try:
        return subprocess.run(["bash", str(PG_SCRIPT), command], capture_output=True, timeout=120).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 1


def pytest_sessionstart(session) -> None:
    session.config.stash[_WAS_RUNNING] = not PG_SCRIPT.is_file() or _pg("status") == 0


def pytest_sessionfinish(session, exitstatus) -> None:
    if not session.config.stash.get(_WAS_RUNNING, True) and _pg("status") == 0:
        _pg("stop")
