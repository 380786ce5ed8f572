"""The compiled input lookups of the pipeline emitter (``_cwaves.first_set``) against their numpy oracle
(``tests/oracle/numpy_helpers.first_set``, the rules :data:`_INPUT_CANDS`): the same dependency of every event, on
orders of every kind, both p2p modes, several ops per stage phase, and orders the dense table does not take;
torch's send/recv rows on an order's columns (``_cwaves.torch_rows``) against their numpy oracle
(``tests/oracle/numpy_helpers.torch_lower_cols``)."""

from __future__ import annotations

import numpy as np
import pytest

import schedsim.lower.pipeline as P
import schedsim.lower.pipeline_steps as PS
from schedsim.lower.pipeline import expand_pipeline
from schedsim.lower.program import required
from schedsim.lower.table import Table
from schedsim.pipeline import generate
from schedsim.spec.model import ScheduleSpec
from tests.oracle import numpy_helpers as nh
from tests.oracle.numpy_helpers import torch_lower_cols

first_set = required("first_set")

STAGE = {"forward": [{"name": "a", "kind": "compute", "duration_us": 1}, {"name": "b", "kind": "compute",
                                                                          "duration_us": 1}],
         "backward_input": [{"kind": "compute", "duration_us": 1}],
         "backward_weight": [{"kind": "compute", "duration_us": 1}]}


def _deps(pipeline: dict, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    """The emitter's input of every event, with the compiled lookups or (``compiled`` False) the numpy oracle's."""
    spec = ScheduleSpec.model_validate({"schema_version": 1, "name": "t", "world_size": pipeline["p"],
                                        "pipeline": {"stage": STAGE, "activation_bytes": 8, **pipeline}})
    got: list = []
    real = P._FastEmitter._inputs

    def spy(self):  # type: ignore[no-untyped-def]
        dep = real(self)
        got.append(None if dep is None else dep.tolist())
        return dep

    with monkeypatch.context() as m:
        m.setattr(P._FastEmitter, "_inputs", spy)
        if not compiled:
            m.setattr(P, "required", lambda name: nh.first_set if name == "first_set" else required(name))
        expand_pipeline(spec, Table())
    return got


CASES = [{"schedule": "1f1b", "p": 4, "m": 6, "p2p": "batched"}, {"schedule": "1f1b", "p": 3, "m": 5},
         {"schedule": "interleaved_1f1b", "p": 4, "m": 8, "v": 2, "p2p": "batched"},
         {"schedule": "zb_h1", "p": 4, "m": 6},
         {"schedule": "interleaved_zb", "p": 2, "m": 4, "v": 2}, {"schedule": "zbv", "p": 3, "m": 6},
         {"schedule": "gpipe", "p": 3, "m": 4}, {"schedule": "looped_bfs", "p": 2, "m": 4, "v": 3},
         {"schedule": "custom", "p": 3, "m": 4, "actions": {r: " ".join(map(str, a)) for r, a in
                                                              generate("1f1b", 3, 4).items()}},
         {"schedule": "custom", "p": 2, "m": 1, "actions": {0: "0F0 0SEND_F0 0RECV_B0 0B0",  # the user's p2p
                                                             1: "1RECV_F0 1F0 1B0 1SEND_B0"}}]


@pytest.mark.parametrize("pipeline", CASES)
def test_compiled_inputs_equal_numpy(pipeline: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _deps(pipeline, True, monkeypatch)
    n = _deps(pipeline, False, monkeypatch)
    assert c == n and c and c[0] is not None and any(x >= 0 for x in c[0])


def test_a_key_set_on_two_ranks_takes_the_sorted_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hand-written 0SEND_F0 on both ranks sets one (stage, code, mb) key twice: the compiled lookups and the
    oracle decline it and the package's sorted lookups run. Events in order: rank 0 F0 (ops 0-1), SEND_F0 (2),
    RECV_B0 (3), B0's I part (4) and W part (5); rank 1 SEND_F0 (6), RECV_F1 (7), F1 (8-9), B1's I (10) and W (11)
    parts, SEND_B1 (12). By the rules: rank 0's send waits for F0's last op 1, B0's I part for its recv 3, its W
    part for its I part 4; rank 1's send finds no F0 on rank 1 (-1); F1 waits for its recv 7, B1's I part for F1's
    last op 9, its W part for 10, and SEND_B1 for the full B1's last op 11."""
    pipeline = {"schedule": "custom", "p": 2, "m": 1,
                "actions": {0: "0F0 0SEND_F0 0RECV_B0 0B0", 1: "0SEND_F0 1RECV_F0 1F0 1B0 1SEND_B0"}}
    want = [[-1, 1, -1, 3, 4, -1, -1, 7, 9, 10, 11]]
    assert _deps(pipeline, True, monkeypatch) == want
    assert _deps(pipeline, False, monkeypatch) == want


@pytest.mark.parametrize("first_set", [first_set, nh.first_set], ids=["compiled", "oracle"])
def test_a_key_set_twice_is_refused_and_bad_buffers_raise(first_set) -> None:  # type: ignore[no-untyped-def]
    """Two events setting one key: False (the caller's sorted path); a hand-checked lookup otherwise, by the
    compiled lookups and the numpy oracle alike (bad buffers: the compiled one)."""
    i64 = np.int64
    NS, M = 2, 1
    # event 0: F of stage 0 on rank 0 (key ((0 + 1) * 7 + 0) * 1 + 0 = 7); event 1: F of stage 1 on rank 0, class F
    sets, cls = np.array([7, 14], i64), np.array([0, 0], i64)
    rank, stage, mb, val = np.zeros(2, i64), np.array([0, 1], i64), np.zeros(2, i64), np.array([10, 11], i64)
    dep = np.full(2, -1, i64)
    assert first_set(sets, cls, rank, stage, mb, val, P._INPUT_CANDS, 3, NS, M, dep)
    assert dep.tolist() == [-1, 10]  # stage 1's F waits for stage 0's (no recv on one rank)
    rank2 = np.array([0, 1], i64)  # on another rank the previous stage's F is not an input
    dep[:] = -1
    assert first_set(sets, cls, rank2, stage, mb, val, P._INPUT_CANDS, 3, NS, M, dep) and dep.tolist() == [-1, -1]
    assert not first_set(np.array([7, 7], i64), cls, rank, stage, mb, val, P._INPUT_CANDS, 3, NS, M, dep)
    if first_set is nh.first_set:
        return
    with pytest.raises(TypeError):
        first_set(sets.astype(np.int32), cls, rank, stage, mb, val, P._INPUT_CANDS, 3, NS, M, dep)
    with pytest.raises(ValueError):
        first_set(np.array([7, 99], i64), cls, rank, stage, mb, val, P._INPUT_CANDS, 3, NS, M, dep)


def _custom_plan(order: dict, p: int, m: int, idle: bool):  # type: ignore[no-untyped-def]
    from schedsim.lower.pipeline_plan import pipeline_block, plan_of

    acts = {r: " ".join("_" if a is None else str(a) for a in xs if idle or a is not None) for r, xs in order.items()}
    spec = ScheduleSpec.model_validate({"schema_version": 1, "name": "t", "world_size": p, "pipeline": {
        "schedule": "custom", "p": p, "m": m, "actions": acts, "stage": STAGE}})
    return plan_of(spec, pipeline_block(spec))


@pytest.mark.parametrize("schedule,p,m,v", [("1f1b", 4, 6, None), ("interleaved_1f1b", 3, 6, 2),
                                            ("zb_h1", 4, 5, None), ("interleaved_zb", 2, 4, 2),
                                            ("gpipe", 3, 4, None), ("looped_bfs", 2, 4, 3)])
@pytest.mark.parametrize("idle", [False, True])
def test_compiled_torch_rows_equal_numpy(schedule, p, m, v, idle):  # type: ignore[no-untyped-def]
    """torch's _add_send_recv on columns: the package's rows (compiled: sweeps by passes, rows by a counting sort)
    equal the numpy oracle's (rounds of running maxima, one sort of the rows), column by column."""
    plan = _custom_plan(generate(schedule, p, m, v), p, m, idle)
    assert plan.cols is not None
    got = PS._torch_lower_cols(plan)
    want = torch_lower_cols(plan)
    assert got is not None and want is not None
    for a, b in zip((got.rank, got.typ, got.stage, got.mb, got.bid), (want.rank, want.typ, want.stage, want.mb,
                                                                          want.bid), strict=True):
        assert a.tolist() == b.tolist()
    assert (got.typ >= 4).any()


def test_compiled_torch_rows_refuse_a_wait_cycle():  # type: ignore[no-untyped-def]
    """Rank 1 runs 1F1 first, which needs 0F1; rank 0 runs 0F1 only after 0B0, which needs 1B0, after 1F1 on
    rank 1: a wait cycle, so the sweeps never settle, in the package or the oracle (the per-action lowering words
    it)."""
    from schedsim.lower.pipeline_plan import pipeline_block, plan_of

    order = {0: "0F0 0B0 0F1 0B1", 1: "1F1 1B1 1F0 1B0"}
    spec = ScheduleSpec.model_validate({"schema_version": 1, "name": "t", "world_size": 2, "pipeline": {
        "schedule": "custom", "p": 2, "m": 2, "actions": order, "stage": STAGE}})
    plan = plan_of(spec, pipeline_block(spec))
    assert plan.cols is not None
    assert PS._torch_lower_cols(plan) is None
    assert torch_lower_cols(plan) is None


def test_lookups_missing_from_the_build_are_a_build_error(monkeypatch):  # type: ignore[no-untyped-def]
    """The input lookups and the columns' send/recv rows have no package form but the compiled one: a build
    without ``first_set`` or ``torch_rows`` (one from an older ``_cwaves.c``) stops with a BuildError naming it and
    the fix, rather than falling back."""
    import sys
    import types

    import schedsim.sim
    from schedsim.errors import BuildError

    plan = _custom_plan(generate("1f1b", 2, 2), 2, 2, False)
    spec = ScheduleSpec.model_validate({"schema_version": 1, "name": "t", "world_size": 2,
                                        "pipeline": {"stage": STAGE, "activation_bytes": 8, "schedule": "1f1b",
                                                     "p": 2, "m": 2}})
    stale = types.ModuleType("schedsim.sim._cwaves")
    monkeypatch.setitem(sys.modules, "schedsim.sim._cwaves", stale)
    monkeypatch.setattr(schedsim.sim, "_cwaves", stale, raising=False)
    with pytest.raises(BuildError, match="lack torch_rows") as e:
        PS._torch_lower_cols(plan)
    assert "pip install -e ." in (e.value.fix or "")
    with pytest.raises(BuildError, match="lack first_set"):
        expand_pipeline(spec, Table())


def test_compiled_torch_rows_hand_checked_and_bad_input() -> None:
    """Two ranks, stage s on rank s, one microbatch. Sweep 0: 0F0 runs and sends (SEND_F on rank 0, RECV_F on
    rank 1), then rank 1 (swept after rank 0) runs 1F0; sweep 1: 1B0 sends back (SEND_B, and RECV_B on rank 0);
    0B0 waits for it one sweep more (its producer's rank is higher: rank 0 was swept first): sweep 2."""
    torch_rows = required("torch_rows")
    i64 = np.int64
    counts = np.array([2, 2], i64)
    typ, st, mb = np.array([0, 2, 0, 2], i64), np.array([0, 0, 1, 1], i64), np.zeros(4, i64)
    prod, adj = np.array([-1, 3, 0, -1], i64), np.array([0, 1, 0, 0], i64)
    send, peer_st, peer_rank = np.array([4, 0, 0, 6], i64), np.array([1, -1, 2, 0], i64), np.array([1, 0, 0, 0], i64)
    sweep = np.empty(4, i64)
    out = [np.empty(8, i64) for _ in range(5)]
    assert torch_rows(counts, typ, st, mb, prod, adj, send, peer_st, peer_rank, sweep, *out)
    assert sweep.tolist() == [0, 2, 0, 1]
    assert [x.tolist() for x in out] == [[0, 0, 0, 0, 1, 1, 1, 1], [0, 4, 7, 2, 5, 0, 2, 6], [0, 0, 0, 0, 1, 1, 1, 1],
                                         [0] * 8, [-1, 1, 2, -1, 1, -1, -1, 2]]
    with pytest.raises(ValueError, match="inconsistent"):
        torch_rows(np.array([3, 2], i64), typ, st, mb, prod, adj, send, peer_st, peer_rank, sweep, *out)
    with pytest.raises(TypeError, match="int64"):
        torch_rows(counts.astype(np.int32), typ, st, mb, prod, adj, send, peer_st, peer_rank, sweep, *out)
