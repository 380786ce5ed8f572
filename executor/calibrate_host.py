"""Host (CPU thread) cost per call of plain PyTorch, by kind, and the executor's own extra cost.

What ``schedsim calibrate`` writes into the profile's ``launch:`` section
(its fields: :class:`schedsim.hardware.profile.Launch`). Every figure is the host time of a
loop of ``N`` calls divided by ``N``, median of several loops, with the GPU kept busy by a
``torch.cuda._sleep`` queued first so that no call waits for the device (the calls only
enqueue work). Plain PyTorch, written as a user would:

``eager_per_op_us``
    ``torch.matmul(a, b, out=c)`` on 64×64 bf16 tensors, timed first and again last; the lower
    (:func:`settle_costs`).
``event_wait_us``
    ``ev.record(s0)`` + ``s1.wait_event(ev)``: one cross-stream dependency.
``memcpy_call_us``
    ``dst.copy_(src, non_blocking=True)`` of 4 KiB pinned host → device.
``elementwise_call_us``
    ``torch.add(x, y, out=z)`` on three 4 KiB uint8 device tensors: how ``execute`` and the hand-written
    references run a ``compute`` op given only bytes (S0's ``output_chunk.add_``). Formerly the
    model charged such an op ``memcpy_call_us``; on one H200 the add costs more than the pinned copy
    ([evidence: elementwise-host]).
``stream_switch_us``
    the extra host time of a ``torch.cuda.set_stream(s)`` before that matmul, the stream alternating
    between two streams on every call: (switch + launch) − launch, ≥ 0 (``switch_call_us`` less the settled
    ``eager_per_op_us``). The executor and the hand-written
    references switch this way. The ``with torch.cuda.stream(s):`` context costs more (11.97 µs per switch
    on one H200, [evidence: copy-duplex]; charged to every small_ops op, it predicted that case +81 % long);
    it stays in the calibration JSON as ``stream_context_us``.
``eager_per_collective_us`` (all ranks)
    ``dist.all_reduce`` of 1 KiB on the current stream, in a loop of back-to-back calls (GPU kept busy):
    ``collective_loop_us``. Formerly it was taken from a loop alternating the call with the 64×64
    matmul above, (matmul + all_reduce) − matmul (``mixed_pair_us``, still in the calibration JSON), after
    a 2-GPU probe had timed a layer above the sum of separate loops. Measured against layers of
    tp_allreduce_graph written by hand and run by ``schedsim execute`` (world 1, 64 layers, eager, one H200,
    6 + 6 probe processes and 3 + 3 executor processes,
    ``benchmarks/probes/host/collective_call.py``, [evidence: collective-host]), the
    alternating loop over-predicted the all_reduce's share of a layer by +25 % (median; up to +117 %), the
    loop alone by a median |error| of 14 %; predicted from each executor process's own costs, the layers
    came out +35 % (median |error|) against 5.8 %. On 2×H200 [evidence: 2xh200-concurrency] the loop
    alone (31.2 µs) was also closer to the executor's 46 µs layers than the alternating loop (59.3 µs).
``collective_after_kernel_us`` (all ranks)
    an all_reduce right after a GEMV of tensor parallelism's kind (:func:`tp_layer_costs`: fp32 1×2048 @
    2048×2048, the all_reduce of its output, alternating with the GPU idle: ``gemv_pair_us``) less the GEMV's own
    loop (``gemv_loop_us``), ≥ 0 (:func:`tp_fields`). Formerly the 64×64 matmul's alternating loop
    (``mixed_pair_us``, after a sleep kernel) less the settled matmul, still in the JSON: on one H100 that pair
    read 28.1-29.1 µs where the executor's steady GEMV + all_reduce layer ran 24.97 (docs/validation.md, "the so_seg
    reference, and the warm-up and the pair of the host-bound tp layers"). The model charges it, in place of
    ``eager_per_collective_us``, to a collective call whose previous call on its rank was of another kind (rule
    host-issue,
    :func:`schedsim.gpu.host.collective_after_call_extra`). One H100 (docs/validation.md, "the misses of
    the H100 table of 10:52, by kind"): 17.6-18.6 µs in three fresh processes against 14.9-15.3 back to back;
    ``schedsim execute``'s all_reduce after a GEMV 15.6-17.5 µs, the GEMV after it 9.0-10.5 µs against 8.0
    predicted (its ``gemm.call`` row, a loop of GEMVs). The H200 probe above found the pair over-predicting
    the all_reduce's share of a layer there; on H100 the pair over-predicts the 96-layer run's steady layer by
    ~1.5 µs (6 %) and leaves the first layers' warm-up short (docs/validation.md).
``first_op_extra_us``, ``first_collective_extra_us`` (all ranks)
    the extra host time of the first matmul, and of the first all_reduce right after it, once the
    host has waited for the device, over their steady cost: median of 7. Each repetition starts as the programs'
    iterations do (:func:`_first_call_times`): the executor's :meth:`executor.clock.IterationClock.start`, then
    ``torch.cuda.set_stream`` to a stream of its own timed with the first matmul: ``schedsim execute``'s lean loop
    (its first step) and the hand-written references (their ``issue()``) switch to their stream inside the timed
    window, and rule host-issue charges a rank's first op no stream switch. Formerly a synchronize and barrier, the
    calls on the default stream, which under-charged every eager case's first matmul (measured:
    docs/validation.md, "one rule for the first call's under-charge? None found").
``collective_warmup_us`` (all ranks; a list)
    the first :data:`WARMUP_KEPT` of :data:`WARMUP_LAYERS` such GEMV + all_reduce layers timed right after the
    executor's own iteration start (:meth:`executor.clock.IterationClock.start`; the first with the switch to the
    layers' stream, as the first calls above), each less the pair above, the
    first less ``first_op_extra_us`` + ``first_collective_extra_us`` (``warmup_pair{k}_extra_us``,
    :func:`tp_fields`): rule host-issue charges the k-th value to a rank's k-th collective call. One H100's
    executor runs held 19-31 µs over the steady pair in their first three layers (same section).
``p2p_call_us`` (all ranks, world ≥ 2)
    one unbatched ``dist.isend`` (even ranks) / ``dist.irecv`` (odd ranks) of 1 KiB.
``batch_p2p_call_us`` (all ranks, world ≥ 2)
    one ``dist.batch_isend_irecv`` of a send and a recv with the neighbour.
``call_launch_fraction`` (CUDA; a fraction, not µs)
    where inside a ``torch.matmul`` call its kernel reaches the GPU, as a fraction of the call's host time
    (:func:`_launch_fraction`): a kernel can start before its own call returns (rule host-issue of
    :mod:`schedsim.gpu.rules`, :func:`~schedsim.gpu.host.kernel_release`).
``executor_extra_per_op_us``
    the executor's lean issue path (:mod:`executor.lean`) over a two-stream probe of tiny ops
    with cross-stream waits, minus the same probe written by hand, per op (≥ 0).

On CPU ranks (gloo) the same calls are timed without the sleep; event waits do not exist
there (``event_wait_us`` is left out).

**Fresh processes.** The host cost of one call is a property of the *process* as much as of the machine:
on one H200 host ([evidence: host-same-process]) small_ops eager took 2.32, 2.57, 3.05, 3.38 and 3.78 ms in
five fresh ``schedsim execute`` processes (and 2.48–3.98 ms in five hand-written ones), most of each one's
20 iterations within ±3 % of its median, while the calibration process, after a minute of GEMM and copy
benchmarks, measured 23.5 µs per matmul launch: its prediction of that case was +58 % against the median
process.
So ``schedsim calibrate`` also runs :func:`host_costs` in ``--host-processes`` fresh, short-lived processes
(``python -m executor.calibrate_host``: the schedule's processes are like those) and writes the median over
them per kind (:func:`fresh_process_costs`, :func:`median_costs`); the in-process figures stay in the
calibration JSON (``host_in_process``), every process's in ``host_fresh_processes``.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["HOST_FIELDS", "WORLD_FREE_COMM", "comm_host_costs", "fresh_comm_fields", "fresh_process_costs",
           "gemm_call_key", "gemm_call_rows", "host_costs",
           "launch_fields", "measure_here", "median_costs", "parse_gemm", "settle_costs", "tiny_mm", "tp_fields",
           "tp_layer_costs", "with_host_costs"]

#: the profile's ``launch:`` fields that are host costs measured here (µs per call)
HOST_FIELDS = ("eager_per_op_us", "eager_per_collective_us", "p2p_call_us", "batch_p2p_call_us", "event_wait_us",
               "memcpy_call_us", "elementwise_call_us", "stream_switch_us", "executor_extra_per_op_us",
               "first_op_extra_us", "first_collective_extra_us", "call_launch_fraction", "collective_after_kernel_us")

N = 200


def _loop_us(b: Any, fn: Callable[[], Any], n: int = N, reps: int = 5, busy: bool = True) -> float:
    """Median host µs per call of ``fn`` over ``reps`` loops of ``n`` calls (GPU kept busy first)."""
    torch = b.torch
    ts = []
    for _ in range(reps + 1):
        b.sync()
        if b.cuda and busy:
            torch.cuda._sleep(20_000_000)  # ~10 ms at 2 GHz: the queue never drains while the host loops
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n)
        b.sync()
    return float(statistics.median(ts[1:])) * 1e6


def _probe_by_hand(torch: Any, dev: Any, layers: int, dt: Any) -> Callable[[], None]:
    """The calibration probe of :func:`executor.calibrate_graph._probe_runner`, written by hand."""
    s0, s1 = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
    a = torch.rand(64, 64, device=dev).to(dt)
    bb = torch.rand(64, 64, device=dev).to(dt)
    cs = [torch.empty(64, 64, device=dev, dtype=dt) for _ in range(3)]
    src = torch.zeros(8192, dtype=torch.uint8, device=dev)
    dst = torch.empty(8192, dtype=torch.uint8, device=dev)
    evs = [torch.cuda.Event() for _ in range(layers)]
    set_stream = torch.cuda.set_stream
    mm = torch.matmul

    def run() -> None:
        for i in range(layers):
            set_stream(s0)
            mm(a, bb, out=cs[0])
            evs[i].record(s0)
            dst.copy_(src)
            set_stream(s1)
            s1.wait_event(evs[i])
            mm(a, bb, out=cs[1])
        set_stream(torch.cuda.default_stream(dev))

    return run


def tiny_mm(b: Any) -> tuple[Any, Any, Any]:
    """``(a, b, c)``: 64×64 operands and output (bf16 on CUDA, fp32 on CPU) of a launch-bound matmul."""
    torch = b.torch
    dev = b.ctx.device
    dt = torch.bfloat16 if b.cuda else torch.float32
    return (torch.rand(64, 64, device=dev).to(dt), torch.rand(64, 64, device=dev).to(dt),
            torch.empty(64, 64, device=dev, dtype=dt))


def gemm_call_key(dtype: str, m: int, n: int, k: int) -> str:
    """The key of a GEMM shape's call ratio among :func:`host_costs`' figures: ``gemm_call:bf16:1024x512x8192``.

    >>> gemm_call_key("bf16", 1024, 512, 8192)
    'gemm_call:bf16:1024x512x8192'
    """
    return f"gemm_call:{dtype}:{m}x{n}x{k}"


def gemm_call_rows(costs: dict[str, float]) -> list[list[Any]]:
    """The ``gemm.call`` rows ``[dtype, m, n, k, x]`` among ``costs`` (keys of :func:`gemm_call_key`).

    >>> gemm_call_rows({"eager_per_op_us": 10.0, "gemm_call:bf16:1024x512x8192": 1.2934})
    [['bf16', 1024, 512, 8192, 1.293]]
    """
    return [[*parse_gemm(key.removeprefix("gemm_call:")), round(float(x), 3)]
            for key, x in costs.items() if key.startswith("gemm_call:")]


def _gemm_calls(b: Any, base_us: float, gemms: Sequence[tuple[str, int, int, int]]) -> dict[str, float]:
    """Host time of one ``torch.matmul(a, b, out=c)`` of each shape over ``base_us`` (the 64×64 call's): the
    ``gemm.call`` rows of rule host-issue, loops of :data:`N` calls behind a sleep like every kind here."""
    from executor.kernels import torch_dtype

    torch, dev = b.torch, b.ctx.device
    out: dict[str, float] = {}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    for dt, m, n, k in gemms:
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"  # 'tf32' = fp32 tensors on TF32 (calibrate's GEMMs)
        tdt = torch_dtype(dt)
        a = torch.rand((m, k), device=dev, dtype=torch.float32).to(tdt)
        bb = torch.rand((k, n), device=dev, dtype=torch.float32).to(tdt)
        c = torch.empty((m, n), device=dev, dtype=tdt)
        torch.matmul(a, bb, out=c)  # the first call may pick or load the kernel
        out[gemm_call_key(dt, m, n, k)] = _loop_us(b, functools.partial(torch.matmul, a, bb, out=c)) / base_us
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return out


def _launch_fraction(b: Any) -> dict[str, float]:
    """Where inside its call a matmul reaches the GPU (``call_launch_fraction``; CUDA only).

    A bf16 2048×2048×2048 ``torch.matmul(a, b, out=c)`` (its kernel outlasts the rest of its call, so its end
    event is the kernel's end) between a start and an end event, 24 times on an idle GPU (synchronised before
    each) and 24 times back to back behind a sleep (the start event fires as the previous kernel ends). The
    idle window less the busy one is the host time from the start event's record to the kernel's launch
    (the GPU's wake-up latency is in both the event and the kernel, so it cancels); over the call's own host
    time (a loop of calls, as every kind here) it is the fraction. Medians; the first of each set dropped.
    Returns the fraction (clamped to 0.05–1) and its parts (µs) for the JSON."""
    torch, dev = b.torch, b.ctx.device
    a = torch.rand((2048, 2048), device=dev, dtype=torch.float32).to(torch.bfloat16)
    bb = torch.rand((2048, 2048), device=dev, dtype=torch.float32).to(torch.bfloat16)
    c = torch.empty((2048, 2048), device=dev, dtype=torch.bfloat16)
    call = functools.partial(torch.matmul, a, bb, out=c)
    call()
    call_us = _loop_us(b, call, n=50)
    n = 24
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    idle = []
    for e0, e1 in ev:
        b.sync()
        e0.record()
        call()
        e1.record()
        b.sync()
        idle.append(e0.elapsed_time(e1) * 1e3)
    torch.cuda._sleep(5_000_000)
    for e0, e1 in ev:
        e0.record()
        call()
        e1.record()
    b.sync()
    busy = [e0.elapsed_time(e1) * 1e3 for e0, e1 in ev]
    offset = statistics.median(idle[1:]) - statistics.median(busy[1:])
    return {"call_launch_fraction": min(1.0, max(0.05, offset / call_us)), "launch_probe_call_us": call_us,
            "launch_probe_offset_us": offset, "launch_probe_kernel_us": statistics.median(busy[1:])}


def parse_gemm(text: str) -> tuple[str, int, int, int]:
    """``DTYPE:MxNxK`` (``--gemm`` of ``python -m executor.calibrate_host``) as ``(dtype, m, n, k)``.

    >>> parse_gemm("bf16:1024x512x8192")
    ('bf16', 1024, 512, 8192)

    Raises
    ------
    argparse.ArgumentTypeError
        For any other text, naming the expected form.
    """
    import argparse
    from typing import get_args

    from schedsim.kinds import DType

    dtypes = get_args(DType)
    dt, _, shape = text.partition(":")
    dims = shape.split("x")
    if dt not in dtypes or len(dims) != 3 or not all(d.isdigit() and int(d) > 0 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: expected DTYPE:MxNxK with DTYPE one of "
                                         f"{', '.join(dtypes)} and positive M, N, K, e.g. bf16:1024x512x8192")
    return dt, int(dims[0]), int(dims[1]), int(dims[2])


def host_costs(b: Any, log: Callable[[str], None],
               gemms: Sequence[tuple[str, int, int, int]] = ()) -> dict[str, float]:
    """Rank 0 alone: the per-kind host costs that need no peer (see the module docstring), and the call ratio of
    each of ``gemms`` ((dtype, m, n, k); :func:`gemm_call_key`) on CUDA."""
    torch = b.torch
    dev = b.ctx.device
    a, bb, c = tiny_mm(b)

    def mm() -> None:
        torch.matmul(a, bb, out=c)

    res: dict[str, float] = {"eager_per_op_us": _loop_us(b, mm)}
    if b.cuda and gemms:
        res.update(_gemm_calls(b, res["eager_per_op_us"], gemms))
    if b.cuda:
        s0, s1 = torch.cuda.Stream(device=dev), torch.cuda.Stream(device=dev)
        ev = torch.cuda.Event()

        def wait() -> None:
            ev.record(s0)
            s1.wait_event(ev)

        res["event_wait_us"] = _loop_us(b, wait)

        def switch() -> None:  # two switches and two launches per call, as the executor and references switch
            torch.cuda.set_stream(s0)
            torch.matmul(a, bb, out=c)
            torch.cuda.set_stream(s1)
            torch.matmul(a, bb, out=c)

        def context() -> None:  # the same with the context manager (kept in the JSON only)
            with torch.cuda.stream(s0):
                torch.matmul(a, bb, out=c)
            with torch.cuda.stream(s1):
                torch.matmul(a, bb, out=c)

        default = torch.cuda.current_stream(dev)
        res["switch_call_us"] = _loop_us(b, switch) / 2  # a switch and a launch; stream_switch_us: settle_costs
        torch.cuda.set_stream(default)
        res["context_call_us"] = _loop_us(b, context) / 2
        h = torch.zeros(4096, dtype=torch.uint8).pin_memory()
        d = torch.empty(4096, dtype=torch.uint8, device=dev)
        res["memcpy_call_us"] = _loop_us(b, lambda: d.copy_(h, non_blocking=True))
        res.update(_launch_fraction(b))
    else:
        h = torch.zeros(4096, dtype=torch.uint8)
        d = torch.empty(4096, dtype=torch.uint8)
        res["memcpy_call_us"] = _loop_us(b, lambda: d.copy_(h))
    x, y, z = (torch.ones(4096, dtype=torch.uint8, device=dev) for _ in range(3))
    res["elementwise_call_us"] = _loop_us(b, lambda: torch.add(x, y, out=z))
    res.update(_executor_extra(b))
    res["eager_per_op_again_us"] = _loop_us(b, mm)
    settle_costs(res)
    log("[launch] plain PyTorch host cost per call: " + ", ".join(f"{k} {v:.2f}" for k, v in res.items()))
    return res


def settle_costs(res: dict[str, float]) -> dict[str, float]:
    """In place (and returned): ``eager_per_op_us`` the lowest of the 64×64 matmul's loops, the first and the
    last of :func:`host_costs` (``eager_per_op_again_us``) and, in :func:`measure_here`, the one of
    :func:`comm_host_costs` (``matmul_loop_us``); ``stream_switch_us`` / ``stream_context_us`` the
    switch loops' cost per call (``switch_call_us`` / ``context_call_us``: a switch and a launch) less it, >= 0;
    ``collective_after_kernel_us`` the matmul + all_reduce pair's loop (``mixed_pair_us``) less it, >= 0, unless
    :func:`tp_layer_costs` ran (then :func:`tp_fields`).

    Why the lower: whatever slows a loop down from outside the call (the collector, a thread of the process, the
    CPU) only adds time, a figure taken in such a spell is charged to every call of the prediction, and the
    switch's cost is a launch's less this figure. Source: one H100 execute --measure-host process whose first
    loop ran 15.03 µs per call and the same call 10.64 later, its switch clamped to 0, its own prediction +24 %
    (docs/validation.md, "Host-bound eager runs").

    >>> settle_costs({"eager_per_op_us": 15.0, "eager_per_op_again_us": 10.5, "switch_call_us": 11.7})
    {'eager_per_op_us': 10.5, 'eager_per_op_again_us': 10.5, 'switch_call_us': 11.7, 'stream_switch_us': 1.2}
    >>> settle_costs({"eager_per_op_us": 10.42, "matmul_loop_us": 35.0, "mixed_pair_us": 29.06})  # one H100 process
    {'eager_per_op_us': 10.42, 'matmul_loop_us': 35.0, 'mixed_pair_us': 29.06, 'collective_after_kernel_us': 18.64}
    >>> r = settle_costs({"eager_per_op_us": 10.4, "mixed_pair_us": 29.0, "gemv_loop_us": 9.0, "gemv_pair_us": 25.0,
    ...                   "first_op_extra_us": 3.6, "first_collective_extra_us": 1.9, "warmup_layer1_us": 45.0,
    ...                   "warmup_layer2_us": 29.5, "warmup_layer3_us": 24.0})
    >>> [r[k] for k in ("collective_after_kernel_us", "warmup_pair1_extra_us", "warmup_pair2_extra_us",
    ...                 "warmup_pair3_extra_us")]
    [16.0, 14.5, 4.5, 0.0]
    """
    again = [res[k] for k in ("eager_per_op_again_us", "matmul_loop_us") if k in res]
    if "eager_per_op_us" in res and again:
        res["eager_per_op_us"] = min(res["eager_per_op_us"], *again)
    for raw, field in (("switch_call_us", "stream_switch_us"), ("context_call_us", "stream_context_us"),
                       ("mixed_pair_us", "collective_after_kernel_us")):
        if raw in res and "eager_per_op_us" in res:
            res[field] = round(max(0.0, res[raw] - res["eager_per_op_us"]), 9)
    return tp_fields(res)


def tp_fields(res: dict[str, float]) -> dict[str, float]:
    """In place (and returned), where :func:`tp_layer_costs` ran: ``collective_after_kernel_us`` the GEMV +
    all_reduce pair (``gemv_pair_us``) less the GEMV's loop (``gemv_loop_us``), and ``warmup_pair{k}_extra_us``
    (k = 1 .. :data:`WARMUP_KEPT`) the k-th layer after an iteration start (``warmup_layer{k}_us``) less that pair,
    the first less ``first_op_extra_us`` + ``first_collective_extra_us`` too (the model charges those on it
    already); each >= 0. Without them, ``res`` unchanged."""
    if "gemv_pair_us" in res and "gemv_loop_us" in res:
        res["collective_after_kernel_us"] = round(max(0.0, res["gemv_pair_us"] - res["gemv_loop_us"]), 9)
        first = res.get("first_op_extra_us", 0.0) + res.get("first_collective_extra_us", 0.0)
        for j in range(1, WARMUP_KEPT + 1):
            if f"warmup_layer{j}_us" in res:
                extra = res[f"warmup_layer{j}_us"] - res["gemv_pair_us"] - (first if j == 1 else 0.0)
                res[f"warmup_pair{j}_extra_us"] = round(max(0.0, extra), 9)
    return res


def _executor_extra(b: Any) -> dict[str, float]:
    """Host µs per op of the executor's lean loop and of the same probe by hand, over the probe's ops."""
    from executor.calibrate_graph import _probe_runner
    from executor.lean import compile_cpu, compile_cuda, run_cpu

    torch = b.torch
    layers = 100
    r = _probe_runner(b.ctx, layers, "bf16" if b.cuda else "fp32")
    n_ops = len(r.impls)
    try:
        if b.cuda:
            steps = compile_cuda(torch, r.impls, r.stream_list, r.cross, r.ev_dep, [])
            dev = b.ctx.device

            def lean() -> None:
                for f in steps:
                    f()
                torch.cuda.set_stream(torch.cuda.default_stream(dev))

            by_hand = _probe_by_hand(torch, dev, layers, torch.bfloat16)
            ex = _loop_us(b, lean, n=1, reps=7) / n_ops
            hand = _loop_us(b, by_hand, n=1, reps=7) / n_ops
        else:
            cpu_steps = compile_cpu(r.impls, r.waits)
            ex = _loop_us(b, lambda: run_cpu(cpu_steps, n_ops, None), n=1, reps=7) / n_ops
            impls = [impl.run for impl in r.impls]

            def plain() -> None:
                for f in impls:
                    f()

            hand = _loop_us(b, plain, n=1, reps=7) / n_ops
    finally:
        r.close()
    return {"executor_lean_per_op_us": ex, "by_hand_per_op_us": hand, "executor_extra_per_op_us": max(0.0, ex - hand)}


def comm_host_costs(b: Any) -> dict[str, float]:
    """All ranks (world ≥ 2 for p2p): host µs of one all_reduce call (back to back), the first
    matmul and all_reduce after a synchronize (extra over steady), one unbatched isend/irecv, one
    batch_isend_irecv of a send+recv pair. Returns this rank's figures (rank 0 keeps its own)."""
    torch = b.torch
    import torch.distributed as dist

    ctx = b.ctx
    x = torch.zeros(256, device=ctx.device)
    res: dict[str, float] = {}
    M = 50

    def timed(call: Callable[[], Any]) -> float:
        ts = []
        for _ in range(8):
            b.sync()
            ctx.barrier()
            if b.cuda:
                torch.cuda._sleep(20_000_000)
            t0 = time.perf_counter()
            ws = [call() for _ in range(M)]
            ts.append((time.perf_counter() - t0) / M)
            for w in ws:
                for x_ in (w if isinstance(w, list) else [w]):
                    if x_ is not None:
                        x_.wait()
            b.sync()
        return float(statistics.median(ts[1:])) * 1e6

    a, bb, c = tiny_mm(b)

    def mm() -> None:
        torch.matmul(a, bb, out=c)

    def ar() -> Any:
        return dist.all_reduce(x, async_op=not b.cuda)

    res["collective_loop_us"] = timed(ar)
    res["matmul_loop_us"] = timed(mm)

    def pair() -> Any:
        mm()
        return ar()

    res["mixed_pair_us"] = timed(pair)  # collective_after_kernel_us (settle_costs: less the settled matmul)
    res["eager_per_collective_us"] = res["collective_loop_us"]
    res.update(tp_layer_costs(b) if b.cuda else tp_layer_costs(b, reps=3, pairs=4))  # a CPU GEMV: ~2-9 ms
    from executor.clock import IterationClock

    # the first calls as the programs make them: after the iteration start, the switch to the iteration's stream
    # timed with the first call (_first_call_times)
    start = (IterationClock(ctx.device, ctx.world, ctx.ctrl), torch.cuda.Stream(device=ctx.device) if b.cuda else None)
    first_mm, first_ar = _first_call_times(b, [mm, ar], 8, start=start)
    res["first_op_extra_us"] = max(0.0, statistics.median(first_mm[1:]) * 1e6 - res["matmul_loop_us"])
    res["first_collective_extra_us"] = max(0.0, statistics.median(first_ar[1:]) * 1e6 - res["eager_per_collective_us"])
    tp_fields(res)
    if b.cuda:
        res.update(_cold_first_calls(b, mm, ar, first_mm, first_ar, start))
    if ctx.world >= 2:
        r, n = ctx.rank, ctx.world
        if n % 2 == 0:
            peer = r + 1 if r % 2 == 0 else r - 1
            fn = dist.isend if r % 2 == 0 else dist.irecv
            res["p2p_call_us"] = timed(lambda: fn(x, peer))
        nxt, prv = (r + 1) % n, (r - 1) % n
        y = torch.empty_like(x)
        res["batch_p2p_call_us"] = timed(
            lambda: dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, y, prv)]))
    return res


#: the GEMV of :func:`tp_layer_costs`: fp32 1×K @ K×N, tp_allreduce_graph's linear at world 1 (tpw_eager's shape)
TP_GEMV = (2048, 2048)
#: layers :func:`tp_layer_costs` times after each iteration start, and the warm-up layers it writes
WARMUP_LAYERS, WARMUP_KEPT = 8, 3


def tp_layer_costs(b: Any, reps: int = 7, pairs: int = 50) -> dict[str, float]:
    """Host µs of tensor-parallel layers as a schedule calls them: a GEMV (``torch.matmul`` of fp32 1×K and K×N,
    :data:`TP_GEMV`, into a preallocated output) then ``dist.all_reduce`` of its output, the GPU idle (no sleep
    kernel queued: the executor's host-bound calls reach an idle GPU).

    * ``gemv_loop_us``: the GEMV alone, ``pairs`` calls back to back; ``gemv_pair_us``: GEMV + all_reduce
      alternating, per pair (each the median of ``reps`` loops after a synchronize). ``collective_after_kernel_us``
      is then their difference (:func:`settle_costs`): the all_reduce after the schedule's kind of kernel, where
      ``mixed_pair_us`` pairs it with the 64×64 matmul (which cost 10.9 µs alone on one H100 against the
      executor's GEMV 9.0 beside an all_reduce; docs/validation.md, "the so_seg reference, and the warm-up and the
      pair of the host-bound tp layers").
    * ``warmup_layer{k}_us`` (k = 1 .. :data:`WARMUP_LAYERS`): the k-th layer's host time after the executor's own
      iteration start (:meth:`executor.clock.IterationClock.start`: synchronize, clock all-gather, aligned start,
      anchor; on CUDA the layers on a stream of their own that waits for the anchor, as the executor's streams, the
      ``torch.cuda.set_stream`` to it in layer 1's time, as :func:`_first_call_times` times it with the first call),
      median over ``reps`` iterations. :func:`settle_costs` turns the first :data:`WARMUP_KEPT` into
      ``warmup_pair{k}_extra_us`` (over the steady pair), the profile's ``launch.collective_warmup_us``.

    On CPU ranks (gloo, any world) the same calls, the all_reduce asynchronous and waited for at the end
    (:func:`comm_host_costs` runs fewer there: ``reps`` 3, ``pairs`` 4). On a GPU the calls are host-bound: 7 × 8
    layers and 2 × 7 loops of 50 calls of ~10-30 µs of host each, about 25 ms, plus 21 synchronizes.
    """
    torch = b.torch
    import torch.distributed as dist

    from executor.clock import IterationClock

    ctx = b.ctx
    k, n = TP_GEMV
    x = torch.randn(1, k, device=ctx.device)
    w = torch.randn(k, n, device=ctx.device) / k
    y = torch.empty(1, n, device=ctx.device)

    def gemv() -> None:
        torch.matmul(x, w, out=y)

    def layer() -> Any:
        gemv()
        return dist.all_reduce(y, async_op=not b.cuda)

    def loop(call: Callable[[], Any]) -> float:
        ts = []
        for _ in range(reps):
            b.sync()
            ctx.barrier()
            t0 = time.perf_counter()
            ws = [call() for _ in range(pairs)]
            ts.append((time.perf_counter() - t0) / pairs)
            for w_ in ws:
                if w_ is not None:
                    w_.wait()
        b.sync()
        return float(statistics.median(ts)) * 1e6

    res = {"gemv_loop_us": loop(gemv), "gemv_pair_us": loop(layer)}
    clock = IterationClock(ctx.device, ctx.world, ctx.ctrl)
    # CUDA: the layers on a stream of their own that waits for the anchor, as the executor's streams do
    st = [torch.cuda.Stream(device=ctx.device)] if b.cuda else []
    per_layer: list[list[float]] = [[] for _ in range(WARMUP_LAYERS)]
    for _ in range(reps):
        clock.start(st)
        works = []
        t = time.perf_counter()
        if st:  # inside layer 1, as both programs switch to their stream inside the timed window (_first_call_times)
            torch.cuda.set_stream(st[0])
        for j in range(WARMUP_LAYERS):
            works.append(layer())
            t2 = time.perf_counter()
            per_layer[j].append(t2 - t)
            t = t2
        if st:
            torch.cuda.set_stream(torch.cuda.default_stream(ctx.device))
        for w_ in works:
            if w_ is not None:
                w_.wait()
        b.sync()
    for j, ts in enumerate(per_layer):
        res[f"warmup_layer{j + 1}_us"] = float(statistics.median(ts)) * 1e6
    return res


def _first_call_times(b: Any, calls: list[Callable[[], Any]], reps: int, sleep_cycles: int = 0,
                      start: tuple[Any, Any] | None = None) -> list[list[float]]:
    """Host seconds of each of ``calls``, run in order after a synchronize and barrier (and, with
    ``sleep_cycles``, after the host waited for a sleep kernel that long): one list per call over ``reps``
    repetitions; the works a call returns are waited for after the last call.

    ``start``: ``(clock, stream)``, an :class:`executor.clock.IterationClock` and the stream the calls go to (None on
    CPU ranks). Each repetition then starts as ``schedsim execute``'s iterations and the hand-written references'
    do: ``clock.start([stream])`` (synchronize, clock all-gather and aligned start at world > 1, anchor; the stream
    waits for the anchor) in place of the synchronize and barrier (after the sleep kernel, which its synchronize
    waits for), then ``torch.cuda.set_stream(stream)`` timed with the first call (both programs switch to their
    stream inside the timed window: the lean loop's first step, the references' ``issue()``; rule host-issue
    charges a rank's first op no stream switch), the default stream restored after the calls."""
    torch = b.torch
    clock, stream = start if start is not None else (None, None)
    out: list[list[float]] = [[] for _ in calls]
    for _ in range(reps):
        if clock is None:
            b.sync()
            b.ctx.barrier()
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
            if clock is None:
                b.sync()  # the host waits for the GPU, as at the end of a GPU-bound iteration
        if clock is not None:
            clock.start([stream] if stream is not None else [])  # its synchronize waits for the sleep kernel
        works = []
        t = time.perf_counter()
        if stream is not None:
            torch.cuda.set_stream(stream)
        for j, f in enumerate(calls):
            w = f()
            t2 = time.perf_counter()
            out[j].append(t2 - t)
            t = t2
            if w is not None:
                works.append(w)
        if stream is not None:
            torch.cuda.set_stream(torch.cuda.default_stream(b.ctx.device))
        for w in works:
            w.wait()
    b.sync()
    return out


#: GPU cycles of the sleep kernel before each cold first call (about 2 ms on an H200 at 1.98 GHz: the host's
#: wait at the end of a GPU-bound iteration in [evidence: dispatch-order], 1.2-2.6 ms)
COLD_SLEEP_CYCLES = 4_000_000
#: the three kinds of ``launch.cold_first_call_us`` and the keys :func:`comm_host_costs` gives them
COLD_KINDS = {"kernel": "cold_kernel_extra_us", "collective": "cold_collective_extra_us",
              "elementwise": "cold_elementwise_extra_us"}


def _cold_first_calls(b: Any, mm: Callable[[], Any], ar: Callable[[], Any], first_mm: list[float],
                      first_ar: list[float], start: tuple[Any, Any] | None = None) -> dict[str, float]:
    """``launch.cold_first_call_us`` (as :data:`COLD_KINDS` keys, µs): the first add, matmul and all_reduce after
    the host waited ~2 ms for the GPU (a sleep kernel, then a synchronize), less the same first calls after a
    synchronize and barrier alone (``first_mm`` / ``first_ar``, seconds; both started alike, ``start`` of
    :func:`_first_call_times`) and less an add's steady call. What
    ``schedsim execute`` measures at the start of an iteration after a GPU-bound one (one H200,
    ``meta.host_call_end_s``: kernel +19-33 µs, collective +24-59, elementwise +11-20). CUDA only."""
    torch = b.torch
    x = torch.zeros(1024, device=b.ctx.device)
    y = torch.ones(1024, device=b.ctx.device)
    z = torch.empty_like(x)

    def add() -> None:
        torch.add(x, y, out=z)

    steady_add = _loop_us(b, add, n=200, reps=5)
    c_add, c_mm, c_ar = _first_call_times(b, [add, mm, ar], 6, COLD_SLEEP_CYCLES, start)
    cold = {"elementwise": c_add, "kernel": c_mm, "collective": c_ar}
    warm = {"elementwise": steady_add * 1e-6, "kernel": statistics.median(first_mm[1:]),
            "collective": statistics.median(first_ar[1:])}
    return {COLD_KINDS[k]: max(0.0, (statistics.median(v[1:]) - warm[k]) * 1e6) for k, v in cold.items()}


def launch_fields(costs: dict[str, float]) -> dict[str, Any]:
    """The :data:`HOST_FIELDS` that ``costs`` has, rounded to 0.01 µs: the profile's ``launch:`` values;
    ``cold_first_call_us`` from the :data:`COLD_KINDS` keys it has; ``collective_warmup_us`` from its
    ``warmup_pair{k}_extra_us`` (:func:`settle_costs`), k = 1 .. :data:`WARMUP_KEPT`, where it has them all."""
    out: dict[str, Any] = {k: round(float(costs[k]), 2) for k in HOST_FIELDS if k in costs}
    cold = {kind: round(float(costs[key]), 2) for kind, key in COLD_KINDS.items() if key in costs}
    if cold:
        out["cold_first_call_us"] = cold
    warm = [round(float(costs[f"warmup_pair{j}_extra_us"]), 2) for j in range(1, WARMUP_KEPT + 1)
            if f"warmup_pair{j}_extra_us" in costs]
    if len(warm) == WARMUP_KEPT:
        out["collective_warmup_us"] = warm
    return out


def with_host_costs(profile: Any, costs: dict[str, float]) -> Any:
    """``profile`` (a :class:`schedsim.hardware.profile.HardwareProfile`) with its ``launch:`` host costs replaced
    by ``costs`` (a process's own, ``meta.host_costs_us`` of ``execute --measure-host``; :func:`launch_fields`),
    named ``<name>+host_of_this_run``, its source saying so."""
    from schedsim.hardware.profile import HardwareProfile

    d = profile.model_dump()
    d["name"] = f"{d['name']}+host_of_this_run"
    d["launch"].update(launch_fields(costs))
    d["launch"]["source"] = (f"{d['launch']['source']}; host costs per call replaced by those measured in the "
                             "run's rank 0 process (--measure-host, meta.host_costs_us)")
    return HardwareProfile.model_validate(d)


def measure_here(ctx: Any) -> dict[str, float] | None:
    """Every rank, together: the host costs of *this* process, as ``schedsim calibrate`` measures them.

    Rank 0 runs :func:`host_costs` (the others wait), then every rank :func:`comm_host_costs` (collective
    calls, so all ranks take part). Takes about 1–3 s (one H200 and gloo CPU ranks).

    Returns
    -------
    dict or None
        On rank 0, ``{kind: µs per call}`` (the :data:`HOST_FIELDS` kinds this machine has, plus the loop
        figures they come from, e.g. ``collective_loop_us``); ``None`` on the other ranks.

    Raises
    ------
    RuntimeError
        A collective of :func:`comm_host_costs` failed (a rank died, a timeout of the process group).
    """
    from executor.calibrate_bench import _Bench

    b = _Bench(ctx, 1)
    res = host_costs(b, lambda _msg: None) if ctx.rank == 0 else {}
    ctx.barrier()
    comm = comm_host_costs(b)
    if ctx.rank != 0:
        return None
    res.update(comm)
    return settle_costs(res)  # the comm loops time the reference call once more (matmul_loop_us)


# the torchrun/elastic variables that would make a child process join the parent's process group
_LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def fresh_process_costs(device: str, n: int, log: Callable[[str], None], timeout_s: float = 60.0,
                        gemms: Sequence[tuple[str, int, int, int]] = ()) -> list[dict[str, float]]:
    """:func:`host_costs` measured in ``n`` fresh processes, one after another (with ``gemms``' call ratios).

    Each is ``python -m executor.calibrate_host --device DEVICE`` with the launcher's variables
    (``RANK``, ``MASTER_ADDR``, …) removed, so it is a world of one on ``cuda:0`` of the visible devices
    (or the CPU), and prints its figures as one JSON line. A process that fails or outlasts ``timeout_s``
    seconds is logged and left out.

    Returns
    -------
    list of dict
        One ``{kind: µs per call}`` per process that finished, in start order (possibly empty).
    """
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_ENV and not k.startswith("TORCHELASTIC_")}
    root = str(Path(__file__).resolve().parent.parent)  # the directory holding the executor package
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    out: list[dict[str, float]] = []
    for i in range(n):
        try:
            shapes = [a for dt, m, n_, k in gemms for a in ("--gemm", f"{dt}:{m}x{n_}x{k}")]
            p = subprocess.run([sys.executable, "-m", "executor.calibrate_host", "--device", device, *shapes], env=env,
                               capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            log(f"[launch] fresh process {i + 1}/{n}: no result within {timeout_s:.0f} s, left out")
            continue
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            log(f"[launch] fresh process {i + 1}/{n} failed (exit {p.returncode}), left out: "
                f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
            continue
        try:
            costs = {str(k): float(v) for k, v in json.loads(lines[-1]).items()}
        except (ValueError, TypeError, AttributeError) as e:
            log(f"[launch] fresh process {i + 1}/{n}: unreadable result ({e}), left out")
            continue
        log(f"[launch] fresh process {i + 1}/{n}: " + ", ".join(f"{k} {v:.2f}" for k, v in costs.items()))
        out.append(costs)
    return out


#: :func:`comm_host_costs` figures that do not depend on the communicator (a matmul's or an add's host call): a
#: fresh process (a world of one) measures them as a rank of any world would; the collective ones
#: (``eager_per_collective_us``, ``first_collective_extra_us``, ``cold_collective_extra_us``, p2p) come from a fresh
#: process only when the calibration itself runs one rank (:func:`fresh_comm_fields`)
WORLD_FREE_COMM = ("matmul_loop_us", "first_op_extra_us", "cold_kernel_extra_us", "cold_elementwise_extra_us")


def fresh_comm_fields(comm: dict[str, float], fresh_median: dict[str, float], world: int) -> dict[str, float]:
    """The :func:`comm_host_costs` figures the calibration keeps (µs per call): those of ``fresh_median`` (the median
    over fresh processes, :func:`median_costs`) where a fresh process measures the same thing (every figure at
    ``world`` 1; else :data:`WORLD_FREE_COMM`), the calibrating process's own ``comm`` otherwise.

    Why: the first calls after the GPU went idle, timed in the calibrating process at its start, ran 27.6 µs more
    than steady for a matmul on one H100, against 3.6-7.8 µs in the fresh processes of the same machine and
    session, whose own figures predicted the host-bound cases within 7 % (docs/validation.md, "The host figures
    of fresh processes").

    >>> fresh_comm_fields({"first_op_extra_us": 4.0, "eager_per_collective_us": 20.0},
    ...                   {"first_op_extra_us": 6.5, "eager_per_collective_us": 19.0}, world=2)
    {'first_op_extra_us': 6.5, 'eager_per_collective_us': 20.0}
    >>> fresh_comm_fields({"first_op_extra_us": 4.0, "eager_per_collective_us": 20.0},
    ...                   {"first_op_extra_us": 6.5, "eager_per_collective_us": 19.0}, world=1)
    {'first_op_extra_us': 6.5, 'eager_per_collective_us': 19.0}
    """
    return {k: (fresh_median[k] if k in fresh_median and (world == 1 or k in WORLD_FREE_COMM) else v)
            for k, v in comm.items()}


def median_costs(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per kind, the median over the processes that measured it (µs per call).

    ``executor_extra_per_op_us`` is recomputed from the medians of the lean loop and of the probe by hand
    (≥ 0), so it stays their difference.

    Why field by field, though the fields may then come from different processes: one process's figures do not
    move together (a spell slows one loop of a process, not all), and taking every field from one process (the
    median or the fastest by ``eager_per_op_us``) or rescaling each process by one speed factor: each made some
    case worse by more than 2 points in the replay of at least one of four recorded H100 sessions, and none did
    better on all four (docs/validation.md, "fresh host processes, one rule for all fields?";
    ``benchmarks/accuracy/replay_runs.py --host-rules``).

    >>> median_costs([{"eager_per_op_us": 12.0}, {"eager_per_op_us": 20.0}, {"eager_per_op_us": 14.0}])
    {'eager_per_op_us': 14.0}
    """
    keys = dict.fromkeys(k for r in runs for k in r)
    res = {k: float(statistics.median([r[k] for r in runs if k in r])) for k in keys}
    if "executor_lean_per_op_us" in res and "by_hand_per_op_us" in res:
        res["executor_extra_per_op_us"] = max(0.0, res["executor_lean_per_op_us"] - res["by_hand_per_op_us"])
    return res


def _fresh_costs(b: Any, gemms: Sequence[tuple[str, int, int, int]]) -> dict[str, float]:
    """A fresh process's figures (:func:`main`): :func:`host_costs` and :func:`comm_host_costs` (a world of one: the
    call-side figures, :data:`WORLD_FREE_COMM`, are the ones to use), settled."""
    res = host_costs(b, lambda _msg: None, gemms)
    res.update(comm_host_costs(b))
    return settle_costs(res)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m executor.calibrate_host [--device cuda|cpu]``: print :func:`host_costs` and
    :func:`comm_host_costs` (a world of one) as one JSON line, measured on the thread ``execute`` issues from
    (:func:`executor.dist.on_issuing_thread`: the same depth of Python stack at each call)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m executor.calibrate_host", description=main.__doc__)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--gemm", action="append", default=[], type=parse_gemm,
                    help="DTYPE:MxNxK whose call ratio to measure (repeatable)")
    args = ap.parse_args(argv)
    gemms = list(args.gemm)
    from executor.calibrate_bench import _Bench
    from executor.dist import setup_dist
    from schedsim.errors import SchedsimError

    try:
        ctx = setup_dist("auto" if args.device != "cpu" else "gloo", args.device, 60.0, [(0,)])
    except SchedsimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        from executor.dist import on_issuing_thread

        b = _Bench(ctx, 1)
        res = on_issuing_thread(functools.partial(_fresh_costs, b, gemms), ctx.device if ctx.cuda else None)
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
