"""Oracle: how ``schedsim.report.chart_base._lane_ticks`` labelled a chart's lanes before its lane-labels artist: the y
axis' own ticks (``set_yticks``, ``set_yticklabels``, a ``Tick`` per lane made and drawn by matplotlib), the empty
y-axis label at fixed coordinates. ``tests/report/test_lane_ticks.py`` holds the artist's pixels, tick labels and
tight bounding box equal to these."""

from __future__ import annotations

from typing import Any

__all__ = ["lane_ticks"]


def lane_ticks(ax: Any, labels: list[str], fontsize: float) -> None:
    """One y tick per lane ``0 .. len(labels) - 1``, labelled ``labels`` at ``fontsize`` points, drawn by the axis."""
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=fontsize)
    ax.yaxis.set_label_coords(0.0, 0.5)
