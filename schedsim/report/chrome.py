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

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from schedsim.arrays import py_round
from schedsim.graph.info import GraphInfo
from schedsim.io import atomic_writer
from schedsim.kinds import KINDS, P2P_KINDS, TRACE_COLLECTIVE_KINDS
from schedsim.sim.timeline import Span, SpanColumns, Timeline, _decode, dumps_json

if TYPE_CHECKING:
    from schedsim.lower.program import Program

__all__ = ["FlowGraph", "ProgramFlows", "chrome_trace", "write_chrome_trace"]


class FlowGraph(Protocol):
    """What :func:`chrome_trace` reads of a DAG: ``graph`` (its ``collectives`` and ``p2p`` by op id) and
    ``edges(data=True)`` (``(u, v, {"kind": "stream" | "dep"})``): a networkx DiGraph
    (:func:`schedsim.graph.build.graph_of`) or a :class:`ProgramFlows`."""

    graph: dict[str, Any]

    def edges(self, data: bool = ...) -> Iterable[tuple[Any, ...]]: ...

_RES_ORDER = {"compute": 0, "comm": 1, "copy": 2}
_COLLECTIVES = TRACE_COLLECTIVE_KINDS


#: The thread of a rank's host synchronisations (:meth:`_Writer.host_waits`), apart from its streams' threads.
HOST_TID = 999_999


def _us(s: float) -> float:
    """Seconds to µs rounded to 0.1 ns. A slice's ``dur`` is ``_us(end) - _us(start)``, not
    ``_us(duration)``: rounding each on its own can end a slice 0.1 ns after the next one on its
    thread starts, a partial overlap."""
    return round(s * 1e6, 4)


def _us_list(a: np.ndarray) -> list[float]:
    """:func:`_us` of every value of ``a`` (float64 seconds, shape (n,)): numpy's products are the IEEE products
    Python's ``s * 1e6`` gives, each rounded as Python's ``round`` rounds it (:func:`_rounded`)."""
    return _rounded(np.asarray(a, np.float64) * 1e6, 4)


def _rounded(a: np.ndarray, nd: int) -> list[float]:
    """``[round(x, nd) for x in a.tolist()]`` (float64 ``a``, shape (n,); ``nd`` in 0..15):
    :func:`schedsim.arrays.py_round` as floats."""
    return py_round(a, nd).tolist()


def _us_array(a: np.ndarray) -> np.ndarray:
    """:func:`_us_list` as a float64 array (shape (n,))."""
    return py_round(np.asarray(a, np.float64) * 1e6, 4)


def _json_values(a: np.ndarray) -> np.ndarray:
    """The JSON text of each value of the numeric array ``a`` (shape (n,)) as :func:`dumps_json` writes it
    (NaN and inf as ``null``), as a bytes array (numpy ``S``; shape (n,)): :func:`_json_items` of its array."""
    return _json_items(dumps_json(np.ascontiguousarray(a)), len(a))


def _json_ints(a: np.ndarray) -> np.ndarray:
    """:func:`_json_values` of the int array ``a`` (shape (n,)); where its values lie in a small range
    (0 <= a < 4n + 64: a trace's processes and threads), each value of the range written once and looked up."""
    n = len(a)
    if n and int(a.min()) >= 0 and int(a.max()) < 4 * n + 64:
        return _json_values(np.arange(int(a.max()) + 1, dtype=np.int64))[a]
    return _json_values(a)


def _json_strs(xs: list[str]) -> np.ndarray:
    """The JSON text of each string of ``xs`` (quotes included) as a bytes array (numpy ``S``; shape (n,)):
    :func:`_json_items` of one :func:`dumps_json` of the list."""
    return _json_items(dumps_json(list(xs)), len(xs))


def _json_items(raw: bytes, n: int) -> np.ndarray:
    """Each of the ``n`` items of the flat JSON array ``raw`` (strings, numbers, nulls: orjson's text) as a bytes
    array (numpy ``S``; shape (n,)), cut out where the compiled ``_cwaves.item_bounds`` finds them (a string to its
    closing quote, stepping over each backslash's escaped byte; any other item to the comma after it).

    Raises
    ------
    ValueError
        ``raw`` is not such an array of ``n`` items.
    """
    from schedsim.sim.loop import compiled_loop

    if not n:
        return np.zeros(0, "S1")
    starts, ends = np.empty(n, np.int64), np.empty(n, np.int64)
    compiled_loop().item_bounds(raw, starts, ends)
    return _cut(np.frombuffer(raw, np.uint8), starts, ends)


def _cut(raw: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The pieces ``raw[starts[i]:ends[i]]`` of ``raw`` (uint8) as a bytes array (numpy ``S`` as wide as the longest
    piece, at least 1; shape (n,)), copied by the compiled ``_cwaves.cut``."""
    from schedsim.sim.loop import compiled_loop

    starts, ends = np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64)
    out = np.zeros(len(starts), f"S{max(int((ends - starts).max()), 1) if len(starts) else 1}")
    compiled_loop().cut(np.ascontiguousarray(raw, np.uint8), starts, ends, out)
    return out


_Piece = bytes | np.ndarray


def _rows_json(pieces: list[_Piece], n: int) -> bytes:
    """``n`` JSON texts joined by commas, row ``i`` the concatenation of each piece's: a ``bytes`` piece is the
    same in every row, an array piece (numpy ``S``, shape (n,)) gives each row its own (``b""``: nothing), without
    its NUL padding (JSON text holds no NUL byte: orjson writes it ``\u0000``). Joined by the compiled
    ``_cwaves.join_rows`` straight into the result (its length counted first), without a matrix of the rows."""
    from schedsim.sim.loop import compiled_loop

    if not n:
        return b""
    return compiled_loop().join_rows([p if isinstance(p, bytes) else np.ascontiguousarray(p) for p in pieces], n)


def _where(mask: np.ndarray, text: np.ndarray | bytes) -> _Piece:
    """``text`` (a bytes array or one bytes value) where ``mask`` (bool, shape (n,)), else ``b""``: as a piece of
    :func:`_rows_json`, ``text`` itself where every row takes it and ``b""`` where none does (no array made)."""
    if mask.all():
        return text
    if not mask.any():
        return b""
    return np.where(mask, text, b"")


def _field(mask: np.ndarray, key: bytes, values: Callable[[], np.ndarray]) -> list[_Piece]:
    """The pieces of an optional field of :func:`_rows_json`'s rows: ``key`` and ``values()`` (the JSON texts of
    every row, shape (n,)) where ``mask`` (bool, shape (n,)); none, ``values`` not called, where no row has it."""
    if not mask.any():
        return []
    return [_where(mask, key), _where(mask, values())]


def _rate_counter(start: np.ndarray, end: np.ndarray, value: np.ndarray) -> list[tuple[float, float]]:
    """:func:`_rate_samples` as ``[(t_s, total)]``."""
    t, v = _rate_samples(start, end, value)
    return list(zip(t.tolist(), v, strict=True))


def _rate_samples(start: np.ndarray, end: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Piecewise-constant sum of ``value`` over running intervals ``[start, end)`` (float64 columns, shape (n,);
    seconds): the times (float64 seconds) and totals at every change. The events (t, ±value) of the intervals with a
    value (not 0) and a length, sorted by (t, delta) and summed in that order (``np.cumsum``: one addition after
    another, the sums a loop over the sorted events makes); a time's sample is the sum after its last event, 0 where
    that is within 1e-9 (relative) of 0 or negative, and dropped where within 1e-9 of the last sample kept (a
    sample equal to the one before it always is: dropped first, without the loop)."""
    keep = (value != 0) & (end > start)
    v = value[keep]
    t = np.concatenate([start[keep], end[keep]])
    d = np.concatenate([v, -v])
    order = np.lexsort((d, t))
    t, d = t[order], d[order]
    cur = np.cumsum(d)
    last = np.ones(len(t), bool)
    last[:-1] = t[1:] != t[:-1]
    val = np.where(np.abs(cur) > 1e-9 * (np.abs(d) + 1), np.where(cur > 0.0, cur, 0.0), 0.0)
    t, val = t[last], val[last]
    new = np.ones(len(val), bool)
    new[1:] = val[1:] != val[:-1]  # within 1e-9 of the last kept whether the one before was kept or not
    t, val = t[new], val[new]
    xs = val.tolist()
    if not (np.abs(val[1:] - val[:-1]) <= 1e-9 * np.maximum(1.0, np.abs(val[1:]))).any():
        return t, xs  # each differs from the one before: every one is kept
    from schedsim.sim.loop import compiled_loop

    held = np.empty(len(val), bool)  # the loop over the samples, compiled (_cwaves.held_samples)
    if compiled_loop().held_samples(np.ascontiguousarray(val, np.float64), held) == len(val):
        return t, xs
    return t[held], val[held].tolist()


def _nesting_rows(spans: list[Span] | Timeline, tol_s: float = 5e-10, cols: SpanColumns | None = None) -> list[int]:
    """Row of each span within its (rank, stream) lane so that the spans of one row nest.

    A simulated stream runs one op at a time, so everything lands in row 0. Measured streams can
    overlap partially (kernels launched with programmatic dependent launch, ranges of two CPU
    threads folded onto one lane, clock jitter); Perfetto drops or mis-nests such slices on one
    thread, so each span goes to the first row where it nests in (or follows) what is open there.
    ``tol_s`` (0.5 ns) absorbs the writer's 0.1 ns rounding. ``cols``: the spans as
    :class:`~schedsim.sim.timeline.SpanColumns`, to find in one pass that every lane runs one span at a time
    (each span, in the order below, starts no earlier than ``tol_s`` before the one before it on its lane
    ended; finite times): then every row is 0, as the walk below gives it. ``spans`` may be the Timeline itself,
    whose rows are then built only for the walk.
    """
    rows = [0] * len(spans)
    if cols is not None and len(spans) > 1 and np.isfinite(cols.start_s).all() and np.isfinite(cols.end_s).all():
        lane = cols.rank.astype(np.int64) * (len(cols.stream[0]) + 1) + cols.stream[1]
        o = np.lexsort((-cols.end_s, cols.start_s, lane))
        same = lane[o][1:] == lane[o][:-1]
        if not (same & (cols.end_s[o][:-1] > cols.start_s[o][1:] + tol_s)).any():
            return rows
    if isinstance(spans, Timeline):
        spans = spans.spans
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

    def __init__(self, prog: Program) -> None:
        ids = prog.ids()
        self._prog, self._ids = prog, ids
        self.graph: dict[str, Any] = {"collectives": {k: [ids[i] for i in m] for k, m in prog.collectives().items()},
                      "p2p": [(ids[a], ids[b]) for a, b in prog.p2p.tolist()]}

    def edges(self, data: bool = False) -> Iterator[tuple[Any, ...]]:
        """``(u, v, {"kind": "stream" | "dep"})`` per edge (``(u, v)`` without ``data``): by source op in program
        order, each source's edges in insertion order (stream edges, then dependencies), an edge that is both
        once, at its first insertion, with kind ``dep`` (what ``DiGraph.add_edges_from`` leaves)."""
        e, dep = self._edge_arrays()
        ids = self._ids
        for (a, b), d in zip(e.tolist(), dep.tolist(), strict=True):
            yield (ids[a], ids[b], {"kind": "dep" if d else "stream"}) if data else (ids[a], ids[b])

    def dep_pairs(self) -> np.ndarray:
        """The edges of kind ``dep`` of :meth:`edges`, in its order, as op indices ((E, 2) int64)."""
        e, dep = self._edge_arrays()
        return e[dep]

    def _edge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`edges` as arrays: ``(E, 2)`` op indices (int64) and whether each is of kind ``dep`` (bool)."""
        prog = self._prog
        e = np.concatenate([prog.stream_edges.reshape(-1, 2), prog.dep_edges.reshape(-1, 2)], dtype=np.int64)
        if not len(e):
            return e, np.zeros(0, bool)
        key = e[:, 0] * max(len(self._ids), 1) + e[:, 1]
        _u, first, inv = np.unique(key, return_index=True, return_inverse=True)
        dep = np.zeros(len(first), bool)
        dep[inv.reshape(-1)[len(prog.stream_edges):]] = True
        order = np.lexsort((first, e[first, 0]))
        return e[first[order]], dep[order]


def chrome_trace(timelines: list[tuple[str, Timeline]], graph: FlowGraph | None = None) -> dict[str, Any]:
    """Trace dict for one or more labelled timelines (e.g. ``[("predicted", a), ("measured", b)]``).

    Each (label, rank) becomes a process, each stream a thread. ``graph`` (the networkx DAG of the
    first timeline, optional) adds dependency and send->recv flows. The events are those
    :func:`write_chrome_trace` writes, its JSON text read back where it builds them as text.
    """
    events: list[dict[str, Any]] = []
    for part in _trace_parts(timelines, graph):
        events.extend(part if isinstance(part, list) else json.loads(b"[" + part + b"]"))
    return {"traceEvents": events, **_trace_rest(timelines)}


def _trace_rest(timelines: list[tuple[str, Timeline]]) -> dict[str, object]:
    """The keys of a trace after ``traceEvents``."""
    return {"displayTimeUnit": "ms", "otherData": {"generator": "schedsim", "timelines": [lbl for lbl, _ in timelines]}}


def _trace_parts(timelines: list[tuple[str, Timeline]], graph: FlowGraph | None = None
                 ) -> Iterator[list[dict[str, object]] | bytes]:
    """:func:`chrome_trace`'s events in order, as lists of dicts and blocks of JSON text (events joined by
    commas), the form :func:`write_chrome_trace` streams."""
    w = _Writer()
    multi = len(timelines) > 1
    by_label = {lbl: tl.by_id() for lbl, tl in timelines} if multi else {}
    pid_base = 0  # processes of later timelines follow those of earlier ones, whatever their rank sets
    for li, (label, tl) in enumerate(timelines):
        w.lanes(tl, label if multi else None, pid_base)
        pid_base += len(w.pid_of)
        w.slices(tl, label, [(ol, d) for ol, d in by_label.items() if ol != label])
        w.host_waits(tl)
        g = graph if li == 0 else None
        if g is not None:
            w.graph_flows(g)
        elif li == 0 or graph is None:
            w.tagged_p2p_flows(tl)
        w.collective_flows(tl, g)
        w.counters(tl)
        pid_base += w.link_counters(tl, label if multi else None, pid_base)
    return w.parts()


def _slice_args(s: Span, label: str, others: list[tuple[str, dict[str, Span]]], solo_us: float,
                ready_us: float) -> dict[str, Any]:
    """A slice's ``args``: op id, kind, resource, the optional numbers (µs; ``solo_us`` and ``ready_us`` are
    ``_us`` of the span's, NaN where it has none), tags, and the op's duration in the other timelines of the
    trace (``<label>_us``)."""
    args: dict[str, Any] = {"op": s.id, "kind": s.kind, "resource": s.resource}
    if s.bytes:
        args["bytes"] = s.bytes
    if s.flops:
        args["flops"] = s.flops
    if s.solo_s is not None:
        args["solo_us"] = solo_us
    if s.ready_s is not None:
        args["ready_us"] = ready_us
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
    """The events of a trace, one timeline at a time: ``pid_of`` (rank → process), ``row_of`` (op id → row of
    the timeline), and per row its (rank, stream) as one number (``lane_row``), its process and thread
    (``pid_row``, ``tid_row``) and the times of a flow's ends
    in it (``out_us``, 5 % into the span; ``in_us``, 5 % before its end) are the current timeline's; flow ids
    run on over all timelines."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []  # the events since the last block of :attr:`blocks`
        self.blocks: list[list[dict[str, object]] | bytes] = []  # the events before them: dicts, or JSON text
        self.flow_id = 0
        self.pid_of: dict[int, int] = {}
        self.row_of: dict[str, int] = {}
        self.row_ids: list[str] = []  # the op id of each row (``row_of`` inverted, when ids are distinct)
        self.lane_row: list[int] = []
        self.pid_row: list[int] = []
        self.tid_row: list[int] = []
        self.out_us: list[float] = []
        self.in_us: list[float] = []
        self._op_row: tuple[ProgramFlows, dict[str, int], np.ndarray] | None = None  # :meth:`_op_rows`
        self._row_text: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # :meth:`row_texts`
        # the four lists above as arrays (int64, int64, float64, float64; shape (rows,)), made with them for
        # :meth:`row_texts`
        self._row_arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def lanes(self, tl: Timeline, label: str | None, pid_base: int) -> None:
        """Process and thread metadata: one process per rank, one thread per stream and nesting row
        (:func:`_nesting_rows`), compute streams first."""
        c = tl.columns
        self._row_text = None
        lane = c.rank.astype(np.int64) * (len(c.stream[0]) + 1) + c.stream[1]  # (rank, stream) as one number
        _u, first, inv = np.unique(lane, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        ranks = sorted(set(c.rank[first].tolist()))
        self.pid_of = {r: pid_base + i for i, r in enumerate(ranks)}
        # each lane's (rank, stream) and the resource of its first span
        keys = list(zip(c.rank[first].tolist(), [c.stream[0][k] for k in c.stream[1][first].tolist()], strict=True))
        res_of = dict(zip(keys, [c.resource[0][k] for k in c.resource[1][first].tolist()], strict=True))
        order = sorted(range(len(keys)), key=lambda u: (keys[u][0], _RES_ORDER.get(res_of[keys[u]], 3), keys[u][1]))
        sub = np.asarray(_nesting_rows(tl, cols=c), np.int64)
        n_sub = np.zeros(len(keys), np.int64)
        np.maximum.at(n_sub, inv, sub + 1)
        for r in ranks:
            pid = self.pid_of[r]
            name = f"{label} rank {r}" if label is not None else f"rank {r}"
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                "args": {"sort_index": pid}})
        tid0 = np.zeros(len(keys), np.int64)  # a lane's first thread; its nesting row j is thread tid0 + j
        per_rank_idx: dict[int, int] = defaultdict(int)
        for u in order:
            r, st = keys[u]
            tid0[u] = per_rank_idx[r] + 1
            for j in range(int(n_sub[u])):
                per_rank_idx[r] += 1
                tid = per_rank_idx[r]
                self.events.append({"ph": "M", "name": "thread_name", "pid": self.pid_of[r], "tid": tid,
                                    "args": {"name": f"{st} ({res_of[(r, st)]})" + (f" #{j + 1}" if j else "")}})
                self.events.append({"ph": "M", "name": "thread_sort_index", "pid": self.pid_of[r], "tid": tid,
                                    "args": {"sort_index": tid}})
        ids = c.id
        self.row_of = dict(zip(ids, range(len(ids)), strict=True))  # a repeated id: its last row
        self.row_ids = ids
        # an op id held by several rows (none in a simulated timeline) takes its last row's thread everywhere
        tid_a = tid0[inv] + sub
        tids: list[int] = tid_a.tolist()
        if len(self.row_of) != len(ids):  # (then ``tid_a`` follows the list)
            tids = [tids[self.row_of[i]] for i in ids]
            tid_a = np.asarray(tids, np.int64)
        self.tid_row = tids
        pid_by_rank = np.zeros(max(ranks) + 1 if ranks else 0, np.int64)  # looked up for every row at once
        pid_by_rank[ranks] = [self.pid_of[r] for r in ranks]
        pid_a = pid_by_rank[c.rank]
        self.pid_row = pid_a.tolist()
        self.lane_row = lane.tolist()
        dur = c.end_s - c.start_s
        out_a, in_a = _us_array(c.start_s + 0.05 * dur), _us_array(c.end_s - 0.05 * dur)
        self.out_us, self.in_us = out_a.tolist(), in_a.tolist()
        self._row_arrays = (pid_a, tid_a, out_a, in_a)

    def host_waits(self, tl: Timeline) -> None:
        """Rule host-wait's spans (``meta["host_waits"]``, :func:`schedsim.sim.host_wait.host_wait_meta`): per rank
        a thread ``host (synchronize)`` with a slice from when the host reached each synchronising call to its
        return, named after the op it issues next."""
        hw = (tl.meta or {}).get("host_waits")
        if not isinstance(hw, dict) or not hw.get("op"):
            return
        named: set[int] = set()
        for op, r, a, b in zip(hw["op"], hw["rank"], hw["from_s"], hw["to_s"], strict=True):
            pid = self.pid_of.get(int(r))
            if pid is None:
                continue
            if pid not in named:
                named.add(pid)
                self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": HOST_TID,
                                    "args": {"name": "host (synchronize)"}})
                self.events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": HOST_TID,
                                    "args": {"sort_index": -1}})
            self.events.append({"ph": "X", "name": "synchronize", "cat": "host", "pid": pid, "tid": HOST_TID,
                                "ts": _us(a), "dur": _us(b - a), "args": {"next_op": op}})

    def slices(self, tl: Timeline, label: str, others: list[tuple[str, dict[str, Span]]]) -> None:
        """One complete event (``ph: "X"``) per span."""
        c = tl.columns
        ts, te = _us_array(c.start_s), _us_array(c.end_s)
        dur = py_round(te - ts, 4)  # round(b - a, 4) of each
        if not others:  # from the columns: the same events without a Span per row
            self._column_slices(c, ts, dur)
            return
        solo, ready = _us_list(c.solo_s), _us_list(c.ready_s)
        for s, pid, tid, a, d, so, re in zip(tl.spans, self.pid_row, self.tid_row, ts.tolist(), dur.tolist(), solo,
                                             ready, strict=True):
            self.events.append({"ph": "X", "name": s.name, "cat": s.resource, "pid": pid, "tid": tid, "ts": a,
                                "dur": d, "args": _slice_args(s, label, others, so, re)})

    def _column_slices(self, c: SpanColumns, ts: np.ndarray, dur: np.ndarray) -> None:
        """:meth:`slices` of a timeline alone in its trace, read from its columns ``c`` as its spans hold them
        (:meth:`~schedsim.sim.timeline.SpanColumns.to_spans`) and written as JSON text; ``args`` as
        :func:`_slice_args` makes them: ``bytes``, ``flops`` where not 0, ``solo_us``, ``ready_us`` where known,
        then the tags (each tagged row's by :func:`dumps_json` of the keys not already there; a row with a key
        that is not a string, which ``str`` could make equal to one there, as its own event dict)."""
        n = len(c)
        pid, tid, _o, _i = self.row_texts()
        res = _json_strs(list(c.resource[0]))[c.resource[1]]
        kind = _json_strs(list(c.kind[0]))[c.kind[1]]
        nbytes, flops = c.bytes, c.flops
        has_b, has_f = nbytes != 0, flops != 0  # NaN too, as Python's truth
        has_solo, has_ready = ~np.isnan(c.solo_s), ~np.isnan(c.ready_s)
        pieces: list[_Piece] = [
            b'{"ph":"X","name":', _json_strs(c.name), b',"cat":', res, b',"pid":', pid, b',"tid":', tid, b',"ts":',
            _json_values(ts), b',"dur":', _json_values(dur), b',"args":{"op":', _json_strs(c.id), b',"kind":', kind,
            b',"resource":', res, *_field(has_b, b',"bytes":', lambda: _json_values(nbytes)),
            *_field(has_f, b',"flops":', lambda: _json_values(flops)),
            *_field(has_solo, b',"solo_us":', lambda: _json_values(_us_array(c.solo_s))),
            *_field(has_ready, b',"ready_us":', lambda: _json_values(_us_array(c.ready_s))), b"}}"]
        tagged = c.tagged_rows()  # the per-row tag dicts made for these rows alone
        if tagged:
            tail, whole = [b""] * n, [b""] * n
            kinds, ress = _decode(c.kind), _decode(c.resource)
            for i, t in zip(tagged, c.tags_of(tagged), strict=True):
                args: dict[str, Any] = {"op": c.id[i], "kind": kinds[i], "resource": ress[i]}
                for key, on, v in (("bytes", has_b, nbytes), ("flops", has_f, flops)):
                    if on[i]:
                        args[key] = float(v[i])
                for key, on, v in (("solo_us", has_solo, c.solo_s), ("ready_us", has_ready, c.ready_s)):
                    if on[i]:
                        args[key] = _us(float(v[i]))
                if all(isinstance(k, str) for k in t):
                    extra = {k: v for k, v in t.items() if k not in args}
                    if extra:
                        tail[i] = b"," + dumps_json(extra)[1:-1]
                    continue
                args.update({str(k): v for k, v in t.items() if k not in args})
                whole[i] = dumps_json({"ph": "X", "name": c.name[i], "cat": ress[i], "pid": self.pid_row[i],
                                       "tid": self.tid_row[i], "ts": float(ts[i]), "dur": float(dur[i]),
                                       "args": args})
            pieces[-1:] = [np.array(tail, "S"), b"}}"]
            if any(whole):
                drop = np.asarray([bool(w) for w in whole])
                pieces = [*(np.where(drop, b"", p) for p in pieces), np.array(whole, "S")]
        self.text(pieces, n)

    def text(self, pieces: list[_Piece], n: int) -> None:
        """``n`` events as JSON text (:func:`_rows_json` of ``pieces``), after the events so far."""
        if n:
            self.blocks += [self.events, _rows_json(pieces, n)]
            self.events = []

    def parts(self) -> Iterator[list[dict[str, object]] | bytes]:
        """The events in order, as lists of dicts and blocks of JSON text (events joined by commas)."""
        yield from self.blocks
        yield self.events

    def row_texts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per row of the current timeline, the JSON text (:func:`_json_values`) of its process, thread, and
        its flows' out and in times (made once per timeline)."""
        if self._row_text is None:
            got, self._row_arrays = self._row_arrays, None  # lanes' arrays: read once, then freed
            if got is None:
                got = (np.asarray(self.pid_row, np.int64), np.asarray(self.tid_row, np.int64),
                       np.asarray(self.out_us, np.float64), np.asarray(self.in_us, np.float64))
            pid, tid, out_us, in_us = got
            self._row_text = (_json_ints(pid), _json_ints(tid), _json_values(out_us), _json_values(in_us))
        return self._row_text

    def flow(self, a: int, b: int, cat: str) -> None:
        """An arrow from 5 % into row ``a`` to 5 % before the end of row ``b``; none when ``b`` ended before
        that."""
        ts_s, ts_f = self.out_us[a], self.in_us[b]
        if ts_s > ts_f:
            return  # b ended before a began: no causal arrow to draw
        self.flow_id += 1
        self.events.append({"ph": "s", "name": cat, "cat": cat, "id": self.flow_id, "pid": self.pid_row[a],
                            "tid": self.tid_row[a], "ts": ts_s})
        self.events.append({"ph": "f", "bp": "e", "name": cat, "cat": cat, "id": self.flow_id,
                            "pid": self.pid_row[b], "tid": self.tid_row[b], "ts": ts_f})

    def graph_flows(self, graph: FlowGraph) -> None:
        """The graph's dependencies across streams or ranks (``dep``) and its send → recv pairs (``p2p``)."""
        row_of, lane = self.row_of, self.lane_row
        if isinstance(graph, ProgramFlows):  # the same flows from arrays (no per-edge tuples and lookups)
            self._dep_flows(graph)
        else:
            for u, v, d in graph.edges(data=True):
                a, b = row_of.get(u), row_of.get(v)
                if a is None or b is None or lane[a] == lane[b] or d.get("kind") == "stream":
                    continue
                self.flow(a, b, "dep")
        for u, v in GraphInfo.of(graph).p2p:
            a, b = row_of.get(u), row_of.get(v)
            if a is not None and b is not None:
                self.flow(a, b, "p2p")

    def _dep_flows(self, graph: ProgramFlows) -> None:
        """:meth:`graph_flows`'s ``dep`` flows of a :class:`ProgramFlows`: its dependency edges whose ends are rows
        on different lanes, each drawn as :meth:`flow` draws it, in the edges' order."""
        pairs = graph.dep_pairs()
        if not len(pairs):
            return
        op_row = self._op_rows(graph)
        a, b = op_row[pairs[:, 0]], op_row[pairs[:, 1]]
        lane = np.asarray(self.lane_row, np.int64)
        keep = (a >= 0) & (b >= 0)
        a, b = a[keep], b[keep]
        keep = lane[a] != lane[b]
        self._flows(a[keep], b[keep], "dep")

    def _op_rows(self, graph: ProgramFlows) -> np.ndarray:
        """Per op of ``graph``'s Program, its row in the current timeline (int64; -1: none), as :attr:`row_of`
        maps its id (made once per timeline and graph)."""
        got = self._op_row
        if got is None or got[0] is not graph or got[1] is not self.row_of:
            row_of, ids = self.row_of, graph._ids
            if len(row_of) == len(ids) == len(self.row_ids) and self.row_ids == ids:  # op k is row k
                got = (graph, row_of, np.arange(len(ids), dtype=np.int64))
            else:
                got = (graph, row_of, np.array([row_of.get(i, -1) for i in ids], np.int64))
            self._op_row = got
        return got[2]

    def _flows(self, a: np.ndarray, b: np.ndarray, cat: str) -> None:
        """:meth:`flow` of each pair of rows ``(a[k], b[k])`` (int arrays) in order: the same events."""
        out_us, in_us = np.asarray(self.out_us, np.float64), np.asarray(self.in_us, np.float64)
        keep = ~(out_us[a] > in_us[b])  # as flow(): none when b ended before a began
        a, b = a[keep], b[keep]
        pid, tid, o, i = self.row_texts()
        fid = _json_values(np.arange(self.flow_id + 1, self.flow_id + 1 + len(a), dtype=np.int64))
        c = dumps_json(cat)
        self.text([b'{"ph":"s","name":' + c + b',"cat":' + c + b',"id":', fid, b',"pid":', pid[a], b',"tid":',
                   tid[a], b',"ts":', o[a], b'},{"ph":"f","bp":"e","name":' + c + b',"cat":' + c + b',"id":', fid,
                   b',"pid":', pid[b], b',"tid":', tid[b], b',"ts":', i[b], b"}"], len(a))
        self.flow_id += len(a)

    def _program_collective_flows(self, graph: ProgramFlows, rank: np.ndarray) -> None:
        """:meth:`collective_flows` of a :class:`ProgramFlows` (collectives keyed once each) from the Program's
        member arrays: per collective (in key order) whose members present here are on two or more ranks, one
        each, first member by rank → each other by rank."""
        prog = graph._prog
        ptr, idx = np.asarray(prog.coll_ptr, np.int64), np.asarray(prog.coll_idx, np.int64)
        G = len(ptr) - 1
        if not len(idx):
            return
        rows = self._op_rows(graph)[idx]
        grp = np.repeat(np.arange(G), np.diff(ptr))
        ok = rows >= 0
        rows, grp = rows[ok], grp[ok]
        rk = rank[rows]
        o = np.lexsort((rk, grp))  # by group, then rank (stable)
        rows, grp, rk = rows[o], grp[o], rk[o]
        bad = np.bincount(grp, minlength=G) < 2
        bad[grp[1:][(grp[1:] == grp[:-1]) & (rk[1:] == rk[:-1])]] = True  # a rank twice: ambiguous
        keep = ~bad[grp]
        rows, grp = rows[keep], grp[keep]
        head = np.ones(len(grp), bool)
        head[1:] = grp[1:] != grp[:-1]
        first = rows[np.flatnonzero(head)][np.cumsum(head) - 1]
        self._flows(first[~head], rows[~head], "collective")

    def tagged_p2p_flows(self, tl: Timeline) -> None:
        """No graph: pair sends and recvs that carry the same message tag (the pipeline block's ``msg``)."""
        ends: dict[str, tuple[list[Span], list[Span]]] = defaultdict(lambda: ([], []))  # (sends, recvs)
        for s in tl.spans:
            if s.kind in P2P_KINDS and s.tags and s.tags.get("msg") is not None:
                ends[str(s.tags["msg"])][0 if KINDS[s.kind].sender else 1].append(s)
        for snd, rcv in ends.values():
            if len(snd) == 1 and len(rcv) == 1:
                self.flow(self.row_of[snd[0].id], self.row_of[rcv[0].id], "p2p")

    def collective_flows(self, tl: Timeline, graph: FlowGraph | None) -> None:
        """First member → every other member of each collective (``collective``)."""
        members: dict[str, list[int]] = defaultdict(list)  # rows
        row_of = self.row_of
        if isinstance(graph, ProgramFlows) and len(set(graph._prog.coll_keys)) == len(graph._prog.coll_keys):
            self._program_collective_flows(graph, np.asarray(tl.columns.rank))
            return
        if graph is not None and "collectives" in graph.graph:
            # the graph's rendezvous: one entry per (name, group), so two groups issuing one name stay apart
            for key, ids in GraphInfo.of(graph).collectives.items():
                members[key] = [row_of[i] for i in ids if i in row_of]
        else:  # no graph: members are the spans of one name, one per rank
            colls = frozenset(_COLLECTIVES)
            for k, s in enumerate(tl.spans):
                if s.kind in colls:
                    members[s.name].append(k)
        rank = tl.columns.rank.tolist()
        for mem in members.values():
            ranks = {rank[m] for m in mem}
            if len(ranks) < 2 or len(mem) != len(ranks):
                continue  # repeated names on one rank: membership is ambiguous
            mem.sort(key=rank.__getitem__)
            for m in mem[1:]:
                self.flow(mem[0], m, "collective")

    def counters(self, tl: Timeline) -> None:
        """Counter tracks per rank (module docstring): memory, GPU share or compute ops, comm bandwidth."""
        mem_meta = (tl.meta or {}).get("memory") or {}
        for r, d in (mem_meta.get("ranks") or {}).items():
            pid = self.pid_of.get(int(r))
            if pid is None:
                continue
            steps = d.get("steps", [])  # an (n, 2) array in the process, pairs when read from timeline.json
            for t, b in steps.tolist() if isinstance(steps, np.ndarray) else steps:
                self.events.append({"ph": "C", "name": "memory allocated (bytes)", "pid": pid, "ts": _us(t),
                                    "args": {"bytes": b}})
        c = tl.columns
        if not len(c):
            return
        ranks, first = np.unique(c.rank, return_index=True)
        by_rank = np.argsort(c.rank, kind="stable")  # each rank's rows in timeline order, ranks ascending
        bounds = np.searchsorted(c.rank[by_rank], ranks)
        res = np.asarray(c.resource[0], dtype=object)[c.resource[1]] if len(c.resource[0]) else np.array([], object)
        for k in np.argsort(first, kind="stable").tolist():  # ranks in order of their first span
            rows = by_rank[bounds[k]:bounds[k + 1] if k + 1 < len(ranks) else len(by_rank)]
            self._rate_counters(self.pid_of[int(ranks[k])], c, rows, res[rows])

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
            steps = ln["steps"]  # an (n, 2) array in the process, pairs when read from timeline.json
            for t, v in steps.tolist() if isinstance(steps, np.ndarray) else steps:
                self.events.append({"ph": "C", "name": track, "pid": pid, "ts": _us(t),
                                    "args": {"GB_per_s": v / 1e9, "utilisation": v / cap if cap > 0 else 0.0}})
        return 1

    def _rate_counters(self, pid: int, c: SpanColumns, rows: np.ndarray, res: np.ndarray) -> None:
        """One rank's compute and comm counters from its rows ``rows`` of the columns ``c`` (``res``: their
        resources)."""
        start, end = c.start_s[rows], c.end_s[rows]
        dur = end - start
        pos = np.where(dur > 0, dur, 1.0)  # the values of zero-length intervals are never read
        compute, solo = res == "compute", c.solo_s[rows]
        comp = compute & ~np.isnan(solo)
        if comp.any():
            share = np.where(dur[comp] > 0, solo[comp] / pos[comp], 0.0)
            t, vs = _rate_samples(start[comp], end[comp], share)
            self._counter(pid, "GPU share in use", "share", t, py_round(np.asarray(vs, np.float64), 6))
        else:  # measured: no solo durations to weigh by, so count the compute ops in flight
            t, vs = _rate_samples(start[compute], end[compute], np.ones(int(compute.sum())))
            self._counter(pid, "compute ops running", "ops", t, np.rint(np.asarray(vs, np.float64)).astype(np.int64))
        nbytes = c.bytes[rows]
        comm = (res == "comm") & (nbytes != 0)
        bw = np.where(dur[comm] > 0, nbytes[comm] / pos[comm], 0.0)
        t, vs = _rate_samples(start[comm], end[comm], bw)
        self._counter(pid, "comm bandwidth in use (B/s)", "bytes_per_s", t,
                      py_round(np.asarray(vs, np.float64), 3))

    def _counter(self, pid: int, name: str, key: str, t: np.ndarray, v: np.ndarray) -> None:
        """One counter track's samples, ``{"ph": "C", "name": name, "pid": pid, "ts": _us(t), "args": {key: v}}``
        per time ``t`` (float64 seconds, shape (k,)) and value ``v`` (shape (k,)), as JSON text."""
        self.text([b'{"ph":"C","name":' + dumps_json(name) + b',"pid":' + dumps_json(pid) + b',"ts":',
                   _json_values(_us_array(t)), b',"args":{' + dumps_json(key) + b":", _json_values(v), b"}}"], len(t))


_CHUNK = 20_000  # events serialised per orjson call: bounds the bytes held at once while writing


def write_chrome_trace(path: str | Path, timelines: list[tuple[str, Timeline]], graph: FlowGraph | None = None
                       ) -> None:
    """Write :func:`chrome_trace` atomically; open the file in ui.perfetto.dev or chrome://tracing.

    The events built as JSON text from the timeline's columns (slices, flows of a Program, rate counters) are
    written as they are; the others are serialised with :func:`~schedsim.io.dumps_json` (orjson) in chunks of
    ``_CHUNK``; all are streamed into the temporary file, so no single JSON string of the whole trace is built.
    """
    # in an output set: its digest as written, not read back; elsewhere a file there that is not a trace schedsim
    # wrote is refused (schedsim.io.claim_file)
    with atomic_writer(path, "wb", digest=True, kind="chrome") as f:
        f.write(b'{"traceEvents":[')
        sep = b""
        for part in _trace_parts(timelines, graph):
            if isinstance(part, bytes):  # a block of events as JSON text: written as it is, not copied after sep
                f.write(sep)
                f.write(part)
                sep = b","
                continue
            for i in range(0, len(part), _CHUNK):
                f.write(sep + dumps_json(part[i:i + _CHUNK])[1:-1])
                sep = b","
        f.write(b"],")
        f.write(dumps_json(_trace_rest(timelines))[1:])
