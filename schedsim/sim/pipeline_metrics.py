"""Pipeline metrics of a timeline whose ops carry pipeline tags (``pp_op``, ``stage``, ``mb``, ``phase``).

* **Bubble ratio**, both conventions, per rank and overall:

  - ``bubble_of_ideal`` = idle / ideal compute = (makespan − busy) / busy. With equal
    stage times this is the Megatron paper's (p−1)/m, or (p−1)/(v·m) interleaved
    (Narayanan et al., SC'21, arXiv 2104.04473, §2.2);
  - ``bubble_of_makespan`` = idle fraction of the makespan = 1 − busy / makespan,
    i.e. (p−1)/(m+p−1) for 1F1B (the sail-sg zero-bubble README convention).
    Overall = 1 − Σbusy / (p·makespan), the reference table's definition.

* **Peak activation memory** per rank: a forward of a chunk stores one unit from
  its start; the unit is freed when that chunk's backward finishes (B, or W when
  split), as in the ZB paper's accounting (arXiv 2401.10241). Reported in bytes
  (unit = ``activation_memory_bytes`` of the pipeline block) and in microbatch
  units (chunks / v), with the memory-over-time steps.
* **p2p volume** per rank: bytes sent and received.

The result is a :class:`PipelineMetrics`; :func:`pipeline_metrics` returns its JSON form.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from schedsim.graph.info import PipelineInfo
from schedsim.results import from_dict, to_dict
from schedsim.sim.timeline import Timeline, _decode

__all__ = ["pipeline_metrics", "PipelineMetrics", "Bubble", "P2PBytes"]


@dataclass(frozen=True)
class Bubble:
    """A bubble ratio (fraction) per rank and ``overall``, in one of the two conventions above."""

    per_rank: dict[int, float]
    overall: float


@dataclass(frozen=True)
class P2PBytes:
    """Bytes one rank sent and received by pipeline send/recv."""

    sent: float
    recv: float


@dataclass(frozen=True)
class PipelineMetrics:
    """Pipeline metrics of a timeline (module docstring for the definitions).

    ``info`` is the pipeline block the timeline ran (:attr:`Timeline.pipeline
    <schedsim.sim.timeline.Timeline.pipeline>`: schedule, p, v, m, ``activation_memory_bytes``, ...);
    ``peak_memory_units`` in microbatch units and
    ``peak_memory_bytes`` per rank; ``memory_timeline`` per rank as [(t_s, units)] steps;
    ``p2p_bytes`` per rank.
    """

    info: PipelineInfo
    bubble_of_ideal: Bubble
    bubble_of_makespan: Bubble
    peak_memory_units: dict[int, float]
    peak_memory_bytes: dict[int, float]
    memory_timeline: dict[int, list[tuple[float, float]]] = field(default_factory=dict, kw_only=True)
    p2p_bytes: dict[int, P2PBytes]

    @classmethod
    def of(cls, tl: Timeline) -> PipelineMetrics | None:
        """Compute the pipeline metrics of ``tl``, or None when it has no pipeline (``meta["pipeline"]``)."""
        return _compute(tl)

    def to_dict(self, *, memory_timeline: bool = True) -> dict[str, Any]:
        """The JSON form; without ``memory_timeline`` the per-rank steps are left out (as ``timeline.json``'s
        ``metrics.pipeline`` has it: ``meta.memory`` holds the curve)."""
        d: dict[str, Any] = to_dict(self)
        if not memory_timeline:
            del d["memory_timeline"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PipelineMetrics:
        """Read :meth:`to_dict`'s form back (rank keys may be JSON strings; a missing ``memory_timeline``
        reads as empty).

        Raises
        ------
        KeyError
            A required key is missing.
        """
        return from_dict(cls, d)


def pipeline_metrics(tl: Timeline) -> dict[str, Any] | None:
    """``PipelineMetrics.of(tl).to_dict()``, or None when the timeline has no pipeline ops.

    Returns
    -------
    dict
        ``bubble_of_ideal`` and ``bubble_of_makespan`` (per rank dicts and
        ``overall``), ``peak_memory_units`` / ``peak_memory_bytes`` per rank,
        ``memory_timeline`` per rank as [(t_s, units)], ``p2p_bytes`` per rank
        {"sent", "recv"}, and the pipeline ``info`` (schedule, p, v, m, ...).
    """
    pm = PipelineMetrics.of(tl)
    return None if pm is None else pm.to_dict()


def _compute(tl: Timeline) -> PipelineMetrics | None:
    info = tl.pipeline
    if info is None:
        return None
    v = info.v
    unit_bytes = float(info.activation_memory_bytes)
    makespan = tl.makespan_s
    busy: dict[int, float] = defaultdict(float)
    fwd_start: dict[tuple[int, int, int], float] = {}
    bwd_end: dict[tuple[int, int, int], float] = {}
    sent: dict[int, float] = defaultdict(float)
    recv: dict[int, float] = defaultdict(float)
    c = tl.columns  # the rows' fields as lists (no Span objects), in row order
    rows = zip(c.rank.tolist(), _decode(c.kind), _decode(c.resource), c.start_s.tolist(), c.end_s.tolist(),
               c.bytes.tolist(), c.tags, strict=True)
    ranks = set()
    for rank, kind, resource, start_s, end_s, nbytes, t in rows:
        ranks.add(rank)
        if not t or "pp_op" not in t:
            if resource == "compute":
                busy[rank] += end_s - start_s
            continue
        if kind == "send":
            sent[rank] += nbytes
            continue
        if kind == "recv":
            recv[rank] += nbytes
            continue
        if resource == "compute":
            busy[rank] += end_s - start_s
        if "stage" not in t:
            continue
        key = (rank, int(t["stage"]), int(t["mb"]))
        phase = t.get("phase")
        if phase == "F":
            fwd_start[key] = min(fwd_start.get(key, start_s), start_s)
        elif phase == "W":
            bwd_end[key] = max(bwd_end.get(key, end_s), end_s)
    events: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for key, t0 in fwd_start.items():
        events[key[0]].append((t0, 1))
        if key in bwd_end:
            events[key[0]].append((bwd_end[key], -1))
    peak_units: dict[int, float] = {}
    mem_tl: dict[int, list[tuple[float, float]]] = {}
    for r in sorted(ranks):
        cur = peak = 0
        steps: list[tuple[float, float]] = [(0.0, 0.0)]
        for t0, d in sorted(events.get(r, []), key=lambda e: (e[0], e[1])):  # frees before allocations at a tie
            cur += d
            peak = max(peak, cur)
            steps.append((t0, cur / v))
        peak_units[r] = peak / v
        mem_tl[r] = steps
    per_ideal = {r: ((makespan - busy[r]) / busy[r] if busy[r] > 0 else 0.0) for r in sorted(ranks)}
    per_mk = {r: (1 - busy[r] / makespan if makespan > 0 else 0.0) for r in sorted(ranks)}
    tot_busy = sum(busy[r] for r in ranks)
    n = len(ranks)
    return PipelineMetrics(
        info=info,
        bubble_of_ideal=Bubble(per_ideal, (n * makespan - tot_busy) / tot_busy if tot_busy > 0 else 0.0),
        bubble_of_makespan=Bubble(per_mk, 1 - tot_busy / (n * makespan) if makespan > 0 else 0.0),
        peak_memory_units=peak_units,
        peak_memory_bytes={r: u * v * unit_bytes for r, u in peak_units.items()},
        memory_timeline=mem_tl,
        p2p_bytes={r: P2PBytes(sent[r], recv[r]) for r in sorted(ranks)},
    )
