"""The column-backed Timeline: both JSON layouts round trip, and the vectorised metrics equal the
interval-list reference (merge / length / intersect_length) on hand cases and generated timelines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedsim.io
from schedsim.errors import TraceError
from schedsim.sim import timeline_json as tj
from schedsim.sim.metrics import compute_metrics, intersect_length, length, merge, union_length
from schedsim.sim.timeline import Span, SpanColumns, Timeline

SPANS = [
    Span("a@r0", "a", 0, "s0", "matmul", "compute", 0.0, 2.0, 1.5, 0.0, 0.0, 1e12, {"stage": 1}),
    Span("b@r0", "b", 0, "comm", "all_reduce", "comm", 1.0, 4.0, None, 0.5, 8.0, 0.0),
    Span("c@r1", "c", 1, "s0", "copy", "copy", 3.0, 3.5, 0.5, None),
    Span("d@r1", "d", 1, "comm", "all_reduce", "comm", 0.5, 4.0, 3.0, 0.0, 8.0, 0.0, {"mb": 2}),
]


def tl_of(spans, cp=()):
    return Timeline("t", "predict", 2, profile="h200", spans=list(spans), critical_path=list(cp), meta={"k": [1]})


@pytest.mark.parametrize("layout", ["columns", "rows"])
def test_round_trip_both_layouts(tmp_path, layout):
    tl = tl_of(SPANS, ["a@r0", "b@r0"])
    tl.write_json(tmp_path / "t.json", {"ranks": {0: 1.0}}, layout=layout)
    d = json.loads((tmp_path / "t.json").read_text())
    assert d["version"] == (2 if layout == "columns" else 1)
    back = Timeline.read_json(tmp_path / "t.json")
    assert back == tl and back.spans[1].solo_s is None and back.spans[2].ready_s is None
    assert back.makespan_s == 4.0 and d["metrics"] == {"ranks": {"0": 1.0}}


def test_columns_document_by_hand(tmp_path):
    tl_of(SPANS).write_json(tmp_path / "t.json")
    c = json.loads((tmp_path / "t.json").read_text())["columns"]
    assert c["stream"] == {"values": ["s0", "comm"], "codes": [0, 1, 0, 1]}
    assert c["resource"] == {"values": ["compute", "comm", "copy"], "codes": [0, 1, 2, 1]}
    assert c["solo_s"] == [1.5, None, 0.5, 3.0] and c["ready_s"] == [0.0, 0.5, None, 0.0]
    assert c["tags"] == {"index": [0, 3], "values": [{"stage": 1}, {"mb": 2}]}


def test_built_from_columns_spans_on_access():
    cols = SpanColumns.from_spans(SPANS)
    tl = Timeline("t", "predict", 2, columns=cols)
    assert tl._spans is None and len(tl) == 4 and tl.makespan_s == 4.0
    assert tl.spans == SPANS and tl.by_id()["d@r1"].tags == {"mb": 2}
    with pytest.raises(ValueError, match="not both"):
        Timeline("t", "predict", 2, spans=SPANS, columns=cols)


def test_empty_timeline(tmp_path):
    tl = Timeline("e", "predict", 1)
    tl.write_json(tmp_path / "e.json")
    back = Timeline.read_json(tmp_path / "e.json")
    assert len(back) == 0 and back.makespan_s == 0.0 and compute_metrics(back)["ranks"] == {}


def test_stdlib_fallback_writes_the_same_document(tmp_path, monkeypatch):
    tl = tl_of(SPANS, ["a@r0"])
    tl.write_json(tmp_path / "fast.json", {"x": float("nan")})
    monkeypatch.setattr(tj, "_orjson", None)
    monkeypatch.setattr(schedsim.io, "_orjson", None)  # the JSON writer
    tl.write_json(tmp_path / "slow.json", {"x": float("nan")})
    assert json.loads((tmp_path / "fast.json").read_text()) == json.loads((tmp_path / "slow.json").read_text())
    assert Timeline.read_json(tmp_path / "slow.json") == tl


def test_old_row_file_with_nan_tokens_reads(tmp_path):
    d = tl_of(SPANS[:1]).to_dict(layout="rows")
    d["ops"][0]["solo_s"] = float("nan")
    (tmp_path / "old.json").write_text(json.dumps(d))  # Python's json writes the NaN token
    assert Timeline.read_json(tmp_path / "old.json").spans[0].end_s == 2.0


@pytest.mark.parametrize("breakage, msg", [
    (lambda c: c.pop("end_s"), "no 'end_s' column"),
    (lambda c: c["start_s"].append(9.0), "differ in length"),
    (lambda c: c["kind"].update(codes=[0, 5, 0, 0]), "codes outside"),
])
def test_malformed_columns_are_trace_errors(tmp_path, breakage, msg):
    d = tl_of(SPANS).to_dict()
    breakage(d["columns"])
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(TraceError, match=msg):
        Timeline.read_json(tmp_path / "bad.json")


def test_union_length_by_hand():
    assert union_length(np.array([0.0, 1.0, 5.0]), np.array([2.0, 3.0, 6.0])) == 4.0
    assert union_length(np.array([0.0, 2.0]), np.array([2.0, 3.0])) == 3.0  # touching pieces join
    assert union_length(np.array([1.0, 0.0]), np.array([1.0, 10.0])) == 10.0  # empty interval ignored
    assert union_length(np.zeros(0), np.zeros(0)) == 0.0


def reference_metrics(tl):
    """The interval-list definition of the module docstring, op by op."""
    ms = tl.makespan_s
    out = {}
    for r in sorted({s.rank for s in tl.spans}):
        mine = [s for s in tl.spans if s.rank == r]
        iv = {k: merge([(s.start_s, s.end_s) for s in mine if s.resource == k]) for k in ("compute", "comm", "copy")}
        comm = iv["comm"]
        ov = intersect_length(comm, iv["compute"])
        kv = merge([(s.ready_s if s.ready_s is not None else s.start_s, s.end_s) for s in mine if s.resource == "comm"])
        out[r] = {"busy_compute_s": length(iv["compute"]), "busy_comm_s": length(comm), "busy_copy_s": length(iv["copy"]),
                  "idle_s": ms - length(merge(iv["compute"] + comm + iv["copy"])), "exposed_comm_s": length(comm) - ov,
                  "overlap_ratio": ov / length(comm) if length(comm) > 0 else 0.0,
                  "comm_share_kernel_view": length(kv) / ms if ms > 0 else 0.0}
    return out


def test_metrics_by_hand():
    m = compute_metrics(tl_of(SPANS, ["a@r0", "b@r0"]))
    r0, r1 = m["ranks"][0], m["ranks"][1]
    assert r0["busy_compute_s"] == 2.0 and r0["busy_comm_s"] == 3.0 and r0["exposed_comm_s"] == 2.0
    assert r0["overlap_ratio"] == pytest.approx(1 / 3) and r0["idle_s"] == 0.0
    assert r0["comm_share_kernel_view"] == pytest.approx(3.5 / 4)
    assert r1["busy_copy_s"] == 0.5 and r1["idle_s"] == 0.5 and r1["exposed_comm_s"] == 3.5
    # the path a → b is contiguous: b counts from where a ended (2.0), so it sums to the makespan (4.0)
    assert m["critical_path_s"] == {"compute": 2.0, "comm": 2.0} and m["ops"] == 4


span_st = st.builds(
    lambda r, res, a, d, w: (r, res, a, a + d, w),
    st.integers(0, 3), st.sampled_from(["compute", "comm", "copy"]),
    st.floats(0, 10, allow_nan=False), st.floats(0, 5, allow_nan=False), st.one_of(st.none(), st.floats(0, 3)))


@settings(max_examples=60, deadline=None)
@given(st.lists(span_st, min_size=1, max_size=25))
def test_vectorised_metrics_equal_reference(rows):
    spans = [Span(f"o{i}@r{r}", f"o{i}", r, res, "k", res, a, b, None, None if w is None else max(0.0, a - w))
             for i, (r, res, a, b, w) in enumerate(rows)]
    tl = tl_of(spans)
    got, ref = compute_metrics(tl)["ranks"], reference_metrics(tl)
    assert sorted(got) == sorted(ref)
    for r, d in ref.items():
        for k, v in d.items():
            assert got[r][k] == pytest.approx(v, abs=1e-9), (r, k)


def test_simulated_schedule_round_trips_with_equal_metrics(tmp_path):
    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_schedule

    root = Path(__file__).resolve().parents[2]
    tl = simulate(lower(load_schedule(root / "schedules/allgather_mm8.yaml")), load_profile("h200"))
    m = compute_metrics(tl)
    tl.write_json(tmp_path / "c.json", m)
    tl.write_json(tmp_path / "r.json", m, layout="rows")
    cols, rows = Timeline.read_json(tmp_path / "c.json"), Timeline.read_json(tmp_path / "r.json")
    assert cols == tl and rows == tl and len(tl) == 274
    assert compute_metrics(cols) == compute_metrics(rows) == m  # times survive both layouts bit for bit


@pytest.mark.parametrize("orjson", [True, False])
def test_coded_ids_write_what_the_strings_write(tmp_path, monkeypatch, orjson):
    # the simulator hands the ids as a name table + codes; the file must hold exactly the strings' columns
    # (names with quotes, backslashes, non-ASCII, the "," separator itself, an empty name; ranks 0..11)
    if not orjson:
        monkeypatch.setattr(tj, "_orjson", None)
        monkeypatch.setattr(schedsim.io, "_orjson", None)  # the JSON writer
    names = ("mm0", 'q"x', "b\\s", "ü𝄞", '","', "", "a@r1")
    rng = np.random.default_rng(5)
    pair = rng.permutation(42)[:40]  # 40 distinct (name, rank) pairs: unique ids
    name_id, rank = pair % 7, 2 * (pair // 7) + 1
    ids = [f"{names[k]}@r{r}" for k, r in zip(name_id.tolist(), rank.tolist(), strict=True)]
    nm = [names[k] for k in name_id.tolist()]
    z, codes = np.zeros(40), (["s"], np.zeros(40, np.int32))
    sets = ((), (("mb", 1),), (("a", 'x"'), ("b", 2.5)))
    tags_id = pair % 3
    tags = [dict(sets[k]) for k in tags_id.tolist()]

    def cols(**kw):  # type: ignore[no-untyped-def]
        return SpanColumns(rank=rank, stream=codes, kind=codes, resource=codes, start_s=z, end_s=z + 1.0,
                           solo_s=z, ready_s=z, bytes=z, flops=z, **kw)

    plain = Timeline("t", "predict", 12, columns=cols(id=ids, name=nm, tags=tags))
    coded = Timeline("t", "predict", 12, columns=cols(id=lambda: ids, name=lambda: nm, tags=None,
                                                      coded_ids=(names, name_id), coded_tags=(sets, tags_id)))
    plain.write_json(tmp_path / "a.json")
    coded.write_json(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    back = Timeline.read_json(tmp_path / "b.json")
    assert back.columns.id == ids and back.columns.name == nm and back.columns.tags == tags
    assert callable(coded.columns._id) and coded.columns._tags is None  # written without building them
    assert coded.columns.tags == tags and coded.spans == plain.spans


@pytest.mark.parametrize("orjson", [True, False])
def test_long_columns_are_written_in_pieces_that_join_to_the_whole(tmp_path, monkeypatch, orjson):
    # numpy columns longer than a piece go out as several dumps joined in the array; the text is the one dump's
    if not orjson:
        monkeypatch.setattr(tj, "_orjson", None)
        monkeypatch.setattr(schedsim.io, "_orjson", None)  # the JSON writer
    monkeypatch.setattr(tj, "_JSON_PIECE", 3)
    a = np.array([0.1, 1e-300, 2.5, np.nan, 7.0, 1 / 3, 0.0])
    assert b"".join(tj._array_pieces(a)) == tj.dumps_json(a)
    assert b"".join(tj._array_pieces(a[:3])) == tj.dumps_json(a[:3])
    spans = [Span(f"o{i}@r0", f"o{i}", 0, "s", "matmul", "compute", float(i), i + 0.5, None if i % 2 else 0.5,
                  0.25 * i) for i in range(8)]
    tl_of(spans).write_json(tmp_path / "t.json")
    back = Timeline.read_json(tmp_path / "t.json")
    assert back.spans == spans
    monkeypatch.setattr(tj, "_JSON_PIECE", 1 << 16)
    assert tl_of(spans).to_dict() == back.to_dict()


@pytest.mark.parametrize("orjson", [True, False])
def test_repeated_blocks_are_written_once_and_join_to_the_whole(monkeypatch, orjson):
    # a column of one value, or of blocks (one rank's rows) alike bit for bit, written from its first block's text:
    # the same bytes as one dump of the whole column; a piece that differs is written from its own values
    if not orjson:
        monkeypatch.setattr(tj, "_orjson", None)
        monkeypatch.setattr(schedsim.io, "_orjson", None)
    monkeypatch.setattr(tj, "_JSON_PIECE", 3)
    blk = np.array([0.1, 1e-300, np.nan, -0.0, 1 / 3, 2.5, 7.0])
    whole = np.tile(blk, 4)  # 4 ranks of 7 rows: pieces of 3, 3, 1 rows per block
    part = whole.copy()
    part[7 + 4] = 0.25  # rank 1's second piece differs
    neg = whole.copy()
    neg[14 + 3] = 0.0  # +0.0 where the first block has -0.0: other bits, other text
    for a, period in ((whole, 7), (part, 7), (neg, 7), (np.full(10, 0.1), 5), (np.tile(blk[:2], 5), 2)):
        pieces = tj._repeated_pieces(a, period)
        assert pieces is not None
        assert b"".join(pieces) == tj.dumps_json(a)
    assert b"".join(tj._repeated_pieces(np.full(7, np.nan), 0)) == b"[" + b",".join([b"null"] * 7) + b"]"
    # nothing repeats: a block of a length that does not divide the rows, all blocks differ, ints, one block
    assert tj._repeated_pieces(whole, 5) is None
    assert tj._repeated_pieces(np.arange(28.0), 7) is None
    for ints in (np.tile(np.arange(7, dtype=np.int32), 4), np.tile(np.arange(-3, 4), 4), np.full(9, 2**40)):
        assert b"".join(tj._repeated_pieces(ints, 7 if len(ints) == 28 else 3)) == tj.dumps_json(ints)
    assert tj._repeated_pieces(np.arange(28), 7) is None
    assert tj._repeated_pieces(np.zeros(28, np.int16), 7) is None  # another dtype
    assert tj._repeated_pieces(blk, 7) is None
    # a dict or short list holding a long array (a based or coded column, the names' parts) entry by entry
    based = {"base": "start_s", "index": np.arange(0, 20, 2), "values": np.full(10, 2.5)}
    parts = {"parts": [{"values": ["a", "b\"c"], "codes": np.arange(8, dtype=np.int32) % 2}], "n": None}
    for v in (based, parts, [based, 1.5], {"values": [1, 2], "codes": [0, 1]}, np.arange(2.0), {}, []):
        assert b"".join(tj._json_pieces(v, 5)) == tj.dumps_json(v)
    assert len(list(tj._json_pieces(parts))) > 3  # written in pieces
    # a long list of strings in pieces of _LIST_PIECE (orjson keeps ~254 bytes of room per entry of a list it
    # writes); a list of anything else whole
    monkeypatch.setattr(tj, "_LIST_PIECE", 2)
    names = ["mm0", "é", "a\"b", "\n", "x" * 40, ""]
    for v in (names, {"values": names, "codes": [0]}, [1, "a", 2.5, None, "b"], names[:2]):
        assert b"".join(tj._json_pieces(v)) == tj.dumps_json(v)
    assert len(list(tj._json_pieces(names))) == 2 + 5
    # a lone surrogate (the pure-Python YAML loader makes one of "\ud800") sends a dump to the standard library,
    # which escapes every non-ASCII character of what it writes: the list in one dump, as dumps_json writes it
    odd = ["é", "a", "\ud800", "ü"]
    for v in (odd, odd[::-1], {"values": odd, "codes": np.zeros(9, np.int32)}):
        assert b"".join(tj._json_pieces(v)) == tj.dumps_json(v)
    if orjson:
        assert b"".join(tj._json_pieces(odd)) == b'["\\u00e9","a","\\ud800","\\u00fc"]'
        assert len(list(tj._json_pieces(odd))) == 1


def test_a_simulated_timeline_pickles_and_copies(tmp_path):
    # the simulator's columns hold ids, names and tags as functions until first use; pickling builds them
    import copy
    import pickle

    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_schedule
    from tests.conftest import ROOT

    tl = simulate(lower(load_schedule(ROOT / "schedules" / "megatron_gpt_pp4.yaml")), load_profile("h200"))
    back = pickle.loads(pickle.dumps(tl))
    assert back == tl and back.columns.tags == tl.columns.tags and back.critical_path == tl.critical_path
    assert copy.deepcopy(tl) == tl
    tl.write_json(tmp_path / "a.json")
    back.write_json(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_ids_at_and_tagged_read_coded_columns_without_building_them():
    """``ids_at`` and ``tagged`` on a simulated timeline (coded ids and tag sets) give what the built columns
    give, and build neither; ``named_by`` knows the Program it came from."""
    import numpy as np

    from schedsim.hardware.profile import load_profile
    from schedsim.lower import lower
    from schedsim.sim.engine import simulate
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides
    from tests.conftest import ROOT

    prog = lower(load_schedule(ROOT / "schedules/pipeline_schedules.yaml", parse_overrides(["p=2", "m=2"])))
    c = simulate(prog, load_profile("h200")).columns
    rows = [0, 5, len(c) - 1]
    ids = c.ids_at(rows)
    got_rows, got_tags = c.tagged(np.arange(len(c)), "stage")
    assert callable(c._id) and c._tags is None and c.named_by(prog.name_id)
    assert ids == [c.id[i] for i in rows] == [prog.op_id(i) for i in rows]
    assert got_rows == [i for i in range(len(c)) if "stage" in c.tags[i]] and got_rows
    assert got_tags == [c.tags[i] for i in got_rows]
    assert not c.named_by(np.array(prog.name_id))


def test_meta_equal_compares_arrays_by_value_and_shape():
    """meta holding numpy arrays (a memory curve's steps) compares by shape and values against arrays or the
    nested lists timeline.json reads back; ``==`` on such dicts raises (an array's truth value)."""
    import numpy as np

    from schedsim.sim.timeline_json import meta_equal

    a = {"memory": {"unit": "bytes", "ranks": {0: {"steps": np.array([[0.0, 1.0], [2.0, 3.0]]), "peak_op": "x"}}}}
    same = {"memory": {"unit": "bytes", "ranks": {0: {"steps": [[0.0, 1.0], [2.0, 3.0]], "peak_op": "x"}}}}
    assert meta_equal(a, same) and meta_equal(same, a) and meta_equal(a, a)
    other_value = {"memory": {"unit": "bytes", "ranks": {0: {"steps": [[0.0, 1.0], [2.0, 4.0]], "peak_op": "x"}}}}
    other_shape = {"memory": {"unit": "bytes", "ranks": {0: {"steps": [[0.0, 1.0, 2.0, 3.0]], "peak_op": "x"}}}}
    ragged = {"memory": {"unit": "bytes", "ranks": {0: {"steps": [[0.0, 1.0], [2.0]], "peak_op": "x"}}}}
    other_op = {"memory": {"unit": "bytes", "ranks": {0: {"steps": [[0.0, 1.0], [2.0, 3.0]], "peak_op": "y"}}}}
    for b in (other_value, other_shape, ragged, other_op, {"memory": {}}, {}):
        assert not meta_equal(a, b) and not meta_equal(b, a)
    assert not meta_equal({"x": [1, 2]}, {"x": (1, 2)})  # as == says
    t1 = Timeline("s", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "k", "compute", 0.0, 1.0)], meta=a)
    t2 = Timeline("s", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "k", "compute", 0.0, 1.0)], meta=same)
    t3 = Timeline("s", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "k", "compute", 0.0, 1.0)], meta=other_value)
    assert t1 == t2 and t1 != t3


_BITS = [0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf"), 5e-324, 1e308, 0.1, 2.0**31, -2.0**31,
         *np.array([0x7FF8000000000001, 0xFFF0000000000007], np.uint64).view(np.float64).tolist()]  # NaN payloads
_INTS = [0, -1, 1, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**63 - 1, -2**63]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(dtype=st.sampled_from(["float64", "int64", "int32"]), period=st.integers(1, 9), reps=st.integers(1, 5),
       data=st.data())
def test_repeated_blocks_of_odd_bits_join_to_one_dump(dtype, period, reps, data):
    # blocks alike but for -0.0 / 0.0, a NaN's payload or an entry changed anywhere (the last one too), int32 and
    # int64 edges, strided columns: the pieces join to dumps_json of the whole column, and read back as it
    from unittest import mock

    pool = _BITS if dtype == "float64" else [v for v in _INTS if dtype == "int64" or -2**31 <= v < 2**31]
    block = np.array(data.draw(st.lists(st.sampled_from(pool), min_size=period, max_size=period)), dtype)
    a = np.tile(block, reps)
    for at in data.draw(st.lists(st.integers(0, len(a) - 1), max_size=2)):
        a[at] = data.draw(st.sampled_from(pool))
    if data.draw(st.booleans()):
        a = np.repeat(a, 2)[::2]  # the same values, not contiguous
    with mock.patch.object(tj, "_JSON_PIECE", data.draw(st.sampled_from([1, 2, 3, 4, 8]))):
        text = b"".join(tj._json_pieces(a, data.draw(st.sampled_from([0, period, 2 * period, len(a)]))))
    assert text == tj.dumps_json(a)
    back = json.loads(text)
    assert back == [None if v != v or v in (float("inf"), -float("inf")) else v for v in a.tolist()]
    assert [math.copysign(1, v) for v in back if v == 0] == [math.copysign(1, v) for v in a.tolist() if v == 0]
