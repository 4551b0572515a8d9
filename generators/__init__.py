"""Synthetic tasks with exactly known answers (numpy only; never imports torch).

    >>> from synthlab import generators
    >>> task = generators.get_task("flipflop", n_pairs=64)
    >>> s = task.sample("test", n=1, seed=0)[0]
    >>> task.solve(s) == s.targets
    True

Tasks from other distributions join ``TASKS`` through the entry-point group ``synthlab.tasks``
(one entry point per task, named like it, naming its Task subclass), loaded on the table's
first read (:mod:`synthlab.generators.plugins`, docs/plugins.md).
"""

from __future__ import annotations

from typing import Any

from . import arithmetic, binfa, che, counting, flipflop, mqar, passkey, selective_copy
from .base import PAD, Param, Sample, Task
from .plugins import PluginRegistry


def _adopt(entry_point: str, cls: object) -> None:
    """Register a task plugin: a Task subclass named like its entry point, whose defaults make
    a task (a class that cannot describe itself would break `synthlab tasks`)."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"the entry point names {cls!r}, not a synthlab.generators.Task subclass")
    if getattr(cls, "name", None) != entry_point:
        raise ValueError(
            f"the entry point is named {entry_point!r} but the task's name is {getattr(cls, 'name', None)!r}"
        )
    cls().describe()
    if entry_point in TASKS.builtins or TASKS.get(entry_point) is not cls:  # else its module registered it (@register)
        register(cls)


#: name -> task class: the built-ins, then (on first read) the plugins
TASKS: PluginRegistry[type[Task]] = PluginRegistry(
    "synthlab.tasks",
    "task",
    {
        **flipflop.TASKS,
        **selective_copy.TASKS,
        **counting.TASKS,
        **arithmetic.TASKS,
        **binfa.TASKS,
        **che.TASKS,
        **mqar.TASKS,
        **passkey.TASKS,
    },
    adopt=_adopt,
)


def get_task(name: str, **params: Any) -> Task:
    """The task ``name`` with ``params`` (ValueError for an unknown name or parameter)."""
    try:
        cls = TASKS[name]
    except KeyError:  # one line: the closest names, not all of them (`synthlab tasks` lists them)
        import difflib

        close = difflib.get_close_matches(str(name), list(TASKS), n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else "see `synthlab tasks`"
        raise ValueError(f"unknown task {name!r} ({hint})") from None
    return cls(**params)


def register(cls: type[Task]) -> type[Task]:
    """Add a task class (one small :class:`Task` subclass) to ``TASKS`` under ``cls.name``;
    usable as a class decorator. ValueError for a taken name or a class that is not a Task."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise ValueError(f"register() takes a Task subclass, got {cls!r}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a task's name must be an identifier, got {name!r}")
    if name in TASKS:
        by = TASKS.origin(name)
        raise ValueError(f"task {name!r} is already registered" + (f" (by plugin {by})" if by else ""))
    TASKS[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove a task added with :func:`register` (KeyError if there is none)."""
    del TASKS[name]


__all__ = ["PAD", "Param", "Sample", "TASKS", "Task", "get_task", "register", "unregister"]
