"""Turn per-rank, per-iteration op times into one measured :class:`Timeline`.

Pure Python (no torch), so it is tested without processes.

Time base
---------
Each iteration starts at one instant on every rank (:mod:`executor.clock`: an
all-gather of the wall clocks, which is also the barrier, then a spin to the latest
plus a margin). Right after it, each rank records an *anchor*: on CUDA an event on an idle device, synchronised, and
the host wall clock (``time.time_ns``) read just after; on CPU the wall clock
itself. Op times are measured relative to that anchor (CUDA events:
``elapsed_time(anchor, event)``; CPU: ``perf_counter_ns`` differences) and
shifted by ``anchor_r − min_r anchor_r`` onto a common origin, the earliest
anchor of the iteration. Ranks on one host share the clock exactly; across
hosts the error is the clock synchronisation (NTP/PTP) error.

Rendezvous
----------
An op's start event fires when its stream reaches it, which for a collective
or a send/recv is when *this* rank arrives, not when the transfer can begin.
Like the simulator, the timeline reports ``ready_s`` = this rank's arrival and
``start_s`` = the latest arrival over the group (the rendezvous), capped at the
op's end.

Aggregation
-----------
Per op, the median over the timed iterations of ``ready``, ``start`` and
``end`` separately (each median is monotone, so ``start ≤ end`` holds). The
per-iteration makespans and their median are kept in ``meta`` as well, since
the makespan of median spans need not equal the median makespan.
"""

from __future__ import annotations

import statistics
from typing import Any

from schedsim.graph.info import GraphInfo
from schedsim.graph.ops import Op
from schedsim.sim.timeline import Span, Timeline

__all__ = ["RankTimes", "assemble_timeline", "rank_local_timeline", "lean_makespans", "timing_host_per_op_us"]

RankTimes = dict[str, Any]
"""What each rank sends to rank 0:

``rank`` (int); ``ids`` (op ids in this rank's program order); ``anchors_ns``
(one wall-clock anchor per timed iteration); ``start_s`` / ``end_s`` (per
iteration, a list of per-op times in seconds relative to the anchor);
``lean`` (per uninstrumented iteration, ``[anchor_ns, end_s]``); ``issue_s`` / ``lean_issue_s`` (eager CUDA: host
seconds to issue each timed / uninstrumented iteration); ``host_call_end_s`` (eager CUDA: per stamped
uninstrumented iteration, per op in ``ids`` order, seconds from the start of the issue loop to the op's call
returning); ``lean_host`` (per uninstrumented iteration, the issuing thread's row of
:data:`executor.clock.HOST_FIELDS`); ``lean_threads`` (each thread's run time over the timed uninstrumented
iterations, :func:`executor.clock.threads_between`); ``late_starts`` (iterations,
warm-up included, this rank began after the aligned start of :mod:`executor.clock`); ``segments`` (eager CUDA with
captured CUDA graph segments, :class:`executor.runtime.CudaSegmentRunner`: the op ids of each segment, whose ops
are all timed as the segment's whole replay).
"""


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def assemble_timeline(G: Any, per_rank: list[RankTimes], *, schedule: str, launch: str,
                      meta: dict[str, Any] | None = None) -> Timeline:
    """Build the measured timeline from what every rank gathered.

    Parameters
    ----------
    G : networkx.DiGraph
        The schedule's DAG (from :func:`schedsim.graph.build.build_graph`).
    per_rank : list of RankTimes
        One entry per rank (see :data:`RankTimes`); all ranks ran the same
        number of timed iterations.
    schedule, launch : str
        Copied into the timeline.
    meta : dict, optional
        Extra metadata; ``makespan_iters_s``, ``makespan_median_s`` and, when
        lean iterations ran, ``makespan_uninstrumented_s`` and ``uninstrumented_period_s`` (median seconds
        from one lean iteration's anchor to the next on rank 0: the iteration and the idle before the next
        one's aligned start) are added; with ``lean_host``, ``host_thread_uninstrumented``: per rank, the issuing
        thread's :data:`executor.clock.HOST_FIELDS` per uninstrumented iteration, as columns; with
        ``lean_threads``, ``threads_uninstrumented``: per rank, ``[name, run s, cpu]`` of every thread of the
        process that ran during those iterations and the untimed one before them
        (:func:`executor.clock.threads_between`, :func:`executor.clock.threads_snapshot_at`).

    Returns
    -------
    Timeline
        ``source="execute"``; times in seconds from the common origin.
    """
    meta = dict(meta or {})
    n_iter = min((len(r["anchors_ns"]) for r in per_rank), default=0)
    # absolute (origin-shifted) times per iteration: t[it][op_id] = (ready, end)
    iters: list[dict[str, tuple[float, float]]] = []
    for it in range(n_iter):
        origin = min(r["anchors_ns"][it] for r in per_rank)
        d: dict[str, tuple[float, float]] = {}
        for r in per_rank:
            off = (r["anchors_ns"][it] - origin) * 1e-9
            for oid, s, e in zip(r["ids"], r["start_s"][it], r["end_s"][it]):
                d[oid] = (s + off, e + off)
        iters.append(d)
    info = GraphInfo.of(G)
    rendezvous: list[list[str]] = [list(m) for m in info.collectives.values()]
    rendezvous += [[a, b] for a, b in info.p2p]
    starts: list[dict[str, float]] = []
    for d in iters:
        st = {k: v[0] for k, v in d.items()}
        for members in rendezvous:
            present = [m for m in members if m in d]
            if len(present) < 2:
                continue
            t = max(d[m][0] for m in present)
            for m in present:
                st[m] = min(t, d[m][1])
        starts.append(st)
    spans: list[Span] = []
    makespans = [max((v[1] for v in d.values()), default=0.0) for d in iters]
    for oid in G.nodes:
        if not iters or oid not in iters[0]:
            continue
        op: Op = G.nodes[oid]["op"]
        ready = _median([d[oid][0] for d in iters])
        start = _median([s[oid] for s in starts])
        end = _median([d[oid][1] for d in iters])
        spans.append(Span(oid, op.name, op.rank, op.stream, op.kind, op.resource, start, max(end, start), None,
                          ready, op.nbytes, op.flops, dict(op.tags) if op.tags else {}))
    meta["iterations"] = n_iter
    meta["makespan_iters_s"] = makespans
    meta["makespan_median_s"] = _median(makespans) if makespans else 0.0
    lean = lean_makespans([r.get("lean", []) for r in per_rank])
    if lean:
        meta["makespan_uninstrumented_iters_s"] = lean
        meta["makespan_uninstrumented_s"] = _median(lean)
        r0 = per_rank[0].get("lean", [])
        periods = [(b[0] - a[0]) * 1e-9 for a, b in zip(r0, r0[1:], strict=False)]
        if periods:  # anchor to anchor: the iteration plus the aligned start's idle (the GPU's duty cycle)
            meta["uninstrumented_period_s"] = _median(periods)
    extra = timing_host_per_op_us(per_rank)
    if extra is not None:
        meta["timing_host_per_op_us"] = extra
    meta.update(_lean_host_meta(per_rank))
    world = int(G.graph.get("world_size", len(per_rank)))
    return Timeline(schedule=schedule, source="execute", world_size=world, launch=launch, profile=None,
                    spans=spans, critical_path=_critical_path(G, spans), meta=meta)


def _lean_host_meta(per_rank: list[RankTimes]) -> dict[str, Any]:
    """The host side of the uninstrumented iterations, per rank, for ``meta``: ``host_issue_uninstrumented_s``
    (eager CUDA), ``host_thread_uninstrumented``, ``threads_uninstrumented`` and ``host_call_end_s``
    (:func:`assemble_timeline`); a key only when some rank recorded it."""
    meta: dict[str, Any] = {}
    if any(r.get("lean_issue_s") for r in per_rank):  # eager CUDA: the host's issue of an uninstrumented iteration
        meta["host_issue_uninstrumented_s"] = [_median(r["lean_issue_s"]) if r.get("lean_issue_s") else None
                                               for r in per_rank]
    if any(r.get("lean_host") for r in per_rank):  # the issuing thread over each uninstrumented iteration
        from executor.clock import host_columns

        meta["host_thread_uninstrumented"] = [host_columns(r.get("lean_host") or []) for r in per_rank]
    if any(r.get("lean_threads") for r in per_rank):
        meta["threads_uninstrumented"] = [r.get("lean_threads") or [] for r in per_rank]
    calls = host_call_ends(per_rank)
    if calls:
        meta["host_call_end_s"] = calls
    return meta


def host_call_ends(per_rank: list[RankTimes]) -> dict[str, float]:
    """``{op id: seconds}``: when each op's call returned on its rank's host, from the start of the rank's issue
    loop of an uninstrumented iteration, median over the stamped iterations (``host_call_end_s``), rounded to
    0.1 µs; empty when no rank stamped any (CPU ranks, CUDA graphs, ``--host-call-iters 0``). What the model's
    host thread (rule host-issue of :mod:`schedsim.gpu.rules`) predicts as the op's issue time plus its call.

    >>> host_call_ends([{"ids": ["a@r0", "b@r0"], "host_call_end_s": [[10e-6, 31e-6], [12e-6, 29e-6], [11e-6, 30e-6]]}])
    {'a@r0': 1.1e-05, 'b@r0': 3e-05}
    """
    out: dict[str, float] = {}
    for r in per_rank:
        its = [it for it in r.get("host_call_end_s") or [] if it]
        if not its:
            continue
        for j, op in enumerate(r.get("ids") or []):
            out[op] = round(_median([it[j] for it in its]), 7)
    return out


def timing_host_per_op_us(per_rank: list[RankTimes]) -> float | None:
    """Host µs per op that timing an eager CUDA iteration adds: per rank, the median host time of issuing a timed
    iteration (the instrumented loop: an event record before and after every op, NVTX ranges when on, its
    per-op Python) less the median of an uninstrumented one (the lean step list), over the rank's ops; the median
    over the ranks that qualify, at least 0. A rank qualifies when its uninstrumented issue took at least half
    its uninstrumented iteration (``lean`` end): the host bounds it, so the GPU queue is short and no call
    waited for room in it (in a GPU-bound run a long timed loop can fill CUDA's launch queue and wait there,
    which is no host cost; the timing cost does not shape such a run's ops either). None when no rank
    qualifies (CPU ranks, CUDA graphs, GPU-bound runs).

    Why: in a host-bound eager run those events are host time the uninstrumented run does not pay (allgather_mm
    bf16 chunks 16 on one H200: 9.18 ms timed against 6.30 ms uninstrumented, 5.4 µs per op), so
    its ops are compared with a prediction of the timed run (:meth:`schedsim.hardware.profile.HardwareProfile.
    timed_eager`), as a timed CUDA graph's are.

    >>> timing_host_per_op_us([{"ids": ["a", "b"], "issue_s": [30e-6, 32e-6, 31e-6], "lean_issue_s": [20e-6, 22e-6],
    ...                         "lean": [[0, 25e-6], [0, 26e-6]]},
    ...                        {"ids": ["c"], "issue_s": [9e-6], "lean_issue_s": [1e-6], "lean": [[0, 1e-3]]}])
    5.0
    """
    per_op = []
    for r in per_rank:
        timed, lean, n = r.get("issue_s") or [], r.get("lean_issue_s") or [], len(r.get("ids") or [])
        ends = [it[1] for it in r.get("lean") or []]
        if timed and lean and n and ends and _median(lean) >= 0.5 * _median(ends):
            per_op.append(max(0.0, (_median(timed) - _median(lean)) / n * 1e6))
    return round(_median(per_op), 3) if per_op else None


def lean_makespans(per_rank: list[list[list[float]]]) -> list[float]:
    """Makespan (s) of each uninstrumented iteration, from every rank's ``[anchor_ns, end_s]`` per iteration.

    The method of ``makespan_uninstrumented_s``, shared with the hand-written references
    (``benchmarks/accuracy/handwritten/harness.py``) so that both are timed identically: per iteration,
    after the aligned start of :class:`executor.clock.IterationClock`, each rank records an anchor (CUDA event,
    synchronised, then ``time.time_ns``), issues the iteration, records one end event per stream;
    ``end_s`` = latest end − anchor. The iteration's makespan is
    ``max_r (anchor_r − min anchor) + end_r``. Iterations that not every rank completed are dropped.

    >>> lean_makespans([[[0, 0.5], [0, 0.5]], [[1_000_000_000, 0.25], [0, 0.25]]])  # rank 1 anchored 1 s later
    [1.25, 0.5]
    """
    n = min((len(r) for r in per_rank), default=0)
    out = []
    for it in range(n):
        origin = min(r[it][0] for r in per_rank)
        out.append(max((r[it][0] - origin) * 1e-9 + r[it][1] for r in per_rank))
    return out


def _critical_path(G: Any, spans: list[Span]) -> list[str]:
    """Walk back from the last op to end: each step goes to the predecessor (DAG edge or rendezvous
    peer) that finished last before the op started. A measured approximation of the simulator's path."""
    by = {s.id: s for s in spans}
    if not by:
        return []
    peers: dict[str, list[str]] = {}
    info = GraphInfo.of(G)
    for members in info.collectives.values():
        for m in members:
            peers[m] = [x for x in members if x != m]
    for a, b in info.p2p:
        peers.setdefault(a, []).append(b)
        peers.setdefault(b, []).append(a)
    cur = max(by.values(), key=lambda s: s.end_s).id
    path = [cur]
    seen = {cur}
    while True:
        s = by[cur]
        cands = [p for p in G.predecessors(cur) if p in by]
        # a late peer of a rendezvous stands for the op's own wait
        for q in peers.get(cur, []):
            if q in by and by[q].ready_s is not None and s.ready_s is not None and by[q].ready_s > s.ready_s:
                cands += [p for p in G.predecessors(q) if p in by]
        cands = [c for c in cands if c not in seen and by[c].end_s <= s.start_s + 1e-6]
        if not cands:
            break
        cur = max(cands, key=lambda c: by[c].end_s)
        seen.add(cur)
        path.append(cur)
    path.reverse()
    return path


def rank_local_timeline(G: Any, times: RankTimes, *, schedule: str, launch: str,
                        meta: dict[str, Any] | None = None) -> Timeline:
    """A one-rank timeline (partial results after a failure): medians over the iterations it completed,
    relative to its own anchor (no cross-rank alignment, no rendezvous)."""
    ids = times["ids"]
    spans = []
    n = len(times["start_s"])
    for j, oid in enumerate(ids):
        if not n:
            break
        op: Op = G.nodes[oid]["op"]
        st = _median([times["start_s"][it][j] for it in range(n)])
        en = _median([times["end_s"][it][j] for it in range(n)])
        spans.append(Span(oid, op.name, op.rank, op.stream, op.kind, op.resource, st, max(st, en), None, st,
                          op.nbytes, op.flops, dict(op.tags) if op.tags else {}))
    m = dict(meta or {})
    m["iterations"] = n
    m["partial"] = True
    return Timeline(schedule=schedule, source="execute", world_size=int(G.graph.get("world_size", 1)), launch=launch,
                    spans=spans, meta=m)
