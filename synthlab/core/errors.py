"""Errors the command line turns into exit codes, and the checks of the paths a command uses.

Exit codes (synthlab.cli): 2 bad input (:class:`UsageError` or any ValueError), 1 an
environment error (an OSError: disk full, read-only file system, permission denied...) or an
internal error, 130 Ctrl-C. The checks below run before a command writes anything: a path
that cannot be what it should (a file where a directory goes, a directory where a file goes)
is bad input; a place that cannot be written (read-only, no permission) raises the OSError the
write would have raised, naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Iterable, Iterator


class UsageError(ValueError):
    """Bad input from the user: the CLI prints the message on one line and exits with 2.

    Every validation in synthlab raises ValueError (this class or a plain one); the CLI maps
    ValueError to exit code 2, OSError to exit code 1 with the path and the reason.
    """


class DamagedFile(OSError):
    """A file synthlab wrote that no longer reads as one (random bytes, cut short, another kind
    of file, tensors of the wrong shape, a record whose parts are not what a record holds): an
    environment error, like a failing disk. The CLI prints ``PATH: reason`` and exits with 1."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(errno.EIO, " ".join(str(reason).split()), os.fspath(path))


def check_seed(seed: object, what: str = "seed") -> int:
    """The one seed check (0 <= seed <= 2**32 - 1), kept with the generators at the lowest layer
    (they import nothing else from synthlab); imported on use, so ``--help`` loads no numpy."""
    from synthlab.generators.base import check_seed as check

    return check(seed, what)


# sizes a command takes besides a run's settings (docs/interfaces.md "Errors and exit codes"):
# nothing larger can run here
MAX_SAMPLES = 1_000_000_000  # generate -n: a billion samples is days of writing and about a terabyte
MAX_INDEX = 2**63 - 1  # a sample's index (generate --start + n, plot --sample): Parquet's int64 column
MAX_DISTANCE = 4096  # plot bias --max-distance: the biases are heads x T x T floats (T = D + 1)


def check_size(value: object, flag: str, lo: int, hi: int) -> int:
    """``value`` as an int in lo..hi, else UsageError naming ``flag`` (a size a command takes)."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UsageError(f"{flag} must be an integer from {lo:,} to {hi:,}, got {value!r}")
    return value


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` with the closest of ``choices`` to ``word`` (difflib), or ``""``:
    a typo gets one short line, not the list of every name."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def os_error_line(e: OSError) -> str:
    """``<path>: <reason>`` (``<path> -> <path2>: <reason>`` for a rename) of an OSError."""
    reason = e.strerror or (os.strerror(e.errno) if e.errno else "") or str(e) or type(e).__name__
    if e.filename is None:
        return reason
    where = _name(e.filename)
    if e.filename2 is not None:
        where += f" -> {_name(e.filename2)}"
    return f"{where}: {reason}"


@contextlib.contextmanager
def naming(path: str | os.PathLike, *temporary: str | os.PathLike) -> Iterator[None]:
    """An OSError raised in the block without a file name (a failed read), or naming one of
    the ``temporary`` files that stand in for ``path``, names ``path``."""
    temps = {os.fspath(t) for t in temporary}
    try:
        yield
    except OSError as e:
        if not isinstance(e, BrokenPipeError) and (e.filename is None or _name(e.filename) in temps):
            e.filename = os.fspath(path)
            e.filename2 = None
        raise


def _name(f: object) -> str:
    return os.fsdecode(f) if isinstance(f, (str, bytes, os.PathLike)) else str(f)


def _existing_ancestor(path: Path) -> Path:
    """``path`` itself or its nearest ancestor that exists (or is a dangling link)."""
    p = Path(path)
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def _check_writable_dir(d: Path, shown: Path) -> None:
    """OSError (EROFS or EACCES) naming ``shown`` when nothing can be created in ``d``.
    ``os.access`` sees a read-only mount even for root (root passes permission checks)."""
    if os.access(d, os.W_OK | os.X_OK):
        return
    try:
        ro = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        ro = False
    code = errno.EROFS if ro else errno.EACCES
    raise OSError(code, os.strerror(code), str(shown))


def _check_under(path: Path, flag: str) -> None:
    """``path``'s missing part can be created: its nearest existing ancestor is a directory
    (else bad input) that can be written (else OSError)."""
    base = _existing_ancestor(path.parent)
    if not base.is_dir():
        what = "a file" if base.exists() else "a dangling link"
        raise UsageError(f"{flag} {str(path)!r}: {str(base)!r} is {what}, not a directory")
    _check_writable_dir(base, path)


def check_output_dir(path: str | os.PathLike, flag: str) -> None:
    """A directory a command creates (with parents) or writes in: a file there, or under a
    file, is bad input; a read-only / forbidden place raises OSError. Creates nothing."""
    p = Path(path)
    if not str(path).strip():
        raise UsageError(f"{flag} must not be empty")
    if os.path.lexists(p) and not p.is_dir():
        raise UsageError(f"{flag} {str(path)!r} is a file, not a directory")
    if p.is_dir():
        _check_writable_dir(p, p)
    else:
        _check_under(p, flag)


def check_output_file(path: str | os.PathLike, flag: str, *, parent_must_exist: bool = False) -> None:
    """A file a command creates or replaces: a directory there, or a parent that is a file,
    is bad input (also a missing parent with ``parent_must_exist``); a place that cannot be
    written raises OSError. Creates nothing."""
    p = Path(path)
    if not str(path).strip():
        raise UsageError(f"{flag} must not be empty")
    if p.is_dir():
        raise UsageError(f"{flag} {str(path)!r} is a directory, expected a file path")
    if p.exists() and not p.is_file():  # a FIFO, a device, a socket: never replaced by a file
        raise UsageError(f"{flag} {str(path)!r} is not a regular file")
    if parent_must_exist and not os.path.lexists(p.parent):
        raise UsageError(f"{flag} {str(path)!r}: directory {str(p.parent)!r} does not exist")
    _check_under(p, flag)


def check_input_file(path: str | os.PathLike, what: str) -> Path:
    """A file a command reads: missing, a directory or not a regular file is bad input;
    unreadable raises OSError (EACCES) naming it."""
    p = Path(path)
    if not os.path.lexists(p):
        raise UsageError(f"{what} {str(path)!r} does not exist")
    if p.is_dir():
        raise UsageError(f"{what} {str(path)!r} is a directory, expected a file")
    if not p.is_file():
        raise UsageError(f"{what} {str(path)!r} is not a regular file")
    if not os.access(p, os.R_OK):
        raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(p))
    return p
