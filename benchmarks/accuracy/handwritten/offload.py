"""offload by hand (one GPU): per chunk a pinned h2d copy, a GEMM once it landed, and a d2h copy of the
result once it is computed, on three streams.

    torchrun --nproc-per-node 1 benchmarks/accuracy/handwritten/offload.py --out offload.json
"""

import torch
from harness import DT, Proc, params, parser

a = parser(__doc__).parse_args()
P = params(a, {"chunks": 8, "rows": 2048, "K": 8192, "N": 8192, "dtype": "bf16"})
pr = Proc()
dt, n = DT[P["dtype"]], P["chunks"]
es = torch.tensor([], dtype=dt).element_size()
pin = pr.cuda


def host(nbytes):
    t = torch.zeros(nbytes, dtype=torch.uint8)
    return t.pin_memory() if pin else t


h_in = [host(P["rows"] * P["K"] * es) for _ in range(n)]
d_in = [torch.empty(P["rows"] * P["K"] * es, dtype=torch.uint8, device=pr.dev) for _ in range(n)]
d_out = [torch.empty(P["rows"] * P["N"] * es, dtype=torch.uint8, device=pr.dev) for _ in range(n)]
h_out = [host(P["rows"] * P["N"] * es) for _ in range(n)]
A = [pr.rand(P["rows"], P["K"], dtype=dt) for _ in range(n)]
B = pr.rand(P["K"], P["N"], dtype=dt)
C = [pr.empty(P["rows"], P["N"], dtype=dt) for _ in range(n)]
s_h2d, s_mm, s_d2h = pr.stream(), pr.stream(), pr.stream()
ev_in = [torch.cuda.Event() for _ in range(n)] if pr.cuda else None
ev_mm = [torch.cuda.Event() for _ in range(n)] if pr.cuda else None


def step():
    if not pr.cuda:
        for i in range(n):
            d_in[i].copy_(h_in[i])
            torch.matmul(A[i], B, out=C[i])
            h_out[i].copy_(d_out[i])
        return []
    for i in range(n):
        torch.cuda.set_stream(s_h2d)
        d_in[i].copy_(h_in[i], non_blocking=True)
        ev_in[i].record(s_h2d)
        torch.cuda.set_stream(s_mm)
        s_mm.wait_event(ev_in[i])
        torch.matmul(A[i], B, out=C[i])
        ev_mm[i].record(s_mm)
        torch.cuda.set_stream(s_d2h)
        s_d2h.wait_event(ev_mm[i])
        h_out[i].copy_(d_out[i], non_blocking=True)


pr.report("offload", P, pr.time(step, [s_h2d, s_mm, s_d2h] if pr.cuda else [], a.iters, a.warmup), a.out)
