"""What-if: how many chunks should the all-gather + matmul of S0 (docs/sources.md) use?

Predicts schedules/allgather_mm.yaml for chunks = 1, 2, 4, 8, 16, 32 on two profiles
(the PCIe box of S0 and an H200 node) and prints makespan, exposed communication,
overlap ratio and the split of the time. Run from the repo root:

    python examples/chunks_whatif.py [--profiles pcie2 h200] [--plot out.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schedsim import compute_metrics, load_profile, load_schedule, lower, simulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", nargs="*", default=["pcie2", "h200"])
    ap.add_argument("--chunks", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--plot", type=Path)
    a = ap.parse_args()
    results: dict[str, list[float]] = {}
    print(f"{'profile':15s} {'chunks':>6s} {'makespan ms':>12s} {'exposed comm ms':>16s} {'overlap':>8s} "
          f"{'GEMM+add busy ms':>17s}")
    for prof in a.profiles:
        p = load_profile(prof)
        for c in a.chunks:
            spec = load_schedule(ROOT / "schedules/allgather_mm.yaml", {"chunks": c})
            tl = simulate(lower(spec), p)
            m = compute_metrics(tl)
            results.setdefault(prof, []).append(tl.makespan_s * 1e3)
            print(f"{prof:15s} {c:6d} {tl.makespan_s * 1e3:12.3f} {m['ranks'][0]['exposed_comm_s'] * 1e3:16.3f} "
                  f"{m['ranks'][0]['overlap_ratio']:8.3f} {m['ranks'][0]['busy_compute_s'] * 1e3:17.3f}")
    if a.plot:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 3.5))
        ax = fig.add_subplot(111)
        for prof, ys in results.items():
            ax.plot(a.chunks, ys, marker="o", label=prof)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chunks")
        ax.set_ylabel("predicted makespan (ms)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.plot)
        print(f"wrote {a.plot}")


if __name__ == "__main__":
    main()
