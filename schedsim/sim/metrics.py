"""Metrics of a timeline (predicted, executed or imported alike).

Definitions (per rank, then summed or averaged over ranks):

* **makespan**: latest end − earliest start.
* **busy compute / busy communication / busy copy**: length of the union of
  that resource's intervals (so concurrent kernels are not double counted).
* **idle**: makespan − length of the union of all intervals.
* **exposed communication**: time when communication runs and no compute does
  (union(comm) minus union(compute)).
* **overlap ratio**: |union(comm) ∩ union(compute)| / |union(comm)|, the share of
  communication time hidden under compute. This is HTA's definition
  (facebookresearch/HolisticTraceAnalysis ``communication_analysis.py``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from schedsim.sim.timeline import Timeline

__all__ = ["merge", "length", "intersect_length", "compute_metrics"]

Interval = tuple[float, float]


def merge(iv: list[Interval]) -> list[Interval]:
    """Union of intervals as a sorted list of disjoint intervals.

    Examples
    --------
    >>> merge([(0, 2), (1, 3), (5, 6)])
    [(0, 3), (5, 6)]
    """
    out: list[Interval] = []
    for a, b in sorted(iv):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def length(iv: list[Interval]) -> float:
    """Total length of disjoint intervals."""
    return sum(b - a for a, b in iv)


def intersect_length(x: list[Interval], y: list[Interval]) -> float:
    """Length of the intersection of two merged interval lists.

    Examples
    --------
    >>> intersect_length([(0, 3)], [(2, 5)])
    1.0
    """
    i = j = 0
    tot = 0.0
    while i < len(x) and j < len(y):
        a = max(x[i][0], y[j][0])
        b = min(x[i][1], y[j][1])
        if b > a:
            tot += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return tot


def compute_metrics(tl: Timeline) -> dict[str, Any]:
    """Makespan, per-rank busy/idle, exposed communication, overlap ratio, critical path.

    Returns
    -------
    dict
        ``makespan_s``; ``ranks``: {rank: {busy_compute_s, busy_comm_s,
        busy_copy_s, idle_s, exposed_comm_s, overlap_ratio, comm_share}};
        ``exposed_comm_s`` and ``busy_comm_s`` summed over ranks;
        ``overlap_ratio`` over all ranks; ``critical_path`` (op ids) and
        ``critical_path_s`` (time on it by resource). ``comm_share`` is
        busy_comm / makespan; ``comm_share_kernel_view`` counts each
        communication op from when its stream reached it (``ready_s``) to its end, as
        nsys shows an NCCL kernel spinning while its peer is late: the "share" column of
        seed 004's ``parser_prof.py``.
    """
    makespan = tl.makespan_s
    per: dict[int, dict[str, list[Interval]]] = defaultdict(lambda: defaultdict(list))
    by_rank_comm: dict[int, list] = defaultdict(list)  # type: ignore[type-arg]
    for s in tl.spans:
        per[s.rank][s.resource].append((s.start_s, s.end_s))
        if s.resource == "comm":
            by_rank_comm[s.rank].append(s)
    ranks: dict[int, dict[str, float]] = {}
    tot_comm = tot_overlap = tot_exposed = 0.0
    for r in sorted(per):
        d = per[r]
        comp = merge(d.get("compute", []))
        comm = merge(d.get("comm", []))
        copy = merge(d.get("copy", []))
        allv = merge(comp + comm + copy)
        # NCCL kernels occupy their stream from when it reaches them (ready) to the end of the transfer,
        # spinning while the peer is late; nsys shows that span as kernel time
        comm_kv = merge([(s.ready_s if s.ready_s is not None else s.start_s, s.end_s)
                         for s in by_rank_comm.get(r, [])])
        lc = length(comm)
        ov = intersect_length(comm, comp)
        ranks[r] = {
            "busy_compute_s": length(comp),
            "busy_comm_s": lc,
            "busy_copy_s": length(copy),
            "idle_s": makespan - length(allv),
            "exposed_comm_s": lc - ov,
            "overlap_ratio": ov / lc if lc > 0 else 0.0,
            "comm_share": lc / makespan if makespan > 0 else 0.0,
            "comm_share_kernel_view": length(comm_kv) / makespan if makespan > 0 else 0.0,
        }
        tot_comm += lc
        tot_overlap += ov
        tot_exposed += lc - ov
    byid = tl.by_id()
    cp_time: dict[str, float] = defaultdict(float)
    for oid in tl.critical_path:
        s = byid.get(oid)
        if s is not None:
            cp_time[s.resource] += s.end_s - s.start_s
    return {
        "makespan_s": makespan,
        "ops": len(tl.spans),
        "busy_comm_s": tot_comm,
        "exposed_comm_s": tot_exposed,
        "overlap_ratio": tot_overlap / tot_comm if tot_comm > 0 else 0.0,
        "ranks": ranks,
        "critical_path": list(tl.critical_path),
        "critical_path_s": dict(cp_time),
    }
