"""An executed run has three makespans (uninstrumented iteration, instrumented iteration, timeline of median op
times); execute prints one as the makespan with its label and the others as what they are, and compare says
which one its verdict is against (issue 33)."""

from __future__ import annotations

from rich.console import Console

from schedsim.compare import MAKESPAN_LABELS, compare_timelines, makespan_lines, measured_makespans
from schedsim.report.compare import print_comparison
from tests.executor.test_compare_timelines import meas_tl, pred_tl


def _printed(res) -> str:  # type: ignore[no-untyped-def]
    con = Console(record=True, width=300, emoji=False)
    print_comparison(res, console=con)
    return con.export_text()


def test_compare_states_that_the_uninstrumented_makespan_counts() -> None:
    res = compare_timelines(pred_tl(), meas_tl())  # measured timeline 16 s, uninstrumented 15 s, predicted 14 s
    assert res.makespan.counts == "uninstrumented"
    text = _printed(res)
    first = next(line for line in text.splitlines() if line.startswith("makespan"))
    assert "the one that counts" in first and "measured 15.00 s" in first and MAKESPAN_LABELS["uninstrumented"] in first
    assert f"{(14 / 15 - 1) * 100:+.1f}%" in first
    assert f"measured {MAKESPAN_LABELS['timeline']}: predicted 14.00 s vs measured 16.00 s, error -12.5%" in text


def test_without_uninstrumented_iterations_the_timeline_counts_and_says_so() -> None:
    meas = meas_tl()
    meas.meta = {}
    res = compare_timelines(pred_tl(), meas)
    assert res.makespan.counts == "timeline" and res.makespan.uninstrumented is None
    assert "no uninstrumented iterations" in _printed(res)


def test_execute_prints_one_makespan_first_and_labels_the_others() -> None:
    """The issue's run: 5.107 (instrumented), 5.321 (timeline), 3.444 ms (uninstrumented)."""
    mks = measured_makespans({"makespan_median_s": 5.107e-3, "makespan_uninstrumented_s": 3.444e-3}, 5.321e-3)
    assert mks == [("uninstrumented", 3.444e-3), ("instrumented", 5.107e-3), ("timeline", 5.321e-3)]
    lines = makespan_lines({"makespan_median_s": 5.107e-3, "makespan_uninstrumented_s": 3.444e-3}, 5.321e-3)
    assert lines[0].startswith("makespan: 3.444 ms, the uninstrumented iteration") and "compare judges" in lines[0]
    assert lines[1] == f"  also 5.107 ms: the {MAKESPAN_LABELS['instrumented']}"
    assert lines[2] == f"  also 5.321 ms: the {MAKESPAN_LABELS['timeline']}"
    assert [x.split()[0] for x in lines].count("makespan:") == 1  # one makespan, the others labelled
    assert measured_makespans({"makespan_median_s": 0.0}, 1.0) == [("timeline", 1.0)]
