"""Rule cta-count with ``gemm.ctas_per_sm``: a GEMM whose kernel fits several CTAs on one SM holds ceil(CTAs / that)
SMs, so two of them run side by side where one CTA per SM queues them; and the occupancy calculation that calibrate
applies to a Kineto kernel record. Timelines computed by hand."""

from __future__ import annotations

import pytest

from tests.gpu.test_gpu_model import FULL, HEAD, waves_profile

TWO = HEAD % 1 + f"  - {{name: A, {FULL}, stream: s1}}\n  - {{name: B, {FULL}, stream: s2}}\n"


def _with_occupancy(prof, per_sm: int):
    rows = [("fp32", 256, 512, 1024, per_sm)]
    return prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"ctas_per_sm": rows})})


@pytest.mark.parametrize("program", [False, True])
def test_two_gemms_that_fit_two_ctas_per_sm_run_side_by_side(program: bool) -> None:
    # FULL: 8 CTAs of 10 µs on 8 SMs. One CTA per SM: B waits for A (0-10, 10-20). Two per SM: each holds 4 SMs'
    # worth, so both start at 0 and end at 10 (their solo time: a co-resident CTA is not modelled as slower).
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    def spans(prof):
        spec = load_text(TWO, "t.yaml")
        tl = (simulate if program else simulate_reference)(lower(spec), prof)
        return {s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6)) for s in tl.spans}

    assert spans(waves_profile()) == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0)}
    assert spans(_with_occupancy(waves_profile(), 2)) == {"A@r0": (0.0, 10.0), "B@r0": (0.0, 10.0)}
    # a row of 1 is one CTA per SM, as without a row
    assert spans(_with_occupancy(waves_profile(), 1)) == {"A@r0": (0.0, 10.0), "B@r0": (10.0, 20.0)}


def test_kernel_ctas_counts_slots_not_ctas() -> None:
    from schedsim.gpu.cost import CostModel
    from schedsim.gpu.kernels import kernel_ctas
    from schedsim.graph.ops import Op

    prof = waves_profile()
    gemm = prof.gemm.model_copy(update={"ctas": [("fp32", 256, 512, 1024, 24)],
                                        "ctas_per_sm": [("fp32", 256, 512, 1024, 2)]})
    prof = prof.model_copy(update={"gemm": gemm})
    op = Op("a", 0, "matmul", "s", 0, m=256, n=512, k=1024, dtype="fp32", flops=1.0, nbytes=1.0)
    assert kernel_ctas(op, CostModel(prof), 8) == (12, 2, False)  # 24 CTAs, 2 per SM: 12 slots, 2 waves of 8


def test_occupancy_of_a_kineto_kernel_record() -> None:
    C = pytest.importorskip("executor.calibrate_gemm")
    ev = [{"cat": "kernel", "dur": 9.0, "args": {"grid": [8, 8, 2], "block": [256, 1, 1],
                                                  "registers per thread": 168, "shared memory": 0}},
          {"cat": "kernel", "dur": 1.0, "args": {"grid": [1, 1, 1], "block": [32, 1, 1],
                                                  "registers per thread": 16, "shared memory": 0}}]
    # 8 warps x ceil(168 x 32 / 256) x 256 = 8 x 5376 registers: 65536 // 43008 = 1... of the longest kernel
    assert C.longest_kernel_ctas_per_sm(ev) == 1
    ev[0]["args"]["registers per thread"] = 64  # 8 x 2048: 4 blocks by registers, 8 by threads
    assert C.longest_kernel_ctas_per_sm(ev) == 4
    ev[0]["args"]["shared memory"] = 100_000  # 233472 // 101024 = 2 by shared memory
    assert C.longest_kernel_ctas_per_sm(ev) == 2
    assert C.longest_kernel_ctas_per_sm([{"cat": "kernel", "args": {"grid": [1, 1, 1]}}]) is None
