"""GPipe and the one-forward-one-backward family: 1F1B, interleaved 1F1B (Megatron's virtual pipeline) and
looped BFS, with the Megatron schedule table and torch's microbatch group size they share.

Each generator returns a :data:`~schedsim.pipeline.actions.PipelineOrder` (see
:mod:`schedsim.pipeline.schedules` for the notation and sources). Sources: Megatron-LM d98e8a64
``megatron/core/pipeline_parallel/schedules.py``; PyTorch 00722e64
``torch/distributed/pipelining/schedules.py``.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from schedsim.errors import ScheduleConfigError
from schedsim.pipeline.actions import (
    Action,
    PipelineOrder,
    ScheduleAction,
)
from schedsim.pipeline.schedules_common import _B, _F, _I, _W, _check_pm, _check_v, _require_microbatches

__all__ = ["gpipe", "interleaved_1f1b", "interleaved_1f1b_cols", "looped_bfs", "megatron_schedule_table", "one_f_one_b",
           "torch_group_size"]


def torch_group_size(p: int, m: int) -> int:
    """Microbatch group size PyTorch's interleaved schedules use.

    ``rounds = max(1, m // p)``, ``g = m // rounds`` (``ScheduleInterleaved1F1B``
    and ``ScheduleInterleavedZeroBubble`` ``microbatches_per_round``, PyTorch
    00722e64). Torch requires ``m % rounds == 0``, so ``g`` divides ``m``.

    Parameters
    ----------
    p, m : int
        Pipeline ranks and microbatches.

    Returns
    -------
    int
        ``m // max(1, m // p)``.

    Raises
    ------
    ScheduleConfigError
        When ``m % rounds != 0`` (torch raises the same).
    """
    _check_pm(p, m)
    rounds = max(1, m // p)
    if m % rounds:
        raise ScheduleConfigError(
            f"torch's interleaved schedules need m to be a multiple of "
            f"rounds = max(1, m // p) = {rounds}, got m={m}, p={p}",
            fix=f"use m={m - m % rounds} or m={m - m % rounds + rounds}"
        )
    return m // rounds


def megatron_schedule_table(m: int, v: int, g: int) -> list[tuple[int, int]]:
    """Megatron's interleaved order of (microbatch, chunk) pairs.

    For each block of ``g`` microbatches, for each chunk c in 0..v-1, every
    microbatch of the block: ``(mb, c)``. The last block may be shorter.
    Forward k runs ``table[k]``; backward k runs ``table[k]`` with chunk
    ``v-1-c``.

    Parameters
    ----------
    m : int
        Microbatches.
    v : int
        Model chunks per rank.
    g : int
        ``microbatch_group_size_per_vp_stage``.

    Returns
    -------
    list of (int, int)
        ``v*m`` pairs.

    Notes
    -----
    Source: ``get_schedule_table`` in Megatron-LM d98e8a64
    ``core/pipeline_parallel/schedules.py``; pipelines.md §1.

    Examples
    --------
    >>> t = megatron_schedule_table(5, 2, 3)
    >>> [mb for mb, _ in t], [c for _, c in t]
    ([0, 1, 2, 0, 1, 2, 3, 4, 3, 4], [0, 0, 0, 1, 1, 1, 0, 0, 1, 1])
    """
    table: list[tuple[int, int]] = []
    for start in range(0, m, g):
        block = range(start, min(start + g, m))
        for chunk in range(v):
            table.extend((mb, chunk) for mb in block)
    return table


def _chunked_1f1b_rank(
    p: int,
    m: int,
    v: int,
    r: int,
    table: list[tuple[int, int]],
    warmup: int,
    *,
    zero_bubble: bool,
) -> list[ScheduleAction | None]:
    """Warmup / steady 1F1B / cooldown over a (mb, chunk) table (one rank).

    With ``zero_bubble`` the backward is I, and W's are released from a FIFO
    after backward k once k >= r (torch ``_get_1f1b_rank_ops`` with
    ``enable_zero_bubble=True`` and ``num_1f1b_microbatches=r``).
    """
    total = v * m
    new = tuple.__new__  # NamedTuple construction without the keyword shim
    fwd = [new(Action, (c * p + r, _F, mb)) for mb, c in table]
    if not zero_bubble:
        bwd = [new(Action, ((v - 1 - c) * p + r, _B, mb)) for mb, c in table]
        steady = [x for pair in zip(fwd[warmup:], bwd[: total - warmup], strict=False) for x in pair]
        return [*fwd[:warmup], *steady, *bwd[total - warmup :]]

    ops: list[ScheduleAction | None] = list(fwd[:warmup])
    pending_w: deque[Action] = deque()

    def bwd_zb(k: int) -> None:
        mb, chunk = table[k]
        stage = (v - 1 - chunk) * p + r
        ops.append(new(Action, (stage, _I, mb)))
        pending_w.append(new(Action, (stage, _W, mb)))
        if k >= r:
            ops.append(pending_w.popleft())

    for k in range(total - warmup):
        ops.append(fwd[warmup + k])
        bwd_zb(k)
    for k in range(total - warmup, total):
        bwd_zb(k)
    ops.extend(pending_w)
    return ops


def gpipe(p: int, m: int) -> PipelineOrder:
    """GPipe: every forward, then every backward.

    Rank r runs ``F0 .. F(m-1)`` then ``B0 .. B(m-1)`` on stage r.

    Parameters
    ----------
    p, m : int
        Pipeline ranks (= stages) and microbatches.

    Returns
    -------
    PipelineOrder

    Notes
    -----
    Source: PyTorch ``ScheduleGPipe._get_pipeline_order`` (00722e64);
    pipelines.md §1. Any m >= 1 works.
    """
    _check_pm(p, m)
    return {r: [Action(r, c, j) for c in (_F, _B) for j in range(m)] for r in range(p)}


def one_f_one_b(p: int, m: int, *, check_microbatches: bool = True) -> PipelineOrder:
    """1F1B (PipeDream-flush): warmup forwards, one-forward-one-backward, drain.

    Rank r: ``w = min(p-1-r, m)`` forwards; then for i in [0, m-w) forward
    ``w+i`` and backward ``i``; then the last ``w`` backwards.

    Parameters
    ----------
    p, m : int
        Pipeline ranks (= stages) and microbatches.
    check_microbatches : bool, default True
        Raise when m < p (set False to build the order anyway, e.g. to study it).

    Returns
    -------
    PipelineOrder

    Raises
    ------
    InsufficientMicrobatchesError
        m < p (torch ``Schedule1F1B`` rejects it; torchtitan#775 hangs).

    Notes
    -----
    Source: Megatron ``forward_backward_pipelining_without_interleaving`` and
    PyTorch ``Schedule1F1B._step_microbatches``; pipelines.md §1. PyTorch
    2.13's ``Schedule1F1B._get_pipeline_order`` (what ``get_schedule_ops``
    shows) numbers the last rank's forwards 1..m; this follows the rule.
    """
    _check_pm(p, m)
    if check_microbatches:
        _require_microbatches("1f1b", p, m, p, "m >= p; torchtitan#775, torch Schedule1F1B")
    order: PipelineOrder = {}
    for r in range(p):
        w = min(p - 1 - r, m)
        ops: list[ScheduleAction | None] = [Action(r, _F, j) for j in range(w)]
        for i in range(m - w):
            ops.append(Action(r, _F, w + i))
            ops.append(Action(r, _B, i))
        ops.extend(Action(r, _B, j) for j in range(m - w, m))
        order[r] = ops
    return order


def _check_group(p: int, m: int, g: int) -> None:
    if not isinstance(g, int) or isinstance(g, bool) or not p <= g <= m:
        fix = f"pass group_size between {p} and {m} (default p={p})" if m >= p else f"raise m to at least p={p}"
        raise ScheduleConfigError(
            "interleaved 1F1B needs p <= microbatch_group_size_per_vp_stage <= m "
            f"(Megatron), got p={p}, group_size={g!r}, m={m}", fix=fix
        )
    rem = m % g
    if 0 < rem < p:
        divisors = [d for d in range(p, m + 1) if m % d == 0]
        suggestions = [f"m={m - rem} or m={m - rem + g} (multiples of group_size={g})"]
        if divisors:
            suggestions.insert(0, f"group_size={divisors[0]} (divides m={m})")
        raise ScheduleConfigError(
            "interleaved 1F1B needs m mod group_size to be 0 or >= p, otherwise the "
            "last microbatch group introduces dependency bubbles (Megatron); got "
            f"m={m}, group_size={g}, m mod group_size={rem} < p={p}", fix="use " + " or ".join(suggestions)
        )


def interleaved_1f1b(
    p: int,
    m: int,
    v: int = 2,
    *,
    group_size: int | None = None,
    overlap_moe_comm: bool = False,
    check_microbatches: bool = True,
) -> PipelineOrder:
    """Interleaved 1F1B (virtual pipeline), Megatron ordering.

    The (mb, chunk) table of :func:`megatron_schedule_table` with group size
    g drives both directions: forward k runs ``table[k]`` on stage
    ``chunk*p + r``; backward k runs ``table[k]`` on chunk ``v-1-chunk``.
    Rank r warms up with ``w = min(2(p-r-1) + (v-1)g, v*m)`` forwards (+1
    with ``overlap_moe_comm``), then alternates forward ``w+k`` / backward
    ``k``, then drains.

    Parameters
    ----------
    p, m : int
        Pipeline ranks and microbatches.
    v : int, default 2
        Model chunks per rank (>= 2); stages = v*p, placement ``"loop"``.
    group_size : int, optional
        ``microbatch_group_size_per_vp_stage``; default p (depth-first).
        ``torch_group_size(p, m)`` reproduces PyTorch; g = m is breadth-first.
    overlap_moe_comm : bool, default False
        Megatron ``overlap_moe_expert_parallel_comm``: one more warmup forward.
    check_microbatches : bool, default True
        Raise on m < p.

    Returns
    -------
    PipelineOrder

    Raises
    ------
    InsufficientMicrobatchesError
        m < p.
    ScheduleConfigError
        v < 2; g outside [p, m]; or ``0 < m mod g < p`` (dependency bubbles).

    Notes
    -----
    Source: Megatron-LM d98e8a64 ``forward_backward_pipelining_with_interleaving``
    (warmup, schedule table, the two group-size checks); equal to PyTorch
    ``ScheduleInterleaved1F1B`` with ``g = torch_group_size(p, m)``
    (pipelines.md §1). Old Megatron (and some forks) instead ran everything
    as warmup when m == p; current Megatron and torch do not.

    Examples
    --------
    >>> o = interleaved_1f1b(2, 5, 2, group_size=3)
    >>> " ".join(str(a) for a in o[0] if a.type.value == "F")
    '0F0 0F1 0F2 2F0 2F1 2F2 0F3 0F4 2F3 2F4'
    """
    g = _interleaved_group(p, m, v, group_size, check_microbatches)
    table = megatron_schedule_table(m, v, g)
    order: PipelineOrder = {}
    for r in range(p):
        w = min(2 * (p - r - 1) + (v - 1) * g + (1 if overlap_moe_comm else 0), v * m)
        order[r] = _chunked_1f1b_rank(p, m, v, r, table, w, zero_bubble=False)
    return order


def _interleaved_group(p: int, m: int, v: int, group_size: int | None, check_microbatches: bool) -> int:
    """The checks of :func:`interleaved_1f1b` (which raise its errors); the microbatch group size."""
    _check_pm(p, m)
    _check_v(v, least=2, schedule="interleaved_1f1b")
    if check_microbatches:
        _require_microbatches("interleaved_1f1b", p, m, p, "m >= p; Megatron needs p <= group_size <= m")
    g = p if group_size is None else group_size
    if check_microbatches or m >= p:
        _check_group(p, m, g)
    return g


def interleaved_1f1b_cols(p: int, m: int, v: int = 2, *, group_size: int | None = None) -> tuple[Any, ...]:
    """:func:`interleaved_1f1b` (without ``overlap_moe_comm``) as columns, with numpy per rank over the step
    index: rank r runs forwards ``0 .. w-1``, then forward ``w + k`` and backward ``k`` alternately, then the
    remaining backwards (``w`` its warmup). Raises what :func:`interleaved_1f1b` raises.

    Returns
    -------
    (rank, typ, stage, mb) : int64 arrays of length ``2·v·m·p``, rank-major, each rank's in order; ``typ``
        0 for F, 2 for B (the lowering's type codes).
    """
    import numpy as np

    g = _interleaved_group(p, m, v, group_size, True)
    i64 = np.int64
    tab = np.array(megatron_schedule_table(m, v, g), i64).reshape(-1, 2)
    total = v * m
    out: list[list[Any]] = [[], [], [], []]
    for r in range(p):
        w = min(2 * (p - r - 1) + (v - 1) * g, total)
        steady = np.stack([np.arange(w, total), np.arange(total - w)], axis=1).reshape(-1)
        k = np.concatenate([np.arange(w), steady, np.arange(total - w, total)])
        bwd = np.concatenate([np.zeros(w, bool), np.tile([False, True], total - w), np.ones(w, bool)])
        chunk = np.where(bwd, v - 1 - tab[k, 1], tab[k, 1])
        for lst, x in zip(out, (np.full(len(k), r, i64), bwd * i64(2), chunk * p + r, tab[k, 0]), strict=True):
            lst.append(x)
    return tuple(np.concatenate(x) if x else np.zeros(0, i64) for x in out)


def looped_bfs(p: int, m: int, v: int = 2) -> PipelineOrder:
    """Looped BFS (breadth-first pipeline): all forwards of a chunk before the next.

    Rank r: for its local stages ascending, F of every microbatch; then for
    local stages descending, B for microbatches m-1 .. 0.

    Parameters
    ----------
    p, m : int
        Pipeline ranks and microbatches.
    v : int, default 2
        Chunks per rank (>= 1); placement ``"loop"``.

    Returns
    -------
    PipelineOrder

    Notes
    -----
    Source: PyTorch ``ScheduleLoopedBFS._calculate_single_rank_operations``
    (arXiv 2211.05953); pipelines.md §1. Megatron's breadth-first is
    :func:`interleaved_1f1b` with ``group_size=m`` instead.
    """
    _check_pm(p, m)
    _check_v(v, least=1, schedule="looped_bfs")
    order: PipelineOrder = {}
    for r in range(p):
        stages = [c * p + r for c in range(v)]
        ops: list[ScheduleAction | None] = [Action(s, _F, j) for s in stages for j in range(m)]
        ops += [Action(s, _B, j) for s in reversed(stages) for j in reversed(range(m))]
        order[r] = ops
    return order
