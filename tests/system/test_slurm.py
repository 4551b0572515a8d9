"""`synthlab sweep --launcher slurm` against a real SLURM scheduler.

The cluster comes from $SLURM_CONF (a developer's, CI's), or from .ci/slurm.sh, which installs
Debian's slurm-wlm and munge when run as root and starts a private one-node cluster
(slurmctld + slurmd + munged); the tests that need it are skipped, with the reason, where none
can be started. The checks of bad launcher settings and of Lightning's `srun` warning need no
cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweep_kit import TINY as SWEEP_TINY

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "slurm.sh"

# the shared tiny sweep (test_sweep.py), one thread a run as a SLURM task would have
TINY = SWEEP_TINY.replace("eval_samples = 16 }", "eval_samples = 16, threads = 1 }")

# one cell long enough to stop mid-run (about a minute here), saving a checkpoint every 20 steps
LONG = ["--pe", "rope", "--seeds", "1", "--set", "steps=1500", "--set", "train.checkpoint_every=20"]
LONG_STUDY = "flipflop-smoke-steps=1500-train.checkpoint_every=20"


def slurm_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "SYNTHLAB_WORKERS": "1",
        **(extra or {}),
    }
    return env


def _sweep(args: list[str], env: dict[str, str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "synthlab.cli", "sweep", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=kw.get("cwd"),
    )


@pytest.fixture(scope="module")
def cluster() -> dict[str, str]:
    """The environment a SLURM client needs (SLURM_CONF, and the controller's log when ours)."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        pytest.skip("submitit is not installed (pip install 'synthlab-pe[slurm]')")
    if os.environ.get("SLURM_CONF"):
        return {k: v for k, v in os.environ.items() if k == "SLURM_CONF" or k.startswith("SYNTHLAB_SLURM_")}
    try:
        r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot start a SLURM cluster with {SCRIPT}: {e}")
    found = dict(re.findall(r"^export (\w+)=(.*)$", r.stdout, re.M))
    if r.returncode != 0 or "SLURM_CONF" not in found:
        reason = (r.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot start a SLURM cluster with {SCRIPT}: {reason}")
    return found


def _squeue(env: dict[str, str], name: str) -> list[tuple[str, str]]:
    out = subprocess.run(
        ["squeue", "--noheader", "--array", "--format=%i|%T", f"--name={name}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    return [tuple(line.split("|", 1)) for line in out.stdout.split()]


def _wait_until(what, timeout: float, every: float = 0.2):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = what()
        if got:
            return got
        time.sleep(every)
    return None


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def _trials(out: Path, study: str):
    import optuna

    from synthlab.study.storage import peek_storage

    return optuna.load_study(study_name=study, storage=peek_storage(str(out / "study.journal"))).get_trials()


def _submissions(env: dict[str, str]) -> list[str]:
    """The array job ids the controller's log shows submitted (empty without our cluster's log)."""
    log = env.get("SYNTHLAB_SLURM_LOG")
    if not log or not os.path.exists(log):
        return []
    return re.findall(r"_slurm_rpc_submit_batch_job: JobId=(\d+)", Path(log).read_text(errors="replace"))


# ---- no cluster needed


def test_runs_outside_a_launcher_say_nothing_of_srun(tmp_path):
    """On a machine with SLURM installed (a login node), Lightning warns on every run that `srun`
    is available but not used: a plain `synthlab train` prints no such line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    env = slurm_env({"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    for k in [k for k in env if k.startswith("SLURM_")]:
        env.pop(k)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "synthlab.cli",
            "train",
            "flipflop",
            "--pe",
            "rope",
            "--preset",
            "smoke",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    # stderr is not a terminal: only the run's own heartbeat lines, nothing of srun
    assert all(line.startswith("[train] ") for line in r.stderr.splitlines()), r.stderr
    assert "srun" not in r.stderr and "test" in r.stdout


def test_lightning_environment_inside_and_outside_slurm(monkeypatch):
    from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment

    from synthlab.run.fitting import cluster_environment

    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    assert type(cluster_environment()) is LightningEnvironment
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "synthlab-x")
    env = cluster_environment()
    assert isinstance(env, SLURMEnvironment) and env.auto_requeue is False  # submitit requeues, not Lightning
    monkeypatch.setenv("SLURM_JOB_NAME", "interactive")  # `srun --pty bash` then synthlab: one process
    assert type(cluster_environment()) is LightningEnvironment


@pytest.mark.parametrize(
    "args, says",
    [
        (["--set", "launcher.time=soon"], "--set launcher.time='soon': a time limit is"),
        (["--set", "launcher.colour=red"], "--set launcher.colour: unknown launcher setting"),
        (["--set", "launcher.array_parallelism=0"], "--set launcher.array_parallelism='0': an integer from 1"),
        (["--set", "launcher.gpus_per_task=-1"], "--set launcher.gpus_per_task='-1': an integer from 0"),
        (["--set", "launcher.partition=a b"], "--set launcher.partition='a b': a partition name"),
        (["--launcher", "local", "--set", "launcher.time=5"], "launcher settings go with --launcher slurm"),
        (["--launcher", "local", "--detach"], "--detach goes with --launcher slurm"),
        (["--workers", "2"], "--workers: not with --launcher slurm"),
        (["--batch-seeds"], "--batch-seeds: not with --launcher slurm"),
    ],
)
def test_bad_launcher_settings_exit_2_before_anything_is_written(tmp_path, args, says):
    sweep_file = tmp_path / "tiny.toml"
    sweep_file.write_text(TINY)
    out = tmp_path / "out"
    full = [str(sweep_file), "--out", str(out), *args]
    if "--launcher" not in args:
        full += ["--launcher", "slurm"]
    r = _sweep(full, slurm_env())
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.splitlines()) == 1 and says in r.stderr, r.stderr
    assert not out.exists()


def test_bad_launcher_table_in_the_sweep_file(tmp_path):
    sweep_file = tmp_path / "tiny.toml"
    sweep_file.write_text(TINY + '\n[launcher]\ntime = "1:xx"\n')
    r = _sweep([str(sweep_file), "--out", str(tmp_path / "out"), "--launcher", "slurm"], slurm_env())
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "[launcher] time='1:xx'" in r.stderr, r.stderr
    sweep_file.write_text(TINY + '\n[launcher]\nqueue = "gpu"\n')
    r = _sweep([str(sweep_file), "--out", str(tmp_path / "out"), "--launcher", "slurm"], slurm_env())
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "unknown key launcher.'queue'" in r.stderr
    assert not (tmp_path / "out").exists()


# ---- against the cluster


def test_unknown_partition_exits_2_and_submits_nothing(tmp_path, cluster):
    sweep_file = tmp_path / "tiny.toml"
    sweep_file.write_text(TINY)
    env = slurm_env(cluster)
    before = _submissions(env)
    r = _sweep(
        [str(sweep_file), "--out", str(tmp_path / "out"), "--launcher", "slurm", "--set", "launcher.partition=nosuch"],
        env,
    )
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "--set launcher.partition='nosuch': no such partition" in r.stderr
    assert not (tmp_path / "out").exists()
    assert _submissions(env) == before


@pytest.mark.slow
def test_smoke_sweep_through_sbatch_finishes_every_cell_once(tmp_path, cluster):
    sweep_file = tmp_path / "tiny.toml"
    sweep_file.write_text(TINY + '\n[launcher]\ntime = "10"\narray_parallelism = 2\n')
    out = tmp_path / "out"
    env = slurm_env(cluster)
    before = _submissions(env)
    r = _sweep([str(sweep_file), "--out", str(out), "--launcher", "slurm", "--progress-every", "5"], env)
    assert r.returncode == 0, r.stderr
    assert "study tiny-smoke: 4/4 cells finished" in r.stdout
    assert re.search(r"submitted 4 cell\(s\) to SLURM as job array (\d+)", r.stderr), r.stderr
    array = re.search(r"job array (\d+)", r.stderr).group(1)
    recs = _records(out)
    assert len(recs) == 4 and len({r["cell"] for r in recs}) == 4 and all(r["status"] == "ok" for r in recs)
    trials = _trials(out, "tiny-smoke")
    assert sorted(t.user_attrs["slurm_job"] for t in trials) == [f"{array}_{i}" for i in range(4)]
    assert all(t.state.name == "COMPLETE" for t in trials)
    if env.get("SYNTHLAB_SLURM_LOG"):  # our cluster: the controller saw the array and each task end
        assert _submissions(env) == before + [array]
        log = Path(env["SYNTHLAB_SLURM_LOG"]).read_text(errors="replace")
        for i in range(4):
            assert re.search(rf"_job_complete: JobId={array}_{i}\(\d+\) WEXITSTATUS 0", log), log[-3000:]
    # run again: everything is finished, nothing is submitted, the grids are drawn again
    r2 = _sweep([str(sweep_file), "--out", str(out), "--launcher", "slurm"], env)
    assert r2.returncode == 0 and "4/4 cells finished" in r2.stdout, r2.stderr
    assert "submitted" not in r2.stderr
    assert len(_records(out)) == 4
    if env.get("SYNTHLAB_SLURM_LOG"):
        assert _submissions(env) == before + [array]


def _checkpoint_run(out: Path) -> str | None:
    """The run id of the cell's checkpoint once one is saved (OUT/runs/.checkpoints/KEY/)."""
    for state in (out / "runs" / ".checkpoints").glob("*/run.json"):
        if (state.parent / "last.ckpt").exists():
            try:
                return json.loads(state.read_text())["run_id"]
            except (OSError, ValueError, KeyError):
                return None
    return None


@pytest.mark.slow
def test_a_cancelled_task_is_rerun_and_finished_exactly_once(tmp_path, cluster):
    out = tmp_path / "out"
    env = slurm_env(cluster)
    args = ["flipflop", "--preset", "smoke", *LONG, "--out", str(out), "--launcher", "slurm"]
    r = _sweep([*args, "--detach"], env)
    assert r.returncode == 0 and "run the same command again" in r.stderr, r.stderr
    study = LONG_STUDY
    name = f"synthlab-{study}"
    run_id = _wait_until(lambda: _checkpoint_run(out), 300)
    assert run_id, "no checkpoint saved"
    ((job, state),) = _squeue(env, name)
    assert state == "RUNNING"
    subprocess.run(["scancel", job], check=True, env=env, timeout=30)
    assert _wait_until(lambda: not _squeue(env, name), 120)
    assert not (out / "results.jsonl").exists() or not _records(out)  # stopped mid-cell: no record
    # the same command again: the cancelled task's trial is closed (its task left the queue), the
    # cell is submitted again and finished once, resuming the cancelled run from its checkpoint
    r = _sweep(args, env)
    assert r.returncode == 0, r.stderr
    assert f"SLURM task {job} left the queue without a record; its cell runs again" in r.stderr
    assert "1/1 cells finished" in r.stdout
    recs = _records(out)
    assert len(recs) == 1 and recs[0]["status"] == "ok" and recs[0]["run_id"] == run_id
    trials = sorted(_trials(out, study), key=lambda t: t.number)
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert "record" not in trials[0].user_attrs and "left the queue" in trials[0].user_attrs["stale"]
    assert trials[1].user_attrs["record"]["run_id"] == run_id


@pytest.mark.slow
def test_a_requeued_task_resumes_from_its_checkpoint(tmp_path, cluster):
    """USR2, what SLURM sends before a time limit (and a preempting scheduler): submitit requeues
    the task, which takes its trial up again and resumes the run from its checkpoint."""
    out = tmp_path / "out"
    env = slurm_env(cluster)
    args = ["flipflop", "--preset", "smoke", *LONG, "--out", str(out), "--launcher", "slurm"]
    study = LONG_STUDY
    name = f"synthlab-{study}"
    with subprocess.Popen(
        [sys.executable, "-m", "synthlab.cli", "sweep", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as p:
        try:
            run_id = _wait_until(lambda: _checkpoint_run(out), 300)
            assert run_id, "no checkpoint saved"
            ((job, state),) = _squeue(env, name)
            subprocess.run(["scancel", "--signal=USR2", job], check=True, env=env, timeout=30)
            stdout, stderr = p.communicate(timeout=600)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 0, stderr
    assert "1/1 cells finished" in stdout
    recs = _records(out)
    assert len(recs) == 1 and recs[0]["status"] == "ok" and recs[0]["run_id"] == run_id
    trials = _trials(out, study)
    assert [t.state.name for t in trials] == ["COMPLETE"] and trials[0].user_attrs["slurm_job"] == job
    log = (out / "slurm" / f"{job}_0_log.err").read_text()
    assert "this job is preempted" in log or "this job is timed-out" in log
    if env.get("SYNTHLAB_SLURM_LOG"):  # our cluster: the controller requeued the task
        assert re.search(
            rf"Requeuing JobId={job.split('_')[0]}\b", Path(env["SYNTHLAB_SLURM_LOG"]).read_text(errors="replace")
        )
    assert re.search(rf"resuming {re.escape(run_id)} at step \d+", log), log
    assert "taken up again (requeued)" in log
    assert not list((out / "runs" / ".checkpoints").glob("*/last.ckpt"))  # gone with the record
