"""Static stage memory: parameters, gradients, optimizer state and embedding/LM-head placement."""

from __future__ import annotations

import pytest
import yaml

from schedsim.graph.build import build_graph
from schedsim.pipeline.memory import BYTES_PER_PARAM, static_memory
from schedsim.spec.loader import load_text
from schedsim.spec.pipeline_block import stage_params

# h=8, f=32: per layer the weights 4h² (QKV, projection) + h·f + f·h (MLP) = 768, the biases 3h + h (QKV,
# projection) + f + h (fc1, fc2) = 72 and the two LayerNorms 4h = 32: 872 parameters (Megatron-LM's GPT layer)
T = {"layers": 4, "hidden": 8, "ffn": 32, "heads": 2, "seq": 4, "vocab": 16}
EMB = 16 * 8 + 4 * 8   # word + learned position embedding
HEAD = 16 * 8 + 2 * 8  # output layer + final LayerNorm


def info(schedule: str, **extra):
    d = {"schema_version": 1, "name": "m", "world_size": 2,
         "pipeline": {"schedule": schedule, "p": 2, "m": 4, "transformer": {**T, **extra}}}
    return build_graph(load_text(yaml.safe_dump(d))).graph["pipeline"]["static_memory"]


def test_zb_h1_puts_embedding_and_head_on_first_and_last_rank():
    mem = info("zb_h1")
    assert mem["params"] == {0: 2 * 872 + EMB, 1: 2 * 872 + HEAD}
    assert mem["bytes"] == {r: n * 16 for r, n in mem["params"].items()}


def test_zbv_puts_both_on_rank_0_so_the_peaks_differ():
    mem = info("zbv")  # 4 stages of 1 layer; rank 0 runs stages 0 and 3
    assert mem["params"] == {0: 2 * 872 + EMB + HEAD, 1: 2 * 872}
    assert max(mem["bytes"].values()) > max(info("zb_h1")["bytes"].values())


def test_without_vocab_only_layers_count():
    assert info("1f1b", vocab=None)["params"] == {0: 1744, 1: 1744}


@pytest.mark.parametrize("stages,ranks", [(4, {0: 0, 1: 1, 2: 1, 3: 0}), (4, {0: 0, 1: 1, 2: 0, 3: 1})])
def test_static_memory_sums_stages_per_rank(stages, ranks):
    ps = stage_params(stages, 3, 10, hidden=2, seq=3, vocab=5)
    mem = static_memory(ps, ranks)
    assert sum(mem.params.values()) == stages * 30 + (5 * 2 + 3 * 2) + (5 * 2 + 2 * 2)
    assert BYTES_PER_PARAM == 2 + 2 + 4 + 4 + 4


@pytest.mark.parametrize("swiglu", [False, True])
def test_a_layer_counts_its_biases_and_layernorms_as_the_training_block_does(swiglu):
    # break18: the block's transformer runs the QKV bias add, bias-dropout-adds, bias-GeLU and the bias gradients
    # (Megatron-LM's GPT layer, linear biases on), but counted 4h² + h·f1 + f·h + 4h (the LayerNorms): no linear
    # bias, so its static memory, gradient all-reduce (2 B/param) and optimizer step (18 B/param) were 5h + f1
    # parameters a layer short of the training: block's count of the same layer (whose docstring says they agree)
    from schedsim.spec.pipeline_block import TransformerSpec, _params_per_layer
    from schedsim.spec.training_block import TrainingSpec, training_plan
    from schedsim.spec.training_block import _params_per_layer as training_params

    h, f = 8, 32
    f1 = 2 * f if swiglu else f
    want = 4 * h * h + h * f1 + f * h + (3 * h + h + f1 + h) + 4 * h  # weights, biases, LayerNorms
    assert want == (872 if not swiglu else 872 + 8 * 32 + 32)
    t = TransformerSpec.model_validate({**T, "swiglu": swiglu})
    assert _params_per_layer(t) == want
    ts = TrainingSpec.model_validate({"num_layers": 4, "hidden_size": h, "ffn_hidden_size": f,
                                      "num_attention_heads": 2, "seq_length": 4, "vocab_size": 16,
                                      "micro_batch_size": 1, "swiglu": swiglu})
    assert training_params(ts, training_plan(ts, 1)) == want


@pytest.mark.parametrize("extra,want", [
    ({}, 1024 * 34 + 5 * 4 * 16 * 16),  # s·b·h·(34 + 5as/h): sbh 1,024, a·s²·b 1,024
    ({"flash_attention": True}, 1024 * 34),  # FlashAttention stores no a·s²·b tensor
    ({"ffn": 128}, 1024 * (18 + 4 * 128 // 64) + 5 * 1024),  # the MLP's two s·b·f tensors: 4f/h per sbh, not 16
    ({"dtype": "fp32"}, 1024 * (16 + 2 + 16 + 32) + 9 * 1024),  # r = 2: sbh·(8r + 2 + 24r) + a·s²·b·(4r + 1)
])
def test_a_layers_stored_activations_are_the_training_blocks(extra, want):
    # break18: the block took s·b·h·(34 + 5as/h) whatever its layer: with flash_attention (whose kernels store no
    # scores), an ffn other than 4h or fp32 activations it disagreed with the training: block's count of the same
    # layer (act_bytes_per_layer, tp 1, no recomputation)
    from schedsim.spec.pipeline_block import TransformerSpec, _act_memory_per_layer
    from schedsim.spec.training_block import TrainingSpec, act_bytes_per_layer, training_plan

    t = TransformerSpec.model_validate({"layers": 2, "hidden": 64, "ffn": 256, "heads": 4, "seq": 16, **extra})
    assert _act_memory_per_layer(t) == want
    ts = TrainingSpec.model_validate({
        "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": t.ffn, "num_attention_heads": 4, "seq_length": 16,
        "vocab_size": 16, "micro_batch_size": 1, "use_flash_attn": t.flash_attention,
        **({"bf16": True} if t.dtype != "fp32" else {})})
    assert act_bytes_per_layer(ts, training_plan(ts, 1), None) == want
