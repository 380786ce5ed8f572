"""Oracle: NCCL's ordering rules on a networkx graph of op instances (the object form): communicators, issue order
and the posted/done wait-for graph, one node pair per launch.

The rules are those of :mod:`schedsim.lower.checks` (its module docstring numbers them 1-7), which the package runs
on a Program's arrays; :mod:`tests.oracle.graph_checks` runs these on the graph of :mod:`tests.oracle.object_build`,
and the tests hold both forms to one verdict and one text (``tests/lower/test_check_wording.py``,
``test_nccl_hang_kinds.py``).
"""

from __future__ import annotations

import functools
import weakref
from collections import defaultdict
from typing import Any

import networkx as nx
import numpy as np

from schedsim.graph.ops import RankGroup
from schedsim.kinds import COMM_KINDS, P2P_KINDS
from schedsim.lower.check_errors import cross_communicator_warning, issue_grid
from schedsim.lower.checks import WAIT_REASONS, canonical_cycle, multi_peer_hubs
from schedsim.spec.model import COLLECTIVE_KINDS

__all__ = ["communicator", "issue_order", "wait_for_graph", "find_hang", "cross_communicator_order",
           "lazy_init_missing"]

Comm = tuple[Any, ...]


def communicator(op: Any, world: int, eager: bool = False,
                 p2p: dict[str, tuple[int, ...]] | None = None) -> Comm | None:
    """The NCCL communicator ``op`` runs on, as a hashable key, or None for non-NCCL ops.

    ``("group", r0, r1, ...)`` for a collective (its group) and for a batched send/recv (its process group:
    ``p2p[op id]``, :func:`p2p_of`, else the world); ``("pair", lo, hi)`` for a lone send/recv between ranks
    ``lo < hi``. Source: torch ``ProcessGroupNCCL::pointToPoint`` (batched p2p uses the device communicator,
    a single p2p the two-rank one). ``eager``: the process group was initialised eagerly
    (``init_process_group(device_id=...)``), so a lone send/recv runs on its group's communicator too (its
    written ``group:``, else the world's) (pytorch PRs 132900/154132; measured on 2×H200 with a world of two ranks).
    """
    if op.kind in COLLECTIVE_KINDS:
        return ("group", op.group)
    if op.kind in P2P_KINDS:
        if op.nccl_group is not None:
            ranks = (p2p or {}).get(op.id)
            return ("group", _world_group(world) if ranks is None else RankGroup(ranks))
        if eager:
            return ("group", _world_group(world) if op.comm is None else RankGroup(op.comm))
        a, b = op.rank, op.peer
        return ("pair", a, b) if a < b else ("pair", b, a)
    return None


def issue_order(G: nx.DiGraph) -> dict[int, list[list[str]]]:
    """Per rank, the NCCL launches in issue order; each launch is a list of op ids.

    A collective, lone send or lone recv is a launch of one op; a batch (same ``nccl_group``) is
    one launch listing its sends and recvs in ``seq`` order, to be passed to one
    ``batch_isend_irecv``. Non-communication ops are not listed.
    """
    per_rank: dict[int, list[Any]] = defaultdict(list)
    comm_kinds = frozenset(COLLECTIVE_KINDS) | {"send", "recv"}
    for op in nx.get_node_attributes(G, "op").values():
        if op.kind in comm_kinds:
            per_rank[op.rank].append(op)
    out: dict[int, list[list[str]]] = {}
    for r, ops in sorted(per_rank.items()):
        if any(a.seq > b.seq for a, b in zip(ops, ops[1:], strict=False)):  # nodes are normally in program order
            ops.sort(key=lambda o: o.seq)
        launches: list[list[str]] = []
        batch_at: dict[int, list[str]] = {}
        for op in ops:
            g = op.nccl_group
            if g is None:
                launches.append([op.id])
            elif g in batch_at:
                batch_at[g].append(op.id)
            else:
                batch_at[g] = [op.id]
                launches.append(batch_at[g])
        out[r] = launches
    return out


def wait_for_graph(G: nx.DiGraph, explain: bool = False, eager: bool = False, grouped: bool = False,
                   creation: bool = True) -> tuple[list[list[int]], list[str], dict[tuple[int, int], str]]:
    """The posted/done wait-for graph of ``G`` (rules 1-6 of :mod:`schedsim.lower.checks`, and 7 when ``grouped``).

    ``explain`` also fills ``why`` (slower; used only to word an error) for the edges of rules 1-7 (those of
    dependencies and stream order :func:`find_hang` adds). ``eager``: lone send/recv on the world's communicator
    (:func:`communicator`). ``creation=False``: without rule 6.

    Returns
    -------
    adj : list of list of int
        Node ``2u`` is "unit u posted", ``2u + 1`` is "unit u done"; ``adj[a]`` lists the nodes that
        cannot happen before ``a``. Units are ops, except that a batch is one unit.
    units : list of str
        Per unit, a label (op id, or the op ids of a batch joined by ``+``).
    why : dict
        Edge ``(a, b)`` -> reason (:data:`schedsim.lower.checks.WAIT_REASONS`: of parallel edges, the first
        there), and ``(hub, -1)`` -> the reason of a lazy-creation or multi-peer hub.
    """
    world = int(G.graph.get("world_size", 1))
    unit_of: dict[str, int] = {}
    labels: list[str] = []
    batch_unit: dict[tuple[int, int], int] = {}
    for oid, data in G.nodes(data=True):
        op = data["op"]
        g = op.nccl_group
        if g is not None and op.kind in P2P_KINDS:
            u = batch_unit.get((op.rank, g))
            if u is None:
                u = batch_unit[(op.rank, g)] = len(labels)
                labels.append(oid)
            else:
                labels[u] += "+" + oid
            unit_of[oid] = u
        else:
            unit_of[oid] = len(labels)
            labels.append(oid)
    n = len(labels)
    adj: list[list[int]] = [[2 * (i // 2) + 1] if i % 2 == 0 else [] for i in range(2 * n)]  # posted -> done
    why: dict[tuple[int, int], str] = {}
    for a, nbrs in G.adj.items():  # dependency and stream edges: done(a) before posted(b)
        if not nbrs:
            continue
        ua = unit_of[a]
        out = adj[2 * ua + 1]
        for b in nbrs:
            ub = unit_of[b]
            if ua != ub:
                out.append(2 * ub)
    # rendezvous: a member is done only once every member is posted (rule 2)
    hubs = []
    for members in G.graph.get("collectives", {}).values():
        us = [unit_of[m] for m in members]
        if len(us) > _HUB_MIN:
            # one hub node instead of len(us)^2 edges (a 1M-rank all_reduce): posted(x) -> hub -> done(y) for
            # all members; hub -> done(x) of x itself adds nothing (posted(x) -> done(x) exists already)
            hubs.append([2 * y + 1 for y in us])
            hub = 2 * n + len(hubs) - 1
            for x in us:
                adj[2 * x].append(hub)
            continue
        for x in us:
            for y in us:
                if x != y:
                    adj[2 * x].append(2 * y + 1)
                    if explain:
                        _why(why, (2 * x, 2 * y + 1), "collective")
    for s, r in G.graph.get("p2p", []):
        su, ru = unit_of[s], unit_of[r]
        adj[2 * su].append(2 * ru + 1)
        adj[2 * ru].append(2 * su + 1)
        if explain:
            _why(why, (2 * su, 2 * ru + 1), "p2p")
            _why(why, (2 * ru, 2 * su + 1), "p2p")
    # one communicator runs its launches in issue order (rule 3); collectives on communicators
    # sharing >= 2 ranks keep one relative order (rule 4)
    for _rank, launches in (G.graph.get("issue_order") or issue_order(G)).items():
        last: dict[Comm, int] = {}
        for launch in launches:
            op = G.nodes[launch[0]]["op"]
            comm = communicator(op, world, eager, p2p_of(G))
            u = unit_of[launch[0]]
            for other, pu in last.items():
                if other == comm:
                    adj[2 * pu + 1].append(2 * u)
                    if explain:
                        _why(why, (2 * pu + 1, 2 * u), "same communicator")
                elif other[0] == comm[0] == "group" and _share2(other, comm):
                    adj[2 * pu + 1].append(2 * u)
                    if explain:
                        _why(why, (2 * pu + 1, 2 * u), "communicators share ranks")
            last[comm] = u
    _lazy_hubs(G, world, eager, unit_of, n, adj, hubs, why, creation)
    _multi_peer_hubs(G, grouped, unit_of, n, adj, hubs, why)
    adj.extend(hubs)  # hub nodes are 2n, 2n+1, ... (find_hang folds them out of a reported cycle)
    return adj, labels, why


def _why(why: dict[tuple[int, int], str], edge: tuple[int, int], reason: str) -> None:
    """Record ``reason`` for ``edge`` unless a reason that comes first in
    :data:`schedsim.lower.checks.WAIT_REASONS` is recorded."""
    had = why.get(edge)
    if had is None or WAIT_REASONS.index(reason) < WAIT_REASONS.index(had):
        why[edge] = reason


def _lazy_hubs(G: nx.DiGraph, world: int, eager: bool, unit_of: dict[str, int], n: int, adj: list[list[int]],
               hubs: list[list[int]], why: dict[tuple[int, int], str], creation: bool = True) -> None:
    """Rule 6: per group communicator, one hub node that the first launch of each of its ranks posts to and
    that each of those launches' done waits for (a lazily created communicator is a rendezvous); nothing under
    ``nccl_init: eager`` or without ``creation``."""
    if not creation or G.graph.get("nccl_init", "lazy") != "lazy":
        return
    firsts: dict[Comm, list[int]] = {}
    host: list[tuple[int, Comm | None]] = []  # every launch's unit in host order, with the comm it creates
    for launches in (G.graph.get("issue_order") or issue_order(G)).values():
        seen: set[Comm] = set()
        host.append((-1, None))  # a rank boundary
        for launch in launches:
            comm = communicator(G.nodes[launch[0]]["op"], world, eager, p2p_of(G))
            if comm is not None and comm[0] == "group" and comm not in seen:
                seen.add(comm)
                firsts.setdefault(comm, []).append(unit_of[launch[0]])
                host.append((unit_of[launch[0]], comm))
            else:
                host.append((unit_of[launch[0]], None))
    hub_of: dict[Comm, int] = {}
    for comm, members in firsts.items():
        hubs.append([2 * y + 1 for y in members])
        hub = 2 * n + len(hubs) - 1
        hub_of[comm] = hub
        for x in members:
            adj[2 * x].append(hub)
        why[(hub, -1)] = "lazy init"
    # the creation blocks the rank's host: every later launch of the rank is issued only once it returned
    cur = -1
    for u, created in host:
        if u >= 0 and cur >= 0:
            hubs[cur - 2 * n].append(2 * u)
        cur = -1 if u < 0 else hub_of[created] if created is not None else cur


def _multi_peer_hubs(G: nx.DiGraph, grouped: bool, unit_of: dict[str, int], n: int, adj: list[list[int]],
                     hubs: list[list[int]], why: dict[tuple[int, int], str]) -> None:
    """Rule 7 (:func:`schedsim.lower.checks.multi_peer_hubs`), when ``grouped``: per hub, posted(member) -> hub
    -> done(member)."""
    pairs = G.graph.get("p2p", [])
    if not grouped or not pairs:
        return
    peers: dict[int, set[int]] = defaultdict(set)
    for oid, data in G.nodes(data=True):
        op = data["op"]
        if op.nccl_group is not None and op.kind in P2P_KINDS:
            peers[unit_of[oid]].add(op.peer)
    multi = np.zeros(n, bool)
    multi[[u for u, ps in peers.items() if len(ps) >= 2]] = True
    if not multi.any():
        return
    us = np.array([unit_of[s] for s, _r in pairs], np.int64)
    ur = np.array([unit_of[r] for _s, r in pairs], np.int64)
    units, hub_of = multi_peer_hubs(us, ur, multi)
    base = 2 * n + len(hubs)
    hubs.extend([] for _ in range(int(hub_of.max()) + 1 if len(hub_of) else 0))
    for u, h in zip(units.tolist(), hub_of.tolist(), strict=True):
        adj[2 * u].append(base + h)
        hubs[base + h - 2 * n].append(2 * u + 1)
        why[(base + h, -1)] = "multi-peer batch"


def lazy_init_missing(G: nx.DiGraph) -> tuple[Comm, list[int], list[int]] | None:
    """Under lazy communicator creation (``G.graph["nccl_init"]``, default ``"lazy"``): a group communicator
    that some of its ranks call and others never do, as ``(comm, ranks that call it, ranks that never do)``;
    those that call it wait in its creation forever (rule 6). None if there is none."""
    if G.graph.get("nccl_init", "lazy") != "lazy":
        return None
    world = int(G.graph.get("world_size", 1))
    users: dict[Comm, set[int]] = {}
    for r, launches in (G.graph.get("issue_order") or issue_order(G)).items():
        for launch in launches:
            comm = communicator(G.nodes[launch[0]]["op"], world, p2p=p2p_of(G))
            if comm is not None and comm[0] == "group":
                users.setdefault(comm, set()).add(int(r))
    for comm, rs in users.items():
        missing = sorted(set(comm[1]) - rs)
        if missing:
            return comm, sorted(rs), missing
    return None


#: Collectives with more members than this get one hub node in the wait-for graph instead of all pairs.
_HUB_MIN = 32


def _share2(a: Comm, b: Comm) -> bool:
    """Whether two group communicators share two or more ranks."""
    small, big = (a[1], b[1]) if len(a[1]) <= len(b[1]) else (b[1], a[1])
    return len(set(small).intersection(big)) >= 2


@functools.lru_cache(maxsize=8)
def _world_group(world: int) -> Any:
    return RankGroup(range(world))


_P2P_OF: weakref.WeakKeyDictionary[nx.DiGraph, dict[str, tuple[int, ...]]] = weakref.WeakKeyDictionary()


def p2p_of(G: nx.DiGraph) -> dict[str, tuple[int, ...]]:
    """Per batched send/recv of ``G`` (op id), its process group's ranks, object by object
    (:func:`tests.oracle.p2p_families.graph_p2p_communicators`), kept for ``G`` after the first call."""
    got = _P2P_OF.get(G)
    if got is None:
        from tests.oracle.p2p_families import graph_p2p_communicators

        ids = list(G.nodes)
        ops = [G.nodes[n]["op"] for n in ids]
        cid, comms = graph_p2p_communicators(G, ops, {n: i for i, n in enumerate(ids)})
        got = _P2P_OF[G] = {ids[i]: comms[c] for i, c in enumerate(cid.tolist()) if c >= 0}
    return got


def find_hang(G: nx.DiGraph, eager: bool = False, grouped: bool = False) -> list[tuple[int, int, str]] | None:
    """A cycle of the wait-for graph as its steps ``(a, b, reason)``, or None when NCCL cannot hang.

    One Kahn sweep (linear in ops + edges); only on failure the cycle that
    :func:`schedsim.lower.checks.canonical_cycle` chooses (hubs folded out: ``posted(x) -> hub -> done(y)`` is the
    step ``x -> y``), the one :func:`schedsim.lower.checks.hang_witness` chooses on the arrays. ``reason`` is one of
    :data:`schedsim.lower.checks.WAIT_REASONS`. ``eager`` and ``grouped`` as :func:`wait_for_graph` takes them.
    """
    adj, labels, why = wait_for_graph(G, eager=eager, grouped=grouped)
    N = len(adj)
    indeg = [0] * N
    for outs in adj:
        for b in outs:
            indeg[b] += 1
    stack = [i for i in range(N) if indeg[i] == 0]
    seen = 0
    while stack:
        a = stack.pop()
        seen += 1
        for b in adj[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                stack.append(b)
    if seen == N:
        return None
    lazy = G.graph.get("nccl_init", "lazy") == "lazy"
    for creation in (False, True) if lazy else (True,):  # as hang_witness: first without rule 6
        steps = _canonical_hang(G, eager, grouped, creation)
        if steps is not None:
            return steps
    raise AssertionError("the sweep found a hang that the cycle search does not")


def _canonical_hang(G: nx.DiGraph, eager: bool, grouped: bool, creation: bool) -> list[tuple[int, int, str]] | None:
    """:func:`find_hang`'s cycle on the wait-for graph with rule 6 (``creation``) or without it, or None."""
    adj, labels, why = wait_for_graph(G, explain=True, eager=eager, grouped=grouped, creation=creation)
    N = len(adj)
    n2 = 2 * len(labels)
    unit_of = {oid: k for k, label in enumerate(labels) for oid in label.split("+")}
    for a, nbrs in G.adj.items():  # the DAG's edges between units: done(a) before posted(b)
        for b, attrs in nbrs.items():
            if unit_of[a] != unit_of[b]:
                _why(why, (2 * unit_of[a] + 1, 2 * unit_of[b]), "a dependency" if attrs.get("kind") == "dep"
                     else "stream order")
    src: list[int] = []
    dst: list[int] = []
    prio: list[int] = []
    for a, outs in enumerate(adj):
        for b in outs:
            if a >= n2:  # a hub's edge: its reason (a collective's hub has none recorded)
                r = why.get((a, -1), "collective")
                r = "lazy host" if r == "lazy init" and b % 2 == 0 else r
            elif b >= n2 or (b == a + 1 and a % 2 == 0):
                r = "posted"  # into a hub (the hub's edge out gives the reason), or a launch's own posted -> done
            else:
                r = why[(a, b)]
            src.append(a)
            dst.append(b)
            prio.append(WAIT_REASONS.index(r))
    steps = canonical_cycle(N, np.array(src, np.int64), np.array(dst, np.int64), np.array(prio, np.int64), n2)
    if steps is None:
        return None
    G.graph["_hang_labels"] = labels
    return [(a, b, WAIT_REASONS[p]) for a, b, p in steps]


def cross_communicator_order(G: nx.DiGraph) -> str | None:
    """A "may hang" warning when no single order of the collectives agrees with every rank's issue order.

    NCCL asks for operations on different communicators to be issued in one order on every rank
    (NCCL documentation, "Using multiple NCCL communicators concurrently"); rule 4 makes that an error
    for communicators sharing two or more ranks. Communicators sharing one rank each can still form a
    cycle over three or more ranks (rank 0: A{0,1} then C{0,2}; rank 1: B{1,2} then A; rank 2: C then B):
    it runs only while the GPUs keep the kernels of every communicator resident at once, which NCCL does
    not promise. Call after :func:`find_hang` found no hang. Returns the warning text, or None.
    """
    keys = list(G.graph.get("collectives", {}))
    coll_key = {m: c for c, k in enumerate(keys) for m in G.graph["collectives"][k]}
    order = G.graph.get("issue_order") or issue_order(G)
    src: list[int] = []
    dst: list[int] = []
    for _rank, launches in order.items():
        prev = None
        for launch in launches:
            k = coll_key.get(launch[0])
            if k is None:
                continue
            if prev is not None and prev != k:
                src.append(prev)
                dst.append(k)
            prev = k
    steps = canonical_cycle(len(keys), np.array(src, np.int64), np.array(dst, np.int64),
                            np.zeros(len(src), np.int64), len(keys))
    if steps is None:
        return None
    names = [keys[a] for a, _b, _p in steps]
    return cross_communicator_warning(names, [m for k in names for m in G.graph["collectives"][k]], order)


def grid_of_ops(ops: list[Any], marked: set[str], ranks: Any = ()) -> str:
    """:func:`schedsim.lower.check_errors.issue_grid` of op instances (before the graph exists); ``ranks`` get a
    column even when they issue no communication."""
    per_rank: dict[int, list[str]] = defaultdict(list)
    for r in ranks:
        per_rank[r] = []
    batch_cell: dict[tuple[int, int], int] = {}
    for op in sorted(ops, key=lambda o: (o.rank, o.seq)):
        if op.kind not in COMM_KINDS:
            continue
        lst = per_rank[op.rank]
        if op.nccl_group is not None and (op.rank, op.nccl_group) in batch_cell:
            lst[batch_cell[(op.rank, op.nccl_group)]] += "+" + op.id
            continue
        if op.nccl_group is not None:
            batch_cell[(op.rank, op.nccl_group)] = len(lst)
        lst.append(op.id)
    return issue_grid(dict(per_rank), marked)
