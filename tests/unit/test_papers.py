"""The papers beside us: sweep-file paper numbers and claims, judged on result records."""

from __future__ import annotations

import math

import pytest

from synthlab import papers
from synthlab.grids import make_grid, tidy
from synthlab.sweeping import load_sweep, parse_sweep

BASE = """
[sweep]
task = "flipflop"
metric = "token_acc"
show = "error"
ood = ["ood-sparse"]
[axes]
pe = ["cope", "rope"]
[presets.smoke]
[presets.quick]
[presets.paper]
"""


def rec(pe: str, seed: int, test: float, sparse: float, preset: str = "quick", d_model: int = 64,
        status: str = "ok") -> dict:
    """A result record with read accuracies (fractions)."""
    r = {"schema": 1, "task": "flipflop", "pe": pe, "status": status, "preset": preset,
         "task_params": {"n_pairs": 64}, "positions": None,
         "model": {"d_model": d_model, "n_layers": 2, "n_heads": 4},
         "train": {"seed": seed, "steps": 1000, "batch_size": 32, "lr": 2e-3},
         "metrics": {"test": {"token_acc": test}, "ood-sparse": {"token_acc": sparse}} if status == "ok" else {}}
    return r


CLAIM = """
[[paper]]
source = "CoPE Table 8"
setting = "d 256"
cell = { pe = "rope", split = "ood-sparse" }
value = 20.3
spread = 2.9

[[claim]]
text = "CoPE below RoPE"
source = "CoPE Table 2"
better = { pe = "cope", split = "ood-sparse" }
worse = { pe = "rope", split = "ood-sparse" }
"""


def spec(extra: str = CLAIM):
    return parse_sweep(BASE + extra, "t.toml", name="t")


def test_parse_reads_paper_values_and_claims():
    s = spec()
    assert s.papers[0].value == 20.3 and s.papers[0].spread == 2.9 and s.papers[0].presets == ("paper",)
    assert s.claims[0].better == {"pe": "cope", "split": "ood-sparse"}
    assert s.claims[0].presets == ("quick", "paper")


@pytest.mark.parametrize("extra, msg", [
    ('[[paper]]\nsource = "x"\ncell = { pe = "rope" }\n', "'value' is required"),
    ('[[paper]]\nsource = "x"\ncell = { pe = "rope" }\nvalue = 120\n', "value: expected a number in [0, 100]"),
    ('[[paper]]\nsource = "x"\ncell = { pe = "rope" }\nvalue = 1\nbogus = 2\n', "unknown key 'bogus'"),
    ('[[claim]]\ntext = "t"\nsource = "s"\nbetter = { pe = "cope" }\n', "needs both 'better' and 'worse'"),
    ('[[claim]]\ntext = "t"\nsource = "s"\ncell = { pe = "cope" }\n', "exactly one of at_least, at_most"),
    ('[[claim]]\ntext = "t"\nsource = "s"\nbetter = { pe = "a" }\nworse = { pe = "b" }\npresets = ["huge"]\n',
     "presets: expected a list of presets"),
    ('[[claim]]\ntext = "t"\nsource = "s"\ncell = { pe = "cope" }\nat_most = 5\nbetter = { pe = "a" }\n',
     "either better and worse"),
])
def test_bad_paper_sections_name_the_entry(extra, msg):
    with pytest.raises(ValueError, match=msg.replace("[", r"\[").replace("(", r"\(")):
        spec(extra)


def test_measure_is_mean_sd_n_over_seeds_in_grid_units():
    records = [rec("rope", s, 1.0, acc) for s, acc in enumerate([0.8, 0.7, 0.9])]
    st = papers.measure(tidy(records), {"pe": "rope", "split": "ood-sparse"}, "token_acc", "error")
    assert st.n == 3
    assert st.mean == pytest.approx(20.0)
    assert st.sd == pytest.approx(10.0)


def test_claim_reproduced_only_beyond_the_spread():
    s = spec()
    apart = [rec("cope", i, 1.0, a) for i, a in enumerate([1.0, 0.99, 1.0])] + \
            [rec("rope", i, 1.0, a) for i, a in enumerate([0.8, 0.75, 0.82])]
    (v,) = papers.verdicts(apart, s)
    assert v.verdict == papers.REPRODUCED
    assert v.paper == [None, s.papers[0]]  # the paper's number for the rope cell rides along
    # overlapping: rope has one seed as good as CoPE, so the sds overlap the gap
    overlap = [rec("cope", i, 1.0, a) for i, a in enumerate([1.0, 0.9, 1.0])] + \
              [rec("rope", i, 1.0, a) for i, a in enumerate([0.8, 1.0, 0.9])]
    (v,) = papers.verdicts(overlap, s)
    assert v.verdict == papers.NOT_REPRODUCED and "within the spread" in v.reason
    reversed_ = [rec("cope", i, 1.0, a) for i, a in enumerate([0.7, 0.72, 0.71])] + \
                [rec("rope", i, 1.0, a) for i, a in enumerate([1.0, 0.99, 1.0])]
    (v,) = papers.verdicts(reversed_, s)
    assert v.verdict == papers.NOT_REPRODUCED and "other way round" in v.reason


def test_one_seed_is_never_reproduced():
    (v,) = papers.verdicts([rec("cope", 0, 1.0, 1.0), rec("rope", 0, 1.0, 0.5)], spec())
    assert v.verdict == papers.NOT_REPRODUCED and "one seed" in v.reason


def test_other_scale_and_missing_cells():
    smoke = [rec(pe, i, 1.0, a, preset="smoke") for pe, a in (("cope", 1.0), ("rope", 0.5)) for i in range(3)]
    (v,) = papers.verdicts(smoke, spec())
    assert v.verdict == papers.OTHER_SCALE
    # an encoding the sweep did not train: the claim is left out, not judged
    assert papers.verdicts([rec("cope", i, 1.0, 1.0) for i in range(3)], spec()) == []
    # the cell was trained but failed: not run
    failed = [rec("cope", i, 1.0, 1.0) for i in range(3)] + [rec("rope", 0, 0, 0, status="failed")]
    (v,) = papers.verdicts(failed, spec())
    assert v.verdict == papers.NOT_RUN


def test_a_cell_never_pools_settings_other_than_seeds():
    records = [rec(pe, i, 1.0, a, d_model=d) for pe, a in (("cope", 1.0), ("rope", 0.5))
               for d in (32, 64) for i in range(2)]
    (v,) = papers.verdicts(records, spec())
    assert v.verdict == papers.AMBIGUOUS and "d_model" in v.reason
    named = spec(CLAIM.replace('split = "ood-sparse" }', 'split = "ood-sparse", d_model = 64 }'))
    (v,) = papers.verdicts(records, named)
    assert v.verdict == papers.REPRODUCED  # with d_model named, only the 64 runs (2 seeds each) count


def test_threshold_claims():
    extra = ('[[claim]]\ntext = "CoPE near zero"\nsource = "s"\ncell = { pe = "cope", split = "ood-sparse" }\n'
             'at_most = 5\n')
    good = [rec("cope", i, 1.0, a) for i, a in enumerate([1.0, 0.99, 0.98])]
    (v,) = papers.verdicts(good, spec(extra))
    assert v.verdict == papers.REPRODUCED
    bad = [rec("cope", i, 1.0, a) for i, a in enumerate([0.8, 0.85, 0.9])]
    (v,) = papers.verdicts(bad, spec(extra))
    assert v.verdict == papers.NOT_REPRODUCED and "other side" in v.reason


def test_markdown_and_csv_rows_carry_paper_and_verdict(tmp_path):
    records = [rec("cope", i, 1.0, 1.0) for i in range(3)] + [rec("rope", i, 1.0, a) for i, a in
                                                               enumerate([0.8, 0.75, 0.82])]
    vs = papers.verdicts(records, spec())
    md = papers.markdown(vs, "error")
    assert "| CoPE below RoPE | CoPE Table 2 | quick | rope ood-sparse 20.3 ± 2.9 (d 256) |" in md
    assert "cope ood-sparse 0.0 ± 0.0 (n 3) vs rope ood-sparse 21.0 ± 3.6 (n 3)" in md
    assert "**reproduced**" in md
    files = papers.save(vs, "error", tmp_path)
    import pandas as pd

    row = pd.read_csv(files["csv"]).iloc[0]
    assert row["verdict"] == "reproduced" and row["worse_paper"] == 20.3 and row["better_n"] == 3
    assert math.isnan(row["better_paper"])


def test_save_writes_both_tables_or_neither(tmp_path, monkeypatch):
    """A failure while writing the CSV (a full disk, say) leaves no Markdown either, and no
    temporary file: before, papers.md was written first and stayed beside a missing CSV."""
    import pandas as pd

    vs = papers.verdicts([rec("cope", i, 1.0, 1.0) for i in range(3)] + [rec("rope", i, 1.0, 0.8) for i in range(3)],
                         spec())

    def full_disk(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    with pytest.raises(OSError):
        papers.save(vs, "error", tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    files = papers.save(vs, "error", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["papers.csv", "papers.md"] and files["md"].endswith(".md")


def test_grid_marks_the_paper_cell_in_labels_markdown_and_csv():
    s = spec()
    records = [rec(pe, i, 1.0, a) for pe, a in (("cope", 1.0), ("rope", 0.8)) for i in range(3)]
    g = make_grid(tidy(records), "ood", "split", "pe", "token_acc", "error", split=["test", "ood-sparse"])
    g.mark_papers(s.papers, ["test", "ood-sparse"])
    labels = dict(zip(g.mean.index, g.labels()))
    assert labels["rope"][1] == "20.0\n±0.0 (n 3)\npaper 20.3 ± 2.9"
    assert "paper" not in labels["cope"][1]
    assert "paper 20.3 ± 2.9" in g.markdown()
    long = g.long()
    assert long.loc[(long["pe"] == "rope") & (long["split"] == "ood-sparse"), "paper"].item() == 20.3


def test_every_installed_sweep_file_parses_its_paper_sections():
    for name in ("flipflop", "flipflop_lm", "selective_copy", "counting", "arithmetic", "binfa", "pose", "mqar", "che"):
        s = load_sweep(name)
        assert s.claims, f"{name} states no claim"
        for c in s.claims:
            for cell in c.cells():
                assert cell.get("pe") in s.axes["pe"], f"{name}: claim names pe {cell.get('pe')!r} the sweep lacks"


def test_a_dape_cell_names_its_kernel_as_the_sweep_axis_does():
    s = spec('[[claim]]\ntext = "k3 over kerple"\nsource = "s"\n'
             'better = { pe = "kerple+dape", dape_k = 3, split = "ood-sparse" }\n'
             'worse = { pe = "kerple", split = "ood-sparse" }\n')
    records = [rec("kerple+dape:k=3", i, 1.0, 1.0) for i in range(2)] + \
              [rec("kerple+dape:k=1", i, 1.0, 0.7) for i in range(2)] + [rec("kerple", i, 1.0, 0.5) for i in range(2)]
    (v,) = papers.verdicts(records, s)
    assert [st.n for st in v.stats] == [2, 2] and v.verdict == papers.REPRODUCED
    # k = 1 is DAPE's default: records name it "kerple+dape" (the claim was silently left out before)
    s1 = spec('[[claim]]\ntext = "k3 over k1"\nsource = "s"\n'
              'better = { pe = "kerple+dape", dape_k = 3, split = "ood-sparse" }\n'
              'worse = { pe = "kerple+dape", dape_k = 1, split = "ood-sparse" }\n')
    records = [{**r, "pe": "kerple+dape"} if r["pe"] == "kerple+dape:k=1" else r for r in records]
    (v,) = papers.verdicts(records, s1)
    assert [st.n for st in v.stats] == [2, 2] and v.verdict == papers.REPRODUCED


def test_a_length_cell_reads_the_per_length_rows():
    r = [{**rec("rope", i, 1.0, 0.5), "by_length": {"ood-sparse/256": 0.25 + 0.5 * i}} for i in range(2)]
    st = papers.measure(tidy(r), {"pe": "rope", "split": "ood-sparse", "length": 256}, "seq_acc", "accuracy")
    assert st.n == 2 and st.mean == pytest.approx(50.0)


def test_grid_judges_records_by_the_sweep_that_wrote_them():
    from synthlab.grids import sweep_spec_for

    records = [rec("cope", 0, 1.0, 1.0)]
    assert sweep_spec_for(records).name == "flipflop"  # no study: the task's first sweep
    assert sweep_spec_for([{**r, "study": "flipflop_lm-quick"} for r in records]).name == "flipflop_lm"
    assert sweep_spec_for([{**r, "study": "flipflop-paper"} for r in records]).name == "flipflop"
