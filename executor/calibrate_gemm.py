"""GEMM measurement for ``schedsim calibrate``: the shapes timed, their kernel time launched back to back, as
a CUDA-graph node from L2 and HBM, and the kernel's grid and CTAs per SM read from its Kineto record
(the occupancy calculation); the peak rates the table implies (:func:`measured_peaks`).
"""

from __future__ import annotations

import functools
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from executor.calibrate_bench import DEFAULT_GRID, QUICK_GRID, CalibrateOptions, _Bench
from executor.calibrate_graph import GRAPH_LAYERS, _graph_fork_us, graph_chain_per_node, pool_count
from executor.calibrate_nccl import kernel_events

__all__ = ["measured_peaks", "gemm_graph_times", "longest_kernel_ctas", "longest_kernel_ctas_per_sm",
           "persistent_tiles", "reduction_kernel", "memset_gap_us", "device_limits", "ctas_per_sm", "SM90_LIMITS"]


def _gemm_shapes(o: CalibrateOptions, cuda: bool) -> list[tuple[str, int, int, int]]:
    from schedsim.graph.build import build_graph
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

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
#: (:mod:`schedsim.gpu.power`). Without the rest a GEMM timed right after a long one reads 12-20 % slow
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
            gap = memset_gap_us(kernel_events(torch, fns[0], calls=MEMSET_CALLS))  # each call on an idle GPU
            if gap is not None:
                b.gemm_memset.append([dt, m, n, k, round(gap, 3)])
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


#: calls of one profiler session, each after a synchronize, whose memset gaps :func:`memset_gap_us` takes the median
#: of, the first left out (the session's start slows its first call on the host)
MEMSET_CALLS = 5


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


def gemm_graph_times(torch: Any, dev: Any, dtype: Any, m: int, n: int, k: int, l2: float) -> tuple[float, float]:
    """``(warm_s, cold_s)`` of one ``torch.matmul(a, b, out=c)`` as a node of a CUDA-graph chain (profile
    ``gemm.graph``, rule graph-nodes of :mod:`schedsim.gpu.rules`): 64 nodes reusing one (a, b), outputs distinct (in
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


def longest_kernel_ctas(events: list[dict[str, Any]], m: int | None = None, n: int | None = None,
                        sms: int | None = None) -> int | None:
    """Work units (rule cta-count's CTAs) of the longest ``"cat": "kernel"`` event of a Chrome trace (Kineto's export):
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


def memset_gap_us(events: list[dict[str, Any]]) -> float | None:
    """µs from the end of the memset a GEMM call launched before its main kernel to that kernel's start, from a
    Chrome trace (Kineto's export) of one or more calls, each on an idle GPU (profile ``gemm.memset``), at least 0;
    None when no memset (``"cat": "gpu_memset"``, CUPTI's ``Memset (Device)``) precedes the main kernel. The main
    kernel is the longest kernel's name; each of its launches with a memset after the previous one's start gives a
    gap. With several calls, the median of the gaps after the first: the first call of a profiler session pays the
    session's own start on the host (one H100 calibration read 21.9-35.6 µs from that one call where the runs'
    profiled iterations read 7.2-13.0 µs for the same shapes; docs/validation.md, "the misses of the H100 table of
    10:52, by kind"). cuBLAS's split-K "coopA" kernels zero a workspace first; on one H100 the main
    kernel started 7.8-13.0 µs after the memset with nothing queued ahead of it (docs/validation.md, "a split-K
    GEMM's memset on an idle GPU").

    >>> memset_gap_us([{"cat": "gpu_memset", "ts": 10.0, "dur": 1.5, "name": "Memset (Device)"},
    ...                {"cat": "kernel", "ts": 21.5, "dur": 160.0, "args": {"grid": [2, 66, 1]}}])
    10.0
    >>> memset_gap_us([{"cat": "kernel", "ts": 0.0, "dur": 9.0, "args": {"grid": [4, 1, 1]}}]) is None
    True
    >>> calls = [(0.0, 30.0), (500.0, 8.0), (1000.0, 9.0), (1500.0, 7.0)]  # (memset start, gap): first call's 30
    >>> memset_gap_us([e for t, g in calls for e in ({"cat": "gpu_memset", "ts": t, "dur": 1.0},
    ...                {"cat": "kernel", "name": "k", "ts": t + 1.0 + g, "dur": 160.0})])
    8.0
    """
    main = _longest_kernel(events)
    if main is None:
        return None
    name = main.get("name")
    mains = sorted(float(e.get("ts", 0.0)) for e in events if e.get("cat") == "kernel" and e.get("name") == name)
    sets = sorted((float(e.get("ts", 0.0)), float(e.get("dur", 0.0))) for e in events if e.get("cat") == "gpu_memset")
    gaps, prev = [], float("-inf")
    for t0 in mains:
        before = [s for s in sets if prev < s[0] <= t0]
        if before:
            ts, dur = before[-1]
            gaps.append(max(0.0, t0 - ts - dur))
        prev = t0
    if not gaps:
        return None
    return float(statistics.median(gaps[1:] if len(gaps) > 1 else gaps))


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
    main = _longest_kernel(events)
    return None if main is None else _record_ctas_per_sm(main.get("args", {}), lim)


def _longest_kernel(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The longest ``"cat": "kernel"`` event (by ``dur``) of a Kineto trace's ``events``; None when there is none."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return max(kernels, key=lambda e: float(e.get("dur", 0.0))) if kernels else None


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
