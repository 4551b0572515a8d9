"""Study storage: where a sweep's Optuna study lives (journal file, SQLite, PostgreSQL, ...).

Default storage: an Optuna journal file (``JournalFileBackend``) in the output directory. It is
an append-only log written under a lock file with one ``write`` + ``fsync`` per operation, so
several processes on one machine share it without "database is locked" errors (SQLite's
failure mode under concurrent writers), and a hard kill loses at most the operation in flight;
a lock left by a killed process is broken after a short grace period.

This module owns the URL forms (:func:`normalize_url`), the checks run before anything is
written (:func:`check_storage`) and opening a storage safely from several workers at once
(:func:`open_storage`).
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path
from typing import Any

JOURNAL_NAME = "study.journal"


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
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    url = normalize_url(url)
    if _is_journal_path(url):
        path = str(Path(url).expanduser())
        backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path, grace_period=10))
        return JournalStorage(backend)
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
