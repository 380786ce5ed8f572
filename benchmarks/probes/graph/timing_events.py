"""What do the timing events of an instrumented CUDA graph add to each op? (issue 8, per-op error of graph cases.)

``schedsim execute --cuda-graph`` times each op inside the replayed graph with a pair of external event-record
nodes around it (``executor.runtime.CudaGraphRunner``); the makespan it reports is that of a second graph
without them. This probe captures chains of ``--ops`` kernels on one stream, with and without such pairs
(:func:`executor.calibrate_graph.timed_graph_chain`), and prints one JSON line, ``GRAPH_EVENTS {...}``, with per chain
(all µs):

* ``plain_per_op`` / ``timed_per_op``: replay time of the untimed / timed graph over the ops (medians);
* ``span``: mean over ops of the op's median (end event − start event) in the timed graph;
* ``gap``: median over ops of (next op's start event − this op's end event).

Chains: ``gemm`` (32×1024×1024 bf16 matmuls, small_ops_graph's), ``add`` (``add_`` on 32×1024 bf16),
``mixed`` (the two alternating: what ``schedsim calibrate`` measures as ``launch.graph_timing_event_us`` =
span − plain_per_op). If ``span − plain_per_op`` is the same for both kinds, the pair adds a fixed time inside
each op's span, and a prediction of the timed graph adds it to each op (``HardwareProfile.timed_graph``).

Usage: python benchmarks/probes/graph/timing_events.py [--ops 64 --reps 20]  (one GPU; exits 2 without CUDA)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    import torch

    from executor.calibrate_graph import GRAPH_H, GRAPH_T, timed_graph_chain

    if not torch.cuda.is_available():
        print("probe_graph_events: needs CUDA", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    bf = torch.bfloat16
    x = torch.rand(GRAPH_T, GRAPH_H, device=dev).to(bf)
    w = torch.rand(GRAPH_H, GRAPH_H, device=dev).to(bf)
    outs = [torch.empty(GRAPH_T, GRAPH_H, device=dev, dtype=bf) for _ in range(a.ops)]

    def gemm(i: int) -> None:
        torch.matmul(x, w, out=outs[i])

    def add(i: int) -> None:
        outs[i].add_(1.0)

    side = torch.cuda.Stream(device=dev)
    res: dict[str, dict[str, float]] = {}
    for name, fns in (("gemm", [gemm] * a.ops), ("add", [add] * a.ops), ("mixed", [gemm, add] * (a.ops // 2))):
        r = timed_graph_chain(torch, fns, side, a.reps)
        row = {"plain_per_op": r["plain_per_op"], "timed_per_op": r["timed_per_op"],
               "span": statistics.fmean(r["spans"]), "gap": statistics.median(r["gaps"])}
        if name == "mixed":
            row["span_gemm"] = statistics.fmean(r["spans"][0::2])
            row["span_add"] = statistics.fmean(r["spans"][1::2])
        res[name] = {k: round(v, 3) for k, v in row.items()}
    print("GRAPH_EVENTS " + json.dumps({"ops": a.ops, "gpu": torch.cuda.get_device_name(dev), **res}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
