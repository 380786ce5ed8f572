"""What a schedule graph knows beyond its nodes and edges, as one typed record.

:func:`schedsim.graph.build.build_graph` keeps these facts in ``G.graph`` (networkx's graph attribute
dict); :meth:`GraphInfo.of` reads them into a frozen dataclass, so callers name fields the type checker
knows instead of string keys. It copies nothing: the mappings and lists are the graph's own (a 100k-rank
schedule has 100k-member collectives), so treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["GraphInfo"]


@dataclass(frozen=True)
class GraphInfo:
    """The graph-level facts of a schedule DAG.

    Attributes
    ----------
    name : str
        The schedule's name.
    world_size : int
        Ranks.
    launch : str
        ``"eager"`` or ``"cuda_graph"``.
    collectives : Mapping[str, Sequence[str]]
        Rendezvous key (collective name, and group when given) → the op ids of its members, one per rank.
    p2p : Sequence[tuple[str, str]]
        Matched (send op id, recv op id) pairs.
    warnings : Sequence[str]
        Warnings of the build (e.g. send/recv orders that may hang).
    issue_order : Mapping[int, Sequence[Sequence[str]]] or None
        Per rank, the NCCL launches in issue order (a launch is one op, or the ops of one p2p batch); set by
        :func:`schedsim.graph.checks.check_graph`.
    pipeline : Mapping[str, Any] or None
        The pipeline block's description (schedule, p, v, m, stage_to_rank, order, ...) for pipeline schedules.
    max_connections : int or None
        ``CUDA_DEVICE_MAX_CONNECTIONS`` from the schedule's ``env``.

    Examples
    --------
    >>> import networkx as nx
    >>> G = nx.DiGraph(name="x", world_size=2, launch="eager")
    >>> G.graph.update(collectives={"ar": ["ar@r0", "ar@r1"]}, p2p=[], warnings=[])
    >>> info = GraphInfo.of(G)
    >>> info.world_size, len(info.collectives), info.pipeline is None
    (2, 1, True)
    """

    name: str
    world_size: int
    launch: str
    collectives: Mapping[str, Sequence[str]]
    p2p: Sequence[tuple[str, str]]
    warnings: Sequence[str]
    issue_order: Mapping[int, Sequence[Sequence[str]]] | None = None
    pipeline: Mapping[str, Any] | None = None
    max_connections: int | None = None

    @classmethod
    def of(cls, G: Any) -> GraphInfo:
        """Read ``G.graph`` (a graph of :func:`~schedsim.graph.build.build_graph`; keys it lacks read as
        empty or None)."""
        g = G.graph
        mc = g.get("max_connections")
        return cls(name=str(g.get("name", "")), world_size=int(g.get("world_size", 1)),
                   launch=str(g.get("launch", "eager")), collectives=g.get("collectives") or {},
                   p2p=g.get("p2p") or [], warnings=g.get("warnings") or [], issue_order=g.get("issue_order"),
                   pipeline=g.get("pipeline"), max_connections=None if mc is None else int(mc))
