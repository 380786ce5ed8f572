"""A profile calibrated on CPU ranks carries no figure of the base profile's GPU (issue 33): peak_tflops only for
the dtypes it measured, at the measured rate; no SM count; a warning says what was left out. And execute/calibrate
warn when CPU ranks outnumber the cores."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from exec_helpers import DATA

from executor import calibrate as C
from executor import calibrate_bench as CB
from executor import calibrate_gemm as CG
from executor.dist import oversubscription_warning
from schedsim.hardware.profile import HardwareProfile

pytest.importorskip("torch")


def test_cpu_profile_keeps_only_measured_peaks_and_no_sms(capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.loads((DATA / "calibrate_raw_h200x2_2026-11-30.json").read_text())
    raw["gemm"] = [r for r in raw["gemm"] if r[0] == "fp32"]  # what CPU ranks measure (tf32/bf16/fp16 run as fp32)
    d = C._assemble(CB.CalibrateOptions(out=Path("cpu.yaml")), raw, SimpleNamespace(cuda=False, device=None), "CPU")
    p = HardwareProfile.model_validate(d)
    best = max(2 * m * n * k / (t * 1e-3) / 1e12 for _dt, m, n, k, t in raw["gemm"])
    assert set(p.gpu.peak_tflops) == {"fp32"} and p.gpu.peak_tflops["fp32"] == pytest.approx(best, abs=1e-3)
    assert p.gpu.peak_tflops["fp32"] != 67  # not the H200's datasheet fp32 peak
    assert p.gpu.sms is None and p.gpu.sm_stream_GBps is None and p.gpu.gemm_efficiency == 1.0
    err = capsys.readouterr().err
    assert "warning: calibrate on CPU ranks" in err and "bf16" in err and "sms" in err
    assert "left out" in p.gpu.source and "bf16" in p.gpu.source


def test_measured_peaks_by_hand() -> None:
    # 2·1024³ FLOP in 10 ms = 0.2147 TFLOP/s; 2·2048³ in 40 ms = 0.4295: the best per dtype
    assert CG.measured_peaks([["fp32", 1024, 1024, 1024, 10.0], ["fp32", 2048, 2048, 2048, 40.0],
                             ["fp64", 1024, 1024, 1024, 20.0]]) == {"fp32": 0.429, "fp64": 0.107}


def test_oversubscribed_cpu_ranks_are_warned_once_per_run() -> None:
    w = oversubscription_warning(False, 4, 2)
    assert w is not None and w.startswith("warning: 4 CPU ranks on 2 cores: oversubscribed") and "fix:" in w
    assert oversubscription_warning(False, 2, 2) is None
    assert oversubscription_warning(True, 4, 2) is None  # GPU ranks: the ops do not run on the cores


def test_another_gpus_datasheet_peaks_are_warned(capsys: pytest.CaptureFixture[str]) -> None:
    C._warn_base_peaks("NVIDIA H200 SXM", "NVIDIA A100-SXM4-80GB", "h200")
    assert "copied from base profile 'h200' (NVIDIA H200 SXM), not measured on NVIDIA A100" in capsys.readouterr().err
    C._warn_base_peaks("NVIDIA H200 SXM", "NVIDIA H200", "h200")  # the same GPU: its datasheet peaks hold
    assert capsys.readouterr().err == ""
