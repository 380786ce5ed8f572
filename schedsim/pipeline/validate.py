"""Check a per-rank pipeline order before anyone runs it.

:func:`validate` extends PyTorch's ``_validate_schedule``
(``torch/distributed/pipelining/schedules.py``), which checks counts, F
before I/B before W, and one rank per stage, with the two things torch's
check leaves out: the schedule's minimum microbatch count and cross-rank
timing (a p2p wait cycle, found by :func:`schedsim.pipeline.comms.simulate_p2p`).
Every failure is a :class:`~schedsim.errors.PipelineScheduleError`
whose message names the offending actions and prints the step x rank grid
with the failing step marked ``<-- ERROR HERE``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from schedsim.errors import InsufficientMicrobatchesError, PipelineScheduleError
from schedsim.pipeline.actions import COMM_TYPES, Action, ComputationType, OverlapAction, ScheduleAction
from schedsim.pipeline.comms import add_p2p, compute_only, simulate_p2p
from schedsim.pipeline.schedules import get_schedule

__all__ = ["validate"]

_F = ComputationType.F
_B = ComputationType.B
_I = ComputationType.I
_W = ComputationType.W


def _first_backward_step(acts: Sequence[ScheduleAction | None]) -> int:
    for i, a in enumerate(acts):
        if a is not None and any(s.type in (_B, _I) for s in a.sub_actions if a.is_compute):
            return i
    return 0


def validate(
    order: Mapping[int, Sequence[ScheduleAction | None]],
    p: int,
    m: int,
    num_stages: int,
    stage_to_rank: Mapping[int, int] | Callable[[int], int] | None = None,
    *,
    schedule: str | None = None,
    check_p2p: bool = True,
) -> dict[int, int]:
    """Validate a rank -> actions order; raise on the first problem.

    Checks, in this order:

    1. the ranks are exactly 0..p-1;
    2. ``m`` is at least what ``schedule`` needs (when a schedule is named);
    3. per action: known stage and microbatch; the stage is on one rank only
       and on the rank ``stage_to_rank`` gives; no F, I, B or W runs twice for
       a (stage, microbatch); I/B come after their F and W after its I;
    4. every stage runs F and a backward (B, or I and W) for every microbatch;
    5. with ``check_p2p``: the order lowered by
       :func:`~schedsim.pipeline.comms.add_p2p` (or as given, if it already has
       p2p actions) runs to the end in :func:`~schedsim.pipeline.comms.simulate_p2p`.

    Parameters
    ----------
    order : mapping of int to sequence of action or None
        The order; ``None`` is an idle slot. Steps are list indices.
    p : int
        Pipeline ranks.
    m : int
        Microbatches.
    num_stages : int
        Global stage count (p*v).
    stage_to_rank : mapping or callable, optional
        Expected placement; default: read off the order.
    schedule : str, optional
        Schedule name; enables check 2.
    check_p2p : bool, default True
        Run check 5.

    Returns
    -------
    dict of int to int
        The stage -> rank map of the order.

    Raises
    ------
    InsufficientMicrobatchesError
        m below the schedule's minimum (torchtitan#775; DualPipeV m >= 2p).
    DeadlockError
        A cross-rank p2p wait cycle.
    PipelineScheduleError
        Any other failure. The message names the offending actions and prints
        the grid with ``<-- ERROR HERE`` on the failing step.

    Notes
    -----
    Source: PyTorch ``_validate_schedule`` (checks 1, 3, 4) and
    ``_simulate_comms_compute`` (check 5); pipelines.md §2.

    Examples
    --------
    >>> from schedsim.pipeline.schedules import generate, stage_to_rank
    >>> validate(generate("1f1b", 2, 2), 2, 2, 2, stage_to_rank("1f1b", 2))
    {0: 0, 1: 1}
    """

    def fail(msg: str, rank: int | None, step: int | None, acts: Sequence[object] = (), fix: str | None = None) -> None:
        raise PipelineScheduleError(msg, fix=fix, order=order, step=step, rank=rank, actions=acts)

    # 1. ranks
    if sorted(order) != list(range(p)):
        missing = sorted(set(range(p)) - set(order))
        extra = sorted(set(order) - set(range(p)))
        fail(
            f"schedule has ranks {sorted(order)}, expected 0..{p - 1} (p={p}); missing {missing}, unexpected {extra}",
            None,
            0,
        )

    # 2. minimum microbatches
    if schedule is not None:
        info = get_schedule(schedule)
        need = info.min_microbatches(p, max(1, num_stages // p))
        if m < need:
            step = _first_backward_step(order[0])
            rule = (
                "m >= 2p: DeepSeek dualpipev.py, torch ScheduleDualPipeV"
                if info.name == "dualpipev"
                else "m >= p: torchtitan#775, torch Schedule1F1B"
            )
            raise InsufficientMicrobatchesError(
                f"{info.name} with p={p} needs at least {need} microbatches ({rule}), got "
                f"m={m}: rank 0 reaches its first backward at step {step} after only {m} "
                f"forward(s), so the pipeline never fills",
                fix=f"raise m to {need} or more",
                order=order,
                step=step,
                rank=0,
                actions=tuple(a for a in order[0][step : step + 1] if a is not None),
            )

    where: Callable[[int], int] | None
    if stage_to_rank is None:
        where = None
    elif callable(stage_to_rank):
        where = stage_to_rank
    else:
        where = stage_to_rank.get  # type: ignore[assignment]

    # 3. per-action scan
    seen: dict[tuple[int, ComputationType], dict[int, tuple[int, int]]] = {}
    placed: dict[int, tuple[int, int]] = {}
    last_step: dict[int, int] = {}
    has_comms = False
    for rank in range(p):
        for step, act in enumerate(order[rank]):
            if act is None:
                continue
            if not isinstance(act, (Action, OverlapAction)):
                fail(
                    f"Rank {rank}, step {step}: got {act!r} ({type(act).__name__}), expected an "
                    "Action, OverlapAction or None",
                    rank,
                    step,
                    (),
                    fix="parse text with parse_order / parse_action",
                )
            if act.type in COMM_TYPES:
                has_comms = True
                continue
            if not act.is_compute:
                continue  # UNSHARD / RESHARD / REDUCE_GRAD: bookkeeping only
            for sub in act.sub_actions:
                s, t, j = sub.stage, sub.type, sub.microbatch
                if not 0 <= s < num_stages:
                    fail(
                        f"Rank {rank}, step {step}: {act} names stage {s}, but stages are 0..{num_stages - 1}",
                        rank,
                        step,
                        (sub,),
                    )
                if j is None or not 0 <= j < m:
                    fail(
                        f"Rank {rank}, step {step}: {act} names microbatch {j}, but "
                        f"microbatches are 0..{m - 1} (m={m})",
                        rank,
                        step,
                        (sub,),
                    )
                if s in placed and placed[s][0] != rank:
                    other, ostep = placed[s]
                    fail(
                        f"Rank {rank}, step {step}: {sub} puts stage {s} on rank {rank}, "
                        f"but rank {other} already runs it (step {ostep}); a stage is "
                        "placed on exactly one rank",
                        rank,
                        step,
                        (sub,),
                    )
                placed.setdefault(s, (rank, step))
                expected = where(s) if where is not None else rank
                if expected != rank:
                    placement = (
                        f"places stage {s} on rank {expected}"
                        if expected is not None
                        else f"has no entry for stage {s}"
                    )
                    fail(
                        f"Rank {rank}, step {step}: {sub} runs stage {s} on rank {rank}, "
                        f"but stage_to_rank {placement}; a stage cannot live on two ranks",
                        rank,
                        step,
                        (sub,),
                    )
                last_step[s] = step
                runs = seen.setdefault((s, t), {})
                if j in runs:
                    fail(
                        f"Rank {rank}, step {step}: {sub} runs twice (first at step {runs[j][1]})",
                        rank,
                        step,
                        (sub,),
                    )
                if t in (_B, _I):
                    if j not in seen.get((s, _F), {}):
                        fail(
                            f"Rank {rank}, step {step}: {sub} runs before its forward {Action(s, _F, j)}",
                            rank,
                            step,
                            (sub,),
                        )
                    other = _I if t is _B else _B
                    if j in seen.get((s, other), {}):
                        fail(
                            f"Rank {rank}, step {step}: {sub} runs a second backward for "
                            f"stage {s} microbatch {j} (already ran "
                            f"{Action(s, other, j)})",
                            rank,
                            step,
                            (sub,),
                        )
                elif t is _W and j not in seen.get((s, _I), {}):
                    why = (
                        f"after the full backward {Action(s, _B, j)}, which already computed the weight gradient"
                        if j in seen.get((s, _B), {})
                        else f"before its {Action(s, _I, j)}"
                    )
                    fail(f"Rank {rank}, step {step}: {sub} runs {why}", rank, step, (sub,))
                runs[j] = (rank, step)

    # 4. completeness
    for s in range(num_stages):
        if s not in placed:
            rank = where(s) if where is not None else None
            fail(
                f"stage {s} never runs (no F/I/B/W for it on any rank)"
                + (f"; stage_to_rank places it on rank {rank}" if rank is not None else ""),
                rank,
                len(order[rank]) - 1 if rank is not None and rank in order else 0,
            )
        rank = placed[s][0]
        step = last_step[s]
        fwd = seen.get((s, _F), {})
        for j in range(m):
            if j not in fwd:
                fail(
                    f"stage {s} (rank {rank}) never runs {Action(s, _F, j)}: microbatch "
                    f"{j} is missing (expected microbatches 0..{m - 1})",
                    rank,
                    step,
                    (Action(s, _F, j),),
                )
            has_b = j in seen.get((s, _B), {})
            has_i = j in seen.get((s, _I), {})
            if not (has_b or has_i):
                fail(
                    f"stage {s} (rank {rank}) never runs a backward for microbatch {j} "
                    f"({Action(s, _B, j)} or {Action(s, _I, j)}+{Action(s, _W, j)})",
                    rank,
                    step,
                    (Action(s, _B, j),),
                )
            if has_i and j not in seen.get((s, _W), {}):
                fail(
                    f"stage {s} (rank {rank}) runs {Action(s, _I, j)} but never its {Action(s, _W, j)}",
                    rank,
                    step,
                    (Action(s, _W, j),),
                )

    mapping = {s: placed[s][0] for s in sorted(placed)}

    # 5. cross-rank p2p wait cycle
    if check_p2p:
        lowered = order if has_comms else add_p2p(compute_only(order), mapping, num_stages)
        simulate_p2p(lowered, mapping, num_stages)
    return mapping
