"""The LightningModules a run trains: one model (:func:`make_module`) or S seeds stacked into one
(:func:`make_stacked_module`, over :mod:`synthlab.model.stacked`), with one optimiser and
learning-rate schedule. Both tell each seed's logged losses (``losses_of``) and why it failed
(``failure_of``) alike, so that the pipeline records a seed the same way either way.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from synthlab.core.config import RunConfig
from synthlab.run.curves import Report
from synthlab.run.fitting import QuickHookName


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

        def losses_of(self, seed: int) -> list[tuple[int, float]]:
            return [(s, float(v)) for s, v in self.losses]

        def failure_of(self, seed: int) -> tuple[str, int | None] | None:
            """Why training failed and at which step (None: the steps the trainer did)."""
            return (self.failure, None) if self.failure is not None else None

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["synthlab_losses"] = [[int(s), float(v)] for s, v in self.losses]

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.losses = [(int(s), float(v)) for s, v in checkpoint.get("synthlab_losses", [])]

        def configure_optimizers(self) -> Any:  # the Lightning optimizer config dict
            decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
            other = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
            return optimizer_and_schedule(decay, other, self.tc)

    return SynthModule()


def make_stacked_module(
    stacked: Any, cfg: RunConfig, seeds: list[int], log_every: int, reports: Sequence[Report | None]
) -> Any:
    """The LightningModule training a :class:`~synthlab.model.stacked.StackedModels`."""
    import lightning as L

    class StackedModule(QuickHookName, L.LightningModule):
        """Sum over seeds of each seed's own loss on its loss positions; per-seed clipping."""

        def __init__(self) -> None:
            super().__init__()
            self.tc = cfg.train
            self.S = len(seeds)
            # the stacked leaves as this module's Parameters (moved, optimised and saved with it);
            # the template model rides along for its buffers, its own weights unused and frozen
            self.stacked_params = torch.nn.ParameterDict(
                {n.replace(".", "__"): torch.nn.Parameter(p.detach()) for n, p in stacked.params.items()}
            )
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
                        self.failures[i] = (
                            f"diverged: non-finite training loss ({losses[i].item()}) at step {step}",
                            step,
                        )
                if len(self.failures) == self.S:
                    self.trainer.should_stop = True
            if log_every and (step % log_every == 0 or step == self.tc.steps - 1):
                self.losses.append((step, losses.detach()))
                values = losses.detach().tolist()  # a host sync at log steps only
                for i, report in enumerate(reports):
                    if report is not None and i not in self.failures:
                        report(step, {"loss": values[i]})
            return losses.sum()

        def losses_of(self, seed: int) -> list[tuple[int, float]]:
            return [(s, float(v[seed])) for s, v in self.losses]

        def failure_of(self, seed: int) -> tuple[str, int | None] | None:
            return self.failures.get(seed)

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["synthlab_losses"] = [[int(st), [float(x) for x in v]] for st, v in self.losses]
            checkpoint["synthlab_failures"] = [[int(i), r, int(st)] for i, (r, st) in self.failures.items()]

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.losses = [(int(st), torch.tensor(v)) for st, v in checkpoint.get("synthlab_losses", [])]
            self.failures = {int(i): (str(r), int(st)) for i, r, st in checkpoint.get("synthlab_failures", [])}

        def configure_gradient_clipping(
            self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
        ) -> None:
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
