"""One SLURM task of a sweep (:class:`synthlab.study.launchers.SlurmLauncher`): train one cell.

On the compute node :class:`CellTask` runs :func:`run_cell`: it opens the same study, takes the
cell's trial and trains it as a local worker does; a finished cell is never trained twice.
Liveness is SLURM's (``slurm_job`` on the trial); on ``USR2`` the task is requeued and resumes
from its checkpoint. The rules: docs/scaling.md, "SLURM" and "Another cluster".
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import submitit

from synthlab.study.optuna_api import trial_id
from synthlab.study.scheduler import Runner


class SlurmRunner(Runner):
    """:class:`Runner` where SLURM owns liveness: nothing reaped by pid or heartbeat, and an
    interrupted cell's trial stays RUNNING under its task (requeued, the task takes it up again;
    gone from the queue, the submitting sweep closes it)."""

    def __init__(self, spec, preset, cells, storage, study, out: Path, quiet: bool, **kwargs: Any) -> None:
        # the heartbeat thread still writes `progress` for the submitting sweep's view (its value
        # is never judged on this path: SlurmLauncher.reap asks squeue); 30 s, as locally
        super().__init__(spec, preset, cells, storage, study, out, quiet, 30.0, float("inf"), 2.0, **kwargs)

    def _clear_scratch(self) -> None:
        """Nothing: another node's live task may hold a scratch file whose pid means nothing here
        (a task's scratch file is its own: the trial number and pid name it)."""

    def _give_back(self, ts) -> None:
        """Nothing: the trial stays RUNNING under this task; SLURM decides what happens next."""

    def take(self, number: int, job: str):
        """Trial ``number`` (its cell's), taken for task ``job``; None when there is nothing to
        train: finished, or held by another task or worker."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        t = _trial(self.trials(), number)
        if t is None:
            return None
        if t.state == TrialState.WAITING:
            try:
                # a claim before the take, then the take (atomic WAITING -> RUNNING), then the name
                self.storage.set_trial_user_attr(trial_id(t), f"slurm:{job}", True)
                if self.storage.set_trial_state_values(trial_id(t), state=TrialState.RUNNING):
                    self.storage.set_trial_user_attr(trial_id(t), "slurm_job", job)
                    return _trial(self.trials(), number)
            except UpdateFinishedTrialError:
                return None
            t = _trial(self.trials(), number)
        if t.state == TrialState.RUNNING and t.user_attrs.get("slurm_job") == job:
            record = t.user_attrs.get("record")
            if record is not None:  # trained and recorded, stopped before the close: close it
                self.ensure_recorded(record, t.user_attrs["cell_key"])
                self.close(trial_id(t), t.number, record, reaping=True)
                return None
            print(f"[task {job}] trial {number}: taken up again (requeued)", file=sys.stderr, flush=True)
            return t
        return None


def _trial(trials, number: int):
    for t in trials:
        if t.number == number:
            return t
    return None


def task_id() -> str:
    """This task's SLURM id as squeue prints it: ``ARRAYID_TASKID`` in an array, else the job id."""
    array, index = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and index:
        return f"{array}_{index}"
    return os.environ.get("SLURM_JOB_ID", "local")


def run_cell(job: dict[str, Any]) -> str:
    """Train one cell of a sweep in its study (module docstring); what happened, in words."""
    import optuna
    import torch

    from synthlab.run.records import repair_jsonl
    from synthlab.study.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    out = Path(job["out"])
    store = open_storage(job["storage"])
    study = optuna.load_study(study_name=job["study"], storage=store)
    cell = job["cell"]
    plans = {cell.key: job["plan"]} if job.get("plan") is not None else None
    # the config the sweep resolved; a job submitted without one resolves it from the cell, the same way
    configs = {cell.key: job["config"]} if job.get("config") is not None else None
    # quiet=False: the trainer's lines (e.g. "resuming RUN at step N") go to the task's log; no bar there
    runner = SlurmRunner(
        job["spec"],
        job["preset"],
        [cell],
        store,
        study,
        out,
        False,
        plans=plans,
        logger=job.get("logger"),
        configs=configs,
    )
    me = task_id()
    t = runner.take(int(job["trial"]), me)
    if t is None:
        return f"trial {job['trial']} ({cell.label()}): finished or held elsewhere; nothing to train"
    repair_jsonl(out / "results.jsonl")
    if runner.begin(t) is None:
        return f"trial {t.number} ({cell.label()}): closed without training (recorded already)"
    runner.train_one(t, cell)
    return f"trial {t.number} ({cell.label()}): trained"


class CellTask(submitit.helpers.Checkpointable):
    """The callable submitit runs in each task of the array: ``CellTask()(job)``. Checkpointable:
    on USR2 (timeout or preemption) submitit pickles ``checkpoint(job)`` (this task again, same
    job) and requeues it; the run resumes from its own checkpoint."""

    def __call__(self, job: dict[str, Any]) -> str:
        stopped = _stop_training_on_requeue()
        try:
            return run_cell(job)
        except KeyboardInterrupt:
            if stopped:  # submitit requeued this task (or gave up): let it finish as it meant to
                raise stopped[0] from None
            raise


def _stop_training_on_requeue() -> list[BaseException]:
    """Wrap submitit's USR2 handler (checkpoint, ``scontrol requeue``, then ``sys.exit``) so that
    its exit reaches the trainer as Ctrl-C: the run then keeps its checkpoint and writes no
    record, while a SystemExit would be recorded as the run's failure. The exit submitit meant
    is kept in the list returned and raised once the run is out of the way."""
    stopped: list[BaseException] = []
    sig = signal.Signals["SIG" + submitit.JobEnvironment.USR_SIG]  # SUBMITIT_PREEMPT_SIGNAL, USR2 by default
    handler = signal.getsignal(sig)
    if not callable(handler):
        return stopped

    def on_usr(signum: int, frame: Any) -> None:
        try:
            handler(signum, frame)
        except BaseException as e:  # SystemExit (requeued) or UncompletedJobError (not requeued)
            stopped.append(e)
            raise KeyboardInterrupt from None

    signal.signal(sig, on_usr)
    return stopped


if __name__ == "__main__":  # pragma: no cover
    sys.exit("synthlab.study.slurmtask runs inside submitit's job")
