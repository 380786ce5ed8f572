"""The lean hot path: one rank's iteration compiled into a flat list of prepared calls, and p2p batching.

Before the uninstrumented iterations, :func:`compile_cuda` / :func:`compile_cpu` turn the
rank's ops into a flat list in which tensors are bound, streams and events resolved and
nothing is looked up per op: the loop is ``for f in steps: f()`` (CUDA) or a tuple walk
(CPU). It does what a hand-written script does and nothing more:

* ``torch.cuda.set_stream(s)`` only when the stream changes;
* ``s.wait_event(e)`` only for a dependency on another stream, and ``e.record(s)`` only
  after an op that such a dependency names (same-stream order is the stream's FIFO);
* the launch itself (``functools.partial(torch.matmul, a, b, out=c)``, a collective with
  ``async_op=False`` on the current stream, ``dist.isend(...).wait()``,
  ``dist.batch_isend_irecv`` for a batched p2p group);
* one end event per stream, which the makespan needs.

No NVTX, logging, progress tracking or per-op events. TF32 is set once before the timed
region, as a script sets it once at the top (:func:`tf32_plan`), when every matmul of the rank
wants the same setting (else those ops keep their switching ``run``). The instrumented iterations (:meth:`executor.runtime.RankRunner._issue_cuda`)
walk the same ops in the same order; :func:`issue_order` is that order, and a test checks
that both loops issue exactly it.

p2p batches
-----------
A ``p2p: batched`` pipeline posts each Megatron ``_communicate`` call (a send and/or a recv)
as one ``torch.distributed.batch_isend_irecv`` (one ``ncclGroupStart/End``), as Megatron's
``batch_p2p_comm`` does (``megatron/core/pipeline_parallel/p2p_communication.py``). The
lowering (:mod:`schedsim.spec.pipeline_block`, in Megatron's order) names each call in
``Op.p2p_batch``, as a hand-written ``p2p_batch:`` does; :func:`p2p_batches` groups the ops of
one name into one batch. Every other send/recv is a lone
``isend``/``irecv`` issued in program order: on one NCCL communicator those run in issue
order with its other operations (NCCL docs, "Group Calls"; PyTorch's warning for unbatched
p2p in eager-init mode), which is exactly what the program order gives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schedsim.kinds import P2P_KINDS

__all__ = ["BatchedP2P", "compile_cpu", "compile_cuda", "issue_order", "p2p_batches", "tf32_plan", "waited_outside"]

def p2p_batches(ops: Sequence[Any]) -> list[list[int]]:
    """Indices (into ``ops``, one rank's ops in program order) of each p2p batch.

    A batch is every send/recv of the rank with the same ``Op.p2p_batch`` name (the graph's one
    definition of an NCCL group launch, :mod:`schedsim.lower.checks`, which ``check`` validated); it is
    posted as one ``batch_isend_irecv`` at the position of its first member. A batch may hold one op
    (Megatron posts a lone ``send_forward`` through ``batch_isend_irecv`` too). Ops without a
    ``p2p_batch`` are not listed: they are lone ``isend``/``irecv`` calls, issued in program order.
    """
    groups: dict[Any, list[int]] = {}
    for i, op in enumerate(ops):
        name = getattr(op, "p2p_batch", None) if op.kind in P2P_KINDS else None
        if name is not None:
            groups.setdefault(name, []).append(i)
    return list(groups.values())


class BatchedP2P:
    """One ``batch_isend_irecv`` shared by the ops of a batch.

    ``issue()`` (the first member's launch) posts every member's send/recv in one group and
    keeps the returned works; ``wait_current()`` (every member, on its own stream) makes the
    current CUDA stream wait for them without blocking the host; on gloo, ``work()`` returns
    an object whose ``wait()`` waits for them all (the host's completion callback).
    """

    def __init__(self, members: list[tuple[Any, Any, int, int]], group: Any = None) -> None:
        """``members``: each op's ``(isend or irecv, buffer, peer, tag)``; ``group``: the process group every
        member is issued on (torch's ``batch_isend_irecv`` needs one for all; None: the default group), the
        communicator ``predict`` times the batch on (:func:`schedsim.lower.p2p_comms.p2p_groups`)."""
        import torch.distributed as dist

        self.dist = dist
        self.p2p_ops = [dist.P2POp(fn, buf, peer, group, tag=tag) for fn, buf, peer, tag in members]
        self.works: list[Any] = []

    def issue(self) -> Any:
        self.works = self.dist.batch_isend_irecv(self.p2p_ops)
        return self

    def wait_current(self) -> None:
        for w in self.works:
            w.wait()

    def wait(self, timeout: Any = None) -> bool:
        for w in self.works:
            w.wait() if timeout is None else w.wait(timeout)
        return True

    def get_future(self) -> None:
        return None  # the runtime's waiter thread calls wait()


def issue_order(ops: Sequence[Any]) -> list[str]:
    """The op names in the order both loops issue them: program order (``Op.seq``)."""
    return [o.name for o in ops]


def tf32_plan(impls: Sequence[Any]) -> bool | None:
    """The single TF32 setting of every matmul, or None if they disagree (or there are none).

    The caller sets ``torch.backends.cuda.matmul.allow_tf32`` to it before the timed region of a
    lean iteration (not inside it: a hand-written script sets it once); :func:`compile_cuda` then
    binds the matmuls' bare launches.
    """
    vals = {impl.tf32 for impl in impls if impl.tf32 is not None}
    return vals.pop() if len(vals) == 1 else None


def compile_cuda(torch: Any, impls: Sequence[Any], streams: Sequence[Any], cross: Sequence[Sequence[int]],
                 dep_events: Sequence[Any], end_events: Sequence[tuple[Any, Any]],
                 owners: list[int] | None = None,
                 replays: Mapping[int, tuple[Sequence[int], Any]] | None = None,
                 syncs: Mapping[int, Callable[[], Any]] | None = None) -> list[Callable[[], Any]]:
    """Flat step list of one uninstrumented CUDA iteration (see the module docstring).

    Parameters
    ----------
    impls : per op (program order), :class:`executor.kernels.OpImpl`
    streams : per op, its ``torch.cuda.Stream``
    cross : per op, indices of the ops on *other* streams it must wait for
    dep_events : per op, a ``torch.cuda.Event`` recorded after it when another stream waits on it, else None
    end_events : ``(stream, event)`` pairs: the event is recorded on the stream after its last op (pairs, not a
        dict keyed by stream: two schedule streams that share a CUDA stream each keep their event)
    owners : when given, filled with the op index of each step (-1 for the end events' records), so that a
        caller can time each op's call (:meth:`executor.runtime.CudaRunner` ``host_calls``)
    replays : captured CUDA graph segments (:class:`executor.runtime.CudaSegmentRunner`), keyed by a segment's
        first op: ``(its op indices, its torch.cuda.CUDAGraph)``. The segment is one step group at its first op's
        place, on that op's stream: that stream waits for the segment's other streams and for its dependencies
        outside the segment, replays the graph, records the dependency events of those of its ops that an op
        outside the segment waits for (inside it the captured events order them), and the other streams wait
        for it (what the instrumented segment issue does without timing events: it waits for an op's event only
        from outside the op's segment); its other ops add no step
    syncs : per op index, the host synchronisation to call before it (rule host-wait,
        :func:`executor.runtime.host_syncs`), a step of its own

    The caller sets TF32 to :func:`tf32_plan` (when not None) before running the steps, and resets
    the current stream to the default one afterwards.
    """
    steps: list[Callable[[], Any]] = []
    tf32 = tf32_plan(impls)
    cur = None
    set_stream = torch.cuda.set_stream
    replays = replays or {}
    skip = {j for seg, _g in replays.values() for j in seg[1:]}
    waited = waited_outside(cross, replays)
    syncs = syncs or {}
    for i, impl in enumerate(impls):
        if i in skip:
            continue
        if i in syncs:
            steps.append(syncs[i])
        s = streams[i]
        if s is not cur:
            steps.append(functools.partial(set_stream, s))
            cur = s
        if i in replays:
            _replay_steps(steps, s, replays[i], streams, cross, dep_events, waited)
            if owners is not None:
                owners.extend([i] * (len(steps) - len(owners)))
            continue
        for d in cross[i]:
            steps.append(functools.partial(s.wait_event, dep_events[d]))
        fast = impl.fast if impl.fast is not None and (impl.tf32 is None or tf32 is not None) else None
        steps.append(fast or impl.run)
        if dep_events[i] is not None:
            steps.append(functools.partial(dep_events[i].record, s))
        if owners is not None:
            owners.extend([i] * (len(steps) - len(owners)))
    for s, ev in end_events:
        steps.append(functools.partial(ev.record, s))
    if owners is not None:
        owners.extend([-1] * (len(steps) - len(owners)))
    return steps


def waited_outside(cross: Sequence[Sequence[int]], replays: Mapping[int, tuple[Sequence[int], Any]]) -> set[int]:
    """Indices of the segment ops whose dependency event an op outside their segment waits for (``cross``: per
    op, the ops on other streams it waits for; ``replays``: :func:`compile_cuda`'s segments). An op waited for
    only inside its own segment is ordered by the events captured in the graph, so its replay records nothing.

    >>> sorted(waited_outside([[], [0], [1], [2]], {0: ([0, 1, 2], None)}))
    [2]
    """
    seg_of = {j: head for head, (seg, _g) in replays.items() for j in seg}
    return {d for k, lst in enumerate(cross) for d in lst if d in seg_of and seg_of.get(k) != seg_of[d]}


def _replay_steps(steps: list[Callable[[], Any]], s: Any, seg_graph: tuple[Sequence[int], Any],
                  streams: Sequence[Any], cross: Sequence[Sequence[int]], dep_events: Sequence[Any],
                  waited: set[int]) -> None:
    """The steps of one captured segment replayed on stream ``s`` (:func:`compile_cuda`'s ``replays``); ``waited``:
    :func:`waited_outside`."""
    seg, graph = seg_graph
    inside = set(seg)
    side = list({id(streams[j]): streams[j] for j in seg if streams[j] is not s}.values())
    steps.extend(functools.partial(s.wait_stream, other) for other in side)
    steps.extend(functools.partial(s.wait_event, dep_events[d]) for j in seg for d in cross[j] if d not in inside)
    steps.append(graph.replay)
    steps.extend(functools.partial(dep_events[j].record, s) for j in seg if j in waited and dep_events[j] is not None)
    steps.extend(functools.partial(other.wait_stream, s) for other in side)


def compile_cpu(impls: Sequence[Any], waits: Sequence[Sequence[int]]) -> list[tuple[int, tuple[int, ...], Any, bool]]:
    """Step tuples ``(index, async deps to wait for, run, is_async)`` of one uninstrumented CPU iteration.

    Only dependencies on asynchronous ops (gloo communication) are kept: a synchronous op has
    finished when its ``run`` returned.
    """
    asyn = [impl.is_async for impl in impls]
    return [(i, tuple(d for d in waits[i] if asyn[d]), impl.run, impl.is_async) for i, impl in enumerate(impls)]


def run_cpu(steps: Sequence[tuple[int, tuple[int, ...], Any, bool]], n: int, timeout: Any) -> None:
    """One uninstrumented CPU iteration: wait for async deps (``Work.wait(timeout)``), run, keep async works."""
    works: list[Any] = [None] * n
    for i, deps, run, is_async in steps:
        for d in deps:
            w = works[d]
            if w is not None:
                w.wait(timeout)
                works[d] = None
        w = run()
        if is_async:
            works[i] = w
    for w in works:
        if w is not None:
            w.wait(timeout)
