"""An all_to_all with per-peer sizes runs on 3 CPU ranks (gloo) as ``all_to_all_single`` with split sizes: in
elements of the op's dtype where every size is a whole number of them, else in bytes."""

from __future__ import annotations

import pytest
from exec_helpers import DATA, torchrun

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")


def test_split_all_to_all_on_gloo(tmp_path) -> None:
    out = tmp_path / "run"
    r = torchrun(3, ["execute", str(DATA / "all_to_all_splits.yaml"), "--iters", "3", "--warmup", "1", "--timeout",
                     "60", "--no-gantt", "--out", str(out)])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    assert sorted(s.id for s in tl.spans) == ["x@r0", "x@r1", "x@r2", "y@r0", "y@r1", "y@r2"]
    notes = tl.meta["materialised"]
    # rank 0's (the notes are rank 0's): x's row 0 and column 0 in fp32 elements; y's 6 bytes are 1.5 fp32
    assert notes["x"] == "all_to_all async on gloo, split sizes in [0, 3, 100] out [0, 1000, 2000] (torch.float32)"
    assert notes["y"] == "all_to_all async on gloo, split sizes in [0, 12, 400] out [0, 6, 8] (bytes)"
