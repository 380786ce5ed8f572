"""The static checks on a :class:`~schedsim.lower.program.Program`'s arrays, and NCCL's ordering rules they model.

Issue order
    A rank issues its ops in program order, ``seq`` (the order written, pipeline ops in their schedule order).
    Send/recv ops of one rank that share a ``p2p_batch`` form one *batch*: they are issued together, in ``seq``
    order, inside one ``ncclGroupStart``/``ncclGroupEnd`` (torch ``dist.batch_isend_irecv``), at the position of
    the first of them. Every other collective, send or recv is one *launch* on its own. :func:`launches` lists the
    launches of every rank; :func:`schedsim.graph.build.info_of` stores them by op id in ``G.graph["issue_order"]``,
    what the executor replays.

Communicators
    As ``ProcessGroupNCCL`` creates them (torch ``ProcessGroupNCCL::pointToPoint`` and ``getKeySendRecv``): a
    collective runs on the communicator of its group; a lone send/recv on the two-rank communicator of its pair of
    ranks, whatever the CUDA stream; a batched one on its process group's, as predict and execute take it
    (:func:`schedsim.lower.p2p_comms.batch_communicators`, :func:`_comm_ids`).

Rules (:func:`_wait_for_edges`)
    1. NCCL pairs sends and recvs between two ranks by issue order: the k-th send from a to b
       meets the k-th recv on b from a. There are no tags (NCCL API, ``ncclSend``/``ncclRecv``).
    2. A send or recv completes only once its peer has posted the matching op, even at 1 KiB
       (measured on 2 H200s, NCCL 2.28.9: send-first on both ranks hangs). A collective completes
       once every member has posted it.
    3. Operations on one communicator run one after another in issue order on each rank, whatever
       the CUDA stream (measured: send then recv on two streams, on both ranks, hangs).
    4. Collectives on two communicators that share two or more ranks must be issued in one
       relative order on all of them (NCCL documentation, "Using multiple NCCL communicators
       concurrently": otherwise the kernels can wait on each other and deadlock).
    5. A batch is posted as one unit, after everything its members depend on, and completes when
       every member completed.
    6. Under lazy communicator creation (the schedule's ``nccl_init: lazy``, torch's default: no
       ``device_id`` given to ``init_process_group``), each rank creates a group communicator at its
       first launch on it, and the creation (``ncclCommInitRank``) returns only once every rank of
       the communicator has called it: each rank's first launch on it completes only once every
       rank's first launch on it is posted, and a rank that never launches on it leaves the others
       waiting (pytorch/pytorch#74701: "if batch_isend_irecv is the first collective call in the
       group, all ranks of the group are expected to participate in this call"; the
       ``batch_isend_irecv`` documentation says the same). The creation blocks the rank's host thread
       (pytorch/pytorch#108378: "ProcessGroupNCCL lazily performs a rendezvous on the first usage of a
       communicator"; NCCL docs, communicator creation: "all ranks must call" it): every later launch of that
       rank, on any stream, is issued only after it, so ranks whose first calls on communicators form
       a cycle (rank 0: {0,1} then {0,2}; rank 1: {1,2} then {0,1}; rank 2: {0,2} then {1,2}) hang.
    7. A batch with two or more peers is one NCCL kernel whose transfers NCCL may serve in any order: its
       p2p schedule visits the peers round by round, and a transfer can wait behind another peer's
       (pytorch/PiPPy#969: stage 0 batched its sends to stages 1 and 2, stage 2 batched its recvs from 0
       and 1, and stage 1 sent to 2 only after computing on what it received from 0: it hung; PiPPy PR
       #1000 batches per peer). So none of its ops, nor the ops matched with them, is sure to complete
       before all of them are posted, and where a matched op is itself in such a batch, that batch's
       matched ops join in: one rendezvous per group of batches linked that way (:func:`multi_peer_hubs`).
       NCCL's documentation says the calls of a group progress independently, so this is a "may hang"
       warning (:class:`Verdict`), not an error; the graph has the rule only when asked (``grouped``).

Each launch becomes two nodes, *posted* and *done*; an edge means "cannot happen before". A cycle is a hang.
The graph is exact for these rules (no contraction), so it does not report a pipeline whose batches chain across
many ranks as a deadlock. A collective's rendezvous is one hub node (posted(x) -> hub -> done(y) for all
members), which has the cycles of the all-pairs form. Besides NCCL's wait-for graph: collectives of one group in
one order on every rank, dependencies written before their users, and the inputs of a p2p batch written before
the batch is posted. When a rule fails, :func:`schedsim.lower.check_errors.word_fault` words the error from the
rule's witness (the ``*_witness`` functions, :func:`forward_dep`, :func:`dag_cycle`; for an NCCL wait-for cycle the
one :func:`canonical_cycle` chooses), and :func:`schedsim.lower.check_errors.hang_warnings` the "may hang"
warnings. The object form of these rules, on a networkx graph of op instances, is a test oracle
(``tests/oracle/nccl_graph.py``, ``graph_checks.py``, ``object_build.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from schedsim.kinds import COLLECTIVE_KINDS, OP_KINDS, P2P_KINDS
from schedsim.lower.p2p_comms import launch_groups
from schedsim.lower.program import Program, batch_heads, required, stable_order, unique

__all__ = ["Verdict", "batch_input_witness", "check_arrays", "collective_order_witness", "dag_cycle", "forward_dep",
           "launch_heads", "launches", "lazy_init_witness", "multi_peer_hubs", "no_hang"]

I64 = np.int64


class _Templates(NamedTuple):
    """Per template (int64[T]): its kind as an index into ``OP_KINDS`` (-1: another) and its group as a code (equal
    groups, equal codes; ``groups[code]`` is the group). One pass over the templates (125,000 for 1M ops)."""

    kind: np.ndarray
    gid: np.ndarray
    groups: list[tuple[int, ...]]
    #: :func:`_first_launches`' results by ``eager``, with the ``comm`` and ``head`` arrays they are of (the lazy
    #: creation check and the wait-for graph ask for the same ones)
    firsts: dict[bool, tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]]]
    p2p: list[tuple[np.ndarray, list[tuple[int, ...]]]]  # launch_groups' cache

    @classmethod
    def of(cls, prog: Program) -> _Templates:
        tps = prog.templates
        code = {k: i for i, k in enumerate(OP_KINDS)}
        kind = np.fromiter(map(code.get, map(attrgetter("kind"), tps), repeat(-1)), I64, len(tps))
        groups: dict[tuple[int, ...], int] = {}
        gid = np.array([groups.setdefault(g, len(groups)) for g in map(attrgetter("group"), tps)], I64)
        return cls(kind, gid, list(groups), {}, [])

    def mask(self, prog: Program, kinds: Sequence[str]) -> np.ndarray:
        """Boolean mask of the ops whose kind is in ``kinds``."""
        t = np.isin(self.kind, [OP_KINDS.index(k) for k in kinds])
        return t[prog.tmpl] if len(t) else np.zeros(prog.N, bool)


def launch_heads(prog: Program, tc: _Templates | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(comm, head)``: the indices of the communication ops in program order, and per such op the first
    member of its NCCL launch (itself, or the first op of its ``p2p_batch`` on its rank)."""
    tc = tc or _Templates.of(prog)
    comm = np.flatnonzero(tc.mask(prog, P2P_KINDS + COLLECTIVE_KINDS))
    head = comm.copy()
    b = prog.batch[comm]
    bm = (b >= 0) & tc.mask(prog, P2P_KINDS)[comm]
    if bm.any():
        head[bm] = batch_heads(prog.rank[comm][bm], b[bm], comm[bm])[0]
    return comm, head


def launches(prog: Program) -> dict[int, list[list[int]]]:
    """Per rank of ``prog``, its NCCL launches in issue order, each a list of op indices (a ``p2p_batch`` is one
    launch, at its first member; the issue order of the module docstring)."""
    comm, head = launch_heads(prog)
    out: dict[int, list[list[int]]] = {}
    at: dict[int, list[int]] = {}
    for i, h, r in zip(comm.tolist(), head.tolist(), prog.rank[comm].tolist(), strict=True):
        if i == h:
            at[i] = [i]
            out.setdefault(r, []).append(at[i])
        else:
            at[h].append(i)
    return out


def _collective_order_ok(prog: Program, tc: _Templates) -> bool:
    """Collectives of one group are issued in the same order on every rank."""
    ptr = prog.coll_ptr
    if len(ptr) < 2:
        return True
    key_of = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    idx = prog.coll_idx  # every collective member once: gathered by member, no op-length arrays
    gi, ri = tc.gid[prog.tmpl[idx]], prog.rank[idx]
    perm = np.lexsort((prog.seq[idx], ri, gi))
    go, ro, ko = gi[perm], ri[perm], key_of[perm]
    gstart = np.flatnonzero(np.r_[True, go[1:] != go[:-1]])
    for a, z in zip(gstart.tolist(), [*gstart[1:].tolist(), len(perm)], strict=True):
        rr = ro[a:z]
        cuts = np.flatnonzero(np.r_[True, rr[1:] != rr[:-1]])
        lens = np.diff(np.r_[cuts, z - a])
        if len(set(lens.tolist())) > 1:
            return False
        rows = ko[a:z].reshape(len(cuts), int(lens[0]))
        if not bool((rows == rows[0]).all()):
            return False
    return True


def collective_order_witness(prog: Program) -> tuple[tuple[int, ...], int, int, int, int, int] | None:
    """``(group, ref, rank, i, a, b)``: the first group (by its first member in program order) whose collectives
    some rank issues in another order than the group's lowest rank ``ref``: the first such ``rank`` (ascending),
    the first position ``i`` where their orders differ and the ops ``a`` (on ``ref``) and ``b`` (on ``rank``) issued
    there; None when every group's order agrees (:func:`_collective_order_ok`)."""
    tc = _Templates.of(prog)
    if _collective_order_ok(prog, tc):
        return None
    ptr, idx = prog.coll_ptr, prog.coll_idx
    key_of = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    o = np.argsort(idx, kind="stable")
    per: dict[int, dict[int, list[tuple[int, int, int]]]] = {}  # group -> rank -> (seq, key, op), groups in order
    for op, k in zip(idx[o].tolist(), key_of[o].tolist(), strict=True):
        g = int(tc.gid[prog.tmpl[op]])
        per.setdefault(g, {}).setdefault(int(prog.rank[op]), []).append((int(prog.seq[op]), k, op))
    for g, by_rank in per.items():
        rows = {r: sorted(v) for r, v in sorted(by_rank.items())}
        ranks = list(rows)
        ref = ranks[0]
        for r in ranks[1:]:
            a, b = rows[ref], rows[r]
            i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x[1] != y[1]), None)
            if i is not None:
                return tc.groups[g], ref, r, i, a[i][2], b[i][2]
    raise AssertionError("the collective order rule failed, but no two ranks' orders differ")


def _comm_ids(prog: Program, heads: np.ndarray, eager: bool, tc: _Templates
              ) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Per launch, its NCCL communicator as an id, and the ranks of each group communicator (ids below
    ``len(groups)``; a lone send/recv's two-rank communicator gets an id above them).

    A collective runs on its group's communicator; a batched send/recv (or, ``eager``, any) on its process group's
    (:func:`schedsim.lower.p2p_comms.launch_groups`); a lone one on its pair's (Communicators, module docstring)."""
    t = prog.tmpl[heads]
    groups = {g: k for k, g in enumerate(tc.groups)}  # every template's group (those of p2p go unused)
    is_p2p = np.isin(tc.kind, [OP_KINDS.index(k) for k in P2P_KINDS])[t]
    cid = tc.gid[t]
    batched = is_p2p & ((prog.batch[heads] >= 0) | eager)
    if batched.any():
        cid[batched] = launch_groups(prog, heads[batched], tc.p2p, groups)
    lone = is_p2p & ~batched
    if lone.any():
        r, pe = prog.rank[heads][lone].astype(I64), prog.peer[heads][lone].astype(I64)
        cid[lone] = len(groups) + np.minimum(r, pe) * prog.world_size + np.maximum(r, pe)
    return cid, list(groups)


def _index_type(prog: Program) -> type:
    """The integer type of the wait-for graph's node numbers (below ``2·N + collectives``): int32 when they fit,
    which halves the arrays (and the fresh pages) of the checks on a million ops."""
    return np.int32 if 2 * prog.N + len(prog.coll_ptr) < 2**31 else I64


def _units(prog: Program, comm: np.ndarray, head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(uniq, u)``: the first op of each unit (an op, or a p2p batch on a rank) ascending, and each op's unit
    (as ``unique`` of "each op's head" gives them; heads are op indices, so by a mark and a prefix sum)."""
    it = _index_type(prog)
    unit: np.ndarray = np.arange(prog.N, dtype=it)
    if bool((comm == head).all()):  # every op its own unit (no p2p batch of two or more)
        return unit, unit
    unit[comm] = head
    mark = np.zeros(prog.N, bool)
    mark[unit] = True
    code: np.ndarray = np.cumsum(mark, dtype=it)
    code -= 1
    return np.flatnonzero(mark), code[unit]


def _dag_edges(prog: Program) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of the DAG's stream and dependency edges (an edge may repeat)."""
    e = np.concatenate([np.asarray(prog.stream_edges, I64).reshape(-1, 2), np.asarray(prog.dep_edges, I64)
                        .reshape(-1, 2)])
    return e[:, 0], e[:, 1]


def _first_launches(prog: Program, comm: np.ndarray, head: np.ndarray, eager: bool, tc: _Templates
                    ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """``(first, cid, groups)``: the head op of each rank's first launch on each group communicator it uses
    (rule 6 of the module docstring), that launch's communicator id, and the ranks of each id (made once per
    ``tc``, ``comm``, ``head`` and ``eager``: read-only)."""
    got = tc.firsts.get(eager)
    if got is not None and got[0] is comm and got[1] is head:
        return got[2]
    out = _first_launches_of(prog, comm, head, eager, tc)
    tc.firsts[eager] = (comm, head, out)
    return out


def _first_launches_of(prog: Program, comm: np.ndarray, head: np.ndarray, eager: bool, tc: _Templates
                       ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    heads = comm[comm == head]
    if not len(heads):
        return heads, heads, []
    cid, groups = _comm_ids(prog, heads, eager, tc)
    g = cid < len(groups)
    key = prog.rank[heads][g].astype(I64) * (int(cid.max()) + 1) + cid[g]
    _k, first = np.unique(key, return_index=True)
    return heads[g][first], cid[g][first], groups


def _lazy_init_ok(prog: Program, comm: np.ndarray, head: np.ndarray, tc: _Templates) -> bool:
    """Under lazy communicator creation, every rank of a group communicator that some rank calls calls it (every
    represented rank of it, in a symmetric lowering: :attr:`Program.represented`)."""
    if prog.nccl_init != "lazy":
        return True
    first, cid, groups = _first_launches(prog, comm, head, False, tc)
    have = np.bincount(cid, minlength=len(groups)) if len(cid) else np.zeros(len(groups), I64)
    present = frozenset(prog.represented)
    size = [len(g) if not present else sum(r in present for r in g) for g in groups]
    return all(int(have[c]) in (0, size[c]) for c in range(len(groups)))


def _multi_peer_members(prog: Program, comm: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The batch head of every p2p batch member whose peer is not its head's (int64 op indices, program order, a
    head once per such member): a batch has two or more peers (rule 7 of the module docstring) where it has one.
    Not sorted nor made distinct: the verdict asks only whether there is one, and the wait-for graph marks them."""
    inb = comm != head  # members after the first of a batch of two or more (a batch's head is a p2p op)
    if not inb.any():
        return comm[:0]
    m, h = comm[inb], head[inb]
    return h[prog.peer[m] != prog.peer[h]]


def _wait_for_edges(prog: Program, comm: np.ndarray, head: np.ndarray, eager: bool, tc: _Templates,
                    grouped: bool = False, why: list[str] | None = None, creation: bool = True
                    ) -> tuple[int, list[tuple[np.ndarray, np.ndarray]], np.ndarray, np.ndarray, np.ndarray]:
    """``(nodes, parts, useq, u, lazy)`` of NCCL's wait-for graph: node 2u is "unit u posted", 2u + 1 "unit u
    done", 2n + c the hub of collective c, then one hub per lazily created communicator (rule 6 of
    the module docstring: posted(first launch of each rank on it) -> hub -> done(each)); its edges as
    parts ``(from, to)`` but posted -> done of every unit (``(2·k, 2·k + 1)`` for k < n, which :func:`_no_hang`
    adds when it needs them); ``useq`` is each unit's position on its rank, ``u`` each op's unit (a p2p batch
    is one unit), ``lazy`` the largest ``useq`` of each lazy hub's members. ``grouped``: rule 7's hubs too, after
    the lazy ones (:func:`multi_peer_hubs`), their members' largest ``useq`` after
    ``lazy``'s. Node numbers are
    :func:`_index_type`. ``why``, when given, gets the reason of each part's edges (:data:`WAIT_REASONS`; the
    communicator-order part's as "communicator order", which :func:`hang_witness` splits); ``creation=False`` leaves
    rule 6 out even under ``nccl_init: lazy``."""
    uniq, u = _units(prog, comm, head)
    n = len(uniq)
    useq = prog.seq[uniq].astype(I64)
    parts = []
    ident = n == prog.N  # each op its own unit: u is the identity
    for reason, edges in (("stream order", prog.stream_edges), ("a dependency", prog.dep_edges)):  # DAG edges
        e = np.asarray(edges).reshape(-1, 2)
        ua, ub = (e[:, 0].astype(u.dtype), e[:, 1].astype(u.dtype)) if ident else (u[e[:, 0]], u[e[:, 1]])
        keep = ua != ub
        parts.append((2 * ua[keep] + 1, 2 * ub[keep]))
        if why is not None:
            why.append(reason)
    nc = len(prog.coll_ptr) - 1
    if nc > 0:  # hub 2n + c: posted(member) -> hub -> done(member)
        hub = 2 * n + np.repeat(np.arange(nc, dtype=u.dtype), np.diff(prog.coll_ptr))
        mu = u[prog.coll_idx]
        parts += [(2 * mu, hub), (hub, 2 * mu + 1)]
        if why is not None:
            why += ["collective", "collective"]
    if len(prog.p2p):
        us, ur = u[prog.p2p[:, 0]], u[prog.p2p[:, 1]]
        parts += [(2 * us, 2 * ur + 1), (2 * ur, 2 * us + 1)]
        if why is not None:
            why += ["p2p", "p2p"]
    parts.append(_communicator_order(prog, comm, head, u, eager, tc))
    if why is not None:
        why.append("communicator order")
    lazy = np.zeros(0, I64)
    if creation and prog.nccl_init == "lazy":
        first, cid, _groups = _first_launches(prog, comm, head, eager, tc)
        if len(first):
            hid, hub_of = np.unique(cid, return_inverse=True)
            hub = (2 * n + max(nc, 0) + hub_of).astype(u.dtype)
            fu = u[first]
            parts += [(2 * fu, hub), (hub, 2 * fu + 1), _host_waits(prog, comm, head, first, hub, u)]
            if why is not None:
                why += ["lazy init", "lazy init", "lazy host"]
            lazy = np.full(len(hid), -1, I64)
            np.maximum.at(lazy, hub_of, useq[fu])
    if grouped and len(prog.p2p):  # rule 7: one hub per rendezvous of multi-peer batches, after the lazy ones
        multi = np.zeros(n, bool)
        multi[u[_multi_peer_members(prog, comm, head)]] = True  # (a head's repeats mark it again)
        if multi.any():
            mu, mh = multi_peer_hubs(u[prog.p2p[:, 0]].astype(I64), u[prog.p2p[:, 1]].astype(I64), multi)
            hub = (2 * n + max(nc, 0) + len(lazy) + mh).astype(u.dtype)
            parts += [((2 * mu).astype(u.dtype), hub), (hub, (2 * mu + 1).astype(u.dtype))]
            if why is not None:
                why += ["multi-peer batch", "multi-peer batch"]
            top = np.full(int(mh.max()) + 1, -1, I64)
            np.maximum.at(top, mh, useq[mu])
            lazy = np.concatenate([lazy, top])
    return 2 * n + max(nc, 0) + len(lazy), parts, useq, u, lazy


def _host_waits(prog: Program, comm: np.ndarray, head: np.ndarray, first: np.ndarray, hub: np.ndarray,
                u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rule 6's host order: ``hub -> posted(launch)`` for every launch of a rank after its first launch on a
    lazily created communicator, from the hub of the latest such first launch before it (the creation blocks
    the rank's host until every rank of the communicator called it). ``first`` are head ops (ascending within
    each rank as :func:`_first_launches` gives them per communicator), ``hub`` their hub nodes."""
    heads = comm[comm == head]  # every launch, by rank then issue position
    o = np.argsort(first, kind="stable")
    at = np.searchsorted(heads, first[o])  # each first launch's position among the launches
    mark = np.full(len(heads), -1, I64)
    mark[at] = np.arange(len(at))
    last = np.maximum.accumulate(mark)  # the latest first launch at or before each launch
    prev = np.r_[-1, last[:-1]]
    rank = prog.rank[heads]
    ok = prev >= 0
    ok[ok] = rank[at[prev[ok]]] == rank[ok]
    return hub[o][prev[ok]], (2 * u[heads[ok]]).astype(hub.dtype)


def _ordered_by_position(n_nodes: int, parts: list[tuple[np.ndarray, np.ndarray]], useq: np.ndarray,
                         prog: Program, u: np.ndarray, lazy: np.ndarray, why: list[str] | None = None) -> bool:
    """Whether every edge goes forward in the order "unit position, posted before hub before done": then the
    graph is acyclic without a sweep. It holds when each collective's members, and each send/recv pair, sit
    at one position on every rank (an SPMD program); any other graph is left to the sweep. The first part
    (posted -> done of one unit, not in ``parts``) goes forward by construction; so do, not read where ``why``
    names them, the p2p parts (tested first: 4s -> 4s + 2) and each member -> hub (4s -> 4 max + 1)."""
    n = len(useq)
    if len(prog.p2p) and not np.array_equal(useq[u[prog.p2p[:, 0]]], useq[u[prog.p2p[:, 1]]]):
        return False  # a send and its recv at two positions (a pipeline's): one of their edges goes back
    top = int(useq.max()) if n else 0
    key = np.empty(n_nodes, np.int32 if 4 * top + 2 < 2**31 else I64)  # posted 4s, hub 4s + 1, done 4s + 2
    key[0:2 * n:2] = 4 * useq
    key[1:2 * n:2] = 4 * useq + 2
    nc = len(prog.coll_ptr) - 1
    if nc > 0:
        ms = useq[u[prog.coll_idx]]
        key[2 * n:2 * n + nc] = 4 * np.maximum.reduceat(ms, prog.coll_ptr[:-1]) + 1
    key[2 * n + max(nc, 0):] = 4 * lazy + 1
    hubs = ("collective", "lazy init", "multi-peer batch")  # pairs of parts: member -> hub first, hub -> done
    read = [r != "p2p" and not (r in hubs and (not i or why[i - 1] != r)) for i, r in enumerate(why)] \
        if why is not None and len(why) == len(parts) else [True] * len(parts)
    return all(bool((key[a] < key[b]).all()) for (a, b), k in zip(parts[::-1], read[::-1], strict=True) if k)


def _communicator_order(prog: Program, comm: np.ndarray, head: np.ndarray, u: np.ndarray, eager: bool,
                        tc: _Templates) -> tuple[np.ndarray, np.ndarray]:
    """Rules 3 and 4 of the module docstring: done(previous launch) -> posted(launch) on one communicator,
    and from the last launch of every group communicator that shares two or more ranks with this one."""
    heads = comm[comm == head]
    if not len(heads):
        return np.zeros(0, I64), np.zeros(0, I64)
    cid, groups = _comm_ids(prog, heads, eager, tc)
    rank = prog.rank[heads].astype(I64)
    # heads are in program order (rank, then issue position): by (rank, communicator), stably
    C = int(cid.max()) + 1
    key = rank * C + cid
    uh = u[heads]
    if bool((key[1:] >= key[:-1]).all()):  # one communicator per rank, or each's launches already together
        same = key[1:] == key[:-1]
        out = [(2 * uh[:-1][same] + 1, 2 * uh[1:][same])]
    else:
        o = stable_order(key, prog.world_size * C) if prog.world_size * C < 2**62 else \
            np.lexsort((np.arange(len(heads)), cid, rank))
        ko, uo = key[o], uh[o]
        same = ko[1:] == ko[:-1]
        out = [(2 * uo[:-1][same] + 1, 2 * uo[1:][same])]
    for a, b in _sharing_pairs(groups, cid):
        for x, y in ((a, b), (b, a)):  # done(last launch of x before it) -> posted(launch of y), on each rank
            ix, iy = np.flatnonzero(cid == x), np.flatnonzero(cid == y)
            k = np.searchsorted(ix, iy) - 1
            ok = k >= 0
            px, py = ix[k[ok]], iy[ok]
            ok2 = rank[px] == rank[py]
            out.append((2 * uh[px[ok2]] + 1, 2 * uh[py[ok2]]))
    return np.concatenate([a for a, _b in out]), np.concatenate([b for _a, b in out])


def _sharing_pairs(groups: list[tuple[int, ...]], cid: np.ndarray) -> list[tuple[int, int]]:
    """Pairs of distinct group communicators in use that share two or more ranks (rule 4)."""
    used = np.flatnonzero(np.bincount(cid[cid < len(groups)], minlength=len(groups))).tolist()
    sets = [set(groups[g]) for g in used]
    return [(used[i], used[j]) for i in range(len(used)) for j in range(i + 1, len(used))
            if len(sets[i].intersection(sets[j])) >= 2]


def _acyclic(n: int, src: np.ndarray, dst: np.ndarray) -> bool:
    """Kahn's sweep over the edges ``src[e] -> dst[e]`` (int arrays of one length) on ``n`` nodes, in C
    (``_cwaves.acyclic``, int32 or int64 edges: a pipeline's wait-for graph has a million nodes; its Python form is
    the test oracle ``tests/oracle/numpy_helpers.acyclic``).

    Raises
    ------
    BuildError
        The compiled module is not built (:func:`schedsim.lower.program.required`).
    """
    ext = required("acyclic")
    if src.dtype == np.int32 and dst.dtype == np.int32:  # int64 only for a build from before int32 edges
        try:
            return bool(ext(n, np.ascontiguousarray(src), np.ascontiguousarray(dst)))
        except TypeError:
            pass
    return bool(ext(n, np.ascontiguousarray(src, I64), np.ascontiguousarray(dst, I64)))


def _no_hang(prog: Program, comm: np.ndarray, head: np.ndarray, tc: _Templates, eager: bool = False,
             grouped: bool = False) -> bool:
    why: list[str] = []
    n, parts, useq, u, lazy = _wait_for_edges(prog, comm, head, eager, tc, grouped, why)
    if _ordered_by_position(n, parts, useq, prog, u, lazy, why):
        return True
    it = _index_type(prog)
    if it is np.int32:  # the parts read where they lie, each unit's posted -> done implied (int64: below)
        return bool(required("acyclic_units")(n, len(useq), [(a.astype(it, copy=False), b.astype(it, copy=False))
                                                             for a, b in parts]))
    k: np.ndarray = np.arange(0, 2 * len(useq), 2, dtype=it)
    parts.insert(0, (k, k + 1))  # posted -> done of every unit
    return _acyclic(n, np.concatenate([a for a, _b in parts], dtype=it),
                    np.concatenate([b for _a, b in parts], dtype=it))


def no_hang(prog: Program) -> bool:
    """Whether NCCL's wait-for graph of ``prog`` (rules 1-6 of the module docstring) has no cycle."""
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    return _no_hang(prog, comm, head, tc)


def _batch_inputs_ok(prog: Program, comm: np.ndarray, head: np.ndarray) -> bool:
    """No member of a p2p batch waits for an op written after the batch's first member."""
    if bool((comm == head).all()):
        return True  # no batch of two or more
    h = np.arange(prog.N)
    h[comm] = head
    src, dst = _dag_edges(prog)
    hv = h[dst]
    m = np.flatnonzero(dst != hv)  # edges into a member that is not its batch's head (a batch of two or more)
    src, hv = src[m], hv[m]
    return not bool(((h[src] != hv) & (prog.seq[src] > prog.seq[hv])).any())


def batch_input_witness(prog: Program) -> tuple[int, int, int, bool] | None:
    """``(first, member, pred, is_dep)``: the first member of a p2p batch (after the batch's ``first``) that waits
    for an op ``pred`` written after ``first``, by a dependency (``is_dep``) or stream order, in the order of the
    object-based check (ranks ascending, launches and members in issue order, predecessors in the DAG's edge
    order: stream edges, then dependencies); None when every batch's inputs come before it
    (:func:`_batch_inputs_ok`). Op indices."""
    comm, head = launch_heads(prog)
    h = np.arange(prog.N)
    h[comm] = head
    size = np.bincount(h, minlength=prog.N)
    src, dst = _dag_edges(prog)
    hv = h[dst]
    bad = np.flatnonzero((size[hv] >= 2) & (dst != hv) & (h[src] != hv) & (prog.seq[src] > prog.seq[hv]))
    if not len(bad):
        return None
    first = bad[np.lexsort((bad, prog.seq[dst[bad]], prog.seq[hv[bad]], prog.rank[hv[bad]]))[0]]
    m, x = int(dst[first]), int(src[first])
    deps = np.asarray(prog.dep_edges).reshape(-1, 2)
    return int(hv[first]), m, x, bool(((deps[:, 0] == x) & (deps[:, 1] == m)).any())


def lazy_init_witness(prog: Program) -> tuple[tuple[int, ...], list[int], list[int]] | None:
    """``(ranks, users, missing)``: under lazy communicator creation, the first group communicator (by its first
    launch in program order) that some of its ``ranks`` call (``users``) and others (``missing``) never do
    (rule 6); None if there is none. Ranks ascending. In a
    symmetric lowering only the represented ranks (:attr:`Program.represented`) issue ops, so ``missing`` counts
    those alone, as :func:`_lazy_init_ok` does (the others run alike their representative)."""
    if prog.nccl_init != "lazy":
        return None
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    heads = comm[comm == head]
    if not len(heads):
        return None
    cid, groups = _comm_ids(prog, heads, False, tc)
    users: dict[int, set[int]] = {}  # by first launch in program order (ranks ascending, then issue order)
    for c, r in zip(cid.tolist(), prog.rank[heads].tolist(), strict=True):
        if c < len(groups):
            users.setdefault(c, set()).add(r)
    present = frozenset(prog.represented)
    for c, rs in users.items():
        missing = sorted(r for r in set(groups[c]) - rs if not present or r in present)
        if missing:
            return groups[c], sorted(rs), missing
    return None


def _forward_deps_ok(prog: Program) -> bool:
    e = prog.dep_edges
    return not len(e) or not bool((prog.seq[e[:, 0]] > prog.seq[e[:, 1]]).any())


def forward_dep(prog: Program) -> tuple[int, int] | None:
    """``(user, dep)``: the first dependency written after its user (op indices; first by user in program order,
    then by declaration order), or None."""
    e = prog.dep_edges
    if not len(e):
        return None
    bad = np.flatnonzero(prog.seq[e[:, 0]] > prog.seq[e[:, 1]])
    return (int(e[bad[0], 1]), int(e[bad[0], 0])) if len(bad) else None


def dag_cycle(prog: Program) -> tuple[list[int], bool] | None:
    """``(ops, through_stream)``: the cycle of the DAG (stream and dependency edges) that networkx's ``find_cycle``
    reports on the graph :func:`schedsim.graph.build.graph_of` builds (a depth-first search from each op in program
    order, successors in :attr:`Program.succ` order; the first edge back to an op on the search path closes it),
    as op indices from the op where it closes, and whether one of its edges is stream order only; None when the
    DAG is acyclic (:func:`_acyclic`)."""
    if _acyclic(prog.N, *_dag_edges(prog)):
        return None
    p, i, k = prog.succ
    ptr, idx, isdep = p.tolist(), i.tolist(), k.tolist()
    state = bytearray(prog.N)  # 0 unseen, 1 on the search path, 2 done
    for s in range(prog.N):
        if state[s]:
            continue
        path, at = [s], [ptr[s]]  # the path, and per node on it the next successor to take
        state[s] = 1
        while path:
            u, e = path[-1], at[-1]
            if e == ptr[u + 1]:
                state[u] = 2
                path.pop()
                at.pop()
                continue
            at[-1] = e + 1
            v = idx[e]
            if state[v] == 1:
                j = path.index(v)
                return path[j:], not all(isdep[x - 1] for x in at[j:])  # at[j:] - 1: the edges taken around it
            if not state[v]:
                state[v] = 1
                path.append(v)
                at.append(ptr[v])
    raise AssertionError("the compiled sweep found a cycle that the search does not")


def _cross_communicator_cycle(prog: Program, comm: np.ndarray, head: np.ndarray) -> bool:
    """Whether the collectives' per-rank issue orders admit no single global order (a "may hang" warning)."""
    if len(prog.coll_ptr) < 3:
        return False
    key = np.full(prog.N, -1, I64)
    key[prog.coll_idx] = np.repeat(np.arange(len(prog.coll_ptr) - 1), np.diff(prog.coll_ptr))
    heads = comm[(comm == head) & (key[comm] >= 0)]
    k, r = key[heads], prog.rank[heads]
    same = (r[1:] == r[:-1]) & (k[1:] != k[:-1])
    a, b = k[:-1][same], k[1:][same]
    if not len(a) or bool((a < b).all()):
        return False  # every rank issues them in key order: one global order
    nk = len(prog.coll_ptr) - 1
    key = unique(a.astype(I64) * nk + b)[0]  # each edge once
    return not _acyclic(nk, *np.divmod(key, nk))


class Verdict(NamedTuple):
    """What the array checks found (:func:`check_arrays`). ``fault``: a rule failed
    (:func:`schedsim.lower.check_errors.word_fault` words the error); ``cross``, ``eager``, ``multi``: the "may
    hang" cases that :func:`schedsim.lower.check_errors.hang_warnings` words (collectives of different
    communicators in a cyclic order, a hang with lone send/recv on the collectives' communicator, a hang under
    rule 7); ``split``: the split-batch warning, or None."""

    fault: bool
    cross: bool
    eager: bool
    multi: bool
    split: str | None

    @property
    def word_warnings(self) -> bool:
        """Whether a "may hang" warning other than the split-batch one is to be worded."""
        return self.cross or self.eager or self.multi


def check_arrays(prog: Program, uniform: bool = False, hangs: bool = True, generated: bool = False) -> Verdict:
    """Run every static check on ``prog``'s arrays (:func:`schedsim.lower.check_program` words what they find).
    ``hangs=False``: the "may hang" cases ``cross`` and ``eager``, which only a worded warning reads, are not looked
    for (False): the faults, ``multi`` (its sweep decides a fault too) and the split-batch warning are the same.

    ``generated``: ``prog`` is a ``training:`` block's own lowering (no written op, no ``pipeline:`` block:
    :func:`schedsim.lower.lower`'s ``sweep=False``, what ``schedsim search`` passes). The NCCL rules are then
    not checked: NCCL's wait-for graph is not swept (:func:`_no_hang`, rules 1-7, and ``multi`` is False), nor the
    collectives' order on each group (rule 4's premise, :func:`_collective_order_ok`) and the lazy creation's "every
    rank calls it" (rule 6, :func:`_lazy_init_ok`), as ``uniform`` below leaves them to construction: the block
    writes every communicator's launches in one order on all its ranks (Megatron's layer and optimizer order, the
    same on each rank of a group), its pipeline's sends and recvs in Megatron-LM's schedule order
    (:func:`schedsim.lower.pipeline_plan.plan_of`), and its rings' sends and recvs with the odd positions' recv
    first, so the graph has no cycle by construction; tests/lower/test_training_hang_free.py checks the lowering
    of every combination of the block's parallel, recompute, overlap, optimizer and communicator-creation settings
    with these rules and finds the same verdict. The dependencies' and the p2p batches' rules run as without it.

    ``uniform``: ``prog`` was linked as rank 0's ops repeated on every rank (:func:`schedsim.lower.link._link_uniform`:
    each rank issues the same ops in the same order, no send or recv, every collective on all ranks). Then one rule
    is left to check, that dependencies are written before their users: every rank issues each collective at the
    same position and in the same order, so the collectives' order, the lazy creation (every rank makes the one
    communicator at the same position) and the "may hang" cases of other communicators or of send/recv hold by
    construction, and NCCL's wait-for graph has a cycle only through an edge that goes back in issue position,
    which only a dependency can (stream and communicator order go forward; a collective's hub joins members at
    one position). A symmetric lowering (:attr:`Program.represented`) takes the general path. The tests compare
    the two paths' verdicts."""
    if uniform and not prog.represented:
        return Verdict(not _forward_deps_ok(prog), False, False, False, None)
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    ok = _forward_deps_ok(prog) and (generated or (_collective_order_ok(prog, tc)
                                                   and _lazy_init_ok(prog, comm, head, tc)))
    multi = not generated and bool(len(_multi_peer_members(prog, comm, head)))  # a batch with two peers: no sort
    # rule 7 only adds nodes and edges: without a hang under it there is none without it (one sweep, not two)
    grouped_ok = ok and multi and _no_hang(prog, comm, head, tc, grouped=True)
    ok = ok and (generated or grouped_ok or _no_hang(prog, comm, head, tc)) and _batch_inputs_ok(prog, comm, head)
    if not ok:
        return Verdict(True, False, False, False, None)
    split = _split_batch_warning(prog, comm, head, tc)
    return Verdict(False, hangs and _cross_communicator_cycle(prog, comm, head),
                   hangs and _eager_hang(prog, comm, head, tc), multi and not grouped_ok, split)


#: Send/recv ops in one p2p batch above which NCCL may split the group into several kernel launches; torch's
#: ``batch_isend_irecv`` chunks a larger batch for this reason (``TORCH_NCCL_BATCH_P2P_CHUNK_SIZE``, default 256:
#: pytorch/pytorch PR #174942).
NCCL_SPLIT_OPS = 256


def _split_batch_warning(prog: Program, comm: np.ndarray, head: np.ndarray, tc: _Templates) -> str | None:
    """A "may hang" warning for a p2p batch that NCCL may launch as several kernels, split differently on its
    peers (pytorch/pytorch#174288, NVIDIA/Megatron-LM#7189).

    NCCL packs a group's send/recv into one kernel launch while its work batches fit the kernel's argument
    budget (``scheduleP2pTasksToPlan`` and ``ncclTestBudget`` in NVIDIA/nccl ``src/enqueue.cc``: 4 KiB of kernel
    arguments, ``ncclMaxKernelArgsSize`` in ``src/include/device.h``, of 16-byte ``ncclDevWorkBatch``es); the rest
    goes to the next launch, which starts when the first ends. ``ncclAddWorkBatchToPlan`` opens a new work
    batch on each channel for every p2p epoch (a pass that takes at most one send and one recv per peer) and
    every 8 rounds (``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``), so where a group is cut depends on each rank's own
    ops and on the channels NCCL chose (topology): ranks whose batches differ can put a send and its recv in
    launches that wait on each other. Warned, not refused (the cut needs the channel count), for a batch of
    more than :data:`NCCL_SPLIT_OPS` ops with two or more peers whose peers' batches have another shape
    (ops per (peer − rank) mod world and direction)."""
    is_p2p = tc.mask(prog, P2P_KINDS)[comm]
    pc, ph = comm[is_p2p], head[is_p2p]
    if len(pc) <= NCCL_SPLIT_OPS:
        return None
    big = np.flatnonzero(np.bincount(ph) > NCCL_SPLIT_OPS)  # (heads are op indices: a table of them, no sort)
    if not len(big):
        return None
    head_of = dict(zip(pc.tolist(), ph.tolist(), strict=True))
    partner: dict[int, int] = {}
    for s_, r_ in prog.p2p.tolist():
        partner[s_], partner[r_] = r_, s_
    members: dict[int, list[int]] = {}
    for o, h in zip(pc.tolist(), ph.tolist(), strict=True):
        members.setdefault(h, []).append(o)
    W, send = prog.world_size, OP_KINDS.index("send")

    def shape(h: int) -> dict[tuple[int, bool], int]:
        r = int(prog.rank[h])
        out: dict[tuple[int, bool], int] = {}
        for o in members[h]:
            k = ((int(prog.peer[o]) - r) % W, bool(tc.kind[prog.tmpl[o]] == send))
            out[k] = out.get(k, 0) + 1
        return out

    for h in big.tolist():
        mine = members[h]
        if len({int(prog.peer[o]) for o in mine}) < 2:
            continue
        sh = shape(h)
        for o in mine:
            ph2 = head_of.get(partner.get(o, -1), -1)
            if ph2 >= 0 and shape(ph2) != sh:
                from schedsim.errors import SchedsimError

                name, other = prog.op_names([h, ph2])
                return SchedsimError(
                    f"may hang: p2p batch of {name!r} on rank {int(prog.rank[h])} holds {len(mine)} send/recv ops "
                    f"with {len({int(prog.peer[x]) for x in mine})} peers; NCCL may launch a group this large as "
                    "several kernels, cut where its kernel-argument budget runs out (NVIDIA/nccl src/enqueue.cc), "
                    f"and rank {int(prog.rank[ph2])}'s batch (of {other!r}) has another shape, so a send and its recv "
                    "can land in launches that wait on each other (pytorch/pytorch#174288)",
                    fix=f"split the batch into batches of at most {NCCL_SPLIT_OPS} ops that pair the same ranks on "
                        "both sides (torch's batch_isend_irecv does so from pytorch PR #174942; "
                        "TORCH_NCCL_BATCH_P2P_CHUNK_SIZE)").format()
    return None


def _eager_hang(prog: Program, comm: np.ndarray, head: np.ndarray, tc: _Templates) -> bool:
    """Two ranks, collectives and a lone send/recv: would it hang with the p2p on the group's communicator?"""
    if prog.world_size != 2 or len(prog.coll_ptr) < 2 or not len(prog.p2p):
        return False
    if not bool((prog.batch[prog.p2p[:, 0]] < 0).any()):
        return False
    return not _no_hang(prog, comm, head, tc, eager=True)


def multi_peer_hubs(us: np.ndarray, ur: np.ndarray, multi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rule 7's rendezvous: ``(unit, hub)`` memberships (int64 arrays of one length, each pair once; hubs numbered
    from 0), given the units of each matched send/recv pair (``us[i]``, ``ur[i]``) and ``multi`` (bool, per unit:
    a batch with two or more peers). A pair with a multi-peer batch on either side puts both its units in that
    batch's hub; pairs of two such batches merge their hubs. A unit that is no such batch joins every hub it
    touches without merging them (its own wait is only for its partner)."""
    am, bm = multi[us], multi[ur]
    keep = am | bm
    us, ur, am, bm = us[keep], ur[keep], am[keep], bm[keep]
    if not len(us):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # the hubs: connected components of the units over the pairs of two multi-peer batches, each named by its
    # smallest unit (what a union-find that hangs the larger root under the smaller gives), found for all pairs
    # at once: hook each pair's larger label under its smaller, then jump every label to its label's label until
    # none moves, until both units of every pair hold one label. A label only ever falls, and is always a unit
    # of its own component no larger than the unit: at the end each component holds its smallest unit.
    del keep
    both = am & bm
    every = bool(both.all())  # (a multi-peer batch joins one hub: its component's, whatever pair it is in)
    label = _hooked_labels(us, ur, both)
    root = label[np.where(am, us, ur)]
    del label, am, bm  # each temporary goes once used: the `rank` ring's static checks peak here (1M ops)
    hub = unique(root)[2]
    del root
    unit = np.concatenate([us, ur]).astype(np.int64)
    del us, ur
    hubs = np.concatenate([hub, hub])
    if every:  # each unit a multi-peer batch, in its component's hub alone: the pairs by unit, no sort
        hub_of, seen = np.empty(len(multi), np.int64), np.zeros(len(multi), bool)
        hub_of[unit], seen[unit] = hubs, True
        units = np.flatnonzero(seen)
        return units, hub_of[units]
    key = unit * (int(hub.max()) + 1) + hubs  # each (unit, hub) pair once, sorted by unit then hub
    del hub
    first = unique(key)[1]
    del key
    return unit[first], hubs[first]


def _hooked_labels(us: np.ndarray, ur: np.ndarray, both: np.ndarray) -> np.ndarray:
    """:func:`multi_peer_hubs`' labels: per unit (0 .. the largest of ``us`` and ``ur``), the smallest unit of its
    component over the pairs ``both`` selects (its comment says how)."""
    a, b = us[both].astype(np.int64), ur[both].astype(np.int64)
    label = np.arange(int(max(us.max(), ur.max())) + 1, dtype=np.int64)
    while len(a):
        la, lb = label[a], label[b]
        if np.array_equal(la, lb):
            break
        m = np.minimum(la, lb)
        for x in (la, lb, a, b):
            np.minimum.at(label, x, m)
        while not np.array_equal(nxt := label[label], label):
            label = nxt
    return label


#: The reasons of the wait-for graph's edges, in the order that picks one where several edges make one wait: a
#: launch completes after it is posted; done(a) -> posted(b): one communicator's issue order, communicators
#: sharing ranks, a dependency, stream order; posted(a) -> done(b): a send/recv partner, a collective's member, a
#: multi-peer batch's rendezvous, a lazily created communicator's; posted(a) -> posted(b): a rank's host waiting
#: in the lazy creation of a communicator (rules of the module docstring).
WAIT_REASONS = ("posted", "same communicator", "communicators share ranks", "a dependency", "stream order", "p2p",
                "collective", "multi-peer batch", "lazy init", "lazy host")


def _strong_components(n: int, ptr: list[int], dst: list[int]) -> list[int]:
    """Per node of the graph ``dst[ptr[v]:ptr[v + 1]]`` (successors of node ``v``, ``n`` nodes), its strongly
    connected component's number (Tarjan's algorithm, without recursion)."""
    index, low, comp = [-1] * n, [0] * n, [-1] * n
    on = bytearray(n)
    stack: list[int] = []
    counter = ncomp = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = 1
        work = [(root, ptr[root])]
        while work:
            v, e = work[-1]
            if e < ptr[v + 1]:
                work[-1] = (v, e + 1)
                w = dst[e]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = 1
                    work.append((w, ptr[w]))
                elif on[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work and low[v] < low[work[-1][0]]:
                low[work[-1][0]] = low[v]
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on[w] = 0
                    comp[w] = ncomp
                    if w == v:
                        break
                ncomp += 1
    return comp


def canonical_cycle(nodes: int, src: np.ndarray, dst: np.ndarray, prio: np.ndarray, fold: int
                    ) -> list[tuple[int, int, int]] | None:
    """One cycle of the graph of edges ``src[e] -> dst[e]`` on ``nodes`` nodes, chosen by the graph alone (not by
    how it is numbered beyond its nodes below ``fold``, nor by the order of its edges), or None when it has none.

    Nodes from ``fold`` up are hubs, folded out: ``x -> hub -> y`` is the step ``x -> y``. The cycle goes through
    the smallest node below ``fold`` that lies on one, and is the shortest through it, found breadth-first with
    each node's successors taken in ascending order (the first found of equal length). Returns its steps
    ``(a, b, p)`` from that node, ``p`` the smallest ``prio[e]`` of the edges (a direct one, or a hub's edge to
    ``b``) that make the step. Linear in nodes + edges (Python loops: run on a found fault only)."""
    src, dst, prio = (np.asarray(x, I64) for x in (src, dst, prio))
    o = np.lexsort((prio, dst, src))
    d_all, p_all = dst[o], prio[o]
    ptr_a = np.zeros(nodes + 1, I64)
    np.cumsum(np.bincount(src, minlength=nodes), out=ptr_a[1:])
    ptr, D = ptr_a.tolist(), d_all.tolist()
    comp = _strong_components(nodes, ptr, D)
    comp_a = np.asarray(comp, I64)
    size = np.bincount(comp_a, minlength=nodes)
    # the first node that closes a cycle (a hub's edges back to where they came from close none)
    for s in np.flatnonzero(size[comp_a[:fold]] >= 2).tolist():
        path = _shortest_cycle(s, comp, comp_a, ptr, D, src, dst, fold)
        if path is not None:
            return [(a, b, _step_prio(ptr, D, p_all, fold, a, b)) for a, b in zip(path, path[1:], strict=False)]
    return None


def _shortest_cycle(s: int, comp: list[int], comp_a: np.ndarray, ptr: list[int], D: list[int], src: np.ndarray,
                    dst: np.ndarray, fold: int) -> list[int] | None:
    """The nodes of :func:`canonical_cycle`'s cycle through ``s`` (``s`` first and last), or None when no cycle of
    the folded graph goes through it."""
    c = comp[s]
    into = (dst == s) & (comp_a[src] == c)  # the steps into s: direct, or through a hub
    hubs = src[into & (src >= fold)]
    closes = (set(src[into & (src < fold)].tolist()) | set(src[np.isin(dst, hubs) & (src < fold)].tolist())) - {s}
    parent: dict[int, int] = {s: s}
    expanded: set[int] = set()
    queue, at = [s], 0
    while at < len(queue):
        x = queue[at]
        at += 1
        if x in closes:
            path = [x]
            while path[-1] != s:
                path.append(parent[path[-1]])
            return [*reversed(path), s]
        new: list[int] = []
        for e in range(ptr[x], ptr[x + 1]):
            y = D[e]
            if comp[y] != c:
                continue
            if y < fold:
                new.append(y)
            elif y not in expanded:
                expanded.add(y)
                new += [z for z in D[ptr[y]:ptr[y + 1]] if z < fold and comp[z] == c]
        for z in sorted(set(new)):
            if z not in parent:
                parent[z] = x
                queue.append(z)
    return None


def _step_prio(ptr: list[int], D: list[int], p_all: np.ndarray, fold: int, a: int, b: int) -> int:
    """The smallest priority of the edges that make the folded step ``a -> b`` (:func:`canonical_cycle`)."""
    best = None
    for e in range(ptr[a], ptr[a + 1]):
        y = D[e]
        if y == b:
            cand = [int(p_all[e])]
        elif y >= fold:
            cand = [int(p_all[f]) for f in range(ptr[y], ptr[y + 1]) if D[f] == b]
        else:
            continue
        for p in cand:
            best = p if best is None or p < best else best
    assert best is not None
    return best


def hang_witness(prog: Program, eager: bool = False, grouped: bool = False
                 ) -> tuple[list[tuple[int, int, str]], dict[int, list[int]]] | None:
    """``(steps, units)``: the cycle of NCCL's wait-for graph of ``prog`` that :func:`canonical_cycle` chooses
    (``eager``, ``grouped`` as :func:`_wait_for_edges` takes them), or None when it has none; looked for first
    without rule 6 (lazy communicator creation), so that a hang which eager creation would not cure is named by
    the rules that make it (and its fix is not "create eagerly"). ``steps`` are
    ``(a, b, reason)``: node ``2u`` is "unit u posted", ``2u + 1`` "unit u done" (units numbered by their first
    op in program order), ``reason`` one of
    :data:`WAIT_REASONS`; ``units`` maps each unit of the cycle to its ops (indices, ascending)."""
    tc = _Templates.of(prog)
    comm, head = launch_heads(prog, tc)
    for creation in (False, True) if prog.nccl_init == "lazy" else (True,):
        got = _hang_cycle(prog, comm, head, tc, eager, grouped, creation)
        if got is not None:
            return got
    return None


def _hang_cycle(prog: Program, comm: np.ndarray, head: np.ndarray, tc: _Templates, eager: bool, grouped: bool,
                creation: bool) -> tuple[list[tuple[int, int, str]], dict[int, list[int]]] | None:
    """:func:`hang_witness` on the wait-for graph with rule 6 (``creation``) or without it."""
    why: list[str] = []
    nodes, parts, useq, u, _lazy = _wait_for_edges(prog, comm, head, eager, tc, grouped, why, creation)
    n = len(useq)
    src: list[np.ndarray] = [np.arange(0, 2 * n, 2, dtype=I64)]
    dst: list[np.ndarray] = [src[0] + 1]
    prio: list[np.ndarray] = [np.zeros(n, I64)]
    for (a, b), reason in zip(parts, why, strict=True):
        a, b = a.astype(I64), b.astype(I64)
        if reason == "communicator order":
            heads = comm[comm == head]
            cid = np.full(n, -1, I64)
            if len(heads):
                cid[u[heads]] = _comm_ids(prog, heads, eager, tc)[0]
            p = np.where(cid[a // 2] == cid[b // 2], WAIT_REASONS.index("same communicator"),
                         WAIT_REASONS.index("communicators share ranks"))
        else:
            p = np.full(len(a), WAIT_REASONS.index(reason), I64)
        src.append(a)
        dst.append(b)
        prio.append(p.astype(I64))
    steps = canonical_cycle(nodes, np.concatenate(src), np.concatenate(dst), np.concatenate(prio), 2 * n)
    if steps is None:
        return None
    want = sorted({x // 2 for a, b, _p in steps for x in (a, b)})
    ops = np.flatnonzero(np.isin(u, want))
    units: dict[int, list[int]] = {k: [] for k in want}
    for i, k in zip(ops.tolist(), u[ops].tolist(), strict=True):
        units[k].append(i)
    return [(a, b, WAIT_REASONS[p]) for a, b, p in steps], units


def cross_communicator_witness(prog: Program) -> list[int] | None:
    """The collectives (indices into :attr:`Program.coll_keys`) around a cycle of the ranks' issue orders that no
    single order of the collectives agrees with (the "may hang" warning of :func:`_cross_communicator_cycle`),
    as :func:`canonical_cycle` chooses it; None when there is none."""
    nk = len(prog.coll_ptr) - 1
    if nk < 2:
        return None
    comm, head = launch_heads(prog)
    key = np.full(prog.N, -1, I64)
    key[prog.coll_idx] = np.repeat(np.arange(nk), np.diff(prog.coll_ptr))
    heads = comm[(comm == head) & (key[comm] >= 0)]
    k, r = key[heads], prog.rank[heads]
    same = (r[1:] == r[:-1]) & (k[1:] != k[:-1])
    a, b = k[:-1][same], k[1:][same]
    steps = canonical_cycle(nk, a, b, np.zeros(len(a), I64), nk)
    return None if steps is None else [x for x, _y, _p in steps]
