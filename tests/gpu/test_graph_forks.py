"""Rule graph-forks of schedsim/gpu/rules.py: in a CUDA graph replay an op with a dependent on another stream holds its
own stream ``launch.graph_cross_stream_edge_us`` longer; eager runs and same-stream edges pay nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.gpu.cost import CostModel
from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.spec.loader import load_schedule
from schedsim.spec.overrides import parse_overrides
from tests.oracle.engine import simulate_any

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("as_graph", [False, True], ids=["program", "networkx"])
def test_forking_ops_pay_the_edge_cost_in_a_graph_only(as_graph):
    prog = lower(load_schedule(ROOT / "schedules" / "small_ops_graph.yaml", parse_overrides(["layers=3"])))
    G = graph_of(prog) if as_graph else prog
    prof = load_profile("h200x2")
    edge = prof.launch.graph_cross_stream_edge_us * 1e-6
    assert edge == pytest.approx(1.18e-6)
    cost = CostModel(prof)
    table = {o.id: cost.duration(o) for o in prog.ops()}
    solo = {s.id: s.solo_s for s in simulate_any(G, prof, launch="cuda_graph").spans}
    # up_i forks (side_i on aux waits for it); side2 forks too (join on main waits for it); act_i, side0/1, join do not
    forks = {"up0@r0", "up1@r0", "up2@r0", "side2@r0"}
    for oid, t in table.items():
        assert solo[oid] == pytest.approx(t + (edge if oid in forks else 0.0), abs=1e-12), oid
    eager = {s.id: s.solo_s for s in simulate_any(G, prof, launch="eager").spans}
    assert eager == pytest.approx(table)
    # a profile without the measurement (default 0) leaves graph solos at the table
    bare = prof.model_copy(update={"launch": prof.launch.model_copy(update={"graph_cross_stream_edge_us": 0.0})})
    assert {s.id: s.solo_s for s in simulate_any(G, bare, launch="cuda_graph").spans} == pytest.approx(table)


@pytest.mark.parametrize("as_graph", [False, True], ids=["program", "networkx"])
def test_a_fork_at_a_gemm_shape_with_a_row_pays_that_row(as_graph):
    # small_ops_graph's GEMMs are bf16 32x1024x1024; a row of 3 µs for that shape replaces the 1.18 µs constant at
    # up_i and side2 (both that GEMM); a row for another shape changes nothing
    prog = lower(load_schedule(ROOT / "schedules" / "small_ops_graph.yaml", parse_overrides(["layers=3"])))
    G = graph_of(prog) if as_graph else prog
    prof = load_profile("h200x2")
    table = {o.id: CostModel(prof).duration(o) for o in prog.ops()}
    forks = {"up0@r0", "up1@r0", "up2@r0", "side2@r0"}

    def solos(rows):
        p = prof.model_copy(update={"launch": prof.launch.model_copy(update={"graph_fork_edges": rows})})
        return {s.id: s.solo_s for s in simulate_any(G, p, launch="cuda_graph").spans}

    got = solos([("bf16", 32, 1024, 1024, 3.0)])
    for oid, t in table.items():
        assert got[oid] == pytest.approx(t + (3e-6 if oid in forks else 0.0), abs=1e-12), oid
    other = solos([("bf16", 16, 1024, 1024, 3.0)])
    for oid, t in table.items():
        assert other[oid] == pytest.approx(t + (1.18e-6 if oid in forks else 0.0), abs=1e-12), oid
    # rows alone (constant 0) still apply
    p = prof.model_copy(update={"launch": prof.launch.model_copy(
        update={"graph_cross_stream_edge_us": 0.0, "graph_fork_edges": [("bf16", 32, 1024, 1024, 2.0)]})})
    got = {s.id: s.solo_s for s in simulate_any(G, p, launch="cuda_graph").spans}
    assert got["up1@r0"] == pytest.approx(table["up1@r0"] + 2e-6, abs=1e-12)
