"""The chart set of a run (``predict``, ``analyze``) and the sweep chart.

:func:`write_charts` writes ``gantt.png``/``.svg``, and for pipeline timelines ``pipeline.png``
(the papers' unit-step figure), ``pipeline_time.png`` (the same boxes at their times) and, when
the timeline carries a memory curve (``meta["memory"]``), ``memory.png``. Every makespan label is
the timeline's own ``makespan_s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schedsim.sim.timeline import Timeline

__all__ = ["write_charts", "write_sweep_plot", "draw_sweep"]


def write_charts(outdir: str | Path, tl: Timeline, title: str, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """Write the charts of one timeline into ``outdir``; returns the paths written.

    Reads the timeline's columns (``tl.columns``), never its rows, so a timeline of a million ops is not
    turned into a million Span objects for its charts. ``formats`` are the Gantt's (the others are PNG).
    Where the cyclic GC is paused (``predict``) and nothing is frozen, each figure written is collected
    (:func:`_figures_freed`).
    """
    with _figures_freed() as written:
        return _write_charts(outdir, tl, title, formats, written)


@contextmanager
def _figures_freed() -> Iterator[Callable[[], None]]:
    """A function to call after each figure is written: where the cyclic GC is paused and nothing is frozen
    (``predict``, :func:`schedsim._gc.paused_gc`), a figure (a reference cycle) would otherwise stay until the
    process exits, its boxes and rasters held while the next chart draws. Here what is alive once matplotlib is
    imported is frozen (``gc.freeze``: the collections scan only what the charts made) and each call collects;
    unfrozen at the end. Elsewhere (the GC on, or a caller's freeze) the function does nothing. Measured on pp=32's
    charts: docs/validation.md, "fast38r"."""
    import gc

    if gc.isenabled() or gc.get_freeze_count():
        yield lambda: None
        return
    import matplotlib.figure  # noqa: F401 - the charts' import, here so that the freeze keeps it out of the scans

    def collect() -> None:
        gc.collect()

    gc.freeze()
    try:
        yield collect
    finally:
        gc.unfreeze()


def _write_charts(outdir: str | Path, tl: Timeline, title: str, formats: tuple[str, ...],
                  written: Callable[[], None]) -> list[Path]:
    """:func:`write_charts`, calling ``written()`` after each figure."""
    from schedsim.report.gantt import write_gantt
    from schedsim.report.memory_chart import write_memory_plot
    from schedsim.report.pipeline_chart import pipeline_lanes, write_pipeline

    out = Path(outdir)
    ms = tl.makespan_s * 1e3
    paths = write_gantt(out / "gantt", [(tl.source, tl)], title=f"{title}: makespan {ms:.3f} ms", formats=formats)
    written()
    pinfo = tl.pipeline
    if pinfo is not None or any(t and "stage" in t for t in tl.columns.tags[:5000]):
        sched = f" {pinfo.schedule}" if pinfo is not None and pinfo.schedule else ""
        lanes = pipeline_lanes(tl)  # once for both figures
        paths.append(write_pipeline(out / "pipeline.png", tl, f"{tl.schedule}:{sched} pipeline, numbers = microbatch",
                                    mode="steps", lanes=lanes))
        written()
        paths.append(write_pipeline(out / "pipeline_time.png", tl,
                                    f"{tl.schedule}:{sched} pipeline actions over time", mode="time", lanes=lanes))
        written()
    mem = (tl.meta or {}).get("memory")
    if mem:
        p = pinfo.p if pinfo is not None else 0
        ranks = {int(r): d for r, d in mem["ranks"].items()}
        if p and len(ranks) > p:  # data-parallel replicas repeat the first replica's curves
            ranks = {r: d for r, d in ranks.items() if pinfo is not None and pinfo.first_replica(r)}
        curves = {r: d["steps"] for r, d in ranks.items()}  # (n, 2) arrays, or pairs read from timeline.json
        peaks = {r: (d["peak_bytes"], d["peak_op"] or "start") for r, d in ranks.items()}
        paths.append(write_memory_plot(out / "memory.png", curves, tl.makespan_s,
                                       f"{tl.schedule}: memory allocated per rank (activations, recv/gather "
                                       "buffers)", peaks,
                                       static={r: sum(d.get("static", {}).values()) for r, d in ranks.items()}))
    return paths


def _numeric(vals: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)


def draw_sweep(rows: list[dict[str, Any]], axes: list[tuple[str, list[Any]]], title: str):
    """Makespan (and peak activation memory, when known) against the swept settings.

    The first axis is the x axis: a line over its values when they are all numbers, grouped bars
    when they are categories (schedule names, modes). Every other axis makes one series per value
    combination, named in the legend.
    """
    import numpy as np
    from matplotlib.figure import Figure

    xkey, xvals = axes[0]
    rest = [k for k, _ in axes[1:]]
    series: dict[str, dict[Any, dict[str, Any]]] = {}
    for r in rows:
        name = ", ".join(f"{k}={r['setting'][k]}" for k in rest) or "makespan"
        series.setdefault(name, {})[r["setting"][xkey]] = r
    has_mem = any("peak_memory_bytes" in r for r in rows)
    panels = [("makespan (ms)", lambda r: r["makespan_s"] * 1e3)]
    if has_mem:
        panels.append(("peak activation memory (MiB)", lambda r: r.get("peak_memory_bytes", 0) / 2**20))
    numeric = _numeric(xvals)
    from schedsim.outdir import capped_figsize

    fig = Figure(figsize=capped_figsize(max(7.0, 0.5 * len(xvals) * max(1, len(series)) ** 0.5 + 5),
                                        2.8 * len(panels) + 0.8, 110), dpi=110)
    axs = [fig.add_subplot(len(panels), 1, i + 1) for i in range(len(panels))]
    width = 0.8 / max(1, len(series))
    for ax, (ylabel, val) in zip(axs, panels, strict=False):
        for j, (name, pts) in enumerate(series.items()):
            xs = [x for x in xvals if x in pts]
            ys = [val(pts[x]) for x in xs]
            if numeric:
                ax.plot(xs, ys, marker="o", label=name)
            else:
                pos = np.array([xvals.index(x) for x in xs]) - 0.4 + width * (j + 0.5)
                ax.bar(pos, ys, width=width * 0.95, label=name)
        ax.set_ylabel(ylabel, fontsize=8)
        if not numeric:
            ax.set_xticks(range(len(xvals)))
            ax.set_xticklabels([str(x) for x in xvals], fontsize=8)
        elif len(xvals) > 1 and min(xvals) > 0 and max(xvals) / min(xvals) >= 16:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(xkey, fontsize=8)
        ax.grid(alpha=0.3)
        if len(series) > 1:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
    axs[0].set_title(title, fontsize=9)
    fig.subplots_adjust(left=0.1, right=0.78 if len(series) > 1 else 0.95, hspace=0.45, top=0.9, bottom=0.12)
    return fig


def write_sweep_plot(path: str | Path, rows: list[dict[str, Any]], axes: list[tuple[str, list[Any]]],
                     title: str) -> Path:
    """Draw :func:`draw_sweep` and write it as PNG atomically."""
    from schedsim.report.chart_base import write_figure

    return write_figure(draw_sweep(rows, axes, title), path)
