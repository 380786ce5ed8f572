"""A profile's power curve multiplies GEMM times measured in short bursts at the boost clock
(schedsim/gpu/power.py), so a shipped profile with a curve must hold burst times in its GEMM table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedsim.hardware.profile import list_profiles, load_profile

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "data" / "power_duty_h200.json"  # benchmarks/probes/gpu_state/power_duty.py, one H200


def _burst_ms() -> float:
    """bf16 4096^3 back to back from a cold H200, the first 5 ms (before the power limiter acts): the probe's
    first onset window, relative to its cold single GEMM."""
    r = json.loads(PROBE.read_text())["shapes"]["4096x4096x4096xbf16"]
    first = r["onset"][0]
    assert first["from_s"] == 0 and first["to_s"] <= 0.005
    return first["rel"] * r["cold_s"] * 1e3


def test_the_probe_burst_by_hand():
    assert _burst_ms() == pytest.approx(0.864 * 0.18944, rel=2e-3)  # 0.1637 ms


def _h200_with_curve() -> list[str]:
    out = []
    for n in list_profiles():
        p = load_profile(n)
        if p.power is not None and p.power.gemm_slowdown_by_duty and "H200" in p.gpu.name:
            out.append(n)
    return out


@pytest.mark.parametrize("name", _h200_with_curve())
def test_h200_profiles_with_a_power_curve_hold_burst_gemm_times(name):
    table = {tuple(e[:4]): e[4] for e in load_profile(name).gemm.entries}
    assert table[("bf16", 4096, 4096, 4096)] == pytest.approx(_burst_ms(), rel=0.05)


def test_the_default_h200_holds_burst_times_and_its_curve():
    # since 2026-12-02 the default h200 carries back-to-back GEMM times (its single event-timed launches of
    # 2026-11-29 ran 1.0-5.8x over them), so it carries the power curve those times need
    assert "h200" in _h200_with_curve()
    table = {tuple(e[:4]): e[4] for e in load_profile("h200").gemm.entries}
    assert table[("fp32", 2048, 1024, 8192)] == 0.70779  # calibrate, 2xH200, 2026-11-30, back to back
