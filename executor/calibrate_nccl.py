"""NCCL beside GEMMs, measured for the profile's ``nccl:`` section (see :mod:`schedsim.hardware.profile`).

All ranks (world ≥ 2, CUDA). One ``all_gather_into_tensor`` (the collective of allgather_mm)
of ``S`` bytes of output on stream ``sc`` and a series of ``k`` bf16 GEMMs (8192² × 8192, or 2048³
with ``--quick``; each fills every SM for several waves) on stream ``sg``:

``slowdown_beside_gemm``
    GEMMs issued first, so that their CTAs hold the SMs; the collective is issued right after.
    Factor = the collective's event-timed duration beside the GEMMs / alone. The series is
    sized to outlast the collective (k ≈ 3 × t_comm / t_gemm), so the whole collective overlaps.
``gemm_slowdown_beside_nccl``
    The collective issued first, then a GEMM series of about its length; factor = 1 + extra
    GEMM time / overlapped time, overlapped time = min(collective, GEMM series).
``curve``
    Both factors for GEMM series of 0.5, 1, 2 and 4 × the collective's length (kept in the
    calibration JSON): the dependence on the overlap.
``sms_per_collective``
    The grid size (CTAs; NCCL runs one per channel) of the collective's kernel in a Kineto
    trace of one call (``args.grid``); None when the trace has no grid.

NCCL kernels need their channels' SMs: when GEMM CTAs hold every SM, a channel's CTA starts
only as a GEMM CTA retires (CUDA Programming Guide, "Hardware Multithreading": blocks are
scheduled as resources free up), hence the slowdown.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

__all__ = ["collective_grid", "kernel_events", "nccl_beside_gemm"]


def kernel_events(torch: Any, fn: Callable[[], Any], calls: int = 1) -> list[dict[str, Any]]:
    """The events of a Kineto trace of ``calls`` calls of ``fn`` in one profiler session, each followed by a
    ``torch.cuda.synchronize`` (so each starts on an idle GPU) (Chrome trace ``traceEvents``; CUPTI's kernel records
    have ``"cat": "kernel"`` and ``args.grid``); empty when the trace cannot be written or read."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
            torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            events: list[dict[str, Any]] = json.load(f).get("traceEvents", [])
            return events
    except Exception:
        return []
    finally:
        os.unlink(path)


def collective_grid(torch: Any, fn: Callable[[], Any]) -> int | None:
    """CTAs of the NCCL kernel that ``fn`` launches, read from a Kineto trace (None if absent)."""
    for ev in kernel_events(torch, fn):
        if ev.get("cat") == "kernel" and "nccl" in str(ev.get("name", "")).lower():
            grid = (ev.get("args") or {}).get("grid")
            if isinstance(grid, list) and grid:
                return int(grid[0]) * int(grid[1] if len(grid) > 1 else 1) * int(grid[2] if len(grid) > 2 else 1)
    return None


def nccl_beside_gemm(b: Any, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """All ranks: the factors of the module docstring (rank 0's figures returned on every rank)."""
    torch = b.torch
    import torch.distributed as dist

    ctx = b.ctx
    dev = ctx.device
    n = ctx.world
    side = 2048 if quick else 8192
    A = torch.rand(side, side, device=dev).to(torch.bfloat16)
    B = torch.rand(side, side, device=dev).to(torch.bfloat16)
    C = torch.empty(side, side, device=dev, dtype=torch.bfloat16)
    S = (16 if quick else 256) * 2**20
    out = torch.empty(S // 4, device=dev)
    inp = torch.ones(S // 4 // n, device=dev)
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def comm() -> None:
        ag(out, inp)

    t_mm = b.time_one(lambda: torch.matmul(A, B, out=C), iters=10)
    ctx.barrier()
    t_comm = b.time_gpu_side(comm, 4)
    # every rank must use the same series lengths: take rank 0's ratio
    ratio = [t_comm / t_mm]
    if n > 1:
        dist.broadcast_object_list(ratio, src=0, group=ctx.ctrl)
    base = ratio[0]
    sc, sg = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)

    def together(k: int, comm_first: bool) -> tuple[float, float]:
        rc, rg = [], []
        for _ in range(5):
            ctx.barrier()
            torch.cuda._sleep(2_000_000)  # the host enqueues both streams before either starts
            go = torch.cuda.Event()
            go.record()
            e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            sc.wait_event(go)
            sg.wait_event(go)

            def issue_comm(e: list[Any] = e) -> None:
                with torch.cuda.stream(sc):
                    e[0].record()
                    comm()
                    e[1].record()

            def issue_gemm(e: list[Any] = e) -> None:
                with torch.cuda.stream(sg):
                    e[2].record()
                    for _ in range(k):
                        torch.matmul(A, B, out=C)
                    e[3].record()

            if comm_first:
                issue_comm()
                issue_gemm()
            else:
                issue_gemm()
                issue_comm()
            b.sync()
            rc.append(e[0].elapsed_time(e[1]) * 1e-3)
            rg.append(e[2].elapsed_time(e[3]) * 1e-3)
        return float(statistics.median(rc)), float(statistics.median(rg))

    curve = []
    for mult in (0.5, 1.0, 2.0, 4.0):
        k = max(1, round(mult * base))
        t_series = b.time_one(lambda k=k: [torch.matmul(A, B, out=C) for _ in range(k)], iters=3)
        c_after, _g = together(k, comm_first=False)
        c_first, g_beside = together(k, comm_first=True)
        overlap = max(1e-9, min(c_first, g_beside))
        curve.append({"gemm_series_over_comm": mult, "gemms": k, "gemm_series_alone_ms": t_series * 1e3,
                      "comm_alone_ms": t_comm * 1e3, "comm_after_gemms_ms": c_after * 1e3,
                      "comm_first_ms": c_first * 1e3, "gemm_series_beside_ms": g_beside * 1e3,
                      "comm_slowdown": c_after / t_comm,
                      "gemm_slowdown": 1.0 + max(0.0, g_beside - t_series) / overlap})
    full = [c for c in curve if c["gemm_series_over_comm"] >= 2.0]
    one = min(curve, key=lambda c: abs(c["gemm_series_over_comm"] - 1.0))
    grid = collective_grid(torch, comm)
    res = {"slowdown_beside_gemm": max(1.0, statistics.median(c["comm_slowdown"] for c in full)),
           "gemm_slowdown_beside_nccl": max(1.0, one["gemm_slowdown"]), "sms_per_collective": grid,
           "comm_bytes": S, "gemm_side": side, "curve": curve}
    log(f"[nccl] all_gather {S >> 20} MiB: {t_comm * 1e3:.3f} ms alone, x{res['slowdown_beside_gemm']:.2f} beside "
        f"wave-filling bf16 GEMMs; GEMMs x{res['gemm_slowdown_beside_nccl']:.2f} beside it; kernel grid {grid}")
    return res
