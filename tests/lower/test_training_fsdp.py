"""``use_torch_fsdp2`` in the ``training:`` block (issue 36): torch FSDP2's all-gathers and reduce-scatters in the
order FSDP2 issues them, by hand on a 2-layer configuration (tp 1, pp 1, dp 2, one microbatch), and with tp 2
and two microbatches."""

from __future__ import annotations

from typing import Any

FSDP = """\
schema_version: 1
name: tiny_fsdp
world_size: 2
training:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: 2
  bf16: true
  untie_embeddings_and_output_weights: true
  use_torch_fsdp2: true
"""

#: Parameters of the units (tp 1): a layer 12h² + 13h = 49,984; the embedding V·h + s·h = 1024·64 + 32·64; the
#: output layer V·h with the final LayerNorm's 2h.
LAYER, EMB, OUT = 12 * 64 * 64 + 13 * 64, 1024 * 64 + 32 * 64, 1024 * 64 + 2 * 64


def _ops(text: str) -> list[Any]:
    from schedsim.api import lower_spec
    from schedsim.spec.loader import load_text

    return lower_spec(load_text(text)).ops()


def _phase(ops: list[Any], rank: int, prefix: str) -> dict[str, Any]:
    return {o.name.removeprefix(prefix): o for o in ops if o.rank == rank and o.name.startswith(prefix)}


def test_forward_all_gathers_prefetch_one_unit_ahead() -> None:
    """Forward of rank 0: the embedding's all-gather, then layer 0's (issued before the embedding computes), the
    embedding's kernels (the first waiting for its all-gather), layer 1's all-gather before layer 0's kernels
    (waiting for layer 0's all-gather and for the kernel before layer 0: FSDP2's copy-out event), and so on; each
    on stream ``fsdp_all_gather`` over the dp group (0, 1), the unit's parameters × 2 bytes (bf16)."""
    f = _phase(_ops(FSDP), 0, "F0.0.")
    names = list(f)
    assert names[:5] == ["fsdp_ag_embedding", "fsdp_ag_l0", "embedding", "embedding_dropout", "fsdp_ag_l1"]
    assert names[5] == "l0.ln1"
    at = names.index("fsdp_ag_output")
    assert (names[at - 1], names[at + 1]) == ("l0.bias_dropout_add2", "l1.ln1")
    assert names[-3:] == ["final_ln", "logits", "cross_entropy"]
    for unit, size, deps in (("embedding", EMB, ()), ("l0", LAYER, ("fsdp_ag_embedding",)),
                             ("l1", LAYER, ("fsdp_ag_l0", "embedding_dropout")),
                             ("output", OUT, ("fsdp_ag_l1", "l0.bias_dropout_add2"))):
        ag = f[f"fsdp_ag_{unit}"]
        assert (ag.kind, ag.stream, ag.group, ag.nbytes) == ("all_gather", "fsdp_all_gather", (0, 1), 2 * size)
        assert ag.deps == tuple(f"F0.0.{d}" for d in deps)
    for first, unit in (("embedding", "embedding"), ("l0.ln1", "l0"), ("l1.ln1", "l1"), ("logits", "output")):
        assert f[first].deps == (f"F0.0.fsdp_ag_{unit}",) and f[first].stream == "compute"
    assert sum(1 for n in names if n.startswith("fsdp_")) == 4


def test_backward_prefetches_the_previous_layer_and_reduce_scatters_after_its_gradients() -> None:
    """Backward: the output layer's all-gather first (it was freed after the forward), layer 1's issued before
    the output layer's kernels, layer 0's before layer 1's, the embedding's before layer 0's (the backward
    prefetch of the previous layer); each unit's reduce-scatter on stream ``fsdp_reduce_scatter`` right after its
    last weight-gradient kernel; then the optimizer on the rank's half of the parameters, no data-parallel
    reduction, no parameter all-gather and no gradient-buffer memset."""
    ops = _ops(FSDP)
    i = _phase(ops, 0, "B0.0.I.")
    names = list(i)
    assert names[:4] == ["cross_entropy_bwd", "fsdp_ag_output", "fsdp_ag_l1", "logits_dgrad"]
    assert i["fsdp_ag_output"].deps == ()
    assert i["fsdp_ag_l1"].deps == ("B0.0.I.fsdp_ag_output", "B0.0.I.cross_entropy_bwd")
    assert names[names.index("fsdp_ag_l0") - 1] == "final_ln_bwd"
    assert names[names.index("fsdp_ag_l0") + 1] == "l1.dropout2_bwd"
    assert i["l1.dropout2_bwd"].deps == ("B0.0.I.fsdp_ag_l1",)
    assert names[names.index("fsdp_ag_embedding") + 1] == "l0.dropout2_bwd"
    assert i["fsdp_ag_embedding"].deps == ("B0.0.I.fsdp_ag_l0", "B0.0.I.l1.residual1_bwd")
    assert i["embedding_dropout_bwd"].deps == ("B0.0.I.fsdp_ag_embedding",)
    w = _phase(ops, 0, "B0.0.W.")
    layer = ["fc2_wgrad", "fc1_wgrad", "proj_wgrad", "qkv_wgrad", "qkv_bias_grad"]
    assert list(w) == ["logits_wgrad", "fsdp_rs_output", *[f"l1.{n}" for n in layer], "fsdp_rs_l1",
                       *[f"l0.{n}" for n in layer], "fsdp_rs_l0", "embedding_wgrad", "fsdp_rs_embedding"]
    for unit, size, last in (("output", OUT, "logits_wgrad"), ("l1", LAYER, "l1.qkv_bias_grad"),
                             ("l0", LAYER, "l0.qkv_bias_grad"), ("embedding", EMB, "embedding_wgrad")):
        rs = w[f"fsdp_rs_{unit}"]
        assert (rs.kind, rs.stream, rs.group, rs.nbytes) == ("reduce_scatter", "fsdp_reduce_scatter", (0, 1),
                                                              2 * size)
        assert rs.deps == (f"B0.0.W.{last}",)
    tail = [o for o in ops if o.rank == 0 and not o.name.startswith(("F0.", "B0."))]
    n = (2 * LAYER + EMB + OUT) / 2  # the rank's shard of its parameters
    assert [o.name for o in tail] == ["optimizer_grad_copy", "optimizer_grad_norm_local", "optimizer_grad_norm",
                                      "optimizer_step", "optimizer_param_copy"]
    assert tail[0].deps == ("B0.0.W.fsdp_rs_embedding",)  # the last reduce-scatter of the stream
    assert [o.nbytes for o in tail] == [(2 + 4) * n, 4 * n, 4, 28 * n, 6 * n]
    assert tail[2].group == (0, 1)


def test_tp_and_microbatches() -> None:
    """tp 2, dp 2 (world 4), two microbatches: the units are split over tp (half the bytes, but the position
    embeddings'), the FSDP group is the dp group (0, 2) of rank 0, every microbatch all-gathers each unit in its
    forward and in its backward and reduce-scatters it (Megatron's FSDP2 wrapper has no ``no_sync``), and
    CUDA_DEVICE_MAX_CONNECTIONS is not forced to 1 (Megatron asks FSDP to run without it)."""
    from schedsim.api import lower_spec
    from schedsim.spec.loader import load_text

    text = FSDP.replace("world_size: 2", "world_size: 4").replace("global_batch_size: 2",
                                                                  "global_batch_size: 4\n  tp: 2")
    assert lower_spec(load_text(text)).max_connections is None
    ops = [o for o in _ops(text) if o.rank == 0]
    ags = [o for o in ops if o.kind == "all_gather" and o.name.split(".")[-1].startswith("fsdp_ag")]
    rss = [o for o in ops if o.kind == "reduce_scatter"]
    assert len(ags) == 2 * 2 * 4 and len(rss) == 2 * 4
    assert {o.group for o in ags + rss} == {(0, 2)}
    # the parameters of a TP rank: half of each, but the position embeddings (32·64), a layer's LayerNorms and
    # row-parallel biases (6·64) and the final LayerNorm (2·64), which every TP rank holds whole (Megatron-LM
    # LanguageModelEmbedding: "Position embedding (serial)"; RowParallelLinear's bias "not parallelized")
    for unit, size in (("l0", (LAYER - 6 * 64) / 2 + 6 * 64), ("embedding", 1024 * 64 / 2 + 32 * 64),
                       ("output", 1024 * 64 / 2 + 2 * 64)):
        assert {o.nbytes for o in ags if o.name.endswith(f"fsdp_ag_{unit}")} == {2 * size}


def test_one_data_parallel_rank_keeps_fsdp2_gradients() -> None:
    """dp·cp = 1 (world 1): FSDP2 still wraps the model (Megatron wraps it whatever the group's size), so no
    all-gather or reduce-scatter is left to issue, but the gradients stay in the parameters' dtype (bf16: the
    optimizer copies 2 + 4 bytes a parameter to its fp32 main gradients, as ``memory_per_rank``'s ``grads`` counts
    them) and no gradient-buffer memset follows the step (the FSDP2 wrapper's ``zero_grad_buffer`` does nothing)."""
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import memory_per_rank, training_plan

    text = FSDP.replace("world_size: 2", "world_size: 1").replace("global_batch_size: 2", "global_batch_size: 1")
    ops = _ops(text)
    assert not [o for o in ops if o.kind in ("all_gather", "reduce_scatter")]
    n = 2 * LAYER + EMB + OUT  # every parameter of the rank
    tail = [o for o in ops if not o.name.startswith(("F0.", "B0."))]
    assert [o.name for o in tail] == ["optimizer_grad_copy", "optimizer_grad_norm_local", "optimizer_step",
                                      "optimizer_param_copy"]
    assert [o.nbytes for o in tail] == [(2 + 4) * n, 4 * n, 28 * n, 6 * n]
    t = load_text(text).training
    assert t is not None
    assert memory_per_rank(t, training_plan(t, 1))["grads"] == 2 * n


def test_each_forward_s_first_all_gather_waits_for_the_compute_before_it() -> None:
    """FSDP2's root pre-forward makes the all-gather streams wait for the current stream (``_root_pre_forward``:
    "Wait for optimizer before implicitly prefetched all-gathers", ``all_gather_stream.wait_stream``), every
    microbatch: the second microbatch's first all-gather (the embedding's) waits for the first microbatch's last
    compute-stream kernel (the embedding's weight gradient, not its reduce-scatter after it), so it cannot run
    under that backward; the first microbatch's has no compute before it."""
    text = FSDP.replace("global_batch_size: 2", "global_batch_size: 4")
    ops = {o.name: o for o in _ops(text) if o.rank == 0}
    assert ops["F0.0.fsdp_ag_embedding"].deps == ()
    assert ops["F0.1.fsdp_ag_embedding"].deps == ("B0.0.W.embedding_wgrad",)
    assert ops["F0.1.fsdp_ag_l0"].deps == ("F0.1.fsdp_ag_embedding",)
    assert ops["B0.1.I.fsdp_ag_output"].deps == ()  # the backward's: no such wait
