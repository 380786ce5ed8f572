"""A NIC's RDMA goodput (``topology.nics.goodput``, a share of line rate): what one send/recv stream, an
all_to_all's share and a shared NIC link move across nodes; NCCL's rings and trees keep their own channel speeds.

Times by hand. Hopper nodes, 400 Gb/s NICs (line rate 50 GB/s), goodput .96 (48 GB/s): a Simple send/recv across nodes
takes 22.4 us (NCCL's ring baseLat 8.4 + net hwLat 14.0) + bytes / 48,000 us.
"""

from __future__ import annotations

import pytest

from schedsim.errors import ProfileError
from schedsim.hardware.profile import load_profile
from schedsim.network import NcclNetwork
from tests.network.test_shared_links import TWO, profile, spans

MiB = 1 << 20


def with_goodput(gpus: int, nics: int, goodput: float | None):  # noqa: ANN201 - a HardwareProfile
    p = profile(gpus, nics)
    d = p.model_dump()
    d["topology"]["nics"]["goodput"] = goodput
    return type(p).model_validate(d)


def us(cost) -> float:  # noqa: ANN001
    return cost.seconds * 1e6


def test_a_send_across_nodes_moves_at_the_nics_goodput():
    net = NcclNetwork(with_goodput(2, 2, 0.96))
    assert us(net.p2p(0, 2, MiB)) == pytest.approx(22.4 + MiB / 48_000, rel=1e-12)
    # LL (<= 16 KiB): 6.6 + 2.7 us at half the goodput, 24 GB/s (under Hopper's llMaxBw 141)
    assert us(net.p2p(0, 2, 4096)) == pytest.approx(9.3 + 4096 / 24_000, rel=1e-12)
    # inside a node the goodput changes nothing: 8.4 + 3.4 us, a pair's 16 channels x 14 GB/s = 224 GB/s (below the
    # one-node ring graph's 12 x 30 = 360: schedsim.network.p2p_channels)
    assert us(net.p2p(0, 1, MiB)) == pytest.approx(11.8 + MiB / 224_000, rel=1e-12)
    # no goodput stated: the line rate, 50 GB/s
    assert us(NcclNetwork(with_goodput(2, 2, None)).p2p(0, 2, MiB)) == pytest.approx(22.4 + MiB / 50_000, rel=1e-12)


def test_all_to_all_across_nodes_at_the_goodput_and_rings_at_nccls_speeds():
    # 2 nodes x 2 GPUs, a NIC each: 4 MiB over 4 ranks, 1 MiB a peer; 1 MiB to the node's other GPU at 360 GB/s,
    # 2 MiB through the rank's own NIC at 48 GB/s; latency the network's Simple step, 22.4 us
    net = NcclNetwork(with_goodput(2, 2, 0.96))
    got = net.collective("all_to_all", 4 * MiB, (0, 1, 2, 3))
    assert got is not None and us(got) == pytest.approx(22.4 + 2 * MiB / 48_000, rel=1e-12)
    # an all_reduce keeps NCCL's ring/tree figures: the same with and without a goodput
    line = NcclNetwork(with_goodput(2, 2, None))
    for nbytes in (4096, MiB, 256 * MiB):
        assert net.collective("all_reduce", nbytes, (0, 1, 2, 3)) == line.collective("all_reduce", nbytes,
                                                                                      (0, 1, 2, 3))


def test_two_sends_on_one_nic_split_its_goodput():
    # 2 GPUs per node on ONE NIC of goodput 48: rank 0 sends 32 MiB to rank 2, rank 1 64 MiB to rank 3. Alone
    # each drives the NIC at 48 GB/s: T1 = 22.4 + 699.0507 = 721.4507 us, T2 = 22.4 + 1398.1013 = 1420.5013 us.
    # Together each gets 24 GB/s (half the link, which carries 48): the first ends at 2 x T1 = 1442.9013 us; the
    # second has done T1 of its T2 by then and runs the rest alone: T1 + T2 = 2141.952 us.
    t1, t2 = 22.4 + 32 * MiB / 48_000, 22.4 + 64 * MiB / 48_000
    got = spans(TWO, with_goodput(2, 1, 0.96))
    assert got["s0@r0"] == pytest.approx(2 * t1, rel=1e-9) == pytest.approx(1442.9013333, rel=1e-9)
    assert got["s1@r1"] == pytest.approx(t1 + t2, rel=1e-9) == pytest.approx(2141.952, rel=1e-9)


def test_goodput_above_line_rate_is_refused_with_the_field(tmp_path):
    f = tmp_path / "fast.yaml"
    f.write_text("base: dgx_h100\nname: fast\ntopology:\n  nics:\n    per_node: 8\n    bandwidth_Gbps: 400\n"
                 "    goodput: 1.02\n    source: test\n")
    with pytest.raises(ProfileError, match=r"topology\.nics\.goodput.*less than or equal to 1"):
        load_profile(str(f))


def test_shipped_profiles_goodput():
    # dgx_h100, h200, gb200_nvl72: .96 of 50 GB/s (ConnectX-7 at 400 Gb/s), dgx_a100 .96 of 25 (HDR: 24 GB/s, NCCL's
    # maintainer in NVIDIA/nccl-tests#119); a3_mega's 200 Gb/s TCPXO NICs: no published figure, and its base is
    # dgx_h100, so it states null (line rate)
    got = {n: load_profile(n).topology.nics for n in ("dgx_h100", "h200", "gb200_nvl72", "a3_mega", "dgx_a100")}
    assert {n: (v.goodput if v is not None else "-") for n, v in got.items()} == {
        "dgx_h100": 0.96, "h200": 0.96, "gb200_nvl72": 0.96, "a3_mega": None, "dgx_a100": 0.96}


def test_a_profile_on_a_base_with_other_nics_keeps_the_fraction(tmp_path):
    # 200 Gb/s NICs on dgx_h100's nodes: .96 of 25 GB/s = 24 GB/s (NCCL's fastest Hopper inter-node speed at or
    # below 25 is 24 too); a send of 1 MiB across nodes: 22.4 + MiB / 24,000 us
    f = tmp_path / "slow.yaml"
    f.write_text("base: dgx_h100\nname: slow\ntopology:\n  nics:\n    per_node: 8\n    bandwidth_Gbps: 200\n"
                 "    source: test\n")
    net = NcclNetwork(load_profile(str(f)))
    assert us(net.p2p(0, 8, MiB)) == pytest.approx(22.4 + MiB / 24_000, rel=1e-12)
