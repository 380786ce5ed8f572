"""From the expansion's columns to a :class:`~schedsim.lower.program.Program`: program order, dependencies,
stream edges, collectives and send/recv pairs, all on integer arrays.

Each rule of the object-based build (:mod:`schedsim.lower.reference`) is tested here in bulk; when one
fails, that build is run on the same ops to word the error (op names, the NCCL issue grid, a fix), so the
messages are the reference's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedsim.graph.ops import Op
from schedsim.kinds import P2P_KINDS, PER_RANK_SIZE
from schedsim.lower.program import stable_order, unique
from schedsim.lower.table import Table
from schedsim.spec.model import COLLECTIVE_KINDS

__all__ = ["link", "explain"]

I64 = np.int64

UNIFORM = True
"""Link a table whose rows all run on every rank once, for rank 0 (:func:`_link_uniform`); False: always
link every op (the tests compare the two)."""


def _codes(templates: list[Op], kinds: Any) -> np.ndarray:
    return np.array([t.kind in kinds for t in templates], bool)


class _Cols:
    """The expansion's columns in program order, with the helpers the rules share."""

    def __init__(self, table: Table, once: bool = False) -> None:
        cols, dep_op, dep_name = table.columns(once)
        rk = cols["rank"]
        if not len(rk) or bool((rk[1:] >= rk[:-1]).all()):  # already in program order
            self.c = cols
        else:
            order = np.argsort(rk, kind="stable")
            self.c = {k: v[order] for k, v in cols.items()}
            inv = np.empty_like(order)
            inv[order] = np.arange(len(order))
            dep_op = inv[dep_op] if len(dep_op) else dep_op
        if len(dep_op) > 1 and not bool((dep_op[1:] >= dep_op[:-1]).all()):
            o2 = np.argsort(dep_op, kind="stable")
            dep_op, dep_name = dep_op[o2], dep_name[o2]
        self.dep_op, self.dep_name = dep_op, dep_name
        self.table = table
        self.N = len(rk)
        rank = self.c["rank"]  # ascending: an op's position on its rank is its index less its rank's first
        first = np.zeros(int(rank[-1]) + 2 if self.N else 1, I64)
        np.cumsum(np.bincount(rank, minlength=len(first) - 1), out=first[1:])
        seq = np.arange(self.N, dtype=np.int32)
        seq -= first[rank].astype(np.int32)
        self.c["seq"] = seq
        tp = table.templates
        self.is_p2p = _codes(tp, P2P_KINDS)[self.c["tmpl"]]
        self.is_coll = _codes(tp, COLLECTIVE_KINDS)[self.c["tmpl"]]

    def ops(self) -> list[Op]:
        """Op objects of the unlinked instances (dependencies as declared names), for the reference build."""
        t = self.table
        names = t.names.items
        dep_names: list[list[str]] = [[] for _ in range(self.N)]
        for o, n in zip(self.dep_op.tolist(), self.dep_name.tolist(), strict=True):
            dep_names[o].append(names[n])
        out = []
        c = {k: v.tolist() for k, v in self.c.items()}
        strs, tags, streams = t.strs.items, t.tags.items, t.streams.items
        for i in range(self.N):
            p = t.templates[c["tmpl"][i]]
            r, pe, b, m = c["rank"][i], c["peer"][i], c["batch"][i], c["msg"][i]
            p2p = p.kind in P2P_KINDS
            out.append(Op(names[c["name"][i]], r, p.kind, streams[c["stream"][i]], c["seq"][i], tuple(dep_names[i]),
                          ((r, pe) if p.kind == "send" else (pe, r)) if p2p else p.group, pe if p2p else p.peer,
                          p.root, p.nbytes, p.flops, p.dtype, p.m, p.n, p.k, p.batch, p.repeat, p.duration_s,
                          p.direction, None if m < 0 else strs[m], tags[c["tags"][i]], p.source, p.spec_index,
                          p.host_s, None if b < 0 else strs[b]))
        return out


def explain(cols: _Cols, file: str, info: dict[str, Any], check: bool) -> None:
    """Run the object-based build on these ops, which raises the error the array rules detected."""
    from schedsim.graph.info import PipelineInfo
    from schedsim.lower.reference import graph_from_ops

    pipe = info.get("pipeline")
    if isinstance(pipe, PipelineInfo):  # lower() passes it unconverted (its order can hold 10^5 strings)
        info = {**info, "pipeline": pipe.to_dict()}
    graph_from_ops(cols.ops(), info, file, check=check)
    raise AssertionError("the array checks found a fault that the object-based build does not; please report it")


def _resolve_deps(cols: _Cols) -> np.ndarray | None:
    """Dependency targets (op indices, one per declared dependency), or None when a rule is broken
    (unknown name, an op depending on itself, two members of one p2p batch, a name used twice on a rank)."""
    c = cols.c
    nm = c["name"]
    if len(nm) > 1 and len(cols.dep_op) and bool((nm[1:] > nm[:-1]).all()):
        # every op its own name, ascending (a pipeline's, interned in issue order): a table from name to op
        at = np.full(int(nm[-1]) + 1, -1, I64)
        at[nm] = np.arange(len(nm))
        dn = cols.dep_name
        tgt = at[dn] if int(dn.max()) < len(at) else np.full(len(dn), -1, I64)
        if bool((tgt >= 0).all()) and bool((c["rank"][tgt] == c["rank"][cols.dep_op]).all()):
            return _no_self_or_batch_deps(cols, tgt)
    nn = max(len(cols.table.names), 1)
    key = c["rank"].astype(I64) * nn + c["name"]
    korder = np.argsort(key, kind="stable")
    skey = key[korder]
    if len(skey) > 1 and bool((skey[1:] == skey[:-1]).any()):
        return None
    if not len(cols.dep_op):
        return np.zeros(0, I64)
    want = c["rank"][cols.dep_op].astype(I64) * nn + cols.dep_name
    pos = np.minimum(np.searchsorted(skey, want), len(skey) - 1)
    if not bool((skey[pos] == want).all()):
        return None
    return _no_self_or_batch_deps(cols, korder[pos])


def _no_self_or_batch_deps(cols: _Cols, tgt: np.ndarray) -> np.ndarray | None:
    """``tgt`` (int64), or None when an op depends on itself or on a member of its own p2p batch."""
    c = cols.c
    if bool((tgt == cols.dep_op).any()):
        return None
    b = c["batch"]
    pp = np.flatnonzero(cols.is_p2p[cols.dep_op] & cols.is_p2p[tgt])  # a p2p op waiting for one
    bo = b[cols.dep_op[pp]]
    same = (bo >= 0) & (bo == b[tgt[pp]])
    return None if bool(same.any()) else tgt.astype(I64, copy=False)


def _stream_edges(cols: _Cols) -> np.ndarray:
    """``(x, y)`` edges: consecutive ops on one stream of one rank; the members of one p2p batch that follow
    each other on a stream form a run that takes the edges of the op before it, and the op after the run
    gets an edge from each member. In the order the object-based build adds them (by ``y``, then ``x``).

    Built without a sort of the edges: every op ``y`` has its edges from one run (the one before it on its
    stream), whose members are ascending op indices, so listing the ops that have one in index order gives
    the edges sorted by ``(y, x)``; the ops are grouped by (rank, stream) with :func:`stable_order`."""
    c = cols.c
    N = cols.N
    ns = max(len(cols.table.streams.items), 1)
    key = c["rank"].astype(I64) * ns + c["stream"]
    o = stable_order(key, (int(c["rank"].max()) + 1) * ns if N else 1)
    k = key[o]
    b = np.where(cols.is_p2p, c["batch"], -1)[o]
    first = np.ones(N, bool)
    first[1:] = k[1:] != k[:-1]
    cont = np.zeros(N, bool)
    cont[1:] = ~first[1:] & (b[1:] >= 0) & (b[1:] == b[:-1])
    if not bool(cont.any()):  # no runs: each op's edge comes from the op before it on its stream
        xs = np.empty(N, I64)
        xs[o[1:]] = o[:-1]
        xs[o[first]] = -1
        ys = np.flatnonzero(xs >= 0)
        return np.stack([xs[ys], ys], axis=1)
    run = np.cumsum(~cont) - 1  # run id per position
    rstart = np.flatnonzero(~cont)
    rsize = np.diff(np.append(rstart, N))
    prev = np.where(first[rstart], -1, np.arange(len(rstart)) - 1)  # the run before, on the same stream
    pr = prev[run]
    has = np.flatnonzero(pr >= 0)
    start = np.full(N, -1, I64)  # per op y: the position in o of the run before it, and that run's size
    start[o[has]] = rstart[pr[has]]
    size = np.zeros(N, I64)
    size[o[has]] = rsize[pr[has]]
    ys = np.flatnonzero(start >= 0)
    cnt = size[ys]
    tot = int(cnt.sum())
    off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return np.stack([o[np.repeat(start[ys], cnt) + off], np.repeat(ys, cnt)], axis=1).astype(I64, copy=False)


def _collectives(cols: _Cols, represented: tuple[int, ...] = ()) -> tuple[list[str], np.ndarray, np.ndarray, bool]:
    """Collective keys (``name#ranks``, in order of first member), CSR of members, and whether every
    collective is consistent (one kind, size, root and dtype; issued once on each rank of its group, or with
    ``represented`` ranks, a symmetric lowering's, on each of them in its group)."""
    c = cols.c
    tp = cols.table.templates
    idx = np.flatnonzero(cols.is_coll)
    if not len(idx):
        return [], np.zeros(1, I64), np.zeros(0, I64), True
    gids: dict[tuple[int, ...], int] = {}
    groups: list[tuple[int, ...]] = []
    members_of: list[tuple[int, ...]] = []  # the group's ranks that issue it
    present = frozenset(represented)
    sigs: dict[tuple[Any, ...], int] = {}
    t_gid = np.full(len(tp), -1, I64)
    t_sig = np.full(len(tp), -1, I64)
    for t in unique(c["tmpl"][idx])[0].tolist():
        p = tp[t]
        g = tuple(p.group)
        t_gid[t] = gids.setdefault(g, len(gids))
        if len(groups) < len(gids):
            groups.append(g)
            members_of.append(tuple(r for r in g if r in present) if present else g)
        # all_to_all: a size per rank (reference._check_collectives says why)
        t_sig[t] = sigs.setdefault((p.kind, None if p.kind in PER_RANK_SIZE else p.nbytes, p.root, p.dtype),
                                   len(sigs))
    nn = max(len(cols.table.names), 1)
    ck = c["name"][idx].astype(I64) + nn * t_gid[c["tmpl"][idx]]
    uk, first, inv = unique(ck)
    korder = np.argsort(first, kind="stable")  # keys by first member in program order
    rank_of_key = np.empty_like(korder)
    rank_of_key[korder] = np.arange(len(korder))
    kid = rank_of_key[inv.reshape(-1)]
    mo = np.argsort(kid, kind="stable")
    members = idx[mo]
    ptr = np.zeros(len(uk) + 1, I64)
    np.cumsum(np.bincount(kid, minlength=len(uk)), out=ptr[1:])
    sig = t_sig[c["tmpl"][members]]
    mr = c["rank"][members].astype(I64)
    # per key, from its first member: the name and the group (``name#r0,r1,...``)
    first_m = members[ptr[:-1]]
    kgid = t_gid[c["tmpl"][first_m]]
    suffix = ["#" + ",".join(map(str, g)) for g in groups]
    keys = [n + suffix[g] for n, g in zip(cols.table.names.take(c["name"][first_m].tolist()), kgid.tolist(),
                                           strict=True)]
    # consistent: as many members as the group has ranks, one signature, and the sorted member ranks are the group
    cnt = np.diff(ptr)
    glen = np.array([len(g) for g in members_of], I64)
    ok = bool((cnt == glen[kgid]).all()) and bool((sig == np.repeat(sig[ptr[:-1]], cnt)).all())
    if ok:
        kk = np.repeat(np.arange(len(uk)), cnt)
        sorted_ranks = mr[np.lexsort((mr, kk))]
        gcat = np.concatenate([np.asarray(g, I64) for g in members_of])
        gstart = np.cumsum(glen) - glen
        want = gcat[np.repeat(gstart[kgid], cnt) + (np.arange(len(members)) - np.repeat(ptr[:-1], cnt))]
        ok = bool((sorted_ranks == want).all())
    return keys, ptr, members.astype(I64), ok


def _link_uniform(table: Table, W: int) -> tuple[_Cols, dict[str, Any]] | None:
    """:func:`link` of a table whose rows all run on ranks 0..W-1 (:meth:`Table.uniform`): every rank issues
    the same R ops in the same order, so rank 0's ops are linked and the result repeated with offsets
    ``k·R`` (op ``k·R + r`` is row ``r`` on rank ``k``; each collective is one row on all ranks). The arrays
    are those :func:`link` builds for the whole table. None when rank 0's ops break a rule, or hold sends,
    recvs or a collective whose group is not all ranks: :func:`link` then checks (and words) them."""
    one = _Cols(table, once=True)
    if bool(one.is_p2p.any()):
        return None
    tgt1 = _resolve_deps(one)
    if tgt1 is None:
        return None
    R, tp = one.N, table.templates
    every = tuple(range(W))
    crow = np.flatnonzero(one.is_coll)
    if any(tuple(tp[t].group) != every for t in unique(one.c["tmpl"][crow])[0].tolist()):
        return None
    off = np.arange(W, dtype=I64) * R
    cols = object.__new__(_Cols)
    cols.table, cols.N = table, R * W
    cols.c = {k: np.tile(v, W) for k, v in one.c.items()}
    cols.c["rank"] = np.repeat(np.arange(W, dtype=one.c["rank"].dtype), R)
    cols.is_p2p, cols.is_coll = np.tile(one.is_p2p, W), np.tile(one.is_coll, W)
    cols.dep_op = (one.dep_op[None, :] + off[:, None]).reshape(-1)
    cols.dep_name = np.tile(one.dep_name, W)
    tgt = (tgt1[None, :] + off[:, None]).reshape(-1)
    se1 = _stream_edges(one)
    se = (se1[None, :, :] + off[:, None, None]).reshape(-1, 2)
    de = np.stack([tgt, cols.dep_op], axis=1).astype(I64, copy=False) if len(tgt) else np.zeros((0, 2), I64)
    suffix = "#" + ",".join(map(str, every))
    keys = [n + suffix for n in table.names.take(one.c["name"][crow].tolist())]
    cidx = (crow[:, None].astype(I64) + off[None, :]).reshape(-1)
    cptr = np.arange(len(crow) + 1, dtype=I64) * W
    dep_ptr = np.zeros(cols.N + 1, I64)
    np.cumsum(np.tile(np.bincount(one.dep_op, minlength=R), W), out=dep_ptr[1:])
    return cols, {"dep_ptr": dep_ptr, "dep_idx": tgt.astype(I64), "stream_edges": se, "dep_edges": de,
                  "coll_keys": tuple(keys), "coll_ptr": cptr, "coll_idx": cidx, "p2p": np.zeros((0, 2), I64),
                  "warnings": ()}


def link(table: Table, file: str, info: dict[str, Any], check: bool) -> tuple[_Cols, dict[str, Any]]:
    """Program order, dependencies, edges, collectives and p2p pairs of the expanded ``table``.

    Returns the columns and the Program's linked arrays. Raises what the object-based build raises
    (:class:`~schedsim.errors.GraphError`, :class:`~schedsim.errors.DeadlockError`) when a rule is broken.
    """
    from schedsim.lower.p2p import match_p2p

    W = table.uniform() if UNIFORM else None
    if W is not None:
        done = _link_uniform(table, W)
        if done is not None:
            return done
    cols = _Cols(table)
    tgt = _resolve_deps(cols)
    if tgt is None:
        explain(cols, file, info, check=False)
    assert tgt is not None
    se = _stream_edges(cols)
    de = np.stack([tgt, cols.dep_op], axis=1).astype(I64, copy=False) if len(tgt) else np.zeros((0, 2), I64)
    keys, cptr, cidx, ok = _collectives(cols, info.get("represented", ()))
    if not ok:
        explain(cols, file, info, check=False)
    pairs, warnings = match_p2p(cols)
    if pairs is None:
        explain(cols, file, info, check=False)
    dep_ptr = np.zeros(cols.N + 1, I64)
    np.cumsum(np.bincount(cols.dep_op, minlength=cols.N), out=dep_ptr[1:])
    return cols, {"dep_ptr": dep_ptr, "dep_idx": tgt, "stream_edges": se, "dep_edges": de,
                  "coll_keys": tuple(keys), "coll_ptr": cptr, "coll_idx": cidx, "p2p": pairs,
                  "warnings": tuple(warnings)}
