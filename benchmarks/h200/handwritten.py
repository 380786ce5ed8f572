"""Hand-written PyTorch equivalents of the single-GPU schedules, for the executor-overhead comparison.

No schedsim: plain streams, events and preallocated tensors, written the way a
person would write each schedule by hand. The kernels are the ones ``schedsim
execute`` materialises for the same YAML (``torch.matmul(out=)``; a ``compute``
op with ``bytes`` is an elementwise add moving that many bytes; ``memcpy`` is
``copy_(non_blocking=True)`` with pinned host memory), so the only difference
is the executor's own issue path. Each iteration: synchronise, record a start
event, issue, record one end event per stream; makespan = latest end − start;
median of ``--iters`` after ``--warmup``.

    python3 benchmarks/h200/handwritten.py --out handwritten.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

import torch

DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def copy_op(nbytes: int, dev: Any) -> Callable[[], Any]:
    third = max(1, nbytes // 3)
    a = torch.randint(0, 4, (third,), dtype=torch.uint8, device=dev)
    b = torch.randint(0, 4, (third,), dtype=torch.uint8, device=dev)
    c = torch.empty(third, dtype=torch.uint8, device=dev)
    return lambda: torch.add(a, b, out=c)


def mm_op(m: int, n: int, k: int, dt: Any, dev: Any) -> Callable[[], Any]:
    a = torch.rand(m, k, device=dev).to(dt)
    b = torch.rand(k, n, device=dev).to(dt)
    c = torch.empty(m, n, device=dev, dtype=dt)
    return lambda: torch.matmul(a, b, out=c)


def build_matmul_streams(dev: Any, gathered: int = 2, M: int = 8192, K: int = 8192, N: int = 8192, chunks: int = 4,
                         dtype: str = "fp32") -> Callable[[], list[Any]]:
    dt = DT[dtype]
    torch.backends.cuda.matmul.allow_tf32 = False
    es = dt.itemsize
    zero = copy_op(gathered * M * N * es, dev)
    mr, nc = M * gathered // chunks, N // chunks
    mms = [[mm_op(mr, nc, K, dt, dev) for _ in range(chunks)] for _ in range(chunks)]
    adds = [[copy_op(3 * mr * nc * es, dev) for _ in range(chunks)] for _ in range(chunks)]
    sz = torch.cuda.Stream()
    ss = [torch.cuda.Stream() for _ in range(chunks)]

    def it() -> list[Any]:
        with torch.cuda.stream(sz):
            zero()
        for i in range(chunks):
            with torch.cuda.stream(ss[i]):
                for j in range(chunks):
                    mms[i][j]()
                    adds[i][j]()
        return [sz] + ss

    return it


def build_offload(dev: Any, chunks: int = 8, rows: int = 2048, K: int = 8192, N: int = 8192,
                  dtype: str = "bf16") -> Callable[[], list[Any]]:
    dt = DT[dtype]
    es = dt.itemsize
    h_in = [torch.empty(rows * K * es, dtype=torch.uint8).pin_memory() for _ in range(chunks)]
    d_in = [torch.empty(rows * K * es, dtype=torch.uint8, device=dev) for _ in range(chunks)]
    d_out = [torch.empty(rows * N * es, dtype=torch.uint8, device=dev) for _ in range(chunks)]
    h_out = [torch.empty(rows * N * es, dtype=torch.uint8).pin_memory() for _ in range(chunks)]
    mms = [mm_op(rows, N, K, dt, dev) for _ in range(chunks)]
    s_h2d, s_mm, s_d2h = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    ev_in = [torch.cuda.Event() for _ in range(chunks)]
    ev_mm = [torch.cuda.Event() for _ in range(chunks)]

    def it() -> list[Any]:
        for i in range(chunks):
            with torch.cuda.stream(s_h2d):
                d_in[i].copy_(h_in[i], non_blocking=True)
                ev_in[i].record()
            with torch.cuda.stream(s_mm):
                s_mm.wait_event(ev_in[i])
                mms[i]()
                ev_mm[i].record()
            with torch.cuda.stream(s_d2h):
                s_d2h.wait_event(ev_mm[i])
                h_out[i].copy_(d_out[i], non_blocking=True)
        return [s_h2d, s_mm, s_d2h]

    return it


def build_small_ops_tight(dev: Any, layers: int = 64, T: int = 32, H: int = 1024,
                          dtype: str = "bf16") -> Callable[[], list[Any]]:
    """The same ops with the cheapest host path: torch.cuda.set_stream instead of context managers."""
    dt = DT[dtype]
    es = dt.itemsize
    ups = [mm_op(T, H, H, dt, dev) for _ in range(layers)]
    acts = [copy_op(2 * T * H * es, dev) for _ in range(layers)]
    sides = [mm_op(T, H, H, dt, dev) for _ in range(layers)]
    join = copy_op(2 * T * H * es, dev)
    main, aux = torch.cuda.Stream(), torch.cuda.Stream()
    ev_up = [torch.cuda.Event() for _ in range(layers)]
    ev_last = torch.cuda.Event()
    set_stream = torch.cuda.set_stream

    def it() -> list[Any]:
        prev = torch.cuda.current_stream()
        for i in range(layers):
            set_stream(main)
            ups[i]()
            ev_up[i].record(main)
            acts[i]()
            set_stream(aux)
            aux.wait_event(ev_up[i])
            sides[i]()
        ev_last.record(aux)
        set_stream(main)
        main.wait_event(ev_last)
        join()
        set_stream(prev)
        return [main, aux]

    return it


def build_small_ops(dev: Any, layers: int = 64, T: int = 32, H: int = 1024,
                    dtype: str = "bf16") -> Callable[[], list[Any]]:
    dt = DT[dtype]
    es = dt.itemsize
    ups = [mm_op(T, H, H, dt, dev) for _ in range(layers)]
    acts = [copy_op(2 * T * H * es, dev) for _ in range(layers)]
    sides = [mm_op(T, H, H, dt, dev) for _ in range(layers)]
    join = copy_op(2 * T * H * es, dev)
    main, aux = torch.cuda.Stream(), torch.cuda.Stream()
    ev_up = [torch.cuda.Event() for _ in range(layers)]
    ev_last = torch.cuda.Event()

    def it() -> list[Any]:
        for i in range(layers):
            with torch.cuda.stream(main):
                ups[i]()
                ev_up[i].record()
                acts[i]()
            with torch.cuda.stream(aux):
                aux.wait_event(ev_up[i])
                sides[i]()
        with torch.cuda.stream(aux):
            ev_last.record()
        with torch.cuda.stream(main):
            main.wait_event(ev_last)
            join()
        return [main, aux]

    return it


def measure(it: Callable[[], list[Any]], iters: int, warmup: int, graph: bool = False) -> dict[str, Any]:
    """Median makespan (s) and median host issue time (s) per iteration."""
    cap = torch.cuda.Stream()
    g = None
    streams = None
    for _ in range(warmup):
        streams = it()
    torch.cuda.synchronize()
    if graph:
        it_streams(it)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=cap):
            ss = it_streams(it)
            for s in ss:
                s.wait_stream(cap)
            it()
            for s in ss:
                cap.wait_stream(s)
        torch.cuda.synchronize()
        for _ in range(2):
            with torch.cuda.stream(cap):
                g.replay()
        torch.cuda.synchronize()
    spans, hosts = [], []
    start = torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        torch.cuda.synchronize()
        start.record(cap)
        start.synchronize()
        t0 = time.perf_counter()
        if g is not None:
            with torch.cuda.stream(cap):
                g.replay()
            ends = [torch.cuda.Event(enable_timing=True)]
            ends[0].record(cap)
        else:
            for s in streams or []:
                s.wait_event(start)
            streams = it()
            ends = []
            for s in streams:
                e = torch.cuda.Event(enable_timing=True)
                e.record(s)
                ends.append(e)
        hosts.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        spans.append(max(start.elapsed_time(e) for e in ends) * 1e-3)
    return {"makespan_median_s": statistics.median(spans), "makespan_iters_s": spans,
            "host_issue_median_s": statistics.median(hosts)}


_STREAMS: dict[int, list[Any]] = {}


def it_streams(it: Callable[[], list[Any]]) -> list[Any]:
    # run once outside capture to learn the streams the iteration uses (they are created at build time)
    if id(it) not in _STREAMS:
        _STREAMS[id(it)] = it()
        torch.cuda.synchronize()
    return _STREAMS[id(it)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="handwritten.json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    res: dict[str, Any] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    for name, build in (("matmul_streams", build_matmul_streams), ("offload", build_offload),
                        ("small_ops_graph", build_small_ops)):
        it = build(dev)
        res[name] = {"eager": measure(it, a.iters, a.warmup)}
        if name == "small_ops_graph":
            res[name]["cuda_graph"] = measure(it, a.iters, a.warmup, graph=True)
            tight = build_small_ops_tight(dev)
            res[name]["eager_tight"] = measure(tight, a.iters, a.warmup)
            res[name]["cuda_graph_tight"] = measure(tight, a.iters, a.warmup, graph=True)
        print(name, {k: round(v["makespan_median_s"] * 1e3, 4) for k, v in res[name].items()}, "ms", flush=True)
        del it
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
