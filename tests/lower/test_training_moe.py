"""Mixture of experts in the ``training:`` block (issue 36): the token dispatch/combine all-to-all over the EP
group with per-rank sizes under router imbalance, the TP gather around the experts, one GEMM set per local
expert, the experts' own gradient reduction, and Megatron's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spec.test_training_block import TINY, _check, _ops

# world 8 = tp 2 × dp 4 (pp 1); E = 4 experts over ep = 2: two local experts a rank; top-2 routing; the busiest
# expert at capacity factor 1.5. s = 32, b = 1, h = 64, f = 256, bf16.
MOE = TINY.replace("  pp: 2\n", "  sequence_parallel: true\n  num_experts: 4\n  expert_model_parallel_size: 2\n"
                  "  moe_router_topk: 2\n  moe_expert_capacity_factor: 1.5\n")


def test_moe_layer_by_hand() -> None:
    """Each EP rank routes its s·b/tp = 16 tokens to k = 2 experts: 32 a rank, 64 over the EP group of 2, 16 an
    expert, 32 after the TP all-gather. The hot rank (EP index 0: ranks 0, 1, 4, 5 in Megatron's tp-ep-dp
    order) runs its first expert at capacity, 1.5 × 32 = 48 tokens. Dispatch all-to-all, per rank the larger
    of sent and received bytes: sent 16·2·64·2 = 4096; received (32 + 32)/2·64·2 = 4096, hot (48 + 32)/2·128
    = 5120. TP all-gather of the received tokens: 64·128 = 8192, hot 80·128 = 10240."""
    ops = _ops(MOE)
    f0 = [o for o in ops if o.rank == 0 and o.name.startswith("F0.0.l0.")]
    names = [o.name.removeprefix("F0.0.l0.") for o in f0]
    at = names.index("permute")
    assert names[at:at + 12] == ["permute", "ep_dispatch", "tp_ag_moe", "fc1_e0", "act_e0", "fc2_e0", "fc1_e1",
                                 "act_e1", "fc2_e1", "tp_rs_moe", "ep_combine", "unpermute"]
    assert names[at - 3:at] == ["ln2", "router", "router_topk"] and "fc1" not in names
    by = {(o.rank, o.name.removeprefix("F0.0.l0.")): o for o in ops if o.name.startswith("F0.0.l0.")}
    for r in range(8):
        hot = r in (0, 1, 4, 5)
        a2a, ag = by[(r, "ep_dispatch")], by[(r, "tp_ag_moe")]
        assert a2a.kind == "all_to_all" and a2a.nbytes == (5120 if hot else 4096)
        assert a2a.group == {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3), 4: (4, 6), 5: (5, 7), 6: (4, 6),
                             7: (5, 7)}[r]
        assert ag.kind == "all_gather" and ag.nbytes == (10240 if hot else 8192) and ag.group == (r & ~1, r | 1)
        assert (by[(r, "fc1_e0")].m, by[(r, "fc1_e1")].m) == ((48, 32) if hot else (32, 32))
        fc1, fc2 = by[(r, "fc1_e0")], by[(r, "fc2_e0")]
        assert (fc1.n, fc1.k, fc2.n, fc2.k) == (128, 64, 64, 128)  # f/tp = 128 columns
        assert by[(r, "router")].m == 16 and by[(r, "router")].n == 4
        assert by[(r, "ep_combine")].nbytes == a2a.nbytes
    i0 = [o.name.removeprefix("B0.0.I.l0.") for o in ops if o.rank == 2 and o.name.startswith("B0.0.I.l0.")]
    at = i0.index("unpermute_bwd")
    assert i0[at:at + 4] == ["unpermute_bwd", "ep_combine_bwd", "tp_ag_moe_bwd", "fc2_dgrad_e1"]
    at = i0.index("fc1_dgrad_e0")
    assert i0[at:at + 4] == ["fc1_dgrad_e0", "tp_rs_moe_bwd", "ep_dispatch_bwd", "permute_bwd"]
    w0 = [o.name.removeprefix("B0.0.W.l0.") for o in ops if o.rank == 2 and o.name.startswith("B0.0.W.l0.")]
    assert w0[:5] == ["fc2_wgrad_e1", "fc1_wgrad_e1", "fc2_wgrad_e0", "fc1_wgrad_e0", "router_wgrad"]


def test_expert_gradients_reduce_over_the_expert_data_parallel_group() -> None:
    """Dense gradients all-reduce over dp = 4 ranks; the experts' over dp·cp/ep = 2 ranks with the same EP
    index: per layer 2 experts × (64·256 + 256·64) = 65,536 parameters, 2 layers, / tp = 65,536, fp32 = 262,144
    bytes. Rank 0's dense group is (0, 2, 4, 6), its expert group (0, 4); rank 2's (2, 6)."""
    ops = _ops(MOE)
    ex = {o.rank: o for o in ops if o.name == "dp_expert_grad_all_reduce"}
    dense = {o.rank: o for o in ops if o.name == "dp_grad_all_reduce"}
    assert ex[0].group == (0, 4) and ex[2].group == (2, 6) and ex[0].nbytes == 262_144
    assert dense[0].group == (0, 2, 4, 6)
    plain = {o.rank: o for o in _ops(MOE.replace("  num_experts: 4\n  expert_model_parallel_size: 2\n"
                                                 "  moe_router_topk: 2\n  moe_expert_capacity_factor: 1.5\n", ""))
             if o.name == "dp_grad_all_reduce"}
    # the dense MLP (fc1 h·f + f, fc2 f·h + h) is replaced by the router (h·E) and leaves the dense reduction; a
    # TP rank (tp 2) holds half of fc1 and fc2's weight, but fc2's bias and the router whole (Megatron-LM
    # RowParallelLinear's bias, "not parallelized"; Router's num_moe_experts × hidden_size weight)
    per_layer = ((64 * 256 + 256) + 256 * 64) / 2 + 64 - 64 * 4
    assert plain[0].nbytes - dense[0].nbytes == 2 * per_layer * 4


def test_balanced_router_without_capacity_factor() -> None:
    """No moe_expert_capacity_factor: every EP rank sends and receives 4096 bytes, every expert runs 32 tokens."""
    ops = _ops(MOE.replace("  moe_expert_capacity_factor: 1.5\n", ""))
    assert {o.nbytes for o in ops if o.kind == "all_to_all"} == {4096}
    assert {o.m for o in ops if o.kind == "matmul" and o.name.endswith(("fc1_e0", "fc1_e1"))} == {32}


@pytest.mark.parametrize(("old", "new", "field", "words"), [
    ("num_experts: 4", "num_experts: 3", "training.expert_model_parallel_size",
     "num_experts (3) must be a multiple of expert_model_parallel_size (2)"),
    ("  num_experts: 4\n", "", "training.expert_model_parallel_size",
     "num_experts must be non None to use expert model parallelism"),
    ("  sequence_parallel: true\n", "", "training.sequence_parallel",
     "When using MoE and tensor parallelism, sequence parallelism must be used"),
    ("expert_model_parallel_size: 2", "expert_model_parallel_size: 8", "training.expert_model_parallel_size",
     "the experts' data-parallel size dp·cp / ep = 4 / 8 must be whole"),
    ("moe_router_topk: 2", "moe_router_topk: 5", "training.moe_router_topk",
     "moe_router_topk (5) is larger than num_experts (4)"),
])
def test_moe_refusals(tmp_path: Path, old: str, new: str, field: str, words: str) -> None:
    text = MOE.replace(old, new)
    assert text != MOE
    code, err = _check(tmp_path, text)
    assert code == 2, err
    first = err.splitlines()[0]
    assert f"{field}: " in first and words in first, first
    assert "fix:" in err and "Traceback" not in err


def test_capacity_factor_below_one_drops_every_expert_to_its_capacity() -> None:
    """c = 0.5: the capacity ceil(32 × 0.5) = 16 tokens is below the mean of 32, so Megatron drops every expert's
    tokens past 16 (moe_utils.get_capacity, the dispatcher's token drop), not only the first expert of EP
    index 0. Every rank: fc1 of 16 rows per expert; the dispatch all-to-all carries 16 tokens a rank (32 after
    the TP gather, over 2 local experts and tp 2): 16·64·2 = 2048 bytes; the TP all-gather 32·128 = 4096."""
    ops = _ops(MOE.replace("moe_expert_capacity_factor: 1.5", "moe_expert_capacity_factor: 0.5"))
    assert {o.m for o in ops if o.kind == "matmul" and o.name.endswith(("fc1_e0", "fc1_e1"))} == {16}
    assert {o.nbytes for o in ops if o.kind == "all_to_all"} == {2048}
    assert {o.nbytes for o in ops if o.name.endswith(".tp_ag_moe")} == {4096}


def test_expert_optimizer_state_is_sharded_over_the_expert_data_parallel_group() -> None:
    """Distributed optimizer: dense parameters' fp32 state (12 bytes each under bf16) is sharded over dp·cp = 4
    ranks, the experts' over their own data-parallel group, dp·cp/ep = 2 (Megatron-LM
    theoretical_memory_usage.py, num_bytes_per_parameter(expert_data_parallel_size)). Rank 0 holds 2 local
    experts × (64·256 + 256·64) / tp 2 = 32,768 expert parameters a layer, 65,536 over 2 layers."""
    import yaml

    from schedsim.spec.training_block import TrainingSpec, memory_per_rank, training_plan

    doc = yaml.safe_load(MOE)
    t = TrainingSpec(**{**doc["training"], "use_distributed_optimizer": True})
    mem = memory_per_rank(t, training_plan(t, 8))
    n, n_exp = mem["params"] / 2, 65_536  # bf16 weights: 2 bytes a parameter
    assert mem["optimizer"] == pytest.approx((n - n_exp) * 12 / 4 + n_exp * 12 / 2)


def test_distributed_optimizer_shards_the_experts_over_their_own_group() -> None:
    """With the distributed optimizer the experts' state is sharded over their data-parallel group (dp·cp/ep = 2
    ranks: Megatron Core's DDP builds the expert buffers on ``intra_expt_dp_group``, and the distributed
    optimizer shards each buffer over its group), the dense state over dp = 4. Rank 0 holds n parameters (the
    plain optimizer's step moves 28 bytes a parameter), E = 65,536 of them experts' (the test above): the passes
    run on (n − E)/4 + E/2 parameters (norm 4, Adam 28, main-to-model copy 6 bytes each), the dense parameters
    all-gather (n − E)·2 bytes over (0, 2, 4, 6), the experts' E·2 bytes over (0, 4)."""
    def tail(text: str) -> dict[str, object]:
        return {o.name: o for o in _ops(text) if o.rank == 0 and "." not in o.name}

    n = tail(MOE)["optimizer_step"].nbytes / 28  # type: ignore[attr-defined]
    dist = tail(MOE.replace("bf16: true", "bf16: true\n  use_distributed_optimizer: true"))
    e = 65_536
    k = (n - e) / 4 + e / 2
    assert [dist[x].nbytes for x in ("optimizer_grad_norm_local", "optimizer_step",  # type: ignore[attr-defined]
                                     "optimizer_param_copy")] == pytest.approx([4 * k, 28 * k, 6 * k])
    gather, expert = dist["dp_param_allgather"], dist["dp_expert_param_allgather"]
    assert (gather.group, gather.nbytes) == ((0, 2, 4, 6), pytest.approx((n - e) * 2))  # type: ignore[attr-defined]
    assert (expert.group, expert.nbytes) == ((0, 4), pytest.approx(e * 2))  # type: ignore[attr-defined]


def test_overlapped_reduction_still_scales_the_experts_gradients() -> None:
    """With overlap_grad_reduce the dense buckets are scaled before their reductions; the experts' gradients
    (E = 65,536 fp32 on rank 0, reduced at the step's end over their own group) are scaled by 1/(dp·cp) there too
    (Megatron Core's start_grad_sync for the expert bucket groups): one pass of 2·4·E bytes before their
    all-reduce."""
    ops = [o for o in _ops(MOE.replace("bf16: true", "bf16: true\n  overlap_grad_reduce: true")) if o.rank == 0]
    names = [o.name for o in ops]
    at = names.index("dp_expert_grad_all_reduce")
    assert (names[at - 1], ops[at - 1].nbytes) == ("grad_buffer_scale", 8 * 65_536)
