"""Chrome / Perfetto trace JSON of one or more timelines.

Layout (Chrome Trace Event Format, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAqJo,
and Perfetto's JSON importer, perfetto.dev/docs/getting-started/other-formats):

* one process per rank (``pid``; ``process_name`` and ``process_sort_index`` metadata), one thread
  per stream (``tid``; ``thread_name`` and ``thread_sort_index``: compute streams, then comm, then
  copy); ``ph: "X"`` complete events, ``ts``/``dur`` in microseconds. Events on one track nest
  (Perfetto requires it): a simulated stream runs one op at a time, and measured ops that overlap
  partially on one stream go to extra threads ``"<stream> (<resource>) #2"``, ... (:func:`_nesting_rows`).
* args per slice: ``op`` (id), ``kind``, ``resource``, ``bytes``, ``flops``, ``solo_us`` (the
  uncontended prediction), ``ready_us``, pipeline tags, and ``predicted_us`` / ``measured_us``
  when both timelines of a comparison hold the op.
* flow events (``ph: "s"`` / ``"f"``, ``bp: "e"``; bound 5% into the source slice and 5% before the end
  of the target slice, so the enclosing slice is never ambiguous and a flow never runs backwards in
  time): every dependency of the graph between two different streams or ranks (category ``dep``),
  send -> recv (``p2p``; without the graph, sends and recvs paired by their ``msg`` tag) and, for each
  collective, its first member -> every other member (``collective``; members from the graph's
  rendezvous, ``G.graph["collectives"]``, else the spans of one name on several ranks). Dependency and
  p2p flows need the graph (``predict`` passes a :class:`ProgramFlows` of its Program: the same flows in
  the same order, without building networkx).
* counter tracks (``ph: "C"``) per rank: ``memory allocated (bytes)`` when the timeline carries
  the memory curve (:mod:`schedsim.report.memory`), ``GPU share in use`` (Σ over running compute ops
  of solo time / actual time: 1.0 = one kernel's worth of the GPU, from the simulator's solo
  durations; measured timelines, which have none, get ``compute ops running`` instead) and
  ``comm bandwidth in use (B/s)`` (Σ bytes / duration of running comm ops).
* link counters (``ph: "C"``) in one process ``network links`` after the ranks, when the timeline carries
  ``meta["links"]`` (a cluster profile's shared links, :func:`schedsim.network.share.link_utilisation`): one
  track per NIC direction or leaf uplink, ``<link> (GB/s, of <capacity>)``, args ``GB_per_s`` and
  ``utilisation`` (of the link's capacity); each track integrates to the bytes moved over that link.

:func:`schedsim.report.trace_check.check_trace` validates all of it.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from schedsim.graph.info import GraphInfo
from schedsim.io import atomic_writer
from schedsim.kinds import P2P_KINDS, TRACE_COLLECTIVE_KINDS
from schedsim.sim.timeline import Span, Timeline, dumps_json

__all__ = ["ProgramFlows", "chrome_trace", "write_chrome_trace"]

_RES_ORDER = {"compute": 0, "comm": 1, "copy": 2}
_COLLECTIVES = frozenset(TRACE_COLLECTIVE_KINDS)


def _us(s: float) -> float:
    """Seconds to µs rounded to 0.1 ns. A slice's ``dur`` is ``_us(end) - _us(start)``, not
    ``_us(duration)``: rounding each on its own can end a slice 0.1 ns after the next one on its
    thread starts, a partial overlap."""
    return round(s * 1e6, 4)


def _rate_counter(spans: list[Span], value: Any) -> list[tuple[float, float]]:
    """Piecewise-constant sum of ``value(span)`` over running spans: [(t_s, total)] at every change."""
    ev: list[tuple[float, float]] = []
    for s in spans:
        v = value(s)
        if v and s.end_s > s.start_s:
            ev.append((s.start_s, v))
            ev.append((s.end_s, -v))
    ev.sort()
    out: list[tuple[float, float]] = []
    cur = 0.0
    for i, (t, d) in enumerate(ev):
        cur += d
        if i + 1 < len(ev) and ev[i + 1][0] == t:
            continue
        v = max(0.0, cur) if abs(cur) > 1e-9 * (abs(d) + 1) else 0.0
        if out and abs(out[-1][1] - v) <= 1e-9 * max(1.0, abs(v)):
            continue  # unchanged: a counter sample holds until the next one
        out.append((t, v))
    return out


def _nesting_rows(spans: list[Span], tol_s: float = 5e-10) -> list[int]:
    """Row of each span within its (rank, stream) lane so that the spans of one row nest.

    A simulated stream runs one op at a time, so everything lands in row 0. Measured streams can
    overlap partially (kernels launched with programmatic dependent launch, ranges of two CPU
    threads folded onto one lane, clock jitter); Perfetto drops or mis-nests such slices on one
    thread, so each span goes to the first row where it nests in (or follows) what is open there.
    ``tol_s`` (0.5 ns) absorbs the writer's 0.1 ns rounding.
    """
    rows = [0] * len(spans)
    by_lane: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, s in enumerate(spans):
        by_lane[(s.rank, s.stream)].append(i)
    for idx in by_lane.values():
        idx.sort(key=lambda i: (spans[i].start_s, -spans[i].end_s))
        open_ends: list[list[float]] = []  # per row: ends of the enclosing slices still open
        for i in idx:
            a, b = spans[i].start_s, spans[i].end_s
            for j, stack in enumerate(open_ends):
                while stack and stack[-1] <= a + tol_s:
                    stack.pop()
                if not stack or b <= stack[-1] + tol_s:
                    break
            else:
                j = len(open_ends)
                open_ends.append([])
            open_ends[j].append(b)
            rows[i] = j
    return rows


class ProgramFlows:
    """What :func:`chrome_trace` reads of a DAG, answered from a :class:`~schedsim.lower.program.Program`
    without building networkx: ``graph`` (``collectives`` and ``p2p`` by op id, as
    :func:`schedsim.graph.build.info_of` gives them) and :meth:`edges`, in the order networkx iterates the
    edges of :func:`schedsim.graph.build.graph_of`'s graph."""

    def __init__(self, prog: Any) -> None:
        ids = prog.ids()
        self._prog, self._ids = prog, ids
        self.graph = {"collectives": {k: [ids[i] for i in m] for k, m in prog.collectives().items()},
                      "p2p": [(ids[a], ids[b]) for a, b in prog.p2p.tolist()]}

    def edges(self, data: bool = False) -> Any:
        """``(u, v, {"kind": "stream" | "dep"})`` per edge (``(u, v)`` without ``data``): by source op in program
        order, each source's edges in insertion order (stream edges, then dependencies), an edge that is both
        once, at its first insertion, with kind ``dep`` (what ``DiGraph.add_edges_from`` leaves)."""
        import numpy as np

        prog, ids = self._prog, self._ids
        e = np.concatenate([prog.stream_edges, prog.dep_edges]).reshape(-1, 2).astype(np.int64)
        if not len(e):
            return
        key = e[:, 0] * max(len(ids), 1) + e[:, 1]
        _u, first, inv = np.unique(key, return_index=True, return_inverse=True)
        dep = np.zeros(len(first), bool)
        dep[inv.reshape(-1)[len(prog.stream_edges):]] = True
        order = np.lexsort((first, e[first, 0]))
        for (a, b), d in zip(e[first[order]].tolist(), dep[order].tolist(), strict=True):
            yield (ids[a], ids[b], {"kind": "dep" if d else "stream"}) if data else (ids[a], ids[b])


def chrome_trace(timelines: list[tuple[str, Timeline]], graph: Any = None) -> dict[str, Any]:
    """Trace dict for one or more labelled timelines (e.g. ``[("predicted", a), ("measured", b)]``).

    Each (label, rank) becomes a process, each stream a thread. ``graph`` (the networkx DAG of the
    first timeline, optional) adds dependency and send->recv flows.
    """
    w = _Writer()
    multi = len(timelines) > 1
    by_label = {lbl: tl.by_id() for lbl, tl in timelines} if multi else {}
    pid_base = 0  # processes of later timelines follow those of earlier ones, whatever their rank sets
    for li, (label, tl) in enumerate(timelines):
        w.lanes(tl, label if multi else None, pid_base)
        pid_base += len(w.pid_of)
        w.slices(tl, label, [(ol, d) for ol, d in by_label.items() if ol != label])
        g = graph if li == 0 else None
        byid = tl.by_id()
        if g is not None:
            w.graph_flows(g, byid)
        elif li == 0 or graph is None:
            w.tagged_p2p_flows(tl)
        w.collective_flows(tl, byid, g)
        w.counters(tl)
        pid_base += w.link_counters(tl, label if multi else None, pid_base)
    return {"traceEvents": w.events, "displayTimeUnit": "ms",
            "otherData": {"generator": "schedsim", "timelines": [lbl for lbl, _ in timelines]}}


def _slice_args(s: Span, label: str, others: list[tuple[str, dict[str, Span]]]) -> dict[str, Any]:
    """A slice's ``args``: op id, kind, resource, the optional numbers (µs), tags, and the op's duration in
    the other timelines of the trace (``<label>_us``)."""
    args: dict[str, Any] = {"op": s.id, "kind": s.kind, "resource": s.resource}
    if s.bytes:
        args["bytes"] = s.bytes
    if s.flops:
        args["flops"] = s.flops
    if s.solo_s is not None:
        args["solo_us"] = _us(s.solo_s)
    if s.ready_s is not None:
        args["ready_us"] = _us(s.ready_s)
    if s.tags:
        args.update({str(k): v for k, v in s.tags.items() if k not in args})
    if others:
        args[f"{label}_us"] = _us(s.duration_s)
        for ol, d in others:
            o = d.get(s.id)
            if o is not None:
                args[f"{ol}_us"] = _us(o.duration_s)
    return args


class _Writer:
    """The events of a trace, one timeline at a time: ``pid_of`` (rank → process) and ``tid_span`` (op id →
    thread) are the current timeline's; flow ids run on over all timelines."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.flow_id = 0
        self.pid_of: dict[int, int] = {}
        self.tid_span: dict[str, int] = {}

    def lanes(self, tl: Timeline, label: str | None, pid_base: int) -> None:
        """Process and thread metadata: one process per rank, one thread per stream and nesting row
        (:func:`_nesting_rows`), compute streams first."""
        ranks = sorted({s.rank for s in tl.spans})
        self.pid_of = {r: pid_base + i for i, r in enumerate(ranks)}
        res_of: dict[tuple[int, str], str] = {}
        for s in tl.spans:
            res_of.setdefault((s.rank, s.stream), s.resource)
        lanes = sorted(res_of, key=lambda k: (k[0], _RES_ORDER.get(res_of[k], 3), k[1]))
        sub_of = _nesting_rows(tl.spans)
        n_sub: dict[tuple[int, str], int] = defaultdict(int)
        for s, j in zip(tl.spans, sub_of, strict=False):
            n_sub[(s.rank, s.stream)] = max(n_sub[(s.rank, s.stream)], j + 1)
        for r in ranks:
            pid = self.pid_of[r]
            name = f"{label} rank {r}" if label is not None else f"rank {r}"
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                "args": {"sort_index": pid}})
        tid_of: dict[tuple[int, str, int], int] = {}
        per_rank_idx: dict[int, int] = defaultdict(int)
        for r, st in lanes:
            for j in range(n_sub[(r, st)]):
                per_rank_idx[r] += 1
                tid = tid_of[(r, st, j)] = per_rank_idx[r]
                self.events.append({"ph": "M", "name": "thread_name", "pid": self.pid_of[r], "tid": tid,
                                    "args": {"name": f"{st} ({res_of[(r, st)]})" + (f" #{j + 1}" if j else "")}})
                self.events.append({"ph": "M", "name": "thread_sort_index", "pid": self.pid_of[r], "tid": tid,
                                    "args": {"sort_index": tid}})
        self.tid_span = {s.id: tid_of[(s.rank, s.stream, j)] for s, j in zip(tl.spans, sub_of, strict=False)}

    def slices(self, tl: Timeline, label: str, others: list[tuple[str, dict[str, Span]]]) -> None:
        """One complete event (``ph: "X"``) per span."""
        for s in tl.spans:
            self.events.append({"ph": "X", "name": s.name, "cat": s.resource, "pid": self.pid_of[s.rank],
                                "tid": self.tid_span[s.id], "ts": _us(s.start_s),
                                "dur": round(_us(s.end_s) - _us(s.start_s), 4), "args": _slice_args(s, label, others)})

    def flow(self, a: Span, b: Span, cat: str) -> None:
        """An arrow from 5 % into ``a`` to 5 % before the end of ``b``; none when ``b`` ended before that."""
        ts_s, ts_f = _us(a.start_s + 0.05 * a.duration_s), _us(b.end_s - 0.05 * b.duration_s)
        if ts_s > ts_f:
            return  # b ended before a began: no causal arrow to draw
        self.flow_id += 1
        self.events.append({"ph": "s", "name": cat, "cat": cat, "id": self.flow_id, "pid": self.pid_of[a.rank],
                            "tid": self.tid_span[a.id], "ts": ts_s})
        self.events.append({"ph": "f", "bp": "e", "name": cat, "cat": cat, "id": self.flow_id,
                            "pid": self.pid_of[b.rank], "tid": self.tid_span[b.id], "ts": ts_f})

    def graph_flows(self, graph: Any, byid: dict[str, Span]) -> None:
        """The graph's dependencies across streams or ranks (``dep``) and its send → recv pairs (``p2p``)."""
        for u, v, d in graph.edges(data=True):
            a, b = byid.get(u), byid.get(v)
            if a is None or b is None or (a.rank, a.stream) == (b.rank, b.stream) or d.get("kind") == "stream":
                continue
            self.flow(a, b, "dep")
        for u, v in GraphInfo.of(graph).p2p:
            a, b = byid.get(u), byid.get(v)
            if a is not None and b is not None:
                self.flow(a, b, "p2p")

    def tagged_p2p_flows(self, tl: Timeline) -> None:
        """No graph: pair sends and recvs that carry the same message tag (the pipeline block's ``msg``)."""
        ends: dict[str, dict[str, list[Span]]] = defaultdict(lambda: {"send": [], "recv": []})
        for s in tl.spans:
            if s.kind in P2P_KINDS and s.tags and s.tags.get("msg") is not None:
                ends[str(s.tags["msg"])][s.kind].append(s)
        for d in ends.values():
            if len(d["send"]) == 1 and len(d["recv"]) == 1:
                self.flow(d["send"][0], d["recv"][0], "p2p")

    def collective_flows(self, tl: Timeline, byid: dict[str, Span], graph: Any) -> None:
        """First member → every other member of each collective (``collective``)."""
        members: dict[str, list[Span]] = defaultdict(list)
        if graph is not None and "collectives" in graph.graph:
            # the graph's rendezvous: one entry per (name, group), so two groups issuing one name stay apart
            for key, ids in GraphInfo.of(graph).collectives.items():
                members[key] = [byid[i] for i in ids if i in byid]
        else:  # no graph: members are the spans of one name, one per rank
            for s in tl.spans:
                if s.kind in _COLLECTIVES:
                    members[s.name].append(s)
        for mem in members.values():
            if len({m.rank for m in mem}) < 2 or len(mem) != len({m.rank for m in mem}):
                continue  # repeated names on one rank: membership is ambiguous
            mem.sort(key=lambda m: m.rank)
            for m in mem[1:]:
                self.flow(mem[0], m, "collective")

    def counters(self, tl: Timeline) -> None:
        """Counter tracks per rank (module docstring): memory, GPU share or compute ops, comm bandwidth."""
        mem_meta = (tl.meta or {}).get("memory") or {}
        for r, d in (mem_meta.get("ranks") or {}).items():
            pid = self.pid_of.get(int(r))
            if pid is None:
                continue
            for t, b in d.get("steps", []):
                self.events.append({"ph": "C", "name": "memory allocated (bytes)", "pid": pid, "ts": _us(t),
                                    "args": {"bytes": b}})
        by_rank: dict[int, list[Span]] = defaultdict(list)
        for s in tl.spans:
            by_rank[s.rank].append(s)
        for r, spans in by_rank.items():
            self._rate_counters(self.pid_of[r], spans)

    def link_counters(self, tl: Timeline, label: str | None, pid: int) -> int:
        """Counter tracks of the shared links' use (module docstring) in process ``pid``; the processes added
        (0 or 1)."""
        links = ((tl.meta or {}).get("links") or {}).get("links") or []
        if not links:
            return 0
        name = f"{label} network links" if label is not None else "network links"
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for ln in links:
            cap = float(ln["capacity_Bps"])
            track = f"{ln['name']} (GB/s, of {cap / 1e9:g})"
            for t, v in ln["steps"]:
                self.events.append({"ph": "C", "name": track, "pid": pid, "ts": _us(t),
                                    "args": {"GB_per_s": v / 1e9, "utilisation": v / cap if cap > 0 else 0.0}})
        return 1

    def _rate_counters(self, pid: int, spans: list[Span]) -> None:
        comp = [s for s in spans if s.resource == "compute" and s.solo_s is not None]
        if comp:
            for t, v in _rate_counter(comp, lambda s: s.solo_s / s.duration_s if s.duration_s > 0 else 0.0):
                self.events.append({"ph": "C", "name": "GPU share in use", "pid": pid, "ts": _us(t),
                                    "args": {"share": round(v, 6)}})
        else:  # measured: no solo durations to weigh by, so count the compute ops in flight
            comp = [s for s in spans if s.resource == "compute"]
            for t, v in _rate_counter(comp, lambda s: 1.0):
                self.events.append({"ph": "C", "name": "compute ops running", "pid": pid, "ts": _us(t),
                                    "args": {"ops": round(v)}})
        comm = [s for s in spans if s.resource == "comm" and s.bytes]
        for t, v in _rate_counter(comm, lambda s: s.bytes / s.duration_s if s.duration_s > 0 else 0.0):
            self.events.append({"ph": "C", "name": "comm bandwidth in use (B/s)", "pid": pid, "ts": _us(t),
                                "args": {"bytes_per_s": round(v, 3)}})


_CHUNK = 20_000  # events serialised per orjson call: bounds the bytes held at once while writing


def write_chrome_trace(path: str | Path, timelines: list[tuple[str, Timeline]], graph: Any = None) -> None:
    """Write :func:`chrome_trace` atomically; open the file in ui.perfetto.dev or chrome://tracing.

    The events are serialised with :func:`~schedsim.sim.timeline.dumps_json` (orjson) in chunks of
    ``_CHUNK`` and streamed into the temporary file, so no single JSON string of the whole trace is built.
    """
    trace = chrome_trace(timelines, graph)
    events = trace.pop("traceEvents")
    with atomic_writer(path, "wb") as f:
        f.write(b'{"traceEvents":[')
        for i in range(0, len(events), _CHUNK):
            if i:
                f.write(b",")
            f.write(dumps_json(events[i:i + _CHUNK])[1:-1])
        f.write(b"],")
        f.write(dumps_json(trace)[1:])
