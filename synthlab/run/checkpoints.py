"""Resumable runs: periodic Lightning checkpoints under ``OUT/.checkpoints/<key>/``.

A run that writes to ``OUT`` saves ``last.ckpt`` every ``train.checkpoint_every`` steps and
every ``train.checkpoint_minutes``; ``key`` hashes the resolved config without the checkpoint
settings, so the same run started again with the same ``OUT`` resumes under its run ids (on CPU
with the same metrics and weights as an uninterrupted run), and one whose records were written
is not trained again. The directory goes once the run has its records. The rules:
docs/architecture.md, "Long runs: resuming and sizes".
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from synthlab import generators
from synthlab.core.config import RunConfig
from synthlab.run import specs
from synthlab.run.records import scan_records

DIRNAME = ".checkpoints"
LAST = "last.ckpt"
STATE = "run.json"
# settings that do not change what is trained (compile: the same computation, another schedule)
_SKIP = ("checkpoint_every", "checkpoint_minutes", "check_memory", "compile", "compile_mode", "data_workers")


def run_key(cfg: RunConfig, extra: dict[str, Any] | None = None) -> str:
    """A stable hash of everything the training depends on (``extra``: e.g. pe revision)."""
    d = cfg.to_dict()
    # the axes as the encoding and scheme they build: the key a run had before these fields
    if d.pop("dape_k") is not None:
        d["pe"] = specs.encoding(cfg).name
    if d.pop("pose_chunks") is not None:
        d["positions"] = specs.position_scheme(cfg).name
    d["train"] = {k: v for k, v in d["train"].items() if k not in _SKIP}
    if d["train"].get("eval_every") is None:  # off: the key a run had before learning curves existed
        d["train"].pop("eval_every", None)
    if d["train"].get("precision") == "fp32":  # the default: the key a run had before train.precision existed
        d["train"].pop("precision")
    extra = dict(extra or {})
    # the generator's revision: one seed gives other samples after a fix, so a checkpoint of the
    # old data must not resume under the new (its record would claim the new revision). Left
    # out at revision 1, the key a run had before the revision was part of it
    revision = getattr(generators.TASKS.get(cfg.task), "REVISION", 1)
    if revision != 1:
        extra["task_revision"] = revision
    blob = json.dumps({"cfg": d, **extra}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _replace(tmp: Path, dst: Path) -> None:
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    _fsync_dir(dst.parent)


class RunCheckpoints:
    """The checkpoint directory of one run (see the module docstring)."""

    def __init__(self, root: Path, key: str, steps: int, every: int, minutes: float) -> None:
        self.root = Path(root)  # OUT: the run directories lie in it
        self.dir = self.root / DIRNAME / key
        self.key, self.steps, self.every, self.minutes = key, int(steps), int(every), float(minutes)
        self.path = self.dir / LAST
        self.run_id: str | None = None  # the ids an earlier attempt of this run used, "|"-joined
        self.resume_from: Path | None = None
        self.resume_step = 0
        self._lock: int | None = None
        self._off = False  # another live process holds the directory

    @classmethod
    def open(
        cls,
        out: str | os.PathLike | None,
        cfg: RunConfig,
        extra: dict[str, Any] | None = None,
        results: str | os.PathLike | None = None,
    ) -> "RunCheckpoints | None":
        """The run's checkpoints (an earlier attempt's locked and read); None without ``out``,
        with checkpoints off, or when a live process holds the same key. An earlier attempt
        with a record in ``results`` is finished, not resumed: this run is a new one."""
        tc = cfg.train
        if out is None or (tc.checkpoint_every <= 0 and tc.checkpoint_minutes <= 0):
            return None
        ck = cls(Path(out), run_key(cfg, extra), tc.steps, tc.checkpoint_every, tc.checkpoint_minutes)
        if ck.dir.is_dir():
            if not ck._acquire():
                warnings.warn(f"{ck.dir} is in use by another process: this run saves no checkpoints", stacklevel=2)
                return None
            ck._read()
            if ck._recorded(results):
                # killed between its records and its checkpoint's removal: resuming would train it
                # again and record its run ids twice
                ck.finish()
                return cls.open(out, cfg, extra)
        return ck

    def _recorded(self, results: str | os.PathLike | None) -> bool:
        """Whether a run id of the earlier attempt has a record in ``results``."""
        if self.run_id is None or results is None:
            return False
        earlier = set(self.run_id.split("|"))
        return any(r.get("run_id") in earlier for r in scan_records(Path(results))[0])

    def _acquire(self) -> bool:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            return True
        fd = os.open(self.dir / "lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock = fd
        return True

    def _read(self) -> None:
        try:
            state = json.loads((self.dir / STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if state.get("key") != self.key or not isinstance(state.get("run_id"), str):
            return
        self.run_id = state["run_id"]
        if not self.path.exists():
            return
        try:
            ckpt = torch.load(self.path, map_location="cpu", weights_only=True)
            step = int(ckpt["global_step"])
            if not 0 < step < self.steps:
                raise ValueError(f"step {step} outside 1..{self.steps - 1}")
        except Exception as e:  # noqa: BLE001 - any unreadable checkpoint: start over
            warnings.warn(f"{self.path}: cannot resume from it ({type(e).__name__}: {e}); starting over", stacklevel=3)
            self.path.unlink(missing_ok=True)
            return
        self.resume_from, self.resume_step = self.path, step

    @property
    def resuming(self) -> bool:
        return self.resume_from is not None

    def begin(self, run_id: str) -> None:
        """The run id, written with the first checkpoint so that the next attempt keeps it."""
        self.run_id = run_id

    def run_ids(self, fresh: Sequence[str]) -> list[str]:
        """This attempt's run ids (one per seed), kept for the next attempt: the earlier
        attempt's when it had as many, their directories in OUT removed (what a killed attempt
        left: its checkpoint is here), else ``fresh``. A run id has no "|"."""
        earlier = self.run_id.split("|") if self.run_id is not None else []
        ids = earlier if len(earlier) == len(fresh) else list(fresh)
        if ids is earlier:
            for run_id in earlier:
                shutil.rmtree(self.root / run_id, ignore_errors=True)
        self.begin("|".join(ids))
        return ids

    def _start(self) -> bool:
        """The directory, locked, with run.json: at the first save."""
        if self._lock is None and not self._off:
            self.dir.mkdir(parents=True, exist_ok=True)
            if not self._acquire():
                warnings.warn(f"{self.dir} is in use by another process: this run saves no checkpoints", stacklevel=3)
                self._off = True
                return False
            tmp = self.dir / (STATE + ".tmp")
            tmp.write_text(json.dumps({"key": self.key, "run_id": self.run_id}) + "\n", encoding="utf-8")
            _replace(tmp, self.dir / STATE)
        return not self._off

    def save(self, trainer: Any) -> None:
        """``last.ckpt`` of the trainer's state, written atomically (a kill mid-write keeps the old one)."""
        if not self._start():
            return
        tmp = self.dir / (LAST + ".tmp")
        trainer.save_checkpoint(tmp)
        _replace(tmp, self.path)

    def release(self) -> None:
        """Unlock, keeping the files (Ctrl-C: the next attempt resumes)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def finish(self) -> None:
        """The run has its record: remove its checkpoints (and OUT/.checkpoints when empty)."""
        if self._lock is not None:  # only a directory this run holds
            shutil.rmtree(self.dir, ignore_errors=True)
        self.release()
        with contextlib.suppress(OSError):
            self.dir.parent.rmdir()

    def callback(self) -> Any:
        """The Lightning callback that saves on schedule and restores the RNG on resume."""
        return _callback(self)


def _callback(ck: RunCheckpoints) -> Any:
    import lightning as L

    class Checkpointer(L.Callback):
        """Saves ``last.ckpt`` after step k when k % every == 0 or ``minutes`` passed; its
        state is torch's RNG, put back right before the first step after a resume."""

        def __init__(self) -> None:
            self.t = time.monotonic()
            self.rng: dict[str, Any] | None = None

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if self.rng is not None:
                torch.set_rng_state(self.rng["cpu"])
                if self.rng.get("cuda") and torch.cuda.is_available():
                    torch.cuda.set_rng_state_all(list(self.rng["cuda"]))
                self.rng = None

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = trainer.global_step
            if step >= ck.steps or trainer.should_stop or getattr(pl_module, "failure", None):
                return
            now = time.monotonic()
            if (ck.every > 0 and step % ck.every == 0) or (ck.minutes > 0 and now - self.t >= 60 * ck.minutes):
                ck.save(trainer)
                self.t = time.monotonic()

        def state_dict(self) -> dict[str, Any]:
            cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
            return {"cpu": torch.get_rng_state(), "cuda": cuda}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.rng = dict(state_dict)

    return Checkpointer()
