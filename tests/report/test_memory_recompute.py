"""Full recomputation in the simulated memory curve (issue keep17): the backward re-runs one checkpointed group's
forward (Megatron-LM ``tensor_parallel/random.py`` ``CheckpointFunction.backward``) and its activations live until
that group's backward ends. ``memory_per_rank`` (the training block's memory per GPU) counted them; the curve
(``meta["memory"]``) and the pipeline metrics' peak left them out, so 11 of 72 random configurations differed, all
with full recompute. Here both are held equal on random configurations, and on one by hand."""

from __future__ import annotations

import random

import pytest

from schedsim.api import load_text, predict
from schedsim.errors import SchedsimError
from schedsim.report.memory import _reference, memory_over_time
from schedsim.sim.timeline import Timeline
from schedsim.sim.timeline_json import meta_equal
from schedsim.spec.training_block import _memory_of_rank, memory_per_rank, training_plan

BLOCK = """\
schema_version: 1
name: r
world_size: {world}
training:
  num_layers: {layers}
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: {m}
  tp: {tp}
  pp: {pp}
  bf16: true
{extra}"""


def _config(rnd: random.Random) -> str:
    """A random small training block: pp, tp (with or without sequence parallelism), layers, microbatches, the
    recomputation (none, selective, full uniform or block with 1-3 layers), virtual stages, padding, an uneven
    last stage or ZB-H1."""
    pp, tp = rnd.choice([1, 2, 4]), rnd.choice([1, 2])
    extra = ""
    rc = rnd.choice(["none", "selective", "uniform", "block", "uniform", "block"])
    if rc == "selective":
        extra += "  recompute_granularity: selective\n"
    elif rc != "none":
        extra += (f"  recompute_granularity: full\n  recompute_method: {rc}\n"
                  f"  recompute_num_layers: {rnd.choice([1, 2, 3])}\n")
    if pp > 1:
        pick = rnd.choice(["plain", "padded_vpp", "vpp", "zb", "padded", "last"])
        extra += {"plain": "", "padded_vpp": "  num_layers_per_virtual_pipeline_stage: 1\n  allow_padding_num_layers: "
                  "true\n", "vpp": f"  num_layers_per_virtual_pipeline_stage: {rnd.choice([1, 2])}\n",
                  "zb": "  enable_zero_bubble: true\n", "padded": "  allow_padding_num_layers: true\n",
                  "last": "  decoder_last_pipeline_num_layers: 1\n"}[pick]
    if tp > 1 and rnd.random() < 0.5:
        extra += "  sequence_parallel: true\n"
    return BLOCK.format(world=tp * pp, layers=rnd.choice([2, 3, 4, 6, 8]), m=rnd.choice([1, 2, 4]) * pp, tp=tp,
                        pp=pp, extra=extra)


def _peaks(run: object) -> tuple[dict[int, float], dict[int, float]]:
    """The memory curve's per-rank peak with the receive and gather buffers left out (the activations), and the
    pipeline metrics' peak bytes."""
    tl = run.timeline  # type: ignore[attr-defined]
    spans = [s._replace(bytes=0.0) if s.kind in ("recv", "all_gather", "gather") else s for s in tl.spans]
    acts = Timeline(tl.schedule, tl.source, tl.world_size, spans=spans, meta=dict(tl.meta))
    mem = memory_over_time(acts)
    assert mem is not None and meta_equal(mem, _reference(acts))  # the columns as the span-by-span definition
    return {r: d["peak_bytes"] for r, d in mem["ranks"].items()}, run.metrics.pipeline.peak_memory_bytes  # type: ignore[attr-defined]


def test_the_curve_peak_is_memory_per_rank_on_random_configurations() -> None:
    rnd = random.Random(17)
    full = checked = 0
    while checked < 40:
        text = _config(rnd)
        try:
            spec = load_text(text)
            run = predict(spec, "h200", full_ranks=True)
        except SchedsimError:  # a combination Megatron refuses (m not a multiple of pp with vpp, ...)
            continue
        t = spec.training
        assert t is not None
        plan = training_plan(t, spec.world_size)
        stride = run.timeline.pipeline.rank_stride
        curve, peak = _peaks(run)
        for r in range(plan.pp):
            want = _memory_of_rank(t, plan, r)["activations"]
            assert curve[r * stride] == pytest.approx(want, abs=plan.m * plan.v * 8), (text, r)  # int truncations
            assert peak[r * stride] == curve[r * stride], (text, r)
        mem = memory_per_rank(t, plan)
        assert curve[mem.get("stage", 0) * stride] == pytest.approx(mem["activations"], abs=plan.m * plan.v * 8)
        checked += 1
        full += t.recompute_granularity == "full"
    assert full >= 15  # the configurations that differed before are well represented


def test_a_padding_rank_re_runs_nothing() -> None:
    # 3 layers over pp 4 padded (stages 1, 1, 1, 0): rank 3 holds no layer, so no forward re-runs there; memory per
    # GPU counted one re-run layer on it (90,112 bytes of nothing)
    spec = load_text(BLOCK.format(world=4, layers=3, m=8, tp=1, pp=4, extra="  recompute_granularity: full\n"
                                  "  recompute_method: block\n  recompute_num_layers: 1\n"
                                  "  allow_padding_num_layers: true\n"))
    t = spec.training
    assert t is not None
    plan = training_plan(t, 4)
    assert plan.stage_layers == (1, 1, 1, 0)
    assert _memory_of_rank(t, plan, 3)["activations"] == 0
    curve, peak = _peaks(predict(spec, "h200", full_ranks=True))
    assert curve[3] == peak[3] == 0


def test_no_recompute_keeps_timeline_json_as_it_was() -> None:
    """Without full recomputation the pipeline info has no recompute keys (timeline.json as before)."""
    info = predict(load_text(BLOCK.format(world=2, layers=4, m=4, tp=1, pp=2, extra="")), "h200").timeline.pipeline
    assert info is not None and info.recompute_group_layers == 0
    assert "recompute_group_layers" not in info.to_dict() and "recompute_layer_bytes" not in info.to_dict()
    full = predict(load_text(BLOCK.format(world=2, layers=4, m=4, tp=1, pp=2, extra="  recompute_granularity: full\n"
                                          "  recompute_method: uniform\n  recompute_num_layers: 2\n")), "h200")
    d = full.timeline.pipeline.to_dict()
    assert d["recompute_group_layers"] == 2 and d["recompute_layer_bytes"] == 90_112  # one layer's activations
