"""``kind: synchronize`` runs on 2 CPU ranks (gloo): each rank's issue waits for the work its scope names (the
device's all-reduce before ``mm1``), ``--compare`` puts the prediction beside it, and both timelines hold the host
waits' spans (``meta.host_waits``) or their order."""

from __future__ import annotations

import json

import pytest
from exec_helpers import DATA, torchrun

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


def test_synchronize_executes_and_compares_on_gloo(tmp_path) -> None:
    out = tmp_path / "run"
    r = torchrun(2, ["execute", str(DATA / "synchronize_scopes.yaml"), "--iters", "3", "--warmup", "1", "--timeout",
                     "60", "--no-gantt", "--compare", "--out", str(out)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    span = {s.id: s for s in tl.spans}
    for rank in (0, 1):  # scope device: mm1's call waited for the all-reduce (async on gloo) to end
        assert span[f"mm1@r{rank}"].start_s >= span[f"ar0@r{rank}"].end_s
    pred = Timeline.read_json(out / "predicted" / "timeline.json")
    waits = pred.meta["host_waits"]
    assert sorted(waits["op"]) == ["ar1@r1", "mm1@r0", "mm1@r1", "mm2@r0", "mm2@r1"]
    assert all(b >= a for a, b in zip(waits["from_s"], waits["to_s"], strict=True))
    assert json.loads((out / "compare" / "compare.json").read_text())
