"""A ``training:`` block's own lowering is hang-free by construction, so ``lower(..., sweep=False)`` (what ``schedsim
search`` runs) leaves NCCL's rules unchecked: its wait-for graph unswept, the collectives' order and the lazy
creation's callers (:func:`schedsim.lower.checks.check_arrays`' ``generated``). Here every combination of the
block's parallel sizes (tp, pp, cp, virtual stages) with each recompute choice and each set of overlap, optimizer,
expert and FSDP2 settings, lowered for every rank and for the represented ranks, is checked anyway and found
hang-free (rules 1-7, rule 7's batches of two peers included, under lazy and eager communicator creation): the
verdict with those rules is the verdict without them. A schedule with written ops beside the block keeps every
check."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from schedsim.errors import SchedsimError
from schedsim.lower import lower
from schedsim.lower.checks import check_arrays
from schedsim.spec.loader import load_text
from schedsim.spec.training_block import refusal

HEAD = """\
schema_version: 1
name: grid
world_size: 16
{top}training:
  num_layers: 4
  hidden_size: 64
  num_attention_heads: 4
  seq_length: 32
  vocab_size: 1000
  global_batch_size: 64
  bf16: true
"""

#: the block's settings besides the parallel sizes: each line set is tried with every combination of those
OPTIONS = {
    "plain": "",
    "sp_overlap": "  sequence_parallel: true\n  tp_comm_overlap: true\n",
    "distopt": "  use_distributed_optimizer: true\n  overlap_grad_reduce: true\n  overlap_param_gather: true\n",
    "selective": "  sequence_parallel: true\n  recompute_granularity: selective\n",
    "full": "  recompute_granularity: full\n  recompute_method: uniform\n  recompute_num_layers: 1\n"
            "  overlap_grad_reduce: true\n",
    "experts": "  sequence_parallel: true\n  num_experts: 4\n  expert_model_parallel_size: 2\n  moe_router_topk: 2\n",
    "fsdp2": "  use_torch_fsdp2: true\n  untie_embeddings_and_output_weights: true\n",
}


def _texts() -> list[tuple[str, str]]:
    """(id, schedule text) of every combination Megatron accepts."""
    out = []
    for (opt, extra), tp, pp, cp, vpp, mbs, top in itertools.product(
            OPTIONS.items(), (1, 2), (1, 2, 4), (1, 2), (None, 1), (1, 4), ("", "nccl_init: eager\n")):
        if (vpp is not None and pp == 1) or (mbs > 1 and top):
            continue
        if opt == "fsdp2" and (pp > 1 or cp > 1):
            continue
        if (opt in ("sp_overlap", "selective", "experts") and tp == 1) or (opt == "experts" and cp > 1):
            continue
        body = (f"  tp: {tp}\n  pp: {pp}\n  cp: {cp}\n  micro_batch_size: {mbs}\n" + extra
                + (f"  num_layers_per_virtual_pipeline_stage: {vpp}\n" if vpp else ""))
        out.append((f"{opt}-tp{tp}-pp{pp}-cp{cp}-v{vpp}-b{mbs}{'-eager' if top else ''}",
                    HEAD.format(top=top) + body))
    return out


def _accepted(text: str) -> bool:
    try:
        spec = load_text(text)
    except SchedsimError:  # Megatron's validation refuses it (the loader's)
        return False
    assert spec.training is not None
    return refusal(spec.training, spec.world_size) is None


TEXTS = [(k, t) for k, t in _texts() if _accepted(t)]


def test_the_grid_covers_every_setting() -> None:
    """Each option set is tried at tp 2 with pipelines, and the parallel sizes in many combinations."""
    assert len(TEXTS) > 100
    for opt in OPTIONS:
        assert any(k.startswith(opt + "-tp2") for k, _t in TEXTS), opt


@pytest.mark.parametrize("symmetric", [False, True])
def test_every_training_lowering_sweeps_hang_free(symmetric: bool) -> None:
    """The full sweep's verdict (rules 1-7) is the unswept one on every lowering of the grid: no hang, no rule-7
    "may hang" case; the Program lowered with ``sweep=False`` is the same Program (every fourth)."""
    swept = 0
    for i, (key, text) in enumerate(TEXTS):
        spec = load_text(text)
        try:
            prog = lower(spec, check=False, symmetric=symmetric)
        except SchedsimError:  # the interleaved schedule's rules on m refuse it at lowering, as search counts it
            continue
        assert check_arrays(prog) == check_arrays(prog, generated=True), key
        assert not check_arrays(prog).fault, key
        swept += 1
        if i % 4:
            continue
        fast = lower(spec, symmetric=symmetric, warn=False, sweep=False)
        for k in ("tmpl", "rank", "seq", "name_id", "stream_id", "dep_idx", "coll_idx", "p2p"):
            np.testing.assert_array_equal(getattr(fast, k), getattr(prog, k), err_msg=f"{key} {k}")
    assert swept > 100


HEAD_OPS = """\
schema_version: 1
name: hang
world_size: 2
training: {num_layers: 2, hidden_size: 64, num_attention_heads: 8, seq_length: 32, micro_batch_size: 2,
           global_batch_size: 4, vocab_size: 1000, tp: 1, bf16: true}
ops:
"""
#: written ops beside the block that NCCL's rules refuse, and how the error begins
HANGS = {
    # both ranks send first to each other over one two-rank communicator (lone send/recv: rule 2)
    "send_first": ("""\
  - {name: s0, kind: send, peer: 1, bytes: 8, ranks: [0]}
  - {name: r0, kind: recv, peer: 1, bytes: 8, ranks: [0]}
  - {name: s1, kind: send, peer: 0, bytes: 8, ranks: [1]}
  - {name: r1, kind: recv, peer: 0, bytes: 8, ranks: [1]}
""", "ranks would wait on each other forever: r0@r0 cannot start before s0@r0 completes"),
    # two collectives of one group in opposite orders on its two ranks
    "collective_order": ("""\
  - {name: a, kind: all_reduce, bytes: 8, group: [0, 1], ranks: [0]}
  - {name: b, kind: all_reduce, bytes: 8, group: [0, 1], ranks: [0]}
  - {name: b, kind: all_reduce, bytes: 8, group: [0, 1], ranks: [1]}
  - {name: a, kind: all_reduce, bytes: 8, group: [0, 1], ranks: [1]}
""", "collectives on group [0, 1] are issued in a different order: rank 0 issues 'a' as its collective #0"),
}


@pytest.mark.parametrize("case", sorted(HANGS))
def test_written_ops_beside_the_block_keep_every_check(case: str) -> None:
    """The schedule writes ops of its own beside the block: ``sweep=False`` checks them as without it."""
    ops, start = HANGS[case]
    spec = load_text(HEAD_OPS + ops)
    with pytest.raises(SchedsimError) as want:
        lower(spec, warn=False)
    with pytest.raises(SchedsimError) as got:
        lower(spec, warn=False, sweep=False)
    assert (got.value.message, type(got.value)) == (want.value.message, type(want.value))
    assert got.value.message.startswith(start), got.value.message
