"""NCCL's channels for a send/recv (schedsim.network.p2p_channels) and the cap they put on it.

Expected counts are worked out beside each case from NVIDIA/nccl v2.30.7-1 (src/graph/paths.cc
``ncclTopoGetNchannels`` / ``ncclTopoComputeP2pChannels``, src/enqueue.cc ``addP2pToPlan``, src/init.cc
``computeBuffSizes``), not read back from the code. Published and measured rates check the cap.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from schedsim.gpu.cost import CostModel
from schedsim.hardware.profile import load_profile
from schedsim.network.p2p_channels import NET_CHUNK, NVL_CHUNK, op_channels, peer_channels, pow2_up

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
A100 = dict(nvlink_path_bw=240.0, arch="ampere", nic_count=1, nic_bw=25.0)


def test_pow2_up():
    assert [pow2_up(v) for v in (0, 1, 2, 3, 24, 32, 33)] == [1, 1, 2, 4, 32, 32, 64]


@pytest.mark.parametrize(("local", "nodes", "nranks", "p2pn", "since", "want"), [
    # one DGX A100: an NVLink peer 2 x int(240 / 20) = 24 channels, pow2Up -> 32, at most p2pnChannels 32
    (8, 1, 8, 32, (2, 30, 7), 32),
    # the same GPUs in a 2-node communicator: a network peer has max(1 NIC, divUp(25, 14)) = 2 -> 2 for all
    (8, 2, 16, 16, (2, 30, 7), 2),
    # before v2.29 NCCL_NCHANNELS_PER_NET_PEER = 2, the same count
    (8, 4, 32, 16, (2, 20, 0), 2),
    # v2.30: across nodes halved while perPeer x divUp(nRanks, 8) > p2pnChannels: 2 x 128 > 16 -> 1
    (8, 128, 1024, 16, (2, 30, 7), 1),
    # v2.29.2 has the same halving (src/graph/paths.cc of v2.29.2-1: perPeer x divUp(nRanks, 8) > p2pnChannels)
    (8, 128, 1024, 16, (2, 29, 0), 1),
    # before v2.29 a network peer's count is max(netCountByBw, nChannelsMax), nChannelsMax = 2 halved while
    # nChannelsMax x nRanks > p2pnChannels x 4 (v2.20.5-1 ... v2.28.9-1, ncclTopoGetNchannels): 2 x 1024 > 64 -> 1
    (8, 128, 1024, 16, (2, 28, 0), 1),
    # ... which binds past 32 ranks on a 16-channel communicator: 2 x 32 = 64 is not above 64 (2); 2 x 40 is (1)
    (8, 4, 32, 16, (2, 28, 0), 2),
    (8, 5, 40, 16, (2, 28, 0), 1),
    # one rank a node: no NVLink peer, the network's 2
    (1, 2, 2, 16, (2, 30, 7), 2),
])
def test_peer_channels(local, nodes, nranks, p2pn, since, want):
    assert peer_channels(p2pn=p2pn, local=local, nodes=nodes, nranks=nranks, since=since, **A100) == want


def test_peer_channels_400g_nic_since_2_29():
    # a 400 Gb/s NIC (50 GB/s): divUp(50, 14) = 4 from v2.29 on; 2 before
    kw = dict(p2pn=32, nvlink_path_bw=370.8, arch="hopper", nic_count=1, nic_bw=50.0, local=8, nodes=2, nranks=16)
    assert peer_channels(since=(2, 30, 7), **kw) == 4
    assert peer_channels(since=(2, 28, 0), **kw) == 2


@pytest.mark.parametrize(("nbytes", "per_peer", "p2pn", "nranks", "nodes", "chunk", "want"), [
    # 8 ranks of one node: nChannelsMin 32 -> 4 (4 x 8 = 32 <= 32); 25 MB / 4 = 6.25 MB <= 512 KiB x 32: 4
    (25e6, 32, 32, 8, 1, NVL_CHUNK, 4),
    # 128 MiB: 32 MiB > 16 MiB -> 8 (16 MiB, not above): 8
    (128 * MiB, 32, 32, 8, 1, NVL_CHUNK, 8),
    # 256 MiB: 64 -> 32 -> 16 MiB: 16
    (256 * MiB, 32, 32, 8, 1, NVL_CHUNK, 16),
    # a pair: nChannelsMin 32 -> 16 (16 x 2 = 32); 25 MB / 16 <= 16 MiB: 16
    (25e6, 32, 32, 2, 1, NVL_CHUNK, 16),
    # small: one channel per 64 KiB (minPart 512 KiB / 8): divUp(100 KiB, 64 KiB) = 2
    (100 * 1024, 32, 32, 2, 1, NVL_CHUNK, 2),
    # across nodes, 16 ranks: nChannelsMin 2 (2 x 16 = 32 > 16 -> 1); 10.5 MB / 1 > 128 KiB -> 2 (<= 2 / 2)
    (10.5e6, 2, 16, 16, 2, NET_CHUNK, 2),
])
def test_op_channels(nbytes, per_peer, p2pn, nranks, nodes, chunk, want):
    assert op_channels(nbytes, per_peer=per_peer, p2pn=p2pn, nranks=nranks, nodes=nodes, chunk=chunk) == want


def test_dgx_a100_send_in_a_pipeline_of_one_node_and_of_two():
    net = CostModel(load_profile("dgx_a100")).net.nccl
    one, two = tuple(range(8)), tuple(range(16))
    assert net.p2p_channels(25e6, one) == 4
    assert net.p2p_channels(25e6, two) == 2  # an NVLink hop of a communicator that spans nodes
    lat = net.p2p(0, 1, 25e6, one).seconds * 1e6 - 25e6 / (4 * 14.0e3)
    assert 0 < lat < 20  # NCCL's latency terms: a few µs
    # 25 MB over 4 channels of 14 GB/s: 446.4 µs plus the latency; over 2: 892.9 µs
    assert net.p2p(0, 1, 25e6, one).seconds * 1e6 == pytest.approx(446.43 + lat, abs=0.01)
    assert net.p2p(0, 1, 25e6, two).seconds * 1e6 == pytest.approx(892.86 + lat, abs=0.01)
    # across the nodes the NIC's 24 GB/s goodput (the profile's) is below 2 x 14: unchanged by the channels
    assert net.p2p(7, 8, 25e6, two).seconds == net.p2p(7, 8, 25e6).seconds


def test_published_a100_sendrecv_128mib():
    # li-plus/playground cuda/nccl.md: 8xA100 NVLink, sendrecv_perf -g 8, 128 MiB out-of-place 1211.2 us.
    # 8 channels x 14 GB/s: 134217728 B / 112 GB/s = 1198.4 us plus latency
    net = CostModel(load_profile("dgx_a100")).net.nccl
    t = net.p2p(0, 1, 128 * MiB, tuple(range(8))).seconds * 1e6
    assert t == pytest.approx(1211.2, rel=0.02)


@pytest.mark.parametrize("nbytes", [4 * MiB, 16 * MiB, 64 * MiB])
def test_measured_h200_pair_sendrecv(nbytes):
    # the h200x2 profile's measured 2-rank sendrecv table (schedsim calibrate, 2xH200, NCCL 2.28.9; busbw GB/s =
    # algbw) against the NCCL model of the h200 profile, which has no such table: a pair's 16 channels
    # (nChannelsMin 32 -> 16) x 14 GB/s = 224 GB/s cap; without it the model ran 4-64 MiB at 179-339 GB/s
    doc = yaml.safe_load((ROOT / "schedsim/hardware/profiles/h200x2.yaml").read_text())
    table = dict((float(b), bw) for b, bw in doc["collectives"]["tables"]["sendrecv"][2])
    net = CostModel(load_profile("h200")).net.nccl
    assert net.p2p_channels(nbytes, (0, 1)) == 16
    got = nbytes / net.p2p(0, 1, nbytes).seconds / 1e9
    assert got == pytest.approx(table[float(nbytes)], rel=0.05)


def test_batch_communicators_are_the_ranks_batches_connect():
    # two pipelines, 0-1-2 and 4-5 (sends both ways): each batched send/recv runs on its pipeline's communicator
    import numpy as np

    from schedsim.lower.p2p_comms import _batch_comms
    src, dst = np.array([0, 1, 2, 1, 4, 5]), np.array([1, 2, 1, 0, 5, 4])
    got = _batch_comms(src, dst, 6)
    assert got == {0: (0, 1, 2), 1: (0, 1, 2), 2: (0, 1, 2), 4: (4, 5), 5: (4, 5)}
    assert _batch_comms(src[:0], dst[:0], 6) == {}


def test_a_communicator_across_nodes_without_nics_falls_back_to_the_pair():
    # a profile without topology.nics cannot time the network: a batched send inside a node whose communicator
    # spans nodes is timed on the pair's communicator (16 channels), not refused
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.network import NcclNetwork

    d = yaml.safe_load((ROOT / "schedsim/hardware/profiles/dgx_a100.yaml").read_text())
    del d["topology"]["nics"]
    net = NcclNetwork(HardwareProfile.model_validate(d))
    assert net.p2p(0, 1, 25e6, tuple(range(16))).seconds == net.p2p(0, 1, 25e6).seconds
    assert net.p2p_channels(25e6, (0, 1)) == 16


def test_a_ring_exchange_and_the_pipeline_keep_their_own_communicators():
    # tp 2 x cp 2 x pp 2 on 8 ranks (tests/lower/test_training_cp.py): rank 0's CP ring peer is rank 2 (batched on
    # stream cp_comm, TE's CP group), its pipeline peer rank 4 (batched on pp_send/pp_recv, Megatron's PP group).
    # The two process groups are two NCCL communicators: {0, 2} and {0, 4}, not one of the ranks both connect
    # ({0, 2, 4, 6}: 8 channels a 25 MB send on a DGX A100 instead of 16)
    import numpy as np

    from schedsim.lower import lower
    from schedsim.lower.p2p_comms import batch_communicators
    from schedsim.spec.loader import load_text
    from tests.lower.test_training_cp import CP

    prog = lower(load_text(CP))
    cid, comms = batch_communicators(prog)
    names = np.array([prog.name_table[i] for i in prog.name_id.tolist()])
    cp = np.flatnonzero((prog.rank == 0) & np.char.startswith(names, "F0.0.l0.cp_send"))
    pp = np.flatnonzero((prog.rank == 0) & (prog.peer == 4) & (prog.batch >= 0))
    assert len(cp) and len(pp)
    assert {comms[c] for c in cid[cp].tolist()} == {(0, 2)}
    assert {comms[c] for c in cid[pp].tolist()} == {(0, 4)}
    assert (cid[prog.batch < 0] == -1).all()
    net = CostModel(load_profile("dgx_a100")).net.nccl
    assert net.p2p_channels(25e6, (0, 2)) == 16 and net.p2p_channels(25e6, (0, 2, 4, 6)) == 8


def test_explain_times_a_batched_send_on_the_communicator_the_simulator_does():
    # 1F1B batches the pipeline's p2p: pp 4 of tp 2 on one DGX A100, the pipeline group (0, 2, 4, 6); a send of
    # s·b·h·2 = 4096 x 4096 x 2 = 32 MiB: nChannelsMin 32 -> 8 for 4 ranks (8 x 4 = 32), 4 MiB parts: 8 channels x
    # 14 GB/s, where its pair's communicator gives 16 (nChannelsMin 16; 2 MiB parts)
    from schedsim.lower import lower
    from schedsim.network.explain import explain_rows
    from schedsim.spec.loader import load_text
    from tests.spec.test_training_block import TINY

    text = TINY.replace("hidden_size: 64", "hidden_size: 4096").replace("seq_length: 32", "seq_length: 4096")
    text = text.replace("num_attention_heads: 4", "num_attention_heads: 32").replace("  pp: 2\n", "  pp: 4\n")
    text = text.replace("num_layers: 2", "num_layers: 4")
    cost = CostModel(load_profile("dgx_a100"))
    rows = [r for r in explain_rows(lower(load_text(text)), cost) if r["kind"] == "send" and r["group"] == "0->2"]
    assert len(rows) == 1 and rows[0]["bytes"] == 32 * MiB
    net = cost.net.nccl
    assert net.p2p_channels(32 * MiB, (0, 2, 4, 6)) == 8 and net.p2p_channels(32 * MiB, (0, 2)) == 16
    assert rows[0]["time_us"] == pytest.approx(net.p2p(0, 2, 32 * MiB, (0, 2, 4, 6)).seconds * 1e6, rel=1e-12)
