"""The simulator's ``bytes`` and ``flops`` columns made on first read (``SpanColumns`` given functions): each
op's template's values, ``bytes`` not made by the simulation nor the metrics, the same after a pickle round trip;
a column set replaces its function."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.sim.metrics import Metrics
from schedsim.spec.loader import load_schedule

ROOT = Path(__file__).resolve().parents[2]


def test_bytes_and_flops_are_made_on_first_read_after_the_metrics():
    prog = lower(load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml"))  # 8 ranks x 64 chunks, GEMM + all_reduce
    tl = simulate(prog, load_profile("h200"))
    c = tl.columns
    assert callable(c._bytes)  # (flops are read by the simulation itself where the profile has a power curve)
    Metrics.of(tl)
    assert callable(c._bytes)  # the metrics do not read them
    kinds = np.array(c.kind[0], object)[c.kind[1]]
    # a 4096^3 bf16 GEMM: 2*m*n*k FLOP and its three matrices read or written (m*k + k*n + m*n) x 2 bytes; an
    # all_reduce of 64 MiB: its bytes, no FLOP
    want_b = np.where(kinds == "all_reduce", 64.0 * 2**20, 3 * 4096**2 * 2.0)
    want_f = np.where(kinds == "matmul", 2.0 * 4096**3, 0.0)
    assert np.array_equal(c.bytes, want_b) and np.array_equal(c.flops, want_f)
    assert c.bytes is c.bytes and not callable(c._bytes)  # made once, then kept
    back = pickle.loads(pickle.dumps(c))
    assert np.array_equal(back.bytes, want_b) and np.array_equal(back.flops, want_f)


def test_a_column_set_replaces_the_function():
    tl = simulate(lower(load_schedule(ROOT / "schedules/allgather_mm8.yaml")), load_profile("h200"))
    c = tl.columns
    c.flops = np.zeros(len(c))
    assert not callable(c._flops) and not c.flops.any()
