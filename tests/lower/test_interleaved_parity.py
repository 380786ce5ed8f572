"""The same interleaved 1F1B (pp 4, v 2, m 8, one 1024-wide layer a chunk) through a ``pipeline:`` block with a
``transformer:`` stage and through a ``training:`` block: the same per-rank order of pipeline actions (forward,
input and weight passes, sends and recvs by stage and microbatch), the same waits between them (Megatron's
``overlap_p2p_comm``: a recv after the compute issued before it, a pass after every p2p op of the previous call of
its direction, in both emitters), the same compute per rank, and the last pipeline op of each rank ending at the
same time within 0.1 %. The makespans differ by what only the training block lowers after the pipeline: the
optimizer step with its gradient-norm and found-inf all-reduces, the embedding gradients and their zeroing."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.api import lower_spec
from schedsim.hardware.profile import load_profile
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

PIPE = """schema_version: 1
name: pp
world_size: 4
pipeline:
  schedule: interleaved_1f1b
  p: 4
  m: 8
  v: 2
  transformer: {layers: 8, hidden: 1024, ffn: 4096, heads: 16, seq: 1024, micro_batch: 1, dtype: fp16, vocab: 51200}
"""
TRAIN = """schema_version: 1
name: tr
world_size: 4
training: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, seq_length: 1024, vocab_size: 51200,
           fp16: true, micro_batch_size: 1, global_batch_size: 8, tp: 1, pp: 4,
           num_layers_per_virtual_pipeline_stage: 1}
"""
P2P = ("SEND_F", "SEND_B", "RECV_F", "RECV_B")


def _keys(prog) -> dict[int, tuple]:
    """Each pipeline op's action: (kind or phase, stage, microbatch)."""
    out = {}
    for i in range(prog.N):
        d = dict(prog.tagsets[int(prog.tags_id[i])])
        if "stage" in d and "pp_op" in d:
            out[i] = (d["pp_op"] if d["pp_op"] in P2P else d.get("phase", d["pp_op"]), d["stage"], d["mb"])
    return out


def _order(prog, keys) -> list[list[tuple]]:
    per = []
    for r in range(4):
        seq: list[tuple] = []
        for i in np.flatnonzero(prog.rank == r).tolist():
            if i in keys and (not seq or seq[-1] != keys[i]):
                seq.append(keys[i])
        per.append(seq)
    return per


def _waits(prog, keys) -> dict[tuple, set]:
    out: dict[tuple, set] = {}
    for s, t in np.asarray(prog.dep_edges).tolist():
        if s in keys and t in keys and keys[s] != keys[t]:
            out.setdefault((int(prog.rank[t]), keys[t]), set()).add(keys[s])
    return out


@pytest.fixture(scope="module")
def both():
    pp, tr = lower_spec(load_text(PIPE)), lower_spec(load_text(TRAIN))
    prof = load_profile("dgx_a100")
    return (pp, _keys(pp), simulate(pp, prof)), (tr, _keys(tr), simulate(tr, prof))


def test_same_order_and_waits(both) -> None:
    (pp, kp, _), (tr, kt, _) = both
    assert _order(pp, kp) == _order(tr, kt)
    assert len(_order(pp, kp)[1]) == 112  # 16 F, 16 B, their 80 sends and recvs on a middle rank
    wp, wt = _waits(pp, kp), _waits(tr, kt)
    assert wp == wt and len(wp) > 400


def test_same_compute_and_pipeline_end(both) -> None:
    for r in range(4):
        got = []
        for _prog, k, tl in both:
            c = tl.columns
            rows = [i for i in np.flatnonzero(c.rank == r).tolist() if i in k]
            comp = sum(c.end_s[i] - c.start_s[i] for i in rows if k[i][0] not in P2P)
            got.append((comp, max(c.end_s[i] for i in rows)))
        assert got[0][0] == pytest.approx(got[1][0], rel=1e-9)
        assert got[0][1] == pytest.approx(got[1][1], rel=1e-3)
    (_, _, tlp), (_, kt, tlt) = both
    c = tlt.columns
    tail = [i for i in range(len(c.id)) if i not in kt]
    assert tlt.makespan_s > tlp.makespan_s
    assert max(c.end_s[i] for i in tail) == pytest.approx(tlt.makespan_s)  # the step's tail ends it
