"""The critical path of a real run (issue 37, item 4): on the replay of an imported schedule and on the imported
timeline itself, with host, GPU and communication segments summing to the makespan; hand-computed on
``replaygen.path_docs`` (times derived there), and summed on the shipped real traces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from replaygen import path_docs, write

from schedsim import api
from schedsim.hardware.profile import load_profile
from schedsim.sim.metrics import Metrics, critical_path_host, critical_path_segments
from schedsim.sim.timeline import Timeline
from schedsim.trace.kineto import import_kineto
from schedsim.trace.to_schedule import apply_recorded_path, write_replay_schedule
from tests.conftest import ROOT

US = 1e-6
SHARED = ROOT.parent.parent / "shared" / "data" / "traces"
REAL = [ROOT / "tests" / "data" / "kineto_execute_offload_h200_rank0.json.gz", *sorted(SHARED.glob("kineto_*.json.gz")),
        *sorted(SHARED.glob("nsys_*.sqlite"))]


def _segments(tl: Timeline) -> list[tuple[str, float, float, str]]:
    return [(s.kind, round(s.start_s / US, 6), round(s.end_s / US, 6), s.op) for s in critical_path_segments(tl)]


def _import(tmp_path: Path, docs: list[dict[str, Any]]) -> tuple[Any, Path]:
    files = [write(tmp_path / f"r{i}.json", d) for i, d in enumerate(docs)]
    res = import_kineto(files, keep_runtime=True, keep_kernel_rows=False)
    got = write_replay_schedule(res.replay, tmp_path / "schedule.yaml", name="cp")
    apply_recorded_path(res.timeline, got.path)
    return res.timeline, tmp_path / "schedule.yaml"


def test_replay_path_runs_host_gpu_collective_sync_host(tmp_path: Path) -> None:
    # replay times from the earliest issue (1005): rank 1 issues p 0, q 30, x 50, y 60, AR 70; rank 0 a 0, AR 10.
    # x waits for its launch (50) and its recorded launch latency (1 µs, tag gpu_gap_us: a wait_sms segment, as
    # in the imported timeline's path below), runs 51-251, y 251-275; rank 1 reaches the all-reduce last (275;
    # rank 0 at 101), which runs 20 µs (the shorter recorded kernel) to 295. Both hosts wait in
    # cudaDeviceSynchronize until 295, then e is issued 10 µs later (1310 - 1300 recorded) and starts 1 µs after:
    # 306-326, the last end.
    _tl, sched = _import(tmp_path, path_docs())
    tl = api.simulate_spec(api.load(sched), load_profile("h200"), gpu_model="replay").timeline
    assert tl.makespan_s == pytest.approx(326 * US)
    assert tl.critical_path == ["k2@r1", "k3@r1", "all_reduce_pg0_0@r1", "k2@r0"]
    assert tl.meta["critical_path_host_waits"] == ["k2@r0"]
    assert _segments(tl) == [("host_issue", 0.0, 30.0, "k1@r1"), ("host_issue", 30.0, 50.0, "k2@r1"),
                             ("wait_sms", 50.0, 51.0, "k2@r1"), ("compute", 51.0, 251.0, "k2@r1"),
                             ("compute", 251.0, 275.0, "k3@r1"), ("comm", 275.0, 295.0, "all_reduce_pg0_0@r1"),
                             ("host_issue", 295.0, 305.0, "k2@r0"), ("wait_sms", 305.0, 306.0, "k2@r0"),
                             ("compute", 306.0, 326.0, "k2@r0")]
    assert critical_path_host(tl) == ["k1@r1"]  # the host's call before the path's first op
    m = Metrics.of(tl)
    assert m.critical_path_s == pytest.approx({"compute": 244 * US, "comm": 20 * US, "host_issue": 60 * US,
                                               "wait_sms": 2 * US})


def test_imported_timeline_path_from_recorded_times(tmp_path: Path) -> None:
    # timeline times from the first kernel start (1006). e (ends 325) was launched at 1310 (= 304), after its host
    # waited in the sync for rank 0's all-reduce, whose last member is rank 1's (ready at y's end 1280 = 274; rank
    # 0's at a's end 100); rank 1's all-reduce follows y, y follows x, and x waited for its launch (1055 = 49),
    # cut into the host's calls: q's (1035 = 29) then x's own. Launch delays: x 1 µs, e 1 µs.
    tl, _ = _import(tmp_path, path_docs())
    k = "{}#0@r{}"
    ar = "ncclKernel_AllReduce_RING_LL_Sum_float#0@r1"
    assert tl.critical_path == [k.format("x", 1), k.format("y", 1), ar, k.format("e", 0)]
    assert tl.meta["critical_path_host_waits"] == [k.format("e", 0)]
    assert _segments(tl) == [("host_issue", 0.0, 29.0, k.format("q", 1)), ("host_issue", 29.0, 49.0, k.format("x", 1)),
                             ("wait_sms", 49.0, 50.0, k.format("x", 1)), ("compute", 50.0, 250.0, k.format("x", 1)),
                             ("compute", 250.0, 274.0, k.format("y", 1)), ("comm", 274.0, 294.0, ar),
                             ("host_issue", 294.0, 304.0, k.format("e", 0)),
                             ("wait_sms", 304.0, 305.0, k.format("e", 0)), ("compute", 305.0, 325.0, k.format("e", 0))]
    m = Metrics.of(tl)
    assert m.makespan_s == pytest.approx(325 * US)
    assert m.critical_path_s == pytest.approx({"compute": 244 * US, "comm": 20 * US, "host_issue": 59 * US,
                                               "wait_sms": 2 * US})


def test_analyze_of_an_import_prints_the_path(tmp_path: Path) -> None:
    # schedsim import writes the recorded path into timeline.json; analyze reads it back (the host calls in one
    # segment each wait: timeline.json keeps no host call ends), with the same sums
    files = [str(write(tmp_path / f"r{i}.json", d)) for i, d in enumerate(path_docs())]
    out = tmp_path / "imp"
    cli = [sys.executable, "-m", "schedsim"]
    subprocess.run([*cli, "import", "kineto", *files, "--out", str(out)], check=True, capture_output=True)
    tl = Timeline.read_json(out / "timeline.json")
    assert tl.meta["critical_path_host_waits"] == ["e#0@r0"]
    assert [x[:3] for x in _segments(tl)] == [
        ("host_issue", 0.0, 49.0), ("wait_sms", 49.0, 50.0), ("compute", 50.0, 250.0), ("compute", 250.0, 274.0),
        ("comm", 274.0, 294.0), ("host_issue", 294.0, 304.0), ("wait_sms", 304.0, 305.0), ("compute", 305.0, 325.0)]
    r = subprocess.run([*cli, "analyze", str(out / "timeline.json")], check=True, capture_output=True, text=True)
    assert "## critical path (walked back along the recorded dependencies: launches, stream order" in r.stdout
    assert "4 ops: compute 244.0 µs, comm 20.0 µs, host issue 59.0 µs, waiting for SMs 2.0 µs; sum 325.0 µs = " \
           "makespan" in r.stdout


@pytest.mark.parametrize("trace", REAL, ids=lambda p: p.name)
def test_real_traces_path_segments_sum_to_the_makespan(tmp_path: Path, trace: Path) -> None:
    if not trace.exists():
        pytest.skip(f"{trace} not here")
    if trace.suffix == ".sqlite":
        from schedsim.trace.nsys import import_nsys

        res = import_nsys([trace], keep_runtime=True, keep_kernel_rows=False)
    else:
        res = import_kineto([trace], keep_runtime=True, keep_kernel_rows=False)
    got = write_replay_schedule(res.replay, tmp_path / "schedule.yaml", name="real")
    assert got.path is not None
    tl = res.timeline
    apply_recorded_path(tl, got.path)
    rep = api.simulate_spec(api.load(tmp_path / "schedule.yaml"), load_profile("h200"), gpu_model="replay").timeline
    for t in (tl, rep):
        segs = critical_path_segments(t)
        assert segs[0].start_s == pytest.approx(min(0.0, float(t.columns.start_s.min())))
        assert all(a.end_s == b.start_s for a, b in zip(segs[:-1], segs[1:], strict=True))  # contiguous
        assert sum(s.end_s - s.start_s for s in segs) == pytest.approx(t.makespan_s, rel=1e-9)
        assert sum(Metrics.of(t).critical_path_s.values()) == pytest.approx(t.makespan_s, rel=1e-9)
        assert {s.kind for s in segs} & {"compute", "comm", "copy"}
        assert "gap" not in {s.kind for s in segs}  # every wait is named


class TestWhatIfInput:
    """Bad ``--what-if`` input for the replay: one ``error:`` line naming the schedule and the option, a fix, exit 2."""

    @pytest.fixture
    def sched(self, tmp_path: Path) -> Path:
        _tl, sched = _import(tmp_path, path_docs())
        return sched

    @pytest.mark.parametrize(("what", "says"), [
        ("foo=3", "unknown what-if key 'foo'; the keys are max_connections (or CUDA_DEVICE_MAX_CONNECTIONS) and "
                  "host_gaps"),
        ("host_gaps=-1", "host_gaps must be a factor >= 0"),
        ("nomatch*2", "no op with a recorded duration matches 'nomatch'"),
        ("*cutlass*gemm**0.5", "no op with a recorded duration matches '*cutlass*gemm*'"),
        ("nccl", "not PATTERN*FACTOR, max_connections=N or host_gaps=F"),
    ])
    def test_refused_with_file_field_and_fix(self, sched: Path, what: str, says: str) -> None:
        from test_cli_compare import run

        r = run("replay", str(sched), "--what-if", what)
        assert r.exit_code == 2, r.output
        first, fix = r.output.strip().splitlines()[:2]
        assert first.startswith(f"error: {sched}: --what-if: ") and says in first
        assert fix.startswith("  fix: ") and "Traceback" not in r.output

    def test_host_gaps_key_drops_the_host_gaps(self, sched: Path) -> None:
        # host gaps 0: every op issued at 0, so each rank's ops run on the GPU one after the other, each its
        # recorded launch latency (gpu_gap_us: p, q, x, a, z, e 1 µs) after it was ready: rank 1 p 1-5, q 6-10,
        # x 11-211, y 211-235, its all-reduce from 235 (rank 0's a ends at 101) to 255, then z 256-261 (rank 1) and
        # e 256-276 (rank 0): from the first start (1), rank 0's makespan 325 -> 275 µs
        from test_cli_compare import run

        r = run("replay", str(sched), "--what-if", "host_gaps=0", "--format", "json")
        assert r.exit_code == 0, r.output
        got = json.loads(r.output)["what_if"]
        assert got["ranks"]["0"]["before_s"] == pytest.approx(325 * US)
        assert got["ranks"]["0"]["after_s"] == pytest.approx(275 * US)
        assert got["changes"][0].startswith("host gaps x0: ")


def test_stream_synchronize_waits_for_the_op_that_ended_last_before_it_returned(tmp_path: Path) -> None:
    # A (s7, 1010-1110), C (s20, 1012-1050) and E (s7, 1110-1200) launched before a cudaStreamSynchronize at 1020
    # returning at 1120 (the trace does not say which stream): the synced op is A, the last to end before the
    # return (E ends after it); B (s20, launched at 1125, after the call) waits for A
    from replaygen import _k, _rt

    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
        _rt("cudaLaunchKernel", 1000, 5, 1), _k("void a(float*)", 7, 1010, 100, 1),
        _rt("cudaLaunchKernel", 1006, 5, 2), _k("void c(float*)", 20, 1012, 38, 2),
        _rt("cudaLaunchKernel", 1014, 5, 4), _k("void e(float*)", 7, 1110, 90, 4),
        _rt("cudaStreamSynchronize", 1020, 100, 3),
        _rt("cudaLaunchKernel", 1125, 5, 5), _k("void b(float*)", 20, 1131, 10, 5)]}
    _tl, sched = _import(tmp_path, [doc])
    import yaml

    ops = json.loads((tmp_path / yaml.safe_load(sched.read_text())["ops_file"]).read_text())
    assert [(o["name"], o.get("deps", [])) for o in ops] == [("k0", []), ("k1", []), ("k2", []), ("k3", ["k0"])]
