"""The executor's CUDA graph segments (ops with ``graph:``) without a GPU: which ops form a segment
(:func:`executor.runtime.graph_runs`), and what :class:`executor.runtime.CudaSegmentRunner` captures and issues,
step by step, against a recording stand-in for ``torch.cuda`` (streams, events, graphs): each segment captured on
its first op's stream with its other streams forked and joined and its inner dependencies as captured events, then
replayed at its first op's place after its other streams' earlier work, and the ops after it waiting for its
events. (The calls are those of the whole-schedule ``CudaGraphRunner``, which runs on GPUs.)"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from executor.runtime import CudaSegmentRunner, graph_runs, stream_waits
from schedsim.graph.ops import Op

LOG: list[tuple[str, ...]] = []


class _Stream:
    def __init__(self, name: str) -> None:
        self.name = name

    def wait_event(self, ev: Any) -> None:
        LOG.append((self.name, "wait", ev.name))

    def wait_stream(self, other: Any) -> None:
        LOG.append((self.name, "wait_stream", other.name))


class _Event:
    n = 0

    def __init__(self, name: str | None = None) -> None:
        _Event.n += 1
        self.name = name or f"cap{_Event.n}"

    def record(self, st: Any) -> None:
        LOG.append((st.name, "record", self.name))


class _Graph:
    def replay(self) -> None:
        LOG.append(("host", "replay"))

    def reset(self) -> None:
        pass


@contextmanager
def _capture(g: Any, stream: Any, capture_error_mode: str) -> Any:
    LOG.append((stream.name, "begin_capture"))
    yield
    LOG.append((stream.name, "end_capture"))


def _torch() -> Any:
    cuda = SimpleNamespace(set_stream=lambda st: LOG.append((st.name, "set")), synchronize=lambda dev: None,
                           Event=_Event, CUDAGraph=_Graph, graph=_capture,
                           default_stream=lambda dev: _Stream("default"))
    return SimpleNamespace(cuda=cuda)


class _Impl:
    def __init__(self, name: str) -> None:
        self.name = name

    def run(self) -> None:
        LOG.append(("host", "run", self.name))


def _op(name: str, stream: str, graph: str | None = None, deps: tuple[str, ...] = ()) -> Op:
    return Op(name=name, rank=0, kind="compute", stream=stream, seq=0, deps=deps, graph=graph)


def test_graph_runs_are_consecutive_ops_of_one_name() -> None:
    ops = [_op("a", "c"), _op("b", "c", "g"), _op("c", "c", "g"), _op("d", "c", "h"), _op("e", "c"),
           _op("f", "c", "g")]
    assert graph_runs(ops) == [[1, 2], [3], [5]]


def _runner() -> CudaSegmentRunner:
    # e0 eager on c; g1, g2, g3 one graph (g2 on stream s waits for g1, g3 on c for g2); e4 eager on s after g3
    ops = [_op("e0", "c"), _op("g1", "c", "G"), _op("g2", "s", "G", ("g1",)), _op("g3", "c", "G", ("g2",)),
           _op("e4", "s", None, ("g3",))]
    streams = {"c": _Stream("c"), "s": _Stream("s")}
    r = object.__new__(CudaSegmentRunner)
    r.torch, r.ops, r.tracker, r.log = _torch(), ops, None, lambda msg: LOG.append(("log", msg))
    r.ctx = SimpleNamespace(device="cuda:0", rank=0)
    r.impls = [_Impl(o.name) for o in ops]
    r.streams, r.stream_list = streams, [streams[o.stream] for o in ops]
    r.cross = [[], [], [1], [2], [3]]
    r.ev_start = [_Event(f"start_{o.name}") for o in ops]
    r.ev_end = [_Event(f"end_{o.name}") for o in ops]
    r.ev_dep = [None, _Event("dep_g1"), _Event("dep_g2"), _Event("dep_g3"), None]
    r.last_on_stream = {"c": 3, "s": 4}
    r.ev_stream_end = {"c": _Event("stream_end_c"), "s": _Event("stream_end_s")}
    r.segments, r.seg_graphs = graph_runs(ops), {}
    return r


def test_a_segment_is_captured_on_its_first_ops_stream_forked_and_joined() -> None:
    r = _runner()
    LOG.clear()
    r._prepare()
    assert r.segments == [[1, 2, 3]] and set(r.seg_graphs) == {1}
    cap = [x for x in LOG if x[0] != "log"]
    g1, g2 = cap[4][2], cap[8][2]  # the events captured for g1's and g2's waiters
    assert cap == [("c", "begin_capture"), ("s", "wait_stream", "c"),
                   ("c", "set"), ("host", "run", "g1"), ("c", "record", g1),
                   ("s", "set"), ("s", "wait", g1), ("host", "run", "g2"), ("s", "record", g2),
                   ("c", "set"), ("c", "wait", g2), ("host", "run", "g3"),
                   ("c", "wait_stream", "s"), ("c", "set"), ("c", "end_capture"), ("default", "set")]


def test_the_timed_iteration_replays_the_segment_at_its_place() -> None:
    r = _runner()
    r._prepare()
    LOG.clear()
    r._issue_cuda(timed=True)  # every op of the segment spans the replay
    assert LOG[4:13] == [("c", "set"), ("c", "wait_stream", "s"), ("c", "record", "start_g1"),
                         ("c", "record", "start_g2"), ("c", "record", "start_g3"), ("host", "replay"),
                         ("c", "record", "end_g1"), ("c", "record", "end_g2"), ("c", "record", "end_g3")]
    assert ("s", "wait", "end_g3") in LOG


def test_a_failed_capture_leaves_the_ops_eager() -> None:
    r = _runner()

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("operation not permitted when stream is capturing")

    r.torch.cuda.graph = broken
    LOG.clear()
    r._prepare()
    assert r.seg_graphs == {}
    assert any(x[0] == "log" and "capturing the CUDA graph segments failed (RuntimeError" in x[1] for x in LOG)


def test_the_uninstrumented_iteration_is_the_compiled_step_list_with_the_replay() -> None:
    """The uninstrumented iteration runs :func:`executor.lean.compile_cuda`'s flat steps (what a hand-written
    script calls, nothing looked up per op), the segment one replay among them: the same stream calls as the
    segment issue above, less the repeated ``set_stream`` of a stream already current."""
    r = _runner()
    for impl in r.impls:
        impl.fast, impl.tf32 = None, None
    r.lean_cuda = None
    r._prepare()
    steps = r._compile_lean()
    LOG.clear()
    for f in steps:
        f()
    compiled = list(LOG)
    LOG.clear()
    r._issue_cuda(timed=False)  # the runner's uninstrumented issue is that list
    assert LOG == compiled
    assert LOG == [("c", "set"), ("host", "run", "e0"),
                   # the segment on c: after s's earlier work, then its events for the ops outside it, s after it
                   ("c", "wait_stream", "s"), ("host", "replay"),
                   # only g3's event: e4 waits for it; g1's and g2's waiters are inside the graph
                   ("c", "record", "dep_g3"),
                   ("s", "wait_stream", "c"),
                   ("s", "set"), ("s", "wait", "dep_g3"), ("host", "run", "e4"),
                   ("c", "record", "stream_end_c"), ("s", "record", "stream_end_s")]
    assert r.lean_owner == [0, 0, 1, 1, 1, 1, 4, 4, 4, -1, -1]


def test_the_ranks_times_name_each_captured_segments_ops(monkeypatch: Any) -> None:
    """``times_dict`` carries ``segments`` (op ids), which ``execute`` writes to ``meta.graph_segments`` for
    ``compare`` (every op of a segment is timed as its whole replay); none when the capture failed."""
    from executor.runtime import RankRunner

    monkeypatch.setattr(RankRunner, "times_dict", lambda self: {"ids": self.ids})
    r = _runner()
    r.ids = [o.id for o in r.ops]
    r._prepare()
    assert r.times_dict() == {"ids": r.ids, "segments": [["g1@r0", "g2@r0", "g3@r0"]]}
    r.seg_graphs = {}
    assert r.times_dict()["segments"] == []


def test_every_rank_runs_the_same_stamped_iterations() -> None:
    """Each iteration's aligned start is an all-gather over every rank (:class:`executor.clock.IterationClock`), so
    a rank that captured its segments, one whose capture failed and one whose ops hold no segment all run the same
    number of stamped iterations (``_host_call_iters``): none, in a schedule with graph segments."""
    from executor.runtime import RunOptions

    o = RunOptions(host_call_iters=5)
    captured = _runner()
    captured._prepare()
    failed = _runner()

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("capture failed")

    failed.torch.cuda.graph = broken
    failed._prepare()
    plain = _runner()  # a rank whose ops have no `graph:`
    plain.ops = [_op(o_.name, o_.stream) for o_ in plain.ops]
    plain.segments = graph_runs(plain.ops)
    plain._prepare()
    assert (captured.seg_graphs != {}, failed.seg_graphs, plain.segments) == (True, {}, [])
    assert [r._host_call_iters(o) for r in (captured, failed, plain)] == [0, 0, 0]


def _lowered_runner(schedule: str) -> CudaSegmentRunner:
    """A segment runner on rank 0's lowered ops of ``schedules/<schedule>``, with the recording stand-ins."""
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_schedule

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    G = build_graph(load_schedule(root / "schedules" / schedule, {}))
    ops = sorted((G.nodes[n]["op"] for n in G.nodes if G.nodes[n]["op"].rank == 0), key=lambda o: o.seq)
    r = object.__new__(CudaSegmentRunner)
    r.torch, r.ops, r.tracker, r.log = _torch(), ops, None, lambda msg: None
    r.ctx = SimpleNamespace(device="cuda:0", rank=0)
    r.impls = [_Impl(o.name) for o in ops]
    for impl in r.impls:
        impl.fast, impl.tf32 = None, None
    r.streams = {s: _Stream(s) for s in dict.fromkeys(o.stream for o in ops)}
    r.stream_list = [r.streams[o.stream] for o in ops]
    _prev, r.cross, _waits, r.last_on_stream = stream_waits(ops)
    waited = {d for lst in r.cross for d in lst}
    r.ev_dep = [_Event(f"dep_{o.name}") if i in waited else None for i, o in enumerate(ops)]
    r.ev_stream_end = {s: _Event(f"stream_end_{s}") for s in r.streams}
    r.segments, r.seg_graphs, r.lean_cuda = graph_runs(ops), {}, None
    r._prepare()
    return r


def test_the_small_ops_segment_replay_records_only_the_events_waited_for_outside_it() -> None:
    """schedules/small_ops_segment.yaml (64 layers, the first 32 and seg_join one segment): inside the segment
    every ``side{i}`` waits for ``up{i}`` and seg_join for side31, all captured; nothing after it waits for a
    segment op (aux's side32 follows the segment through ``aux.wait_stream(main)``). So the uninstrumented
    iteration records, by hand: up32..up63 (side32..side63 wait for them) and side63 (join waits for it), 33
    dependency events, plus one end event per stream, 2: 35 records (the 32 up{i} and side31 of the segment
    were 33 more). And no wait is lost: every event waited on was recorded before, in the same iteration, after
    the op it stands for; every cross-stream dependency of an eager op is such a wait or the segment's join."""
    r = _lowered_runner("small_ops_segment.yaml")
    assert len(r.segments) == 1 and len(r.segments[0]) == 3 * 32 + 1 and set(r.seg_graphs) == {0}
    steps = r._compile_lean()
    LOG.clear()
    for f in steps:
        f()
    records = [x[2] for x in LOG if x[1] == "record"]
    want = [f"dep_up{i}" for i in range(32, 64)] + ["dep_side63"]
    assert sorted(records) == sorted(want + ["stream_end_main", "stream_end_aux"]) and len(records) == 35
    seen: set[str] = set()
    ran: set[str] = set()
    for x in LOG:
        if x[:2] == ("host", "replay"):
            ran |= {o.name for o in r.ops[:97]}
        elif x[:2] == ("host", "run"):
            ran.add(x[2])
        elif x[1] == "record" and x[2].startswith("dep_"):
            assert x[2][4:] in ran
            seen.add(x[2])
        elif x[1] == "wait":
            assert x[2] in seen, x
    waits = {(x[0], x[2]) for x in LOG if x[1] == "wait"}
    eager = range(97, len(r.ops))
    for k in eager:
        for d in r.cross[k]:
            assert d >= 97 and (r.ops[k].stream, f"dep_{r.ops[d].name}") in waits
    assert ("aux", "wait_stream", "main") in LOG
