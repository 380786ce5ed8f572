"""Kernel time with operands in L2 against operands from HBM, back to back and in a CUDA graph (issue 8).

The GEMM table (``schedsim calibrate``) times a kernel back to back on 3 rotating input sets, which stay in L2
when they fit. ``schedsim execute`` gives every op its own buffers, so a schedule whose buffers exceed L2 reads
them from HBM on every iteration. For each shape this prints ``L2_KERNELS {...}`` (µs per kernel, medians):

* ``stream_warm``: back to back, R = 200 launches over 3 input sets (the table's method);
* ``stream_cold``: back to back over a pool of distinct input sets ≥ 4× L2 (every launch reads from HBM);
* ``graph_warm``: a 64-node graph chain of the kernel reusing one input set (outputs distinct), replay / 64;
* ``graph_cold``: a graph chain over the cold pool's sets (one node per set, ≤ 1024), replay / nodes.

Then ``L2_SWEEP {...}``: the graph chain of bf16 32x1024x1024 GEMMs over N distinct weight sets, N = 4 ... 128,
µs per node against the chain's working set (bytes of the distinct sets), to see where L2 stops holding it;
and ``L2_LAYERS {...}``: small_ops_graph's layer in one graph (``executor.calibrate_graph._graph_fork_us``) at more
T×H shapes.

Usage: python benchmarks/probes/memory/l2_residency.py  (one GPU; exits 2 without CUDA)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

#: (kind, dtype, m, n, k): GEMMs of the one-GPU cases and a spread of sizes; ``add`` is ``add_`` on m x n
SHAPES = [("mm", "bf16", 16, 512, 512), ("mm", "bf16", 32, 1024, 1024), ("mm", "bf16", 64, 2048, 2048),
          ("mm", "bf16", 16, 4096, 4096), ("mm", "bf16", 128, 1024, 1024), ("mm", "bf16", 512, 2048, 2048),
          ("mm", "bf16", 2048, 2048, 2048), ("mm", "bf16", 4096, 4096, 4096), ("mm", "fp32", 1, 1024, 1024),
          ("mm", "fp32", 1, 2048, 2048), ("mm", "fp32", 32, 1024, 1024), ("mm", "fp32", 1024, 1024, 1024),
          ("add", "bf16", 32, 1024, 0), ("add", "bf16", 256, 4096, 0), ("add", "bf16", 4096, 4096, 0),
          ("add", "fp32", 1, 1024, 0)]


def stream_per_launch(torch: Any, fns: list[Any], R: int = 200) -> float:
    """µs per launch of ``fns`` (cycled) launched ``R`` times back to back behind a 2 ms spin, median of 5 (after
    one). The host must keep ahead: for kernels shorter than a launch (~5-10 µs of Python), the spin hides only
    the first ~200 launches."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(6):
        torch.cuda.synchronize()
        torch.cuda._sleep(4_000_000)
        e0.record()
        for i in range(R):
            fns[i % len(fns)]()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3 / R)
    return statistics.median(ts[1:])


def main() -> int:
    import torch

    from executor.calibrate_gemm import gemm_graph_times
    from executor.calibrate_graph import graph_chain_per_node, pool_count

    if not torch.cuda.is_available():
        print("probe_l2_residency: needs CUDA", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    l2 = float(torch.cuda.get_device_properties(dev).L2_cache_size)
    print(f"L2_BYTES {l2:.0f}", flush=True)
    side = torch.cuda.Stream(device=dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    out: dict[str, dict[str, float]] = {}

    def sets(kind: str, dtype: Any, m: int, n: int, k: int, count: int) -> list[Any]:
        if kind == "mm":
            return [(torch.rand(m, k, device=dev).to(dtype), torch.rand(k, n, device=dev).to(dtype),
                     torch.empty(m, n, device=dev, dtype=dtype)) for _ in range(count)]
        return [(torch.rand(m, n, device=dev).to(dtype),) for _ in range(count)]

    def fn(kind: str, s: tuple[Any, ...]) -> Any:
        if kind == "mm":
            a, b, c = s
            return lambda: torch.matmul(a, b, out=c)
        (x,) = s
        return lambda: x.add_(1.0)

    for kind, dt, m, n, k in SHAPES:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float32
        size = dtype.itemsize * ((m * k + k * n + m * n) if kind == "mm" else m * n)
        cold_n = pool_count(size, l2)
        warm = sets(kind, dtype, m, n, k, 3)
        cold = sets(kind, dtype, m, n, k, cold_n)
        label = f"{kind} {m}x{n}" + (f"x{k}" if kind == "mm" else "") + f" {dt}"
        row = {"bytes": size, "cold_sets": cold_n,
               "stream_warm": stream_per_launch(torch, [fn(kind, s) for s in warm]),
               "stream_cold": stream_per_launch(torch, [fn(kind, s) for s in cold], R=max(200, min(cold_n, 1024)))}
        if kind == "mm":  # calibrate's own measurement of a gemm.graph row
            row["graph_warm"], row["graph_cold"] = (1e6 * t for t in gemm_graph_times(torch, dev, dtype, m, n, k, l2))
        else:
            row["graph_warm"] = 1e6 * graph_chain_per_node(torch, [fn(kind, warm[0])] * 64, side)
            row["graph_cold"] = 1e6 * graph_chain_per_node(torch, [fn(kind, s) for s in cold], side)
        out[label] = {q: round(v, 3) if isinstance(v, float) else v for q, v in row.items()}
        print(f"{label}: {out[label]}", flush=True)
        del warm, cold
        torch.cuda.empty_cache()
    print("L2_KERNELS " + json.dumps(out), flush=True)
    sweep: dict[str, float] = {}
    bf = torch.bfloat16
    for N in (4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 128):
        ws = sets("mm", bf, 32, 1024, 1024, N)
        fns = [fn("mm", ws[i % N]) for i in range(max(N, 64))]
        sweep[str(N * 2 * (32 * 1024 * 2 + 1024 * 1024))] = round(1e6 * graph_chain_per_node(torch, fns, side), 3)
        del ws, fns
    print("L2_SWEEP " + json.dumps(sweep), flush=True)
    from executor.calibrate_graph import _graph_fork_us

    layers = {f"T{t} H{h}": {q: round(v, 3) for q, v in _graph_fork_us(torch, dev, t, h, main_only=True).items()}
              for t, h in ((8, 256), (16, 512), (32, 512), (16, 1024), (32, 1024), (64, 2048), (16, 2048))}
    print("L2_LAYERS " + json.dumps(layers), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
