"""benchmarks/accuracy/replay_runs.py --fresh-host: an older calibration's profile with the host fields its own
fresh processes give under this checkout's calibrate."""

from __future__ import annotations

import json

from tests.conftest import accuracy_script

# three fresh host processes of one H100 calibration (2026-12-07 10:52 UTC, calibrated.json host_fresh_processes;
# the loops this test needs, µs): the third's matmul loop read 35.0 once, its settled matmul is the lower 10.42
FRESH = [{"eager_per_op_us": 10.59, "eager_per_op_again_us": 10.59, "matmul_loop_us": 10.77, "mixed_pair_us": 29.11,
          "collective_loop_us": 14.92, "eager_per_collective_us": 14.92},
         {"eager_per_op_us": 10.49, "eager_per_op_again_us": 10.49, "matmul_loop_us": 10.94, "mixed_pair_us": 28.12,
          "collective_loop_us": 15.26, "eager_per_collective_us": 15.26},
         {"eager_per_op_us": 10.42, "eager_per_op_again_us": 10.42, "matmul_loop_us": 35.0, "mixed_pair_us": 29.06,
          "collective_loop_us": 14.98, "eager_per_collective_us": 14.98}]


def test_collective_after_kernel_is_each_pair_less_its_settled_matmul_then_the_median():
    m = accuracy_script("replay_runs")
    got = m.fresh_host_fields({"host_fresh_processes": FRESH})
    # pairs less settled matmuls: 29.11 - 10.59 = 18.52, 28.12 - 10.49 = 17.63, 29.06 - 10.42 = 18.64 -> 18.52
    assert got["collective_after_kernel_us"] == 18.52
    assert got["eager_per_op_us"] == 10.49 and got["eager_per_collective_us"] == 14.98
    assert m.fresh_host_fields({}) == {}


def test_the_profile_keeps_its_fields_and_gains_the_unset_one(tmp_path):
    import yaml

    from schedsim.hardware.profile import load_profile

    m = accuracy_script("replay_runs")
    base = load_profile("h200").model_dump(mode="json")
    src = tmp_path / "calibrated.yaml"
    src.write_text(yaml.safe_dump(base, sort_keys=False))
    (tmp_path / "calibrated.json").write_text(json.dumps({"host_fresh_processes": FRESH}))
    out = load_profile(m.with_fresh_host(str(src), tmp_path / "out.yaml"))
    assert out.launch.collective_after_kernel_us == 18.52
    assert out.launch.eager_per_op_us == base["launch"]["eager_per_op_us"]  # set already: kept
