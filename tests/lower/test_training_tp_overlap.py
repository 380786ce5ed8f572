"""``tp_comm_overlap`` in the ``training:`` block (issue 36): Transformer Engine's userbuffers overlap of the
sequence-parallel all-gather and reduce-scatter with their GEMMs, chunked into tp pieces with a ring exchange
on stream ``tp_comm``; op counts and sizes by hand and the overlap on the timeline."""

from __future__ import annotations

from tests.spec.test_training_block import TINY, _ops

# world 4 = tp 4 (pp 1, dp 1); s = 32, b = 1: a TP rank's shard is 8 tokens, 8·64·2 = 1024 bytes
TPO = TINY.replace("world_size: 8", "world_size: 4").replace("tp: 2", "tp: 4").replace(
    "global_batch_size: 8", "global_batch_size: 1").replace("  pp: 2\n", "  sequence_parallel: true\n"
                                                              "  tp_comm_overlap: true\n")


def test_chunked_gemms_and_ring_exchange_by_hand() -> None:
    """Rank 1 (ring: next 2, previous 0). QKV after an all-gather: 3 exchanges of 1024 bytes, 4 GEMM chunks of
    32/4 = 8 rows, chunk i waiting for recv i − 1; the projection before a reduce-scatter: 4 chunks, adds of the
    received partial (3 · 1024 bytes) after chunks 1-3, 3 sends of the partial. No TP collective is left in
    the layer; the backward does the same for fc2/proj data gradients (gather) and fc1/QKV (scatter)."""
    ops = _ops(TPO)
    f = {o.name.removeprefix("F0.0.l0."): o for o in ops if o.rank == 1 and o.name.startswith("F0.0.l0.")}
    names = list(f)
    at = names.index("tp_send_qkv0")
    assert names[at:at + 11] == ["tp_send_qkv0", "tp_recv_qkv0", "qkv_c0", "tp_send_qkv1", "tp_recv_qkv1",
                                 "qkv_c1", "tp_send_qkv2", "tp_recv_qkv2", "qkv_c2", "qkv_c3", "qkv_bias"]
    assert {(f[n].m, f[n].n, f[n].k) for n in names if n.startswith("qkv_c")} == {(8, 48, 64)}
    sends = [f[n] for n in names if n.startswith("tp_send_")]
    assert {(o.stream, o.peer, o.nbytes) for o in sends} == {("tp_comm", 2, 1024)} and len(sends) == 4 * 3
    assert {(f[n].peer) for n in names if n.startswith("tp_recv_")} == {0}
    assert f["qkv_c0"].deps == () and f["qkv_c2"].deps == ("F0.0.l0.tp_recv_qkv1",)
    assert f["proj_rs_add1"].nbytes == 3 * 1024 and f["proj_rs_add1"].deps == ("F0.0.l0.tp_recv_proj0",)
    assert f["tp_send_proj1"].deps == ("F0.0.l0.proj_rs_add1",)
    assert not [o for o in f.values() if o.kind in ("all_gather", "reduce_scatter", "all_reduce")]
    i = [o.name.removeprefix("B0.0.I.l0.") for o in ops if o.rank == 1 and o.name.startswith("B0.0.I.l0.")]
    assert [n for n in i if n.endswith("_c0")] == ["fc2_dgrad_c0", "fc1_dgrad_c0", "proj_dgrad_c0", "qkv_dgrad_c0"]
    assert "fc1_dgrad_rs_add3" in i and "tp_send_proj_dgrad2" in i


def test_exchange_overlaps_the_gemm_chunk() -> None:
    """On the timeline a ring step's exchange runs while the GEMM chunk on the shard already held does, and the
    next chunk starts only once the exchange's recv ended."""
    from schedsim.api import lower_spec
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_text

    text = TPO.replace("hidden_size: 64", "hidden_size: 4096").replace("seq_length: 32", "seq_length: 4096")
    tl = simulate(lower_spec(load_text(text)), load_profile("h200"))
    span = {s.name.removeprefix("F0.0.l0."): s for s in tl.spans if s.rank == 1 and s.name.startswith("F0.0.l0.")}
    send, recv, c0, c1 = span["tp_send_fc10"], span["tp_recv_fc10"], span["fc1_c0"], span["fc1_c1"]
    assert send.start_s < c0.end_s and c0.start_s < send.end_s
    assert c1.start_s >= recv.end_s


def test_op_estimate_covers_rings_and_experts() -> None:
    """The loader's expansion estimate (refusing before lowering) is not below the real op count with
    tp_comm_overlap, context parallelism and experts, which add ops per layer."""
    import yaml
    from test_training_cp import CP
    from test_training_moe import MOE

    from schedsim.spec.limits import _training_ops

    for text in (TPO, CP, MOE):
        doc = yaml.safe_load(text)
        assert _training_ops(doc["training"], doc["world_size"]) >= len(_ops(text))
