"""Pure generators of per-rank pipeline-parallel compute orders.

Every generator returns a :data:`~schedsim.pipeline.actions.PipelineOrder`:
``{rank: [action, ...]}``, the order in which each rank issues its compute
actions (F, I, B, W, or DualPipe's overlapped pair). The lists hold no idle
slots: timing is not part of an order, it comes from a simulator
(:func:`schedsim.pipeline.analytic.unit_time_makespan`, or the core).
PyTorch pads its orders with ``None`` for a lock-step picture; dropping those
gives exactly the lists here (tested against ``get_schedule_ops``).

Notation: p = pipeline ranks, m = microbatches, v = chunks (stages) per rank,
r = rank, g = Megatron's ``microbatch_group_size_per_vp_stage``.

Placement (:func:`stage_to_rank`): ``"loop"`` puts chunk c of rank r at stage
c*p + r (Megatron interleaving, torch ``generate_stage_to_rank_mapping(style=
"loop")``); ``"v"`` zig-zags, so with v=2 rank r holds stages r and 2p-1-r
(ZB-V, DualPipeV; torch ``style="v"``).

Sources: Megatron-LM d98e8a64 ``megatron/core/pipeline_parallel/schedules.py``;
PyTorch 00722e64 ``torch/distributed/pipelining/schedules.py``; DeepSeek
DualPipe 3da1bbe ``dualpipe/dualpipev.py``; sail-sg zero-bubble 39f2c186.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from schedsim.errors import InsufficientMicrobatchesError, ScheduleConfigError
from schedsim.pipeline.actions import (
    Action,
    ComputationType,
    OverlapAction,
    PipelineOrder,
    ScheduleAction,
)

__all__ = [
    "ScheduleInfo",
    "dualpipev",
    "generate",
    "get_schedule",
    "gpipe",
    "interleaved_1f1b",
    "interleaved_zero_bubble",
    "looped_bfs",
    "megatron_schedule_table",
    "min_microbatches",
    "one_f_one_b",
    "schedule_names",
    "stage_to_rank",
    "torch_group_size",
    "zb_h1",
    "zbv",
]

_F = ComputationType.F
_B = ComputationType.B
_I = ComputationType.I
_W = ComputationType.W

Placement = Literal["loop", "v"]


# --------------------------------------------------------------------------- helpers


def _check_pm(p: int, m: int) -> None:
    for name, value in (("p", p), ("m", m)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ScheduleConfigError(f"{name} must be a positive integer, got {name}={value!r}",
                                      fix=f"pass {name}>=1")


def _check_v(v: int, *, least: int, schedule: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < least:
        hint = " (use '1f1b' for one chunk per rank)" if least == 2 else ""
        raise ScheduleConfigError(
            f"{schedule} needs v (chunks per rank) >= {least}, got v={v!r}", fix=f"pass v={least} or more{hint}"
        )


def _require_microbatches(schedule: str, p: int, m: int, need: int, rule: str) -> None:
    if m < need:
        raise InsufficientMicrobatchesError(
            f"{schedule} with p={p} needs at least {need} microbatches ({rule}), "
            f"got m={m}", fix=f"raise m to {need} or more (or lower p)"
        )


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


# --------------------------------------------------------------------------- schedules


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
    return {r: [Action(r, _F, j) for j in range(m)] + [Action(r, _B, j) for j in range(m)] for r in range(p)}


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


def zb_h1(p: int, m: int, *, check_microbatches: bool = True) -> PipelineOrder:
    """ZB-H1 / ZB1P on one chunk per rank.

    Rank r: ``w = p-1-r`` forwards; steady step i: F, I, then W of the oldest
    pending microbatch once i >= r; cooldown I (+W once i >= r); then flush
    the remaining W's. Rank r therefore holds back exactly r W's, which fill
    the cooldown bubble.

    Parameters
    ----------
    p, m : int
        Pipeline ranks (= stages) and microbatches.
    check_microbatches : bool, default True
        Raise on m < p.

    Returns
    -------
    PipelineOrder

    Raises
    ------
    InsufficientMicrobatchesError
        m < p.

    Notes
    -----
    Source: PyTorch ``_get_1f1b_rank_ops(enable_zero_bubble=True)`` with
    warmup multiply factor 1 and ``num_1f1b_microbatches = r`` (used by
    ``ScheduleInterleavedZeroBubble``), applied to one chunk; ZB paper
    (arXiv 2401.10241) ZB-H1; pipelines.md §1. Tested equal to that torch
    helper called with one local stage.

    Examples
    --------
    >>> " ".join(map(str, zb_h1(4, 8)[3][:12]))
    '3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1'
    """
    _check_pm(p, m)
    if check_microbatches:
        _require_microbatches("zb_h1", p, m, p, "m >= p; 1F1B family, torchtitan#775")
    table = [(j, 0) for j in range(m)]
    return {r: _chunked_1f1b_rank(p, m, 1, r, table, min(p - 1 - r, m), zero_bubble=True) for r in range(p)}


def interleaved_zero_bubble(
    p: int,
    m: int,
    v: int = 2,
    *,
    group_size: int | None = None,
    check_microbatches: bool = True,
) -> PipelineOrder:
    """PyTorch's interleaved zero-bubble (ZB1P over v chunks per rank).

    Like :func:`interleaved_1f1b` but the warmup is
    ``min((v-1)g + (p-1-r), v*m)`` (factor 1, not 2), backwards are I, and
    each rank releases W's from a FIFO after backward k once k >= r.

    Parameters
    ----------
    p, m : int
        Pipeline ranks and microbatches.
    v : int, default 2
        Chunks per rank (>= 2); placement ``"loop"``.
    group_size : int, optional
        Default :func:`torch_group_size` ``(p, m)``, as torch.
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
        v < 2 or group size not in [1, m].

    Notes
    -----
    Source: PyTorch ``ScheduleInterleavedZeroBubble`` (00722e64); its
    ``_add_bubbles_to_actions`` only inserts idle slots, which orders here omit.
    """
    _check_pm(p, m)
    _check_v(v, least=2, schedule="interleaved_zb")
    if check_microbatches:
        _require_microbatches("interleaved_zb", p, m, p, "m >= p; 1F1B family, torchtitan#775")
    g = torch_group_size(p, m) if group_size is None else group_size
    if not isinstance(g, int) or not 1 <= g <= m:
        raise ScheduleConfigError(
            f"interleaved_zb needs 1 <= group_size <= m, got group_size={g!r}, m={m}",
            fix=f"omit group_size (torch uses {torch_group_size(p, m)})"
        )
    table = megatron_schedule_table(m, v, g)
    return {
        r: _chunked_1f1b_rank(p, m, v, r, table, min((v - 1) * g + (p - 1 - r), v * m), zero_bubble=True)
        for r in range(p)
    }


def zbv(p: int, m: int) -> PipelineOrder:
    """ZB-V zero-bubble schedule (two stages per rank, V placement).

    With c0 = r, c1 = 2p-1-r and n = max(2p-1, m): (1) F(c0) x (2(p-r)-1);
    (2) [F(c1), F(c0)] x r; (3) [F(c1), I(c1), W(c1)] x (p-r); (4) while
    f1 < f0 or f0 < n: F(c0) if f0 < n, I(c0), W(c0), F(c1), I(c1), W(c1);
    (5) [I(c0), I(c1)] x r; (6) [I(c0), W(c0)] x (p-r); (7) remaining W(c1)
    then W(c0); (8) drop ops on microbatches >= m (torch turns them into idle
    slots).

    Parameters
    ----------
    p, m : int
        Pipeline ranks and microbatches (any m >= 1; n pads small m).

    Returns
    -------
    PipelineOrder

    Notes
    -----
    Source: PyTorch ``ScheduleZBVZeroBubble._calculate_single_rank_operations``
    (00722e64); ZB paper (arXiv 2401.10241) §6; pipelines.md §1.
    """
    _check_pm(p, m)
    return {r: _zbv_rank(p, m, r) for r in range(p)}


def _zbv_rank(p: int, m: int, r: int) -> list[ScheduleAction | None]:
    n = max(2 * p - 1, m)
    c0, c1 = r, 2 * p - 1 - r
    cnt = {"f0": 0, "f1": 0, "b0": 0, "b1": 0}
    ops: list[Action] = []

    def add(stage: int, ctype: ComputationType, key: str, *, bump: bool = True) -> None:
        ops.append(Action(stage, ctype, cnt[key]))
        if bump:
            cnt[key] += 1

    for _ in range(2 * (p - r) - 1):
        add(c0, _F, "f0")
    for _ in range(r):
        add(c1, _F, "f1")
        add(c0, _F, "f0")
    for _ in range(p - r):
        add(c1, _F, "f1")
        add(c1, _I, "b1", bump=False)
        add(c1, _W, "b1")
    while cnt["f1"] < cnt["f0"] or cnt["f0"] < n:
        if cnt["f0"] < n:
            add(c0, _F, "f0")
        add(c0, _I, "b0", bump=False)
        add(c0, _W, "b0")
        add(c1, _F, "f1")
        add(c1, _I, "b1", bump=False)
        add(c1, _W, "b1")
    w0, w1 = cnt["b0"], cnt["b1"]
    for _ in range(r):
        add(c0, _I, "b0")
        add(c1, _I, "b1")
    for _ in range(p - r):
        add(c0, _I, "b0")
        ops.append(Action(c0, _W, w0))
        w0 += 1
    ops.extend(Action(c1, _W, j) for j in range(w1, cnt["b1"]))
    ops.extend(Action(c0, _W, j) for j in range(w0, cnt["b0"]))
    # torch turns ops on microbatches >= m into idle slots; orders drop them
    return [a for a in ops if a.microbatch is not None and a.microbatch < m]


def dualpipev(p: int, m: int, *, check_microbatches: bool = True) -> PipelineOrder:
    """DualPipeV ("cut-in-half" DualPipe): V placement with overlapped F&B chunks.

    With s0 = r, s1 = 2p-1-r and a FIFO of pending W's fed by every I:
    (1) F(s0) x 2(p-r-1); (2) [F(s0), F(s1)] x (r+1); (3) [I(s1), W(pop),
    F(s1)] x (p-r-1); (4) (m-2p+r+1) x [F(s0)&B(s1), F(s1)&B(s0)], the first
    pair of the last rank not overlapped; (5) [B(s1), F(s1)&B(s0)] x (p-r-1);
    (6) for i < r+1: B(s1), B(s0), switching to I at i = (r+1)//2 (before the
    s1 op if r is odd, between the ops if even); (7) [W(pop), I-or-B(s0)] x
    (p-r-1); (8) W(pop) x (r+1).

    Parameters
    ----------
    p, m : int
        Pipeline ranks and microbatches.
    check_microbatches : bool, default True
        Raise on m < 2p.

    Returns
    -------
    PipelineOrder
        Overlapped pairs are :class:`~schedsim.pipeline.actions.OverlapAction`.

    Raises
    ------
    InsufficientMicrobatchesError
        m < 2p (DeepSeek asserts it; torch checks m >= num_stages = 2p).

    Notes
    -----
    Source: DeepSeek DualPipe 3da1bbe ``dualpipev.py``; equal to PyTorch
    ``ScheduleDualPipeV._calculate_single_rank_operations`` (00722e64) and to
    torch's artifact ``dualpipev_4rank_10mb.csv``; pipelines.md §1.
    """
    _check_pm(p, m)
    if check_microbatches:
        _require_microbatches("dualpipev", p, m, 2 * p, "m >= 2p; DeepSeek dualpipev.py")
    return {r: _dualpipev_rank(p, m, r) for r in range(p)}


def _dualpipev_rank(p: int, m: int, r: int) -> list[ScheduleAction | None]:
    s0, s1 = r, 2 * p - 1 - r
    counters: dict[tuple[int, ComputationType], int] = {}
    wq: deque[tuple[int, int]] = deque()
    ops: list[ScheduleAction | None] = []

    def _next(stage: int, ctype: ComputationType) -> int:
        key = (stage, _I if ctype is _B else ctype)
        return counters.get(key, 0)

    def _bump(stage: int, ctype: ComputationType) -> None:
        if ctype is _B:  # a full backward consumes both I and W numbering
            for t in (_I, _W):
                counters[(stage, t)] = counters.get((stage, t), 0) + 1
        else:
            counters[(stage, ctype)] = counters.get((stage, ctype), 0) + 1

    def add(stage: int, ctype: ComputationType) -> None:
        mb = _next(stage, ctype)
        ops.append(Action(stage, ctype, mb))
        if ctype is _I:
            wq.append((stage, mb))
        _bump(stage, ctype)

    def overlap(f_stage: int, b_stage: int) -> None:
        fwd = Action(f_stage, _F, _next(f_stage, _F))
        bwd = Action(b_stage, _B, _next(b_stage, _B))
        ops.append(OverlapAction(fwd, bwd))
        _bump(f_stage, _F)
        _bump(b_stage, _B)

    def pop_w() -> None:
        if wq:
            stage, mb = wq.popleft()
            ops.append(Action(stage, _W, mb))
            _bump(stage, _W)

    for _ in range(2 * (p - r - 1)):
        add(s0, _F)
    for _ in range(r + 1):
        add(s0, _F)
        add(s1, _F)
    for _ in range(p - r - 1):
        add(s1, _I)
        pop_w()
        add(s1, _F)
    for i in range(m - 2 * p + r + 1):
        if i == 0 and r == p - 1:
            add(s0, _F)
            add(s1, _B)
        else:
            overlap(s0, s1)
        overlap(s1, s0)
    for _ in range(p - r - 1):
        add(s1, _B)
        overlap(s1, s0)
    use_i = False
    steps6 = r + 1
    for i in range(steps6):
        if i == steps6 // 2 and r % 2 == 1:
            use_i = True
        add(s1, _I if use_i else _B)
        if i == steps6 // 2 and r % 2 == 0:
            use_i = True
        add(s0, _I if use_i else _B)
    for _ in range(p - r - 1):
        pop_w()
        add(s0, _I if use_i else _B)
    for _ in range(r + 1):
        pop_w()
    return ops


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ScheduleInfo:
    """A registered schedule: generator, placement, chunk count, limits, source.

    Attributes
    ----------
    name : str
        Canonical schedsim name (``"1f1b"``).
    aliases : tuple of str
        Other accepted names, including PyTorch's ``get_schedule_class`` name.
    torch_name : str or None
        PyTorch's name, when torch has the schedule.
    placement : {"loop", "v"}
        Stage placement, see :func:`stage_to_rank`.
    fixed_chunks : int or None
        Chunks per rank when the schedule fixes it, else None (v is free).
    default_chunks : int
        v used when the caller passes none.
    source : str
        Where the ordering rule comes from.
    builder : callable
        The generator, ``builder(p, m[, v], **kwargs)``.
    min_m : callable
        ``min_m(p, v)``, the fewest microbatches (see :func:`min_microbatches`).
    checks_microbatches : bool
        Whether ``builder`` takes ``check_microbatches``.
    takes_group_size : bool
        Whether ``builder`` takes ``group_size``.
    """

    name: str
    aliases: tuple[str, ...]
    torch_name: str | None
    placement: Placement
    fixed_chunks: int | None
    default_chunks: int
    source: str
    builder: Callable[..., PipelineOrder] = field(repr=False)
    min_m: Callable[[int, int], int] = field(repr=False)
    checks_microbatches: bool = False
    takes_group_size: bool = False

    def chunks(self, v: int | None = None) -> int:
        """Resolve v: the fixed value, the caller's, or the default.

        Raises
        ------
        ScheduleConfigError
            v given but differs from a fixed chunk count.
        """
        if self.fixed_chunks is not None:
            if v is not None and v != self.fixed_chunks:
                raise ScheduleConfigError(
                    f"{self.name} runs exactly {self.fixed_chunks} chunk(s) per rank, "
                    f"got v={v}", fix=f"omit v or pass v={self.fixed_chunks}"
                )
            return self.fixed_chunks
        return self.default_chunks if v is None else v

    def num_stages(self, p: int, v: int | None = None) -> int:
        """Global stage count, ``p * chunks(v)``."""
        return p * self.chunks(v)

    def min_microbatches(self, p: int, v: int | None = None) -> int:
        """Fewest microbatches the schedule accepts (see :func:`min_microbatches`)."""
        return self.min_m(p, self.chunks(v))

    def stage_to_rank(self, p: int, v: int | None = None) -> dict[int, int]:
        """Stage -> rank map of this schedule's placement."""
        return stage_to_rank(self.placement, p, self.chunks(v))

    def generate(
        self,
        p: int,
        m: int,
        v: int | None = None,
        *,
        group_size: int | None = None,
        check_microbatches: bool = True,
    ) -> PipelineOrder:
        """Build the order; see :func:`generate`."""
        chunks = self.chunks(v)
        kwargs: dict[str, object] = {}
        if group_size is not None:
            if not self.takes_group_size:
                raise ScheduleConfigError(
                    f"{self.name} has no microbatch group size, got group_size="
                    f"{group_size}", fix="omit group_size (only interleaved_1f1b and interleaved_zb take it)"
                )
            kwargs["group_size"] = group_size
        if self.checks_microbatches:
            kwargs["check_microbatches"] = check_microbatches
        if self.fixed_chunks is None:
            return self.builder(p, m, chunks, **kwargs)
        return self.builder(p, m, **kwargs)


_REGISTRY: tuple[ScheduleInfo, ...] = (
    ScheduleInfo(
        name="gpipe",
        aliases=("GPipe",),
        torch_name="GPipe",
        placement="loop",
        fixed_chunks=1,
        default_chunks=1,
        source="PyTorch ScheduleGPipe",
        builder=gpipe,
        min_m=lambda p, v: 1,
    ),
    ScheduleInfo(
        name="1f1b",
        aliases=("1F1B", "one_f_one_b", "pipedream_flush"),
        torch_name="1F1B",
        placement="loop",
        fixed_chunks=1,
        default_chunks=1,
        source="Megatron forward_backward_pipelining_without_interleaving; PyTorch Schedule1F1B",
        builder=one_f_one_b,
        min_m=lambda p, v: p,
        checks_microbatches=True,
    ),
    ScheduleInfo(
        name="interleaved_1f1b",
        aliases=("Interleaved1F1B", "vpp", "virtual_pipeline"),
        torch_name="Interleaved1F1B",
        placement="loop",
        fixed_chunks=None,
        default_chunks=2,
        source="Megatron forward_backward_pipelining_with_interleaving; PyTorch ScheduleInterleaved1F1B",
        builder=interleaved_1f1b,
        min_m=lambda p, v: p,
        checks_microbatches=True,
        takes_group_size=True,
    ),
    ScheduleInfo(
        name="looped_bfs",
        aliases=("LoopedBFS", "bfs"),
        torch_name="LoopedBFS",
        placement="loop",
        fixed_chunks=None,
        default_chunks=2,
        source="PyTorch ScheduleLoopedBFS",
        builder=looped_bfs,
        min_m=lambda p, v: 1,
    ),
    ScheduleInfo(
        name="zb_h1",
        aliases=("ZB1P", "ZBH1", "zero_bubble_h1"),
        torch_name=None,
        placement="loop",
        fixed_chunks=1,
        default_chunks=1,
        source="PyTorch _get_1f1b_rank_ops(enable_zero_bubble=True) on one chunk; ZB paper ZB-H1",
        builder=zb_h1,
        min_m=lambda p, v: p,
        checks_microbatches=True,
    ),
    ScheduleInfo(
        name="interleaved_zb",
        aliases=("InterleavedZeroBubble", "interleaved_zero_bubble"),
        torch_name="InterleavedZeroBubble",
        placement="loop",
        fixed_chunks=None,
        default_chunks=2,
        source="PyTorch ScheduleInterleavedZeroBubble",
        builder=interleaved_zero_bubble,
        min_m=lambda p, v: p,
        checks_microbatches=True,
        takes_group_size=True,
    ),
    ScheduleInfo(
        name="zbv",
        aliases=("ZBVZeroBubble", "ZB-V", "zb_v"),
        torch_name="ZBVZeroBubble",
        placement="v",
        fixed_chunks=2,
        default_chunks=2,
        source="PyTorch ScheduleZBVZeroBubble; ZB paper section 6",
        builder=zbv,
        min_m=lambda p, v: 1,
    ),
    ScheduleInfo(
        name="dualpipev",
        aliases=("DualPipeV", "dualpipe_v"),
        torch_name="DualPipeV",
        placement="v",
        fixed_chunks=2,
        default_chunks=2,
        source="DeepSeek dualpipev.py; PyTorch ScheduleDualPipeV",
        builder=dualpipev,
        min_m=lambda p, v: 2 * p,
        checks_microbatches=True,
    ),
)


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


_LOOKUP: dict[str, ScheduleInfo] = {}
for _info in _REGISTRY:
    for _n in (_info.name, *_info.aliases):
        _LOOKUP[_norm(_n)] = _info


def schedule_names() -> list[str]:
    """Canonical names of the registered schedules, in registry order.

    Returns
    -------
    list of str
    """
    return [info.name for info in _REGISTRY]


def get_schedule(name: str) -> ScheduleInfo:
    """Look a schedule up by name.

    Matching ignores case, ``_``, ``-`` and spaces, so PyTorch's
    ``get_schedule_class`` names work too (``"Interleaved1F1B"``,
    ``"ZBVZeroBubble"``, ``"DualPipeV"``, ``"InterleavedZeroBubble"`` ...).

    Parameters
    ----------
    name : str
        Canonical name (:func:`schedule_names`) or alias.

    Returns
    -------
    ScheduleInfo

    Raises
    ------
    ScheduleConfigError
        Unknown name; the message lists the valid names and aliases.

    Examples
    --------
    >>> get_schedule("Interleaved1F1B").name
    'interleaved_1f1b'
    """
    info = _LOOKUP.get(_norm(str(name)))
    if info is None:
        valid = ", ".join(f"{i.name} ({', '.join(i.aliases)})" if i.aliases else i.name for i in _REGISTRY)
        raise ScheduleConfigError(f"unknown pipeline schedule {name!r}; valid names (aliases): {valid}")
    return info


def generate(
    name: str,
    p: int,
    m: int,
    v: int | None = None,
    *,
    group_size: int | None = None,
    check_microbatches: bool = True,
) -> PipelineOrder:
    """Generate a schedule's per-rank compute order by name.

    Parameters
    ----------
    name : str
        Schedule name or alias (see :func:`get_schedule`).
    p : int
        Pipeline ranks.
    m : int
        Microbatches.
    v : int, optional
        Chunks per rank; fixed by gpipe/1f1b/zb_h1 (1) and zbv/dualpipev (2),
        default 2 for interleaved_1f1b/interleaved_zb/looped_bfs.
    group_size : int, optional
        Microbatch group size for interleaved_1f1b (default p, Megatron) and
        interleaved_zb (default torch's ``m // max(1, m // p)``).
    check_microbatches : bool, default True
        Raise when m is below the schedule's minimum; pass False to build the
        (possibly broken) order anyway, e.g. to show it to :func:`validate`.

    Returns
    -------
    PipelineOrder
        ``{rank: [action, ...]}`` for ranks 0..p-1.

    Raises
    ------
    ScheduleConfigError
        Unknown name, bad p/m/v/group_size.
    InsufficientMicrobatchesError
        m below :func:`min_microbatches`.

    Examples
    --------
    >>> " ".join(map(str, generate("1f1b", 4, 8)[2][:5]))
    '2F0 2F1 2B0 2F2 2B1'
    """
    return get_schedule(name).generate(p, m, v, group_size=group_size, check_microbatches=check_microbatches)


def min_microbatches(name: str, p: int, v: int | None = None) -> int:
    """Fewest microbatches a schedule needs.

    gpipe, looped_bfs, zbv: 1 (zbv pads with n = max(2p-1, m)); 1f1b, zb_h1,
    interleaved_1f1b, interleaved_zb: p; dualpipev: 2p.

    Parameters
    ----------
    name : str
        Schedule name or alias.
    p : int
        Pipeline ranks.
    v : int, optional
        Chunks per rank.

    Returns
    -------
    int

    Notes
    -----
    Sources: torchtitan#775 (the 1F1B family hangs with m < p), torch
    ``Schedule1F1B`` (rejects m < p), Megatron's ``p <= group_size <= m``,
    DeepSeek ``dualpipev.py`` and torch ``ScheduleDualPipeV`` (m >= 2p).
    """
    return get_schedule(name).min_microbatches(p, v)


def stage_to_rank(name: str, p: int, v: int | None = None) -> dict[int, int]:
    """Stage -> rank placement for a schedule or a placement style.

    Parameters
    ----------
    name : str
        ``"loop"``, ``"v"``, or a schedule name (its placement is used).
    p : int
        Pipeline ranks.
    v : int, optional
        Chunks per rank (default: the schedule's; 1 for ``"loop"``, 2 for ``"v"``).

    Returns
    -------
    dict of int to int
        ``loop``: stage s on rank s mod p (chunk c of rank r is stage c*p+r).
        ``v``: chunk c = s // p runs down the ranks when c is even and back up
        when odd, so with v=2 rank r holds stages r and 2p-1-r.

    Raises
    ------
    ScheduleConfigError
        Unknown name or bad p/v.

    Notes
    -----
    Source: PyTorch ``_utils.generate_stage_to_rank_mapping`` (styles
    ``"loop"`` and ``"v"``); pipelines.md notation.

    Examples
    --------
    >>> stage_to_rank("v", 4)
    {0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 2, 6: 1, 7: 0}
    """
    if name in ("loop", "v"):
        style: str = name
        chunks = (1 if name == "loop" else 2) if v is None else v
    else:
        info = get_schedule(name)
        style, chunks = info.placement, info.chunks(v)
    if not isinstance(p, int) or p < 1 or not isinstance(chunks, int) or chunks < 1:
        raise ScheduleConfigError(f"stage_to_rank needs p >= 1 and v >= 1, got p={p!r}, v={chunks!r}")
    mapping: dict[int, int] = {}
    for s in range(p * chunks):
        c, pos = divmod(s, p)
        mapping[s] = pos if (style == "loop" or c % 2 == 0) else p - 1 - pos
    return mapping
