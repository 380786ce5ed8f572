"""tp_ffn by hand: per layer a column-parallel fc1, a row-parallel fc2 and an all_reduce of the partial
output, all on one stream. Each op has its own operands, as ``schedsim execute`` materialises the schedule's ops
(``executor/kernels.py``: every matmul its own A, B and C, every collective its own buffer): fc2 does not read
what fc1 just wrote. Earlier versions did, and at tp=1 fc1's 32 MiB output was fc2's input, partly still in the
H100's 50 MB L2, which the executor's fc2 reads from HBM (a different program; docs/validation.md, "One GPU:
what the executor's process does that a hand-written one does not").

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/tp_ffn.py --out tp_ffn.json --set tp=2
"""

import torch
import torch.distributed as dist
from harness import DT, Proc, params, parser

a = parser(__doc__).parse_args()
P = params(a, {"tp": 2, "hidden": 512, "ffn": 4096, "seq": 512, "batch": 8, "dtype": "fp16", "layers": 1})
pr = Proc()
dt, T = DT[P["dtype"]], P["batch"] * P["seq"]
F, L = P["ffn"] // P["tp"], P["layers"]
x = [pr.rand(T, P["hidden"], dtype=dt) for _ in range(L)]
w1 = [pr.rand(P["hidden"], F, dtype=dt) for _ in range(L)]
h = [pr.empty(T, F, dtype=dt) for _ in range(L)]
g = [pr.rand(T, F, dtype=dt) for _ in range(L)]  # fc2's own input
w2 = [pr.rand(F, P["hidden"], dtype=dt) for _ in range(L)]
y = [pr.empty(T, P["hidden"], dtype=dt) for _ in range(L)]
r = [pr.rand(T, P["hidden"], dtype=dt) for _ in range(L)]  # the all_reduce's own buffer
s = pr.stream()


def step():
    if pr.cuda:
        torch.cuda.set_stream(s)
    for layer in range(L):
        torch.matmul(x[layer], w1[layer], out=h[layer])
        torch.matmul(g[layer], w2[layer], out=y[layer])
        dist.all_reduce(r[layer])


pr.report("tp_ffn", P, pr.time(step, [s] if pr.cuda else [], a.iters, a.warmup), a.out)
