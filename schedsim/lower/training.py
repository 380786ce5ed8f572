"""Lowering of a ``training:`` block (:mod:`schedsim.spec.training_block`) into every rank's ops.

One Megatron-LM training step, per global rank (Megatron's rank order ``tp-cp-ep-dp-pp``, tp fastest:
:meth:`~schedsim.spec.training_block.TrainingPlan.rank`):

* **pipeline**: the order of Megatron's ``forward_backward_pipelining_without_interleaving`` (1F1B) or, with
  ``num_layers_per_virtual_pipeline_stage``, ``..._with_interleaving``, from the pipeline block's generators and
  p2p placement (:func:`schedsim.lower.pipeline_plan.plan_of`, :mod:`schedsim.lower.pipeline_emitter`), the
  pipeline peers being the ranks that differ only in their pp coordinate. p2p messages are ``s·b·h`` elements
  (``s/tp·b·h`` with sequence parallelism, and with ``scatter_gather_tensors_in_pipeline``: :func:`scatter_gather`);
* **each stage**: its layers (Megatron's uneven first/last stages included) as kernels on one TP rank
  (:func:`schedsim.spec.pipeline_block._layer_ops` with ``tp``), layer by layer, the first stage adding the
  vocabulary-parallel embedding and the last the final LayerNorm's output layer (logits ``V/tp`` columns) and
  cross-entropy;
* **TP collectives** on the TP group, on the compute stream (Megatron's ``tensor_parallel/mappings.py``
  calls them synchronously on the current stream): without sequence parallelism an all-reduce after the
  row-parallel projection and fc2 in the forward and after the column-parallel QKV and fc1 data gradients in
  the backward (Narayanan et al. 2021 §2.3, the f and g operators); with it, an all-gather before QKV and fc1
  and a reduce-scatter after the projection and fc2, and their conjugates in the backward (Korthikanti et al.
  2022 §4.2.2, the g and ḡ operators). Each moves ``s·b·h`` elements (nccl-tests size column). The embedding
  all-reduces its output (reduce-scatters it with SP, whose backward all-gathers the gradient), the cross-entropy
  all-reduces three ``s·b`` fp32 vectors (``tensor_parallel/cross_entropy.py``: max logit, predicted logit, sum
  of exponentials), and the output layer's input gradient is all-reduced (reduce-scattered with SP). The
  column-parallel linears' backward (QKV, fc1, the output layer) is Megatron's
  ``LinearWithGradAccumulationAndAsyncCommunication`` (:func:`_async_dgrad`): with SP the input all-gathered again
  for the weight gradient beside the data-gradient GEMM, the data gradient's reduce-scatter (all-reduce without
  SP) beside the weight-gradient GEMM, both asynchronous on stream ``tp_comm``; those weight gradients therefore
  run inside the input-gradient phase (I), the row-parallel ones in W;
* **experts** (``num_experts``): each layer's MLP is Megatron-LM's MoE layer (:func:`schedsim.spec.pipeline_block.
  _layer_ops` with ``moe``: router, permutation, one fc1/activation/fc2 per local expert, unpermutation); the
  ``MoEAlltoAllTokenDispatcher``'s all-to-all over the EP group (ranks with the same tp and pp coordinates in
  blocks of ``ep`` of the cp·dp ranks: Megatron's expert order ``tp-ep-dp-pp``) before and after the experts,
  and with tp > 1 (sequence parallelism required) the all-gather / reduce-scatter of the tokens over the TP
  group (:func:`_with_ep`); router imbalance: with ``moe_expert_capacity_factor`` c the first expert of EP
  index 0 runs at capacity, c times the mean load, and that rank's all-to-alls carry what it receives (c < 1:
  every expert drops to its capacity). The experts' gradients are reduced over the expert data-parallel group
  (``dp·cp/ep`` ranks with the same EP index) after the rank's last compute (not bucketed);
* **context parallelism** (``context_parallel_size``): each rank holds ``s/cp`` tokens (every kernel, TP
  collective and PP message is sized by them) and the attention core is Transformer Engine's ring attention
  (:func:`_with_cp`): cp steps of a fused attention kernel with the next step's K, V send/recv to the
  neighbouring CP ranks (same tp, dp and pp coordinates) grouped on stream ``cp_comm``, overlapped with the
  step's kernel; gradients are reduced over the dp·cp ranks;
* **TP communication overlap** (``tp_comm_overlap``, with sequence parallelism): Transformer Engine's
  userbuffers pipeline (:func:`_tp_overlap`): each all-gather + GEMM and GEMM + reduce-scatter becomes tp GEMM
  chunks with a ring exchange to the neighbouring TP ranks on stream ``tp_comm`` overlapped with them;
* **recomputation**: ``full`` reruns a layer's forward (its TP collectives included) before its backward, for
  every layer (``uniform``) or the first ``recompute_num_layers`` of each chunk (``block``); ``selective``
  reruns the attention core (scores, softmax, attention·V) (Korthikanti et al. 2022 §5);
* **data parallelism** (Megatron ``distributed/``, ``finalize_model_grads.py``): the gradients of the rank's
  parameters (``/tp``), in fp32 under bf16, all-reduced over the data-parallel group (dp × cp ranks with the
  same tp and pp coordinates) or, with ``use_distributed_optimizer``, reduce-scattered. With
  ``overlap_grad_reduce`` they are reduced in Megatron's buckets (:meth:`_Ranks.buckets`: 40 M parameters or
  more in the first model chunk, one bucket per later chunk), each scaled by 1/(dp·cp) on the compute stream
  (one pass) and issued on stream ``dp_comm`` right after the last microbatch's weight gradient that completes
  it, so the rest of the backward overlaps it; without, one reduction after the rank's last compute, preceded by
  the gradient buffer's division by dp·cp (one pass). The experts' gradients are reduced over their own
  data-parallel group (dp·cp/ep ranks), which also shards their optimizer state and all-gathers them. Then the
  word-embedding gradient all-reduce between the first and last pipeline stage (tied embeddings, ``pp > 1``), the
  optimizer's synchronisations, the optimizer step (fused Adam on fp32 main weights and gradients: reads the
  gradient, the master weight and two moments, writes the three, on the rank's shard with the distributed
  optimizer), the copy of the fp32 main weights to the 16-bit model weights, with the distributed optimizer the
  parameter all-gather over the data-parallel group (with ``overlap_param_gather`` issued at the start of the
  step on ``dp_comm``, as the next step's forward would dispatch it, without holding the first forward back), and
  the memset of the rank's gradient buffer that the next step starts with.

* **FSDP** (``use_torch_fsdp2``, pp = 1): torch FSDP2 as Megatron-LM's ``TorchFullyShardedDataParallel`` wraps
  the model; every microbatch's forward and backward all-gather each unit (transformer layer, embedding, output
  layer) one unit ahead and reduce-scatter its gradients after its backward
  (:func:`schedsim.lower.training_fsdp.with_fsdp`); the tail then has no data-parallel reduction, parameter
  all-gather or gradient-buffer memset, and the optimizer steps the rank's 1/(dp·cp) shard.

With ``symmetric`` (what ``schedsim predict`` and ``search`` run where it is exact), only one representative rank
of each class of ranks that run alike is written (:func:`represented_ranks`): ``pp·cp`` ranks instead of the world,
each collective keeping its whole group for its cost and links.

``CUDA_DEVICE_MAX_CONNECTIONS`` is 1 when ``tp > 1`` (Megatron-LM ``arguments.py`` asserts it: "Using tensor
model parallelism or context parallelism require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS
to 1"), unless the schedule's ``env`` says otherwise or ``use_torch_fsdp2`` is set (Megatron then only warns, and
refuses the value 1).

The optimizer step is preceded by its synchronisations: under fp16 the loss scaler's found-inf all-reduce, then
the gradient norm's (``--clip-grad``), each one fp32 value over the model-parallel ranks (every rank with the
distributed optimizer), and each of those by its passes over the rank's gradients (the copy of 16-bit
gradients to fp32 main gradients, fp16's unscale-and-check, the local L2 norm), memory-bound kernels by bytes.

Not modelled yet (issue 36): with ``tp_comm_overlap``, Transformer Engine's bulk overlap of the weight gradient's
all-gather with the data gradient (the userbuffers path keeps its weight gradients in W); Transformer Engine's
other kernels with cp > 1 (the layer keeps the local implementation's around the attention core); for experts, the
distributed optimizer's sharding of expert state over the expert data-parallel group (it is sharded over
dp·cp like the dense state), expert biases, grouped GEMM (``moe_grouped_gemm``) and MoE activation memory
(Korthikanti's dense count is used).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedsim.errors import PipelineScheduleError, SchedsimError, SpecError
from schedsim.graph.info import PipelineInfo
from schedsim.graph.ops import Op
from schedsim.lower.pipeline_emitter import (
    ProtoPlace,
    _Emitter,
    last_backward,
    megatron_overlapped,
    reduce_after_last_backward,
)
from schedsim.lower.pipeline_plan import StageCost, block_info, plan_of, split_fix
from schedsim.lower.pipeline_steps import _lowered_steps, interleaved_steps_kept
from schedsim.lower.stage_templates import Renamed, StageTemplates, per_chunk_shape
from schedsim.lower.table import Table
from schedsim.lower.training_tail import OPT_STEP_TAG, _after_step, _param_gathers_at_start, mark_pipeline_msg_tags
from schedsim.spec.model import ScheduleSpec
from schedsim.spec.pipeline_block import (
    CORE_F,
    CORE_I,
    FLASH_BWD,
    PipelineSpec,
    TransformerSpec,
    _head_ops,
    _layer_ops,
    attn_step_flops,
)
from schedsim.spec.training_block import (
    TrainingPlan,
    TrainingSpec,
    act_bytes_per_layer,
    stage_activation_memory,
    training_plan,
)
from schedsim.units import DTYPE_BYTES

__all__ = ["expand_training", "rank_classes", "rank_groups", "represented_ranks", "stage_lists", "TP_TAG", "DP_TAG"]

#: Tags of the data-parallel (and tied-embedding) gradient reductions and the parameter all-gather.
DP_TAG = (("comm", "dp"),)
#: Tags of the optimizer's found-inf and gradient-norm all-reduces.
OPT_TAG = (("comm", "optimizer"),)
#: Tag the report reads to tell TP collectives apart (they also carry their action's pipeline tags).
TP_TAG = "tp_"
DP_STREAM = "dp_comm"
#: The attention core selective recomputation reruns (Korthikanti et al. 2022 §5: QKᵀ, softmax, softmax dropout,
#: attention over V), by layer-op name (:func:`schedsim.spec.pipeline_block._layer_ops`).
SELECTIVE = ("scores", "attn_mask", "softmax", "attn_dropout", "attn_v")

Entry = dict[str, Any]  # a compute op dict, or a collective {"name", "kind", "bytes", "dtype", "tp": True}


def _coll(name: str, kind: str, nbytes: float, dtype: str, group: str = "tp") -> Entry:
    """A collective of a stage list: on the TP group, or on the EP group with ``group="ep"``."""
    return {"name": name, "kind": kind, "bytes": float(nbytes), "dtype": dtype, "tp": True, "group": group}


def _with_ep(ops: list[Entry], phase: str, plan: TrainingPlan, a2a: float, gathered: float, dtype: str) -> list[Entry]:
    """An MoE layer's ``phase`` kernels with the token dispatcher's collectives placed around its experts
    (Megatron-LM ``MoEAlltoAllTokenDispatcher``, on the compute stream): the dispatch all-to-all over the EP
    group (``a2a`` bytes on this rank: the larger of what it sends and receives, so the busiest rank times
    it), then with tp > 1 the all-gather of the received tokens over the TP group (``gathered`` bytes, the
    nccl-tests size); after the experts the reduce-scatter and the combine all-to-all; the backward runs the
    conjugates (combine's backward before the experts' data gradients, dispatch's after)."""
    names = [o["name"] for o in ops]
    experts = [i for i, n in enumerate(names) if n.startswith(("fc1_e", "fc2_e", "act_e", "fc1_dgrad_e",
                                                               "fc2_dgrad_e", "act_bwd_e"))]
    if phase == "W" or not experts or plan.ep * plan.tp == 1:
        return list(ops)
    lo, hi = experts[0], experts[-1]
    tag = "" if phase == "F" else "_bwd"
    first, second = ("dispatch", "combine") if phase == "F" else ("combine", "dispatch")
    pre = [_coll(f"ep_{first}{tag}", "all_to_all", a2a, dtype, "ep")] if plan.ep > 1 else []
    post = [_coll(f"ep_{second}{tag}", "all_to_all", a2a, dtype, "ep")] if plan.ep > 1 else []
    if plan.tp > 1:
        pre.append(_coll(f"tp_ag_moe{tag}", "all_gather", gathered, dtype))
        post.insert(0, _coll(f"tp_rs_moe{tag}", "reduce_scatter", gathered, dtype))
    return [*ops[:lo], *pre, *ops[lo:hi + 1], *post, *ops[hi + 1:]]


def _with_tp(ops: list[Entry], phase: str, plan: TrainingPlan, nbytes: float, dtype: str,
             overlap: bool = False, wgrad: list[Entry] | None = None) -> list[Entry]:
    """One layer's ``phase`` kernels with its TP collectives placed (module docstring), or with ``overlap``
    (``tp_comm_overlap``, sequence parallelism) its all-gathers and reduce-scatters overlapped with their
    GEMMs (:func:`_tp_overlap`). ``wgrad`` (phase I only): the layer's weight-gradient kernels; the column-parallel
    linears' backward then runs as Megatron issues it, its collectives asynchronous beside their GEMMs
    (:func:`_async_dgrad`)."""
    if plan.tp == 1:
        return list(ops)
    if overlap and plan.sp:
        return _tp_overlap(ops, phase, plan, nbytes / plan.tp)
    if wgrad is not None:
        ops = _with_tp(ops, phase, plan, nbytes, dtype)
        return _async_dgrad([o for o in ops if o["name"] not in _SYNC_DGRAD_COLL], wgrad, plan, nbytes, dtype)
    if plan.sp:
        before = {"F": {"qkv": "tp_ag_attn", "fc1": "tp_ag_mlp"},
                  "I": {"fc2_dgrad": "tp_ag_fc2_dgrad", "proj_dgrad": "tp_ag_proj_dgrad"}}.get(phase, {})
        after = {"F": {"proj": "tp_rs_attn", "fc2": "tp_rs_mlp"},
                 "I": {"fc1_dgrad": "tp_rs_fc1_dgrad", "qkv_dgrad": "tp_rs_qkv_dgrad"}}.get(phase, {})
    else:
        before = {}
        after = {"F": {"proj": "tp_ar_attn", "fc2": "tp_ar_mlp"},
                 "I": {"fc1_dgrad": "tp_ar_fc1_dgrad", "qkv_dgrad": "tp_ar_qkv_dgrad"}}.get(phase, {})
    out: list[Entry] = []
    for o in ops:
        if o["name"] in before:
            out.append(_coll(before[o["name"]], "all_gather", nbytes, dtype))
        out.append(o)
        if o["name"] in after:
            name = after[o["name"]]
            out.append(_coll(name, "reduce_scatter" if plan.sp else "all_reduce", nbytes, dtype))
    return out


#: The TP group's NCCL stream: where the backward's asynchronous collectives run (:func:`_async_dgrad`).
TP_STREAM = "tp_comm"
#: The column-parallel linears whose backward Megatron-LM overlaps with TP communication
#: (``LinearWithGradAccumulationAndAsyncCommunication``): data-gradient GEMM -> the kernels of its backward that
#: run after it (the weight gradient, then the bias gradient where the linear adds its bias itself).
ASYNC_LINEARS = {"qkv_dgrad": ("qkv_wgrad", "qkv_bias_grad"), "fc1_dgrad": ("fc1_wgrad",),
                 "logits_dgrad": ("logits_wgrad",)}
#: The synchronous placement's collectives after those GEMMs (:func:`_with_tp`), which :func:`_async_dgrad` replaces.
_SYNC_DGRAD_COLL = ("tp_rs_fc1_dgrad", "tp_rs_qkv_dgrad", "tp_ar_fc1_dgrad", "tp_ar_qkv_dgrad")


def async_tp(t: TrainingSpec, plan: TrainingPlan) -> bool:
    """Whether the column-parallel linears' backward collectives are asynchronous (:func:`_async_dgrad`): with
    tp > 1, unless Transformer Engine's userbuffers overlap them instead (``tp_comm_overlap`` with sequence
    parallelism, :func:`_tp_overlap`); without sequence parallelism only with
    ``async_tensor_model_parallel_allreduce`` (Megatron-LM ``arguments.py`` turns that flag off under sequence
    parallelism, whose own path in the linear is always asynchronous)."""
    return plan.tp > 1 and not (t.tp_comm_overlap and plan.sp) and (plan.sp or t.async_tensor_model_parallel_allreduce)


def _async_dgrad(ops: list[Entry], wgrad: list[Entry], plan: TrainingPlan, nbytes: float,
                 dtype: str) -> list[Entry]:
    """The backward of the column-parallel linears of ``ops`` (:data:`ASYNC_LINEARS` whose kernels ``wgrad``
    holds) as Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication.backward`` issues it, with
    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (so each collective is issued before the GEMM it overlaps, and NCCL's stream
    starts it first): with sequence parallelism, the all-gather of the linear's sequence-parallel input again
    (``tp_ag_<linear>_wgrad``, ``nbytes``: the forward freed the gathered copy), asynchronous on the TP group's
    NCCL stream (:data:`TP_STREAM`), overlapped with the data-gradient GEMM; ``handle.wait()``; the data
    gradient's reduce-scatter (with SP; all-reduce without, ``async_grad_allreduce``), asynchronous on that
    stream, overlapped with the weight-gradient GEMM (which waits for the gathered input) and the bias gradient;
    the next kernel waits for the reduction (``handle.wait()`` before ``backward`` returns). Each collective
    waits for the compute stream's kernels issued before it (``ProcessGroupNCCL``: the NCCL stream waits on the
    current stream). Returns the list with those weight-gradient kernels moved in; the caller drops them from W.
    A list that would end with a pending reduction is left as it is (the next phase would not wait for it)."""
    by = {str(o["name"]): o for o in wgrad}
    sp = plan.sp
    out: list[Entry] = []
    wait = ""
    if str(ops[-1]["name"]) in ASYNC_LINEARS:
        return list(ops)
    for o in ops:
        name = str(o["name"])
        if wait:
            o = {**o, "after": [*o.get("after", []), wait]}
            wait = ""
        moved = ASYNC_LINEARS.get(name)
        if moved is None or not all(n in by for n in moved):
            out.append(o)
            continue
        base = name.removesuffix("_dgrad")
        w = [dict(by[n]) for n in moved]
        if sp:
            ag = f"tp_ag_{base}_wgrad"
            out.append({**_coll(ag, "all_gather", nbytes, dtype), "stream": TP_STREAM,
                        "after": [str(out[-1]["name"])] if out else []})
            w[0]["after"] = [ag]
        wait = f"tp_rs_{name}" if sp else f"tp_ar_{name}"
        out += [o, {**_coll(wait, "reduce_scatter" if sp else "all_reduce", nbytes, dtype), "stream": TP_STREAM,
                    "after": [name]}, *w]
    return out


def scatter_gather(t: TrainingSpec, plan: TrainingPlan) -> bool:
    """Whether pipeline messages are split over the TP ranks (``scatter_gather_tensors_in_pipeline``, Megatron-LM
    ``p2p_communication.py`` ``_communicate``, 2021-02 to 2023, off under sequence parallelism from 2022-08): each
    TP rank sends and receives ``1/tp`` of the ``s·b·h`` activation (``split_tensor_into_1d_equal_chunks``), and
    the receiver all-gathers it over the TP group on the compute stream before the compute that uses it
    (``gather_split_1d_tensor``: ``_all_gather_base``, after the p2p's ``torch.cuda.synchronize()``), named
    ``tp_pp_gather`` (forward) and ``tp_pp_gather_bwd`` (backward) at the head of the stage's phase."""
    return t.scatter_gather_tensors_in_pipeline and plan.tp > 1 and plan.pp > 1 and not plan.sp


def _renamed(ops: list[Entry], prefix: str) -> list[Entry]:
    """The entries with ``prefix`` before their names (and the names a placed entry waits for, its NCCL group
    and message)."""
    return [Renamed(o, prefix + o["name"]) if "after" not in o else {  # Renamed: its template is o's
        **o, "name": prefix + o["name"], "after": [prefix + n for n in o["after"]],
        "nccl_group": prefix + o["nccl_group"] if o.get("nccl_group") else "",
        "msg": prefix + o["msg"] if o.get("msg") else ""} for o in ops]


CP_STREAM = "cp_comm"
_PLACE_KEYS = ("after", "stream", "nccl_group", "msg", "cp_peer", "ring", "after_compute")


def _ring_p2p(name: str, nbytes: float, dtype: str, after: list[str], ring: str = "cp") -> list[Entry]:
    """One ring step's grouped send (to the next rank of the ``ring``, cp or tp) and recv (from the previous), on
    stream ``cp_comm`` or ``tp_comm``; ``name`` starts with ``cp_`` or ``tp_``."""
    base = {"bytes": float(nbytes), "dtype": dtype, "stream": f"{ring}_comm", "after": after, "nccl_group": name,
            "msg": name, "ring": ring}
    return [{**base, "name": name.replace(f"{ring}_", f"{ring}_send_", 1), "kind": "send", "cp_peer": "next"},
            {**base, "name": name.replace(f"{ring}_", f"{ring}_recv_", 1), "kind": "recv", "cp_peer": "prev"}]


#: The GEMMs whose input Megatron all-gathers (sequence parallelism) and whose output it reduce-scatters, per
#: phase: with ``tp_comm_overlap`` each is split into tp chunks overlapped with a ring exchange (:func:`_tp_overlap`).
AG_GEMMS = {"F": ("qkv", "fc1"), "I": ("fc2_dgrad", "proj_dgrad")}
RS_GEMMS = {"F": ("proj", "fc2"), "I": ("fc1_dgrad", "qkv_dgrad")}


def _tp_overlap(ops: list[Entry], phase: str, plan: TrainingPlan, chunk: float) -> list[Entry]:
    """A layer's ``phase`` with ``tp_comm_overlap``: Transformer Engine's userbuffers overlap of the sequence-
    parallel all-gather and reduce-scatter with their GEMMs (Megatron-LM ``--tp-comm-overlap``; TE
    ``CommOverlapP2P``, ring exchange). A GEMM after an all-gather runs as tp chunks of s·b/tp rows
    (``<gemm>_c<i>``), chunk 0 on the rank's own shard at once, chunk i after the recv of ring step i − 1,
    while step i sends the shard it holds to the next TP rank and receives the previous rank's (``chunk``
    bytes, grouped, on stream ``tp_comm``). A GEMM before a reduce-scatter runs its tp chunks in ring order,
    each after the first adding the partial sum received (``<gemm>_rs_add<i>``, 3 passes of ``chunk``) and
    each but the last sending its partial to the next TP rank."""
    out: list[Entry] = []
    for o in ops:
        name = o["name"]
        if name not in AG_GEMMS.get(phase, ()) and name not in RS_GEMMS.get(phase, ()):
            out.append(o)
            continue
        prev = out[-1]["name"]
        piece = {**o, "m": o["m"] // plan.tp}
        for i in range(plan.tp):
            recv_prev = [f"tp_recv_{name}{i - 1}"] if i else []
            if name in AG_GEMMS[phase]:
                if i < plan.tp - 1:
                    out += _ring_p2p(f"tp_{name}{i}", chunk, o["dtype"], [prev] if i == 0 else recv_prev, "tp")
                out.append({**piece, "name": f"{name}_c{i}", "after": recv_prev})
                continue
            out.append({**piece, "name": f"{name}_c{i}"})
            if i:
                out.append({"name": f"{name}_rs_add{i}", "kind": "compute", "bytes": 3 * chunk, "dtype": o["dtype"],
                            "after": recv_prev})
            if i < plan.tp - 1:
                out += _ring_p2p(f"tp_{name}{i}", chunk, o["dtype"], [out[-1]["name"]], "tp")
    return out


def _with_cp(ops: list[Entry], phase: str, t: TrainingSpec, plan: TrainingPlan) -> list[Entry]:
    """A layer's ``phase`` (F or I) with its attention core as Megatron's context-parallel ring attention
    (Transformer Engine ``AttnFuncWithCPAndKVP2P``, which Megatron-LM's ``--context-parallel-size`` runs; the
    sequence in 2·cp chunks, rank c holding chunks c and 2cp−1−c, so that every step of causal attention is
    half a block): cp steps of a fused attention kernel (``cp_attn<i>``: FLOP ``2·b·(a/tp)·(s/cp)²·d`` forward,
    2.5 times that backward, the FlashAttention-2 backward's five GEMMs to the forward's two; bytes Q, K, V and
    O), each after the recv of the K, V chunk it uses, while the next step's grouped send/recv runs on stream
    ``cp_comm`` (K and V: ``2·b·(s/cp)·(h·g/a)/tp`` elements), issued after the previous recv. A step after
    the first merges its partial output (``cp_out_correction<i>``, 3 passes over the fp32 output). The
    backward passes K, V at its first step, K, V and the accumulated dK, dV at the middle ones and dK, dV at
    its last (TE's backward), each send after the previous step's compute; a step after the first accumulates
    dQ, dK, dV (``cp_grad_acc<i>``, 3 passes), and the layer goes on once the last dK, dV arrived."""
    cp, tp, e = plan.cp, plan.tp, DTYPE_BYTES[plan.dtype]
    sl, b, h, a = t.seq_length // cp, t.micro_batch_size, t.hidden_size, t.num_attention_heads
    d, dt = h // a, plan.dtype
    kv = 2 * b * sl * (h * plan.groups // a) // tp * e
    q = b * sl * h // tp * e  # Q, and the output, of this rank
    flops = attn_step_flops(b, a // tp, sl, sl, d)
    names = [o["name"] for o in ops]
    core: tuple[str, ...] = CORE_F if phase == "F" else CORE_I
    if t.use_flash_attn:  # the ring replaces the fused kernel and its layout copy
        core = core + (("qkv_layout_copy", "flash_attn") if phase == "F" else ("flash_attn_bwd",
                                                                                   "qkv_layout_copy_bwd"))
    at = [i for i, n in enumerate(names) if n in core]
    lo, hi = at[0], at[-1]
    prev = names[lo - 1]  # the compute before the core: ProcessGroupNCCL's stream waits for it
    ring: list[Entry] = []
    fwd = phase == "F"
    for i in range(cp):
        if fwd and i < cp - 1 or not fwd:
            size = kv if fwd or i in (0, cp - 1) else 2 * kv
            after = [prev] if i == 0 else [f"cp_recv_kv{'' if fwd else '_bwd'}{i - 1}"] + (
                [] if fwd else [f"cp_attn_bwd{i - 1}"])
            ring += _ring_p2p(f"cp_kv{'' if fwd else '_bwd'}{i}", size, dt, after)
        step = {"name": f"cp_attn{'' if fwd else '_bwd'}{i}", "kind": "compute", "dtype": dt,
                "flops": flops * (1 if fwd else FLASH_BWD), "bytes": float(2 * q + kv if fwd else 4 * q + 2 * kv),
                "after": [f"cp_recv_kv{'' if fwd else '_bwd'}{i - 1}"] if i else []}
        ring.append(step)
        if i:
            extra = 3 * (b * sl * h // tp) * 4 if fwd else 3 * (q + kv)
            ring.append({"name": f"cp_{'out_correction' if fwd else 'grad_acc'}{i}", "kind": "compute",
                         "bytes": extra, "dtype": dt})
    out = [*ops[:lo], *ring, *ops[hi + 1:]]
    if not fwd:  # the layer's next kernel needs the dK, dV of the last exchange
        nxt = out[lo + len(ring)]
        out[lo + len(ring)] = {**nxt, "after": [f"cp_recv_kv_bwd{cp - 1}"]}
    return out


def _recomputed(t: TrainingSpec, k: int, lps: int) -> bool:
    """Whether layer ``k`` (0-based within its chunk of ``lps`` layers) reruns its forward (full recompute)."""
    if t.recompute_granularity != "full":
        return False
    return t.recompute_method == "uniform" or k < (t.recompute_num_layers or 0)


def stage_lists(t: TrainingSpec, plan: TrainingPlan, stage: int, num_stages: int,
                hot: bool = False) -> dict[str, list[Entry]]:
    """Per phase (F, I, W), one stage chunk's ops on one TP rank in issue order: compute op dicts and TP
    collectives (``"tp": True``; ``"group": "ep"`` for the experts' all-to-all), layer by layer (the backward
    in reverse layer order), names ``l<k>.<op>``. ``hot``: the EP rank whose first expert runs at capacity
    (:meth:`~schedsim.spec.training_block.TrainingPlan.expert_tokens`)."""
    tr = _transformer(t, plan)
    e = DTYPE_BYTES[plan.dtype]
    T = t.seq_length // plan.cp * t.micro_batch_size  # this CP rank's tokens
    act = T * t.hidden_size * e
    moe = None
    if plan.experts:
        tokens = plan.expert_tokens(t, hot)
        moe = (plan.experts, t.moe_router_topk, tokens)
        got = sum(tokens) // plan.tp * t.hidden_size * e  # received by this rank's dispatch (before the TP gather)
        # sent: its tokens × k, fewer where every expert drops to a capacity below the mean (c < 1)
        sent = min(T // plan.tp * t.moe_router_topk, sum(plan.expert_tokens(t, False)) // plan.tp)
        a2a = max(sent * t.hidden_size * e, got)
    layer = _layer_ops(tr, plan.tp, plan.sp, plan.groups, moe)
    lps = plan.stage_layers[stage]
    fwd = _with_tp(layer["F"], "F", plan, act, plan.dtype, t.tp_comm_overlap)
    asy = async_tp(t, plan)
    bwd = _with_tp(layer["I"], "I", plan, act, plan.dtype, t.tp_comm_overlap, layer["W"] if asy else None)
    inline = {str(o["name"]) for o in bwd}  # weight gradients the backward runs beside its collectives
    wgt = [o for o in layer["W"] if o["name"] not in inline]
    if moe is not None:
        gathered = sum(moe[2]) * t.hidden_size * e
        fwd = _with_ep(fwd, "F", plan, a2a, gathered, plan.dtype)
        bwd = _with_ep(bwd, "I", plan, a2a, gathered, plan.dtype)
    core = [o for o in layer["F"] if o["name"] in SELECTIVE]
    if plan.cp > 1:
        fwd, bwd = _with_cp(fwd, "F", t, plan), _with_cp(bwd, "I", t, plan)
        core = [o for o in fwd if o["name"].startswith("cp_")]  # recomputed: the ring's first exchange starts it
        core[:2] = [{**o, "after": []} for o in core[:2]]
    out: dict[str, list[Entry]] = {"F": [], "I": [], "W": []}
    rs_or_ar = "reduce_scatter" if plan.sp else "all_reduce"
    dt = plan.dtype
    hd = _head_ops(tr, plan.tp, plan.sp)

    def pick(*names: str) -> list[Entry]:
        return [hd[n] for n in names if n in hd]

    if stage == 0:
        out["F"] += pick("embedding")
        if plan.tp > 1:
            out["F"].append(_coll("tp_embedding", rs_or_ar, act, dt))
        out["F"] += pick("embedding_dropout")
    for k in range(lps):
        out["F"] += _renamed(fwd, f"l{k}.")
    for k in reversed(range(lps)):
        pre = (fwd if _recomputed(t, k, lps) else core if t.recompute_granularity == "selective" else [])
        out["I"] += _renamed(pre, f"l{k}.re_") + _renamed(bwd, f"l{k}.")
        out["W"] += _renamed(wgt, f"l{k}.")
    if stage == num_stages - 1:
        head = _last_head(hd, plan, act, T, asy)
        out["F"] += head["F"]
        out["I"] = head["I"] + out["I"]
        out["W"][:0] = head["W"]
    if stage == 0:
        out["I"] += pick("embedding_dropout_bwd")
        if plan.sp:  # the backward of the embedding's reduce-scatter (_ReduceScatterToSequenceParallelRegion)
            out["I"].append(_coll("tp_embedding_bwd", "all_gather", act, dt))
        out["W"] += pick("embedding_wgrad")
    return _stage_comm(out, t, plan, stage, num_stages, act)


def _stage_comm(out: dict[str, list[Entry]], t: TrainingSpec, plan: TrainingPlan, stage: int, num_stages: int,
                act: float) -> dict[str, list[Entry]]:
    """A stage's phases with the collectives placed around its layers: ``scatter_gather_tensors_in_pipeline``'s
    all-gathers of the received 1/tp pieces before the phase's first kernel (:func:`scatter_gather`), and
    FSDP2's all-gathers and reduce-scatters (:func:`schedsim.lower.training_fsdp.with_fsdp`)."""
    if scatter_gather(t, plan):
        if stage > 0:
            out["F"].insert(0, _coll("tp_pp_gather", "all_gather", act, plan.dtype))
        if stage < num_stages - 1:
            out["I"].insert(0, _coll("tp_pp_gather_bwd", "all_gather", act, plan.dtype))
    if t.use_torch_fsdp2 and plan.dp * plan.cp > 1:
        from schedsim.lower.training_fsdp import with_fsdp

        out = with_fsdp(out, t, plan)
    return out


def _last_head(hd: dict[str, dict[str, Any]], plan: TrainingPlan, act: float, tokens: int,
               asy: bool) -> dict[str, list[Entry]]:
    """The last stage's head per phase (:func:`stage_lists`; ``hd``: :func:`_head_ops`): the final LayerNorm, the
    output layer (its input all-gathered with SP) and vocabulary-parallel cross-entropy (three all-reduces of
    ``tokens`` fp32 values), and their backward, the output layer's as a column-parallel linear's
    (:func:`_async_dgrad` where ``asy``, else its input gradient's reduction on the compute stream and its weight
    gradient in W)."""
    dt = plan.dtype

    def pick(*names: str) -> list[Entry]:
        return [hd[n] for n in names if n in hd]

    head_f = pick("final_ln")
    if plan.sp:
        head_f.append(_coll("tp_ag_logits", "all_gather", act, dt))
    head_f += pick("logits", "cross_entropy")
    if plan.tp > 1:
        head_f += [_coll(f"tp_ce_allreduce{i}", "all_reduce", tokens * 4, "fp32") for i in range(3)]
    head_i = pick("cross_entropy_bwd", "logits_dgrad")
    head_w = pick("logits_wgrad")
    if asy:  # the output layer is a column-parallel linear too
        return {"F": head_f, "I": _async_dgrad(head_i + pick("final_ln_bwd"), head_w, plan, act, dt), "W": []}
    if plan.tp > 1:
        head_i.append(_coll("tp_logits_dgrad", "reduce_scatter" if plan.sp else "all_reduce", act, dt))
    return {"F": head_f, "I": head_i + pick("final_ln_bwd"), "W": head_w}


def _transformer(t: TrainingSpec, plan: TrainingPlan) -> TransformerSpec:
    return TransformerSpec(layers=t.num_layers, hidden=t.hidden_size, ffn=plan.ffn, heads=t.num_attention_heads,
                           seq=t.seq_length // plan.cp, micro_batch=t.micro_batch_size, dtype=plan.dtype,  # type: ignore[arg-type]
                           vocab=plan.vocab, swiglu=t.swiglu, attention_dropout=t.attention_dropout,
                           hidden_dropout=t.hidden_dropout, flash_attention=t.use_flash_attn)


def _held(t: TrainingSpec, plan: TrainingPlan, num_stages: int) -> dict[int, dict[str, float]]:
    """Parameters one TP rank holds per stage chunk, split as :func:`schedsim.spec.pipeline_block.stage_params`
    splits them (layers, embedding on the first, output layer on the last when untied or, tied, Megatron's copy
    of the word embedding there; the position embeddings and final LayerNorm whole), with each stage's own layer
    count (uneven first/last stages), a layer's LayerNorms, row-parallel biases and router whole on every TP rank
    (:func:`~schedsim.spec.training_block.tp_replicated_params_per_layer`); ``experts``: the layers' expert
    parameters one EP rank holds (0 for a dense model) over tp, apart from ``layers``."""
    from schedsim.spec.pipeline_block import stage_params
    from schedsim.spec.training_block import _params_per_layer, expert_params_per_layer, tp_replicated_params_per_layer

    ex = expert_params_per_layer(t, plan)
    rep = tp_replicated_params_per_layer(t, plan)
    # the dense part; the experts' ("experts") reduce over their own group
    per = (_params_per_layer(t, plan) - ex - rep) / plan.tp + rep
    held = stage_params(num_stages, 1, 0, hidden=t.hidden_size, seq=t.seq_length, vocab=plan.vocab, tp=plan.tp,
                        untied=t.untie_embeddings_and_output_weights)
    return {s: {**d, "layers": per * plan.stage_layers[s], "experts": ex / plan.tp * plan.stage_layers[s]}
            for s, d in held.items()}


def _stage_params(t: TrainingSpec, plan: TrainingPlan, num_stages: int) -> dict[int, float]:
    """Parameters one TP rank holds per stage chunk (the sum of :func:`_held`'s)."""
    return {s: sum(d.values()) for s, d in _held(t, plan, num_stages).items()}


class _Ranks:
    """Templates and ids shared by the ranks of one lowering."""

    def __init__(self, spec: ScheduleSpec, table: Table, t: TrainingSpec, plan: TrainingPlan, num_stages: int):
        self.spec, self.table, self.t, self.plan = spec, table, t, plan
        self.name_ids: dict[tuple[str, int], Any] = {}  # every rank's emitter shares them
        self.placed_ids: dict[tuple[str, int], Any] = {}  # likewise (_Emitter.placed_ids)
        self.orders: dict[int, Any] = {}  # likewise (_Emitter.orders)
        self.p2p_ids: dict[tuple[Any, int, int], tuple[int, int, int]] = {}  # likewise (_Emitter.p2p_ids)
        self.run_cache: dict[tuple[Any, ...], Any] = {}  # likewise (_Emitter.run_cache)
        from schedsim.lower.pipeline_emitter import emitted_name, emitted_str

        # likewise (_Emitter.fresh): kept where no name written before the block's could be the emitter's
        self.fresh: dict[str, int] | None = None if table.names.may_hold_any(emitted_name) else {}
        # (_Emitter.fresh_strs) where no NCCL group or message string written before could be a placed op's
        self.fresh_strs = self.fresh is not None and not table.strs.may_hold_any(emitted_str)
        layers = plan.stage_layers[:num_stages]
        self.lists = per_chunk_shape(lambda s: stage_lists(t, plan, s, num_stages), layers)
        self.hot_lists = per_chunk_shape(lambda s: stage_lists(t, plan, s, num_stages, hot=True), layers) \
            if plan.experts and t.moe_expert_capacity_factor is not None else self.lists
        self.compute: dict[tuple[int, str, int, bool], int] = {}
        self.templates = StageTemplates(spec, table)
        self.held = _held(t, plan, num_stages)
        #: The ring exchanges (CP, tp_comm_overlap) as lone isend/irecv on two-rank communicators when the
        #: pipeline's p2p are lone (interleaved: Megatron's overlap_p2p_comm), else each step one batch, like the
        #: pipeline's (1F1B's batch_p2p_comm): the language puts every batch on the world communicator (see
        #: schedsim.lower.checks), where lone pipeline p2p and batched rings would wait on each other at NCCL's
        #: lazy creation of that communicator, which the CP group of a real run never shares with the pipeline.
        self.lone = plan.v > 1
        self.protos: dict[tuple[int, ...], dict[tuple[int, str], list[tuple[str, int]]]] = {}
        self.places: dict[tuple[Any, ...], ProtoPlace] = {}  # _placed's, by their fields
        #: Per stage, the microbatch of its last backward (:func:`~schedsim.lower.pipeline_emitter.last_backward`),
        #: found once for every rank's ``overlap_grad_reduce``.
        self.last_bwd: dict[int, int] | None = None

    def template(self, op: Op) -> int:
        return self.table.template(op)

    def spec_world(self) -> range:
        return range(self.spec.world_size)

    def buckets(self, stage: int, bucketing: bool) -> dict[str, tuple[int, float]]:
        """The gradient buckets of a stage chunk with ``overlap_grad_reduce``: W op name -> (bucket index,
        parameters of the TP rank in the bucket), the bucket's reduction issued after that op of the last
        microbatch's backward. Megatron's DDP fills buckets of ``max(4·10⁷, 10⁶·dp)`` parameters in backward
        order (``megatron/core/distributed/distributed_data_parallel.py``), a layer's parameters ready after its
        last weight gradient; without ``bucketing`` (model chunks after the first: ``megatron/training/
        training.py`` ``get_model``, ``disable_bucketing=(model_chunk_idx > 0)``) one bucket per chunk."""
        plan = self.plan
        held = self.held[stage]
        lps = plan.stage_layers[stage]
        own: dict[str, float] = {"logits_wgrad": held["lm_head"], "embedding_wgrad": held["embedding"]}
        size = max(40_000_000, 1_000_000 * plan.dp * plan.cp) if bucketing else float("inf")
        out: dict[str, tuple[int, float]] = {}
        acc = 0.0
        names = [str(o["name"]) for o in self.lists[stage]["W"]]
        if names and "logits_wgrad" not in names:  # run inside I (async_tp): ready before W starts
            own[names[0]] = own.get(names[0], 0.0) + held["lm_head"]
        layer_of = [n.split(".")[0] if n.startswith("l") and "." in n else "" for n in names]
        for i, name in enumerate(names):  # a layer's parameters are ready after its last weight-gradient kernel
            done = layer_of[i] and (i + 1 == len(names) or layer_of[i + 1] != layer_of[i])
            acc += own.get(name, 0.0) + (held["layers"] / lps if done else 0)
            if acc >= size or (name == names[-1] and acc):
                out[name] = (len(out), acc)
                acc = 0.0
        return out

    def stage_protos(self, stages: list[int], group: tuple[int, ...], ep_group: tuple[int, ...] = (),
                     hot: bool = False, ring: tuple[int, int] = (-1, -1),
                     tp_ring: tuple[int, int] = (-1, -1),
                     odd: tuple[bool, bool] = (False, False),
                     dp_group: tuple[int, ...] = ()) -> dict[tuple[int, str], list[Any]]:
        """(stage, phase) -> [(op name, template id)] for a TP group and EP group (its collectives' templates
        name them); ``hot``: the stage lists of the EP rank whose first expert runs at capacity; ``ring``: the
        next and previous CP ranks, the peers of the context-parallel ring, ``tp_ring`` those of the TP ring of
        ``tp_comm_overlap`` (an entry placed off the compute stream or after named ops gets a third item,
        :class:`~schedsim.lower.pipeline_emitter.ProtoPlace`); ``odd``: whether the rank's CP and TP ring positions are
        odd (:meth:`_ring_order`)."""
        key = (*stages, -1, *group, -1, *ep_group, int(hot), *ring, *tp_ring, *odd, -1, *dp_group)
        got = self.protos.get(key)
        if got is not None:
            return got
        out: dict[tuple[int, str], list[Any]] = {}
        lists = self.hot_lists if hot else self.lists
        # a chunk's row serves the chunks sharing its lists (per_chunk_shape): one template per distinct entry, so
        # the row depends on the lists alone, but where an entry got a template of its own (StageTemplates.own)
        made: dict[tuple[int, str], list[Any]] = {}
        for s in stages:
            for phase, lst in lists[s].items():
                mk = (id(lists[s]), phase)
                row = made.get(mk)
                if row is not None:
                    out[(s, phase)] = row
                    continue
                own = self.templates.own
                row = []
                lst = self._ring_order(lst, odd)
                index: dict[str, int] = {}  # entry name -> its index, made for the first placed entry
                for k, o in enumerate(lst or [{"name": "noop", "kind": "compute", "duration_us": 0}]):
                    coll = -1
                    if o.get("tp"):
                        grp = ep_group if o.get("group") == "ep" else dp_group if o.get("group") == "dp" else group
                        coll = self.templates.comm(o, grp)
                    if "after" in o:
                        if not index:
                            index = {str(x["name"]): i for i, x in enumerate(lst)}
                        row.append(self._placed(o, index, ring, tp_ring, s, phase, k, coll))
                        continue
                    if coll >= 0:
                        row.append((o["name"], coll))
                        continue
                    tid = self.compute.get((s, phase, k, hot))
                    if tid is None:
                        tid = self.compute[(s, phase, k, hot)] = self.templates.stage(o, k, phase)
                    row.append((str(o["name"]), tid))
                out[(s, phase)] = row
                if self.templates.own == own:
                    made[mk] = row
        self.protos[key] = out
        return out

    def _ring_order(self, lst: list[Entry], odd: tuple[bool, bool]) -> list[Entry]:
        """The list with each ring step's recv before its send on a rank at an odd ring position, when the ring's
        p2p are lone (:attr:`lone`): Transformer Engine's ``flash_attn_p2p_communicate`` posts isend then irecv
        on even CP ranks and irecv then isend on odd ones, so that two ranks exchanging over one two-rank NCCL
        communicator do not both send first."""
        if not self.lone or not any(odd):
            return lst
        out = list(lst)
        for i in range(len(out) - 1):
            o = out[i]
            if o["kind"] == "send" and "ring" in o and odd[o["ring"] == "tp"] and out[i + 1]["kind"] == "recv":
                out[i], out[i + 1] = out[i + 1], o
        return out

    def _placed(self, o: Entry, index: dict[str, int], ring: tuple[int, int], tp_ring: tuple[int, int], s: int,
                phase: str, k: int, coll: int = -1) -> tuple[str, int, ProtoPlace]:
        """The protos row of an entry placed by name (:func:`_with_cp`, :func:`_async_dgrad`): a ring send/recv, a
        collective off the compute stream (``coll``: its template id), or a compute op that waits for ops of other
        streams."""
        peer = -1
        if coll >= 0:
            tid = coll
        elif o["kind"] in ("send", "recv"):
            pair = ring if o.get("ring", "cp") == "cp" else tp_ring
            peer = pair[0] if o["cp_peer"] == "next" else pair[1]
            tid = self.templates.comm(o, ())
        else:
            got = self.compute.get((s, phase, k, False))
            tid = got if got is not None else self.templates.stage(
                {kk: v for kk, v in o.items() if kk not in _PLACE_KEYS}, k, phase)
            self.compute[(s, phase, k, False)] = tid
        name = o.get("stream", "")
        if self.lone and peer >= 0:  # lone isend / irecv: each on the stream of its direction
            name = f"{o['ring']}_{o['kind']}"
        stream = self.table.streams(name) if name else -1
        key = (stream, tuple([index[n] for n in o["after"]]), peer, "" if self.lone else o.get("nccl_group", ""),
               o.get("msg", ""), bool(o.get("after_compute")))
        place = self.places.get(key)
        if place is None:  # one object per distinct place (the ranks' and layers' rows repeat them)
            place = self.places[key] = ProtoPlace(*key[:5], after_compute=key[5])
        return str(o["name"]), tid, place

    def one(self, kind: str, name: str, rank: int, group: tuple[int, ...], nbytes: float, dtype: str,
            deps: tuple[int, ...], stream: str = DP_STREAM, tags: tuple[tuple[str, Any], ...] = DP_TAG) -> int:
        """Add one op (a collective over ``group``, or a compute op with ``nbytes`` moved) to ``rank``; returns
        its name id. ``deps``: name ids of the rank's ops it waits for."""
        op = Op(name=name, rank=rank, kind=kind, stream=stream, seq=0, group=group, nbytes=float(nbytes),
                dtype=dtype, tags=tags, source="training")
        table = self.table
        nid = table.names(name)
        table.add_ids(self.template(op), rank, nid, table.tag_id(tags), table.streams(stream), deps, -1, -1, -1)
        return nid


def represented_ranks(spec: ScheduleSpec) -> tuple[int, ...]:
    """The ranks a *symmetric* lowering of the spec's ``training:`` block writes: one representative of each class
    of ranks that run the same program at the same times, or ``()`` when every rank is its own class.

    Ranks differ only in their (tp, cp, dp, pp) coordinates (:meth:`TrainingPlan.rank`). Two ranks that differ only
    in tp, or only in dp, issue the same ops (the same kernels, and collectives on groups of the same shape) in the
    same order, with their pipeline peers, and start each collective with the other members of its group at the
    same instant; so every rank of a class has the times of its representative. The representatives are tp index 0
    and dp index 0 of every (cp, pp) position; all tp positions are kept with ``tp_comm_overlap`` (the TP ring's
    send/recv peers, whose order alternates with the ring position) and all dp positions where one EP rank's first
    expert runs at capacity (``moe_expert_capacity_factor``: EP index 0 differs from the others). Context-parallel
    positions are all kept (the CP ring's peers, whose order alternates likewise). A collective of the lowered
    Program keeps its full group (its cost, and its links for :mod:`schedsim.network.share`) but has only its
    represented members, which it waits for.

    It needs that no link carries the transfers of two ranks of one class: one NIC per GPU and a fabric that does
    not oversubscribe (:func:`schedsim.sim.symmetry.symmetric_exact`). Then every represented op has the times of
    the full lowering, bit for bit: at an instant where identical ranks become ready together, the full simulation
    meets them in rank order, but places the kernels handed over at that instant only once every event of it is
    done (:mod:`schedsim.gpu.rules`, rule wave-dispatch), so a collective completed by the last rank met starts
    before the kernels issued after it on every rank, as on the representative, its group's only member
    (``tests/sim/test_training_symmetric.py``; docs/validation.md, "sym36m"). With ``use_torch_fsdp2`` every rank
    is written (``()``): a rank's all-gathers meet its own kernels at such ties every layer, and the makespans
    differed by 6 % on a 2-layer step (``tests/sim/test_training_fsdp_timeline.py``)."""
    t = spec.training
    if t is not None and t.use_torch_fsdp2:  # every rank: the representatives' ties with FSDP's all-gathers differ
        return ()
    reps = np.unique(rank_classes(spec))
    return () if len(reps) == spec.world_size else tuple(reps.tolist())


def rank_classes(spec: ScheduleSpec) -> np.ndarray:
    """Per global rank (int64, shape (world_size,)), the representative rank of its class
    (:func:`represented_ranks`): the rank with tp index 0 (unless ``tp_comm_overlap``) and dp index 0 (unless one
    EP rank's expert runs at capacity) and the same cp and pp indices."""
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    g = np.arange(spec.world_size, dtype=np.int64)
    t_, c_, d_, p_ = g % plan.tp, g // plan.tp % plan.cp, g // (plan.tp * plan.cp) % plan.dp, \
        g // (plan.tp * plan.cp * plan.dp)
    if not t.tp_comm_overlap:
        t_ = np.zeros_like(g)
    if not (plan.experts and t.moe_expert_capacity_factor is not None):
        d_ = np.zeros_like(g)
    return t_ + plan.tp * (c_ + plan.cp * (d_ + plan.dp * p_))


def expand_training(spec: ScheduleSpec, table: Table, symmetric: bool = False) -> PipelineInfo:
    """Write every rank's ops of the spec's ``training:`` block into ``table`` (module docstring); with
    ``symmetric``, only the ranks of :func:`represented_ranks` (all where it is empty).

    Returns the :class:`~schedsim.graph.info.PipelineInfo` of its pipeline (``p`` = pp, ``dp`` = the pipeline
    replicas tp·cp·dp, per stage chunk its activations by Korthikanti et al.: :func:`stage_activation_memory`).

    Raises
    ------
    SpecError
        A pipeline the generators refuse (too few microbatches for interleaving), named on
        ``training.global_batch_size``; a lowering of every rank past ``SCHEDSIM_MAX_OPS``
        (:func:`schedsim.spec.limits.check_training_ops`).
    """
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    reps = represented_ranks(spec) if symmetric else ()
    if not reps:  # the loader bounded the symmetric lowering's ops; this one writes every rank's
        from schedsim.spec.limits import check_training_ops

        check_training_ops(t.model_dump(exclude_none=True), spec.world_size, spec._file, represented=False)
    tr = _transformer(t, plan)
    pb = PipelineSpec(schedule=plan.schedule, p=plan.pp, m=plan.m, v=plan.v if plan.v > 1 else None, transformer=tr,
                      p2p=None)
    try:
        pplan, steps = _plan_and_steps(spec, pb)
    except SchedsimError as e:  # the generators' rules on m: said in the block's terms
        head = split_fix(e.message if isinstance(e, SpecError) else e.reason if isinstance(
            e, PipelineScheduleError) else str(e), custom=False)[0]
        per = t.micro_batch_size * plan.dp
        m2 = -(-plan.m // plan.pp) * plan.pp
        raise SpecError(f"{head} (m = global_batch_size / (micro_batch_size · dp) = {plan.m}, pp = {plan.pp}, "
                        f"v = {plan.v})", file=spec._file, path="training.global_batch_size",
                        fix=f"use global_batch_size: {m2 * per} (m = {m2}, a multiple of pp), or fewer virtual "
                        "stages") from None
    assert isinstance(steps, dict)
    ns = pplan.num_stages
    empty = table.empty()
    ranks = _Ranks(spec, table, t, plan, ns)
    elem = DTYPE_BYTES[plan.dtype]
    act_bytes = t.seq_length // plan.cp * t.micro_batch_size * t.hidden_size * elem // (
        plan.tp if plan.sp or scatter_gather(t, plan) else 1)
    p2p_tmpl = {k: table.template(Op(name=k, rank=0, kind=k, stream="", seq=0, nbytes=float(act_bytes),
                                     dtype=plan.dtype, source="training")) for k in ("send", "recv")}
    rank_stages = {r: sorted(st for st, rr in pplan.s2r.items() if rr == r) for r in range(plan.pp)}
    chunk_of = {st: rank_stages[r].index(st) for st, r in pplan.s2r.items()}
    params = _stage_params(t, plan, ns)
    for g in reps or range(spec.world_size):
        _emit_rank(ranks, g, pplan, steps, p2p_tmpl, chunk_of, rank_stages, params)
    if empty:  # no op before the block: the pipeline's send/recv tag sets are its own
        mark_pipeline_msg_tags(table, ranks.p2p_ids.values(), set(p2p_tmpl.values()))
    mem, per_stage = stage_activation_memory(t, plan)  # each stage chunk's own layers (uneven stages)
    cost = StageCost({}, act_bytes, mem, dtype=plan.dtype, stage_mem_bytes=per_stage)
    info = block_info(pb.model_copy(update={"transformer": None, "stage": None}), pplan, cost)
    from dataclasses import replace

    # full recompute: a checkpointed group's forward re-run holds all its layers' activations until its backward
    # ends (PipelineInfo.recompute_group_layers; memory_per_rank's `peak` term)
    full = t.recompute_granularity == "full"
    group = (t.recompute_num_layers or 1) if t.recompute_method == "uniform" else 1
    return replace(info, dp=spec.world_size // plan.pp, rank_stride=plan.tp * plan.cp * plan.dp,
                   recompute_group_layers=group if full else 0,
                   recompute_layer_bytes=int(act_bytes_per_layer(t, plan, None)) if full else 0)


#: In this process: (schedule, p, m, v) -> :func:`_plan_and_steps`' answer, kept across lowerings (the points of a
#: ``schedsim search`` share pipeline shapes); at most :data:`PLANS_KEPT`, then forgotten all at once. Read only,
#: as :func:`~schedsim.lower.pipeline_steps.interleaved_steps_kept`'s answers are.
PLANS_KEPT = 64
_PLANS: dict[tuple[Any, ...], tuple[Any, Any]] = {}


def _plan_and_steps(spec: ScheduleSpec, pb: PipelineSpec) -> tuple[Any, Any]:
    """The block's pipeline plan (Megatron's order for ``pb``'s schedule, p, m and v: :func:`plan_of`, which reads
    nothing else of ``pb`` or of ``spec`` but to word an error) and its steps with the p2p, kept in :data:`_PLANS`;
    a refusal is raised each time."""
    key = (pb.schedule, pb.p, pb.m, pb.v)
    got = _PLANS.get(key)
    if got is None:
        pplan = plan_of(spec, pb, reference=True, megatron=True)
        got = (pplan, interleaved_steps_kept(spec, pb, pplan) if (pb.v or 1) > 1 else _lowered_steps(pplan, False))
        if len(_PLANS) >= PLANS_KEPT:
            _PLANS.clear()
        _PLANS[key] = got
    return got


def _coords(plan: TrainingPlan, g: int) -> tuple[int, int, int, int]:
    t_ = g % plan.tp
    c_ = g // plan.tp % plan.cp
    d_ = g // (plan.tp * plan.cp) % plan.dp
    return t_, c_, d_, g // (plan.tp * plan.cp * plan.dp)


def rank_groups(plan: TrainingPlan, g: int) -> dict[str, tuple[int, ...]]:
    """The rank groups global rank ``g`` takes part in, each a tuple of global ranks in the order the lowering uses
    them: ``tp``, ``dp`` (dp·cp ranks of the gradient reduction), ``pp`` (the pipeline, by stage), ``ep`` (the
    experts' all-to-all: Megatron's tp-ep-dp-pp order splits the cp·dp ranks into ep-sized blocks), ``edp`` (the
    expert data-parallel group), ``cp_ring`` (next and previous CP rank), ``embedding`` (first and last stage)
    and ``mp`` (the model-parallel ranks, tp·pp)."""
    t_, c_, d_, p_ = _coords(plan, g)
    j = c_ + plan.cp * d_
    e_, base = j % plan.ep, j - j % plan.ep
    return {
        "tp": tuple(plan.rank(x, c_, d_, p_) for x in range(plan.tp)),
        "dp": tuple(sorted(plan.rank(t_, c, d, p_) for d in range(plan.dp) for c in range(plan.cp))),
        "pp": tuple(plan.rank(t_, c_, d_, r) for r in range(plan.pp)),
        "ep": tuple(plan.rank(t_, x % plan.cp, x // plan.cp, p_) for x in range(base, base + plan.ep)),
        "edp": tuple(plan.rank(t_, x % plan.cp, x // plan.cp, p_) for x in range(e_, plan.cp * plan.dp, plan.ep)),
        "cp_ring": (plan.rank(t_, (c_ + 1) % plan.cp, d_, p_), plan.rank(t_, (c_ - 1) % plan.cp, d_, p_)),
        "embedding": (plan.rank(t_, c_, d_, 0), plan.rank(t_, c_, d_, plan.pp - 1)),
        "mp": tuple(sorted(plan.rank(x, c_, d_, y) for x in range(plan.tp) for y in range(plan.pp))),
    }


def _emit_rank(ranks: _Ranks, g: int, pplan: Any, steps: dict[int, list[tuple[Any, int | None]]],
               p2p_tmpl: dict[str, int], chunk_of: dict[int, int], rank_stages: dict[int, list[int]],
               params: dict[int, float]) -> None:
    """One global rank's step: its pipeline rank's actions with TP collectives, then the data-parallel tail."""
    t, plan = ranks.t, ranks.plan
    t_, c_, d_, p_ = _coords(plan, g)
    groups = rank_groups(plan, g)
    tp_group, dp_group, pp_ranks, ep_group = groups["tp"], groups["dp"], groups["pp"], groups["ep"]
    e_ = (c_ + plan.cp * d_) % plan.ep
    ring = (groups["cp_ring"][0], groups["cp_ring"][1])
    protos = ranks.stage_protos(rank_stages[p_], tp_group, ep_group, hot=e_ == 0 and ranks.hot_lists is not
                                ranks.lists, ring=ring if plan.cp > 1 else (-1, -1),
                                tp_ring=(tp_group[(t_ + 1) % plan.tp], tp_group[(t_ - 1) % plan.tp])
                                if t.tp_comm_overlap else (-1, -1), odd=(c_ % 2 == 1, t_ % 2 == 1),
                                dp_group=dp_group if t.use_torch_fsdp2 else ())
    em = _Emitter(ranks.table, pplan, protos, p2p_tmpl, chunk_of, g, 0, ranks=pp_ranks, name_ids=ranks.name_ids,
                  placed_ids=ranks.placed_ids, shared_p2p_tags=True, fresh=ranks.fresh, fresh_strs=ranks.fresh_strs,
                  orders=ranks.orders, p2p_ids=ranks.p2p_ids, run_cache=ranks.run_cache,
                  megatron_overlap=megatron_overlapped(pplan))
    multi = len(dp_group) > 1
    fsdp = t.use_torch_fsdp2 and multi  # FSDP2 reduce-scatters each unit's gradients inside the backward
    shard = plan.dp * plan.cp if t.use_distributed_optimizer or fsdp else 1
    # FSDP2's gradients are in the parameters' dtype (no MixedPrecisionPolicy: training_fsdp.with_fsdp), one rank
    # or several (Megatron wraps the model whatever the group's size)
    grad_e = DTYPE_BYTES[plan.dtype if t.use_torch_fsdp2 else plan.grad_dtype]
    mine = sum(params[s] for s in rank_stages[p_])
    reduce = "reduce_scatter" if t.use_distributed_optimizer else "all_reduce"
    edp_group = groups["edp"]
    if multi and t.overlap_param_gather:  # the next step's forward dispatches them; here at the step's start
        _param_gathers_at_start(ranks, g, rank_stages[p_], params, dp_group, edp_group)
    grads: list[int] = []
    if multi and t.overlap_grad_reduce and not fsdp:
        bounds = {s: ranks.buckets(s, chunk_of[s] == 0) for s in rank_stages[p_]}
        if ranks.last_bwd is None:
            ranks.last_bwd = last_backward(pplan)

        def bucket(s: int, b: tuple[int, float], nid: int) -> None:
            # Megatron Core's start_grad_sync first scales the bucket by 1/(dp·cp) (read and write, on the compute
            # stream), as the tail's grad_buffer_scale does without overlap
            nid = ranks.one("compute", f"grad_buffer_scale_s{s}_b{b[0]}", g, (), 2 * b[1] * grad_e,
                            plan.grad_dtype, (nid,), stream="compute", tags=OPT_STEP_TAG)
            grads.append(ranks.one(reduce, f"dp_grad_{reduce}_s{s}_b{b[0]}", g, dp_group, b[1] * grad_e,
                                   plan.grad_dtype, (nid,)))

        reduce_after_last_backward(em, ranks.last_bwd, bounds, bucket)
    for act, bid in steps[p_]:
        em.action(act, bid)
    last = () if em.last_compute is None else (em.last_compute,)
    experts = sum(ranks.held[s]["experts"] for s in rank_stages[p_])
    # the parameters the rank's optimizer steps: the distributed optimizer shards the dense state over the dp·cp
    # ranks and the experts' over their own data-parallel group (Megatron Core's DDP builds the expert buffers on
    # ``intra_expt_dp_group``; distrib_optimizer.py shards each buffer over its group)
    stepped = (mine - experts) / shard + experts / (len(edp_group) if t.use_distributed_optimizer else 1)
    if fsdp:  # every parameter (experts' too: ep = 1) is a 1/(dp·cp) shard; the reductions ran in the backward
        stepped, experts, multi = mine / shard, 0.0, False
    # the gradient buffer divided by the data-parallel size before it is reduced (Megatron's DDP:
    # ``buffer_.data /= data_parallel_world_size`` in ``allreduce_gradients``, 2020-23; Megatron Core's
    # ``gradient_scaling_factor``, 1/(dp·cp) for the experts' buffers too): one read and one write of the rank's
    # gradients (with ``overlap_grad_reduce`` each dense bucket is scaled before its reduction, ``bucket`` above;
    # the experts' here)
    scaled = experts if t.overlap_grad_reduce else mine
    if multi and scaled:
        last = (ranks.one("compute", "grad_buffer_scale", g, (), 2 * grad_e * scaled, plan.grad_dtype, last,
                          stream="compute", tags=OPT_STEP_TAG),)
    if multi and not t.overlap_grad_reduce:
        grads.append(ranks.one(reduce, f"dp_grad_{reduce}", g, dp_group, (mine - experts) * grad_e,
                               plan.grad_dtype, last))
    if experts and len(edp_group) > 1:  # the experts' gradients, over the expert data-parallel group
        grads.append(ranks.one(reduce, f"dp_expert_grad_{reduce}", g, edp_group, experts * grad_e,
                               plan.grad_dtype, last))
    wait = tuple(grads) or last
    if plan.pp > 1 and not t.untie_embeddings_and_output_weights and p_ in (0, plan.pp - 1):
        grp = groups["embedding"]
        emb = plan.vocab * t.hidden_size / plan.tp * grad_e
        wait = (ranks.one("all_reduce", "embedding_grad_allreduce", g, grp, emb, plan.grad_dtype, wait,
                          stream="compute"),)
    # the optimizer's synchronisations (megatron/core/optimizer/optimizer.py): under fp16 the found-inf flag of the
    # loss scaler, then the gradient norm of --clip-grad (default 1.0), each one fp32 all-reduce over the
    # grad-stats group: the model-parallel ranks, or with the distributed optimizer every rank of its instance
    # (distrib_optimizer.py get_grad_stats_parallel_group)
    # (with FSDP2 the gradients are sharded over the dp·cp ranks as the distributed optimizer's are: every rank)
    stats = tuple(range(len(ranks.spec_world()))) if t.use_distributed_optimizer or fsdp else groups["mp"]
    # each preceded by the kernels over the rank's (shard of the) gradients it reduces, memory-bound by bytes a
    # parameter (megatron/core/optimizer/optimizer.py, MixedPrecisionOptimizer.prepare_grads / step): 16-bit
    # gradients copied to the fp32 main gradients (read grad_e, write 4; none when they are fp32 already), under
    # fp16 the loss scaler's unscale-and-check (torch._amp_foreach_non_finite_check_and_unscale_: read and write
    # 4), then the gradient norm's multi_tensor_l2norm (read 4); clipping's rescale is data-dependent (only when
    # the norm exceeds --clip-grad) and left out
    n = stepped
    passes: list[tuple[str, float, str | None]] = [("optimizer_grad_copy", (grad_e + 4) * n, None)] \
        if grad_e != 4 else []
    if plan.dtype == "fp16":
        passes += [("optimizer_unscale", 8 * n, None), ("optimizer_found_inf", 4, "all_reduce")]
    passes += [("optimizer_grad_norm_local", 4 * n, None), ("optimizer_grad_norm", 4, "all_reduce")]
    for name, nbytes, coll in passes:
        if coll is None:
            wait = (ranks.one("compute", name, g, (), nbytes, "fp32", wait, stream="compute", tags=OPT_STEP_TAG),)
        elif len(stats) > 1:
            wait = (ranks.one("all_reduce", name, g, stats, nbytes, "fp32", wait, stream="compute", tags=OPT_TAG),)
    # fused Adam on the rank's shard, on fp32 main parameters and gradients (the 16-bit gradients were copied to
    # fp32 above): reads the gradient, the master weight and two moments, writes those three (4 bytes each)
    moved = (4 + 3 * 4 + 3 * 4) * stepped
    opt = ranks.one("compute", "optimizer_step", g, (), moved, "fp32", wait, stream="compute", tags=OPT_STEP_TAG)
    gathers = [("dp_param_allgather", dp_group, mine - experts), ("dp_expert_param_allgather", edp_group, experts)] \
        if multi and t.use_distributed_optimizer and not t.overlap_param_gather else []
    _after_step(ranks, g, opt, mine, stepped, [x for x in gathers if x[2] and len(x[1]) > 1],
                zero=not t.use_torch_fsdp2)
