"""Kernel time in a CUDA graph against back to back on a stream, per shape (issue 8, graph cases).

The GEMM table (``schedsim calibrate``) times a kernel launched back to back on a stream, R launches queued behind
a spin. A graph replay dispatches its nodes without the stream launch path. For each shape this prints
(``GRAPH_KERNELS {...}``, µs): ``stream`` (back to back, R = 200, median of 5), ``graph`` (a 64-node chain of
the kernel in one graph, replay / 64, :func:`executor.calibrate_graph.timed_graph_chain`) and ``timed_span`` (the
mean span between the timing events around each node of the same chain). Then (``GRAPH_LAYERS {...}``) µs per
layer of small_ops_graph's layer in one graph at T×H = 16×512 and 32×1024: the main stream alone, beside an
independent aux GEMM, and with the aux GEMM waiting for the main one (``executor.calibrate_graph._graph_fork_us``).

Usage: python benchmarks/probes/graph/kernel_time.py  (one GPU; exits 2 without CUDA)
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

#: (label, kind, dtype, m, n, k): GEMMs of the one-GPU cases, and elementwise ``add_`` on m x n
SHAPES = [("mm 16x512x512 bf16", "mm", "bf16", 16, 512, 512), ("mm 32x1024x1024 bf16", "mm", "bf16", 32, 1024, 1024),
          ("mm 1x1024x1024 fp32", "mm", "fp32", 1, 1024, 1024), ("mm 1x2048x2048 fp32", "mm", "fp32", 1, 2048, 2048),
          ("mm 64x64x64 bf16", "mm", "bf16", 64, 64, 64), ("add 16x512 bf16", "add", "bf16", 16, 512, 0),
          ("add 32x1024 bf16", "add", "bf16", 32, 1024, 0)]


def main() -> int:
    import torch
    from probe_l2_residency import stream_per_launch

    from executor.calibrate_graph import timed_graph_chain

    if not torch.cuda.is_available():
        print("probe_graph_kernels: needs CUDA", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    side = torch.cuda.Stream(device=dev)
    out: dict[str, dict[str, float]] = {}
    for label, kind, dt, m, n, k in SHAPES:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float32
        if kind == "mm":
            a = torch.rand(m, k, device=dev).to(dtype)
            b = torch.rand(k, n, device=dev).to(dtype)
            outs = [torch.empty(m, n, device=dev, dtype=dtype) for _ in range(64)]

            def f(i: int, a=a, b=b, outs=outs) -> None:  # noqa: ANN001
                torch.matmul(a, b, out=outs[i])
        else:
            outs = [torch.rand(m, n, device=dev).to(dtype) for _ in range(64)]

            def f(i: int, outs=outs) -> None:  # noqa: ANN001
                outs[i].add_(1.0)
        stream_us = stream_per_launch(torch, [functools.partial(f, i) for i in range(64)])
        r = timed_graph_chain(torch, [f] * 64, side)
        out[label] = {"stream": round(stream_us, 3), "graph": round(r["plain_per_op"], 3),
                      "timed_span": round(statistics.fmean(r["spans"]), 3)}
    print("GRAPH_KERNELS " + json.dumps(out), flush=True)
    # the small_ops layer as a graph (calibrate's graph-edge probe) at two shapes: the main stream alone, with an
    # independent aux GEMM beside it, and with the aux GEMM waiting for the main one (µs per layer)
    from executor.calibrate_graph import _graph_fork_us

    layers = {f"T{t} H{h}": {k: round(v, 3) for k, v in _graph_fork_us(torch, dev, t, h, main_only=True).items()}
              for t, h in ((16, 512), (32, 1024))}
    print("GRAPH_LAYERS " + json.dumps(layers), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
