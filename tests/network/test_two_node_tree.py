"""A tree all_reduce of two ranks on two nodes (one GPU a node) runs Simple and LL128 at its bus bandwidth, twice
NCCL's estimate (:data:`schedsim.network.TWO_NODE_TREE`): each of NCCL's two trees is one edge between the nodes, so
each byte crosses each NIC once each way; and without NCCL's .85 for the NCCL_TOPO_PATTERN_TREE pattern
(:data:`schedsim.network.ONE_EDGE_TREE_PATTERN`): no rank has a network parent and a network child in one tree, so
no NIC traffic is concentrated. NCCL still chooses with its estimate; LL, and groups with more than one
GPU on a node or more than two nodes, run as NCCL estimates. Times computed by hand from NCCL 2.30.7's
constants (src/graph/tuning.cc) on a Hopper node of one GPU and one 400 Gb/s NIC.

The channel search gives 2 channels of 24 GB/s (48 fits one channel, which NCCL duplicates). Tree Simple:
busBw = 2 x 24 = 48, x .92 (tree all_reduce) = 44.16, x .85 (one GPU a node: NCCL_TOPO_PATTERN_TREE) = 37.536;
NCCL's estimate x .5 = 18.768 GB/s. Latency: tree Simple baseLat 8.4 + 2 x (log2i(nNodes) = 1) x network hwLat
14.0 = 36.4 µs (2 and 3 nodes alike). 1 GiB is past the tree correction factors (log2(2^30 / 64) = 24 >= 23).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.network import ONE_EDGE_TREE_PATTERN, TWO_NODE_TREE, timing_table, tree_run_scale
from schedsim.network.tuning import tune
from tests.network.test_network import forced, hopper, us

GIB = float(1 << 30)


def test_two_nodes_tree_runs_at_bus_bandwidth():
    # run: NCCL's 18.768 x 2 / .85 = 44.16 GB/s (busBw 48 x .92, the pattern's .85 taken back);
    # 36.4 + 2^30 B / 44.16 GB/s = 36.4 + 24314.806 = 24351.206 µs (net35p's x 2 alone: 28642.054; NCCL's
    # estimate, x .5: 57247.708)
    net = forced(hopper(1, 1), "tree", "Simple")
    got = net.collective("all_reduce", GIB, (0, 1))
    assert got is not None and (got.algo, got.proto) == ("tree", "Simple")
    assert us(got) == pytest.approx(36.4 + GIB / 44160.0, rel=1e-9)
    assert us(got) == pytest.approx(24351.206, abs=1e-3)


def test_three_nodes_tree_keeps_nccls_half():
    # an interior node on three nodes: NCCL's x .5 stands; 36.4 + 2^30 / 18.768 GB/s = 57247.708 µs
    net = forced(hopper(1, 1), "tree", "Simple")
    got = net.collective("all_reduce", GIB, (0, 1, 2))
    assert got is not None
    assert us(got) == pytest.approx(57247.708, abs=1e-3)


def test_choice_table_keeps_nccls_estimate():
    # NCCL chooses with tune() (x .5, x .85); only the table that times the run (timing_table) takes both back
    net = forced(hopper(1, 1), "tree", "Simple")
    t = net.tune_input(net.shape((0, 1)))
    assert tune("allreduce", t)[("tree", "Simple")] == pytest.approx((36.4, 18.768))
    assert timing_table("allreduce", t)[("tree", "Simple")] == pytest.approx((36.4, 44.16))
    assert timing_table("allreduce", t)[("ring", "Simple")] == tune("allreduce", t)[("ring", "Simple")]


@pytest.mark.parametrize(("func", "nodes", "ranks", "proto", "want"),
                         [("allreduce", 2, 2, "Simple", 2 / .85), ("allreduce", 2, 2, "LL128", 2 / .85),
                          ("allreduce", 2, 2, "LL", 1.0), ("allreduce", 2, 4, "Simple", 1.0),
                          ("allreduce", 3, 3, "Simple", 1.0), ("reduce", 2, 2, "Simple", 1.0)])
def test_tree_run_scale(func: str, nodes: int, ranks: int, proto: str, want: float):
    assert tree_run_scale(func, nodes, ranks, proto) == want


def test_two_nodes_tree_ll_runs_as_estimated():
    # LL's rate in NCCL's model is the protocol's own on the GPU: NCCL's estimate stands
    net = forced(hopper(1, 1), "tree", "LL")
    t = net.tune_input(net.shape((0, 1)))
    assert timing_table("allreduce", t)[("tree", "LL")] == tune("allreduce", t)[("tree", "LL")]


def test_two_nodes_tree_ll128_runs_at_its_bus_bandwidth():
    # LL128: tree all_reduce min(48 x .92, 2 x 41.4) = 44.16; min(44.16 x 120/128 = 41.4, 2 x 36.7) = 41.4; x .85
    # = 35.19; NCCL's estimate x .5 = 17.595, run x 2 / .85 = 41.4 (= 48 x .92 x 120/128)
    net = forced(hopper(1, 1), "tree", "LL128")
    t = net.tune_input(net.shape((0, 1)))
    assert tune("allreduce", t)[("tree", "LL128")][1] == pytest.approx(17.595)
    assert timing_table("allreduce", t)[("tree", "LL128")][1] == pytest.approx(41.4)


def test_two_gpus_a_node_keep_nccls_estimate():
    # 2 nodes x 2 GPUs: the chain's GPUs send up and down through NVLink; NCCL's estimate stands (every tree pair;
    # the ring's LL and LL128 network steps are timed at the tree's hwLat, schedsim.network.exposed_ring)
    net = forced(hopper(2, 2), "tree", "Simple")
    t = net.tune_input(net.shape((0, 1, 2, 3)))
    timed, nccl = timing_table("allreduce", t), tune("allreduce", t)
    assert {k: v for k, v in timed.items() if k[0] == "tree"} == {k: v for k, v in nccl.items() if k[0] == "tree"}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(g=st.sampled_from([1, 2, 4, 8]), proto=st.sampled_from(["Simple", "LL128", "LL"]), data=st.data(),
       size=st.sampled_from([64.0, 12288.0, float(1 << 20), float(3 << 22), GIB]))
def test_any_two_ranks_on_two_nodes_run_as_one_gpu_a_node(g: int, proto: str, data: st.DataObject,
                                                          size: float) -> None:
    # whichever two ranks of a cluster of g GPUs a node (any order, any nodes): on two nodes the group is NCCL's
    # one GPU a node, the same time as (0, 1) of one-GPU nodes; on one node NCCL's estimate, as before the rule
    a, b = data.draw(st.lists(st.integers(0, 3 * g - 1), min_size=2, max_size=2, unique=True))
    net = forced(hopper(g, g), "tree", proto)
    got = net.collective("all_reduce", size, (a, b))
    assert got is not None and got.algo == "tree"
    if a // g != b // g:
        one = forced(hopper(1, 1), "tree", proto).collective("all_reduce", size, (0, 1))
        assert one is not None and got.seconds == one.seconds
    else:
        t = net.tune_input(net.shape((a, b)))
        assert timing_table("allreduce", t)[("tree", proto)] == tune("allreduce", t)[("tree", proto)]


def test_run_scale_is_nccls_two_node_ratio_and_pattern_taken_back():
    # the two named factors: tuning.cc's x .5 (all_reduce tree busBw to algbw) and x .85 (NCCL_TOPO_PATTERN_TREE)
    assert TWO_NODE_TREE == 2.0 and ONE_EDGE_TREE_PATTERN == pytest.approx(1 / .85, rel=1e-15)


def test_three_one_gpu_nodes_keep_the_pattern_factor():
    # 3 x 1: in the first tree (ncclGetBtree, src/graph/trees.cc) rank 0 is the root with child 2, and rank 2 has
    # parent 0 and child 1, both through its one GPU: NCCL's .85 and x .5 stand.
    # LL128 on 3 nodes: min(48 x .92, 2 x 36.0) = 44.16, x 120/128 = 41.4 (under 2 x 29.0), x .85 = 35.19,
    # x .5 = 17.595 GB/s
    net = forced(hopper(1, 1), "tree", "LL128")
    t = net.tune_input(net.shape((0, 1, 2)))
    assert timing_table("allreduce", t)[("tree", "LL128")][1] == pytest.approx(17.595)
