"""trace.json's events written as JSON text from the timeline's columns: the per-value texts read back as the
values, and the slices' ``args`` (optional numbers, tags, tag keys that collide or are not strings) as
:func:`schedsim.report.chrome._slice_args` builds them for the same spans, in the file as in the dict."""

from __future__ import annotations

import json
import math
import random

import numpy as np

from schedsim.report.chrome import _json_strs, _json_values, _rows_json, _slice_args, chrome_trace, write_chrome_trace
from schedsim.sim.timeline import Span, Timeline


def test_string_texts_read_back_whatever_they_hold():
    xs = ["a", "", 'q"', 'x","y', "ends\\", '\\","', "é√", "tab\tnl\n", "nul\x00", ","]
    got = _json_strs(xs)
    assert [json.loads(t) for t in got.tolist()] == xs
    rng = random.Random(3)  # strings of the bytes that delimit: quotes, backslashes, commas
    xs = ["".join(rng.choice('"\\,a') for _ in range(rng.randint(0, 6))) for _ in range(500)]
    assert [json.loads(t) for t in _json_strs(xs).tolist()] == xs


def test_number_texts_read_back_as_the_values():
    xs = np.array([0.0, -0.0, 1.5, 1e-7, 2.0 ** 60, 0.1 + 0.2, math.nan, math.inf])
    got = [json.loads(t) for t in _json_values(xs).tolist()]
    assert got[:6] == xs[:6].tolist() and math.copysign(1, got[1]) == -1
    assert got[6:] == [None, None]  # NaN and inf: null, as dumps_json writes them
    assert _json_values(np.array([3, -12], np.int64)).tolist() == [b"3", b"-12"]


def test_rows_join_constant_and_per_row_pieces():
    texts = _rows_json([b"{", np.array([b"1", b"22", b""]), b"}"], 3)
    assert texts == b"{1},{22},{}"
    assert _rows_json([b"x", np.array([b"ab"] * 5)], 5) == b",".join([b"xab"] * 5)


def test_slice_args_in_the_file_are_those_of_the_spans():
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 2e-6, 1.5e-6, 0.0, 8.0, 16.0, {"mb": 1}),
             # tag keys already among the args are not written again
             Span("b@r0", "b", 0, "s", "send", "comm", 2e-6, 3e-6, None, None, 4.0, 0.0, {"bytes": 9, "kind": "x"}),
             # no bytes here: a tag "bytes" is written
             Span("c@r0", "c", 0, "s", "matmul", "compute", 3e-6, 4e-6, None, 1e-6, 0.0, math.nan, {"bytes": 9}),
             # keys that are not strings: str(key), overwriting an arg of that name in place
             Span("d@r0", "d", 0, "s", "matmul", "compute", 4e-6, 5e-6, tags={1: "one", "z": [1, 2]}),
             Span("e@r0", "e", 0, "s", "matmul", "compute", 5e-6, 6e-6)]
    tl = Timeline("t", "predict", 1, spans=spans)
    want = [_slice_args(s, "p", [], float("nan"), float("nan")) for s in spans]
    for w, s in zip(want, spans, strict=True):  # _slice_args's solo_us / ready_us: the ones given
        for key, v in (("solo_us", s.solo_s), ("ready_us", s.ready_s)):
            if key in w:
                w[key] = round(v * 1e6, 4)
    want[2]["flops"] = None  # NaN: written null
    assert want[1] == {"op": "b@r0", "kind": "send", "resource": "comm", "bytes": 4.0}
    assert want[2]["bytes"] == 9 and want[3]["1"] == "one"
    got = [e["args"] for e in chrome_trace([("p", tl)])["traceEvents"] if e["ph"] == "X"]
    assert got == want
    assert [list(g) for g in got] == [list(w) for w in want]  # the same key order


def test_file_is_the_trace_dict(tmp_path):
    spans = [Span(f"o{k}@r{r}", f"o{k}", r, "s", "all_reduce" if k % 2 else "matmul", "comm" if k % 2 else "compute",
                  k * 1e-6, (k + 1) * 1e-6, 1e-6, k * 1e-6, 64.0 * k, 0.0, {"k": k} if k % 3 == 0 else {})
             for r in range(3) for k in range(7)]
    tl = Timeline("t", "predict", 3, spans=spans)
    write_chrome_trace(tmp_path / "trace.json", [("p", tl)])
    assert json.loads((tmp_path / "trace.json").read_bytes()) == json.loads(json.dumps(chrome_trace([("p", tl)])))


def test_rows_and_pieces_are_the_numpy_forms_byte_for_byte():
    """The compiled join and cut (``_cwaves.join_rows``, ``_cwaves.cut``) against their numpy forms
    (tests/oracle/chrome_text.py): pieces of random widths, empty items, more rows than the oracle's block."""
    from schedsim.report.chrome import _cut
    from tests.oracle.chrome_text import ROWS, cut, rows_json

    rng = np.random.default_rng(7)
    n = ROWS + 1000
    alphabet = np.frombuffer(b'0123456789.-e,"{}:ab', np.uint8)
    raw = alphabet[rng.integers(0, len(alphabet), 40 * n)]
    starts = np.sort(rng.integers(0, len(raw) - 30, n))
    ends = starts + rng.integers(0, 30, n)
    ends[:3] = starts[:3]  # empty pieces
    a = _cut(raw, starts, ends)
    assert a.dtype == cut(raw, starts, ends).dtype and a.tolist() == cut(raw, starts, ends).tolist()
    b = _cut(raw, ends - 1, ends)  # one byte each: S1
    pieces = [b'{"x":', a, b",", b, b"", np.where(rng.random(n) < 0.5, a, b""), b"}"]
    assert _rows_json(pieces, n) == rows_json(pieces, n)
    assert _rows_json([b"[", a[:5], b"]"], 5) == rows_json([b"[", a[:5], b"]"], 5)
    assert _rows_json([b"only"], 4) == b"only,only,only,only" and _rows_json([a[:0]], 0) == b""
    assert _cut(raw, starts[:0], ends[:0]).tolist() == []


def test_rows_of_the_wrong_length_or_type_are_refused():
    import pytest

    from schedsim.report.chrome import _rows_json

    with pytest.raises(ValueError, match="items, not n"):
        _rows_json([np.array([b"a", b"b"])], 3)
    with pytest.raises(TypeError, match="fixed-width bytes"):
        _rows_json([np.arange(3)], 3)


def test_string_texts_are_the_numpy_form_byte_for_byte():
    """``_json_strs`` and ``_json_values`` (the compiled ``_cwaves.item_bounds`` finding each item) against their
    numpy forms (tests/oracle/chrome_text.py): strings of quotes, backslashes, commas, brackets, control and
    non-ASCII characters; floats of every magnitude, -0.0, NaN and inf (null), ints."""
    import pytest

    from schedsim.sim.loop import compiled_loop
    from tests.oracle.chrome_text import json_strs, json_values

    rng = random.Random(11)
    xs = ["".join(rng.choice('"\\,a\x00\n√[]') for _ in range(rng.randint(0, 9))) for _ in range(3000)]
    assert _json_strs(xs).tolist() == json_strs(xs).tolist()
    assert _json_strs(["only"]).tolist() == [b'"only"'] and _json_strs([]).tolist() == []
    rng = np.random.default_rng(4)
    xs = rng.standard_normal(5000) * 10.0 ** rng.integers(-30, 30, 5000)
    xs[:6] = [-0.0, np.nan, np.inf, -np.inf, 1e300, 5e-324]
    assert _json_values(xs).tolist() == json_values(xs).tolist()
    ints = rng.integers(-2**62, 2**62, 3000)
    assert _json_values(ints).tolist() == json_values(ints).tolist() and _json_values(ints[:0]).tolist() == []
    s, e = np.empty(2, np.int64), np.empty(2, np.int64)
    with pytest.raises(ValueError, match="not a flat JSON array of 2 items"):
        compiled_loop().item_bounds(b'["a"]', s, e)
    with pytest.raises(ValueError, match="not a flat JSON array of 2 items"):
        compiled_loop().item_bounds(b'[1,[2]]', s, e)


def test_counter_samples_held_as_the_python_loop_holds_them():
    """``_cwaves.held_samples`` against the Python loop it replaced (tests/oracle/chrome_text.py): runs of values
    within 1e-9 of each other, around 1 (the relative bound's floor) and far from it, negative, NaN and inf."""
    from schedsim.sim.loop import compiled_loop
    from tests.oracle.chrome_text import held_samples

    rng = np.random.default_rng(5)
    base = rng.choice([0.0, 1.0, 0.5, 3e9, -2.0, 1e-12], 4000)
    jitter = rng.choice([0.0, 1e-10, 5e-10, 1e-9, 2e-9, 1e-6], 4000) * rng.choice([-1.0, 1.0], 4000)
    val = np.concatenate([base * (1 + jitter) + jitter, [np.nan, 1.0, np.nan, np.inf, np.inf, 1.0]])
    keep = np.empty(len(val), bool)
    kept = compiled_loop().held_samples(val, keep)
    want = held_samples(val.tolist())
    assert keep.tolist() == want and kept == sum(want) and 0 < kept < len(val)
