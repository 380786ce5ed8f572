"""Oracle: the object-based build: one :class:`~schedsim.graph.ops.Op` per instance, networkx, every rule checked
op by op.

The reference that :mod:`schedsim.lower.link` and :mod:`schedsim.lower.checks` agree with: the package words every
fault from its arrays (:func:`schedsim.lower.link.build_fault`, :func:`schedsim.lower.check_errors.word_fault`) and
never runs this build; tests compare the two builds' errors and warnings. Edges carry ``kind``: ``"dep"`` (a
declared dependency) or ``"stream"`` (consecutive ops on one stream of one rank; the members of one ``p2p_batch``
that follow each other on a stream are one NCCL group launch, so each gets the stream edges of the op before the
run, and the op after the run gets an edge from each member).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx

from schedsim.errors import DeadlockError, GraphError
from schedsim.graph.ops import Op, format_op_id
from schedsim.kinds import P2P_KINDS, PER_RANK_SIZE
from schedsim.lower.check_errors import (
    CollectiveMember,
    batch_dep_error,
    batch_input_error,
    collective_mismatch_error,
    collective_missing_error,
    duplicate_name_error,
    forward_dep_error,
    p2p_pairing_error,
    pipeline_grid,
    self_dep_error,
    unknown_dep_error,
    unmatched_p2p_error,
)
from schedsim.lower.p2p import message_name, name_warning
from schedsim.spec.model import COLLECTIVE_KINDS
from tests.oracle.graph_checks import check_graph
from tests.oracle.nccl_graph import grid_of_ops

__all__ = ["graph_from_ops", "match_p2p_ops"]


def graph_from_ops(ops: list[Op], info: Mapping[str, Any], file: str, check: bool) -> nx.DiGraph:
    """The DAG of ``ops`` (program order), with ``info`` as ``G.graph``; raises on the first broken rule.

    Raises
    ------
    GraphError, DeadlockError, CycleError
        As :func:`schedsim.graph.build.build_graph`.
    """
    G = nx.DiGraph(**info)
    G.add_nodes_from((op.id, {"op": op}) for op in ops)
    names_on_rank = _names_on_rank(ops, file)
    stream_edges, collectives = _stream_edges_and_collectives(ops)
    G.add_edges_from(stream_edges, kind="stream")
    dep_edges, forward_dep = _dep_edges(ops, names_on_rank)
    G.add_edges_from(dep_edges, kind="dep")
    _check_collectives(G, ops, collectives)
    G.graph["collectives"] = dict(collectives)
    warnings: list[str] = []
    G.graph["warnings"] = warnings
    G.graph["p2p"] = match_p2p_ops(ops, warnings)
    if check:
        _check(G, forward_dep)
    return G


def _names_on_rank(ops: list[Op], file: str) -> dict[int, dict[str, Op]]:
    """Per rank, its ops by name; a name used twice on one rank is an error."""
    names_on_rank: dict[int, dict[str, Op]] = defaultdict(dict)
    for op in ops:
        here = names_on_rank[op.rank]
        if op.name in here:
            first = here[op.name].source or "the pipeline block"
            raise duplicate_name_error(op.source or file, op.name, op.rank, first)
        here[op.name] = op
    return names_on_rank


def _stream_edges_and_collectives(ops: list[Op]) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """The stream edges (module docstring), and each collective's members by key ``name#ranks``."""
    collectives: dict[str, list[str]] = defaultdict(list)
    group_keys: dict[tuple[str, int], str] = {}  # by id(): one group tuple is shared by its ranks; hashing a
    # 100k-rank tuple, or formatting its key, once per op would make the build quadratic in world_size
    stream_edges: list[tuple[str, str]] = []
    # per (rank, stream): (p2p batch of the last run or None, the ops that run follows, the run's ops)
    stream_run: dict[tuple[int, str], tuple[str | None, list[str], list[str]]] = {}
    for op in ops:
        oid = op.id
        key = (op.rank, op.stream)
        run = stream_run.get(key)
        b = op.p2p_batch if op.kind in ("send", "recv") else None
        if run is not None and b is not None and run[0] == b:  # same launch: follow what the run follows
            stream_edges.extend((x, oid) for x in run[1])
            run[2].append(oid)
        else:
            before = run[2] if run is not None else []
            stream_edges.extend((x, oid) for x in before)
            stream_run[key] = (b, before, [oid])
        if op.kind in COLLECTIVE_KINDS:
            ckey = group_keys.get((op.name, id(op.group)))
            if ckey is None:
                ckey = group_keys[(op.name, id(op.group))] = f"{op.name}#{','.join(map(str, op.group))}"
            collectives[ckey].append(oid)
    return stream_edges, collectives


def _unknown_dep(op: Op, d: str, names_on_rank: dict[int, dict[str, Op]]) -> GraphError:
    elsewhere = sorted(r for r, names in names_on_rank.items() if d in names)
    return unknown_dep_error(op.source, op.name, op.rank, d, list(names_on_rank[op.rank]), elsewhere)


def _dep_edges(ops: list[Op], names_on_rank: dict[int, dict[str, Op]]
               ) -> tuple[list[tuple[str, str]], tuple[Op, str] | None]:
    """The dependency edges, and the first dependency on an op written later on the same rank (or None)."""
    dep_edges = []
    forward_dep: tuple[Op, str] | None = None
    for op in ops:
        if not op.deps:
            continue
        here = names_on_rank[op.rank]
        for d in op.deps:
            if d not in here:
                raise _unknown_dep(op, d, names_on_rank)
            if d == op.name:
                raise self_dep_error(op.source, op.name)
            if here[d].seq > op.seq and forward_dep is None:
                forward_dep = (op, d)
            b = op.p2p_batch if op.kind in ("send", "recv") else None
            if b is not None and here[d].kind in ("send", "recv") and here[d].p2p_batch == b:
                raise batch_dep_error(op.source, op.kind, op.name, d, b, op.rank)
            dep_edges.append((format_op_id(d, op.rank), op.id))
    return dep_edges, forward_dep


def _check_collectives(G: nx.DiGraph, ops: list[Op], collectives: dict[str, list[str]]) -> None:
    """Every collective has one kind, size, dtype and root, and is issued on every rank of its group.

    An all_to_all may have a size per rank (:data:`schedsim.kinds.PER_RANK_SIZE`): NCCL runs it as grouped
    send/recv (``ncclGroupStart``; one ``ncclSend`` and ``ncclRecv`` per peer, each with its own count: torch
    ``all_to_all_single`` with ``input_split_sizes``), so the ranks' totals need not agree (an MoE layer with a hot
    expert); what must agree is each pair's, which a rank's total does not state. It is timed by its largest
    member (:func:`schedsim.sim.engine.simulate`)."""
    def grid(marked: set[str], ranks: Sequence[int]) -> str:
        want = set(ranks)
        return "\n\n" + grid_of_ops([o for o in ops if o.rank in want], marked, sorted(want))

    for members in collectives.values():
        first = G.nodes[members[0]]["op"]
        for mid in members[1:]:
            o = G.nodes[mid]["op"]
            same_size = o.nbytes == first.nbytes or (o.kind == first.kind and o.kind in PER_RANK_SIZE)
            if (o.kind, o.root, o.dtype) != (first.kind, first.root, first.dtype) or not same_size:
                raise collective_mismatch_error(o.source, o.name, first.group, _member(o), _member(first),
                                                grid({o.id, first.id}, (o.rank, first.rank)).lstrip("\n"))
        have = sorted(G.nodes[m]["op"].rank for m in members)
        if have != list(first.group):
            missing = sorted(set(first.group) - set(have))
            raise collective_missing_error(first.source, first.name, first.group, have, missing, first.id,
                                           grid(set(members), [*have[:3], *missing[:3]]).lstrip("\n"))


def _check(G: nx.DiGraph, forward_dep: tuple[Op, str] | None) -> None:
    """The static checks: a dependency written after its user, then :func:`tests.oracle.graph_checks.check_graph`
    (a pipeline's hang also gets the rank × step grid of its compute order), then the batches' inputs."""
    if forward_dep is not None and nx.is_directed_acyclic_graph(G):  # a cycle gets check_graph's CycleError
        op, d = forward_dep
        raise forward_dep_error(op.source, op.name, op.rank, d)
    try:
        check_graph(G)
    except DeadlockError as e:
        if "pipeline" in G.graph:
            grid = _pipeline_grid(G, e.ops)
            raise DeadlockError(e.message, fix=e.fix, detail=f"{e.detail}\n\n{grid}" if e.detail else grid,
                                ops=e.ops, cycle=e.cycle) from None
        raise
    _check_batch_inputs(G)


def _check_batch_inputs(G: nx.DiGraph) -> None:
    """Every input of a p2p batch is written before the batch's first member, where the batch is posted.

    The executor (and NCCL's issue order, :func:`tests.oracle.nccl_graph.issue_order`) posts a whole batch at its
    first member; a member that waits for an op written after that point (a dependency, or the op before it on
    its stream) would be posted before that op ran.

    Raises
    ------
    GraphError
    """
    for launches in G.graph.get("issue_order", {}).values():
        for launch in launches:
            if len(launch) < 2:
                continue
            first = G.nodes[launch[0]]["op"]
            members = set(launch)
            for m in launch[1:]:
                for u in G.predecessors(m):
                    x = G.nodes[u]["op"]
                    if u not in members and x.seq > first.seq:
                        o = G.nodes[m]["op"]
                        how = "follows it on stream " + repr(o.stream) if G.edges[u, m].get("kind") == "stream" \
                            else "is a dependency of it"
                        raise batch_input_error(o.source, o.kind, o.name, o.p2p_batch, o.rank, first.name, x.name,
                                                how)


def _member(o: Op) -> CollectiveMember:
    return CollectiveMember(o.id, o.rank, o.kind, o.nbytes, o.dtype, o.root)


def _pipeline_grid(G: nx.DiGraph, op_ids: Sequence[str]) -> str:
    """The rank × step grid of a pipeline's compute order, marking the step of the first pipeline send/recv of
    ``op_ids`` (the op ids a :class:`DeadlockError` names)."""
    order = G.graph["pipeline"]["order"]
    step = None
    for oid in op_ids:
        op = G.nodes.get(oid, {}).get("op")
        if op is None or op.kind not in P2P_KINDS:
            continue
        tags = dict(op.tags)
        stage, mb = tags.get("stage"), tags.get("mb")
        if stage is None or mb is None:
            continue
        step = next((i for i, a in enumerate(order.get(op.rank, []))
                     if a in (f"{stage}{c}{mb}" for c in "FIBW")), None)
        if step is not None:
            break
    return pipeline_grid(order, step)


def match_p2p_ops(ops: list[Op], warnings: list[str] | None = None) -> list[tuple[str, str]]:
    """Pair sends and recvs as NCCL does: the k-th send from a to b meets the k-th recv on b from a, in
    issue order (a ``p2p_batch`` is posted whole at the position of its first member).

    NCCL has no tags (``ncclSend``/``ncclRecv`` take a peer, a count and a type), so ``tag:`` only states
    intent: a pairing whose tags disagree, or whose sizes differ, is an error; one whose names suggest
    another pairing is a warning appended to ``warnings``.
    """
    sends, recvs = _p2p_by_pair(ops, by_group=True)  # per written process group (one communicator each) ...
    if any(len(sends.get(k, [])) != len(recvs.get(k, [])) for k in set(sends) | set(recvs)):
        sends, recvs = _p2p_by_pair(ops)  # ... unless that fails: over all groups (check_p2p_groups names them)
    pairs: list[tuple[str, str]] = []
    for key in sorted(set(sends) | set(recvs)):
        s, r = sends.get(key, []), recvs.get(key, [])
        src, dst = key[:2]
        by_name: dict[str, Op] | None = None
        for k, (a, b) in enumerate(zip(s, r, strict=False)):
            _check_pairing(a, b, k, s, r, src, dst)
            if warnings is not None and "msg" not in dict(a.tags):
                na, nb = message_name(a.name), message_name(b.name)
                if na and nb and na != nb:
                    if by_name is None:
                        by_name = {}
                        for x in r:
                            by_name.setdefault(message_name(x.name), x)
                    other = by_name.get(na)
                    if other is not None:
                        warnings.append(name_warning(a.source, a.id, b.id, other.id, src, dst))
            pairs.append((a.id, b.id))
        if len(s) != len(r):
            extra = s[len(r):] if len(s) > len(r) else r[len(s):]
            what = "send" if len(s) > len(r) else "recv"
            raise unmatched_p2p_error(extra[0].source, what, [o.id for o in extra], src, dst, len(s), len(r),
                                      grid_of_ops([*s, *r], {o.id for o in extra}))
    return pairs


def _p2p_by_pair(ops: list[Op], by_group: bool = False) -> tuple[dict[tuple, list[Op]], dict[tuple, list[Op]]]:
    """Sends and recvs by (src, dst), and by written group (``Op.comm``, () none) where ``by_group``, each list in
    issue order."""
    sends: dict[tuple, list[Op]] = defaultdict(list)
    recvs: dict[tuple, list[Op]] = defaultdict(list)
    # issue position: a p2p batch is posted at its first member (tests.oracle.nccl_graph.issue_order), so a lone
    # send written between two members of a batch reaches NCCL after the whole batch
    first_of: dict[tuple[int, str], int] = {}
    moved = False
    pos: dict[str, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        if op.kind not in ("send", "recv"):
            continue
        b = op.p2p_batch
        at = i if b is None else first_of.setdefault((op.rank, b), i)
        moved = moved or at != i
        pos[op.id] = (at, i)
        g = (op.comm or (),) if by_group else ()
        if op.kind == "send":
            sends[(op.rank, op.peer, *g)].append(op)  # type: ignore[index]
        else:
            recvs[(op.peer, op.rank, *g)].append(op)  # type: ignore[index]
    if moved:
        for lst in (*sends.values(), *recvs.values()):
            lst.sort(key=lambda o: pos[o.id])
    return sends, recvs


def _check_pairing(a: Op, b: Op, k: int, s: list[Op], r: list[Op], src: int, dst: int) -> None:
    """Send ``a`` paired with recv ``b`` (the k-th between ``src`` and ``dst``): tags, messages and sizes agree."""
    ta, tb = dict(a.tags), dict(b.tags)
    intent = None
    if a.tag is not None and b.tag is not None and a.tag != b.tag:
        intent = f"tag {a.tag!r}", f"tag {b.tag!r}"
    elif "msg" in ta and "msg" in tb and ta["msg"] != tb["msg"]:
        intent = f"message {ta['msg']}", f"message {tb['msg']}"
    if intent is None and a.nbytes == b.nbytes:
        return
    meant = next((x for x in r[k + 1:] if (a.tag is not None and x.tag == a.tag)
                  or ("msg" in ta and dict(x.tags).get("msg") == ta["msg"])), None)
    raise p2p_pairing_error(a.source, a.id, b.id, (a.nbytes, b.nbytes), intent, meant is not None, src, dst,
                            [x.name for x in r], grid_of_ops([*s, *r], {a.id, b.id}))
