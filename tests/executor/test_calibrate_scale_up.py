"""``schedsim calibrate`` on several GPUs fits its scale-up tier: the collective sweep goes to the same fitter as
``calibrate --from-nccl-tests`` (schedsim.network.fit.logs_from_sweep), and the profile it writes holds the
fitted figures with their provenance and the sweep named. No torch: the sweep's rows are made here."""

from __future__ import annotations

from typing import Any

import pytest

from executor.calibrate import _fit_scale_up
from executor.calibrate_logs import base_profile_dict
from schedsim.hardware.profile import HardwareProfile
from schedsim.network import NcclNetwork
from schedsim.network.links import bus_factor


def _rows(profile: HardwareProfile, kind: str, n: int) -> list[dict[str, Any]]:
    """The sweep's rows of ``kind`` on ``n`` GPUs of one node, 1 KiB to 4 GiB, timed by ``profile``'s NCCL model."""
    net = NcclNetwork(profile)
    rows = []
    for k in range(10, 33):
        got = net.collective(kind, 2 ** k, tuple(range(n)), floor=False)
        assert got is not None
        t = got.seconds * 1e6
        rows.append({"size": 2 ** k, "count": 2 ** k // 4, "type": "float", "redop": "sum", "root": -1, "time_us": t,
                     "algbw": 2 ** k / t / 1e3, "busbw": 2 ** k / t / 1e3 * bus_factor(kind, n), "wrong": 0})
    return rows


def test_the_sweep_writes_fitted_scale_up_figures(capsys: pytest.CaptureFixture[str]) -> None:
    d = base_profile_dict("dgx_h100")
    truth = dict(d, topology={**d["topology"], "scale_up": {**d["topology"]["scale_up"], "timing": {
        "nvls/Simple": {"hw_latency_us": 9.0, "bw_factor": 0.8, "provenance": "assumed", "source": "the truth"}}}})
    sweep = {k: _rows(HardwareProfile.model_validate(truth), k, 8) for k in ("all_reduce", "all_gather")}
    sweep["sendrecv"] = sweep["all_gather"]  # send/recv based: NCCL's tuning model times no such collective
    raw = {"world_size": 8, "nodes": 1, "backend": "nccl", "collectives": sweep, "nccl_version": "2.27.3"}
    _fit_scale_up(d, raw, "NVIDIA H100 80GB HBM3, 2026-12-07, torch 2.13.0")
    fig = d["topology"]["scale_up"]["timing"]["nvls/Simple"]
    assert fig["hw_latency_us"] == pytest.approx(9.0) and fig["bw_factor"] == pytest.approx(0.8)
    assert fig["provenance"] == "fitted"
    assert fig["source"].startswith("fitted by schedsim calibrate (its collective sweep) to its collective sweep over "
                                    "8 ranks on 1 node(s) (nccl; NVIDIA H100 80GB HBM3, 2026-12-07, torch 2.13.0)")
    assert d["nccl"]["version"] == "2.27.3"  # the release that ran, as --from-nccl-tests sets it
    assert HardwareProfile.model_validate(d).topology.scale_up is not None
    out, err = capsys.readouterr()
    assert out == ""  # the fit's table and notes go to stderr: the profile may go to stdout
    assert "fitted tier figures" in err and "sendrecv left out of the fit" in err


def test_a_base_without_scale_up_keeps_its_tables_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    d = base_profile_dict("pcie2")
    before = repr(d["topology"])
    rows = [{"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": -1, "time_us": 50.0,
             "algbw": 0.02, "busbw": 0.02, "wrong": 0}]
    _fit_scale_up(d, {"world_size": 2, "nodes": 1, "backend": "gloo", "collectives": {"all_reduce": rows}}, "CPU")
    assert repr(d["topology"]) == before
    assert "no tier figures fitted: the base profile has no topology.scale_up" in capsys.readouterr().err
