"""The ``waves`` run fed from a Program's columns (schedsim/sim/waves_columns.py, the compiled loop) against the
oracle's Op-list path (``simulate_reference(graph_of(prog))``, :mod:`tests.oracle.engine`): identical timelines,
bit for bit (every span column, critical path, metadata, or the same error), on every shipped schedule, on
pipelines with lone and batched send/recv, on every scenario of test_gpu_model.py, and when a lone send/recv
order hangs under serialization (the retry). Part of the differential suite (``tests/oracle/test_differential.py``
compares the per-op outcome on random schedules too)."""

from __future__ import annotations

import glob
import inspect

import pytest

import tests.gpu.test_gpu_model as tg
from schedsim.errors import SchedsimError
from schedsim.graph.build import build_graph, graph_of
from schedsim.hardware.profile import load_profile
from schedsim.lower import lower
from schedsim.lower.program import Program, rendezvous_groups
from schedsim.sim.engine import simulate
from schedsim.spec.loader import load_schedule, load_text
from schedsim.spec.overrides import parse_overrides
from tests.conftest import ROOT
from tests.oracle.engine import simulate_reference

SHIPPED = sorted(glob.glob(str(ROOT / "schedules" / "*.yaml"))) + [str(ROOT / "tests" / "data" / "pp_unit.yaml")]


def outcome(G, profile, **kw) -> object:  # type: ignore[no-untyped-def]
    """Every span column, the critical path and the metadata, or the error raised: a Program's from the package, a
    networkx graph's from the oracle."""
    try:
        tl = (simulate(G, profile, gpu_model="waves", **kw) if isinstance(G, Program)
              else simulate_reference(G, profile, **kw))
    except SchedsimError as e:
        return type(e).__name__, str(e)
    c = tl.columns
    return (c.id, c.name, c.rank.tolist(), c.stream[0], c.stream[1].tolist(), c.kind[0], c.kind[1].tolist(),
            c.resource[0], c.resource[1].tolist(), c.start_s.tolist(), c.end_s.tolist(), c.solo_s.tolist(),
            c.ready_s.tolist(), c.bytes.tolist(), c.flops.tolist(), c.tags, c.stream_s.tolist(), tl.critical_path,
            tl.meta, tl.world_size, tl.schedule, tl.launch)


def same(prog, profile, **kw) -> object:  # type: ignore[no-untyped-def]
    """Assert the columnar run equals the oracle's Op-list run; return it."""
    cols = outcome(prog, profile, **kw)
    ref = outcome(graph_of(prog), profile, **kw)
    assert cols == ref, kw
    return cols


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.rsplit("/", 1)[-1])
def test_columns_match_the_op_list_path_on_every_shipped_schedule(path):
    prog = lower(load_schedule(path))
    small = prog.N < 2000  # the Megatron schedules: one setting (the Python loop is slow)
    for prof in ("h200", "h200x2") if small else ("h200x2",):
        for kw in ({}, {"launch": "cuda_graph"}, {"max_connections": 1}, {"model_executor": True}) if small \
                else ({},):
            got = same(prog, load_profile(prof), **kw)
            assert isinstance(got, tuple) and len(got[0]) == prog.N


@pytest.mark.parametrize("sched", ["interleaved_1f1b", "1f1b", "zb_h1"])
def test_columns_match_on_pipelines(sched):
    # interleaved 1F1B: lone send/recv serialized per communicator; 1F1B: batched exchanges (one kernel each)
    prog = lower(load_schedule(ROOT / "schedules" / "pipeline_schedules.yaml",
                               parse_overrides(["p=4", "m=8", f"schedule={sched}"])))
    for prof in ("h200", "h200x2"):
        same(prog, load_profile(prof))


def test_a_hanging_lone_p2p_order_is_retried_unserialized_the_same_way():
    # rank 0 sends a to 1 then receives b; rank 1 sends b to 0 then receives a: on their one communicator,
    # in issue order, each waits for the other (the static checks refuse it; unchecked, both paths rerun
    # without serialization and say so)
    text = (tg.HEAD % 2 + "  - {name: a, kind: send, ranks: [0], peer: 1, bytes: 1000000, stream: x}\n"
            "  - {name: rb, kind: recv, ranks: [0], peer: 1, bytes: 1000000, stream: y}\n"
            "  - {name: b, kind: send, ranks: [1], peer: 0, bytes: 1000000, stream: x}\n"
            "  - {name: ra, kind: recv, ranks: [1], peer: 0, bytes: 1000000, stream: y}\n")
    got = same(lower(load_text(text, "t.yaml"), check=False), tg.waves_profile())
    assert "would hang there" in got[18]["warnings"][0]
    # on one stream each it hangs either way: the same deadlock message, naming the stuck ops
    got = same(lower(load_text(text.replace("stream: y", "stream: x"), "t.yaml"), check=False), tg.waves_profile())
    assert got[0] == "DeadlockError" and "a@r0 (send) waits for its peers ra@r1" in got[1]


CASES = [f for n, f in sorted(vars(tg).items()) if n.startswith("test_") and callable(f)
         and "sim_text" in inspect.signature(f).parameters]


@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__)
def test_every_gpu_model_scenario_runs_the_same_from_columns(case):
    """Each scenario of test_gpu_model.py, its assertions run on the columnar path, which must also equal the
    Op-list path."""

    def sim_text(text: str, profile, launch=None, model_executor=False):  # type: ignore[no-untyped-def]
        spec = load_text(text, "t.yaml")
        build_graph(spec)  # raises what the scenario expects, as the Op-list path does
        prog = lower(spec)
        same(prog, profile, launch=launch, model_executor=model_executor)
        tl = simulate(prog, profile, launch=launch, model_executor=model_executor)
        return {s.id: (round(s.start_s * 1e6, 6), round(s.end_s * 1e6, 6)) for s in tl.spans}, tl

    case(sim_text)


def test_an_op_outside_the_world_or_with_a_nan_solo_time_is_refused(monkeypatch):
    # the compiled loop indexes per-rank arrays by rank and cannot run a NaN time: both are GraphErrors naming
    # the op, before the loop starts
    from dataclasses import replace

    import numpy as np

    from schedsim.errors import GraphError
    from schedsim.gpu.cost import CostModel

    prog = lower(load_text(tg.HEAD % 2 + f"  - {{name: g, {tg.FULL}}}\n", "t.yaml"))
    moved = replace(prog, rank=np.array([0, 2], np.int32))
    with pytest.raises(GraphError, match=r"op g@r2 is on rank 2 but the world_size is 2"):
        simulate(moved, tg.waves_profile())
    monkeypatch.setattr(CostModel, "duration", lambda self, op: float("nan"))
    with pytest.raises(GraphError, match=r"op g@r0 \(matmul\) has a solo duration of nan s"):
        simulate(prog, tg.waves_profile())


def test_a_group_as_written_spans_nodes_where_any_two_of_its_ranks_do():
    # a symmetric lowering keeps rank 0 of each collective; whether it spans nodes is its whole group's (ranks
    # 0..7 on node 0, 8..15 on node 1): 2 link ends per member in one node, 4 (and the NIC) across nodes
    import numpy as np

    from schedsim.sim.link_ends import link_end_columns

    gptr, gidx, rank = np.array([0, 1, 2, 3, 4]), np.array([0, 1, 2, 3]), np.zeros(4, np.int64)
    node = np.arange(16) // 8
    groups = [(0, 1, 2, 3), (0, 9), (7,), tuple(range(8, 16)) + (3,)]
    eptr, ends, *_ = link_end_columns(gptr, gidx, rank, 4, 1.0, node, groups)
    assert eptr.tolist() == [0, 2, 6, 8, 12]
    assert ends.tolist() == [0, 1, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3]
    # the distinct groups with each collective's index among them (what _prepare passes): the same ends
    for inv in ([0, 1, 2, 2], [1, 1, 0, 2]):
        got = link_end_columns(gptr, gidx, rank, 4, 1.0, node, groups[:3], np.array(inv))
        want = link_end_columns(gptr, gidx, rank, 4, 1.0, node, [groups[i] for i in inv])
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_member_link_positions_vectorised_equal_the_generic_scan():
    # link_end_columns places each member's ends by formula when a group's ranks are distinct; the generic scan
    # (used otherwise) must give the same positions on a program with collectives and send/recv pairs
    from schedsim.sim.link_ends import epos_generic, link_end_columns

    prog = lower(load_schedule(ROOT / "schedules" / "megatron_gpt_pp4.yaml"))  # a tied-embedding all_reduce
    gptr, gidx, _G, C, _lone = rendezvous_groups(prog)
    rank = prog.rank.astype("int64")
    assert C and len(prog.p2p)
    for one_way in (1.0, 1.33):
        eptr, ends, _rptr, _rev, pptr, pos = link_end_columns(gptr, gidx, rank, C, one_way)
        gptr2, gpos2 = epos_generic(eptr, ends, gptr, gidx, rank)
        assert pptr.tolist() == gptr2.tolist() and pos.tolist() == gpos2.tolist()


@pytest.mark.parametrize("seed", range(30))
def test_a_rank_twice_in_a_group_is_found_as_the_sort_of_every_member_finds_it(seed):
    # rank_repeats compares neighbours when each group's ranks rise; any group's repeat, rising or not, and
    # empty groups, against the set of each group's ranks
    import numpy as np

    from schedsim.sim.link_ends import rank_repeats

    rng = np.random.default_rng(seed)
    C = int(rng.integers(0, 6))
    sizes = rng.integers(0, 5, C)
    groups = [np.sort(rng.choice(8, int(s), replace=bool(rng.random() < 0.4))) if rng.random() < 0.7
              else rng.integers(0, 8, int(s)) for s in sizes]
    gptr = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int64)
    cr = np.concatenate(groups + [np.zeros(0)]).astype(np.int64)
    want = any(len(set(g.tolist())) < len(g) for g in groups)
    assert rank_repeats(gptr, cr, C) is want
