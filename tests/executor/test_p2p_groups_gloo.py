"""execute issues every send/recv on the process group predict times it on (issue 36): a batch on its family's
communicator (or its written ``group:``), a lone send/recv on its written group, read back from torch
(``get_process_group_ranks``) on every rank and recorded in the run's ``meta["p2p_process_groups"]``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.executor.exec_helpers import torchrun_batch

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data"


def test_each_send_recv_runs_on_the_process_group_predict_timed(tmp_path):
    from schedsim.lower import lower
    from schedsim.lower.p2p_comms import p2p_groups
    from schedsim.spec.loader import load_schedule

    file = DATA / "p2p_groups4.yaml"
    out = tmp_path / "g4"
    job, = torchrun_batch(4, [["execute", str(file), "--backend", "gloo", "--device", "cpu", "--iters", "2",
                               "--warmup", "1", "--lean-iters", "0", "--timeout", "60", "--no-gantt", "--compare",
                               "--out", str(out)]])
    assert job.returncode == 0, job.stderr[-3000:]
    ran = json.loads((out / "timeline.json").read_text())["meta"]["p2p_process_groups"]
    # by hand (the file's comments): the two pipelines' families {0,1} and {2,3}, the written {1,2} and {0,1,3}
    want = {"a@r0": [0, 1], "a@r1": [0, 1], "c@r2": [2, 3], "c@r3": [2, 3], "x@r1": [1, 2], "x@r2": [1, 2],
            "l@r0": [0, 1, 3], "l@r3": [0, 1, 3]}
    assert ran == want
    _groups, timed = p2p_groups(lower(load_schedule(file)))  # what predict times them on
    assert {k: list(v) for k, v in timed.items()} == want
    assert (out / "compare" / "compare.json").exists()
