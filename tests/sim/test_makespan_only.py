"""``simulate(..., makespan_only=True)`` (what ``schedsim search`` runs): the same makespan and ``meta`` as the full
timeline, with no critical path and the eager kernels' starts not moved by the dispatch gap; on a hand-worked
chain (toy profile, conftest) and on training steps lowered from a ``training:`` block (``dgx_h100`` with its
power curve, and ``dgx_a100`` without one), every rank and the represented ranks."""

from __future__ import annotations

import pytest

from schedsim import api
from schedsim.hardware.profile import HardwareProfile, load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text
from tests.conftest import toy_profile_dict
from tests.spec.test_training_block import TINY

US = 1e-6


def test_a_chain_keeps_its_makespan_and_its_starts_without_the_gap() -> None:
    # one rank, kernels of 4 µs and 1 µs back to back, a 1 µs dispatch gap: the full timeline starts each kernel
    # min(1, half its time) µs into its time (1 and 4.5 µs); makespan_only leaves 0 and 4; both end at 5 µs
    d = toy_profile_dict()
    d["launch"].update(kernel_gap_us=1.0)
    prof = HardwareProfile.model_validate(d)
    text = ("schema_version: 1\nname: g\nworld_size: 1\nops:\n"
            "  - {name: a, kind: compute, flops: 4000000}\n  - {name: b, kind: compute, flops: 1000000}\n")
    prog = api.lower_spec(load_text(text, "t.yaml"))
    full, only = simulate(prog, prof), simulate(prog, prof, makespan_only=True)
    ends = [round(s.end_s / US, 6) for s in full.spans]
    assert [round(s.end_s / US, 6) for s in only.spans] == ends
    assert [round(s.start_s / US, 6) for s in only.spans] == [0.0, ends[0]]
    assert [round(s.start_s / US, 6) for s in full.spans][0] == pytest.approx(min(1.0, ends[0] / 2))
    assert only.makespan_s == full.makespan_s == pytest.approx(ends[-1] * US)
    assert full.critical_path == ["a@r0", "b@r0"] and only.critical_path == []


@pytest.mark.parametrize("profile", ["dgx_h100", "dgx_a100"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("extra", ["", "  num_layers_per_virtual_pipeline_stage: 1\n"])
def test_a_training_step_has_the_same_makespan_and_meta(profile: str, symmetric: bool, extra: str) -> None:
    prof = load_profile(profile)
    spec = load_text(TINY.replace("  tp: 2\n", "  tp: 2\n" + extra), "tiny.yaml")
    prog = lower(spec, symmetric=symmetric)
    full, only = simulate(prog, prof), simulate(prog, prof, makespan_only=True)
    assert full.makespan_s > 0 and only.makespan_s == full.makespan_s  # the same float, not approximately
    assert only.meta == full.meta
    assert full.critical_path and only.critical_path == []
