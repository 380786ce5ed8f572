"""ZB-H1 pipeline by hand at p ranks (one stage each), in torch.distributed.pipelining's order: the backward
split into I (input gradient) and W (weight gradient), rank r holding back r W's to fill the cool-down
bubble (``_get_1f1b_rank_ops`` with ``enable_zero_bubble=True``); sends and recvs placed the way torch's
``_add_send_recv`` places them (a send right after the compute that produced it, the matching recv
appended to the receiver at that moment), each its own one-op ``batch_isend_irecv`` (``_batch_p2p``) on a
stream per p2p kind. The compute stream waits only for the recv it consumes. Stage work of
schedules/pipeline_schedules.yaml: forward, backward-input and backward-weight are one bf16 GEMM each.

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/pipeline_zb_h1.py --out zbh1.json --set m=8
"""

from harness import Proc, params, parser


def compute_order(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """Rank ``r``'s F / I / W in order: p−1−r warm-up forwards, then per step a forward (while any is
    left) and an input backward, and the oldest held-back W once the step is ≥ r; the held-back W's last."""
    warm = min(p - 1 - r, m)
    ops = [("F", r, j) for j in range(warm)]
    held: list[tuple[str, int, int]] = []
    for k in range(m):
        if warm + k < m:
            ops.append(("F", r, warm + k))
        ops.append(("I", r, k))
        held.append(("W", r, k))
        if k >= r:
            ops.append(held.pop(0))
    return ops + held


def program(r: int, p: int, m: int) -> list[tuple[str, int, int]]:
    """Rank ``r``'s actions ``(kind, stage, microbatch)`` in issue order (harness ``P2P``): torch's
    ``_add_send_recv`` sweep over every rank's :func:`compute_order`, one action per rank per sweep, an
    action taken once its input has been received."""
    todo = {q: compute_order(q, p, m) for q in range(p)}
    out: dict[int, list[tuple[str, int, int]]] = {q: [] for q in range(p)}
    while any(todo.values()):
        progress = False
        for q in range(p):
            if not todo[q]:
                continue
            kind, s, j = todo[q][0]
            need = ("recvF", s, j) if kind == "F" and s > 0 else ("recvB", s, j) if kind == "I" and s < p - 1 else None
            if need is not None and need not in out[q]:
                continue
            out[q].append(todo[q].pop(0))
            progress = True
            if kind == "F" and s < p - 1:
                out[q].append(("sendF", s, j))
                out[q + 1].append(("recvF", s + 1, j))
            elif kind == "I" and s > 0:
                out[q].append(("sendB", s, j))
                out[q - 1].append(("recvB", s - 1, j))
        assert progress, f"no rank can go on: {todo}"
    return out[r]


if __name__ == "__main__":
    a = parser(__doc__).parse_args()
    P = params(a, {"m": 8, "tokens": 4096, "hidden": 4096})
    pr = Proc()
    issue, streams = pr.pipeline(program(pr.rank, pr.world, P["m"]), P["tokens"], P["hidden"], batched=True)
    pr.report("pipeline_zb_h1", {**P, "p": pr.world}, pr.time(issue, streams, a.iters, a.warmup), a.out)
