"""Rebuild the tables of benchmarks/accuracy.md and benchmarks/executor_overhead.md from results/.

    python3 benchmarks/h200/summarize.py

Pure Python; reads the compare.json / meta.json / handwritten*.json files that run_all.sh and run_repeats.sh
leave in results/ (raw run output, not tracked in git). The figures of the H200 calls of 2026-11-29 are kept
as run2_summary.csv and run3_summary.csv beside this file (one row per makespan).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
R = HERE / "results"
sys.path.insert(0, str(HERE.parents[1]))  # the repo root, for the re-predictions


def _load(p: Path) -> dict:
    return json.loads(p.read_text())


def meas(d: Path) -> tuple[float, float, float]:
    """(predicted, measured instrumented, measured uninstrumented) makespans in seconds; the prediction is the
    plain one (a timed CUDA graph's compare.json keeps it as ``makespan.uninstrumented.pred_s``)."""
    c = _load(d / "compare.json")
    m = c["makespan"]
    un = m.get("uninstrumented", {})
    return un.get("pred_s") or m["pred_s"], m["meas_s"], un.get("meas_s", m["meas_s"])


def meta_ms(d: Path) -> tuple[float, float]:
    """(instrumented median, uninstrumented median) from a run without --compare."""
    p = d / "meta.json" if (d / "meta.json").exists() else None
    m = _load(p) if p else _load(d / "timeline.json")["meta"]
    return m["makespan_median_s"], m.get("makespan_uninstrumented_s", m["makespan_median_s"])


def pct(a: float, b: float) -> str:
    return f"{(a - b) / b * 100:+.1f}%"


#: row -> (schedule file, --set overrides, launch) for re-predicting with the current engine
PREDICT_ARGS: dict[tuple[str, str], tuple[str, list[str], str]] = {
    ("matmul_streams", "eager"): ("schedules/matmul_streams.yaml", [], "eager"),
    ("offload", "eager"): ("schedules/offload.yaml", [], "eager"),
    ("small_ops_graph", "eager"): ("schedules/small_ops_graph.yaml", [], "eager"),
    ("small_ops_graph", "cuda_graph"): ("schedules/small_ops_graph.yaml", [], "cuda_graph"),
    ("matmul_streams", "cuda_graph"): ("schedules/matmul_streams.yaml", [], "cuda_graph"),
    ("allgather_mm (world_size=1, chunks=4, --check)", "eager"):
        ("schedules/allgather_mm.yaml", ["world_size=1", "chunks=4"], "eager"),
    ("allgather_mm8 (world_size=1, --check)", "eager"): ("schedules/allgather_mm8.yaml", ["world_size=1"], "eager"),
    ("allgather_mm (world_size=1, chunks=4, M=4096, --check)", "cuda_graph"):
        ("schedules/allgather_mm.yaml", ["world_size=1", "chunks=4", "M=4096"], "cuda_graph"),
    ("busy_demo (tests/executor/data)", "eager"): ("tests/executor/data/busy_demo.yaml", [], "eager"),
    ("tp_ffn (tp=1, --check)", "eager"): ("schedules/tp_ffn.yaml", ["tp=1"], "eager"),
    ("tp_allreduce_graph (world_size=1)", "cuda_graph"):
        ("schedules/tp_allreduce_graph.yaml", ["world_size=1"], "cuda_graph"),
}


def predict_now(key: tuple[str, str], profile: str = "h200_calibrated") -> float | None:
    """Makespan (s) predicted by the engine in this checkout, or None if it cannot."""
    try:
        from schedsim.graph.build import build_graph
        from schedsim.hardware.profile import load_profile
        from schedsim.sim.engine import simulate
        from schedsim.spec.loader import load_schedule, parse_overrides

        f, sets, launch = PREDICT_ARGS[key]
        root = HERE.parents[1]
        G = build_graph(load_schedule(root / f, parse_overrides(sets)))
        return simulate(G, load_profile(profile), launch=launch).makespan_s
    except Exception:  # noqa: BLE001 - a table row, not a test
        return None


def accuracy() -> list[str]:
    rows = []
    runs = {
        ("matmul_streams", "eager"): [R / "run2/matmul_streams/eager"],
        ("offload", "eager"): [R / "run2/offload/eager", R / "run2/offload/profiler"]
        + [R / f"run3/rep{k}/offload" for k in (1, 2, 3)],
        ("small_ops_graph", "eager"): [R / "run2/small_ops_graph/eager"]
        + [R / f"run3/rep{k}/small_ops_graph" for k in (1, 2, 3)],
        ("small_ops_graph", "cuda_graph"): [R / "run2/small_ops_graph/graph"]
        + [R / f"run3/rep{k}/small_ops_graph_graph" for k in (1, 2, 3)],
        ("matmul_streams", "cuda_graph"): [R / "run2/matmul_streams/graph_profiler"],
        ("allgather_mm (world_size=1, chunks=4, --check)", "eager"): [R / "run2/check_allgather_mm"],
        ("allgather_mm8 (world_size=1, --check)", "eager"): [R / "run2/check_allgather_mm8"],
        ("allgather_mm (world_size=1, chunks=4, M=4096, --check)", "cuda_graph"): [R / "run3/check_graph"],
        ("busy_demo (tests/executor/data)", "eager"): [R / "run3/busy_demo"],
        ("tp_ffn (tp=1, --check)", "eager"): [R / "run2/check_tp_ffn"],
        ("tp_allreduce_graph (world_size=1)", "cuda_graph"): [R / "run2/tp_allreduce_graph_w1"],
    }
    rows.append("| schedule | launch | predicted (at run time) | predicted (this checkout) | measured (uninstrumented) "
                "| error (this checkout) | runs (uninstrumented, ms) | measured (per-op timeline) | error |")
    rows.append("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for (name, launch), dirs in runs.items():
        vals = [meas(d) for d in dirs if (d / "compare.json").exists()]
        if not vals:
            continue
        pred = vals[0][0]
        now = predict_now((name, launch))
        p2 = now if now is not None else pred
        un = statistics.median(v[2] for v in vals)
        ins = statistics.median(v[1] for v in vals)
        runs_txt = ", ".join(f"{v[2] * 1e3:.3f}" for v in vals)
        now_txt = f"{now * 1e3:.3f} ms" if now is not None else "n/a"
        rows.append(f"| {name} | {launch} | {pred * 1e3:.3f} ms | {now_txt} | {un * 1e3:.3f} ms | {pct(p2, un)} | "
                    f"{runs_txt} | {ins * 1e3:.3f} ms | {pct(p2, ins)} |")
    return rows


def overhead() -> list[str]:
    hw = [_load(R / "run2/handwritten.json"), _load(R / "run3/handwritten_a.json"),
          _load(R / "run3/handwritten_b.json")]

    def hw_med(s: str, mode: str) -> tuple[float, list[float]]:
        xs = [h[s][mode]["makespan_median_s"] for h in hw if mode in h[s]]
        return statistics.median(xs), xs

    ex = {
        ("matmul_streams", "eager"): [R / "run2/matmul_streams/eager", R / "run2/matmul_streams/overhead"],
        ("offload", "eager"): [R / "run2/offload/eager", R / "run2/offload/overhead", R / "run2/offload/profiler"]
        + [R / f"run3/rep{k}/offload" for k in (1, 2, 3)],
        ("small_ops_graph", "eager"): [R / "run2/small_ops_graph/eager", R / "run2/small_ops_graph/overhead"]
        + [R / f"run3/rep{k}/small_ops_graph" for k in (1, 2, 3)],
        ("small_ops_graph", "cuda_graph"): [R / "run2/small_ops_graph/graph", R / "run2/small_ops_graph/overhead_graph"]
        + [R / f"run3/rep{k}/small_ops_graph_graph" for k in (1, 2, 3)],
    }
    rows = ["| schedule | launch | hand-written (median of 3 processes) | schedsim execute, uninstrumented (median of "
            "processes) | overhead | schedsim execute, per-op timed | overhead |", "|---|---|---:|---:|---:|---:|---:|"]
    for (s, mode), dirs in ex.items():
        ins, un = [], []
        for d in dirs:
            if (d / "compare.json").exists() or (d / "meta.json").exists() or (d / "timeline.json").exists():
                a, b = meta_ms(d) if not (d / "compare.json").exists() else meas(d)[1:]
                ins.append(a)
                un.append(b)
        h, hs = hw_med(s, mode)
        u, i = statistics.median(un), statistics.median(ins)
        rows.append(f"| {s} | {mode} | {h * 1e3:.3f} ms ({', '.join(f'{x * 1e3:.3f}' for x in hs)}) | "
                    f"{u * 1e3:.3f} ms ({', '.join(f'{x * 1e3:.3f}' for x in un)}) | {pct(u, h)} | {i * 1e3:.3f} ms | "
                    f"{pct(i, h)} |")
        if s == "small_ops_graph":
            tmode = mode + "_tight"
            ht, hts = hw_med(s, tmode)
            rows.append(f"| {s} | {mode}, hand-written with `torch.cuda.set_stream` | {ht * 1e3:.3f} ms "
                        f"({', '.join(f'{x * 1e3:.3f}' for x in hts)}) | {u * 1e3:.3f} ms | {pct(u, ht)} | "
                        f"{i * 1e3:.3f} ms | {pct(i, ht)} |")
    return rows


if __name__ == "__main__":
    print("\n".join(accuracy()))
    print()
    print("\n".join(overhead()))
