"""benchmarks/accuracy/suite_summary.py on a case measured in several processes: the medians over processes, their
range, and how many processes the drift warning flagged and ran in the slow mode, on the real iterations of one H100
machine (tp_allreduce_graph world 1 eager, four `schedsim execute` and four hand-written processes alternated,
2026-12-07 08:31-08:38 UTC; docs/validation.md, "the host-bound process spread")."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.conftest import accuracy_script

ROOT = Path(__file__).resolve().parents[2]

DATA = ROOT / "tests" / "data" / "tpa_eager_h100_processes.json"  # each process's iterations, µs, as written


def _summary_module():
    return accuracy_script("suite_summary")


def _case(tmp_path: Path) -> Path:
    d = tmp_path / "tpa_eager"
    runs = json.loads(DATA.read_text())
    assert [len(p) for side in ("execute_us", "reference_us") for p in runs[side]] == [20] * 8
    for i, (ex, ref) in enumerate(zip(runs["execute_us"], runs["reference_us"], strict=True)):
        sub = d if i == 0 else d / f"rep{i + 1}"
        (sub / "execute").mkdir(parents=True)
        meta = {"makespan_uninstrumented_s": statistics.median(ex) * 1e-6, "makespan_uninstrumented_iters_s":
                [x * 1e-6 for x in ex]}
        (sub / "execute" / "timeline.json").write_text(json.dumps({"world_size": 1, "launch": "eager", "meta": meta}))
        (sub / "handwritten.json").write_text(json.dumps({"makespan_median_s": statistics.median(ref) * 1e-6,
                                                         "makespans_s": [x * 1e-6 for x in ref]}))
    (d / "execute" / "compare").mkdir()
    (d / "execute" / "compare" / "compare.json").write_text(json.dumps(
        {"makespan": {"pred_s": 235.2e-6, "error": 0.0, "uninstrumented": {"pred_s": 235.2e-6}}, "ops": {}}))
    return d


def test_a_case_in_four_processes_reports_their_median_range_drift_and_slow_mode(tmp_path):
    """By hand: the execute processes' medians 236.55, 256.3, 410.9, 263.65 µs (median 259.975, range 236.55-410.9);
    the references' 238.5, 415.9, 253.85, 421.25 (median 334.875). Quarter medians (5 iterations each): execute
    process 2 294.0, 274.1, 247.0, 240.5 (1.22x > 1.15: flagged; process 4 287.5/250.7 = 1.147: not), reference 3
    299.6, 248.3, 238.7, 265.6 (1.26x: flagged). Slow: above 1.15 x the fastest (236.55 -> 272.0; 238.5 -> 274.3):
    execute 410.9, one; reference 415.9 and 421.25, two. Error 235.2 / 259.975 - 1 = -9.53 %."""
    row = _summary_module().case_summary(_case(tmp_path), "tpa_eager")
    assert row["processes"] == 4
    assert row["measured_ms"] == pytest.approx(0.26, abs=1e-4)
    assert (row["measured_min_ms"], row["measured_max_ms"]) == pytest.approx((0.2366, 0.4109), abs=1.1e-4)
    assert row["handwritten_ms"] == pytest.approx(0.3349, abs=1e-4)
    assert (row["handwritten_min_ms"], row["handwritten_max_ms"]) == pytest.approx((0.2385, 0.4213), abs=1.1e-4)
    assert (row["measured_drift_flagged"], row["handwritten_drift_flagged"]) == (1, 1)
    assert (row["measured_slow_processes"], row["handwritten_slow_processes"]) == (1, 2)
    assert row["makespan_error_pct"] == pytest.approx(-9.53, abs=0.01)
    assert row["predicted_ms"] == pytest.approx(0.2352)
    line = _summary_module().spread_line(row)
    assert line.startswith("tpa_eager, 4 processes: execute 0.26 ms [")
    assert "drift-flagged 1, slow 1; hand-written 0.3349 ms [" in line and line.endswith("drift-flagged 1, slow 2")


def test_one_process_reports_no_spread(tmp_path):
    """A case run once (GPU-bound cases): no process count, range or flags, as before."""
    d = tmp_path / "chain2"
    (d / "execute").mkdir(parents=True)
    (d / "execute" / "timeline.json").write_text(json.dumps(
        {"world_size": 1, "launch": "eager", "meta": {"makespan_uninstrumented_s": 373e-6,
                                                      "makespan_uninstrumented_iters_s": [373e-6] * 20}}))
    row = _summary_module().case_summary(d, "chain2")
    assert row["measured_ms"] == pytest.approx(0.373)
    assert row["processes"] is None and row["measured_drift_flagged"] is None and row["measured_slow_processes"] is None
    assert _summary_module().spread_line(row) == ""


def test_a_side_with_fewer_processes_says_how_many_and_absent_times_stay_empty(tmp_path):
    """One execute process that wrote no per-op timed makespan, beside four reference processes (three failed
    execute processes wrote nothing): the execute side's count is 1, its per-op column empty (not 0.0 ms). Slow
    references: 0.24 and 0.26 ms, above 1.15 x the fastest 0.20 (0.23); no iterations, so none drift-flagged."""
    d = tmp_path / "c2"
    (d / "execute").mkdir(parents=True)
    (d / "execute" / "timeline.json").write_text(json.dumps(
        {"world_size": 1, "launch": "eager", "meta": {"makespan_uninstrumented_s": 300e-6}}))
    for i, sub in enumerate([d, d / "rep2", d / "rep3", d / "rep4"]):
        sub.mkdir(exist_ok=True)
        (sub / "handwritten.json").write_text(json.dumps({"makespan_median_s": (200 + 20 * i) * 1e-6}))
    mod = _summary_module()
    row = mod.case_summary(d, "c2")
    assert (row["processes"], row["measured_processes"], row["handwritten_processes"]) == (4, 1, 4)
    assert row["measured_ms"] == pytest.approx(0.3) and row["measured_per_op_timed_ms"] is None
    assert row["handwritten_ms"] == pytest.approx(0.23)  # median of 0.20, 0.22, 0.24, 0.26
    assert mod.spread_line(row) == ("c2, 4 processes: execute 0.3 ms [0.3, 0.3] (of 1 process), drift-flagged 0, "
                                    "slow 0; hand-written 0.23 ms [0.2, 0.26], drift-flagged 0, slow 2")


def test_a_failed_first_process_beside_later_ones_that_ran_is_ok_and_says_so(tmp_path):
    """The first execute process failed (a failure record, no timeline) and rep2-rep4 ran: 0.26, 0.25 and 0.40 ms
    (median 0.26). The row is "ok" with their median and range, as its times say, not "failed"; the note names the
    first process's error and the folder the one-process columns come from (rep2's compare: predicted 0.2352 ms).
    With no process at all that ran, "failed" with the first one's error, as before."""
    d = tmp_path / "tpa_eager"
    (d / "execute").mkdir(parents=True)
    (d / "execute" / "failure_rank0.json").write_text(json.dumps({"error": "NCCL error: unhandled system error"}))
    for i, ms in ((2, 0.26), (3, 0.25), (4, 0.40)):
        ex = d / f"rep{i}" / "execute"
        ex.mkdir(parents=True)
        (ex / "timeline.json").write_text(json.dumps(
            {"world_size": 1, "launch": "eager", "meta": {"makespan_uninstrumented_s": ms * 1e-3,
                                                          "makespan_uninstrumented_iters_s": [ms * 1e-3] * 20}}))
        (d / f"rep{i}" / "handwritten.json").write_text(json.dumps({"makespan_median_s": 0.25e-3}))
    (d / "rep2" / "execute" / "compare").mkdir()
    (d / "rep2" / "execute" / "compare" / "compare.json").write_text(json.dumps(
        {"makespan": {"pred_s": 235.2e-6, "uninstrumented": {"pred_s": 235.2e-6}}, "ops": {}}))
    mod = _summary_module()
    row = mod.case_summary(d, "tpa_eager")
    assert row["status"] == "ok" and (row["world_size"], row["launch"]) == (1, "eager")
    assert (row["measured_ms"], row["measured_min_ms"], row["measured_max_ms"]) == pytest.approx((0.26, 0.25, 0.4))
    assert row["measured_processes"] == 3 and row["predicted_ms"] == pytest.approx(0.2352)
    assert row["makespan_error_pct"] == pytest.approx((0.2352 / 0.26 - 1) * 100, abs=0.01)
    assert row["note"] == ("first execute process failed: NCCL error: unhandled system error; one-process columns "
                           "from rep2/")
    for i in (2, 3, 4):
        (d / f"rep{i}" / "execute" / "timeline.json").unlink()
    row = mod.case_summary(d, "tpa_eager")
    assert row["status"] == "failed: NCCL error: unhandled system error" and row["measured_ms"] is None
    assert row["note"] == ""


def test_the_ab_table_gives_each_process_and_the_median_over_a_cases_processes(tmp_path):
    """Two `harness.py ab` processes of one case, by hand: executor 0.26 / 0.40 ms against 0.25 / 0.38 (the second
    process in a slow mode, both sides), +4.0 % and +5.26 %; median row 0.33 / 0.315 ms, +4.63 %, blocks over both
    -1.0 .. +9.0 %. A case with one process has no median row."""
    work = tmp_path / "work"
    for case, runs in (("tpa_eager", [(0.26, 0.25, [0.03, 0.05]), (0.40, 0.38, [-0.01, 0.09])]),
                       ("chain2", [(0.36, 0.36, [0.0, 0.001])])):
        (work / case).mkdir(parents=True)
        for i, (ex, ref, pairs) in enumerate(runs, 1):
            (work / case / f"ab_{i}.json").write_text(json.dumps(
                {"executor_s": ex * 1e-3, "reference_s": ref * 1e-3, "executor_vs_ref": ex / ref - 1, "pairs": pairs}))
    rows = _summary_module().ab_table(work, tmp_path / "out")
    assert [(r["case"], r["process"]) for r in rows] == [("chain2", "1"), ("tpa_eager", "1"), ("tpa_eager", "2"),
                                                         ("tpa_eager", "median")]
    assert [r["executor_vs_handwritten_pct"] for r in rows] == [0.0, 4.0, 5.26, 4.63]
    med = rows[-1]
    assert (med["executor_ms"], med["handwritten_ms"], med["blocks_min_pct"], med["blocks_max_pct"]) == \
        (0.33, 0.315, -1.0, 9.0)
    assert json.loads((tmp_path / "out" / "ab.json").read_text()) == rows
    assert (tmp_path / "out" / "ab.md").read_text().splitlines()[2] == "| chain2 | 1 | 0.36 | 0.36 | 0.0 | 0.0 | 0.1 |"


def test_collect_that_fails_leaves_the_previous_table(tmp_path):
    # a summary.json of an older suite holds a column the table no longer has: csv.DictWriter refuses the row after
    # the header was written; the previous OUT/summary.csv stays whole (written beside it, then renamed)
    m = _summary_module()
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "a").mkdir(parents=True)
    (work / "a" / "summary.json").write_text(json.dumps({"case": "a", "retired_column": 1}))
    out.mkdir()
    (out / "summary.csv").write_text("the previous table\n")
    with pytest.raises(ValueError, match="retired_column"):
        m.collect(work, out)
    assert (out / "summary.csv").read_text() == "the previous table\n"
    assert sorted(p.name for p in out.iterdir()) == ["summary.csv"]  # no temporary file left
