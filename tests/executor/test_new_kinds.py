"""A new communication kind is its registry entry alone in the executor too: toy collective, all_to_all-like and
send/recv kinds (``tests/spec/test_kind_registry.py``: ``TOY_COMM_KINDS``), registered in the ranks' process, run
on 2 CPU ranks (gloo) with the torch.distributed calls of the kinds whose entries they copy."""

from __future__ import annotations

import pytest


def test_toy_communication_kinds_run_as_the_kinds_they_copy_2_ranks(gloo2) -> None:
    for job in ("toy_comm_toy", "toy_comm_shipped"):
        r, base = gloo2[job]
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    toy = Timeline.read_json(base / "toy_comm_kinds" / "toy" / "timeline.json")
    shipped = Timeline.read_json(base / "toy_comm_kinds" / "shipped" / "timeline.json")
    names = {"all_reduce": "toy_allreduce", "all_to_all": "toy_exchange", "send": "toy_send", "recv": "toy_recv"}
    got = sorted((s.id, s.kind, s.rank, s.stream) for s in toy.spans)
    want = sorted((s.id, names.get(s.kind, s.kind), s.rank, s.stream) for s in shipped.spans)
    assert got == want and len(got) == 10
    by = toy.by_id()
    for a, b in (("s@r0", "v@r1"), ("s2@r1", "v2@r0"), ("r@r0", "r@r1")):
        assert by[a].start_s == pytest.approx(by[b].start_s)
    notes, shipped_notes = toy.meta["materialised"], shipped.meta["materialised"]
    assert notes["r"] == "toy_allreduce async on gloo" and notes["x"] == "toy_exchange async on gloo"
    assert notes["s"] == "toy_send async on gloo" and shipped_notes["s"] == "send async on gloo"
