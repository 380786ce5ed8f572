"""The network crossings on a tree's, NVLS-tree's, PAT's, NVLS's and CollNet's longest chain across fabric leaves
(:func:`schedsim.network.net_crossings`), each crossing weighed by whether its two nodes share a leaf, checked
against a brute-force longest path over NCCL's double binary tree, transcribed here line by line from
``ncclGetBtree`` / ``ncclGetDtree`` (src/graph/trees.cc, NVIDIA/nccl), and the latency they add to a run.

A tree all_reduce reduces up a tree to its root and broadcasts down it: its longest chain is a path from a node
up to the root and from the root down to a node; NCCL runs its two trees at once (half the channels each), so the
chain is the heavier tree's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from schedsim.network import dtree_parents, net_crossings, tree_depths
from tests.network.test_network import forced, hopper, us


def btree_parent(nranks: int, rank: int) -> int:
    """``ncclGetBtree``'s ``*u`` (src/graph/trees.cc), line by line."""
    bit = 1
    while bit < nranks:
        if bit & rank:
            break
        bit <<= 1
    if rank == 0:
        return -1
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    return up


def dtree_parent(nranks: int, rank: int) -> tuple[int, int]:
    """``ncclGetDtree``'s ``*s0`` and ``*s1``: the second tree shifted (odd ``nranks``) or mirrored (even)."""
    s0 = btree_parent(nranks, rank)
    if nranks % 2 == 1:
        u = btree_parent(nranks, (rank - 1 + nranks) % nranks)
        s1 = -1 if u == -1 else (u + 1) % nranks
    else:
        u = btree_parent(nranks, nranks - 1 - rank)
        s1 = -1 if u == -1 else nranks - 1 - u
    return s0, s1


def longest_tree_chain(n: int, leaves: tuple[int, ...], hop: float, spine: float) -> float:
    """The heaviest up-then-down path through either of NCCL's trees over ``n`` nodes, walking every node's path
    to the root (each edge ``hop``, ``+ spine`` between leaves): the heaviest path up plus the heaviest down."""
    best = 0.0
    for t in (0, 1):
        parent = [dtree_parent(n, r)[t] for r in range(n)]
        to_root = []
        for r in range(n):
            w, x = 0.0, r
            while parent[x] != -1:
                w += hop + spine * (leaves[x] != leaves[parent[x]])
                x = parent[x]
            to_root.append(w)
        best = max(best, max(a + b for a, b in itertools.product(to_root, to_root)))
    return best


@pytest.mark.parametrize("n", list(range(1, 70)) + [127, 128, 129, 1000])
def test_dtree_parents_are_nccls_trees(n: int) -> None:
    first, second = dtree_parents(n)
    assert first.tolist() == [dtree_parent(n, r)[0] for r in range(n)]
    assert second.tolist() == [dtree_parent(n, r)[1] for r in range(n)]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 31, 64])
def test_one_leaf_trees_cross_twice_their_depth(n: int) -> None:
    # every edge one hop: 2 x ceil(log2 n), NCCL's own count (tuning.cc: 2 * log2i(nNodes) network steps ...)
    assert net_crossings("allreduce", "tree", n, 8) == longest_tree_chain(n, (0,) * n, 1.0, 0.0) \
        == 2 * (n - 1).bit_length()


@pytest.mark.parametrize("algo", ["tree", "nvls_tree"])
@pytest.mark.parametrize(("n", "per_leaf"), [(2, 1), (3, 2), (4, 2), (4, 3), (5, 2), (6, 4), (8, 4), (8, 3),
                                             (9, 4), (12, 5), (16, 4), (17, 8), (33, 16)])
def test_tree_crossings_between_leaves_are_the_longest_path(algo: str, n: int, per_leaf: int) -> None:
    leaves = tuple(i // per_leaf for i in range(n))
    got = net_crossings("allreduce", algo, n, 8, (), 1.0, leaves, 2.0)
    assert got == longest_tree_chain(n, leaves, 1.0, 2.0)
    assert got <= 2 * (n - 1).bit_length() * 3.0  # never more than the bound every crossing at 3 hops


def test_tree_crossings_with_scattered_leaves_are_the_longest_path() -> None:
    rng = np.random.default_rng(7)
    for n in (3, 6, 10, 21):
        for _ in range(5):
            leaves = tuple(int(x) for x in rng.integers(0, 3, n))
            if len(set(leaves)) < 2:
                continue
            assert net_crossings("allreduce", "tree", n, 8, (), 0.5, leaves, 3.0) == \
                pytest.approx(longest_tree_chain(n, leaves, 0.5, 3.0), rel=1e-12)


def test_tree_depths_by_hand() -> None:
    # 8 nodes, 4 a leaf (0 0 0 0 1 1 1 1), 1 + 2 between leaves. First tree (ncclGetBtree): 0-4 (3), 4-2 (3),
    # 4-6, 2-1, 2-3, 6-5, 6-7 (1 each): 1 and 3 sit 3 + 3 + 1 = 7 deep. Mirror: 7-3 (3), 3-5 (3), 3-1, 5-6, 5-4,
    # 1-2, 1-0: 6 and 4 sit 7 deep. Chain 2 x 7 = 14 (every crossing at 3 hops: 2 x 3 x 3 = 18)
    leaves = (0, 0, 0, 0, 1, 1, 1, 1)
    first, second = dtree_parents(8)
    assert tree_depths(first, leaves, 1.0, 2.0).tolist() == [0.0, 7.0, 6.0, 7.0, 3.0, 5.0, 4.0, 5.0]
    assert tree_depths(second, leaves, 1.0, 2.0).tolist() == [5.0, 4.0, 5.0, 3.0, 7.0, 6.0, 7.0, 0.0]
    assert net_crossings("allreduce", "tree", 8, 8, (), 1.0, leaves, 2.0) == 14.0


def test_pat_nvls_and_collnet_across_leaves() -> None:
    # PAT, 4 nodes: step 1 pairs nodes 1 apart, step 2 nodes 2 apart. Leaves 0 1 0 1 (a placement that alternates):
    # every 1-apart pair spans leaves (3), no 2-apart pair does (1): 4, not 2 x 3
    assert net_crossings("allgather", "pat", 4, 1, (), 1.0, (0, 1, 0, 1), 2.0) == 4.0
    assert net_crossings("allgather", "pat", 4, 1, (), 1.0, (0, 0, 1, 1), 2.0) == 6.0
    assert net_crossings("allgather", "pat", 4, 1) == 2.0
    # NVLS and CollNet: one crossing, up to the spine where the group spans leaves
    for algo in ("nvls", "collnet_direct", "collnet_chain"):
        assert net_crossings("allreduce", algo, 4, 8, (), 1.0, (0, 0, 1, 1), 2.0) == 3.0
        assert net_crossings("allreduce", algo, 4, 8, (), 1.0, (0, 0, 0, 0), 2.0) == 1.0


def test_a_tree_pays_three_switch_hops_only_on_its_crossings_between_leaves() -> None:
    # 4 nodes of 1 GPU, 3 under a leaf (leaves 0 0 0 1), 1 us a switch hop (topology.fabric.latency_us), tree LL
    # forced, all_reduce 4 KiB: first tree 0-2, 2-1 (1 each), 2-3 (3): 4 deep; mirror 3-1 (3), 1-0, 1-2 (1): 4
    # deep; 2 x 4 = 8 us more than without the hop (every crossing at 3 hops: 2 x 2 x 3 = 12)
    fabric = {"kind": "leaf_spine", "nodes_per_leaf": 3, "source": "test"}
    topo = hopper(1, 1, nodes=4)
    slow = forced({**topo, "fabric": {**fabric, "latency_us": 1.0}}, "tree", "LL")
    bare = forced({**topo, "fabric": fabric}, "tree", "LL")
    group = (0, 1, 2, 3)
    assert slow.shape(group).node_leaves == (0, 0, 0, 1)
    a, b = slow.collective("all_reduce", 4096, group), bare.collective("all_reduce", 4096, group)
    assert a is not None and b is not None and us(a) == pytest.approx(us(b) + 8.0, rel=1e-12)
