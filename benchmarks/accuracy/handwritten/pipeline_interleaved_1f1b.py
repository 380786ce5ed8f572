"""Interleaved 1F1B pipeline by hand at p ranks, v model chunks each (stage c·p + r on rank r), as Megatron-LM
issues it with ``overlap_p2p_comm`` (``forward_backward_pipelining_with_interleaving``, microbatch groups of p):
warm-up forwards, then one forward and one backward per step, then cool-down backwards. A step issues the
forward, its ``send_forward_recv_forward``, the backward, its ``send_backward_recv_backward``; each call's ops
are lone ``isend``/``irecv`` in ``_p2p_ops`` order (even ranks send first, odd ranks receive first), as
``schedsim execute`` lowers ``p2p: overlapped``, the default for interleaving. Every p2p kind has its own
stream; a recv waits for the compute issued before it, and a forward (backward) for every op of the rank's
previous forward (backward) call (harness ``waits_for`` with ``overlapped``). Stage work of
schedules/pipeline_schedules.yaml with ``chunks: 2``: each chunk's F, I, W is one bf16 GEMM with half the
columns (harness ``stage_gemms``).

    torchrun --nproc-per-node 2 benchmarks/accuracy/handwritten/pipeline_interleaved_1f1b.py --out i1f1b.json --set m=8
"""

from harness import Proc, params, parser


def program(r: int, p: int, m: int, v: int = 2) -> list[tuple[str, int, int]]:
    """Rank ``r``'s actions ``(kind, stage, microbatch)`` in issue order (harness ``P2P``).

    Megatron-LM ``megatron/core/pipeline_parallel/schedules.py`` at core_v0.9.0 (NVIDIA/Megatron-LM
    1afee592, ``forward_backward_pipelining_with_interleaving`` with ``config.overlap_p2p_comm``): the
    schedule table (per group of p microbatches, every chunk in turn), ``min(2·(p−r−1) + (v−1)·p, v·m)``
    warm-up forwards, and which recvs a call makes (``recv_tensor_from_previous_stage``: the first / last
    rank wraps around to the next chunk; no recv in the last iteration). A warm-up forward is followed by
    its ``send_forward_recv_forward``, the last one also by a ``send_backward_recv_backward`` that receives
    the first gradient; a steady step issues forward, ``send_forward_recv_forward``, backward,
    ``send_backward_recv_backward``; a cool-down backward is followed by its ``send_backward_recv_backward``.
    The k-th recv into a chunk feeds its microbatch k.
    """
    table = [(j, c) for g in range(0, m, p) for c in range(v) for j in range(g, min(g + p, m))]
    total, first, last = v * m, r == 0, r == p - 1
    warm = min(2 * (p - r - 1) + (v - 1) * p, total)
    out: list[tuple[str, int, int]] = []
    nrecv = {"recvF": [0] * v, "recvB": [0] * v}

    def chunk(k: int, fwd: bool) -> int:
        c = table[k % total][1]
        return c if fwd else v - 1 - c

    def next_recv(k: int, fwd: bool) -> tuple[bool, int]:
        """Megatron's recv_tensor_from_previous_stage: (whether to recv, the chunk it feeds)."""
        if not (first if fwd else last):
            return True, chunk(k + 1, fwd)
        c = chunk(k + 1, fwd) if k < p - 1 else chunk(k - (p - 1), fwd)
        recv = k >= p - 1 and c != (v - 1 if fwd else 0)
        return recv, c + (1 if fwd else -1)

    def recv(kind: str, c: int) -> tuple[str, int, int]:
        nrecv[kind][c] += 1
        return kind, c * p + r, nrecv[kind][c] - 1

    def fwd(k: int) -> tuple[str, int, int]:
        return "F", table[k][1] * p + r, table[k][0]

    def bwd(k: int) -> tuple[str, int, int]:
        return "B", (v - 1 - table[k][1]) * p + r, table[k][0]

    def send_f(k: int) -> tuple[str, int, int] | None:
        _, s, j = fwd(k)
        return None if s == p * v - 1 else ("sendF", s, j)

    def send_b(k: int) -> tuple[str, int, int] | None:
        _, s, j = bwd(k)
        return None if s == 0 else ("sendB", s, j)

    def call(sb: tuple | None = None, rf: tuple | None = None, sf: tuple | None = None,
             rb: tuple | None = None) -> None:
        """One Megatron p2p call, its ops as lone isend/irecv in _p2p_ops order."""
        ops = [sf, rf, sb, rb] if r % 2 == 0 else [rf, sf, rb, sb]
        out.extend(o for o in ops if o is not None)

    if not first:
        call(rf=recv("recvF", 0))
    for k in range(warm):
        out.append(fwd(k))
        rf, cf = next_recv(k, True)
        rb = k == warm - 1 and warm < total and not last  # the last warm-up call receives the first gradient
        call(rf=recv("recvF", cf) if rf and k != total - 1 else None, sf=send_f(k))
        call(rb=recv("recvB", v - 1) if rb else None)  # a call of no op issues nothing
    for k in range(total - warm):
        out.append(fwd(warm + k))
        rf, cf = next_recv(warm + k, True)
        call(rf=recv("recvF", cf) if rf and k != total - warm - 1 else None, sf=send_f(warm + k))
        out.append(bwd(k))
        rb, cb = next_recv(k, False)
        call(send_b(k), rb=recv("recvB", cb) if rb else None)
    if warm == total and not last:
        call(rb=recv("recvB", v - 1))
    for k in range(total - warm, total):
        out.append(bwd(k))
        rb, cb = next_recv(k, False)
        call(send_b(k), rb=recv("recvB", cb) if rb and k != total - 1 else None)
    return out


if __name__ == "__main__":
    a = parser(__doc__).parse_args()
    P = params(a, {"m": 8, "tokens": 4096, "hidden": 4096, "chunks": 2})
    pr = Proc()
    prog = program(pr.rank, pr.world, P["m"], P["chunks"])
    issue, streams = pr.pipeline(prog, P["tokens"], P["hidden"], P["chunks"], overlapped=True)
    pr.report("pipeline_interleaved_1f1b", {**P, "p": pr.world}, pr.time(issue, streams, a.iters, a.warmup), a.out)
