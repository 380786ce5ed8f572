"""CUDA graphs beside eager ops (an op's ``graph:`` key; vllm-project/vllm#2770: a captured graph between eager
NCCL calls): which ops of a :class:`~schedsim.lower.program.Program` form one graph launch
(:func:`graph_segments`), and what a graph launch can hold (:func:`check_graph_segments`).

A *segment* is a maximal run of consecutive ops of one rank (program order) with the same ``graph`` name: one
``cudaGraphLaunch`` on the host (rule host-issue, :func:`schedsim.gpu.host.host_issue_columns`). A name that
comes back later on the rank is the same graph launched again. The segment is captured on the stream of its
first op (the capture stream); ops on other streams fork from it and must join it again before the capture ends
(``cudaStreamEndCapture`` fails with ``cudaErrorStreamCaptureUnjoined`` otherwise: CUDA Runtime API, "Stream
Capture"), so each of them must be waited for, through ``deps`` and stream order inside the segment, by the
segment's last op on the capture stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from schedsim.errors import SpecError

if TYPE_CHECKING:
    from schedsim.lower.program import Program

__all__ = ["graph_segments", "check_graph_segments", "graph_fork_edges"]


def _graph_of_template(prog: Program) -> np.ndarray | None:
    """Per template, the code of its ``graph`` name (-1: eager); None when no template names a graph."""
    names = [t.graph for t in prog.templates]
    if not any(names):
        return None
    codes: dict[str, int] = {}
    return np.array([-1 if g is None else codes.setdefault(g, len(codes)) for g in names], np.int64)


def graph_segments(prog: Program) -> np.ndarray | None:
    """Per op (shape (N,), int64), the id of the graph launch it belongs to (ids ascending in the Program's
    order, -1: launched eagerly); None when no op names a graph. Ops of one launch are consecutive (a Program
    holds each rank's ops in program order, ranks ascending)."""
    tg = _graph_of_template(prog)
    if tg is None or not prog.N:
        return None
    g = tg[prog.tmpl]
    rank = prog.rank
    new = np.ones(len(g), bool)
    new[1:] = (g[1:] != g[:-1]) | (rank[1:] != rank[:-1])
    seg = np.cumsum(new) - 1
    return np.where(g >= 0, seg, -1).astype(np.int64)


def check_graph_segments(prog: Program) -> None:
    """Refuse what a graph launch cannot hold.

    Raises
    ------
    SpecError
        An op with ``graph`` in a schedule with ``launch: cuda_graph``; with ``host_us`` (a replay runs no
        Python); a ``p2p_batch`` partly in a graph; a segment whose op on another stream than the capture
        stream is not joined back (module docstring). The message names the op (``name@rank``), the field and a fix.
    """
    seg = graph_segments(prog)
    if seg is None:
        return
    member = np.flatnonzero(seg >= 0)
    first = int(member[0])
    if prog.launch == "cuda_graph":
        o = prog.templates[int(prog.tmpl[first])]
        raise SpecError(f"op {prog.op_id(first)} sets graph: {o.graph!r}, but the schedule has launch: cuda_graph "
                        "(the whole iteration is one graph already)", file=prog.file, path="graph",
                        fix="remove `graph:` from the ops, or set launch: eager to capture only those ops")
    hs = np.array([t.host_s for t in prog.templates])[prog.tmpl[member]]
    if bool((hs > 0).any()):
        i = int(member[int(np.flatnonzero(hs > 0)[0])])
        o = prog.templates[int(prog.tmpl[i])]
        raise SpecError(f"op {prog.op_id(i)} in graph {o.graph!r} sets host_us: a graph replay runs no Python "
                        "between its ops", file=prog.file, path="host_us",
                        fix="remove host_us from the op, or give it to the first eager op after the graph")
    _check_batches(prog, seg)
    _check_joined(prog, seg, member)


def _check_batches(prog: Program, seg: np.ndarray) -> None:
    """A ``p2p_batch`` (one ``batch_isend_irecv`` call) lies wholly inside one graph launch or wholly outside."""
    b = np.flatnonzero(prog.batch >= 0)
    if not len(b):
        return
    where: dict[tuple[int, int], int] = {}
    for i, key in zip(b.tolist(), zip(prog.rank[b].tolist(), prog.batch[b].tolist(), strict=True), strict=True):
        s = int(seg[i])
        if where.setdefault(key, s) != s:
            raise SpecError(f"op {prog.op_id(i)} is in p2p_batch {prog.strs[key[1]]!r} with ops "
                            + ("outside its graph" if s >= 0 else "of a graph") + ": one batch_isend_irecv call "
                            "is either captured or launched eagerly", file=prog.file, path="graph",
                            fix="give every op of the batch the same `graph:`, or none")


def _check_joined(prog: Program, seg: np.ndarray, member: np.ndarray) -> None:
    """Every op of a segment on a side stream reaches the segment's last op on its capture stream (module
    docstring), through dependencies and stream order inside the segment."""
    sid = prog.stream_id
    ptr, idx = prog.dep_ptr, prog.dep_idx
    cut = np.flatnonzero(np.diff(seg[member]) != 0) + 1
    for run in np.split(member, cut):
        ops = run.tolist()
        cap = int(sid[ops[0]])
        if bool((sid[run] == cap).all()):
            continue
        inside = set(ops)
        last_on: dict[int, int] = {}
        prev: dict[int, int] = {}  # op -> the previous op of its stream in the segment
        for i in ops:
            s = int(sid[i])
            if s in last_on:
                prev[i] = last_on[s]
            last_on[s] = i
        end = last_on[cap]
        seen = {end}
        todo = [end]
        while todo:
            i = todo.pop()
            nxt = [int(d) for d in idx[int(ptr[i]):int(ptr[i + 1])].tolist() if int(d) in inside]
            if i in prev:
                nxt.append(prev[i])
            for d in nxt:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        for i in ops:
            if i not in seen and int(sid[i]) != cap:
                o = prog.templates[int(prog.tmpl[i])]
                raise SpecError(
                    f"op {prog.op_id(i)} of graph {o.graph!r} runs on stream {prog.streams[int(sid[i])]!r}, which "
                    f"the graph forks from its capture stream {prog.streams[cap]!r} (the stream of its first op) "
                    f"but never joins again: the capture would fail (cudaErrorStreamCaptureUnjoined)",
                    file=prog.file, path="graph",
                    fix=f"make a later op of the graph on stream {prog.streams[cap]!r} wait for it "
                    f"(deps: [{prog.names[int(prog.name_id[i])]}]), or take it "
                    "out of the graph")


def graph_fork_edges(prog: Program) -> np.ndarray:
    """The waits a graph launch adds on the GPU: ``(E, 2)`` int64 pairs ``(a, b)``, op ``b`` after op ``a``.

    A graph is launched on its capture stream (module docstring), so every node of it, those captured from a
    forked stream included, runs after the work issued on that stream before the launch (CUDA Programming
    Guide, "CUDA Graphs": a launch is ordered in its stream like a kernel); and ``execute`` keeps the other
    streams' order around the launch (``executor/runtime.py``, ``CudaSegmentRunner._issue_step``: the capture
    stream waits for each other stream before the replay, and each other stream waits for the capture stream
    after it). Per segment with ops on other streams (same rank): an edge from the op before the segment on the
    capture stream to the segment's first op on each other stream; from the op before the segment on each other
    stream to the segment's first op; and from the segment's last op on the capture stream (which every op of the
    segment reaches: :func:`check_graph_segments`) to the first op after the segment on each other stream. Empty
    (shape (0, 2)) without such segments."""
    seg = graph_segments(prog)
    out: list[tuple[int, int]] = []
    if seg is not None:
        sid = prog.stream_id
        member = np.flatnonzero(seg >= 0)
        cut = np.flatnonzero(np.diff(seg[member]) != 0) + 1
        on_stream: dict[tuple[int, int], np.ndarray] = {}  # (rank, stream) -> its ops, ascending

        def ops_on(rank: int, stream: int) -> np.ndarray:
            key = (rank, stream)
            if key not in on_stream:
                on_stream[key] = np.flatnonzero((prog.rank == rank) & (sid == stream))
            return on_stream[key]

        for run in np.split(member, cut):
            head, last = int(run[0]), int(run[-1])
            cap = int(sid[head])
            sides = sid[run] != cap
            if not bool(sides.any()):
                continue
            rank = int(prog.rank[head])
            ops = ops_on(rank, cap)
            k = int(np.searchsorted(ops, head))
            end = int(ops[int(np.searchsorted(ops, last, side="right")) - 1])  # the segment's last op on cap
            firsts: dict[int, int] = {}
            for i in run[sides].tolist():
                firsts.setdefault(int(sid[i]), i)
            if k > 0:
                out += [(int(ops[k - 1]), i) for i in firsts.values()]
            for s in firsts:
                other = ops_on(rank, s)
                j = int(np.searchsorted(other, head))
                if j > 0:
                    out.append((int(other[j - 1]), head))
                j = int(np.searchsorted(other, last, side="right"))
                if j < len(other):
                    out.append((end, int(other[j])))
    return np.array(out, np.int64).reshape(-1, 2)
