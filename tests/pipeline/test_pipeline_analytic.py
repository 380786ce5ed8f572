"""Closed forms and the unit-time simulator against pipelines.md §3/§4."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedsim.pipeline import (
    DeadlockError,
    ScheduleConfigError,
    bubble_fraction_of_ideal,
    bubble_fraction_of_makespan,
    dualpipe_bubble_time,
    generate,
    one_f_one_b_bubble_time,
    parse_order,
    peak_activation_memory,
    stage_to_rank,
    unit_time_closed_form,
    unit_time_makespan,
    zb_h1_bubble_time,
    zb_h2_bubble_time,
)

# pipelines.md §4: makespan / bubble, per-chunk F = I = W = 1, B = 2
TABLE = {
    (4, 8): {
        "gpipe": (33, 0.2727),
        "1f1b": (33, 0.2727),
        "interleaved_1f1b": (57, 0.1579),
        "zb_h1": (27, 0.1111),
        "zbv": (51, 0.0588),
        "dualpipev": (54, 0.1111),
    },
    (8, 16): {
        "gpipe": (69, 0.3043),
        "1f1b": (69, 0.3043),
        "interleaved_1f1b": (117, 0.1795),
        "zb_h1": (55, 0.1273),
        "zbv": (103, 0.0680),
        "dualpipev": (110, 0.1273),
    },
    (8, 32): {
        "gpipe": (117, 0.1795),
        "1f1b": (117, 0.1795),
        "interleaved_1f1b": (213, 0.0986),
        "zb_h1": (103, 0.0680),
        "zbv": (199, 0.0352),
        "dualpipev": (206, 0.0680),
    },
}
CELLS = [(p, m, name, *TABLE[(p, m)][name]) for (p, m) in TABLE for name in TABLE[(p, m)]]

# pipelines.md §4: peak memory per rank at p=4, m=8
PEAK_P4_M8 = {
    "gpipe": [8, 8, 8, 8],
    "1f1b": [4, 3, 2, 1],
    "interleaved_1f1b": [5.5, 4.5, 3.5, 2.5],
    "zb_h1": [4, 4, 4, 4],
    "zbv": [4, 4, 4, 4],
    "dualpipev": [4.5, 4.5, 4.5, 4.5],
}


def simulate(name, p, m, v=None, **kw):
    return unit_time_makespan(generate(name, p, m, v, **kw), stage_to_rank(name, p, v))


@pytest.mark.parametrize(("p", "m", "name", "makespan", "bubble"), CELLS)
def test_reference_table(p, m, name, makespan, bubble):
    res = simulate(name, p, m)
    assert res.makespan == makespan
    assert round(res.bubble, 4) == bubble
    assert unit_time_closed_form(name, p, m) == (makespan, pytest.approx(res.bubble, abs=1e-12))


@pytest.mark.parametrize("name", list(PEAK_P4_M8))
def test_reference_peak_memory(name):
    res = simulate(name, 4, 8)
    assert [res.peak_memory[r] for r in range(4)] == PEAK_P4_M8[name]
    assert [peak_activation_memory(name, 4, 8, r) for r in range(4)] == PEAK_P4_M8[name]


def test_reference_relations():
    # §4: 1F1B bubble 3/11, ZB-H1 = 1/3 of 1F1B's bubble time, interleaved (p-1)/(vm+p-1)
    one = simulate("1f1b", 4, 8)
    zb = simulate("zb_h1", 4, 8)
    assert one.bubble == pytest.approx(3 / 11)
    idle = lambda r: r.makespan * 4 - sum(r.busy.values())
    assert idle(zb) * 3 == idle(one)
    assert simulate("interleaved_1f1b", 4, 8).bubble == pytest.approx(bubble_fraction_of_makespan(4, 8, 2))
    # ZB-V keeps p-1 idle units per rank whatever m; DualPipeV 2(p-1)
    for m in (8, 16, 32):
        assert simulate("zbv", 4, m).makespan - 6 * m == 3
        assert simulate("dualpipev", 4, m).makespan - 6 * m == dualpipe_bubble_time(8, 3, 2, 1) == 6


# --------------------------------------------------------------------------- hypothesis (e)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(["gpipe", "1f1b"]), p=st.integers(1, 10), m=st.integers(1, 40))
def test_gpipe_1f1b_bubble_equals_closed_form(name, p, m):
    if name == "1f1b" and m < p:
        m = p
    res = simulate(name, p, m)
    assert res.makespan == 3 * (m + p - 1)
    assert res.bubble == pytest.approx(bubble_fraction_of_makespan(p, m), abs=1e-12)
    assert res.bubble / (1 - res.bubble) == pytest.approx(bubble_fraction_of_ideal(p, m), abs=1e-12)


@settings(max_examples=80, deadline=None)
@given(
    p=st.integers(1, 8),
    k=st.integers(1, 6),
    v=st.integers(2, 4),
    breadth_first=st.booleans(),
)
def test_interleaved_bubble_equals_closed_form(p, k, v, breadth_first):
    m = k * p
    g = m if breadth_first else p
    res = simulate("interleaved_1f1b", p, m, v, group_size=g)
    assert res.makespan == 3 * (v * m + p - 1)
    assert res.bubble == pytest.approx(bubble_fraction_of_makespan(p, m, v), abs=1e-12)
    for r in range(p):
        assert res.peak_memory[r] == peak_activation_memory("interleaved_1f1b", p, m, r, v, group_size=g)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 8), m=st.integers(2, 8), rem=st.integers(0, 8))
def test_interleaved_uneven_last_group(p, m, rem):
    # m mod g >= p (Megatron allows it): still no dependency bubble
    g = p + m
    total = g + p + rem % (g - p + 1)
    if 0 < total % g < p:
        return
    res = simulate("interleaved_1f1b", p, total, 2, group_size=g)
    assert res.bubble == pytest.approx(bubble_fraction_of_makespan(p, total, 2), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["zb_h1", "zbv", "dualpipev"]), p=st.integers(1, 8), extra=st.integers(0, 20))
def test_zero_bubble_family_closed_forms(name, p, extra):
    m = {"zb_h1": p, "zbv": 2 * p - 1, "dualpipev": 2 * p}[name] + extra
    res = simulate(name, p, m)
    makespan, bubble = unit_time_closed_form(name, p, m)
    assert res.makespan == makespan
    assert res.bubble == pytest.approx(bubble, abs=1e-12)
    assert all(res.peak_memory[r] == peak_activation_memory(name, p, m, r) for r in range(p))


# --------------------------------------------------------------------------- formulas


def test_conventions_differ_and_are_named():
    assert bubble_fraction_of_ideal(4, 8) == 3 / 8
    assert bubble_fraction_of_makespan(4, 8) == 3 / 11
    assert bubble_fraction_of_ideal(4, 8, 2) == 3 / 16
    assert bubble_fraction_of_makespan(4, 8, 2) == 3 / 19


def test_zb_paper_table():
    # equal times: ZB-H1 = 1/3 of 1F1B, ZB-H2 = 0
    assert one_f_one_b_bubble_time(8, 1, 1, 1) == 21
    assert zb_h1_bubble_time(8, 1, 1, 1) == 7
    assert zb_h2_bubble_time(8, 1, 1, 1) == 0
    assert zb_h2_bubble_time(8, 1, 1, 2) == 0  # clamped
    assert zb_h1_bubble_time(4, 2.0, 1.5, 0.5) == pytest.approx(9.0)


def test_dualpipe_bubble():
    # DualPipe README: (PP/2-1)(F&B + B - 3W)
    assert dualpipe_bubble_time(16, 3, 2, 1) == 14
    with pytest.raises(ScheduleConfigError, match=r"even number of stages"):
        dualpipe_bubble_time(7, 3, 2, 1)


def test_closed_form_domain_errors():
    with pytest.raises(ScheduleConfigError, match=r"holds for m >= 7 at p=4, got m=5"):
        unit_time_closed_form("zbv", 4, 5)
    with pytest.raises(ScheduleConfigError, match=r"no closed form for 'looped_bfs'"):
        unit_time_closed_form("looped_bfs", 4, 8)
    with pytest.raises(ScheduleConfigError, match=r"rank must be in 0..3"):
        peak_activation_memory("1f1b", 4, 8, 4)


# --------------------------------------------------------------------------- simulator details


def test_golden_spans_with_comm_latency():
    res = unit_time_makespan(generate("gpipe", 2, 2), {0: 0, 1: 1}, comm=0.5)
    spans = {r: [(str(a), s, e) for a, s, e in res.spans[r]] for r in res.spans}
    assert spans == {
        0: [("0F0", 0.0, 1.0), ("0F1", 1.0, 2.0), ("0B0", 6.0, 8.0), ("0B1", 8.0, 10.0)],
        1: [("1F0", 1.5, 2.5), ("1F1", 2.5, 3.5), ("1B0", 3.5, 5.5), ("1B1", 5.5, 7.5)],
    }
    assert res.makespan == 10.0
    assert res.busy == {0: 6.0, 1: 6.0}


def test_custom_costs():
    res = unit_time_makespan(generate("gpipe", 2, 2), {0: 0, 1: 1}, costs={"F": 2, "B": 3})
    assert res.makespan == 15.0
    assert res.spans[1][2][1:] == (6.0, 9.0)
    res2 = unit_time_makespan(generate("gpipe", 2, 2), {0: 0, 1: 1}, costs=lambda a: 1.0)
    assert res2.makespan == 6.0
    with pytest.raises(ScheduleConfigError, match=r"unknown cost key 'X'"):
        unit_time_makespan(generate("gpipe", 2, 2), {0: 0, 1: 1}, costs={"X": 1})


def test_overlap_counts_serially():
    res = unit_time_makespan(generate("dualpipev", 4, 8), stage_to_rank("dualpipev", 4))
    overlapped = [(a, s, e) for a, s, e in res.spans[0] if a.type.value == "OVERLAP_F_B"]
    assert overlapped and all(e - s == 3 for _, s, e in overlapped)


def test_stuck_order_raises_with_grid():
    order = parse_order({0: "0F0 0B0", 1: "_ 1B0 1F0"})
    with pytest.raises(DeadlockError, match=r"rank 1 stuck at step 1 in 1B0") as e:
        unit_time_makespan(order, {0: 0, 1: 1})
    msg = str(e.value)
    assert "rank 0 stuck at step 1 in 0B0" in msg
    assert "Step 1: 0B0    1B0    <-- ERROR HERE" in msg
