"""The Zero Bubble fork's keys of the ``training:`` block: ``allow_padding_num_layers`` (the fork's
``get_offset``: the padding layers come off the last stage chunk, then the first, the second, ...) and
``enable_zero_bubble`` (ZB-1p, lowered as ZB-H1), with their refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.spec.loader import load_text
from schedsim.spec.training_block import padded_layers, training_plan

BASE = """\
schema_version: 1
name: zb
world_size: 8
training:
  num_layers: 22
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: 24
  pp: 8
  fp16: true
  allow_padding_num_layers: true
"""


def _plan(extra: str = "", layers: int = 22):  # type: ignore[no-untyped-def]
    spec = load_text(BASE.replace("num_layers: 22", f"num_layers: {layers}") + extra)
    assert spec.training is not None
    return spec.training, training_plan(spec.training, spec.world_size)


def test_padding_takes_a_layer_off_the_last_then_the_first_stage() -> None:
    # 22 over pp 8: padded to 24 (22 - 22 % 8 + 8), 2 padding layers: the last stage, then the first
    t, plan = _plan()
    assert padded_layers(t) == 24
    assert plan.stage_layers == (2, 3, 3, 3, 3, 3, 3, 2)
    assert plan.schedule == "1f1b"
    # 23 layers: one padding layer, off the last stage only
    t, plan = _plan(layers=23)
    assert plan.stage_layers == (3, 3, 3, 3, 3, 3, 3, 2)
    # a multiple of pp is not padded
    t, plan = _plan(layers=16)
    assert (padded_layers(t), plan.stage_layers) == (16, (2,) * 8)


def test_padding_with_one_layer_a_chunk_leaves_the_end_chunks_empty() -> None:
    # 24 chunks of one layer (v = 24 / 8 / 1 = 3) in virtual-stage order: chunk 0 (rank 0's first) and chunk 23
    # (rank 7's last) hold none
    _, plan = _plan("  num_layers_per_virtual_pipeline_stage: 1\n")
    assert (plan.v, plan.schedule) == (3, "interleaved_1f1b")
    assert plan.stage_layers == (0,) + (1,) * 22 + (0,)


def test_zero_bubble_is_lowered_as_zb_h1() -> None:
    _, plan = _plan("  enable_zero_bubble: true\n  zero_bubble_max_pending_backward: 8\n")
    assert (plan.schedule, plan.stage_layers) == ("zb_h1", (2, 3, 3, 3, 3, 3, 3, 2))


@pytest.mark.parametrize(("extra", "field", "words"), [
    ("  enable_zero_bubble: true\n  zero_bubble_max_pending_backward: 16\n", "zero_bubble_max_pending_backward",
     "only ZB-1p (max pending backward = pp = 8) is lowered"),
    ("  zero_bubble_max_pending_backward: 8\n", "zero_bubble_max_pending_backward",
     "is read only with enable_zero_bubble"),
    ("  enable_zero_bubble: true\n  num_layers_per_virtual_pipeline_stage: 1\n",
     "num_layers_per_virtual_pipeline_stage", "lowered as ZB-H1, one chunk a rank"),
    ("  decoder_first_pipeline_num_layers: 2\n", "decoder_first_pipeline_num_layers",
     "the fork has no uneven stages"),
])
def test_refusals_name_the_key(tmp_path: Path, extra: str, field: str, words: str) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(BASE + extra)
    r = CliRunner().invoke(app, ["check", str(p)])
    assert r.exit_code == 2, r.stdout
    first = r.stderr.splitlines()[0]
    assert words in first and f": training.{field}" in first, first
    assert r.stderr.splitlines()[1].startswith("  fix: ")


def test_zero_bubble_needs_pp_microbatches(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(BASE.replace("global_batch_size: 24", "global_batch_size: 4") + "  enable_zero_bubble: true\n")
    r = CliRunner().invoke(app, ["check", str(p)])
    assert r.exit_code == 2
    assert "ZB-H1 needs at least pp = 8 microbatches, got 4" in r.stderr


def test_memory_of_the_first_rank_counts_its_chunks_layers_with_padding() -> None:
    # 24 chunks of one layer, chunks 0 and 23 padded away; rank 0 runs chunks 0, 8 and 16 (virtual-stage order:
    # chunk i on rank i % pp), 0 + 1 + 1 = 2 layers, not 3 x chunk 0's 0 layers
    from schedsim.spec.training_block import _memory_of_rank, _params_per_layer

    t, plan = _plan("  num_layers_per_virtual_pipeline_stage: 1\n")
    assert plan.stage_layers[0::plan.pp] == (0, 1, 1)
    n = 2 * _params_per_layer(t, plan) + plan.vocab * 64 + 32 * 64  # layers, word and position embeddings (tp 1)
    mem = _memory_of_rank(t, plan, 0)
    assert mem["params"] == pytest.approx(2 * n)  # fp16: 2 bytes a parameter
    assert mem["activations"] > 0


def _six_layers_pp4(extra: str):  # type: ignore[no-untyped-def]
    """BASE with 6 layers over pp 4 (padded to 8 stage chunks) on 4 ranks, m = 8, and the keys ``extra``."""
    return load_text(BASE.replace("num_layers: 22", "num_layers: 6").replace("world_size: 8", "world_size: 4")
                     .replace("pp: 8", "pp: 4").replace("global_batch_size: 24", "global_batch_size: 8") + extra)


def test_memory_per_gpu_is_the_most_loaded_rank_with_padded_interleaved_stages() -> None:
    """6 layers over pp 4 padded to 8 chunks of one layer (v = 2), m = 8: chunks 0 and 7 are empty, so rank 0
    holds 1 layer, ranks 1 and 2 hold 2, rank 3 holds 1. Megatron's interleaved order (warm-up forwards
    (p − r − 1)·2 + (v − 1)·p, forward k on chunk (k mod 8) // 4) keeps 4, 9, 7 and 5 layer-microbatches at the
    peak: rank 0's forwards 0-3 and 8-10 run its empty chunk. The report named rank 0 with L/p·(p + (p − 1)/v)
    = 1·5.5 of them; the simulated timeline's per-rank peaks are these, rank 1's the largest."""
    from schedsim.api import predict
    from schedsim.spec.training_block import act_bytes_per_layer, inflight_layers, memory_per_rank

    spec = _six_layers_pp4("  num_layers_per_virtual_pipeline_stage: 1\n")
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    assert (plan.v, plan.m, plan.stage_layers) == (2, 8, (0, 1, 1, 1, 1, 1, 1, 0))
    assert [inflight_layers(plan, r) for r in range(4)] == [4, 9, 7, 5]
    layer = act_bytes_per_layer(t, plan)
    assert layer == 32 * 64 * 34 + 4 * 32 * 32 * 5  # sbh·(10 + 24) + 5·a·s²·b, fp16, tp 1
    mem = memory_per_rank(t, plan)
    assert mem["stage"] == 1 and mem["activations"] == 9 * layer
    peaks = predict(spec).metrics.pipeline.peak_memory_bytes
    assert [peaks[r] for r in range(4)] == [n * layer for n in (4, 9, 7, 5)]


def test_zero_bubble_memory_holds_pp_microbatches_on_every_rank() -> None:
    """ZB-H1 defers the weight gradients: every rank holds p microbatches (ZB paper Table 1, p·M_B; the
    simulated curve agrees). 6 layers over pp 4 padded to 8 (stages 1, 2, 2, 1): ranks 1 and 2 hold 4 × 2 = 8
    layer-microbatches, rank 0 4 × 1. The report took 1F1B's min(m, p − r): rank 1 at 3 × 2 = 6, and named rank
    0 (its embeddings), with 4."""
    from schedsim.api import predict
    from schedsim.spec.training_block import act_bytes_per_layer, inflight_layers, memory_per_rank

    spec = _six_layers_pp4("  enable_zero_bubble: true\n")
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    assert (plan.schedule, plan.stage_layers) == ("zb_h1", (1, 2, 2, 1))
    assert [inflight_layers(plan, r) for r in range(4)] == [4, 8, 8, 4]
    layer = act_bytes_per_layer(t, plan)
    mem = memory_per_rank(t, plan)
    assert mem["stage"] == 1 and mem["activations"] == 8 * layer
    peaks = predict(spec).metrics.pipeline.peak_memory_bytes
    assert [peaks[r] for r in range(4)] == [n * layer for n in (4, 8, 8, 4)]
