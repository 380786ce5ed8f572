"""Gantt charts with matplotlib (Agg; pyplot is never imported).

One lane per rank × stream, a colour per op kind, op names where they fit,
time in ms, the makespan as a dashed line and exposed communication (comm with
no compute beside it on that rank) as a red band under each rank's lanes.
"""

from __future__ import annotations

import io
from pathlib import Path

from schedsim.sim.metrics import merge
from schedsim.sim.timeline import Timeline, atomic_write_bytes

__all__ = ["KIND_COLORS", "draw_gantt", "write_gantt"]

KIND_COLORS = {
    "matmul": "#4C72B0",
    "compute": "#8172B2",
    "all_reduce": "#DD8452",
    "all_gather": "#E1A03A",
    "reduce_scatter": "#C44E52",
    "broadcast": "#CC7A8B",
    "reduce": "#B5651D",
    "all_to_all": "#D65F5F",
    "scatter": "#DA8BC3",
    "gather": "#C9A227",
    "send": "#55A868",
    "recv": "#64B5CD",
    "memcpy": "#937860",
    "F": "#4C72B0",
    "B": "#DD8452",
    "I": "#C44E52",
    "W": "#55A868",
}
_OTHER = "#999999"


def _color(kind: str, tags: dict) -> str:  # type: ignore[type-arg]
    phase = tags.get("pp_op") if tags else None
    if phase in KIND_COLORS:
        return KIND_COLORS[phase]
    return KIND_COLORS.get(kind, _OTHER)


def draw_gantt(timelines: list[tuple[str, Timeline]], title: str = "", max_labels: int = 400,  # type: ignore[no-untyped-def]
               min_label_frac: float = 0.035):
    """Return a matplotlib Figure; several labelled timelines are stacked lane by lane."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    lanes: list[tuple[int, str, str]] = []
    lane_keys = []
    for _lbl, tl in timelines:
        for key in tl.lanes():
            if key not in lane_keys:
                lane_keys.append(key)
    lane_keys.sort(key=lambda k: k[0])
    for r, st in lane_keys:
        for lbl, _tl in timelines:
            lanes.append((r, st, lbl))
    ypos = {ln: i for i, ln in enumerate(lanes)}
    n = len(lanes)
    fig = Figure(figsize=(12, max(2.5, 0.45 * n + 1.4)), dpi=110)
    ax = fig.add_subplot(111)
    ends = []
    kinds_used: dict[str, str] = {}
    total = sum(len(tl) for _l, tl in timelines)
    label_ok = total <= max_labels
    for lbl, tl in timelines:
        ms = tl.makespan_s * 1e3
        ends.append(ms)
        # one BrokenBarHCollection per (lane, colour, hatched): thousands of boxes draw in one call
        groups: dict[tuple[int, str, bool], list[tuple[float, float]]] = {}
        for s in tl.spans:
            y = ypos[(s.rank, s.stream, lbl)]
            c = _color(s.kind, s.tags)
            kinds_used.setdefault(s.tags.get("pp_op", s.kind) if s.tags else s.kind, c)
            w = (s.end_s - s.start_s) * 1e3
            chunk = bool(s.tags.get("chunk", 0)) if s.tags else False
            groups.setdefault((y, c, chunk), []).append((s.start_s * 1e3, w))
            if label_ok and ms > 0 and w / ms > min_label_frac:
                text = str(s.tags.get("mb", s.name)) if s.tags and "mb" in s.tags else s.name
                ax.text(s.start_s * 1e3 + w / 2, y, text, ha="center", va="center", fontsize=6, clip_on=True)
        for (y, c, chunk), xr in groups.items():
            ax.broken_barh(xr, (y - 0.35, 0.7), facecolors=c, edgecolor="black", linewidth=0.3,
                           hatch="//" if chunk else None, alpha=0.75 if chunk else 1.0)
        # exposed communication per rank
        per_rank: dict[int, tuple[list, list]] = {}  # type: ignore[type-arg]
        for s in tl.spans:
            comp, comm = per_rank.setdefault(s.rank, ([], []))
            (comm if s.resource == "comm" else comp if s.resource == "compute" else []).append((s.start_s, s.end_s))
        for r, (comp, comm) in per_rank.items():
            rows = [ypos[k] for k in ypos if k[0] == r and k[2] == lbl]
            if not rows:
                continue
            y0 = max(rows) + 0.42
            exposed = [(a * 1e3, (b - a) * 1e3) for a, b in _subtract(merge(comm), merge(comp))]
            if exposed:
                ax.broken_barh(exposed, (y0 - 0.06, 0.12), facecolors="red")
        ax.axvline(ms, color="black", linestyle="--", linewidth=0.8)
        ax.text(ms, -0.9, f" {lbl + ' ' if len(timelines) > 1 else ''}makespan {ms:.3f} ms", fontsize=7, va="bottom")
    ax.set_yticks(range(n))
    ax.set_yticklabels([f"r{r} {st}" + (f" [{lbl}]" if len(timelines) > 1 else "") for r, st, lbl in lanes], fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, max(ends + [1e-6]) * 1.02)
    handles = [Patch(color=c, label=k) for k, c in kinds_used.items()]
    handles.append(Patch(color="red", label="exposed comm"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize=9)
    ax.set_ylim(n - 0.4, -1.0)
    width_in = 12.0
    fig.subplots_adjust(left=min(0.3, 1.3 / width_in + 0.01 * max(len(f"r0 {st}") for _r, st, _l in lanes)),
                        right=0.86, top=1 - 0.45 / fig.get_figheight(), bottom=0.55 / fig.get_figheight())
    return fig


def _subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def write_gantt(path_stem: str | Path, timelines: list[tuple[str, Timeline]], title: str = "",
                formats: tuple[str, ...] = ("png", "svg"), **kw) -> list[Path]:  # type: ignore[no-untyped-def]
    """Draw and write ``<stem>.png`` / ``<stem>.svg`` atomically; returns the paths written.

    Above 20,000 spans the SVG is skipped (it would be tens of MB); use the Perfetto trace instead.
    """
    if sum(len(tl) for _l, tl in timelines) > 20_000:
        formats = tuple(f for f in formats if f != "svg") or ("png",)
    fig = draw_gantt(timelines, title, **kw)
    out = []
    for fmt in formats:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt)
        p = Path(f"{path_stem}.{fmt}")
        atomic_write_bytes(p, buf.getvalue())
        out.append(p)
    return out


def write_memory_plot(path: str | Path, pm: dict, title: str = "") -> Path:  # type: ignore[type-arg]
    """Stored activations over time per rank (microbatch units), written atomically as PNG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.2), dpi=110)
    ax = fig.add_subplot(111)
    for r, steps in pm["memory_timeline"].items():
        xs = [t * 1e3 for t, _ in steps]
        ys = [u for _, u in steps]
        ax.step(xs, ys, where="post", label=f"rank {r} (peak {pm['peak_memory_units'][r]:g})")
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("stored activations (microbatches)")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())
    return Path(path)


def pipeline_view(tl: Timeline) -> Timeline:
    """Paper-style pipeline view: one lane per rank holding its F/I/B/W compute, one box per action.

    The per-op spans of one action (``pp_op``, stage, microbatch, phase) are merged into one box.
    """
    from schedsim.sim.timeline import Span

    boxes: dict[tuple, list] = {}  # type: ignore[type-arg]
    order = []
    for s in tl.spans:
        t = s.tags
        if s.resource != "compute" or not t or "stage" not in t:
            continue
        key = (s.rank, t["pp_op"], t["stage"], t["mb"], t.get("phase"))
        if key not in boxes:
            boxes[key] = [s.start_s, s.end_s, t]
            order.append(key)
        else:
            b = boxes[key]
            b[0] = min(b[0], s.start_s)
            b[1] = max(b[1], s.end_s)
    spans = []
    for key in order:
        r, op, st, mb, phase = key
        a, b, t = boxes[key]
        label = op if op != "B" else "B"
        spans.append(Span(f"{st}{label}{mb}@r{r}", str(mb), r, "pipeline", label, "compute", a, b, tags=dict(t)))
    return Timeline(schedule=tl.schedule, source=tl.source, world_size=tl.world_size, launch=tl.launch,
                    profile=tl.profile, spans=spans)
