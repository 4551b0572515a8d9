"""`synthlab sweep`: run (or resume) an Optuna study over a sweep file's grid, then draw it."""

from __future__ import annotations

import argparse
import math

# a grid larger than this runs only with --yes (a typo in an axis can ask for years of runs)
MAX_CELLS = 10_000


def add_parser(sub: argparse._SubParsersAction) -> None:
    from synthlab.study.progress import HEARTBEAT_EVERY  # the standard library only

    p = sub.add_parser(
        "sweep",
        help="run (or resume) a grid of training runs as an Optuna study, then draw the grids",
        description="Run every cell of a sweep file's grid (encodings x d_model x ... x seeds) once, as "
        "trials of an Optuna study. Re-running the same command resumes; several processes (or machines, "
        "with --storage postgresql://...) given the same --storage and --study share the grid. "
        "At the end the grids are drawn (PNG, CSV, Markdown under OUT/grids/) and printed. Progress goes to "
        "stderr: a bar on a terminal, else a line per finished cell and a heartbeat line during long ones. "
        "Watch the study with optuna-dashboard (docs/observability.md).",
        epilog="examples:\n  synthlab sweep flipflop --pe cope,rope\n"
        "  synthlab sweep flipflop --pe cope,rope --set train.eval_every=100  # learning curves\n"
        "  synthlab sweep flipflop --pe cope,rope --seeds 10  # seeds 0-9; the seeds run before are not run again\n"
        "  synthlab sweep flipflop --pe cope,rope --until-decided  # seeds added until the claim is decided\n"
        "  synthlab sweep che --preset smoke --out runs/che\n"
        "  synthlab sweep my_sweep.toml --storage postgresql://me@db/optuna --study big  # on each machine\n"
        "  synthlab sweep flipflop --launcher slurm --set launcher.partition=gpu --set launcher.gpus_per_task=1\n"
        "  synthlab sweep flipflop --logger tensorboard 2> sweep.log\n"
        "  optuna-dashboard synthlab-runs/flipflop-quick/study.journal  # in another terminal",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sweep",
        metavar="TASK_OR_FILE",
        help="an installed sweep (flipflop, flipflop_lm, selective_copy, counting, arithmetic, binfa, che, pose, "
        "mqar), a CHE task name (che.toml restricted to it), or a .toml file",
    )
    p.add_argument("--pe", help="comma-separated encodings; replaces the sweep's encodings axis")
    p.add_argument("--preset", choices=("smoke", "quick", "paper"), help="settings preset (default: the sweep file's)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="a setting for every cell, on top of the preset (repeatable): train.eval_every=100, "
        "steps=500; not an axis of the sweep. The default study name carries it",
    )
    p.add_argument(
        "--seeds",
        metavar="N|A-B|A,B,...",
        help="the seeds: a count N (0 to N-1), an inclusive range A-B or a list A,B,C; replaces the "
        "sweep's seed axis, not part of the default study name: more seeds later on the same study "
        "run only the new seeds' cells",
    )
    p.add_argument(
        "--until-decided",
        action="store_true",
        help="add seeds in planned looks (8, 12, 16, 20 ... seeds a side) until every claim of the sweep "
        "file judged here is supported or contradicted, or --max-seeds; each look tests at its share of "
        "the 5 %% error (alpha spending), so stopping early does not inflate it (docs/results.md)",
    )
    p.add_argument(
        "--max-seeds", type=int, metavar="N", help="the last look of --until-decided (default 20; at least 6)"
    )
    p.add_argument(
        "--claims-only",
        action="store_true",
        help="run only the grid cells the sweep file's claims for this preset read: the claims decided, "
        "the rest of the heatmaps left blank (a later run without it fills them)",
    )
    p.add_argument("--trials", type=int, help="run at most N trials in this process, then stop")
    p.add_argument(
        "--storage",
        help="Optuna storage URL (sqlite:///F, postgresql://...) or a journal file path (default: OUT/study.journal)",
    )
    p.add_argument("--study", help="study name (default: <sweep>-<preset>)")
    p.add_argument("--out", help="output directory (default: synthlab-runs/<study>)")
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run the cells that failed before again (a failed cell otherwise counts as finished)",
    )
    p.add_argument(
        "--workers",
        metavar="N|auto",
        help="worker processes on this machine sharing the grid (auto: one per CPU core with one "
        "thread each, or one per GPU, never more than the cells left; default auto, or 1 with "
        "--trials; SYNTHLAB_WORKERS sets another default)",
    )
    p.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        help="where the cells train: local (default: this machine, --workers) or slurm (a SLURM job "
        "array through submitit, one task per cell not finished; settings from --set launcher.partition=, "
        "launcher.time=, launcher.gpus_per_task=, launcher.cpus_per_task=, launcher.array_parallelism= or "
        "a [launcher] table of the sweep file; pip install 'synthlab-pe[slurm]'; docs/scaling.md)",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="with --launcher slurm: return once the cells are submitted; the same command run later "
        "gathers the results and draws the grids",
    )
    p.add_argument(
        "--logger",
        metavar="NAME",
        help="each run's training logger: csv (default), tensorboard, wandb, mlflow or none "
        "(the last three need pip install 'synthlab-pe[NAME]')",
    )
    p.add_argument(
        "--progress-every",
        type=float,
        default=HEARTBEAT_EVERY,
        metavar="SECONDS",
        help="seconds between two heartbeat lines of a running cell when stderr is not a terminal "
        f"(default {HEARTBEAT_EVERY:g})",
    )
    p.add_argument(
        "--batch-seeds",
        action="store_true",
        help="train the seeds of a cell together as one stacked model (torch.func.vmap; each seed still "
        "its own run and record): fills a GPU that one small model leaves idle. Cells whose "
        "seeds cannot stack (lengths varying per batch, dropout, --positions, train.eval_every, "
        "train.compile) train one by one",
    )
    p.add_argument("--quiet", action="store_true", help="no progress output: nothing on stderr but errors")
    p.add_argument(
        "--yes", action="store_true", help=f"run a grid of more than {MAX_CELLS:,} cells (refused without it)"
    )


def run(args: argparse.Namespace) -> int:
    from synthlab.commands._common import parse_assignments
    from synthlab.plan.seeds import parse_seeds
    from synthlab.study.sweeping import sweep
    from synthlab.study.workers import ENV_DEFAULT, default_workers, parse_workers

    settings = parse_assignments(args.set)
    seeds = parse_seeds(args.seeds) if args.seeds is not None else None
    if args.until_decided or args.max_seeds is not None:  # its own checks: before the size is counted
        from synthlab.analysis.inference import DEFAULT_MAX_SEEDS, looks

        if not args.until_decided:
            raise ValueError("--max-seeds goes with --until-decided")
        _check_size(args, list(range(looks(DEFAULT_MAX_SEEDS if args.max_seeds is None else args.max_seeds)[-1])))
    else:
        _check_size(args, seeds)
    if args.launcher == "slurm" and args.workers is not None:
        raise ValueError(
            "--workers: not with --launcher slurm (SLURM runs one task per cell; "
            "--set launcher.array_parallelism=N caps how many at once)"
        )
    workers = args.workers
    if args.launcher == "slurm":
        workers = "1"
    if workers is None:  # --trials caps this process: its helpers would run as many each
        workers = "1" if args.trials is not None else default_workers()
        try:
            parse_workers(workers)
        except ValueError:
            raise ValueError(f"{ENV_DEFAULT}={workers!r}: a positive integer or 'auto'") from None
    records = sweep(
        args.sweep,
        pe=args.pe,
        preset=args.preset,
        trials=args.trials,
        storage=args.storage,
        study=args.study,
        out=args.out,
        quiet=args.quiet,
        retry_failed=args.retry_failed,
        workers=workers,
        logger=args.logger,
        progress_every=args.progress_every,
        settings=settings,
        batch_seeds=args.batch_seeds,
        seeds=seeds,
        until_decided=args.until_decided,
        max_seeds=args.max_seeds,
        claims_only=args.claims_only,
        launcher=args.launcher,
        detach=args.detach,
    )
    return 0 if records is not None else 1


def count_cells(spec, preset: str, pe: list[str] | None, seeds: list[int] | None = None) -> int:
    """How many cells ``synthlab.plan.cells.expand_cells`` makes, counted without making them."""
    axes = spec.preset_axes(preset)
    if pe is not None:
        axes["pe"] = pe
    if seeds is not None:
        axes["seed"] = seeds
    per_pe = sum(len(axes.get("dape_k", [None])) if _has_dape(enc) else 1 for enc in axes["pe"])
    rest = math.prod(len(v) for k, v in axes.items() if k not in ("pe", "dape_k"))
    return per_pe * rest * int(spec.preset_tune(preset).get("trials_per_cell", 1))


def _has_dape(enc: str) -> bool:
    from synthlab.model.registry import parse_pe  # no torch

    return parse_pe(enc).has("dape")


def _check_size(args: argparse.Namespace, seeds: list[int] | None) -> None:
    """Refuse a grid of more than MAX_CELLS cells without --yes, before any cell is built."""
    from synthlab.plan.cells import split_pe_list
    from synthlab.plan.sweepfile import load_sweep

    spec = load_sweep(args.sweep)
    preset = args.preset or spec.default_preset
    if preset not in spec.presets:
        return  # sweep() names the bad preset
    pe = split_pe_list(args.pe) if args.pe is not None else None
    n = count_cells(spec, preset, pe, seeds)
    if n > MAX_CELLS and not args.yes:
        raise ValueError(
            f"{args.sweep}: the grid has {n:,} cells at preset {preset!r}, over the {MAX_CELLS:,} "
            "a sweep runs without asking; pass --yes to run it anyway"
        )
