"""End to end on 4 CPU ranks (gloo): a pipeline whose stages all-gather and reduce-scatter over the data-parallel
group (schedules/pipeline_fsdp.yaml, p = 2 × dp = 2) runs under ``execute``, and ``--compare`` matches every
op of the prediction by id."""

from __future__ import annotations

import json

import pytest
from exec_helpers import torchrun

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


def test_fsdp_stages_execute_and_compare_4_ranks(tmp_path) -> None:
    out = tmp_path / "fsdp"
    r = torchrun(4, ["execute", "schedules/pipeline_fsdp.yaml", "--set", "tokens=16", "--set", "hidden=16",
                     "--iters", "2", "--warmup", "1", "--lean-iters", "0", "--timeout", "60", "--no-gantt",
                     "--compare", "--out", str(out)], timeout=300)
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
