"""Groups whose nodes hold different numbers of their ranks: what NCCL reads of the fewest and the most.

NCCL 2.30.7 (tag v2.30.7-1): src/init.cc keeps ``comm->minLocalRanks`` / ``maxLocalRanks`` and the least of every
rank's graph (``nChannels``, ``bwIntra``, ``bwInter``) and the most of their tree patterns (``maxTreePattern``);
``ncclNvlsTreeSm100Tuning`` (src/transport/nvls.cc) reads ``minLocalRanks``; ``updateCollCostTable``
(src/enqueue.cc) ``maxLocalRanks``. tuning.cc itself reads ``nRanks / nNodes``. Times by hand below.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from schedsim.hardware.profile import HardwareProfile
from schedsim.network import GroupShape, NcclNetwork, fewest_graph
from schedsim.network.tuning import Graph, TuneInput, constants_for, nvls_tree_fill, tune

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "schedsim/hardware/profiles/dgx_a100.yaml").read_text())
GiB = 1 << 30


def hopper_nodes(gpus: int, nics: int) -> HardwareProfile:
    """dgx_a100's compute on Hopper nodes of ``gpus`` GPUs (NVSwitch 370.8 GB/s, NVLS) and ``nics`` 400 Gb/s NICs."""
    d: dict[str, Any] = copy.deepcopy(BASE)
    d["name"] = "test"
    d["topology"] = {"gpus_per_node": gpus, "arch": "hopper", "cpu_vendor": "intel",
                     "scale_up": {"kind": "nvswitch", "bandwidth_GBps": 370.8, "nvls": True, "source": "test"},
                     "nics": {"per_node": nics, "bandwidth_Gbps": 400, "source": "test"}}
    return HardwareProfile.model_validate(d)


def test_shape_counts_the_fewest_and_the_most_ranks_on_a_node():
    net = NcclNetwork(hopper_nodes(8, 8))
    # ranks 0-7 on node 0 (8 NICs), rank 8 on node 1 (1 NIC): at most 8 on a node, at least 1
    assert net.shape(tuple(range(9))) == GroupShape(ranks=9, nodes=2, local=8, nics=1, leaves=1, min_local=1,
                                                    node_kinds=((1, 1), (8, 8)), counts=(8, 1))
    assert net.shape(tuple(range(16))) == GroupShape(ranks=16, nodes=2, local=8, nics=8, leaves=1, min_local=8,
                                                     node_kinds=((8, 8),))


def test_each_node_is_searched_with_its_own_nics():
    # 8 GPUs on 8 NICs (node 0) beside 4 on 4 (node 1). NVLS graph of a node: one head per NIC (at most its GPUs),
    # at the fastest speed s of Hopper's inter-node array with (heads + 1) x s <= 370.8 and s <= 50 GB/s: node 0
    # 8 heads, 9 x 40 = 360 -> 40; node 1 4 heads, 5 x 48 = 240 -> 48. init.cc keeps the least: 4 channels at
    # 40 GB/s. Node 0's 8 GPUs searched with node 1's 4 NICs (4 heads at 48) would be no node's graph.
    net = NcclNetwork(hopper_nodes(8, 8))
    shape = net.shape(tuple(range(12)))
    assert shape.node_kinds == ((4, 4), (8, 8))
    nvls = net.tune_input(shape).nvls
    assert nvls is not None and (nvls.channels, nvls.bw_intra) == (4, 40.0)


def test_graphs_of_an_uneven_group_are_the_least_of_its_nodes():
    # init.cc: nChannels, bwIntra, bwInter = the least over the ranks' own searches; a node with one GPU finds no
    # NVLS graph (nChannels 0), and NCCL then turns NVLS off for the communicator (nvlsSupport = 0)
    assert fewest_graph(Graph(8, 40.0, 60.0), Graph(2, 48.0, 48.0)) == Graph(2, 40.0, 48.0)
    assert fewest_graph(Graph(8, 40.0, 60.0), None) is None
    # 8 GPUs on node 0 and 1 on node 1: NCCL 2.30.7 runs a 1 GiB all_reduce on NVLS-tree over 8 + 8, but a node
    # of one GPU leaves the communicator no NVLS graph (its one NIC would also leave one head, below NVLS's 2)
    net = NcclNetwork(hopper_nodes(8, 8))
    even = net.collective("all_reduce", GiB, tuple(range(16)))
    uneven = net.collective("all_reduce", GiB, tuple(range(9)))
    assert even is not None and even.algo == "nvls_tree"
    assert uneven is not None and uneven.algo not in ("nvls", "nvls_tree")
    assert net.tune_input(net.shape(tuple(range(9)))).nvls is None


def test_tree_pattern_penalty_where_any_node_holds_one_gpu():
    # 4 ranks over 2 nodes, ring graph 2 channels x 24 GB/s. tree/Simple all_reduce: busBw min(2 x 24 x .92,
    # 2 x perChMaxTreeBw Hopper 2 nodes 41.4) = 44.16; one node of 1 GPU: its tree pattern is
    # NCCL_TOPO_PATTERN_TREE (search.cc), maxTreePattern takes it, tuning.cc x .85 = 37.536; x .5 -> 18.768 GB/s.
    # 2 + 2: 22.08 GB/s. Latency either way 8.4 + 2 x ((4 / 2 - 1) x 4.0 + log2(2) x 14) = 44.4 us
    ring = Graph(2, 24.0, 24.0)
    one = tune("allreduce", TuneInput(4, 2, "hopper", "nvlink", "intel", ring, None, local_range=(1, 3)))
    two = tune("allreduce", TuneInput(4, 2, "hopper", "nvlink", "intel", ring, None, local_range=(2, 2)))
    assert one[("tree", "Simple")] == pytest.approx((44.4, 18.768), rel=1e-12)
    assert two[("tree", "Simple")] == pytest.approx((44.4, 22.08), rel=1e-12)


def test_collnet_arity_reads_the_fullest_node():
    # updateCollCostTable: CollNet Direct and Chain only while maxLocalRanks <= NCCL_MAX_DIRECT_ARITY + 1 = 8;
    # 16 ranks as 7 + 9 have 8 a node on average, but 9 on one node
    ring, direct = Graph(8, 45.0, 45.0), Graph(8, 48.0, 48.0)

    def algos(local_range: tuple[int, int]) -> set[str]:
        t = TuneInput(16, 2, "hopper", "nvlink", "intel", ring, None, collnet=True, nvswitch=True,
                      collnet_direct=direct, local_range=local_range)
        return {a for a, _ in tune("allreduce", t)}

    assert {"collnet_direct", "collnet_chain"} <= algos((8, 8))
    assert not {"collnet_direct", "collnet_chain"} & algos((7, 9))


def test_blackwell_nvls_tree_chunk_reads_the_emptiest_node():
    # ncclNvlsTreeSm100Tuning (nvls.cc, 2.30.7): ppn = comm->minLocalRanks. 2 racks, 64 GPUs on one and 4 on the
    # other, 400 Gb/s NICs (50 GB/s >= 48): ppn 4 -> 32 CTAs, 256 KiB chunks and tree maximum; 4 heads (the
    # emptiest node's NICs). 1 GiB is not below 32 x 32 x 4 x 256 KiB = 1 GiB -> 256 KiB a chunk; one hop up and
    # one down: fill = 2 x 1 x 32 x 256 KiB / 48 GB/s. With ranks / nodes = 34 (ppn >= 16) it was 64 KiB.
    t = TuneInput(68, 2, "blackwell", "nvlink", "arm", Graph(16, 45.0, 45.0), Graph(4, 40.0, 48.0),
                  consts=constants_for("2.30.7"), local_range=(4, 64))
    assert nvls_tree_fill(GiB, t, 50.0) == pytest.approx(2 * 32 * 262144 / 48e3, rel=1e-12)
    even = TuneInput(68, 2, "blackwell", "nvlink", "arm", Graph(16, 45.0, 45.0), Graph(4, 40.0, 48.0),
                     consts=constants_for("2.30.7"))
    assert nvls_tree_fill(GiB, even, 50.0) == pytest.approx(2 * 32 * 65536 / 48e3, rel=1e-12)


def test_collnet_latency_reads_ranks_over_nodes_as_integers():
    # tuning.cc: CollNet Direct 2 x (min(1, nRanks / nNodes - 1) x intraLat + (nRanks / nNodes - 1) x 0.4) + interLat,
    # Chain 2 x (nRanks / nNodes - 1) x intraLat + interLat, nRanks and nNodes ints: 15 ranks over 2 nodes (7 + 8)
    # is 7 a node, as 14 (7 + 7), not 7.5
    ring, direct = Graph(8, 45.0, 45.0), Graph(8, 48.0, 48.0)

    def lat(ranks: int, local_range: tuple[int, int]) -> dict[str, float]:
        t = TuneInput(ranks, 2, "hopper", "nvlink", "intel", ring, None, collnet=True, nvswitch=True,
                      collnet_direct=direct, local_range=local_range)
        return {a: v[0] for (a, p), v in tune("allreduce", t).items() if a.startswith("collnet") and p == "Simple"}

    uneven, even = lat(15, (7, 8)), lat(14, (7, 7))
    assert set(uneven) == {"collnet_direct", "collnet_chain"}
    assert uneven == pytest.approx(even, rel=1e-12)
