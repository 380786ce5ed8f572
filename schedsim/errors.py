"""Exception hierarchy of schedsim.

A shallow hierarchy in the style of ``networkx.exception``::

    SchedsimError
    ├── SpecError          bad schedule YAML (file, line, column, field path, fix)
    ├── ProfileError       bad hardware profile
    ├── GraphError         the schedule's DAG is unusable
    │   ├── CycleError     a dependency cycle (lists the ops around it)
    │   └── DeadlockError  ranks would hang (collective order, unmatched p2p)
    └── TraceError         a trace or timeline file cannot be read

The command line catches :class:`SchedsimError` only, prints its message and
exits with code 2. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = [
    "SchedsimError",
    "SpecError",
    "ProfileError",
    "GraphError",
    "CycleError",
    "DeadlockError",
    "TraceError",
]


class SchedsimError(Exception):
    """Base class of every error schedsim reports to a user."""


class SpecError(SchedsimError):
    """A schedule file is invalid.

    Parameters
    ----------
    message : str
        What is wrong, in one line.
    file : str, optional
        Path of the YAML file.
    line, column : int, optional
        1-based position of the offending node in ``file``.
    path : str, optional
        Dotted field path, e.g. ``ops[3].m``.
    fix : str, optional
        One line telling the user what to write instead.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        path: str | None = None,
        fix: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.path = path
        self.fix = fix
        super().__init__(self.format())

    def format(self) -> str:
        """``file:line:col: path: message`` and, on the next line, ``fix: ...``."""
        where = self.file or "<schedule>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        head = f"{where}: "
        if self.path:
            head += f"{self.path}: "
        text = head + self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class ProfileError(SchedsimError):
    """A hardware profile is missing, invalid or lacks a needed entry."""


class GraphError(SchedsimError):
    """The schedule's DAG cannot be simulated or executed."""


class CycleError(GraphError):
    """The dependencies form a cycle; ``cycle`` lists the op ids around it."""

    def __init__(self, message: str, cycle: list[str]) -> None:
        self.cycle = cycle
        super().__init__(message)


class DeadlockError(GraphError):
    """Real ranks would hang: mismatched collective order or unmatched p2p."""


class TraceError(SchedsimError):
    """A timeline or trace file is missing, truncated or malformed."""
