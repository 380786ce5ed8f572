"""The ``replay`` GPU model's event loop (:func:`_run_replay`): the replay of a recorded run (``schedsim import
... --out DIR`` writes ``DIR/schedule.yaml`` with measured durations), no contention. Its host
(:class:`_ReplayHost`) issues each rank's ops at the prefix sums of their ``host_us`` and waits where the
import recorded a host synchronisation (:data:`HOST_WAIT_TAG`); its hardware queues (:class:`_ReplayQueues`)
apply only where the schedule names ``CUDA_DEVICE_MAX_CONNECTIONS``. :func:`schedsim.sim.engine.simulate`
runs it with ``gpu_model="replay"`` on the arrays of :mod:`schedsim.sim.loop_arrays`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from schedsim.gpu import rules as gm
from schedsim.graph.ops import Op, format_op_id, resource_of
from schedsim.sim.host_wait import HOST_WAIT_TAG, check_host_wait_tags, host_wait_columns
from schedsim.sim.loop import HOST, _raise_deadlock, _State
from schedsim.sim.loop_arrays import _Compiled


def _rendezvous(members: list[int], last: int, ready_t: list[float], start: list[float], binding: list[int]) -> float:
    """Start every member of a rendezvous at the last one's ready time (it binds the others); that time."""
    t0 = ready_t[last]
    for m in members:
        start[m] = t0
        if m != last:
            binding[m] = last
    return t0



#: Tag of an imported op (:mod:`schedsim.trace.to_schedule`): the recorded time (µs) from when it was ready (the
#: later of its issue and the end of its last predecessor: stream order, event waits) to its start: the launch
#: latency of the GPU (~0.4-0.6 µs between the nodes of a CUDA graph, ~1-2 µs between eager kernels of one busy
#: stream, a few µs from a launch call's return to its kernel: one H100, ``benchmarks/accuracy/trace_replay.py
#: --capture``). The ``replay`` model starts the op at ``max(issue, end of its predecessors) + gap``.
GPU_GAP_TAG = "gpu_gap_us"


def check_recorded_tags(G: Any) -> None:
    """Refuse an op of the Program ``G`` (:class:`~schedsim.lower.program.Program`) whose :data:`HOST_WAIT_TAG` or
    :data:`GPU_GAP_TAG` is not a finite number of µs at least 0 (``schedsim import`` writes them so), where the
    ``replay`` model would otherwise read it as no wait or no gap. One pass over the distinct tag sets; the other
    host-wait tags as :func:`~schedsim.sim.host_wait.check_host_wait_tags` checks them.

    Raises
    ------
    SpecError
        Naming the first such op (``name@rank``), the tag and its value, and ``G.file``.
    """
    from schedsim.errors import SpecError, printable

    check_host_wait_tags(G)
    if not (G.may_have_tag(HOST_WAIT_TAG) or G.may_have_tag(GPU_GAP_TAG)):
        return
    for k, tags in enumerate(G.tagsets):
        for tag, v in tags:
            if tag not in (HOST_WAIT_TAG, GPU_GAP_TAG):
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v < math.inf:
                i = int(np.flatnonzero(np.asarray(G.tags_id) == k)[0])
                op = format_op_id(G.names[int(G.name_id[i])], int(G.rank[i]))
                raise SpecError(f"op {printable(op, 80)}: recorded tag {tag} is {printable(repr(v), 40)}, not a "
                                "finite number of µs at least 0", file=G.file or None, path=f"tags.{tag}",
                                fix=f"write {tag} as a number of µs (0 or more), or drop the tag")


def _gpu_gaps(ops: list[Op]) -> list[float]:
    """Each op's :data:`GPU_GAP_TAG` in seconds (0 where absent; a finite number of µs at least 0, as
    :func:`check_recorded_tags` holds it before the loop runs)."""
    out = [0.0] * len(ops)
    for i, op in enumerate(ops):
        for k, g in op.tags:
            if k == GPU_GAP_TAG:
                out[i] = float(g) * 1e-6
    return out


class _ReplayHost:
    """The host threads of the ``replay`` model: each rank issues its ops in program order, op i at
    ``clock + host_s`` (no launch costs: a recorded gap holds its call); an op tagged :data:`HOST_WAIT_TAG` is
    issued at ``max(clock + that tag, end of its predecessors) + after + host_s`` (the host blocked in a
    synchronisation; rule host-wait, :mod:`schedsim.sim.host_wait`: ``after`` its
    :data:`~schedsim.sim.host_wait.HOST_WAIT_AFTER_TAG`; with a scope, instead of its predecessors, every earlier
    op of its rank (``device``) or the ops :func:`~schedsim.sim.host_wait.awaited` gives), so the host stalls
    until they end. Under ``cuda_graph`` every op is issued at 0.
    ``host_from[i]``: the op whose end the host last waited for in such a synchronisation (its predecessor that
    ended last, where it ended after the host reached the call), at or before issuing op i; -1 where the host's
    calls up to op i never waited (the critical path's walk continues there, :func:`critical_walk`)."""

    def __init__(self, ops: list[Op], world: int, mode: str, G: Any = None) -> None:
        self.order: list[list[int]] = [[] for _ in range(world)]
        self.before: dict[int, float] = {}
        self.device: set[int] = set()  # host waits of device scope
        self.after: dict[int, float] = {}  # host waits' time after the awaited work (s)
        self.spans: list[tuple[int, float, float]] = []  # (op, from_s, to_s) per host wait
        self.waits: dict[int, list[int]] = {}  # host waits of scope stream / ops: the ops they wait for
        graph = mode == "cuda_graph"
        self.host_s = [0.0 if graph else op.host_s for op in ops]
        for i, op in enumerate(ops):
            self.order[op.rank].append(i)
        hw = None if G is None else host_wait_columns(G, mode)
        if hw is not None:  # the Program's ops are ``ops``, in its order (_compile_program)
            from schedsim.sim.host_wait import awaited

            self.waits = awaited(G, hw.scope)
            for i in np.flatnonzero(~np.isnan(hw.before)).tolist():
                self.before[i] = float(hw.before[i])
                self.host_s[i] += float(hw.after[i])
                self.after[i] = float(hw.after[i])
                if hw.scope[i] == 1:
                    self.device.add(i)
        self.ended: list[float | None] = [None] * len(ops)
        self.done = [0] * world  # per rank: its ops ended (device scope)
        self.drained = [0.0] * world  # per rank: when the last of them ended
        self.drained_by = [-1] * world
        self.ptr = [0] * world
        self.clock = [0.0] * world
        self.waited = [-1] * world
        self.issue: list[float | None] = [None] * len(ops)
        self.host_from = [-1] * len(ops)

    def op_ended(self, i: int, r: int, t: float, npred: list[int], pred_end: list[float], last_pred: list[int],
                 issued: Any) -> None:
        """Op ``i`` of rank ``r`` ended at ``t``: counted for the scoped host waits, which may return now
        (:meth:`advance` with its other arguments)."""
        self.done[r] += 1
        self.ended[i] = t
        if t >= self.drained[r]:
            self.drained[r], self.drained_by[r] = t, i
        if (self.device or self.waits) and self.ptr[r] < len(self.order[r]) \
                and self.issue[self.order[r][self.ptr[r]]] is None:
            self.advance(r, npred, pred_end, last_pred, issued)

    def _waited(self, i: int, r: int, k: int, npred: list[int]) -> bool:
        """Whether host wait ``i`` (the ``k``-th op of rank ``r``) may return: what it waits for has ended."""
        if i in self.device:
            return self.done[r] >= k
        if i in self.waits:
            return all(self.ended[j] is not None for j in self.waits[i])
        return npred[i] == 0

    def advance(self, r: int, npred: list[int], pred_end: list[float], last_pred: list[int], issued: Any) -> None:
        """Issue rank ``r``'s ops until one waits for unfinished work; ``issued(i)`` for each issued op whose
        predecessors are done (``pred_end[i]``: when the last of them ended, ``last_pred[i]``)."""
        order, k, clock = self.order[r], self.ptr[r], self.clock[r]
        while k < len(order):
            i = order[k]
            b = self.before.get(i)
            if b is not None and not self._waited(i, r, k, npred):
                break
            if b is not None:
                pe, lp = pred_end[i], last_pred[i]
                if i in self.device:
                    pe, lp = self.drained[r], self.drained_by[r]
                elif i in self.waits:
                    pe, lp = 0.0, HOST
                    for j in self.waits[i]:
                        e = self.ended[j]
                        assert e is not None
                        if e >= pe:
                            pe, lp = e, j
                if pe > clock + b:  # the host blocked until the synchronised work ended
                    self.waited[r] = lp
                arrive = clock + b
                clock = max(arrive, pe)
                self.spans.append((i, arrive, clock + self.after.get(i, 0.0)))
            clock += self.host_s[i]
            self.issue[i] = clock
            self.host_from[i] = self.waited[r]
            k += 1
            if npred[i] == 0:
                issued(i)
        self.ptr[r], self.clock[r] = k, clock


class _ReplayQueues:
    """The hardware queues of the ``replay`` model (rule hardware-queues of :mod:`schedsim.gpu.rules`): stream ``s``
    of a rank (numbered by first appearance, :func:`~schedsim.gpu.rules.stream_queues`) uses queue ``s mod conns``,
    which hands its ops to the GPU in issue (program) order; in a replay an op is handed over when it starts, so
    an op may start only once the op ahead of it in its queue has (an op ready before that is parked, and binds to
    the op ahead). No queue limit when ``conns`` is None.

    Copies between host and device (``memcpy`` ops of direction ``h2d`` / ``d2h``, run by a copy engine) join no
    queue: with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` a pinned 8 MiB host-to-device copy issued behind another
    stream's unfinished event wait started under the GEMM that wait was for, while a one-CTA kernel issued there
    started only after it (one H100, ``benchmarks/accuracy/whatif_connections.py``, docs/validation.md, "A
    what-if against a second real run")."""

    def __init__(self, ops: list[Op], conns: int | None) -> None:
        self.prev = [-1] * len(ops)
        self.next = [-1] * len(ops)
        if conns is not None:
            last: dict[tuple[int, int], int] = {}
            for i, (op, q) in enumerate(zip(ops, gm.stream_queues(ops, int(conns)), strict=True)):
                if resource_of(op.kind) == "copy" and op.direction in ("h2d", "d2h"):
                    continue
                p = last.get((op.rank, q), -1)
                self.prev[i] = p
                if p >= 0:
                    self.next[p] = i
                last[(op.rank, q)] = i
        # when the op ahead in the queue started (0 where there is none; None until it has)
        self.gate: list[float | None] = [0.0 if p < 0 else None for p in self.prev]
        self.parked: dict[int, float] = {}  # ready ops behind an op not yet started: when they were ready

    def submit(self, i: int, t: float, binding: list[int], go: Callable[[int, float], None]) -> None:
        """Op ``i`` is ready at ``t``: ``go(i, time)`` with the time it may start as far as its queue goes
        (``binding[i]`` the op ahead where that holds it), or park it until the op ahead starts."""
        gate = self.gate[i]
        if gate is None:
            self.parked[i] = t
        elif gate > t:
            binding[i] = self.prev[i]
            go(i, gate)
        else:
            go(i, t)

    def started(self, members: Sequence[int], t: float, binding: list[int], go: Callable[[int, float], None]) -> None:
        """Ops ``members`` start at ``t``: the op behind each in its queue may follow (:meth:`submit` again if it
        was parked)."""
        for i in members:
            k = self.next[i]
            if k >= 0:
                self.gate[k] = t
                if k in self.parked:
                    self.submit(k, self.parked.pop(k), binding, go)


def _run_replay(c: _Compiled, mode: str, conns: int | None = None, G: Any = None) -> _State:
    """The ``replay`` model (module docstring): every job runs its solo seconds ``c.job_work`` from the moment it
    is ready; ready = issued (:class:`_ReplayHost`), every predecessor done and, for a rendezvous, every member
    ready (then all start at the last one's time). An op starts its recorded :data:`GPU_GAP_TAG` after it was
    ready (its ``ready_s`` stays that time: the gap is its launch delay). With ``conns``
    (``CUDA_DEVICE_MAX_CONNECTIONS``: the schedule's ``env`` or ``max_connections``; none by default, as the
    recorded waits hold the run's), ready also
    needs the op ahead of it in its hardware queue handed to the GPU, which in a replay is its start (rule
    hardware-queues of :mod:`schedsim.gpu.rules`: an op not yet ready holds up the ops behind it in its queue)."""
    ops, N, npred, succ, job_of, gmem, job_work = c.ops, c.N, list(c.npred), c.succ, c.job_of, c.gmem, c.job_work
    host = _ReplayHost(ops, c.world, mode, G)
    queues = _ReplayQueues(ops, conns)
    gap = _gpu_gaps(ops)
    ready_at = [float("inf")] * N  # when the op was ready, before its gap
    pred_end = [0.0] * N
    last_pred = [HOST] * N
    start, end, ready_t = [0.0] * N, [0.0] * N, [0.0] * N
    binding = [HOST] * N
    gready = [0] * len(gmem)
    glast = [-1] * len(gmem)
    heap: list[tuple[float, int, int]] = []
    counter = itertools.count()

    def make_ready(i: int, t: float) -> None:  # ready and past the op ahead in its hardware queue
        ready_t[i] = t
        j = job_of[i]
        if j < N:
            ready_t[i] = min(t, ready_at[i])
            start[i] = t
            heapq.heappush(heap, (t + job_work[i], next(counter), i))
            queues.started((i,), t, binding, make_ready)
            return
        g = j - N
        gready[g] += 1
        if glast[g] < 0 or t >= ready_t[glast[g]]:
            glast[g] = i
        if gready[g] == len(gmem[g]):
            t0 = _rendezvous(gmem[g], glast[g], ready_t, start, binding)
            heapq.heappush(heap, (t0 + job_work[j], next(counter), j))
            queues.started(gmem[g], t0, binding, make_ready)

    def release(v: int) -> None:  # issued, predecessors done
        iv = host.issue[v]
        assert iv is not None
        if iv > pred_end[v]:
            ready_at[v] = iv
            queues.submit(v, iv + gap[v], binding, make_ready)
        else:
            binding[v] = last_pred[v]
            ready_at[v] = pred_end[v]
            queues.submit(v, pred_end[v] + gap[v], binding, make_ready)

    for r in range(c.world):
        host.advance(r, npred, pred_end, last_pred, release)
    done = 0
    while heap:
        t, _s, j = heapq.heappop(heap)
        for i in (gmem[j - N] if j >= N else (j,)):
            end[i] = t
            done += 1
            host.op_ended(i, ops[i].rank, t, npred, pred_end, last_pred, release)
            for v in succ[i]:
                npred[v] -= 1
                if t >= pred_end[v]:
                    pred_end[v], last_pred[v] = t, i
                if npred[v] == 0:
                    if host.issue[v] is not None:
                        release(v)
                    else:
                        host.advance(ops[v].rank, npred, pred_end, last_pred, release)
    if done < N:
        _raise_deadlock(c.ids, ops, end, npred, job_of, gmem, N)
    issue = np.array([t if t is not None else np.nan for t in host.issue], np.float64)
    return _State(start, end, ready_t, binding, host_call=issue, host_from=host.host_from, host_waits=host.spans)
