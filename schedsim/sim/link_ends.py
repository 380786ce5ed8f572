"""The waves loop's link-end columns (rule nccl-sms, :mod:`schedsim.gpu.rules`): every transfer's link ends as CSR,
the reverse ends of send/recv and each member slot's positions among its group's ends, as arrays the compiled loop
(``schedsim.sim._cwaves``) reads. Moved out of :mod:`schedsim.sim.waves_columns` (its preparation calls them)."""

from __future__ import annotations

import itertools

import numpy as np

I64 = np.int64
I32 = np.int32


def link_end_columns(gptr: np.ndarray, gidx: np.ndarray, rank: np.ndarray, C: int, one_way: float,
               node: np.ndarray | None = None, groups: list[tuple[int, ...]] | None = None,
               ginv: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Rule nccl-sms's link ends (``4·rank + 2·tier + d``) of every transfer as CSR, the reverse ends of send/recv (when
    ``one_way`` ≠ 1), and per member slot the positions of its rank's ends in its group's (CSR), as
    :func:`schedsim.gpu.rules.link_ends` (``node``: rank -> node, or None for one tier) and the loop's
    lookup give them. ``groups``: each collective's group as written, where a symmetric lowering left some of its
    ranks out (:attr:`schedsim.lower.program.Program.represented`): whether it spans nodes is the group's;
    with ``ginv`` (int array, shape C), ``groups`` are the distinct groups and collective c's is ``groups[ginv[c]]``
    (a group looked at once, not once per collective)."""
    nc = int(gptr[C])
    cr = rank[gidx[:nc]].astype(I64)
    pr = rank[gidx[nc:]].astype(I64).reshape(-1, 2)  # (sender, receiver)
    sizes = np.diff(gptr[:C + 1]).astype(I64)
    span = np.zeros(C, bool)
    if node is not None and nc:
        nd = node[cr]
        nz = sizes > 0
        starts = gptr[:C][nz].astype(I64)
        span[nz] = np.minimum.reduceat(nd, starts) != np.maximum.reduceat(nd, starts)
        if groups is not None:  # all groups at once: one of 100,000 ranks is one of few
            glen = np.fromiter(map(len, groups), I64, len(groups))
            gnd = node[np.fromiter(itertools.chain.from_iterable(groups), I64, int(glen.sum()))]
            gz = glen > 0
            gstarts = (np.cumsum(glen) - glen)[gz]
            span = np.zeros(len(groups), bool)
            span[gz] = np.minimum.reduceat(gnd, gstarts) != np.maximum.reduceat(gnd, gstarts)
            if ginv is not None:
                span = span[ginv]
    k = np.where(span, 4, 2).astype(I64)  # ends per member: 2 (scale-up link) or 4 (and the NIC)
    # one count of ends for every member (no group spans nodes, or all do): a member's ends by broadcasting
    kk = int(k[0]) if len(k) and bool((k == k[0]).all()) else 0
    P = len(pr)
    # the loop's int32 where every end, position and pointer fits (made so here: no int64 arrays of the ends to
    # narrow after, each as long as the collectives' members times their ends)
    top = max(int(cr.max()) if nc else 0, int(pr.max()) if P else 0)  # the largest rank with an end
    it = I32 if kk and max(4 * (top + 1), kk * nc + 2 * P + 1) < 2**31 else I64
    if kk:
        km, offk = None, np.arange(kk, dtype=it)  # a member's ends: 2·tier + d
        ends: np.ndarray = np.empty(kk * nc + 2 * P, it)  # the collectives' ends, then the pairs'
        np.add((4 * cr.astype(it))[:, None], offk, out=ends[:kk * nc].reshape(nc, kk))
        cends: np.ndarray = ends[:kk * nc]
    else:
        km = np.repeat(k, sizes)
        first = np.cumsum(km) - km  # each member's first end, over all collective ends
        off = np.arange(int(km.sum()), dtype=I64) - np.repeat(first, km)  # 0..km-1 within a member: 2·tier + d
        cends = np.repeat(4 * cr, km) + off
    t = 2 * (node[pr[:, 0]] != node[pr[:, 1]]).astype(I64) if node is not None and len(pr) else 0
    se, re_ = 4 * pr[:, 0] + t, 4 * pr[:, 1] + t + 1
    pends = np.stack([np.minimum(se, re_), np.maximum(se, re_)], 1).reshape(-1)  # each pair's two ends in order
    if km is None:
        ends[len(cends):] = pends
    else:
        ends = np.concatenate([cends, pends])
    del cends
    cptr = np.concatenate([np.zeros(1, I64), np.cumsum(k * sizes)])
    eptr = np.concatenate([cptr, cptr[-1] + 2 * np.arange(1, P + 1)])
    if one_way != 1.0:
        rev = pends ^ 1
        rptr = np.concatenate([np.zeros(C + 1, I64), 2 * np.arange(1, P + 1)])
    else:
        rev, rptr = np.zeros(0, I64), np.zeros(C + P + 1, I64)
    if rank_repeats(gptr, cr, C) or (P and (pr[:, 0] == pr[:, 1]).any()):
        return (eptr, ends, rptr, rev, *epos_generic(eptr, ends, gptr, gidx, rank))
    # distinct ranks per group: collective member slot s of a group with k ends per member owns positions
    # k·s .. k·s + k - 1; a send owns the lower end when its rank is below the receiver's
    up = (pr[:, 0] > pr[:, 1]).astype(I64)
    ppos = np.stack([up, 1 - up], 1).reshape(-1)
    if km is None:  # into the arrays the loop reads, in place
        nce = kk * nc
        slot = np.arange(nc, dtype=it)
        slot -= np.repeat(gptr[:C].astype(it), sizes)
        pos = np.empty(nce + 2 * P, it)
        np.add((kk * slot)[:, None], offk, out=pos[:nce].reshape(nc, kk))
        del slot
        pos[nce:] = ppos
        pptr = np.empty(nc + 1 + 2 * P, it)  # each member's ends' end (from 0), then each pair end's
        pptr[:nc + 1] = np.arange(0, kk * nc + 1, kk, dtype=it)
        pptr[nc + 1:] = np.arange(nce + 1, nce + 2 * P + 1, dtype=it)
        return eptr, ends, rptr, rev, pptr, pos
    slot = np.arange(nc) - np.repeat(gptr[:C], sizes)
    cpos = np.repeat(km * slot, km) + off
    pos = np.concatenate([cpos, ppos])
    nce = int(km.sum())
    mptr = np.cumsum(km)  # each member's ends' end
    pptr = np.concatenate([np.zeros(1, I64), mptr, nce + np.arange(1, 2 * P + 1)])
    return eptr, ends, rptr, rev, pptr, pos


def rank_repeats(gptr: np.ndarray, cr: np.ndarray, C: int) -> bool:
    """Whether a rank appears twice in one of the first ``C`` groups (CSR ``gptr``; ``cr``: the members' ranks,
    int64). Groups whose ranks ascend strictly (a lowering's collectives, one member per rank in rank order) hold
    none, which one comparison of neighbours shows; only otherwise are the (group, rank) keys sorted (a sort of
    every member: 0.5M at 1M ops, 5M at 10M)."""
    nc = len(cr)
    if nc < 2:
        return False
    rise = cr[1:] > cr[:-1]
    heads = gptr[1:C].astype(I64)  # each group's first member: its pair with the member before it is not compared
    rise[heads[(heads > 0) & (heads < nc)] - 1] = True
    if bool(rise.all()):
        return False
    gid = np.repeat(np.arange(C), np.diff(gptr[:C + 1]))
    key = np.sort(gid * (int(cr.max()) + 1) + cr, kind="stable")  # sorted runs: timsort merges them
    return bool((key[1:] == key[:-1]).any())


def epos_generic(eptr, ends, gptr, gidx, rank):
    """Per member slot, every position in its group's ends that belongs to its rank (any group)."""
    ep, en, gp, rk = eptr.tolist(), ends.tolist(), gptr.tolist(), rank[gidx].tolist()
    out: list[int] = []
    ptr = [0]
    for g in range(len(gp) - 1):
        ge = en[ep[g]:ep[g + 1]]
        for m in range(gp[g], gp[g + 1]):
            out.extend(p for p, e in enumerate(ge) if e >> 2 == rk[m])
            ptr.append(len(out))
    return np.array(ptr, I64), np.array(out, I64)
