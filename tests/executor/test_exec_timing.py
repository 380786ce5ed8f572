"""executor.timing: per-rank event times -> one timeline (no processes, no torch)."""

from __future__ import annotations

import pytest

from executor.timing import assemble_timeline, rank_local_timeline
from schedsim.graph.build import build_graph
from schedsim.lower import lower
from schedsim.spec.loader import load_text

TEXT = """
schema_version: 1
name: t
world_size: 2
ops:
  - {name: mm, kind: matmul, m: 64, n: 64, k: 64}
  - {name: ar, kind: all_reduce, bytes: 1024, deps: [mm]}
"""


def test_anchor_shift_rendezvous_and_medians() -> None:
    G = build_graph(load_text(TEXT, "t.yaml"))
    # rank 1's anchor is 1 ms later than rank 0's in every iteration
    r0 = {"rank": 0, "ids": ["mm@r0", "ar@r0"], "anchors_ns": [0, 10_000_000, 20_000_000],
          "start_s": [[0.0, 0.001], [0.0, 0.001], [0.0, 0.002]],
          "end_s": [[0.001, 0.005], [0.001, 0.005], [0.002, 0.006]], "lean": [[0, 0.004], [10_000_000, 0.006]]}
    r1 = {"rank": 1, "ids": ["mm@r1", "ar@r1"], "anchors_ns": [1_000_000, 11_000_000, 21_000_000],
          "start_s": [[0.0, 0.002], [0.0, 0.002], [0.0, 0.002]],
          "end_s": [[0.002, 0.004], [0.002, 0.004], [0.002, 0.004]], "lean": [[1_000_000, 0.004], [10_000_000, 0.005]]}
    tl = assemble_timeline(G, [r0, r1], schedule="t", launch="eager")
    s = tl.by_id()
    assert tl.source == "execute" and tl.world_size == 2
    assert s["mm@r1"].start_s == pytest.approx(0.001)  # shifted by the anchor difference
    # all_reduce: rank 0 arrives at 1 ms (median), rank 1 at 3 ms -> both start at 3 ms
    assert s["ar@r0"].ready_s == pytest.approx(0.001)
    assert s["ar@r0"].start_s == pytest.approx(0.003) and s["ar@r1"].start_s == pytest.approx(0.003)
    assert s["ar@r0"].end_s == pytest.approx(0.005)
    assert tl.meta["makespan_iters_s"] == pytest.approx([0.005, 0.005, 0.006])
    assert tl.meta["makespan_median_s"] == pytest.approx(0.005)
    assert tl.meta["makespan_uninstrumented_iters_s"] == pytest.approx([0.005, 0.006])
    assert tl.critical_path[-1] in ("ar@r0", "ar@r1")


def test_rank_local_timeline_is_partial() -> None:
    G = build_graph(load_text(TEXT, "t.yaml"))
    r0 = {"rank": 0, "ids": ["mm@r0", "ar@r0"], "anchors_ns": [0], "start_s": [[0.0, 0.001]],
          "end_s": [[0.001, 0.002]], "lean": []}
    tl = rank_local_timeline(G, r0, schedule="t", launch="eager", meta={"error": "x"})
    assert tl.meta["partial"] is True and len(tl.spans) == 2 and tl.makespan_s == pytest.approx(0.002)


def test_timing_cost_per_op_is_measured_only_where_the_host_bounds_the_run():
    """meta.timing_host_per_op_us: (timed issue − uninstrumented issue) / ops, per rank, median over ranks, from
    ranks whose uninstrumented issue took at least half their uninstrumented iteration (host-bound: no call
    waited for room in CUDA's launch queue). Rank 0: 4 ops, issue 100 → 60 µs of an 80 µs iteration: 10 µs/op.
    Rank 1: 4 ops, 160 → 40 µs of a 50 µs iteration: 30 µs/op. Median 20. A GPU-bound rank (issue 10 µs of a
    1 ms iteration, its timed loop stalled in a full queue) is left out; with no rank left, None."""
    from executor.timing import timing_host_per_op_us

    ids = ["a", "b", "c", "d"]
    r0 = {"ids": ids, "issue_s": [100e-6, 99e-6, 101e-6], "lean_issue_s": [60e-6, 60e-6], "lean": [[0, 80e-6]] * 2}
    r1 = {"ids": ids, "issue_s": [160e-6], "lean_issue_s": [40e-6], "lean": [[5, 50e-6]]}
    gpu_bound = {"ids": ids, "issue_s": [900e-6], "lean_issue_s": [10e-6], "lean": [[0, 1e-3]]}
    assert timing_host_per_op_us([r0, r1]) == pytest.approx(20.0)
    assert timing_host_per_op_us([r0, r1, gpu_bound]) == pytest.approx(20.0)
    assert timing_host_per_op_us([gpu_bound]) is None
    cpu = {"ids": ids, "issue_s": [], "lean_issue_s": [], "lean": [[0, 1e-3]]}  # CPU ranks record no issue loop
    assert timing_host_per_op_us([cpu]) is None
    # the timed loop faster than the lean one (noise): no negative cost
    assert timing_host_per_op_us([dict(r0, issue_s=[50e-6])]) == 0.0


def test_the_hosts_uninstrumented_issue_is_kept_per_rank_and_compared_with_the_prediction():
    """meta.host_issue_uninstrumented_s: each rank's median lean issue time (None for a rank that recorded none);
    compare holds it against the prediction's meta.host_issue_s, rank by rank, and round-trips it."""
    from schedsim.compare import Comparison, compare_timelines

    G = build_graph(load_text(TEXT, "t.yaml"))
    base = {"anchors_ns": [0], "start_s": [[0.0, 0.001]], "end_s": [[0.001, 0.002]], "lean": [[0, 0.002]]}
    r0 = {"rank": 0, "ids": ["mm@r0", "ar@r0"], **base, "lean_issue_s": [40e-6, 30e-6, 50e-6]}
    r1 = {"rank": 1, "ids": ["mm@r1", "ar@r1"], **base}
    meas = assemble_timeline(G, [r0, r1], schedule="t", launch="eager")
    assert meas.meta["host_issue_uninstrumented_s"] == [pytest.approx(40e-6), None]
    pred = assemble_timeline(G, [dict(r0, lean_issue_s=[]), r1], schedule="t", launch="eager")
    assert "host_issue_uninstrumented_s" not in pred.meta  # no rank recorded an issue loop (CPU ranks)
    pred = pred.__class__(schedule="t", source="predict", world_size=2, launch="eager", spans=list(pred.spans),
                          meta={"host_issue_s": [30e-6, 20e-6]})
    res = compare_timelines(pred, meas)
    assert list(res.host_issue) == [0]  # rank 1 measured nothing
    d = res.host_issue[0]
    assert (d.pred, d.meas, d.error) == (pytest.approx(30e-6), pytest.approx(40e-6), pytest.approx(-0.25))
    assert Comparison.from_dict(res.to_dict()).host_issue == res.host_issue
    assert compare_timelines(pred, pred).host_issue is None  # a prediction measures no issue loop


def test_each_ops_host_call_is_stamped_predicted_and_compared():
    """meta.host_call_end_s: execute's stamped iterations give each op's call end (median per op); the waves
    prediction of an eager run gives its own; compare holds the call times (end less the rank's previous end)
    against each other, names the ops whose measured call most exceeds the prediction, and round-trips."""
    from schedsim.compare import Comparison, compare_timelines
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    G = build_graph(load_text(TEXT, "t.yaml"))
    base = {"anchors_ns": [0], "start_s": [[0.0, 0.001]], "end_s": [[0.001, 0.002]], "lean": [[0, 0.002]]}
    r0 = {"rank": 0, "ids": ["mm@r0", "ar@r0"], **base, "host_call_end_s": [[20e-6, 90e-6], [22e-6, 95e-6],
                                                                            [21e-6, 91e-6]]}
    r1 = {"rank": 1, "ids": ["mm@r1", "ar@r1"], **base}
    meas = assemble_timeline(G, [r0, r1], schedule="t", launch="eager")
    assert meas.meta["host_call_end_s"] == {"mm@r0": pytest.approx(21e-6), "ar@r0": pytest.approx(91e-6)}
    prof = load_profile("h200")
    pred = simulate(lower(load_text(TEXT, "t.yaml")), prof, launch="eager", gpu_model="waves")
    calls = pred.meta["host_call_end_s"]  # rule host-issue by hand: a kernel launch, then a collective call on the
    L = prof.launch  # communication stream (a stream switch and an event wait for mm on the compute stream)
    mm = (L.eager_per_op_us + L.first_op_extra_us) * 1e-6
    assert calls["mm@r0"] == pytest.approx(mm)
    ar = L.eager_per_collective_us + L.first_collective_extra_us + L.stream_switch_us + L.event_wait_us
    assert calls["ar@r0"] == pytest.approx(mm + ar * 1e-6)
    res = compare_timelines(pred, meas)
    hc = res.host_calls
    assert hc is not None and hc.n == 2  # rank 1 stamped nothing
    want = sorted([("mm@r0", calls["mm@r0"], 21e-6), ("ar@r0", calls["ar@r0"] - calls["mm@r0"], 70e-6)],
                  key=lambda t: t[1] - t[2])
    assert [(c.id, c.pred_s, c.meas_s) for c in hc.largest] == [
        (i, pytest.approx(p), pytest.approx(m)) for i, p, m in want if m > p]
    assert Comparison.from_dict(res.to_dict()).host_calls == hc
    assert compare_timelines(pred, pred).host_calls.median_abs_error == 0.0
