"""Batched seeds: the seeds of one cell trained together as one stacked model.

``train_seeds(task, pe, seeds=[0, 1, 2])`` trains S runs, built exactly as S calls of
:func:`synthlab.train` would be, as one stacked model (:mod:`synthlab.model.stacked`), then
evaluates, saves and records each seed as its own run. Seeds that cannot stack raise
:class:`NotBatchable` before anything is written. Why the slices equal separate runs, where it
applies, and how a batch checkpoints: docs/architecture.md, "Sweeps: exactly once" (batched
seeds) and "Batched seeds: one stacked model".
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F

from synthlab import __version__
from synthlab.core.config import RunConfig
from synthlab.model.registry import PE_REVISION
from synthlab.run import machine, rundir, specs
from synthlab.run.checkpoints import RunCheckpoints
from synthlab.run.curves import Report, check_report, eval_context
from synthlab.run.data import DataModule, StepLoader, has_batch_overrides, worker_steps
from synthlab.run.fitting import QuickHookName, deterministic, fit, fix_cublas_workspace, threads
from synthlab.run.records import append_record, clean
from synthlab.run.sizing import check_run_fits


class NotBatchable(ValueError):
    """These seeds cannot train as one stacked model (raised before anything is written); they
    can still train one by one."""


def check_batchable(cfgs: Sequence[RunConfig]) -> None:
    """NotBatchable unless ``cfgs`` can train as one stacked model (see the module docstring)."""
    if not cfgs:
        raise ValueError("batched seeds need at least one seed")
    seeds = [c.train.seed for c in cfgs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"batched seeds must differ, got {seeds}")

    def without_seed(c: RunConfig) -> dict[str, Any]:
        d = c.to_dict()
        d["train"].pop("seed")
        return d

    first = without_seed(cfgs[0])
    for c in cfgs[1:]:
        if without_seed(c) != first:
            raise NotBatchable("batched seeds need one config but the seed (seed "
                             f"{c.train.seed} differs from seed {cfgs[0].train.seed} in more than its seed)")
    c = cfgs[0]
    why = ("model.dropout > 0 (vmap would draw other masks than separate runs)" if c.model.dropout > 0 else
           "a training-time position scheme (--positions)" if c.positions else
           "train.eval_every (learning curves)" if c.train.eval_every else
           "train.compile" if c.train.compile else None)
    if why:
        raise NotBatchable(f"batched seeds do not support {why}: train these seeds separately")


class StackedBatches(torch.utils.data.IterableDataset):
    """Step s of every seed's stream, stacked: (ids, targets), each (S, B, T)."""

    def __init__(self, streams: list[Any], seeds: list[int], steps: int, start: int = 0) -> None:
        super().__init__()
        self.streams, self.seeds, self.steps, self.start = streams, seeds, int(steps), int(start)

    def __len__(self) -> int:
        return self.steps

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        batches = [st.batch(step) for st in self.streams]
        shapes = {tuple(b.ids.shape) for b in batches}
        if len(shapes) > 1:
            raise ValueError(f"batched seeds: the seeds' batches at step {step} differ in shape "
                             f"({', '.join(f'seed {s}: {tuple(b.ids.shape)}' for s, b in zip(self.seeds, batches))}); "
                             "this task's lengths vary between batches: train its seeds separately")
        return torch.stack([b.ids for b in batches]), torch.stack([b.targets for b in batches])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for s in worker_steps(self.start, self.steps):
            yield self.batch(s)


def _check_shapes(task: Any, dms: list[DataModule], seeds: list[int], probe: int = 16) -> None:
    """Refuse, before anything is written, tasks whose batches vary in shape between seeds: the
    first ``probe`` steps of every seed (cheap; tasks that pad to each batch's longest sample,
    arithmetic, counting, binfa, nfa, differ by step 1; flip-flop, selective copy, MQAR and
    passkey have one length). A later mismatch stops the batch with every seed's record failed."""
    if has_batch_overrides(task):
        raise NotBatchable(f"batched seeds: task {task.name!r} draws its parameters per batch (one length per "
                         "batch): the seeds' batches differ in shape; train its seeds separately")
    batches = StackedBatches([dm.stream for dm in dms], seeds, probe)
    try:
        for s in range(probe):
            batches.batch(s)
    except ValueError as e:
        raise NotBatchable(str(e)) from None


def _lengths(dm: DataModule, sets: dict[str, Any]) -> tuple[int, int]:
    """A seed's longest training and evaluation sequence, as its own run measures them."""
    train_len = max(dm.stream.max_len, dm.stream.batch(0).ids.shape[1])
    return train_len, max((len(x) for parts in sets.values() for _, _, xs in parts for x in xs), default=0)


def make_stacked_module(stacked: Any, cfg: RunConfig, seeds: list[int], log_every: int,
                        reports: Sequence[Report | None]) -> Any:
    """The LightningModule training a :class:`~synthlab.model.stacked.StackedModels`."""
    import lightning as L

    from synthlab.run.training import optimizer_and_schedule

    class StackedModule(QuickHookName, L.LightningModule):
        """Sum over seeds of each seed's own loss on its loss positions; per-seed clipping."""

        def __init__(self) -> None:
            super().__init__()
            self.tc = cfg.train
            self.S = len(seeds)
            # the stacked leaves as this module's Parameters (moved, optimised and saved with it);
            # the template model rides along for its buffers, its own weights unused and frozen
            self.stacked_params = torch.nn.ParameterDict(
                {n.replace(".", "__"): torch.nn.Parameter(p.detach()) for n, p in stacked.params.items()})
            self.template = stacked.base.requires_grad_(False)
            self.stacked = stacked
            self.names = list(stacked.params)
            self.losses: list[tuple[int, torch.Tensor]] = []  # (step, (S,) losses) at log steps
            self.failures: dict[int, tuple[str, int]] = {}  # seed index -> (reason, step)

        def params(self) -> dict[str, torch.Tensor]:
            return {n: self.stacked_params[n.replace(".", "__")] for n in self.names}

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            self.stacked.params = self.params()
            self.stacked.buffers = dict(self.template.named_buffers())  # where the Trainer moved them
            return self.stacked(ids)  # (S, B, T, V)

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            ids, tgt = batch  # (S, B, T) each
            logits = self(ids)  # (S, B, T, V)
            n = (tgt != -100).flatten(1).sum(1).clamp_min(1)  # (S,)
            per_token = F.cross_entropy(logits.flatten(0, 2), tgt.flatten(), ignore_index=-100, reduction="none")
            losses = per_token.view(self.S, -1).sum(1) / n  # (S,): each seed's loss, as its own run's
            step = self.global_step
            if losses.device.type == "cpu" or step % 16 == 0:  # a host sync; every 16 steps on an accelerator
                for i in torch.nonzero(~torch.isfinite(losses.detach())).flatten().tolist():
                    if i not in self.failures:
                        self.failures[i] = (f"diverged: non-finite training loss ({losses[i].item()}) at step {step}",
                                            step)
                if len(self.failures) == self.S:
                    self.trainer.should_stop = True
            if log_every and (step % log_every == 0 or step == self.tc.steps - 1):
                self.losses.append((step, losses.detach()))
                values = losses.detach().tolist()  # a host sync at log steps only
                for i, report in enumerate(reports):
                    if report is not None and i not in self.failures:
                        report(step, {"loss": values[i]})
            return losses.sum()

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["synthlab_losses"] = [[int(st), [float(x) for x in v]] for st, v in self.losses]
            checkpoint["synthlab_failures"] = [[int(i), r, int(st)] for i, (r, st) in self.failures.items()]

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.losses = [(int(st), torch.tensor(v)) for st, v in checkpoint.get("synthlab_losses", [])]
            self.failures = {int(i): (str(r), int(st)) for i, r, st in checkpoint.get("synthlab_failures", [])}

        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                        gradient_clip_algorithm: str | None = None) -> None:
            """Each seed's gradient clipped by its own norm (torch's clip_grad_norm_ formula)."""
            if not gradient_clip_val:
                return
            grads = [p.grad for p in self.stacked_params.values() if p.grad is not None]
            if not grads:
                return
            sq = torch.stack([g.detach().float().pow(2).reshape(g.shape[0], -1).sum(1) for g in grads]).sum(0)  # (S,)
            coef = (gradient_clip_val / (sq.sqrt() + 1e-6)).clamp(max=1.0)  # (S,)
            for g in grads:
                g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))

        def configure_optimizers(self) -> Any:  # the Lightning optimizer config dict
            # weight decay on matrices, as in a single run: judged by the unstacked shape
            base = dict(self.template.named_parameters())
            decay = [self.stacked_params[n.replace(".", "__")] for n in self.names if base[n].dim() >= 2]
            other = [self.stacked_params[n.replace(".", "__")] for n in self.names if base[n].dim() < 2]
            return optimizer_and_schedule(decay, other, self.tc)

    return StackedModule()


def stacked_datamodule(streams: list[Any], seeds: list[int], steps: int, workers: int | None = None) -> Any:
    """The LightningDataModule of the stacked streams (a resumed batch starts at its step)."""
    import lightning as L

    class StackedDataModule(L.LightningDataModule):
        def train_dataloader(self) -> torch.utils.data.DataLoader:
            start = int(self.trainer.global_step) if self.trainer is not None else 0
            return StepLoader.for_trainer(StackedBatches(streams, seeds, steps, start), self.trainer, workers, streams)

    return StackedDataModule()


def train_seeds(task: str, pe: str, seeds: Sequence[int], preset: str = "quick", out: str | os.PathLike | None = None,
                results: str | os.PathLike | None = None, quiet: bool = True, study: str | None = None,
                trials: Sequence[int | None] | None = None, overrides: dict[str, Any] | None = None, *,
                positions: str | None = None, rope_scaling: str | None = None, reports: Sequence[Report | None] | None = None) -> list[dict[str, Any]]:
    """Train ``seeds`` of one (task, pe, preset, overrides) as one stacked model; returns their
    records in the order of ``seeds``, each as :func:`synthlab.train` would return it (with
    ``train.batched`` = S). ``trials``: each seed's sweep trial number; ``reports``: each seed's
    report hook. Bad input raises ValueError, settings batched seeds do not support
    :class:`NotBatchable` (a ValueError), before anything is written."""
    from synthlab.run.training import _resolve

    t0 = time.perf_counter()
    seeds = [int(s) for s in seeds]
    resolved = [_resolve(task, pe, preset, overrides, seed=s, positions=positions, rope_scaling=rope_scaling, probe=False)
                for s in seeds]
    return run_seeds([c for c, _ in resolved], out=out, results=results, quiet=quiet, study=study, trials=trials,
                     reports=reports, spec=resolved[0][1], t0=t0)


def run_seeds(cfgs: Sequence[RunConfig], out: str | os.PathLike | None = None,
              results: str | os.PathLike | None = None, quiet: bool = True, study: str | None = None,
              trials: Sequence[int | None] | None = None, reports: Sequence[Report | None] | None = None, *,
              spec: Any = None, t0: float | None = None) -> list[dict[str, Any]]:
    """:func:`train_seeds` for resolved configs (one per seed)."""
    import lightning as L
    from safetensors.torch import save_model

    from synthlab.model.stacked import stack_models
    from synthlab.run import training

    t0 = time.perf_counter() if t0 is None else t0
    cfgs = list(cfgs)
    check_batchable(cfgs)
    S = len(cfgs)
    trials = list(trials) if trials is not None else [None] * S
    hooks = [check_report(r) for r in (list(reports) if reports is not None else [None] * S)]
    if len(trials) != S or len(hooks) != S:
        raise ValueError(f"trials and reports need one entry per seed ({S})")
    rundir.check_destinations(out, results)
    cfg0 = cfgs[0]
    tc = cfg0.train
    task = training.make_task(cfg0)
    spec = specs.encoding(cfg0) if spec is None else spec
    seeds = [c.train.seed for c in cfgs]
    fix_cublas_workspace(tc.deterministic)  # before any CUDA call of the run, the memory check's too
    if tc.check_memory:  # S models at once: as one run with S times the batch (activations dominate)
        big = copy.deepcopy(cfg0)
        big.train.batch_size = tc.batch_size * S
        check_run_fits(big, spec, None, task)
    dms = [DataModule(task, c.train.seed, tc.batch_size, tc.steps, tc.n_train, None, tc.eval_samples) for c in cfgs]
    sets = [dm.eval_sets() for dm in dms]
    _check_shapes(task, dms, seeds)
    lengths = [_lengths(dm, st) for dm, st in zip(dms, sets)]  # (train, eval) of each seed
    train_len, eval_len = max(t for t, _ in lengths), max(e for _, e in lengths)
    max_len = training._validate_combination(cfg0, spec, None, train_len, training._eval_extent(task, eval_len))
    own = {training._max_len(cfg0, None, t, training._eval_extent(task, e)) for t, e in lengths}
    if len(own) > 1:  # each seed alone sizes its model (position tables) by its own sets: they must agree
        raise NotBatchable(f"batched seeds: the seeds' sequences differ in length (model sizes {sorted(own)}); "
                           "set model.max_len or train these seeds separately")

    models = []
    for c in cfgs:  # each seed's initial weights exactly as its own run draws them
        L.seed_everything(c.train.seed, workers=False, verbose=False)
        models.append(training.model_for(c, task, spec, max_len=max_len))
    n_params = int(sum(p.numel() for p in models[0].parameters()))
    stacked = stack_models(models)
    log_every = max(1, tc.steps // 200)
    module = make_stacked_module(stacked, cfg0, seeds, log_every, hooks)
    data = stacked_datamodule([dm.stream for dm in dms], seeds, tc.steps, tc.data_workers)

    described = {"d_model": cfg0.model.d_model, "n_layers": cfg0.model.n_layers, "n_heads": cfg0.model.n_heads,
                 "params": n_params}
    results_path = Path(results) if results is not None else (Path(out) / "results.jsonl" if out is not None else None)
    # a batch killed after a checkpoint resumes from it, under its seeds' run ids ("|"-joined:
    # a run id has no "|")
    ck = RunCheckpoints.open(out, cfg0, {"pe_revision": PE_REVISION, "synthlab": __version__, "batched_seeds": seeds})
    earlier = ck.run_id.split("|") if ck is not None and ck.run_id is not None else []
    again = len(earlier) == S
    runs: list[dict[str, Any]] = []
    for i, (c, trial) in enumerate(zip(cfgs, trials)):
        run_id = earlier[i] if again else rundir.make_run_id(c.task, spec.name, c.train.seed)
        record = training.new_record(c, spec, run_id, described, train_len, study, trial)
        record["train"]["batched"] = S
        runs.append({"cfg": c, "run_id": run_id, "record": record, "lines": [], "created": [],
                     "dir": Path(out) / run_id if out is not None else None})
    if ck is not None:
        ck.begin("|".join(r["run_id"] for r in runs))
        if ck.resuming and not quiet:
            print(f"resuming {S} seeds at step {ck.resume_step} from {ck.path}", file=sys.stderr)
    try:
        for r in runs:  # everything is validated and built: now the run directories
            if again:
                rundir.remove(r["dir"])  # what a killed attempt left (its checkpoint is elsewhere)
            if r["dir"] is not None:
                r["created"] = rundir.make(r["dir"], training.run_config(r["cfg"], r["run_id"], max_len, None,
                                                                          train_len, {"batched": S}))
        with deterministic(tc.deterministic), threads(tc.threads):
            for r in runs:
                r["record"]["train"]["threads"] = torch.get_num_threads()
                r["record"]["train"]["deterministic"] = tc.deterministic
            progress = (not quiet) and sys.stdout.isatty()
            info = fit(module, data, cfg0, progress=progress, desc=f"{cfg0.task} {spec.name} x{S} seeds",
                       checkpoints=ck)
            trained = stack_back(module, stacked)
            for i, (r, model, dm) in enumerate(zip(runs, trained, dms)):
                record, lines = r["record"], r["lines"]
                record["device"] = info["device"]
                record["machine"] = machine.describe(info["root_device"])  # with the GPU it trained on
                lines += [{"step": s, "loss": float(v[i])} for s, v in module.losses]
                failure = module.failures.get(i)
                reason = failure[0] if failure else None
                if reason is None and not all(bool(torch.isfinite(p).all()) for p in model.parameters()):
                    reason = "diverged: non-finite parameters after training"
                if reason is None:
                    model.to(info["root_device"])
                    ctx = eval_context(r["cfg"], task, spec, None, dm.pad_id, info["root_device"], None,
                                       max(train_len, dm.stream.max_len))
                    training.evaluate_into(record, lines, model, sets[i], ctx, task)
                    model.cpu()
                else:
                    record["status"] = "failed"
                    record["error"] = reason
                    record["train"]["steps_done"] = failure[1] if failure else info["steps_done"]
                r["model"] = model if reason is None else None
    except (KeyboardInterrupt, OSError):  # not the runs' failure: no records, no run directories
        for r in runs:
            rundir.remove(r["dir"], r["created"])
        if ck is not None:
            ck.release()  # its checkpoint stays: the next attempt resumes
        raise
    except BaseException as e:  # every seed's record says why, then the caller sees it
        for r in runs:
            r["record"].update(status="failed", error=f"{type(e).__name__}: {e}" if str(e) else type(e).__name__,
                               wall_s=round(time.perf_counter() - t0, 3))
            if r["dir"] is not None and not r["dir"].exists():
                r["dir"] = None  # failed before its directory was made
            rundir.finish(r["dir"], results_path, r["record"], r["lines"], created=r["created"])
        if ck is not None:
            ck.finish()
        raise
    wall = round(time.perf_counter() - t0, 3)  # the batch's wall time: every seed waited for all of it
    # every seed's files first, then the records: a full disk while writing them leaves no seed
    # recorded and no run directory, and the checkpoint to resume from (as for one run)
    try:
        for r in runs:
            r["record"]["wall_s"] = wall
            rundir.finish(r["dir"], None, r["record"], r["lines"], r.get("model"), save_model, created=r["created"])
    except BaseException:
        for r in runs:
            rundir.remove(r["dir"], r["created"])
        if ck is not None:
            ck.release()
        raise
    for r in runs:
        if results_path is not None:
            append_record(results_path, r["record"])
    if ck is not None:
        ck.finish()  # every seed has its record
    return [clean(r["record"]) for r in runs]


def stack_back(module: Any, stacked: Any) -> list[torch.nn.Module]:
    """The S trained models, on the CPU, from the module's stacked parameters."""
    stacked.params = {n: p.detach().cpu() for n, p in module.params().items()}
    stacked.base.cpu()
    return [m.requires_grad_(True) for m in stacked.unstack()]

