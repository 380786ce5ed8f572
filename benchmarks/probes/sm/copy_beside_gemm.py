"""Does a same-device copy (``dst.copy_(src)``, a "Memcpy DtoD" in Kineto) or an elementwise kernel wait for the
SMs held by a GEMM on another stream? (issue 8, rule wave-dispatch of schedsim/gpu/rules.py; one GPU, ~30 s).

Each scenario: stream A runs GEMM(s), the host waits ``--lead-us`` so they are resident, then stream B issues the
probe op. Times are CUDA events (A's start before its first GEMM; B's end after the probe op), medians of
``--reps``, in ms from A's start:

* ``solo``: the probe op alone, and each GEMM alone (back to back, after a warm-up);
* ``beside_multiwave``: A runs a fp32 8192x4096x8192 GEMM (5,120 CTAs, ~11 ms on an H200): under FIFO block
  dispatch the probe op gets an SM only once every CTA of the GEMM is dispatched (its last wave);
* ``beside_one_wave_queued``: A runs a fp32 2048x1024x8192 GEMM (128 CTAs, one wave, ~0.7 ms) and stream C has
  the same GEMM queued before the probe op: under FIFO the probe op waits until C's GEMM is fully placed,
  i.e. until A's GEMM retires.

Probe ops: ``copy`` (``dst.copy_(src)`` of N bytes, read + written = 2N; what ``schedsim execute`` ran for a
bytes-only ``compute`` op until 2026-12-02), ``add`` (``torch.add(a, b, out=c)``, 3 tensors, read 2 + written 1:
the S0 ``output_chunk.add_``), ``fill`` (``c.zero_()``). Also the host time of one call of each (µs, 400 calls
queued behind a ``torch.cuda._sleep`` so the GPU never pushes back, median of 5 loops), with a small
``torch.matmul(out=)`` for reference. Writes JSON to ``--out`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=float, default=6291456.0, help="bytes each probe op moves (read + written)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--lead-us", type=float, default=300.0)
    ap.add_argument("--out", default="probe_d2d_dispatch.json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    A, B, C = (torch.cuda.Stream() for _ in range(3))
    f32 = torch.float32

    def gemm(m: int, n: int, k: int):
        x = torch.rand(m, k, device=dev, dtype=f32)
        w = torch.rand(k, n, device=dev, dtype=f32)
        o = torch.empty(m, n, device=dev, dtype=f32)
        return lambda: torch.matmul(x, w, out=o)

    big = gemm(8192, 4096, 8192)
    one = gemm(2048, 1024, 8192)
    one_c = gemm(2048, 1024, 8192)
    nb = int(a.bytes)
    src = torch.rand(nb // 8, device=dev)  # copy: N/2 bytes read, N/2 written
    dst = torch.empty_like(src)
    x = torch.rand(nb // 12, device=dev)  # add: 3 tensors of N/3 bytes
    y = torch.rand(nb // 12, device=dev)
    z = torch.empty_like(x)
    fill_t = torch.empty(nb // 4, device=dev)  # fill: N bytes written
    probes = {"copy": lambda: dst.copy_(src), "add": lambda: torch.add(x, y, out=z), "fill": lambda: fill_t.zero_()}

    def ev():
        return torch.cuda.Event(enable_timing=True)

    def timed_alone(fn, reps: int) -> float:
        out = []
        for _ in range(reps):
            torch.cuda.synchronize()
            s, e = ev(), ev()
            s.record()
            fn()
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e))
        return statistics.median(out)

    for fn in (big, one, *probes.values()):
        fn()
    torch.cuda.synchronize()
    res: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "bytes": nb,
                 "lead_us": a.lead_us, "solo_ms": {}, "scenarios": {}}
    res["solo_ms"]["gemm_8192x4096x8192"] = timed_alone(big, 3)
    res["solo_ms"]["gemm_2048x1024x8192"] = timed_alone(one, a.reps)
    for name, fn in probes.items():
        res["solo_ms"][name] = timed_alone(fn, a.reps)

    def scenario(first, queued, probe) -> dict:
        ends, firsts = [], []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            s, e_a, e_b = ev(), ev(), ev()
            with torch.cuda.stream(A):
                s.record(A)
                first()
                e_a.record(A)
            if queued is not None:
                with torch.cuda.stream(C):
                    queued()
            time.sleep(a.lead_us * 1e-6)
            with torch.cuda.stream(B):
                probe()
                e_b.record(B)
            torch.cuda.synchronize()
            ends.append(s.elapsed_time(e_b))
            firsts.append(s.elapsed_time(e_a))
        return {"probe_end_ms": statistics.median(ends), "first_gemm_end_ms": statistics.median(firsts),
                "probe_end_all_ms": ends}

    sx = torch.rand(4096, device=dev)
    sd = torch.empty_like(sx)
    sa, sb, sc = (torch.rand(1024, device=dev) for _ in range(3))
    ma, mb, mc = (torch.rand(32, 32, device=dev) for _ in range(3))
    small = {"copy_4KiB": lambda: sd.copy_(sx), "add_4KiB": lambda: torch.add(sa, sb, out=sc),
             "fill_4KiB": lambda: sd.zero_(), "matmul_32": lambda: torch.matmul(ma, mb, out=mc)}
    res["host_call_us"] = {}
    for name, fn in small.items():
        loops = []
        for _ in range(5):
            torch.cuda.synchronize()
            torch.cuda._sleep(50_000_000)  # ~25 ms of spinning: the 400 calls queue behind it
            t0 = time.perf_counter()
            for _ in range(400):
                fn()
            loops.append((time.perf_counter() - t0) / 400 * 1e6)
        torch.cuda.synchronize()
        res["host_call_us"][name] = statistics.median(loops)
    for name, fn in probes.items():
        res["scenarios"][f"beside_multiwave/{name}"] = scenario(big, None, fn)
        res["scenarios"][f"beside_one_wave_queued/{name}"] = scenario(one, one_c, fn)
    print(f"{res['gpu']}, torch {res['torch']}, probe ops of {nb / 1e6:.2f} MB moved")
    print("solo ms: " + ", ".join(f"{k} {v:.4f}" for k, v in res["solo_ms"].items()))
    print("host us per call: " + ", ".join(f"{k} {v:.2f}" for k, v in res["host_call_us"].items()))
    print(f"{'scenario':40s} {'probe op ends (ms from A start)':>32s} {'A GEMM ends':>12s}")
    for k, v in res["scenarios"].items():
        print(f"{k:40s} {v['probe_end_ms']:32.4f} {v['first_gemm_end_ms']:12.4f}")
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
