"""small_ops_graph by hand (one GPU): per layer a small GEMM and an elementwise copy on the main stream and
a small GEMM on an aux stream that waits for the first; eager, or (``--graph``) one captured CUDA graph, or
(``--segment``: schedules/small_ops_segment.yaml) the first ``graphed`` layers and ``seg_join`` one CUDA graph
captured on the main stream (aux forked and joined inside it, as ``executor.runtime.CudaSegmentRunner`` captures a
segment), replayed before an eager ``between`` op and the eager rest of the layers (the wait and fork around the
replay as ``executor.lean.compile_cuda`` issues them); on CPU ranks every op runs eagerly.
Every GEMM has its own input and weight, as the layers of a model do (and as ``schedsim execute``
materialises the schedule's ops): one weight shared by all 128 GEMMs would stay in L2 and time a
different program (2026-11-30, 2 H200s: 0.44 ms shared against 0.54 ms per-layer, graph replay).

    torchrun --nproc-per-node 1 benchmarks/accuracy/handwritten/small_ops.py --out small.json [--graph | --segment]
"""

import torch
from harness import DT, Proc, params, parser

p = parser(__doc__)
mode = p.add_mutually_exclusive_group()
mode.add_argument("--graph", action="store_true")
mode.add_argument("--segment", action="store_true", help="schedules/small_ops_segment.yaml (its param graphed)")
a = p.parse_args()
P = params(a, {"layers": 64, "T": 32, "H": 1024, "dtype": "bf16", **({"graphed": 32} if a.segment else {})})
pr = Proc()
dt, L = DT[P["dtype"]], P["layers"]
es = torch.tensor([], dtype=dt).element_size()
x_up = [pr.rand(P["T"], P["H"], dtype=dt) for _ in range(L)]
w_up = [pr.rand(P["H"], P["H"], dtype=dt) for _ in range(L)]
x_side = [pr.rand(P["T"], P["H"], dtype=dt) for _ in range(L)]
w_side = [pr.rand(P["H"], P["H"], dtype=dt) for _ in range(L)]
up = [pr.empty(P["T"], P["H"], dtype=dt) for _ in range(L)]
side = [pr.empty(P["T"], P["H"], dtype=dt) for _ in range(L)]
act = [pr.copy_op(2 * P["T"] * P["H"] * es) for _ in range(L)]
join = pr.copy_op(2 * P["T"] * P["H"] * es)
main, aux = pr.stream(), pr.stream()
ev = [torch.cuda.Event() for _ in range(L)] if pr.cuda else None
ev_last = torch.cuda.Event() if pr.cuda else None
G = P.get("graphed", 0)
if a.segment:
    if not 0 < G <= L:
        p.error(f"--set graphed={G}: --segment needs 0 < graphed <= layers ({L}); fix: --set graphed=N with N in "
                f"1..{L}")
    seg_join, between = pr.copy_op(2 * P["T"] * P["H"] * es), pr.copy_op(2 * P["T"] * P["H"] * es)
    ev_seg = [torch.cuda.Event() for _ in range(G + 1)] if pr.cuda else None  # the captured layers' and seg_join's


def layers(lo, hi, events, on_main=False):
    """Layers lo..hi-1 on the current device: up and act on main, side on aux after up (an event); ``on_main``:
    main is already the current stream (no set_stream call before the first layer, as the executor's step list)."""
    for i in range(lo, hi):
        if i > lo or not on_main:
            torch.cuda.set_stream(main)
        torch.matmul(x_up[i], w_up[i], out=up[i])
        events[i - lo].record(main)
        act[i]()
        torch.cuda.set_stream(aux)
        aux.wait_event(events[i - lo])
        torch.matmul(x_side[i], w_side[i], out=side[i])


def segment_ops():
    """The captured part of small_ops_segment: layers 0..graphed-1, then seg_join on main after side{graphed-1}."""
    layers(0, G, ev_seg)
    ev_seg[G].record(aux)
    torch.cuda.set_stream(main)
    main.wait_event(ev_seg[G])
    seg_join()


def segment_iteration(replay):
    """One iteration of small_ops_segment: the segment (``replay`` its graph, or None: eagerly), between, the
    eager layers graphed..layers-1, join on main after the last side."""
    if not pr.cuda:
        for i in range(L):
            torch.matmul(x_up[i], w_up[i], out=up[i])
            act[i]()
            torch.matmul(x_side[i], w_side[i], out=side[i])
            if i == G - 1:
                seg_join()
                between()
        join()
        return []
    torch.cuda.set_stream(main)
    if replay is None:
        segment_ops()
    else:
        main.wait_stream(aux)  # the segment's other stream's earlier work, then the replay, then aux after it
        replay()
        aux.wait_stream(main)
    between()
    layers(G, L, ev[G:], on_main=True)
    ev_last.record(aux)
    torch.cuda.set_stream(main)
    main.wait_event(ev_last)
    join()


def iteration():
    if not pr.cuda:
        for i in range(L):
            torch.matmul(x_up[i], w_up[i], out=up[i])
            act[i]()
            torch.matmul(x_side[i], w_side[i], out=side[i])
        join()
        return []
    for i in range(L):
        torch.cuda.set_stream(main)
        torch.matmul(x_up[i], w_up[i], out=up[i])
        ev[i].record(main)
        act[i]()
        torch.cuda.set_stream(aux)
        aux.wait_event(ev[i])
        torch.matmul(x_side[i], w_side[i], out=side[i])
    ev_last.record(aux)
    torch.cuda.set_stream(main)
    main.wait_event(ev_last)
    join()


step, streams = iteration, [main, aux] if pr.cuda else []
if a.segment:
    replay = None
    if pr.cuda:  # eager warm-up, then the segment captured on main with aux forked and joined (CudaSegmentRunner)
        for _ in range(3):
            segment_iteration(None)
        torch.cuda.set_stream(torch.cuda.default_stream(pr.dev))
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=main):
            aux.wait_stream(main)
            segment_ops()
            main.wait_stream(aux)
            torch.cuda.set_stream(main)
        torch.cuda.synchronize()
        replay = g.replay

    def step():
        return segment_iteration(replay)
elif a.graph:
    assert pr.cuda, "--graph needs CUDA"
    cap = torch.cuda.Stream(device=pr.dev)
    for _ in range(3):
        iteration()
    torch.cuda.set_stream(torch.cuda.default_stream(pr.dev))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        main.wait_stream(cap)
        aux.wait_stream(cap)
        iteration()
        cap.wait_stream(main)
        cap.wait_stream(aux)
        torch.cuda.set_stream(cap)
    torch.cuda.synchronize()

    def step():
        torch.cuda.set_stream(cap)
        g.replay()

    streams = [cap]
pr.report("small_ops_segment" if a.segment else "small_ops_graph",
          {**P, "launch": "cuda_graph" if a.graph else "eager" + (" + one graph segment" if a.segment else "")},
          pr.time(step, streams, a.iters, a.warmup), a.out)
