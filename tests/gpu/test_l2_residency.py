"""Rule graph-nodes of the waves model: a GEMM's measured node time in a CUDA graph (``gemm.graph``), the per-node
term of other kernels (``launch.graph_per_op_us``, negative on H200), and operands read from HBM once a rank's buffers
exceed L2 (``gpu.l2_bytes``, ``gpu.l2_cold_span``, ``gpu.hbm_miss_us``). Timelines computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_gpu_model import HEAD, TINY, waves_profile

# TINY is fp32 128x128x128: 2 µs in the toy table, 196,608 bytes (A, B and C)
ROW = ["fp32", 128, 128, 128, 0.0015, 0.0025]  # as a graph node: 1.5 µs in L2, 2.5 µs from HBM
FOOT = 3 * 128 * 128 * 4


def _chain(n: int) -> str:
    return "".join(f"  - {{name: g{i}, {TINY}}}\n" for i in range(n))


def test_cold_fraction_is_linear_across_the_span_and_zero_without_an_l2_size() -> None:
    from schedsim.gpu.rules import l2_cold_fraction

    prof = waves_profile(l2_bytes=1000.0, l2_cold_span=(0.5, 0.9))
    got = l2_cold_fraction(np.array([0.0, 500.0, 600.0, 700.0, 900.0, 5000.0]), prof)
    assert got == pytest.approx([0.0, 0.0, 0.25, 0.5, 1.0, 1.0])
    assert l2_cold_fraction(np.array([1e12]), waves_profile()).tolist() == [0.0]


def test_cost_terms_of_a_gemm_with_a_graph_row_and_without() -> None:
    from schedsim.gpu.cost import CostModel
    from schedsim.graph.ops import Op

    prof = waves_profile(hbm_miss_us=0.5, kernel_floor_us=1.0, launch={"graph_per_op_us": -0.75})
    prof = prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"graph": [tuple(ROW)]})})
    cost = CostModel(prof)
    mm = Op("a", 0, "matmul", "s", 0, m=128, n=128, k=128, dtype="fp32", flops=2.0 * 128**3, nbytes=float(FOOT))
    other = Op("b", 0, "matmul", "s", 1, m=256, n=384, k=128, dtype="fp32", flops=2.0 * 256 * 384 * 128,
               nbytes=1.0)
    assert cost.duration(mm) == pytest.approx(2e-6)
    assert cost.graph_node_delta(mm) == pytest.approx(1.5e-6 - 2e-6)  # the row's warm time replaces the table's
    assert cost.cold_extra(mm) == pytest.approx(1e-6)  # cold - warm
    assert cost.graph_node_delta(other) == pytest.approx(-0.75e-6)  # no row: the profile's per-node term
    assert cost.cold_extra(other) == pytest.approx(0.5e-6)  # no row: one HBM miss
    assert CostModel.footprint(mm) == FOOT
    # a compute kernel at the floor pays the miss; one the roofline holds at the HBM rate does not
    floor = Op("c", 0, "compute", "s", 2, nbytes=64.0)
    big = Op("d", 0, "compute", "s", 3, nbytes=1e9)
    assert cost.cold_extra(floor) == pytest.approx(0.5e-6) and cost.cold_extra(big) == 0.0
    # the per-node saving never takes a kernel below half its time
    short = Op("e", 0, "compute", "s", 4, duration_s=1e-6)
    assert cost.graph_node_delta(short) == pytest.approx(-0.5e-6)


@pytest.mark.parametrize("program", [False, True])
def test_graph_chain_takes_the_row_in_l2_and_from_hbm(program: bool) -> None:
    # 4 chained TINY GEMMs, graph launch 10 µs. Working set 4 x 196,608 B = 786,432 B.
    # l2 2 MB (0.39 of it: below the span's 0.45): warm rows, 1.5 µs each: 10, 11.5, 13, 14.5, 16.
    # l2 1 MB (0.79: (0.79 - 0.45) / 0.4 = 0.8505 cold): 1.5 + 0.8505 x 1.0 = 2.3505 µs each.
    # eager (host 0): the table's 2 µs already holds 0.5 µs over the warm node (no dispatch gap in this profile),
    # so it adds the extra less that: 2 + 0.8505 - 0.5 = 2.3505 µs each (CostModel.table_hbm_s).
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    def run(l2: float, launch: str) -> list[float]:
        prof = waves_profile(l2_bytes=l2, launch={"graph_launch_us": 10.0, "eager_per_op_us": 0.0})
        prof = prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"graph": [tuple(ROW)]})})
        spec = load_text(HEAD % 1 + _chain(4), "t.yaml")
        tl = (simulate if program else simulate_reference)(lower(spec), prof, launch=launch)
        return [round(s.end_s * 1e6, 6) for s in sorted(tl.spans, key=lambda s: s.start_s)]

    assert run(2e6, "cuda_graph") == [11.5, 13.0, 14.5, 16.0]
    cold = (4 * FOOT / 1e6 - 0.45) / 0.4
    assert run(1e6, "cuda_graph") == pytest.approx([10 + (i + 1) * (1.5 + cold) for i in range(4)])
    assert run(1e6, "eager") == pytest.approx([(i + 1) * (2.0 + cold - 0.5) for i in range(4)])
    assert run(2e6, "eager") == [2.0, 4.0, 6.0, 8.0]  # in L2 eagerly: the table as it is


@pytest.mark.parametrize("program", [False, True])
@pytest.mark.parametrize(("table_us", "gap_us", "want_us"), [
    (1.5, 0.0, 2.5),  # the table at the warm node: the whole cold - warm is added
    (2.8, 0.3, 2.8),  # the table less the gap at the cold node: it was timed from HBM, nothing is added
    (2.0, 0.3, 2.8),  # 0.2 µs of it held: the rest, 0.8 µs (so the cold node plus the gap, as above)
    (2.9, 0.3, 2.9),  # a table past the cold node plus the gap: kept as it is
])
def test_eager_table_time_from_hbm_is_not_counted_twice(program: bool, table_us: float, gap_us: float,
                                                        want_us: float) -> None:
    # One TINY GEMM, eager, host 0, working set far past L2 (cold fraction 1): row warm 1.5, cold 2.5 µs. The
    # back-to-back table time less the dispatch gap, above the warm node, is HBM time the table already holds
    # (calibrate's rotating input sets past L2); the op takes table + max(0, (cold - warm) - that).
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text
    from tests.oracle.engine import simulate_reference

    prof = waves_profile(l2_bytes=1e3, launch={"eager_per_op_us": 0.0, "kernel_gap_us": gap_us})
    entries = [e for e in prof.gemm.entries if tuple(e[1:4]) != (128, 128, 128)] + [["fp32", 128, 128, 128,
                                                                                       table_us * 1e-3]]
    gemm = prof.gemm.model_copy(update={"graph": [tuple(ROW)], "entries": entries})
    prof = prof.model_copy(update={"gemm": gemm})
    tl = (simulate if program else simulate_reference)(lower(load_text(HEAD % 1 + _chain(1), "t.yaml")), prof,
                                                        launch="eager")
    assert tl.makespan_s * 1e6 == pytest.approx(want_us)
    graph = (simulate if program else simulate_reference)(lower(load_text(HEAD % 1 + _chain(1), "t.yaml")),
                                                           prof.model_copy(update={"launch": prof.launch.model_copy(
                                                               update={"graph_launch_us": 0.0})}),
                                                           launch="cuda_graph")
    assert graph.makespan_s * 1e6 == pytest.approx(2.5)  # a graph node takes the row, cold: unchanged


def test_working_sets_are_per_rank() -> None:
    # rank 0 holds 4 GEMMs (786,432 B: cold in a 0.5 MB L2), rank 1 one (196,608 B: 0.39, warm); eager, host 0
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    body = "".join(f"  - {{name: g{i}, {TINY}, ranks: [0]}}\n" for i in range(4))
    body += f"  - {{name: h, {TINY}, ranks: [1]}}\n"
    prof = waves_profile(l2_bytes=5e5, hbm_miss_us=0.5, launch={"eager_per_op_us": 0.0})
    tl = simulate(lower(load_text(HEAD % 2 + body, "t.yaml")), prof, launch="eager")
    got = {s.id: round((s.end_s - s.start_s) * 1e6, 6) for s in tl.spans}
    assert got["h@r1"] == 2.0 and got["g0@r0"] == 2.5


def test_a_cold_span_out_of_order_is_refused_with_the_format() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"0 <= from <= to"):
        waves_profile(l2_bytes=1e6, l2_cold_span=(0.9, 0.5))
    assert waves_profile(l2_bytes=1e6, l2_cold_span=(0.5, 0.5)).gpu.l2_cold_span == (0.5, 0.5)  # a step is allowed
