"""GPU state effects on kernel time, one GPU: idle gap before a GEMM, and sustained back-to-back load.

Why: in the 2xH200 pipeline runs (2026-11-30 23:41 UTC, benchmarks/accuracy.md, "Pipelines") the first GEMM of
an iteration (after the executor's aligned start, the GPU idle ~2 ms) ran 27-51 % over the calibrated table, a
GEMM after a >20 us wait up to 23 % over, and GEMMs after GEMMs 1.6-4.2 % over. Two candidate causes, measured
here for the pipeline's bf16 GEMM shapes:

* ``idle``: synchronize, keep the GPU idle for ``gap`` (host spin), then one GEMM between two CUDA events
  (recorded in one burst, so launch latency is a few us of a ~1 ms kernel). Median of ``--reps``.
* ``sustained``: ``n`` GEMMs back to back (queued behind a short spin kernel), each between events: the time of
  GEMM k as the load goes on (clock/power ramp or throttling), printed at k = 0, 1, 2, 5, 10, 20, 50, 100, 200.

Writes ``--out`` (JSON). Run: ``python benchmarks/probe_gpu_state.py`` (needs CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4096x16384x4096,4096x4096x16384,4096x8192x4096,1x1024x1024")
    ap.add_argument("--gaps-us", default="0,10,20,50,100,200,500,1000,2000,5000,20000")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--sustained", type=int, default=300)
    ap.add_argument("--out", default="probe_gpu_state.json")
    a = ap.parse_args()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    res: dict[str, dict] = {}

    def spin(s: float) -> None:
        t = time.perf_counter() + s
        while time.perf_counter() < t:
            pass

    for shape in a.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        dt = torch.float32 if m == 1 else torch.bfloat16
        x = torch.randn(m, k, device=dev, dtype=dt)
        w = torch.randn(k, n, device=dev, dtype=dt)
        y = torch.empty(m, n, device=dev, dtype=dt)
        for _ in range(20):
            torch.matmul(x, w, out=y)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        idle = {}
        for g in (float(v) for v in a.gaps_us.split(",")):
            ts = []
            for _ in range(a.reps):
                for _ in range(5):  # warm the GPU up first: each sample starts from the same busy state
                    torch.matmul(x, w, out=y)
                torch.cuda.synchronize()
                spin(g * 1e-6)
                e0.record()
                torch.matmul(x, w, out=y)
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1) * 1e3)
            idle[f"{g:g}"] = statistics.median(ts)
        n_s = a.sustained if m > 1 else 20 * a.sustained
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(n_s + 1)]
        per = []
        for _ in range(3):
            torch.cuda.synchronize()
            spin(0.05)  # idle 50 ms, as between two training steps with a data-loader stall
            torch.cuda._sleep(2_000_000)  # ~1 ms at 1.98 GHz: the host queues everything behind it
            evs[0].record()
            for i in range(n_s):
                torch.matmul(x, w, out=y)
                evs[i + 1].record()
            torch.cuda.synchronize()
            per.append([evs[i].elapsed_time(evs[i + 1]) * 1e3 for i in range(n_s)])
        med = [statistics.median(p[i] for p in per) for i in range(n_s)]
        marks = [i for i in (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if i < n_s]
        cum = [0.0]
        for v in med:
            cum.append(cum[-1] + v)
        res[shape] = {"idle_gap_us_to_span_us": idle,
                      "sustained_span_us_at": {str(i): med[i] for i in marks},
                      "sustained_ms_at": {str(i): cum[i] / 1e3 for i in marks},
                      "sustained_last_half_median_us": statistics.median(med[n_s // 2:])}
        print(shape, json.dumps(res[shape]), flush=True)
    meta = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    with open(a.out + ".tmp", "w") as f:
        json.dump({"meta": meta, "shapes": res}, f, indent=1)
    os.replace(a.out + ".tmp", a.out)


if __name__ == "__main__":
    main()
