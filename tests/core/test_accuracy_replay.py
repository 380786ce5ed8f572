"""benchmarks/accuracy_replay.py on a synthetic measured case: a measurement that is the prediction itself,
timed the way execute's CUDA events time it, replays with zero error."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _replay_module():
    spec = importlib.util.spec_from_file_location("accuracy_replay", ROOT / "benchmarks" / "accuracy_replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_replay_of_an_event_timed_copy_of_the_prediction_has_no_error(tmp_path, monkeypatch):
    from schedsim.cli import _build, _load
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/allgather_mm.yaml"), ["chunks=2", "M=512", "K=512", "N=512"]
    pred = simulate(_build(_load(f, sets), f), load_profile("h200x2"))
    # what execute would record: each span from the moment its stream reached it (stream_s, rendezvous: latest)
    from schedsim.compare import op_window

    win = op_window(pred, stream_reached=True)
    meas = pred.__class__(schedule=pred.schedule, source="execute", world_size=pred.world_size, launch=pred.launch,
                          spans=[s._replace(start_s=win[s.id][0], ready_s=s.stream_s, stream_s=None, solo_s=None)
                                 for s in pred.spans],
                          meta={"file": str(f), "set": sets, "timing": "cuda_events",
                                "makespan_uninstrumented_s": pred.makespan_s})
    case = tmp_path / "run" / "ag2" / "execute"
    case.mkdir(parents=True)
    meas.write_json(case / "timeline.json")
    rows = [_replay_module().replay_case(case.parent, "h200x2")]
    assert rows[0]["error"] == pytest.approx(0.0, abs=1e-9)
    assert rows[0]["op_median"] == pytest.approx(0.0, abs=1e-9)
    assert rows[0]["pred_s"] == pytest.approx(pred.makespan_s)
    assert "| ag2 |" in _replay_module().table(rows)
