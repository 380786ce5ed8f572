"""Kernel time after the GPU idled, one GPU (issue 8): does a GEMM that starts on an idle GPU run slower than
the same GEMM back to back (the table's condition)?

Why: on 2×H200 the 1×1024×1024 fp32 GEMV of tp_allreduce ran 12.2 µs in Kineto against 9.1 µs in the table
(2026-12-01 00:39 UTC), and bf16 4096³ GEMMs with idle gaps between them ran 1.11–1.44× their burst time
(``benchmarks/probes/gpu_state/power_duty.py``, 2026-12-01 03:00 UTC) at duty cycles too low for the power limiter.

For each shape and idle gap g: ``--reps`` times, synchronize, keep the GPU idle for g (host spin), launch one
GEMM; and once ``--reps`` GEMMs back to back. Kernel times come from the profiler (CUPTI), so the host's launch
latency is not in them. Prints the median kernel time per (shape, gap) and its ratio to back to back.
``python benchmarks/probes/gpu_state/idle_gap.py [--out probe_idle_gap.json]`` (needs CUDA; ~20 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile


def spin(s: float) -> None:
    t = time.perf_counter() + s
    while time.perf_counter() < t:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="1x1024x1024xfp32,32x1024x1024xbf16,4096x4096x4096xbf16,4096x2048x512xfp16")
    ap.add_argument("--gaps-us", default="0,5,10,20,50,100,200,500,2000")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default="probe_idle_gap.json")
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    gaps = [float(x) for x in a.gaps_us.split(",")]
    res: dict[str, dict[str, float]] = {}
    for shape in a.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x")[:3])
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[shape.split("x")[3]]
        torch.backends.cuda.matmul.allow_tf32 = False
        x = torch.rand(m, k, device=dev).to(dt)
        w = torch.rand(k, n, device=dev).to(dt)
        y = torch.empty(m, n, device=dev, dtype=dt)
        for _ in range(10):
            torch.matmul(x, w, out=y)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            torch.cuda._sleep(1_000_000)
            for _ in range(a.reps):  # back to back, queued behind the sleep
                torch.matmul(x, w, out=y)
            for g in gaps[1:]:
                for _ in range(a.reps):
                    torch.cuda.synchronize()
                    spin(g * 1e-6)
                    torch.matmul(x, w, out=y)
            torch.cuda.synchronize()
        kern = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                       and "sleep" not in e.name), key=lambda e: e.time_range.start)
        per = len(kern) // (a.reps * len(gaps))  # kernels per matmul call
        dur = [sum(e.time_range.elapsed_us() for e in kern[i * per:(i + 1) * per])
               for i in range(a.reps * len(gaps))]
        row = {}
        for gi, g in enumerate(gaps):
            row[f"{g:g}"] = statistics.median(dur[gi * a.reps:(gi + 1) * a.reps])
        res[shape] = row
        base = row["0"]
        print(f"{shape:22s} back to back {base:8.2f} us ({per} kernel(s)); after idle gap: " +
              ", ".join(f"{g:g} us {row[f'{g:g}'] / base:.2f}x" for g in gaps[1:]))
    with open(a.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "kernel_us": res}, f,
                  indent=1)


if __name__ == "__main__":
    main()
