"""`sweep --seeds`: the flag's forms, its refusals, the grid it makes, and the seed
as an int param that a study can widen later (no training)."""

from __future__ import annotations

import pytest

from synthlab.cli import build_parser
from synthlab.commands.sweep import count_cells
from synthlab.plan.cells import expand_cells
from synthlab.plan.seeds import MAX_SEEDS, parse_seeds
from synthlab.plan.sweepfile import parse_sweep
from synthlab.study import dashboard

SWEEP = """
[sweep]
task = "flipflop"
default_preset = "smoke"

[axes]
pe = ["rope", "nope"]
seed = [0, 1]

[presets.smoke]
[presets.quick]
axes = { seed = [0, 1, 2] }
[presets.paper]
"""


@pytest.mark.parametrize(
    "value, seeds",
    [
        ("10", list(range(10))),
        (10, list(range(10))),
        ("1", [0]),
        ("3-9", [3, 4, 5, 6, 7, 8, 9]),
        ("7-7", [7]),
        ("0,4,7", [0, 4, 7]),
        ("7,0", [7, 0]),
        (" 0-2, 7 ", [0, 1, 2, 7]),
        ([5, 2], [5, 2]),
        ((0,), [0]),
        ("4294967295-4294967295", [4294967295]),
        (str(MAX_SEEDS), list(range(MAX_SEEDS))),
    ],
)
def test_a_count_a_range_or_a_list(value, seeds):
    assert parse_seeds(value) == seeds


@pytest.mark.parametrize(
    "value, needle",
    [
        ("0", "--seeds '0': a count of seeds is at least 1"),
        (0, "a count of seeds is at least 1"),
        ("-3", "--seeds '-3': seeds are integers from 0 to 4294967295, got -3"),
        ("5-2", "--seeds '5-2': range 5-2 ends before it starts"),
        ("a", "--seeds 'a': expected a count N (seeds 0 to N-1), a range A-B or a list A,B,C"),
        ("", "expected a count N"),
        ("1,,2", "expected a count N"),
        ("1.5", "expected a count N"),
        ("1,1", "--seeds '1,1': seed 1 is repeated"),
        ("0-3,2", "seed 2 is repeated"),
        ("100000", "--seeds '100000': 100,000 seeds, over the 10,000 a sweep takes"),
        ("0-4294967295", "more than 10,000 seeds"),  # counted, never made
        ("4294967296-4294967296", "seeds are integers from 0 to 4294967295, got 4294967296"),
        ([], "expected at least one seed"),
        ([0, -1], "got -1"),
        ([0, "1"], "seed '1' is not an integer"),
        ([1, 1], "seed 1 is repeated"),
        (True, "expected a count N"),
        (2.0, "expected a count N"),
    ],
)
def test_bad_seeds_are_one_line_naming_the_flag(value, needle):
    with pytest.raises(ValueError) as e:
        parse_seeds(value)
    assert needle in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("--seeds")


def test_the_flag_is_parsed_as_text_and_negative_numbers_reach_the_check():
    p = build_parser()
    assert p.parse_args(["sweep", "flipflop", "--seeds", "3-9"]).seeds == "3-9"
    assert p.parse_args(["sweep", "flipflop", "--seeds", "-3"]).seeds == "-3"  # refused by parse_seeds, not argparse
    assert p.parse_args(["sweep", "flipflop"]).seeds is None


def test_seeds_replace_the_preset_axis_in_the_grid_and_its_count():
    spec = parse_sweep(SWEEP, "t.toml")
    assert sorted({c.seed for c in expand_cells(spec, "quick")}) == [0, 1, 2]
    cells = expand_cells(spec, "quick", seeds=[3, 5])
    assert [(c.pe, c.seed) for c in cells] == [("rope", 3), ("rope", 5), ("nope", 3), ("nope", 5)]
    assert count_cells(spec, "quick", None, [3, 5]) == 4 == len(cells)
    assert count_cells(spec, "smoke", ["rope"], list(range(10))) == 10
    # a seed's cell is the same cell whichever seed list asked for it: a resumed study finds it
    assert {c.key for c in expand_cells(spec, "smoke")} <= {c.key for c in expand_cells(spec, "smoke", seeds=[0, 1, 2])}


def test_set_train_seed_points_at_the_flag():
    spec = parse_sweep(SWEEP, "t.toml")
    with pytest.raises(
        ValueError,
        match=r"train.seed is the seed axis \(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, \.\.\.\); "
        "give the seeds with --seeds",
    ):
        expand_cells(spec, "smoke", settings={"train.seed": "3"}, seeds=list(range(20)))


def _study():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(storage=optuna.storages.InMemoryStorage())


def test_the_seed_is_an_int_param_and_more_seeds_later_join_the_study():
    """Optuna keeps one categorical per name, fixed by the first trial: seeds added later could
    not be params. As an int distribution (checked by kind, not range) each grid writes its own
    range, and the study stays valid for Optuna."""
    from optuna.distributions import IntDistribution

    spec = parse_sweep(SWEEP, "t.toml")
    st = _study()
    first = expand_cells(spec, "smoke", ["rope"], seeds=[0, 1])
    ax1 = dashboard.AxisParams(first)
    for c in first:
        st.add_trial(ax1.waiting_trial(c, {}))
    more = expand_cells(spec, "smoke", ["rope"], seeds=[0, 1, 2, 3])
    ax2 = dashboard.AxisParams(more)
    ax2.learn(st.get_trials())
    for c in more[2:]:
        st.add_trial(ax2.waiting_trial(c, {}))
    trials = st.get_trials()
    assert [t.params["seed"] for t in trials] == [0, 1, 2, 3]
    assert [t.distributions["seed"] for t in trials] == [IntDistribution(0, 1)] * 2 + [IntDistribution(0, 3)] * 2
    assert not ax2.left_off and ax2.notes() == []


def test_a_study_that_held_the_seed_as_categorical_keeps_it_and_leaves_new_seeds_off():
    """A study written before seeds were int params: Optuna refuses another kind under the name,
    so its old seeds keep the categorical, new ones carry no seed param (noted once)."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    spec = parse_sweep(SWEEP, "t.toml")
    st = _study()
    st.add_trial(
        create_trial(
            state=TrialState.WAITING, params={"seed": 0}, distributions={"seed": CategoricalDistribution((0, 1))}
        )
    )
    cells = expand_cells(spec, "smoke", ["rope"], seeds=[1, 2])
    ax = dashboard.AxisParams(cells)
    ax.learn(st.get_trials())
    for c in cells:
        st.add_trial(ax.waiting_trial(c, {}))
    assert [t.params.get("seed") for t in st.get_trials()] == [0, 1, None]
    assert ax.left_off == {"seed": [2]} and "'seed'" in ax.notes()[0]


def test_fill_writes_an_int_seed():
    from optuna.trial import TrialState

    spec = parse_sweep(SWEEP, "t.toml")
    cells = expand_cells(spec, "smoke", ["rope"], seeds=[4, 9])
    st = _study()
    st.enqueue_trial({})
    t = st.get_trials()[0]
    st._storage.set_trial_state_values(t._trial_id, TrialState.RUNNING)
    ax = dashboard.AxisParams(cells)
    ax.fill(st._storage, t, cells[1])
    assert st.get_trials()[0].params == {"task": "flipflop", "pe": "rope", "seed": 9}
