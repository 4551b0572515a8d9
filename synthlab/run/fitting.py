"""The Lightning Trainer of one run: :func:`fit`, its progress bar, and the scopes a run trains in.

Kept apart from :mod:`synthlab.run.pipeline` (which prepares, builds, evaluates and records
it) so that each stays readable: here is everything that touches ``lightning.Trainer`` itself
(quiet banners, Ctrl-C, checkpoints to resume from, the logger and its flush interval) and the
process-wide torch settings a run changes only for its own duration (thread count,
deterministic algorithms).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import warnings
from typing import Any, Iterator

import torch

from synthlab.core.config import PRECISIONS, RunConfig

# Lightning's private name for the hook it is calling, which it sets on the module around every
# hook (https://github.com/Lightning-AI/pytorch-lightning/pull/8498); there is no public one and no
# upstream request: a version that renames it only loses QuickHookName's shortcut
HOOK_NAME = "_current_fx_name"


class QuickHookName:
    """A LightningModule mixin: Lightning sets :data:`HOOK_NAME` on the module around every
    hook it calls, about 46 times a training step, and each time through nn.Module's
    ``__setattr__`` (its parameter / buffer / submodule checks): about 0.1 ms of host time a
    step (``benchmarks/training.py --size host``: rope 2.57 -> 2.47 ms), which on a GPU is time
    the device waits for launches. The name is a plain string, so it is stored as a plain attribute directly."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == HOOK_NAME:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


def _lightning() -> Any:
    import lightning as L

    return L


def progress_callback(steps: int, desc: str) -> Any:
    """A light tqdm bar (steps, loss, ETA); the loss is read at most ~4 times a second."""
    L: Any = _lightning()
    from tqdm.auto import tqdm

    class Progress(L.Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.bar = tqdm(
                total=steps, initial=trainer.global_step, desc=desc, unit="step", dynamic_ncols=True, leave=False
            )
            self.t = 0.0

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.bar.update(1)
            now = time.monotonic()
            loss = getattr(pl_module, "last_loss", None)  # batched seeds keep none: the bar shows steps only
            if now - self.t > 0.25 and loss is not None:
                self.t = now
                self.bar.set_postfix_str(f"loss {loss.item():.4f}", refresh=False)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.bar.close()

    return Progress()


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
    """Silence Lightning's info banners and the worker-count hints for in-process data."""
    names = ("lightning.pytorch", "lightning.fabric", "lightning")
    levels = [logging.getLogger(n).level for n in names]
    for n in names:
        logging.getLogger(n).setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*`IterableDataset` has `__len__` defined.*")
        warnings.filterwarnings("ignore", message=".*Total length of `DataLoader` across ranks.*")
        warnings.filterwarnings("ignore", message=".*GPU available but not used.*")
        warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")
        warnings.filterwarnings("ignore", message=".*`training_step` returned `None`.*")
        # on a machine with SLURM installed (a login node) Lightning says this on every run that
        # is not inside `srun`: a run of synthlab outside a launcher is one process on purpose
        warnings.filterwarnings("ignore", message=".*The `srun` command is available on your system but is not used.*")
        try:
            yield
        finally:
            for n, lv in zip(names, levels):
                logging.getLogger(n).setLevel(lv)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """torch intra-op threads for the run only (0: leave torch's setting)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n:
            torch.set_num_threads(before)


CUBLAS_WORKSPACE = ":4096:8"  # what cuBLAS needs for reproducible results (CUDA docs, "Results reproducibility")


def fix_cublas_workspace(strict: bool) -> None:
    """``train.deterministic``: cuBLAS's fixed workspace, set before the run's first CUDA call.

    torch reads ``CUBLAS_WORKSPACE_CONFIG`` once, when it sets up cuBLAS (the process's first GPU
    matmul); set any later it is silently ignored and two runs of one seed may differ. A run
    calls this before it touches the GPU (its memory check included); a process that had
    already used CUDA without the setting gets a warning naming the fix. A value the user set
    is kept."""
    if not strict or "CUBLAS_WORKSPACE_CONFIG" in os.environ:
        return
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    if torch.cuda.is_initialized():
        warnings.warn(
            "train.deterministic: this process used CUDA before CUBLAS_WORKSPACE_CONFIG was set, so "
            "cuBLAS may keep its default workspace and two runs of one seed may differ; set "
            f"CUBLAS_WORKSPACE_CONFIG={CUBLAS_WORKSPACE} before starting Python",
            RuntimeWarning,
            stacklevel=2,
        )


@contextlib.contextmanager
def deterministic(strict: bool) -> Iterator[None]:
    """torch.use_deterministic_algorithms for the run only (restored afterwards).

    Always on with ``warn_only`` (CPU kernels are deterministic already; a nondeterministic op
    warns). ``strict`` (``train.deterministic``): an op without a deterministic implementation
    raises, cuBLAS gets a fixed workspace (:func:`fix_cublas_workspace`, which the run has
    called before its first CUDA call) and cuDNN picks deterministic algorithms: two GPU runs
    of one seed then agree."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_before = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn_before = torch.backends.cudnn.deterministic
    if strict:
        fix_cublas_workspace(strict)
        torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=not strict)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_before)
        torch.backends.cudnn.deterministic = cudnn_before


def cluster_environment() -> Any:
    """The Lightning cluster environment of a run, chosen here rather than detected by Lightning.

    Inside a SLURM job step (``srun``, as submitit starts a task: ``SLURM_NTASKS`` set, not an
    interactive job) Lightning's own :class:`SLURMEnvironment`, as it expects there (ranks, node
    address from SLURM's variables), with ``auto_requeue=False``: requeueing on timeout or
    preemption is submitit's (:mod:`synthlab.study.slurmtask`), and Lightning's handler would requeue the
    job a second time and save its own ``hpc_ckpt`` in the working directory. Anywhere else
    the plain single-process :class:`LightningEnvironment`: a synthlab run is one process on one
    device whatever the machine has installed."""
    from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment

    if "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        return SLURMEnvironment(auto_requeue=False)
    return LightningEnvironment()


def fit(
    module: Any,
    datamodule: Any,
    cfg: RunConfig,
    progress: bool = False,
    desc: str = "",
    checkpoints: Any = None,
    callbacks: list[Any] | tuple[Any, ...] = (),
    logger: Any = None,
    log_every: int = 1,
) -> dict[str, Any]:
    """Run the Lightning Trainer (CPU / GPU auto); returns {"device": its type, "root_device":
    the torch.device it trained on, "steps_done": ..., "resumed_at": ...}.

    ``checkpoints`` (:class:`synthlab.run.checkpoints.RunCheckpoints`): save on its schedule, and
    resume from its ``last.ckpt`` when it has one (weights_only load). ``callbacks`` run before
    the checkpoint callback, so that what they add at a step (a learning-curve point) is in the
    checkpoint saved at that step. ``logger``: a Lightning logger (None: none), flushed every
    ``log_every`` steps (the module logs at those steps only)."""
    L = _lightning()
    every = [progress_callback(cfg.train.steps, desc)] if progress else []
    every += list(callbacks)
    if checkpoints is not None:
        every.append(checkpoints.callback())
    ckpt = checkpoints.resume_from if checkpoints is not None else None
    with quiet_lightning():
        trainer = L.Trainer(
            accelerator="auto",
            devices=1,
            max_steps=cfg.train.steps,
            max_epochs=-1,
            logger=logger if logger is not None else False,
            log_every_n_steps=max(1, int(log_every)),
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            gradient_clip_val=cfg.train.grad_clip or None,
            gradient_clip_algorithm="norm",
            callbacks=every,
            benchmark=False,
            deterministic=False,
            precision=PRECISIONS[cfg.train.precision],
            plugins=[cluster_environment()],
        )
        # Lightning turns Ctrl-C into SystemExit(1) and leaves SIGINT ignored: restore it
        sigint = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
        try:
            trainer.fit(module, datamodule=datamodule, ckpt_path=None if ckpt is None else str(ckpt), weights_only=True)
        except SystemExit:
            if trainer.interrupted:  # Lightning's answer to Ctrl-C is exit(1): give the caller the Ctrl-C
                raise KeyboardInterrupt from None
            raise
        finally:
            if sigint is not None:
                signal.signal(signal.SIGINT, sigint)
    device = trainer.strategy.root_device
    return {
        "device": device.type,
        "root_device": device,
        "steps_done": int(trainer.global_step),
        "resumed_at": checkpoints.resume_step if ckpt is not None else None,
    }
