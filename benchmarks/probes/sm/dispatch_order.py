"""Which queued kernel gets the SMs that a finishing kernel frees: first come first served, or shared?

Plain PyTorch on one GPU, no schedsim (rule wave-dispatch of ``schedsim/gpu/rules.py``: block dispatch)::

    python benchmarks/probes/sm/dispatch_order.py --out probe_dispatch_order.json    # ~1 min on an H200

Each scenario launches a *blocker* (4 bf16 4096x2048x8192 GEMMs, one CTA per SM each on an H200) on stream 0,
then, while it runs, kernels on streams 1, 2, ... in the order given; a Kineto (CUPTI) trace gives every
kernel's start and end on the GPU. Times are µs from the blocker's end (without one: the first kernel's
start), medians over ``--reps`` repetitions. ``G`` is a bf16 2048x1024x8192 GEMM
(128 CTAs: one wave, 4 SMs left free), ``A`` an elementwise ``add_`` moving ``--add-mb`` MB.

If the GPU dispatches queued kernels first come first served (one kernel places all its CTAs before the next
places any), in ``B+G,G`` the first G ends one G-time after the blocker and the second about two; if it shares
the freed SMs between queued kernels, both end near two G-times. ``B+G,A`` / ``B+A,G`` ask the same of an
elementwise kernel (small CTAs, several per SM); ``L~A`` / ``L~G`` launch the second kernel while ``L`` runs (a
bf16 2048x1024x65536 GEMM: one wave of 128 CTAs; no blocker): the second finds only the SMs ``L`` left free, so
``L~A`` gives an elementwise kernel's speed on those few SMs.

On CPU it prints that it needs a GPU and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

#: name -> (blocker first, kernels on streams 1, 2, ... in launch order, host gap before each later kernel)
#: G: bf16 2048x1024x8192 GEMM; A: add_ of --add-mb MB; a: add_ of a quarter of that
SCENARIOS = {
    "G": (False, "G", False), "A": (False, "A", False), "a": (False, "a", False), "B": (True, "", False),
    "B+G": (True, "G", False), "B+A": (True, "A", False), "B+G,G": (True, "GG", False),
    "B+G,A": (True, "GA", False), "B+A,G": (True, "AG", False), "B+G,G,A": (True, "GGA", False),
    "B+G,a": (True, "Ga", False), "L": (False, "L", False), "L~G": (False, "LG", True),
    "L~A": (False, "LA", True), "L~a": (False, "La", True),
}
#: the blocker: this many bf16 4096x2048x8192 GEMMs back to back on stream 0 (so that, with the profiler's
#: launch cost, every later kernel is queued before the blocker ends)
BLOCKER_GEMMS = 4


def _kernels(path: str) -> list[dict]:
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    return sorted(ev, key=lambda e: e["ts"])


def _aligned(rows: list[list[tuple]], blocker: bool) -> list[dict]:
    """Per kernel (in start order), the medians over repetitions of its start, end and span, µs from the
    blocker's end (its stream's last kernel) or, without one, from the first kernel's start."""
    n = min(len(r) for r in rows)
    per_k: list[dict] = []
    for k in range(n):
        starts, ends = [], []
        for r in rows:
            t0 = max(e[1] for e in r if e[3] == r[0][3]) if blocker else r[0][0]
            starts.append(r[k][0] - t0)
            ends.append(r[k][1] - t0)
        per_k.append({"name": rows[0][k][2], "stream": rows[0][k][3], "grid": rows[0][k][4],
                      "start_us": round(statistics.median(starts), 2), "end_us": round(statistics.median(ends), 2),
                      "dur_us": round(statistics.median([e - s for s, e in zip(starts, ends, strict=True)]), 2)})
    return per_k


def run(reps: int, add_mb: float) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    bf = torch.bfloat16
    big = (torch.randn(4096, 8192, device=dev, dtype=bf), torch.randn(8192, 2048, device=dev, dtype=bf))
    big_out = torch.empty(4096, 2048, device=dev, dtype=bf)
    long_in = (torch.randn(2048, 65536, device=dev, dtype=bf), torch.randn(65536, 1024, device=dev, dtype=bf))
    g_in = [(torch.randn(2048, 8192, device=dev, dtype=bf), torch.randn(8192, 1024, device=dev, dtype=bf))
            for _ in range(3)]
    g_out = [torch.empty(2048, 1024, device=dev, dtype=bf) for _ in range(3)]
    n_add = int(add_mb * 1e6 / 3 / 2)
    a_x = [torch.randn(n_add, device=dev, dtype=bf) for _ in range(3)]
    a_y = [torch.randn(n_add, device=dev, dtype=bf) for _ in range(3)]
    streams = [torch.cuda.Stream() for _ in range(5)]

    def launch(sc: str) -> None:
        s0 = streams[0]
        main = torch.cuda.current_stream()
        for s in streams:
            s.wait_stream(main)
        blocker, parts, gap = SCENARIOS[sc]
        if blocker:
            with torch.cuda.stream(s0):
                for _ in range(BLOCKER_GEMMS):
                    torch.matmul(*big, out=big_out)
        for j, p in enumerate(parts):
            if j > 0 and gap:  # the later kernel comes after the first has taken the SMs: spin 15 us
                t_end = time.perf_counter() + 15e-6
                while time.perf_counter() < t_end:
                    pass
            with torch.cuda.stream(streams[1 + j]):
                if p == "G":
                    torch.matmul(*g_in[j], out=g_out[j])
                elif p == "L":
                    torch.matmul(*long_in, out=g_out[j])
                elif p == "A":
                    a_x[j].add_(a_y[j])
                else:
                    a_x[j][: n_add // 4].add_(a_y[j][: n_add // 4])
        for s in streams:
            main.wait_stream(s)

    out: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                 "sms": torch.cuda.get_device_properties(dev).multi_processor_count, "add_mb": add_mb,
                 "reps": reps, "scenarios": {}}
    for sc in SCENARIOS:
        for _ in range(3):
            launch(sc)
        torch.cuda.synchronize()
        rows: list[list[tuple[float, float, str, int]]] = []
        for _ in range(reps):
            torch.cuda.synchronize()
            time.sleep(0.02)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                launch(sc)
                torch.cuda.synchronize()
            fd, path = tempfile.mkstemp(suffix=".json")
            os.close(fd)
            prof.export_chrome_trace(path)
            ev = _kernels(path)
            os.unlink(path)
            rows.append([(e["ts"], e["ts"] + e["dur"], e["name"][:60], int(e.get("args", {}).get("stream", -1)),
                          e.get("args", {}).get("grid")) for e in ev])
        per_k = _aligned(rows, SCENARIOS[sc][0])
        out["scenarios"][sc] = per_k
        print(sc, " | ".join(f"{k['name'][:24]} s{k['stream']} {k['start_us']:.1f}..{k['end_us']:.1f}"
                             for k in per_k), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="probe_dispatch_order.json")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--add-mb", type=float, default=50.3)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("needs torch and a GPU", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("probe_dispatch_order needs a CUDA GPU; nothing to do on CPU")
        return 0
    res = run(a.reps, a.add_mb)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
