"""The data commands end to end: `synthlab tasks`, `synthlab generate` (docs/interfaces.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synthlab import generators
from synthlab.cli import main

ALL_TASKS = [
    "flipflop",
    "selective_copy",
    "counting",
    "arithmetic",
    "binfa",
    "nfa",
    "mqar",
    "passkey",
    "even_pairs",
    "modular_arithmetic",
    "parity_check",
    "cycle_navigation",
    "stack_manipulation",
    "reverse_string",
    "modular_arithmetic_brackets",
    "solve_equation",
    "duplicate_string",
    "missing_duplicate_string",
    "odds_first",
    "binary_addition",
    "binary_multiplication",
    "compute_sqrt",
    "bucket_sort",
]
RECORD_FIELDS = ["task", "split", "seed", "index", "params", "tokens", "ids", "scored", "targets"]


def test_registry_has_all_23_tasks():
    assert sorted(generators.TASKS) == sorted(ALL_TASKS)


def test_tasks_lists_every_name(capsys):
    assert main(["tasks", "--names"]) == 0
    assert capsys.readouterr().out.split() == list(generators.TASKS)
    assert main(["tasks"]) == 0
    table = capsys.readouterr().out
    for name in ALL_TASKS:
        assert name in table


@pytest.mark.parametrize("task", ALL_TASKS)
def test_generate_is_byte_identical_and_solver_checked(task, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        assert main(["generate", task, "-n", "40", "--seed", "3", "--split", "test", "-o", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes()
    records = [json.loads(line) for line in a.read_text().splitlines()]
    assert len(records) == 40 and [r["index"] for r in records] == list(range(40))
    t = generators.get_task(task)
    for r in records:
        assert list(r) == RECORD_FIELDS
        assert r["task"] == task and r["seed"] == 3 and r["split"] == "test"
        assert [t.vocab[i] for i in r["ids"]] == r["tokens"]
        assert len(r["scored"]) == len(r["targets"])
        # the record alone is enough for the independent solver
        s = t.sample("test", 1, seed=3, start=r["index"])[0]
        assert s.to_record() == r
        assert t.solve(s) == r["targets"]
    # a different seed gives different data
    c = tmp_path / "c.jsonl"
    assert main(["generate", task, "-n", "40", "--seed", "4", "--split", "test", "-o", str(c)]) == 0
    assert c.read_bytes() != a.read_bytes()


def test_generate_start_addresses_the_same_samples(capsys):
    assert main(["generate", "flipflop", "-n", "6", "--seed", "1", "--set", "n_pairs=16"]) == 0
    whole = capsys.readouterr().out.splitlines()
    assert main(["generate", "flipflop", "-n", "2", "--start", "4", "--seed", "1", "--set", "n_pairs=16"]) == 0
    assert capsys.readouterr().out.splitlines() == whole[4:6]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["generate", "nosuchtask"], "unknown task 'nosuchtask'"),
        (["generate", "flipflop", "--set", "bogus=1"], "unknown parameter 'bogus'"),
        (["generate", "flipflop", "--set", "n_pairs=0"], "n_pairs"),
        (["generate", "flipflop", "--set", "n_pairs=abc"], "n_pairs"),
        (["generate", "flipflop", "--set", "p_i=1.5"], "p_i"),
        (["generate", "flipflop", "--split", "ood-nowhere"], "unknown split 'ood-nowhere'"),
        (["generate", "flipflop", "-n", "-1"], "-n must be an integer from 0 to"),
        (["generate", "flipflop", "--set", "novalue"], "key=value"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(argv, needle, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    assert main([*argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_console_script_exit_code_and_stderr(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "synthlab.cli",
            "generate",
            "flipflop",
            "--set",
            "n_pairs=-3",
            "-o",
            str(tmp_path / "x.jsonl"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "n_pairs" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()
