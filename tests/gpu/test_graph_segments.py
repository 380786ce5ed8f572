"""Ops captured in a CUDA graph beside eager ops (an op's ``graph:``, vllm-project/vllm#2770): rule host-issue
(:func:`schedsim.gpu.host.host_issue_columns`) gives each run of consecutive ops of one graph one graph launch
(``launch.graph_launch_us``) instead of a call each; host timelines computed by hand, the whole-schedule graph as
the case of one launch per rank, and the graphs a capture could not make, refused with exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from schedsim import api
from schedsim.cli import app
from schedsim.gpu import host as gh
from schedsim.hardware.profile import load_profile

PROF = load_profile("h200")
LP = PROF.launch
OP, G, FIRST, F = LP.eager_per_op_us, LP.graph_launch_us, LP.first_op_extra_us, LP.call_launch_fraction


def _issue(hclass: list[int], graph: list[int], stream: list[int] | None = None, rank: list[int] | None = None,
           xdeps: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    n = len(hclass)
    i64 = lambda x, d: np.array(x if x is not None else [d] * n, np.int64)  # noqa: E731
    return gh.host_issue_columns(i64(rank, 0), i64(stream, 0), i64(hclass, 0), np.ones(n, np.int64),
                                 np.zeros(n), np.full(n, -1, np.int64), i64(xdeps, 0), PROF, "eager",
                                 graph=np.array(graph, np.int64))


def test_one_graph_launch_against_n_eager_launches() -> None:
    """Five kernels, the middle three in one graph: the eager ones pay a call each (the first its first-call
    extra), the graph's three one launch together; all eager: five calls."""
    k = gh.H_KERNEL
    issue, call0 = _issue([k] * 5, [-1, 0, 0, 0, -1])
    a0 = OP + FIRST
    g = a0 + G
    a4 = g + OP
    assert issue * 1e6 == pytest.approx([a0, g, g, g, a4], abs=1e-9)
    assert call0 * 1e6 == pytest.approx([0, a0, a0, a0, g], abs=1e-9)
    eager, _ = _issue([k] * 5, [-1] * 5)
    assert eager * 1e6 == pytest.approx([a0 + i * OP for i in range(5)], abs=1e-9)
    assert (eager[-1] - issue[-1]) * 1e6 == pytest.approx(3 * OP - G, abs=1e-9)  # three calls against one launch


def test_a_graph_skips_its_event_waits_and_stream_switches() -> None:
    """In the graph the ops' cross-stream waits and stream changes are edges of the graph, not host work; the
    eager op after it pays a stream switch from the graph's launch stream (its first op's)."""
    k = gh.H_KERNEL
    issue, _ = _issue([k] * 4, [0, 0, 0, -1], stream=[0, 1, 0, 1], xdeps=[0, 1, 1, 1])
    g = G  # the launch is the rank's first call: no first-call extra
    a3 = g + LP.event_wait_s * 1e6 + LP.stream_switch_s * 1e6 + OP + FIRST
    assert issue * 1e6 == pytest.approx([g, g, g, a3], abs=1e-9)


def test_two_runs_of_one_graph_are_two_launches_and_ranks_launch_their_own() -> None:
    k = gh.H_KERNEL
    issue, _ = _issue([k] * 5, [0, 0, -1, 1, 2], rank=[0, 0, 0, 0, 1])
    assert issue * 1e6 == pytest.approx([G, G, G + OP + FIRST, 2 * G + OP + FIRST, G], abs=1e-9)


def test_ranks_interleaved_give_the_times_of_ranks_in_order() -> None:
    """Each rank's ops in program order, the ranks interleaved: the same times as with the ranks in order."""
    k = gh.H_KERNEL
    ordered, c_ord = _issue([k] * 6, [0, 0, -1, 1, 1, -1], rank=[0, 0, 0, 1, 1, 1])
    perm = [0, 3, 1, 4, 2, 5]
    mixed, c_mix = _issue([k] * 6, [[0, 0, -1, 1, 1, -1][i] for i in perm], rank=[[0, 0, 0, 1, 1, 1][i] for i in perm])
    assert np.array_equal(mixed, ordered[perm]) and np.array_equal(c_mix, c_ord[perm])


def test_the_whole_schedule_graph_is_one_launch_per_rank() -> None:
    """Every op of each rank in one graph launch: the issue times of ``launch: cuda_graph`` (the same host
    model)."""
    k, c = gh.H_KERNEL, gh.H_COLL
    cls, rank = [k, c, k, k, c], [0, 0, 0, 1, 1]
    issue, call0 = _issue(cls, [0, 0, 0, 1, 1], rank=rank)
    whole, w0 = gh.host_issue_columns(np.array(rank), np.zeros(5, np.int64), np.array(cls), np.ones(5, np.int64),
                                      np.zeros(5), np.full(5, -1, np.int64), np.zeros(5, np.int64), PROF,
                                      "cuda_graph")
    assert np.array_equal(issue, whole) and np.array_equal(call0, w0)


def test_kernels_of_a_graph_reach_the_gpu_when_its_launch_returns() -> None:
    k = gh.H_KERNEL
    graph = np.array([-1, 0, 0], np.int64)
    issue, call0 = _issue([k] * 3, graph.tolist())
    rel = gh.kernel_release(issue, call0, PROF, "eager", None, graph)
    assert rel[0] == pytest.approx(call0[0] + F * (issue[0] - call0[0]))
    assert np.array_equal(rel[1:], issue[1:])


def test_with_graph_start_a_graphs_nodes_reach_the_gpu_that_long_after_its_launch_began() -> None:
    """``launch.graph_start_us`` (a replay's first node on the GPU, from its call's start): the graph's kernels
    are released at call0 + graph_start_us, later than the launch returns when that is longer than the call;
    eager ops unchanged; ``cuda_graph`` mode (its one launch begins at 0): every node at graph_start_us."""
    k = gh.H_KERNEL
    graph = np.array([-1, 0, 0], np.int64)
    issue, call0 = _issue([k] * 3, graph.tolist())
    prof = PROF.model_copy(update={"launch": LP.model_copy(update={"graph_start_us": G + 3.5})})
    rel = gh.kernel_release(issue, call0, prof, "eager", None, graph)
    assert rel[0] == pytest.approx(call0[0] + F * (issue[0] - call0[0]))
    assert rel[1:] * 1e6 == pytest.approx([OP + FIRST + G + 3.5] * 2, abs=1e-9)  # the launch began after a0's call
    assert (rel[1:] - issue[1:]) * 1e6 == pytest.approx([3.5, 3.5], abs=1e-9)
    whole = gh.kernel_release(np.full(3, G * 1e-6), np.zeros(3), prof, "cuda_graph")
    assert whole * 1e6 == pytest.approx([G + 3.5] * 3, abs=1e-9)
    assert np.array_equal(gh.kernel_release(np.full(3, G * 1e-6), np.zeros(3), PROF, "cuda_graph"),
                          np.full(3, G * 1e-6))  # unset: when the launch returns


def test_predict_a_whole_graph_with_graph_start(tmp_path: Path) -> None:
    """A whole-schedule graph of five 1 µs kernels: its first node starts graph_start_us after the iteration's
    start, the others back to back (the GPU time a node adds, graph_per_op_us, is the same with or without it)."""
    f = tmp_path / "g.yaml"
    f.write_text(SCHED.replace(", graph: g", "").replace("world_size: 1\n", "world_size: 1\nlaunch: cuda_graph\n"))
    base = api.predict(f).timeline
    b0 = min(s.start_s for s in base.spans)
    assert b0 * 1e6 == pytest.approx(G, abs=1e-6)
    p = tmp_path / "p.yaml"
    d = PROF.model_dump(mode="json")
    d["launch"]["graph_start_us"] = 9.0
    d["name"] = "h200_graph_start"
    p.write_text(yaml.safe_dump(d))
    tl = api.predict(f, profile=str(p)).timeline
    assert min(s.start_s for s in tl.spans) * 1e6 == pytest.approx(9.0, abs=1e-6)
    assert (tl.makespan_s - base.makespan_s) * 1e6 == pytest.approx(9.0 - G, abs=1e-6)


# one rank, five 1 µs kernels a0..a4, the middle three (a1, a2, a3) in graph g
SCHED = "schema_version: 1\nname: g\nworld_size: 1\nops:\n" + "".join(
    f"  - {{name: a{i}, kind: compute, duration_us: 1{', graph: g' if 1 <= i <= 3 else ''}}}\n" for i in range(5))


def test_predict_a_graph_between_eager_ops(tmp_path: Path) -> None:
    """The timeline by hand: a0's kernel reaches the GPU F of the way through its call; the graph's three
    kernels when its launch returns, back to back; a4 F of the way through its own call."""
    f = tmp_path / "g.yaml"
    f.write_text(SCHED)
    tl = api.predict(f).timeline
    sp = {s.name: (s.start_s * 1e6, s.end_s * 1e6) for s in tl.spans}
    a0_call = OP + FIRST
    g = a0_call + G
    want = {"a0": F * a0_call, "a1": g, "a2": g + 1, "a3": g + 2, "a4": g + F * OP}
    for name, start in want.items():
        assert sp[name][0] == pytest.approx(start, abs=1e-6), name
        assert sp[name][1] - sp[name][0] == pytest.approx(1.0, abs=1e-6), name
    eager = api.predict(api.load_text(SCHED.replace(", graph: g", ""))).timeline
    # three kernels one call apart eagerly, against one launch
    assert eager.makespan_s * 1e6 == pytest.approx(a0_call + 3 * OP + F * OP + 1, abs=1e-6)
    assert tl.makespan_s * 1e6 == pytest.approx(g + F * OP + 1, abs=1e-6)


def _exit_2(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "fix:" in r.output and "Traceback" not in r.output, r.output


def test_graphs_a_capture_cannot_make_are_refused(tmp_path: Path) -> None:
    _exit_2(tmp_path, SCHED.replace("world_size: 1", "world_size: 1\nlaunch: cuda_graph"),
            "but the schedule has launch: cuda_graph")
    _exit_2(tmp_path, SCHED.replace("a2, kind: compute, duration_us: 1,", "a2, kind: compute, duration_us: 1, "
                                    "host_us: 3,"), "sets host_us")
    # a2 forks to stream side and nothing of the graph on compute waits for it
    side = SCHED.replace("a2, kind: compute, duration_us: 1,", "a2, kind: compute, duration_us: 1, stream: side,")
    _exit_2(tmp_path, side, "never joins again")
    _exit_2(tmp_path, SCHED.replace("graph: g}", "graph: 'g h'}"), "graph")
    batch = ("schema_version: 1\nname: b\nworld_size: 2\nops:\n"
             "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x, graph: g}\n"
             "  - {name: r, kind: recv, peer: 1, bytes: 8, ranks: [0], p2p_batch: x}\n"
             "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: x}\n"
             "  - {name: s, kind: send, peer: 0, bytes: 8, ranks: [1], p2p_batch: x}\n")
    _exit_2(tmp_path, batch, "is in p2p_batch 'x' with ops of a graph")


def test_a_fork_joined_in_the_graph_is_accepted(tmp_path: Path) -> None:
    f = tmp_path / "ok.yaml"
    f.write_text(SCHED.replace("a2, kind: compute, duration_us: 1,", "a2, kind: compute, duration_us: 1, "
                               "stream: side,").replace("a3, kind: compute, duration_us: 1,",
                                                        "a3, kind: compute, duration_us: 1, deps: [a2],"))
    r = CliRunner().invoke(app, ["check", str(f)])
    assert r.exit_code == 0, r.output
