"""Accepted schedules with multi-op p2p batches run to the end on CPU ranks (gloo) in the order check validated."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name,ops", [("batched_interleaved_p3", 3 * 2 * 3 * 3 + 2 * 2 * 5 * 3),  # F I W + 60 p2p
                                      ("ring_batch_one_stream", 3 * 8)])
def test_accepted_batched_schedule_runs_on_gloo(gloo3, name, ops):
    """issue 9 §1's batched interleaved 1F1B (steady-state batches of 2 sends + 2 recvs) and a 4-op batch on one
    stream with a lone send written between its members: both pass check, and execute ends without a timeout,
    every op measured."""
    from schedsim.sim.timeline import Timeline

    r, base = gloo3[name]  # run in the shared 3-rank launch (tests/conftest.py): --backend gloo --device cpu
    out = base / name
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(Timeline.read_json(out / "timeline.json").spans) == ops
