"""The column-parallel linears' backward as Megatron-LM issues it in the ``training:`` block (issue 36):
``LinearWithGradAccumulationAndAsyncCommunication.backward`` with ``CUDA_DEVICE_MAX_CONNECTIONS=1``. With sequence
parallelism the input is all-gathered again for the weight gradient, beside the data-gradient GEMM, and the data
gradient's reduce-scatter runs beside the weight-gradient GEMM; without it the data gradient's all-reduce does.
Order, streams, waits and sizes by hand on the tiny configuration of ``test_training_block``, and the overlap on
the timeline; ``async_tensor_model_parallel_allreduce: false``; ``scatter_gather_tensors_in_pipeline``'s pipeline
messages split over the TP ranks."""

from __future__ import annotations

from tests.spec.test_training_block import TINY, _edit, _ops

SP = _edit("pp: 2", "pp: 2\n  sequence_parallel: true")


def _phase(ops: list, rank: int, prefix: str) -> dict:  # type: ignore[type-arg]
    return {o.name.removeprefix(prefix): o for o in ops if o.rank == rank and o.name.startswith(prefix)}


def test_sequence_parallel_backward_by_hand() -> None:
    """Rank 4 (last stage, TP group (4, 5)), microbatch 0. fc1 and QKV: the all-gather of the linear's input
    (s·b·h·2 = 32·64·2 bytes, the nccl-tests size) on stream ``tp_comm`` after the kernel before the data
    gradient, the data-gradient GEMM, its reduce-scatter on ``tp_comm`` after it, the weight-gradient GEMM waiting
    for the gathered input (and QKV's bias gradient), then the next kernel waiting for the reduce-scatter. The
    output layer alike. W keeps only the row-parallel linears' weight gradients."""
    from schedsim.api import lower_spec
    from schedsim.spec.loader import load_text

    assert lower_spec(load_text(SP)).max_connections == 1  # Megatron's CUDA_DEVICE_MAX_CONNECTIONS with tp > 1
    ops = _ops(SP)
    i = _phase(ops, 4, "B1.0.I.")
    names = list(i)
    at = names.index("l0.fc1_bias_grad")
    assert names[at:at + 6] == ["l0.fc1_bias_grad", "l0.tp_ag_fc1_wgrad", "l0.fc1_dgrad", "l0.tp_rs_fc1_dgrad",
                                "l0.fc1_wgrad", "l0.ln2_bwd"]
    at = names.index("l0.qkv_grad_cat")
    assert names[at:at + 7] == ["l0.qkv_grad_cat", "l0.tp_ag_qkv_wgrad", "l0.qkv_dgrad", "l0.tp_rs_qkv_dgrad",
                                "l0.qkv_wgrad", "l0.qkv_bias_grad", "l0.ln1_bwd"]
    assert names[:6] == ["cross_entropy_bwd", "tp_ag_logits_wgrad", "logits_dgrad", "tp_rs_logits_dgrad",
                         "logits_wgrad", "final_ln_bwd"]
    for pre, lin, before, nxt in (("l0.", "fc1", "fc1_bias_grad", "ln2_bwd"), ("l0.", "qkv", "qkv_grad_cat", "ln1_bwd"),
                                  ("", "logits", "cross_entropy_bwd", "final_ln_bwd")):
        ag, rs = i[f"{pre}tp_ag_{lin}_wgrad"], i[f"{pre}tp_rs_{lin}_dgrad"]
        assert (ag.kind, ag.stream, ag.group, ag.nbytes) == ("all_gather", "tp_comm", (4, 5), 32 * 64 * 2)
        assert (rs.kind, rs.stream, rs.group, rs.nbytes) == ("reduce_scatter", "tp_comm", (4, 5), 32 * 64 * 2)
        assert ag.deps == (f"B1.0.I.{pre}{before}",) and rs.deps == (f"B1.0.I.{pre}{lin}_dgrad",)
        assert i[f"{pre}{lin}_wgrad"].deps == (ag.name,) and i[f"{pre}{nxt}"].deps == (rs.name,)
        assert i[f"{pre}{lin}_dgrad"].stream == i[f"{pre}{lin}_wgrad"].stream == "compute"
    # the row-parallel linears' backward keeps its synchronous all-gather of the gradient (the forward's
    # reduce-scatter's conjugate) on the compute stream, and their weight gradients stay in W
    assert (i["l0.tp_ag_fc2_dgrad"].stream, i["l0.tp_ag_proj_dgrad"].stream) == ("compute", "compute")
    w = [n.removeprefix("B1.0.W.") for n in _phase(ops, 4, "B1.0.W.")]
    assert w == ["l0.fc2_wgrad", "l0.proj_wgrad"]  # one layer a stage
    # every weight gradient is still there once: the layer's 4 GEMMs and the QKV bias gradient, and the output layer
    every = [o.name for o in ops if o.rank == 4 and o.name.startswith("B1.0.") and o.kind != "all_gather"
             and o.name.endswith(("wgrad", "qkv_bias_grad"))]
    assert len(every) == 5 + 1 and len(set(every)) == len(every)


def test_without_sequence_parallelism_the_all_reduce_is_asynchronous() -> None:
    """No SP: no all-gather in the backward; the data gradient's all-reduce (``async_grad_allreduce``) on
    ``tp_comm`` after the data-gradient GEMM, the weight gradient beside it, the next kernel waiting for it."""
    ops = _ops(TINY)
    i = _phase(ops, 0, "B0.0.I.")
    assert not [o for o in i.values() if o.kind == "all_gather"]
    names = list(i)
    at = names.index("l0.fc1_dgrad")
    assert names[at:at + 4] == ["l0.fc1_dgrad", "l0.tp_ar_fc1_dgrad", "l0.fc1_wgrad", "l0.ln2_bwd"]
    ar = i["l0.tp_ar_fc1_dgrad"]
    assert (ar.kind, ar.stream, ar.deps, ar.nbytes) == ("all_reduce", "tp_comm", ("B0.0.I.l0.fc1_dgrad",), 32 * 64 * 2)
    assert i["l0.fc1_wgrad"].deps == () and i["l0.ln2_bwd"].deps == ("B0.0.I.l0.tp_ar_fc1_dgrad",)


def test_buckets_still_hold_the_output_layer() -> None:
    """With overlap_grad_reduce the output layer's weight gradient runs in I; its parameters still go into the
    stage's gradient buckets: the buckets of every stage add up to the parameters of the TP rank."""
    from schedsim.lower.table import Table
    from schedsim.lower.training import _Ranks, _stage_params
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import training_plan

    spec = load_text(_edit("pp: 2", "pp: 2\n  sequence_parallel: true\n  overlap_grad_reduce: true"))
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    ranks = _Ranks(spec, Table(), t, plan, 2)
    params = _stage_params(t, plan, 2)
    for s in (0, 1):
        assert sum(v for _, v in ranks.buckets(s, True).values()) == params[s]


def test_collectives_overlap_their_gemms_on_the_timeline() -> None:
    """On dgx_a100 (tp 2, SP, h 4096, s 4096): the all-gather runs while the data-gradient GEMM does, the
    reduce-scatter while the weight-gradient GEMM does, and the next kernel starts after the reduce-scatter."""
    from schedsim.api import lower_spec
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    text = SP.replace("hidden_size: 64", "hidden_size: 4096").replace("seq_length: 32", "seq_length: 4096")
    tl = simulate(lower_spec(load_text(text)), load_profile("dgx_a100"))
    sp = {s.name.removeprefix("B1.0.I.l0."): s for s in tl.spans if s.rank == 4 and s.name.startswith("B1.0.I.l0.")}
    for lin in ("fc1", "qkv"):
        ag, dg, rs, wg = sp[f"tp_ag_{lin}_wgrad"], sp[f"{lin}_dgrad"], sp[f"tp_rs_{lin}_dgrad"], sp[f"{lin}_wgrad"]
        assert ag.start_s < dg.end_s and dg.start_s < ag.end_s
        assert rs.start_s < wg.end_s and wg.start_s < rs.end_s
        assert rs.start_s >= dg.end_s and wg.start_s >= ag.end_s
    assert sp["ln1_bwd"].start_s >= sp["tp_rs_qkv_dgrad"].end_s


def test_no_async_allreduce_keeps_it_on_the_compute_stream() -> None:
    """``async_tensor_model_parallel_allreduce: false`` (``--no-async-tensor-model-parallel-allreduce``, and
    Megatron-LM before late 2021): the all-reduce on the compute stream right after the data-gradient GEMM, the
    weight gradients all in W; with sequence parallelism the flag changes nothing (Megatron turns it off there,
    the linear's own sequence-parallel path being asynchronous)."""
    ops = _ops(_edit("pp: 2", "pp: 2\n  async_tensor_model_parallel_allreduce: false"))
    i = _phase(ops, 0, "B0.0.I.")
    names = list(i)
    at = names.index("l0.fc1_dgrad")
    assert names[at:at + 3] == ["l0.fc1_dgrad", "l0.tp_ar_fc1_dgrad", "l0.ln2_bwd"]
    assert i["l0.tp_ar_fc1_dgrad"].stream == "compute" and not [o for o in i.values() if o.stream == "tp_comm"]
    assert [n.removeprefix("B0.0.W.") for n in _phase(ops, 0, "B0.0.W.")][:4] == \
        ["l0.fc2_wgrad", "l0.fc1_wgrad", "l0.proj_wgrad", "l0.qkv_wgrad"]
    sp = _ops(SP.replace("pp: 2\n", "pp: 2\n  async_tensor_model_parallel_allreduce: false\n"))
    assert [o.name for o in sp] == [o.name for o in _ops(SP)]


def test_scatter_gather_splits_pipeline_messages_over_tp() -> None:
    """``scatter_gather_tensors_in_pipeline`` (Megatron-LM 2021-2023, no sequence parallelism): each TP rank sends
    1/tp of the s·b·h·2 = 4096-byte activation (2048 bytes), and the receiving stage's phase starts with the TP
    all-gather of the whole activation (4096 bytes, the nccl-tests size) waiting for the recv; the first stage
    gathers nothing in its forward and the last nothing in its backward."""
    ops = _ops(_edit("pp: 2", "pp: 2\n  scatter_gather_tensors_in_pipeline: true"))
    assert {o.nbytes for o in ops if o.kind in ("send", "recv")} == {32 * 64 * 2 / 2}
    f1 = [o for o in ops if o.rank == 4 and o.name.startswith("F1.0.")]
    assert (f1[0].name, f1[0].kind, f1[0].group, f1[0].nbytes, f1[0].stream) == \
        ("F1.0.tp_pp_gather", "all_gather", (4, 5), 32 * 64 * 2, "compute")
    assert f1[0].deps == ("recvF1.0",)
    i0 = [o for o in ops if o.rank == 0 and o.name.startswith("B0.0.I.")]
    assert i0[0].name == "B0.0.I.tp_pp_gather_bwd" and i0[0].nbytes == 32 * 64 * 2
    assert i0[0].deps == ("recvB0.0", "sendF0.1")  # and the batch's send, as any first kernel after a batch
    assert not [o for o in ops if o.name in ("F0.0.tp_pp_gather", "B1.0.I.tp_pp_gather_bwd")]
    # off (Megatron Core's default) and under sequence parallelism: whole (or s/tp) messages, no gather
    assert {o.nbytes for o in _ops(TINY) if o.kind == "send"} == {32 * 64 * 2}
    sp = _ops(SP.replace("pp: 2\n", "pp: 2\n  scatter_gather_tensors_in_pipeline: true\n"))
    assert not [o for o in sp if "pp_gather" in o.name]


def test_sequence_parallel_embedding_backward_gathers_its_gradient() -> None:
    """With SP the embedding's forward reduce-scatter (``tp_embedding``) has an all-gather of the gradient as its
    backward (Megatron's ``_ReduceScatterToSequenceParallelRegion``), s·b·h·2 bytes on the compute stream after the
    embedding dropout's backward, before the lookup's weight gradient; without SP the all-reduce's backward is the
    identity."""
    i = list(_phase(_ops(SP), 0, "B0.0.I.").values())
    assert [(o.name, o.kind, o.nbytes, o.stream) for o in i[-2:]] == [
        ("B0.0.I.embedding_dropout_bwd", "compute", 32 / 2 * 64 * 5, "compute"),
        ("B0.0.I.tp_embedding_bwd", "all_gather", 32 * 64 * 2, "compute")]
    assert not [o for o in _ops(TINY) if "tp_embedding_bwd" in o.name]
