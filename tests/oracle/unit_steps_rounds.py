"""Oracle: ``schedsim.report.pipeline_chart._steps_by_arrays`` as it ran before its Gauss–Seidel sweeps: Jacobi rounds,
every rank's steps from the last round's ends, as many rounds as the longest path crosses ranks (~2p, each a pass over
all actions; pp=32 m=512 v=4: ~64 rounds, 0.13 CPU s), a cycle found by the rounds not settling (past 8 rounds per
rank, + 16). It reads the same dependency graph (``pipeline_chart._step_graph``). ``tests/report/test_chart_raster.py``
holds the two equal."""

from __future__ import annotations

from typing import Any

import numpy as np

from schedsim.report.pipeline_chart import _step_graph

__all__ = ["steps_by_rounds"]


def steps_by_rounds(rank: Any, ops: list[str], op: Any, stage: Any, mb: Any, start_s: Any) -> tuple[Any, Any] | None:
    """(start step, end step) per action, or None (see ``_steps_by_arrays``), by Jacobi rounds: t = S_i + max(0,
    running max per rank of (D_j − S_j)), D from the last round's ends, until a round moves nothing."""
    if not len(rank):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    graph = _step_graph(rank, ops, op, stage, mb, start_s)
    if graph is None:
        return None
    o, rank, unit, d1, d2 = graph
    n = len(rank)
    head = np.r_[True, rank[1:] != rank[:-1]]
    before = np.cumsum(unit) - unit
    seg = np.cumsum(head) - 1
    s = before - before[np.flatnonzero(head)][seg]  # units of the rank's actions before each
    lift = seg * (4 * int(unit.sum()) + 4)  # keeps the running maximum inside each rank
    t = s.copy()
    end = np.zeros(n + 1, np.int64)  # end[n] = 0: "no dependency"
    up, down = lift - s, s - lift  # t = s + max(0, running max of (ready − s + lift) − lift)
    for _ in range(8 * (int(seg[-1]) + 1) + 16):
        np.add(t, unit, out=end[:n])
        ready = np.maximum(end[d1], end[d2])
        ready += up
        nt = np.maximum(np.maximum.accumulate(ready, out=ready), lift, out=ready)
        nt += down
        if np.array_equal(nt, t):
            a, b = np.empty(n, np.int64), np.empty(n, np.int64)
            a[o], b[o] = t, end[:n]
            return a, b
        t = nt
    return None
