"""The schedule language: pydantic models and the YAML loader."""

from schedsim.spec.loader import load_schedule
from schedsim.spec.model import OP_MODELS, ScheduleSpec
from schedsim.spec.overrides import parse_overrides

__all__ = ["ScheduleSpec", "OP_MODELS", "load_schedule", "parse_overrides"]
