"""Oracle: numpy forms of the compiled preparation helpers of the ``waves`` loop (``_cwaves.succ_csr``,
``_cwaves.kernels``, ``_cwaves.stream_reached``, rule host-issue's issue times ``_cwaves.issue_times`` (with its
prefix sums :func:`issue_sums`), rule
communicator-order's edges ``_cwaves.fifo_edges`` as :func:`comm_fifo_columns`, the static checks' Kahn sweep
``_cwaves.acyclic``, rule hardware-queues's stream numbering ``_cwaves.rank_codes``, the pipeline emitter's input
lookups ``_cwaves.first_set``, torch's send/recv rows of a pipeline order ``_cwaves.torch_rows`` as
:func:`torch_lower_cols`, the walk of the first pass's bound ``_cwaves.end_bound``, the lowering's stream edges
:func:`stream_edges`, which ``_cwaves.fifo_edges`` makes), with the C functions'
signatures and output buffers, so a test can put them in place of the compiled ones (:func:`with_numpy_helpers`)
and hold the timelines equal. The package calls the compiled helpers only (:mod:`schedsim.sim.waves_columns`,
:mod:`schedsim.gpu.rules`, :mod:`schedsim.gpu.host`, :mod:`schedsim.lower.pipeline`,
:mod:`schedsim.lower.pipeline_steps`); these were its fallbacks for a build without them.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from schedsim.arrays import first_codes
from schedsim.gpu import rules as gm
from schedsim.lower.pipeline_plan import PipelinePlan
from schedsim.lower.pipeline_steps import StepCols, _torch_producers

__all__ = ["acyclic", "comm_fifo_columns", "end_bound", "fifo_edges", "first_set", "issue_sums", "issue_times",
           "kernels", "rank_codes", "stream_reached", "succ_csr", "torch_lower_cols", "with_numpy_helpers"]

I32, I64 = np.int32, np.int64


def _csr_of(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows 0..n-1 of ``keys`` (row of each item) as CSR: ``(ptr, idx)``, idx the items of each row in order."""
    idx = gm.stable_order(keys).astype(I64)
    ptr = np.zeros(n + 1, I64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, idx


def succ_csr(n: int, edges: tuple[np.ndarray, ...], sid: np.ndarray, sptr: np.ndarray, sidx: np.ndarray,
             npred: np.ndarray, xdeps: np.ndarray) -> int:
    """``_cwaves.succ_csr``: the (src, dst) pairs of ``edges`` as CSR rows of distinct successors in ascending order
    (one sort of the keys ``src·n + dst``), written to ``sptr`` (n + 1), ``sidx`` (room for every edge), ``npred``
    (distinct predecessors) and ``xdeps`` (those on another stream, ``sid``); returns the distinct edge count."""
    key = np.concatenate([np.asarray(x, I64).reshape(-1, 2) @ np.array([n, 1], I64) for x in edges]) if edges \
        else np.zeros(0, I64)
    key = np.unique(key)
    s, d = np.divmod(key, n) if n else (key, key)
    ptr = np.zeros(n + 1, I64)
    np.cumsum(np.bincount(s, minlength=n), out=ptr[1:])
    sptr[:] = ptr
    sidx[:len(d)] = d
    npred[:] = np.bincount(d, minlength=n)
    xdeps[:] = np.bincount(d[sid[s] != sid[d]], minlength=n)
    return len(d)


def kernels(dims: tuple[int, ...], rank: np.ndarray, batch: np.ndarray, res: np.ndarray, tmpl: np.ndarray,
            work: np.ndarray, opq: np.ndarray, tctas: np.ndarray, twaves: np.ndarray, tmem: np.ndarray,
            *out: np.ndarray) -> tuple[int, int]:
    """``_cwaves.kernels``: kernels numbered by first appearance (a rank's ``p2p_batch`` is one, every other op its
    own), each taking its head op's resource, rank, template and work; queues numbered by first appearance of
    (rank, ``opq`` of the head). Writes ``kern, kptr, kidx, ktype, krank, kneed, kleft, ktau, kmem, kq, qptr, qidx``
    (``out``; with no batch ``kidx``, ``ktype``, ``krank`` may be empty) and returns ``(K, Q)``. ``dims``: ``(N,
    world, nb, C[, wt])``; ``wt`` true: ``work`` per template (an op's is ``work[tmpl[i]]``)."""
    N, world, nb, C = dims[:4]
    if len(dims) > 4 and dims[4]:
        work = work[tmpl]
    if nb > 0 and (batch >= 0).any():
        bi = np.flatnonzero(batch >= 0)
        bk = rank[bi].astype(I64) * nb + batch[bi]
        first = np.full(world * nb, N, I64)
        np.minimum.at(first, bk, bi)  # each (rank, batch)'s first op
        head_of = np.arange(N)
        head_of[bi] = first[bk]
        kern = (np.cumsum(head_of == np.arange(N)) - 1)[head_of]
        K = int(kern.max()) + 1 if N else 0
        kptr, kidx = _csr_of(kern, K)
    else:  # one kernel per op
        K = N
        kern, kidx, kptr = np.arange(N), np.arange(N), np.arange(N + 1)
    head = kidx[kptr[:-1]]
    ktype, krank, kneed, ht, whead, ohead = res[head], rank[head], np.diff(kptr), tmpl[head], work[head], opq[head]
    comp = ktype == 0
    kleft = np.where(comp, tctas[ht], np.where(ktype == 1, kneed, 0))
    ktau = np.where(comp, whead / twaves[ht], 0.0)
    kmem = np.where(comp, tmem[ht], 0)
    kq = first_codes(krank.astype(I64) * C + ohead) if K else np.zeros(0, I64)
    Q = int(kq.max()) + 1 if K else 0
    qptr, qidx = _csr_of(kq, Q)
    for buf, x in zip(out, (kern, kptr, kidx, ktype, krank, kneed, kleft, ktau, kmem, kq, qptr, qidx), strict=True):
        if len(buf):
            buf[:len(x)] = x
    return K, Q


def stream_reached(qptr: np.ndarray, qidx: np.ndarray, khand: np.ndarray, kern: np.ndarray, call0: np.ndarray,
                   deps_t: np.ndarray) -> None:
    """``_cwaves.stream_reached``: in place, ``deps_t[i] = max(deps_t[i], qreach[kern[i]], call0[i])``, ``qreach[k]``
    the time the queue handed over the kernel before ``k`` in its queue (0 for a queue's first); ``kern`` empty:
    the identity (every op its own kernel)."""
    K = len(khand)
    if K:
        later = np.ones(len(qidx), bool)
        later[qptr[:-1][np.diff(qptr) > 0]] = False  # not a queue's first kernel
        qreach = np.zeros(K)
        qreach[qidx[later]] = khand[qidx[np.flatnonzero(later) - 1]]
        np.maximum(deps_t, qreach[kern] if len(kern) else qreach, out=deps_t)
    np.maximum(deps_t, call0, out=deps_t)


def with_numpy_helpers(ext: Any) -> types.SimpleNamespace:
    """The compiled module ``ext`` with these numpy forms in place of its ``succ_csr``, ``kernels``,
    ``stream_reached``, ``fifo_edges`` and ``issue_times`` (everything else, the loop included, as built).
    ``issue_times`` is read through :func:`schedsim.lower.program.required` (``schedsim.gpu.host._required``),
    not the loop's module: a test puts this one there too."""
    names = {k: getattr(ext, k) for k in dir(ext) if not k.startswith("_")}
    return types.SimpleNamespace(**{**names, "succ_csr": succ_csr, "kernels": kernels,
                                    "stream_reached": stream_reached, "fifo_edges": fifo_edges,
                                    "issue_times": issue_times})


#: Ops per chunk of :func:`issue_sums` (a 6 MiB buffer).
_ISSUE_CHUNK = 1 << 17


def issue_sums(new_rank: np.ndarray, host_s: np.ndarray, ev: np.ndarray, extra: float, switch: np.ndarray,
               sw_s: float, call: np.ndarray, first: np.ndarray, issue: np.ndarray, call0: np.ndarray) -> None:
    """The prefix sums of ``_cwaves.issue_times`` (of :func:`issue_times`): per rank (a run of ops starting where
    ``new_rank``), the prefix sums of each op's six host increments in this order: ``host_s`` (one value broadcast
    when of length 1), ``ev``, ``extra``, ``sw_s`` where ``switch``, ``call``, ``first``; writes the sum through
    the fourth (the call's start) to ``call0`` and through the sixth to ``issue`` (rule host-issue of
    :mod:`schedsim.gpu.host`). The increments of each op are interleaved, (ops, 6), a chunk of whole ranks at a
    time (a rank larger than :data:`_ISSUE_CHUNK` alone), and summed by ``np.cumsum``: the same floats added in
    the same order as the C loop."""
    n = len(new_rank)
    if len(host_s) == 1 and n > 1:
        host_s = np.broadcast_to(host_s, (n,))
    bounds = np.flatnonzero(new_rank).tolist() + [n]
    buf = np.empty((0, 6))
    i = 0
    while i < len(bounds) - 1:
        a, j = bounds[i], i + 1
        while j < len(bounds) - 1 and bounds[j + 1] - a <= _ISSUE_CHUNK:
            j += 1
        b = bounds[j]
        if len(buf) < b - a:
            buf = np.empty((max(b - a, min(n, _ISSUE_CHUNK)), 6))
        inc = buf[:b - a]
        inc[:, 0] = host_s[a:b]
        inc[:, 1] = ev[a:b]
        inc[:, 2] = extra
        inc[:, 3] = 0.0
        inc[switch[a:b], 3] = sw_s
        inc[:, 4] = call[a:b]
        inc[:, 5] = first[a:b]
        flat = inc.reshape(-1)
        for x, y in zip(bounds[i:j], bounds[i + 1:j + 1], strict=True):
            np.cumsum(flat[6 * (x - a):6 * (y - a)], out=flat[6 * (x - a):6 * (y - a)])
        issue[a:b], call0[a:b] = inc[:, 5], inc[:, 3]
        i = j


def issue_times(rank: np.ndarray, stream: np.ndarray, hclass: np.ndarray, repeat: np.ndarray, batch: np.ndarray,
                xdeps: np.ndarray, host_s: np.ndarray, by_class: np.ndarray, per_repeat: np.ndarray,
                first_group: np.ndarray, first_cost: np.ndarray, batch_class: int,
                scalars: tuple[float, float, float, float], issue: np.ndarray, call0: np.ndarray,
                call_extra: np.ndarray | None = None) -> bool:
    """``_cwaves.issue_times`` in numpy (the numpy pass :func:`schedsim.gpu.host.host_issue_columns` ran before the
    compiled one took every input): each op's call from the per-class tables (``by_class[h]``, times its repeat
    where ``per_repeat[h]``, plus ``call_extra``; ``batch_s`` instead at the first op of each (rank, batch) of
    ``batch_class``), the first-call cost of each ``first_group`` at its first op on a rank, and the per-rank sums
    of :func:`issue_sums` (``np.cumsum``). Ranks in any order (each rank's ops in program order; the sums run per
    rank), batch ids of any size; ``repeat`` and ``host_s`` of length n or 1. Always True."""
    ev_s, extra, sw_s, batch_s = scalars
    n = len(rank)
    if not n:
        return True
    rep = np.broadcast_to(repeat, (n,)) if len(repeat) == 1 else repeat
    hs = np.broadcast_to(host_s, (n,)) if len(host_s) == 1 else host_s
    order = np.argsort(rank, kind="stable")
    r, st, h, rp, b, xd, hso = (a[order] for a in (rank, stream, hclass, rep, batch, xdeps, hs))
    new_rank = np.ones(n, bool)
    new_rank[1:] = r[1:] != r[:-1]
    switch = np.zeros(n, bool)
    switch[1:] = (st[1:] != st[:-1]) & ~new_rank[1:]
    call = by_class[h]
    m = per_repeat[h].astype(bool)
    call[m] *= rp[m]
    if call_extra is not None:
        call = call + call_extra[order]
    bm = np.flatnonzero((h == batch_class) & (b >= 0))
    if len(bm):  # one batch_isend_irecv call per batch, paid at its first member on the rank
        _u, firsts = np.unique(np.stack([r[bm], b[bm]]), axis=1, return_index=True)
        call[bm[firsts]] = batch_s
    first = np.zeros(n)
    fg = first_group[h]
    for g, cost in enumerate(first_cost.tolist()):
        idx = np.flatnonzero(fg == g)
        at = np.ones(len(idx), bool)
        at[1:] = r[idx][1:] != r[idx][:-1]  # ranks ascending: a rank's first is where the rank changes
        first[idx[at]] = cost
    iss, c0 = np.empty(n), np.empty(n)
    issue_sums(new_rank, np.ascontiguousarray(hso, np.float64), xd * ev_s, extra, switch, sw_s, call, first, iss, c0)
    issue[order], call0[order] = iss, c0
    return True


def comm_fifo_columns(rank: np.ndarray, comm: np.ndarray, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_cwaves.fifo_edges`` in numpy (the edges in another order): extra ``(before, after)`` op-index edges (two
    int64 arrays) that run each communicator's ops in issue order per rank (rule communicator-order). ``comm``: code
    of the op's communicator (equal codes for equal rank sets; -1: the op is in no communicator order); ``batch``:
    its ``p2p_batch`` code (-1 none). Consecutive ops of one batch on a (rank, communicator) form one entry: every
    op of an entry waits for every op of the previous one."""
    sel = np.flatnonzero(comm >= 0)
    if not len(sel):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = rank[sel].astype(np.int64) * (int(comm.max()) + 1) + comm[sel]
    o = gm.stable_order(key)
    s, k, b = sel[o], key[o], batch[sel][o]
    m = len(s)
    new_key = np.ones(m, bool)
    new_key[1:] = k[1:] != k[:-1]
    new_entry = new_key | (b < 0)
    new_entry[1:] |= b[1:] != b[:-1]
    estart = np.flatnonzero(new_entry)
    eid = np.cumsum(new_entry) - 1
    esize = np.diff(np.append(estart, m))
    has_prev = ~new_key[estart][eid]  # the op's entry is not its key's first
    after = np.flatnonzero(has_prev)
    pe = eid[after] - 1
    cnt = esize[pe]
    v = np.repeat(s[after], cnt)
    off = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    u = s[np.repeat(estart[pe], cnt) + off]
    return u, v


def fifo_edges(rank: np.ndarray, comm: np.ndarray, batch: np.ndarray, out: np.ndarray) -> int:
    """``_cwaves.fifo_edges``: :func:`comm_fifo_columns` written to ``out`` ((room, 2) int64) when they fit; returns
    the edge count, or -1 when the ranks do not ascend."""
    if len(rank) > 1 and not bool(np.all(rank[1:] >= rank[:-1])):
        return -1
    u, v = comm_fifo_columns(rank, comm, batch)
    if len(u) <= len(out):
        out[:len(u), 0], out[:len(u), 1] = u, v
    return len(u)


def stream_edges(rank: np.ndarray, stream: np.ndarray, batch: np.ndarray, is_p2p: np.ndarray, ns: int) -> np.ndarray:
    """The lowering's stream edges (``schedsim.lower.link._stream_edges``, now one pass of ``_cwaves.fifo_edges``) in
    the numpy form it replaced: ``(x, y)`` edges between consecutive ops of one (rank, stream) (``ns`` streams), a
    run of one p2p batch's members taking the edges of the op before it and giving one to the op after it from
    each member, sorted by ``(y, x)``; grouped by (rank, stream) with a stable sort, without sorting the edges."""
    from schedsim.lower.program import stable_order

    N = len(rank)
    key = np.asarray(rank).astype(np.int64) * ns + stream
    o = stable_order(key, (int(np.max(rank)) + 1) * ns if N else 1)
    k = key[o]
    b = np.where(is_p2p, batch, -1)[o]
    first = np.ones(N, bool)
    first[1:] = k[1:] != k[:-1]
    cont = np.zeros(N, bool)
    cont[1:] = ~first[1:] & (b[1:] >= 0) & (b[1:] == b[:-1])
    if not bool(cont.any()):  # no runs: each op's edge comes from the op before it on its stream
        xs = np.empty(N, np.int64)
        xs[o[1:]] = o[:-1]
        xs[o[first]] = -1
        ys = np.flatnonzero(xs >= 0)
        return np.stack([xs[ys], ys], axis=1)
    run = np.cumsum(~cont) - 1  # run id per position
    rstart = np.flatnonzero(~cont)
    rsize = np.diff(np.append(rstart, N))
    prev = np.where(first[rstart], -1, np.arange(len(rstart)) - 1)  # the run before, on the same stream
    pr = prev[run]
    has = np.flatnonzero(pr >= 0)
    start = np.full(N, -1, np.int64)  # per op y: the position in o of the run before it, and that run's size
    start[o[has]] = rstart[pr[has]]
    size = np.zeros(N, np.int64)
    size[o[has]] = rsize[pr[has]]
    ys = np.flatnonzero(start >= 0)
    cnt = size[ys]
    tot = int(cnt.sum())
    off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return np.stack([o[np.repeat(start[ys], cnt) + off], np.repeat(ys, cnt)], axis=1).astype(np.int64, copy=False)


def acyclic(n: int, edges: np.ndarray) -> bool:
    """``_cwaves.acyclic`` (:func:`schedsim.lower.checks._acyclic`) in Python: Kahn's sweep over ``edges``
    ((E, 2) int64, ``src -> dst``) on ``n`` nodes; True when every node is reached (no cycle)."""
    o = np.argsort(edges[:, 0], kind="stable")
    dst = edges[o, 1].tolist()
    ptr = np.zeros(n + 1, I64)
    np.cumsum(np.bincount(edges[:, 0], minlength=n), out=ptr[1:])
    p = ptr.tolist()
    indeg = np.bincount(edges[:, 1], minlength=n).tolist()
    stack = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    pop, push = stack.pop, stack.append
    while stack:
        a = pop()
        seen += 1
        for k in range(p[a], p[a + 1]):
            b = dst[k]
            d = indeg[b] - 1
            indeg[b] = d
            if not d:
                push(b)
    return seen == n


def torch_lower_cols(plan: PipelinePlan, max_sweeps: int | None = None) -> StepCols | None:
    """``_cwaves.torch_rows`` (:func:`schedsim.lower.pipeline_steps._torch_lower_cols`) in numpy: the sweep of
    every step solved per rank with a running maximum, repeated until nothing changes (each round carries the
    waits one rank further, so an order settles within about twice its stage count), then each rank's steps,
    sends and recvs sorted by (rank, sweep, rank of the step that issued them, sub-order). None when the sweeps
    do not settle within ``max_sweeps`` rounds (default ``2 × stages + 64``): a wait cycle (the C returns None
    for a cycle only)."""
    c = plan.cols
    assert c is not None
    P, NS = plan.p, plan.num_stages
    n = len(c.typ)
    busy = np.flatnonzero(c.typ >= 0)
    t, st, j, rk = c.typ, c.stage, c.mb, c.rank
    prod, adj = _torch_producers(plan)
    has = prod >= 0
    pr = np.maximum(prod, 0)
    rounds = 2 * NS + 64 if max_sweeps is None else max_sweeps
    start = np.cumsum(c.counts) - np.array(c.counts, np.int64)
    k = np.arange(n) - np.repeat(start, c.counts)
    L = max(c.counts) if c.counts else 0
    sweep = k.copy()
    for _ in range(rounds):
        need = np.where(has, sweep[pr] + adj, -1) - k
        g = np.full((P, L), -1, np.int64)
        g[rk, k] = need
        new = np.maximum(np.maximum.accumulate(g, axis=1)[rk, k], 0) + k
        if np.array_equal(new, sweep):
            break
        sweep = new
    else:
        return None
    s2r = np.array([plan.s2r[x] for x in range(NS)] + [-1], np.int64)
    tb, sb, jb, rb = t[busy], st[busy], j[busy], rk[busy]
    key = sweep[busy] * P + rb
    fs = (tb == 0) & (sb < NS - 1)
    fs[fs] = s2r[sb[fs] + 1] != rb[fs]
    bs = ((tb == 1) | (tb == 2)) & (sb > 0)
    bs[bs] = s2r[sb[bs] - 1] != rb[bs]
    sends = fs | bs
    peer_st = np.where(fs, sb + 1, sb - 1)[sends]
    # rows: the steps (sub-order 0), their sends (1), the recvs on the receivers (2), ordered by one combined
    # key (rank, key, sub-order)
    span = 3 * (int(key.max()) + 1 if len(key) else 1)
    ks = key[sends]
    rows_key = np.concatenate([rb * span + 3 * key, rb[sends] * span + 3 * ks + 1, s2r[peer_st] * span + 3 * ks + 2])
    fw = fs[sends]
    rows_typ = np.concatenate([tb, np.where(fw, 4, 6), np.where(fw, 5, 7)])
    rows_st = np.concatenate([sb, sb[sends], peer_st])
    rows_mb = np.concatenate([jb, jb[sends], jb[sends]])
    o = np.argsort(rows_key, kind="stable")
    rr, ty = rows_key[o] // span, rows_typ[o]
    comm = (ty >= 4).astype(np.int64)
    cnt = np.cumsum(comm)
    first_row = np.searchsorted(rr, np.arange(P))
    before = np.concatenate([[0], cnt])[first_row]  # comms on earlier ranks
    bid = np.where(comm > 0, cnt - before[rr], -1)
    return StepCols(rr, ty, rows_st[o], rows_mb[o], bid)


def first_set(sets: np.ndarray, cls: np.ndarray, rank: np.ndarray, stage: np.ndarray, mb: np.ndarray, val: np.ndarray,
              cand: np.ndarray, K: int, NS: int, M: int, dep: np.ndarray) -> bool:
    """``_cwaves.first_set`` (:meth:`schedsim.lower.pipeline._FastEmitter._inputs`) in numpy, on a dense table of
    the event that sets each key: False, ``dep`` untouched, when a key is set twice; else for each event of a class
    (``cls``, -1 none) ``dep[e] = val[s]`` for the first of its candidates ``cand`` ((classes, K, 3) int64: stage
    offset, code, rule; a code of -1 ends the list; rule 1 only above stage 0, 2 only below stage NS - 1) that an
    earlier event ``s`` on the same rank set, each candidate looked up at once for the events still without one."""
    E, space = len(sets), (NS + 2) * 7 * M
    if E and int(np.bincount(sets, minlength=space).max()) > 1:
        return False
    at = np.full(space, E, I64)  # E: no event sets the key (read through a clipped take below)
    at[sets] = np.arange(E)
    tab = np.asarray(cand, I64).reshape(-1, K, 3)
    for c in range(len(tab)):
        pend = np.flatnonzero(cls == c)
        for ds, cd, rule in tab[c].tolist():
            if cd < 0 or not len(pend):
                break
            s_s, j_s = stage[pend], mb[pend]
            e = at[((s_s + ds + 1) * 7 + cd) * M + j_s]
            ok = (e < pend) & (np.take(rank, e, mode="clip") == rank[pend])  # e = E clipped: fails e < pend
            if rule:
                ok &= s_s > 0 if rule == 1 else s_s < NS - 1
            dep[pend[ok]] = np.take(val, e, mode="clip")[ok]
            pend = pend[~ok]
    return True


def rank_codes(rank: np.ndarray, key: np.ndarray, out: np.ndarray) -> bool:
    """``_cwaves.rank_codes`` (:func:`schedsim.gpu.rules.stream_queue_columns`) in numpy: ``out[i]`` = how many
    distinct keys rank ``rank[i]``'s ops showed before ``key[i]`` first appeared on that rank, in program order;
    ``rank``, ``key`` (>= 0) int64 of one length, ranks in any order (the C takes them ascending). True."""
    rank, key = np.asarray(rank, I64), np.asarray(key, I64)
    if not len(rank):
        return True
    _u, first, inv = gm.unique_keys(rank * (int(key.max()) + 1) + key)
    order = np.argsort(first, kind="stable")  # the (rank, key) pairs in order of first appearance
    r = rank[first[order]]
    o2 = np.argsort(r, kind="stable")  # grouped by rank, first appearance within
    rs = r[o2]
    start = np.ones(len(rs), bool)
    start[1:] = rs[1:] != rs[:-1]
    pos = np.arange(len(rs)) - np.maximum.accumulate(np.where(start, np.arange(len(rs)), 0))
    num = np.empty(len(rs), I64)
    num[order[o2]] = pos
    out[:] = num[inv]
    return True


def end_bound(key: np.ndarray, d: np.ndarray, rel: np.ndarray) -> float:
    """``_cwaves.end_bound``: the walk of :func:`schedsim.sim.waves_columns.latest_end_bound` over each
    (rank, stream)'s ops (``key``: their codes, each code's ops consecutive; ``d`` each op's least duration, ``rel``
    its release): per run of equal keys with a nonzero ``d``, the largest ``max_j (rel_j - Σ_{first..j-1} d) +
    Σ_{first..i} d`` over its ops ``i`` with ``d_i > 0``; the largest over the runs (-inf: none). The package's form
    until the compiled walk replaced it (a Python loop over the runs, 1.5 ms on a search point)."""
    n = len(key)
    cut = np.flatnonzero(key[1:] != key[:-1]) + 1
    best = -np.inf
    for lo, hi in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [n])).tolist(), strict=True):
        dj = d[lo:hi]
        if not dj.any():
            continue
        c = np.cumsum(dj)  # Σ_{first..i} d
        run = np.maximum.accumulate(rel[lo:hi] - (c - dj))  # max_j (release_j - Σ_{first..j-1} d)
        best = max(best, float((run + c)[dj > 0].max()))
    return best
