"""The ``training:`` block (issue 36): Megatron-LM arguments, Megatron's validation, the lowering's op counts
and collective sizes on a hand-counted tiny configuration, the FLOPs (MFU) and memory formulas."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.spec.loader import load_text
from schedsim.spec.training_block import (
    TrainingSpec,
    act_bytes_per_layer,
    memory_per_rank,
    model_flops,
    training_plan,
)

TINY = """\
schema_version: 1
name: tiny
world_size: 8
training:
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: 8
  tp: 2
  pp: 2
  bf16: true
"""


def _check(tmp_path: Path, text: str) -> tuple[int, str]:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    r = CliRunner().invoke(app, ["check", str(p)])
    return r.exit_code, r.stderr if r.exit_code else r.stdout


def _edit(old: str, new: str) -> str:
    assert old in TINY
    return TINY.replace(old, new)


@pytest.mark.parametrize(("old", "new", "line", "field", "words"), [
    ("tp: 2", "tp: 3", 12, "training.tp", "world_size (8) is not divisible by tp (3)"),
    ("num_attention_heads: 4", "num_attention_heads: 1", 7, "training.num_attention_heads",
     "num_attention_heads (1) must be a multiple of tensor_model_parallel_size (2)"),
    ("num_layers: 2", "num_layers: 3", 5, "training.num_layers",
     "Number of layers should be divisible by the pipeline-model-parallel size"),
    ("global_batch_size: 8", "global_batch_size: 7", 11, "training.global_batch_size",
     "global batch size (7) is not divisible by micro batch size (1) times data parallel size (2)"),
    ("tp: 2\n  pp: 2", "tp: 1\n  pp: 2\n  dp: 4\n  sequence_parallel: true", 15, "training.sequence_parallel",
     "Disabling sequence parallelism because tensor model parallelism is disabled"),
    ("pp: 2", "pp: 2\n  tp_comm_overlap: true", 14, "training.tp_comm_overlap",
     "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is enabled"),
    ("pp: 2", "pp: 2\n  dp: 4", 14, "training.dp", "dp (4) disagrees with world_size / (tp·pp·cp) = 8 / 4 = 2"),
    ("pp: 2", "pp: 2\n  recompute_granularity: full\n  recompute_num_layers: 1", None,
     "training.recompute_method", 'recompute_method must be "block" or "uniform"'),
    ("num_layers: 2", "num_layers: 4\n  num_layers_per_virtual_pipeline_stage: 3", 6,
     "training.num_layers_per_virtual_pipeline_stage",
     "number of layers per pipeline stage (2) must be divisible by number of layers per virtual pipeline stage (3)"),
    ("pp: 2", "pp: 2\n  overlap_param_gather: true\n  overlap_grad_reduce: true", 14, "training.overlap_param_gather",
     "--overlap-param-gather only supported with distributed optimizer"),
    ("pp: 2", "pp: 2\n  ffn_hidden_size: 255", 14, "training.ffn_hidden_size",
     "ffn_hidden_size (255) is not divisible by tensor_model_parallel_size (2)"),
])
def test_megatron_refusals(tmp_path: Path, old: str, new: str, line: int | None, field: str, words: str) -> None:
    """A configuration Megatron refuses exits 2 with Megatron's reason, the key's line and a fix."""
    code, err = _check(tmp_path, _edit(old, new))
    assert code == 2, err
    first = err.splitlines()[0]
    assert first.startswith(f"error: {tmp_path / 's.yaml'}:"), first
    assert words in first, first
    assert f": {field}" in first, first
    # a key not written (a missing recompute_method) has no line of its own: the block's first line is named
    assert f"s.yaml:{line if line is not None else 5}:" in first, first
    assert err.splitlines()[1].startswith("  fix: "), err
    assert "Traceback" not in err


def test_unknown_key_suggests_megatron_name(tmp_path: Path) -> None:
    code, err = _check(tmp_path, _edit("tp: 2", "tensor_model_paralel_size: 2"))
    assert code == 2
    assert "training.tensor_model_paralel_size: unknown key" in err
    assert "did you mean 'tensor_model_parallel_size'?" in err


def test_an_alias_beside_its_megatron_name_is_named_twice(tmp_path: Path) -> None:
    """``tp`` and ``tensor_model_parallel_size`` both written set one argument: the error names both (was "unknown
    key 'tp'", fix "did you mean 'tp'?")."""
    for extra in ("tensor_model_parallel_size: 2", "tensor_model_parallel_size: 4"):
        code, err = _check(tmp_path, _edit("pp: 2", f"pp: 2\n  {extra}"))
        assert code == 2 and "Traceback" not in err
        first, fix = err.splitlines()[:2]
        assert first.startswith(f"error: {tmp_path / 's.yaml'}:12:") and first.endswith(
            ": training.tp: 'tp' and 'tensor_model_parallel_size' are both written: the alias and its Megatron "
            "name set the same argument"), first
        assert fix == "  fix: keep one of them"


def test_a_megatron_no_flag_is_its_key_set_false(tmp_path: Path) -> None:
    """``--no-async-tensor-model-parallel-allreduce`` pasted as ``no_async_...: true``: the fix says to write the
    flag false (a "did you mean 'async_...'?" kept with the written true would switch the flag on)."""
    for flag in ("async_tensor_model_parallel_allreduce", "scatter_gather_tensors_in_pipeline", "bf16"):
        code, err = _check(tmp_path, _edit("pp: 2", f"pp: 2\n  no_{flag}: true"))
        assert code == 2 and "Traceback" not in err
        assert err.splitlines()[:2] == [
            f"error: {tmp_path / 's.yaml'}:14:{len(flag) + 8}: training.no_{flag}: unknown key 'no_{flag}'",
            f"  fix: Megatron's --no-{flag.replace('_', '-')} is written `{flag}: false` here"]
    code, err = _check(tmp_path, _edit("pp: 2", "pp: 2\n  no_num_layers: 2"))  # not a flag: the nearest key
    assert code == 2 and err.splitlines()[1] == "  fix: did you mean 'num_layers'?"


def test_aliases_and_derived_sizes() -> None:
    """tp/pp/dp aliases set Megatron's fields; dp = world / (tp·pp·cp), m = gbs / (b·dp), padded vocab."""
    spec = load_text(_edit("global_batch_size: 8", "global_batch_size: 16"))
    t = spec.training
    assert t is not None and t.tensor_model_parallel_size == 2 and t.pipeline_model_parallel_size == 2
    plan = training_plan(t, spec.world_size)
    assert (plan.dp, plan.m, plan.v, plan.schedule) == (2, 8, 1, "1f1b")
    assert plan.vocab == 1024  # 1000 rounded up to a multiple of 128 · tp = 256
    assert plan.grad_dtype == "fp32"  # bf16: gradients reduced in fp32
    # Megatron's rank order tp-cp-ep-dp-pp: tp fastest, pp slowest
    assert [plan.rank(t_, 0, d, p) for p in range(2) for d in range(2) for t_ in range(2)] == list(range(8))
    assert plan.rank(1, 0, 0, 1) == 5 and plan.rank(0, 0, 1, 0) == 2


def test_numeric_keys_written_out_match_the_model() -> None:
    """``TRAINING_NUMERIC_KEYS`` (written out in schedsim.spec.model, so that plain schedules do not import the
    training block) is exactly TrainingSpec's int and float fields plus the short aliases; they are expressions
    even unbraced (``tp: tp``), as every numeric key."""
    import typing

    from schedsim.spec.model import NUMERIC_FIELDS, TRAINING_NUMERIC_KEYS
    from schedsim.spec.training_block import ALIASES

    def numeric(tp: object) -> bool:
        if tp in (int, float):
            return True
        return typing.get_origin(tp) is not typing.Literal and any(numeric(a) for a in typing.get_args(tp))

    fields = {k for k, f in TrainingSpec.model_fields.items() if numeric(f.annotation)}
    assert TRAINING_NUMERIC_KEYS == fields | set(ALIASES)
    assert {"num_layers", "attention_dropout", "tp", "ep"} <= TRAINING_NUMERIC_KEYS
    assert not {"bf16", "recompute_granularity", "params_dtype"} & TRAINING_NUMERIC_KEYS
    assert TRAINING_NUMERIC_KEYS <= NUMERIC_FIELDS


def test_model_flops_is_megatrons_formula() -> None:
    """num_floating_point_operations for a GPT with f = 4h, g = a: 72·B·s·L·h²·(1 + s/6h + V/12Lh), by hand."""
    t = TrainingSpec(num_layers=24, hidden_size=2304, num_attention_heads=24, seq_length=2048,
                     vocab_size=51200, micro_batch_size=1, global_batch_size=512, tp=1, bf16=True)
    plan = training_plan(t, 32)
    B, s, L, h, V = 512, 2048, 24, 2304, 51200  # 51200 is already a multiple of 128
    assert plan.vocab == V
    by_hand = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert model_flops(t, plan) == pytest.approx(by_hand, rel=1e-12)
    # SwiGLU with f = 8h/3 ... the MLP term (f/h)·(3/2); GQA g/a replaces the 1 of the K,V projection
    t2 = t.model_copy(update={"swiglu": True, "ffn_hidden_size": 6144, "num_query_groups": 8})
    p2 = training_plan(t2, 32)
    by_hand2 = 12 * B * s * L * h * h * ((1 + 8 / 24 + s / h) + (6144 / h) * 1.5 + V / (2 * L * h))
    assert model_flops(t2, p2) == pytest.approx(by_hand2, rel=1e-12)
    # current Megatron-LM (since 8873b55, 2025-03) counts the causal core attention at half: s/h -> s/(2h)
    causal2 = 12 * B * s * L * h * h * ((1 + 8 / 24 + s / (2 * h)) + (6144 / h) * 1.5 + V / (2 * L * h))
    assert model_flops(t2, p2, causal=True) == pytest.approx(causal2, rel=1e-12)


def test_training_report_prints_current_megatrons_causal_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """The report's second rate is the first times the causal FLOP count over the papers' one (same time, same
    GPUs), and the line says which Megatron-LM logs it."""
    from schedsim.api import predict
    from schedsim.hardware.profile import load_profile
    from schedsim.report.training import print_training, training_report

    spec = load_text(TINY)
    prof = load_profile("h200")
    d = training_report(spec, predict(spec, profile=prof).timeline, prof).to_dict()
    t = spec.training
    assert t is not None
    plan = training_plan(t, spec.world_size)
    ratio = model_flops(t, plan, causal=True) / model_flops(t, plan)
    assert ratio < 1 and d["tflops_per_gpu_causal"] == pytest.approx(d["tflops_per_gpu"] * ratio, rel=1e-12)
    print_training(d)
    assert f"causal attention at half: {d['tflops_per_gpu_causal']:.1f} TFLOP/s per GPU" in capsys.readouterr().out


def test_swiglu_without_ffn_hidden_size_takes_megatrons_default_width(tmp_path: Path) -> None:
    """Megatron-LM's validate_args gives --swiglu without --ffn-hidden-size f = int((4h·2/3) / 64)·64, not 4h:
    h = 1024 -> 2688 (h = 64 -> 128). schedsim took 4h: MLP GEMMs 1.52x too wide, the FLOP count (MFU) 21 %
    too high for h = 1024, L = 8, s = 1024, V 50304."""
    t = TrainingSpec(num_layers=8, hidden_size=1024, num_attention_heads=16, seq_length=1024, vocab_size=50257,
                     micro_batch_size=1, global_batch_size=8, swiglu=True, bf16=True)
    plan = training_plan(t, 8)
    assert plan.ffn == 2688 and plan.vocab == 50304
    B, s, L, h, V = 8, 1024, 8, 1024, 50304
    by_hand = 12 * B * s * L * h * h * ((1 + 1 + s / h) + (2688 / h) * 1.5 + V / (2 * L * h))
    assert model_flops(t, plan) == pytest.approx(by_hand, rel=1e-12)
    assert training_plan(t.model_copy(update={"ffn_hidden_size": 4096}), 8).ffn == 4096  # given: kept
    assert training_plan(t.model_copy(update={"swiglu": False}), 8).ffn == 4096  # no swiglu: 4h
    # the lowered fc1 (TINY: h = 64, tp = 2): 2f / tp = 2 * 128 / 2 columns
    fc1 = [o for o in _ops(TINY.replace("bf16: true", "bf16: true\n  swiglu: true")) if o.name == "F0.0.l0.fc1"]
    assert fc1 and {o.n for o in fc1} == {128}
    # below h = 24 the default is 0: refused, naming hidden_size
    code, err = _check(tmp_path, TINY.replace("hidden_size: 64", "hidden_size: 16").replace(
        "bf16: true", "bf16: true\n  swiglu: true"))
    assert code == 2 and "training.hidden_size" in err and "is 0 for hidden_size 16" in err
    # a default not divisible by tp: h = 96 -> f = 256, tp 3 (heads 6) -> refused on swiglu, the fix names the key
    text = TINY.replace("hidden_size: 64", "hidden_size: 96").replace("num_attention_heads: 4",
                        "num_attention_heads: 6").replace("tp: 2", "tp: 3").replace("world_size: 8", "world_size: 12")
    code, err = _check(tmp_path, text.replace("bf16: true", "bf16: true\n  swiglu: true"))
    assert code == 2 and "ffn_hidden_size (256, the swiglu default) is not divisible" in err
    assert "ffn_hidden_size: a multiple of 3" in err


def test_activation_memory_is_korthikanti_table2() -> None:
    """Korthikanti et al. 2022 Table 2, per layer: GPT-3 175B shapes (s=2048, h=12288, a=96), b=1, t=8."""
    base = dict(num_layers=96, hidden_size=12288, num_attention_heads=96, seq_length=2048, vocab_size=51200,
                micro_batch_size=1, global_batch_size=64, tp=8, pp=8, bf16=True)
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    cases = {
        (False, None): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        (True, None): sbh / t * (34 + 5 * a * s / h),
        (False, "selective"): sbh * (10 + 24 / t),
        (True, "selective"): 34 * sbh / t,
    }
    for (sp, rg), want in cases.items():
        spec = TrainingSpec(**base, sequence_parallel=sp, recompute_granularity=rg)  # type: ignore[arg-type]
        assert act_bytes_per_layer(spec, training_plan(spec, 64)) == pytest.approx(want, rel=1e-12)
    full = TrainingSpec(**base, recompute_granularity="full", recompute_method="uniform",  # type: ignore[arg-type]
                        recompute_num_layers=1)
    assert act_bytes_per_layer(full, training_plan(full, 64)) == 2 * sbh
    # the paper's §4.2.3 check: 175B with SP + selective is 34·sbh/t per layer; 12 layers per stage, 8 in flight
    sel = TrainingSpec(**base, sequence_parallel=True, recompute_granularity="selective")  # type: ignore[arg-type]
    mem = memory_per_rank(sel, training_plan(sel, 64))
    assert mem["activations"] == pytest.approx(34 * sbh / t * 12 * 8, rel=1e-12)


def test_static_bytes_per_param_follow_megatrons_table() -> None:
    """Megatron's distributed-optimizer table: bf16 params + fp32 grads 18 B/param, 6 + 12/d distributed."""
    t = TrainingSpec(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=1024,
                     micro_batch_size=1, global_batch_size=4, bf16=True)
    plan = training_plan(t, 4)
    m = memory_per_rank(t, plan)
    n = m["params"] / 2
    assert (m["params"] + m["grads"] + m["optimizer"]) / n == pytest.approx(18)
    d = t.model_copy(update={"use_distributed_optimizer": True})
    md = memory_per_rank(d, training_plan(d, 4))
    assert (md["params"] + md["grads"] + md["optimizer"]) / n == pytest.approx(6 + 12 / 4)


def test_schema_lists_the_block() -> None:
    r = CliRunner().invoke(app, ["schema"])
    assert r.exit_code == 0
    assert "tensor_model_parallel_size" in r.stdout


# ---------------------------------------------------------------- lowering: hand-counted tiny configuration
def _ops(text: str) -> list:  # type: ignore[type-arg]
    from schedsim.api import lower_spec

    return lower_spec(load_text(text)).ops()


def test_tiny_config_op_counts_and_collectives() -> None:
    """2 layers, tp=2, pp=2, dp=2, m=4 (gbs 8, b 1), by hand.

    One layer (``_layer_ops``; b·a/tp = 2 is not a multiple of 4, so the softmax is unfused: masked_fill then
    softmax): F = 16 kernels (ln1, qkv, qkv_bias, scores, attn_mask, softmax, attn_dropout, attn_v,
    context_copy, proj, bias_dropout_add1, ln2, fc1, act, fc2, bias_dropout_add2) + 2 all-reduces = 18; I = 23
    kernels + 2 all-reduces = 25; W = 4 wgrads + the QKV bias gradient = 5. Stage 0: F = embedding + its TP
    all-reduce + embedding dropout + 18 = 21; I = 25 + embedding dropout backward = 26; W = 5 + embedding wgrad =
    6; × 4 microbatches = 212, + 4 sendF + 4 recvB, + the gradient scaling by 1/dp, DP all-reduce, tied
    embedding all-reduce, the local gradient norm and its all-reduce (bf16: no gradient copy, no found-inf),
    optimizer step, main-to-model parameter copy, gradient buffer zeroing = 228. Stage 1: F = 18 + final LN,
    logits, cross-entropy and its 3 all-reduces = 24; I = cross-entropy backward, logits dgrad + its all-reduce,
    final LN backward + 25 = 29; W = logits wgrad + 5 = 6; × 4 = 236 + 8 + 8 = 252. Ranks 0-3 are pp stage 0 (tp
    fastest, then dp), 4-7 stage 1."""
    ops = _ops(TINY)
    per_rank = {r: sum(1 for o in ops if o.rank == r) for r in range(8)}
    assert per_rank == {0: 228, 1: 228, 2: 228, 3: 228, 4: 252, 5: 252, 6: 252, 7: 252}
    norm = {o.rank: o for o in ops if o.name == "optimizer_grad_norm"}
    assert norm[0].group == (0, 1, 4, 5) and norm[6].group == (2, 3, 6, 7) and norm[0].nbytes == 4  # tp × pp
    fp16 = [o for o in _ops(_edit("bf16: true", "fp16: true")) if o.rank == 3][-8:]
    assert [o.name for o in fp16] == ["optimizer_grad_copy", "optimizer_unscale", "optimizer_found_inf",
                                      "optimizer_grad_norm_local", "optimizer_grad_norm", "optimizer_step",
                                      "optimizer_param_copy", "zero_grad_buffer"]
    # passes over the rank's (49,984 − 6·64) / 2 + 6·64 + 1024·64 / 2 + 32·64 = 60,000 parameters (a layer's two
    # LayerNorms and row-parallel biases, 6h, and the position embeddings whole on every TP rank, as Megatron
    # holds them): fp16 → fp32 copy 2 + 4 bytes, unscale 4 + 4, L2 norm 4 (Megatron's MixedPrecisionOptimizer);
    # bf16 has fp32 gradients: the norm only
    assert [o.nbytes for o in fp16[:4]] == [6 * 60_000, 8 * 60_000, 4, 4 * 60_000]
    assert [o.name for o in ops if o.rank == 3][-5:] == ["optimizer_grad_norm_local", "optimizer_grad_norm",
                                                         "optimizer_step", "optimizer_param_copy",
                                                         "zero_grad_buffer"]
    tp_ops = [o for o in ops if o.kind == "all_reduce" and ".tp_" in o.name]
    # every TP all-reduce is s·b·h·2 bytes = 32·64·2 on the TP group (r, r^1)
    assert {o.nbytes for o in tp_ops if "ce_allreduce" not in o.name} == {32 * 64 * 2}
    assert {o.nbytes for o in tp_ops if "ce_allreduce" in o.name} == {32 * 4}
    assert all(o.group == (o.rank & ~1, o.rank | 1) for o in tp_ops)
    assert sum(1 for o in tp_ops if o.rank == 0) == 4 * 5 and sum(1 for o in tp_ops if o.rank == 4) == 4 * 8
    # DP gradient all-reduce: fp32 (bf16 training) of the TP rank's parameters. Per layer 12h² + 13h = 49,984
    # (Megatron's GPT layer with biases), of which a TP rank (tp = 2) holds half but the 6h of its LayerNorms and
    # row-parallel biases: 25,184; stage 0 adds V·h / 2 + s·h = 1024·64 / 2 + 32·64, stage 1 V·h / 2 + 2h
    dp = {o.rank: o for o in ops if o.name == "dp_grad_all_reduce"}
    assert dp[0].nbytes == (25_184 + 1024 * 64 / 2 + 32 * 64) * 4 and dp[0].group == (0, 2)
    assert dp[5].nbytes == (25_184 + 1024 * 64 / 2 + 2 * 64) * 4 and dp[5].group == (5, 7)
    emb = {o.rank: o for o in ops if o.name == "embedding_grad_allreduce"}
    assert emb[1].group == (1, 5) and emb[1].nbytes == 1024 * 64 / 2 * 4
    sends = [o for o in ops if o.kind == "send"]
    assert {(o.rank, o.peer) for o in sends} == {(0, 4), (1, 5), (2, 6), (3, 7), (4, 0), (5, 1), (6, 2), (7, 3)}
    assert {o.nbytes for o in sends} == {32 * 64 * 2}


def test_step_passes_over_the_parameters_by_hand() -> None:
    """The per-parameter passes of Megatron's step, on rank 3 (stage 0, 60,000 parameters: the test above),
    in bytes a parameter. bf16 (fp32 gradients, 16-bit parameters): the DP gradient buffer divided by dp before
    its all-reduce (read and write 4), fused Adam on fp32 main weights (read gradient, weight, two moments, write
    the three: 28), the main-to-model parameter copy (read 4, write 2) and the gradient buffer's memset (4).
    fp16 (16-bit gradients): 4, 28, 6, 2. fp32: no parameter copy, memset 4. With the distributed optimizer
    (dp 2) Adam and the copy run on half, the memset on the whole buffer; with overlapped reduction there is no
    tail scaling (each bucket is scaled before its reduction: the bucket test)."""
    n = 60_000

    def tail(text: str) -> dict[str, float]:
        return {o.name: o.nbytes for o in _ops(text) if o.rank == 3 and "." not in o.name}

    bf16 = tail(TINY)
    assert [bf16[k] for k in ("grad_buffer_scale", "optimizer_step", "optimizer_param_copy", "zero_grad_buffer")] \
        == [8 * n, 28 * n, 6 * n, 4 * n]
    fp16 = tail(_edit("bf16: true", "fp16: true"))
    assert [fp16[k] for k in ("grad_buffer_scale", "optimizer_step", "optimizer_param_copy", "zero_grad_buffer")] \
        == [4 * n, 28 * n, 6 * n, 2 * n]
    fp32 = tail(_edit("bf16: true", "params_dtype: fp32"))
    assert "optimizer_param_copy" not in fp32 and fp32["zero_grad_buffer"] == 4 * n
    dist = tail(_edit("bf16: true", "bf16: true\n  use_distributed_optimizer: true\n  overlap_grad_reduce: true"))
    assert "grad_buffer_scale" not in dist
    assert [dist[k] for k in ("optimizer_step", "optimizer_param_copy", "zero_grad_buffer")] == \
        [28 * n / 2, 6 * n / 2, 4 * n]


def test_sequence_parallel_swaps_all_reduce_for_gather_scatter() -> None:
    """With SP: per layer an all-gather before QKV and fc1 and a reduce-scatter after proj and fc2 (forward),
    their conjugates in the backward; p2p messages s/tp·b·h."""
    ops = _ops(_edit("pp: 2", "pp: 2\n  sequence_parallel: true"))
    r0 = [o for o in ops if o.rank == 0 and o.name.startswith("F0.0.")]
    names = [o.name.removeprefix("F0.0.") for o in r0 if o.kind in ("all_gather", "reduce_scatter", "all_reduce")]
    assert names == ["tp_embedding", "l0.tp_ag_attn", "l0.tp_rs_attn", "l0.tp_ag_mlp", "l0.tp_rs_mlp"]
    assert [o.kind for o in r0 if o.name.endswith("tp_embedding")] == ["reduce_scatter"]
    b0 = [o.name.removeprefix("B0.0.I.") for o in ops if o.rank == 0 and o.name.startswith("B0.0.I.")
          and o.kind in ("all_gather", "reduce_scatter")]
    # the column-parallel linears' backward also gathers their input again for the weight gradient
    # (test_training_async_tp.py)
    assert b0 == ["l0.tp_ag_fc2_dgrad", "l0.tp_ag_fc1_wgrad", "l0.tp_rs_fc1_dgrad", "l0.tp_ag_proj_dgrad",
                  "l0.tp_ag_qkv_wgrad", "l0.tp_rs_qkv_dgrad", "tp_embedding_bwd"]
    assert {o.nbytes for o in ops if o.kind == "send"} == {32 * 64 * 2 / 2}


def test_recompute_and_distributed_optimizer() -> None:
    """Full recompute reruns the layer forward (kernels and TP collectives) before its backward; selective only
    the attention core; the distributed optimizer reduce-scatters gradients, steps on 1/dp, all-gathers params;
    overlap_grad_reduce issues each chunk's reduction after its last backward, before the rank's last op."""
    full = _ops(_edit("pp: 2", "pp: 2\n  recompute_granularity: full\n  recompute_method: uniform\n"
                      "  recompute_num_layers: 1"))
    re = [o.name.removeprefix("B0.0.I.") for o in full if o.rank == 0 and o.name.startswith("B0.0.I.l0.re_")]
    assert len(re) == 16 + 2 and re[:3] == ["l0.re_ln1", "l0.re_qkv", "l0.re_qkv_bias"]
    sel = _ops(_edit("pp: 2", "pp: 2\n  recompute_granularity: selective"))
    assert [o.name for o in sel if o.rank == 0 and o.name.startswith("B0.0.I.l0.re_")] == \
        ["B0.0.I.l0.re_scores", "B0.0.I.l0.re_attn_mask", "B0.0.I.l0.re_softmax", "B0.0.I.l0.re_attn_dropout",
         "B0.0.I.l0.re_attn_v"]  # Korthikanti et al. 2022 §5: QKᵀ, softmax, its dropout, attention over V
    dist = _ops(_edit("pp: 2", "pp: 2\n  use_distributed_optimizer: true\n  overlap_grad_reduce: true"))
    r0 = [o for o in dist if o.rank == 0]
    rs = [i for i, o in enumerate(r0) if o.kind == "reduce_scatter"]
    ag = [o for o in r0 if o.name == "dp_param_allgather"]
    assert len(rs) == 1 and r0[rs[0]].name == "dp_grad_reduce_scatter_s0_b0" and r0[rs[0]].group == (0, 2)
    assert r0[rs[0]].stream == "dp_comm" and rs[0] < len(r0) - 4  # issued before the step's tail
    assert len(ag) == 1 and ag[0].nbytes == (25_184 + 1024 * 64 / 2 + 32 * 64) * 2  # the TP rank's (tests above)
    assert next(o for o in r0 if o.name == "optimizer_grad_norm").group == tuple(range(8))  # the whole instance
    opt_plain = next(o for o in _ops(TINY) if o.rank == 0 and o.name == "optimizer_step")
    opt_dist = next(o for o in r0 if o.name == "optimizer_step")
    assert opt_dist.nbytes == pytest.approx(opt_plain.nbytes / 2)


def test_interleaved_with_virtual_stages_predicts(tmp_path: Path) -> None:
    """num_layers_per_virtual_pipeline_stage gives Megatron's interleaved 1F1B; predict runs it to the end."""
    text = _edit("num_layers: 2", "num_layers: 4\n  num_layers_per_virtual_pipeline_stage: 1")
    text = text.replace("global_batch_size: 8", "global_batch_size: 8")
    ops = _ops(text)
    assert {o.name.split(".")[0] for o in ops if o.rank == 0 and o.name[0] == "F"} == {"F0", "F2"}
    p = tmp_path / "i.yaml"
    p.write_text(text)
    r = CliRunner().invoke(app, ["predict", str(p), "--out", str(tmp_path / "o"), "--no-trace"])
    assert r.exit_code == 0, r.stderr[-2000:]


def test_predict_reports_megatron_figures(tmp_path: Path) -> None:
    """predict's training figures: TFLOP/s per GPU = Megatron's FLOPs / iteration / GPUs, MFU over the profile's
    bf16 peak, and per rank busy compute + exposed TP + PP + DP + bubble = the iteration (nothing counted twice)."""
    import json

    from schedsim.hardware.profile import load_profile

    p = tmp_path / "s.yaml"
    p.write_text(_edit("pp: 2", "pp: 2\n  overlap_grad_reduce: true"))
    r = CliRunner().invoke(app, ["predict", str(p), "--out", str(tmp_path / "o"), "--no-trace", "--format", "json"])
    assert r.exit_code == 0, r.stderr[-2000:]
    d = json.loads(r.stdout)
    tr = d["training"]
    spec = load_text(p.read_text())
    t = spec.training
    assert t is not None
    flops = model_flops(t, training_plan(t, 8))
    it = d["metrics"]["makespan_s"]
    assert tr["iteration_s"] == it and tr["flops"] == flops
    assert tr["tflops_per_gpu"] == pytest.approx(flops / it / 8 / 1e12, rel=1e-12)
    peak = load_profile("h200").gpu.peak_tflops["bf16"]
    assert tr["mfu"] == pytest.approx(tr["tflops_per_gpu"] / peak, rel=1e-12)
    busy = sum(x["busy_compute_s"] for x in d["metrics"]["ranks"].values()) / 8
    total = busy + sum(tr["exposed_s"].values()) + tr["bubble_s"]
    assert total == pytest.approx(it, rel=1e-9)
    assert tr["exposed_s"]["tp"] > 0 and tr["exposed_s"]["pp"] > 0 and tr["exposed_s"]["dp"] > 0


def test_block_recompute_mixes_stored_layers() -> None:
    """recompute_method block keeps full activations of the layers past recompute_num_layers (per chunk)."""
    base = dict(num_layers=8, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=1024,
                micro_batch_size=1, global_batch_size=4, pp=2, bf16=True)
    blk = TrainingSpec(**base, recompute_granularity="full", recompute_method="block",  # type: ignore[arg-type]
                       recompute_num_layers=1)
    plan = training_plan(blk, 2)
    sbh = 32 * 64
    none = sbh * (10 + 24 + 5 * 4 * 32 / 64)
    # 4 layers per stage: 1 stores its input (2sbh), 3 everything; the first stage holds min(m=4, p=2) microbatches;
    # the backward's re-run forward of the one checkpointed layer holds its full activations once
    assert memory_per_rank(blk, plan)["activations"] == pytest.approx((2 * sbh + 3 * none) / 4 * 4 * 2 + none,
                                                                      rel=1e-12)


def test_op_estimate_refuses_before_expanding(tmp_path: Path) -> None:
    """The expansion bound counts the training block (an upper bound in closed form,
    :func:`schedsim.spec.limits._training_ops`), so a 175B-sized step lowered for every rank (``check``) is
    refused before expanding unless the limit is raised (the loader bounds the symmetric lowering's ops, the 8
    representative ranks', which pass); the estimate is not below the real count of a lowered block."""
    from schedsim.spec.limits import _training_ops

    big = TINY.replace("world_size: 8", "world_size: 64").replace("num_layers: 2", "num_layers: 96") \
        .replace("global_batch_size: 8", "global_batch_size: 64").replace("tp: 2", "tp: 8").replace("pp: 2", "pp: 8") \
        .replace("num_attention_heads: 4", "num_attention_heads: 8")
    code, err = _check(tmp_path, big)
    assert code == 2 and "training: the schedule expands to too many op instances (summed over ranks) when " \
        "every rank is lowered" in err
    assert "about 2,383,680" in err  # 8 replicas × 64 microbatches × (96 · 48 + 16 + 4 · 7) + 64 · 29
    doc = {"num_layers": 96, "tp": 8, "pp": 8, "global_batch_size": 64, "micro_batch_size": 1}
    assert _training_ops(doc, 64, represented=True) == 2_383_680 // 8  # 1 replica of 8 pipeline ranks
    tb = load_text(TINY).training
    assert tb is not None
    assert _training_ops({"num_layers": 2, "tp": 2, "pp": 2, "micro_batch_size": 1, "global_batch_size": 8}, 8) \
        >= len(_ops(TINY)) == 4 * 228 + 4 * 252


def test_pipeline_picture_shows_the_first_replicas_pipeline_ranks() -> None:
    """In Megatron's order the first replica's pipeline ranks are 0 and tp·cp·dp = 4, not 0 and 1; the
    pipeline picture's lanes and the PipelineInfo's JSON form say so (rank_stride)."""
    from schedsim.api import predict
    from schedsim.graph.info import PipelineInfo
    from schedsim.report.pipeline_chart import pipeline_lanes

    run = predict(load_text(TINY), "h200")
    info = run.timeline.pipeline
    assert info is not None and info.rank_stride == 4 and info.p == 2
    assert pipeline_lanes(run.timeline).shown == [0, 4]
    assert PipelineInfo.from_dict(info.to_dict()) == info
    assert "rank_stride" not in PipelineInfo(p=2).to_dict()  # a pipeline block's JSON is as before


def test_gradient_buckets_follow_megatrons_ddp() -> None:
    """overlap_grad_reduce: buckets of at least 40 M parameters in backward order (Megatron's DDP), each reduced
    right after the last weight-gradient kernel (the QKV bias gradient) of the last microbatch that completes
    it. h = 1280: a layer holds 12h² + 13h = 19,677,440 parameters; the W order is logits (pp = 1 with tied
    weights: no output weight of its own, Megatron's output layer reads the word embedding; the final LayerNorm's
    2h = 2,560), layers 3, 2 (39,357,440 < 40 M), 1 (59,034,880: bucket 0), layer 0 and the embedding (V·h + s·h =
    1,351,680, the one copy of the shared weight: bucket 1, 21,029,120), fp32 gradients under bf16."""
    text = TINY.replace("world_size: 8", "world_size: 2").replace("num_layers: 2", "num_layers: 4") \
        .replace("hidden_size: 64", "hidden_size: 1280").replace("num_attention_heads: 4", "num_attention_heads: 10") \
        .replace("global_batch_size: 8", "global_batch_size: 2").replace("tp: 2", "tp: 1") \
        .replace("pp: 2", "pp: 1\n  overlap_grad_reduce: true")
    r0 = [o for o in _ops(text) if o.rank == 0]
    names = [o.name for o in r0]
    b0, b1 = names.index("dp_grad_all_reduce_s0_b0"), names.index("dp_grad_all_reduce_s0_b1")
    assert names[b0 - 2] == "B0.0.W.l1.qkv_bias_grad" and names[b1 - 2] == "B0.0.W.embedding_wgrad"
    assert r0[b0].nbytes == 59_034_880 * 4 and r0[b1].nbytes == 21_029_120 * 4
    assert r0[b0].group == (0, 1) and r0[b0].stream == "dp_comm"
    # each bucket scaled by 1/dp on the compute stream before its reduction (Megatron Core's start_grad_sync:
    # bucket.grad_data *= gradient_scaling_factor): read and write 4 bytes a parameter of the bucket; no tail pass
    assert [(names[b - 1], r0[b - 1].stream, r0[b - 1].nbytes) for b in (b0, b1)] == \
        [("grad_buffer_scale_s0_b0", "compute", 8 * 59_034_880), ("grad_buffer_scale_s0_b1", "compute", 8 * 21_029_120)]
    assert "grad_buffer_scale" not in names


def test_interleaving_with_too_few_microbatches_names_the_global_batch(tmp_path: Path) -> None:
    """The interleaved generator's rule on m (Megatron's) is said on training.global_batch_size with a global
    batch that satisfies it, not in the pipeline block's terms."""
    text = _edit("num_layers: 2", "num_layers: 4\n  num_layers_per_virtual_pipeline_stage: 1") \
        .replace("global_batch_size: 8", "global_batch_size: 6")  # dp 2: m = 3, not a multiple of pp = 2
    code, err = _check(tmp_path, text)
    assert code == 2
    first, fix = err.splitlines()[:2]
    assert "s.yaml:12:22: training.global_batch_size: number of microbatches (3 = global_batch_size / " \
        "(micro_batch_size · dp)) is not divisible by pipeline-model-parallel-size (2)" in first
    assert fix == ("  fix: use global_batch_size: 8 (m a multiple of 2), or remove "
                   "num_layers_per_virtual_pipeline_stage (1F1B runs any m)")
    assert "Traceback" not in err


def test_uneven_first_and_last_stages(tmp_path: Path) -> None:
    """decoder_first_pipeline_num_layers: the first stage runs its own count, the other stages share the rest
    (Megatron's uneven pipeline parallelism); its gradients are sized by its layers; bad splits are refused."""
    text = _edit("num_layers: 2", "num_layers: 5\n  decoder_first_pipeline_num_layers: 3")
    ops = _ops(text)
    f0 = {o.name.split(".")[2] for o in ops if o.rank == 0 and o.name.startswith("F0.0.l")}
    f1 = {o.name.split(".")[2] for o in ops if o.rank == 4 and o.name.startswith("F1.0.l")}
    assert f0 == {"l0", "l1", "l2"} and f1 == {"l0", "l1", "logits"}
    dp = {o.rank: o.nbytes for o in ops if o.name == "dp_grad_all_reduce"}
    # a TP rank's 25,184 per layer (test_tiny_config_op_counts_and_collectives)
    assert dp[0] == (3 * 25_184 + 1024 * 64 / 2 + 32 * 64) * 4 and dp[4] == (2 * 25_184 + 1024 * 64 / 2 + 2 * 64) * 4
    code, err = _check(tmp_path, _edit("num_layers: 2", "num_layers: 4\n  decoder_first_pipeline_num_layers: 4"))
    assert code == 2 and "training.decoder_first_pipeline_num_layers: the 0 layers left" in err
    code, err = _check(tmp_path, _edit("num_layers: 2", "num_layers: 4\n  decoder_last_pipeline_num_layers: 1\n"
                                       "  num_layers_per_virtual_pipeline_stage: 1"))
    assert code == 2 and "please use --num-virtual-stages-per-pipeline-rank" in err


def test_uneven_first_and_last_stages_over_two_stages_must_hold_every_layer(tmp_path: Path) -> None:
    """pp = 2 with both decoder_first and decoder_last: no middle stage takes the rest, so they must sum to
    num_layers. 3 + 4 of 8 was refused with "leave a positive multiple of 1 layers", which 1 layer left is."""
    for first, last in ((3, 4), (5, 4)):
        code, err = _check(tmp_path, _edit("num_layers: 2", f"num_layers: 8\n  decoder_first_pipeline_num_layers: "
                                           f"{first}\n  decoder_last_pipeline_num_layers: {last}"))
        assert code == 2 and f"the first ({first}) and last ({last}) stages hold {first + last} layers, not " \
            "num_layers (8)" in err
        assert "fix: make decoder_first_pipeline_num_layers + decoder_last_pipeline_num_layers = 8" in err
        assert "positive multiple" not in err
    code, _ = _check(tmp_path, _edit("num_layers: 2", "num_layers: 8\n  decoder_first_pipeline_num_layers: 5\n"
                                     "  decoder_last_pipeline_num_layers: 3"))
    assert code == 0


def test_memory_per_rank_is_the_most_loaded_rank_with_a_small_first_stage() -> None:
    """decoder_first_pipeline_num_layers 1 of 25 over pp 4: stages (1, 8, 8, 8). 1F1B rank r holds min(m, p − r)
    microbatches (Narayanan et al. SC'21 §2.2): rank 0 4 × 1 layer, rank 1 3 × 8 = 24 layers, and rank 1's 8
    layers' parameters outweigh rank 0's one layer and the embedding (V·h = 65,536): rank 1 is the figure."""
    from schedsim.spec.training_block import _params_per_layer

    t = TrainingSpec(num_layers=25, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=1024,
                     micro_batch_size=1, global_batch_size=8, bf16=True, pipeline_model_parallel_size=4,
                     decoder_first_pipeline_num_layers=1)
    plan = training_plan(t, 4)
    assert plan.stage_layers == (1, 8, 8, 8)
    m = memory_per_rank(t, plan)
    assert m["activations"] == pytest.approx(24 * act_bytes_per_layer(t, plan), rel=1e-12)
    assert m["params"] == 8 * _params_per_layer(t, plan) * 2


def test_memory_per_rank_keeps_the_position_embeddings_whole_on_every_tp_rank() -> None:
    """tp 2, pp 1: a TP rank holds half of each layer's 49,984 parameters (tests below) but its 6h = 384 that every
    TP rank holds whole (two LayerNorms 4h, the biases of the row-parallel projection and fc2, h each:
    Megatron-LM ``RowParallelLinear``'s bias is "not parallelized"), so 2 · (49,600 / 2 + 384) = 50,368; half of
    the word embeddings (V = 1000 padded to 1024, a multiple of 128 · 2: 1024 · 64 / 2 = 32,768), but the whole
    position embeddings, 32 · 64 = 2,048 (Megatron-LM ``LanguageModelEmbedding``: "Position embedding (serial)", a
    ``torch.nn.Embedding`` on every TP rank), and the final LayerNorm whole, 2h = 128 (pp = 1: the one stage is
    the last; tied weights: no output weight of its own): 50,368 + 32,768 + 2,048 + 128 = 85,312 parameters,
    2 bytes each under bf16 (the count divided whole by tp gave 83,776; with the layers' whole 6h divided, 84,800;
    without the final LayerNorm, 85,184)."""
    t = TrainingSpec(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=1000,
                     micro_batch_size=1, global_batch_size=1, bf16=True, tensor_model_parallel_size=2)
    m = memory_per_rank(t, training_plan(t, 2))
    assert (m["params"], m["grads"], m["optimizer"]) == (2 * 85_312, 4 * 85_312, 12 * 85_312)


def test_gradient_buckets_hold_a_tp_ranks_own_parameters() -> None:
    """The same model's one stage as the DP gradient buckets count it (``_stage_params``, which the buckets add up
    to): layers 50,368 and embeddings 34,816 as above, and the final LayerNorm's whole 2h = 128; pp = 1 with tied
    weights has no output weight of its own (Megatron's output layer reads the word embedding, whose gradient the
    embedding's count holds once): 85,312, as memory_per_rank (counting the tied copy gave 118,080)."""
    from schedsim.lower.training import _stage_params

    t = TrainingSpec(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=32, vocab_size=1000,
                     micro_batch_size=1, global_batch_size=1, bf16=True, tensor_model_parallel_size=2)
    assert _stage_params(t, training_plan(t, 2), 1) == {0: 85_312}


UNEVEN = """\
schema_version: 1
name: uneven_memory
world_size: 2
training:
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  micro_batch_size: 1
  global_batch_size: 4
  pp: 2
  bf16: true
  decoder_last_pipeline_num_layers: 3
"""


def test_uneven_stages_memory_counts_the_last_stages_output_layer(tmp_path: Path) -> None:
    """Stages (1, 3), m = 4, bf16 (2 + 4 + 12 bytes a parameter). A layer: QKV 64·192 + 192, projection 64·64 + 64,
    fc1 64·256 + 256, fc2 256·64 + 64, LayerNorms 4·64 = 49,984 parameters; 90,112 activation bytes a microbatch
    (tests/report/test_memory_uneven_stages.py). Rank 0: 1 layer + the word and position embeddings 1024·64 +
    32·64 (V padded to 1024) = 117,568 parameters, 2 microbatches in flight: 2,296,448 bytes. Rank 1: 3 layers + the
    output layer's copy of the word embeddings 1024·64 + the final LayerNorm 2·64 = 215,616 parameters, 1
    microbatch of 3 layers: 4,151,424 (without the output layer 2,971,776: 28 % short). The report names the
    stage."""
    spec = load_text(UNEVEN)
    t = spec.training
    assert t is not None
    mem = memory_per_rank(t, training_plan(t, 2))
    n = 3 * 49_984 + 1024 * 64 + 2 * 64
    assert mem == {"params": 2 * n, "grads": 4 * n, "optimizer": 12 * n, "activations": 3 * 90_112,
                   "total": 18 * n + 3 * 90_112, "stage": 1}
    assert mem["total"] == 4_151_424
    path = tmp_path / "u.yaml"
    path.write_text(UNEVEN)
    r = CliRunner().invoke(app, ["predict", str(path), "--no-gantt", "--no-trace", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "memory per GPU, pipeline stage 1 (the most loaded): params 421.12 KiB, grads 842.25 KiB" in r.output


def test_mfu_without_a_peak_of_the_dtype_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """A bf16 step on a profile that lists no bf16 peak (fp32 only, which stands in for the roofline): MFU has no
    denominator. It printed "MFU 0.0 % of 0 TFLOP/s bf16 peak"; now "MFU –" and the field to add."""
    from schedsim.api import predict
    from schedsim.hardware.profile import load_profile
    from schedsim.report.training import print_training, training_report

    h200 = load_profile("h200")
    prof = h200.model_copy(update={"gpu": h200.gpu.model_copy(update={"peak_tflops": {"fp32": 67.0}})})
    spec = load_text(TINY)
    d = training_report(spec, predict(spec, profile=prof).timeline, prof).to_dict()
    assert d["peak_tflops"] == 0 and d["tflops_per_gpu"] > 0
    print_training(d)
    out = capsys.readouterr().out
    assert "MFU – (the profile lists no bf16 peak: gpu.peak_tflops.bf16)" in out and "MFU 0.0 %" not in out
