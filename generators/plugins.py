"""Tasks and encodings from other distributions: entry points, loaded once, on first use.

A distribution adds a task or an encoding by naming it in its package metadata::

    [project.entry-points."synthlab.tasks"]
    my_task = "my_pkg.tasks:MyTask"            # a synthlab.generators.Task subclass
    [project.entry-points."synthlab.encodings"]
    my-pe = "my_pkg:MY_PE"                     # a synthlab.model.registry.Encoding row

(docs/plugins.md). :class:`PluginRegistry` is the mapping behind ``synthlab.generators.TASKS`` and
``synthlab.model.registry.COMPONENTS``: the built-ins are in it from the start, and the first
read of any kind (a lookup, ``in``, iteration, ``len``) loads the group's entry points, so
``import synthlab`` reads no package metadata and a plugin is there wherever a name is looked up
(``get_task``, ``parse_pe``, ``synthlab tasks``, a sweep's worker process). Writes
(``register``) do not load: registering the built-ins at import stays cheap.

A broken plugin never breaks synthlab: an entry point that fails to import, names the wrong
kind of object, or takes a name already registered (a built-in, or an earlier plugin) is
skipped with one warning line on stderr naming it, its distribution and the reason.

It lives here, at the lowest layer, because both registries use it and ``synthlab.generators``
may import nothing else from ``synthlab`` (docs/architecture.md, layers); it needs only the standard
library.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from importlib.metadata import EntryPoint, entry_points
from typing import TypeVar

V = TypeVar("V")

_UNLOADED, _LOADING, _LOADED = "unloaded", "loading", "loaded"


def distribution_label(ep: EntryPoint) -> str:
    """``"name version"`` of the distribution that declares ``ep`` (what the listings show)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown distribution"
    return f"{dist.name} {dist.version}"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class PluginRegistry(MutableMapping[str, V]):
    """A name -> object table that loads the entry points of ``group`` on its first read.

    ``adopt(entry_point_name, obj)`` checks one loaded object and registers it (through the
    owner's ``register``, so a plugin passes the checks a run-time registration does); any
    exception it or the import raises skips that plugin with a warning. ``origin(name)`` is the
    distribution a plugin row came from (None for built-in and run-time rows).
    """

    def __init__(
        self,
        group: str,
        what: str,
        builtins: dict[str, V],
        adopt: Callable[[str, object], None],
        discover: Callable[[str], Iterable[EntryPoint]] | None = None,
    ) -> None:
        self.group = group
        self.what = what  # "task" / "encoding", for the warning line
        self._rows: dict[str, V] = dict(builtins)
        self.builtins = frozenset(builtins)  # the names no plugin may take
        self._adopt = adopt
        self._discover = discover or (lambda g: entry_points(group=g))
        self._origins: dict[str, str] = {}
        self._state = _UNLOADED
        # reentrant: adopt() registers, and register() reads the table (the loading thread passes
        # through); another thread waits here until every plugin is in
        self._lock = threading.RLock()

    # ---- loading ---------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if self._state == _LOADED:
            return
        with self._lock:
            if self._state != _UNLOADED:  # loaded meanwhile, or this thread is loading (register())
                return
            self._state = _LOADING
            try:
                self._load()
            finally:
                self._state = _LOADED

    def _load(self) -> None:
        try:
            found = list(self._discover(self.group))
        except Exception as e:  # unreadable package metadata: no plugins, synthlab still works
            print(
                f"synthlab: warning: {self.what} plugins not loaded: cannot read entry points "
                f"{self.group!r} ({_one_line(e)})",
                file=sys.stderr,
                flush=True,
            )
            return
        for ep in found:
            dist = distribution_label(ep)
            try:
                self._adopt(ep.name, ep.load())
            except Exception as e:  # a plugin's import may raise anything; it must not stop synthlab
                print(
                    f"synthlab: warning: {self.what} plugin {ep.name!r} ({dist}, {ep.value}) skipped: {_one_line(e)}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            self._origins[ep.name] = dist

    def origin(self, name: str) -> str | None:
        """The distribution (``"name version"``) that added ``name`` as a plugin, else None."""
        self._ensure_loaded()
        return self._origins.get(name)

    # ---- the mapping ----------------------------------------------------------------------

    def __getitem__(self, name: str) -> V:
        self._ensure_loaded()
        return self._rows[name]

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._rows

    def __iter__(self) -> Iterator[str]:
        self._ensure_loaded()
        return iter(list(self._rows))  # a snapshot: unregistering while iterating is safe

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._rows)

    def __setitem__(self, name: str, value: V) -> None:
        self._rows[name] = value

    def __delitem__(self, name: str) -> None:
        self._ensure_loaded()
        del self._rows[name]
        self._origins.pop(name, None)

    def __repr__(self) -> str:
        self._ensure_loaded()
        return f"{type(self).__name__}({self.group!r}, {self._rows!r})"


__all__ = ["PluginRegistry", "distribution_label"]
