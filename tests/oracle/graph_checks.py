"""Oracle: the static checks on the DAG of op instances (the object form of :mod:`schedsim.lower.checks`): cycles,
collective order and NCCL hangs.

These catch schedules that would hang on real GPUs before anything runs:

* a dependency cycle (CUDA would wait forever on an event);
* collectives of one group issued in a different order on different ranks
  (NCCL would hang: NVIDIA/nccl#195, #1174);
* a cycle of NCCL's wait-for graph (:mod:`tests.oracle.nccl_graph`): rendezvous of
  collectives and send/recv pairs, one communicator's ops in issue order whatever
  the CUDA stream, one relative order for collectives on communicators that share
  ranks, batches (``p2p_batch``) posted and completed as one unit.

Send/recv pairing (by issue order, as NCCL pairs them; tags and sizes must agree)
is checked while the graph is built (:mod:`tests.oracle.object_build`). Every hang names each wait, prints the
rank × step grid of NCCL launches with the blocking ops marked ``*``, and a fix, worded by
:mod:`schedsim.lower.check_errors` as the package words it from the arrays.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from schedsim.errors import DeadlockError
from schedsim.lower.check_errors import (
    collective_order_error,
    cycle_error,
    eager_hang_warning,
    lazy_init_error,
    multi_peer_hang_warning,
    wait_cycle_error,
)
from tests.oracle.nccl_graph import cross_communicator_order, find_hang, issue_order, lazy_init_missing

__all__ = ["check_graph", "check_acyclic", "check_collective_order"]


def check_graph(G: nx.DiGraph) -> None:
    """Run every static check on ``G``; raise on the first failure.

    Checks, in order: collectives of one group in one order on every rank; then one Kahn sweep over
    the NCCL wait-for graph (:func:`tests.oracle.nccl_graph.wait_for_graph`: dependencies, stream order,
    send/recv and collective rendezvous, one communicator's ops in issue order, collectives on
    communicators sharing ranks in one relative order). The explanations run only when it fails.
    Sets ``G.graph["issue_order"]`` (:func:`tests.oracle.nccl_graph.issue_order`), the order the executor
    replays.

    Raises
    ------
    CycleError, DeadlockError
    """
    G.graph["issue_order"] = issue_order(G)
    check_collective_order(G)
    _check_lazy_init(G)
    cyc = find_hang(G)
    if cyc is None:
        w = cross_communicator_order(G)
        if w is not None:
            G.graph.setdefault("warnings", []).append(w)
        for w in (_eager_init_hang(G), _multi_peer_batch_hang(G)):
            if w is not None:
                G.graph.setdefault("warnings", []).append(w)
        return
    check_acyclic(G)
    raise _explain_hang(G, cyc)


def _eager_init_hang(G: nx.DiGraph) -> str | None:
    """A "may hang" warning when the schedule hangs only if lone send/recv share the collectives' communicator.

    With two ranks and an eagerly initialised process group (``init_process_group(device_id=...)``), torch runs
    a lone send/recv on the group's communicator, in issue order with the collectives (measured on 2×H200,
    the simulator's ``nccl.unbatched_p2p_serialized``); lazily initialised, it gets a communicator
    of its own. Wider worlds are not assumed (as in :mod:`schedsim.gpu.rules` rule 7).
    """
    if int(G.graph.get("world_size", 1)) != 2 or not G.graph.get("collectives") or not any(
            G.nodes[s]["op"].nccl_group is None for s, _r in G.graph.get("p2p", [])):
        return None
    cyc = find_hang(G, eager=True)
    if cyc is None:
        return None
    return eager_hang_warning(_explain_hang(G, cyc))


def _multi_peer_batch_hang(G: nx.DiGraph) -> str | None:
    """A "may hang" warning when the schedule hangs once a batch of send/recv with two or more peers waits for all
    of them (rule 7 of :mod:`schedsim.lower.checks`; pytorch/PiPPy#969): a peer posts its op matched with the batch
    only after something that waits for the batch. Warned, not refused: NCCL's documentation says the calls of
    a group progress independently, and whether one peer's transfer waits behind another's depends on NCCL's p2p
    schedule (as the split of a large batch does, :func:`schedsim.lower.checks._split_batch_warning`)."""
    peers: dict[tuple[int, object], set[int | None]] = defaultdict(set)
    for s, r in G.graph.get("p2p", []):
        for oid in (s, r):
            op = G.nodes[oid]["op"]
            if op.nccl_group is not None:
                peers[(op.rank, op.nccl_group)].add(op.peer)
    if all(len(ps) < 2 for ps in peers.values()):
        return None  # no batch with two or more peers: rule 7 adds nothing
    cyc = find_hang(G, grouped=True)
    if cyc is None:
        return None
    return multi_peer_hang_warning(_explain_hang(G, cyc))


def _check_lazy_init(G: nx.DiGraph) -> None:
    """Rule 6 of :mod:`schedsim.lower.checks`: under lazy communicator creation every rank of a group
    communicator that some rank launches on must launch on it too.

    Raises
    ------
    DeadlockError
    """
    got = lazy_init_missing(G)
    if got is None:
        return
    comm, users, missing = got
    raise lazy_init_error(comm[1], users, missing, G.graph.get("issue_order") or {})


def _explain_hang(G: nx.DiGraph, cyc: list[tuple[int, int, str]]) -> DeadlockError:
    """A :class:`DeadlockError` naming each wait of a wait-for cycle (:func:`tests.oracle.nccl_graph.find_hang`'s
    steps), with the issue grid and a fix (:func:`schedsim.lower.check_errors.wait_cycle_error`)."""
    labels: list[str] = G.graph.pop("_hang_labels")
    units = {x // 2: labels[x // 2].split("+") for a, b, _r in cyc for x in (a, b)}
    return wait_cycle_error(cyc, units, G.graph.get("issue_order") or {})


def check_acyclic(G: nx.DiGraph) -> None:
    """Raise :class:`CycleError` listing the op ids around a dependency cycle."""
    if nx.is_directed_acyclic_graph(G):
        return
    edges = nx.find_cycle(G)
    raise cycle_error([u for u, _v in edges], any(G.edges[u, v]["kind"] == "stream" for u, v in edges))


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
        seqs = {r: [k for _s, k, _n in sorted(v)] for r, v in per_rank.items()}
        names = {r: [n for _s, _k, n in sorted(v)] for r, v in per_rank.items()}
        ranks = sorted(seqs)
        ref = ranks[0]
        for r in ranks[1:]:
            if seqs[r] != seqs[ref]:
                i = next(i for i, (a, b) in enumerate(zip(seqs[ref], seqs[r], strict=False)) if a != b)
                raise collective_order_error(group, ref, r, i, names[ref][i], names[r][i],
                                             G.graph.get("issue_order") or issue_order(G))

