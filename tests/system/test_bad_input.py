"""The command line's promise on bad input and a failing environment.

Bad input exits 2 with ONE line on stderr before anything is written; an environment error
(read-only file system, permission denied, disk full, unreadable file) exits 1 with one line
naming the path and leaves no temporary file or half-made run directory; Ctrl-C exits 130.
Every case compares a listing of the working directory (every file's size and bytes' hash)
before and after. Real read-only file systems and a full disk are made with a tmpfs in a
private mount namespace (root and ``unshare`` only; skipped with the reason otherwise); as
root a chmod does not stop writes, so "permission denied" and "unreadable" use /sys (writes
refused to anyone) and /proc/self/mem (a regular file whose read fails with EIO).

Decisions stated here: a results file that holds NaN, a metric that is text, or an unknown
task is refused by `grid` (exit 2), never drawn blank; `--x length` on results without
per-length metrics is refused with that reason; one seed range everywhere, 0 <= seed <= 2**32 - 1
(Lightning's seed_everything takes 32-bit seeds); a sweep over 10,000 cells needs --yes;
`sweep --seeds` takes at most 10,000 seeds, even with --yes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sweep_kit import as_run
from synthlab.cli import main

TINY = """
[sweep]
task = "flipflop"
default_preset = "smoke"
metric = "token_acc"
show = "error"
ood = ["ood-sparse"]

[axes]
pe = ["rope", "nope"]
seed = [0, 1]

[presets.smoke]
task = { n_pairs = 8 }
model = { d_model = 16, n_layers = 1, n_heads = 2 }
train = { steps = 10, batch_size = 8, warmup = 0, eval_samples = 16 }

[presets.quick]
[presets.paper]
"""
SMOKE = ["--pe", "rope", "--preset", "smoke"]
SYS = "/sys/synthlab-test"  # sysfs: creating anything there is refused, even to root


def rec(pe="rope", seed=0, task="flipflop", acc=0.9, status="ok", by_length=None):
    r = {
        "schema": 1,
        "run_id": f"{task}-{pe}-{seed}-{status}",
        "task": task,
        "task_params": {"n_pairs": 16},
        "pe": pe,
        "positions": None,
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "params": 1},
        "train": {"steps": 5, "batch_size": 4, "lr": 1e-3, "seed": seed, "train_len": 32},
        "metrics": {"test": {"token_acc": acc}, "ood-sparse": {"token_acc": acc / 2}},
        "by_length": by_length,
        "study": None,
        "trial": None,
        "status": status,
    }
    if status != "ok":
        r.update(metrics={}, error="diverged: non-finite training loss (nan) at step 1")
    return r


def lines(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def listing(root: Path) -> dict[str, str]:
    """Every path under ``root`` with its kind, size and content hash."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink() or p.is_dir():
                out[rel] = "dir"
            elif not p.is_file():  # a FIFO (reading it would block), a device, a socket
                out[rel] = f"special {stat.S_IFMT(p.lstat().st_mode):o}"
            else:
                out[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A working directory with the inputs the cases use; the commands run in it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a directory\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "dir.toml").mkdir()
    (tmp_path / "base.toml").write_text(TINY.replace('task = "flipflop"', 'task = "flipflop"\nbase = "flipflp"'))
    (tmp_path / "latin1.toml").write_bytes(TINY.replace("[axes]", "# caf\xe9\n[axes]").encode("latin-1"))
    big = TINY.replace(
        "seed = [0, 1]",
        "seed = [%s]\nd_model = [%s]"
        % (", ".join(map(str, range(1000))), ", ".join(str(2 * i + 2) for i in range(500))),
    )
    (tmp_path / "big.toml").write_text(big)  # 2 x 1000 x 500 = 10^6 cells
    (tmp_path / "results.jsonl").write_text(lines(rec("rope", 0), rec("nope", 0, acc=0.5)))
    nan = json.dumps(rec()).replace('"token_acc": 0.9', '"token_acc": NaN')
    (tmp_path / "nan.jsonl").write_text(nan + "\n")
    text = rec()
    text["metrics"]["test"]["token_acc"] = "high"
    (tmp_path / "text.jsonl").write_text(lines(text))
    (tmp_path / "unknown.jsonl").write_text(lines(rec(task="nosuchtask")))
    (tmp_path / "x.png").mkdir()
    (tmp_path / "y.csv").mkdir()
    # special files: never replaced by a regular file, never opened where that blocks
    for name in (
        "fifo",
        "fifo.png",
        "fifo.toml",
        "fifo.csv",
        "side.csv",
        "fifodir/results.jsonl",
        "jdir/study.journal",
        "s.db",
    ):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        os.mkfifo(tmp_path / name)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
    try:  # null devices of our own (root only): never the machine's /dev/null
        for name in ("dev", "dev.png"):
            os.mknod(tmp_path / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pass
    return tmp_path


class Hung(BaseException):
    """Raised by :func:`deadline` (not an Exception: the CLI must not catch it)."""


@contextlib.contextmanager
def deadline(seconds: int):
    def hung(*_):
        raise Hung(f"still running after {seconds} s (blocked on a FIFO?)")

    before = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def run_cli(argv, capsys) -> tuple[int, list[str]]:
    code = main([str(a) for a in argv])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    return code, err


# (argv, exit code, what the one line says); {sys} is a path under /sys
CASES = {
    # train
    "train --out FILE": (["train", "flipflop", *SMOKE, "--out", "afile"], 2, "'afile' is a file, not a directory"),
    "train --out under a file": (["train", "flipflop", *SMOKE, "--out", "afile/runs"], 2, "'afile' is a file"),
    "train --results DIR": (["train", "flipflop", *SMOKE, "--results", "adir"], 2, "'adir' is a directory"),
    "train --out not writable": (["train", "flipflop", *SMOKE, "--out", f"{SYS}/runs"], 1, SYS),
    "train d_model=1e12": (["train", "flipflop", *SMOKE, "--set", "d_model=1e12"], 2, "model.d_model must be <="),
    "train batch_size=1e12": (
        ["train", "flipflop", *SMOKE, "--set", "batch_size=1e12"],
        2,
        "train.batch_size must be <=",
    ),
    "train steps=1e15": (["train", "flipflop", *SMOKE, "--set", "steps=1e15"], 2, "train.steps must be <="),
    "train --seed 2**70": (
        ["train", "flipflop", *SMOKE, "--seed", str(2**70)],
        2,
        "--seed must be an integer from 0 to 4294967295",
    ),
    "train --seed -1": (["train", "flipflop", *SMOKE, "--seed", "-1"], 2, "--seed must be an integer from 0"),
    # generate
    "generate -o FILE/x.jsonl": (["generate", "flipflop", "-o", "afile/x.jsonl"], 2, "'afile' is a file"),
    "generate -o DIR": (["generate", "flipflop", "-o", "adir"], 2, "'adir' is a directory"),
    "generate -o not writable": (
        ["generate", "flipflop", "-o", "/sys/synthlab-test.jsonl"],
        1,
        "/sys/synthlab-test.jsonl:",
    ),
    "generate n_pairs=1e12": (
        ["generate", "flipflop", "--set", "n_pairs=1e12"],
        2,
        "'n_pairs' must be at most 1,000,000",
    ),
    "generate --seed -1": (["generate", "flipflop", "--seed", "-1"], 2, "--seed must be an integer from 0 to"),
    "generate --seed 2**70": (["generate", "flipflop", "--seed", str(2**70)], 2, "--seed must be an integer"),
    # every size a command takes is bounded
    "generate -n 10^10": (
        ["generate", "flipflop", "-n", "10000000000"],
        2,
        "-n must be an integer from 0 to 1,000,000,000, got 10000000000",
    ),
    "generate -n -1": (["generate", "flipflop", "-n", "-1"], 2, "-n must be an integer from 0 to"),
    "generate --start 2**63": (
        ["generate", "flipflop", "--start", str(2**63)],
        2,
        "--start must be an integer from 0 to",
    ),
    "generate --start 2**63 - 5 -n 10": (
        ["generate", "flipflop", "--start", str(2**63 - 5), "-n", "10"],
        2,
        "--start must be an integer from 0 to 9,223,372,036,854,775,797",
    ),
    "generate --start -1": (["generate", "flipflop", "--start", "-1"], 2, "--start must be an integer from 0 to"),
    "plot bias --max-distance 10^9": (
        ["plot", "bias", "alibi", "--max-distance", "1000000000", "-o", "b.png"],
        2,
        "--max-distance must be an integer from 1 to 4,096, got 1000000000",
    ),
    "plot bias --max-distance 0": (
        ["plot", "bias", "alibi", "--max-distance", "0", "-o", "b.png"],
        2,
        "--max-distance must be an integer from 1 to 4,096, got 0",
    ),
    "plot attention --sample 2**70": (
        ["plot", "attention", "adir", "--sample", str(2**70), "-o", "a.png"],
        2,
        "--sample must be an integer from 0 to 9,223,372,036,854,775,807",
    ),
    "plot attention --sample -1": (
        ["plot", "attention", "adir", "--sample", "-1", "-o", "a.png"],
        2,
        "--sample must be an integer from 0 to",
    ),
    "plot glitches -n 10^12": (
        ["plot", "glitches", "adir", "-n", str(10**12), "-o", "g.png"],
        2,
        "-n must be an integer from 1 to 1,000,000, got 1000000000000",
    ),
    "plot glitches -n 0": (
        ["plot", "glitches", "adir", "-n", "0", "-o", "g.png"],
        2,
        "-n must be an integer from 1 to",
    ),
    # sweep
    "sweep --out under a file": (["sweep", "tiny.toml", "--out", "afile/sw"], 2, "'afile' is a file"),
    "sweep --out not writable": (["sweep", "tiny.toml", "--out", f"{SYS}/sw"], 1, SYS),
    # a file that is no journal (the sweep file itself, by a slip): the torn-tail repair cut its last line off
    "sweep --storage a file that is no journal": (
        ["sweep", "tiny.toml", "--storage", "tiny.toml", "--out", "sw"],
        2,
        "--storage 'tiny.toml' is not an Optuna journal file (line 1:",
    ),
    "sweep --storage DIR": (
        ["sweep", "tiny.toml", "--storage", "adir", "--out", "sw"],
        2,
        "--storage 'adir' is a directory",
    ),
    "sweep --study of 300 characters": (
        ["sweep", "tiny.toml", "--study", "s" * 300],
        2,
        "a study name is 1 to 200 characters",
    ),
    "sweep --study ''": (["sweep", "tiny.toml", "--study", ""], 2, "--study '': a study name is 1 to 200"),
    "sweep unreadable file": (["sweep", "/proc/self/mem"], 1, "/proc/self/mem: Input/output error"),
    "sweep DIR as sweep file": (["sweep", "dir.toml"], 2, "sweep file 'dir.toml' is a directory"),
    "sweep non-UTF-8 file": (["sweep", "latin1.toml"], 2, "sweep file 'latin1.toml' is not UTF-8"),
    "sweep of 10^6 cells": (["sweep", "big.toml"], 2, "1,000,000 cells"),
    "sweep --set an axis": (
        ["sweep", "arithmetic", "--preset", "smoke", "--set", "d_model=16"],
        2,
        "--set d_model: model.d_model is an axis of this sweep (16, 24)",
    ),
    "sweep --set a tuned key": (
        ["sweep", "even_pairs", "--preset", "paper", "--set", "lr=1e-3"],
        2,
        "--set lr: train.lr is tuned by this preset",
    ),
    "sweep --set pe": (["sweep", "tiny.toml", "--set", "pe=alibi"], 2, "set it with --pe, not --set"),
    "sweep --set train.seed": (["sweep", "tiny.toml", "--set", "train.seed=3"], 2, "the seed axis (0, 1)"),
    "sweep --set unknown": (["sweep", "tiny.toml", "--set", "bogus=1"], 2, "unknown setting 'bogus'"),
    "sweep --set no value": (["sweep", "tiny.toml", "--set", "steps"], 2, "--set expects key=value, got 'steps'"),
    "sweep --set out of range": (["sweep", "tiny.toml", "--set", "steps=1e15"], 2, "train.steps must be <="),
    "sweep --seeds 0": (["sweep", "tiny.toml", "--seeds", "0"], 2, "--seeds '0': a count of seeds is at least 1"),
    "sweep --seeds -3": (["sweep", "tiny.toml", "--seeds", "-3"], 2, "--seeds '-3': seeds are integers from 0 to"),
    "sweep --seeds 5-2": (["sweep", "tiny.toml", "--seeds", "5-2"], 2, "range 5-2 ends before it starts"),
    "sweep --seeds a": (["sweep", "tiny.toml", "--seeds", "a"], 2, "--seeds 'a': expected a count N"),
    "sweep --seeds 1,1": (["sweep", "tiny.toml", "--seeds", "1,1"], 2, "seed 1 is repeated"),
    "sweep --seeds 100000": (["sweep", "tiny.toml", "--seeds", "100000"], 2, "100,000 seeds, over the 10,000"),
    "sweep --seeds 2**32": (["sweep", "tiny.toml", "--seeds", f"{2**32}-{2**32}"], 2, "got 4294967296"),
    "sweep --seeds over 10,000 cells": (["sweep", "tiny.toml", "--seeds", "6000"], 2, "12,000 cells"),
    # grid
    "grid -o x.png, a directory": (["grid", "results.jsonl", "-o", "x.png"], 2, "'x.png' is a directory"),
    "grid -o y.png, y.csv a directory": (["grid", "results.jsonl", "-o", "y.png"], 2, "'y.csv' is a directory"),
    "grid -o not writable": (["grid", "results.jsonl", "-o", "/sys/synthlab-test.png"], 1, "/sys/synthlab-test.png:"),
    "grid unreadable RESULTS": (["grid", "/proc/self/mem", "-o", "g.png"], 1, "/proc/self/mem: Input/output error"),
    "grid DIR without results as RESULTS": (
        ["grid", "adir", "-o", "g.png"],
        2,
        "'adir' is a directory without results.jsonl or study-results.jsonl",
    ),
    "grid DIR whose results.jsonl is a FIFO": (
        ["grid", "fifodir", "-o", "g.png"],
        2,
        "'fifodir/results.jsonl' is not a regular file",
    ),
    "grid NaN literal": (["grid", "nan.jsonl", "-o", "g.png"], 2, "metrics.test.token_acc is NaN"),
    "grid text metric": (["grid", "text.jsonl", "-o", "g.png"], 2, "metrics.test.token_acc is not a number ('high')"),
    "grid unknown task": (["grid", "unknown.jsonl", "-o", "g.png"], 2, "unknown task 'nosuchtask'"),
    "grid --x length without per-length metrics": (
        ["grid", "results.jsonl", "--x", "length", "-o", "g.png"],
        2,
        "no per-length metrics",
    ),
    # an output that is a FIFO, a device or a socket is refused, never replaced
    "generate -o FIFO": (["generate", "flipflop", "-o", "fifo"], 2, "-o 'fifo' is not a regular file"),
    "generate -o device": (["generate", "flipflop", "-o", "dev"], 2, "-o 'dev' is not a regular file"),
    "generate -o socket": (["generate", "flipflop", "-o", "sock"], 2, "-o 'sock' is not a regular file"),
    "generate parquet -o FIFO": (
        ["generate", "flipflop", "--format", "parquet", "-o", "fifo"],
        2,
        "-o 'fifo' is not a regular file",
    ),
    "export -o FIFO": (["export", "results.jsonl", "-o", "fifo.csv"], 2, "-o 'fifo.csv' is not a regular file"),
    "export -o device": (["export", "results.jsonl", "--format", "csv", "-o", "dev"], 2, "-o 'dev' is not a regular"),
    "export -o socket": (["export", "results.jsonl", "--format", "csv", "-o", "sock"], 2, "-o 'sock' is not a regular"),
    "grid -o FIFO": (["grid", "results.jsonl", "-o", "fifo.png"], 2, "'fifo.png' is not a regular file"),
    "grid -o PNG whose CSV is a FIFO": (
        ["grid", "results.jsonl", "-o", "side.png"],
        2,
        "'side.csv' is not a regular file",
    ),
    "grid -o device": (["grid", "results.jsonl", "-o", "dev.png"], 2, "'dev.png' is not a regular file"),
    "plot -o FIFO": (["plot", "bias", "alibi", "-o", "fifo.png"], 2, "-o 'fifo.png' is not a regular file"),
    "plot -o device": (["plot", "bias", "alibi", "-o", "dev.png"], 2, "-o 'dev.png' is not a regular file"),
    "report -o FIFO": (["report", "adir", "-o", "fifo"], 2, "'fifo' is not a regular file"),
    "report -o device": (["report", "adir", "-o", "dev"], 2, "'dev' is not a regular file"),
    "train --results FIFO": (["train", "flipflop", *SMOKE, "--results", "fifo"], 2, "'fifo' is not a regular file"),
    "train --out whose results.jsonl is a FIFO": (
        ["train", "flipflop", *SMOKE, "--out", "fifodir"],
        2,
        "'fifodir/results.jsonl' is not a regular file",
    ),
    # a FIFO that a command would read or open is refused at once, not waited on
    "sweep --storage FIFO": (
        ["sweep", "tiny.toml", "--storage", "fifo", "--out", "sw"],
        2,
        "--storage 'fifo' is not a regular file",
    ),
    "sweep --storage sqlite FIFO": (
        ["sweep", "tiny.toml", "--storage", "sqlite:///s.db", "--out", "sw"],
        2,
        "--storage 's.db' is not a regular file",
    ),
    "sweep OUT/results.jsonl FIFO": (
        ["sweep", "tiny.toml", "--out", "fifodir"],
        2,
        "'fifodir/results.jsonl' is not a regular file",
    ),
    "sweep OUT/study.journal FIFO": (
        ["sweep", "tiny.toml", "--out", "jdir"],
        2,
        "'jdir/study.journal' is not a regular file",
    ),
    "sweep file FIFO": (["sweep", "fifo.toml"], 2, "sweep file 'fifo.toml' is not a regular file"),
    "grid RESULTS FIFO": (["grid", "fifo", "-o", "g.png"], 2, "'fifo' is not a regular file"),
    "export RESULTS FIFO": (["export", "fifo", "-o", "e.csv"], 2, "'fifo' is not a regular file"),
    "curves RESULTS FIFO": (["curves", "fifo", "--out", "c"], 2, "'fifo' is not a regular file"),
    "export DIR whose results.jsonl is a FIFO": (
        ["export", "fifodir", "-o", "e.csv"],
        2,
        "'fifodir/results.jsonl' is not a regular file",
    ),
    "report ROOT FIFO": (["report", "fifo", "-o", "r.md"], 2, "'fifo'"),
    # a typo gets the closest name, on one short line (TYPOS below: its length)
    "train task typo": (["train", "flipfolp", *SMOKE], 2, "unknown task 'flipfolp' (did you mean flipflop?)"),
    "train --set typo": (
        ["train", "flipflop", *SMOKE, "--set", "stpes=10"],
        2,
        "unknown setting 'stpes' (did you mean train.steps?)",
    ),
    "train --set dotted typo": (
        ["train", "flipflop", *SMOKE, "--set", "model.d_modle=16"],
        2,
        "unknown setting 'model.d_modle' (did you mean model.d_model",
    ),
    "train --set task typo": (
        ["train", "flipflop", *SMOKE, "--set", "task.n_pair=16"],
        2,
        "unknown setting 'task.n_pair' (did you mean task.n_pairs",
    ),
    "generate task typo": (["generate", "flipfolp"], 2, "unknown task 'flipfolp' (did you mean flipflop?)"),
    "sweep --set typo": (
        ["sweep", "tiny.toml", "--set", "stpes=10"],
        2,
        "unknown setting 'stpes' (did you mean train.steps?)",
    ),
    "train task far from any": (["train", "zzzz", *SMOKE], 2, "unknown task 'zzzz' (see `synthlab tasks`)"),
    "sweep base typo": (
        ["sweep", "base.toml"],
        2,
        "base.toml: sweep.base: unknown sweep 'flipflp' (did you mean flipflop",
    ),
}
TYPOS = [c for c in CASES if "typo" in c or "far from any" in c]


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_and_nothing_written(ws, capsys, case):
    argv, code, needle = CASES[case]
    if any(str(a).startswith(("/sys/", "/proc/")) for a in argv) and not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux /sys and /proc")
    if {"dev", "dev.png"} & set(argv) and not (ws / "dev").exists():
        pytest.skip("making a device node needs root")
    before = listing(ws)
    with deadline(120):  # a FIFO opened for reading or writing blocks: fail, do not hang
        got, err = run_cli(argv, capsys)
    assert (got, len(err)) == (code, 1), err
    assert err[0].startswith(f"synthlab {argv[0]}: error: ") and needle in err[0], err[0]
    assert "Traceback" not in err[0]
    assert listing(ws) == before  # nothing written, no temporary file left
    if case in TYPOS:  # the closest names, not all 23 tasks or 37 settings
        assert len(err[0]) < 120, err[0]


def test_the_cases_accepted_before_still_run_with_their_fix(ws, capsys):
    """The refusals are limits, not bans: --yes runs a big grid (stopped here before it
    trains), and the largest seed and size parameters generate."""
    assert main(["generate", "flipflop", "-n", "1", "--seed", str(2**32 - 1), "--set", "n_pairs=4"]) == 0
    assert json.loads(capsys.readouterr().out)["seed"] == 2**32 - 1
    from synthlab.commands.sweep import count_cells
    from synthlab.plan.sweepfile import load_sweep

    assert count_cells(load_sweep("big.toml"), "smoke", None) == 10**6
    assert count_cells(load_sweep("tiny.toml"), "smoke", ["rope", "kerple+dape"]) == 4


def test_generate_ctrl_c_exits_130_and_leaves_no_part_file(ws, capsys, monkeypatch):
    from synthlab.commands import generate

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate, "_write", interrupted)
    before = listing(ws)
    code, err = run_cli(["generate", "flipflop", "-o", "out.jsonl"], capsys)
    assert code == 130 and err == ["synthlab: interrupted"]
    assert listing(ws) == before


def test_train_disk_full_leaves_no_run_directory_and_no_record(ws, capsys, monkeypatch):
    """An OSError while the weights are written (the disk filled up): exit 1, one line naming
    the file, the run directory (and the --out directory it made) removed, no record."""
    import safetensors.torch

    def full(model, path, *a, **k):
        Path(path).write_bytes(b"\0" * 100)  # half a file, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(safetensors.torch, "save_model", full)
    before = listing(ws)
    code, err = run_cli(["train", "flipflop", *SMOKE, "--set", "steps=2", "--out", "runs/new", "--quiet"], capsys)
    assert (code, len(err)) == (1, 1), err
    assert (
        err[0].startswith("synthlab train: error: runs/new/") and "model.safetensors: No space left on device" in err[0]
    )
    # no run directory and no record; what stays is the resumable state synthlab.run.checkpoints
    # keeps on purpose when a run is interrupted (OUT/.checkpoints/<key>/)
    after = {k: v for k, v in listing(ws).items() if not k.startswith("runs/new/.checkpoints")}
    kept = (ws / "runs" / "new" / ".checkpoints").exists()  # then runs/new/ holds it
    assert after == ({**before, "runs": "dir", "runs/new": "dir"} if kept else before)


class _Fake:
    """Stands in for synthlab.run.training.train in a sweep; ``broken`` cells raise ``error``."""

    def __init__(self, broken=(), error=None):
        self.broken, self.error, self.calls = set(broken), error, []

    def __call__(self, task, pe, preset="quick", seed=0, out=None, results=None, study=None, trial=None, **kw):
        self.calls.append((pe, seed))
        if (pe, seed) in self.broken:
            raise self.error
        rec_ = {**rec(pe, seed), "study": study, "trial": trial}
        if results is not None:
            with open(results, "a") as f:
                f.write(json.dumps(rec_) + "\n")
        return rec_


def test_sweep_environment_error_stops_the_worker_without_failing_the_cell(ws, capsys, monkeypatch):
    import synthlab.run.training

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(ws / "sw" / "runs" / "x" / "model.safetensors"))
    monkeypatch.setattr(synthlab.run.training, "run", as_run(_Fake(broken={("nope", 0)}, error=full)))
    code, err = run_cli(["sweep", "tiny.toml", "--out", "sw", "--quiet"], capsys)
    assert code == 1 and err == [f"synthlab sweep: error: {full.filename}: No space left on device"]
    records = [json.loads(ln) for ln in (ws / "sw" / "results.jsonl").read_text().splitlines() if ln.strip()]
    assert all(r["status"] == "ok" for r in records)  # the cell is not recorded as failed
    fixed = _Fake()
    monkeypatch.setattr(synthlab.run.training, "run", as_run(fixed))
    assert main(["sweep", "tiny.toml", "--out", "sw", "--quiet"]) == 0
    assert ("nope", 0) in fixed.calls  # it runs on the next sweep


def test_sweep_corrupt_journal_is_named_and_left_alone(ws, capsys, monkeypatch):
    """A garbage line inside the journal (not a torn tail, which the storage repairs): exit 2,
    one line naming the journal, nothing written (the validation before it writes nothing)."""
    import synthlab.run.training

    monkeypatch.setattr(synthlab.run.training, "run", as_run(_Fake()))
    assert main(["sweep", "tiny.toml", "--out", "sw", "--quiet"]) == 0
    capsys.readouterr()
    journal = ws / "sw" / "study.journal"
    entries = journal.read_bytes().split(b"\n")
    journal.write_bytes(b"\n".join(entries[:3] + [b"garbage {"] + entries[3:]))
    before = listing(ws)
    code, err = run_cli(["sweep", "tiny.toml", "--out", "sw", "--quiet"], capsys)
    assert (code, len(err)) == (2, 1), err
    assert str(journal.relative_to(ws)) in err[0]  # the file is named, not only json's "Expecting value"
    assert listing(ws) == before


# ----------------------------------------------------------------------------------------
# a real read-only file system and a real full disk: a tmpfs in a private mount namespace


def _namespace_reason() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux to mount a tmpfs in a private mount namespace"
    if shutil.which("unshare") is None:
        return "needs util-linux unshare"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o ro,size=16k tmpfs /mnt"], capture_output=True
    )
    return None if probe.returncode == 0 else "mount in a private namespace refused here"


def in_namespace(ws: Path, mount: str, argv: list[str]) -> subprocess.CompletedProcess:
    """``synthlab argv`` in a private mount namespace where ``mount`` (sh) ran first; prints
    what ws/mnt holds afterwards (the mount vanishes with the namespace)."""
    (ws / "mnt").mkdir(exist_ok=True)
    cmd = f"{mount} || exit 99; \"$@\"; rc=$?; echo '--- mnt'; find mnt | sort; exit $rc"
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", cmd, "sh", sys.executable, "-m", "synthlab.cli", *argv],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=300,
    )


RO = "mount -t tmpfs -o ro,size=64k tmpfs mnt"
# a results file in a directory mounted read-only: the grid goes beside it by default
RO_RESULTS = "mount --bind mnt mnt && mount -o remount,ro,bind mnt mnt"
READ_ONLY = {
    "train --out": (RO, ["train", "flipflop", *SMOKE, "--out", "mnt/runs"], "mnt/runs: Read-only file system"),
    "generate -o": (RO, ["generate", "flipflop", "-o", "mnt/x.jsonl"], "mnt/x.jsonl: Read-only file system"),
    "sweep --out": (RO, ["sweep", "tiny.toml", "--out", "mnt/sw"], "mnt/sw: Read-only file system"),
    "sweep --storage sqlite": (
        RO,
        ["sweep", "tiny.toml", "--storage", "sqlite:///mnt/s.db", "--out", "sw"],
        "mnt/s.db: Read-only file system",
    ),
    "grid -o": (RO, ["grid", "results.jsonl", "-o", "mnt/g.png"], "mnt/g.png: Read-only file system"),
    "grid RESULTS in a read-only directory": (
        RO_RESULTS,
        ["grid", "mnt/results.jsonl"],
        "mnt/grid-ood.png: Read-only file system",
    ),
}


@pytest.mark.parametrize("case", list(READ_ONLY))
def test_read_only_file_system_exit_1_one_line(ws, case):
    reason = _namespace_reason()
    if reason:
        pytest.skip(reason)
    mount, argv, needle = READ_ONLY[case]
    (ws / "mnt").mkdir()
    shutil.copy(ws / "results.jsonl", ws / "mnt")  # hidden by a tmpfs; read-only with the bind mount
    before = listing(ws)
    p = in_namespace(ws, mount, argv)
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert (p.returncode, len(err)) == (1, 1), p.stderr
    assert err[0] == f"synthlab {argv[0]}: error: {needle}"
    assert listing(ws) == before


@pytest.mark.slow
def test_train_on_a_full_tmpfs_leaves_nothing_half_made(ws):
    reason = _namespace_reason()
    if reason:
        pytest.skip(reason)
    # room for config.json and metrics.jsonl, not for the weights
    p = in_namespace(
        ws,
        "mount -t tmpfs -o size=24k tmpfs mnt",
        ["train", "flipflop", *SMOKE, "--set", "steps=2", "--out", "mnt/runs", "--quiet"],
    )
    # library warnings (Lightning's, e.g. "The `srun` command is available" where SLURM is) aside
    err = [ln for ln in p.stderr.splitlines() if ln.strip() and "warn" not in ln.lower() and "srun" not in ln]
    assert p.returncode == 1 and len(err) == 1 and "No space left on device" in err[0], p.stderr
    left = [x for x in p.stdout.split("--- mnt\n")[1].split() if "/.checkpoints" not in x]
    assert left in (["mnt"], ["mnt", "mnt/runs"])  # no run directory, no record (the checkpoint may stay)


# ----------------------------------------------------------------------------------------
# a hostile working directory, and a stop while the helpers import


PROBE = """
import json, sys, time
import torch  # a helper's slow import: a stop may land in it
from synthlab.study import workers


def _helper(payload):
    def run(report, sleep=False):
        import jsonlines
        from synthlab import generators
        with open(report, "w") as f:
            json.dump({"jsonlines": jsonlines.__file__, "tasks": sorted(generators.TASKS)}, f)
        if sleep:
            time.sleep(600)
    return workers.helper_main(run, payload)


if __name__ == "__main__":  # what `python -m` ran before the fix
    sys.exit(_helper(sys.argv[1]))
"""


def plant(d: Path) -> None:
    """A ``jsonlines.py`` and a distribution declaring a ``synthlab.tasks`` entry point in ``d``:
    each writes a marker file when imported."""
    (d / "jsonlines.py").write_text("open('PLANTED-jsonlines', 'w').close()\n")
    (d / "evilmod.py").write_text("open('PLANTED-entry-point', 'w').close()\n")
    info = d / "evil-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[synthlab.tasks]\nevil = evilmod:Evil\n")


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A helper module outside the working directory, importable by this process and its helpers."""
    d = tmp_path / "probe"
    d.mkdir()
    (d / "synthlab_probe_helper.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(d))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(d), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return "synthlab_probe_helper"


def test_helpers_import_nothing_from_the_working_directory(tmp_path, monkeypatch, probe):
    """Failed before: helpers ran as `python -m`, which puts the working directory first on
    sys.path: the planted jsonlines.py and entry point ran in them."""
    from synthlab.study import workers

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    plant(cwd)
    monkeypatch.chdir(cwd)
    procs = workers.spawn(2, probe, {"report": str(tmp_path / "report.json")})
    assert workers.wait(procs) == [0]
    report = json.loads((tmp_path / "report.json").read_text())
    assert not list(cwd.glob("PLANTED-*"))
    assert not report["jsonlines"].startswith(str(cwd)) and "evil" not in report["tasks"]


@pytest.mark.parametrize("delay", [0.0, 0.3, 1.0, 3.0])
def test_a_stop_while_the_helpers_import_prints_no_traceback(tmp_path, capfd, probe, delay):
    """Failed before: a Ctrl-C (the main process's SIGINT) that reached a helper during `import
    torch`, before helper_main's try, printed a KeyboardInterrupt traceback (and one that came
    while its interpreter imported `site`, a fatal error)."""
    import time

    from synthlab.study import workers

    procs = workers.spawn(2, probe, {"report": str(tmp_path / "report.json"), "sleep": True})
    time.sleep(delay)
    workers.stop(procs)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert procs[0].returncode in (130, -signal.SIGTERM)  # stopped in its interpreter's start: killed quietly


# ----------------------------------------------------------------------------------------
# sweep files that name nothing their task has: refused before anything runs

CLAIM = (
    '\n[[claim]]\ntext = "t"\nsource = "s"\npresets = ["smoke"]\nbetter = {%s}\n'
    'worse = { pe = "nope", split = "test" }\n'
)
PAPER = '\n[[paper]]\nsource = "s"\npresets = ["smoke"]\ncell = {%s}\nvalue = 10\n'
PARTIAL = """
[sweep]
task = "even_pairs"
[axes]
pe = ["rope"]
[presets.smoke]
task = { train_max_length = 5, test_min_length = 6, test_max_length = 8 }
model = { d_model = 16, n_layers = 1, n_heads = 2 }
train = { steps = 10, batch_size = 8, warmup = 0, eval_samples = 16 }
[presets.quick]
[presets.paper]
"""


def tiny(old: str = "", new: str = "", extra: str = "") -> str:
    assert old in TINY
    return TINY.replace(old, new) + extra


# name -> (sweep file text, what the one line says)
SWEEP_FILES = {
    "metric the task does not record": (
        tiny('metric = "token_acc"', 'metric = "token_accuracy"'),
        "sweep.metric: task 'flipflop' records no metric 'token_accuracy' (did you mean token_acc",
    ),
    "metric of another task": (tiny('metric = "token_acc"', 'metric = "answer_acc"'), "records no metric 'answer_acc'"),
    "ood split the task does not have": (
        tiny('ood = ["ood-sparse"]', 'ood = ["ood-sparse", "ood-long"]'),
        "sweep.ood: task 'flipflop' has no split 'ood-long'",
    ),
    "ood split misspelt": (
        tiny('ood = ["ood-sparse"]', 'ood = ["ood_sparse"]'),
        "has no split 'ood_sparse' (did you mean ood-sparse",
    ),
    "objective_split the task does not have": (
        tiny('show = "error"', 'show = "error"\nobjective_split = "valid"'),
        "sweep.objective_split: task 'flipflop' has no split 'valid'",
    ),
    "in_dist the task does not have": (
        tiny('show = "error"', 'show = "error"\nin_dist = "tset"'),
        "sweep.in_dist: task 'flipflop' has no split 'tset' (did you mean test?)",
    ),
    "partial [sweep]: the default in_dist missing at the preset": (
        PARTIAL,
        "sweep.in_dist (default): task 'even_pairs' has no split 'test' (its splits at preset smoke: train, ood)",
    ),
    "unknown task": (
        tiny('task = "flipflop"', 'task = "flipflap"'),
        "sweep.task: unknown task 'flipflap' (did you mean flipflop?)",
    ),
    "capacity_x names nothing": (
        tiny('show = "error"', 'show = "error"\ncapacity_x = "dmodel"'),
        "sweep.capacity_x: 'dmodel' names no setting or record field (did you mean d_model",
    ),
    "ood_y part names nothing": (
        tiny('show = "error"', 'show = "error"\nood_y = "task,pee"'),
        "sweep.ood_y: 'pee' names no setting",
    ),
    "claim cell names an unknown key": (
        tiny(extra=CLAIM % 'pe = "rope", split = "test", d_modle = 16'),
        "claim[0].better.d_modle: names no setting or record field (did you mean d_model",
    ),
    "claim cell names an unknown split": (
        tiny(extra=CLAIM % 'pe = "rope", split = "ood-sprase"'),
        "claim[0].better.split: no task of this sweep has a split 'ood-sprase'",
    ),
    "claim cell names an unknown encoding": (
        tiny(extra=CLAIM % 'pe = "ropee", split = "test"'),
        "claim[0].better.pe: unknown",
    ),
    "claim cell names another task": (
        tiny(extra=CLAIM % 'pe = "rope", split = "test", task = "counting"'),
        "claim[0].better.task: 'counting' is no task of this sweep",
    ),
    "claim cell names a value no preset gives": (
        tiny(extra=CLAIM % 'pe = "rope", split = "test", d_model = 64'),
        "claim[0].better.d_model: 64 is not a value this sweep gives d_model at its presets smoke (16)",
    ),
    "claim cell names a task-parameter value no preset gives": (
        tiny(extra=CLAIM % 'pe = "rope", split = "test", n_pairs = 9'),
        "claim[0].better.n_pairs: 9 is not a value this sweep gives n_pairs at its presets smoke (8)",
    ),
    "paper cell names an unknown key": (
        tiny(extra=PAPER % 'pe = "rope", split = "test", n_pair = 8'),
        "paper[0].cell.n_pair: names no setting or record field (did you mean n_pairs",
    ),
    "paper cell names an unknown split": (
        tiny(extra=PAPER % 'pe = "rope", split = "ood"'),
        "paper[0].cell.split: no task of this sweep has a split 'ood'",
    ),
}


@pytest.mark.parametrize("case", list(SWEEP_FILES))
def test_a_sweep_file_that_names_nothing_is_refused_before_anything_runs(ws, capsys, monkeypatch, case):
    """Failed before: the whole grid trained, exited 0 and drew blank cells (or every trial
    failed); each name is now checked against the task first. (A fake trainer: a grid that
    does run, wrongly, runs fast.)"""
    import synthlab.run.training

    monkeypatch.setattr(synthlab.run.training, "run", as_run(_Fake()))
    text, needle = SWEEP_FILES[case]
    (ws / "named.toml").write_text(text)
    before = listing(ws)
    code, err = run_cli(["sweep", "named.toml", "--preset", "smoke", "--out", "sw", "--workers", "1"], capsys)
    assert (code, len(err)) == (2, 1), err
    assert err[0].startswith("synthlab sweep: error: named.toml: ") and needle in err[0], err[0]
    assert listing(ws) == before


def test_every_installed_sweep_names_only_what_its_tasks_have():
    from synthlab.plan.cells import expand_cells
    from synthlab.plan.sweepfile import installed_sweeps, load_sweep
    from synthlab.study.sweepnames import check_cells, check_file

    for name in [*installed_sweeps(), "even_pairs"]:
        spec = load_sweep(name)
        check_file(spec)
        for preset in spec.presets:
            if name != "pose":  # its expansion takes seconds; its cells name one task setting
                check_cells(spec, preset, expand_cells(spec, preset))


# ----------------------------------------------------------------------------------------
# damaged run directories and records: one line naming the file, exit 1
# (a file synthlab wrote no longer reads as one: an environment error, like a failing disk).
# A well-formed record holding a value synthlab never writes (NaN, text) stays bad input (2).


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One finished smoke run (alibi: `plot bias` draws it), trained once for the module."""
    out = tmp_path_factory.mktemp("run")
    code = main(
        [
            "train",
            "flipflop",
            "--pe",
            "alibi",
            "--preset",
            "smoke",
            "--set",
            "steps=2",
            "--out",
            str(out),
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run, json.loads((out / "results.jsonl").read_text().splitlines()[0])


def _tensors(edit):
    def damage(run: Path) -> None:
        from safetensors.torch import load_file, save_file

        d = load_file(run / "model.safetensors")
        edit(d)
        save_file(d, run / "model.safetensors")

    return damage


def _config(edit):
    def damage(run: Path) -> None:
        cfg = json.loads((run / "config.json").read_text())
        edit(cfg)
        (run / "config.json").write_text(json.dumps(cfg))

    return damage


def _first_key(d):
    return sorted(d)[0]


# name -> (damage, the file named, what the line says)
DAMAGED_RUNS = {
    "weights: random bytes": (
        lambda r: (r / "model.safetensors").write_bytes(os.urandom(3000)),
        "model.safetensors",
        "not a safetensors file",
    ),
    "weights: empty": (
        lambda r: (r / "model.safetensors").write_bytes(b""),
        "model.safetensors",
        "not a safetensors file",
    ),
    "weights: cut short": (
        lambda r: (r / "model.safetensors").write_bytes((r / "model.safetensors").read_bytes()[:2000]),
        "model.safetensors",
        "not a safetensors file",
    ),
    "weights: a pickle": (
        lambda r: (r / "model.safetensors").write_bytes(__import__("pickle").dumps({"w": [1.0] * 64})),
        "model.safetensors",
        "not a safetensors file",
    ),
    "weights: a tensor of the wrong shape": (
        _tensors(lambda d: d.update({_first_key(d): d[_first_key(d)].flatten()[:3].clone()})),
        "model.safetensors",
        "its tensors do not fit the run's model (size mismatch",
    ),
    "weights: a tensor missing": (
        _tensors(lambda d: d.pop(_first_key(d))),
        "model.safetensors",
        "its tensors do not fit the run's model (Missing key",
    ),
    "weights: a tensor too many": (
        _tensors(lambda d: d.update({"extra.weight": d[_first_key(d)].clone()})),
        "model.safetensors",
        "its tensors do not fit the run's model (Unexpected key",
    ),
    "config: random bytes": (
        lambda r: (r / "config.json").write_bytes(os.urandom(3000)),
        "config.json",
        "not a run's config.json",
    ),
    "config: a JSON list": (
        lambda r: (r / "config.json").write_text("[1, 2]"),
        "config.json",
        "not a run's config.json (a JSON list",
    ),
    "config: empty object": (lambda r: (r / "config.json").write_text("{}"), "config.json", "(no 'task')"),
    "config: task_params a list": (
        _config(lambda c: c.update(task_params=[1])),
        "config.json",
        "(task_params is list)",
    ),
    "config: model a string": (_config(lambda c: c.update(model="big")), "config.json", "(model is str)"),
    "config: max_len text": (_config(lambda c: c.update(max_len="64")), "config.json", "(max_len is str)"),
    "config: d_model text": (_config(lambda c: c["model"].update(d_model="x")), "config.json", "not a run's config"),
    "config: a task parameter out of range": (
        _config(lambda c: c["task_params"].update(n_pairs=-5)),
        "config.json",
        "its task does not build",
    ),
    "config: an unknown encoding": (_config(lambda c: c.update(pe="no-such-pe")), "config.json", "not a run's config"),
    "metrics.jsonl: random bytes": (
        lambda r: (r / "metrics.jsonl").write_bytes(os.urandom(3000)),
        "metrics.jsonl",
        "not JSON lines",
    ),
    "metrics.jsonl: a torn object": (
        lambda r: (r / "metrics.jsonl").write_text('{"step": 1, "loss"\n'),
        "metrics.jsonl",
        "not JSON lines",
    ),
}
RUN_COMMANDS = {
    "plot bias": lambda run: ["plot", "bias", run, "-o", "b.png"],
    "plot attention": lambda run: ["plot", "attention", run, "-o", "a.png"],
    "plot glitches": lambda run: ["plot", "glitches", run, "-n", "8", "-o", "g.png"],
}


@pytest.mark.parametrize("command", list(RUN_COMMANDS))
@pytest.mark.parametrize("damage", list(DAMAGED_RUNS))
def test_a_damaged_run_directory_is_named_in_one_line(ws, capsys, trained_run, damage, command):
    """Failed before: 20-46-line tracebacks (SafetensorError, RuntimeError, KeyError, TypeError)."""
    edit, name, needle = DAMAGED_RUNS[damage]
    run = ws / "run"
    shutil.copytree(trained_run[0], run)
    edit(run)
    before = listing(ws)
    code, err = run_cli(RUN_COMMANDS[command]("run"), capsys)
    assert (code, len(err)) == (1, 1), err
    assert err[0].startswith(f"synthlab plot: error: run/{name}: ") and needle in err[0], err[0]
    assert listing(ws) == before


@pytest.mark.parametrize("damage", list(DAMAGED_RUNS))
def test_load_run_raises_one_error_naming_the_damaged_file(ws, trained_run, damage):
    from synthlab.core.errors import DamagedFile
    from synthlab.run.runs import load_run

    edit, name, needle = DAMAGED_RUNS[damage]
    run = ws / "run"
    shutil.copytree(trained_run[0], run)
    edit(run)
    with pytest.raises(DamagedFile) as e:
        load_run(run)
    assert e.value.filename == str(run / name) and needle in e.value.strerror


DAMAGED_RECORDS = {
    "metrics a list": lambda r: r.update(metrics=[0.5, 0.9]),
    "a split's metrics a list": lambda r: r["metrics"].update(test=[0.5]),
    "a split's metrics text": lambda r: r["metrics"].update(test="good"),
    "by_length a list": lambda r: r.update(by_length=[1, 2]),
    "model a list": lambda r: r.update(model=[16]),
    "train text": lambda r: r.update(train="fast"),
    "task_params a list": lambda r: r.update(task_params=[8]),
    "pe a number": lambda r: r.update(pe=5),
    "task a list": lambda r: r.update(task=["flipflop"]),
    "status null": lambda r: r.update(status=None),
    "curve an object": lambda r: r.update(curve={"1": 0.5}),
}
RECORD_COMMANDS = {
    "grid": ["grid", "bad.jsonl", "-o", "g.png"],
    "export": ["export", "bad.jsonl", "-o", "e.csv"],
    "curves": ["curves", "bad.jsonl", "--out", "c"],
}


@pytest.mark.parametrize("command", list(RECORD_COMMANDS))
@pytest.mark.parametrize("damage", list(DAMAGED_RECORDS))
def test_a_damaged_record_is_named_in_one_line(ws, capsys, trained_run, damage, command):
    """Failed before: tracebacks from grid and export (AttributeError: 'list' object has no
    attribute 'items'), or a grid drawn from it; curves said it held no curves."""
    import copy

    r = copy.deepcopy(trained_run[1])
    DAMAGED_RECORDS[damage](r)
    (ws / "bad.jsonl").write_text(lines(trained_run[1], r))
    before = listing(ws)
    code, err = run_cli(RECORD_COMMANDS[command], capsys)
    assert (code, len(err)) == (1, 1), err
    assert err[0].startswith(f"synthlab {command}: error: bad.jsonl: line 2: ") and "a damaged file" in err[0], err[0]
    assert listing(ws) == before


# ----------------------------------------------------------------------------------------
# an environment error names its path even where the failing write named none


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as os.write / f.write raise it: no file name


def _full_journal(monkeypatch):
    from optuna.storages.journal import JournalFileBackend

    calls = []

    def append_logs(self, logs):
        calls.append(1)
        if len(calls) > 3:  # the study is made; the disk fills up while the cells run
            _enospc()
        return real(self, logs)

    real = JournalFileBackend.append_logs
    monkeypatch.setattr(JournalFileBackend, "append_logs", append_logs)


def _full_results(monkeypatch):
    monkeypatch.setattr(os, "write", _enospc)  # only records.append_record writes with os.write here


ENV_ERRORS = {
    "sweep: the journal's disk fills up": (_full_journal, "sw/study.journal: No space left on device"),
    "sweep: results.jsonl's disk fills up": (_full_results, "sw/results.jsonl: No space left on device"),
}


@pytest.mark.parametrize("case", list(ENV_ERRORS))
def test_an_environment_error_names_its_path(ws, capsys, monkeypatch, case):
    """Failed before: `synthlab sweep: error: No space left on device`, no path."""
    import synthlab.run.training

    monkeypatch.setattr(synthlab.run.training, "run", as_run(_Fake()))
    fill, line = ENV_ERRORS[case]
    fill(monkeypatch)
    code, err = run_cli(["sweep", "tiny.toml", "--out", "sw", "--quiet", "--workers", "1"], capsys)
    assert code == 1 and err == [f"synthlab sweep: error: {line}"], err


def test_train_names_the_run_directory_when_a_write_names_no_file(ws, capsys, monkeypatch):
    """Failed before: `synthlab train: error: No space left on device` (a logger's write)."""
    from synthlab.run import loggers

    monkeypatch.setattr(loggers, "open_logger", _enospc)
    code, err = run_cli(["train", "flipflop", *SMOKE, "--set", "steps=2", "--out", "runs", "--quiet"], capsys)
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("synthlab train: error: runs/") and err[0].endswith(": No space left on device"), err
    assert not [p for p in ws.glob("runs/*") if p.is_dir() and not p.name.startswith(".")]  # no half-made run


def test_grid_takes_the_directory_a_sweep_printed(ws, capsys):
    """Failed before: `synthlab grid DIR` (the "results in DIR" a sweep prints) was refused as
    a directory, while export and curves took it."""
    (ws / "sweepout").mkdir()
    shutil.copy(ws / "results.jsonl", ws / "sweepout" / "results.jsonl")
    code, err = run_cli(["grid", "sweepout"], capsys)
    assert code == 0, err
    assert (ws / "sweepout" / "grid-ood.png").is_file() and (ws / "sweepout" / "grid-ood.csv").is_file()
