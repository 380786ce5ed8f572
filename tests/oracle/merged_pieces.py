"""Oracle: :func:`schedsim.sim.metrics._merged_by` as it ran before it took the running maximum of every group at
once (one ``np.maximum.accumulate`` over the (group, end) pairs as complex numbers): the same pieces, found by a
Python loop over the groups whose ends go down, each group's running maximum accumulated on its own slice (100,000
calls on a 100,000-rank run). ``tests/sim/test_metrics_agree.py`` holds the two equal, bit for bit."""

from __future__ import annotations

import numpy as np

from schedsim.arrays import unique

__all__ = ["merged_by_groupwise"]


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
