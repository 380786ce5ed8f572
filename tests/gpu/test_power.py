"""The steady power state (schedsim/gpu/power.py): tensor-core duty, the duty curve, the fixed point, by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from schedsim.gpu.power import (
    TOLERANCE,
    below_onset,
    iteration_gap_of,
    slowdown_at,
    steady_state,
    sustained_of,
    tensor_duty,
)
from schedsim.hardware.profile import Power, load_profile
from schedsim.sim.timeline import Span, Timeline

ROOT = Path(__file__).resolve().parents[2]
FP32 = 67e12  # h200x2's fp32 peak, FLOP/s


def _mm(i: int, rank: int, s_ms: float, e_ms: float, tflops: float = 500.0) -> Span:
    """A matmul span of ``tflops`` TFLOP/s (solo = its length)."""
    d = (e_ms - s_ms) * 1e-3
    return Span(f"mm{i}@r{rank}", f"mm{i}", rank, "s", "matmul", "compute", s_ms * 1e-3, e_ms * 1e-3, solo_s=d,
                flops=tflops * 1e12 * d)


def _other(i: int, rank: int, s_ms: float, e_ms: float) -> Span:
    return Span(f"c{i}@r{rank}", f"c{i}", rank, "s", "compute", "compute", s_ms * 1e-3, e_ms * 1e-3,
                solo_s=(e_ms - s_ms) * 1e-3, bytes=1e6)


def test_tensor_duty_is_the_busiest_ranks_union_of_tensor_core_gemms_over_the_makespan():
    # rank 0: [0,2] and [1,3] overlap (union 3 ms) and [5,6]: 4 ms; rank 1: a 2 ms GEMM at 40 TFLOP/s (below the
    # fp32 peak: SIMT, not counted) and a 1 ms tensor-core GEMM; a copy ends at 10 ms (the makespan)
    tl = Timeline("t", "predict", 2, spans=[_mm(0, 0, 0, 2), _mm(1, 0, 1, 3), _mm(2, 0, 5, 6),
                                            _mm(3, 1, 0, 2, tflops=40.0), _mm(4, 1, 3, 4), _other(5, 1, 4, 10)])
    assert tensor_duty(tl, FP32) == pytest.approx(4 / 10)
    assert tensor_duty(tl, FP32, gap_s=10e-3) == pytest.approx(4 / 20)
    assert tensor_duty(Timeline("t", "predict", 1, spans=[_other(0, 0, 0, 1)]), FP32) == 0.0


def test_tensor_duty_is_the_same_whatever_the_order_of_the_spans():
    # spans in (rank, start) order are used as they are (no sort); in another order they are sorted first
    spans = [_mm(0, 0, 0, 2), _mm(1, 0, 1, 3), _mm(2, 0, 5, 6), _mm(3, 1, 3, 4), _mm(4, 1, 3.5, 9), _other(5, 1, 4, 10)]
    for order in ([0, 1, 2, 3, 4, 5], [2, 0, 1, 4, 3, 5], [4, 3, 5, 2, 1, 0]):
        tl = Timeline("t", "predict", 2, spans=[spans[k] for k in order])
        assert tensor_duty(tl, FP32) == pytest.approx(6 / 10)  # rank 1: [3, 9]


def test_slowdown_curve_is_one_below_its_first_point_linear_between_and_flat_above():
    curve = [(0.6, 1.0), (0.8, 1.1), (1.0, 1.2)]
    assert [slowdown_at(curve, d) for d in (0.0, 0.59, 0.6, 0.7, 0.8, 0.9, 1.0)] == pytest.approx(
        [1.0, 1.0, 1.0, 1.05, 1.1, 1.15, 1.2])
    assert slowdown_at([], 1.0) == 1.0
    assert slowdown_at([(0.5, 1.3)], 0.49) == 1.0 and slowdown_at([(0.5, 1.3)], 0.9) == 1.3


def test_a_curve_out_of_order_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="increasing duty"):
        Power(gemm_slowdown_by_duty=[(0.8, 1.1), (0.6, 1.0)])


def test_the_fixed_point_by_hand():
    """One rank: a GEMM of 1 ms × f (f = the profile's slowdown) then a 0.5 ms copy. Curve (0.5, 1) – (1, 1.2):
    f(d) = 1 + 0.4 (d − 0.5), d = f / (f + 0.5), so f² − 0.7 f − 0.4 = 0, f* = (0.7 + √2.09) / 2 = 1.07284.
    Passes: f = 1 → d = 2/3 → 1.06667 → d = 0.68085 → 1.07234 → d = 0.68199 → 1.07280, within the tolerance
    of 1.07234: the third simulation is returned."""
    base = load_profile("h200x2").model_copy(update={"power": Power(gemm_slowdown_by_duty=[(0.5, 1.0), (1.0, 1.2)])})
    t0 = base.gemm.entries[0][4]
    seen = []

    def run(p):  # a "simulation" whose GEMM takes 1 ms times the profile's GEMM slowdown
        f = p.gemm.entries[0][4] / t0
        seen.append(f)
        return Timeline("t", "predict", 1, spans=[_mm(0, 0, 0, f), _other(1, 0, f, f + 0.5)])

    tl = steady_state(run, base)
    exact = (0.7 + math.sqrt(2.09)) / 2
    assert seen == pytest.approx([1.0, 1 + 0.4 * (2 / 3 - 0.5), 1.0723404], rel=1e-5)
    assert tl.meta["power"]["passes"] == 3
    assert tl.meta["power"]["gemm_slowdown"] == pytest.approx(exact, rel=TOLERANCE)
    assert tl.meta["power"]["tensor_duty"] == pytest.approx(1.07234 / 1.57234, rel=1e-4)
    # a 1 ms idle between iterations lowers the duty to 1 / 2.5 = 0.4 < 0.5: no slowdown, one simulation
    seen.clear()
    assert "power" not in steady_state(run, base, gap_s=1e-3).meta and seen == [1.0]


def test_the_least_fixed_point_where_the_duty_falls_as_gemms_slow():
    """One rank: a GEMM of 1 ms × f, then 0.2 ms idle, or 0.6 ms once f >= 1.1 (a GEMM long enough that the
    next iteration's first call runs cold). Curve (0.5, 1) – (1, 1.2). Below 1.1 the duty f / (f + 0.2) >= 0.846
    asks for f >= 1.138; from 1.1 on f / (f + 0.6) <= 0.662 asks for at most 1.065: no f is its own answer, and
    the least f whose duty asks for no more than f is 1.1. Passes: 1 -> 1.1333 (overshoots: asks 1.0615) ->
    1.0615 (asks 1.1366, too small) -> bisection of [1.0615, 1.1333] down to 1.1 within the bracket; its run is
    returned. Stopping where the passes ran out (four) returned 1.1366's run: no fixed point either, and the
    side of the jump the passes end on depends on the GEMM's size."""
    from schedsim.gpu.power import BRACKET

    base = load_profile("h200x2").model_copy(update={"power": Power(gemm_slowdown_by_duty=[(0.5, 1.0), (1.0, 1.2)])})
    t0 = base.gemm.entries[0][4]

    def run(p):
        f = p.gemm.entries[0][4] / t0
        idle = 0.6 if f >= 1.1 else 0.2
        return Timeline("t", "predict", 1, spans=[_mm(0, 0, 0, f), _other(1, 0, f, f + idle)])

    tl = steady_state(run, base)
    f = tl.meta["power"]["gemm_slowdown"]
    assert 1.1 - 1e-4 <= f <= 1.1 * (1 + BRACKET) + 1e-4
    assert tl.spans[0].end_s * 1e3 == pytest.approx(f, rel=1e-3) and tl.spans[0].end_s * 1e3 >= 1.1 - 1e-12
    assert tl.meta["power"]["passes"] > 4


def test_with_gemm_slowdown_scales_the_table_and_the_roofline():
    p = load_profile("h200x2")
    q = p.with_gemm_slowdown(1.25)
    assert [e[4] for e in q.gemm.entries] == pytest.approx([e[4] * 1.25 for e in p.gemm.entries])
    assert q.gpu.peak_tflops["bf16"] == pytest.approx(p.gpu.peak_tflops["bf16"] / 1.25)


def test_pipeline_prediction_applies_the_steady_power_state(monkeypatch):
    """The shipped h200x2 has the curve measured on 2026-12-01: a 2-stage 1F1B keeps tensor cores busy > 0.73
    of the time, so its GEMMs run slower than the table: each F GEMM's solo time is the table's × the slowdown."""
    from schedsim.api import lower_spec
    from schedsim.cli import _build
    from schedsim.clicore import load as _load
    from schedsim.gpu.cost import CostModel
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f = Path("schedules/pipeline_schedules.yaml")
    G = _build(_load(f, ["p=2", "m=8", "schedule=1f1b"]), f)
    prof = load_profile("h200x2")
    prog = lower_spec(_load(f, ["p=2", "m=8", "schedule=1f1b"]), f)
    tl = simulate(prog, prof)
    pw = tl.meta["power"]
    assert pw["gemm_slowdown"] == pytest.approx(slowdown_at(prof.power.gemm_slowdown_by_duty, pw["tensor_duty"]),
                                                rel=2 * TOLERANCE)
    assert pw["gemm_slowdown"] > 1.05
    mm = next(s for s in tl.spans if s.kind == "matmul")
    table = CostModel(prof).duration(G.nodes[mm.id]["op"])
    assert mm.solo_s == pytest.approx(table * pw["gemm_slowdown"], rel=1e-3)
    # execute's idle between timed iterations lowers the duty: a smaller slowdown, a shorter makespan
    gap = simulate(prog, prof, iteration_gap_s=2e-3)
    assert gap.meta["power"]["gemm_slowdown"] < pw["gemm_slowdown"] and gap.makespan_s < tl.makespan_s
    # a profile without a curve predicts the table's times
    bare = simulate(prog, prof.model_copy(update={"power": None}))
    assert "power" not in bare.meta and bare.makespan_s < gap.makespan_s


def test_iteration_gap_of_a_measured_run():
    measured = {"uninstrumented_period_s": 0.025, "makespan_uninstrumented_s": 0.020}
    assert iteration_gap_of(measured, 1) == pytest.approx(0.005)
    assert iteration_gap_of({"makespan_uninstrumented_s": 0.020}, 2) == 0.002  # before the period was recorded
    assert iteration_gap_of({"makespan_uninstrumented_s": 0.020}, 1) == 0.0  # one rank does not spin
    assert iteration_gap_of({}, 2) == 0.0


def test_a_duty_bound_under_the_curve_skips_the_union():
    # rank 0's GEMMs overlap: union 3 ms, sum 4 ms, makespan 10 ms; asked only whether the duty reaches 0.5,
    # the sum's bound 0.4 answers; asked whether it reaches 0.3, the exact union is computed
    tl = Timeline("t", "predict", 1, spans=[_mm(0, 0, 0, 2), _mm(1, 0, 1, 3), _other(2, 0, 3, 10)])
    assert tensor_duty(tl, FP32, below=0.5) == pytest.approx(0.4)
    assert tensor_duty(tl, FP32, below=0.3) == pytest.approx(0.3)


def test_calibrates_curve_divides_out_the_idle_gap_cost_and_is_monotone():
    """executor/calibrate_power.curve_from on the 2026-12-01 calibrate run's ratios (one H200): the smallest ratio
    below duty 1 (1.0252, the lowest duty's here: the cost of a GEMM after an idle gap) divides every duty < 1;
    back to back is kept as is."""
    from executor.calibrate_power import curve_from

    got = curve_from({0.444: 1.0252, 0.59: 1.0268, 0.735: 1.0567, 0.881: 1.1253, 1.0: 1.1807})
    assert got == [[0.444, 1.0], [0.59, round(1.0268 / 1.0252, 4)], [0.735, round(1.0567 / 1.0252, 4)],
                   [0.881, round(1.1253 / 1.0252, 4)], [1.0, 1.1807]]
    # a dip is flattened (non-decreasing); the smallest low-duty ratio (1.04 at 0.5) is the divisor and the duty
    # below it (0.3, 1.05: a longer gap's cost) is dropped
    assert curve_from({0.3: 1.05, 0.5: 1.04, 0.7: 1.10, 0.9: 1.08, 1.0: 1.2}) == [
        [0.5, 1.0], [0.7, round(1.10 / 1.04, 4)], [0.9, round(1.10 / 1.04, 4)], [1.0, 1.2]]


def test_a_lowest_duty_read_above_the_next_does_not_flatten_the_curve():
    """One H100 calibration (2026-12-07 08:12 UTC, calibrated.json's power points at the duties reached): duty
    0.436 read 1.1156, above 0.585's 1.0399. Divided by the lowest duty's ratio, the curve read 1.0088 at 0.866
    (1.1254 / 1.1156) where that machine's calibrations of the evening before and of 00:36 UTC read 1.10-1.12,
    and allgather_mm bf16 chunks 4 was predicted −9.9 %. By hand, divided by 1.0399 from duty 0.585 on: 0.728
    1.0502 / 1.0399 = 1.0099, 0.866 1.1254 / 1.0399 = 1.0822; back to back 1.1808 as measured."""
    from executor.calibrate_power import curve_from

    got = curve_from({0.436: 1.1156, 0.585: 1.0399, 0.728: 1.0502, 0.866: 1.1254, 1.0: 1.1808})
    assert got == [[0.585, 1.0], [0.728, 1.0099], [0.866, 1.0822], [1.0, 1.1808]]
    # the 00:36 UTC calibration of the same machine, lowest duty 1.0278 against 1.0247 at 0.589: barely moved
    # (0.873: 1.1333 / 1.0247 = 1.106 against 1.1027 before)
    assert curve_from({0.444: 1.0278, 0.589: 1.0247, 0.73: 1.0412, 0.873: 1.1333, 1.0: 1.1756}) == [
        [0.589, 1.0], [0.73, 1.0161], [0.873, 1.106], [1.0, 1.1756]]


def test_a_ratio_of_zero_is_no_measurement_and_divides_nothing():
    """A level whose GEMMs read no time gives a ratio of 0 (NaN where it had none). As the smallest ratio below
    duty 1 it was the divisor: ZeroDivisionError. It is left out as a duty never reached, and the curve is that of
    the other points: here the 00:36 UTC H100 calibration's points with 0.444 read 0, divided by 0.589's 1.0247
    (0.73: 1.0412 / 1.0247 = 1.0161, 0.873: 1.1333 / 1.0247 = 1.106); every point unusable: no curve."""
    from executor.calibrate_power import curve_from

    want = [[0.589, 1.0], [0.73, 1.0161], [0.873, 1.106], [1.0, 1.1756]]
    assert curve_from({0.444: 0.0, 0.589: 1.0247, 0.73: 1.0412, 0.873: 1.1333, 1.0: 1.1756}) == want
    assert curve_from({0.444: float("nan"), 0.589: 1.0247, 0.73: 1.0412, 0.873: 1.1333, 1.0: 1.1756}) == want
    assert curve_from({0.444: 0.0, 0.589: -1.0, 1.0: 1.1756}) == [[1.0, 1.1756]]
    assert curve_from({0.5: 0.0, 1.0: 0.0}) == []


def test_a_run_shorter_than_the_limiters_onset_keeps_the_tables_speed():
    """Issue 39: the limiter lowers the clock only after ``power.onset_s`` of load. The one-rank run of
    test_the_fixed_point_by_hand (first-pass duty 2/3) with an onset of 40 ms: after 50 ms of such iterations
    (50 · 2/3 = 33.3 ms of GEMM time < 40) one simulation and no slowdown; after 70 ms (46.7 > 40) the steady
    state as before; with the steady state asked for (sustained_s None) likewise."""
    power = Power(gemm_slowdown_by_duty=[(0.5, 1.0), (1.0, 1.2)], onset_s=0.04)
    base = load_profile("h200x2").model_copy(update={"power": power})
    t0 = base.gemm.entries[0][4]
    seen = []

    def run(p):
        f = p.gemm.entries[0][4] / t0
        seen.append(f)
        return Timeline("t", "predict", 1, spans=[_mm(0, 0, 0, f), _other(1, 0, f, f + 0.5)])

    tl = steady_state(run, base, sustained_s=0.05)
    assert seen == [1.0] and tl.meta["power"] == {"tensor_duty": pytest.approx(2 / 3, abs=1e-4),
                                                  "gemm_slowdown": 1.0, "sustained_s": 0.05, "onset_s": 0.04}
    for sustained in (0.07, None):
        seen.clear()
        tl = steady_state(run, base, sustained_s=sustained)
        assert len(seen) == 3 and tl.meta["power"]["gemm_slowdown"] == pytest.approx(1.0728, rel=1e-3)


def test_sustained_load_of_a_measured_run():
    # 5 warm-up + 20 timed + half of 20 uninstrumented iterations at a 0.37 ms period
    meta = {"warmup": 5, "iters": 20, "makespan_uninstrumented_iters_s": [3.5e-4] * 20,
            "uninstrumented_period_s": 3.7e-4}
    assert sustained_of(meta) == pytest.approx(35 * 3.7e-4)
    # a run whose uninstrumented loop had 5 untimed iterations of its own first (executor.runtime.lean_warmup)
    assert sustained_of({**meta, "warmup_uninstrumented": 5}) == pytest.approx(40 * 3.7e-4)
    assert sustained_of({"warmup": 5, "iters": 20}) is None
    assert below_onset(0.9, 0.0129, 0.04) and not below_onset(0.9, 0.05, 0.04)
    assert not below_onset(0.9, 0.0129, None) and not below_onset(0.9, None, 0.04)


def test_calibrates_onset_is_when_the_gemms_first_run_half_the_slowdown_slower():
    from executor.calibrate_power import onset_of

    at = [i * 0.01 for i in range(10)]  # 10 ms GEMMs back to back: 1.0 ms burst, 1.2 steady from the 5th on
    dur = [1.0, 1.0, 1.0, 1.0, 1.05, 1.2, 1.2, 1.2, 1.2, 1.2]
    assert onset_of(at, dur, 1.0, 1.2, window=3) == 0.05  # windows [1.05, 1.2, 1.2] median 1.2 > 1.1: its middle
    assert onset_of(at, dur, 1.0, 1.01) is None  # no slowdown to see
