"""Context parallelism in the ``training:`` block (issue 36): Transformer Engine's ring attention as Megatron-LM
runs it (cp steps of fused attention, the K, V exchange of the next step on stream ``cp_comm`` overlapped with
this step's kernel), sizes and FLOP by hand, the timeline's overlap, dp = world / (tp·pp·cp), and Megatron's
refusal."""

from __future__ import annotations

from pathlib import Path

from tests.spec.test_training_block import TINY, _check, _ops

# world 8 = tp 2 × cp 2 × pp 2 (dp 1); s = 32 → 16 tokens a CP rank; h = 64, a = 4 (d = 16), bf16
CP = TINY.replace("  pp: 2\n", "  pp: 2\n  cp: 2\n")


def _layer(ops: list, rank: int, prefix: str) -> list:  # type: ignore[type-arg]
    return [o for o in ops if o.rank == rank and o.name.startswith(prefix)]


def test_ring_attention_ops_by_hand() -> None:
    """Per layer and microbatch on rank 0 (tp 0, cp 0, pp 0; ring: next = previous = rank 2): K, V of 16 tokens
    and 64/2 columns each, 2·16·32·2 = 2048 bytes; an attention step is half a 16 × 16 block of the rank's 2
    heads: 2·1·2·16·16·16 = 16,384 FLOP forward, 2.5× = 40,960 backward. The forward sends K, V once (cp − 1),
    the backward twice (K, V at its first step, dK, dV at its last)."""
    ops = _ops(CP)
    f = {o.name.removeprefix("F0.0.l0."): o for o in _layer(ops, 0, "F0.0.l0.")}
    names = list(f)
    at = names.index("qkv_bias")
    assert names[at:at + 7] == ["qkv_bias", "cp_send_kv0", "cp_recv_kv0", "cp_attn0", "cp_attn1",
                                "cp_out_correction1", "context_copy"]
    send, recv = f["cp_send_kv0"], f["cp_recv_kv0"]
    assert (send.kind, send.stream, send.peer, send.nbytes) == ("send", "cp_comm", 2, 2048)
    assert (recv.kind, recv.stream, recv.peer, recv.nbytes) == ("recv", "cp_comm", 2, 2048)
    assert send.p2p_batch == recv.p2p_batch == "F0.0.l0.cp_kv0" and send.deps == ("F0.0.l0.qkv_bias",)
    assert f["cp_attn0"].flops == 16_384 and f["cp_attn1"].deps == ("F0.0.l0.cp_recv_kv0",)
    assert not [n for n in names if n in ("scores", "softmax", "attn_v", "attn_dropout")]
    assert f["qkv"].m == 16 and f["fc1"].m == 16  # the rank's s/cp tokens
    i = {o.name.removeprefix("B0.0.I.l0."): o for o in _layer(ops, 0, "B0.0.I.l0.")}
    ring = [n for n in i if n.startswith("cp_")]
    assert ring == ["cp_send_kv_bwd0", "cp_recv_kv_bwd0", "cp_attn_bwd0", "cp_send_kv_bwd1", "cp_recv_kv_bwd1",
                    "cp_attn_bwd1", "cp_grad_acc1"]
    assert i["cp_attn_bwd0"].flops == 40_960 and i["cp_send_kv_bwd1"].nbytes == 2048
    assert i["cp_send_kv_bwd1"].deps == ("B0.0.I.l0.cp_recv_kv_bwd0", "B0.0.I.l0.cp_attn_bwd0")
    assert i["qkv_grad_cat"].deps == ("B0.0.I.l0.cp_recv_kv_bwd1",)  # dK, dV back before the QKV gradient
    # PP messages carry the rank's 16 tokens; dp = 8 / (2·2·2) = 1, and gradients reduce over dp·cp = 2 ranks
    assert {o.nbytes for o in ops if o.kind == "send" and o.stream != "cp_comm"} == {16 * 64 * 2}
    assert {o.group for o in ops if o.rank == 0 and o.name.startswith("dp_grad")} == {(0, 2)}


def test_middle_ring_steps_carry_kv_and_dkv() -> None:
    """cp = 4 (tp 1, pp 2): 3 forward exchanges of K, V (2·8·64·2 = 2048 bytes for 8 tokens a rank); the
    backward's 4: K, V, then K, V with dK, dV twice (4096), then dK, dV; the ring of rank 0 sends to rank 1
    and receives from rank 3 (Megatron's order tp-cp-dp-pp)."""
    ops = _ops(TINY.replace("tp: 2", "tp: 1").replace("  pp: 2\n", "  pp: 2\n  cp: 4\n"))
    f = [o for o in _layer(ops, 0, "F0.0.l0.") if o.kind in ("send", "recv")]
    assert [o.nbytes for o in f if o.kind == "send"] == [2048] * 3
    assert {o.peer for o in f if o.kind == "send"} == {1} and {o.peer for o in f if o.kind == "recv"} == {3}
    i = [o.nbytes for o in _layer(ops, 0, "B0.0.I.l0.") if o.kind == "send"]
    assert i == [2048, 4096, 4096, 2048]


def test_ring_exchange_overlaps_the_attention_step() -> None:
    """On the timeline the next step's K, V exchange runs while this step's attention kernel does, and the
    next step's kernel starts only once the exchange ended."""
    from schedsim.api import lower_spec
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    text = CP.replace("hidden_size: 64", "hidden_size: 1024").replace("seq_length: 32", "seq_length: 4096")
    tl = simulate(lower_spec(load_text(text)), load_profile("h200"))
    span = {s.name: s for s in tl.spans if s.rank == 0 and s.name.startswith("F0.0.l0.cp_")}
    send, recv, a0, a1 = (span[f"F0.0.l0.{n}"] for n in ("cp_send_kv0", "cp_recv_kv0", "cp_attn0", "cp_attn1"))
    assert send.start_s < a0.end_s and a0.start_s < send.end_s  # concurrent
    assert a1.start_s >= recv.end_s


def test_context_parallel_refusal(tmp_path: Path) -> None:
    """Megatron splits a sequence into 2·cp chunks: seq_length 36 with cp 4 (36 / 8) is refused on the cp key."""
    code, err = _check(tmp_path, TINY.replace("seq_length: 32", "seq_length: 36").replace("tp: 2", "tp: 1")
                       .replace("  pp: 2\n", "  pp: 2\n  cp: 4\n"))
    assert code == 2
    first, fix = err.splitlines()[:2]
    assert "training.cp: seq_length (36) must be divisible by 2 × context_parallel_size (8)" in first
    assert "fix: use a seq_length that is a multiple of 8" in fix and "Traceback" not in err


def test_interleaved_pipeline_runs_the_ring_as_lone_ops(tmp_path: Path) -> None:
    """With virtual stages the pipeline's p2p are lone (Megatron's overlap_p2p_comm), and so is the ring: lone
    isend / irecv on two-rank communicators, on streams cp_send and cp_recv, the odd CP rank posting its recv
    first (Transformer Engine's order), so the static checks find no hang (a batch would sit on the world
    communicator, which lone pipeline p2p and NCCL's lazy creation of it would deadlock)."""
    text = CP.replace("num_layers: 2", "num_layers: 4\n  num_layers_per_virtual_pipeline_stage: 1")
    code, out = _check(tmp_path, text)
    assert code == 0, out
    ops = _ops(text)
    for rank, first in ((0, "send"), (2, "recv")):  # cp coordinate 0 and 1 (tp 2 fastest)
        ring = [o for o in _layer(ops, rank, "F0.0.l0.") if o.kind in ("send", "recv")]
        assert [o.kind for o in ring][0] == first and {o.p2p_batch for o in ring} == {None}
        assert {o.stream for o in ring} == {"cp_send", "cp_recv"}


def test_ring_attention_stores_no_attention_matrix() -> None:
    """With cp > 1 the attention core is the ring of fused attention kernels (Transformer Engine disables its
    unfused backend under context parallelism: ``get_attention_backend``, "Disabling UnfusedDotProductAttention
    as it does not support context parallelism"), so the a·s²·b tensors of Korthikanti's count (scores, softmax,
    its dropout mask) are not stored, as with ``use_flash_attn``. CP (bf16, no SP, no recomputation), per layer
    and microbatch on a CP rank of 16 tokens (sbh = 16·1·64 = 1024): sbh·(10 + 24/t) = 1024·22 = 22,528 bytes;
    it counted the a·s²·b·5/t of the whole sequence over cp too, 4·32²·5/2/2 = 5,120 more. Memory per GPU: rank
    0 holds 1 layer, min(m, pp) = 2 microbatches in flight."""
    from schedsim.spec.loader import load_text
    from schedsim.spec.training_block import act_bytes_per_layer, memory_per_rank, training_plan

    for text in (CP, CP.replace("bf16: true", "bf16: true\n  use_flash_attn: true")):
        spec = load_text(text)
        plan = training_plan(spec.training, spec.world_size)
        assert act_bytes_per_layer(spec.training, plan) == 22_528
        assert memory_per_rank(spec.training, plan)["activations"] == 2 * 22_528
