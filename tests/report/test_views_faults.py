"""Faults found by reviewing the charts, traces and summaries (each test failed before its fix)."""

from __future__ import annotations

import pytest

from schedsim.errors import SchedsimError
from schedsim.report.chrome import chrome_trace
from schedsim.report.trace_check import TraceFormatError, check_trace
from schedsim.sim.timeline import Span, Timeline


def _tl(ranks, source="predict"):
    spans = [Span(f"mm@r{r}", "mm", r, "compute", "matmul", "compute", 0.001 * r, 0.001 * r + 0.002)
             for r in ranks]
    return Timeline("t", source, max(ranks) + 1, spans=spans)


def test_compare_trace_of_different_rank_sets_keeps_one_process_per_timeline_and_rank():
    """Predicted 4 ranks against a measured rank 0 only: the measured rank used to get pid 1, predicted rank 1's."""
    tr = chrome_trace([("predicted", _tl([0, 1, 2, 3])), ("measured", _tl([0], "import"))])
    check_trace(tr)
    names = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names.values()) == ["measured rank 0"] + [f"predicted rank {r}" for r in range(4)]
    x = {(e["pid"], e["args"]["op"]) for e in tr["traceEvents"] if e["ph"] == "X"}
    assert len(x) == 5 and len({p for p, _ in x}) == 5


_PN = {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}}
_TN = {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "s"}}


def _x(ts, dur, pid=0, tid=1):
    return {"ph": "X", "name": "a", "pid": pid, "tid": tid, "ts": ts, "dur": dur}


@pytest.mark.parametrize("events, rule", [
    ([{**_PN, "args": {"name": "rank 1"}}, _x(0, 1)], "two processes share a pid"),
    ([{**_TN, "args": {"name": "other"}}, _x(0, 1)], "two threads share a tid"),
    ([{**_x(0, 1), "pid": True}], "pid must be an int"),
])
def test_checker_rejects_shared_names_and_bool_ids(events, rule):
    with pytest.raises(TraceFormatError, match=rule):
        check_trace({"traceEvents": [_PN, _TN, *events]})


def test_checker_binds_a_flow_to_a_long_parent_past_many_children():
    """A flow end in a gap between the 100 children of a parent slice binds to the parent (Perfetto: the
    deepest enclosing slice); the checker used to look back only 64 slices and reject it."""
    kids = [_x(10 * i, 5) for i in range(100)]
    flow = [{"ph": "s", "id": 7, "cat": "dep", "pid": 0, "tid": 1, "ts": 2},
            {"ph": "f", "bp": "e", "id": 7, "cat": "dep", "pid": 0, "tid": 1, "ts": 997}]
    assert check_trace({"traceEvents": [_PN, _TN, _x(0, 1000), *kids, *flow]})["flows"] == 1
    with pytest.raises(TraceFormatError, match="binds to no slice"):  # past the parent's end: no slice
        check_trace({"traceEvents": [_PN, _TN, _x(0, 1000), *kids, {**flow[0]}, {**flow[1], "ts": 1001}]})


def test_worst_and_best_ranks_tie_break_on_exposed_comm_not_float_noise():
    """Every rank: 1 s of compute, then c_r of comm on its own stream; idle + exposed comm is the same
    (makespan − 1 s) up to float noise, so the worst are the ranks with most exposed comm (used to be
    picked by the noise: PP8×DP128 printed a 'best' rank with the worst's numbers)."""
    import io

    from rich.console import Console

    from schedsim.report.summary import print_summary
    from schedsim.sim.metrics import Metrics

    c = [0.1 * ((7 * r) % 12) for r in range(12)]  # 0.1 s steps in a scrambled rank order
    spans = [Span(f"mm@r{r}", "mm", r, "compute", "matmul", "compute", 0.0, 1.0) for r in range(12)]
    spans += [Span(f"ar@r{r}", "ar", r, "nccl", "all_reduce", "comm", 1.0, 1.0 + c[r]) for r in range(12) if c[r]]
    tl = Timeline("t", "predict", 12, spans=spans)
    buf = io.StringIO()
    print_summary(tl, Metrics.of(tl), console=Console(file=buf, width=160))
    rows = [ln.split("│")[1].strip() for ln in buf.getvalue().splitlines()
            if ln.startswith("│") and ("worst" in ln or "best" in ln)]
    by_c = sorted(range(12), key=lambda r: -c[r])
    assert rows == [f"{r} worst" for r in by_c[:3]] + [f"{r} best" for r in by_c[-3:]]


def test_measured_pipeline_ranges_give_p2p_flows_critical_path_and_bubble(tmp_path):
    """CPU-only Kineto profiles of a 2-rank 1F1B run (executor range names, µs): the analyze trace used
    to have no flows and the report no critical path."""
    import gzip
    import json

    from schedsim.report.analysis import format_report
    from schedsim.report.chrome import chrome_trace
    from schedsim.trace.analyze import kineto_ranges_timeline, pipeline_bubbles
    from schedsim.trace.common import ImportResult

    ranges = {0: [("schedsim_iter0", 0, 100), ("F0.0.fwd", 0, 10), ("sendF0.0", 10, 12), ("recvB0.0", 12, 40),
                  ("B0.0.I.dgrad", 40, 50), ("B0.0.W.wgrad", 50, 60)],
              1: [("schedsim_iter0", 0, 100), ("recvF1.0", 5, 13), ("F1.0.fwd", 13, 23), ("B1.0.I.dgrad", 23, 33),
                  ("sendB1.0", 33, 38), ("B1.0.W.wgrad", 38, 48)]}
    paths = []
    for r, lst in ranges.items():
        ev = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": a, "dur": b - a}
              for n, a, b in lst]
        p = tmp_path / f"kineto_rank{r}.json.gz"
        with gzip.open(p, "wt") as fh:
            json.dump({"distributedInfo": {"rank": r}, "traceEvents": ev}, fh)
        paths.append(p)
    tl = kineto_ranges_timeline(paths)
    # makespan 60 µs; F/B/I/W busy 30 µs on each rank: bubble 1 − 30/60
    assert pipeline_bubbles(tl) == pytest.approx({0: 0.5, 1: 0.5})
    tr = chrome_trace([("measured", tl)])
    check_trace(tr, require_flows=True)
    flows = {(e["pid"], e["ts"]) for e in tr["traceEvents"] if e["ph"] == "s" and e["cat"] == "p2p"}
    assert flows == {(0, 10.1), (1, 33.25)}  # sendF0.0 -> recvF1.0, sendB1.0 -> recvB0.0, 5% into each send
    assert tl.critical_path[-2:] == ["B0.0.I.dgrad@r0", "B0.0.W.wgrad@r0"]
    assert "(none)" not in format_report(ImportResult(tl, {}, {}, []))


def test_checker_matches_flow_ends_by_cat_name_and_id_as_perfetto_does():
    """An 's' and an 'f' of one id and cat but different names are two unconnected flows in Perfetto."""
    s = {"ph": "s", "id": 3, "cat": "dep", "name": "dep", "pid": 0, "tid": 1, "ts": 1}
    f = {"ph": "f", "bp": "e", "id": 3, "cat": "dep", "name": "dep", "pid": 0, "tid": 1, "ts": 2}
    assert check_trace({"traceEvents": [_PN, _TN, _x(0, 5), s, f]})["flows"] == 1
    with pytest.raises(TraceFormatError, match="one 's' and one 'f'"):
        check_trace({"traceEvents": [_PN, _TN, _x(0, 5), s, {**f, "name": "other"}]})


def test_checker_accepts_counter_tracks_told_apart_by_id():
    """Chrome's format names a counter track by name and id: two ids may carry different series."""
    c = [{"ph": "C", "name": "mem", "id": 1, "pid": 0, "ts": 0, "args": {"heap": 1}},
         {"ph": "C", "name": "mem", "id": 2, "pid": 0, "ts": 0, "args": {"pool": 2.5}}]
    assert check_trace({"traceEvents": [_PN, *c]})["counters"] == 2


def test_measured_ops_overlapping_on_one_stream_go_to_extra_threads():
    """Kernels of one measured stream that overlap partially (PDL, jitter) made an invalid trace."""
    spans = [Span("a@r0", "a", 0, "7", "kernel", "compute", 0.0, 1.0),
             Span("b@r0", "b", 0, "7", "kernel", "compute", 0.5, 1.5),
             Span("c@r0", "c", 0, "7", "kernel", "compute", 0.6, 0.9),   # nests in a
             Span("d@r0", "d", 0, "7", "kernel", "compute", 1.2, 2.0)]   # overlaps b, follows a
    tr = chrome_trace([("measured", Timeline("o", "import", 1, spans=spans))])
    check_trace(tr)
    tid = {e["args"]["op"]: e["tid"] for e in tr["traceEvents"] if e["ph"] == "X"}
    assert tid["a@r0"] == tid["c@r0"] == tid["d@r0"] != tid["b@r0"]
    names = sorted(e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "thread_name")
    assert names == ["7 (compute)", "7 (compute) #2"]


def test_api_docstring_example_runs_as_written():
    """The module example used ``rank: 0``, which the schedule language rejects (the key is ``ranks``)."""
    import doctest

    import schedsim.api

    res = doctest.testmod(schedsim.api, optionflags=doctest.ELLIPSIS)
    assert res.attempted >= 4 and res.failed == 0


def test_api_plot_pipeline_tags_measured_ranges_and_refuses_non_pipelines():
    """It drew an empty '1 steps' chart for a timeline without pipeline actions, and an empty one for
    an imported run whose range names carry them (analyze --charts tags those)."""
    from schedsim import api

    with pytest.raises(SchedsimError, match="no pipeline actions"):
        api.plot_pipeline(_tl([0, 1]))
    names = {0: [("PP:0F0", 0, 1), ("PP:0B0", 3, 5)], 1: [("PP:1F0", 1, 2), ("PP:1B0", 2, 3)]}
    spans = [Span(f"{n}@r{r}", n, r, "7", "kernel", "compute", a * 1e-3, b * 1e-3) for r, lst in names.items()
             for n, a, b in lst]
    tl = Timeline("pp", "import", 2, spans=spans)
    fig = api.plot_pipeline(tl)
    boxes = [t.get_text() for t in fig.axes[0].texts if t.get_text() == "0"]
    assert len(boxes) == 4 and not any(s.tags for s in tl.spans)  # 4 actions of microbatch 0; input untouched


def test_static_memory_counts_the_embedding_and_logits_weights():
    """A GPT with vocab 1000, hidden 64, ffn 256, seq 8, 4 layers on p = 2: the first stage also holds the
    word and position embeddings (vocab × hidden + seq × hidden), the last the output layer and final
    LayerNorm (vocab × hidden + 2 × hidden); they were left out. The memory curve's static bytes are the
    pipeline library's parameter count (one model, schedsim.pipeline.memory) at 2 + 2 + 12 bytes each."""
    from schedsim import api
    from schedsim.report.memory import static_memory

    spec = api.load_text("""
schema_version: 1
name: tiny_gpt
world_size: 2
pipeline:
  schedule: 1f1b
  p: 2
  m: 2
  transformer: {layers: 4, hidden: 64, ffn: 256, heads: 4, seq: 8, micro_batch: 1, dtype: bf16, vocab: 1000}
  optimizer: true
""")
    info = api.lower_spec(spec).pipeline
    # QKV + proj, fc1, fc2 weights; their biases 3h + h + f + h; the two LayerNorms 4h (break18: the biases were
    # left out)
    per_layer = 4 * 64 * 64 + 64 * 256 + 256 * 64 + (3 * 64 + 64 + 256 + 64) + 4 * 64
    n0 = 2 * per_layer + 1000 * 64 + 8 * 64                # 2 layers per stage + word and position embedding
    n1 = 2 * per_layer + 1000 * 64 + 2 * 64                # 2 layers per stage + output layer and final norm
    st = static_memory(info, spec.pipeline, 4)              # ranks 2, 3: a data-parallel replica of 0, 1
    for r, n in ((0, n0), (1, n1), (2, n0), (3, n1)):
        assert st[r] == {"parameters": 2.0 * n, "gradients": 2.0 * n, "optimizer": 12.0 * n}
        assert sum(st[r].values()) == info.static_memory.bytes[r % 2]  # bf16 + Adam: the library's 16 B/param
    assert static_memory(info, spec.pipeline.model_copy(update={"optimizer": False}), 2)[0]["optimizer"] == 0.0
    assert static_memory(None, spec.pipeline, 2) == {}
    run = api.predict(spec, "h200")
    assert run.timeline.meta["memory"]["ranks"][1]["static"] == st[1]


def test_compare_gantt_draws_no_empty_lanes_for_streams_a_timeline_lacks():
    """Predicted streams (compute, nccl) against measured CUDA streams (7, 24) on 2 ranks: 8 lanes with
    a box each, not 16 lanes of which half are empty."""
    from schedsim.report.gantt import draw_gantt

    def tl(streams, src):
        return Timeline("t", src, 2, spans=[Span(f"{st}@r{r}", "op", r, st, k, res, 0.0, 0.001)
                                            for r in (0, 1) for st, k, res in streams])

    pred = tl([("compute", "matmul", "compute"), ("nccl", "all_reduce", "comm")], "predict")
    meas = tl([("7", "kernel", "compute"), ("24", "all_reduce", "comm")], "import")
    fig = draw_gantt([("predicted", pred), ("measured", meas)])
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 8 and "r0 compute [predicted]" in labels and "r0 7 [measured]" in labels
    assert "r0 7 [predicted]" not in labels


def test_back_to_back_slices_share_their_boundary_in_the_trace():
    """dur was rounded on its own: a ended at 256.1712 µs, 0.1 ns after b began at 256.1711 µs."""
    t0, t1 = 0.00023308445025757262, 0.00025617110441167107
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", t0, t1),
             Span("b@r0", "b", 0, "s", "matmul", "compute", t1, t1 + 1e-5)]
    x = [e for e in chrome_trace([("p", Timeline("t", "predict", 1, spans=spans))])["traceEvents"] if e["ph"] == "X"]
    assert x[0]["ts"] + x[0]["dur"] == pytest.approx(x[1]["ts"], abs=1e-9)


def test_analyze_bubble_counts_the_optimizer_as_busy_like_predict():
    """Rank 0: F [0, 1], B [2, 4], optimizer [4, 5] ms; rank 1: F [1, 2], B [2, 4], optimizer [4, 5];
    makespan 5 ms. Idle fraction 1 − 4/5 = 0.2 on both, as pipeline_metrics (predict) has it; analyze
    printed 1 − 3/5 = 0.4 for the same timeline (VP2 on rtx3090: 0.6355 against predict's 0.5749)."""
    from schedsim.sim.pipeline_metrics import pipeline_metrics
    from schedsim.trace.analyze import pipeline_bubbles

    def act(r, op, a, b):
        return Span(f"{op}{r}.0@r{r}", f"{op}{r}.0", r, "c", "matmul", "compute", a * 1e-3, b * 1e-3,
                    tags={"pp_op": op, "phase": op, "stage": r, "mb": 0})

    spans = [act(0, "F", 0, 1), act(0, "B", 2, 4), act(1, "F", 1, 2), act(1, "B", 2, 4)]
    spans += [Span(f"opt@r{r}", "opt", r, "c", "compute", "compute", 4e-3, 5e-3) for r in (0, 1)]
    tl = Timeline("pp", "predict", 2, spans=spans, meta={"pipeline": {"v": 1}})
    assert pipeline_bubbles(tl) == pytest.approx({0: 0.2, 1: 0.2})
    assert pipeline_bubbles(tl) == pytest.approx(pipeline_metrics(tl)["bubble_of_makespan"]["per_rank"])


def test_analyze_json_carries_the_bubble_per_rank():
    """``analyze --format json`` is 'everything analyze prints' but left the pipeline bubble out."""
    import json

    from schedsim.trace.analyze import analysis_dict, tag_pipeline
    from schedsim.trace.common import ImportResult

    spans = [Span(f"{n}@r{r}", n, r, "7", "kernel", "compute", a * 1e-3, b * 1e-3)
             for r, n, a, b in ((0, "PP:0F0", 0, 1), (0, "PP:0B0", 3, 5), (1, "PP:1F0", 1, 2), (1, "PP:1B0", 2, 3))]
    tl = Timeline("pp", "import", 2, spans=spans)
    tag_pipeline(tl)
    d = json.loads(json.dumps(analysis_dict(ImportResult(tl, {}, {}, [])), default=str))
    # makespan 5 ms; rank 0 busy 3 ms, rank 1 busy 2 ms
    assert d["pipeline_bubble"] == pytest.approx({"0": 0.4, "1": 0.6})


def test_folded_gantt_keeps_the_critical_path_ranks():
    """PP8×DP128 drew ranks 0–7 and 1017–1023 while its critical path runs through 1016; the ranks
    on the critical path now keep their lanes first."""
    from schedsim.report.chart_base import choose_ranks
    from schedsim.report.gantt import draw_gantt

    ranks = list(range(64))
    shown, folded = choose_ranks(ranks, {r: 1 for r in ranks}, 10, prefer=[40, 41])
    assert shown == [0, 1, 2, 40, 41, 61, 62, 63] and len(folded) == 56  # 8 lanes + 2 bands
    assert choose_ranks(ranks, {r: 1 for r in ranks}, 10)[0] == [0, 1, 2, 3, 60, 61, 62, 63]
    spans = [Span(f"mm@r{r}", "mm", r, "s", "matmul", "compute", 0.0, 1e-3 * (1 + (r == 500))) for r in range(1024)]
    tl = Timeline("big", "predict", 1024, spans=spans)
    tl.critical_path = ["mm@r500"]
    labels = [t.get_text() for t in draw_gantt([("predicted", tl)]).axes[0].get_yticklabels()]
    assert "r500 s" in labels and "r0 s" in labels and "r1023 s" in labels


def test_collective_flows_stay_inside_their_group():
    """Two TP groups {0,1} and {2,3} each issue 'ar': the trace drew arrows from rank 0 to ranks 2 and 3
    (members were grouped by name alone); the graph's rendezvous keeps one flow per group."""
    from schedsim import api

    run = api.predict(api.load_text("""
schema_version: 1
name: two_tp_groups
world_size: 4
ops:
  - {name: ar, kind: all_reduce, bytes: 1048576, dtype: bf16, ranks: [0, 1], group: [0, 1]}
  - {name: ar, kind: all_reduce, bytes: 1048576, dtype: bf16, ranks: [2, 3], group: [2, 3]}
"""))
    tr = chrome_trace([("p", run.timeline)], run.graph)
    check_trace(tr, require_flows=True)
    ends: dict[int, list[int]] = {}
    for e in tr["traceEvents"]:
        if e["ph"] in "sf" and e["cat"] == "collective":
            ends.setdefault(e["id"], []).append(e["pid"])
    assert sorted(ends.values()) == [[0, 1], [2, 3]]


def test_compare_trace_draws_the_dependency_arrows_of_the_predicted_schedule(tmp_path):
    """compare rebuilds the predicted timeline's DAG from its meta (file, set), so its trace has the dependency
    arrows of predict's trace: offload's copies feed GEMMs on another stream."""
    import json
    from pathlib import Path

    from schedsim.api import predict_to_dir
    from schedsim.report.compare import write_comparison
    from schedsim.report.trace_check import check_trace_file
    from schedsim.sim.timeline import Timeline

    predict_to_dir(Path("schedules/offload.yaml"), None, "h200", tmp_path / "p", None, gantt=False)
    pred = Timeline.read_json(tmp_path / "p" / "timeline.json")
    _res, paths = write_comparison(pred, pred, tmp_path / "c", gantt=False)
    check_trace_file(paths[1], require_flows=True)
    ev = json.loads(paths[1].read_text())["traceEvents"]
    deps = [e for e in ev if e.get("ph") == "s" and e.get("cat") == "dep"]
    trace = json.loads((tmp_path / "p" / "trace.json").read_text())["traceEvents"]
    assert len(deps) == sum(e.get("ph") == "s" and e.get("cat") == "dep" for e in trace) > 0
