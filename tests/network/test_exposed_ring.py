"""A ring's LL and LL128 network step is timed at the tree's network hwLat (:func:`schedsim.network.exposed_ring`):
NCCL's model (src/graph/tuning.cc, 2.23.4 to 2.30.7) times a ring's network step at ``hwLat[NET][RING][p]`` (LL 2.7,
LL128 4.0 µs) with more than one GPU a node and at the tree's ``hwLat[NET][TREE][p]`` (5.0, 8.5) with one ("latencies
are fully exposed"); the run takes the tree's on any number of GPUs a node. NCCL still chooses with its own; Simple
(14.0 both from 2.23) and one node are unchanged. Times worked out by hand beside each test from the constants of
schedsim/network/tuning.py, on 400 Gb/s NICs (InfiniBand: no transport latency)."""

from __future__ import annotations

import copy

import pytest

from schedsim.network import NcclNetwork, exposed_ring, timing_table
from schedsim.network.tuning import tune
from tests.network.test_network import R4, TOPO22, forced, hopper, profile, us
from tests.network.test_network_timing import fig

MiB = 1 << 20


def test_ring_ll_all_gather_2x2_by_hand():
    # all_gather, 4 ranks on 2 nodes: nsteps n - 1 = 3, of them nNodes - 1 = 1 network step. NCCL's latency 6.6 +
    # 2 x max(.6, 1.0 net overhead) + 1 x 2.7 = 11.3 us; the run's 6.6 + 2 x 1.0 + 1 x 5.0 = 13.6. 4 KiB on 1 of
    # comm->nChannels 8 (ring LL: 8 B x 4 ranks a thread x 512 threads = 16 KiB a channel): min(llMaxBw 39,
    # 96 / 8 x .5 = 6) x n/nsteps 4/3 = 8 GB/s
    net = forced(TOPO22, "ring", "LL")
    got = net.collective("all_gather", 4096, R4)
    assert got is not None and (got.algo, got.proto) == ("ring", "LL")
    assert us(got) == pytest.approx(13.6 + 4096 / (1000 * 8.0), rel=1e-9)
    t = net.tune_input(net.shape(R4))
    assert tune("allgather", t)[("ring", "LL")][0] == pytest.approx(11.3)  # NCCL's own, which it chooses with


def test_ring_ll128_all_reduce_2x2_by_hand():
    # NCCL's 14.0 + 4 x max(1.9, 1.0) + 2 x 4.0 = 29.6 us; the run's 14.0 + 4 x 1.9 + 2 x 8.5 = 38.6; bandwidth
    # min(96 x .92, 4 x 36.7) = 88.32 x 4/6 = 58.88 GB/s (test_network::test_ring_ll128_all_reduce_2x2)
    net = forced(TOPO22, "ring", "LL128")
    t = net.tune_input(net.shape(R4))
    assert tune("allreduce", t)[("ring", "LL128")] == pytest.approx((29.6, 58.88))
    assert timing_table("allreduce", t)[("ring", "LL128")] == pytest.approx((38.6, 58.88))
    got = net.collective("all_reduce", MiB, R4)
    assert got is not None and us(got) == pytest.approx(38.6 + MiB / (1000 * 58.88), rel=1e-9)


def test_simple_tree_and_one_node_keep_nccls_figures():
    # ring Simple: 8.4 + 4 x max(3.4, 3 x 1.0) + 2 x 14.0 = 50.0, the same in NCCL's table and the run's; the tree
    # already takes the tree's figure; one node has no network step: exposed_ring gives the input back
    net = NcclNetwork(profile(TOPO22))
    t = net.tune_input(net.shape(R4))
    nccl, timed = tune("allreduce", t), timing_table("allreduce", t)
    assert nccl[("ring", "Simple")] == timed[("ring", "Simple")] == pytest.approx((50.0, 64.0))
    assert all(timed[k] == v for k, v in nccl.items() if k[0] != "ring")
    one = NcclNetwork(profile(hopper(8, 8)))
    t1 = one.tune_input(one.shape(tuple(range(8))))
    assert exposed_ring(t1) is t1
    assert timing_table("allreduce", t1)[("ring", "LL")] == tune("allreduce", t1)[("ring", "LL")]


def test_a_profiles_own_ring_figure_wins():
    # nics.timing ring/LL hw_latency_us 3.0: 6.6 + 4 x 1.0 + 2 x 3.0 = 16.6 us (not the tree's 5.0: 20.6)
    topo = copy.deepcopy(TOPO22)
    topo["nics"]["timing"] = {"ring/LL": fig(3.0)}
    got = NcclNetwork(profile(topo, {"algo": "ring", "proto": "LL"})).collective("all_reduce", 4096, R4)
    assert got is not None and us(got) == pytest.approx(16.6 + 4096 / (1000 * 4.0), rel=1e-9)


def test_a_release_before_2_23_takes_its_own_tree_figure():
    # NCCL 2.20.3 counts 2 x nNodes network steps for a ring all_reduce (legacy) and its ring LL128 network hwLat is
    # 4.0, the tree's 8.5: 5 nodes x 8 GPUs, 10 steps, the run's latency 10 x (8.5 - 4.0) = 45.0 us above NCCL's
    # 14.0 + 68 x 1.9 + 10 x 4.0 = 183.2, at the same bandwidth
    net = NcclNetwork(profile(hopper(8, 4), {"algo": "ring", "proto": "LL128", "version": "2.20.3"}))
    t = net.tune_input(net.shape(tuple(range(40))))
    (lat, bw), (lat_t, bw_t) = tune("allreduce", t)[("ring", "LL128")], timing_table("allreduce", t)[("ring", "LL128")]
    assert lat == pytest.approx(183.2) and lat_t == pytest.approx(228.2) and bw_t == bw


def test_nccl_still_chooses_ring_ll_at_4_kib():
    # 2 x 2, 4 KiB: NCCL's ring LL 16.0 + 4096 / 26000 = 16.16 us beats tree LL's 18.50 with its own figures, and
    # it runs ring LL, timed 20.6 + 4096 / 4000 on 1 of 8 channels = 21.62 us (the choice stays NCCL's)
    got = NcclNetwork(profile(TOPO22)).collective("all_reduce", 4096, R4, floor=False)
    assert got is not None and (got.algo, got.proto) == ("ring", "LL")
    assert us(got) == pytest.approx(20.6 + 4096 / (1000 * 4.0), rel=1e-9)
