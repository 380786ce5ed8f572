"""Oracle: how ``schedsim.report.chart_base._paint`` found the pixel columns a strip's boxes overlap before
``_columns_hit`` (all strips in two searches): per strip and colour, the boxes overlapping each column counted by two
searches (``chart_base._counts``). ``tests/report/test_chart_raster.py`` holds ``_columns_hit`` equal to
``boxes_in(...) > 0`` of any colour."""

from __future__ import annotations

from typing import Any

from schedsim.report.chart_base import _counts

__all__ = ["boxes_in"]


def boxes_in(x0: Any, x1: Any, edges: Any) -> Any:
    """How many of the boxes [x0, x1] (of positive width) overlap each column [edges[j], edges[j + 1]] (``edges``
    ascending; len(edges) - 1 counts, int): those starting before its end less those ending at or before its
    start, by counts of the starts and ends (``_counts``; exact: no sums of floats)."""

    keep = x1 > x0
    return _counts(x0[keep], edges[1:], "left") - _counts(x1[keep], edges[:-1], "right")
