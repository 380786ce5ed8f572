"""Build the networkx DAG of a schedule, from its lowering (:func:`schedsim.lower.lower`).

Nodes are op ids (``name@rN``) with the :class:`~schedsim.graph.ops.Op` in the
``op`` attribute, inserted in program order (rank by rank, in the order the
ops are written). Edges carry ``kind``:

* ``"dep"``: a declared dependency (a CUDA event wait when the streams differ);
* ``"stream"``: consecutive ops on one stream of one rank (CUDA stream order). The
  consecutive members of one ``p2p_batch`` on a stream are one NCCL group launch, not
  an order: each gets the stream edges of the op before the run, and the op after
  the run gets an edge from each member (a chain inside one launch would make a
  member wait for another member of the same kernel).

Rendezvous are not edges: ``G.graph["collectives"]`` maps a collective key to
the op ids of its members (one per rank of the group) and ``G.graph["p2p"]``
lists matched ``(send_id, recv_id)`` pairs. A checked graph also has
``G.graph["issue_order"]`` (:func:`schedsim.lower.checks.launches`, by op id) and ``G.graph["warnings"]``.
These graph-level facts are one typed record, :class:`~schedsim.graph.info.GraphInfo` (:func:`info_of`);
``G.graph`` holds its plain form (:meth:`~schedsim.graph.info.GraphInfo.graph_attrs`) and
:meth:`GraphInfo.of(G) <schedsim.graph.info.GraphInfo.of>` reads it back.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from schedsim._gc import paused_gc
from schedsim.graph.info import GraphInfo

__all__ = ["build_graph", "graph_of", "info_of"]


def build_graph(spec: Any, *, check: bool = True) -> nx.DiGraph:
    """Build the DAG of ``spec`` and, by default, run the static checks.

    Parameters
    ----------
    spec : ScheduleSpec
        A validated schedule.
    check : bool
        Run the static checks (cycles, collective order, rendezvous deadlocks; see
        :mod:`schedsim.lower.checks`).

    Returns
    -------
    networkx.DiGraph
        See the module docstring. ``G.graph`` also holds ``name``,
        ``world_size`` and ``launch``.

    Raises
    ------
    GraphError
        A dependency names an op that does not exist on that rank.
    DeadlockError
        An unmatched send or recv; collectives issued in different orders.
    CycleError
        The dependencies form a cycle.
    """
    from schedsim.lower import lower

    with paused_gc():
        return graph_of(lower(spec, check=check))


def info_of(prog: Any, ids: list[str] | None = None) -> GraphInfo:
    """The :class:`~schedsim.graph.info.GraphInfo` of a :class:`~schedsim.lower.program.Program`: its name,
    world size, launch mode, ``CUDA_DEVICE_MAX_CONNECTIONS`` and pipeline block, and its collectives, p2p
    pairs and (when checked) NCCL issue order by op id. ``ids`` are ``prog.ids()`` when the caller has them."""
    from schedsim.lower.checks import launches

    ids = prog.ids() if ids is None else ids
    mc = prog.max_connections
    issue = ({r: [[ids[i] for i in launch] for launch in ls] for r, ls in launches(prog).items()}
             if prog.checked else None)
    return GraphInfo(name=prog.name, world_size=prog.world_size, launch=prog.launch,
                     collectives={k: [ids[i] for i in m] for k, m in prog.collectives().items()},
                     p2p=[(ids[a], ids[b]) for a, b in prog.p2p.tolist()], warnings=list(prog.warnings),
                     issue_order=issue, pipeline=prog.pipeline, max_connections=None if mc is None else int(mc))


def graph_of(prog: Any) -> nx.DiGraph:
    """The networkx DAG of a :class:`~schedsim.lower.program.Program` (module docstring); ``G.graph`` is the
    plain form of :func:`info_of`."""
    with paused_gc():
        ids = prog.ids()
        G = nx.DiGraph(**info_of(prog, ids).graph_attrs())
        G.add_nodes_from(zip(ids, ({"op": op} for op in prog.ops()), strict=True))
        G.add_edges_from(((ids[a], ids[b]) for a, b in prog.stream_edges.tolist()), kind="stream")
        G.add_edges_from(((ids[a], ids[b]) for a, b in prog.dep_edges.tolist()), kind="dep")
        return G
