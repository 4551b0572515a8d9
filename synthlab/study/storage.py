"""Study storage: where a sweep's Optuna study lives (journal file, SQLite, PostgreSQL, ...).

Default: an Optuna journal file in the output directory, shared by several processes under a
lock file (:mod:`synthlab.study.journallock`). A torn last entry is cut off by whoever holds the
lock (:func:`repair_journal_tail`); damage before it raises ValueError naming the byte offset.
Also :func:`normalize_url`, :func:`check_storage` and :func:`open_storage`. Why and how:
docs/architecture.md, "The sweep queue's rules".
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from synthlab.study import journallock

JOURNAL_NAME = "study.journal"
TORN_SUFFIX = ".torn-"


def _is_journal_path(url: str) -> bool:
    return "://" not in url


def normalize_url(url: str) -> str:
    """``postgresql://`` (or ``postgres://``) with no driver named: psycopg 3, which the
    ``postgres`` extra installs (``postgresql+psycopg://``; SQLAlchemy 2.0 would pick psycopg2
    for a bare URL); psycopg2 only where it is installed and psycopg 3 is not. A URL that names
    its driver is kept."""
    import importlib.util

    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            rest = url[len(bare) :]
            if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
                return "postgresql+psycopg2://" + rest
            return "postgresql+psycopg://" + rest
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
        path = url[len("sqlite:///") :]
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
        hint = " (install the driver: pip install 'synthlab-pe[postgres]')" if url.startswith("postgres") else ""
        raise ValueError(f"--storage {_redact(url)}: cannot load the database driver: {e}{hint}") from None
    except Exception as e:
        raise ValueError(
            f"--storage {_redact(url)}: not a usable storage URL ({type(e).__name__}: {e}; "
            "allowed: a journal file path, sqlite:///FILE, postgresql://..., mysql://...)"
        ) from None
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
    if path.exists() and not path.is_dir() and not path.is_file():  # a FIFO would block the open forever
        raise ValueError(f"--storage {url!r} is not a regular file (a FIFO, a device or a socket)")
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 24)
    except OSError:  # missing (a new journal), a directory or unreadable: checked where it is written
        return
    why = _entry_ok(first) if first.endswith(b"\n") else None
    if why is not None:
        raise ValueError(
            f"--storage {url!r} is not an Optuna journal file (line 1: {why}); name a new file or an existing journal"
        )


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


def export_results(storage: str, study: str, path: str | os.PathLike) -> int:
    """Rebuild a results JSONL from a study's trials (the records stored in user attrs)."""
    import optuna

    from synthlab.run.records import write_records

    check_storage(storage)
    st = optuna.load_study(study_name=study, storage=open_storage(storage))
    recs = [
        t.user_attrs["record"]
        for t in sorted(st.get_trials(deepcopy=False), key=lambda t: t.number)
        if "record" in t.user_attrs
    ]
    write_records(Path(path), recs)
    return len(recs)


def peek_storage(url: str):
    """A storage to read an existing journal or SQLite file as it is: nothing repaired, locked
    or created (a torn journal raises; :func:`open_storage` repairs it)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    url = normalize_url(url)
    if _is_journal_path(url):
        return JournalStorage(JournalFileBackend(str(Path(url).expanduser()), lock_obj=_NoLock()))  # type: ignore[arg-type]  # duck-typed
    return optuna.storages.RDBStorage(url, skip_table_creation=True, skip_compatibility_check=True)


class _NoLock:
    """A journal lock for reading only (reading takes no lock; nothing here writes)."""

    def acquire(self) -> bool:
        raise RuntimeError("a journal opened by peek_storage is read-only")

    def release(self) -> None:
        pass


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
    backend = _named_backend_class()(path, lock_obj=lock)
    try:
        return JournalStorage(backend)
    except Exception:
        bad = first_bad_entry(path)
        if bad is None:
            raise
        offset, number, why = bad
        raise ValueError(
            f"journal {path!r} is corrupt at byte {offset} (entry {number}: {why}); only a torn last "
            "entry is repaired: restore the file, or truncate it at that byte to keep the study before "
            "it (what follows is lost)"
        ) from None


def _named_backend_class():
    from optuna.storages.journal import JournalFileBackend

    from synthlab.core.errors import naming

    class NamedJournalBackend(JournalFileBackend):
        """A journal file whose failed reads and writes name it (a full disk: ``PATH: No space
        left on device``, where optuna's own write named no file)."""

        def __init__(self, file_path: str, lock_obj: Any = None) -> None:
            super().__init__(file_path, lock_obj=lock_obj)
            self.path = file_path

        def append_logs(self, logs):
            with naming(self.path):
                return super().append_logs(logs)

        def read_logs(self, log_number_from):  # a generator: the reads happen while it is consumed
            with naming(self.path):
                yield from super().read_logs(log_number_from)

    return NamedJournalBackend


def _repairing_lock_class():
    """The journal's lock (:func:`synthlab.study.journallock.lock_class`), repairing with
    :func:`repair_journal_tail`."""
    return journallock.lock_class(repair_journal_tail)


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
    print(
        f"synthlab: warning: journal {path}: the last entry was torn or unreadable ({len(torn)} bytes at byte "
        f"{end}, e.g. a write cut by a kill); cut off (kept in {side}), the study goes on without that one "
        "operation",
        file=sys.stderr,
        flush=True,
    )
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
