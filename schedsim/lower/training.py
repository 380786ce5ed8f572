"""Lowering of a ``training:`` block (:mod:`schedsim.spec.training_block`) into every rank's ops.

One Megatron-LM training step, per global rank (Megatron's rank order ``tp-cp-ep-dp-pp``, tp fastest:
:meth:`~schedsim.spec.training_block.TrainingPlan.rank`):

* **pipeline**: the order of Megatron's ``forward_backward_pipelining_without_interleaving`` (1F1B) or, with
  ``num_layers_per_virtual_pipeline_stage``, ``..._with_interleaving``, from the pipeline block's generators and
  p2p placement (:func:`schedsim.lower.pipeline_plan.plan_of`, :mod:`schedsim.lower.pipeline`'s emitter), the
  pipeline peers being the ranks that differ only in their pp coordinate. p2p messages are ``s·b·h`` elements
  (``s/tp·b·h`` with sequence parallelism);
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
  all-reduces (reduce-scatters with SP) its output, the cross-entropy all-reduces three ``s·b`` fp32 vectors
  (``tensor_parallel/cross_entropy.py``: max logit, predicted logit, sum of exponentials), and the output
  layer's input gradient is all-reduced (reduce-scattered with SP);
* **recomputation**: ``full`` reruns a layer's forward (its TP collectives included) before its backward, for
  every layer (``uniform``) or the first ``recompute_num_layers`` of each chunk (``block``); ``selective``
  reruns the attention core (scores, softmax, attention·V) (Korthikanti et al. 2022 §5);
* **data parallelism** (Megatron ``distributed/``, ``finalize_model_grads.py``): the gradients of the rank's
  parameters (``/tp``), in fp32 under bf16, all-reduced over the data-parallel group (dp × cp ranks with the
  same tp and pp coordinates) or, with ``use_distributed_optimizer``, reduce-scattered. With
  ``overlap_grad_reduce`` they are reduced in Megatron's buckets (:meth:`_Ranks.buckets`: 40 M parameters or
  more in the first model chunk, one bucket per later chunk), each issued on stream ``dp_comm`` right after the
  last microbatch's weight gradient that completes it, so the rest of the backward overlaps it; without, one
  reduction after the rank's last compute. Then the word-embedding gradient all-reduce between the first and
  last pipeline stage (tied embeddings, ``pp > 1``), the optimizer's synchronisations, the optimizer step
  (fused Adam: reads the gradient, the fp32 master weight and two moments, writes the three and the parameter
  copy, on the rank's shard with the distributed optimizer) and, with the distributed optimizer, the parameter
  all-gather over the data-parallel group (with ``overlap_param_gather`` issued at the start of the step on
  ``dp_comm``, as the next step's forward would dispatch it, without holding the first forward back).

``CUDA_DEVICE_MAX_CONNECTIONS`` is 1 when ``tp > 1`` (Megatron-LM ``arguments.py`` asserts it: "Using tensor
model parallelism or context parallelism require setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS
to 1"), unless the schedule's ``env`` says otherwise.

The optimizer step is preceded by its synchronisations: under fp16 the loss scaler's found-inf all-reduce, then
the gradient norm's (``--clip-grad``), each one fp32 value over the model-parallel ranks (every rank with the
distributed optimizer).

Not modelled yet (issue 36): Megatron issues the backward's TP collectives asynchronously (the data gradient's
all-reduce or reduce-scatter overlaps the weight-gradient GEMM, ``tensor_parallel/layers.py``
``LinearWithGradAccumulationAndAsyncCommunication``); here they run between the data-gradient GEMMs on the
compute stream, all weight gradients after them, so backward TP communication is exposed in full. Also not yet:
the all-gather of the sequence-parallel input that the weight gradient redoes, context and expert
parallelism and TP communication overlap (refused by :func:`schedsim.spec.training_block.check_training`).
"""

from __future__ import annotations

from typing import Any

from schedsim.errors import PipelineScheduleError, SchedsimError, SpecError
from schedsim.graph.info import PipelineInfo
from schedsim.graph.ops import Op
from schedsim.lower.pipeline import _Emitter, _interleaved_steps, _lowered_steps, _stage_proto
from schedsim.lower.pipeline_plan import StageCost, block_info, plan_of, split_fix
from schedsim.lower.table import Table
from schedsim.spec.model import ScheduleSpec
from schedsim.spec.pipeline_block import PipelineSpec, TransformerSpec, _layer_ops
from schedsim.spec.training_block import TrainingPlan, TrainingSpec, training_plan
from schedsim.units import DTYPE_BYTES

__all__ = ["expand_training", "stage_lists", "TP_TAG", "DP_TAG"]

#: Tags of the data-parallel (and tied-embedding) gradient reductions and the parameter all-gather.
DP_TAG = (("comm", "dp"),)
#: Tags of the optimizer's found-inf and gradient-norm all-reduces.
OPT_TAG = (("comm", "optimizer"),)
#: Tag the report reads to tell TP collectives apart (they also carry their action's pipeline tags).
TP_TAG = "tp_"
DP_STREAM = "dp_comm"

Entry = dict[str, Any]  # a compute op dict, or a collective {"name", "kind", "bytes", "dtype", "tp": True}


def _coll(name: str, kind: str, nbytes: float, dtype: str) -> Entry:
    return {"name": name, "kind": kind, "bytes": float(nbytes), "dtype": dtype, "tp": True}


def _with_tp(ops: list[Entry], phase: str, plan: TrainingPlan, nbytes: float, dtype: str) -> list[Entry]:
    """One layer's ``phase`` kernels with its TP collectives placed (module docstring)."""
    if plan.tp == 1:
        return list(ops)
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


def _renamed(ops: list[Entry], prefix: str) -> list[Entry]:
    return [{**o, "name": prefix + o["name"]} for o in ops]


def _recomputed(t: TrainingSpec, k: int, lps: int) -> bool:
    """Whether layer ``k`` (0-based within its chunk of ``lps`` layers) reruns its forward (full recompute)."""
    if t.recompute_granularity != "full":
        return False
    return t.recompute_method == "uniform" or k < (t.recompute_num_layers or 0)


def stage_lists(t: TrainingSpec, plan: TrainingPlan, stage: int, num_stages: int) -> dict[str, list[Entry]]:
    """Per phase (F, I, W), one stage chunk's ops on one TP rank in issue order: compute op dicts and TP
    collectives (``"tp": True``), layer by layer (the backward in reverse layer order), names ``l<k>.<op>``."""
    tr = _transformer(t, plan)
    layer = _layer_ops(tr, plan.tp, plan.sp, plan.groups)
    e = DTYPE_BYTES[plan.dtype]
    s, b, h, V = t.seq_length, t.micro_batch_size, t.hidden_size, plan.vocab
    T = s * b
    act = T * h * e
    lps = plan.stage_layers[stage]
    fwd = _with_tp(layer["F"], "F", plan, act, plan.dtype)
    bwd = _with_tp(layer["I"], "I", plan, act, plan.dtype)
    core = [o for o in layer["F"] if o["name"] in ("scores", "softmax", "attn_v")]
    out: dict[str, list[Entry]] = {"F": [], "I": [], "W": []}
    rs_or_ar = "reduce_scatter" if plan.sp else "all_reduce"
    dt = plan.dtype
    if stage == 0:
        out["F"].append({"name": "embedding", "kind": "compute", "bytes": 2 * T * h * e, "dtype": dt})
        if plan.tp > 1:
            out["F"].append(_coll("tp_embedding", rs_or_ar, act, dt))
    for k in range(lps):
        out["F"] += _renamed(fwd, f"l{k}.")
    for k in reversed(range(lps)):
        pre = (fwd if _recomputed(t, k, lps) else core if t.recompute_granularity == "selective" else [])
        out["I"] += _renamed(pre, f"l{k}.re_") + _renamed(bwd, f"l{k}.")
        out["W"] += _renamed(layer["W"], f"l{k}.")
    if stage == num_stages - 1:
        head_f: list[Entry] = [{"name": "final_ln", "kind": "compute", "bytes": 2 * T * h * e // (plan.tp if plan.sp
                                                                                               else 1), "dtype": dt}]
        if plan.sp:
            head_f.append(_coll("tp_ag_logits", "all_gather", act, dt))
        head_f.append({"name": "logits", "kind": "matmul", "m": T, "n": V // plan.tp, "k": h, "dtype": dt})
        head_f.append({"name": "cross_entropy", "kind": "compute", "bytes": 3 * T * V // plan.tp * 4, "dtype": "fp32"})
        if plan.tp > 1:
            head_f += [_coll(f"tp_ce_allreduce{i}", "all_reduce", T * 4, "fp32") for i in range(3)]
        out["F"] += head_f
        head_i: list[Entry] = [{"name": "logits_dgrad", "kind": "matmul", "m": T, "n": h, "k": V // plan.tp,
                                "dtype": dt}]
        if plan.tp > 1:
            head_i.append(_coll("tp_logits_dgrad", rs_or_ar, act, dt))
        out["I"] = head_i + out["I"]
        out["W"].insert(0, {"name": "logits_wgrad", "kind": "matmul", "m": h, "n": V // plan.tp, "k": T,
                            "dtype": dt})
    if stage == 0:
        out["W"].append({"name": "embedding_wgrad", "kind": "compute", "bytes": 3 * T * h * e, "dtype": dt})
    return out


def _transformer(t: TrainingSpec, plan: TrainingPlan) -> TransformerSpec:
    return TransformerSpec(layers=t.num_layers, hidden=t.hidden_size, ffn=plan.ffn, heads=t.num_attention_heads,
                           seq=t.seq_length, micro_batch=t.micro_batch_size, dtype=plan.dtype,  # type: ignore[arg-type]
                           vocab=plan.vocab, swiglu=t.swiglu)


def _held(t: TrainingSpec, plan: TrainingPlan, num_stages: int) -> dict[int, dict[str, int]]:
    """Parameters of the whole model per stage chunk, split as :func:`schedsim.pipeline.memory.stage_params`
    splits them (layers, embedding on the first, output layer on the last when untied or, tied, Megatron's copy
    of the word embedding there), with each stage's own layer count (uneven first/last stages)."""
    from schedsim.pipeline.memory import stage_params
    from schedsim.spec.training_block import _params_per_layer

    per = _params_per_layer(t, plan)
    held = stage_params(num_stages, 1, per, hidden=t.hidden_size, seq=t.seq_length, vocab=plan.vocab)
    return {s: {**d, "layers": per * plan.stage_layers[s]} for s, d in held.items()}


def _stage_params(t: TrainingSpec, plan: TrainingPlan, num_stages: int) -> dict[int, float]:
    """Parameters one TP rank holds per stage chunk (:func:`_held` divided by tp)."""
    return {s: sum(d.values()) / plan.tp for s, d in _held(t, plan, num_stages).items()}


class _Ranks:
    """Templates and ids shared by the ranks of one lowering."""

    def __init__(self, spec: ScheduleSpec, table: Table, t: TrainingSpec, plan: TrainingPlan, num_stages: int):
        self.spec, self.table, self.t, self.plan = spec, table, t, plan
        self.lists = {s: stage_lists(t, plan, s, num_stages) for s in range(num_stages)}
        self.compute: dict[tuple[int, str, int], int] = {}
        self.protos: dict[tuple[int, ...], dict[tuple[int, str], list[tuple[str, int]]]] = {}

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
        t, plan = self.t, self.plan
        held = _held(t, plan, len(self.lists))[stage]
        lps = plan.stage_layers[stage]
        own = {"logits_wgrad": held["lm_head"], "embedding_wgrad": held["embedding"]}
        size = max(40_000_000, 1_000_000 * plan.dp * plan.cp) if bucketing else float("inf")
        out: dict[str, tuple[int, float]] = {}
        acc = 0.0
        names = [str(o["name"]) for o in self.lists[stage]["W"]]
        for name in names:
            acc += own.get(name, held["layers"] / lps if name.endswith("qkv_wgrad") else 0) / plan.tp
            if acc >= size or (name == names[-1] and acc):
                out[name] = (len(out), acc)
                acc = 0.0
        return out

    def stage_protos(self, stages: list[int], group: tuple[int, ...]) -> dict[tuple[int, str], list[tuple[str, int]]]:
        """(stage, phase) -> [(op name, template id)] for a TP group (its collectives' templates name it)."""
        key = (*stages, -1, *group)
        got = self.protos.get(key)
        if got is not None:
            return got
        out: dict[tuple[int, str], list[tuple[str, int]]] = {}
        for s in stages:
            for phase, lst in self.lists[s].items():
                row: list[tuple[str, int]] = []
                for k, o in enumerate(lst or [{"name": "noop", "kind": "compute", "duration_us": 0}]):
                    if o.get("tp"):
                        op = Op(name=o["name"], rank=group[0], kind=o["kind"], stream="compute", seq=0, group=group,
                                nbytes=o["bytes"], dtype=o["dtype"], source="training")
                        row.append((o["name"], self.template(op)))
                        continue
                    tid = self.compute.get((s, phase, k))
                    if tid is None:
                        tid = self.compute[(s, phase, k)] = self.table.template(_stage_proto(self.spec, o, k, phase))
                    row.append((str(o["name"]), tid))
                out[(s, phase)] = row
        self.protos[key] = out
        return out

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


def expand_training(spec: ScheduleSpec, table: Table) -> PipelineInfo:
    """Write every rank's ops of the spec's ``training:`` block into ``table`` (module docstring).

    Returns the :class:`~schedsim.graph.info.PipelineInfo` of its pipeline (``p`` = pp, ``dp`` = the pipeline
    replicas tp·cp·dp, ``activation_memory_bytes`` per Korthikanti et al. for one stage chunk).

    Raises
    ------
    SpecError
        A pipeline the generators refuse (too few microbatches for interleaving), named on
        ``training.global_batch_size``.
    """
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    tr = _transformer(t, plan)
    pb = PipelineSpec(schedule=plan.schedule, p=plan.pp, m=plan.m, v=plan.v if plan.v > 1 else None, transformer=tr,
                      p2p=None)
    try:
        pplan = plan_of(spec, pb, reference=True, megatron=True)
        steps = _interleaved_steps(spec, pb, pplan) if plan.v > 1 else _lowered_steps(pplan, columns=False)
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
    ranks = _Ranks(spec, table, t, plan, ns)
    elem = DTYPE_BYTES[plan.dtype]
    act_bytes = t.seq_length * t.micro_batch_size * t.hidden_size * elem // (plan.tp if plan.sp else 1)
    p2p_tmpl = {k: table.template(Op(name=k, rank=0, kind=k, stream="", seq=0, nbytes=float(act_bytes),
                                     dtype=plan.dtype, source="training")) for k in ("send", "recv")}
    rank_stages = {r: sorted(st for st, rr in pplan.s2r.items() if rr == r) for r in range(plan.pp)}
    chunk_of = {st: rank_stages[r].index(st) for st, r in pplan.s2r.items()}
    params = _stage_params(t, plan, ns)
    for g in range(spec.world_size):
        _emit_rank(ranks, g, pplan, steps, p2p_tmpl, chunk_of, rank_stages, params)
    from schedsim.spec.training_block import act_bytes_per_layer

    cost = StageCost({}, act_bytes, int(act_bytes_per_layer(t, plan) * plan.stage_layers[0]), dtype=plan.dtype)
    info = block_info(pb.model_copy(update={"transformer": None, "stage": None}), pplan, cost)
    from dataclasses import replace

    return replace(info, dp=spec.world_size // plan.pp, rank_stride=plan.tp * plan.cp * plan.dp)


def _coords(plan: TrainingPlan, g: int) -> tuple[int, int, int, int]:
    t_ = g % plan.tp
    c_ = g // plan.tp % plan.cp
    d_ = g // (plan.tp * plan.cp) % plan.dp
    return t_, c_, d_, g // (plan.tp * plan.cp * plan.dp)


def _emit_rank(ranks: _Ranks, g: int, pplan: Any, steps: dict[int, list[tuple[Any, int | None]]],
               p2p_tmpl: dict[str, int], chunk_of: dict[int, int], rank_stages: dict[int, list[int]],
               params: dict[int, float]) -> None:
    """One global rank's step: its pipeline rank's actions with TP collectives, then the data-parallel tail."""
    t, plan = ranks.t, ranks.plan
    t_, c_, d_, p_ = _coords(plan, g)
    tp_group = tuple(plan.rank(x, c_, d_, p_) for x in range(plan.tp))
    dp_group = tuple(sorted(plan.rank(t_, c, d, p_) for d in range(plan.dp) for c in range(plan.cp)))
    pp_ranks = tuple(plan.rank(t_, c_, d_, r) for r in range(plan.pp))
    protos = ranks.stage_protos(rank_stages[p_], tp_group)
    em = _Emitter(ranks.table, pplan, protos, p2p_tmpl, chunk_of, g, 0, ranks=pp_ranks)
    shard = plan.dp * plan.cp if t.use_distributed_optimizer else 1
    grad_e, param_e = DTYPE_BYTES[plan.grad_dtype], DTYPE_BYTES[plan.dtype]
    mine = sum(params[s] for s in rank_stages[p_])
    reduce = "reduce_scatter" if t.use_distributed_optimizer else "all_reduce"
    multi = len(dp_group) > 1
    if multi and t.overlap_param_gather:  # the next step's forward dispatches them; here at the step's start
        for s in rank_stages[p_]:
            ranks.one("all_gather", f"dp_param_allgather_s{s}", g, dp_group, params[s] * param_e, plan.dtype, ())
    grads: list[int] = []
    if multi and t.overlap_grad_reduce:
        bounds = {s: ranks.buckets(s, chunk_of[s] == 0) for s in rank_stages[p_]}
        last_mb = pplan.m - 1  # both Megatron schedules run a chunk's backwards in microbatch order

        def bucket(s: int, j: int, phase: str, name: str, nid: int) -> None:
            b = bounds[s].get(name) if phase == "W" and j == last_mb else None
            if b is not None:
                grads.append(ranks.one(reduce, f"dp_grad_{reduce}_s{s}_b{b[0]}", g, dp_group, b[1] * grad_e,
                                       plan.grad_dtype, (nid,)))

        em.on_op = bucket
    for act, bid in steps[p_]:
        em.action(act, bid)
    last = () if em.last_compute is None else (em.last_compute,)
    if multi and not t.overlap_grad_reduce:
        grads.append(ranks.one(reduce, f"dp_grad_{reduce}", g, dp_group, mine * grad_e, plan.grad_dtype, last))
    wait = tuple(grads) or last
    if plan.pp > 1 and not t.untie_embeddings_and_output_weights and p_ in (0, plan.pp - 1):
        grp = (plan.rank(t_, c_, d_, 0), plan.rank(t_, c_, d_, plan.pp - 1))
        emb = plan.vocab * t.hidden_size / plan.tp * grad_e
        wait = (ranks.one("all_reduce", "embedding_grad_allreduce", g, grp, emb, plan.grad_dtype, wait,
                          stream="compute"),)
    # the optimizer's synchronisations (megatron/core/optimizer/optimizer.py): under fp16 the found-inf flag of the
    # loss scaler, then the gradient norm of --clip-grad (default 1.0), each one fp32 all-reduce over the
    # grad-stats group: the model-parallel ranks, or with the distributed optimizer every rank of its instance
    # (distrib_optimizer.py get_grad_stats_parallel_group)
    stats = tuple(range(len(ranks.spec_world()))) if t.use_distributed_optimizer else \
        tuple(sorted(plan.rank(x, c_, d_, y) for x in range(plan.tp) for y in range(plan.pp)))
    if len(stats) > 1:
        for name in (("optimizer_found_inf",) if plan.dtype == "fp16" else ()) + ("optimizer_grad_norm",):
            wait = (ranks.one("all_reduce", name, g, stats, 4, "fp32", wait, stream="compute", tags=OPT_TAG),)
    # fused Adam on the rank's shard: reads grad, fp32 master, two moments; writes those three and the parameter
    moved = (grad_e + 3 * 4 + 3 * 4 + param_e) * mine / shard
    opt = ranks.one("compute", "optimizer_step", g, (), moved, "fp32", wait, stream="compute",
                    tags=(("pp_op", "optimizer"),))
    if multi and t.use_distributed_optimizer and not t.overlap_param_gather:
        ranks.one("all_gather", "dp_param_allgather", g, dp_group, mine * param_e, plan.dtype, (opt,),
                  stream="compute")
