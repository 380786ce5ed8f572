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
    _jobs(ops, gmem, cost, node_oh, terms, job_of, job_res, job_ranks, job_work, lone)
    if mode == "cuda_graph":
        names: dict[str, int] = {}
        sid = np.array([names.setdefault(o.stream, len(names)) for o in ops], np.int64)
        src = np.repeat(np.arange(N, dtype=np.int64), [len(x) for x in succ])
        dst = np.fromiter((j for x in succ for j in x), np.int64, count=len(src))
        per_op = np.array([cost.graph_fork_s(o) for o in ops], float)
        _add_forks(gm.graph_fork_columns(N, src, dst, np.array(ranks, np.int64), sid, profile, mode, per_op), job_of,
                   job_work, lone)
    _check_work(ids, ops, N, job_work)
    return _Compiled(ids, ops, N, world, npred, succ, job_of, gmem, job_res, job_ranks, job_work, cost)
