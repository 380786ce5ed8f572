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
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_family_is_worded_without_the_object_build(case, monkeypatch):
    ops, cls, start = CASES[case]
    spec = _spec(ops)
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
    dependencies and cycles), and all_reduces on two groups issued in a random order per rank."""
    w = rng.randint(1, 3)
    lines = []
    groups = [list(range(w))] + ([[0, 1]] if w > 2 else [])
    colls = [(f"c{k}", rng.choice(groups)) for k in range(rng.randint(0, 3))]
    for r in range(w):
        n = rng.randint(1, 5)
        names = [f"x{j}" for j in range(n)]
        entries = []
        for j, name in enumerate(names):
            deps = [d for d in rng.sample(names, rng.choice((0, 0, 1, 2)) if n > 1 else 0) if d != names[j]]
            entries.append(f"{{name: {name}, kind: compute, duration_us: 1, ranks: [{r}], stream: {rng.choice('ab')}, "
                           f"deps: {deps}}}")
        mine = [c for c in colls if r in c[1]]
        if rng.random() < 0.4:
            rng.shuffle(mine)
        for c, g in mine:
            entries.insert(rng.randint(0, len(entries)), f"{{name: {c}, kind: all_reduce, bytes: 64, ranks: [{r}], "
                           f"group: {g}}}")
        lines += entries
    ops = "".join(f"  - {o}\n" for o in lines)
    return f"schema_version: 1\nname: g\nworld_size: {w}\nops:\n{ops}"


FAMILIES = ("dependency cycle", "which is written after it", "are issued in a different order")


@pytest.mark.parametrize("seed", range(3))
def test_array_wording_equals_the_object_build_on_random_schedules(seed):
    rng = random.Random(seed)
    seen: dict[str, int] = {}
    for _ in range(80):
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
