"""Expansion of a ``pipeline:`` block into ordinary ops (see docs/pipelines.md)."""

from __future__ import annotations

from schedsim.errors import SpecError
from schedsim.spec.model import ScheduleSpec

__all__ = ["expand_pipeline"]


def expand_pipeline(spec: ScheduleSpec) -> ScheduleSpec:
    """Return ``spec`` with its pipeline block expanded into ops."""
    raise SpecError("`pipeline:` blocks are not supported yet", file=spec._file, path="pipeline")
