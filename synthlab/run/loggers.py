"""The Lightning logger of a run (``synthlab train --logger``): its files in the run directory.

``csv`` (default), ``tensorboard``, ``wandb`` (offline), ``mlflow`` (a local file store unless
``MLFLOW_TRACKING_URI``) or ``none``. A run option, no part of the config: it changes neither a
cell's identity nor a result. An unknown or uninstalled logger is refused before anything is
written. Where each writes: docs/observability.md, "Training loggers".
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

# name -> (the module it needs, the pip extra that installs it); None: nothing to install
LOGGERS: dict[str, tuple[str, str] | None] = {
    "csv": None,
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
    "none": None,
}
DEFAULT = "csv"
LOG_DIR = "logs"  # the CSV and TensorBoard files, in the run directory
PROJECT = "synthlab"  # wandb project / MLflow experiment unless the environment names one


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (looked up, not imported)."""
    return importlib.util.find_spec(module) is not None


def check_logger(name: object, what: str = "logger") -> str:
    """``name`` when it is a logger whose package is installed; ValueError (one line, the pip
    extra named) otherwise. ``what``: how the message names the option (``--logger``)."""
    if not isinstance(name, str) or name not in LOGGERS:
        raise ValueError(f"{what} {name!r} is not allowed (allowed: {', '.join(LOGGERS)})")
    needs = LOGGERS[name]
    if needs is not None and not installed(needs[0]):
        raise ValueError(f"{what} {name} needs the {needs[0]} package: pip install 'synthlab-pe[{needs[1]}]'")
    return name


@dataclass
class RunLogger:
    """One run's logger: ``lightning`` goes to the Trainer; ``record`` is ``record["logs"]``."""

    lightning: Any
    record: dict[str, Any]
    _close: Callable[[bool], None] | None = field(default=None, repr=False)

    def log(self, values: dict[str, float], step: int) -> None:
        """Numbers at ``step`` (the learning-curve points), written now."""
        self.lightning.log_metrics(values, step=step)
        self.lightning.save()

    def close(self, ok: bool) -> None:
        """End the logger's run (wandb's process, MLflow's status); once, never raising: a
        logger that fails to close costs its own files, not the run."""
        close, self._close = self._close, None
        if close is None:
            return
        try:
            close(ok)
        except Exception as e:  # noqa: BLE001 - observability must not fail a run at its end
            warnings.warn(f"{self.record['logger']} logger: closing failed ({type(e).__name__}: {e})", stacklevel=2)


def open_logger(name: str, run_dir: Path | None, run_id: str, hparams: dict[str, Any]) -> RunLogger | None:
    """The logger ``name`` of the run in ``run_dir`` (None: ``none``, or a run that writes
    nothing), with the run's settings ``hparams`` logged. ``name`` is checked already."""
    if run_dir is None or name == "none":
        return None
    make = {"csv": _csv, "tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow}[name]
    return make(Path(run_dir), run_id, hparams)


def _csv(run_dir: Path, run_id: str, hparams: dict[str, Any]) -> RunLogger:
    from lightning.pytorch.loggers import CSVLogger

    lg = CSVLogger(save_dir=str(run_dir), name=LOG_DIR, version="")  # version "": no version_N folder
    lg.log_hyperparams(hparams)
    return RunLogger(lg, {"logger": "csv", "dir": LOG_DIR})


def _tensorboard(run_dir: Path, run_id: str, hparams: dict[str, Any]) -> RunLogger:
    from lightning.pytorch.loggers import TensorBoardLogger

    lg = TensorBoardLogger(save_dir=str(run_dir), name=LOG_DIR, version="", default_hp_metric=False)
    lg.log_hyperparams(hparams)
    return RunLogger(lg, {"logger": "tensorboard", "dir": LOG_DIR})


def _wandb(run_dir: Path, run_id: str, hparams: dict[str, Any]) -> RunLogger:
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    # wandb.init here, not in WandbLogger: its settings (no console capture, which would wrap
    # sys.stdout; no git or code scan; quiet) and the offline default are ours to choose
    settings = wandb.Settings(
        console="off",
        silent=True,
        disable_git=True,
        disable_code=True,
        x_save_requirements=False,
        disable_job_creation=True,
    )
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT") or PROJECT,
        name=run_id,
        dir=str(run_dir),
        # WANDB_MODE is the user's; wandb checks it
        mode=os.environ.get("WANDB_MODE") or "offline",  # type: ignore[arg-type]
        config=hparams,
        settings=settings,
    )
    files = Path(run.dir).parent if getattr(run, "dir", None) else None

    def close(ok: bool) -> None:
        run.finish(exit_code=0 if ok else 1)

    return RunLogger(
        WandbLogger(experiment=run), {"logger": "wandb", "dir": _inside(files, run_dir), "run": run.id}, close
    )


def _mlflow(run_dir: Path, run_id: str, hparams: dict[str, Any]) -> RunLogger:
    from lightning.pytorch.loggers import MLFlowLogger

    uri = os.environ.get("MLFLOW_TRACKING_URI")
    store = None if uri else run_dir / "mlruns"
    with _mlflow_scope(local=store is not None):
        lg = MLFlowLogger(
            experiment_name=os.environ.get("MLFLOW_EXPERIMENT_NAME") or PROJECT,
            run_name=run_id,
            tracking_uri=uri if store is None else store.resolve().as_uri(),
        )
        lg.experiment  # noqa: B018 - creates the store, the experiment and the run now, in the scope
    lg.log_hyperparams(hparams)

    def close(ok: bool) -> None:
        if not ok:  # Lightning marked it FINISHED when fit returned; the run failed after all
            lg.experiment.set_terminated(lg.run_id, "FAILED")

    return RunLogger(lg, {"logger": "mlflow", "dir": _inside(store, run_dir), "run": lg.run_id}, close)


@contextlib.contextmanager
def _mlflow_scope(local: bool) -> Iterator[None]:
    """MLflow for one run's logger only: Lightning's MLFlowLogger sets MLflow's process-wide
    tracking URI, and with it the MLFLOW_TRACKING_URI variable, to the run's store; both are put
    back afterwards, or the next run (a sweep, a notebook) would log into this run's directory.
    ``local``: allow MLflow 3's file store while the store is opened (MLflow keeps the opened
    store for the run's later writes)."""
    env = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE")}
    chatty = logging.getLogger("lightning.pytorch.loggers.mlflow")  # "Experiment ... not found. Creating it."
    level = chatty.level
    chatty.setLevel(logging.ERROR)
    if local:
        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        with _tracking_uri_kept():
            yield
    finally:
        chatty.setLevel(level)
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _tracking_uri_kept() -> Iterator[None]:
    """MLflow's process-wide tracking URI put back as it was, unset included, through MLflow's
    public functions (``set_tracking_uri(None)`` unsets it, as MLflow's own scoped URI does)."""
    import mlflow
    from mlflow import tracking

    before = mlflow.get_tracking_uri() if tracking.is_tracking_uri_set() else None
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)  # type: ignore[arg-type]  # None unsets: typed str, MLflow passes None too


def _inside(path: Path | None, run_dir: Path) -> str | None:
    """``path`` relative to the run directory (None when it lies elsewhere or is unknown)."""
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return None
