"""``schedsim calibrate``: measure a hardware profile under torchrun.

What is measured (rank 0 alone unless said otherwise; the other ranks wait):

1. **GEMM** times: ``torch.matmul(a, b, out=c)`` on random inputs, as *kernel
   time when launched back to back* (:meth:`_Bench.time_batched`: R launches
   queued behind ``torch.cuda._sleep`` between two events, elapsed / R). For
   long GEMMs R = 1, i.e. the median of ``--iters`` single event-timed launches
   (the method of the shipped h200 table); for tiny ones a single launch would
   also time the event records and launch latency, which the eager launch
   overhead already accounts for. Input sets rotate (3) when they fit in 3× the
   L2 cache. Shapes: every matmul of the given schedules, ``--gemm MxNxK``
   extras and, unless ``--no-grid``, a default grid (the shapes of the shipped
   h200 table and S0 of docs/sources.md). ``fp32`` is timed with TF32 off, ``tf32`` with it on.
   On CUDA, for each shape also: its kernel's grid and CTAs per SM (the occupancy calculation from
   the Kineto record: ``gemm.ctas``, ``gemm.ctas_per_sm``); for GEMMs under 200 µs its time as a
   CUDA-graph node with operands in L2 and from HBM (``gemm.graph``, :func:`gemm_graph_times`) and,
   for the first 24 shapes, the graph-fork probe at that shape (``launch.graph_fork_edges``,
   :func:`fork_edge_rows`). Rules 4, 8 and 9 of :mod:`schedsim.sim.gpu_model` use them.
2. **Collectives** (all ranks, world size ≥ 2): all_reduce, all_gather,
   reduce_scatter, all_to_all, broadcast, reduce, a sendrecv ring (one
   ``batch_isend_irecv`` per step) and unbatched one-way p2p over a size sweep;
   each size is timed on the GPU side (:meth:`_Bench.time_gpu_side`: calls
   queued back to back behind ``torch.cuda._sleep`` between two events, so the
   table holds kernel time and the host call cost stays in ``launch:``), as the
   slowest rank's median, printed as an
   nccl-tests-style table (size, count, type, redop, root, time, algbw, busbw,
   #wrong: every element of the output is checked against the expected value).
   busbw = algbw × the nccl-tests factor (:func:`schedsim.cost.bus_factor`).
3. **Copies**: pinned h2d and d2h, and d2d (bytes read plus written), 256 MiB
   (8 MiB with ``--quick``).
4. **Launch overhead**: host time per op of (a) a plain loop of tiny
   ``torch.matmul`` launches and (b) the executor's own issue path over a
   two-stream probe of tiny ops with cross-stream waits, without per-op timing
   (stream switch, event waits, launch) and with it (plus start/end events and
   NVTX); of a small all_reduce call; of one ``CUDAGraph.replay()``; and the
   GPU time per node of a graph chain of ``add_`` minus its back-to-back time
   (``launch.graph_per_op_us``, negative on H200), the same chain from HBM
   (``gpu.hbm_miss_us``) and the device's L2 size (``gpu.l2_bytes``).
   The profile's ``launch:`` figures are plain PyTorch's host cost per call by
   kind (:mod:`executor.calibrate_host`): what a user's program pays. The
   executor's own extra cost per op is kept apart in
   ``executor_extra_per_op_us``; (b) stays in the JSON.
6. **NCCL beside GEMMs** (world ≥ 2, CUDA; :mod:`executor.calibrate_nccl`):
   the collective's slowdown beside wave-filling GEMMs, the GEMMs' slowdown
   beside it, the NCCL kernel's CTA count → the profile's ``nccl:`` section.
5. **Contention**: a bf16 GEMM series beside a pinned h2d copy against each
   alone (copy-engine factors), and beside a large all_reduce when world ≥ 2
   (NCCL factors): factor = time together / time alone − 1 over the
   overlapped part, each side sized to about the other's duration. Duplex
   copies (CUDA): streams of pinned h2d and d2h copies together against each
   alone (:func:`duplex_factors`).

Output: the profile YAML (validated as :class:`HardwareProfile`) and a JSON
of the raw measurements next to it (same stem, ``.json``). What is not
measured (peak rates, topology, links when world = 1) comes from ``--base``.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from executor.calibrate_host import (
    comm_host_costs,
    fresh_process_costs,
    gemm_call_rows,
    host_costs,
    launch_fields,
    median_costs,
    tiny_mm,
)
from executor.calibrate_logs import base_profile_dict, default_profile_name, write_profile
from executor.calibrate_nccl import kernel_events, nccl_beside_gemm
from schedsim.errors import printable
from schedsim.nccl_tests import format_table

__all__ = ["CalibrateOptions", "run_calibrate", "DEFAULT_GRID", "duplex_factors"]

#: (m, n, k): the shipped h200 table's shapes plus S0's and small ones for the kernel floor.
DEFAULT_GRID: list[tuple[int, int, int]] = [
    (16384, 8192, 8192), (8192, 8192, 8192), (2048, 1024, 8192), (2048, 8192, 8192), (4096, 4096, 4096),
    (1024, 1024, 1024), (512, 512, 512), (256, 256, 256), (128, 128, 128), (64, 64, 64), (32, 11008, 4096),
    (32, 4096, 11008), (4096, 1024, 512), (4096, 512, 1024), (4096, 4096, 512), (4096, 512, 4096), (32, 12288, 4096),
]
QUICK_GRID: list[tuple[int, int, int]] = [(64, 64, 64), (128, 128, 128), (256, 256, 256)]
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "sendrecv",
               "p2p_unbatched"]
_NCCL_TYPE = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}


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


def _gemm_shapes(o: CalibrateOptions, cuda: bool) -> list[tuple[str, int, int, int]]:
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_schedule, parse_overrides

    out: dict[tuple[str, int, int, int], None] = {}
    for f in o.schedules:
        try:
            spec = load_schedule(f, parse_overrides(o.sets))
            G = build_graph(spec, check=False)
        except Exception as e:
            print(f"[gemm] skipping the shapes of {f}: {e.__class__.__name__}: {str(e).splitlines()[0][:200]}",
                  flush=True)
            continue
        for n in G.nodes:
            op = G.nodes[n]["op"]
            if op.kind == "matmul" and op.dtype not in ("fp8", "int8"):
                out[(op.dtype or "fp32", op.m * op.batch, op.n, op.k)] = None
    dts = o.dtypes if cuda else [d for d in o.dtypes if d in ("fp32", "fp64")] or ["fp32"]
    for s in o.extra_gemms:
        m, n, k = (int(x) for x in s.lower().split("x"))
        for dt in dts:
            out[(dt, m, n, k)] = None
    if o.grid:
        for m, n, k in (QUICK_GRID if o.quick else DEFAULT_GRID):
            for dt in dts:
                out[(dt, m, n, k)] = None
    if not cuda:
        out = {(("fp32" if d in ("tf32", "bf16", "fp16") else d), m, n, k): None for d, m, n, k in out}
    return list(out)


#: A GEMM shape whose timing kept the GPU busy this long (seconds) is followed by :data:`GEMM_REST_S` of idle
#: before the next shape is timed: under longer sustained load the board's power limiter lowers the clock (after
#: ``power.onset_s``, ~40 ms of back-to-back bf16 GEMMs on H200 and H100), and the table holds burst times
#: (:mod:`schedsim.sim.power`). Without the rest a GEMM timed right after a long one reads 12-20 % slow
#: (measurements: docs/validation.md, "Evidence cited by the code").
GEMM_REST_AFTER_S = 0.03
#: seconds of idle that let the limiter forget a sustained load (within a second on H200: calibrate_power)
GEMM_REST_S = 1.0


def _measure_gemms(b: _Bench, shapes: list[tuple[str, int, int, int]], log: Callable[[str], None]) -> list[list[Any]]:
    torch = b.torch
    from executor.kernels import torch_dtype

    dev = b.ctx.device
    l2 = 60e6
    if b.cuda:
        l2 = float(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 60e6) or 60e6)
    rows = []
    busy_s = 0.0  # GPU seconds the previous shape's timing kept the GEMMs running
    for idx, (dt, m, n, k) in enumerate(shapes):
        if b.cuda and busy_s >= GEMM_REST_AFTER_S:
            time.sleep(GEMM_REST_S)
        tdt = torch_dtype(dt)
        nbytes = (m * k + k * n + m * n) * tdt.itemsize
        sets = 3 if nbytes * 3 < 3 * l2 else 1
        fns = []
        for _ in range(sets):
            a = torch.rand((m, k), device=dev, dtype=torch.float32).to(tdt)
            bb = torch.rand((k, n), device=dev, dtype=torch.float32).to(tdt)
            c = torch.empty((m, n), device=dev, dtype=tdt)
            fns.append((lambda a=a, bb=bb, c=c: torch.matmul(a, bb, out=c)))
        if b.cuda:
            torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        t, single = b.time_batched(fns[0], rotate=fns)
        busy_s = single * (3 + b.iters) + (0.0 if t == single else 5 * 2e-3)  # time_one, then time_batched
        tf = 2.0 * m * n * k / t / 1e12
        log(f"[gemm {idx + 1}/{len(shapes)}] {dt:5s} {m}x{n}x{k}: {t * 1e3:.4f} ms ({tf:.1f} TFLOP/s)"
            + (f"; single launch {single * 1e3:.4f} ms" if single != t else ""))
        rows.append([dt, m, n, k, round(t * 1e3, 5)])
        b.single_gemm.append([dt, m, n, k, round(single * 1e3, 5)])
        if b.cuda:
            fns[0]()  # warm: the first call may pick or load the kernel
            torch.cuda.synchronize()
            events = kernel_events(torch, fns[0])
            grid = longest_kernel_ctas(events, m, n, int(torch.cuda.get_device_properties(dev).multi_processor_count))
            if grid:
                b.gemm_ctas.append([dt, m, n, k, grid])
            red = reduction_kernel(events, device_limits(torch, dev))
            if red is not None:
                b.gemm_reduce.append([dt, m, n, k, red[0], round(red[1], 3)])
            occ = longest_kernel_ctas_per_sm(events, device_limits(torch, dev))
            if occ is not None and occ > 1:
                b.gemm_occ.append([dt, m, n, k, occ])
            if t < GRAPH_ROW_MAX_S:
                warm, cold = gemm_graph_times(torch, dev, tdt, m, n, k, l2)
                b.gemm_graph.append([dt, m, n, k, round(warm * 1e3, 6), round(cold * 1e3, 6)])
                log(f"[gemm {idx + 1}/{len(shapes)}] as a graph node: {warm * 1e6:.2f} us (operands in L2), "
                    f"{cold * 1e6:.2f} us (from HBM)")
                if idx < FORK_ROWS_MAX and 2 * GRAPH_LAYERS * (m * k + k * n + 2 * m * n) * tdt.itemsize < 4e9:
                    f = _graph_fork_us(torch, dev, main_only=True, mnk=(m, n, k), dtype=tdt)
                    b.gemm_fork.append([dt, m, n, k, round(f["graph_fork_us"], 4), round(f["graph_main_only_us"], 4)])
                    log(f"[gemm {idx + 1}/{len(shapes)}] fork probe: {f['graph_fork_us']:.2f} us per layer with "
                        f"the aux GEMM waiting, {f['graph_main_only_us']:.2f} without it")
        del fns
    if b.cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.empty_cache()
    return rows


#: GEMMs longer than this (seconds, back to back) get no ``gemm.graph`` row: a node's saving and HBM's extra are
#: then a fraction of a percent of the kernel, and the pool of input sets would cost seconds to time
GRAPH_ROW_MAX_S = 200e-6
#: GEMMs up to this long (seconds, back to back) get a ``gemm.call`` row (their host call over the 64x64
#: matmul's, loops of 200 calls behind a sleep, median over the fresh host processes like every host cost):
#: longer ones keep the GPU busier than any host call
CALL_ROW_MAX_S = 200e-6
#: the fork probe (:func:`_graph_fork_us` at a GEMM's shape) runs for the first this many GEMM shapes: those of the
#: schedules and ``--gemm`` come first, the default grid after them
FORK_ROWS_MAX = 24


def graph_chain_per_node(torch: Any, fns: Sequence[Callable[[], Any]], stream: Any, reps: int = 15) -> float:
    """Seconds per node of ``fns`` captured in order as one CUDA graph on ``stream``, replayed ``reps`` times (after
    3) behind a 1 ms spin, the median replay time / nodes."""
    for f in fns:
        f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for f in fns:
            f()
    torch.cuda.synchronize()
    a0, a1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for r in range(reps + 3):
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)
        a0.record()
        g.replay()
        a1.record()
        torch.cuda.synchronize()
        if r >= 3:
            ts.append(a0.elapsed_time(a1) * 1e-3 / len(fns))
    del g
    return float(statistics.median(ts))


def pool_count(set_bytes: float, l2: float, least: int = 8) -> int:
    """How many input sets of ``set_bytes`` each a chain reads from HBM: enough for 4x the L2 size ``l2`` (bytes),
    at least ``least``, at most 1024 (one graph node per set).

    >>> pool_count(2228224, 62914560), pool_count(65536, 62914560, 64), pool_count(1e9, 62914560)
    (113, 1024, 8)
    """
    return int(min(1024, max(least, -(-4 * l2 // set_bytes))))


def gemm_graph_times(torch: Any, dev: Any, dtype: Any, m: int, n: int, k: int, l2: float) -> tuple[float, float]:
    """``(warm_s, cold_s)`` of one ``torch.matmul(a, b, out=c)`` as a node of a CUDA-graph chain (profile
    ``gemm.graph``, rule 9 of :mod:`schedsim.sim.gpu_model`): 64 nodes reusing one (a, b), outputs distinct (in
    L2); and one node per input set of a pool of at least 4x ``l2`` bytes, 8-1024 sets (from HBM, as ``execute``
    runs a schedule whose buffers exceed L2). One H200 [evidence: l2-graph-forks]: bf16
    32x1024x1024 3.49 / 4.45 us."""
    side = torch.cuda.Stream(device=dev)

    def r(*shape: int) -> Any:
        return torch.rand(*shape, device=dev).to(dtype)

    a, b = r(m, k), r(k, n)
    outs = [torch.empty(m, n, device=dev, dtype=dtype) for _ in range(64)]
    warm = graph_chain_per_node(torch, [functools.partial(torch.matmul, a, b, out=c) for c in outs], side)
    del outs
    count = pool_count((m * k + k * n + m * n) * dtype.itemsize, l2)
    pool = [(r(m, k), r(k, n), torch.empty(m, n, device=dev, dtype=dtype)) for _ in range(count)]
    cold = graph_chain_per_node(torch, [functools.partial(torch.matmul, x, y, out=z) for x, y, z in pool], side)
    del pool
    torch.cuda.empty_cache()
    return warm, cold


def add_graph_times(b: _Bench, l2: float) -> dict[str, float]:
    """µs per ``add_`` on 32x1024 bf16 (64 KiB) back to back (:meth:`_Bench.time_batched` over 64 tensors, the
    kernel floor's method) and as a graph-chain node, in L2 (64 nodes over 64 tensors) and from HBM (one tensor per
    node, :func:`pool_count`): ``add_stream_us``, ``add_graph_us``, ``add_graph_cold_us``.
    ``launch.graph_per_op_us`` = graph - stream; ``gpu.hbm_miss_us`` = cold - graph (rule 9; one H200,
    1.17 and 1.73 in the graph)."""
    torch, dev = b.torch, b.ctx.device
    side = torch.cuda.Stream(device=dev)
    warm = [torch.rand(32, 1024, device=dev).to(torch.bfloat16) for _ in range(64)]
    cold = [torch.rand(32, 1024, device=dev).to(torch.bfloat16) for _ in range(pool_count(32 * 1024 * 2, l2, 64))]
    fns = [functools.partial(x.add_, 1.0) for x in warm]
    out = {"add_stream_us": b.time_batched(fns[0], rotate=fns)[0] * 1e6,
           "add_graph_us": graph_chain_per_node(torch, fns, side) * 1e6,
           "add_graph_cold_us": graph_chain_per_node(torch, [functools.partial(x.add_, 1.0) for x in cold],
                                                     side) * 1e6}
    del warm, cold
    torch.cuda.empty_cache()
    return out


def _l2_fields(launch: dict[str, float]) -> dict[str, float | None]:
    """The profile's ``gpu.l2_bytes`` and ``gpu.hbm_miss_us`` from the launch measurements; when not measured (CPU
    ranks, no L2 size from torch) ``l2_bytes`` None, so that the base profile's GPU does not lend its L2."""
    if "l2_bytes" not in launch:
        return {"l2_bytes": None, "hbm_miss_us": 0.0}
    return {"l2_bytes": launch["l2_bytes"], "hbm_miss_us": round(launch["hbm_miss_us"], 3)}


def longest_kernel_ctas(events: list[dict[str, Any]], m: int | None = None, n: int | None = None,
                        sms: int | None = None) -> int | None:
    """Work units (rule 4's CTAs) of the longest ``"cat": "kernel"`` event of a Chrome trace (Kineto's export):
    x·y·z of its ``grid``, or None when no kernel event carries a grid. A *persistent* GEMM (a grid of at least
    ``sms`` CTAs, each looping over output tiles) with more output tiles of ``m``×``n`` than CTAs counts its
    tiles (:func:`persistent_tiles`): its CTAs with one tile fewer exit a tile's time early and free their SMs
    for other streams' kernels, as a last partial wave would. One H200
    (``benchmarks/probes/sm/dispatch_order.py``): bf16 4096×2048×8192 ran ``nvjet_sm90_tst_256x128_..._coopA`` as
    132 CTAs over 256 tiles, and a GEMM queued on another stream started on 8 SMs half-way through it.

    >>> longest_kernel_ctas([{"cat": "kernel", "dur": 9.0, "args": {"grid": [8, 8, 2]}},
    ...                      {"cat": "kernel", "dur": 1.0, "args": {"grid": [64, 1, 1]}}, {"cat": "cpu_op"}])
    128
    >>> longest_kernel_ctas([{"cat": "kernel", "dur": 170.0, "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    ...                       "args": {"grid": [2, 66, 1]}}], 4096, 2048, 132)
    256
    """
    kernels = [e for e in events if e.get("cat") == "kernel" and isinstance(e.get("args", {}).get("grid"), list)]
    if not kernels:
        return None
    top = max(kernels, key=lambda e: float(e.get("dur", 0.0)))
    g = _grid_ctas(top["args"])
    if g <= 0:
        return None
    if m is not None and n is not None and sms and g >= sms:
        return max(g, persistent_tiles(str(top.get("name", "")), m, n) or 0)
    return g


#: tile size in a GEMM kernel's name: cuBLAS's nvjet (``nvjet_sm90_tst_256x128_...``), xmma
#: (``..._tilesize256x128x8_...``) and CUTLASS (``cutlass_80_simt_sgemm_256x128_8x4_...``)
_TILE_RE = re.compile(r"(?:_tst_|tilesize|gemm_)(\d+)x(\d+)(?:x\d+)?_")


def persistent_tiles(name: str, m: int, n: int) -> int | None:
    """Output tiles of an ``m``×``n`` GEMM (torch's row-major ``m``×``k`` @ ``k``×``n``; cuBLAS computes the
    column-major transpose, so the name's first tile size spans ``n``) for the tile size in kernel ``name``
    (:data:`_TILE_RE`); None for a split-K kernel (its CTAs share tiles) or a name without a tile size.

    >>> persistent_tiles("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 4096, 2048)
    256
    >>> persistent_tiles("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_splitK_NNT", 2048, 1024) is None
    True
    >>> persistent_tiles("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1", 2048, 1024)
    64
    """
    if "splitk" in name.lower():
        return None
    hit = _TILE_RE.search(name)
    if hit is None:
        return None
    ta, tb = int(hit.group(1)), int(hit.group(2))
    return -(-n // ta) * -(-m // tb)


def _grid_ctas(args: dict[str, Any]) -> int:
    """x·y·z of a Kineto kernel record's ``grid``."""
    n = 1
    for g in args["grid"]:
        n *= int(g)
    return n


def _record_ctas_per_sm(args: dict[str, Any], lim: dict[str, int]) -> int | None:
    """:func:`ctas_per_sm` of a Kineto kernel record (its ``block``, ``registers per thread``, ``shared
    memory``), None when those are missing."""
    block, regs, smem = args.get("block"), args.get("registers per thread"), args.get("shared memory")
    if not isinstance(block, list) or not isinstance(regs, (int, float)) or not isinstance(smem, (int, float)):
        return None
    threads = 1
    for b in block:
        threads *= int(b)
    return ctas_per_sm(threads, int(regs), int(smem), lim)


def reduction_kernel(events: list[dict[str, Any]], lim: dict[str, int] | None = None) -> tuple[int, float] | None:
    """``(slots, us)`` of the kernels one GEMM call launched after its longest (cuBLAS's split-K reduction), from a
    Chrome trace (Kineto's export) of that one call: ``slots`` = ceil(grid x·y·z / CTAs per SM) of the longest of
    them (:func:`ctas_per_sm` from its block, registers and shared memory; 1 per SM when those are missing), the
    SMs one wave of it holds, and ``us`` the sum of their durations; None when the longest kernel is the last
    (one kernel) or carries no grid. One H200: fp32 1024×512×8192 ran cutlass's simt sgemm (128
    CTAs) then ``cublasLt::splitKreduce_kernel``, 16×32 CTAs of 512 threads at 32 registers (4 per SM): 128
    slots, 3.9 µs.

    >>> reduction_kernel([{"cat": "kernel", "ts": 0.0, "dur": 700.0, "args": {"grid": [8, 8, 2]}},
    ...                   {"cat": "kernel", "ts": 701.0, "dur": 6.3, "args": {"grid": [8, 8, 2]}}])
    (128, 6.3)
    >>> reduction_kernel([{"cat": "kernel", "ts": 0.0, "dur": 172.0, "args": {"grid": [16, 1, 8]}},
    ...                   {"cat": "kernel", "ts": 173.0, "dur": 3.9, "args": {"grid": [16, 32, 1], "block": [32, 16, 1],
    ...                    "registers per thread": 32, "shared memory": 0}}])
    (128, 3.9)
    >>> reduction_kernel([{"cat": "kernel", "ts": 0.0, "dur": 9.0, "args": {"grid": [4, 1, 1]}}]) is None
    True
    """
    kernels = sorted((e for e in events if e.get("cat") == "kernel"
                      and isinstance(e.get("args", {}).get("grid"), list)), key=lambda e: float(e.get("ts", 0.0)))
    if len(kernels) < 2:
        return None
    main = max(range(len(kernels)), key=lambda i: float(kernels[i].get("dur", 0.0)))
    after = kernels[main + 1:]
    if not after:
        return None
    args = max(after, key=lambda e: float(e.get("dur", 0.0)))["args"]
    n = _grid_ctas(args)
    per_sm = max(1, _record_ctas_per_sm(args, lim or SM90_LIMITS) or 1)
    us = sum(float(e.get("dur", 0.0)) for e in after)
    return (-(-n // per_sm), us) if n > 0 and us > 0 else None


#: sm_90 (H100/H200) per-SM limits of the CUDA occupancy calculation (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability"): 32 resident blocks, 2048 threads, 65,536 registers allocated per warp in
#: units of 256, 228 KiB of shared memory with 1 KiB reserved per block; torch's device properties override what
#: they report
SM90_LIMITS = {"blocks": 32, "threads": 2048, "regs": 65536, "reg_unit": 256, "smem": 233472, "smem_reserved": 1024}


def device_limits(torch: Any, dev: Any) -> dict[str, int]:
    """:data:`SM90_LIMITS` with the threads, registers and shared memory per SM that ``torch.cuda`` reports."""
    p = torch.cuda.get_device_properties(dev)
    lim = dict(SM90_LIMITS)
    for key, attr in (("threads", "max_threads_per_multi_processor"), ("regs", "regs_per_multiprocessor"),
                      ("smem", "shared_memory_per_multiprocessor")):
        v = getattr(p, attr, None)
        if isinstance(v, int) and v > 0:
            lim[key] = v
    return lim


def ctas_per_sm(threads: int, regs: int, smem: int, lim: dict[str, int] = SM90_LIMITS) -> int:
    """How many CTAs of a kernel (``threads`` per block, ``regs`` per thread, ``smem`` bytes of shared memory per
    block) one SM holds at once: the CUDA occupancy calculation's minimum over blocks, threads (whole warps),
    registers (per warp, rounded up to the allocation unit) and shared memory (plus the per-block reserve), at least 1.

    >>> ctas_per_sm(256, 202, 49152)  # cutlass simt sgemm 256x128 (one H200): registers bind
    1
    >>> ctas_per_sm(128, 90, 16384)  # 4 warps of 12 x 256 registers: 5 blocks before shared memory (13) binds
    5
    """
    warps = max(1, -(-threads // 32))
    reg_warp = -(-max(regs, 1) * 32 // lim["reg_unit"]) * lim["reg_unit"]
    by_regs = lim["regs"] // (reg_warp * warps)
    by_smem = lim["smem"] // (smem + lim["smem_reserved"]) if smem > 0 else lim["blocks"]
    return max(1, min(lim["blocks"], lim["threads"] // (warps * 32), by_regs, by_smem))


def longest_kernel_ctas_per_sm(events: list[dict[str, Any]], lim: dict[str, int] = SM90_LIMITS) -> int | None:
    """:func:`ctas_per_sm` of the longest ``"cat": "kernel"`` event of a Kineto trace (its ``args``: ``block``,
    ``registers per thread``, ``shared memory``), or None when those are missing."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    if not kernels:
        return None
    return _record_ctas_per_sm(max(kernels, key=lambda e: float(e.get("dur", 0.0))).get("args", {}), lim)


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


def _probe_runner(ctx: Any, layers: int, dtype: str) -> Any:
    """A runner over a synthetic two-stream schedule of tiny ops: per layer a 64x64x64 GEMM and a
    small elementwise op on stream s0, and a GEMM on s1 that waits for the first (a cross-stream
    event wait), i.e. the issue pattern of a typical multi-stream schedule."""
    from executor.runtime import RankRunner, RunOptions
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_text

    text = (f"schema_version: 1\nname: launch_probe\nworld_size: {ctx.world}\nops:\n"
            f"  - foreach: {{i: range({layers})}}\n    ops:\n"
            f"      - {{name: 'a{{i}}', kind: matmul, ranks: [0], m: 64, n: 64, k: 64, dtype: {dtype}, stream: s0}}\n"
            f"      - {{name: 'b{{i}}', kind: compute, ranks: [0], bytes: 16384, stream: s0}}\n"
            f"      - {{name: 'c{{i}}', kind: matmul, ranks: [0], m: 64, n: 64, k: 64, dtype: {dtype}, stream: s1,"
            f" deps: ['a{{i}}']}}\n")
    G = build_graph(load_text(text, "<launch probe>"))
    return RankRunner(G, ctx, RunOptions(iters=1, warmup=0, lean_iters=0, timeout_s=60))


def _measure_launch(b: _Bench, log: Callable[[str], None]) -> dict[str, float]:
    torch = b.torch
    dev = b.ctx.device
    a, bb, c = tiny_mm(b)
    N = 300
    res: dict[str, float] = {}
    # (a) plain launch loop
    ts = []
    for _ in range(5):
        b.sync()
        t0 = time.perf_counter()
        for _ in range(N):
            torch.matmul(a, bb, out=c)
        ts.append((time.perf_counter() - t0) / N)
        b.sync()
    res["eager_plain_us"] = statistics.median(ts) * 1e6
    # (b) the executor's issue path, uninstrumented (what the program costs) and instrumented (timed runs)
    L = N // 3
    r = _probe_runner(b.ctx, L, "bf16" if b.cuda else "fp32")
    n_ops = len(r.impls)
    try:
        for timed, key in ((False, "eager_executor_us"), (True, "eager_executor_timed_us")):
            ts = []
            for _ in range(6):
                b.sync()
                t0 = time.perf_counter()
                if b.cuda:
                    r._issue_cuda(timed=timed)
                    torch.cuda.set_stream(torch.cuda.default_stream(dev))
                else:
                    for impl in r.impls:
                        impl.run()
                ts.append((time.perf_counter() - t0) / n_ops)
                b.sync()
            res[key] = statistics.median(ts[1:]) * 1e6
    finally:
        r.close()
    if b.cuda:
        # graph launch and per-node cost
        s = torch.cuda.Stream(device=dev)
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1, stream=s):
            torch.matmul(a, bb, out=c)
        gN = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gN, stream=s):
            for _ in range(N):
                torch.matmul(a, bb, out=c)
        b.sync()
        hs = []
        for _ in range(200):
            t0 = time.perf_counter()
            g1.replay()
            hs.append(time.perf_counter() - t0)
            b.sync()
        res["graph_launch_us"] = statistics.median(hs) * 1e6
        t_graph = b.time_one(lambda: gN.replay(), iters=10)
        t_solo = b.time_batched(lambda: torch.matmul(a, bb, out=c))[0]
        res["graph_node_gpu_us"] = t_graph / N * 1e6
        res["solo_event_us"] = t_solo * 1e6
        res["graph_per_op_us"] = max(0.0, t_graph / N - t_solo) * 1e6
        res.update(_graph_fork_us(torch, dev, main_only=True))
        try:  # older torch builds lack torch.cuda.Event(external=True); the executor then times whole replays
            res.update(graph_timing_event_us(torch, dev))
        except (TypeError, RuntimeError) as e:
            log(f"[launch] graph timing events not measured ({e.__class__.__name__}: {str(e)[:120]}): "
                "graph_timing_event_us from the base profile")
        l2 = float(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
        if l2 > 0:
            res["l2_bytes"] = l2
            res.update(add_graph_times(b, l2))
            res["graph_per_op_us"] = res["add_graph_us"] - res["add_stream_us"]
            res["hbm_miss_us"] = max(0.0, res["add_graph_cold_us"] - res["add_graph_us"])
        one = torch.zeros(1, device=dev)
        res["kernel_floor_us"] = b.time_batched(lambda: one.add_(1.0))[0] * 1e6
        res["kernel_floor_single_us"] = b.time_one(lambda: one.add_(1.0), iters=50) * 1e6
    log("[launch] " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))
    return res


def _start_event(torch: Any) -> Any:
    """An event recorded on the current stream behind a ~1 ms ``torch.cuda._sleep``: streams that wait for it
    start together once the host has queued all of them (an event recorded on an idle stream has already fired,
    so the first stream queued would start ahead of the others)."""
    go = torch.cuda.Event()
    torch.cuda._sleep(2_000_000)
    go.record()
    return go


def duplex_factors(solo_h2d: float, solo_d2h: float, both_h2d: float, both_d2h: float) -> tuple[float, float]:
    """``(h2d_slowdown_beside_d2h, d2h_slowdown_beside_h2d)`` from two equal streams of copies started together.

    ``solo_*``: seconds one direction's stream takes alone; ``both_*``: each stream's seconds when both run. The
    stream that ends first ran beside the other all along: its factor is both / solo − 1. The later one ran
    beside it for the first stream's time ``f`` and got ``solo − (both − f)`` of its solo work done then, so its
    factor is f / that − 1 (the rate factor :func:`schedsim.sim.gpu_model.copy_rate` applies while the reverse
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


def _measure_comm_contention(b: _Bench, quick: bool, log: Callable[[str], None]) -> dict[str, float]:
    torch = b.torch
    import torch.distributed as dist

    dev = b.ctx.device
    side = 2048 if quick else 8192
    A = torch.rand(side, side, device=dev).to(torch.bfloat16)
    B = torch.rand(side, side, device=dev).to(torch.bfloat16)
    C = torch.empty(side, side, device=dev, dtype=torch.bfloat16)
    x = torch.zeros((16 if quick else 256) * 2**20 // 4, device=dev)
    t_mm = b.time_one(lambda: torch.matmul(A, B, out=C), iters=10)
    t_ar = b.time_one(lambda: dist.all_reduce(x), iters=5)
    reps = max(1, round(t_ar / t_mm))
    t_series = b.time_one(lambda: [torch.matmul(A, B, out=C) for _ in range(reps)], iters=3)
    s1, s2 = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
    rm, rc = [], []
    for _ in range(5):
        b.ctx.barrier()
        go = _start_event(torch)
        e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        s1.wait_event(go)
        s2.wait_event(go)
        with torch.cuda.stream(s2):
            e[2].record()
            dist.all_reduce(x)
            e[3].record()
        with torch.cuda.stream(s1):
            e[0].record()
            for _ in range(reps):
                torch.matmul(A, B, out=C)
            e[1].record()
        b.sync()
        rm.append(e[0].elapsed_time(e[1]) * 1e-3 / t_series)
        rc.append(e[2].elapsed_time(e[3]) * 1e-3 / t_ar)
    res = {"compute_slowdown_with_comm": max(0.0, statistics.median(rm) - 1.0),
           "comm_slowdown_with_compute": max(0.0, statistics.median(rc) - 1.0)}
    log(f"[contention] GEMM beside all_reduce: +{res['compute_slowdown_with_comm'] * 100:.1f}%, all_reduce beside "
        f"GEMM: +{res['comm_slowdown_with_compute'] * 100:.1f}%")
    return res


def gpu_side_repeats(nbytes: int) -> int:
    """Calls per GPU-side timing of a ``nbytes`` collective: 2**28 / size, between 2 and 200 (so small
    sizes run about 200 back to back and 1 GiB twice). A function of the size alone, so that every
    rank issues the same number of calls."""
    return int(min(200, max(2, 2**28 // max(1, nbytes))))


@dataclass
class _Bufs:
    """The tensors of one collective size on this rank: ``inp`` holds rank + 1 (``count`` float32 elements),
    ``outb`` the full-size result, ``piece`` one rank's share (``per`` = count / n elements)."""

    torch: Any
    dist: Any
    n: int
    r: int
    dev: Any
    count: int
    per: int
    inp: Any
    outb: Any
    piece: Any


@dataclass
class _Case:
    """One collective call as the sweep times and checks it: ``fn`` is the call, ``prep`` resets its
    buffer before the checked call, ``got()`` must equal ``exp()`` after it (the rank-dependent sums
    and copies of ranks' ``r + 1`` values); ``redop`` and ``root`` are nccl-tests' columns."""

    fn: Callable[[], Any]
    exp: Callable[[], Any]
    got: Callable[[], Any]
    prep: Callable[[], Any] = lambda: None
    redop: str = "sum"
    root: int = -1


def _tri(b: _Bufs) -> float:
    """Σ (r + 1) over the ranks: what a sum of every rank's ``inp`` value gives."""
    return b.n * (b.n + 1) / 2


def _ranks_in_order(b: _Bufs) -> Any:
    """Each rank's value r + 1 repeated over its share: the result of a gather or an all-to-all."""
    return b.torch.arange(1, b.n + 1, device=b.dev, dtype=b.torch.float32).repeat_interleave(b.per)


def _all_reduce(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.all_reduce(b.outb), lambda: b.torch.full_like(b.outb, _tri(b)), lambda: b.outb,
                 prep=lambda: b.outb.fill_(float(b.r + 1)))


def _all_gather(b: _Bufs) -> _Case:
    ag = getattr(b.dist, "all_gather_single", None) or b.dist.all_gather_into_tensor
    src = b.torch.full((b.per,), float(b.r + 1), device=b.dev)
    return _Case(lambda: ag(b.outb, src), lambda: _ranks_in_order(b), lambda: b.outb, redop="none")


def _reduce_scatter(b: _Bufs) -> _Case:
    rs = getattr(b.dist, "reduce_scatter_single", None) or b.dist.reduce_scatter_tensor
    return _Case(lambda: rs(b.piece, b.inp), lambda: b.torch.full_like(b.piece, _tri(b)), lambda: b.piece)


def _all_to_all(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.all_to_all_single(b.outb, b.inp), lambda: _ranks_in_order(b), lambda: b.outb,
                 redop="none")


def _broadcast(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.broadcast(b.outb, src=0), lambda: b.torch.full_like(b.outb, 1.0), lambda: b.outb,
                 prep=lambda: b.outb.fill_(float(b.r + 1)), redop="none", root=0)


def _reduce(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.reduce(b.outb, dst=0),
                 lambda: b.torch.full_like(b.outb, _tri(b) if b.r == 0 else b.r + 1), lambda: b.outb,
                 prep=lambda: b.outb.fill_(float(b.r + 1)), root=0)


def _p2p_unbatched(b: _Bufs) -> _Case:
    """One lone isend (even rank) / irecv (odd rank) per pair; the sender checks nothing."""
    peer = b.r + 1 if b.r % 2 == 0 else b.r - 1
    if b.r % 2 == 0:
        def fn() -> Any:
            return b.dist.isend(b.inp, peer).wait()
    else:
        def fn() -> Any:
            return b.dist.irecv(b.outb, peer).wait()
    exp = lambda: b.torch.full_like(b.outb, float(peer + 1))  # noqa: E731
    return _Case(fn, exp, (lambda: b.outb) if b.r % 2 else exp, redop="none")


def _sendrecv(b: _Bufs) -> _Case:
    """The batched ring: send to r + 1, receive from r − 1."""
    nxt, prv = (b.r + 1) % b.n, (b.r - 1) % b.n

    def fn() -> None:
        ops = [b.dist.P2POp(b.dist.isend, b.inp, nxt), b.dist.P2POp(b.dist.irecv, b.outb, prv)]
        for w in b.dist.batch_isend_irecv(ops):
            w.wait()

    return _Case(fn, lambda: b.torch.full_like(b.outb, float(prv + 1)), lambda: b.outb, redop="none")


#: How each kind of :data:`COLLECTIVES` is called and checked.
_CASES: dict[str, Callable[[_Bufs], _Case]] = {
    "all_reduce": _all_reduce, "all_gather": _all_gather, "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all, "broadcast": _broadcast, "reduce": _reduce, "p2p_unbatched": _p2p_unbatched,
    "sendrecv": _sendrecv,
}


def _sweep_sizes(o: CalibrateOptions, n: int) -> list[int]:
    """Message sizes in bytes: ``min_bytes`` (at least 4 per rank) times powers of ``factor`` up to
    ``max_bytes`` (64 MiB with ``quick``)."""
    sizes = []
    s = max(4 * n, o.min_bytes)
    top = min(o.max_bytes, 64 * 2**20) if o.quick else o.max_bytes
    while s <= top:
        sizes.append(int(s))
        s *= o.factor
    return sizes


def _measure(b: _Bench, o: CalibrateOptions, kind: str, bufs: _Bufs) -> dict[str, Any] | None:
    """Check, then time one collective at one size on every rank; the nccl-tests row on rank 0 (slowest
    rank's time; busbw = algbw × the kind's bus factor), None elsewhere."""
    from schedsim.cost import bus_factor

    ctx = b.ctx
    case = _CASES[kind](bufs)
    ctx.barrier()
    case.prep()
    case.fn()
    b.sync()
    wrong = int((case.got() != case.exp()).sum().item()) if kind != "reduce" or bufs.r == 0 else 0
    nbytes = bufs.count * 4
    iters = o.iters if nbytes <= 64 * 2**20 else max(5, o.iters // 4)
    ctx.barrier()
    t_host = b.time_one(case.fn, iters=iters, warmup=2)
    t = b.time_gpu_side(case.fn, gpu_side_repeats(nbytes)) if b.cuda else t_host
    allp = ctx.gather((t, wrong, t_host))
    if allp is None:
        return None
    tmax = max(x[0] for x in allp)
    algbw = nbytes / tmax / 1e9
    busbw = algbw * (1.0 if kind == "p2p_unbatched" else bus_factor(kind, bufs.n))
    return {"size": nbytes, "count": bufs.count, "type": "float", "redop": case.redop, "root": case.root,
            "time_us": tmax * 1e6, "algbw": algbw, "busbw": busbw, "wrong": sum(x[1] for x in allp),
            "time_single_launch_us": max(x[2] for x in allp) * 1e6}


def _sweep_collectives(b: _Bench, o: CalibrateOptions, log: Callable[[str], None]) -> dict[str, list[dict[str, Any]]]:
    """All ranks: busbw sweep per collective (:data:`_CASES`); returns nccl-tests-style rows per collective
    (on rank 0)."""
    torch = b.torch
    import torch.distributed as dist

    ctx = b.ctx
    n, r = ctx.world, ctx.rank
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in COLLECTIVES:
        if kind == "p2p_unbatched" and n % 2:
            continue
        rows = []
        for size in _sweep_sizes(o, n):
            count = size // 4
            count -= count % n
            if count == 0:
                continue
            per = count // n
            dev = ctx.device
            bufs = _Bufs(torch, dist, n, r, dev, count, per, torch.full((count,), float(r + 1), device=dev),
                         torch.empty(count, device=dev), torch.empty(per, device=dev))
            row = _measure(b, o, kind, bufs)
            if row is not None:
                rows.append(row)
        if r == 0:
            log(format_table(rows, f"{kind} over {n} ranks ({ctx.backend}), schedsim calibrate"))
            out[kind] = rows
    return out


def run_calibrate(o: CalibrateOptions) -> dict[str, Any]:
    """Run the measurements and write the profile (rank 0). Returns the profile dict on rank 0.

    Raises
    ------
    SchedsimError
        Bad schedule, base profile or options.
    """
    import torch

    from executor.dist import env_world, setup_dist

    _rank, world, _lr = env_world()
    ctx = setup_dist(o.backend, o.device, 600.0, [tuple(range(world))])
    log = _log(ctx)
    b = _Bench(ctx, o.iters)
    raw: dict[str, Any] = {"date": datetime.date.today().isoformat(), "torch": torch.__version__,
                           "backend": ctx.backend, "world_size": world}
    dev_name = torch.cuda.get_device_properties(ctx.device).name if ctx.cuda else "CPU"
    raw["device"] = dev_name
    log(f"schedsim calibrate on {world} rank(s), {dev_name}, backend {ctx.backend}")
    from executor.dist import warn_oversubscribed

    warn_oversubscribed(ctx.cuda, ctx.rank)
    # the host cost of communication calls first, before the GEMM measurements run torch.profiler (after it, a
    # process's launches cost ~20 % more: benchmarks/probes/host/after_profiler.py; docs/validation.md, "Evidence cited
    # by the code")
    comm_host = comm_host_costs(b)
    if ctx.rank == 0:
        shapes = _gemm_shapes(o, ctx.cuda)
        log(f"[gemm] {len(shapes)} shapes")
        raw["gemm"] = _measure_gemms(b, shapes, log)
        raw["gemm_single_launch"] = b.single_gemm
        raw["gemm_ctas"] = b.gemm_ctas
        raw["gemm_graph"] = b.gemm_graph
        raw["gemm_fork"] = b.gemm_fork
        raw["gemm_ctas_per_sm"] = b.gemm_occ
        raw["gemm_reduce"] = b.gemm_reduce
        if ctx.cuda:
            from executor.calibrate_waves import measure_sm_stream, measure_wave_tail, pick_shapes

            sms = int(torch.cuda.get_device_properties(ctx.device).multi_processor_count)
            raw["wave_tail"] = [measure_wave_tail(torch, ctx.device, shape, grid, log)
                                for shape, grid in pick_shapes(raw["gemm"], b.gemm_ctas, sms)]
            raw["sm_stream"] = measure_sm_stream(torch, ctx.device, sms, log)
        raw["copies"] = _measure_copies(b, o.quick, log)
        raw["launch"] = _measure_launch(b, log)
        # rule 1's gemm.call rows: the host call of each GEMM short enough for the host to bound it
        calls = [(r[0], r[1], r[2], r[3]) for r in raw["gemm"] if ctx.cuda and r[4] * 1e-3 <= CALL_ROW_MAX_S]
        raw["host"] = host_costs(b, log, calls)
        n_fresh = o.host_processes if o.host_processes is not None else (3 if ctx.cuda else 0)
        if n_fresh > 0:
            fresh = fresh_process_costs("cuda" if ctx.cuda else "cpu", n_fresh, log, gemms=calls)
            raw["host_fresh_requested"] = n_fresh
            if fresh:
                raw["host_in_process"] = dict(raw["host"])
                raw["host_fresh_processes"] = fresh
                raw["host"].update(median_costs(fresh))
            else:
                log(f"[launch] none of the {n_fresh} fresh processes finished: the launch section keeps this "
                    "process's own host costs")
        if ctx.cuda:
            raw["contention_copy"] = _measure_contention(b, o.quick, log)
            raw["duplex"] = _measure_duplex(b, o.quick, log)
            if not o.quick:
                from executor.calibrate_power import measure_power

                raw["power"] = measure_power(b.torch, ctx.device, log)
    ctx.barrier()
    if ctx.rank == 0:
        raw["host"].update(comm_host)
        log("[launch] communication calls, host time: " + ", ".join(f"{k} {v:.2f} us" for k, v in comm_host.items()))
    if world >= 2:
        raw["collectives"] = _sweep_collectives(b, o, log)
        if ctx.cuda:
            raw["contention_comm"] = _measure_comm_contention(b, o.quick, log)
            raw["nccl"] = nccl_beside_gemm(b, o.quick, log)
    else:
        log("[collectives] world size 1: no collective sweep (it needs 2 or more ranks); collective tables, links "
            "and NCCL contention come from the base profile")
    prof = None
    if ctx.rank == 0:
        prof = _assemble(o, raw, ctx, dev_name)
        name = prof["name"]
        write_profile(prof, o.out, f"# {name}: measured by `schedsim calibrate` on {raw['date']} ({dev_name}, torch "
                      f"{raw['torch']}, {world} rank(s)); base profile {o.base!r} for what was not measured.")
        from schedsim.io import atomic_write_text, output_target

        if isinstance(output_target(o.out), Path):  # the raw measurements go beside a profile file, not to stdout
            atomic_write_text(Path(o.out).with_suffix(".json"), json.dumps(raw, indent=1))
            log(f"wrote {o.out} and {Path(o.out).with_suffix('.json')}")
    ctx.barrier()
    ctx.close()
    return prof or {}


#: The graph-edge probe's layer (small_ops_graph's): GEMM T×H×H and a T×H copy on the main stream, a GEMM on an
#: aux stream after the main GEMM (``fork``) or on its own (``fork_nowait``); GRAPH_LAYERS of them in one graph.
GRAPH_T, GRAPH_H, GRAPH_LAYERS = 32, 1024, 64


def _graph_fork_us(torch: Any, dev: Any, T: int = GRAPH_T, H: int = GRAPH_H, main_only: bool = False,
                   mnk: tuple[int, int, int] | None = None, dtype: Any = None) -> dict[str, float]:
    """GPU µs per layer of GRAPH_LAYERS probe layers captured in one CUDA graph, with and without the aux GEMM's
    event edge from the main GEMM (median of 30 replays between two events, after 10, each queued behind a spin):
    ``graph_fork_us``,
    ``graph_fork_nowait_us``; with ``main_only`` also ``graph_main_only_us`` (no aux GEMM at all).
    :func:`graph_edge_us` turns the first two into ``launch.graph_cross_stream_edge_us``. The probe of
    ``benchmarks/probes/graph/node_time.py`` (one H200: 7.94 / 6.65 µs); ``T``×``H`` are the
    layer's tokens and hidden size (``benchmarks/probes/graph/kernel_time.py`` varies them); ``mnk`` (with ``dtype``, a
    torch dtype) replaces them by GEMMs (m, k) @ (k, n) and an m×n copy (:func:`gemm_fork_rows`)."""
    L, bf = GRAPH_LAYERS, dtype or torch.bfloat16
    m, n, k = mnk or (T, H, H)

    def r(*shape: int) -> Any:
        return torch.rand(*shape, device=dev).to(bf)

    x, w, y = [r(m, k) for _ in range(L)], [r(k, n) for _ in range(L)], [r(m, n) for _ in range(L)]
    xs, ws, ys = [r(m, k) for _ in range(L)], [r(k, n) for _ in range(L)], [r(m, n) for _ in range(L)]
    src, dst = [r(m, n) for _ in range(L)], [r(m, n) for _ in range(L)]
    main_s, aux_s, cap = (torch.cuda.Stream(device=dev) for _ in range(3))
    ev = [torch.cuda.Event() for _ in range(L)]
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out: dict[str, float] = {}

    def body(wait: bool | None) -> None:  # None: no aux GEMM
        for i in range(L):
            torch.cuda.set_stream(main_s)
            torch.matmul(x[i], w[i], out=y[i])
            ev[i].record(main_s)
            dst[i].copy_(src[i])
            torch.cuda.set_stream(aux_s)
            if wait:
                aux_s.wait_event(ev[i])
            if wait is not None:
                torch.matmul(xs[i], ws[i], out=ys[i])

    variants: list[tuple[str, bool | None]] = [("graph_fork_us", True), ("graph_fork_nowait_us", False)]
    for key, wait in variants + ([("graph_main_only_us", None)] if main_only else []):
        prev = torch.cuda.current_stream(dev)
        body(wait)  # warm: pick the kernels before capture
        torch.cuda.set_stream(prev)
        torch.cuda.synchronize(dev)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=cap):
            main_s.wait_stream(cap)
            aux_s.wait_stream(cap)
            body(wait)
            torch.cuda.set_stream(cap)
            cap.wait_stream(main_s)
            cap.wait_stream(aux_s)
        times = []
        with torch.cuda.stream(cap):
            for k in range(40):
                # the replay is queued behind a ~1 ms spin, so the GPU starts it with every node already submitted
                # (a replay from an idle GPU also times the launch's submission, which grows with the node count)
                torch.cuda._sleep(2_000_000)
                e0.record(cap)
                g.replay()
                e1.record(cap)
                e1.synchronize()
                if k >= 10:
                    times.append(e0.elapsed_time(e1) * 1e3 / L)
        out[key] = statistics.median(times)
        del g
    return out


def timed_graph_chain(torch: Any, fns: list[Callable[[int], None]], side: Any, reps: int = 20
                      ) -> dict[str, Any]:
    """The chain ``fns`` (op ``i`` is ``fns[i](i)``) captured twice on stream ``side`` as one CUDA graph, without
    and with a pair of external timing events around every op (how ``schedsim execute --cuda-graph`` times an
    op, :class:`executor.runtime.CudaGraphRunner`), each replayed ``reps`` times (after 3) behind a 1 ms spin:
    ``plain_per_op`` and ``timed_per_op`` (replay µs / ops, medians), ``spans`` and ``gaps`` (µs, per op, the
    median over the timed replays of its end event − start event, and of the next op's start event − its end
    event). ``launch.graph_timing_event_us`` is the mean span less ``plain_per_op`` (:func:`graph_timing_event_us`)."""
    n = len(fns)
    out: dict[str, Any] = {}
    for timed in (False, True):
        s = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n)] if timed else []
        e = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n)] if timed else []
        for i, f in enumerate(fns):  # warm the kernels (cuBLAS handles, workspaces) outside the capture
            f(i)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            for i, f in enumerate(fns):
                if timed:
                    s[i].record()
                f(i)
                if timed:
                    e[i].record()
        torch.cuda.synchronize()
        a0, a1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        tot: list[float] = []
        spans: list[list[float]] = []
        gaps: list[list[float]] = []
        for r in range(reps + 3):
            torch.cuda.synchronize()
            torch.cuda._sleep(2_000_000)  # the replay is queued before the GPU reaches it
            a0.record()
            g.replay()
            a1.record()
            torch.cuda.synchronize()
            if r < 3:
                continue
            tot.append(a0.elapsed_time(a1) * 1e3 / n)
            if timed:
                st = [a0.elapsed_time(ev) * 1e3 for ev in s]
                en = [a0.elapsed_time(ev) * 1e3 for ev in e]
                spans.append([q - p for p, q in zip(st, en, strict=True)])
                gaps.append([st[i + 1] - en[i] for i in range(n - 1)])
        out["timed_per_op" if timed else "plain_per_op"] = statistics.median(tot)
        if timed:
            out["spans"] = [statistics.median(col) for col in zip(*spans, strict=True)]
            out["gaps"] = [statistics.median(col) for col in zip(*gaps, strict=True)]
        del g
    return out


def graph_timing_event_us(torch: Any, dev: Any, ops: int = 64) -> dict[str, float]:
    """``launch.graph_timing_event_us``: in one graph, a chain of ``ops`` ops alternating a GRAPH_T×GRAPH_H×GRAPH_H
    bf16 GEMM and an ``add_`` on GRAPH_T×GRAPH_H (small_ops_graph's), timed as the executor times them (external
    event pairs, :func:`timed_graph_chain`): the mean span less the untimed graph's time per op, ≥ 0, as
    ``graph_timing_event_us``; ``graph_timing_gap_us`` (end event to the next start event, median: the span
    of a timed op that runs nothing); and ``graph_timed_per_op_us`` / ``graph_plain_per_op_us`` (JSON only).
    One H200, [evidence: timed-graph]
    (``benchmarks/probes/graph/timing_events.py``, GEMM spans 5.50-5.73 µs against 3.51 untimed, ``add_`` 3.14-3.20
    against 1.02): 2.0-2.2 µs, gaps 1.25-1.28 µs."""
    bf = torch.bfloat16
    x = torch.rand(GRAPH_T, GRAPH_H, device=dev).to(bf)
    w = torch.rand(GRAPH_H, GRAPH_H, device=dev).to(bf)
    outs = [torch.empty(GRAPH_T, GRAPH_H, device=dev, dtype=bf) for _ in range(ops)]

    def gemm(i: int) -> None:
        torch.matmul(x, w, out=outs[i])

    def add(i: int) -> None:
        outs[i].add_(1.0)

    r = timed_graph_chain(torch, [gemm, add] * (ops // 2), torch.cuda.Stream(device=dev))
    span = statistics.fmean(r["spans"])
    return {"graph_timing_event_us": max(0.0, span - r["plain_per_op"]), "graph_timing_gap_us":
            statistics.median(r["gaps"]), "graph_timed_per_op_us": r["timed_per_op"],
            "graph_plain_per_op_us": r["plain_per_op"]}


def graph_edge_us(profile: dict[str, Any], fork_us: float, base_us: float,
                  shape: tuple[str, int, int, int] = ("bf16", GRAPH_T, GRAPH_H, GRAPH_H)) -> float:
    """Rule 8's edge term for a fork at a GEMM of ``shape`` (dtype, m, n, k): the measured extra GPU time per layer
    of the graph-edge probe (:func:`_graph_fork_us`) with the aux GEMM waiting for the main one (``fork_us``) over
    the main stream alone (``base_us``), less what the ``waves`` model predicts for the same difference with
    ``profile`` (a profile dict; its edge terms set to 0), at least 0. Both variants are simulated as schedules of
    GRAPH_LAYERS layers (``launch: cuda_graph``), so the term adds only what the model misses: one H200,
    [evidence: l2-graph-forks] (rule 9 in the model): 0.32 / 0.37 / 1.69 / 3.11 / 3.08 µs
    at bf16 T×H = 8×256, 16×512, 32×1024, 16×2048, 64×2048 (T×H×H GEMMs).

    Raises pydantic.ValidationError if ``profile`` is not a valid profile."""
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    d = json.loads(json.dumps(profile))
    d["launch"]["graph_cross_stream_edge_us"] = 0.0
    d["launch"]["graph_fork_edges"] = []
    prof = HardwareProfile.model_validate(d)
    from schedsim.units import DTYPE_BYTES

    dt, m, n, k = shape
    item = DTYPE_BYTES.get(dt, 2)
    mm = f"kind: matmul, m: {m}, n: {n}, k: {k}, dtype: {dt}"
    per_layer = []
    for side in (f"      - {{name: 'side{{i}}', {mm}, stream: aux, deps: ['up{{i}}']}}\n", ""):
        text = (f"schema_version: 1\nname: graph_edge\nworld_size: 1\nlaunch: cuda_graph\nstreams: [main, aux]\n"
                f"ops:\n  - foreach: {{i: range({GRAPH_LAYERS})}}\n    ops:\n"
                f"      - {{name: 'up{{i}}', {mm}, stream: main}}\n"
                f"      - {{name: 'act{{i}}', kind: compute, bytes: {2 * item * m * n}, stream: main}}\n" + side)
        tl = simulate(lower(load_text(text, "graph_edge.yaml")), prof)
        per_layer.append(tl.makespan_s / GRAPH_LAYERS * 1e6)
    return max(0.0, (fork_us - base_us) - (per_layer[0] - per_layer[1]))


def p2p_one_way_speedup(one_way_us: dict[int, float], exchange_us: dict[int, float]) -> tuple[float, int] | None:
    """``(speedup, size)``: the two-way exchange's time over the one-way send/recv's time at the largest size
    both sweeps timed (bytes), at least 1.0; None when they share no size or a time is not positive.

    ``exchange_us`` is the ``sendrecv`` sweep (one ``batch_isend_irecv`` of a send to r+1 and a recv from
    r-1: at 2 ranks both directions of the link), ``one_way_us`` the unbatched isend/irecv sweep (one
    direction). Profile field ``nccl.p2p_one_way_speedup`` (:mod:`schedsim.hardware.profile`).

    >>> p2p_one_way_speedup({1024: 10.0, 2**20: 20.0}, {1024: 11.0, 2**20: 30.0})
    (1.5, 1048576)
    """
    common = [s for s in one_way_us if s in exchange_us and one_way_us[s] > 0 and exchange_us[s] > 0]
    if not common:
        return None
    size = max(common)
    return max(1.0, exchange_us[size] / one_way_us[size]), size


def _sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (never to 0 for a positive x)."""
    return float(f"{x:.{digits}g}")


def fork_edge_rows(d: dict[str, Any], raw_fork: list[list[Any]]) -> list[list[Any]]:
    """``launch.graph_fork_edges`` rows ``[dtype, m, n, k, us]`` from calibrate's fork probes ``[dtype, m, n, k,
    fork_us, main_only_us]`` (:func:`graph_edge_us` of each with the complete profile dict ``d``)."""
    return [[dt, m, n, k, round(graph_edge_us(d, fork, base, (dt, m, n, k)), 3)]
            for dt, m, n, k, fork, base in raw_fork]


def _set_graph_edge(d: dict[str, Any], L: dict[str, float], base: str, raw_fork: list[list[Any]] | None = None) -> None:
    """``d["launch"]["graph_cross_stream_edge_us"]`` from the launch measurements ``L`` (:func:`graph_edge_us`,
    with ``d`` otherwise complete: the model's own share is simulated with it), or the ``base`` profile's value
    when the graph probe did not run (CPU ranks)."""
    base_edge = base_profile_dict(base)["launch"].get("graph_cross_stream_edge_us", 0.0)
    if "graph_fork_us" in L:
        base_us = L.get("graph_main_only_us", L["graph_fork_nowait_us"])
        edge = graph_edge_us(d, L["graph_fork_us"], base_us)
        d["launch"]["graph_cross_stream_edge_us"] = round(edge, 2)
        d["launch"]["source"] += (f"; graph_cross_stream_edge_us = GPU time per layer of {GRAPH_LAYERS} "
                                  f"small_ops_graph layers in one graph, aux GEMM after the main GEMM "
                                  f"({L['graph_fork_us']:.2f} us) less the main stream alone "
                                  f"({base_us:.2f} us), less the waves model's own share")
        rows = fork_edge_rows(d, raw_fork or [])
        if rows:
            d["launch"]["graph_fork_edges"] = rows
            d["launch"]["source"] += ("; graph_fork_edges = the same per GEMM shape of the schedules (that GEMM on "
                                      "both streams and an m x n copy)")
    elif base_edge:
        d["launch"]["graph_cross_stream_edge_us"] = base_edge
        d["launch"]["source"] += f"; graph_cross_stream_edge_us from {base!r} (not measured here)"


def measured_peaks(rows: list[list[Any]]) -> dict[str, float]:
    """Per dtype, the highest rate (TFLOP/s, 2·m·n·k over the time) of the GEMM table rows
    ``[dtype, m, n, k, time_ms]``: what a machine without a datasheet figure (CPU ranks) was measured to reach.

    >>> measured_peaks([["fp32", 1024, 1024, 1024, 10.0], ["fp32", 2048, 2048, 2048, 40.0]])
    {'fp32': 0.429}
    """
    out: dict[str, float] = {}
    for dt, m, n, k, t_ms in rows:
        if t_ms > 0:
            out[dt] = max(out.get(dt, 0.0), round(2.0 * m * n * k / (t_ms * 1e-3) / 1e12, 3))
    return out


def _cpu_gpu_fields(g: dict[str, Any], gemm_rows: list[list[Any]], base: str, where: str) -> None:
    """The ``gpu`` section of a profile measured on CPU ranks, in place: no field of the base profile's GPU that
    describes that GPU stays. ``peak_tflops`` holds only the dtypes the GEMM table measured, each at its best
    measured rate (``gemm_efficiency`` 1: the roofline fallback is then that rate), so a dtype the run did not
    measure falls back to the fp32 rate (:mod:`schedsim.cost`'s rule) rather than the base GPU's datasheet peak;
    ``sms``, ``sm_stream_GBps`` (SM occupancy, rule 5 of :mod:`schedsim.sim.gpu_model`) are left out; a warning
    names what was dropped."""
    peaks = measured_peaks(gemm_rows)
    dropped = sorted(set(g.get("peak_tflops", {})) - set(peaks))
    g["peak_tflops"] = peaks or {"fp32": 1e-3}
    g["gemm_efficiency"] = 1.0
    gone = [k for k in ("sms", "sm_stream_GBps") if g.get(k) is not None]
    for k in gone:
        g[k] = None
    g["source"] = (f"CPU ranks: memory bandwidth from a host copy; peak_tflops = the best measured GEMM rate per "
                   f"dtype ({', '.join(peaks) or 'none measured: 1 GFLOP/s placeholder'}); not measured, so left "
                   f"out: the base profile {base!r}'s peaks for {', '.join(dropped) or 'no other dtype'} and its "
                   f"{', '.join(gone) or 'SM fields'}; {where}")
    print(f"warning: calibrate on CPU ranks: {base!r}'s GPU figures are not copied: peak_tflops only for the "
          f"measured {', '.join(peaks) or '(none)'}" + (f" (left out: {', '.join(dropped)})" if dropped else "")
          + (f"; {', '.join(gone)} left out" if gone else ""), file=sys.stderr, flush=True)


def _warn_base_peaks(base_gpu: str, gpu: str, base: str) -> None:
    """Warn when the profile keeps the base profile's ``peak_tflops`` (calibrate does not measure peaks) for
    another GPU than the base's (names differ in their first two words: "NVIDIA H200" vs "NVIDIA A100")."""
    if base_gpu.split()[:2] != gpu.split()[:2]:
        print(f"warning: calibrate: peak_tflops (the roofline for GEMMs outside the measured table) copied from "
              f"base profile {base!r} ({base_gpu}), not measured on {gpu}: pass --base with a profile of this GPU, "
              "or edit gpu.peak_tflops", file=sys.stderr, flush=True)


def _power_section(pw: dict[str, Any], where: str) -> dict[str, Any]:
    """The profile's ``power:`` section from :func:`executor.calibrate_power.measure_power`'s result ``pw``."""
    shape = "x".join(map(str, pw["shape"]))
    duties = ", ".join(f"{float(v):.2f}" for k, v in sorted(pw["achieved"].items()) if k != "1.0")
    out = {"gemm_slowdown_by_duty": pw["curve"],
           "source": f"measured {where} (executor/calibrate_power.py): bf16 {shape} GEMMs back to back "
                     f"and at duty cycles {duties}, sustained time over burst time, the idle-gap cost "
                     "of the lowest duty divided out; onset_s: when the back-to-back GEMMs first ran "
                     "slower by half the steady slowdown"}
    if pw.get("onset_s") is not None:
        out["onset_s"] = pw["onset_s"]
    return out


def _assemble(o: CalibrateOptions, raw: dict[str, Any], ctx: Any, dev_name: str) -> dict[str, Any]:
    d = base_profile_dict(o.base)
    date = raw["date"]
    where = f"{dev_name}, {date}, torch {raw['torch']}"
    d["name"] = default_profile_name(o.name, Path(o.out))
    d["description"] = (f"Measured by schedsim calibrate on {where} ({raw['world_size']} rank(s), {raw['backend']}). "
                        f"Unmeasured parts from profile {o.base!r}: {d.get('description', '').strip()[:300]}")
    cp = raw["copies"]
    L = raw["launch"]
    if ctx.cuda:
        base_gpu = d["gpu"]["name"]
        d["gpu"]["name"] = dev_name if dev_name.startswith("NVIDIA") else f"NVIDIA {dev_name}"
        _warn_base_peaks(base_gpu, d["gpu"]["name"], o.base)
        d["gpu"]["hbm_GBps"] = round(cp["d2d_GBps"], 1)
        if "kernel_floor_us" in L:
            d["gpu"]["kernel_floor_us"] = round(L["kernel_floor_us"], 2)
        d["gpu"].update(_l2_fields(L))
        from schedsim.hardware.profile import GPU

        if "sms" in GPU.model_fields:  # occupancy-aware sharing in the engine
            import torch

            d["gpu"]["sms"] = int(torch.cuda.get_device_properties(ctx.device).multi_processor_count)
        d["gpu"]["source"] = (f"peaks: base profile {o.base!r}; hbm_GBps: measured d2d copy (read+write); "
                              f"kernel_floor_us: back-to-back time of a 1-element add; sms: the device's "
                              f"multiprocessor "
                              f"count; l2_bytes: the device's L2_cache_size; hbm_miss_us: a graph node of add_ on "
                              f"32x1024 bf16 from HBM less in L2; {where}")
    else:
        d["gpu"]["name"] = "CPU (gloo ranks)"
        d["gpu"]["hbm_GBps"] = round(max(cp["d2d_GBps"], 0.1), 2)
        d["gpu"].update(_l2_fields(L))
        _cpu_gpu_fields(d["gpu"], raw["gemm"], o.base, where)
    H = raw["host"]
    fresh = raw.get("host_fresh_processes") or []
    fresh_kinds = [k for k in ("eager_per_op_us", "event_wait_us", "stream_switch_us", "memcpy_call_us",
                               "elementwise_call_us", "call_launch_fraction",
                               "executor_extra_per_op_us") if any(k in f for f in fresh)]
    fresh_note = (f"; {', '.join(fresh_kinds)} are medians over {len(fresh)} fresh processes "
                  f"(calibrate_host.fresh_process_costs; this process's own figures are host_in_process in the .json)"
                  if fresh else
                  f"; none of the {raw['host_fresh_requested']} fresh processes asked for finished: this process's "
                  f"own host costs" if raw.get("host_fresh_requested") else "")
    d["launch"] = {
        "p2p_call_us": None, "batch_p2p_call_us": None, "event_wait_us": None,  # measured only where they exist
        **launch_fields(H),
        "graph_launch_us": round(L.get("graph_launch_us", d["launch"]["graph_launch_us"]), 2),
        "graph_per_op_us": round(L.get("graph_per_op_us", d["launch"]["graph_per_op_us"]), 3),
        "graph_timing_event_us": round(L.get("graph_timing_event_us",
                                             d["launch"].get("graph_timing_event_us", 0.0)), 2),
        "graph_timing_gap_us": (round(L["graph_timing_gap_us"], 2) if "graph_timing_gap_us" in L
                                else d["launch"].get("graph_timing_gap_us")),
        "source": (f"measured {where}: host time per call of plain PyTorch (executor/calibrate_host.py), loops of "
                   f"200 calls with the GPU kept busy{fresh_note}: eager_per_op_us = torch.matmul 64x64; "
                   f"eager_per_collective_us"
                   f" = dist.all_reduce 1 KiB, calls back to back (alternating with that matmul: pair - matmul "
                   f"{H.get('mixed_pair_us', float('nan')) - H.get('matmul_loop_us', float('nan')):.2f}, not used); "
                   f"first_op_extra_us / first_collective_extra_us ="
                   f" first matmul / all_reduce after a synchronize + barrier minus steady; p2p_call_us = one "
                   f"dist.isend/irecv; batch_p2p_call_us = one "
                   f"batch_isend_irecv of a send+recv; event_wait_us = event.record + stream.wait_event; "
                   f"memcpy_call_us = a 4 KiB copy_; elementwise_call_us = torch.add(x, y, out=z) of 4 KiB uint8 "
                   f"(a bytes-only compute op); call_launch_fraction = (host time from a start event's record to "
                   f"the kernel's launch) / the call, a bf16 2048^3 matmul on an idle GPU against back to back; "
                   f"stream_switch_us = (a torch.cuda.set_stream switch + the "
                   f"matmul launch) - the launch (the context manager's is stream_context_us in the .json); "
                   f"graph_launch_us = CUDAGraph.replay() of a 1-node graph; "
                   f"graph_per_op_us = GPU time of an add_ on 32x1024 bf16 as a node of a 64-node graph chain minus "
                   f"its back-to-back time (negative: a node is shorter; without an L2 size, a 300-node matmul "
                   f"graph, clamped at 0); "
                   f"graph_timing_event_us = span between an op's timing events in a 64-op graph (GEMM, add_) "
                   f"minus the untimed graph's time per op; graph_timing_gap_us = one op's end event to the next "
                   f"op's start event in that graph; "
                   f"executor_extra_per_op_us = schedsim execute's lean loop ({H['executor_lean_per_op_us']:.2f} "
                   f"us/op) minus the same two-stream probe by hand ({H['by_hand_per_op_us']:.2f} us/op); "
                   f"cold_first_call_us = the first add, 64x64 matmul and 1 KiB all_reduce after the host waited "
                   f"~2 ms for the GPU, less the same first calls after a synchronize (the add: less its steady "
                   f"call; executor/calibrate_host._cold_first_calls)"
                   if ctx.cuda else
                   f"measured on CPU ranks {where} (host time per call; no events or graphs on CPU ranks: graph "
                   f"values from {o.base!r}); executor_extra_per_op_us = lean loop minus the same ops by hand"
                   f"{fresh_note}"),
    }
    d["gpu"]["max_connections"] = int(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8"))
    if "nccl" in raw:
        nc = raw["nccl"]
        unb = {r["size"]: r["time_us"] for r in (raw.get("collectives") or {}).get("p2p_unbatched", [])}
        bat = {r["size"]: r["time_us"] for r in (raw.get("collectives") or {}).get("sendrecv", [])}
        pairs = ", ".join(f"{s} B {unb[s]:.1f}/{bat[s]:.1f} us" for s in sorted(unb) if s in bat)
        one_way = p2p_one_way_speedup(unb, bat)
        d["nccl"] = {"sms_per_collective": int(nc["sms_per_collective"] or 16),
                     "slowdown_beside_gemm": round(nc["slowdown_beside_gemm"], 3),
                     "gemm_slowdown_beside_nccl": round(nc["gemm_slowdown_beside_nccl"], 3),
                     "unbatched_p2p_serialized": True,
                     **({"p2p_one_way_speedup": round(one_way[0], 3)} if one_way else {}),
                     "source": (f"measured {where} (executor/calibrate_nccl.py): all_gather of {nc['comm_bytes']} B "
                                f"beside bf16 {nc['gemm_side']}^3 GEMM series issued first (comm slowdown) and "
                                f"after it (GEMM slowdown over the overlapped part); sms_per_collective = the NCCL "
                                f"kernel's grid in a Kineto trace"
                                + ("" if nc["sms_per_collective"] else " (no grid in the trace: NCCL's 16 assumed)")
                                + "; unbatched_p2p_serialized: NCCL docs (Group Calls) and PyTorch's eager-init "
                                  "warning; GPU-side p2p unbatched one-way / batched ring: " + (pairs or "n/a")
                                + (f"; p2p_one_way_speedup = batched exchange / one-way time at {one_way[1]} B "
                                   f"(the largest size of both sweeps), at least 1" if one_way else ""))}
    if not ctx.cuda:
        d.pop("power", None)  # a CPU profile has no GPU power limit
    if "power" in raw:
        d["power"] = _power_section(raw["power"], where)
    d["memcpy"] = {"h2d_GBps": round(cp["h2d_GBps"], 2), "d2h_GBps": round(cp["d2h_GBps"], 2),
                   "d2d_GBps": round(cp["d2d_GBps"], 1), "latency_us": round(cp["latency_us"], 2),
                   "source": f"measured {where}: pinned host buffers, {8 if o.quick else 256} MiB copies, median "
                             "of 10; d2d counts bytes read plus written; latency = a 4 KiB h2d copy"}
    d["gemm"] = {"source": f"measured {where}: torch.matmul(a, b, out=c) on random inputs; kernel time when "
                           "launched back to back (R launches queued behind torch.cuda._sleep, R = 2 ms / "
                           "single-launch "
                           "time capped at 200, elapsed / R, median of 5; R = 1 for long GEMMs, i.e. a single "
                           "event-timed launch, median of --iters), 3 rotating input sets when they fit in 3x L2; "
                           "'fp32' = TF32 off, 'tf32' = TF32 on; call rows: host time of one call over the 64x64 "
                           "matmul's, loops of 200 calls behind a sleep, GEMMs up to 0.2 ms, median over the fresh "
                           "host processes. Single-launch times are in the .json next to this file"
                           if ctx.cuda else f"measured on CPU {where}",
                 "entries": [list(r) for r in raw["gemm"]], "shape_curve_from": None,
                 "ctas": [list(r) for r in raw.get("gemm_ctas", [])],
                 "graph": [list(r) for r in raw.get("gemm_graph", [])],
                 "ctas_per_sm": [list(r) for r in raw.get("gemm_ctas_per_sm", [])],
                 "reduce": [list(r) for r in raw.get("gemm_reduce", [])],
                 "call": gemm_call_rows(raw["host"])}
    coll = raw.get("collectives")
    if coll:
        n = raw["world_size"]
        tables = {k: {int(kk): vv for kk, vv in v.items()} for k, v in d["collectives"]["tables"].items()}
        for kind, rows in coll.items():
            if kind == "p2p_unbatched":  # no table of its own: kept in the .json and nccl.source
                continue
            tab = [[float(r["size"]), _sig(r["busbw"])] for r in rows if r["busbw"] > 0]
            if tab:
                tables.setdefault(kind, {})[n] = tab
        how = ("GPU-side kernel time: R back-to-back calls queued behind torch.cuda._sleep between two CUDA "
               "events, elapsed / R (R = 2^28 B / size, 2 to 200), median of 5, slowest rank; the host call cost is "
               "in launch:, single-launch host-inclusive times are in the .json" if ctx.cuda else
               "host time per call (median), slowest rank")
        d["collectives"] = {"tables": tables, "source": f"measured {where}: schedsim calibrate sweep over {n} ranks "
                            f"({raw['backend']}): {how}; nccl-tests busbw factors; sendrecv = batched ring "
                            f"(batch_isend_irecv)"}
        ar = coll.get("all_reduce") or []
        if ar:
            big = max(ar, key=lambda r: r["size"])
            small = min(ar, key=lambda r: r["size"])
            link = d["topology"]["intra_node_link"]
            d["links"][link] = {"bandwidth_GBps": _sig(max(r["busbw"] for r in ar)),
                                "latency_us": _sig(small["time_us"] / max(1, 2 * (n - 1))),
                                "source": f"measured {where}: best all_reduce busbw of the sweep; latency = the "
                                          f"smallest all_reduce ({small['size']} B) time / 2(n-1); largest size "
                                          f"{big['size']} B"}
    cont = dict(d["contention"])
    srcs = []
    if "contention_copy" in raw:
        cc = raw["contention_copy"]
        cont["compute_slowdown_with_copy"] = round(cc["compute_slowdown_with_copy"], 4)
        cont["copy_slowdown_with_compute"] = round(cc["copy_slowdown_with_compute"], 4)
        srcs.append(f"copy factors measured {where} (bf16 GEMM series beside a pinned h2d copy vs alone)")
    else:
        srcs.append(f"copy factors (compute_slowdown_with_copy, copy_slowdown_with_compute) from {o.base!r}: not "
                    "measured on these ranks")
    if "duplex" in raw:
        dx = raw["duplex"]
        cont["h2d_slowdown_beside_d2h"] = round(dx["h2d_slowdown_beside_d2h"], 4)
        cont["d2h_slowdown_beside_h2d"] = round(dx["d2h_slowdown_beside_h2d"], 4)
        srcs.append(f"duplex factors measured {where} ({int(dx['chunks'])} pinned copies of "
                    f"{int(dx['chunk_bytes']) >> 20} MiB each way, together vs alone)")
    else:
        srcs.append(f"duplex factors (h2d_slowdown_beside_d2h, d2h_slowdown_beside_h2d) from {o.base!r}: not "
                    "measured on these ranks")
    if "contention_comm" in raw:
        c2 = raw["contention_comm"]
        cont["compute_slowdown_with_comm"] = round(c2["compute_slowdown_with_comm"], 4)
        cont["comm_slowdown_with_compute"] = round(c2["comm_slowdown_with_compute"], 4)
        srcs.append(f"NCCL factors measured {where} (bf16 GEMM series beside an all_reduce vs alone)")
    else:
        srcs.append(f"NCCL factors from {o.base!r}: {d['contention']['source'][:200]}")
    cont["source"] = "; ".join(srcs)
    d["contention"] = cont
    _set_graph_edge(d, L, o.base, raw.get("gemm_fork") or [])
    from executor.calibrate_waves import assemble_wave_tail

    assemble_wave_tail(d, raw, where)
    _set_sm_stream(d, raw.get("sm_stream"), where)
    return d


def _set_sm_stream(d: dict[str, Any], rec: dict[str, Any] | None, where: str) -> None:
    """``gpu.sm_stream_GBps`` from :func:`executor.calibrate_waves.measure_sm_stream`'s record, its source said;
    the base profile's value stays when none was measured (CPU ranks, no free SM)."""
    if not rec:
        return
    d["gpu"]["sm_stream_GBps"] = rec["GBps_per_sm"]
    d["gpu"]["source"] += (f"; sm_stream_GBps: measured {where} (executor/calibrate_waves.measure_sm_stream): an "
                           f"add_ of {rec['bytes'] / 1e6:.1f} MB on the {rec['free_sms']} SMs a {rec['gemm_ctas']}-"
                           f"CTA bf16 GEMM leaves free, per SM, its Kineto span, median of {rec['runs']}")


