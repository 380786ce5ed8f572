"""The issue order of a pipeline block's ranks with its p2p placed: per rank, each compute and each send/recv in
the order the framework that runs the schedule issues them, and the NCCL batch each p2p op belongs to.

Megatron places the p2p for 1F1B and interleaved 1F1B (:func:`_interleaved_steps`, :func:`_per_call`: the order
of ``_p2p_ops`` in ``core/pipeline_parallel/p2p_communication.py``), torch's ``_add_send_recv`` for every other
schedule and for custom action lists (:func:`_torch_lower_cols` on columns, the per-action form in
:mod:`schedsim.pipeline.comms`), and a user's own SEND/RECV actions are taken as written (:func:`_user_comms`).
The order comes as :data:`Steps` (Action objects) or as columns (:class:`StepCols`, :func:`_step_cols`), which
the emitters of :mod:`schedsim.lower.pipeline` and :mod:`schedsim.lower.pipeline_emitter` turn into op instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from schedsim.lower.pipeline_plan import PipelinePlan, block_error, split_fix
from schedsim.lower.program import required
from schedsim.pipeline.actions import Action
from schedsim.pipeline.actions import ComputationType as CT
from schedsim.spec.model import ScheduleSpec
from schedsim.spec.pipeline_block import PipelineSpec


def _megatron_p2p_ops_order(ops: list[Any], rank: int) -> list[Any]:
    """The p2p actions of one Megatron p2p call in the order ``_p2p_ops`` posts them as lone isend/irecv.

    Even pipeline ranks: send_next, recv_prev, send_prev, recv_next; odd ranks: recv_prev, send_next,
    recv_next, send_prev (Megatron-LM ``core/pipeline_parallel/p2p_communication.py``), so two
    neighbours never both send first on their shared communicator, which hangs on NCCL.
    SEND_F is send_next, RECV_F recv_prev, SEND_B send_prev, RECV_B recv_next.
    """
    from schedsim.pipeline.actions import ComputationType as CT

    pos = ({CT.SEND_F: 0, CT.RECV_F: 1, CT.SEND_B: 2, CT.RECV_B: 3} if rank % 2 == 0 else
           {CT.RECV_F: 0, CT.SEND_F: 1, CT.RECV_B: 2, CT.SEND_B: 3})
    return sorted(ops, key=lambda a: pos[a.type])


def _per_call(acts: list[Any], rank: int) -> list[Any]:
    """Apply :func:`_megatron_p2p_ops_order` to each run of p2p actions between two computes."""
    from schedsim.pipeline.actions import COMM_TYPES

    out: list[Any] = []
    run: list[Any] = []
    for a in acts:
        if a is not None and a.type in COMM_TYPES:
            run.append(a)
            continue
        out.extend(_megatron_p2p_ops_order(run, rank))
        run = []
        if a is not None:
            out.append(a)
    out.extend(_megatron_p2p_ops_order(run, rank))
    return out


Steps = dict[int, list[tuple[Any, "int | None"]]]  # per rank: (action, NCCL batch id or None) in issue order


def _interleaved_steps(spec: ScheduleSpec, pb: PipelineSpec, plan: PipelinePlan) -> Steps:
    """Megatron's interleaved 1F1B issue order (:func:`schedsim.pipeline.comms.megatron_interleaved_batched`)."""
    from schedsim.pipeline.comms import megatron_interleaved_batched

    if plan.p == 2 and plan.mode == "batched":
        raise block_error(spec, "interleaved 1F1B with batched p2p needs p >= 3: with p = 2 one batch holds two sends "
                   "to the same peer, which NCCL pairs by issue order with the wrong recvs (Megatron-LM "
                   "arguments.py refuses it for the same reason)", "pipeline.p2p",
                   "use p2p: overlapped (Megatron's default for interleaving) or p >= 3")
    steps: Steps = {}
    overlap = plan.mode != "batched"  # lone p2p: Megatron's overlap_p2p_comm order
    for r, seq in megatron_interleaved_batched(plan.p, plan.m, plan.v, pb.group_size, overlap).items():
        out_r: list[tuple[Any, int | None]] = []
        for i, x in enumerate(seq):
            if not isinstance(x, list):
                out_r.append((x, None))
            elif plan.mode == "batched":
                out_r.extend((a, i) for a in x)
            else:
                out_r.extend((a, None) for a in _megatron_p2p_ops_order(x, r))
        steps[r] = out_r
    return steps


#: In this process: :func:`_interleaved_steps`'s answers by (p, m, v, group size, p2p mode), the only inputs it
#: reads but for the error it raises (the points of a ``schedsim search`` share orders); at most this many, then
#: forgotten all at once. The answers are shared: read only (their Actions are tuples).
STEPS_KEPT = 64
_STEPS: dict[tuple[Any, ...], Steps] = {}


def interleaved_steps_kept(spec: ScheduleSpec, pb: PipelineSpec, plan: PipelinePlan) -> Steps:
    """:func:`_interleaved_steps`, kept in :data:`_STEPS` (the same dict for the same order: not to be changed)."""
    key = (plan.p, plan.m, plan.v, pb.group_size, plan.mode)
    got = _STEPS.get(key)
    if got is None:
        got = _interleaved_steps(spec, pb, plan)
        if len(_STEPS) >= STEPS_KEPT:
            _STEPS.clear()
        _STEPS[key] = got
    return got


def _interleaved_cols(spec: ScheduleSpec, pb: PipelineSpec, plan: PipelinePlan) -> StepCols:
    """:func:`_interleaved_steps` straight into columns (:func:`schedsim.pipeline.comms.megatron_interleaved_cols`,
    no Action objects): the ops of one p2p call in ``_p2p_ops`` order (overlapped) or in batch order (batched),
    whose batch id is the index of its call in the rank's list."""
    from schedsim.pipeline.comms import megatron_interleaved_cols

    if plan.p == 2 and plan.mode == "batched":
        _interleaved_steps(spec, pb, plan)  # raises its error
    batched = plan.mode == "batched"
    rank, typ, stage, mb, call = megatron_interleaved_cols(plan.p, plan.m, plan.v, pb.group_size,
                                                           p2p_ops_order=not batched)
    bid = np.where(typ >= 4, call, -1) if batched else np.full(len(typ), -1, np.int64)
    return StepCols(rank, typ, stage, mb, bid)


def _user_comms(plan: PipelinePlan) -> dict[int, list[Any]]:
    """A compute_comms order (torch CSV or actions with SEND/RECV) as the user issues it; raises the p2p
    simulation's error (a compute whose input is never received, a recv never sent) with one fix line."""
    from schedsim.pipeline.comms import simulate_p2p

    # UNSHARD, RESHARD and REDUCE_GRAD (torch's runtime CSV has them) carry no microbatch and no p2p
    lowered = {r: [a for a in acts if a is not None and (a.is_compute or a.is_comm)]
               for r, acts in plan.actions().items()}
    try:
        simulate_p2p(lowered, plan.s2r, plan.num_stages)
    except ValueError as e:
        reason = getattr(e, "reason", None)
        if reason is not None and "(fix:" in reason:  # one `fix:` line, as every other rejection
            head, fix = split_fix(reason, custom=True)
            grid = getattr(e, "grid", "")
            e.args = (f"{head}\n  fix: {fix}" + (f"\n\nPipeline schedule:\n{grid}" if grid else ""),)
        raise
    return lowered


def _lowered_steps(plan: PipelinePlan, columns: bool = True) -> Steps | StepCols:
    """The p2p of every schedule but Megatron's interleaved 1F1B: the user's, torch's ``_add_send_recv``, or Megatron's
    (as :class:`StepCols` when ``columns`` and the order has a column form)."""
    from schedsim.pipeline import add_p2p
    from schedsim.pipeline.actions import COMM_TYPES
    from schedsim.pipeline.comms import align_recvs, torch_add_send_recv

    torch_run = plan.name not in ("1f1b", "interleaved_1f1b") or plan.torch_rules
    if columns and torch_run and plan.cols is not None:  # a compute-only order as columns (no p2p of the user's)
        cols = _torch_lower_cols(plan)
        if cols is not None:
            return cols
    order = plan.actions()
    if any(a is not None and a.type in COMM_TYPES for acts in order.values() for a in acts):
        lowered = _user_comms(plan)
    elif torch_run:
        # torch runs these schedules (and custom action lists): each p2p action its own batch_isend_irecv
        # (torch _PipelineScheduleRuntime._batch_p2p)
        lowered = torch_add_send_recv(order, plan.s2r, plan.num_stages)
    else:
        lowered = align_recvs(add_p2p(order, plan.s2r, plan.num_stages), plan.s2r)
        if plan.mode == "overlapped":  # Megatron with batch_p2p_comm off: each call's lone ops in _p2p_ops order
            lowered = {r: _per_call(acts, r) for r, acts in lowered.items()}
    steps: Steps = {}
    batch_ids = plan.mode == "batched" or torch_run
    for r, acts in lowered.items():
        out_r: list[tuple[Any, int | None]] = []
        bid, prev_comm = 0, False
        for a in acts:
            if a is None:
                continue
            comm = a.type in COMM_TYPES
            if comm and (not prev_comm or torch_run):
                bid += 1
            out_r.append((a, bid if comm and batch_ids else None))
            prev_comm = comm
        steps[r] = out_r
    return steps


def _torch_producers(plan: PipelinePlan) -> tuple[np.ndarray, np.ndarray]:
    """Per step of ``plan.cols`` (int64 arrays of its length): the step whose output it waits for (a forward: the
    previous stage's forward of its microbatch; a backward: the next stage's I, else B; -1 none), and 1 where that
    producer's rank is above the step's (torch sweeps it later in a sweep), else 0."""
    c = plan.cols
    assert c is not None
    NS, M = plan.num_stages, plan.m
    busy = np.flatnonzero(c.typ >= 0)
    t, st, j, rk = c.typ, c.stage, c.mb, c.rank
    pos = np.full((4, NS, M), -1, np.int64)
    pos[t[busy], st[busy], j[busy]] = busy
    prod = np.full(len(t), -1, np.int64)
    f = (t == 0) & (st > 0)
    prod[f] = pos[0, st[f] - 1, j[f]]
    bw = ((t == 1) | (t == 2)) & (st < NS - 1)
    nxt = np.minimum(st[bw] + 1, NS - 1)
    pi, pb = pos[1, nxt, j[bw]], pos[2, nxt, j[bw]]
    prod[bw] = np.where(pi >= 0, pi, pb)
    adj = (rk[np.maximum(prod, 0)] > rk).astype(np.int64)
    return prod, adj


def _torch_lower_cols(plan: PipelinePlan) -> StepCols | None:
    """:func:`schedsim.pipeline.comms.torch_add_send_recv` on an order's columns (each p2p op its own batch), in C
    (``_cwaves.torch_rows``; its numpy form, rounds of running maxima, is the test oracle
    ``tests/oracle/numpy_helpers.torch_lower_cols``).

    torch sweeps the ranks in order, one step per rank per sweep; a step runs once its input is there (the
    recv the producer's send appended to this rank's list, or the producer itself on this rank), and a
    compute with a cross-rank output appends its send to its own list and the matching recv to the
    receiver's at that moment. So the sweep ``t`` in which step ``k`` of rank ``r`` runs is
    ``t_k = max(t_(k-1) + 1, t_producer + (1 if the producer's rank > r else 0))``: the least solution, as
    longest paths in Kahn's order; each rank's list is then its steps and the recvs in the order torch appends
    them (a counting sort by sweep). None when a step waits on a cycle, whose error the per-action lowering
    raises.

    Raises
    ------
    BuildError
        The compiled module is not built (:func:`schedsim.lower.program.required`).
    """
    ext = required("torch_rows")
    prod, adj = _torch_producers(plan)
    c = plan.cols
    assert c is not None
    NS, i64 = plan.num_stages, np.int64
    t, st, rk = c.typ, c.stage, c.rank
    s2r = np.array([plan.s2r[x] for x in range(NS)] + [-1], i64)
    fs = (t == 0) & (st < NS - 1)  # a forward whose next stage is on another rank sends its output there
    fs[fs] = s2r[st[fs] + 1] != rk[fs]
    bs = ((t == 1) | (t == 2)) & (st > 0)  # a backward sends its input gradient to the previous stage's rank
    bs[bs] = s2r[st[bs] - 1] != rk[bs]
    send = np.where(fs, 4, np.where(bs, 6, 0)).astype(i64)
    peer_st = np.where(fs, st + 1, st - 1)
    rows = int((t >= 0).sum()) + 2 * int((send > 0).sum())
    out = [np.empty(rows, i64) for _ in range(5)]
    sweep = np.empty(len(t), i64)
    counts = np.asarray(c.counts, i64)
    t, st, mb = (np.ascontiguousarray(x, i64) for x in (t, st, c.mb))
    if not ext(counts, t, st, mb, prod, adj, send, peer_st, s2r[peer_st], sweep, *out):
        return None
    return StepCols(*out)


_CODE = {CT.F: 0, CT.I: 1, CT.B: 2, CT.W: 3, CT.SEND_F: 4, CT.RECV_F: 5, CT.SEND_B: 6, CT.RECV_B: 7}


@dataclass
class StepCols:
    """The issue order of every rank as columns, rank-major (rank 0's steps first), in issue order.

    ``rank`` (pipeline rank 0..p-1), ``typ`` (0..7: F, I, B, W, SEND_F, RECV_F, SEND_B, RECV_B), ``stage``,
    ``mb`` (microbatch), ``bid`` (NCCL batch id, -1 = a lone op): int64 arrays of one length.
    """

    rank: np.ndarray
    typ: np.ndarray
    stage: np.ndarray
    mb: np.ndarray
    bid: np.ndarray


def _step_cols(steps: Steps | StepCols, plan: PipelinePlan) -> StepCols | None:
    """The steps as :class:`StepCols`; None when an action has no column form (DualPipe's overlapped pair,
    torch's UNSHARD/RESHARD/REDUCE_GRAD), which the per-op emitter handles."""
    if isinstance(steps, StepCols):
        return steps
    rr: list[int] = []
    tt: list[int] = []
    ss: list[int] = []
    jj: list[int] = []
    bb: list[int] = []
    for r in range(plan.p):
        seq = steps[r]
        if not seq:
            continue
        acts, bids = zip(*seq, strict=True)
        if any(type(a) is not Action for a in acts):
            return None
        st, ty, mb = zip(*acts, strict=True)
        try:
            tt.extend(map(_CODE.__getitem__, ty))
        except KeyError:
            return None
        rr.extend([r] * len(acts))
        ss.extend(st)
        jj.extend(mb)
        bb.extend(-1 if b is None else b for b in bids)
    i64 = np.int64
    return StepCols(np.array(rr, i64), np.array(tt, i64), np.array(ss, i64), np.array(jj, i64), np.array(bb, i64))
