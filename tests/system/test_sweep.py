"""`synthlab sweep`: exactly-once cells, resumption after a hard kill, shared workers, failures.

Fast tests run in-process with a fake trainer (monkeypatched ``synthlab.run.training.run``, see ``as_run``);
the slow ones run the real command in subprocesses on a tiny sweep file (smoke scale).
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest

from sweep_kit import (
    TINY,
    USER,
    FakeTrain,
    as_run,
    child_env,
    completed_keys,
    failing_fake,
    study_trials,
    sweep_cmd,
    write_sweep,
)
from synthlab.analysis import grids
from synthlab.cli import main
from synthlab.study import sweeping


@pytest.fixture
def fake(monkeypatch):
    import synthlab.run.training

    f = FakeTrain()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    return f


def test_set_reaches_every_cell_and_its_own_study(tmp_path, fake, monkeypatch):
    """`sweep --set`: the settings go into every cell on top of the preset (canonical keys), the
    default study name and output directory carry them, so a grid never pools two settings,
    and the same command again trains nothing."""
    path = write_sweep(tmp_path)
    monkeypatch.chdir(tmp_path)
    recs = sweeping.sweep(path, quiet=True, settings={"steps": "7", "train.eval_every": "2"})
    assert len(fake.calls) == 4
    for _, _, _, ov in fake.calls:
        ov = json.loads(ov)
        assert ov["train.steps"] == 7 and ov["train.eval_every"] == 2 and ov["model.d_model"] == 16
    assert {r["study"] for r in recs} == {"tiny-smoke-steps=7-train.eval_every=2"}
    out = tmp_path / "synthlab-runs" / "tiny-smoke-steps=7-train.eval_every=2"
    assert (out / "study.journal").exists()
    assert sweeping.sweep(path, quiet=True, settings={"steps": "7", "train.eval_every": "2"}) == recs
    assert len(fake.calls) == 4
    # without the settings: the preset's own study, its own cells
    plain = sweeping.sweep(path, quiet=True)
    assert len(fake.calls) == 8 and {r["study"] for r in plain} == {"tiny-smoke"}
    assert all(json.loads(ov)["train.steps"] == 10 for _, _, _, ov in fake.calls[4:])  # the preset's


class ParamsTrain(FakeTrain):
    """FakeTrain whose records carry the task parameters they trained with, as the real trainer's do."""

    def __call__(self, task, pe, **kw):
        rec = super().__call__(task, pe, **kw)
        rec["task_params"] = {k[len("task.") :]: v for k, v in kw["overrides"].items() if k.startswith("task.")}
        return rec


def _settings(recs):
    return [
        (r["train"]["lr"], r["task_params"]["n_pairs"], r["task_params"]["loss"], r["model"]["d_model"]) for r in recs
    ]


@pytest.mark.parametrize("preset", ["smoke", "quick"])
def test_a_user_file_trains_its_own_presets_and_a_base_only_when_named(tmp_path, monkeypatch, preset):
    """A user's file whose preset sets only d_model trains the config and task defaults on
    everything else, not flipflop.toml's preset for its task; with base = "flipflop" it trains
    flipflop.toml's preset with its own d_model over it."""
    import synthlab.run.training
    from synthlab import generators
    from synthlab.core.config import TrainConfig
    from synthlab.plan import presets

    monkeypatch.setattr(synthlab.run.training, "run", as_run(ParamsTrain()))
    path = write_sweep(tmp_path, USER)
    own = sweeping.sweep(path, preset=preset, out=tmp_path / "own", grids=False)
    params = generators.TASKS["flipflop"].PARAMS
    assert _settings(own) == [(TrainConfig().lr, params["n_pairs"].default, params["loss"].default, 16)]
    assert own[0]["train"]["lr"] == 1e-3 and own[0]["task_params"]["n_pairs"] == 256  # not flipflop.toml's

    based = write_sweep(tmp_path, USER.replace('task = "flipflop"', 'task = "flipflop"\nbase = "flipflop"'), "b.toml")
    recs = sweeping.sweep(based, preset=preset, out=tmp_path / "based", grids=False)
    family = presets.preset_settings("flipflop", preset)
    assert family["model.d_model"] != 16 and family["train.lr"] != TrainConfig().lr
    assert _settings(recs) == [
        (family["train.lr"], family["task.n_pairs"], family.get("task.loss", params["loss"].default), 16)
    ]


def test_every_cell_runs_once_and_a_rerun_resumes(tmp_path, fake, capsys):
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    recs = sweeping.sweep(path, out=out, quiet=True)
    assert len(fake.calls) == 4 and len(set(fake.calls)) == 4
    assert sorted((r["pe"], r["train"]["seed"]) for r in recs) == [("nope", 0), ("nope", 1), ("rope", 0), ("rope", 1)]
    assert all(r["study"] == "tiny-smoke" and isinstance(r["trial"], int) for r in recs)
    printed = capsys.readouterr().out
    assert "4/4 cells finished" in printed and "| rope |" in printed
    assert (out / "grids" / "ood.png").exists() and (out / "grids" / "ood.md").exists()
    # same command again: nothing re-runs, nothing is lost
    again = sweeping.sweep(path, out=out, quiet=True)
    assert len(fake.calls) == 4
    assert again == recs
    _, trials = study_trials(out, "tiny-smoke")
    assert len(completed_keys(trials)) == 4 == len(set(completed_keys(trials)))
    # narrowing the encodings reuses the same study and its finished cells
    assert len(sweeping.sweep(path, pe="rope", out=out, quiet=True)) == 2 and len(fake.calls) == 4
    # the JSONL rebuilt from the study holds the same records
    n = sweeping.export_results(str(out / sweeping.JOURNAL_NAME), "tiny-smoke", tmp_path / "rebuilt.jsonl")
    assert n == 4
    assert sorted(r["run_id"] for r in grids.read_results(tmp_path / "rebuilt.jsonl")) == sorted(
        r["run_id"] for r in grids.read_results(out / "results.jsonl")
    )


def test_more_seeds_later_run_only_the_new_seeds_cells(tmp_path, capsys):
    """`sweep --seeds 2` then `--seeds 3` on the same --out (real training at the smoke
    preset): the second trains seed 2's cell alone, the study gains one trial, the grid shows
    the three seeds, and the seed stays a param of every trial (an int range per grid: Optuna
    would refuse new choices of a categorical)."""
    from optuna.distributions import IntDistribution

    out = tmp_path / "out"
    argv = ["sweep", "flipflop", "--preset", "smoke", "--pe", "rope", "--out", str(out), "--workers", "1", "--quiet"]
    assert main([*argv, "--seeds", "2"]) == 0
    assert "study flipflop-smoke: 2/2 cells finished" in capsys.readouterr().out
    first = grids.read_results(out / "results.jsonl")
    assert sorted(r["train"]["seed"] for r in first) == [0, 1]
    assert main([*argv, "--seeds", "3"]) == 0
    assert "study flipflop-smoke: 3/3 cells finished" in capsys.readouterr().out
    recs = grids.read_results(out / "results.jsonl")
    assert len(recs) == 3 and recs[:2] == first and recs[2]["train"]["seed"] == 2  # only seed 2 trained
    _, trials = study_trials(out, "flipflop-smoke")
    assert len(trials) == 3 and len(completed_keys(trials)) == 3
    assert [t.params["seed"] for t in trials] == [0, 1, 2]
    assert [t.distributions["seed"] for t in trials] == [IntDistribution(0, 1)] * 2 + [IntDistribution(0, 2)]
    # the same again, and a subset of the seeds: nothing trains, the grid shows the seeds asked for
    assert main([*argv, "--seeds", "3"]) == 0 and main([*argv, "--seeds", "1-2"]) == 0
    assert "study flipflop-smoke: 2/2 cells finished" in capsys.readouterr().out
    assert len(grids.read_results(out / "results.jsonl")) == 3 and len(study_trials(out, "flipflop-smoke")[1]) == 3


def test_seeds_from_python_an_int_a_string_or_a_list(tmp_path, fake, monkeypatch):
    """``synthlab.sweep(seeds=...)``: a count, a range or list as text, or a list of ints; not
    part of the default study name, so each call resumes the one study."""
    import synthlab

    path = write_sweep(tmp_path)
    monkeypatch.chdir(tmp_path)
    recs = synthlab.sweep(path, pe="rope", seeds=3)
    assert sorted(s for _, _, s, _ in fake.calls) == [0, 1, 2] and len(recs) == 3
    assert {r["study"] for r in recs} == {"tiny-smoke"} and (tmp_path / "synthlab-runs" / "tiny-smoke").is_dir()
    recs = synthlab.sweep(path, pe="rope", seeds="2-4")
    assert [s for _, _, s, _ in fake.calls[3:]] == [3, 4] and [r["train"]["seed"] for r in recs] == [2, 3, 4]
    recs = synthlab.sweep(path, pe="rope", seeds=[7, 0])
    assert [s for _, _, s, _ in fake.calls[5:]] == [7] and [r["train"]["seed"] for r in recs] == [7, 0]
    assert synthlab.sweep(path, pe="rope", seeds="0,4,7") and len(fake.calls) == 6
    with pytest.raises(ValueError, match="seed 4 is repeated"):
        synthlab.sweep(path, pe="rope", seeds=[4, 4])
    assert len(fake.calls) == 6


def test_tuned_lr_the_grid_shows_the_best_setting_per_cell(tmp_path, monkeypatch, capsys):
    """trials_per_cell = 3 over lr: every (cell, lr) runs once; the grid shows, per encoding,
    the lr whose objective (mean over seeds) is best; study-results.jsonl keeps all six runs."""
    import synthlab.run.training

    class LrTrain(FakeTrain):
        def __call__(self, task, pe, **kw):
            rec = super().__call__(task, pe, **kw)
            lr = kw["overrides"]["train.lr"]
            good = {"rope": 3e-3, "nope": 1e-3}[pe]  # each encoding has its own best lr
            acc = 0.95 if lr == good else 0.55
            rec["metrics"] = {"test": {"token_acc": acc}, "ood-sparse": {"token_acc": acc - 0.05}}
            return rec

    f = LrTrain()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    text = TINY.replace("seed = [0, 1]", "seed = [0]").replace(
        "[presets.quick]", "[presets.smoke.tune]\ntrials_per_cell = 3\nlr = [1e-3, 3e-3, 1e-2]\n\n[presets.quick]"
    )
    text = text.replace('capacity_x = "lr"', 'objective_split = "test"')
    out = tmp_path / "out"
    recs = sweeping.sweep(write_sweep(tmp_path, text), out=out, quiet=True)
    assert len(f.calls) == 6 == len(set(f.calls)) == len(recs)
    assert len(grids.read_results(out / "study-results.jsonl")) == 6
    printed = capsys.readouterr().out
    assert "tuned lr: the grids show, per cell, the best of 3 settings by token_acc on test" in printed
    assert (
        "| rope | 5.0 (n 1) | 10.0 (n 1) |" in printed and "| nope | 5.0 (n 1) | 10.0 (n 1) |" in printed
    )  # no "±": one run per cell
    md = (out / "grids" / "ood.md").read_text()
    assert "lr=" not in md


def test_trials_flag_caps_this_process(tmp_path, fake):
    path = write_sweep(tmp_path)
    recs = sweeping.sweep(path, out=tmp_path / "o", trials=1, grids=False)
    assert len(fake.calls) == 1 and len(recs) == 1
    sweeping.sweep(path, out=tmp_path / "o", grids=False)
    assert len(fake.calls) == 4


def test_a_trial_of_a_dead_process_is_rerun_once(tmp_path, fake):
    import optuna
    from optuna.trial import TrialState

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    spec = sweeping.load_sweep(path)
    cells = sweeping.expand_cells(spec, "smoke")
    out.mkdir()
    storage = sweeping.open_storage(str(out / sweeping.JOURNAL_NAME))
    st = optuna.create_study(study_name="tiny-smoke", storage=storage, direction="maximize")
    # a worker took cells[0] and was killed: RUNNING, its pid gone
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    st.enqueue_trial({}, user_attrs={"cell_key": cells[0].key, "cell": cells[0].axes})
    t = st.ask()
    storage.set_trial_user_attr(t._trial_id, "worker", {"host": socket.gethostname(), "pid": dead.pid, "start": "1"})
    storage.set_trial_user_attr(t._trial_id, "heartbeat", time.time())
    sweeping.sweep(path, out=out, grids=False)
    assert len(fake.calls) == 4  # the killed cell ran again, once
    _, trials = study_trials(out, "tiny-smoke")
    old = next(x for x in trials if x.number == t.number)
    assert old.state == TrialState.FAIL and "is gone" in old.user_attrs["stale"]
    keys = completed_keys(trials)
    assert sorted(keys) == sorted(c.key for c in cells)


def test_a_silent_trial_elsewhere_is_rerun_after_the_grace_period(tmp_path, fake):
    import optuna
    from optuna.trial import TrialState

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    out.mkdir()
    storage = sweeping.open_storage(str(out / sweeping.JOURNAL_NAME))
    st = optuna.create_study(study_name="tiny-smoke", storage=storage, direction="maximize")
    st.enqueue_trial({}, user_attrs={"cell_key": cells[1].key, "cell": cells[1].axes})
    t = st.ask()
    # its worker beat every 0.2 s: its old heartbeat, unchanged for three beats here, is dead
    storage.set_trial_user_attr(t._trial_id, "worker", {"host": "another-machine", "pid": 1, "start": "1", "beat": 0.2})
    storage.set_trial_user_attr(t._trial_id, "heartbeat", time.time() - 1000)
    sweeping.sweep(path, out=out, grids=False, grace_period=60, poll=0.1)
    _, trials = study_trials(out, "tiny-smoke")
    old = next(x for x in trials if x.number == t.number)
    assert old.state == TrialState.FAIL and "no heartbeat" in old.user_attrs["stale"]
    assert len(fake.calls) == 4 and len(set(completed_keys(trials))) == 4


def test_a_paused_worker_on_this_machine_is_not_reaped():
    """A live worker process on this host whose heartbeat is long silent is paused (SIGSTOP, a
    suspended batch job), not dead: its trial is not reaped (it was, after the grace period, and
    the resumed worker then crashed recording a finished trial). Gone, it is."""
    from synthlab.core import processes
    from synthlab.study import liveness

    paused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        paused.send_signal(signal.SIGSTOP)
        me = processes.worker_id()
        worker = {"host": me["host"], "pid": paused.pid, "start": processes.proc_start(paused.pid)}

        class Trial:  # what _stale_reason reads of a RUNNING trial
            user_attrs = {"worker": worker, "heartbeat": time.time() - 10_000}
            datetime_start = None

        assert liveness.stale_reason(Trial, grace_period=60, me=me) is None
        paused.kill()
        paused.wait()
        assert "is gone" in liveness.stale_reason(Trial, grace_period=60, me=me)
    finally:
        if paused.poll() is None:
            paused.kill()
            paused.wait()


def test_a_run_reaped_while_it_ran_is_not_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """Another machine's worker closed this worker's trial as stale while it trained (silent past
    the grace period): recording it is refused; the sweep logs it, keeps going, and the cell
    runs again, once."""
    import optuna
    from optuna.trial import TrialState

    import synthlab.run.training

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    inner = FakeTrain()
    reaped = []

    def train_then_reaped(task, pe, **kw):
        rec = inner(task, pe, **kw)
        if not reaped:  # the first run: reaped by "another worker" before it records
            storage = sweeping.open_storage(str(out / sweeping.JOURNAL_NAME))
            st = optuna.load_study(study_name="tiny-smoke", storage=storage)
            t = next(t for t in st.get_trials(deepcopy=False) if t.state == TrialState.RUNNING)
            storage.set_trial_user_attr(t._trial_id, "stale", "no heartbeat for 999 s (grace period 60 s)")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            reaped.append(t.number)
        return rec

    monkeypatch.setattr(synthlab.run.training, "run", as_run(train_then_reaped))
    sweeping.sweep(path, out=out, grids=False)
    _, trials = study_trials(out, "tiny-smoke")
    assert len(inner.calls) == 5  # 4 cells, the reaped one twice
    keys = completed_keys(trials)
    assert len(keys) == 4 and len(set(keys)) == 4
    assert next(t for t in trials if t.number == reaped[0]).state == TrialState.FAIL
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 4  # the reaped run's result is not recorded


def test_cells_enqueued_twice_still_run_once(tmp_path, fake):
    import optuna
    from optuna.trial import TrialState

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    cells = sweeping.expand_cells(sweeping.load_sweep(path), "smoke")
    out.mkdir()
    st = optuna.create_study(study_name="tiny-smoke", storage=sweeping.open_storage(str(out / sweeping.JOURNAL_NAME)))
    for _ in range(2):  # two workers that started together both enqueued the grid
        for c in cells:
            st.enqueue_trial({}, user_attrs={"cell_key": c.key, "cell": c.axes})
    sweeping.sweep(path, out=out, grids=False)
    assert len(fake.calls) == 4 and len(set(fake.calls)) == 4
    _, trials = study_trials(out, "tiny-smoke")
    dups = [t for t in trials if t.state == TrialState.PRUNED]
    assert len(dups) == 4 and all("duplicate_of" in t.user_attrs for t in dups)


def test_a_failed_cell_is_recorded_the_sweep_goes_on_and_the_grid_shows_it_missing(tmp_path, monkeypatch, capsys):
    from optuna.trial import TrialState

    import synthlab.run.training

    f = failing_fake()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    recs = sweeping.sweep(path, out=out)
    assert len(f.calls) == 4
    status = {(r["pe"], r["train"]["seed"]): r for r in recs}
    assert status[("nope", 1)]["status"] == "failed" and "diverged" in status[("nope", 1)]["error"]
    assert status[("rope", 1)]["status"] == "failed" and "out of memory" in status[("rope", 1)]["error"]
    # the trainer raised before writing a record: the sweep's own keeps what the cell set
    assert status[("rope", 1)]["model"] == {"d_model": 16, "n_layers": 1, "n_heads": 2}
    assert status[("rope", 1)]["task_params"] == {"n_pairs": 8} and status[("rope", 1)]["train"]["steps"] == 10
    assert status[("rope", 0)]["status"] == "ok"
    # the trainer raised, so the sweep recorded the failure in the JSONL itself
    on_disk = grids.read_results(out / "results.jsonl")
    assert sum(r["status"] == "failed" for r in on_disk) == 2 and len(on_disk) == 4
    _, trials = study_trials(out, "tiny-smoke")
    assert sum(t.state == TrialState.FAIL and "record" in t.user_attrs for t in trials) == 2
    assert "2 failed or not run" in capsys.readouterr().out
    # failed cells are finished: not re-run
    sweeping.sweep(path, out=out, grids=False)
    assert len(f.calls) == 4
    g = grids.make_grid(grids.tidy(recs), "ood", "seed", "pe", "token_acc", "error", split="test")
    assert g.mean.isna().sum().sum() == 2 and g.n_failed.sum().sum() == 2
    assert math.isnan(g.mean.at["nope", 1]) and g.mean.at["nope", 0] == pytest.approx(40.0)
    # the sweep's own grid averages the finished seed only and counts the failed one
    csv = (out / "grids" / "ood.csv").read_text().splitlines()
    assert "nope,test,40.0,,1,1,,," in csv  # no paper number for this cell


@pytest.mark.parametrize(
    "argv, match",
    [
        (["sweep", "nosuch-task"], "unknown sweep or task"),
        (["sweep", "flipflop", "--pe", "cope,bogus"], "bogus"),
        (
            ["sweep", "flipflop", "--preset", "smoke", "--storage", "postgresql://nobody@127.0.0.1:1/none"],
            "cannot connect",
        ),
        (["sweep", "flipflop", "--preset", "smoke", "--storage", "/nonexistent-dir/x.journal"], "does not exist"),
        (["sweep", "flipflop", "--trials", "0"], "--trials"),
        (["sweep", "flipflop", "--study", "a/b"], "--study"),
    ],
)
def test_bad_input_exits_2_and_creates_nothing(tmp_path, argv, match, capsys):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize(
    "text, match",
    [
        ('[sweep]\ntask = "flipflop"\n[axes]\npe = ["rope"\n', "malformed TOML"),
        (TINY.replace("seed = [0, 1]", 'seed = ["zero"]'), "axes.seed: value 'zero' has the wrong type"),
        (TINY.replace("[axes]", "[axes]\nd_model = [16]\nbogus_key = [1]"), "bogus_key"),
        (TINY.replace('pe = ["rope", "nope"]', 'pe = ["rope", "nope"]\npose_chunks = [2]'), "pose"),
    ],
)
def test_bad_sweep_files_exit_2_and_create_nothing(tmp_path, text, match, capsys):
    path = write_sweep(tmp_path, text, "bad.toml")
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_grid_command(tmp_path, fake, capsys):
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    sweeping.sweep(path, out=out, grids=False)
    capsys.readouterr()
    assert main(["grid", str(out / "results.jsonl"), "--kind", "ood", "-o", str(tmp_path / "g.png")]) == 0
    printed = capsys.readouterr().out
    assert "| rope |" in printed and (tmp_path / "g.csv").exists() and (tmp_path / "g.md").exists()
    assert main(["grid", str(tmp_path / "missing.jsonl")]) == 2
    (tmp_path / "x.jsonl").write_text("not json at all\nnope\n")
    assert main(["grid", str(tmp_path / "x.jsonl"), "-o", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------------------------
# real processes (smoke-scale training)


def test_the_launcher_is_the_seam_between_the_grid_and_the_machine(tmp_path, fake, monkeypatch):
    """Every sweep hands its grid to a launcher (the local one too): a launcher wrapping the
    local one gets the validated grid and the sweep's options, and what it returns is reported."""
    from synthlab.study import launchers

    seen = []

    class Watching(launchers.LocalLauncher):
        def run(self, grid):
            seen.append((len(grid.cells), grid.study_name, grid.helper["out"], self.workers, self.trials))
            return super().run(grid)

    monkeypatch.setattr(launchers, "make_launcher", lambda name, given, table=None, **local: Watching(**local))
    out = tmp_path / "out"
    recs = sweeping.sweep(write_sweep(tmp_path), out=out, quiet=True, trials=3)
    assert seen == [(4, "tiny-smoke", str(out), 1, 3)]
    assert len(fake.calls) == len(recs) == 3


def _no_trial_left_running(out) -> None:
    from optuna.trial import TrialState

    trials = study_trials(out, "tiny-smoke")[1]
    assert trials and not [t.number for t in trials if t.state == TrialState.RUNNING]


def _each_cell_trained_once(out) -> None:
    keys = completed_keys(study_trials(out, "tiny-smoke")[1])
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(keys) == len(set(keys)) == len(lines) == 4


@pytest.mark.parametrize("batch", [False, True])
def test_a_stop_between_taking_a_cell_and_training_it_gives_the_cell_back(tmp_path, fake, monkeypatch, batch):
    """A stop that landed after a worker took a trial but before its training began (while it
    checked the cell against results.jsonl) left the trial RUNNING until a later sweep reaped it.
    Now it goes back to the queue at once; the rerun trains every cell once."""
    from synthlab.study.scheduler import Runner

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    begin = Runner.begin
    stops = iter([True])

    def stopped_begin(self, t):
        if next(stops, False):
            raise KeyboardInterrupt
        return begin(self, t)

    monkeypatch.setattr(Runner, "begin", stopped_begin)
    with pytest.raises(KeyboardInterrupt):
        sweeping.sweep(path, out=out, quiet=True, batch_seeds=batch)
    _no_trial_left_running(out)
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_text()
    sweeping.sweep(path, out=out, quiet=True, batch_seeds=batch)
    _each_cell_trained_once(out)


def test_a_stop_during_the_take_comes_after_it_and_gives_the_cell_back(tmp_path, fake, monkeypatch):
    """Ctrl-C inside the storage's WAITING -> RUNNING write is held until the take is noted, so
    the stop gives the trial back instead of leaving it RUNNING, taken by no one."""
    from optuna.storages import JournalStorage
    from optuna.trial import TrialState

    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    write = JournalStorage.set_trial_state_values
    stops = iter([True])

    def write_then_stop(self, trial_id, state, values=None):
        taken = write(self, trial_id, state, values)
        if state == TrialState.RUNNING and next(stops, False):
            signal.raise_signal(signal.SIGINT)
        return taken

    monkeypatch.setattr(JournalStorage, "set_trial_state_values", write_then_stop)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker ignores it
    try:
        with pytest.raises(KeyboardInterrupt):
            sweeping.sweep(path, out=out, quiet=True)
    finally:
        signal.signal(signal.SIGINT, before)
    _no_trial_left_running(out)
    sweeping.sweep(path, out=out, quiet=True)
    _each_cell_trained_once(out)


@pytest.mark.slow
def test_sigkill_mid_trial_then_rerun_completes_the_grid(tmp_path):
    from optuna.trial import TrialState

    path = write_sweep(tmp_path, TINY.replace("steps = 10,", "steps = 400,").replace("seed = [0, 1]", "seed = [0]"))
    out = tmp_path / "out"
    # the first cell finishes in a run of its own (--trials 1), so the kill below cannot race it
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out), "--trials", "1"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    proc = subprocess.Popen(
        sweep_cmd(str(path), "--out", str(out)),
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    killed_number = None
    deadline = time.time() + 120
    while time.time() < deadline and killed_number is None and proc.poll() is None:
        time.sleep(0.05)
        _, trials = study_trials(out, "tiny-smoke")
        running = [t for t in trials if t.state == TrialState.RUNNING and "worker" in t.user_attrs]
        if running:  # the second cell was taken and is starting to train (400 steps): kill now
            killed_number = running[0].number
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert killed_number is not None, "the sweep never took its second cell"
    assert proc.returncode == -signal.SIGKILL
    _, before = study_trials(out, "tiny-smoke")
    finished_before = {
        t.user_attrs["cell_key"]: t.user_attrs["record"]["run_id"] for t in before if t.state == TrialState.COMPLETE
    }
    assert len(finished_before) == 1
    with open(out / "results.jsonl", "a") as f:  # a record torn by the kill
        f.write('{"schema": 1, "run_id": "torn", "task": "flip')
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out)), env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert "2/2 cells finished" in r.stdout
    _, after = study_trials(out, "tiny-smoke")
    keys = completed_keys(after)
    assert len(keys) == 2 == len(set(keys))
    for key, run_id in finished_before.items():  # nothing finished was lost or re-run
        assert (
            next(t for t in after if t.state == TrialState.COMPLETE and t.user_attrs["cell_key"] == key).user_attrs[
                "record"
            ]["run_id"]
            == run_id
        )
    killed = next(t for t in after if t.number == killed_number)
    assert killed.state == TrialState.FAIL and "stale" in killed.user_attrs
    recs = grids.read_results(out / "results.jsonl")
    assert sorted(r["pe"] for r in recs) == ["nope", "rope"] and all(r["status"] == "ok" for r in recs)


@pytest.mark.slow
def test_two_workers_share_one_study_without_duplicates(tmp_path):
    from optuna.trial import TrialState

    path = write_sweep(
        tmp_path, TINY.replace("seed = [0, 1]", "seed = [0, 1, 2]").replace("steps = 10,", "steps = 60,")
    )
    out = tmp_path / "out"
    # --trials 3 each: the 6 cells finish only if both workers take 3 (a worker that started late
    # once found every cell done; that says nothing about sharing, so the split is not left to timing)
    procs = [
        subprocess.Popen(
            sweep_cmd(str(path), "--out", str(out), "--trials", "3"),
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, se) in zip(procs, outs):
        assert p.returncode == 0, se
        assert "database is locked" not in se
    _, trials = study_trials(out, "tiny-smoke")
    keys = completed_keys(trials)
    assert len(keys) == 6 == len(set(keys))
    per_worker: dict[int, int] = {}
    for t in trials:
        if t.state == TrialState.COMPLETE:
            pid = t.user_attrs["worker"]["pid"]
            per_worker[pid] = per_worker.get(pid, 0) + 1
    assert sorted(per_worker) == sorted(p.pid for p in procs) and set(per_worker.values()) == {3}
    # both may enqueue a cell at the same moment: the extra trial is pruned without training when
    # a worker takes it, or still waits when both had run their 3 trials first; never trained
    extra = [t for t in trials if t.state != TrialState.COMPLETE]
    assert all("record" not in t.user_attrs for t in extra)
    assert all(
        t.state == TrialState.PRUNED
        and "duplicate_of" in t.user_attrs
        or t.state == TrialState.WAITING
        and "worker" not in t.user_attrs
        and t.user_attrs["cell_key"] in keys
        for t in extra
    )
    recs = grids.read_results(out / "results.jsonl")
    assert sorted((r["pe"], r["train"]["seed"]) for r in recs) == sorted(
        (pe, s) for pe in ("rope", "nope") for s in (0, 1, 2)
    )
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out)), env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0 and "6/6 cells finished" in r.stdout, r.stderr  # a third worker finds nothing to do
    assert len(study_trials(out, "tiny-smoke")[1]) == len(trials)


def test_retry_failed_runs_only_the_failed_cells_again(tmp_path, monkeypatch, capsys):
    import synthlab.run.training

    broken = failing_fake()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(broken))
    path = write_sweep(tmp_path)
    out = tmp_path / "out"
    sweeping.sweep(path, out=out, grids=False)
    assert len(broken.calls) == 4
    fixed = FakeTrain()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(fixed))
    sweeping.sweep(path, out=out, grids=False)  # without the flag a failed cell is finished
    assert fixed.calls == []
    recs = sweeping.sweep(path, out=out, retry_failed=True)
    assert sorted((pe, seed) for _, pe, seed, _ in fixed.calls) == [("nope", 1), ("rope", 1)]
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs)
    assert "4/4 cells finished;" in capsys.readouterr().out
    # every run stays in results.jsonl (2 failed + 4 ok); readers and study-results.jsonl see each cell's latest
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in lines].count("failed") == 2 and len(lines) == 6
    on_disk = grids.read_results(out / "results.jsonl")
    assert len(on_disk) == 4 and all(r["status"] == "ok" for r in on_disk)
    latest = grids.read_results(out / "study-results.jsonl")
    assert len(latest) == 4 and all(r["status"] == "ok" for r in latest)
    ood = pd.read_csv(out / "grids" / "ood.csv")
    assert ood["n_failed"].sum() == 0 and ood["mean"].notna().all()  # no blank cell left
    # nothing failed now: a second retry runs nothing
    sweeping.sweep(path, out=out, retry_failed=True, grids=False)
    assert len(fixed.calls) == 2


@pytest.mark.slow
def test_a_diverging_cell_is_failed_and_blank_in_the_grid(tmp_path):
    text = TINY.replace("seed = [0, 1]", "seed = [0]\nlr = [3e-3, 1e30]").replace(
        'pe = ["rope", "nope"]', 'pe = ["rope"]'
    )
    path = write_sweep(tmp_path, text)
    out = tmp_path / "out"
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out)), env=child_env(), capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    recs = {rec["train"]["lr"]: rec for rec in grids.read_results(out / "results.jsonl")}
    assert recs[1e30]["status"] == "failed" and "diverged" in recs[1e30]["error"]
    assert recs[3e-3]["status"] == "ok"
    cap = (out / "grids" / "capacity.csv").read_text().splitlines()
    row = next(line for line in cap if line.startswith("rope,1e+30"))
    assert row == "rope,1e+30,,,0,1,,,"  # mean and std blank, not 0 (and no paper number)
    assert "1 failed or not run" in r.stdout
    # --retry-failed runs that cell (only that one) again: it diverges again
    r = subprocess.run(
        sweep_cmd(str(path), "--out", str(out), "--retry-failed"),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lrs = [json.loads(x)["train"]["lr"] for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(lrs) == [3e-3, 1e30, 1e30]
    assert sorted(rec["train"]["lr"] for rec in grids.read_results(out / "results.jsonl")) == [3e-3, 1e30]
    assert "1 failed or not run" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(sweeping.installed_sweeps()))
def test_every_installed_sweep_runs_end_to_end_at_smoke(name, tmp_path):
    """Each shipped sweep file, whole grid at its smoke preset: every cell trains and evaluates
    (no failed cell: an untrained model exercises the longest decoding and every split), and
    the grids it asks for are drawn."""
    out = tmp_path / "out"
    recs = sweeping.sweep(name, preset="smoke", out=out, quiet=True)
    spec = sweeping.load_sweep(name)
    assert len(recs) == len(sweeping.expand_cells(spec, "smoke"))
    assert [(r["pe"], r.get("error")) for r in recs if r["status"] != "ok"] == []
    drawn = sorted(p.name for p in (out / "grids").glob("*.png"))
    assert drawn and set(drawn) <= {"capacity.png", "ood.png", "ood-by-length.png"}
    for png in (d for d in drawn if not d.endswith("-by-length.png")):
        assert (out / "grids" / png).with_suffix(".md").read_text().count("|") > 4
    if "ood-by-length.png" in drawn:  # an OOD grid evaluated per length draws its line plot beside it
        assert (out / "grids" / "ood-by-length.csv").is_file()
