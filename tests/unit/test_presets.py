"""Presets are written once (the sweep files): `train --preset` and every sweep cell agree; one
true/false reading everywhere; the pe spec parsed once per run; Task.segment_starts declared."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from synthlab import generators
from synthlab.core.config import (
    FALSE_WORDS,
    PRESETS,
    TRUE_WORDS,
    ModelConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    coerce,
    resolve_key,
)
from synthlab.plan import presets
from synthlab.run.specs import encoding, position_scheme
from synthlab.run.training import cell_config, resolve_config
from synthlab.study.sweeping import expand_cells, installed_sweeps, load_sweep, parse_sweep

REPO = Path(__file__).resolve().parents[2]
# axes that are no `--set` key: they write into the run's own flags (pe, seed, positions)
_RUN_AXES = ("task", "pe", "seed", "dape_k", "pose_chunks", "positions")


def _flat(cfg: RunConfig) -> dict:
    d = cfg.to_dict()
    out = {f"task.{k}": v for k, v in d["task_params"].items()}
    for section in ("model", "train"):
        out.update({f"{section}.{k}": v for k, v in d[section].items()})
    out.update({k: d[k] for k in ("pe", "positions", "rope_scaling")})
    return out


def _distinct(cells):
    """One cell per distinct run configuration (seeds apart), as validate_cells does."""
    seen = set()
    for c in cells:
        key = json.dumps([c.task, c.pe, c.positions, c.rope_scaling, c.overrides], sort_keys=True)
        if key not in seen:
            seen.add(key)
            yield c


def test_every_task_has_a_sweep_file_holding_it():
    files = presets.preset_files()
    assert set(files) == set(generators.TASKS) and len(generators.TASKS) == 23
    installed = installed_sweeps()
    for task, family in files.items():
        assert family in installed and task in load_sweep(family).tasks, task
    # two files list flipflop: the one named after its family holds train's presets
    assert files["flipflop"] == "flipflop" and files["passkey"] == "pose" and files["nfa"] == "binfa"
    assert files["even_pairs"] == "che"
    with pytest.raises(ValueError, match="unknown task 'nosuch'"):
        presets.preset_family("nosuch")


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("task", sorted(generators.TASKS))
def test_train_and_every_sweep_cell_agree_off_the_axes(task, preset, tasks_built_once):
    """`train TASK --preset P`, given a cell's run flags (pe, seed, positions, rope_scaling) as
    its command line would, resolves to the cell's configuration on every setting the sweep
    does not put on an axis or tune; on those the cell runs the axis value."""
    spec = load_sweep(presets.preset_family(task))
    names = tuple(generators.TASKS[task].PARAMS)
    tuned = spec.preset_tune_keys(preset)
    cells = [c for c in expand_cells(spec, preset) if c.task == task]
    assert cells
    for c in _distinct(cells):
        swept = {}  # setting -> the cell's value for it
        for a, v in c.axes.items():
            if a not in _RUN_AXES and a != "slot":
                section, name = resolve_key(a, names)
                swept[f"{section}.{name}"] = v
        for a in tuned:
            section, name = resolve_key(a, names)
            swept[f"{section}.{name}"] = c.overrides[a if a in c.overrides else f"{section}.{name}"]
        flags = dict(seed=c.seed, positions=c.positions, rope_scaling=c.rope_scaling, probe=False)
        cell = _flat(resolve_config(c.task, c.pe, preset, c.overrides, **flags))
        train = _flat(resolve_config(c.task, c.pe, preset, **flags))
        differ = {k: (train[k], cell[k]) for k in cell if k not in swept and train[k] != cell[k]}
        assert not differ, f"{c.label()}: train vs cell {differ}"
        for k, v in swept.items():
            assert cell[k] == v, f"{c.label()}: {k} runs {cell[k]!r}, the axis says {v!r}"


@pytest.mark.parametrize("name", sorted(installed_sweeps()))
def test_a_cell_runs_its_own_sweep_files_settings(name, tasks_built_once):
    """A cell's run is the config defaults + its own file's tables + its axes (``cell_config``,
    which reads no other file), even where `train` reads another file for the task
    (flipflop_lm's); and it is what the installed family's preset under the cell's overrides
    gave before cells stopped reading it, so the installed sweeps' cells run as they did."""
    spec = load_sweep(name)
    for preset in PRESETS:
        for c in _distinct(expand_cells(spec, preset)):
            names = tuple(generators.TASKS[c.task].PARAMS)
            own = apply_overrides(
                RunConfig(c.task, {}, c.pe, model=ModelConfig(), train=TrainConfig(seed=c.seed)), c.overrides, names
            )
            own.task_params = dict(generators.get_task(c.task, **own.task_params).params)
            before = resolve_config(
                c.task,
                c.pe,
                preset,
                c.overrides,
                seed=c.seed,
                positions=c.positions,
                rope_scaling=c.rope_scaling,
                probe=False,
            )
            got = cell_config(c, preset, probe=False)
            assert (got.task_params, got.model, got.train) == (own.task_params, own.model, own.train), c.label()
            # the axes dape_k / pose_chunks: fields now, the same encoding and scheme
            assert (encoding(got), position_scheme(got)) == (encoding(before), position_scheme(before)), c.label()
            assert (
                dataclasses.replace(got, pe=before.pe, positions=before.positions, dape_k=None, pose_chunks=None)
                == before
            ), c.label()


# the key of flipflop.toml's first quick cell, computed before cells stopped reading the
# installed presets by name: a study or results folder finds its finished cells by these keys
FLIPFLOP_QUICK_COPE_SEED_0 = (
    '{"overrides":{"model.d_model":64,"model.n_heads":4,"model.n_layers":2,"task.loss":"reads","task.n_pairs":64,'
    '"train.batch_size":32,"train.eval_samples":500,"train.lr":0.002,"train.steps":1000,"train.warmup":50,'
    '"train.weight_decay":0.1},"pe":"cope","positions":null,"rope_scaling":null,"seed":0,"slot":0,"task":"flipflop"}'
)


def test_an_installed_cell_keeps_its_key():
    cell = expand_cells(load_sweep("flipflop"), "quick")[0]
    assert cell.label() == "task=flipflop pe=cope seed=0" and cell.key == FLIPFLOP_QUICK_COPE_SEED_0


@pytest.mark.parametrize("folder", sorted(p.name for p in (REPO / "results").iterdir() if p.is_dir()))
def test_the_committed_results_are_cells_of_the_installed_sweeps(folder):
    """Every record in results/ (RESULTS.md's source) names a cell its installed sweep still
    expands to, so `synthlab sweep` resumes those studies and finds their finished cells."""
    name, preset = folder.split("-")[:2]
    recs = [json.loads(line) for line in (REPO / "results" / folder / "results.jsonl").read_text().splitlines()]
    seeds = sorted({r["train"]["seed"] for r in recs})
    keys = {c.key for c in expand_cells(load_sweep(name), preset, seeds=seeds)}
    assert recs and all(r["cell"] in keys for r in recs)


# `train`'s values where the one source changed them or an axis needed one (see the sweep files)
@pytest.mark.parametrize(
    "task,preset,key,value",
    [
        ("passkey", "paper", "task.length", 1024),  # was the task default 2048 (pose.toml: 1024 -> 4096)
        ("passkey", "paper", "task.target_length", 4096),  # was 16384
        ("counting", "quick", "task.n_vars", 1),  # an axis in no table: the task default (was 3)
        ("counting", "paper", "task.n_vars", 1),  # idem (was 3)
        ("arithmetic", "quick", "model.d_model", 48),  # the d_model axis: the table's value
        ("binfa", "paper", "model.d_model", 128),
        ("nfa", "quick", "model.d_model", 64),
        ("mqar", "paper", "model.d_model", 128),
        ("mqar", "paper", "train.lr", 1e-3),  # tuned in the sweep
        ("even_pairs", "paper", "train.lr", 3e-4),  # tuned in the sweep
        ("flipflop", "paper", "model.n_layers", 4),  # the d_model x n_layers x n_heads grid
        ("bucket_sort", "smoke", "train.threads", 1),  # every smoke preset: one thread
        ("passkey", "quick", "positions", None),  # a flag for train, the sweep's design in pose.toml
        ("passkey", "quick", "rope_scaling", None),
    ],
)
def test_train_values_chosen_for_axes_and_drift(task, preset, key, value):
    assert _flat(resolve_config(task, "rope", preset, probe=False))[key] == value


def test_a_bad_preset_table_names_the_sweep_file(monkeypatch):
    monkeypatch.setattr(presets, "preset_settings", lambda task, name: {"model.d_modl": 3})
    with pytest.raises(ValueError, match=r"sweeps/flipflop.toml: presets.quick: unknown setting 'model.d_modl'"):
        presets.build_config("flipflop", "rope", "quick")


_TRUE = [*TRUE_WORDS, "TRUE", " Yes ", "On", True]
_FALSE = [*FALSE_WORDS, "False", " NO ", "Off", False]
_BAD = ["maybe", "2", "y", "t", "enable", ""]


def _everywhere(value):
    """The value as read by every place that takes a true/false setting."""
    from synthlab.model import parse_pe

    out = {
        "--set": apply_overrides(RunConfig("flipflop", {}, "rope"), {"tie_embeddings": value}, ()).model.tie_embeddings,
        "coerce": coerce("model.causal", value, bool),
        "task parameter": generators.get_task("binfa", trace=value).params["trace"],
    }
    if isinstance(value, str):
        out["pe parameter"] = parse_pe(f"cope:sep_keys={value}").params["cope"]["sep_keys"]
        text = (
            '[sweep]\ntask = "binfa"\n[axes]\npe = ["rope"]\n[presets.smoke]\n'
            f'task = {{ trace = "{value}" }}\nmodel = '
            f'{{ tie_embeddings = "{value}" }}\n[presets.quick]\n[presets.paper]\n'
        )
        cell = expand_cells(parse_sweep(text, "b.toml"), "smoke")[0]
        cfg = resolve_config("binfa", "rope", "smoke", cell.overrides, probe=False)
        out["sweep file (task)"], out["sweep file (model)"] = cfg.task_params["trace"], cfg.model.tie_embeddings
    return out


@pytest.mark.parametrize("value,want", [(v, True) for v in _TRUE] + [(v, False) for v in _FALSE])
def test_the_same_true_false_words_everywhere(value, want):
    assert set(_everywhere(value).values()) == {want}


@pytest.mark.parametrize("value", _BAD)
def test_the_same_words_refused_everywhere(value):
    from synthlab.model import parse_pe

    for read in (
        lambda: coerce("model.causal", value, bool),
        lambda: apply_overrides(RunConfig("flipflop", {}, "rope"), {"causal": value}, ()),
        lambda: generators.get_task("binfa", trace=value),
        lambda: parse_pe(f"cope:sep_keys={value}"),
    ):
        with pytest.raises(ValueError):
            read()


@pytest.mark.parametrize("value,on", [*((w, False) for w in FALSE_WORDS), ("1", True), ("yes", True)])
def test_native_switch_reads_the_same_false_words(value, on, monkeypatch):
    from synthlab.model import native

    monkeypatch.setenv("SYNTHLAB_NATIVE", value)
    assert native.enabled() is on


def _count_parses(monkeypatch) -> list:
    """Every parse of a spec string (a PESpec handed on is not parsed again)."""
    import synthlab.model as model
    from synthlab.model import registry

    real, calls = registry.parse_pe, []

    def counting(spec, **kw):
        if not isinstance(spec, registry.PESpec):
            calls.append(spec)
        return real(spec, **kw)

    for mod in (registry, model):
        monkeypatch.setattr(mod, "parse_pe", counting)
    return calls


def test_the_pe_spec_is_parsed_once_per_train_call(monkeypatch, tmp_path):
    """Was 4 (resolve_config, run, validate_combination, build_model)."""
    from synthlab.cli import main
    from synthlab.run.training import train

    calls = _count_parses(monkeypatch)
    rec = train("flipflop", "kerple+dape:k=3", preset="smoke", steps=2, eval_samples=4)
    assert rec["status"] == "ok" and calls == ["kerple+dape:k=3"]
    calls.clear()
    rc = main(
        [
            "train",
            "flipflop",
            "--pe",
            "rope",
            "--preset",
            "smoke",
            "--set",
            "steps=2",
            "--set",
            "eval_samples=4",
            "--out",
            str(tmp_path),
            "--quiet",
        ]
    )
    assert rc == 0 and calls == ["rope"]


def test_segment_starts_is_declared_on_the_task_base():
    assert "segment_starts" in vars(generators.Task) and generators.Task.segment_starts == ()
    for name in generators.TASKS:
        t = generators.get_task(name)
        assert isinstance(t.segment_starts, tuple) and set(t.segment_starts) <= set(t.vocab), name
    assert generators.get_task("flipflop").segment_starts == ("w",)


def test_che_paper_preset_is_a_bidirectional_encoder_for_every_encoding():
    """CHE's reference model (Deletang et al. / Ruoss et al.) is an encoder; every
    encoding the paper preset sweeps (DAPE V2's k 3 / 5 / 7 included) resolves as one."""
    from synthlab.plan.cells import expand_cells
    from synthlab.plan.sweepfile import load_sweep

    cells = expand_cells(load_sweep("che"), "paper")
    pes = sorted({c.pe for c in cells})
    assert "kerple+dape:k=7" in pes and "nope" in pes
    for task in ("even_pairs", "duplicate_string"):
        for pe in pes:
            cfg = resolve_config(task, pe, "paper", {})
            assert cfg.model.causal is False, (task, pe)


def test_selective_copy_paper_preset_builds_cope_covering_the_copy_distance():
    """CoPE copies the data token n_copy non-blanks back (CoPE Sec. 5.2); its
    position there, counted inclusively by p_ij = sum_{t=j..i} g_it, is n_copy + 1 (the data
    tokens from d_k on, the separator, the outputs before it), a row of the table only when
    npos >= n_copy + 2. The paper preset's CoPE cells are built with such a table (they had the
    registry's 64, clamping every copy at 63); the quick preset's fits its 16 copies as is."""
    from synthlab.run.configs import make_task, model_for

    for preset in ("paper", "quick"):
        cells = [c for c in expand_cells(load_sweep("selective_copy"), preset) if c.pe.startswith("cope")]
        assert cells, preset
        for c in cells:
            cfg = resolve_config(c.task, c.pe, preset, c.overrides, seed=c.seed, probe=False)
            n_copy = cfg.task_params["n_copy"]
            model = model_for(cfg, make_task(cfg), max_len=8)
            npos = [m.npos for m in model.modules() if type(m).__name__ == "CoPE"]
            assert npos and min(npos) >= n_copy + 2, (preset, c.pe, npos, n_copy)
            if preset == "paper":
                assert n_copy == 256 and cfg.pe == c.pe == "cope:npos=258"
