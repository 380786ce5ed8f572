"""Memory over time per rank, computed from a timeline (and its graph when known) after simulation.

What is counted, in bytes, per rank:

* **activations** of pipeline actions: a forward of (stage, microbatch) stores
  ``activation_memory_bytes`` (the pipeline block's, per stage chunk; a stage's own
  ``stage_activation_memory_bytes`` where the stages hold unequal layer counts) from its start until the end
  of that chunk's weight-gradient work (phase W, or the full backward B), the ZB paper's accounting
  (arXiv 2401.10241 §3); under full recomputation also each checkpointed group's re-run forward, all its
  layers' activations from its first recompute op until the group's backward ends
  (:func:`schedsim.sim.pipeline_metrics.recompute_events`);
* **receive and gather buffers**: a recv, all_gather or gather op holds its ``bytes`` from its start
  until the last of its direct consumers in the graph ends (until its own end when no graph is given
  or nothing consumes it);
* **static state** from a ``transformer:`` pipeline block (:func:`static_memory`): parameters (2 bytes
  each in fp16/bf16), gradients (same dtype) and Adam optimizer state (fp32 master weights, momentum and
  variance: 12 bytes per parameter; mixed-precision Adam as in ZeRO, Rajbhandari et al., SC'20, arXiv
  1910.02054 §3.1), held for the whole step.

Result (``Timeline.meta["memory"]``, written into timeline.json)::

    {"unit": "bytes", "ranks": {rank: {"static": {"parameters": b, "gradients": b, "optimizer": b},
      "steps": [[t_s, bytes], ...], "peak_bytes": b, "peak_s": t, "peak_op": "F0.3.fwd@r0"}}}

In the process each rank's ``steps`` is a float64 array of shape (n, 2) (columns: time s, bytes from that time
on; 16 bytes per step, where a list of two floats took ~130); timeline.json writes it as the list of pairs above,
and a timeline read back from it holds the lists. Readers take either (:func:`steps_array`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from schedsim.sim.timeline import Timeline
from schedsim.units import DTYPE_BYTES

if TYPE_CHECKING:
    import numpy as np

    from schedsim.graph.info import PipelineInfo
    from schedsim.spec.pipeline_block import PipelineSpec

__all__ = ["DagLike", "MemoryCurve", "RankMemory", "memory_over_time", "static_memory", "steps_array"]

_BUFFER_KINDS = {"recv", "all_gather", "gather"}


class RankMemory(TypedDict):
    """One rank's curve (module docstring): ``static`` bytes by kind, ``steps`` (float64, shape (n, 2): time s
    and the bytes from that time on, times ascending and distinct), the peak (bytes), when (s) and the op charged
    with it (``""``: the step's start)."""

    static: dict[str, float]
    steps: np.ndarray
    peak_bytes: float
    peak_s: float
    peak_op: str


class MemoryCurve(TypedDict):
    """:func:`memory_over_time`'s result, ``Timeline.meta["memory"]``: ``unit`` (``bytes``) and each rank's curve."""

    unit: str
    ranks: dict[int, RankMemory]


class EdgeKinds(Protocol):
    """``edges[u, v]``: the attributes of edge ``u`` → ``v`` (``kind``: ``dep`` or ``stream``)."""

    def __getitem__(self, uv: tuple[str, str]) -> Mapping[str, str]: ...


class DagLike(Protocol):
    """What the memory curve reads of a DAG (op ids as nodes): membership, an op's successors and an edge's
    ``kind``; a networkx DiGraph or a :class:`~schedsim.lower.program.DagView` (whose ``prog`` arrays are read
    instead where they are the timeline's)."""

    def __contains__(self, op_id: object) -> bool: ...

    def successors(self, op_id: str) -> Iterable[str]: ...

    @property
    def edges(self) -> EdgeKinds: ...


def static_memory(info: PipelineInfo | None, block: PipelineSpec | None,
                  world_size: int) -> dict[int, dict[str, float]]:
    """Parameters, gradients and optimizer bytes per rank of a ``transformer:`` pipeline block, else {}.

    The parameter count per pipeline rank is the pipeline library's one model,
    ``info.static_memory.params`` (:func:`schedsim.pipeline.memory.static_memory`: layers per stage ×
    parameters per layer, the word and position embeddings on the first stage, the final LayerNorm and
    output layer on the last). Bytes per parameter: the weight and its gradient at the transformer's dtype
    size each, and 12 bytes of fp32 Adam state (master weight, momentum, variance; ZeRO, Rajbhandari et
    al., SC'20, §3.1) when the block has ``optimizer: true`` (without it the step runs no optimizer).
    With bf16/fp16 and an optimizer that is the library's 16 bytes per parameter. A data-parallel
    replica's rank ``r`` holds what pipeline rank ``r mod p`` holds.

    Parameters
    ----------
    info : PipelineInfo or None
        The Program's ``pipeline`` (:attr:`schedsim.lower.Program.pipeline`).
    block : PipelineSpec or None
        The schedule's ``pipeline:`` block (dtype and ``optimizer``).
    world_size : int
        Ranks.

    Returns
    -------
    dict
        rank -> {"parameters", "gradients", "optimizer"} bytes (floats); {} without a transformer.
    """
    if info is None or block is None or info.static_memory is None or block.transformer is None:
        return {}
    e = DTYPE_BYTES.get(str(block.transformer.dtype), 2)
    params = info.static_memory.params
    out = {}
    for rank in range(world_size):
        n = params.get(rank % info.p, 0) if info.p else 0
        out[rank] = {"parameters": float(n * e), "gradients": float(n * e),
                     "optimizer": float(n * 12) if block.optimizer else 0.0}
    return out


#: Events as columns: (rank, time s, order: 0 free / 1 allocation, delta bytes, row of the op it is charged to).
_Events = tuple[Any, Any, Any, Any, Any]


def memory_over_time(tl: Timeline, graph: DagLike | None = None,
                     static: dict[int, dict[str, float]] | None = None) -> MemoryCurve | None:
    """Allocation curve per rank (see the module doc); None when nothing is counted.

    Works on the timeline's columns: events are gathered as arrays and each rank's curve is a cumulative
    sum in the order (time, frees before allocations, delta, op id), the order of :func:`_reference` (the
    per-span form, kept as the definition; ``tests/report/test_memory_columns.py`` holds both equal). With a
    :class:`~schedsim.lower.program.DagView` the buffer ends come from the Program's successor arrays.
    """
    import numpy as np

    info = tl.pipeline
    parts = [e for e in (_activation_events(tl, info), _buffer_events(tl, graph)) if e is not None]
    static = static or {}
    if not parts and not any(sum(v.values()) for v in static.values()):
        return None
    if len(parts) == 1:  # the events as they are (a `rank` ring's 500,000 recvs: 1M events, 38 MiB), not a copy
        ev: list[np.ndarray] = list(parts[0])
    elif parts:
        ev = [np.concatenate([e[k] for e in parts]) for k in range(5)]
    else:
        ev = [np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)]
    del parts
    return {"unit": "bytes", "ranks": _curves(tl, ev, static)}


def _activation_events(tl: Timeline, info: PipelineInfo | None) -> _Events | None:
    """A forward's activations from its start until its chunk's W (or full B) ends, per (rank, stage, mb, chunk):
    the bytes ``info`` gives the stage (:meth:`~schedsim.graph.info.PipelineInfo.activation_memory_of`; a stage
    that stores none gives no event).

    On the columns: a row's phase is its ``phase`` tag, or its ``pp_op`` when it has no (or an empty) phase;
    of the compute rows tagged with a stage, the forwards (phase F) give each key its earliest start (the
    first such row at a tie: the op the allocation is charged to) and the W rows (or B rows not split into
    I + W) its latest end."""
    import numpy as np

    from schedsim.sim.pipeline_metrics import code_is, group_of, recompute_events, tag_ints

    c = tl.columns
    if info is None or not (info.activation_memory_bytes or any(info.stage_activation_memory_bytes.values())) \
            or not len(c):
        return None
    rc = recompute_events(tl)
    phase_vals, phase = c.tag_column("phase")
    op_vals, op = c.tag_column("pp_op")

    def is_(value: str) -> Any:  # the row's phase, falling back to pp_op, equals value
        own = np.array([v == value for v in phase_vals] + [False], bool)[phase]
        told = np.array([bool(v) for v in phase_vals] + [False], bool)[phase]
        return own | (~told & np.array([v == value for v in op_vals] + [False], bool)[op])

    staged = code_is(c.resource, "compute") & (c.tag_column("stage")[1] >= 0)
    f = staged & is_("F")
    b_full = np.array([v == "B" for v in op_vals] + [False], bool)[op]
    w = staged & ~f & (is_("W") | (b_full & ~is_("I")))
    if not f.any():
        return None
    rows = np.flatnonzero(f | w)
    rank = c.rank.astype(np.int64)
    key = (rank[rows], tag_ints(c, "stage")[rows], tag_ints(c, "mb")[rows], tag_ints(c, "chunk", 0)[rows])
    is_f = f[rows]
    # grouped by key, each key's forwards first, by start then row: a key's first row is the forward its
    # allocation is charged to (the first row at the earliest start)
    order = np.lexsort((rows, c.start_s[rows], ~is_f, *key[::-1]))
    rows, is_f = rows[order], is_f[order]
    _same, starts = group_of(*(k[order] for k in key))  # already sorted: group_of's order is the identity
    unit = info.activation_memory_of(key[1][order][starts])  # each key's bytes, by its stage
    has_f = is_f[starts] & (unit != 0)
    w_end = np.maximum.reduceat(np.where(is_f, -np.inf, c.end_s[rows]), starts)  # -inf: the key has no W
    freed = has_f & (w_end > -np.inf)
    first, gone = rows[starts[has_f]], rows[starts[freed]]
    n, m = len(first), len(gone)
    ev = (np.concatenate([rank[first], rank[gone]]),
          np.concatenate([c.start_s[first], w_end[freed]]),
          np.concatenate([np.ones(n, np.int64), np.zeros(m, np.int64)]),
          np.concatenate([unit[has_f], -unit[freed]]),
          np.concatenate([first, gone]))
    if rc is None:
        return ev
    k = len(rc[0])  # the re-run groups: allocated at their recompute, freed at their backward's end
    more = (np.concatenate([rc[0], rc[0]]), np.concatenate([rc[1], rc[2]]),
            np.concatenate([np.ones(k, np.int64), np.zeros(k, np.int64)]), np.concatenate([rc[3], -rc[3]]),
            np.concatenate([rc[4], rc[4]]))
    return tuple(np.concatenate([a, b]) for a, b in zip(ev, more, strict=True))  # type: ignore[return-value]


def _buffer_events(tl: Timeline, graph: DagLike | None) -> _Events | None:
    """A recv/all_gather/gather holds its bytes from its start until :func:`_buffer_ends`."""
    import numpy as np

    c = tl.columns
    kind_vals, kind_codes = c.kind
    bufk = [j for j, k in enumerate(kind_vals) if k in _BUFFER_KINDS]
    rows: Any = np.flatnonzero(np.isin(kind_codes, bufk) & (c.bytes != 0)) if bufk and len(c) else []
    if not len(rows):
        return None
    r, b = c.rank[rows].astype(np.int64), c.bytes[rows].astype(np.float64)
    return (np.concatenate([r, r]), np.concatenate([c.start_s[rows], _buffer_ends(tl, graph, rows)]),
            np.concatenate([np.ones(len(rows), np.int64), np.zeros(len(rows), np.int64)]),
            np.concatenate([b, -b]), np.concatenate([rows, rows]))


def _curves(tl: Timeline, ev: list[np.ndarray], static: dict[int, dict[str, float]]) -> dict[int, RankMemory]:
    """Each rank's steps and peak from the events (rank, time, order, delta, row: :data:`_Events`' columns), in
    the definition's order (:func:`memory_over_time`). ``ev`` is emptied: each column is freed once sorted (five
    columns of the events fewer at the memory curve's peak)."""
    import numpy as np

    from schedsim.lower.program import unique  # not np.unique: it imports numpy.ma

    c = tl.columns
    rk, tt, od, dd, op = ev
    ev.clear()
    # sorted as the (t, order, delta, id) tuples of the definition: by (t, order, delta) here; events equal in
    # all three give the same curve in any order, and only the op a peak is charged to reads their id order
    # (peak_op below), so ids are made for that tie alone, not for every op
    order = _event_order(rk, tt, od, dd)
    rk = rk[order]
    tt = tt[order]
    od = od[order]
    dd = dd[order]
    op = op[order]
    del order
    same = (rk[1:] == rk[:-1]) & (tt[1:] == tt[:-1]) & (od[1:] == od[:-1]) & (dd[1:] == dd[:-1])
    run_head = np.flatnonzero(np.r_[True, ~same]) if len(rk) else np.zeros(0, np.int64)

    def op_at(g: int) -> str:
        """The id of the op charged at event ``g`` in the definition's order: the tie's ids sorted (stable)."""
        k = int(np.searchsorted(run_head, g, side="right")) - 1
        a, b = int(run_head[k]), int(run_head[k + 1]) if k + 1 < len(run_head) else len(rk)
        ids = c.ids_at(op[a:b].tolist())
        return sorted(ids)[g - a]

    bounds = np.searchsorted(rk, np.arange(int(rk.max()) + 2)) if len(rk) else np.zeros(1, np.int64)
    out: dict[int, RankMemory] = {}
    for r in sorted(set(unique(c.rank)[0].tolist()) | set(unique(rk)[0].tolist())):
        base = sum((static.get(r) or {}).values())
        lo, hi = (int(bounds[r]), int(bounds[r + 1])) if r + 1 < len(bounds) else (0, 0)
        ts = np.concatenate(([0.0], tt[lo:hi]))
        vals = np.cumsum(np.concatenate(([base], dd[lo:hi])))
        keep = np.append(ts[1:] != ts[:-1], True)  # the last value at each time
        peak, peak_s, peak_op = base, 0.0, ""
        prev = np.maximum.accumulate(vals)
        at = -1
        for i in (np.flatnonzero(vals[1:] > prev[:-1]) + 1).tolist():  # only a new maximum can raise the peak
            if vals[i] > peak + 1e-6:
                peak, peak_s, at = float(vals[i]), float(ts[i]), lo + i - 1
        if at >= 0:
            peak_op = op_at(at)
        out[r] = {"static": static.get(r, {}), "steps": np.stack([ts[keep], vals[keep]], axis=1),
                  "peak_bytes": peak, "peak_s": peak_s, "peak_op": peak_op}
    return out


def _event_order(rk: np.ndarray, tt: np.ndarray, od: np.ndarray, dd: np.ndarray) -> np.ndarray:
    """``np.lexsort((dd, od, tt, rk))`` (int64 indices): where every allocation (order 1) has a positive delta and
    every free (order 0) a negative one, the deltas alone order them as (order, delta) do, and the ranks (below
    2**15) go last by numpy's stable radix sort of int16 (a `rank` ring's 1M buffer events: 62 → 36 ms)."""
    import numpy as np

    if not len(rk) or not bool((((od == 1) & (dd > 0)) | ((od == 0) & (dd < 0))).all()):  # (a NaN or zero: neither)
        return np.lexsort((dd, od, tt, rk))
    o = np.lexsort((dd, tt))
    r = rk[o]
    small = int(r.min()) >= 0 and int(r.max()) < 2**15
    return o[np.argsort(r.astype(np.int16) if small else r, kind="stable")]


def steps_array(steps: np.ndarray | Sequence[Sequence[float]]) -> np.ndarray:
    """A rank's memory ``steps`` as :class:`RankMemory` holds them (float64, shape (n, 2)), from that array or
    from the list of ``[t_s, bytes]`` pairs timeline.json holds (no copy of a float64 array).

    Raises
    ------
    ValueError
        ``steps`` is not n pairs of numbers.
    """
    import numpy as np

    a = np.asarray(steps, np.float64)
    if a.size == 0:
        return a.reshape(0, 2)
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"memory steps must be [t_s, bytes] pairs, not an array of shape {a.shape}")
    return a


def _buffer_ends(tl: Timeline, graph: DagLike | None, rows: np.ndarray) -> np.ndarray:
    """End (s) of each buffer row: the latest end of its same-rank, non-stream successors and its own."""
    import numpy as np

    c = tl.columns
    end = c.end_s[rows].astype(np.float64)
    if graph is None:
        return end
    prog = getattr(graph, "prog", None)
    same = prog is not None and prog.N == len(c) and (c.named_by(prog.name_id) or list(prog.ids()) == list(c.id))
    if same and prog is not None:  # the dependency edges out of the buffer rows (no successor CSR built)
        at = np.full(prog.N, -1, np.int64)
        at[rows] = np.arange(len(rows))
        e = np.asarray(prog.dep_edges, np.int64).reshape(-1, 2)
        src = at[e[:, 0]]
        ok = np.flatnonzero(src >= 0)
        ok = ok[c.rank[e[ok, 1]] == c.rank[e[ok, 0]]]
        np.maximum.at(end, src[ok], c.end_s[e[ok, 1]])
        return end
    byid = tl.by_id()
    out = end.copy()
    for k, i in enumerate(rows.tolist()):
        oid, r = c.id[i], int(c.rank[i])
        if oid in graph:
            ends = [byid[v].end_s for v in graph.successors(oid)
                    if v in byid and byid[v].rank == r and graph.edges[oid, v].get("kind") != "stream"]
            out[k] = max([*ends, float(end[k])])
    return out


def _reference(tl: Timeline, graph: DagLike | None = None,
               static: dict[int, dict[str, float]] | None = None) -> dict[str, Any] | None:
    """The definition of :func:`memory_over_time`, span by span (kept for the equality tests)."""
    info = tl.pipeline
    unit = float(info.activation_memory_bytes) if info is not None else 0.0
    per_stage = info.stage_activation_memory_bytes if info is not None else {}
    events: dict[int, list[tuple[float, int, float, str]]] = defaultdict(list)  # (t, order, delta, op)
    fwd: dict[tuple[int, int, int, int], tuple[float, str]] = {}
    bwd_end: dict[tuple[int, int, int, int], float] = {}
    byid = tl.by_id() if graph is not None else None
    for s in tl.spans:
        t = s.tags
        if (unit or per_stage) and t and "stage" in t and s.resource == "compute":
            key = (s.rank, int(t["stage"]), int(t["mb"]), int(t.get("chunk", 0) or 0))
            ph = t.get("phase") or t.get("pp_op")
            if ph == "F":
                if key not in fwd or s.start_s < fwd[key][0]:
                    fwd[key] = (s.start_s, s.id)
            elif ph == "W" or (t.get("pp_op") == "B" and ph != "I"):
                bwd_end[key] = max(bwd_end.get(key, s.end_s), s.end_s)
        if s.kind in _BUFFER_KINDS and s.bytes:
            end = s.end_s
            if graph is not None and byid is not None and s.id in graph:
                ends = [byid[v].end_s for v in graph.successors(s.id)
                        if v in byid and byid[v].rank == s.rank and graph.edges[s.id, v].get("kind") != "stream"]
                end = max(ends + [end])
            events[s.rank].append((s.start_s, 1, s.bytes, s.id))
            events[s.rank].append((end, 0, -s.bytes, s.id))
    for key, (t0, op) in fwd.items():
        b = float(per_stage.get(key[1], unit))  # the stage's own bytes where the stages differ
        if not b:
            continue
        events[key[0]].append((t0, 1, b, op))
        if key in bwd_end:
            events[key[0]].append((bwd_end[key], 0, -b, op))
    for r, evs in _reference_recompute(tl).items():
        events[r] += evs
    static = static or {}
    if not events and not any(sum(v.values()) for v in static.values()):
        return None
    ranks_out: dict[int, dict[str, Any]] = {}
    for r in sorted({s.rank for s in tl.spans} | set(events)):
        ranks_out[r] = _reference_curve(events.get(r, []), static.get(r, {}))
    return {"unit": "bytes", "ranks": ranks_out}


def _reference_recompute(tl: Timeline) -> dict[int, list[tuple[float, int, float, str]]]:
    """The re-run groups of :func:`schedsim.sim.pipeline_metrics.recompute_events`, span by span: per rank, the
    events (t, 1 allocation / 0 free, delta bytes, op id) of :func:`_reference`."""
    import re

    from schedsim.sim.pipeline_metrics import _LAYER_OP

    info = tl.pipeline
    g = info.recompute_group_layers if info is not None and info.recompute_layer_bytes else 0
    if info is None or g <= 0:
        return {}
    # per (rank, stage, mb, chunk, group): [first re-run start, its op, backward end, layers re-run]
    groups: dict[tuple[int, ...], list[Any]] = {}
    for s in tl.spans:
        t = s.tags
        if not (t and "stage" in t and s.resource == "compute" and t.get("phase") == "I"):
            continue
        hit = re.search(_LAYER_OP, s.name)
        if hit is None:
            continue
        gk = (s.rank, int(t["stage"]), int(t["mb"]), int(t.get("chunk", 0) or 0), int(hit.group(1)) // g)
        e = groups.setdefault(gk, [float("inf"), "", s.end_s, set()])
        e[2] = max(e[2], s.end_s)
        if hit.group(2):
            e[3].add(int(hit.group(1)))
            if s.start_s < e[0]:
                e[0], e[1] = s.start_s, s.id
    out: dict[int, list[tuple[float, int, float, str]]] = defaultdict(list)
    for key, (t0, op, t1, layers) in groups.items():
        if layers:
            b = len(layers) * float(info.recompute_layer_bytes)
            out[key[0]] += [(t0, 1, b, op), (t1, 0, -b, op)]
    return out


def _reference_curve(events: list[tuple[float, int, float, str]], static: dict[str, float]) -> dict[str, Any]:
    """One rank's curve by the definition: ``events`` (time s, 0 free / 1 allocation, delta bytes, op id) in
    sorted order (frees before allocations at a tie, then by delta and id) added up from the ``static`` bytes."""
    base = sum(static.values())
    cur = base
    steps: list[list[float]] = [[0.0, base]]
    peak, peak_s, peak_op = base, 0.0, ""
    for t0, _o, d, op in sorted(events):
        cur += d
        if steps[-1][0] == t0:
            steps[-1][1] = cur
        else:
            steps.append([t0, cur])
        if cur > peak + 1e-6:
            peak, peak_s, peak_op = cur, t0, op
    return {"static": static, "steps": steps, "peak_bytes": peak, "peak_s": peak_s, "peak_op": peak_op}
