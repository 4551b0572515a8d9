"""Sweep files: parsing, validation, grid expansion (no training)."""

from __future__ import annotations

import dataclasses

import pytest

from synthlab.plan import cells
from synthlab.study import storage
from synthlab.study import sweeping as sw

GOOD = """
[sweep]
task = "flipflop"
default_preset = "smoke"
metric = "token_acc"
show = "error"
ood = ["ood-sparse"]

[axes]
pe = ["rope", "kerple+dape"]
d_model = [16, 32]
dape_k = [1, 3]
seed = [0, 1]

[presets.smoke]
model = { n_layers = 1 }
train = { steps = 5 }

[presets.quick]
[presets.paper]
"""


def test_good_file_expands_to_the_exhaustive_grid():
    spec = sw.parse_sweep(GOOD, "good.toml")
    assert spec.name == "good" and spec.default_preset == "smoke" and spec.show == "error"
    cells = sw.expand_cells(spec, "smoke")
    # rope: 2 d_model x 2 seeds; kerple+dape: 2 kernels x 2 d_model x 2 seeds (dape_k only applies to dape)
    assert len(cells) == 4 + 8
    pes = sorted({c.pe for c in cells})
    assert pes == ["kerple+dape:k=1", "kerple+dape:k=3", "rope"]
    c = cells[0]
    assert c.overrides == {"model.d_model": 16, "model.n_layers": 1, "train.steps": 5}
    assert c.seed == 0 and c.axes["d_model"] == 16
    assert len({c.key for c in cells}) == len(cells)


def test_pe_flag_replaces_the_encodings_axis():
    spec = sw.parse_sweep(GOOD, "good.toml")
    cells = sw.expand_cells(spec, "smoke", ["cope"])
    assert {c.pe for c in cells} == {"cope"} and len(cells) == 4
    with pytest.raises(ValueError, match="--pe"):
        sw.expand_cells(spec, "smoke", ["cope", ""])


def test_cell_key_is_stable_and_names_the_whole_run():
    spec = sw.parse_sweep(GOOD, "good.toml")
    a = [c.key for c in sw.expand_cells(spec, "smoke")]
    b = [c.key for c in sw.expand_cells(sw.parse_sweep(GOOD, "good.toml"), "smoke")]
    assert a == b
    changed = sw.parse_sweep(GOOD.replace("steps = 5", "steps = 6"), "good.toml")
    assert not set(a) & {c.key for c in sw.expand_cells(changed, "smoke")}


@pytest.mark.parametrize(
    "text, match",
    [
        (GOOD.replace("[axes]", "[axes]\nbogus_table = 1\n").replace("bogus_table = 1", "x = 1"), "axes.x"),
        (
            GOOD.replace('metric = "token_acc"', 'metrik = "token_acc"'),
            r"unknown key sweep.'metrik'.*allowed: name, task",
        ),
        (
            GOOD.replace("d_model = [16, 32]", 'd_model = [16, "big"]'),
            r"axes.d_model: value 'big' has the wrong type \(allowed: integers",
        ),
        (GOOD.replace("seed = [0, 1]", "seed = [0.5]"), r"axes.seed.*wrong type.*integers"),
        (GOOD.replace('pe = ["rope", "kerple+dape"]', "pe = [1]"), r"axes.pe.*wrong type.*strings"),
        (GOOD.replace('show = "error"', 'show = "loss"'), r"sweep.show.*allowed: accuracy, error"),
        (GOOD.replace("[presets.paper]", ""), r"presets.paper is missing"),
        (
            GOOD.replace("[presets.paper]", "[presets.huge]"),
            r"unknown key presets.'huge'.*allowed: smoke, quick, paper",
        ),
        (
            GOOD.replace("model = { n_layers = 1 }", "model = { n_layers = [1] }"),
            r"presets.smoke.model.n_layers.*wrong type",
        ),
        (GOOD.replace("[presets.smoke]", "[presets.smoke]\nwarmup = 3"), r"unknown key presets.smoke.'warmup'"),
        (GOOD + "\n[tune]\nlr = { low = 1e-2, high = 1e-3 }\n", r"tune.lr.*low < high"),
        (GOOD.replace("d_model = [16, 32]", "d_model = [16, 16]"), r"axes.d_model: repeated value"),
        (GOOD.replace('task = "flipflop"\n', ""), r"no task"),
        (
            GOOD.replace('task = "flipflop"', 'task = "flipflop"\nbase = "flipflp"'),
            r"sweep.base: unknown sweep 'flipflp' \(did you mean flipflop",
        ),
        (
            GOOD.replace('task = "flipflop"', 'task = "flipflop"\nbase = "che"'),
            r"sweep.base: sweeps/che.toml has no presets for task 'flipflop' \(its tasks: even_pairs,",
        ),
        (GOOD.replace('task = "flipflop"', 'task = "flipflop"\nbase = 3'), r"sweep.base: value 3 has the wrong type"),
    ],
)
def test_bad_files_name_file_key_and_allowed_values(text, match):
    with pytest.raises(ValueError, match=match) as e:
        sw.parse_sweep(text, "bad.toml")
    assert str(e.value).startswith("bad.toml: ")


def test_a_base_gives_its_preset_settings_under_the_files_own_key_by_key():
    """Without ``base`` a preset's settings are the file's own tables alone; with it, the named
    installed sweep's tables with the file's own over them, per dotted setting. Axes and the
    rest stay the file's."""
    plain = sw.parse_sweep(GOOD, "good.toml")
    assert plain.base is None
    assert plain.presets["smoke"]["overrides"] == {"model.n_layers": 1, "train.steps": 5}
    assert plain.presets["quick"]["overrides"] == {}
    spec = sw.parse_sweep(GOOD.replace('task = "flipflop"', 'task = "flipflop"\nbase = "flipflop"'), "good.toml")
    family = sw.load_sweep("flipflop")
    assert spec.base == "flipflop" and spec.axes == plain.axes
    assert spec.presets["smoke"]["overrides"] == {
        **family.presets["smoke"]["overrides"],
        "model.n_layers": 1,
        "train.steps": 5,
    }
    assert spec.presets["quick"]["overrides"] == family.presets["quick"]["overrides"]
    assert spec.presets["quick"]["axes"] == {}  # flipflop.toml's 8 quick seeds are its own design
    cell = sw.expand_cells(spec, "smoke")[0]
    assert cell.overrides["train.lr"] == family.presets["smoke"]["overrides"]["train.lr"]


def test_malformed_toml_names_file_and_line():
    with pytest.raises(ValueError, match=r"bad.toml: malformed TOML: .*line 3"):
        sw.parse_sweep('[sweep]\ntask = "flipflop"\npe = [rope\n', "bad.toml")


def test_tuned_parameters_give_distinct_deterministic_slots():
    text = GOOD + "\n[tune]\ntrials_per_cell = 3\nlr = { low = 1e-4, high = 1e-2, log = true }\n"
    spec = sw.parse_sweep(text, "t.toml")
    cells = [c for c in sw.expand_cells(spec, "smoke") if c.pe == "rope" and c.seed == 0 and c.axes["d_model"] == 16]
    lrs = [c.overrides["train.lr"] for c in cells]
    assert len(cells) == 3 and len(set(lrs)) == 3
    assert lrs[0] == pytest.approx(1e-3, rel=1e-3)  # the log-midpoint first
    assert all(1e-4 <= v <= 1e-2 for v in lrs)
    listed = sw.parse_sweep(GOOD + "\n[tune]\ntrials_per_cell = 2\nlr = [1e-4, 3e-4]\n", "t.toml")
    assert sorted({c.overrides["train.lr"] for c in sw.expand_cells(listed, "smoke")}) == [1e-4, 3e-4]


def test_pose_chunks_axis_is_a_field_of_the_cell_and_of_its_config():
    from synthlab.model import PoSE
    from synthlab.run import specs, training

    text = GOOD.replace("dape_k = [1, 3]", "pose_chunks = [1, 3]").replace(
        "[presets.smoke]", '[presets.smoke]\npositions = "pose:target=64"'
    )
    grid = sw.expand_cells(sw.parse_sweep(text, "p.toml"), "smoke")
    assert sorted({c.pose_chunks for c in grid}) == [1, 3] and {c.scheme for c in grid} == {"pose:target=64"}
    # the key keeps the spelling of studies already run, which resume by it
    assert sorted({c.positions for c in grid}) == ["pose:chunks=1,target=64", "pose:chunks=3,target=64"]
    c = next(c for c in grid if c.pose_chunks == 3)
    cfg = training.cell_config(c, "smoke", probe=False)
    assert cfg.pose_chunks == 3 and cfg.positions == "pose:target=64"
    assert specs.position_scheme(cfg) == PoSE(chunks=3, target=64)
    bad = text.replace('positions = "pose:target=64"', 'positions = "randomized:max=64"')
    with pytest.raises(ValueError, match="pose_chunks needs positions 'pose"):
        sw.expand_cells(sw.parse_sweep(bad, "b.toml"), "smoke")


def test_dape_k_axis_is_a_field_of_the_cell_and_sets_the_model_kernel():
    from synthlab import generators
    from synthlab.run import configs, training

    grid = [c for c in sw.expand_cells(sw.parse_sweep(GOOD, "good.toml"), "smoke") if c.dape_k == 3]
    assert grid and {c.encoding for c in grid} == {"kerple+dape"} and grid[0].axes["dape_k"] == 3
    cfg = training.cell_config(grid[0], "smoke", probe=False)
    assert cfg.pe == "kerple+dape" and cfg.dape_k == 3  # the kernel in one place: the field
    model = configs.model_for(cfg, generators.get_task("flipflop"), max_len=64)
    assert {m.k for m in model.modules() if type(m).__name__ == "DAPE"} == {3}
    # an encoding that fixes its own kernel, and one without DAPE, refuse the axis
    for fixed in ("kerple+dape:k=5", "kerple+dape-k"):
        with pytest.raises(ValueError, match="already fixes"):
            sw.expand_cells(sw.parse_sweep(GOOD.replace('"kerple+dape"', f'"{fixed}"'), "f.toml"), "smoke")
    with pytest.raises(ValueError, match="needs an encoding with DAPE"):
        training.cell_config(cells.Cell("flipflop", "rope", 0, {}, None, None, 0, {}, dape_k=3), "smoke", probe=False)


def test_cell_keys_keep_the_spelling_of_studies_already_run():
    grid = sw.expand_cells(sw.parse_sweep(GOOD.replace('"kerple+dape"', '"nope+dape:hidden=8"'), "k.toml"), "smoke")
    k3 = next(c for c in grid if c.dape_k == 3)
    assert k3.pe == "nope+dape:hidden=8,k=3"  # the file's text kept, the kernel written last
    assert '"pe":"nope+dape:hidden=8,k=3"' in k3.key and '"positions":null' in k3.key


def test_installed_sweeps_cover_the_experiments_and_have_all_presets():
    names = set(sw.installed_sweeps())
    assert {"flipflop", "selective_copy", "counting", "arithmetic", "binfa", "che", "pose", "mqar"} <= names
    ff = sw.load_sweep("flipflop")
    assert ff.default_preset == "quick"
    assert ff.axes["pe"] == ["cope", "rope", "alibi", "nope", "learned"]
    counting = sw.load_sweep("counting")
    assert counting.axes["pe"] == ["cope", "relative", "learned"] and counting.axes["n_vars"] == [1, 3]
    arith = sw.load_sweep("arithmetic")
    assert arith.axes["pe"] == ["bipe-alibi", "bipe-rope", "alibi", "rope", "sinusoidal", "xpos"]
    assert min(arith.preset_axes("quick")["d_model"]) == 32 and max(arith.preset_axes("quick")["d_model"]) == 64
    assert "nfa" in sw.load_sweep("binfa").tasks
    che = sw.load_sweep("che")
    assert len(che.tasks) == 15 and len(che.preset_axes("paper")["dape_k"]) == 4
    for name in names:
        spec = sw.load_sweep(name)
        assert set(spec.presets) == {"smoke", "quick", "paper"}
        for preset in spec.presets:
            assert sw.expand_cells(spec, preset)


def test_a_che_task_name_restricts_che_and_keeps_its_study():
    spec = sw.load_sweep("parity_check")
    assert spec.name == "che" and spec.tasks == ["parity_check"]
    assert {c.task for c in sw.expand_cells(spec, "smoke")} == {"parity_check"}


def test_unknown_sweep_and_missing_file():
    with pytest.raises(ValueError, match="unknown sweep or task 'nosuch'.*flipflop"):
        sw.load_sweep("nosuch")
    with pytest.raises(ValueError, match="does not exist"):
        sw.load_sweep("/nonexistent/dir/x.toml")


def test_storage_urls_are_checked_without_creating_anything(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        sw.check_storage(str(tmp_path / "missing" / "s.journal"))
    with pytest.raises(ValueError, match="does not exist"):
        sw.check_storage(f"sqlite:///{tmp_path}/missing/s.db")
    with pytest.raises(ValueError, match="not a usable storage URL|cannot load"):
        sw.check_storage("nosuchdialect://x/y")
    sw.check_storage(str(tmp_path / "ok.journal"))
    assert list(tmp_path.iterdir()) == []
    assert storage._redact("postgresql://me:secret@host/db") == "postgresql://me:***@host/db"


@pytest.mark.parametrize(
    "installed, driver",
    [({"psycopg", "psycopg2"}, "psycopg"), ({"psycopg"}, "psycopg"), ({"psycopg2"}, "psycopg2"), (set(), "psycopg")],
)
def test_a_postgresql_url_without_a_driver_gets_psycopg_3(monkeypatch, installed, driver):
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name, *a):
        if "psycopg" in name:
            return real("json") if name in installed else None
        return real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for bare in ("postgresql://", "postgres://"):
        assert storage.normalize_url(bare + "me@host/db") == f"postgresql+{driver}://me@host/db"
    # a URL naming its driver, and the other storages, are kept
    for url in ("postgresql+psycopg2://me@host/db", "mysql://me@host/db", "sqlite:///x.db", "runs/study.journal"):
        assert storage.normalize_url(url) == url


def test_tuned_value_van_der_corput_spreads():
    spec = {"low": 0.0, "high": 1.0, "log": False}
    assert [cells._tuned_value(spec, i, 4) for i in range(4)] == [0.5, 0.25, 0.75, 0.125]


def test_a_pe_list_keeps_each_specs_own_parameters():
    """Commas separate encodings and a spec's parameters alike; `key=value` with no `:` belongs
    to the spec before it (was: `sep_keys=1` taken for an encoding)."""
    from synthlab.plan.cells import split_pe_list

    assert split_pe_list("cope,rope") == ["cope", "rope"]
    assert split_pe_list("cope:npos=16,sep_keys=1, rope") == ["cope:npos=16,sep_keys=1", "rope"]
    assert split_pe_list("cope:npos=16,cope:npos=32") == ["cope:npos=16", "cope:npos=32"]
    assert split_pe_list("kerple+dape:k=3,hidden=16,alibi") == ["kerple+dape:k=3,hidden=16", "alibi"]
    spec = sw.load_sweep("flipflop")
    cells = sw.expand_cells(spec, "smoke", pe=split_pe_list("cope:npos=16,sep_keys=1,rope"))
    assert sorted({c.pe for c in cells}) == ["cope:npos=16,sep_keys=1", "rope"]


def test_a_tuned_slot_with_a_failed_seed_never_wins_on_its_survivors():
    # slot 1's third seed diverged; ranked on the two that finished (0.9) it beat slot 0's three
    # finished seeds (0.6): the grid showed a setting that fails a third of the time
    spec = sw.load_sweep("flipflop")

    def rec(slot, seed, acc):
        c = cells.Cell(
            "flipflop",
            "rope",
            seed,
            {"train.lr": [1e-3, 1e-2][slot]},
            None,
            None,
            slot,
            {"pe": "rope", "seed": seed, "slot": slot},
        )
        metrics = {} if acc is None else {sw.objective_split(spec): {spec.metric: acc}}
        return c, {"status": "failed" if acc is None else "ok", "metrics": metrics, "slot": slot}

    pairs = [rec(0, s, 0.6) for s in range(3)] + [rec(1, 0, 0.9), rec(1, 1, 0.9), rec(1, 2, None)]
    shown = sw.best_tuned(spec, pairs, maximize=True, tuned=["lr"])
    assert {r["slot"] for r in shown} == {0} and len(shown) == 3
    # with every seed finished in both, the better mean wins as before
    pairs = [rec(0, s, 0.6) for s in range(3)] + [rec(1, s, 0.9) for s in range(3)]
    assert {r["slot"] for r in sw.best_tuned(spec, pairs, maximize=True, tuned=["lr"])} == {1}


def test_records_carry_the_axes_as_fields_and_tables_read_old_records_too():
    from synthlab.analysis.tables import tidy
    from synthlab.run import pipeline, specs, training

    text = GOOD.replace("[presets.smoke]", '[presets.smoke]\npositions = "pose:target=64"').replace(
        "dape_k = [1, 3]", "dape_k = [3]\npose_chunks = [4]"
    )
    c = next(c for c in sw.expand_cells(sw.parse_sweep(text, "r.toml"), "smoke") if c.dape_k is not None)
    cfg = training.cell_config(c, "smoke", probe=False)
    record = pipeline.new_record(cfg, specs.encoding(cfg), "r1", {}, 16, None, None)
    assert (record["dape_k"], record["pose_chunks"]) == (3, 4)
    # the encoding and scheme the model trains with, named as before the fields
    assert record["pe"] == "kerple+dape:k=3" and record["positions"] == "pose:chunks=4,target=64"
    assert "dape_k" in pipeline.run_config(cfg, "r1", 64, None, 16) and cfg.to_dict()["pose_chunks"] == 4
    plain = {"task": "flipflop", "pe": "rope", "status": "failed", "dape_k": None, "pose_chunks": None}
    old = {"task": "flipflop", "pe": "nope+dape:k=3", "positions": "pose:chunks=2,target=64", "status": "failed"}
    rows = tidy([{**record, "status": "failed"}, plain, old])
    assert rows["dape_k"].tolist()[0] == 3 and rows["pose_chunks"].tolist()[0] == 4
    assert rows["dape_k"].isna().tolist()[1] and (rows["dape_k"].tolist()[2], rows["pose_chunks"].tolist()[2]) == (3, 2)


def test_the_checkpoint_key_of_a_run_is_what_it_was_before_the_fields():
    from synthlab.run import training
    from synthlab.run.checkpoints import run_key

    c = next(c for c in sw.expand_cells(sw.parse_sweep(GOOD, "good.toml"), "smoke") if c.dape_k == 3)
    cfg = training.cell_config(c, "smoke", probe=False)
    before = dataclasses.replace(cfg, pe="kerple+dape:k=3", dape_k=None)  # the kernel in the pe string
    assert run_key(cfg) == run_key(before) != run_key(dataclasses.replace(cfg, dape_k=5))
