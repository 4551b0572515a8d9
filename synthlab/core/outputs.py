"""Files written together or not at all: grids, line plots, exports.

A command that writes several files (a heatmap's PNG, CSV and Markdown; a line plot and the
table it drew) checks every path first, writes each into a temporary file beside it and
renames them at the end, so a bad path or a failure (a full disk, an exception while
drawing) leaves none of them and no temporary file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from synthlab.core.errors import check_output_file, naming

Writer = Callable[[Path], object]  # its return value is not used


def write_files(files: dict[str, tuple[Path, Writer]], what: str) -> dict[str, str]:
    """``{key: (path, write)}``: ``write(tmp)`` writes the file's content to ``tmp``; returns
    ``{key: path}``. ValueError (bad path) or OSError (naming the path) before anything is
    renamed into place."""
    paths = {k: Path(p) for k, (p, _) in files.items()}
    for p in paths.values():
        check_output_file(p, what)
    tmp = {k: p.with_name(f".{p.name}.{os.getpid()}.tmp") for k, p in paths.items()}
    try:
        for k, (_, write) in files.items():
            with naming(paths[k], tmp[k]):
                write(tmp[k])
        for k, p in paths.items():
            with naming(p, tmp[k]):
                os.replace(tmp[k], p)
    finally:
        for t in tmp.values():
            if os.path.lexists(t):
                os.unlink(t)
    return {k: str(p) for k, p in paths.items()}


def png_writer(fig: Any) -> Writer:
    """Save a matplotlib Figure as PNG (any backend: a Figure saves itself, no pyplot)."""
    return lambda path: fig.savefig(path, dpi=120, format="png")


def csv_writer(table: Any) -> Writer:
    """Save a pandas DataFrame as CSV without its index."""
    return lambda path: table.to_csv(path, index=False)


def text_writer(text: str) -> Writer:
    """Save ``text`` as UTF-8 (newlines as given)."""
    return lambda path: Path(path).write_text(text, encoding="utf-8", newline="")


def same_text(path: str | os.PathLike, text: str) -> bool:
    """Whether the file at ``path`` holds exactly ``text`` (UTF-8); False if it cannot be read."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read() == text
    except (OSError, UnicodeDecodeError):
        return False


def require_pyarrow(what: str) -> Any:
    """The pyarrow module, or ValueError naming the extra that installs it (Parquet output is
    optional: ``pip install 'synthlab-pe[parquet]'``)."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401  (the writer itself)
    except ImportError:
        raise ValueError(f"{what} needs pyarrow, which is not installed: pip install 'synthlab-pe[parquet]'") from None
    return pyarrow


# file suffix -> the format it names (for --format's default and its check against -o)
SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def pick_format(given: str | None, path: str | os.PathLike | None, formats: tuple[str, ...]) -> str:
    """The output format among ``formats``: ``--format`` when given, else the one the ``-o``
    suffix names, else ``formats[0]``. ValueError when --format and the suffix name two of
    ``formats`` (a Parquet file that holds CSV helps no one); other suffixes are the user's."""
    named = SUFFIXES.get(Path(path).suffix.lower()) if path is not None else None
    named = named if named in formats else None
    if given is not None and named is not None and given != named:
        raise ValueError(f"--format {given} but -o {str(path)!r} names a {named} file (use a .{given} name)")
    return given or named or formats[0]
