"""Oracle: ``schedsim.report.pipeline_chart._steps_by_arrays`` as it ran before its Gauss–Seidel sweeps: Jacobi rounds,
every rank's steps from the last round's ends, as many rounds as the longest path crosses ranks (~2p, each a pass over
all actions; pp=32 m=512 v=4: ~64 rounds, 0.13 CPU s), a cycle found by the rounds not settling.
``tests/report/test_chart_raster.py`` holds the two equal."""

from __future__ import annotations

from typing import Any

from schedsim.report.chart_base import _PHASES

__all__ = ["steps_by_rounds"]


def steps_by_rounds(rank: Any, ops: list[str], op: Any, stage: Any, mb: Any, start_s: Any) -> tuple[Any, Any] | None:
    """:func:`unit_steps` of actions given as columns (numpy, one entry per action; ``op`` codes into ``ops``):
    (start step, end step) int64 arrays, or None where the rules do not explain the order (an action whose
    dependency is not among the actions, two actions of one key, or a cycle), which the loop
    (:func:`_steps_by_loop`) places instead.

    With each rank's actions in timeline order, the start step of a rank's i-th action is
    t_i = max(t_{i−1} + u_{i−1}, D_i) (u its unit, D_i the latest end of its dependencies, 0 for none), so
    t_i = S_i + max(0, max_{j ≤ i} (D_j − S_j)) with S_i the units of the rank's actions before it: a running
    maximum per rank, given D. Starting from D = 0, that step is repeated with D from the last starts until
    nothing moves (Jacobi iteration of the longest path through the ranks' orders and the dependencies: as many
    rounds as the longest path crosses ranks, ~2p for a pipeline of p ranks, each a few array passes over the
    actions). Every end is positive, so a cycle never settles: past 8 rounds per rank (+ 16), None (the loop then
    places them, as it does any order these rounds do not settle)."""
    import numpy as np

    n = len(rank)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = np.lexsort((start_s, rank))  # each rank's actions in timeline order (stable: ties keep the view's order)
    rank, op, stage, mb = rank[o], op[o], stage[o], mb[o]
    code = {v: ops.index(v) if v in ops else -1 for v in _PHASES}
    is_f = op == code["F"]
    is_ib = (op == code["I"]) | (op == code["B"])
    is_w = op == code["W"]
    if not bool((is_f | is_ib | is_w).all()):
        return None
    unit = np.where(op == code["B"], 2, 1)
    last = int(stage.max())
    smin, mmin = int(stage.min()), int(mb.min())
    width = int(mb.max()) - mmin + 1
    key = (stage - smin) * width + (mb - mmin)

    def table(mask: Any) -> tuple[Any, Any] | None:
        """The sorted keys of the actions of ``mask`` and their positions; None when a key repeats."""
        idx = np.flatnonzero(mask)
        k = key[idx]
        srt = np.argsort(k, kind="stable")
        k = k[srt]
        return None if len(k) > 1 and bool((k[1:] == k[:-1]).any()) else (k, idx[srt])

    fk, ibk = table(is_f), table(is_ib)
    if fk is None or ibk is None:
        return None
    missing = False

    def look(tab: tuple[Any, Any], want: Any, q: Any) -> Any:
        """Position of the action of key ``q`` in ``tab`` where ``want``, else n (no dependency)."""
        nonlocal missing
        tk, ti = tab
        out = np.full(n, n, np.int64)
        (w,) = np.nonzero(want)
        if len(w):
            if not len(tk):
                missing = True
                return out
            pos = np.minimum(np.searchsorted(tk, q[w]), len(tk) - 1)
            hit = tk[pos] == q[w]
            missing = missing or not bool(hit.all())
            out[w] = ti[pos]
        return out

    # F(s − 1) of an F past stage 0 (a key below the first stage's matches nothing), F(s) and I/B(s + 1) of an I or
    # B, I/B(s) of a W
    d1 = np.minimum(np.minimum(look(fk, is_f & (stage > 0), key - width), look(fk, is_ib, key)), look(ibk, is_w, key))
    d2 = look(ibk, is_ib & (stage < last), key + width)
    if missing:
        return None
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
