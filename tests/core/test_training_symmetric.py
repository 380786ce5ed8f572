"""A training step lowered for one representative rank per class of ranks that run alike
(:func:`schedsim.lower.training.represented_ranks`) predicts what the lowering of every rank predicts: the same
makespan, the same start and end of every represented op, bit for bit, and the same metrics (per rank, totals,
pipeline bubble and memory, the training report's exposed communication by kind), on configurations small enough
to simulate in full: tp, pp, dp, virtual stages, cp, experts with and without capacity, tp_comm_overlap, full
recompute, groups within one node and across nodes (``dgx_h100``: shared NICs, max-min)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from schedsim.api import predict
from schedsim.errors import GraphError
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.training import rank_classes, represented_ranks, symmetric_exact
from schedsim.report.training import training_report
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_text

BASE = """\
schema_version: 1
name: tiny
world_size: {world}
training:
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 8
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: {gbs}
  tp: {tp}
  pp: {pp}
  bf16: true
"""

DISTOPT = "  sequence_parallel: true\n  use_distributed_optimizer: true\n  overlap_grad_reduce: true\n"
MOE = "  sequence_parallel: true\n  num_experts: 4\n  expert_model_parallel_size: 2\n  moe_router_topk: 2\n"

#: name -> (world, tp, pp, global batch, extra block lines, ranks the symmetric lowering keeps)
CASES: dict[str, tuple[int, int, int, int, str, int]] = {
    "tp2_pp2_dp2": (8, 2, 2, 8, "", 2),
    "across_nodes_dp8": (32, 4, 2, 32, DISTOPT + "  overlap_param_gather: true\n", 2),
    "tp8_across_nodes": (64, 8, 2, 32, DISTOPT, 2),
    "interleaved": (16, 2, 2, 16, "  num_layers_per_virtual_pipeline_stage: 1\n  overlap_grad_reduce: true\n", 2),
    "cp2": (32, 2, 2, 16, "  cp: 2\n", 4),
    "tp_comm_overlap": (16, 2, 2, 8, "  sequence_parallel: true\n  tp_comm_overlap: true\n", 4),
    "experts": (16, 2, 2, 8, MOE, 2),
    "experts_at_capacity": (16, 2, 2, 8, MOE + "  moe_expert_capacity_factor: 1.5\n", 8),
    "full_recompute_pp4": (16, 1, 4, 16, "  recompute_granularity: full\n  recompute_method: uniform\n"
                                         "  recompute_num_layers: 1\n", 4),
}


def _text(case: str) -> str:
    world, tp, pp, gbs, extra, _n = CASES[case]
    return BASE.format(world=world, tp=tp, pp=pp, gbs=gbs) + extra


def _metrics(run: Any) -> dict[str, Any]:
    d = run.metrics.to_dict()
    d.pop("critical_path")  # op ids: ties between ranks of one class pick another rank's op (the same times)
    return d


@pytest.mark.parametrize("case", sorted(CASES))
def test_representatives_predict_what_every_rank_predicts(case: str) -> None:
    text = _text(case)
    full = predict(load_text(text), "dgx_h100", full_ranks=True)
    sym = predict(load_text(text), "dgx_h100")
    world = full.program.world_size
    assert full.program.represented == ()
    assert len(sym.program.represented) == CASES[case][5]
    assert sym.program.N * world == full.program.N * len(sym.program.represented)
    assert sym.timeline.makespan_s == full.timeline.makespan_s  # tolerance 0
    fc, sc = full.timeline.columns, sym.timeline.columns
    at = {i: k for k, i in enumerate(full.program.ids())}
    rows = np.array([at[i] for i in sym.program.ids()])
    np.testing.assert_array_equal(np.asarray(sc.start_s), np.asarray(fc.start_s)[rows])
    np.testing.assert_array_equal(np.asarray(sc.end_s), np.asarray(fc.end_s)[rows])
    assert _metrics(sym) == _metrics(full)
    assert sorted(sym.metrics.ranks) == list(range(world))
    prof = load_profile("dgx_h100")
    spec = load_text(text)
    assert training_report(spec, sym.timeline, prof).to_dict() == training_report(spec, full.timeline,
                                                                                  prof).to_dict()
    assert sym.timeline.meta["represented"] == {"ranks": list(sym.program.represented), "of": world}


def test_classes_follow_megatron_rank_order() -> None:
    """tp fastest, then cp, dp, pp (Megatron's tp-cp-ep-dp-pp): TP2 x CP2 x DP2 x PP2 on 16 ranks keeps tp 0 and
    dp 0 of every (cp, pp): ranks 0, 2 (cp 1), 8, 10 (pp 1)."""
    spec = load_text(BASE.format(world=16, tp=2, pp=2, gbs=8) + "  cp: 2\n")
    assert represented_ranks(spec) == (0, 2, 8, 10)
    assert rank_classes(spec).tolist() == [0, 0, 2, 2, 0, 0, 2, 2, 8, 8, 10, 10, 8, 8, 10, 10]


def test_shared_nics_simulate_every_rank() -> None:
    """Two GPUs on one NIC: the full lowering shares it between two ranks of one class, which the representative
    alone would not, so predict lowers every rank there."""
    prof = load_profile("dgx_h100")
    assert symmetric_exact(prof)
    topo = prof.topology
    assert topo.nics is not None
    nics = topo.nics.model_copy(update={"per_node": 4, "gpu_to_nic": [0, 0, 1, 1, 2, 2, 3, 3]})
    shared = prof.model_copy(update={"topology": topo.model_copy(update={"nics": nics})})
    assert not symmetric_exact(shared)
    run = predict(load_text(_text("across_nodes_dp8")), shared)
    assert run.program.represented == ()
    assert "represented" not in run.timeline.meta


def test_the_op_list_loop_refuses_a_symmetric_program() -> None:
    prog = lower(load_text(_text("tp2_pp2_dp2")), symmetric=True)
    assert prog.represented == (0, 4)
    with pytest.raises(GraphError, match="symmetric Program"):
        simulate(prog, load_profile("dgx_h100"), gpu_model="replay")
