"""Sweeps: an exhaustive grid of training runs, one Optuna trial per grid cell.

:func:`sweep` loads a sweep file, expands it into cells, validates everything before anything is
written, hands the cells to a launcher (:mod:`synthlab.study.launchers`: this machine's workers
or SLURM) that trains each once through the study, writes the records and draws the grids and
the papers' verdicts. A grid the study has finished only reports. The orchestration:
docs/architecture.md, "The sweep queue's rules"; the user's view: docs/interfaces.md, "Sweep
files".
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

from synthlab.analysis import claims, inference
from synthlab.analysis import grids as grids_mod
from synthlab.plan.cells import Cell, expand_cells, split_pe_list
from synthlab.plan.seeds import parse_seeds
from synthlab.plan.sweepfile import (
    PRESETS,
    SweepSpec,
    installed_sweeps,
    load_sweep,
    lower_is_better,
    objective,
    objective_split,
    parse_sweep,
)
from synthlab.run.records import clean, repair_jsonl, write_records
from synthlab.study import dashboard, sweepnames
from synthlab.study import launchers as launchers_mod
from synthlab.study import progress as progress_mod
from synthlab.study import workers as workers_mod
from synthlab.study.scheduler import finished_grid
from synthlab.study.storage import (
    JOURNAL_NAME,
    check_storage,
    export_results,
    normalize_url,
    open_storage,
    peek_storage,
)

# what users import from here (defined in the modules above; this one runs them)
__all__ = [
    "sweep",
    "best_tuned",
    "load_sweep",
    "parse_sweep",
    "installed_sweeps",
    "expand_cells",
    "validate_cells",
    "open_storage",
    "check_storage",
    "normalize_url",
    "JOURNAL_NAME",
    "export_results",
    "SweepSpec",
    "Cell",
    "PRESETS",
]


def best_tuned(
    spec: SweepSpec, pairs: list[tuple[Cell, dict[str, Any]]], maximize: bool, tuned: list[str]
) -> list[dict[str, Any]]:
    """The records a grid shows when a sweep tunes parameters (``trials_per_cell`` > 1): of each
    cell's tuned slots, the one whose objective, averaged over seeds, is best; its records for
    every seed. A slot with fewer finished seeds never wins over one with more (a setting that
    diverged on a seed must not win on the mean of its survivors); a cell with no finished slot
    keeps slot 0 (drawn blank)."""
    groups: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for cell, rec in pairs:
        named = {k: v for k, v in cell.axes.items() if k not in ("seed", "slot", *tuned)}
        key = json.dumps(clean(named), sort_keys=True)
        groups.setdefault(key, {}).setdefault(cell.slot, []).append(rec)
    out: list[dict[str, Any]] = []
    for slots in groups.values():
        scored = {}
        for slot, recs in slots.items():
            vals = [v for v in (objective(spec, r) for r in recs if r.get("status") == "ok") if v is not None]
            if vals:
                scored[slot] = (len(vals), sum(vals) / len(vals))
        if scored:  # most finished seeds, then the best mean; ties: the lowest slot
            best = min(scored, key=lambda s: (-scored[s][0], -scored[s][1] if maximize else scored[s][1], s))
        else:
            best = min(slots)
        out += slots[best]
    return out


def validate_cells(cells: list[Cell], preset: str) -> dict[str, Any]:
    """Ask the trainer to resolve every cell's configuration (ValueError names the bad value);
    cell key -> its resolved config, which the cell then trains with (resolved once for the
    cells that differ only by seed, each with its own seed)."""
    # here, not in cells.py: resolving a cell needs the trainer (torch), below the cells
    from synthlab.core.errors import check_seed
    from synthlab.run import training  # torch and lightning: loaded once a sweep is about to run

    seen: dict[str, Any] = {}
    out: dict[str, Any] = {}
    for c in cells:
        probe = json.dumps([c.task, c.pe, c.positions, c.rope_scaling, c.overrides], sort_keys=True)
        if probe not in seen:
            seen[probe] = training.cell_config(c, preset)
        check_seed(c.seed)
        out[c.key] = cfg = copy.deepcopy(seen[probe])
        cfg.train.seed = c.seed
    return out


def _validate_name(name: str, flag: str) -> None:
    """A study name names a directory too (synthlab-runs/<study>): 1 to 200 characters, no
    '/', '\\' or control characters."""
    if (
        not name.strip()
        or len(name) > 200
        or len(name.encode()) > 255
        or name in (".", "..")
        or any(ch in name for ch in "/\\")
        or any(ord(ch) < 32 or ord(ch) == 127 for ch in name)
    ):
        shown = repr(name) if len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"
        raise ValueError(
            f"{flag} {shown}: a study name is 1 to 200 characters, without '/', '\\' or control characters"
        )


def _check_destinations(out_dir: Path, url: str, storage: str | None) -> None:
    """Before anything is written (nothing is created here): the output directory, its results
    file and a journal file can be made (ValueError: a file where a directory goes or the
    reverse; OSError: a read-only or forbidden place)."""
    from synthlab.core.errors import check_output_dir, check_output_file

    for d in (out_dir, out_dir / "runs", out_dir / "grids"):
        check_output_dir(d, "--out")
    check_output_file(out_dir / "results.jsonl", "--out")
    if "://" not in url:  # a journal file
        check_output_file(url, "--storage" if storage is not None else "--out")
    elif url.startswith("sqlite:///") and url[len("sqlite:///") :] not in ("", ":memory:"):
        check_output_file(url[len("sqlite:///") :], "--storage")


def sweep(
    task_or_file: str | os.PathLike,
    pe: str | list[str] | None = None,
    preset: str | None = None,
    trials: int | None = None,
    storage: str | None = None,
    study: str | None = None,
    out: str | os.PathLike | None = None,
    quiet: bool = True,
    *,
    grids: bool = True,
    retry_failed: bool = False,
    heartbeat_interval: float = 30.0,
    grace_period: float = 180.0,
    poll: float = 2.0,
    workers: int | str = 1,
    logger: str | None = None,
    progress_every: float = progress_mod.HEARTBEAT_EVERY,
    settings: dict[str, Any] | None = None,
    batch_seeds: bool = False,
    seeds: int | str | list[int] | None = None,
    until_decided: bool = False,
    max_seeds: int | None = None,
    _looks: tuple[list[int], int] | None = None,
    claims_only: bool = False,
    _claim_seeds: int | dict[str, int] | None = None,
    launcher: str | None = None,
    detach: bool = False,
) -> list[dict]:
    """Run (or resume) the sweep; return the result records of its grid cells.

    ``pe`` replaces the sweep's encodings axis (list or comma-separated string); ``trials``
    caps how many trials this process runs; ``storage`` is any Optuna storage URL or a journal
    file path (default ``OUT/study.journal``); ``study`` defaults to ``<sweep>-<preset>``;
    ``out`` to ``synthlab-runs/<study>``. A failed cell counts as finished (its record says
    why) unless ``retry_failed``, which runs every failed cell again (the failed records stay
    in results.jsonl). ``workers`` (an integer or ``"auto"``) runs the grid in that many
    processes on this machine (:mod:`synthlab.study.workers`). ``logger`` (a run option of the
    trainer, :mod:`synthlab.run.loggers`; None: its default, csv) goes to every run, no part of a
    cell's identity. Unless ``quiet``, progress goes to stderr: a bar on a terminal, else a
    line per cell and a heartbeat line every ``progress_every`` seconds
    (:mod:`synthlab.study.progress`). ``settings`` (``--set``: key -> value) go into every cell on top
    of the preset's tables; they are part of each cell's identity, and the default study name
    carries them (``flipflop-quick-steps=500``), so a grid never pools runs of other settings.
    ``batch_seeds`` trains the seeds of a cell together as one stacked model where they can be
    (:mod:`synthlab.run.seedbatch`; one by one where not), each still its own run and record.
    ``seeds`` (``--seeds``) replaces the seed axis: a count (``10``: seeds 0 to 9), a range
    (``"3-9"``, inclusive), a list (``"0,4,7"`` or ``[0, 4, 7]``); it is no part of the default
    study name, so more seeds later resume the same study and run only the new seeds' cells.
    ``until_decided`` adds seeds in planned looks (8, 12, 16, 20, ... up to ``max_seeds``,
    default 20) until every claim of the sweep file judged on these runs is supported or
    contradicted (:func:`synthlab.analysis.inference.look_levels`: the error spent per look), or the cap;
    the added seeds go to the cells the claims read, the rest of the grid keeps its preset's.
    ``claims_only`` runs only the cells the claims of the preset read.
    ``launcher`` (:mod:`synthlab.study.launchers`): ``"local"`` (the default: this machine, ``workers``)
    or ``"slurm"`` (a SLURM job array through submitit, one task per cell not finished; its
    settings are the ``launcher.*`` keys of ``settings`` over the sweep file's ``[launcher]``
    table); with ``detach`` a SLURM sweep returns once its cells are submitted (the records
    finished so far, no grids), and the same call later gathers them.
    Everything is validated before anything is written.
    """
    if until_decided or max_seeds is not None:
        return _until_decided(
            task_or_file,
            seeds,
            max_seeds,
            until_decided,
            dict(
                pe=pe,
                preset=preset,
                trials=trials,
                storage=storage,
                study=study,
                out=out,
                quiet=quiet,
                grids=grids,
                retry_failed=retry_failed,
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                poll=poll,
                workers=workers,
                logger=logger,
                progress_every=progress_every,
                settings=settings,
                batch_seeds=batch_seeds,
                claims_only=claims_only,
                launcher=launcher,
                detach=detach,
            ),
        )
    workers = workers_mod.parse_workers(workers)
    if logger is not None:
        from synthlab.run.loggers import check_logger  # the trainer's own check, before anything is written

        check_logger(logger, "--logger")
    progress_mod.check_interval(progress_every, "--progress-every")
    spec = load_sweep(task_or_file)
    preset = preset or spec.default_preset
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r} is not allowed (allowed: {', '.join(PRESETS)})")
    sweepnames.check_file(spec)  # a metric, split, axis or claim cell its tasks do not have
    pe_list = split_pe_list(pe) if isinstance(pe, str) else pe
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise ValueError(f"--trials must be an integer >= 1, got {trials!r}")
    settings, launcher_given = launchers_mod.split_settings(dict(settings or {}))
    chosen = launchers_mod.make_launcher(
        launcher,
        launcher_given,
        spec.launcher,
        workers=workers,
        trials=trials,
        heartbeat_interval=heartbeat_interval,
        grace_period=grace_period,
        batch_seeds=bool(batch_seeds),
    )
    if chosen.name == "slurm":
        if batch_seeds:
            raise ValueError("--batch-seeds: not with --launcher slurm (each SLURM task trains one cell)")
        if trials is not None:
            raise ValueError("--trials: not with --launcher slurm (every cell not finished is submitted)")
        chosen.detach = bool(detach)
    elif detach:
        raise ValueError("--detach goes with --launcher slurm")
    seed_list = parse_seeds(seeds) if seeds is not None else None
    cells = expand_cells(spec, preset, pe_list, settings, seed_list)
    sweepnames.check_cells(spec, preset, cells)
    if _claim_seeds is not None or claims_only:
        if isinstance(_claim_seeds, int):
            _claim_seeds = {claims.claim_id(c): _claim_seeds for c in spec.claims}
        more = (
            cells
            if not _claim_seeds
            else expand_cells(spec, preset, pe_list, settings, list(range(max(_claim_seeds.values()))))
        )
        cells = _with_claim_seeds(spec, preset, [] if claims_only else cells, more, _claim_seeds)
        if not cells:
            raise ValueError(f"--claims-only: no cell of this grid is read by a claim of {spec.name}'s {preset} preset")
    study_name = (
        study
        if study is not None
        else f"{spec.name}-{preset}" + "".join(f"-{k}={v}" for k, v in sorted(settings.items()))
    )
    _validate_name(study_name, "--study")
    out_dir = Path(out) if out is not None else Path("synthlab-runs") / study_name
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {str(out_dir)!r} exists and is not a directory")
    url = storage or str(out_dir / JOURNAL_NAME)
    if storage is not None:
        check_storage(storage)
    _check_destinations(out_dir, url, storage)
    from synthlab.core.errors import naming

    done = _finished(cells, url, study_name, retry_failed)
    if done is not None:  # nothing left to run: no trainer (torch, Lightning), no study write
        with naming(out_dir):
            return _report(spec, preset, cells, done, study_name, out_dir, grids, _looks)
    configs = validate_cells(cells, preset)

    # validated: from here on we write; SIGTERM (preemption, `timeout`) stops us as Ctrl-C does;
    # a write that names no file (a grid's, a library's) names at least the sweep's directory
    with workers_mod.sigterm_as_ctrl_c(), naming(out_dir):
        plans = {key: dashboard.plan(spec, cfg) for key, cfg in configs.items()}
        helper = dict(  # a helper process runs this same sweep (workers.spawn)
            task_or_file=str(task_or_file),
            pe=pe_list,
            preset=preset,
            settings=settings,
            seeds=seed_list,
            claims_only=claims_only,
            _claim_seeds=_claim_seeds,
            trials=trials,
            storage=url,
            study=study_name,
            out=str(out_dir),
            quiet=True,
            heartbeat_interval=heartbeat_interval,
            grace_period=grace_period,
            poll=poll,
            logger=logger,
            progress_every=progress_every,
            batch_seeds=bool(batch_seeds),
        )
        return _run(
            spec,
            preset,
            cells,
            study_name,
            out_dir,
            url,
            grids,
            chosen,
            dict(
                quiet=quiet,
                retry_failed=retry_failed,
                logger=logger,
                progress_every=progress_every,
                poll=poll,
                plans=plans,
                configs=configs,
                helper=helper,
            ),
        )


def _run(
    spec: SweepSpec,
    preset: str,
    cells: list[Cell],
    study_name: str,
    out_dir: Path,
    url: str,
    grids: bool,
    launcher: launchers_mod.Launcher,
    options: dict[str, Any],
) -> list[dict]:
    """Open the study, hand the grid to the launcher (``options``: the rest of its
    :class:`~synthlab.study.launchers.Grid`), then write the study's results and draw."""
    import optuna

    out_dir.mkdir(parents=True, exist_ok=True)
    repair_jsonl(out_dir / "results.jsonl")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = open_storage(url)
    direction: Literal["minimize", "maximize"] = "minimize" if lower_is_better(spec) else "maximize"
    st = optuna.create_study(study_name=study_name, storage=store, direction=direction, load_if_exists=True)
    st.set_user_attr("sweep", spec.name)
    _describe_study(st, spec, options["plans"])
    pairs = launcher.run(
        launchers_mod.Grid(
            spec=spec,
            preset=preset,
            cells=cells,
            study_name=study_name,
            out=out_dir,
            url=url,
            storage=store,
            study=st,
            **options,
        )
    )
    if launcher.detach:  # the cells run in the scheduler; a later run gathers them and draws the grids
        return [r for _, r in pairs]
    return _report(spec, preset, cells, pairs, study_name, out_dir, grids)


def _finished(cells: list[Cell], url: str, study_name: str, retry_failed: bool) -> list[tuple[Cell, dict]] | None:
    """Each cell with its record when the study has already finished every cell of the grid
    (none waiting or running, none to retry), read without writing anything; else None. A
    journal file or an SQLite file that does not exist yet, another database, a study not
    there: None (the full path decides)."""
    if "://" in url:
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path or path == ":memory:" or not os.path.isfile(path):
            return None
    elif not (os.path.isfile(url) and os.path.getsize(url)):
        return None
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=study_name, storage=peek_storage(url))
    except Exception:  # no such study, a torn or corrupt journal: the full path repairs or says
        return None
    return finished_grid(cells, study.get_trials(deepcopy=False), study.user_attrs, retry_failed)


def _until_decided(task_or_file, seeds, max_seeds: int | None, until_decided: bool, kwargs: dict[str, Any]):
    """:func:`sweep` with ``until_decided``: one sweep per planned look, each resuming the last."""
    if not until_decided:
        raise ValueError("--max-seeds goes with --until-decided")
    if seeds is not None:
        raise ValueError("--until-decided chooses the seeds itself (8, 12, 16, ... up to --max-seeds): drop --seeds")
    if kwargs["trials"] is not None:
        raise ValueError("--until-decided runs whole looks: drop --trials")
    if kwargs.get("detach"):
        raise ValueError("--detach: not with --until-decided (each look needs the last one's results)")
    plan = inference.looks(inference.DEFAULT_MAX_SEEDS if max_seeds is None else max_seeds)
    spec = load_sweep(task_or_file)
    preset = kwargs["preset"] or spec.default_preset
    if not any(preset in c.presets for c in spec.claims):
        raise ValueError(
            f"--until-decided: {spec.name}'s sweep file states no claim for the {preset} preset: nothing to decide"
        )
    grids, reached = kwargs.pop("grids"), plan[0]
    decided_at: dict[str, int] = {}  # a decided claim's seeds: no more go to its cells

    def seeds_per_claim(n: int) -> dict[str, int]:
        return {claims.claim_id(c): decided_at.get(claims.claim_id(c), n) for c in spec.claims}

    for n in plan:
        reached = n
        records = sweep(task_or_file, grids=False, _claim_seeds=seeds_per_claim(n), **kwargs)
        vs = [v for v in claims.sequential_verdicts(records, spec, plan, reached=n) if v.comparison is not None]
        still_open = {claims.claim_id(v.claim) for v in vs if not claims.decided(v)}
        for v in vs:
            if claims.claim_id(v.claim) not in still_open:
                decided_at.setdefault(claims.claim_id(v.claim), n)
        done = sum(claims.decided(v) for v in vs)
        print(f"look {plan.index(n) + 1} of {len(plan)} ({n} seeds): {done} of {len(vs)} claims decided")
        if done == len(vs):
            break
    return sweep(task_or_file, grids=grids, _looks=(plan, reached), _claim_seeds=seeds_per_claim(reached), **kwargs)


def _with_claim_seeds(
    spec: SweepSpec, preset: str, grid: list[Cell], more: list[Cell], seeds_per_claim: dict[str, int] | None = None
) -> list[Cell]:
    """The grid at its own seeds plus, from ``more`` (the grid at the look's seeds), the cells
    a claim of ``preset`` reads (with ``seeds_per_claim``, at the seeds below that claim's
    count): in ``more``'s order, the grid's other seeds after."""
    from synthlab.model import parse_pe

    keys = {c.key for c in grid}
    out = [
        c
        for c in more
        if c.key in keys
        or claims.reads(
            spec,
            preset,
            c.task,
            parse_pe(c.pe).name,
            {k: v for k, v in c.axes.items() if k not in ("task", "pe", "dape_k", "seed", "slot")},
            seed=c.seed,
            seeds_per_claim=seeds_per_claim,
        )
    ]
    seen = {c.key for c in out}
    return out + [c for c in grid if c.key not in seen]


def _report(
    spec: SweepSpec,
    preset: str,
    cells: list[Cell],
    pairs: list[tuple[Cell, dict[str, Any]]],
    study_name: str,
    out_dir: Path,
    grids: bool,
    looks: tuple[list[int], int] | None = None,
) -> list[dict]:
    """The records of a run grid: study-results.jsonl, then (with ``grids``) the grids and the
    papers' verdicts drawn and printed (``looks``: the plan of --until-decided and the look
    reached, whose rule then judges the claims)."""
    records = [r for _, r in pairs]
    write_records(out_dir / "study-results.jsonl", records)
    if grids:
        tuned = spec.preset_tune_keys(preset)
        shown = best_tuned(spec, pairs, not lower_is_better(spec), tuned) if tuned else records
        tables = grids_mod.sweep_grids(shown, spec, out_dir / "grids")
        if tuned:  # the CHE papers report the best run over seeds x learning rates: show that too
            tables += grids_mod.sweep_grids(records, spec, out_dir / "grids", best_of=tuple(tuned))
        missing = len(cells) - sum(1 for r in records if r.get("status") == "ok")
        print(
            f"study {study_name}: {len(records)}/{len(cells)} cells finished"
            + (f" ({missing} failed or not run)" if missing else "")
            + f"; results in {out_dir}"
        )
        if tuned:
            print(
                f"tuned {', '.join(tuned)}: the grids show, per cell, the best of "
                f"{spec.preset_tune(preset)['trials_per_cell']} settings by {spec.metric} on {objective_split(spec)} "
                "(mean over seeds); study-results.jsonl holds every run"
            )
        for g in tables:
            print()
            print(g.markdown())
        verdicts = (
            claims.sequential_verdicts(shown, spec, looks[0], looks[1], out=str(out_dir))
            if looks
            else claims.verdicts(shown, spec, out=str(out_dir))
        )
        if verdicts:
            claims.save(verdicts, spec.show, out_dir / "grids")
            print()
            print(claims.markdown(verdicts, spec.show))
    return records


def _describe_study(study: Any, spec: SweepSpec, plans: dict[str, dashboard.TrialPlan]) -> None:
    """The study's objective name and what its intermediate values are, for optuna-dashboard
    (written only when they change: each write is a journal entry)."""
    import warnings

    from optuna.exceptions import ExperimentalWarning

    name = dashboard.objective_name(spec)
    if study.metric_names != [name]:
        with warnings.catch_warnings():  # set_metric_names is "experimental" since Optuna 3.2
            warnings.simplefilter("ignore", ExperimentalWarning)
            study.set_metric_names([name])
    what = dashboard.describe(plans.values())
    if study.user_attrs.get("intermediate") != what:
        study.set_user_attr("intermediate", what)


def _helper(payload: str) -> int:
    """A helper process of ``sweep(workers=N)``: the same grid's loop, without drawing. An
    environment error (disk full...) stops it with exit 1 and one line, as it stops the CLI."""
    from synthlab.core.errors import os_error_line

    try:
        return workers_mod.helper_main(lambda **kwargs: sweep(**kwargs, grids=False, workers=1), payload)
    except OSError as e:
        print(f"synthlab sweep: error: {os_error_line(e)}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":  # pragma: no cover - `python -m synthlab.study.sweeping PAYLOAD` by hand
    sys.exit(_helper(sys.argv[1]))
