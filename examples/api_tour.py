"""A tour of schedsim.api: load a schedule, predict, plot, sweep and tabulate.

Run: python examples/api_tour.py [OUTDIR]   (writes gantt.png, pipeline.png, memory.png there)
"""

from __future__ import annotations

import sys
from pathlib import Path

from schedsim import api

ROOT = Path(__file__).resolve().parents[1]


def main(out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    spec = api.load(ROOT / "schedules" / "pipeline_schedules.yaml", p=2, m=4, schedule="1f1b")
    run = api.predict(spec, profile="h200")
    print(f"{spec.name}: makespan {run.makespan_s * 1e3:.3f} ms, "
          f"bubble {run.metrics.pipeline.bubble_of_makespan.overall:.3f}, "
          f"peak memory {run.metrics.memory_peak.bytes / 2**30:.2f} GiB at {run.metrics.memory_peak.op}")
    api.plot_gantt(run, title="1F1B, p=2, m=4").savefig(out / "gantt.png")
    api.plot_pipeline(run).savefig(out / "pipeline.png")
    api.plot_memory(run).savefig(out / "memory.png")
    rows = api.sweep(ROOT / "schedules" / "pipeline_schedules.yaml", p=[2], m=[4], schedule=["1f1b", "zb_h1"])
    for r in rows:
        print(f"  {r['setting']['schedule']:>6}: {r['makespan_s'] * 1e3:.3f} ms, bubble {r['bubble_ratio']:.3f}")
    try:
        df = api.to_pandas(run)
        print(df.groupby("kind")["duration_s"].sum())
    except ImportError:
        print("(pandas not installed: skipping to_pandas)")
    return {"run": run, "sweep": rows}


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "schedsim_out/api_tour"))
