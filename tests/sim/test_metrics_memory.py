"""Metrics.of holds few per-row temporaries at once (issue 38: it was the peak of a 10M-op predict)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from schedsim.api import predict
from schedsim.sim.metrics import Metrics
from schedsim.spec.loader import load_schedule
from schedsim.spec.overrides import parse_overrides

GEN = Path(__file__).resolve().parents[2] / "benchmarks/data/overlap_gen.yaml"


def test_metrics_of_peak_bytes_per_row() -> None:
    # 20,000 rows of GEMMs and all_reduces on 8 ranks. Sort keys, orders and pieces are freed as soon as they are
    # used: the peak was 69 B per row at 100,000 rows (numpy reports its allocations to tracemalloc); holding them
    # all at once, as before, 168 B per row.
    tl = predict(load_schedule(GEN, parse_overrides(["chunks=1250"])), "h200").timeline
    assert len(tl) == 20_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        m = Metrics.of(tl)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert m.ops == 20_000
    assert peak / len(tl) < 110
