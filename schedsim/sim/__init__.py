"""The simulator, its Timeline and the metrics computed from a timeline."""

from __future__ import annotations

from typing import Any

__all__ = ["simulate", "Timeline", "Span"]


def __getattr__(name: str) -> Any:  # lazy: importing the Timeline must not import the engine (networkx, pydantic)
    if name == "simulate":
        from schedsim.sim.engine import simulate

        return simulate
    if name in ("Timeline", "Span"):
        from schedsim.sim import timeline

        return getattr(timeline, name)
    raise AttributeError(name)
