"""Follow-up probes of the 2xH200 accuracy pass ([evidence: accuracy-h200], "Findings that are not modelled yet").

Plain PyTorch on one GPU, no schedsim:

    python benchmarks/probes/host/call_patterns.py --out probe_host_calls.json     # ~1 min on an H200

* ``host``: host µs per call, loops of 200 with the GPU kept busy (``torch.cuda._sleep`` first):
  ``torch.cuda.set_stream`` (what ``schedsim execute``'s lean loop and the hand-written references call:
  ``launch.stream_switch_us`` of ``h200x2`` is 0 until this is measured), ``with torch.cuda.stream(s)``,
  ``torch.matmul(out=)`` 32x1024x1024 bf16, ``copy_`` of 128 KiB device to device, event record + wait.
* ``mixed``: the same calls in small_ops_graph's order (matmul, copy_, set_stream, wait_event, matmul,
  set_stream back) per layer, host µs per layer, against the sum of the looped costs: whether a loop of one
  call underestimates a mixed sequence (small_ops eager ran 30 % above run2's loop costs).
* ``coresidence``: fp32 2048x1024x8192 GEMMs (allgather_mm chunks=8), 16 of them on one stream against 2 x 8
  and 8 x 2 on 2 and 8 streams: total time, so the concurrent throughput gain over one stream (0.654 against
  0.708 ms per GEMM in the run) is measured outside the schedule; ``--kineto`` also writes a trace whose
  kernel events carry grid, registers per thread and shared memory (the GEMM's occupancy).

On CPU it prints what it needs and exits 0 (the script itself is checked there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

N = 200


def _loop_us(torch, fn, n: int = N, reps: int = 5) -> float:
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(40_000_000)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(ts), 3)


def host(torch) -> dict[str, float]:
    dev = torch.device("cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(32, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    c = torch.empty(32, 1024, device=dev, dtype=torch.bfloat16)
    x, y = torch.empty(32768, device=dev), torch.empty(32768, device=dev)
    e = torch.cuda.Event()
    flip = [s1, s2]

    def set_stream() -> None:
        flip.reverse()
        torch.cuda.set_stream(flip[0])

    def ctx_stream() -> None:
        flip.reverse()
        with torch.cuda.stream(flip[0]):
            pass

    def wait() -> None:
        e.record(s1)
        s2.wait_event(e)

    res = {"set_stream_us": _loop_us(torch, set_stream), "with_stream_us": _loop_us(torch, ctx_stream),
           "matmul_out_us": _loop_us(torch, lambda: torch.matmul(a, w, out=c)),
           "copy_d2d_us": _loop_us(torch, lambda: y.copy_(x)), "event_wait_us": _loop_us(torch, wait)}
    torch.cuda.set_stream(torch.cuda.default_stream())
    main, aux = s1, s2
    ev = [torch.cuda.Event() for _ in range(64)]

    def layer() -> None:
        for i in range(64):
            torch.cuda.set_stream(main)
            torch.matmul(a, w, out=c)
            ev[i].record(main)
            y.copy_(x)
            torch.cuda.set_stream(aux)
            aux.wait_event(ev[i])
            torch.matmul(a, w, out=c)

    res["mixed_per_layer_us"] = round(_loop_us(torch, layer, n=1, reps=9) / 64, 3)
    res["looped_sum_per_layer_us"] = round(2 * res["matmul_out_us"] + res["copy_d2d_us"] + 2 * res["set_stream_us"]
                                           + res["event_wait_us"], 3)
    torch.cuda.set_stream(torch.cuda.default_stream())
    return res


def coresidence(torch, kineto: str | None) -> dict[str, float]:
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(2048, 8192, device=dev)
    b = torch.randn(8192, 1024, device=dev)
    outs = [torch.empty(2048, 1024, device=dev) for _ in range(16)]
    res = {}
    for ns in (1, 2, 8):
        streams = [torch.cuda.Stream() for _ in range(ns)]
        ts = []
        for _ in range(7):
            torch.cuda.synchronize()
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for s in streams:
                s.wait_stream(torch.cuda.current_stream())
            for i in range(16):
                with torch.cuda.stream(streams[i % ns]):
                    torch.matmul(a, b, out=outs[i])
            for s in streams:
                torch.cuda.current_stream().wait_stream(s)
            t1.record()
            torch.cuda.synchronize()
            ts.append(t0.elapsed_time(t1) / 16)
        res[f"ms_per_gemm_{ns}_streams"] = round(statistics.median(ts), 4)
    if kineto:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(4):
                torch.matmul(a, b, out=outs[i])
            torch.cuda.synchronize()
        prof.export_chrome_trace(kineto)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="probe_host_calls.json")
    ap.add_argument("--kineto", default=None, help="also write a Kineto trace of the fp32 GEMM here")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("probe_host_calls: needs a CUDA GPU (CUDA events, torch.cuda._sleep); nothing measured")
        return 0
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
           time.gmtime()), "host": host(torch), "coresidence": coresidence(torch, a.kineto)}
    print(json.dumps(out, indent=1))
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
