"""Two `synthlab sweep` workers share one study on a real PostgreSQL server.

The server comes from $SYNTHLAB_PG_URL, or from .ci/postgres.sh (which installs the Debian
package when run as root and starts a private server on 127.0.0.1:54329). The test is skipped,
with the reason, only where no server can be started or no driver (psycopg 3, or psycopg2) is
installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from synthlab.analysis import grids
from synthlab.study import sweeping

TINY = """
[sweep]
task = "flipflop"
default_preset = "smoke"
metric = "token_acc"
show = "error"
ood = ["ood-sparse"]

[axes]
pe = ["rope", "nope"]
seed = [0, 1, 2]

[presets.smoke]
task = { n_pairs = 8 }
model = { d_model = 16, n_layers = 1, n_heads = 2 }
train = { steps = 10, batch_size = 8, warmup = 0, eval_samples = 16 }

[presets.quick]
[presets.paper]
"""

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pg_url() -> str:
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is None:
        pytest.skip("psycopg is not installed (pip install 'synthlab-pe[postgres]')")
    url = os.environ.get("SYNTHLAB_PG_URL")
    if not url:
        script = ROOT / ".ci" / "postgres.sh"
        try:
            r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"cannot start PostgreSQL with {script}: {e}")
        if r.returncode != 0 or not r.stdout.strip():
            reason = (r.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"cannot start PostgreSQL with {script}: {reason}")
        url = r.stdout.strip().splitlines()[-1]
    try:
        sweeping.check_storage(url)
    except ValueError as e:
        pytest.skip(f"PostgreSQL at {url} is not reachable: {e}")
    return url


@pytest.fixture
def fresh_db(pg_url: str):
    """A new, empty database on the server: the workers race to create Optuna's tables in it,
    as two machines do on the first run of a study."""
    import sqlalchemy

    name = f"synthlab_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(sweeping.normalize_url(pg_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    yield pg_url.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.mark.slow
def test_two_workers_share_a_postgres_study(tmp_path, fresh_db):
    pg_url = fresh_db
    import optuna
    from optuna.trial import TrialState

    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    study = f"pg-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    # two machines: separate output directories, one storage URL and study name
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "synthlab.cli",
                "sweep",
                str(path),
                "--storage",
                pg_url,
                "--study",
                study,
                "--out",
                str(tmp_path / f"worker{i}"),
                "--quiet",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (so, se) in zip(procs, outs):
        assert p.returncode == 0, se
        assert "6/6 cells finished" in so
    st = optuna.load_study(study_name=study, storage=sweeping.open_storage(pg_url))
    done = [t for t in st.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    keys = [t.user_attrs["cell_key"] for t in done]
    assert len(keys) == 6 == len(set(keys))
    # each worker's own JSONL holds what it ran; together: every cell exactly once
    recs = []
    for i in range(2):
        f = tmp_path / f"worker{i}" / "results.jsonl"
        if f.exists():
            recs += grids.read_results(f)
    assert sorted((r["pe"], r["train"]["seed"]) for r in recs) == sorted(
        (pe, s) for pe in ("rope", "nope") for s in (0, 1, 2)
    )
    # and each worker rebuilt the full grid from the study
    for i in range(2):
        assert len(grids.read_results(tmp_path / f"worker{i}" / "study-results.jsonl")) == 6
