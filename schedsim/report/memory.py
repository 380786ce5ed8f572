"""Memory over time per rank, computed from a timeline (and its graph when known) after simulation.

What is counted, in bytes, per rank:

* **activations** of pipeline actions: a forward of (stage, microbatch) stores
  ``activation_memory_bytes`` (the pipeline block's, per stage chunk) from its start until the end
  of that chunk's weight-gradient work (phase W, or the full backward B), the ZB paper's accounting
  (arXiv 2401.10241 §3);
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
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, NamedTuple

from schedsim.sim.timeline import Timeline
from schedsim.units import DTYPE_BYTES

if TYPE_CHECKING:
    from schedsim.graph.info import PipelineInfo
    from schedsim.spec.pipeline_block import PipelineSpec

__all__ = ["memory_over_time", "static_memory"]

_BUFFER_KINDS = {"recv", "all_gather", "gather"}


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


def _counted_spans(tl: Timeline, unit: float) -> tuple[list[int], list[Any]]:
    """``(rows, spans)``: the spans the loop of :func:`memory_over_time` can count and their row indices, in
    order: buffer kinds with bytes, and (when ``unit``) compute ops with a ``stage`` tag; found on the
    columns, so a million-op timeline without them builds no rows."""
    import numpy as np

    c = tl.columns
    kinds, codes = c.kind
    want = np.isin(codes, [k for k, name in enumerate(kinds) if name in _BUFFER_KINDS]) & (c.bytes != 0)
    if unit:
        res, rcodes = c.resource
        comp = np.flatnonzero(rcodes == (res.index("compute") if "compute" in res else -1))
        tags = c.tags
        want[comp[[bool(tags[i]) and "stage" in tags[i] for i in comp.tolist()]]] = True
    rows = np.flatnonzero(want).tolist()
    if tl._spans is not None:
        return rows, [tl._spans[i] for i in rows]
    return rows, c.rows(rows)


def _dep_ends(tl: Timeline, graph: Any) -> list[float] | None:
    """Per row, the latest end among the op and its dependency successors on its rank (what the loop takes
    from ``graph.successors`` and ``graph.edges``), from the Program's dependency edges, when ``graph`` is the
    :class:`~schedsim.lower.program.DagView` of the Program ``tl`` was simulated from (its rows are the
    Program's ops: the span columns hold that Program's name codes); None otherwise."""
    import numpy as np

    prog, c = getattr(graph, "prog", None), tl.columns
    coded = getattr(c, "_coded", None)
    if prog is None or coded is None or coded[1] is not prog.name_id or len(c) != prog.N:
        return None
    e = np.asarray(prog.dep_edges, np.int64).reshape(-1, 2)
    src, dst = e[:, 0], e[:, 1]
    same = c.rank[src] == c.rank[dst]
    out = c.end_s.copy()
    np.maximum.at(out, src[same], c.end_s[dst[same]])
    return out.tolist()


class _ByRow:
    """What the loop reads of ``tl.by_id()[op_id]`` (``rank``, ``end_s``), from the columns: an id → row
    index, no Span rows."""

    def __init__(self, tl: Timeline) -> None:
        c = tl.columns
        self.row = {oid: i for i, oid in enumerate(c.id)}
        self.ranks, self.ends = c.rank.tolist(), c.end_s.tolist()

    def __contains__(self, oid: object) -> bool:
        return oid in self.row

    def __getitem__(self, oid: str) -> _Row:
        i = self.row[oid]
        return _Row(self.ranks[i], self.ends[i])


class _Row(NamedTuple):
    rank: int
    end_s: float


def _buffer_end(s: Any, graph: Any, byid: Any) -> float:
    """When buffer ``s`` is freed: the latest end of it and of its consumers on its rank (dependency edges of
    ``graph``), its own end without a graph."""
    end = s.end_s
    if graph is not None and byid is not None and s.id in graph:
        ends = [byid[v].end_s for v in graph.successors(s.id)
                if v in byid and byid[v].rank == s.rank and graph.edges[s.id, v].get("kind") != "stream"]
        end = max(ends + [end])
    return end


def memory_over_time(tl: Timeline, graph: Any = None,
                     static: dict[int, dict[str, float]] | None = None) -> dict[str, Any] | None:
    """Allocation curve per rank (see the module doc); None when nothing is counted."""
    info = tl.pipeline
    unit = float(info.activation_memory_bytes) if info is not None else 0.0
    events: dict[int, list[tuple[float, int, float, str]]] = defaultdict(list)  # (t, order, delta, op)
    fwd: dict[tuple[int, int, int, int], tuple[float, str]] = {}
    bwd_end: dict[tuple[int, int, int, int], float] = {}
    rows, spans = _counted_spans(tl, unit)
    dep_end = _dep_ends(tl, graph) if graph is not None and spans else None
    byid = _ByRow(tl) if graph is not None and spans and dep_end is None else None
    for row, s in zip(rows, spans, strict=True):
        t = s.tags
        if unit and t and "stage" in t and s.resource == "compute":
            key = (s.rank, int(t["stage"]), int(t["mb"]), int(t.get("chunk", 0) or 0))
            ph = t.get("phase") or t.get("pp_op")
            if ph == "F":
                if key not in fwd or s.start_s < fwd[key][0]:
                    fwd[key] = (s.start_s, s.id)
            elif ph == "W" or (t.get("pp_op") == "B" and ph != "I"):
                bwd_end[key] = max(bwd_end.get(key, s.end_s), s.end_s)
        if s.kind in _BUFFER_KINDS and s.bytes:
            end = dep_end[row] if dep_end is not None else _buffer_end(s, graph, byid)
            events[s.rank].append((s.start_s, 1, s.bytes, s.id))
            events[s.rank].append((end, 0, -s.bytes, s.id))
    for key, (t0, op) in fwd.items():
        events[key[0]].append((t0, 1, unit, op))
        if key in bwd_end:
            events[key[0]].append((bwd_end[key], 0, -unit, op))
    static = static or {}
    if not events and not any(sum(v.values()) for v in static.values()):
        return None
    ranks_out: dict[int, dict[str, Any]] = {}
    for r in sorted(set(tl.columns.rank.tolist()) | set(events)):
        base = sum((static.get(r) or {}).values())
        cur = base
        steps: list[list[float]] = [[0.0, base]]
        peak, peak_s, peak_op = base, 0.0, ""
        for t0, _o, d, op in sorted(events.get(r, [])):  # frees (order 0) before allocations at a tie
            cur += d
            if steps[-1][0] == t0:
                steps[-1][1] = cur
            else:
                steps.append([t0, cur])
            if cur > peak + 1e-6:
                peak, peak_s, peak_op = cur, t0, op
        ranks_out[r] = {"static": static.get(r, {}), "steps": steps, "peak_bytes": peak, "peak_s": peak_s,
                        "peak_op": peak_op}
    return {"unit": "bytes", "ranks": ranks_out}
