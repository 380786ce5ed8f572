"""Published Megatron-LM iteration times against schedsim's prediction of the same ``training:`` block.

    python benchmarks/accuracy/published_training.py [--profile NAME] [--rows 22B,175B] [--max-ops N] [--layers]
        [--zb-stages]

Rows (every number is the paper's; nothing here is fitted to them):

* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198),
  Table 5: end-to-end iteration time on A100 80 GB (Selene) with full recomputation and with sequence
  parallelism + selective recomputation. Configurations from the paper's Table 3 (as Calculon's validation set
  encodes them, ``calculon-ai/calculon`` ``validation/seqsel/tab5``): 22B (a=64, h=6144, L=48, TP 8, 8 GPUs,
  global batch 4, micro batch 4), 175B (a=96, h=12288, L=96, TP 8 × PP 8, 64 GPUs, batch 64, micro batch 1,
  3 interleaved chunks per rank). Held out (added after the model was built): 530B (a=128, h=20480, L=105, TP 8
  × PP 35, 280 GPUs, batch 280, micro batch 1, 3 interleaved chunks of one layer) and 1T (a=160, h=25600,
  L=128, TP 8 × PP 64, 512 GPUs, batch 512, micro batch 1, no interleaving), 49.05 / 37.83 s and 94.42 / 71.49 s
  (full / SP + selective), the configurations and times as Calculon encodes them (``validation/seqsel/tab5/``,
  ``calculon/llm/validation.py`` ``seqsel_tab5``, citing the paper's Table 5). Each lowers to 2 to 5 million ops
  for its representative ranks. The Megatron-LM of the paper (2022) split pipeline messages over the TP ranks
  (``scatter_gather_tensors_in_pipeline``, on by default from 2021-02, commit 72e4230; off under sequence
  parallelism from 2022-08, which the lowering follows) and issued the backward TP all-reduce asynchronously
  (the training block's default).
* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
  (arXiv 2104.04473), Table 1: achieved TFLOP/s per GPU of GPT models with s = 2048, V = 51200, activation
  recomputation. The table gives TFLOP/s, not time: the published iteration time here is eq. 3's FLOPs
  ``96·B·s·L·h²·(1 + s/6h + V/16Lh)`` / (TFLOP/s × GPUs). The rows with PP = 1 are run: 1.7B (a=24, h=2304,
  L=24, 32 GPUs, batch 512, 137 TFLOP/s) and 3.6B (a=32, h=3072, L=30, TP 2, 64 GPUs, batch 512, 138 TFLOP/s);
  held out (added after the model was built, not looked at while building it): 7.5B (a=32, h=4096, L=36, TP 4,
  128 GPUs, batch 512, 142 TFLOP/s) and 18B (a=48, h=6144, L=40, TP 8, 256 GPUs, batch 1024, 135 TFLOP/s).
  The run settings are the paper's artifact, Megatron-LM ``examples/sc21/run_table_1.sh`` and ``CONFIG.sh``
  (commit de7dc40, 2021-08-10): micro batch 16 (1.7B to 7.5B) and 8 (18B), ``--DDP-impl torch`` (PyTorch DDP:
  the gradient all-reduce overlapped with the last microbatch's backward, ``no_sync`` before it; here
  ``overlap_grad_reduce`` with Megatron's buckets stands for DDP's 25 MB ones), ``--checkpoint-activations``
  (full recomputation, every layer), ``--fp16``. That Megatron-LM had no asynchronous TP all-reduce (first in
  commit 16c9044, 2021-09-02): ``async_tensor_model_parallel_allreduce: false``.

* Megatron-LM's README (commit 152aab3, 2021-01-11), "GPT-3 Example", held out: ``examples/pretrain_gpt3_175B.sh``
  (TP 8 × PP 16 on 1,024 A100 GPUs, micro batch 1, global batch 1536, ``--checkpoint-activations``, ``--fp16``,
  the GPT-2 vocabulary, the default local DDP) "takes around 32 seconds" an iteration (138 TFLOP/s per GPU, which
  eq. 3 turns into the same 32 s). That Megatron-LM had neither scatter-gather p2p (commit 27fc468, 2021-01-20)
  nor the asynchronous TP all-reduce.

* Qi, Wan, Huang, Lin 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), all held out
  (added after the model was built; nothing fitted to them): §5.2 Table 4, throughput in samples per GPU per
  second of GPT-like models on up to 32 A100 SXM 80 GB (4 nodes, RoCE RDMA), with §5.1 Table 3's settings
  (:data:`ZB_TABLE3`: 1.5B, 6.2B, 14.6B, 28.3B; seq 1024; pp = GPUs, so tp = dp = 1; microbatch size 6, 3, 1,
  1; 24/32/64, 24/32/64, 48/64/128, 96/128/256 microbatches). The published time is m·b / (throughput · GPUs).
  From the fork's script of the time (sail-sg/zero-bubble-pipeline-parallelism ``examples/pretrain_zero_bubble.sh``,
  commit 425b42e, 2023-11-17): ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (:data:`ZB_ENV`), ``--fp16``, no recomputation,
  no FlashAttention flag, tied embeddings (no ``--untie``), Megatron's default dropouts,
  ``--allow-padding-num-layers`` (the first and last stage hold one layer fewer, as §5.1 says). Not in the paper:
  the vocabulary, taken as 32,000 (:data:`ZB_VOCAB` says why). The schedules: 1F1B (Megatron's),
  1F1B-I (one layer a chunk, §5.1; the fork's padding leaves the end chunks empty), ZB-1p lowered as ZB-H1
  (``enable_zero_bubble``; the paper's Table 5 gives both the same bubble rate in every setting). ZB-2p (an
  automatic schedule of limit 2p, found by the paper's ILP from profiled times) has no generator here: its 12
  published figures are left out.

``--zb-stages`` prints the Zero Bubble rows' per-stage check instead: the paper's Appendix D Table 6 (T_F, T_B, T_W
of a middle stage and microbatch, profiled in its ZB-2p runs) against the predicted compute of the middle rank of
the 1F1B row (:func:`zb_stage_times`); and the paper's own model of each row, its profiled stage times over one
minus its computed bubble rate (Tables 6 and 5, :func:`zb_paper_time`), against the measured time. Not a fit
either.

``--layers`` prints a per-part check instead: Korthikanti et al. 2022 Table 4, the time of one transformer layer
of the 22B model (TP 8, micro batch 4, 8 A100 80 GB) forward and backward, for five settings (no recompute,
sequence parallelism, full recompute, selective recompute, selective + sequence parallelism), against the
predicted time of the middle layer of a 3-layer copy of the 22B row (:func:`layer_times`). Not a fit: no
figure of the model is set from it.

Both papers ran fp16 mixed precision on DGX A100 nodes. The profile defaults to ``dgx_a100`` when this
checkout ships it; otherwise to ``h200`` (and the table says so: an H200 prediction is not a prediction of an
A100 run, only a check that the rows lower and run).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# (row, source, GPUs, training block, published iteration seconds, how the time was published)
K_SRC = "Korthikanti 2022 Tab. 5"
N_SRC = "Narayanan 2021 Tab. 1"
_SG = dict(scatter_gather_tensors_in_pipeline=True)  # Megatron-LM 2021-02 to 2023 (module docstring)
_K22 = dict(num_layers=48, hidden_size=6144, num_attention_heads=64, seq_length=2048, vocab_size=51200, fp16=True,
            micro_batch_size=4, global_batch_size=4, tp=8, pp=1, **_SG)
_K175 = dict(num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200, fp16=True,
             micro_batch_size=1, global_batch_size=64, tp=8, pp=8, num_layers_per_virtual_pipeline_stage=4, **_SG)
_FULL = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
_SEQSEL = dict(sequence_parallel=True, recompute_granularity="selective")


def _narayanan(a: int, h: int, L: int, tp: int, gpus: int, batch: int, tflops: float, mbs: int) -> tuple[dict, float]:
    block = dict(num_layers=L, hidden_size=h, num_attention_heads=a, seq_length=2048, vocab_size=51200, fp16=True,
                 micro_batch_size=mbs, global_batch_size=batch, tp=tp, pp=1, overlap_grad_reduce=True,
                 async_tensor_model_parallel_allreduce=False, **_FULL)
    s, V = 2048, 51200
    flops = 96 * batch * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))  # eq. 3, recomputation included
    return block, flops / (tflops * 1e12 * gpus)


_N17, _N17_T = _narayanan(24, 2304, 24, 1, 32, 512, 137.0, 16)
_N36, _N36_T = _narayanan(32, 3072, 30, 2, 64, 512, 138.0, 16)
_N75, _N75_T = _narayanan(32, 4096, 36, 4, 128, 512, 142.0, 16)
_N18, _N18_T = _narayanan(48, 6144, 40, 8, 256, 1024, 135.0, 8)

_K530 = dict(num_layers=105, hidden_size=20480, num_attention_heads=128, seq_length=2048, vocab_size=51200, fp16=True,
             micro_batch_size=1, global_batch_size=280, tp=8, pp=35, num_layers_per_virtual_pipeline_stage=1, **_SG)
_K1T = dict(num_layers=128, hidden_size=25600, num_attention_heads=160, seq_length=2048, vocab_size=51200, fp16=True,
            micro_batch_size=1, global_batch_size=512, tp=8, pp=64, **_SG)

_G3 = dict(num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, fp16=True, micro_batch_size=1,
           global_batch_size=1536, tp=8, pp=16, async_tensor_model_parallel_allreduce=False, **_FULL)

#: Qi, Wan, Huang, Lin, "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv 2401.10241), §5.1 Table 3 (model
#: and fixed settings) and §5.2 Table 4 (samples per GPU per second), as printed there: model -> (layers, heads,
#: hidden, pipelines = GPUs, micro batch, {schedule: {microbatches: samples/GPU/s}}). Sequence length 1024 for all.
ZB_TABLE3: dict[str, tuple[int, int, int, int, int]] = {
    "1.5B": (22, 24, 2304, 8, 6),
    "6.2B": (30, 32, 4096, 8, 3),
    "14.6B": (46, 40, 5120, 16, 1),
    "28.3B": (62, 48, 6144, 32, 1),
}
ZB_MICROBATCHES: dict[str, tuple[int, int, int]] = {"1.5B": (24, 32, 64), "6.2B": (24, 32, 64),
                                                    "14.6B": (48, 64, 128), "28.3B": (96, 128, 256)}
ZB_TABLE4: dict[str, dict[str, tuple[float, float, float]]] = {
    "ZB-2p": {"1.5B": (14.5, 14.8, 14.9), "6.2B": (4.32, 4.35, 4.39), "14.6B": (1.81, 1.83, 1.85),
              "28.3B": (0.99, 1.00, 1.00)},
    "ZB-1p": {"1.5B": (12.9, 13.4, 14.2), "6.2B": (3.88, 4.00, 4.20), "14.6B": (1.61, 1.67, 1.76),
              "28.3B": (0.87, 0.90, 0.96)},
    "1F1B": {"1.5B": (11.8, 12.5, 13.6), "6.2B": (3.50, 3.70, 4.03), "14.6B": (1.40, 1.49, 1.64),
             "28.3B": (0.76, 0.80, 0.88)},
    "1F1B-I": {"1.5B": (13.1, 13.4, 13.9), "6.2B": (4.01, 4.08, 4.19), "14.6B": (1.54, 1.59, 1.66),
               "28.3B": (0.82, 0.85, 0.90)},
}
ZB_SRC = "Qi 2024 Tab. 4"
#: The vocabulary is not in the paper: the fork's script of the time (``examples/pretrain_zero_bubble.sh``, commit
#: 425b42e, 2023-11-17) uses a SentencePiece ``tokenizer.model`` with 32,000 pieces (LLaMA's), and the paper's
#: model sizes agree with 32,000 and tied embeddings (12·L·h² + V·h: 1.47, 6.17, 14.63, 28.28 B) and with no
#: other common vocabulary (module docstring).
ZB_VOCAB = 32000
#: Table 4's schedules the training block lowers (ZB-2p, an automatic schedule of limit 2p, is not one: no rows)
ZB_LOWERED = ("1F1B", "1F1B-I", "ZB-1p")


def _zb_block(model: str, m: int, sched: str) -> dict:
    """The ``training:`` block of one Zero Bubble row (module docstring): Table 3's sizes, ``--fp16``, tp = dp = 1,
    no recomputation, no FlashAttention, Megatron's default dropouts, and the fork's ``--allow-padding-num-layers``
    (its script of the time, ``examples/pretrain_zero_bubble.sh``): the layers are padded to a multiple of pp and
    the first and last stage chunks hold one layer fewer (§5.1: "both the initial and final pipeline stages possess
    one fewer transformer layer"). 1F1B-I: one layer a chunk (§5.1), so those two chunks hold none. ZB-1p:
    ``enable_zero_bubble`` with the fork's limit for it, ``zero_bubble_max_pending_backward`` = pp (lowered as
    ZB-H1: the key's description). The fork's host synchronisations once a microbatch on the first and last stage:
    ``get_batch_sync`` (its pretrain_gpt.py l. 90-120, ``broadcast_data``'s ``.cpu()``, megatron/core/
    tensor_parallel/data.py l. 45) and ``check_for_nan_in_loss_and_grad`` (pretrain_gpt.py l. 166-168, on by
    default: megatron/arguments.py l. 828-830), at 425b42e."""
    L, a, h, p, b = ZB_TABLE3[model]
    block = dict(num_layers=L, hidden_size=h, num_attention_heads=a, seq_length=1024, vocab_size=ZB_VOCAB, fp16=True,
                 micro_batch_size=b, global_batch_size=m * b, tp=1, pp=p, allow_padding_num_layers=True,
                 get_batch_sync=True, check_for_nan_in_loss_and_grad=True)
    if sched == "1F1B-I":
        block.update(num_layers_per_virtual_pipeline_stage=1)
    elif sched == "ZB-1p":
        block.update(enable_zero_bubble=True, zero_bubble_max_pending_backward=p)
    return block


def _zb_rows() -> list[tuple[str, str, int, dict, float, str]]:
    """The Zero Bubble rows the training block expresses (1F1B, 1F1B-I and ZB-1p; not ZB-2p: module docstring),
    all held out: the published iteration time is m·b / (samples per GPU per second · p)."""
    out = []
    for sched in ZB_LOWERED:
        for model, (*_, p, b) in ZB_TABLE3.items():
            for m, thr in zip(ZB_MICROBATCHES[model], ZB_TABLE4[sched][model], strict=True):
                out.append((f"ZB {model} m{m} {sched} h.o.", ZB_SRC, p, _zb_block(model, m, sched),
                            m * b / (thr * p), "from samples/GPU/s"))
    return out


ROWS: list[tuple[str, str, int, dict, float, str]] = [
    ("22B full", K_SRC, 8, {**_K22, **_FULL}, 1.42, "measured"),
    ("22B seq+sel", K_SRC, 8, {**_K22, **_SEQSEL}, 1.10, "measured"),
    ("175B full", K_SRC, 64, {**_K175, **_FULL}, 18.13, "measured"),
    ("175B seq+sel", K_SRC, 64, {**_K175, **_SEQSEL}, 13.75, "measured"),
    ("1.7B", N_SRC, 32, _N17, _N17_T, "from TFLOP/s"),
    ("3.6B", N_SRC, 64, _N36, _N36_T, "from TFLOP/s"),
    ("7.5B h.o.", N_SRC, 128, _N75, _N75_T, "from TFLOP/s"),
    ("18B h.o.", N_SRC, 256, _N18, _N18_T, "from TFLOP/s"),
    ("530B full h.o.", K_SRC, 280, {**_K530, **_FULL}, 49.05, "measured"),
    ("530B s+s h.o.", K_SRC, 280, {**_K530, **_SEQSEL}, 37.83, "measured"),
    ("1T full h.o.", K_SRC, 512, {**_K1T, **_FULL}, 94.42, "measured"),
    ("1T s+s h.o.", K_SRC, 512, {**_K1T, **_SEQSEL}, 71.49, "measured"),
    ("175B 1024 h.o.", "Megatron-LM README 2021", 1024, _G3, 32.0, "measured"),
    *_zb_rows(),
]


#: The environment of the Zero Bubble rows: the fork's script of the time exports ``CUDA_DEVICE_MAX_CONNECTIONS=1``
#: for every schedule (sail-sg/zero-bubble-pipeline-parallelism ``examples/pretrain_zero_bubble.sh`` at 425b42e,
#: its first command), where the training block sets it only for tp > 1 (Megatron-LM's requirement) and these rows
#: have tp = 1.
ZB_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": 1}


def _yaml(name: str, gpus: int, block: dict, env: dict | None = None) -> str:
    """A schedule file of one ``training:`` block on ``gpus`` ranks, with the program's ``env`` where given."""
    import yaml

    doc: dict[str, Any] = {"schema_version": 1, "name": name.replace(" ", "_").replace("+", "_"), "world_size": gpus}
    if env:
        doc["env"] = env
    doc["training"] = block
    return yaml.safe_dump(doc, sort_keys=False)


def predict_row(text: str, profile: Any) -> tuple[float, dict, int]:
    """Iteration time (s), the training report's JSON form and the op count of one row's schedule (lowered for one
    representative rank per class where that is exact on the profile, as ``schedsim predict`` does; the op count
    is the lowering's)."""
    from schedsim.api import lower_spec
    from schedsim.report.training import training_report
    from schedsim.sim.engine import simulate
    from schedsim.sim.symmetry import mark_represented, symmetric_exact
    from schedsim.spec.loader import load_text

    spec = load_text(text)
    prog = lower_spec(spec, symmetric=symmetric_exact(profile))
    tl = simulate(prog, profile)
    mark_represented(tl, prog)
    return tl.makespan_s, training_report(spec, tl, profile).to_dict(), prog.N


#: Korthikanti et al. 2022 Table 4: (setting, forward ms, backward ms) of one 22B layer, and the block keys
#: that set it on the 22B row (Table 3: TP 8, micro batch 4)
TABLE4: list[tuple[str, float, float, dict]] = [
    ("no recompute", 7.7, 11.9, {}),
    ("sequence parallel", 7.2, 11.8, dict(sequence_parallel=True)),
    ("full recompute", 7.7, 19.5, _FULL),
    ("selective recompute", 7.7, 13.2, dict(recompute_granularity="selective")),
    ("selective + SP", 7.2, 13.1, _SEQSEL),
]


def layer_times(block: dict, profile: Any) -> tuple[float, float]:
    """(forward s, backward s) of the middle layer ``l1`` of ``block`` with 3 layers, on one pipeline stage: the
    forward from the start of its first kernel to the start of the next layer's on the compute stream; the
    backward from the start of its first input-gradient op to the start of layer ``l0``'s, plus its ops that ran
    outside that window (weight gradients deferred to the W phase)."""
    from schedsim.api import lower_spec
    from schedsim.sim.engine import simulate
    from schedsim.sim.symmetry import symmetric_exact
    from schedsim.spec.loader import load_text

    text = _yaml("layer", block["tp"], {**block, "num_layers": 3})
    tl = simulate(lower_spec(load_text(text), symmetric=symmetric_exact(profile)), profile)
    comp = sorted((s for s in tl.spans if s.rank == 0 and s.stream == "compute"), key=lambda s: s.start_s)

    def first(phase: str, layer: int) -> float:
        return next(s.start_s for s in comp if s.name.startswith(phase) and f".l{layer}." in s.name)

    b0, b1 = first("B", 1), first("B", 0)
    outside = sum(s.end_s - s.start_s for s in comp
                  if s.name.startswith("B") and ".l1." in s.name and not b0 <= s.start_s < b1)
    return first("F", 2) - first("F", 1), b1 - b0 + outside


#: Qi et al. 2024 Appendix D, Table 6: (model, m) -> T_F, T_B (input gradient), T_W (weight gradient), T_comm, ms,
#: profiled in the ZB-2p runs, of a middle stage (its layers: (L + 2) / p) and one microbatch
ZB_TABLE6: dict[tuple[str, int], tuple[float, float, float, float]] = {
    ("1.5B", 24): (18.522, 18.086, 9.337, 0.601), ("1.5B", 32): (18.513, 18.086, 9.331, 0.626),
    ("1.5B", 64): (18.546, 18.097, 9.321, 0.762), ("6.2B", 24): (29.718, 29.444, 19.927, 0.527),
    ("6.2B", 32): (29.802, 29.428, 19.530, 0.577), ("6.2B", 64): (29.935, 29.621, 19.388, 0.535),
    ("14.6B", 48): (11.347, 11.248, 8.132, 0.377), ("14.6B", 64): (11.307, 11.254, 8.101, 0.379),
    ("14.6B", 128): (11.325, 11.308, 8.109, 0.378), ("28.3B", 96): (10.419, 10.207, 7.715, 0.408),
    ("28.3B", 128): (10.408, 10.204, 7.703, 0.408), ("28.3B", 256): (10.402, 10.248, 7.698, 0.460),
}
#: Qi et al. 2024 §5.3 Table 5: bubble rates, computed by the paper from Table 6's times (not measured), in
#: :data:`ZB_TABLE6`'s order of (model, m)
ZB_TABLE5: dict[str, tuple[float, ...]] = {
    "1F1B": (0.2431, 0.1985, 0.1240, 0.2347, 0.1898, 0.1091, 0.2552, 0.2082, 0.1251, 0.2646, 0.2168, 0.1352),
    "1F1B-I": (0.1055, 0.0818, 0.0443, 0.0808, 0.0628, 0.0320, 0.1104, 0.0852, 0.0445, 0.1493, 0.1164, 0.0624),
    "ZB-H1": (0.1585, 0.1242, 0.0674, 0.1323, 0.1045, 0.0554, 0.1397, 0.1088, 0.0576, 0.1421, 0.1106, 0.0594),
    "ZB-1p": (0.1585, 0.1242, 0.0674, 0.1323, 0.1045, 0.0554, 0.1397, 0.1088, 0.0576, 0.1421, 0.1106, 0.0594),
}


def zb_paper_time(model: str, m: int, sched: str) -> float:
    """The paper's own model of an iteration, seconds: ``m·(T_F + T_B + T_W) / (1 - bubble rate)`` (§5.3: bubble
    rate = (cost - m·(T_F + T_B + T_W)) / cost) from Tables 6 and 5, for comparison with Table 4's measured time."""
    f, b, w, _ = ZB_TABLE6[(model, m)]
    return m * (f + b + w) / 1e3 / (1 - ZB_TABLE5[sched][list(ZB_TABLE6).index((model, m))])


def zb_timeline(model: str, profile: Any) -> Any:
    """The predicted timeline of the 1F1B row of ``model`` at Table 6's microbatch count (the first of the row's)."""
    from schedsim.api import lower_spec
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    m = ZB_MICROBATCHES[model][0]
    return simulate(lower_spec(load_text(_yaml("zb", ZB_TABLE3[model][3], _zb_block(model, m, "1F1B"), ZB_ENV))),
                    profile)


def zb_stage_times(model: str, profile: Any, tl: Any = None) -> tuple[float, float, float]:
    """(F, I, W) seconds per microbatch of the middle pipeline rank p/2 - 1 in the 1F1B row of ``model`` at Table 6's
    microbatch count: the compute-stream time of its ops of each phase over the step, divided by m. ``tl``: that
    row's :func:`zb_timeline`, when already simulated."""
    m = ZB_MICROBATCHES[model][0]
    p = ZB_TABLE3[model][3]
    tl = tl if tl is not None else zb_timeline(model, profile)
    got = {"F": 0.0, "I": 0.0, "W": 0.0}
    for sp in tl.spans:
        parts = sp.name.split(".")
        if sp.rank == p // 2 - 1 and sp.stream == "compute" and len(parts) > 2:
            phase = "F" if parts[0].startswith("F") else parts[2]
            if phase in got:
                got[phase] += sp.end_s - sp.start_s
    return got["F"] / m, got["I"] / m, got["W"] / m


def zb_hops(model: str, profile: Any, tl: Any = None) -> tuple[float, float]:
    """(median, mean) seconds of one pipeline p2p hop in the 1F1B row of ``model`` at Table 6's microbatch count:
    the sends of every rank (stream ``pp_send``, Megatron's batched p2p, each a hop of ``s·b·h`` fp16), to set
    beside Table 6's T_comm, which the fork measures as one hop: ``zb_schedules.py``
    ``bootstrap_and_profile_p2p_communication`` (sail-sg/zero-bubble-pipeline-parallelism at 425b42e) times 10
    forward-and-backward chains of Megatron's ``recv_forward``/``send_forward``/``recv_backward``/``send_backward``
    (each a ``batch_isend_irecv`` followed by ``torch.cuda.synchronize()``), divides by 2·(p - 1)·10 and takes the
    maximum over the ranks. ``tl``: that row's :func:`zb_timeline`, when already simulated."""
    import statistics

    tl = tl if tl is not None else zb_timeline(model, profile)
    # a send's time alone (``solo_s``: without the wait for its receiver), over every rank's sends, so that the
    # mean weighs the p - 1 boundaries (inter-node ones included) about as the fork's chain does
    hops = [sp.solo_s if sp.solo_s is not None else sp.end_s - sp.start_s for sp in tl.spans if sp.stream == "pp_send"]
    return statistics.median(hops), statistics.fmean(hops)


def print_zb_stages(profile: Any) -> None:
    """The per-stage check of the Zero Bubble rows: Qi et al. 2024 Table 6 against :func:`zb_stage_times`; then
    the paper's own model of each row (:func:`zb_paper_time`) against its measured time."""
    print(f"{'Table 6 model':<14} {'m':>4} " + " ".join(f"{x + ' ms':>8} {'pred.':>7} {'error':>7}" for x in "FBW"))
    tls = {model: zb_timeline(model, profile) for model in ZB_MICROBATCHES}  # each row simulated once, for both tables
    for model, m in ((k, ms[0]) for k, ms in ZB_MICROBATCHES.items()):
        got = zb_stage_times(model, profile, tls[model])
        cells = " ".join(f"{pub:>8.2f} {1e3 * x:>7.2f} {100 * (1e3 * x - pub) / pub:>+6.1f}%"
                         for pub, x in zip(ZB_TABLE6[(model, m)][:3], got, strict=True))
        print(f"{model:<14} {m:>4} {cells}", flush=True)
    print("one pipeline p2p hop: Table 6's T_comm (measured by the fork) against schedsim's (median / mean, ms):")
    for model, m in ((k, ms[0]) for k, ms in ZB_MICROBATCHES.items()):
        med, mean = zb_hops(model, profile, tls[model])
        print(f"{model:<14} {m:>4} {ZB_TABLE6[(model, m)][3]:>8.3f} {1e3 * med:>7.3f} {1e3 * mean:>7.3f}", flush=True)
    print("the paper's model (Tables 6 and 5) against its measured time (Table 4), error:")
    for sched in ZB_LOWERED:
        errs = [100 * (zb_paper_time(model, m, sched) - m * b / (thr * p)) / (m * b / (thr * p))
                for model, (*_, p, b) in ZB_TABLE3.items()
                for m, thr in zip(ZB_MICROBATCHES[model], ZB_TABLE4[sched][model], strict=True)]
        print(f"{sched:<7} " + " ".join(f"{e:+.1f}%" for e in errs))


def print_layers(profile: Any) -> None:
    """The per-part check: Korthikanti et al. 2022 Table 4 against :func:`layer_times` on ``profile``."""
    print(f"{'Table 4 setting':<20} {'fwd ms':>7} {'pred.':>7} {'error':>7} {'bwd ms':>7} {'pred.':>7} {'error':>7}")
    for name, fwd, bwd, keys in TABLE4:
        f, b = (1e3 * x for x in layer_times({**_K22, **keys}, profile))
        print(f"{name:<20} {fwd:>7.1f} {f:>7.2f} {100 * (f - fwd) / fwd:>+6.1f}% {bwd:>7.1f} {b:>7.2f} "
              f"{100 * (b - bwd) / bwd:>+6.1f}%", flush=True)


def main(argv: list[str] | None = None) -> int:
    from schedsim.hardware.profile import list_profiles, load_profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=None, help="hardware profile (default dgx_a100 if shipped, else h200)")
    ap.add_argument("--rows", default="", help="comma-separated row names or their leading words, e.g. ZB or "
                    "'ZB 1.5B' (default all)")
    ap.add_argument("--max-ops", type=int, default=20_000_000, help="the lowering's op limit (SCHEDSIM_MAX_OPS)")
    ap.add_argument("--layers", action="store_true", help="the per-layer check against Korthikanti 2022 Table 4")
    ap.add_argument("--zb-stages", action="store_true", help="the per-stage check against Qi et al. 2024 Table 6")
    args = ap.parse_args(argv)
    import os

    os.environ["SCHEDSIM_MAX_OPS"] = str(args.max_ops)
    name = args.profile or ("dgx_a100" if "dgx_a100" in list_profiles() else "h200")
    if args.profile is None and name != "dgx_a100":
        print("note: this checkout ships no dgx_a100 profile; predicting on h200, which is NOT the papers' A100: "
              "the errors below compare an H200 prediction with A100 measurements")
    prof = load_profile(name)
    want = {r.strip() for r in args.rows.split(",") if r.strip()}
    print(f"profile {name}")
    if args.layers:
        print_layers(prof)
        return 0
    if args.zb_stages:
        print_zb_stages(prof)
        return 0
    head = (f"{'row':<24} {'source':<24} {'GPUs':>5} {'published s':>12} {'predicted s':>12} {'error':>8} "
            f"{'TFLOP/s/GPU':>11} {'exp. TP s':>9} {'exp. DP s':>9} {'bubble s':>9} {'ops':>9} {'wall s':>7}")
    print(head)
    errs: list[float] = []
    held: list[bool] = []
    zb: list[bool] = []
    for row, src, gpus, block, pub, how in ROWS:
        if want and not any(row == w or row.startswith(w + " ") for w in want):
            continue
        t0 = time.perf_counter()
        it, rep, n = predict_row(_yaml(row, gpus, block, ZB_ENV if row.startswith("ZB ") else None), prof)
        wall = time.perf_counter() - t0
        err = (it - pub) / pub
        errs.append(abs(err))
        held.append(row.endswith("h.o."))
        zb.append(row.startswith("ZB "))
        ex = rep["exposed_s"]
        print(f"{row:<24} {src + ('*' if how != 'measured' else ''):<24} {gpus:>5} {pub:>12.3f} {it:>12.3f} "
              f"{100 * err:>+7.1f}% {rep['tflops_per_gpu']:>11.1f} {ex['tp']:>9.3f} {ex['dp']:>9.3f} "
              f"{rep['bubble_s']:>9.3f} {n:>9,} {wall:>7.1f}", flush=True)
    built = [e for e, h in zip(errs, held, strict=True) if not h]
    out = [e for e, h in zip(errs, held, strict=True) if h]
    zbe = [e for e, z in zip(errs, zb, strict=True) if z]
    groups = (("rows", errs), ("rows the model was built on", built), ("held-out rows (h.o.)", out),
              ("Zero Bubble rows (held out)", zbe))
    for label, part in groups:
        if part:
            print(f"mean |error| {100 * sum(part) / len(part):.1f} %, worst {100 * max(part):.1f} % over {len(part)} "
                  f"{label}")
    print("* published as TFLOP/s per GPU (the time is eq. 3's FLOPs over it) or as samples per GPU per second "
          "(the time is m·b over it and the GPUs); module docstring")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
