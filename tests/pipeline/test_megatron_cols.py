"""The vectorised Megatron interleaved 1F1B order (:func:`megatron_interleaved_cols`) against the step-by-step
generator (:func:`megatron_interleaved_batched`), action by action, on a grid of (p, m, v, group_size)."""

from __future__ import annotations

import numpy as np
import pytest

from schedsim.lower.pipeline_steps import _megatron_p2p_ops_order
from schedsim.pipeline.actions import ComputationType as CT
from schedsim.pipeline.comms import megatron_interleaved_batched, megatron_interleaved_cols

CODE = {CT.F: 0, CT.B: 2, CT.SEND_F: 4, CT.RECV_F: 5, CT.SEND_B: 6, CT.RECV_B: 7}


def flattened(p: int, m: int, v: int, g: int | None, p2p_ops: bool) -> np.ndarray:
    """The generator's lists as rows (rank, type code, stage, microbatch, index of the entry in the list)."""
    rows = []
    for r, seq in megatron_interleaved_batched(p, m, v, g, overlap=p2p_ops).items():
        for i, x in enumerate(seq):
            acts = (_megatron_p2p_ops_order(x, r) if p2p_ops else x) if isinstance(x, list) else [x]
            rows.extend((r, CODE[a.type], a.stage, a.microbatch, i) for a in acts)
    return np.array(rows, np.int64).reshape(-1, 5)


def grid():
    for p in range(2, 5):
        for v in (2, 3, 4):
            for m in range(p, 2 * p + 3):
                for g in sorted({p, p + 1, m} & set(range(p, m + 1))):
                    if not 0 < m % g < p:  # Megatron's rule: the last group is empty or at least p long
                        yield p, m, v, g
    for p, m, v in ((3, 1, 2), (4, 2, 3), (4, 3, 2), (1, 3, 2)):  # m < p: every step warmup (no check here)
        yield p, m, v, p


@pytest.mark.parametrize("p2p_ops", [False, True])
def test_columns_equal_the_generator(p2p_ops):
    n = 0
    for p, m, v, g in grid():
        got = np.stack(megatron_interleaved_cols(p, m, v, g, p2p_ops_order=p2p_ops), axis=1)
        want = flattened(p, m, v, g, p2p_ops)
        assert got.shape == want.shape and (got == want).all(), (p, m, v, g)
        n += 1
    assert n > 50


def test_hand_counted_rank_of_a_small_pipeline():
    """p=2, m=2, v=2: rank 1 runs stages 1 and 3 (the last), 2 microbatches each: 4 F and 4 B; it receives the
    4 activations of stages 0 and 2 and sends the 4 input gradients back to them; it sends only stage 1's 2
    activations and receives only stage 1's 2 gradients (stage 3 has no next). Its list opens with the first
    recv_forward (entry 0), then F (entry 1)."""
    rank, typ, stage, mb, call = megatron_interleaved_cols(2, 2, 2)
    r1 = rank == 1
    counts = {c: int((typ[r1] == c).sum()) for c in (0, 2, 4, 5, 6, 7)}
    assert counts == {0: 4, 2: 4, 4: 2, 5: 4, 6: 4, 7: 2}
    assert (typ[r1][:2] == [5, 0]).all() and call[r1][0] == 0 and call[r1][1] == 1  # recv_forward, then F


def test_compute_columns_equal_the_generator():
    """interleaved_1f1b_cols is interleaved_1f1b's order, action by action, and raises its errors."""
    from schedsim.pipeline.schedules_1f1b import interleaved_1f1b, interleaved_1f1b_cols

    for p, m, v, g in grid():
        if m < p:
            continue
        want = np.array([(r, CODE[a.type], a.stage, a.microbatch) for r, acts in interleaved_1f1b(p, m, v,
                         group_size=g).items() for a in acts], np.int64)
        got = np.stack(interleaved_1f1b_cols(p, m, v, group_size=g), axis=1)
        assert got.shape == want.shape and (got == want).all(), (p, m, v, g)
    for bad in ((4, 3, 2, None), (4, 9, 2, 6), (4, 8, 1, None)):  # m < p; 0 < m mod g < p; v < 2
        with pytest.raises(ValueError) as want_err:
            interleaved_1f1b(*bad[:3], group_size=bad[3])
        with pytest.raises(type(want_err.value), match=str(want_err.value)[:40].replace("(", r"\(")):
            interleaved_1f1b_cols(*bad[:3], group_size=bad[3])
