"""The static checks' errors worded from the array rules' witnesses (schedsim.lower.check_errors.word_fault):
a dependency written after its user, a dependency cycle, collectives of one group in different orders. Each is
raised without the object-based build (a test oracle, ``tests/oracle/object_build.py``, which the package cannot
import: ``tests/quality/test_layers.py``), and equals that build's error (text, class and fields)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from schedsim import api
from schedsim.errors import CycleError, DeadlockError, GraphError, SchedsimError
from schedsim.lower import lower
from schedsim.lower.check_errors import word_fault
from schedsim.lower.checks import canonical_cycle, collective_order_witness, dag_cycle, forward_dep
from tests.oracle.object_build import graph_from_ops


def _spec(ops: str, world: int = 2):
    return api.load_text(f"schema_version: 1\nname: bad\nworld_size: {world}\nops:\n{ops}")


def _reference_error(spec) -> SchedsimError | None:
    prog = lower(spec, check=False)
    try:
        graph_from_ops(prog.ops(), prog.graph_info(), prog.file, check=True)
    except SchedsimError as e:
        return e
    return None


def _fields(e: BaseException) -> tuple:
    return (type(e), str(e), getattr(e, "fix", None), getattr(e, "detail", None), tuple(getattr(e, "ops", ())),
            tuple(getattr(e, "cycle", ())))


CASES = {
    "forward dep": ("  - {name: a, kind: compute, duration_us: 1, deps: [b], stream: other}\n"
                    "  - {name: b, kind: compute, duration_us: 1}\n",
                    GraphError, "<string>:5 (ops[0]): op 'a' on rank 0 depends on 'b', which is written after it"),
    "cycle through stream order": ("  - {name: a, kind: compute, duration_us: 1, deps: [b]}\n"
                                   "  - {name: b, kind: compute, duration_us: 1}\n",
                                   CycleError, "dependency cycle (through stream order: an op depends on one issued "
                                   "after it on the same stream): a@r0 -> b@r0 -> a@r0"),
    "cycle of dependencies": ("  - {name: a, kind: compute, duration_us: 1, deps: [b]}\n"
                              "  - {name: b, kind: compute, duration_us: 1, deps: [a], stream: other}\n",
                              CycleError, "dependency cycle: a@r0 -> b@r0 -> a@r0"),
    "collective order": ("  - {name: a, kind: all_reduce, bytes: 8, ranks: [0]}\n"
                         "  - {name: b, kind: all_reduce, bytes: 8, ranks: [0]}\n"
                         "  - {name: b, kind: all_reduce, bytes: 8, ranks: [1]}\n"
                         "  - {name: a, kind: all_reduce, bytes: 8, ranks: [1]}\n",
                         DeadlockError, "collectives on group [0, 1] are issued in a different order: rank 0 issues "
                         "'a' as its collective #0 but rank 1 issues 'b'; real NCCL would hang"),
    "batch input by a dependency": (
        "  - {name: s1, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x}\n"
        "  - {name: c, kind: compute, duration_us: 1, ranks: [0], stream: other}\n"
        "  - {name: s2, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x, deps: [c]}\n"
        "  - {name: r1, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n"
        "  - {name: r2, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n",
        GraphError, "<string>:7 (ops[2]): send 's2' is in p2p_batch 'x', which rank 0 posts whole at its first member "
        "'s1', but it waits for 'c' (it is a dependency of it), written after 's1'"),
    "batch input by stream order": (
        "  - {name: s1, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x}\n"
        "  - {name: c, kind: compute, duration_us: 1, ranks: [0], stream: other}\n"
        "  - {name: s2, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x, stream: other}\n"
        "  - {name: r1, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n"
        "  - {name: r2, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n",
        GraphError, "<string>:7 (ops[2]): send 's2' is in p2p_batch 'x', which rank 0 posts whole at its first member "
        "'s1', but it waits for 'c' (it follows it on stream 'other')"),
    "lazy communicator creation": (  # a batch runs on its group's communicator, which rank 2 never calls
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x, group: [0, 1, 2]}\n"
        "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y, group: [0, 1, 2]}\n",
        DeadlockError, "rank(s) [0, 1] make NCCL calls on the communicator of ranks [0, 1, 2] (batched send/recv or "
        "collectives on them), which a lazily initialised process group creates at each rank's first call on it and "
        "which waits for all its ranks; rank(s) [2] never call it"),
    "NCCL wait cycle on one communicator": (  # both ranks send first (on two streams: no help)
        "  - {name: s0, kind: send, peer: 1, bytes: 8, ranks: [0], stream: a}\n"
        "  - {name: r0, kind: recv, peer: 1, bytes: 8, ranks: [0], stream: b}\n"
        "  - {name: s1, kind: send, peer: 0, bytes: 8, ranks: [1], stream: a}\n"
        "  - {name: r1, kind: recv, peer: 0, bytes: 8, ranks: [1], stream: b}\n",
        DeadlockError, "ranks would wait on each other forever: r0@r0 cannot start before s0@r0 completes (NCCL runs "
        "one communicator's ops in issue order, whatever the stream); s1@r1 completes only once r0@r0 is posted (its "
        "send/recv partner); r1@r1 cannot start before s1@r1 completes (NCCL runs one communicator's ops in issue "
        "order, whatever the stream); s0@r0 completes only once r1@r1 is posted (its send/recv partner)\n"
        "  fix: post each send/recv pair in the same order on both ranks"),
    "NCCL wait cycle of communicators sharing ranks": (  # {0,1} and {0,1,2} in two orders; lazy creation too
        "  - {name: small, kind: all_reduce, bytes: 8, stream: b, ranks: [1], group: [0, 1]}\n"
        "  - {name: big, kind: all_reduce, bytes: 8, stream: a, ranks: [0, 1, 2]}\n"
        "  - {name: small, kind: all_reduce, bytes: 8, stream: b, ranks: [0], group: [0, 1]}\n",
        DeadlockError, "ranks would wait on each other forever: small@r0 cannot start before big@r0 completes "
        "(collectives on communicators that share ranks must keep one order (NCCL docs)); small@r1 completes only "
        "once small@r0 is posted (a member of the same collective); big@r1 cannot start before small@r1 completes "
        "(collectives on communicators that share ranks must keep one order (NCCL docs)); big@r0 completes only once "
        "big@r1 is posted (a member of the same collective)\n  fix: issue the collectives of communicators that "
        "share two or more ranks in one relative order on every rank"),
}
WORLD = {"lazy communicator creation": 3, "NCCL wait cycle of communicators sharing ranks": 3}


@pytest.mark.parametrize("case", list(CASES))
def test_each_family_is_worded_without_the_object_build(case):
    ops, cls, start = CASES[case]
    spec = _spec(ops, WORLD.get(case, 2))
    ref = _reference_error(spec)
    assert ref is not None and type(ref) is cls and str(ref).startswith(start)
    with pytest.raises(SchedsimError) as fast:
        lower(spec)
    assert _fields(fast.value) == _fields(ref)


def test_witnesses_by_hand():
    prog = lower(_spec(CASES["forward dep"][0]), check=False)
    assert forward_dep(prog) == (0, 1) and dag_cycle(prog) is None
    prog = lower(_spec(CASES["cycle through stream order"][0]), check=False)
    assert dag_cycle(prog) == ([0, 1], True)  # a -> b by its dependency, b -> a by stream order: a's own dep is b
    prog = lower(_spec(CASES["collective order"][0]), check=False)
    # ops: a@r0 (0), b@r0 (1), b@r1 (2), a@r1 (3); rank 0 issues a first, rank 1 b
    assert collective_order_witness(prog) == ((0, 1), 0, 1, 0, 0, 2)


def _random_schedule(rng: random.Random) -> str:
    """1-3 ranks of compute ops on two streams with dependencies on any op of the rank (earlier, later: forward
    dependencies and cycles), all_reduces on two groups issued in a random order per rank, and batched exchanges
    of two sends and two recvs between neighbours, their members spread among the rank's ops, each maybe depending
    on an op written before it (inputs of a batch written after its first member; with three ranks, lazy creation
    of the world's communicator without rank 2, where a pair names the world as its `group:`)."""
    w = rng.randint(1, 3)
    groups = [list(range(w))] + ([[0, 1]] if w > 2 else [])
    colls = [(f"c{k}", rng.choice(groups)) for k in range(rng.randint(0, 3))]
    per_rank: list[list[str]] = []
    names: list[list[str]] = []
    for r in range(w):
        n = rng.randint(1, 5)
        names.append([f"x{j}" for j in range(n)])
        entries = []
        for name in names[r]:
            deps = [d for d in rng.sample(names[r], rng.choice((0, 0, 0, 1, 2)) if n > 1 else 0) if d != name]
            entries.append(f"{{name: {name}, kind: compute, duration_us: 1, ranks: [{r}], stream: {rng.choice('ab')}, "
                           f"deps: {deps}}}")
        mine = [c for c in colls if r in c[1]]
        if rng.random() < 0.4:
            rng.shuffle(mine)
        for c, g in mine:
            entries.insert(rng.randint(0, len(entries)), f"{{name: {c}, kind: all_reduce, bytes: 64, ranks: [{r}], "
                           f"group: {g}}}")
        per_rank.append(entries)
    for a in range(w - 1):
        if rng.random() < 0.5:
            continue
        b = a + 1
        # a process group written on the pair, at times the world's (which a rank of no pair never calls)
        grp = f", group: {list(range(w))}" if rng.random() < 0.3 else ""
        for r, kind, peer in ((a, "send", b), (b, "recv", a)):
            for k in range(2):
                at = rng.randint(0, len(per_rank[r]))
                earlier = [x for x in names[r] if any(e.startswith(f"{{name: {x},") for e in per_rank[r][:at])]
                deps = rng.sample(earlier, min(len(earlier), rng.choice((0, 1))))  # written before it, maybe after
                entry = (f"{{name: {kind}{a}_{k}, kind: {kind}, peer: {peer}, bytes: 8, ranks: [{r}], p2p_batch: q{a}, "
                         f"stream: {rng.choice('ab')}, deps: {deps}{grp}}}")
                per_rank[r].insert(at, entry)
    ops = "".join(f"  - {o}\n" for entries in per_rank for o in entries)
    return f"schema_version: 1\nname: g\nworld_size: {w}\nops:\n{ops}"


FAMILIES = ("dependency cycle", "which is written after it", "are issued in a different order", "posts whole at its",
            "lazily initialised process group creates", "ranks would wait on each other forever")


def test_array_wording_equals_the_object_build_on_random_schedules():
    rng = random.Random(0)
    seen: dict[str, int] = {}
    for _ in range(240):
        spec = api.load_text(_random_schedule(rng))
        ref = _reference_error(spec)
        mine = word_fault(lower(spec, check=False))
        if ref is None:
            continue
        family = next(f for f in FAMILIES if f in str(ref))
        assert mine is not None and _fields(mine) == _fields(ref)
        seen[family] = seen.get(family, 0) + 1
        with pytest.raises(SchedsimError) as fast:
            lower(spec)
        assert _fields(fast.value) == _fields(ref)
    assert set(seen) == set(FAMILIES)  # each family was drawn


#: Two ranks with a 1F1B block of 2 microbatches, then the ops written after ``ops:``
PIPELINE_1F1B = ("schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: 1f1b\n  p: 2\n  m: 2\n"
                 "  stage: {forward: [{kind: compute, duration_us: 1}], backward_input: [{kind: compute, "
                 "duration_us: 1}]}\nops:\n")


def test_a_pipeline_blocks_collective_order_fault_gets_its_compute_grid():
    spec = api.load_text(
        PIPELINE_1F1B + CASES["collective order"][0])
    ref = _reference_error(spec)
    assert isinstance(ref, DeadlockError) and ref.detail is not None
    assert ref.detail.endswith("Pipeline schedule (compute actions per rank):\n        Rank 0 Rank 1\n"
                               "Step 0: 0F0    1F0\nStep 1: 0F1    1B0\nStep 2: 0B0    1F1\nStep 3: 0B1    1B1\n")
    with pytest.raises(DeadlockError) as fast:
        lower(spec)
    assert _fields(fast.value) == _fields(ref)


def test_a_wait_cycle_in_a_pipeline_program_marks_the_step_of_its_first_tagged_send_recv():
    """A wait cycle (both ranks send first, on two streams) beside a 1F1B block: the pipeline's compute grid follows
    the issue grid, marking the step of the first send/recv the message names that carries ``stage`` and ``mb``
    tags (r@r0: stage 0, microbatch 1, whose 0F1 is rank 0's step 1), as the object-based build marks it."""
    spec = api.load_text(
        PIPELINE_1F1B +
        "  - {name: s, kind: send, peer: '{1 - rank}', bytes: 8, stream: a, tags: {stage: '{rank}', mb: 1}}\n"
        "  - {name: r, kind: recv, peer: '{1 - rank}', bytes: 8, stream: b, tags: {stage: '{rank}', mb: 1}}\n")
    ref = _reference_error(spec)
    assert isinstance(ref, DeadlockError) and ref.detail is not None
    assert str(ref).startswith("ranks would wait on each other forever: r@r0 cannot start before s@r0 completes")
    assert ref.detail.endswith("Step 0: 0F0    1F0\nStep 1: 0F1    1B0    <-- ERROR HERE\nStep 2: 0B0    1F1\n"
                               "Step 3: 0B1    1B1\n")
    with pytest.raises(DeadlockError) as fast:
        lower(spec)
    assert _fields(fast.value) == _fields(ref)


def test_a_symmetric_lowerings_other_fault_is_not_worded_as_lazy_creation():
    """A symmetric training lowering under lazy communicator creation issues the data-parallel collectives on its
    represented ranks only; the others are not missing callers. A dependency cycle there is worded as the cycle, as
    the every-rank lowering words it (it was a lazy-creation hang naming ranks [1, 2, 3] as never calling)."""
    spec = api.load_text(
        "schema_version: 1\nname: x\nworld_size: 4\nnccl_init: lazy\ntraining: {num_layers: 2, hidden_size: 64, "
        "num_attention_heads: 8, seq_length: 32, micro_batch_size: 2, global_batch_size: 16, vocab_size: 1000, "
        "tp: 1, bf16: true}\nops:\n"
        "  - {name: a, kind: compute, duration_us: 1, deps: [b], ranks: [0]}\n"
        "  - {name: b, kind: compute, duration_us: 1, deps: [a], stream: other, ranks: [0]}\n")
    errors = []
    for symmetric in (False, True):
        with pytest.raises(SchedsimError) as e:
            lower(spec, symmetric=symmetric)
        errors.append(e.value)
    assert lower(spec, check=False, symmetric=True).represented == (0,)
    assert type(errors[1]) is CycleError and str(errors[1]) == str(errors[0])
    assert str(errors[0]).startswith("dependency cycle: a@r0 -> b@r0 -> a@r0")


WARNINGS = {  # a "may hang" warning of each kind, and how it starts
    "cross-communicator order": (
        "nccl_init: eager\nops:\n"
        "  - {name: A, kind: all_reduce, bytes: 8, stream: s0, ranks: [0], group: [0, 1]}\n"
        "  - {name: C, kind: all_reduce, bytes: 8, stream: s1, ranks: [0], group: [0, 2]}\n"
        "  - {name: B, kind: all_reduce, bytes: 8, stream: s0, ranks: [1], group: [1, 2]}\n"
        "  - {name: A, kind: all_reduce, bytes: 8, stream: s1, ranks: [1], group: [0, 1]}\n"
        "  - {name: C, kind: all_reduce, bytes: 8, stream: s0, ranks: [2], group: [0, 2]}\n"
        "  - {name: B, kind: all_reduce, bytes: 8, stream: s1, ranks: [2], group: [1, 2]}\n", 3,
        "may hang: the ranks issue these collectives of different communicators in orders that no single order "
        "agrees with (A[0,1] -> C[0,2] -> B[1,2] -> A[0,1], each arrow one rank's issue order)"),
    "eager init": (
        "ops:\n"
        "  - {name: snd, kind: send, peer: 1, bytes: 8, stream: a, ranks: [0]}\n"
        "  - {name: ar, kind: all_reduce, bytes: 8, stream: b, ranks: [0]}\n"
        "  - {name: ar, kind: all_reduce, bytes: 8, stream: b, ranks: [1]}\n"
        "  - {name: rcv, kind: recv, peer: 0, bytes: 8, stream: a, ranks: [1]}\n", 2,
        "may hang: with an eagerly initialised process group (init_process_group(device_id=...), as `schedsim execute "
        "--backend nccl` does) torch runs lone send/recv on the collectives' communicator, in issue order with them, "
        "and then ar@r0 cannot start before snd@r0 completes (NCCL runs one communicator's ops in issue order, "
        "whatever the stream); ar@r1 completes only once ar@r0 is posted (a member of the same collective); rcv@r1 "
        "cannot start before ar@r1 completes (NCCL runs one communicator's ops in issue order, whatever the stream); "
        "snd@r0 completes only once rcv@r1 is posted (its send/recv partner)\n  fix: issue the send/recv"),
    "multi-peer batch": (  # pytorch/PiPPy#969: stage 2 batches its recvs from 0 and 1; stage 1 sends after computing
        "ops:\n"
        "  - {name: s01, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: out}\n"
        "  - {name: s02, kind: send, peer: 2, bytes: 8, ranks: [0], p2p_batch: out}\n"
        "  - {name: r01, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: in}\n"
        "  - {name: f1, kind: compute, duration_us: 1, ranks: [1], deps: [r01]}\n"
        "  - {name: s12, kind: send, peer: 2, bytes: 8, ranks: [1], p2p_batch: out, deps: [f1]}\n"
        "  - {name: r02, kind: recv, peer: 0, bytes: 8, ranks: [2], p2p_batch: in}\n"
        "  - {name: r12, kind: recv, peer: 1, bytes: 8, ranks: [2], p2p_batch: in}\n", 3,
        "may hang: a batch of send/recv with two or more peers (batch_isend_irecv) is one NCCL kernel"),
}


@pytest.mark.parametrize("case", list(WARNINGS))
def test_each_may_hang_warning_is_worded_without_the_object_build(case):
    """Each "may hang" warning is worded from the arrays (the object build refused) and equals that build's."""
    body, world, start = WARNINGS[case]
    spec = api.load_text(f"schema_version: 1\nname: w\nworld_size: {world}\n{body}")
    prog = lower(spec, check=False)
    G = graph_from_ops(prog.ops(), prog.graph_info(), prog.file, check=True)
    ref = [w for w in G.graph["warnings"] if w.startswith("may hang")]
    assert len(ref) == 1 and ref[0].startswith(start), ref
    assert "\n  fix: " in ref[0] and "(* = the ops that block)" in ref[0]
    assert [w for w in lower(spec).warnings if w.startswith("may hang")] == ref
    assert not [w for w in lower(spec, warn=False).warnings if w.startswith("may hang")]  # not worded


def test_canonical_cycle_by_hand():
    """Nodes 0-4, hub 5 (folded out). Cycles through 1: 1 -> 3 -> 1 (directly, reason 7, and through the hub,
    reason 6) and 1 -> 2 -> 4 -> 1; 0 lies on none. The cycle goes through the smallest node on one (1), is the
    shortest through it, and each step takes the first reason of the edges that make it; the order of the edges,
    and an unused hub, change nothing."""
    edges = [(0, 1, 0), (1, 2, 4), (2, 4, 0), (4, 1, 0), (1, 3, 5), (3, 5, 9), (5, 1, 6), (3, 1, 7)]
    want = [(1, 3, 5), (3, 1, 6)]
    rng = random.Random(1)
    for nodes in (6, 7):
        for _ in range(5):
            rng.shuffle(edges)
            src, dst, prio = (np.array(x) for x in zip(*edges, strict=True))
            assert canonical_cycle(nodes, src, dst, prio, 5) == want
    src, dst, prio = (np.array(x) for x in zip(*[e for e in edges if e[:2] != (3, 1) and e[:2] != (3, 5)],
                                              strict=True))
    assert canonical_cycle(6, src, dst, prio, 5) == [(1, 2, 4), (2, 4, 0), (4, 1, 0)]
    assert canonical_cycle(6, np.array([0, 1]), np.array([1, 2]), np.array([0, 0]), 5) is None


def test_canonical_cycle_is_the_shortest_through_the_smallest_node_on_one():
    """Random graphs of 2-9 nodes and up to 3 hubs: the cycle found is a cycle of the folded graph, through its
    smallest node that lies on one (networkx's strongly connected components), as short as networkx's shortest
    cycle through it, and the same for any order of the edges."""
    import networkx as nx

    rng = random.Random(0)
    found = 0
    for _ in range(300):
        n, hubs = rng.randint(2, 9), rng.randint(0, 3)
        edges = sorted({(rng.randrange(n + hubs), rng.randrange(n)) for _ in range(rng.randint(1, 3 * n))}
                       | {(rng.randrange(n), n + rng.randrange(hubs)) for _ in range(hubs and rng.randint(0, n))})
        edges = [(a, b) for a, b in edges if a != b]
        F = nx.DiGraph()
        F.add_nodes_from(range(n))
        for a, b in edges:
            if a < n:
                F.add_edges_from([(a, b)] if b < n else [(a, z) for h, z in edges if h == b and z != a])
        src = np.array([a for a, _b in edges], np.int64)
        dst = np.array([b for _a, b in edges], np.int64)
        got = canonical_cycle(n + hubs, src, dst, np.zeros(len(edges), np.int64), n)
        on = sorted(x for c in nx.strongly_connected_components(F) if len(c) > 1 for x in c)
        if not on:
            assert got is None
            continue
        found += 1
        assert got is not None and got[0][0] == on[0] and got[-1][1] == on[0]
        assert all(F.has_edge(a, b) for a, b, _p in got)
        assert all(x[1] == y[0] for x, y in zip(got, got[1:], strict=False))
        shortest = min(nx.shortest_path_length(F, b, on[0]) + 1 for b in F.successors(on[0])
                       if nx.has_path(F, b, on[0]))
        assert len(got) == shortest
        o = rng.sample(range(len(edges)), len(edges))
        assert canonical_cycle(n + hubs, src[o], dst[o], np.zeros(len(edges), np.int64), n) == got
    assert found > 100
