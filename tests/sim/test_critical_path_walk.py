"""The critical path's walk (issue 33): through the last rank to reach a rendezvous, and through the host's calls
when the host launched the path's first op late; hand-computed timelines on the toy profile (conftest), the
package's compiled loop and the oracle's Python loop alike, and Megatron GPT PP4 (1F1B,
batched p2p)."""

from __future__ import annotations

import pytest

from schedsim import api
from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.sim.engine import simulate
from schedsim.sim.metrics import Metrics, critical_path_host, critical_path_segments
from schedsim.spec.loader import load_text
from tests.conftest import ROOT, toy_profile_dict
from tests.oracle.engine import simulate_reference

HEAD = "schema_version: 1\nname: g\nworld_size: %d\nops:\n"
US = 1e-6


def _segments(tl) -> list[tuple[str, float, float, str]]:  # type: ignore[no-untyped-def]
    return [(s.kind, round(s.start_s / US, 6), round(s.end_s / US, 6), s.op) for s in critical_path_segments(tl)]


def _every_loop(monkeypatch: pytest.MonkeyPatch, text: str, profile: HardwareProfile,
                launch: str | None = None) -> list:  # type: ignore[type-arg]
    """Timelines of ``text`` from the ``waves`` model: the package's compiled loop on the Program's columns, and the
    oracle's Python loop on the op list."""
    prog = api.lower_spec(load_text(text, "t.yaml"))
    return [simulate(prog, profile, gpu_model="waves", launch=launch), simulate_reference(prog, profile, launch=launch)]


def test_a_rendezvous_is_released_by_the_last_rank_to_reach_it(monkeypatch, toy_profile) -> None:  # type: ignore[no-untyped-def]
    # all_reduce of 1e6 B over 2 ranks: 2 µs + 10 µs = 12 µs (test_sim_golden). Rank 1 reaches it at 0, rank 0
    # after 30 µs of work; both NCCL kernels take SMs at 30 µs, rank 1's last. The path runs through rank 0's work,
    # not through rank 1's early arrival and a 30 µs wait for its peer.
    text = HEAD % 2 + ("  - {name: work, kind: compute, duration_us: 30, ranks: [0]}\n"
                       "  - {name: ar, kind: all_reduce, bytes: 1000000, stream: compute}\n")
    for tl in _every_loop(monkeypatch, text, toy_profile):
        assert tl.critical_path == ["work@r0", "ar@r0"]
        assert _segments(tl) == [("compute", 0.0, 30.0, "work@r0"), ("comm", 30.0, 42.0, "ar@r0")]


def _host_profile() -> HardwareProfile:
    """The toy profile with a 10 µs kernel launch call (the kernel reaches the GPU at its return) and 2 µs per
    cross-stream event record + wait."""
    d = toy_profile_dict()
    d["launch"].update(eager_per_op_us=10.0, call_launch_fraction=1.0, event_wait_us=2.0)
    return HardwareProfile.model_validate(d)


def test_the_path_walks_back_through_the_host_calls_that_launched_it(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # One rank, three 1 µs kernels on one stream, each call 10 µs: the host returns at 10, 20, 30 µs and each kernel
    # runs [10, 11], [20, 21], [30, 31]. c waited for its host, which was issuing a, then b, then c: three host
    # segments of 10 µs, each named by the call it made, then c's run.
    text = HEAD % 1 + ("  - {name: a, kind: compute, duration_us: 1}\n"
                       "  - {name: b, kind: compute, duration_us: 1}\n"
                       "  - {name: c, kind: compute, duration_us: 1}\n")
    for tl in _every_loop(monkeypatch, text, _host_profile()):
        assert {s.id: (round(s.start_s / US, 6), round(s.end_s / US, 6)) for s in tl.spans} == {
            "a@r0": (10.0, 11.0), "b@r0": (20.0, 21.0), "c@r0": (30.0, 31.0)}
        assert tl.critical_path == ["c@r0"]
        assert _segments(tl) == [("host_issue", 0.0, 10.0, "a@r0"), ("host_issue", 10.0, 20.0, "b@r0"),
                                 ("host_issue", 20.0, 30.0, "c@r0"), ("compute", 30.0, 31.0, "c@r0")]
        m = Metrics.of(tl)
        assert critical_path_host(tl) == ["a@r0", "b@r0"]
        assert m.critical_path_s == pytest.approx({"compute": 1 * US, "host_issue": 30 * US})


def test_a_cuda_graph_replay_is_one_host_call(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # One graph launch (5 µs) issues every op: a (1 µs, s1) and b (10 µs, s2) start at 5 µs and share the GPU at
    # 1/2 each (the toy GPU gives no SM count: test_sim_golden), so a ends at 7 and b at 7 + 9 = 16 µs. b's wait
    # for the host is the launch, one segment named by b (not by a, which the launch issued at the same instant).
    d = toy_profile_dict()
    d["launch"].update(graph_launch_us=5.0)
    text = HEAD % 1 + (
        "  - {name: a, kind: compute, duration_us: 1, stream: s1}\n"
        "  - {name: b, kind: compute, duration_us: 10, stream: s2}\n")
    for tl in _every_loop(monkeypatch, text, HardwareProfile.model_validate(d), launch="cuda_graph"):
        assert tl.critical_path == ["b@r0"]
        assert _segments(tl) == [("host_issue", 0.0, 5.0, "b@r0"), ("compute", 5.0, 16.0, "b@r0")]
        assert critical_path_host(tl) == []


def test_a_dependency_on_another_stream_is_waited_on_the_gpu_not_the_host(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # a (50 µs) on s1, b on s2 after a: the host records and waits an event (2 µs) and
    # returns from b's call at 10 + 2 + 10 = 22 µs without waiting for a (rule host-issue: no host-blocking op). b
    # waits on the GPU until a ends at 60 µs: the path is a's host call, a, then b.
    text = HEAD % 1 + ("  - {name: a, kind: compute, duration_us: 50, stream: s1}\n"
                       "  - {name: b, kind: compute, duration_us: 1, stream: s2, deps: [a]}\n")
    for tl in _every_loop(monkeypatch, text, _host_profile()):
        assert tl.critical_path == ["a@r0", "b@r0"]
        assert _segments(tl) == [("host_issue", 0.0, 10.0, "a@r0"), ("compute", 10.0, 60.0, "a@r0"),
                                 ("compute", 60.0, 61.0, "b@r0")]
        assert tl.host_call_end_s.tolist() == pytest.approx([10 * US, 22 * US])


PP2 = """schema_version: 1
name: pp2
world_size: 2
pipeline:
  schedule: 1f1b
  p: 2
  m: 2
  p2p: batched
  stage:
    forward: [{kind: compute, duration_us: 30}]
    backward_input: [{kind: compute, duration_us: 30}]
    backward_weight: [{kind: compute, duration_us: 30}]
"""


def test_batched_p2p_with_batch_p2p_sync_walks_through_both_stages(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # 1F1B, p=2, m=2, batched p2p: every call 10 µs (kernel, batch), no event-wait cost, stages of 30 µs, a
    # zero-byte p2p 1 µs (the link's latency). Rank 0's host launches F0.0 at 10 µs; its send meets rank 1's recv
    # (posted at 10 µs, so rank 0 arrives last) at 40 µs. Rank 1 runs F, B (I, W) of mb 0; batch_p2p_sync posts its
    # next batch (send B of mb 0, recv F of mb 1) after that compute, at 131 µs: rank 1 arrives last, and so on.
    # Makespan 10 + 30 + 1 + 3·30 + 1 + 3·30 + 1 + 2·30 = 283 µs, every microsecond on the path.
    d = toy_profile_dict()
    d["launch"].update(eager_per_op_us=10.0, call_launch_fraction=1.0, event_wait_us=0.0, p2p_call_us=10.0,
                       batch_p2p_call_us=10.0)
    for tl in _every_loop(monkeypatch, PP2, HardwareProfile.model_validate(d)):
        assert _segments(tl) == [
            ("host_issue", 0.0, 10.0, "F0.0.0@r0"), ("compute", 10.0, 40.0, "F0.0.0@r0"),
            ("comm", 40.0, 41.0, "sendF0.0@r0"), ("compute", 41.0, 71.0, "F1.0.0@r1"),
            ("compute", 71.0, 101.0, "B1.0.I.0@r1"), ("compute", 101.0, 131.0, "B1.0.W.0@r1"),
            ("comm", 131.0, 132.0, "recvF1.1@r1"), ("compute", 132.0, 162.0, "F1.1.0@r1"),
            ("compute", 162.0, 192.0, "B1.1.I.0@r1"), ("compute", 192.0, 222.0, "B1.1.W.0@r1"),
            ("comm", 222.0, 223.0, "sendB1.1@r1"), ("compute", 223.0, 253.0, "B0.1.I.0@r0"),
            ("compute", 253.0, 283.0, "B0.1.W.0@r0")]
        assert critical_path_host(tl) == []


@pytest.fixture(scope="module")
def megatron() -> api.Run:
    return api.simulate_spec(api.load(ROOT / "schedules" / "megatron_gpt_pp4.yaml"), load_profile("h200"))


def test_megatron_pp4_path_runs_through_every_stage(megatron) -> None:  # type: ignore[no-untyped-def]
    tl, m = megatron.timeline, megatron.metrics
    segs = critical_path_segments(tl)
    ranks = {int(s.op.rsplit("@r", 1)[1]) for s in segs if s.kind != "host_issue"}
    assert ranks == {0, 1, 2, 3}  # the last backward ripples from stage 3 back to stage 0
    assert "wait_peer" not in m.critical_path_s  # each p2p and the tied all-reduce: through the last to arrive
    # the host segments are the calls of one rank's host, back to back from the start, each the call's own cost
    host = [s for s in segs if s.kind == "host_issue"]
    r = {s.op.rsplit("@r", 1)[1] for s in host}
    assert len(r) == 1 and host[0].start_s == 0.0
    assert [s.op for s in host[:-1]] == critical_path_host(tl) and host[-1].op == m.critical_path[0]
    h = tl.host_call_end_s
    row = {i: k for k, i in enumerate(tl.columns.id)}
    for s in host[:-1]:
        assert s.end_s == h[row[s.op]]
    # bound: at most the host's whole issue time on that rank (its calls, summed)
    assert m.critical_path_s["host_issue"] <= tl.meta["host_issue_s"][int(r.pop())]


def test_megatron_pp4_path_leaves_the_host_when_the_host_is_faster(megatron) -> None:  # type: ignore[no-untyped-def]
    # With the h200 launch costs the rank-3 host (562 calls, 41.8 ms, an 8-layer op's call 8 x 13.29 µs) is behind
    # its GPU at F3.15.fc1 and the strict path starts in it; with the kernel calls halved the host is ahead
    # throughout and the path is the pipeline's own: host time under 0.5 % of the makespan.
    p = load_profile("h200")
    lp = p.launch.model_copy(update={"eager_per_op_us": p.launch.eager_per_op_us / 2,
                                     "elementwise_call_us": p.launch.elementwise_call_s * 1e6 / 2})
    half = api.simulate_spec(api.load(ROOT / "schedules" / "megatron_gpt_pp4.yaml"),
                             p.model_copy(update={"launch": lp}))
    m = half.metrics
    assert m.critical_path_s.get("host_issue", 0.0) < 0.005 * m.makespan_s
    assert {int(x.rsplit("@r", 1)[1]) for x in m.critical_path} == {0, 1, 2, 3}
    assert m.critical_path[0].startswith("F0.0.")  # the first microbatch's forward on the first stage
    # with every kernel of the layer (issue 36: dropouts, bias adds, softmax passes, layout copies: about 40 %
    # more launches of a few µs each at seq 32, micro batch 1) the h200 host binds for a good part of the step:
    # halving its kernel calls shortens the makespan by 10-20 % (64.5 -> 55.0 ms)
    assert 0.80 * megatron.metrics.makespan_s < half.metrics.makespan_s < 0.90 * megatron.metrics.makespan_s


def test_the_critical_path_is_kept_as_rows() -> None:
    """The simulator gives the path as rows (:class:`PathIds`): its ids are those of the rows it keeps
    (``critical_path_order``), the metrics hold the same object (no id string made), timeline.json's text of it
    is the list's, a pickled copy holds the same path (as a list) and rows, and replacing the spans drops the rows but
    not the ids."""
    import pickle

    from schedsim.io import dumps_json
    from schedsim.sim.metrics import Metrics
    from schedsim.sim.path_ids import PathIds

    text = (ROOT / "schedules" / "megatron_gpt_pp4.yaml").read_text()
    prog = api.lower_spec(load_text(text, "pp4.yaml"))
    tl = simulate(prog, load_profile("h200x2"))
    cp = tl.critical_path
    assert isinstance(cp, PathIds)
    rows = tl.critical_path_order()
    assert rows is not None and len(rows) == len(cp) > 10
    ids = tl.columns.id
    want = [ids[i] for i in rows.tolist()]
    assert list(cp) == want and cp == want and want == cp and cp[3] == want[3] and cp[-2:] == want[-2:]
    assert cp.rank_list() == [int(x.rsplit("@r", 1)[1]) for x in want]
    assert b"".join(cp.json_pieces()) == dumps_json(want)
    m = Metrics.of(tl)
    assert m.critical_path is cp and m.to_dict()["critical_path"] == want
    assert m.to_dict(ranks_as_columns=True)["critical_path"] is cp
    assert Metrics.from_dict(m.to_dict()) == m
    fresh = simulate(prog, load_profile("h200x2"))
    copy = pickle.loads(pickle.dumps(fresh))
    assert type(copy.critical_path) is list and copy.critical_path == tl.critical_path
    kept = copy.critical_path_order()  # the rows pickled with it: the same spans, the path equal
    assert kept is not None and kept.tolist() == rows.tolist()
    again = simulate(prog, load_profile("h200x2"))
    again.spans = list(again.spans)
    assert again.critical_path == tl.critical_path and again.critical_path_order() is None
