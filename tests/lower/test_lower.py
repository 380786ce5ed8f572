"""The lowering (schedsim.lower): Program columns by hand, parity with the object-based build, array checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedsim import api
from schedsim.errors import SchedsimError
from schedsim.graph.build import graph_of
from schedsim.lower import lower
from schedsim.lower.checks import launches
from tests.oracle.object_build import graph_from_ops

ROOT = Path(__file__).resolve().parents[2]

TWO_RANKS = """
schema_version: 1
name: two
world_size: 2
ops:
  - {name: mm, kind: matmul, m: 128, n: 128, k: 128, dtype: bf16}
  - {name: ar, kind: all_reduce, bytes: 1024, deps: [mm]}
  - {name: s, kind: send, peer: 1, bytes: 64, ranks: [0], p2p_batch: x}
  - {name: r2, kind: recv, peer: 1, bytes: 64, ranks: [0], p2p_batch: x}
  - {name: r, kind: recv, peer: 0, bytes: 64, ranks: [1], p2p_batch: y}
  - {name: s2, kind: send, peer: 0, bytes: 64, ranks: [1], p2p_batch: y}
  - {name: mm2, kind: matmul, m: 128, n: 128, k: 128, dtype: bf16, deps: [ar]}
"""


def test_program_columns_and_arrays_by_hand():
    prog = lower(api.load_text(TWO_RANKS))
    ids = prog.ids()
    assert ids == ["mm@r0", "ar@r0", "s@r0", "r2@r0", "mm2@r0", "mm@r1", "ar@r1", "r@r1", "s2@r1", "mm2@r1"]
    assert prog.rank.tolist() == [0] * 5 + [1] * 5
    assert prog.seq.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    # declared dependencies: ar <- mm, mm2 <- ar on each rank
    assert [(ids[a], ids[b]) for a, b in prog.dep_edges.tolist()] == [
        ("mm@r0", "ar@r0"), ("ar@r0", "mm2@r0"), ("mm@r1", "ar@r1"), ("ar@r1", "mm2@r1")]
    # stream order: compute mm -> mm2; comm ar -> (s, r2 one batch: both follow ar, neither the other)
    stream = {(ids[a], ids[b]) for a, b in prog.stream_edges.tolist()}
    assert stream == {("mm@r0", "mm2@r0"), ("ar@r0", "s@r0"), ("ar@r0", "r2@r0"),
                      ("mm@r1", "mm2@r1"), ("ar@r1", "r@r1"), ("ar@r1", "s2@r1")}
    assert prog.collectives() == {"ar#0,1": [1, 6]}
    assert [(ids[a], ids[b]) for a, b in prog.p2p.tolist()] == [("s@r0", "r@r1"), ("s2@r1", "r2@r0")]
    assert launches(prog) == {0: [[1], [2, 3]], 1: [[6], [7, 8]]}
    ops = prog.ops()
    assert ops[0].flops == 2.0 * 128 ** 3 and ops[0].nbytes == 3 * 128 * 128 * 2
    assert ops[2].group == (0, 1) and ops[7].group == (0, 1) and ops[7].peer == 0 and ops[2].p2p_batch == "x"
    assert prog.tmpl.flags.writeable is False


@pytest.mark.parametrize("path", sorted((ROOT / "schedules").glob("*.yaml")), ids=lambda p: p.stem)
def test_graph_of_the_program_is_the_object_built_graph(path):
    """Same nodes, Op attributes, edges (with kinds and successor order) and graph info as the object-based
    build of the same ops, checks included."""
    prog = lower(api.load(path))
    G = graph_of(prog)
    R = graph_from_ops(prog.ops(), prog.graph_info(), prog.file, check=True)
    assert list(G.nodes) == list(R.nodes)
    assert all(G.nodes[n]["op"] == R.nodes[n]["op"] for n in G)
    assert list(G.edges(data=True)) == list(R.edges(data=True))
    assert {u: list(G.succ[u]) for u in G} == {u: list(R.succ[u]) for u in R}
    assert G.graph == R.graph and list(G.graph) == list(R.graph)


BROKEN = [
    ("unknown dep", "  - {name: a, kind: compute, duration_us: 1, deps: [nope]}\n"),
    ("self dep", "  - {name: a, kind: compute, duration_us: 1, deps: [a]}\n"),
    ("forward dep", "  - {name: a, kind: compute, duration_us: 1, deps: [b]}\n"
                    "  - {name: b, kind: compute, duration_us: 1}\n"),
    ("cycle", "  - {name: a, kind: compute, duration_us: 1, deps: [b]}\n"
              "  - {name: b, kind: compute, duration_us: 1, deps: [a], stream: other}\n"),
    ("unmatched send", "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0]}\n"),
    ("size mismatch", "  - {name: s, kind: send, peer: 1, bytes: 8, ranks: [0]}\n"
                      "  - {name: r, kind: recv, peer: 0, bytes: 16, ranks: [1]}\n"),
    ("send first both", "  - {name: s, kind: send, peer: '(rank + 1) % 2', bytes: 8}\n"
                        "  - {name: r, kind: recv, peer: '(rank + 1) % 2', bytes: 8}\n"),
    ("collective order", "  - {name: a, kind: all_reduce, bytes: 8, ranks: [0]}\n"
                         "  - {name: b, kind: all_reduce, bytes: 8, ranks: [0]}\n"
                         "  - {name: b, kind: all_reduce, bytes: 8, ranks: [1]}\n"
                         "  - {name: a, kind: all_reduce, bytes: 8, ranks: [1]}\n"),
]


@pytest.mark.parametrize("case,ops", BROKEN, ids=[c for c, _o in BROKEN])
def test_array_checks_raise_the_object_builds_error(case, ops):
    spec = api.load_text(f"schema_version: 1\nname: bad\nworld_size: 2\nops:\n{ops}")
    with pytest.raises(SchedsimError) as fast:
        lower(spec)
    prog = lower(spec, check=False) if case in ("forward dep", "cycle", "send first both", "collective order") \
        else None
    if prog is not None:  # the fault is found by the checks: the reference words it the same way
        with pytest.raises(SchedsimError) as ref:
            graph_from_ops(prog.ops(), prog.graph_info(), prog.file, check=True)
        assert str(fast.value) == str(ref.value)
    assert "fix" in str(fast.value)


def test_predict_builds_no_networkx_graph():
    run = api.predict(api.load_text(TWO_RANKS), "h200")
    assert run._graph is None and run.program.N == 10
    assert list(run.graph.nodes)[:2] == ["mm@r0", "ar@r0"]  # built on access


def _random_schedule(rng) -> str:
    """A small schedule mixing collectives on overlapping groups (issued in random per-rank orders), lone
    and batched send/recv on two streams, and a compute op per rank: many hang, some do not."""
    w = rng.choice([2, 3, 4])
    groups = [list(range(w))] + ([[0, 1]] if w > 2 else []) + ([[1, 2, 3]] if w == 4 else [])
    colls = [(f"c{k}", rng.choice(groups)) for k in range(rng.randint(0, 3))]
    per_rank: dict[int, list[str]] = {r: [] for r in range(w)}
    for r in range(w):
        mine = [c for c in colls if r in c[1]]
        if rng.random() < 0.3:
            rng.shuffle(mine)
        per_rank[r] += [f"{{name: {n}, kind: all_reduce, bytes: 64, ranks: [{r}], group: {g}, "
                        f"stream: {rng.choice('ab')}}}" for n, g in mine]
    for k in range(rng.randint(0, 3)):
        a, b = rng.sample(range(w), 2)
        bs = [f", p2p_batch: q{rng.randint(0, 1)}" if rng.random() < 0.4 else "" for _ in range(2)]
        per_rank[a].insert(rng.randint(0, len(per_rank[a])), f"{{name: s{k}, kind: send, peer: {b}, bytes: 8, "
                           f"ranks: [{a}], stream: {rng.choice('ab')}{bs[0]}}}")
        per_rank[b].insert(rng.randint(0, len(per_rank[b])), f"{{name: r{k}, kind: recv, peer: {a}, bytes: 8, "
                           f"ranks: [{b}], stream: {rng.choice('ab')}{bs[1]}}}")
    for r in range(w):
        x = f"{{name: x, kind: compute, duration_us: 1, ranks: [{r}]}}"
        per_rank[r].insert(rng.randint(0, len(per_rank[r])), x)
    ops = "".join(f"  - {o}\n" for r in range(w) for o in per_rank[r])
    return f"schema_version: 1\nname: g\nworld_size: {w}\nops:\n{ops}"


@pytest.mark.parametrize("seed", range(4))
def test_array_checks_agree_with_the_object_build_on_random_schedules(seed):
    """Same verdict, same error text and same warnings as the object-based build (NCCL rules 1-5)."""
    import random

    rng = random.Random(seed)
    verdicts = []
    for _ in range(40):
        spec = api.load_text(_random_schedule(rng))
        try:
            prog = lower(spec, check=False)
        except SchedsimError:
            continue  # a pairing fault: found while linking, tested above
        fast = ref = None
        try:
            checked = lower(spec)
        except SchedsimError as e:
            fast = str(e)
        try:
            R = graph_from_ops(prog.ops(), prog.graph_info(), prog.file, check=True)
        except SchedsimError as e:
            ref = str(e)
        assert fast == ref
        if fast is None:
            assert list(checked.warnings) == R.graph["warnings"]
        verdicts.append(fast is None)
    assert True in verdicts and False in verdicts  # both kinds of schedule were drawn


def _writable_arrays(prog):
    """Names of the Program's arrays (fields and cached views, arrays inside tuples too) that can be written."""
    out = []
    for name in ("kind", "nbytes", "succ"):
        getattr(prog, name)  # fill the cached views
    for k, v in vars(prog).items():
        for j, a in enumerate(v if isinstance(v, tuple) else (v,)):
            if isinstance(a, np.ndarray) and a.flags.writeable:
                out.append(f"{k}[{j}]" if isinstance(v, tuple) else k)
    return out


def test_program_arrays_stay_read_only_through_cached_views_pickle_and_copy():
    """Every array a Program holds or hands out is read-only, also after pickle and (deep)copy: a caller that
    writes into ``prog.kind`` or a copy's ``tmpl`` would change what later simulations read."""
    import copy
    import pickle

    prog = lower(api.load_text(TWO_RANKS))
    assert _writable_arrays(prog) == []
    for other in (pickle.loads(pickle.dumps(prog)), copy.deepcopy(prog), copy.copy(prog)):
        assert other.ids() == prog.ids()
        assert _writable_arrays(other) == []
        with pytest.raises(ValueError):
            other.tmpl[0] = 1


HEAD = "schema_version: 1\nname: bad\nworld_size: 2\nops:\n"


def test_file_named_errors_keep_their_class_and_fields():
    """``api.lower_spec(spec, file)`` / ``api.build`` prefix the file to an error that lacks it, and the error
    stays what the lowering raised: a DeadlockError (with the ops it names), a GraphError, a CycleError."""
    from schedsim.errors import CycleError, DeadlockError, GraphError

    hang = api.load_text(HEAD + "  - {name: s, kind: send, peer: '(rank + 1) % 2', bytes: 8}\n"
                                "  - {name: r, kind: recv, peer: '(rank + 1) % 2', bytes: 8}\n")
    with pytest.raises(DeadlockError) as e:
        api.build(hang, file="job.yaml")
    assert str(e.value).startswith("job.yaml: ") and e.value.ops and e.value.fix
    cyc = api.load_text(HEAD + "  - {name: a, kind: compute, duration_us: 1, deps: [b]}\n"
                               "  - {name: b, kind: compute, duration_us: 1, deps: [a], stream: other}\n")
    with pytest.raises(CycleError) as c:
        api.lower_spec(cyc, file="job.yaml")
    assert str(c.value).startswith("job.yaml: ") and c.value.cycle
    unknown = api.load_text(HEAD + "  - {name: a, kind: compute, duration_us: 1, deps: [nope]}\n")
    with pytest.raises(GraphError, match="^job.yaml: "):
        api.lower_spec(unknown, file="job.yaml")


def test_the_public_lower_is_callable_once_its_package_is_imported() -> None:
    """``from schedsim import lower`` (the README's road: load_schedule → lower → simulate) gets the package
    ``schedsim.lower`` once anything imported it (it did in examples/chunks_whatif.py: "'module' object is not
    callable"); calling it lowers as :func:`schedsim.lower.lower` does."""
    import schedsim
    import schedsim.lower.training  # noqa: F401  (any import of the package binds schedsim.lower to it)
    from schedsim import load_text, lower, simulate
    from schedsim.hardware.profile import load_profile

    spec = load_text("schema_version: 1\nname: x\nworld_size: 1\nops:\n  - {name: a, kind: compute, duration_us: 5}\n")
    prog = lower(spec)
    assert prog is not None and prog.N == 1 and schedsim.lower(spec).N == 1
    assert simulate(prog, load_profile("h200")).makespan_s > 5e-6
