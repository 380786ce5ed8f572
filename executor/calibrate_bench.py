"""The options of a ``schedsim calibrate`` run (:class:`CalibrateOptions`) and the timer every measurement
uses (``_Bench``: event-timed launches back to back behind ``torch.cuda._sleep``, GPU-side sweeps and the
slowest rank's median).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedsim.errors import printable

__all__ = ["CalibrateOptions", "DEFAULT_GRID", "QUICK_GRID", "COLLECTIVES"]

#: (m, n, k): the shipped h200 table's shapes plus S0's and small ones for the kernel floor.
DEFAULT_GRID: list[tuple[int, int, int]] = [
    (16384, 8192, 8192), (8192, 8192, 8192), (2048, 1024, 8192), (2048, 8192, 8192), (4096, 4096, 4096),
    (1024, 1024, 1024), (512, 512, 512), (256, 256, 256), (128, 128, 128), (64, 64, 64), (32, 11008, 4096),
    (32, 4096, 11008), (4096, 1024, 512), (4096, 512, 1024), (4096, 4096, 512), (4096, 512, 4096), (32, 12288, 4096),
]


QUICK_GRID: list[tuple[int, int, int]] = [(64, 64, 64), (128, 128, 128), (256, 256, 256)]


COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "sendrecv",
               "p2p_unbatched"]


@dataclass
class CalibrateOptions:
    """Options of ``schedsim calibrate`` (see the command's help)."""

    schedules: list[Path] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    out: Path = Path("calibrated.yaml")
    name: str | None = None
    base: str = "h200"
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "tf32", "bf16", "fp16"])
    extra_gemms: list[str] = field(default_factory=list)
    grid: bool = True
    max_bytes: int = 2**30
    min_bytes: int = 1024
    factor: int = 4
    iters: int = 20
    quick: bool = False
    backend: str = "auto"
    device: str = "auto"
    host_processes: int | None = None
    """Fresh processes that measure the host costs (``None``: 3 on CUDA, 0 on CPU ranks)."""


class _Bench:
    def __init__(self, ctx: Any, iters: int) -> None:
        import torch

        self.torch = torch
        self.ctx = ctx
        self.cuda = ctx.cuda
        self.iters = iters
        self.single_gemm: list[list[Any]] = []
        self.gemm_ctas: list[list[Any]] = []
        self.gemm_graph: list[list[Any]] = []
        self.gemm_fork: list[list[Any]] = []
        self.gemm_occ: list[list[Any]] = []
        self.gemm_reduce: list[list[Any]] = []
        self.gemm_memset: list[list[Any]] = []

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.ctx.device)

    def time_batched(self, fn: Callable[[], Any], rotate: Sequence[Callable[[], Any]] | None = None,
                     target_s: float = 2e-3, reps: int = 5) -> tuple[float, float]:
        """Kernel time when launched back to back: ``(per-launch seconds, single-launch seconds)``.

        A single event-timed launch of a tiny kernel also times the event records and the launch
        latency (several µs). So launches are queued behind ``torch.cuda._sleep`` (the GPU waits
        while the host enqueues) and R = target / single-launch time of them (1 ≤ R ≤ 200) are
        timed between two events: per launch = elapsed / R, the median of ``reps``. For long
        kernels R = 1 and both numbers agree. On CPU both are the single-launch time.
        """
        torch = self.torch
        fns = rotate or [fn]
        single = self.time_one(fn, rotate=rotate)
        if not self.cuda:
            return single, single
        R = int(min(200, max(1, round(target_s / max(single, 1e-7)))))
        if R == 1:
            return single, single
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(reps):
            self.sync()
            torch.cuda._sleep(4_000_000)  # ~2 ms at 2 GHz: the host gets ahead of the GPU
            s.record()
            for k in range(R):
                fns[k % len(fns)]()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e-3 / R)
        return float(statistics.median(ts)), single

    def time_gpu_side(self, fn: Callable[[], Any], R: int, reps: int = 5, host_call_us: float = 60.0) -> float:
        """GPU-side seconds per call of ``fn`` (a collective every rank calls): ``R`` calls queued behind
        ``torch.cuda._sleep`` (long enough for the host to enqueue them all) between two events, elapsed
        / R, median of ``reps``. Every rank must pass the same ``R``. On CPU: :meth:`time_one`."""
        torch = self.torch
        if not self.cuda:
            return self.time_one(fn, iters=max(3, reps), warmup=1)
        fn()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = int(2.0e9 * (R * host_call_us * 1e-6 + 1e-3))
        ts = []
        for _ in range(reps):
            self.ctx.barrier()
            torch.cuda._sleep(cycles)
            s.record()
            for _ in range(R):
                fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) * 1e-3 / R)
        return float(statistics.median(ts))

    def time_one(self, fn: Callable[[], Any], iters: int | None = None, warmup: int = 3,
                 rotate: Sequence[Callable[[], Any]] | None = None) -> float:
        """Median seconds of single launches (CUDA events, or perf_counter + sync on CPU)."""
        torch = self.torch
        fns = rotate or [fn]
        n = iters or self.iters
        for k in range(warmup):
            fns[k % len(fns)]()
        self.sync()
        ts = []
        if self.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for k in range(n):
                f = fns[k % len(fns)]
                s.record()
                f()
                e.record()
                e.synchronize()
                ts.append(s.elapsed_time(e) * 1e-3)
        else:
            for k in range(n):
                f = fns[k % len(fns)]
                t0 = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t0)
        return float(statistics.median(ts))


def _log(ctx: Any) -> Callable[[str], None]:
    def log(msg: str) -> None:
        if ctx.rank == 0:
            print(printable(msg, newlines=True), flush=True)

    return log
