"""The network crossings on a ring's longest dependent chain (:func:`schedsim.network.net_crossings`), checked
against a brute-force longest path over the ring's step dependencies, and the latency they add to a run.

The ring's steps: rank ``r``'s step ``k`` (``k = 0 .. s - 1``) receives over the edge ``r - 1 -> r`` and waits
for rank ``r - 1``'s step ``k - 1`` (the data it forwards: a crossing when that edge leaves a node) and its own
step ``k - 1`` (no crossing); ``s = 2(n - 1)`` for all_reduce, ``n - 1`` for all_gather.
"""

from __future__ import annotations

import pytest

from schedsim.network import NcclNetwork, net_crossings
from tests.network.test_network import forced, hopper, profile, us


def longest_chain(counts: tuple[int, ...], coll: str, leaves: tuple[int, ...] = (), spine: float = 0.0) -> float:
    """Most crossings on any path through the ring's step dependencies, ranks ``counts[i]`` on node ``i`` in
    ring order (dynamic programming over the steps, one rank at a time); a crossing between nodes of different
    ``leaves`` weighs ``1 + spine``."""
    node = [i for i, c in enumerate(counts) for _ in range(c)]
    leaf = leaves or (0,) * len(counts)
    n = len(node)
    # the edge into r leaves a node (r - 1 wraps), and maybe its leaf
    cross = [(node[r - 1] != node[r]) * (1 + spine * (leaf[node[r - 1]] != leaf[node[r]])) for r in range(n)]
    steps = (2 if coll == "allreduce" else 1) * (n - 1)
    best = cross[:]  # step 0: its own receive
    for _ in range(1, steps):
        best = [max(best[r], best[r - 1] + cross[r]) for r in range(n)]
    return max(best)


@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reducescatter"])
@pytest.mark.parametrize("nodes", [2, 3, 4, 5])
@pytest.mark.parametrize("ppn", [1, 2, 3, 8])
def test_even_ring_crossings_are_the_longest_path(coll: str, nodes: int, ppn: int) -> None:
    assert net_crossings(coll, "ring", nodes, ppn) == longest_chain((ppn,) * nodes, coll)


UNEVEN = [(3, 1), (1, 3), (2, 1, 1), (3, 1, 2), (8, 1), (1, 8, 8), (5, 2, 1, 3), (1, 1, 3, 3), (1, 3, 1, 3),
          (4, 1, 1, 1, 1), (8, 8, 8, 1, 2)]


@pytest.mark.parametrize("coll", ["allreduce", "allgather"])
@pytest.mark.parametrize("counts", UNEVEN)
def test_uneven_ring_crossings_are_the_longest_path(coll: str, counts: tuple[int, ...]) -> None:
    got = net_crossings(coll, "ring", len(counts), sum(counts) // len(counts), counts)
    assert got == longest_chain(counts, coll)


def test_three_and_one_ranks_cross_four_times_not_three():
    # 3 + 1 ranks (0 1 2 | 3): boundaries on the edges 2 -> 3 and 3 -> 0. all_reduce's 6 steps from edge 2: edges
    # 2, 3, 0, 1, 2, 3 cross 4 times; ranks // nodes = 2 a node would give ceil(6 / 2) = 3. all_gather's 3 steps:
    # 2, 3, 0: 2 (as even)
    assert net_crossings("allreduce", "ring", 2, 2, (3, 1)) == 4
    assert net_crossings("allgather", "ring", 2, 2, (3, 1)) == 2
    # 8 + 1 (edges 7 and 8 of 9): all_reduce 16 steps from edge 7: 7, 8, 0..8, 0..4: 4 crossings; ceil(16 / 4) = 4.
    # 5 + 2 + 1 + 3 (edges 4, 6, 7, 10 of 11), all_gather 10 steps from edge 4: 4..10, 0, 1, 2: 4 of 4
    assert net_crossings("allreduce", "ring", 2, 4, (8, 1)) == 4
    assert net_crossings("allgather", "ring", 4, 2, (5, 2, 1, 3)) == 4
    assert net_crossings("allreduce", "ring", 4, 2, (5, 2, 1, 3)) == 8  # 20 steps from edge 4: 4..10, 0..10, 0, 1


def test_an_uneven_group_pays_the_transport_latency_on_each_crossing_of_its_chain():
    # 2 nodes of 4 GPUs, ranks 0, 1, 2 on node 0 and 4 on node 1 (3 + 1), ring LL forced, 3 us a crossing
    # (topology.nics.transport_latency_us): all_reduce 4 x 3 = 12 us more than without it, all_gather 2 x 3
    topo = hopper(4, 4, nodes=2)
    slow = forced({**topo, "nics": {**topo["nics"], "transport_latency_us": 3.0}}, "ring", "LL")
    bare = forced(topo, "ring", "LL")
    group = (0, 1, 2, 4)
    assert slow.shape(group).counts == (3, 1)
    for kind, crossings in (("all_reduce", 4), ("all_gather", 2)):
        a, b = slow.collective(kind, 4096, group), bare.collective(kind, 4096, group)
        assert a is not None and b is not None and us(a) == pytest.approx(us(b) + crossings * 3.0, rel=1e-12)


@pytest.mark.parametrize("coll", ["allreduce", "allgather"])
@pytest.mark.parametrize(("counts", "leaves"), [((1, 1, 1, 1), (0, 0, 1, 1)), ((2, 2, 2, 2), (0, 0, 1, 1)),
                                                ((3, 1, 2), (0, 1, 1)), ((1, 1, 1, 1, 1), (0, 0, 1, 1, 2)),
                                                ((8, 8, 8), (0, 1, 2)), ((1, 2, 1, 2), (0, 0, 0, 1))])
def test_crossings_between_leaves_weigh_the_spine_hops_on_the_longest_path(
        coll: str, counts: tuple[int, ...], leaves: tuple[int, ...]) -> None:
    even = len(set(counts)) == 1
    got = net_crossings(coll, "ring", len(counts), counts[0], () if even else counts, 1.0, leaves, 2.0)
    assert got == longest_chain(counts, coll, leaves, 2.0)


def test_only_crossings_between_leaves_take_three_switch_hops():
    # 4 nodes, 2 under a leaf (leaves 0 0 1 1), 1 us a switch hop (topology.fabric.latency_us), ring LL forced:
    # crossings n0-n1 1 hop, n1-n2 3 (leaf, spine, leaf), n2-n3 1, n3-n0 3, not 3 each once the group spans leaves
    fabric = {"kind": "leaf_spine", "nodes_per_leaf": 2, "source": "test"}
    for gpus, want in ((1, {"all_reduce": 12.0, "all_gather": 7.0, "broadcast": 5.0}),
                       (2, {"all_reduce": 15.0, "all_gather": 8.0, "broadcast": 5.0})):
        # 1 GPU a node: all_reduce's 6 steps, a lap (1 + 3 + 1 + 3) and 1 + 3 = 12 (was 6 x 3 = 18); all_gather's
        # 3: 3 + 1 + 3 = 7 (was 9); broadcast from rank 0: n0-n1-n2-n3, 1 + 3 + 1 = 5 (was 9).
        # 2 GPUs a node (crossings on edges 1, 3, 5, 7 of 8): all_reduce's 14 steps from edge 3: 3 + 1 + 3, a lap
        # (8), edge 0: 15 (was ceil(14 / 2) x 3 = 21); all_gather's 7 from edge 3: 3 + 1 + 3 + 1 = 8 (was 12)
        topo = hopper(gpus, gpus, nodes=4)
        slow = forced({**topo, "fabric": {**fabric, "latency_us": 1.0}}, "ring", "LL")
        bare = forced({**topo, "fabric": fabric}, "ring", "LL")
        group = tuple(range(4 * gpus))
        assert slow.shape(group).node_leaves == (0, 0, 1, 1) and bare.shape(group).node_leaves == ()
        for kind, extra in want.items():
            a, b = slow.collective(kind, 4096, group), bare.collective(kind, 4096, group)
            assert a is not None and b is not None and us(a) == pytest.approx(us(b) + extra, rel=1e-12), kind
    # a send within a leaf: 1 hop; across leaves: 3
    slow = NcclNetwork(profile({**hopper(1, 1, nodes=4), "fabric": {**fabric, "latency_us": 1.0}}))
    bare = NcclNetwork(profile({**hopper(1, 1, nodes=4), "fabric": fabric}))
    assert us(slow.p2p(0, 1, 4096)) == pytest.approx(us(bare.p2p(0, 1, 4096)) + 1.0, rel=1e-12)
    assert us(slow.p2p(0, 2, 4096)) == pytest.approx(us(bare.p2p(0, 2, 4096)) + 3.0, rel=1e-12)
