"""The errors of the static checks, worded from what a rule found (plain values: op names, ranks, ids).

One wording per rule, used by the array rules (:func:`word_fault`, :func:`hang_warnings`, from the witnesses of
:mod:`schedsim.lower.checks`) and by the object-based build (the test oracle in ``tests/oracle/``), so both raise
the same text. Rule families worded here: a dependency written
after its user, a dependency cycle, collectives of one group in different orders, lazy communicator creation
(rule 6 of :mod:`schedsim.lower.checks`), a cycle of NCCL's wait-for graph (both forms choose it canonically:
:func:`schedsim.lower.checks.canonical_cycle`), a p2p batch's inputs, and the "may hang" warnings (collectives of
different communicators in a cyclic order, a hang with lone send/recv on the collectives' communicator, a hang
once a multi-peer batch waits for all its peers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from schedsim.errors import CycleError, DeadlockError, GraphError
from schedsim.kinds import P2P_KINDS

if TYPE_CHECKING:
    from schedsim.lower.program import Program

__all__ = ["batch_input_error", "collective_order_error", "cross_communicator_warning", "cycle_error",
           "eager_hang_warning", "forward_dep_error", "hang_warnings", "lazy_init_error", "multi_peer_hang_warning",
           "issue_grid", "pipeline_grid", "wait_cycle_error", "word_fault"]


def forward_dep_error(source: str | None, name: str, rank: int, dep: str) -> GraphError:
    """Op ``name`` on ``rank`` (written at ``source``) depends on ``dep``, written after it on that rank."""
    return GraphError(
        f"{source}: op {name!r} on rank {rank} depends on {dep!r}, which is written after it; each "
        "rank issues its ops in the order written (the executor launches them so, and NCCL runs its "
        "communication in that order), so the wait would not be honoured",
        fix=f"move {dep!r} above {name!r} (or drop the dependency)")


def cycle_error(cycle: list[str], through_stream: bool) -> CycleError:
    """A dependency cycle through op ids ``cycle`` (in edge order, from the op where it closes);
    ``through_stream``: one of its edges is stream order."""
    how = " (through stream order: an op depends on one issued after it on the same stream)" if through_stream else ""
    return CycleError("dependency cycle" + how + ": " + " -> ".join(cycle + [cycle[0]]), cycle,
                      fix="remove one of these dependencies, or move the op to another stream")


def collective_order_error(group: Sequence[int], ref: int, rank: int, i: int, name_ref: str, name: str,
                           issue: Mapping[int, list[list[str]]]) -> DeadlockError:
    """Rank ``ref`` issues collective ``name_ref`` of ``group`` as its ``i``-th on that group, rank ``rank`` issues
    ``name``; ``issue`` is the NCCL issue order (per rank, launches as lists of op ids) for the grid."""
    marked = {f"{name_ref}@r{ref}", f"{name}@r{rank}"}
    grid = issue_grid({k: ["+".join(x) for x in v] for k, v in issue.items()}, marked)
    return DeadlockError(
        f"collectives on group {list(group)} are issued in a different order: rank {ref} issues "
        f"{name_ref!r} as its collective #{i} but rank {rank} issues {name!r}; real NCCL would hang",
        fix=f"issue the collectives of group {list(group)} in the same order on every rank", detail=grid,
        ops=sorted(marked))


def lazy_init_error(ranks: Sequence[int], users: list[int], missing: list[int],
                    issue: Mapping[int, list[list[str]]]) -> DeadlockError:
    """Rule 6 of :mod:`schedsim.lower.checks`: ``users`` call the communicator of ``ranks``, which a lazily initialised
    process group creates at each rank's first call on it, and ``missing`` never do; ``issue`` as
    :func:`collective_order_error`'s."""
    grid = issue_grid({r: ["+".join(x) for x in launches] for r, launches in issue.items()}, set())

    def show(rs: list[int]) -> str:
        return str(rs) if len(rs) <= 8 else f"[{', '.join(map(str, rs[:6]))}, ..., {rs[-1]}] ({len(rs)} ranks)"

    return DeadlockError(
        f"rank(s) {show(users)} make NCCL calls on the communicator of ranks {show(list(ranks))} (batched "
        "send/recv or collectives on them), which a lazily initialised process group creates at each rank's first "
        f"call on it and which waits for all its ranks; rank(s) {show(missing)} never call it, so the others wait "
        "forever (pytorch/pytorch#74701)",
        fix="initialise the process group eagerly (`nccl_init: eager`: init_process_group(device_id=...)), or have "
            "every rank of the group make a call on it first (e.g. a barrier or all_reduce on all ranks)",
        detail=grid)


def batch_input_error(source: str | None, kind: str, name: str, batch: str | None, rank: int, first: str, pred: str,
                      how: str) -> GraphError:
    """Member ``name`` (a ``kind``) of p2p batch ``batch`` on ``rank``, posted at its first member ``first``, waits for
    ``pred`` (``how``: "follows it on stream 's'" or "is a dependency of it"), written after ``first``."""
    return GraphError(
        f"{source}: {kind} {name!r} is in p2p_batch {batch!r}, which rank {rank} "
        f"posts whole at its first member {first!r}, but it waits for {pred!r} (it {how}), "
        f"written after {first!r}: the batch would be posted before {pred!r} ran",
        fix=f"move {pred!r} above {first!r}, or move {name!r} to another p2p_batch")


def pipeline_grid(order: Mapping[int | str, Sequence[str]], step: int | None) -> str:
    """The rank × step grid of a pipeline's compute ``order`` (actions per rank), ``step`` marked."""
    from schedsim.errors import format_pipeline_order

    return "Pipeline schedule (compute actions per rank):\n" + format_pipeline_order(
        {int(r): acts for r, acts in order.items()}, step)


def word_fault(prog: Program) -> GraphError | None:
    """The error of a failed static check on ``prog``, worded from the array rules' witnesses and chosen in this
    order: a dependency written after its user (when the DAG has no cycle), collectives in different orders, lazy
    communicator creation, a dependency cycle, a cycle of NCCL's wait-for graph (:func:`wait_cycle_error`), then a
    p2p batch's inputs; None when every rule holds.
    """
    from schedsim.lower.checks import (
        batch_input_witness,
        collective_order_witness,
        dag_cycle,
        forward_dep,
        lazy_init_witness,
        no_hang,
    )

    cyc = dag_cycle(prog)
    fwd = forward_dep(prog)
    if fwd is not None and cyc is None:
        user, dep = fwd
        user_name, dep_name = prog.op_names([user, dep])
        return forward_dep_error(prog.templates[int(prog.tmpl[user])].source, user_name, int(prog.rank[user]),
                                 dep_name)
    order = collective_order_witness(prog)
    if order is not None:
        group, ref, rank, i, a, b = order
        name_ref, name = prog.op_names([a, b])
        return _with_pipeline(prog, collective_order_error(group, ref, rank, i, name_ref, name, _issue(prog)))
    lazy = lazy_init_witness(prog)
    if lazy is not None:
        return _with_pipeline(prog, lazy_init_error(*lazy, _issue(prog)))
    if cyc is not None:  # a cycle of the DAG is one of NCCL's wait-for graph too: the hang is this cycle
        nodes, stream = cyc
        ids = prog.ids()
        return cycle_error([ids[x] for x in nodes], stream)
    if not no_hang(prog):
        hang = _hang(prog)
        assert hang is not None
        return _with_pipeline(prog, hang[0], hang[1])
    bad = batch_input_witness(prog)
    if bad is None:
        return None
    first, m, x, is_dep = bad
    tp = prog.templates[int(prog.tmpl[m])]
    how = "is a dependency of it" if is_dep else "follows it on stream " + repr(prog.streams[int(prog.stream_id[m])])
    b = int(prog.batch[m])
    name, first_name, pred = prog.op_names([m, first, x])
    return batch_input_error(tp.source, tp.kind, name, prog.strs[b] if b >= 0 else None, int(prog.rank[m]),
                             first_name, pred, how)


def _issue(prog: Program) -> dict[int, list[list[str]]]:
    """The NCCL issue order of ``prog`` by op id (:func:`schedsim.lower.checks.launches`), for the grids."""
    from schedsim.lower.checks import launches

    ids = prog.ids()
    return {r: [[ids[x] for x in launch] for launch in ls] for r, ls in launches(prog).items()}


def _with_pipeline(prog: Program, e: DeadlockError, rows: Mapping[str, int] | None = None) -> DeadlockError:
    """``e`` with the rank × step grid of ``prog``'s pipeline block after its detail, as the object-based build (the
    test oracle) adds it to a hang: the step of the first pipeline send/recv that ``e``
    names marked (``rows``: the op index of each op id it names; none marked without)."""
    if prog.pipeline is None:
        return e
    order = prog.graph_info()["pipeline"]["order"]
    step = None
    where = rows or {}
    for oid in e.ops:
        i = where.get(oid, -1)
        if i < 0 or prog.templates[int(prog.tmpl[i])].kind not in P2P_KINDS:
            continue
        tags = dict(prog.tagsets[int(prog.tags_id[i])])
        stage, mb = tags.get("stage"), tags.get("mb")
        if stage is None or mb is None:
            continue
        step = next((k for k, act in enumerate(order.get(int(prog.rank[i]), []))
                     if act in (f"{stage}{c}{mb}" for c in "FIBW")), None)
        if step is not None:
            break
    grid = pipeline_grid(order, step)
    return DeadlockError(e.message, fix=e.fix, detail=f"{e.detail}\n\n{grid}" if e.detail else grid, ops=e.ops,
                         cycle=e.cycle)


# Build-time faults, found by :func:`schedsim.lower.link.link` on the expansion's arrays (and by the object-based
# build, the test oracle ``tests/oracle/object_build.py``): op names, dependencies, collective members, send/recv
# pairing.


def duplicate_name_error(source: str, name: str, rank: int, first_source: str) -> GraphError:
    """Op ``name`` (written at ``source``) is the second of that name on ``rank``; the first is at ``first_source``
    (the file for an op without a source; "the pipeline block" for a pipeline op)."""
    return GraphError(f"{source}: op name {name!r} is used twice on rank {rank} (also by {first_source})",
                      fix="rename one of them (pipeline ops are named F<stage>.<mb>.<op>, "
                      "so stage op names must be unique and hand-written ops must not reuse them)")


def unknown_dep_error(source: str | None, name: str, rank: int, dep: str, on_rank: Sequence[str],
                      elsewhere: Sequence[int]) -> GraphError:
    """Op ``name`` on ``rank`` depends on ``dep``, which no op of that rank is named; ``on_rank``: the names of the
    rank's ops in program order (a close one is suggested, :func:`difflib.get_close_matches`), ``elsewhere``: the
    ranks (ascending) that have an op named ``dep``."""
    import difflib

    hint = (f"{dep!r} exists only on rank(s) {list(elsewhere)}; dependencies are per rank, cross-rank order "
            "comes from collectives and send/recv") if elsewhere else "check the spelling"
    if not elsewhere:
        close = difflib.get_close_matches(dep, list(on_rank), n=1)
        if close:
            hint = f"did you mean {close[0]!r}?"
    return GraphError(f"{source}: op {name!r} on rank {rank} depends on {dep!r}, which does not exist on rank {rank}",
                      fix=hint)


def self_dep_error(source: str | None, name: str) -> GraphError:
    """Op ``name`` lists itself among its dependencies."""
    return GraphError(f"{source}: op {name!r} depends on itself", fix="remove it from its deps")


def batch_dep_error(source: str | None, kind: str, name: str, dep: str, batch: str | None, rank: int) -> GraphError:
    """``kind`` ``name`` depends on ``dep``, a member of its own p2p batch ``batch`` on ``rank``."""
    return GraphError(
        f"{source}: {kind} {name!r} depends on {dep!r}, but both are in p2p_batch {batch!r} on rank "
        f"{rank}: one batch is one NCCL group launch (batch_isend_irecv), posted whole, so nothing "
        "inside it runs after another member",
        fix="remove the dependency, or move one of them to another p2p_batch")


def comm_grid(ops: Sequence[tuple[int, str, str | None]], marked: set[str], ranks: Sequence[int] = ()) -> str:
    """The NCCL issue grid (:func:`issue_grid`) of communication ops given as ``(rank, op id,
    p2p batch or None)`` in program order: one launch per op, a batch's members joined in one cell at its first;
    ``ranks`` get a column even when none of ``ops`` is theirs."""
    per_rank: dict[int, list[str]] = {r: [] for r in ranks}
    batch_cell: dict[tuple[int, str], int] = {}
    for rank, oid, batch in ops:
        lst = per_rank.setdefault(rank, [])
        if batch is not None and (rank, batch) in batch_cell:
            lst[batch_cell[(rank, batch)]] += "+" + oid
            continue
        if batch is not None:
            batch_cell[(rank, batch)] = len(lst)
        lst.append(oid)
    return issue_grid(per_rank, marked)


def _a(word: str) -> str:
    """``word`` with its indefinite article ("an all_reduce", "a broadcast")."""
    return ("an " if word[:1] in "aeiou" else "a ") + word


class CollectiveMember(NamedTuple):
    """One rank's entry of a collective, as :func:`collective_mismatch_error` words it."""

    id: str
    rank: int
    kind: str
    nbytes: float
    dtype: str | None
    root: int | None


def collective_mismatch_error(source: str | None, name: str, group: Sequence[int], o: CollectiveMember,
                              first: CollectiveMember, detail: str) -> DeadlockError:
    """Collective ``name`` over ``group``: member ``o`` (written at ``source``) differs in kind, size, dtype or root
    from its first member ``first``; ``detail``: the issue grid of their ranks (:func:`comm_grid`)."""
    return DeadlockError(
        f"{source}: collective {name!r} over group {list(group)} is {_a(o.kind)} of "
        f"{int(o.nbytes)} B ({o.dtype}, root {o.root}) on rank {o.rank} but {_a(first.kind)} of "
        f"{int(first.nbytes)} B ({first.dtype}, root {first.root}) on rank {first.rank}; NCCL would "
        "hang or corrupt data", fix="give every rank's entry the same kind, size, dtype and root",
        ops=[o.id, first.id], detail=detail)


def collective_missing_error(source: str | None, name: str, group: Sequence[int], have: Sequence[int],
                             missing: Sequence[int], first_id: str, detail: str) -> DeadlockError:
    """Collective ``name`` over ``group`` (its first member ``first_id``, written at ``source``) is issued on ranks
    ``have`` (ascending, with repeats) and never on ``missing``; ``detail``: the issue grid (:func:`comm_grid`)."""
    return DeadlockError(
        f"{source}: collective {name!r} over group {list(group)} is issued on rank(s) "
        f"{list(have)} but never on rank(s) {list(missing)}; real NCCL would hang",
        fix=f"issue {name!r} on every rank of its group (or shrink `group`)", ops=[first_id], detail=detail)


def p2p_pairing_error(source: str | None, send: str, recv: str, sizes: tuple[float, float],
                      intent: tuple[str, str] | None, reorder: bool, src: int, dst: int, recvs: Sequence[str],
                      detail: str) -> DeadlockError:
    """Send ``send`` (written at ``source``) is paired by issue order with recv ``recv`` (op ids) while their
    ``intent`` (``("tag 'a'", "tag 'b'")`` or ``("message x", "message y")``) or ``sizes`` (bytes) disagree;
    ``reorder``: a later recv states the send's intent, so the fix is to reorder (always when ``intent``);
    ``recvs``: the names of the recvs on ``dst`` from ``src`` in issue order; ``detail``: :func:`comm_grid`."""
    a_b, b_b = int(sizes[0]), int(sizes[1])
    what = (f"send {send} ({intent[0]}) is paired with recv {recv} ({intent[1]})" if intent else
            f"send {send} ({a_b} B) is paired with recv {recv} ({b_b} B); sizes differ")
    if intent and sizes[0] != sizes[1]:
        what += f", and their sizes differ ({a_b} B vs {b_b} B)"
    fix = (f"issue rank {src}'s sends to rank {dst} in the order rank {dst} posts its recvs from rank "
           f"{src} ({', '.join(recvs)}), or reorder those recvs" if reorder or intent
           else "give the matching send and recv the same size")
    return DeadlockError(
        f"{source}: NCCL pairs the sends and recvs between two ranks in issue order (it has no tags): "
        f"{what}. Real NCCL would fail, hang, or deliver the wrong tensor", fix=fix, detail=detail, ops=[send, recv])


def unmatched_p2p_error(source: str | None, what: str, extra: Sequence[str], src: int, dst: int, sends: int,
                        recvs: int, detail: str) -> DeadlockError:
    """``what`` ("send" or "recv") ops ``extra`` (op ids, the first written at ``source``) have no partner: rank
    ``src`` sends ``sends`` messages to rank ``dst``, which receives ``recvs``; ``detail``: :func:`comm_grid`."""
    return DeadlockError(
        f"{source}: unmatched {what} {', '.join(extra)}: rank {src} sends {sends} "
        f"message(s) to rank {dst} but rank {dst} receives {recvs}; real NCCL would hang",
        fix=f"add the matching {'recv on rank ' + str(dst) if what == 'send' else 'send on rank ' + str(src)}"
        " (sends and recvs between two ranks match in issue order)", detail=detail, ops=list(extra))


__all__ += ["CollectiveMember", "batch_dep_error", "collective_mismatch_error", "collective_missing_error", "comm_grid",
            "duplicate_name_error", "p2p_pairing_error", "self_dep_error", "unknown_dep_error", "unmatched_p2p_error"]


#: How a wait cycle's error begins (:func:`wait_cycle_error`); a "may hang" warning quotes the steps after it
_WAIT_FOREVER = "ranks would wait on each other forever: "


def wait_cycle_error(steps: Sequence[tuple[int, int, str]], units: Mapping[int, Sequence[str]],
                     issue: Mapping[int, list[list[str]]]) -> DeadlockError:
    """A cycle of NCCL's wait-for graph (:func:`schedsim.lower.checks.hang_witness`; ``steps`` ``(a, b, reason)``
    between nodes ``2u`` "unit u posted" and ``2u + 1`` "unit u done"), its waits named one by one, with the issue
    grid (``issue`` as :func:`collective_order_error`'s) and a fix. ``units``: each unit's op ids."""
    steps_text: list[str] = []
    marked: set[str] = set()
    reasons: set[str] = set()
    chain: list[str] = []
    named: list[str] = []  # op ids in the order the message names them

    def name(node: int) -> str:
        return " + ".join(units[node // 2])

    for a, b, reason in steps:
        ua, ub = list(units[a // 2]), list(units[b // 2])
        if a % 2 == 1 and b % 2 == 0:  # done(a) -> posted(b): b is issued after a completes
            reasons.add(reason)
            text = {"same communicator": "NCCL runs one communicator's ops in issue order, whatever the stream",
                    "communicators share ranks": "collectives on communicators that share ranks must keep one "
                    "order (NCCL docs)"}.get(reason, reason)
            steps_text.append(f"{name(b)} cannot start before {name(a)} completes ({text})")
            chain.append(ua[0])
        elif a % 2 == 0 and b % 2 == 1 and a // 2 != b // 2:
            reasons.add(reason)
            partner = {"p2p": "its send/recv partner", "multi-peer batch": "one rendezvous with it: a batch with two "
                       "or more peers, or an op matched with one",
                       "lazy init": "the first call of another rank on the same communicator, which a lazily "
                       "initialised process group creates then, waiting for all its ranks"
                       }.get(reason, "a member of the same collective")
            steps_text.append(f"{name(b)} completes only once {name(a)} is posted ({partner})")
        elif a % 2 == 0 and b % 2 == 0:  # posted(a) -> lazy creation hub -> posted(b) (rule 6)
            reasons.add("lazy init")
            steps_text.append(f"{name(b)} is issued only once {name(a)} is posted (its rank's host waits in the lazy "
                              "creation of a communicator, ncclCommInitRank, until every rank of it calls it)")
        else:
            continue  # posted(a) -> done(a)
        named += [*ub, *ua]
        marked.update(ua + ub)
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
    grid = issue_grid({r: ["+".join(x) for x in launches] for r, launches in issue.items()}, marked)
    return DeadlockError(_WAIT_FOREVER + "; ".join(steps_text), fix=fix, detail=grid,
                         ops=list(dict.fromkeys(named)), cycle=list(dict.fromkeys(chain)))


def eager_hang_warning(hang: DeadlockError) -> str:
    """The "may hang" warning for a schedule of two ranks that hangs only with its lone send/recv on the
    collectives' communicator (an eagerly initialised process group), ``hang`` that cycle's error
    (:func:`wait_cycle_error`)."""
    return _may_hang(
        "with an eagerly initialised process group (init_process_group(device_id=...), as `schedsim execute "
        "--backend nccl` does) torch runs lone send/recv on the collectives' communicator, in issue order with them",
        "issue the send/recv and the collectives in one order on both ranks, or batch the send/recv (`p2p_batch`); "
        "a lazily initialised group (no device_id) gives the pair a communicator of its own", hang)


def multi_peer_hang_warning(hang: DeadlockError) -> str:
    """The "may hang" warning for a schedule that hangs once a batch of send/recv with two or more peers waits for
    all of them (rule 7 of :mod:`schedsim.lower.checks`), ``hang`` that cycle's error (:func:`wait_cycle_error`)."""
    return _may_hang(
        "a batch of send/recv with two or more peers (batch_isend_irecv) is one NCCL kernel, which may serve one "
        "peer's transfer only after another's, so its ops and the ops matched with them complete only once all of "
        "them are posted (pytorch/PiPPy#969)",
        "batch the send/recv per peer (one batch_isend_irecv per peer, as PiPPy PR #1000 does), or post every op "
        "matched with the batch before anything that waits for it", hang)


def _may_hang(why: str, fix: str, hang: DeadlockError) -> str:
    """A "may hang" warning: ``why`` the schedule may hang, then the steps of ``hang``'s wait cycle, and ``fix``."""
    from schedsim.errors import SchedsimError

    steps = hang.message.replace(_WAIT_FOREVER, "", 1)
    return SchedsimError(f"may hang: {why}, and then {steps}", fix=fix, detail=hang.detail).format()


def cross_communicator_warning(keys: Sequence[str], members: Sequence[str], issue: Mapping[int, list[list[str]]]
                               ) -> str:
    """The "may hang" warning for collectives ``keys`` (``name#ranks``, around a cycle of the ranks' issue orders
    that no single order agrees with; :func:`schedsim.lower.checks.cross_communicator_witness`), ``members`` their
    op ids (marked in the grid), ``issue`` as :func:`collective_order_error`'s."""
    from schedsim.errors import SchedsimError

    grid = issue_grid({r: ["+".join(x) for x in v] for r, v in issue.items()}, set(members))
    show = " -> ".join(k.split("#")[0] + "[" + k.split("#")[1] + "]" for k in [*keys, keys[0]])
    return SchedsimError(
        "may hang: the ranks issue these collectives of different communicators in orders that no single order "
        f"agrees with ({show}, each arrow one rank's issue order); NCCL runs this only while every communicator's "
        "kernel stays resident on each GPU, which it does not promise (NCCL docs, 'Using multiple NCCL communicators "
        "concurrently')", fix="issue the collectives in one global order on every rank", detail=grid).format()


def _hang(prog: Program, eager: bool = False, grouped: bool = False) -> tuple[DeadlockError, dict[str, int]] | None:
    """The error of the cycle of ``prog``'s wait-for graph that :func:`schedsim.lower.checks.hang_witness` chooses,
    and the index of each op id it names; None when there is none."""
    from schedsim.lower.checks import hang_witness

    got = hang_witness(prog, eager, grouped)
    if got is None:
        return None
    steps, units = got
    names = prog.op_names([i for k in sorted(units) for i in units[k]])
    ids: dict[int, list[str]] = {}
    at = 0
    for k in sorted(units):
        ids[k] = [f"{names[at + j]}@r{int(prog.rank[i])}" for j, i in enumerate(units[k])]
        at += len(units[k])
    rows = {x: i for k in units for x, i in zip(ids[k], units[k], strict=True)}
    return wait_cycle_error(steps, ids, _issue(prog)), rows


def hang_warnings(prog: Program, cross: bool, eager: bool, multi: bool) -> list[str]:
    """The "may hang" warnings of ``prog`` worded from its arrays, in this order: collectives of different
    communicators in a cyclic order (``cross``), a hang with the lone send/recv on the collectives' communicator
    (``eager``), a hang once a multi-peer batch waits for all its peers (``multi``); each flag says the array checks
    found that case (:func:`schedsim.lower.checks.check_arrays`)."""
    out: list[str] = []
    if cross:
        from schedsim.lower.checks import cross_communicator_witness

        cyc = cross_communicator_witness(prog)
        if cyc is not None:
            keys = [prog.coll_keys[c] for c in cyc]
            ptr, idx = prog.coll_ptr, prog.coll_idx
            rows = [i for c in cyc for i in idx[ptr[c]:ptr[c + 1]].tolist()]
            members = [f"{n}@r{int(prog.rank[i])}" for n, i in zip(prog.op_names(rows), rows, strict=True)]
            out.append(cross_communicator_warning(keys, members, _issue(prog)))
    for flag, warn in ((eager, eager_hang_warning), (multi, multi_peer_hang_warning)):
        if flag:
            hang = _hang(prog, eager=warn is eager_hang_warning, grouped=warn is multi_peer_hang_warning)
            if hang is not None:
                out.append(warn(hang[0]))
    return out


def issue_grid(per_rank: dict[int, list[str]], marked: set[str], *, window: int = 12) -> str:
    """The rank × step grid of NCCL launches (one column per rank), ops in ``marked`` flagged ``*``.

    Rows are issue steps (launch index on that rank); only a window of about ``window`` rows around the
    marked ops is printed. Op ids lose their ``@rN`` suffix (the column says the rank).
    """
    ranks = sorted(per_rank)
    if not ranks:
        return ""
    rows = max(len(v) for v in per_rank.values())
    hit = [i for r in ranks for i, x in enumerate(per_rank[r]) if any(p in marked for p in x.split("+"))]
    lo = max(0, min(hit, default=0) - 2)
    hi = min(rows, max(max(hit, default=0) + 3, lo + min(window, rows)))

    def cell(x: str) -> str:
        names = "+".join(p.rsplit("@r", 1)[0] for p in x.split("+"))
        return ("*" if any(p in marked for p in x.split("+")) else " ") + names

    cols = {r: [cell(x) for x in per_rank[r][lo:hi]] for r in ranks}
    width = {r: max([len(f"Rank {r}"), *map(len, cols[r])]) + 2 for r in ranks}
    lines = ["          " + "".join(f"{f'Rank {r}':<{width[r]}}" for r in ranks)]
    for i in range(hi - lo):
        lines.append(f"Step {lo + i:03d}: " + "".join(
            f"{(cols[r][i] if i < len(cols[r]) else ''):<{width[r]}}" for r in ranks).rstrip())
    if lo > 0 or hi < rows:
        lines.append(f"(steps {lo}..{hi - 1} of {rows}; * = the ops that block)")
    else:
        lines.append("(* = the ops that block)")
    return "NCCL issue order (communication launches per rank; batches joined by +):\n" + "\n".join(lines)
