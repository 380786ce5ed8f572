"""Where the CPU time of a large ``predict`` goes, stage by stage (issue 11's breakdown, re-measured).

Runs the stages of ``schedsim predict --no-gantt`` in this process, with the cyclic GC paused as the CLI
does, and prints CPU seconds (``time.process_time``, this process only) and µs per op for each:
load (YAML → spec), lower and check (op columns and DAG arrays, :func:`schedsim.lower.lower`, with the static checks
as ``predict`` runs them: a Program linked as rank 0's ops on every rank checks its forward dependencies alone),
simulate (the engine: the Program's columns → the compiled ``waves`` loop's arrays, the loop, the
timeline columns; no per-op objects), timeline columns (a no-op since the engine builds columns), metrics,
timeline.json, and the teardown (freeing the per-op Python objects). With ``--profile`` it also prints the
top functions by own time under cProfile (which inflates pure-Python code ~2×).

Usage: python benchmarks/speed/where_time_goes.py [--world 64 --chunks 7813] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# as the CLI starts (schedsim.cli.main): numpy's OpenBLAS with one thread, whose pool would otherwise spin on
# the other cores at import and count in this process's CPU time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def stages(world: int, chunks: int) -> list[tuple[str, float]]:
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.sim.metrics import compute_metrics
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    out: list[tuple[str, float]] = []
    c = time.process_time()

    def mark(label: str) -> None:
        nonlocal c
        now = time.process_time()
        out.append((label, now - c))
        c = now

    spec = load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml",
                         parse_overrides([f"world_size={world}", f"chunks={chunks}"]))
    prof = load_profile("h200")
    mark("load YAML → spec")
    prog = lower(spec)
    mark("lower and check (op columns, the DAG arrays, the static checks as predict runs them)")
    tl = simulate(prog, prof)
    mark("simulate (Program columns → compiled loop → timeline columns)")
    tl.columns
    mark("timeline columns (built by the engine)")
    m = compute_metrics(tl)
    mark("metrics (vectorised)")
    with tempfile.TemporaryDirectory() as d:
        tl.write_json(f"{d}/timeline.json", m)
        mark("timeline.json (orjson, columns)")
    del prog, tl, spec
    mark("teardown (free the per-op objects)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=7813)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    ops = 2 * a.world * a.chunks
    gc.disable()
    if a.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        stages(a.world, a.chunks)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)
        return
    rows = stages(a.world, a.chunks)
    total = sum(t for _, t in rows)
    print(f"{ops:,} ops on {a.world} ranks (overlap_gen.yaml), CPU seconds of this process:\n")
    print("| stage | CPU s | µs/op | share |")
    print("|---|---:|---:|---:|")
    for label, t in rows:
        print(f"| {label} | {t:.2f} | {t / ops * 1e6:.2f} | {t / total:.0%} |")
    print(f"| total | {total:.2f} | {total / ops * 1e6:.2f} | |")


if __name__ == "__main__":
    main()
