"""From the expansion's columns to a :class:`~schedsim.lower.program.Program`: program order, dependencies,
stream edges, collectives and send/recv pairs, all on integer arrays.

Each rule of the object-based build (the test oracle ``tests/oracle/object_build.py``) is tested here in bulk; when one
fails, :func:`build_fault` finds the first broken rule in that build's order on the same arrays and words it with
:mod:`schedsim.lower.check_errors` (op names, the NCCL issue grid, a fix), the text that build raises
(``tests/lower/test_build_fault_wording.py`` compares the two).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from schedsim.errors import GraphError
from schedsim.graph.ops import Op
from schedsim.kinds import KINDS, P2P_KINDS, PER_RANK_SIZE
from schedsim.lower.check_errors import (
    CollectiveMember,
    batch_dep_error,
    collective_mismatch_error,
    collective_missing_error,
    comm_grid,
    duplicate_name_error,
    p2p_pairing_error,
    self_dep_error,
    unknown_dep_error,
    unmatched_p2p_error,
)
from schedsim.lower.p2p import _msg_values, _oid
from schedsim.lower.program import UniformLinks, batch_heads, required, stable_order, unique
from schedsim.lower.table import Table
from schedsim.made import MadeOnRead
from schedsim.spec.model import COLLECTIVE_KINDS

__all__ = ["CollectiveKeys", "build_fault", "link"]

I32, I64 = np.int32, np.int64

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
            order = stable_order(rk, int(rk.max()) + 1)  # by radix where the ranks fit 16 bits
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


def build_fault(cols: _Cols, file: str, represented: tuple[int, ...] = ()) -> GraphError:
    """The error of the first build rule that ``cols`` breaks, in the object-based build's order
    (the oracle's ``graph_from_ops``): a name used twice on a rank; per dependency in program
    order, an unknown name, the op itself or a member of its own p2p batch; per collective in order of first
    member, a member unlike the first, then ranks of its group that never issue it; per (src, dst) ascending,
    the first send/recv pair whose tags, messages or sizes disagree, then unmatched sends or recvs. Worded by
    :mod:`schedsim.lower.check_errors` from the arrays (op names, the NCCL issue grid, a fix).

    Raises
    ------
    AssertionError
        No rule is broken (the caller found a fault that this does not).
    """
    err = _name_fault(cols, file) or _dep_fault(cols) or _collective_fault(cols, represented) or _p2p_fault(cols)
    if err is None:
        raise AssertionError("the array checks found a fault that the wording does not find; please report it")
    return err


def _name(cols: _Cols, i: int) -> str:
    return str(cols.table.names.item(int(cols.c["name"][i])))


def _source(cols: _Cols, i: int) -> str:
    return cols.table.templates[int(cols.c["tmpl"][i])].source


def _name_fault(cols: _Cols, file: str) -> GraphError | None:
    """A name used twice on a rank: its first reuse in program order, with the op that first had it."""
    c = cols.c
    key = c["rank"].astype(I64) * max(len(cols.table.names), 1) + c["name"]
    o = np.argsort(key, kind="stable")
    sk = key[o]
    dup = np.flatnonzero(sk[1:] == sk[:-1]) + 1
    if not len(dup):
        return None
    j = int(dup[np.argmin(o[dup])])
    i, f = int(o[j]), int(o[np.searchsorted(sk, sk[j])])
    return duplicate_name_error(_source(cols, i) or file, _name(cols, i), int(c["rank"][i]),
                                _source(cols, f) or "the pipeline block")


def _dep_fault(cols: _Cols) -> GraphError | None:
    """The first dependency (ops in program order, each's as declared) on an unknown name, on the op itself, or
    of a send/recv on a member of its own p2p batch (names are unique on each rank here)."""
    c = cols.c
    dop, dname = cols.dep_op, cols.dep_name
    if not len(dop):
        return None
    nn = max(len(cols.table.names), 1)
    key = c["rank"].astype(I64) * nn + c["name"]
    korder = np.argsort(key, kind="stable")
    skey = key[korder]
    want = c["rank"][dop].astype(I64) * nn + dname
    pos = np.minimum(np.searchsorted(skey, want), len(skey) - 1)
    found = skey[pos] == want
    tgt = np.where(found, korder[pos], 0)
    b = c["batch"]
    own = found & (tgt == dop)
    same_batch = found & cols.is_p2p[dop] & cols.is_p2p[tgt] & (b[dop] >= 0) & (b[dop] == b[tgt])
    bad = ~found | own | same_batch
    if not bool(bad.any()):
        return None
    k = int(np.argmax(bad))
    op, rank = int(dop[k]), int(c["rank"][dop[k]])
    dep = str(cols.table.names.item(int(dname[k])))
    if not found[k]:
        on_rank = cols.table.names.take(c["name"][c["rank"] == rank].tolist())
        elsewhere = np.unique(c["rank"][c["name"] == dname[k]]).tolist()
        return unknown_dep_error(_source(cols, op), _name(cols, op), rank, dep, on_rank, elsewhere)
    if own[k]:
        return self_dep_error(_source(cols, op), _name(cols, op))
    kind = cols.table.templates[int(c["tmpl"][op])].kind
    return batch_dep_error(_source(cols, op), kind, _name(cols, op), dep, cols.table.strs.item(int(b[op])), rank)


def _grid(cols: _Cols, idx: np.ndarray, marked: list[int], ranks: list[int] | tuple[()] = ()) -> str:
    """:func:`~schedsim.lower.check_errors.comm_grid` of the communication ops among ``idx`` (op indices,
    ascending), the ops ``marked`` flagged; ``ranks`` get a column."""
    c = cols.c
    idx = idx[(cols.is_p2p | cols.is_coll)[idx]]
    names = cols.table.names.take(c["name"][idx].tolist())
    strs = cols.table.strs
    ops = [(r, f"{n}@r{r}", None if b < 0 else strs.item(b))
           for r, n, b in zip(c["rank"][idx].tolist(), names, c["batch"][idx].tolist(), strict=True)]
    return comm_grid(ops, {_oid(cols, i) for i in marked}, ranks)


def _member(cols: _Cols, i: int) -> CollectiveMember:
    p = cols.table.templates[int(cols.c["tmpl"][i])]
    return CollectiveMember(_oid(cols, i), int(cols.c["rank"][i]), p.kind, p.nbytes, p.dtype, p.root)


def _collective_fault(cols: _Cols, represented: tuple[int, ...]) -> GraphError | None:
    """The first collective (in order of first member) that breaks a rule: its first member unlike the first,
    else the ranks of its group (that issue it, with ``represented``) that never do."""
    g = _collective_groups(cols, represented)
    other, bad = _collective_faults(cols, g)
    if not bool(bad.any()):
        return None
    k = int(np.argmax(bad))
    lo, hi = int(g.ptr[k]), int(g.ptr[k + 1])
    first = int(g.members[lo])
    group = cols.table.templates[int(cols.c["tmpl"][first])].group
    rank = cols.c["rank"]
    if bool(other[lo:hi].any()):
        o = int(g.members[lo + int(np.argmax(other[lo:hi]))])
        show = sorted({int(rank[o]), int(rank[first])})
        return collective_mismatch_error(_source(cols, o), _name(cols, o), group, _member(cols, o),
                                         _member(cols, first), _grid(cols, np.flatnonzero(np.isin(rank, show)),
                                                                     [o, first], show))
    have = sorted(rank[g.members[lo:hi]].tolist())
    missing = sorted(set(g.members_of[int(g.kgid[k])]) - set(have))
    show = sorted({*have[:3], *missing[:3]})
    return collective_missing_error(_source(cols, first), _name(cols, first), group, have, missing,
                                    _oid(cols, first), _grid(cols, np.flatnonzero(np.isin(rank, show)),
                                                             g.members[lo:hi].tolist(), show))


def _p2p_fault(cols: _Cols) -> GraphError | None:
    """The first (src, dst), ascending, whose sends and recvs (paired in issue order, as
    :func:`schedsim.lower.p2p.match_p2p`) break a rule: its first pair whose tags, messages or sizes disagree,
    else its unmatched sends or recvs."""
    c = cols.c
    idx = np.flatnonzero(cols.is_p2p)
    if not len(idx):
        return None
    tp = cols.table.templates
    is_send = np.array([KINDS[t.kind].sender for t in tp], bool)[c["tmpl"][idx]]
    rank, peer = c["rank"][idx].astype(I64), c["peer"][idx].astype(I64)
    at = batch_heads(c["rank"][idx], c["batch"][idx], idx)[0]
    W = int(max(rank.max(), peer.max())) + 1
    key = np.where(is_send, rank, peer) * W + np.where(is_send, peer, rank)
    (s, sk), (r, rk) = ((idx[m][o], key[m][o]) for m in (is_send, ~is_send)
                        for o in [np.lexsort((idx[m], at[m], key[m]))])
    k = np.arange(len(s)) - np.searchsorted(sk, sk)  # each send's position among its (src, dst)'s
    lo = np.searchsorted(rk, sk)
    paired = k < np.searchsorted(rk, sk, "right") - lo
    sp, rp = s[paired], r[(lo + k)[paired]]
    msg = c["msg"]
    wrong = (msg[sp] >= 0) & (msg[rp] >= 0) & (msg[sp] != msg[rp])
    mv = _msg_values(cols, sp, rp)
    if mv is not None:
        wrong |= (mv[0] >= 0) & (mv[1] >= 0) & (mv[0] != mv[1])
    nbytes = np.array([t.nbytes for t in tp], np.float64)[c["tmpl"]]
    wrong |= nbytes[sp] != nbytes[rp]
    su, sn = np.unique(sk, return_counts=True)
    ru, rn = np.unique(rk, return_counts=True)
    keys = np.union1d(su, ru)
    ns, nr = np.zeros(len(keys), I64), np.zeros(len(keys), I64)
    ns[np.searchsorted(keys, su)] = sn
    nr[np.searchsorted(keys, ru)] = rn
    none = np.iinfo(I64).max
    kw = int(sk[paired][np.argmax(wrong)]) if bool(wrong.any()) else none
    km = int(keys[np.argmax(ns != nr)]) if bool((ns != nr).any()) else none
    if kw == none and km == none:
        return None
    kk = min(kw, km)
    src, dst = divmod(kk, W)
    sl, rl = s[sk == kk], r[rk == kk]
    both = np.sort(np.concatenate([sl, rl]))
    if kw <= km:
        j = int(np.argmax(wrong))
        a, b, pos = int(sp[j]), int(rp[j]), int(k[paired][j])
        return _pairing_fault(cols, a, b, rl[pos + 1:], src, dst, rl, _grid(cols, both, [a, b]))
    extra = (sl[len(rl):] if len(sl) > len(rl) else rl[len(sl):]).tolist()
    return unmatched_p2p_error(_source(cols, extra[0]), "send" if len(sl) > len(rl) else "recv",
                               [_oid(cols, x) for x in extra], src, dst, len(sl), len(rl), _grid(cols, both, extra))


def _pairing_fault(cols: _Cols, a: int, b: int, later: np.ndarray, src: int, dst: int, recvs: np.ndarray,
                   detail: str) -> GraphError:
    """Send ``a`` paired with recv ``b`` against their intent or sizes; ``later``: the recvs of (src, dst) after
    ``b``, ``recvs``: all of them (op indices, issue order)."""
    c, t = cols.c, cols.table
    ta, tb = dict(t.tags.item(int(c["tags"][a]))), dict(t.tags.item(int(c["tags"][b])))
    ma, mb = int(c["msg"][a]), int(c["msg"][b])
    intent = None
    if ma >= 0 and mb >= 0 and ma != mb:
        intent = f"tag {t.strs.item(ma)!r}", f"tag {t.strs.item(mb)!r}"
    elif "msg" in ta and "msg" in tb and ta["msg"] != tb["msg"]:
        intent = f"message {ta['msg']}", f"message {tb['msg']}"
    reorder = (ma >= 0 and bool((c["msg"][later] == ma).any())) or (
        "msg" in ta and any(dict(x).get("msg") == ta["msg"] for x in t.tags.take(c["tags"][later].tolist())))
    sizes = (t.templates[int(c["tmpl"][a])].nbytes, t.templates[int(c["tmpl"][b])].nbytes)
    return p2p_pairing_error(_source(cols, a), _oid(cols, a), _oid(cols, b), sizes, intent, reorder, src, dst,
                             t.names.take(c["name"][recvs].tolist()), detail)


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

    One compiled pass over the ops in index order (``_cwaves.fifo_edges`` with each (rank, stream) pair as its
    communicator and every op on one rank: the rule of communicator order is this one), so every op ``y`` gets its
    edges from the run before it on its stream, members ascending: the edges sorted by ``(y, x)``. The numpy form
    it replaced, which grouped the ops by (rank, stream) with a stable sort, is the test oracle
    ``tests/oracle/numpy_helpers.stream_edges``.

    Raises
    ------
    BuildError
        The compiled module is not built (:func:`schedsim.lower.program.required`).
    """
    c = cols.c
    N = cols.N
    if not N:
        return np.zeros((0, 2), I64)
    ns = max(len(cols.table.streams.items), 1)
    key = c["rank"].astype(I64) * ns + c["stream"]
    if int(key.max()) >= 4 * N + 64:  # codes that sparse (far more ranks than ops): dense ones, in value order
        key = np.unique(key, return_inverse=True)[1].astype(I64).reshape(-1)
    b = np.where(cols.is_p2p, c["batch"], -1).astype(I64)
    fifo = required("fifo_edges")
    room = N  # an edge per op after the first of its stream, unless runs follow runs
    while True:
        out = np.empty((room, 2), I64)
        m = fifo(np.zeros(N, I64), key, b, out)
        if m <= room:
            return out[:m]
        room = m


class CollectiveKeys(MadeOnRead, Sequence[str]):
    """:attr:`~schedsim.lower.program.Program.coll_keys` as a sequence made on first read: collective ``c``'s key is
    the name of its first member (id ``ids[c]`` in the op names ``names``) then the suffix of its group
    (``suffix[gid[c]]``, ``#r0,r1,...``). Its length is known unmade; a search's points never read the keys (only
    errors, ``check``, the graph and the trace do), so they are not made there. Pickled and compared as the tuple."""

    __slots__ = ("_names", "_ids", "_gid", "_suffix", "_keys")
    _PLAIN = _COMPARES = tuple

    def __init__(self, names: Any, ids: np.ndarray, gid: np.ndarray, suffix: list[str]) -> None:
        self._names, self._ids, self._gid, self._suffix = names, ids, gid, suffix
        self._keys: tuple[str, ...] | None = None

    def made(self) -> tuple[str, ...]:
        """The keys as a tuple (made once)."""
        if self._keys is None:
            sfx = self._suffix
            self._keys = tuple(n + sfx[g] for n, g in zip(self._names.take(self._ids.tolist()), self._gid.tolist(),
                                                           strict=True))
            self._names = self._ids = self._gid = self._suffix = None  # type: ignore[assignment]
        return self._keys

    def __len__(self) -> int:
        return len(self._keys) if self._keys is not None else len(self._gid)


class _Colls(NamedTuple):
    """Collectives grouped by key (``name#ranks``, in order of first member) with their members (CSR, program
    order), each member's signature id (equal ids: same kind, size, root and dtype) and each key's group."""

    keys: CollectiveKeys | list[str]
    ptr: np.ndarray
    members: np.ndarray
    sig: np.ndarray
    kgid: np.ndarray  # per key, its group's index in ``groups``
    groups: list[tuple[int, ...]]
    members_of: list[tuple[int, ...]]  # per group, its ranks that issue it


def _collective_groups(cols: _Cols, represented: tuple[int, ...] = ()) -> _Colls:
    """The collectives of ``cols`` (``represented``: a symmetric lowering's ranks, the only ones that issue them)."""
    c = cols.c
    tp = cols.table.templates
    idx = np.flatnonzero(cols.is_coll)
    if not len(idx):
        return _Colls([], np.zeros(1, I64), np.zeros(0, I64), np.zeros(0, I64), np.zeros(0, I64), [], [])
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
    # per key, from its first member: the name and the group (``name#r0,r1,...``)
    first_m = members[ptr[:-1]]
    kgid = t_gid[c["tmpl"][first_m]]
    keys = CollectiveKeys(cols.table.names, c["name"][first_m], kgid, ["#" + ",".join(map(str, g)) for g in groups])
    return _Colls(keys, ptr, members.astype(I64), t_sig[c["tmpl"][members]], kgid, groups, members_of)


def _collective_faults(cols: _Cols, g: _Colls) -> tuple[np.ndarray, np.ndarray]:
    """``(other, bad)``: per member, whether its signature differs from its key's first member's; per key, whether
    it breaks a rule (a member unlike the first, or its members' ranks are not its group's issuing ranks, once
    each)."""
    ptr, cnt = g.ptr[:-1], np.diff(g.ptr)
    if not len(cnt):
        return np.zeros(0, bool), np.zeros(0, bool)
    other = g.sig != np.repeat(g.sig[ptr], cnt)
    mr = cols.c["rank"][g.members].astype(I64)
    glen = np.array([len(x) for x in g.members_of], I64)[g.kgid]
    kk = np.repeat(np.arange(len(cnt)), cnt)
    sorted_ranks = mr[np.lexsort((mr, kk))]
    gcat = np.concatenate([*(np.asarray(x, I64) for x in g.members_of), np.full(1, -1, I64)])
    gstart = (np.cumsum([len(x) for x in g.members_of]) - [len(x) for x in g.members_of]).astype(I64)[g.kgid]
    off = np.arange(len(mr)) - np.repeat(ptr, cnt)
    inside = off < glen[kk]
    want = np.where(inside, gcat[np.where(inside, np.repeat(gstart, cnt) + off, len(gcat) - 1)], -1)
    bad = (cnt != glen) | np.logical_or.reduceat(other | (sorted_ranks != want), ptr)
    return other, bad


def _collectives(cols: _Cols, represented: tuple[int, ...] = ()) -> tuple[CollectiveKeys | list[str], np.ndarray,
                                                                          np.ndarray, bool]:
    """Collective keys (``name#ranks``, in order of first member), CSR of members, and whether every
    collective is consistent (one kind, size, root and dtype; issued once on each rank of its group, or with
    ``represented`` ranks, a symmetric lowering's, on each of them in its group)."""
    g = _collective_groups(cols, represented)
    return g.keys, g.ptr, g.members, not bool(_collective_faults(cols, g)[1].any())


def _link_uniform(table: Table, W: int) -> tuple[_Cols, dict[str, Any]] | None:
    """:func:`link` of a table whose rows all run on ranks 0..W-1 (:meth:`Table.uniform`): every rank issues
    the same R ops in the same order, so rank 0's ops are linked and the result repeated with offsets
    ``k·R`` (op ``k·R + r`` is row ``r`` on rank ``k``; each collective is one row on all ranks). The arrays
    are those :func:`link` builds for the whole table. None when rank 0's ops break a rule, or hold sends,
    recvs or a collective whose group is not all ranks: :func:`link` then checks (and words) them. The arrays
    come with ``"uniform": True``, which :func:`schedsim.lower.lower` takes out for the static checks
    (:func:`schedsim.lower.checks.check_arrays`' ``uniform``)."""
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
    se1 = _stream_edges(one)
    # the edges and dependency offsets as the Program holds them: int32 where it narrows them (every op index and
    # offset below 2**31, lower.program.NARROW), made so here without int64 copies to narrow (at 1M ops 36 MiB of
    # int64 edges set the lowering's high-water mark, and their holes were left for the preparation's arrays)
    it = I32 if max(R * W + 1, 2 * W * max(len(se1), len(tgt1))) < 2**31 else I64
    off = np.arange(W, dtype=it) * R
    cols = object.__new__(_Cols)
    cols.table, cols.N = table, R * W
    # rank k's copy of each column; a column of one value whose Program field is shared (Program.SHARED: no tags,
    # peer, batch or message tag) is that value, broadcast (no copy per rank)
    shared = {"tags", "peer", "batch", "msg"}
    cols.c = {k: np.repeat(np.arange(W, dtype=v.dtype), R) if k == "rank" else
              np.broadcast_to(v[:1], (R * W,)) if k in shared and R and bool((v == v[0]).all()) else np.tile(v, W)
              for k, v in one.c.items()}
    cols.is_p2p, cols.is_coll = np.tile(one.is_p2p, W), np.tile(one.is_coll, W)
    cols.dep_op = (one.dep_op.astype(it)[None, :] + off[:, None]).reshape(-1)
    cols.dep_name = np.tile(one.dep_name, W)
    tgt = (tgt1.astype(it)[None, :] + off[:, None]).reshape(-1)
    se = (se1.astype(it)[None, :, :] + off[:, None, None]).reshape(-1, 2)
    de = np.stack([tgt, cols.dep_op], axis=1) if len(tgt) else np.zeros((0, 2), it)
    # the keys (``name#0,1,...``) made on first read: a run that reads none (predict) makes no string per collective
    keys = CollectiveKeys(table.names, one.c["name"][crow], np.zeros(len(crow), I64),
                          ["#" + ",".join(map(str, every))])
    cidx = (crow[:, None].astype(I64) + off[None, :].astype(I64)).reshape(-1)
    cptr = np.arange(len(crow) + 1, dtype=I64) * W
    dep_ptr = np.zeros(cols.N + 1, it)
    np.cumsum(np.tile(np.bincount(one.dep_op, minlength=R).astype(it), W), out=dep_ptr[1:])
    # rank 0's arrays in the index dtype (make() reads them through astype(it) or as counts: the same values)
    remake = UniformLinks(se1.astype(it), tgt1.astype(it), one.dep_op.astype(it), crow.astype(it), one.c["seq"].copy(),
                          one.c["name"].copy(), R, W, it, len(tgt))
    return cols, {"dep_ptr": dep_ptr, "dep_idx": tgt, "stream_edges": se, "dep_edges": de,
                  "coll_keys": keys, "coll_ptr": cptr, "coll_idx": cidx, "p2p": np.zeros((0, 2), I64),
                  "warnings": (), "uniform": True, "remake": remake}


def link(table: Table, file: str, info: dict[str, Any], check: bool, warn: bool = True) -> tuple[_Cols, dict[str, Any]]:
    """Program order, dependencies, edges, collectives and p2p pairs of the expanded ``table``; ``warn``: word the
    send/recv name warnings (:func:`schedsim.lower.p2p.match_p2p`).

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
    represented = info.get("represented", ())
    if tgt is None:
        raise build_fault(cols, file, represented)
    se = _stream_edges(cols)
    de = np.stack([tgt, cols.dep_op], axis=1).astype(I64, copy=False) if len(tgt) else np.zeros((0, 2), I64)
    keys, cptr, cidx, ok = _collectives(cols, represented)
    if not ok:
        raise build_fault(cols, file, represented)
    pairs, warnings = match_p2p(cols, warn)
    if pairs is None:
        raise build_fault(cols, file, represented)
    dep_ptr = np.zeros(cols.N + 1, I64)
    np.cumsum(np.bincount(cols.dep_op, minlength=cols.N), out=dep_ptr[1:])
    return cols, {"dep_ptr": dep_ptr, "dep_idx": tgt, "stream_edges": se, "dep_edges": de,
                  "coll_keys": keys if isinstance(keys, CollectiveKeys) else tuple(keys), "coll_ptr": cptr,
                  "coll_idx": cidx, "p2p": pairs,
                  "warnings": tuple(warnings)}
