"""Several worker processes on one sweep (``synthlab sweep ... --workers N|auto``).

This process plus N - 1 helpers run the same sweep on the same study (its scheduling is already
exactly once); each CPU worker gets ``cores // N`` torch threads, GPU workers go round robin
over the visible GPUs. Ctrl-C or SIGTERM stops the helpers, each re-queuing its cell. This
module knows processes, not sweeps. How: docs/scaling.md, "Details: workers, seeds stacked,
precision, kills"; the helpers' start: docs/architecture.md, "The sweep queue's rules".
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator

AUTO = "auto"


ENV_DEFAULT = "SYNTHLAB_WORKERS"


def default_workers() -> str:
    """``synthlab sweep``'s ``--workers`` when none is given: ``auto`` (on a CPU one process per
    core beats one process with every thread for the flip-flop main command: docs/performance.md),
    or the ``SYNTHLAB_WORKERS`` environment variable (the test suite sets 1)."""
    return os.environ.get(ENV_DEFAULT, AUTO)


def cpu_cores() -> int:
    """Cores this process may run on (the affinity mask, e.g. a container's or taskset's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS / Windows
        return os.cpu_count() or 1


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def parse_workers(value: Any) -> int | str:
    """``--workers``: a positive integer or ``auto`` (ValueError otherwise)."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        n = int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        n = None
    if n is None or n < 1 or str(value).strip() not in (str(n), f"+{n}"):
        raise ValueError(f"--workers must be a positive integer or 'auto', got {value!r}")
    return n


def resolve(workers: int | str, n_cells: int) -> int:
    """The number of worker processes: ``auto`` = one per CPU core (one thread each), or
    one per GPU; never more than there are cells left to run (``n_cells``)."""
    if workers == AUTO:
        gpus = gpu_count()
        workers = gpus if gpus else cpu_cores()
    return max(1, min(int(workers), max(1, n_cells)))


def threads_per_worker(n_workers: int) -> int:
    return max(1, cpu_cores() // n_workers)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """This process's torch intra-op threads for the block (restored afterwards)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# A helper's first lines (``python -P -c``: -P puts no working directory on sys.path, so nothing
# here or below can import a planted module): Ctrl-C / SIGTERM as KeyboardInterrupt from the
# start (a parent may have left SIGINT ignored), then the main process's sys.path, then
# ``module._helper(PAYLOAD)``; a stop during the imports (torch's take seconds) exits 130 quietly:
# the stop signals wait, blocked, until the imports end (raised inside an extension's C++ callback,
# KeyboardInterrupt aborts the process with a C++ "terminate called" instead of unwinding).
_BOOT = """\
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.default_int_handler)
stops = {signal.SIGINT, signal.SIGTERM}
code = 130
try:
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    import importlib, json
    sys.path[:] = json.loads(sys.argv[1])
    module = importlib.import_module(sys.argv[2])
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)  # a stop that came meanwhile is raised here
    code = module._helper(sys.argv[3])
except KeyboardInterrupt:
    code = 130
finally:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # stopping: a second signal prints nothing either
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.exit(code)
"""


def helper_argv(module: str, payload: str) -> list[str]:
    """The command line of one helper process: ``module._helper(payload)`` (see :data:`_BOOT`)."""
    return [sys.executable, "-P", "-c", _BOOT, json.dumps(sys.path), module, payload]


def spawn(n_workers: int, module: str, sweep_kwargs: dict[str, Any]) -> list[subprocess.Popen]:
    """Start ``n_workers - 1`` helper processes, each ``module._helper(PAYLOAD)`` (:func:`helper_argv`),
    on the sweep (the caller is worker 0); ``_helper`` passes the payload to :func:`helper_main`."""
    gpus = gpu_count()
    threads = threads_per_worker(n_workers)
    procs: list[subprocess.Popen] = []
    try:
        for i in range(1, n_workers):
            env = dict(os.environ)
            env["OMP_NUM_THREADS"] = str(threads)
            if gpus:
                visible = env.get("CUDA_VISIBLE_DEVICES")
                ids = visible.split(",") if visible else [str(g) for g in range(gpus)]
                env["CUDA_VISIBLE_DEVICES"] = ids[i % len(ids)]
            payload = json.dumps({**sweep_kwargs, "threads": threads, "parent": os.getpid()})
            # a new process group: a Ctrl-C at the terminal reaches the main process only, which
            # then stops the helpers itself (so they never race it to the journal)
            procs.append(
                subprocess.Popen(
                    helper_argv(module, payload), env=env, stdin=subprocess.DEVNULL, start_new_session=True
                )
            )
    except BaseException:  # Ctrl-C (or a failed start) half-way: the caller never sees these helpers
        stop(procs)
        raise
    return procs


def stop(procs: list[subprocess.Popen], sig: int = signal.SIGTERM, timeout: float = 60.0) -> None:
    """Ask the helpers to stop (their running cells go back to the queue), then wait. SIGTERM,
    not SIGINT: Python turns SIGINT into KeyboardInterrupt from its first instant, so a helper
    stopped while its interpreter still started (importing ``site``) printed a fatal error and
    a traceback; SIGTERM ends such a helper quietly (it has no cell yet), and once :data:`_BOOT`
    runs it is a Ctrl-C like SIGINT."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(sig)
    for p in procs:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait(procs: list[subprocess.Popen]) -> list[int]:
    """Wait for the helpers; their exit codes."""
    return [p.wait() for p in procs]


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt for the block, as Ctrl-C does (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back until the block ends, then raised as KeyboardInterrupt: a
    step that must happen whole (a trial taken and noted as held) is never cut in two. Only the
    signals that raise KeyboardInterrupt here are held (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is signal.default_int_handler]
    for s in held:
        signal.signal(s, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for s in held:
            signal.signal(s, signal.default_int_handler)
    if came:
        raise KeyboardInterrupt


def _die_with(parent: int) -> None:
    """SIGTERM when ``parent`` dies (Linux): a killed sweep's helpers stop, re-queueing their cells."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent and os.getppid() != parent:  # it died before the line above
        raise KeyboardInterrupt


def helper_main(run: Callable[..., Any], payload: str) -> int:
    """A helper process: ``run(**sweep_kwargs)`` with its share of the threads; its exit code."""
    import torch

    kwargs = json.loads(payload)
    torch.set_num_threads(int(kwargs.pop("threads")))
    parent = int(kwargs.pop("parent", 0))
    # the main process stops us with SIGTERM (as a scheduler does, or the kernel when the main
    # process dies); SIGINT too (a parent without job control may have left it ignored, which a
    # child inherits): the cell is re-queued
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        _die_with(parent)
        run(**kwargs)
    except KeyboardInterrupt:
        return 130
    return 0
