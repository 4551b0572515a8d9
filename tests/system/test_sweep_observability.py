"""Watching a sweep: progress on stderr (lines in a log, a bar on a terminal, one
view with --workers, nothing with --quiet), --logger passed to every run, and a study that
optuna-dashboard shows: the cells' axes as params, headline metrics as user attrs, the
learning curve as intermediate values (checked against the real optuna-dashboard server).

Fast tests run in-process with a stand-in trainer that takes the ``report`` hook and
``logger`` as synthlab.run.training.train does; the slow ones run real training.
"""

from __future__ import annotations

import inspect
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from sweep_kit import TINY, FakeTrain, as_run, child_env, study_trials, write_sweep
from synthlab.cli import main
from synthlab.study import sweeping


class ReportingTrain(FakeTrain):
    """A stand-in trainer with the run options: it reports a loss per step (sleeping ``pause``
    seconds a step) and, with ``evals``, the objective at those steps."""

    def __init__(self, pause: float = 0.0, evals: tuple[int, ...] = (), **kw):
        super().__init__(**kw)
        self.pause, self.evals = pause, evals
        self.options: list[dict] = []

    def __call__(
        self,
        task,
        pe,
        preset="quick",
        seed=0,
        out=None,
        positions=None,
        rope_scaling=None,
        quiet=True,
        results=None,
        study=None,
        trial=None,
        overrides=None,
        logger="csv",
        report=None,
    ):
        self.options.append({"logger": logger, "quiet": quiet, "report": report is not None})
        for step in range(10):
            time.sleep(self.pause)
            if report is not None:
                report(step, {"loss": 2.0 / (step + 1)})
                if step in self.evals:
                    report(step, {"test/token_acc": 0.5, "ood-sparse/token_acc": step / 10})
        rec = super().__call__(
            task, pe, preset, seed, out, positions, rope_scaling, quiet, results, study, trial, overrides
        )
        rec["wall_s"] = round(10 * self.pause + 0.25, 3)
        return rec


@pytest.fixture
def reporting(monkeypatch):
    import synthlab.run.training

    f = ReportingTrain()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    return f


def test_a_log_gets_a_line_per_cell_and_heartbeats_during_long_ones(tmp_path, monkeypatch, capsys):
    import synthlab.run.training

    f = ReportingTrain(pause=0.06)  # 0.6 s a cell
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    sweeping.sweep(write_sweep(tmp_path), out=tmp_path / "out", quiet=False, progress_every=0.25)
    err = capsys.readouterr().err.splitlines()  # stderr is no terminal here: lines
    done = [ln for ln in err if " cells done: " in ln]
    assert [ln.split(" cells done")[0] for ln in done] == [f"[sweep] {k}/4" for k in range(1, 5)]
    assert "task=flipflop pe=rope seed=0 ok, ood-sparse/token_acc 0.9000" in done[0]
    assert sum(" started: " in ln for ln in err) == 4
    beats = [ln for ln in err if " running: " in ln]
    assert beats and all("elapsed" in ln for ln in beats)
    assert any(" step " in ln and "/10, loss " in ln for ln in beats)  # the report hook's step and loss
    assert all(o["quiet"] for o in f.options)  # no per-run bar in a log


def test_a_failed_cell_gets_its_line_with_the_reason(tmp_path, monkeypatch, capsys):
    import synthlab.run.training

    f = ReportingTrain(fail_when=lambda pe, seed, ov: pe == "nope" and seed == 1)
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    sweeping.sweep(write_sweep(tmp_path), out=tmp_path / "out", quiet=False)
    err = capsys.readouterr().err
    assert "[sweep] 4/4 cells done: task=flipflop pe=nope seed=1 failed (diverged: non-finite training loss" in err


def test_quiet_prints_nothing_on_stderr(tmp_path, reporting, capsys):
    assert main(["sweep", str(write_sweep(tmp_path)), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "4/4 cells finished" in captured.out


def test_on_a_terminal_a_sweep_bar_and_the_runs_own_bars(tmp_path, reporting, monkeypatch, capsys):
    class Tty:
        def __init__(self, stream):
            self.stream = stream

        def isatty(self):
            return True

        def __getattr__(self, name):
            return getattr(self.stream, name)

    monkeypatch.setattr(sys, "stderr", Tty(sys.stderr))
    sweeping.sweep(write_sweep(tmp_path), out=tmp_path / "out", quiet=False)
    err = capsys.readouterr().err
    assert "sweep: 100%" in err and "4/4" in err  # tqdm's bar
    assert "[sweep] 4/4 cells done:" in err
    assert not any(o["quiet"] for o in reporting.options)  # the trainer may draw its bar below


def test_logger_goes_to_every_run_and_is_no_part_of_a_cells_identity(tmp_path, reporting):
    path = write_sweep(tmp_path)
    sweeping.sweep(path, out=tmp_path / "out", logger="none")
    assert [o["logger"] for o in reporting.options] == ["none"] * 4
    sweeping.sweep(path, out=tmp_path / "out", logger="csv")  # another logger: the same cells, all done
    assert len(reporting.options) == 4
    sweeping.sweep(path, out=tmp_path / "o2")  # none given: the trainer's default
    assert [o["logger"] for o in reporting.options[4:]] == ["csv"] * 4


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--logger", "bogus"], "--logger 'bogus' is not allowed (allowed: csv, tensorboard, wandb, mlflow, none)"),
        (["--logger", "wandb"], "--logger wandb needs the wandb package: pip install 'synthlab-pe[wandb]'"),
        (["--progress-every", "0"], "--progress-every must be a positive number of seconds, got 0.0"),
    ],
)
def test_bad_logger_or_interval_exits_2_with_one_line_and_writes_nothing(
    tmp_path, reporting, monkeypatch, capsys, argv, match
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), *argv]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"synthlab sweep: error: {match}"]
    assert not out.exists() and reporting.options == []


def test_the_study_holds_params_metric_attrs_and_the_loss_curve(tmp_path, reporting):
    from optuna.distributions import CategoricalDistribution, IntDistribution

    out = tmp_path / "out"
    sweeping.sweep(write_sweep(tmp_path), out=out)
    st, trials = study_trials(out, "tiny-smoke")
    assert st.user_attrs["intermediate"] == "loss" and st.metric_names == ["ood-sparse/token_acc"]
    for t in trials:
        cell = t.user_attrs["cell"]
        assert t.params == cell and t.distributions["pe"] == CategoricalDistribution(("rope", "nope"))
        assert t.distributions["seed"] == IntDistribution(0, 1)  # an int: more seeds later join it
        rec = t.user_attrs["record"]
        assert t.user_attrs["test/token_acc"] == rec["metrics"]["test"]["token_acc"]
        assert t.user_attrs["ood-sparse/token_acc"] == t.value
        # ten losses reported within milliseconds: the first and the last step are written
        assert t.intermediate_values == {0: 2.0, 9: 0.2}


def test_with_periodic_evaluation_the_curve_is_the_objective(tmp_path, monkeypatch):
    """A cell whose config sets train.eval_every reports the sweep's objective as its curve."""
    import synthlab.run.training
    from synthlab.study import dashboard

    f = ReportingTrain(evals=(4, 9))
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    real_plan = dashboard.plan
    monkeypatch.setattr(dashboard, "plan", lambda spec, cfg: real_plan(spec, _with_eval_every(cfg, 5)))
    out = tmp_path / "out"
    sweeping.sweep(write_sweep(tmp_path), out=out)
    st, trials = study_trials(out, "tiny-smoke")
    assert st.user_attrs["intermediate"] == "ood-sparse/token_acc"
    assert all(t.intermediate_values == {4: 0.4, 9: 0.9} for t in trials)


def _with_eval_every(cfg, n):
    import copy

    cfg = copy.deepcopy(cfg)
    object.__setattr__(cfg.train, "eval_every", n)
    return cfg


def test_a_later_sweep_with_a_new_encoding_keeps_the_study_valid(tmp_path, reporting, capsys):
    """The study fixed pe's choices (rope, nope) first; a later grid with alibi runs, its alibi
    trials carry no pe param (said once on stderr), and the rest keep theirs."""
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    sweeping.sweep(path, out=out)
    sweeping.sweep(path, pe="rope,alibi", out=out, quiet=False)
    err = capsys.readouterr().err
    assert err.count("param 'pe': this study fixed its choices at ('rope', 'nope') before") == 1
    _, trials = study_trials(out, "tiny-smoke")
    alibi = [t for t in trials if t.user_attrs["cell"]["pe"] == "alibi"]
    assert len(alibi) == 2 and all("pe" not in t.params and "seed" in t.params for t in alibi)
    assert all(t.params["pe"] in ("rope", "nope") for t in trials if t not in alibi)


def test_a_trial_enqueued_before_params_existed_gets_them_when_it_runs(tmp_path, reporting):
    import optuna

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    st = optuna.create_study(
        study_name="tiny-smoke", storage=sweeping.open_storage(str(out / sweeping.JOURNAL_NAME)), direction="maximize"
    )
    st.enqueue_trial({}, user_attrs={"cell_key": cells[2].key, "cell": cells[2].axes})  # the old way
    sweeping.sweep(path, out=out)
    _, trials = study_trials(out, "tiny-smoke")
    assert all(t.params == t.user_attrs["cell"] for t in trials) and len(trials) == 4


# ---- slow: real training, helper processes, the real optuna-dashboard


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {}


@pytest.mark.slow
def test_optuna_dashboard_shows_params_search_space_user_attrs_curves_and_importances(tmp_path, reporting):
    pytest.importorskip(
        "optuna_dashboard", reason="optuna-dashboard is not installed (pip install 'synthlab-pe[dashboard]')"
    )
    out = tmp_path / "synthlab-runs" / "tiny-smoke"
    sweeping.sweep(write_sweep(tmp_path), out=out)
    port = _free_port()
    # `optuna-dashboard JOURNAL` (its console script runs optuna_dashboard._cli:main) on the
    # journal a sweep writes, as docs/observability.md says
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "optuna_dashboard._cli",
            str(out / "study.journal"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--quiet",
        ],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                code, studies = _get(f"{base}/api/studies")
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() else "timeout"
                time.sleep(0.2)
        assert code == 200
        (summary,) = studies["study_summaries"]
        assert summary["study_name"] == "tiny-smoke"
        sid = summary["study_id"]
        code, detail = _get(f"{base}/api/studies/{sid}")
        assert code == 200
        space = {
            p["name"]: sorted(c["value"] for c in p["distribution"]["choices"])
            if "choices" in p["distribution"]
            else (p["distribution"]["low"], p["distribution"]["high"])
            for p in detail["union_search_space"]
        }
        assert space == {"pe": ["nope", "rope"], "seed": (0, 1), "task": ["flipflop"]}
        assert {p["name"] for p in detail["intersection_search_space"]} == {"pe", "seed", "task"}
        attrs = {a["key"]: a["sortable"] for a in detail["union_user_attrs"]}
        assert attrs["test/token_acc"] and attrs["ood-sparse/token_acc"] and attrs["wall_s"]
        assert detail["has_intermediate_values"] is True
        assert detail["objective_names"] == ["ood-sparse/token_acc"]
        assert {"key": "intermediate", "value": "loss"} in detail["user_attrs"]
        t0 = detail["trials"][0]
        assert {p["name"]: p["param_external_value"] for p in t0["params"]} == {
            "task": "flipflop",
            "pe": "rope",
            "seed": "0",
        }
        assert [v["step"] for v in t0["intermediate_values"]] == [0, 9]
        code, imp = _get(f"{base}/api/studies/{sid}/param_importances")
        assert code == 200  # an empty search space made this page fail with HTTP 500
        assert {p["name"] for p in imp["param_importances"][0]} == {"pe", "seed", "task"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "synthlab.cli", "sweep", *args]


@pytest.mark.slow
def test_with_workers_the_main_process_alone_prints_one_line_per_cell(tmp_path):
    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 40,"))
    out = tmp_path / "out"
    # --trials 2: each process runs two cells (the main one would otherwise finish the grid
    # before its helper has imported torch)
    r = subprocess.run(
        _cli(str(path), "--out", str(out), "--workers", "2", "--trials", "2", "--progress-every", "0.5"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    done = [ln for ln in r.stderr.splitlines() if " cells done: " in ln]
    assert [ln.split(" cells done")[0] for ln in done] == [f"[sweep] {k}/4" for k in range(1, 5)], r.stderr
    started = [ln for ln in r.stderr.splitlines() if " started: " in ln]
    # this process announces its own two cells, and the helper's ones it sees running when it
    # polls the study (a cell shorter than the poll may pass unseen); the helper prints none
    assert sum("(worker pid " not in ln for ln in started) == 2, r.stderr
    assert len(set(started)) == len(started) <= 4
    _, trials = study_trials(out, "tiny-smoke")
    assert len({t.user_attrs["worker"]["pid"] for t in trials}) == 2  # both processes trained


@pytest.mark.slow
def test_real_training_reports_its_loss_curve_to_the_study(tmp_path):
    from synthlab.run import training

    if "report" not in inspect.signature(training.train).parameters:
        pytest.skip("synthlab.run.training.train has no report hook yet")
    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 200,").replace("seed = [0, 1]", "seed = [0]"))
    out = tmp_path / "out"
    sweeping.sweep(path, out=out)
    _, trials = study_trials(out, "tiny-smoke")
    for t in trials:
        steps = sorted(t.intermediate_values)
        assert steps[0] == 0 and steps[-1] == 199 and len(steps) <= 51
        assert all(v > 0 for v in t.intermediate_values.values())  # losses
