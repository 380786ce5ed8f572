"""End to end on 4 CPU ranks (gloo), one torchrun launch: an interleaved pipeline (p = 2, v = 2, m = 4) with two
data-parallel replicas and ``overlap_grad_reduce`` runs under ``execute``: each rank issues its two chunk
all-reduces on ``dp_comm`` after the chunk's last backward, and ``--compare`` matches every op of the prediction
by id."""

from __future__ import annotations

import json

import pytest
from exec_helpers import torchrun_batch

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

CASE = """\
schema_version: 1
name: chunk_grads
world_size: 4
pipeline:
  schedule: interleaved_1f1b
  p: 2
  v: 2
  m: 4
  data_parallel: 2
  overlap_grad_reduce: true
  grad_allreduce_bytes: 65536
  activation_bytes: 4096
  stage:
    forward: [{name: f, kind: compute, bytes: 65536}]
    backward_input: [{name: i, kind: compute, bytes: 65536}]
    backward_weight: [{name: w, kind: compute, bytes: 65536}]
"""


def test_chunk_reductions_execute_and_compare_4_ranks(tmp_path) -> None:
    (tmp_path / "c.yaml").write_text(CASE)
    out = tmp_path / "run"
    (r,) = torchrun_batch(4, [["execute", str(tmp_path / "c.yaml"), "--iters", "2", "--warmup", "1",
                               "--lean-iters", "0", "--timeout", "60", "--no-gantt", "--compare", "--out", str(out)]])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    by = tl.by_id()
    for rank in range(4):
        p_ = rank % 2
        c1, c0 = by[f"dp_grad_allreduce_r{p_}_c1@r{rank}"], by[f"dp_grad_allreduce_r{p_}_c0@r{rank}"]
        assert c1.stream == c0.stream == "dp_comm"
        assert c1.start_s >= by[f"B{p_ + 2}.3.W.w@r{rank}"].end_s  # after the chunk's last backward
        assert c0.start_s >= by[f"B{p_}.3.W.w@r{rank}"].end_s and c0.start_s >= c1.start_s
    cmp = json.loads((out / "compare" / "compare.json").read_text())
    assert cmp["match"]["mode"] == "id" and cmp["match"]["n_only_pred"] == 0 and cmp["match"]["n_only_meas"] == 0
    assert cmp["match"]["matched"] == len(tl.spans)
