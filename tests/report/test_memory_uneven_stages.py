"""Activation memory of a ``training:`` block whose pipeline stages hold unequal layer counts: each stage chunk
stores its own layers' activations per microbatch (Korthikanti et al. 2022, arXiv 2205.05198, Table 2:
``act_bytes_per_layer``), in the memory curve (``meta["memory"]``) and in the pipeline metrics' peak, by hand.

The tiny model: s = 32, b = 1, h = 64, a = 4, f = 4h = 256, t = 1, bf16 (r = 1), no recomputation, no sequence
parallelism: one layer stores ``sbh·(8r + 2 + (8r + 4r·f/h)/t) + a·s²·b·(4r + 1)/t``
= 2048·(10 + 24) + 4·1024·5 = 69,632 + 20,480 = 90,112 bytes per microbatch.

1F1B (Narayanan et al., SC'21, §2.2): pipeline rank r of p holds at most min(m, p − r) microbatches' activations
(a forward stores from its start until its backward ends; rank r runs p − r − 1 warm-up forwards, then one more
before its first backward)."""

from __future__ import annotations

from pathlib import Path

from schedsim.api import load_text, predict
from schedsim.report.memory import _reference, memory_over_time
from schedsim.sim.pipeline_metrics import PipelineMetrics
from schedsim.sim.timeline import Timeline
from schedsim.sim.timeline_json import meta_equal
from schedsim.spec.training_block import act_bytes_per_layer, training_plan

LAYER = 90_112  # bytes of one layer and microbatch, the module docstring's sum

BLOCK = """\
schema_version: 1
name: uneven
world_size: {p}
training:
  num_layers: {layers}
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: {m}
  tp: 1
  pp: {p}
  bf16: true
{extra}"""


def _peaks(p: int, m: int, layers: int, extra: str, tmp_path: Path) -> tuple[dict[int, float], dict[int, float]]:
    """Per pipeline rank: the memory curve's peak with the receive buffers left out (activations only), and the
    pipeline metrics' peak activation bytes."""
    spec = load_text(BLOCK.format(p=p, m=m, layers=layers, extra=extra))
    t = spec.training
    assert t is not None
    assert act_bytes_per_layer(t, training_plan(t, p)) == LAYER
    run = predict(spec, "h200", full_ranks=True)
    tl = run.timeline
    # the receive buffers zeroed: what is left of the curve is the activations
    spans = [s._replace(bytes=0.0) if s.kind == "recv" else s for s in tl.spans]
    acts = Timeline(tl.schedule, tl.source, tl.world_size, spans=spans, meta=dict(tl.meta))
    mem = memory_over_time(acts)
    assert meta_equal(mem, _reference(acts))  # the columns as the span-by-span definition
    curve = {r: 0.0 for r in range(p)} if mem is None else {r: d["peak_bytes"] for r, d in mem["ranks"].items()}
    pm = run.metrics.pipeline
    assert pm is not None
    # timeline.json keeps the stages' figures: read back, the metrics and the curve are the same
    tl.write_json(tmp_path / "timeline.json")
    back = Timeline.read_json(tmp_path / "timeline.json")
    assert back.pipeline == tl.pipeline and PipelineMetrics.of(back, memory_timeline=False) == pm
    return curve, pm.peak_memory_bytes


def test_uneven_last_stage_counts_its_own_layers(tmp_path: Path) -> None:
    # 4 layers over pp 2, the last stage 3 of them: stages (1, 3); m = 4. Rank 0: min(4, 2) = 2 microbatches of
    # 1 layer; rank 1: 1 microbatch of 3 layers (the first stage's figure would give it 1 layer).
    curve, peak = _peaks(2, 4, 4, "  decoder_last_pipeline_num_layers: 3\n", tmp_path)
    want = {0: 2 * 1 * LAYER, 1: 1 * 3 * LAYER}
    assert curve == want
    assert peak == want


def test_padded_layers_count_on_the_stage_that_holds_them(tmp_path: Path) -> None:
    # 1 layer over pp 8, padded to 8: the fork's get_offset takes the padding off the last chunk, then 0, 1, ...,
    # 5, which leaves the one layer on stage 6 (stage 0 holds none). Rank 6: min(8, 8 - 6) = 2 microbatches.
    curve, peak = _peaks(8, 8, 1, "  allow_padding_num_layers: true\n", tmp_path)
    want = {r: 2 * LAYER if r == 6 else 0 for r in range(8)}
    assert curve == want
    assert peak == want


def test_padded_virtual_stages_count_each_chunk_on_its_own(tmp_path: Path) -> None:
    # 7 layers over pp 2 with 2 layers a virtual stage, padded to 8: v = 2, the padding off the last chunk (stage 3,
    # rank 1's second chunk): stages (2, 2, 2, 1). m = 4, Megatron's interleaved order: rank 0 runs
    # 0F0 0F1 2F0 2F1 0F2 before its first backward, 5 chunks of 2 layers; rank 1 runs 1F0 1F1 3F0 3B0 3F1 3B1 1F2
    # 1B0 ..., at most 1F0 1F1 1F2 in flight: 3 chunks of 2 layers (3F0 with 1F0 1F1 is 2 + 2 + 1 = 5 layers).
    curve, peak = _peaks(2, 4, 7, "  num_layers_per_virtual_pipeline_stage: 2\n  allow_padding_num_layers: true\n",
                         tmp_path)
    want = {0: 10 * LAYER, 1: 6 * LAYER}
    assert curve == want
    assert peak == want


def test_even_stages_keep_the_json_form() -> None:
    """Even stages: no per-stage figures, in the info or its JSON form (timeline.json as before); uneven ones: each
    stage's, and the largest as ``activation_memory_bytes`` (an old reader's upper bound, not an under-count)."""
    even = predict(load_text(BLOCK.format(p=2, m=4, layers=4, extra="")), "h200").timeline.pipeline
    assert even is not None and even.activation_memory_bytes == 2 * LAYER
    assert even.stage_activation_memory_bytes == {} and "stage_activation_memory_bytes" not in even.to_dict()
    padded = predict(load_text(BLOCK.format(p=8, m=8, layers=1, extra="  allow_padding_num_layers: true\n")),
                     "h200").timeline.pipeline
    assert padded is not None and padded.activation_memory_bytes == LAYER
    assert padded.stage_activation_memory_bytes == {s: LAYER if s == 6 else 0 for s in range(8)}


def _recompute_peaks(extra: str) -> tuple[dict[int, float], dict[int, float]]:
    """Per rank of a 4-layer pp 2 block (m = 4, stages of 2 layers) under ``extra``: the memory curve's peak with the
    receive buffers left out, and the pipeline metrics' peak activation bytes."""
    run = predict(load_text(BLOCK.format(p=2, m=4, layers=4, extra=extra)), "h200", full_ranks=True)
    tl = run.timeline
    spans = [s._replace(bytes=0.0) if s.kind == "recv" else s for s in tl.spans]
    mem = memory_over_time(Timeline(tl.schedule, tl.source, tl.world_size, spans=spans, meta=dict(tl.meta)))
    assert mem is not None and run.metrics.pipeline is not None
    return {r: d["peak_bytes"] for r, d in mem["ranks"].items()}, run.metrics.pipeline.peak_memory_bytes


CKPT = 2 * 2048  # full recomputation stores a layer's input only: 2·r·sbh = 2 · 1 · 2048 bytes (Korthikanti §5)


def test_block_recompute_stores_the_other_layers_whole() -> None:
    # recompute_method block, recompute_num_layers 1: of each chunk's 2 layers the first reruns its forward (its
    # input stored) and the second keeps all its activations (Megatron-LM transformer_block.py
    # _checkpointed_forward, 'block'): one chunk stores CKPT + LAYER. Rank 0 holds 2 microbatches, rank 1 one;
    # the backward's re-run of the checkpointed layer holds its LAYER more (CheckpointFunction.backward), as
    # memory_per_rank counts it (the curve left it out before)
    curve, peak = _recompute_peaks("  recompute_granularity: full\n  recompute_method: block\n"
                                   "  recompute_num_layers: 1\n")
    want = {0: 2 * (CKPT + LAYER) + LAYER, 1: CKPT + LAYER + LAYER}
    assert curve == want
    assert peak == want


def test_uniform_recompute_stores_one_input_per_group() -> None:
    # recompute_method uniform, recompute_num_layers 2: the chunk's 2 layers are one checkpointed group, one
    # stored input (Megatron-LM 'uniform'; memory_per_rank's ceil(layers / k) inputs)
    curve, peak = _recompute_peaks("  recompute_granularity: full\n  recompute_method: uniform\n"
                                   "  recompute_num_layers: 2\n")
    # and the backward re-runs the group's 2 layers at once: 2 LAYER live until its backward ends
    want = {0: 2 * CKPT + 2 * LAYER, 1: CKPT + 2 * LAYER}
    assert curve == want
    assert peak == want
