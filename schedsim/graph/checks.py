"""Static checks on the DAG: cycles, collective order and rendezvous deadlocks.

These catch schedules that would hang on real GPUs before anything runs:

* a dependency cycle (CUDA would wait forever on an event);
* collectives of one group issued in a different order on different ranks
  (NCCL would hang: NVIDIA/nccl#195, #1174);
* a wait-for cycle through rendezvous: every member of a collective, and both
  sides of a send/recv pair, must be reached before any of them finishes, so
  the DAG with each rendezvous contracted to one node must stay acyclic.

Unmatched send/recv are caught while the graph is built.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from schedsim.errors import CycleError, DeadlockError

__all__ = ["check_graph", "check_acyclic", "check_collective_order", "check_rendezvous"]


def check_graph(G: nx.DiGraph) -> None:
    """Run every static check on ``G``; raise on the first failure.

    One Kahn sweep over the DAG with rendezvous contracted finds dependency cycles and
    cross-rank wait cycles alike (a cycle of ``G`` survives contraction, since edges join ops
    of one rank and the members of a rendezvous sit on different ranks); the slower
    explanations run only when it fails.

    Raises
    ------
    CycleError, DeadlockError
    """
    check_collective_order(G)
    if _contracted_is_acyclic(G):
        return
    check_acyclic(G)
    check_rendezvous(G)


def _contracted_is_acyclic(G: nx.DiGraph) -> bool:
    ids = list(G)
    index = {n: i for i, n in enumerate(ids)}
    n = len(ids)
    rep = list(range(n))
    for members in G.graph.get("collectives", {}).values():
        r0 = index[members[0]]
        for m in members:
            rep[index[m]] = r0
    for s, r in G.graph.get("p2p", []):
        rep[index[r]] = index[s]
    indeg = [0] * n
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in G.edges():
        a, b = rep[index[u]], rep[index[v]]
        if a != b:
            adj[a].append(b)
            indeg[b] += 1
    nodes = [i for i in range(n) if rep[i] == i]
    stack = [i for i in nodes if indeg[i] == 0]
    seen = 0
    while stack:
        a = stack.pop()
        seen += 1
        for b in adj[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                stack.append(b)
    return seen == len(nodes)


def check_acyclic(G: nx.DiGraph) -> None:
    """Raise :class:`CycleError` listing the op ids around a dependency cycle."""
    if nx.is_directed_acyclic_graph(G):
        return
    cycle = [u for u, _v in nx.find_cycle(G)]
    kinds = {G.edges[u, v]["kind"] for u, v in nx.find_cycle(G)}
    how = " (through stream order: an op depends on one issued after it on the same stream)" if "stream" in kinds else ""
    raise CycleError(
        "dependency cycle" + how + ": " + " -> ".join(cycle + [cycle[0]])
        + "\n  fix: remove one of these dependencies, or move the op to another stream",
        cycle,
    )


def check_collective_order(G: nx.DiGraph) -> None:
    """Collectives on one group must be issued in the same order on every rank.

    Raises
    ------
    DeadlockError
        Naming the two ranks and the ops issued in different order.
    """
    order: dict[tuple[int, ...], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for key, members in G.graph.get("collectives", {}).items():
        for oid in members:
            op = G.nodes[oid]["op"]
            order[op.group][op.rank].append((op.seq, key, op.name))  # type: ignore[arg-type]
    for group, per_rank in order.items():
        seqs = {r: [k for _s, k, _n in sorted(v)] for r, v in per_rank.items()}  # type: ignore[misc]
        names = {r: [n for _s, _k, n in sorted(v)] for r, v in per_rank.items()}  # type: ignore[misc]
        ranks = sorted(seqs)
        ref = ranks[0]
        for r in ranks[1:]:
            if seqs[r] != seqs[ref]:
                i = next(i for i, (a, b) in enumerate(zip(seqs[ref], seqs[r])) if a != b)
                raise DeadlockError(
                    f"collectives on group {list(group)} are issued in a different order: rank {ref} issues "
                    f"{names[ref][i]!r} as its collective #{i} but rank {r} issues {names[r][i]!r}; real NCCL would hang"
                    f"\n  fix: issue the collectives of group {list(group)} in the same order on every rank")


def check_rendezvous(G: nx.DiGraph) -> None:
    """Contract each collective and each send/recv pair to one node; the result must be acyclic.

    Raises
    ------
    DeadlockError
        Listing the ops that would wait on each other across ranks.
    """
    rep: dict[str, str] = {}
    for key, members in G.graph.get("collectives", {}).items():
        for oid in members:
            rep[oid] = "coll:" + key
    for s, r in G.graph.get("p2p", []):
        rep[s] = rep[r] = f"p2p:{s}|{r}"
    if not rep:
        return
    H = nx.DiGraph()
    for u, v in G.edges():
        a, b = rep.get(u, u), rep.get(v, v)
        if a != b:
            H.add_edge(a, b)
    if nx.is_directed_acyclic_graph(H):
        return
    cyc = [u for u, _ in nx.find_cycle(H)]

    def show(n: str) -> str:
        if n.startswith("coll:"):
            return G.graph["collectives"][n[5:]][0].split("@")[0] + " (collective)"
        if n.startswith("p2p:"):
            return n[4:].replace("|", "/")
        return n

    raise DeadlockError(
        "ranks would wait on each other forever: " + " -> ".join(show(n) for n in cyc + [cyc[0]])
        + "\n  fix: reorder so every rank reaches these sends/recvs/collectives in a compatible order "
        "(e.g. even ranks send first, odd ranks receive first)")
