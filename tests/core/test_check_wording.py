"""The static checks' errors worded from the array rules' witnesses (schedsim.lower.check_errors.word_fault):
a dependency written after its user, a dependency cycle, collectives of one group in different orders. Each is
raised without the object-based build, and equals that build's error (text, class and fields)."""

from __future__ import annotations

import random

import pytest

from schedsim import api
from schedsim.errors import CycleError, DeadlockError, GraphError, SchedsimError
from schedsim.lower import lower
from schedsim.lower import reference as reference_module
from schedsim.lower.check_errors import word_fault
from schedsim.lower.checks import collective_order_witness, dag_cycle, forward_dep
from schedsim.lower.reference import graph_from_ops


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
    "lazy communicator creation": (  # a batch runs on the world's communicator, which rank 2 never calls
        "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0], p2p_batch: x}\n"
        "  - {name: r, kind: recv, peer: 0, bytes: 8, ranks: [1], p2p_batch: y}\n",
        DeadlockError, "rank(s) [0, 1] make NCCL calls on the communicator of ranks [0, 1, 2] (batched send/recv or "
        "collectives on them), which a lazily initialised process group creates at each rank's first call on it and "
        "which waits for all its ranks; rank(s) [2] never call it"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_family_is_worded_without_the_object_build(case, monkeypatch):
    ops, cls, start = CASES[case]
    spec = _spec(ops, 3 if "lazy" in case else 2)
    ref = _reference_error(spec)
    assert ref is not None and type(ref) is cls and str(ref).startswith(start)

    def refuse(*_a, **_k):
        raise AssertionError("the object-based build ran")

    monkeypatch.setattr(reference_module, "graph_from_ops", refuse)
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
    of the world's communicator without rank 2)."""
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
        for r, kind, peer in ((a, "send", b), (b, "recv", a)):
            for k in range(2):
                at = rng.randint(0, len(per_rank[r]))
                earlier = [x for x in names[r] if any(e.startswith(f"{{name: {x},") for e in per_rank[r][:at])]
                deps = rng.sample(earlier, min(len(earlier), rng.choice((0, 1))))  # written before it, maybe after
                entry = (f"{{name: {kind}{a}_{k}, kind: {kind}, peer: {peer}, bytes: 8, ranks: [{r}], p2p_batch: q{a}, "
                         f"stream: {rng.choice('ab')}, deps: {deps}}}")
                per_rank[r].insert(at, entry)
    ops = "".join(f"  - {o}\n" for entries in per_rank for o in entries)
    return f"schema_version: 1\nname: g\nworld_size: {w}\nops:\n{ops}"


FAMILIES = ("dependency cycle", "which is written after it", "are issued in a different order", "posts whole at its",
            "lazily initialised process group creates")


def test_array_wording_equals_the_object_build_on_random_schedules():
    rng = random.Random(0)
    seen: dict[str, int] = {}
    for _ in range(240):
        spec = api.load_text(_random_schedule(rng))
        ref = _reference_error(spec)
        mine = word_fault(lower(spec, check=False))
        if ref is None:
            continue
        family = next((f for f in FAMILIES if f in str(ref)), None)
        if family is None:  # another rule (an NCCL wait-for cycle): still worded by the object-based build
            assert mine is None
            continue
        assert mine is not None and _fields(mine) == _fields(ref)
        seen[family] = seen.get(family, 0) + 1
        with pytest.raises(SchedsimError) as fast:
            lower(spec)
        assert _fields(fast.value) == _fields(ref)
    assert set(seen) == set(FAMILIES)  # each family was drawn


def test_a_pipeline_blocks_collective_order_fault_gets_its_compute_grid(monkeypatch):
    spec = api.load_text(
        "schema_version: 1\nname: c\nworld_size: 2\npipeline:\n  schedule: 1f1b\n  p: 2\n  m: 2\n"
        "  stage: {forward: [{kind: compute, duration_us: 1}], backward_input: [{kind: compute, duration_us: 1}]}\n"
        "ops:\n" + CASES["collective order"][0])
    ref = _reference_error(spec)
    assert isinstance(ref, DeadlockError) and ref.detail is not None
    assert ref.detail.endswith("Pipeline schedule (compute actions per rank):\n        Rank 0 Rank 1\n"
                               "Step 0: 0F0    1F0\nStep 1: 0F1    1B0\nStep 2: 0B0    1F1\nStep 3: 0B1    1B1\n")
    monkeypatch.setattr(reference_module, "graph_from_ops", lambda *_a, **_k: None)
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
