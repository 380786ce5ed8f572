"""The ``waves`` run fed straight from a :class:`~schedsim.lower.program.Program`'s columns (no :class:`Op` objects):
the one path of the ``waves`` model (:func:`schedsim.sim.engine.simulate`).

This module builds the flat int32/float64 arrays the compiled loop (:mod:`schedsim.sim._cwaves`) reads, with
numpy over the Program's columns (per-op lists and :class:`Op` objects cost ~10× the compiled loop at a million
ops):

* cost inputs, CTA counts and call classes are per *template* (what instances share), so the rule functions of
  :mod:`schedsim.gpu.rules` (:func:`~schedsim.gpu.kernels.kernel_ctas`,
  :meth:`~schedsim.gpu.cost.CostModel.duration`, :func:`~schedsim.gpu.host.host_class`) run once per class of
  equal templates (:func:`template_classes`: a ``foreach`` makes one template per iteration, all alike; a
  send/recv once per class and rank pair, as its time depends on the link) and are broadcast;
* host issue times, hardware queues and communicator-order edges come from the column forms of rules host-issue,
  hardware-queues and communicator-order (:func:`~schedsim.gpu.host.host_issue_columns`,
  :func:`~schedsim.gpu.rules.stream_queue_columns`, and ``_cwaves.fifo_edges`` (:func:`_fifo`)), whose numpy and
  Op-list forms the oracle's Op-list path calls;
* kernels (a ``p2p_batch`` of a rank is one), transfers' link ends and rendezvous groups are integer arrays.

The results are bit-identical to the test oracle's Python loop on per-op lists (``tests/oracle/``:
``test_differential.py``, ``test_waves_columns.py``). Op ids and :class:`Op` objects are built only for a
deadlock message.
"""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from schedsim.errors import DeadlockError
from schedsim.gpu import host as gh
from schedsim.gpu import kernels as gk
from schedsim.gpu import rates as gr
from schedsim.gpu import rules as gm
from schedsim.gpu.cost import CostModel, cost_model
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS, P2P_KINDS, PER_RANK_SIZE
from schedsim.lower.p2p_comms import batch_communicators
from schedsim.lower.program import Program, rendezvous_groups, required, stable_order
from schedsim.sim.host_wait import HostWaits, arrivals, host_wait_columns, wait_shift
from schedsim.sim.link_ends import link_end_columns

if TYPE_CHECKING:
    from schedsim.network.share import LinkShare

__all__ = ["ProgramRun", "categorical", "run_waves_program"]

I64 = np.int64
I32 = np.int32
_COPY_RES = {"h2d": 2, "d2h": 3, "d2d": 4}

#: the most ops for which :func:`run_waves_program` reruns an iteration with cold first calls (rule host-issue,
#: ``launch.cold_first_call_us``): tens of µs once per rank, nothing against a schedule of this many ops. Counted
#: over every rank of the schedule (:func:`schedule_ops`), so a symmetric lowering decides as the full one does.
COLD_RERUN_MAX = 100_000


def schedule_ops(prog: Program) -> int:
    """Ops of the schedule ``prog`` stands for: ``prog.N``, or for a symmetric lowering
    (:attr:`~schedsim.lower.program.Program.represented`) ``N · world / representatives``, the full lowering's
    count (each representative stands for a class of ``world / representatives`` ranks that run alike:
    :func:`schedsim.lower.training.rank_classes` collapses the tp and dp indices whole). What
    :data:`COLD_RERUN_MAX` is compared with."""
    reps = len(prog.represented)
    return prog.N * prog.world_size // reps if reps else prog.N

#: whether the first pass is skipped where :func:`host_surely_waited` proves it would halt (off: the loop runs
#: and halts, the form the tests compare it with)
SKIP_PROVED = True


class ProgramRun(NamedTuple):
    """What the engine's timeline needs from a columnar run (arrays of shape (N,) unless said)."""

    tmpl: np.ndarray  # int64: class of each op's template (:func:`template_classes`)
    tps: list[Op]  # one template per class

    res: np.ndarray  # int64: 0 compute, 1 comm, 2-4 copy engine
    work: np.ndarray  # float64 solo seconds (+ per-node graph overhead); a group's members share its time
    ogrp: np.ndarray  # int64: rendezvous group of each op, -1 none
    start: np.ndarray
    end: np.ndarray
    ready_t: np.ndarray
    binding: np.ndarray  # int64: op that released it, or HOST
    stream_t: np.ndarray
    host_s: np.ndarray | None = None  # per rank: when its host returned from its last call (shape (world,))
    host_call: np.ndarray | None = None  # per op: when its host call returned (the critical path's host calls)
    host_waits: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # rule host-wait: (op rows, from_s, to_s)


def categorical(values: tuple[str, ...], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """A timeline Categorical (distinct strings in order of first use, int32 codes) of interned ``codes``
    into ``values``, as :func:`schedsim.sim.timeline._encode` makes it from the strings."""
    n = len(codes)
    if not n:
        return [], np.zeros(0, np.int32)
    first = np.full(len(values), n, I64)  # codes index ``values``: a table of them, no sort of the rows
    if len(values) <= _FEW:  # a compare per value (a bool argmax stops at the first True)
        for k in range(len(values)):
            eq = codes == k
            at = int(eq.argmax())
            if eq[at]:
                first[k] = at
    else:
        np.minimum.at(first, codes, np.arange(n, dtype=I64))
    used = np.flatnonzero(first < n)
    used = used[np.argsort(first[used], kind="stable")]  # in order of first use
    cats = [values[int(k)] for k in used.tolist()]
    if len(cats) <= 1:
        return cats, np.zeros(n, np.int32)
    if len(used) == len(values) and bool((used == np.arange(len(used))).all()):
        # first used in code order: the codes as they are, not copied where they are int32 already (a Program's
        # read-only stream column, a fresh array of codes)
        return cats, codes.astype(np.int32, copy=False)
    num = np.zeros(len(values), np.int32)
    num[used] = np.arange(len(used), dtype=np.int32)
    return cats, num[codes]


#: Up to this many values :func:`categorical` finds each one's first row by a compare per value (~30 µs per
#: value at 456,704 rows, against ~1 ms for one ``np.minimum.at`` over the rows).
_FEW = 32


#: The template fields every per-template rule reads (:func:`_res_of`, :meth:`CostModel.duration`,
#: :func:`~schedsim.gpu.kernels.kernel_ctas`, :func:`~schedsim.gpu.host.host_class`, the communicator,
#: ``repeat``, ``host_s``, the timeline's bytes and FLOP); templates equal in all of them are one class.
_FIELDS = attrgetter("kind", "group", "root", "nbytes", "flops", "dtype", "m", "n", "k", "batch", "repeat",
                     "duration_s", "direction", "host_s")


def _CLASS_FIELDS(t: Op) -> tuple[Any, ...]:  # noqa: N802 (the attrgetter it was)
    """The fields a rule reads; an all_to_all with per-peer sizes also by its sizes and rank (its links)."""
    got = _FIELDS(t)
    return got if t.splits is None else (*got, t.splits, t.rank)


def template_classes(templates: tuple[Op, ...]) -> tuple[np.ndarray, list[Op]]:
    """``(cls int64[T], reps)``: each template's class (templates equal in every field a rule reads, numbered
    by first appearance) and one template per class, so the rule functions run once per class. A Program
    can hold one template per loop iteration (``mm{i}`` of a ``foreach``: 125,000 of them for 1M ops) that
    all cost the same."""
    codes: dict[tuple, int] = {}
    cls = np.array([codes.setdefault(k, len(codes)) for k in map(_CLASS_FIELDS, templates)], I64)
    first = np.zeros(len(codes), I64)
    first[cls[::-1]] = np.arange(len(cls) - 1, -1, -1)  # the last write wins: each class's first template
    return cls, [templates[i] for i in first.tolist()]


def _res_of(tp) -> int:
    """Resource of a template: 0 compute, 1 communication, 2-4 copy engine (h2d, d2h, d2d)."""
    res = KINDS[tp.kind].resource
    if res == "copy":
        return _COPY_RES[tp.direction or "d2d"]
    return 0 if res == "compute" else 1


def _durations(tps: list[Op], cost: CostModel, tmpl: np.ndarray, rank: np.ndarray, peer: np.ndarray,
               is_p2p: np.ndarray, cid: np.ndarray, comms: list[tuple[int, ...]]) -> np.ndarray:
    """Solo seconds of each op: :meth:`CostModel.duration` once per template class ``tps[tmpl[i]]``, and per
    (class, sender, receiver, communicator) for send/recv (their time depends on the link between the two ranks
    and on the communicator NCCL runs them on: :meth:`CostModel.p2p_duration`; ``cid``/``comms``: a batched one's,
    as :func:`batch_communicators` gives them, -1 for a lone one's pair)."""
    tdur = np.array([0.0 if t.kind in P2P_KINDS else cost.duration(t) for t in tps])
    dur = tdur[tmpl]
    p = np.flatnonzero(is_p2p)
    if len(p):
        is_send = np.array([KINDS[t.kind].sender for t in tps])[tmpl[p]]
        src = np.where(is_send, rank[p], peer[p]).astype(I64)
        dst = np.where(is_send, peer[p], rank[p]).astype(I64)
        c = cid[p].astype(I64) + 1  # 0: a lone send/recv (its pair's communicator)
        W, C = int(max(src.max(), dst.max())) + 1, len(comms) + 1

        def one(k: int) -> float:
            t, s_, d_, c_ = k // (C * W * W), k // (C * W) % W, k // C % W, k % C
            return cost.p2p_duration(replace(tps[t], group=(s_, d_)), comms[c_ - 1] if c_ else None)

        key = ((tmpl[p].astype(I64) * W + src) * W + dst) * C + c
        span = len(tps) * W * W * C
        if span <= 4 * len(p) + 64:  # the keys in use marked in a table of them: no sort, no first rows
            seen = np.zeros(span, bool)
            seen[key] = True
            ks = np.flatnonzero(seen)
            tab = np.zeros(span)
            tab[ks] = [one(k) for k in ks.tolist()]
            dur[p] = tab[key]
            return dur
        _u, first, inv = gm.unique_keys(key)
        vals = np.array([one(int(key[f])) for f in first.tolist()])
        dur[p] = vals[inv]
    return dur


def _communicators(tps: list[Op], world: int, tmpl: np.ndarray, rank: np.ndarray, peer: np.ndarray,
                   batch: np.ndarray, res: np.ndarray, is_p2p: np.ndarray, serial: bool,
                   p2p_comm: tuple[np.ndarray, list[tuple[int, ...]]]) -> np.ndarray:
    """Rule communicator-order's communicator of each op as a code (equal rank sets, equal codes; -1: in no order), as
    :func:`schedsim.gpu.rules.communicator` gives them: a batched send/recv's its process group's (``p2p_comm``,
    :func:`batch_communicators`' result; the world's for an op it gives none)."""
    codes: dict[tuple[int, ...], int] = {}
    tcode = np.array([codes.setdefault(t.group, len(codes)) if t.kind not in P2P_KINDS and _res_of(t) == 1
                      else -1 for t in tps], I64)
    comm = tcode[tmpl] if len(tmpl) else np.zeros(0, I64)
    comm[res != 1] = -1
    pb = is_p2p & (batch >= 0)
    if pb.any():
        cid, ranks_of = p2p_comm
        ids = np.array([codes.setdefault(r, len(codes)) for r in ranks_of] + [-1], I64)
        c = ids[cid[pb]]  # (-1 picks the trailing -1)
        if (c < 0).any():
            c[c < 0] = codes.setdefault(tuple(range(world)), len(codes))
        comm[pb] = c
    lone = np.flatnonzero(is_p2p & (batch < 0))
    if len(lone):
        if serial:
            lo = np.minimum(rank[lone], peer[lone]).astype(I64)
            hi = np.maximum(rank[lone], peer[lone]).astype(I64)
            key = lo * world + hi
            if world * world <= 4 * len(lone) + 64:  # the pairs in use marked in a table of them: no sort
                seen = np.zeros(world * world, bool)
                seen[key] = True
                tab = np.full(world * world, -1, I64)
                ks = np.flatnonzero(seen)
                tab[ks] = [codes.setdefault((k // world, k % world), len(codes)) for k in ks.tolist()]
                comm[lone] = tab[key]  # (numbered by pair, not by first use: codes only tell pairs apart)
            else:
                _u, first, inv = gm.unique_keys(key)
                pc = np.array([codes.setdefault((int(lo[f]), int(hi[f])), len(codes)) for f in first.tolist()], I64)
                comm[lone] = pc[inv]
        else:
            comm[lone] = -1
    return comm



def _succ(prog: Program, fifo: np.ndarray, sid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The DAG's successors plus the communicator-order edges ``fifo`` ((E, 2) int64 pairs), each row sorted and
    without repeats (CSR ``ptr, idx``, int32), each op's predecessor count (int32) and how many of them are on
    another stream than it (``sid``: stream codes; int64), by a counting sort in the compiled ``succ_csr`` (the
    Program's stream and dependency edges as they are, without :attr:`Program.succ`'s networkx order; the pair
    arrays are read as they are: no copies of the edges)."""
    from schedsim.sim.loop import compiled_loop

    N = prog.N
    e = [np.asarray(prog.stream_edges).reshape(-1, 2), np.asarray(prog.dep_edges).reshape(-1, 2),
         fifo.reshape(-1, 2)]  # int32 or int64, read as they are
    E = sum(len(x) for x in e)
    sptr, sidx, npred, xdeps = np.empty(N + 1, I32), np.empty(E, I32), np.empty(N, I32), np.empty(N, I64)
    m = compiled_loop().succ_csr(N, tuple(np.ascontiguousarray(x) for x in e), np.ascontiguousarray(sid, I64), sptr,
                                 sidx, npred, xdeps)
    # the m successors kept alone where repeats were dropped (a view would hold all E through the loop)
    return sptr, sidx[:m].copy() if m < E else sidx, npred, xdeps


def _rank_rows(sptr: np.ndarray, sidx: np.ndarray, rank: np.ndarray, world: int) -> tuple[np.ndarray, np.ndarray]:
    """The successor CSR ``(sptr, sidx)`` (int32, of :func:`_succ`) as rank 0's rows alone, where the ops are ``R``
    per rank in rank order (op ``k·R + j`` is row ``j`` on rank ``k``: a uniform lowering's layout,
    :func:`schedsim.lower.link._link_uniform`) and every rank's rows are rank 0's shifted by ``k·R``: the compiled
    loop then reads op ``i``'s successors as row ``i - rank·R`` plus ``rank·R`` (``_cwaves.c`` LAYOUT 19), and the
    CSR takes 1/world of the memory. Else ``(sptr, sidx)`` as they are. A check over the whole CSR (O(N + E))."""
    N = len(sptr) - 1
    if world < 2 or N < world or N % world:
        return sptr, sidx
    R = N // world
    m0 = int(sptr[R])
    if len(sidx) != world * m0:
        return sptr, sidx
    # a block of ranks at a time (about 2**20 entries), in int32 (every offset and index is below 2**31, int32
    # CSRs): temporaries of a few MiB, not of the whole CSR (at 10M ops they set the preparation's high-water mark)
    step = max(1, (1 << 20) // max(R, m0, 1))
    for lo in range(0, world, step):
        k = np.arange(lo, min(world, lo + step), dtype=I32)[:, None]
        if not (bool((rank[lo * R:(lo + len(k)) * R].reshape(len(k), R) == k).all()) and
                bool((sptr[lo * R:(lo + len(k)) * R].reshape(len(k), R) - k * I32(m0) == sptr[:R]).all()) and
                bool((sidx[lo * m0:(lo + len(k)) * m0].reshape(len(k), m0) - k * I32(R) == sidx[:m0]).all())):
            return sptr, sidx
    return sptr[:R + 1].copy(), sidx[:m0].copy()


def _kernels(tps, tres, world, tmpl, rank, batch, res, work, opq, C, cost, sms, per_t=False):
    """Kernels (one per op, one per ``p2p_batch`` of a rank) with CTAs, wave time, memory-boundness and
    hardware queue (rules hardware-queues, cta-count, hbm-share), as the oracle's Op-list form makes them: the
    loop's int32 buffers
    (``krank`` is ``rank`` itself when every op is its own kernel) and ``ktau`` float64 seconds, in one O(N)
    pass of the compiled ``kernels``. ``tres``: each template's resource
    (a collective of one rank's as rule one-rank-collective gives it). ``work``: the ops' solo seconds (float64),
    per op, or per template where ``per_t`` (an op's is ``work[tmpl[i]]``: read so by the compiled ``kernels``).

    The loop's compact forms (``_cwaves.c``, ``W``): when every op is its own kernel (K = N, in op order),
    ``kern``, ``kptr`` and ``kidx`` (the identity) are empty and ``kneed`` is ``[1]``; ``ktail`` is one entry when
    every kernel's is 0, and ``kmem``, ``ktail_tau``, ``kgain`` and ``ktau``, which the loop reads for compute
    kernels alone (their CTA batches), are one entry when every compute kernel has the same value
    (:func:`_one_entry`). At 1M ops that is 9 arrays of N entries fewer at the loop's peak."""
    from schedsim.sim.loop import compiled_loop

    N = len(tmpl)
    tct = [gk.kernel_ctas(t, cost, sms) if r == 0 else (0, 1, False) for t, r in zip(tps, tres.tolist(), strict=True)]
    tctas = np.array([c[0] for c in tct], I64)
    twaves = np.array([c[1] for c in tct], I64)
    tmem = np.array([c[2] for c in tct], I32)
    ttl = [gk.kernel_tail(t, cost, sms) if _res_of(t) == 0 else (0, 0.0) for t in tps]  # rule split-k
    ttail = np.array([x[0] for x in ttl], I32)
    ttail_s = np.array([x[1] for x in ttl], np.float64)
    twt = np.array([cost.wave_tail(t) if r == 0 else 0.0 for t, r in zip(tps, tres.tolist(), strict=True)],
                   np.float64)  # rule wave-tail
    op_tail = None
    if ttail.any():  # the main kernel runs the op's work less its reduction's
        work, op_tail = gk.split_work(work[tmpl] if per_t else work, ttail_s[tmpl])
        per_t = False
    nb = max(int(batch.max()) + 1 if N else 0, 0)
    # without batches every op is its own kernel: kidx, ktype, krank (2, 3, 4) are not made (op columns), nor (of
    # more than one op: their compact forms below) kern, kptr, kneed (0, 1, 5); qptr has room for the most queues
    bare = nb == 0 and N > 1
    out = [np.empty(0 if nb == 0 and k in (2, 3, 4) or bare and k in (0, 1, 5) else
                    min(N, world * C) + 1 if k == 10 else N + (k == 1), np.float64 if k == 7 else I32)
           for k in range(12)]
    K, Q = compiled_loop().kernels((N, world, nb, C, int(per_t)), _c32(rank), _c32(batch), _i32(res), _c32(tmpl),
                                   _f64(work), _i32(opq), _i32(tctas), twaves.astype(np.float64), tmem, *out)
    kern, kptr, kidx, ktype, krank, kneed, kleft, ktau, kmem, kq, qptr, qidx = out
    if K == N:  # every op its own kernel, in op order: the op columns are the kernel columns (no copies held)
        kidx, ktype, krank = kern, res, rank
    else:  # the per-kernel arrays at their length, not the ops'
        ktype, krank, kneed, kleft, ktau, kmem, kq, qidx = (
            x[:K].copy() for x in (ktype, krank, kneed, kleft, ktau, kmem, kq, qidx))
    kptr = kptr[:K + 1]
    compute = np.asarray(ktype) == 0  # the kernels whose kmem, ktail_tau, kgain and ktau the loop reads
    tau1 = _one_entry(ktau, compute)
    # one wave time and one template tail for every compute kernel (the compute templates' tails: those of its
    # kernels among them): their one fill gain, not a column of them made and then found to be one value
    tw = twt[tres == 0]
    gain1 = len(tau1) == 1 and len(tw) > 0 and bool(compute.any()) and bool((tw.view(I64) == tw.view(I64)[0]).all())
    ktail, ktail_tau, kgain = _tails(ttail, op_tail, twt, tmpl, kidx, kptr, ktype, ktau, K,
                                     (tau1, tw[:1]) if gain1 else None)
    if K == N and N > 1:  # each op its own kernel, numbered in op order (kernels numbers them by first op)
        kern = kptr = kidx = np.zeros(0, I32)
        kneed = np.ones(1, I32)
    kmem, ktail_tau, kgain = (_one_entry(x, compute) for x in (kmem, ktail_tau, kgain))
    ktau = tau1
    if not ktail.any():
        ktail = _one_entry(ktail)
    # qptr's Q + 1 entries copied: a view would hold its N + 1 through the loop
    return (kern, kptr, kidx, ktype, krank, kneed, kleft, ktau, kmem, kq, qptr[:Q + 1].copy(), qidx, ktail, ktail_tau,
            kgain)


def _one_entry(a: np.ndarray, read: np.ndarray | None = None) -> np.ndarray:
    """``a`` (a per-kernel buffer of the loop, read-only there) as one entry when all its entries are the same
    value bit for bit (a -0.0 among 0.0 is not), which the compiled loop reads for every kernel; else ``a``.
    ``read`` (bool, one per kernel): the kernels whose entry the loop reads; only theirs need be the same (the
    entry is theirs; any entry when none is read)."""
    if len(a) < 2:
        return a
    bits = a.view(I64) if a.dtype == np.float64 else a
    j = 0 if read is None else int(np.argmax(read))  # the first entry read
    if read is not None and not read[j]:
        return a[:1].copy()  # none is read
    differ = bits != bits[j]
    if read is not None:  # only the entries read (a mask, not a compress of them: ~15x faster at 1M entries)
        np.logical_and(differ, read, out=differ)
    return a if bool(differ.any()) else a[j:j + 1].copy()


def _tails(ttail, op_tail, twt, tmpl, kidx, kptr, ktype, ktau, K, one=None):
    """Per kernel (rule split-k): the CTAs of its reduction kernel (int32, 0 none; written by the loop), from its head
    op's template, and its seconds (float64), the head op's share of :func:`gk.split_work` (``op_tail``, written
    over: the caller's no longer); and
    (rule wave-tail) :func:`gr.fill_gain` of its wave time and its head template's tail (``twt``, seconds).
    ``one``: ``(tau, tail)``, one-entry arrays of the wave time and the template tail of every compute kernel
    (:func:`_kernels`): without reductions the gain is then one entry, theirs, the one :func:`_one_entry` finds in
    the column (the same float operations on the same values), which is not made."""
    if K == 0:
        return np.zeros(0, I32), np.zeros(0), np.ones(0)
    if one is not None and op_tail is None:
        kgain = gr.fill_gain_columns(one[0], np.zeros(1, I32), one[1]) if twt.any() else np.ones(1)
        return np.zeros(K, I32), np.zeros(K), kgain
    # each kernel's head template and op: with a kernel per op (K = N, numbered in op order) the ops' own
    hmpl = tmpl if K == len(tmpl) else tmpl[np.asarray(kidx)[np.asarray(kptr)[:-1]]]
    kgain = gr.fill_gain_columns(ktau, ktype, twt[hmpl]) if twt.any() else np.ones(K)
    if op_tail is None:
        return np.zeros(K, I32), np.zeros(K), kgain
    # each non-compute kernel's reduction 0, in place on fresh arrays (op_tail is split_work's, this call's alone)
    other = np.asarray(ktype) != 0
    ctas = ttail[hmpl]
    ctas[other] = 0
    htail = op_tail if K == len(tmpl) else op_tail[np.asarray(kidx)[np.asarray(kptr)[:-1]]]
    htail[other] = 0.0
    return _i32(ctas), htail, kgain


def _per_op(table: np.ndarray, tmpl: np.ndarray) -> np.ndarray:
    """``table[tmpl]``, as a read-only broadcast (no memory) when every class has the same value (bit for bit:
    a -0.0 among 0.0 is not the same value)."""
    bits = table.view(I64) if table.dtype == np.float64 else table
    if len(table) and bool((bits == bits[0]).all()):
        return np.broadcast_to(table[:1], tmpl.shape)
    return table[tmpl] if len(tmpl) else table[:0]


def _check(prog: Program, rank: np.ndarray, work: np.ndarray) -> None:
    """The loop indexes per-rank arrays by rank and needs finite solo times: refuse an op outside the world or
    with a NaN, infinite or negative solo time (a profile with a zero or infinite rate can give one)."""
    from schedsim.errors import GraphError

    world = prog.world_size
    if len(rank) and not (0 <= int(rank.min()) and int(rank.max()) < world):
        i = int(np.flatnonzero((rank < 0) | (rank >= world))[0])
        raise GraphError(f"op {prog.op_id(i)} is on rank {int(rank[i])} but the world_size is {world}",
                         fix=f"put the op on a rank in 0-{world - 1}")
    if len(work) and _finite(work):  # no NaN, no inf, none below 0
        return
    bad = np.flatnonzero(~(np.isfinite(work) & (work >= 0.0)))
    if len(bad):
        i = int(bad[0])
        raise GraphError(f"op {prog.op_id(i)} ({prog.templates[int(prog.tmpl[i])].kind}) has a solo duration of "
                         f"{float(work[i])} s", fix="give it a finite duration, FLOP and byte count >= 0 (and a "
                         "profile whose rates are finite and > 0)")


def _finite(work: np.ndarray) -> bool:
    """Whether every entry of ``work`` is finite and >= 0 (:func:`_check`'s test)."""
    return not len(work) or (bool((work >= 0.0).all()) and bool(np.isfinite(work.max())))


def op_work(work: np.ndarray, tmpl: np.ndarray, gptr: np.ndarray, gidx: np.ndarray, gwork: np.ndarray) -> np.ndarray:
    """Each op's solo seconds (float64, shape (N,)) from ``work`` per template (shape (T,)): its template's, or for a
    member of rendezvous group ``g`` (CSR ``gptr``, ``gidx``) the group's ``gwork[g]``: the per-op column
    :func:`_prepare` made before it kept the templates' (the same values, bit for bit)."""
    out = work[tmpl] if len(tmpl) else np.zeros(0)
    out[gidx] = np.repeat(gwork, np.diff(gptr))
    return out


def _i32(a) -> np.ndarray:
    """``a`` as the compiled loop's index buffer: writable contiguous int32 (copied only when it is not one)."""
    return np.require(a, I32, ["C", "W"])


def _c32(a) -> np.ndarray:
    """``a`` as an index buffer the compiled code only reads: contiguous int32, read-only or not (a Program's
    column as it is; copied only when it is not one)."""
    return np.require(a, I32, ["C"])


def _f64(a) -> np.ndarray:
    """``a`` as a writable contiguous float64 buffer of the loop (copied only when it is not one)."""
    return np.require(a, np.float64, ["C", "W"])


def _order_and_issue(prog: Program, tps: list[Op], tmpl: np.ndarray, rank: np.ndarray, sid: np.ndarray,
                     res: np.ndarray, is_p2p: np.ndarray, serial: bool, profile: HardwareProfile, mode: str,
                     model_executor: bool, cost: CostModel, hw: HostWaits | None = None) -> tuple[Any, ...]:
    """Rule communicator-order's communicator order and rule host-issue's inputs: ``(sptr, sidx, npred)``
    (the DAG plus the communicator-order edges as int32 CSR, each op's predecessor count) and ``host``, the
    arguments of :func:`schedsim.gpu.host.host_issue_columns` before ``profile`` (seven columns), its
    ``call_extra``, its ``graph`` (the ops' CUDA graph launches) and its ``memset`` gaps (``gemm.memset``, s, or
    None), which :func:`schedsim.gpu.host.kernel_release` takes too (the call returned, began, and
    launched its kernel). Its other int64 temporaries (communicators, edge keys) die here. ``hw``: the host waits
    (rule host-wait, :func:`schedsim.sim.host_wait.host_wait_columns`), whose host times before and after the
    wait join the op's ``host_s`` (the static issue times, as if the awaited work had ended)."""
    N = prog.N
    batch = prog.batch.astype(I64)  # once, for the compiled FIFO edges and issue times
    comm = _communicators(tps, prog.world_size, tmpl, rank, prog.peer, batch, res, is_p2p, serial,
                          batch_communicators(prog))
    fifo = _fifo(rank, comm, batch)
    del comm
    if mode != "cuda_graph":  # a graph launch orders its forked streams' nodes after its capture stream's work
        from schedsim.lower.graphs import graph_fork_edges

        forks = graph_fork_edges(prog)
        if len(forks):
            fifo = np.concatenate([fifo.reshape(-1, 2).astype(I64), forks])
    sptr, sidx, npred, xdeps = _succ(prog, fifo, sid)
    del fifo
    # a send/recv's host class is per op: batched or not (Program.batch); the rest per template
    thc = np.array([gh.H_P2P if t.kind in P2P_KINDS else gh.host_class(t) for t in tps], I64)
    hcls = thc[tmpl] if N else np.zeros(0, I64)
    if N and int(batch.max()) >= 0:
        hcls[is_p2p & (batch >= 0)] = gh.H_BATCH_P2P
    trep = np.array([t.repeat for t in tps], I64)
    ths = np.array([t.host_s for t in tps], np.float64)
    extra = None
    # rule host-issue: a GEMM shape's host call (gemm.call), per template
    if profile.gemm.call and mode != "cuda_graph":
        tce = np.array([cost.gemm_call_extra(t) * t.repeat for t in tps], np.float64)
        extra = _per_op(tce, tmpl) if np.any(tce) else None
    from schedsim.lower.graphs import graph_segments

    graph = graph_segments(prog) if mode != "cuda_graph" else None  # ops captured in CUDA graphs (their `graph:`)
    # rule host-issue: a collective call after a call of another kind (launch.collective_after_kernel_us)
    ca = gh.collective_after_call_extra(rank, hcls, graph, profile, mode)
    if ca is not None:
        extra = ca if extra is None else extra + ca
    memset = None  # rule host-issue: a GEMM shape whose call launches a memset first (gemm.memset), per template
    if profile.gemm.memset and mode != "cuda_graph":
        tms = np.array([cost.gemm_memset_gap(t) for t in tps], np.float64)
        memset = _per_op(tms, tmpl) if np.any(tms) else None
    hs = _per_op(ths, tmpl)
    if hw is not None:
        hs = hs + np.where(np.isnan(hw.before), 0.0, hw.before + hw.after)
    return sptr, sidx, npred, (rank, sid, hcls, _per_op(trep, tmpl), hs, batch, xdeps, extra, graph, memset)


def _host_times(host: tuple[Any, ...], profile: HardwareProfile, mode: str, model_executor: bool, cold: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rule host-issue's ``(issue, call0, release)`` (float64 seconds: each op's call returned, began, and
    launched its kernel) from :func:`_order_and_issue`'s ``host``; ``cold``: the iteration's first calls run cold."""
    rank, sid, hcls, rep, hs, batch, xdeps, extra, graph, memset = host
    issue, call0 = gh.host_issue_columns(rank, sid, hcls, rep, hs, batch, xdeps, profile, mode, model_executor, extra,
                                         cold, graph)
    return issue, call0, gh.kernel_release(issue, call0, profile, mode, extra, graph, memset)


def _fifo(rank: np.ndarray, comm: np.ndarray, batch: np.ndarray) -> np.ndarray:
    """Rule communicator-order's edges as (E, 2) int64 pairs ``(before, after)`` of op indices, which run each
    communicator's ops in issue order per rank, in one compiled pass (``_cwaves.fifo_edges``; its numpy form is the
    test oracle ``tests/oracle/numpy_helpers.comm_fifo_columns``). ``rank`` ascending (a Program's layout);
    ``comm``: code of the op's communicator (equal codes for equal rank sets; -1: the op is in no communicator
    order); ``batch``: its ``p2p_batch`` code (-1 none). Consecutive ops of one batch on a (rank, communicator)
    form one entry: every op of an entry waits for every op of the previous one.

    Raises
    ------
    ValueError
        The ranks do not ascend (not a Program's columns).
    """
    from schedsim.sim.loop import compiled_loop

    if not len(rank):
        return np.zeros((0, 2), I64)
    args = [np.ascontiguousarray(a, I64) for a in (rank, comm, batch)]
    room = int(np.count_nonzero(comm >= 0))  # an edge per op in an order, unless batches follow batches
    while True:
        out = np.empty((room, 2), I64)
        m = compiled_loop().fifo_edges(*args, out)
        if m <= room:
            break
        room = m  # a batch after a batch: more edges than ops
    if m < 0:
        raise ValueError("communicator-order edges need the ops in rank order (a Program's layout)")
    return out[:m]


def _graph_forks(prog: Program, rank: np.ndarray, sid: np.ndarray, profile: HardwareProfile, mode: str,
                 tps: list[Op], tmpl: np.ndarray, cost: CostModel) -> np.ndarray | None:
    """Rule graph-forks's extra solo seconds (:func:`~schedsim.gpu.rules.graph_fork_columns`) over the Program's stream
    and dependency edges (an edge listed twice marks its op once, as the merged DAG does), or None when the
    rule adds nothing (eager launch, or no per-edge cost in the profile). Op ``i``'s term is that of its
    template class ``tps[tmpl[i]]`` (:meth:`~schedsim.gpu.cost.CostModel.graph_fork_s`)."""
    if mode != "cuda_graph" or not gm.fork_terms(profile):
        return None
    e = np.concatenate([np.asarray(prog.stream_edges, I64).reshape(-1, 2), np.asarray(prog.dep_edges, I64)
                        .reshape(-1, 2)])
    per_op = np.array([cost.graph_fork_s(t) for t in tps], float)[tmpl] if prog.N else np.zeros(0)
    return gm.graph_fork_columns(prog.N, e[:, 0], e[:, 1], rank, sid, profile, mode, per_op)


def run_waves_program(prog: Program, profile: HardwareProfile, mode: str, rules: gm.GpuRules,
                      tab: gr.RateTables, serial: bool, model_executor: bool, loop) -> ProgramRun:
    """Run the compiled ``waves`` loop ``loop`` on ``prog`` (module docstring); an iteration after which the host
    waited for the GPU is run again with cold first calls (rule host-issue, :func:`schedsim.gpu.host.host_waited`),
    up to :data:`COLD_RERUN_MAX` ops.
    """
    keep: dict[str, Any] = {}  # the first pass's preparation, which does not depend on cold first calls
    # the first pass stops as soon as an op ends late enough that host_waited holds (its answer is then known:
    # the latest end is no earlier), since only the second pass's times are kept
    rerun = schedule_ops(prog) <= COLD_RERUN_MAX
    cw = gh.cold_wait_s(profile, mode) if rerun else None
    run = _run_program_once(prog, profile, mode, rules, tab, serial, model_executor, loop, False, keep, cw)
    if run is None:  # halted: the host waited
        try:
            cold = _run_program_once(prog, profile, mode, rules, tab, serial, model_executor, loop, True, keep)
            assert cold is not None  # not halted: no halt_cw
            return cold
        except DeadlockError:  # the whole first pass, so that its error is raised, as without the halt
            _run_program_once(prog, profile, mode, rules, tab, serial, model_executor, loop, False, keep)
            raise
    if rerun and run.host_s is not None and gh.host_waited(run.end, run.host_s, profile, mode):
        again = _run_program_once(prog, profile, mode, rules, tab, serial, model_executor, loop, True, keep)
        assert again is not None
        run = again
    return run


def host_surely_waited(p: _Prep, world: int, sms: int, tab: gr.RateTables, cw: float) -> bool:
    """Whether the first pass of :func:`run_waves_program` on the preparation ``p`` (of a Program on ``world``
    ranks; ``sms``: :attr:`~schedsim.gpu.rates.GpuRules.sms`; ``tab``: the loop's rate tables) would halt, proved
    without running it: :func:`latest_end_bound`, taken 1e-6 lower (relative, far more than the loop's rounding),
    is ``cw`` (s, :func:`schedsim.gpu.host.cold_wait_s`) or more past the host's last call (the halt's own test).
    Only a True is a proof; False says nothing. It assumes the loop ends every op: a Program the loop would
    deadlock on before the halt gets the cold pass's result or error, as one that deadlocks after the halt does."""
    best = latest_end_bound(p, world, sms, tab)
    host = max(float(np.max(p.issue)), 0.0) if len(p.issue) else 0.0  # no less than the halt's gh.host_end_per_rank
    return best * (1.0 - 1e-6) - host >= cw


def latest_end_bound(p: _Prep, world: int, sms: int, tab: gr.RateTables) -> float:
    """A lower bound (s) on the latest end of the ``waves`` loop's run of the preparation ``p`` (:func:`_prepare`'s,
    of a Program on ``world`` ranks, the issue column its ``release``), wherever the loop ends every op, up to
    rounding (its sums and the loop's differ in the last bits: one op alone measured 1 ulp above its end; hence
    :func:`host_surely_waited`'s margin); -inf where it proves nothing (no compute kernel).

    The bound, over each (rank, stream)'s ops in program order (the Program's stream edges join each op to the one
    before it on its stream, or to every member of the p2p batch run before it, :func:`schedsim.lower.link.
    _stream_edges`): op ``i`` (a compute kernel of one op) ends no earlier than ``max_j (release_j + Σ_{j..i} d)``
    over the ops ``j`` before it on its stream, since no op is ready before its ``release`` (the loop's issue
    column) nor before the op before it on its stream ended, and each op takes at least ``d``. ``d`` is 0 but
    for a compute kernel of one op, of wave time ``τ`` (its batches' work, the loop's ``ktau`` or ``ktail_tau``),
    ``C`` SM-slots in all (``kleft``) and full width ``w`` where memory-bound (``kmem``): a batch runs at most at
    ``b · g · m`` (``b`` the largest batch rate of ``tab``, ``g`` its wave-tail gain where that rule applies to it,
    ``m`` = β (``mem_boost``) memory-bound, else 1), so one batch takes at least ``τ / (b · g · m)``; and its
    batches' slots ``s`` do their ``C · τ`` slot-seconds at most at ``b · g · cap`` (rule wave-dispatch: a rank's
    batches hold at most ``sms`` slots, ``cap`` = ``sms``; memory-bound, rule hbm-share's factor
    ``min(β, 1 / load)`` with ``load ≥ Σ s / w`` keeps ``Σ s · factor ≤ min(β · sms, w)`` = ``cap``):
    ``d = max(τ / (b · g · m), C · τ / (b · g · cap))``."""
    N, K = len(p.rank32), p.K
    if not N or not K:
        return -np.inf

    def per_kernel(a: np.ndarray) -> np.ndarray:  # a buffer of one entry (_one_entry) for every kernel
        a = np.asarray(a)
        return np.broadcast_to(a, (K,)) if a.size == 1 else a

    ktail, kgain, kmem = per_kernel(p.ktail), per_kernel(p.kgain), per_kernel(p.kmem).astype(np.float64)
    tau = np.where(ktail < 0, per_kernel(p.ktail_tau), p.ktau)
    b = max(tab.batch)
    beta = max(tab.mem_boost, 1.0)
    rate = b * np.where(ktail >= 0, np.maximum(kgain, 1.0), 1.0)
    mem = kmem > 0
    cap = np.where(mem, np.minimum(beta * sms, kmem), float(sms))
    kleft = np.asarray(p.kleft, np.float64)
    d = np.where((np.asarray(p.ktype) == 0) & (kleft > 0),
                 np.maximum(tau / (rate * np.where(mem, beta, 1.0)), kleft * tau / (rate * cap)), 0.0)
    if len(p.kptr):  # kernels of several ops (p2p batches, foreach entries): d on kernels of one op only
        one = np.diff(p.kptr) == 1
        dop = np.zeros(N)
        dop[np.asarray(p.kidx)[np.asarray(p.kptr)[:-1][one]]] = d[one]
    else:  # every op its own kernel
        dop = d
    ns = int(p.sid.max()) + 1
    o = stable_order(p.rank32.astype(I64) * ns + p.sid, world * ns)  # each (rank, stream) in program order
    key = p.rank32[o].astype(I64) * ns + p.sid[o]
    # per (rank, stream): the running sum c of d and the running max of release_j - Σ_{first..j-1} d, the largest
    # of their sums over the kernels (the compiled walk; its numpy form is the test oracle)
    return float(required("end_bound")(key, np.ascontiguousarray(dop[o], np.float64),
                                       np.ascontiguousarray(np.asarray(p.release, np.float64)[o])))


def share_args(share: LinkShare | None) -> tuple[object, ...] | None:
    """The compiled loop's ``share`` argument (:meth:`LinkShare.loop_args`), None without shared links."""
    return None if share is None else share.loop_args()


def _run_program_once(prog: Program, profile: HardwareProfile, mode: str, rules: gm.GpuRules,
                      tab: gr.RateTables, serial: bool, model_executor: bool, loop, cold: bool,
                      keep: dict[str, Any] | None = None, halt_cw: float | None = None) -> ProgramRun | None:
    """One pass of :func:`run_waves_program` (``cold``: the iteration's first calls run cold, rule host-issue).
    ``keep``: a dict in which the first pass of ``prog`` on these arguments leaves what does not depend on ``cold``
    (the ops' solo times, kernels, link ends, shared links, communicator order), for a second pass to reuse
    instead of working it out again; only the host issue times are made anew. ``halt_cw`` (s, from
    :func:`schedsim.gpu.host.cold_wait_s`): stop the loop at the first op that ends ``halt_cw`` or more after the
    host's last call (:func:`schedsim.gpu.host.host_waited` is then true, whatever the later ends) and return None.

    Memory: the loop's per-op, per-kernel and per-group buffers are int32 (indices below 2**31) and every
    int64 temporary of the preparation is freed before the loop starts, and the loop writes its deps_t into the
    release column where that column is this pass's own. Where the solo times are per template (no send/recv, no
    graph-fork term: :attr:`_Prep.per_t`) the loop reads an op's through its template and the per-op column is
    made after it (:func:`op_work`); a group's ranks are read through its members (no column of them); without
    p2p batches the kernel maps are not made (``_cwaves.kernels``, bare), and without copy kernels the copy
    queues' links are not either (``_cwaves.c`` LAYOUT 19).

    Raises
    ------
    DeadlockError
        If ops remain that can never start (the message names them: Op objects are built then).
    GraphError
        An op on a rank outside the world, or with a NaN, infinite or negative solo time.
    """
    N = prog.N
    p = None if keep is None else keep.get("prep")
    if p is None:
        p = _prepare(prog, profile, mode, rules, serial, model_executor, cold,
                     keep is not None and schedule_ops(prog) <= COLD_RERUN_MAX)
        if keep is not None and p.host is not None:
            keep["prep"] = p
        if halt_cw is not None and p.hw is not None:
            halt_cw = None  # rule host-wait: the host's end is known only after the loop
        if halt_cw is not None and SKIP_PROVED and host_surely_waited(p, prog.world_size, rules.sms, tab, halt_cw):
            return None  # the loop would halt: not run
        issue, call0, release = p.issue, p.call0, p.release
        share = p.share
    else:  # a second pass: the same preparation, the host issue times anew and the shared links' state fresh
        assert p.host is not None
        issue, call0, release = _host_times(p.host, profile, mode, model_executor, cold)
        share = None if p.share is None else type(p.share)(p.share.map)
    # the buffers the loop writes: copies where the preparation is kept for another pass
    npred, kneed, kleft, ktail = (x.copy() if p.host is not None else x for x in (p.npred, p.kneed, p.kleft, p.ktail))
    tmpl, tps, res, work, ogrp, gptr, gidx, G, K, kern = p.tmpl, p.tps, p.res, p.work, p.ogrp, p.gptr, p.gidx, p.G, \
        p.K, p.kern
    per_t, gwork = p.per_t, p.gwork
    qptr, qidx, link = p.qptr, p.qidx, p.link
    start, ready_t, khand = np.zeros(N), np.zeros(N), np.zeros(K)
    # deps_t written into the release column where it is this pass's alone (not the issue or call times, not a
    # view, not kept for a second pass): the loop reads an op's release before it writes its deps_t, and no
    # release after it (``_cwaves.c``, LAYOUT 17): one float64 array of N fewer at the loop's peak
    deps_t = release if (p.host is None and release is not issue and release is not call0 and release.base is None
                         and release.dtype == np.float64 and release.flags.c_contiguous
                         and release.flags.writeable and release.shape == (N,)) else np.zeros(N)
    end, binding = np.full(N, -1.0), np.full(N, -1, I32)
    kneed0 = kneed.copy()
    hw = p.hw
    hostwait = None if hw is None else (arrivals(issue, prog.rank, hw.before), hw.scope, np.empty(N), hw.on)
    arrays = (
        _f64(tab.comm), _f64(tab.batch), _f64(tab.copy),
        npred, p.sptr, p.sidx, p.sid, p.rank32, ogrp, kern, _f64(release), _f64(work),
        _c32(tmpl) if per_t else np.zeros(0, I32),
        p.kptr, p.kidx, p.ktype, p.krank, p.kmem, p.kq, kneed, kleft, _f64(p.ktau), ktail, _f64(p.ktail_tau),
        _f64(p.kgain),
        qptr, qidx,
        gptr, gidx, *link[:4], gptr, np.zeros(0, I32), *link[4:], _f64(p.gwork),  # each group's ranks: its members'

        start, end, ready_t, deps_t, khand, binding,
        np.zeros(K, I32), kneed0, np.zeros(len(qptr) - 1, I32),
        np.zeros(K if K and bool((np.asarray(p.ktype) >= 2).any()) else 0, I32),  # the copy queues' links
    )
    del p
    halt = None if halt_cw is None else (float(np.max(gh.host_end_per_rank(issue, prog.rank, prog.world_size))),
                                         halt_cw)
    opt = [share_args(share), halt, hostwait]  # the optional arguments, trailing Nones left out
    while opt and opt[-1] is None:
        opt.pop()
    done = loop.run((N, K, G, prog.world_size, rules.sms, rules.nccl_sms),
                    (tab.one_way, rules.cross_stream_s, tab.mem_boost), arrays, *opt)
    del arrays, link, kneed0, kleft, kneed, ktail
    if done < 0:  # halted (halt_cw): the host waited
        return None
    if N and end.min() < 0.0:
        from schedsim.sim.loop import _raise_deadlock

        job_of = np.where(ogrp >= 0, N + ogrp.astype(I64), np.arange(N)).tolist()
        gmem = [gidx[a:b].tolist() for a, b in zip(gptr[:-1].tolist(), gptr[1:].tolist(), strict=True)]
        _raise_deadlock(prog.ids(), prog.ops(), end.tolist(), npred.tolist(), job_of, gmem, N)
    if N and profile.launch.eager_timed:  # a timed eager run: no op ends before its end event's record
        end = gh.end_event_bound(end, issue, profile, mode)
    waits = None
    if hostwait is not None and hw is not None:  # rule host-wait: each op's call returned its wait's shift later
        shift = wait_shift(prog.rank, hw.before, hostwait[2])
        g = np.flatnonzero(~np.isnan(hw.before))
        before = np.where(g > 0, shift[np.maximum(g - 1, 0)], 0.0)  # the shift the host carried into the call
        before[(g > 0) & (prog.rank[np.maximum(g - 1, 0)] != prog.rank[g])] = 0.0
        arrive = hostwait[0][g] + before
        waits = (g, arrive, arrive + (shift[g] - before) + hw.after[g])
        issue, call0 = issue + shift, call0 + shift
    host_s = gh.host_end_per_rank(issue, prog.rank, prog.world_size)
    host_call = issue
    # the stream-reached time: deps done, call made, queue past the item ahead (one compiled pass)
    loop.stream_reached(qptr, qidx, khand, kern, _f64(call0), deps_t)
    if per_t:  # the ops' own column, made once the loop's buffers are freed
        work = op_work(work, tmpl, gptr, gidx, gwork)
    return ProgramRun(tmpl, tps, res, work, ogrp, start, end, ready_t, binding, deps_t, host_s, host_call, waits)


class _Prep(NamedTuple):
    """What :func:`_prepare` hands :func:`_run_program_once`: the loop's inputs that do not depend on cold first
    calls, the host issue times of the first pass, and with ``host`` the arguments that make them again."""

    tmpl: np.ndarray
    tps: list[Op]
    res: np.ndarray
    work: np.ndarray  # float64 solo seconds, per op, or per template where per_t (:func:`op_work` gives the ops')
    per_t: bool
    ogrp: np.ndarray
    gptr: np.ndarray
    gidx: np.ndarray
    G: int
    K: int
    sptr: np.ndarray
    sidx: np.ndarray
    npred: np.ndarray
    sid: np.ndarray
    rank32: np.ndarray
    kern: np.ndarray
    kptr: np.ndarray
    kidx: np.ndarray
    ktype: np.ndarray
    krank: np.ndarray
    kneed: np.ndarray
    kleft: np.ndarray
    ktau: np.ndarray
    kmem: np.ndarray
    kq: np.ndarray
    qptr: np.ndarray
    qidx: np.ndarray
    ktail: np.ndarray
    ktail_tau: np.ndarray
    kgain: np.ndarray
    link: list[np.ndarray]
    gwork: np.ndarray
    share: LinkShare | None
    issue: np.ndarray
    call0: np.ndarray
    release: np.ndarray
    host: tuple[Any, ...] | None
    hw: HostWaits | None = None  # rule host-wait's columns (:func:`schedsim.sim.host_wait.host_wait_columns`)


def _prepare(prog: Program, profile: HardwareProfile, mode: str, rules: gm.GpuRules, serial: bool,
             model_executor: bool, cold: bool, again: bool) -> _Prep:
    """The preparation of one pass of :func:`_run_program_once` (its docstring); ``again``: keep the host issue
    times' inputs (:attr:`_Prep.host`) for a second pass."""
    N = prog.N
    cost = cost_model(profile)
    timing_s, empty_s = gm.graph_node_terms(profile, mode)
    tcls, tps = template_classes(prog.templates)  # the rules run once per class of templates
    # each template its own class (two entries of a foreach: two templates): the Program's column as it is, read-only,
    # not a copy held through the loop
    same = len(tcls) == len(tps) and prog.tmpl.dtype == I32
    tmpl = prog.tmpl if same else tcls.astype(I32)[prog.tmpl] if N else np.zeros(0, I32)
    del tcls
    rank = prog.rank.astype(I64)
    sid = prog.stream_id.astype(I64)
    tres = np.array([_res_of(t) for t in tps], I32)
    tp2p = np.array([t.kind in P2P_KINDS for t in tps], bool)
    res = tres[tmpl] if N else np.zeros(0, I32)
    is_p2p = tp2p[tmpl] if N else np.zeros(0, bool)
    # rule graph-nodes: without send/recv every op's solo time and terms are its template's, so where the terms are
    # too (one cold fraction for every rank) they are added to the templates' times and gathered once: the same
    # additions on the same values as per op, without an array of N per term
    terms = None if is_p2p.any() or not N else gm.template_memory_terms(tps, tmpl, rank, prog.world_size, cost, mode)
    per_t = terms is not None  # work per template: an op's is work[tmpl[i]] (its group's where it has one)
    if terms is not None:  # _durations' per template (no send/recv)
        work = np.array([0.0 if t.kind in P2P_KINDS else cost.duration(t) for t in tps], np.float64)
        gm.node_work_columns(work, terms[0], timing_s, empty_s, terms[1])
    else:
        work = _durations(tps, cost, tmpl, rank, prog.peer, is_p2p, *batch_communicators(prog))
        terms = gm.memory_terms(tps, tmpl, rank, prog.world_size, cost, mode)
        gm.node_work_columns(work, terms[0], timing_s, empty_s, terms[1])  # always: -0.0 + 0.0 is 0.0, as the
        # Op list gives
    del terms  # folded into work: not held through the loop
    gptr, gidx, G, C, lone = rendezvous_groups(prog)
    ogrp = np.full(N, -1, I32)
    ogrp[gidx] = np.repeat(np.arange(G, dtype=I32), np.diff(gptr))
    gwork = (work[tmpl[gidx[gptr[:-1]]]] if per_t else work[gidx[gptr[:-1]]]) if G else np.zeros(0)
    if C > 0 and any(t.kind in PER_RANK_SIZE for t in tps):  # a size per member: the largest transfer ends it
        big = np.maximum.reduceat(work[tmpl[gidx]] if per_t else work[gidx], gptr[:-1])[:C]
        per = np.array([t.kind in PER_RANK_SIZE for t in tps], bool)[tmpl[gidx[gptr[:C]]]]
        gwork[:C] = np.where(per, big, gwork[:C])
    if not per_t:  # per template: the members' work is their group's, made so after the loop (op_work)
        work[gidx] = np.repeat(gwork, np.diff(gptr))
    res[gidx] = 1
    # rule graph-forks: graph forks (ops outside groups)
    fx = _graph_forks(prog, rank, sid, profile, mode, tps, tmpl, cost)
    if fx is not None:
        if per_t:  # a term per op: the work too
            work, per_t = op_work(work, tmpl, gptr, gidx, gwork), False
        fx[gidx] = 0.0
        fx[lone] = 0.0  # collectives of one rank are left as they are, as every collective is
        work += fx
        del fx
    # after every term, as the Op-list path checks its job times (per template: the ops' only where one is bad)
    _check(prog, rank, op_work(work, tmpl, gptr, gidx, gwork) if per_t and not _finite(work) else work)
    # rule communicator-order: communicator order; rule host-issue: host issue times
    hw = host_wait_columns(prog, mode)  # rule host-wait
    sptr, sidx, npred, host = _order_and_issue(prog, tps, tmpl, rank, sid, res, is_p2p, serial, profile, mode,
                                               model_executor, cost, hw)
    sptr, sidx = _rank_rows(sptr, sidx, prog.rank, prog.world_size)  # rank 0's rows where every rank's are alike
    # the Program's edges, dependency CSR and collective members are read no more by this run: dropped where the
    # Program can make them again (a uniform lowering's, made anew if read after), not held through the loop
    prog.release_linked()
    issue, call0, release = _host_times(host, profile, mode, model_executor, cold)
    if not again:
        del host
    del is_p2p
    # rules hardware-queues, cta-count, hbm-share: kernels (a collective of one rank: a copy, rule
    # one-rank-collective; its span keeps its kind's resource); rule nccl-sms: link ends
    # the queues as _kernels reads them (int32: below max_connections), and the int64 rank and stream columns
    # freed before its buffers are made (15 MiB of the preparation's high-water mark at 1M ops)
    opq = _i32(gm.stream_queue_columns(rank, sid, rules.max_connections))
    del rank, sid
    rank32 = _c32(prog.rank)  # read as it is (the loop and kernels write no input)
    kres, ktres = res, tres
    if len(lone):  # their templates are theirs alone (a group of one rank is part of the template)
        ktres = tres.copy()
        lone_t = sorted(set(tmpl[lone].tolist()))
        ktres[lone_t] = [gm.one_rank_res(tps[t].kind) for t in lone_t]
        kres = res.copy()
        kres[lone] = ktres[tmpl[lone]]
    kern, kptr, kidx, ktype, krank, kneed, kleft, ktau, kmem, kq, qptr, qidx, ktail, ktail_tau, kgain = _kernels(
        tps, ktres, prog.world_size, tmpl, rank32, prog.batch, kres, work, opq, rules.max_connections, cost,
        rules.sms, per_t)
    del opq, kres, ktres
    K = len(kleft)  # kptr is empty for the identity (_kernels)
    node = cost.net.rank_nodes(prog.world_size)  # None without a cluster topology: one link tier
    groups = ginv = None
    if prog.represented:  # each distinct template's group once (a template's group is one tuple)
        ut, ginv = np.unique(tmpl[gidx[gptr[:C]]], return_inverse=True)
        groups = [tps[t].group for t in ut.tolist()]
    link = [_i32(x) for x in link_end_columns(gptr, gidx, rank32, C, rules.p2p_one_way,
                                        None if node is None else np.asarray(node, I64), groups, ginv)]

    share = cost.net.link_share(prog, gptr, gidx, gwork)  # shared NICs and leaf uplinks
    gptr, gidx = _i32(gptr), _i32(gidx)
    sid = _c32(prog.stream_id)
    return _Prep(tmpl, tps, res, work, per_t, ogrp, gptr, gidx, G, K, sptr, sidx, npred, sid, rank32, kern, kptr, kidx,
                 ktype, krank, kneed, kleft, ktau, kmem, kq, qptr, qidx, ktail, ktail_tau, kgain, link, gwork, share,
                 issue, call0, release, host if again else None, hw)
