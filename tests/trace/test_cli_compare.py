"""CLI (import, analyze) and comparison of imported timelines with predictions."""

from __future__ import annotations

import json

import pytest
import typer
from conftest import KINETO_AR, KINETO_SR, NSYS_REAL, REPO, need
from kinetogen import kineto_doc, write_kineto
from typer.testing import CliRunner

from schedsim.sim.timeline import Span, Timeline
from schedsim.trace.commands import register, write_timeline_json

runner = CliRunner()


def _app() -> typer.Typer:
    """A bare app with only this package's commands (independent of other extensions' state)."""
    app = typer.Typer()

    @app.callback()
    def _cb() -> None:
        pass

    register(app)
    return app


def run(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(_app(), [str(a) for a in args])


class TestImportCommands:
    def test_import_nsys_writes_a_timeline(self, tmp_path):
        r = run("import", "nsys", need(NSYS_REAL), "--out", tmp_path)
        assert r.exit_code == 0, r.output
        assert "imported 20 spans (5 kernels, 15 memcpy" in r.output
        tl = Timeline.read_json(tmp_path / "timeline.json")
        assert tl.source == "import" and len(tl.spans) == 20
        doc = json.loads((tmp_path / "timeline.json").read_text())
        assert doc["metrics"]["ranks"]["0"]["busy_compute_s"] == pytest.approx(5 * 17.7147e-3, rel=1e-4)

    def test_import_kineto_json_format(self, tmp_path):
        r = run("import", "kineto", need(KINETO_SR), "--out", tmp_path, "--format", "json")
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        assert d["spans"] == 1204 and d["ranks"] == [0]

    def test_import_errors_exit_2(self, tmp_path):
        rep = tmp_path / "x.nsys-rep"
        rep.write_bytes(b"junk")
        r = run("import", "nsys", rep, "--out", tmp_path)
        assert r.exit_code == 2 and "error:" in r.output and "nsys export --type sqlite" in r.output
        bad = tmp_path / "bad.json.gz"
        bad.write_bytes(need(KINETO_AR).read_bytes()[:5000])
        r = run("import", "kineto", bad, "--out", tmp_path)
        assert r.exit_code == 2 and "truncated" in r.output and "Traceback" not in r.output
        assert not (tmp_path / "timeline.json").exists()

    def test_streamed_writer_round_trips(self, tmp_path):
        tl = Timeline("s", "import", 2, spans=[Span("a@r0", "a", 0, "7", "kernel", "compute", 0.0, 1e-3, tags={"x": 1}),
                                               Span("b@r1", "b", 1, "20", "all_reduce", "comm", 0.5e-3, 2e-3, bytes=8.0)],
                      critical_path=["a@r0"], meta={"k": [1, 2]})
        write_timeline_json(tl, tmp_path / "t.json", {"m": 1})
        back = Timeline.read_json(tmp_path / "t.json")
        assert back.spans == tl.spans and back.meta == tl.meta and back.critical_path == ["a@r0"]
        assert json.loads((tmp_path / "t.json").read_text()) == json.loads(json.dumps(tl.to_dict({"m": 1})))


class TestAnalyze:
    def test_analyze_nsys_prints_seed_tables_and_overlap(self, tmp_path):
        chrome = tmp_path / "trace.json"
        r = run("analyze", need(NSYS_REAL), "--chrome", chrome)
        assert r.exit_code == 0, r.output
        assert "   0.09 min:  17700.81 max:  17733.42 avg:  17714.70 saxpy_Stream 7" in r.output
        assert "-----------------------------Device 0-----------------------------" in r.output
        assert "overlap" in r.output and "critical path" in r.output
        ev = json.loads(chrome.read_text())["traceEvents"]
        assert sum(e["ph"] == "X" for e in ev) == 20

    def test_analyze_kineto_overlap_is_hta_definition(self):
        r = run("analyze", need(KINETO_AR), "--format", "json")
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        from schedsim.sim.metrics import intersect_length, length, merge
        from schedsim.trace.kineto import import_kineto

        tl = import_kineto(KINETO_AR).timeline
        comm = merge([(s.start_s, s.end_s) for s in tl.spans if s.resource == "comm"])
        comp = merge([(s.start_s, s.end_s) for s in tl.spans if s.resource == "compute"])
        assert d["metrics"]["overlap_ratio"] == pytest.approx(intersect_length(comm, comp) / length(comm))
        assert 0.0 < d["metrics"]["overlap_ratio"] < 1.0
        assert d["nccl_volume_elements"]["Device 0"]["nccl:all_reduce"] == 76671096
        top = d["kernel_share"]["Device 0"][0]
        assert top["name"] == "ncclKernel_AllReduce_RING_LL_Sum_float_Stream 40" and top["count"] == 15

    def test_analyze_timeline_json(self, tmp_path):
        run("import", "kineto", need(KINETO_AR), "--out", tmp_path)
        r = run("analyze", tmp_path / "timeline.json")
        assert r.exit_code == 0, r.output
        assert "-----------------------------Rank 0-----------------------------" in r.output
        assert "76671096.00 nccl:allreduce" in r.output  # from the NCCL kernels' In msg nelems tags

    def test_analyze_bad_inputs_exit_2(self, tmp_path):
        p = tmp_path / "notes.txt"
        p.write_text("hello")
        r = run("analyze", p)
        assert r.exit_code == 2 and "error:" in r.output
        r = run("analyze", tmp_path / "missing.sqlite")
        assert r.exit_code == 2 and "no such file" in r.output


def _pred_timeline(world: int = 2) -> Timeline:
    spans = []
    for r in range(world):
        spans.append(Span(f"mm0@r{r}", "mm0", r, "s0", "matmul", "compute", 0.0, 110e-6))
        spans.append(Span(f"ar0@r{r}", "ar0", r, "s1", "all_reduce", "comm", 110e-6, 150e-6))
    return Timeline("two_ops", "predict", world, profile="h200", spans=spans)


class TestCompare:
    def test_imported_kineto_compares_op_by_op(self, tmp_path):
        from schedsim import compare
        files = [write_kineto(tmp_path / f"r{r}.json.gz", kineto_doc(r)) for r in (0, 1)]
        pred = _pred_timeline()
        pred.write_json(tmp_path / "pred.json")
        r = run("import", "kineto", *files, "--out", tmp_path / "imp", "--ops", tmp_path / "pred.json")
        assert r.exit_code == 0, r.output
        meas = Timeline.read_json(tmp_path / "imp" / "timeline.json")
        res = compare.compare_timelines(pred, meas)
        assert res.match.mode == "id" and res.match.matched == 4
        rows = {row.id: row for row in res.ops.per_op}
        assert rows["mm0@r0"].meas_dur_s == pytest.approx(100e-6, rel=1e-9)
        assert rows["mm0@r0"].error == pytest.approx(0.1, rel=1e-6)
        assert rows["ar0@r1"].error == pytest.approx(40 / 50 - 1, rel=1e-6)

    def test_real_trace_compares_by_kind(self):
        from schedsim import compare
        from schedsim.trace.kineto import import_kineto

        meas = import_kineto(need(KINETO_AR)).timeline
        res = compare.compare_timelines(_pred_timeline(1), meas)
        assert res.match.mode == "kind"
        assert res.by_rank[0].comm.meas_s > 0 and res.by_rank[0].compute.meas_s > 0


EXECUTOR_KINETO = REPO / "tests" / "data" / "kineto_execute_offload_h200_rank0.json.gz"
EXECUTOR_PRED = REPO / "tests" / "data" / "kineto_execute_offload_h200_predicted_timeline.json"


def test_executor_h200_run_compares_op_by_op():
    """`execute --profiler` of offload.yaml on one H200 (2026-11-29) against its prediction: ops match by id."""
    from schedsim import compare
    from schedsim.trace.common import load_op_names
    from schedsim.trace.kineto import import_kineto

    p = Timeline.read_json(EXECUTOR_PRED)
    meas = import_kineto(EXECUTOR_KINETO, ops=load_op_names(EXECUTOR_PRED)).timeline
    rank0 = [s.id for s in p.spans if s.rank == 0]
    got = meas.by_id()
    assert sum(i in got for i in rank0) >= 0.9 * len(rank0)
    res = compare.compare_timelines(Timeline(p.schedule, p.source, 1, spans=[s for s in p.spans if s.rank == 0]), meas)
    assert res.match.mode == "id"


class TestThroughTheSchedsimCli:
    """The same commands through ``schedsim.cli.app`` (with every registered extension)."""

    def test_import_analyze_compare_end_to_end(self, tmp_path):
        from schedsim.cli import app

        files = [write_kineto(tmp_path / f"r{r}.json", kineto_doc(r)) for r in (0, 1)]
        pred = _pred_timeline()
        pred.write_json(tmp_path / "pred.json")
        r = runner.invoke(app, ["import", "kineto", *map(str, files), "--out", str(tmp_path / "imp"),
                                "--ops", str(tmp_path / "pred.json")])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["analyze", str(tmp_path / "imp" / "timeline.json")])
        assert r.exit_code == 0, r.output
        assert "-----------------------------Rank 1-----------------------------" in r.output
        r = runner.invoke(app, ["compare", str(tmp_path / "pred.json"), str(tmp_path / "imp"), "--out",
                                str(tmp_path / "cmp"), "--format", "json", "--no-gantt"])
        assert r.exit_code == 0, r.output
        d = json.loads(r.output)
        assert d["match"]["mode"] == "id" and d["match"]["matched"] == 4

    def test_real_traces_import_analyze_and_compare(self, tmp_path):
        from schedsim.cli import app

        pred = _pred_timeline(1)
        pred.write_json(tmp_path / "pred.json")
        for f in (need(NSYS_REAL), need(KINETO_AR), need(KINETO_SR)):
            kind = "nsys" if f.suffix == ".sqlite" else "kineto"
            out = tmp_path / f.name.split(".")[0]
            r = runner.invoke(app, ["import", kind, str(f), "--out", str(out)])
            assert r.exit_code == 0, r.output
            r = runner.invoke(app, ["analyze", str(f)])
            assert r.exit_code == 0 and "## critical path" in r.output, r.output
            r = runner.invoke(app, ["compare", str(tmp_path / "pred.json"), str(out), "--out", str(out / "cmp"),
                                    "--format", "json", "--no-gantt"])
            assert r.exit_code == 0, r.output
            assert json.loads(r.output)["match"]["mode"] == "kind"
