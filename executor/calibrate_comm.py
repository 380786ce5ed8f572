"""Collective and p2p measurement for ``schedsim calibrate``: every collective over a size sweep, timed on
the GPU side as the slowest rank's median with each output checked, as nccl-tests-style rows; and the
speedup of one-way p2p over an exchange (:func:`p2p_one_way_speedup`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from executor.calibrate_bench import COLLECTIVES, CalibrateOptions, _Bench
from schedsim.network.nccl_tests import format_table

__all__ = ["gpu_side_repeats", "p2p_one_way_speedup"]

_NCCL_TYPE = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}


def gpu_side_repeats(nbytes: int) -> int:
    """Calls per GPU-side timing of a ``nbytes`` collective: 2**28 / size, between 2 and 200 (so small
    sizes run about 200 back to back and 1 GiB twice). A function of the size alone, so that every
    rank issues the same number of calls."""
    return int(min(200, max(2, 2**28 // max(1, nbytes))))


@dataclass
class _Bufs:
    """The tensors of one collective size on this rank: ``inp`` holds rank + 1 (``count`` float32 elements),
    ``outb`` the full-size result, ``piece`` one rank's share (``per`` = count / n elements)."""

    torch: Any
    dist: Any
    n: int
    r: int
    dev: Any
    count: int
    per: int
    inp: Any
    outb: Any
    piece: Any


@dataclass
class _Case:
    """One collective call as the sweep times and checks it: ``fn`` is the call, ``prep`` resets its
    buffer before the checked call, ``got()`` must equal ``exp()`` after it (the rank-dependent sums
    and copies of ranks' ``r + 1`` values); ``redop`` and ``root`` are nccl-tests' columns."""

    fn: Callable[[], Any]
    exp: Callable[[], Any]
    got: Callable[[], Any]
    prep: Callable[[], Any] = lambda: None
    redop: str = "sum"
    root: int = -1


def _tri(b: _Bufs) -> float:
    """Σ (r + 1) over the ranks: what a sum of every rank's ``inp`` value gives."""
    return b.n * (b.n + 1) / 2


def _ranks_in_order(b: _Bufs) -> Any:
    """Each rank's value r + 1 repeated over its share: the result of a gather or an all-to-all."""
    return b.torch.arange(1, b.n + 1, device=b.dev, dtype=b.torch.float32).repeat_interleave(b.per)


def _all_reduce(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.all_reduce(b.outb), lambda: b.torch.full_like(b.outb, _tri(b)), lambda: b.outb,
                 prep=lambda: b.outb.fill_(float(b.r + 1)))


def _all_gather(b: _Bufs) -> _Case:
    ag = getattr(b.dist, "all_gather_single", None) or b.dist.all_gather_into_tensor
    src = b.torch.full((b.per,), float(b.r + 1), device=b.dev)
    return _Case(lambda: ag(b.outb, src), lambda: _ranks_in_order(b), lambda: b.outb, redop="none")


def _reduce_scatter(b: _Bufs) -> _Case:
    rs = getattr(b.dist, "reduce_scatter_single", None) or b.dist.reduce_scatter_tensor
    return _Case(lambda: rs(b.piece, b.inp), lambda: b.torch.full_like(b.piece, _tri(b)), lambda: b.piece)


def _all_to_all(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.all_to_all_single(b.outb, b.inp), lambda: _ranks_in_order(b), lambda: b.outb,
                 redop="none")


def _broadcast(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.broadcast(b.outb, src=0), lambda: b.torch.full_like(b.outb, 1.0), lambda: b.outb,
                 prep=lambda: b.outb.fill_(float(b.r + 1)), redop="none", root=0)


def _reduce(b: _Bufs) -> _Case:
    return _Case(lambda: b.dist.reduce(b.outb, dst=0),
                 lambda: b.torch.full_like(b.outb, _tri(b) if b.r == 0 else b.r + 1), lambda: b.outb,
                 prep=lambda: b.outb.fill_(float(b.r + 1)), root=0)


def _p2p_unbatched(b: _Bufs) -> _Case:
    """One lone isend (even rank) / irecv (odd rank) per pair; the sender checks nothing."""
    peer = b.r + 1 if b.r % 2 == 0 else b.r - 1
    if b.r % 2 == 0:
        def fn() -> Any:
            return b.dist.isend(b.inp, peer).wait()
    else:
        def fn() -> Any:
            return b.dist.irecv(b.outb, peer).wait()
    exp = lambda: b.torch.full_like(b.outb, float(peer + 1))  # noqa: E731
    return _Case(fn, exp, (lambda: b.outb) if b.r % 2 else exp, redop="none")


def _sendrecv(b: _Bufs) -> _Case:
    """The batched ring: send to r + 1, receive from r − 1."""
    nxt, prv = (b.r + 1) % b.n, (b.r - 1) % b.n

    def fn() -> None:
        ops = [b.dist.P2POp(b.dist.isend, b.inp, nxt), b.dist.P2POp(b.dist.irecv, b.outb, prv)]
        for w in b.dist.batch_isend_irecv(ops):
            w.wait()

    return _Case(fn, lambda: b.torch.full_like(b.outb, float(prv + 1)), lambda: b.outb, redop="none")


#: How each kind of :data:`COLLECTIVES` is called and checked.
_CASES: dict[str, Callable[[_Bufs], _Case]] = {
    "all_reduce": _all_reduce, "all_gather": _all_gather, "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all, "broadcast": _broadcast, "reduce": _reduce, "p2p_unbatched": _p2p_unbatched,
    "sendrecv": _sendrecv,
}


def _sweep_sizes(o: CalibrateOptions, n: int) -> list[int]:
    """Message sizes in bytes: ``min_bytes`` (at least 4 per rank) times powers of ``factor`` up to
    ``max_bytes`` (64 MiB with ``quick``)."""
    sizes = []
    s = max(4 * n, o.min_bytes)
    top = min(o.max_bytes, 64 * 2**20) if o.quick else o.max_bytes
    while s <= top:
        sizes.append(int(s))
        s *= o.factor
    return sizes


def _measure(b: _Bench, o: CalibrateOptions, kind: str, bufs: _Bufs) -> dict[str, Any] | None:
    """Check, then time one collective at one size on every rank; the nccl-tests row on rank 0 (slowest
    rank's time; busbw = algbw × the kind's bus factor), None elsewhere."""
    from schedsim.network.links import bus_factor

    ctx = b.ctx
    case = _CASES[kind](bufs)
    ctx.barrier()
    case.prep()
    case.fn()
    b.sync()
    wrong = int((case.got() != case.exp()).sum().item()) if kind != "reduce" or bufs.r == 0 else 0
    nbytes = bufs.count * 4
    iters = o.iters if nbytes <= 64 * 2**20 else max(5, o.iters // 4)
    ctx.barrier()
    t_host = b.time_one(case.fn, iters=iters, warmup=2)
    t = b.time_gpu_side(case.fn, gpu_side_repeats(nbytes)) if b.cuda else t_host
    allp = ctx.gather((t, wrong, t_host))
    if allp is None:
        return None
    tmax = max(x[0] for x in allp)
    algbw = nbytes / tmax / 1e9
    busbw = algbw * (1.0 if kind == "p2p_unbatched" else bus_factor(kind, bufs.n))
    return {"size": nbytes, "count": bufs.count, "type": "float", "redop": case.redop, "root": case.root,
            "time_us": tmax * 1e6, "algbw": algbw, "busbw": busbw, "wrong": sum(x[1] for x in allp),
            "time_single_launch_us": max(x[2] for x in allp) * 1e6}


def _sweep_collectives(b: _Bench, o: CalibrateOptions, log: Callable[[str], None]) -> dict[str, list[dict[str, Any]]]:
    """All ranks: busbw sweep per collective (:data:`_CASES`); returns nccl-tests-style rows per collective
    (on rank 0)."""
    torch = b.torch
    import torch.distributed as dist

    ctx = b.ctx
    n, r = ctx.world, ctx.rank
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in COLLECTIVES:
        if kind == "p2p_unbatched" and n % 2:
            continue
        rows = []
        for size in _sweep_sizes(o, n):
            count = size // 4
            count -= count % n
            if count == 0:
                continue
            per = count // n
            dev = ctx.device
            bufs = _Bufs(torch, dist, n, r, dev, count, per, torch.full((count,), float(r + 1), device=dev),
                         torch.empty(count, device=dev), torch.empty(per, device=dev))
            row = _measure(b, o, kind, bufs)
            if row is not None:
                rows.append(row)
        if r == 0:
            log(format_table(rows, f"{kind} over {n} ranks ({ctx.backend}), schedsim calibrate"))
            out[kind] = rows
    return out


def p2p_one_way_speedup(one_way_us: dict[int, float], exchange_us: dict[int, float]) -> tuple[float, int] | None:
    """``(speedup, size)``: the two-way exchange's time over the one-way send/recv's time at the largest size
    both sweeps timed (bytes), at least 1.0; None when they share no size or a time is not positive.

    ``exchange_us`` is the ``sendrecv`` sweep (one ``batch_isend_irecv`` of a send to r+1 and a recv from
    r-1: at 2 ranks both directions of the link), ``one_way_us`` the unbatched isend/irecv sweep (one
    direction). Profile field ``nccl.p2p_one_way_speedup`` (:mod:`schedsim.hardware.profile`).

    >>> p2p_one_way_speedup({1024: 10.0, 2**20: 20.0}, {1024: 11.0, 2**20: 30.0})
    (1.5, 1048576)
    """
    common = [s for s in one_way_us if s in exchange_us and one_way_us[s] > 0 and exchange_us[s] > 0]
    if not common:
        return None
    size = max(common)
    return max(1.0, exchange_us[size] / one_way_us[size]), size
