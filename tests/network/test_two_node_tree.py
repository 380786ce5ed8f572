"""A tree all_reduce in Simple over exactly two nodes runs at its bus bandwidth, twice NCCL's estimate
(:data:`schedsim.network.TWO_NODE_TREE`): neither of NCCL's two trees has an interior node there, so each byte
crosses each NIC once each way. NCCL still chooses with its estimate. Times computed by hand from NCCL 2.30.7's
constants (src/graph/tuning.cc) on a Hopper node of one GPU and one 400 Gb/s NIC.

The channel search gives 2 channels of 24 GB/s (48 fits one channel, which NCCL duplicates). Tree Simple:
busBw = 2 x 24 = 48, x .92 (tree all_reduce) = 44.16, x .85 (one GPU a node: NCCL_TOPO_PATTERN_TREE) = 37.536;
NCCL's estimate x .5 = 18.768 GB/s. Latency: tree Simple baseLat 8.4 + 2 x (log2i(nNodes) = 1) x network hwLat
14.0 = 36.4 µs (2 and 3 nodes alike). 1 GiB is past the tree correction factors (log2(2^30 / 64) = 24 >= 23).
"""

from __future__ import annotations

import pytest

from schedsim.network import TWO_NODE_TREE, timing_table, tree_run_scale
from schedsim.network.tuning import tune
from tests.network.test_network import forced, hopper, us

GIB = float(1 << 30)


def test_two_nodes_tree_runs_at_bus_bandwidth():
    # 36.4 + 2^30 B / 37.536 GB/s = 36.4 + 28605.654 = 28642.054 µs (the old code: x .5, 57247.708)
    net = forced(hopper(1, 1), "tree", "Simple")
    got = net.collective("all_reduce", GIB, (0, 1))
    assert got is not None and (got.algo, got.proto) == ("tree", "Simple")
    assert us(got) == pytest.approx(36.4 + GIB / 37536.0, rel=1e-9)
    assert us(got) == pytest.approx(28642.054, abs=1e-3)


def test_three_nodes_tree_keeps_nccls_half():
    # an interior node on three nodes: NCCL's x .5 stands; 36.4 + 2^30 / 18.768 GB/s = 57247.708 µs
    net = forced(hopper(1, 1), "tree", "Simple")
    got = net.collective("all_reduce", GIB, (0, 1, 2))
    assert got is not None
    assert us(got) == pytest.approx(57247.708, abs=1e-3)


def test_choice_table_keeps_nccls_estimate():
    # NCCL chooses with tune() (x .5); only the table that times the run (timing_table) doubles the tree's
    net = forced(hopper(1, 1), "tree", "Simple")
    t = net.tune_input(net.shape((0, 1)))
    assert tune("allreduce", t)[("tree", "Simple")] == pytest.approx((36.4, 18.768))
    assert timing_table("allreduce", t)[("tree", "Simple")] == pytest.approx((36.4, 37.536))
    assert timing_table("allreduce", t)[("ring", "Simple")] == tune("allreduce", t)[("ring", "Simple")]


@pytest.mark.parametrize(("func", "nodes", "want"), [("allreduce", 2, TWO_NODE_TREE), ("allreduce", 1, 1.0),
                                                     ("allreduce", 4, 1.0), ("reduce", 2, 1.0)])
def test_tree_run_scale(func: str, nodes: int, want: float):
    assert tree_run_scale(func, nodes) == want


@pytest.mark.parametrize("proto", ["LL", "LL128"])
def test_two_nodes_tree_ll_and_ll128_run_as_estimated(proto: str):
    # the LL protocols' bandwidths are the GPU's rate on both passes: NCCL's estimate stands on two nodes too
    net = forced(hopper(1, 1), "tree", proto)
    t = net.tune_input(net.shape((0, 1)))
    assert timing_table("allreduce", t)[("tree", proto)] == tune("allreduce", t)[("tree", proto)]
