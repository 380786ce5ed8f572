"""The errors of the static checks, worded from what a rule found (plain values: op names, ranks, ids).

One wording per rule, used by the array rules (:func:`word_fault`, from the witnesses of
:mod:`schedsim.lower.checks`) and by the object-based build (:mod:`schedsim.lower.reference`,
:mod:`schedsim.graph.checks`), so both raise the same text. Rule families worded here: a dependency written
after its user, a dependency cycle, collectives of one group in different orders, lazy communicator creation
(rule 6 of :mod:`schedsim.graph.nccl`), a p2p batch's inputs. NCCL wait-for cycles that are not dependency
cycles are still worded by the object-based build (:func:`schedsim.lower.check_program`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from schedsim.errors import CycleError, DeadlockError, GraphError

if TYPE_CHECKING:
    from schedsim.lower.program import Program

__all__ = ["batch_input_error", "collective_order_error", "cycle_error", "forward_dep_error", "lazy_init_error",
           "pipeline_grid", "word_fault"]


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
    from schedsim.graph.nccl import issue_grid

    marked = {f"{name_ref}@r{ref}", f"{name}@r{rank}"}
    grid = issue_grid({k: ["+".join(x) for x in v] for k, v in issue.items()}, marked)
    return DeadlockError(
        f"collectives on group {list(group)} are issued in a different order: rank {ref} issues "
        f"{name_ref!r} as its collective #{i} but rank {rank} issues {name!r}; real NCCL would hang",
        fix=f"issue the collectives of group {list(group)} in the same order on every rank", detail=grid,
        ops=sorted(marked))


def lazy_init_error(ranks: Sequence[int], users: list[int], missing: list[int],
                    issue: Mapping[int, list[list[str]]]) -> DeadlockError:
    """Rule 6 of :mod:`schedsim.graph.nccl`: ``users`` call the communicator of ``ranks``, which a lazily initialised
    process group creates at each rank's first call on it, and ``missing`` never do; ``issue`` as
    :func:`collective_order_error`'s."""
    from schedsim.graph.nccl import issue_grid

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
    """The error of a failed static check on ``prog``, worded from the array rules' witnesses and chosen in the
    object-based build's order (:func:`schedsim.lower.reference.graph_from_ops`): a dependency written after its
    user (when the DAG has no cycle), collectives in different orders, lazy communicator creation, a dependency
    cycle, then (when NCCL's wait-for graph has no cycle) a p2p batch's inputs. None when the first failing rule
    is an NCCL wait-for cycle, which the object-based build still words.
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
        return None
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


def _with_pipeline(prog: Program, e: DeadlockError) -> DeadlockError:
    """``e`` with the rank × step grid of ``prog``'s pipeline block after its detail, as the object-based build adds
    it to a hang of :func:`schedsim.graph.checks.check_graph` (no step marked: ``e`` names no send/recv)."""
    if prog.pipeline is None:
        return e
    grid = pipeline_grid(prog.graph_info()["pipeline"]["order"], None)
    return DeadlockError(e.message, fix=e.fix, detail=f"{e.detail}\n\n{grid}" if e.detail else grid, ops=e.ops,
                         cycle=e.cycle)
