"""tp_ffn by hand: per layer a column-parallel fc1, a row-parallel fc2 and an all_reduce of the partial
output, all on one stream.

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/tp_ffn.py --out tp_ffn.json --set tp=2
"""

import torch
import torch.distributed as dist
from harness import DT, Proc, params, parser

a = parser(__doc__).parse_args()
P = params(a, {"tp": 2, "hidden": 512, "ffn": 4096, "seq": 512, "batch": 8, "dtype": "fp16", "layers": 1})
pr = Proc()
dt, T = DT[P["dtype"]], P["batch"] * P["seq"]
x = [pr.rand(T, P["hidden"], dtype=dt) for _ in range(P["layers"])]
w1 = [pr.rand(P["hidden"], P["ffn"] // P["tp"], dtype=dt) for _ in range(P["layers"])]
w2 = [pr.rand(P["ffn"] // P["tp"], P["hidden"], dtype=dt) for _ in range(P["layers"])]
h = [pr.empty(T, P["ffn"] // P["tp"], dtype=dt) for _ in range(P["layers"])]
y = [pr.empty(T, P["hidden"], dtype=dt) for _ in range(P["layers"])]
s = pr.stream()


def step():
    if pr.cuda:
        torch.cuda.set_stream(s)
    for layer in range(P["layers"]):
        torch.matmul(x[layer], w1[layer], out=h[layer])
        torch.matmul(h[layer], w2[layer], out=y[layer])
        dist.all_reduce(y[layer])


pr.report("tp_ffn", P, pr.time(step, [s] if pr.cuda else [], a.iters, a.warmup), a.out)
