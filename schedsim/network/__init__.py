"""The communication model: collective and point-to-point times on a cluster topology.

The simulator asks one question, through :class:`schedsim.gpu.cost.CostModel`: how long does this collective
(or send/recv) take on these ranks, alone. A profile whose ``topology`` has a ``scale_up`` domain (and
``nics`` across nodes) answers it here, with NCCL's own cost model (:mod:`schedsim.network.tuning`, NCCL
2.30.7's constants, or those of the profile's ``nccl.version``) on that topology; other profiles keep the
link classes and tables of :mod:`schedsim.network.links`.

Interface
---------
``NcclNetwork(profile).collective(kind, nbytes, ranks) -> CollectiveCost | None``
    ``kind`` a schedsim collective kind, ``nbytes`` the nccl-tests size column (bytes), ``ranks`` global
    ranks. None when the profile leaves the group to its tables (``has_table``: a measured table for that
    kind, size and number of nodes; or inside one node with ``topology.nccl_within_node`` false).
``NcclNetwork(profile).p2p(src, dst, nbytes) -> CollectiveCost``
    One send/recv of ``nbytes`` from rank ``src`` to ``dst``.
``schedsim.network.share.link_share(...) -> LinkShare | None``; ``LinkShare.event(group, started) -> changed``
    Transfers across nodes that run at once share NICs and leaf uplinks max-min fair; the simulator reports each
    flow's start and end and reads the shares back (:mod:`schedsim.network.share`).

Ranks sit on GPUs in order, or as ``topology.placement`` says; node = GPU // ``gpus_per_node``.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from schedsim.arrays import unique
from schedsim.errors import ProfileError
from schedsim.kinds import KINDS
from schedsim.network.p2p_channels import NET_CHUNK, NVL_CHUNK, P2P_CHANNEL_GBPS, op_channels, peer_channels, pow2_up
from schedsim.network.pcie import path_bandwidth
from schedsim.network.tuning import (
    MAXCHANNELS,
    NO_CHANNEL_ENV,
    PROTOS,
    TREE_PATTERN_BW,
    ChannelEnv,
    Graph,
    TuneInput,
    algo_time,
    channel_ceiling,
    channel_steps,
    collnet_direct_graph,
    comm_channels,
    constants_for,
    correction_steps,
    cta_bw_scale,
    nvls_graph,
    nvls_tree_fill,
    p2p_step,
    parse_nccl_list,
    ring_graph,
    runtime_bw_scale,
    runtime_channels,
    tune,
)

if TYPE_CHECKING:
    from schedsim.hardware.profile import HardwareProfile

__all__ = ["CollectiveCost", "NcclNetwork", "GroupShape", "fewest_graph", "net_crossings", "rank_nodes",
           "dtree_parents", "tree_depths", "TWO_NODE_TREE", "ONE_EDGE_TREE_PATTERN", "tree_run_scale",
           "EXPOSED_RING_PROTOS", "exposed_ring"]

_Table = dict[tuple[str, str], tuple[float, float]]

#: NCCL_P2P_LL_THRESHOLD default (src/enqueue.cc, NCCL 2.30.7): NCCL sends with LL when the bytes are at most
#: nChannels x this, else Simple. addP2pToPlan gives a send at most one channel per minPartSize = 64 KiB
#: (p2pChunkSize / 2 across nodes, / 8 inside a node), so LL holds exactly up to this many bytes
P2P_LL_THRESHOLD = 16384
#: At most this many answers kept by each :class:`NcclNetwork`'s :meth:`~NcclNetwork.collective` (then forgotten
#: all at once)
COSTS_KEPT = 1 << 16


@dataclass(frozen=True)
class CollectiveCost:
    """A collective's or send/recv's solo time in seconds, and the NCCL algorithm and protocol it runs
    (``p2p`` for send/recv and the collectives NCCL builds from them: all_to_all, scatter, gather)."""

    seconds: float
    algo: str
    proto: str


@overload
def fewest_graph(*graphs: Graph) -> Graph: ...


@overload
def fewest_graph(*graphs: Graph | None) -> Graph | None: ...


def fewest_graph(*graphs: Graph | None) -> Graph | None:
    """One graph of a communicator from each node's own search: every rank searches its node's GPUs, and
    ``initTransportsRank`` (src/init.cc, NCCL 2.30.7) keeps the least ``nChannels``, ``bwIntra`` and ``bwInter``
    over the ranks; None (no such graph) where any node has none (``nvlsSupport`` is then 0: ``graphs[NVLS]->
    nChannels == 0``). ``graphs``: one per distinct kind of node, each searched with its own GPUs and NICs
    (:attr:`GroupShape.node_kinds`).

    >>> fewest_graph(Graph(8, 40.0, 60.0), Graph(4, 60.0, 80.0))   # 8 GPUs on one node, 4 on the other
    Graph(channels=4, bw_intra=40.0, bw_inter=60.0)
    >>> fewest_graph(Graph(8, 40.0, 60.0), None) is None
    True
    """
    if any(g is None for g in graphs):
        return None
    gs = [g for g in graphs if g is not None]
    return Graph(min(g.channels for g in gs), min(g.bw_intra for g in gs), min(g.bw_inter for g in gs))


#: The first release whose NVLS and NVLS-tree bandwidth is NCCL's "Improved NVLS/NVLSTree tuning prediction"
#: (v2.28.3-1 release notes, "Other Improvements"; tuning.cc: ``nvlsEfficiency``, ``(nChannels-1)/nChannels``,
#: ``perChMaxNVLSTreeBws``, ``nRanks / nsteps``)
NVLS_PREDICTION = "2.28.3"


def net_crossings(coll: str, algo: str, nodes: int, ppn: int, counts: tuple[int, ...] = (),
                  hop: float = 1.0, leaves: tuple[int, ...] = (), spine: float = 0.0) -> float:
    """Network crossings one after another on the longest dependent chain of ``coll`` run as ``algo`` over
    ``nodes`` nodes of ``ppn`` ranks each (ranks in node order), or of ``counts[i]`` ranks on the ``i``-th node of
    the ring (an uneven group: :attr:`GroupShape.counts`), each weighing ``hop`` (µs: the run's
    :attr:`~schedsim.network.tuning.TuneInput.lat_hop`, which NCCL does not know; 1: their number), and ``spine``
    more where its two nodes sit under different fabric leaves (``leaves[i]``: the ``i``-th node's leaf in ring
    order, :attr:`GroupShape.node_leaves`; empty: one leaf). 0 on one node.

    * ring (NCCL's ring crosses each node boundary once a lap, on the edge from a node's last rank to the next
      node's first): rank ``r``'s step ``k`` waits for rank ``r - 1``'s step ``k - 1`` (the data, over the edge
      ``r - 1 -> r``) and its own step ``k - 1`` (no crossing), so the longest path through a chain of ``s`` steps,
      ``s = 2(n - 1)`` for all_reduce and ``n - 1`` for all_gather and reduce_scatter (``n`` ranks), runs over
      ``s`` consecutive edges of the ring, starting just before a boundary: the most boundaries any ``s``
      consecutive edges hold. ``ppn`` on every node: ``ceil(s / ppn)``, all_reduce ``2 · nodes`` from 3 ranks a
      node, ``2 · nodes - 1`` at 2, ``2(nodes - 1)`` at 1; all_gather ``nodes``, ``nodes - 1`` at 1. Uneven
      (3 + 1 ranks: boundaries on edges 2 and 3 of 4) the 6 edges from edge 2 hold 4, not ``ceil(6 / 2) = 3``.
      Broadcast and reduce from rank 0, the first of its node: ``nodes - 1``. A ring's crossings are in node order:
      the one from node ``i`` to ``i + 1`` (the last: back to the first) weighs ``hop + spine`` where the two
      nodes' leaves differ, and the chain is the ``s`` edges whose weights sum the most. (NCCL's latency counts
      ``2(nNodes - 1)`` and ``nNodes - 1`` network steps, tuning.cc: a cost its ``hwLat`` figures, fitted on its
      own fabrics, already hold.)
    * tree and NVLS-tree all_reduce: up and down ``ncclGetDtree(nNodes)``, ``2 · ceil(log2(nNodes))``
      (:func:`~schedsim.network.tuning.nvls_tree_fill`); PAT (one GPU per node) ``ceil(log2(nNodes))``.
    * NVLS and CollNet across nodes: one (the switch reduces in the network; NCCL counts one ``latencyInter``),
      ``hop + spine`` where the group spans leaves (the reduction climbs to the spine).
    * tree and NVLS-tree across leaves: each edge of NCCL's two trees over the nodes (:func:`dtree_parents`,
      ``ncclGetDtree``) weighs ``hop``, and ``spine`` more where its two nodes' leaves differ; the chain is a
      reduction up a tree and the broadcast down it, twice the tree's heaviest root-to-node path, the heavier of
      the two trees (:func:`tree_depths`).
    * PAT across leaves: its ``ceil(log2(nodes))`` steps pair nodes ``2^k`` apart (in ring order, cyclic); each step
      weighs ``hop``, and ``spine`` more where any pair of that step spans leaves (which pair a chain takes is
      not modelled: an upper bound, exact on one leaf).

    >>> [net_crossings("allreduce", "ring", 2, 8), net_crossings("allgather", "ring", 2, 8)]
    [4.0, 2.0]
    >>> [net_crossings("allreduce", "ring", 2, 2), net_crossings("allreduce", "ring", 2, 1)]
    [3.0, 2.0]
    >>> [net_crossings("allreduce", "ring", 2, 2, (3, 1)), net_crossings("allgather", "ring", 2, 2, (3, 1))]
    [4.0, 2.0]
    >>> [net_crossings("allreduce", "tree", 5, 8), net_crossings("allreduce", "nvls", 4, 8)]
    [6.0, 1.0]
    >>> net_crossings("allreduce", "ring", 4, 1, (), 1.0, (0, 0, 1, 1), 2.0)   # 1 3 1 3 1 3, not 6 x 3
    12.0
    >>> net_crossings("allreduce", "tree", 4, 8, (), 1.0, (0, 0, 1, 1), 2.0)   # 0-2-1: 3 + 3, up and down
    12.0
    """
    if nodes <= 1:
        return 0.0
    depth = (nodes - 1).bit_length()  # ceil(log2(nodes))
    span = bool(spine) and len(set(leaves)) > 1
    if algo == "ring":
        w = None  # across leaves: crossing i (node i -> i + 1; the last -> the first): hop, + spine between leaves
        if span:
            lv = np.asarray(leaves, np.int64)
            w = hop + spine * (lv != np.roll(lv, -1))
        if coll in ("broadcast", "reduce"):
            return float(w[:-1].sum()) if w is not None else (nodes - 1) * hop
        if not counts and w is None:  # even, one leaf: boundaries every ppn edges
            ppn = max(1, ppn)
            steps = (2 if coll == "allreduce" else 1) * (nodes * ppn - 1)
            return -(-steps // ppn) * hop
        c = np.asarray(counts or (max(1, ppn),) * nodes, np.int64)
        n = int(c.sum())
        steps = (2 if coll == "allreduce" else 1) * (n - 1)  # < 2n: the window laps the ring at most once more
        pos = np.cumsum(c) - 1  # boundary i: the edge from node i's last rank to node i + 1's first
        ext = np.concatenate([pos, pos + n, pos + 2 * n])
        end = np.searchsorted(ext, pos + steps)  # the boundaries on the steps edges from each boundary on
        if w is None:
            return float((end - np.arange(nodes)).max()) * hop
        pre = np.concatenate([[0.0], np.cumsum(np.tile(w, 3))])  # the heaviest window of steps edges
        return float((pre[end] - pre[:nodes]).max())
    if algo in ("tree", "nvls_tree"):
        if not span:
            return 2 * depth * hop
        return 2 * max(float(tree_depths(p, leaves, hop, spine).max()) for p in dtree_parents(nodes))
    if algo == "pat":
        if not span:
            return depth * hop
        lv = np.asarray(leaves, np.int64)
        return float(sum(hop + spine * bool((lv != np.roll(lv, -(1 << k))).any()) for k in range(depth)))
    return hop + (spine if span else 0.0)


def dtree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The parent of each of ``n`` tree ranks (int64[n], -1 at the root) in NCCL's double binary tree
    (``ncclGetBtree`` and ``ncclGetDtree``, src/graph/trees.cc, NVIDIA/nccl): rank ``r``'s lowest set bit ``b``,
    parent ``(r ^ b) | 2b``, or ``r ^ b`` where that is ``n`` or more; the second tree the first mirrored
    (``n - 1 - r``) for even ``n``, shifted by one rank for odd. NCCL builds its tree across nodes on node
    indices (src/graph/connect.cc), so ``r`` is a node in ring order here.

    >>> [p.tolist() for p in dtree_parents(6)]
    [[-1, 2, 4, 2, 0, 4], [1, 5, 3, 1, 3, -1]]
    >>> [p.tolist() for p in dtree_parents(3)]
    [[-1, 2, 0], [1, -1, 0]]
    """
    r = np.arange(n, dtype=np.int64)
    low = r & -r
    up = (r ^ low) | (low << 1)
    first = np.where(r == 0, -1, np.where(up >= n, r ^ low, up))
    if n % 2:  # shifted: rank r is the first tree's r - 1, its parent that one's parent + 1
        pre = first[(r - 1) % n]
        second = np.where(pre < 0, -1, (pre + 1) % n)
    else:  # mirrored
        pre = first[n - 1 - r]
        second = np.where(pre < 0, -1, n - 1 - pre)
    return first, second


def tree_depths(parent: np.ndarray, leaves: tuple[int, ...], hop: float, spine: float) -> np.ndarray:
    """µs from a tree's root down to each node (float64[n]): each edge ``hop``, and ``spine`` more where its two
    nodes' leaves (``leaves[i]``: node ``i``'s) differ. ``parent``: :func:`dtree_parents`' form.

    >>> tree_depths(np.array([-1, 2, 0]), (0, 1, 1), 1.0, 2.0).tolist()
    [0.0, 4.0, 3.0]
    """
    lv = np.asarray(leaves, np.int64)
    root = parent < 0
    up = np.where(root, 0, parent)
    w = np.where(root, 0.0, hop + spine * (lv != lv[up]))
    d = w.copy()
    for _ in range(len(parent).bit_length() + 1):  # a tree of n is at most ceil(log2 n) + 1 deep
        d = w + np.where(root, 0.0, d[up])
    return d


#: How much faster than NCCL's estimate a tree all_reduce of two ranks on two nodes (one GPU a node) moves its
#: bytes. ``tune`` converts a tree's bus bandwidth to algorithm bandwidth x .5 (``ncclTopoTuneModel``,
#: src/graph/tuning.cc, NCCL 2.30.7, commit 5067397c: ``else ratio *= .5``): a rank that sends both up its tree (the
#: reduce) and down it (the broadcast) through one port moves each byte twice, as an interior node of the double
#: binary tree does through its NIC and a GPU inside a node's chain does through NVLink (on up to two nodes NCCL
#: estimates the tree from the chain's speed, ``bw = nNodes <= 2 ? bwIntra : bwInter``). Two ranks on two nodes have
#: neither: each of the two trees is one edge between the nodes, and each byte crosses each NIC once each way, as in
#: a ring of two (ring ratio nRanks / nSteps = 1), so the run moves its bytes at the bus bandwidth (x 1). NCCL's
#: model takes the two-node case into NVLS-tree's estimate ("Handle 2 node case of NVLSTree": ``interBw = bwInter *
#: ((nNodes <= 2 && a == NCCL_ALGO_NVLS_TREE) ? 2 : 1)``, the same tuning.cc) but not into the tree's; its
#: maintainers: "2 nodes is a special case. With Tree, on 2 nodes, ... we have 2x less traffic on the network"
#: (NVIDIA/nccl#946, sjeaugey), "Tree performs better on two nodes as there are fewer inter-node data
#: transmissions" (NVIDIA/nccl#812, AddyLaddy). Published: NVIDIA/nccl-tests#232, 2 x 1 H100 over RoCE with
#: NCCL_ALGO=Tree, 41.3 GB/s at 32 MiB where NCCL's estimate gives 18.8 (benchmarks/accuracy/network_published.py).
#: NCCL still chooses with its estimate; only the time of the run it chose changes. Simple and LL128 (their
#: bandwidths are the path's: busBw x .92, x 120/128); not LL, whose rate in NCCL's model (busBw / 3.8, at most
#: llMaxBw) is the LL protocol's own on the GPU, no network figure. Not with more than one GPU on a node: the
#: chain's GPUs move each byte twice (on the published 2 x 8 H100 InfiniBand log,
#: tests/data/nccl_tests_309_h100_2x8_ib.log, x 2 would take tree/LL 128 KiB from -0.3 % to -17.7 % and tree/LL128
#: 512 KiB from -29.9 to -33.7 %).
TWO_NODE_TREE = 2.0
#: Factor on NCCL's estimated tree bandwidth, with :data:`TWO_NODE_TREE`, for the run of an all_reduce of two ranks
#: on two nodes: 1 / :data:`~schedsim.network.tuning.TREE_PATTERN_BW`, NCCL's .85 for the tree pattern taken back.
#: The pattern's .85 prices a tree whose network parent and children all go to and from one GPU of a node
#: (``NCCL_TOPO_PATTERN_TREE``, "All NIC traffic going to/from the same GPU"), where the balanced tree of a node of
#: several GPUs puts the parent and one child on one GPU and the other child on a second ("Spread NIC traffic
#: between two GPUs", the same header, src/include/graph.h, NCCL 2.30.7); search.cc sets the pattern on any node of
#: one GPU, whatever its peers (``ncclTopoCompute``: ``if (ngpus == 1 && graph->pattern !=
#: NCCL_TOPO_PATTERN_RING)``). On two nodes no rank has both: NCCL's double binary tree of two ranks
#: (``ncclGetBtree`` / ``ncclGetDtree``, src/graph/trees.cc) is rank 0 the root with child 1 in the first tree and
#: its mirror in the second, so each rank has one network peer in each tree, nothing to spread, and it sends and
#: receives what a ring of two does through the same GPU and NIC (the ring takes no such factor). Three nodes or
#: more keep it (an interior rank's parent and children share its GPU). Published, held out:
#: NVIDIA/nccl-tests#232, 2 x 1 H100 over RoCE, NCCL_ALGO=Tree, busbw 39.9 GB/s at 16 MiB and 41.3 at 32 MiB, one
#: 400 Gb/s NIC a rank (benchmarks/accuracy/network_published.py).
ONE_EDGE_TREE_PATTERN = 1.0 / TREE_PATTERN_BW
#: Protocols whose ring network step is timed at the tree's network hwLat (:func:`exposed_ring`). NCCL's model
#: (``ncclTopoTuneModel``, src/graph/tuning.cc, from 2.23.4 (commit 68b54236) to 2.30.7) gives a ring's network
#: step two latencies: ``hwLat[NET][RING][p]`` (LL 2.7, LL128 4.0 µs) with more than one GPU a node, and the tree's
#: ``hwLat[NET][TREE][p]`` (5.0, 8.5) with one, where "latencies are fully exposed" (its comment). A ring's LL and
#: LL128 messages of few bytes have nothing in flight behind a network step on any number of GPUs a node: each of
#: the ring's steps waits for the one before (:func:`net_crossings`), so the step is as exposed as with one GPU a
#: node, and the run is timed with the tree's figure, at every size (a latency term; a size past which it fell would
#: time a larger message faster); NCCL still chooses with its own. Simple is left out: from
#: 2.23 its two figures are equal (14 µs), and before, the tree's 28 µs goes with a tree baseLat of 0, no network
#: step of its own. Published, held out (benchmarks/accuracy/network_published.py): NVIDIA/nccl#812, 2 x 8 A100,
#: NCCL_ALGO=Ring, 16 B, 93.3 µs where NCCL's estimate (2.30.7's constants) is 68.0; NVIDIA/nccl#1368, 5 x 8 H100
#: RoCE, NCCL 2.20, NCCL_ALGO=Ring, 1 MiB, 354.9 µs where NCCL 2.20.3's estimate is 194.8 (docs/validation.md,
#: "net35q").
EXPOSED_RING_PROTOS = ("LL", "LL128")


def tree_run_scale(func: str, nodes: int, ranks: int, proto: str = "Simple") -> float:
    """Factor on NCCL's estimated bandwidth of a tree ``func`` of ``ranks`` ranks over ``nodes`` nodes in ``proto``
    for the time of its run: :data:`TWO_NODE_TREE` × :data:`ONE_EDGE_TREE_PATTERN` (2 / .85) for all_reduce of two
    ranks on two nodes in Simple or LL128, 1 otherwise.

    >>> tree_run_scale("allreduce", 2, 2), tree_run_scale("allreduce", 2, 16), tree_run_scale("allreduce", 2, 2, "LL")
    (2.3529411764705883, 1.0, 1.0)
    """
    one_edge = func == "allreduce" and nodes == 2 and ranks == 2
    return TWO_NODE_TREE * ONE_EDGE_TREE_PATTERN if one_edge and proto in ("Simple", "LL128") else 1.0


def exposed_ring(t: TuneInput) -> TuneInput:
    """``t`` with a ring's network step in :data:`EXPOSED_RING_PROTOS` timed at the tree's network hwLat of
    ``t.consts`` (``hwLat[NET][TREE][p]``, µs), where the group spans nodes and ``t.hw_inter`` (the profile's
    ``nics.timing``) gives no ring figure of its own; ``t`` itself on one node. For the run's time only
    (:func:`timing_table`), not NCCL's choice.

    >>> t = TuneInput(16, 2, "hopper", "nvlink", "intel", Graph(16, 22.5, 22.5), None)
    >>> exposed_ring(t).hw_inter   # LL 5.0 and LL128 8.5 us, the tree's, for the ring's 2.7 and 4.0
    {('ring', 'LL'): 5.0, ('ring', 'LL128'): 8.5}
    >>> exposed_ring(replace(t, hw_inter={("ring", "LL"): 3.0})).hw_inter[("ring", "LL")]   # a profile's own
    3.0
    """
    if t.nodes < 2:
        return t
    net_tree = t.consts.hw_lat["net"]["tree"]
    exposed = {("ring", p): net_tree[PROTOS.index(p)] for p in EXPOSED_RING_PROTOS}
    return replace(t, hw_inter={**exposed, **(t.hw_inter or {})})


def timing_table(func: str, t: TuneInput) -> dict[tuple[str, str], tuple[float, float]]:
    """``(latency µs, bandwidth GB/s)`` per enabled (algorithm, protocol), as :func:`~schedsim.network.tuning.tune`
    gives them, to time a run rather than choose it: for a release before 2.28 (``t.consts.nvls_eff`` None) NVLS
    and NVLS-tree take the bandwidth of 2.28.3's prediction (:data:`NVLS_PREDICTION`), NCCL's correction of its
    own earlier estimate, which 2.28.3's notes give as a change of the prediction (for the choice), not of the
    kernel; the latency, and every other pair, stay the release's. ``t.lat_hop`` (µs NCCL does not see, per network
    crossing) is added to each pair's latency :func:`net_crossings` times. NCCL chooses with its own release's
    figures (:meth:`NcclNetwork.collective`). Published: 8 x GB200 of one rack, NVLS, NCCL 2.27.3: 18.97 ms at 8 GiB
    (453 GB/s algbw); 2.27.3's estimate 532 GB/s, 2.28.3's 411 (``benchmarks/accuracy/network_published.py``).
    A tree all_reduce of two ranks on two nodes runs Simple and LL128 at :data:`TWO_NODE_TREE` ×
    :data:`ONE_EDGE_TREE_PATTERN` times its estimated bandwidth (:func:`tree_run_scale`). Across nodes a ring's LL
    and LL128 network step takes the tree's network hwLat (:func:`exposed_ring`)."""
    got = tune(func, exposed_ring(t))
    if tree_run_scale(func, t.nodes, t.ranks) != 1.0:
        got = {key: (v[0], v[1] * tree_run_scale(func, t.nodes, t.ranks, key[1])) if key[0] == "tree" else v
               for key, v in got.items()}
    if t.lat_hop:  # what NCCL does not see, once per network crossing of the chain (net_crossings)
        ppn = t.ranks // t.nodes
        got = {key: (v[0] + net_crossings(func, key[0], t.nodes, ppn, t.node_ranks, t.lat_hop, t.node_leaves,
                                          t.lat_spine), v[1])
               for key, v in got.items()}
    if t.consts.nvls_eff is None:
        k = constants_for(NVLS_PREDICTION)
        nvls = tune(func, replace(t, consts=replace(t.consts, nvls_eff=k.nvls_eff, per_ch_nvls_tree=k.per_ch_nvls_tree,
                                                      legacy_steps=False)))
        got = {key: (v[0], nvls[key][1]) if key[0] in ("nvls", "nvls_tree") and key in nvls else v
               for key, v in got.items()}
    return got


@dataclass(frozen=True)
class GroupShape:
    """Where a group's ranks sit: ``nodes`` spanned, ``local`` (most ranks on one node: NCCL's
    ``comm->maxLocalRanks``), ``nics`` (fewest distinct NICs its ranks use on a node), ``leaves`` (fabric leaves
    spanned), ``min_local`` (fewest ranks on one of its nodes: ``comm->minLocalRanks``, src/init.cc),
    ``node_kinds`` (the distinct ``(ranks, NICs)`` of its nodes, each node's own: the searches NCCL's ranks run;
    empty: ``(local, nics)`` and ``(min_local, nics)``), ``counts`` (the ranks on each node in the ring's order,
    the order of the nodes' first ranks, as NCCL numbers its nodes; empty where every node holds ``local``: only
    an uneven group's ring crossings need them, :func:`net_crossings`), ``node_leaves`` (the fabric leaf of each
    node in that order, where the group spans leaves and a switch hop takes time, ``topology.fabric.latency_us``;
    else empty)."""

    ranks: int
    nodes: int
    local: int
    nics: int
    leaves: int
    min_local: int
    node_kinds: tuple[tuple[int, int], ...] = ()
    counts: tuple[int, ...] = ()
    node_leaves: tuple[int, ...] = ()


class NcclNetwork:
    """NCCL's tuning model on a profile's ``topology`` (``scale_up`` required; ``nics`` for groups across
    nodes). Pure; caches by group shape.

    Raises
    ------
    ProfileError
        A rank without a GPU (beyond ``placement`` or ``nodes`` × ``gpus_per_node``), a group across nodes
        on a profile without ``topology.nics``, or ``nccl.algo`` / ``nccl.proto`` leaving a collective no
        algorithm.
    """

    def __init__(self, profile: HardwareProfile) -> None:
        topo = profile.topology
        if topo.scale_up is None or topo.arch is None:
            raise ProfileError(f"profile {profile.name!r}: topology.scale_up and topology.arch are needed for the "
                               "NCCL model", fix="add topology.scale_up (kind, bandwidth_GBps, source) and "
                               "topology.arch")
        self.profile = profile
        self.topo = topo
        self.up = topo.scale_up
        #: GB/s of a GPU's scale-up path NCCL's channels can fill (:func:`schedsim.network.pcie.path_bandwidth`)
        self.up_bw = path_bandwidth(topo)
        self.arch: str = topo.arch
        self.gpn = topo.gpus_per_node
        self.algos = parse_nccl_list(profile.nccl.algo, "algo") if profile.nccl.algo else None
        self.protos = parse_nccl_list(profile.nccl.proto, "proto") if profile.nccl.proto else None
        self.consts = constants_for(profile.nccl.version)
        nc = profile.nccl
        self.channel_env = ChannelEnv(nc.min_ctas, nc.max_ctas, nc.min_nchannels, nc.max_nchannels)
        self._shapes: dict[tuple[int, ...], GroupShape] = {}
        self._tune: dict[tuple[GroupShape, str], tuple[_Table, _Table, TuneInput]] = {}
        self._scales: dict[tuple[GroupShape, str, str, str, int], float] = {}
        self._later: dict[tuple[GroupShape, str], tuple[list[float], list[float], float]] = {}
        #: :meth:`collective`'s answers by (kind, bytes and their type, shape, has_table, floor): the cost model
        #: and the shared links' choice of algorithm (:func:`schedsim.network.share.link_share`) ask for the same
        #: collectives, and the points of a search share this object; emptied at :data:`COSTS_KEPT` entries
        self._costs: dict[tuple[Any, ...], CollectiveCost | None] = {}
        #: :meth:`p2p_channels`' (p2pnChannelsPerPeer, p2pnChannels, p2pChunkSize) by communicator shape
        self._p2p_comm: dict[GroupShape, tuple[int, int, int]] = {}

    # -- placement -------------------------------------------------------------------------------------------
    def gpu_of(self, rank: int) -> int:
        """Global GPU index of ``rank`` (``placement[rank]``, else ``rank``).

        Raises
        ------
        ProfileError
            ``rank`` beyond ``topology.placement`` or beyond ``nodes`` × ``gpus_per_node`` GPUs.
        """
        pl = self.topo.placement
        if pl is not None:
            if rank >= len(pl):
                raise ProfileError(f"profile {self.profile.name!r}: topology.placement: rank {rank} has no GPU "
                                   f"(placement lists {len(pl)} ranks)",
                                   fix="give every rank of the schedule a GPU in topology.placement")
            gpu = pl[rank]
        else:
            gpu = rank
        nodes = self.topo.nodes
        if nodes is not None and gpu >= nodes * self.gpn:
            raise ProfileError(f"profile {self.profile.name!r}: topology.nodes: rank {rank} needs GPU {gpu}, more "
                               f"GPUs than {nodes} nodes x {self.gpn} hold",
                               fix="raise topology.nodes or run the schedule on fewer ranks")
        return gpu

    def gpus_of(self, ranks: Any) -> np.ndarray:
        """:meth:`gpu_of` of each of ``ranks`` (ints, any sequence or array of n), as int64[n], at once.

        Raises
        ------
        ProfileError
            As :meth:`gpu_of`, for the first of ``ranks`` that it refuses.
        """
        r = np.asarray(ranks, np.int64).reshape(-1)
        pl = self.topo.placement
        if pl is not None:
            bad = r >= len(pl)
            gpu = np.asarray(pl, np.int64)[np.where(bad, 0, r)] if len(pl) else np.zeros(len(r), np.int64)
        else:
            bad, gpu = np.zeros(len(r), bool), r
        if self.topo.nodes is not None:
            bad |= gpu >= self.topo.nodes * self.gpn
        if bool(bad.any()):
            self.gpu_of(int(r[int(np.argmax(bad))]))  # raises
        return gpu

    def nic_of(self, local_gpu: int) -> int:
        """NIC index a node's GPU ``local_gpu`` uses (``nics.gpu_to_nic``, else rail-optimised spread)."""
        nics = self.topo.nics
        if nics is None:
            return 0
        if nics.gpu_to_nic is not None:
            return nics.gpu_to_nic[local_gpu]
        return local_gpu * nics.per_node // self.gpn

    def shape(self, ranks: tuple[int, ...]) -> GroupShape:
        """The :class:`GroupShape` of ``ranks``."""
        got = self._shapes.get(ranks)
        if got is not None:
            return got
        g = self.gpus_of(ranks)  # over all ranks at once: a group of 100,000 ranks is one of many
        node, loc = g // self.gpn, g % self.gpn
        nodes, first, at = unique(node)  # (not np.unique: it imports numpy.ma)
        per_node = np.bincount(at)
        fab = self.topo.fabric
        per_leaf = fab.nodes_per_leaf if fab is not None and fab.kind == "leaf_spine" else None
        leaves = len(unique(nodes // per_leaf)[0]) if per_leaf else 1
        order = np.argsort(first, kind="stable")  # the nodes in the ring's order
        ring = nodes[order]
        used = unique(loc)[0]
        nic_of = np.zeros(int(used.max()) + 1, np.int64)
        nic_of[used] = [self.nic_of(x) for x in used.tolist()]
        nic = nic_of[loc]
        lo, span = int(nic.min()), int(nic.max() - nic.min()) + 1
        node_nics = unique(node * span + (nic - lo))[0]  # the distinct (node, NIC) pairs
        nics_on = np.bincount(unique(node_nics // span)[2])  # NICs on each node (the order of nodes)
        base = int(nics_on.max()) + 1
        kinds = unique(per_node * base + nics_on)[0].tolist()  # the distinct (ranks, NICs) of a node
        node_kinds = tuple(divmod(k, base) for k in kinds)
        lo_n, hi_n = int(per_node.min()), int(per_node.max())
        counts = tuple(per_node[order].tolist()) if lo_n != hi_n else ()
        on_leaf = tuple((ring // per_leaf).tolist()) if per_leaf and leaves > 1 and fab is not None and \
            fab.latency_us > 0 else ()
        got = GroupShape(len(ranks), len(nodes), hi_n, int(nics_on.min()), leaves, lo_n, node_kinds, counts, on_leaf)
        self._shapes[ranks] = got
        return got

    # -- per-tier figures --------------------------------------------------------------------------------------
    def _nic_bw(self, shape: GroupShape) -> float:
        """GB/s of one NIC as NCCL counts it (line rate / 8), divided by the fabric's oversubscription when the
        group crosses leaves."""
        nics = self.topo.nics
        if nics is None:
            return 0.0
        bw = nics.bandwidth_Gbps / 8.0
        fab = self.topo.fabric
        if fab is not None and shape.leaves > 1:
            bw /= fab.oversubscription
        return bw

    def _nic_goodput(self, shape: GroupShape) -> float:
        """GB/s one send/recv stream moves through its NIC: :meth:`_nic_bw` (line rate / 8, over the fabric's
        oversubscription when the group crosses leaves) × ``topology.nics.goodput`` (RDMA's share of line rate;
        1 where the profile gives none)."""
        nics = self.topo.nics
        return self._nic_bw(shape) * ((nics.goodput or 1.0) if nics is not None else 1.0)

    def _lat_inter(self) -> float:
        """µs NCCL adds to its network hop: ``graph->latencyInter``, the net plugin's ``props->latency``
        (``topology.nics.latency_us``; ``ncclTopoCompute``, src/graph/search.cc). NCCL chooses with it."""
        nics = self.topo.nics
        return nics.latency_us if nics is not None else 0.0

    def _lat_hops(self) -> tuple[float, float]:
        """(µs a network crossing within a leaf takes beyond NCCL's figures that NCCL does not see, µs more one
        between leaves takes): the transport's own (``topology.nics.transport_latency_us``) and one switch hop of
        the fabric (``topology.fabric.latency_us``); two hops more across leaves (leaf, spine, leaf). NCCL's
        topology has no switch and its net plugins report no latency (``ncclNetProperties.latency`` 0: net_ib,
        net_socket, Google's FasTrak), so these time the run and not the choice
        (:attr:`schedsim.network.tuning.TuneInput.lat_hop`, ``lat_spine``)."""
        nics, fab = self.topo.nics, self.topo.fabric
        lat = nics.transport_latency_us if nics is not None else 0.0
        return lat + (fab.latency_us if fab is not None else 0.0), (2 * fab.latency_us if fab is not None else 0.0)

    def _lat_hop(self, shape: GroupShape) -> float:
        """µs one crossing between the group's farthest nodes takes beyond NCCL's figures (:meth:`_lat_hops`):
        a send's, or all_to_all's slowest pair's."""
        hop, spine = self._lat_hops()
        return hop + (spine if shape.leaves > 1 else 0.0)

    def _timed_input(self, shape: GroupShape, t: TuneInput, intra: dict[tuple[str, str], float],
                     inter: dict[tuple[str, str], float], bus: dict[tuple[str, str], float]) -> TuneInput:
        """``t`` with the profile's timing figures and the crossings' latency NCCL does not see (0 on one node)."""
        hop, spine = self._lat_hops() if shape.nodes > 1 else (0.0, 0.0)
        return replace(t, hw_intra=intra, hw_inter=inter, bw_factor=bus, lat_hop=hop, lat_spine=spine,
                       node_leaves=shape.node_leaves)

    def _tables(self, shape: GroupShape, func: str) -> tuple[_Table, _Table, TuneInput]:
        """NCCL's (latency, bandwidth) per enabled (algo, proto), as NCCL chooses with them; the same timed with
        the profile's tier ``timing`` figures; and NCCL's view of the group (:meth:`tune_input`)."""
        got = self._tune.get((shape, func))
        if got is None:
            got = self._tune[(shape, func)] = self._tune_for(shape, func)
        return got

    def timing_figures(self, multi: bool, over: tuple[str, str, float | None, float | None] | None = None
                       ) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float],
                                  dict[tuple[str, str], float]]:
        """(intra hwLat, network hwLat, bus bandwidth factor) overrides by (algo, proto) from the profile's
        ``scale_up.timing`` and ``nics.timing`` (bandwidth factor: the scale-up tier's in one node, the NICs'
        across nodes); ``over`` = (tier ``scale_up`` or ``nics``, ``algo/proto``, hw_latency_us, bw_factor)
        replaces one entry (None keeps it), for :mod:`schedsim.network.fit`."""
        tiers = {"scale_up": dict(self.up.timing), "nics": dict(self.topo.nics.timing if self.topo.nics else {})}
        if over is not None:
            from schedsim.hardware.profile import TierTiming

            tier, key, h, b = over
            old = tiers[tier].get(key)
            tiers[tier][key] = TierTiming(
                hw_latency_us=h if h is not None else (old.hw_latency_us if old else None),
                bw_factor=b if b is not None else (old.bw_factor if old else None), provenance="fitted", source="")

        def pick(tier: str, what: str) -> dict[tuple[str, str], float]:
            out = {}
            for k, v in tiers[tier].items():
                x = getattr(v, what)
                if x is not None:
                    a, _, p = k.partition("/")
                    out[(a, p)] = float(x)
            return out

        return (pick("scale_up", "hw_latency_us"), pick("nics", "hw_latency_us"),
                pick("nics" if multi else "scale_up", "bw_factor"))

    def tune_input(self, shape: GroupShape) -> TuneInput:
        """NCCL's view of a group of this shape (:class:`schedsim.network.tuning.TuneInput`: its ring, NVLS and
        CollNet Direct graphs, tiers and latencies), without the profile's timing figures.

        Raises
        ------
        ProfileError
            The group spans nodes and the profile has no ``topology.nics``.
        """
        multi = shape.nodes > 1
        if multi and self.topo.nics is None:
            raise ProfileError(f"profile {self.profile.name!r}: a group spans {shape.nodes} nodes but the profile "
                               "has no topology.nics", fix="add topology.nics (per_node, bandwidth_Gbps, source)")
        nic_bw, up = self._nic_bw(shape), self.up_bw
        # each kind of node's own search, with its own GPUs and NICs (uneven groups: a node's GPU count paired with
        # another node's NICs is no node's search, e.g. 8 GPUs on 8 NICs beside 2 on 2: NVLS bwIntra 40, not 48)
        kinds = shape.node_kinds or tuple(sorted({(shape.local, shape.nics), (shape.min_local, shape.nics)}))
        ring = fewest_graph(*(ring_graph(self.arch, up, k, c, nic_bw, multi) for k, c in kinds))
        nvls = fewest_graph(*(nvls_graph(self.arch, up, k, c, nic_bw, multi) for k, c in kinds)) \
            if self.up.nvls else None
        hw: Literal["nvlink", "pci"] = "pci" if self.up.kind == "pcie" else "nvlink"
        fab = self.topo.fabric
        collnet = multi and fab is not None and fab.sharp
        direct = fewest_graph(*(collnet_direct_graph(self.arch, up, k, c, nic_bw) for k, c in kinds)) \
            if collnet else None
        return TuneInput(shape.ranks, shape.nodes, self.arch, hw, self.topo.cpu_vendor, ring, nvls,
                         self._lat_inter(), ll128=hw == "nvlink", lat_intra=self.up.latency_us,
                         collnet=collnet, nvswitch=self.up.kind == "nvswitch", collnet_direct=direct,
                         consts=self.consts, channel_env=self.channel_env,
                         local_range=(shape.min_local, shape.local), node_ranks=shape.counts)

    def _tune_for(self, shape: GroupShape, func: str) -> tuple[_Table, _Table, TuneInput]:
        t = self.tune_input(shape)
        table = tune(func, t)
        if self.algos is not None or self.protos is not None:
            table = {(a, p): v for (a, p), v in table.items()
                     if (self.algos is None or a in self.algos[func])
                     and (self.protos is None or p in self.protos[func])}
        intra, inter, bus = self.timing_figures(shape.nodes > 1)
        timed = table
        ti = self._timed_input(shape, t, intra, inter, bus)
        two_node_tree = tree_run_scale(func, t.nodes, t.ranks) != 1.0
        if intra or inter or bus or ti.lat_hop or t.consts.nvls_eff is None or two_node_tree or t.nodes > 1:
            full = timing_table(func, ti)
            timed = {k: full[k] for k in table}
        return table, timed, t

    def timed_with(self, kind: str, nbytes: float, ranks: tuple[int, ...], algo: str, proto: str,
                   over: tuple[str, str, float | None, float | None]) -> float:
        """Time in µs of ``kind`` on ``ranks`` run as (``algo``, ``proto``) with one timing figure replaced
        (``over``, as :meth:`timing_figures`); for :mod:`schedsim.network.fit`. Uncached.

        Raises
        ------
        KeyError
            NCCL does not enable (``algo``, ``proto``) for ``kind`` on this group.
        """
        shape = self.shape(ranks)
        func = KINDS[kind].nccl
        if not func:
            raise KeyError(kind)
        t = self.tune_input(shape)
        intra, inter, bus = self.timing_figures(shape.nodes > 1, over)
        lat, bw = timing_table(func, self._timed_input(shape, t, intra, inter, bus))[(algo, proto)]
        nc = runtime_channels(algo, proto, nbytes, shape.ranks, t.ring, channel_ceiling(t))
        bw *= runtime_bw_scale(func, algo, proto, nc, t) * cta_bw_scale(algo, t)
        return algo_time(func, algo, proto, lat, bw, nbytes, shape.nodes, shape.ranks, self._comm_channels(t),
                         self.arch, consts=self.consts) + self._fill(func, algo, nbytes, shape, t)

    def _fill(self, func: str, algo: str, nbytes: float, shape: GroupShape, t: TuneInput) -> float:
        """µs of an NVLS-tree all_reduce's pipeline fill across nodes (:func:`schedsim.network.tuning.nvls_tree_fill`,
        which NCCL's estimate leaves out); 0 for the others. Blackwell's chunk and CTA rule reads ``comm->minNetBw``,
        the NICs' own speed as NCCL's net plugin reports it (line rate / 8), which knows nothing of the fabric's
        oversubscription (so not :meth:`_nic_bw`)."""
        if algo != "nvls_tree" or func != "allreduce":
            return 0.0
        nics = self.topo.nics
        return nvls_tree_fill(nbytes, t, nics.bandwidth_Gbps / 8.0 if nics is not None else 0.0)

    def _comm_channels(self, t: TuneInput) -> int:
        """``comm->nChannels`` of a group NCCL sees as ``t`` (:func:`schedsim.network.tuning.comm_channels`), which
        ``ncclTopoGetAlgoTime`` (src/graph/tuning.cc) divides the bytes by for the ring plateau."""
        return comm_channels(t.ring, self.arch, t.nodes > 1, t.channel_env)

    def _bw_scale(self, shape: GroupShape, func: str, algo: str, proto: str, nbytes: float, t: TuneInput) -> float:
        """:func:`schedsim.network.tuning.runtime_bw_scale` on the channels NCCL runs ``nbytes`` on, cached by
        channel count; times :func:`schedsim.network.tuning.cta_bw_scale` (NCCL_MAX_CTAS on NVLS)."""
        nc = runtime_channels(algo, proto, nbytes, shape.ranks, t.ring, channel_ceiling(t))
        if t.channel_env == NO_CHANNEL_ENV and nc == self._comm_channels(t):
            return 1.0
        key = (shape, func, algo, proto, nc)
        got = self._scales.get(key)
        if got is None:
            got = self._scales[key] = runtime_bw_scale(func, algo, proto, nc, t) * cta_bw_scale(algo, t)
        return got

    # -- the interface -------------------------------------------------------------------------------------------
    def collective(self, kind: str, nbytes: float, ranks: tuple[int, ...], *, has_table: bool = False,
                   floor: bool = True) -> CollectiveCost | None:
        """Solo time of collective ``kind`` of ``nbytes`` (nccl-tests size) over ``ranks`` (two or more), and
        the algorithm and protocol NCCL picks: the least ``ncclTopoGetAlgoTime`` among those enabled.
        A kind without an NCCL function in its registry entry (``nccl``: all_to_all, scatter, gather):
        :meth:`spread`. None: left to the profile's tables (see module doc).

        With ``floor`` (the default, every prediction) the time is no more than a larger message's where NCCL's
        choice changes (:meth:`_later_min`), so that time never falls as bytes grow; without it, the time of the
        choice NCCL runs as the profile's figures give it, as an nccl-tests log of that profile would read (the
        two differ only just below a switch whose choice the figures time slower than NCCL's constants do).
        """
        shape = self.shape(ranks)
        key = (kind, nbytes, type(nbytes), shape, has_table, floor)
        if key in self._costs:
            return self._costs[key]
        got = self._collective(kind, nbytes, shape, has_table, floor)
        if len(self._costs) >= COSTS_KEPT:
            self._costs.clear()
        self._costs[key] = got
        return got

    def _collective(self, kind: str, nbytes: float, shape: GroupShape, has_table: bool,
                    floor: bool) -> CollectiveCost | None:
        """:meth:`collective` on the group's shape, worked out."""
        if has_table or (shape.nodes == 1 and not self.topo.nccl_within_node):
            return None
        func = KINDS[kind].nccl  # NCCL's function name; "" for the kinds NCCL builds from send/recv
        if not func:
            return self.spread(kind, nbytes, shape)
        got = self._chosen_time(shape, func, nbytes)
        if got is None:
            from schedsim.hardware.profile import SCHEDULE_ENV_SOURCE

            src = self.profile.nccl.source
            if src.startswith(SCHEDULE_ENV_SOURCE):  # set by the schedule's env: name that, not the profile
                where, what = src[len(SCHEDULE_ENV_SOURCE):], "NCCL_ALGO / NCCL_PROTO"
                fix = (f"let the schedule's env: NCCL_ALGO / NCCL_PROTO allow an algorithm {kind} has here, e.g. "
                       f"'ring' and 'Simple' (NCCL fails such a call with ncclInvalidUsage), or remove them")
            else:
                where, what = f"profile {self.profile.name!r}", "nccl.algo / nccl.proto"
                fix = "allow ring and Simple (NCCL fails such a call with ncclInvalidUsage)"
            raise ProfileError(f"{where}: {what} ({self.profile.nccl.algo!r} / {self.profile.nccl.proto!r}) leave "
                               f"{kind} no algorithm and protocol on {shape.ranks} ranks over {shape.nodes} nodes",
                               fix=fix)
        t, a, p = got
        return CollectiveCost((min(t, self._later_min(shape, func, nbytes)) if floor else t) * 1e-6, a, p)

    def _choice(self, shape: GroupShape, func: str, nbytes: float) -> tuple[str, str] | None:
        """The (algorithm, protocol) NCCL picks for ``nbytes``: the least ``ncclTopoGetAlgoTime`` with its own
        constants among those enabled; None when none is."""
        table, _timed, t_in = self._tables(shape, func)
        best: tuple[float, str, str] | None = None
        n_ch, x86 = self._comm_channels(t_in), self.topo.cpu_vendor != "arm"  # once, not per algorithm and protocol
        for (a, p), (lat, bw) in table.items():
            t = algo_time(func, a, p, lat, bw, nbytes, shape.nodes, shape.ranks, n_ch, self.arch, x86=x86,
                          consts=self.consts)
            if best is None or t < best[0]:
                best = (t, a, p)
        return None if best is None else (best[1], best[2])

    def _chosen_time(self, shape: GroupShape, func: str, nbytes: float) -> tuple[float, str, str] | None:
        """(µs, algorithm, protocol): NCCL's choice (:meth:`_choice`) timed with the profile's figures on the
        channels it runs on, and no slower than the same choice at its next channel step or tree correction
        bucket (``channel_steps``, ``correction_steps``); None when no algorithm is enabled."""
        ch = self._choice(shape, func, nbytes)
        if ch is None:
            return None
        a, p = ch
        return self._least_step(shape, func, a, p, nbytes)[0], a, p

    def _least_step(self, shape: GroupShape, func: str, a: str, p: str, nbytes: float) -> tuple[float, float]:
        """(µs, bytes): the least time, with the profile's figures, of (``a``, ``p``) at ``nbytes`` or at its next
        channel step or tree correction bucket (``channel_steps``, ``correction_steps``), and the size that has it
        (``nbytes`` on a tie)."""
        _table, timed, t_in = self._tables(shape, func)
        lat, bw = timed[(a, p)]

        def timed_at(nb: float) -> float:
            return algo_time(func, a, p, lat, bw * self._bw_scale(shape, func, a, p, nb, t_in), nb, shape.nodes,
                             shape.ranks, self._comm_channels(t_in), self.arch,
                             consts=self.consts) + self._fill(func, a, nb, shape, t_in)

        steps = channel_steps(a, p, nbytes, shape.ranks, t_in.ring, channel_ceiling(t_in))
        steps += correction_steps(func, a, nbytes)
        t, _i, m = min((timed_at(m), i, m) for i, m in enumerate([nbytes, *steps]))
        return t, m

    def timed_size(self, kind: str, nbytes: float, ranks: tuple[int, ...], algo: str, proto: str) -> float:
        """The size (bytes) whose time :meth:`collective` gives ``nbytes`` of ``kind`` run as (``algo``,
        ``proto``) on ``ranks``, with the profile's figures: ``nbytes``, or the next channel step or tree correction
        bucket where the same choice runs faster; for :mod:`schedsim.network.fit`, which times a row there with
        :meth:`timed_with`.

        Raises
        ------
        KeyError
            ``kind`` has no NCCL function, or NCCL does not enable (``algo``, ``proto``) for it on this group.
        """
        func = KINDS[kind].nccl
        if not func:
            raise KeyError(kind)
        return self._least_step(self.shape(ranks), func, algo, proto, nbytes)[1]

    def _later_min(self, shape: GroupShape, func: str, nbytes: float) -> float:
        """The least time (µs) of a larger message of ``func`` on ``shape`` at a size where NCCL's choice of
        algorithm or protocol changes, or inf: NCCL chooses with its own constants and the choice is timed with
        the profile's figures, so a message just past a switch can be timed faster than one just before it; a
        collective is timed no slower than that (a smaller message never takes longer than a larger one, the
        rule every cost here keeps). The switch sizes are found once per group shape (:meth:`_switches`)."""
        key = (shape, func)
        got = self._later.get(key)
        if got is None or nbytes < got[2]:  # the first message of the shape: the switches above it; a smaller one
            # later: all of them (at most two searches per shape)
            got = self._later[key] = self._switches(shape, func, nbytes if got is None else -math.inf)
        sizes, suffix, _lowest = got
        i = bisect.bisect_right(sizes, nbytes)
        return suffix[i] if i < len(sizes) else math.inf

    def _switches(self, shape: GroupShape, func: str, above: float = -math.inf
                  ) -> tuple[list[float], list[float], float]:
        """(switch sizes ascending, the least time from each on, ``lowest``): see :meth:`_later_min`. With
        ``above`` (bytes) only the grid steps (below) that end past it are searched: the lists then hold the
        switches above ``lowest`` (the first such step's start, at most ``above``; -inf when every step is
        searched), the same sizes and times as the whole search's there, which is all that a message of
        ``lowest`` bytes or more reads (a step's switches lie past its start and no later than its end).

        NCCL's estimate of each algorithm is affine in the size between the tree correction buckets (``64 · 2^k`` bytes)
        and the ring plateau's onset (``64 · nChannels · nRanks``), and the least of affine functions takes each one
        over at most once; so on a grid holding those sizes (and four per octave, 1 B to 16 TiB) every change of choice
        inside a grid step, which ends a byte before the next grid size, is found by bisection to the byte, one after
        the other until the step's end, and a change at a grid size itself by comparing it with the byte before."""
        n_ch = self._comm_channels(self._tables(shape, func)[2])
        grid = sorted({float(math.ceil(2.0 ** (k / 4))) for k in range(4 * 44 + 1)}
                      | {float(64 << k) for k in range(38)} | {64.0 * n_ch * shape.ranks})
        first = next((k for k in range(len(grid) - 1) if grid[k + 1] > above), len(grid) - 1)
        lowest = grid[first] if first else -math.inf
        grid = grid[first:]
        choice = [self._choice(shape, func, s) for s in grid]
        sizes: list[float] = []
        for lo, hi, c_lo, c_hi in zip(grid, grid[1:], choice, choice[1:], strict=False):
            end = max(lo, hi - 1)
            c_end = self._choice(shape, func, end)
            while c_lo != c_end:
                a, b = lo, end
                while b - a > 1:  # the smallest size past a whose choice differs from c_lo
                    mid = float((a + b) // 2)
                    a, b = (mid, b) if self._choice(shape, func, mid) == c_lo else (a, mid)
                sizes.append(b)
                lo, c_lo = b, self._choice(shape, func, b)
            if c_end != c_hi:
                sizes.append(hi)
        times = [got[0] if (got := self._chosen_time(shape, func, s)) is not None else math.inf for s in sizes]
        suffix = list(itertools.accumulate(reversed(times), min))[::-1]
        return sizes, suffix, lowest

    def _p2p_terms(self, nbytes_per_peer: float, inter: bool, shape: GroupShape, proto: str | None = None,
                   channels: int | None = None) -> tuple[float, float, str]:
        """(latency µs, bandwidth GB/s, protocol) of one send/recv stream: LL up to :data:`P2P_LL_THRESHOLD`
        bytes, else Simple (or ``proto``); latency NCCL's ring baseLat plus one hwLat step of the tier (an
        assumption: tuning.cc has no p2p entry), bandwidth the ring graph's channels × speed inside a node
        (NVLink) or the rank's NIC's goodput across nodes (:meth:`_nic_goodput`); LL at half of it, at most
        llMaxBw. ``channels``: the channels NCCL stripes the message over (:meth:`p2p_channels`), which cap
        Simple at ``channels`` × :data:`~schedsim.network.p2p_channels.P2P_CHANNEL_GBPS`; None: no cap."""
        if proto is None:
            proto = "LL" if nbytes_per_peer <= P2P_LL_THRESHOLD else "Simple"
        if inter:
            lat, ll_cap = p2p_step("net", proto, self.arch, self.consts)
            lat += self._lat_inter() + self._lat_hop(shape)
            bw = self._nic_goodput(shape)
        else:
            lat, ll_cap = p2p_step("pci" if self.up.kind == "pcie" else "nvlink", proto, self.arch, self.consts)
            lat += self.up.latency_us
            g = ring_graph(self.arch, self.up_bw, 2, 1, 0.0, False)
            bw = g.channels * g.bw_intra
        if proto == "LL":
            bw = min(bw * .5, ll_cap)
        elif channels is not None:
            bw = min(bw, channels * P2P_CHANNEL_GBPS)
        return lat, bw, proto

    def p2p_channels(self, nbytes: float, comm: tuple[int, ...]) -> int:
        """Channels NCCL runs one Simple send (or recv) of ``nbytes`` on, in the communicator of ranks ``comm``
        (:mod:`schedsim.network.p2p_channels`: ``comm->p2pnChannels`` = ``pow2Up(comm->nChannels)``, at most
        ``MAXCHANNELS``; a GPU's NICs as ``ncclTopoGetLocalNetCountByBw`` counts them on a rail-optimised node:
        ``nics.per_node / gpus_per_node``, at least one).

        Raises
        ------
        ProfileError
            As :meth:`tune_input` (``comm`` spans nodes on a profile without ``topology.nics``).
        """
        shape = self.shape(comm)
        got = self._p2p_comm.get(shape)
        if got is None:
            raw = min(self._comm_channels(self.tune_input(shape)), MAXCHANNELS)
            p2pn = pow2_up(raw)
            nics = self.topo.nics
            count = max(1, nics.per_node // self.gpn) if nics is not None else 0
            nic_bw = count * nics.bandwidth_Gbps / 8.0 if nics is not None else 0.0
            per_peer = peer_channels(p2pn=p2pn, nvlink_path_bw=None if self.up.kind == "pcie" else self.up_bw,
                                     arch=self.arch, local=shape.local, nodes=shape.nodes, nranks=shape.ranks,
                                     nic_count=count, nic_bw=nic_bw, since=self.consts.since, nchannels=raw)
            chunk = NET_CHUNK if shape.nodes > 1 or self.up.kind == "pcie" else NVL_CHUNK
            got = self._p2p_comm[shape] = (per_peer, p2pn, chunk)
        per_peer, p2pn, chunk = got
        return op_channels(nbytes, per_peer=per_peer, p2pn=p2pn, nranks=shape.ranks, nodes=shape.nodes, chunk=chunk)

    def p2p(self, src: int, dst: int, nbytes: float, comm: tuple[int, ...] | None = None) -> CollectiveCost:
        """One send/recv of ``nbytes`` from rank ``src`` to rank ``dst``: across nodes through the sender's
        NIC (rail; NCCL's PXN), inside a node over the scale-up domain (:meth:`_p2p_terms`), Simple on the
        channels NCCL gives it in communicator ``comm`` (:meth:`p2p_channels`; None: the pair's own two-rank
        communicator, torch's for a lone send/recv; also where ``comm`` spans nodes on a profile without
        ``topology.nics``, whose network NCCL's channel rules cannot see)."""
        shape = self.shape((src, dst) if src != dst else (src,))
        if comm is not None and self.topo.nics is None and self.shape(comm).nodes > 1:
            comm = None
        ranks = comm if comm is not None else (src, dst) if src != dst else (src,)
        inter = shape.nodes > 1
        ch = self.p2p_channels(nbytes, ranks) if len(ranks) > 1 else None
        lat, bw, proto = self._p2p_terms(nbytes, inter, shape, channels=ch)
        t = lat + nbytes / (1000.0 * bw)
        if proto == "LL":  # no slower than Simple just past the LL threshold (a larger message never takes less)
            ch = self.p2p_channels(P2P_LL_THRESHOLD, ranks) if len(ranks) > 1 else None
            lat, bw, _ = self._p2p_terms(P2P_LL_THRESHOLD, inter, shape, "Simple", ch)
            t = min(t, lat + P2P_LL_THRESHOLD / (1000.0 * bw))
        return CollectiveCost(t * 1e-6, "p2p", proto)

    def spread(self, kind: str, nbytes: float, shape: GroupShape) -> CollectiveCost:
        """all_to_all, scatter or gather of ``nbytes`` (nccl-tests size) as NCCL runs them, grouped send/recv:
        a rank (for scatter and gather, the root) moves ``nbytes · (n-1)/n``; the part for its node's
        ``local - 1`` peers goes over the scale-up domain, the rest through NICs, the two at once:
        t = latency + max(intra bytes / B_intra, inter bytes / B_inter). B_inter: the ranks of a kind without a
        root (all_to_all; the registry's ``rooted``) share their node's ``nics`` NICs (``nics / local`` of one
        each); the root of scatter or gather has its NIC to itself. Latency: one p2p step of the slowest tier used
        (:meth:`_p2p_terms`). Up to the LL threshold per peer, no slower than Simple just past it (a larger message
        never takes less)."""
        got = self._spread_us(kind, nbytes, shape)
        if got[1] == "LL":
            got = (min(got[0], self._spread_us(kind, P2P_LL_THRESHOLD * shape.ranks, shape, "Simple")[0]), "LL")
        return CollectiveCost(got[0] * 1e-6, "p2p", got[1])

    def spread_bytes(self, rank: int, ranks: tuple[int, ...], send: tuple[float, ...],
                     recv: tuple[float, ...]) -> CollectiveCost:
        """An all_to_all with per-peer sizes, rank ``rank``'s part: :meth:`spread`'s formula with the rank's own
        bytes, to and from its node's peers (the larger direction: links are full duplex) over the scale-up
        domain and to and from other nodes through NICs (:meth:`schedsim.network.model.NetworkModel.
        all_to_all_split`); the protocol by the largest message to or from another member (its piece for itself
        is a local copy), no slower than Simple just past the LL threshold."""
        shape = self.shape(ranks)
        node = (self.gpus_of(np.asarray(ranks, np.int64)) // self.gpn).tolist()
        me = ranks.index(rank)
        intra = inter = 0.0
        for part in (send, recv):
            a = sum(x for j, x in enumerate(part) if j != me and node[j] == node[me])
            b = sum(x for j, x in enumerate(part) if node[j] != node[me])
            intra, inter = max(intra, a), max(inter, b)
        peer = max([x for part in (send, recv) for j, x in enumerate(part) if j != me] + [0.0])  # not its own copy
        got = self._spread_us("all_to_all", peer * shape.ranks, shape, None, (intra, inter))
        if got[1] == "LL":
            cap = P2P_LL_THRESHOLD / max(peer, 1e-300)
            got = (min(got[0], self._spread_us("all_to_all", P2P_LL_THRESHOLD * shape.ranks, shape, "Simple",
                                               (intra * cap, inter * cap))[0]), "LL")
        return CollectiveCost(got[0] * 1e-6, "p2p", got[1])

    def _spread_us(self, kind: str, nbytes: float, shape: GroupShape, force: str | None = None,
                   parts: tuple[float, float] | None = None) -> tuple[float, str]:
        """(µs, protocol) of :meth:`spread` without its floor (``force``: the protocol, else by size); ``parts``:
        the bytes over the scale-up domain and through NICs, instead of ``nbytes`` spread evenly."""
        n = shape.ranks
        per_peer = nbytes / n
        intra_bytes = per_peer * (shape.local - 1) if parts is None else parts[0]
        inter_bytes = per_peer * (n - shape.local) if parts is None else parts[1]
        lat_i, bw_i, proto = self._p2p_terms(per_peer, False, shape, force)
        t = intra_bytes / (1000.0 * bw_i)
        lat = lat_i
        if inter_bytes > 0:
            lat_n, bw_n, proto = self._p2p_terms(per_peer, True, shape, force)
            if not KINDS[kind].rooted:  # every rank sends (all_to_all), not the root alone
                bw_n *= min(1.0, shape.nics / shape.local)
            t = max(t, inter_bytes / (1000.0 * bw_n))
            lat = max(lat, lat_n)
        return lat + t, proto


def rank_nodes(profile: HardwareProfile, world: int) -> list[int] | None:
    """Node of each of ``world`` ranks on a profile with a cluster topology (``topology.scale_up``), for the
    simulator's link tiers (:func:`schedsim.gpu.rules.link_ends`); None on other profiles.

    Raises
    ------
    ProfileError
        As :meth:`NcclNetwork.gpu_of`.
    """
    if profile.topology.scale_up is None:
        return None
    net = NcclNetwork(profile)
    return (net.gpus_of(np.arange(world)) // net.gpn).tolist()
