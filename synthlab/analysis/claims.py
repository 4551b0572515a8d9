"""The papers' claims judged on a sweep's results: cells measured per seed, then a calibrated test.

One verdict per claim and preset found in the results: supported, contradicted or
inconclusive by the test of :mod:`synthlab.analysis.inference`; otherwise not comparable
(other scale, other settings, a cell matching several settings) or not run.
Rule and verdicts: docs/results.md, "How a claim is decided".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from synthlab.analysis import inference
from synthlab.analysis.tables import (
    SETTING_COLUMNS,
    SETTING_PREFIXES,
    SMOKE_NOTE,
    in_percent,
    per_seed,
    same,
    tidy_with_presets,
)
from synthlab.plan.papers import CLAIM_KINDS, Claim, PaperValue, canonical

SUPPORTED = inference.SUPPORTED
CONTRADICTED = inference.CONTRADICTED
INCONCLUSIVE = inference.INCONCLUSIVE
OTHER_SCALE = "not comparable (other scale)"
OTHER_SETTINGS = "not comparable (other settings)"
NOT_RUN = "not run"
AMBIGUOUS = "not comparable (cell matches several settings)"


@dataclasses.dataclass(frozen=True)
class CellStat:
    """A cell measured over seeds: mean, sd (NaN for one seed), n seeds (percent), and the value
    of each seed (``values``: seed label -> percent), which the tests pair by seed."""

    mean: float
    sd: float
    n: int
    varies: tuple[str, ...] = ()  # settings (besides the seed) in which the matched runs differ
    present: bool = True  # some run (finished or not) matches the cell's settings
    failed: int = 0  # matched runs that did not finish (not in n: a claim states them beside it)
    values: dict[str, float] = dataclasses.field(default_factory=dict)

    def label(self) -> str:
        if self.n == 0:
            return f"- ({self.failed} failed)" if self.failed else "-"
        sd = f" ± {self.sd:.1f}" if self.n > 1 else ""
        return f"{self.mean:.1f}{sd} (n {self.n}" + (f", {self.failed} failed)" if self.failed else ")")


def _column(table, key: str) -> str | None:
    if key in table.columns:
        return key
    return f"task.{key}" if f"task.{key}" in table.columns else None


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
    seeds = per_seed(ok, [], metric)  # one value per seed: n counts seeds
    vals = in_percent(seeds[metric].astype(float), metric, show).to_numpy(dtype=float)
    if not len(vals):
        return CellStat(math.nan, math.nan, 0, failed=failed)
    sd = float(vals.std(ddof=1)) if len(vals) > 1 else math.nan
    return CellStat(
        float(vals.mean()),
        sd,
        len(vals),
        failed=failed,
        values=dict(zip(map(str, seeds["seed_unit"]), map(float, vals))),
    )


def _goodness(x: float, show: str) -> float:
    """Higher is better: accuracy as is, error negated."""
    return -x if show == "error" else x


def compare(claim: Claim, stats: list[CellStat], show: str, interval: bool = True) -> inference.Comparison:
    """The claim's test on its cells' per-seed values (synthlab.analysis.inference's rule)."""
    if claim.cell is not None:
        (s,) = stats
        at_least = claim.at_least is not None
        bound = claim.at_least if at_least else claim.at_most
        assert bound is not None, "a one-cell claim has at_least or at_most"
        return inference.one_arm(list(s.values.values()), bound, at_least=at_least, interval=interval)
    b, w = stats
    return inference.compare(
        {k: _goodness(v, show) for k, v in b.values.items()},
        {k: _goodness(v, show) for k, v in w.values.items()},
        interval=interval,
    )


def not_judged(claim: Claim, stats: list[CellStat], preset: str, departs: str = "") -> tuple[str, str] | None:
    """(verdict, reason) when the claim cannot be tested on these runs, else None."""
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
    return None


@dataclasses.dataclass
class Verdict:
    claim: Claim
    preset: str
    stats: list[CellStat]
    paper: list[PaperValue | None]
    verdict: str
    reason: str
    departs: str = ""  # how the runs depart from the preset's table (tables.preset_differences), if they do
    comparison: inference.Comparison | None = None  # the test, where the claim could be tested
    p_adjusted: float = math.nan  # Holm over the claims tested together
    family: int = 0  # how many claims that adjustment is over
    seeds_needed: int | None = None  # inconclusive: about this many seeds per arm would settle it
    command: str = ""  # the command that adds them
    alpha: float = inference.ALPHA  # the level the adjusted p is held to (a look's share, --until-decided)
    look: str = ""  # --until-decided: the look that decided it ("look 2 of 4, 10 seeds"), or the last

    def preset_label(self) -> str:
        """The preset column: its name, and how the runs depart from it (runs of one preset
        that depart differently are judged apart, so their rows must not read alike)."""
        return f"{self.preset} (departs: {self.departs})" if self.departs else self.preset

    def kind_label(self) -> str:
        """What the claim is, and whether it is judged at the paper's own scale."""
        label = CLAIM_KINDS[self.claim.kind]
        if self.claim.kind != "prediction" and self.preset != "paper":
            label += f", at {self.preset} scale"
        return label


def _cell_label(cell: dict[str, Any]) -> str:
    return " ".join(str(v) if k in ("pe", "split", "task") else f"{k}={v}" for k, v in cell.items())


def paper_value_for(papers: list[PaperValue], cell: dict[str, Any], preset: str) -> PaperValue | None:
    """The paper's number for a claim's ``cell`` judged on results of ``preset``: the first
    paper value that lists the preset and whose cell's every key the claim's cell names, with
    the same value (the rule of the grids, :meth:`synthlab.analysis.grids.Grid.mark_papers`); failing
    that, for the claims table only, the first whose cell holds every key the claim names (the
    paper's number at its own scale, its ``setting`` printed beside it)."""
    want = canonical(cell)
    for p in papers:
        if preset not in p.presets:
            continue
        if all(k in want and same(want[k], v) for k, v in canonical(p.cell).items()):
            return p
    for p in papers:
        have = canonical(p.cell)
        if all(k in have and same(v, have[k]) for k, v in want.items()):
            return p
    return None


def _judge_family(vs: list[Verdict], sweep_name: str, out: str | None, alpha: float = inference.ALPHA) -> None:
    """Holm over the verdicts of one preset group that have a test; verdict words and, for an
    inconclusive one, the seeds that would settle it."""
    tested = [(v, c) for v in vs if (c := v.comparison) is not None]
    adjusted = inference.holm([c.p for _, c in tested])
    for (v, c), p_adj in zip(tested, adjusted):
        v.p_adjusted, v.family, v.alpha = p_adj, len(tested), alpha
        v.verdict = inference.decide(c.estimate, p_adj, alpha)
        if v.verdict != INCONCLUSIVE:
            v.reason = "the claimed way" if v.verdict == SUPPORTED else "the other way round"
            continue
        # an arm of one seed gets the paired test's floor: adding seeds pairs them
        unpaired = c.test == inference.UNPAIRED and min(c.n) >= 2
        floor = inference.min_seeds(inference.UNPAIRED if unpaired else inference.PAIRED, alpha / len(tested))
        if min(c.n) < floor:
            v.reason = f"too few seeds to decide ({min(c.n)} a side; the test needs {floor})"
        elif c.estimate == 0:
            v.reason = "no difference in these seeds"
        else:
            v.reason = "the interval holds 0"
        v.seeds_needed = inference.seeds_needed(c, family=len(tested), alpha=alpha)
        if v.seeds_needed is not None and sweep_name:
            v.command = f"synthlab sweep {sweep_name} --preset {v.preset} --seeds {v.seeds_needed}" + (
                f" --out {out}" if out else ""
            )


def verdicts(
    records: list[dict[str, Any]], spec, out: str | None = None, alpha: float = inference.ALPHA
) -> list[Verdict]:
    """Every claim of the sweep file, judged per preset found among the records (``out``: the
    sweep's folder, named in the command that adds seeds; ``alpha``: the level)."""
    claims = getattr(spec, "claims", [])
    if not claims or not records:
        return []
    # a run that failed before the trainer made its record has no preset: its study's (tidy_with_presets),
    # so that a cell whose every run failed that way is "not run", not left out of the table
    # runs that depart from their preset's table (tables.preset_differences) are judged apart
    table = tidy_with_presets(records, spec)
    ok = table[table["status"] == "ok"]
    groups = list(dict.fromkeys(zip(map(str, ok["preset"]), ok["departs"]))) or [("?", "")]
    out_vs = []
    for preset, departs in groups:
        rows = table[(table["preset"].map(str) == preset) & (table["departs"] == departs)]
        family = []
        for c in claims:
            stats = [measure(rows, cell, spec.metric, spec.show) for cell in c.cells()]
            if not all(s.present for s in stats):
                continue  # not part of these results (e.g. `--pe cope,rope` and a claim about NoPE)
            paper = [paper_value_for(spec.papers, cell, preset) for cell in c.cells()]
            why = not_judged(c, stats, preset, departs)
            v = Verdict(c, preset, stats, paper, *(why or (INCONCLUSIVE, "")), departs)
            if why is None:
                v.comparison = compare(c, stats, spec.show)
            family.append(v)
        _judge_family(family, getattr(spec, "name", ""), out, alpha)
        out_vs.extend(family)
    return out_vs


def _seed(record: dict[str, Any]) -> int | None:
    seed = (record.get("train") or {}).get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def decided(v: Verdict) -> bool:
    return v.verdict in (SUPPORTED, CONTRADICTED)


def sequential_verdicts(
    records: list[dict[str, Any]], spec, plan: list[int], reached: int, out: str | None = None
) -> list[Verdict]:
    """``--until-decided``: the claims judged at each planned look (the runs of seeds 0 to n - 1,
    at that look's share of the error, :func:`synthlab.analysis.inference.look_levels`), each kept as it
    stood at the first look that decided it, or as the last look the sweep has ``reached`` (its
    seed count so far) left it: a look beyond it is not judged."""
    levels = inference.look_levels(plan)
    final: dict[tuple, Verdict] = {}
    for k, (n, level) in enumerate(zip(plan, levels), 1):
        if n > reached:
            break
        vs = verdicts([r for r in records if (s := _seed(r)) is None or s < n], spec, out, alpha=level)
        for v in vs:
            key = (v.claim.text, v.claim.source, v.preset, v.departs)
            if key in final and decided(final[key]):
                continue
            if v.comparison is not None:  # a claim not tested here has no look
                v.look = f"look {k} of {len(plan)}, {n} seeds, level {level:.3g}"
            final[key] = v
    return list(final.values())


def claim_id(claim) -> str:
    """A claim's identity within its sweep file (``--until-decided`` counts seeds per claim; a
    string, so it travels to the sweep's helper processes as JSON)."""
    return f"{claim.source}: {claim.text}"


def reads(
    spec,
    preset: str,
    task: str,
    pe_name: str,
    axes: dict[str, Any],
    seed: int | None = None,
    seeds_per_claim: dict[str, int] | None = None,
) -> bool:
    """Whether a claim of ``preset`` reads the grid cell of ``task`` / ``pe_name`` (the
    encoding as records name it) / ``axes`` (its other axis values): every key a claim side
    gives that the cell has must agree; a key the grid does not vary (a preset setting) never
    excludes the cell, so a claim's runs are never left out. With ``seeds_per_claim``
    (:func:`claim_id` -> seed count), a claim reads the cell's ``seed`` only below its count:
    a claim decided at an earlier look takes no more seeds."""
    for claim in spec.claims:
        if preset not in claim.presets:
            continue
        if seeds_per_claim is not None and seed is not None and seed >= seeds_per_claim.get(claim_id(claim), 0):
            continue
        for side in claim.cells():
            side = canonical(side)
            have = {**axes, "task": task, "pe": pe_name}
            if all(same(have[k], v) for k, v in side.items() if k not in ("split", "length") and k in have):
                return True
    return False


def judge_claims(results, sweep=None) -> list[Verdict]:
    """The public entry (``synthlab.judge_claims``): the claims of the sweep file that wrote
    ``results`` (a results file, a sweep folder or a list of records), or of ``sweep`` (a name
    or a sweep file), judged as ``sweep`` and ``grid`` judge them."""
    from pathlib import Path

    from synthlab.analysis.grids import load_results, sweep_spec_for
    from synthlab.plan.sweepfile import load_sweep

    if isinstance(results, list):
        records = list(results)
    else:
        path = Path(results)
        records = load_results(path / "results.jsonl" if path.is_dir() else path)
    spec = load_sweep(sweep) if sweep is not None else sweep_spec_for(records)
    return verdicts(records, spec) if spec is not None else []


# --------------------------------------------------------------------------------------------
# the claims table
# --------------------------------------------------------------------------------------------


def p_text(p: float) -> str:
    """A p-value as the tables print it (two digits; "-" when there is none)."""
    if math.isnan(p):
        return "-"
    return f"{p:.2g}" if p >= 0.001 else f"{p:.1e}"


def evidence(v: Verdict) -> str:
    """The test's numbers in one cell of the table: difference [95 % CI], test, n, p (Holm)."""
    c = v.comparison
    if c is None:
        return "-"
    n = f"n {c.n[0]}" if c.test != inference.UNPAIRED else f"n {c.n[0]} / {c.n[1]}"
    if c.unpaired_left_out:
        n += f", {c.unpaired_left_out} unpaired left out"
    mc = "" if c.exact else f", Monte Carlo {inference.EXACT_LIMIT}"
    return (
        f"{c.estimate:+.1f} {c.interval()}; {c.test}{mc}, {n}; p {p_text(c.p)}, Holm {p_text(v.p_adjusted)}"
        f" (of {v.family})"
    )


def verdict_text(v: Verdict) -> str:
    text = f"**{v.verdict}**" + (f": {v.reason}" if v.reason else "")
    if v.look:
        text += f" ({v.look})"
    if v.seeds_needed is not None:
        text += f"; about {v.seeds_needed} seeds a side would settle it" + (f" (`{v.command}`)" if v.command else "")
    return text


HEADER = (
    "**The papers beside us** ({show} %, synthlab mean ± sd over n seeds; difference = the claimed "
    "side's lead in points, positive the claimed way, with its 95 % interval; the test named, "
    "Holm-adjusted p over the claims judged together; supported / contradicted at adjusted "
    'p < 0.05: docs/results.md "How a claim is decided")'
)


def markdown(vs: list[Verdict], show: str) -> str:
    """The claims table: claim, what it is, paper, synthlab (mean ± sd, n), evidence, verdict."""
    if not vs:
        return ""
    lines = [
        "| claim | kind | source | preset | paper | synthlab | difference [95 % CI]; test; p | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in vs:
        cells = v.claim.cells()
        if v.claim.cell is not None:
            bound = f">= {v.claim.at_least:g}" if v.claim.at_least is not None else f"<= {v.claim.at_most:g}"
            ours = f"{_cell_label(cells[0])} {v.stats[0].label()} (claim {bound})"
        else:
            ours = " vs ".join(f"{_cell_label(c)} {s.label()}" for c, s in zip(cells, v.stats))
        paper = " vs ".join(f"{_cell_label(c)} {p.label()}" for c, p in zip(cells, v.paper) if p is not None) or "-"
        settings = "; ".join(dict.fromkeys(p.setting for p in v.paper if p is not None and p.setting))
        if settings:
            paper += f" ({settings})"
        lines.append(
            f"| {v.claim.text} | {v.kind_label()} | {v.claim.source} | {v.preset_label()} | {paper} | "
            f"{ours} | {evidence(v)} | {verdict_text(v)} |"
        )
    smoke = f"*{SMOKE_NOTE}*\n\n" if any(str(v.preset) == "smoke" for v in vs) else ""
    return smoke + HEADER.format(show=show) + "\n\n" + "\n".join(lines) + "\n"


def rows(vs: list[Verdict]) -> list[dict[str, Any]]:
    """The claims table as flat rows (CSV)."""
    out = []
    for v in vs:
        c = v.comparison
        row: dict[str, Any] = {
            "claim": v.claim.text,
            "kind": v.claim.kind,
            "source": v.claim.source,
            "preset": v.preset,
            "departs": v.departs,
            "verdict": v.verdict,
            "reason": v.reason,
            "difference": c.estimate if c else math.nan,
            "ci_low": c.low if c else math.nan,
            "ci_high": c.high if c else math.nan,
            "test": c.test if c else "",
            "n": "/".join(map(str, c.n)) if c else "",
            "p": c.p if c else math.nan,
            "p_holm": v.p_adjusted,
            "family": v.family,
            "seeds_needed": v.seeds_needed if v.seeds_needed is not None else math.nan,
            "command": v.command,
        }
        for role, cell, s, p in zip(
            ("better", "worse") if v.claim.cell is None else ("cell",), v.claim.cells(), v.stats, v.paper
        ):
            row.update(
                {
                    f"{role}": _cell_label(cell),
                    f"{role}_mean": s.mean,
                    f"{role}_sd": s.sd,
                    f"{role}_n": s.n,
                    f"{role}_failed": s.failed,
                    f"{role}_paper": p.value if p else math.nan,
                    f"{role}_paper_spread": p.spread if p and p.spread is not None else math.nan,
                }
            )
        out.append(row)
    return out


def save(vs: list[Verdict], show: str, out_dir, stem: str = "papers") -> dict[str, str]:
    """``out_dir/<stem>.md`` and ``.csv`` (a sweep: grids/papers.md, grids/papers.csv), both
    or neither (synthlab.core.outputs: written beside, renamed into place at the end)."""
    from pathlib import Path

    import pandas as pd

    from synthlab.core.outputs import csv_writer, write_files

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text = markdown(vs, show)
    return write_files(
        {
            "md": (out_dir / f"{stem}.md", lambda path: path.write_text(text, encoding="utf-8")),
            "csv": (out_dir / f"{stem}.csv", csv_writer(pd.DataFrame(rows(vs)))),
        },
        "claims table",
    )
