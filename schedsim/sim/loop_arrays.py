"""The per-op lists the ``replay`` loop runs on (:class:`_Compiled`), compiled once from a
:class:`~schedsim.lower.program.Program`'s columns (:func:`_compile_program`): per op its successors and
predecessor count; per job (an op alone, or a rendezvous group of a collective's or a send/recv pair's ops) its
resource, ranks and solo seconds, with rule one-rank-collective (collectives of one rank), rule graph-forks
(CUDA-graph forks) and rule graph-nodes (node and HBM terms) of :mod:`schedsim.gpu.rules` applied. The ``waves``
model does not use them: it runs on the Program's columns (:mod:`schedsim.sim.waves_columns`). The same lists
from a networkx graph, and the Python ``waves`` loop on them, are test oracles (``tests/oracle/``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from schedsim.errors import GraphError
from schedsim.gpu import rules as gm
from schedsim.gpu.cost import CostModel, cost_model
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS, P2P_KINDS, PER_RANK_SIZE
from schedsim.lower.program import Program

_COPY_RES = {"h2d": 2, "d2h": 3, "d2d": 4}
#: Job resource of a kind's registry ``resource`` (a copy: then by direction, ``_COPY_RES``).
_RES_CODE = {"compute": 0, "comm": 1, "copy": 2}


class _Compiled(NamedTuple):
    """The DAG as arrays (index i = op i in program order per rank)."""

    ids: list[str]
    ops: list[Op]
    N: int
    world: int
    npred: list[int]
    succ: list[list[int]]
    job_of: list[int]  # j < N: op j alone; N + g: rendezvous group g
    gmem: list[list[int]]
    job_res: list[int]  # 0 compute, 1 comm, 2-4 copy engine (h2d, d2h, d2d)
    job_ranks: list[tuple[int, ...]]
    job_work: list[float]  # solo seconds (+ per-node graph overhead)
    cost: CostModel
    #: :func:`schedsim.lower.p2p_comms.batch_communicators` (each batched send/recv's communicator), or None
    p2p_comm: tuple[np.ndarray, list[tuple[int, ...]]] | None = None


def _coll_groups(ptr: Sequence[int] | np.ndarray, idx: Sequence[int] | np.ndarray) -> tuple[list[list[int]], list[int]]:
    """Collectives as CSR (``ptr``, member op indices ``idx``) -> the rendezvous groups of those of two or more
    ranks, and the ops of those of one rank, a copy or nothing (rule one-rank-collective, :func:`gm.split_one_rank`)."""
    p, i, lone = gm.split_one_rank(np.asarray(ptr, np.int64), np.asarray(idx, np.int64))
    pl, il = p.tolist(), i.tolist()
    return [il[pl[k]:pl[k + 1]] for k in range(len(pl) - 1)], lone.tolist()


def _add_forks(fx: np.ndarray, job_of: list[int], job_work: list[float], lone: list[int]) -> None:
    """Rule graph-forks of :mod:`schedsim.gpu.rules` on the job arrays: ``fx`` seconds more for ops outside groups,
    but for collectives of one rank (``lone``: left as they are, as every collective is)."""
    fx[lone] = 0.0
    for i in np.flatnonzero(fx).tolist():
        if job_of[i] == i:
            job_work[i] += float(fx[i])


def _jobs(ops: list[Op], gmem: list[list[int]], cost: CostModel, node_oh: tuple[float, float],
          terms: tuple[np.ndarray | float, np.ndarray | float], job_of: list[int], job_res: list[int],
          job_ranks: list[tuple[int, ...]], job_work: list[float], lone: list[int],
          p2p_comm: tuple[np.ndarray, list[tuple[int, ...]]] | None = None) -> None:
    """Fill each op's and each rendezvous group's resource, ranks and solo time (seconds; a send/recv pair's on
    the communicator ``p2p_comm`` gives its first op, :func:`schedsim.lower.p2p_comms.batch_communicators`'
    ``(cid, ranks)``, None or -1: its pair's own); ``terms`` are rule graph-nodes's
    per-op node and HBM seconds (:func:`schedsim.gpu.rules.memory_terms`); ``lone``: the ops of collectives
    of one rank, a copy or nothing (rule one-rank-collective)."""
    N = len(ops)
    dur = cost.duration
    timing_s, empty_s = node_oh
    node_a, extra_a = (t.tolist() if isinstance(t, np.ndarray) else [t] * N for t in terms)
    node_work = gm.node_work
    kind_res = {k: _RES_CODE[info.resource] for k, info in KINDS.items()}  # a kind outside the registry: comm
    for i, op in enumerate(ops):
        res = kind_res.get(op.kind, 1)
        if res == 2:
            res = _COPY_RES[op.direction or "d2d"]
        job_res[i] = res
        job_ranks[i] = (op.rank,)
        job_work[i] = node_work(dur(op), node_a[i], timing_s, empty_s, extra_a[i])
    for i in lone:
        job_res[i] = gm.one_rank_res(ops[i].kind)
    cid, ranks_of = p2p_comm if p2p_comm is not None else (None, [])
    for g, idx in enumerate(gmem):
        j = N + g
        for i in idx:
            job_of[i] = j
        job_res[j] = 1
        job_ranks[j] = tuple(ops[i].rank for i in idx)
        i0 = idx[0]
        o = ops[i0]
        if o.kind in P2P_KINDS and len(idx) == 2:  # a send/recv pair: on its communicator (CostModel.p2p_duration)
            s_, d_ = (o.rank, ops[idx[1]].rank) if KINDS[o.kind].sender else (ops[idx[1]].rank, o.rank)
            c_ = -1 if cid is None else int(cid[i0])
            solo = cost.p2p_duration(replace(o, group=(s_, d_)), ranks_of[c_] if c_ >= 0 else None)
        else:
            solo = dur(o)
        job_work[j] = node_work(solo, node_a[i0], timing_s, empty_s, extra_a[i0])
        if ops[i0].kind in PER_RANK_SIZE:  # a size per member: the largest transfer ends the collective
            job_work[j] = max(job_work[i] for i in idx)
        for i in idx:
            job_work[i] = job_work[j]


def _compile_program(prog: Program, profile: HardwareProfile, mode: str) -> _Compiled:
    """:func:`_compile` from the Program's columns: the same arrays, without networkx."""
    cost = cost_model(profile)
    node_oh = gm.graph_node_terms(profile, mode)
    N = prog.N
    ids = prog.ids()
    ops = prog.ops()
    ptr, dst, _kind = prog.succ
    p, d = ptr.tolist(), dst.tolist()
    succ = [d[p[i]:p[i + 1]] for i in range(N)]
    npred = np.bincount(dst, minlength=N).tolist()
    if mode != "cuda_graph":  # a graph launch orders its forked streams' nodes after its capture stream's work
        from schedsim.lower.graphs import graph_fork_edges

        for a, b in graph_fork_edges(prog).tolist():
            succ[a].append(b)
            npred[b] += 1
    gmem, lone = _coll_groups(prog.coll_ptr, prog.coll_idx)
    gmem += [list(x) for x in prog.p2p.tolist()]
    J = N + len(gmem)
    job_of = list(range(N))
    job_res = [0] * J
    job_ranks: list[tuple[int, ...]] = [()] * J
    job_work = [0.0] * J
    terms = gm.memory_terms(ops, np.arange(N), prog.rank.astype(np.int64), prog.world_size, cost, mode)
    from schedsim.lower.p2p_comms import batch_communicators

    bc = batch_communicators(prog)
    _jobs(ops, gmem, cost, node_oh, terms, job_of, job_res, job_ranks, job_work, lone, bc)
    src = np.repeat(np.arange(N, dtype=np.int64), np.diff(ptr))
    per_op = np.array([cost.graph_fork_s(o) for o in ops], float) if mode == "cuda_graph" else None
    _add_forks(gm.graph_fork_columns(N, src, dst, prog.rank.astype(np.int64), prog.stream_id.astype(np.int64),
                                     profile, mode, per_op),
               job_of, job_work, lone)
    _check_work(ids, ops, N, job_work)
    return _Compiled(ids, ops, N, prog.world_size, npred, succ, job_of, gmem, job_res, job_ranks, job_work, cost, bc)


def _check_work(ids: list[str], ops: list[Op], N: int, job_work: list[float]) -> None:
    """Raise GraphError on a NaN, infinite or negative solo time.

    Such a time would spread through the timeline, or (negative) end an op before it starts and read as a
    deadlock; the schema bounds them, a graph built through the API may not. One sum and one min find any
    (an overflowing sum of finite values only costs a scan that finds nothing).
    """
    if job_work and not (min(job_work) >= 0.0 and math.isfinite(sum(job_work))):
        for i, w in enumerate(job_work[:N]):
            if not (w >= 0.0 and math.isfinite(w)):
                raise GraphError(f"op {ids[i]} ({ops[i].kind}) has a solo duration of {w} s",
                                 fix="give it a finite duration, FLOP and byte count >= 0 (and a profile whose "
                                     "rates are finite and > 0)")
