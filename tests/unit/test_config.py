"""Config presets and --set overrides: types, ranges, key resolution."""

import pytest

from synthlab import generators
from synthlab.core.config import PRESETS, RunConfig, apply_overrides, coerce, resolve_key, validate_fields
from synthlab.generators import che
from synthlab.plan.presets import build_config, preset

FLIPFLOP_PARAMS = tuple(generators.TASKS["flipflop"].PARAMS)


def test_every_task_has_every_preset_with_valid_task_params():
    assert len(generators.TASKS) == 23
    assert len(che.TASKS) == 15 and set(che.TASKS) <= set(generators.TASKS)
    for name in generators.TASKS:
        for p in PRESETS:
            cfg = build_config(name, "rope", p)
            generators.get_task(name, **cfg.task_params)  # raises on a wrong parameter name / value
            validate_fields(cfg)


def test_quick_flipflop_matches_spec_evidence():
    cfg = build_config("flipflop", "rope", "quick")
    assert cfg.task_params["n_pairs"] == 64  # T = 128
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.model.n_heads) == (64, 2, 4)
    t = cfg.train
    assert (t.steps, t.batch_size, t.lr, t.warmup, t.schedule, t.weight_decay) == (1000, 32, 2e-3, 50, "linear", 0.1)
    assert cfg.task_params["loss"] == "reads"


def test_flipflop_train_quick_is_the_sweep_files_quick_cell():
    """`synthlab train flipflop --preset quick` runs exactly one cell of the quick sweep."""
    from synthlab.study.sweeping import expand_cells, load_sweep

    cell = expand_cells(load_sweep("flipflop"), "quick", ["rope"])[0]
    from synthlab import generators

    names = list(generators.get_task("flipflop").PARAMS)
    swept = apply_overrides(build_config("flipflop", "rope", "quick"), cell.overrides, names)
    assert swept == build_config("flipflop", "rope", "quick")


def test_arithmetic_quick_uses_fewer_operators_than_paper():
    assert build_config("arithmetic", "rope", "quick").task_params["n_ops"] in (3, 4)
    assert build_config("arithmetic", "rope", "paper").task_params["n_ops"] == 6


def test_unknown_preset_and_task():
    with pytest.raises(ValueError, match="preset 'huge'.*smoke, quick, paper"):
        preset("flipflop", "huge")
    with pytest.raises(ValueError, match="task 'nosuch'"):
        preset("nosuch", "quick")


def test_preset_is_a_copy():
    a = preset("flipflop", "quick")
    a["model"]["d_model"] = 1
    assert preset("flipflop", "quick")["model"]["d_model"] == 64


@pytest.mark.parametrize(
    "key,want",
    [
        ("d_model", ("model", "d_model")),
        ("model.d_model", ("model", "d_model")),
        ("steps", ("train", "steps")),
        ("train.lr", ("train", "lr")),
        ("n_pairs", ("task", "n_pairs")),
        ("task.n_pairs", ("task", "n_pairs")),
        ("pe", ("", "pe")),
        ("rope_scaling", ("", "rope_scaling")),
    ],
)
def test_resolve_key(key, want):
    assert resolve_key(key, FLIPFLOP_PARAMS) == want


def test_resolve_key_errors_name_the_key_and_allowed():
    with pytest.raises(ValueError, match="unknown setting 'd_modl'.*model.d_model"):
        resolve_key("d_modl", FLIPFLOP_PARAMS)
    with pytest.raises(ValueError, match="unknown setting 'task.n_pair'.*task.n_pairs"):
        resolve_key("task.n_pair", FLIPFLOP_PARAMS)
    with pytest.raises(ValueError, match="unknown setting 'model.lr'"):
        resolve_key("model.lr", FLIPFLOP_PARAMS)


def test_ambiguous_bare_key():
    with pytest.raises(ValueError, match="ambiguous.*train.steps.*task.steps"):
        resolve_key("steps", ("steps",))
    assert resolve_key("task.steps", ("steps",)) == ("task", "steps")


def test_overrides_are_typed_from_strings():
    cfg = build_config("flipflop", "rope", "quick")
    out = apply_overrides(
        cfg,
        {
            "d_model": "32",
            "train.lr": "3e-4",
            "n_train": "none",
            "causal": "false",
            "task.n_pairs": "16",
            "warmup": "1e1",
            "max_len": "256",
        },
        FLIPFLOP_PARAMS,
    )
    assert out.model.d_model == 32 and out.train.lr == 3e-4 and out.train.n_train is None
    assert out.model.causal is False and out.train.warmup == 10 and out.model.max_len == 256
    assert out.task_params["n_pairs"] == "16"  # typed by the task itself (get_task)
    assert cfg.model.d_model == 64  # the original is untouched


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("d_model", "abc", "model.d_model: expected an integer"),
        ("d_model", "1.5", "model.d_model: expected an integer"),
        ("lr", "fast", "train.lr: expected a number"),
        ("lr", "nan", "train.lr: expected a finite number"),
        ("causal", "maybe", "model.causal: expected true or false"),
        ("steps", True, "train.steps: expected an integer"),
    ],
)
def test_wrong_type(key, value, match):
    with pytest.raises(ValueError, match=match):
        apply_overrides(build_config("flipflop", "rope", "quick"), {key: value}, FLIPFLOP_PARAMS)


@pytest.mark.parametrize(
    "over,match",
    [
        ({"d_model": 0}, r"model.d_model must be >= 1"),
        ({"dropout": 1.0}, r"model.dropout must be in \[0, 1\)"),
        ({"lr": 0.0}, r"train.lr must be > 0"),
        ({"schedule": "step"}, r"train.schedule must be one of linear, cosine, constant"),
        ({"d_model": 30, "n_heads": 4}, r"model.d_model \(30\) must be divisible by model.n_heads \(4\)"),
        ({"warmup": 5000}, r"train.warmup must be <= train.steps"),
        ({"n_train": 0}, r"train.n_train must be >= 1"),
        ({"rope_scaling": "cubic"}, r"rope_scaling must be one of none, linear, ntk, yarn"),
    ],
)
def test_range_checks(over, match):
    cfg = apply_overrides(build_config("flipflop", "rope", "quick"), over, FLIPFLOP_PARAMS)
    with pytest.raises(ValueError, match=match):
        validate_fields(cfg)


def test_coerce_optional_none_words():
    assert coerce("x", "None", int | None) is None
    assert coerce("x", "12", int | None) == 12


def test_roundtrip_dict():
    cfg = build_config("parity_check", "nope", "smoke", seed=3)
    again = RunConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.train.seed == 3
