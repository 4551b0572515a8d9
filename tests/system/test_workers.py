"""`synthlab sweep --workers N|auto`: several processes on one grid, exactly once, stopped together."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from sweep_kit import TINY, child_env, completed_keys, study_trials, sweep_cmd, wait_running, write_sweep
from synthlab.analysis import grids
from synthlab.study import workers


@pytest.mark.parametrize("value, want", [("1", 1), ("3", 3), (2, 2), ("auto", "auto"), ("AUTO", "auto")])
def test_parse_workers(value, want):
    assert workers.parse_workers(value) == want


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "", None, True])
def test_bad_workers_value_is_a_value_error(value):
    with pytest.raises(ValueError, match="--workers must be a positive integer or 'auto'"):
        workers.parse_workers(value)


def test_resolve_never_starts_more_workers_than_cells(monkeypatch):
    monkeypatch.setattr(workers, "cpu_cores", lambda: 8)
    monkeypatch.setattr(workers, "gpu_count", lambda: 0)
    assert workers.resolve("auto", 100) == 8 and workers.resolve("auto", 3) == 3 and workers.resolve(5, 2) == 2
    assert workers.threads_per_worker(2) == 4 and workers.threads_per_worker(16) == 1
    monkeypatch.setattr(workers, "gpu_count", lambda: 2)
    assert workers.resolve("auto", 100) == 2  # one per GPU


def test_bad_workers_flag_exits_2_before_writing(tmp_path, capsys):
    from synthlab.cli import main

    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path)), "--out", str(out), "--workers", "zero"]) == 2
    assert "--workers must be a positive integer" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, env, want",
    [
        ([], None, "auto"),  # the CLI's default: one worker per core
        (["--trials", "1"], None, "1"),  # --trials caps this process, so no helpers
        ([], "3", "3"),
        (["--workers", "2"], "3", "2"),  # SYNTHLAB_WORKERS sets the default, a flag wins
    ],
)
def test_default_workers(tmp_path, monkeypatch, argv, env, want):
    import synthlab.study.sweeping
    from synthlab.cli import main

    seen = []
    monkeypatch.setattr(synthlab.study.sweeping, "sweep", lambda *a, **kw: seen.append(kw["workers"]) or [])
    if env is None:
        monkeypatch.delenv("SYNTHLAB_WORKERS", raising=False)
    else:
        monkeypatch.setenv("SYNTHLAB_WORKERS", env)
    assert main(["sweep", str(write_sweep(tmp_path)), "--out", str(tmp_path / "o"), *argv]) == 0
    assert seen == [want]


def test_bad_workers_default_exits_2_before_writing(tmp_path, monkeypatch, capsys):
    from synthlab.cli import main

    monkeypatch.setenv("SYNTHLAB_WORKERS", "many")
    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path)), "--out", str(out)]) == 2
    assert "SYNTHLAB_WORKERS='many': a positive integer or 'auto'" in capsys.readouterr().err
    assert not out.exists()


def test_a_finished_grid_starts_no_helpers(tmp_path, monkeypatch):
    """Workers are capped by the cells left to run, so resuming a finished grid spawns nothing."""
    import synthlab.run.training
    from sweep_kit import FakeTrain, as_run
    from synthlab.study import sweeping, workers

    monkeypatch.setattr(synthlab.run.training, "run", as_run(FakeTrain()))
    path, out = write_sweep(tmp_path), tmp_path / "out"
    sweeping.sweep(path, out=out, grids=False)
    monkeypatch.setattr(workers, "spawn", lambda *a, **kw: pytest.fail("helpers started for a finished grid"))
    sweeping.sweep(path, out=out, grids=False, workers=4)


@pytest.mark.slow
def test_two_workers_run_every_cell_exactly_once_with_split_threads(tmp_path):
    path = write_sweep(tmp_path, TINY.replace("seed = [0, 1]", "seed = [0, 1, 2]"))
    out = tmp_path / "out"
    # --set reaches the helper's cells too (they rebuild the grid from the same arguments)
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out), "--workers", "2", "--set", "steps=7"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "6/6 cells finished" in r.stdout
    _, trials = study_trials(out, "tiny-smoke-steps=7")
    keys = completed_keys(trials)
    assert len(keys) == 6 == len(set(keys))
    recs = grids.read_results(out / "results.jsonl")
    assert sorted((x["pe"], x["train"]["seed"]) for x in recs) == sorted(
        (pe, s) for pe in ("rope", "nope") for s in (0, 1, 2)
    )
    # every run, in either process, had its share of the cores and the --set steps
    assert {x["train"]["threads"] for x in recs} == {workers.threads_per_worker(2)}
    assert {x["train"]["steps"] for x in recs} == {7}


@pytest.mark.slow
def test_a_helper_trains_a_user_files_cell_with_the_same_config(tmp_path):
    """A helper process resolves its cell as the main process does: a user's file whose smoke
    preset sets only d_model trains the config and task defaults in both workers (not
    flipflop.toml's preset). --trials 1 in each of 2 workers: each trains one of the 2 cells."""
    from sweep_kit import USER
    from synthlab import generators
    from synthlab.core.config import TrainConfig

    path = write_sweep(tmp_path, USER.replace('pe = ["rope"]', 'pe = ["rope", "nope"]'))
    out = tmp_path / "out"
    r = subprocess.run(
        sweep_cmd(
            str(path),
            "--preset",
            "smoke",
            "--out",
            str(out),
            "--workers",
            "2",
            "--trials",
            "1",
            "--set",
            "steps=2",
            "--set",
            "eval_samples=4",
        ),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    _, trials = study_trials(out, "tiny-smoke-eval_samples=4-steps=2")
    assert len({t.user_attrs["worker"]["pid"] for t in trials if t.state.is_finished()}) == 2
    recs = grids.read_results(out / "results.jsonl")
    params = generators.TASKS["flipflop"].PARAMS
    assert sorted(x["pe"] for x in recs) == ["nope", "rope"]
    for x in recs:
        assert x["status"] == "ok" and x["preset"] == "smoke" and x["model"]["d_model"] == 16
        assert x["train"]["lr"] == TrainConfig().lr and x["train"]["steps"] == 2
        assert x["task_params"]["n_pairs"] == params["n_pairs"].default == 256
        assert x["task_params"]["loss"] == params["loss"].default == "all"


@pytest.mark.slow
def test_ctrl_c_stops_every_worker_and_a_rerun_finishes_the_grid(tmp_path):
    from optuna.trial import TrialState

    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 3000,").replace("seed = [0, 1]", "seed = [0]"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        sweep_cmd(str(path), "--out", str(out), "--workers", "2"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = wait_running(out, "tiny-smoke", 2, proc=proc)  # both workers train a cell
    helper_pid = next(t.user_attrs["worker"]["pid"] for t in running if t.user_attrs["worker"]["pid"] != proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    with pytest.raises(ProcessLookupError):  # the helper is gone too
        os.kill(helper_pid, 0)
    trials = study_trials(out, "tiny-smoke")[1]
    assert not [t for t in trials if t.state == TrialState.RUNNING]  # both cells went back to the queue
    assert not [t for t in trials if "record" in t.user_attrs]  # and nothing was recorded as failed
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out), "--workers", "2"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0 and "2/2 cells finished" in r.stdout, r.stderr


@pytest.mark.slow
def test_a_helper_killed_outright_has_its_cell_run_again_by_the_main_process(tmp_path):
    """A helper SIGKILLed (the OOM killer) mid-cell is a zombie until the main process waits for
    it, which it does at the end of its grid: the zombie passed for a live, paused worker, so the
    main process waited for its cell forever. Now the cell is reaped and run again, once."""
    from optuna.trial import TrialState

    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 3000,").replace("seed = [0, 1]", "seed = [0]"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        sweep_cmd(str(path), "--out", str(out), "--workers", "2"),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        running = wait_running(out, "tiny-smoke", 2, proc=proc)  # both workers train a cell
        helper = next(t for t in running if t.user_attrs["worker"]["pid"] != proc.pid)
        os.kill(helper.user_attrs["worker"]["pid"], signal.SIGKILL)
        out_text, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and "2/2 cells finished" in out_text, err
    pid = helper.user_attrs["worker"]["pid"]
    assert f"worker process {pid} exited with code -9" in err and "runs again on the next sweep" not in err
    trials = {t.number: t for t in study_trials(out, "tiny-smoke")[1]}
    assert trials[helper.number].state == TrialState.FAIL and "record" not in trials[helper.number].user_attrs
    keys = completed_keys(trials.values())
    assert len(keys) == 2 == len(set(keys))


def test_the_warning_for_a_dead_helper_names_the_cell_it_left_running(capsys):
    """Before: "its running cell, if any, runs again on the next sweep" for every dead helper,
    also for one whose cell this process had already reaped and run again."""
    from types import SimpleNamespace

    from optuna.trial import TrialState

    from synthlab.core.processes import worker_id
    from synthlab.plan.cells import Cell
    from synthlab.study import launchers

    me = worker_id()
    cell = Cell(
        task="flipflop",
        encoding="rope",
        seed=3,
        overrides={},
        scheme=None,
        rope_scaling=None,
        slot=0,
        axes={"pe": "rope", "seed": 3},
    )
    helpers = [SimpleNamespace(pid=11), SimpleNamespace(pid=12), SimpleNamespace(pid=13)]
    here, elsewhere = {**me, "pid": 12}, {**me, "pid": 13, "host": me["host"] + "-other"}
    trials = [
        SimpleNamespace(number=4, state=TrialState.RUNNING, user_attrs={"cell_key": cell.key, "worker": here}),
        SimpleNamespace(
            number=5, state=TrialState.FAIL, user_attrs={"cell_key": cell.key, "worker": {**here, "pid": 13}}
        ),
        SimpleNamespace(number=6, state=TrialState.RUNNING, user_attrs={"cell_key": cell.key, "worker": elsewhere}),
    ]
    launchers._warn_dead_helpers(helpers, [0, -9, 1], trials, {cell.key: cell})
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"synthlab sweep: warning: worker process 12 exited with code -9; its running cell ({cell.label()}) "
        "runs again on the next sweep",
        "synthlab sweep: warning: worker process 13 exited with code 1",
    ]
