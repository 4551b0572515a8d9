"""A source checkout imported without an install (PYTHONPATH=checkout, as scripts/gpu_session.sh
runs it): its generators/ and sweeps/ folders are the packages ``synthlab.generators`` and
``synthlab.sweeps``, as an install (a wheel, an editable install's finder) places them."""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec

#: subpackage -> its folder in the repository (pyproject.toml's [tool.setuptools.package-dir])
FOLDERS = {"synthlab.generators": "generators", "synthlab.sweeps": "sweeps"}


class CheckoutFolderFinder:
    """Finds the subpackages of :data:`FOLDERS` in the repository ``root``. It sits last on
    ``sys.meta_path``, so an install's own finder answers first."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        folder = FOLDERS.get(fullname)
        if folder is None:
            return None
        location = os.path.join(self.root, folder)
        return importlib.util.spec_from_file_location(
            fullname, os.path.join(location, "__init__.py"), submodule_search_locations=[location]
        )


def checkout_root() -> str | None:
    """The repository holding synthlab when it is imported from a checkout (pyproject.toml and
    the folders of :data:`FOLDERS` beside the package); None in an installed wheel."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    marks = ["pyproject.toml", *(os.path.join(f, "__init__.py") for f in FOLDERS.values())]
    return root if all(os.path.isfile(os.path.join(root, m)) for m in marks) else None


def add_finder() -> None:
    """Append a :class:`CheckoutFolderFinder` to ``sys.meta_path`` in a checkout (once)."""
    root = checkout_root()
    if root is not None and not any(isinstance(f, CheckoutFolderFinder) for f in sys.meta_path):
        sys.meta_path.append(CheckoutFolderFinder(root))
