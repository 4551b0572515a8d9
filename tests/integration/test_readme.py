"""README's short examples run and print what README shows (the long sweeps are left out), and
the worked `synthlab train` that README links (docs/results.md) prints the table shown there.

Each command is looked up in README.md first, so an edit there that drops or changes it fails
here until this list follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from synthlab.cli import main

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
WORDS = " ".join(README.split())  # a command may wrap over two lines


def in_readme(command: str) -> list[str]:
    assert command in WORDS, f"README no longer shows `{command}`"
    return command.split()[1:]


def test_tasks_and_encodings(capsys):
    assert main(in_readme("synthlab tasks")) == 0
    assert "flipflop" in capsys.readouterr().out
    assert main(in_readme("synthlab encodings")) == 0
    assert "cope" in capsys.readouterr().out


def test_generate_prints_the_record_readme_shows(capsys):
    assert main(in_readme("synthlab generate flipflop -n 1 --seed 3 --set n_pairs=4")) == 0
    out = capsys.readouterr().out.splitlines()
    # the record README prints, over its indented lines
    shown = re.search(r"\n    (\{\"task\": \"flipflop\".*?)\n\n", README, re.S).group(1)
    assert len(out) == 1 and json.loads(out[0]) == json.loads(" ".join(shown.split("\n")))


def test_grid_per_length_redraw(tmp_path, monkeypatch, capsys):
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text(encoding="utf-8").split())
    assert "synthlab grid results.jsonl --kind ood --x length" in docs  # README links it
    monkeypatch.chdir(tmp_path)
    rec = {
        "schema": 1,
        "run_id": "r0",
        "task": "even_pairs",
        "task_params": {},
        "pe": "rope",
        "positions": None,
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "params": 1},
        "train": {"steps": 5, "batch_size": 4, "lr": 1e-3, "seed": 0, "train_len": 20},
        "metrics": {"test": {"token_acc": 0.9}, "ood": {"token_acc": 0.6}},
        "by_length": {"41": 0.7, "42": 0.5},
        "study": None,
        "trial": None,
        "status": "ok",
    }
    Path("results.jsonl").write_text(json.dumps(rec) + "\n")
    assert main(["grid", "results.jsonl", "--kind", "ood", "--x", "length"]) == 0
    assert "| 41 | 42 |" in capsys.readouterr().out and Path("grid-ood.png").is_file()


@pytest.mark.slow
def test_worked_train_prints_the_table_docs_show(tmp_path, monkeypatch, capsys):
    """`synthlab train flipflop --pe rope`, as README names it and docs/results.md works it
    through: the quick preset's task and model (the same parameter count and length as the docs
    show), its training cut to 20 steps (the whole preset is about a minute on 2 cores; what is
    checked here is the command and the table it prints, not the numbers in it)."""
    from synthlab.plan import presets

    quick = presets.preset_settings

    def short(task, name="quick"):
        settings = quick(task, name)
        if (task, name) == ("flipflop", "quick"):
            assert settings["train.steps"] == 1000  # the preset docs/results.md ran
            settings.update({"train.steps": 20, "train.warmup": 2, "train.eval_samples": 32})
        return settings

    monkeypatch.setattr(presets, "preset_settings", short)
    monkeypatch.chdir(tmp_path)
    assert main(in_readme("synthlab train flipflop --pe rope")) == 0
    out = capsys.readouterr().out.splitlines()
    results_md = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text(encoding="utf-8")
    shown = results_md.split("$ synthlab train flipflop --pe rope\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert out[0].startswith("flipflop  pe=rope  seed=0  status=ok")
    assert out[1:3] == [ln[4:] for ln in shown[1:3]]  # header and rule
    assert [ln.split()[0] for ln in out[3:6]] == ["test", "ood-sparse", "ood-dense"]
    assert out[6].split()[:2] == shown[6].split()[:2] == ["params=100864", "train_len=128"]  # the quick model
    assert len(list(Path("synthlab-runs").glob("*/model.safetensors"))) == 1
    assert Path("synthlab-runs/results.jsonl").is_file()


@pytest.mark.slow
def test_python_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import synthlab

    for line in (
        'synthlab.train("flipflop", "cope", preset="smoke")',
        'synthlab.sweep("flipflop", pe="cope,rope", preset="smoke", out="runs/ff")',
        'synthlab.load_run("runs/ff/runs/<run_id>")',
        'synthlab.build_model(pe="kerple+dape:k=3", vocab_size=8, d_model=64, n_layers=2, n_heads=4, max_len=512)',
    ):
        assert line in README
    assert synthlab.train("flipflop", "cope", preset="smoke")["status"] == "ok"
    recs = synthlab.sweep("flipflop", pe="cope,rope", preset="smoke", out="runs/ff")
    assert {r["pe"] for r in recs} == {"cope", "rope"}
    line = (
        'synthlab.sweep("flipflop", pe="cope,rope", preset="smoke", out="runs/ff", seeds=3)  # seeds 0-2: 1 and 2 train'
    )
    assert line in README
    more = synthlab.sweep("flipflop", pe="cope,rope", preset="smoke", out="runs/ff", seeds=3)
    assert sorted(r["train"]["seed"] for r in more) == [0, 0, 1, 1, 2, 2]
    assert [r["run_id"] for r in more if r["train"]["seed"] == 0] == [r["run_id"] for r in recs]  # not trained again
    run = synthlab.load_run(next(Path("runs/ff/runs").glob("2*")))
    assert run.config["task"] == "flipflop"
    model = synthlab.build_model(pe="kerple+dape:k=3", vocab_size=8, d_model=64, n_layers=2, n_heads=4, max_len=512)
    assert sum(p.numel() for p in model.parameters()) > 0
