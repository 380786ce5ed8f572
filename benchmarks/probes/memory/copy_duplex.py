"""Do a pinned h2d and a d2h copy slow each other down when they run at once (both PCIe directions busy)?

The offload schedule (schedules/offload.yaml) overlaps h2d copies of chunk i+1 with d2h copies of chunk i-1 on
their own copy engines. This probe times, with CUDA events, on one GPU:

* one copy each way (32 MiB, offload's chunk, and 256 MiB): alone, both at once on two streams started by one
  event, and each beside a bf16 GEMM series on a third stream (``slowdown`` = span / span alone − 1);
* streams of copies (8, 32 and 128 MiB chunks, 256 MiB each way): alone and both at once, and the later
  stream's rate factor while both copied (``executor.calibrate_copy.duplex_factors``, what ``calibrate`` records).

Prints one JSON object. Results of 2026-12-01: [evidence: copy-duplex].

Usage (one CUDA GPU): python benchmarks/probes/memory/copy_duplex.py [--iters 20] > probe_copy_duplex.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # executor.calibrate, from a checkout

MiB = 2**20


class Bufs:
    """Pinned host and device buffers of ``n`` bytes for both directions, and the three streams."""

    def __init__(self, n: int, streams: tuple[Any, Any, Any]) -> None:
        dev = torch.device("cuda")
        self.hin = torch.empty(n, dtype=torch.uint8).pin_memory()
        self.hout = torch.empty(n, dtype=torch.uint8).pin_memory()
        self.din = torch.empty(n, dtype=torch.uint8, device=dev)
        self.dout = torch.empty(n, dtype=torch.uint8, device=dev)
        self.s_h, self.s_d, self.s_c = streams

    def timed(self, h2d: bool, d2h: bool, reps: int = 1, gemm: Any = None) -> tuple[float, float]:
        """Seconds of the h2d and d2h copy streams (``reps`` copies each; NaN when off), all started by one
        event; ``gemm``, a callable, is issued first on the third stream."""
        torch.cuda.synchronize()
        go = torch.cuda.Event()
        torch.cuda._sleep(2_000_000)  # ~1 ms: every stream is queued before go fires, so they start together
        go.record()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        if gemm is not None:
            self.s_c.wait_event(go)
            with torch.cuda.stream(self.s_c):
                gemm()
        for on, st, k, dst, src in ((h2d, self.s_h, 0, self.din, self.hin), (d2h, self.s_d, 2, self.hout, self.dout)):
            if on:
                st.wait_event(go)
                with torch.cuda.stream(st):
                    ev[k].record()
                    for _ in range(reps):
                        dst.copy_(src, non_blocking=True)
                    ev[k + 1].record()
        torch.cuda.synchronize()
        return (ev[0].elapsed_time(ev[1]) * 1e-3 if h2d else float("nan"),
                ev[2].elapsed_time(ev[3]) * 1e-3 if d2h else float("nan"))


def single_copies(mib: int, iters: int, streams: tuple[Any, Any, Any], gemm: Any) -> dict[str, float]:
    """One copy each way: alone, together, together beside the GEMMs, and each beside the GEMMs."""
    b = Bufs(mib * MiB, streams)
    for _ in range(3):
        b.timed(True, True, gemm=gemm)
    res: dict[str, float] = {}
    for label, h, d, g in (("solo", True, False, None), ("solo", False, True, None), ("both", True, True, None),
                           ("both_gemm", True, True, gemm), ("h2d_gemm", True, False, gemm),
                           ("d2h_gemm", False, True, gemm)):
        rs = [b.timed(h, d, gemm=g) for _ in range(iters)]
        for on, i, name in ((h, 0, "h2d"), (d, 1, "d2h")):
            if on:
                res[f"{label}_{name}_s"] = statistics.median(r[i] for r in rs)
    h1, d1 = res["solo_h2d_s"], res["solo_d2h_s"]
    return {**{k: round(v * 1e3, 4) for k, v in res.items()},
            "h2d_GBps_alone": round(mib * MiB / h1 / 1e9, 2), "d2h_GBps_alone": round(mib * MiB / d1 / 1e9, 2),
            "h2d_slowdown_beside_d2h": round(res["both_h2d_s"] / h1 - 1, 4),
            "d2h_slowdown_beside_h2d": round(res["both_d2h_s"] / d1 - 1, 4),
            "h2d_slowdown_beside_d2h_and_gemm": round(res["both_gemm_h2d_s"] / h1 - 1, 4),
            "d2h_slowdown_beside_h2d_and_gemm": round(res["both_gemm_d2h_s"] / d1 - 1, 4),
            "h2d_slowdown_beside_gemm": round(res["h2d_gemm_h2d_s"] / h1 - 1, 4),
            "d2h_slowdown_beside_gemm": round(res["d2h_gemm_d2h_s"] / d1 - 1, 4)}


def copy_streams(mib: int, streams: tuple[Any, Any, Any]) -> dict[str, Any]:
    """256 MiB each way in ``mib`` MiB copies back to back on each direction's stream, alone and together."""
    from executor.calibrate_copy import duplex_factors

    b, reps = Bufs(mib * MiB, streams), 256 // mib
    b.timed(True, True, reps)
    solo_h = statistics.median(b.timed(True, False, reps)[0] for _ in range(5))
    solo_d = statistics.median(b.timed(False, True, reps)[1] for _ in range(5))
    both = [b.timed(True, True, reps) for _ in range(5)]
    bh, bd = statistics.median(x[0] for x in both), statistics.median(x[1] for x in both)
    h, d = duplex_factors(solo_h, solo_d, bh, bd)
    return {"solo_h2d_ms": round(solo_h * 1e3, 4), "solo_d2h_ms": round(solo_d * 1e3, 4),
            "both_h2d_ms": round(bh * 1e3, 4), "both_d2h_ms": round(bd * 1e3, 4),
            "h2d_slowdown_total": round(bh / solo_h - 1, 4), "d2h_slowdown_total": round(bd / solo_d - 1, 4),
            "h2d_rate_slowdown_while_both": round(h, 4), "d2h_rate_slowdown_while_both": round(d, 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    dev = torch.device("cuda")
    streams = (torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream())
    A = torch.rand(2048, 8192, device=dev).to(torch.bfloat16)
    W = torch.rand(8192, 8192, device=dev).to(torch.bfloat16)
    C = torch.empty(2048, 8192, device=dev, dtype=torch.bfloat16)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for mib in (32, 256):
        reps = max(1, mib // 8)  # ~0.4 ms per GEMM: the series outlasts the copies

        def gemms(reps: int = reps) -> None:
            for _ in range(reps):
                torch.matmul(A, W, out=C)

        out[f"{mib}MiB"] = single_copies(mib, a.iters, streams, gemms)
    for mib in (8, 32, 128):
        out[f"stream_{256 // mib}x{mib}MiB"] = copy_streams(mib, streams)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
