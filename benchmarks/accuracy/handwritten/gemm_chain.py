"""gemm_chain by hand (one GPU): ``count`` ``torch.matmul(a, b, out=c)`` in a row on one stream, each GEMM with
its own operands (benchmarks/data/gemm_chain.yaml).

    torchrun --nproc-per-node 1 benchmarks/accuracy/handwritten/gemm_chain.py --out chain.json [--set count=2]
"""

import torch
from harness import DT, Proc, params, parser

a = parser(__doc__).parse_args()
P = params(a, {"count": 2, "M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"})
pr = Proc()
dt = DT[P["dtype"]]
xs = [pr.rand(P["M"], P["K"], dtype=dt) for _ in range(P["count"])]
ws = [pr.rand(P["K"], P["N"], dtype=dt) for _ in range(P["count"])]
ys = [pr.empty(P["M"], P["N"], dtype=dt) for _ in range(P["count"])]
s = pr.stream()


def step():
    if pr.cuda:
        torch.cuda.set_stream(s)
    for x, w, y in zip(xs, ws, ys, strict=True):
        torch.matmul(x, w, out=y)


pr.report("gemm_chain", P, pr.time(step, [s] if pr.cuda else [], a.iters, a.warmup), a.out)
