"""Shared links (schedsim.network.share): flows across nodes share a NIC or a leaf uplink max-min fair.

Times are worked out by hand in the comments. A send/recv across nodes on a Hopper topology takes, alone,
22.4 us (NCCL's Simple p2p step across nodes: ring baseLat 8.4 + net hwLat 14.0) + bytes / its NIC's 50 GB/s
(400 Gb/s / 8): T(S) = 22.4 + S / 50,000 us for S bytes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.hardware.profile import HardwareProfile
from schedsim.network import share
from schedsim.network.share import LinkMap, LinkShare, link_share, maxmin, maxmin_small

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "schedsim/hardware/profiles/dgx_a100.yaml").read_text())
MiB = 1 << 20


def profile(gpus: int, nics: int, fabric: dict[str, Any] | None = None) -> HardwareProfile:
    """dgx_a100's compute on Hopper nodes of ``gpus`` GPUs and ``nics`` 400 Gb/s NICs (GPU i on NIC
    i * nics // gpus)."""
    d = copy.deepcopy(BASE)
    d["name"] = "test"
    d["topology"] = {"gpus_per_node": gpus, "arch": "hopper", "cpu_vendor": "intel",
                     "scale_up": {"kind": "nvswitch", "bandwidth_GBps": 370.8, "nvls": True, "source": "test"},
                     "nics": {"per_node": nics, "bandwidth_Gbps": 400, "source": "test"}}
    if fabric:
        d["topology"]["fabric"] = {"source": "test", **fabric}
    return HardwareProfile.model_validate(d)


def T(nbytes: float, GBps: float = 50.0) -> float:
    """Solo time (us) of a Simple send/recv across nodes at ``GBps``."""
    return 22.4 + nbytes / (GBps * 1000)


def schedule(world: int, sends: list[tuple[int, int, int]]) -> str:
    """One send/recv per (src, dst, bytes), each pair on its own ranks, all issued at once."""
    rows = "".join(f"  - {{name: s{i}, kind: send, ranks: [{a}], peer: {b}, bytes: {n}, stream: a}}\n"
                   f"  - {{name: r{i}, kind: recv, ranks: [{b}], peer: {a}, bytes: {n}, stream: a}}\n"
                   for i, (a, b, n) in enumerate(sends))
    return f"schema_version: 1\nname: share\nworld_size: {world}\nlaunch: cuda_graph\nops:\n{rows}"


def spans(text: str, prof: HardwareProfile) -> dict[str, float]:
    """Each op's span (us), from its start to its end."""
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(text, "share.yaml"), prof)
    return {s.id: (s.end_s - s.start_s) * 1e6 for s in run.timeline.spans}


TWO = schedule(4, [(0, 2, 32 * MiB), (1, 3, 64 * MiB)])


def test_two_flows_sharing_a_nic_each_get_half_until_the_first_ends():
    # 2 GPUs per node on ONE NIC: rank 0 sends 32 MiB to rank 2, rank 1 sends 64 MiB to rank 3, both through node
    # 0's NIC out and node 1's NIC in. Both drive a NIC at 50 GB/s alone, so each gets 25 GB/s: half its speed.
    # T1 = T(32 MiB) = 22.4 + 671.08864 = 693.48864 us, T2 = T(64 MiB) = 22.4 + 1342.17728 = 1364.57728 us.
    # The first ends at 2 x T1 = 1386.97728 us; the second has done T1 of its T2 by then and runs the rest alone:
    # T1 + T2 = 2058.06592 us.
    got = spans(TWO, profile(2, 1))
    assert got["s0@r0"] == pytest.approx(1386.97728, rel=1e-9) == pytest.approx(2 * T(32 * MiB), rel=1e-12)
    assert got["r0@r2"] == pytest.approx(1386.97728, rel=1e-9)
    assert got["s1@r1"] == pytest.approx(2058.06592, rel=1e-9) == pytest.approx(T(32 * MiB) + T(64 * MiB), rel=1e-12)


def test_flows_that_share_nothing_keep_their_solo_times():
    # the same sends with a NIC per GPU (rail-optimised): nothing shared, each its solo time
    got = spans(TWO, profile(2, 2))
    assert got["s0@r0"] == pytest.approx(693.48864, rel=1e-9)
    assert got["s1@r1"] == pytest.approx(1364.57728, rel=1e-9)
    # and a send inside node 0 beside a send across nodes on the shared NIC: NVLink and NIC are different links
    got = spans(schedule(4, [(0, 1, 64 * MiB), (1, 3, 64 * MiB)]), profile(2, 1))
    assert got["s1@r1"] == pytest.approx(1364.57728, rel=1e-9)


THREE = schedule(12, [(0, 3, 64 * MiB), (1, 6, 64 * MiB), (2, 9, 8 * MiB)])


def test_three_flows_with_unequal_demands_share_max_min():
    # 3 GPUs per node on one NIC; leaves of 3 nodes, oversubscription 4: nodes 0-2 on leaf 0, node 3 on leaf 1.
    # Ranks 0, 1, 2 (node 0) send to ranks 3 (node 1), 6 (node 2) and 9 (node 3, across the spine), all through
    # node 0's NIC out (50 GB/s). Demands: 50, 50 and 50 / 4 = 12.5 GB/s (across the spine a send gets
    # 1/oversubscription of the NIC; leaf 0's uplink, 3 nodes x 1 NIC x 50 / 4 = 37.5 GB/s, carries only it).
    # Max-min: an equal split would give 16.67 each, more than the third wants: it gets its 12.5 (its solo
    # speed); the other two split the remaining 37.5: 18.75 GB/s each, 18.75 / 50 = 0.375 of their speed.
    # Third: T(8 MiB, 12.5 GB/s) = 22.4 + 8388608 / 12,500 = 693.48864 us, unchanged.
    # The others have done 0.375 x 693.48864 = 260.05824 us of their T(64 MiB) = 1364.57728 by then; the
    # remaining 1104.51904 us run at 1/2 (two flows on 50 GB/s): 2209.03808 us, ending at 2902.52672 us.
    # (An equal split, 1/3 each, would end the third at 3 x 693.49 and the others later still.)
    got = spans(THREE, profile(3, 1, {"kind": "leaf_spine", "nodes_per_leaf": 3, "oversubscription": 4.0}))
    assert got["s2@r2"] == pytest.approx(693.48864, rel=1e-9) == pytest.approx(T(8 * MiB, 12.5), rel=1e-12)
    assert got["s0@r0"] == pytest.approx(2902.52672, rel=1e-9)
    assert got["s1@r1"] == pytest.approx(2902.52672, rel=1e-9)
    assert got["r2@r9"] == pytest.approx(693.48864, rel=1e-9)


def test_an_oversubscribed_leaf_uplink_is_shared_when_the_nic_is_not_full():
    # 2 GPUs per node on one NIC, one node per leaf, oversubscription 2: a send across the spine drives its NIC at
    # 50 / 2 = 25 GB/s, and leaf 0's uplink carries 1 node x 1 NIC x 50 / 2 = 25 GB/s. Ranks 0 and 1 (node 0)
    # send 32 and 64 MiB to ranks 2 and 3 (node 1, leaf 1): their NIC out (50) holds both (25 + 25), the uplink
    # (25) does not: 12.5 GB/s each, half their speed. Alone: T1 = 22.4 + 33554432 / 25,000 = 1364.57728 us,
    # T2 = 22.4 + 67108864 / 25,000 = 2706.75456 us; the first ends at 2 x T1 = 2729.15456 us, the second at
    # T1 + T2 = 4071.33184 us.
    got = spans(TWO, profile(2, 1, {"kind": "leaf_spine", "nodes_per_leaf": 1, "oversubscription": 2.0}))
    assert got["s0@r0"] == pytest.approx(2729.15456, rel=1e-9) == pytest.approx(2 * T(32 * MiB, 25.0), rel=1e-12)
    assert got["s1@r1"] == pytest.approx(4071.33184, rel=1e-9)


MIXED = schedule(4, [(0, 2, 64 * MiB), (1, 3, 16 * MiB)]).replace(
    "ops:\n", "ops:\n  - {name: ar, kind: all_reduce, bytes: 67108864, stream: c}\n")


@pytest.mark.parametrize("text,prof", [
    (TWO, profile(2, 1)),
    (THREE, profile(3, 1, {"kind": "leaf_spine", "nodes_per_leaf": 3, "oversubscription": 4.0})),
    (MIXED, profile(2, 1)),  # an all_reduce across both nodes beside two sends, all on one NIC per node
])
def test_shared_links_columns_compiled_and_python_loops_agree(monkeypatch: pytest.MonkeyPatch, text: str,
                                                              prof: HardwareProfile):
    from schedsim.graph.build import graph_of
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    prog = lower(load_text(text, "share.yaml"))

    def run(g: Any) -> list[tuple[str, float, float]]:
        return sorted((s.id, s.start_s, s.end_s) for s in simulate(g, prof, gpu_model="waves").spans)

    py = sorted((s.id, s.start_s, s.end_s) for s in simulate_reference(graph_of(prog), prof).spans)
    assert run(prog) == py


def test_maxmin_progressive_filling_by_hand():
    # one 50-unit link, demands 10, 30, 60: 10 is met, 30 and 60 split the other 40
    assert maxmin(np.array([10., 30., 60.]), np.array([50.]), np.arange(3), np.zeros(3, int),
                  np.ones(3)).tolist() == [10.0, 20.0, 20.0]
    # two links of 10 and 100; flow 0 on both, flows 1 and 2 on the big one only, all demanding 100: the small link
    # holds flow 0 at 10; flows 1 and 2 split the big link's other 90: 45 each
    got = maxmin(np.full(3, 100.), np.array([10., 100.]), np.array([0, 0, 1, 2]), np.array([0, 1, 1, 1]),
                 np.ones(4))
    assert got.tolist() == [10.0, 45.0, 45.0]
    # weights: flow 0 crosses the link twice (2 of its NICs under one leaf): 2 x r0 + r1 <= 30 -> r = 10 each
    assert maxmin(np.full(2, 100.), np.array([30.]), np.array([0, 1]), np.zeros(2, int),
                  np.array([2., 1.])).tolist() == [10.0, 10.0]


def test_link_share_events_change_only_the_flows_on_a_shared_link():
    # links 0 (cap 50) and 1 (cap 50); flow 0 on link 0, flow 1 on both, flow 2 on link 1; demands 50 each
    lm = LinkMap(np.array([0, 1, 3, 4]), np.array([0, 0, 1, 1]), np.ones(4), np.full(3, 50.), np.full(2, 50.),
                 1, 2, np.zeros(3))
    ls = LinkShare(lm)
    assert ls.event(0, 1) == [] and ls.share.tolist() == [1.0, 1.0, 1.0]
    assert sorted(ls.event(1, 1)) == [0, 1] and ls.share.tolist() == [0.5, 0.5, 1.0]
    assert sorted(ls.event(2, 1)) == [2] and ls.share.tolist() == [0.5, 0.5, 0.5]
    assert sorted(ls.event(0, 0)) == [] and ls.share.tolist() == [1.0, 0.5, 0.5]  # link 1 still holds 1 and 2
    assert sorted(ls.event(2, 0)) == [1] and ls.share[1] == 1.0


def test_loop_args_leave_a_flow_that_crosses_a_link_twice_to_python():
    # flow 0 on links 0 and 1, flow 1 on link 1 twice (two of its NICs' traffic on one uplink): the compiled loop
    # counts a flow once per link, so a repeat anywhere gives the three-item form (every event through Python)
    twice = LinkMap(np.array([0, 2, 4]), np.array([0, 1, 1, 1]), np.ones(4), np.full(2, 50.), np.full(2, 50.),
                    1, 2, np.zeros(2))
    assert len(LinkShare(twice).loop_args()) == 3
    once = LinkMap(np.array([0, 2, 3]), np.array([1, 0, 1]), np.ones(3), np.full(2, 50.), np.full(2, 50.),
                   1, 2, np.zeros(2))  # links not in order within a flow: still no repeat
    args = LinkShare(once).loop_args()
    assert len(args) == 7 and args[3].tolist() == [0, 2, 3] and args[4].tolist() == [1, 0, 1]


def test_link_share_is_none_when_every_rank_sits_on_one_node():
    # 4 ranks on 8-GPU nodes: a send/recv pair and an all_reduce stay inside node 0; placed on GPUs 8-11 they
    # stay inside node 1; on GPUs 6-9 the pair (rank 0 -> rank 3) crosses from node 0 to node 1
    prof = profile(8, 1)
    args = ([0, 4, 6], [0, 1, 2, 3, 0, 3], ["all_reduce", "send"], [MiB, MiB], [1e-3, 1e-3])
    assert link_share(prof, 4, *args) is None
    d = prof.model_dump()
    d["topology"]["placement"] = [8, 9, 10, 11]
    assert link_share(HardwareProfile.model_validate(d), 4, *args) is None
    d["topology"]["placement"] = [6, 7, 8, 9]
    ls = link_share(HardwareProfile.model_validate(d), 4, *args)
    assert ls is not None
    assert sorted(ls.map.name(int(i)) for i in ls.links_of(1)) == ["node 0 NIC 0 out", "node 1 NIC 0 in"]


def test_profiles_without_nics_have_no_shared_links():
    from schedsim.hardware.profile import load_profile

    assert link_share(load_profile("pcie2"), 2, [0, 2], [0, 1], ["send"], [1.0], [1.0]) is None
    ls = link_share(profile(2, 1), 4, [0, 2, 4], [0, 2, 0, 1], ["send", "send"], [MiB, MiB], [1e-3, 1e-3])
    assert ls is not None and ls.flag.tolist() == [1, 0]  # across nodes a flow; inside node 0 none
    assert link_share(profile(2, 1), 4, [0, 2], [0, 1], ["send"], [MiB], [1e-3]) is None  # nothing crosses a node
    assert [ls.map.name(int(i)) for i in ls.links_of(0)] == ["node 0 NIC 0 out", "node 1 NIC 0 in"]


# ---- views: link counters in trace.json, the link lane in the Gantt -------------------------------------------

OVERSUB = {"kind": "leaf_spine", "nodes_per_leaf": 3, "oversubscription": 4.0}


def test_trace_link_counters_integrate_to_the_bytes_moved(tmp_path: Path):
    import json

    from schedsim.api import predict_to_dir
    from schedsim.report.trace_check import check_trace

    sched = tmp_path / "three.yaml"
    sched.write_text(THREE)
    tl, _m, _paths = predict_to_dir(sched, None, profile(3, 1, OVERSUB), tmp_path / "o", None, gantt=False, trace=True)
    trace = json.loads((tmp_path / "o" / "trace.json").read_text())
    check_trace(trace, require_counters=True)
    ev = trace["traceEvents"]
    (pid,) = [e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"
              and e["args"]["name"] == "network links"]
    tracks: dict[str, list[tuple[float, float]]] = {}
    for e in ev:
        if e["ph"] == "C" and e["pid"] == pid:
            tracks.setdefault(e["name"], []).append((e["ts"], e["args"]["GB_per_s"]))
    # bytes over each link: node 0's NIC out carries all three sends (64 + 64 + 8 MiB); each receiver's NIC in
    # its own; leaf 0's uplink and leaf 1's downlink the 8 MiB that crosses the spine
    want = {"node 0 NIC 0 out (GB/s, of 50)": 136 * MiB, "node 1 NIC 0 in (GB/s, of 50)": 64 * MiB,
            "node 2 NIC 0 in (GB/s, of 50)": 64 * MiB, "node 3 NIC 0 in (GB/s, of 50)": 8 * MiB,
            "leaf 0 up (GB/s, of 37.5)": 8 * MiB, "leaf 1 down (GB/s, of 37.5)": 8 * MiB}
    assert set(tracks) == set(want)
    for name, steps in tracks.items():
        steps.sort()
        # GB/s x us = 1e3 bytes; the counter holds each value until the next sample and ends at 0
        moved = sum((b[0] - a[0]) * a[1] * 1e3 for a, b in zip(steps, steps[1:], strict=False))
        assert steps[-1][1] == 0.0 and moved == pytest.approx(want[name], rel=1e-6), name
        assert max(v for _t, v in steps) <= (37.5 if name.startswith("leaf") else 50.0) * (1 + 1e-9)
    assert tl.meta["links"]["of"] == 6


def test_no_link_counters_without_traffic_across_nodes():
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(schedule(4, [(0, 1, MiB)]), "s.yaml"), profile(2, 1))
    assert "links" not in run.timeline.meta


def test_gantt_draws_the_busiest_links_lane():
    from schedsim.api import simulate_spec
    from schedsim.report.gantt import LINK_LANE_GID, draw_gantt
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(THREE, "s.yaml"), profile(3, 1, OVERSUB))
    fig = draw_gantt([("predicted", run.timeline)])
    ax = fig.axes[0]
    lane = [c for c in ax.collections if c.get_gid() == LINK_LANE_GID]
    assert len(lane) == 1
    assert ax.get_yticklabels()[-1].get_text() == "node 0 NIC 0 out use"
    # the lane's filled height follows the link's use: 0.6 of a row at full capacity, drawn from the lane's foot
    ys = lane[0].get_paths()[0].vertices[:, 1]
    foot = len(ax.get_yticklabels()) - 1 + 0.3
    assert ys.max() == pytest.approx(foot) and foot - ys.min() <= 0.6 + 1e-9


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_maxmin_is_feasible_and_every_flow_has_a_bottleneck(data: st.DataObject):
    # max-min fairness (Bertsekas & Gallager, §6.5.2): the rates fit every link, none exceeds its demand, and each
    # flow below its demand crosses a full link on which no flow gets more than it
    F = data.draw(st.integers(1, 6))
    L = data.draw(st.integers(1, 4))
    cap = np.array(data.draw(st.lists(st.floats(1.0, 100.0), min_size=L, max_size=L)))
    demand = np.array(data.draw(st.lists(st.floats(0.5, 120.0), min_size=F, max_size=F)))
    flow, link, weight = [], [], []
    for f in range(F):
        for k in sorted(data.draw(st.sets(st.integers(0, L - 1), min_size=1, max_size=L))):
            flow.append(f)
            link.append(k)
            weight.append(float(data.draw(st.integers(1, 3))))
    fl, lk, w = np.array(flow), np.array(link), np.array(weight)
    rate = maxmin(demand, cap, fl, lk, w)
    load = np.bincount(lk, weights=w * rate[fl], minlength=L)
    tol = 1e-9 * cap.max()
    assert (load <= cap + tol).all() and (rate <= demand * (1 + 1e-12)).all() and (rate > 0).all()
    for f in range(F):
        if rate[f] >= demand[f] * (1 - 1e-12):
            continue
        mine = lk[fl == f]
        assert any(load[k] >= cap[k] - tol and rate[fl[lk == k]].max() <= rate[f] * (1 + 1e-9) for k in mine), f


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_maxmin_small_is_maxmin_bit_for_bit(data: st.DataObject):
    # the scalar form the events refill with: the same rates to the last bit, weights and capacities alike or not,
    # demands above every link (frozen by a full link) or below (frozen at the demand), ties between the two
    F = data.draw(st.integers(1, 6))
    L = data.draw(st.integers(1, 6))
    same = data.draw(st.booleans())
    cap = np.array(data.draw(st.lists(st.floats(1.0, 100.0), min_size=L, max_size=L)))
    if same:
        cap[:] = cap[0]
    demand = np.array(data.draw(st.lists(st.sampled_from([10.0, 1e9]) | st.floats(0.5, 120.0), min_size=F,
                                         max_size=F)))
    flow, link, weight = [], [], []
    for f in range(F):
        for k in data.draw(st.permutations(range(L)))[:data.draw(st.integers(1, L))]:
            flow.append(f)
            link.append(k)
            weight.append(data.draw(st.sampled_from([1.0, 0.5, 2.0]) | st.floats(0.1, 3.0)))
    want = maxmin(demand, cap, np.array(flow), np.array(link), np.array(weight))
    got = maxmin_small(demand.tolist(), {k: float(cap[k]) for k in link}, list(zip(flow, link, weight, strict=True)))
    assert np.array(got).tobytes() == want.tobytes()


def test_maxmin_small_by_hand():
    # three flows on one 50-unit link, demands 10, 30 and 60: 10 is met; the other two split 40 (maxmin's example)
    assert maxmin_small([10.0, 30.0, 60.0], {4: 50.0}, [(0, 4, 1.0), (1, 4, 1.0), (2, 4, 1.0)]) == [10.0, 20.0, 20.0]


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_link_share_events_match_a_refill_of_every_running_flow(data: st.DataObject):
    # after any sequence of starts and ends, each running flow's share equals a max-min refill of all running flows
    # from scratch (the event refills only the flows connected to the one that changed); an event's refill over
    # scalars (maxmin_small, up to SMALL_REFILL link entries) gives the shares of one over numpy (maxmin), bit for bit
    G = data.draw(st.integers(1, 6))
    L = data.draw(st.integers(1, 4))
    links = [sorted(data.draw(st.sets(st.integers(0, L - 1), min_size=1, max_size=L))) for _ in range(G)]
    ptr = np.concatenate([[0], np.cumsum([len(x) for x in links])])
    demand = np.array(data.draw(st.lists(st.floats(1.0, 100.0), min_size=G, max_size=G)))
    cap = np.array(data.draw(st.lists(st.floats(1.0, 100.0), min_size=L, max_size=L)))
    demand = np.minimum(demand, [cap[x].min() for x in links])  # LinkMap's demands fit their links (link_share)
    lm = LinkMap(ptr, np.concatenate(links).astype(np.int64), np.ones(int(ptr[-1])), demand, cap, 1, 2 * L,
                 np.zeros(G))
    ls, ref = LinkShare(lm), LinkShare(lm)  # ref: every event by the general refill (no alone-flow shortcut)
    big = LinkShare(lm)  # every refill over numpy
    running: list[int] = []
    for _ in range(data.draw(st.integers(1, 12))):
        idle = [g for g in range(G) if g not in running]
        started = int(bool(idle) and (not running or data.draw(st.booleans())))
        g = data.draw(st.sampled_from(idle if started else running))
        assert ls.event(g, started) == ref._event(g, started)
        assert ls.share.tolist() == ref.share.tolist() and ls.on == ref.on
        small, share.SMALL_REFILL = share.SMALL_REFILL, -1
        try:
            big._event(g, started)
        finally:
            share.SMALL_REFILL = small
        assert big.share.tobytes() == ref.share.tobytes()
        assert ls.count.tolist() == ref.count.tolist() and ls.first.tolist() == ref.first.tolist()
        if started:
            running.append(g)
        else:
            running.remove(g)
        run = sorted(running)
        if not run:
            continue
        fl = np.concatenate([np.full(len(links[g]), i) for i, g in enumerate(run)])
        lk = np.concatenate([links[g] for g in run])
        rate = maxmin(demand[run], cap, fl, lk, np.ones(len(lk)))
        want = np.where(rate >= demand[run], 1.0, rate / demand[run])
        assert ls.share[run] == pytest.approx(want, rel=1e-12)


def test_link_counters_beside_a_collective_never_exceed_the_capacity():
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    # a 64 MiB all_reduce over both nodes beside a 64 MiB send 0 -> 2, one NIC per node: in the simulation the two
    # split node 0's NIC out max-min (50 GB/s in all) until the send ends, then the all_reduce runs alone. The
    # counters replay the shares with each group's solo time (the timeline's solo_s): replayed with 1 s each, the
    # all_reduce wanted its bytes per second, got share 1 and its bytes spread evenly over its span, and the NIC
    # out showed 53.96 GB/s of 50
    text = MIXED.replace("  - {name: s1, kind: send, ranks: [1], peer: 3, bytes: 16777216, stream: a}\n"
                         "  - {name: r1, kind: recv, ranks: [3], peer: 1, bytes: 16777216, stream: a}\n", "")
    run = simulate_spec(load_text(text, "s.yaml"), profile(2, 1))
    out = {x["name"]: x for x in run.timeline.meta["links"]["links"]}["node 0 NIC 0 out"]
    assert out["bytes"] == pytest.approx((1.5 * 64 + 64) * MiB, rel=1e-9)  # ring: bus factor 2 x 3 / 4, + the send
    assert max(v for _t, v in out["steps"]) <= out["capacity_Bps"] * (1 + 1e-9)


def test_link_counters_follow_a_gpu_model_that_shares_no_links():
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    # the replay model runs the two sends of TWO at their solo speeds (693.48864 and 1364.57728 us, beside each
    # other on node 0's NIC: it models no congestion between ranks' links); the counters must show what it ran,
    # each send's bytes evenly over its span: 32 MiB / 693.48864 us + 64 MiB / 1364.57728 us = 48.39 + 49.18 GB/s
    # while both run, not the waves model's halves replayed onto the shorter spans (81.35 GB/s on a 50 GB/s NIC)
    run = simulate_spec(load_text(TWO, "s.yaml"), profile(2, 1), gpu_model="replay")
    got = {s.id: (s.end_s - s.start_s) * 1e6 for s in run.timeline.spans}
    assert got["s0@r0"] == pytest.approx(693.48864, rel=1e-9) and got["s1@r1"] == pytest.approx(1364.57728, rel=1e-9)
    out = {x["name"]: x for x in run.timeline.meta["links"]["links"]}["node 0 NIC 0 out"]
    levels = [v for _t, v in out["steps"]]
    assert levels[0] == pytest.approx(32 * MiB / 693.48864e-6 + 64 * MiB / 1364.57728e-6, rel=1e-9)
    assert levels[1] == pytest.approx(64 * MiB / 1364.57728e-6, rel=1e-9) and levels[-1] == 0.0


def test_leaf_uplinks_are_per_rail():
    # 2 GPUs per node on 2 NICs (rail-optimised: GPU k on NIC k, NIC k of every node on rail k's leaves), one
    # node per leaf, oversubscription 2: rail k's leaf uplink carries 1 node x 50 / 2 = 25 GB/s. Rank 0 (NIC 0)
    # sends 32 MiB to rank 2 (node 1) and to rank 4 (node 2) at once on two streams: both cross the spine on
    # rail 0's uplink, each wanting 25 GB/s: 12.5 each, half speed, both ending at 2 x T(32 MiB, 25 GB/s) =
    # 2 x 1364.57728 us. (One uplink pooled over both rails, 50 GB/s, ran both at their solo 1364.58 us while
    # rail 1's uplink carried nothing.) Ranks 0 and 1 sending on rails 0 and 1 share no link: solo times.
    prof = profile(2, 2, {"kind": "leaf_spine", "nodes_per_leaf": 1, "oversubscription": 2.0})
    rows = [("s0", 0, 2, "a"), ("s1", 0, 4, "b")]
    text = "schema_version: 1\nname: rails\nworld_size: 6\nlaunch: cuda_graph\nops:\n" + "".join(
        f"  - {{name: {n}, kind: send, ranks: [{a}], peer: {b}, bytes: {32 * MiB}, stream: {st}}}\n"
        f"  - {{name: r{n}, kind: recv, ranks: [{b}], peer: {a}, bytes: {32 * MiB}, stream: a}}\n"
        for n, a, b, st in rows)
    got = spans(text, prof)
    assert got["s0@r0"] == got["s1@r0"] == pytest.approx(2 * T(32 * MiB, 25.0), rel=1e-12)
    got = spans(schedule(6, [(0, 2, 32 * MiB), (1, 5, 32 * MiB)]), prof)
    assert got["s0@r0"] == got["s1@r1"] == pytest.approx(T(32 * MiB, 25.0), rel=1e-12)
    ls = link_share(prof, 6, [0, 2], [1, 5], ["send"], [MiB], [1e-3])
    assert ls is not None and [ls.map.name(int(i)) for i in ls.links_of(0)] == [
        "node 0 NIC 1 out", "node 2 NIC 1 in", "leaf 0 rail 1 up", "leaf 2 rail 1 down"]


def test_a_collective_loads_each_nic_with_its_own_nodes_bytes():
    # a 48 MiB all_reduce over ranks 0, 1 (node 0, NICs 0 and 1) and 2 (node 1, NIC 0), rail-optimised: its ring
    # sends 2 x 2/3 x 48 = 64 MiB out of each node, over node 0's two NICs (32 MiB each) and node 1's one (64 MiB).
    # (Every NIC was charged the most loaded one's 64 MiB: node 0 showed 128 MiB out.)
    ar = f"  - {{name: ar, kind: all_reduce, bytes: {48 * MiB}, ranks: [0, 1, 2], group: [0, 1, 2], stream: c}}\n"
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(schedule(4, []).replace("ops:\n", "ops:\n" + ar), "s.yaml"), profile(2, 2))
    moved = {x["name"]: x["bytes"] / MiB for x in run.timeline.meta["links"]["links"]}
    assert moved == {"node 0 NIC 0 out": 32, "node 0 NIC 0 in": 32, "node 0 NIC 1 out": 32, "node 0 NIC 1 in": 32,
                     "node 1 NIC 0 out": 64, "node 1 NIC 0 in": 64}
    # beside it a 64 MiB send 1 -> 3 on node 0's NIC 1 out (50 GB/s), which the all_reduce loads at half its rate r
    # (its unit, r, on node 1's NIC): both want more than their part, so they rise together to 0.5 r + r = 50,
    # r = 100/3 GB/s. The all_reduce ends at 64 MiB / r = 2013.26592 us; the send, at 2/3 of its 50 GB/s until
    # then, has done 1342.17728 us of its T(64 MiB) = 1364.57728 and ends 22.4 us later, at 2035.66592 us.
    got = spans(schedule(4, [(1, 3, 64 * MiB)]).replace("ops:\n", "ops:\n" + ar), profile(2, 2))
    assert got["ar@r0"] == pytest.approx(64 * MiB / (100 / 3 * 1e3), rel=1e-9) == pytest.approx(2013.26592)
    assert got["s0@r1"] == pytest.approx(2035.66592, rel=1e-9)


def test_only_groups_across_nodes_ask_for_their_nccl_algorithm(monkeypatch: pytest.MonkeyPatch):
    # all_reduces inside node 0 (ranks 0, 1) and node 1 (2, 3), two alike across (1, 2), an empty group and a
    # one-rank group: only the groups across nodes have links, and only they ask NCCL's model for their algorithm,
    # once for both (each ask places the group: 125,000 all_reduces inside one node took 1.4 s)
    from schedsim.network import share

    asked: list[list[int]] = []
    algo = share._algo
    monkeypatch.setattr(share, "_algo", lambda net, kind, size, rk: asked.append(rk.tolist()) or algo(net, kind, size,
                                                                                                      rk))
    kinds = ["all_reduce"] * 6
    ls = link_share(profile(2, 1), 4, [0, 2, 4, 4, 6, 7, 9], [0, 1, 2, 3, 1, 2, 3, 1, 2], kinds, [MiB] * 6,
                    [1e-3] * 6)
    assert asked == [[1, 2]]
    assert ls is not None and ls.flag.tolist() == [0, 0, 0, 1, 0, 1]
    assert ls.links_of(5).tolist() == ls.links_of(3).tolist()
    assert sorted(ls.map.name(int(i)) for i in ls.links_of(3)) == [
        "node 0 NIC 0 in", "node 0 NIC 0 out", "node 1 NIC 0 in", "node 1 NIC 0 out"]


def test_the_compiled_loop_calls_back_only_for_flows_that_share_a_link(monkeypatch: pytest.MonkeyPatch):
    # TWO's sends on one NIC a node, then a third send alone after them (rank 1 to rank 3 again, 8 MiB). The loop
    # puts a flow alone on all its links on them and takes it off itself: of the six flow starts and ends, Python's
    # LinkShare.event sees only the second send's start (it shares the NIC with the first) and the first's end
    # (the second still on it; the second then runs alone at share 1, so its end is the loop's). The times are
    # those of every event through Python (loop_args' three-item form) and those worked out above.
    from schedsim.network import share

    text = TWO + ("  - {name: s2, kind: send, ranks: [1], peer: 3, bytes: 8388608, stream: a, deps: [s1]}\n"
                  "  - {name: r2, kind: recv, ranks: [3], peer: 1, bytes: 8388608, stream: a, deps: [r1]}\n")
    seen: list[int] = []
    loop_args = share.LinkShare.loop_args

    def counted(self: LinkShare, short: bool = False) -> tuple[object, ...]:  # the loop's calls, not the views'
        args = loop_args(self)[:3] if short else loop_args(self)

        def event(g: int, started: int) -> list[int]:
            seen.append(started)
            return self.event(g, started)

        return (event, *args[1:])

    monkeypatch.setattr(share.LinkShare, "loop_args", counted)
    got = spans(text, profile(2, 1))
    assert sorted(seen) == [0, 1]
    assert got["s1@r1"] == pytest.approx(2058.06592, rel=1e-9) and got["s2@r1"] == pytest.approx(T(8 * MiB), rel=1e-9)
    seen.clear()
    monkeypatch.setattr(share.LinkShare, "loop_args", lambda self: counted(self, True))
    assert spans(text, profile(2, 1)) == got and len(seen) == 6


def test_program_share_hands_whole_groups_of_a_symmetric_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    """``program_share`` of a representative-rank lowering (32 GPUs on dgx_h100: 4 nodes, dp and pp across
    them): each collective's rendezvous group becomes its template's whole group, each (send, recv) pair its
    two ranks, in the groups' order; the CSR equal to one built op by op from the templates."""
    import schedsim.network.share as share
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.lower.program import rendezvous_groups
    from schedsim.spec.loader import load_text
    from tests.spec.test_training_block import TINY

    text = TINY.replace("world_size: 8\n", "world_size: 32\n").replace("global_batch_size: 8",
                                                                        "global_batch_size: 32")
    prog = lower(load_text(text), symmetric=True)
    assert prog.represented
    gptr, gidx, G, _c, _lone = rendezvous_groups(prog)
    got: list[tuple[Any, ...]] = []
    monkeypatch.setattr(share, "link_share", lambda *a: got.append(a))
    share.program_share(load_profile("dgx_h100"), prog, gptr, gidx, np.ones(G))
    (_p, world, ptr, ranks, kinds, _size, _work, _net), = got
    want_ranks: list[int] = []
    want_ptr = [0]
    for g in range(G):
        members = gidx[gptr[g]:gptr[g + 1]].tolist()
        t = prog.templates[int(prog.tmpl[members[0]])]
        rs = [int(prog.rank[i]) for i in members] if t.kind in ("send", "recv") else list(t.group)
        want_ranks += rs
        want_ptr.append(want_ptr[-1] + len(rs))
        assert kinds[g] == t.kind
    assert world == 32 and "all_reduce" in kinds and "send" in kinds  # collectives and pairs both
    assert ranks.tolist() == want_ranks and ptr.tolist() == want_ptr and ptr.dtype == np.int64


CHUNKS = """\
schema_version: 1
name: chunks
world_size: 8
params: {chunks: 40}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - {name: "mm{i}", kind: matmul, m: 2048, n: 2048, k: 2048, dtype: bf16, stream: compute}
      - {name: "ar{i}", kind: all_reduce, bytes: 8*2**20, stream: comm, deps: ["mm{i}"]}
      - {name: "ag{i}", kind: all_gather, bytes: 2**20, stream: comm2, deps: ["mm{i}"]}
"""


@pytest.mark.parametrize("case", ["mixed", "replay", "chunks", "three", "serial"])
def test_link_counters_are_the_per_flow_loops(case, monkeypatch):
    # each shown link's steps gathered from every flow's share history at once: the same floats as the loop over
    # the link's flows it replaced (tests/oracle/link_steps.py), for shared links, a model that shares none,
    # overlapping collectives of two kinds on 4 nodes, sends across a spine, and collectives one after another
    # (no two flows on a link at once: the shares not replayed, as the replay gives them)
    from schedsim.api import simulate_spec
    from schedsim.lower.program import rendezvous_groups
    from schedsim.network import share
    from schedsim.spec.loader import load_text
    from tests.oracle.link_steps import link_steps

    text, prof, model = {"mixed": (MIXED, profile(2, 1), None), "replay": (TWO, profile(2, 1), "replay"),
                         "chunks": (CHUNKS, profile(2, 1), None), "three": (THREE, profile(3, 1, OVERSUB), None),
                         "serial": (CHUNKS.replace("stream: comm2", "stream: comm"), profile(2, 1), None)}[case]
    run = simulate_spec(load_text(text, "s.yaml"), prof, gpu_model=model)
    c, prog = run.timeline.columns, run.program
    args = (prof, prog, c.start_s, c.end_s, c.solo_s, model != "replay")
    got = share.link_utilisation(*args)
    assert got is not None and got["shown"] >= 2 and _plain(got) == _plain(run.timeline.meta["links"])
    # each link's steps an (n, 2) array in the process, whose JSON is the text of the lists of pairs
    from schedsim.io import dumps_json

    assert all(isinstance(ln["steps"], np.ndarray) and ln["steps"].shape[1] == 2 for ln in got["links"])
    assert dumps_json(got) == dumps_json(_plain(got))
    gptr, gidx, G, _c, _lone = rendezvous_groups(prog)
    t0, t1 = (np.maximum.reduceat(x[gidx], gptr[:-1]) for x in (c.start_s, c.end_s))
    ls = share.program_share(prof, prog, gptr, gidx, np.maximum(t1 - t0, 1e-12))
    overlap = share._overlap(ls.map, np.flatnonzero(t1 > t0), t0, t1) if ls is not None else None
    assert overlap == {"mixed": True, "serial": False}.get(case, overlap)  # the send beside the all_reduce
    monkeypatch.setattr(share, "_link_steps", link_steps)
    monkeypatch.setattr(share, "_overlap", lambda *a: True)  # every run's shares replayed
    assert _plain(share.link_utilisation(*args)) == _plain(got)


def _plain(use):  # type: ignore[no-untyped-def]
    """A link utilisation with each link's steps as lists of [t_s, B/s] pairs (Python floats), to compare whole."""
    return {**use, "links": [{**ln, "steps": np.asarray(ln["steps"]).tolist()} for ln in use["links"]]}


def test_one_node_runs_skip_the_link_work_and_still_refuse_a_rank_without_a_gpu():
    from schedsim.errors import ProfileError
    from schedsim.network.share import _one_node

    prof = profile(2, 1)  # 2 GPUs per node, two nodes
    assert _one_node(prof, 1) and _one_node(prof, 2) and not _one_node(prof, 3) and _one_node(prof, 0)
    capped = HardwareProfile.model_validate({**prof.model_dump(), "topology": {**prof.topology.model_dump(),
                                                                                "placement": [0, 1]}})
    with pytest.raises(ProfileError, match="rank 2 has no GPU"):
        _one_node(capped, 3)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_flows_at_once_on_a_link_by_their_times_first_as_by_their_links(data: st.DataObject):
    # _overlap answers from the flows' times alone where no two run at once (then none shares a link at once),
    # else by the flows on each link (_overlap_on_links): the same answer either way, ends meeting starts included
    from schedsim.network.share import _overlap, _overlap_on_links

    G = data.draw(st.integers(1, 7))
    L = data.draw(st.integers(1, 4))
    links = [sorted(data.draw(st.sets(st.integers(0, L - 1), max_size=L))) for _ in range(G)]
    ptr = np.concatenate([[0], np.cumsum([len(x) for x in links])]).astype(np.int64)
    lm = LinkMap(ptr, np.array([k for x in links for k in x], np.int64), np.ones(int(ptr[-1])), np.ones(G),
                 np.ones(L), 1, 2 * L, np.zeros(G))
    t0 = np.array(data.draw(st.lists(st.integers(0, 6), min_size=G, max_size=G)), float)
    t1 = t0 + np.array(data.draw(st.lists(st.integers(1, 3), min_size=G, max_size=G)), float)
    flows = np.array(sorted(data.draw(st.sets(st.integers(0, G - 1)))), np.int64)
    assert _overlap(lm, flows, t0, t1) == _overlap_on_links(lm, flows, t0, t1)


def test_program_share_keeps_the_last_map_for_the_same_groups_and_work():
    # link_utilisation asks for the simulation's groups and solo seconds again: the map is made once, each call gets
    # a LinkShare of its own (fresh counts); other work, or another Program, makes it anew
    from schedsim.api import simulate_spec
    from schedsim.lower.program import rendezvous_groups
    from schedsim.network import share
    from schedsim.spec.loader import load_text

    prof = profile(2, 1)
    prog = simulate_spec(load_text(CHUNKS, "s.yaml"), prof).program
    gptr, gidx, _G, _c, _lone = rendezvous_groups(prog)
    work = np.full(len(gptr) - 1, 1e-3)
    a, b = share.program_share(prof, prog, gptr, gidx, work), share.program_share(prof, prog, gptr, gidx, work.copy())
    assert a is not None and b is not None and a is not b and a.map is b.map and a.count is not b.count
    fresh = share._program_share(prof, prog, gptr, gidx, work, None)
    assert fresh is not None
    for f in ("ptr", "link", "weight", "demand", "cap", "nbytes"):
        assert np.array_equal(getattr(a.map, f), getattr(fresh.map, f)), f
    c = share.program_share(prof, prog, gptr, gidx, 2 * work)
    again = share._program_share(prof, prog, gptr, gidx, 2 * work, None)
    assert c is not None and again is not None and c.map is not a.map
    assert np.array_equal(c.map.demand, again.map.demand) and not np.array_equal(c.map.demand, a.map.demand)


def _two_flows_counted(monkeypatch: pytest.MonkeyPatch) -> tuple[LinkMap, list[int]]:
    """Two flows on one NIC link (capacity 50), demands 40 and 30, with the kept refills and flow signatures emptied
    and each :func:`maxmin_small` call counted (the list)."""
    lm = LinkMap(np.array([0, 1, 2]), np.array([0, 0], np.int64), np.ones(2), np.array([40.0, 30.0]),
                 np.array([50.0, 50.0]), 1, 2, np.zeros(2))
    monkeypatch.setattr(share, "_REFILLS", {})
    monkeypatch.setattr(share, "_SIGS", {})
    calls: list[int] = []
    real = share.maxmin_small

    def counted(*a: object) -> list[float]:
        calls.append(1)
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(share, "maxmin_small", counted)
    return lm, calls


def test_kept_refills_are_the_refills(monkeypatch: pytest.MonkeyPatch):
    # the two flows each get 25 (shares 0.625, 0.8333...); the second LinkShare over the same values finds the refill
    # kept (maxmin_small not called) and gives the same shares
    lm, calls = _two_flows_counted(monkeypatch)
    got = []
    for _ in range(2):
        ls = LinkShare(lm)
        ls.event(0, 1)
        assert ls.event(1, 1) == [0, 1]
        got.append(ls.share.tolist())
    assert got[0] == got[1] == [25.0 / 40.0, 25.0 / 30.0]
    assert len(calls) == 1 and len(share._REFILLS) == 1
    monkeypatch.setattr(share, "REFILLS_KEPT", 1)  # full: forgotten all at once, then this one kept
    ls = LinkShare(LinkMap(lm.ptr, lm.link, lm.weight, np.array([40.0, 20.0]), lm.cap, 1, 2, lm.nbytes))
    ls.event(0, 1)
    ls.event(1, 1)
    assert ls.share.tolist() == [30.0 / 40.0, 1.0] and len(calls) == 2 and len(share._REFILLS) == 1


def test_refills_are_kept_by_their_flows_signatures(monkeypatch: pytest.MonkeyPatch):
    # the two flows on another LinkMap object with the same values: the same signature ids, the refill found; a
    # capacity changed: new ids, a new refill (demands 40 and 30 on capacity 40: 20 each); the signature table
    # forgotten when full: new ids for the first values seen again, the refill made again, the same shares
    lm, calls = _two_flows_counted(monkeypatch)

    def shares(m: LinkMap) -> tuple[list[float], list[int]]:
        ls = LinkShare(m)
        ls.event(0, 1)
        ls.event(1, 1)
        return ls.share.tolist(), [ls._signature(h)[0] for h in (0, 1)]

    a, ids_a = shares(lm)
    b, ids_b = shares(LinkMap(lm.ptr.copy(), lm.link.copy(), lm.weight.copy(), lm.demand.copy(), lm.cap.copy(), 1, 2,
                              lm.nbytes))
    assert a == b == [25.0 / 40.0, 25.0 / 30.0] and ids_a == ids_b and len(calls) == 1
    c, ids_c = shares(LinkMap(lm.ptr, lm.link, lm.weight, lm.demand, np.array([40.0, 40.0]), 1, 2, lm.nbytes))
    assert c == [20.0 / 40.0, 20.0 / 30.0] and set(ids_c).isdisjoint(ids_a) and len(calls) == 2
    monkeypatch.setattr(share, "SIGS_KEPT", 2)  # full (four signatures): the next new one empties it first
    e, _ids = shares(LinkMap(lm.ptr, lm.link, lm.weight, lm.demand, np.array([60.0, 60.0]), 1, 2, lm.nbytes))
    assert e == [30.0 / 40.0, 1.0] and len(share._SIGS) == 2 and len(calls) == 3
    d, ids_d = shares(lm)
    assert d == a and set(ids_d).isdisjoint(ids_a) and len(calls) == 4
