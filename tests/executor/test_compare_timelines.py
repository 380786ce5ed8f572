"""schedsim.compare on hand-built timelines whose errors are known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schedsim.compare import compare_timelines, load_timeline_arg
from schedsim.errors import TraceError
from schedsim.report.compare import write_comparison
from schedsim.sim.timeline import Span, Timeline


def span(oid: str, kind: str, res: str, a: float, b: float, stream: str = "s") -> Span:
    name, rank = oid.split("@r")
    return Span(oid, name, int(rank), stream, kind, res, a, b)


def pred_tl() -> Timeline:
    # rank 0: mm 0-10, ar 10-14 (comm); rank 1: mm 0-10, ar 10-14; makespan 14
    return Timeline("x", "predict", 2, profile="toy", spans=[
        span("mm@r0", "matmul", "compute", 0, 10), span("ar@r0", "all_reduce", "comm", 10, 14, "c"),
        span("mm@r1", "matmul", "compute", 0, 10), span("ar@r1", "all_reduce", "comm", 10, 14, "c"),
    ])


def meas_tl() -> Timeline:
    # measured: mm takes 8 (pred +25%), ar takes 8 (pred -50%) and half of it overlaps the next mm... makespan 16
    return Timeline("x", "execute", 2, meta={"makespan_uninstrumented_s": 15.0}, spans=[
        span("mm@r0", "matmul", "compute", 0, 8), span("ar@r0", "all_reduce", "comm", 8, 16, "c"),
        span("mm@r1", "matmul", "compute", 0, 8), span("ar@r1", "all_reduce", "comm", 8, 16, "c"),
        span("mm2@r0", "matmul", "compute", 8, 12),
    ])


class TestCompareById:
    def test_makespan_error(self) -> None:
        r = compare_timelines(pred_tl(), meas_tl())
        assert r.makespan.pred_s == 14 and r.makespan.meas_s == 16
        assert r.makespan.error == pytest.approx(-0.125)
        assert r.makespan.abs_error_pct == pytest.approx(12.5)
        assert r.makespan.uninstrumented.error == pytest.approx(14 / 15 - 1)

    def test_per_op_errors(self) -> None:
        r = compare_timelines(pred_tl(), meas_tl())
        assert r.match.mode == "id"
        assert r.match.matched == 4 and r.match.only_meas == ["mm2@r0"]
        o = r.ops
        assert o.median_abs_error == pytest.approx(0.375)  # |+0.25| x2, |-0.5| x2
        assert o.worst.kind == "all_reduce" and o.worst.error == pytest.approx(-0.5)
        assert o.by_kind["matmul"].total_error == pytest.approx(0.25)
        assert o.by_kind["all_reduce"].pred_total_s == 8 and o.by_kind["all_reduce"].meas_total_s == 16

    def test_overlap_and_exposed(self) -> None:
        r = compare_timelines(pred_tl(), meas_tl())
        ov = r.overlap
        assert ov.overlap_ratio.pred == 0.0
        assert ov.overlap_ratio.meas == pytest.approx(4 / 16)  # rank 0: 4 of 8 hidden; rank 1: none
        assert ov.exposed_comm_s.pred == 8 and ov.exposed_comm_s.meas == 12
        assert r.by_rank[0].compute.meas_s == 12 and r.by_rank[1].idle.meas_s == 0


def test_kind_mode_when_ids_do_not_match() -> None:
    meas = Timeline("x", "import", 1, spans=[span("kernel_a@r0", "matmul", "compute", 0, 5),
                                             span("nccl_b@r0", "all_reduce", "comm", 5, 9, "c")])
    pred = Timeline("x", "predict", 1, spans=[span("mm@r0", "matmul", "compute", 0, 4),
                                              span("ar@r0", "all_reduce", "comm", 4, 8, "c")])
    r = compare_timelines(pred, meas)
    assert r.match.mode == "kind" and r.ops is None and "ops" not in r.to_dict()
    row = r.by_rank[0]
    assert row.compute.error == pytest.approx(-0.2)
    assert row.comm.error == pytest.approx(0.0)
    assert r.makespan.error == pytest.approx(8 / 9 - 1)


def test_write_comparison_files(tmp_path) -> None:
    res, paths = write_comparison(pred_tl(), meas_tl(), tmp_path, gantt=False)
    names = sorted(p.name for p in paths)
    assert names == ["compare.json", "compare_trace.json"]
    d = json.loads((tmp_path / "compare.json").read_text())
    assert d["makespan"]["error"] == pytest.approx(-0.125)
    tr = json.loads((tmp_path / "compare_trace.json").read_text())
    procs = {e["args"]["name"] for e in tr["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {"predicted rank 0", "predicted rank 1", "measured rank 0", "measured rank 1"}


def test_compare_cli(tmp_path) -> None:
    from typer.testing import CliRunner

    from schedsim.cli import app

    pred_tl().write_json(tmp_path / "p.json")
    (tmp_path / "m").mkdir()
    meas_tl().write_json(tmp_path / "m" / "timeline.json")
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "p.json"), str(tmp_path / "m"), "--out",
                                 str(tmp_path / "c"), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["makespan"]["error"] == pytest.approx(-0.125)
    assert (tmp_path / "c" / "compare_gantt.png").exists()
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "p.json"), str(tmp_path / "nope.json")])
    assert r.exit_code == 2 and "no such file" in r.output


def test_load_timeline_arg_folder_without_timeline(tmp_path) -> None:
    with pytest.raises(TraceError, match="no timeline.json"):
        load_timeline_arg(tmp_path)


def test_event_timed_measurement_compares_stream_reached_to_end():
    """CUDA-event spans start when the stream reached the op: the prediction is timed the same way.

    Predicted, rank 0: GEMM a ready at 1 (host issued), first CTA at 3 (waited for SMs), end 5 -> event-timed
    span 5 - 1 = 4. Collective ag: ready 2 on r0, 6 on r1, kernel start 7, end 9 -> span from the last
    arrival 6 to 9 = 3 on both ranks. Measured (events): a 1 -> 5 (4), ag 6 -> 10 (4).
    """
    pred = Timeline("x", "predict", 2, spans=[
        Span("a@r0", "a", 0, "s", "matmul", "compute", 3.0, 5.0, ready_s=1.0),
        Span("ag@r0", "ag", 0, "c", "all_gather", "comm", 7.0, 9.0, ready_s=2.0),
        Span("ag@r1", "ag", 1, "c", "all_gather", "comm", 7.0, 9.0, ready_s=6.0)])
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 1.0, 5.0, ready_s=1.0),
             Span("ag@r0", "ag", 0, "c", "all_gather", "comm", 6.0, 10.0, ready_s=2.0),
             Span("ag@r1", "ag", 1, "c", "all_gather", "comm", 6.0, 10.0, ready_s=6.0)]
    ev = compare_timelines(pred, Timeline("x", "execute", 2, meta={"timing": "cuda_events"}, spans=spans))
    rows = {r.id: r for r in ev.ops.per_op}
    assert rows["a@r0"].pred_dur_s == pytest.approx(4.0) and rows["a@r0"].error == pytest.approx(0.0)
    assert rows["ag@r0"].pred_dur_s == pytest.approx(3.0) and rows["ag@r0"].error == pytest.approx(-0.25)
    assert rows["ag@r0"].pred_start_s == pytest.approx(6.0)
    # a kernel-timed measurement (an imported trace) keeps start -> end: a 3 -> 5 = 2 against 4
    plain = compare_timelines(pred, Timeline("x", "import", 2, spans=spans))
    assert {r.id: r for r in plain.ops.per_op}["a@r0"].error == pytest.approx(-0.5)


def test_event_timed_p2p_pairs_by_message():
    """A send and its recv share ``tags.msg``; their event-timed start is the later of the two arrivals."""
    from schedsim.compare import op_window

    tl = Timeline("x", "predict", 2, spans=[
        Span("s@r0", "s", 0, "p", "send", "comm", 4.0, 6.0, ready_s=1.0, tags={"msg": "F0"}),
        Span("r@r1", "r", 1, "p", "recv", "comm", 4.0, 6.0, ready_s=3.0, tags={"msg": "F0"}),
        Span("s2@r0", "s2", 0, "p", "send", "comm", 7.0, 8.0, ready_s=6.5)])  # no msg: its own ready
    w = op_window(tl, stream_reached=True)
    assert w["s@r0"] == (3.0, 6.0) and w["r@r1"] == (3.0, 6.0) and w["s2@r0"] == (6.5, 8.0)


def test_event_timed_prefers_stream_reached_time():
    """A waves prediction's ``stream_s`` (host at the call's start) is the event-timed start, not ``ready_s``.

    Host-bound GEMM: call starts at 10 us, returns at 22 us (ready), kernel 22-26 us -> event-timed span 16 us
    (12 us call + 4 us kernel), which is what a start event recorded before the call measures.
    """
    from schedsim.compare import op_window

    s = Span("a@r0", "a", 0, "s", "matmul", "compute", 22e-6, 26e-6, ready_s=22e-6, stream_s=10e-6)
    w = op_window(Timeline("x", "predict", 1, spans=[s]), stream_reached=True)["a@r0"]
    assert w[1] - w[0] == pytest.approx(16e-6)
    assert op_window(Timeline("x", "predict", 1, spans=[s]), stream_reached=False)["a@r0"] == (22e-6, 26e-6)


def test_kernel_timed_measurement_compares_spans_from_the_gpu_and_waits_apart():
    """docs/metrics.md, "Per-op spans": against a measurement that knows when each op got the GPU (Kineto kernels with
    ``stream_s``), an op's span is start -> end on both sides and its wait (start - stream_s) is compared apart.

    Predicted: a stream reached at 1, got the SMs at 3, ends 5 (span 2, wait 2); b reached 5, start 5, end 8
    (span 3, wait 0). Measured: a reached 1, start 1.5, end 3.5 (span 2, wait 0.5); b reached 3.5, start 4, end
    6 (span 2, wait 0.5). Span errors 0 and +50 %; waits differ by 1.5 and 0.5: median 1.0."""
    pred = Timeline("x", "predict", 1, spans=[
        Span("a@r0", "a", 0, "s", "matmul", "compute", 3.0, 5.0, ready_s=1.0, stream_s=1.0),
        Span("b@r0", "b", 0, "s", "compute", "compute", 5.0, 8.0, ready_s=5.0, stream_s=5.0)])
    meas = Timeline("x", "execute", 1, meta={"timing": "kineto kernels (first start .. last end per op)"}, spans=[
        Span("a@r0", "a", 0, "s", "matmul", "compute", 1.5, 3.5, stream_s=1.0),
        Span("b@r0", "b", 0, "s", "compute", "compute", 4.0, 6.0, stream_s=3.5)])
    ops = compare_timelines(pred, meas).ops
    rows = {r.id: r for r in ops.per_op}
    assert rows["a@r0"].error == pytest.approx(0.0) and rows["b@r0"].error == pytest.approx(0.5)
    assert (rows["a@r0"].pred_wait_s, rows["a@r0"].meas_wait_s) == pytest.approx((2.0, 0.5))
    assert ops.wait_median_abs_diff_s == pytest.approx(1.0) and ops.span.startswith("got the GPU")
    # against CUDA events (stream reached -> end, no kernel start) the wait and span are compared together
    ev = compare_timelines(pred, Timeline("x", "execute", 1, meta={"timing": "cuda_events"}, spans=[
        Span("a@r0", "a", 0, "s", "matmul", "compute", 1.0, 3.5), Span("b@r0", "b", 0, "s", "compute", "compute",
                                                                         3.5, 6.0)])).ops
    assert ev.wait_median_abs_diff_s is None and ev.span.startswith("stream reached")
    assert {r.id: r.pred_dur_s for r in ev.per_op} == pytest.approx({"a@r0": 4.0, "b@r0": 3.0})


def test_kernel_timeline_stream_reached_is_the_call_or_the_predecessors_end():
    """executor.profiling.kernel_timeline with predecessors: Kineto µs, a's call at 100, kernel 110-150; b (after a
    on its stream) called at 120, kernel 160-170: b's stream reached it at a's end, 150, so its wait is 10 µs;
    a's wait is 10 µs from its call. Shifted so that a starts where the event timeline's first op starts (2.0)."""
    from executor.profiling import kernel_timeline

    base = Timeline("x", "execute", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 2.0, 3.0),
                                              Span("b@r0", "b", 0, "s", "compute", "compute", 3.0, 4.0)])
    maps = {0: {"ops": {"a": {"cpu_start_us": 100.0, "gpu_start_us": 110.0, "gpu_end_us": 150.0, "gpu_busy_us": 40},
                        "b": {"cpu_start_us": 120.0, "gpu_start_us": 160.0, "gpu_end_us": 170.0, "gpu_busy_us": 10}}}}
    k = {s.id: s for s in kernel_timeline(base, maps, {"b@r0": ["a@r0"]}).spans}
    assert (k["a@r0"].start_s, k["a@r0"].end_s) == pytest.approx((2.0, 2.0 + 40e-6))
    assert k["a@r0"].stream_s == pytest.approx(2.0 - 10e-6)
    assert k["b@r0"].stream_s == pytest.approx(2.0 + 40e-6) and k["b@r0"].start_s == pytest.approx(2.0 + 50e-6)
    assert kernel_timeline(base, maps).spans[0].stream_s is None  # without predecessors: unknown


def test_profiled_iteration_is_predicted_with_the_profilers_host_cost():
    """schedsim.compare.profiled_profile: the Kineto iteration's host time per op (a's call at 100 µs for 30, b's
    at 120 for 40: 100 -> 160 µs, 30 µs per op) less the uninstrumented iteration's (20 µs for 2 ops: 10) is
    20 µs per op of profiler host cost; the profiled prediction runs the executor's per-op extra at that."""
    from executor.profiling import kernel_timeline
    from schedsim.compare import profiled_profile
    from schedsim.hardware.profile import HardwareProfile
    from tests.conftest import toy_profile_dict

    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 2.0, 3.0),
             Span("b@r0", "b", 0, "s", "compute", "compute", 3.0, 4.0)]
    base = Timeline("x", "execute", 1, spans=spans, meta={"host_issue_uninstrumented_s": [20e-6]})
    maps = {0: {"ops": {"a": {"cpu_start_us": 100.0, "cpu_dur_us": 30.0, "gpu_start_us": 110.0, "gpu_end_us": 150.0,
                              "gpu_busy_us": 40},
                        "b": {"cpu_start_us": 120.0, "cpu_dur_us": 40.0, "gpu_start_us": 160.0, "gpu_end_us": 170.0,
                              "gpu_busy_us": 10}}}}
    ktl = kernel_timeline(base, maps)
    assert ktl.meta["host_per_op_us"] == {"0": 30.0}
    prof = HardwareProfile.model_validate(toy_profile_dict())
    got = profiled_profile(ktl, base, prof)
    assert got.launch.executor_extra_per_op_us == pytest.approx(20.0) and got.name == prof.name + "+profiled"
    # a profiler no slower than the uninstrumented loop adds nothing; without the uninstrumented issue: no profile
    fast = Timeline("x", "execute", 1, spans=spans, meta={"host_issue_uninstrumented_s": [80e-6]})
    assert profiled_profile(ktl, fast, prof).launch.executor_extra_per_op_us == 0.0
    assert profiled_profile(ktl, Timeline("x", "execute", 1, spans=spans), prof) is None
    graph = Timeline("x", "execute", 1, launch="cuda_graph", spans=spans, meta=base.meta)
    assert profiled_profile(ktl, graph, prof) is None


def test_a_graph_segments_ops_are_compared_on_the_segments_span():
    # predicted: a 0-2 and b 2-5 on one CUDA graph segment, c 5-6 eager. Measured (execute's segment runner):
    # events around the replay time a and b each as the whole segment, 0-4.4; c 4.4-5.4.
    pred = Timeline("x", "predict", 1, spans=[span("a@r0", "matmul", "compute", 0, 2),
                                              span("b@r0", "compute", "compute", 2, 5),
                                              span("c@r0", "compute", "compute", 5, 6)])
    spans = [span("a@r0", "matmul", "compute", 0, 4.4), span("b@r0", "compute", "compute", 0, 4.4),
             span("c@r0", "compute", "compute", 4.4, 5.4)]
    plain = compare_timelines(pred, Timeline("x", "execute", 1, spans=spans))
    assert [round(r.error, 4) for r in plain.ops.per_op] == [round(2 / 4.4 - 1, 4), round(3 / 4.4 - 1, 4), 0.0]
    meas = Timeline("x", "execute", 1, meta={"graph_segments": [["a@r0", "b@r0"]]}, spans=spans)
    r = compare_timelines(pred, meas)
    # a and b: the predicted segment 0-5 against the replay 0-4.4, +13.6 %; c unchanged
    assert [round(x.error, 4) for x in r.ops.per_op] == [round(5 / 4.4 - 1, 4)] * 2 + [0.0]
    assert r.ops.median_abs_error == pytest.approx(5 / 4.4 - 1)
    assert [x.pred_start_s for x in r.ops.per_op] == [0, 0, 5]
    assert "the segment's span on both sides" in r.ops.span
    assert pred.columns.start_s.tolist() == [0, 2, 5]  # the timeline itself untouched


def test_segment_windows_equal_the_loop_over_segments_on_random_segments():
    # segments of 1 to 5 ops, some ids absent from the timeline; against the loop it replaced (tests/oracle)
    from types import SimpleNamespace

    from schedsim.compare import segment_windows
    from tests.oracle.segment_loop import segment_windows_loop

    rng = np.random.default_rng(0)
    ids = [f"o{i}@r{i % 3}" for i in range(400)]
    start = rng.uniform(0, 1, 400)
    window = (start, start + rng.uniform(0, 1, 400))
    order = rng.permutation(420).tolist()  # 20 ids ("o400@r1" ...) that the timeline lacks
    segments, k = [], 0
    while k < len(order):
        n = int(rng.integers(1, 6))
        segments.append([f"o{i}@r{i % 3}" for i in order[k:k + n]])
        k += n
    got = segment_windows(SimpleNamespace(columns=SimpleNamespace(id=ids)), window, segments)
    want = segment_windows_loop(ids, window, segments)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert not np.array_equal(got[0], window[0])  # the segments changed something
    only_absent = [["o401@r2", "o402@r0"]]
    same = segment_windows(SimpleNamespace(columns=SimpleNamespace(id=ids)), window, only_absent)
    assert np.array_equal(same[0], window[0]) and np.array_equal(same[1], window[1])


def test_a_run_that_changed_speed_is_reported():
    """Twenty uninstrumented iterations whose quarters' medians are 3.6, 4.8, 4.8 and 2.5 ms (a process that ran
    1.9x slower for most of its life, one H100): a warning naming the medians and the ratio 4.8/2.5 = 1.92;
    a steady run (quarters within 5 %) and a run of fewer than 8 iterations: none."""
    from schedsim.compare import DRIFT_WARN, iteration_drift

    drift = [3.6e-3] * 5 + [4.8e-3] * 5 + [4.8e-3] * 5 + [2.5e-3] * 5
    ratio, meds = iteration_drift({"makespan_uninstrumented_iters_s": drift})
    assert ratio == pytest.approx(4.8 / 2.5) and meds == pytest.approx([3.6e-3, 4.8e-3, 4.8e-3, 2.5e-3])
    meas = Timeline("x", "execute", 1, meta={"makespan_uninstrumented_iters_s": drift},
                    spans=[span("a@r0", "matmul", "compute", 0, 1)])
    pred = Timeline("x", "predict", 1, spans=[span("a@r0", "matmul", "compute", 0, 1)])
    w = [x for x in compare_timelines(pred, meas).warnings if "changed speed" in x]
    assert len(w) == 1 and "3.6, 4.8, 4.8, 2.5 ms (1.92x" in w[0]
    steady = [1.0e-3, 1.02e-3, 0.99e-3, 1.01e-3] * 5
    assert iteration_drift({"makespan_uninstrumented_iters_s": steady})[0] < DRIFT_WARN
    for meta in ({"makespan_uninstrumented_iters_s": steady}, {"makespan_uninstrumented_iters_s": drift[:7]}, {}):
        meas = Timeline("x", "execute", 1, meta=meta, spans=[span("a@r0", "matmul", "compute", 0, 1)])
        assert not [x for x in compare_timelines(pred, meas).warnings if "changed speed" in x]


def test_a_run_that_changed_speed_says_what_its_host_thread_did():
    """The same drifting run with its issuing thread recorded (meta.host_thread_uninstrumented, as execute writes
    it): in the slow quarters (4.8 ms) the thread ran 4.0 ms, waited 0.7 ms runnable and was preempted twice an
    iteration on CPU 2; in the fast one (2.5 ms) it ran the whole 2.5 ms on CPU 1, never preempted. The warning
    gives 4.0/4.8 = 83 % and 0.7/4.8 = 15 % against 100 % and 0 %."""
    drift = [3.6e-3] * 5 + [4.8e-3] * 5 + [4.8e-3] * 5 + [2.5e-3] * 5
    wall = [3.6e-3] * 5 + [4.8e-3] * 10 + [2.5e-3] * 5
    run = [3.6e-3] * 5 + [4.0e-3] * 10 + [2.5e-3] * 5
    runq = [0.0] * 5 + [0.7e-3] * 10 + [0.0] * 5
    host = {"wall_s": wall, "run_s": run, "runq_s": runq, "vcsw": [0] * 20, "ivcsw": [0] * 5 + [2] * 10 + [0] * 5,
            "cpu_start": [1] * 5 + [2] * 10 + [1] * 5, "cpu_end": [1] * 5 + [2] * 10 + [1] * 5}
    meas = Timeline("x", "execute", 1, meta={"makespan_uninstrumented_iters_s": drift,
                                             "host_thread_uninstrumented": [host]},
                    spans=[span("a@r0", "matmul", "compute", 0, 1)])
    pred = Timeline("x", "predict", 1, spans=[span("a@r0", "matmul", "compute", 0, 1)])
    (w,) = [x for x in compare_timelines(pred, meas).warnings if "changed speed" in x]
    assert ("(rank 0 host thread, slowest quarter: ran 83 % of the wall, runnable 15 %, 2 preemptions and 0 "
            "blocks per iteration, CPUs [2]; fastest: ran 100 %, runnable 0 %, 0 preemptions and 0 blocks, "
            "CPUs [1])") in w
    # the run-queue and switch columns cut to one value (an edited or partial file): those figures read n/a
    meas.meta["host_thread_uninstrumented"] = [{**host, "runq_s": [0.0], "vcsw": [0], "ivcsw": [2]}]
    (w,) = [x for x in compare_timelines(pred, meas).warnings if "changed speed" in x]
    assert ("(rank 0 host thread, slowest quarter: ran 83 % of the wall, runnable n/a, n/a preemptions and n/a "
            "blocks per iteration, CPUs [2]; fastest: ran 100 %, runnable n/a, n/a preemptions and n/a blocks, "
            "CPUs [1])") in w
    host["cpu_end"] = [1] * 7  # fewer values than iterations: no host part
    meas.meta["host_thread_uninstrumented"] = [host]
    (w,) = [x for x in compare_timelines(pred, meas).warnings if "changed speed" in x]
    assert "host thread" not in w

