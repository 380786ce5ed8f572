"""schedsim.network: NCCL's algorithms and protocols on a cluster topology, times computed by hand.

Every expected time below is worked out from the constants of NCCL 2.30.7's src/graph/tuning.cc and
search.cc (copied in schedsim/network/tuning.py) in the comment beside it, not read back from the code.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.errors import ProfileError
from schedsim.gpu.cost import CostModel
from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.network import GroupShape, NcclNetwork
from schedsim.network.tuning import (
    Graph,
    TuneInput,
    algo_time,
    comm_channels,
    constants_for,
    nvls_graph,
    nvls_tree_chunk,
    nvls_tree_fill,
    parse_nccl_list,
    ring_graph,
    runtime_bw_scale,
    runtime_channels,
    tune,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "schedsim/hardware/profiles/dgx_a100.yaml").read_text())
MiB = 1 << 20


def profile(topology: dict[str, Any], nccl: dict[str, Any] | None = None) -> HardwareProfile:
    """dgx_a100's compute with ``topology`` (and ``nccl`` overrides)."""
    d = copy.deepcopy(BASE)
    d["name"] = "test"
    d["topology"] = topology
    if nccl:
        d["nccl"] = {**d["nccl"], **nccl}
    return HardwareProfile.model_validate(d)


def hopper(gpus: int, nics: int, **extra: Any) -> dict[str, Any]:
    """A Hopper node of ``gpus`` GPUs on NVSwitch (370.8 GB/s, NVLS) and ``nics`` 400 Gb/s NICs."""
    return {"gpus_per_node": gpus, "arch": "hopper", "cpu_vendor": "intel",
            "scale_up": {"kind": "nvswitch", "bandwidth_GBps": 370.8, "nvls": True, "source": "test"},
            "nics": {"per_node": nics, "bandwidth_Gbps": 400, "source": "test"}, **extra}


def forced(topo: dict[str, Any], algo: str, proto: str) -> NcclNetwork:
    return NcclNetwork(profile(topo, {"algo": algo, "proto": proto}))


def us(cost: Any) -> float:
    return float(cost.seconds * 1e6)


# ---- the channel search ---------------------------------------------------------------------------------------

def test_ring_graph_2x2_hopper():
    # sm90SpeedArrayInter from maxBw = 50 (the NIC): 48 -> min(NVLink 370.8//48 = 7, NICs 2 x 50//48 = 2) = 2 ch,
    # 96; 45..30 give less; 24 (24/48 = .5 > .49) gives 4 x 24 = 96, not more; 22/48 < .49 stops. Dup (48 >= 25,
    # 2 channels): 4 x 24. Pass 2: 30 fits 2 channels only. -> 4 x 24
    assert ring_graph("hopper", 370.8, 2, 2, 50.0, True) == Graph(4, 24.0, 24.0)


def test_ring_graph_ampere_one_node_doubles_channels():
    # speedArrayIntra 40: 240 // 40 = 6 channels = 240 >= totalBw: done; dup (40 >= 25, Ampere): 12 x 20
    assert ring_graph("ampere", 240.0, 8, 8, 25.0, False) == Graph(12, 20.0, 20.0)


def test_ring_graph_hopper_across_nodes_keeps_8_channels():
    # 48: NVLink 370.8 // 48 = 7 -> 336; 45: 8 (NVLink 8, NICs 8) -> 360 best; Hopper, 45 < 50, 8 > 4: no dup
    assert ring_graph("hopper", 370.8, 8, 8, 50.0, True) == Graph(8, 45.0, 45.0)


def test_nvls_graph_across_nodes():
    # heads = min(32, 2 GPUs, 2 NICs) = 2; (2 + 1) x 48 <= 370.8 and 48 <= 50: 48; no faster inter speed <= 50
    assert nvls_graph("hopper", 370.8, 2, 2, 50.0, True) == Graph(2, 48.0, 48.0)
    assert nvls_graph("ampere", 240.0, 8, 8, 25.0, False) is None


# ---- each algorithm and protocol, 2 nodes x 2 GPUs ------------------------------------------------------------
TOPO22 = hopper(2, 2)
R4 = (0, 1, 2, 3)


def test_collective_answers_kept_per_shape_and_size():
    """NcclNetwork.collective keeps its answers by (kind, bytes and their type, group shape, has_table, floor): a
    second group of the same shape (other ranks, the same nodes and GPUs per node) gets the first's answer, the
    same as a fresh model gives it; other sizes, kinds, flags are worked out anew."""
    net = forced(TOPO22, "ring", "Simple")
    got = net.collective("all_reduce", 16 * MiB, R4)
    assert net.collective("all_reduce", 16 * MiB, R4) is got
    assert us(got) == pytest.approx(70.0 + 16 * MiB / (1000 * 64.0), rel=1e-9)
    fresh = forced(TOPO22, "ring", "Simple")
    for kind, nb, flags in [("all_reduce", 8 * MiB, {}), ("all_gather", 16 * MiB, {}),
                            ("all_reduce", 16 * MiB, {"floor": False}), ("all_reduce", 16 * MiB, {"has_table": True})]:
        assert net.collective(kind, nb, R4, **flags) == fresh.collective(kind, nb, R4, **flags)
    assert net.collective("all_reduce", 16 * MiB, R4, has_table=True) is None
    assert len(net._costs) == 5


def test_ring_simple_all_reduce_2x2():
    # bus = 4 ch x 24 = 96, x n/nsteps = 4/6 -> 64 GB/s. lat = 8.4 + (6 - 2 inter steps) x max(3.4, 3 x 1.0 net
    # overhead) + 2 x 14.0 = 50.0; ring plateau (16 MiB / (4 ch x 4 ranks) >= 64): x 1.4 = 70.0
    got = forced(TOPO22, "ring", "Simple").collective("all_reduce", 16 * MiB, R4)
    assert got is not None and (got.algo, got.proto) == ("ring", "Simple")
    assert us(got) == pytest.approx(70.0 + 16 * MiB / (1000 * 64.0), rel=1e-9)


def test_ring_ll128_all_reduce_2x2():
    # bus = min(96 x .92, 4 x 36.7) = 88.32, x 4/6 = 58.88. NCCL's lat = 14.0 + 4 x max(1.9, 1.0) + 2 x 4.0 = 29.6;
    # the run's network steps at the tree's 8.5 (schedsim.network.exposed_ring): 14.0 + 4 x 1.9 + 2 x 8.5 = 38.6
    got = forced(TOPO22, "ring", "LL128").collective("all_reduce", 1 * MiB, R4)
    assert got is not None and us(got) == pytest.approx(38.6 + MiB / (1000 * 58.88), rel=1e-9)


def test_ring_ll_all_reduce_2x2():
    # NCCL's lat = 6.6 + 4 x max(.6, 1.0) + 2 x 2.7 = 16.0; the run's network steps at the tree's 5.0
    # (schedsim.network.exposed_ring): 6.6 + 4 x 1.0 + 2 x 5.0 = 20.6. NCCL's bandwidth (the ring graph's 4
    # channels): min(llMaxBw Intel 2 nodes 39.0, 96 x .5) = 39, x 4/6 = 26. It runs on fewer (enqueue.cc
    # topoGetAlgoInfo, from comm->nChannels = 2 x 4 = 8): ring LL threshold 8 x 4 ranks = 32 B/thread x 512
    # threads = 16 KiB a channel > 4 KiB -> 1 of 8 channels, 1/8 of the graph's: min(39, 96 / 8 x .5) = 6, x 4/6
    # = 4 GB/s
    got = forced(TOPO22, "ring", "LL").collective("all_reduce", 4096, R4)
    assert got is not None and us(got) == pytest.approx(20.6 + 4096 / (1000 * 4.0), rel=1e-9)
    # 64 KiB = 4 x 16 KiB: 4 of 8 channels, min(39, 48 x .5) = 24, x 4/6 = 16 GB/s; 128 KiB keeps all 8: 26 GB/s
    got = forced(TOPO22, "ring", "LL").collective("all_reduce", 65536, R4)
    assert got is not None and us(got) == pytest.approx(20.6 + 65536 / (1000 * 16.0), rel=1e-9)
    got = forced(TOPO22, "ring", "LL").collective("all_reduce", 131072, R4)
    assert got is not None and us(got) == pytest.approx(20.6 + 131072 / (1000 * 26.0), rel=1e-9)


def test_medium_ring_simple_runs_on_fewer_channels_2x2():
    # enqueue.cc topoGetAlgoInfo (2.30.7) starts from comm->nChannels = 8 (2 x the ring graph's 4): ring Simple
    # 512 threads x 64 B = 32 KiB a channel; 64 KiB < 8 .. 3 x 32 KiB, not < 2 x 32 KiB -> 2 of 8 channels, a
    # quarter of the graph's: bus 96 / 4 = 24, x 4/6 = 16 GB/s. lat 50.0 x 1.4 (the plateau, NCCL's estimate:
    # 64 KiB / (8 ch x 4 ranks) >= 64) = 70.0
    got = forced(TOPO22, "ring", "Simple").collective("all_reduce", 65536, R4)
    assert got is not None and us(got) == pytest.approx(70.0 + 65536 / (1000 * 16.0), rel=1e-9)
    # 256 KiB = 8 x 32 KiB keeps all 8 channels: NCCL's 64 GB/s (a start from the graph's 4 would reach it at 128)
    got = forced(TOPO22, "ring", "Simple").collective("all_reduce", 131072, R4)
    assert got is not None and us(got) == pytest.approx(70.0 + 131072 / (1000 * 32.0), rel=1e-9)
    got = forced(TOPO22, "ring", "Simple").collective("all_reduce", 262144, R4)
    assert got is not None and us(got) == pytest.approx(70.0 + 262144 / (1000 * 64.0), rel=1e-9)


def test_runtime_channels_follow_nccls_thread_counts():
    # a ring of bwIntra x nChannels <= PCI_BW (12 GB/s, the ring graph's channels) runs Simple with 256 threads:
    # 16 KiB a channel, 40000 B keeps 2 channels (40000 >= 2 x 16384); with 512 threads (32 KiB a channel) 1
    assert runtime_channels("ring", "Simple", 40000, 2, Graph(2, 6.0, 6.0), 4) == 2
    assert runtime_channels("ring", "Simple", 40000, 2, Graph(2, 7.0, 7.0), 4) == 1
    # LL128: 640 threads x 8 B = 5 KiB a channel; ring LL: 8 B x nRanks a thread
    assert runtime_channels("tree", "LL128", 3 * 5120, 16, Graph(8, 45.0, 45.0), 16) == 3
    assert runtime_channels("ring", "LL", 2 * 512 * 8 * 16, 16, Graph(8, 45.0, 45.0), 16) == 2
    # NVLS keeps the communicator's channels
    assert runtime_channels("nvls", "Simple", 8, 8, Graph(8, 40.0, 60.0), 16) == 16


def test_runtime_channels_start_from_the_communicators_channels():
    # enqueue.cc topoGetAlgoInfo (2.30.7): nc = comm->nChannels, not the ring graph's. A 2-node Hopper ring graph
    # of 4 channels at 48 GB/s (> 45, < 16 after connectRings' doubling) is doubled again: comm->nChannels 16.
    # 8 MiB ring Simple (32 KiB a channel) runs on all 16; 96 KiB on 3
    g = Graph(4, 48.0, 48.0)
    nch = comm_channels(g, "hopper", True)
    assert nch == 16
    assert runtime_channels("ring", "Simple", 8 * MiB, 16, g, nch) == 16
    assert runtime_channels("ring", "Simple", 96 * 1024, 16, g, nch) == 3
    # the bandwidth on 3 of 16: 3/16 of the ring graph's 4 x 48 = 36 GB/s bus, x n/nsteps 16/30
    t = TuneInput(16, 2, "hopper", "nvlink", "intel", g, None)
    assert runtime_bw_scale("allreduce", "ring", "Simple", 3, t) == pytest.approx(3 / 16, rel=1e-12)
    assert runtime_bw_scale("allreduce", "ring", "Simple", 16, t) == 1.0


def test_nccl_max_ctas_runs_a_ring_on_that_share_of_its_channels_2x2():
    # NCCL 2.30.7 ncclTopoPostset (src/graph/connect.cc): comm->nChannels = 2 x the ring graph's 4 = 8 (no
    # Hopper doubling: bwIntra 24 <= 45), then min(., maxCTAs). NCCL_MAX_CTAS=4: 4 of 8, so the ring runs on half
    # of the graph's channels: bus 2 x 24 = 48, x 4/6 = 32 GB/s; lat 70.0 as in the test above (16 MiB ring plateau)
    for env in ({"max_ctas": 4}, {"max_nchannels": 4}):
        got = NcclNetwork(profile(TOPO22, {"algo": "ring", "proto": "Simple", **env})).collective(
            "all_reduce", 16 * MiB, R4)
        assert got is not None and us(got) == pytest.approx(70.0 + 16 * MiB / (1000 * 32.0), rel=1e-9)
    # NCCL_MAX_CTAS=6: 6 of 8 -> 4 x 6 // 8 = 3 graph channels: 72 x 4/6 = 48 GB/s
    got = NcclNetwork(profile(TOPO22, {"algo": "ring", "proto": "Simple", "max_ctas": 6})).collective(
        "all_reduce", 16 * MiB, R4)
    assert got is not None and us(got) == pytest.approx(70.0 + 16 * MiB / (1000 * 48.0), rel=1e-9)
    # NCCL_MIN_CTAS=16: 16 channels, the 8 copied (copyChannels): the same rings over the same links, NCCL's
    # 64 GB/s; and a minimum above the maximum is lowered to it (src/init.cc): min 16, max 4 -> 4, 32 GB/s
    for env, bw in (({"min_ctas": 16}, 64.0), ({"min_ctas": 16, "max_ctas": 4}, 32.0)):
        got = NcclNetwork(profile(TOPO22, {"algo": "ring", "proto": "Simple", **env})).collective(
            "all_reduce", 16 * MiB, R4)
        assert got is not None and us(got) == pytest.approx(70.0 + 16 * MiB / (1000 * bw), rel=1e-9)


def test_ring_plateau_divides_by_the_communicators_channels_2x2():
    # ncclTopoGetAlgoTime (tuning.cc, 2.30.7): the ring plateau (lat x 1.4) from nBytes / (comm->nChannels x
    # nRanks) >= 64, comm->nChannels = 2 x the graph's 4 = 8. 1536 B / (8 x 4) = 48: no plateau, lat 50.0 (the
    # graph's 4 channels would give 96 and 70.0). Bandwidth: 1536 B < 2 x 32 KiB -> 1 of 8 channels, 96 / 8 = 12
    # x 4/6 = 8 GB/s
    got = forced(TOPO22, "ring", "Simple").collective("all_reduce", 1536, R4)
    assert got is not None and us(got) == pytest.approx(50.0 + 1536 / (1000 * 8.0), rel=1e-9)
    # NCCL_MAX_CTAS=4: comm->nChannels 4, 1536 / (4 x 4) = 96 >= 64: the plateau, 70.0; still 1 channel of 8
    got = NcclNetwork(profile(TOPO22, {"algo": "ring", "proto": "Simple", "max_ctas": 4})).collective(
        "all_reduce", 1536, R4)
    assert got is not None and us(got) == pytest.approx(70.0 + 1536 / (1000 * 8.0), rel=1e-9)


def test_nccl_ctas_clamp_nvls_channels_2x2():
    # ncclNvlsTuning (src/transport/nvls.cc, 2.30.7): 16 CTAs on Hopper (NVLS_NCHANNELS_SM90), clamped to
    # [minCTAs, maxCTAs]. NCCL_MAX_CTAS=4: 4 of 16 -> a quarter of NVLS-tree's 54.4 GB/s (test below) = 13.6;
    # NCCL_MIN_CTAS=24: more CTAs than the default, no more bandwidth. The pipeline fill (nvls_tree_fill) takes the
    # CTAs NCCL runs: 4 CTAs x 2 heads = 8 concurrent ops, 16 MiB not below 16 x 8 x 128 KiB -> 128 KiB chunks,
    # 2 hops x 4 x 128 KiB / 48 GB/s; 24 CTAs: 48 ops, 16 MiB < 4 x 48 x 128 KiB -> 64 KiB (not below 1 x 48 x
    # 64 KiB), 2 x 24 x 64 KiB / 48 GB/s
    for env, bw, fill in (({"max_ctas": 4}, 54.4 / 4, 2 * 4 * 131072 / 48e3),
                          ({"min_ctas": 24}, 54.4, 2 * 24 * 65536 / 48e3)):
        got = NcclNetwork(profile(TOPO22, {"algo": "nvlstree", "proto": "Simple", **env})).collective(
            "all_reduce", 16 * MiB, R4)
        assert got is not None and us(got) == pytest.approx(66.8 + 16 * MiB / (1000 * bw) + fill, rel=1e-9)


def test_tree_ll_all_reduce_2x2():
    # lat = 6.8 + 2 x ((2 - 1) x .6 + log2(2) x 5.0) = 18.0; correction log2(4096 / 64) = 6 -> LL .7. Channels:
    # tree LL 8 B/thread x 512 threads = 4 KiB a channel; 4096 < 2 x 4096 -> 1 of comm->nChannels 8, half a graph
    # channel: bus = min(.5 x 24 x .92, .5 x 41.4) = 11.04; LL: min(11.04 / 3.8, 39.0) = 2.905; x .5 (tree algbw)
    got = forced(TOPO22, "tree", "LL").collective("all_reduce", 4096, R4)
    bw = min(11.04 / 3.8, 39.0) * .5 * .7
    assert got is not None and us(got) == pytest.approx(18.0 + 4096 / (1000 * bw), rel=1e-9)


def test_tree_simple_and_ll128_all_reduce_2x2():
    # Simple: bw 88.32 x .5 = 44.16, correction log2(1 MiB / 64) = 14 -> .5; lat 8.4 + 2 x (4.0 + 14.0) = 44.4
    got = forced(TOPO22, "tree", "Simple").collective("all_reduce", MiB, R4)
    assert got is not None and us(got) == pytest.approx(44.4 + MiB / (1000 * 44.16 * .5), rel=1e-9)
    # LL128: min(88.32 x 120/128, 4 x 36.7) = 82.8 x .5 = 41.4, correction [1][14] = .6; lat 14 + 2 x (1.25 + 8.5)
    got = forced(TOPO22, "tree", "LL128").collective("all_reduce", MiB, R4)
    assert got is not None and us(got) == pytest.approx(33.5 + MiB / (1000 * 41.4 * .6), rel=1e-9)


def test_tree_one_gpu_per_node_takes_nccls_tree_pattern_penalty():
    # 4 nodes x 1 GPU: ring graph 2 ch x 24 (48 fits one 50 GB/s NIC once; dup at half speed). search.cc sets a
    # one-GPU node's tree pattern to NCCL_TOPO_PATTERN_TREE, and tuning.cc then takes .85 of tree busBw:
    # min(48 x .92, 2 x 36.0) = 44.16 x .85 = 37.536, x .5 = 18.768 GB/s. lat (ppn 1: the net tree hwLat)
    # = 8.4 + 2 x (0 x 4.0 + log2(4) x 14) = 64.4; correction log2(16 MiB / 64) = 18 -> Simple .7
    got = forced(hopper(1, 1), "tree", "Simple").collective("all_reduce", 16 * MiB, R4)
    assert got is not None and us(got) == pytest.approx(64.4 + 16 * MiB / (1000 * 18.768 * .7), rel=1e-9)


def test_nvls_tree_all_reduce_2x2():
    # NVLS graph 2 x 48/48: intra 48 x .85 x 1/2 x 2 = 40.8; inter 48 x 2 = 96; cap 57.7 -> 40.8; bus 81.6 x 4/6
    # = 54.4. lat = 0 + 25 (NVLink NVLS-tree) + 2 x log2(2) x 20.9 (net) = 66.8. No tree correction on Hopper
    # (NCCL applies it to NVLS-tree only on Blackwell x86 hosts); the pipeline fill: 16 CTAs x 2 heads = 32 ops,
    # 16 MiB not below 4 x 32 x 128 KiB -> 128 KiB chunks; 2 x log2(2) hops x 16 x 128 KiB / 48 GB/s = 87.38
    got = forced(TOPO22, "nvlstree", "Simple").collective("all_reduce", 16 * MiB, R4)
    assert got is not None and us(got) == pytest.approx(66.8 + 16 * MiB / (1000 * 54.4) + 2 * 16 * 131072 / 48e3,
                                                        rel=1e-9)


def test_nvls_tree_chunk_follows_calc_coll_chunking():
    # enqueue.cc calcCollChunking (v2.30.7), 16 CTAs x 8 heads = 128 concurrent ops (1 MiB a 8 KiB-chunk loop):
    # 2 nodes start at nvlsChunkSize 128 KiB: 64 KiB below 4 x 128 x 128 KiB = 64 MiB, 32 KiB below 1 x 128 x
    # 64 KiB = 8 MiB; from 4 nodes nvlsTreeMaxChunkSize is 64 KiB (nvls.cc ncclNvlsTuning), 32 KiB below 8 MiB
    for nbytes, two, four in ((MiB, 32768, 32768), (8 * MiB - 1, 32768, 32768), (8 * MiB, 65536, 65536),
                              (64 * MiB - 1, 65536, 65536), (64 * MiB, 131072, 65536), (1 << 34, 131072, 65536)):
        assert nvls_tree_chunk(nbytes, 2, 16, 8) == two
        assert nvls_tree_chunk(nbytes, 4, 16, 8) == four
    # Blackwell across nodes (ncclNvlsTreeSm100Tuning): 2 nodes of 4 GPUs on >= 48 GB/s NICs -> 256 KiB chunks
    # (a 32 x 4 x 256 KiB = 32 MiB loop: 256 KiB from 32 x 32 MiB = 1 GiB); 2 racks of 64 GPUs -> 64 KiB
    assert nvls_tree_chunk(1 << 30, 2, 32, 4, "blackwell", 4, 50.0) == 262144
    assert nvls_tree_chunk(1 << 30, 2, 32, 4, "blackwell", 64, 50.0) == 65536


def test_nvls_tree_fill_counts_hops_ctas_and_the_chunk_2_to_8_nodes():
    # fill = 2 log2i(nNodes) hops x CTAs x chunk / the NVLS graph's bwInter (48 GB/s: a 400 Gb/s NIC per head)
    def t(nodes: int) -> TuneInput:
        return TuneInput(8 * nodes, nodes, "hopper", "nvlink", "intel", Graph(8, 45.0, 45.0), Graph(8, 40.0, 48.0))

    assert nvls_tree_fill(16 * MiB, t(2)) == pytest.approx(2 * 16 * 65536 / 48e3)      # 43.69
    assert nvls_tree_fill(16 * MiB, t(4)) == pytest.approx(4 * 16 * 65536 / 48e3)      # 87.38
    assert nvls_tree_fill(16 * MiB, t(8)) == pytest.approx(6 * 16 * 65536 / 48e3)      # 131.07
    # a loop short of data: 1 MiB over 16 x 8 ops is 8 KiB each (the kernel's lastChunkCount), not the 32 KiB chunk
    assert nvls_tree_fill(MiB, t(2)) == pytest.approx(2 * 16 * 8192 / 48e3)
    assert nvls_tree_fill(16 * MiB, replace(t(1), ranks=8)) == 0.0
    assert nvls_tree_fill(16 * MiB, replace(t(2), nvls=None)) == 0.0


def test_nvls_tree_on_blackwell_takes_the_sm100_tuning_of_ctas_and_chunks():
    # ncclNvlsTreeSm100Tuning (src/transport/nvls.cc, 2.30.7), GPU-to-NIC path beyond PXB:
    # - 4 nodes on 200 Gb/s NICs (25 GB/s < 48): no branch sets treeMaxChunkSize, so ncclNvlsTuning's fallback
    #   (64 KiB from 4 nodes) holds; 32 CTAs x 8 heads: 1 GiB is not below 4 x 256 x 64 KiB -> 64 KiB
    assert nvls_tree_chunk(1 << 30, 4, 32, 8, "blackwell", 8, 25.0) == 65536
    # - 3 nodes of 8 on 400 Gb/s NICs (48 <= 50 < 96): nChannels 24, treeMaxChunkSize 128 KiB; 1 GiB not below
    #   16 x 24 x 8 x 128 KiB = 384 MiB -> 128 KiB; the tree over 3 nodes is 2 deep:
    #   fill = 2 x 2 hops x 24 CTAs x 128 KiB / 48 GB/s
    t = TuneInput(24, 3, "blackwell", "nvlink", "intel", Graph(8, 45.0, 45.0), Graph(8, 40.0, 48.0),
                  consts=constants_for("2.30.7"))
    assert nvls_tree_fill(1 << 30, t, 50.0) == pytest.approx(2 * 2 * 24 * 131072 / 48e3)


def test_nvls_tree_fill_crosses_the_depth_of_nccls_tree_over_any_node_count():
    # connect.cc connectNvls builds NVLS-tree's trees with ncclGetDtree(nNodes) (src/graph/trees.cc): ncclGetBtree
    # roots node 0 with one child, the highest power of 2 below nNodes, and halves from there, so its deepest leaf is
    # ceil(log2(nNodes)) hops from the root (the mirrored or shifted second tree is as deep). 3 nodes: 1 -> 2 -> 0,
    # 2 hops; 5 nodes: 1 -> 2 -> 4 -> 0, 3 hops; 6 and 7 nodes: 3 hops; 9 nodes: 1 -> 2 -> 4 -> 8 -> 0, 4 hops
    # (log2i, NCCL's latency count, gives 1, 2, 2, 2, 3). Below 4 nodes 64 KiB chunks (16 MiB < 4 x 16 x 8 x
    # 128 KiB), from 4 nodes nvlsTreeMaxChunkSize 64 KiB.
    def t(nodes: int) -> TuneInput:
        return TuneInput(8 * nodes, nodes, "hopper", "nvlink", "intel", Graph(8, 45.0, 45.0), Graph(8, 40.0, 48.0))

    for nodes, depth in ((3, 2), (5, 3), (6, 3), (7, 3), (9, 4)):
        assert nvls_tree_fill(16 * MiB, t(nodes)) == pytest.approx(2 * depth * 16 * 65536 / 48e3), nodes


def test_nvls_tree_estimate_is_corrected_on_blackwell_x86_hosts_only():
    # ncclTopoGetAlgoTime: NVLS-tree all_reduce bw x treeCorrectionFactor only with minCompCap >= 100 and an x86
    # CPU. 1 MiB: log2(1 MiB / 64) = 14 -> Simple .5; lat 20, bw 100 GB/s
    args = ("allreduce", "nvls_tree", "Simple", 20.0, 100.0, MiB, 2, 16, 16)
    assert algo_time(*args, "blackwell") == pytest.approx(20.0 + MiB / (1000 * 100.0 * .5), rel=1e-12)
    assert algo_time(*args, "blackwell", x86=False) == pytest.approx(20.0 + MiB / (1000 * 100.0), rel=1e-12)
    assert algo_time(*args, "hopper") == pytest.approx(20.0 + MiB / (1000 * 100.0), rel=1e-12)


def test_nvls_one_node_all_reduce_8_gpus():
    # NVLS graph 8 x 40 (9 x 40 <= 370.8), bw_inter raised to 60; intra 40 x .85 x 7/8 x 2 = 59.5 < 60; bus 8 x
    # 59.5 = 476, x 8/14 = 272 GB/s; lat = 25 (NVLink NVLS Simple)
    got = NcclNetwork(profile(hopper(8, 8))).collective("all_reduce", 8 << 30, tuple(range(8)))
    assert got is not None and (got.algo, got.proto) == ("nvls", "Simple")
    assert us(got) == pytest.approx(25.0 + (8 << 30) / (1000 * 272.0), rel=1e-9)


def test_nvls_for_all_gather_and_reduce_scatter_stops_at_32_local_ranks():
    # updateCollCostTable (src/enqueue.cc): NVLS / NVLS-tree beyond NCCL_MAX_NVLS_ARITY = 32 local ranks serve
    # all_reduce only. gb200_nvl72 (72 GPUs in one NVLink domain), 1 MiB: NVLS on 32 ranks, not on 36 or 72
    net = NcclNetwork(load_profile("gb200_nvl72"))
    for kind in ("all_gather", "reduce_scatter"):
        algos = {n: net.collective(kind, MiB, tuple(range(n))) for n in (32, 36, 72)}
        assert {n: c.algo for n, c in algos.items() if c is not None} == {32: "nvls", 36: "ring", 72: "ring"}
    got = net.collective("all_reduce", MiB, tuple(range(72)))
    assert got is not None and got.algo == "nvls"


def test_collnet_stops_at_8_local_gpus():
    # updateCollCostTable: CollNet Direct and Chain only up to NCCL_MAX_DIRECT_ARITY + 1 = 8 local GPUs
    ring = Graph(8, 45.0, 45.0)

    def algos(ranks: int) -> set[str]:
        t = TuneInput(ranks, 2, "hopper", "nvlink", "intel", ring, None, collnet=True, nvswitch=True,
                      collnet_direct=Graph(8, 48.0, 48.0))
        return {a for a, _ in tune("allreduce", t)}

    assert {"collnet_direct", "collnet_chain"} <= algos(16)  # 8 a node
    assert not {"collnet_direct", "collnet_chain"} & algos(32)  # 16 a node


def test_ring_all_gather_and_pat_one_gpu_per_node():
    topo = hopper(1, 1)
    ranks = (0, 1, 2, 3)  # 4 nodes x 1 GPU
    # ring graph: NIC only, 48 -> 1 ch; dup -> 2 x 24. 4 nodes > 2: bw_inter 24, bus 48 x 4/3 = 64.
    # ppn 1: inter latency is tree's, 14.0; lat = 8.4 + 0 intra steps + 3 x 14.0 = 50.4
    ring = forced(topo, "ring", "Simple").collective("all_gather", 8 * MiB, ranks)
    assert ring is not None and us(ring) == pytest.approx(50.4 + 8 * MiB / (1000 * 64.0), rel=1e-9)
    # PAT (1 GPU per node): bus 48 x .75 = 36, no algbw conversion; lat = 8.0 + log2(4) x 14 / 3.5 + 4 x 2.8 = 27.2
    pat = forced(topo, "pat", "Simple").collective("all_gather", 8 * MiB, ranks)
    assert pat is not None and us(pat) == pytest.approx(27.2 + 8 * MiB / (1000 * 36.0), rel=1e-9)


def test_nccl_picks_the_least_time():
    net = NcclNetwork(profile(TOPO22))
    # 4 KiB: NCCL's estimate ring LL 16.0 + 4096 / 26000 = 16.16 us, less than tree LL's 18.50 and every other
    # pair's latency; it runs on 1 of 8 channels, its network steps at the tree's 5.0 us
    # (test_ring_ll_all_reduce_2x2): 20.6 + 4096 / 4000
    small = net.collective("all_reduce", 4096, R4)
    assert small is not None and (small.algo, small.proto) == ("ring", "LL")
    assert us(small) == pytest.approx(20.6 + 4096 / (1000 * 4.0), rel=1e-9)
    # 16 MiB: ring LL128 29.6 + 16 MiB / 58.88 = 314.5 us; ring Simple 332.1, NVLS-tree 375.2, tree LL128 483,
    # tree Simple 542, ring LL 645; run with its network steps at the tree's 8.5 us (test_ring_ll128_all_reduce_2x2)
    big = net.collective("all_reduce", 16 * MiB, R4)
    assert big is not None and (big.algo, big.proto) == ("ring", "LL128")
    assert us(big) == pytest.approx(38.6 + 16 * MiB / (1000 * 58.88), rel=1e-9)


# ---- send/recv and all_to_all through the NICs ----------------------------------------------------------------

def test_p2p_across_nodes_through_the_nic_and_inside_over_nvlink():
    net = NcclNetwork(profile(TOPO22))
    # across: Simple (> 16 KiB): 8.4 + 14.0 = 22.4 us, the NIC's 50 GB/s
    assert us(net.p2p(0, 2, MiB)) == pytest.approx(22.4 + MiB / 50_000, rel=1e-9)
    # inside: 8.4 + 3.4 = 11.8 us; one-node ring graph 12 x 30 = 360 GB/s
    # inside the node, a pair's 16 channels (nChannelsMin 32 -> 16) x 14 GB/s = 224 GB/s, below the ring graph's
    # 12 x 30 = 360 (schedsim.network.p2p_channels)
    assert us(net.p2p(0, 1, MiB)) == pytest.approx(11.8 + MiB / 224_000, rel=1e-9)
    # LL (<= 16 KiB) across: 6.6 + 2.7 us, 50 x .5 = 25 GB/s
    assert us(net.p2p(0, 2, 4096)) == pytest.approx(9.3 + 4096 / 25_000, rel=1e-9)


def test_all_to_all_2x2():
    # 4 MiB over 4 ranks: 1 MiB per peer; 1 MiB to the node's other GPU at 360 GB/s, 2 MiB through the node's 2
    # NICs shared by its 2 GPUs (50 GB/s each); latency the slower tier's Simple step, 22.4 us
    got = NcclNetwork(profile(TOPO22)).collective("all_to_all", 4 * MiB, R4)
    assert got is not None and got.algo == "p2p"
    assert us(got) == pytest.approx(22.4 + max(MiB / 360_000, 2 * MiB / 50_000), rel=1e-9)


def test_shared_nics_slow_all_to_all_but_not_a_scatter_root():
    # 2 nodes x 2 GPUs on ONE NIC per node (both GPUs on NIC 0): all_to_all's 2 MiB per rank across nodes share
    # it (25 GB/s each); a scatter's root alone uses the NIC's 50 GB/s
    net = NcclNetwork(profile(hopper(2, 1)))
    got = net.collective("all_to_all", 4 * MiB, R4)
    assert got is not None and us(got) == pytest.approx(22.4 + max(MiB / 360_000, 2 * MiB / 25_000), rel=1e-9)
    got = net.collective("scatter", 4 * MiB, R4)
    assert got is not None and us(got) == pytest.approx(22.4 + max(MiB / 360_000, 2 * MiB / 50_000), rel=1e-9)


def test_placement_moves_ranks_across_nodes():
    # placed 0 -> GPU 0, 1 -> GPU 2 (node 1): the pair crosses nodes
    net = NcclNetwork(profile(hopper(2, 2, placement=[0, 2, 1, 3], nodes=2)))
    assert net.shape((0, 1)).nodes == 2 and net.shape((0, 2)).nodes == 1
    assert us(net.p2p(0, 1, MiB)) == pytest.approx(22.4 + MiB / 50_000, rel=1e-9)


def test_placement_of_many_ranks_at_once():
    """``gpus_of`` places a whole group at once, as ``gpu_of`` one by one, and refuses the first rank ``gpu_of``
    refuses; ``shape`` of a group reads it: 2 nodes x 4 GPUs on 2 NICs (GPU i on NIC i * 2 // 4), ranks placed
    in reverse."""
    net = NcclNetwork(profile(hopper(4, 2, placement=[7, 6, 5, 4, 3, 2, 1, 0], nodes=2)))
    assert net.gpus_of([0, 3, 4, 7]).tolist() == [7, 4, 3, 0] == [net.gpu_of(r) for r in (0, 3, 4, 7)]
    # ranks 0, 1 on node 1 (GPUs 7, 6: NIC 1), rank 4 on node 0 (GPU 3: NIC 1): 2 nodes, at most 2 on one, 1 NIC
    assert net.shape((0, 1, 4)) == GroupShape(ranks=3, nodes=2, local=2, nics=1, leaves=1, min_local=1,
                                                node_kinds=((1, 1), (2, 1)), counts=(2, 1))
    # ranks 2, 3 on node 1 (GPUs 5, 4: NIC 0), 0 on it too (NIC 1): node 1 uses 2 NICs, node 0 (rank 7, GPU 0) 1
    assert net.shape((2, 3, 0, 7)) == GroupShape(ranks=4, nodes=2, local=3, nics=1, leaves=1, min_local=1,
                                                   node_kinds=((1, 1), (3, 2)), counts=(3, 1))
    assert net.shape((0, 2)) == GroupShape(ranks=2, nodes=1, local=2, nics=2, leaves=1, min_local=2,
                                             node_kinds=((2, 2),))
    with pytest.raises(ProfileError, match="rank 8 has no GPU"):
        net.gpus_of([1, 8, 9])
    wide = NcclNetwork(profile(hopper(4, 2, nodes=2)))
    with pytest.raises(ProfileError, match="rank 9 needs GPU 9"):
        wide.gpus_of([9, 3, 10])


def test_oversubscribed_spine_slows_groups_across_leaves():
    topo = hopper(2, 2, fabric={"nodes_per_leaf": 1, "oversubscription": 2.0, "latency_us": 1.0, "source": "test"})
    # two leaves: the NIC's 50 GB/s halves to 25; three switch hops of 1 us join the network step
    assert us(NcclNetwork(profile(topo)).p2p(0, 2, MiB)) == pytest.approx(25.4 + MiB / 25_000, rel=1e-9)
    one = hopper(2, 2, fabric={"kind": "single_switch", "nodes_per_leaf": 1, "oversubscription": 2.0,
                               "latency_us": 1.0, "source": "test"})
    # one switch: no spine, one hop
    assert us(NcclNetwork(profile(one)).p2p(0, 2, MiB)) == pytest.approx(23.4 + MiB / 50_000, rel=1e-9)


def test_fabric_switch_hop_times_every_network_crossing_but_not_nccls_choice():
    # 4 nodes x 2 GPUs, 256 KiB all_reduce. NCCL's estimate (tuning.cc 2.30.7): ring LL 6.6 + (14 - 6 inter steps)
    # x max(.6, 1.0 net overhead) + 6 x 2.7 = 30.8 us; tree LL128 14 + 2 x (1 x 1.25 + log2(4) x 8.5) = 50.5; NCCL
    # picks ring LL. A switch hop of 5 us (NCCL's topology has no switch) leaves NCCL's estimate and choice alone
    # and adds 5 us per crossing of the ring's longest chain: 2(n - 1) = 14 steps, one edge in 2 crossing a node
    # boundary, cross ceil(14 / 2) = 7 of them, 7 x 5 = 35 us
    r8 = tuple(range(8))
    bare = NcclNetwork(profile(hopper(2, 2)))
    hop = NcclNetwork(profile(hopper(2, 2, fabric={"kind": "single_switch", "latency_us": 5.0, "source": "test"})))
    assert tune("allreduce", bare.tune_input(bare.shape(r8)))[("ring", "LL")][0] == pytest.approx(30.8, rel=1e-12)
    assert tune("allreduce", hop.tune_input(hop.shape(r8))) == tune("allreduce", bare.tune_input(bare.shape(r8)))
    base, got = bare.collective("all_reduce", 256 * 1024, r8), hop.collective("all_reduce", 256 * 1024, r8)
    assert base is not None and got is not None
    assert (base.algo, base.proto) == (got.algo, got.proto) == ("ring", "LL")
    assert us(got) == pytest.approx(us(base) + 7 * 5.0, rel=1e-12)
    # the same 5 us reported by the net plugin (ncclNetProperties.latency -> graph->latencyInter) NCCL does see, on
    # its own step counts: ring LL 30.8 + 6 x 5 = 60.8 against tree LL128 50.5 + 4 x 5 = 70.5, so NCCL picks tree LL128
    topo = hopper(2, 2)
    topo["nics"] = {**topo["nics"], "latency_us": 5.0}
    seen = NcclNetwork(profile(topo))
    table = tune("allreduce", seen.tune_input(seen.shape(r8)))
    assert table[("ring", "LL")][0] == pytest.approx(60.8, rel=1e-12)
    assert table[("tree", "LL128")][0] == pytest.approx(70.5, rel=1e-12)
    chosen = seen.collective("all_reduce", 256 * 1024, r8)
    assert chosen is not None and (chosen.algo, chosen.proto) == ("tree", "LL128")


def test_fabric_switch_hop_is_not_counted_again_for_simples_flush_2x2():
    # tree Simple 1 MiB over 2 x 2 (test_tree_simple_and_ll128_all_reduce_2x2): 8.4 + 2 x (4.0 + 14.0) = 44.4 us.
    # A 2 us switch hop: the tree's 2 crossings (up, down), 44.4 + 4 = 48.4; the plugin's 2 us instead enters
    # NCCL's network step twice on Simple (the flush, tuning.cc): 8.4 + 2 x (4.0 + 14.0 + 2 + 2) = 52.4
    bw = 44.16 * .5  # tree algbw x the tree correction at 1 MiB
    switch = hopper(2, 2, fabric={"kind": "single_switch", "latency_us": 2.0, "source": "test"})
    got = forced(switch, "tree", "Simple").collective("all_reduce", MiB, R4)
    assert got is not None and us(got) == pytest.approx(48.4 + MiB / (1000 * bw), rel=1e-9)
    plugin = hopper(2, 2)
    plugin["nics"] = {**plugin["nics"], "latency_us": 2.0}
    got = forced(plugin, "tree", "Simple").collective("all_reduce", MiB, R4)
    assert got is not None and us(got) == pytest.approx(52.4 + MiB / (1000 * bw), rel=1e-9)


def test_transport_latency_times_each_network_crossing_of_the_chosen_algorithm_2x2():
    # 3 us a network crossing on the NIC tier (topology.nics.transport_latency_us), which NCCL does not see.
    # ring LL 4 KiB (NCCL's pick, test_nccl_picks_the_least_time): the 2(n - 1) = 6 steps of a chain, every
    # other edge crossing a node boundary (0-1 | 1-2 | 2-3 | 3-0), cross 3 of them (1-2, 3-0, 1-2), not 4:
    # 20.6 (test_ring_ll_all_reduce_2x2) + 3 x 3 = 29.6, on 1 of 8 channels (4 GB/s)
    topo = hopper(2, 2)
    topo["nics"] = {**topo["nics"], "transport_latency_us": 3.0}
    got = NcclNetwork(profile(topo)).collective("all_reduce", 4096, R4)
    assert got is not None and (got.algo, got.proto) == ("ring", "LL")
    assert us(got) == pytest.approx(29.6 + 4096 / (1000 * 4.0), rel=1e-9)
    # one rank a node (ranks 0 and 2): the ring's 2 steps both cross, 2 x 3 us, not 2 x nodes = 4 crossings
    ring = forced(topo, "ring", "LL")
    bare = forced(hopper(2, 2), "ring", "LL")
    a, b = ring.collective("all_reduce", 4096, (0, 2)), bare.collective("all_reduce", 4096, (0, 2))
    assert a is not None and b is not None and us(a) == pytest.approx(us(b) + 2 * 3.0, rel=1e-12)
    a, b = ring.collective("all_gather", 4096, (0, 2)), bare.collective("all_gather", 4096, (0, 2))
    assert a is not None and b is not None and us(a) == pytest.approx(us(b) + 1 * 3.0, rel=1e-12)
    # tree LL forced: up and down, 18.0 + 2 x 3 = 24.0; bandwidth as test_tree_ll_all_reduce_2x2
    got = forced(topo, "tree", "LL").collective("all_reduce", 4096, R4)
    assert got is not None and us(got) == pytest.approx(24.0 + 4096 / (1000 * min(11.04 / 3.8, 39.0) * .5 * .7),
                                                        rel=1e-9)
    # a send across nodes crosses once: 8.4 + 14.0 + 3 = 25.4 us (Simple); inside a node never
    net = NcclNetwork(profile(topo))
    assert us(net.p2p(0, 2, MiB)) == pytest.approx(25.4 + MiB / 50_000, rel=1e-9)
    # inside the node, a pair's 16 channels (nChannelsMin 32 -> 16) x 14 GB/s = 224 GB/s, below the ring graph's
    # 12 x 30 = 360 (schedsim.network.p2p_channels)
    assert us(net.p2p(0, 1, MiB)) == pytest.approx(11.8 + MiB / 224_000, rel=1e-9)
    # one node: no network step, no change (8 GPUs, NVLS 8 GiB as test_nvls_one_node_all_reduce_8_gpus)
    one = hopper(8, 8)
    one["nics"] = {**one["nics"], "transport_latency_us": 3.0}
    r8 = tuple(range(8))
    a = NcclNetwork(profile(one)).collective("all_reduce", 8 << 30, r8)
    b = NcclNetwork(profile(hopper(8, 8))).collective("all_reduce", 8 << 30, r8)
    assert a is not None and b is not None and a.seconds == b.seconds


def test_scale_up_latency_adds_to_every_intra_node_step():
    topo = hopper(8, 8)
    topo["scale_up"] = {**topo["scale_up"], "latency_us": 0.5}
    # one-node ring Simple all_reduce over 8: 8.4 + 14 steps x (3.4 + 0.5); 12 x 30 = 360 GB/s x 8/14
    got = forced(topo, "ring", "Simple").collective("all_reduce", 64 * MiB, tuple(range(8)))
    assert got is not None and us(got) == pytest.approx(8.4 + 14 * 3.9 + 64 * MiB / (1000 * 360 * 8 / 14), rel=1e-9)


# ---- the simulator's view, overrides, unchanged profiles ------------------------------------------------------

def test_cost_model_uses_the_network_on_h200_inside_and_across_nodes():
    h200 = CostModel(load_profile("h200"))
    # inside one node (nccl_within_node): NVLS, graph 8 channels at 40 GB/s ((8 + 1) x 40 <= 370.8), busbw per
    # channel 40 x .85 x 7/8 x 2 = 59.5, x 8 channels x 8/14 (allreduce steps) = 272 GB/s algbw; latency NVLS's
    # NVLink hwLat 25 us
    got = h200.net.cost("all_reduce", 64 * MiB, tuple(range(8)))
    assert got is not None and (got.algo, got.proto) == ("nvls", "Simple")
    assert h200.net.collective("all_reduce", 64 * MiB, tuple(range(8))) == pytest.approx(
        25e-6 + 64 * MiB / (8 * 40 * .85 * 7 / 8 * 2 * 8 / 14 * 1e9), rel=1e-12)
    # across 2 nodes: the NCCL model (NVLS-tree on Hopper with NVLS)
    got = h200.net.cost("all_reduce", 8 << 30, tuple(range(16)))
    assert got is not None and got.algo == "nvls_tree"
    assert h200.net.collective("all_reduce", 8 << 30, tuple(range(16))) == got.seconds


def test_pcie_profiles_keep_the_link_model():
    for name in ("pcie2", "rtx3090_pcie1x4"):
        cm = CostModel(load_profile(name))
        assert cm.net.cost("all_reduce", MiB, (0, 1)) is None


def test_parse_nccl_list_follows_ncclparselist():
    assert parse_nccl_list("ring", "algo")["allreduce"] == frozenset({"ring"})
    got = parse_nccl_list("^LL128;allreduce:LL128", "proto")
    assert got["allreduce"] == frozenset({"LL128"}) and got["allgather"] == frozenset({"LL", "Simple"})
    with pytest.raises(ValueError, match="all entries except the first"):
        parse_nccl_list("ring;tree", "algo")


def test_parse_nccl_list_reads_what_nccl_reads_and_refuses_what_it_refuses():
    """NCCL 2.30.7 src/graph/tuning.cc parseList: prefixes are ncclFuncStr's five (src/init.cc), pieces cut by
    strtok_r (empty ones skipped), names compared whole by strcasecmp; anything else is ncclInvalidUsage at
    communicator init. It took sendrecv/send/recv prefixes and ' tree' (NCCL fails both) and refused 'ring,'."""
    every = frozenset({"LL", "LL128", "Simple"})
    for bad, what in (("sendrecv:LL", "proto"), ("send:Simple", "proto"), ("recv:LL", "proto"),
                      ("ring, tree", "algo"), (" ring", "algo"), ("allreduce: tree", "algo"), (":", "algo")):
        with pytest.raises(ValueError):
            parse_nccl_list(bad, what)  # type: ignore[arg-type]
    assert set(parse_nccl_list("LL", "proto")) == {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
    for same in ("ring,", "ring;", "ring,,", "RING"):
        assert parse_nccl_list(same, "algo") == parse_nccl_list("ring", "algo")
    assert parse_nccl_list("ring;allreduce:tree,", "algo")["allreduce"] == frozenset({"tree"})
    for nothing in ("", "^", ";"):
        assert parse_nccl_list(nothing, "proto")["allreduce"] == every


def test_overrides_that_leave_nothing_are_an_error():
    net = NcclNetwork(profile(TOPO22, {"algo": "nvls"}))  # NVLS needs CollNet across nodes
    with pytest.raises(ProfileError, match=r"profile 'test': nccl.algo / nccl.proto \('nvls' / None\) leave "
                       "all_reduce no algorithm"):
        net.collective("all_reduce", MiB, R4)


def test_schedule_env_that_leaves_nothing_names_the_schedule_line(tmp_path: Path):
    # PAT runs only all_gather / reduce_scatter with one GPU per node: a schedule's NCCL_ALGO=PAT leaves a
    # 16-rank all_reduce nothing; the error names the schedule's env line, not the profile
    f = tmp_path / "pat.yaml"
    f.write_text("schema_version: 1\nname: pat\nworld_size: 16\nenv:\n  NCCL_PROTO: Simple\n  NCCL_ALGO: PAT\n"
                 "ops:\n  - {name: ar, kind: all_reduce, bytes: 1048576}\n")
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(f), "--profile", "dgx_h100", "--out",
                          str(tmp_path / "o"), "--no-gantt"], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    first, fix = out.stderr.strip().splitlines()[:2]
    assert first.startswith(f"error: {f}:6: env.NCCL_ALGO and {f}:5: env.NCCL_PROTO: NCCL_ALGO / NCCL_PROTO "
                            "('PAT' / 'Simple') leave all_reduce no algorithm"), first
    assert "profile 'dgx_h100'" not in first and fix.strip().startswith("fix: let the schedule's env:")
    assert "Traceback" not in out.stderr


# ---- self-contradicting topologies ----------------------------------------------------------------------------

@pytest.mark.parametrize(("change", "field", "words"), [
    ({"nodes": 2, "placement": [0, 1, 2, 3, 4]}, "topology.placement", "5 ranks placed but"),
    ({"nodes": 2, "placement": [0, 9]}, "topology.placement", "GPU 9 is beyond the 4 GPUs"),
    ({"placement": [0, 0]}, "topology.placement", "GPU 0 is placed twice"),
    # no nodes: a GPU index past SCHEDSIM_MAX_RANKS nodes of gpus_per_node (100,000 x 2) implies that many nodes,
    # whose NIC links the shared-link model allocated (1.5 TiB for GPU 10^11: an internal error)
    ({"placement": [0, 10**11]}, "topology.placement", "GPU 100000000000 is beyond the 200000 GPUs"),
    ({"nics": {"per_node": 2, "bandwidth_Gbps": 400, "gpu_to_nic": [0, 2], "source": "t"}},
     "topology.nics.gpu_to_nic", "rail to a missing NIC: NIC 2"),
    ({"nics": {"per_node": 2, "bandwidth_Gbps": 400, "gpu_to_nic": [0], "source": "t"}},
     "topology.nics", "gpu_to_nic names 1 GPUs but gpus_per_node is 2"),
    ({"arch": None}, "topology", "scale_up needs arch"),
    # NCCL's topology of a host holds at most NCCL_TOPO_MAX_NODES = 640 NICs (src/include/graph.h, 2.30.7); 10^12
    # was taken and then asked numpy for 29 TiB of link capacities (an internal error, exit 1)
    ({"nics": {"per_node": 10**12, "bandwidth_Gbps": 400, "source": "t"}}, "topology.nics.per_node",
     "less than or equal to 640"),
])
def test_bad_topology_names_the_field_and_exits_2(tmp_path: Path, change: dict[str, Any], field: str, words: str):
    d = copy.deepcopy(BASE)
    d["topology"] = {**hopper(2, 2), **change}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError) as e:
        load_profile(str(path))
    assert f"{field}: " in str(e.value) and words in str(e.value)
    sched = ROOT / "schedules" / next(p.name for p in sorted((ROOT / "schedules").glob("*.yaml")))
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(sched), "--profile", str(path),
                          "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and field in out.stderr


def test_a_gpu_placed_twice_late_in_a_100k_rank_placement_is_named():
    # the repeat was found by counting each GPU over the whole list (n^2: minutes at 100,000 ranks); one pass now
    n = 100_000
    d = copy.deepcopy(BASE)
    d["topology"] = {**hopper(8, 8), "nodes": n // 8, "placement": [*range(n - 1), n - 2]}
    with pytest.raises(ValueError, match=f"topology.placement\n.*GPU {n - 2} is placed twice"):
        HardwareProfile.model_validate(d)


def test_rank_beyond_the_nodes_is_an_error():
    net = NcclNetwork(profile(hopper(2, 2, nodes=2)))
    with pytest.raises(ProfileError, match="topology.nodes: rank 4 needs GPU 4, more GPUs than 2 nodes x 2 hold"):
        net.collective("all_reduce", MiB, (0, 1, 2, 3, 4))


def test_predict_explain_prints_the_choice_per_collective(tmp_path: Path):
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(ROOT / "schedules/megatron_gpt_pp4.yaml"),
                          "--profile", "dgx_h100", "--explain", "--format", "json", "--no-gantt", "-o",
                          str(tmp_path / "o")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    rows = __import__("json").loads(out.stdout)["explain"]
    ar = [r for r in rows if r["kind"] == "all_reduce"]
    # the tied-embedding all_reduce of 206,045,187 fp16 elements between ranks 0 and 3 of one node: one-node ring
    # graph 12 x 30 -> 360 GB/s, x n/nsteps = 2/2; lat 8.4 + 2 x 3.4 = 15.2 us
    assert [(r["group"], r["nodes"], r["algo"], r["proto"]) for r in ar] == [("0,3", 1, "ring", "Simple")]
    assert ar[0]["time_us"] == pytest.approx(15.2 + 412_090_368 / 360_000, rel=1e-9)
    sends = {r["group"] for r in rows if r["kind"] == "send"}
    assert sends == {"0->1", "1->0", "1->2", "2->1", "2->3", "3->2"}
    # send: Simple (256 KiB > 16 KiB), 8.4 + 3.4 us + 262144 B / 360 GB/s
    # 256 KiB on a pair: divUp(256 KiB, 64 KiB) = 4 channels x 14 GB/s (schedsim.network.p2p_channels)
    assert all(r["time_us"] == pytest.approx(11.8 + 262_144 / 56_000, rel=1e-9) for r in rows if r["kind"] == "send")


def test_predict_explain_without_communication_says_so(tmp_path: Path):
    """A schedule of compute only: --explain prints one line saying there is no communication, no empty table."""
    from tests.cli.test_cli import run

    f = tmp_path / "mm.yaml"
    f.write_text("schema_version: 1\nname: mm\nworld_size: 1\nops:\n"
                 "  - {name: mm, kind: matmul, m: 1024, n: 4096, k: 4096, dtype: bf16}\n")
    r = run("predict", str(f), "--explain", "--no-gantt", "--no-trace", "-o", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "communication: none (the schedule has no collective, send or recv)" in r.stdout
    assert "algo/proto" not in r.stdout and "NCCL algorithm/protocol chosen" not in r.stdout



A2A_SPLITS = """schema_version: 1
name: a2a_splits
world_size: 4
ops:
  - {name: a2, kind: all_to_all, send_bytes: [[0, 100000, 200000, 300000], [100000, 0, 0, 0], [100000, 0, 0, 0],
                                              [100000, 0, 0, 0]]}
"""


@pytest.mark.parametrize("prof", ["unit", "dgx_h100"])
def test_explain_times_an_all_to_all_with_per_peer_sizes_as_the_prediction_runs_it(tmp_path: Path, prof: str):
    """An all_to_all with per-peer sizes runs as long as its busiest member
    (:meth:`~schedsim.network.model.NetworkModel.all_to_all_split`); --explain gave each member's larger sum as a
    uniform all_to_all of that size (on link tables 15 + 0.75 · 600,000 B / 100 GB/s = 19.5 us for rank 0, where
    it runs the uniform all_to_all of 4/3 · 600,000 B: 15 + 6 = 21 us), one row per member, none the op's time.
    Now one row: the largest member's bytes and the op's time."""
    import json

    from schedsim.sim.timeline import Timeline
    from tests.cli.test_cli import run

    f = tmp_path / "a2a.yaml"
    f.write_text(A2A_SPLITS)
    pf = "dgx_h100"
    if prof == "unit":  # alpha-beta on one link class: 5 us a step, 100 GB/s
        pf = str(tmp_path / "lat.yaml")
        Path(pf).write_text((ROOT / "tests/data/unit_profile.yaml").read_text().replace(
            "bandwidth_GBps: 1000, latency_us: 0", "bandwidth_GBps: 100, latency_us: 5"))
    r = run("predict", str(f), "--profile", pf, "--explain", "--format", "json", "--no-gantt", "-o",
            str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    rows = [x for x in json.loads(r.stdout)["explain"] if x["kind"] == "all_to_all"]
    c = Timeline.read_json(tmp_path / "o" / "timeline.json").columns
    spans = {(c.end_s[i] - c.start_s[i]) * 1e6 for i in range(len(c))}
    assert len(spans) == 1 and len(rows) == 1 and rows[0]["bytes"] == 600_000
    assert rows[0]["time_us"] == pytest.approx(spans.pop(), rel=1e-9)
    if prof == "unit":
        assert rows[0]["time_us"] == pytest.approx(21.0, rel=1e-9)


def test_explain_table_keeps_its_columns_for_long_cells():
    """collnet_direct/Simple (21 characters) and a group of 5+ scattered ranks overflowed the 18-wide columns, so
    the time column moved right on those rows; every row's time now ends where the header's does."""
    from schedsim.network.explain import format_explain

    rows = [{"kind": "all_reduce", "bytes": 1 << 20, "group": "0..15", "nodes": 2, "algo": "collnet_direct",
             "proto": "Simple", "time_us": 44.0},
            {"kind": "all_gather", "bytes": 8, "group": "0,2,4,6,...", "nodes": 1, "algo": "ring", "proto": "LL",
             "time_us": 5.25},
            {"kind": "reduce", "bytes": 8, "group": "10000,20000,30000,40000,...", "nodes": 4, "algo": "tree",
             "proto": "LL", "time_us": 7.5}]
    lines = format_explain(rows).splitlines()
    assert len({len(line) for line in lines}) == 1, lines
    assert [line.split()[-1] for line in lines[1:]] == ["44.00", "5.25", "7.50"]

SCHED = """schema_version: 1
name: env
world_size: 16
launch: cuda_graph
{env}
ops:
  - name: ar
    kind: all_reduce
    shape: [4194304]
    dtype: fp32
"""


def _ar_span_us(env: str) -> float:
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(SCHED.format(env=env), "env.yaml"), load_profile("dgx_h100"))
    (ar,) = [s for s in run.timeline.spans if s.rank == 0 and s.kind == "all_reduce"]
    return float((ar.end_s - ar.start_s) * 1e6)


def test_schedule_env_nccl_algo_proto_override_the_profile():
    forced_us = us(forced(hopper(8, 8), "ring", "Simple").collective("all_reduce", 16 * MiB, tuple(range(16))))
    free_us = us(NcclNetwork(load_profile("dgx_h100")).collective("all_reduce", 16 * MiB, tuple(range(16))))
    assert forced_us != pytest.approx(free_us, rel=1e-3)  # the override changes the choice at this size
    # a solo all_reduce in a CUDA graph: its span is the NCCL model's time (plus the per-node graph term)
    extra = load_profile("dgx_h100").launch.graph_per_op_us
    assert _ar_span_us("env: {NCCL_ALGO: ring, NCCL_PROTO: Simple}") == pytest.approx(forced_us + max(0.0, extra),
                                                                                      rel=1e-6)
    assert _ar_span_us("") == pytest.approx(free_us + max(0.0, extra), rel=1e-6)


def test_schedule_env_nccl_max_ctas_overrides_the_profile():
    # the schedule's NCCL_MAX_CTAS times the collective as the profile's nccl.max_ctas does (a 2-node ring of
    # dgx_h100: 8 ring-graph channels of 45 GB/s, comm->nChannels 16; NCCL_MAX_CTAS=8 -> half of the channels)
    d = load_profile("dgx_h100").model_dump()
    d["nccl"].update(algo="ring", proto="Simple", max_ctas=8)
    few_us = us(NcclNetwork(HardwareProfile.model_validate(d)).collective("all_reduce", 16 * MiB, tuple(range(16))))
    forced_us = us(forced(hopper(8, 8), "ring", "Simple").collective("all_reduce", 16 * MiB, tuple(range(16))))
    assert few_us > forced_us
    extra = max(0.0, load_profile("dgx_h100").launch.graph_per_op_us)
    got = _ar_span_us("env: {NCCL_ALGO: ring, NCCL_PROTO: Simple, NCCL_MAX_CTAS: 8}")
    assert got == pytest.approx(few_us + extra, rel=1e-6)


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_schedule_env_bad_nccl_ctas_is_a_spec_error(value: str):
    from schedsim.errors import SpecError
    from schedsim.spec.loader import load_text

    with pytest.raises(SpecError, match="NCCL_MIN_CTAS must be an integer >= 1"):
        load_text(SCHED.format(env=f"env: {{NCCL_MIN_CTAS: {value}}}"), "env.yaml")


def test_schedule_env_bad_nccl_algo_is_a_spec_error():
    from schedsim.errors import SpecError
    from schedsim.spec.loader import load_text

    with pytest.raises(SpecError, match="unknown NCCL algo 'rings'"):
        load_text(SCHED.format(env="env: {NCCL_ALGO: rings}"), "env.yaml")


NIC2 = """schema_version: 1
name: nic
world_size: 16
launch: cuda_graph
nccl_init: eager  # rank 0's batch alone on the world communicator: lazily created, ranks 1-15 would never join
ops:
  - {name: s8, kind: send, ranks: [0], peer: 8, bytes: 67108864, stream: a, p2p_batch: b0}
  - {name: r8, kind: recv, ranks: [8], peer: 0, bytes: 67108864, stream: a}
"""
NIC2_SECOND = ("  - {name: s9, kind: send, ranks: [0], peer: 9, bytes: 67108864, stream: a, p2p_batch: b0}\n"
               "  - {name: r9, kind: recv, ranks: [9], peer: 0, bytes: 67108864, stream: a}\n")


def test_two_flows_share_the_senders_nic():
    """Rank 0 (node 0) sends 64 MiB to ranks 8 and 9 (node 1) at once: on DGX H100 each GPU has its own NIC
    (rail-optimised), so both flows leave through rank 0's NIC, whose out direction they share at 1/2 each
    (rule nccl-sms of schedsim.gpu.rules: k transfers on one link direction). Solo: 22.4 us (Simple p2p step
    across nodes) + 64 MiB / 48 GB/s (the NIC's goodput, .96 of 50) = 1420.501 us; together both take 2 x that."""
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    solo = 22.4 + 67108864 / 48_000
    for text, expect in ((NIC2, solo), (NIC2 + NIC2_SECOND, 2 * solo)):
        run = simulate_spec(load_text(text, "nic.yaml"), load_profile("dgx_h100"))
        spans = {s.id: (s.end_s - s.start_s) * 1e6 for s in run.timeline.spans}
        assert spans and all(v == pytest.approx(expect, rel=1e-9) for v in spans.values()), spans


def test_one_node_tables_do_not_time_a_group_across_nodes():
    # h200x2 has a measured 2-rank all_reduce table (NVLink, one node). Ranks 0 and 8 sit on two nodes: alpha-beta
    # on links.network (10 us, 50 GB/s): 2(n-1) = 2 steps + 2(n-1)/n x S / B
    cm = CostModel(load_profile("h200x2"))
    assert cm.net.collective("all_reduce", 64 * MiB, (0, 8)) == pytest.approx(2 * 10e-6 + 64 * MiB / 50e9, rel=1e-12)
    assert cm.net.collective("all_reduce", 64 * MiB, (0, 1)) < 64 * MiB / 200e9  # the NVLink table inside a node


def test_gb200_nvl72_runs_a_rack_as_one_nvlink_domain():
    cm = CostModel(load_profile("gb200_nvl72"))
    rack = cm.net.cost("all_reduce", 1 << 30, tuple(range(72)))
    two = cm.net.cost("all_reduce", 1 << 30, tuple(range(144)))
    assert rack is not None and two is not None
    assert (rack.algo, two.algo) == ("nvls", "nvls_tree")
    # NVLS graph: 32 heads at 20 GB/s ((32 + 1) x 20 <= 721.8; 22 would not fit), bw_inter raised to 30 (< 40);
    # intra 20 x .74 x 31/32 x 2 = 28.675 < 30; bus 32 x 28.675, x 72/142; latency 25 us (NVLink NVLS Simple)
    assert rack.seconds * 1e6 == pytest.approx(25.0 + (1 << 30) / (1000 * 32 * 28.675 * 72 / 142), rel=1e-9)


TIERS = """schema_version: 1
name: tiers
world_size: 16
launch: cuda_graph
ops:
  - {{name: ar, kind: all_reduce, ranks: {group}, group: {group}, bytes: 67108864, stream: c}}
  - {{name: s8, kind: send, ranks: [0], peer: 8, bytes: 67108864, stream: p}}
  - {{name: r8, kind: recv, ranks: [8], peer: 0, bytes: 67108864, stream: p}}
"""


def _tier_spans(group: list[int]) -> dict[str, float]:
    from schedsim.api import simulate_spec
    from schedsim.spec.loader import load_text

    run = simulate_spec(load_text(TIERS.format(group=group), "tiers.yaml"), load_profile("dgx_h100"))
    return {s.id: (s.end_s - s.start_s) * 1e6 for s in run.timeline.spans if s.rank in (0, 8)}


def test_an_intra_node_collective_and_a_send_across_nodes_use_different_links():
    # rank 0's all_reduce over ranks 0..7 runs on NVLink (tier 0), its send to rank 8 through its NIC (tier 1):
    # both keep their solo times (before link tiers they shared one rank link at 1/2 each)
    cm = CostModel(load_profile("dgx_h100"))
    ar = cm.net.collective("all_reduce", 67108864, tuple(range(8)))
    send = 22.4 + 67108864 / 48_000  # us: Simple p2p step across nodes + 64 MiB / the NIC's goodput, 48 GB/s
    spans = _tier_spans(list(range(8)))
    assert spans["ar@r0"] == pytest.approx(ar * 1e6, rel=1e-9)
    assert spans["s8@r0"] == pytest.approx(send, rel=1e-9) and spans["r8@r8"] == pytest.approx(send, rel=1e-9)


def test_a_collective_across_nodes_shares_the_nic_with_a_send():
    # the 16-rank all_reduce spans both nodes: it uses rank 0's NIC out (and rank 8's NIC in) like the send, so
    # both share that NIC max-min fair (schedsim.network.share). NCCL's model runs it as NVLS-tree: each node sends
    # the 64 MiB across once, over its 8 NICs: P = 8,388,608 B per NIC in its solo time a, P / a = 19.7 GB/s,
    # less than half of the NIC's goodput, 48 GB/s (.96 of 50): it keeps its solo time, and the send gets the
    # rest, 48 - P / a. By a the send has done a (1 - P / (48 a)) of its solo b; it ends at a + b - a + P / 48 =
    # b + P / 48,000 us.
    cm = CostModel(load_profile("dgx_h100"))
    got = cm.net.cost("all_reduce", 67108864, tuple(range(16)))
    assert got is not None and got.algo == "nvls_tree"
    a = got.seconds * 1e6
    b = 22.4 + 67108864 / 48_000
    per_nic = 67108864 / 8
    assert per_nic / a < 24_000  # B/us: the all_reduce alone drives a NIC below half its 48 GB/s
    spans = _tier_spans(list(range(16)))
    assert spans["ar@r0"] == pytest.approx(a, rel=1e-9)
    assert spans["s8@r0"] == pytest.approx(b + per_nic / 48_000, rel=1e-9)


def test_link_tiers_columns_compiled_and_python_loops_agree(monkeypatch):
    from schedsim.graph.build import graph_of
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    prof = load_profile("dgx_h100")
    for group in (list(range(8)), list(range(16)), [0, 8]):
        prog = lower(load_text(TIERS.format(group=group), "tiers.yaml"))

        def spans(g: Any) -> list[tuple[str, float, float]]:
            return sorted((s.id, s.start_s, s.end_s) for s in simulate(g, prof, gpu_model="waves").spans)

        py = sorted((s.id, s.start_s, s.end_s) for s in simulate_reference(graph_of(prog), prof).spans)
        assert spans(prog) == py, group


def test_a_world_larger_than_the_cluster_exits_2_naming_topology_nodes(tmp_path: Path):
    d = copy.deepcopy(BASE)
    d["topology"] = hopper(2, 2, nodes=1)
    prof = tmp_path / "small.yaml"
    prof.write_text(yaml.safe_dump(d))
    sched = tmp_path / "s.yaml"
    sched.write_text(TIERS.format(group=list(range(8))))  # 16 ranks on 1 node x 2 GPUs
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(sched), "--profile", str(prof),
                          "--no-gantt", "-o", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert "topology.nodes: rank 2 needs GPU 2, more GPUs than 1 nodes x 2 hold" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_world_larger_than_the_placement_exits_2_naming_topology_placement(tmp_path: Path):
    # placement gives 8 of the schedule's 16 ranks a GPU: the first rank without one is named, no traceback
    d = copy.deepcopy(BASE)
    d["topology"] = hopper(2, 2, placement=[0, 1, 2, 3, 4, 5, 6, 7])
    prof = tmp_path / "placed.yaml"
    prof.write_text(yaml.safe_dump(d))
    sched = tmp_path / "s.yaml"
    sched.write_text(TIERS.format(group=list(range(8))))
    out = subprocess.run([sys.executable, "-m", "schedsim", "predict", str(sched), "--profile", str(prof),
                          "--no-gantt", "-o", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert "topology.placement: rank 8 has no GPU (placement lists 8 ranks)" in out.stderr
    assert "fix: " in out.stderr and "Traceback" not in out.stderr


def test_a_profile_derives_from_its_base(tmp_path: Path):
    h200, dgx = load_profile("h200"), load_profile("dgx_h100")
    # dgx_h100 states only what differs from h200: the GEMM table and launch rows are h200's
    assert dgx.gemm == h200.gemm and dgx.launch == h200.launch and dgx.power == h200.power
    assert (dgx.gpu.hbm_GBps, h200.gpu.hbm_GBps) == (2905.0, 4159.7) and dgx.gpu.sms == h200.gpu.sms == 132
    # mappings merge key by key: topology.fabric gains nodes_per_leaf, keeps the rest stated
    assert dgx.topology.fabric is not None and dgx.topology.fabric.nodes_per_leaf == 32
    assert dgx.topology.nccl_within_node
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: h201\nname: x\n")
    with pytest.raises(ProfileError, match="base: 'h201' is not a shipped profile"):
        load_profile(str(bad))


def test_bases_chain_with_cycles_and_depth_refused(tmp_path: Path):
    # dgx_h100 derives from h200; a profile on dgx_h100 gets h200's GEMM table, dgx_h100's HBM, its own NICs
    deep = tmp_path / "deep.yaml"
    deep.write_text("base: dgx_h100\nname: x\ntopology: {nics: {bandwidth_Gbps: 200}}\n")
    got, h200, dgx = load_profile(str(deep)), load_profile("h200"), load_profile("dgx_h100")
    assert got.gemm == h200.gemm and got.gpu.hbm_GBps == dgx.gpu.hbm_GBps == 2905.0
    assert got.topology.nics is not None and got.topology.nics.bandwidth_Gbps == 200
    assert got.topology.nics.per_node == 8 and got.name == "x"
    # a chain of files: c on b on deep
    (tmp_path / "b.yaml").write_text("base: deep.yaml\nname: b\n")
    (tmp_path / "c.yaml").write_text("base: b.yaml\nname: c\ngpu: {sms: 100}\n")
    c = load_profile(str(tmp_path / "c.yaml"))
    assert (c.name, c.gpu.sms, c.gpu.hbm_GBps, c.topology.nics.bandwidth_Gbps if c.topology.nics else 0) == \
        ("c", 100, 2905.0, 200)
    # a cycle is refused, naming it
    (tmp_path / "p.yaml").write_text("base: q.yaml\nname: p\n")
    (tmp_path / "q.yaml").write_text("base: p.yaml\nname: q\n")
    with pytest.raises(ProfileError, match=r"base: 'p.yaml' makes a cycle of bases: .*p.yaml -> .*q.yaml -> .*p.yaml"):
        load_profile(str(tmp_path / "p.yaml"))
    # depth: 9 files chained onto h200 exceed MAX_BASE_DEPTH 8
    (tmp_path / "l0.yaml").write_text("base: h200\nname: l0\n")
    for i in range(1, 10):
        (tmp_path / f"l{i}.yaml").write_text(f"base: l{i - 1}.yaml\nname: l{i}\n")
    assert load_profile(str(tmp_path / "l7.yaml")).name == "l7"
    with pytest.raises(ProfileError, match="more than 8 profiles chained by base:"):
        load_profile(str(tmp_path / "l8.yaml"))


def test_execute_exports_the_schedules_nccl_env(monkeypatch):
    from executor.execute import _nccl_env

    monkeypatch.delenv("NCCL_ALGO", raising=False)
    monkeypatch.setenv("NCCL_PROTO", "LL")  # set by the user: kept
    _nccl_env({"NCCL_ALGO": "ring", "NCCL_PROTO": "Simple", "CUDA_DEVICE_MAX_CONNECTIONS": 1})
    import os

    assert (os.environ["NCCL_ALGO"], os.environ["NCCL_PROTO"]) == ("ring", "LL")
    monkeypatch.delenv("NCCL_MIN_CTAS", raising=False)
    _nccl_env({"NCCL_MIN_CTAS": 24})
    assert os.environ["NCCL_MIN_CTAS"] == "24"


TWO_HOST_LOG = """# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20
#  Rank  0 Group  0 Pid   6899 on nodeA device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6900 on nodeA device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid   6733 on nodeB device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid   6734 on nodeB device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576        262144     float     sum      -1    203.2    5.16    7.74      0    207.2    5.06    7.59      0
     2097152        524288     float     sum      -1    254.0    8.26   12.39      0    252.9    8.29   12.44      0
"""


def test_a_multi_node_table_times_only_groups_over_as_many_nodes(tmp_path: Path):
    from executor.calibrate_logs import profile_from_nccl_tests
    from schedsim.network.nccl_tests import parse_nccl_tests

    log = parse_nccl_tests(TWO_HOST_LOG, collective="all_reduce")
    assert (log.nranks, log.nodes) == (4, 2)
    f = tmp_path / "ar.log"
    f.write_text(TWO_HOST_LOG)
    d = profile_from_nccl_tests([f], out=tmp_path / "p.yaml", name="p", base="h200x2", collective="all_reduce",
                                nranks=None)
    assert d["collectives"]["nodes"] == {"all_reduce": {4: 2}}
    cm = CostModel(load_profile(str(tmp_path / "p.yaml")))
    # over 2 nodes x 2 ranks: the table, busbw 1 MiB x 2(n-1)/n / 203.2 us (the lesser half; printed 7.74 GB/s),
    # which gives back the log's time to the table's 6 digits
    assert cm.net.collective("all_reduce", MiB, (0, 1, 8, 9)) == pytest.approx(203.2e-6, rel=1e-6)
    # 4 ranks inside one node: not this table (links.nvlink alpha-beta of h200x2)
    link = cm.profile.links["nvlink"]
    assert cm.net.collective("all_reduce", MiB, (0, 1, 2, 3)) == pytest.approx(
        6 * link.latency_us * 1e-6 + 1.5 * MiB / (link.bandwidth_GBps * 1e9), rel=1e-9)


def test_a_multi_node_table_is_not_overruled_by_a_model_of_its_node(tmp_path: Path):
    """The node floor (``NetworkModel._node_floor``: across nodes no more busbw than on the fullest node's ranks)
    took the node's part from ``links.pcie``'s alpha-beta on a base without a topology (``pcie2``, assumed 10 µs,
    7.65 GB/s) and overruled the log's own times: 1 MiB over 2 nodes x 2 ranks 235.6 µs for the measured 203.2,
    2 MiB 441.2 for 252.9. A group its table times is bounded only by a measured table of the node's ranks."""
    from executor.calibrate_logs import profile_from_nccl_tests
    from schedsim.network.links import bus_factor

    f = tmp_path / "ar.log"
    f.write_text(TWO_HOST_LOG)
    profile_from_nccl_tests([f], out=tmp_path / "p.yaml", name="p", base="pcie2", collective="all_reduce",
                            nranks=None)
    cm = CostModel(load_profile(str(tmp_path / "p.yaml")))
    group = (0, 1, 8, 9)  # pcie2: 8 GPUs a node
    assert cm.net.collective("all_reduce", MiB, group) == pytest.approx(203.2e-6, rel=1e-6)
    assert cm.net.collective("all_reduce", 2 * MiB, group) == pytest.approx(252.9e-6, rel=1e-5)  # 6 digits
    # a group no table times still takes the floor: 4 ranks over 2 nodes as 2 + 2 of 6 ranks (no 6-rank table)
    six = (0, 1, 2, 8, 9, 10)
    local = cm.net.collective("all_reduce", MiB, (0, 1, 2))
    assert cm.net.collective("all_reduce", MiB, six) >= local * bus_factor("all_reduce", 6) / bus_factor(
        "all_reduce", 3) * (1 - 1e-12)


@pytest.mark.parametrize("name", ["h200", "h200x2", "h200_calibrated", "dgx_h100", "dgx_a100", "gb200_nvl72",
                                  "pcie2", "rtx3090_pcie1x4"])
def test_crossing_the_node_boundary_never_raises_busbw(name: str) -> None:
    """Every shipped profile: a collective over ``g + k`` ranks (past one node of ``g`` GPUs) has busbw at most
    that of the same size on the node's ``g`` ranks (nccl-tests busbw = bytes x bus factor / time), so never
    less time for all_reduce; h200 broke it (one node by links.nvlink 5.30 ms, two by NVLS-tree 4.43 ms at 1 GiB)."""
    from schedsim.network.links import bus_factor

    prof = load_profile(name)
    cost = CostModel(prof)
    g = prof.topology.gpus_per_node
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"):
        for nbytes in (1 << 10, 1 << 20, 1 << 26, 1 << 30):
            one = cost.net.collective(kind, nbytes, tuple(range(g)))
            for n in (g + 1, 2 * g):
                many = cost.net.collective(kind, nbytes, tuple(range(n)))
                assert nbytes * bus_factor(kind, n) / many <= nbytes * bus_factor(kind, g) / one * (1 + 1e-9), \
                    (kind, nbytes, n, many, one)
                if kind == "all_reduce":
                    assert many >= one


def test_ring_graph_fallback_never_outruns_the_links():
    # no NCCL speed (slowest 0.12 GB/s across nodes) fits a 0.001 Gb/s NIC: one channel at the NIC's 1.25e-4 GB/s,
    # not NCCL's 0.1; in one node, one channel at a 0.05 GB/s scale-up link
    assert ring_graph("hopper", 370.8, 8, 8, 0.001 / 8, True) == Graph(1, 0.000125, 0.000125)
    assert ring_graph("hopper", 0.05, 8, 8, 50.0, False) == Graph(1, 0.05, 0.05)


_KINDS_INTO_NODE = {"all_reduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
                    "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpn=st.sampled_from([1, 2, 4, 8]), nics=st.integers(1, 8), nic_exp=st.floats(-3.0, 3.5),
       up_exp=st.floats(-2.0, 3.3), kind=st.sampled_from(["nvswitch", "nvlink", "pcie"]), nvls=st.booleans(),
       arch=st.sampled_from(["volta", "ampere", "hopper", "blackwell"]), nodes=st.integers(2, 8),
       size_exp=st.integers(0, 34), coll=st.sampled_from(sorted(_KINDS_INTO_NODE) + ["all_to_all"]))
def test_no_collective_beats_the_nics_of_a_node(gpn: int, nics: int, nic_exp: float, up_exp: float, kind: str,
                                                nvls: bool, arch: str, nodes: int, size_exp: int, coll: str) -> None:
    """Random topologies: a collective over ``nodes`` full nodes takes at least the bytes one node must receive
    (all_reduce 2S(N-1)/N, all_gather / reduce_scatter S(N-1)/N, broadcast / reduce S; all_to_all: its ``gpn``
    ranks' S/n to each of the n - gpn ranks elsewhere) over the line rate of all its NICs."""
    nic_Gbps = 10.0 ** nic_exp
    topo = {"gpus_per_node": gpn, "arch": arch, "cpu_vendor": "intel",
            "scale_up": {"kind": kind, "bandwidth_GBps": 10.0 ** up_exp, "nvls": nvls and kind == "nvswitch",
                         "source": "test"},
            "nics": {"per_node": nics, "bandwidth_Gbps": nic_Gbps, "source": "test"}}
    net = NcclNetwork(profile(topo))
    size, n = float(1 << size_exp), nodes * gpn
    got = net.collective(coll, size, tuple(range(n)))
    assert got is not None
    into = gpn * (n - gpn) * size / n / n if coll == "all_to_all" else _KINDS_INTO_NODE[coll](nodes) * size
    assert got.seconds >= into / (nics * nic_Gbps / 8 * 1e9) * (1 - 1e-9), (got, into)


def test_blackwell_nvls_tree_rule_reads_the_nics_own_speed_not_the_oversubscribed_share(monkeypatch: Any) -> None:
    # ncclNvlsTreeSm100Tuning reads comm->minNetBw, the NICs' speed as the net plugin reports it (400 Gb/s -> 50 GB/s);
    # NCCL knows nothing of a spine's oversubscription, which halves the time-side share across leaves to 25 GB/s
    # (test_oversubscribed_spine_slows_groups_across_leaves). 25 would fall below the rule's 48 GB/s branch.
    import schedsim.network as network

    seen: list[float] = []
    real = network.nvls_tree_fill

    def spy(nbytes: float, t: Any, nic_bw: float = 50.0) -> float:
        seen.append(nic_bw)
        return real(nbytes, t, nic_bw)

    monkeypatch.setattr(network, "nvls_tree_fill", spy)
    topo = {**hopper(8, 8, nodes=4, fabric={"nodes_per_leaf": 2, "oversubscription": 2.0, "source": "test"}),
            "arch": "blackwell"}
    got = forced(topo, "nvlstree", "Simple").collective("all_reduce", 1 << 30, tuple(range(32)))
    assert got is not None and seen and set(seen) == {50.0}
