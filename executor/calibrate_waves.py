"""The ragged end of a GEMM's wave, for ``gpu.wave_tail_us`` (``schedsim calibrate``; rule wave-tail of
:mod:`schedsim.gpu.rules`).

A wave's CTAs do not end together. Back to back on one stream a kernel holds its last wave's SMs until the
slowest CTA ends, and the GEMM table's times include that. When other streams' GEMMs wait for SMs, each SM is
taken as it frees, so overlapped GEMMs achieve more than the table's throughput. This measures one GEMM shape
of about one wave (half the SMs to all of them; fp32 2048×1024×8192, allgather_mm's sub-GEMM, when the
schedules have none) on rank 0's GPU:

* ``one_stream_ms``: 8·M launches on one stream, queued behind ``torch.cuda._sleep`` so the host is not timed,
  elapsed / (8·M);
* ``overlapped_ms``: the same 8·M launches as M on each of 8 streams, every stream released by one event, the
  elapsed time from that event to the last stream's end;

medians of 5 alternating repetitions. :func:`fit_wave_tail` then finds the tail for which the simulator's
``waves`` model, given the one-stream time as the shape's table row and its measured grid, predicts the
overlapped time (bisection), so the fitted tail carries only what the model does not already give overlapped
GEMMs (SMs a grid leaves free, split-K reductions). One H200, [evidence: wave-tail], 8 per stream: fp32
1024×512×8192 0.168 ms per GEMM overlapped against 0.180 back to back (tail 8.8 µs), 2048×1024×8192 0.678
against 0.700 (8.1 µs), 4096×2048×8192 2.599 against 2.665 (10.7 µs); [evidence: wave-tail].
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

#: the shape measured when no schedule GEMM is about one wave long (fp32 allgather_mm chunks 8's sub-GEMM)
DEFAULT_SHAPE = ("fp32", 2048, 1024, 8192)
STREAMS = 8


def pick_shapes(rows: list[list[Any]], ctas: list[list[Any]], sms: int, min_ms: float = 0.01, max_ms: float = 3.0,
                limit: int = 12) -> list[tuple[tuple[str, int, int, int], int | None]]:
    """The measured GEMMs (``rows``: ``[dtype, m, n, k, ms]``, schedules' shapes first) to probe, with their
    grids: those whose measured grid (``ctas``: ``[dtype, m, n, k, CTAs]``) is at least half the SMs (a GEMM
    that leaves most SMs free is not waited for) and that run ``min_ms`` to ``max_ms`` ms back to back (64 of
    them, 5 times, stay within seconds), at most ``limit``; none such: :data:`DEFAULT_SHAPE` with its grid if
    measured (else None). The floor was formerly 0.02 ms: a lease's profile then had no row for the
    18 µs bf16 GEMMs of allgather_mm bf16 chunks 16, whose tail fell back to the median of its fp32 rows
    (6.2 µs; the case came out −20.9 %, [evidence: elementwise-host]).

    >>> pick_shapes([["bf16", 8, 8, 8, 0.01], ["fp32", 512, 512, 8192, 0.2]], [["fp32", 512, 512, 8192, 128]], 132)
    [(('fp32', 512, 512, 8192), 128)]
    >>> pick_shapes([], [], 132)
    [(('fp32', 2048, 1024, 8192), None)]
    """
    grid = {tuple(r[:4]): int(r[4]) for r in ctas}
    out: list[tuple[tuple[str, int, int, int], int | None]] = []
    for r in rows:
        key = (str(r[0]), int(r[1]), int(r[2]), int(r[3]))
        g = grid.get(key)
        if g is not None and g >= sms / 2 and min_ms <= float(r[4]) <= max_ms and len(out) < limit:
            out.append((key, g))
    return out or [(DEFAULT_SHAPE, grid.get(DEFAULT_SHAPE))]


def measure_wave_tail(torch: Any, dev: Any, shape: tuple[str, int, int, int], grid: int | None,
                      log: Callable[[str], None], per_stream: int = 8, reps: int = 5) -> dict[str, Any]:
    """``{"dtype", "m", "n", "k", "ctas", "streams", "per_stream", "one_stream_ms", "overlapped_ms"}`` (see the
    module docstring; ms are per GEMM for one stream and the whole run for the overlapped one; ``ctas`` is
    ``grid``, or the shape's grid from a Kineto trace when None). Needs CUDA."""
    from executor.kernels import torch_dtype

    dt, m, n, k = shape
    tdt = torch_dtype(dt)
    torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
    a = torch.rand((m, k), device=dev, dtype=torch.float32).to(tdt)
    b = torch.rand((k, n), device=dev, dtype=torch.float32).to(tdt)
    outs = [torch.empty((m, n), device=dev, dtype=tdt) for _ in range(STREAMS)]
    streams = [torch.cuda.Stream(device=dev) for _ in range(STREAMS)]
    main = torch.cuda.current_stream(dev)
    total = STREAMS * per_stream
    for c in outs:
        torch.matmul(a, b, out=c)  # warm: the first call may pick or load the kernel
    torch.cuda.synchronize(dev)
    if grid is None:  # the shape was not in the GEMM table's runs: its grid from a Kineto trace
        from executor.calibrate_gemm import longest_kernel_ctas
        from executor.calibrate_nccl import kernel_events

        grid = longest_kernel_ctas(kernel_events(torch, lambda: torch.matmul(a, b, out=outs[0])))

    def one() -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(4_000_000)
        s.record()
        for i in range(total):
            torch.matmul(a, b, out=outs[i % STREAMS])
        e.record()
        e.synchronize()
        return s.elapsed_time(e) / total

    def overlapped() -> float:
        s = torch.cuda.Event(enable_timing=True)
        ends = [torch.cuda.Event(enable_timing=True) for _ in streams]
        torch.cuda._sleep(4_000_000)
        s.record()
        for st, c, e in zip(streams, outs, ends, strict=True):
            st.wait_event(s)
            with torch.cuda.stream(st):
                for _ in range(per_stream):
                    torch.matmul(a, b, out=c)
            e.record(st)
        for e in ends:
            main.wait_event(e)
        torch.cuda.synchronize(dev)
        return max(s.elapsed_time(e) for e in ends)

    ones, overs = [], []
    for _ in range(reps):
        ones.append(one())
        overs.append(overlapped())
    torch.backends.cuda.matmul.allow_tf32 = False
    one_ms, over_ms = float(statistics.median(ones)), float(statistics.median(overs))
    log(f"[waves] {dt} {m}x{n}x{k} ({grid} CTAs): {one_ms:.4f} ms per GEMM back to back on one stream, "
        f"{over_ms / total:.4f} ms per GEMM as {per_stream} on each of {STREAMS} streams")
    return {"dtype": dt, "m": m, "n": n, "k": k, "ctas": grid, "streams": STREAMS, "per_stream": per_stream,
            "one_stream_ms": one_ms, "overlapped_ms": over_ms}


def _schedule_text(rec: dict[str, Any]) -> str:
    dt, m, n, k = rec["dtype"], rec["m"], rec["n"], rec["k"]
    ops = [f"  - {{name: g{s}_{i}, kind: matmul, m: {m}, n: {n}, k: {k}, dtype: {dt}, stream: s{s}}}"
           for s in range(int(rec["streams"])) for i in range(int(rec["per_stream"]))]
    return "schema_version: 1\nname: wave_tail_fit\nworld_size: 1\nops:\n" + "\n".join(ops) + "\n"


def fit_wave_tail(profile: Any, rec: dict[str, Any], grid: int | None, tol_us: float = 0.005) -> float:
    """The ``gpu.wave_tail_us`` (µs, rounded to 0.01) for which the ``waves`` model predicts
    ``rec["overlapped_ms"]`` for the overlapped run of :func:`measure_wave_tail`, given ``rec["one_stream_ms"]``
    as the shape's GEMM row and ``grid`` CTAs (if measured) on ``profile`` (a
    :class:`schedsim.hardware.profile.HardwareProfile`) with host costs and the power curve off (the runs are
    queued behind a sleep and last milliseconds). 0 when even no tail predicts no more than measured; capped
    where rule wave-tail's gain stops growing (:data:`schedsim.gpu.rates.TAIL_CAP` of the wave). Bisection on the
    predicted makespan, which does not rise with the tail.
    """
    from schedsim.api import lower_spec
    from schedsim.gpu.rates import TAIL_CAP
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    key = (rec["dtype"], int(rec["m"]), int(rec["n"]), int(rec["k"]))
    gemm = profile.gemm
    entries = [list(e) for e in gemm.entries if tuple(e[:4]) != key] + [[*key, float(rec["one_stream_ms"])]]
    others = [list(e) for e in gemm.tail if tuple(e[:4]) != key]
    upd: dict[str, Any] = {"entries": entries, "tail": others}
    if grid:
        upd["ctas"] = [list(e) for e in gemm.ctas if tuple(e[:4]) != key] + [[*key, int(grid)]]
    zero = {f: 0.0 for f in ("eager_per_op_us", "event_wait_us", "stream_switch_us", "memcpy_call_us",
                             "elementwise_call_us", "first_op_extra_us", "eager_per_collective_us",
                             "first_collective_extra_us", "executor_extra_per_op_us")}
    base = profile.model_copy(update={"gemm": gemm.model_copy(update=upd), "power": None, "gpu_model": "waves",
                                      "launch": profile.launch.model_copy(update=zero)})
    G = lower_spec(load_text(_schedule_text(rec), "<wave tail fit>"))
    target = float(rec["overlapped_ms"]) * 1e-3

    def makespan(tail_us: float) -> float:  # the shape's own row (else a neighbour's would stand in) and the default
        g = base.gemm.model_copy(update={"tail": [*others, [*key, tail_us]]})
        p = base.model_copy(update={"gpu": base.gpu.model_copy(update={"wave_tail_us": tail_us}), "gemm": g})
        return simulate(G, p, launch="eager").makespan_s

    hi = TAIL_CAP * float(rec["one_stream_ms"]) * 1e3  # a longer tail is capped for every wave of this GEMM
    if makespan(0.0) <= target:
        return 0.0
    if makespan(hi) > target:
        return round(hi, 2)
    lo = 0.0
    while hi - lo > tol_us:
        mid = (lo + hi) / 2
        if makespan(mid) > target:
            lo = mid
        else:
            hi = mid
    return round((lo + hi) / 2, 2)


def assemble_wave_tail(d: dict[str, Any], raw: dict[str, Any], where: str) -> None:
    """Fit every probe of ``raw["wave_tail"]`` (:func:`measure_wave_tail` records, or one) with
    :func:`fit_wave_tail` on the profile dict calibrate assembled (which must validate): ``d["gemm"]["tail"]``
    gets a row per shape, ``d["gpu"]["wave_tail_us"]`` their median (for GEMMs of a dtype without rows; others
    take their dtype's nearest row), and the sources
    say so; nothing when no probe ran (CPU ranks)."""
    import statistics

    from schedsim.hardware.profile import HardwareProfile

    recs = raw.get("wave_tail") or []
    recs = [recs] if isinstance(recs, dict) else recs
    if not recs:
        return
    prof = HardwareProfile.model_validate(d)
    rows = [[r["dtype"], int(r["m"]), int(r["n"]), int(r["k"]), fit_wave_tail(prof, r, r.get("ctas"))] for r in recs]
    d["gemm"]["tail"] = rows
    d["gpu"]["wave_tail_us"] = round(statistics.median(r[4] for r in rows), 2)
    how = (f"fitted {where} (executor/calibrate_waves.py): each GEMM {recs[0]['per_stream']} to a stream on "
           f"{recs[0]['streams']} streams against the same back to back, the tail for which the waves model predicts "
           "the overlapped time")
    d["gpu"]["source"] += f"; wave_tail_us: the median of gemm.tail, {how}"
    d["gemm"]["source"] += f"; tail: {how}"


#: rule hbm-share's probe: a bf16 GEMM long enough to hold its SMs for a few hundred µs (one H200: 128 CTAs of split-K
#: 256x128 tiles, 339 µs, 4 SMs free) and an elementwise add_ moving this many bytes (read 2, write 1) beside it
SM_STREAM_GEMM = (2048, 1024, 65536)
SM_STREAM_BYTES = 12.6e6


def measure_sm_stream(torch: Any, dev: Any, sms: int, log: Callable[[str], None], reps: int = 5
                      ) -> dict[str, Any] | None:
    """``gpu.sm_stream_GBps`` (rule hbm-share of :mod:`schedsim.gpu.rules`): the HBM bandwidth one SM streams in an
    elementwise ``add_`` that holds only the SMs a GEMM on another stream leaves free. The GEMM
    (:data:`SM_STREAM_GEMM`, bf16) is launched, the host spins 50 µs so that it holds its SMs, then the add
    (:data:`SM_STREAM_BYTES`) goes on a second stream; a Kineto trace gives both kernels' spans, and GB/s = bytes /
    the add's span / free SMs (SMs − the GEMM's grid), the median of ``reps``, counting only repetitions whose add
    ran inside the GEMM. One H200: 4 free SMs, 12.6 and 50.3 MB at 0.275 TB/s, 69 GB/s per SM
    (``benchmarks/probes/sm/dispatch_order.py``); timed by CUDA events around the add instead, calibrate read 45.7
    (the window holds the add's launch and its wait for the SMs). None when the grid leaves no SM free, the
    trace has no kernel spans or no repetition qualifies. Needs CUDA."""
    import time

    from executor.calibrate_gemm import longest_kernel_ctas
    from executor.calibrate_nccl import kernel_events

    m, n, k = SM_STREAM_GEMM
    bf = torch.bfloat16
    a, b = torch.randn(m, k, device=dev, dtype=bf), torch.randn(k, n, device=dev, dtype=bf)
    c = torch.empty(m, n, device=dev, dtype=bf)
    x, y = (torch.randn(int(SM_STREAM_BYTES / 6), device=dev, dtype=bf) for _ in range(2))
    torch.matmul(a, b, out=c)
    x.add_(y)
    torch.cuda.synchronize(dev)
    grid = longest_kernel_ctas(kernel_events(torch, lambda: torch.matmul(a, b, out=c)))
    free = sms - (grid or sms)
    if free <= 0:
        log(f"[sm_stream] bf16 {m}x{n}x{k} holds every SM ({grid} CTAs): not measured")
        return None
    s1, s2 = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)

    def both() -> None:
        with torch.cuda.stream(s1):
            torch.matmul(a, b, out=c)
        t_end = time.perf_counter() + 50e-6
        while time.perf_counter() < t_end:
            pass
        with torch.cuda.stream(s2):
            x.add_(y)

    rates = []
    for _ in range(reps):
        torch.cuda.synchronize(dev)
        ks = [e for e in kernel_events(torch, both) if e.get("cat") == "kernel"]
        adds = [e for e in ks if "elementwise" in str(e.get("name", ""))]
        if not ks or len(adds) != 1:
            continue
        gemm = max(ks, key=lambda e: float(e.get("dur", 0.0)))
        ad = adds[0]
        t0, t1 = float(ad["ts"]), float(ad["ts"]) + float(ad["dur"])
        if float(gemm["ts"]) <= t0 and t1 <= float(gemm["ts"]) + float(gemm["dur"]) and ad["dur"] > 0:
            rates.append(x.numel() * 3 * x.element_size() / (float(ad["dur"]) * 1e-6) / free / 1e9)
    if not rates:
        log("[sm_stream] no add ran inside the GEMM in a Kineto trace: not measured")
        return None
    gbps = statistics.median(rates)
    log(f"[sm_stream] add_ of {SM_STREAM_BYTES / 1e6:.1f} MB on the {free} SMs a {grid}-CTA GEMM leaves free: "
        f"{gbps:.1f} GB/s per SM ({len(rates)}/{reps} repetitions inside the GEMM, Kineto spans)")
    return {"free_sms": free, "gemm_ctas": grid, "bytes": SM_STREAM_BYTES, "GBps_per_sm": round(gbps, 2),
            "runs": len(rates)}
