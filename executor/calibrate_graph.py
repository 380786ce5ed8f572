"""Launch overhead and CUDA-graph timings for ``schedsim calibrate``: the host time per op of plain and
executor launches, a graph chain's time per node in L2 and from HBM, the graph-fork probe and the
graph-edge fields of the profile's ``launch:`` section derived from it.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from executor.calibrate_bench import _Bench
from executor.calibrate_host import (
    tiny_mm,
)
from executor.calibrate_logs import base_profile_dict

__all__ = ["GRAPH_T", "GRAPH_H", "GRAPH_LAYERS", "graph_chain_per_node", "graph_replay_figures", "graph_start_us",
           "pool_count",
           "add_graph_times", "timed_graph_chain", "graph_timing_event_us", "graph_edge_us", "fork_edge_rows"]


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


def graph_start_us(torch: Any, g: Any, node_us: float, reps: int = 100) -> float:
    """µs from an event recorded on the idle current stream to the first node of the replayed one-node graph ``g``
    starting on the GPU: the median over ``reps`` (after 3) of the event pair around ``g.replay()`` less the node's
    GPU time ``node_us`` (its per-node time in a graph chain), at least 0. What the prediction's
    ``launch.graph_start_us`` is (:func:`schedsim.gpu.host.kernel_release`)."""
    a0, a1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for r in range(reps + 3):
        torch.cuda.synchronize()
        a0.record()
        g.replay()
        a1.record()
        torch.cuda.synchronize()
        if r >= 3:
            ts.append(a0.elapsed_time(a1) * 1e3 - node_us)
    return max(0.0, float(statistics.median(ts)))


def pool_count(set_bytes: float, l2: float, least: int = 8) -> int:
    """How many input sets of ``set_bytes`` each a chain reads from HBM: enough for 4x the L2 size ``l2`` (bytes),
    at least ``least``, at most 1024 (one graph node per set).

    >>> pool_count(2228224, 62914560), pool_count(65536, 62914560, 64), pool_count(1e9, 62914560)
    (113, 1024, 8)
    """
    return int(min(1024, max(least, -(-4 * l2 // set_bytes))))


def add_graph_times(b: _Bench, l2: float) -> dict[str, float]:
    """µs per ``add_`` on 32x1024 bf16 (64 KiB) back to back (:meth:`_Bench.time_batched` over 64 tensors, the
    kernel floor's method) and as a graph-chain node, in L2 (64 nodes over 64 tensors) and from HBM (one tensor per
    node, :func:`pool_count`): ``add_stream_us``, ``add_graph_us``, ``add_graph_cold_us``.
    ``launch.graph_per_op_us`` = graph - stream; ``gpu.hbm_miss_us`` = cold - graph (rule graph-nodes; one H200,
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


def graph_replay_figures(b: _Bench, nodes: int = 300) -> dict[str, float]:
    """µs: ``graph_launch_us``, the host time of ``CUDAGraph.replay()`` of a one-node graph (a 64×64 matmul,
    :func:`~executor.calibrate_host.tiny_mm`; median of 200, each after a synchronize); ``graph_node_gpu_us``, the
    GPU time per node of a ``nodes``-node chain of it; ``graph_start_us``, :func:`graph_start_us` of the one-node
    graph. Needs CUDA.

    Calibrate times them first, with the communication calls' host costs (``executor/calibrate.py``), before its
    GEMM measurements run torch.profiler: after a profiler session a process's host calls cost more, and a
    replay's start holds the replay call's host time, so timed after the profiler ``graph_start_us`` read about 3x
    a fresh process's figure (the measurements: docs/validation.md, "model misses that are not host noise")."""
    torch = b.torch
    a, bb, c = tiny_mm(b)
    s = torch.cuda.Stream(device=b.ctx.device)
    g1 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, stream=s):
        torch.matmul(a, bb, out=c)
    gN = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gN, stream=s):
        for _ in range(nodes):
            torch.matmul(a, bb, out=c)
    b.sync()
    hs = []
    for _ in range(200):
        t0 = time.perf_counter()
        g1.replay()
        hs.append(time.perf_counter() - t0)
        b.sync()
    res = {"graph_launch_us": statistics.median(hs) * 1e6,
           "graph_node_gpu_us": b.time_one(lambda: gN.replay(), iters=10) / nodes * 1e6}
    res["graph_start_us"] = graph_start_us(torch, g1, res["graph_node_gpu_us"])
    return res


def _measure_launch(b: _Bench, log: Callable[[str], None], replay: dict[str, float] | None = None
                    ) -> dict[str, float]:
    """The profile's launch figures (µs); ``replay``: :func:`graph_replay_figures` timed earlier in the process
    (else timed here)."""
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
        # graph launch and per-node cost: timed before calibrate's first torch.profiler session where it passed them
        res.update(replay or graph_replay_figures(b))
        t_solo = b.time_batched(lambda: torch.matmul(a, bb, out=c))[0]
        res["solo_event_us"] = t_solo * 1e6
        res["graph_per_op_us"] = max(0.0, res["graph_node_gpu_us"] - res["solo_event_us"])
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
    """Rule graph-forks's edge term for a fork at a GEMM of ``shape`` (dtype, m, n, k): the measured extra GPU time
    per layer
    of the graph-edge probe (:func:`_graph_fork_us`) with the aux GEMM waiting for the main one (``fork_us``) over
    the main stream alone (``base_us``), less what the ``waves`` model predicts for the same difference with
    ``profile`` (a profile dict; its edge terms set to 0), at least 0. Both variants are simulated as schedules of
    GRAPH_LAYERS layers (``launch: cuda_graph``), so the term adds only what the model misses: one H200,
    [evidence: l2-graph-forks] (rule graph-nodes in the model): 0.32 / 0.37 / 1.69 / 3.11 / 3.08 µs
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
