"""small_ops_graph by hand (one GPU): per layer a small GEMM and an elementwise copy on the main stream and
a small GEMM on an aux stream that waits for the first; eager, or (``--graph``) one captured CUDA graph.
Every GEMM has its own input and weight, as the layers of a model do (and as ``schedsim execute``
materialises the schedule's ops): one weight shared by all 128 GEMMs would stay in L2 and time a
different program (2026-11-30, 2 H200s: 0.44 ms shared against 0.54 ms per-layer, graph replay).

    torchrun --nproc-per-node 1 benchmarks/accuracy/handwritten/small_ops.py --out small.json [--graph]
"""

import torch
from harness import DT, Proc, params, parser

p = parser(__doc__)
p.add_argument("--graph", action="store_true")
a = p.parse_args()
P = params(a, {"layers": 64, "T": 32, "H": 1024, "dtype": "bf16"})
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
if a.graph:
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
pr.report("small_ops_graph", {**P, "launch": "cuda_graph" if a.graph else "eager"},
          pr.time(step, streams, a.iters, a.warmup), a.out)
