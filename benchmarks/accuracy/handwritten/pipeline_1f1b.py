"""1F1B pipeline by hand at p ranks (one stage each), as Megatron-LM's non-interleaved schedule runs it
with ``batch_p2p_comm``: warm-up forwards, then one-forward-one-backward, then cool-down backwards;
every send/recv call is one ``batch_isend_irecv`` on the compute stream (the NCCL stream waits for the
compute before it, and the compute after it waits for the works). Stage work of
schedules/pipeline_schedules.yaml: forward, backward-input and backward-weight are one bf16 GEMM each.

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/pipeline_1f1b.py --out 1f1b.json --set m=8
"""

import torch
import torch.distributed as dist
from harness import Proc, params, parser

a = parser(__doc__).parse_args()
P = params(a, {"m": 8, "tokens": 4096, "hidden": 4096})
pr = Proc()
r, p, m = pr.rank, pr.world, P["m"]
bf = torch.bfloat16
forward, dgrad, wgrad, act = pr.pipeline_stage(P["tokens"], P["hidden"])
send_f, recv_f = pr.rand(act, dtype=bf), pr.empty(act, dtype=bf)
send_b, recv_b = pr.rand(act, dtype=bf), pr.empty(act, dtype=bf)
first, last = r == 0, r == p - 1
s = pr.stream()


def backward():
    dgrad()
    wgrad()


def comm(sf=False, rf=False, sb=False, rb=False):
    """One Megatron _communicate call: the requested sends/recvs in one batch, waited on the stream."""
    ops = []
    if sf and not last:
        ops.append(dist.P2POp(dist.isend, send_f, r + 1))
    if rf and not first:
        ops.append(dist.P2POp(dist.irecv, recv_f, r - 1))
    if sb and not first:
        ops.append(dist.P2POp(dist.isend, send_b, r - 1))
    if rb and not last:
        ops.append(dist.P2POp(dist.irecv, recv_b, r + 1))
    if ops:
        for w in dist.batch_isend_irecv(ops):
            w.wait()  # CUDA: the current stream waits and the host goes on; gloo: the host waits


def step():
    if pr.cuda:
        torch.cuda.set_stream(s)
    warm = min(p - r - 1, m)
    rest = m - warm
    for _ in range(warm):
        comm(rf=True)
        forward()
        comm(sf=True)
    if rest:
        comm(rf=True)
    for i in range(rest):
        forward()
        comm(sf=True, rb=True)
        backward()
        if i == rest - 1:
            comm(sb=True)
        else:
            comm(sb=True, rf=True)
    for _ in range(warm):
        comm(rb=True)
        backward()
        comm(sb=True)
    return []


pr.report("pipeline_1f1b", {**P, "p": p}, pr.time(step, [s] if pr.cuda else [], a.iters, a.warmup), a.out)
