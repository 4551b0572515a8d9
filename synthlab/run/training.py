"""Train one model on one task and evaluate every split: ``synthlab.train(task, pe, ...)``.

``resolve_config`` (preset + overrides, all validated) -> evaluation sets -> run directory ->
Lightning fit -> evaluation of every split -> one result record appended to ``results.jsonl``.
Metric values are fractions in [0, 1]. The flow step by step: docs/architecture.md, "One run,
start to end"; the record: docs/interfaces.md.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence, cast

import torch
import torch.nn.functional as F

from synthlab import __version__, generators
from synthlab.core.config import RunConfig, apply_overrides, validate_fields
from synthlab.core.errors import check_seed, did_you_mean, naming
from synthlab.model.encoders.rotary import CURRENT_PAIRS
from synthlab.model.registry import PE_REVISION, PESpec
from synthlab.plan.presets import build_config
from synthlab.run import loggers, machine, rundir, specs, usermodel
from synthlab.run.checkpoints import RunCheckpoints
from synthlab.run.curves import Report, check_report, curve_callback, eval_context
from synthlab.run.evaluation import by_length, check_metrics, decode_width, evaluate
from synthlab.run.fitting import QuickHookName, deterministic, fit, fix_cublas_workspace, threads
from synthlab.run.records import SCHEMA, clean, scan_records
from synthlab.run.sizing import check_run_fits

# ----------------------------------------------------------------------------------------
# configuration


def _model_api() -> Any:
    import synthlab.model as m

    return m


def resolve_config(task: str, pe: str, preset: str = "quick", overrides: dict[str, Any] | None = None, *,
                   seed: int = 0, positions: str | None = None, rope_scaling: str | None = None,
                   probe: bool = True) -> RunConfig:
    """The validated :class:`RunConfig` of one run; nothing is built, trained or written.

    Raises ValueError (naming the key and what is allowed) for an unknown task / preset /
    setting, a wrong type or range, a bad pe spec or positions scheme, or an impossible
    combination (``validate_combination`` of the model, with sequence lengths probed from the
    task's splits when ``probe``).
    """
    return _resolve(task, pe, preset, overrides, seed=seed, positions=positions, rope_scaling=rope_scaling,
                    probe=probe)[0]


def cell_config(cell: Any, preset: str, *, probe: bool = True) -> RunConfig:
    """The validated :class:`RunConfig` of a sweep cell (:class:`synthlab.plan.cells.Cell`): the config
    defaults + the cell's overrides, which hold its sweep file's whole preset, its axis values and
    ``--set``; no installed file is read by name (ValueError as :func:`resolve_config`)."""
    return _resolve(cell.task, cell.encoding, preset, cell.overrides, seed=cell.seed, positions=cell.scheme,
                    rope_scaling=cell.rope_scaling, probe=probe, installed=False, dape_k=cell.dape_k,
                    pose_chunks=cell.pose_chunks)[0]


def _resolve(task: str, pe: str, preset: str, overrides: dict[str, Any] | None, *, seed: int,
             positions: str | None, rope_scaling: str | None, probe: bool,
             installed: bool = True, dape_k: int | None = None, pose_chunks: int | None = None) -> tuple[RunConfig, PESpec]:
    """:func:`resolve_config` and the parsed pe spec, which the run is handed (parsed once);
    ``installed``: start from the installed family file's preset (else the defaults);
    ``dape_k``, ``pose_chunks``: a sweep cell's axes (fields of the config, :mod:`synthlab.run.specs`)."""
    if not isinstance(task, str) or task not in generators.TASKS:
        hint = did_you_mean(task, list(generators.TASKS)) or " (see `synthlab tasks`)"
        raise ValueError(f"unknown task {task!r}{hint}")
    check_seed(seed)
    cfg = build_config(task, pe, preset, seed=int(seed), positions=positions, rope_scaling=rope_scaling,
                       installed=installed)
    names = tuple(generators.TASKS[task].PARAMS)
    cfg = apply_overrides(cfg, overrides, names)
    t = generators.get_task(task, **cfg.task_params)  # types and checks the task parameters
    cfg.task_params = dict(t.params)
    cfg.dape_k, cfg.pose_chunks = dape_k, pose_chunks
    validate_fields(cfg)
    check_metrics(t)
    m = _model_api()
    base = m.parse_pe(cfg.pe)
    cfg.pe = base.name  # canonical; a dape_k axis's kernel stays in its field
    spec, scheme = specs.encoding(cfg, base), specs.position_scheme(cfg)
    # a pose_chunks axis's number stays in its field; "pose" named, so every check sees positions
    cfg.positions = (cfg.positions or "pose").strip() if cfg.pose_chunks else scheme.name if scheme else None
    if cfg.rope_scaling is not None and not spec.rotary:
        raise ValueError(f"rope_scaling={cfg.rope_scaling!r} needs a rotary encoding (rope, xpos, bipe-rope), got pe={spec.name!r}")
    if not cfg.model.causal and t.scoring != "placeholder":
        raise ValueError("model.causal=false (bidirectional encoder) needs a placeholder-scored task "
                         f"(the CHE tasks, one length per batch); task {task!r} pads variable-length batches")
    if probe:
        train_len, eval_len = _probe_lengths(t, cfg.train.seed)
        _validate_combination(cfg, spec, scheme, train_len, _eval_extent(t, eval_len))
    return cfg, spec


def make_task(cfg: RunConfig) -> Any:
    """The task of a resolved config (parameters left at None keep the task's default)."""
    return generators.get_task(cfg.task, **{k: v for k, v in cfg.task_params.items() if v is not None})


def _probe_lengths(task: Any, seed: int) -> tuple[int, int]:
    from synthlab.run.data import probe_lengths

    return probe_lengths(task, seed)


def _eval_extent(task: Any, eval_len: int) -> int:
    """The longest sequence evaluation feeds the model: greedy decoding may run past the data."""
    return decode_width(eval_len) if task.scoring == "greedy" else eval_len


def _position_extent(scheme: Any) -> int:
    """Largest index a training-time scheme can produce + 1 (randomized: max; PoSE: target)."""
    return int(scheme.max_position) if scheme is not None else 0


def _max_len(cfg: RunConfig, scheme: Any, train_len: int, eval_len: int) -> int:
    if cfg.model.max_len is not None:
        return cfg.model.max_len
    return max(train_len, eval_len, _position_extent(scheme))


def _validate_combination(cfg: RunConfig, spec: PESpec, scheme: Any, train_len: int, eval_len: int) -> int:
    max_len = _max_len(cfg, scheme, train_len, eval_len)
    _model_api().validate_combination(spec, scheme, cfg.model.causal, max_len, eval_len)
    if scheme is not None and train_len > scheme.max_position:
        raise ValueError(f"--positions {scheme.name}: the training sequences ({train_len} tokens) are longer than "
                         f"its range ({scheme.max_position}); raise it to at least {train_len}")
    return max_len


def model_for(cfg: RunConfig, task: Any, spec: PESpec | None = None, *, max_len: int,
              revision: int = PE_REVISION) -> torch.nn.Module:
    """The Transformer of a run (the one place it is built, for training and for
    ``load_run``): ``cfg.model``'s shape, the task's vocabulary (+ the pad id) and BiPE tokens,
    the encoding ``spec`` (``cfg.pe`` parsed when not given). ``revision``: the encodings'
    forms; ``load_run`` passes the one a saved run trained with."""
    m = _model_api()
    return m.Transformer(
        specs.encoding(cfg) if spec is None else spec, vocab_size=len(task.vocab) + 1, d_model=cfg.model.d_model,
        n_layers=cfg.model.n_layers, n_heads=cfg.model.n_heads, max_len=max_len, dropout=cfg.model.dropout,
        tie_embeddings=cfg.model.tie_embeddings, causal=cfg.model.causal,
        separator_ids=tuple(task.token_id(s) for s in task.separators),
        segment_start_ids=tuple(task.token_id(s) for s in task.segment_starts), revision=revision,
    )


# ----------------------------------------------------------------------------------------
# Lightning module


def lr_factor(step: int, steps: int, warmup: int, schedule: str) -> float:
    """Warmup (linear from 1/warmup to 1) then decay to 0: linear, cosine, or constant."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def optimizer_and_schedule(decay: Sequence[torch.Tensor], other: Sequence[torch.Tensor], tc: Any) -> dict[str, Any]:
    """A run's optimiser for Lightning: AdamW with weight decay on ``decay`` only (the parameters
    of 2+ dims, as nanoGPT's: matrices, embeddings and learned position tables; not biases,
    LayerNorm or per-head scalars), stepped per step through :func:`lr_factor`'s warmup and decay."""
    groups = [{"params": decay, "weight_decay": tc.weight_decay}, {"params": other, "weight_decay": 0.0}]
    # on a GPU the fused kernel: one launch for every parameter instead of a few per group
    # (elementwise, so deterministic); on CPU the default, whose results the records hold. Not
    # with gradient clipping under mixed precision: Lightning refuses to clip for an optimizer
    # that could unscale gradients itself, as a fused one does
    mixed_clip = bool(tc.grad_clip) and tc.precision != "fp32"
    fused = bool(decay or other) and not mixed_clip and all(p.device.type == "cuda" for p in [*decay, *other])
    opt = torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.999), eps=1e-8, **({"fused": True} if fused else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, tc.steps, tc.warmup, tc.schedule))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def make_module(model: torch.nn.Module, cfg: RunConfig, log_every: int = 0, report: Report | None = None) -> Any:
    """The LightningModule training ``model`` with ``cfg.train``. Every ``log_every`` steps it
    keeps the loss (metrics.jsonl), hands it to ``report`` and logs ``train/loss`` and ``lr``
    to the trainer's logger when it has one."""
    import lightning as L

    class SynthModule(QuickHookName, L.LightningModule):
        """Next-token / placeholder loss on the task's loss positions (targets = IGNORE elsewhere)."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.tc = cfg.train
            self.log_every = log_every
            self.report = report
            self.losses: list[tuple[int, torch.Tensor | float]] = []  # restored from a checkpoint as floats
            self.failure: str | None = None
            self.last_loss: torch.Tensor | None = None
            # train.compile: the compiled graph trains the same parameters; it is kept off the
            # module tree so that checkpoints and the saved weights keep the model's own names
            step_model = torch.compile(model, mode=cfg.train.compile_mode) if cfg.train.compile else model
            object.__setattr__(self, "step_model", step_model)

        def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
            net: Any = self.step_model if self.training else self.model  # evaluation (varied shapes) runs eagerly
            return net(ids) if positions is None else net(ids, positions=positions)

        def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor | None:
            ids, tgt = batch[0], batch[1]  # (B, T), (B, T)
            logits = self(ids, batch[2] if len(batch) > 2 else None)  # (B, T, V)
            n = (tgt != -100).sum().clamp_min(1)
            loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten(), ignore_index=-100, reduction="sum") / n
            step = self.global_step
            # a host sync per step is free on CPU; on an accelerator check every 16 steps (a
            # NaN loss poisons the weights, so the next check still sees it)
            if (loss.device.type == "cpu" or step % 16 == 0) and not torch.isfinite(loss):
                self.failure = f"diverged: non-finite training loss ({loss.item()}) at step {step}"
                self.trainer.should_stop = True
                return None
            self.last_loss = loss.detach()
            last = step == self.tc.steps - 1
            if self.log_every and (step % self.log_every == 0 or last):
                self.losses.append((step, self.last_loss))
                if self.report is not None:  # a host sync at log steps only
                    self.report(step, {"loss": float(self.last_loss)})
            if self.log_every and self.logger is not None and ((step + 1) % self.log_every == 0 or last):
                self._log(last)
            return loss

        def _log(self, last: bool) -> None:
            """``train/loss`` (the detached tensor: read when Lightning flushes, no sync here)
            and ``lr``, at the steps Lightning flushes (its ``log_every_n_steps``: batch k when
            (k + 1) % log_every == 0) and at the last one."""
            assert self.last_loss is not None, "logged after a step"
            self.log("train/loss", self.last_loss, on_step=True, on_epoch=False)
            lr = self.trainer.optimizers[0].param_groups[0]["lr"]  # what this step's update uses
            self.log("lr", torch.tensor(lr, dtype=torch.float64), on_step=True, on_epoch=False)
            if last and (self.global_step + 1) % self.log_every:
                self.trainer.should_stop = True  # Lightning also flushes a stopping step; training ends here anyway

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["synthlab_losses"] = [[int(s), float(v)] for s, v in self.losses]

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.losses = [(int(s), float(v)) for s, v in checkpoint.get("synthlab_losses", [])]

        def configure_optimizers(self) -> Any:  # the Lightning optimizer config dict
            decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
            other = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
            return optimizer_and_schedule(decay, other, self.tc)

    return SynthModule()


# ----------------------------------------------------------------------------------------
# the run


def new_record(cfg: RunConfig, spec: PESpec, run_id: str, model: dict[str, Any], train_len: int,
               study: str | None, trial: int | None) -> dict[str, Any]:
    """A run's result record before training (docs/interfaces.md): the one place its fields
    are laid out, for single runs and batched seeds alike."""
    tc = cfg.train
    return {
        "schema": SCHEMA, "run_id": run_id, "task": cfg.task, "task_params": cfg.task_params,
        "task_revision": generators.TASKS[cfg.task].REVISION, "pe_revision": PE_REVISION,
        "pe": spec.name, "pe_params": spec.params, **specs.record_fields(cfg, spec), "rope_scaling": cfg.rope_scaling,
        "preset": cfg.preset,
        # every setting that changes what is learnt, so that grids tell runs apart by their record
        # alone (a `synthlab train` run keeps no --set keys otherwise)
        "model": {**model, "dropout": cfg.model.dropout, "causal": cfg.model.causal,
                  "tie_embeddings": cfg.model.tie_embeddings},
        "train": {"steps": tc.steps, "batch_size": tc.batch_size, "lr": tc.lr, "seed": tc.seed, "train_len": train_len,
                  "warmup": tc.warmup, "schedule": tc.schedule, "weight_decay": tc.weight_decay,
                  "grad_clip": tc.grad_clip, "n_train": tc.n_train, "eval_samples": tc.eval_samples,
                  "precision": tc.precision, "compile": tc.compile, "compile_mode": tc.compile_mode},
        "metrics": {}, "by_length": None, "curve": [] if tc.eval_every else None, "logs": None,
        "wall_s": None, "device": None, "machine": machine.describe(), "synthlab": __version__,
        "git": rundir.git_hash(),
        "study": study, "trial": trial, "status": "ok",
    }


def run_config(cfg: RunConfig, run_id: str, max_len: int, rope_factor: float | None, train_len: int,
               named: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run directory's config.json holds (``load_run`` rebuilds the model from it)."""
    return {**cfg.to_dict(), "max_len": max_len, "run_id": run_id, "rotary_pairs": CURRENT_PAIRS,
            "rope_factor": rope_factor, "train_len": train_len, "pe_revision": PE_REVISION, **(named or {})}


def evaluate_into(record: dict[str, Any], lines: list[dict[str, Any]], model: torch.nn.Module,
                  sets: dict[str, Any], ctx: Any, task: Any) -> None:
    """Evaluate a trained model on every split into its record (metrics, by_length) and its
    metrics.jsonl lines (per group, then per split)."""
    metrics, groups = evaluate(model, sets, ctx)
    record["metrics"] = metrics
    record["by_length"] = by_length(task, groups)
    for split, per in groups.items():
        lines += [{"split": split, "group": k, **v} for k, v in per.items()]
    lines += [{"split": split, **v} for split, v in metrics.items()]


def train(task: str, pe: str, preset: str = "quick", seed: int = 0, out: str | os.PathLike | None = None,
          positions: str | None = None, rope_scaling: str | None = None, quiet: bool = True,
          results: str | os.PathLike | None = None, study: str | None = None, trial: int | None = None,
          overrides: dict[str, Any] | None = None, *, logger: str = loggers.DEFAULT, report: Report | None = None,
          model: usermodel.Factory | None = None, **more_overrides: Any) -> dict[str, Any]:
    """Train one model on ``task`` with encoding ``pe`` and evaluate every split.

    ``overrides`` (and extra keyword arguments) are ``--set`` settings: ``{"d_model": 32,
    "train.lr": 3e-4, "task.n_pairs": 64}``. With ``out`` the run keeps ``out/<run_id>/``
    (config.json, metrics.jsonl, model.safetensors, the logger's files) and appends its record
    to ``out/results.jsonl`` (or ``results``); with neither, nothing is written.

    Run options (no part of the config or the result): ``logger`` (:mod:`synthlab.run.loggers`:
    csv, tensorboard, wandb, mlflow, none); ``report(step, values)``, called with the loss at
    every log step and with the metrics at each ``train.eval_every`` point
    (:mod:`synthlab.run.curves`); ``model``, a factory of the user's own module used instead of
    synthlab's Transformer (:mod:`synthlab.run.usermodel`).

    Returns the result record (docs/interfaces.md). Bad input raises ValueError before
    anything is written; a diverged run returns ``status: "failed"`` with the reason; an
    OSError (disk full, read-only) or Ctrl-C leaves no run directory and no record.
    """
    t0 = time.perf_counter()
    ov = {**(overrides or {}), **more_overrides}
    cfg, spec = _resolve(task, pe, preset, ov, seed=seed, positions=positions, rope_scaling=rope_scaling, probe=False)
    return run(cfg, out=out, results=results, quiet=quiet, study=study, trial=trial, t0=t0, spec=spec, logger=logger,
               report=report, model=model)


def run(cfg: RunConfig, out: str | os.PathLike | None = None, results: str | os.PathLike | None = None,
        quiet: bool = True, study: str | None = None, trial: int | None = None, t0: float | None = None, *,
        spec: PESpec | None = None, logger: str = loggers.DEFAULT, report: Report | None = None,
        model: usermodel.Factory | None = None) -> dict[str, Any]:
    """Train and evaluate a resolved :class:`RunConfig` (see :func:`train`); ``spec``: its
    parsed ``cfg.pe`` when the caller has it (the spec is parsed once per run)."""
    import lightning as L
    from safetensors.torch import save_model

    from synthlab.run.data import DataModule

    t0 = time.perf_counter() if t0 is None else t0
    loggers.check_logger(logger)
    hook = check_report(report)
    factory = model  # the user's model factory, or None: synthlab's Transformer
    if factory is not None:
        usermodel.check_factory(factory)
    rundir.check_destinations(out, results)
    task = make_task(cfg)
    spec = specs.encoding(cfg) if spec is None else spec
    scheme = specs.position_scheme(cfg)
    tc = cfg.train
    fix_cublas_workspace(tc.deterministic)  # before any CUDA call of the run, the memory check's too

    if tc.check_memory and factory is None:  # before any set or batch is built: a few samples give the lengths
        check_run_fits(cfg, spec, scheme, task)
    # data first: the evaluation sets fix the true lengths, validated before anything is written
    dm = DataModule(task, tc.seed, tc.batch_size, tc.steps, tc.n_train, scheme, tc.eval_samples, tc.data_workers)
    sets = dm.eval_sets()
    eval_len = max((len(s) for parts in sets.values() for _, _, ss in parts for s in ss), default=0)
    train_len = max(dm.stream.max_len, dm.stream.batch(0).ids.shape[1])
    max_len = _validate_combination(cfg, spec, scheme, train_len, _eval_extent(task, eval_len))

    L.seed_everything(tc.seed, workers=False, verbose=False)
    if factory is None:
        model = model_for(cfg, task, spec, max_len=max_len)
        described: dict[str, Any] = {"d_model": cfg.model.d_model, "n_layers": cfg.model.n_layers,
                                     "n_heads": cfg.model.n_heads}
        named: dict[str, Any] = {}
    else:
        model = usermodel.build(factory, cfg, len(task.vocab) + 1, max_len)
        described = {"factory": usermodel.factory_name(factory)}
        named = {"model_factory": described["factory"]}
    n_params = int(sum(p.numel() for p in model.parameters()))
    # PoSE interpolates at one static factor L_t / L_c in training and at evaluation (see
    # indices.PoSE.rope_factor); other runs scale at evaluation only (_rope_scaled)
    rope_factor = scheme.rope_factor(train_len) if scheme is not None and cfg.rope_scaling else None
    if rope_factor is not None:
        cast(Any, model).set_rope_scaling(cfg.rope_scaling, rope_factor, train_len)
    log_every = max(1, tc.steps // 200)
    module = make_module(model, cfg, log_every, hook)
    progress = (not quiet) and sys.stdout.isatty()

    # a run killed after a checkpoint resumes from it, under the run id it began with
    ck_extra = {"pe_revision": PE_REVISION, "synthlab": __version__, **named}
    ck = RunCheckpoints.open(out, cfg, ck_extra)
    results_path = Path(results) if results is not None else (Path(out) / "results.jsonl" if out is not None else None)
    if ck is not None and ck.run_id is not None and results_path is not None and any(
            r.get("run_id") == ck.run_id for r in scan_records(results_path)[0]):
        # the earlier attempt has its record (killed between the record and its checkpoint's
        # removal): resuming would train it again and record its run id twice; this is a new run
        ck.finish()
        ck = RunCheckpoints.open(out, cfg, ck_extra)
    again = ck is not None and ck.run_id is not None
    run_id = ck.run_id if ck is not None and ck.run_id is not None else rundir.make_run_id(cfg.task, spec.name, tc.seed)
    run_dir = Path(out) / run_id if out is not None else None
    record = new_record(cfg, spec, run_id, {**described, "params": n_params}, train_len, study, trial)
    lines: list[dict[str, Any]] = []
    if ck is not None:
        ck.begin(run_id)
        if ck.resuming and not quiet:
            print(f"resuming {run_id} at step {ck.resume_step} from {ck.path}", file=sys.stderr)
    if again:
        rundir.remove(run_dir)  # what a killed attempt left (its checkpoint is elsewhere)
    created: list[Path] = []  # the parents of the run directory it made (removed with it)
    if out is not None:  # what runs killed outright (SIGKILL, the OOM killer) left half made in OUT
        gone = rundir.clean_half_made(out, results_path)
        if gone and not quiet:
            print(f"synthlab: removed {len(gone)} run director{'y' if len(gone) == 1 else 'ies'} a killed run left "
                  f"half made: {', '.join(str(d) for d in gone[:3])}{', ...' if len(gone) > 3 else ''}",
                  file=sys.stderr)
    if run_dir is not None:  # everything is validated and built: now the run directory
        created = rundir.make(run_dir, run_config(cfg, run_id, max_len, rope_factor, train_len, named))

    def context() -> Any:  # the evaluation context now: for the curve's points and the final evaluation alike
        return eval_context(cfg, task, spec, scheme, dm.pad_id, next(model.parameters()).device, rope_factor,
                            max(train_len, dm.stream.max_len))

    run_log, curve = None, None
    try:
        with deterministic(tc.deterministic), threads(tc.threads):
            # CPU results repeat exactly for one thread count (reductions split by thread)
            record["train"]["threads"] = torch.get_num_threads()
            record["train"]["deterministic"] = tc.deterministic
            run_log = loggers.open_logger(logger, run_dir, run_id, {"run_id": run_id, **cfg.to_dict(), **named})
            record["logs"] = run_log.record if run_log is not None else None
            more: dict[str, Any] = {"checkpoints": ck} if ck is not None else {}
            if tc.eval_every:
                curve = curve_callback(tc.eval_every, tc.steps, model, sets, context, hook, run_log)
                more["callbacks"] = [curve]
            if run_log is not None:
                more.update(logger=run_log.lightning, log_every=log_every)
            info = fit(module, dm, cfg, progress=progress, desc=f"{cfg.task} {spec.name}", **more)
            record["device"] = info["device"]
            record["machine"] = machine.describe(info["root_device"])  # with the GPU it trained on
            lines += [{"step": s, "loss": float(v)} for s, v in module.losses]
            if curve is not None:
                record["curve"] = list(curve.points)
                lines += curve.points
            train_len = max(train_len, dm.stream.max_len)
            record["train"]["train_len"] = train_len
            failure = module.failure
            if failure is None and not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
                failure = "diverged: non-finite parameters after training"
            if failure is None:
                # Lightning's teardown moved the model to the CPU: evaluate on the device it
                # trained on (as the curve's points were), then keep the CPU copy for saving
                model.to(info["root_device"])
                evaluate_into(record, lines, model, sets, context(), task)
                model.cpu()
            else:
                record["status"] = "failed"
                record["error"] = failure
                record["train"]["steps_done"] = info["steps_done"]
            if run_log is not None:
                run_log.close(failure is None)
    except (KeyboardInterrupt, OSError) as e:  # Ctrl-C, a stopped sweep worker, a full or read-only disk:
        if isinstance(e, OSError) and e.filename is None and run_dir is not None:
            e.filename = str(run_dir)  # a write that named no file (a logger's, a checkpoint's): where the run was
        if run_log is not None:
            run_log.close(False)
        rundir.remove(run_dir, created)     # not the run's failure, so no record and no run directory
        if ck is not None:
            ck.release()  # its checkpoint stays: the next attempt resumes
        raise
    except BaseException as e:  # record the failure, then let the caller see it
        record["status"] = "failed"
        record["error"] = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        record["wall_s"] = round(time.perf_counter() - t0, 3)
        if curve is not None:
            record["curve"] = list(curve.points)
        if run_log is not None:
            run_log.close(False)
        rundir.finish(run_dir, results_path, record, lines, created=created)
        if ck is not None:
            ck.finish()
        raise
    record["wall_s"] = round(time.perf_counter() - t0, 3)
    with naming(run_dir if run_dir is not None else results_path or "."):  # a failed write names where it went
        rundir.finish(run_dir, results_path, record, lines, model if record["status"] == "ok" else None, save_model,
                      created=created)
    if ck is not None:
        ck.finish()  # the run has its record
    return clean(record)
