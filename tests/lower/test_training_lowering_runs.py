"""The training block's lowering writes a phase's compute ops as one run of rows (``Table.add_run``, with name
ids shared across ranks) where the op-by-op emitter wrote them one call at a time: the Program is the same,
array for array and name for name, on small configurations that take each path (the plain layer,
``overlap_grad_reduce``'s buckets between a backward's ops, context parallelism's placed ring ops, interleaving,
``tp_comm_overlap``, experts, full recompute)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from schedsim.lower import lower
from schedsim.lower.pipeline_emitter import _Emitter
from schedsim.spec.loader import load_text
from tests.spec.test_training_block import TINY

ARRAYS = ("tmpl", "rank", "seq", "name_id", "tags_id", "stream_id", "peer", "batch", "msg", "dep_ptr", "dep_idx",
          "stream_edges", "dep_edges", "coll_ptr", "coll_idx", "p2p")



def _text(world: int, extra: str) -> str:
    """TINY (tp 2 x pp 2) with 4 layers, ``world`` ranks and ``extra`` lines in its training block."""
    return TINY.replace("world_size: 8", f"world_size: {world}").replace("num_layers: 2", "num_layers: 4") + extra


CASES = {
    "plain": (8, ""),
    "sp_distopt_overlap": (8, "  sequence_parallel: true\n  use_distributed_optimizer: true\n"
                              "  overlap_grad_reduce: true\n  overlap_param_gather: true\n"),
    "cp2": (8, "  cp: 2\n"),
    # odd CP ranks post each ring step's recv before its send (lone p2p): their phases alias the even ones'
    "cp2_interleaved": (8, "  cp: 2\n  num_layers_per_virtual_pipeline_stage: 1\n"),
    "interleaved": (8, "  num_layers_per_virtual_pipeline_stage: 1\n  overlap_grad_reduce: true\n"),
    "tp_comm_overlap": (8, "  sequence_parallel: true\n  tp_comm_overlap: true\n"),
    "experts": (8, "  sequence_parallel: true\n  num_experts: 4\n  expert_model_parallel_size: 2\n"
                   "  moe_router_topk: 2\n"),
    "full_recompute": (4, "  recompute_granularity: full\n  recompute_method: uniform\n  recompute_num_layers: 1\n"),
}


def _state(text: str) -> dict[str, Any]:
    return _state_of(lower(load_text(text)))


def _state_of(prog: Any) -> dict[str, Any]:
    out: dict[str, Any] = {k: np.asarray(getattr(prog, k)) for k in ARRAYS}
    out["text"] = json.dumps({"names": list(prog.names), "tagsets": [list(map(list, t)) for t in prog.tagsets],
                              "streams": list(prog.streams), "strs": list(prog.strs),
                              "coll_keys": list(prog.coll_keys), "warnings": list(prog.warnings),
                              "templates": [repr(t) for t in prog.templates]})
    return out


def _assert_same(fast: dict[str, Any], slow: dict[str, Any]) -> None:
    """Two :func:`_state` answers equal, array for array and string for string."""
    for k in ARRAYS:
        np.testing.assert_array_equal(fast[k], slow[k], err_msg=k)
    assert fast["text"] == slow["text"]


def _patch_ranks(monkeypatch: pytest.MonkeyPatch, attr: str, make: Any) -> None:
    """``training._Ranks`` made with its attribute ``attr`` set to ``make()`` (each time) after its own init."""
    from schedsim.lower import training

    init = training._Ranks.__init__

    def patched(self: Any, *a: Any) -> None:
        init(self, *a)
        setattr(self, attr, make())

    monkeypatch.setattr(training._Ranks, "__init__", patched)


@pytest.mark.parametrize("case", sorted(CASES))
def test_runs_write_the_program_the_op_by_op_emitter_writes(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    world, extra = CASES[case]
    text = _text(world, extra)
    fast = _state(text)
    monkeypatch.setattr(_Emitter, "_run", lambda self, s, phase: None)  # every phase op by op
    slow = _state(text)
    assert len(fast["tmpl"]) > 100
    for k in ARRAYS:
        assert fast[k].dtype == slow[k].dtype, k
        np.testing.assert_array_equal(fast[k], slow[k], err_msg=k)
    assert fast["text"] == slow["text"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_names_appended_without_lookup_make_the_same_program(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase under a name prefix not written before appends its names without a lookup each
    (``_Emitter.fresh``, ``_Interner.reserve_new``): the Program is the one every name interned gives, array for
    array and name for name, and a lookup of any op name afterwards finds its id."""

    world, extra = CASES[case]
    text = _text(world, extra)
    lazy = lower(load_text(text))
    # the spans were not registered by the lowering (overlap_grad_reduce's phases, op by op, append their names
    # too, and a later rank's take the first's ids)
    assert lazy.name_table._unreg
    it = lazy.name_table
    items = it.items  # made on first read (_Interner.reserve_new), not registered by it
    for base, n, pred, _span in it._unreg:  # reserve_new's condition: a lookup of any unregistered one registers
        assert all(pred(x) for x in items[base:base + n] if x not in it._ids)
    fast = _state(text)
    _patch_ranks(monkeypatch, "fresh", lambda: None)
    slow = _state(text)
    _assert_same(fast, slow)
    names = list(lazy.name_table.items)
    assert [lazy.name_table(x) for x in names] == list(range(len(names)))


@pytest.mark.parametrize("case", ["cp2", "cp2_interleaved", "tp_comm_overlap", "plain"])
def test_placed_strings_appended_without_lookup_make_the_same_program(case: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase whose names are new appends its placed ops' NCCL group and message strings without a lookup each
    (``_Emitter.fresh_strs``, ``pipeline_emitter.emitted_str``): the Program is the one interning every string in
    turn gives (the op-by-op order: each op's group name, then its message), array for array and string for
    string, and a lookup of any string afterwards finds its id; the pipeline's messages (``F0.3``) and batch names
    (``b7``) are not strings the rule covers, placed ones (``F0.3.l1.cp_attn_f0``) are."""
    from schedsim.lower import pipeline_emitter as pe

    assert not pe.emitted_str("F0.3") and not pe.emitted_str("b7") and not pe.emitted_str("dp_grad")
    assert pe.emitted_str("F0.3.l1.cp_attn_f0") and pe.emitted_str("B1.0.I.l0.tp_qkv0")
    world, extra = CASES[case]
    text = _text(world, extra)
    prog = lower(load_text(text))
    fast = _state(text)
    _patch_ranks(monkeypatch, "fresh_strs", lambda: False)
    slow = _state(text)
    _assert_same(fast, slow)
    table = prog.str_table
    strs = list(table.items)
    assert [table(x) for x in strs] == list(range(len(strs)))
    assert (case != "plain") is any(pe.emitted_str(x) for x in strs)  # the rings' strings took this path


def test_a_written_string_equal_to_a_placed_one_has_one_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written send/recv whose message tag is one of the block's placed strings (``F0.0.l0...``): its
    lookup finds the string the block appended (one id, not two), and the Program is the one interning every
    string in turn gives."""
    from schedsim.lower import pipeline_emitter as pe

    base = _text(8, CASES["cp2"][1])
    placed = next(x for x in lower(load_text(base)).str_table.items if pe.emitted_str(x))
    text = base + f"""ops:
  - {{name: w, kind: send, bytes: 4, ranks: [0], peer: 1, tag: {placed}}}
  - {{name: w, kind: recv, bytes: 4, ranks: [1], peer: 0, tag: {placed}}}
"""
    prog = lower(load_text(text), check=False)
    strs = list(prog.str_table.items)
    assert len(set(strs)) == len(strs) and placed in strs
    fast = _state_of(prog)
    _patch_ranks(monkeypatch, "fresh_strs", lambda: False)
    slow = _state_of(lower(load_text(text), check=False))
    _assert_same(fast, slow)


def test_a_written_op_named_like_a_phase_op_keeps_every_name_looked_up() -> None:
    """Hand-written ops beside the block: a dependency on a phase's op name, interned before the block, turns
    the appending off (the name is found, not given a second id); a written op named like a phase op on its
    rank is a duplicate name, as with every name interned."""
    from schedsim.errors import GraphError

    text = _text(8, "") + """ops:
  - {name: w, kind: compute, duration_us: 1, ranks: [0], deps: [F0.0.l0.qkv]}
"""
    prog = lower(load_text(text), check=False)  # (w before the op it waits for on one stream: a cycle)
    names = list(prog.names)
    assert names.count("F0.0.l0.qkv") == 1
    w = names.index("w")
    dep = np.asarray(prog.dep_idx)[np.asarray(prog.dep_ptr)[np.flatnonzero(np.asarray(prog.name_id) == w)[0]]]
    assert names[int(np.asarray(prog.name_id)[dep])] == "F0.0.l0.qkv"
    with pytest.raises(GraphError, match="F0.0.l0.qkv"):
        lower(load_text(_text(8, "") + "ops:\n  - {name: F0.0.l0.qkv, kind: compute, duration_us: 1, ranks: [0]}\n"))


@pytest.mark.parametrize("case", ["plain", "sp_distopt_overlap", "interleaved"])
def test_shared_p2p_tag_sets_predict_the_same(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The training block interns its sends' and recvs' tag sets (one per message and stage, repeated on every
    data-parallel replica) where the pipeline block makes one per op: every op's times, the metrics and the
    exposed communication by kind are the same either way, only the number of distinct tag sets drops."""
    from schedsim.api import predict
    from schedsim.report.training import exposed_by_kind

    world, extra = CASES[case]
    text = _text(world, extra)

    def run() -> tuple[Any, ...]:
        r = predict(load_text(text), "dgx_h100")
        c = r.timeline.columns
        return (np.asarray(c.start_s), np.asarray(c.end_s), repr(r.metrics), exposed_by_kind(r.timeline),
                len(lower(load_text(text)).tagsets))

    shared = run()
    init = _Emitter.__post_init__

    def per_op(self: _Emitter) -> None:
        init(self)
        self.shared_p2p_tags = False

    monkeypatch.setattr(_Emitter, "__post_init__", per_op)
    fresh = run()
    np.testing.assert_array_equal(shared[0], fresh[0])
    np.testing.assert_array_equal(shared[1], fresh[1])
    assert shared[2] == fresh[2]
    assert shared[3] == fresh[3]
    assert shared[4] < fresh[4]


@pytest.mark.parametrize("case", ["cp2", "tp_comm_overlap"])
def test_placed_ring_ops_are_written_as_runs(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The phases whose ring send/recv are placed by their row (context parallelism, ``tp_comm_overlap``) go
    through the run path too: the only ops written one :meth:`Table.add_ids` call at a time are the pipeline's
    sends and recvs (``sendF0.1``) and the step's tail (``dp_grad_all_reduce``, ``optimizer_step``: no dot in
    the name), not the layers' kernels and ring ops (``F0.1.l0.cp_send_kv0``)."""
    from schedsim.lower.table import Table

    world, extra = CASES[case]
    calls: list[int] = []
    add_ids = Table.add_ids

    def counted(self: Table, *args: Any) -> None:
        calls.append(args[2])
        add_ids(self, *args)

    monkeypatch.setattr(Table, "add_ids", counted)
    prog = lower(load_text(_text(world, extra)))
    names = list(prog.names)
    one_by_one = [names[i] for i in calls]
    assert any(".cp_" in n or ".tp_send" in n for n in names)
    assert sorted(one_by_one) == sorted(names[i] for i in np.asarray(prog.name_id).tolist()
                                        if names[i].startswith(("send", "recv")) or "." not in names[i])


def _count_validations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets an item at each stage op validation (``stage_templates._stage_proto``) from now on."""
    from schedsim.lower import pipeline, stage_templates

    built: list[int] = []
    proto = pipeline._stage_proto

    def counted(*a: Any) -> Any:
        built.append(1)
        return proto(*a)

    monkeypatch.setattr(stage_templates, "_stage_proto", counted)
    return built


def test_a_process_validates_each_stage_op_entry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lowering a configuration again (as ``schedsim search``'s points do in one process) builds no stage op
    template anew: each distinct entry of the layer's kernel lists was validated by the first lowering, and the
    Program is the same, array for array and template for template."""
    from schedsim.lower import stage_templates

    text = _text(8, CASES["cp2"][1])
    stage_templates._STAGE_OPS.clear()
    first = _state(text)
    built = _count_validations(monkeypatch)
    again = _state(text)
    assert built == [] and len(stage_templates._STAGE_OPS) > 10
    assert again["text"] == first["text"]
    for k in ARRAYS:
        np.testing.assert_array_equal(again[k], first[k], err_msg=k)


def test_the_layers_copies_of_a_stage_op_share_one_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage of 2 layers validates as many stage op entries as a stage of 1 (``l0.qkv`` and ``l1.qkv`` differ
    only in their names, which the template does not hold: ``_stage_proto`` validates each entry as ``x``), and the
    Program lowered with the cache kept is the one lowered with nothing kept."""
    from schedsim.lower import stage_templates

    built = _count_validations(monkeypatch)
    counts = []
    for layers in (2, 4):  # pp 2: 1 and 2 layers a stage
        stage_templates._STAGE_OPS.clear()
        built.clear()
        lower(load_text(TINY.replace("num_layers: 2", f"num_layers: {layers}")))
        counts.append(len(built))
    assert counts[0] == counts[1] > 10
    text = _text(8, "")
    kept = _state(text)
    monkeypatch.setattr(stage_templates, "STAGE_OPS_KEPT", 0)  # emptied at every insertion: one entry kept at a time
    _assert_same(kept, _state(text))


def test_id_ranges_are_the_ranges() -> None:
    """The emitter's sliced id ranges equal ``array("i", range(...))``, in the kept array, past it (grown) and past
    its cap; ids past int32 overflow as the array conversion does."""
    from array import array

    from schedsim.lower.pipeline_emitter import ID_RANGE_MAX, _id_range

    for base, n in ((0, 0), (0, 5), (4090, 10), (100_000, 3), (ID_RANGE_MAX - 2, 5), (ID_RANGE_MAX + 3, 4)):
        assert _id_range(base, n) == array("i", range(base, base + n))
    with pytest.raises(OverflowError):
        _id_range(2**31 - 1, 2)


def test_the_kept_op_names_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full op names kept across lowerings (``pipeline_emitter._NAME_RUNS``, for ``schedsim search``'s
    points): each case's Program the same with an empty store, after every other case filled it, and when it is
    forgotten at every run (``NAME_RUNS_MAX`` 1)."""
    from schedsim.lower import pipeline_emitter as pe

    texts = [_text(*CASES[c]) for c in sorted(CASES)]
    pe._NAME_RUNS.clear()
    cold = [_state(t) for t in texts]
    assert pe._NAME_RUNS
    warm = [_state(t) for t in reversed(texts)][::-1]
    monkeypatch.setattr(pe, "NAME_RUNS_MAX", 1)
    tiny = [_state(t) for t in texts]
    for a, b, c in zip(cold, warm, tiny, strict=True):
        for k in ARRAYS:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            np.testing.assert_array_equal(a[k], c[k], err_msg=k)
        assert a["text"] == b["text"] == c["text"]


def test_interleaved_orders_kept_across_lowerings_give_the_same_program() -> None:
    """Megatron's interleaved issue order is kept per (p, m, v, group size, p2p mode) in a process
    (``pipeline_steps.interleaved_steps_kept``): a lowering that finds it kept (after one of another tp) writes
    the Program it writes with the store empty, and the kept order is the one worked out afresh."""
    from schedsim.lower import pipeline_steps as ps
    from schedsim.lower import training

    text = _text(8, CASES["interleaved"][1])
    ps._STEPS.clear()
    training._PLANS.clear()  # (the plans kept with their steps: training._plan_and_steps)
    first = _state(text)
    (kept,) = ps._STEPS.values()
    other = _text(8, CASES["interleaved"][1]).replace("tp: 2", "tp: 1").replace("world_size: 8", "world_size: 4")
    _state(other)
    assert list(ps._STEPS.values()) == [kept]  # the same order: tp changes none of its inputs
    again = _state(text)
    for k in ARRAYS:
        np.testing.assert_array_equal(first[k], again[k], err_msg=k)
    assert first["text"] == again["text"]
    (key,) = ps._STEPS
    ps._STEPS.clear()
    spec = load_text(text)
    from schedsim.lower.pipeline_plan import plan_of
    from schedsim.lower.training import _transformer
    from schedsim.spec.pipeline_block import PipelineSpec
    from schedsim.spec.training_block import training_plan

    t = spec.training
    plan = training_plan(t, 8)
    pb = PipelineSpec(schedule=plan.schedule, p=plan.pp, m=plan.m, v=plan.v, transformer=_transformer(t, plan),
                      p2p=None)
    pplan = plan_of(spec, pb, reference=True, megatron=True)
    assert (pplan.p, pplan.m, pplan.v, pb.group_size, pplan.mode) == key
    assert ps._interleaved_steps(spec, pb, pplan) == kept
    ps._STEPS.clear()


def test_odd_ring_ranks_alias_the_even_ranks_phases(monkeypatch: pytest.MonkeyPatch) -> None:
    """With lone ring p2p (interleaving) an odd CP rank's phases hold the even rank's ops with each ring step's
    recv before its send: they take the even rank's name and string ids through the permutation
    (``_Run.alias``), and the Program is the one interning each name and string gives (the cases above)."""
    from schedsim.lower import pipeline_emitter as pe

    got: list[Any] = []
    orig = pe._Emitter._alias

    def spy(self: Any, names: tuple[str, ...], pairs: Any) -> Any:
        out = orig(self, names, pairs)
        if out is not None:
            got.append((names, out))
        return out

    monkeypatch.setattr(pe._Emitter, "_alias", spy)
    lower(load_text(_text(*CASES["cp2_interleaved"])))
    assert got
    for names, (_nid, perm) in got:
        assert sorted(perm) == list(range(len(names))) and list(perm) != sorted(perm)
        assert any("recv" in n for n in names) and any("send" in n for n in names)


class _Forgetful(dict):  # type: ignore[type-arg]
    """A dict that keeps nothing: every lookup misses."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


@pytest.mark.parametrize("kept", ["p2p_ids", "run_cache"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_sends_recvs_and_runs_kept_make_the_same_program(case: str, kept: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A send's or recv's name, tag set and message ids are kept per (type, stage, microbatch) for the other ranks
    of its stage (``_Emitter.p2p_ids``), and a phase's :class:`~schedsim.lower.pipeline_emitter._Run` by its rows
    for the other ranks of the lowering (``_Emitter.run_cache``, its alias included): the Program is the one each
    rank interning (or making) its own gives (every rank is written here, so the TP and DP ranks of a stage reuse
    them)."""

    world, extra = CASES[case]
    text = _text(world, extra)
    fast = _state(text)
    _patch_ranks(monkeypatch, kept, _Forgetful)
    slow = _state(text)
    _assert_same(fast, slow)


@pytest.mark.parametrize("case", sorted(CASES))
def test_layers_share_templates_with_the_ops_and_times_of_one_template_per_entry(case: str) -> None:
    """A lowering registers one template per distinct stage op entry but for its name (``l0.qkv`` and ``l1.qkv``
    share one) and per collective or ring send/recv shape, where it registered one per (stage, phase, entry)
    (the oracle ``tests/oracle/stage_templates.py``, which gives main's template tables): the same ops, op for op
    (names, streams, groups, sizes, dependencies), every array but the template column the same, and the same
    predicted times, spans and metrics, with fewer templates."""
    from schedsim.api import predict
    from tests.oracle.stage_templates import per_entry_templates

    world, extra = CASES[case]
    text = _text(world, extra)
    with per_entry_templates():
        each = lower(load_text(text))
        r_each = predict(load_text(text), "dgx_h100")
    shared = lower(load_text(text))
    r = predict(load_text(text), "dgx_h100")
    assert shared.ops() == each.ops()
    for k in ARRAYS:
        if k != "tmpl":
            np.testing.assert_array_equal(np.asarray(getattr(shared, k)), np.asarray(getattr(each, k)), err_msg=k)
    assert len(shared.templates) < len(each.templates) / 2
    tp_shared, tp_each = np.asarray(shared.tmpl), np.asarray(each.tmpl)
    assert all(shared.templates[a].kind == each.templates[b].kind and shared.templates[a].group ==
               each.templates[b].group for a, b in set(zip(tp_shared.tolist(), tp_each.tolist(), strict=True)))
    c, c_each = r.timeline.columns, r_each.timeline.columns
    np.testing.assert_array_equal(np.asarray(c.start_s), np.asarray(c_each.start_s))
    np.testing.assert_array_equal(np.asarray(c.end_s), np.asarray(c_each.end_s))
    assert repr(r.metrics) == repr(r_each.metrics)


@pytest.mark.parametrize("case", sorted(CASES))
def test_renamed_copies_take_their_entrys_template_as_plain_copies_found_it(case: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer's copy of a stage op entry (``Renamed``) takes its entry's template, found once per entry and phase;
    copies as plain dicts (the oracle ``renamed_plain``), each found by its own key, give the same Program, array
    for array and template for template; the entries are the same dicts but for their type."""
    from schedsim.lower import training
    from schedsim.lower.stage_templates import Renamed
    from tests.oracle.stage_templates import renamed_plain

    world, extra = CASES[case]
    text = _text(world, extra)
    fast = _state(text)
    spec = load_text(text)
    t = spec.training
    assert t is not None
    plan = training.training_plan(t, spec.world_size)
    lists = training.stage_lists(t, plan, 0, plan.pp * plan.v)
    monkeypatch.setattr(training, "_renamed", renamed_plain)
    plain = training.stage_lists(t, plan, 0, plan.pp * plan.v)
    assert lists == plain
    assert any(type(o) is Renamed for lst in lists.values() for o in lst)
    _assert_same(fast, _state(text))


@pytest.mark.parametrize("case", ["plain", "interleaved", "cp2_interleaved"])
def test_a_kept_pipeline_plan_makes_the_program_of_a_fresh_one(case: str) -> None:
    """The pipeline plan and steps of a (schedule, p, m, v) are kept across lowerings (``training._PLANS``): a
    lowering that finds them kept writes the Program one that plans afresh writes."""
    from schedsim.lower import training

    text = _text(*CASES[case])
    training._PLANS.clear()
    fresh = _state(text)
    assert len(training._PLANS) == 1
    _assert_same(_state(text), fresh)


@pytest.mark.parametrize("case", [*sorted(CASES), "six_chunks"])
def test_chunks_alike_share_their_lists_and_rows_with_the_program_of_lists_per_chunk(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``per_chunk_shape`` makes one dict of lists per distinct (layers, first, last) chunk, equal to each chunk's
    own ``stage_lists``; the Program whose chunks share them (and their protos rows) is the Program of lists made
    for every chunk apart (no two chunks' lists one object, so no row is shared)."""
    import schedsim.lower.training as tr
    from schedsim.spec.training_block import training_plan

    world, extra = CASES.get(case, CASES["cp2_interleaved"])
    text = _text(world, extra)
    if case == "six_chunks":  # three chunks a pipeline rank (0, 2, 4 and 1, 3, 5): rows shared within a rank
        text = text.replace("num_layers: 4", "num_layers: 6")
    spec = load_text(text)
    t = spec.training
    plan = training_plan(t, world)
    n = plan.pp * plan.v
    got = tr.per_chunk_shape(lambda s: tr.stage_lists(t, plan, s, n), plan.stage_layers[:n])
    assert [got[s] for s in range(n)] == [tr.stage_lists(t, plan, s, n) for s in range(n)]
    if n > 2:  # the middle chunks alike share one dict
        assert len({id(got[s]) for s in range(1, n - 1)}) == 1
    if case == "six_chunks":
        assert n == 6
    fast = _state_of(lower(spec))
    monkeypatch.setattr(tr, "per_chunk_shape", lambda make, layers: {s: make(s) for s in range(len(layers))})
    _assert_same(fast, _state_of(lower(spec)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_marked_pipeline_tag_sets_pair_as_the_read_ones(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the block lowers no send or recv but the pipeline's (no CP or TP ring), their tag sets are marked as
    their message column (``Table.mark_msg_tags``): the pairing reads none of them (``_msg_values`` answers None)
    and the Program (its pairs and warnings included) is the one reading each set gives."""
    from schedsim.lower import p2p, table

    world, extra = CASES[case]
    text = _text(world, extra)
    marked: list[int] = []
    answers: list[Any] = []
    mark, values = table.Table.mark_msg_tags, p2p._msg_values

    def spy_mark(self: Any, base: int, mask: Any) -> None:
        marked.append(int(mask.sum()))
        mark(self, base, mask)

    def spy_values(*a: Any) -> Any:
        answers.append(values(*a))
        return answers[-1]

    monkeypatch.setattr(table.Table, "mark_msg_tags", spy_mark)
    monkeypatch.setattr(p2p, "_msg_values", spy_values)
    fast = _state(text)
    ring = "cp:" in extra or "tp_comm_overlap" in extra
    assert bool(marked) is not ring
    assert not marked or (marked[0] > 0 and all(x is None for x in answers))
    monkeypatch.setattr(table.Table, "mark_msg_tags", lambda *a: None)
    slow = _state(text)
    _assert_same(fast, slow)
