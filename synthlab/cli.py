"""`synthlab` command line: argument parsing only; each command lives in synthlab/commands/.

Exit codes: 0 success, 2 bad input (one line on stderr, nothing written), 1 an environment
error (one line naming the path: disk full, read-only file system, permission denied) or an
internal error, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

# command name -> module in synthlab.commands exposing add_parser(subparsers) and run(args)
COMMANDS = ("tasks", "encodings", "generate", "train", "sweep", "grid", "curves", "export", "plot", "report")


class _Parser(argparse.ArgumentParser):
    """argparse exits with 2 on bad usage already; keep its message to one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="synthlab",
        description=(
            "Synthetic tasks x positional encodings: generate data, train small Transformers, sweep, draw grids."
        ),
        epilog="example: synthlab sweep flipflop --pe cope,rope",
    )
    from synthlab import __version__

    parser.add_argument("--version", action="version", version=f"synthlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"synthlab.commands.{name}")
        module.add_parser(sub)
        sub.choices[name].set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from synthlab.study.workers import sigterm_as_ctrl_c

    try:
        with sigterm_as_ctrl_c():  # preemption / `timeout` stop every command as Ctrl-C does: exit 130
            return int(args.run(args) or 0)
    except ValueError as e:  # bad input: UsageError or any validation error
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"synthlab {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("synthlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `synthlab generate ... | head`
        return 0
    except OSError as e:  # the environment: disk full, read-only, permission denied, ...
        from synthlab.core.errors import os_error_line

        print(f"synthlab {args.command}: error: {os_error_line(e)}", file=sys.stderr)
        return 1


def exit_as_main(code: int) -> NoReturn:
    """``sys.exit(code)`` for ``python -m synthlab.cli``. Run with ``-m``, CPython kills itself with
    SIGINT at exit (a parent sees -2, not 130) once a KeyboardInterrupt has left code it ran from a
    string, even one :func:`main` caught: a stop that lands while a namedtuple or dataclass is made
    during an import sets that flag (bpo-41602 added the check). Evaluating any string clears it."""
    eval("None")
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    exit_as_main(main())
