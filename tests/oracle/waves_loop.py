"""Oracle: the ``waves`` GPU execution model's event loop in Python, on per-op lists (the rules it applies are in
:mod:`schedsim.gpu.rules`). The package runs the compiled loop from the Program's columns
(:mod:`schedsim.sim.waves_columns`); ``tests/oracle/test_differential.py`` holds the two bit-identical.

Per rank it keeps: the host issue times (rule host-issue), the hardware queues (rule hardware-queues), a
FIFO of kernels waiting for SMs and the free SM count (rule wave-dispatch), and the running
*jobs*: a batch of CTAs of one kernel placed at one time (they retire together),
an NCCL transfer of one collective or send/recv pair (all its ranks), or a copy on a
copy engine. Each job has remaining solo work and a rate (HBM sharing, NCCL
slowdown, copy contention); rates of the ranks touched by an event are
recomputed once after it. Deterministic: ties on the heap break by a counter.

Besides start (first CTA placed) and end (last CTA done), each op gets ``stream_s``: when its stream
reached it, i.e. when a CUDA event recorded just before its call would fire: its last dependency done,
the host at the start of its call (rule host-issue) and its hardware queue past the item ahead (rule hardware-queues).
That is
what ``schedsim execute`` measures as an op's start, and what :func:`schedsim.compare.op_window` compares.

:func:`run_waves` computes in Python, from :mod:`schedsim.gpu.rules`, everything a rule decides: successors
with the communicator-order edges, host issue times, kernels with their CTA counts, wave times,
memory-boundness and hardware queues, the link ends of each transfer, and every rate straight from the rule
functions; then :func:`_run_python` runs the loop. It does the same floating-point operations in the same order
as the compiled loop (C built with ``-ffp-contract=off``), so their timelines are identical bit for bit.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from schedsim.gpu import host as gh
from schedsim.gpu import kernels as gk
from schedsim.gpu import rates as gr
from schedsim.gpu import rules as gm
from schedsim.gpu.cost import CostModel, cost_model
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.sim.loop import HOST, _raise_deadlock, _State
from schedsim.sim.waves_columns import COLD_RERUN_MAX
from tests.oracle import numpy_helpers

if TYPE_CHECKING:
    from schedsim.network.share import LinkShare

__all__ = ["run_waves"]

_BATCH, _XFER, _COPY = 0, 1, 2  # job types


def set_rate(j: int, new: float, t: float, jrate: list[float], jrem: list[float], jlast: list[float],
             jver: list[int], heap: list, counter: Iterator[int]) -> None:
    """Fluid-model rate change of job ``j`` at time ``t`` (s) in this Python loop (the compiled loop
    does the same arithmetic, ``_cwaves.c``).

    The work done since ``jlast[j]`` at the old rate leaves ``jrem[j]`` solo-seconds (never < 0); the job
    then runs at ``new`` (> 0, fraction of its solo speed) and its completion ``t + jrem / new`` is pushed
    with a fresh version, which makes the job's earlier heap entry stale. No-op when the rate is unchanged.
    """
    old = jrate[j]
    if new != old:
        if old > 0.0:
            rem = jrem[j] - (t - jlast[j]) * old
            jrem[j] = rem if rem > 0.0 else 0.0
        jlast[j] = t
        jrate[j] = new
        v = jver[j] + 1
        jver[j] = v
        heapq.heappush(heap, (t + jrem[j] / new, next(counter), j, v))


def run_waves(c, profile: HardwareProfile, mode: str, *, max_connections: int | None = None,
              model_executor: bool = False, p2p_serialized: bool | None = None):
    """Run the per-op lists ``c`` (:func:`tests.oracle.graph_feed.compile_graph`) in the Python loop; returns the
    engine's ``_State``.

    ``p2p_serialized`` overrides the profile's ``nccl.unbatched_p2p_serialized``. ``c.npred`` is consumed.

    Raises
    ------
    DeadlockError
        If ops remain that can never start.
    """
    rules = gm.GpuRules.from_profile(profile, max_connections)
    serial = rules.p2p_serialized if p2p_serialized is None else p2p_serialized
    npred0 = c.npred[:] if c.N <= COLD_RERUN_MAX else None
    state = _run_once(c, profile, mode, rules, serial, model_executor, False)
    # rule host-issue: an iteration after which the host waited for the GPU starts the next with cold first calls; what
    # execute measures, every iteration after the last one's end, is that next iteration: run it again cold
    if npred0 is not None and gh.host_waited(np.asarray(state.end, np.float64), state.host_s, profile, mode):
        c.npred[:] = npred0
        state = _run_once(c, profile, mode, rules, serial, model_executor, True)
    return state



def _run_once(c, profile: HardwareProfile, mode: str, rules: gm.GpuRules, serial: bool,
              model_executor: bool, cold: bool):
    """One pass of :func:`run_waves` (``cold``: the first calls of the iteration run cold, rule host-issue)."""

    call0: list[float] = []
    issue: list[float] = []  # when each op's kernel reaches the GPU (rule host-issue: part-way through its call)
    succ, done = _order_and_issue(c, profile, mode, serial, model_executor, call0, issue, cold)
    kn = _kernels(c, rules)
    ops, gmem = c.ops, c.gmem
    from schedsim.network import rank_nodes

    node = rank_nodes(profile, c.world)  # None without a cluster topology: one link tier
    gends = [gm.link_ends([ops[i] for i in m], node) for m in gmem]  # link directions per transfer (rule nccl-sms)
    grev = [tuple(e ^ 1 for e in ends) if rules.p2p_one_way != 1.0 and ops[m[0]].kind in ("send", "recv") else ()
            for ends, m in zip(gends, gmem, strict=False)]  # a p2p transfer's reverse directions
    share = _link_share(profile, c)  # NICs and leaf uplinks shared max-min fair (schedsim.network.share)
    start, end, ready_t, deps_t, binding, khand = _run_python(c, rules, succ, issue, kn, gends, grev, share)
    N = c.N
    if N and min(end) < 0.0:
        _raise_deadlock(c.ids, ops, end, c.npred, c.job_of, gmem, N)
    # an event recorded before the op's call fires once the stream got there, the host made the call and its
    # hardware queue handed over the item ahead of it (rule hardware-queues: with fewer queues than streams, that
    # can be later)
    qreach = np.zeros(len(kn.kops))
    for Q in kn.queues.values():
        if len(Q) > 1:
            qreach[Q[1:]] = np.asarray(khand)[Q[:-1]]
    stream_t = np.maximum(np.maximum(np.asarray(deps_t, np.float64), np.asarray(call0, np.float64)),
                          qreach[np.asarray(kn.kern, np.int64)])
    if N and profile.launch.eager_timed:
        end = gh.end_event_bound(np.asarray(end, np.float64), np.asarray(done, np.float64), profile, mode).tolist()
    done_a = np.asarray(done, np.float64)
    return _State(start, end, ready_t, binding, stream_t, gh.host_end_per_rank(
        done_a, np.asarray([o.rank for o in ops], np.int64), c.world), done_a)


def _link_share(profile: HardwareProfile, c) -> LinkShare | None:  # type: ignore[no-untyped-def]
    """The shared links of the compiled DAG ``c``'s transfers (:func:`schedsim.network.share.link_share`), None on a
    profile without ``topology.nics``. A send/recv pair's ranks go sender first."""
    from schedsim.network.share import link_share, shares_links

    if not shares_links(profile):
        return None
    ops, N = c.ops, c.N
    ranks: list[int] = []
    ptr, kinds, size = [0], [], []
    for m in c.gmem:
        mem = sorted(m, key=lambda i: ops[i].kind == "recv")  # a pair: (send, recv)
        ranks.extend(ops[i].rank for i in mem)
        ptr.append(len(ranks))
        kinds.append(ops[mem[0]].kind)
        size.append(max(ops[i].nbytes for i in mem))
    return link_share(profile, c.world, ptr, ranks, kinds, size, c.job_work[N:], c.cost.net.nccl)


def _flow_event(share: LinkShare | None, links: _LinkMin, gjob: list[int], dirty: set[int],
                granks: list[tuple[int, ...]], g: int, started: int) -> None:
    """Transfer ``g`` starts (``started`` 1) or ends (0): when it is a flow across nodes, the running flows whose
    max-min share changed (:meth:`LinkShare.event`) are tracked anew (``links``) through their first rank."""
    if share is None or not share.flag[g]:
        return
    for h in share.event(g, started):
        links.xval[gjob[h]] = None
        dirty.add(granks[h][0])


def _releaser(members: list[int], i: int, t: float, start: list[float], ready_t: list[float]) -> int:
    """The member that released a rendezvous completed at ``t`` (seconds) by placing member ``i``: of the members
    placed at ``t``, the last to be ready (``i`` among equals), as ``_cwaves.c`` picks it."""
    b = i
    for m in members:
        if start[m] == t and ready_t[m] > ready_t[b]:
            b = m
    return b


def _drain(Q: list[int], h: int, kready: list[bool], ktail: list[int], dispatch, t: float) -> int:
    """Rule hardware-queues: queue ``Q`` hands over its ready kernels in order from its head ``h``; returns the
    new head. A kernel with a reduction still to come (rule split-k, ``ktail`` > 0) holds the queue: the head comes
    back as ``~h`` (negative), and nothing moves until the loop, having handed that reduction over, flips it back.
    The reduction is the queue's next item, so a later kernel of a stream sharing the queue waits behind it."""
    if h < 0:
        return h
    while h < len(Q) and kready[Q[h]]:
        k = Q[h]
        dispatch(k, t)
        h += 1
        if ktail[k] > 0:
            return ~h
    return h


def _run_python(c, rules: gm.GpuRules, succ: list[list[int]],
                issue: list[float], kn: _Kernels, gends: list[tuple[int, ...]], grev: list[tuple[int, ...]],
                share: LinkShare | None = None):
    """The reference event loop (rates straight from the rule functions); returns ``(start, end, ready_t,
    deps_t, binding, khand)`` (seconds; op index or HOST; khand per kernel: when its queue handed it over, or
    its reduction (rule split-k), the queue's next item after it)."""
    ops, N, world = c.ops, c.N, c.world
    npred, job_of, gmem, job_work = c.npred, c.job_of, c.gmem, c.job_work
    S, nsm, xlat, one_way = rules.sms, rules.nccl_sms, rules.cross_stream_s, rules.p2p_one_way
    comm_rate = functools.lru_cache(None)(functools.partial(gr.transfer_comm_rate, rules))  # the rule functions,
    batch_rate = functools.lru_cache(None)(functools.partial(gr.batch_rate, rules))  # evaluated once per state
    copy_rate = functools.lru_cache(None)(functools.partial(gr.copy_rate, rules))
    kern, kops, ktype, krank, kneed, kleft, ktau, kmem, kq, queues, ktail, ktail_tau, kgain = kn
    ktail = list(ktail)  # a reduction still to run: its CTAs; negative once handed over (rule split-k)
    K = len(kops)
    kbat = [0] * K  # CTA batches running
    kstarted = [False] * K
    kready = [False] * K
    qhead: dict[tuple[int, int], int] = {}

    # --- state -------------------------------------------------------------------------------------------------
    start = [0.0] * N
    end = [-1.0] * N
    ready_t = [0.0] * N
    deps_t = [0.0] * N  # when the last dependency ended
    binding = [-1] * N
    gres = [0] * len(gmem)
    garr = [0] * len(gmem)  # members handed to the GPU
    kwait = [len(m) for m in kops]  # NCCL kernels: groups not yet complete
    free = [S] * world
    held = [0] * world  # SMs held by compute CTAs
    nccl_held = [0] * world  # SMs held by resident NCCL kernels
    nmem = [0.0] * world  # HBM load of the memory-bound CTAs resident (rule hbm-share: gpu.rates.mem_rate)
    ncomm = [0] * world  # NCCL transfers in flight
    nlink = [0] * (4 * world)  # transfers in flight per (rank, link tier, direction): gm.link_ends
    ncopy = [0] * world  # copies in flight
    nwait = [0] * world  # compute kernels in the dispatch FIFO (rule wave-tail)
    pend: list[list[tuple[float, int, int]]] = [[] for _ in range(world)]  # (handed over at, op index, kernel)
    khand = [0.0] * K
    toplace: set[int] = set()
    copyq: dict[tuple[int, int], deque[int]] = {}
    running: list[list[int]] = [[] for _ in range(world)]
    jtype: list[int] = []
    jkey: list[int] = []
    jsms: list[int] = []
    jrem: list[float] = []
    jrate: list[float] = []
    jlast: list[float] = []
    jver: list[int] = []
    heap: list[tuple[float, int, int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    counter = itertools.count()
    dirty: set[int] = set()
    crate = [1.0] * world
    links = _LinkMin(gends, crate, nlink, None if share is None else share.share)
    gjob = [0] * len(gmem)  # the transfer job of each group
    share_event = functools.partial(_flow_event, share, links, gjob, dirty, c.job_ranks[N:])

    def new_job(typ: int, key: int, sms: int, work: float, ranks: tuple[int, ...], t: float) -> None:
        j = len(jtype)
        jtype.append(typ)
        jkey.append(key)
        jsms.append(sms)
        jrem.append(work)
        jrate.append(0.0)
        jlast.append(t)
        jver.append(0)
        links.add_job()
        for q in ranks:
            running[q].append(j)
            dirty.add(q)

    def rate_of(j: int) -> float:
        typ = jtype[j]
        if typ == _XFER:  # the slowest link end, kept up to date by _LinkMin
            rate = links.xmin[j]
            rev = grev[jkey[j]]
            return rate * one_way if rev and not any(nlink[e] for e in rev) else rate
        k = jkey[j]
        r = krank[k]
        if typ == _COPY:  # the reverse PCIe direction's engine is busy while its FIFO holds a copy
            eng = ktype[k] - 2
            rv = gr.REVERSE_ENGINE[eng]
            return copy_rate(held[r] > 0, eng, rv >= 0 and bool(copyq.get((r, rv + 2))))
        # rule hbm-share: the GPU's memory-bound CTAs share HBM
        rate = batch_rate(nccl_held[r] > 0, ncopy[r] > 0) * (gr.mem_rate(rules, nmem[r]) if kmem[k] else 1.0)
        if nwait[r] and not kleft[k] and ktail[k] >= 0:  # rule wave-tail: a waiting kernel fills its ragged end
            rate *= kgain[k]
        return rate

    def comm_rates(ranks: list[int]) -> None:
        """Per-rank SM factor of NCCL transfers (rule nccl-sms), before the jobs of ``ranks`` are rerated."""
        for q in ranks:
            if ncomm[q]:
                crate[q] = comm_rate(held[q], nccl_held[q])

    def rerate(ranks: list[int], t: float) -> None:
        """New rates for the jobs running on ``ranks``; a job spanning many ranks (a collective's transfer) is
        rated once (its rate reads no other job's rate, so a second pass would change nothing; rating it once
        per member made a 100k-rank all_reduce quadratic)."""
        links.track_ranks(ranks, running, jtype, jkey)
        for j in dict.fromkeys([j for r in ranks for j in running[r]]):  # first-seen order: pushes break heap ties
            _rerate_job(j, t)

    def _rerate_job(j: int, t: float) -> None:
        set_rate(j, rate_of(j), t, jrate, jrem, jlast, jver, heap, counter)

    def place(r: int, t: float) -> None:
        """Rule wave-dispatch: the head kernel of the rank's FIFO takes free SMs; the next one only once it has
        all it needs."""
        P = pend[r]
        while P:
            k = P[0][2]
            f = free[r]
            if ktype[k] == 1:
                if f < nsm:
                    return
                free[r] = f - nsm
                nccl_held[r] += nsm
                heapq.heappop(P)
                dirty.add(r)
                for i in kops[k]:
                    start[i] = t
                    g = job_of[i] - N
                    gres[g] += 1
                    if gres[g] == len(gmem[g]):
                        b = _releaser(gmem[g], i, t, start, ready_t)
                        for m in gmem[g]:
                            if m != b:
                                binding[m] = b
                        rk = c.job_ranks[N + g]
                        for q in rk:
                            ncomm[q] += 1
                        for e in gends[g]:
                            nlink[e] += 1
                        gjob[g] = len(jtype)
                        new_job(_XFER, g, 0, job_work[N + g], rk, t)
                        share_event(g, 1)
                continue
            if f <= 0:
                return
            left = kleft[k]
            s = f if f < left else left
            free[r] = f - s
            kleft[k] = left - s
            if not kstarted[k]:
                kstarted[k] = True
                start[kops[k][0]] = t
            held[r] += s
            if kmem[k]:
                nmem[r] += s / kmem[k]
            kbat[k] += 1
            new_job(_BATCH, k, s, ktail_tau[k] if ktail[k] < 0 else ktau[k], (r,), t)
            if left - s:
                return
            heapq.heappop(P)
            nwait[r] -= 1

    def start_copy(k: int, t: float) -> None:
        r = krank[k]
        ncopy[r] += 1
        start[kops[k][0]] = t
        new_job(_COPY, k, 0, job_work[kops[k][0]], (r,), t)

    def dispatch(k: int, t: float) -> None:
        typ = ktype[k]
        r = krank[k]
        khand[k] = t
        if typ >= 2:
            cq = copyq.setdefault((r, typ), deque())
            cq.append(k)
            if len(cq) == 1:
                start_copy(k, t)
            return
        if typ == 1:  # an NCCL kernel asks for SMs once a group has every rank there (rule communicator-order)
            for i in kops[k]:
                g = job_of[i] - N
                garr[g] += 1
                if garr[g] == len(gmem[g]):
                    for m in gmem[g]:
                        km = kern[m]
                        kwait[km] -= 1
                        if kwait[km] == len(kops[km]) - 1:  # the members of a batch progress independently
                            push(pend[krank[km]], (khand[km], kops[km][0], km))
                            toplace.add(krank[km])
            return
        push(pend[r], (t, kops[k][0], k))
        nwait[r] += 1
        toplace.add(r)
        dirty.add(r)  # rule wave-tail: the rank's placed kernels may now have their ragged ends filled

    def op_ready(i: int, t: float) -> None:
        ready_t[i] = t
        k = kern[i]
        kneed[k] -= 1
        if kneed[k]:
            return
        kready[k] = True
        drain(kq[k], t)

    def drain(key: tuple[int, int], t: float) -> None:
        qhead[key] = _drain(queues[key], qhead.get(key, 0), kready, ktail, dispatch, t)

    def release(i: int, t: float) -> None:
        end[i] = t
        for v in succ[i]:
            n = npred[v] - 1
            npred[v] = n
            if n:
                continue
            tv = t + xlat if xlat and ops[v].stream != ops[i].stream and ops[v].rank == ops[i].rank else t
            deps_t[v] = tv  # the start event behind the wait fires once the wait resolved
            if issue[v] > tv:
                binding[v] = HOST
                push(heap, (issue[v], next(counter), -1 - v, 0))
                continue
            if tv > t:  # rule wave-dispatch: an event wait resolves later than a same-stream successor
                binding[v] = i
                push(heap, (tv, next(counter), -1 - v, 0))
                continue
            binding[v] = i
            op_ready(v, t)

    def job_done(j: int, t: float) -> None:
        typ = jtype[j]
        jrate[j] = -1.0
        if typ == _XFER:
            g = jkey[j]
            for e in gends[g]:
                nlink[e] -= 1
            share_event(g, 0)
            for q in c.job_ranks[N + g]:
                ncomm[q] -= 1
                running[q].remove(j)
                dirty.add(q)
            for i in gmem[g]:
                k = kern[i]
                kleft[k] -= 1
                if not kleft[k]:
                    r = krank[k]
                    free[r] += nsm
                    nccl_held[r] -= nsm
            for i in gmem[g]:
                release(i, t)
            toplace.update(c.job_ranks[N + g])
            return
        k = jkey[j]
        r = krank[k]
        running[r].remove(j)
        dirty.add(r)
        if typ == _COPY:
            ncopy[r] -= 1
            cq = copyq[(r, ktype[k])]
            cq.popleft()
            if cq:
                start_copy(cq[0], t)
            release(kops[k][0], t)
            return
        s = jsms[j]
        # _cwaves.c next_wave: the kernel heading the FIFO takes the batch's SMs back at once for its next wave
        wave_now = kleft[k] > s and not free[r] and pend[r] and pend[r][0][2] == k and r not in toplace
        free[r] += s
        held[r] -= s
        kbat[k] -= 1
        if kmem[k]:
            nmem[r] -= s / kmem[k]
        if not kbat[k] and not kleft[k]:
            if ktail[k] > 0:  # rule split-k: the main kernel is done; its queue hands the reduction over now
                kleft[k] = ktail[k]
                ktail[k] = -ktail[k]
                khand[k] = t
                push(pend[r], (t, kops[k][0], k))
                nwait[r] += 1
                key = kq[k]
                qhead[key] = ~qhead[key]
                drain(key, t)
            else:
                release(kops[k][0], t)
        toplace.add(r)
        for q in [r] if wave_now else []:  # not the instant's end (rule wave-dispatch): now, as next_wave
            toplace.discard(q)
            place(q, t)

    # --- run -------------------------------------------------------------------------------------------------
    for i in range(N):
        if npred[i] == 0:
            if issue[i] > 0.0:
                binding[i] = HOST
                push(heap, (issue[i], next(counter), -1 - i, 0))
            else:
                op_ready(i, 0.0)
    for r in sorted(toplace):
        place(r, 0.0)
    toplace.clear()
    order = sorted(dirty)
    comm_rates(order)
    rerate(order, 0.0)
    dirty.clear()
    while heap:
        t, _s, j, ver = pop(heap)
        if j < 0:
            op_ready(-1 - j, t)
        elif ver == jver[j] and jrate[j] > 0.0:
            job_done(j, t)
        if heap and heap[0][0] <= t:  # rule wave-dispatch: placed once every event of the instant is done
            continue
        for r in sorted(toplace):  # after every release of the instant: kernels handed over together in program order
            place(r, t)
        toplace.clear()
        order = sorted(dirty)  # none: nothing to rate
        comm_rates(order)
        rerate(order, t)
        dirty.clear()
    return start, end, ready_t, deps_t, binding, khand


class _LinkMin:
    """Each transfer's share of its slowest link end, ``min(crate[rank] / nlink[end])`` (rule nccl-sms), kept up to
    date.

    :meth:`track` refreshes a transfer's ends on one rank, which the loop calls for every dirty rank of an
    event (only dirty ranks' ``crate`` and ``nlink`` change), and keeps the minimum with the count of ends at
    it, so a rate costs O(ends on that rank), not a scan of every end of a many-rank collective (a scan only
    when the last end at the minimum rises). ``min`` of the same floats is exact in any order, so the rates
    are bit-identical to a full scan.
    """

    def __init__(self, gends: list[tuple[int, ...]], crate: list[float], nlink: list[int],
                 gshare: np.ndarray | None = None) -> None:
        self.gends, self.crate, self.nlink = gends, crate, nlink
        self.gshare = gshare  # with shared links: a NIC end (tier 1) is crate x the flow's max-min share
        self.xval: list[list[float] | None] = []  # per job: crate / nlink of each of its ends (transfers only)
        self.xmin: list[float] = []
        self.xcnt: list[int] = []  # ends at the minimum
        self.xpos: list[dict[int, list[int]] | None] = [None] * len(gends)  # rank -> positions in gends[g]

    def add_job(self) -> None:
        self.xval.append(None)
        self.xmin.append(0.0)
        self.xcnt.append(0)

    def track_ranks(self, ranks: list[int], running: list[list[int]], jtype: list[int], jkey: list[int]) -> None:
        """:meth:`track` every transfer running on the dirty ``ranks``."""
        for r in ranks:
            for j in running[r]:
                if jtype[j] == _XFER:
                    self.track(j, jkey[j], r)

    def track(self, j: int, g: int, r: int) -> None:
        """Refresh job ``j`` (transfer of group ``g``) after rank ``r``'s factor or link counts changed."""
        crate, nlink, ends = self.crate, self.nlink, self.gends[g]
        vals = self.xval[j]
        sh = self.gshare
        if vals is None:  # a new transfer (all its ranks dirty, their crate fresh), or its share changed
            vals = self.xval[j] = [crate[e >> 2] / nlink[e] for e in ends] if sh is None else \
                [crate[e >> 2] * float(sh[g]) if e & 2 else crate[e >> 2] / nlink[e] for e in ends]
            m = min(vals)
            self.xmin[j] = m
            self.xcnt[j] = vals.count(m)
            return
        pos = self.xpos[g]
        if pos is None:
            pos = self.xpos[g] = {}
            for p, e in enumerate(ends):
                pos.setdefault(e >> 2, []).append(p)
        m = self.xmin[j]
        cnt = self.xcnt[j]
        for p in pos[r]:
            e = ends[p]
            new = crate[e >> 2] * float(sh[g]) if sh is not None and e & 2 else crate[e >> 2] / nlink[e]
            old = vals[p]
            if new == old:
                continue
            vals[p] = new
            if new < m:
                m, cnt = new, 1
            elif new == m:
                cnt += 1
            elif old == m:
                cnt -= 1
                if not cnt:
                    m = min(vals)
                    cnt = vals.count(m)
        self.xmin[j] = m
        self.xcnt[j] = cnt


class _Kernels(NamedTuple):
    """What the GPU runs: one kernel per op, or one per ``p2p_batch`` of a rank (index k)."""

    kern: list[int]  # op -> kernel
    kops: list[list[int]]  # kernel -> its ops
    ktype: list[int]  # 0 compute, 1 NCCL, 2-4 copy engine (h2d, d2h, d2d)
    krank: list[int]
    kneed: list[int]  # ops not yet ready
    kleft: list[int]  # compute: CTAs not yet placed; NCCL: ops not yet ended
    ktau: list[float]  # compute: solo seconds of one wave
    kmem: list[int]  # memory-bound (rule hbm-share): the SMs one kernel holds alone; 0: compute-bound
    kq: list[tuple[int, int]]  # (rank, hardware queue)
    queues: dict[tuple[int, int], list[int]]  # (rank, queue) -> kernels in issue order
    ktail: list[int]  # compute: CTAs of the second kernel (a split-K reduction, rule split-k), 0 none
    ktail_tau: list[float]  # its solo seconds (one wave)
    kgain: list[float]  # compute: gr.fill_gain of its main kernel's wave time (rule wave-tail), else 1.0


def _order_and_issue(c, profile: HardwareProfile, mode: str, serial: bool,
                     model_executor: bool, call_start: list[float] | None = None,
                     release: list[float] | None = None, cold: bool = False) -> tuple[list[list[int]], list[float]]:
    """Successor lists in program order plus the communicator-order edges (rule communicator-order; ``c.npred`` grows),
    and the host issue time of each op (rule host-issue)."""
    ops, N = c.ops, c.N
    succ = [sorted(x) for x in c.succ]  # ops released together reach the GPU in program order
    npred = c.npred
    for u, v in comm_fifo_edges(ops, c.world, serial, c.p2p_comm):
        if v not in succ[u]:
            succ[u].append(v)
            succ[u].sort()
            npred[v] += 1
    xdeps = [0] * N
    streams = list(map(attrgetter("stream"), ops))
    for su, s in zip(streams, succ, strict=True):
        for v in s:
            if streams[v] != su:
                xdeps[v] += 1
    return succ, host_issue_times(ops, profile, mode, cross_stream_deps=xdeps, model_executor=model_executor,
                                     call_start=call_start, cost=c.cost, release=release, cold=cold)


def _kernels(c, rules: gm.GpuRules) -> _Kernels:
    """Group ops into kernels and give each its CTAs, wave time and hardware queue (rules hardware-queues,
    cta-count, hbm-share)."""
    ops, job_res, job_work = c.ops, c.job_res, c.job_work
    kern = [0] * c.N
    kops: list[list[int]] = []
    kbatch: dict[tuple[int, str], int] = {}
    for i, op in enumerate(ops):
        if op.p2p_batch is not None:
            key = (op.rank, op.p2p_batch)
            k = kbatch.get(key)
            if k is None:
                k = kbatch[key] = len(kops)
                kops.append([])
            kops[k].append(i)
        else:
            k = len(kops)
            kops.append([i])
        kern[i] = k
    K = len(kops)
    ktype, krank, kleft, ktau, kmem = [0] * K, [0] * K, [0] * K, [0.0] * K, [0] * K
    ktail, ktail_tau = [0] * K, [0.0] * K
    kq: list[tuple[int, int]] = [(0, 0)] * K
    queues: dict[tuple[int, int], list[int]] = {}
    opq = gm.stream_queues(ops, rules.max_connections)
    cost, sms, kernel_ctas = c.cost, rules.sms, gk.kernel_ctas
    for k, members in enumerate(kops):
        i = members[0]
        op = ops[i]
        res = ktype[k] = job_res[i]
        r = krank[k] = op.rank
        if res == 0:
            ctas, waves, mem = kernel_ctas(op, cost, sms)
            tail, tail_s = gk.kernel_tail(op, cost, sms)
            work = job_work[i]
            if tail:
                work, tail_s = map(float, gk.split_work(work, tail_s))
            kleft[k], ktau[k], kmem[k] = ctas, work / waves, mem
            ktail[k], ktail_tau[k] = tail, tail_s
        elif res == 1:
            kleft[k] = len(members)
        key = kq[k] = (r, opq[i])
        q = queues.get(key)
        if q is None:
            queues[key] = [k]
        else:
            q.append(k)
    kgain = [gr.fill_gain(ktau[k], cost.wave_tail(ops[kops[k][0]])) if ktype[k] == 0 else 1.0 for k in range(K)]
    return _Kernels(kern, kops, ktype, krank, [len(m) for m in kops], kleft, ktau, kmem, kq, queues, ktail, ktail_tau,
                    kgain)


def host_issue_times(ops: Sequence[Op], profile: HardwareProfile, mode: str, *, cross_stream_deps: Sequence[int],
                     model_executor: bool = False, call_start: list[float] | None = None,
                     cost: CostModel | None = None, release: list[float] | None = None,
                     cold: bool = False) -> list[float]:
    """:func:`schedsim.gpu.host.host_issue_columns` of a list of ops (program order per rank); ``call_start``, if
    given, is filled with each op's call start, ``release`` with when its kernel reaches the GPU
    (:func:`schedsim.gpu.host.kernel_release`);
    ``cost`` (default: one of ``profile``) gives each GEMM's ``gemm.call`` extra."""
    n = len(ops)
    codes: dict[object, int] = {None: -1}
    cols = [(op.rank, codes.setdefault(op.stream, len(codes)), gh.host_class(op), op.repeat, op.host_s,
             codes.setdefault(op.p2p_batch, len(codes))) for op in ops]
    rank, stream, hcls, rep, hs, bat = (np.array(c) for c in zip(*cols, strict=True)) if n else \
        (np.zeros(0, np.int64),) * 6
    extra = None
    if profile.gemm.call and mode != "cuda_graph":
        cm = cost if cost is not None else cost_model(profile)
        extra = np.array([cm.gemm_call_extra(op) * op.repeat for op in ops], np.float64)
    # the CUDA graph launches (ops' `graph:`): consecutive ops of a rank with one name, one id each
    seg, last, graph = -1, {}, None
    if any(op.graph for op in ops) and mode != "cuda_graph":
        graph = np.full(n, -1, np.int64)
        for i, op in enumerate(ops):
            prev = last.get(op.rank)
            last[op.rank] = i
            if op.graph is None:
                continue
            if prev is None or ops[prev].graph != op.graph:
                seg += 1
                graph[i] = seg
            else:
                graph[i] = graph[prev]
    after = profile.launch.collective_after_kernel_us
    warm = profile.launch.collective_warmup_us
    if (after is not None or warm) and mode != "cuda_graph":  # a collective call after another kind's; k-th call
        d = 0.0 if after is None else (after - profile.launch.eager_per_collective_us) * 1e-6
        prev_call: dict[int, bool] = {}
        count: dict[int, int] = {}
        ca = np.zeros(n)
        for i, op in enumerate(ops):
            own = graph is None or graph[i] < 0  # a graph's op calls nothing
            is_coll = own and gh.host_class(op) == gh.H_COLL
            if is_coll and op.rank in prev_call and not prev_call[op.rank]:
                ca[i] = d
            if is_coll:
                count[op.rank] = k = count.get(op.rank, 0) + 1
                if k <= len(warm):
                    ca[i] += warm[k - 1] * 1e-6
            prev_call[op.rank] = is_coll
        extra = ca if extra is None else extra + ca
    issue, call0 = gh.host_issue_columns(rank, stream, hcls, rep, np.asarray(hs, np.float64), bat,
                                         np.asarray(cross_stream_deps[:n], np.int64), profile, mode, model_executor,
                                         extra, cold, graph)
    if call_start is not None:
        call_start[:] = call0.tolist()
    if release is not None:
        memset = None
        if profile.gemm.memset and mode != "cuda_graph":
            cm = cost if cost is not None else cost_model(profile)
            memset = np.array([cm.gemm_memset_gap(op) for op in ops], np.float64)
        release[:] = gh.kernel_release(issue, call0, profile, mode, extra, graph, memset).tolist()
    return issue.tolist()


def comm_fifo_edges(ops: Sequence[Op], world: int, p2p_serialized: bool,
                    p2p_comm: tuple[np.ndarray, list[tuple[int, ...]]] | None = None) -> list[tuple[int, int]]:
    """:func:`tests.oracle.numpy_helpers.comm_fifo_columns` of a list of ops: lone send/recv join their pair's
    communicator only with ``p2p_serialized``; a batched one its process group's (``p2p_comm``: per op the id of
    its communicator, -1 none, and the ranks of each id; None: the world's); compute ops and copies are in none."""
    codes: dict[object, int] = {None: -1}
    comm = np.full(len(ops), -1, np.int64)
    cid, ranks_of = p2p_comm if p2p_comm is not None else (None, [])
    for i, op in enumerate(ops):
        lone_p2p = op.kind in ("send", "recv") and op.p2p_batch is None
        if op.kind in ("matmul", "compute", "memcpy") or (not p2p_serialized and lone_p2p):
            continue
        ranks = ranks_of[cid[i]] if cid is not None and cid[i] >= 0 else None
        comm[i] = codes.setdefault(gm.communicator(op, world, p2p_serialized, ranks), len(codes))
    rank = np.fromiter((op.rank for op in ops), np.int64, len(ops))
    batch = np.fromiter((codes.setdefault(op.p2p_batch, len(codes)) for op in ops), np.int64, len(ops))
    u, v = numpy_helpers.comm_fifo_columns(rank, comm, batch)
    return list(zip(u.tolist(), v.tolist(), strict=True))
