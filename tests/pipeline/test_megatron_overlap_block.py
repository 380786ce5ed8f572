"""A ``pipeline:`` block's interleaved 1F1B with lone p2p (``p2p: overlapped``, the default) is Megatron's
``overlap_p2p_comm`` schedule, the one a ``training:`` block lowers: the same issue order and the same waits
(Megatron-LM ``core/pipeline_parallel/schedules.py`` ``forward_backward_pipelining_with_interleaving``:
``req.wait()`` on every handle of the previous ``send_forward_recv_forward`` before a forward, of the previous
``send_backward_recv_backward`` before a backward; torch ``ProcessGroupNCCL``'s ``syncStreams`` makes each call's
NCCL stream wait for the compute issued before it). Both paths of the block (the per-op emitter and the columnar
one) write them.

The block: p 4, v 2, m 8, one op per phase. Rank 1 runs stages 1 and 5: its warmup is 2·(4 − 1 − 1) + (2 − 1)·4 = 8
forwards (F1.0-3, F5.0-3); its first steady step is F1.4, the call (recv_prev F1.5, send_next F1.4), B5.0, the call
(send_prev B5.0, recv_next B5.1). Rank 0 (stages 0 and 4) warms up 2·3 + 4 = 10 forwards, the last F0.5."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from schedsim.api import lower_spec
from schedsim.spec.loader import load_text

STAGE = {"forward": [{"name": "a", "kind": "compute", "duration_us": 1}],
         "backward_input": [{"name": "di", "kind": "compute", "duration_us": 1}],
         "backward_weight": [{"name": "dw", "kind": "compute", "duration_us": 1}]}


def _pipeline_ops(reference: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from schedsim.lower import pipeline as lp

    if reference:  # the per-op emitter (the columnar one's reference)
        monkeypatch.setattr(lp._FastEmitter, "prepare", classmethod(lambda cls, *a, **k: None))
    d = {"schema_version": 1, "name": "t", "world_size": 4,
         "pipeline": {"schedule": "interleaved_1f1b", "p": 4, "m": 8, "v": 2, "stage": STAGE,
                      "activation_bytes": 1024}}
    return {o.name: o for o in lower_spec(load_text(yaml.safe_dump(d))).ops()}


@pytest.mark.parametrize("reference", [False, True])
def test_a_recv_waits_for_the_compute_issued_before_it(reference: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """recv_prev after a forward starts after it, recv_next after a backward's last (weight) op, and rank 0's last
    warmup recv_next after its last warmup forward; rank 1's warmup recv_prev of F1.1 after F1.0."""
    ops = _pipeline_ops(reference, monkeypatch)
    assert ops["recvF1.5"].deps == ("F1.4.a",)
    assert ops["recvB5.1"].deps == ("B5.0.W.dw",)
    assert ops["recvB4.0"].deps == ("F0.5.a",)
    assert ops["recvF1.1"].deps == ("F1.0.a",)


@pytest.mark.parametrize("reference", [False, True])
def test_a_pass_waits_for_every_op_of_the_previous_call_of_its_direction(reference: bool,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _pipeline_ops(reference, monkeypatch)
    assert ops["F1.5.a"].deps == ("recvF1.5", "sendF1.4")
    assert ops["B5.1.I.di"].deps == ("recvB5.1", "sendB5.0")
    assert ops["F0.6.a"].deps == ("sendF0.5",)  # stage 0 has no input, but waits for the previous call's send
    assert ops["B4.0.I.di"].deps == ("recvB4.0",)  # the last warmup call: its recv_next alone
    assert ops["F1.1.a"].deps == ("recvF1.1", "sendF1.0")  # the warmup's calls are waited for alike


_PASS = re.compile(r"^([FB]\d+\.\d+)(\.[IW])?")


def _p2p_waits(ops: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Per p2p op its dependencies and per pass the p2p ops its first op waits for, each compute named by its pass
    (``F<stage>.<mb>``, ``B<stage>.<mb>.<I|W>``) so that two lowerings of different kernels compare."""
    def key(name: str) -> str:
        m = _PASS.match(name)
        return name if m is None else m.group(1) + (m.group(2) or "")

    out: dict[str, tuple[str, ...]] = {}
    for o in sorted(ops.values(), key=lambda o: (o.rank, o.seq)):
        if o.name.startswith(("send", "recv")):
            out[o.name] = tuple(key(d) for d in o.deps)
        elif _PASS.match(o.name) and key(o.name) not in out:  # a pass's first op
            out[key(o.name)] = tuple(d for d in o.deps if d.startswith(("send", "recv")))
    return out


def test_the_pipeline_block_waits_as_the_training_block_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same schedule (pp 4, one layer a chunk of 8 layers, 8 microbatches) as a ``training:`` block: every
    p2p op waits for the same pass, and every pass for the same p2p ops."""
    block = dict(num_layers=8, hidden_size=256, num_attention_heads=4, seq_length=128, vocab_size=1024, fp16=True,
                 micro_batch_size=1, global_batch_size=8, tp=1, pp=4, num_layers_per_virtual_pipeline_stage=1)
    training = {o.name: o for o in lower_spec(load_text(yaml.safe_dump(
        {"schema_version": 1, "name": "t", "world_size": 4, "training": block}))).ops()}
    want = _p2p_waits(training)
    got = _p2p_waits(_pipeline_ops(False, monkeypatch))
    assert len(want) > 100 and got == want
