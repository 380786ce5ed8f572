"""The cost of an all_to_all with per-peer sizes (:meth:`schedsim.network.model.NetworkModel.all_to_all_split`):
a rank's time is set by its busiest link (sent or received, full duplex; its own piece not counted), and the
collective by its busiest rank."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spec.test_all_to_all_splits import HEAD, MATRIX


def test_toy_links_by_hand(toy_profile: Any) -> None:
    """Toy profile (NVLink 100 GB/s, 1 µs; link tables, (n − 1) latency steps): a rank takes 2 · 1 µs + max(Σ sent,
    Σ received) / 100 GB/s, the uniform all_to_all whose rank moves as much; the simulated collective lasts its
    busiest rank's time (rank 2 sends 800 bytes, rank 0 sends 12,000, rank 1 receives 4,400: 12,000 bytes)."""
    from schedsim.api import lower_spec
    from schedsim.gpu.cost import CostModel
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    cost = CostModel(toy_profile)
    net = cost.net
    g = (0, 1, 2)
    for rank, send, recv in ((0, (0, 4000, 8000), (0, 12, 400)), (1, (12, 0, 0), (4000, 0, 400)),
                             (2, (400, 400, 0), (8000, 0, 0))):
        want = 2e-6 + max(sum(send), sum(recv)) / 100e9
        assert net.all_to_all_split(rank, g, send, recv) == pytest.approx(want, rel=1e-12)
        assert net.all_to_all_split(rank, g, send, recv) == pytest.approx(
            net.collective("all_to_all", 3 / 2 * max(sum(send), sum(recv)), g), rel=1e-12)
    # what a rank sends itself is a local copy: not on its links
    assert net.all_to_all_split(0, g, (5000, 4000, 8000), (7, 12, 400)) == net.all_to_all_split(
        0, g, (0, 4000, 8000), (0, 12, 400))
    tl = simulate(lower_spec(load_text(HEAD + MATRIX)), toy_profile)
    assert {round((s.end_s - s.start_s) * 1e12) for s in tl.spans} == {round((2e-6 + 12000 / 100e9) * 1e12)}


def test_nccl_model_one_node_matches_the_uniform_all_to_all() -> None:
    """dgx_h100 (NCCL's model on its topology), 4 ranks of one node: a rank's part equals the uniform all_to_all
    of n/(n−1) · its larger direction (the same links, the same bytes on the busiest one)."""
    from schedsim.hardware.profile import load_profile
    from schedsim.network.model import NetworkModel

    net = NetworkModel(load_profile("dgx_h100"), 0.0)
    g = (0, 1, 2, 3)
    send, recv = (0.0, 1e6, 2e6, 0.0), (0.0, 4e6, 0.0, 1e6)
    assert net.all_to_all_split(0, g, send, recv) == pytest.approx(net.collective("all_to_all", 4 / 3 * 5e6, g))


def test_nccl_model_across_nodes_splits_local_and_remote_bytes() -> None:
    """dgx_h100, 16 ranks over 2 nodes: bytes for a peer on another node go through the NICs, slower than the same
    bytes to a peer on the rank's node; both at once take the longer of the two (the tiers run concurrently)."""
    from schedsim.hardware.profile import load_profile
    from schedsim.network.model import NetworkModel

    net = NetworkModel(load_profile("dgx_h100"), 0.0)
    g = tuple(range(16))
    x = 64e6
    local = tuple(x if j == 1 else 0.0 for j in g)
    remote = tuple(x if j == 9 else 0.0 for j in g)
    both = tuple(x if j in (1, 9) else 0.0 for j in g)
    t_local, t_remote = net.all_to_all_split(0, g, local, local), net.all_to_all_split(0, g, remote, remote)
    assert t_remote > 2 * t_local
    assert net.all_to_all_split(0, g, both, both) == pytest.approx(max(t_local, t_remote), rel=1e-3)


def test_nccl_model_own_piece_does_not_pick_the_protocol() -> None:
    """dgx_h100: what a rank sends itself is a local copy, so neither its time nor the protocol (chosen by the
    largest message to a peer: 100 bytes, LL) depends on it; a 1 GB piece to itself left the 100-byte exchange at
    Simple's latency."""
    from schedsim.hardware.profile import load_profile
    from schedsim.network.model import NetworkModel

    net = NetworkModel(load_profile("dgx_h100"), 0.0)
    g = (0, 1)
    bare = net.all_to_all_split(0, g, (0.0, 100.0), (0.0, 100.0))
    assert net.all_to_all_split(0, g, (1e9, 100.0), (1e9, 100.0)) == bare
    assert bare == pytest.approx(net.collective("all_to_all", 200.0, g), rel=1e-12)
