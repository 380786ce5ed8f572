"""Issue 32 item 5: the Gantt chart's colours and exposed-communication bands come from array passes over the
columns (a 1M-op compare draws two million boxes); what they give is what the per-row loops gave."""

from __future__ import annotations

import numpy as np

from schedsim.report.gantt import _minus
from schedsim.sim.metrics import intersect_length, length, merge
from schedsim.sim.metrics import merge_per_group as _union


def test_union_is_merge_per_group_and_minus_is_the_uncovered_part() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(0, 60))
        g = rng.integers(0, 4, n)
        s = np.round(rng.uniform(0, 50, n), 1)
        e = s + np.round(rng.uniform(-2, 8, n), 1)  # some empty or reversed: dropped, as merge drops them
        ug, us, ue = _union(g, s, e)
        for k in range(4):
            want = merge([(a, b) for a, b, x in zip(s.tolist(), e.tolist(), g.tolist(), strict=True) if x == k])
            assert list(zip(us[ug == k].tolist(), ue[ug == k].tolist(), strict=True)) == want
        a = merge([(a, b) for a, b, x in zip(s.tolist(), e.tolist(), g.tolist(), strict=True) if x == 0])
        b = merge([(a, b) for a, b, x in zip(s.tolist(), e.tolist(), g.tolist(), strict=True) if x == 1])
        xs, xe = _minus(*(np.array(v, float).reshape(-1) for v in ([p[0] for p in a], [p[1] for p in a],
                                                                   [p[0] for p in b], [p[1] for p in b])))
        got = list(zip(xs.tolist(), xe.tolist(), strict=True))
        assert got == merge(got) and all(hi > lo for lo, hi in got)  # sorted, disjoint, not touching, not empty
        assert intersect_length(got, b) == 0.0 and intersect_length(got, a) == length(got)
        assert abs(length(got) - (length(a) - intersect_length(a, b))) < 1e-9
        assert {p for piece in got for p in piece} <= {p for iv in a + b for p in iv}  # ends from the inputs
