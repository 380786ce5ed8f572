"""Oracle: the Op-list feed of the event loops from a networkx graph (:func:`compile_graph`), the form the
engine compiled graphs with before it took Programs only. The package's ``replay`` loop reads
the same lists from a Program (:func:`schedsim.sim.loop_arrays._compile_program`); this form builds them from the
graph's nodes, edges and ``G.graph`` records instead, so a differential test holds the Program's linking
against the graph's."""

from __future__ import annotations

from operator import attrgetter

import networkx as nx
import numpy as np

from schedsim.errors import GraphError
from schedsim.gpu import rules as gm
from schedsim.gpu.cost import cost_model
from schedsim.hardware.profile import HardwareProfile
from schedsim.lower.program import Program
from schedsim.sim.loop_arrays import _add_forks, _check_work, _coll_groups, _compile_program, _Compiled, _jobs

__all__ = ["compile_graph"]


def compile_graph(G: nx.DiGraph | Program, profile: HardwareProfile, mode: str) -> _Compiled:
    """The per-op lists of the reference loops from a networkx DAG (``G._node``: ``{id: {"op": Op}}``;
    ``G.graph``: ``world_size``, ``collectives``, ``p2p``), or from a Program (the package's
    :func:`~schedsim.sim.loop_arrays._compile_program`).

    Raises GraphError on an op outside ``0 .. world_size - 1`` or a NaN, infinite or negative solo time."""
    if isinstance(G, Program):
        return _compile_program(G, profile, mode)
    cost = cost_model(profile)
    node_oh = gm.graph_node_terms(profile, mode)
    node_data = G._node  # plain dicts: much faster than the NodeView API at a million nodes
    ids = list(node_data)
    N = len(ids)
    index = {oid: i for i, oid in enumerate(ids)}
    ops = [d["op"] for d in node_data.values()]
    world = int(G.graph.get("world_size", 1 + max((o.rank for o in ops), default=0)))
    ranks = list(map(attrgetter("rank"), ops))
    if ranks and not (0 <= min(ranks) and max(ranks) < world):  # the loops index per-rank arrays by rank
        bad = next(o for o in ops if not 0 <= o.rank < world)
        raise GraphError(f"op {bad.id} is on rank {bad.rank} but the graph's world_size is {world}",
                         fix="set G.graph['world_size'] to the number of ranks, or put the op on a rank in "
                             f"0-{world - 1}")
    npred = [0] * N
    succ: list[list[int]] = []
    for nbrs in G._succ.values():
        s = [index[v] for v in nbrs]
        for j in s:
            npred[j] += 1
        succ.append(s)
    if mode != "cuda_graph":  # a graph launch beside eager ops (the package: schedsim.lower.graphs.graph_fork_edges)
        deps = [[index[u] for u, e in G._pred[oid].items() if e.get("kind") == "dep"] for oid in ids]
        for a, b in _launch_edges(ops, deps):
            if b not in succ[a]:
                succ[a].append(b)
                npred[b] += 1
    job_of = list(range(N))
    colls = list(G.graph.get("collectives", {}).values())
    gmem, lone = _coll_groups(np.cumsum([0] + [len(m) for m in colls]), [index[m] for ms in colls for m in ms])
    for s_id, r_id in G.graph.get("p2p", []):
        gmem.append([index[s_id], index[r_id]])
    J = N + len(gmem)
    job_res = [0] * J
    job_ranks: list[tuple[int, ...]] = [()] * J
    job_work = [0.0] * J
    terms = gm.memory_terms(ops, np.arange(N), np.array(ranks, np.int64), world, cost, mode)
    from tests.oracle.p2p_families import graph_p2p_communicators

    bc = graph_p2p_communicators(G, ops, index)
    _jobs(ops, gmem, cost, node_oh, terms, job_of, job_res, job_ranks, job_work, lone, bc)
    if mode == "cuda_graph":
        names: dict[str, int] = {}
        sid = np.array([names.setdefault(o.stream, len(names)) for o in ops], np.int64)
        src = np.repeat(np.arange(N, dtype=np.int64), [len(x) for x in succ])
        dst = np.fromiter((j for x in succ for j in x), np.int64, count=len(src))
        per_op = np.array([cost.graph_fork_s(o) for o in ops], float)
        _add_forks(gm.graph_fork_columns(N, src, dst, np.array(ranks, np.int64), sid, profile, mode, per_op), job_of,
                   job_work, lone)
    _check_work(ids, ops, N, job_work)
    return _Compiled(ids, ops, N, world, npred, succ, job_of, gmem, job_res, job_ranks, job_work, cost, bc)


def _launch_edges(ops: list, deps: list[list[int]]) -> list[tuple[int, int]]:
    """The waits of each CUDA graph launch beside eager ops, one op at a time: a segment is a run of one rank's
    consecutive ops (by ``seq``) with one ``graph`` name, launched on the stream of its first op, and ends with its
    last op on that stream; an op of another segment stands for that segment's end. Each outside dependency of
    its ops comes before its first op; with ops on other streams, each outside dependency and the op before it on
    each of its streams come before its first op on every (other) stream, and its end before the first op after
    it on each other stream; its end comes before every op outside it that depends on one of its ops."""
    order, runs, seg_of = _launches(ops)
    end = [max(i for i in run if ops[i].stream == ops[run[0]].stream) for run in runs]

    def stand(a: int) -> int:
        return end[seg_of[a]] if seg_of[a] >= 0 else a

    out: list[tuple[int, int]] = []
    for j, ds in enumerate(deps):
        for d in ds:
            if seg_of[d] != seg_of[j] and seg_of[j] >= 0:
                out.append((stand(d), runs[seg_of[j]][0]))
            if seg_of[d] != seg_of[j] and seg_of[d] >= 0:
                out.append((end[seg_of[d]], j))
    for k, run in enumerate(runs):
        head, cap, rank = run[0], ops[run[0]].stream, ops[run[0]].rank
        firsts: dict[str, int] = {}
        for i in run:
            firsts.setdefault(ops[i].stream, i)
        if len(firsts) == 1:
            continue
        pre = [(d, None) for i in run for d in deps[i] if seg_of[d] != k]
        for st in firsts:
            on = [i for i in order if ops[i].rank == rank and ops[i].stream == st]
            before = [i for i in on if ops[i].seq < ops[head].seq]
            after = [i for i in on if ops[i].seq > ops[run[-1]].seq]
            if before:
                pre.append((before[-1], st))
            if st != cap and after:
                out.append((end[k], after[0]))
        out += [(stand(a), f) for a, st in pre for t, f in firsts.items() if t != st]
    return out


def _launches(ops: list) -> tuple[list[int], list[list[int]], list[int]]:
    """(the ops by rank and ``seq``, the graph launches as runs of op indices, each op's run or -1)."""
    order = sorted(range(len(ops)), key=lambda i: (ops[i].rank, ops[i].seq))
    runs: list[list[int]] = []
    seg_of = [-1] * len(ops)
    prev = None
    for i in order:
        g = ops[i].graph
        if g is not None:
            if prev is not None and ops[prev].rank == ops[i].rank and ops[prev].graph == g:
                runs[-1].append(i)
            else:
                runs.append([i])
            seg_of[i] = len(runs) - 1
        prev = i
    return order, runs, seg_of
