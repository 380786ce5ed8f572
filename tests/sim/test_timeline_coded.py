"""Coded names and tags (schedsim/coded.py) and the version-3 timeline file that writes them: the parts and
per-key columns give exactly the strings and tag sets of the object path (by hand, on pipelines, mixed with
written ops), a simulated pipeline keeps its names and tag sets unmade through simulate and write_json, the
file round trips (versions 1, 2 and 3 all read), a malformed version-3 column is a TraceError, and the
compiled successor lists and kernels equal their numpy paths."""

from __future__ import annotations

import json

import numpy as np
import pytest

from schedsim.coded import Parts, TagColumns, coded_of
from schedsim.errors import TraceError
from schedsim.gpu import host as gh
from schedsim.graph.build import graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.sim import loop
from schedsim.sim.engine import simulate
from schedsim.sim.timeline import Span, SpanColumns, Timeline
from schedsim.spec.loader import load_schedule
from schedsim.spec.model import ScheduleSpec
from schedsim.spec.overrides import parse_overrides
from tests.conftest import ROOT
from tests.oracle import numpy_helpers
from tests.oracle.engine import simulate_reference
from tests.oracle.numpy_helpers import with_numpy_helpers

try:
    from schedsim.sim import _cwaves  # type: ignore[attr-defined]
except ImportError:
    _cwaves = None

UNIT = {"forward": [{"kind": "compute", "duration_us": 1}], "backward_input": [{"kind": "compute", "duration_us": 1}],
        "backward_weight": [{"kind": "compute", "duration_us": 1}]}


def pipe(schedule: str = "interleaved_1f1b", ops: list | None = None, dp: int = 1, **kw):  # type: ignore[no-untyped-def]
    """A 4-stage pipeline of 8 microbatches (``dp`` replicas), with written ``ops`` before it. Interleaved 1F1B with
    batched p2p: with lone p2p (Megatron's overlap_p2p_comm waits) the per-op emitter lowers it, whose names are
    not coded runs."""
    if schedule == "interleaved_1f1b":
        kw.setdefault("p2p", "batched")
    blk = {"schedule": schedule, "p": 4, "m": 8, "stage": UNIT, "data_parallel": dp, **kw}
    return lower(ScheduleSpec.model_validate({"schema_version": 1, "name": "p", "world_size": 4 * dp,
                                              "pipeline": blk, **({"ops": ops} if ops else {})}))


# -- the coded forms by hand ---------------------------------------------------------------------------------
def test_parts_by_hand():
    p = Parts([(["F0.", "sendF1."], np.array([0, 1, 0])), (["3", "12"], np.array([1, 0, 0])),
               (["", ".a"], np.array([1, 0, 1]))])
    assert p.strings() == ["F0.12.a", "sendF1.3", "F0.3.a"] and p.take([2, 0]) == ["F0.3.a", "F0.12.a"]
    assert p.reindex(np.array([1, 1])).strings() == ["sendF1.3", "sendF1.3"]
    # rows 0 and 2 from a one-part piece, row 1 from the three parts: the short piece gets empty strings
    short = Parts.of_items(["x", "y"], np.array([1, 0]))
    both = Parts.concat([(np.array([1]), p.reindex(np.array([0]))), (np.array([0, 2]), short)], 3)
    assert both.strings() == ["y", "F0.12.a", "x"]


def test_tag_columns_keep_types_apart_and_build_the_sets():
    sets = [(), (("mb", 1), ("stage", 0)), (("mb", True),), (("a", "x"), ("mb", 1.0))]
    codes = np.array([0, 1, 2, 3, 1, 0])
    tc = TagColumns.of_items(sets, codes)
    assert tc.keys["mb"][0] == [1, True, 1.0]  # equal in Python, three values in the file
    assert [type(v) for v in tc.keys["mb"][0]] == [int, bool, float]
    assert tc.keys["mb"][1].tolist() == [-1, 0, 1, 2, 0, -1] and tc.keys["a"][1].tolist() == [-1, -1, -1, 0, -1, -1]
    assert tc.take(range(6)) == [sets[c] for c in codes]
    d = tc.dicts()
    assert d == [dict(sets[c]) for c in codes] and d[1] is d[4] and type(d[2]["mb"]) is bool
    assert tc.has("stage").tolist() == [False, True, False, False, True, False]
    cat = TagColumns.concat([(np.array([2, 0]), tc.reindex(np.array([1, 3]))),
                             (np.array([1]), tc.reindex(np.array([2])))], 3)
    assert cat.take([0, 1, 2]) == [sets[3], sets[2], sets[1]]
    assert coded_of(tuple(sets), codes, TagColumns).take(range(6)) == [sets[c] for c in codes]


def test_tag_values_as_parts_are_made_only_for_the_rows_read_and_round_trip():
    made = []

    class Counting(Parts):
        def take(self, rows):  # type: ignore[no-untyped-def]
            made.append(np.asarray(rows).tolist())
            return super().take(rows)

    msgs = Counting([(["F0.", "B1."], np.array([0, 1, 0])), (["0", "1", "2"], np.array([2, 0, 1]))])  # F0.2 B1.0 F0.1
    tc = TagColumns({"msg": (msgs, np.array([-1, 2, 0, 0, -1])), "mb": ([3, 4], np.array([0, 1, 0, 1, 1]))}, 5)
    assert tc.scalar()
    assert tc.take([2, 0]) == [(("mb", 3), ("msg", "F0.2")), (("mb", 3),)] and made == [[0]]  # F0.1 not made
    assert tc.dicts() == [{"mb": 3}, {"mb": 4, "msg": "F0.1"}, {"mb": 3, "msg": "F0.2"}, {"mb": 4, "msg": "F0.2"},
                          {"mb": 4}]
    j = tc.to_json()
    assert j["keys"]["msg"]["values"]["parts"][0]["values"] == ["F0.", "B1."]  # parts, not strings
    back = TagColumns.from_json(json.loads(json.dumps(j, default=lambda a: a.tolist())), 5, "'tags'")
    assert isinstance(back.keys["msg"][0], Parts) and back.take(range(5)) == tc.take(range(5))
    # two pieces with parts: the values follow one another; with a list piece: made and merged as strings
    both = TagColumns.concat([(np.array([0, 1]), tc.reindex(np.array([1, 2]))),
                              (np.array([2]), tc.reindex(np.array([3])))], 3)
    assert isinstance(both.keys["msg"][0], Parts) and both.take(range(3)) == tc.take([1, 2, 3])
    mixed = TagColumns.concat([(np.array([0]), tc.reindex(np.array([1]))),
                               (np.array([1]), TagColumns.of_items([(("msg", "x"),)], np.array([0])))], 2)
    assert mixed.keys["msg"][0] == ["F0.2", "B1.0", "F0.1", "x"]  # the parts made: each piece's values kept
    assert mixed.take([0, 1]) == [(("mb", 4), ("msg", "F0.1")), (("msg", "x"),)]


def test_a_pipeline_writes_its_messages_as_parts_and_reads_them_back(tmp_path):
    d = _v3(tmp_path)
    msg = d["columns"]["tags"]["keys"]["msg"]
    assert set(msg["values"]) == {"parts"} and len(msg["values"]["parts"]) == 2
    ops = pipe("1f1b").ops()
    back = Timeline.read_json(tmp_path / "ok.json")
    assert back.columns.tags == [dict(o.tags) for o in ops]
    assert {t["msg"] for t in back.columns.tags if "msg" in t} == {dict(o.tags)["msg"] for o in ops
                                                                  if "msg" in dict(o.tags)}


# -- pipelines: the emitter's coded runs equal the made names and tag sets ------------------------------------
@pytest.mark.parametrize("schedule, dp, ops", [
    ("interleaved_1f1b", 1, None), ("1f1b", 2, None), ("zb_h1", 1, None),
    ("1f1b", 1, [{"name": "w", "kind": "compute", "duration_us": 1, "ranks": [1], "tags": {"mb": "1", "x": True}}]),
])
def test_pipeline_coded_runs_equal_the_made_tables(schedule, dp, ops):
    prog = pipe(schedule, ops, dp, **({"v": 2} if schedule == "interleaved_1f1b" else {}))
    assert prog.name_table.column_runs() and prog.tag_table.column_runs()
    parts, tags = prog.name_parts(), prog.tag_columns()
    assert "names" not in prog.__dict__ and "tagsets" not in prog.__dict__  # nothing made for them
    assert parts.strings() == [prog.names[k] for k in prog.name_id.tolist()]
    assert tags.take(range(prog.N)) == [prog.tagsets[k] for k in prog.tags_id.tolist()]
    if ops:  # the written op's "1" stays a string beside the pipeline's int microbatches
        assert "1" in tags.keys["mb"][0] and 1 in tags.keys["mb"][0]


def test_a_few_lazy_names_come_from_the_parts_without_making_the_run():
    prog = pipe()
    got = prog.op_names([0, 5])
    assert prog.name_table._lazy  # still unmade
    assert got == ["F0.0.0", "sendF0.2"]  # <label><stage>.<mb>.<op>, <send|recv><F|B><stage>.<mb>
    assert got == [prog.names[int(prog.name_id[i])] for i in (0, 5)]


# -- simulate and the file -----------------------------------------------------------------------------------
def test_simulated_pipeline_writes_version_3_without_making_names_and_equals_the_object_path(tmp_path):
    prog = pipe("interleaved_1f1b", v=2)
    prof = load_profile("h200")
    tl = simulate(prog, prof, gpu_model="waves")
    tl.write_json(tmp_path / "t.json")
    assert prog.name_table._lazy and prog.tag_table._lazy  # simulate and write_json made no name or tag set
    d = json.loads((tmp_path / "t.json").read_text())
    assert d["version"] == 3 and d["columns"]["id"] == {"format": "{name}@r{rank}"}
    assert set(d["columns"]["tags"]["keys"]) == {"chunk", "mb", "msg", "phase", "pp_op", "stage"}
    ops = prog.ops()  # the object path: one Op per instance
    back = Timeline.read_json(tmp_path / "t.json")
    assert back.columns.name == [o.name for o in ops] and back.columns.id == [f"{o.name}@r{o.rank}" for o in ops]
    assert back.columns.tags == [dict(o.tags) for o in ops]
    ref = simulate_reference(graph_of(prog), prof)  # the oracle's Op-list path
    assert tl == ref and back.spans == ref.spans and back.critical_path == ref.critical_path  # (JSON: meta's keys str)
    # the memory curve's reads agree with the dicts
    rows = np.arange(len(back))
    got = back.columns.tagged(rows, "phase")
    assert got == ([i for i, o in enumerate(ops) if "phase" in dict(o.tags)],
                   [dict(o.tags) for o in ops if "phase" in dict(o.tags)])
    # written again from what was read: the same document
    back.write_json(tmp_path / "u.json")
    assert json.loads((tmp_path / "u.json").read_text()) == d


def test_every_layout_reads_to_the_same_timeline(tmp_path):
    prog = pipe("1f1b")
    tl = simulate(prog, load_profile("h200"), gpu_model="waves")
    tl.write_json(tmp_path / "v3.json")
    tl.write_json(tmp_path / "v1.json", layout="rows")
    plain = Timeline("p", "predict", 4, launch=tl.launch, profile=tl.profile, spans=list(tl.spans),
                     critical_path=tl.critical_path, meta=tl.meta)  # spans: the version-2 columns
    plain.write_json(tmp_path / "v2.json")
    versions = [json.loads((tmp_path / f"v{v}.json").read_text())["version"] for v in (1, 2, 3)]
    assert versions == [1, 2, 3]
    reads = [Timeline.read_json(tmp_path / f"v{v}.json") for v in (1, 2, 3)]
    assert reads[0] == reads[1] == reads[2] and reads[2].spans == tl.spans


def test_tuple_coded_tags_and_shared_names_still_write_version_2(tmp_path):
    spans = [Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0, tags={"mb": 1}),
             Span("a@r1", "a", 1, "s", "matmul", "compute", 0.0, 1.0)]
    c = SpanColumns.from_spans(spans)
    coded = SpanColumns(lambda: c.id, lambda: c.name, c.rank, c.stream, c.kind, c.resource, c.start_s, c.end_s,
                        c.solo_s, c.ready_s, c.bytes, c.flops, None, coded_ids=(("a",), np.zeros(2, np.int64)),
                        coded_tags=(((), (("mb", 1),)), np.array([1, 0])))
    Timeline("t", "predict", 2, columns=coded).write_json(tmp_path / "t.json")
    d = json.loads((tmp_path / "t.json").read_text())
    assert d["version"] == 2 and d["columns"]["tags"] == {"index": [0], "values": [{"mb": 1}]}
    assert Timeline.read_json(tmp_path / "t.json").spans == spans


def test_tagged_rows_from_coded_tags_are_the_rows_with_a_tag():
    """``SpanColumns.tagged_rows`` (issue 38: the trace writer's tagged slices) without the per-row dicts: by hand,
    rows 1 and 3 hold a tag (row 3 two keys), 0, 2 and 4 none; the same rows from the dicts once they are made;
    and from a pipeline's columns, the rows whose dicts are not empty."""
    c = SpanColumns.from_spans([Span(f"a{i}@r0", f"a{i}", 0, "s", "matmul", "compute", 0.0, 1.0) for i in range(5)])
    tc = TagColumns({"mb": ([7], np.array([-1, 0, -1, 0, -1])), "msg": (["x"], np.array([-1, -1, -1, 0, -1]))}, 5)
    coded = SpanColumns(c.id, c.name, c.rank, c.stream, c.kind, c.resource, c.start_s, c.end_s, c.solo_s,
                        c.ready_s, c.bytes, c.flops, None, coded_tags=tc)
    assert coded.tagged_rows() == [1, 3]
    assert coded.tags_of([1, 3]) == [{"mb": 7}, {"mb": 7, "msg": "x"}]
    assert [i for i, t in enumerate(coded.tags) if t] == [1, 3] == coded.tagged_rows()
    tl = simulate(pipe(), load_profile("h200"))
    rows = tl.columns.tagged_rows()
    assert rows and rows == [i for i, t in enumerate(tl.columns.tags) if t]


def test_names_shared_by_ranks_write_as_one_part_with_ids_by_format(tmp_path):
    # every rank runs mm{i} and ar{i}: the names are a table a quarter of the rows, written once with a code per
    # row, and the ids (name@rN) are not written at all; the file reads back to the same ids, names and times
    spec = load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml", parse_overrides(["world_size=4", "chunks=3"]))
    tl = simulate(lower(spec), load_profile("h200"))
    tl.write_json(tmp_path / "t.json")
    d = json.loads((tmp_path / "t.json").read_text())
    cols = d["columns"]
    assert d["version"] == 3 and cols["id"] == {"format": "{name}@r{rank}"}
    [part] = cols["name"]["parts"]
    assert sorted(part["values"]) == sorted(f"{k}{i}" for k in ("mm", "ar") for i in range(3))
    assert [part["values"][c] for c in part["codes"]] == tl.columns.name
    back = Timeline.read_json(tmp_path / "t.json")
    assert back.columns.id == tl.columns.id == [f"{s.name}@r{s.rank}" for s in tl.spans]
    assert back == tl and back.spans == tl.spans


def _v3(tmp_path):  # type: ignore[no-untyped-def]
    tl = simulate(pipe("1f1b"), load_profile("h200"), gpu_model="waves")
    tl.write_json(tmp_path / "ok.json")
    return json.loads((tmp_path / "ok.json").read_text())


@pytest.mark.parametrize("breakage, words", [
    (lambda c: c.update(id={"format": "{name}"}), "'id' is neither a list of strings nor"),
    (lambda c: c.update(name={"values": ["a"]}), "'name' is neither a list of strings nor"),
    (lambda c: c["name"]["parts"][0].update(codes=[10**6] * len(c["rank"])), "'name'.parts[0].codes has codes outside"),
    (lambda c: c["name"]["parts"][1].update(codes=[0, 1]), "'name'.parts[1].codes has 2 entries"),
    (lambda c: c["name"]["parts"][0]["values"].__setitem__(0, 7), "'name'.parts[0].values holds something other"),
    (lambda c: c["tags"]["keys"]["mb"].update(codes=[-2] * len(c["rank"])),
     "'tags'.keys['mb'].codes has codes outside"),
    (lambda c: c["tags"]["keys"]["mb"]["values"].append([1, 2]), "'tags'.keys['mb'].values holds a list or object"),
    (lambda c: c["tags"]["keys"].update(stage=5), "'tags'.keys['stage'] is not an object with a 'values' list"),
    (lambda c: c["tags"].update(extra=1), "'tags' is neither"),
    (lambda c: c["tags"]["keys"]["mb"].update(codes=[0.5] * len(c["rank"])), "codes is not a flat list of integers"),
    (lambda c: c["tags"]["keys"]["msg"]["values"]["parts"][1]["values"].__setitem__(0, 3),
     "'tags'.keys['msg'].values.parts[1].values holds something other than strings"),
    (lambda c: c["tags"]["keys"]["msg"]["values"]["parts"][1]["codes"].pop(),
     "'tags'.keys['msg'].values.parts[1].codes has"),
    (lambda c: c["tags"]["keys"]["msg"].update(codes=[10**6] * len(c["rank"])),
     "'tags'.keys['msg'].codes has codes outside"),
    (lambda c: c["tags"]["keys"]["msg"]["values"].update(extra=1), "'tags'.keys['msg'].values is neither"),
    # float columns as a base and the rows that differ
    (lambda c: c["ready_s"].update(base="flops"), "'ready_s' has base 'flops', not a float column written before it"),
    (lambda c: c["ready_s"].update(base="stream_s"), "not a float column written before it"),
    (lambda c: c["ready_s"].update(base=True), "neither a column name nor a number"),
    (lambda c: c["ready_s"].update(index=c["ready_s"]["index"][::-1]), "not ascending rows"),
    (lambda c: c["ready_s"].update(index=[10**9], values=[1.0]), "not ascending rows"),
    (lambda c: c["ready_s"].update(values=[]), "index entries and 0 values"),
    (lambda c: c["ready_s"].update(extra=1), "without exactly the keys base, index, values"),
    (lambda c: c["ready_s"].update(values=["x"] * len(c["ready_s"]["index"])),
     "'ready_s.values' holds str32 values, not numbers"),
])
def test_malformed_version_3_columns_are_trace_errors(tmp_path, breakage, words):
    d = _v3(tmp_path)
    breakage(d["columns"])
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(TraceError, match="bad.json: malformed columns") as e:
        Timeline.read_json(tmp_path / "bad.json")
    assert words in str(e.value)


def test_based_float_columns_by_hand_round_trip_bit_for_bit(tmp_path):
    nan = float("nan")
    c = SpanColumns.from_spans([Span(f"a{i}@r0", f"a{i}", 0, "s", "matmul", "compute", float(i), i + 1.0)
                                for i in range(4)])
    c.ready_s[:] = [0.0, -0.0, 1.5, 3.0]  # row 1: -0.0 against start 1.0; row 2 waited; rows 0, 3 equal start
    c.solo_s[:] = [nan, nan, nan, 2.0]
    c.bytes[:] = [-0.0, 0.0, 0.0, 0.0]  # the first value is the base: -0.0, and the other three differ from it
    stream = np.array([0.0, -0.0, 1.5, nan])
    coded = SpanColumns(c.id, c.name, c.rank, c.stream, c.kind, c.resource, c.start_s, c.end_s, c.solo_s, c.ready_s,
                        c.bytes, c.flops, None, stream, coded_tags=TagColumns.of_items(((), (("mb", 1),)),
                                                                                        np.array([1, 0, 0, 0])))
    Timeline("t", "predict", 1, columns=coded).write_json(tmp_path / "t.json")
    d = json.loads((tmp_path / "t.json").read_text())
    assert d["version"] == 3
    got = {k: d["columns"][k] for k in ("start_s", "solo_s", "ready_s", "bytes", "flops", "stream_s")}
    assert got == {"start_s": [0.0, 1.0, 2.0, 3.0],
                   "solo_s": {"base": None, "index": [3], "values": [2.0]},
                   "ready_s": {"base": "start_s", "index": [1, 2], "values": [-0.0, 1.5]},
                   "bytes": [-0.0, 0.0, 0.0, 0.0],  # 3 of 4 rows differ from the first: written whole
                   "flops": {"base": 0.0, "index": [], "values": []},
                   "stream_s": {"base": "ready_s", "index": [3], "values": [None]}}
    back = Timeline.read_json(tmp_path / "t.json").columns
    for k in ("solo_s", "ready_s", "bytes", "flops", "stream_s"):
        want = stream if k == "stream_s" else getattr(c, k)
        assert getattr(back, k).view(np.int64).tolist() == np.asarray(want).view(np.int64).tolist(), k


def test_a_simulated_pipeline_writes_ready_and_stream_times_based(tmp_path):
    d = _v3(tmp_path)
    cols = d["columns"]
    ready, stream = cols["ready_s"], cols["stream_s"]
    assert ready["base"] == "start_s" and 0 < len(ready["index"]) <= len(cols["rank"]) // 2
    assert stream["base"] == "ready_s" and len(stream["index"]) <= len(cols["rank"]) // 2
    back = Timeline.read_json(tmp_path / "ok.json")
    tl = simulate(pipe("1f1b"), load_profile("h200"), gpu_model="waves")
    for k in ("start_s", "end_s", "solo_s", "ready_s", "bytes", "flops", "stream_s"):
        assert np.array_equal(getattr(back.columns, k), getattr(tl.columns, k), equal_nan=True), k


def _one_part_file(tmp_path):
    """overlap_gen on 4 ranks, 3 chunks: names as one part, ids by format; (path, parsed document)."""
    spec = load_schedule(ROOT / "benchmarks/data/overlap_gen.yaml", parse_overrides(["world_size=4", "chunks=3"]))
    simulate(lower(spec), load_profile("h200")).write_json(tmp_path / "t.json")
    return tmp_path / "t.json", json.loads((tmp_path / "t.json").read_text())


def test_reading_one_part_names_checks_the_ids_distinct_without_making_them(tmp_path):
    # the repeated-id check proves distinct (code, rank) pairs of distinct names distinct ids: the id strings
    # are made only when first read, and are then the name@rN of every row
    path, d = _one_part_file(tmp_path)
    back = Timeline.read_json(path)
    assert callable(back.columns._id)  # not built by the read
    [part] = d["columns"]["name"]["parts"]
    pairs = zip(part["codes"], d["columns"]["rank"], strict=True)
    assert back.columns.id == [f"{part['values'][c]}@r{r}" for c, r in pairs]


@pytest.mark.parametrize("how", ["same code and rank", "same value under another code"])
def test_one_part_names_that_repeat_an_id_are_refused(tmp_path, how):
    path, d = _one_part_file(tmp_path)
    [part] = d["columns"]["name"]["parts"]
    ranks = d["columns"]["rank"]
    j = next(i for i in range(1, len(ranks)) if part["codes"][i] != part["codes"][0])
    ranks[j] = ranks[0]
    if how == "same code and rank":
        part["codes"][j] = part["codes"][0]
    else:  # a second value equal to row 0's name: distinct codes, one id (the strings must be compared)
        part["values"].append(part["values"][part["codes"][0]])
        part["codes"][j] = len(part["values"]) - 1
    path.write_text(json.dumps(d))
    with pytest.raises(TraceError, match="two ops share the id"):
        Timeline.read_json(path)


def test_ids_written_as_a_list_read_back_and_a_repeat_among_them_is_refused(tmp_path):
    path, d = _one_part_file(tmp_path)
    ids = Timeline.read_json(path).columns.id
    d["columns"]["id"] = list(ids)
    path.write_text(json.dumps(d))
    assert Timeline.read_json(path).columns.id == ids
    d["columns"]["id"][-1] = ids[0]
    path.write_text(json.dumps(d))
    with pytest.raises(TraceError, match=f"two ops share the id '{ids[0]}'"):
        Timeline.read_json(path)


def test_from_dict_takes_the_columns_only_when_told_to_consume(tmp_path):
    path, d = _one_part_file(tmp_path)
    kept = Timeline.from_dict(d, where="t")
    assert "columns" in d and d["columns"]["rank"] == kept.columns.rank.tolist()
    taken = Timeline.from_dict(d, where="t", consume=True)
    assert "columns" not in d
    assert taken.columns.id == kept.columns.id and np.array_equal(taken.columns.start_s, kept.columns.start_s)


def test_a_version_3_file_with_a_repeated_id_is_refused(tmp_path):
    d = _v3(tmp_path)
    part = d["columns"]["name"]["parts"][2]  # the microbatch number: two ops of one rank made the same
    part["codes"][2] = part["codes"][0]
    d["columns"]["name"]["parts"][0]["codes"][2] = d["columns"]["name"]["parts"][0]["codes"][0]
    d["columns"]["name"]["parts"][1]["codes"][2] = d["columns"]["name"]["parts"][1]["codes"][0]
    d["columns"]["rank"][2] = d["columns"]["rank"][0]
    (tmp_path / "dup.json").write_text(json.dumps(d))
    with pytest.raises(TraceError, match="two ops share the id"):
        Timeline.read_json(tmp_path / "dup.json")


# -- the compiled preparation (successor lists, kernels, FIFO edges, issue times, stream times) against numpy ------
@pytest.mark.skipif(_cwaves is None, reason="schedsim.sim._cwaves is not built")
@pytest.mark.parametrize("case", ["interleaved_1f1b", "1f1b", "tp_ffn", "allgather_mm8"])
def test_compiled_succ_and_kernels_equal_the_numpy_paths(monkeypatch, case):
    if case in ("tp_ffn", "allgather_mm8"):
        prog = lower(load_schedule(ROOT / "schedules" / f"{case}.yaml"))
    else:  # 1F1B: batched exchanges (a kernel of several ops); interleaved: lone send/recv
        prog = lower(load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml",
                                   parse_overrides(["p=4", "m=8", f"schedule={case}"])))
    prof = load_profile("h200x2")
    monkeypatch.setattr(loop, "_EXT", [_cwaves])
    fast = simulate(prog, prof, gpu_model="waves")
    # the numpy forms of the preparation helpers (tests/oracle/numpy_helpers.py), the host's issue times included
    monkeypatch.setattr(loop, "_EXT", [with_numpy_helpers(_cwaves)])
    monkeypatch.setattr(gh, "_required", lambda name: getattr(numpy_helpers, name))
    slow = simulate(prog, prof, gpu_model="waves")
    c, s = fast.columns, slow.columns
    assert c.start_s.tolist() == s.start_s.tolist() and c.end_s.tolist() == s.end_s.tolist()
    assert c.ready_s.tolist() == s.ready_s.tolist() and c.stream_s.tolist() == s.stream_s.tolist()
    assert fast.critical_path == slow.critical_path


@pytest.mark.parametrize("n_values, n", [(1, 5), (3, 40), (5, 1), (40, 200), (40, 0)])
def test_categorical_of_codes_is_the_encoding_of_the_strings(n_values, n):
    """Few values (a compare per value) and many (a table), some unused, first used out of code order or in it:
    the categorical of the codes is what the timeline's encoder makes of the strings."""
    from schedsim.sim.timeline import _encode
    from schedsim.sim.waves_columns import categorical

    values = tuple(f"v{k}" for k in range(n_values))
    rng = np.random.default_rng(n_values * 1000 + n)
    for codes in (rng.integers(0, n_values, n), np.sort(rng.integers(0, n_values, n)), np.arange(n) % n_values):
        cats, got = categorical(values, codes)
        want = _encode([values[c] for c in codes.tolist()], n)
        assert cats == want[0] and got.dtype == np.int32 and got.tolist() == want[1].tolist()


def test_a_custom_orders_action_texts_are_made_on_read_and_written_from_the_lines(tmp_path):
    """The order of inline custom actions (idle steps among them) stays unmade through lower, simulate and
    write_json; the file holds what the plain dict writes; to_dict, equality and pickling see the dict."""
    import pickle

    from schedsim.graph.info import ActionTexts

    acts = {0: "0F0 _ 0F1 0B0 . 0B1", 1: "_ 1F0 1B0 1F1 1B1", 2: "_ _ 2F0 2B0 2F1 2B1 _", 3: "3F0 3B0 _ 3F1 3B1"}
    want = {0: ["0F0", "0F1", "0B0", "0B1"], 1: ["1F0", "1B0", "1F1", "1B1"], 2: ["2F0", "2B0", "2F1", "2B1"],
            3: ["3F0", "3B0", "3F1", "3B1"]}
    prog = lower(ScheduleSpec.model_validate({"schema_version": 1, "name": "c", "world_size": 4, "pipeline": {
        "schedule": "custom", "p": 4, "m": 2, "stage": UNIT, "actions": acts}}))
    order = prog.pipeline.order
    assert isinstance(order, ActionTexts)
    tl = simulate(prog, load_profile("h200"), gpu_model="waves")
    tl.write_json(tmp_path / "t.json")
    assert order._made is None and tl.meta["pipeline"]["order"] is order  # nothing made
    assert json.loads((tmp_path / "t.json").read_text())["meta"]["pipeline"]["order"] == \
        {str(r): x for r, x in want.items()}
    assert order.json_bytes() == json.dumps({str(r): x for r, x in want.items()}, separators=(",", ":")).encode()
    d = prog.pipeline.to_dict()
    assert type(d["order"]) is dict and d["order"] == want and order == want and want == order
    assert pickle.loads(pickle.dumps(order)) == want and type(pickle.loads(pickle.dumps(order))) is dict
    assert Timeline.read_json(tmp_path / "t.json").pipeline == prog.pipeline
    tl.write_json(tmp_path / "rows.json", layout="rows")
    assert Timeline.read_json(tmp_path / "rows.json").pipeline.order == want


def test_ids_unique_gives_what_the_stable_sort_gives():
    """coded_of's numbering of ids in use (a table of them when their range is small, else the sort) is
    arrays.unique's values and inverse, for int32 and int64 ids, wide ranges and negative ids."""
    from schedsim.arrays import unique
    from schedsim.coded import _ids_unique

    rng = np.random.default_rng(7)
    cases = [np.zeros(0, np.int64), np.array([5, 5, 0, 3], np.int32), np.array([2**40, 3, 2**40], np.int64),
             np.array([-1, 4, -1, 0], np.int64)] + [rng.integers(0, hi, n).astype(dt) for hi, n, dt in
                                                   ((3, 1000, np.int32), (5000, 100, np.int64), (64, 10, np.int64))]
    for ids in cases:
        u, inv = _ids_unique(ids)
        want_u, _first, want_inv = unique(np.asarray(ids, np.int64))
        assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.tolist()
        assert np.asarray(u).dtype == np.int64 and inv.dtype == np.int64
        assert (u[inv] == ids).all()


def test_timeline_holds_the_programs_names_not_the_program():
    """A simulated timeline keeps the Program's names and tags (``lower.program.OpNames``), not the Program: with
    the cyclic GC paused (as ``predict`` runs) the Program is freed once its last reference goes, and the ids,
    names, tag sets and critical path read afterwards (lazy runs made then) are those of a timeline whose Program
    is still alive."""
    import gc
    import weakref

    prof = load_profile("h200")
    was = gc.isenabled()
    gc.disable()
    try:
        prog = pipe(ops=[{"name": "w", "kind": "compute", "duration_us": 1, "ranks": [1]}])
        gone = weakref.ref(prog)
        tl = simulate(prog, prof)
        del prog
        assert gone() is None  # freed by reference counts alone
        kept = pipe(ops=[{"name": "w", "kind": "compute", "duration_us": 1, "ranks": [1]}])
        ref = simulate(kept, prof)
        c, r = tl.columns, ref.columns
        assert list(c.id) == list(r.id) == kept.ids() and list(c.name) == list(r.name)
        assert [s.tags for s in tl.spans] == [s.tags for s in ref.spans]
        assert [dict(s.tags or {}) for s in tl.spans] == [dict(o.tags or ()) for o in kept.ops()]
        assert tl.critical_path == ref.critical_path and len(tl.critical_path) > 1
    finally:
        if was:
            gc.enable()
