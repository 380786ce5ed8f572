"""Golden timelines computed by hand (SimPy style: exact (op, start, end) lists).

Toy profile (conftest): no launch overhead, no kernel floor, NVLink 100 GB/s with 1 µs per step; the ``waves``
model with the defaults its timelines follow from: 132 SMs (``gpu.sms`` omitted), 16 SMs per NCCL kernel, no
cross-stream latency, no wave tail, no NCCL slowdowns (rules of :mod:`schedsim.gpu.rules`).
"""

from __future__ import annotations

import pytest

HEAD = "schema_version: 1\nname: g\nworld_size: %d\nops:\n"


def test_two_streams_take_the_sms_in_dispatch_order(sim_text, toy_profile):
    # A compute op given duration_us is one wave of 132 - 16 = 116 CTAs, each lasting its duration (rule
    # cta-count). A (10 µs) is dispatched first and takes 116 SMs over [0, 10]; B (20 µs, 116 CTAs) places 16 CTAs
    # on the 16 free SMs at 0 (its start) and its other 100 when A's SMs free at 10, ending at 10 + 20 = 30 µs
    # (rule wave-dispatch). C waits for A (event) and for B on its stream: [30, 35].
    spans, tl = sim_text(HEAD % 1 + "  - {name: A, kind: compute, duration_us: 10, stream: s1}\n"
                                    "  - {name: B, kind: compute, duration_us: 20, stream: s2}\n"
                                    "  - {name: C, kind: compute, duration_us: 5, stream: s2, deps: [A]}\n",
                         toy_profile)
    assert spans == {"A@r0": (0.0, 10.0), "B@r0": (0.0, 30.0), "C@r0": (30.0, 35.0)}
    assert tl.makespan_s == pytest.approx(35e-6)


def test_one_collective_waits_for_all_ranks(sim_text, toy_profile):
    # all_reduce of 1e6 B over 2 ranks, alpha-beta: 2(n-1)*1 µs + 2(n-1)/n * 1e6 B / 100 GB/s = 2 + 10 = 12 µs.
    # Rank 1 reaches it after 30 µs of compute, so both ranks run it in [30, 42].
    spans, tl = sim_text(HEAD % 2 + "  - {name: work, kind: compute, duration_us: 30, ranks: [1]}\n"
                                    "  - {name: ar, kind: all_reduce, bytes: 1000000, stream: compute}\n",
                         toy_profile)
    assert spans == {"ar@r0": (30.0, 42.0), "work@r1": (0.0, 30.0), "ar@r1": (30.0, 42.0)}
    ar0 = tl.by_id()["ar@r0"]
    assert ar0.ready_s == 0.0 and ar0.solo_s == pytest.approx(12e-6)
    assert tl.critical_path == ["work@r1", "ar@r1"]


def test_send_recv_pair(sim_text, toy_profile):
    # send of 1e6 B: 1 µs + 1e6 / 100e9 s = 11 µs, starting when both sides are ready (5 µs).
    spans, _ = sim_text(HEAD % 2 + "  - {name: f, kind: compute, duration_us: 5, ranks: [0]}\n"
                                   "  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1000000, deps: [f]}\n"
                                   "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1000000}\n"
                                   "  - {name: g, kind: compute, duration_us: 3, ranks: [1], deps: [r]}\n",
                        toy_profile)
    assert spans == {"f@r0": (0.0, 5.0), "s@r0": (5.0, 16.0), "r@r1": (5.0, 16.0), "g@r1": (16.0, 19.0)}


def test_matmul_and_collective_slow_each_other(sim_text):
    # rule nccl-sms: compute runs at 1/1.25 = 0.8 while an NCCL kernel is resident (gemm_slowdown_beside_nccl);
    # NCCL at 1/(1 + (1.5 - 1) * 116/116) = 1/1.5 beside a kernel holding all 116 SMs it leaves
    # (slowdown_beside_gemm, scaled by the share held). The kernel (116 CTAs) and the all_reduce (16 SMs) both start
    # at 0. The all_reduce (12 µs solo) takes 18 µs; meanwhile the 40 µs kernel progresses 18*0.8 = 14.4 µs
    # and finishes its remaining 25.6 µs alone: end = 43.6 µs.
    from schedsim.hardware.profile import HardwareProfile
    from tests.conftest import toy_profile_dict

    d = toy_profile_dict()
    d["nccl"] = {"gemm_slowdown_beside_nccl": 1.25, "slowdown_beside_gemm": 1.5}
    prof = HardwareProfile.model_validate(d)
    spans, tl = sim_text(HEAD % 2 + "  - {name: k, kind: compute, duration_us: 40}\n"
                                    "  - {name: ar, kind: all_reduce, bytes: 1000000}\n", prof)
    assert spans == {"k@r0": (0.0, 43.6), "ar@r0": (0.0, 18.0), "k@r1": (0.0, 43.6), "ar@r1": (0.0, 18.0)}
    from schedsim.sim.metrics import compute_metrics

    m = compute_metrics(tl)
    assert m["overlap_ratio"] == pytest.approx(1.0)
    assert m["exposed_comm_s"] == pytest.approx(0.0)
    assert m["ranks"][0]["busy_compute_s"] == pytest.approx(43.6e-6)


def test_two_transfers_share_a_link(sim_text, toy_profile):
    # two concurrent 1e6-B sends from rank 0 (different streams) share the link at 1/2 each: 22 µs both.
    spans, _ = sim_text(HEAD % 3 + "  - {name: a, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: x}\n"
                                   "  - {name: b, kind: send, ranks: [0], peer: 2, bytes: 1000000, stream: y}\n"
                                   "  - {name: ra, kind: recv, ranks: [1], peer: 0, bytes: 1000000}\n"
                                   "  - {name: rb, kind: recv, ranks: [2], peer: 0, bytes: 1000000}\n",
                        toy_profile)
    assert spans["a@r0"] == (0.0, 22.0) and spans["b@r0"] == (0.0, 22.0) and spans["rb@r2"] == (0.0, 22.0)


def test_gemm_table_and_memcpy(sim_text, toy_profile):
    # exact table hit: 1000^3 fp32 in 1.0 ms; memcpy h2d 1e6 B at 10 GB/s = 100 µs on the copy engine,
    # overlapping the GEMM (different resource, no contention factors).
    spans, _ = sim_text(HEAD % 1 + "  - {name: mm, kind: matmul, m: 1000, n: 1000, k: 1000}\n"
                                   "  - {name: cp, kind: memcpy, direction: h2d, bytes: 1000000}\n", toy_profile)
    assert spans == {"mm@r0": (0.0, 1000.0), "cp@r0": (0.0, 100.0)}


def test_eager_launch_overhead_and_cuda_graph(sim_text, make_profile):
    from schedsim.hardware.profile import HardwareProfile
    from tests.conftest import toy_profile_dict

    d = toy_profile_dict()
    d["launch"] = {"eager_per_op_us": 5.0, "eager_per_collective_us": 5.0, "graph_launch_us": 8.0,
                   "graph_per_op_us": 1.0, "source": "test"}
    prof = HardwareProfile.model_validate(d)
    text = HEAD % 1 + "  - foreach: {i: range(4)}\n    ops:\n      - {name: 'k{i}', kind: compute, duration_us: 2}\n"
    eager, _ = sim_text(text, prof)
    # host-bound: kernel i can start only when its launch call returns at 5(i+1) µs
    assert eager == {"k0@r0": (5.0, 7.0), "k1@r0": (10.0, 12.0), "k2@r0": (15.0, 17.0), "k3@r0": (20.0, 22.0)}
    graph, tl = sim_text(text, prof, launch="cuda_graph")
    # one graph launch (8 µs), then back to back with 1 µs per node
    assert graph == {"k0@r0": (8.0, 11.0), "k1@r0": (11.0, 14.0), "k2@r0": (14.0, 17.0), "k3@r0": (17.0, 20.0)}
    assert tl.launch == "cuda_graph"


def test_deadlock_at_runtime_is_reported():
    from schedsim.errors import DeadlockError
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.conftest import toy_profile_dict

    # two collectives reached in opposite orders on one stream (unchecked: the static checks refuse it), so each
    # rank's first waits for a peer stuck behind the other
    text = ("schema_version: 1\nname: d\nworld_size: 2\nops:\n"
            "  - {name: x, kind: all_reduce, bytes: 8, stream: c, ranks: [0]}\n"
            "  - {name: y, kind: all_reduce, bytes: 8, stream: c, ranks: [1]}\n"
            "  - {name: y, kind: all_reduce, bytes: 8, stream: c, ranks: [0]}\n"
            "  - {name: x, kind: all_reduce, bytes: 8, stream: c, ranks: [1]}\n")
    prog = lower(load_text(text, "d.yaml"), check=False)
    with pytest.raises(DeadlockError, match="rank 0: x@r0 .* waits for its peers x@r1"):
        simulate(prog, HardwareProfile.model_validate(toy_profile_dict()))


def test_small_gemms_run_side_by_side_when_their_ctas_fit(sim_text):
    from schedsim.hardware.profile import HardwareProfile
    from tests.conftest import toy_profile_dict

    # 128x128x128 fp32: one 128x128 tile, k too short to split (min(ceil(SMs / 1), ceil(128 / 256)) = 1) -> 1 CTA
    # (rule cta-count). The table's rate is 2·1000³ FLOP / 1 ms = 2 TFLOP/s, so each GEMM takes
    # 2·128³ / 2e12 s = 2.097152 µs alone.
    text = HEAD % 1 + ("  - {name: a, kind: matmul, m: 128, n: 128, k: 128, stream: s1}\n"
                       "  - {name: b, kind: matmul, m: 128, n: 128, k: 128, stream: s2}\n")
    solo = 2 * 128**3 / 2e12 * 1e6
    d = toy_profile_dict()
    for sms in (None, 100):  # 132 SMs (the default) or 100: 2 CTAs fit, both run alone at once
        d["gpu"]["sms"] = sms
        occ, _ = sim_text(text, HardwareProfile.model_validate(d))
        assert occ["a@r0"] == (0.0, pytest.approx(solo)) and occ["b@r0"] == (0.0, pytest.approx(solo))
    d["gpu"]["sms"] = 1  # one SM: b's CTA waits for a's (one CTA per SM, FIFO dispatch, rule wave-dispatch)
    one, _ = sim_text(text, HardwareProfile.model_validate(d))
    assert one["a@r0"] == (0.0, pytest.approx(solo)) and one["b@r0"] == (pytest.approx(solo), pytest.approx(2 * solo))
