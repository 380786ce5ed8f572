"""Oracle: :func:`schedsim.sim.metrics._merged_by` as it ran before it took the running maximum of every group at
once (one ``np.maximum.accumulate`` over the (group, end) pairs as complex numbers): the same pieces, found by a
Python loop over the groups whose ends go down, each group's running maximum accumulated on its own slice (100,000
calls on a 100,000-rank run), and that running maximum itself (:func:`merged_by_pairs`), as it ran before the
compiled pass ``_cwaves.merge_pieces`` (whose runs replace the union's stable sort of (group, start) pairs); and
:func:`schedsim.sim.metrics._overlap_by` as it ran before the compiled sweep
``_cwaves.overlaps``: each x piece's overlapping y pieces found by two searches of every group's (group, end) and
(group, start) pairs as complex numbers, then gathered (~0.07 CPU s of a 1M-op run's metrics).
``tests/sim/test_metrics_agree.py`` holds each pair equal, bit for bit."""

from __future__ import annotations

from typing import Literal

import numpy as np

from schedsim.arrays import unique
from schedsim.sim.metrics import _pairs, _sums_by

__all__ = ["local_search", "merged_by_groupwise", "merged_by_pairs", "overlap_by"]


def merged_by_groupwise(group: np.ndarray, start: np.ndarray, end: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(group, start, end)`` of the merged pieces of each group (intervals sorted by group, ascending and
    contiguous, then by start; empty ones dropped), the groups whose ends go down accumulated one by one."""
    ok = np.flatnonzero(end > start)
    g, s0, e0 = group[ok], start[ok], end[ok]
    if not len(s0):
        return g, s0, e0
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    bounds = np.append(heads, len(s0))
    reach = e0.copy()
    falls = np.flatnonzero((e0[1:] < e0[:-1]) & (g[1:] == g[:-1]))  # an end below its predecessor's, in a group
    for k in unique(np.searchsorted(heads, falls + 1, side="right") - 1)[0].tolist():
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        np.maximum.accumulate(e0[lo:hi], out=reach[lo:hi])
    first = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (s0[1:] > reach[:-1])])  # a piece opens here
    last = np.append(first[1:] - 1, len(s0) - 1)
    return g[first], s0[first], reach[last]


def local_search(yg: np.ndarray, yv: np.ndarray, xg: np.ndarray, xv: np.ndarray,
                 side: Literal["left", "right"]) -> np.ndarray:
    """Per query ``(xg, xv)``, ``np.searchsorted(yv[group xg's slice], xv, side)``, for ``yv`` sorted within
    each group and ``yg`` ascending: one search of the (group, value) pairs
    (:func:`schedsim.sim.metrics._pairs`)."""
    if not len(xv):
        return np.zeros(0, np.int64)
    found: np.ndarray = np.searchsorted(_pairs(yg, yv), _pairs(xg, xv), side)
    return found - np.searchsorted(yg, xg, side="left")


def overlap_by(x: tuple[np.ndarray, np.ndarray, np.ndarray], y: tuple[np.ndarray, np.ndarray, np.ndarray],
               n: int) -> np.ndarray:
    """Per group 0 .. n-1, ``pieces_intersection`` of its pieces of ``x`` and of ``y`` (each ``(group, start,
    end)`` from ``_merged_by``), every group at once: the same overlapping pairs in the same order,
    summed as it sums them (:func:`schedsim.sim.metrics._sums_by`)."""
    (xg, x0, x1), (yg, y0, y1) = x, y
    if not len(x0) or not len(y0):
        return np.zeros(n, np.float64)
    ybase = np.searchsorted(yg, xg, side="left")
    lo = local_search(yg, y1, xg, x0, "right")
    hi = local_search(yg, y0, xg, x1, "left")
    counts = np.maximum(hi - lo, 0)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(n, np.float64)
    xi = np.repeat(np.arange(len(x0)), counts)
    yi = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo + ybase, counts)
    over = np.minimum(x1[xi], y1[yi]) - np.maximum(x0[xi], y0[yi])
    pos = over > 0
    return _sums_by(xg[xi][pos], over[pos], n)


def merged_by_pairs(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``merged`` of every group at once: ``(group, start, end)`` of the pieces, for intervals already sorted by
    group (ascending, contiguous) and, within one, by start (``_merged_by`` before ``_cwaves.merge_pieces``): the
    running maximum of the ends of every group at once, over the (group, end) pairs as complex numbers."""
    keep = end > start
    if not keep.all():
        group, start, end = group[keep], start[keep], end[keep]
    n = len(start)
    if n == 0:
        return group, start, end
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(group[1:], group[:-1], out=new[1:])
    # the running maximum of the ends within each group: the ends themselves where they ascend (one stream's
    # ops), else that of the (group, end) pairs, which numpy orders lexicographically as complex numbers: with
    # the groups ascending, a group's own ends (every group at once, no loop over them)
    reach = end
    if bool(((end[1:] < end[:-1]) & ~new[1:]).any()):
        reach = np.maximum.accumulate(_pairs(group, end)).imag.copy()
    opens = new.copy()
    opens[1:] |= start[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    return group[first], start[first], reach[np.append(first[1:] - 1, n - 1)]
