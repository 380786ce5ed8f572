"""The ``pipeline:`` block of a schedule: its schema (what it expands into is planned by
:mod:`schedsim.lower.pipeline_plan`).

A pipeline block names a schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V,
DualPipeV, or custom per-rank action lists / a torch pipeline CSV), its size
(p ranks, v chunks per rank, m microbatches) and what one stage costs: explicit
op lists for forward (F), backward-input (I) and backward-weight (W), or a
transformer-layer description. :func:`schedsim.lower.pipeline.expand_pipeline` turns it into
per-rank ops, so ``predict``, the static checks and the executor treat it like any DAG:

* compute actions become ops on stream ``compute``, named ``F<stage>.<mb>.<op>``
  (``B`` = I then W for a full backward), tagged ``pp_op``, ``stage``, ``mb``,
  ``chunk``;
* each cross-rank stage boundary becomes a send/recv pair placed as Megatron
  issues it (recv just before the compute that needs it, send just after the
  compute that produced it: :func:`schedsim.pipeline.comms.add_p2p`);
  ``p2p: batched`` (Megatron ``batch_p2p_comm``: one ``batch_isend_irecv``
  per call, waited before the next compute) puts sends on stream ``pp_send``
  and recvs on ``pp_recv`` so the two halves of a batch progress together, and
  the next compute waits for the batch's sends as well as its recvs, and a
  batch is posted only after the compute before it finished (``batch_p2p_sync``
  calls ``torch.cuda.synchronize()``);
  ``overlapped`` (``overlap_p2p_comm``: lone isend/irecv, each pair of ranks its
  own communicator and stream, ``ProcessGroupNCCL.cpp`` ``pointToPoint``) puts
  them on one stream per peer and direction (``pp_sendF_r<peer>``,
  ``pp_recvB_r<peer>``, ...) and compute waits only for the recv it consumes.
  Default: batched for 1F1B (Megatron-LM forces ``overlap_p2p_comm`` off
  without interleaving and batches by default); overlapped for interleaved 1F1B
  (Megatron's default there) and for GPipe, ZB-H1, ZB-V and DualPipeV (torch
  pipelining issues their p2p asynchronously). Modelling a batch as two streams is an approximation of one
  ``ncclGroup``;
* the issue order of the p2p follows the framework that runs the schedule: Megatron for 1F1B and
  interleaved 1F1B (:func:`schedsim.pipeline.comms.megatron_interleaved_batched` for interleaving,
  each call's lone ops in ``_p2p_ops`` order when not batched), torch's ``_add_send_recv`` for GPipe,
  ZB-H1, ZB-V, DualPipeV, interleaved ZB and custom orders
  (:func:`schedsim.pipeline.comms.torch_add_send_recv`, each p2p action its own
  ``batch_isend_irecv``). Batched ops carry a ``p2p_batch`` name (``Op.nccl_group``) (see :mod:`schedsim.graph.nccl`), and
  the static checks verify the order under NCCL's rules;
* the order is validated first (:func:`schedsim.pipeline.validate`): missing or
  repeated microbatches, W before I, a stage on two ranks, too few
  microbatches, and cross-rank p2p wait cycles all fail with the rank × step grid.

Transformer stages follow Megatron-LM's GPT layer (TP=1, ``--transformer-impl
local``): per layer, forward = LN, QKV GEMM, two batched attention GEMMs,
softmax, projection GEMM, residual, LN, fc1 (×2 columns with SwiGLU), GeLU, fc2,
residual; backward-input = the data-gradient GEMMs (2 per weight GEMM pattern,
4 attention GEMMs) and elementwise backward; backward-weight = the four
weight-gradient GEMMs. Layer FLOPs match Narayanan et al., SC'21 (arXiv
2104.04473) eq. 1 (24·B·s·h²·(1 + s/6h) per forward pass without the logits
term). The first stage adds the embedding lookup, the last stage the logits
GEMM and cross-entropy. Stored activations per layer and microbatch are
``s·b·h·(34 + 5·a·s/h)`` bytes (Korthikanti et al., arXiv 2205.05198, no
recomputation, 16-bit).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedsim._pydantic import plugins_off
from schedsim.units import DTYPE_BYTES

__all__ = ["PipelineSpec", "TransformerSpec", "StageOps"]


# Default factories are lambdas, not list or dict: see the note in schedsim.spec.model. The models are built
# after their definitions, with pydantic's plugin discovery off (see schedsim.spec.model).
class _B(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class StageOps(_B):
    """Explicit per-stage cost: op lists (same fields as ordinary ops, without name/ranks/stream/deps)."""

    forward: list[dict[str, Any]] = Field(description="Ops of one forward (F) of one stage on one microbatch.")
    backward_input: list[dict[str, Any]] = Field(default_factory=lambda: [], description="Ops of I (input gradient).")
    backward_weight: list[dict[str, Any]] = Field(default_factory=lambda: [], description="Ops of W (weight gradient).")


class TransformerSpec(_B):
    """A GPT-style model split over the pipeline stages (Megatron-LM shapes)."""

    layers: int = Field(gt=0, description="Total transformer layers; split evenly over p·v stages.")
    hidden: int = Field(gt=0)
    ffn: int = Field(gt=0)
    heads: int = Field(gt=0)
    seq: int = Field(gt=0, description="Sequence length s.")
    micro_batch: int = Field(default=1, gt=0, description="Micro batch size b.")
    dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    vocab: int | None = Field(default=None, description="Padded vocabulary; adds embedding and logits (50304 for GPT-2).")
    swiglu: bool = Field(default=False, description="fc1 has 2·ffn columns (SwiGLU).")

    @model_validator(mode="after")
    def _heads_divide(self) -> Any:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


class PipelineSpec(_B):
    """The ``pipeline:`` block."""

    schedule: str = Field(description="gpipe | 1f1b | interleaved_1f1b | zb_h1 | zbv | dualpipev | custom "
                          "(torch names accepted).")
    p: int = Field(gt=0, description="Pipeline ranks.")
    m: int = Field(gt=0, description="Microbatches per step.")
    v: int | None = Field(default=None, gt=0, description="Virtual stages (chunks) per rank.")
    group_size: int | None = Field(default=None, description="Megatron microbatch_group_size_per_vp_stage.")
    placement: Literal["loop", "v"] | None = Field(default=None, description="loop (interleaved) or v (ZB-V, DualPipeV).")
    actions: dict[int, str | list[str]] | None = Field(default=None, description="Custom per-rank action lists "
                                                       "in torch notation, e.g. {0: '0F0 0F1 0B0 0B1'}.")
    csv: str | None = Field(default=None, description="A torch pipeline CSV (compute_only), relative to the schedule.")
    stage: StageOps | None = None
    transformer: TransformerSpec | None = None
    activation_bytes: int | None = Field(default=None, ge=0, description="p2p message size; default "
                                         "seq × micro_batch × hidden × bytes per element.")
    activation_memory_bytes: int | None = Field(default=None, ge=0, description="Activations one stage stores "
                                                "per microbatch; default from the transformer, else activation_bytes.")
    p2p: Literal["batched", "overlapped"] | None = None
    data_parallel: int = Field(default=1, gt=0, description="Pipeline replicas; adds a gradient all_reduce.")
    grad_allreduce_bytes: int | None = Field(default=None, ge=0, description="Per-rank gradient bytes for the "
                                             "data-parallel all_reduce; default 2 bytes × parameters.")
    tied_embedding_allreduce: bool = Field(default=False, description="All-reduce the embedding gradient between "
                                           "the first and last stage (Megatron, untied=False).")
    optimizer: bool = Field(default=False, description="Add the optimizer step (18 bytes/param moved).")

    @model_validator(mode="after")
    def _cost_given(self) -> Any:
        if self.schedule != "custom" and (self.actions is not None or self.csv is not None):
            raise ValueError("`actions`/`csv` are only read with schedule: custom; set schedule: custom or remove them")
        if (self.stage is None) == (self.transformer is None):
            raise ValueError("give exactly one of `stage` (op lists) or `transformer`")
        if self.schedule == "custom" and self.actions is None and self.csv is None:
            raise ValueError("schedule: custom needs `actions` or `csv`")
        return self


with plugins_off():  # the parts first, so PipelineSpec reuses their schemas
    for _model in (StageOps, TransformerSpec, PipelineSpec):
        _model.model_rebuild()


# ---------------------------------------------------------------- transformer
def _layer_ops(t: TransformerSpec, tp: int = 1, sp: bool = False,
               groups: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """One layer's kernels per phase (F, I, W) on one of ``tp`` tensor-parallel ranks (Megatron-LM's column-
    parallel QKV and fc1, row-parallel projection and fc2: the heads, ``ffn`` and the QKV columns divided by
    ``tp``); with sequence parallelism (``sp``) the LayerNorms, residuals and the activation they touch hold
    ``s/tp`` tokens, otherwise every TP rank runs them on the whole sequence (Korthikanti et al. 2022 §4.2.2).
    ``groups``: query groups g (GQA: QKV has ``h + 2·h·g/a`` columns; default a). The TP collectives are not
    here: :mod:`schedsim.lower.training` places them."""
    s, b, h, f, a = t.seq, t.micro_batch, t.hidden, t.ffn, t.heads
    e = DTYPE_BYTES[t.dtype]
    T = s * b
    Tn = T // tp if sp else T  # tokens of the LayerNorms and residuals on one TP rank
    f1 = 2 * f if t.swiglu else f
    qkv = (h + 2 * h * (groups or a) // a) // tp
    ba = b * a // tp
    dt = t.dtype

    def mm(name: str, m: int, n: int, k: int, batch: int = 1) -> dict[str, Any]:
        return {"name": name, "kind": "matmul", "m": m, "n": n, "k": k, "batch": batch, "dtype": dt}

    def ew(name: str, nbytes: int) -> dict[str, Any]:
        return {"name": name, "kind": "compute", "bytes": nbytes, "dtype": dt}

    fwd = [
        ew("ln1", 2 * Tn * h * e), mm("qkv", T, qkv, h), mm("scores", s, s, h // a, ba),
        ew("softmax", 3 * ba * s * s * e), mm("attn_v", s, h // a, s, ba), mm("proj", T, h, h // tp),
        ew("residual1", 3 * Tn * h * e), ew("ln2", 2 * Tn * h * e), mm("fc1", T, f1 // tp, h),
        ew("act", (f1 + f) // tp * T * e),  # GeLU reads f, writes f; SwiGLU reads 2f, writes f
        mm("fc2", T, h, f // tp), ew("residual2", 3 * Tn * h * e),
    ]
    bwd_i = [
        ew("residual2_bwd", 3 * Tn * h * e), mm("fc2_dgrad", T, f // tp, h), ew("act_bwd", 3 * T * f1 // tp * e),
        mm("fc1_dgrad", T, h, f1 // tp), ew("ln2_bwd", 4 * Tn * h * e), mm("proj_dgrad", T, h // tp, h),
        mm("attn_v_dgrad", s, s, h // a, ba), mm("attn_v_dgrad_v", s, h // a, s, ba),
        ew("softmax_bwd", 4 * ba * s * s * e), mm("scores_dgrad_q", s, h // a, s, ba),
        mm("scores_dgrad_k", s, h // a, s, ba), mm("qkv_dgrad", T, h, qkv), ew("ln1_bwd", 4 * Tn * h * e),
    ]
    bwd_w = [mm("fc2_wgrad", f // tp, h, T), mm("fc1_wgrad", h, f1 // tp, T), mm("proj_wgrad", h // tp, h, T),
             mm("qkv_wgrad", h, qkv, T)]
    return {"F": fwd, "I": bwd_i, "W": bwd_w}


def _transformer_stage(t: TransformerSpec, layers: int, first: bool, last: bool) -> dict[str, list[dict[str, Any]]]:
    ops = _layer_ops(t)
    out: dict[str, list[dict[str, Any]]] = {}
    for key, lst in ops.items():
        out[key] = [{**o, "repeat": layers} for o in lst]
    e = DTYPE_BYTES[t.dtype]
    T, h = t.seq * t.micro_batch, t.hidden
    if t.vocab:
        V = t.vocab
        if first:
            out["F"].insert(0, {"name": "embedding", "kind": "compute", "bytes": 2 * T * h * e, "dtype": t.dtype})
            out["W"].append({"name": "embedding_wgrad", "kind": "compute", "bytes": 3 * T * h * e, "dtype": t.dtype})
        if last:
            out["F"] += [{"name": "logits", "kind": "matmul", "m": T, "n": V, "k": h, "dtype": t.dtype},
                         {"name": "cross_entropy", "kind": "compute", "bytes": 3 * T * V * 4, "dtype": "fp32"}]
            out["I"].insert(0, {"name": "logits_dgrad", "kind": "matmul", "m": T, "n": h, "k": V, "dtype": t.dtype})
            out["W"].insert(0, {"name": "logits_wgrad", "kind": "matmul", "m": h, "n": V, "k": T, "dtype": t.dtype})
    return out


def _params_per_layer(t: TransformerSpec) -> int:
    f1 = 2 * t.ffn if t.swiglu else t.ffn
    return 4 * t.hidden * t.hidden + t.hidden * f1 + t.ffn * t.hidden + 4 * t.hidden


def _act_memory_per_layer(t: TransformerSpec) -> int:
    """Korthikanti et al. 2022 (arXiv 2205.05198) eq. 2: s·b·h·(34 + 5·a·s/h) bytes, 16-bit, no recompute."""
    s, b, h, a = t.seq, t.micro_batch, t.hidden, t.heads
    return int(s * b * h * (34 + 5 * a * s / h))
