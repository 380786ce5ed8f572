"""The communicator of each batched send/recv, from a networkx graph's ops, object by object: the oracle of
:func:`schedsim.lower.p2p_comms.batch_communicators` (which works on a Program's columns). A matched pair is
batched when either op is; its family is the stream its send is issued on; the families met in one
``batch_isend_irecv`` (one rank's ops of one ``p2p_batch``) are one process group's (the family naming rule,
``family_of_stream``, is the package's); a family's communicator is the
ranks its pairs connect, transitively. Only the batched ops get a communicator (-1: lone, or no pair)."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np

from schedsim.kinds import KINDS
from schedsim.lower.p2p_comms import family_of_stream


def _root(parent: dict[Any, Any], x: Any) -> Any:
    while parent.setdefault(x, x) != x:
        x = parent[x]
    return x


def _join(parent: dict[Any, Any], a: Any, b: Any) -> None:
    ra, rb = _root(parent, a), _root(parent, b)
    if ra != rb:
        lo, hi = sorted((ra, rb), key=repr)
        parent[hi] = lo


def p2p_communicators(ops: list[Any], pairs: list[list[int]]) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """``(cid, ranks)`` as :func:`~schedsim.lower.p2p_comms.batch_communicators` gives them (ids may be numbered
    otherwise; the ranks each op's id names are the same), for ``ops`` (in the graph's order) and the matched
    ``pairs`` (op indices, send first)."""
    cid = np.full(len(ops), -1, np.int64)
    batched = [(s, r) for s, r in pairs if ops[s].p2p_batch is not None or ops[r].p2p_batch is not None]
    index: dict[tuple[int, ...], int] = {}
    for s, r in batched:  # a written `group:` (Op.comm, the same on both ends) is the pair's, in no family
        if ops[s].comm is not None:
            for i in (s, r):
                if ops[i].p2p_batch is not None:
                    cid[i] = index.setdefault(ops[s].comm, len(index))
    batched = [(s, r) for s, r in batched if ops[s].comm is None]
    fam: dict[Any, Any] = {}
    for s, r in batched:  # the families met in one batch call are one
        for i in (s, r):
            if ops[i].p2p_batch is not None:
                _join(fam, ("batch", ops[i].rank, ops[i].p2p_batch), ("stream", family_of_stream(ops[s].stream)))
    comp: dict[Any, Any] = {}
    for s, r in batched:
        f = _root(fam, ("stream", family_of_stream(ops[s].stream)))
        _join(comp, (f, ops[s].rank), (f, ops[r].rank))
    members: dict[Any, set[int]] = {}
    for s, r in batched:
        f = _root(fam, ("stream", family_of_stream(ops[s].stream)))
        for i in (s, r):
            members.setdefault(_root(comp, (f, ops[i].rank)), set()).add(ops[i].rank)
    for s, r in batched:
        f = _root(fam, ("stream", family_of_stream(ops[s].stream)))
        for i in (s, r):
            if ops[i].p2p_batch is not None:
                ranks = tuple(sorted(members[_root(comp, (f, ops[i].rank))]))
                cid[i] = index.setdefault(ranks, len(index))
    return cid, list(index)


def graph_p2p_communicators(G: nx.DiGraph, ops: list[Any], index: dict[str, int]) -> tuple[np.ndarray,
                                                                                            list[tuple[int, ...]]]:
    """:func:`p2p_communicators` of a graph's matched pairs (``G.graph["p2p"]``: op ids, send first)."""
    pairs = [[index[a], index[b]] for a, b in G.graph.get("p2p", [])]
    pairs = [[a, b] if KINDS[ops[a].kind].sender else [b, a] for a, b in pairs]
    return p2p_communicators(ops, pairs)
