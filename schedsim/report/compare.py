"""The views of a comparison (:mod:`schedsim.compare`): ``compare.json``, ``compare_trace.json`` and the stacked
Gantt chart as one output set (:func:`write_comparison`), and the rich tables people read
(:func:`print_comparison`, :func:`print_op_errors`).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from schedsim.compare import MAKESPAN_LABELS, Comparison, OpErrors, OpRow, as_trace_ids, compare_timelines
from schedsim.io import atomic_write_bytes, dumps_json
from schedsim.sim.timeline import Timeline

if TYPE_CHECKING:
    from rich.console import Console

    from schedsim.report.chrome import ProgramFlows

__all__ = ["write_comparison", "print_comparison", "print_op_errors", "start_differences", "refuse_different_schedules"]


def refuse_different_schedules(pred: Timeline, meas: Timeline, pred_timed: Timeline | None = None) -> None:
    """Refuse to compare timelines of two different schedules (their ``schedule`` names), whose makespan and op
    errors would hold one schedule against another (:func:`schedsim.compare.compare_timelines` only warns). An
    imported timeline is exempt: it is named after its trace file, not the schedule it ran.

    Raises
    ------
    SchedsimError
        ``pred`` (or ``pred_timed``) names another schedule than ``meas`` and neither is an import.
    """
    from schedsim.errors import SchedsimError, printable

    for p, what in ((pred, "PRED"), (pred_timed, "--pred-timed")):
        if p is not None and "import" not in (p.source, meas.source) and p.schedule != meas.schedule:
            raise SchedsimError(
                f"{what} is a timeline of schedule {printable(p.schedule, 80)!r}, MEAS one of "
                f"{printable(meas.schedule, 80)!r}: their errors would hold one schedule against another",
                fix="compare a prediction with a run of the same schedule, or pass --different-schedules if "
                    "the two are meant to differ")


def _graph_of(tl: Timeline) -> ProgramFlows | None:
    """The DAG a predicted timeline was simulated from, rebuilt from its ``meta`` (``file`` and ``set``, which
    ``predict`` records) as the trace reads it (:class:`schedsim.report.chrome.ProgramFlows` of its checked
    Program, no networkx), so the comparison trace can draw dependency arrows; None when the schedule file is
    gone or no longer builds (the trace then has send→recv and collective arrows only)."""
    f = tl.meta.get("file") if isinstance(tl.meta, dict) else None
    if not isinstance(f, str) or not Path(f).is_file():
        return None
    from schedsim.errors import SchedsimError
    from schedsim.lower import lower
    from schedsim.report.chrome import ProgramFlows
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    try:
        prog = lower(load_schedule(Path(f), parse_overrides(list(tl.meta.get("set") or []))))
    except (SchedsimError, OSError):
        return None
    ids = set(tl.columns.ids_at(list(range(min(1000, len(tl))))))
    return ProgramFlows(prog) if ids <= set(prog.ids()) else None  # the file changed: not this timeline's ops


def write_comparison(pred: Timeline, meas: Timeline, outdir: str | Path, *, title: str = "",
                     gantt: bool = True, pred_timed: Timeline | None = None,
                     inputs: Iterable[str | Path] = (), trace: bool | None = None,
                     different_schedules: bool = False) -> tuple[Comparison, list[Path]]:
    """Compare and write ``compare.json``, ``compare_trace.json`` (Perfetto, both timelines; ``trace`` None:
    only up to :data:`schedsim.outdir.TRACE_MAX_OPS` ops in the two, as predict's trace.json)
    and ``compare_gantt.png/svg`` (predicted and measured lanes stacked per rank × stream) into ``outdir``,
    as compare's set of files (:func:`schedsim.outdir.output_set`: all or nothing, replacing only compare's own
    earlier files, never one of ``inputs``). With ``pred_timed`` (:func:`compare_timelines`), the trace and
    the Gantt show it against the measured ops. Timelines of different schedules are refused
    (:func:`refuse_different_schedules`) unless ``different_schedules``.

    Returns
    -------
    (Comparison, list of Path)
        The :func:`compare_timelines` result and the files written.

    Raises
    ------
    SchedsimError
        ``outdir`` is not a folder or holds a file of those names that compare did not write; timelines of
        different schedules (:func:`refuse_different_schedules`).
    """
    from schedsim.outdir import output_set, trace_wanted
    from schedsim.report.chrome import write_chrome_trace

    out = Path(outdir)
    pred, meas = as_trace_ids(pred, meas), as_trace_ids(meas, pred)  # the trace and Gantt under the same ids
    if not different_schedules:
        refuse_different_schedules(pred, meas, pred_timed)
    res = compare_timelines(pred, meas, pred_timed=pred_timed)
    if pred_timed is not None:
        pred = pred_timed
    write_trace, note = trace_wanted(len(pred) + len(meas), trace, "compare_trace.json",
                                     "compare.json has the per-op errors")
    if note:
        print(note, file=sys.stderr)
    names = ["compare.json"] + (["compare_trace.json"] if write_trace else [])
    with output_set(out, "compare", inputs=inputs, expect=names) as stage:
        atomic_write_bytes(stage / names[0], dumps_json(res.to_dict(), indent=True))
        if write_trace:
            write_chrome_trace(stage / names[1], [("predicted", pred), ("measured", meas)], graph=_graph_of(pred))
        if gantt:
            from schedsim.report.gantt import write_gantt

            e = res.makespan.error
            etxt = "n/a" if e is None else f"{e * 100:+.1f}%"
            t = title or (f"{meas.schedule}: predicted {res.makespan.pred_s * 1e3:.3f} ms vs measured timeline "
                          f"{res.makespan.meas_s * 1e3:.3f} ms ({etxt})")
            names += [p.name for p in write_gantt(stage / "compare_gantt", [("predicted", pred), ("measured", meas)],
                                                  title=t)]
    return res, [out / n for n in names]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def print_comparison(res: Comparison, console: Console | None = None) -> None:
    """Print a comparison result as rich tables."""
    from rich.markup import escape
    from rich.table import Table

    from schedsim.report.summary import _clip, _ratio, fmt_time, make_console

    con = console or make_console()
    ms = res.makespan
    con.print(f"[bold]{escape(_clip(str(res.schedule.meas)))}[/bold]  predicted ({res.source.pred}, profile "
              f"{res.profile}, {res.launch.pred}) vs measured ({res.source.meas}, {res.launch.meas})")
    if ms.uninstrumented is not None:  # the verdict first, then the instrumented timeline the per-op rows use
        u = ms.uninstrumented
        con.print(f"makespan (this is the one that counts): predicted [bold]{fmt_time(u.pred_s or ms.pred_s)}"
                  f"[/bold] vs measured [bold]{fmt_time(u.meas_s)}[/bold], the "
                  f"{MAKESPAN_LABELS['uninstrumented']}: error [bold]{_pct(u.error)}[/bold]")
        con.print(f"  and against the measured {MAKESPAN_LABELS['timeline']}: predicted {fmt_time(ms.pred_s)} vs "
                  f"measured {fmt_time(ms.meas_s)}, error {_pct(ms.error)}")
    else:
        con.print(f"makespan: predicted [bold]{fmt_time(ms.pred_s)}[/bold] vs measured [bold]{fmt_time(ms.meas_s)}"
                  f"[/bold] (the measured timeline's; it has no uninstrumented iterations), error "
                  f"[bold]{_pct(ms.error)}[/bold]")
    if res.host_issue:
        shown = sorted(res.host_issue.items(), key=lambda kv: -abs(kv[1].error or 0.0))[:4]
        con.print("host issue of an uninstrumented iteration: " + "; ".join(
            f"rank {r} predicted {fmt_time(d.pred)}, measured {fmt_time(d.meas)} ({_pct(d.error)})" for r, d in shown)
            + ("" if len(res.host_issue) <= 4 else f" (the {len(shown)} ranks furthest off)"))
    hc = res.host_calls
    if hc is not None:
        far = ", ".join(f"{c.id} {fmt_time(c.meas_s)} vs {fmt_time(c.pred_s)}" for c in hc.largest)
        con.print(f"host calls of an uninstrumented iteration, op by op: median |err| "
                  f"{hc.median_abs_error * 100:.1f}% over {hc.n} ops"
                  + (f"; measured longest beyond the prediction: {far}" if far else ""))
    m = res.match
    con.print(f"ops matched by id: {m.matched} (only predicted {m.n_only_pred}, only measured "
              f"{m.n_only_meas}); comparison mode: {m.mode}")
    if res.ops is not None:
        _print_op_errors(con, res.ops)
        if res.source.meas == "import":
            line = start_differences(res.ops.per_op)
            if line:
                con.print(escape(line))
    ov = res.overlap
    if ov is not None:
        # "–" for a side without communication (docs/metrics.md)
        con.print(f"overlap ratio: predicted {_ratio(ov.overlap_ratio.pred, ov.busy_comm_s.pred)}, measured "
                  f"{_ratio(ov.overlap_ratio.meas, ov.busy_comm_s.meas)}; "
                  f"exposed comm (sum over ranks): predicted {fmt_time(ov.exposed_comm_s.pred)}, measured "
                  f"{fmt_time(ov.exposed_comm_s.meas)}")
    t = Table(title="per rank: busy time by resource, predicted / measured")
    for c in ("rank", "compute", "comm", "copy", "idle"):
        t.add_column(c, justify="right")
    for r, row in res.by_rank.items():
        t.add_row(str(r), *[f"{fmt_time(d.pred_s)} / {fmt_time(d.meas_s)}"
                            for d in (row.compute, row.comm, row.copy, row.idle)])
    con.print(t)


def start_differences(rows: list[OpRow]) -> str:
    """One line on where ops start, predicted against an imported trace (a replay of it, say), each side's times
    from its own first start: the median |difference| and the op furthest off, with why a replay can differ there
    (an op replayed earlier than recorded was held in the run by something no trace row records; one replayed later
    by a wait or issue of the replay that the run did not have). Empty without rows.

    >>> r = [OpRow("a@r0", "compute", 0, "s", 0.0, 1.0, 0.0, 1.0, 0.0), OpRow("b@r0", "compute", 0, "s", 1.0, 1.0,
    ...      3.0, 1.0, 0.0)]
    >>> line = start_differences(r)
    >>> line.split("; ")[0]
    'op starts (each side from its first): median |predicted - measured| 1000.000 ms'
    >>> line.split("; ")[1]
    'furthest b@r0, predicted at 1000.000 ms, measured at 3000.000 ms (earlier than recorded: in the run something no \
trace row records held it)'
    """
    if not rows:
        return ""
    from schedsim.report.summary import fmt_time

    p0 = min(r.pred_start_s for r in rows)
    m0 = min(r.meas_start_s for r in rows)
    diffs = [(r.pred_start_s - p0) - (r.meas_start_s - m0) for r in rows]
    k = max(range(len(rows)), key=lambda i: abs(diffs[i]))
    far = rows[k]
    why = ("earlier than recorded: in the run something no trace row records held it" if diffs[k] < 0 else
           "later than recorded: a wait or issue time of the prediction that the run did not have")
    return (f"op starts (each side from its first): median |predicted - measured| "
            f"{fmt_time(statistics.median(abs(d) for d in diffs))}; furthest {far.id}, predicted at "
            f"{fmt_time(far.pred_start_s - p0)}, measured at {fmt_time(far.meas_start_s - m0)}"
            + (f" ({why})" if diffs[k] else ""))


def print_op_errors(o: OpErrors, console: Console | None = None) -> None:
    """Print the per-op lines of a comparison (its span, median and worst error, wait) to ``console`` (rich)."""
    from rich.console import Console

    _print_op_errors(console or Console(), o)


def _print_op_errors(con: Console, o: OpErrors) -> None:
    from rich.markup import escape
    from rich.table import Table

    from schedsim.report.summary import _clip, fmt_time

    w = o.worst
    wtxt = f"{_clip(w.id)} ({_clip(w.kind)}): {fmt_time(w.pred_s)} vs {fmt_time(w.meas_s)}, {_pct(w.error)}" if w \
        else "n/a"
    med = o.median_abs_error
    con.print(f"per-op duration error ({escape(o.span.split(';')[0])}): median |err| "
              f"{'n/a' if med is None else f'{med * 100:.1f}%'}; worst {escape(wtxt)}")
    if o.wait_median_abs_diff_s is not None:
        con.print(f"per-op wait (stream reached -> got the GPU): median |predicted - measured| "
                  f"{fmt_time(o.wait_median_abs_diff_s)}")
    if "timed graph" in o.span:
        con.print("per-op and instrumented makespan: predicted as the timed CUDA graph (every op's span holds "
                  "its timing events, profile launch.graph_timing_event_us)")
    elif "timed eager" in o.span:
        con.print("per-op and instrumented makespan: predicted as the timed eager run (the host time its timing "
                  "events cost per op, measured by this run: meta.timing_host_per_op_us)")
    t = Table(title="by op kind")
    for c in ("kind", "n", "predicted", "measured", "total err", "median |err|"):
        t.add_column(c, justify="right")
    for kind, d in o.by_kind.items():
        mae = d.median_abs_error
        t.add_row(kind, str(d.n), fmt_time(d.pred_total_s), fmt_time(d.meas_total_s), _pct(d.total_error),
                  "n/a" if mae is None else f"{mae * 100:.1f}%")
    con.print(t)
