"""Every Optuna name synthlab uses that Optuna does not make public, in one place.

Optuna has no public trial id (the key of its storage's public methods) and no public name for
a journal lock's file. Outside :data:`TESTED` the import warns
(:class:`OptunaVersionWarning`: the names may still be there); a name Optuna dropped raises
:class:`OptunaAPIError` at its first use. Importing this module loads no optuna.
"""

from __future__ import annotations

import re
import warnings
from importlib import metadata
from typing import Any

# [floor, ceiling): the floor is pyproject.toml's optuna requirement, the ceiling the next major
TESTED = ((4, 3), (6, 0))


class OptunaAPIError(RuntimeError):
    """The installed Optuna lacks a private name synthlab relies on."""


class OptunaVersionWarning(UserWarning):
    """The installed Optuna is outside :data:`TESTED`."""


def installed() -> str:
    return metadata.version("optuna")


def _release(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _tested() -> str:
    (a, b), (c, d) = TESTED
    return f"optuna>={a}.{b},<{c}.{d}"


def check_version(version: str | None = None) -> bool:
    """Whether ``version`` (default: the installed one) is in :data:`TESTED`; warns if not."""
    version = version or installed()
    if TESTED[0] <= _release(version) < TESTED[1]:
        return True
    warnings.warn(
        f"synthlab uses private Optuna names tested with {_tested()}; optuna {version} is installed",
        OptunaVersionWarning,
        stacklevel=2,
    )
    return False


def _private(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise OptunaAPIError(
            f"optuna {installed()} has no {type(obj).__name__}.{name}, which synthlab needs (tested with "
            f"{_tested()}): install a tested optuna"
        ) from None


def trial_id(trial: Any) -> int:
    """The storage's id of a Trial or FrozenTrial: what ``BaseStorage.set_trial_*`` take.
    No public accessor yet (asked for: https://github.com/optuna/optuna/issues/6365)."""
    return _private(trial, "_trial_id")


def lock_path(lock: Any) -> str:
    """The lock file of a ``JournalFileOpenLock``: the same file as Optuna's own lock takes.
    No public accessor and no upstream request yet; the lock's rules: https://github.com/optuna/optuna/pull/5971."""
    return _private(lock, "_lock_file")


check_version()
