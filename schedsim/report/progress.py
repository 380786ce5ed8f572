"""Progress on stderr for long work (sweeps, large predicts, imports), only on a terminal.

Both helpers are silent when stderr is not a TTY (pipes, CI logs, tests), so machine output on
stdout is never interleaved with bars, and transient: the bar disappears when the work is done.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["track", "status"]

T = TypeVar("T")


def _on() -> bool:
    return sys.stderr.isatty()


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items`` with a rich progress bar (elapsed and remaining time) on a terminal."""
    if not _on():
        yield from items
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True, emoji=False), transient=True) as prog:
        yield from prog.track(items, total=total, description=description)


@contextmanager
def status(description: str, enabled: bool = True) -> Iterator[Any]:
    """A spinner with ``description`` on a terminal while the block runs; ``enabled=False`` for short work."""
    if not (enabled and _on()):
        yield None
        return
    from rich.console import Console

    with Console(stderr=True, emoji=False).status(description) as st:
        yield st
