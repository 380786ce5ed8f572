"""Copy and contention measurement for ``schedsim calibrate``: pinned h2d / d2h and d2d copy rates, duplex
copies (:func:`duplex_factors`), and the slowdown of a GEMM series beside a copy or a large all_reduce
(copy-engine and NCCL contention factors).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from executor.calibrate_bench import _Bench
from executor.calibrate_graph import _start_event

__all__ = ["duplex_factors"]


def _measure_copies(b: _Bench, quick: bool, log: Callable[[str], None]) -> dict[str, float]:
    torch = b.torch
    n = (8 if quick else 256) * 2**20
    dev = b.ctx.device
    cpu = torch.device("cpu")
    res: dict[str, float] = {}
    if b.cuda:
        h = torch.empty(n, dtype=torch.uint8, device=cpu).pin_memory()
        d = torch.empty(n, dtype=torch.uint8, device=dev)
        d2 = torch.empty(n, dtype=torch.uint8, device=dev)
        t = b.time_one(lambda: d.copy_(h, non_blocking=True), iters=10)
        res["h2d_GBps"] = n / t / 1e9
        t = b.time_one(lambda: h.copy_(d, non_blocking=True), iters=10)
        res["d2h_GBps"] = n / t / 1e9
        t = b.time_one(lambda: d2.copy_(d), iters=10)
        res["d2d_GBps"] = 2 * n / t / 1e9
        hs = torch.empty(4096, dtype=torch.uint8, device=cpu).pin_memory()
        ds = torch.empty(4096, dtype=torch.uint8, device=dev)
        res["latency_us"] = b.time_one(lambda: ds.copy_(hs, non_blocking=True), iters=50) * 1e6
    else:
        a = torch.empty(n, dtype=torch.uint8)
        c = torch.empty(n, dtype=torch.uint8)
        t = b.time_one(lambda: c.copy_(a), iters=10)
        res = {"h2d_GBps": n / t / 1e9, "d2h_GBps": n / t / 1e9, "d2d_GBps": 2 * n / t / 1e9}
        hs, ds = torch.empty(4096, dtype=torch.uint8), torch.empty(4096, dtype=torch.uint8)
        res["latency_us"] = b.time_one(lambda: ds.copy_(hs), iters=50) * 1e6
    log(f"[copies] h2d {res['h2d_GBps']:.1f} GB/s, d2h {res['d2h_GBps']:.1f} GB/s, d2d {res['d2d_GBps']:.1f} GB/s "
        f"(read+write), small-copy latency {res['latency_us']:.1f} us" + ("" if b.cuda else " (CPU: host memcpy)"))
    return res


def duplex_factors(solo_h2d: float, solo_d2h: float, both_h2d: float, both_d2h: float) -> tuple[float, float]:
    """``(h2d_slowdown_beside_d2h, d2h_slowdown_beside_h2d)`` from two equal streams of copies started together.

    ``solo_*``: seconds one direction's stream takes alone; ``both_*``: each stream's seconds when both run. The
    stream that ends first ran beside the other all along: its factor is both / solo − 1. The later one ran
    beside it for the first stream's time ``f`` and got ``solo − (both − f)`` of its solo work done then, so its
    factor is f / that − 1 (the rate factor :func:`schedsim.gpu.rates.copy_rate` applies while the reverse
    engine copies). When the later stream did no measurable work beside the first (it ended ``solo`` or more
    after it: no finite factor fits), its factor is its whole run's, both / solo − 1, a lower bound. Negative
    values (noise) are clamped to 0.

    >>> h, d = duplex_factors(4.0, 4.0, 5.0, 4.4)  # d2h ends first, 10 % slower; h2d did 3.4 of 4.0 in 4.4
    >>> round(h, 4), round(d, 4)
    (0.2941, 0.1)
    """

    def later(solo: float, both: float, first: float) -> float:
        done = solo - (both - first)  # solo-seconds of work done while the first stream ran
        return first / done - 1.0 if done > 0.0 else both / solo - 1.0

    if both_d2h <= both_h2d:
        d = both_d2h / solo_d2h - 1.0
        h = later(solo_h2d, both_h2d, both_d2h)
    else:
        h = both_h2d / solo_h2d - 1.0
        d = later(solo_d2h, both_d2h, both_h2d)
    return max(0.0, h), max(0.0, d)


def _measure_duplex(b: _Bench, quick: bool, log: Callable[[str], None]) -> dict[str, float]:
    """Duplex copy factors (CUDA): a stream of pinned h2d copies and one of d2h copies (8 × 32 MiB each, the
    chunked copies of offloading; ~40 ms a run, so ``quick`` too), alone and started together by one event,
    medians of 5;
    :func:`duplex_factors`. Measured on one H200 ([evidence: copy-duplex]): the factors
    move between hosts of one machine kind (h2d 0.07-0.35, d2h 0.04-0.09), so measure on the host that runs."""
    torch = b.torch
    dev = b.ctx.device
    mib, reps = 32, 8
    n = mib * 2**20
    hin, hout = torch.empty(n, dtype=torch.uint8).pin_memory(), torch.empty(n, dtype=torch.uint8).pin_memory()
    din, dout = torch.empty(n, dtype=torch.uint8, device=dev), torch.empty(n, dtype=torch.uint8, device=dev)
    s_h, s_d = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)

    def run(h2d: bool, d2h: bool) -> tuple[float, float]:
        b.sync()
        go = _start_event(torch)
        e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        for on, st, k, dst, src in ((h2d, s_h, 0, din, hin), (d2h, s_d, 2, hout, dout)):
            if on:
                st.wait_event(go)
                with torch.cuda.stream(st):
                    e[k].record()
                    for _ in range(reps):
                        dst.copy_(src, non_blocking=True)
                    e[k + 1].record()
        b.sync()
        return (e[0].elapsed_time(e[1]) * 1e-3 if h2d else 0.0, e[2].elapsed_time(e[3]) * 1e-3 if d2h else 0.0)

    run(True, True)
    sh = statistics.median(run(True, False)[0] for _ in range(5))
    sd = statistics.median(run(False, True)[1] for _ in range(5))
    both = [run(True, True) for _ in range(5)]
    bh, bd = statistics.median(x[0] for x in both), statistics.median(x[1] for x in both)
    h, d = duplex_factors(sh, sd, bh, bd)
    log(f"[duplex] {reps} x {mib} MiB each way: h2d {sh * 1e3:.3f} ms alone, {bh * 1e3:.3f} beside d2h; d2h "
        f"{sd * 1e3:.3f} alone, {bd * 1e3:.3f} beside h2d: slowdown while both copy h2d {h * 100:.1f}%, "
        f"d2h {d * 100:.1f}%")
    return {"h2d_slowdown_beside_d2h": h, "d2h_slowdown_beside_h2d": d, "solo_h2d_s": sh, "solo_d2h_s": sd,
            "both_h2d_s": bh, "both_d2h_s": bd, "chunk_bytes": float(n), "chunks": float(reps)}


def _measure_contention(b: _Bench, quick: bool, log: Callable[[str], None]) -> dict[str, float]:
    """Copy-engine (and, with world ≥ 2, NCCL) contention factors, rank 0 for copies, all ranks for NCCL."""
    torch = b.torch
    dev = b.ctx.device
    res: dict[str, float] = {}
    side = 2048 if quick else 8192
    A = torch.rand(side, side, device=dev).to(torch.bfloat16)
    B = torch.rand(side, side, device=dev).to(torch.bfloat16)
    C = torch.empty(side, side, device=dev, dtype=torch.bfloat16)
    t_mm = b.time_one(lambda: torch.matmul(A, B, out=C), iters=10)
    nb = (16 if quick else 512) * 2**20
    h = torch.empty(nb, dtype=torch.uint8).pin_memory()
    d = torch.empty(nb, dtype=torch.uint8, device=dev)
    t_cp = b.time_one(lambda: d.copy_(h, non_blocking=True), iters=5)
    reps = max(1, round(t_cp / t_mm))
    s1, s2 = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    ratios_mm, ratios_cp = [], []
    t_series = b.time_one(lambda: [torch.matmul(A, B, out=C) for _ in range(reps)], iters=3)
    for _ in range(5):
        b.sync()
        go = _start_event(torch)
        e = [ev() for _ in range(4)]
        s1.wait_event(go)
        s2.wait_event(go)
        with torch.cuda.stream(s1):
            e[0].record()
            for _ in range(reps):
                torch.matmul(A, B, out=C)
            e[1].record()
        with torch.cuda.stream(s2):
            e[2].record()
            d.copy_(h, non_blocking=True)
            e[3].record()
        b.sync()
        t1, t2 = e[0].elapsed_time(e[1]) * 1e-3, e[2].elapsed_time(e[3]) * 1e-3
        ratios_mm.append(t1 / t_series)
        ratios_cp.append(t2 / t_cp)
    res["compute_slowdown_with_copy"] = max(0.0, statistics.median(ratios_mm) - 1.0)
    res["copy_slowdown_with_compute"] = max(0.0, statistics.median(ratios_cp) - 1.0)
    res["gemm_alone_ms"] = t_series * 1e3
    res["copy_alone_ms"] = t_cp * 1e3
    log(f"[contention] bf16 GEMM x{reps} {t_series * 1e3:.3f} ms alone, h2d {nb >> 20} MiB {t_cp * 1e3:.3f} ms alone: "
        f"GEMM slowdown beside the copy {res['compute_slowdown_with_copy'] * 100:.1f}%, copy slowdown beside the "
        f"GEMM {res['copy_slowdown_with_compute'] * 100:.1f}%")
    return res


