"""The lowering's lazy tables: an interner run made on first read and registered for lookup on demand, the
pipeline's ops as a column block (:class:`schedsim.lower.table.Block`), and a Program whose names, tag sets
and strings are made on first read; each gives what the eager path gives."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from schedsim.errors import GraphError
from schedsim.graph.ops import Op
from schedsim.lower import lower
from schedsim.lower.pipeline import expand_pipeline
from schedsim.lower.table import Block, Table, _Interner
from schedsim.lower.written import add_written
from schedsim.spec.model import ScheduleSpec

STAGE = {"forward": [{"name": "a", "kind": "compute", "duration_us": 1}],
         "backward_input": [{"name": "di", "kind": "compute", "duration_us": 2}],
         "backward_weight": [{"name": "dw", "kind": "compute", "duration_us": 1}]}


def _counted(items: list[Any]) -> tuple[Any, list[int]]:
    calls: list[int] = []

    def make() -> list[Any]:
        calls.append(1)
        return list(items)

    return make, calls


def test_reserved_run_made_on_first_read_only() -> None:
    it = _Interner()
    assert it("x") == 0
    make, calls = _counted(["F0.0", "F0.1", "F0.2"])
    assert it.reserve(3, make, lambda x: x.startswith("F")) == 1
    assert len(it) == 4 and calls == []
    assert it("y") == 4 and calls == []  # "y" cannot be one of them: nothing made, nothing registered
    assert it.item(2) == "F0.1" and calls == [1]
    assert it.items == ["x", "F0.0", "F0.1", "F0.2", "y"] and calls == [1]  # made once
    assert it.take([3, 0]) == ["F0.2", "x"]


def test_lookup_registers_the_run_it_could_be_in() -> None:
    it = _Interner()
    make, calls = _counted(["F0.0", "F0.1"])
    it.reserve(2, make, lambda x: x.startswith("F"))
    assert it.get("F0.1") == 1 and calls == [1]  # found at its reserved id, not interned again
    assert it("F0.1") == 1 and it("F9.9") == 2 and len(it) == 3


def test_registered_subset_and_unregistered_items() -> None:
    """Only the offsets given in ``register`` are found by lookup (a send's tag set, which no other op shares,
    is never found); the others read back but a lookup of an equal item interns it anew."""
    it = _Interner()
    it.reserve(3, lambda: ["a", "b", "c"], None, np.array([1]))
    assert it("b") == 1
    assert it("a") == 3  # offset 0 was not registered
    assert it.items == ["a", "b", "c", "a"]
    assert it.ids == {"b": 1, "a": 3}


def test_empty_runs_take_no_id() -> None:
    it = _Interner()
    assert it.reserve(0, lambda: [], None, np.zeros(0, np.int64)) == 0
    assert it.reserve(0, lambda: []) == 0
    assert it.reserve(1, lambda: ["a"]) == 0
    assert it("a") == 0 and it.items == ["a"]


def test_interner_equality_and_bad_make() -> None:
    a, b = _Interner(), _Interner()
    a.reserve(2, lambda: ["p", "q"])
    b("p")
    b("q")
    assert a == b and a == ("p", "q") and a != ("p",) and a != ("q", "p")
    bad = _Interner()
    bad.reserve(2, lambda: ["only one"])
    with pytest.raises(AssertionError, match="made 1 items for 2 ids"):
        _ = bad.items


def test_appended_span_found_only_by_a_lookup_that_may_hit_it() -> None:
    """``_Interner.reserve_new`` given lists: the items take the next ids without a lookup; a lookup whose item
    ``may_hold`` rejects registers nothing, one it accepts registers the whole span (the items interned inside it
    keep their ids), and the ids are those of interning each item in turn."""
    def is_f(x: Any) -> bool:
        return x.startswith("F")

    it, ref = _Interner(), _Interner()
    assert it("x") == 0
    assert it.reserve_new(2, ["F0.a", "F0.b"], is_f) == 1
    assert it("sendF0") == 3  # rejected by is_f: interned after the span, which stays unregistered
    assert it.reserve_new(1, ["F1.a"], is_f) == 4
    assert it._unreg == [(1, 4, is_f, it._unreg[0][3])] and "F0.b" not in it._ids  # one span, over "sendF0"
    assert it("F0.b") == 2 and not it._unreg  # accepted: the span registered, found at its id
    assert it("sendF0") == 3 and it.get("F1.a") == 4
    for x in ["x", "F0.a", "F0.b", "sendF0", "F1.a"]:
        ref(x)
    assert it.items == ref.items and it.ids == ref.ids


def test_reserved_span_made_only_when_read_or_registered() -> None:
    """``_Interner.reserve_new``: the ids and span of the eager form (``tests/oracle/eager_names.py``), the items
    made on first read. Consecutive calls are one
    lazy run (made as a whole, the lists and makers in order); a lookup that ``may_hold`` rejects makes and registers
    nothing, one it accepts makes and registers the span; reading the items makes them without registering."""
    def is_f(x: Any) -> bool:
        return x.startswith("F")

    made: list[str] = []

    def make(*xs: str) -> Any:
        def go() -> list[str]:
            made.extend(xs)
            return list(xs)
        return go

    it, ref = _Interner(), _Interner()
    assert it("x") == 0
    assert it.reserve_new(2, make("F0.a", "F0.b"), is_f) == 1
    assert it.reserve_new(1, ["F0.c"], is_f) == 3
    assert it.reserve_new(0, make(), is_f) == 4
    assert len(it._lazy) == 1 and it._lazy[0][:2] == (1, 3)  # one run over both calls
    assert it("sendF0") == 4 and not made  # rejected by is_f: interned after the span, nothing made
    assert it.reserve_new(1, make("F1.a"), is_f) == 5
    assert len(it._lazy) == 2 and it._unreg == [(1, 5, is_f, it._unreg[0][3])]  # a second run, one span
    assert it("F0.b") == 2 and not it._unreg and not it._lazy  # accepted: made and registered
    assert made == ["F0.a", "F0.b", "F1.a"] and it.get("F1.a") == 5 and it.get("F0.c") == 3
    for x in ["x", "F0.a", "F0.b", "F0.c", "sendF0", "F1.a"]:
        ref(x)
    assert it.items == ref.items and it.ids == ref.ids
    lone = _Interner()
    lone.reserve_new(2, make("F2.a", "F2.b"), is_f)
    assert lone.items == ["F2.a", "F2.b"] and lone._unreg and not lone._ids  # read: made, not registered
    assert lone.item(1) == "F2.b" and lone("F2.b") == 1


def test_reserved_names_are_the_eager_forms_ids_and_items() -> None:
    """``reserve_new`` against the eager form it replaced (``tests/oracle/eager_names.py``) over one sequence of
    calls, lookups accepted and rejected between them: the same ids returned, the same items, the same lookups."""
    from tests.oracle.eager_names import append_new

    def is_f(x: Any) -> bool:
        return x.startswith("F")

    lazy, eager = _Interner(), _Interner()
    steps: list[tuple[str, Any]] = [("look", "x"), ("add", ["F0.a", "F0.b"]), ("add", ["F0.c"]), ("look", "dp"),
                                    ("add", ["F1.a"]), ("look", "F0.b"), ("add", ["F2.a", "F2.b"]), ("look", "y")]
    for what, arg in steps:
        if what == "add":
            assert lazy.reserve_new(len(arg), list(arg), is_f) == append_new(eager, list(arg), is_f)
        else:
            assert lazy(arg) == eager(arg)
    assert lazy.items == eager.items and lazy.ids == eager.ids


def test_an_unfindable_item_or_a_lazy_run_closes_the_span() -> None:
    """An item appended for no lookup (``append``) or a reserved lazy run after a span registers the span first,
    so that registering it later never makes that item findable; a span after a reserved run is one of its own."""
    def is_f(x: Any) -> bool:
        return x.startswith("F")

    it = _Interner()
    it.reserve_new(1, ["F0.a"], is_f)
    assert it.append("F0.a") == 1 and not it._unreg  # a second, unfindable item equal to the first
    assert it("F0.a") == 0
    it.reserve_new(1, ["F1.a"], is_f)
    it.reserve(1, lambda: ["F2.a"], is_f)
    assert it.get("F1.a") == 2 and it.ids["F2.a"] == 3
    it.reserve(1, lambda: ["G"])
    assert it.reserve_new(1, ["F3.a"], is_f) == 5 and "F3.a" not in it._ids  # a span of its own after the run
    assert it.get("F3.a") == 5
    assert it.may_hold_any(is_f) and not _Interner().may_hold_any(is_f)


def _proto(t: Table, kind: str = "compute") -> int:
    return t.template(Op(name="x", rank=0, kind=kind, stream="compute", seq=0, duration_s=1e-6))


def test_block_spliced_between_single_instances() -> None:
    """add_one, a Block, add_one: the same columns and dependencies as adding every op one by one."""
    ref, new = Table(), Table()
    for t in (ref, new):
        _proto(t)
    # the block's ops: c0 (no deps), c1 <- c0, c2 <- (c0, c1)
    names = ["c0", "c1", "c2"]
    ref.add_one(0, 0, "a", ref.tag_id(()), "compute")
    for i, nm in enumerate(names):
        ref.add_one(0, 1, nm, ref.tag_id(()), "compute", tuple(names[:i]))
    ref.add_one(0, 0, "z", ref.tag_id(()), "compute", ("a", "c2"))

    new.add_one(0, 0, "a", new.tag_id(()), "compute")
    base = new.names.reserve(3, lambda: list(names), lambda x: x.startswith("c"))
    sid = new.streams("compute")
    i32 = np.int32
    new.add_block(Block(np.zeros(3, i32), np.ones(3, i32), base + np.arange(3), np.zeros(3, i32),
                        np.full(3, sid), np.full(3, -1), np.full(3, -1), np.full(3, -1),
                        np.array([0, 0, 1, 3]), base + np.array([0, 0, 1])))
    new.add_one(0, 0, "z", new.tag_id(()), "compute", ("a", "c2"))  # "c2" found in the block's run
    (c1, o1, n1), (c2, o2, n2) = ref.columns(), new.columns()
    assert {k: v.tolist() for k, v in c1.items()} == {k: v.tolist() for k, v in c2.items()}
    assert o1.tolist() == o2.tolist() == [2, 3, 3, 4, 4] and n1.tolist() == n2.tolist()
    assert ref.o_deps == new.o_deps == [(), (), (1,), (1, 2), (0, 3)]
    assert ref.names.items == new.names.items == ["a", "c0", "c1", "c2", "z", "x"]  # the template's name last


def test_block_checks_its_lengths() -> None:
    z = np.zeros(2, np.int32)
    with pytest.raises(ValueError, match="rank has 1 entries for 2 ops"):
        Block(z, z[:1], z, z, z, z, z, z, np.zeros(3, np.int64), z[:0])
    with pytest.raises(ValueError, match="dep_ptr"):
        Block(z, z, z, z, z, z, z, z, np.array([0, 1, 1]), z[:0])


def _pipe_spec(ops: list[dict[str, Any]] | None = None) -> ScheduleSpec:
    d: dict[str, Any] = {"schema_version": 1, "name": "t", "world_size": 2,
                         "pipeline": {"schedule": "1f1b", "p": 2, "m": 2, "stage": STAGE, "activation_bytes": 8}}
    if ops:
        d["ops"] = ops
    return ScheduleSpec.model_validate(d)


def _table(spec: ScheduleSpec, reference: bool) -> Table:
    t = Table()
    add_written(spec, t)
    expand_pipeline(spec, t, reference=reference)
    return t


def _same_tables(spec: ScheduleSpec) -> Table:
    ref, new = _table(spec, True), _table(spec, False)
    c1, c2 = ref.columns(), new.columns()
    assert {k: v.tolist() for k, v in c1[0].items()} == {k: v.tolist() for k, v in c2[0].items()}
    assert c1[1].tolist() == c2[1].tolist() and c1[2].tolist() == c2[2].tolist()
    assert ref.names.items == new.names.items and ref.tags.items == new.tags.items
    assert ref.strs.items == new.strs.items
    return new


def test_written_op_named_like_a_pipeline_op_shares_its_name() -> None:
    """A written op interned after the block (at column time) finds the lazily made pipeline name: on a rank
    without that op it reuses the name's id; on the op's own rank it is a duplicate name."""
    t = _same_tables(_pipe_spec([{"name": "F0.1.a", "kind": "compute", "duration_us": 1, "ranks": [1]}]))
    cols, _o, _n = t.columns()
    nid = t.names.ids["F0.1.a"]
    assert sorted(cols["rank"][cols["name"] == nid].tolist()) == [0, 1]  # the pipeline's on 0, the written on 1
    with pytest.raises(GraphError, match="F0.1.a"):
        lower(_pipe_spec([{"name": "F0.1.a", "kind": "compute", "duration_us": 1, "ranks": [0]}]))


def test_written_op_with_a_pipeline_tag_set_shares_its_id() -> None:
    tags = {"chunk": 0, "mb": 1, "phase": "F", "pp_op": "F", "stage": 0}
    t = _same_tables(_pipe_spec([{"name": "w", "kind": "compute", "duration_us": 1, "ranks": [1], "tags": tags}]))
    cols, _o, _n = t.columns()
    w = int(np.flatnonzero(cols["name"] == t.names.ids["w"])[0])
    f01 = int(np.flatnonzero(cols["name"] == t.names.ids["F0.1.a"])[0])
    assert cols["tags"][w] == cols["tags"][f01]


def test_program_tables_lazy_then_pickled_as_tuples() -> None:
    prog = lower(_pipe_spec())
    assert "names" not in prog.__dict__ and prog.name_table._lazy  # lowering made no name
    assert prog.op_id(0) == "F0.0.a@r0" and "names" not in prog.__dict__  # one name made, not the tuple
    ids = prog.ids()
    assert ids[:3] == ["F0.0.a@r0", "sendF0.0@r0", "F0.1.a@r0"]
    assert len(set(ids)) == prog.N
    back = pickle.loads(pickle.dumps(prog))
    assert isinstance(back.name_table, tuple) and back.names == prog.names and back.ids() == ids
    assert back.tagsets == prog.tagsets and back.strs == prog.strs
    assert [o.tags for o in back.ops()] == [o.tags for o in prog.ops()]


def test_written_p2p_beside_the_pipeline_compares_tag_messages() -> None:
    """Sends/recvs outside the block carry tag sets the message column does not stand for: their ``msg`` tags
    are read, and a pair whose messages disagree is refused (the reference build words it)."""
    def spec(msg_b: str) -> ScheduleSpec:
        return _pipe_spec([
            {"name": "s", "kind": "send", "ranks": [0], "peer": 1, "bytes": 8, "stream": "x", "tags": {"msg": "A"}},
            {"name": "r", "kind": "recv", "ranks": [1], "peer": 0, "bytes": 8, "stream": "x",
             "tags": {"msg": msg_b}}])

    prog = lower(spec("A"))
    ids = prog.ids()
    pairs = {(ids[a], ids[b]) for a, b in prog.p2p.tolist()}
    assert ("s@r0", "r@r1") in pairs and ("sendF0.0@r0", "recvF1.0@r1") in pairs
    with pytest.raises(GraphError):
        lower(spec("B"))


def test_any_item_asks_columned_runs_without_making_them() -> None:
    """``_Interner.any_item``: made items by ``pred``, a run reserved with columns by ``in_columns`` (not made),
    a run without columns made and read."""
    class Cols:
        keys = {"mb": None}

    it = _Interner()
    it((("a", 1),))
    made_c, calls_c = _counted([(("mb", 0),), (("mb", 1),)])
    none = np.zeros(0, np.int64)  # runs no lookup registers (as a pipeline's per-op tag sets)
    it.reserve(2, made_c, None, none, columns=Cols())
    made_p, calls_p = _counted([(("nccl", "all_reduce"),)])
    it.reserve(1, made_p, None, none)
    it((("b", 2),))

    def has(key: str) -> bool:
        return it.any_item(lambda s: any(k == key for k, _v in s), lambda c: key in c.keys)

    assert [has(k) for k in ("a", "b", "mb", "nccl", "stage")] == [True, True, True, True, False]
    assert calls_c == [] and calls_p == [1]  # the columned run never made, the other made once
    assert it.items[1:3] == [(("mb", 0),), (("mb", 1),)] and calls_c == [1]


@pytest.mark.parametrize("tags, want", [(None, False), ({"nccl": "all_reduce", "peers": "absent"}, True)])
def test_program_may_have_tag_is_what_the_ops_hold(tags: dict[str, Any] | None, want: bool) -> None:
    """``Program.may_have_tag`` (what ``simulate`` asks before ``recorded_nccl_is_comm``) agrees with the ops'
    own tags, for a pipeline's lazy tag sets and a written op's, and leaves the op names unmade."""
    op = {"name": "w", "kind": "compute", "duration_us": 1, "ranks": [1], **({"tags": tags} if tags else {})}
    prog = lower(_pipe_spec([op]))
    assert prog.may_have_tag("nccl") is want
    assert prog.may_have_tag("mb") and not prog.may_have_tag("no_such_key")
    assert "names" not in prog.__dict__ and prog.name_table._lazy
    assert any("nccl" in dict(o.tags) for o in prog.ops()) is want
    back = pickle.loads(pickle.dumps(prog))  # the tables as tuples
    assert back.may_have_tag("nccl") is want and not back.may_have_tag("no_such_key")


def _training_spec() -> ScheduleSpec:
    from schedsim.spec.loader import load_text
    from tests.spec.test_training_block import TINY

    return load_text(TINY + "  cp: 2\nops:\n  - {name: s, kind: send, ranks: [0], peer: 1, bytes: 8, stream: x, "
                     "p2p_batch: b, tags: {msg: A}}\n  - {name: r, kind: recv, ranks: [1], peer: 0, bytes: 8, "
                     "stream: x, p2p_batch: b, tags: {msg: A}}\n")


@pytest.mark.parametrize("which", ["pipeline_reference", "pipeline_columns", "training"])
def test_template_columns_intern_as_template_by_template(which: str) -> None:
    """``Table._tmpl_cols`` interns each column's new items in one call: the columns, and every interner's items
    and lookups, are those of interning template by template (tests/oracle/template_columns.py), on tables
    with written p2p (batch and message strings), the pipeline block's lazy runs and the training block's spans."""
    from schedsim.lower.training import expand_training
    from tests.oracle.template_columns import template_columns_one_by_one

    def table() -> Table:
        if which == "training":
            spec = _training_spec()
            t = Table()
            add_written(spec, t)
            expand_training(spec, t)
            return t
        spec = _pipe_spec([{"name": "s", "kind": "send", "ranks": [0], "peer": 1, "bytes": 8, "stream": "x",
                            "p2p_batch": "b", "tags": {"msg": "A"}},
                           {"name": "r", "kind": "recv", "ranks": [1], "peer": 0, "bytes": 8, "stream": "x",
                            "p2p_batch": "b", "tags": {"msg": "A"}}])
        return _table(spec, which == "pipeline_reference")

    new, old = table(), table()
    for t in (new, old):  # templates that hold their batch and message strings (one shared with a written op)
        for batch, msg in (("b", None), ("c", "A"), (None, "D")):
            t.template(Op(name="z", rank=0, kind="send", stream="x", seq=0, peer=1, nbytes=8.0, p2p_batch=batch,
                          tag=msg))
    got, want = new._tmpl_cols(), template_columns_one_by_one(old)
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
    assert (got["batch"] >= 0).any() and (got["msg"] >= 0).any()
    for it in ("names", "tags", "streams", "strs"):
        a, b = getattr(new, it), getattr(old, it)
        assert a.items == b.items and a.ids == b.ids, it


def test_collective_keys_are_made_on_first_read_as_the_eager_keys() -> None:
    """A training lowering's collective keys (``name#ranks`` of each collective's first member, in order of first
    member) are not made until read: their length is known unmade; read, they equal the keys built from the
    Program's own arrays (each collective's first member's name and its template's group), compare equal to that
    tuple, and pickle as it."""
    from schedsim.lower.link import CollectiveKeys
    from schedsim.spec.loader import load_text
    from tests.spec.test_training_block import TINY

    prog = lower(load_text(TINY.replace("num_layers: 2", "num_layers: 4") + "  sequence_parallel: true\n"))
    keys = prog.coll_keys
    assert isinstance(keys, CollectiveKeys) and keys._keys is None
    ptr, idx = np.asarray(prog.coll_ptr), np.asarray(prog.coll_idx)
    assert len(keys) == len(ptr) - 1 > 50 and keys._keys is None
    first = idx[ptr[:-1]]
    names = list(prog.names)
    want = tuple(names[int(prog.name_id[f])] + "#" + ",".join(map(str, prog.templates[int(prog.tmpl[f])].group))
                 for f in first.tolist())
    assert keys == want and tuple(keys) == want and keys[3] == want[3] and list(keys[:2]) == list(want[:2])
    assert want[0].endswith("#0,1") and "." in want[0]
    assert pickle.loads(pickle.dumps(keys)) == want and type(pickle.loads(pickle.dumps(keys))) is tuple
    got = prog.collectives()
    assert list(got) == list(want) and all(np.array_equal(got[k], idx[ptr[c]:ptr[c + 1]]) for c, k in enumerate(want))


def test_pipeline_emitter_freed_once_the_table_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lazy runs the table keeps (names, tag sets, message strings, tag columns) hold the arrays they read, not
    the emitter: with the cyclic GC paused (as ``predict`` runs), the emitter and its per-event arrays are freed
    once the expansion returns, and the runs, made afterwards, are the reference build's items."""
    import gc
    import weakref

    from schedsim.lower import pipeline as lp

    made: list[Any] = []
    init = lp._FastEmitter.__init__

    def watch(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        made.append(weakref.ref(self))

    monkeypatch.setattr(lp._FastEmitter, "__init__", watch)
    was = gc.isenabled()
    gc.disable()
    try:
        spec = _pipe_spec([{"name": "w", "kind": "compute", "duration_us": 1, "ranks": [1]}])
        new = _table(spec, False)
        assert made and all(r() is None for r in made)  # freed by reference counts alone
        assert new.tags._lazy and new.names._lazy  # the runs are not made yet
        ref = _table(spec, True)
        assert ref.names.items == new.names.items and ref.tags.items == new.tags.items
        assert ref.strs.items == new.strs.items
    finally:
        if was:
            gc.enable()
