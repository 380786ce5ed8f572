"""Every kernel of a Megatron GPT layer (issue 36 item 2): the memory-bound kernels' bytes by hand, the attention
tensors Korthikanti et al. 2022 count, dropout off, the unfused softmax, the GPU model's cost of a kernel by
bytes, and one layer definition shared by the ``transformer:`` pipeline stage and the ``training:`` block."""

from __future__ import annotations

import pytest

from schedsim.spec.pipeline_block import TransformerSpec, _head_ops, _layer_ops, _transformer_stage

# s = 32, b = 2, h = 64, a = 8, f = 256, bf16 (e = 2): T = s·b = 64 tokens
SMALL = dict(layers=1, hidden=64, ffn=256, heads=8, seq=32, micro_batch=2, dtype="bf16")


def _bytes(ops: list[dict]) -> dict[str, int]:  # type: ignore[type-arg]
    return {o["name"]: o["bytes"] for o in ops if o["kind"] == "compute"}


def test_layer_kernel_bytes_by_hand() -> None:
    """tp = 2, no SP: S = (b·a/tp)·s² = 8·1024 = 8192 score elements (b·a/tp = 8, a multiple of 4, and s = 32:
    Megatron's fused softmax), q = 3h/tp = 96 QKV columns, h/tp = 32."""
    lay = _layer_ops(TransformerSpec(**SMALL), tp=2)  # type: ignore[arg-type]
    f, i, w = _bytes(lay["F"]), _bytes(lay["I"]), _bytes(lay["W"])
    S, T = 8192, 64
    assert f == {
        "ln1": 2 * T * 64 * 2, "qkv_bias": 2 * T * 96 * 2, "softmax": 2 * S * 2, "attn_dropout": S * (2 * 2 + 1),
        "context_copy": 2 * T * 32 * 2, "bias_dropout_add1": T * 64 * (3 * 2 + 1), "ln2": 2 * T * 64 * 2,
        "act": 2 * T * 128 * 2, "bias_dropout_add2": T * 64 * 7}
    assert i == {
        "dropout2_bwd": T * 64 * 5, "fc2_bias_grad": T * 64 * 2, "act_bwd": 3 * T * 128 * 2,
        "fc1_bias_grad": T * 128 * 2, "ln2_bwd": 4 * T * 64 * 2, "residual2_bwd": 3 * T * 64 * 2,
        "dropout1_bwd": T * 64 * 5, "proj_bias_grad": T * 64 * 2, "context_copy_bwd": 2 * T * 32 * 2,
        "attn_dropout_bwd": S * 5, "softmax_bwd": 3 * S * 2, "qkv_grad_cat": 2 * T * 96 * 2,
        "ln1_bwd": 4 * T * 64 * 2, "residual1_bwd": 3 * T * 64 * 2}
    assert w == {"qkv_bias_grad": T * 96 * 2}
    assert [o["name"] for o in lay["W"]] == ["fc2_wgrad", "fc1_wgrad", "proj_wgrad", "qkv_wgrad", "qkv_bias_grad"]
    # Korthikanti et al. 2022 §4.1: the forward writes 5·a·s²·b bytes of attention tensors (softmax output 2,
    # dropout output 2, mask 1), over tp here: the softmax writes half its bytes, the dropout all but its read
    written = f["softmax"] // 2 + f["attn_dropout"] - S * 2
    assert written == 5 * (8 // 2) * 32 * 32 * 2
    # with SP the LayerNorms, bias-dropout-adds and residual gradients hold s·b/tp tokens; the rest does not change
    sp = _bytes(_layer_ops(TransformerSpec(**SMALL), tp=2, sp=True)["F"])  # type: ignore[arg-type]
    assert sp["bias_dropout_add1"] == T // 2 * 64 * 7 and sp["ln1"] == T // 2 * 64 * 4
    assert sp["attn_dropout"] == f["attn_dropout"] and sp["context_copy"] == f["context_copy"]


def test_dropout_zero_launches_no_dropout_kernel() -> None:
    """ATen's dropout returns its input at p = 0: no attention-dropout kernel, no masks in the bias-dropout-adds,
    no embedding dropout."""
    t = TransformerSpec(**SMALL, attention_dropout=0.0, hidden_dropout=0)  # type: ignore[arg-type]
    lay = _layer_ops(t)
    names = [o["name"] for ph in lay.values() for o in ph]
    assert not [n for n in names if "dropout" in n and "bias_dropout_add" not in n]
    assert _bytes(lay["F"])["bias_dropout_add1"] == 64 * 64 * 3 * 2
    assert "embedding_dropout" not in _head_ops(t.model_copy(update={"vocab": 1000}))


def test_softmax_unfused_where_megatrons_kernel_is_not_available() -> None:
    """fp32, or b·a/tp not a multiple of 4: torch's masked_fill then softmax (each a read and a write of S), and
    their backwards; the selective-recompute core then has the mask too."""
    for kw, tp in ((dict(dtype="fp32"), 1), (dict(micro_batch=1, heads=4), 2)):
        t = TransformerSpec(**{**SMALL, **kw})  # type: ignore[arg-type]
        lay = _layer_ops(t, tp=tp)
        e = 4 if kw.get("dtype") == "fp32" else 2
        S = t.micro_batch * t.heads // tp * t.seq ** 2
        f, i = _bytes(lay["F"]), _bytes(lay["I"])
        assert f["attn_mask"] == f["softmax"] == 2 * S * e and i["attn_mask_bwd"] == 2 * S * e
        names = [o["name"] for o in lay["F"]]
        assert names.index("attn_mask") + 1 == names.index("softmax")


def test_memory_bound_kernel_costs_its_bytes_over_hbm() -> None:
    """The GPU model costs a bytes-only kernel at bytes / HBM bandwidth (dgx_a100: 1328 GB/s) above the kernel
    floor: the attention dropout of s = 2048, b = 4, a = 64 over tp = 8 moves 32·2048²·5 bytes."""
    from schedsim.gpu.cost import CostModel
    from schedsim.graph.ops import Op
    from schedsim.hardware.profile import load_profile

    t = TransformerSpec(layers=1, hidden=6144, ffn=24576, heads=64, seq=2048, micro_batch=4, dtype="fp16")
    drop = next(o for o in _layer_ops(t, tp=8)["F"] if o["name"] == "attn_dropout")
    assert drop["bytes"] == 32 * 2048 ** 2 * 5
    op = Op(name="d", rank=0, kind="compute", stream="compute", seq=0, nbytes=float(drop["bytes"]), dtype="fp16")
    assert CostModel(load_profile("dgx_a100")).duration(op) == pytest.approx(32 * 2048 ** 2 * 5 / 1328e9)


def test_dgx_a100_hbm_rate_follows_the_flashattention_tables() -> None:
    """dgx_a100's ``hbm_GBps`` is the share of the datasheet peak that Megatron's attention core reached on an A100
    40 GB (Dao et al. 2022, FlashAttention, arXiv 2205.14135, Tables 15 and 16: fp16, batch 16, 8 heads of 64,
    s = 2048, dropout 0.1; forward 6.56 ms, backward 10.80 ms), times the 80 GB card's 2039 GB/s. The core's
    bytes by hand (S = 16·8·2048² scores, e = 2): forward QKᵀ and attention·V each read two 2048×64 operands and
    write or read S (S·e + 2·128·2048·64·e), the fused softmax 2·S·e, the dropout S·(2e + 1); backward four GEMMs
    like those, the dropout's backward S·(2e + 1), the softmax's 3·S·e: 17.58 GB in 17.36 ms, 1.013 TB/s, 65.1 %
    of 1555 GB/s. The model's own kernel lists give the same bytes."""
    from schedsim.hardware.profile import load_profile
    from schedsim.spec.pipeline_block import CORE_F, CORE_I

    S, e, qk = 16 * 8 * 2048 ** 2, 2, 2 * 128 * 2048 * 64 * 2
    gemm = S * e + qk
    hand = (2 * gemm + 2 * S * e + S * (2 * e + 1)) + (4 * gemm + S * (2 * e + 1) + 3 * S * e)
    t = TransformerSpec(layers=1, hidden=512, ffn=2048, heads=8, seq=2048, micro_batch=16, dtype="fp16",
                        attention_dropout=0.1)
    lay = _layer_ops(t)

    def moved(o: dict) -> float:  # type: ignore[type-arg]
        if o["kind"] == "matmul":
            return o["batch"] * (o["m"] * o["k"] + o["k"] * o["n"] + o["m"] * o["n"]) * e
        return float(o["bytes"])

    ours = sum(moved(o) for o in lay["F"] if o["name"] in CORE_F) + \
        sum(moved(o) for o in lay["I"] if o["name"] in CORE_I)
    assert ours == hand == pytest.approx(17.58e9, rel=1e-3)
    share = hand / ((6.56 + 10.80) * 1e-3) / 1555e9
    assert share == pytest.approx(0.651, abs=5e-4)
    assert load_profile("dgx_a100").gpu.hbm_GBps == pytest.approx(share * 2039, abs=1.0)


def test_pipeline_stage_and_training_block_share_the_layer() -> None:
    """A ``transformer:`` stage's kernels are the training block's layer kernels (tp = 1, TP collectives aside),
    with the same bytes; the first and last stages add the same head kernels."""
    from schedsim.lower.training import stage_lists
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import training_plan

    spec = load_text("schema_version: 1\nname: x\nworld_size: 2\ntraining: {num_layers: 2, hidden_size: 64, "
                     "num_attention_heads: 8, seq_length: 32, micro_batch_size: 2, global_batch_size: 4, "
                     "vocab_size: 1000, pp: 2, bf16: true}\n")
    tb = spec.training
    assert tb is not None
    plan = training_plan(tb, 2)
    t = TransformerSpec(**SMALL, vocab=plan.vocab)  # type: ignore[arg-type]
    for stage in (0, 1):
        train = stage_lists(tb, plan, stage, 2)
        pipe = _transformer_stage(t, 1, stage == 0, stage == 1)
        for ph in ("F", "I", "W"):
            got = [(o["name"].removeprefix("l0."), o.get("bytes"), o.get("m")) for o in train[ph]]
            want = [(o["name"], o.get("bytes"), o.get("m")) for o in pipe[ph]]
            assert got == want, (stage, ph)
    assert [o["name"] for o in stage_lists(tb, plan, 1, 2)["I"][:3]] == \
        ["cross_entropy_bwd", "logits_dgrad", "final_ln_bwd"]


def test_cross_entropy_bytes_follow_megatrons_passes() -> None:
    """Megatron's vocabulary-parallel cross-entropy forward on ``output.float()``, by hand for s·b = 32·2 tokens
    and V/tp = 1024/2 columns: bf16 logits cast to fp32 (2 + 4 bytes an element), max (4), max subtracted in place
    (8), exp in place (8), sum (4), division by the sum in place (8): 38 bytes an element, 64·512·38 = 1,245,184;
    fp32 logits skip the cast: 32. The backward: mul_ on the saved softmax (8) and the cast back (4 + 2)."""
    from schedsim.spec.pipeline_block import _head_ops

    bf16 = _head_ops(TransformerSpec(**{**SMALL, "dtype": "bf16"}, vocab=1024), tp=2)  # type: ignore[arg-type]
    assert bf16["cross_entropy"]["bytes"] == 64 * 512 * 38 == 1_245_184
    assert bf16["cross_entropy_bwd"]["bytes"] == 64 * 512 * 14
    fp32 = _head_ops(TransformerSpec(**{**SMALL, "dtype": "fp32"}, vocab=1024), tp=2)  # type: ignore[arg-type]
    assert fp32["cross_entropy"]["bytes"] == 64 * 512 * 32


def test_flash_attention_replaces_the_core() -> None:
    """flash_attention: the scores/softmax/dropout/attention·V kernels give way to the QKV layout copy and one
    fused kernel, FLOP 2·b·(a/tp)·s²·d forward (causal: half of QKᵀ and P·V) = 2·2·4·32²·8 = 131,072 at tp = 2,
    2.5 times that backward; no tensor of size b·a·s² moves. The training block's use_flash_attn sets it and
    drops the a·s²·b activations; selective recomputation then reruns nothing."""
    from schedsim.lower.training import stage_lists
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import act_bytes_per_layer, training_plan

    lay = _layer_ops(TransformerSpec(**SMALL, flash_attention=True), tp=2)  # type: ignore[arg-type]
    f = {o["name"]: o for o in lay["F"]}
    i = {o["name"]: o for o in lay["I"]}
    names = list(f)
    assert names[names.index("qkv_bias"):names.index("context_copy") + 1] == [
        "qkv_bias", "qkv_layout_copy", "flash_attn", "context_copy"]
    assert f["flash_attn"]["flops"] == 131_072 and i["flash_attn_bwd"]["flops"] == 2.5 * 131_072
    assert f["qkv_layout_copy"]["bytes"] == 2 * 64 * 96 * 2 and f["flash_attn"]["bytes"] == (64 * 96 + 64 * 32) * 2
    assert not {"scores", "softmax", "attn_dropout"} & set(names) and "softmax_bwd" not in i
    text = ("schema_version: 1\nname: x\nworld_size: 2\ntraining: {num_layers: 2, hidden_size: 64, "
            "num_attention_heads: 8, seq_length: 32, micro_batch_size: 2, vocab_size: 1000, tp: 2, bf16: true, "
            "use_flash_attn: true, recompute_granularity: selective}\n")
    tb = load_text(text).training
    assert tb is not None
    plan = training_plan(tb, 2)
    assert act_bytes_per_layer(tb, plan, None) == 32 * 2 * 64 * (8 + 2 + 24 / 2)  # no a·s²·b term
    assert not [o for o in stage_lists(tb, plan, 0, 1)["I"] if ".re_" in o["name"]]
