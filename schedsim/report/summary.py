"""Terminal summary tables (rich)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from schedsim.sim.timeline import Timeline

if TYPE_CHECKING:
    import numpy as np
    from rich.console import Console

    from schedsim.sim.metrics import Metrics, RankMetrics
    from schedsim.sim.pipeline_metrics import PipelineMetrics

__all__ = ["print_summary", "print_pipeline", "fmt_time", "fmt_bytes", "pick_ranks", "pick_rank_rows", "make_console",
           "critical_path_parts"]


def fmt_time(s: float) -> str:
    """Human time: µs below 1 ms, ms below 10 s, else s."""
    if abs(s) < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if abs(s) < 10:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.2f} s"


def fmt_bytes(b: float) -> str:
    """Human bytes in binary units: B, KiB, MiB, GiB, TiB."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b:.0f} B"


def make_console() -> Console:
    """A rich Console; when stdout is not a terminal (pipes, CI logs) use 140 columns instead of 80, and no
    highlighter where it prints no colors. Emoji codes stay text: an op named ``mm:smile:x`` is printed as
    written, not as "mm😄x"."""
    import sys

    from rich.console import Console

    if sys.stdout.isatty():
        con = Console(emoji=False)
    else:  # without colors the highlighter's styles print nothing: not run (~1% of a cold `predict`)
        con = Console(width=140, emoji=False, highlight=False)
        if con.color_system is not None:  # colors forced on a pipe (FORCE_COLOR): highlighted as on a terminal
            con = Console(width=140, emoji=False)

    def broken_pipe() -> None:  # rich's own handler exits 1; a reader that left (`| head`) is not an error
        raise BrokenPipeError

    con.on_broken_pipe = broken_pipe  # type: ignore[method-assign]
    return con


def _clip(text: str, n: int = 80) -> str:
    """``text`` safe for a terminal (:func:`schedsim.errors.printable`: control characters escaped) and cut to
    ``n`` characters with an ellipsis in the middle (names are shown whole in the files)."""
    from schedsim.errors import printable

    text = printable(text)
    return text if len(text) <= n else text[: n // 2 - 1] + "…" + text[-(n // 2):]


#: Ranks above which the tables show only the worst and best ranks (``--all-ranks`` shows all).
MAX_RANK_ROWS = 8


def pick_ranks(ranks: list[int], score: dict[int, float], all_ranks: bool, k: int = 3,
               tie: dict[int, float] | None = None) -> tuple[list[int], int]:
    """Rows to print: all ranks when few or ``all_ranks``, else the ``k`` worst (highest score) and the
    ``k`` best (lowest). Returns (ranks in print order, ranks left out).

    Scores equal to 9 decimals (1 ns for seconds) tie, so float noise never decides; ties go by ``tie``
    (higher is worse), then by rank.
    """
    if all_ranks or len(ranks) <= MAX_RANK_ROWS:
        return list(ranks), 0
    import numpy as np

    tie = tie or {}
    return pick_rank_rows(np.asarray(ranks, np.int64), np.array([score[r] for r in ranks], np.float64), all_ranks, k,
                          np.array([tie.get(r, 0.0) for r in ranks], np.float64))


def pick_rank_rows(ranks: np.ndarray, score: np.ndarray, all_ranks: bool, k: int = 3,
                   tie: np.ndarray | None = None) -> tuple[list[int], int]:
    """:func:`pick_ranks` of columns: ``ranks`` (int, shape (R,)), each one's ``score`` and ``tie`` (float64,
    shape (R,); ``tie`` default 0). The ranks sorted by (−score, −tie, rank), scores and ties rounded to 9 decimals
    as Python's ``round`` does (:func:`schedsim.arrays.py_round`): the first ``k`` are the worst, the last ``k``
    the best."""
    if all_ranks or len(ranks) <= MAX_RANK_ROWS:
        return ranks.tolist(), 0
    import numpy as np

    from schedsim.arrays import py_round

    t = py_round(tie, 9) if tie is not None else np.zeros(len(ranks))
    order = np.lexsort((ranks, -t, -py_round(score, 9)))  # distinct keys: they end in the rank
    worst = ranks[order[:k]].tolist()
    best = ranks[order[-k:]].tolist()
    rows = worst + [r for r in best if r not in worst]
    return rows, len(ranks) - len(rows)


def print_summary(tl: Timeline, metrics: Metrics, console: Console | None = None, max_cp: int = 12,
                  all_ranks: bool = False, makespan_label: str = "makespan") -> None:
    """Print the header, the per-rank table and the critical path; ``makespan_label`` names the makespan (an
    executed run has several: :func:`schedsim.compare.measured_makespans`).

    Past :data:`MAX_RANK_ROWS` ranks the table holds the 3 worst and 3 best ranks by idle + exposed
    communication time, after a totals row; ``all_ranks`` prints every rank.
    """
    from rich.table import Table

    con = console or make_console()
    from rich.markup import escape  # names are the user's text: "[/x]" must print, not raise MarkupError

    con.print(f"[bold]{escape(_clip(str(tl.schedule)))}[/bold]  source={escape(_clip(str(tl.source)))}  "
              f"profile={escape(_clip(str(tl.profile)))}  launch={escape(_clip(str(tl.launch)))}  "
              f"ranks={tl.world_size}  ops={metrics.ops}")
    con.print(f"{escape(makespan_label)} [bold]{fmt_time(metrics.makespan_s)}[/bold]   exposed comm (sum over ranks) "
              f"{fmt_time(metrics.exposed_comm_s)}   overlap ratio {_ratio(metrics.overlap_ratio, metrics.busy_comm_s)}"
              + ("" if metrics.copy_overlap_ratio is None else f"   copy overlap {metrics.copy_overlap_ratio:.3f}"))
    t = Table(title=None, show_lines=False)
    copies = metrics.copy_overlap_ratio is not None
    cols = ["rank", "busy compute", "busy comm", "busy copy", "idle", "compute idle", "exposed comm", "overlap"]
    for col in cols + (["copy overlap"] if copies else []) + ["comm share"]:
        t.add_column(col, justify="right")
    from schedsim.sim.metrics import RankColumns

    ranks = metrics.ranks
    rc = RankColumns.of(ranks)
    ms = metrics.makespan_s
    ex = rc.cols["exposed_comm_s"]
    rows, left = pick_rank_rows(rc.ranks, rc.cols["idle_s"] + ex, all_ranks, tie=ex)
    keys = ("busy_compute_s", "busy_comm_s", "busy_copy_s", "idle_s", "compute_idle_s", "exposed_comm_s")

    def val(d: RankMetrics, k: str) -> float:
        return float(d.compute_idle_s(ms) if k == "compute_idle_s" else getattr(d, k))

    if left:
        n = len(ranks)
        # summed in rank order, as floats add one by one
        tot = {k: sum((ms - rc.cols["busy_compute_s"] if k == "compute_idle_s" else rc.cols[k]).tolist())
               for k in keys}
        t.add_row(f"mean of {n}", *[fmt_time(tot[k] / n) for k in keys],
                  _ratio(metrics.overlap_ratio, metrics.busy_comm_s),
                  *([_ratio(metrics.copy_overlap_ratio, 1.0)] if copies else []), "", end_section=True)
    for i, r in enumerate(rows):
        d = ranks[r]
        tag = "" if not left else (" worst" if i < 3 else " best")
        t.add_row(f"{r}{tag}", *[fmt_time(val(d, k)) for k in keys], _ratio(d.overlap_ratio, d.busy_comm_s),
                  *([_ratio(d.copy_overlap_ratio, 1.0)] if copies else []), f"{d.comm_share:.3f}")
    con.print(t)
    con.print("idle: nothing runs on the rank; compute idle: no compute runs (the pipeline bubble); overlap: share "
              "of comm under compute (– without comm); definitions in docs/metrics.md")
    if left:
        con.print(f"({left} more ranks; worst/best by idle + exposed comm, then exposed comm; --all-ranks prints all)")
    cp = metrics.critical_path
    if cp:
        shown = cp if len(cp) <= max_cp else [*cp[: max_cp // 2], "…", *cp[-max_cp // 2:]]
        shown = [escape(_clip(x)) for x in shown]  # rich wraps a 150k-character op name in quadratic time
        from schedsim.sim.metrics import critical_path_host

        host = critical_path_host(tl)
        if host:  # the host calls the first op waited for: the first and last of them
            calls = [escape(_clip(x)) for x in (host if len(host) <= 2 else [host[0], "…", host[-1]])]
            shown = [f"host calls ({len(host)}: {' → '.join(calls)})", *shown]
        con.print(f"critical path ({len(cp)} ops; {critical_path_parts(metrics, fmt_time)}): " + " → ".join(shown))


def _ratio(x: float | None, of: float) -> str:
    """A ratio to 3 decimals, or "–" where it is undefined (``of``, its denominator, is 0, or ``x`` is None)."""
    return "–" if x is None or of <= 0 else f"{x:.3f}"


def critical_path_parts(metrics: Metrics, fmt: Callable[[float], str]) -> str:
    """The critical path's time by segment kind (``Metrics.critical_path_s``, labelled as
    :data:`schedsim.sim.metrics.SEGMENT_LABELS` names them) and their sum, the makespan, formatted by ``fmt``
    (seconds → text)."""
    from schedsim.sim.metrics import SEGMENT_LABELS

    parts = ", ".join(f"{SEGMENT_LABELS.get(k, k)} {fmt(v)}" for k, v in metrics.critical_path_s.items())
    return f"{parts}; sum {fmt(sum(metrics.critical_path_s.values()))} = makespan"


def print_pipeline(pm: PipelineMetrics, console: Console | None = None, all_ranks: bool = False) -> None:
    """Print bubble ratios (both conventions), peak activation memory and p2p volume per rank
    (past :data:`MAX_RANK_ROWS` ranks the 3 with the largest and smallest bubble, unless ``all_ranks``)."""
    from rich.table import Table

    con = console or make_console()
    info = pm.info
    from rich.markup import escape

    con.print(f"pipeline {escape(_clip(str(info.schedule)))}: p={info.p} v={info.v} m={info.m} p2p={info.p2p}  "
              f"bubble: {pm.bubble_of_makespan.overall:.4f} of makespan (compute idle fraction), "
              f"{pm.bubble_of_ideal.overall:.4f} of ideal compute ((p-1)/m convention)")
    t = Table()
    for col in ("rank", "bubble/makespan", "bubble/ideal", "peak act. (mb units)", "peak act. (MiB)",
                "p2p sent", "p2p recv"):
        t.add_column(col, justify="right")
    rows, left = pick_ranks(list(pm.peak_memory_units), pm.bubble_of_makespan.per_rank, all_ranks,
                            tie=pm.peak_memory_units)
    for r in rows:
        t.add_row(str(r), f"{pm.bubble_of_makespan.per_rank[r]:.4f}", f"{pm.bubble_of_ideal.per_rank[r]:.4f}",
                  f"{pm.peak_memory_units[r]:g}", f"{pm.peak_memory_bytes[r] / 2**20:.1f}",
                  f"{pm.p2p_bytes[r].sent / 2**20:.1f} MiB", f"{pm.p2p_bytes[r].recv / 2**20:.1f} MiB")
    con.print(t)
    if left:
        con.print(f"({left} more ranks; largest/smallest bubble, then peak memory; --all-ranks prints all)")
