"""The simulator, its Timeline and the metrics computed from a timeline."""

from schedsim.sim.engine import simulate
from schedsim.sim.timeline import Span, Timeline

__all__ = ["simulate", "Timeline", "Span"]
