"""End to end on 4 CPU ranks (gloo), one torchrun launch: a pipeline whose stages all-gather and reduce-scatter
over the data-parallel group (schedules/pipeline_fsdp.yaml, p = 2 × dp = 2) runs under ``execute``, and
``--compare`` matches every op of the prediction by id; ops with ``graph:`` (a CUDA graph beside eager
collectives) run eagerly on CPU ranks, and the run says so."""

from __future__ import annotations

import json

import pytest
from exec_helpers import torchrun_batch

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

GRAPH = """\
schema_version: 1
name: graph_beside_eager
world_size: 4
ops:
  - {name: ar, kind: all_reduce, bytes: 4096}
  - {name: k0, kind: compute, bytes: 65536, graph: layer, deps: [ar]}
  - {name: k1, kind: compute, bytes: 65536, graph: layer}
  - {name: ar2, kind: all_reduce, bytes: 4096, deps: [k1]}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("stage_coll")
    (base / "graph.yaml").write_text(GRAPH)
    common = ["--iters", "2", "--warmup", "1", "--lean-iters", "0", "--timeout", "60", "--no-gantt", "--compare"]
    fsdp, graph = torchrun_batch(4, [
        ["execute", "schedules/pipeline_fsdp.yaml", "--set", "tokens=16", "--set", "hidden=16", *common,
         "--out", str(base / "fsdp")],
        ["execute", str(base / "graph.yaml"), *common, "--out", str(base / "graph")]])
    return base, fsdp, graph


def test_fsdp_stages_execute_and_compare_4_ranks(runs) -> None:
    base, r, _g = runs
    out = base / "fsdp"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    assert tl.world_size == 4
    m = 4
    for kind, n in (("all_gather", 2 * m), ("reduce_scatter", m)):  # per rank: one per F and B; one per B
        for rank in range(4):
            assert sum(1 for s in tl.spans if s.rank == rank and s.kind == kind) == n, (kind, rank)
    assert {s.stream for s in tl.spans if s.kind in ("all_gather", "reduce_scatter")} == {"fsdp"}
    by = tl.by_id()
    # a forward's GEMM ran after its all-gather had finished (its dependency)
    for rank in range(4):
        st = rank % 2
        for j in range(m):
            assert by[f"F{st}.{j}.fwd@r{rank}"].start_s >= by[f"F{st}.{j}.ag@r{rank}"].end_s
    cmp = json.loads((out / "compare" / "compare.json").read_text())
    assert cmp["match"]["mode"] == "id" and cmp["match"]["n_only_pred"] == 0 and cmp["match"]["n_only_meas"] == 0
    assert cmp["match"]["matched"] == len(tl.spans)


def test_graph_ops_run_eagerly_on_cpu_ranks_and_say_so(runs) -> None:
    base, _f, r = runs
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 ops of rank 0 name a CUDA graph (graph:); they run eagerly (CPU ranks have no CUDA graphs)" in r.stdout
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(base / "graph" / "timeline.json")
    by = tl.by_id()
    assert len(tl.spans) == 4 * 4
    for rank in range(4):
        assert by[f"ar@r{rank}"].end_s <= by[f"k0@r{rank}"].start_s <= by[f"k1@r{rank}"].start_s
        assert by[f"k1@r{rank}"].end_s <= by[f"ar2@r{rank}"].start_s
    cmp = json.loads((base / "graph" / "compare" / "compare.json").read_text())
    assert cmp["match"]["matched"] == len(tl.spans)
