"""tp_allreduce_graph by hand: per layer a 1-token fp32 linear and an all_reduce of a buffer of its output's
size, issued eagerly, or (``--graph``) captured once in a CUDA graph and replayed. Each op has its own operands, as
``schedsim execute`` materialises the schedule's ops (``executor/kernels.py``): the all_reduce's buffer is its
own, not the linear's output (earlier versions used that; a few KiB, so no L2 effect was expected).

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/tp_allreduce.py --out ar.json [--graph]
"""

import torch
import torch.distributed as dist
from harness import Proc, params, parser

p = parser(__doc__)
p.add_argument("--graph", action="store_true", help="capture one iteration in a CUDA graph and replay it")
a = p.parse_args()
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
