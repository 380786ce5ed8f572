"""What every command module shares: the error handler, the output format option, the default profile.

:mod:`schedsim.cli` and the modules that register commands on its app (:mod:`schedsim.compare`,
:mod:`schedsim.trace.commands`, :mod:`executor.commands`) import these from here, so nothing below
the entry point imports :mod:`schedsim.cli`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from enum import Enum
from typing import Any

import typer

from schedsim.errors import SchedsimError

__all__ = ["DEFAULT_PROFILE", "OutFormat", "handle_errors"]

DEFAULT_PROFILE = "h200"


class OutFormat(str, Enum):
    table = "table"
    json = "json"


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: turn SchedsimError into ``error: ...`` on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            result = fn(*a, **kw)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
            return result
        except BrokenPipeError:  # `schedsim predict | head`: the reader left; that is not an error
            _quiet_stdout()
            raise typer.Exit(0) from None
        except SchedsimError as e:
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(2) from None
        except OSError as e:  # an output or input path the OS refuses: the user's to fix
            import errno

            where = f"{e.filename}: " if getattr(e, "filename", None) else ""
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                fix = ("free space on that disk, or write elsewhere with --out; the output folder keeps its earlier "
                       "files (outputs are written all or nothing)")
            else:
                fix = "choose a path you can write (and that is not a file where a folder is needed, or the reverse)"
            err = SchedsimError(f"{where}{e.strerror or e}", fix=fix)
            print(f"error: {err}", file=sys.stderr)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            print("interrupted; outputs are written all or nothing, so none of this run's files were kept",
                  file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail on a closed pipe again."""
    import os

    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests' captured stdout)
        pass
