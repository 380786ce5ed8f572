"""Collectives of one rank (rule one-rank-collective of schedsim/gpu/rules.py): NCCL launches no kernel for them
(``ncclLaunchOneRank``, src/enqueue.cc): an in-place one puts nothing on the GPU, an out-of-place one is a
same-device copy, which waits for SMs as a memory-bound kernel does, not as a wave-sized NCCL kernel.

Toy GPU of tests/gpu/test_gpu_model.py: 8 SMs, HBM and d2d copies 1000 GB/s, no launch costs; here NCCL kernels
take 4 SMs. Every timeline is checked on both engine paths (the Program's columns and the Op list)."""

from __future__ import annotations

import pytest

import tests.gpu.test_gpu_model as tg
from schedsim.graph.build import graph_of
from schedsim.lower import lower
from schedsim.spec.loader import load_text
from tests.oracle.engine import simulate_any

SIX = tg.SIX  # 6 CTAs for 10 µs: 2 of the 8 SMs stay free
FULL = tg.FULL  # 8 CTAs for 10 µs: every SM


def spans(text: str, **nccl: object) -> dict[str, tuple[float, float]]:
    """{op id: (start µs, end µs)} of ``text`` on the toy GPU, the same on the columnar and the Op-list paths."""
    prof = tg.waves_profile(nccl={"sms_per_collective": 4, **nccl})
    prog = lower(load_text(text, "t.yaml"))
    out = []
    for G in (prog, graph_of(prog)):
        tl = simulate_any(G, prof, gpu_model="waves")
        out.append(({s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6)) for s in tl.spans},
                    {s.id: s.resource for s in tl.spans}))
    assert out[0] == out[1]
    got, res = out[0]
    assert all(r == "comm" for i, r in res.items() if i.startswith("c"))  # its span keeps its kind's resource
    return got


@pytest.mark.parametrize("kind", ["all_reduce", "broadcast", "reduce"])
def test_an_in_place_collective_of_one_rank_takes_no_sms(kind):
    # beside a GEMM on every SM: nothing to wait for (a 4-SM NCCL kernel would wait for the GEMM: (10, 10))
    root = ", root: 0" if kind != "all_reduce" else ""
    got = spans(tg.HEAD % 1 + f"  - {{name: g, {FULL}, stream: s1}}\n"
                f"  - {{name: c, kind: {kind}, bytes: 1000000{root}, stream: s2}}\n")
    assert got == {"g@r0": (0.0, 10.0), "c@r0": (0.0, 0.0)}


def test_an_out_of_place_collective_of_one_rank_is_a_copy_on_the_free_sms():
    # all_gather of 65,536 B: a copy reading and writing it, 131,072 B = 2 CTAs of 64 KiB, on the 2 SMs the 6-CTA
    # GEMM leaves free, at once, for 2 x 65,536 B / 1000 GB/s = 0.131072 µs (a 4-SM NCCL kernel: (10, 10.131072))
    got = spans(tg.HEAD % 1 + f"  - {{name: g, {SIX}, stream: s1}}\n"
                "  - {name: c, kind: all_gather, bytes: 65536, stream: s2}\n")
    assert got == {"g@r0": (0.0, 10.0), "c@r0": (0.0, 0.131072)}
    # beside a GEMM on every SM it waits for SMs, as a copy_ does (benchmarks/probes/sm/copy_beside_gemm.py)
    got = spans(tg.HEAD % 1 + f"  - {{name: g, {FULL}, stream: s1}}\n"
                "  - {name: c, kind: all_gather, bytes: 65536, stream: s2}\n")
    assert got == {"g@r0": (0.0, 10.0), "c@r0": (10.0, 10.131072)}


def test_a_group_of_one_rank_in_a_wider_world_is_one_rank_too():
    # world 2; the all_reduce of group [1] launches nothing on rank 1: it does not wait for rank 1's GEMM on every SM
    text = (tg.HEAD % 2 + f"  - {{name: g, {FULL}, ranks: [1], stream: s1}}\n"
            "  - {name: c, kind: all_reduce, bytes: 1000000, ranks: [1], group: [1], stream: s2}\n")
    assert spans(text) == {"g@r1": (0.0, 10.0), "c@r1": (0.0, 0.0)}


def test_one_rank_collectives_of_both_kinds_in_one_program():
    # a copy (all_gather) and nothing (all_reduce) repeated on one stream beside a 6-CTA GEMM: each copy runs at
    # once on the 2 free SMs for 0.131072 µs, each all_reduce takes no time, in stream order
    ops = "".join(f"  - {{name: c{i}, kind: {k}, bytes: 65536, stream: s2}}\n"
                  for i, k in enumerate(["all_reduce", "all_gather", "all_reduce", "all_gather", "all_gather"]))
    got = spans(tg.HEAD % 1 + f"  - {{name: g, {SIX}, stream: s1}}\n" + ops)
    t = 0.131072
    assert got == {"g@r0": (0.0, 10.0), "c0@r0": (0.0, 0.0), "c1@r0": (0.0, t), "c2@r0": (t, t),
                   "c3@r0": (t, 2 * t), "c4@r0": (2 * t, 3 * t)}
