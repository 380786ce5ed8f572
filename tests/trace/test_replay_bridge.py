"""From a real run to a what-if (issue 37), the parts past the first version: ``predict`` of an imported schedule
replays it by default (``durations: recorded``), ``compare`` of the replay against the imported timeline matches
ops by id, contradictory multi-rank traces are refused, the ``max_connections`` what-if, CUDA-graph launches and
the Chakra export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import KINETO_AR, KINETO_SR, NSYS_REAL, need
from replaygen import graph_doc, rank_doc, two_streams_doc, write
from typer.testing import CliRunner

from schedsim.cli import app
from schedsim.sim.timeline import Timeline
from schedsim.trace.replay import replay_report

DATA = Path(__file__).resolve().parents[1] / "data"
#: A real Kineto trace of one H200 (``schedsim execute`` of an offload schedule, 64 GPU ops on 3 streams).
REAL = DATA / "kineto_execute_offload_h200_rank0.json.gz"


def run(*args: str) -> Any:
    """The whole CLI (predict, import, replay, compare, export) in this process."""
    return CliRunner().invoke(app, [str(a) for a in args])


def _import(tmp_path: Path, *files: Path) -> Path:
    out = tmp_path / "imp"
    r = run("import", "kineto", *map(str, files), "--out", str(out))
    assert r.exit_code == 0, r.output
    return out


class TestPredictReplaysByDefault:
    def test_real_trace_replayed_within_the_goal(self, tmp_path: Path) -> None:
        """``schedsim predict DIR/schedule.yaml`` with no option replays the run: makespan within the issue's
        worst-case goal (5 %) and per-op start error median within 5 % of the makespan; the waves model on the
        same ops (``--durations modeled``) is further from this trace (+4.1 % since it reads the recorded host
        synchronisations too, rule host-wait; -7.6 % before), so the default is what makes it closest."""
        imp = _import(tmp_path, REAL)
        assert "durations: recorded" in (imp / "schedule.yaml").read_text()
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt", "--no-trace")
        assert r.exit_code == 0, r.output
        rep = replay_report(Timeline.read_json(tmp_path / "p" / "timeline.json"))
        assert abs(rep.error) <= 0.05 and rep.start_error_median <= 0.05
        trace = Timeline.read_json(imp / "timeline.json")
        t0 = min(s.start_s for s in trace.spans)
        assert rep.trace_makespan_s == pytest.approx(max(s.end_s for s in trace.spans) - t0, rel=1e-6)
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "m"), "--no-gantt", "--no-trace",
                "--durations", "modeled")
        assert r.exit_code == 0, r.output
        modeled = replay_report(Timeline.read_json(tmp_path / "m" / "timeline.json"))
        assert abs(modeled.error) > abs(rep.error) + 0.02  # the modeled GPU is not the recorded run

    @pytest.mark.parametrize(("kind", "path"), [("kineto", KINETO_AR), ("kineto", KINETO_SR), ("nsys", NSYS_REAL)])
    def test_shared_real_traces_within_the_goal(self, tmp_path: Path, kind: str, path: Path) -> None:
        """The real traces of ../shared/data/traces (skipped where absent), each predicted with no option: makespan
        within 5 % (the issue's worst case) and per-op start error median within 5 % of the makespan."""
        out = tmp_path / "imp"
        r = run("import", kind, str(need(path)), "--out", str(out))
        assert r.exit_code == 0, r.output
        r = run("predict", str(out / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt", "--no-trace")
        assert r.exit_code == 0, r.output
        rep = replay_report(Timeline.read_json(tmp_path / "p" / "timeline.json"))
        assert abs(rep.error) <= 0.05 and rep.start_error_median <= 0.05

    @pytest.mark.parametrize("name", ["kineto_train_step_small_h100.json.gz", "kineto_train_step_gpt4l_h100.json.gz",
                                      "kineto_cuda_graph_h100.json.gz", "kineto_cuda_graph_2streams_h100.json.gz"])
    def test_h100_training_step_and_cuda_graph_traces(self, tmp_path: Path, name: str) -> None:
        """Real traces of one H100 (``benchmarks/accuracy/trace_replay.py --capture``): two AdamW training steps of a
        GPT-style model (2 layers of width 256, host-bound; 4 of 1024) and three replays of a CUDA graph of 8 MLP
        blocks (one stream; two captured streams) between eager ops. Without the recorded launch latencies
        (``gpu_gap_us``) the graphs replayed 6.55 % and 7.67 % short (their nodes back to back, 0.4-0.9 µs apart in
        the run; the training steps 0.00 % and 0.08 %); now each op starts where it did: makespan and the median
        op start within 0.01 %."""
        imp = _import(tmp_path, DATA / name)
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt", "--no-trace")
        assert r.exit_code == 0, r.output
        rep = replay_report(Timeline.read_json(tmp_path / "p" / "timeline.json"))
        assert abs(rep.error) <= 1e-4 and rep.start_error_median <= 1e-4

    def test_a_hold_longer_than_launch_latency_is_not_replayed(self, tmp_path: Path) -> None:
        """replaygen's rank with the all-reduce started at 1300 µs, 140 µs after B (on its stream) ended, held by
        nothing the trace records: no ``gpu_gap_us`` (past LAUNCH_GAP_MAX_NS, 12 µs); A keeps its 5 µs (launch
        call returned at 1005, kernel at 1010), B and C (started at A's end) none."""
        imp = _import(tmp_path, write(tmp_path / "r0.json", rank_doc(0, world=1, ar_start=1300.0)))
        ops = json.loads((imp / "schedule.ops.json").read_text())
        assert {o["name"]: o["tags"].get("gpu_gap_us") for o in ops} == {
            "k0": 5.0, "k1": None, "k2": None, "all_reduce_pg0_0": None}

    def test_synthetic_trace_replays_exactly(self, tmp_path: Path) -> None:
        """replaygen's rank: A 1010-1110, B 1110-1160, C 1110-1140, AR 1160-1200 (µs): makespan 190 µs."""
        imp = _import(tmp_path, write(tmp_path / "r0.json", rank_doc(0, world=1)))
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt", "--format", "json")
        assert r.exit_code == 0, r.output
        tl = Timeline.read_json(tmp_path / "p" / "timeline.json")
        t0 = min(s.start_s for s in tl.spans)
        assert max(s.end_s for s in tl.spans) - t0 == pytest.approx(190e-6)

    def test_sweep_replays_too(self, tmp_path: Path) -> None:
        """sweep decides the GPU model as predict does: each point of an imported schedule is its replay (from the
        first issue: A starts its recorded 5 µs launch latency after it, the last op ends at 195 µs)."""
        imp = _import(tmp_path, write(tmp_path / "r0.json", rank_doc(0, world=1)))
        with open(imp / "schedule.yaml", "a") as f:
            f.write("params: {x: 1}\n")
        r = run("sweep", str(imp / "schedule.yaml"), "--set", "x=1,2", "-o", str(tmp_path / "sw"), "--format", "json")
        assert r.exit_code == 0, r.output
        assert [p["makespan_s"] for p in json.loads(r.stdout)] == pytest.approx([195e-6, 195e-6])

    def test_explain_gives_the_recorded_duration_the_replay_runs(self, tmp_path: Path) -> None:
        """The matched 4 MiB all-reduce of replaygen's two ranks replays for its recorded 40 µs; --explain printed
        NCCL's ring/Simple at 26.85 µs on h200, a time the prediction never used. Now: recorded, 40 µs."""
        imp = _import(tmp_path, *[write(tmp_path / f"r{r}.json", rank_doc(r)) for r in (0, 1)])
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--explain", "--no-gantt",
                "--format", "json")
        assert r.exit_code == 0, r.output
        (row,) = json.loads(r.stdout)["explain"]
        assert (row["kind"], row["bytes"], row["group"], row["algo"], row["proto"]) == (
            "all_reduce", 4 << 20, "0..1", "recorded", "-")
        assert row["time_us"] == pytest.approx(40.0)

    def test_contradicting_options_exit_2(self, tmp_path: Path) -> None:
        imp = _import(tmp_path, write(tmp_path / "r0.json", rank_doc(0, world=1)))
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--durations", "modeled",
                "--gpu-model", "replay")
        assert r.exit_code == 2
        assert "error: " in r.output and "--durations modeled contradicts --gpu-model replay" in r.output
        assert "fix:" in r.output


    @pytest.mark.parametrize("where", ["option", "field"])
    def test_recorded_durations_without_any_exit_2(self, tmp_path: Path, where: str) -> None:
        """``--durations recorded`` (or the schedule's ``durations: recorded``) on a schedule whose ops carry no
        ``duration_us``: the replay would time every op with the profile's model without its launch costs (this
        1024³ bf16 matmul then 1 MiB all-reduce on 2 ranks: 21.5 µs on h200, predicted 65.2), so it is refused."""
        sched = tmp_path / "s.yaml"
        sched.write_text("schema_version: 1\nname: nodur\nworld_size: 2\n"
                         + ("durations: recorded\n" if where == "field" else "")
                         + "ops:\n  - {name: mm, kind: matmul, m: 1024, n: 1024, k: 1024, dtype: bf16}\n"
                         "  - {name: ar, kind: all_reduce, bytes: 1048576, deps: [mm]}\n")
        r = run("predict", str(sched), "-o", str(tmp_path / "p"),
                *(["--durations", "recorded"] if where == "option" else []))
        assert r.exit_code == 2, r.output
        assert "error: " in r.output and "no op carries a recorded duration" in r.output and "fix:" in r.output
        assert "Traceback" not in r.output and not (tmp_path / "p").exists()
        r = run("predict", str(sched), "-o", str(tmp_path / "q"), "--durations", "modeled")
        assert r.exit_code == 0, r.output


class TestCompareReplayWithImport:
    def test_ops_match_by_id_and_the_held_op_shows(self, tmp_path: Path) -> None:
        """replaygen's rank with the all-reduce started at 1300 µs, held by nothing the trace records: the replay
        starts it when B ends (1160 µs). From A's start (1010 µs = 0): measured AR 290-330 µs; replayed from the
        first issue (1005 µs = 0, A at 5 µs after its launch latency) 155-195 µs; every other op where it was (the
        summary line counts each side from its first start). compare matches all 4 ops by their imported ids and
        its per-op rows say so."""
        imp = _import(tmp_path, write(tmp_path / "r0.json", rank_doc(0, world=1, ar_start=1300.0)))
        assert run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt").exit_code == 0
        r = run("compare", str(tmp_path / "p"), str(imp), "-o", str(tmp_path / "c"), "--no-gantt", "--format", "json")
        assert r.exit_code == 0, r.output
        got = json.loads((tmp_path / "c" / "compare.json").read_text())
        assert got["match"]["mode"] == "id" and got["match"]["matched"] == 4
        assert got["match"]["n_only_pred"] == 0 and got["match"]["n_only_meas"] == 0
        assert not any("different schedules" in w for w in got["warnings"])
        rows = {row["id"]: row for row in got["ops"]["per_op"]}
        imported = {s.id for s in Timeline.read_json(imp / "timeline.json").spans}
        assert set(rows) == imported
        ar = next(v for k, v in rows.items() if k.startswith("ncclKernel_AllReduce"))
        assert ar["meas_start_s"] == pytest.approx(290e-6) and ar["pred_start_s"] == pytest.approx(155e-6)
        assert ar["pred_dur_s"] == pytest.approx(ar["meas_dur_s"]) == pytest.approx(40e-6)
        others = [v for k, v in rows.items() if v is not ar]  # each 5 µs later: the replay's 0 is A's issue
        assert all(v["pred_start_s"] == pytest.approx(v["meas_start_s"] + 5e-6, abs=1e-9) for v in others)
        assert got["makespan"]["pred_s"] == pytest.approx(195e-6) and got["makespan"]["meas_s"] == pytest.approx(330e-6)
        r = run("compare", str(tmp_path / "p"), str(imp), "-o", str(tmp_path / "c2"), "--no-gantt")
        assert r.exit_code == 0, r.output
        said = " ".join(r.stdout.split())  # rich wraps long lines
        assert ("op starts (each side from its first): median |predicted - measured| 0.0 µs; furthest "
                "ncclKernel_AllReduce_RING_LL_Sum_float#0@r0, predicted at 150.0 µs, measured at 290.0 µs (earlier "
                "than recorded: in the run something no trace row records held it)") in said

    def test_a_replay_of_more_than_the_import_kept_is_said(self, tmp_path: Path) -> None:
        """kinetogen's two iterations of mm0/ar0 on 2 ranks imported with --ops: the timeline keeps the last
        iteration (155 µs) folded into ranges, the schedule replays the whole capture (410 µs). compare said
        +164.5 % and nothing else; it now warns that 14 replayed ops have no imported span, and says the fix."""
        from kinetogen import kineto_doc, write_kineto

        files = [write_kineto(tmp_path / f"r{r}.json", kineto_doc(r, iterations=2)) for r in (0, 1)]
        ops = tmp_path / "ops.yaml"
        ops.write_text("schema_version: 1\nname: x\nworld_size: 2\nops:\n  - {name: mm0, kind: compute, "
                       "duration_us: 1}\n  - {name: ar0, kind: all_reduce, bytes: 4}\n")
        imp = tmp_path / "imp"
        assert run("import", "kineto", *map(str, files), "--ops", str(ops), "--out", str(imp)).exit_code == 0
        assert run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt").exit_code == 0
        r = run("compare", str(tmp_path / "p"), str(imp), "-o", str(tmp_path / "c"), "--no-gantt")
        assert r.exit_code == 0, r.output
        got = json.loads((tmp_path / "c" / "compare.json").read_text())
        assert got["makespan"]["pred_s"] == pytest.approx(410e-6) and got["makespan"]["meas_s"] == pytest.approx(155e-6)
        (w,) = [w for w in got["warnings"] if "no span in the imported timeline" in w]
        assert w.startswith("14 replayed op(s)") and "without --ops" in w
        # the whole capture imported: every replayed op has its span, no such warning
        assert run("import", "kineto", *map(str, files), "--out", str(tmp_path / "all")).exit_code == 0
        assert run("predict", str(tmp_path / "all" / "schedule.yaml"), "-o", str(tmp_path / "q"),
                   "--no-gantt").exit_code == 0
        r = run("compare", str(tmp_path / "q"), str(tmp_path / "all"), "-o", str(tmp_path / "d"), "--no-gantt")
        assert r.exit_code == 0, r.output
        got = json.loads((tmp_path / "d" / "compare.json").read_text())
        assert not [w for w in got["warnings"] if "no span" in w] and got["match"]["n_only_pred"] == 0

    def test_a_plain_prediction_keeps_its_ids(self, tmp_path: Path) -> None:
        """Only a timeline whose spans carry trace_id tags is renamed (a hand-written schedule's prediction is not)."""
        from schedsim.compare import as_trace_ids
        from schedsim.sim.timeline import Span

        plain = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "compute", "compute", 0.0, 1.0)])
        assert as_trace_ids(plain, Timeline("x", "import", 1)) is plain


def _nccl(doc: dict[str, Any]) -> dict[str, Any]:
    """The NCCL kernel event of a replaygen rank."""
    return next(e for e in doc["traceEvents"] if e["name"].startswith("ncclKernel"))


def _two_ranks(tmp_path: Path, change: dict[str, Any] | None = None, world: int = 2,
               drop_rank1_nccl: bool = False) -> list[Path]:
    d0, d1 = rank_doc(0, world=world), rank_doc(1, world=world)
    if change:
        _nccl(d1)["args"].update(change)
    if drop_rank1_nccl:
        d1["traceEvents"].remove(_nccl(d1))
    return [write(tmp_path / "r0.json", d0), write(tmp_path / "r1.json", d1)]


class TestContradictoryTraces:
    @pytest.mark.parametrize(("change", "says"), [
        ({"In msg nelems": 1 << 19, "Out msg nelems": 1 << 19},
         "all_reduce #0 on process group 0 moves 2,097,152 bytes (In msg nelems x dtype), but on "),
        ({"Process Group Ranks": "[0, 1, 2]", "Group size": 3},
         "process group 0 has ranks [0, 1, 2] (kernel arg Process Group Ranks), but "),
        ({"Collective name": "allgather"},
         "collective #0 on process group 0 is all_gather, but on "),
    ])
    def test_collectives_that_disagree_exit_2(self, tmp_path: Path, change: dict[str, Any], says: str) -> None:
        files = _two_ranks(tmp_path, change)
        r = run("import", "kineto", *map(str, files), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 2, r.output
        first = r.output.strip().splitlines()[0]
        assert first.startswith(f"error: {files[1]} (rank 1): ") and says in first and f"{files[0]} (rank 0)" in first
        assert "fix: pass the trace files of one run" in r.output and "Traceback" not in r.output
        assert not (tmp_path / "imp" / "schedule.yaml").exists() and not (tmp_path / "imp" / "timeline.json").exists()

    def test_a_counterpart_without_size_args_is_no_contradiction(self, tmp_path: Path) -> None:
        files = _two_ranks(tmp_path)
        d1 = json.loads(files[1].read_text())
        for k in ("In msg nelems", "Out msg nelems", "dtype"):
            _nccl(d1)["args"].pop(k)
        write(files[1], d1)
        r = run("import", "kineto", *map(str, files), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 0, r.output

    def test_two_files_of_one_rank_and_two_world_sizes_exit_2(self, tmp_path: Path) -> None:
        a = write(tmp_path / "a.json", rank_doc(0))
        b = write(tmp_path / "b.json", rank_doc(0))
        r = run("import", "kineto", str(a), str(b), "--out", str(tmp_path / "x"))
        assert r.exit_code == 2 and f"error: {b}: rank 0 is also claimed by {a}" in r.output
        c = write(tmp_path / "c.json", rank_doc(1, world=4))
        r = run("import", "kineto", str(a), str(c), "--out", str(tmp_path / "y"))
        assert r.exit_code == 2 and f"error: {c}: distributedInfo.world_size is 4, but {a} says 2" in r.output


class TestNsysSameCaptureTwice:
    def test_one_file_twice_exit_2(self, tmp_path: Path, synth_db: Any) -> None:
        db, _exp = synth_db
        r = run("import", "nsys", str(db), str(db), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 2 and f"error: {db}: process " in r.output and "(the same capture twice)" in r.output
        assert "fix: pass each rank's nsys export once" in r.output

    def test_a_copy_of_a_capture_exit_2(self, tmp_path: Path) -> None:
        """Two files of one session start, process and device (the real export and a copy of it)."""
        import shutil

        copy = tmp_path / "copy.sqlite"
        shutil.copy(need(NSYS_REAL), copy)
        r = run("import", "nsys", str(NSYS_REAL), str(copy), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 2 and f"error: {copy}: process " in r.output and str(NSYS_REAL) in r.output


class TestMissingRowsImport:
    def test_rank_not_imported_is_a_guess_in_the_comment_and_on_stderr(self, tmp_path: Path) -> None:
        """A process group of ranks 0-2 with ranks 0 and 1 imported: the all-reduce keeps each rank's recorded
        duration, and the schedule says which rank was missing and how the dependency was replaced."""
        files = _two_ranks(tmp_path, {"Process Group Ranks": "[0, 1, 2]", "Group size": 3}, world=3)
        d0 = json.loads(files[0].read_text())
        _nccl(d0)["args"].update({"Process Group Ranks": "[0, 1, 2]", "Group size": 3})
        write(files[0], d0)
        r = run("import", "kineto", *map(str, files), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 0, r.output
        said = "process group 0: collectives with members missing (rank 2 (not imported) for 1): no rendezvous"
        assert said in r.stderr
        head = [x for x in (tmp_path / "imp" / "schedule.yaml").read_text().splitlines() if x.startswith("#")]
        assert any(x.startswith("# guessed: " + said) for x in head)

    def test_rank_without_the_kernel_is_a_guess(self, tmp_path: Path) -> None:
        files = _two_ranks(tmp_path, drop_rank1_nccl=True)
        r = run("import", "kineto", *map(str, files), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 0, r.output
        assert "rank 1 (no kernel in its trace) for 1" in r.stderr
        assert "rank 1 (no kernel in its trace) for 1" in (tmp_path / "imp" / "schedule.yaml").read_text()

    def test_no_runtime_rows_still_imports_and_says_so(self, tmp_path: Path) -> None:
        doc = rank_doc(0, world=1)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["cat"] != "cuda_runtime"]
        r = run("import", "kineto", str(write(tmp_path / "r0.json", doc)), "--out", str(tmp_path / "imp"))
        assert r.exit_code == 0, r.output
        said = "rank 0: all GPU ops have no launch call in the trace"
        assert said in r.stderr and said in (tmp_path / "imp" / "schedule.yaml").read_text()


class TestMaxConnectionsWhatIf:
    """Hand-computed (µs from A's issue, 1002): replayed as recorded A 0-100, B 100-110, C 8-58: rank makespan
    110. With one connection C (stream 20) shares the queue of stream 7 and waits behind B, which waits for A:
    C is handed over when B starts, 100-150, makespan 150. With 2 connections each stream has its own: 110."""

    @pytest.mark.parametrize(("n", "after_us"), [(1, 150.0), (2, 110.0), (8, 110.0)])
    def test_one_connection_serialises_the_streams(self, tmp_path: Path, n: int, after_us: float) -> None:
        imp = _import(tmp_path, write(tmp_path / "r0.json", two_streams_doc()))
        r = run("replay", str(imp / "schedule.yaml"), "--what-if", f"max_connections={n}", "--format", "json")
        assert r.exit_code == 0, r.output
        got = json.loads(r.stdout)
        assert got["replay_makespan_s"] == pytest.approx(110e-6)
        rank = got["what_if"]["ranks"]["0"]
        assert rank["before_s"] == pytest.approx(110e-6) and rank["after_s"] == pytest.approx(after_us * 1e-6)
        assert got["what_if"]["changes"][-1].startswith(
            f"CUDA_DEVICE_MAX_CONNECTIONS not declared (no queue limit) -> {n}: ")

    def test_table_names_the_change_and_the_rank(self, tmp_path: Path) -> None:
        imp = _import(tmp_path, write(tmp_path / "r0.json", two_streams_doc()))
        r = run("replay", str(imp / "schedule.yaml"), "--what-if", "CUDA_DEVICE_MAX_CONNECTIONS=1")
        assert r.exit_code == 0, r.output
        assert "what-if: CUDA_DEVICE_MAX_CONNECTIONS not declared (no queue limit) -> 1" in r.stdout
        assert "rank 0: makespan 110.0 µs -> 150.0 µs (+36.4%)" in r.stdout

    def test_schedule_env_and_predict_option_apply_to_the_replay(self, tmp_path: Path) -> None:
        imp = _import(tmp_path, write(tmp_path / "r0.json", two_streams_doc()))
        text = (imp / "schedule.yaml").read_text()
        r = run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "a"), "--no-gantt", "--max-connections",
                "1", "--format", "json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["metrics"]["makespan_s"] == pytest.approx(150e-6)
        (imp / "schedule.yaml").write_text(text + "env: {CUDA_DEVICE_MAX_CONNECTIONS: 1}\n")
        r = run("replay", str(imp / "schedule.yaml"), "--what-if", "max_connections=8", "--format", "json")
        assert r.exit_code == 0, r.output
        got = json.loads(r.stdout)
        assert got["replay_makespan_s"] == pytest.approx(150e-6)
        assert got["what_if"]["ranks"]["0"]["after_s"] == pytest.approx(110e-6)
        assert got["what_if"]["changes"][-1].startswith("CUDA_DEVICE_MAX_CONNECTIONS 1 -> 8: ")

    @pytest.mark.parametrize("bad", ["max_connections=0", "max_connections=33", "max_connections=x"])
    def test_bad_count_exits_2(self, tmp_path: Path, bad: str) -> None:
        imp = _import(tmp_path, write(tmp_path / "r0.json", two_streams_doc()))
        r = run("replay", str(imp / "schedule.yaml"), "--what-if", bad)
        assert r.exit_code == 2 and "CUDA_DEVICE_MAX_CONNECTIONS must be an integer 1-32" in r.output

    def test_collective_in_one_queue(self, tmp_path: Path) -> None:
        """replaygen's two ranks (A, C on stream 7; B, then the matched all-reduce on stream 20) with one
        connection: queue order A, B, C, AR; B waits for A (0-100 µs from A's start, B 100-150), C is handed over
        when B starts (100-130), AR after B (150-190): the recorded times, so the makespan stays 190 µs."""
        files = [write(tmp_path / f"r{r}.json", rank_doc(r)) for r in (0, 1)]
        imp = _import(tmp_path, *files)
        r = run("replay", str(imp / "schedule.yaml"), "--what-if", "max_connections=1", "--format", "json")
        assert r.exit_code == 0, r.output
        got = json.loads(r.stdout)["what_if"]
        assert got["makespan_s"] == pytest.approx(190e-6)
        assert {k: v["after_s"] for k, v in got["ranks"].items()} == pytest.approx(
            {k: v["before_s"] for k, v in got["ranks"].items()})


class TestGraphLaunches:
    def test_a_launch_is_issued_at_once_and_tagged(self, tmp_path: Path) -> None:
        """Issue (µs): pre 1002, every node of the launch min(1030, first node 1025) = 1025, post 1082: host_us
        0, 23, 0, 0, 57. g3 waits for g2 (guessed from timing: the rank has event rows, the graph's edges none)."""
        imp = _import(tmp_path, write(tmp_path / "r0.json", graph_doc()))
        ops = json.loads((imp / "schedule.ops.json").read_text())
        assert [(o["tags"].get("kernel"), o.get("host_us", 0.0), o["tags"].get("graph"), o.get("deps", []))
                for o in ops] == [("pre", 0.0, None, []), ("g1", 23.0, 0, []), ("g2", 0.0, 0, []),
                                  ("g3", 0.0, 0, ["k2"]), ("post", 57.0, None, [])]
        text = (imp / "schedule.yaml").read_text()
        assert "# note: 3 ops of 1 CUDA-graph launch(es) (cudaGraphLaunch), tagged graph: K" in text
        assert "1 cross-stream wait(s) between nodes of CUDA-graph launches guessed from timing" in text

    def test_replay_and_graph_what_if(self, tmp_path: Path) -> None:
        """From pre's start: pre 0-10, g1 23-43, g2 45-55 and g3 56-66 (the GPU's 2 and 1 µs between nodes,
        tag gpu_gap_us), post 80-90: every op as recorded, makespan 90. 'graph*2' keeps the gaps: g1 23-63, g2 65-85,
        g3 86-106, post after g2 85-95: 106."""
        imp = _import(tmp_path, write(tmp_path / "r0.json", graph_doc()))
        assert run("predict", str(imp / "schedule.yaml"), "-o", str(tmp_path / "p"), "--no-gantt").exit_code == 0
        tl = Timeline.read_json(tmp_path / "p" / "timeline.json")
        t0 = min(s.start_s for s in tl.spans)
        got = {s.tags["kernel"]: (round((s.start_s - t0) * 1e6, 6), round((s.end_s - t0) * 1e6, 6)) for s in tl.spans}
        assert got == {"pre": (0, 10), "g1": (23, 43), "g2": (45, 55), "g3": (56, 66), "post": (80, 90)}
        r = run("replay", str(imp / "schedule.yaml"), "--what-if", "graph*2", "--format", "json")
        assert r.exit_code == 0, r.output
        w = json.loads(r.stdout)["what_if"]
        assert w["ranks"]["0"]["before_s"] == pytest.approx(90e-6) and w["ranks"]["0"]["after_s"] == pytest.approx(
            106e-6)
        assert w["changes"][0] == "graph*2: 3 ops, 40.0 µs -> 80.0 µs of GPU time"


def test_nsys_graph_launch_is_issued_at_once(tmp_path: Path) -> None:
    """An nsys export (ns): kernel k (stream 7, call 100-200, GPU 150-250) launched alone, then a cudaGraphLaunch
    (call 500-600, correlation 5) whose nodes g1 (550-650) and g2 (700-800) ran on stream 7: k is issued at 150,
    both nodes at min(600, 550) = 550, so g1's host_us is 0.4 µs, g2's 0, and both carry graph: 0."""
    from nsysdb import make_tiny_db

    db = tmp_path / "g.sqlite"
    make_tiny_db(db, [{"start": 150, "end": 250, "name": "k", "correlationId": 4},
                      {"start": 550, "end": 650, "name": "g1", "correlationId": 5},
                      {"start": 700, "end": 800, "name": "g2", "correlationId": 5}],
                 runtime=[(100, 200, 4, "cudaLaunchKernel_v7000"), (500, 600, 5, "cudaGraphLaunch_v10000")])
    r = run("import", "nsys", str(db), "--out", str(tmp_path / "imp"))
    assert r.exit_code == 0, r.output
    ops = json.loads((tmp_path / "imp" / "schedule.ops.json").read_text())
    assert [(o["tags"]["kernel"], o.get("host_us", 0.0), o["tags"].get("graph")) for o in ops] == [
        ("k", 0.0, None), ("g1", 0.4, 0), ("g2", 0.0, 0)]


class TestChakraExport:
    def test_round_trip_of_a_two_rank_replay(self, tmp_path: Path) -> None:
        """replaygen's two ranks: per rank, from the first issue, A (k0, 5-105 µs: its launch latency), B (k1, after A
        by event: 105-155), C (k2, after A on its stream: 105-135), the matched all-reduce (after B on its stream:
        155-195, 4 MiB): 4 nodes a rank,
        read back with the same descriptors."""
        from schedsim.report.chakra import COLL_TYPES, NODE_TYPES, read_et

        imp = _import(tmp_path, *[write(tmp_path / f"r{r}.json", rank_doc(r)) for r in (0, 1)])
        r = run("export", "chakra", str(imp / "schedule.yaml"), "--out", str(tmp_path / "et"), "--format", "json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["nodes"] == {"0": 4, "1": 4}
        for rank in (0, 1):
            meta, nodes = read_et((tmp_path / "et" / f"r0_replay.{rank}.et").read_bytes())
            assert meta.version == "0.0.4"
            got = [(n.id, n.name, n.type, list(n.data_deps), n.start_time_micros, n.duration_micros) for n in nodes]
            comp, coll = NODE_TYPES["COMP_NODE"], NODE_TYPES["COMM_COLL_NODE"]
            assert got == [(0, f"k0@r{rank}", comp, [], 5, 100), (1, f"k1@r{rank}", comp, [0], 105, 50),
                           (2, f"k2@r{rank}", comp, [0], 105, 30),
                           (3, f"all_reduce_pg0_0@r{rank}", coll, [1], 155, 40)]
            attrs = {a.name: getattr(a, a.WhichOneof("value")) for a in nodes[3].attr}
            assert attrs == {"is_cpu_op": False, "comm_type": COLL_TYPES["ALL_REDUCE"], "comm_size": 4 << 20}

    def test_wire_format_is_et_def_proto(self) -> None:
        """A node encoded by hand from et_def.proto's field numbers (id 1, name 2, type 3, data_deps 5 packed,
        duration_micros 7; AttributeProto name 1, bool_val 27) equals the export's bytes, framed by a varint
        length as Chakra's protolib.encodeMessage frames it."""
        import io

        from schedsim.report.chakra import messages, write_et

        m = messages()
        node = m.Node(id=1, name="k0", type=4, data_deps=[0, 300], duration_micros=100)
        node.attr.append(m.AttributeProto(name="is_cpu_op", bool_val=True))
        body = (b"\x08\x01" b"\x12\x02k0" b"\x18\x04" b"\x2a\x03\x00\xac\x02" b"\x38\x64"
                b"\x52\x0e" b"\x0a\x09is_cpu_op" b"\xd8\x01\x01")
        fh = io.BytesIO()
        write_et(fh, m.GlobalMetadata(version="0.0.4"), [node])
        assert fh.getvalue() == b"\x07\x0a\x050.0.4" + bytes([len(body)]) + body

    def test_send_recv_and_partial_groups(self, tmp_path: Path) -> None:
        """A send 0→1 and its recv carry src 0, dst 1, size and tag 0; an all-gather of ranks 0-1 of 3 names group
        "1" in comm_group.json."""
        from schedsim.report.chakra import NODE_TYPES, read_et

        sched = tmp_path / "s.yaml"
        sched.write_text("schema_version: 1\nname: p2p\nworld_size: 3\nops:\n"
                         "  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 1024, duration_us: 5}\n"
                         "  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 1024, duration_us: 5}\n"
                         "  - {name: ag, kind: all_gather, ranks: [0, 1], bytes: 2048, duration_us: 7}\n"
                         "  - {name: c, kind: compute, ranks: [2], duration_us: 3}\n")
        r = run("export", "chakra", str(sched), "--out", str(tmp_path / "et"))
        assert r.exit_code == 0, r.output
        assert json.loads((tmp_path / "et" / "comm_group.json").read_text()) == {"1": [0, 1]}
        _m, n0 = read_et((tmp_path / "et" / "p2p.0.et").read_bytes())
        _m, n1 = read_et((tmp_path / "et" / "p2p.1.et").read_bytes())
        _m, n2 = read_et((tmp_path / "et" / "p2p.2.et").read_bytes())

        def attrs(n: Any) -> dict[str, Any]:
            return {a.name: getattr(a, a.WhichOneof("value")) for a in n.attr}

        assert n0[0].type == NODE_TYPES["COMM_SEND_NODE"] and n1[0].type == NODE_TYPES["COMM_RECV_NODE"]
        for n in (n0[0], n1[0]):
            assert {k: v for k, v in attrs(n).items() if k.startswith("comm_")} == {
                "comm_src": 0, "comm_dst": 1, "comm_size": 1024, "comm_tag": 0}
        assert attrs(n0[1])["pg_name"] == "1" and list(n0[1].data_deps) == [0]
        assert [n.type for n in n2] == [NODE_TYPES["COMP_NODE"]] and n2[0].duration_micros == 3

    def test_comm_tag_follows_the_pairing_of_a_batch(self, tmp_path: Path) -> None:
        """Rank 0 batches sX (1000 B) with sZ (2000 B) around a lone sY (3000 B): NCCL posts the batch at sX, so
        the recvs (1000, 2000, 3000 B) pair sX, sZ, sY; each send carries the tag of the recv of its size (the
        written order of rank 0 gave sY tag 1, the 2000-B recv's)."""
        from schedsim.report.chakra import read_et

        sched = tmp_path / "s.yaml"
        sched.write_text("schema_version: 1\nname: pb\nworld_size: 2\nnccl_init: eager\nops:\n"
                         "  - {name: sX, kind: send, ranks: [0], peer: 1, bytes: 1000, p2p_batch: b}\n"
                         "  - {name: sY, kind: send, ranks: [0], peer: 1, bytes: 3000, stream: other}\n"
                         "  - {name: sZ, kind: send, ranks: [0], peer: 1, bytes: 2000, p2p_batch: b}\n"
                         + "".join(f"  - {{name: r{b}, kind: recv, ranks: [1], peer: 0, bytes: {b}}}\n"
                                   for b in (1000, 2000, 3000)))
        r = run("export", "chakra", str(sched), "--out", str(tmp_path / "et"))
        assert r.exit_code == 0, r.output

        def tags(rank: int) -> dict[int, int]:
            _m, nodes = read_et((tmp_path / "et" / f"pb.{rank}.et").read_bytes())
            out = {}
            for n in nodes:
                a = {x.name: getattr(x, x.WhichOneof("value")) for x in n.attr}
                out[a["comm_size"]] = a["comm_tag"]
            return out

        assert tags(0) == tags(1) == {1000: 0, 2000: 1, 3000: 2}

    def test_without_protobuf_exit_2(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import sys

        from schedsim.report import chakra

        monkeypatch.setattr(chakra, "_CACHE", [])
        monkeypatch.setitem(sys.modules, "google.protobuf", None)
        sched = tmp_path / "s.yaml"
        sched.write_text("schema_version: 1\nname: x\nworld_size: 1\nops:\n  - {name: c, kind: compute, "
                         "duration_us: 3}\n")
        r = run("export", "chakra", str(sched), "--out", str(tmp_path / "et"))
        assert r.exit_code == 2
        assert "the Chakra export needs the protobuf package" in r.output and "schedsim[chakra]" in r.output
        assert not (tmp_path / "et").exists()

    def test_truncated_file_is_refused(self, tmp_path: Path) -> None:
        from schedsim.errors import SchedsimError
        from schedsim.report.chakra import read_et

        with pytest.raises(SchedsimError, match="runs past the end"):
            read_et(b"\x07\x0a\x050.0")
