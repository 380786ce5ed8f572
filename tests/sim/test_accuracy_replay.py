"""benchmarks/accuracy/replay_runs.py on a synthetic measured case: a measurement that is the prediction itself,
timed the way execute's CUDA events time it, replays with zero error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, accuracy_script


def _replay_module():
    return accuracy_script("replay_runs")


def test_replay_of_an_event_timed_copy_of_the_prediction_has_no_error(tmp_path, monkeypatch):
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/allgather_mm.yaml"), ["chunks=2", "M=512", "K=512", "N=512"]
    pred = simulate(lower_spec(_load(f, sets), f), load_profile("h200x2"))
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


def test_a_case_measured_in_several_processes_is_judged_by_their_median(tmp_path, monkeypatch):
    """Host-bound cases run in 3 processes (execute/ plus rep2/, rep3/): the makespan error, the measured and
    the hand-written figures are medians over the processes; the replay uses the same median."""
    import json

    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/allgather_mm.yaml"), ["chunks=2", "M=512", "K=512", "N=512"]
    pred = simulate(lower_spec(_load(f, sets), f), load_profile("h200x2"))
    P = pred.makespan_s
    case = tmp_path / "run" / "ag2"
    for sub, factor, ref_ms in (("", 1.0, 0.30), ("rep2", 1.25, 0.50), ("rep3", 1.10, 0.40)):
        d = case / sub / "execute"
        d.mkdir(parents=True)
        pred.__class__(schedule=pred.schedule, source="execute", world_size=pred.world_size, launch=pred.launch,
                       spans=pred.spans, meta={"file": str(f), "set": sets, "timing": "cuda_events",
                                               "makespan_uninstrumented_s": P * factor}).write_json(d / "timeline.json")
        (case / sub / "handwritten.json").write_text(json.dumps({"makespan_median_s": ref_ms / 1e3}))
    (case / "execute" / "compare").mkdir()
    (case / "execute" / "compare" / "compare.json").write_text(json.dumps(
        {"makespan": {"pred_s": P, "uninstrumented": {"error": 0.0}}, "ops": {"median_abs_error": 0.0}}))
    row = accuracy_script("suite_summary").case_summary(case, "ag2")
    assert row["processes"] == 3
    assert row["measured_ms"] == pytest.approx(round(P * 1.10 * 1e3, 4))
    assert (row["measured_min_ms"], row["measured_max_ms"]) == (round(P * 1e3, 4), round(P * 1.25 * 1e3, 4))
    assert row["makespan_error_pct"] == pytest.approx(round((1 / 1.10 - 1) * 100, 2))
    assert row["handwritten_ms"] == 0.4 and (row["handwritten_min_ms"], row["handwritten_max_ms"]) == (0.3, 0.5)
    assert row["executor_overhead_pct"] == pytest.approx(round((P * 1.10 * 1e3 / 0.4 - 1) * 100, 2), abs=0.01)
    rep = _replay_module().replay_case(case, "h200x2")
    assert rep["processes"] == 3
    assert rep["meas_s"] == pytest.approx(P * 1.10)
    assert rep["error"] == pytest.approx(1 / 1.10 - 1)


def test_overhead_table_a_skipped_case_never_replaces_a_measured_one(tmp_path):
    """A one-GPU run writes 'skipped' rows for the 2-GPU cases; combined after a 2-GPU run, those keep the
    measured rows, while a later measured row does replace an earlier one."""
    mod = accuracy_script("executor_overhead_table")
    cols = "case,status,measured_ms,handwritten_ms,note\n"
    a, b = tmp_path / "x2.csv", tmp_path / "x1.csv"
    a.write_text(cols + "tp_ffn_tp2,ok,0.311,0.2301,\noffload_1gpu,ok,6.79,6.51,\n")
    b.write_text(cols + "tp_ffn_tp2,skipped,,,skipped: needs 2 GPUs\noffload_1gpu,ok,6.38,6.28,\n"
                 "small_ops_eager_1gpu,skipped,,,skipped: time budget\n")
    rows = mod.read_rows([a, b])
    assert rows["tp_ffn_tp2"]["measured_ms"] == "0.311"
    c = tmp_path / "rerun.csv"
    c.write_text(cols + "tp_ffn_tp2,failed: timeout,,,\n")  # a re-run that ran and failed is news: it replaces
    assert mod.read_rows([a, b, c])["tp_ffn_tp2"]["status"] == "failed: timeout"
    assert rows["offload_1gpu"]["measured_ms"] == "6.38"
    assert rows["small_ops_eager_1gpu"]["status"] == "skipped"  # nothing measured before: the skip is kept


def test_process_host_replays_with_the_host_costs_the_run_measured(tmp_path, monkeypatch):
    """--process-host: a run measured with --measure-host (meta.host_costs_us) is predicted with those costs. The
    measurement is the prediction made with doubled host costs, so only that replay has no error."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.hardware.profile import HardwareProfile, load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/small_ops_graph.yaml"), ["layers=8"]
    base = load_profile("h200")
    host = {"eager_per_op_us": 2 * base.launch.eager_per_op_us, "elementwise_call_us": 13.3,
            "event_wait_us": 4.0, "stream_switch_us": 3.0}
    d = base.model_dump()
    d["launch"].update(host)
    pred = simulate(lower_spec(_load(f, sets), f), HardwareProfile.model_validate(d), launch="eager")
    meas = pred.__class__(schedule=pred.schedule, source="execute", world_size=1, launch="eager",
                          spans=pred.spans, meta={"file": str(f), "set": sets, "host_costs_us": host,
                                                  "makespan_uninstrumented_s": pred.makespan_s})
    case = tmp_path / "run" / "so" / "execute"
    case.mkdir(parents=True)
    meas.write_json(case / "timeline.json")
    mod = _replay_module()
    own = mod.replay_case(case.parent, "h200", process_host=True)
    assert own["error"] == pytest.approx(0.0, abs=1e-9) and own["profile"] == "h200+host_of_this_run"
    assert mod.replay_case(case.parent, "h200")["error"] < -0.2  # the profile's host: much faster than measured


def test_a_timed_eager_run_replays_against_the_prediction_of_the_run_as_timed(tmp_path, monkeypatch):
    """An eager run that measured its timing cost (meta.timing_host_per_op_us): the replay holds its ops against
    HardwareProfile.timed_eager of that cost (no error when the measurement is that prediction) and its
    uninstrumented makespan against the plain prediction."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.compare import op_window
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/small_ops_graph.yaml"), ["layers=8"]
    prog = lower_spec(_load(f, sets), f)
    plain = simulate(prog, load_profile("h200"), launch="eager")
    timed = simulate(prog, load_profile("h200").timed_eager(4.0), launch="eager", model_executor=True)
    assert timed.makespan_s > plain.makespan_s  # a host-bound case: the timing cost shows
    win = op_window(timed, stream_reached=True)
    meas = timed.__class__(schedule=timed.schedule, source="execute", world_size=1, launch="eager",
                           spans=[s._replace(start_s=win[s.id][0], ready_s=s.stream_s, stream_s=None, solo_s=None)
                                  for s in timed.spans],
                           meta={"file": str(f), "set": sets, "timing": "cuda_events", "timing_host_per_op_us": 4.0,
                                 "makespan_uninstrumented_s": plain.makespan_s,
                                 "host_issue_uninstrumented_s": [1.25 * plain.meta["host_issue_s"][0]]})
    case = tmp_path / "run" / "so" / "execute"
    case.mkdir(parents=True)
    meas.write_json(case / "timeline.json")
    row = _replay_module().replay_case(case.parent, "h200")
    assert row["op_median"] == pytest.approx(0.0, abs=1e-9) and row["error"] == pytest.approx(0.0, abs=1e-9)
    assert row["host_error"] == pytest.approx(-0.2)  # the host measured 1.25x the predicted issue time


def test_each_measure_host_process_is_replayed_with_its_own_costs(tmp_path, monkeypatch):
    """--process-host on the suite's layout: the --measure-host process is rep2/ (execute/ measured without it).
    That process, predicted with its own settled costs, has no error when it ran as that prediction; its first
    64x64 loop (19.0 µs, slowed) gives way to its later timing of the same call (matmul_loop_us)."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.hardware.profile import HardwareProfile, load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/small_ops_graph.yaml"), ["layers=8"]
    base = load_profile("h200")
    d = base.model_dump()
    d["launch"].update({"eager_per_op_us": 12.0, "elementwise_call_us": 6.0})
    ran = simulate(lower_spec(_load(f, sets), f), HardwareProfile.model_validate(d), launch="eager")
    host = {"eager_per_op_us": 19.0, "matmul_loop_us": 12.0, "elementwise_call_us": 6.0}
    for sub, meta in (("execute", {}), ("rep2/execute", {"host_costs_us": host})):
        case = tmp_path / "run" / "so" / sub
        case.mkdir(parents=True)
        ran.__class__(schedule=ran.schedule, source="execute", world_size=1, launch="eager", spans=ran.spans,
                      meta={"file": str(f), "set": sets, "makespan_uninstrumented_s": ran.makespan_s,
                            "host_issue_uninstrumented_s": ran.meta["host_issue_s"],
                            "host_call_end_s": ran.meta["host_call_end_s"], **meta}
                      ).write_json(case / "timeline.json")
    mod = _replay_module()
    row = mod.replay_case(tmp_path / "run" / "so", "h200", process_host=True)
    (own,) = row["process_host"]
    assert own["process"] == "rep2"
    assert own["error"] == pytest.approx(0.0, abs=1e-9) and own["host_error"] == pytest.approx(0.0, abs=1e-9)
    assert "| so | rep2 |" in mod.process_host_table([row])


def test_host_call_misses_by_call_and_the_call_before(tmp_path, monkeypatch):
    """--host-calls: measured less predicted host time per call, classed by op kind and the previous call's kind.
    A measurement whose third call (an act, after a matmul) returned 2 µs late, everything after it too: that
    call is 2 µs long, every other call as predicted."""
    from schedsim.api import lower_spec
    from schedsim.cli import _build
    from schedsim.clicore import load as _load
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate

    monkeypatch.chdir(ROOT)
    f, sets = Path("schedules/small_ops_graph.yaml"), ["layers=2"]
    G = _build(_load(f, sets), f)
    pred = simulate(lower_spec(_load(f, sets), f), load_profile("h200"), launch="eager")
    ends = dict(pred.meta["host_call_end_s"])
    ids = list(ends)
    assert ids[:3] == ["up0@r0", "act0@r0", "side0@r0"]
    late = {k: v + (2e-6 if i >= 1 else 0.0) for i, (k, v) in enumerate(ends.items())}
    case = tmp_path / "run" / "so" / "execute"
    case.mkdir(parents=True)
    pred.__class__(schedule=pred.schedule, source="execute", world_size=1, launch="eager", spans=pred.spans,
                   meta={"file": str(f), "set": sets, "host_call_end_s": late}).write_json(case / "timeline.json")
    got = _replay_module().host_call_misses(case.parent, G, pred)
    assert sorted(got) == ["compute after matmul", "matmul after compute", "matmul after matmul", "matmul first"]
    assert got["compute after matmul"] == pytest.approx([2e-6, 0.0, 0.0])  # act0, act1, join
    assert got["matmul first"] == [0.0] and all(x == pytest.approx(0.0) for x in got["matmul after matmul"])
    # by place among the rank's calls of the kind: act0 is its first compute call, act1 and join the 2nd and 3rd
    places = _replay_module().host_call_places(case.parent, G, pred)
    assert [(p, m) for c, p, m in places if c == "compute after matmul"] == [
        ("1st", pytest.approx(2e-6)), ("2nd-3rd", pytest.approx(0.0)), ("2nd-3rd", pytest.approx(0.0))]
    md = _replay_module().host_call_table([{"case": "so", "host_calls": got, "host_call_places": places}])
    (line,) = [ln for ln in md.splitlines() if "| compute after matmul |" in ln]
    assert line.startswith("| so | compute after matmul | 3 | +0.00 µs | +2.00 | ") and line.endswith("0.00 |  |")


def test_process_phases_compare_the_uninstrumented_issue_with_the_stamped_one(tmp_path):
    """--host-calls, per process: rank 0's lean issue (median of the uninstrumented iterations) over its last stamped
    call end. A process whose uninstrumented iterations issued in 4.0 ms and its stamped ones in 2.5 ms reads 1.6;
    one whose two phases agree reads 1.0; a process without stamped calls is left out."""
    from schedsim.sim.timeline import Timeline

    mod = _replay_module()
    case = tmp_path / "run" / "tpw"
    procs = {"execute": (4.0e-3, {"a@r0": 1.0e-3, "b@r0": 2.5e-3, "c@r1": 9.0e-3}, [2.4e-3, 4.1e-3, 14.2e-3]),
             "rep2/execute": (2.5e-3, {"a@r0": 1.2e-3, "b@r0": 2.5e-3}, None),
             "rep3/execute": (2.5e-3, {}, None)}
    for sub, (lean, calls, its) in procs.items():
        (case / sub).mkdir(parents=True)
        meta = {"host_issue_uninstrumented_s": [lean], "host_call_end_s": calls}
        if its:
            meta["makespan_uninstrumented_iters_s"] = its
        Timeline(schedule="tpw", source="execute", world_size=2, launch="eager", spans=[], meta=meta).write_json(
            case / sub / "timeline.json")
    got = mod.process_phases(case)
    assert [p["process"] for p in got] == ["execute", "rep2"]
    assert got[0]["ratio"] == pytest.approx(1.6) and got[0]["stamped_issue_s"] == 2.5e-3  # rank 1's call is not r0's
    assert (got[0]["iter_min_s"], got[0]["iter_max_s"]) == (2.4e-3, 14.2e-3)
    assert got[1]["ratio"] == pytest.approx(1.0) and got[1]["iter_min_s"] is None
    table = mod.process_phase_table([{"case": "tpw", "phases": got}])
    assert "| tpw | execute | 4.000 | 2.500 | 1.60 | 2.400–14.200 |" in table
    assert "| tpw | rep2 | 2.500 | 2.500 | 1.00 |  |" in table


def test_a_file_given_as_a_run_folder_is_refused_with_exit_2(tmp_path, capsys):
    tgz = tmp_path / "runs.tgz"
    tgz.write_bytes(b"\x1f\x8b")
    with pytest.raises(SystemExit) as e:
        _replay_module().main([str(tgz)])
    assert e.value.code == 2
    assert f"{tgz}: not a run folder" in capsys.readouterr().err
