"""Shared links: transfers across nodes that cross the same NIC or leaf uplink share it, max-min fair.

The simulator's ``waves`` loop asks this module one thing, at the start and at the end of every transfer across
nodes (a *flow*): which running flows' shares changed (:meth:`LinkShare.event`). A flow's share is the fraction of
its solo speed it gets now: the loops value a transfer's NIC link ends at its rank's comm rate × the share, its
scale-up ends as before (the rank's comm rate over the transfers on that end), and run it at the smallest (rule nccl-sms
of :mod:`schedsim.gpu.rules`); shares change only at flow starts and finishes.

Links (both directions of each, full duplex)
    * every NIC of every node (``topology.nics``; node n's NIC k is shared by the GPUs ``gpu_to_nic`` maps to it);
    * with a leaf/spine ``topology.fabric`` whose ``oversubscription`` exceeds 1, each leaf's uplink to the spine,
      one per rail (``nodes_per_leaf`` counts nodes per rail: NIC k of every node is on rail k's leaves), of
      ``nodes_per_leaf`` × NIC rate / ``oversubscription`` (a non-blocking fabric never binds
      before the NICs, so it has none).

Flows (aggregated per link, never per rank pair)
    * a send/recv between nodes: the sender NIC's out and the receiver NIC's in, weight 1;
    * a collective whose ranks span nodes: both directions of every NIC its ranks use, each weighted by its
      node's bytes per NIC over the most loaded NIC's (1 where every node sends alike). Its demand per NIC is
      the bytes a node sends across nodes (nccl-tests bus factor × size where NCCL's model picks a ring, which
      crosses a node boundary once per channel; the size where it picks a tree, NVLS-tree or CollNet,
      which sends the buffer across nodes once; all_to_all: each local rank's bytes for the other nodes) over
      the NICs the node's ranks use, taken at the node that loads a NIC most;
    * across leaves, a leaf's uplink (out) and downlink (in) of a rail carry the flow with weight = the sum of
      the weights of its NIC links of that direction in that leaf and rail.

    A send/recv's demand is the rate its bandwidth term drives the NIC at (:meth:`NcclNetwork.p2p`: the NIC's
    goodput, line rate × ``topology.nics.goodput``, over the oversubscription across the spine; LL at
    half); a NIC link carries that goodput. A collective's is its bytes per link over
    its solo time (its latency spread over the transfer: a fluid model). Both are capped at what the flow's links
    carry alone, so a flow alone always has share 1, and k send/recv that each fill one NIC get 1/k each.

Max-min fairness (progressive filling, D. Bertsekas and R. Gallager, *Data Networks*, 2nd ed., §6.5.2): every
unfrozen flow's rate rises together; a flow freezes at its demand, or when a link it crosses is full (weighted:
a link of residual capacity c carrying unfrozen weight W fills at rate c / W). The simulators issue 35 names do
it otherwise: ASTRA-sim's congestion-aware analytical backend queues a collective's chunks first-come
first-served on each link (astra-sim/astra-network-analytical, ``congestion_aware/Link.cc``: "Chunks are being
queued to this class instances"); SimAI-Analytical times each collective from busbw alone and leaves contention
to its packet-level ns-3 backend (aliyun/SimAI, README: "a simplified approach using busbw"). A fluid max-min
share, as flow-level simulators use, needs no chunking and keeps the cost per event bounded.

Cost: the links of every flow are built once, vectorised (O(ranks) per collective, O(1) per send/recv). An event
counts the flow on its links (O(its links), in numpy; a Python set only per link it shares with another flow) and
refills only the flows connected to it through links that two or more running flows share: O(k × e) for k
freezing rounds over the e link entries of those flows (k ≤ their number; up to :data:`SMALL_REFILL` entries over
Python scalars, :func:`maxmin_small`, the same rates bit for bit), nothing for a flow that shares no link. A
100,000-rank all_reduce running alone touches its 100,000 NIC links per event in numpy and never refills.
The compiled loop counts a flow that is alone on every link it crosses, at its start or end, on and off its links
itself (:meth:`LinkShare.loop_args`: no share changes) and calls :meth:`LinkShare.event` for the others only.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from schedsim.arrays import repeats
from schedsim.kinds import KINDS, P2P_KINDS
from schedsim.network import P2P_LL_THRESHOLD, GroupShape, NcclNetwork
from schedsim.network.links import bus_factor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from schedsim.hardware.profile import HardwareProfile
    from schedsim.lower.program import Program

__all__ = ["LinkShare", "LinkMap", "LinkUse", "LinkUtilisation", "link_share", "link_utilisation", "maxmin",
           "maxmin_small", "program_share", "shares_links"]

I64 = np.int64


def maxmin(demand: np.ndarray, cap: np.ndarray, flow: np.ndarray, link: np.ndarray, weight: np.ndarray
           ) -> np.ndarray:
    """Max-min fair rates (bytes/s) of flows with ``demand`` (bytes/s, shape F) over links of capacity ``cap``
    (bytes/s, shape L); entry e says flow ``flow[e]`` crosses link ``link[e]`` carrying ``weight[e]`` × its rate.
    Progressive filling (Bertsekas & Gallager, *Data Networks*, §6.5.2). Returns the rates, shape F, each at
    most its demand.

    >>> # three flows on one 50-unit link, demands 10, 30 and 60: 10 is met; the other two split 40
    >>> maxmin(np.array([10., 30., 60.]), np.array([50.]), np.array([0, 1, 2]), np.zeros(3, int), np.ones(3))
    array([10., 20., 20.])
    """
    F, L = len(demand), len(cap)
    rate = np.zeros(F)
    frozen = np.zeros(F, bool)
    res = cap.astype(float).copy()
    while not frozen.all():
        live = ~frozen[flow]
        wsum = np.bincount(link[live], weights=weight[live], minlength=L)
        used = wsum > 0
        lam_link = np.full(L, np.inf)
        lam_link[used] = np.maximum(res[used], 0.0) / wsum[used]
        lam = min(float(lam_link.min()), float(demand[~frozen].min()))
        full = lam_link <= lam  # links filled at this level
        hit = np.zeros(F, bool)
        hit[flow[live & full[link]]] = True
        new = ~frozen & ((demand <= lam) | hit)
        rate[new] = np.minimum(demand[new], lam)
        frozen |= new
        e = new[flow]
        res -= np.bincount(link[e], weights=weight[e] * rate[flow[e]], minlength=L)
    return rate


#: At most this many link entries (flows × their links) in an event's refill for :func:`maxmin_small`; larger ones
#: go to :func:`maxmin` (numpy), whose per-call cost is far above a scalar pass over a few dozen entries
SMALL_REFILL = 256


#: In this process: :func:`maxmin_small`'s answers by their arguments' values (the demands, the entries, the
#: capacities of the entries' links: the refilled flows' signature ids, :data:`_SIGS`), kept across refills and
#: runs: a pipeline's sends and recvs meet on the same NICs in the same numbers microbatch after microbatch and
#: point after point of a ``schedsim search`` (95 % of a search's refills were seen before). At most
#: :data:`REFILLS_KEPT`, then forgotten all at once. A pure cache: the function depends on those values alone.
REFILLS_KEPT = 1024
_REFILLS: dict[tuple[Any, ...], list[float]] = {}
#: In this process: an id per distinct flow *signature* (its demand, its (link, weight) pairs and those links'
#: capacities, :meth:`LinkShare._signature`), so that :data:`_REFILLS` is keyed by the refilled flows' ids, in
#: order: equal id sequences are equal arguments of :func:`maxmin_small` (its entries, demands and capacities are
#: the flows' signatures laid end to end), and a short tuple of ints is hashed and compared instead of the
#: arguments themselves. Ids are never reused (:data:`_SIG_IDS` counts on), so forgetting the table when it
#: holds :data:`SIGS_KEPT` gives a signature seen again a new id: a refill not found, never a wrong one.
SIGS_KEPT = 1 << 16
_SIGS: dict[tuple[Any, ...], int] = {}
_SIG_IDS = count()


def maxmin_small(demand: list[float], cap: dict[int, float], entries: list[tuple[int, int, float]]) -> list[float]:
    """:func:`maxmin` over Python scalars, the same floating-point operations in the same order, so the same rates
    bit for bit (``tests/network/test_shared_links.py`` compares them): ``entries`` ``(flow, link, weight)`` in
    :func:`maxmin`'s entry order, ``cap`` the capacity of each link they name (others may be there too). Each
    round's link sums add the live entries' weights in entry order from 0.0 (``np.bincount``'s loop), a link's
    level is ``max(residual, 0) / sum``, and the frozen flows' load leaves each link as one sum, subtracted once
    (not after the last round, whose residuals are read no more). For the refills of :meth:`LinkShare._event` (a
    few flows, dozens of links)."""
    F = len(demand)
    rate = [0.0] * F
    frozen = [False] * F
    res = {k: cap[k] for _f, k, _w in entries}
    left = F
    inf = float("inf")
    while left:
        wsum: dict[int, float] = {}
        for f, k, w in entries:
            if not frozen[f]:
                wsum[k] = wsum.get(k, 0.0) + w
        level = {k: (r if (r := res[k]) > 0.0 else 0.0) / w for k, w in wsum.items() if w > 0}
        lam = min(min(level.values(), default=inf), min(d for d, fr in zip(demand, frozen, strict=True) if not fr))
        if lam == inf:  # every link's level is inf <= lam (maxmin's lam_link <= lam): every live flow is hit
            full = None
        else:
            full = {k for k, v in level.items() if v <= lam}
        hit = {f for f, k, _w in entries if not frozen[f] and (full is None or k in full)}
        new = [not frozen[f] and (demand[f] <= lam or f in hit) for f in range(F)]
        load: dict[int, float] = {}
        for f in range(F):
            if new[f]:
                d = demand[f]
                rate[f] = d if d <= lam else lam
                frozen[f] = True
                left -= 1
        if not left:  # the last round: the residuals are read no more
            break
        for f, k, w in entries:
            if new[f]:
                load[k] = load.get(k, 0.0) + w * rate[f]
        for k, x in load.items():
            res[k] = res[k] - x
    return rate


@dataclass(frozen=True)
class LinkMap:
    """The shared links of a run and the flows on them.

    ``ptr``, ``link``, ``weight``: CSR per group g (collective or send/recv pair): the links of flow g are
    ``link[ptr[g]:ptr[g + 1]]`` (empty: the group stays inside a node), each carrying ``weight`` × the flow's
    rate. ``demand`` (bytes/s per unit weight, shape G; no more than any of its links carries alone), ``cap``
    (bytes/s, shape L), ``per_node`` (NICs per node), ``nic_links`` (2 × NICs), ``nbytes`` (bytes per unit
    weight a flow moves over each of its links).
    Links 2i and 2i + 1 are NIC i's out and in (node i // per_node); after the NICs, 2l and 2l + 1 are uplink l's
    up and down.
    """

    ptr: np.ndarray
    link: np.ndarray
    weight: np.ndarray
    demand: np.ndarray
    cap: np.ndarray
    per_node: int
    nic_links: int
    nbytes: np.ndarray

    def name(self, i: int) -> str:
        """Link ``i`` in words: ``node 3 NIC 1 out``, ``leaf 0 up`` (one NIC a node), ``leaf 0 rail 1 up``."""
        n_nic = self.nic_links
        if i < n_nic:
            k = i // 2
            return f"node {k // self.per_node} NIC {k % self.per_node} {('out', 'in')[i % 2]}"
        j, d = divmod(i - n_nic, 2)
        rail = f" rail {j % self.per_node}" if self.per_node > 1 else ""
        return f"leaf {j // self.per_node}{rail} {('up', 'down')[d]}"


class LinkShare:
    """Running flows and their max-min shares (:func:`maxmin`), updated at flow starts and finishes.

    ``share`` (float64, shape G) is read by the simulator's loops (the compiled one reads the buffer); ``flag``
    (int32, shape G) is 1 for the groups that are flows.
    """

    def __init__(self, lm: LinkMap) -> None:
        self.map = lm
        G = len(lm.ptr) - 1
        self.share = np.ones(G)
        self.flag = (np.diff(lm.ptr) > 0).astype(np.int32)
        self.count = np.zeros(len(lm.cap), I64)  # running flows per link
        self.first = np.full(len(lm.cap), -1, I64)  # the flow on a link that carries one
        self.on: dict[int, set[int]] = {}  # the flows on a link that carries two or more
        self._lists: dict[int, list[tuple[int, float]]] = {}  # a flow's (link, weight) pairs (_entries)
        self._caps: dict[int, float] = {}  # the capacity of each link of those flows
        self._sig: dict[int, tuple[int, float, int]] = {}  # a flow's (signature id, demand, links): _signature

    def loop_args(self) -> tuple[object, ...]:
        """The compiled loop's ``share`` argument: :meth:`event`, :attr:`share`, :attr:`flag`, and where no flow
        crosses a link twice, the link CSR (``ptr``, ``link``) with :attr:`count` and :attr:`first`, which the loop
        updates itself for a flow alone on all its links at its start or end (the events that change no share:
        :meth:`event` would return ``[]``), calling :meth:`event` for the others."""
        lm = self.map
        key = np.repeat(np.arange(len(lm.ptr) - 1, dtype=I64) * len(lm.cap), np.diff(lm.ptr))  # flow · links
        key += lm.link  # in place: one array of the links' length (8 MB at 64 ranks' 1M links), not two
        # (np.unique's hash table took 0.6 s on the 1M links of five 100,000-rank all_reduces; arrays.repeats: a
        # table of the flow · link range where it is small, a sort otherwise)
        if repeats(key, (len(lm.ptr) - 1) * len(lm.cap)):  # a link twice in one flow: counted once by _start;
            # leave it to event
            return self.event, self.share, self.flag
        return (self.event, self.share, self.flag, np.ascontiguousarray(lm.ptr, I64),
                np.ascontiguousarray(lm.link, I64), self.count, self.first)

    def links_of(self, g: int) -> np.ndarray:
        """Link indices of flow ``g``."""
        return self.map.link[self.map.ptr[g]:self.map.ptr[g + 1]]

    def _shared_links(self, h: int) -> list[int]:
        """The links of flow ``h`` that two or more running flows share: those :attr:`on` holds (a link carrying two
        or more flows is there, and only such a link: :meth:`_start`, :meth:`_end`; the compiled loop counts alone
        only flows that are alone on every link they cross), in the order of the flow's links."""
        on = self.on
        return [k for k, _w in self._entries(h) if k in on]

    def _entries(self, h: int) -> list[tuple[int, float]]:
        """Flow ``h``'s (link, weight) pairs as Python scalars, made at its first refill; the capacities of its
        links join :attr:`_caps`."""
        got = self._lists.get(h)
        if got is None:
            lm = self.map
            a, b = lm.ptr[h], lm.ptr[h + 1]
            links = lm.link[a:b].tolist()
            got = self._lists[h] = list(zip(links, lm.weight[a:b].tolist(), strict=True))
            self._caps.update(zip(links, lm.cap[lm.link[a:b]].tolist(), strict=True))
        return got

    def _signature(self, h: int) -> tuple[int, float, int]:
        """Flow ``h``'s signature id (:data:`_SIGS`), its demand and its number of links, made at its first refill
        (with :meth:`_entries`) for a flow of at most :data:`SMALL_REFILL` links; a larger flow's id is -1 (its
        refills go to :func:`maxmin`)."""
        got = self._sig.get(h)
        if got is None:
            lm = self.map
            n = int(lm.ptr[h + 1] - lm.ptr[h])
            d = float(lm.demand[h])
            sid = -1
            if n <= SMALL_REFILL:
                pairs = self._entries(h)
                caps = self._caps
                key = (d, tuple(pairs), tuple([caps[k] for k, _w in pairs]))
                sid = _SIGS.get(key, -1)
                if sid < 0:
                    if len(_SIGS) >= SIGS_KEPT:
                        _SIGS.clear()
                    sid = _SIGS[key] = next(_SIG_IDS)
            got = self._sig[h] = (sid, d, n)
        return got

    def _component(self, seeds: set[int]) -> tuple[list[int], list[int]]:
        """The running flows reachable from ``seeds`` through links two or more running flows share, ascending,
        and those of them on such a link (the rest, seeds alone, run at their solo speed)."""
        seen, todo, busy = set(seeds), list(seeds), []
        while todo:
            h = todo.pop()
            shared = self._shared_links(h)
            for lk in shared:
                for f in self.on[lk]:
                    if f not in seen:
                        seen.add(f)
                        todo.append(f)
            if shared:
                busy.append(h)
        return sorted(seen), sorted(busy)

    def _start(self, g: int) -> None:
        """Put flow ``g`` on its links: O(its links) in numpy, a set per link it shares."""
        lk = self.links_of(g)
        c = self.count[lk]
        self.first[lk[c == 0]] = g
        on = self.on
        for k, n in zip(lk[c > 0].tolist(), c[c > 0].tolist(), strict=True):
            if n == 1:
                on[k] = {int(self.first[k]), g}
            else:
                on[k].add(g)
        self.count[lk] += 1

    def _end(self, g: int) -> set[int]:
        """Take flow ``g`` off its links; returns the flows it shared a link with."""
        lk = self.links_of(g)
        c = self.count[lk]
        self.first[lk[c == 1]] = -1
        near: set[int] = set()
        on = self.on
        for k in lk[c > 1].tolist():
            fl = on[k]
            fl.discard(g)
            near |= fl
            if len(fl) == 1:
                self.first[k] = next(iter(fl))
                del on[k]
        self.count[lk] -= 1
        return near

    def event(self, g: int, started: int) -> list[int]:
        """Flow ``g`` starts (``started`` 1) or ends (0); returns the running flows whose share changed (``g``
        included when it starts below 1), their new shares in :attr:`share`. Only the flows connected to ``g``
        through shared links are refilled: the others' links did not change. A flow alone on all its links (no
        running flow on them at its start, none but itself at its end) changes no other flow's share, and its own
        is 1: it is put on or taken off its links without the refill (:meth:`_event`, the general form, gives the
        same; the tests compare them)."""
        lk = self.links_of(g)
        c = self.count[lk]
        if started and not c.any():
            self.first[lk[c == 0]] = g
            self.count[lk] += 1
            if self.share[g] == 1.0:
                return []
            self.share[g] = 1.0
            return [g]
        if not started and bool((c == 1).all()):
            self.first[lk[c == 1]] = -1
            self.count[lk] -= 1
            self.share[g] = 1.0
            return []
        return self._event(g, started)

    def _event(self, g: int, started: int) -> list[int]:
        """:meth:`event` for every flow, alone on its links or not."""
        if started:
            self._start(g)
            seeds = {g}
        else:
            seeds = self._end(g)
            self.share[g] = 1.0
        comp, busy = self._component(seeds) if seeds else ([], [])
        new = dict.fromkeys(comp, 1.0)
        lm = self.map
        sigs = [self._signature(h) for h in busy]
        if busy and sum([x[2] for x in sigs]) <= SMALL_REFILL:  # scalars: no numpy per round
            # the refill's arguments (entries, demands, capacities) are its flows' signatures in order: kept by
            # their ids (_SIGS), the arguments made only for a refill not seen yet
            want = [x[1] for x in sigs]
            key = tuple([x[0] for x in sigs])
            got = _REFILLS.get(key)
            if got is None:  # a refill not seen yet (the store emptied first when full)
                if len(_REFILLS) >= REFILLS_KEPT:
                    _REFILLS.clear()
                entries = [(i, k, w) for i, h in enumerate(busy) for k, w in self._entries(h)]
                got = _REFILLS[key] = maxmin_small(want, self._caps, entries)
            new.update(zip(busy, [1.0 if r >= d else r / d for r, d in zip(got, want, strict=True)], strict=True))
        elif busy:
            sizes = np.array([lm.ptr[h + 1] - lm.ptr[h] for h in busy], I64)
            idx = np.concatenate([np.arange(lm.ptr[h], lm.ptr[h + 1]) for h in busy])
            uniq, local = np.unique(lm.link[idx], return_inverse=True)
            dem = lm.demand[busy]
            rate = maxmin(dem, lm.cap[uniq], np.repeat(np.arange(len(busy)), sizes), local, lm.weight[idx])
            new.update(zip(busy, np.where(rate >= dem, 1.0, rate / dem).tolist(), strict=True))
        changed = []
        for h, sh in new.items():
            if sh != self.share[h]:
                self.share[h] = sh
                changed.append(h)
        return changed


def shares_links(profile: HardwareProfile) -> bool:
    """Whether ``profile``'s transfers across nodes share links here: its topology has ``scale_up`` and ``nics``."""
    return profile.topology.nics is not None and profile.topology.scale_up is not None


#: the NcclNetwork (with its caches of group shapes and choices) of the last profile seen, so the simulation and
#: the views built after it place a 100,000-rank group once (one entry: it keeps one profile alive)
_LAST_NET: list[tuple[HardwareProfile, NcclNetwork]] = []


def _network(profile: HardwareProfile, net: NcclNetwork | None = None) -> NcclNetwork:
    """``net`` (remembered for ``profile``), else the one remembered for this very profile object, else a new one."""
    if net is None and _LAST_NET and _LAST_NET[0][0] is profile:
        return _LAST_NET[0][1]
    net = net or NcclNetwork(profile)
    _LAST_NET[:] = [(profile, net)]
    return net


def link_share(profile: HardwareProfile, world: int, gptr: Sequence[int] | np.ndarray,
               granks: Sequence[int] | np.ndarray, kinds: Sequence[str], nbytes: Sequence[float] | np.ndarray,
               work: Sequence[float] | np.ndarray, net: NcclNetwork | None = None) -> LinkShare | None:
    """The :class:`LinkShare` of a run's groups on ``profile``; None when its topology has no ``nics`` or no group
    crosses a node (then the loops keep rule nccl-sms's per-rank links alone).

    ``gptr``/``granks``: CSR of each group's ranks (a send/recv pair as ``(sender, receiver)``); ``kinds`` the
    group's op kind (``send`` for a pair); ``nbytes`` its size (nccl-tests convention; the largest member's for
    all_to_all); ``work`` its solo seconds. Ranks map to nodes and NICs as :class:`schedsim.network.NcclNetwork`
    places them; ``net``: the cost model's (``CostModel.net.nccl``), whose caches already hold
    the run's groups.

    Raises
    ------
    ProfileError
        A rank without a GPU (:meth:`NcclNetwork.gpu_of`).
    """
    topo = profile.topology
    nics = topo.nics
    if nics is None or not shares_links(profile):
        return None
    net = _network(profile, net)
    gpn, per = topo.gpus_per_node, nics.per_node
    pl = topo.placement
    if pl is not None and world > len(pl):
        net.gpu_of(len(pl))  # raises: a rank beyond the placement
    gpu = np.asarray(pl[:world], I64) if pl is not None else np.arange(world, dtype=I64)
    if topo.nodes is not None and world and int(gpu.max()) >= topo.nodes * gpn:
        net.gpu_of(int(np.argmax(gpu >= topo.nodes * gpn)))  # raises: more GPUs than the nodes hold
    node = gpu // gpn
    if not world or int(node.min()) == int(node.max()):
        return None  # every rank on one node: no transfer crosses one (a ring of 500,000 pairs on 8 GPUs)
    nic_local = np.array([net.nic_of(x) for x in range(gpn)], I64)
    nic = node * per + nic_local[gpu % gpn]  # global NIC of each rank
    nodes = int(node.max()) + 1 if world else 0
    nic_bw = nics.bandwidth_Gbps / 8.0 * (nics.goodput or 1.0) * 1e9  # what a NIC moves (its goodput)
    fab = topo.fabric
    per_leaf = fab.nodes_per_leaf if fab is not None and fab.kind == "leaf_spine" and fab.oversubscription > 1.0 \
        else None
    leaves = (nodes + per_leaf - 1) // per_leaf if per_leaf else 0
    n_nic_links = 2 * nodes * per
    cap = np.full(n_nic_links + 2 * leaves * per, nic_bw)  # an uplink per leaf and rail
    if per_leaf and fab is not None:
        cap[n_nic_links:] = per_leaf * nic_bw / fab.oversubscription
    gp = np.asarray(gptr, I64)
    gr = np.asarray(granks, I64)
    work_a = np.asarray(work, float)
    size_a = np.asarray(nbytes, float)
    G = len(gp) - 1
    p2p = frozenset(P2P_KINDS)  # the registry's p2p kinds now (a set: one test per group)
    pair = np.fromiter(map(p2p.__contains__, kinds), bool, G) & (np.diff(gp) == 2)
    count = np.zeros(G, I64)
    # send/recv pairs, vectorised: the sender NIC's out, the receiver NIC's in (and their leaves' across the spine)
    pg = np.flatnonzero(pair)
    src, dst = gr[gp[pg]], gr[gp[pg] + 1]
    cross = node[src] != node[dst]
    spine = cross & (node[src] // per_leaf != node[dst] // per_leaf) if per_leaf else np.zeros(len(pg), bool)
    ok = cross & (size_a[pg] > 0) & (work_a[pg] > 0)
    count[pg[ok]] = 2 + 2 * spine[ok]
    colls: dict[int, tuple[np.ndarray, np.ndarray, float]] = {}
    # only a group of ranks on several nodes has links to share (_flow's first test, for every group in one pass:
    # NCCL's choice of algorithm, _algo, is asked of those alone; 125,000 all_reduces inside one node took 1.4 s)
    sizes = np.diff(gp)
    crosses = np.zeros(G, bool)
    ne = np.flatnonzero(sizes > 0)
    if len(ne):  # the non-empty groups' members lie back to back in gr: one reduceat each
        nd = node[gr]
        crosses[ne] = (sizes[ne] >= 2) & (np.minimum.reduceat(nd, gp[ne]) != np.maximum.reduceat(nd, gp[ne]))
    flows: dict[tuple[str, float, bytes], tuple[np.ndarray, np.ndarray, float]] = {}  # groups alike: once
    for g in np.flatnonzero(~pair & crosses).tolist():
        rk = gr[gp[g]:gp[g + 1]]
        fk = (kinds[g], float(size_a[g]), rk.tobytes())
        got = flows.get(fk)
        if got is None:
            got = flows[fk] = _flow(rk, kinds[g], float(size_a[g]), node, nic, per, per_leaf, n_nic_links,
                                    _algo(net, kinds[g], float(size_a[g]), rk))
        links, w, b = got
        if links.size and b > 0.0 and work_a[g] > 0.0:
            colls[g] = (links, w, b)
            count[g] = links.size
    ptr = np.concatenate([np.zeros(1, I64), np.cumsum(count)])
    link = np.zeros(int(ptr[-1]), I64)
    weight = np.ones(int(ptr[-1]))
    nb = np.zeros(G)
    at, s_, d_, sp = ptr[pg[ok]], src[ok], dst[ok], spine[ok]
    link[at], link[at + 1] = 2 * nic[s_], 2 * nic[d_] + 1
    link[at[sp] + 2] = n_nic_links + 2 * _uplink(nic[s_[sp]], per, per_leaf)
    link[at[sp] + 3] = n_nic_links + 2 * _uplink(nic[d_[sp]], per, per_leaf) + 1
    nb[pg[ok]] = size_a[pg[ok]]
    for g, (links, w, b) in colls.items():
        link[ptr[g]:ptr[g + 1]] = links
        weight[ptr[g]:ptr[g + 1]] = w
        nb[g] = b
    if not ptr[-1]:
        return None  # no transfer crosses a node: nothing to share
    demand = np.zeros(G)
    has = count > 0
    if len(link):
        demand[has] = nb[has] / work_a[has]
        # a send/recv drives its NICs at its bandwidth term while it moves data (NcclNetwork._p2p_terms: the NIC,
        # over the oversubscription across the spine; LL at half, at most llMaxBw)
        ll = size_a[pg[ok]] <= P2P_LL_THRESHOLD
        terms = {(a, b): net._p2p_terms(P2P_LL_THRESHOLD * (2 - a), True, GroupShape(2, 2, 1, 1, 1 + b, 1))[1] * 1e9
                 for a in (0, 1) for b in (0, 1)}
        demand[pg[ok]] = np.select([ll & sp, ll & ~sp, ~ll & sp], [terms[(1, 1)], terms[(1, 0)], terms[(0, 1)]],
                                   terms[(0, 0)])
        lim = np.minimum.reduceat(cap[link] / weight, ptr[:-1][has])  # alone, a flow always fits its links
        demand[has] = np.minimum(demand[has], lim)
    return LinkShare(LinkMap(ptr, link, weight, demand, cap, per, n_nic_links, nb))


def _algo(net: NcclNetwork, kind: str, size: float, rk: np.ndarray) -> str:
    """The algorithm NCCL's model picks for collective ``kind`` of ``size`` over ranks ``rk`` (``ring`` where the
    profile's tables time the group, or for the kinds NCCL builds from send/recv)."""
    if not KINDS[kind].nccl or len(rk) < 2 or size <= 0:
        return "ring"
    got = net.collective(kind, size, tuple(rk.tolist()))
    return got.algo if got is not None else "ring"


#: algorithms whose part across nodes is a tree (NCCL's double binary tree, NVLS-tree, CollNet): a node sends
#: the buffer once across nodes, where a ring sends it the bus factor's times (nccl-tests doc/PERFORMANCE.md)
TREE_ALGOS = frozenset({"tree", "nvls_tree", "collnet_direct", "collnet_chain"})


def _uplink(nics: np.ndarray, per: int, per_leaf: int | None) -> np.ndarray:
    """The leaf uplink (index among the uplinks: leaf × ``per`` + rail) of each global NIC in ``nics``: its node's
    leaf (node // ``per_leaf``) on its rail (its index in the node)."""
    return (nics // per // (per_leaf or 1)) * per + nics % per


def _flow(rk: np.ndarray, kind: str, size: float, node: np.ndarray, nic: np.ndarray, per: int,
          per_leaf: int | None, base: int, algo: str = "ring") -> tuple[np.ndarray, np.ndarray, float]:
    """(links, weights, bytes per unit weight) of one group of ranks ``rk`` (see the module doc) run with NCCL
    algorithm ``algo``; no links when it stays inside one node."""
    nd = node[rk]
    if len(rk) < 2 or nd.min() == nd.max():
        return np.zeros(0, I64), np.zeros(0), 0.0
    info = KINDS[kind]
    if info.host == "p2p":
        tx, rx = np.array([nic[rk[0]]]), np.array([nic[rk[-1]]])
        nbytes = size
        w = np.ones(1)
    else:
        n = len(rk)
        mark = np.zeros(int(nic.max()) + 1, bool)
        mark[nic[rk]] = True
        used = np.flatnonzero(mark)  # the NICs its ranks use, ascending (counting, not sorting: O(ranks))
        tx = rx = used
        per_node = np.bincount(nd)
        nd_u = np.flatnonzero(per_node)
        local = per_node[nd_u]
        nics_on = np.bincount(used // per, minlength=len(per_node))[nd_u]
        if not info.nccl and not info.rooted:  # grouped send/recv from every rank (all_to_all)
            node_bytes = local * size * (n - local) / n
        else:
            node_bytes = np.full(len(nd_u), (1.0 if algo in TREE_ALGOS else bus_factor(kind, n)) * size)
        load = node_bytes / nics_on  # bytes on each NIC of each of its nodes
        nbytes = float(load.max())
        at = np.zeros(len(per_node))
        at[nd_u] = load / nbytes if nbytes > 0 else 1.0
        w = at[used // per]  # a NIC of a node that sends less carries that part of the flow's unit
    links: list[np.ndarray] = [2 * tx, 2 * rx + 1]
    weights: list[np.ndarray] = [w, w]
    if per_leaf and len(np.unique(np.concatenate([tx, rx]) // per // per_leaf)) > 1:  # it crosses the spine
        for arr, d in ((tx, 0), (rx, 1)):
            up, inv = np.unique(_uplink(arr, per, per_leaf), return_inverse=True)
            links.append(base + 2 * up + d)
            weights.append(np.bincount(inv, weights=w, minlength=len(up)))
    return np.concatenate(links).astype(I64), np.concatenate(weights), nbytes


def _one_node(profile: HardwareProfile, world: int, net: NcclNetwork | None = None) -> bool:
    """Whether every one of ``world`` ranks sits on one node of ``profile`` (then no transfer crosses a node and no
    link is shared: :func:`program_share` and :func:`link_utilisation` skip their per-group work).

    Raises
    ------
    ProfileError
        A rank without a GPU (:meth:`NcclNetwork.gpus_of`), as :func:`link_share` raises it.
    """
    net = _network(profile, net)
    node = net.gpus_of(np.arange(world)) // net.gpn
    return not world or int(node.min()) == int(node.max())


#: :func:`program_share`'s last map: ``(weakref to the Program, profile, gptr, gidx, work, LinkMap or None)``
_LAST_SHARE: list[tuple[weakref.ref[Program], HardwareProfile, np.ndarray, np.ndarray, np.ndarray, LinkMap | None]] = []


def program_share(profile: HardwareProfile, prog: Program, gptr: np.ndarray, gidx: np.ndarray, work: np.ndarray,
                  net: NcclNetwork | None = None) -> LinkShare | None:
    """:func:`link_share` of ``prog``'s rendezvous groups as CSR ``gptr``/``gidx`` of op indices (collectives,
    then send/recv pairs as (send, recv), as ``prog.p2p`` holds them), ``work`` their solo seconds.

    The map of the last call is kept: a call for the same Program and profile objects with equal ``gptr``, ``gidx``
    and ``work`` gets a fresh :class:`LinkShare` of that map (the simulation's groups and solo seconds are those
    :func:`link_utilisation` asks for afterwards: at 100,000 ranks the map took ~25 ms each time)."""
    if not shares_links(profile) or _one_node(profile, prog.world_size, net):
        return None
    gptr, gidx, work = np.asarray(gptr), np.asarray(gidx), np.asarray(work, float)
    if _LAST_SHARE:
        ref, prof, gp, gi, wk, lm = _LAST_SHARE[0]
        if (ref() is prog and prof is profile and np.array_equal(gp, gptr) and np.array_equal(gi, gidx)
                and np.array_equal(wk, work)):
            return None if lm is None else LinkShare(lm)
    ls = _program_share(profile, prog, gptr, gidx, work, net)
    _LAST_SHARE[:] = [(weakref.ref(prog), profile, gptr.copy(), gidx.copy(), work.copy(),
                       None if ls is None else ls.map)]
    return ls


def _program_share(profile: HardwareProfile, prog: Program, gptr: np.ndarray, gidx: np.ndarray, work: np.ndarray,
                   net: NcclNetwork | None) -> LinkShare | None:
    """:func:`program_share` made anew."""
    G = len(gptr) - 1
    tps, tmpl = prog.templates, prog.tmpl
    first = tmpl[gidx[gptr[:-1]]] if G else np.zeros(0, np.int64)  # each group's first member's template
    kinds = list(map([t.kind for t in tps].__getitem__, first.tolist()))
    tbytes = np.array([float(t.nbytes) for t in tps])
    size = np.maximum.reduceat(tbytes[tmpl[gidx]], gptr[:-1]) if G and len(gidx) else np.zeros(G)
    ranks = prog.rank[gidx]
    if prog.represented and G:  # a symmetric lowering: a collective's links are those of its whole group
        p2p = frozenset(P2P_KINDS)
        C = G - sum(map(p2p.__contains__, kinds))  # collectives, then the (send, recv) pairs
        # each collective's whole group, from its template's (one array per distinct template, gathered)
        uniq, inv = np.unique(first[:C], return_inverse=True)
        garr = [np.asarray(tps[t].group, np.int64).reshape(-1) for t in uniq.tolist()]
        glen = np.array([len(g) for g in garr], np.int64)
        goff = np.concatenate([[0], np.cumsum(glen)[:-1]]).astype(np.int64)
        lens = glen[inv]
        cum = np.cumsum(lens)
        at = np.repeat(goff[inv] - (cum - lens), lens) + np.arange(int(cum[-1]) if C else 0)
        flat = np.concatenate(garr) if garr else np.zeros(0, np.int64)
        ranks = np.concatenate([flat[at], ranks[int(gptr[C]):]])
        gptr = np.concatenate([[0], cum, int(cum[-1] if C else 0) + 2 * np.arange(1, G - C + 1)]).astype(np.int64)
    return link_share(profile, prog.world_size, gptr, ranks, kinds, size, work, net)


#: the links :func:`link_utilisation` keeps (those that moved the most bytes): a view, not every NIC of a cluster
MAX_SHOWN_LINKS = 16


class LinkUse(TypedDict):
    """One shared link of :func:`link_utilisation`: its ``name``, ``capacity_Bps`` (bytes/s), the ``bytes`` it
    moved, and its ``steps`` (``[t_s, bytes/s]`` rows, the rate from that time on: a float64 array of shape (n, 2)
    as :func:`link_utilisation` makes it, lists of pairs as read from timeline.json)."""

    name: str
    capacity_Bps: float
    bytes: float
    steps: np.ndarray | list[list[float]]


class LinkUtilisation(TypedDict):
    """:func:`link_utilisation`'s result, ``Timeline.meta["links"]``: the ``links`` shown, their count (``shown``) and
    the count of links with traffic (``of``)."""

    links: list[LinkUse]
    shown: int
    of: int


def link_utilisation(profile: HardwareProfile, prog: Program, start_s: np.ndarray, end_s: np.ndarray,
                     solo_s: np.ndarray | None = None, shared: bool = True) -> LinkUtilisation | None:
    """Bytes per second on each shared link over a run of ``prog`` (op i from ``start_s[i]`` to ``end_s[i]``, seconds;
    ``solo_s[i]`` its solo seconds as the simulation had them, which set a collective's demand as in the simulation:
    without them, or where one is unknown (NaN), a collective is taken to want no more than its bytes over its span;
    ``shared`` False for a run whose GPU model shares no links (``replay``): each transfer's bytes then spread
    evenly over its span): ``{"links": [{"name", "capacity_Bps", "bytes", "steps": (n, 2) float64 array of [t_s,
    B/s] rows}, ...], "shown", "of"}`` for the :data:`MAX_SHOWN_LINKS` links that moved the most bytes (``of``:
    links with traffic), or None when the profile shares no links or no transfer crossed a node. A transfer's bytes
    on a link (:class:`LinkMap`) are spread over its transfer (from its group's last member start to its end) in
    proportion to its max-min share, replayed from the transfers' start and end times (:func:`_share_history`), so
    each link's steps integrate to the bytes moved over it and, where the shares alone set the speeds, never exceed
    its capacity; the steps are piecewise constant (``t_s`` on, until the next step)."""
    if not shares_links(profile) or prog.N == 0 or _one_node(profile, prog.world_size):
        return None
    from schedsim.lower.program import rendezvous_groups

    gptr, gidx, G, _c, _lone = rendezvous_groups(prog)
    if not G:
        return None
    t0 = np.maximum.reduceat(start_s[gidx], gptr[:-1])
    t1 = np.maximum.reduceat(end_s[gidx], gptr[:-1])
    work = np.maximum(t1 - t0, 1e-12)
    if solo_s is not None:  # the group's solo time (the largest member's, as the simulation takes it)
        solo = np.maximum.reduceat(np.asarray(solo_s, float)[gidx], gptr[:-1])
        work = np.where(np.isfinite(solo) & (solo > 0), solo, work)
    ls = program_share(profile, prog, gptr, gidx, work)
    if ls is None:
        return None
    lm = ls.map
    flows = np.flatnonzero((np.diff(lm.ptr) > 0) & (t1 > t0))
    cnt = np.diff(lm.ptr)
    g_of = np.repeat(np.arange(G), cnt)
    moved = lm.weight * lm.nbytes[g_of]
    total = np.bincount(lm.link, weights=moved * np.isin(g_of, flows), minlength=len(lm.cap))
    busy = np.flatnonzero(total > 0)
    if not len(busy):
        return None
    hist = _share_history(ls, flows, t0, t1) if shared and _overlap(lm, flows, t0, t1) else {
        g: (np.array([t0[g], t1[g]]), np.array([1.0, 0.0])) for g in flows.tolist()}  # each flow alone: share 1
    shown = busy[np.argsort(-total[busy], kind="stable")[:MAX_SHOWN_LINKS]]
    steps = _link_steps(lm.link, g_of, moved, hist, sorted(shown.tolist()), G)
    out: list[LinkUse] = []
    for k, (tt, level) in steps.items():
        out.append({"name": lm.name(k), "capacity_Bps": float(lm.cap[k]), "bytes": float(total[k]),
                    "steps": np.stack([tt, level], axis=1)})  # (n, 2) float64: timeline.json writes the same text
    # as of the lists (orjson), without a Python float and list per step held (docs/validation.md, "fast38q")
    return {"links": out, "shown": len(out), "of": int(len(busy))}


def _link_steps(link: np.ndarray, g_of: np.ndarray, moved: np.ndarray,
                hist: dict[int, tuple[np.ndarray, np.ndarray]], links: list[int], G: int
                ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per link of ``links`` (in that order), the steps of its rate: ``(times, bytes/s)``, one per instant, the level
    after all its changes there. ``link``, ``g_of``, ``moved``: per entry of the link map, its link, its flow (of
    ``G``) and the bytes it moved; ``hist``: each flow's share history (:func:`_share_history`). An entry spreads its
    bytes over its flow's transfer in proportion to the flow's share: ``moved × share / area`` B/s from each time of
    the history on, ``area`` the share's integral over the transfer. Every flow's history is laid out once, flat,
    and a link's entries gathered from it (the loop over a link's flows it replaced is the test oracle
    ``tests/oracle/link_steps.py``: 16 links × 7,813 collectives on 64 ranks took 2.8 CPU s)."""
    at = np.full(G, -1, I64)
    at[list(hist)] = np.arange(len(hist))
    seg = list(hist.values())
    lens = np.array([len(x[0]) for x in seg], I64)
    ptr = np.zeros(len(seg) + 1, I64)
    np.cumsum(lens, out=ptr[1:])
    T = np.concatenate([x[0] for x in seg]) if seg else np.zeros(0)
    S = np.concatenate([np.asarray(x[1], float) for x in seg]) if seg else np.zeros(0)
    dT = T[1:] - T[:-1]  # within a flow's run: np.diff of its times
    # the share's integral over each flow's transfer: a dot product per flow, as numpy takes it on its own arrays
    area = np.array([float(np.dot(dT[a:b - 1], S[a:b - 1]))
                     for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)])
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if not links:
        return out
    # each link's entries (ascending), all found in one pass over the map (100,000 ranks' NICs: 1M entries)
    slot = np.full(max(int(link.max()) if len(link) else -1, *links) + 1, -1, I64)  # link -> its place in links
    slot[links] = np.arange(len(links))
    of = slot[link]
    mine = np.flatnonzero(of >= 0)
    mine = mine[np.argsort(of[mine], kind="stable")]
    for k, es in zip(links, np.split(mine, np.cumsum(np.bincount(of[mine], minlength=len(links)))[:-1]),
                     strict=True):
        fs = at[g_of[es]]
        es, fs = es[fs >= 0], fs[fs >= 0]  # the link's entries whose flow has a history
        n = lens[fs]
        pos = np.repeat(ptr[fs] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))  # each entry's run of T and S
        t = T[pos]
        v = np.repeat(moved[es], n) * S[pos] / np.repeat(area[fs], n)
        # the rate's changes: its first value at the start, the differences, minus its last value at the end
        first = np.zeros(len(pos), bool)
        first[np.cumsum(n) - n] = True
        end = np.roll(first, -1) if len(pos) else first
        d = np.where(end, 0.0, v) - np.where(first, 0.0, np.concatenate(([0.0], v[:-1])))
        out[k] = _steps_of(t, d)
    return out


def _steps_of(t: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(times, levels)``: the running sum of the changes ``d`` (B/s) at the times ``t`` (seconds) in time order
    (stable), one step per instant (the level after all its changes), a level within 1e-9 of the largest change
    of zero set to 0 (the sum's rounding at a link's idle times)."""
    order = np.argsort(t, kind="stable")
    tt, level = t[order], np.cumsum(d[order])
    last = np.r_[tt[1:] != tt[:-1], True]
    level = np.where(np.abs(level) <= 1e-9 * float(np.abs(d).max()), 0.0, level)
    return tt[last], level[last]


def _overlap(lm: LinkMap, flows: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> bool:
    """Whether two of ``flows`` are on one link at once (from ``t0`` to ``t1``, seconds; one ending as the other
    starts is not at once, as :func:`_share_history` replays ends first). Without, every flow runs alone on its
    links throughout, at share 1 (what the replay gives: one step at its start, 0 at its end). Flows none of which
    runs at once with another (each starts once the ones before it ended: five all_reduces of 100,000 ranks in a
    row) share no link at once, whatever their links: that is found first from the flows' times alone."""
    if len(flows) < 2:
        return False
    by_start = flows[np.argsort(t0[flows], kind="stable")]
    if bool((np.maximum.accumulate(t1[by_start[:-1]]) <= t0[by_start[1:]]).all()):
        return False
    return _overlap_on_links(lm, flows, t0, t1)


def _overlap_on_links(lm: LinkMap, flows: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> bool:
    """:func:`_overlap` by the flows on each link: consecutive starts on a link, each against the end before it."""
    on = np.isin(np.repeat(np.arange(len(lm.ptr) - 1), np.diff(lm.ptr)), flows)
    g = np.repeat(np.arange(len(lm.ptr) - 1), np.diff(lm.ptr))[on]
    link = lm.link[on]
    o = np.lexsort((t0[g], link))  # by link, then start
    g, link = g[o], link[o]
    same = (link[1:] == link[:-1]) & (g[1:] != g[:-1])  # consecutive flows on one link (a link twice in a flow: once)
    return bool((t0[g[1:]][same] < t1[g[:-1]][same]).any())


def _share_history(ls: LinkShare, flows: np.ndarray, t0: np.ndarray, t1: np.ndarray
                   ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Each flow's max-min share over its transfer, replayed from the transfers' starts ``t0`` and ends ``t1``
    (seconds; ends first at one instant, as a link frees before the next flow takes it): per flow, the times its
    share changed (its start first, its end last) and the share from each on (0 at its end)."""
    ev = sorted([(float(t1[g]), 0, g) for g in flows.tolist()] + [(float(t0[g]), 1, g) for g in flows.tolist()])
    raw: dict[int, list[tuple[float, float]]] = {}
    for t, started, g in ev:
        changed = ls.event(g, started)
        if started:
            raw[g] = [(t, float(ls.share[g]))]
        for h in changed:
            if h != g:
                raw[h].append((t, float(ls.share[h])))
        if not started:
            raw[g].append((t, 0.0))
    return {g: (np.array([a for a, _ in r]), np.array([b for _, b in r])) for g, r in raw.items()}
