"""GEMM time against the GPU's power state: sustained duty cycles, onset and recovery, one GPU.

Why (issue 8): pipelines run their GEMMs 3.6–5.3 % over the calibrated table on 2×H200, and back-to-back bf16
GEMMs slow by ~17 % after ~36 ms (a first probe of the GPU's state, 2026-12-01 00:42 UTC): the board's power limiter
lowers the SM clock. A model of it needs, per kernel class, the slowdown at each sustained duty cycle, how fast
the slowdown sets in, and how fast it goes away. Measured here with the executor's operands (uniform [0, 1),
as ``executor/kernels.py`` and ``calibrate`` make them):

* ``duty``: for each duty cycle d, for ``--seconds``: one GEMM between two events, the host waits for its end,
  then keeps the GPU idle (host spin) for t_gemm·(1−d)/d. Medians of the GEMM time over the first 10 and the
  last 40 % of the window (steady state), relative to a cold GEMM (after 1 s idle). A 1 s idle separates levels.
* ``onset``: back-to-back GEMMs from a cold GPU; the median GEMM time in windows of the elapsed time.
* ``recovery``: sustained back-to-back load for 1 s, idle for g, then one GEMM; its time relative to cold.

Prints a table per shape and writes ``--out`` (JSON). ``python benchmarks/probes/gpu_state/power_duty.py`` (needs CUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def spin(s: float) -> None:
    t = time.perf_counter() + s
    while time.perf_counter() < t:
        pass


class Gemm:
    def __init__(self, shape: str, dev: torch.device) -> None:
        m, n, k = (int(x) for x in shape.split("x")[:3])
        self.dt = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[shape.split("x")[3]]
        g = torch.Generator(device=dev).manual_seed(0)
        self.a = torch.rand(m, k, device=dev, dtype=self.dt, generator=g)
        self.b = torch.rand(k, n, device=dev, dtype=self.dt, generator=g)
        self.c = torch.empty(m, n, device=dev, dtype=self.dt)
        self.e0, self.e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(self) -> float:
        """One GEMM between events, waited for; seconds."""
        self.e0.record()
        torch.matmul(self.a, self.b, out=self.c)
        self.e1.record()
        self.e1.synchronize()
        return self.e0.elapsed_time(self.e1) / 1e3

    def burst(self, seconds: float) -> list[tuple[float, float]]:
        """Back-to-back GEMMs for ``seconds``, each between events: [(start offset s, duration s)]."""
        n = max(4, int(seconds / self.cold))
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        torch.cuda._sleep(2_000_000)  # a short spin kernel so the queue fills before the first GEMM starts
        for i in range(n):
            ev[i].record()
            torch.matmul(self.a, self.b, out=self.c)
        ev[n].record()
        torch.cuda.synchronize()
        d = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(n)]
        t = [ev[0].elapsed_time(ev[i]) / 1e3 for i in range(n)]
        return list(zip(t, d, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4096x16384x4096xbf16,8192x4096x8192xfp32,4096x4096x4096xbf16")
    ap.add_argument("--duties", default="1.0,0.9,0.75,0.6,0.45,0.3")
    ap.add_argument("--seconds", type=float, default=1.2)
    ap.add_argument("--gaps-ms", default="1,5,20,100,300")
    ap.add_argument("--out", default="probe_power_duty.json")
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    res: dict[str, dict] = {}
    for shape in a.shapes.split(","):
        g = Gemm(shape, dev)
        for _ in range(5):
            g.timed()
        time.sleep(1.0)
        g.cold = statistics.median(g.timed() for _ in range(3))
        r: dict = {"cold_s": g.cold, "duty": {}, "onset": [], "recovery": {}}
        # onset from cold: back-to-back for 1.5 s
        time.sleep(1.0)
        pts = g.burst(1.5)
        edges = [0, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.5]
        for lo, hi in zip(edges, edges[1:], strict=False):
            w = [d for t, d in pts if lo <= t < hi]
            if w:
                r["onset"].append({"from_s": lo, "to_s": hi, "n": len(w), "rel": statistics.median(w) / g.cold})
        for duty in (float(x) for x in a.duties.split(",")):
            time.sleep(1.0)
            t0 = time.perf_counter()
            seq: list[tuple[float, float]] = []
            while (now := time.perf_counter() - t0) < a.seconds:
                d = g.timed()
                seq.append((now, d))
                if duty < 1.0:
                    spin(d * (1 - duty) / duty)
            first = [d for t, d in seq if t < 0.1 * a.seconds]
            last = [d for t, d in seq if t >= 0.6 * a.seconds]
            busy = sum(d for _, d in seq) / (time.perf_counter() - t0)
            r["duty"][f"{duty:g}"] = {"achieved_duty": busy, "n": len(seq),
                                      "first_rel": statistics.median(first) / g.cold,
                                      "steady_rel": statistics.median(last) / g.cold}
        for gap in (float(x) for x in a.gaps_ms.split(",")):
            time.sleep(0.5)
            g.burst(1.0)
            spin(gap / 1e3)
            r["recovery"][f"{gap:g}"] = g.timed() / g.cold
        res[shape] = r
        print(f"\n{shape}: cold {g.cold * 1e6:.1f} us")
        print("  onset (back to back from cold): " + ", ".join(f"{o['from_s'] * 1e3:g}-{o['to_s'] * 1e3:g} ms "
                                                             f"{(o['rel'] - 1) * 100:+.1f}%" for o in r["onset"]))
        for k, v in r["duty"].items():
            print(f"  duty {k:>4s} (achieved {v['achieved_duty']:.2f}): first {(v['first_rel'] - 1) * 100:+.1f}%  "
                  f"steady {(v['steady_rel'] - 1) * 100:+.1f}%  n={v['n']}")
        print("  recovery after 1 s of load, idle gap: " + ", ".join(f"{k} ms {(v - 1) * 100:+.1f}%"
                                                                  for k, v in r["recovery"].items()))
    with open(a.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "shapes": res}, f, indent=1)


if __name__ == "__main__":
    main()
