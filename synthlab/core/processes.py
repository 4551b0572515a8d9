"""This process as a sweep names its worker, and whether a named process still runs.

A worker is named by its host, pid, the process's start time (so a reused pid is told apart)
and its pid space (the machine's boot and the pid namespace, so two containers or machines with
one hostname are told apart). Only the operating system is asked (Linux /proc where there is
one): a run's directory claim (:mod:`synthlab.run.rundir`) and a sweep's trials
(:mod:`synthlab.study.liveness`) read a process the same way.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any


def proc_start(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
        return data.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits for its parent to reap it (Linux: state Z or X in
    every thread; a process whose first thread exited while others run shows Z in its own stat)."""

    def state(path: str) -> str | None:
        try:
            with open(path, "rb") as f:
                return f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return None

    if state(f"/proc/{pid}/stat") not in ("Z", "X"):
        return False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return all(state(f"/proc/{pid}/task/{t}/stat") in ("Z", "X", None) for t in tasks)


def pid_alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` (started at ``start``, when known) still runs. A zombie does not:
    a helper killed outright (SIGKILL, the OOM killer) stays one until its main process waits for
    it, which the main process does only at the end of its grid, after waiting for that cell."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if _zombie(pid):
        return False
    if start is not None and Path("/proc").is_dir():
        now = proc_start(pid)
        if now is None or now != start:
            return False
    return True


def pid_space() -> str | None:
    """Where this process's pid means something: the machine's boot id (whatever its hostname)
    and the pid namespace (a container has its own), or None where /proc cannot tell."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{boot} {ns}" if boot and ns else None


DEFAULT_BEAT = 30.0  # seconds between two heartbeats of a worker that does not say (an older synthlab)


def worker_id(beat: float = DEFAULT_BEAT) -> dict[str, Any]:
    """This process as a trial names its worker; ``beat``: its seconds between heartbeats."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": proc_start(os.getpid()),
        "space": pid_space(),
        "beat": float(beat),
    }


def same_pid_space(w: dict[str, Any], me: dict[str, Any]) -> bool:
    """Whether worker ``w``'s pid can be checked here: same host name and pid space (a worker
    named by an older synthlab has no space: its host name alone decides, as it did)."""
    if w.get("host") != me["host"]:
        return False
    return w.get("space") is None or me.get("space") is None or w.get("space") == me.get("space")
