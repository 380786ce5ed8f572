"""The memory chart: bytes allocated per rank over time (:func:`draw_memory`, :func:`write_memory_plot`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from schedsim.report.chart_base import _cut, _fig, _makespan_labels, _title, write_figure

if TYPE_CHECKING:
    import numpy as np

__all__ = ["draw_memory", "write_memory_plot"]


def draw_memory(curves: Mapping[int, Sequence[Sequence[float]] | np.ndarray], makespan_s: float, title: str = "",
                peaks: dict[int, tuple[float, str]] | None = None, max_ranks: int = 8,
                static: dict[int, float] | None = None):
    """Bytes allocated per rank over time: a step curve per rank, in GiB/MiB.

    ``curves``: rank -> steps, (t_s, bytes) pairs or a float64 array of shape (n, 2) (a memory curve's
    ``steps``, :func:`schedsim.report.memory.steps_array`; the value holds until the next step). Curves are
    drawn as the per-pixel maximum (the envelope), so a free and an allocation a few ns apart do not draw a
    one-pixel spike or dip. Past ``max_ranks`` ranks, the first and last ranks (by peak) are drawn.
    ``peaks``: rank -> (bytes, op id) for the legend. ``static``: rank -> bytes held all step
    (parameters, gradients, optimizer state); the curves then show what lies above it, so the
    activations stay visible next to tens of GiB of weights.
    """
    import numpy as np

    from schedsim.report.memory import steps_array

    static = static or {}
    arrs = {r: steps_array(pts) for r, pts in curves.items()}
    if any(static.values()):
        arrs = {r: a - [0.0, static.get(r, 0.0)] for r, a in arrs.items()}
    arrs = {r: a[np.lexsort((a[:, 1], a[:, 0]))] for r, a in arrs.items()}  # by time, then bytes
    ranks = sorted(arrs)
    if len(ranks) > max_ranks:
        by_peak = sorted(ranks, key=lambda r: -(float(arrs[r][:, 1].max()) if len(arrs[r]) else 0.0))
        ranks = sorted(set(by_peak[: max_ranks // 2] + by_peak[-(max_ranks - max_ranks // 2):]))
    top = max([float(arrs[r][:, 1].max()) for r in ranks if len(arrs[r])] + [1.0])
    unit, uname = (2**30, "GiB") if top >= 2**30 else (2**20, "MiB")
    fig = _fig(12, 3.6)
    ax = fig.add_subplot(111)
    bins = 1000
    end = max(makespan_s, 1e-12)
    edges = np.linspace(0.0, end, bins + 1)
    for r in ranks:
        pts = arrs[r]
        if not len(pts):
            continue
        ts = pts[:, 0]
        vs = pts[:, 1] / unit
        # envelope: max of the values live in each bin (the value at its start and every step inside it)
        idx = np.clip(np.searchsorted(ts, edges[:-1], side="right") - 1, 0, len(vs) - 1)
        env = vs[idx].copy()
        inside = np.clip(np.searchsorted(edges, ts, side="right") - 1, 0, bins - 1)
        np.maximum.at(env, inside, vs)
        lab = f"rank {r}"
        if peaks and r in peaks:
            from schedsim.report.summary import fmt_bytes

            lab += f" (peak {fmt_bytes(peaks[r][0])} at {peaks[r][1]}"
            lab += f"; static {fmt_bytes(static[r])})" if static.get(r) else ")"
        ax.step(np.append(edges[:-1], end) * 1e3, np.append(env, env[-1]), where="post", label=lab, linewidth=1.1)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(f"{'above static state' if any(static.values()) else 'allocated'} ({uname})", fontsize=8)
    ax.set_xlim(0, end * 1e3 * 1.02)
    ax.set_ylim(0, top / unit * 1.12)
    _makespan_labels(ax, [(f"makespan {makespan_s * 1e3:.3f} ms", makespan_s * 1e3)], end * 1e3 * 1.02)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0, frameon=False)
    _title(ax, _cut(title, 200), 1)
    longest = max((len(t.get_text()) for t in ax.get_legend().get_texts()), default=10)
    fig.subplots_adjust(left=0.08, right=max(0.45, 1 - (0.5 + 0.058 * longest) / 12), top=0.82, bottom=0.14)
    return fig


def write_memory_plot(path: str | Path, curves: Mapping[int, Sequence[Sequence[float]] | np.ndarray], makespan_s: float,
                      title: str = "", peaks: dict[int, tuple[float, str]] | None = None,
                      static: dict[int, float] | None = None) -> Path:
    """Draw :func:`draw_memory` and write it as PNG atomically."""
    return write_figure(draw_memory(curves, makespan_s, title, peaks, static=static), path)
