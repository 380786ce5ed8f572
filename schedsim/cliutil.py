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

from schedsim.errors import SchedsimError

__all__ = ["DEFAULT_PROFILE", "OutFormat", "call_handled", "debugging", "handle_errors", "print_error", "report_bug",
           "warn"]

DEFAULT_PROFILE = "h200"


class OutFormat(str, Enum):
    table = "table"
    json = "json"


#: Longest error text printed, characters (a pipeline grid of hundreds of steps fits): an error quoting a
#: megabyte-long value must not flood the terminal
#: (each line is also cut, see :func:`print_error`).
MAX_ERROR_CHARS = 100_000
MAX_ERROR_LINE = 2_000


def debugging() -> bool:
    """Whether tracebacks are wanted: ``schedsim --debug ...`` or ``SCHEDSIM_DEBUG`` set to anything but 0."""
    import os

    return os.environ.get("SCHEDSIM_DEBUG", "") not in ("", "0")


def print_error(text: object) -> None:
    """Print ``error: <text>`` on stderr, control characters escaped (:func:`~schedsim.errors.printable`), each
    line cut to :data:`MAX_ERROR_LINE` characters and the whole to :data:`MAX_ERROR_CHARS`."""
    from schedsim.errors import printable

    lines = [printable(ln, MAX_ERROR_LINE) for ln in printable(text, MAX_ERROR_CHARS, newlines=True).split("\n")]
    _print_err("error: " + "\n".join(lines))


def _print_err(text: str) -> None:
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # stderr closed: nothing left to tell
        pass


def warn(text: object) -> None:
    """Print ``warning: <text>`` on stderr, control characters escaped (:func:`~schedsim.errors.printable`) and
    cut to :data:`MAX_ERROR_LINE` characters."""
    from schedsim.errors import printable

    _print_err("warning: " + printable(text, MAX_ERROR_LINE))


def report_bug(e: BaseException) -> None:
    """Print an unexpected exception (a bug of schedsim) as one ``error:`` line and a "please report" line."""
    from schedsim import __version__

    print_error(f"internal error: {type(e).__name__}: {e}")
    _print_err(f"  please report this bug (schedsim {__version__}, Python {sys.version.split()[0]}) with the command "
               "line and its input; `schedsim --debug ...` (or SCHEDSIM_DEBUG=1) shows the traceback")


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of a typer command: :func:`call_handled`, an error's exit code raised as ``typer.Exit``."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        result, code = call_handled(fn, a, kw)
        if code is not None:
            import typer

            raise typer.Exit(code)
        return result

    return wrapper


def call_handled(fn: Callable[..., Any], a: tuple[Any, ...], kw: dict[str, Any]) -> tuple[Any, int | None]:
    """``fn(*a, **kw)`` as every command runs: (its result, None); or (None, the exit code) after printing what
    went wrong: a :class:`SchedsimError` or an :class:`OSError` becomes ``error: ...`` (:func:`print_error`) on
    stderr and exit code 2; Ctrl-C exit 130; a closed stdout (`| head`) exit 0; any other exception a bug report
    (:func:`report_bug`) and exit 1, with its traceback only when :func:`debugging` (then raised). typer's own
    ways out (``typer.Exit``, ``Abort``, its usage errors) and SystemExit pass through."""
    try:
        result = fn(*a, **kw)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return result, None
    except BrokenPipeError:  # `schedsim predict | head`: the reader left; that is not an error
        _quiet_stdout()
        return None, 0
    except SchedsimError as e:
        print_error(e)
        return None, 2
    except OSError as e:  # an output or input path the OS refuses: the user's to fix
        import errno

        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = ("free space on that disk, or write elsewhere with --out; the output folder keeps its earlier "
                   "files (outputs are written all or nothing)")
        else:
            fix = "choose a path you can write (and that is not a file where a folder is needed, or the reverse)"
        print_error(SchedsimError(f"{where}{e.strerror or e}", fix=fix))
        return None, 2
    except KeyboardInterrupt:
        _print_err("interrupted; outputs are written all or nothing, so none of this run's files were kept")
        return None, 130
    except Exception as e:
        typer = sys.modules.get("typer")  # only typer's commands can raise its exceptions, so only then loaded
        if typer is not None and isinstance(e, (typer.Exit, typer.Abort, typer.TyperException)):
            raise
        if debugging():
            raise
        report_bug(e)
        return None, 1


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail on a closed pipe again."""
    import os

    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (tests' captured stdout)
        pass
