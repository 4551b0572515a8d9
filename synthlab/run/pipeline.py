"""One run pipeline for 1..S seeds: prepare, build, fit, evaluate, record.

:func:`synthlab.run.training.run` is it for one model, :func:`synthlab.run.seedbatch.run_seeds`
for S seeds stacked into one (:mod:`synthlab.run.stacking`); the two differ only in the model,
its LightningModule and batches, and the trained stack split back into S models. Each seed is
evaluated, saved and recorded as its own run; resuming, and not training a recorded run again,
are the checkpoint's (:mod:`synthlab.run.checkpoints`). The flow: docs/architecture.md, "One
run, start to end"; the record: docs/interfaces.md.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, cast

import torch

from synthlab import __version__, generators
from synthlab.core.config import RunConfig
from synthlab.core.errors import naming
from synthlab.model.encoders.rotary import CURRENT_PAIRS
from synthlab.model.registry import PE_REVISION, PESpec
from synthlab.run import loggers, machine, rundir, specs, usermodel
from synthlab.run.checkpoints import RunCheckpoints
from synthlab.run.configs import eval_extent, make_task, max_len_of, model_for, validate_combination
from synthlab.run.curves import Report, check_report, curve_callback, eval_context
from synthlab.run.evaluation import by_length, evaluate
from synthlab.run.fitting import deterministic, fit, fix_cublas_workspace, threads
from synthlab.run.modules import make_module, make_stacked_module
from synthlab.run.records import SCHEMA, append_record, clean
from synthlab.run.sizing import check_run_fits
from synthlab.run.stacking import NotBatchable, check_shapes, stack_back, stacked_datamodule


@dataclass
class Prepared:
    """What the runs are built from: one config per seed, and their task, encoding, data and lengths."""

    cfgs: list[RunConfig]
    task: Any
    spec: PESpec
    scheme: Any  # the training-time positions scheme, or None
    dms: list[Any]  # each seed's DataModule: its training stream and evaluation sets
    sets: list[dict[str, Any]]
    train_len: int  # the longest training sequence of every seed's first batches
    max_len: int  # the model's position range
    rope_factor: float | None  # PoSE's static rotary interpolation, or None


@dataclass
class Built:
    """The models (one per seed, initial weights), the LightningModule training them, its data."""

    models: list[torch.nn.Module]
    module: Any
    datamodule: Any
    described: dict[str, Any]  # the record's "model"
    named: dict[str, Any]  # what config.json adds for a user's model factory
    log_every: int
    stacked: Any = None  # the StackedModels of batched seeds


@dataclass
class Run:
    """One seed's run: its id, directory, record and metrics.jsonl lines as they fill."""

    cfg: RunConfig
    run_id: str
    dir: Path | None
    record: dict[str, Any]
    lines: list[dict[str, Any]] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)  # the parents rundir.make made (removed with it)
    log: loggers.RunLogger | None = None
    curve: Any = None  # the learning-curve callback
    model: torch.nn.Module | None = None  # trained, on the CPU, to save (None: failed)


def run_pipeline(
    cfgs: Sequence[RunConfig],
    *,
    stacked: bool,
    out: str | os.PathLike | None,
    results: str | os.PathLike | None,
    quiet: bool,
    study: str | None,
    trials: Sequence[int | None],
    reports: Sequence[Report | None],
    spec: PESpec | None = None,
    t0: float | None = None,
    logger: str = loggers.DEFAULT,
    factory: usermodel.Factory | None = None,
) -> list[dict[str, Any]]:
    """Train, evaluate and record resolved configs, one per seed, in their order: one model, or
    (``stacked``) S seeds as one stacked model that :mod:`synthlab.run.stacking` accepted; returns
    the records. ``spec``: the parsed ``cfgs[0].pe`` when the caller has it; ``t0``: when the run
    began (its ``wall_s``); ``factory``: a user's model (one model only)."""
    t0 = time.perf_counter() if t0 is None else t0
    cfgs = list(cfgs)
    loggers.check_logger(logger)
    hooks = [check_report(r) for r in reports]
    if factory is not None:
        usermodel.check_factory(factory)
    if len(trials) != len(cfgs) or len(hooks) != len(cfgs):
        raise ValueError(f"trials and reports need one entry per seed ({len(cfgs)})")
    if not stacked and len(cfgs) != 1:
        raise ValueError(f"one model trains one seed, got {len(cfgs)} configs")
    if stacked and (factory is not None or logger != "none"):
        raise NotBatchable("batched seeds train synthlab's Transformer and log to no logger")
    rundir.check_destinations(out, results)
    prep = prepare(cfgs, spec, stacked=stacked, sized=factory is None)
    built = build(prep, hooks, stacked=stacked, factory=factory)
    results_path = Path(results) if results is not None else (Path(out) / "results.jsonl" if out is not None else None)
    # a run killed after a checkpoint resumes from it, under the run ids it began with
    batched = {"batched_seeds": [c.train.seed for c in cfgs]} if stacked else {}
    ck = RunCheckpoints.open(
        out, cfgs[0], {"pe_revision": PE_REVISION, "synthlab": __version__, **built.named, **batched}, results_path
    )
    runs = start(prep, built, ck, out, results_path, study, trials, stacked=stacked, quiet=quiet)
    try:
        with deterministic(cfgs[0].train.deterministic), threads(cfgs[0].train.threads):
            info = fit_runs(prep, built, runs, ck, hooks, logger, progress=(not quiet) and sys.stdout.isatty())
            evaluate_runs(prep, built, runs, info)
    except (KeyboardInterrupt, OSError) as e:  # Ctrl-C, a stopped sweep worker, a full or read-only disk:
        if isinstance(e, OSError) and e.filename is None and out is not None:
            # a write that named no file (a logger's, a checkpoint's): where the run was
            e.filename = str(runs[0].dir if len(runs) == 1 else out)
        for r in runs:
            if r.log is not None:
                r.log.close(False)
            rundir.remove(r.dir, r.created)  # not the run's failure, so no record and no run directory
        if ck is not None:
            ck.release()  # its checkpoint stays: the next attempt resumes
        raise
    except BaseException as e:  # every seed's record says why, then the caller sees it
        error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        for r in runs:
            r.record.update(status="failed", error=error, wall_s=round(time.perf_counter() - t0, 3))
            if r.curve is not None:
                r.record["curve"] = list(r.curve.points)
            if r.log is not None:
                r.log.close(False)
            rundir.finish(r.dir, results_path, r.record, r.lines, created=r.created)
        if ck is not None:
            ck.finish()
        raise
    return record_runs(runs, results_path, ck, wall=round(time.perf_counter() - t0, 3))


# ----------------------------------------------------------------------------------------
# the steps


def prepare(cfgs: list[RunConfig], spec: PESpec | None, *, stacked: bool, sized: bool = True) -> Prepared:
    """The task, each seed's data and evaluation sets, and the lengths they fix, validated
    before anything is written; ``sized``: the memory check first (:mod:`synthlab.run.sizing`)."""
    from synthlab.run.data import DataModule

    cfg0 = cfgs[0]
    tc = cfg0.train
    task = make_task(cfg0)
    spec = specs.encoding(cfg0) if spec is None else spec
    scheme = specs.position_scheme(cfg0)
    fix_cublas_workspace(tc.deterministic)  # before any CUDA call of the run, the memory check's too
    if tc.check_memory and sized:  # before any set or batch is built: a few samples give the lengths
        at_once = copy.deepcopy(cfg0)  # S models at once: as one run with S times the batch (activations dominate)
        at_once.train.batch_size = tc.batch_size * len(cfgs)
        check_run_fits(at_once, spec, scheme, task)
    # data first: the evaluation sets fix the true lengths
    dms = [
        DataModule(task, c.train.seed, tc.batch_size, tc.steps, tc.n_train, scheme, tc.eval_samples, tc.data_workers)
        for c in cfgs
    ]
    sets = [dm.eval_sets() for dm in dms]
    if stacked:
        check_shapes(task, dms, [c.train.seed for c in cfgs])
    lengths = [
        (
            max(dm.stream.max_len, dm.stream.batch(0).ids.shape[1]),
            max((len(x) for parts in s.values() for _, _, xs in parts for x in xs), default=0),
        )
        for dm, s in zip(dms, sets)
    ]  # each seed's (train, eval), as its own run measures them
    train_len, eval_len = max(t for t, _ in lengths), max(e for _, e in lengths)
    max_len = validate_combination(cfg0, spec, scheme, train_len, eval_extent(task, eval_len))
    own = {max_len_of(cfg0, scheme, t, eval_extent(task, e)) for t, e in lengths}
    if len(own) > 1:  # each seed alone sizes its model (position tables) by its own sets: they must agree
        raise NotBatchable(
            f"batched seeds: the seeds' sequences differ in length (model sizes {sorted(own)}); "
            "set model.max_len or train these seeds separately"
        )
    # PoSE interpolates at one static factor L_t / L_c in training and at evaluation (see
    # indices.PoSE.rope_factor); other runs scale at evaluation only
    rope_factor = scheme.rope_factor(train_len) if scheme is not None and cfg0.rope_scaling else None
    return Prepared(cfgs, task, spec, scheme, dms, sets, train_len, max_len, rope_factor)


def build(
    prep: Prepared, hooks: Sequence[Report | None], *, stacked: bool, factory: usermodel.Factory | None = None
) -> Built:
    """Each seed's model with the initial weights its own run draws, and the LightningModule
    training them: one model, or the seeds stacked into one."""
    import lightning as L

    cfg0, task = prep.cfgs[0], prep.task
    models = []
    for c in prep.cfgs:
        L.seed_everything(c.train.seed, workers=False, verbose=False)
        models.append(
            model_for(c, task, prep.spec, max_len=prep.max_len)
            if factory is None
            else usermodel.build(factory, c, len(task.vocab) + 1, prep.max_len)
        )
    n_params = int(sum(p.numel() for p in models[0].parameters()))
    described: dict[str, Any]
    if factory is None:
        described = {
            "d_model": cfg0.model.d_model,
            "n_layers": cfg0.model.n_layers,
            "n_heads": cfg0.model.n_heads,
            "params": n_params,
        }
        named: dict[str, Any] = {}
    else:
        described = {"factory": usermodel.factory_name(factory), "params": n_params}
        named = {"model_factory": described["factory"]}
    if prep.rope_factor is not None:
        for model in models:
            cast(Any, model).set_rope_scaling(cfg0.rope_scaling, prep.rope_factor, prep.train_len)
    tc = cfg0.train
    log_every = max(1, tc.steps // 200)
    if not stacked:
        return Built(
            models, make_module(models[0], cfg0, log_every, hooks[0]), prep.dms[0], described, named, log_every
        )
    from synthlab.model.stacked import stack_models

    seeds = [c.train.seed for c in prep.cfgs]
    together = stack_models(models)
    return Built(
        models,
        make_stacked_module(together, cfg0, seeds, log_every, hooks),
        stacked_datamodule([dm.stream for dm in prep.dms], seeds, tc.steps, tc.data_workers),
        described,
        named,
        log_every,
        together,
    )


def start(
    prep: Prepared,
    built: Built,
    ck: RunCheckpoints | None,
    out: str | os.PathLike | None,
    results_path: Path | None,
    study: str | None,
    trials: Sequence[int | None],
    *,
    stacked: bool,
    quiet: bool,
) -> list[Run]:
    """Each seed's run id (a resumed attempt's), its record before training and, with ``out``,
    its run directory with config.json; what runs killed outright left half made goes first."""
    fresh = [rundir.make_run_id(c.task, prep.spec.name, c.train.seed) for c in prep.cfgs]
    ids = ck.run_ids(fresh) if ck is not None else fresh
    batched = {"batched": len(prep.cfgs)} if stacked else {}
    runs = []
    for c, run_id, trial in zip(prep.cfgs, ids, trials):
        record = new_record(c, prep.spec, run_id, built.described, prep.train_len, study, trial)
        record["train"].update(batched)
        runs.append(Run(c, run_id, Path(out) / run_id if out is not None else None, record))
    if ck is not None and ck.resuming and not quiet:
        what = f"{len(runs)} seeds" if stacked else runs[0].run_id
        print(f"resuming {what} at step {ck.resume_step} from {ck.path}", file=sys.stderr)
    if out is not None:  # what runs killed outright (SIGKILL, the OOM killer) left half made in OUT
        gone = rundir.clean_half_made(out, results_path)
        if gone and not quiet:
            print(
                f"synthlab: removed {len(gone)} run director{'y' if len(gone) == 1 else 'ies'} a killed run left "
                f"half made: {', '.join(str(d) for d in gone[:3])}{', ...' if len(gone) > 3 else ''}",
                file=sys.stderr,
            )
    made: list[Run] = []
    try:
        for r in runs:  # everything is validated and built: now the run directories
            if r.dir is not None:
                r.created = rundir.make(
                    r.dir,
                    run_config(
                        r.cfg, r.run_id, prep.max_len, prep.rope_factor, prep.train_len, {**built.named, **batched}
                    ),
                )
                made.append(r)
    except BaseException:
        for r in made:
            rundir.remove(r.dir, r.created)
        if ck is not None:
            ck.release()
        raise
    return runs


def context(prep: Prepared, i: int, model: torch.nn.Module) -> Any:
    """Seed ``i``'s evaluation context now, on the device its model is on: for the curve's
    points and the final evaluation alike."""
    dm = prep.dms[i]
    return eval_context(
        prep.cfgs[i],
        prep.task,
        prep.spec,
        prep.scheme,
        dm.pad_id,
        next(model.parameters()).device,
        prep.rope_factor,
        max(prep.train_len, dm.stream.max_len),
    )


def fit_runs(
    prep: Prepared,
    built: Built,
    runs: list[Run],
    ck: RunCheckpoints | None,
    hooks: Sequence[Report | None],
    logger: str,
    progress: bool,
) -> dict[str, Any]:
    """The Lightning fit, with each run's logger and (one model) its learning curve;
    :func:`synthlab.run.fitting.fit`'s answer."""
    tc = prep.cfgs[0].train
    for r in runs:
        # CPU results repeat exactly for one thread count (reductions split by thread)
        r.record["train"]["threads"] = torch.get_num_threads()
        r.record["train"]["deterministic"] = tc.deterministic
        r.log = loggers.open_logger(logger, r.dir, r.run_id, {"run_id": r.run_id, **r.cfg.to_dict(), **built.named})
        r.record["logs"] = r.log.record if r.log is not None else None
    more: dict[str, Any] = {"checkpoints": ck} if ck is not None else {}
    first, model = runs[0], built.models[0]
    if tc.eval_every:  # one model: batched seeds take no learning curve
        first.curve = curve_callback(
            tc.eval_every, tc.steps, model, prep.sets[0], lambda: context(prep, 0, model), hooks[0], first.log
        )
        more["callbacks"] = [first.curve]
    if first.log is not None:  # one model: batched seeds log to no logger
        more.update(logger=first.log.lightning, log_every=built.log_every)
    desc = f"{prep.cfgs[0].task} {prep.spec.name}" + (f" x{len(runs)} seeds" if built.stacked is not None else "")
    return fit(built.module, built.datamodule, prep.cfgs[0], progress=progress, desc=desc, **more)


def evaluate_runs(prep: Prepared, built: Built, runs: list[Run], info: dict[str, Any]) -> None:
    """Each seed's trained model evaluated on every split into its record, or its record failed."""
    trained = stack_back(built.module, built.stacked) if built.stacked is not None else built.models
    for i, (r, model) in enumerate(zip(runs, trained)):
        r.record["device"] = info["device"]
        r.record["machine"] = machine.describe(info["root_device"])  # with the GPU it trained on
        r.lines += [{"step": s, "loss": v} for s, v in built.module.losses_of(i)]
        if r.curve is not None:
            r.record["curve"] = list(r.curve.points)
            r.lines += r.curve.points
        r.record["train"]["train_len"] = max(prep.train_len, prep.dms[i].stream.max_len)
        failure = built.module.failure_of(i)
        reason = failure[0] if failure is not None else None
        if reason is None and not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
            reason = "diverged: non-finite parameters after training"
        if reason is None:
            # Lightning's teardown moved the model to the CPU: evaluate on the device it
            # trained on (as the curve's points were), then keep the CPU copy for saving
            model.to(info["root_device"])
            evaluate_into(r.record, r.lines, model, prep.sets[i], context(prep, i, model), prep.task)
            r.model = model.cpu()
        else:
            r.record["status"] = "failed"
            r.record["error"] = reason
            at = failure[1] if failure is not None else None
            r.record["train"]["steps_done"] = at if at is not None else info["steps_done"]
        if r.log is not None:
            r.log.close(reason is None)


def record_runs(
    runs: list[Run], results_path: Path | None, ck: RunCheckpoints | None, wall: float
) -> list[dict[str, Any]]:
    """Every seed's files, then its record; a failure first (a full disk, Ctrl-C) removes the
    run directories not recorded and keeps the checkpoint to resume from. ``wall``: the
    run's time (batched seeds: the batch's, which every seed waited for)."""
    from safetensors.torch import save_model

    recorded = 0
    try:
        for r in runs:
            r.record["wall_s"] = wall
            with naming(r.dir if r.dir is not None else results_path or "."):  # a failed write names where it went
                rundir.write(r.dir, r.lines, r.model, save_model)
        for r in runs:
            if results_path is not None:
                append_record(results_path, r.record)
            recorded += 1
    except BaseException:
        for r in runs[recorded:]:
            rundir.remove(r.dir, r.created)
        if ck is not None:
            ck.release()
        raise
    for r in runs:
        rundir.seal(r.dir)
    if ck is not None:
        ck.finish()  # every seed has its record
    return [clean(r.record) for r in runs]


# ----------------------------------------------------------------------------------------
# what a run writes


def new_record(
    cfg: RunConfig,
    spec: PESpec,
    run_id: str,
    model: dict[str, Any],
    train_len: int,
    study: str | None,
    trial: int | None,
) -> dict[str, Any]:
    """A run's result record before training (docs/interfaces.md): the one place its fields
    are laid out, for single runs and batched seeds alike."""
    tc = cfg.train
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "task": cfg.task,
        "task_params": cfg.task_params,
        "task_revision": generators.TASKS[cfg.task].REVISION,
        "pe_revision": PE_REVISION,
        "pe": spec.name,
        "pe_params": spec.params,
        **specs.record_fields(cfg, spec),
        "rope_scaling": cfg.rope_scaling,
        "preset": cfg.preset,
        # every setting that changes what is learnt, so that grids tell runs apart by their record
        # alone (a `synthlab train` run keeps no --set keys otherwise)
        "model": {
            **model,
            "dropout": cfg.model.dropout,
            "causal": cfg.model.causal,
            "tie_embeddings": cfg.model.tie_embeddings,
        },
        "train": {
            "steps": tc.steps,
            "batch_size": tc.batch_size,
            "lr": tc.lr,
            "seed": tc.seed,
            "train_len": train_len,
            "warmup": tc.warmup,
            "schedule": tc.schedule,
            "weight_decay": tc.weight_decay,
            "grad_clip": tc.grad_clip,
            "n_train": tc.n_train,
            "eval_samples": tc.eval_samples,
            "precision": tc.precision,
            "compile": tc.compile,
            "compile_mode": tc.compile_mode,
        },
        "metrics": {},
        "by_length": None,
        "curve": [] if tc.eval_every else None,
        "logs": None,
        "wall_s": None,
        "device": None,
        "machine": machine.describe(),
        "synthlab": __version__,
        "git": rundir.git_hash(),
        "study": study,
        "trial": trial,
        "status": "ok",
    }


def run_config(
    cfg: RunConfig,
    run_id: str,
    max_len: int,
    rope_factor: float | None,
    train_len: int,
    named: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run directory's config.json holds (``load_run`` rebuilds the model from it)."""
    return {
        **cfg.to_dict(),
        "max_len": max_len,
        "run_id": run_id,
        "rotary_pairs": CURRENT_PAIRS,
        "rope_factor": rope_factor,
        "train_len": train_len,
        "pe_revision": PE_REVISION,
        **(named or {}),
    }


def evaluate_into(
    record: dict[str, Any],
    lines: list[dict[str, Any]],
    model: torch.nn.Module,
    sets: dict[str, Any],
    ctx: Any,
    task: Any,
) -> None:
    """Evaluate a trained model on every split into its record (metrics, by_length) and its
    metrics.jsonl lines (per group, then per split)."""
    metrics, groups = evaluate(model, sets, ctx)
    record["metrics"] = metrics
    record["by_length"] = by_length(task, groups)
    for split, per in groups.items():
        lines += [{"split": split, "group": k, **v} for k, v in per.items()]
    lines += [{"split": split, **v} for split, v in metrics.items()]
