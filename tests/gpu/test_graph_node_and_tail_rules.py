"""Review of rules graph-forks and graph-nodes (commit 41fbb9f and after): the faults a review found, kept as
regressions.

1. ``CostModel.graph_node_delta`` clamps a kernel's CUDA-graph saving at half its duration but not a collective's,
   p2p's or copy's: a schema-valid negative ``launch.graph_per_op_us`` gives those a negative solo time.
2. ``launch.graph_fork_edges`` rows may be negative (no bound, unlike ``graph_cross_stream_edge_us``); whether such a
   row applies then depends on an unrelated term (``gpu.rules.fork_terms``), and one below the op's duration reaches
   the compiled loop unchecked (``waves_columns`` checks solo times before adding rule graph-forks's terms), which
   reports a deadlock where the Op-list path reports the op's negative duration.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.gpu.cost import CostModel
from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule, load_text
from schedsim.spec.overrides import parse_overrides
from tests.oracle.engine import simulate_any

ROOT = Path(__file__).resolve().parents[2]

ONE_RANK = """schema_version: 1
name: one
world_size: 1
ops:
  - {name: g, kind: matmul, m: 32, n: 1024, k: 1024, dtype: bf16, stream: main}
  - {name: ag, kind: all_gather, bytes: 4096, stream: main}
"""


def _launch(prof, **upd):  # type: ignore[no-untyped-def]
    return prof.model_copy(update={"launch": prof.launch.model_copy(update=upd)})


@pytest.mark.parametrize("as_graph", [False, True], ids=["program", "networkx"])
def test_a_negative_per_node_term_never_takes_a_collective_below_half_its_duration(as_graph: bool) -> None:
    # h200x2: kernel floor 1.78 us; a one-rank (out-of-place) all_gather is a floor-time d2d copy. -2 us per node is
    # within the schema (>= -100); a kernel of that time is clamped at half of it, the collective goes negative and
    # predict fails with "has a solo duration of -2.2e-07 s" (gpu/cost.py graph_node_delta, the non-kernel branch).
    prof = _launch(load_profile("h200x2"), graph_per_op_us=-2.0)
    prog = lower(load_text(ONE_RANK, "one.yaml"))
    G = graph_of(prog) if as_graph else prog
    table = {o.id: CostModel(prof).duration(o) for o in prog.ops()}
    spans = {s.id: s for s in simulate_any(G, prof, launch="cuda_graph").spans}
    for oid, t in table.items():
        assert spans[oid].solo_s >= 0.5 * t - 1e-15, oid


def test_a_negative_fork_row_does_not_depend_on_the_unrelated_edge_constant() -> None:
    # the row for small_ops_graph's GEMM shape is what its forks pay; the constant only applies to forks at other
    # shapes (there are none here). A 0.01 us change of the constant must not move up_i's time by 2 us.
    prog = lower(load_schedule(ROOT / "schedules" / "small_ops_graph.yaml", parse_overrides(["layers=2"])))
    prof = load_profile("h200x2")
    rows = [("bf16", 32, 1024, 1024, -2.0)]

    def solo(edge: float) -> float:
        p = _launch(prof, graph_cross_stream_edge_us=edge, graph_fork_edges=rows)
        return {s.id: s.solo_s for s in simulate(prog, p, launch="cuda_graph").spans}["up0@r0"]

    assert solo(0.0) == pytest.approx(solo(0.01), abs=1e-9)


def test_a_fork_row_below_the_ops_duration_gives_the_same_error_on_both_paths() -> None:
    # compiled loop (Program): "the schedule deadlocks; stuck ops: up0@r0 (matmul) waits for its peers";
    # Op-list path (networkx): "op up0@r0 (matmul) has a solo duration of -0.000996 s"
    prog = lower(load_schedule(ROOT / "schedules" / "small_ops_graph.yaml", parse_overrides(["layers=2"])))
    prof = _launch(load_profile("h200x2"), graph_fork_edges=[("bf16", 32, 1024, 1024, -1000.0)])
    errs = []
    for G in (prog, graph_of(prog)):
        with pytest.raises(Exception) as e:
            simulate_any(G, prof, launch="cuda_graph")
        errs.append(e.value)
    assert type(errs[0]) is type(errs[1]), [f"{type(x).__name__}: {str(x).splitlines()[0]}" for x in errs]
