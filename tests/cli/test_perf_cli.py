"""sweep --jobs / --keep-timelines and the trace.json size policy of predict (in process, CliRunner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedsim.api import TRACE_MAX_OPS, trace_wanted
from schedsim.cli import app
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
    a, b = json.loads(serial.stdout), json.loads(par.stdout)  # warnings go to stderr
    assert [r["setting"] for r in b] == [{"chunks": 1}, {"chunks": 4}]
    assert [{k: v for k, v in r.items() if k != "timeline"} for r in b] == a
    for r in b:
        tl = Timeline.read_json(tmp_path / "p" / r["timeline"])
        assert tl.makespan_s == r["makespan_s"] and tl.meta["set"] == [f"chunks={r['setting']['chunks']}"]
    assert not list((tmp_path / "s").glob("timeline_*.json"))


def test_sweep_points_are_predicts_with_the_schedules_env_and_warnings(tmp_path):
    """Each point is simulated as predict simulates it: the schedule's ``env`` NCCL_ALGO / NCCL_PROTO (ring/Simple
    here, not what NCCL would choose on dgx_h100; sweep used to drop it) and predict's warnings, a warning
    that every point gives said once (the "may hang" of a lone send issued before an all_reduce)."""
    from schedsim import api

    sched = tmp_path / "env.yaml"
    text = ("schema_version: 1\nname: env\nworld_size: 2\nparams: {b: 1048576}\n"
            "env: {NCCL_ALGO: ring, NCCL_PROTO: Simple}\nops:\n"
            "  - {name: snd, kind: send, peer: 1, bytes: 8, stream: a, ranks: [0]}\n"
            "  - {name: ar, kind: all_reduce, bytes: b, stream: c}\n"
            "  - {name: rcv, kind: recv, peer: 0, bytes: 8, stream: a, ranks: [1]}\n")
    sched.write_text(text)
    r = invoke("sweep", str(sched), "-p", "dgx_h100", "--set", "b=65536,1048576", "-o", str(tmp_path / "s"),
               "--format", "json", "--jobs", "2")
    assert r.exit_code == 0, r.output
    got = [row["makespan_s"] for row in json.loads(r.stdout)]
    want = [api.predict(api.load(sched, b=b), "dgx_h100").metrics.makespan_s for b in (65536, 1048576)]
    assert got == want
    no_env = [api.predict(api.load_text(text.replace("env: {NCCL_ALGO: ring, NCCL_PROTO: Simple}\n", ""), b=b),
                          "dgx_h100").metrics.makespan_s for b in (65536, 1048576)]
    assert all(g != n for g, n in zip(got, no_env, strict=True))  # the env decides the algorithm and protocol
    assert r.stderr.count("warning: may hang: with an eagerly initialised process group") == 1


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


def test_predict_svg_follows_the_trace_rule(tmp_path, monkeypatch):
    """gantt.svg is written up to TRACE_MAX_OPS ops, as trace.json; past it only with --svg (the note says so),
    and --no-svg leaves it out of a small run. The PNG is the same bytes with or without the SVG beside it."""
    import schedsim.outdir

    def files(d: Path) -> list[str]:
        return sorted(p.name for p in d.iterdir() if not p.name.startswith("."))

    r = invoke("predict", SCHED, "--out", str(tmp_path / "small"))
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "small") == ["gantt.png", "gantt.svg", "memory.png", "timeline.json", "trace.json"]
    r = invoke("predict", SCHED, "--no-svg", "--out", str(tmp_path / "nosvg"))
    assert r.exit_code == 0 and "gantt.svg skipped" not in r.stderr, r.output
    assert files(tmp_path / "nosvg") == ["gantt.png", "memory.png", "timeline.json", "trace.json"]
    n_ops = len(Timeline.read_json(tmp_path / "small" / "timeline.json"))
    monkeypatch.setattr(schedsim.outdir, "TRACE_MAX_OPS", n_ops - 1)  # this run is now "large"
    r = invoke("predict", SCHED, "--out", str(tmp_path / "large"))
    assert r.exit_code == 0, r.output
    assert files(tmp_path / "large") == ["gantt.png", "memory.png", "timeline.json"]  # trace.json: the same rule
    assert (f"note: gantt.svg skipped ({n_ops:,} ops > {n_ops - 1:,}); pass --svg to write it (gantt.png has the "
            "same chart)") in r.stderr
    assert (tmp_path / "large" / "gantt.png").read_bytes() == (tmp_path / "small" / "gantt.png").read_bytes()
    r = invoke("predict", SCHED, "--svg", "--out", str(tmp_path / "large"))  # the same folder: the SVG added
    assert r.exit_code == 0 and "gantt.svg skipped" not in r.stderr, r.output
    assert files(tmp_path / "large") == ["gantt.png", "gantt.svg", "memory.png", "timeline.json"]
    assert (tmp_path / "large" / "gantt.svg").read_bytes() == (tmp_path / "small" / "gantt.svg").read_bytes()
    r = invoke("predict", SCHED, "--no-gantt", "--out", str(tmp_path / "nocharts"))  # no chart, no note about one
    assert r.exit_code == 0 and "gantt.svg" not in r.stderr, r.output


def test_compare_and_analyze_read_both_layouts(tmp_path):
    from schedsim.sim.timeline import Span

    spans = [Span("a@r0", "a", 0, "s0", "matmul", "compute", 0.0, 2e-3, 2e-3, 0.0),
             Span("b@r0", "b", 0, "comm", "all_reduce", "comm", 1e-3, 3e-3, 2e-3, 1e-3, 8.0)]
    pred = Timeline("t", "predict", 1, spans=spans, critical_path=["a@r0", "b@r0"])
    meas = Timeline("t", "execute", 1, spans=[s._replace(end_s=s.end_s * 1.1) for s in spans])
    pred.write_json(tmp_path / "pred_rows.json", layout="rows")
    pred.write_json(tmp_path / "pred_cols.json")
    meas.write_json(tmp_path / "meas.json")
    outs = []
    for name in ("pred_rows.json", "pred_cols.json"):
        a = invoke("analyze", str(tmp_path / name), "--format", "json")
        c = invoke("compare", str(tmp_path / name), str(tmp_path / "meas.json"), "--out", str(tmp_path / name[:-5]),
                   "--format", "json")
        assert a.exit_code == 0 and c.exit_code == 0, a.output + c.output
        outs.append((json.loads(a.output), json.loads(c.output)))
    for d in (outs[0][1], outs[1][1]):  # the output folders differ by name
        d.pop("files", None)
    assert outs[0] == outs[1]
    assert outs[0][1]["makespan"]["pred_s"] == 3e-3 and outs[0][1]["match"]["matched"] == 2
