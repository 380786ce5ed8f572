"""End to end on CPU ranks (gloo) under torchrun: execute -> timeline -> compare, --check,
world-size mismatch, timeouts, calibrate. Each torchrun start costs seconds on a 2-core CI machine,
so each test checks several things of one run, and the runs that need no launch of their own share one
per world size (the ``gloo2`` / ``gloo3`` fixtures of tests/conftest.py)."""

from __future__ import annotations

import json
import sys

import pytest
from exec_helpers import DATA, ROOT, schedsim, torchrun

from schedsim.cli import app

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")



def _no_temp_files(d) -> None:
    assert not [p for p in d.rglob("*") if p.name.endswith(".tmp")], "a half-written file was left behind"


def test_execute_check_profiler_compare_2_ranks(gloo2) -> None:
    """The issue's 'done' command, cut down with --set: allgather_mm8 on 2 gloo ranks, checked and compared."""
    r, base = gloo2["ag8"]
    out = base / "ag8"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "check PASSED" in r.stdout
    # one makespan, the uninstrumented iteration's, the others labelled; compare says which one it judges
    assert [line.split(",")[1].strip()[:34] for line in r.stdout.splitlines() if line.startswith("makespan: ")] == \
        ["the uninstrumented iteration (medi"]
    assert "makespan (this is the one that counts)" in r.stdout
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    assert tl.source == "execute" and tl.world_size == 2 and tl.schedule == "allgather_mm8"
    assert len(tl.spans) == 2 * (1 + 8 + 64 + 64) and {s.rank for s in tl.spans} == {0, 1}
    assert all(s.end_s >= s.start_s >= 0 for s in tl.spans)
    assert tl.meta["check"]["ok"] and tl.meta["check"]["max_rel_err"] < 1e-5
    assert tl.meta["iterations"] == 3 and "makespan_uninstrumented_s" in tl.meta
    assert tl.meta["warmup_uninstrumented"] == 1  # --warmup 1: the uninstrumented loop's own untimed iteration
    by = tl.by_id()
    # collectives start together on both ranks (rendezvous)
    assert by["ag0@r0"].start_s == pytest.approx(by["ag0@r1"].start_s)
    cmp = json.loads((out / "compare" / "compare.json").read_text())
    assert cmp["match"]["mode"] == "id" and cmp["match"]["matched"] == len(tl.spans)
    assert cmp["makespan"]["meas_s"] == pytest.approx(tl.makespan_s)
    assert "uninstrumented" in cmp["makespan"]
    env = json.loads((out / "env.json").read_text())
    assert env["backend"] == "gloo" and len(env["ranks"]) == 2 and env["torch"] == torch.__version__
    assert (out / "kineto_rank0.json.gz").exists() and (out / "kineto_rank1.json.gz").exists()
    prof = json.loads((out / "profiler_ops.json").read_text())
    assert set(prof["0"]["ops"]) >= {"ag0", "mm0_0", "add7_7"}
    json.loads((out / "trace.json").read_text())
    _no_temp_files(out)


def test_1f1b_pipeline_3_ranks(gloo3) -> None:
    """A Megatron-style 1F1B pipeline (send/recv between stages, tied-embedding all_reduce) on 3 ranks: the
    middle stage receives and sends in both directions (run in the shared 3-rank launch)."""
    r, base = gloo3["pp3"]
    out = base / "pp3"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    assert tl.world_size == 3 and {"send", "recv", "all_reduce", "matmul"} <= {s.kind for s in tl.spans}
    # the middle stage sends and receives both ways: activations from 0 and to 2, gradients from 2 and to 0
    assert {(s.rank, s.kind) for s in tl.spans if s.kind in ("send", "recv")} == {
        (r, k) for r in range(3) for k in ("send", "recv")}
    assert sum(1 for s in tl.spans if s.rank == 1 and s.kind == "send") == 2 * 4  # m = 4, each way
    cmp = json.loads((out / "compare" / "compare.json").read_text())
    assert cmp["match"]["mode"] == "id" and cmp["match"]["n_only_pred"] == 0 and cmp["match"]["n_only_meas"] == 0


def test_tp_ffn_check_2_ranks(gloo2) -> None:
    r, _base = gloo2["tp_ffn"]
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "check PASSED: TP output" in r.stdout


def test_world_size_mismatch_fails_before_any_collective(tmp_path) -> None:
    # one process; a hang waiting for the missing rank would trip the subprocess timeout
    r = schedsim(["execute", "schedules/allgather_mm8.yaml", "--out", str(tmp_path / "x")], timeout=60)
    assert r.returncode == 2
    assert "the schedule has world_size 2 but 1 process(es) were started" in r.stderr
    assert "--nproc-per-node 2" in r.stderr and "--set world_size=1" in r.stderr
    assert not (tmp_path / "x" / "timeline.json").exists()


def test_calibrate_refuses_a_json_out_before_measuring(tmp_path) -> None:
    # the raw measurements go to --out with the suffix .json: an --out of .json would be the profile, then the raw
    # measurements over it (the profile lost); refused before any measurement, the file untouched
    out = tmp_path / "p.json"
    out.write_text("the user's own file")
    r = schedsim(["calibrate", "--quick", "--device", "cpu", "--out", str(out)], timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{out}: --out is the profile YAML" in r.stderr and "fix: name it" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and out.read_text() == "the user's own file"


def test_timeout_names_the_op_and_the_missing_rank(tmp_path) -> None:
    out = tmp_path / "to"
    # the 2 s op timeout must surface well within the subprocess's own 60 s limit
    r = torchrun(2, ["execute", str(DATA / "timeout_demo.yaml"), "--timeout", "2", "--no-gantt", "--out", str(out)],
                 timeout=60)
    assert r.returncode != 0
    assert "timeout after" in r.stderr and "'ar' (ar@r0)" in r.stderr and "rank(s) [1]" in r.stderr
    f = json.loads((out / "failure_rank0.json").read_text())
    assert f["op"] == "ar@r0" and f["missing_ranks"] == [1] and f["phase"] == "warm-up"
    assert "host at op 'long'" in f["error"]
    assert not (out / "timeline.json").exists()
    _no_temp_files(out)


def test_calibrate_quick_2_ranks_writes_a_profile_predict_accepts(gloo2, tmp_path) -> None:
    r, base = gloo2["calibrate"]
    prof = base / "cpu_cal.yaml"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "sendrecv"):
        assert f"# {kind} over 2 ranks" in r.stdout
    assert "#wrong" in r.stdout and "[gemm 1/" in r.stdout
    from schedsim.hardware.profile import load_profile

    p = load_profile(str(prof))
    assert p.name == "cpu_cal" and 2 in p.collectives.tables["all_reduce"]
    # the sweep feeds the tier fitter of --from-nccl-tests (base h200 has topology.scale_up): fitted figures, the
    # sweep named; on stderr the fit's table (stdout may hold the profile)
    up = p.topology.scale_up
    assert up is not None and up.timing and all(t.provenance == "fitted" for t in up.timing.values())
    assert all(t.source.startswith("fitted by schedsim calibrate (its collective sweep) to its collective sweep over "
                                   "2 ranks on 1 node(s) (gloo; CPU, ") for t in up.timing.values())
    assert "fitted tier figures" in r.stderr and "fitted tier figures" not in r.stdout
    # plain PyTorch's host costs by kind (issue 15 §3); unbatched p2p measured beside the batched ring
    assert "# p2p_unbatched over 2 ranks" in r.stdout
    assert p.launch.p2p_call_us > 0 and p.launch.batch_p2p_call_us > 0 and p.launch.memcpy_call_us > 0
    assert p.launch.event_wait_us is None  # no CUDA events on CPU ranks: the model's default applies
    assert any(e[1:4] == (32, 32, 32) for e in p.gemm.entries)
    raw = json.loads(prof.with_suffix(".json").read_text())
    assert all(row["wrong"] == 0 for rows in raw["collectives"].values() for row in rows)
    # host costs by kind: the median over 2 fresh processes (--host-processes 2), the in-process figures kept
    fresh = raw["host_fresh_processes"]
    assert len(fresh) == 2 and "[launch] fresh process 2/2" in r.stdout
    assert raw["host_in_process"]["eager_per_op_us"] > 0
    for k in ("eager_per_op_us", "memcpy_call_us", "elementwise_call_us"):
        assert raw["host"][k] == pytest.approx((fresh[0][k] + fresh[1][k]) / 2)
        assert getattr(p.launch, k) == round(raw["host"][k], 2)
    assert ("eager_per_op_us, memcpy_call_us, elementwise_call_us, executor_extra_per_op_us, first_op_extra_us are "
            "medians over 2 fresh processes") in p.launch.source  # only the kinds a CPU rank measures
    # the first matmul after a synchronize is a call-side figure: the fresh processes' (worlds of one) median; the
    # collective call's figure is this 2-rank communicator's own (a fresh process measures a world of one)
    assert raw["host"]["first_op_extra_us"] == pytest.approx(
        (fresh[0]["first_op_extra_us"] + fresh[1]["first_op_extra_us"]) / 2)
    assert "eager_per_collective_us" in fresh[0] and raw["host"]["eager_per_collective_us"] > 0
    assert raw["host"]["eager_per_collective_us"] == raw["host_in_process"]["eager_per_collective_us"]
    assert "[launch] communication calls, host time: collective_loop_us " + \
        f"{raw['host_in_process']['collective_loop_us']:.2f}" in r.stdout
    assert raw["host_fresh_requested"] == 2
    # what CPU ranks cannot measure comes from the base profile, and the source says so
    assert "duplex factors (h2d_slowdown_beside_d2h, d2h_slowdown_beside_h2d) from 'h200'" in p.contention.source
    assert "copy factors (compute_slowdown_with_copy, copy_slowdown_with_compute) from 'h200'" in p.contention.source
    base = load_profile("h200").contention
    assert p.contention.h2d_slowdown_beside_d2h == base.h2d_slowdown_beside_d2h
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, ["predict", "schedules/tp_ffn.yaml", "--set", "tp=2", "--profile", str(prof),
                                   "--no-gantt", "--out", str(tmp_path / "pred")])
    assert res.exit_code == 0, res.output


def test_cli_never_imports_torch() -> None:
    import subprocess

    code = ("import sys, typer, schedsim.cli as c; g = typer.main.get_command(c.app); "
            "names = set(g.list_commands(None)); "
            "assert {'execute', 'calibrate', 'compare', 'import', 'analyze'} <= names, names; "
            "assert all(g.get_command(None, n) is not None for n in names); assert 'torch' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_op_kind_3_ranks(gloo3) -> None:
    """All collective kinds, a sub-group all_reduce, tagged send/recv both ways, memcpy, FLOP-sized compute."""
    r, base = gloo3["all_kinds"]
    out = base / "all_kinds"
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from schedsim.sim.timeline import Timeline

    tl = Timeline.read_json(out / "timeline.json")
    by = tl.by_id()
    assert len(by) == 39 and "pair_ar@r2" not in by
    for a, b in (("s01@r0", "r01@r1"), ("s10@r1", "r10@r0"), ("pair_ar@r0", "pair_ar@r1")):
        assert by[a].start_s == pytest.approx(by[b].start_s)
    notes = tl.meta["materialised"]
    assert "async on gloo" in notes["sc"] and "GEMM" in notes["tail"] and "copy_ h2d" in notes["cp"]
