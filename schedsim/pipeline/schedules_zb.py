"""The zero-bubble family: ZB-H1, interleaved zero bubble and ZB-V, which split a backward into I (input
gradient) and W (weight gradient) and fill the bubble with W.

Each generator returns a :data:`~schedsim.pipeline.actions.PipelineOrder` (see
:mod:`schedsim.pipeline.schedules` for the notation). Sources: sail-sg zero-bubble 39f2c186; PyTorch
00722e64 ``torch/distributed/pipelining/schedules.py``.
"""

from __future__ import annotations

from schedsim.errors import ScheduleConfigError
from schedsim.pipeline.actions import (
    Action,
    ComputationType,
    PipelineOrder,
    ScheduleAction,
)
from schedsim.pipeline.schedules_1f1b import _chunked_1f1b_rank, megatron_schedule_table, torch_group_size
from schedsim.pipeline.schedules_common import _F, _I, _W, _check_pm, _check_v, _require_microbatches

__all__ = ["interleaved_zero_bubble", "zb_h1", "zbv"]


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
