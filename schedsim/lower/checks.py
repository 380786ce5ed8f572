"""The static checks on a :class:`~schedsim.lower.program.Program`'s arrays.

The same rules as :mod:`schedsim.graph.checks` and :mod:`schedsim.graph.nccl` (NCCL's wait-for graph of
posted/done nodes per launch: rendezvous of collectives and send/recv pairs, one communicator's launches in
issue order, collectives on communicators sharing two or more ranks in one relative order, a batch posted
and completed as one unit), plus collectives of one group in one order on every rank, dependencies written
before their users, and the inputs of a p2p batch written before the batch is posted. A collective's
rendezvous is one hub node (posted(x) -> hub -> done(y) for all members), which has the cycles of the
all-pairs form. When a rule fails, the object-based build (:mod:`schedsim.lower.reference`) words the error
(op names, the NCCL issue grid, a fix).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedsim.kinds import P2P_KINDS
from schedsim.lower.program import Program, unique

__all__ = ["check_program", "launch_heads"]

I64 = np.int64


def launch_heads(prog: Program) -> tuple[np.ndarray, np.ndarray]:
    """``(comm, head)``: the indices of the communication ops in program order, and per such op the first
    member of its NCCL launch (itself, or the first op of its ``p2p_batch`` on its rank)."""
    comm = np.flatnonzero(prog.kind_mask(("send", "recv")) | _coll_mask(prog))
    head = comm.copy()
    b = prog.batch[comm]
    bm = (b >= 0) & prog.kind_mask(P2P_KINDS)[comm]
    if bm.any():
        nb = int(b.max()) + 1
        key = prog.rank[comm][bm].astype(I64) * nb + b[bm]
        _u, first, inv = unique(key)
        head[bm] = comm[bm][first][inv.reshape(-1)]
    return comm, head


def _coll_mask(prog: Program) -> np.ndarray:
    from schedsim.spec.model import COLLECTIVE_KINDS

    return prog.kind_mask(COLLECTIVE_KINDS)


def _collective_order_ok(prog: Program) -> bool:
    """Collectives of one group are issued in the same order on every rank."""
    ptr = prog.coll_ptr
    if len(ptr) < 2:
        return True
    key_of = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    idx = prog.coll_idx
    groups: dict[tuple[int, ...], int] = {}
    gid_t = np.full(len(prog.templates), -1, I64)
    for t in unique(prog.tmpl[idx])[0].tolist():
        gid_t[t] = groups.setdefault(tuple(prog.templates[t].group), len(groups))
    g = gid_t[prog.tmpl]
    kid = np.zeros(prog.N, I64)
    kid[idx] = key_of
    o = idx[np.lexsort((prog.seq[idx], prog.rank[idx], g[idx]))]
    go, ro, ko = g[o], prog.rank[o], kid[o]
    gstart = np.flatnonzero(np.r_[True, go[1:] != go[:-1]])
    for a, z in zip(gstart.tolist(), [*gstart[1:].tolist(), len(o)], strict=True):
        rr = ro[a:z]
        cuts = np.flatnonzero(np.r_[True, rr[1:] != rr[:-1]])
        lens = np.diff(np.r_[cuts, z - a])
        if len(set(lens.tolist())) > 1:
            return False
        rows = ko[a:z].reshape(len(cuts), int(lens[0]))
        if not bool((rows == rows[0]).all()):
            return False
    return True


def _comm_ids(prog: Program, heads: np.ndarray, eager: bool) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Per launch, its NCCL communicator as an id, and the ranks of each group communicator (ids below
    ``len(groups)``; a lone send/recv's two-rank communicator gets an id above them).

    A collective runs on its group's communicator; a batched send/recv (or, ``eager``, any send/recv) on the
    world's; a lone send/recv on the communicator of its pair of ranks (:func:`schedsim.graph.nccl.communicator`).
    """
    tps = prog.templates
    t = prog.tmpl[heads]
    groups: dict[tuple[int, ...], int] = {}
    t_gid = np.full(len(tps), -1, I64)
    p2p_t = np.array([tp.kind in P2P_KINDS for tp in tps], bool)
    for k in unique(t)[0].tolist():
        if not p2p_t[k]:
            t_gid[k] = groups.setdefault(tuple(tps[k].group), len(groups))
    is_p2p = p2p_t[t]
    cid = t_gid[t]
    batched = is_p2p & ((prog.batch[heads] >= 0) | eager)
    if batched.any():
        cid[batched] = groups.setdefault(tuple(range(prog.world_size)), len(groups))
    lone = is_p2p & ~batched
    if lone.any():
        r, pe = prog.rank[heads][lone].astype(I64), prog.peer[heads][lone].astype(I64)
        cid[lone] = len(groups) + np.minimum(r, pe) * prog.world_size + np.maximum(r, pe)
    return cid, list(groups)


def _wait_for_edges(prog: Program, comm: np.ndarray, head: np.ndarray, eager: bool
                    ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(nodes, edges, useq, u)`` of NCCL's wait-for graph: node 2u is "unit u posted", 2u + 1 "unit u
    done", 2n + c the hub of collective c; ``useq`` is each unit's position on its rank, ``u`` each op's unit
    (a p2p batch is one unit)."""
    unit = np.arange(prog.N)
    unit[comm] = head
    uniq, _first, u = unique(unit)
    u = u.reshape(-1)
    n = len(uniq)
    useq = prog.seq[uniq].astype(I64)
    ptr, dst, _kind = prog.succ
    src = np.repeat(np.arange(prog.N), np.diff(ptr))
    ua, ub = u[src], u[dst]
    keep = ua != ub
    parts = [np.stack([2 * np.arange(n), 2 * np.arange(n) + 1], 1), np.stack([2 * ua[keep] + 1, 2 * ub[keep]], 1)]
    nc = len(prog.coll_ptr) - 1
    if nc > 0:  # hub 2n + c: posted(member) -> hub -> done(member)
        hub = 2 * n + np.repeat(np.arange(nc), np.diff(prog.coll_ptr))
        mu = u[prog.coll_idx]
        parts += [np.stack([2 * mu, hub], 1), np.stack([hub, 2 * mu + 1], 1)]
    if len(prog.p2p):
        us, ur = u[prog.p2p[:, 0]], u[prog.p2p[:, 1]]
        parts += [np.stack([2 * us, 2 * ur + 1], 1), np.stack([2 * ur, 2 * us + 1], 1)]
    parts.append(_communicator_order(prog, comm, head, u, eager))
    return 2 * n + max(nc, 0), np.concatenate([p.astype(I64).reshape(-1, 2) for p in parts]), useq, u


def _ordered_by_position(n_nodes: int, edges: np.ndarray, useq: np.ndarray, prog: Program, u: np.ndarray) -> bool:
    """Whether every edge goes forward in the order "unit position, posted before hub before done": then the
    graph is acyclic without a sweep. It holds when each collective's members, and each send/recv pair, sit
    at one position on every rank (an SPMD program); any other graph is left to the sweep."""
    key = np.empty(n_nodes, np.float64)
    n = len(useq)
    key[0:2 * n:2] = 2.0 * useq
    key[1:2 * n:2] = 2.0 * useq + 1.0
    nc = len(prog.coll_ptr) - 1
    if nc > 0:
        ms = useq[u[prog.coll_idx]]
        key[2 * n:] = 2.0 * np.maximum.reduceat(ms, prog.coll_ptr[:-1]) + 0.5
    return bool((key[edges[:, 0]] < key[edges[:, 1]]).all())


def _communicator_order(prog: Program, comm: np.ndarray, head: np.ndarray, u: np.ndarray, eager: bool) -> np.ndarray:
    """Rules 3 and 4 of :mod:`schedsim.graph.nccl`: done(previous launch) -> posted(launch) on one communicator,
    and from the last launch of every group communicator that shares two or more ranks with this one."""
    heads = comm[comm == head]
    if not len(heads):
        return np.zeros((0, 2), I64)
    cid, groups = _comm_ids(prog, heads, eager)
    rank = prog.rank[heads].astype(I64)
    pos = np.arange(len(heads))  # heads are in program order: rank, then issue position
    o = np.lexsort((pos, cid, rank))
    same = (rank[o][1:] == rank[o][:-1]) & (cid[o][1:] == cid[o][:-1])
    uh = u[heads]
    out = [np.stack([2 * uh[o][:-1][same] + 1, 2 * uh[o][1:][same]], 1)]
    for a, b in _sharing_pairs(groups, cid):
        for x, y in ((a, b), (b, a)):  # done(last launch of x before it) -> posted(launch of y), on each rank
            ix, iy = np.flatnonzero(cid == x), np.flatnonzero(cid == y)
            k = np.searchsorted(ix, iy) - 1
            ok = k >= 0
            px, py = ix[k[ok]], iy[ok]
            ok2 = rank[px] == rank[py]
            out.append(np.stack([2 * uh[px[ok2]] + 1, 2 * uh[py[ok2]]], 1))
    return np.concatenate(out).astype(I64)


def _sharing_pairs(groups: list[tuple[int, ...]], cid: np.ndarray) -> list[tuple[int, int]]:
    """Pairs of distinct group communicators in use that share two or more ranks (rule 4)."""
    used = unique(cid[cid < len(groups)])[0].tolist()
    sets = [set(groups[g]) for g in used]
    return [(used[i], used[j]) for i in range(len(used)) for j in range(i + 1, len(used))
            if len(sets[i].intersection(sets[j])) >= 2]


def _acyclic(n: int, edges: np.ndarray) -> bool:
    """Kahn's sweep over ``edges`` (int64[E, 2]) on ``n`` nodes."""
    o = np.argsort(edges[:, 0], kind="stable")
    dst = edges[o, 1].tolist()
    ptr = np.zeros(n + 1, I64)
    np.cumsum(np.bincount(edges[:, 0], minlength=n), out=ptr[1:])
    p = ptr.tolist()
    indeg = np.bincount(edges[:, 1], minlength=n).tolist()
    stack = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    pop, push = stack.pop, stack.append
    while stack:
        a = pop()
        seen += 1
        for k in range(p[a], p[a + 1]):
            b = dst[k]
            d = indeg[b] - 1
            indeg[b] = d
            if not d:
                push(b)
    return seen == n


def _no_hang(prog: Program, comm: np.ndarray, head: np.ndarray, eager: bool = False) -> bool:
    n, e, useq, u = _wait_for_edges(prog, comm, head, eager)
    if len(e) and _ordered_by_position(n, e, useq, prog, u):
        return True
    return _acyclic(n, e)


def _batch_inputs_ok(prog: Program, comm: np.ndarray, head: np.ndarray) -> bool:
    """No member of a p2p batch waits for an op written after the batch's first member."""
    h = np.arange(prog.N)
    h[comm] = head
    size = np.bincount(h, minlength=prog.N)
    ptr, dst, _k = prog.succ
    src = np.repeat(np.arange(prog.N), np.diff(ptr))
    hv = h[dst]
    bad = (size[hv] >= 2) & (dst != hv) & (h[src] != hv) & (prog.seq[src] > prog.seq[hv])
    return not bool(bad.any())


def _forward_deps_ok(prog: Program) -> bool:
    e = prog.dep_edges
    return not len(e) or not bool((prog.seq[e[:, 0]] > prog.seq[e[:, 1]]).any())


def _cross_communicator_cycle(prog: Program, comm: np.ndarray, head: np.ndarray) -> bool:
    """Whether the collectives' per-rank issue orders admit no single global order (a "may hang" warning)."""
    if len(prog.coll_ptr) < 3:
        return False
    key = np.full(prog.N, -1, I64)
    key[prog.coll_idx] = np.repeat(np.arange(len(prog.coll_ptr) - 1), np.diff(prog.coll_ptr))
    heads = comm[(comm == head) & (key[comm] >= 0)]
    k, r = key[heads], prog.rank[heads]
    same = (r[1:] == r[:-1]) & (k[1:] != k[:-1])
    e = np.stack([k[:-1][same], k[1:][same]], 1) if same.any() else np.zeros((0, 2), I64)
    return bool(len(e)) and not _acyclic(len(prog.coll_ptr) - 1, e)


def check_program(prog: Program) -> list[str]:
    """Run every static check on ``prog``; returns the extra "may hang" warnings.

    Raises
    ------
    CycleError, DeadlockError, GraphError
        The error of the object-based build (:func:`schedsim.lower.reference.graph_from_ops`), which words
        it when a rule fails here.
    """
    comm, head = launch_heads(prog)
    ok = (_forward_deps_ok(prog) and _collective_order_ok(prog) and _no_hang(prog, comm, head)
          and _batch_inputs_ok(prog, comm, head))
    if not ok:
        _reference(prog, check=True)
        raise AssertionError("the array checks found a fault that the object-based build does not; please report it")
    if _cross_communicator_cycle(prog, comm, head) or _eager_hang(prog, comm, head):
        G = _reference(prog, check=True)
        return [w for w in G.graph.get("warnings", []) if w not in prog.warnings]
    return []


def _eager_hang(prog: Program, comm: np.ndarray, head: np.ndarray) -> bool:
    """Two ranks, collectives and a lone send/recv: would it hang with the p2p on the group's communicator?"""
    if prog.world_size != 2 or len(prog.coll_ptr) < 2 or not len(prog.p2p):
        return False
    if not bool((prog.batch[prog.p2p[:, 0]] < 0).any()):
        return False
    return not _no_hang(prog, comm, head, eager=True)


def _reference(prog: Program, check: bool) -> Any:
    from schedsim.lower.reference import graph_from_ops

    return graph_from_ops(prog.ops(), prog.graph_info(), prog.file, check=check)
