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

    A segment is one launch on its capture stream (module docstring): every node of it, those captured from a
    forked stream included, runs after the work issued on that stream before the launch (CUDA Programming Guide,
    "CUDA Graphs": a launch is ordered in its stream like a kernel), and what waits for a node outside the graph
    waits for the launch's end. ``execute`` replays it so (``executor/runtime.py``,
    ``CudaSegmentRunner._issue_step``): the capture stream waits, before the replay, for the outside dependencies
    of every op of the segment and for each other stream of the segment; after it, each other stream waits for
    the capture stream, and every op's dependency event is recorded there. So, per segment (same rank), with its
    end the last op on its capture stream (which every op of it reaches: :func:`check_graph_segments`), and a
    predecessor in another segment standing for that segment's end: an edge to the segment's first op on each of
    its streams from each outside dependency of its ops and from the op before it on each of its streams; from
    its end to the first op after it on each of its other streams; and from its end to each op outside it that
    depends on one of its ops. Empty (shape (0, 2)) without a segment."""
    launch = graph_segments(prog)
    if launch is None:
        return np.zeros((0, 2), np.int64)
    sid = prog.stream_id
    member = np.flatnonzero(launch >= 0)
    cut = np.flatnonzero(np.diff(launch[member]) != 0) + 1
    runs = np.split(member, cut)
    seg = np.full(prog.N, -1, np.int64)  # per op its segment's index in runs (-1: eager)
    first = np.zeros(len(member), np.int64)
    first[cut] = 1
    seg[member] = np.cumsum(first)
    heads = np.array([int(r[0]) for r in runs], np.int64)
    cap_of = sid[heads]
    on_cap = member[sid[member] == cap_of[seg[member]]]
    end_of = np.full(len(runs), -1, np.int64)
    np.maximum.at(end_of, seg[on_cap], on_cap)  # the last op of each segment on its capture stream

    def stand(a: np.ndarray) -> np.ndarray:  # an op in a segment stands for that segment's end
        return np.where(seg[a] >= 0, end_of[np.maximum(seg[a], 0)], a)

    ptr, idx = prog.dep_ptr.astype(np.int64), prog.dep_idx.astype(np.int64)
    dst = np.repeat(np.arange(prog.N, dtype=np.int64), np.diff(ptr))
    outside = seg[idx] != seg[dst]
    into = outside & (seg[dst] >= 0)  # an op of a segment depends on an op outside it
    out_of = outside & (seg[idx] >= 0)  # an op depends on an op of a segment it is not in
    edges = [np.stack([stand(idx[into]), heads[seg[dst[into]]]], 1),
             np.stack([end_of[seg[idx[out_of]]], dst[out_of]], 1)]
    extra: list[tuple[int, int]] = []
    on_stream: dict[tuple[int, int], np.ndarray] = {}  # (rank, stream) -> its ops, ascending

    def ops_on(rank: int, stream: int) -> np.ndarray:
        key = (rank, stream)
        if key not in on_stream:
            on_stream[key] = np.flatnonzero((prog.rank == rank) & (sid == stream))
        return on_stream[key]

    for k, run in enumerate(runs):
        cap = int(cap_of[k])
        sides = sid[run] != cap
        if not bool(sides.any()):
            continue
        head, last, rank = int(run[0]), int(run[-1]), int(prog.rank[run[0]])
        firsts = {cap: head}
        for i in run[sides].tolist():
            firsts.setdefault(int(sid[i]), i)
        pre = [(int(d), -1) for i in run.tolist() for d in idx[int(ptr[i]):int(ptr[i + 1])].tolist() if seg[d] != k]
        for s in firsts:
            other = ops_on(rank, s)
            j = int(np.searchsorted(other, head))
            if j > 0:  # the op before the segment on stream s: its first op on s follows it already
                pre.append((int(other[j - 1]), s))
            j = int(np.searchsorted(other, last, side="right"))
            if s != cap and j < len(other):
                extra.append((int(end_of[k]), int(other[j])))
        if pre:
            src = stand(np.array([a for a, _s in pre], np.int64)).tolist()
            extra += [(a, f) for a, (_a, s) in zip(src, pre, strict=True) for t, f in firsts.items() if t != s]
    edges.append(np.array(extra, np.int64).reshape(-1, 2))
    out = np.concatenate(edges)
    return np.unique(out, axis=0) if len(out) else out.reshape(-1, 2)
