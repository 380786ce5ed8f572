"""Terminal summary tables (rich)."""

from __future__ import annotations

from typing import Any

from schedsim.sim.timeline import Timeline

__all__ = ["print_summary", "fmt_time", "make_console"]


def fmt_time(s: float) -> str:
    """Human time: µs below 1 ms, ms below 10 s, else s."""
    if abs(s) < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if abs(s) < 10:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.2f} s"


def make_console() -> Any:
    """A rich Console; when stdout is not a terminal (pipes, CI logs) use 140 columns instead of 80."""
    import sys

    from rich.console import Console

    con = Console() if sys.stdout.isatty() else Console(width=140)

    def broken_pipe() -> None:  # rich's own handler exits 1; a reader that left (`| head`) is not an error
        raise BrokenPipeError

    con.on_broken_pipe = broken_pipe  # type: ignore[method-assign]
    return con


#: Per-rank tables show at most this many rows (first and last halves); every rank is in timeline.json.
MAX_TABLE_RANKS = 32


def _shown(keys: Any, limit: int = MAX_TABLE_RANKS) -> tuple[list[Any], int]:
    """The first and last ``limit // 2`` of ``keys`` and how many were left out (a 100k-rank table is unreadable
    and takes minutes to render)."""
    keys = list(keys)
    if len(keys) <= limit:
        return keys, 0
    return keys[: limit // 2] + keys[-(limit // 2):], len(keys) - limit


def _clip(text: str, n: int = 80) -> str:
    """``text`` cut to ``n`` characters with an ellipsis in the middle (names are shown whole in the files)."""
    return text if len(text) <= n else text[: n // 2 - 1] + "…" + text[-(n // 2):]


def print_summary(tl: Timeline, metrics: dict[str, Any], console: Any = None, max_cp: int = 12) -> None:
    """Print the header, the per-rank table and the critical path."""
    from rich.table import Table

    con = console or make_console()
    from rich.markup import escape  # names are the user's text: "[/x]" must print, not raise MarkupError

    con.print(f"[bold]{escape(str(tl.schedule))}[/bold]  source={escape(str(tl.source))}  "
              f"profile={escape(str(tl.profile))}  launch={escape(str(tl.launch))}  "
              f"ranks={tl.world_size}  ops={metrics['ops']}")
    con.print(f"makespan [bold]{fmt_time(metrics['makespan_s'])}[/bold]   exposed comm (sum over ranks) "
              f"{fmt_time(metrics['exposed_comm_s'])}   overlap ratio {metrics['overlap_ratio']:.3f}")
    t = Table(title=None, show_lines=False)
    for col in ("rank", "busy compute", "busy comm", "busy copy", "idle", "exposed comm", "overlap", "comm share"):
        t.add_column(col, justify="right")
    shown, left_out = _shown(metrics["ranks"])
    for i, r in enumerate(shown):
        d = metrics["ranks"][r]
        if left_out and i == MAX_TABLE_RANKS // 2:
            t.add_row("…", f"{left_out} ranks not shown (all are in timeline.json)", *[""] * 6)
        t.add_row(str(r), fmt_time(d["busy_compute_s"]), fmt_time(d["busy_comm_s"]), fmt_time(d["busy_copy_s"]),
                  fmt_time(d["idle_s"]), fmt_time(d["exposed_comm_s"]), f"{d['overlap_ratio']:.3f}",
                  f"{d['comm_share']:.3f}")
    con.print(t)
    cp = metrics.get("critical_path", [])
    if cp:
        shown = cp if len(cp) <= max_cp else cp[: max_cp // 2] + ["…"] + cp[-max_cp // 2:]
        shown = [escape(_clip(x)) for x in shown]  # rich wraps a 150k-character op name in quadratic time
        parts = ", ".join(f"{k} {fmt_time(v)}" for k, v in metrics.get("critical_path_s", {}).items())
        con.print(f"critical path ({len(cp)} ops; {parts}): " + " → ".join(shown))


def print_pipeline(pm: dict[str, Any], console: Any = None) -> None:
    """Print bubble ratios (both conventions), peak activation memory and p2p volume per rank."""
    from rich.table import Table

    con = console or make_console()
    info = pm["info"]
    from rich.markup import escape

    con.print(f"pipeline {escape(str(info['schedule']))}: p={info['p']} v={info['v']} m={info['m']} p2p={info['p2p']}  "
              f"bubble: {pm['bubble_of_makespan']['overall']:.4f} of makespan (idle fraction), "
              f"{pm['bubble_of_ideal']['overall']:.4f} of ideal compute ((p-1)/m convention)")
    t = Table()
    for col in ("rank", "bubble/makespan", "bubble/ideal", "peak act. (mb units)", "peak act. (MiB)",
                "p2p sent", "p2p recv"):
        t.add_column(col, justify="right")
    shown, left_out = _shown(pm["peak_memory_units"])
    for i, r in enumerate(shown):
        if left_out and i == MAX_TABLE_RANKS // 2:
            t.add_row("…", f"{left_out} ranks not shown", *[""] * 5)
        t.add_row(str(r), f"{pm['bubble_of_makespan']['per_rank'][r]:.4f}", f"{pm['bubble_of_ideal']['per_rank'][r]:.4f}",
                  f"{pm['peak_memory_units'][r]:g}", f"{pm['peak_memory_bytes'][r] / 2**20:.1f}",
                  f"{pm['p2p_bytes'][r]['sent'] / 2**20:.1f} MiB", f"{pm['p2p_bytes'][r]['recv'] / 2**20:.1f} MiB")
    con.print(t)
