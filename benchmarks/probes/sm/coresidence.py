"""Concurrent GEMMs on several streams of one GPU: do their CTAs share SMs, and how much throughput does it add?

Plain PyTorch on one GPU, no schedsim (rule wave-dispatch of ``schedsim/gpu/rules.py``: CTA co-residence)::

    python benchmarks/probes/sm/coresidence.py --out probe_coresidence.json     # ~1 min on an H200

For each GEMM shape of allgather_mm's chunks (m = 16384/c, n = 8192/c, k = 8192, c = 2, 4, 8, 16), fp32
(TF32 off: SIMT kernels) and bf16 (tensor cores), it runs ``G`` GEMMs on ``ns`` streams (``ns`` = 1, 2, 4, 8;
GEMM ``i`` on stream ``i mod ns``) between two CUDA events, median of 5, and reports ms per GEMM. Then a Kineto
trace of the 8-stream run gives each kernel's grid, block, registers per thread and shared memory (its
occupancy: CTAs one SM can hold) and its CUPTI span; ``mean_concurrency`` = sum of kernel spans / wall (how
many GEMMs were resident at once on average), ``span_over_solo`` = median kernel span / the 1-stream time.

``schedule_like``: allgather_mm's own pattern (distinct inputs per chunk, distinct weight blocks, the
``add_`` into each output block) at chunks 4, 8, 16 on 1 stream and on ``chunks`` streams.

On CPU it prints that it needs a GPU and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def _streams_ms(torch, ns: int, work, n: int, reps: int = 5) -> float:
    """Median ms per item of ``work(streams)`` (which issues ``n`` items over ``ns`` fresh streams, forked from
    and joined into the current stream) between two CUDA events."""
    streams = [torch.cuda.Stream() for _ in range(ns)]
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        work(streams)
        for s in streams:
            torch.cuda.current_stream().wait_stream(s)
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / n)
    return statistics.median(ts)


def _time(torch, a, b, outs, ns: int, reps: int = 5) -> float:
    def work(streams) -> None:
        for i, o in enumerate(outs):
            with torch.cuda.stream(streams[i % ns]):
                torch.matmul(a, b, out=o)

    return _streams_ms(torch, ns, work, len(outs), reps)


def _kineto(torch, a, b, outs, ns: int) -> dict[str, object]:
    from torch.profiler import ProfilerActivity, profile

    streams = [torch.cuda.Stream() for _ in range(ns)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for s in streams:
            s.wait_stream(torch.cuda.current_stream())
        for i, o in enumerate(outs):
            with torch.cuda.stream(streams[i % ns]):
                torch.matmul(a, b, out=o)
        torch.cuda.synchronize()
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    os.unlink(path)
    if not ev:
        return {}
    spans = [float(e["dur"]) for e in ev]
    t0 = min(float(e["ts"]) for e in ev)
    t1 = max(float(e["ts"]) + float(e["dur"]) for e in ev)
    args = ev[0].get("args", {})
    return {"kernel": ev[0]["name"][:120], "grid": args.get("grid"), "block": args.get("block"),
            "registers_per_thread": args.get("registers per thread"), "shared_memory": args.get("shared memory"),
            "est_occupancy_pct": args.get("est. achieved occupancy %"), "n_kernels": len(ev),
            "median_span_us": statistics.median(spans), "wall_us": t1 - t0,
            "mean_concurrency": sum(spans) / (t1 - t0)}


def schedule_like(torch, c: int, ns_list=(1, 8), reps: int = 5) -> dict[str, object]:
    """allgather_mm's GEMM pattern at ``c`` chunks on one GPU, without the all_gather: chunk ``i``'s own
    16384/c x 8192 input times ``c`` distinct 8192 x 8192/c weight blocks, each result added into its output
    block (``out.add_(mm)``), chunk ``i`` on stream ``i mod ns``; ms per GEMM (GEMM + add_), median of ``reps``."""
    dev = torch.device("cuda")
    m, n, k = 16384 // c, 8192 // c, 8192
    xs = [torch.randn(m, k, device=dev) for _ in range(c)]
    ws = [torch.randn(k, n, device=dev) for _ in range(c)]
    tmp = [[torch.empty(m, n, device=dev) for _ in range(c)] for _ in range(c)]
    outs = [[torch.zeros(m, n, device=dev) for _ in range(c)] for _ in range(c)]
    row: dict[str, object] = {"pattern": "allgather_mm without all_gather", "chunks": c, "m": m, "n": n, "k": k}
    for ns in ns_list:
        for with_add in (False, True):
            def work(streams, ns=ns, with_add=with_add) -> None:
                for i in range(c):
                    with torch.cuda.stream(streams[i % ns]):
                        for j in range(c):
                            torch.matmul(xs[i], ws[j], out=tmp[i][j])
                            if with_add:
                                outs[i][j].add_(tmp[i][j])

            key = f"ms_per_gemm_{ns}{'_add' if with_add else ''}"
            row[key] = round(_streams_ms(torch, ns, work, c * c, reps), 5)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="probe_coresidence.json")
    ap.add_argument("--gemms", type=int, default=32, help="GEMMs per timed run")
    ap.add_argument("--schedule-only", action="store_true", help="only the allgather_mm-like pattern")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("probe_coresidence: needs a CUDA GPU; nothing measured")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    res: dict[str, object] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                              "sms": torch.cuda.get_device_properties(0).multi_processor_count,
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cases": []}
    for dtype in () if a.schedule_only else (torch.float32, torch.bfloat16):
        for c in (2, 4, 8, 16):
            m, n, k = 16384 // c, 8192 // c, 8192
            x = torch.randn(m, k, device=dev, dtype=dtype)
            w = torch.randn(k, n, device=dev, dtype=dtype)
            outs = [torch.empty(m, n, device=dev, dtype=dtype) for _ in range(a.gemms)]
            _time(torch, x, w, outs, 1, 2)  # warm
            row: dict[str, object] = {"dtype": str(dtype).split(".")[-1], "m": m, "n": n, "k": k}
            for ns in (1, 2, 4, 8):
                row[f"ms_per_gemm_{ns}"] = round(_time(torch, x, w, outs, ns), 5)
            kin = _kineto(torch, x, w, outs, 8)
            if kin:
                kin["span_over_solo"] = kin["median_span_us"] / 1e3 / row["ms_per_gemm_1"]  # type: ignore[operator]
            row["kineto_8_streams"] = kin
            print(json.dumps(row), flush=True)
            res["cases"].append(row)  # type: ignore[union-attr]
            del x, w, outs
    res["schedule_like"] = []
    for c in (4, 8, 16):
        row = schedule_like(torch, c, (1, c))
        print(json.dumps(row), flush=True)
        res["schedule_like"].append(row)  # type: ignore[union-attr]
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
