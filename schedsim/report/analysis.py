"""The text ``schedsim analyze`` prints (:func:`format_report`): the kernel-share and NCCL-volume tables of
:mod:`schedsim.trace.analyze`, then overlap and idle time per rank, the pipeline bubble and the critical path.
"""

from __future__ import annotations

from schedsim.report.summary import _ratio, critical_path_parts, fmt_time, pick_ranks
from schedsim.sim.metrics import Metrics, represented
from schedsim.sim.timeline import Timeline
from schedsim.trace.analyze import kernel_share_table, nccl_volume_table, pipeline_bubbles
from schedsim.trace.common import ImportResult

__all__ = ["format_report"]


def _fmt_t(s: float) -> str:
    return fmt_time(s)


def _kept_devices(devs: list[str], full: bool) -> tuple[list[str], list[str]]:
    """``(devs, the devices whose tables are printed)``: all when ``full`` or at most 4, else the first and
    last 2."""
    return devs, (devs if full or len(devs) <= 4 else devs[:2] + devs[-2:])


def _cap_devices(lines_of: dict[str, list[str]], full: bool, top: int, has_total: bool = True) -> list[str]:
    """Per-device tables: all when ``full``, else the first ``top`` rows of the first and last 2 devices."""
    devs, keep = _kept_devices(list(lines_of), full)
    out: list[str] = []
    for d in keep:
        ls = lines_of[d]
        cut = len(ls) - 1 if has_total and len(ls) >= 2 else len(ls)
        head, rows, tail = ls[:1], ls[1:cut], ls[cut:]
        if not full and len(rows) > top:
            out += head + rows[:top] + [f"  ... {len(rows) - top} more rows (--full)"] + tail
        else:
            out += ls
    if len(keep) < len(devs):
        out.append(f"... {len(devs) - len(keep)} more devices (--full)")
    return out


def _represented_note(tl: Timeline) -> list[str]:
    """A line saying that ``tl`` is a symmetric prediction's (``meta["represented"]``): its spans are those of the
    representative ranks, and the per-rank figures give every rank its representative's."""
    rep = represented(tl)
    return [f"(simulated {len(rep['ranks'])} representative ranks of {rep['of']}: the tables by device hold them "
            "only; the per-rank figures and totals give every rank its representative's; predict --full-ranks "
            "simulates every rank)"] if rep else []


def format_report(res: ImportResult, max_cp: int = 10, full: bool = False, top: int = 10) -> str:
    """The text ``schedsim analyze`` prints: kernel-share and NCCL-volume tables, then overlap/idle per rank
    and the critical path. Control characters in names are escaped (:func:`schedsim.errors.printable`).

    Unless ``full``, each of the two tables keeps its ``top`` largest rows for the first and last two devices,
    and the per-rank table the 3 worst and 3 best ranks (:func:`schedsim.report.summary.pick_ranks`).
    """
    tl = res.timeline
    m = Metrics.of(tl)
    out = [(f"# {tl.schedule}: {len(tl)} spans on {len(m.ranks)} rank(s), "
            f"makespan {_fmt_t(m.makespan_s)}"), *_represented_note(tl), "",
           "## kernel time share (share of the device's first-kernel-start to last-kernel-end window, min/max/avg "
           "in us, name; last line: busy share, any kernel running)"]
    kdevs, kept = _kept_devices(list(res.kernel_rows), full)
    out += kernel_share_table({d: res.kernel_rows[d] for d in kept}, limit=None if full else top)
    if len(kept) < len(kdevs):
        out.append(f"... {len(kdevs) - len(kept)} more devices (--full)")
    out += ["", "## NCCL volume per collective, elements"]
    devs = list(res.kernel_rows) + [d for d in res.nccl_rows if d not in res.kernel_rows]
    nv = {d: nccl_volume_table({d: res.nccl_rows.get(d, [])}, devices=[d]) for d in devs}
    out += _cap_devices(nv, full, top, has_total=False)
    out += ["", "## per rank: busy time, idle time, comm/compute overlap (HTA: overlapped / total comm)"]
    out.append(f"{'rank':>4} {'makespan':>12} {'compute':>12} {'comm':>12} {'copy':>12} {'idle':>12} "
               f"{'exposed comm':>13} {'overlap':>8}")
    rows, left = pick_ranks(list(m.ranks), {r: d.idle_s + d.exposed_comm_s for r, d in m.ranks.items()},
                            full, tie={r: d.exposed_comm_s for r, d in m.ranks.items()})
    for r in rows:
        d = m.ranks[r]
        out.append(f"{r:>4} {_fmt_t(m.makespan_s):>12} {_fmt_t(d.busy_compute_s):>12} "
                   f"{_fmt_t(d.busy_comm_s):>12} {_fmt_t(d.busy_copy_s):>12} {_fmt_t(d.idle_s):>12} "
                   f"{_fmt_t(d.exposed_comm_s):>13} {_ratio(d.overlap_ratio, d.busy_comm_s):>8}")
    if left:
        out.append(f"... {left} more ranks (worst 3 and best 3 by idle + exposed comm shown; --full prints all)")
    out.append(f"all  overlap ratio {_ratio(m.overlap_ratio, m.busy_comm_s)}, exposed comm {_fmt_t(m.exposed_comm_s)}"
               + ("" if m.copy_overlap_ratio is None else f", copy overlap {m.copy_overlap_ratio:.3f}"))
    bub = pipeline_bubbles(tl, m)
    if bub:
        out += ["", "## pipeline bubble per rank (idle fraction of the makespan: no compute op running)"]
        brows, bleft = pick_ranks(list(bub), bub, full)
        out += [f"{r:>4} {bub[r]:.4f}" for r in brows]
        if bleft:
            out.append(f"... {bleft} more ranks (--full)")
        out.append(f"all  {sum(bub.values()) / len(bub):.4f}")
    cp = m.critical_path
    walk = tl.meta.get("critical_path_walk") if isinstance(tl.meta, dict) else None
    out += ["", "## critical path" + (f" (walked back along the {walk})" if walk else
                                      " (last-finishing chain on one rank; cross-rank waits not followed)"
                                      if tl.source == "import" else "")]
    if cp:
        shown = cp if len(cp) <= max_cp else [*cp[: max_cp // 2], "...", *cp[-max_cp // 2:]]
        out.append(f"{len(cp)} ops: {critical_path_parts(m, _fmt_t)}")
        out.append(" -> ".join(shown))
    else:
        out.append("(none)")
    for w in res.warnings:
        out.append(f"warning: {w}")
    from schedsim.errors import printable

    return "\n".join(printable(line) for line in out)  # kernel, range and op names come from the trace
