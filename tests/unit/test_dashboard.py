"""synthlab.study.dashboard: the params, user attrs and intermediate values a sweep's study holds for
optuna-dashboard, and the rule that keeps one distribution per param name in a study."""

from __future__ import annotations

import math
import types

import pytest

from synthlab.plan.cells import expand_cells
from synthlab.plan.sweepfile import parse_sweep
from synthlab.study import dashboard
from synthlab.study.trialhooks import trial_report

SWEEP = """
[sweep]
task = "flipflop"
default_preset = "smoke"
metric = "token_acc"
show = "error"
ood = ["ood-sparse"]

[axes]
pe = ["rope", "nope"]
seed = [0, 1]
"model.dropout" = [0, 0.0]

[presets.smoke]
[presets.quick]
[presets.paper]
"""


def spec():
    return parse_sweep(SWEEP, "t.toml")


def test_axis_choices_keep_the_grid_order_and_tell_types_apart():
    cells = expand_cells(spec(), "smoke")
    choices = dashboard.axis_choices(cells)
    assert choices["pe"] == ("rope", "nope") and choices["seed"] == (0, 1) and choices["task"] == ("flipflop",)
    # 0 and 0.0 are two grid values (Python finds them equal; the cells differ)
    assert choices["model.dropout"] == (0, 0.0) and [type(c) for c in choices["model.dropout"]] == [int, float]


def _study():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=optuna.storages.InMemoryStorage())


def test_a_waiting_trial_carries_its_cells_axes_as_categorical_params():
    from optuna.distributions import CategoricalDistribution

    cells = expand_cells(spec(), "smoke")
    ax = dashboard.AxisParams(cells)
    st = _study()
    for c in cells:
        st.add_trial(ax.waiting_trial(c, {"cell_key": c.key}))
    trials = st.get_trials()
    assert len(trials) == 8
    for t, c in zip(trials, cells):
        assert t.params == c.axes
        assert type(t.params["model.dropout"]) is type(c.axes["model.dropout"])
        assert t.distributions["pe"] == CategoricalDistribution(("rope", "nope"))
        assert t.user_attrs == {"cell_key": c.key}
    assert not ax.left_off and ax.notes() == []


def test_a_later_grid_keeps_the_studys_distributions_and_leaves_new_values_off():
    """Optuna allows one distribution per param name: a narrowed grid reuses the study's wider
    choices; a value they lack is no param (noted once), and the study stays valid for Optuna."""
    import optuna
    from optuna.trial import TrialState

    st = _study()
    first = expand_cells(spec(), "smoke", ["rope"])
    ax1 = dashboard.AxisParams(first)
    for c in first:
        st.add_trial(ax1.waiting_trial(c, {}))
    wider = expand_cells(spec(), "smoke", ["nope", "rope"])
    ax2 = dashboard.AxisParams(wider)
    ax2.learn(st.get_trials())
    for c in wider:
        st.add_trial(ax2.waiting_trial(c, {}))
    later = st.get_trials()[len(first) :]
    assert [t.params.get("pe") for t in later] == [None] * 4 + ["rope"] * 4
    assert all(t.params["seed"] == t.params["seed"] for t in later)  # the other axes are there
    assert ax2.left_off == {"pe": ["nope"]}
    notes = ax2.notes()
    assert len(notes) == 1 and "'pe'" in notes[0] and "('rope')" in notes[0] and "'nope'" in notes[0]
    assert ax2.notes() == []  # once
    # every trial holding "pe" has the study's one distribution; finishing them and asking
    # Optuna for the search space works
    assert {t.distributions["pe"] for t in st.get_trials() if "pe" in t.params} == {
        st.get_trials()[0].distributions["pe"]
    }
    for t in st.get_trials():
        st._storage.set_trial_state_values(t._trial_id, TrialState.RUNNING)
        st.tell(t.number, 0.5)
    space = optuna.search_space.intersection_search_space(st.get_trials())
    assert "seed" in space and "pe" not in space  # the "nope" trials lack it


def test_a_trial_enqueued_without_params_gets_them_after_the_take():
    from optuna.trial import TrialState

    cells = expand_cells(spec(), "smoke")
    st = _study()
    st.enqueue_trial({}, user_attrs={"cell_key": cells[3].key})  # a study from before trials carried params
    t = st.get_trials()[0]
    st._storage.set_trial_state_values(t._trial_id, TrialState.RUNNING)
    ax = dashboard.AxisParams(cells)
    ax.learn(st.get_trials())
    ax.fill(st._storage, t, cells[3])
    assert st.get_trials()[0].params == cells[3].axes


def test_fill_leaves_off_a_name_another_process_fixed_differently():
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    cells = expand_cells(spec(), "smoke")
    st = _study()
    st.enqueue_trial({})
    st.enqueue_trial({})
    a, b = st.get_trials()
    for t in (a, b):
        st._storage.set_trial_state_values(t._trial_id, TrialState.RUNNING)
    st._storage.set_trial_param(a._trial_id, "pe", 0, CategoricalDistribution(("alibi", "rope", "nope")))
    ax = dashboard.AxisParams(cells)  # learned nothing: it will try the grid's own choices
    ax.fill(st._storage, b, cells[0])
    assert "pe" not in st.get_trials()[1].params and ax.left_off == {"pe": ["rope"]}
    assert st.get_trials()[1].params["seed"] == 0


def test_metric_attrs_are_the_headline_metric_of_every_split_and_wall_time():
    rec = {
        "task": "flipflop",
        "wall_s": 12.5,
        "metrics": {
            "test": {"token_acc": 0.9, "seq_acc": 0.5},
            "ood-sparse": {"token_acc": 0.7},
            "ood-dense": {"token_acc": None},
        },
    }
    assert dashboard.metric_attrs(spec(), rec) == {"test/token_acc": 0.9, "ood-sparse/token_acc": 0.7, "wall_s": 12.5}
    assert dashboard.metric_attrs(spec(), {"status": "failed", "metrics": {}, "wall_s": math.nan}) == {}


def test_plan_names_the_objective_when_the_config_evaluates_periodically():
    sp = spec()
    cfg = types.SimpleNamespace(train=types.SimpleNamespace(steps=400, eval_every=50))
    assert dashboard.plan(sp, cfg) == dashboard.TrialPlan(400, "ood-sparse/token_acc")
    cfg.train.eval_every = 0
    assert dashboard.plan(sp, cfg) == dashboard.TrialPlan(400, "loss")
    del cfg.train.eval_every  # a trainer from before train.eval_every
    assert dashboard.plan(sp, cfg).intermediate == "loss"
    loss, obj = dashboard.TrialPlan(1, "loss"), dashboard.TrialPlan(1, "ood-sparse/token_acc")
    assert dashboard.describe([loss, loss]) == "loss" and dashboard.describe([obj]) == "ood-sparse/token_acc"
    assert dashboard.describe([loss, obj]) == "ood-sparse/token_acc (cells with train.eval_every), loss (the others)"


class Recorder:
    """A storage that records intermediate values (and can fail)."""

    def __init__(self, fail: bool = False):
        self.values: dict[int, float] = {}
        self.fail = fail

    def set_trial_intermediate_value(self, trial_id, step, value):
        if self.fail:
            raise RuntimeError("storage hiccup")
        self.values[step] = value


def test_intermediate_values_are_throttled_to_about_50_a_trial_and_keep_the_last_step(monkeypatch):
    monkeypatch.setattr(dashboard, "MIN_INTERVAL", 0.0)
    rec = Recorder()
    curve = dashboard.Intermediate(rec, 0, dashboard.TrialPlan(1000, "loss"))
    for step in range(0, 1000, 5):  # the trainer reports every log step (steps // 200)
        curve(step, {"loss": 1.0 / (step + 1)})
    curve(999, {"loss": 0.001})
    steps = sorted(rec.values)
    assert 45 <= len(steps) <= 51 and steps[0] == 0 and steps[-1] == 999
    assert all(b - a >= 20 for a, b in zip(steps, steps[1:-1]))
    assert rec.values[999] == 0.001
    # other keys (a periodic evaluation's values when the curve is the loss) are not its points
    curve(1000, {"ood-sparse/token_acc": 0.5})
    assert 1000 not in rec.values


def test_intermediate_values_wait_min_interval_between_writes_but_never_lose_the_end():
    rec = Recorder()
    curve = dashboard.Intermediate(rec, 0, dashboard.TrialPlan(10, "ood-sparse/token_acc"))
    for step in range(10):  # a fast run: ten points within a few milliseconds
        curve(step, {"ood-sparse/token_acc": step / 10, "loss": 1.0})
    assert rec.values == {0: 0.0, 9: 0.9}


def test_a_storage_error_never_reaches_the_run():
    curve = dashboard.Intermediate(Recorder(fail=True), 0, dashboard.TrialPlan(10, "loss"))
    curve(0, {"loss": 1.0})
    curve(9, {"loss": float("nan")})  # not a number: skipped
    assert curve.points == 0


def test_trial_report_feeds_every_sink_in_order():
    seen = []
    report = trial_report(lambda s, v: seen.append(("a", s, v)), lambda s, v: seen.append(("b", s, v)))
    report(3, {"loss": 0.5})
    assert seen == [("a", 3, {"loss": 0.5}), ("b", 3, {"loss": 0.5})]


@pytest.mark.parametrize("value,want", [("x", "x"), (1, 1), (None, None), ([1, 2], "[1, 2]")])
def test_non_scalar_axis_values_become_json_choices(value, want):
    assert dashboard._scalar(value) == want


def test_an_rdb_study_whose_choices_another_grid_fixed_meanwhile_is_learned_and_the_enqueue_retried(tmp_path):
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}")
    other = CategoricalDistribution(("alibi", "rope", "nope"))
    st.add_trial(create_trial(state=TrialState.WAITING, params={"pe": "alibi"}, distributions={"pe": other}))
    cells = expand_cells(spec(), "smoke")
    ax = dashboard.AxisParams(cells)  # learned nothing: its first try uses the grid's (rope, nope)
    with pytest.raises(ValueError):
        st.add_trial(ax.waiting_trial(cells[0], {}))
    ax.enqueue(st, cells[0], {"cell_key": cells[0].key})
    t = st.get_trials()[-1]
    assert t.params["pe"] == "rope" and t.distributions["pe"] == other and t.user_attrs == {"cell_key": cells[0].key}
