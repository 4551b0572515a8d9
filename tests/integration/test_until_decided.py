"""`synthlab sweep --until-decided`: seeds added in planned looks until the claims are decided.

In-process with the fake trainer of test_sweep.py: rope reads better than nope in distribution
in every seed (the claim is decided at the first look), and both read alike out of distribution
(that claim is never decided: every look runs, up to --max-seeds).
"""

from __future__ import annotations

import json

import pytest

from sweep_kit import TINY, FakeTrain, as_run, write_sweep
from synthlab.cli import main

CLAIMS = """
[[claim]]
text = "rope reads better than nope in distribution"
source = "a test"
better = { pe = "rope", split = "test" }
worse = { pe = "nope", split = "test" }
presets = ["smoke"]
"""

EQUAL = """
[[claim]]
text = "rope reads better than nope out of distribution"
source = "a test"
better = { pe = "rope", split = "ood-sparse" }
worse = { pe = "nope", split = "ood-sparse" }
presets = ["smoke"]
"""


class AliasedOOD(FakeTrain):
    """The fake trainer, with ood-sparse the same for both encodings (0.5 - 0.01 x seed)."""

    def __call__(self, *args, **kwargs):
        rec = super().__call__(*args, **kwargs)
        rec["metrics"]["ood-sparse"] = {"token_acc": 0.5 - 0.01 * rec["train"]["seed"]}
        rec["preset"] = kwargs.get("preset", args[2] if len(args) > 2 else "quick")  # as the real trainer's record
        if kwargs.get("results") is not None:  # the line the parent wrote: rewrite it with the new value
            path = kwargs["results"]
            lines = open(path).read().splitlines()
            lines[-1] = json.dumps(rec)
            open(path, "w").write("\n".join(lines) + "\n")
        return rec


@pytest.fixture
def fake(monkeypatch):
    import synthlab.run.training

    f = AliasedOOD()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(f))
    return f


def _seeds(out) -> list[int]:
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return sorted({r["train"]["seed"] for r in recs})


def test_a_clear_claim_stops_at_the_first_look_and_resumes_without_training(tmp_path, fake, capsys):
    path = write_sweep(tmp_path, TINY + CLAIMS)
    out = tmp_path / "runs"
    argv = ["sweep", str(path), "--out", str(out), "--until-decided", "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "look 1 of 4 (8 seeds): 1 of 1 claims decided" in text and "look 2" not in text
    assert "**supported**: the claimed way (look 1 of 4, 8 seeds" in text
    assert len(fake.calls) == 16 and _seeds(out) == list(range(8))
    papers_md = (out / "grids" / "papers.md").read_text()
    assert "(look 1 of 4, 8 seeds" in papers_md
    assert main(argv) == 0  # again: judged from the study, nothing trained
    assert len(fake.calls) == 16 and "look 1 of 4 (8 seeds): 1 of 1 claims decided" in capsys.readouterr().out


def test_an_undecided_claim_runs_every_look_up_to_the_cap(tmp_path, fake, capsys):
    path = write_sweep(tmp_path, TINY + CLAIMS + EQUAL)
    out = tmp_path / "runs"
    assert main(["sweep", str(path), "--out", str(out), "--until-decided", "--max-seeds", "10", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "look 1 of 2 (8 seeds): 1 of 2 claims decided" in text
    assert "look 2 of 2 (10 seeds): 1 of 2 claims decided" in text
    assert len(fake.calls) == 20 and _seeds(out) == list(range(10))
    # the decided claim keeps its first look; the other is shown as the last look left it
    assert "**supported**: the claimed way (look 1 of 2, 8 seeds" in text
    assert "**inconclusive**: no difference in these seeds (look 2 of 2, 10 seeds" in text


@pytest.mark.parametrize(
    "extra, msg",
    [
        (["--max-seeds", "5"], "--max-seeds must be an integer of at least 6"),
        (["--seeds", "3"], "--until-decided chooses the seeds itself"),
        (["--trials", "2"], "--until-decided runs whole looks"),
    ],
)
def test_bad_until_decided_values_exit_2_before_anything_is_written(tmp_path, fake, capsys, extra, msg):
    path = write_sweep(tmp_path, TINY + CLAIMS)
    out = tmp_path / "runs"
    assert main(["sweep", str(path), "--out", str(out), "--until-decided", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]
    assert not out.exists() and fake.calls == []


def test_max_seeds_alone_and_a_sweep_without_claims_exit_2(tmp_path, fake, capsys):
    path = write_sweep(tmp_path)
    assert main(["sweep", str(path), "--out", str(tmp_path / "a"), "--max-seeds", "8"]) == 2
    assert "--max-seeds goes with --until-decided" in capsys.readouterr().err
    assert main(["sweep", str(path), "--out", str(tmp_path / "a"), "--until-decided"]) == 2
    assert "states no claim for the smoke preset" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


def test_added_seeds_go_only_to_the_cells_a_claim_reads(tmp_path, fake, capsys):
    """alibi is in the grid but in no claim: it keeps the preset's seeds 0 and 1 at every look."""
    path = write_sweep(tmp_path, TINY + CLAIMS)
    out = tmp_path / "runs"
    argv = ["sweep", str(path), "--pe", "rope,nope,alibi", "--out", str(out), "--until-decided", "--quiet"]
    assert main(argv) == 0
    assert "look 1 of 4 (8 seeds): 1 of 1 claims decided" in capsys.readouterr().out
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    seeds = {pe: sorted(r["train"]["seed"] for r in recs if r["pe"] == pe) for pe in ("rope", "nope", "alibi")}
    assert seeds == {"rope": list(range(8)), "nope": list(range(8)), "alibi": [0, 1]}
    assert len(fake.calls) == 18
    assert main(argv) == 0 and len(fake.calls) == 18  # finished: nothing trained again
    assert "18/18 cells finished" in capsys.readouterr().out


def test_claims_only_runs_the_cells_the_claims_read_and_nothing_else(tmp_path, fake, capsys):
    path = write_sweep(tmp_path, TINY + CLAIMS)
    out = tmp_path / "runs"
    base = ["sweep", str(path), "--pe", "rope,nope,alibi", "--out", str(out), "--quiet"]
    assert main([*base, "--claims-only"]) == 0
    assert len(fake.calls) == 4 and {c for c in _pes(out)} == {"rope", "nope"}
    assert main([*base, "--claims-only", "--until-decided"]) == 0
    assert len(fake.calls) == 16 and sorted(_pes(out)) == ["nope"] * 8 + ["rope"] * 8
    assert main(base) == 0  # the whole grid: only alibi's two seeds are new
    assert len(fake.calls) == 18 and _pes(out).count("alibi") == 2


def test_claims_only_without_a_claimed_cell_exits_2_before_anything_is_written(tmp_path, fake, capsys):
    for text, pe in ((TINY, "rope,nope"), (TINY + CLAIMS, "alibi")):
        path = write_sweep(tmp_path, text)
        out = tmp_path / "runs"
        assert main(["sweep", str(path), "--pe", pe, "--out", str(out), "--claims-only"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--claims-only: no cell of this grid is read by a claim" in err[0]
        assert not out.exists() and fake.calls == []


def _pes(out) -> list[str]:
    return [json.loads(line)["pe"] for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


OTHER_PAIR_EQUAL = """
[[claim]]
text = "alibi reads better than learned out of distribution"
source = "a test"
better = { pe = "alibi", split = "ood-sparse" }
worse = { pe = "learned", split = "ood-sparse" }
presets = ["smoke"]
"""


def test_a_claim_decided_at_a_look_takes_no_more_seeds(tmp_path, fake, capsys):
    """rope vs nope is decided at look 1 (8 seeds); alibi vs learned never is: only alibi's and
    learned's cells go on to 10 seeds, and the decided claim keeps its look-1 verdict."""
    path = write_sweep(tmp_path, TINY + CLAIMS + OTHER_PAIR_EQUAL)
    out = tmp_path / "runs"
    argv = [
        "sweep",
        str(path),
        "--pe",
        "rope,nope,alibi,learned",
        "--out",
        str(out),
        "--until-decided",
        "--max-seeds",
        "10",
        "--quiet",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "look 1 of 2 (8 seeds): 1 of 2 claims decided" in text
    assert "look 2 of 2 (10 seeds): 1 of 2 claims decided" in text
    assert "**supported**: the claimed way (look 1 of 2, 8 seeds" in text
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    seeds = {
        pe: sorted(r["train"]["seed"] for r in recs if r["pe"] == pe) for pe in ("rope", "nope", "alibi", "learned")
    }
    assert seeds == {
        "rope": list(range(8)),
        "nope": list(range(8)),
        "alibi": list(range(10)),
        "learned": list(range(10)),
    }
    assert len(fake.calls) == 36
    assert main(argv) == 0 and len(fake.calls) == 36  # finished: the same looks, nothing trained again
    assert "36/36 cells finished" in capsys.readouterr().out
