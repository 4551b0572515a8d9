"""A run's files: its destinations checked before anything is built, its directory
(``OUT/<run_id>/``: config.json, metrics.jsonl, model.safetensors) made, finished, or removed
whole when the run is interrupted or the disk refuses a write, and its record appended.

A run directory is never left half made: an OSError (disk full, read-only file system) or
Ctrl-C while it is written removes it, and no record is appended for it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from synthlab.core.errors import check_output_dir, check_output_file
from synthlab.run.records import append_record, to_json


def git_hash() -> str | None:
    """Short hash of the checkout synthlab runs from; for an installed wheel, the commit it was
    built from (setuptools-scm's version file); else None. A wheel installed into a venv that
    lies inside some other repository does not take that repository's hash: the checkout must
    be the one that holds this package."""
    package = Path(__file__).resolve().parents[1]  # synthlab/ (this module lies in synthlab/run/)
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--short", "HEAD"],
            cwd=package,
            capture_output=True,
            text=True,
            timeout=5,
        )
        top, _, short = out.stdout.strip().partition("\n")
        if out.returncode == 0 and short and Path(top).resolve() == package.parent:
            return short
    except (OSError, subprocess.SubprocessError):
        pass
    return built_from()


def built_from() -> str | None:
    """The commit an installed synthlab was built from: setuptools-scm's ``commit_id``
    (``g`` + hash) in synthlab/_version.py, or the ``+g<hash>`` of its version; None when
    neither says (a source tree never installed, an archive)."""
    try:
        from synthlab import _version
    except ImportError:
        return None
    commit = getattr(_version, "commit_id", None)
    if isinstance(commit, str) and re.fullmatch(r"g?[0-9a-f]{7,40}", commit):
        return commit.removeprefix("g")[:7]
    m = re.search(r"\+g([0-9a-f]{7,40})", str(getattr(_version, "version", "")))
    return m.group(1)[:7] if m else None


def make_run_id(task: str, pe: str, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", pe).strip("-")
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{task}-{slug}-s{seed}-{uuid.uuid4().hex[:6]}"


def check_destinations(out: str | os.PathLike | None, results: str | os.PathLike | None) -> None:
    """``out`` can hold run directories and the results file can be appended to: ValueError
    for a file where a directory goes (or the reverse), OSError for a read-only or forbidden
    place. Creates nothing."""
    if out is not None:
        check_output_dir(out, "--out")
    if results is not None:
        check_output_file(results, "--results")
    elif out is not None:
        check_output_file(Path(out) / "results.jsonl", "--out")


def remove(run_dir: Path | None, created: list[Path] | tuple = ()) -> None:
    """Remove a run directory, then each parent :func:`make` created (``created``, outermost
    first) while it is empty: another run's files are never touched."""
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
    for d in reversed(created):
        try:
            os.rmdir(d)
        except OSError:
            break


OWNER = ".owner"  # in a run directory being made: the process making it (removed when it is finished)


def make(run_dir: Path, config: dict[str, Any]) -> list[Path]:
    """``run_dir`` with its config.json, or nothing (a failure removes what was made). Returns
    the parents it created, outermost first, for :func:`remove`. The directory holds
    :data:`OWNER` (this process) until :func:`finish`: a run killed outright (SIGKILL, the OOM
    killer) leaves it behind, and :func:`clean_half_made` knows the directory for a dead one's."""
    from synthlab.core.processes import worker_id

    created: list[Path] = []
    for parent in run_dir.parents:
        if os.path.lexists(parent):
            break
        created.insert(0, parent)
    run_dir.mkdir(parents=True, exist_ok=False)
    try:
        (run_dir / OWNER).write_text(json.dumps(worker_id()) + "\n")
        (run_dir / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    except BaseException:
        remove(run_dir, created)
        raise
    return created


def _save(save: Callable[..., Any], model: Any, path: Path) -> None:
    """``save(model, path)``; safetensors reports a failed write as SafetensorError ("... (os
    error 28)"): raised as the OSError it is."""
    try:
        save(model, str(path))
    except OSError:
        raise
    except Exception as e:
        code = re.search(r"os error (\d+)", str(e))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from e


def write(
    run_dir: Path | None, lines: list[dict[str, Any]], model: Any = None, save: Callable[..., Any] | None = None
) -> None:
    """metrics.jsonl and the weights (``save(model, path)``) into the run directory."""
    if run_dir is None:
        return
    with open(run_dir / "metrics.jsonl", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(to_json(line) + "\n")
    if model is not None and save is not None:
        _save(save, model, run_dir / "model.safetensors")


def seal(run_dir: Path | None) -> None:
    """The run has its record: its directory is no longer half made."""
    if run_dir is not None:
        (run_dir / OWNER).unlink(missing_ok=True)


def finish(
    run_dir: Path | None,
    results_path: Path | None,
    record: dict[str, Any],
    lines: list[dict[str, Any]],
    model: Any = None,
    save: Callable[..., Any] | None = None,
    created: list[Path] | tuple = (),
) -> None:
    """:func:`write`, then the record, then :func:`seal`. A failure before the record is
    appended (a full disk, Ctrl-C) removes what :func:`make` made."""
    try:
        write(run_dir, lines, model, save)
        if results_path is not None:
            append_record(results_path, record)
    except BaseException:
        remove(run_dir, created)
        raise
    seal(run_dir)


def clean_half_made(out: str | os.PathLike, results_path: Path | None) -> list[Path]:
    """Remove the run directories under ``out`` that a run killed outright left half made
    (:data:`OWNER` names a process of this machine that is gone, and no record names the run);
    returns them. A directory whose process still runs (another run on the same OUT), or runs
    on another machine, is left alone; one whose record was appended just before the kill keeps
    its files (only the marker goes)."""
    from synthlab.core.processes import pid_alive, same_pid_space, worker_id
    from synthlab.run.records import scan_records

    out = Path(out)
    if not out.is_dir():
        return []
    me, dead = worker_id(), []
    for marker in out.glob(f"*/{OWNER}"):
        try:
            w = json.loads(marker.read_text())
            pid = int(w["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: not ours to judge
        if same_pid_space(w, me) and not pid_alive(pid, w.get("start")):
            dead.append(marker.parent)
    if not dead:
        return []
    recorded = set()
    if results_path is not None and Path(results_path).is_file():
        recorded = {r.get("run_id") for r in scan_records(results_path)[0]}
    removed = []
    for d in dead:
        if d.name in recorded:
            (d / OWNER).unlink(missing_ok=True)
        else:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
