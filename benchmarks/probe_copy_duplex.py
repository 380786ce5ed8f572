"""Do a pinned h2d and a d2h copy slow each other down when they run at once (both PCIe directions busy)?

The offload schedule (schedules/offload.yaml) overlaps h2d copies of chunk i+1 with d2h copies of chunk i-1 on
their own copy engines; the model runs the two engines independently (one per direction). This probe times,
with CUDA events, on one GPU:

* each direction alone (median of ``--iters``), for 32 MiB (offload's chunk) and 256 MiB;
* both at once on two streams, started by one event: each copy's own span and the pair's;
* the same with a bf16 GEMM series running on a third stream (offload's third stream).

Prints one JSON object (GB/s and ratios; ``slowdown`` = span beside the other direction / span alone − 1).

Usage (one CUDA GPU): python benchmarks/probe_copy_duplex.py [--iters 20] > probe_copy_duplex.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    dev = torch.device("cuda")
    s_h, s_d, s_c = (torch.cuda.Stream() for _ in range(3))
    A = torch.rand(2048, 8192, device=dev).to(torch.bfloat16)
    W = torch.rand(8192, 8192, device=dev).to(torch.bfloat16)
    C = torch.empty(2048, 8192, device=dev, dtype=torch.bfloat16)
    out: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    def ev() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    for mib in (32, 256):
        n = mib * 2**20
        hin = torch.empty(n, dtype=torch.uint8).pin_memory()
        hout = torch.empty(n, dtype=torch.uint8).pin_memory()
        din = torch.empty(n, dtype=torch.uint8, device=dev)
        dout = torch.empty(n, dtype=torch.uint8, device=dev)
        res: dict[str, float] = {}

        def run(h2d: bool, d2h: bool, gemm: bool) -> tuple[float, float]:
            torch.cuda.synchronize()
            go = torch.cuda.Event()
            go.record()
            e = [ev() for _ in range(4)]
            spans = [float("nan"), float("nan")]
            if gemm:
                s_c.wait_event(go)
                with torch.cuda.stream(s_c):
                    for _ in range(max(1, mib // 8)):  # ~0.4 ms per GEMM: longer than the copies
                        torch.matmul(A, W, out=C)
            if h2d:
                s_h.wait_event(go)
                with torch.cuda.stream(s_h):
                    e[0].record()
                    din.copy_(hin, non_blocking=True)
                    e[1].record()
            if d2h:
                s_d.wait_event(go)
                with torch.cuda.stream(s_d):
                    e[2].record()
                    hout.copy_(dout, non_blocking=True)
                    e[3].record()
            torch.cuda.synchronize()
            if h2d:
                spans[0] = e[0].elapsed_time(e[1]) * 1e-3
            if d2h:
                spans[1] = e[2].elapsed_time(e[3]) * 1e-3
            return spans[0], spans[1]

        for _ in range(3):
            run(True, True, True)
        for label, h, d, g in (("solo", True, False, False), ("solo", False, True, False),
                               ("both", True, True, False), ("both_gemm", True, True, True),
                               ("h2d_gemm", True, False, True), ("d2h_gemm", False, True, True)):
            rs = [run(h, d, g) for _ in range(a.iters)]
            if h:
                res[f"{label}_h2d_s"] = statistics.median(r[0] for r in rs)
            if d:
                res[f"{label}_d2h_s"] = statistics.median(r[1] for r in rs)
        h1, d1 = res["solo_h2d_s"], res["solo_d2h_s"]
        out[f"{mib}MiB"] = {
            **{k: round(v * 1e3, 4) for k, v in res.items()},
            "h2d_GBps_alone": round(n / h1 / 1e9, 2), "d2h_GBps_alone": round(n / d1 / 1e9, 2),
            "h2d_slowdown_beside_d2h": round(res["both_h2d_s"] / h1 - 1, 4),
            "d2h_slowdown_beside_h2d": round(res["both_d2h_s"] / d1 - 1, 4),
            "h2d_slowdown_beside_d2h_and_gemm": round(res["both_gemm_h2d_s"] / h1 - 1, 4),
            "d2h_slowdown_beside_h2d_and_gemm": round(res["both_gemm_d2h_s"] / d1 - 1, 4),
            "h2d_slowdown_beside_gemm": round(res["h2d_gemm_h2d_s"] / h1 - 1, 4),
            "d2h_slowdown_beside_gemm": round(res["d2h_gemm_d2h_s"] / d1 - 1, 4),
        }
    # Streams of copies: n back-to-back copies of `mib` MiB on each direction's stream (256 MiB in all), alone and
    # with the other direction streaming too: the steady rate of chunked copies in both directions.
    for mib in (8, 32, 128):
        n, reps = mib * 2**20, 256 // mib
        hin = torch.empty(n, dtype=torch.uint8).pin_memory()
        hout = torch.empty(n, dtype=torch.uint8).pin_memory()
        din = torch.empty(n, dtype=torch.uint8, device=dev)
        dout = torch.empty(n, dtype=torch.uint8, device=dev)

        def stream(h2d: bool, d2h: bool) -> tuple[float, float]:
            torch.cuda.synchronize()
            go = torch.cuda.Event()
            go.record()
            e = [ev() for _ in range(4)]
            for on, s_, k, fn in ((h2d, s_h, 0, lambda: din.copy_(hin, non_blocking=True)),
                                  (d2h, s_d, 2, lambda: hout.copy_(dout, non_blocking=True))):
                if not on:
                    continue
                s_.wait_event(go)
                with torch.cuda.stream(s_):
                    e[k].record()
                    for _ in range(reps):
                        fn()
                    e[k + 1].record()
            torch.cuda.synchronize()
            return (e[0].elapsed_time(e[1]) * 1e-3 if h2d else float("nan"),
                    e[2].elapsed_time(e[3]) * 1e-3 if d2h else float("nan"))

        stream(True, True)
        solo_h = statistics.median(stream(True, False)[0] for _ in range(5))
        solo_d = statistics.median(stream(False, True)[1] for _ in range(5))
        both = [stream(True, True) for _ in range(5)]
        bh, bd = statistics.median(b[0] for b in both), statistics.median(b[1] for b in both)
        first, last, solo_later = (bd, bh, solo_h) if bd <= bh else (bh, bd, solo_d)
        rho_last = first / (solo_later - (last - first)) - 1  # the later one's rate while the other ran
        out[f"stream_{reps}x{mib}MiB"] = {
            "solo_h2d_ms": round(solo_h * 1e3, 4), "solo_d2h_ms": round(solo_d * 1e3, 4),
            "both_h2d_ms": round(bh * 1e3, 4), "both_d2h_ms": round(bd * 1e3, 4),
            "h2d_slowdown_total": round(bh / solo_h - 1, 4), "d2h_slowdown_total": round(bd / solo_d - 1, 4),
            "later_direction": "h2d" if bd <= bh else "d2h",
            "later_rate_slowdown_while_both": round(rho_last, 4),
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
