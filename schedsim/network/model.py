"""The communication model behind one narrow interface: :class:`NetworkModel`.

The simulator asks it the node of each rank (:meth:`NetworkModel.rank_nodes`), the links that a run's transfers
across nodes share (:meth:`NetworkModel.link_share`), and two things of an op: the solo time of a collective or
send/recv (:meth:`NetworkModel.collective`, :meth:`NetworkModel.p2p`) and, where NCCL's tuning model times it, the
algorithm and protocol it chose (:meth:`NetworkModel.cost`). Behind it, by profile:

* a profile with ``topology.scale_up`` (and ``nics``): NCCL's own tuning model on that topology
  (:class:`schedsim.network.NcclNetwork`), except groups inside one node that have a measured table (or
  ``topology.nccl_within_node`` false);
* otherwise, and for those: the profile's nccl-tests busbw tables and link classes
  (:class:`schedsim.network.links.LinkTables`);
* one rank: no NCCL kernel (:meth:`NetworkModel.collective`).

Shared links (NICs and leaf uplinks of a cluster, max-min fair between concurrent flows): the loop calls the
:class:`schedsim.network.share.LinkShare` that :meth:`NetworkModel.link_share` returns when a transfer across nodes
starts or ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedsim.errors import ProfileError
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS, P2P_KINDS
from schedsim.network import CollectiveCost, NcclNetwork, rank_nodes
from schedsim.network.links import LinkTables, bus_factor

if TYPE_CHECKING:
    import numpy as np

    from schedsim.lower.program import Program
    from schedsim.network.share import LinkShare

__all__ = ["NetworkModel"]


class NetworkModel:
    """Solo times in seconds of collectives and send/recv on one profile. Pure and deterministic.

    ``floor_s``: the GPU's kernel floor (``gpu.kernel_floor_us``, s), the least a one-rank copy takes.
    """

    def __init__(self, profile: HardwareProfile, floor_s: float) -> None:
        self.profile = profile
        self._floor = floor_s
        self._links = LinkTables(profile)
        self._net = NcclNetwork(profile) if profile.topology.scale_up is not None else None

    @property
    def nccl(self) -> NcclNetwork | None:
        """NCCL's tuning model on the profile's topology (a profile with ``topology.scale_up``), else None."""
        return self._net

    def p2p(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds of one send/recv of ``nbytes`` from rank ``src`` to ``dst`` (:meth:`collective` of ``send``)."""
        return self.collective("send", nbytes, (src, dst))

    def rank_nodes(self, world: int) -> list[int] | None:
        """Node of each of ``world`` ranks on a cluster topology, for the loop's link tiers; None on other profiles
        (:func:`schedsim.network.rank_nodes`).

        Raises
        ------
        ProfileError
            As :meth:`NcclNetwork.gpu_of`.
        """
        return rank_nodes(self.profile, world)

    def link_share(self, prog: Program, gptr: np.ndarray, gidx: np.ndarray, work: np.ndarray) -> LinkShare | None:
        """The NICs and leaf uplinks ``prog``'s rendezvous groups share (CSR ``gptr``/``gidx`` of op indices,
        ``work`` their solo seconds), max-min fair (:func:`schedsim.network.share.program_share`); None where
        nothing is shared."""
        from schedsim.network.share import program_share

        return program_share(self.profile, prog, gptr, gidx, work, self._net)

    def collective(self, kind: str, nbytes: float, ranks: tuple[int, ...],
                   comm: tuple[int, ...] | None = None) -> float:
        """Time in seconds of collective ``kind`` moving ``nbytes`` (nccl-tests size) over ``ranks``; for a
        send/recv, ``comm``: the ranks of the communicator it runs on (None: its pair's), as :meth:`cost`.

        One rank: NCCL runs no collective (``ncclLaunchOneRank``, src/enqueue.cc: "for 1 rank, out-of-place is
        memcpy to self, and in-place is nop"), so the in-place kinds as the executor calls them (``all_reduce``,
        ``broadcast``, ``reduce``: ``one_rank`` ``nop`` in :data:`schedsim.kinds.KINDS`) take 0 s and the others a
        device-to-device copy of ``nbytes``. One H200 [evidence: timed-graph]: a 1-rank 8 KiB all_reduce in
        a graph timed op by op spanned 1.2-1.3 µs, its two timing events' own span."""
        n = len(ranks)
        if n <= 1:
            if KINDS[kind].one_rank == "nop":
                return 0.0
            return max(self._floor, 2.0 * nbytes / (self.profile.memcpy.d2d_GBps * 1e9)) if nbytes else self._floor
        nodes = None
        if self._net is not None:
            got = self.cost(kind, nbytes, ranks, comm)
            if got is not None:
                return got.seconds
            nodes = self._net.shape(ranks).nodes  # with the profile's placement
        t = self._links.time(KINDS[kind].table, nbytes, ranks, nodes)
        if kind in P2P_KINDS:
            return t
        # a group its own measured table times is floored only by a measured table of its fullest node's ranks:
        # the bound holds two models of the tiers together, and is no reason to overrule a measurement
        return max(t, self._node_floor(kind, nbytes, ranks, measured=self.has_table(KINDS[kind].table, ranks)))

    def all_to_all_split(self, rank: int, ranks: tuple[int, ...], send: tuple[float, ...],
                         recv: tuple[float, ...]) -> float:
        """Seconds of rank ``rank``'s part of an all_to_all over ``ranks`` with per-peer sizes: ``send[j]`` bytes to
        and ``recv[j]`` bytes from member ``j`` (group order; what it sends itself is a local copy, not counted).
        NCCL runs an all_to_all as grouped send/recv, every peer's at once (torch ``ProcessGroupNCCL::alltoall_base``
        with split sizes calls ``torch::cuda::nccl::all2all_single_unequal_split``: one ``ncclSend`` and one
        ``ncclRecv`` per peer of its counts inside ``ncclGroupStart`` / ``ncclGroupEnd``), so a rank's time is set
        by the busiest of its links, each full duplex: with ``S_in``/``S_out`` its bytes to and from peers on its
        node and ``X_in``/``X_out`` to and from other nodes,

        * on a cluster topology (NCCL's model, :meth:`schedsim.network.NcclNetwork.spread_bytes`):
          ``t = latency + max(max(S_out, S_in) / B_intra, max(X_out, X_in) / B_inter)``, the uniform all_to_all's
          formula (:meth:`~schedsim.network.NcclNetwork.spread`) with the rank's own byte counts;
        * on link tables: the uniform all_to_all whose rank moves as much, of nccl-tests size
          ``n/(n−1) · max(Σ send, Σ recv)`` (peers other than itself).

        The collective ends with its busiest member (every member's time, the largest taken: the simulator's rule
        for :data:`schedsim.kinds.PER_RANK_SIZE` kinds). One rank: a copy of what it sends itself."""
        n = len(ranks)
        me = ranks.index(rank) if rank in ranks else -1
        out = sum(x for j, x in enumerate(send) if j != me)
        inn = sum(x for j, x in enumerate(recv) if j != me)
        if n <= 1:
            return self.collective("all_to_all", max(send) if send else 0.0, ranks)
        if self._net is not None and not self.has_table("all_to_all", ranks):
            return self._net.spread_bytes(rank, ranks, send, recv).seconds
        return self.collective("all_to_all", n / (n - 1) * max(out, inn), ranks)

    def _node_floor(self, kind: str, nbytes: float, ranks: tuple[int, ...], measured: bool = False) -> float:
        """A lower bound, in seconds, on collective ``kind`` of ``nbytes`` over ``ranks`` when they span several nodes
        (else 0): the time at which its bus bandwidth equals that of the same collective on the ranks of its fullest
        node alone, ``t_local · bus_factor(kind, n) / bus_factor(kind, local)`` (nccl-tests busbw, ``bus_factor``).

        Why: busbw is the rate a GPU's own links carry the collective's traffic (nccl-tests
        ``doc/PERFORMANCE.md``); a group across nodes still runs its node's part over the same scale-up links, and
        the NICs only add a slower tier, so its busbw cannot exceed the node's (published: 8x H100 all_reduce
        ~480 GB/s busbw in one node, 391 GB/s over two; ``benchmarks/accuracy/network_published.py``). The tiers can
        disagree otherwise: a profile that times one node by its tables or link classes and nodes by the NCCL model
        (``topology.nccl_within_node: false``), or one whose ``links.network`` outruns ``links.pcie`` (``pcie2``:
        a 1 GiB all_reduce on 8 ranks of one node 245.8 ms by ``links.pcie``, on 9 ranks over two nodes 152.9 ms
        by ``links.network``, without this bound). 0 where ``nccl.algo`` / ``nccl.proto`` leave the node's ranks
        alone no algorithm (``NCCL_ALGO=NVLSTree`` runs only across nodes).

        ``measured``: ``ranks`` are timed by a measured table of their own (nccl-tests logs of this group and
        nodes); then only a measured table of the node's ranks bounds them (0 otherwise): a model of the node's
        part (``links.<class>`` alpha-beta, often assumed) must not overrule the group's own log
        (tests/network/test_network.py; docs/validation.md, "break16a").
        """
        import numpy as np

        from schedsim.arrays import unique

        rk = np.asarray(ranks, np.int64)
        if self._net is not None:
            gpu_node = self._net.gpus_of(rk) // self._net.gpn
        else:
            gpn = self.profile.topology.gpus_per_node
            gpu_node = rk // gpn if gpn else np.zeros(len(rk), np.int64)
        _nodes, first, inv = unique(gpu_node)  # (not np.unique: it imports numpy.ma)
        count = np.bincount(inv)
        if len(first) < 2:
            return 0.0
        fullest = np.flatnonzero(count == count.max())  # the fullest node; of equals, the first of the ranks'
        local = tuple(rk[inv == fullest[int(np.argmin(first[fullest]))]].tolist())
        if len(local) < 2 or (measured and not self.has_table(KINDS[kind].table, local)):
            return 0.0
        lf = bus_factor(kind, len(local))
        if not lf:
            return 0.0
        try:
            t_local = self.collective(kind, nbytes, tuple(local))
        except ProfileError:  # NCCL_ALGO / NCCL_PROTO allow the node's ranks alone nothing (NVLSTree): no bound
            return 0.0
        return t_local * bus_factor(kind, len(ranks)) / lf

    def has_table(self, kind: str, ranks: tuple[int, ...]) -> bool:
        """Whether a measured busbw table of the profile times collective ``kind`` (``sendrecv`` for send/recv)
        over ``ranks``: one for that group size, measured over as many nodes as the ranks span."""
        nodes = self._net.shape(ranks).nodes if self._net is not None else len(
            {r // self.profile.topology.gpus_per_node for r in ranks})
        return self._links.covers(kind, len(ranks), nodes)

    def cost(self, kind: str, nbytes: float, ranks: tuple[int, ...],
             comm: tuple[int, ...] | None = None) -> CollectiveCost | None:
        """The NCCL model's cost of collective or p2p ``kind`` over ``ranks`` (two or more; a send/recv's are
        ``(src, dst)``, run on the communicator of ranks ``comm``: None, its pair's own, torch's for a lone send/recv;
        :meth:`schedsim.network.NcclNetwork.p2p`) with its algorithm and protocol, on a profile with
        ``topology.scale_up`` (:class:`schedsim.network.NcclNetwork`); None on other profiles, and for a group the
        profile leaves to its tables (a measured table for the kind, size and nodes: :meth:`has_table`; or inside
        one node with ``topology.nccl_within_node`` false). A collective across nodes takes at least the time of the
        same one on its fullest node's ranks (:meth:`_node_floor`)."""
        if self._net is None or len(ranks) < 2:
            return None
        if kind in P2P_KINDS:
            shape = self._net.shape(ranks)
            if self.has_table("sendrecv", ranks) or (shape.nodes == 1 and not self.profile.topology.nccl_within_node):
                return None
            return self._net.p2p(ranks[0], ranks[-1], nbytes, comm)
        got = self._net.collective(kind, nbytes, ranks, has_table=self.has_table(kind, ranks))
        if got is not None:
            floor = self._node_floor(kind, nbytes, ranks)
            if floor > got.seconds:
                got = CollectiveCost(floor, got.algo, got.proto)
        return got
