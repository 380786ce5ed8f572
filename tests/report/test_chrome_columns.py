"""trace.json's counters, nesting rows and slices computed over the timeline's columns: hand-computed counter
samples, the one-pass nesting check against the walk over the spans, and µs rounding as ``_us`` does it."""

from __future__ import annotations

import random

import numpy as np
import pytest

from schedsim.report.chrome import _nesting_rows, _rate_counter, _rounded, _us, _us_list, chrome_trace
from schedsim.sim.timeline import Span, SpanColumns, Timeline


def counter(intervals: list[tuple[float, float, float]]) -> list[tuple[float, float]]:
    a = np.array(intervals, float).reshape(-1, 3)
    return _rate_counter(a[:, 0], a[:, 1], a[:, 2])


def test_rate_counter_samples_by_hand():
    # 1 on [0, 2), 2 on [1, 3): 1 from 0, 3 from 1, 2 from 2, 0 from 3
    assert counter([(0, 2, 1), (1, 3, 2)]) == [(0.0, 1.0), (1.0, 3.0), (2.0, 2.0), (3.0, 0.0)]
    # back to back at t=2: one sample there (the sum after both events), unchanged values dropped
    assert counter([(0, 2, 1), (2, 4, 1)]) == [(0.0, 1.0), (4.0, 0.0)]
    # zero values and zero-length intervals make no events
    assert counter([(0, 1, 0), (2, 2, 5)]) == []
    # a sum that cancels to within 1e-9 of 0 reads 0, not a rounding residue
    assert counter([(0, 1, 0.1), (0, 2, 0.2), (1, 3, 0.3)]) == [(0.0, 0.1 + 0.2), (1.0, 0.2 + 0.3),
                                                                 (2.0, 0.2 + 0.3 - 0.2), (3.0, 0.0)]


@pytest.mark.parametrize("seed", range(30))
def test_one_pass_nesting_check_matches_the_walk(seed):
    rng = random.Random(seed)
    spans, t = [], {}
    for k in range(rng.randint(2, 40)):
        r, st = rng.randint(0, 2), rng.choice(["a", "b"])
        if seed % 3:  # back-to-back ops, as a simulated stream runs them (sometimes touching within 0.5 ns)
            a = t.get((r, st), 0.0) + rng.choice([0.0, 1e-6, -3e-10, 2e-6])
            b = a + rng.choice([1e-6, 5e-6])
            t[(r, st)] = b
        else:  # measured: overlaps, partial or nested
            a = rng.uniform(0, 1e-4)
            b = a + rng.uniform(0, 3e-5)
        spans.append(Span(f"o{k}@r{r}", f"o{k}", r, st, "matmul", "compute", a, b))
    walk = _nesting_rows(spans)
    assert _nesting_rows(spans, cols=SpanColumns.from_spans(spans)) == walk
    if seed % 3 == 0:
        assert max(walk) > 0 or len(spans) < 5  # the measured cases reach the walk


def test_us_list_rounds_as_us_does():
    rng = random.Random(1)
    xs = [rng.uniform(0, 10) * 10 ** -rng.randint(0, 9) for _ in range(2000)] + [1.23456785e-6, 2.5e-11, 0.0]
    assert _us_list(np.array(xs)) == [_us(x) for x in xs]


def test_trace_of_overlapping_measured_spans_uses_extra_threads():
    # two ops overlapping partially on one stream: the second goes to thread "#2", and a flow-free trace still
    # gets its counters from the columns
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 2e-6),
             Span("b@r0", "b", 0, "s", "matmul", "compute", 1e-6, 3e-6)]
    tl = Timeline("t", "measured", 1, spans=spans)
    ev = chrome_trace([("measured", tl)])["traceEvents"]
    threads = [e["args"]["name"] for e in ev if e.get("name") == "thread_name"]
    assert threads == ["s (compute)", "s (compute) #2"]
    x = [(e["name"], e["tid"]) for e in ev if e["ph"] == "X"]
    assert x == [("a", 1), ("b", 2)]
    ops = [(e["ts"], e["args"]["ops"]) for e in ev if e.get("name") == "compute ops running"]
    assert ops == [(0.0, 1), (1.0, 2), (2.0, 1), (3.0, 0)]


@pytest.mark.parametrize("nd", [3, 4, 6])
def test_rounded_is_pythons_round_at_halves_and_beside_them(nd):
    # _rounded skips Python's round where numpy's rint(x·10^nd)/10^nd is the same float: values on a decimal
    # half (1.00005 at 4 decimals), a few ulps beside one, ties of the product, past 2**52, -0.0, NaN and inf
    # must still come out as round gives them (repr: -0.0 and NaN told apart).
    rng = np.random.default_rng(nd)
    halves = (np.arange(-2000, 2000) + 0.5) / 10.0 ** nd  # the floats nearest to decimal halves
    near = np.concatenate([np.nextafter(np.nextafter(halves, np.inf), np.inf), np.nextafter(halves, np.inf),
                           np.nextafter(halves, -np.inf), halves])
    xs = np.concatenate([near, halves * 1e5, rng.uniform(-1e3, 1e3, 5000), rng.uniform(0, 2e-3, 5000),
                         [0.0, -0.0, -1e-9, 2.0 ** 52, 2.0 ** 53 / 10 ** nd + 0.5, 1e300, np.nan, np.inf, -np.inf]])
    assert list(map(repr, _rounded(xs, nd))) == [repr(round(x, nd)) for x in xs.tolist()]
