"""GPipe pipeline by hand at p ranks (one stage each), in torch.distributed.pipelining's order
(``ScheduleGPipe``): all microbatches forward, then all backward; every p2p action is its own
``batch_isend_irecv`` (torch's ``_batch_p2p``), posted on a stream of its own (sends on one, receives on
another) so that the compute stream waits only for what it needs: a send's stream waits for the compute
that produced it, the compute after a receive waits for the receive. Stage work of
schedules/pipeline_schedules.yaml: forward, backward-input and backward-weight are one bf16 GEMM each.

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/pipeline_gpipe.py --out gpipe.json --set m=8
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
send_f = [pr.rand(act, dtype=bf) for _ in range(m)]  # one activation / gradient buffer per microbatch
recv_f = [pr.empty(act, dtype=bf) for _ in range(m)]
send_b = [pr.rand(act, dtype=bf) for _ in range(m)]
recv_b = [pr.empty(act, dtype=bf) for _ in range(m)]
first, last = r == 0, r == p - 1
comp, s_send, s_recv = pr.stream(), pr.stream(), pr.stream()
ev = (lambda: torch.cuda.Event()) if pr.cuda else (lambda: None)
ev_done = [ev() for _ in range(2 * m)]  # compute of F_i (i) and B_i (m + i), for the sends
ev_recv = [ev() for _ in range(2 * m)]  # receives of F_i and B_i, for the compute


def p2p(op, buf, peer, stream, after=None, done=None):
    """One p2p action: its own batch_isend_irecv on ``stream``, after event ``after``; ``done`` recorded."""
    if not pr.cuda:
        for w in dist.batch_isend_irecv([dist.P2POp(op, buf, peer)]):
            w.wait()
        return
    torch.cuda.set_stream(stream)
    if after is not None:
        stream.wait_event(after)
    for w in dist.batch_isend_irecv([dist.P2POp(op, buf, peer)]):
        w.wait()  # the stream waits for NCCL; the host goes on
    if done is not None:
        done.record(stream)


def compute(after, fns, done):
    if pr.cuda:
        torch.cuda.set_stream(comp)
        if after is not None:
            comp.wait_event(after)
    for fn in fns:
        fn()
    if pr.cuda and done is not None:
        done.record(comp)


def step():
    for i in range(m):
        if not first:
            p2p(dist.irecv, recv_f[i], r - 1, s_recv, done=ev_recv[i])
        compute(None if first else ev_recv[i], [forward], ev_done[i])
        if not last:
            p2p(dist.isend, send_f[i], r + 1, s_send, after=ev_done[i])
    for i in range(m):
        if not last:
            p2p(dist.irecv, recv_b[i], r + 1, s_recv, done=ev_recv[m + i])
        compute(None if last else ev_recv[m + i], [dgrad, wgrad], ev_done[m + i])
        if not first:
            p2p(dist.isend, send_b[i], r - 1, s_send, after=ev_done[m + i])
    return []


pr.report("pipeline_gpipe", {**P, "p": p}, pr.time(step, [comp, s_send, s_recv] if pr.cuda else [], a.iters,
                                                     a.warmup), a.out)
