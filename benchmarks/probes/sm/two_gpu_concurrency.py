"""Concurrency probes for the GPU execution model (issue 8): plain PyTorch, one process per GPU.

    torchrun --nproc-per-node 2 benchmarks/probes/sm/two_gpu_concurrency.py --out probe.json
    CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc-per-node 2 benchmarks/probes/sm/two_gpu_concurrency.py \
        --only streams --out p1.json

Every GPU time is CUDA-event time (start and end events recorded on the stream that runs the work), median
of ``--reps`` repetitions after a barrier and a device synchronize; host times are ``time.perf_counter``
around the Python call. What each probe measures:

* ``gemm``: solo GEMM times (bf16/fp16) of the shipped schedules' shapes and two wave-filling ones.
* ``streams``: two wave-filling GEMMs on two streams, issued together; a small kernel on a third stream
  issued after them; per-stream start/end relative to a common start event.
* ``nccl_beside_gemm``: an all_gather / all_reduce alone, and beside a queue of GEMMs on another stream
  (comm time and GEMM time both).
* ``coll_gpu``: collectives back to back (20 launches between two events) and inside a CUDA graph:
  GPU-side time per call; ``coll_host``: host time of one call.
* ``p2p``: send/recv between rank 0 and 1, unbatched (isend then irecv) and batched (batch_isend_irecv).
* ``host``: host issue cost per call of torch.matmul (tiny), add_, event record+wait, graph replay.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def med(xs):
    return statistics.median(xs)


def ev():
    return torch.cuda.Event(enable_timing=True)


def timed(fn, reps, stream=None):
    """Median GPU ms of fn() recorded on `stream` (default current)."""
    out = []
    s = stream or torch.cuda.current_stream()
    for _ in range(reps):
        a, b = ev(), ev()
        with torch.cuda.stream(s):
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return med(out)


def host_after_sync_us(fn, reps, stream):
    """Median host µs of one ``fn()`` on ``stream`` right after a device synchronize and a barrier."""
    hs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        with torch.cuda.stream(stream):
            fn()
        hs.append((time.perf_counter() - t) * 1e6)
    return med(hs)


def gemm_probe(dev, reps):
    res = {}
    for dt in (torch.bfloat16, torch.float16):
        for (m, n, k) in [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 1024, 8192), (4096, 1024, 512),
                          (4096, 512, 1024), (1024, 1024, 1024), (256, 256, 256), (16384, 8192, 8192)]:
            a = torch.randn(m, k, device=dev, dtype=dt)
            b = torch.randn(k, n, device=dev, dtype=dt)
            c = torch.empty(m, n, device=dev, dtype=dt)
            for _ in range(3):
                torch.matmul(a, b, out=c)
            one = timed(lambda: torch.matmul(a, b, out=c), reps)
            ten = timed(lambda: [torch.matmul(a, b, out=c) for _ in range(10)], reps) / 10
            res[f"{str(dt)[6:]} {m}x{n}x{k}"] = {"single_ms": one, "back_to_back_ms": ten}
    return res


def streams_probe(dev, reps):
    """Two big GEMMs on streams s1, s2 + a small GEMM and an add_ on s3; per-kernel start/end (ms from t0)."""
    dt = torch.bfloat16
    big = [(torch.randn(8192, 8192, device=dev, dtype=dt), torch.randn(8192, 8192, device=dev, dtype=dt),
            torch.empty(8192, 8192, device=dev, dtype=dt)) for _ in range(2)]
    sm = (torch.randn(1024, 1024, device=dev, dtype=dt), torch.randn(1024, 1024, device=dev, dtype=dt),
          torch.empty(1024, 1024, device=dev, dtype=dt))
    vec = torch.randn(64 * 2**20, device=dev, dtype=dt)  # 128 MiB add_ (memory-bound)
    ss = [torch.cuda.Stream() for _ in range(3)]
    runs = {"solo": [], "concurrent": []}
    for mode in ("solo", "concurrent"):
        for _ in range(reps):
            torch.cuda.synchronize()
            t0 = ev()
            t0.record()
            marks = []
            for i, s in enumerate(ss):
                s.wait_event(t0)
            for i in range(2):
                with torch.cuda.stream(ss[i]):
                    a, b = ev(), ev()
                    a.record()
                    torch.matmul(big[i][0], big[i][1], out=big[i][2])
                    b.record()
                    marks.append((f"gemm8192_s{i}", a, b))
                if mode == "solo":
                    torch.cuda.synchronize()
            with torch.cuda.stream(ss[2]):
                a, b, c = ev(), ev(), ev()
                a.record()
                torch.matmul(sm[0], sm[1], out=sm[2])
                b.record()
                vec.add_(1.0)
                c.record()
                marks.append(("gemm1024_s2", a, b))
                marks.append(("add128MiB_s2", b, c))
            torch.cuda.synchronize()
            runs[mode].append({n: (t0.elapsed_time(a), t0.elapsed_time(b)) for n, a, b in marks})
    out = {}
    for mode, rs in runs.items():
        out[mode] = {n: [med([r[n][0] for r in rs]), med([r[n][1] for r in rs])] for n in rs[0]}
    # eight 2048x1024x8192 GEMMs on eight streams (the allgather_mm shape), each followed by an add_
    a8 = [(torch.randn(2048, 8192, device=dev, dtype=torch.float16), torch.randn(8192, 1024, device=dev, dtype=torch.float16),
           torch.empty(2048, 1024, device=dev, dtype=torch.float16)) for _ in range(8)]
    acc = torch.zeros(2048, 1024, device=dev, dtype=torch.float16)
    s8 = [torch.cuda.Stream() for _ in range(8)]
    rs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = ev()
        t0.record()
        marks = []
        for i, s in enumerate(s8):
            s.wait_event(t0)
            with torch.cuda.stream(s):
                a, b, c = ev(), ev(), ev()
                a.record()
                torch.matmul(a8[i][0], a8[i][1], out=a8[i][2])
                b.record()
                acc.add_(a8[i][2])
                c.record()
                marks += [(f"mm{i}", a, b), (f"add{i}", b, c)]
        torch.cuda.synchronize()
        rs.append({n: (t0.elapsed_time(a), t0.elapsed_time(b)) for n, a, b in marks})
    out["eight_streams_fp16_2048x1024x8192"] = {n: [med([r[n][0] for r in rs]), med([r[n][1] for r in rs])] for n in rs[0]}
    return out


def nccl_beside_gemm(dev, reps, ws):
    res = {}
    cs, gs = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    for nbytes in (1 << 20, 16 << 20, 128 << 20):
        x = torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16)
        y = torch.empty(nbytes // 2 * ws, device=dev, dtype=torch.bfloat16)
        for name, fn in (("all_gather", lambda: dist.all_gather_into_tensor(y, x)),
                         ("all_reduce", lambda: dist.all_reduce(x))):
            for _ in range(3):
                with torch.cuda.stream(cs):
                    fn()
            torch.cuda.synchronize()
            dist.barrier()
            alone = timed(fn, reps, cs)
            gemm_alone = timed(lambda: [torch.matmul(a, b, out=c) for _ in range(4)], reps, gs)
            beside, gemm_beside, comm_start = [], [], []
            for _ in range(reps):
                dist.barrier()
                torch.cuda.synchronize()
                t0 = ev()
                t0.record()
                cs.wait_event(t0)
                gs.wait_event(t0)
                with torch.cuda.stream(gs):
                    g0, g1 = ev(), ev()
                    g0.record()
                    for _ in range(4):
                        torch.matmul(a, b, out=c)
                    g1.record()
                with torch.cuda.stream(cs):
                    torch.cuda._sleep(20000)  # ~ start the collective after the GEMMs hold the SMs
                    c0, c1 = ev(), ev()
                    c0.record()
                    fn()
                    c1.record()
                torch.cuda.synchronize()
                beside.append(c0.elapsed_time(c1))
                comm_start.append(t0.elapsed_time(c0))
                gemm_beside.append(g0.elapsed_time(g1))
            res[f"{name} {nbytes}"] = {"alone_ms": alone, "beside_gemm_ms": med(beside), "comm_start_ms": med(comm_start),
                                       "gemm4_alone_ms": gemm_alone, "gemm4_beside_ms": med(gemm_beside)}
    return res


def coll_probe(dev, reps, ws):
    res = {}
    s = torch.cuda.Stream()
    for nbytes in [1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]:
        x = torch.ones(nbytes // 4, device=dev)
        y = torch.empty(nbytes // 4 * ws, device=dev)
        row = {}
        for name, fn in (("all_reduce", lambda: dist.all_reduce(x)),
                         ("all_gather", lambda: dist.all_gather_into_tensor(y, x))):
            with torch.cuda.stream(s):
                for _ in range(3):
                    fn()
            torch.cuda.synchronize()
            dist.barrier()
            n = 20
            row[name + "_b2b_us"] = timed(lambda: [fn() for _ in range(n)], reps, s) / n * 1e3
            torch.cuda.synchronize()
            dist.barrier()
            row[name + "_host_us"] = host_after_sync_us(fn, reps, s)
            torch.cuda.synchronize()
            if nbytes <= 1 << 22:
                g = torch.cuda.CUDAGraph()
                dist.barrier()
                with torch.cuda.graph(g, stream=s):
                    for _ in range(n):
                        fn()
                torch.cuda.synchronize()
                dist.barrier()
                row[name + "_graph_us"] = timed(g.replay, reps, s) / n * 1e3
                torch.cuda.synchronize()
                del g
        res[nbytes] = row
    return res


def p2p_probe(dev, reps, rank):
    res = {}
    peer = 1 - rank
    s = torch.cuda.Stream()
    for nbytes in [1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26]:
        x = torch.ones(nbytes // 4, device=dev)
        y = torch.empty(nbytes // 4, device=dev)

        def unbatched():
            if rank == 0:
                w1 = dist.isend(x, peer)
                w2 = dist.irecv(y, peer)
            else:
                w2 = dist.irecv(y, peer)
                w1 = dist.isend(x, peer)
            w1.wait()
            w2.wait()

        def batched():
            for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, peer)]):
                w.wait()

        def one_way():
            if rank == 0:
                dist.send(x, peer)
            else:
                dist.recv(y, peer)

        row = {}
        for name, fn in (("one_way", one_way), ("unbatched_exchange", unbatched), ("batched_exchange", batched)):
            with torch.cuda.stream(s):
                for _ in range(3):
                    fn()
            torch.cuda.synchronize()
            dist.barrier()
            row[name + "_us"] = timed(lambda: [fn() for _ in range(10)], reps, s) / 10 * 1e3
            row[name + "_host_us"] = host_after_sync_us(fn, reps, s)
        res[nbytes] = row
    return res


def host_probe(dev, reps):
    res = {}
    a = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    v = torch.randn(1024, device=dev)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    e = torch.cuda.Event()
    N = 500

    def host(fn):
        xs = []
        for _ in range(reps):
            torch.cuda.synchronize()
            torch.cuda._sleep(50_000_000)  # keep the GPU busy so host time is pure issue time
            t = time.perf_counter()
            for _ in range(N):
                fn()
            xs.append((time.perf_counter() - t) / N * 1e6)
        torch.cuda.synchronize()
        return med(xs)

    res["matmul_us"] = host(lambda: torch.matmul(a, a, out=c))
    res["add_us"] = host(lambda: v.add_(1.0))

    def evwait():
        e.record(s1)
        s2.wait_event(e)
    res["event_record_wait_us"] = host(evwait)

    def switch():
        with torch.cuda.stream(s1):
            v.add_(1.0)
    res["stream_ctx_add_us"] = host(switch)
    # 200 tiny GEMMs: eager GPU time vs graph replay
    xs = [torch.randn(64, 64, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    def tiny200():
        for _ in range(200):
            torch.matmul(xs[0], xs[1], out=c)
    res["tiny200_eager_ms"] = timed(tiny200, reps)
    g = torch.cuda.CUDAGraph()
    st = torch.cuda.Stream()
    with torch.cuda.stream(st):
        tiny200()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        tiny200()
    res["tiny200_graph_ms"] = timed(g.replay, reps)
    hs = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        g.replay()
        hs.append((time.perf_counter() - t) * 1e6)
    res["graph_replay_host_us"] = med(hs)
    torch.cuda.synchronize()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", default="")
    o = ap.parse_args()
    dist.init_process_group("nccl")
    rank, ws = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(dev)
    dist.all_reduce(torch.ones(1, device=dev))
    only = set(o.only.split(",")) - {""}
    res = {"env": {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                   "gpu": torch.cuda.get_device_name(), "world_size": ws,
                   "max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "default"),
                   "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}}
    probes = [("host", lambda: host_probe(dev, o.reps)), ("gemm", lambda: gemm_probe(dev, o.reps)),
              ("streams", lambda: streams_probe(dev, o.reps)),
              ("coll", lambda: coll_probe(dev, o.reps, ws)),
              ("nccl_beside_gemm", lambda: nccl_beside_gemm(dev, o.reps, ws))]
    if ws == 2:
        probes.append(("p2p", lambda: p2p_probe(dev, o.reps, rank)))
    for name, fn in probes:
        if only and name not in only:
            continue
        t = time.time()
        try:
            res[name] = fn()
        except Exception as e:  # keep the other probes' results
            res[name] = {"error": repr(e)}
        if rank == 0:
            print(f"[probe] {name}: {time.time() - t:.1f} s", flush=True)
        dist.barrier()
    if rank == 0:
        with open(o.out, "w") as f:
            json.dump(res, f, indent=1)
        print(json.dumps(res, indent=1)[:6000])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
