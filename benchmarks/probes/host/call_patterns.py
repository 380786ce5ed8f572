"""Host cost of PyTorch call patterns on one GPU, section by section (plain PyTorch, no schedsim).

Follow-up probes of the 2xH200 accuracy pass ([evidence: accuracy-h200], "Findings that are not modelled yet")
and of the one-GPU H100 suite ([evidence: h100-suite]).

``--only`` picks the sections (default ``host coresidence``); each prints
one JSON line as it ends (``{"probe": NAME, "device", "torch", ...}``), and ``--out`` also writes them all to one
JSON file:

    python benchmarks/probes/host/call_patterns.py --out probe_host_calls.json     # ~1 min on an H200
    python benchmarks/probes/host/call_patterns.py --only cold_wait                # ~10 s
    python benchmarks/probes/host/call_patterns.py --only after_profiler           # ~10 s

* ``host``: host µs per call, loops of 200 with the GPU kept busy (``torch.cuda._sleep`` first):
  ``torch.cuda.set_stream`` (what ``schedsim execute``'s lean loop and the hand-written references call:
  ``launch.stream_switch_us`` of ``h200x2`` is 0 until this is measured), ``with torch.cuda.stream(s)``,
  ``torch.matmul(out=)`` 32x1024x1024 bf16, ``copy_`` of 128 KiB device to device, event record + wait.
* ``mixed``: the same calls in small_ops_graph's order (matmul, copy_, set_stream, wait_event, matmul,
  set_stream back) per layer, host µs per layer, against the sum of the looped costs: whether a loop of one
  call underestimates a mixed sequence (small_ops eager ran 30 % above run2's loop costs).
* ``coresidence``: fp32 2048x1024x8192 GEMMs (allgather_mm chunks=8), 16 of them on one stream against 2 x 8
  and 8 x 2 on 2 and 8 streams: total time, so the concurrent throughput gain over one stream (0.654 against
  0.708 ms per GEMM in the run) is measured outside the schedule; ``--kineto`` also writes a trace whose
  kernel events carry grid, registers per thread and shared memory (the GEMM's occupancy).
* ``cold_wait`` (issue 39: calibrate's ``cold_first_call_us`` read kernel +94 µs and +35 µs on two H100 machines,
  where ``schedsim execute``'s first matmul of a GPU-bound iteration on the same machines paid about +12 µs over
  its steady call): does the way the host waits for the GPU set what its first calls cost after the wait?
  ``schedsim calibrate`` waits for a sleep kernel with ``torch.cuda.synchronize()``
  (``executor.calibrate_host._first_call_times``); ``schedsim execute`` and the hand-written references spin on
  ``Event.query()`` (``executor.clock.wait_events``). For each wait (``sync`` / ``spin``) and sleep length (about
  0.35 and 2 ms), interleaved rep by rep: the host µs of the first ``torch.add`` and the ``torch.matmul`` after it
  (64×64 fp32) right after the wait, against the same two calls after a plain synchronize without a sleep
  (``warm``); medians of 25 reps.
* ``after_profiler`` (issue 39: ``execute --measure-host`` ran after the profiled iterations and read 13.3 µs per
  matmul call where the same process had issued at 10.3): does a ``torch.profiler`` session leave the process's
  launches slower? Host µs per ``torch.matmul(a, b, out=c)`` (64×64 fp32) over loops of 200 calls with the GPU
  kept busy (as ``executor.calibrate_host._loop_us`` measures ``eager_per_op_us``): before any profiler, after a
  ``torch.profiler.profile(activities=[CPU, CUDA])`` session of 3 such loops, then again 2 s later. It runs last
  whatever the order given, since the session it opens slows every later call of the process.

* ``idle_distinct`` (issue 39: on one H100, 2026-12-06, the eager small_ops_graph iteration's calls cost ~1.2-1.4x
  calibrate's looped figures in every process that ran it, execute and hand-written alike): host µs per layer of
  small_ops_graph's eager sequence (set_stream, matmul 32x1024x1024 bf16, event record, 128 KiB copy_,
  set_stream, wait_event, matmul), with one shared set of tensors or each layer its own (as a model's layers and
  the executor's ops are), with the GPU kept busy (a sleep kernel ahead, as calibrate measures) or idle (each
  layer issued to a drained GPU, as a host-bound run issues); and the 64x64 matmul loop (``eager_per_op_us``)
  busy and idle. Medians of 9 loops of 64 layers (200 calls).

On CPU it prints what it needs and exits 0 (the script itself is checked there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

N = 200


def _loop_us(torch, fn, n: int = N, reps: int = 5, sleep_cycles: int = 40_000_000, skip: int = 0) -> float:
    """Host µs per call of ``fn`` over ``reps`` loops of ``n`` calls, each issued while a ``sleep_cycles`` sleep
    kernel keeps the GPU busy; the median over the loops after the first ``skip``."""
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep_cycles)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(ts[skip:]), 3)


def host(torch) -> dict[str, float]:
    dev = torch.device("cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(32, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    c = torch.empty(32, 1024, device=dev, dtype=torch.bfloat16)
    x, y = torch.empty(32768, device=dev), torch.empty(32768, device=dev)
    e = torch.cuda.Event()
    flip = [s1, s2]

    def set_stream() -> None:
        flip.reverse()
        torch.cuda.set_stream(flip[0])

    def ctx_stream() -> None:
        flip.reverse()
        with torch.cuda.stream(flip[0]):
            pass

    def wait() -> None:
        e.record(s1)
        s2.wait_event(e)

    res = {"set_stream_us": _loop_us(torch, set_stream), "with_stream_us": _loop_us(torch, ctx_stream),
           "matmul_out_us": _loop_us(torch, lambda: torch.matmul(a, w, out=c)),
           "copy_d2d_us": _loop_us(torch, lambda: y.copy_(x)), "event_wait_us": _loop_us(torch, wait)}
    torch.cuda.set_stream(torch.cuda.default_stream())
    main, aux = s1, s2
    ev = [torch.cuda.Event() for _ in range(64)]

    def layer() -> None:
        for i in range(64):
            torch.cuda.set_stream(main)
            torch.matmul(a, w, out=c)
            ev[i].record(main)
            y.copy_(x)
            torch.cuda.set_stream(aux)
            aux.wait_event(ev[i])
            torch.matmul(a, w, out=c)

    res["mixed_per_layer_us"] = round(_loop_us(torch, layer, n=1, reps=9) / 64, 3)
    res["looped_sum_per_layer_us"] = round(2 * res["matmul_out_us"] + res["copy_d2d_us"] + 2 * res["set_stream_us"]
                                           + res["event_wait_us"], 3)
    torch.cuda.set_stream(torch.cuda.default_stream())
    return res


def coresidence(torch, kineto: str | None) -> dict[str, float]:
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(2048, 8192, device=dev)
    b = torch.randn(8192, 1024, device=dev)
    outs = [torch.empty(2048, 1024, device=dev) for _ in range(16)]
    res = {}
    for ns in (1, 2, 8):
        streams = [torch.cuda.Stream() for _ in range(ns)]
        ts = []
        for _ in range(7):
            torch.cuda.synchronize()
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for s in streams:
                s.wait_stream(torch.cuda.current_stream())
            for i in range(16):
                with torch.cuda.stream(streams[i % ns]):
                    torch.matmul(a, b, out=outs[i])
            for s in streams:
                torch.cuda.current_stream().wait_stream(s)
            t1.record()
            torch.cuda.synchronize()
            ts.append(t0.elapsed_time(t1) / 16)
        res[f"ms_per_gemm_{ns}_streams"] = round(statistics.median(ts), 4)
    if kineto:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(4):
                torch.matmul(a, b, out=outs[i])
            torch.cuda.synchronize()
        prof.export_chrome_trace(kineto)
    return res


def cold_wait(torch) -> dict[str, dict[str, float]]:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from executor.clock import wait_events

    dev = torch.device("cuda")
    a, b, c = (torch.rand(64, 64, device=dev) for _ in range(3))
    x, y, z = (torch.rand(1024, device=dev) for _ in range(3))

    def first_calls(wait: str, cycles: int) -> tuple[float, float]:
        torch.cuda.synchronize()
        if cycles:
            torch.cuda._sleep(cycles)
            if wait == "sync":
                torch.cuda.synchronize()
            else:
                ev = torch.cuda.Event()
                ev.record()
                wait_events([ev], how="spin")
        t0 = time.perf_counter()
        torch.add(x, y, out=z)
        t1 = time.perf_counter()
        torch.matmul(a, b, out=c)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) * 1e6, (t2 - t1) * 1e6

    for _ in range(20):  # warm-up
        first_calls("sync", 0)
    res: dict[str, list[tuple[float, float]]] = {}
    for _ in range(25):
        for key, wait, cycles in [("warm", "sync", 0), ("sync_0.35ms", "sync", 700_000),
                                  ("spin_0.35ms", "spin", 700_000), ("sync_2ms", "sync", 4_000_000),
                                  ("spin_2ms", "spin", 4_000_000)]:
            res.setdefault(key, []).append(first_calls(wait, cycles))
    return {key: {"add_us": round(statistics.median(t[0] for t in v), 2),
                  "matmul_us": round(statistics.median(t[1] for t in v), 2)} for key, v in res.items()}


def after_profiler(torch) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device("cuda")
    a, b, c = (torch.rand(64, 64, device=dev) for _ in range(3))

    def loop_us(reps: int = 9) -> float:  # the first rep of each loop is dropped
        return _loop_us(torch, lambda: torch.matmul(a, b, out=c), reps=reps, sleep_cycles=20_000_000, skip=1)

    for _ in range(3):
        loop_us(reps=2)
    before = loop_us()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        for _ in range(3):
            loop_us(reps=2)
    after = loop_us()
    time.sleep(2.0)
    return {"matmul_call_us_before": before, "after_profiler": after, "after_2s": loop_us()}


def idle_distinct(torch) -> dict[str, float]:
    dev = torch.device("cuda")
    L = 64
    main, aux = torch.cuda.Stream(), torch.cuda.Stream()

    def bf(*shape: int) -> object:
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16)

    shared = (bf(32, 1024), bf(1024, 1024), torch.empty(32, 1024, device=dev, dtype=torch.bfloat16))
    own = [(bf(32, 1024), bf(1024, 1024), torch.empty(32, 1024, device=dev, dtype=torch.bfloat16))
           for _ in range(2 * L)]
    src = [torch.empty(32768, device=dev) for _ in range(L)]
    dst = [torch.empty(32768, device=dev) for _ in range(L)]
    ev = [torch.cuda.Event() for _ in range(L)]

    def layers(distinct: bool) -> None:
        for i in range(L):
            x, w, c = own[2 * i] if distinct else shared
            torch.cuda.set_stream(main)
            torch.matmul(x, w, out=c)
            ev[i].record(main)
            (dst[i] if distinct else dst[0]).copy_(src[i] if distinct else src[0])
            torch.cuda.set_stream(aux)
            aux.wait_event(ev[i])
            x, w, c = own[2 * i + 1] if distinct else shared
            torch.matmul(x, w, out=c)
        torch.cuda.set_stream(torch.cuda.default_stream())

    def idle_us(fn: object, n: int, reps: int = 9) -> float:  # GPU drained before each loop, no sleep ahead
        ts = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()  # type: ignore[operator]
            ts.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
        return round(statistics.median(ts[1:]), 3)

    res: dict[str, float] = {}
    for distinct in (False, True):
        tag = "distinct" if distinct else "shared"
        for _ in range(2):
            layers(distinct)
        res[f"layer_busy_{tag}_us"] = round(_loop_us(torch, lambda d=distinct: layers(d), n=1, reps=9, skip=1) / L, 3)
        res[f"layer_idle_{tag}_us"] = round(idle_us(lambda d=distinct: layers(d), 1) / L, 3)
    a, b, c = (torch.rand(64, 64, device=dev) for _ in range(3))
    res["matmul64_busy_us"] = _loop_us(torch, lambda: torch.matmul(a, b, out=c), reps=9, skip=1)
    res["matmul64_idle_us"] = idle_us(lambda: torch.matmul(a, b, out=c), N)
    return res


#: ``--only`` sections in the order they run (after_profiler last: its profiler session slows later calls), and
#: the ``probe`` name of each one's JSON line (those of the former one-section scripts kept)
SECTIONS = {"host": "host", "coresidence": "coresidence", "cold_wait": "cold_wait", "idle_distinct": "idle_distinct",
            "after_profiler": "profiler_host"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="also write every section's result to this JSON file")
    ap.add_argument("--kineto", default=None, help="also write a Kineto trace of the fp32 GEMM here (coresidence)")
    ap.add_argument("--only", nargs="+", choices=list(SECTIONS), default=["host", "coresidence"],
                    help="sections to run (default: host coresidence)")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("probe_host_calls: needs a CUDA GPU (CUDA events, torch.cuda._sleep); nothing measured")
        return 0
    runs = {"host": lambda: host(torch), "coresidence": lambda: coresidence(torch, a.kineto),
            "cold_wait": lambda: cold_wait(torch), "idle_distinct": lambda: idle_distinct(torch),
            "after_profiler": lambda: after_profiler(torch)}
    out: dict[str, object] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for name in (s for s in SECTIONS if s in a.only):
        out[name] = res = runs[name]()
        print(json.dumps({"probe": SECTIONS[name], "device": out["gpu"], "torch": out["torch"], **res}), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
