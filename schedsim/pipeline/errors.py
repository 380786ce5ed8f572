"""Errors of :mod:`schedsim.pipeline`, and the rank x step grid they print.

Hierarchy::

    PipelineScheduleError(ValueError)   every schedule failure; validate's carry the grid
    ├── ScheduleConfigError             bad generator arguments (rule + fix, no grid)
    ├── InsufficientMicrobatchesError   m below what the schedule needs
    └── DeadlockError                   a cross-rank p2p wait cycle (grid + cycle)

``PipelineScheduleError`` also derives from ``schedsim.errors.SchedsimError``
when that module is importable, so the schedsim CLI reports it like any other
user error.

The grid follows PyTorch's ``_format_pipeline_order``
(``torch/distributed/pipelining/schedules.py``): one row per step, one column
per rank, idle cells empty, and the failing step suffixed ``<-- ERROR HERE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

try:  # integrate with the core's hierarchy when it is there
    from schedsim.errors import SchedsimError as _SchedsimBase
except ImportError:  # pragma: no cover - core not present

    class _SchedsimBase(Exception):  # type: ignore[no-redef]
        """Stand-in when schedsim.errors is absent."""


__all__ = [
    "ERROR_MARK",
    "DeadlockError",
    "InsufficientMicrobatchesError",
    "PipelineScheduleError",
    "ScheduleConfigError",
    "format_pipeline_order",
]

#: Suffix of the failing row, as in torch's ``_format_pipeline_order``.
ERROR_MARK = "<-- ERROR HERE"


class PipelineScheduleError(_SchedsimBase, ValueError):
    """A pipeline schedule is invalid or would hang.

    Parameters
    ----------
    message : str
        What is wrong, naming the offending actions.
    order : mapping of int to sequence, optional
        The rank -> actions order to print as a grid.
    step : int, optional
        Row of the grid to mark with ``<-- ERROR HERE``.
    rank : int, optional
        Rank at fault, when there is one.
    actions : sequence, optional
        The offending actions.

    Attributes
    ----------
    rank, step, actions, grid
        As given; ``grid`` is the formatted table or ``""``.
    """

    def __init__(
        self,
        message: str,
        *,
        order: Mapping[int, Sequence[object | None]] | None = None,
        step: int | None = None,
        rank: int | None = None,
        actions: Sequence[object] = (),
    ) -> None:
        self.rank = rank
        self.step = step
        self.actions = tuple(actions)
        self.grid = format_pipeline_order(order, error_step=step) if order is not None else ""
        self.reason = message
        full = message if not self.grid else f"{message}\n\nPipeline schedule:\n{self.grid}"
        super().__init__(full)


class ScheduleConfigError(PipelineScheduleError):
    """Generator arguments break a schedule's rule (message: rule, values, fix)."""


class InsufficientMicrobatchesError(PipelineScheduleError):
    """Fewer microbatches than the schedule needs.

    Sources: torchtitan#775 (PP hangs with m < p for the 1F1B family;
    torch ``Schedule1F1B`` rejects m < p) and DeepSeek ``dualpipev.py`` /
    torch ``ScheduleDualPipeV`` (m >= 2p).
    """


class DeadlockError(PipelineScheduleError):
    """Ranks wait on each other's p2p in a cycle; the schedule would hang.

    Attributes
    ----------
    cycle : tuple of int
        Ranks around the wait cycle, in wait order (empty if the stall is not
        a cycle, e.g. a recv whose send is never issued).
    """

    def __init__(self, message: str, *, cycle: Sequence[int] = (), **kwargs: object) -> None:
        self.cycle = tuple(cycle)
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


def format_pipeline_order(
    order: Mapping[int, Sequence[object | None]],
    error_step: int | None = None,
) -> str:
    """Format a rank -> actions order as a step (row) x rank (column) grid.

    Parameters
    ----------
    order : mapping of int to sequence of action or None
        Per-rank action lists; ``None`` prints as an empty (idle) cell.
    error_step : int, optional
        Row to mark with ``<-- ERROR HERE``.

    Returns
    -------
    str
        The table, one line per step, ending in a newline.

    Notes
    -----
    Layout of PyTorch's ``_format_pipeline_order``
    (``torch/distributed/pipelining/schedules.py``).

    Examples
    --------
    >>> print(format_pipeline_order({0: ["0F0", None], 1: [None, "1F0"]}, 1), end="")
            Rank 0 Rank 1
    Step 0: 0F0
    Step 1:        1F0    <-- ERROR HERE
    """
    ranks = sorted(order)
    cols = [["" if a is None else str(a) for a in order[r]] for r in ranks]
    num_steps = max((len(c) for c in cols), default=0)
    if error_step is not None:
        num_steps = max(num_steps, error_step + 1)
    width_idx = len(str(max(num_steps - 1, 0)))
    labels = [f"Step {str(i).zfill(width_idx)}" for i in range(num_steps)]
    rank_labels = [f"Rank {r}" for r in ranks]
    widths = [max([len(rank_labels[j])] + [len(x) for x in cols[j]]) for j in range(len(ranks))]
    pad = " " * (len(labels[0]) + 2) if labels else ""
    header = pad + " ".join(f"{lab:<{widths[j]}}" for j, lab in enumerate(rank_labels))
    lines = [header.rstrip()]
    for i, label in enumerate(labels):
        cells = [cols[j][i] if i < len(cols[j]) else "" for j in range(len(ranks))]
        row = f"{label}: " + " ".join(f"{c:<{widths[j]}}" for j, c in enumerate(cells))
        if error_step is not None and i == error_step:
            row = f"{row} {ERROR_MARK}"
        else:
            row = row.rstrip()
        lines.append(row)
    return "\n".join(lines) + "\n"
