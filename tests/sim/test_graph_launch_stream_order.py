"""A CUDA graph beside eager ops (``graph:``) is launched on its capture stream, the stream of its first op: its
nodes captured from a forked stream run after the work issued on the capture stream before the launch (CUDA
Programming Guide, "CUDA Graphs"; ``execute`` captures the segment with the other streams forked from the capture
stream); and, as ``execute`` replays it (executor/runtime.py ``CudaSegmentRunner._issue_step``), the launch waits
for its other streams' earlier work, and their later work waits for the launch's end. Timelines computed by hand
(recorded durations: no host cost), and the edge list itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedsim import api
from schedsim.lower.graphs import graph_fork_edges

# x (1000 µs) on compute; then graph G: a on compute (its capture stream), b (500 µs) forked to s2, c on compute
# joining b; then d on s2, eager.
SCHED = """\
schema_version: 1
name: fork
world_size: 1
durations: recorded
ops:
  - {name: x, kind: compute, duration_us: 1000}
  - {name: a, kind: compute, duration_us: 10, graph: G}
  - {name: b, kind: compute, duration_us: 500, graph: G, stream: s2}
  - {name: c, kind: compute, duration_us: 10, graph: G, deps: [b]}
  - {name: d, kind: compute, duration_us: 10, stream: s2}
"""


@pytest.fixture()
def sched(tmp_path: Path) -> Path:
    f = tmp_path / "fork.yaml"
    f.write_text(SCHED)
    return f


def test_a_forked_node_waits_for_the_capture_streams_earlier_work(sched: Path) -> None:
    tl = api.predict(sched).timeline
    sp = {s.id: (s.start_s * 1e6, s.end_s * 1e6) for s in tl.spans}
    # by hand: x 0-1000; the graph starts when x ends: a 1000-1010 and b 1000-1500 (it ran beside x before);
    # c after a and b: 1500-1510; d on s2 after the launch's end (c): 1510-1520
    assert sp["x@r0"] == pytest.approx((0, 1000))
    assert sp["a@r0"] == pytest.approx((1000, 1010))
    assert sp["b@r0"] == pytest.approx((1000, 1500))
    assert sp["c@r0"] == pytest.approx((1500, 1510))
    assert sp["d@r0"] == pytest.approx((1510, 1520))


def _spans(path: Path, ops: str) -> dict[str, tuple[float, float]]:
    """(start, end) µs per op id of a one-rank schedule of recorded durations whose ``ops:`` are ``ops``."""
    path.write_text(f"schema_version: 1\nname: {path.stem}\nworld_size: 1\ndurations: recorded\nops:\n{ops}")
    return {s.id: (s.start_s * 1e6, s.end_s * 1e6) for s in api.predict(path).timeline.spans}


def test_a_launch_waits_for_its_other_streams_earlier_work(tmp_path: Path) -> None:
    # y (1000 us) on s2, eager; then graph G: a on compute, b on s2 after a, c on compute after b; then e on s2.
    # execute replays G after s2's earlier work (y) and e after the replay: a 1000-1010, b 1010-1020,
    # c 1020-1030, e 1030-1040 (a is not at 0 beside y, nor e at 1020 right after b)
    sp = _spans(tmp_path / "side.yaml", """\
  - {name: y, kind: compute, duration_us: 1000, stream: s2}
  - {name: a, kind: compute, duration_us: 10, graph: G}
  - {name: b, kind: compute, duration_us: 10, graph: G, stream: s2, deps: [a]}
  - {name: c, kind: compute, duration_us: 10, graph: G, deps: [b]}
  - {name: e, kind: compute, duration_us: 10, stream: s2}
""")
    assert sp == {"y@r0": pytest.approx((0, 1000)), "a@r0": pytest.approx((1000, 1010)),
                  "b@r0": pytest.approx((1010, 1020)), "c@r0": pytest.approx((1020, 1030)),
                  "e@r0": pytest.approx((1030, 1040))}


def test_the_fork_edges_run_from_the_op_before_the_launch_on_its_stream(sched: Path) -> None:
    prog = api.lower_spec(api.load(sched))
    names = [prog.names[int(i)] for i in prog.name_id]
    edges = [(names[a], names[b]) for a, b in graph_fork_edges(prog).tolist()]
    assert edges == [("x", "b"), ("c", "d")]
    assert graph_fork_edges(prog).dtype == np.int64
    eager = sched.with_name("eager.yaml")
    eager.write_text(SCHED.replace(", graph: G", ""))
    assert graph_fork_edges(api.lower_spec(api.load(eager))).shape == (0, 2)


def test_a_launch_waits_for_every_outside_dependency_and_its_dependents_for_its_end(tmp_path: Path) -> None:
    # y (1000 us) on s3; graph G on compute: a, b (after y), c (500 us); z on s2 after a. One launch: execute
    # replays G after y (b's dependency) and records a's event after the replay, so by hand: a 1000-1010,
    # b 1010-1020, c 1020-1520, z 1520-1530 (not a at 0 beside y, nor z at 10 right after a)
    f = tmp_path / "outside.yaml"
    sp = _spans(f, """\
  - {name: y, kind: compute, duration_us: 1000, stream: s3}
  - {name: a, kind: compute, duration_us: 10, graph: G}
  - {name: b, kind: compute, duration_us: 10, graph: G, deps: [y]}
  - {name: c, kind: compute, duration_us: 500, graph: G}
  - {name: z, kind: compute, duration_us: 10, stream: s2, deps: [a]}
""")
    assert sp == {"y@r0": pytest.approx((0, 1000)), "a@r0": pytest.approx((1000, 1010)),
                  "b@r0": pytest.approx((1010, 1020)), "c@r0": pytest.approx((1020, 1520)),
                  "z@r0": pytest.approx((1520, 1530))}
    prog = api.lower_spec(api.load(f))
    names = [prog.names[int(i)] for i in prog.name_id]
    assert [(names[a], names[b]) for a, b in graph_fork_edges(prog).tolist()] == [("y", "a"), ("c", "z")]
