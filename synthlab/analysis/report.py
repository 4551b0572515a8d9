"""The results report (RESULTS.md), generated from the reference results committed as data.

Each folder ``results/<sweep>-<preset>/`` holds a sweep's records (``results.jsonl``, the
records alone) and ``run.json``: the command that made them and, for ``--until-decided``, its
looks. The report gives per folder the machine(s) and code the runs came from, the sweep
file's grids (as tables) and its claims judged by :mod:`synthlab.analysis.claims`; nothing in it is
typed by hand. ``synthlab report`` writes it, ``synthlab report --check`` (and a test) fails
when it is stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from synthlab.analysis import claims, inference
from synthlab.analysis.grids import load_results, sweep_grids, sweep_spec_for
from synthlab.run import machine

RUN_FILE = "run.json"
_RUN_KEYS = ("command", "looks", "reached")


def result_dirs(root: Path) -> list[Path]:
    """The folders under ``root`` that hold a results.jsonl, sorted by name."""
    if not root.is_dir():
        raise ValueError(f"{str(root)!r}: not a directory of results (results/<sweep>-<preset>/results.jsonl)")
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "results.jsonl").is_file())


def read_run(folder: Path) -> dict[str, Any]:
    """``run.json`` of a results folder ({} when there is none), checked."""
    path = folder / RUN_FILE
    if not path.is_file():
        return {}
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON object ({e})") from None
    if not isinstance(run, dict) or set(run) - set(_RUN_KEYS):
        raise ValueError(f"{path}: expected an object with keys from {', '.join(_RUN_KEYS)}")
    looks = run.get("looks")
    if looks is not None and (
        not isinstance(looks, list)
        or not all(isinstance(n, int) for n in looks)
        or not isinstance(run.get("reached"), int)
    ):
        raise ValueError(f"{path}: looks must be a list of seed counts and reached the seed count run")
    return run


def _seeds(records: list[dict[str, Any]]) -> str:
    seeds = sorted({r["train"]["seed"] for r in records if isinstance((r.get("train") or {}).get("seed"), int)})
    if not seeds:
        return "no seed recorded"
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return "seeds " + ", ".join(map(str, seeds))


def _provenance(records: list[dict[str, Any]]) -> list[str]:
    """One line per (machine, threads) the runs came from, with their code versions."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in records:
        threads = (r.get("train") or {}).get("threads")
        key = (machine.label(r.get("machine")), "?" if threads is None else str(threads))
        groups.setdefault(key, []).append(str(r.get("git") or "?"))
    return [
        f"- {where}, {threads} thread(s) a run, synthlab {', '.join(sorted(set(gits)))}: {len(gits)} runs"
        for (where, threads), gits in sorted(groups.items())
    ]


def _judged(folder: Path) -> tuple[list[dict[str, Any]], Any, dict[str, Any], list[claims.Verdict]]:
    """A results folder's records, sweep file, run.json and claims judged as its run judged them."""
    records = load_results(folder / "results.jsonl")
    spec = sweep_spec_for(records)
    if spec is None:
        raise ValueError(f"{folder}: no installed sweep file covers these records' tasks")
    run = read_run(folder)
    if run.get("looks"):
        vs = claims.sequential_verdicts(records, spec, run["looks"], run["reached"])
    else:
        vs = claims.verdicts(records, spec)
    return records, spec, run, vs


def summary(root: str | Path) -> str:
    """Every tested claim of every results folder in one table: folder, claim, what it is, the
    difference with its interval, n, Holm p and the verdict (the folders' sections give the rest)."""
    root = Path(root)
    lines = [
        "| results | claim | kind | difference [95 % CI] | n | p (Holm) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for folder in result_dirs(root):
        _, _, _, vs = _judged(folder)
        for v in vs:
            c = v.comparison
            if c is None:
                continue
            n = str(c.n[0]) if c.test != inference.UNPAIRED else f"{c.n[0]} / {c.n[1]}"
            lines.append(
                f"| `{folder.name}` | {v.claim.text} | {claims.CLAIM_KINDS[v.claim.kind]} | "
                f"{c.estimate:+.1f} {c.interval()} | {n} | {claims.p_text(v.p_adjusted)} | **{v.verdict}** |"
            )
    if len(lines) == 2:
        return "No claim is tested on the committed results.\n"
    return "\n".join(lines) + "\n"


def section(folder: Path, root: Path, heading: bool = True) -> str:
    """One results folder's part of the report (``heading``: with its ## line)."""
    records, spec, run, vs = _judged(folder)
    presets = sorted({str(r.get("preset")) for r in records if r.get("preset")})
    ok = [r for r in records if r.get("status") == "ok"]
    rel = folder.relative_to(root.parent) if folder.is_relative_to(root.parent) else folder
    lines = [f"## {spec.name}, {' / '.join(presets) or '?'} preset (`{rel.as_posix()}/`)", ""] if heading else []
    if run.get("command"):
        lines += [f"`{run['command']}`", ""]
    lines += [f"{len(records)} runs ({len(records) - len(ok)} failed), {_seeds(records)}; where they ran:", ""]
    lines += _provenance(records) + [""]
    for g in sweep_grids(records, spec, None):
        lines += [g.markdown().rstrip(), ""]
    if vs:
        lines += [claims.markdown(vs, spec.show).rstrip(), ""]
    else:
        lines += ["No claim of the sweep file is judged on these runs.", ""]
    return "\n".join(lines)


def report(root: str | Path) -> str:
    """The whole report for the results folders under ``root``."""
    root = Path(root)
    head = [
        "# Reference results",
        "",
        f"Generated by `synthlab report {root.name} -o RESULTS.md` from the records committed under "
        f"`{root.name}/` (one folder per sweep and preset); do not edit it by hand: "
        "`synthlab report --check` and the test suite fail when it is stale. How a claim is decided: "
        "docs/results.md. A run's metrics repeat exactly only on the CPU family and thread count it "
        "ran on (the machine lines below).",
        "",
    ]
    folders = result_dirs(root)
    if not folders:
        head += ["No results committed yet.", ""]
    else:
        head += ["## Every claim at a glance", "", summary(root)]
    return "\n".join(head) + "\n" + "\n".join(section(f, root) for f in folders)


# the README shows the main command's results: a block between these lines, filled from a results folder
README_BEGIN = "<!-- generated by `synthlab report`: {folder} -->"
README_END = "<!-- end of generated block -->"
SUMMARY_BLOCK = "claims"  # the block name that takes every folder's claims at a glance (summary())
_BLOCK = re.compile(r"<!-- generated by `synthlab report`: ([\w.-]+) -->\n.*?<!-- end of generated block -->", re.S)


def fill_readme(text: str, root: str | Path) -> str:
    """``text`` with every generated block replaced by its results folder's section (no heading)."""
    root = Path(root)

    def block(m: re.Match) -> str:
        if m.group(1) == SUMMARY_BLOCK:
            return f"{README_BEGIN.format(folder=SUMMARY_BLOCK)}\n{summary(root)}{README_END}"
        folder = root / m.group(1)
        if not (folder / "results.jsonl").is_file():
            raise ValueError(f"README names results folder {m.group(1)!r}, which {root}/ does not hold")
        return f"{README_BEGIN.format(folder=m.group(1))}\n{section(folder, root, heading=False)}{README_END}"

    return _BLOCK.sub(block, text)
