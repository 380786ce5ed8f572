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
  ``batch_isend_irecv``). Batched ops carry a ``p2p_batch`` name (``Op.nccl_group``), and the static checks
  verify the order under NCCL's rules (:mod:`schedsim.lower.checks`);
* the order is validated first (:func:`schedsim.pipeline.validate`): missing or
  repeated microbatches, W before I, a stage on two ranks, too few
  microbatches, and cross-rank p2p wait cycles all fail with the rank × step grid.

Transformer stages follow Megatron-LM's GPT layer (TP=1, ``--transformer-impl
local``), every kernel it launches (:func:`_layer_ops`, shared with the ``training:`` block): per layer,
forward = LN, QKV GEMM and bias add, two batched attention GEMMs, the softmax (fused, or masked_fill then
softmax), the attention dropout, the context's layout copy, projection GEMM, bias-dropout-add, LN, fc1 (×2
columns with SwiGLU), bias-GeLU, fc2, bias-dropout-add; backward-input = the data-gradient GEMMs (2 per weight
GEMM pattern, 4 attention GEMMs) and every elementwise backward (dropouts, bias gradients, LN, residual sums,
softmax, layout copies); backward-weight = the four weight-gradient GEMMs and the QKV bias gradient. The
memory-bound kernels are costed by the bytes they move. Layer FLOPs match Narayanan et al., SC'21 (arXiv
2104.04473) eq. 1 (24·B·s·h²·(1 + s/6h) per forward pass without the logits term). The first stage adds the
embedding lookup and its dropout, the last stage the final LN, the logits GEMM and cross-entropy, each with
its backward (:func:`_head_ops`). Stored activations per layer and microbatch are
``s·b·h·(34 + 5·a·s/h)`` bytes (Korthikanti et al., arXiv 2205.05198, no
recomputation, 16-bit).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedsim._pydantic import no_bool_numbers, plugins_off
from schedsim.units import DTYPE_BYTES

__all__ = ["PipelineSpec", "TransformerSpec", "StageOps", "stage_params"]


# Default factories are lambdas, not list or dict: see the note in schedsim.spec.model. The models are built
# after their definitions, with pydantic's plugin discovery off (see schedsim.spec.model).
class _B(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_number(cls, data: Any) -> Any:
        """A YAML ``true`` / ``false`` given for a number (``m: true``) is refused, as in the ops
        (:class:`schedsim.spec.model._Base`)."""
        return no_bool_numbers(cls.model_fields, data)


class StageOps(_B):
    """Explicit per-stage cost: op lists (the fields of ordinary ops, without ``ranks``). A collective names a
    group of the block (``group: dp``) and runs on stream ``fsdp`` unless it sets ``stream``; ``deps`` name earlier
    ops of the same list (:func:`schedsim.lower.pipeline._stage_row`)."""

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
    attention_dropout: float = Field(default=0.1, ge=0, lt=1, description="Dropout on the attention "
                                     "probabilities (Megatron-LM --attention-dropout, default 0.1); 0: no kernel.")
    hidden_dropout: float = Field(default=0.1, ge=0, lt=1, description="Dropout after the projection and fc2 "
                                  "(Megatron-LM --hidden-dropout, default 0.1); 0: no mask.")
    flash_attention: bool = Field(default=False, description="The attention core as one fused FlashAttention "
                                  "kernel (Megatron-LM --use-flash-attn) instead of its GEMMs, softmax and dropout.")

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
    overlap_grad_reduce: bool = Field(default=False, description="Megatron-LM --overlap-grad-reduce: each model "
                                      "chunk's share of the data-parallel all_reduce issued on dp_comm right "
                                      "after that chunk's last backward (needs data_parallel > 1).")
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
def _layer_ops(t: TransformerSpec, tp: int = 1, sp: bool = False, groups: int | None = None,
               moe: tuple[int, int, tuple[int, ...]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """One layer's kernels per phase (F, I, W) on one of ``tp`` tensor-parallel ranks, every kernel Megatron-LM's
    GPT layer launches (``--transformer-impl local``, its default fusions: ``masked_softmax_fusion``,
    ``bias_gelu_fusion``, ``bias_dropout_fusion``; ``megatron/legacy/model/transformer.py``): column-parallel QKV
    and fc1, row-parallel projection and fc2 (heads, ``ffn`` and the QKV columns divided by ``tp``). With
    sequence parallelism (``sp``) the LayerNorms, the bias-dropout-adds and the residual gradients hold ``s/tp``
    tokens, otherwise every TP rank runs them on the whole sequence (Korthikanti et al. 2022 §4.2.2). ``groups``:
    query groups g (GQA: QKV has ``h + 2·h·g/a`` columns; default a). The TP collectives are not here:
    :mod:`schedsim.lower.training` places them.

    GEMMs are ``matmul`` ops; every other kernel is a memory-bound ``compute`` op of the bytes it reads and
    writes (the GPU model's roofline: bytes / HBM bandwidth, :mod:`schedsim.gpu.cost`), ``e`` bytes an element of
    the activation dtype and 1 byte an element of a dropout mask (``torch.native_dropout``'s bool mask). With
    ``T = s·b`` tokens, ``Tn`` = T/tp with SP else T, ``q`` the QKV columns and ``S = (b·a/tp)·s²`` the
    attention scores of the rank:

    * forward: ``ln1`` 2·Tn·h·e; QKV GEMM and its bias add (``ColumnParallelLinear`` adds a bias it does not
      skip: ``output + bias``) 2·T·q·e; scores (batched GEMM); the softmax, fused (``scaled_upper_triang_masked
      _softmax``: one read and one write, 2·S·e) when Megatron's ``FusedScaleMaskSoftmax.is_kernel_available``
      holds (16-bit, ``16 < s <= 16384``, ``s`` and ``b·a/tp`` multiples of 4), else torch's masked_fill then
      softmax (2·S·e each); the attention dropout S·(2e + 1) (reads the probabilities, writes them and the
      mask); attention·V (batched GEMM); the layout copy of the context (``permute(2, 0, 1, 3).contiguous()``)
      2·T·(h/tp)·e; the projection GEMM; bias-dropout-add (reads the GEMM output and the residual, writes the
      sum and the mask) Tn·h·(3e + 1); ``ln2``; fc1 GEMM; bias-GeLU (reads f, writes f; SwiGLU reads 2f)
      ``(f1 + f)/tp·T·e``; fc2 GEMM; bias-dropout-add Tn·h·(3e + 1);
    * input gradient, in autograd's order: each dropout's backward (reads the gradient and the mask, writes
      the gradient) Tn·h·(2e + 1) and S·(2e + 1); the bias gradients of the skipped biases (``sum`` over the
      tokens, read only) Tn·h·e for fc2 and the projection, T·(f1/tp)·e for fc1 (the bias-GeLU backward);
      bias-GeLU backward 3·T·(f1/tp)·e; the data-gradient GEMMs; LayerNorm backward 4·Tn·h·e; the residual
      gradients summed where a tensor feeds two branches (3·Tn·h·e, twice); the context copy's backward
      2·T·(h/tp)·e; softmax backward (fused: reads the probabilities and the gradient, writes the gradient,
      3·S·e; unfused also masked_fill's 2·S·e); the concatenation of the Q, K and V gradients (the backward
      of the QKV split) 2·T·q·e;
    * weight gradient: the four weight-gradient GEMMs, then the QKV bias gradient T·q·e
      (``LinearWithGradAccumulationAndAsyncCommunication.backward``: ``grad_output.sum(dim=0)`` after the
      weight gradient).

    ``moe``: ``(num_experts E, router top-k, tokens of each local expert)``: the MLP is Megatron-LM's MoE layer
    (``megatron/core/transformer/moe``: ``TopKRouter``, ``MoEAlltoAllTokenDispatcher``, ``SequentialMLP``):
    the router GEMM (Tn × E × h) and its softmax/top-k (reads and writes Tn·E fp32 scores, 3 passes), the
    permutation of the routed tokens (reads Tn·h, writes Tn·k·h), per local expert j fc1, activation and fc2
    on its own token count (``fc1_e<j>``, ``act_e<j>``, ``fc2_e<j>``; the expert-parallel all-to-all and the
    TP gather are placed by :mod:`schedsim.lower.training`), the unpermutation (reads Tn·k·h, writes Tn·h),
    and their backwards (experts in reverse order, as autograd runs the loop) and weight gradients.

    A dropout probability of 0 launches no dropout kernel (ATen ``dropout``: ``p == 0`` returns the input);
    the bias-dropout-add then still reads and writes, without a mask. Cross-check: the forward writes
    ``5·S`` bytes of b·a·s² tensors in 16-bit (softmax output 2, dropout output 2, mask 1) and, with SP,
    stores per layer what Korthikanti et al. 2022 §4.1 count (``34·s·b·h + 5·a·s²·b`` bytes over tp)."""
    s, b, h, f, a = t.seq, t.micro_batch, t.hidden, t.ffn, t.heads
    e = DTYPE_BYTES[t.dtype]
    T = s * b
    Tn = T // tp if sp else T  # tokens of the LayerNorms and residuals on one TP rank
    f1 = 2 * f if t.swiglu else f
    qkv = (h + 2 * h * (groups or a) // a) // tp
    ba = b * a // tp
    S = ba * s * s  # attention score elements on one TP rank
    hp = h // tp
    dt = t.dtype
    drop_a, drop_h = t.attention_dropout > 0, t.hidden_dropout > 0
    fused = e == 2 and 16 < s <= 16384 and s % 4 == 0 and ba % 4 == 0

    def mm(name: str, m: int, n: int, k: int, batch: int = 1) -> dict[str, Any]:
        return {"name": name, "kind": "matmul", "m": m, "n": n, "k": k, "batch": batch, "dtype": dt}

    def ew(name: str, nbytes: int, on: bool = True) -> list[dict[str, Any]]:
        return [{"name": name, "kind": "compute", "bytes": nbytes, "dtype": dt}] if on else []

    bda = Tn * h * (3 * e + drop_h)  # bias-dropout-add: GEMM output and residual in, sum (and mask) out
    fwd = [
        *ew("ln1", 2 * Tn * h * e), mm("qkv", T, qkv, h), *ew("qkv_bias", 2 * T * qkv * e),
        mm("scores", s, s, h // a, ba), *ew("attn_mask", 2 * S * e, not fused), *ew("softmax", 2 * S * e),
        *ew("attn_dropout", S * (2 * e + 1), drop_a), mm("attn_v", s, h // a, s, ba),
        *ew("context_copy", 2 * T * hp * e), mm("proj", T, h, hp), *ew("bias_dropout_add1", bda),
        *ew("ln2", 2 * Tn * h * e), mm("fc1", T, f1 // tp, h),
        *ew("act", (f1 + f) // tp * T * e),  # bias-GeLU reads f, writes f; SwiGLU reads 2f, writes f
        mm("fc2", T, h, f // tp), *ew("bias_dropout_add2", bda),
    ]
    bwd_i = [
        *ew("dropout2_bwd", Tn * h * (2 * e + 1), drop_h), *ew("fc2_bias_grad", Tn * h * e),
        mm("fc2_dgrad", T, f // tp, h), *ew("act_bwd", 3 * T * f1 // tp * e),
        *ew("fc1_bias_grad", T * f1 // tp * e), mm("fc1_dgrad", T, h, f1 // tp), *ew("ln2_bwd", 4 * Tn * h * e),
        *ew("residual2_bwd", 3 * Tn * h * e), *ew("dropout1_bwd", Tn * h * (2 * e + 1), drop_h),
        *ew("proj_bias_grad", Tn * h * e), mm("proj_dgrad", T, hp, h), *ew("context_copy_bwd", 2 * T * hp * e),
        mm("attn_v_dgrad", s, s, h // a, ba), mm("attn_v_dgrad_v", s, h // a, s, ba),
        *ew("attn_dropout_bwd", S * (2 * e + 1), drop_a), *ew("softmax_bwd", 3 * S * e),
        *ew("attn_mask_bwd", 2 * S * e, not fused), mm("scores_dgrad_q", s, h // a, s, ba),
        mm("scores_dgrad_k", s, h // a, s, ba), *ew("qkv_grad_cat", 2 * T * qkv * e), mm("qkv_dgrad", T, h, qkv),
        *ew("ln1_bwd", 4 * Tn * h * e), *ew("residual1_bwd", 3 * Tn * h * e),
    ]
    bwd_w = [mm("fc2_wgrad", f // tp, h, T), mm("fc1_wgrad", h, f1 // tp, T), mm("proj_wgrad", hp, h, T),
             mm("qkv_wgrad", h, qkv, T), *ew("qkv_bias_grad", T * qkv * e)]
    if t.flash_attention:
        _flash_core(fwd, bwd_i, attn_step_flops(b, a // tp, s, s, h // a), 2 * T * qkv * e, 2 * T * hp * e, dt)
    if moe is not None:
        _moe_mlp(fwd, bwd_i, bwd_w, moe, Tn, h, f // tp, f1 // tp, e, mm, ew)
    return {"F": fwd, "I": bwd_i, "W": bwd_w}


#: FLOP of a FlashAttention backward over its forward: five GEMMs to two (Dao 2023, FlashAttention-2, §3.1.2:
#: the backward recomputes S and P, then dV, dP, dQ, dK).
FLASH_BWD = 2.5
#: The attention core of the local implementation, forward and input gradient (:func:`_layer_ops`'s names),
#: which a fused attention kernel replaces.
CORE_F = ("scores", "attn_mask", "softmax", "attn_dropout", "attn_v")
CORE_I = ("attn_v_dgrad", "attn_v_dgrad_v", "attn_dropout_bwd", "softmax_bwd", "attn_mask_bwd", "scores_dgrad_q",
          "scores_dgrad_k")


def attn_step_flops(b: int, heads: int, sq: int, sk: int, d: int) -> float:
    """FLOP of causal attention's forward over ``sq`` queries and ``sk`` keys of ``heads`` heads of size ``d``
    where half the score block is computed (the causal diagonal block, or a load-balanced context-parallel
    step): QKᵀ and P·V, ``2·(2·sq·sk·d)`` a head, halved."""
    return 2.0 * b * heads * sq * sk * d


def _flash_core(fwd: list[dict[str, Any]], bwd_i: list[dict[str, Any]], flops: float, qkv_bytes: int,
                out_bytes: int, dt: str) -> None:
    """Replace the attention core of :func:`_layer_ops`'s lists by FlashAttention's kernels, in place (Megatron-LM
    legacy ``FlashSelfAttention``): Q, K, V made contiguous in its ``b s h d`` layout (a copy of the QKV
    output, ``qkv_bytes`` read and written) and ``flash_attn`` (FLOP ``flops``; reads Q, K, V, writes O:
    ``qkv_bytes/2 + out_bytes/2``; dropout inside); backward ``flash_attn_bwd`` (:data:`FLASH_BWD` times the
    FLOP; reads Q, K, V, O, dO, writes dQ, dK, dV) and the copy's backward. Nothing of size b·a·s² is
    stored or moved."""
    def ew(name: str, nbytes: float, flop: float = 0.0) -> dict[str, Any]:
        return {"name": name, "kind": "compute", "bytes": nbytes, "dtype": dt, **({"flops": flop} if flop else {})}

    at = [i for i, o in enumerate(fwd) if o["name"] in CORE_F]
    fwd[at[0]:at[-1] + 1] = [ew("qkv_layout_copy", qkv_bytes),
                             ew("flash_attn", (qkv_bytes + out_bytes) // 2, flops)]
    at = [i for i, o in enumerate(bwd_i) if o["name"] in CORE_I]
    bwd_i[at[0]:at[-1] + 1] = [ew("flash_attn_bwd", qkv_bytes + out_bytes, FLASH_BWD * flops),
                               ew("qkv_layout_copy_bwd", qkv_bytes)]


def _moe_mlp(fwd: list[dict[str, Any]], bwd_i: list[dict[str, Any]], bwd_w: list[dict[str, Any]],
             moe: tuple[int, int, tuple[int, ...]], Tn: int, h: int, fp: int, f1p: int, e: int, mm: Any,
             ew: Any) -> None:
    """Replace the dense MLP kernels of :func:`_layer_ops`'s lists by the MoE layer's, in place (see there);
    ``fp``, ``f1p``: the expert's f and fc1 columns on one TP rank."""
    E, k, tokens = moe
    routed = Tn * h * e * (1 + k)  # (un)permute: Tn tokens one side, Tn·k the other
    experts_f = [op for j, n in enumerate(tokens) for op in
                 (mm(f"fc1_e{j}", n, f1p, h), *ew(f"act_e{j}", (f1p + fp) * n * e), mm(f"fc2_e{j}", n, h, fp))]
    at = next(i for i, o in enumerate(fwd) if o["name"] == "fc1")
    fwd[at:at + 3] = [mm("router", Tn, E, h), *ew("router_topk", 3 * Tn * E * 4), *ew("permute", routed),
                      *experts_f, *ew("unpermute", routed)]
    experts_i = [op for j, n in reversed(list(enumerate(tokens))) for op in
                 (mm(f"fc2_dgrad_e{j}", n, fp, h), *ew(f"act_bwd_e{j}", 3 * n * f1p * e),
                  mm(f"fc1_dgrad_e{j}", n, h, f1p))]
    names = [o["name"] for o in bwd_i]
    lo, hi = names.index("fc2_bias_grad"), names.index("fc1_dgrad")
    bwd_i[lo:hi + 1] = [*ew("unpermute_bwd", routed), *experts_i, *ew("permute_bwd", routed),
                        *ew("router_topk_bwd", 3 * Tn * E * 4), mm("router_dgrad", Tn, h, E)]
    bwd_w[0:2] = [*(op for j, n in reversed(list(enumerate(tokens))) for op in
                    (mm(f"fc2_wgrad_e{j}", fp, h, n), mm(f"fc1_wgrad_e{j}", h, f1p, n))),
                  mm("router_wgrad", h, E, Tn)]


def _head_ops(t: TransformerSpec, tp: int = 1, sp: bool = False) -> dict[str, dict[str, Any]]:
    """The first and last stages' kernels on one of ``tp`` TP ranks, by name (Megatron-LM GPT; memory-bound
    kernels by bytes as in :func:`_layer_ops`, ``V`` the padded vocabulary, ``Tn`` = s·b/tp with SP):

    * ``embedding`` (vocabulary-parallel lookup: writes s·b·h) 2·s·b·h·e, then (after its TP reduction)
      ``embedding_dropout`` Tn·h·(2e + 1) with ``hidden_dropout`` (Megatron's ``Embedding.embedding_dropout``)
      and its backward ``embedding_dropout_bwd``; ``embedding_wgrad`` (scatter-add) 3·s·b·h·e;
    * ``final_ln`` 2·Tn·h·e and its backward ``final_ln_bwd`` 4·Tn·h·e; the ``logits`` GEMM (V/tp columns) and
      its ``logits_dgrad`` / ``logits_wgrad``; ``cross_entropy`` (``vocab_parallel_cross_entropy(output.float(),
      labels)``, Megatron's default without ``--fp16-lm-cross-entropy``: the cast to fp32 (read e, write 4; none
      when e = 4), then over the fp32 logits the max (read 4), the max subtracted in place (read and write 4),
      ``exp`` in place (8), the sum (4) and the division by it in place, the softmax kept for the backward (8))
      s·b·(V/tp)·(32 + cast) and ``cross_entropy_bwd`` (its backward's in-place ``grad_input.mul_`` on the saved
      fp32 softmax, then the cast back to the logits' dtype) s·b·(V/tp)·(12 + e)."""
    e = DTYPE_BYTES[t.dtype]
    T, h, V, dt = t.seq * t.micro_batch, t.hidden, (t.vocab or 0) // tp, t.dtype
    Tn = T // tp if sp else T

    def ew(name: str, nbytes: int, dtype: str = dt) -> dict[str, Any]:
        return {"name": name, "kind": "compute", "bytes": nbytes, "dtype": dtype}

    def mm(name: str, m: int, n: int, k: int) -> dict[str, Any]:
        return {"name": name, "kind": "matmul", "m": m, "n": n, "k": k, "dtype": dt}

    ops = [ew("embedding", 2 * T * h * e), ew("embedding_dropout", Tn * h * (2 * e + 1)),
           ew("embedding_dropout_bwd", Tn * h * (2 * e + 1)), ew("embedding_wgrad", 3 * T * h * e),
           ew("final_ln", 2 * Tn * h * e), ew("final_ln_bwd", 4 * Tn * h * e), mm("logits", T, V, h),
           ew("cross_entropy", T * V * (32 + (e + 4 if e != 4 else 0)), "fp32"),
           ew("cross_entropy_bwd", T * V * (12 + e), "fp32"),
           mm("logits_dgrad", T, h, V), mm("logits_wgrad", h, V, T)]
    return {o["name"]: o for o in ops if t.hidden_dropout > 0 or "dropout" not in o["name"]}


def _transformer_stage(t: TransformerSpec, layers: int, first: bool, last: bool) -> dict[str, list[dict[str, Any]]]:
    ops = _layer_ops(t)
    out: dict[str, list[dict[str, Any]]] = {}
    for key, lst in ops.items():
        out[key] = [{**o, "repeat": layers} for o in lst]
    if t.vocab:
        hd = _head_ops(t)

        def pick(*names: str) -> list[dict[str, Any]]:
            return [hd[n] for n in names if n in hd]

        if first:
            out["F"][:0] = pick("embedding", "embedding_dropout")
            out["I"] += pick("embedding_dropout_bwd")
            out["W"] += pick("embedding_wgrad")
        if last:
            out["F"] += pick("final_ln", "logits", "cross_entropy")
            out["I"][:0] = pick("cross_entropy_bwd", "logits_dgrad", "final_ln_bwd")
            out["W"][:0] = pick("logits_wgrad")
    return out


def _params_per_layer(t: TransformerSpec) -> int:
    """Parameters of the block's transformer layer, Megatron-LM's GPT layer with linear biases (the kernels of
    :func:`_transformer_stage` add and differentiate them): QKV ``3h² + 3h``, projection ``h² + h``, fc1 ``h·f1 +
    f1`` (``f1`` = 2f with SwiGLU), fc2 ``f·h + h``, two LayerNorms ``4h``; the count of
    :func:`schedsim.spec.training_block._params_per_layer` for the same layer."""
    h, f = t.hidden, t.ffn
    f1 = 2 * f if t.swiglu else f
    return (3 * h * h + 3 * h) + (h * h + h) + (h * f1 + f1) + (f * h + h) + 4 * h


def layer_activation_bytes(s: int, b: int, h: int, a: int, f: int, dtype: str, *, tp: int = 1, cp: int = 1,
                           sp: bool = False, scores: bool = True, full: bool = False) -> float:
    """Stored activations of one transformer layer and microbatch, bytes: Korthikanti et al. 2022 (arXiv
    2205.05198) §4.1 / Table 2 (``34·sbh + 5·a·s²·b`` at 16 bits, f = 4h, t = 1), in the dtype's ``r`` = bytes / 2
    and with the MLP's two ``sbf`` tensors at ``4r·f/h`` per sbh (Megatron-LM ``theoretical_memory_usage.py``):
    ``sbh·(8r + 2 + (8r + 4rf/h)/t) + a·s²·b·(4r + 1)/t``; with sequence parallelism ``sbh/t·(16r + 2 + 4rf/h)``
    plus the scores' term; ``scores`` False (selective recomputation, FlashAttention, context parallelism) drops
    the ``a·s²·b`` term; ``full`` (full recomputation) keeps the layer input alone, ``2r·sbh`` (``/t`` with SP);
    all divided by ``cp``. :func:`schedsim.spec.training_block.act_bytes_per_layer` gives its derivation."""
    sbh = s * b * h
    r = DTYPE_BYTES[dtype] / 2
    if full:
        return 2 * r * sbh / (tp if sp else 1) / cp
    attn = a * s * s * b * (4 * r + 1) / tp if scores else 0.0
    mlp = 4 * r * f / h  # the MLP's two sbf tensors, per sbh (16r at f = 4h)
    if sp:
        return (sbh / tp * (16 * r + 2 + mlp) + attn) / cp
    return (sbh * (8 * r + 2 + (8 * r + mlp) / tp) + attn) / cp


def _act_memory_per_layer(t: TransformerSpec) -> int:
    """Stored activations of one layer of the block's transformer and microbatch, bytes
    (:func:`layer_activation_bytes`, t = 1, no recomputation; FlashAttention stores no scores)."""
    return int(layer_activation_bytes(t.seq, t.micro_batch, t.hidden, t.heads, t.ffn, t.dtype,
                                      scores=not t.flash_attention))


def stage_params(num_stages: int, layers_per_stage: int, params_per_layer: int, *, hidden: int, seq: int,
                 vocab: int | None, tp: int = 1, untied: bool = False) -> dict[int, dict[str, int]]:
    """Parameter counts per stage (of one TP rank of ``tp``), split into ``layers``, ``embedding`` and ``lm_head``.
    With Megatron's tensor parallelism the word embeddings and the output layer are split over the TP ranks
    (``VocabParallelEmbedding``, ``ColumnParallelLinear``), the position embeddings and the final LayerNorm are
    whole on each (``LanguageModelEmbedding``: "Position embedding (serial)"; a plain LayerNorm).

    Parameters
    ----------
    num_stages : int
        Pipeline stages p·v.
    layers_per_stage, params_per_layer : int
        Transformer layers on each stage and parameters of one layer (on one TP rank).
    hidden, seq : int
        h and s.
    vocab : int or None
        Padded vocabulary V; None leaves out embedding and LM head.
    tp : int
        Tensor-parallel ranks splitting ``V·h`` (1: the whole model's counts); V must be a multiple of tp, as
        Megatron pads it (``_vocab_size_with_padding``: a multiple of ``make_vocab_size_divisible_by · tp``).
    untied : bool
        ``untie_embeddings_and_output_weights``. With one stage and tied weights the output layer is the word
        embedding itself (Megatron-LM ``gpt_model.py``: ``output_layer`` gets ``weight=None`` and the shared
        embedding weight at run time), so ``lm_head`` holds only the final LayerNorm's ``2h``; with several stages
        the last holds its own weight, untied, or a copy of the word embedding that ``embedding_grad_allreduce``
        keeps equal (``setup_embeddings_and_output_layer``).

    Returns
    -------
    dict
        stage -> {"layers": n, "embedding": n, "lm_head": n} (parameter counts, not bytes).
    """
    out = {}
    for s in range(num_stages):
        d = {"layers": layers_per_stage * params_per_layer, "embedding": 0, "lm_head": 0}
        if vocab:
            if s == 0:
                d["embedding"] = vocab // tp * hidden + seq * hidden
            if s == num_stages - 1:
                d["lm_head"] = (vocab // tp * hidden if untied or num_stages > 1 else 0) + 2 * hidden
        out[s] = d
    return out
