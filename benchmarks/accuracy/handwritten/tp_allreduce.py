"""tp_allreduce_graph by hand: per layer a 1-token fp32 linear and an all_reduce of a buffer of its output's
size, issued eagerly, or (``--graph``) captured once in a CUDA graph and replayed. Each op has its own operands, as
``schedsim execute`` materialises the schedule's ops (``executor/kernels.py``): the all_reduce's buffer is its
own, not the linear's output (earlier versions used that; a few KiB, so no L2 effect was expected).

``--beside-nccl``: schedules/graph_beside_nccl.yaml instead (its params: world_size, hidden, tokens, layers): per
layer a norm, a bf16 linear (tokens×hidden @ hidden×hidden/world_size), an act and a residual (elementwise adds of
the schedule's bytes) captured as one CUDA graph per layer on the one stream (as ``executor.runtime.
CudaSegmentRunner`` captures each ``graph: layer`` run), replayed per layer, and the layer's all_reduce an eager
NCCL call between the replays; on CPU ranks every op runs eagerly.

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/tp_allreduce.py --out ar.json [--graph | --beside-nccl]
"""

import torch
import torch.distributed as dist
from harness import Proc, params, parser

p = parser(__doc__)
mode = p.add_mutually_exclusive_group()
mode.add_argument("--graph", action="store_true", help="capture one iteration in a CUDA graph and replay it")
mode.add_argument("--beside-nccl", action="store_true", help="schedules/graph_beside_nccl.yaml (module docstring)")
a = p.parse_args()
if a.beside_nccl:
    P = params(a, {"world_size": 2, "hidden": 2048, "tokens": 1, "layers": 8})
    pr = Proc()
    T, Hd, bf = P["tokens"], P["hidden"], torch.bfloat16
    cols = Hd // pr.world
    norm = [pr.copy_op(2 * T * Hd * 2) for _ in range(P["layers"])]
    xs = [pr.rand(T, Hd, dtype=bf) for _ in range(P["layers"])]
    ws = [pr.rand(Hd, cols, dtype=bf) for _ in range(P["layers"])]
    ys = [pr.empty(T, cols, dtype=bf) for _ in range(P["layers"])]
    act = [pr.copy_op(2 * T * cols * 2) for _ in range(P["layers"])]
    res = [pr.copy_op(3 * T * cols * 2) for _ in range(P["layers"])]
    rs = [pr.rand(T, cols, dtype=bf) for _ in range(P["layers"])]  # each all_reduce's own buffer
    s = pr.stream()

    def kernels(i):
        norm[i]()
        torch.matmul(xs[i], ws[i], out=ys[i])
        act[i]()
        res[i]()

    def beside(replays):
        if pr.cuda:
            torch.cuda.set_stream(s)
        for i in range(P["layers"]):
            if replays:
                replays[i]()
            else:
                kernels(i)
            dist.all_reduce(rs[i])

    replays = None
    if pr.cuda:  # eager warm-up, then each layer's kernels captured on the stream (one graph per layer)
        for _ in range(3):
            beside(None)
        torch.cuda.set_stream(torch.cuda.default_stream(pr.dev))
        torch.cuda.synchronize()
        graphs = [torch.cuda.CUDAGraph() for _ in range(P["layers"])]
        for i, g in enumerate(graphs):
            with torch.cuda.graph(g, stream=s):
                kernels(i)
        torch.cuda.synchronize()
        replays = [g.replay for g in graphs]
    pr.report("graph_beside_nccl", {**P, "launch": "eager + a CUDA graph per layer"},
              pr.time(lambda: beside(replays), [s] if pr.cuda else [], a.iters, a.warmup), a.out)  # leaves
P = params(a, {"world_size": 2, "input_size": 1024, "output_size": 2048, "tokens": 1, "layers": 8})
pr = Proc()
torch.backends.cuda.matmul.allow_tf32 = False
cols = P["output_size"] // pr.world
xs = [pr.rand(P["tokens"], P["input_size"]) for _ in range(P["layers"])]  # each layer's input and weight
ws = [pr.rand(P["input_size"], cols) for _ in range(P["layers"])]
ys = [pr.empty(P["tokens"], cols) for _ in range(P["layers"])]
rs = [pr.rand(P["tokens"], cols) for _ in range(P["layers"])]  # each all_reduce's own buffer
s = pr.stream()


def layers():
    for x, w, y, r in zip(xs, ws, ys, rs):
        torch.matmul(x, w, out=y)
        dist.all_reduce(r)


def eager():
    if pr.cuda:
        torch.cuda.set_stream(s)
    layers()


step = eager
if a.graph:
    assert pr.cuda, "--graph needs CUDA"
    for _ in range(3):  # warm up outside the capture (cuBLAS workspaces, NCCL)
        eager()
    torch.cuda.set_stream(torch.cuda.default_stream(pr.dev))
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        layers()
    torch.cuda.synchronize()

    def step():
        torch.cuda.set_stream(s)
        g.replay()

pr.report("tp_allreduce_graph", {**P, "launch": "cuda_graph" if a.graph else "eager"},
          pr.time(step, [s] if pr.cuda else [], a.iters, a.warmup), a.out)
