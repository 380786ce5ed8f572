"""sweep --jobs / --keep-timelines and the trace.json size policy of predict (in process, CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.cli import TRACE_MAX_OPS, app, trace_wanted
from schedsim.sim.timeline import Timeline

ROOT = Path(__file__).resolve().parents[2]
SCHED = str(ROOT / "schedules" / "allgather_mm.yaml")


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_sweep_jobs_equals_serial_and_keeps_timelines(tmp_path):
    serial = invoke("sweep", SCHED, "--set", "chunks=1,4", "--out", str(tmp_path / "s"), "--format", "json")
    par = invoke("sweep", SCHED, "--set", "chunks=1,4", "--out", str(tmp_path / "p"), "--format", "json",
                 "--jobs", "2", "--keep-timelines")
    assert serial.exit_code == 0 and par.exit_code == 0, serial.output + par.output
    a, b = json.loads(serial.output), json.loads(par.output)
    assert [r["setting"] for r in b] == [{"chunks": 1}, {"chunks": 4}]
    assert [{k: v for k, v in r.items() if k != "timeline"} for r in b] == a
    for r in b:
        tl = Timeline.read_json(tmp_path / "p" / r["timeline"])
        assert tl.makespan_s == r["makespan_s"] and tl.meta["set"] == [f"chunks={r['setting']['chunks']}"]
    assert not list((tmp_path / "s").glob("timeline_*.json"))


def test_sweep_jobs_names_the_failing_setting_and_writes_nothing(tmp_path):
    r = invoke("sweep", SCHED, "--set", "chunks=1,3,7", "--out", str(tmp_path), "--jobs", "2")
    assert r.exit_code == 2 and "chunks=3" in r.output
    assert not (tmp_path / "sweep.json").exists()


def test_trace_policy():
    assert trace_wanted(TRACE_MAX_OPS, None) == (True, None)
    write, note = trace_wanted(TRACE_MAX_OPS + 1, None)
    assert not write and "--trace" in note and f"{TRACE_MAX_OPS + 1:,} ops" in note
    assert trace_wanted(10 * TRACE_MAX_OPS, True) == (True, None) and trace_wanted(3, False) == (False, None)


@pytest.mark.parametrize("flag, present", [("--no-trace", False), ("--trace", True)])
def test_predict_trace_flag(tmp_path, flag, present):
    r = invoke("predict", SCHED, "--no-gantt", flag, "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "trace.json").exists() == present and (tmp_path / "timeline.json").exists()
