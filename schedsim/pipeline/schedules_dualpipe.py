"""DualPipeV: DeepSeek's V-shaped bidirectional schedule, whose overlapped forward-backward pairs are
:class:`~schedsim.pipeline.actions.OverlapAction`.

Returns a :data:`~schedsim.pipeline.actions.PipelineOrder` (see :mod:`schedsim.pipeline.schedules` for the
notation). Source: DeepSeek DualPipe 3da1bbe ``dualpipe/dualpipev.py``.
"""

from __future__ import annotations

from collections import deque

from schedsim.pipeline.actions import (
    Action,
    ComputationType,
    OverlapAction,
    PipelineOrder,
    ScheduleAction,
)
from schedsim.pipeline.schedules_common import _B, _F, _I, _W, _check_pm, _require_microbatches

__all__ = ["dualpipev"]


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
