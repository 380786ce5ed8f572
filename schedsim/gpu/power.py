"""The GPU's power state under sustained load: GEMMs slow down when tensor cores stay busy (the ``waves`` model).

A GPU holds its board power limit by lowering the SM clock. A burst of tensor-core GEMMs runs at the boost clock,
which is what ``calibrate`` times (bursts of ~2 ms) and what its GEMM table holds; under sustained load the clock
falls and every GEMM takes longer. The curve is relative to such burst times, so only a profile whose table holds
them carries one (``h200x2``, and ``h200`` since its table holds back-to-back times; its single event-
timed launches were 1.18× the burst for bf16 4096³, ``tests/hardware/test_power_profiles.py``). Measured
on one H200 (700 W limit, torch 2.11, [evidence: power-duty], ``benchmarks/probes/gpu_state/power_duty.py``,
bf16 4096×16384×4096
with the executor's uniform operands): back to back, the first ~40 ms run at the table's speed, then 16.6 % slower
while ``nvidia-smi`` shows 1620 MHz instead of 1980; at a sustained duty cycle of 0.88 the GEMMs are 12 % slower, at
0.73 3.5 %, at 0.59 and below not slower (beyond the +3 % every GEMM pays after an idle gap, which the duty curve
divides out). fp32 GEMMs (SIMT, no tensor cores: 8192×4096×8192, 11 ms each) do not slow down at a duty of 0.99. The
curve is one shape's: the same probe's bf16 4096³ GEMMs (0.16 ms) ran 1.11–1.12× their burst time at duties
0.57–0.70 and 1.20–1.44× at 0.42–0.28 (a larger cost after each idle gap), where the curve gives 1.0–1.03×; short
GEMMs with idle between them are predicted too fast. On 2×H200 the pipeline cases (GEMMs ~75 % of each GPU's time)
ran their GEMMs 3.6–5.3 % over the table ([evidence: accuracy-h200]).

The model (steady state, as a training loop runs iteration after iteration):

* the *tensor-core duty* of a rank is the time its tensor-core GEMMs run (the union of their intervals: matmul
  spans whose achieved FLOP rate exceeds the profile's fp32 peak, which only tensor cores reach) over the
  makespan; the duty of the simulation is the largest over ranks (one clock for all: the critical path runs
  through the busiest GPUs);
* the profile's ``power.gemm_slowdown_by_duty`` curve gives the GEMM time multiplier at that duty (linear
  between points, 1 below the first point, the last value above the last);
* the multiplier is a fixed point: GEMMs slowed by ``f`` raise the duty, which raises ``f``; the simulation is
  repeated with every GEMM's time multiplied by ``f`` (:meth:`HardwareProfile.with_gemm_slowdown`) until ``f``
  moves by less than 0.2 % (at most :data:`MAX_PASSES` simulations; one when the profile has no curve, when
  no GEMM runs on tensor cores, or when the duty stays below the curve's first point);
* the answer is the *least* fixed point, the smallest ``f`` whose run's duty asks for no more than ``f``. The duty
  need not grow with ``f``: a GEMM made long enough by ``f`` leaves the host waiting for the GPU, so the next
  iteration's first call runs cold (:mod:`schedsim.gpu.rules` rule host-issue) and the makespan jumps, the duty falls.
  Where a pass asks for less than the one before (``f`` overshot), the iteration bisects between the largest
  ``f`` known too small and the smallest known large enough, to :data:`BRACKET` (at most :data:`MAX_BISECT`
  more simulations), and returns the latter's run. Why the least: of two GEMMs the larger's least fixed point
  gives the longer span (any span large enough for the larger GEMM's duty is large enough for the smaller's), so
  a GEMM's predicted time never falls as m, n or k grow, to the tolerance; stopping wherever the passes ran
  out let a lone bf16 5652×4096×4096 GEMM on ``h200`` take 258.8 µs and a 5660-row one 252.3 µs
  (``tests/gpu/test_cost_monotone.py``);
* a run that has not yet kept its GPU busy for the limiter's burst (``power.onset_s``, measured by ``calibrate``
  on back-to-back GEMMs) runs at the table's speed: a measured run of few short iterations (``schedsim
  execute``'s warm-up, timed and uninstrumented iterations, :func:`sustained_of`) is predicted without the
  slowdown (:func:`below_onset`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS

__all__ = ["tensor_duty", "tensor_gemm_rows", "slowdown_at", "steady_state", "below_onset", "sustained_of",
           "MAX_PASSES"]

class RunColumns(Protocol):
    """The span columns the power model reads (a :class:`schedsim.sim.timeline.SpanColumns`): ``kind`` as
    ``(values, codes)``, and per span its ``rank`` and seconds ``start_s``, ``end_s``, ``solo_s`` (NaN: unknown),
    and ``flops`` (arrays of shape (spans,))."""

    @property
    def kind(self) -> tuple[list[str], np.ndarray]: ...

    @property
    def rank(self) -> np.ndarray: ...

    @property
    def start_s(self) -> np.ndarray: ...

    @property
    def end_s(self) -> np.ndarray: ...

    @property
    def solo_s(self) -> np.ndarray: ...

    @property
    def flops(self) -> np.ndarray: ...


class Run(Protocol):
    """What the power model reads of a simulated run (a :class:`schedsim.sim.timeline.Timeline`): its makespan (s),
    its span columns (``kind``, ``rank``, ``start_s``, ``end_s``, ``solo_s``, ``flops``), its span count and its
    ``meta``, where the fixed point is recorded. A protocol, so that the GPU model needs nothing of the timeline
    layer above it."""

    @property
    def makespan_s(self) -> float: ...

    @property
    def columns(self) -> RunColumns: ...

    @property
    def meta(self) -> dict[str, Any]: ...

    def __len__(self) -> int: ...


T = TypeVar("T", bound=Run)

#: Simulations at most per prediction (the fixed point converges in 2–3 on the shipped schedules).
MAX_PASSES = 4
#: Stop when the multiplier moves by less than this (relative).
TOLERANCE = 0.002
#: Bisect a bracket of the least fixed point down to this width (relative; module doc): a quarter of the tolerance,
#: so that two GEMMs whose least fixed point sits on the same jump of the duty come out in order to 0.05 %.
BRACKET = TOLERANCE / 4
#: Extra simulations at most to bisect that bracket (module doc): one of 0.03 needs 6.
MAX_BISECT = 8


def tensor_gemm_rows(tl: Run, fp32_peak_flops: float, repeat: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows :func:`tensor_duty` reads: ``(at, start, end, sel)``, the rows of the kinds the GEMM table times
    (int64 indices), their start and end seconds (float64 copies) and which of them are tensor-core GEMMs (bool:
    FLOP × ``repeat`` / solo seconds over ``fp32_peak_flops``, and a positive length; a NaN solo time is the
    span's length); None when there is no such row."""
    c = tl.columns
    kinds, codes = c.kind
    gemm = [i for i, k in enumerate(kinds) if k in KINDS and KINDS[k].cost == "gemm"]  # the kinds the GEMM table times
    if not gemm:
        return None
    at = np.flatnonzero(codes == gemm[0] if len(gemm) == 1 else np.isin(codes, gemm))  # the GEMM kinds' rows only
    start, end, solo, flops = c.start_s[at], c.end_s[at], c.solo_s[at], c.flops[at]
    solo = np.where(np.isnan(solo), end - start, solo)
    if repeat is not None:
        reps = np.asarray(repeat)[at]
        if not bool((reps == 1).all()):
            flops = flops * reps.astype(np.float64)
    rate = np.divide(flops, solo, out=np.zeros_like(flops), where=solo > 0)
    sel = (rate > fp32_peak_flops) & (end > start)
    return (at, start, end, sel) if sel.any() else None


def tensor_duty(tl: Run, fp32_peak_flops: float, gap_s: float = 0.0, below: float = 0.0,
                repeat: np.ndarray | None = None) -> float:
    """Largest over ranks of (union of tensor-core GEMM intervals) / (makespan + ``gap_s``), in [0, 1].

    A tensor-core GEMM is a span of a kind the GEMM table times (``matmul``: its registry entry's ``cost``) whose
    FLOP × ``repeat`` / solo seconds exceed ``fp32_peak_flops`` (FLOP/s). ``repeat`` (ints, shape (spans,), the
    ops' ``Op.repeat``; default all 1) counts the kernels a span runs back to back: a span's ``flops`` are per
    kernel and its solo time covers all of them.
    ``gap_s`` (seconds) is the GPU's idle time between iterations. When the sum of the GEMMs' lengths already
    gives a duty under ``below``, that upper bound is returned without the union (no sort). Returns 0.0 for an
    empty timeline or one without such spans.
    """
    ms = tl.makespan_s
    rows = tensor_gemm_rows(tl, fp32_peak_flops, repeat) if len(tl) and ms > 0 else None
    if rows is None:
        return 0.0
    c = tl.columns
    at, start, end, sel = rows
    if bool(sel.all()):  # every GEMM row (the benchmark's): no copies of the columns
        rank = c.rank[at]
    else:
        rank, start, end = c.rank[at[sel]], start[sel], end[sel]
    rk = rank - rank.min()  # ranks from 0 (in the order of the ranks: it stands for them below)
    del rank
    bound = np.bincount(rk, weights=end - start).max() / (ms + gap_s)
    if bound < below:
        return float(bound)
    if len(rk) > 1 and not bool(((rk[1:] > rk[:-1]) | ((rk[1:] == rk[:-1]) & (start[1:] >= start[:-1]))).all()):
        order = np.lexsort((start, rk))  # not in (rank, start) order already (a simulated timeline's is)
        rk, start, end = rk[order], start[order], end[order]
    # union per rank: a running maximum of ends that restarts at each rank (ranks offset far apart)
    off = rk.astype(np.float64) * (2.0 * (end.max() - start.min()) + 1.0)
    s, e = start + off, end + off
    del off
    reach = np.maximum.accumulate(e)
    prev = np.empty_like(reach)  # the running maximum before each span (one buffer, written in place below)
    prev[0] = -np.inf
    prev[1:] = reach[:-1]
    del reach
    covered = np.maximum(0.0, np.subtract(e, np.maximum(s, prev, out=prev), out=prev), out=prev)  # each span's
    # part past everything before it
    busy = np.bincount(rk, weights=np.minimum(covered, np.subtract(e, s, out=s), out=e))
    return float(min(1.0, busy.max() / (ms + gap_s)))


def slowdown_at(curve: list[tuple[float, float]], duty: float) -> float:
    """GEMM time multiplier at ``duty`` from ``[(duty, multiplier), ...]`` (sorted by duty): 1.0 below the first
    point, linear between points, the last multiplier above the last point; 1.0 for an empty curve."""
    if not curve or duty < curve[0][0]:
        return 1.0
    return float(np.interp(duty, [p[0] for p in curve], [p[1] for p in curve]))


def steady_state(run: Callable[[HardwareProfile], T], profile: HardwareProfile, gap_s: float = 0.0,
                 repeat: np.ndarray | None = None, sustained_s: float | None = None) -> T:
    """Simulate with ``run(profile)`` and repeat with GEMMs slowed to the steady power state (module doc).

    ``gap_s`` (seconds, >= 0) is how long the GPU idles between iterations: 0 for a training loop that issues
    iteration after iteration; ``schedsim execute`` synchronizes and aligns the ranks' start between its timed
    iterations (2 ms margin plus a clock all-gather, ``executor/clock.py``) and records the period it ran at
    (``meta["uninstrumented_period_s"]``), from which ``compare`` takes the gap. ``repeat``: kernels per span,
    as :func:`tensor_duty` takes them. ``sustained_s``: seconds the GPU had run iterations like these before the
    ones predicted (None: long enough for the steady state, as in training); when that times the duty is under
    the profile's ``power.onset_s`` (the burst the limiter allows), no slowdown applies (:func:`below_onset`).

    The returned timeline's ``meta`` gets ``power`` = ``{"tensor_duty", "gemm_slowdown", "passes"}`` when the
    profile has a curve and a slowdown applies (``gemm_slowdown`` 1.0 otherwise is left out), and
    ``{"tensor_duty", "gemm_slowdown": 1.0, "sustained_s", "onset_s"}`` when the run stayed below the onset.
    """
    tl = run(profile)
    curve = list(profile.power.gemm_slowdown_by_duty) if profile.power else []
    if not curve:
        return tl
    fp32 = profile.gpu.peak_tflops.get("fp32", 0.0) * 1e12
    f, duty, passes = 1.0, tensor_duty(tl, fp32, gap_s, below=curve[0][0], repeat=repeat), 1
    onset = profile.power.onset_s if profile.power else None
    if below_onset(duty, sustained_s, onset):
        tl.meta["power"] = {"tensor_duty": round(duty, 4), "gemm_slowdown": 1.0, "sustained_s": sustained_s,
                            "onset_s": onset}
        return tl
    lo, hi = f, None  # largest multiplier known too small; (f, tl, duty) of the smallest known large enough
    while True:
        nf = slowdown_at(curve, duty)
        if abs(nf - f) <= TOLERANCE * f:
            break
        if nf > f:
            lo = f
        else:  # the duty at f asks for less than f: the least fixed point lies in (lo, f]
            hi = (f, tl, duty)
        if hi is None:
            if passes >= MAX_PASSES:
                break
            f = nf
        elif hi[0] - lo <= BRACKET * hi[0] or passes >= MAX_PASSES + MAX_BISECT:
            f, tl, duty = hi
            break
        else:  # the pass's own answer when it lies inside the bracket (where the duty grows with f), else halve
            f = nf if lo < nf < hi[0] else (lo + hi[0]) / 2
        tl = run(profile.with_gemm_slowdown(f))
        # rates fall by f: compare with the scaled peak
        duty, passes = tensor_duty(tl, fp32 / f, gap_s, repeat=repeat), passes + 1
    if f > 1.0:
        tl.meta["power"] = {"tensor_duty": round(duty, 4), "gemm_slowdown": round(f, 4), "passes": passes,
                            "iteration_gap_s": gap_s}
    return tl


def below_onset(duty: float, sustained_s: float | None, onset_s: float | None) -> bool:
    """True when a run at tensor-core ``duty`` that had kept the GPU under load for ``sustained_s`` seconds stays
    within the limiter's burst, ``onset_s`` seconds of back-to-back GEMMs: ``sustained_s · duty < onset_s``
    (an assumption: the limiter reacts to the GEMMs' busy time, so a lower duty reaches the onset later; only
    back-to-back onsets are measured). False when either is None (steady state).

    Why: short runs of GEMMs at a high duty run at the table's (burst) speed, where the steady curve predicts them
    ~1.13× slower; back-to-back GEMMs run ~40 ms at that speed before slowing
    (``benchmarks/probes/gpu_state/power_duty.py``;
    docs/validation.md, "Evidence cited by the code").

    >>> below_onset(0.9, 0.024, 0.04), below_onset(0.9, 2.0, 0.04), below_onset(0.9, None, 0.04)
    (True, False, False)
    """
    return sustained_s is not None and onset_s is not None and sustained_s * duty < onset_s


def sustained_of(meta: dict) -> float | None:
    """Seconds a ``schedsim execute`` run kept its GPU iterating before the middle of its uninstrumented iterations
    (timeline ``meta``): ``(warmup + iters + warmup_uninstrumented + uninstrumented / 2) × uninstrumented_period_s``
    (``warmup_uninstrumented``: the untimed iterations of the uninstrumented loop before its timed ones,
    ``executor.runtime.lean_warmup``; 0 where the run does not record it, as runs before that warm-up did not); None
    when the run did not record the period or the counts.

    >>> sustained_of({"warmup": 5, "iters": 20, "makespan_uninstrumented_iters_s": [0.1] * 20,
    ...               "uninstrumented_period_s": 0.0004})
    0.014
    """
    per, lean = meta.get("uninstrumented_period_s"), meta.get("makespan_uninstrumented_iters_s")
    if not per or not lean or meta.get("warmup") is None or meta.get("iters") is None:
        return None
    before = int(meta["warmup"]) + int(meta["iters"]) + int(meta.get("warmup_uninstrumented") or 0)
    return round((before + len(lean) / 2) * float(per), 9)


#: ``executor/clock.py``'s default start margin (s): the least idle between two of execute's timed iterations.
EXECUTE_START_MARGIN_S = 0.002


def iteration_gap_of(meta: dict, world_size: int) -> float:
    """Seconds the GPUs idled between a measured run's uninstrumented iterations (``schedsim execute``'s
    timeline ``meta`` and world size): ``uninstrumented_period_s − makespan_uninstrumented_s``; for runs that
    did not record the period (before 2026-12-01 03:10 UTC) on 2 or more ranks, the executor's start margin,
    2 ms (the ranks spin to the latest clock + 2 ms); 0 otherwise (one rank does not spin: 0.29 ms measured on
    one H200 for offload.yaml)."""
    per, ms = meta.get("uninstrumented_period_s"), meta.get("makespan_uninstrumented_s")
    if per and ms:
        return max(0.0, float(per) - float(ms))
    return EXECUTE_START_MARGIN_S if ms and world_size > 1 else 0.0
