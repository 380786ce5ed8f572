"""benchmarks/probes/host/collective_call.py --after: its per-call arithmetic by hand, and its whole code path on a gloo
rank (a world of one), so that the device run exercises nothing untried."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "probes" / "host" / "collective_call.py"

pytest.importorskip("torch")


def _module():
    spec = importlib.util.spec_from_file_location("collective_after_probe", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_call_costs_its_last_step_stamp_less_the_previous_calls() -> None:
    # steps: set_stream, mm0, ar1, mm2, ar3, end record; owners (kind, last step of the call)
    owners = [("mm", 1), ("ar", 2), ("mm", 3), ("ar", 4), ("end", 5)]
    runs = [([1_000, 11_000, 29_000, 39_000, 55_000, 56_000], 60.0, 80.0),
            ([2_000, 13_000, 31_000, 40_000, 57_000, 58_000], 62.0, 84.0),
            ([1_000, 12_000, 28_000, 37_000, 54_000, 55_000], 58.0, 90.0)]
    r = _module().Probe.summarise(owners, runs)
    assert r["first_mm_us"] == 12.0  # 11, 13, 12 µs: the set_stream counts with the first matmul
    assert r["first_step_us"] == 1.0  # the set_stream alone: 1, 2, 1 µs
    assert r["ar_layers_us"] == [18.0, 17.0]  # 18, 18, 16 and 16, 17, 17
    assert r["mm_layers_us"] == [12.0, 9.0]  # the first, then 10, 9, 9
    assert r["ar_after_mm_us"] == 17.5 and r["mm_after_ar_us"] == 9.0  # under four layers: every one counts
    assert r["issue_us"] == 60.0 and r["makespan_us"] == 84.0 and r["calls"] == 4


def test_deep_variants_call_from_that_many_more_python_frames() -> None:
    import inspect

    mod = _module()
    assert mod._at_depth(mod.DEEP, lambda: len(inspect.stack())) - mod._at_depth(0, lambda: len(inspect.stack())) \
        == mod.DEEP


def test_the_probe_runs_on_a_gloo_rank_and_prints_one_json_line() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    p = subprocess.run([sys.executable, str(SCRIPT), "--after", "--device", "cpu", "--small", "--reps", "2",
                        "--warmup", "1", "--loop-reps", "1", "--pairs", "2"], env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("PROBE ")]
    assert len(lines) == 1
    r = json.loads(lines[0].removeprefix("PROBE "))
    assert r["cuda"] is False and r["world"] == 1 and r["torchrun"] is False
    for when in ("calibrate", "calibrate_after"):
        for tag in ("collector_on", "frozen_gc"):
            c = r[when][tag]
            assert c["collective_after_kernel_us"] == pytest.approx(c["gemv_pair_us"] - c["gemv_loop_us"], abs=2e-3)
        assert all(r[when][f"first_{c}_after_{w}_us"] > 0 for c in ("mm", "ar") for w in ("sync", "start"))
    assert set(r["pair_loops"]) == {"cal", "sep_buf", "side", "busy", "tpa"}
    for v in r["pair_loops"].values():  # ar_after_us: the median of each round's difference (noise-bound on a CPU)
        assert set(v) == {"mm_loop_us", "pair_us", "ar_after_us"} and v["mm_loop_us"] > 0 and v["pair_us"] > 0
    it = r["iters"]
    assert set(it) == {"tpa", "tpa_same_buf", "tpa_default", "tpa_busy", "tpa_events", "tpa_hostrow", "tpa_deep", "tpw",
                       "ffn", "ffn_sync", "ffn_small_ar", "gemv_big_ar"}
    # calls per iteration: 8 layers of linear + all_reduce, 96 for tpw, fc1 + fc2 + all_reduce (no sync on a CPU)
    assert {k: v["calls"] for k, v in it.items()} == {**{k: 16 for k in it}, "tpw": 192, "ffn": 3, "ffn_sync": 3,
                                                       "ffn_small_ar": 3}
    for k, v in it.items():
        n = 1 if k.startswith("ffn") else 8
        assert len(v["ar_layers_us"]) == n and len(v["mm_layers_us"]) == n and v["first_mm_us"] > 0
        assert v["ar_after_mm_us"] > 0 and len(v["issue_us_runs"]) == 2
    assert sorted(it["ffn"]["per_call_us"]) == ["ar2", "mm0", "mm1"]
