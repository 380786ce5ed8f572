"""Lower a compute order to one with explicit p2p actions, and dry-run it.

:func:`add_p2p` inserts, around every compute action whose neighbour stage
lives on another rank, the point-to-point actions in the order Megatron's
schedules issue them: the recv of an action's input just before it, the send
of its output just after it. For a 1F1B steady step this yields
``F, SEND_F, RECV_B, B, SEND_B, RECV_F, F ...`` which is the call order of
Megatron's ``send_forward_recv_backward`` / ``send_backward_recv_forward``
(``core/pipeline_parallel/p2p_communication.py``; batched there, adjacent
here).

Megatron's interleaved schedule with ``overlap_p2p_comm`` (its default)
posts the async recv for the next forward one step earlier, and PyTorch's
default lowering posts each recv right after the matching send in a global
interleaving (recvs "as early as possible"). Those are non-blocking irecvs
that are waited on just before the consumer, which is where this module puts
the (blocking) recv.

Naming follows PyTorch's ``_add_send_recv``: ``sSEND_Fj`` is sent by stage s
to stage s+1, which posts ``(s+1)RECV_Fj``; ``sSEND_Bj`` is sent by stage s
to stage s-1, which posts ``(s-1)RECV_Bj``. Torch's ``defer_pp_recv``
option (``_defer_recv_ops``) moves recvs next to their consumer, as here,
except that it flushes them before sends to a higher-ranked peer.

:func:`simulate_p2p` is a lock-step dry run in the spirit of PyTorch's
``_simulate_comms_compute``. What it does **not** model: durations (every
action takes one step), overlap of compute with communication, CUDA streams,
NCCL's rendezvous of large sends (a send here never blocks: it completes as
soon as its data exist), batching of p2p ops, and communicator creation
order (Megatron-LM#5240). It finds hangs that come from the order alone: a
recv waiting for a send that its peer only issues after a recv of its own
that can never complete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from schedsim.pipeline.actions import (
    COMM_TYPES,
    Action,
    ComputationType,
    PipelineOrder,
    ScheduleAction,
)
from schedsim.pipeline.errors import DeadlockError, PipelineScheduleError

__all__ = ["add_p2p", "compute_only", "infer_stage_to_rank", "simulate_p2p"]

_F = ComputationType.F
_B = ComputationType.B
_I = ComputationType.I
_W = ComputationType.W
_SEND_F = ComputationType.SEND_F
_RECV_F = ComputationType.RECV_F
_SEND_B = ComputationType.SEND_B
_RECV_B = ComputationType.RECV_B
_BWD = (_B, _I)

StageMap = Mapping[int, int] | Callable[[int], int]


def _as_func(stage_to_rank: StageMap) -> Callable[[int], int]:
    if callable(stage_to_rank):
        return stage_to_rank
    mapping = stage_to_rank

    def lookup(stage: int) -> int:
        try:
            return mapping[stage]
        except KeyError:
            raise PipelineScheduleError(
                f"stage {stage} is not in stage_to_rank (stages "
                f"{min(mapping, default=0)}..{max(mapping, default=-1)}); fix: pass "
                "a placement that covers every stage of the order"
            ) from None

    return lookup


def compute_only(order: Mapping[int, Sequence[ScheduleAction | None]]) -> PipelineOrder:
    """Drop idle slots and p2p actions, keeping compute (and overlapped) actions.

    Parameters
    ----------
    order : mapping of int to sequence
        Any order, with or without comms.

    Returns
    -------
    PipelineOrder
        Same ranks; UNSHARD/RESHARD/REDUCE_GRAD are dropped too.
    """
    return {r: [a for a in acts if a is not None and a.is_compute] for r, acts in sorted(order.items())}


def infer_stage_to_rank(order: Mapping[int, Sequence[ScheduleAction | None]]) -> dict[int, int]:
    """Stage -> rank map read off the compute actions of an order.

    Parameters
    ----------
    order : mapping of int to sequence

    Returns
    -------
    dict of int to int

    Raises
    ------
    PipelineScheduleError
        A stage's compute actions appear on two ranks (grid included).
    """
    found: dict[int, int] = {}
    for rank in sorted(order):
        for step, act in enumerate(order[rank]):
            if act is None or not act.is_compute:
                continue
            for sub in act.sub_actions:
                prev = found.setdefault(sub.stage, rank)
                if prev != rank:
                    raise PipelineScheduleError(
                        f"Rank {rank}, step {step}: {sub} puts stage {sub.stage} on "
                        f"rank {rank}, but rank {prev} also runs stage {sub.stage}; a "
                        "stage lives on exactly one rank",
                        order=order,
                        step=step,
                        rank=rank,
                        actions=(sub,),
                    )
    return found


def add_p2p(
    order: Mapping[int, Sequence[ScheduleAction | None]],
    stage_to_rank: StageMap,
    num_stages: int | None = None,
) -> PipelineOrder:
    """Insert SEND_F/RECV_F/SEND_B/RECV_B actions around cross-rank compute.

    For each compute action of stage s and microbatch j on its rank:

    * F, s > 0, stage s-1 elsewhere: ``sRECV_Fj`` just before it;
    * F, s < N-1, stage s+1 elsewhere: ``sSEND_Fj`` just after it;
    * I or B, s < N-1, stage s+1 elsewhere: ``sRECV_Bj`` just before it;
    * I or B, s > 0, stage s-1 elsewhere: ``sSEND_Bj`` just after it;
    * W: nothing. An overlapped pair gets both recvs before and both sends
      after (forward's first).

    Parameters
    ----------
    order : mapping of int to sequence of action or None
        Compute-only order (idle slots are dropped).
    stage_to_rank : mapping or callable
        Placement, e.g. :func:`schedsim.pipeline.schedules.stage_to_rank`.
    num_stages : int, optional
        Total stages N; default ``max stage in the order + 1``.

    Returns
    -------
    PipelineOrder
        Per-rank lists with the p2p actions in place, no idle slots.

    Raises
    ------
    PipelineScheduleError
        The order already holds p2p actions, or a stage is not placed.

    Notes
    -----
    Source: Megatron ``p2p_communication`` call order (recv input, compute,
    send output) and PyTorch ``_add_send_recv`` / ``_defer_recv_ops`` naming.
    """
    where = _as_func(stage_to_rank)
    if num_stages is None:
        num_stages = 1 + max(
            (s.stage for acts in order.values() for a in acts if a is not None for s in a.sub_actions),
            default=-1,
        )
    out: PipelineOrder = {}
    for rank in sorted(order):
        lowered: list[ScheduleAction | None] = []
        for step, act in enumerate(order[rank]):
            if act is None:
                continue
            if act.type in COMM_TYPES:
                raise PipelineScheduleError(
                    f"Rank {rank}, step {step}: {act} is a p2p action; add_p2p takes a "
                    "compute-only order (fix: pass compute_only(order))",
                    order=order,
                    step=step,
                    rank=rank,
                    actions=(act,),
                )
            if not act.is_compute:
                lowered.append(act)
                continue
            before: list[Action] = []
            after: list[Action] = []
            for sub in act.sub_actions:
                s, j = sub.stage, sub.microbatch
                here = where(s)
                if sub.type is _F:
                    if s > 0 and where(s - 1) != here:
                        before.append(Action(s, _RECV_F, j))
                    if s < num_stages - 1 and where(s + 1) != here:
                        after.append(Action(s, _SEND_F, j))
                elif sub.type in _BWD:
                    if s < num_stages - 1 and where(s + 1) != here:
                        before.append(Action(s, _RECV_B, j))
                    if s > 0 and where(s - 1) != here:
                        after.append(Action(s, _SEND_B, j))
            lowered.extend(before)
            lowered.append(act)
            lowered.extend(after)
        out[rank] = lowered
    return out


def _needs(
    act: ScheduleAction, num_stages: int, where: Callable[[int], int]
) -> list[list[tuple[int, tuple[int, ComputationType, int | None]]]]:
    """What must already have happened for ``act`` to run.

    Returns groups of alternatives: every group needs any one of its
    ``(rank that must have done it, (stage, type, microbatch))`` entries.
    """
    groups: list[list[tuple[int, tuple[int, ComputationType, int | None]]]] = []
    for sub in act.sub_actions:
        s, t, j = sub.stage, sub.type, sub.microbatch
        if t is _F:
            if s > 0:
                here = where(s)
                groups.append([(here, (s, _RECV_F, j)), (here, (s - 1, _F, j))])
        elif t is _B or t is _I:
            if s < num_stages - 1:
                here = where(s)
                groups.append([(here, (s, _RECV_B, j)), (here, (s + 1, _B, j)), (here, (s + 1, _I, j))])
        elif t is _SEND_F:
            groups.append([(where(s), (s, _F, j))])
        elif t is _SEND_B:
            here = where(s)
            groups.append([(here, (s, _B, j)), (here, (s, _I, j))])
        elif t is _RECV_F:
            groups.append([(where(s - 1), (s - 1, _SEND_F, j))])
        elif t is _RECV_B:
            groups.append([(where(s + 1), (s + 1, _SEND_B, j))])
    return groups


def simulate_p2p(
    order_with_comms: Mapping[int, Sequence[ScheduleAction | None]],
    stage_to_rank: StageMap | None = None,
    num_stages: int | None = None,
) -> PipelineOrder:
    """Lock-step dry run of an order with p2p actions; raise if ranks hang.

    Every step, each rank runs the head of its list if what it needs happened
    in an earlier step (on the rank that does it):

    * F of stage s > 0: ``sRECV_F`` or ``(s-1)F`` (same rank) for its microbatch;
    * I/B of stage s < N-1: ``sRECV_B`` or ``(s+1)I``/``(s+1)B`` (same rank);
    * ``sSEND_F``/``sSEND_B``: the F, resp. I/B, whose output it sends;
    * ``sRECV_F``: the peer's ``(s-1)SEND_F``; ``sRECV_B``: ``(s+1)SEND_B``;
    * W and the first/last stage's own inputs: nothing.

    A rank whose head is not ready idles (``None``). When no rank can move,
    the stalled heads are followed peer to peer; a cycle is a deadlock.

    Parameters
    ----------
    order_with_comms : mapping of int to sequence of action or None
        E.g. the output of :func:`add_p2p`. Idle slots are ignored.
    stage_to_rank : mapping or callable, optional
        Placement; default :func:`infer_stage_to_rank` of the order.
    num_stages : int, optional
        Default: max stage + 1.

    Returns
    -------
    PipelineOrder
        The lock-step timeline: rank -> action or None per step.

    Raises
    ------
    DeadlockError
        A cross-rank wait cycle. The message prints the timeline with a last
        row of the stalled actions marked ``<-- ERROR HERE`` and names each
        wait ("rank 0 waits in 0RECV_B0 for 1SEND_B0 from rank 1, which ...").
        ``.cycle`` lists the ranks.
    PipelineScheduleError
        A stall that is not a cycle: a recv whose send no rank ever issues, or
        a compute action whose input never arrives.

    Notes
    -----
    Source: PyTorch ``_simulate_comms_compute`` (same readiness rules; this
    one advances all ranks synchronously and explains the stall). See the
    module docstring for what is not modelled.
    """
    order = {r: [a for a in acts if a is not None] for r, acts in sorted(order_with_comms.items())}
    if stage_to_rank is None:
        stage_to_rank = infer_stage_to_rank(order)
    where = _as_func(stage_to_rank)
    if num_stages is None:
        num_stages = 1 + max(
            (s.stage for acts in order.values() for a in acts for s in a.sub_actions),
            default=-1,
        )
    done: dict[int, set[tuple[int, ComputationType, int | None]]] = {r: set() for r in order}
    pos = dict.fromkeys(order, 0)
    timeline: PipelineOrder = {r: [] for r in order}
    # per action: groups of alternatives [(rank, key), ...]; any one per group
    waiters: dict[tuple[int, tuple], list[int]] = {}
    blocked: set[int] = set()

    def unmet(act: ScheduleAction) -> list[tuple[int, tuple]] | None:
        for alts in _needs(act, num_stages, where):
            for rank, key in alts:
                if rank in done and key in done[rank]:
                    break
            else:
                return alts
        return None

    active = [r for r in order if order[r]]
    while active:
        moved: list[int] = []
        for r in active:
            if r in blocked:
                continue
            missing = unmet(order[r][pos[r]])
            if missing is None:
                moved.append(r)
            else:
                blocked.add(r)
                for rank_key in missing:
                    waiters.setdefault(rank_key, []).append(r)
        if not moved:
            _explain_stall(order, pos, timeline, done, num_stages, where)
        moved_set = set(moved)
        for r in active:
            if r in moved_set:
                timeline[r].append(order[r][pos[r]])
                pos[r] += 1
            else:
                timeline[r].append(None)
        for r in moved:
            act = timeline[r][-1]
            assert act is not None
            for sub in act.sub_actions:
                key = (sub.stage, sub.type, sub.microbatch)
                done[r].add(key)
                for w in waiters.pop((r, key), ()):
                    blocked.discard(w)
        active = [r for r in active if pos[r] < len(order[r])]
    return timeline


def _explain_stall(
    order: dict[int, list[ScheduleAction]],
    pos: dict[int, int],
    timeline: PipelineOrder,
    done: dict[int, set],
    num_stages: int,
    where: Callable[[int], int],
) -> None:
    heads = {r: order[r][pos[r]] for r in order if pos[r] < len(order[r])}
    step = max((len(t) for t in timeline.values()), default=0)
    # the timeline so far, padded, plus one row of the stalled heads
    grid = {r: [*timeline[r], *[None] * (step - len(timeline[r])), heads.get(r)] for r in order}

    # Who does each stalled rank wait for? Follow the first unmet alternative
    # group; the peer is the rank that would produce the missing key.
    waits: dict[int, tuple[int, str]] = {}
    broken: list[str] = []
    for r, act in heads.items():
        for alts in _needs(act, num_stages, where):
            if any(key in done.get(rank, ()) for rank, key in alts):
                continue
            # the alternative that some rank will still issue, if any
            target = None
            for rank, key in alts:
                rest = order.get(rank, [])[pos.get(rank, 0) :]
                if any(key in {(s.stage, s.type, s.microbatch) for s in a.sub_actions} for a in rest):
                    target = (rank, key)
                    break
            if target is None:
                wanted = " or ".join(f"{Action(*k)} on rank {rk}" for rk, k in alts)
                broken.append(f"rank {r} waits in {act} for {wanted}, which is never issued")
            else:
                rank, key = target
                waits[r] = (rank, f"rank {r} waits in {act} for {Action(*key)} from rank {rank}")
            break
    if broken:
        raise PipelineScheduleError(
            "schedule stalls: " + "; ".join(broken) + " (fix: add the missing send/recv or producer, e.g. lower the "
            "compute order with add_p2p)",
            order=grid,
            step=step,
            actions=tuple(heads.values()),
        )
    # waits is a functional graph over stalled ranks; find a cycle
    start = next(iter(waits))
    seen: list[int] = []
    cur = start
    while cur not in seen and cur in waits:
        seen.append(cur)
        cur = waits[cur][0]
    if cur in seen and len(seen[seen.index(cur) :]) == 1:
        r = cur
        raise DeadlockError(
            f"rank {r} waits for itself: {waits[r][1]}, which comes later in its own "
            "list (fix: move the producer or recv before its consumer)",
            cycle=[r],
            order=grid,
            step=step,
            rank=r,
            actions=(heads[r],),
        )
    if cur in seen:
        cycle = seen[seen.index(cur) :]
        chain = []
        for i, r in enumerate(cycle):
            nxt = cycle[(i + 1) % len(cycle)]
            text = waits[r][1]
            if nxt != r:
                text += f", which rank {nxt} only issues after its stalled {heads[nxt]}"
            chain.append(text)
        raise DeadlockError(
            "cross-rank wait cycle (deadlock) over ranks "
            + " -> ".join(map(str, cycle + [cycle[0]]))
            + ": "
            + "; ".join(chain)
            + ". Fix: reorder so each recv's matching send is issued before the "
            "sender blocks on a recv of its own (e.g. keep 1F1B warmup counts)",
            cycle=cycle,
            order=grid,
            step=step,
            rank=cycle[0],
            actions=tuple(heads[r] for r in cycle),
        )
    raise DeadlockError(  # pragma: no cover - every stalled rank waits on someone
        "schedule stalls: " + "; ".join(t for _, t in waits.values()),
        order=grid,
        step=step,
        actions=tuple(heads.values()),
    )
