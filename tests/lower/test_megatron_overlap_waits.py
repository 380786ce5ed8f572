"""Megatron's interleaved 1F1B with ``overlap_p2p_comm`` in a ``training:`` block: the issue order of its
``if config.overlap_p2p_comm`` branch and what each op waits for (Megatron-LM ``core/pipeline_parallel/
schedules.py`` ``forward_backward_pipelining_with_interleaving``, the same in the Zero Bubble fork at 425b42e;
torch ``ProcessGroupNCCL``'s ``syncStreams`` before every NCCL call).

The block: 8 layers of hidden 256 on pp 4 with one layer a chunk (v = 2), 8 microbatches. Rank 1 runs stages 1 and 5;
its warmup is 2·(4 − 1 − 1) + (2 − 1)·4 = 8 forwards (F1.0-3, F5.0-3), so its first steady step is the forward of
stage 1, microbatch 4, then the backward of stage 5, microbatch 0. Rank 0 runs stages 0 and 4: 2·3 + 4 = 10 warmup
forwards, the last F0.5."""

from __future__ import annotations

import yaml

from schedsim.api import lower_spec
from schedsim.pipeline.actions import ComputationType as CT
from schedsim.pipeline.comms import megatron_interleaved_batched
from schedsim.spec.loader import load_text

BLOCK = dict(num_layers=8, hidden_size=256, num_attention_heads=4, seq_length=128, vocab_size=1024, fp16=True,
             micro_batch_size=1, global_batch_size=8, tp=1, pp=4, num_layers_per_virtual_pipeline_stage=1)


def _ops() -> dict[str, object]:
    prog = lower_spec(load_text(yaml.safe_dump({"schema_version": 1, "name": "t", "world_size": 4,
                                                "training": BLOCK})))
    return {o.name: o for o in prog.ops()}


def test_a_steady_step_issues_the_forwards_call_before_the_backward() -> None:
    """Rank 1's first steady step: F(stage 1, mb 4); send_forward_recv_forward (odd rank: recv_prev first);
    B(stage 5, mb 0); send_backward_recv_backward (recv_next first). Without ``overlap`` the four ops are one
    call after the backward."""
    seq = megatron_interleaved_batched(4, 8, 2, overlap=True)[1]
    at = seq.index(next(x for x in seq if not isinstance(x, list) and x.type is CT.B))
    got = [[(a.type.name, a.stage, a.microbatch) for a in x] if isinstance(x, list) else (x.type.name, x.stage,
                                                                                          x.microbatch)
           for x in seq[at - 2:at + 2]]
    assert got == [("F", 1, 4), [("RECV_F", 1, 5), ("SEND_F", 1, 4)], ("B", 5, 0),
                   [("SEND_B", 5, 0), ("RECV_B", 5, 1)]]
    old = megatron_interleaved_batched(4, 8, 2)[1]
    at = old.index(next(x for x in old if not isinstance(x, list) and x.type is CT.B))
    assert [x.type.name if not isinstance(x, list) else len(x) for x in old[at - 1:at + 2]] == ["F", "B", 4]


def test_program_order_follows_it() -> None:
    ops = _ops()
    seq = [ops[n].seq for n in ("F1.4.l0.ln1", "recvF1.5", "sendF1.4", "B5.0.I.l0.dropout2_bwd", "recvB5.1",
                                "sendB5.0", "F1.5.l0.ln1")]
    assert seq == sorted(seq)


def test_a_recv_waits_for_the_compute_issued_before_it() -> None:
    """torch's ProcessGroupNCCL makes the NCCL stream wait for the current stream at every call: the recv_prev
    posted after a forward starts after that forward's last kernel, the recv_next after a backward after the
    backward's last (weight-gradient) kernel, and rank 0's last warmup recv_next after its last warmup forward."""
    ops = _ops()
    assert ops["recvF1.5"].deps == ("F1.4.l0.bias_dropout_add2",)
    assert ops["recvB5.1"].deps == ("B5.0.W.l0.qkv_bias_grad",)
    assert ops["recvB4.0"].deps == ("F0.5.l0.bias_dropout_add2",)


def test_a_pass_waits_for_every_op_of_the_previous_call_of_its_direction() -> None:
    """``req.wait()`` on every handle of ``fwd_wait_handles`` (the send too) before the next forward, of
    ``bwd_wait_handles`` before the next backward; rank 0's forward of stage 0 has no input but still waits for
    the previous call's send."""
    ops = _ops()
    assert ops["F1.5.l0.ln1"].deps == ("recvF1.5", "sendF1.4")
    assert ops["B5.1.I.l0.dropout2_bwd"].deps == ("recvB5.1", "sendB5.0")
    assert ops["F0.6.embedding"].deps == ("sendF0.5",)
    assert ops["B4.0.I.l0.dropout2_bwd"].deps == ("recvB4.0",)  # the last warmup call: its recv_next alone


def test_the_overlapped_order_keeps_the_compute_order_and_pairs_every_message() -> None:
    """Only where the calls sit changes: the computes are the batched order's, and between every two ranks the
    k-th send meets the k-th recv (NCCL pairs them by issue order) with the same message."""
    for p, v, m, g in ((3, 2, 6, None), (4, 2, 8, None), (4, 3, 8, None), (3, 2, 7, 4), (4, 2, 10, 5), (2, 2, 4, None)):
        over, batched = megatron_interleaved_batched(p, m, v, g, overlap=True), megatron_interleaved_batched(p, m, v, g)
        sends: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        recvs: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        for r in range(p):
            assert [a for a in over[r] if not isinstance(a, list)] == [a for a in batched[r] if not isinstance(a, list)]
            assert sorted(a for x in over[r] if isinstance(x, list) for a in x) == sorted(
                a for x in batched[r] if isinstance(x, list) for a in x)
            for a in (a for x in over[r] if isinstance(x, list) for a in x):
                if a.type is CT.SEND_F:
                    sends.setdefault((r, (r + 1) % p), []).append(("F", a.stage + 1, a.microbatch))
                elif a.type is CT.SEND_B:
                    sends.setdefault((r, (r - 1) % p), []).append(("B", a.stage - 1, a.microbatch))
                elif a.type is CT.RECV_F:
                    recvs.setdefault(((r - 1) % p, r), []).append(("F", a.stage, a.microbatch))
                else:
                    recvs.setdefault(((r + 1) % p, r), []).append(("B", a.stage, a.microbatch))
        assert sends == recvs, (p, v, m, g)
