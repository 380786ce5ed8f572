"""benchmarks/accuracy/network_published.py's RoCE rows: a row that switches its profile's NICs to RoCE takes the
``roce`` transport's figure (not its base's InfiniBand 0), NVIDIA/nccl#2409's busbw figures as nccl-tests times,
and the crossings behind the figure each latency-bound RoCE row needs (``roce_needs``)."""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

import pytest

from tests.conftest import accuracy_script


def _published() -> ModuleType:
    return accuracy_script("network_published")


def test_a_row_on_roce_takes_the_roce_figure_and_its_busbw_as_time() -> None:
    n = _published()
    ar, sr = [r for r in n.ROWS if "nccl#2409" in r.run]
    nics = n.profile_for(ar).topology.nics
    # dgx_h100 states InfiniBand (0 us a crossing); the row's RoCE takes TRANSPORT_LATENCY["roce"], 1.26 us
    assert (nics.transport, nics.transport_latency_us, nics.per_node, nics.bandwidth_Gbps) == ("roce", 1.26, 8, 400.0)
    stated = replace(ar, topology={"nics": {"transport": "roce", "transport_latency_us": 5.0}})
    assert n.profile_for(stated).topology.nics.transport_latency_us == 5.0
    # busbw -> nccl-tests time: all_reduce 2^30 B x 2 x 15/16 / 456 GB/s; sendrecv 2^30 B / 48.4 GB/s
    assert ar.us == pytest.approx(2**30 * 2 * 15 / 16 / 456e3)  # 4415.1 us
    assert sr.us == pytest.approx(2**30 / 48.4e3)  # 22184.7 us
    assert (n.network_transport(ar), n.network_transport(sr)) == ("roce", "roce")
    one_node = next(r for r in n.ROWS if r.nodes == 1)
    assert n.network_transport(one_node) == ""


def test_the_crossings_behind_a_needed_figure_2x8() -> None:
    # 2 nodes x 8 GPUs: tree all_reduce crosses twice (up, down), a ring all_reduce 2 x nNodes = 4 times, a ring
    # all_gather nNodes = 2 times (schedsim.network.net_crossings): each us of transport latency adds that many us
    n = _published()
    issue = next(r for r in n.ROWS if r.unsourced)

    def at(row, h: float) -> float:
        nics = {**row.topology.get("nics", {}), "transport_latency_us": h}
        return n.predict(replace(row, topology={**row.topology, "nics": nics}))[0]

    ring = replace(issue, nccl={**issue.nccl, "algo": "ring"})
    gather = replace(issue, kind="all_gather")
    assert at(issue, 1.0) - at(issue, 0.0) == pytest.approx(2.0)
    assert at(ring, 1.0) - at(ring, 0.0) == pytest.approx(4.0)
    assert at(gather, 1.0) - at(gather, 0.0) == pytest.approx(2.0)
    # so the issue's 45 us needs (45 - t0) / 2 under NCCL's choice and (45 - t0) / 4 under NCCL_ALGO=Ring (its
    # network steps at the tree's 5.0 us, schedsim.network.exposed_ring: t0 44.77 us, 40.17 with NCCL's 2.7)
    assert (45.0 - at(issue, 0.0)) / 2 == pytest.approx(9.69, abs=0.01)
    assert (45.0 - at(ring, 0.0)) / 4 == pytest.approx(0.06, abs=0.01)
