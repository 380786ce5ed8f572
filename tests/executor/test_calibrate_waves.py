"""gpu.wave_tail_us (rule wave-tail): calibrate's fit finds the tail that the waves model needs to predict an overlapped
run, and _assemble writes it into the profile."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from exec_helpers import DATA

from executor import calibrate as C
from executor import calibrate_bench as CB
from executor.calibrate_waves import _schedule_text, fit_wave_tail, pick_shapes
from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

REC = {"dtype": "fp32", "m": 2048, "n": 1024, "k": 8192, "ctas": 128, "streams": 8, "per_stream": 8,
       "one_stream_ms": 0.708}


def _overlapped_ms(tail_us: float) -> float:
    """What the waves model predicts for REC's overlapped run on h200 with a tail, host costs and power off."""
    p = load_profile("h200")
    zero = {k: 0.0 for k in ("eager_per_op_us", "event_wait_us", "stream_switch_us", "memcpy_call_us",
                             "elementwise_call_us", "first_op_extra_us", "executor_extra_per_op_us")}
    key = ("fp32", 2048, 1024, 8192)
    gemm = p.gemm.model_copy(update={"entries": [e for e in p.gemm.entries if tuple(e[:4]) != key] + [[*key, 0.708]],
                                     "tail": [e for e in p.gemm.tail if tuple(e[:4]) != key] + [[*key, tail_us]]})
    p = p.model_copy(update={"gemm": gemm, "power": None, "launch": p.launch.model_copy(update=zero),
                             "gpu": p.gpu.model_copy(update={"wave_tail_us": tail_us})})
    return simulate(lower(load_text(_schedule_text(REC), "t.yaml")), p, launch="eager").makespan_s * 1e3


@pytest.mark.parametrize("tail_us", [2.0, 8.0, 25.0])
def test_fit_recovers_the_tail_a_run_was_simulated_with(tail_us):
    rec = dict(REC, overlapped_ms=_overlapped_ms(tail_us))
    assert fit_wave_tail(load_profile("h200"), rec, 128) == pytest.approx(tail_us, abs=0.011)


def test_fit_is_zero_or_capped_outside_the_models_range():
    # 64 GEMMs 2 % slower than back to back: even no tail predicts less (the grid's 4 free SMs already help)
    assert fit_wave_tail(load_profile("h200"), dict(REC, overlapped_ms=64 * 0.708 * 1.02), 128) == 0.0
    assert _overlapped_ms(0.0) < 64 * 0.708
    # faster than rule wave-tail can make it: the cap, a quarter of the 0.708 ms wave
    assert fit_wave_tail(load_profile("h200"), dict(REC, overlapped_ms=1.0), 128) == 177.0


def test_pick_shapes_takes_the_schedule_gemms_of_at_least_half_a_wave():
    rows = [["bf16", 4096, 4096, 4096, 0.9], ["fp32", 1024, 512, 8192, 0.183], ["fp32", 64, 64, 64, 0.004],
            ["bf16", 8192, 8192, 8192, 4.2], ["bf16", 256, 256, 4096, 0.03]]
    ctas = [["bf16", 4096, 4096, 4096, 512], ["fp32", 1024, 512, 8192, 128], ["fp32", 64, 64, 64, 1],
            ["bf16", 8192, 8192, 8192, 2048], ["bf16", 256, 256, 4096, 16]]
    # four waves is fine; one CTA, 16 CTAs (most SMs free) and a 4.2 ms GEMM (too long to run 640 times) are not
    assert pick_shapes(rows, ctas, 132) == [(("bf16", 4096, 4096, 4096), 512), (("fp32", 1024, 512, 8192), 128)]
    assert pick_shapes(rows[2:], ctas, 132) == [(("fp32", 2048, 1024, 8192), None)]
    assert len(pick_shapes(rows[:2] * 10, ctas, 132, limit=3)) == 3


torch = pytest.importorskip("torch")


def test_assemble_writes_the_fitted_wave_tail(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())
    ctx = SimpleNamespace(cuda=True, device=None)
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    base = load_profile("h200").gpu.wave_tail_us  # not measured: the base profile's (8.28 us)
    assert HardwareProfile.model_validate(d).gpu.wave_tail_us == base > 0
    raw["wave_tail"] = [dict(REC, overlapped_ms=64 * 0.6777),  # one H200, 2026-12-02 21:39 UTC
                        dict(REC, m=1024, n=512, one_stream_ms=0.1805, overlapped_ms=64 * 0.1684, ctas=128)]
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, ctx, "NVIDIA H200")
    p = HardwareProfile.model_validate(d)
    rows = {tuple(r[:4]): r[4] for r in p.gemm.tail}
    assert set(rows) == {("fp32", 2048, 1024, 8192), ("fp32", 1024, 512, 8192)}
    # that raw run predates the gemm.reduce rows, so its tails also carry the reductions' overlap
    assert all(2.0 < t < 40.0 for t in rows.values()) and "wave_tail_us: the median" in d["gpu"]["source"]
    assert p.gpu.wave_tail_us == round(sum(rows.values()) / 2, 2)  # the median of two
    assert rows[("fp32", 2048, 1024, 8192)] == fit_wave_tail(p, raw["wave_tail"][0], 128)


def test_gemm_call_ratios_become_gemm_call_rows(monkeypatch) -> None:
    """Rule host-issue's gemm.call: calibrate_host times each short GEMM's call over the 64x64 one (a loop of calls,
    here a stub returning 26 µs against a 20 µs base: 1.3), and _assemble writes the ratios as gemm.call rows."""
    from executor import calibrate_host as H

    tf32_on = []
    monkeypatch.setattr(H, "_loop_us", lambda b, fn, **kw: (fn(), tf32_on.append(
        torch.backends.cuda.matmul.allow_tf32), 26.0)[2])
    b = SimpleNamespace(torch=torch, ctx=SimpleNamespace(device="cpu"), cuda=False)
    before = torch.backends.cuda.matmul.allow_tf32
    got = H._gemm_calls(b, 20.0, [("fp32", 64, 32, 16), ("tf32", 64, 32, 16)])
    assert got == {"gemm_call:fp32:64x32x16": pytest.approx(1.3), "gemm_call:tf32:64x32x16": pytest.approx(1.3)}
    assert tf32_on == [False, True] and torch.backends.cuda.matmul.allow_tf32 == before  # 'tf32' runs on TF32
    got = {k: v for k, v in got.items() if "fp32" in k}
    assert H.gemm_call_rows({"eager_per_op_us": 9.0, **got}) == [["fp32", 64, 32, 16, 1.3]]
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(multi_processor_count=132))
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())
    raw["host"].update({"gemm_call:bf16:1024x512x8192": 1.2934})
    d = C._assemble(CB.CalibrateOptions(out=Path("x.yaml")), raw, SimpleNamespace(cuda=True, device=None),
                    "NVIDIA H200")
    p = HardwareProfile.model_validate(d)
    assert p.gemm.call == [("bf16", 1024, 512, 8192, 1.293)]
    assert "gemm_call" not in str(d["launch"])  # a GEMM's ratio is no launch field
