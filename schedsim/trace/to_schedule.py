"""An imported trace as a schedule: ``schedsim import kineto|nsys FILES --out DIR`` writes ``DIR/schedule.yaml``.

The schedule replays the run: it declares ``durations: recorded``, so ``schedsim predict DIR/schedule.yaml`` (or
``schedsim replay DIR/schedule.yaml``) runs every op for its recorded duration, issued at its recorded launch
time, ordered as the CUDA runtime ordered it (:mod:`schedsim.sim.engine`, ``replay`` model);
``predict --durations modeled`` (or ``--gpu-model waves``) predicts the same ops with the profile's model.

What each op holds
------------------
One op per GPU activity (kernel, memcpy, memset), on its rank (``ranks: [r]``) and stream (``s<id>``), in
*launch order* (the host order of the runtime calls that launched them: Kineto's ``cuda_runtime`` rows joined
by ``correlation`` id; without them, GPU start order), named ``k<n>`` (kernel), ``cp<n>`` (memcpy), ``ms<n>``
(memset) or ``nccl<n>`` / ``<collective>_<pg>_<seq>`` (NCCL), ``n`` the op's position on its rank:

* ``duration_us``: the recorded duration (end − start, exact ns). Kernels and memsets are ``compute`` ops,
  copies ``memcpy`` ops with their ``direction`` and ``bytes``;
* NCCL kernels: when every rank of the collective's process group is imported, one ``all_reduce`` (...) entry
  per rank with ``group``, ``bytes`` (``In/Out msg nelems`` × dtype) and ``duration_us`` the *shortest*
  rank's (the last rank to arrive runs the transfer alone; the others' kernels also spin waiting for it);
  matched across ranks by (process group, collective, sequence number on that group). Otherwise (one rank of a
  multi-rank run, send/recv) a ``compute`` op with the recorded duration, tagged ``nccl: <kind>`` and
  ``peers: absent``: its peers' timing is inside the recorded duration;
* ``host_us``: the host time between this op's issue and the previous one's on the rank (the first op's: from
  the earliest issue of any rank), where an op's issue is min(its launch call's return, its GPU start) (a
  blocking ``cudaMemcpy``: its call's start, the call then waits for it). The
  ``replay`` model issues ops at the prefix sums of ``host_us`` only, so replay issue times are the recorded
  ones and a host-bound run replays host-bound;
* ``tags``: the kernel name (or NCCL kind, process group and sequence number), the recorded ``start_us`` /
  ``end_us`` (µs from the earliest issue), which :mod:`schedsim.trace.replay` holds the replay against, and
  ``trace_id``, the id of the op's span in the imported ``timeline.json``, by which ``schedsim compare`` of the
  replay against that timeline matches ops (none for kernels folded into ``--ops`` ranges or outside the kept
  ``--iteration``);
* ``deps`` (same rank, another stream; stream order is implicit):

  - event record → wait: Kineto ``cuda_sync`` "Stream Wait Event" rows name the waiting stream, the recording
    stream and the correlation of the ``cudaEventRecord``: the first op launched on the waiting stream after
    the ``cudaStreamWaitEvent`` waits for the last op launched on the recording stream before the record;
  - without ``cuda_sync`` rows but with ``cudaEventRecord`` / ``cudaStreamWaitEvent`` runtime rows (which carry
    no stream): the wait pairs with the latest record of its host thread before it; the first op launched
    after the wait waits for the last op launched before the record on another stream (guessed), unless it
    started more than :data:`WAIT_SLACK_NS` before that op ended (the trace shows it did not wait for it);
  - host synchronisations (``cudaDeviceSynchronize``: every stream's last op launched before it;
    ``cudaStreamSynchronize`` / ``cudaEventSynchronize``, whose stream the trace does not give: the op that
    ended last before the call returned; a blocking ``cudaMemcpy``: its copy): the first op launched after the
    call waits for them, and so does the host: that op's tag ``host_wait_before_us`` is the host time before the
    call and its ``host_us`` the time after the synchronised work ended, so a what-if that makes the GPU faster
    makes the host's wait shorter;
  - with no event rows at all (nsys, or a trace without them): an op that started more than
    :data:`GAP_NS` after both its issue and its stream predecessor's end, within :data:`GAP_NS` of the end of
    an op of another stream launched before it, waits for that op (guessed from timing).

Every guess is listed in a comment at the top of ``schedule.yaml`` and printed once on stderr; so are the
collectives of a multi-rank import that lack members (a rank of their process group not imported, or imported
without that kernel): each imported member keeps its own recorded duration, with no rendezvous.

Contradictions are errors (:class:`~schedsim.errors.TraceError`, exit 2, naming both ranks' files): a process
group with two member lists, members of one collective (same process group, kind and sequence number) moving
different sizes (all_to_all excepted; a kernel without the size args compared with nothing), or two ranks whose
collectives on one process group come in different orders (compared where they have as many).

Large traces: ``schedule.yaml`` holds the header and ``ops_file: schedule.ops.json``, a sibling JSON list of
the ops, one a line, which the loader appends to the written ops (:func:`schedsim.spec.loader._ops_file`):
JSON parses in C, where YAML costs about 0.5 ms an op and refuses documents of more than 2,000,000 nodes
(~100k ops of ~20 nodes). No ``foreach``: a trace repeats layers with different recorded durations, so a
loop would need one list parameter per field and gives nothing back.

CUDA-graph launches (``cudaGraphLaunch``): the language's ``launch: cuda_graph`` is one graph per rank and
iteration, with modeled node costs, so an import keeps ``launch: eager`` and marks the graphs on the ops instead:
each op a graph launch ran carries ``graph: K`` (the rank's K-th launch), all of a launch's ops are issued at
one instant (the launch call's return, or its first node's start if earlier; ``host_us`` 0 after the first),
and waits between a graph's streams, which leave no runtime rows, are guessed from timing as above.

The GPU's own launch latency (a graph's nodes ~0.4-0.6 µs apart, eager kernels of a busy stream ~1-2 µs, a few
µs from a launch call's return to its kernel; one H100) is each op's tag ``gpu_gap_us``: its recorded start less
the time it was ready (the later of its issue and its predecessors' end), up to :data:`LAUNCH_GAP_MAX_NS` (a
longer delay is a hold the trace does not name, and is not replayed). The ``replay`` model starts an op that
long after it is ready (:data:`schedsim.sim.replay.GPU_GAP_TAG`); a what-if keeps the gaps (the GPU's, not the
host's), and a what-if that changes which of issue and predecessor holds an op keeps the gap of the one that did.

The critical path of the recorded run (:func:`recorded_path`, written into the imported ``timeline.json`` by
``schedsim import``, so ``schedsim analyze DIR/timeline.json`` prints it as ``predict`` prints a prediction's): on the
recorded times and the dependencies above, each op was *ready* at the latest of its issue, its stream
predecessor's end and its waits' ends, and is bound to whichever came last (its host where the issue did; its
stream predecessor or the op it waited for on a tie); a collective matched across ranks is bound to its member
that was ready last (the others waited for that peer). From the op that ended last the walk goes back along the
bindings (:func:`schedsim.sim.engine.critical_walk`, the replay's own walk); at an op its host launched after a
host synchronisation in which the host waited for the GPU (the synchronised work ended after the call began),
it goes on from the op the host waited for, so host, GPU and communication segments alternate as in HTA's
critical path (Holistic Trace Analysis, ``critical_path_analysis.py``: kernel launch delays, kernel-to-kernel
and sync dependencies). Each op's ``ready_s`` is that time (at most its start) and its host call's end its issue,
so the path's segments (:func:`schedsim.sim.metrics.critical_path_segments`) are host issue (cut into the host's
launch calls), the time from ready to start (the GPU's launch delay or its queue), compute, communication and
copies, summing to the makespan. Where an op of the path has no span of its own (folded into an ``--ops`` range,
or outside the kept ``--iteration``) the timeline keeps its last-finishing chain.

Not done: host waits for the GPU as such (a synchronisation's wait is part of the next op's ``host_us``, so on a
host-bound run a GPU what-if moves nothing unless the host gaps go: the language has no host-blocking op).
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from schedsim.errors import TraceError, printable
from schedsim.kinds import COLLECTIVE_KINDS, PER_RANK_SIZE
from schedsim.sim.replay import GPU_GAP_TAG, HOST_WAIT_TAG
from schedsim.trace.common import (
    Activity,
    ReplayInput,
    RuntimeRow,
    check_collective_clocks,
    collective_kind,
    is_nccl_kernel,
)

__all__ = ["GAP_NS", "GRAPH_TAG", "LAUNCH_GAP_MAX_NS", "OPS_FILE", "TRACE_ID_TAG", "RecordedPath", "ReplaySchedule",
           "apply_recorded_path", "build_replay_schedule", "recorded_path", "write_replay_schedule",
           "write_schedule_files"]

#: Tag of a replay op: the id of the span it replays in the imported ``timeline.json`` (``{kernel}#{n}@r{rank}``),
#: by which ``schedsim compare`` matches the replay's ops with the trace's (:func:`schedsim.compare.as_trace_ids`).
TRACE_ID_TAG = "trace_id"

#: Tag of a replay op launched by a CUDA-graph launch: the rank's ordinal of that launch (0, 1, ...).
GRAPH_TAG = "graph"

#: The ops of a replay schedule, beside ``schedule.yaml`` (its ``ops_file:``).
OPS_FILE = "schedule.ops.json"

#: Slack (ns) of the timing guess: an op starting this much after its issue and stream predecessor is held by
#: something else; an op of another stream that ended within it before is taken for the holder.
GAP_NS = 2000.0
#: Clock slack (ns) before a guessed event wait counts as contradicted by the trace: the op that would wait started
#: this much before the op it would wait for ended (Kineto prints times in µs with three decimals).
WAIT_SLACK_NS = 1000.0

#: The longest launch latency (ns) kept as an op's ``gpu_gap_us``: a CUDA graph's first node started 4.8-11 µs
#: after its ``cudaGraphLaunch`` returned, eager kernels 1-3 µs after their stream predecessor or launch call,
#: graph nodes 0.4-0.9 µs after the node before (one H100: docs/validation.md, issue 37's replay section;
#: ``benchmarks/accuracy/trace_replay.py --capture``). A longer delay is a hold the trace does not name (a copy
#: that started 45-137 µs after its issue beside a GEMM, ``tests/data/kineto_whatif_*``): not latency, and not
#: replayed.
LAUNCH_GAP_MAX_NS = 12000.0

_LAUNCH = ("Launch", "Memcpy", "Memset")
_GRAPH_LAUNCH = ("cudaGraphLaunch", "cuGraphLaunch")
_SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"}
_PG_SAFE = re.compile(r"[^A-Za-z0-9_]")


class ReplaySchedule(NamedTuple):
    """The schedule text and what it rests on.

    Attributes
    ----------
    text : str
        ``schedule.yaml``: header comment, top-level keys and ``ops_file: schedule.ops.json``.
    ops_json : str
        ``schedule.ops.json``: the ops, a JSON list, one op a line.
    guesses : list[str]
        Dependencies or times that were guessed, one line each (also in the file's header comment).
    notes : list[str]
        How collectives were handled (recorded duration with absent peers, matched across ranks).
    n_ops, n_deps : int
        Ops and inferred cross-stream dependencies written.
    path : RecordedPath or None
        The recorded run's critical path (:func:`recorded_path`); None where an op of it has no span.
    """

    text: str
    ops_json: str
    guesses: list[str]
    notes: list[str]
    n_ops: int
    n_deps: int
    path: RecordedPath | None = None


class RecordedPath(NamedTuple):
    """The critical path of a recorded run (:func:`recorded_path`), by span id of the imported timeline.

    Attributes
    ----------
    ops : list[str]
        Span ids in path order.
    host_waits : list[str]
        Those of ``ops`` that their host launched after waiting in a host synchronisation for the op before them.
    ids : list[str]
        Every op that has a span, by span id;
    ready_ns, issue_ns : list[float]
        its ready time (at most its start) and its issue (ns, the importer's time base), aligned with ``ids``.
    """

    ops: list[str]
    host_waits: list[str]
    ids: list[str]
    ready_ns: list[float]
    issue_ns: list[float]


class _RankOps(NamedTuple):
    acts: list[Activity]      # in launch order
    issue: list[float]        # ns
    launch: list[float]       # call start, ns (GPU start where guessed)
    corr: list[Any]           # correlation id of each (None: none)
    ids: list[str | None]     # its span id in the imported timeline (None: none)
    graph: list[int | None]   # the rank's ordinal of the CUDA-graph launch that ran it (None: launched alone)


def _launch_rows(rep: ReplayInput) -> dict[tuple[int, Any], RuntimeRow]:
    prefixes = tuple(f"{p}{x}" for p in ("cuda", "cu") for x in _LAUNCH)
    return {(r.rank, r.corr): r for r in rep.runtime
            if r.corr is not None and r.name.startswith(prefixes + _GRAPH_LAUNCH)}


def _order(rep: ReplayInput, guesses: list[str]) -> dict[int, _RankOps]:
    """Each rank's activities in launch order, with issue and launch times (ns)."""
    rows = _launch_rows(rep)
    by_rank: dict[int, list[tuple[float, float, float, Activity, Any, str | None]]] = defaultdict(list)
    unmatched: dict[int, int] = defaultdict(int)
    sids = rep.span_ids if rep.span_ids and len(rep.span_ids) == len(rep.acts) else [None] * len(rep.acts)
    first: dict[tuple[int, Any], float] = {}  # a graph launch's first node start: the graph is issued at once
    for a, c in zip(rep.acts, rep.corr, strict=True):
        row = rows.get((a.rank, c)) if c is not None else None
        if row is not None and row.name.startswith(_GRAPH_LAUNCH):
            first[(a.rank, c)] = min(first.get((a.rank, c), a.start_ns), a.start_ns)
    for a, c, sid in zip(rep.acts, rep.corr, sids, strict=True):
        row = rows.get((a.rank, c)) if c is not None else None
        if row is None:
            unmatched[a.rank] += 1
            by_rank[a.rank].append((a.start_ns, a.start_ns, a.start_ns, a, None, sid))
        else:
            # a blocking copy is enqueued at its call's start, and the call then waits for it (and the stream);
            # every node of a graph launch at the launch (its return, or its first node's start if earlier)
            issued = (row.ts_ns if _blocking_copy(row.name) else
                      min(row.ts_ns + row.dur_ns, first.get((a.rank, c), a.start_ns)))
            by_rank[a.rank].append((row.ts_ns, issued, a.start_ns, a, c, sid))
    out = {}
    for r, lst in sorted(by_rank.items()):
        lst.sort(key=lambda x: (x[0], x[2]))
        issue = [x[1] for x in lst]
        for i in range(1, len(issue)):  # host order: never issued before the op ahead
            issue[i] = max(issue[i], issue[i - 1])
        graph: list[int | None] = []
        ordinal: dict[Any, int] = {}
        for x in lst:
            g = (r, x[4]) in first
            graph.append(ordinal.setdefault(x[4], len(ordinal)) if g else None)
        out[r] = _RankOps([x[3] for x in lst], issue, [x[0] for x in lst], [x[4] for x in lst],
                          [x[5] for x in lst], graph)
        if unmatched[r]:
            what = "all" if unmatched[r] == len(lst) else f"{unmatched[r]} of {len(lst)}"
            guesses.append(f"rank {r}: {what} GPU ops have no launch call in the trace (no cuda_runtime row of "
                           "their correlation id): their launch order and issue time are their GPU start")
    return out


def _blocking_copy(name: str) -> bool:
    """A ``cudaMemcpy``/``cudaMemset`` without ``Async``: the host returns when the copy is done."""
    return name.startswith(("cudaMemcpy", "cudaMemset")) and "Async" not in name


def _stream_index(ro: _RankOps) -> dict[str, list[int]]:
    idx: dict[str, list[int]] = defaultdict(list)
    for i, a in enumerate(ro.acts):
        idx[a.stream].append(i)
    return idx


def _last_before(positions: list[int], launch: list[float], t: float) -> int | None:
    """The last op (index into the rank's list) of ``positions`` (ascending) launched before ``t``."""
    lo, hi = 0, len(positions)
    while lo < hi:  # bisect over launch[positions[k]] without building the list (ops launch in order)
        mid = (lo + hi) // 2
        if launch[positions[mid]] < t:
            lo = mid + 1
        else:
            hi = mid
    return positions[lo - 1] if lo > 0 else None


def _first_after(launch: list[float], t: float, stream: str | None, acts: list[Activity]) -> int | None:
    k = bisect.bisect_right(launch, t)
    while k < len(launch):
        if stream is None or acts[k].stream == stream:
            return k
        k += 1
    return None


def _event_deps(r: int, ro: _RankOps, rep: ReplayInput, deps: dict[int, set[int]], guesses: list[str],
                gates: dict[int, float]) -> bool:
    """Event record → wait and host-sync dependencies of rank ``r`` from its runtime and sync rows. Returns
    whether the rank had any event rows (else the timing guess runs)."""
    rt = sorted((x for x in rep.runtime if x.rank == r), key=lambda x: x.ts_ns)
    by_corr = {x.corr: x for x in rt if x.corr is not None}
    streams = _stream_index(ro)
    launch = ro.launch
    syncs = [s for s in rep.syncs if s.rank == r and s.name == "Stream Wait Event" and s.wait_stream is not None]
    had = bool(syncs)
    for s in syncs:
        rec = by_corr.get(s.record_corr)
        wait = by_corr.get(s.corr)
        prod_pos = streams.get(s.wait_stream or "")
        if rec is None or not prod_pos:
            continue
        p = _last_before(prod_pos, launch, rec.ts_ns)
        c = _first_after(launch, wait.ts_ns if wait is not None else s.ts_ns, s.stream, ro.acts)
        if p is not None and c is not None and ro.acts[p].stream != ro.acts[c].stream:
            deps[c].add(p)
    if not syncs:
        recs: dict[Any, list[float]] = defaultdict(list)
        n_guess = n_false = 0
        for x in rt:
            if x.name.startswith("cudaEventRecord"):
                recs[x.thread].append(x.ts_ns)
            elif x.name == "cudaStreamWaitEvent":
                had = True
                before = recs.get(x.thread)
                c = _first_after(launch, x.ts_ns, None, ro.acts)
                if not before or c is None:
                    continue
                p = _last_other(ro.acts, bisect.bisect_left(launch, before[-1]), ro.acts[c].stream)
                if p is None:
                    continue
                if ro.acts[c].start_ns + WAIT_SLACK_NS < ro.acts[p].end_ns:
                    n_false += 1  # it started before the op it would wait for ended: the trace rules the pair out
                    continue
                deps[c].add(p)
                n_guess += 1
        if n_guess or n_false:
            dropped = (f"; {n_false} such pair(s) left out, the op having started before the other ended"
                       if n_false else "")
            guesses.append(f"rank {r}: {n_guess} event wait(s) from cudaEventRecord/cudaStreamWaitEvent rows without "
                           "stream ids (no cuda_sync rows): each wait paired with its thread's latest record; the "
                           "first op launched after the wait waits for the last op of another stream launched "
                           f"before the record{dropped}")
    _sync_deps(rt, ro, streams, deps, gates)
    return had


def _last_other(acts: list[Activity], k: int, stream: str) -> int | None:
    """The last op before position ``k`` on a stream other than ``stream``."""
    for i in range(k - 1, -1, -1):
        if acts[i].stream != stream:
            return i
    return None


def _sync_deps(rt: list[RuntimeRow], ro: _RankOps, streams: dict[str, list[int]], deps: dict[int, set[int]],
               gates: dict[int, float]) -> None:
    """Host synchronisations: the first op launched after the call waits for the synced work (module docstring),
    and its host waited: ``gates[op] = the call's start`` (ns; the first such call since the previous launch)."""
    import numpy as np

    launch = ro.launch
    by_corr = {c: i for i, c in enumerate(ro.corr) if c is not None}
    ends: np.ndarray | None = None  # every op's end (ns), in launch order: made at the first stream/event sync
    for x in rt:
        blocking_copy = _blocking_copy(x.name) and x.corr in by_corr
        if x.name not in _SYNC and not blocking_copy:
            continue
        c = _first_after(launch, x.ts_ns + x.dur_ns, None, ro.acts)
        if c is None:
            continue
        gates[c] = min(gates.get(c, x.ts_ns), x.ts_ns)
        if blocking_copy:
            synced = [by_corr[x.corr]]
        elif x.name == "cudaDeviceSynchronize":
            synced = [p for pos in streams.values() if (p := _last_before(pos, launch, x.ts_ns)) is not None]
        else:  # the op launched before the call that ended last before it returned (the first among ties)
            if ends is None:
                ends = np.fromiter((a.end_ns for a in ro.acts), np.float64, count=len(ro.acts))
            e = ends[:bisect.bisect_left(launch, x.ts_ns)]
            done = np.flatnonzero(e <= x.ts_ns + x.dur_ns)
            synced = [int(done[np.argmax(e[done])])] if len(done) else []
        deps[c].update(p for p in synced if p != c)


def _timing_deps(r: int, ro: _RankOps, deps: dict[int, set[int]], guesses: list[str],
                 graph_only: bool = False) -> None:
    """The timing guess (module docstring) for a rank without event rows; ``graph_only``: for the nodes of its
    CUDA-graph launches only (a graph's edges between its streams leave no runtime rows)."""
    acts, issue = ro.acts, ro.issue
    prev_end: dict[str, float] = {}
    ends = sorted((a.end_ns, i) for i, a in enumerate(acts))
    end_t = [e for e, _ in ends]
    n = 0
    for i, a in enumerate(acts):
        bound = max(issue[i], prev_end.get(a.stream, -1e300))
        prev_end[a.stream] = a.end_ns
        if a.start_ns <= bound + GAP_NS or (graph_only and ro.graph[i] is None):
            continue
        k = bisect.bisect_right(end_t, a.start_ns) - 1
        while k >= 0 and a.start_ns - end_t[k] <= GAP_NS:
            j = ends[k][1]
            if j < i and acts[j].stream != a.stream:
                deps[i].add(j)
                n += 1
                break
            k -= 1
    if graph_only:
        if n:
            guesses.append(f"rank {r}: {n} cross-stream wait(s) between nodes of CUDA-graph launches guessed from "
                           f"timing (a node that started > {GAP_NS / 1000:g} µs after its launch and stream "
                           "predecessor waits for the node of another stream that ended just before)")
        return
    if n or len({a.stream for a in acts}) > 1:
        guesses.append(f"rank {r}: no event record/wait rows; {n} cross-stream wait(s) guessed from timing (an op "
                       f"that started > {GAP_NS / 1000:g} µs after its issue and stream predecessor waits for the op "
                       "of another stream that ended just before)")


def _coll_keys(ranks: dict[int, _RankOps]) -> dict[tuple[int, int], tuple[str, str, int, list[int]]]:
    """(rank, index) of each NCCL collective kernel → (kind, process group, sequence number, group ranks)."""
    out = {}
    for r, ro in ranks.items():
        seq: dict[tuple[str, str], int] = defaultdict(int)
        for i, a in enumerate(ro.acts):
            if a.cat != "kernel" or not is_nccl_kernel(a.name):
                continue
            tags = a.tags or {}
            kind = collective_kind(a.name, tags.get("collective"))
            pg = str(tags.get("pg_name", "default"))
            n = seq[(pg, kind)]
            seq[(pg, kind)] = n + 1
            out[(r, i)] = (kind, pg, n, _group_ranks(tags))
    return out


def _group_ranks(tags: dict[str, Any]) -> list[int]:
    txt = tags.get("pg_ranks")
    if isinstance(txt, str):
        try:
            got = json.loads(txt)
            if isinstance(got, list) and got and all(isinstance(x, int) for x in got):
                return sorted(got)
        except ValueError:
            pass
    n = tags.get("group_size")
    return list(range(n)) if isinstance(n, int) and n > 0 else []


_FIX_ONE_RUN = ("pass the trace files of one run, one per rank (each names its rank in distributedInfo); a file of "
                "another run or job mixed in makes its collectives disagree")


def _check_collectives(ranks: dict[int, _RankOps], colls: dict[tuple[int, int], tuple[str, str, int, list[int]]],
                       groups: dict[tuple[str, str, int], dict[int, int]], files: dict[int, str]) -> None:
    """Refuse collectives of the imported ranks that contradict each other: one process group with two member
    lists (``Process Group Ranks``), matched counterparts (same process group, collective, sequence number) that
    move different sizes (``In msg nelems`` × ``dtype``; all_to_all's members may differ), or two ranks whose
    collectives on one process group come in different orders (NCCL runs a communicator's collectives in one
    order on every rank; compared where the ranks have as many of them), or matched members of a
    :data:`~schedsim.trace.common.WAITS_FOR_ALL` collective that do not overlap in time
    (:func:`~schedsim.trace.common.check_collective_clocks`, after the rest: a file of another run is named so).

    Raises
    ------
    TraceError
        Naming both ranks' files, the field and the collective.
    """
    def where(r: int) -> str:
        return f"{files[r]} (rank {r})" if r in files else f"rank {r}"

    members: dict[str, tuple[int, list[int]]] = {}
    order: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for (r, _i), (kind, pg, _n, grp) in sorted(colls.items()):
        if kind not in COLLECTIVE_KINDS:
            continue
        order[pg][r].append(kind)
        if not grp:
            continue
        seen = members.setdefault(pg, (r, grp))
        if seen[1] != grp:
            raise TraceError(f"{where(r)}: process group {printable(pg, 80)} has ranks {grp} (kernel arg Process "
                             f"Group Ranks), but {where(seen[0])} gives {seen[1]}", fix=_FIX_ONE_RUN)
    for (kind, pg, n), got in groups.items():
        if kind not in COLLECTIVE_KINDS or kind in PER_RANK_SIZE or len(got) < 2:
            continue
        (r0, i0), *rest = sorted(got.items())
        a0 = ranks[r0].acts[i0]
        for r, i in rest:
            a = ranks[r].acts[i]
            if a.bytes != a0.bytes and a.bytes > 0 and a0.bytes > 0:  # 0: a kernel without the size args
                raise TraceError(f"{where(r)}: {kind} #{n} on process group {printable(pg, 80)} moves "
                                 f"{a.bytes:,.0f} bytes (In msg nelems x dtype), but on {where(r0)} it moves "
                                 f"{a0.bytes:,.0f}; the members of one collective move one size", fix=_FIX_ONE_RUN)
    for pg, by_rank in order.items():
        (q0, seq0), *others = sorted(by_rank.items())
        for q, seq in others:
            if len(seq) == len(seq0) and seq != seq0:
                j = next(x for x in range(len(seq)) if seq[x] != seq0[x])
                raise TraceError(f"{where(q)}: collective #{j} on process group {printable(pg, 80)} is {seq[j]}, but "
                                 f"on {where(q0)} it is {seq0[j]} (kernel arg Collective name); NCCL runs a process "
                                 "group's collectives in one order on every rank", fix=_FIX_ONE_RUN)
    check_collective_clocks({r: ro.acts for r, ro in ranks.items()}, where)


def _fmt(x: float) -> float:
    return round(x, 3)


def build_replay_schedule(rep: ReplayInput, *, name: str, source: str = "",
                          files: dict[int, str] | None = None) -> ReplaySchedule:
    """The replay schedule of an import (module docstring).

    Parameters
    ----------
    rep : ReplayInput
        From ``import_kineto(..., keep_runtime=True)`` or ``import_nsys(..., keep_runtime=True)``.
    name : str
        The schedule's ``name``.
    source : str
        What was imported (file names), for the header comment.
    files : dict, optional
        Rank → its trace file, for the errors.

    Returns
    -------
    ReplaySchedule

    Raises
    ------
    TraceError
        Collectives of the imported ranks that contradict each other (:func:`_check_collectives`).
    """
    guesses: list[str] = []
    notes: list[str] = []
    ranks = _order(rep, guesses)
    deps: dict[int, dict[int, set[int]]] = {}
    gates: dict[int, dict[int, float]] = {}
    for r, ro in ranks.items():
        d: dict[int, set[int]] = defaultdict(set)
        gates[r] = {}
        if not _event_deps(r, ro, rep, d, guesses, gates[r]):
            _timing_deps(r, ro, d, guesses)
        elif any(g is not None for g in ro.graph):
            _timing_deps(r, ro, d, guesses, graph_only=True)
        deps[r] = d
    colls = _coll_keys(ranks)
    present = set(ranks)
    groups: dict[tuple[str, str, int], dict[int, int]] = defaultdict(dict)
    for (r, i), (kind, pg, n, _g) in colls.items():
        groups[(kind, pg, n)][r] = i
    _check_collectives(ranks, colls, groups, files or {})
    missing: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)  # (pg, rank lacking it) -> collectives
    t0 = min((ro.issue[0] for ro in ranks.values() if ro.issue), default=0.0)
    lines: list[str] = []
    n_ops = n_deps = absent = matched = 0
    launches: dict[tuple[int, int], int] = defaultdict(int)  # (rank, graph launch) -> its ops
    encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(op, ensure_ascii=False), one encoder for all
    for r, ro in ranks.items():
        names = [_op_name(a, i, colls.get((r, i))) for i, a in enumerate(ro.acts)]
        prev = t0
        stream_end: dict[str, float] = {}
        for i, a in enumerate(ro.acts):
            op: dict[str, Any] = {"name": names[i], "ranks": [r], "stream": f"s{a.stream}"}
            dur = _fmt((a.end_ns - a.start_ns) / 1000.0)
            key = colls.get((r, i))
            kind = _op_kind(a)
            if key is not None:
                ckind, pg, n, grp = key
                members = groups[(ckind, pg, n)]
                if _matched(ckind, grp, present, members):
                    matched += 1
                    dur = min(_fmt((ranks[q].acts[j].end_ns - ranks[q].acts[j].start_ns) / 1000.0)
                              for q, j in members.items())
                    op.update(kind=ckind, group=grp, bytes=int(a.bytes))
                    op["tags"] = {"pg": pg, "seq": n}
                else:
                    absent += 1
                    if len(present) > 1:  # a multi-rank import: say which ranks' rows are missing
                        _tally_missing(missing, pg, set(grp) - set(members), (ckind, n))
                    op.update(kind="compute")
                    op["tags"] = {"nccl": ckind, "peers": "absent", "pg": pg, "seq": n, "bytes": a.bytes}
            elif kind == "memcpy":
                op.update(kind="memcpy", direction=_direction(a.name), bytes=int(a.bytes))
            else:
                op.update(kind="compute")
                op["tags"] = {"kernel": a.name} if a.cat == "kernel" else {"memset": True, "bytes": a.bytes}
            op["duration_us"] = dur
            op.setdefault("tags", {}).update(start_us=_fmt((a.start_ns - t0) / 1000.0),
                                             end_us=_fmt((a.end_ns - t0) / 1000.0))
            _trace_tags(op["tags"], ro, i, r, launches)
            dl = sorted(deps[r].get(i, ()))
            _gpu_gap(op, ro, i, dl, stream_end.get(a.stream), key is not None and "group" in op)
            _host_fields(op, ro, i, prev, gates[r].get(i), dl, stream_end.get(a.stream))
            prev = ro.issue[i]
            stream_end[a.stream] = a.end_ns
            if dl:
                op["deps"] = [names[j] for j in dl]
                n_deps += len(dl)
            lines.append(encode(op))
            n_ops += 1
    guesses += _missing_guesses(missing, present)
    if launches:
        notes.append(f"{sum(launches.values())} ops of {len(launches)} CUDA-graph launch(es) (cudaGraphLaunch), "
                     f"tagged {GRAPH_TAG}: K (the rank's K-th launch): each launch's ops are issued at once, at the "
                     "launch (host_us 0 after its first op), and run as the graph ran them (stream order, the waits "
                     f"of its streams, the recorded gaps between its nodes: tag {GPU_GAP_TAG})")
    if absent:
        notes.append(f"{absent} NCCL kernel(s) whose peers are not in the import (one rank of a multi-rank run, or "
                     "send/recv) are compute ops of their recorded duration, tagged peers: absent; the peers' "
                     "timing is inside that duration")
    if matched:
        notes.append(f"{matched} collective entries matched across ranks by (process group, collective, sequence); "
                     "each runs the shortest rank's recorded duration after the last rank arrives")
    world = max(rep.world_size, max(ranks, default=0) + 1) if matched else max(ranks, default=0) + 1
    # input text (file names, kernel names in guesses and notes) goes into comments escaped: no line break in it
    # can end a comment and start a YAML key
    head = [f"# Replay of an imported {printable(rep.source)} trace{': ' + printable(source) if source else ''}.",
            "# schedsim predict THIS  (durations: recorded: the replay GPU model, recorded durations and launch times;",
            "# --durations modeled predicts it with the profile's model instead; schedsim replay THIS holds it against",
            "# the trace and runs the what-ifs). Written by schedsim import; see schedsim/trace/to_schedule.py."]
    head += [f"# guessed: {printable(g)}" for g in guesses] or ["# guessed: nothing (launch order and waits from "
                                                                 "runtime rows)"]
    head += [f"# note: {printable(n)}" for n in notes]
    body = ["schema_version: 1", f"name: {json.dumps(name)}",
            f"description: {json.dumps('replay of ' + (source or name) + ' (' + rep.source + ')')}",
            f"world_size: {world}", "durations: recorded", f"ops_file: {OPS_FILE}"]
    text = "\n".join(head + body) + "\n"
    matched_groups = [g for key, g in groups.items() if _matched(key[0], _coll_group(colls, g), present, g)]
    path = recorded_path(ranks, deps, gates, matched_groups)
    return ReplaySchedule(text, "[\n" + ",\n".join(lines) + "\n]\n", guesses, notes, n_ops, n_deps, path)


def _coll_group(colls: dict[tuple[int, int], tuple[str, str, int, list[int]]], members: dict[int, int]) -> list[int]:
    """The process group's ranks of a collective (those of its first member)."""
    r, i = next(iter(members.items()))
    return colls[(r, i)][3]


def _matched(kind: str, grp: list[int], present: set[int], members: dict[int, int]) -> bool:
    """Whether a collective is one rendezvous across the imported ranks: a collective kind over two or more ranks,
    every one of them imported and holding its kernel."""
    return kind in COLLECTIVE_KINDS and len(grp) > 1 and set(grp) <= present and set(members) >= set(grp)


def recorded_path(ranks: dict[int, _RankOps], deps: dict[int, dict[int, set[int]]],
                  gates: dict[int, dict[int, float]], matched: list[dict[int, int]]) -> RecordedPath | None:
    """The critical path of the recorded run (module docstring): each rank's ops in launch order with their
    dependencies (``deps[r][i]``: indices into the rank's ops), host synchronisations (``gates[r][i]``: when the
    call before op i began, ns) and the collectives matched across ranks (``{rank: index}`` each).

    Returns
    -------
    RecordedPath or None
        None where an op on the path has no span in the imported timeline.
    """
    import numpy as np

    from schedsim.sim.engine import HOST, critical_walk

    base: dict[int, int] = {}
    n = 0
    for r, ro in ranks.items():
        base[r] = n
        n += len(ro.acts)
    end = np.empty(n)
    ready = [0.0] * n
    binding = [HOST] * n
    host_from = [-1] * n
    for r, ro in ranks.items():
        b0, d, g = base[r], deps.get(r, {}), gates.get(r, {})
        last: dict[str, int] = {}  # each stream's latest op
        waited = -1
        for i, a in enumerate(ro.acts):
            x = b0 + i
            end[x] = a.end_ns
            preds = sorted(d.get(i, ()))
            if a.stream in last:
                preds.append(last[a.stream])
            last[a.stream] = i
            p = max(preds, key=lambda j: (ro.acts[j].end_ns, j)) if preds else -1
            p_end = ro.acts[p].end_ns if p >= 0 else -np.inf
            gate = g.get(i)
            if gate is not None and p_end > gate:  # the host blocked in the synchronisation until p ended
                waited = b0 + p
            host_from[x] = waited
            issue = ro.issue[i]
            ready[x] = max(issue, p_end)
            if p >= 0 and p_end >= issue:
                binding[x] = b0 + p
    group = [-1] * n
    for k, members in enumerate(matched):
        rows = [base[q] + j for q, j in sorted(members.items())]
        last_in = max(rows, key=lambda x: (ready[x], -x))  # the member ready last releases the rendezvous
        for x in rows:
            group[x] = k
            if x != last_in:
                binding[x] = last_in
    path, waits = critical_walk(binding, end, group, host_from)
    where = [(r, x - base[r]) for r in ranks for x in range(base[r], base[r] + len(ranks[r].acts))]
    sid = [ranks[r].ids[i] for r, i in where]
    if any(sid[x] is None for x in path):
        return None
    ids: list[str] = []
    ready_ns: list[float] = []
    issue_ns: list[float] = []
    for x, (r, i) in enumerate(where):
        s = sid[x]
        if s is not None:
            ids.append(s)
            ready_ns.append(min(ready[x], ranks[r].acts[i].start_ns))
            issue_ns.append(ranks[r].issue[i])
    return RecordedPath([str(sid[x]) for x in path], [str(sid[x]) for x in waits], ids, ready_ns, issue_ns)


def apply_recorded_path(tl: Any, path: RecordedPath | None) -> None:
    """Give the imported Timeline ``tl`` the recorded run's critical path (:func:`recorded_path`), in place: its
    ``critical_path``, ``meta["critical_path_host_waits"]`` and ``meta["critical_path_walk"]``, each span's
    ``ready_s`` and :attr:`~schedsim.sim.timeline.Timeline.host_call_end_s` (the issue; seconds from the
    timeline's ``meta["t0_ns"]``). Nothing changes where ``path`` is None (the last-finishing chain stays)."""
    import numpy as np

    from schedsim.sim.engine import HOST_WAITS_META

    if path is None or not len(tl):
        return
    c = tl.columns
    row = {s: k for k, s in enumerate(c.id)}
    t0 = float(tl.meta.get("t0_ns", 0.0))
    rows = np.fromiter((row.get(s, -1) for s in path.ids), np.int64, count=len(path.ids))
    ok = rows >= 0
    ready = np.asarray(c.ready_s, np.float64).copy()
    ready[rows[ok]] = (np.asarray(path.ready_ns)[ok] - t0) * 1e-9
    host = np.full(len(c), np.nan)
    host[rows[ok]] = (np.asarray(path.issue_ns)[ok] - t0) * 1e-9
    c.ready_s = ready
    tl._spans = None  # rows are rebuilt from the columns
    tl.critical_path = list(path.ops)
    tl._cp_rows = (list(path.ops), np.array([row[s] for s in path.ops], np.int64))
    tl.host_call_end_s = host
    tl.meta.pop(HOST_WAITS_META, None)
    if path.host_waits:
        tl.meta[HOST_WAITS_META] = list(path.host_waits)
    tl.meta["critical_path_walk"] = ("recorded dependencies: launches, stream order, event waits, host "
                                     "synchronisations, collectives")


def _trace_tags(tags: dict[str, Any], ro: _RankOps, i: int, r: int, launches: dict[tuple[int, int], int]) -> None:
    """Op ``i`` of rank ``r``: its imported span id (tag ``trace_id``) and CUDA-graph launch (tag ``graph``,
    counted in ``launches``)."""
    if ro.ids[i] is not None:
        tags[TRACE_ID_TAG] = ro.ids[i]
    g = ro.graph[i]
    if g is not None:
        tags[GRAPH_TAG] = g
        launches[(r, g)] += 1


def _tally_missing(missing: dict[tuple[str, int], set[tuple[str, int]]], pg: str, ranks: set[int],
                   coll: tuple[str, int]) -> None:
    """Record that collective ``coll`` (kind, sequence number) of process group ``pg`` lacks ``ranks``."""
    for q in ranks:
        missing[(pg, q)].add(coll)


def _missing_guesses(missing: dict[tuple[str, int], set[tuple[str, int]]], present: set[int]) -> list[str]:
    """One guess line per process group whose collectives lack members (a multi-rank import): which ranks, for
    how many collectives, and how the rendezvous was replaced."""
    by_pg: dict[str, list[str]] = defaultdict(list)
    for (pg, q), ns in sorted(missing.items()):
        by_pg[pg].append(f"rank {q} ({'not imported' if q not in present else 'no kernel in its trace'}) "
                         f"for {len(ns)}")
    return [f"process group {pg}: collectives with members missing ({'; '.join(what)}): no rendezvous across "
            "ranks; each imported rank runs its own kernel's recorded duration from when it is ready (the absent "
            "members' arrival is inside that duration)" for pg, what in by_pg.items()]


def _host_fields(op: dict[str, Any], ro: _RankOps, i: int, prev: float, gate: float | None, deps: list[int],
                 stream_end: float | None) -> None:
    """``host_us`` of op ``i`` (µs from the previous issue ``prev``, ns); after a host synchronisation that started
    at ``gate`` (ns), the tag ``host_wait_before_us`` (previous issue to the call) and ``host_us`` from the moment
    both that time and the end of its predecessors (``deps``, the stream's previous op ending at ``stream_end``)
    had passed, as the ``replay`` model's host waits (:class:`schedsim.sim.replay._ReplayHost`)."""
    issue = ro.issue[i]
    if gate is None:
        h = _fmt((issue - prev) / 1000.0)
    else:
        before = max(0.0, gate - prev)
        ends = [ro.acts[j].end_ns for j in deps] + ([stream_end] if stream_end is not None else [])
        waited = max([prev + before, *ends])
        h = _fmt(max(0.0, issue - waited) / 1000.0)
        op["tags"][HOST_WAIT_TAG] = _fmt(before / 1000.0)
    if h > 0:
        op["host_us"] = h


def _gpu_gap(op: dict[str, Any], ro: _RankOps, i: int, deps: list[int], stream_end: float | None,
             rendezvous: bool) -> None:
    """The tag ``gpu_gap_us`` of op ``i`` (:data:`~schedsim.sim.replay.GPU_GAP_TAG`): its recorded start less the
    time it was ready, the later of its issue and the end of its last predecessor (``deps``, the stream's previous
    op ending at ``stream_end``, ns): the GPU's launch latency. None for a collective matched across ranks (it
    starts at the rendezvous) and past :data:`LAUNCH_GAP_MAX_NS` (a hold the trace does not name)."""
    if rendezvous:
        return
    ready = max([ro.issue[i], *(ro.acts[j].end_ns for j in deps), *([stream_end] if stream_end is not None else [])])
    g = ro.acts[i].start_ns - ready
    if 0 < g <= LAUNCH_GAP_MAX_NS:
        op["tags"][GPU_GAP_TAG] = _fmt(g / 1000.0)


def _op_kind(a: Activity) -> str:
    return "memcpy" if a.cat == "memcpy" else "compute"


def _op_name(a: Activity, i: int, coll: tuple[str, str, int, list[int]] | None) -> str:
    if coll is not None:
        kind, pg, n, _g = coll
        return f"{kind}_pg{_PG_SAFE.sub('_', pg)}_{n}" if kind in COLLECTIVE_KINDS else f"nccl{i}"
    return {"memcpy": "cp", "memset": "ms"}.get(a.cat, "k") + str(i)


def _direction(name: str) -> str:
    n = name.replace(" ", "").lower()
    if "htod" in n or "h2d" in n:
        return "h2d"
    if "dtoh" in n or "d2h" in n:
        return "d2h"
    return "d2d"


def write_replay_schedule(rep: ReplayInput, path: str | Path, *, name: str, source: str = "",
                          files: dict[int, str] | None = None) -> ReplaySchedule:
    """Build the replay schedule (:func:`build_replay_schedule`) and write it to ``path`` and its ops to
    :data:`OPS_FILE` beside it, each atomically (the ops first)."""
    got = build_replay_schedule(rep, name=name, source=source, files=files)
    write_schedule_files(got, path)
    return got


def write_schedule_files(got: ReplaySchedule, path: str | Path) -> None:
    """Write a built replay schedule to ``path`` and its ops to :data:`OPS_FILE` beside it, each atomically (the
    ops first)."""
    from schedsim.io import atomic_write_text

    atomic_write_text(Path(path).parent / OPS_FILE, got.ops_json)
    atomic_write_text(path, got.text)
