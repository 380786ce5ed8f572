"""Terminal summary tables (rich)."""

from __future__ import annotations

from typing import Any

from schedsim.sim.timeline import Timeline

__all__ = ["print_summary", "fmt_time"]


def fmt_time(s: float) -> str:
    """Human time: µs below 1 ms, ms below 10 s, else s."""
    if abs(s) < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if abs(s) < 10:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.2f} s"


def print_summary(tl: Timeline, metrics: dict[str, Any], console: Any = None, max_cp: int = 12) -> None:
    """Print the header, the per-rank table and the critical path."""
    from rich.console import Console
    from rich.table import Table

    con = console or Console()
    con.print(f"[bold]{tl.schedule}[/bold]  source={tl.source}  profile={tl.profile}  launch={tl.launch}  "
              f"ranks={tl.world_size}  ops={metrics['ops']}")
    con.print(f"makespan [bold]{fmt_time(metrics['makespan_s'])}[/bold]   exposed comm (sum over ranks) "
              f"{fmt_time(metrics['exposed_comm_s'])}   overlap ratio {metrics['overlap_ratio']:.3f}")
    t = Table(title=None, show_lines=False)
    for col in ("rank", "busy compute", "busy comm", "busy copy", "idle", "exposed comm", "overlap", "comm share"):
        t.add_column(col, justify="right")
    for r, d in metrics["ranks"].items():
        t.add_row(str(r), fmt_time(d["busy_compute_s"]), fmt_time(d["busy_comm_s"]), fmt_time(d["busy_copy_s"]),
                  fmt_time(d["idle_s"]), fmt_time(d["exposed_comm_s"]), f"{d['overlap_ratio']:.3f}",
                  f"{d['comm_share']:.3f}")
    con.print(t)
    cp = metrics.get("critical_path", [])
    if cp:
        shown = cp if len(cp) <= max_cp else cp[: max_cp // 2] + ["…"] + cp[-max_cp // 2:]
        parts = ", ".join(f"{k} {fmt_time(v)}" for k, v in metrics.get("critical_path_s", {}).items())
        con.print(f"critical path ({len(cp)} ops; {parts}): " + " → ".join(shown))
