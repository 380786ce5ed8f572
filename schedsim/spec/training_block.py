"""The ``training:`` block of a schedule: one Megatron-LM training step, written in Megatron's argument names.

The keys are Megatron-LM's command-line arguments in snake_case (``--tensor-model-parallel-size 8`` is
``tensor_model_parallel_size: 8``, with the short aliases ``tp``, ``pp``, ``dp``, ``cp``, ``ep``), so a
launch script's arguments can be pasted. :func:`check_training` applies Megatron's own validation, with
Megatron's reasons, naming the key and its line; :func:`training_plan` derives the sizes the lowering
(:mod:`schedsim.lower.training`) and the report need.

Derived sizes (Megatron-LM ``megatron/training/arguments.py`` ``validate_args``):

* data-parallel size ``dp = world_size / (tp · pp · cp)``;
* microbatches per step ``m = global_batch_size / (micro_batch_size · dp)``
  (``megatron/core/num_microbatches_calculator.py``);
* virtual stages per rank ``v = num_layers / pp / num_layers_per_virtual_pipeline_stage`` (interleaved 1F1B
  when v > 1, else 1F1B; ZB-H1 with the Zero Bubble fork's ``enable_zero_bubble``), num_layers padded to a
  multiple of pp with the fork's ``allow_padding_num_layers`` (:func:`padded_layers`);
* MLP width ``f``: ``ffn_hidden_size``, else ``int(4h·2/3 / 64)·64`` with ``swiglu`` (``validate_args``: the gated
  fc1's two projections at about the parameters of 4h, a multiple of 64) and ``4h`` without (:func:`ffn_size`);
* padded vocabulary: ``vocab_size`` rounded up to a multiple of ``make_vocab_size_divisible_by · tp``
  (``megatron/training/tokenizer/tokenizer.py`` ``_vocab_size_with_padding``);
* gradients are reduced in fp32 under bf16 (``arguments.py``: "bfloat16 requires gradient accumulation and
  all-reduce to be done in fp32"), in the parameters' type otherwise.

Formulas the report uses, each with its source:

* model FLOPs per step, Megatron's ``num_floating_point_operations`` (``megatron/training/training.py``):
  ``12·B·s·L·h²·((1 + g/a + s/h)·1 + (f/h)·k·gate + V/(2·L·h))`` with B the global batch, g the query groups,
  k the experts a token is routed to (1 dense), gate 3/2 with SwiGLU; for a GPT with f = 4h and g = a it is
  Narayanan et al. 2021 (arXiv 2104.04473) eq. 3 without recomputation's extra forward:
  ``72·B·s·L·h²·(1 + s/6h + V/12Lh)``. MFU = that / (iteration time · GPUs · the profile's dense peak);
* static bytes per parameter (Megatron-LM ``docs/source/api-guide/dist_optimizer.md``, "Data flow"
  table): bf16 parameters with fp32 gradients 2 + 4 + 12 (weights, gradients, fp32 master weight and Adam
  moments), fp16 2 + 2 + 16 (the optimizer also holds an fp32 gradient copy), fp32 4 + 4 + 8; the
  distributed optimizer divides the optimizer part by dp (6 + 12/d, 4 + 16/d, 8 + 8/d);
* parameters of a TP rank (memory, DP gradient buckets, FSDP units): a layer's linears and the word embeddings
  and output layer split over tp, its LayerNorms, row-parallel biases and MoE router whole
  (:func:`tp_replicated_params_per_layer`), as are the position embeddings and the final LayerNorm;
* activations per layer and microbatch (Korthikanti et al. 2022, arXiv 2205.05198, Table 2, 16-bit):
  no recomputation ``s·b·h·(10 + 24/t + 5·a·s/(h·t))``, with sequence parallelism
  ``s·b·h/t·(34 + 5·a·s/h)``, selective recomputation ``s·b·h·(10 + 24/t)`` (with SP ``34·s·b·h/t``),
  full recomputation ``2·s·b·h`` (the layer input; ``/t`` with SP); in fp32 the non-mask bytes double
  (:func:`act_bytes_per_layer`). Full recomputation follows Megatron-LM ``transformer_block.py``
  ``_checkpointed_forward``: ``uniform`` checkpoints groups of ``recompute_num_layers`` layers (one stored
  input per group), ``block`` the first ``recompute_num_layers`` layers one by one; the backward's re-run
  forward holds one checkpointed group's full activations at once (its peak is added once). The first
  pipeline stage holds
  ``min(m, p)`` microbatches of its ``L/p`` layers under 1F1B, ``L/p · (p + (p−1)/v)`` layer-microbatches
  interleaved (Korthikanti et al. §4.2.3: ``L·(1 + (p−1)/(p·v))``); under ZB-H1 every rank holds p (Qi et al.
  2024, Table 1); with uneven stages each rank is counted with its own (:func:`inflight_layers`).
"""

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from schedsim.errors import SpecError
from schedsim.units import MAX_BYTES, MAX_DIM

__all__ = ["TrainingSpec", "TrainingPlan", "check_training", "refusal", "training_plan", "padded_layers", "model_flops",
           "memory_per_rank", "fsdp_units", "fsdp_memory", "act_bytes_per_layer", "expert_params_per_layer",
           "tp_replicated_params_per_layer", "tp_rank_params_per_layer", "inflight_layers", "ALIASES"]

#: Short alias -> Megatron argument.
ALIASES = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size", "dp": "data_parallel_size",
           "cp": "context_parallel_size", "ep": "expert_model_parallel_size"}


def _alias(name: str) -> Any:
    short = next((k for k, v in ALIASES.items() if v == name), None)
    return AliasChoices(name, short) if short else None


class TrainingSpec(BaseModel):
    """The ``training:`` block: Megatron-LM arguments in snake_case (see the module docstring)."""

    #: strict: Megatron's argparse takes ``type=int`` sizes and ``store_true`` flags, so ``tp: true``,
    #: ``num_layers: 8.0`` or ``bf16: "yes"`` are refused rather than coerced (pydantic's strict mode).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True,
                              defer_build=True, strict=True)

    num_layers: int = Field(gt=0, description="--num-layers L.")
    hidden_size: int = Field(gt=0, description="--hidden-size h.")
    ffn_hidden_size: int | None = Field(default=None, gt=0, description="--ffn-hidden-size f (default 4h; with "
                                        "--swiglu int(4h·2/3 / 64)·64, Megatron's validate_args).")
    num_attention_heads: int = Field(gt=0, description="--num-attention-heads a.")
    num_query_groups: int | None = Field(default=None, gt=0, description="--num-query-groups g (GQA; default a).")
    seq_length: int = Field(gt=0, description="--seq-length s.")
    vocab_size: int = Field(default=50257, gt=0, description="Tokenizer vocabulary before padding (GPT-2: 50257).")
    make_vocab_size_divisible_by: int = Field(default=128, gt=0, description="Padding unit of the vocabulary "
                                              "(times tp), Megatron's default 128.")
    swiglu: bool = Field(default=False, description="--swiglu: fc1 has 2·f columns.")
    untie_embeddings_and_output_weights: bool = Field(default=False, description="Untied output layer (no "
                                                      "embedding all-reduce between first and last stage).")
    attention_dropout: float = Field(default=0.1, ge=0, lt=1, description="--attention-dropout (Megatron's "
                                     "default 0.1): a dropout kernel on the b·a·s² probabilities; 0: none.")
    hidden_dropout: float = Field(default=0.1, ge=0, lt=1, description="--hidden-dropout (Megatron's default "
                                  "0.1): the embedding's and the bias-dropout-adds' masks; 0: none.")
    use_flash_attn: bool = Field(default=False, description="--use-flash-attn: the attention core as one fused "
                                 "FlashAttention kernel; nothing of size b·a·s² is stored.")
    micro_batch_size: int = Field(gt=0, description="--micro-batch-size b.")
    global_batch_size: int | None = Field(default=None, gt=0, description="--global-batch-size (default b·dp).")
    tensor_model_parallel_size: int = Field(default=1, gt=0, validation_alias=_alias("tensor_model_parallel_size"))
    pipeline_model_parallel_size: int = Field(default=1, gt=0,
                                              validation_alias=_alias("pipeline_model_parallel_size"))
    data_parallel_size: int | None = Field(default=None, gt=0, validation_alias=_alias("data_parallel_size"),
                                           description="Optional check: world_size / (tp·pp·cp).")
    num_layers_per_virtual_pipeline_stage: int | None = Field(default=None, gt=0)
    decoder_first_pipeline_num_layers: int | None = Field(default=None, gt=0, description="Layers of the first "
                                                          "pipeline stage (uneven pipeline parallelism).")
    decoder_last_pipeline_num_layers: int | None = Field(default=None, gt=0, description="Layers of the last "
                                                         "pipeline stage (uneven pipeline parallelism).")
    allow_padding_num_layers: bool = Field(default=False, description="--allow-padding-num-layers of the Zero "
                                           "Bubble fork of Megatron-LM (sail-sg/zero-bubble-pipeline-parallelism, "
                                           "megatron/arguments.py, megatron/model/transformer.py get_offset): "
                                           "num_layers not a multiple of pp is padded up to one, and each padding "
                                           "layer is taken from one stage chunk, the last, then the first, the "
                                           "second, ... in virtual-stage order (a chunk left with none runs none).")
    enable_zero_bubble: bool = Field(default=False, description="--enable-zero-bubble of the Zero Bubble fork "
                                     "(megatron/arguments.py): the backward split into input- and weight-gradient "
                                     "passes, the pipeline run as ZB-1p (Qi et al., ICLR 2024, arXiv 2401.10241). "
                                     "Lowered as ZB-H1, the handcrafted schedule of the same activation limit "
                                     "p·M_B: the paper's Table 5 gives ZB-1p and ZB-H1 the same bubble rate in all "
                                     "12 of its settings.")
    check_for_nan_in_loss_and_grad: bool = Field(
        default=False, description="Megatron-LM's loss NaN check (pretrain_gpt.py loss_func, `assert not "
        "loss.isnan()`; on by default in Megatron-LM, `--no-check-for-nan-in-loss-and-grad`; sail-sg/zero-bubble-"
        "pipeline-parallelism 425b42e pretrain_gpt.py l. 166-168, megatron/arguments.py l. 828-830): the last "
        "pipeline stage's host waits for its compute stream after each microbatch's forward (the tensor's bool() "
        "copies it to the host). Off by default here: blocks written before it keep their predictions.")
    get_batch_sync: bool = Field(
        default=False, description="Megatron-LM's get_batch on the first and last pipeline stage (pretrain_gpt.py "
        "get_batch, tensor_parallel.broadcast_data: `sizes_cuda.cpu()`; sail-sg/zero-bubble-pipeline-parallelism "
        "425b42e pretrain_gpt.py l. 90-120, megatron/core/tensor_parallel/data.py l. 39-45): their host waits for "
        "the compute stream before each microbatch's forward. Not a Megatron argument (Megatron always does it); "
        "off by default here: blocks written before it keep their predictions.")
    zero_bubble_max_pending_backward: int | None = Field(default=None, gt=0, description="--zero-bubble-max-"
                                                         "pending-backward: the fork's activation limit in "
                                                         "microbatches; only pp (ZB-1p) is lowered.")
    context_parallel_size: int = Field(default=1, gt=0, validation_alias=_alias("context_parallel_size"))
    expert_model_parallel_size: int = Field(default=1, gt=0, validation_alias=_alias("expert_model_parallel_size"))
    num_experts: int | None = Field(default=None, gt=0)
    moe_router_topk: int = Field(default=2, gt=0)
    moe_expert_capacity_factor: float | None = Field(default=None, gt=0, description="--moe-expert-capacity-"
                                                     "factor c: the busiest expert is taken at its capacity, c "
                                                     "times the mean load (router imbalance); default balanced.")
    sequence_parallel: bool = False
    recompute_granularity: Literal["full", "selective"] | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_num_layers: int | None = Field(default=None, gt=0)
    use_distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    use_torch_fsdp2: bool = Field(default=False, description="--use-torch-fsdp2: ZeRO-3 with torch FSDP2 "
                                  "(fully_shard on each transformer layer, the embedding and the output layer): "
                                  "parameters, gradients and optimizer state sharded over the dp·cp ranks, each "
                                  "unit all-gathered before its forward and its backward (prefetched one unit "
                                  "ahead) and its gradients reduce-scattered after its backward.")
    async_tensor_model_parallel_allreduce: bool = Field(default=True, description="Megatron-LM's default (off with "
                                                        "--no-async-tensor-model-parallel-allreduce; absent before "
                                                        "late 2021): without sequence parallelism, the column-"
                                                        "parallel linears' input-gradient all-reduce runs beside "
                                                        "their weight-gradient GEMM; false: on the compute stream "
                                                        "before it.")
    scatter_gather_tensors_in_pipeline: bool = Field(default=False, description="Megatron-LM 2021-02 to 2023 "
                                                     "(default on there, --no-scatter-gather-tensors-in-pipeline; "
                                                     "gone from Megatron Core): without sequence parallelism each "
                                                     "TP rank sends 1/tp of a pipeline message and the receiver "
                                                     "all-gathers it over the TP group.")
    bf16: bool = Field(default=False, description="--bf16 (params_dtype bf16).")
    fp16: bool = Field(default=False, description="--fp16 (params_dtype fp16).")
    params_dtype: Literal["fp32", "bf16", "fp16"] = Field(default="fp32", description="Megatron's default fp32; "
                                                          "--bf16 / --fp16 set it.")

    def field_of(self, key: str) -> str:
        """The field a written key sets (an alias gives its Megatron name)."""
        return ALIASES.get(key, key)


#: Not built here: :class:`schedsim.spec.model._TrainingBlock` builds it (plugin discovery off) the first time a
#: ``training:`` block is validated; a direct use (``TrainingSpec(...)``) builds it then (``defer_build``).


@dataclass(frozen=True)
class TrainingPlan:
    """Sizes derived from a validated block (Megatron's ``validate_args``; see the module docstring)."""

    tp: int
    pp: int
    cp: int
    dp: int
    v: int
    m: int
    global_batch: int
    sp: bool
    dtype: str
    grad_dtype: str
    vocab: int
    ffn: int
    groups: int
    stage_layers: tuple[int, ...] = ()  # layers of each of the p·v stages (uneven first/last stages)
    ep: int = 1
    experts: int = 0  # num_experts, 0 for a dense model
    zero_bubble: bool = False  # enable_zero_bubble: ZB-1p, lowered as ZB-H1

    def expert_tokens(self, t: TrainingSpec, hot: bool) -> tuple[int, ...]:
        """Tokens each local expert of an EP rank runs per microbatch (after the TP all-gather with tp > 1):
        ``ep · (s/cp)·b · k / E`` balanced (every EP rank routes its ``(s/cp)·b/tp`` tokens to k experts; with sequence
        parallelism the TP gather multiplies by tp), the first expert of the ``hot`` rank (EP index 0) at its
        capacity, ``moe_expert_capacity_factor`` times that (Megatron-LM ``moe_utils.get_capacity``:
        ``ceil(tokens · k / E · c)``). With c < 1 the capacity is below the mean and every expert drops to it
        (Megatron drops the tokens past an expert's capacity)."""
        mean = -(-self.ep * (t.seq_length // self.cp) * t.micro_batch_size * t.moe_router_topk // self.experts)
        c = t.moe_expert_capacity_factor
        cap = None if c is None else int(-(-mean * c // 1))
        out = [mean if cap is None else min(mean, cap)] * (self.experts // self.ep)
        if hot and cap is not None:
            out[0] = cap
        return tuple(out)

    @property
    def schedule(self) -> str:
        """``interleaved_1f1b`` with virtual stages, else ``1f1b`` (Megatron's ``get_forward_backward_func``);
        ``zb_h1`` with ``enable_zero_bubble`` (the field's description says why ZB-H1 stands for ZB-1p)."""
        return "zb_h1" if self.zero_bubble else "interleaved_1f1b" if self.v > 1 else "1f1b"

    def rank(self, t: int, c: int, d: int, p: int) -> int:
        """Global rank of (tp, cp, dp, pp) coordinates in Megatron's default order ``tp-cp-ep-dp-pp``, tp
        fastest (``megatron/core/parallel_state.py`` ``initialize_model_parallel(order='tp-cp-ep-dp-pp')``,
        ``RankGenerator``; ep does not enter the dense ranks)."""
        return t + self.tp * (c + self.cp * (d + self.dp * p))


def _dtype(t: TrainingSpec) -> str:
    return "bf16" if t.bf16 else "fp16" if t.fp16 else t.params_dtype


def padded_layers(t: TrainingSpec) -> int:
    """``num_layers`` as the stages are cut from it: with ``allow_padding_num_layers`` the next multiple of pp (the
    Zero Bubble fork's ``megatron/arguments.py``: ``num_layers - remainder + pp``), else ``num_layers``."""
    L, pp = t.num_layers, t.pipeline_model_parallel_size
    return L - L % pp + pp if t.allow_padding_num_layers and L % pp else L


def training_plan(t: TrainingSpec, world_size: int) -> TrainingPlan:
    """The derived sizes; call after :func:`check_training` (no checks here)."""
    tp, pp, cp = t.tensor_model_parallel_size, t.pipeline_model_parallel_size, t.context_parallel_size
    dp = max(1, world_size // (tp * pp * cp))
    gbs = t.global_batch_size or t.micro_batch_size * dp
    v = 1
    padded = padded_layers(t)
    if t.num_layers_per_virtual_pipeline_stage:
        v = max(1, padded // pp // t.num_layers_per_virtual_pipeline_stage)
    unit = t.make_vocab_size_divisible_by * tp
    dtype = _dtype(t)
    first, last = t.decoder_first_pipeline_num_layers, t.decoder_last_pipeline_num_layers
    if (first or last) and pp > 1:  # Megatron's uneven split: the middle stages share what is left evenly
        middle = pp - (first is not None) - (last is not None)
        rest = t.num_layers - (first or 0) - (last or 0)
        each = rest // middle if middle else 0
        layers = tuple([first or each] + [each] * (pp - 2) + [last or each])
    else:
        sizes = [padded // (pp * v)] * (pp * v)
        for i in range(-1, padded - t.num_layers - 1):  # the fork's get_offset: the last chunk, then 0, 1, ...
            sizes[i] -= 1
        layers = tuple(sizes)
    return TrainingPlan(tp=tp, pp=pp, cp=cp, dp=dp, v=v, m=max(1, gbs // (t.micro_batch_size * dp)),
                        global_batch=gbs, sp=t.sequence_parallel and tp > 1, dtype=dtype,
                        grad_dtype="fp32" if dtype in ("bf16", "fp32") else "fp16",
                        vocab=-(-t.vocab_size // unit) * unit, ffn=ffn_size(t),
                        groups=t.num_query_groups or t.num_attention_heads, stage_layers=layers,
                        ep=t.expert_model_parallel_size, experts=t.num_experts or 0,
                        zero_bubble=t.enable_zero_bubble)


# ---------------------------------------------------------------- Megatron's validation
def ffn_size(t: TrainingSpec) -> int:
    """The MLP width f (fc1's output columns, ``2f`` with SwiGLU): ``ffn_hidden_size``, else Megatron-LM's default
    (``megatron/training/arguments.py`` ``validate_args``): ``int((4·h·2/3) / 64)·64`` with ``swiglu`` (about
    the parameters of a 4h MLP in the gated fc1's two projections, a multiple of 64), ``4·h`` without."""
    if t.ffn_hidden_size:
        return t.ffn_hidden_size
    return int((4 * t.hidden_size * 2 / 3) / 64) * 64 if t.swiglu else 4 * t.hidden_size


def _rules(t: TrainingSpec, world_size: int) -> list[tuple[str, str, str]]:
    """Every rule Megatron would refuse, as (field, message, fix); the first broken one is reported."""
    tp, pp, cp = t.tensor_model_parallel_size, t.pipeline_model_parallel_size, t.context_parallel_size
    model = tp * pp * cp
    if world_size % model:
        culprit = next((f for f, x in (("pipeline_model_parallel_size", pp), ("context_parallel_size", cp))
                        if world_size % x), "tensor_model_parallel_size")
        return [*_limit_rules(t), (culprit, f"world_size ({world_size}) is not divisible by tp ({tp}) × pp "
                 f"({pp}) × cp ({cp}) (Megatron-LM parallel_state.initialize_model_parallel)",
                 f"set world_size to a multiple of {model}, or change tp/pp/cp")]
    dp = world_size // model
    ep = t.expert_model_parallel_size
    if (dp * cp) % ep:
        return [*_limit_rules(t), ("expert_model_parallel_size", f"world_size ({world_size}) is not divisible by "
                f"expert_tensor_model_pipeline_parallel size ({tp * ep * pp} = tp {tp} × ep {ep} × pp {pp}; "
                "Megatron-LM parallel_state.initialize_model_parallel): the experts' data-parallel size "
                f"dp·cp / ep = {dp * cp} / {ep} must be whole", f"use an ep dividing dp·cp = {dp * cp}")]
    return [*_limit_rules(t), *_size_rules(t, world_size, dp), *_model_rules(t), *_layer_rules(t), *_feature_rules(t),
            *_recompute_rules(t), *_zero_bubble_rules(t, dp)]


def _limit_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """The op limits of ``docs/schedule_language.md`` ("Sizes": ``m``, ``n``, ``k`` up to 2^40, ``bytes`` up to
    2^60; :data:`schedsim.units.MAX_DIM`, ``MAX_BYTES``) applied to the block's own fields, so that a size too
    large is named where it was written rather than on a lowered op. The lowered layer's largest GEMM dimensions
    are the tokens ``s·b``, the QKV width ``3h``, fc1's ``f`` (``2f`` with SwiGLU) and the padded vocabulary;
    its largest tensors ``s·b·max(h, 2f, V)`` and the attention scores ``b·a·s²``, taken here at 16 bytes an
    element (4-byte values, up to four per kernel) so that every lowered op stays within the bytes limit."""
    s, b, h, a = t.seq_length, t.micro_batch_size, t.hidden_size, t.num_attention_heads
    f = ffn_size(t)
    ffn_key = "ffn_hidden_size" if t.ffn_hidden_size else "hidden_size"
    tok_key = "seq_length" if s >= b else "micro_batch_size"
    dims = [(tok_key, "tokens s·b", s * b), ("hidden_size", "QKV width 3h", 3 * h),
            (ffn_key, "fc1 width " + ("2f" if t.swiglu else "f"), f * (2 if t.swiglu else 1)),
            ("vocab_size", "vocabulary", t.vocab_size + t.make_vocab_size_divisible_by * t.tensor_model_parallel_size)]
    for key, what, val in dims:
        if val > MAX_DIM:
            return [(key, f"{key} ({getattr(t, key)}) gives the lowered GEMMs a {what} of {val}, past the limit "
                     f"of 2^40 on m, n, k (docs/schedule_language.md, Sizes)",
                     f"use {key} <= {int(MAX_DIM * getattr(t, key) // val)}")]
    width = max(h, 2 * f, t.vocab_size)
    wide = max((("hidden_size", h), (ffn_key, 2 * f), ("vocab_size", t.vocab_size)), key=lambda kv: kv[1])[0]
    tensors = [("seq_length", "attention scores b·a·s²", b * a * s * s),
               (wide if width >= s * b else tok_key, "activation s·b·max(h, 2f, V)", s * b * width)]
    for key, what, n in tensors:
        if 16 * n > MAX_BYTES:
            return [(key, f"{key} ({getattr(t, key)}) gives {what} = {n} elements, past the limit of 2^60 bytes "
                     "an op (docs/schedule_language.md, Sizes; 16 bytes an element counted)",
                     f"use a smaller {key}")]
    return []


def _size_rules(t: TrainingSpec, world_size: int, dp: int) -> list[tuple[str, str, str]]:
    """dp as given, and the global batch (Megatron's ``num_microbatches_calculator.py``)."""
    out = []
    model = world_size // dp
    if t.data_parallel_size is not None and t.data_parallel_size != dp:
        out.append(("data_parallel_size", f"dp ({t.data_parallel_size}) disagrees with world_size / (tp·pp·cp) = "
                    f"{world_size} / {model} = {dp} (Megatron derives dp; it is not an argument)",
                    f"set dp: {dp} or world_size: {t.data_parallel_size * model}"))
    mbs, gbs = t.micro_batch_size, t.global_batch_size
    if gbs is not None and gbs % (mbs * dp):
        out.append(("global_batch_size", f"global batch size ({gbs}) is not divisible by micro batch size ({mbs}) "
                    f"times data parallel size ({dp}) (Megatron-LM num_microbatches_calculator.py)",
                    f"use a multiple of {mbs * dp}, e.g. {(gbs // (mbs * dp) or 1) * mbs * dp}"))
    pp, vl, L = t.pipeline_model_parallel_size, t.num_layers_per_virtual_pipeline_stage, padded_layers(t)
    m = (gbs or mbs * dp) // (mbs * dp)
    if not out and vl is not None and pp > 1 and not L % pp and L // pp // vl > 1 and m % pp:
        out.append(("global_batch_size", f"number of microbatches ({m} = global_batch_size / (micro_batch_size · "
                    f"dp)) is not divisible by pipeline-model-parallel-size ({pp}) when using interleaved schedule "
                    "(Megatron-LM schedules.py forward_backward_pipelining_with_interleaving, with its default "
                    "microbatch_group_size_per_vp_stage = pp)",
                    f"use global_batch_size: {(-(-m // pp) * pp) * mbs * dp} (m a multiple of {pp}), or remove "
                    "num_layers_per_virtual_pipeline_stage (1F1B runs any m)"))
    return out


def _model_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """Heads, query groups and the MLP width over tp (Megatron's ``transformer_config.py``, ``arguments.py``,
    ``tensor_parallel/layers.py``)."""
    out = []
    tp = t.tensor_model_parallel_size
    h, a = t.hidden_size, t.num_attention_heads
    g = t.num_query_groups or a
    if h % a:
        out.append(("num_attention_heads", f"hidden_size ({h}) is not divisible by num_attention_heads ({a}) "
                    "(Megatron-LM arguments.py: kv_channels = hidden_size // num_attention_heads)",
                    "choose heads that divide hidden_size"))
    if a % tp:
        out.append(("num_attention_heads", f"num_attention_heads ({a}) must be a multiple of "
                    f"tensor_model_parallel_size ({tp}) (Megatron-LM transformer_config.py: each TP rank holds "
                    "whole heads)", f"use tp dividing {a}, or a multiple of {tp} heads"))
    if g % tp:
        out.append(("num_query_groups", f"num_query_groups ({g}) must be a multiple of tensor_model_parallel_size "
                    f"({tp}) (Megatron-LM transformer_config.py)", f"use tp dividing {g}"))
    if a % g:
        out.append(("num_query_groups", f"num_attention_heads ({a}) is not a multiple of num_query_groups ({g})",
                    "give query groups that divide the heads"))
    f, key = ffn_size(t), "ffn_hidden_size" if t.ffn_hidden_size else "swiglu"
    if not f:  # swiglu's default below 24 hidden units
        out.append(("hidden_size", f"with swiglu and no ffn_hidden_size Megatron's default ffn_hidden_size, "
                    f"int(4h·2/3 / 64)·64 (Megatron-LM arguments.py validate_args), is 0 for hidden_size {h}",
                    "give ffn_hidden_size, or a hidden_size of at least 24"))
    elif (t.ffn_hidden_size or t.swiglu) and f % tp:  # 4h otherwise, whole over tp since the heads are
        out.append((key, f"ffn_hidden_size ({f}{'' if t.ffn_hidden_size else ', the swiglu default'}) is not "
                    f"divisible by tensor_model_parallel_size "
                    f"({tp}) (Megatron Core tensor_parallel/layers.py: fc1's ColumnParallelLinear and fc2's "
                    f"RowParallelLinear split it with divide(): '{f} is not divisible by {tp}')",
                    f"use {'a multiple' if t.ffn_hidden_size else 'ffn_hidden_size: a multiple'} of {tp}, e.g. "
                    f"{-(-f // tp) * tp}"))
    return out


def _layer_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """Layers over pp and virtual stages (Megatron's ``arguments.py``)."""
    out = []
    L, pp = padded_layers(t), t.pipeline_model_parallel_size
    first, last = t.decoder_first_pipeline_num_layers, t.decoder_last_pipeline_num_layers
    if first is not None or last is not None:
        if t.allow_padding_num_layers:
            key = "decoder_first_pipeline_num_layers" if first is not None else "decoder_last_pipeline_num_layers"
            return [(key, "allow_padding_num_layers (the Zero Bubble fork) and uneven first/last stages (Megatron "
                     "Core) are two ways to shorten the end stages; the fork has no uneven stages",
                     f"remove {key}, or allow_padding_num_layers")]
        return _uneven_rules(t, first, last)
    if L % pp:
        out.append(("num_layers", f"Number of layers should be divisible by the pipeline-model-parallel size: "
                    f"{L} layers over pp={pp} (Megatron-LM arguments.py)",
                    f"use a multiple of {pp} layers (e.g. {L - L % pp or pp}), or a pp dividing {L}"))
    vl = t.num_layers_per_virtual_pipeline_stage
    if vl is not None and not L % pp:
        if (L // pp) % vl:
            out.append(("num_layers_per_virtual_pipeline_stage", f"number of layers per pipeline stage ({L // pp}) "
                        f"must be divisible by number of layers per virtual pipeline stage ({vl}) (Megatron-LM "
                        "arguments.py)", f"use a divisor of {L // pp}"))
        elif L // pp // vl > 1 and pp == 1:
            out.append(("pipeline_model_parallel_size", "When interleaved schedule is used, pipeline-model-parallel "
                        "size should be greater than 1 (Megatron-LM arguments.py)",
                        "set pp > 1, or remove num_layers_per_virtual_pipeline_stage"))
    return out


def _uneven_rules(t: TrainingSpec, first: int | None, last: int | None) -> list[tuple[str, str, str]]:
    """Uneven first/last stages (Megatron-LM ``arguments.py``; ``transformer_config.py``
    ``num_layers_in_first/last_pipeline_stage``)."""
    L, pp = t.num_layers, t.pipeline_model_parallel_size
    key = "decoder_first_pipeline_num_layers" if first is not None else "decoder_last_pipeline_num_layers"
    if t.num_layers_per_virtual_pipeline_stage is not None:
        return [("num_layers_per_virtual_pipeline_stage", "please use --num-virtual-stages-per-pipeline-rank to "
                 "specify virtual pipeline parallel degree when enable uneven pipeline parallelism (Megatron-LM "
                 "arguments.py; that argument is not modelled yet)", "remove num_layers_per_virtual_pipeline_stage")]
    if pp == 1:
        return [(key, "uneven pipeline stages need pipeline parallelism (pp > 1)", f"remove {key}, or set pp > 1")]
    middle = pp - (first is not None) - (last is not None)
    rest = L - (first or 0) - (last or 0)
    if middle == 0 and rest:  # first and last are every stage: no stage is left for the rest
        return [(key, f"the first ({first}) and last ({last}) stages hold {L - rest} layers, not num_layers "
                 f"({L}): with pp = 2 they are every stage (Megatron-LM transformer_config.py, uneven pipeline "
                 "parallelism)", f"make decoder_first_pipeline_num_layers + decoder_last_pipeline_num_layers = {L}, "
                 "or drop one of them")]
    if rest < 0 or (middle == 0 and rest) or (middle and (rest % middle or rest == 0)):
        return [(key, f"the {rest} layers left after the first ({first}) and last ({last}) stages do not split "
                 f"evenly over the {middle} middle pipeline stage(s) (Megatron-LM transformer_config.py, uneven "
                 "pipeline parallelism)", f"choose first and last stage layers that leave a positive multiple of "
                 f"{middle or 1} layers")]
    return []


def _feature_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """Sequence parallelism, overlap flags, precision, experts (Megatron's ``arguments.py``)."""
    out = []
    if t.sequence_parallel and t.tensor_model_parallel_size == 1:
        out.append(("sequence_parallel", "sequence parallelism needs tensor parallelism: with tp = 1 Megatron-LM "
                    "turns it off (arguments.py: 'Disabling sequence parallelism because tensor model "
                    "parallelism is disabled'), so the schedule would not be what you wrote",
                    "set sequence_parallel: false, or tp > 1"))
    cp = t.context_parallel_size
    if cp > 1 and t.seq_length % (2 * cp):
        out.append(("context_parallel_size", f"seq_length ({t.seq_length}) must be divisible by 2 × "
                    f"context_parallel_size ({2 * cp}): Megatron-LM splits each sequence into 2·cp chunks for "
                    "load-balanced causal attention (megatron/core/utils.py get_batch_on_this_cp_rank)",
                    f"use a seq_length that is a multiple of {2 * cp}, or a cp dividing {t.seq_length // 2}"))
    tp = t.tensor_model_parallel_size
    if t.sequence_parallel and tp > 1 and not (cp > 1 and t.seq_length % (2 * cp)) and (t.seq_length // cp) % tp:
        out.append(("seq_length", f"seq_length{' / cp' if cp > 1 else ''} ({t.seq_length // cp}) is not divisible by "
                    f"tensor_model_parallel_size ({tp}): sequence parallelism splits each sequence over the TP ranks, "
                    "and Megatron Core stops at the embedding's reduce-scatter (tensor_parallel/mappings.py "
                    "_reduce_scatter_along_first_dim: 'First dimension of the tensor should be divisible by tensor "
                    "parallel size')", f"use a seq_length that is a multiple of "
                    f"{cp * math.lcm(tp, 2 if cp > 1 else 1)}, or set sequence_parallel: false"))
    if t.tp_comm_overlap and not t.sequence_parallel:
        out.append(("tp_comm_overlap", "Tensor parallel communication/GEMM overlap can happen only when sequence "
                    "parallelism is enabled (Megatron-LM arguments.py)", "set sequence_parallel: true"))
    if t.overlap_param_gather and not t.use_distributed_optimizer:
        out.append(("overlap_param_gather", "--overlap-param-gather only supported with distributed optimizer "
                    "(Megatron-LM arguments.py)", "set use_distributed_optimizer: true"))
    if t.overlap_param_gather and not t.overlap_grad_reduce:
        out.append(("overlap_param_gather", "Must use --overlap-param-gather with --overlap-grad-reduce "
                    "(Megatron-LM arguments.py)", "set overlap_grad_reduce: true"))
    if t.bf16 and t.fp16:
        out.append(("fp16", "--fp16 and --bf16 are both set (Megatron-LM arguments.py: assert not args.fp16)",
                    "keep one of them"))
    explicit = t.params_dtype if "params_dtype" in t.model_fields_set else None
    flag = "bf16" if t.bf16 else "fp16" if t.fp16 else None
    if explicit is not None and explicit != (flag or explicit):
        out.append(("params_dtype", f"params_dtype {explicit} contradicts --{flag}, which sets params_dtype to "
                    f"{flag} (Megatron-LM arguments.py: args.params_dtype = torch.half under --fp16, torch.bfloat16 "
                    "under --bf16)", f"set params_dtype: {flag}, or remove it (--{flag} sets it)"))
    out += _moe_rules(t) + _fsdp_rules(t)
    return out


def _fsdp_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """``--use-torch-fsdp2`` (Megatron-LM ``megatron/training/arguments.py`` ``validate_args``, its asserts
    quoted). ``CUDA_DEVICE_MAX_CONNECTIONS=1`` ("FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large
    than one") is the schedule's ``env``: :func:`check_training`."""
    if not t.use_torch_fsdp2:
        return []
    key = "use_torch_fsdp2"
    rules = [
        (t.pipeline_model_parallel_size != 1, "pipeline_model_parallel_size",
         "--use-torch-fsdp2 is not supported with pipeline parallelism", "set pp: 1, or remove use_torch_fsdp2"),
        (t.expert_model_parallel_size != 1, "expert_model_parallel_size",
         "--use-torch-fsdp2 is not supported with expert parallelism", "set ep: 1, or remove use_torch_fsdp2"),
        (t.use_distributed_optimizer, "use_distributed_optimizer",
         "--use-torch-fsdp2 is not supported with MCore's distributed optimizer",
         "remove use_distributed_optimizer (FSDP2 shards the optimizer state itself)"),
        (not t.untie_embeddings_and_output_weights, key,
         "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights",
         "add untie_embeddings_and_output_weights: true"),
        (t.fp16, "fp16", "--use-torch-fsdp2 not supported with fp16 yet", "use bf16: true instead of fp16"),
    ]
    return [(field, f"{msg} (Megatron-LM arguments.py)", fix) for bad, field, msg, fix in rules if bad]


def _moe_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """Experts (Megatron-LM ``arguments.py`` and ``transformer_config.py``)."""
    ep, E, tp = t.expert_model_parallel_size, t.num_experts, t.tensor_model_parallel_size
    if E is None:
        if ep > 1:
            return [("expert_model_parallel_size", "num_experts must be non None to use expert model parallelism "
                     "(Megatron-LM arguments.py)", "set num_experts, or expert_model_parallel_size: 1")]
        if t.moe_expert_capacity_factor is not None:
            return [("moe_expert_capacity_factor", "moe_expert_capacity_factor is set without num_experts (a "
                     "dense model has no router)", "set num_experts, or remove moe_expert_capacity_factor")]
        return []
    if E % ep:
        return [("expert_model_parallel_size", f"num_experts ({E}) must be a multiple of expert_model_parallel_size "
                 f"({ep}) (Megatron-LM arguments.py)", f"use an ep dividing {E}")]
    if t.moe_router_topk > E:
        return [("moe_router_topk", f"moe_router_topk ({t.moe_router_topk}) is larger than num_experts ({E}): a "
                 "token cannot be routed to more distinct experts than exist (Megatron-LM router.py topk)",
                 f"use moe_router_topk <= {E}")]
    if tp > 1 and not t.sequence_parallel:
        return [("sequence_parallel", "When using MoE and tensor parallelism, sequence parallelism must be used "
                 "(Megatron-LM arguments.py)", "set sequence_parallel: true")]
    return []


def _zero_bubble_rules(t: TrainingSpec, dp: int) -> list[tuple[str, str, str]]:
    """What the Zero Bubble keys lower (``enable_zero_bubble``: ZB-1p as ZB-H1, one chunk a rank, m >= pp);
    ``dp`` as :func:`_rules` derives it."""
    pp, pend = t.pipeline_model_parallel_size, t.zero_bubble_max_pending_backward
    if not t.enable_zero_bubble:
        if pend is not None:
            return [("zero_bubble_max_pending_backward", "zero_bubble_max_pending_backward is read only with "
                     "enable_zero_bubble (the Zero Bubble fork's arguments.py)", "set enable_zero_bubble: true, "
                     "or remove zero_bubble_max_pending_backward")]
        return []
    if pp == 1:
        return [("enable_zero_bubble", "zero bubble schedules need pipeline parallelism (pp > 1)",
                 "set pp > 1, or remove enable_zero_bubble")]
    if t.num_layers_per_virtual_pipeline_stage is not None:
        return [("num_layers_per_virtual_pipeline_stage", "enable_zero_bubble is lowered as ZB-H1, one chunk a "
                 "rank (ZB-V, the fork's two-chunk schedule, is not a training-block schedule yet)",
                 "remove num_layers_per_virtual_pipeline_stage")]
    if pend is not None and pend != pp:
        return [("zero_bubble_max_pending_backward", f"only ZB-1p (max pending backward = pp = {pp}) is lowered: "
                 "other limits are the fork's automatic (ILP) schedules, which schedsim has no generator for",
                 f"set zero_bubble_max_pending_backward: {pp}, or remove it")]
    mbs = t.micro_batch_size
    m = (t.global_batch_size or mbs * dp) // (mbs * dp)
    if m < pp:
        return [("global_batch_size", f"ZB-H1 needs at least pp = {pp} microbatches, got {m} (global_batch_size / "
                 "(micro_batch_size · dp))", f"use global_batch_size: {pp * mbs * dp} or more")]
    return []


def _recompute_rules(t: TrainingSpec) -> list[tuple[str, str, str]]:
    """Recomputation settings (Megatron's ``transformer_config.py``)."""
    out = []
    rg, rm = t.recompute_granularity, t.recompute_method
    if rg == "selective" and rm is not None:
        out.append(("recompute_method", "recompute method is not yet supported for selective recomputing "
                    "granularity (Megatron-LM transformer_config.py)", "remove recompute_method"))
    if rg == "full" and rm is None:
        out.append(("recompute_method", 'Using recompute_granularity: full so recompute_method must be "block" or '
                    '"uniform" (Megatron-LM transformer_config.py)', "add recompute_method: uniform"))
    if rg == "full" and t.recompute_num_layers is None:
        out.append(("recompute_num_layers", "When using recompute_granularity: full recompute_num_layers must be "
                    "between 1 and num_layers_per_pipeline_rank (Megatron-LM transformer_config.py)",
                    "add recompute_num_layers: 1"))
    if rg is None and rm is not None:
        out.append(("recompute_method", "recompute_method is set but recompute_granularity is not (Megatron-LM "
                    "transformer_config.py: the method applies to full recomputation)",
                    "add recompute_granularity: full, or remove recompute_method"))
    return out


def refusal(t: TrainingSpec, world_size: int) -> tuple[str, str, str] | None:
    """The first rule ``t`` breaks on ``world_size`` ranks, as (field, Megatron's reason, fix), or None."""
    broken = _rules(t, world_size)
    return broken[0] if broken else None


def check_training(t: TrainingSpec, world_size: int, doc: Any, file: str, env: Any = None) -> None:
    """Refuse a block Megatron-LM would refuse (its reason, quoted), or one this version cannot lower.

    ``doc`` is the loader's evaluated ``training`` mapping (its ``key_marks`` give each key's line); ``env`` the
    schedule's ``env`` (``use_torch_fsdp2`` with ``CUDA_DEVICE_MAX_CONNECTIONS: 1`` is refused, Megatron's
    "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one").

    Raises
    ------
    SpecError
        ``FILE:LINE:COL: training.<field>: <Megatron's reason>`` and a fix.
    """
    broken = refusal(t, world_size)
    if broken is None and t.use_torch_fsdp2 and (env or {}).get("CUDA_DEVICE_MAX_CONNECTIONS") == 1:
        broken = ("use_torch_fsdp2", "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one "
                  "(Megatron-LM arguments.py): the schedule's env sets it to 1",
                  "remove CUDA_DEVICE_MAX_CONNECTIONS from env (or set it above 1)")
    if broken is None:
        return
    field, msg, fix = broken
    marks = getattr(doc, "key_marks", {}) or {}
    short = next((k for k, v in ALIASES.items() if v == field), None)
    mark = marks.get(field) or (marks.get(short) if short else None) or getattr(doc, "mark", None)
    key = field if field in marks or short not in marks else short
    raise SpecError(msg, file=file, line=mark[0] if mark else None, column=mark[1] if mark else None,
                    path=f"training.{key}", fix=fix)


# ---------------------------------------------------------------- what users compare with their logs
def model_flops(t: TrainingSpec, plan: TrainingPlan, causal: bool = False) -> float:
    """FLOP of one step, Megatron-LM's ``num_floating_point_operations(args, global_batch)``
    (``megatron/training/training.py``; see the module docstring). Recomputation is not counted (model FLOPs).

    ``causal=False`` (the default, the papers' figure: Narayanan et al. 2021 eq. 3, Korthikanti et al. 2022) counts
    the core attention (``QKᵀ`` and its product with V) whole, the ``s/h`` term; ``causal=True`` halves it, as
    Megatron-LM does since commit 8873b55 (2025-03-06, "Fixes in number of floating-point operation estimates for
    MoE and attention layer": ``seq_length / hidden_size / 2``; later ``transformer_flops``'s "/ 2  # causal mask
    (only half of the mask is non-zero)"), so a current Megatron-LM log's ``throughput per GPU`` is the
    ``causal=True`` figure."""
    h, L, s = t.hidden_size, t.num_layers, t.seq_length
    a = t.num_attention_heads
    k = t.moe_router_topk if t.num_experts else 1
    gate = 1.5 if t.swiglu else 1.0
    core = s / h / 2 if causal else s / h
    return 12.0 * plan.global_batch * s * L * h * h * (
        (1 + plan.groups / a + core) + (plan.ffn / h) * k * gate + plan.vocab / (2 * L * h))


def stage_activation_memory(t: TrainingSpec, plan: TrainingPlan) -> tuple[int, dict[int, int]]:
    """Stored activations of one stage chunk and microbatch, bytes: :func:`act_bytes_per_layer` times the stage's
    layers (``plan.stage_layers``, truncated to an int), as ``(largest, per stage)``; the per-stage dict (stage →
    bytes) is empty when every stage holds as many layers (then ``largest`` is every stage's). What the pipeline
    info's ``activation_memory_bytes`` and ``stage_activation_memory_bytes`` hold
    (:class:`~schedsim.graph.info.PipelineInfo`).

    Full recomputation by ``recompute_method``, as the lowering reruns the layers (Megatron-LM
    ``transformer_block.py`` ``_checkpointed_forward``): ``block`` stores the input of the chunk's first
    ``recompute_num_layers`` layers and every activation of the others (:func:`act_bytes_per_layer` with ``None``);
    ``uniform`` one input per group of ``recompute_num_layers`` layers, ``ceil(n / k)`` (as :func:`memory_per_rank`)."""
    per_layer = act_bytes_per_layer(t, plan)
    k = t.recompute_num_layers or 0
    if t.recompute_granularity == "full" and t.recompute_method == "block":
        whole = act_bytes_per_layer(t, plan, None)
        stage = [int(per_layer * min(k, n) + whole * (n - min(k, n))) for n in plan.stage_layers]
    elif t.recompute_granularity == "full" and t.recompute_method == "uniform" and k > 1:
        stage = [int(per_layer * -(-n // k)) for n in plan.stage_layers]
    else:
        stage = [int(per_layer * n) for n in plan.stage_layers]
    return max(stage), (dict(enumerate(stage)) if len(set(stage)) > 1 else {})


def act_bytes_per_layer(t: TrainingSpec, plan: TrainingPlan, granularity: str | None = "as set") -> float:
    """Stored activations of one layer and microbatch, bytes, for the block's ``recompute_granularity`` or the one
    given (``None``: no recomputation).

    Korthikanti et al. 2022 (arXiv 2205.05198) §4.1 and Table 2 count 16-bit activations (2 bytes an element)
    and 1-byte dropout masks: per layer ``34·sbh + 5·a·s²·b``, of which the masks are ``2·sbh + a·s²·b``
    (the attention-output and MLP dropout masks, and the softmax dropout mask). With ``r`` = the activation
    dtype's bytes / 2 (Megatron keeps activations in ``params_dtype``: r = 1 under --bf16/--fp16, 2 in fp32) the
    table becomes, bytes:

    * no recomputation: ``sbh·(8r + 2 + 24r/t) + a·s²·b·(4r + 1)/t``; with sequence parallelism
      ``sbh/t·(32r + 2) + a·s²·b·(4r + 1)/t`` (r = 1: the paper's ``sbh·(10 + 24/t + 5as/(ht))`` and
      ``sbh/t·(34 + 5as/h)``);
    * selective recomputation, FlashAttention (``use_flash_attn``, which stores no b·a·s² tensor) or context
      parallelism (below): the same without the ``a·s²·b`` terms;
    * full recomputation: the layer input, ``2r·sbh`` (``/t`` with SP).

    The table's MLP takes ``f = 4h``; of its terms the two ``sbf`` tensors (the GeLU's input and output, ``16r·sbh``
    at f = 4h) scale with ``ffn_hidden_size`` f: ``4r·sbf`` in place of ``16r·sbh``, as Megatron-LM's
    ``theoretical_memory_usage.py`` ``compute_activation_memory`` writes the selective, SP row,
    ``sbh·(18 + 4f/h)`` (a gated ``swiglu`` fc1 output of 2f is not counted apart, as there).

    With context parallelism each rank holds ``s/cp`` tokens: the count is divided by cp, and it has no ``a·s²·b``
    terms, as with FlashAttention: the attention core is then Transformer Engine's ring of fused attention kernels,
    which store no ``a·s²·b`` tensor (TE ``dot_product_attention/utils.py`` ``get_attention_backend``: "Disabling
    UnfusedDotProductAttention as it does not support context parallelism"; the lowering runs no scores, softmax
    or dropout kernel there, :func:`schedsim.lower.training._with_cp`).
    """
    from schedsim.spec.pipeline_block import layer_activation_bytes

    rg = t.recompute_granularity if granularity == "as set" else granularity
    return layer_activation_bytes(t.seq_length, t.micro_batch_size, t.hidden_size, t.num_attention_heads, plan.ffn,
                                  plan.dtype, tp=plan.tp, cp=plan.cp, sp=plan.sp, full=rg == "full",
                                  scores=not (rg == "selective" or t.use_flash_attn or plan.cp > 1))


def _params_per_layer(t: TrainingSpec, plan: TrainingPlan) -> int:
    """Parameters of one GPT layer (Megatron ``--transformer-impl local``: QKV with GQA, projection, MLP, biases,
    two LayerNorms), the same count as :func:`schedsim.spec.pipeline_block._params_per_layer` when g = a."""
    h, f = t.hidden_size, plan.ffn
    kv = 2 * h * plan.groups // t.num_attention_heads
    f1 = 2 * f if t.swiglu else f
    if plan.experts:  # the router, then the rank's E/ep experts (expert_params_per_layer)
        return (h * (h + kv) + (h + kv)) + (h * h + h) + h * plan.experts + 4 * h + expert_params_per_layer(t, plan)
    return (h * (h + kv) + (h + kv)) + (h * h + h) + (h * f1 + f1) + (f * h + h) + 4 * h


def tp_replicated_params_per_layer(t: TrainingSpec, plan: TrainingPlan) -> int:
    """Parameters of one layer (of :func:`_params_per_layer`) that every TP rank holds whole rather than a 1/tp
    share: the two LayerNorms' ``4h`` (Megatron-LM ``megatron/core/transformer/transformer_layer.py``: a plain
    ``LayerNorm``/``FusedLayerNorm`` of ``hidden_size``), the biases of the row-parallel linears, attention's
    projection and the MLP's fc2, ``h`` each (``megatron/core/tensor_parallel/layers.py`` ``RowParallelLinear``:
    its bias has ``output_size`` elements, "not parallelized"; MoE experts have none), and an MoE layer's router,
    ``h·E`` (``megatron/core/transformer/moe/router.py`` ``Router``: ``num_moe_experts × hidden_size``)."""
    h = t.hidden_size
    return 4 * h + h + (h * plan.experts if plan.experts else h)


def tp_rank_params_per_layer(t: TrainingSpec, plan: TrainingPlan) -> float:
    """Parameters of one layer on one TP rank: the split part of :func:`_params_per_layer` over tp, plus
    :func:`tp_replicated_params_per_layer` whole."""
    rep = tp_replicated_params_per_layer(t, plan)
    return (_params_per_layer(t, plan) - rep) / plan.tp + rep


def expert_params_per_layer(t: TrainingSpec, plan: TrainingPlan) -> int:
    """Parameters of the ``E/ep`` experts one EP rank holds in one layer (fc1 ``h × f1`` and fc2 ``f × h`` each,
    no biases: :func:`schedsim.spec.pipeline_block._moe_mlp`); 0 for a dense model. Their gradients are reduced
    over the experts' data-parallel group (``dp·cp/ep`` ranks), not the dense one."""
    if not plan.experts:
        return 0
    f = plan.ffn
    return plan.experts // plan.ep * (t.hidden_size * (2 * f if t.swiglu else f) + f * t.hidden_size)


def memory_per_rank(t: TrainingSpec, plan: TrainingPlan) -> dict[str, float]:
    """Bytes per GPU of the first pipeline stage (the most loaded where the stages are even: embedding and the
    most microbatches in flight): ``params``, ``grads``, ``optimizer`` (Megatron's distributed-optimizer table) and
    ``activations`` (Korthikanti et al. 2022), keys in that order, plus ``total``; see the module docstring for
    the sources.
    The last stage chunk holds the final LayerNorm (``2h``, whole on every TP rank) and, with pp = 1, the untied
    output layer (``V·h/t`` more parameters, Megatron-LM ``gpt_model.py`` ``output_layer`` when
    ``untie_embeddings_and_output_weights``): :func:`schedsim.spec.pipeline_block.stage_params`. With
    ``use_torch_fsdp2`` the static bytes are :func:`fsdp_memory`'s (keys ``params``, ``grads``, ``optimizer``,
    ``gathered``).

    With uneven stages (``decoder_first_pipeline_num_layers``, ``..._last_...``, or the chunks padding empties,
    ``allow_padding_num_layers``, with or without virtual stages) the first stage need not be the most loaded: each
    pipeline rank r is counted with its own layers and its own in-flight layer-microbatches
    (:func:`inflight_layers`; ``min(m, pp − r)`` microbatches under 1F1B), the last (pp > 1) with the output
    layer's ``V·h/t`` parameters (Megatron-LM ``gpt_model.py``: the last stage's ``output_layer``, its own weight
    when untied, else a copy of the word embeddings that ``embedding_grad_allreduce`` keeps equal,
    ``setup_embeddings_and_output_layer``), and the rank of the largest ``total`` is returned, with its pipeline
    rank as ``stage`` where that is not 0 (``stage`` is not part of ``total``)."""
    ranks = range(plan.pp) if len(set(plan.stage_layers)) > 1 else range(1)
    got = max(((r, _memory_of_rank(t, plan, r)) for r in ranks), key=lambda rd: (rd[1]["total"], -rd[0]))
    return got[1] | {"stage": got[0]} if got[0] else got[1]


def inflight_layers(plan: TrainingPlan, rank: int) -> int:
    """Layer-microbatches whose activations pipeline rank ``rank`` holds at once at its peak: its forwards in
    Megatron-LM's order (``schedules.py`` ``forward_backward_pipelining_with_interleaving``: ``num_warmup_microbatches
    = (p − r − 1)·2 + (v − 1)·p``, at most m·v, then one forward and one backward a step; forward k runs chunk
    ``(k mod p·v) // p``, backward k chunk ``v − 1 −`` that, ``get_model_chunk_id``), each holding its chunk's layers
    (``plan.stage_layers[c·p + r]``) until its backward. With v = 1 (1F1B: ``p − r − 1`` warm-up forwards) that is
    ``min(m, p − r)`` times the stage's layers; interleaved with equal chunks on rank 0, ``L/p·(p + (p − 1)/v)``
    (Korthikanti et al. 2022 §4.2.3), at most ``L/p·m``. Uneven chunks (padding) make each rank's count its own.
    ZB-H1 (``enable_zero_bubble``) defers the weight-gradient passes: every rank holds p microbatches (Qi et al.,
    ICLR 2024, Table 1: ``p·M_B``; :func:`schedsim.pipeline.analytic.peak_activation_memory`)."""
    p, v = plan.pp, plan.v
    chunk = plan.stage_layers[rank::p]
    if plan.zero_bubble:
        return min(plan.m, p) * sum(chunk)
    total = plan.m * v
    warm = min((p - rank - 1) * (2 if v > 1 else 1) + (v - 1) * p, total)
    held = sum(chunk[(k % (p * v)) // p] for k in range(warm))
    peak = held
    for j in range(total - warm):  # steady state: a forward, then the backward of microbatch-chunk j
        held += chunk[((warm + j) % (p * v)) // p]
        peak = max(peak, held)
        held -= chunk[v - 1 - (j % (p * v)) // p]
    return peak


def _memory_of_rank(t: TrainingSpec, plan: TrainingPlan, rank: int) -> dict[str, float]:
    """:func:`memory_per_rank` of pipeline rank ``rank`` (the word and position embeddings on rank 0 only; the
    activations of :func:`inflight_layers` layer-microbatches)."""
    # the rank's layers: its chunks rank, rank + pp, ... (virtual-stage order), which padding
    # (allow_padding_num_layers) leaves uneven
    lps = sum(plan.stage_layers[rank::plan.pp])
    # the embeddings on the first stage chunk, the final LayerNorm and the output layer (or the tied copy) on the
    # last (schedsim.spec.pipeline_block.stage_params); the rank holds chunks rank, rank + pp, ...
    from schedsim.spec.pipeline_block import stage_params

    ns = plan.pp * plan.v
    ends = stage_params(ns, 0, 0, hidden=t.hidden_size, seq=t.seq_length, vocab=plan.vocab, tp=plan.tp,
                        untied=t.untie_embeddings_and_output_weights)
    # layer norms, row-parallel biases and the router whole on every TP rank (tp_replicated_params_per_layer)
    n = lps * tp_rank_params_per_layer(t, plan) + sum(ends[s]["embedding"] + ends[s]["lm_head"]
                                                      for s in range(rank, ns, plan.pp))
    pb, gb, opt = {"bf16": (2, 4, 12), "fp16": (2, 2, 16), "fp32": (4, 4, 8)}[plan.dtype]
    ob = opt / (plan.dp * plan.cp) if t.use_distributed_optimizer else float(opt)
    # the experts' state is sharded over their own data-parallel group, dp·cp/ep ranks (Megatron-LM
    # theoretical_memory_usage.py: expert_sharded_params × num_bytes_per_parameter(expert_data_parallel_size))
    n_exp = lps * expert_params_per_layer(t, plan) / plan.tp
    ob_exp = opt / (plan.dp * plan.cp // plan.ep) if t.use_distributed_optimizer else float(opt)
    v = plan.v
    inflight = inflight_layers(plan, rank)
    per_layer = act_bytes_per_layer(t, plan)
    lpc = lps // v  # layers per chunk; recompute_method block recomputes the first recompute_num_layers of each
    k = t.recompute_num_layers or 0
    peak = 0.0
    if t.recompute_granularity == "full" and t.recompute_method == "block" and k < lpc:
        per_layer = (k * per_layer + (lpc - k) * act_bytes_per_layer(t, plan, None)) / lpc
    elif t.recompute_granularity == "full" and t.recompute_method == "uniform" and k > 1 and lpc:
        per_layer *= -(-lpc // k) / lpc  # one stored input per group of k layers
    most = max(plan.stage_layers[rank::plan.pp])  # the rank's largest chunk; a rank of padding alone re-runs none
    if t.recompute_granularity == "full":  # backward re-runs one checkpointed group's forward: its activations live
        peak = min(k if t.recompute_method == "uniform" else 1, most) * act_bytes_per_layer(t, plan, None)
    act = per_layer * inflight + peak
    out = {"params": n * pb, "grads": n * gb, "optimizer": (n - n_exp) * ob + n_exp * ob_exp, "activations": act}
    if t.use_torch_fsdp2:
        out = fsdp_memory(t, plan, n) | {"activations": act}
    out["total"] = sum(out.values())
    return out


def fsdp_units(t: TrainingSpec, plan: TrainingPlan) -> dict[str, float]:
    """Parameters of each FSDP unit on one TP rank with ``use_torch_fsdp2`` (pp = 1): Megatron-LM's
    ``TorchFullyShardedDataParallel`` calls ``fully_shard`` on every ``TransformerLayer`` (``l0`` …), the
    ``LanguageModelEmbedding`` (``embedding``: word and position embeddings, ``V·h/t + s·h``: the position embeddings
    are not split over tp, "Position embedding (serial)") and the output layer (``ColumnParallelLinear``, ``output``:
    ``V·h``, with the final LayerNorm's ``2h``, which the root unit holds, counted here), each divided by tp but
    the position embeddings, the LayerNorms, the row-parallel biases and the router, which every TP rank holds
    whole (:func:`tp_replicated_params_per_layer`;
    ``megatron/core/distributed/torch_fully_sharded_data_parallel.py``)."""
    h, tp = t.hidden_size, plan.tp
    layer = tp_rank_params_per_layer(t, plan)
    out = {"embedding": plan.vocab * h / tp + t.seq_length * h}
    out |= {f"l{k}": layer for k in range(t.num_layers)}
    out["output"] = plan.vocab * h / tp + 2 * h
    return out


def fsdp_memory(t: TrainingSpec, plan: TrainingPlan, n: float) -> dict[str, float]:
    """Static bytes per GPU with ``use_torch_fsdp2`` over the ``n`` parameters of a TP rank: FSDP2 keeps each
    parameter as a ``1/(dp·cp)`` shard (``torch.distributed.fsdp.fully_shard``: "shards the parameters across
    data parallel workers"), so ``params`` = ``n·pb/(dp·cp)``; its gradients are reduce-scattered to the same
    shards in the parameters' dtype (Megatron passes no ``MixedPrecisionPolicy``), ``grads`` = ``n·pb/(dp·cp)``;
    the optimizer holds the fp32 main weights and Adam moments of the shard, ``optimizer`` = ``n·o/(dp·cp)`` with
    o = 12 under bf16, 8 in fp32 (Megatron-LM ``dist_optimizer.md``'s table without the gradient); ``gathered``:
    the full parameters live at once, the unit computing and the unit prefetched after it (FSDP2 frees a unit
    after its forward and its backward, ``reshard_after_forward=True``, Megatron's default, and keeps at most one
    all-gather ahead: see :mod:`schedsim.lower.training`): the largest sum of two units adjacent in the order they
    run (:func:`fsdp_units`' order in the forward, the reverse in the backward: the same pairs),
    ``pb·max_j (P_j + P_{j+1})``."""
    pb, opt = {"bf16": (2, 12), "fp16": (2, 16), "fp32": (4, 8)}[plan.dtype]
    d = plan.dp * plan.cp
    sizes = list(fsdp_units(t, plan).values())
    pair = max(a + b for a, b in itertools.pairwise(sizes))
    return {"params": n * pb / d, "grads": n * pb / d, "optimizer": n * opt / d, "gathered": pb * pair}
