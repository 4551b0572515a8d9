"""`synthlab train`: train one model, evaluate every split, print a table, append a record."""

from __future__ import annotations

import argparse

from ._common import parse_assignments


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train one model on a task and evaluate every split",
        description="Train one small Transformer on TASK with positional encoding SPEC, evaluate every split "
        "(token_acc, seq_acc, the task's headline metrics; per length where a split spans lengths), print a "
        "table in % and append one JSON record to OUT/results.jsonl. The run keeps OUT/<run_id>/ "
        "(config.json, metrics.jsonl, model.safetensors, and the logger's files: logs/metrics.csv by default). "
        "--set train.eval_every=N adds a learning curve (the held-out splits every N steps). "
        "Everything is validated before anything is written.",
        epilog="examples:\n"
        "  synthlab train flipflop --pe rope\n"
        "  synthlab train flipflop --pe cope --preset smoke --set d_model=32 --set train.lr=3e-3\n"
        "  synthlab train parity_check --pe kerple+dape:k=3 --set steps=500 --seed 1 --out runs/\n"
        "  synthlab train passkey --pe rope --positions pose:chunks=2,target=512 --rope-scaling yarn\n"
        "  synthlab train flipflop --pe rope --set train.eval_every=100 --logger tensorboard",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("task", help="task name (see `synthlab tasks`)")
    p.add_argument(
        "--pe",
        required=True,
        metavar="SPEC",
        help="positional encoding spec, e.g. rope, cope, kerple+dape:k=3 (see `synthlab encodings`)",
    )
    p.add_argument(
        "--preset",
        choices=("smoke", "quick", "paper"),
        help="settings preset: the [presets.P] tables of the installed sweep file that lists the task "
        "(default: quick; a task no such file lists, a plugin's, has none: its settings come from --set)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a setting (repeatable): model.d_model=32, train.lr=3e-4, task.n_pairs=64, "
        "or a bare unambiguous key like steps=100",
    )
    p.add_argument("--seed", type=int, default=0, help="run seed: data, initialisation, positions (default: 0)")
    p.add_argument("--out", default="synthlab-runs", metavar="DIR", help="output directory (default: synthlab-runs/)")
    p.add_argument("--results", metavar="FILE", help="results file to append to (default: OUT/results.jsonl)")
    p.add_argument(
        "--positions",
        metavar="SCHEME",
        help="training-time indices, e.g. randomized:max=2048 or pose:chunks=2,target=1024",
    )
    p.add_argument(
        "--rope-scaling",
        choices=("linear", "ntk", "yarn"),
        help="rotary interpolation at evaluation beyond the training length",
    )
    from synthlab.run.loggers import DEFAULT  # light: the logger packages load when a run makes one

    p.add_argument(
        "--logger",
        default=DEFAULT,
        metavar="NAME",
        help="where Lightning logs the loss, the learning rate and the learning curve, in the run "
        "directory: csv (default: logs/metrics.csv), tensorboard (logs/), wandb (offline, wandb/), "
        "mlflow (mlruns/, or MLFLOW_TRACKING_URI), none. tensorboard, wandb and mlflow need their "
        "extra: pip install 'synthlab-pe[wandb]'",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar (nor heartbeat lines)")
    p.add_argument(
        "--progress-every",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="seconds between two heartbeat lines (step, loss, time) when stderr is not a terminal, "
        "as a sweep prints them (default 60)",
    )
    p.add_argument("--json", action="store_true", help="print the result record as JSON instead of the table")


def run(args: argparse.Namespace) -> int:
    from synthlab.core.errors import check_seed
    from synthlab.run.evaluation import format_result
    from synthlab.run.loggers import check_logger
    from synthlab.run.records import to_json
    from synthlab.run.training import train
    from synthlab.study import progress

    check_seed(args.seed, "--seed")
    check_logger(args.logger, "--logger")
    progress.check_interval(args.progress_every, "--progress-every")
    overrides = parse_assignments(args.set)
    if args.preset is not None:
        check_preset_exists(args.task, args.preset)
    report = None
    if progress.mode_for(args.quiet) == progress.LINES:  # a log file gets no bar: heartbeat lines instead
        from synthlab.run.training import resolve_config

        steps = resolve_config(
            args.task,
            args.pe,
            args.preset or "quick",
            overrides,
            seed=args.seed,
            positions=args.positions,
            rope_scaling=args.rope_scaling,
        ).train.steps
        report = progress.TrainHeartbeat(f"{args.task} {args.pe}", steps, args.progress_every)
    # validates everything (task, params, settings, pe, positions, combination) before writing
    record = train(
        args.task,
        args.pe,
        args.preset or "quick",
        seed=args.seed,
        out=args.out,
        positions=args.positions,
        rope_scaling=args.rope_scaling,
        quiet=args.quiet,
        results=args.results,
        overrides=overrides,
        logger=args.logger,
        report=report,
    )
    print(to_json(record) if args.json else format_result(record))
    return 0 if record.get("status") == "ok" else 1


def check_preset_exists(task: str, preset: str) -> None:
    """``--preset`` named for a task whose presets no installed sweep file holds (a plugin's
    task) would run the config defaults under the preset's name: refused (ValueError)."""
    from synthlab import generators
    from synthlab.plan.presets import preset_family

    if task in generators.TASKS and preset_family(task) is None:
        raise ValueError(
            f"--preset {preset}: task {task!r} has no presets (no installed sweep file lists it); "
            "give its settings with --set, e.g. --set steps=50 --set d_model=32"
        )
