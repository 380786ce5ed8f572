"""What the schedule generators share: the action shorthands, the placement names and the argument checks.

The checks raise :class:`~schedsim.errors.ScheduleConfigError` for p, m or v out of range and
:class:`~schedsim.errors.InsufficientMicrobatchesError` for too few microbatches, naming the schedule and
the rule it needs.
"""

from __future__ import annotations

from typing import Literal

from schedsim.errors import InsufficientMicrobatchesError, ScheduleConfigError
from schedsim.pipeline.actions import (
    ComputationType,
)

_F = ComputationType.F


_B = ComputationType.B


_I = ComputationType.I


_W = ComputationType.W


Placement = Literal["loop", "v"]


def _check_pm(p: int, m: int) -> None:
    for name, value in (("p", p), ("m", m)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleConfigError(f"{name} must be a positive integer, got {name}={value!r}",
                                      fix=f"pass {name}>=1")


def _check_v(v: int, *, least: int, schedule: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < least:
        hint = " (use '1f1b' for one chunk per rank)" if least == 2 else ""
        raise ScheduleConfigError(
            f"{schedule} needs v (chunks per rank) >= {least}, got v={v!r}", fix=f"pass v={least} or more{hint}"
        )


def _require_microbatches(schedule: str, p: int, m: int, need: int, rule: str) -> None:
    if m < need:
        raise InsufficientMicrobatchesError(
            f"{schedule} with p={p} needs at least {need} microbatches ({rule}), "
            f"got m={m}", fix=f"raise m to {need} or more (or lower p)"
        )
