"""Study storage: where a sweep's Optuna study lives (journal file, SQLite, PostgreSQL, ...).

Default storage: an Optuna journal file (``JournalFileBackend``) in the output directory. It is
an append-only log written under a lock file with one ``write`` + ``fsync`` per operation, so
several processes on one machine share it without "database is locked" errors (SQLite's
failure mode under concurrent writers), and a hard kill loses at most the operation in flight;
a lock left by a killed process is broken after a short grace period, never one whose holder
still runs on this machine (see :func:`_repairing_lock_class`).

A journal is one JSON object per line. A write cut by a kill, a full disk or a power loss
leaves a torn last entry, which Optuna reads past until the next writer appends behind it and
makes the study unreadable for good. So whoever holds the journal's lock first cuts a torn or
unparsable last entry off (:func:`repair_journal_tail`: the bytes go to a side file
``<journal>.torn-<offset>``, one warning line on stderr): on opening, and on every append (a
killed writer's lock is broken, then the breaker repairs before it writes). Corruption before
the last entry is no kill's doing: opening it raises ValueError naming the byte offset.

This module owns the URL forms (:func:`normalize_url`), the checks run before anything is
written (:func:`check_storage`), opening a storage safely from several workers at once
(:func:`open_storage`) and the journal's repair.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

JOURNAL_NAME = "study.journal"
TORN_SUFFIX = ".torn-"
LOCK_GRACE_PERIOD = 10  # seconds before a lock left by a killed process is broken


def _is_journal_path(url: str) -> bool:
    return "://" not in url


def normalize_url(url: str) -> str:
    """``postgresql://`` with no driver named: use psycopg2 when it is the one installed
    (SQLAlchemy 2.1 defaults to psycopg 3; the ``postgres`` extra installs psycopg2-binary)."""
    import importlib.util

    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            rest = url[len(bare):]
            if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
                return "postgresql+psycopg2://" + rest
            return "postgresql://" + rest
    return url


def check_storage(url: str) -> None:
    """Fail fast (ValueError) when a storage URL cannot be used; creates nothing."""
    url = normalize_url(url)
    if _is_journal_path(url):
        parent = Path(url).expanduser().resolve().parent
        if not parent.is_dir():
            raise ValueError(f"--storage {url!r}: directory {str(parent)!r} does not exist")
        _check_journal_file(Path(url).expanduser(), url)
        return
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if path and path != ":memory:":
            parent = Path(path).expanduser().resolve().parent
            if not parent.is_dir():
                raise ValueError(f"--storage {url!r}: directory {str(parent)!r} does not exist")
        return
    try:
        import sqlalchemy
    except ImportError:  # pragma: no cover - optuna depends on it
        raise ValueError("--storage: an RDB URL needs sqlalchemy") from None
    connect_args = {"connect_timeout": 5} if url.startswith(("postgresql", "mysql")) else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=connect_args)
    except ImportError as e:
        hint = " (install the driver: pip install 'synthlab[postgres]')" if url.startswith("postgres") else ""
        raise ValueError(f"--storage {_redact(url)}: cannot load the database driver: {e}{hint}") from None
    except Exception as e:
        raise ValueError(f"--storage {_redact(url)}: not a usable storage URL ({type(e).__name__}: {e}; "
                         "allowed: a journal file path, sqlite:///FILE, postgresql://..., mysql://...)") from None
    try:
        with engine.connect():
            pass
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--storage {_redact(url)}: cannot connect: {msg}") from None
    finally:
        engine.dispose()


def _check_journal_file(path: Path, url: str) -> None:
    """An existing file named as a journal must be one (its first line a journal entry): the
    torn-tail repair on opening would otherwise cut the last line off a sweep file or notes
    named by mistake, before the corruption is reported. A first line without its newline may
    be a torn first entry: left to the repair."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 24)
    except OSError:  # missing (a new journal), a directory or unreadable: checked where it is written
        return
    why = _entry_ok(first) if first.endswith(b"\n") else None
    if why is not None:
        raise ValueError(f"--storage {url!r} is not an Optuna journal file (line 1: {why}); name a new file or "
                         "an existing journal")


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a message."""
    head, sep, tail = url.partition("://")
    if not sep or "@" not in tail:
        return url
    cred, _, host = tail.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}://{user}:***@{host}" if ":" in cred else url


def open_storage(url: str):
    """An Optuna storage object for ``url`` (journal file path or RDB URL)."""
    import optuna

    url = normalize_url(url)
    if _is_journal_path(url):
        return _open_journal(str(Path(url).expanduser()))
    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 120}}
    with _schema_lock(url):
        return optuna.storages.get_storage(_create_rdb_storage(url, engine_kwargs))


# an arbitrary 64-bit key for pg_advisory_lock: "synthlab" in ASCII
_PG_SCHEMA_LOCK = 0x73796E74686C6162


@contextlib.contextmanager
def _schema_lock(url: str):
    """Serialise Optuna's table creation across workers on PostgreSQL.

    Two workers starting on an empty database both run ``CREATE TYPE`` / ``CREATE TABLE`` and one
    dies with a unique violation (Optuna creates the schema without a lock). A session-level
    advisory lock makes the second wait until the first has created everything."""
    if not url.startswith(("postgresql", "postgres")):
        yield
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_SCHEMA_LOCK})
    finally:
        engine.dispose()


def _create_rdb_storage(url: str, engine_kwargs: dict[str, Any], attempts: int = 6):
    """RDBStorage, retried when a concurrent worker's table creation collides with ours (MySQL,
    or any database without the advisory lock above): the retry finds the tables in place."""
    import sqlalchemy.exc
    from optuna.storages import RDBStorage

    for attempt in range(attempts):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1) + random.random() * 0.2)


# ----------------------------------------------------------------------------------------
# journal files: torn tails


def _open_journal(path: str):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    lock = _repairing_lock_class()(path)
    if os.path.exists(path) and os.path.getsize(path):
        try:
            lock.acquire()  # cuts a tail without its newline
        except OSError:  # cannot lock (a read-only copy): read it as it is
            pass
        else:
            try:
                repair_journal_tail(path, check_last=True)
            finally:
                lock.release()
    backend = JournalFileBackend(path, lock_obj=lock)
    try:
        return JournalStorage(backend)
    except Exception:
        bad = first_bad_entry(path)
        if bad is None:
            raise
        offset, number, why = bad
        raise ValueError(f"journal {path!r} is corrupt at byte {offset} (entry {number}: {why}); only a torn last "
                         "entry is repaired: restore the file, or truncate it at that byte to keep the study before "
                         "it (what follows is lost)") from None


# file systems where an flock may not mean what it means on a local disk: it may stay on the
# client (two machines both "hold" it), reach a lock server that keeps a crashed client's lock
# until it reboots, or need the file open for writing; there the lock is Optuna's alone
_SHARED_FS = ("nfs", "cifs", "smb", "ceph", "fuse", "lustre", "gpfs", "9p", "gluster", "afs", "beegfs",
              "panfs", "virtiofs", "gfs2", "ocfs2", "vboxsf", "davfs")
_WAIT_WARNING = 60.0  # seconds between two "waiting for the journal lock" lines


def _local_fs(path: str) -> bool:
    """Whether ``path`` lies on a local file system (Linux: the type of its mount, found by mount
    id in /proc/self/mountinfo, is none of :data:`_SHARED_FS`; by mount id, not device, since a
    btrfs subvolume's device is in no mount line); False where that cannot be told."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            mnt = next(line.split()[1] for line in f.read().splitlines() if line.startswith("mnt_id:"))
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
    except (OSError, StopIteration, IndexError):
        return False
    finally:
        os.close(fd)
    for line in mounts:
        left, _, right = line.partition(" - ")
        if left.split()[:1] == [mnt] and right.split():
            return not right.split()[0].startswith(_SHARED_FS)
    return False


@functools.cache
def _repairing_lock_class():
    """Optuna's open-file lock that, once held, cuts a torn tail off the journal (a subclass
    made on first use: this module loads no optuna at import), and that never breaks a lock
    whose holder is alive on this machine.

    The holder keeps an ``flock`` on the lock file it created (``O_EXCL``, as Optuna's) until it
    has removed it, and writes its pid in it. A lock file that stood still for the grace period
    is broken only if that flock is free: the kernel frees it when its holder dies, and a live
    holder, a paused process (SIGSTOP, a suspended job) or one in a slow ``fsync``, keeps it,
    however long (Optuna's broke it after the grace period: the paused holder then wrote beside
    the breaker, which may have cut its half-written entry off as torn); the waiting processes
    say so once a minute. Only on a local file system: on NFS and other shared ones (where
    machines share a journal) the grace period alone decides, as Optuna's."""
    import fcntl
    import threading
    import weakref

    from optuna.storages.journal import JournalFileOpenLock

    held: weakref.WeakSet = weakref.WeakSet()
    # taken from a lock file's open to its fd's registration in `held`, and by fork: a child
    # forked by another thread in between would otherwise keep an fd that no one closes
    registering = threading.RLock()

    def forget_in_child() -> None:
        # a child forked while a lock was held (a DataLoader worker) must not keep its flock:
        # the lock would outlive its killed holder for as long as the child runs
        for lock in list(held):
            fd, lock._fd = lock._fd, None
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        held.clear()
        registering.release()

    if hasattr(os, "register_at_fork"):
        os.register_at_fork(before=registering.acquire, after_in_parent=registering.release,
                            after_in_child=forget_in_child)

    class RepairingLock(JournalFileOpenLock):
        def __init__(self, path: str) -> None:
            super().__init__(path, grace_period=LOCK_GRACE_PERIOD)
            self.journal = path
            self._fd: int | None = None
            self._flock: bool | None = None  # whether the journal's file system has a local flock

        def acquire(self) -> bool:
            self._take()
            try:
                repair_journal_tail(self.journal, check_last=False)
            except BaseException:
                self.release()
                raise
            return True

        def release(self) -> None:
            """Remove the lock file if it is still this holder's, and let go of it: on a local
            file system the file is removed before its flock is let go (no breaker can take it
            for a dead holder's), elsewhere the file is closed first (NFS would keep an open
            removed file as a ``.nfs*`` file)."""
            fd = self._fd  # dropped in `finally` only: an interrupt before it leaves it held, not lost
            if fd is None:
                raise RuntimeError("Error: did not possess lock")
            try:
                mine = os.fstat(fd)
                try:
                    there = os.stat(self._lock_file)
                except FileNotFoundError:
                    there = None
                if there is None or (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
                    raise RuntimeError(f"the journal lock {self._lock_file} was broken while this process held it "
                                       "(from another machine?): another process may have written at the same time")
                if not self._uses_flock():
                    self._fd = None
                    held.discard(self)
                    os.close(fd)
                os.unlink(self._lock_file)
            finally:
                if self._fd is not None:
                    with registering:
                        self._fd = None
                        held.discard(self)
                        os.close(fd)

        def _take(self) -> None:
            """Optuna's acquire, less its ``release()`` on any exception (interrupted while
            waiting, Ctrl-C or SIGTERM, that removed the lock another process held) and with
            the break rule above: only the lock file that stood still (the same file: Optuna's
            removed whichever was there by then, a new holder's too) and only if its flock is free."""
            if self._still_held():
                return
            delay, seen, since, warned = 0.001, None, time.monotonic(), time.monotonic()
            while True:
                if self._create():
                    return
                try:
                    st = os.stat(self._lock_file)
                except OSError:
                    continue  # just released: try again
                ident = (st.st_dev, st.st_ino, st.st_mtime_ns)
                if ident != seen:
                    seen, since = ident, time.monotonic()
                elif time.monotonic() - since > self.grace_period:
                    if self._break(ident):
                        delay = 0.001
                        continue
                    since = time.monotonic()  # its holder lives on this machine: wait on
                    if time.monotonic() - warned > _WAIT_WARNING:
                        warned = time.monotonic()
                        print(f"synthlab: waiting for the journal lock {self._lock_file}, held for over "
                              f"{self.grace_period:g} s by process {self._holder()} on this machine "
                              "(paused?); it is not broken while that process lives", file=sys.stderr, flush=True)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

        def _uses_flock(self) -> bool:
            if self._flock is None:  # the journal's folder exists by the first acquire
                self._flock = _local_fs(os.path.dirname(os.path.abspath(self._lock_file)))
            return self._flock

        def _still_held(self) -> bool:
            """Whether this object holds the lock already: an interrupt (Ctrl-C, SIGTERM) came
            after it was taken and before Optuna's ``try`` that releases it. Its next write (a
            worker's re-queue of its cell) then goes on under it and releases it, instead of
            waiting forever for its own flock."""
            if self._fd is None:
                return False
            try:
                mine, there = os.fstat(self._fd), os.stat(self._lock_file)
                if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                    return True
            except OSError:
                pass
            with registering:  # broken meanwhile (from another machine): take it anew
                fd = self._fd
                self._fd = None
                held.discard(self)
                os.close(fd)
            return False

        def _create(self) -> bool:
            """Create the lock file, hold its flock and name this process in it; False if it
            exists, or if it was broken before this process held its flock (paused right after
            creating it for longer than the grace period: another holder may have it by now)."""
            flock = self._uses_flock()
            with registering:
                try:
                    fd = os.open(self._lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    return False
                try:
                    if flock:
                        fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a breaker looks at it
                        mine, there = os.fstat(fd), os.stat(self._lock_file)
                        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
                            os.close(fd)
                            return False
                    with contextlib.suppress(OSError):
                        os.write(fd, f"{os.getpid()}\n".encode())
                    self._fd = fd
                    held.add(self)
                except FileNotFoundError:  # broken before the flock, and not replaced yet
                    os.close(fd)
                    return False
                except BaseException:  # interrupted before it was ours: leave no lock behind
                    self._fd = None
                    held.discard(self)
                    with contextlib.suppress(OSError):
                        mine, there = os.fstat(fd), os.stat(self._lock_file)
                        if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                            os.unlink(self._lock_file)
                    os.close(fd)
                    raise
            return True

        def _holder(self) -> str:
            try:
                with open(self._lock_file) as f:
                    return f.read().strip() or "?"
            except OSError:
                return "?"

        def _break(self, ident: tuple[int, int, int]) -> bool:
            """Remove the lock file ``ident`` (device, inode, mtime) unless a live process on
            this machine holds its flock. True if that file is gone (removed here or by its
            holder, or replaced by another): watch again; False if its holder lives."""
            try:
                fd = os.open(self._lock_file, os.O_RDONLY)
            except FileNotFoundError:
                return True
            except OSError:  # cannot even read it: the grace period alone decides, as Optuna's
                with contextlib.suppress(OSError):
                    st = os.stat(self._lock_file)
                    if (st.st_dev, st.st_ino, st.st_mtime_ns) == ident:
                        os.unlink(self._lock_file)
                return True
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino, st.st_mtime_ns) != ident:
                    return True
                if self._uses_flock():
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return False
                    except OSError:  # no flock after all: the grace period decides
                        pass
                try:
                    now = os.stat(self._lock_file)
                except FileNotFoundError:
                    return True
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):  # still the file that stood still
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._lock_file)
                return True
            finally:
                os.close(fd)

    return RepairingLock


def _entry_ok(line: bytes) -> str | None:
    """None if ``line`` is a journal entry (a JSON object with an op code), else why not."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None if isinstance(obj, dict) and "op_code" in obj else "not a journal entry"


def _line_start(f, end: int) -> int:
    """The offset just past the last newline before ``end`` (0 if none)."""
    pos = end
    while pos > 0:
        step = min(1 << 16, pos)
        pos -= step
        f.seek(pos)
        i = f.read(step).rfind(b"\n")
        if i >= 0:
            return pos + i + 1
    return 0


def repair_journal_tail(path: str | os.PathLike, *, check_last: bool = True) -> int | None:
    """Cut a torn last entry (no final newline) off a journal file, and with ``check_last``
    also a complete last line that does not parse; the cut bytes go to ``<path>.torn-<offset>``
    and one warning line to stderr. The caller holds the journal's lock. Returns the offset cut
    at, or None if the file was whole."""
    path = str(path)
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return None
    with f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        f.seek(size - 1)
        end = size if f.read(1) == b"\n" else _line_start(f, size)
        if check_last and end > 0:
            start = _line_start(f, end - 1)
            f.seek(start)
            if _entry_ok(f.read(end - start)) is not None:
                end = start
        if end == size:
            return None
        f.seek(end)
        torn = f.read()
        side = f"{path}{TORN_SUFFIX}{end}"
        n = 1
        while os.path.exists(side):
            n += 1
            side = f"{path}{TORN_SUFFIX}{end}-{n}"
        with open(side, "wb") as g:  # the bytes are kept before they are cut
            g.write(torn)
            g.flush()
            os.fsync(g.fileno())
        f.truncate(end)
        f.flush()
        os.fsync(f.fileno())
    print(f"synthlab: warning: journal {path}: the last entry was torn or unreadable ({len(torn)} bytes at byte "
          f"{end}, e.g. a write cut by a kill); cut off (kept in {side}), the study goes on without that one "
          "operation", file=sys.stderr, flush=True)
    return end


def first_bad_entry(path: str | os.PathLike) -> tuple[int, int, str] | None:
    """(byte offset, entry number from 1, why) of the first line of a journal that is no entry
    (a last line without its newline counts as torn, not bad), or None."""
    offset = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.endswith(b"\n"):
                return None
            why = _entry_ok(line)
            if why is not None:
                return offset, number, why
            offset += len(line)
    return None
