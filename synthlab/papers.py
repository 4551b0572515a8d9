"""The papers beside us: a sweep file's published numbers and claims, judged on its results.

A sweep file may hold, as data, what its source paper reports (docs: README "The papers
beside us"):

    [[paper]]                      # one number the paper reports for one cell
    source = "CoPE Table 2"
    setting = "d 256, 4 layers, T 512, 10k steps"
    cell = { pe = "rope", split = "ood-sparse" }
    value = 20.3                   # in the grid's unit: percent, `show` (error or accuracy)
    spread = 2.9                   # optional: the +- the paper gives (std over its seeds)
    presets = ["paper"]            # optional (default ["paper"]): presets at the paper's scale

    [[claim]]                      # an ordering (or a threshold) the paper draws from them
    text = "CoPE makes fewer OOD read errors than RoPE"
    source = "CoPE Table 2"
    better = { pe = "cope", split = "ood-sparse" }
    worse = { pe = "rope", split = "ood-sparse" }
    presets = ["quick", "paper"]   # optional (default quick and paper): where it should show

A paper value is shown beside a grid cell only for results of a preset it lists, and only
where the cell's runs share every key its ``cell`` names (the claims table also shows it, with
its ``setting``, beside a claim judged at another preset); a key it does not
name does not matter to it, so a paper cell names every setting the paper fixes that a sweep
varies (``d_model = 256, n_layers = 4, n_heads = 4`` where a preset sweeps the model size, the
encoding's full spec ``cope:npos=258`` where a preset sets its parameters).

A threshold claim names one ``cell`` and ``at_least`` or ``at_most`` (percent) instead of
better / worse. A cell's keys are columns of :func:`synthlab.tables.tidy` (``pe``, ``split``,
``d_model``, ``n_heads``, ``dape_k``, ``pose_chunks``, ``length``, or a task parameter such as
``n_vars``); its value is the mean over the seeds of the matching finished runs, n the
number of distinct seeds (a seed run twice is one sample: :func:`synthlab.tables.per_seed`).

Verdicts (one per claim and preset found in the results), the rule stated once here:

- ``reproduced``: the claimed side is ahead by more than the spread, i.e. the two cells'
  mean +- sd intervals do not overlap (threshold: mean +- sd entirely on the claimed side),
  with at least 2 seeds per cell;
- ``not reproduced``: anything else (within the spread, the other way round, or a single
  seed, whose spread is unknown); the reason is given beside it;
- ``not comparable (other scale)``: the results come from a preset the claim does not name
  (e.g. the ``smoke`` preset, or ``quick`` for a claim about the paper's absolute numbers);
- ``not comparable (other settings)``: the runs come from a preset the claim names but depart
  from its table (``sweep flipflop --set task.n_pairs=256``, a ``train --set train.steps=100``
  run): a preset setting that is not a sweep axis differs (:func:`synthlab.tables.preset_differences`);
  the reason names it;
- ``not comparable (cell matches several settings)``: the runs a cell matches differ in more
  than the seed (say ``d_model = 256`` in the cell), or in the split (a cell names its split);
- ``not run``: runs of the cell are in the results but none finished. A claim whose cells
  match no run at all (an encoding the sweep did not train) is left out.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from synthlab.cells import with_dape_k
from synthlab.model import parse_pe
from synthlab.tables import SETTING_COLUMNS, SETTING_PREFIXES, in_percent, per_seed, same, tidy_with_presets

DEFAULT_CLAIM_PRESETS = ("quick", "paper")
DEFAULT_PAPER_PRESETS = ("paper",)
_PAPER_KEYS = ("source", "setting", "cell", "value", "spread", "presets")
_CLAIM_KEYS = ("text", "source", "better", "worse", "cell", "at_least", "at_most", "presets")

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
OTHER_SCALE = "not comparable (other scale)"
OTHER_SETTINGS = "not comparable (other settings)"
NOT_RUN = "not run"
AMBIGUOUS = "not comparable (cell matches several settings)"


@dataclasses.dataclass(frozen=True)
class PaperValue:
    """One number a paper reports for one cell (percent, in the grid's unit)."""

    source: str
    setting: str
    cell: dict[str, Any]
    value: float
    spread: float | None = None
    presets: tuple[str, ...] = DEFAULT_PAPER_PRESETS

    def label(self) -> str:
        return f"{self.value:g}" + (f" ± {self.spread:g}" if self.spread is not None else "")


@dataclasses.dataclass(frozen=True)
class Claim:
    """An ordering (``better`` ahead of ``worse``) or a threshold on one ``cell``."""

    text: str
    source: str
    better: dict[str, Any] | None = None
    worse: dict[str, Any] | None = None
    cell: dict[str, Any] | None = None
    at_least: float | None = None
    at_most: float | None = None
    presets: tuple[str, ...] = DEFAULT_CLAIM_PRESETS

    def cells(self) -> list[dict[str, Any]]:
        return [c for c in (self.better, self.worse, self.cell) if c is not None]


@dataclasses.dataclass(frozen=True)
class CellStat:
    """A cell measured over seeds: mean, sd (NaN for one seed), n seeds (percent)."""

    mean: float
    sd: float
    n: int
    varies: tuple[str, ...] = ()  # settings (besides the seed) in which the matched runs differ
    present: bool = True  # some run (finished or not) matches the cell's settings
    failed: int = 0  # matched runs that did not finish (not in n: a claim states them beside it)

    def label(self) -> str:
        if self.n == 0:
            return f"- ({self.failed} failed)" if self.failed else "-"
        sd = f" ± {self.sd:.1f}" if self.n > 1 else ""
        return f"{self.mean:.1f}{sd} (n {self.n}" + (f", {self.failed} failed)" if self.failed else ")")


# --------------------------------------------------------------------------------------------
# parsing (called by the sweep-file parser; errors name the file and the entry)
# --------------------------------------------------------------------------------------------

def _cell(where: str, key: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not v:
        raise ValueError(f"{where}: {key}: expected a non-empty inline table of cell keys, e.g. "
                         "{ pe = \"rope\", split = \"test\" }")
    for k, x in v.items():
        if isinstance(x, (dict, list)) or isinstance(x, bool):
            raise ValueError(f"{where}: {key}.{k}: expected a string or a number, got {x!r}")
    return dict(v)


def _number(where: str, key: str, v: Any, lo: float = -math.inf, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{where}: {key}: expected a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def _text(where: str, key: str, v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{where}: {key}: expected a non-empty string, got {v!r}")
    return v


def _presets(where: str, key: str, v: Any, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
    if v is None:
        return default
    if not isinstance(v, list) or not v or any(p not in allowed for p in v):
        raise ValueError(f"{where}: {key}: expected a list of presets from {', '.join(allowed)}, got {v!r}")
    return tuple(v)


def _entries(where: str, name: str, raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise ValueError(f"{where}: [[{name}]] must be an array of tables")
    return raw


def _known_keys(where: str, sec: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: {sec}: unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})")


def parse_papers(where: str, raw: Any, allowed_presets: tuple[str, ...]) -> list[PaperValue]:
    out = []
    for i, e in enumerate(_entries(where, "paper", raw)):
        sec = f"paper[{i}]"
        _known_keys(where, sec, e, _PAPER_KEYS)
        for req in ("source", "cell", "value"):
            if req not in e:
                raise ValueError(f"{where}: {sec}: {req!r} is required")
        out.append(PaperValue(
            source=_text(where, f"{sec}.source", e["source"]),
            setting=_text(where, f"{sec}.setting", e["setting"]) if "setting" in e else "",
            cell=_cell(where, f"{sec}.cell", e["cell"]),
            value=_number(where, f"{sec}.value", e["value"], 0.0, 100.0),
            spread=_number(where, f"{sec}.spread", e["spread"], 0.0, 100.0) if "spread" in e else None,
            presets=_presets(where, f"{sec}.presets", e.get("presets"), allowed_presets, DEFAULT_PAPER_PRESETS),
        ))
        if "split" not in out[-1].cell:  # a paper reports a number on one evaluation set
            raise ValueError(f"{where}: {sec}.cell: name the split the number is for (split = \"test\", "
                             "\"ood-sparse\", ...): without one it would stand beside every split")
    return out


def parse_claims(where: str, raw: Any, allowed_presets: tuple[str, ...]) -> list[Claim]:
    out = []
    for i, e in enumerate(_entries(where, "claim", raw)):
        sec = f"claim[{i}]"
        _known_keys(where, sec, e, _CLAIM_KEYS)
        ordering = "better" in e or "worse" in e
        threshold = "cell" in e
        if ordering == threshold:
            raise ValueError(f"{where}: {sec}: give either better and worse (an ordering) or cell with "
                             "at_least / at_most (a threshold)")
        if ordering and not ("better" in e and "worse" in e):
            raise ValueError(f"{where}: {sec}: an ordering needs both 'better' and 'worse'")
        if threshold and ("at_least" in e) == ("at_most" in e):
            raise ValueError(f"{where}: {sec}: a threshold claim needs exactly one of at_least, at_most")
        if ordering and ("at_least" in e or "at_most" in e):
            raise ValueError(f"{where}: {sec}: at_least / at_most go with 'cell', not with an ordering")
        out.append(Claim(
            text=_text(where, f"{sec}.text", e.get("text")),
            source=_text(where, f"{sec}.source", e.get("source")),
            better=_cell(where, f"{sec}.better", e["better"]) if ordering else None,
            worse=_cell(where, f"{sec}.worse", e["worse"]) if ordering else None,
            cell=_cell(where, f"{sec}.cell", e["cell"]) if threshold else None,
            at_least=_number(where, f"{sec}.at_least", e["at_least"], 0.0, 100.0) if "at_least" in e else None,
            at_most=_number(where, f"{sec}.at_most", e["at_most"], 0.0, 100.0) if "at_most" in e else None,
            presets=_presets(where, f"{sec}.presets", e.get("presets"), allowed_presets, DEFAULT_CLAIM_PRESETS),
        ))
    return out


# --------------------------------------------------------------------------------------------
# measuring cells and judging claims
# --------------------------------------------------------------------------------------------


def _column(table, key: str) -> str | None:
    if key in table.columns:
        return key
    return f"task.{key}" if f"task.{key}" in table.columns else None


def canonical(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell as records name it: ``pe = "kerple+dape", dape_k = 3`` -> ``pe =
    "kerple+dape:k=3"`` (the sweep's dape_k axis writes the kernel into the encoding)."""
    if "pe" not in cell:
        return cell
    cell = dict(cell)
    try:  # the record's own spelling: "nope+dape:k=1" is recorded as "nope+dape" (k = 1 is the default)
        pe = with_dape_k(str(cell["pe"]), int(cell["dape_k"])) if "dape_k" in cell else str(cell["pe"])
        cell["pe"] = parse_pe(pe).name
        cell.pop("dape_k", None)
    except ValueError:  # an encoding synthlab does not know, or a kernel given twice: matches no run
        cell["pe"] = str(cell["pe"])
    return cell


def measure(table, cell: dict[str, Any], metric: str, show: str) -> CellStat:
    """Mean, sd and n over the finished runs (one value per seed) that match ``cell``, in the
    grid's unit (percent accuracy, or percent error for show = error). A cell without a
    ``length`` reads the split's aggregate rows; one with a ``length`` reads that length's
    rows, whose value is ``token_acc`` when the metric has no per-length value (as the grids);
    ``failed`` counts the matching runs that did not finish."""
    cell = canonical(cell)
    runs = table
    for k, v in cell.items():  # any run of the cell, finished or not (a failed run has no split)
        if k in ("split", "length"):
            continue
        col = _column(runs, k)
        if col is None:
            return CellStat(math.nan, math.nan, 0, present=False)
        runs = runs[runs[col].map(lambda a, v=v: same(a, v))]
    if runs.empty:
        return CellStat(math.nan, math.nan, 0, present=False)
    ok = runs[runs["status"] == "ok"]
    failed = int(runs.loc[runs["status"] != "ok", "record"].nunique())
    if "length" not in cell:
        ok = ok[ok["length"].isna()]
    for k in ("split", "length"):
        if k in cell and k in ok.columns:
            ok = ok[ok[k].map(lambda a, v=cell[k]: same(a, v))]
    if "split" not in cell and ok["split"].nunique(dropna=True) > 1:  # never a mean over test and OOD
        return CellStat(math.nan, math.nan, 0, varies=("split",), failed=failed)
    if "length" in cell and (metric not in ok.columns or ok[metric].isna().all()):
        metric = "token_acc"
    if metric not in ok.columns or ok.empty:
        return CellStat(math.nan, math.nan, 0, failed=failed)
    # the runs a cell pools must agree on everything but the seed
    settings = [c for c in ok.columns if c in SETTING_COLUMNS or c.startswith(SETTING_PREFIXES)]
    per_run_settings = ok.drop_duplicates("record")
    varies = tuple(c.removeprefix("task.") for c in settings if per_run_settings[c].nunique(dropna=True) > 1)
    if varies:
        return CellStat(math.nan, math.nan, 0, varies=varies, failed=failed)
    per_run = per_seed(ok, [], metric)[metric].astype(float)  # one value per seed: n counts seeds
    vals = in_percent(per_run, metric, show).to_numpy(dtype=float)
    if not len(vals):
        return CellStat(math.nan, math.nan, 0, failed=failed)
    sd = float(vals.std(ddof=1)) if len(vals) > 1 else math.nan
    return CellStat(float(vals.mean()), sd, len(vals), failed=failed)


def _goodness(x: float, show: str) -> float:
    """Higher is better: accuracy as is, error negated."""
    return -x if show == "error" else x


def judge(claim: Claim, stats: list[CellStat], show: str, preset: str, departs: str = "") -> tuple[str, str]:
    """(verdict, reason) of one claim from its cells' stats (better, worse) or (cell,), for runs
    of ``preset`` that depart from its table by ``departs`` (tables.preset_differences, joined)."""
    preset = str(preset)
    if preset not in claim.presets:
        return OTHER_SCALE, f"results at preset {preset!r}; the claim is for {', '.join(claim.presets)}"
    if departs:
        return OTHER_SETTINGS, f"the runs depart from the {preset} preset: {departs}"
    for s in stats:
        if s.varies:
            return AMBIGUOUS, f"a cell's runs differ in {', '.join(s.varies)}: name it in the claim"
    if any(s.n == 0 for s in stats):
        return NOT_RUN, "no finished run for a cell"
    if any(s.n < 2 for s in stats):
        return NOT_REPRODUCED, "one seed: the spread is unknown"
    if claim.cell is not None:
        (s,) = stats
        bound = claim.at_least if claim.at_least is not None else claim.at_most
        lo, hi = s.mean - s.sd, s.mean + s.sd
        if claim.at_least is not None:
            ok, against = lo >= bound, hi < bound
        else:
            ok, against = hi <= bound, lo > bound
        if ok:
            return REPRODUCED, "mean ± sd on the claimed side"
        return NOT_REPRODUCED, "beyond the spread on the other side" if against else "within the spread of the bound"
    b, w = stats
    gap = _goodness(b.mean, show) - _goodness(w.mean, show)
    margin = b.sd + w.sd
    if gap > margin:
        return REPRODUCED, f"ahead by {gap:.1f} > sd {b.sd:.1f} + {w.sd:.1f}"
    if -gap > margin:
        return NOT_REPRODUCED, f"the other way round, by {-gap:.1f} > sd {b.sd:.1f} + {w.sd:.1f}"
    return NOT_REPRODUCED, f"within the spread ({gap:+.1f} vs sd {b.sd:.1f} + {w.sd:.1f})"


@dataclasses.dataclass
class Verdict:
    claim: Claim
    preset: str
    stats: list[CellStat]
    paper: list[PaperValue | None]
    verdict: str
    reason: str
    departs: str = ""  # how the runs depart from the preset's table (tables.preset_differences), if they do

    def preset_label(self) -> str:
        """The preset column: its name, and how the runs depart from it (runs of one preset
        that depart differently are judged apart, so their rows must not read alike)."""
        return f"{self.preset} (departs: {self.departs})" if self.departs else self.preset


def _cell_label(cell: dict[str, Any]) -> str:
    return " ".join(str(v) if k in ("pe", "split", "task") else f"{k}={v}" for k, v in cell.items())


def paper_value_for(papers: list[PaperValue], cell: dict[str, Any], preset: str) -> PaperValue | None:
    """The paper's number for a claim's ``cell`` judged on results of ``preset``: the first
    paper value that lists the preset and whose cell's every key the claim's cell names, with
    the same value (the rule of the grids, :meth:`synthlab.grids.Grid.mark_papers`); failing
    that, for the claims table only, the first whose cell holds every key the claim names (the
    paper's number at its own scale, its ``setting`` printed beside it, the verdict then
    "not comparable (other scale)" or the ordering's, as the claim's presets say)."""
    want = canonical(cell)
    for p in papers:
        if preset not in p.presets:
            continue
        if all(k in want and same(want[k], v) for k, v in canonical(p.cell).items()):
            return p
    # a claim judged at another scale (its verdict says so) still shows where it comes from: the
    # paper value whose cell has every key the claim names, with the paper's setting beside it
    for p in papers:
        have = canonical(p.cell)
        if all(k in have and same(v, have[k]) for k, v in want.items()):
            return p
    return None


def verdicts(records: list[dict[str, Any]], spec) -> list[Verdict]:
    """Every claim of the sweep file, judged per preset found among the records."""
    claims = getattr(spec, "claims", [])
    if not claims or not records:
        return []
    # a run that failed before the trainer made its record has no preset: its study's (tidy_with_presets),
    # so that a cell whose every run failed that way is "not run", not left out of the table
    # runs that depart from their preset's table (tables.preset_differences) are judged apart
    table = tidy_with_presets(records, spec)
    ok = table[table["status"] == "ok"]
    groups = list(dict.fromkeys(zip(map(str, ok["preset"]), ok["departs"]))) or [("?", "")]
    out = []
    for preset, departs in groups:
        rows = table[(table["preset"].map(str) == preset) & (table["departs"] == departs)]
        for c in claims:
            stats = [measure(rows, cell, spec.metric, spec.show) for cell in c.cells()]
            if not all(s.present for s in stats):
                continue  # not part of these results (e.g. `--pe cope,rope` and a claim about NoPE)
            verdict, reason = judge(c, stats, spec.show, preset, departs)
            out.append(Verdict(c, preset, stats, [paper_value_for(spec.papers, cell, preset) for cell in c.cells()],
                               verdict, reason, departs))
    return out


def markdown(vs: list[Verdict], show: str) -> str:
    """The claims table: claim, paper, synthlab (mean ± sd, n), verdict."""
    if not vs:
        return ""
    head = (f"**The papers beside us** ({show} %, synthlab mean ± sd over n seeds; reproduced = "
            "ahead beyond the spread, mean ± sd intervals apart, n >= 2)\n\n")
    lines = ["| claim | source | preset | paper | synthlab | verdict |", "|---|---|---|---|---|---|"]
    for v in vs:
        cells = v.claim.cells()
        if v.claim.cell is not None:
            bound = (f">= {v.claim.at_least:g}" if v.claim.at_least is not None else f"<= {v.claim.at_most:g}")
            ours = f"{_cell_label(cells[0])} {v.stats[0].label()} (claim {bound})"
        else:
            ours = " vs ".join(f"{_cell_label(c)} {s.label()}" for c, s in zip(cells, v.stats))
        paper = " vs ".join(f"{_cell_label(c)} {p.label()}" for c, p in zip(cells, v.paper) if p is not None) or "-"
        settings = "; ".join(dict.fromkeys(p.setting for p in v.paper if p is not None and p.setting))
        if settings:
            paper += f" ({settings})"
        lines.append(f"| {v.claim.text} | {v.claim.source} | {v.preset_label()} | {paper} | {ours} | "
                     f"**{v.verdict}**: {v.reason} |")
    return head + "\n".join(lines) + "\n"


def rows(vs: list[Verdict]) -> list[dict[str, Any]]:
    """The claims table as flat rows (CSV)."""
    out = []
    for v in vs:
        row: dict[str, Any] = {"claim": v.claim.text, "source": v.claim.source, "preset": v.preset,
                               "departs": v.departs, "verdict": v.verdict, "reason": v.reason}
        for role, cell, s, p in zip(("better", "worse") if v.claim.cell is None else ("cell",), v.claim.cells(),
                                    v.stats, v.paper):
            row.update({f"{role}": _cell_label(cell), f"{role}_mean": s.mean, f"{role}_sd": s.sd, f"{role}_n": s.n,
                        f"{role}_failed": s.failed,
                        f"{role}_paper": p.value if p else math.nan,
                        f"{role}_paper_spread": p.spread if p and p.spread is not None else math.nan})
        out.append(row)
    return out


def save(vs: list[Verdict], show: str, out_dir, stem: str = "papers") -> dict[str, str]:
    """``out_dir/<stem>.md`` and ``.csv`` (a sweep: grids/papers.md, grids/papers.csv), both
    or neither (synthlab.outputs: written beside, renamed into place at the end)."""
    import pandas as pd
    from pathlib import Path

    from synthlab.outputs import csv_writer, write_files

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(vs, show)
    return write_files({"md": (out_dir / f"{stem}.md", lambda path: path.write_text(text, encoding="utf-8")),
                        "csv": (out_dir / f"{stem}.csv", csv_writer(pd.DataFrame(rows(vs))))}, "claims table")
