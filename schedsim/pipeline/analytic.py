"""Closed-form pipeline bubbles and memory, and a tiny unit-time simulator.

Two bubble conventions are in use and are easy to mix up, so both are named:

* **fraction of ideal** compute time: bubble / (m * (t_F + t_B)) =
  (p-1)/m; interleaved (p-1)/(v*m). Megatron paper (Narayanan et al., SC'21,
  arXiv 2104.04473) convention.
* **fraction of makespan** (total time): bubble / (ideal + bubble) =
  (p-1)/(m+p-1); interleaved (p-1)/(v*m+p-1). The sail-sg zero-bubble README
  switched its table from the first to this one.

:func:`unit_time_makespan` dependency-times an order with per-chunk costs
(default F = I = W = 1, B = 2; an overlapped F&B counts serially as F+B) and
reports makespan, busy time, bubble (1 - busy / (p * makespan), the
makespan convention) and peak activation memory. It reproduces the §4 table
of pipelines.md exactly (tested). It does not model communication bandwidth
(only a fixed latency ``comm`` per cross-rank dependency), compute/comm
overlap, or memory other than stored activations.

Memory convention (pipelines.md §3/§4): a forward of a chunk stores one unit
of that chunk's activations (1/v of a rank-microbatch); a full backward B or
a weight backward W frees it; an input backward I does not (W still needs
the stored inputs). Peaks are in rank-microbatch units: 1F1B rank 0 holds p.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from schedsim.errors import DeadlockError, ScheduleConfigError
from schedsim.pipeline.actions import Action, ComputationType, ScheduleAction
from schedsim.pipeline.schedules import get_schedule

__all__ = [
    "DEFAULT_COSTS",
    "UnitTimeResult",
    "bubble_fraction_of_ideal",
    "bubble_fraction_of_makespan",
    "dualpipe_bubble_time",
    "one_f_one_b_bubble_time",
    "peak_activation_memory",
    "unit_time_closed_form",
    "unit_time_makespan",
    "zb_h1_bubble_time",
    "zb_h2_bubble_time",
]

_F = ComputationType.F
_B = ComputationType.B
_I = ComputationType.I
_W = ComputationType.W

#: Per-chunk unit costs of pipelines.md §4 (F = I = W = 1, B = I + W = 2).
DEFAULT_COSTS: dict[ComputationType, float] = {_F: 1.0, _I: 1.0, _W: 1.0, _B: 2.0}


def _check(p: int, m: int, v: int = 1) -> None:
    for name, val in (("p", p), ("m", m), ("v", v)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise ScheduleConfigError(f"{name} must be a positive integer, got {name}={val!r}")


# --------------------------------------------------------------------------- bubbles


def bubble_fraction_of_ideal(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble as a fraction of the ideal (bubble-free) compute time.

    ``(p-1)/(v*m)``; with v=1 this is GPipe's and 1F1B's ``(p-1)/m``.

    Parameters
    ----------
    p, m : int
        Pipeline ranks, microbatches.
    v : int, default 1
        Interleaved chunks per rank.

    Returns
    -------
    float

    Notes
    -----
    Source: Megatron paper (arXiv 2104.04473) §2.2: bubble time
    (p-1)(t_f+t_b) over ideal m(t_f+t_b), divided by v when interleaved;
    pipelines.md §3.

    Examples
    --------
    >>> bubble_fraction_of_ideal(4, 8)
    0.375
    """
    _check(p, m, v)
    return (p - 1) / (v * m)


def bubble_fraction_of_makespan(p: int, m: int, v: int = 1) -> float:
    """Pipeline bubble as a fraction of the whole iteration time (makespan).

    ``(p-1)/(v*m + p-1)``; with v=1, ``(p-1)/(m+p-1)``. This is what
    :func:`unit_time_makespan` measures as ``bubble``.

    Parameters
    ----------
    p, m : int
        Pipeline ranks, microbatches.
    v : int, default 1
        Interleaved chunks per rank.

    Returns
    -------
    float

    Notes
    -----
    Source: bubble (p-1)(t_f+t_b)/v over bubble + m(t_f+t_b); sail-sg
    zero-bubble README table convention; pipelines.md §3/§4.

    Examples
    --------
    >>> round(bubble_fraction_of_makespan(4, 8), 4)
    0.2727
    """
    _check(p, m, v)
    return (p - 1) / (v * m + p - 1)


def one_f_one_b_bubble_time(p: int, t_f: float, t_b: float, t_w: float = 0.0) -> float:
    """1F1B (and GPipe) bubble time ``(p-1)(T_F + T_B + T_W)``.

    Parameters
    ----------
    p : int
        Pipeline ranks.
    t_f, t_b, t_w : float
        Forward, input-backward and weight-backward time of one stage and
        microbatch (ZB paper convention: T_B is input-gradient only). With a
        fused backward pass ``t_b`` = full backward and ``t_w`` = 0.

    Returns
    -------
    float

    Notes
    -----
    Source: ZB paper (arXiv 2401.10241) Table 1; DualPipe README table;
    pipelines.md §3.
    """
    return (p - 1) * (t_f + t_b + t_w)


def zb_h1_bubble_time(p: int, t_f: float, t_b: float, t_w: float) -> float:
    """ZB-H1 (ZB1P) bubble time ``(p-1)(T_F + T_B - T_W)``.

    With equal times this is 1/3 of 1F1B's bubble; peak memory stays p*M_B.

    Parameters
    ----------
    p : int
        Pipeline ranks.
    t_f, t_b, t_w : float
        Forward, input-backward and weight-backward times (T_B input only).

    Returns
    -------
    float

    Notes
    -----
    Source: ZB paper (arXiv 2401.10241) Table 1; DualPipe README ("ZB1P
    (PP-1)(F+B-2W)" with B = full backward = T_B + T_W); pipelines.md §3.
    """
    return (p - 1) * (t_f + t_b - t_w)


def zb_h2_bubble_time(p: int, t_f: float, t_b: float, t_w: float) -> float:
    """ZB-H2 (ZB2P) bubble time ``max(0, (p-1)(T_F + T_B - 2 T_W))``.

    Zero with equal times, at (2p-1)*M_B peak memory. Clamped at 0: W's
    cannot fill more than the bubble.

    Parameters
    ----------
    p : int
        Pipeline ranks.
    t_f, t_b, t_w : float
        Forward, input-backward and weight-backward times.

    Returns
    -------
    float

    Notes
    -----
    Source: ZB paper (arXiv 2401.10241) Table 1; pipelines.md §3.
    """
    return max(0.0, (p - 1) * (t_f + t_b - 2 * t_w))


def dualpipe_bubble_time(num_stages: int, t_fb: float, t_b: float, t_w: float) -> float:
    """DualPipe / DualPipeV bubble time ``(PP/2 - 1)(F&B + B - 3W)``.

    Parameters
    ----------
    num_stages : int
        PP, the number of pipeline stages (even). DualPipe: PP ranks;
        DualPipeV: PP/2 ranks (so PP = 2p).
    t_fb : float
        Time of one overlapped forward+backward chunk (F&B).
    t_b : float
        Full backward time.
    t_w : float
        Weight-backward time.

    Returns
    -------
    float

    Raises
    ------
    ScheduleConfigError
        num_stages odd or < 2.

    Notes
    -----
    Source: DeepSeek DualPipe README table; with F&B = 3, B = 2, W = 1 and
    PP = 2p it gives the 2(p-1) idle units of pipelines.md §4.

    Examples
    --------
    >>> dualpipe_bubble_time(8, 3, 2, 1)
    6.0
    """
    if num_stages < 2 or num_stages % 2:
        raise ScheduleConfigError(f"DualPipe needs an even number of stages PP >= 2, got {num_stages}")
    return float((num_stages // 2 - 1) * (t_fb + t_b - 3 * t_w))


def _check_domain(name: str, p: int, m: int, v: int) -> None:
    need = get_schedule(name).min_microbatches(p, v)
    if name == "zbv":
        need = 2 * p - 1  # below it torch pads to n = 2p-1 and the pipe never fills
    if m < need:
        raise ScheduleConfigError(
            f"the closed form for {name} holds for m >= {need} at p={p}, got m={m}",
            fix="simulate instead, unit_time_makespan(generate(...), ...)"
        )


def unit_time_closed_form(name: str, p: int, m: int, v: int | None = None) -> tuple[float, float]:
    """Closed-form (makespan, bubble) under the §4 unit costs.

    Per chunk F = I = W = 1 and B = 2 (so a v-chunk schedule is measured in
    1/v-stage units); every rank is busy ``3*v*m``.

    ==================  ===========================
    schedule            makespan
    ==================  ===========================
    gpipe, 1f1b         3(m + p - 1)
    interleaved_1f1b    3(v*m + p - 1)
    zb_h1               3m + (p - 1)
    zbv                 6m + (p - 1)
    dualpipev           6m + 2(p - 1)
    ==================  ===========================

    Parameters
    ----------
    name : str
        One of the schedules above (aliases accepted).
    p, m : int
        Pipeline ranks, microbatches: at least the schedule's minimum
        (:func:`~schedsim.pipeline.schedules.min_microbatches`), and for zbv
        m >= 2p-1 (torch pads smaller m to 2p-1 and the V never fills).
    v : int, optional
        Chunks per rank for interleaved_1f1b (default 2).

    Returns
    -------
    (float, float)
        Makespan and bubble fraction of makespan, 1 - 3vm/makespan.

    Raises
    ------
    ScheduleConfigError
        A schedule without a closed form here, or m outside its domain.

    Notes
    -----
    Sources: GPipe/1F1B/interleaved: bubble (p-1)(t_F+t_B) (Megatron paper);
    ZB-H1: (p-1)(T_F+T_B-T_W) (ZB paper); ZB-V keeps p-1 idle units and
    DualPipeV 2(p-1) = (PP/2-1)(F&B+B-3W) (DualPipe README), as stated in
    pipelines.md §4. All cross-checked by :func:`unit_time_makespan`.
    """
    info = get_schedule(name)
    chunks = info.chunks(v)
    _check(p, m, chunks)
    _check_domain(info.name, p, m, chunks)
    busy = 3 * chunks * m
    idle = {
        "gpipe": 3 * (p - 1),
        "1f1b": 3 * (p - 1),
        "interleaved_1f1b": 3 * (p - 1),
        "zb_h1": p - 1,
        "zbv": p - 1,
        "dualpipev": 2 * (p - 1),
    }.get(info.name)
    if idle is None:
        raise ScheduleConfigError(
            f"no closed form for {info.name!r}; use unit_time_makespan(generate(...)) "
            "(closed forms: gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv, dualpipev)"
        )
    makespan = float(busy + idle)
    return makespan, 1.0 - busy / makespan


def peak_activation_memory(
    name: str, p: int, m: int, rank: int, v: int | None = None, *, group_size: int | None = None
) -> float:
    """Closed-form peak stored activations of one rank, in rank-microbatch units.

    ================  =========================================
    schedule          peak on rank r
    ================  =========================================
    gpipe             m
    1f1b              min(p - r, m)
    interleaved_1f1b  min((v-1)g + 2(p-1-r) + 1, v*m) / v
    zb_h1             p (every rank)
    zbv               p (every rank)
    dualpipev         p + 1/2 (every rank)
    ================  =========================================

    Parameters
    ----------
    name : str
        Schedule name.
    p, m : int
        Pipeline ranks, microbatches (>= the schedule's minimum; zbv m >= 2p-1).
    rank : int
        0..p-1.
    v : int, optional
        Chunks per rank (interleaved; default 2).
    group_size : int, optional
        Interleaved g (default p).

    Returns
    -------
    float

    Raises
    ------
    ScheduleConfigError
        Unknown schedule, rank out of range, or m outside the formula's domain.

    Notes
    -----
    Source: pipelines.md §3 "Peak activation memory" (interleaved rank 0 =
    p + (p-1)/v with g = p); ZB paper Table 1 (ZB-H1 p*M_B); DualPipe
    README (DualPipeV PP+1 chunk units = p + 1/2). Memory convention: F
    stores, B or W frees (module docstring).
    """
    info = get_schedule(name)
    chunks = info.chunks(v)
    _check(p, m, chunks)
    _check_domain(info.name, p, m, chunks)
    if not 0 <= rank < p:
        raise ScheduleConfigError(f"rank must be in 0..{p - 1}, got {rank}")
    if info.name == "gpipe":
        return float(m)
    if info.name == "1f1b":
        return float(min(p - rank, m))
    if info.name == "interleaved_1f1b":
        g = p if group_size is None else group_size
        return min((chunks - 1) * g + 2 * (p - 1 - rank) + 1, chunks * m) / chunks
    if info.name in ("zb_h1", "zbv"):
        return float(p)
    if info.name == "dualpipev":
        return p + 0.5
    raise ScheduleConfigError(f"no closed-form peak memory for {info.name!r}; use unit_time_makespan(...).peak_memory")


# --------------------------------------------------------------------------- simulator


@dataclass(frozen=True)
class UnitTimeResult:
    """Outcome of :func:`unit_time_makespan`.

    Attributes
    ----------
    makespan : float
        Finish time of the last action.
    busy : dict of int to float
        Compute time per rank.
    bubble : float
        ``1 - sum(busy) / (p * makespan)`` (fraction of makespan).
    peak_memory : dict of int to float
        Peak stored activations per rank, rank-microbatch units.
    peak_memory_chunks : dict of int to int
        The same in chunk units (``peak_memory * v``).
    spans : dict of int to list of (action, start, end)
        The golden timeline, per rank in run order.
    """

    makespan: float
    busy: dict[int, float]
    bubble: float
    peak_memory: dict[int, float]
    peak_memory_chunks: dict[int, int]
    spans: dict[int, list[tuple[ScheduleAction, float, float]]] = field(repr=False)


def _cost_fn(
    costs: Mapping[ComputationType | str, float] | Callable[[Action], float] | None,
) -> Callable[[Action], float]:
    if costs is None:
        return lambda a: DEFAULT_COSTS[a.type]
    if callable(costs):
        return costs
    table = dict(DEFAULT_COSTS)
    for k, val in costs.items():
        try:
            ctype = ComputationType(k if isinstance(k, str) else k.value)
        except ValueError:
            raise ScheduleConfigError(f"unknown cost key {k!r}; use F, I, B or W (e.g. {{'F': 1, 'B': 2}})") from None
        table[ctype] = float(val)
    return lambda a: table[a.type]


def unit_time_makespan(
    order: Mapping[int, Sequence[ScheduleAction | None]],
    stage_to_rank: Mapping[int, int] | Callable[[int], int],
    costs: Mapping[ComputationType | str, float] | Callable[[Action], float] | None = None,
    comm: float = 0.0,
    *,
    num_stages: int | None = None,
) -> UnitTimeResult:
    """Dependency-time an order and report makespan, bubble and peak memory.

    Each rank runs its actions in list order, one at a time; an action starts
    when its rank is free and its inputs exist (plus ``comm`` when the input
    comes from another rank):

    * F of stage s, mb j: F of stage s-1, mb j (none for stage 0);
    * I or B of stage s: I or B of stage s+1 (for the last stage, its own F);
    * W: the I of the same stage and mb.

    An :class:`~schedsim.pipeline.actions.OverlapAction` runs F then B back to
    back on its rank (cost F+B); its F result is available after F.

    Parameters
    ----------
    order : mapping of int to sequence of action or None
        Compute order; idle slots and non-compute actions are ignored.
    stage_to_rank : mapping or callable
        Placement (only cross-rank-ness and the stage count are used).
    costs : mapping or callable, optional
        Per-chunk durations by type (keys ComputationType or "F"/"I"/"B"/"W";
        missing keys keep the defaults F=I=W=1, B=2), or ``f(action)``.
    comm : float, default 0
        Latency added to every cross-rank dependency.
    num_stages : int, optional
        Default ``len(stage_to_rank)`` (mapping) or max stage + 1.

    Returns
    -------
    UnitTimeResult

    Raises
    ------
    DeadlockError
        Some action can never start (its input is never produced, or ranks
        wait on each other); the message prints the order with the first
        stuck step marked ``<-- ERROR HERE`` and names each stuck action.

    Notes
    -----
    Source: dependency rules and widths of PyTorch ``_schedule_visualizer.
    add_schedule_op_spacing`` (F=I=W=1, B=2, OVERLAP=3); costs and the
    bubble definition of pipelines.md §4.

    Examples
    --------
    >>> from schedsim.pipeline.schedules import generate, stage_to_rank
    >>> r = unit_time_makespan(generate("1f1b", 4, 8), stage_to_rank("1f1b", 4))
    >>> r.makespan, round(r.bubble, 4), r.peak_memory[0]
    (33.0, 0.2727, 4.0)
    """
    cost = _cost_fn(costs)
    if callable(stage_to_rank):
        where = stage_to_rank
    else:
        mapping = dict(stage_to_rank)
        where = mapping.__getitem__
    lists = {r: [a for a in acts if a is not None and a.is_compute] for r, acts in sorted(order.items())}
    if num_stages is None:
        if not callable(stage_to_rank):
            num_stages = len(stage_to_rank)
        else:
            num_stages = 1 + max(
                (s.stage for acts in lists.values() for a in acts for s in a.sub_actions),
                default=-1,
            )
    p = max(len(lists), 1)
    chunks_per_rank = max(1, num_stages // p)

    last = num_stages - 1
    finish: dict[tuple[int, ComputationType, int | None], float] = {}
    waiters: dict[tuple[int, ComputationType, int | None], list[int]] = {}
    pos = dict.fromkeys(lists, 0)
    clock = dict.fromkeys(lists, 0.0)
    busy = dict.fromkeys(lists, 0.0)
    mem = dict.fromkeys(lists, 0)
    peak = dict.fromkeys(lists, 0)
    spans: dict[int, list[tuple[ScheduleAction, float, float]]] = {r: [] for r in lists}

    def inputs(sub: Action) -> tuple[tuple[tuple[int, ComputationType, int | None], ...], ...]:
        """Groups of alternative input keys; each group needs any one."""
        s, t, j = sub.stage, sub.type, sub.microbatch
        if t is _F:
            return (((s - 1, _F, j),),) if s > 0 else ()
        if t is _B or t is _I:
            if s == last:
                return (((s, _F, j),),)
            return (((s + 1, _I, j), (s + 1, _B, j)), ((s, _F, j),))
        return (((s, _I, j),),)  # W

    queue = list(lists)
    heapq.heapify(queue)
    queued = set(queue)
    while queue:
        r = heapq.heappop(queue)
        queued.discard(r)
        acts = lists[r]
        i = pos[r]
        t_rank = clock[r]
        while i < len(acts):
            act = acts[i]
            subs = act.sub_actions
            # an overlapped pair starts once the inputs of both halves exist
            start = t_rank
            missing = None
            for sub in subs:
                for group in inputs(sub):
                    best = None
                    for key in group:
                        done = finish.get(key)
                        if done is not None:
                            if comm and where(key[0]) != r:
                                done += comm
                            if best is None or done < best:
                                best = done
                    if best is None:
                        missing = group
                        break
                    start = max(start, best)
                if missing is not None:
                    break
            if missing is not None:
                for key in missing:
                    waiters.setdefault(key, []).append(r)
                break
            t = start
            for sub in subs:
                t += cost(sub)
                key = (sub.stage, sub.type, sub.microbatch)
                finish[key] = t
                if sub.type is _F:
                    mem[r] += 1
                    peak[r] = max(peak[r], mem[r])
                elif sub.type is _B or sub.type is _W:
                    mem[r] -= 1
                for w in waiters.pop(key, ()):
                    if w not in queued and w != r:
                        heapq.heappush(queue, w)
                        queued.add(w)
            busy[r] += t - start
            spans[r].append((act, start, t))
            t_rank = t
            i += 1
        pos[r] = i
        clock[r] = t_rank

    stuck = {r: lists[r][pos[r]] for r in lists if pos[r] < len(lists[r])}
    if stuck:
        _raise_stuck(order, lists, pos, stuck)

    makespan = max(clock.values(), default=0.0)
    total = sum(busy.values())
    bubble = 1.0 - total / (p * makespan) if makespan > 0 else 0.0
    return UnitTimeResult(
        makespan=makespan,
        busy=busy,
        bubble=bubble,
        peak_memory={r: peak[r] / chunks_per_rank for r in lists},
        peak_memory_chunks=dict(peak),
        spans=spans,
    )


def _raise_stuck(
    order: Mapping[int, Sequence[ScheduleAction | None]],
    lists: dict[int, list[ScheduleAction]],
    pos: dict[int, int],
    stuck: dict[int, ScheduleAction],
) -> None:
    # Map the stuck action back to its index in the caller's list (with Nones).
    marks: dict[int, int] = {}
    for r in stuck:
        count = -1
        for i, a in enumerate(order[r]):
            if a is not None and a.is_compute:
                count += 1
                if count == pos[r]:
                    marks[r] = i
                    break
    first = min(marks, key=lambda r: (marks[r], r))
    detail = "; ".join(f"rank {r} stuck at step {marks[r]} in {stuck[r]}" for r in sorted(stuck))
    raise DeadlockError(
        f"schedule cannot finish: {detail} (each waits for an input that is never "
        "produced or is produced only after the waiting rank moves on)",
        order=order,
        step=marks[first],
        rank=first,
        actions=tuple(stuck.values()),
    )
