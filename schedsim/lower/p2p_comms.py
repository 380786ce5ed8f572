"""The NCCL communicator of a batched send/recv (issue 36): what :meth:`schedsim.gpu.cost.CostModel.p2p_duration`
times it on (the channels NCCL gives it, :mod:`schedsim.network.p2p_channels`)."""

from __future__ import annotations

import re

import numpy as np

from schedsim.arrays import unique
from schedsim.lower.program import Program

__all__ = ["batch_communicators", "family_of_stream"]

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
    ``cp_comm``) that meet on a rank stay two communicators. Ops of no matched pair are left at -1."""
    cid = np.full(prog.N, -1, I64)
    pr = prog.p2p
    if not len(pr):
        return cid, []
    snd, rcv = pr[:, 0].astype(I64), pr[:, 1].astype(I64)
    batched = (prog.batch[snd] >= 0) | (prog.batch[rcv] >= 0)
    snd, rcv = snd[batched], rcv[batched]
    if not len(snd):
        return cid, []
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
    index: dict[tuple[int, ...], int] = {}
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
