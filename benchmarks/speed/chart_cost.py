"""What ``predict``'s default charts cost on a large run, chart by chart (CPU and wall seconds).

Simulates the schedule once (not timed), imports matplotlib (timed on its own: every run with charts pays it
once; without its artists' property tables where the checkout's command process skips them,
``clicore.lean_artist_docs``), then calls :func:`schedsim.report.charts.write_charts` as ``predict`` does: once
plain (the figures to quote) and once under cProfile, whose cumulative times (inflated ~1.5-2x by the profiler)
say where the time goes: each writer, matplotlib's ``savefig``, and the text drawn. Works on any checkout that has
``write_charts`` (``PYTHONPATH=<tree> python benchmarks/speed/chart_cost.py``), so before/after runs compare.

Usage: python benchmarks/speed/chart_cost.py [FILE.yaml] [--set k=v ...]   (default benchmarks/data/pp8_dp128.yaml)
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import tempfile
import time


def _cum(stats: pstats.Stats, file_part: str, func: str) -> tuple[int, float]:
    """(calls, cumulative seconds) of the functions named ``func`` in files whose path contains ``file_part``."""
    n, t = 0, 0.0
    for (path, _line, name), (_cc, nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name == func and file_part in path:
            n, t = n + nc, t + ct
    return n, t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", nargs="?", default="benchmarks/data/pp8_dp128.yaml")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    a = ap.parse_args()
    gc.disable()  # as predict does
    import schedsim
    import schedsim.clicore as clicore

    if hasattr(clicore, "lean_artist_docs"):  # as the command's process does (a checkout that has it)
        clicore.lean_artist_docs()
    from schedsim.api import load, predict

    print(f"schedsim from {os.path.dirname(schedsim.__file__)}; load average {os.getloadavg()[0]:.2f}")
    overrides = dict(s.split("=", 1) for s in a.sets)
    tl = predict(load(a.file, **{k: int(v) if v.isdigit() else v for k, v in overrides.items()})).timeline
    c0, w0 = time.process_time(), time.perf_counter()
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401

    imp = (time.process_time() - c0, time.perf_counter() - w0)
    from schedsim.report.charts import write_charts

    with tempfile.TemporaryDirectory() as out:
        c0, w0 = time.process_time(), time.perf_counter()
        names = [p.name for p in write_charts(out, tl, "chart_cost")]
        plain = (time.process_time() - c0, time.perf_counter() - w0)
        prof = cProfile.Profile()
        prof.enable()
        write_charts(out, tl, "chart_cost")
        prof.disable()
    st = pstats.Stats(prof)
    print(f"{len(tl):,} ops, {tl.world_size:,} ranks; wrote {', '.join(names)}\n")
    print("| part | CPU s | wall s |\n|---|---:|---:|")
    print(f"| import matplotlib (figure, Agg) | {imp[0]:.2f} | {imp[1]:.2f} |")
    print(f"| write_charts | {plain[0]:.2f} | {plain[1]:.2f} |")
    print("\nUnder cProfile (cumulative seconds, profiler-inflated):\n")
    print("| function | calls | cumulative s |\n|---|---:|---:|")
    for file_part, func in (("charts.py", "write_charts"), ("gantt.py", "write_gantt"), ("gantt.py", "draw_gantt"),
                            ("pipeline_chart.py", "write_pipeline"), ("pipeline_chart.py", "draw_pipeline"),
                            ("pipeline_chart.py", "pipeline_view"), ("pipeline_chart.py", "_steps_by_arrays"),
                            ("memory_chart.py", "write_memory_plot"), ("figure.py", "savefig"),
                            ("chart_png.py", "png_bytes"), ("chart_base.py", "_paint"), ("text.py", "draw"),
                            ("backend_agg.py", "draw_text"), ("chart_base.py", "draw_text"),
                            ("backend_svg.py", "print_svg")):
        n, t = _cum(st, file_part, func)
        if n:
            print(f"| {func} ({file_part}) | {n} | {t:.2f} |")


if __name__ == "__main__":
    main()
