"""benchmarks/accuracy/replay_runs.py --host-rules: a calibration's fresh host processes combined by each rule of
HOST_RULES, through calibrate's own settle_costs / median_costs / launch_fields."""

from __future__ import annotations

import json

import pytest

from tests.conftest import accuracy_script

# three fresh host processes of one H100 calibration (2026-12-07 16:36 UTC, calibrated.json host_fresh_processes,
# rounded; the figures this test needs): the processes ran 12.50 / 14.73 / 17.56 µs per 64x64 matmul
FRESH = [{"eager_per_op_us": 12.50, "eager_per_op_again_us": 12.50, "eager_per_collective_us": 18.61,
          "elementwise_call_us": 6.56, "call_launch_fraction": 0.851, "gemm_call:bf16:1x2048x2048": 0.866},
         {"eager_per_op_us": 14.73, "eager_per_op_again_us": 14.73, "eager_per_collective_us": 24.41,
          "elementwise_call_us": 7.12, "call_launch_fraction": 0.786, "gemm_call:bf16:1x2048x2048": 0.654},
         {"eager_per_op_us": 17.56, "eager_per_op_again_us": 18.67, "eager_per_collective_us": 31.64,
          "elementwise_call_us": 9.70, "call_launch_fraction": 0.869, "gemm_call:bf16:1x2048x2048": 0.702}]
KEYS = ("eager_per_op_us", "eager_per_collective_us", "elementwise_call_us", "call_launch_fraction")


def _fields(rule: str) -> tuple[list[float], float]:
    from executor.calibrate_host import launch_fields

    costs = accuracy_script("replay_runs").fresh_host_costs({"host_fresh_processes": FRESH}, rule)
    got = launch_fields(costs)
    return [got[k] for k in KEYS], round(costs["gemm_call:bf16:1x2048x2048"], 3)


@pytest.mark.parametrize(("rule", "fields", "row"), [
    ("median", [14.73, 24.41, 7.12, 0.85], 0.702),         # field by field: three processes' fields mixed
    ("mid_process", [14.73, 24.41, 7.12, 0.79], 0.654),    # the second process whole
    ("mid_composite", [14.73, 24.41, 7.12, 0.79], 0.654),  # its speed factor over the three fields is 1: the same
    ("fastest", [12.50, 18.61, 6.56, 0.85], 0.866),        # the first process whole
    # each process times 14.73 / its eager_per_op_us: collectives 18.61 * 14.73 / 12.50 = 21.93, 24.41,
    # 31.64 * 14.73 / 17.56 = 26.54 -> 24.41; adds 6.56 * 1.1784 = 7.73, 7.12, 9.70 * 0.8388 = 8.14 -> 7.73;
    # the fraction and the call ratio are ratios: not scaled, their medians
    ("scaled", [14.73, 24.41, 7.73, 0.85], 0.702),
])
def test_each_rule_gives_the_hand_computed_fields(rule, fields, row):
    assert _fields(rule) == (fields, row)


def test_fresh_host_fields_is_the_median_rule_and_a_rule_profile_holds_its_process(tmp_path):
    m = accuracy_script("replay_runs")
    assert m.fresh_host_fields({"host_fresh_processes": FRESH})["elementwise_call_us"] == 7.12
    import yaml

    from schedsim.hardware.profile import load_profile

    src = tmp_path / "calibrated.yaml"
    src.write_text(yaml.safe_dump(load_profile("h200").model_dump(mode="json"), sort_keys=False))
    (tmp_path / "calibrated.json").write_text(json.dumps({"host_fresh_processes": FRESH}))
    out = load_profile(m.with_host_rule(str(src), "fastest", tmp_path / "out.yaml"))
    assert (out.launch.eager_per_op_us, out.launch.elementwise_call_us) == (12.50, 6.56)
    assert [list(r) for r in out.gemm.call] == [["bf16", 1, 2048, 2048, 0.866]]
