"""Grids from hand-made result records: values, spread, failed cells marked, fixed colour scale."""

from __future__ import annotations

import json
import math

import pytest

from synthlab.analysis import grids


def rec(pe, d, seed, test, sparse, status="ok", trial=0, by_length=None, task="flipflop"):
    r = {
        "schema": 1,
        "run_id": f"{pe}-{d}-{seed}",
        "task": task,
        "task_params": {"n_pairs": 16},
        "pe": pe,
        "positions": None,
        "model": {"d_model": d, "n_layers": 1, "n_heads": 2, "params": 1},
        "train": {"steps": 5, "batch_size": 4, "lr": 1e-3, "seed": seed, "train_len": 32},
        "metrics": {"test": {"token_acc": test, "seq_acc": test}, "ood-sparse": {"token_acc": sparse}},
        "by_length": by_length,
        "study": "s",
        "trial": trial,
        "status": status,
    }
    if status != "ok":
        r["metrics"] = {}
        r["error"] = "diverged: non-finite training loss (nan) at step 1"
    return r


RECORDS = [
    rec("rope", 16, 0, 0.90, 0.50),
    rec("rope", 16, 1, 0.80, 0.70),
    rec("rope", 32, 0, 1.00, 0.60),
    rec("cope", 16, 0, 1.00, 0.95),
    rec("cope", 16, 1, 1.00, 0.97),
    rec("cope", 32, 0, 0.0, 0.0, status="failed"),
]


def test_tidy_has_one_row_per_record_and_split():
    t = grids.tidy(RECORDS)
    assert len(t) == 5 * 2 + 1
    failed = t[t.status == "failed"]
    assert len(failed) == 1 and math.isnan(failed["token_acc"].iloc[0])
    assert set(t.columns) >= {"pe", "d_model", "seed", "split", "length", "token_acc", "task.n_pairs", "trial"}


def test_capacity_grid_mean_spread_and_failed_marked():
    g = grids.make_grid(grids.tidy(RECORDS), "capacity", "d_model", "pe", "token_acc", "accuracy", split="test")
    # encodings in the order the records name them (a sweep's axis order), sizes ascending
    assert list(g.mean.index) == ["rope", "cope"] and list(g.mean.columns) == [16, 32]
    assert g.mean.at["rope", 16] == pytest.approx(85.0)
    assert g.std.at["rope", 16] == pytest.approx(math.sqrt(50.0))  # sample std of 90, 80
    assert g.mean.at["rope", 32] == pytest.approx(100.0) and math.isnan(g.std.at["rope", 32])
    assert math.isnan(g.mean.at["cope", 32])  # failed: missing, never 0
    assert g.n_failed.at["cope", 32] == 1 and g.n.at["cope", 32] == 0
    labels = dict(zip(g.mean.index, g.labels()))
    assert labels["rope"] == ["85.0\n±7.1 (n 2)", "100.0\n(n 1)"]  # n seeds in every cell
    assert labels["cope"] == ["100.0\n±0.0 (n 2)", "failed\n(1 run)"]  # two seeds, no spread; a failed cell


def test_error_display_and_split_columns():
    g = grids.make_grid(grids.tidy(RECORDS), "ood", "split", "pe", "token_acc", "error", split=["test", "ood-sparse"])
    assert list(g.mean.columns) == ["test", "ood-sparse"]
    # d_model varies within an encoding here: it joins the rows instead of being averaged
    assert list(g.mean.index) == ["rope d_model=16", "rope d_model=32", "cope d_model=16", "cope d_model=32"]
    assert g.y == "pe, d_model"
    assert g.mean.at["cope d_model=16", "ood-sparse"] == pytest.approx(100 * (1 - 0.96))
    assert g.mean.at["rope d_model=16", "test"] == pytest.approx(100 * (1 - (0.9 + 0.8) / 2))
    assert g.mean.at["rope d_model=32", "test"] == pytest.approx(0.0)
    assert g.n_failed.loc["cope d_model=32"].tolist() == [1, 1] and g.n_failed.loc["cope d_model=16"].tolist() == [0, 0]
    one_size = [r for r in RECORDS if r["model"]["d_model"] == 16]
    g = grids.make_grid(grids.tidy(one_size), "ood", "split", "pe", "token_acc", "error", split=["test", "ood-sparse"])
    assert list(g.mean.index) == ["rope", "cope"]
    assert g.mean.at["rope", "test"] == pytest.approx(100 * (1 - (0.9 + 0.8) / 2))


def test_a_task_parameter_axis_is_never_averaged_as_seeds():
    """counting's n_vars axis: an encoding x split grid shows one row per n_vars."""
    recs = []
    for pe, accs in (("cope", (1.0, 0.8)), ("relative", (0.9, 0.6))):
        for n_vars, acc in zip((1, 3), accs):
            r = rec(pe, 64, 0, acc, acc - 0.1, task="counting")
            r["task_params"] = {"n_vars": n_vars, "max_steps": 64}
            recs.append(r)
    t = grids.tidy(recs)
    assert grids.pooled_axes(t, "split", "pe") == ["n_vars"]
    assert grids.pooled_axes(t, "n_vars", "pe") == []
    g = grids.make_grid(t, "ood", "split", "pe", split=["test", "ood-sparse"])
    assert list(g.mean.index) == ["cope n_vars=1", "cope n_vars=3", "relative n_vars=1", "relative n_vars=3"]
    assert g.mean.at["relative n_vars=3", "test"] == pytest.approx(60.0) and g.n.to_numpy().max() == 1
    assert "| pe, n_vars | test | ood-sparse |" in g.markdown()
    cap = grids.make_grid(t, "capacity", "n_vars", "pe", split="test")
    assert list(cap.mean.index) == ["cope", "relative"] and cap.mean.at["cope", 3] == pytest.approx(80.0)
    assert "| pe / n_vars | 1 | 3 |" in cap.markdown()


def test_length_grid_from_by_length(tmp_path):
    recs = [
        rec("rope", 16, 0, 1, 1, by_length={"ood/41": 0.5, "ood/42": 0.25, "test/5": 1.0}, task="even_pairs"),
        rec("kerple", 16, 0, 1, 1, by_length={"41": 1.0, "42": 0.75}, task="even_pairs"),
    ]
    recs[1]["metrics"] = {"test": {"token_acc": 1.0}, "ood": {"token_acc": 0.875}}
    t = grids.tidy(recs)
    rows = t[t.length.notna()]
    assert set(zip(rows.pe, rows.split, rows.length)) == {
        ("rope", "ood", 41.0),
        ("rope", "ood", 42.0),
        ("rope", "test", 5.0),
        ("kerple", "ood", 41.0),
        ("kerple", "ood", 42.0),
    }
    g = grids.make_grid(t, "ood", "length", "pe", split="ood")
    assert list(g.mean.columns) == [41, 42] and all(type(c) is int for c in g.mean.columns)
    assert "| pe / length | 41 | 42 |" in g.markdown()  # not 41.0
    assert g.mean.at["rope", 42.0] == pytest.approx(25.0) and g.mean.at["kerple", 41.0] == pytest.approx(100.0)


def test_heatmap_has_fixed_colour_scale_and_annotations(tmp_path):
    g = grids.make_grid(grids.tidy(RECORDS), "capacity", "d_model", "pe", "token_acc", "accuracy", split="test")
    fig, ax = g.plot()
    assert ax.collections[0].get_clim() == (0.0, 100.0)
    texts = sorted(t.get_text() for t in ax.texts)
    assert "85.0\n±7.1 (n 2)" in texts and "" not in texts and len(texts) == 4
    assert "failed\n(1 run)" in texts  # the failed cell is marked, not left blank
    assert "1 of 6 runs failed" in ax.get_title()
    files = g.save(tmp_path / "cap.png")
    assert (tmp_path / "cap.png").stat().st_size > 1000
    md = (tmp_path / "cap.md").read_text()
    assert "| rope | 85.0 ±7.1 (n 2) | 100.0 (n 1) |" in md and "| cope | 100.0 ±0.0 (n 2) | failed (1 run) |" in md
    csv = (tmp_path / "cap.csv").read_text().splitlines()
    assert csv[0] == "pe,d_model,mean,std,n,n_failed,paper,paper_spread,paper_source" and "cope,32,,,0,1,,," in csv
    assert set(files) == {"png", "csv", "md"}


def test_grid_api_reads_files_and_writes_beside_the_png(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    g = grids.grid(path, kind="capacity", out=tmp_path / "g.png")
    assert g.show == "error"  # flipflop's sweep file shows read error
    assert g.mean.at["rope", 16] == pytest.approx(15.0)
    assert (tmp_path / "g.csv").exists() and (tmp_path / "g.md").exists()
    with pytest.raises(ValueError, match="kind"):
        grids.grid(path, kind="bogus")
    with pytest.raises(ValueError, match="grid field 'nosuch'.*allowed"):
        grids.grid(path, kind="ood", x="nosuch")
    with pytest.raises(ValueError, match=".png"):
        grids.grid(path, out=tmp_path / "g.jpg")


def test_reader_skips_a_torn_last_line_and_rejects_non_results(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [json.dumps(r) for r in RECORDS[:3]]
    path.write_text("\n".join(lines) + "\n" + lines[0][:40])  # killed mid-write
    assert len(grids.read_results(path)) == 3
    # a torn record followed by a whole one on the same line (appends after the kill)
    path.write_text(lines[0] + "\n" + lines[1][:30] + lines[2] + "\n")
    assert [r["run_id"] for r in grids.read_results(path)] == ["rope-16-0", "rope-32-0"]
    with pytest.raises(ValueError, match="does not exist"):
        grids.read_results(tmp_path / "missing.jsonl")
    (tmp_path / "text.jsonl").write_text("hello\nworld\nnot json\n")
    with pytest.raises(ValueError, match="no result records|not JSON"):
        grids.read_results(tmp_path / "text.jsonl")
    (tmp_path / "samples.jsonl").write_text(json.dumps({"task": "flipflop", "tokens": ["w"]}) + "\n")
    with pytest.raises(ValueError, match="not a result record"):
        grids.read_results(tmp_path / "samples.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not JSON lines|no result"):
        grids.read_results(tmp_path / "bin.jsonl")


def test_composite_rows_and_an_all_failed_grid(tmp_path):
    recs = [
        rec("rope", 16, 0, 0.5, 0.5, task="binfa"),
        rec("rope", 16, 0, 0.7, 0.5, task="nfa"),
        rec("cope", 16, 0, 0, 0, status="failed", task="nfa"),
    ]
    g = grids.make_grid(grids.tidy(recs), "capacity", "d_model", "task,pe", split="test")
    assert list(g.mean.index) == ["binfa rope", "nfa rope", "nfa cope"]
    assert g.mean.at["nfa rope", 16] == pytest.approx(70.0) and math.isnan(g.mean.at["nfa cope", 16])
    dead = grids.make_grid(grids.tidy(recs[2:]), "capacity", "d_model", "pe", split="test")
    assert dead.mean.isna().all().all()
    dead.save(tmp_path / "dead.png")  # draws an all-blank grid, no crash
    assert (tmp_path / "dead.png").exists()


def test_best_of_a_tuned_setting_is_the_best_single_run_never_pooled_by_mean():
    runs = []
    for seed, (lo, hi) in enumerate([(0.5, 0.9), (0.6, 0.7)]):  # two seeds x two learning rates
        for lr, acc in ((1e-4, lo), (1e-3, hi)):
            r = rec("rope", 16, seed, acc, acc)
            r["train"]["lr"] = lr
            r["run_id"] += f"-{lr}"
            runs.append(r)
    t = grids.tidy(runs)
    mean = grids.make_grid(t, "capacity", "d_model", "pe", "token_acc", "accuracy", split="test")
    assert list(mean.mean.index) != ["rope"]  # averaged grid: each lr is its own row (never pooled)
    best = grids.make_grid(t, "capacity", "d_model", "pe", "token_acc", "accuracy", split="test", best_of=("lr",))
    assert list(best.mean.index) == ["rope"] and best.mean.at["rope", 16] == pytest.approx(90.0)
    assert best.n.at["rope", 16] == 4 and best.labels() == [["90.0\nbest of 4"]]
    assert "the best of n runs over seeds x lr" in best.markdown()
    err = grids.make_grid(t, "capacity", "d_model", "pe", "token_acc", "error", split="test", best_of=("lr",))
    assert err.mean.at["rope", 16] == pytest.approx(10.0)  # error: the lowest


def test_a_cell_counts_seeds_not_runs():
    # the same seed trained twice (two `synthlab train` runs, or two studies' files joined) is one
    # sample: n 1 and no spread, not n 2 with sd 0; a best-of cell still picks among the runs
    twice = [{**rec("rope", 16, 0, 0.9, 0.5), "study": st} for st in ("a", "b")]
    twice.append({**rec("rope", 16, 1, 0.7, 0.5), "study": "a"})
    g = grids.make_grid(grids.tidy(twice), "capacity", "d_model", "pe", "token_acc", "accuracy", split="test")
    assert g.n.at["rope", 16] == 2 and g.mean.at["rope", 16] == pytest.approx(80.0)
    assert g.std.at["rope", 16] == pytest.approx(math.sqrt(200.0))  # sample sd of 90, 70, not of 90, 90, 70
    g = grids.make_grid(grids.tidy(twice[:2]), "capacity", "d_model", "pe", "token_acc", "accuracy", split="test")
    assert g.n.at["rope", 16] == 1 and math.isnan(g.std.at["rope", 16]) and g.labels() == [["90.0\n(n 1)"]]


@pytest.mark.parametrize("field, other", [("positions", "pose:chunks=2,target=64"), ("rope_scaling", "linear")])
def test_the_token_index_and_no_scaling_never_pool_with_a_scheme(field, other):
    # null in a record is a setting (token index, no rope scaling), not an unknown value: rope
    # with and without PoSE positions / linear scaling were averaged into one row of n 4
    recs = [{**rec("rope", 16, s, 1.0, a), "rope_scaling": None} for s, a in ((0, 0.5), (1, 0.6))]
    recs += [{**rec("rope", 16, s, 1.0, a), "rope_scaling": None, field: other} for s, a in ((0, 0.9), (1, 1.0))]
    g = grids.make_grid(grids.tidy(recs), "ood", "split", "pe", "token_acc", "accuracy", split=["test", "ood-sparse"])
    assert list(g.mean.index) == [f"rope {field}=none", f"rope {field}={other}"]
    assert g.mean["ood-sparse"].tolist() == pytest.approx([55.0, 95.0]) and g.n["ood-sparse"].tolist() == [2, 2]


def _key(pe, seed, **overrides):
    return json.dumps(
        {
            "task": "flipflop",
            "pe": pe,
            "seed": seed,
            "positions": None,
            "rope_scaling": None,
            "overrides": overrides,
            "slot": 0,
        },
        sort_keys=True,
    )


def test_a_sweep_axis_on_another_set_key_joins_the_rows():
    # a user's sweep file with an axis on train.weight_decay, which no record field holds (the cell
    # key does): its values were averaged as if they were seeds (one row, n 6)
    recs = [
        {
            **rec("rope", 16, s, 1.0, a, trial=t),
            "cell": _key("rope", s, **{"train.weight_decay": wd, "train.threads": 1}),
        }
        for t, (wd, s, a) in enumerate([(0.0, 0, 0.5), (0.0, 1, 0.52), (0.1, 0, 0.9), (0.1, 1, 0.92)])
    ]
    recs.append(
        {
            **rec("rope", 16, 2, 1.0, 0.94, trial=9),  # a run option (threads) keeps no runs apart
            "cell": _key("rope", 2, **{"train.weight_decay": 0.1, "train.threads": 4}),
        }
    )
    g = grids.make_grid(grids.tidy(recs), "ood", "split", "pe", "token_acc", "accuracy", split=["test", "ood-sparse"])
    assert list(g.mean.index) == ["rope train.weight_decay=0", "rope train.weight_decay=0.1"]
    assert g.mean["ood-sparse"].tolist() == pytest.approx([51.0, 92.0]) and g.n["ood-sparse"].tolist() == [2, 3]
    g = grids.make_grid(
        grids.tidy(recs), "ood", "train.weight_decay", "pe", "token_acc", "accuracy", split="ood-sparse"
    )
    assert list(g.mean.columns) == [0.0, 0.1] and list(g.mean.index) == ["rope"]


def test_a_composite_axis_with_a_setting_a_failed_record_never_named():
    # a sweep run whose trainer raised has a record naming only the cell's overrides (no n_heads
    # here): `--x d_model,n_heads` crashed (pandas' str dtype keeps NaN: " ".join got a float)
    from synthlab.run.records import failed_record

    recs = [rec("rope", 16, s, 0.8, 0.5) for s in range(2)]
    recs.append(failed_record("flipflop", "rope", None, {"model.d_model": 16}, 3, "s", 9, "RuntimeError: boom"))
    g = grids.make_grid(grids.tidy(recs), "capacity", "d_model,n_heads", "pe", split="test")
    assert list(g.mean.columns) == ["16 2", "16 -"]  # whole numbers as set, the unknown one as -
    assert list(g.mean.index) == ["rope"] and g.mean.at["rope", "16 2"] == pytest.approx(80.0)
    assert g.n_failed.at["rope", "16 -"] == 1 and g.n_failed.at["rope", "16 2"] == 0


def test_a_failed_run_in_a_joined_row_label_is_shown_not_dropped():
    # rows d_model joined with n_layers; the failed run's record never named d_model: its label was
    # NaN ("64.0 ..." + NaN), so the header said 1 run failed while no cell showed it
    from synthlab.run.records import failed_record

    recs = [rec("rope", 16, s, 0.9, a) for s, a in ((0, 0.5), (1, 0.6))]
    recs += [{**rec("rope", 16, s, 0.9, 0.7), "model": {"d_model": 16, "n_layers": 2, "n_heads": 2}} for s in range(2)]
    recs.append(failed_record("flipflop", "rope", None, {"model.n_layers": 2}, 7, "s", 9, "RuntimeError: boom"))
    g = grids.make_grid(
        grids.tidy(recs), "ood", "split", "d_model", "token_acc", "accuracy", split=["test", "ood-sparse"]
    )
    assert list(g.mean.index) == ["16 n_layers=1", "16 n_layers=2", "- n_layers=2"]
    assert int(g.n_failed.to_numpy().sum()) == 2 and g.runs_failed == 1  # its row, both split columns


def test_a_bare_set_key_axis_joins_the_rows_and_a_tuned_one_is_picked_among():
    # [axes] weight_decay = [...] (a bare key: the cell's overrides say "weight_decay") and a
    # preset that tunes it ([tune] weight_decay): joined rows in the plain grid, best-of in the other
    recs = [
        {**rec("rope", 16, s, 1.0, a, trial=t), "cell": _key("rope", s, weight_decay=wd)}
        for t, (wd, s, a) in enumerate([(0.0, 0, 0.5), (0.0, 1, 0.52), (0.1, 0, 0.9), (0.1, 1, 0.92)])
    ]
    g = grids.make_grid(grids.tidy(recs), "ood", "split", "pe", "token_acc", "accuracy", split=["ood-sparse"])
    assert list(g.mean.index) == ["rope train.weight_decay=0", "rope train.weight_decay=0.1"]
    best = grids.make_grid(
        grids.tidy(recs), "ood", "split", "pe", "token_acc", "accuracy", split=["ood-sparse"], best_of=("weight_decay",)
    )
    assert list(best.mean.index) == ["rope"] and best.mean.at["rope", "ood-sparse"] == pytest.approx(92.0)
    assert best.n.at["rope", "ood-sparse"] == 4


def test_two_generator_revisions_are_never_averaged_and_an_old_record_reads_as_the_first():
    # records of a generator before and after a fixed defect (counting 1 -> 2) must not pool as
    # seeds; a record written before revisions were recorded is revision 1
    recs = [rec("rope", 16, s, 1.0, a, task="counting") for s, a in ((0, 0.5), (1, 0.6))]  # no field: 1
    recs += [{**rec("rope", 16, s, 1.0, a, task="counting"), "task_revision": 2} for s, a in ((0, 0.9), (1, 1.0))]
    g = grids.make_grid(grids.tidy(recs), "ood", "split", "pe", "token_acc", "accuracy", split=["test", "ood-sparse"])
    assert list(g.mean.index) == ["rope task_revision=1", "rope task_revision=2"]
    assert g.mean["ood-sparse"].tolist() == pytest.approx([55.0, 95.0]) and g.n["ood-sparse"].tolist() == [2, 2]
    same = [{**r, "task_revision": 2} for r in recs[:2]] + recs[2:]
    g = grids.make_grid(grids.tidy(same), "ood", "split", "pe", "token_acc", "accuracy", split=["test", "ood-sparse"])
    assert list(g.mean.index) == ["rope"] and g.n.at["rope", "ood-sparse"] == 2  # seeds 0 and 1, each run twice


def test_an_unknown_encoding_revision_pools_but_two_known_ones_do_not():
    old = [rec("alibi", 16, s, 1.0, a) for s, a in ((0, 0.5), (1, 0.6))]  # before pe_revision was recorded
    r2 = [{**rec("alibi", 16, s, 1.0, a), "pe_revision": 2} for s, a in ((2, 0.7), (3, 0.8))]
    r3 = [{**rec("alibi", 16, s, 1.0, a), "pe_revision": 3} for s, a in ((2, 0.9), (3, 1.0))]
    g = grids.make_grid(grids.tidy(old + r3), "ood", "split", "pe", "token_acc", "accuracy", split=["ood-sparse"])
    assert list(g.mean.index) == ["alibi"] and g.n.at["alibi", "ood-sparse"] == 4
    g = grids.make_grid(grids.tidy(r2 + r3), "ood", "split", "pe", "token_acc", "accuracy", split=["ood-sparse"])
    assert list(g.mean.index) == ["alibi pe_revision=2", "alibi pe_revision=3"]


def test_train_runs_differing_in_a_recorded_setting_are_never_one_seed():
    # two `synthlab train` runs of seed 0 (no study, no cell key), weight decay 0 and 0.1: the
    # record held no such field, so the grid took them for one seed trained twice and averaged them
    def run(wd, acc):
        r = {**rec("rope", 16, 0, 1.0, acc), "study": None, "trial": None}
        r["train"] = {**r["train"], "weight_decay": wd, "n_train": None}
        return r

    g = grids.make_grid(
        grids.tidy([run(0.0, 0.5), run(0.1, 0.9)]), "ood", "split", "pe", "token_acc", "accuracy", split=["ood-sparse"]
    )
    assert list(g.mean.index) == ["rope train.weight_decay=0", "rope train.weight_decay=0.1"]
    assert g.mean["ood-sparse"].tolist() == pytest.approx([50.0, 90.0])
    assert set(grids.tidy([run(0.0, 0.5)])["train.n_train"]) == {"none"}  # fresh samples: a setting, not unknown


def test_length_grid_from_groups_of_several_settings():
    """mqar's OOD groups scale the pairs with the length (``"length=512,n_kv=32"``): read as
    NaN lengths before, so `grid --x length` refused mqar and its sweep drew no ood-by-length."""
    recs = [
        rec(
            "rope",
            16,
            s,
            1,
            1,
            by_length={"length=512,n_kv=32": 0.5 + s / 10, "length=1024,n_kv=64": 0.25},
            task="mqar",
        )
        for s in (0, 1)
    ]
    for r in recs:
        r["metrics"] = {"test": {"token_acc": 1.0}, "ood-length": {"token_acc": 0.4}}
    t = grids.tidy(recs)
    rows = t[t.length.notna()]
    assert sorted(set(zip(rows.split, rows.length))) == [("ood-length", 512.0), ("ood-length", 1024.0)]
    g = grids.make_grid(t, "ood", "length", "pe", split="ood-length")
    assert list(g.mean.columns) == [512, 1024] and g.mean.at["rope", 512] == pytest.approx(55.0)
