"""A run that departs from its preset's table is never judged, or marked, as that preset.

Before: a record named only its preset, so ``sweep flipflop --set task.n_pairs=256`` (T 512
with the quick model) or ``train flipflop --set train.steps=100`` was judged against the quick
claims ("reproduced") and a paper-preset run cut to 1,000 steps got the paper's numbers beside
its cells.
"""

from __future__ import annotations

import copy

import pytest

from synthlab.analysis import claims
from synthlab.analysis.tables import preset_differences, tidy_with_presets
from synthlab.study.sweeping import load_sweep


def _flipflop(preset: str = "quick", n_pairs: int = 64, steps: int = 1000, **train) -> list[dict]:
    """Flip-flop runs as the quick preset writes them (T 128, reads-only loss), 8 seeds: CoPE's
    OOD read accuracy well above RoPE's in every seed."""
    out = []
    for pe, sparse in (
        ("cope", [1.0, 0.95, 0.97, 0.99, 1.0, 0.96, 0.98, 1.0]),
        ("rope", [0.8, 0.82, 0.85, 0.78, 0.9, 0.8, 0.83, 0.81]),
    ):
        for seed, acc in enumerate(sparse):
            out.append(
                {
                    "schema": 1,
                    "run_id": f"{pe}-{seed}-{n_pairs}-{steps}",
                    "task": "flipflop",
                    "pe": pe,
                    "status": "ok",
                    "preset": preset,
                    "study": None,
                    "positions": None,
                    "rope_scaling": None,
                    "task_params": {"n_pairs": n_pairs, "loss": "reads", "p_i": 0.8},
                    "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "dropout": 0.0},
                    "train": {
                        "seed": seed,
                        "steps": steps,
                        "batch_size": 32,
                        "lr": 2e-3,
                        "warmup": 50,
                        "weight_decay": 0.1,
                        "eval_samples": 500,
                        **train,
                    },
                    "metrics": {
                        "test": {"token_acc": 1.0},
                        "ood-sparse": {"token_acc": acc},
                        "ood-dense": {"token_acc": 1.0},
                    },
                }
            )
    return out


def test_a_sweep_with_set_off_the_preset_gets_no_verdict_as_the_preset():
    spec = load_sweep("flipflop")
    follows = claims.verdicts(_flipflop(), spec)
    assert follows and {v.verdict for v in follows} == {claims.SUPPORTED}
    off = claims.verdicts(_flipflop(n_pairs=256), spec)  # failed before: judged "reproduced" as quick
    assert off and {v.verdict for v in off} == {claims.OTHER_SETTINGS}
    assert all(v.preset == "quick" and "task.n_pairs 256 (preset 64)" in v.reason for v in off)
    assert "not comparable (other settings)" in claims.markdown(off, spec.show)
    # both in one file: the preset's runs are judged, the others apart, never pooled
    both = claims.verdicts(_flipflop() + _flipflop(n_pairs=256), spec)
    assert sorted(v.verdict for v in both) == sorted([claims.SUPPORTED, claims.OTHER_SETTINGS] * len(follows))


def test_a_train_run_with_fewer_steps_is_not_the_paper_preset():
    """`synthlab train flipflop --preset paper --set train.steps=1000` (the GPU smoke run): no
    paper number beside its cells, no verdict as the paper preset."""
    from synthlab.analysis import grids

    spec = load_sweep("flipflop")
    paper = spec.presets["paper"]["overrides"]
    runs = []
    for r in _flipflop(preset="paper", n_pairs=paper["task.n_pairs"], steps=1000):
        r["model"].update(d_model=256, n_layers=4, n_heads=4)
        r["train"].update({k.partition(".")[2]: v for k, v in paper.items() if k.startswith("train.")}, steps=1000)
        r["task_params"]["loss"] = paper.get("task.loss", "all")
        runs.append(r)
    assert preset_differences(runs[0], spec) == ("train.steps 1000 (preset 10000)",)
    g = grids.grid(runs, kind="ood")
    assert g.paper == {}  # failed before: "paper 4.9 ± 4.4" beside cope's ood-sparse
    verdicts = {v.verdict for v in claims.verdicts(runs, spec)}  # quick-only claims: other scale
    assert claims.OTHER_SETTINGS in verdicts and not verdicts & {claims.SUPPORTED, claims.CONTRADICTED}
    at_paper = copy.deepcopy(runs)
    for r in at_paper:
        r["train"]["steps"] = 10000
    assert preset_differences(at_paper[0], spec) == ()
    assert grids.grid(at_paper, kind="ood").paper  # the preset's own runs keep their marks


def test_axes_tuned_keys_run_options_and_unknown_fields_are_no_departure():
    spec = load_sweep("arithmetic")
    quick = spec.presets["quick"]["overrides"]
    r = {
        "task": "arithmetic",
        "preset": "quick",
        "status": "ok",
        "task_params": {k.partition(".")[2]: v for k, v in quick.items() if k.startswith("task.")},
        "model": {"d_model": 32, "n_layers": 3, "n_heads": 4},  # d_model: an axis of the preset (32 / 48 / 64)
        "train": {"seed": 2, "steps": 2000, "batch_size": 64, "lr": 0.002, "threads": 1},
    }  # no warmup: unknown
    assert preset_differences(r, spec) == ()
    assert set(tidy_with_presets([r], spec)["departs"]) == {""}
    r["train"]["weight_decay"] = 0.1
    r["model"]["n_layers"] = 2
    assert preset_differences(r, spec) == ("model.n_layers 2 (preset 3)", "train.weight_decay 0.1 (preset 0.01)")
    table = tidy_with_presets([r], spec)
    assert set(table["preset"]) == {"quick"}  # the preset's name, and apart from it how the run departs
    assert set(table["departs"]) == {"model.n_layers 2 (preset 3); train.weight_decay 0.1 (preset 0.01)"}
    assert preset_differences({**r, "preset": None}, spec) == ()  # a failed run's record: its study's
    che = load_sweep("che")  # the paper preset tunes lr: any lr is the preset's
    tuned = che.preset_tune_keys("paper")
    assert tuned, "che's paper preset tunes the learning rate"
    paper = {"task": "even_pairs", "preset": "paper", "task_params": {}, "model": {}, "train": {"lr": 0.123}}
    assert preset_differences(paper, che) == ()


@pytest.mark.parametrize(
    "name", ["arithmetic", "binfa", "che", "counting", "flipflop", "flipflop_lm", "mqar", "pose", "selective_copy"]
)
def test_every_installed_preset_writes_records_that_follow_it(name):
    """No false alarm: each cell of every preset of every installed sweep file, resolved by the
    trainer and laid out as its record, departs from nothing."""
    from synthlab.model import parse_pe
    from synthlab.plan.cells import expand_cells
    from synthlab.run import pipeline, training

    spec = load_sweep(name)
    for preset in spec.presets:
        seen = set()
        for c in expand_cells(spec, preset):
            if (c.task, c.pe) in seen:
                continue
            seen.add((c.task, c.pe))
            cfg = training.resolve_config(
                c.task,
                c.pe,
                preset,
                c.overrides,
                seed=c.seed,
                positions=c.positions,
                rope_scaling=c.rope_scaling,
                probe=False,
            )
            model = {"d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers, "n_heads": cfg.model.n_heads}
            record = pipeline.new_record(cfg, parse_pe(cfg.pe), "r", model, 16, f"{name}-{preset}", 0)
            assert preset_differences(record, spec) == (), (name, preset, c.task, c.pe)


def test_runs_departing_differently_from_one_preset_get_rows_that_say_how():
    """Two groups of quick runs (T 256, T 512) judged against a claim for another preset: the
    rows read alike before ("quick", "not comparable (other scale)", the same reason)."""
    import dataclasses

    spec = load_sweep("flipflop")
    claim = dataclasses.replace(spec.claims[0], presets=("paper",))
    spec = dataclasses.replace(spec, claims=[claim])
    vs = claims.verdicts(_flipflop(n_pairs=128) + _flipflop(n_pairs=256), spec)
    assert [v.verdict for v in vs] == [claims.OTHER_SCALE] * 2
    labels = [v.preset_label() for v in vs]
    assert sorted(labels) == [
        "quick (departs: task.n_pairs 128 (preset 64))",
        "quick (departs: task.n_pairs 256 (preset 64))",
    ]
    table = claims.markdown(vs, spec.show)
    assert all(label in table for label in labels)
    assert sorted(r["departs"] for r in claims.rows(vs)) == [
        "task.n_pairs 128 (preset 64)",
        "task.n_pairs 256 (preset 64)",
    ]
