"""A what-if checked against a second real run (issue 37): one multi-stream PyTorch program, run by hand twice on
one GPU, with ``CUDA_DEVICE_MAX_CONNECTIONS`` 8 and 1, each iteration traced with Kineto.

    CUDA_DEVICE_MAX_CONNECTIONS=8 python3 benchmarks/accuracy/whatif_connections.py --out DIR/conn8 [--side spin]
    CUDA_DEVICE_MAX_CONNECTIONS=1 python3 benchmarks/accuracy/whatif_connections.py --out DIR/conn1

Each iteration, for ``i`` in ``range(steps)``: stream 0 runs an ``M×K @ K×N`` bf16 GEMM and records an event;
stream 1 waits for that event and adds a bias to the GEMM's output (a consumer); stream 2 then does the side work
and records an event that stream 0 waits for before the next GEMM. The side work (``--side``): ``copy``, the next
step's first ``copy_rows`` input rows from pinned host memory (a prefetch on the copy engine); ``spin``, a one-CTA
kernel that spins ``--spin-cycles`` clock cycles (``torch.cuda._sleep``: a latency-bound kernel that holds one
SM, as a communication kernel does); or both. With 8 hardware queues the side work runs under the GEMM before it;
with one queue a kernel issued after stream 1's wait sits behind that wait until the GEMM ends (the false
dependency of one connection, rule hardware-queues of ``schedsim.gpu.rules``), so the steps serialise; a host-to-device
copy issued there is not held (one H100, 2026-12-06).
Writes ``OUT/kineto.json.gz`` (one profiled iteration after two warm ones,
``torch.profiler.schedule``) and ``OUT/result.json``: the uninstrumented makespans (CUDA events
from the first op's issue to the last op's end on every stream, ``--iters`` iterations after ``--warmup``), their
median, and the environment. On CPU then: ``schedsim import kineto DIR/conn8/kineto.json.gz --out I8``, the same
of ``conn1`` into ``I1``; ``schedsim replay I8/schedule.yaml --what-if max_connections=1`` against ``schedsim
replay I1/schedule.yaml``'s trace makespan (docs/validation.md, "A what-if against a second real run";
``tests/trace/test_whatif_second_run.py`` holds one H100's four traces to that).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--M", type=int, default=4096)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--K", type=int, default=4096)
    ap.add_argument("--copy-rows", type=int, default=1024)
    ap.add_argument("--side", choices=("copy", "spin", "both"), default="copy",
                    help="stream 2's work: the copy, a one-CTA kernel spinning --spin-cycles, or both")
    ap.add_argument("--spin-cycles", type=int, default=300_000)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)
    dt = torch.bfloat16

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dt, generator=g)

    xs = [rand(a.M, a.K) for _ in range(a.steps)]
    w = rand(a.K, a.N)
    ys = [torch.empty(a.M, a.N, device=dev, dtype=dt) for _ in range(a.steps)]
    bias = rand(a.M, a.N)
    host = torch.randn(a.copy_rows, a.K, dtype=dt).pin_memory()
    ss = [torch.cuda.Stream(dev) for _ in range(3)]
    done = [torch.cuda.Event() for _ in range(a.steps)]
    copied = [torch.cuda.Event() for _ in range(a.steps)]

    def step() -> None:
        for i in range(a.steps):
            torch.cuda.set_stream(ss[0])
            if i:
                ss[0].wait_event(copied[i - 1])
            torch.matmul(xs[i], w, out=ys[i])
            done[i].record(ss[0])
            torch.cuda.set_stream(ss[1])
            ss[1].wait_event(done[i])
            ys[i].add_(bias)
            torch.cuda.set_stream(ss[2])
            if a.side in ("copy", "both"):
                xs[(i + 1) % a.steps][: a.copy_rows].copy_(host, non_blocking=True)
            if a.side in ("spin", "both"):
                torch.cuda._sleep(a.spin_cycles)
            copied[i].record(ss[2])
        torch.cuda.set_stream(torch.cuda.default_stream(dev))

    def timed() -> float:
        torch.cuda.synchronize(dev)
        start = torch.cuda.Event(enable_timing=True)
        ends = [torch.cuda.Event(enable_timing=True) for _ in ss]
        start.record(ss[0])
        for s in ss[1:]:
            s.wait_event(start)
        step()
        for e, s in zip(ends, ss, strict=True):
            e.record(s)
        torch.cuda.synchronize(dev)
        return max(start.elapsed_time(e) for e in ends) * 1e-3

    for _ in range(a.warmup):
        timed()
    ms = [timed() for _ in range(a.iters)]
    from torch.profiler import ProfilerActivity, profile, schedule

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=0, warmup=2, active=1, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(a.out / "kineto.json.gz"))) as prof:
        for _ in range(4):
            step()
            torch.cuda.synchronize(dev)
            prof.step()
    res = {"makespans_s": ms, "median_s": statistics.median(ms), "steps": a.steps, "M": a.M, "N": a.N, "K": a.K,
           "copy_rows": a.copy_rows, "side": a.side, "spin_cycles": a.spin_cycles,
           "max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"), "gpu": torch.cuda.get_device_name(dev),
           "torch": torch.__version__}
    (a.out / "result.json").write_text(json.dumps(res, indent=1))
    print(f"side={a.side} CUDA_DEVICE_MAX_CONNECTIONS={res['max_connections']}: median {res['median_s'] * 1e3:.3f} ms "
          f"over {a.iters} iterations ({res['gpu']})")


if __name__ == "__main__":
    main()
