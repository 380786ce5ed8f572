"""An imported trace as a schedule (schedsim.trace.to_schedule), its replay (the ``replay`` GPU model) and
what-ifs (schedsim.trace.replay), on the hand-built Kineto traces of ``replaygen`` (times derived there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from replaygen import _k, _rt, rank_doc, write
from test_cli_compare import run

from schedsim import api
from schedsim.hardware.profile import load_profile
from schedsim.sim.timeline import Timeline
from schedsim.trace.kineto import import_kineto
from schedsim.trace.replay import parse_what_if, replay_report, what_if_spec
from schedsim.trace.to_schedule import write_replay_schedule

H200 = load_profile("h200")


def _schedule(tmp_path: Path, *docs: dict[str, Any]) -> tuple[Path, Any]:
    files = [write(tmp_path / f"r{i}.json", d) for i, d in enumerate(docs)]
    res = import_kineto(files, keep_runtime=True, keep_kernel_rows=False)
    assert res.replay is not None
    got = write_replay_schedule(res.replay, tmp_path / "schedule.yaml", name="fx")
    return tmp_path / "schedule.yaml", got


def _doc(p: Path) -> dict[str, Any]:
    doc = yaml.safe_load(p.read_text())
    doc["ops"] = json.loads((p.parent / doc.pop("ops_file")).read_text())
    return doc


def _ops(p: Path) -> list[tuple[Any, ...]]:
    return [(o["name"], o["ranks"][0], o["stream"], o["kind"], o["duration_us"], o.get("host_us", 0.0),
             o.get("deps", [])) for o in _doc(p)["ops"]]


def _replay(p: Path, tmp_path: Path, **what: Any) -> Any:
    spec = api.load(p)
    if what:
        spec, _lines = what_if_spec(spec, **what)
    return api.simulate_spec(spec, H200, gpu_model="replay").timeline


class TestSchedule:
    def test_ops_streams_durations_host_gaps_and_deps(self, tmp_path: Path) -> None:
        # issue = min(call end, GPU start): 1005, 1015, 1021, 1027, 1207 -> host_us 0, 10, 6, 6; B waits for A
        # (cuda_sync row); D follows the device sync (1030, returned 1200): it and the host wait for every
        # stream's last op (C, AR); host time before the sync 1030 - 1027 = 3, after the synced work 1207 - 1200
        text, got = _schedule(tmp_path, rank_doc(0, sync=True))
        assert _ops(text) == [
            ("k0", 0, "s7", "compute", 100.0, 0.0, []),
            ("k1", 0, "s20", "compute", 50.0, 10.0, ["k0"]),
            ("k2", 0, "s7", "compute", 30.0, 6.0, []),
            ("all_reduce_pg0_0", 0, "s20", "compute", 40.0, 6.0, []),
            ("k4", 0, "s7", "compute", 20.0, 7.0, ["k2", "all_reduce_pg0_0"]),
        ]
        doc = _doc(text)
        assert doc["ops"][3]["tags"] == {"nccl": "all_reduce", "peers": "absent", "pg": "0", "seq": 0,
                                         "bytes": 4194304.0, "start_us": 155.0, "end_us": 195.0,
                                         "trace_id": "ncclKernel_AllReduce_RING_LL_Sum_float#0@r0"}
        assert doc["ops"][4]["tags"]["host_wait_before_us"] == 3.0
        assert got.guesses == [] and any("peers" in n for n in got.notes)
        assert text.read_text().startswith("# Replay of an imported kineto trace")

    def test_wait_without_cuda_sync_rows_is_paired_from_runtime_rows_and_said(self, tmp_path: Path) -> None:
        text, got = _schedule(tmp_path, rank_doc(0, cuda_sync=False))
        assert [o[6] for o in _ops(text)] == [[], ["k0"], [], []]
        assert len(got.guesses) == 1 and "cudaStreamWaitEvent" in got.guesses[0]
        assert "# guessed: rank 0: 1 event wait(s)" in text.read_text()

    def test_a_guessed_wait_the_recorded_times_rule_out_is_left_out(self, tmp_path: Path) -> None:
        """A (s7, 1010-1110 µs), an event record and a wait with no cuda_sync row, then B (s20) launched at 1010
        and run 1020-1070, beside A: the runtime-row pairing made B wait for A (replayed 1110-1160, makespan
        150 µs for a trace of 100). B started 90 µs before A ended, so the trace rules that wait out: no dep,
        said in the guess line, and the replay is the trace."""
        doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
            _rt("cudaLaunchKernel", 1000, 5, 1), _k("void gemm<float>(float*)", 7, 1010, 100, 1),
            _rt("cudaEventRecord", 1006, 1, 2), _rt("cudaStreamWaitEvent", 1008, 1, 3),
            _rt("cudaLaunchKernel", 1010, 5, 4), _k("void ew<float>(float*)", 20, 1020, 50, 4)]}
        text, got = _schedule(tmp_path, doc)
        assert [o[6] for o in _ops(text)] == [[], []]
        assert len(got.guesses) == 1 and "1 such pair(s) left out" in got.guesses[0]
        rep = replay_report(_replay(text, tmp_path))
        assert rep.trace_makespan_s == pytest.approx(100e-6) and rep.replay_makespan_s == pytest.approx(100e-6)

    def test_collective_matched_across_ranks(self, tmp_path: Path) -> None:
        # rank 1's B is 40 µs, so it reaches the all-reduce at 1150 and its kernel runs 50 µs (10 µs waiting)
        text, got = _schedule(tmp_path, rank_doc(0), rank_doc(1, b_us=40, ar_start=1150, ar_us=50))
        doc = _doc(text)
        ars = [o for o in doc["ops"] if o["name"] == "all_reduce_pg0_0"]
        assert [(o["ranks"], o["kind"], o["group"], o["bytes"], o["duration_us"]) for o in ars] == [
            ([0], "all_reduce", [0, 1], 4194304, 40.0), ([1], "all_reduce", [0, 1], 4194304, 40.0)]
        assert doc["world_size"] == 2 and any("matched" in n for n in got.notes)


class TestReplay:
    def test_gpu_bound_replay_is_the_trace(self, tmp_path: Path) -> None:
        # A issued at 0 (its call's return, 1005 in the trace) starts 5 µs later (its recorded launch latency,
        # tag gpu_gap_us), 5-105; B and C after A (105-155, 105-135), AR after B 155-195: 190 µs = 1200 - 1010
        text, _ = _schedule(tmp_path, rank_doc(0))
        tl = _replay(text, tmp_path)
        rep = replay_report(tl)
        assert rep.trace_makespan_s == pytest.approx(190e-6, abs=1e-12)
        assert rep.replay_makespan_s == pytest.approx(190e-6, abs=1e-12)
        assert rep.start_error_median == pytest.approx(0.0, abs=1e-9)
        starts = {s.name: round(s.start_s * 1e6, 6) for s in tl.spans}
        assert starts == {"k0": 5.0, "k1": 105.0, "k2": 105.0, "all_reduce_pg0_0": 155.0}

    def test_an_nccl_kernel_without_its_peers_is_comm_in_the_replay(self, tmp_path: Path) -> None:
        """rank_doc(0) of a world of 2, imported alone: the all-reduce (150-190 µs, after B on its stream, nothing
        under it) is a compute op of its recorded 40 µs. The replay's metrics counted it as compute (busy comm
        0, compute 170 µs, exposed comm 0) where the import's count it as comm; now both say comm 40 µs, all of it
        exposed, and compute 150 µs (A 0-100, B 100-150, C 100-130)."""
        from schedsim.sim.metrics import Metrics

        text, _ = _schedule(tmp_path, rank_doc(0))
        imported = import_kineto([tmp_path / "r0.json"]).timeline
        for tl in (_replay(text, tmp_path), imported):
            (m,) = Metrics.of(tl).ranks.values()
            assert (m.busy_compute_s, m.busy_comm_s, m.exposed_comm_s) == pytest.approx((150e-6, 40e-6, 40e-6)), tl
        ar = next(s for s in _replay(text, tmp_path).spans if s.name == "all_reduce_pg0_0")
        assert (ar.kind, ar.resource) == ("compute", "comm")

    def test_two_ranks_rendezvous(self, tmp_path: Path) -> None:
        text, _ = _schedule(tmp_path, rank_doc(0), rank_doc(1, b_us=40, ar_start=1150, ar_us=50))
        rep = replay_report(_replay(text, tmp_path))
        assert rep.replay_makespan_s == pytest.approx(190e-6, abs=1e-12)
        assert rep.per_rank_s == pytest.approx({0: 190e-6, 1: 190e-6}, abs=1e-12)

    def test_host_waits_in_the_sync_then_launches(self, tmp_path: Path) -> None:
        # the host reaches the sync at 22 + 3, waits for AR's replayed end (195: A started 5 µs after its issue,
        # its launch latency), spends 7: D at 202 = 1207 - 1005 of the trace (both from the first issue), and the
        # makespan is the trace's 217 = 1227 - 1010
        text, _ = _schedule(tmp_path, rank_doc(0, sync=True))
        tl = _replay(text, tmp_path)
        d = next(s for s in tl.spans if s.name == "k4")
        assert d.start_s == pytest.approx(202e-6, abs=1e-12)
        rep = replay_report(tl)
        assert rep.replay_makespan_s == pytest.approx(217e-6, abs=1e-12) == rep.trace_makespan_s

    def test_faster_gpu_shortens_the_hosts_wait(self, tmp_path: Path) -> None:
        # all_reduce halved: it ends at 175, the host launches D at 182
        text, _ = _schedule(tmp_path, rank_doc(0, sync=True))
        d = next(s for s in _replay(text, tmp_path, scales=[parse_what_if("nccl*0.5")]).spans if s.name == "k4")
        assert d.start_s == pytest.approx(182e-6, abs=1e-12)

    def test_no_contention_in_replay(self, tmp_path: Path) -> None:
        p = tmp_path / "two.yaml"
        p.write_text("schema_version: 1\nname: two\nworld_size: 1\nops:\n"
                     "- {name: a, kind: compute, stream: s1, duration_us: 10}\n"
                     "- {name: b, kind: compute, stream: s2, duration_us: 10}\n"
                     "- {name: c, kind: memcpy, direction: h2d, bytes: 1, stream: s3, duration_us: 7}\n")
        tl = api.simulate_spec(api.load(p), H200, gpu_model="replay").timeline
        assert {s.name: (s.start_s, round(s.end_s * 1e6, 9)) for s in tl.spans} == {
            "a": (0.0, 10.0), "b": (0.0, 10.0), "c": (0.0, 7.0)}


class TestWhatIf:
    def test_scale_nccl(self, tmp_path: Path) -> None:
        text, _ = _schedule(tmp_path, rank_doc(0), rank_doc(1, b_us=40, ar_start=1150, ar_us=50))
        rep = replay_report(_replay(text, tmp_path, scales=[parse_what_if("nccl*0.5")]))
        assert rep.per_rank_s == pytest.approx({0: 170e-6, 1: 170e-6}, abs=1e-12)

    def test_drop_host_gaps(self, tmp_path: Path) -> None:
        text, _ = _schedule(tmp_path, rank_doc(0, sync=True))
        # every op issued at 0; A still starts 5 µs later (the GPU's launch latency stays), AR ends at 195
        d = next(s for s in _replay(text, tmp_path, scales=[], host_gaps=0.0).spans if s.name == "k4")
        assert d.start_s == pytest.approx(195e-6, abs=1e-12)

    def test_recost_comm_takes_the_profile(self, tmp_path: Path) -> None:
        text, _ = _schedule(tmp_path, rank_doc(0), rank_doc(1, b_us=40, ar_start=1150, ar_us=50))
        spec, lines = what_if_spec(api.load(text), [], recost_comm=True)
        ar = [o for o in spec.ops if o.kind == "all_reduce"]
        assert len(ar) == 2 and all(o.duration_us is None for o in ar)
        assert lines == ["collectives re-costed with the profile: 2 ops"]
        from schedsim.gpu.cost import CostModel

        want = CostModel(H200).net.collective("all_reduce", 4194304.0, (0, 1))
        tl = api.simulate_spec(spec, H200, gpu_model="replay").timeline
        got = [s.end_s - s.start_s for s in tl.spans if s.kind == "all_reduce"]
        assert got == pytest.approx([want, want])

    def test_recost_comm_keeps_collectives_of_unknown_size(self, tmp_path: Path) -> None:
        """A trace whose NCCL kernels carry no ``In msg nelems`` imports its all_reduce with bytes 0 (size
        unknown: NCCL launches no kernel for an empty one). --recost-comm timed it as a 0-byte all_reduce (40 µs ->
        a few µs, the makespan 10 % shorter, no word); it keeps its recorded time and says so."""
        docs = [rank_doc(0), rank_doc(1, b_us=40, ar_start=1150, ar_us=50)]
        for d in docs:
            for e in d["traceEvents"]:
                for k in ("In msg nelems", "Out msg nelems"):
                    e["args"].pop(k, None)
        text, _ = _schedule(tmp_path, *docs)
        base = what_if_spec(api.load(text), [])[0]
        ar0 = [o.duration_us for o in base.ops if o.kind == "all_reduce"]
        assert len(ar0) == 2 and all(o.size_bytes() == 0 for o in base.ops if o.kind == "all_reduce")
        spec, lines = what_if_spec(api.load(text), [], recost_comm=True)
        assert [o.duration_us for o in spec.ops if o.kind == "all_reduce"] == ar0
        assert lines == ["collectives re-costed with the profile: 0 ops; 2 whose size the trace does not record "
                         "keep their recorded duration"]

    @pytest.mark.parametrize("bad", ["nccl", "nccl*x", "*0.5", "nccl*-1"])
    def test_bad_what_if(self, bad: str) -> None:
        from schedsim.errors import SpecError

        with pytest.raises(SpecError, match="PATTERN"):
            parse_what_if(bad)


class TestRoundTrip:
    def test_import_schedule_replay_compare(self, tmp_path: Path) -> None:
        f = write(tmp_path / "r0.json", rank_doc(0))
        out = tmp_path / "imp"
        r = run("import", "kineto", str(f), "--out", str(out))
        assert r.exit_code == 0, r.output
        assert (out / "schedule.yaml").exists() and (out / "timeline.json").exists()
        r = run("replay", str(out / "schedule.yaml"), "--what-if", "kernel*2", "--format", "json")
        assert r.exit_code == 0, r.output
        got = json.loads(r.output)
        assert got["trace_makespan_s"] == pytest.approx(190e-6) and got["replay_makespan_s"] == pytest.approx(190e-6)
        # kernels doubled: A 0-200, B 200-300, AR 300-340
        assert got["what_if"]["ranks"]["0"]["after_s"] == pytest.approx(340e-6)
        tl = Timeline.read_json(out / "timeline.json")  # the imported trace
        spans = sorted(tl.spans, key=lambda s: s.start_s)
        assert spans[-1].end_s - spans[0].start_s == pytest.approx(got["replay_makespan_s"])

    def test_bad_what_if_exits_2(self, tmp_path: Path) -> None:
        f = write(tmp_path / "r0.json", rank_doc(0))
        out = tmp_path / "imp"
        assert run("import", "kineto", str(f), "--out", str(out)).exit_code == 0
        r = run("replay", str(out / "schedule.yaml"), "--what-if", "memcpy*2")
        assert r.exit_code == 2
        assert "error: " in r.output and "no op with a recorded duration matches 'memcpy'" in r.output

    def test_guesses_said_once_on_stderr_and_in_json(self, tmp_path: Path) -> None:
        f = write(tmp_path / "r0.json", rank_doc(0, cuda_sync=False))
        r = run("import", "kineto", str(f), "--out", str(tmp_path / "a"))
        assert r.exit_code == 0 and r.output.count("dependencies guessed") == 1
        r = run("import", "kineto", str(f), "--out", str(tmp_path / "b"), "--format", "json")
        got = json.loads(r.output)
        assert len(got["schedule_guesses"]) == 1 and "cudaStreamWaitEvent" in got["schedule_guesses"][0]


class TestOpsFile:
    def test_ops_file_appends_after_written_ops(self, tmp_path: Path) -> None:
        (tmp_path / "o.json").write_text('[{"name": "b", "kind": "compute", "duration_us": 5, "deps": ["a"]}]')
        p = tmp_path / "s.yaml"
        p.write_text("schema_version: 1\nname: s\nworld_size: 1\nops_file: o.json\n"
                     "ops:\n- {name: a, kind: compute, duration_us: 3, stream: x}\n")
        tl = api.simulate_spec(api.load(p), H200, gpu_model="replay").timeline
        assert {s.name: round(s.end_s * 1e6, 9) for s in tl.spans} == {"a": 3.0, "b": 8.0}

    @pytest.mark.parametrize("content, why", [(None, "no such file"), ("[{", "not valid JSON at line 1"),
                                              ("{}", "not a JSON list"),
                                              ("[1]", "not a JSON list")])
    def test_bad_ops_file(self, tmp_path: Path, content: str | None, why: str) -> None:
        from schedsim.errors import SpecError

        if content is not None:
            (tmp_path / "o.json").write_text(content)
        p = tmp_path / "s.yaml"
        p.write_text("schema_version: 1\nname: s\nworld_size: 1\nops_file: o.json\nops: []\n")
        with pytest.raises(SpecError, match=why) as e:
            api.load(p)
        assert e.value.file == str(p) and e.value.path == "ops_file"


def test_measured_collective_is_not_called_an_estimate(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    body = "schema_version: 1\nname: s\nworld_size: 2\nops:\n- {name: ar, kind: all_reduce, bytes: 1024%s}\n"
    def estimates() -> list[str]:  # the notes that say a collective's time is a model's estimate
        warnings = api.simulate_spec(api.load(p), H200).timeline.meta.get("warnings") or []
        return [w for w in warnings if "estimate" in str(w) and "all_reduce" in str(w)]

    p.write_text(body % ", duration_us: 50")
    assert not estimates()
    p.write_text(body % "")
    assert estimates()


def test_nsys_launch_calls_order_the_replay(synth_db: Any, tmp_path: Path) -> None:
    from schedsim.trace.nsys import import_nsys

    path, exp = synth_db
    res = import_nsys([path], keep_runtime=True)
    assert res.replay is not None and len(res.replay.acts) == exp["kernels"] + exp["memcpys"]
    got = write_replay_schedule(res.replay, tmp_path / "schedule.yaml", name="s")
    assert not [g for g in got.guesses if "no launch call" in g]  # every activity joined to its cudaLaunchKernel
    rep = replay_report(api.simulate_spec(api.load(tmp_path / "schedule.yaml"), H200, gpu_model="replay").timeline)
    assert rep.replay_makespan_s == pytest.approx(rep.trace_makespan_s, rel=1e-9)
    assert rep.start_error_median < 1e-3
