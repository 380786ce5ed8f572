"""Static checks on the DAG: cycles, collective order and NCCL hangs.

These catch schedules that would hang on real GPUs before anything runs:

* a dependency cycle (CUDA would wait forever on an event);
* collectives of one group issued in a different order on different ranks
  (NCCL would hang: NVIDIA/nccl#195, #1174);
* a cycle of NCCL's wait-for graph (:mod:`schedsim.graph.nccl`): rendezvous of
  collectives and send/recv pairs, one communicator's ops in issue order whatever
  the CUDA stream, one relative order for collectives on communicators that share
  ranks, batches (``p2p_batch``) posted and completed as one unit.

Send/recv pairing (by issue order, as NCCL pairs them; tags and sizes must agree)
is checked while the graph is built. Every hang names each wait, prints the
rank × step grid of NCCL launches with the blocking ops marked ``*``, and a fix.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

from schedsim.errors import DeadlockError

__all__ = ["check_graph", "check_acyclic", "check_collective_order", "check_rendezvous"]



def check_graph(G: nx.DiGraph) -> None:
    """Run every static check on ``G``; raise on the first failure.

    Checks, in order: collectives of one group in one order on every rank; then one Kahn sweep over
    the NCCL wait-for graph (:func:`schedsim.graph.nccl.wait_for_graph`: dependencies, stream order,
    send/recv and collective rendezvous, one communicator's ops in issue order, collectives on
    communicators sharing ranks in one relative order). The explanations run only when it fails.
    Sets ``G.graph["issue_order"]`` (:func:`schedsim.graph.nccl.issue_order`), the order the executor
    replays.

    Raises
    ------
    CycleError, DeadlockError
    """
    from schedsim.graph.nccl import find_hang, issue_order

    G.graph["issue_order"] = issue_order(G)
    check_collective_order(G)
    _check_lazy_init(G)
    cyc = find_hang(G)
    if cyc is None:
        from schedsim.graph.nccl import cross_communicator_order

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
    from schedsim.graph.nccl import find_hang

    if int(G.graph.get("world_size", 1)) != 2 or not G.graph.get("collectives") or not any(
            G.nodes[s]["op"].nccl_group is None for s, _r in G.graph.get("p2p", [])):
        return None
    cyc = find_hang(G, eager=True)
    if cyc is None:
        return None
    text = str(_explain_hang(G, cyc)).replace("ranks would wait on each other forever: ", "", 1)
    steps, _fix, grid = text.partition("\n  fix: ")[0], None, text.partition("\n\n")[2]
    return ("may hang: with an eagerly initialised process group (init_process_group(device_id=...), as `schedsim "
            "execute --backend nccl` does) torch runs "
            f"lone send/recv on the collectives' communicator, in issue order with them, and then {steps}"
            "\n  fix: issue the send/recv and the collectives in one order on both ranks, or batch the send/recv "
            "(`p2p_batch`); a lazily initialised group (no device_id) gives the pair a communicator of its own\n\n"
            + grid)


def _multi_peer_batch_hang(G: nx.DiGraph) -> str | None:
    """A "may hang" warning when the schedule hangs once a batch of send/recv with two or more peers waits for all
    of them (rule 7 of :mod:`schedsim.graph.nccl`; pytorch/PiPPy#969): a peer posts its op matched with the batch
    only after something that waits for the batch. Warned, not refused: NCCL's documentation says the calls of
    a group progress independently, and whether one peer's transfer waits behind another's depends on NCCL's p2p
    schedule (as the split of a large batch does, :func:`schedsim.lower.checks._split_batch_warning`)."""
    from schedsim.graph.nccl import find_hang

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
    from schedsim.errors import SchedsimError

    hang = _explain_hang(G, cyc)
    steps = hang.message.replace("ranks would wait on each other forever: ", "", 1)
    return SchedsimError(
        "may hang: a batch of send/recv with two or more peers (batch_isend_irecv) is one NCCL kernel, which may "
        "serve one peer's transfer only after another's, so its ops and the ops matched with them complete only "
        f"once all of them are posted (pytorch/PiPPy#969), and then {steps}",
        fix="batch the send/recv per peer (one batch_isend_irecv per peer, as PiPPy PR #1000 does), or post every "
            "op matched with the batch before anything that waits for it", detail=hang.detail).format()


def _check_lazy_init(G: nx.DiGraph) -> None:
    """Rule 6 of :mod:`schedsim.graph.nccl`: under lazy communicator creation every rank of a group
    communicator that some rank launches on must launch on it too.

    Raises
    ------
    DeadlockError
    """
    from schedsim.graph.nccl import lazy_init_missing
    from schedsim.lower.check_errors import lazy_init_error

    got = lazy_init_missing(G)
    if got is None:
        return
    comm, users, missing = got
    raise lazy_init_error(comm[1], users, missing, G.graph.get("issue_order") or {})


def _explain_hang(G: nx.DiGraph, cyc: list[tuple[int, int]]) -> DeadlockError:
    """A :class:`DeadlockError` naming each wait of a wait-for cycle, with the issue grid and a fix."""
    from schedsim.graph.nccl import issue_grid

    labels: list[str] = G.graph.pop("_hang_labels")
    why: dict[tuple[int, int], str] = G.graph.pop("_hang_why")
    steps: list[str] = []
    marked: set[str] = set()
    reasons: set[str] = set()
    chain: list[str] = []
    named: list[str] = []  # op ids in the order the message names them

    def name(node: int) -> str:
        return labels[node // 2].replace("+", " + ")

    for a, b in cyc:
        ua, ub = labels[a // 2], labels[b // 2]
        if a % 2 == 1 and b % 2 == 0:  # done(a) -> posted(b): b is issued after a completes
            reason = why.get((a, b))
            if reason is None:
                kind = G.edges[ua.split("+")[-1], ub.split("+")[0]].get("kind") if G.has_edge(
                    ua.split("+")[-1], ub.split("+")[0]) else None
                reason = "stream order" if kind == "stream" else "a dependency"
            reasons.add(reason)
            text = {"same communicator": "NCCL runs one communicator's ops in issue order, whatever the stream",
                    "communicators share ranks": "collectives on communicators that share ranks must keep one "
                    "order (NCCL docs)"}.get(reason, reason)
            steps.append(f"{name(b)} cannot start before {name(a)} completes ({text})")
            named += [*ub.split("+"), *ua.split("+")]
            chain.append(ua.split("+")[0])
        elif a % 2 == 0 and b % 2 == 1 and a // 2 != b // 2:
            kind = why.get((a, b), "p2p")
            reasons.add(kind)
            partner = {"p2p": "its send/recv partner", "multi-peer batch": "one rendezvous with it: a batch with two "
                       "or more peers, or an op matched with one",
                       "lazy init": "the first call of another rank on the same communicator, which a lazily "
                       "initialised process group creates then, waiting for all its ranks"
                       }.get(kind, "a member of the same collective")
            steps.append(f"{name(b)} completes only once {name(a)} is posted ({partner})")
            named += [*ub.split("+"), *ua.split("+")]
        elif a % 2 == 0 and b % 2 == 0:  # posted(a) -> lazy creation hub -> posted(b) (rule 6)
            reasons.add("lazy init")
            steps.append(f"{name(b)} is issued only once {name(a)} is posted (its rank's host waits in the lazy "
                         "creation of a communicator, ncclCommInitRank, until every rank of it calls it)")
            named += [*ub.split("+"), *ua.split("+")]
        for u in (ua, ub):
            marked.update(u.split("+"))
    if "lazy init" in reasons:
        fix = ("initialise the process group eagerly (`nccl_init: eager`: init_process_group(device_id=...)), or make "
               "the first call on that communicator one that every rank of it reaches without waiting on another, and "
               "make every rank call its communicators for the first time in one order (pytorch/pytorch#74701)")
    elif "communicators share ranks" in reasons:
        fix = ("issue the collectives of communicators that share two or more ranks in one relative order on every "
               "rank (NCCL documentation, 'Using multiple NCCL communicators concurrently')")
    elif "same communicator" in reasons:
        fix = ("post each send/recv pair in the same order on both ranks (e.g. even ranks send first, odd ranks "
               "receive first), or issue the sends and recvs of one step together in one NCCL group "
               "(`p2p_batch: <name>` on the ops; torch batch_isend_irecv); a different CUDA stream does not help")
    else:
        fix = ("reorder so every rank reaches these sends/recvs/collectives in a compatible order "
               "(e.g. even ranks send first, odd ranks receive first)")
    order = G.graph.get("issue_order") or {}
    grid = issue_grid({r: ["+".join(x) for x in launches] for r, launches in order.items()}, marked)
    cycle_ids = [x for x in dict.fromkeys(chain)]
    return DeadlockError("ranks would wait on each other forever: " + "; ".join(steps), fix=fix, detail=grid,
                         ops=list(dict.fromkeys(named)), cycle=cycle_ids)


def check_acyclic(G: nx.DiGraph) -> None:
    """Raise :class:`CycleError` listing the op ids around a dependency cycle."""
    if nx.is_directed_acyclic_graph(G):
        return
    from schedsim.lower.check_errors import cycle_error

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
                from schedsim.graph.nccl import issue_order
                from schedsim.lower.check_errors import collective_order_error

                raise collective_order_error(group, ref, r, i, names[ref][i], names[r][i],
                                             G.graph.get("issue_order") or issue_order(G))


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

    def ids(n: str) -> list[str]:
        if n.startswith("coll:"):
            return []
        return n[4:].split("|") if n.startswith("p2p:") else [n]

    raise DeadlockError(
        "ranks would wait on each other forever: " + " -> ".join(show(n) for n in cyc + [cyc[0]]),
        fix="reorder so every rank reaches these sends/recvs/collectives in a compatible order "
        "(e.g. even ranks send first, odd ranks receive first)", ops=[i for n in cyc for i in ids(n)])
