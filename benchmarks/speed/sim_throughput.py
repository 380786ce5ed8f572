"""Simulator throughput on generated DAGs, and the cold start of `schedsim predict`.

Usage: python benchmarks/speed/sim_throughput.py [--sizes 10000 100000 1000000] [--repeat 3] [--gpu-model waves sharing]

Each DAG: 8 ranks; per rank a compute stream and a comm stream. Every rank runs
chunks of (matmul -> all_reduce over all ranks) with the matmul of chunk i+1
overlapping the all_reduce of chunk i, plus a send/recv ring every 8 chunks.
Prints ops simulated per second (simulate() only: compile + event loop +
timeline), the time to build the DAG, and the predict cold start measured as
wall time of fresh `python -m schedsim predict` processes (median of 5).
The `waves` model runs its compiled event loop when built; `SCHEDSIM_NO_EXT=1` times the Python loop.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from schedsim.graph.ops import Op  # noqa: E402
from schedsim.hardware.profile import load_profile  # noqa: E402
from schedsim.sim.engine import simulate  # noqa: E402


def make_dag(n_ops: int, world: int = 8) -> nx.DiGraph:
    """A generated DAG of about ``n_ops`` op instances (see module docstring)."""
    per_rank = n_ops // world
    chunks = max(1, per_rank // 2)
    G = nx.DiGraph(name=f"gen{n_ops}", world_size=world, launch="eager")
    colls: dict[str, list[str]] = {}
    group = tuple(range(world))
    for r in range(world):
        prev_mm = prev_ar = None
        for c in range(chunks):
            mm = Op(name=f"mm{c}", rank=r, kind="matmul", stream="compute", seq=2 * c, m=4096, n=4096, k=4096,
                    dtype="bf16", flops=2.0 * 4096**3, nbytes=3 * 4096 * 4096 * 2.0)
            ar = Op(name=f"ar{c}", rank=r, kind="all_reduce", stream="comm", seq=2 * c + 1, group=group,
                    nbytes=64 * 2**20, dtype="bf16")
            G.add_node(mm.id, op=mm)
            G.add_node(ar.id, op=ar)
            if prev_mm:
                G.add_edge(prev_mm, mm.id, kind="stream")
            if prev_ar:
                G.add_edge(prev_ar, ar.id, kind="stream")
            G.add_edge(mm.id, ar.id, kind="dep")
            colls.setdefault(f"ar{c}", []).append(ar.id)
            prev_mm, prev_ar = mm.id, ar.id
    G.graph["collectives"] = colls
    G.graph["p2p"] = []
    return G


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
    ap.add_argument("--gpu-model", nargs="*", default=["waves", "sharing"], choices=["waves", "sharing"])
    a = ap.parse_args()
    prof = load_profile("h200")
    print(f"{'ops':>10} {'model':>8} {'build DAG (s)':>14} {'simulate (s, median)':>21} {'ops/s':>12}")
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
            print(f"{G.number_of_nodes():>10} {model:>8} {tb:>14.2f} {med:>21.2f} {G.number_of_nodes() / med:>12,.0f}")
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
