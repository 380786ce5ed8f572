"""allgather_mm by hand: ``chunks`` all_gathers back to back on one stream; chunk i's GEMMs (and, with
chunks > 1, the add_ copies) on stream s{i} once its all_gather is done; a zeroing copy first.

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/allgather_mm.py --out ag.json --set chunks=8
"""

import torch
import torch.distributed as dist
from harness import DT, Proc, params, parser

a = parser(__doc__).parse_args()
P = params(a, {"world_size": 2, "M": 8192, "K": 8192, "N": 8192, "chunks": 1, "dtype": "fp32"})
pr = Proc()
torch.backends.cuda.matmul.allow_tf32 = P["dtype"] == "tf32"
c, w, dt = P["chunks"], pr.world, DT[P["dtype"]]
es = torch.tensor([], dtype=dt).element_size()
rows = P["M"] * w // c
shards = [pr.rand(P["M"] // c * P["K"], dtype=dt) for _ in range(c)]
gathered = [pr.empty(rows, P["K"], dtype=dt) for _ in range(c)]
weights = [pr.rand(P["K"], P["N"] // c, dtype=dt) for _ in range(c)]
outs = [[pr.empty(rows, P["N"] // c, dtype=dt) for _ in range(c)] for _ in range(c)]
zero = pr.copy_op(P["M"] * w * P["N"] * es) if c > 1 else None
adds = [[pr.copy_op(3 * rows * (P["N"] // c) * es) for _ in range(c)] for _ in range(c)] if c > 1 else None
s_zero, s_nccl = pr.stream(), pr.stream()
s_mm = [pr.stream() for _ in range(c)]
done = [torch.cuda.Event() for _ in range(c)] if pr.cuda else None


def step():
    if not pr.cuda:  # CPU smoke run: the same work, in order
        for i in range(c):
            dist.all_gather_into_tensor(gathered[i].view(-1), shards[i])
            for j in range(c):
                torch.matmul(gathered[i], weights[j], out=outs[i][j])
        return []
    if zero is not None:
        torch.cuda.set_stream(s_zero)
        zero()
    torch.cuda.set_stream(s_nccl)
    for i in range(c):
        dist.all_gather_into_tensor(gathered[i].view(-1), shards[i])
        done[i].record(s_nccl)
    for i in range(c):
        torch.cuda.set_stream(s_mm[i])
        s_mm[i].wait_event(done[i])
        for j in range(c):
            torch.matmul(gathered[i], weights[j], out=outs[i][j])
            if adds is not None:
                adds[i][j]()


streams = ([s_zero] if zero is not None else []) + [s_nccl] + s_mm if pr.cuda else []
pr.report("allgather_mm", P, pr.time(step, streams, a.iters, a.warmup), a.out)
