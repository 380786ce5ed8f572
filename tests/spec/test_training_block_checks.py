"""The ``training:`` block (issue 36): Megatron-LM's memory terms per rank (untied output layer, uniform
recompute, fp32 activations), its 1F1B order with fewer microbatches than stages, and its checks: each bad
size, type or flag is refused on its training field with file:line:col and a fix. Commands run in a
subprocess with a timeout (tests/cli_subprocess.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from schedsim.spec.training_block import TrainingSpec, memory_per_rank, training_plan
from tests.cli_subprocess import run_cli as _cli

BASE = """\
schema_version: 1
name: tb
world_size: 8
training:
  num_layers: 8
  hidden_size: 1024
  num_attention_heads: 16
  seq_length: 1024
  micro_batch_size: 1
  bf16: true
  tp: 2
  pp: 2
"""


def _spec(**kw: object) -> TrainingSpec:
    base: dict[str, object] = dict(num_layers=8, hidden_size=1024, num_attention_heads=16, seq_length=1024,
                                   micro_batch_size=1, global_batch_size=16, bf16=True)
    base.update(kw)
    return TrainingSpec(**base)  # type: ignore[arg-type]


def test_untied_output_layer_counts_in_memory_when_one_stage_holds_it() -> None:
    tied, untied = _spec(tp=1, pp=1), _spec(tp=1, pp=1, untie_embeddings_and_output_weights=True)
    p_t, p_u = training_plan(tied, 8), training_plan(untied, 8)
    extra = p_u.vocab * 1024 * 2  # V·h bf16 weights (V padded to 50304)
    assert memory_per_rank(untied, p_u)["params"] == pytest.approx(memory_per_rank(tied, p_t)["params"] + extra)


def test_uniform_recompute_stores_one_input_per_group_of_layers() -> None:
    """Megatron transformer_block.py _checkpointed_forward, uniform: one 2sbh input stored per group of N layers
    and microbatch in flight, plus the backward's re-run of one group (N layers of Korthikanti's no-recompute
    sbh·(10 + 24/t) + 5as²b/t). Here s = h = 1024, b = 1, a = 16, t = 2: 62·sbh a layer; the first of pp = 2
    stages has 4 layers and min(m, p) = 2 microbatches in flight (8 layer-microbatches)."""
    sbh = 1024 * 1 * 1024

    def act(n: int) -> float:
        t = _spec(tp=2, pp=2, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=n)
        return memory_per_rank(t, training_plan(t, 8))["activations"]

    assert act(1) == pytest.approx(8 * 2 * sbh + 1 * 62 * sbh)
    assert act(2) == pytest.approx(8 * 2 * sbh / 2 + 2 * 62 * sbh)
    assert act(4) == pytest.approx(8 * 2 * sbh / 4 + 4 * 62 * sbh)


def test_megatron_1f1b_with_fewer_microbatches_than_stages_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(BASE + "  global_batch_size: 2\n")  # dp 2, m = 1 < pp = 2
    r = _cli("predict", "t.yaml", "--out", "o", "--no-gantt", cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr[-500:]


def test_huge_hidden_size_is_reported_on_the_training_field(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(BASE.replace("hidden_size: 1024", "hidden_size: 1099511627776")
                                     + "  global_batch_size: 16\n")
    r = _cli("predict", "t.yaml", "--out", "o", "--no-gantt", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "hidden_size" in r.stderr and "pipeline.stage" not in r.stderr, r.stderr[-500:]
    assert "t.yaml:6:16: training.hidden_size: " in r.stderr and "fix: use hidden_size <= 366503875925" in r.stderr


def test_sizes_past_the_op_limits_name_the_training_field_and_line(tmp_path: Path) -> None:
    """seq_length 2^40: the attention scores b·a·s² pass 2^60 bytes (docs/schedule_language.md, Sizes); pp 24 on 8
    GPUs: world_size is not divisible by tp·pp·cp, and pp is the factor that does not divide it."""
    (tmp_path / "t.yaml").write_text(BASE.replace("seq_length: 1024", "seq_length: 1099511627776")
                                     + "  global_batch_size: 16\n")
    r = _cli("check", "t.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "t.yaml:8:15: training.seq_length: " in r.stderr, r.stderr[-500:]
    (tmp_path / "t.yaml").write_text(BASE.replace("world_size: 8", "world_size: 8\nparams: {pp: 2}")
                                     .replace("pp: 2\n", "pp: pp\n") + "  global_batch_size: 16\n")
    r = _cli("check", "t.yaml", "--set", "pp=24", cwd=tmp_path)
    assert r.returncode == 2 and "t.yaml:13:7: training.pp: world_size (8) is not divisible" in r.stderr, r.stderr


def test_interleaved_microbatches_not_a_multiple_of_pp_are_refused_at_their_line(tmp_path: Path) -> None:
    """Megatron's interleaved schedule (default microbatch group pp) needs m % pp == 0: refused on
    global_batch_size with file:line:col; 1F1B (no virtual stages) runs the same m (previous test)."""
    (tmp_path / "t.yaml").write_text(BASE.replace("pp: 2", "pp: 4") + "  global_batch_size: 2\n"
                                     "  num_layers_per_virtual_pipeline_stage: 1\n")
    r = _cli("check", "t.yaml", cwd=tmp_path)
    assert r.returncode == 2 and "t.yaml:13:22: training.global_batch_size: number of microbatches (2" in r.stderr
    assert "fix: use global_batch_size: 4" in r.stderr, r.stderr


def test_megatron_1f1b_order_with_fewer_microbatches_than_stages() -> None:
    """Megatron forward_backward_pipelining_without_interleaving, p = 4, m = 2: rank r warms up
    min(p - r - 1, m) forwards, then 1F1B, then drains (hand-written)."""
    from schedsim.lower.pipeline_plan import plan_of
    from schedsim.lower.training import _transformer
    from schedsim.spec.loader import load_text
    from schedsim.spec.pipeline_block import PipelineSpec

    spec = load_text(BASE.replace("pp: 2", "pp: 4") + "  global_batch_size: 2\n")
    assert spec.training is not None
    tr = _transformer(spec.training, training_plan(spec.training, 8))
    plan = plan_of(spec, PipelineSpec(schedule="1f1b", p=4, m=2, transformer=tr), reference=True, megatron=True)
    got = {r: " ".join(str(a) for a in acts if a is not None) for r, acts in plan.actions().items()}
    assert got == {0: "0F0 0F1 0B0 0B1", 1: "1F0 1F1 1B0 1B1", 2: "2F0 2F1 2B0 2B1", 3: "3F0 3B0 3F1 3B1"}


def test_training_sizes_and_flags_refuse_other_types(tmp_path: Path) -> None:
    cases = {"tp: 2": ("tp: true", "t.yaml:11:7: training.tp: Input should be a valid integer"),
             "bf16: true": ('bf16: "yes"', "t.yaml:10:9: training.bf16: Input should be a valid boolean"),
             "num_layers: 8": ("num_layers: 8.0", "t.yaml:5:15: training.num_layers: Input should be a valid "
                               "integer")}
    for old, (new, where) in cases.items():
        (tmp_path / "t.yaml").write_text(BASE.replace(old, new) + "  global_batch_size: 16\n")
        r = _cli("check", "t.yaml", cwd=tmp_path, timeout=60)
        assert r.returncode == 2 and where in r.stderr and "fix:" in r.stderr, r.stderr[-300:]


def test_params_dtype_contradicting_the_precision_flag_is_refused(tmp_path: Path) -> None:
    """Megatron-LM arguments.py sets params_dtype from --fp16 / --bf16; a different params_dtype is refused."""
    (tmp_path / "t.yaml").write_text(BASE + "  global_batch_size: 16\n  params_dtype: fp16\n")
    r = _cli("check", "t.yaml", cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "t.yaml:14:17: training.params_dtype: params_dtype fp16 contradicts --bf16" \
        in r.stderr, r.stderr[-300:]
    (tmp_path / "t.yaml").write_text(BASE + "  global_batch_size: 16\n  params_dtype: bf16\n")
    assert _cli("check", "t.yaml", cwd=tmp_path, timeout=60).returncode == 0


def test_fp32_activations_take_more_memory_than_bf16() -> None:
    bf16, fp32 = _spec(tp=2, pp=2), _spec(tp=2, pp=2, bf16=False)
    a16 = memory_per_rank(bf16, training_plan(bf16, 8))["activations"]
    a32 = memory_per_rank(fp32, training_plan(fp32, 8))["activations"]
    assert a32 > 1.5 * a16
    sbh, as2b = 1024 * 1024, 16 * 1024 * 1024  # Korthikanti Table 2 with 4-byte values, 1-byte dropout masks
    assert a16 == pytest.approx(8 * (sbh * (10 + 24 / 2) + 5 * as2b / 2))  # 8 layer-microbatches in flight
    assert a32 == pytest.approx(8 * (sbh * (18 + 48 / 2) + 9 * as2b / 2))


@pytest.mark.parametrize("sp", [True, False])
def test_activation_memory_scales_the_mlp_with_ffn_hidden_size(sp: bool) -> None:
    """Korthikanti et al. 2022's 34·sbh (selective) takes f = 4h; Megatron-LM theoretical_memory_usage.py
    writes it sbh·(18 + 4f/h): the GeLU's input and output are s·b·f each. f = 8h = 8192 (s = h = 1024, b = 1,
    t = 2, bf16): with SP 50·sbh/t a layer (34 at f = 4h); without SP, the LayerNorm, QKV and fc1 inputs and the
    two dropout masks unsplit, 10·sbh, and the rest over t: (8 + 32)/2 = 20, 30·sbh (22 at f = 4h). The first of
    pp = 2 stages holds 4 layers × 2 microbatches."""
    sbh = 1024 * 1024
    t = _spec(tp=2, pp=2, recompute_granularity="selective", sequence_parallel=sp, ffn_hidden_size=8192)
    t4 = _spec(tp=2, pp=2, recompute_granularity="selective", sequence_parallel=sp)
    got = memory_per_rank(t, training_plan(t, 8))["activations"]
    assert got == pytest.approx(8 * (50 * sbh / 2 if sp else 30 * sbh))
    assert memory_per_rank(t4, training_plan(t4, 8))["activations"] == pytest.approx(8 * (34 * sbh / 2 if sp else
                                                                                          22 * sbh))


@pytest.mark.parametrize("seq,tp,pp,cp,refused,fix", [
    (1023, 2, 2, 1, "seq_length (1023) is not divisible by tensor_model_parallel_size (2)", "a multiple of 2"),
    (1028, 4, 1, 2, "seq_length / cp (514) is not divisible by tensor_model_parallel_size (4)", "a multiple of 8"),
    (1032, 4, 1, 2, None, None)])
def test_sequence_parallel_needs_the_sequence_to_split_over_tp(tmp_path: Path, seq: int, tp: int, pp: int, cp: int,
                                                               refused: str | None, fix: str | None) -> None:
    """Sequence parallelism splits s/cp over the tp ranks (Megatron Core mappings.py
    _reduce_scatter_along_first_dim asserts it divides): 1023 over tp 2 is refused on seq_length; 1028 with cp 2 is
    a multiple of 2·cp, but its 514 per CP rank do not split over tp 4 (the fix: a multiple of cp · lcm(tp, 2) = 8);
    1032 (516 = 4 · 129) runs. Without sequence parallelism any length runs."""
    text = (BASE.replace("seq_length: 1024", f"seq_length: {seq}").replace("tp: 2", f"tp: {tp}")
            .replace("pp: 2", f"pp: {pp}") + f"  cp: {cp}\n  global_batch_size: 16\n")
    (tmp_path / "t.yaml").write_text(text + "  sequence_parallel: true\n")
    r = _cli("check", "t.yaml", cwd=tmp_path)
    if refused:
        assert r.returncode == 2 and f"t.yaml:8:15: training.seq_length: {refused}" in r.stderr, r.stderr
        assert f"fix: use a seq_length that is {fix}, or set sequence_parallel: false" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
    (tmp_path / "t.yaml").write_text(text)
    assert _cli("check", "t.yaml", cwd=tmp_path).returncode == 0
