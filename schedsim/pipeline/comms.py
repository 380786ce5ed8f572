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
from typing import Any

from schedsim.errors import DeadlockError, PipelineScheduleError
from schedsim.pipeline.actions import (
    COMM_TYPES,
    Action,
    ComputationType,
    PipelineOrder,
    ScheduleAction,
)

__all__ = ["add_p2p", "compute_only", "infer_stage_to_rank", "megatron_interleaved_batched", "simulate_p2p"]

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
                f"{min(mapping, default=0)}..{max(mapping, default=-1)})",
                fix="pass a placement that covers every stage of the order"
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
                    "compute-only order", fix="pass compute_only(order)",
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
            "schedule stalls: " + "; ".join(broken),
            fix="add the missing send/recv or producer, or give compute actions only and let the sends and recvs be "
            "added",
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
            "list", fix="move the producer or recv before its consumer",
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


def megatron_interleaved_batched(p: int, m: int, v: int, group_size: int | None = None,
                                 overlap: bool = False) -> dict[int, list[Any]]:
    """Megatron's interleaved 1F1B with ``batch_p2p_comm`` (overlap off): compute and p2p in issue order.

    Follows ``forward_backward_pipelining_with_interleaving`` (Megatron-LM d98e8a64,
    ``core/pipeline_parallel/schedules.py``) with ``overlap_p2p_comm=False``, step by step: the first
    ``recv_forward``; per warmup forward ``send_forward_recv_forward`` (the last one
    ``send_forward_backward_recv_forward_backward``, which also receives the first gradient); per steady
    step the forward, the backward, then one ``send_forward_backward_recv_forward_backward`` that
    sends both results together; per cooldown backward ``send_backward_recv_backward``. Which recvs
    happen comes from its ``recv_tensor_from_previous_stage`` (the ring wrap between the last and first
    rank) and the "no recv in the last iteration" rules. A batch lists its ops as ``_batched_p2p_ops``
    appends them: send_prev, recv_prev, send_next, recv_next (``p2p_communication.py``).

    With ``overlap`` (``overlap_p2p_comm``, whose p2p are lone: Megatron-LM's ``arguments.py`` sets
    ``batch_p2p_comm = not overlap_p2p_comm``), a steady step is the schedule's ``if config.overlap_p2p_comm``
    branch instead: the forward, its ``send_forward_recv_forward`` (send_next, recv_prev), the backward, its
    ``send_backward_recv_backward`` (send_prev, recv_next); each rank's calls with one peer come in the same order
    either way, but the forward's call is issued before the backward. The warmup and cooldown calls are the
    same (the last warmup's ``send_backward_recv_backward`` follows its ``send_forward_recv_forward`` at once).
    The same branch in the Zero Bubble paper's fork (sail-sg/zero-bubble-pipeline-parallelism 425b42e).

    Returns
    -------
    dict of int to list
        Per rank, in issue order: compute :class:`Action` s (F or B) and batches (tuples of
        SEND_F/RECV_F/SEND_B/RECV_B actions posted together with one ``batch_isend_irecv``; lists, since an Action is a tuple). A recv
        is named after the stage and microbatch it feeds (the k-th recv into a chunk feeds its
        microbatch k, as Megatron's per-chunk FIFOs do).

    Notes
    -----
    Megatron refuses p = 2 here (``arguments.py``: "pipeline-model-parallel size should be greater
    than 2 to avoid having multiple p2p sends and recvs between same 2 ranks per communication
    batch"): with two ranks one batch holds two sends to one peer, which NCCL pairs by order.
    """
    from schedsim.pipeline.schedules_1f1b import megatron_schedule_table

    g = p if group_size is None else group_size
    table = megatron_schedule_table(m, v, g)
    total = v * m
    chunk_table = [c for _mb, c in table]
    out: dict[int, list[Any]] = {}
    for r in range(p):
        first, last = r == 0, r == p - 1
        warm = min(2 * (p - r - 1) + (v - 1) * g, total)
        all_warm = warm >= total
        rest = total - warm
        seq: list[Any] = []
        nrecv = {"F": [0] * v, "B": [0] * v}

        def chunk_id(k: int, fwd: bool) -> int:
            c = chunk_table[k % total]
            return c if fwd else v - 1 - c

        def recv_from_prev(k: int, fwd: bool) -> tuple[bool, int]:
            recv = True
            if (first if fwd else last):
                if k < p - 1:
                    recv = False
                    nxt = chunk_id(k + 1, fwd)
                else:
                    nxt = chunk_id(k - (p - 1), fwd)
                if nxt == (v - 1 if fwd else 0):
                    recv = False
                nxt += 1 if fwd else -1
            else:
                nxt = chunk_id(k + 1, fwd)
            return recv, nxt

        def recv(kind: str, c: int) -> Action:
            j = nrecv[kind][c]
            nrecv[kind][c] += 1
            return Action(c * p + r, _RECV_F if kind == "F" else _RECV_B, j)

        def fwd(k: int) -> Action:
            mb, c = table[k]
            return Action(c * p + r, _F, mb)

        def bwd(k: int) -> Action:
            mb, c = table[k]
            return Action((v - 1 - c) * p + r, _B, mb)

        def send_f(k: int) -> Action | None:
            mb, c = table[k]
            return None if (c == v - 1 and last) else Action(c * p + r, _SEND_F, mb)

        def send_b(k: int) -> Action | None:
            mb, c = table[k]
            c = v - 1 - c
            return None if (c == 0 and first) else Action(c * p + r, _SEND_B, mb)

        def batch(*ops: Action | None) -> None:
            got = tuple(o for o in ops if o is not None)
            if got:
                seq.append(list(got))

        if not first:
            batch(recv("F", 0))
        for k in range(warm):
            rp, nf = recv_from_prev(k, True)
            if k == total - 1:
                rp = False
            seq.append(fwd(k))
            sf = send_f(k)
            if k == warm - 1 and not all_warm:
                batch(None, recv("F", nf) if rp else None, sf, None if last else recv("B", v - 1))
            else:
                batch(None, recv("F", nf) if rp else None, sf, None)
        for k in range(rest):
            fk = k + warm
            seq.append(fwd(fk))
            rp, nf = recv_from_prev(fk, True)
            rn, nb = recv_from_prev(k, False)
            if k == rest - 1:
                rp = False
            fcall = (recv("F", nf) if rp else None, send_f(fk))
            _steady_calls(seq, batch, bwd(k), fcall, (send_b(k), recv("B", nb) if rn else None), overlap)
        if all_warm and not last:
            batch(recv("B", v - 1))
        for k in range(rest, total):
            rn, nb = recv_from_prev(k, False)
            if k == total - 1:
                rn = False
            seq.append(bwd(k))
            batch(send_b(k), None, None, recv("B", nb) if rn else None)
        out[r] = seq
    return out


def _steady_calls(seq: list[Any], batch: Callable[..., None], bwd: Action, fcall: tuple[Any, Any],
                  bcall: tuple[Any, Any], overlap: bool) -> None:
    """A steady step of :func:`megatron_interleaved_batched` after its forward: the backward ``bwd`` and the calls,
    ``fcall`` (recv_prev, send_next) and ``bcall`` (send_prev, recv_next): with ``overlap`` the forward's call, the
    backward, the backward's call; without, the backward then one call of all four."""
    if overlap:
        batch(None, *fcall, None)
        seq.append(bwd)
        batch(bcall[0], None, None, bcall[1])
    else:
        seq.append(bwd)
        batch(bcall[0], *fcall, bcall[1])


def align_recvs(lowered: Mapping[int, Sequence[ScheduleAction | None]], stage_to_rank: StageMap) -> PipelineOrder:
    """Hoist recvs so that each rank posts its recvs from a peer in the order that peer sends.

    NCCL pairs the sends and recvs between two ranks by issue order (it has no tags). :func:`add_p2p`
    puts each recv just before its consumer, which for schedules where one pair of ranks carries
    several streams of messages (V placement, interleaving at p = 2) posts them in another order than
    the peer sends them. Here a recv that would come out of order is preceded by the recvs of the
    messages its peer sent before it, i.e. those are posted earlier, as PyTorch's ``_add_send_recv``
    posts recvs as early as possible.

    Returns
    -------
    PipelineOrder
        Same actions, recvs moved earlier where needed; idle slots dropped.
    """
    where = _as_func(stage_to_rank)
    sent: dict[tuple[int, int], list[tuple[str, int, int | None]]] = {}
    for a, acts in order_items(lowered):
        for act in acts:
            if act.type is _SEND_F:
                sent.setdefault((a, where(act.stage + 1)), []).append(("F", act.stage, act.microbatch))
            elif act.type is _SEND_B:
                sent.setdefault((a, where(act.stage - 1)), []).append(("B", act.stage, act.microbatch))
    out: PipelineOrder = {}
    for b, acts in order_items(lowered):
        def key(act: ScheduleAction) -> tuple[int, tuple[str, int, int | None]] | None:
            if act.type is _RECV_F:
                return where(act.stage - 1), ("F", act.stage - 1, act.microbatch)
            if act.type is _RECV_B:
                return where(act.stage + 1), ("B", act.stage + 1, act.microbatch)
            return None

        recv_of = {}
        for act in acts:
            k = key(act)
            if k is not None:
                recv_of[k] = act
        pos: dict[int, int] = {}
        done: set = set()
        new: list[ScheduleAction | None] = []
        for act in acts:
            k = key(act)
            if k is None:
                new.append(act)
                continue
            if k in done:
                continue
            src, msg = k
            seq = sent.get((src, b), [])
            i = pos.get(src, 0)
            while i < len(seq):
                kk = (src, seq[i])
                i += 1
                if kk in recv_of and kk not in done:
                    done.add(kk)
                    new.append(recv_of[kk])
                if kk == k:
                    break
            pos[src] = i
            if k not in done:  # not sent by the peer at all: leave it (the checks report it)
                done.add(k)
                new.append(act)
        out[b] = new
    return out


def order_items(order: Mapping[int, Sequence[ScheduleAction | None]]) -> list[tuple[int, list[ScheduleAction]]]:
    """``(rank, actions without idle slots)`` in rank order."""
    return [(r, [a for a in acts if a is not None]) for r, acts in sorted(order.items())]


def torch_add_send_recv(
    order: Mapping[int, Sequence[ScheduleAction | None]], stage_to_rank: StageMap, num_stages: int | None = None
) -> PipelineOrder:
    """Lower a compute-only order the way PyTorch's ``_add_send_recv`` does.

    Ranks are swept in rank order, one action per rank per sweep; an action runs once its input is
    there (its recv, or the producing action on the same rank). After a compute action with a
    cross-rank output, the send goes right after it **and the matching recv is appended to the
    receiver's list at that moment** (recvs as early as possible), so every pair of ranks posts its
    recvs in the order the sends are issued. Source: ``torch/distributed/pipelining/schedules.py``
    ``_add_send_recv`` (torch 2.5+).

    Raises
    ------
    PipelineScheduleError
        No rank can make progress (a malformed compute order).
    """
    where = _as_func(stage_to_rank)
    if num_stages is None:
        num_stages = 1 + max((s.stage for acts in order.values() for a in acts if a is not None
                              for s in a.sub_actions), default=-1)
    todo = {r: list(acts) for r, acts in sorted(order.items())}  # an idle slot takes a sweep, as in torch
    pos = dict.fromkeys(todo, 0)
    out: PipelineOrder = {r: [] for r in todo}
    seen: dict[int, set[tuple[int, ComputationType, int | None]]] = {r: set() for r in todo}

    def ready(act: ScheduleAction, done: set) -> bool:
        for sub in act.sub_actions:
            s, t, j = sub.stage, sub.type, sub.microbatch
            if t is _F and s > 0 and not ((s, _RECV_F, j) in done or (s - 1, _F, j) in done):
                return False
            if t in _BWD and s < num_stages - 1 and not (
                    (s, _RECV_B, j) in done or (s + 1, _I, j) in done or (s + 1, _B, j) in done):
                return False
        return True

    while any(pos[r] < len(todo[r]) for r in todo):
        progress = False
        for r in sorted(todo):
            if pos[r] >= len(todo[r]):
                continue
            act = todo[r][pos[r]]
            if act is None:
                pos[r] += 1
                progress = True
                continue
            if not ready(act, seen[r]):
                continue
            out[r].append(act)
            for sub in act.sub_actions:
                seen[r].add((sub.stage, sub.type, sub.microbatch))
            for sub in act.sub_actions:
                s, t, j = sub.stage, sub.type, sub.microbatch
                if t is _F and s < num_stages - 1 and where(s + 1) != r:
                    send, recv = Action(s, _SEND_F, j), Action(s + 1, _RECV_F, j)
                elif t in _BWD and s > 0 and where(s - 1) != r:
                    send, recv = Action(s, _SEND_B, j), Action(s - 1, _RECV_B, j)
                else:
                    continue
                out[r].append(send)
                dst = where(recv.stage)
                out[dst].append(recv)
                seen[dst].add((recv.stage, recv.type, recv.microbatch))
            pos[r] += 1
            progress = True
        if not progress:
            stuck = {r: todo[r][pos[r]] for r in todo if pos[r] < len(todo[r])}
            raise PipelineScheduleError(
                "cannot lower the order to sends and recvs (torch _add_send_recv): no rank can run its next "
                "action: " + ", ".join(f"rank {r}: {a}" for r, a in stuck.items()),
                fix="an input of each of these comes later in its producer's list; reorder",
                order=order, step=0, actions=tuple(stuck.values()))
    return out


#: Action type codes of :func:`megatron_interleaved_cols` (those of the lowering's step columns).
CODE_F, CODE_B, CODE_SEND_F, CODE_RECV_F, CODE_SEND_B, CODE_RECV_B = 0, 2, 4, 5, 6, 7


def megatron_interleaved_cols(p: int, m: int, v: int, group_size: int | None = None,
                              p2p_ops_order: bool = False) -> tuple[Any, Any, Any, Any, Any]:
    """:func:`megatron_interleaved_batched` as columns, computed per rank with numpy over the step index (no
    Action objects); tests/pipeline/test_megatron_cols.py asserts it equals the generator's output.

    Each rank's list is laid out as rows of fixed slots, one row per step of a phase, then the empty slots
    (a recv that does not happen, a send off the pipeline's ends) are dropped:

    - a first ``recv_forward`` (every rank but the first);
    - warmup step k: ``F(k)``, then the batch (recv_prev, send_next, recv_next);
    - steady step k: ``F(warm + k)``, ``B(k)``, then the batch (send_prev, recv_prev, send_next, recv_next);
    - the gradient of the last warmup forward (all ranks warm, every rank but the last);
    - cooldown step k: ``B(k)``, then the batch (send_prev, recv_next).

    A recv's microbatch is its count among the earlier recvs into the same chunk and direction (Megatron's
    per-chunk FIFOs), found by one stable sort of the rank's recvs.

    Parameters
    ----------
    p, m, v, group_size
        As :func:`megatron_interleaved_batched`.
    p2p_ops_order : bool
        Megatron's ``overlap_p2p_comm`` (``megatron_interleaved_batched(..., overlap=True)``): a steady step is
        F, (recv_prev, send_next), B, (send_prev, recv_next), and the ops of each call come in the order
        ``_p2p_ops`` posts them as lone isend/irecv (even ranks send_next, recv_prev, send_prev, recv_next; odd
        ranks recv_prev, send_next, recv_next, send_prev) instead of ``_batched_p2p_ops``' order.

    Returns
    -------
    (rank, typ, stage, mb, call) : int64 arrays, one entry per action, rank-major, each rank's in issue
        order. ``typ``: 0 F, 2 B, 4 SEND_F, 5 RECV_F, 6 SEND_B, 7 RECV_B; ``call``: the index, in the rank's
        list, of the entry the action belongs to (a compute alone, or a batch).
    """
    import numpy as np

    from schedsim.pipeline.schedules_1f1b import megatron_schedule_table

    i64 = np.int64
    g = p if group_size is None else group_size
    tab = np.array(megatron_schedule_table(m, v, g), i64).reshape(-1, 2)
    cols = [_megatron_rank_cols(p, v, g, r, tab, p2p_ops_order) for r in range(p)]
    if not p:
        z = np.zeros(0, i64)
        return z, z, z, z, z
    return tuple(np.concatenate([c[k] for c in cols]).astype(i64, copy=False)  # type: ignore[return-value]
                 for k in range(5))


def _megatron_rank_cols(p: int, v: int, g: int, r: int, tab: Any, p2p_ops_order: bool) -> tuple[Any, ...]:
    """Rank ``r``'s columns of :func:`megatron_interleaved_cols` (``tab``: the schedule table as an (v·m, 2)
    array of microbatch and chunk)."""
    import numpy as np

    i64 = np.int64
    total = len(tab)
    mb_t, fc = tab[:, 0], tab[:, 1]  # per forward k: microbatch, chunk (backward k: chunk v - 1 - c)
    bc = v - 1 - fc
    first, last = r == 0, r == p - 1
    warm = min(2 * (p - r - 1) + (v - 1) * g, total)
    rest = total - warm

    def recv_from_prev(k: Any, fwd: bool) -> tuple[Any, Any]:
        """Megatron's ``recv_tensor_from_previous_stage`` for steps ``k``: (whether, next chunk)."""
        cid = fc if fwd else bc
        if first if fwd else last:
            early = k < p - 1
            nxt = np.where(early, cid[(k + 1) % total], cid[(k - (p - 1)) % total])
            recv = ~early & (nxt != (v - 1 if fwd else 0))
            return recv, nxt + (1 if fwd else -1)
        return np.ones(len(k), bool), cid[(k + 1) % total]

    # slots: (typ, chunk, mb (-1: a recv's, counted below), valid, call key) per phase, as (rows, slots)
    rows: list[tuple[Any, ...]] = []
    key0 = 0

    def phase(slots: list[tuple[Any, Any, Any, Any, int]], n: int) -> None:
        """Append ``n`` rows of ``slots`` (typ, chunk, mb, valid, call of the slot within its row)."""
        nonlocal key0
        if n <= 0:
            return
        cols = [np.broadcast_to(np.asarray(x), (n,)) for s in slots for x in s[:4]]
        arr = [np.stack(cols[i::4], axis=1) for i in range(4)]
        sub = np.array([s[4] for s in slots], i64)
        ncall = int(sub.max()) + 1
        key = key0 + np.arange(n)[:, None] * ncall + sub[None, :]
        key0 += n * ncall
        rows.append((*arr, key))

    def send_f(k: Any) -> tuple[Any, Any, Any, Any, int]:
        return (CODE_SEND_F, fc[k], mb_t[k], ~((fc[k] == v - 1) & last), 0)

    def send_b(k: Any) -> tuple[Any, Any, Any, Any, int]:
        return (CODE_SEND_B, bc[k], mb_t[k], ~((bc[k] == 0) & first), 0)

    def batch(ops: list[tuple[Any, Any, Any, Any, int]], call: int) -> list[tuple[Any, Any, Any, Any, int]]:
        """The batch's slots (send_prev, recv_prev, send_next, recv_next order, or ``_p2p_ops``')."""
        if p2p_ops_order:
            pos = ({CODE_SEND_F: 0, CODE_RECV_F: 1, CODE_SEND_B: 2, CODE_RECV_B: 3} if r % 2 == 0 else
                   {CODE_RECV_F: 0, CODE_SEND_F: 1, CODE_RECV_B: 2, CODE_SEND_B: 3})
            ops = sorted(ops, key=lambda s: pos[s[0]])
        return [(*s[:4], call) for s in ops]

    if not first:
        phase([(CODE_RECV_F, 0, -1, True, 0)], 1)
    k = np.arange(warm)
    rp, nf = recv_from_prev(k, True)
    rp &= k != total - 1
    phase([(CODE_F, fc[k], mb_t[k], True, 0)] + batch([
        (CODE_RECV_F, nf, -1, rp, 0), send_f(k),
        (CODE_RECV_B, v - 1, -1, (k == warm - 1) & (rest > 0) & (not last), 0)], 1), warm)
    k = np.arange(rest)
    fk = k + warm
    rp, nf = recv_from_prev(fk, True)
    rp &= k != rest - 1
    rn, nb = recv_from_prev(k, False)
    if p2p_ops_order:  # overlap_p2p_comm: the forward's call, then the backward and its call
        phase([(CODE_F, fc[fk], mb_t[fk], True, 0)] + batch([(CODE_RECV_F, nf, -1, rp, 0), send_f(fk)], 1)
              + [(CODE_B, bc[k], mb_t[k], True, 2)] + batch([send_b(k), (CODE_RECV_B, nb, -1, rn, 0)], 3), rest)
    else:
        phase([(CODE_F, fc[fk], mb_t[fk], True, 0), (CODE_B, bc[k], mb_t[k], True, 1)] + batch([
            send_b(k), (CODE_RECV_F, nf, -1, rp, 0), send_f(fk), (CODE_RECV_B, nb, -1, rn, 0)], 2), rest)
    if rest <= 0 and not last:
        phase([(CODE_RECV_B, v - 1, -1, True, 0)], 1)
    k = np.arange(max(rest, 0), total)
    rn, nb = recv_from_prev(k, False)
    rn &= k != total - 1
    phase([(CODE_B, bc[k], mb_t[k], True, 0)] + batch([send_b(k), (CODE_RECV_B, nb, -1, rn, 0)], 1),
          total - max(rest, 0))
    typ, ch, mb, ok, key = (np.concatenate([x[i].reshape(-1) for x in rows]) for i in range(5))
    typ, ch, mb, key = typ[ok], ch[ok], mb[ok].copy(), key[ok]
    new = np.ones(len(key), bool)
    new[1:] = key[1:] != key[:-1]
    # a recv's microbatch: its count among the rank's earlier recvs of its direction and chunk
    rv = np.flatnonzero(mb < 0)
    code = (typ[rv] == CODE_RECV_B) * v + ch[rv]
    o = np.argsort(code, kind="stable")
    sc = code[o]
    start = np.ones(len(sc), bool)
    start[1:] = sc[1:] != sc[:-1]
    at = np.flatnonzero(start)
    cnt = np.arange(len(sc)) - np.repeat(at, np.diff(np.append(at, len(sc))))
    mb[rv[o]] = cnt
    return np.full(len(typ), r, i64), typ, ch * p + r, mb, np.cumsum(new) - 1
