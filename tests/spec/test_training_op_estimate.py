"""The loader's op estimate of a ``training:`` block (:func:`schedsim.spec.limits._training_ops`, which
``check`` and ``schedsim search --max-ops`` refuse by before lowering) against the real op count of the lowered
Program over a grid of small configurations: never below it (it guards the work before doing it), and within
12% of it (the per-step tail of these tiny steps, a few microbatches each, is counted at its most)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from test_training_block import TINY

from schedsim.api import lower_spec
from schedsim.spec.limits import _training_ops
from schedsim.spec.loader import load_text

RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
MOE = {"sequence_parallel": True, "num_experts": 4, "expert_model_parallel_size": 2}
GRID: list[tuple[int, dict[str, Any]]] = [
    (8, {"tp": 2, "pp": 2}),
    (8, {"tp": 2, "pp": 2, "sequence_parallel": True}),
    (8, {"tp": 2, "pp": 2, "num_layers": 4, "num_layers_per_virtual_pipeline_stage": 1,
         "scatter_gather_tensors_in_pipeline": True}),
    (8, {"tp": 2, "pp": 2, "num_layers": 4, "num_layers_per_virtual_pipeline_stage": 1}),
    (8, {"tp": 2, "pp": 2, **RECOMPUTE}),
    (8, {"tp": 2, "pp": 2, "cp": 2, "recompute_granularity": "selective"}),
    (8, {"tp": 2, "pp": 1, "use_distributed_optimizer": True, "overlap_grad_reduce": True,
         "overlap_param_gather": True}),
    (4, {"tp": 4, "global_batch_size": 1, "sequence_parallel": True, "tp_comm_overlap": True}),
    (8, {"tp": 2, "pp": 2, "sequence_parallel": True, "tp_comm_overlap": True, **RECOMPUTE}),
    (8, {"tp": 2, "cp": 4, "global_batch_size": 2}),
    (12, {"tp": 2, "pp": 2, "cp": 3, "seq_length": 48, "use_flash_attn": True, "num_query_groups": 2}),
    (8, {"tp": 2, "pp": 2, **MOE, **RECOMPUTE}),
    (8, {"tp": 1, "num_experts": 8, "expert_model_parallel_size": 8, "global_batch_size": 8}),
    (8, {"tp": 1, "pp": 2, "num_experts": 4, "expert_model_parallel_size": 2, "use_distributed_optimizer": True}),
    (8, {"tp": 1, "pp": 2, "num_experts": 4, "expert_model_parallel_size": 2, "use_distributed_optimizer": True,
         "overlap_grad_reduce": True, "overlap_param_gather": True}),
    (8, {"tp": 1, "pp": 2, "use_flash_attn": True}),
    (8, {"tp": 2, "pp": 2, "attention_dropout": 0.0, "hidden_dropout": 0.0}),
    (8, {"tp": 1, "pp": 8, "num_layers": 8, "global_batch_size": 16}),
    (16, {"tp": 2, "pp": 4, "num_layers": 8, "global_batch_size": 8, "use_flash_attn": True, "swiglu": True}),
]


@pytest.mark.parametrize(("world", "block"), GRID, ids=[str(i) for i in range(len(GRID))])
def test_estimate_bounds_the_real_op_count_tightly(world: int, block: dict[str, Any]) -> None:
    doc = yaml.safe_load(TINY)
    doc["world_size"] = world
    t = doc["training"]
    del t["tp"], t["pp"]
    t.update(block)
    real = lower_spec(load_text(yaml.safe_dump(doc))).N
    est = _training_ops(t, world)
    assert real <= est <= 1.12 * real
