"""Where small_ops_graph's GPU time goes inside a CUDA graph replay, one GPU (issue 8: predicted 0.404 ms against
0.513-0.519 ms measured in three runs, 2026-11-30 to 2026-12-01; the GEMM table says 4.32 us per 32x1024x1024 bf16
GEMM and the model 1.78 us per 128 KiB copy, so 6.1 us per layer on the main stream against ~8.0 measured).

Each variant is ``layers`` repetitions captured in one graph and replayed between two events (median of
``--reps`` replays, after 10), with the executor's operands (one weight per GEMM, uniform [0, 1)):

* ``gemm``: the main stream's GEMMs alone (up_i);
* ``copy``: the main stream's copies alone (act_i);
* ``main``: up_i then act_i on one stream (the main stream of the schedule, no aux);
* ``fork``: the schedule: main up_i, act_i; aux side_i after up_i (event edge); join at the end;
* ``fork_nowait``: as fork, but side_i does not wait for up_i (two independent streams);
* ``queued_main``: ``main`` issued eagerly behind a 2 ms spin kernel (back to back, no host gaps), for the
  GPU-side time outside a graph.

Prints per-layer microseconds. ``python benchmarks/probes/graph/node_time.py [--layers 64]`` (needs CUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--T", type=int, default=32)
    ap.add_argument("--H", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default="probe_graph_nodes.json")
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    L, T, H, bf = a.layers, a.T, a.H, torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*shape):
        return torch.rand(*shape, device=dev, dtype=torch.float32, generator=g).to(bf)

    x_up, w_up = [r(T, H) for _ in range(L)], [r(H, H) for _ in range(L)]
    x_sd, w_sd = [r(T, H) for _ in range(L)], [r(H, H) for _ in range(L)]
    up, sd = [torch.empty(T, H, device=dev, dtype=bf) for _ in range(L)], [torch.empty(T, H, device=dev, dtype=bf)
                                                                           for _ in range(L)]
    src = [torch.randint(0, 4, (T * H * 2,), dtype=torch.uint8, device=dev) for _ in range(L)]
    dst = [torch.empty_like(s) for s in src]
    main_s, aux_s = torch.cuda.Stream(), torch.cuda.Stream()
    ev = [torch.cuda.Event() for _ in range(L)]

    def body(kind: str) -> None:
        for i in range(L):
            if kind in ("gemm", "main", "fork", "fork_nowait"):
                torch.matmul(x_up[i], w_up[i], out=up[i])
            if kind in ("fork", "fork_nowait"):
                ev[i].record(main_s)
            if kind in ("copy", "main", "fork", "fork_nowait"):
                dst[i].copy_(src[i])
            if kind in ("fork", "fork_nowait"):
                with torch.cuda.stream(aux_s):
                    if kind == "fork":
                        aux_s.wait_event(ev[i])
                    torch.matmul(x_sd[i], w_sd[i], out=sd[i])

    res: dict[str, float] = {}
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for kind in ("gemm", "copy", "main", "fork", "fork_nowait"):
        cap = torch.cuda.Stream()
        with torch.cuda.stream(main_s):
            body(kind)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=cap):
            main_s.wait_stream(cap)
            aux_s.wait_stream(cap)
            with torch.cuda.stream(main_s):
                body(kind)
            cap.wait_stream(main_s)
            cap.wait_stream(aux_s)
        times = []
        with torch.cuda.stream(cap):
            for k in range(10 + a.reps):
                e0.record(cap)
                graph.replay()
                e1.record(cap)
                e1.synchronize()
                if k >= 10:
                    times.append(e0.elapsed_time(e1) * 1e3 / L)
        res[kind] = statistics.median(times)
    with torch.cuda.stream(main_s):
        times = []
        for k in range(10 + a.reps):
            torch.cuda._sleep(3_000_000)
            e0.record(main_s)
            body("main")
            e1.record(main_s)
            e1.synchronize()
            if k >= 10:
                times.append(e0.elapsed_time(e1) * 1e3 / L)
        res["queued_main"] = statistics.median(times)
    for k, v in res.items():
        print(f"{k:12s} {v:7.3f} us per layer")
    with open(a.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "layers": L, "T": T, "H": H,
                   "us_per_layer": res}, f, indent=1)


if __name__ == "__main__":
    main()
