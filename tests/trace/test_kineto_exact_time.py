"""Kineto timestamps are read exactly: epoch µs with 3 decimals, decimal text -> integer ns."""

from __future__ import annotations

import json

import pytest

from schedsim.trace.kineto import _ns, import_kineto


def write(tmp_path, events_text: str, base: int | None = None):
    hdr = "" if base is None else f'"baseTimeNanoseconds": {base}, '
    p = tmp_path / "rank0.json"
    p.write_text('{' + hdr + '"traceEvents": [' + events_text + ']}')
    return p


def kernel(name: str, ts: str, dur: str) -> str:
    return (f'{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
            '"args": {"device": 0, "stream": 7}}')


@pytest.mark.parametrize("t0,gap_ns", [("1732000000123456.789", 240), ("1732000000123456.001", 1),
                                       ("1764547200000000.500", 130), ("17.250", 240)])
def test_kernels_keep_their_exact_gap(tmp_path, t0, gap_ns):
    from decimal import Decimal

    t1 = str(Decimal(t0) + Decimal(gap_ns) / 1000)
    p = write(tmp_path, kernel("a", t0, "0.120") + "," + kernel("b", t1, "1.5"))
    spans = sorted(import_kineto([p]).timeline.spans, key=lambda s: s.start_s)
    assert round((spans[1].start_s - spans[0].start_s) * 1e9) == gap_ns
    assert round((spans[0].end_s - spans[0].start_s) * 1e9) == 120
    # a float parse of the same text loses the gap (why the exact parse exists)
    if len(t0) > 16:
        assert (json.loads(t1) - json.loads(t0)) * 1000 != gap_ns


def test_ns_of_each_number_form():
    assert _ns(5) == 5000 and _ns(1.5) == 1500 and _ns("1732000000123456.789") == 1732000000123456789
    assert _ns(0.001) == 1 and _ns("0.0005") == 0  # half even below the ns


def test_ns_fast_path_equals_the_decimal_rule():
    """Every decimal text of 0-5 decimals and 1-17 digits before the point (and its float) gives
    ``Decimal(text) * 1000`` rounded half even, the rule of the Decimal path, whether the 3-decimal fast path or
    the Decimal path reads it."""
    import random
    from decimal import Decimal

    rng = random.Random(37)
    for _ in range(20_000):
        whole = str(rng.randrange(10 ** rng.randint(1, 17)))
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 5)))
        for text in (whole + "." + frac, whole) if frac else (whole + ".", whole):
            exact = int((Decimal(text) * 1000).to_integral_value())
            assert _ns(text) == exact, text
            assert _ns(float(text)) == int((Decimal(repr(float(text))) * 1000).to_integral_value()), text
    assert _ns("０.5") == 500 and _ns("1.５") == 1500  # not ASCII: the Decimal path, which reads these digits


@pytest.mark.parametrize("ts,why", [('"abc"', "not a (finite decimal|number)"), ("true", "not a number"),
                                    ("null", "no ts"), ("[1]", "not a number")])
def test_a_ts_that_is_not_a_number_is_a_trace_error(tmp_path, ts, why):
    """Text that is not a decimal raised decimal.InvalidOperation (a traceback); a boolean read as 1 µs."""
    from schedsim.errors import TraceError

    p = write(tmp_path, kernel("a", ts, "1") + "," + kernel("b", "5", "1"))
    with pytest.raises(TraceError, match=why):
        import_kineto([p])


def test_exponent_and_upper_case_forms_are_exact(tmp_path):
    p = write(tmp_path, kernel("a", "1.732000000123456789E15", "1") + "," + kernel("b", "1732000000123457.029", "1"))
    spans = sorted(import_kineto([p]).timeline.spans, key=lambda s: s.start_s)
    assert round((spans[1].start_s - spans[0].start_s) * 1e9) == 240
