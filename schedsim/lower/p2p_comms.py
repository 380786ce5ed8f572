"""The NCCL communicator of a batched send/recv (issue 36): what :meth:`schedsim.gpu.cost.CostModel.p2p_duration`
times it on (the channels NCCL gives it, :mod:`schedsim.network.p2p_channels`)."""

from __future__ import annotations

import re

import numpy as np

from schedsim.arrays import unique
from schedsim.lower.program import Program

__all__ = ["batch_communicators", "check_p2p_groups", "family_of_stream", "launch_groups", "p2p_groups"]

I64 = np.int64


class _Union:
    """Union-find over ``0 .. n-1``, each set named by its least member."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def root(self, x: int) -> int:
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def join(self, a: int, b: int) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


_PEER_STREAM = re.compile(r"^(pp_(?:send|recv))[FB]?_r\d+$")


def family_of_stream(name: str) -> str:
    """The family of a send/recv issued on stream ``name``: the stream itself, but the pipeline block's per-peer
    streams ``pp_send{F,B}_r<k>`` / ``pp_recv{F,B}_r<k>`` (its overlapped p2p,
    :mod:`schedsim.lower.pipeline_emitter`), which are one pipeline's: ``pp_send`` / ``pp_recv``, as its batched
    mode names them (torch.distributed.pipelining runs every stage's p2p on the pipeline's process group)."""
    m = _PEER_STREAM.match(name)
    return m.group(1) if m else name


def batch_communicators(prog: Program) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """:func:`_batch_communicators` of ``prog``, made once per Program (the cost, the communicator order and the
    static checks each ask for it); the array is read-only."""
    got = prog.__dict__.get("_batch_comms")
    if got is None:
        got = _batch_communicators(prog)
        got[0].flags.writeable = False
        prog.__dict__["_batch_comms"] = got
    return got


def _batch_communicators(prog: Program) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Per op (int64, shape (N,)), the id of the NCCL communicator its batched send/recv runs on (-1: any other op,
    a lone send/recv included: torch runs it on its pair's two-rank communicator), and the ranks of each id,
    sorted.

    torch runs a ``batch_isend_irecv`` on the communicator of its process group (``ProcessGroupNCCL::pointToPoint``:
    "For batch P2P, we need to treat it like a collective when selecting communicator"), which the language does
    not name. It is taken as the ranks that batched send/recv of one *family* connect, transitively
    (:func:`_batch_comms`): a matched pair's family is the stream its send is issued on (:func:`family_of_stream`),
    and the families of the
    ops of one batch (one ``batch_isend_irecv`` call: one process group) are one. So a pipeline's p2p (Megatron's
    pipeline-parallel group) and a context-parallel ring's exchange (Transformer Engine's CP group, stream
    ``cp_comm``) that meet on a rank stay two communicators. Ops of no matched pair are left at -1. A pair whose
    send names its process group (``group:``, :attr:`schedsim.graph.ops.Op.comm`; :func:`check_p2p_groups` holds
    the recv to the same) runs on that group's ranks and joins no family. Ids are numbered in first use: the
    written groups (pair order), then the families (by least family code), the order in which ``execute`` creates
    them (:func:`p2p_groups`)."""
    cid = np.full(prog.N, -1, I64)
    pr = prog.p2p
    if not len(pr):
        return cid, []
    snd, rcv = pr[:, 0].astype(I64), pr[:, 1].astype(I64)
    batched = (prog.batch[snd] >= 0) | (prog.batch[rcv] >= 0)
    snd, rcv = snd[batched], rcv[batched]
    if not len(snd):
        return cid, []
    index: dict[tuple[int, ...], int] = {}
    written = [t.comm for t in prog.templates]
    if any(c is not None for c in written):  # a written `group:` is the pair's communicator (check_p2p_groups)
        tm = prog.tmpl[snd].tolist()
        mine = np.array([written[t] is not None for t in tm], bool)
        for k in np.flatnonzero(mine).tolist():
            c = index.setdefault(written[tm[k]], len(index))  # type: ignore[index]
            for o in (snd[k], rcv[k]):
                if prog.batch[o] >= 0:
                    cid[o] = c
        snd, rcv = snd[~mine], rcv[~mine]
        if not len(snd):
            return cid, list(index)
    fam_of = [family_of_stream(n) for n in prog.streams]
    codes = {f: k for k, f in enumerate(dict.fromkeys(fam_of))}
    S = len(codes)
    fam = np.array([codes[f] for f in fam_of], I64)[prog.stream_id[snd]]  # a pair's family: its send's stream
    ops, fam2 = np.concatenate([snd, rcv]), np.concatenate([fam, fam])
    inb = prog.batch[ops] >= 0
    families = _Union(S)
    # a batch is one rank's call: its key is (rank, batch name id) (the name ids are shared by every rank's ops)
    NB = int(prog.batch[ops[inb]].max()) + 1 if inb.any() else 1
    call = prog.rank[ops[inb]].astype(I64) * NB + prog.batch[ops[inb]].astype(I64)
    key = unique(call * S + fam2[inb])[0]  # each (call, family) once, sorted: a call's families in a run
    b, f = key // S, key % S
    head = np.ones(len(key), bool)
    head[1:] = b[1:] != b[:-1]
    lead = f[np.maximum.accumulate(np.where(head, np.arange(len(key)), 0))]  # the least family of f's call
    for k in unique(lead * S + f)[0].tolist():  # the families met in one batch are one process group's
        families.join(*divmod(k, S))
    roots = np.array([families.root(f) for f in range(S)], I64)[fam]
    src, dst = prog.rank[snd].astype(I64), prog.rank[rcv].astype(I64)
    for r in unique(roots)[0].tolist():
        m = roots == r
        code = np.full(prog.world_size, -1, I64)
        for rank, ranks in _batch_comms(src[m], dst[m], prog.world_size).items():
            code[rank] = index.setdefault(ranks, len(index))
        for which in (snd[m], rcv[m]):
            b = which[prog.batch[which] >= 0]
            cid[b] = code[prog.rank[b]]
    return cid, list(index)


def _batch_comms(src: np.ndarray, dst: np.ndarray, world: int) -> dict[int, tuple[int, ...]]:
    """The ranks that the send/recv pairs ``src[i]`` -> ``dst[i]`` connect, transitively, by rank (each sorted;
    ranks of no pair are absent). ``world``: ranks are below it."""
    if not len(src):
        return {}
    ranks = _Union(world)
    k = unique(src.astype(I64) * world + dst.astype(I64))[0]  # the distinct pairs (not np.unique: numpy.ma)
    for x in k.tolist():
        ranks.join(x // world, x % world)
    members: dict[int, list[int]] = {}
    used = unique(np.concatenate([src, dst]).astype(I64))[0].tolist()
    for r in used:
        members.setdefault(ranks.root(r), []).append(r)
    return {r: tuple(members[ranks.root(r)]) for r in used}


def p2p_groups(prog: Program) -> tuple[list[tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """What ``execute`` needs to run every batched send/recv on the communicator :func:`batch_communicators` times
    it on: the process groups to create (sorted rank tuples, in id order, then the written ``group:`` of lone
    send/recv not among them: every rank computes the same list from the same schedule and calls
    ``torch.distributed.new_group`` on each in that order, as torch requires of every rank, members or not), and
    per op id (``name@rN``) the ranks of the process group it is issued on: every batched send/recv, and a lone
    one that names its group (a lone one without runs on the default group; torch times either on its pair's
    two-rank communicator under lazy init)."""
    cid, comms = batch_communicators(prog)
    ids = prog.ids()
    out = {ids[i]: comms[c] for i, c in enumerate(cid.tolist()) if c >= 0}
    written = [t.comm for t in prog.templates]
    if any(c is not None for c in written):
        groups = dict.fromkeys(comms)
        tm = prog.tmpl.tolist()
        for i in np.flatnonzero(cid < 0).tolist():
            c = written[tm[i]]
            if c is not None:
                out[ids[i]] = c
                groups.setdefault(c, None)
        comms = list(groups)
    return comms, out


def check_p2p_groups(prog: Program) -> None:
    """The written process groups of send/recv (``group:``) agree where torch needs them to: a send and the recv it
    matches name the same group (torch's ``P2POp`` / ``isend`` run each end on its own group's communicator, so two
    groups never meet), and the ops of one ``p2p_batch`` of a rank name one group, or none
    (``torch.distributed.batch_isend_irecv``: "All ops need to use the same group"; distributed_c10d.py
    ``_check_p2p_op_list``). Nothing to check when no send/recv names a group.

    Raises
    ------
    GraphError
        Naming the ops, their groups and the fix.
    """
    written = [t.comm for t in prog.templates]
    if all(c is None for c in written):
        return
    from schedsim.errors import GraphError

    tm, names = prog.tmpl.tolist(), prog.names
    nid, rank = prog.name_id.tolist(), prog.rank.tolist()

    def where(o: int) -> str:
        t = prog.templates[tm[o]]
        return f"{t.source or prog.file}: {t.kind} {names[nid[o]]!r} on rank {rank[o]}"

    def shown(c: tuple[int, ...] | None) -> str:
        return "no group" if c is None else f"group {list(c)}"

    for a, b in prog.p2p.tolist():
        ca, cb = written[tm[a]], written[tm[b]]
        if ca != cb:
            raise GraphError(f"{where(a)} names {shown(ca)} but the recv it pairs with, {names[nid[b]]!r} on rank "
                             f"{rank[b]}, names {shown(cb)}: torch runs each end on its own process group's "
                             "communicator, so the two would never meet",
                             fix=f"give both the same `group:` (e.g. group: {list(ca or cb or ())}), or remove it "
                             "from both")
    first: dict[tuple[int, int], int] = {}
    for o in np.flatnonzero(prog.batch >= 0).tolist():
        k = (rank[o], int(prog.batch[o]))
        f = first.setdefault(k, o)
        if written[tm[o]] != written[tm[f]]:
            batch = prog.strs[k[1]]
            raise GraphError(f"{where(o)} names {shown(written[tm[o]])} but {names[nid[f]]!r}, of the same "
                             f"p2p_batch {batch!r}, names {shown(written[tm[f]])}: one batch_isend_irecv runs on one "
                             "process group (torch: \"All ops need to use the same group\")",
                             fix=f"give every send/recv of p2p_batch {batch!r} the same `group:`, or put them in two "
                             "p2p_batch names")


def launch_groups(prog: Program, heads: np.ndarray, cache: list[tuple[np.ndarray, list[tuple[int, ...]]]],
                  groups: dict[tuple[int, ...], int]) -> np.ndarray:
    """The communicator of each send/recv launch ``heads`` (op indices) that runs on a process group's
    communicator, as an id of ``groups`` (ranks -> id; new ones added): a batched one's
    (:func:`batch_communicators`), and for another (a lone one under eager init, a batched one of no matched pair)
    its written ``group:``, else the world's (the default process group). ``cache``: an empty list, or one holding
    :func:`batch_communicators`' result for ``prog`` (filled here on first use)."""
    if not cache:
        cache.append(batch_communicators(prog))
    bc, comms = cache[0]
    b = bc[heads]
    out = np.empty(len(heads), I64)
    if (b >= 0).any():
        ids = np.array([groups.setdefault(c, len(groups)) for c in comms], I64)
        out[b >= 0] = ids[b[b >= 0]]
    if (b < 0).any():
        written = [prog.templates[x].comm for x in prog.tmpl[heads[b < 0]].tolist()]
        world = tuple(range(prog.world_size))
        out[b < 0] = [groups.setdefault(world if c is None else c, len(groups)) for c in written]
    return out
