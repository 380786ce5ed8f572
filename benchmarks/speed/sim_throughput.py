"""Simulator throughput on generated DAGs, and the cold start of `schedsim predict`.

Usage: python benchmarks/speed/sim_throughput.py [--sizes 10000 100000 1000000] [--repeat 3] [--gpu-model waves replay]

Each input: ``benchmarks/data/overlap_gen.yaml`` on 8 ranks, lowered to a Program; per rank a compute stream and
a comm stream, chunks of (matmul -> all_reduce over all ranks) with the matmul of chunk i+1 overlapping the
all_reduce of chunk i. Prints ops simulated per second (simulate() only: preparation + event loop + timeline),
the time to lower the schedule, and the predict cold start measured as wall time of fresh
`python -m schedsim predict` processes (median of 5).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from schedsim.hardware.profile import load_profile  # noqa: E402
from schedsim.lower import Program, lower  # noqa: E402
from schedsim.sim.engine import simulate  # noqa: E402
from schedsim.spec.loader import load_schedule  # noqa: E402


def make_dag(n_ops: int, world: int = 8) -> Program:
    """The Program of ``benchmarks/data/overlap_gen.yaml`` with about ``n_ops`` op instances on ``world`` ranks."""
    return lower(load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml",
                               {"world_size": world, "chunks": max(1, n_ops // (2 * world))}))


def cold_start(args: list[str], n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "schedsim", *args], cwd=ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cold-start", action="store_true")
    ap.add_argument("--gpu-model", nargs="*", default=["waves", "replay"], choices=["waves", "replay"])
    a = ap.parse_args()
    prof = load_profile("h200")
    print(f"{'ops':>10} {'model':>8} {'lower (s)':>14} {'simulate (s, median)':>21} {'ops/s':>12}")
    import gc

    for n in a.sizes:
        t0 = time.perf_counter()
        gc.disable()
        G = make_dag(n)
        gc.enable()
        tb = time.perf_counter() - t0
        for model in a.gpu_model:
            ts = []
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                tl = simulate(G, prof, gpu_model=model)
                ts.append(time.perf_counter() - t0)
            med = statistics.median(ts)
            print(f"{G.N:>10} {model:>8} {tb:>14.2f} {med:>21.2f} {G.N / med:>12,.0f}")
            del tl
        del G
    if not a.no_cold_start:
        out = "/tmp/schedsim_bench_out"
        print("\npredict cold start (fresh process, median of 5):")
        for label, extra in [("table + timeline.json + trace.json (--no-gantt)", ["--no-gantt"]),
                             ("table + JSON + trace + gantt.png/svg (default)", [])]:
            t = cold_start(["predict", "schedules/allgather_mm8.yaml", "--out", out, *extra])
            print(f"  {label:55s} {t:6.2f} s")
        print(f"  {'check only':55s} {cold_start(['check', 'schedules/allgather_mm8.yaml']):6.2f} s")


if __name__ == "__main__":
    main()
