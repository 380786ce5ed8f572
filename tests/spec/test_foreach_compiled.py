"""A `foreach` body compiled once (schedsim.spec.context._Plan) gives the same Program, warnings and errors as
the loader's general path that evaluates every field of every iteration with ``_eval_value``, and as the same
ops written out one by one."""

from __future__ import annotations

import dataclasses
import re

import pytest

from schedsim.errors import SpecError
from schedsim.expr import ExprError
from schedsim.lower import lower
from schedsim.lower.checks import launches
from schedsim.spec import context
from schedsim.spec.loader import load_text

NESTED = """\
schema_version: 1
name: nested
world_size: 4
params: {chunks: 4, M: 1024}
ops:
  - foreach: {i: range(chunks), j: [0, 1]}
    ops:
      - name: mm{i}_{j}
        kind: matmul
        m: M // (i + 1)
        n: 256
        k: "{128 * (j + 1)}"
        dtype: bf16
        stream: s{j}
      - foreach: {c: range(i)}
        when: i % 2 == 1
        ops:
          - name: cp{i}_{j}_{c}
            kind: memcpy
            bytes: (c + 1) * 4096
            direction: h2d
            deps: ["mm{i}_{j}"]
      - name: ar{i}_{j}
        kind: all_reduce
        bytes: "{2**(i + 10)}"
        stream: comm{j % 2}
        deps: ["mm{i}_{j}"]
        tags: {phase: "c{i}"}
      - name: w{i}_{j}
        when: i > 0
        kind: compute
        flops: 1e9 * (i + j)
        deps: ["ar{i}_{j}", "ar{i - 1}_{j}"]
      - name: h{i}_{j}
        kind: compute
        flops: 1e6 * (rank + 1)
        ranks: [0, 2]
      - name: snd{i}_{j}
        kind: send
        peer: (rank + 1) % world_size
        bytes: 64 * (rank + 1)
        p2p_batch: b{i}_{j}
        stream: p2p
      - name: rcv{i}_{j}
        kind: recv
        peer: (rank + world_size - 1) % world_size
        bytes: 64 * ((rank + world_size - 1) % world_size + 1)
        p2p_batch: b{i}_{j}
        stream: p2p
"""


def by_id_flops(ops, op_id: str) -> float:  # type: ignore[no-untyped-def]
    return next(o.flops for o in ops if f"{o.name}@r{o.rank}" == op_id)


def _interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every string field and `when` fall back to the general path (no expression compiles)."""

    def refuse(text: str) -> None:
        raise ExprError("not compiled in this test")

    monkeypatch.setattr(context, "compile_expr", refuse)
    monkeypatch.setattr(context, "compile_interpolate", refuse)


def _program(text: str, overrides: dict | None = None):  # type: ignore[no-untyped-def]
    prog = lower(load_text(text, "t.yaml", overrides))
    return prog, prog.ops()


def _same(a, b, *, sources: bool = True) -> None:  # type: ignore[no-untyped-def]
    (pa, oa), (pb, ob) = a, b
    if not sources:
        oa = [dataclasses.replace(o, source="") for o in oa]
        ob = [dataclasses.replace(o, source="") for o in ob]
    assert oa == ob
    assert pa.ids() == pb.ids()
    assert pa.dep_edges.tolist() == pb.dep_edges.tolist()
    assert pa.stream_edges.tolist() == pb.stream_edges.tolist()
    assert pa.p2p.tolist() == pb.p2p.tolist()
    assert pa.collectives() == pb.collectives()
    assert launches(pa) == launches(pb)
    assert [str(w) for w in pa.warnings] == [str(w) for w in pb.warnings]


def test_nested_foreach_when_rank_and_expressions_match_the_general_path(monkeypatch):
    fast = _program(NESTED)
    ops = fast[1]
    # by hand: per rank 4*2 mm + cp for i in (1, 3): (1 + 3)*2 + 8 ar + 6 w + 8 snd + 8 rcv
    assert len(ops) == 4 * (8 + 8 + 8 + 6 + 8 + 8) + 2 * 8  # + h on ranks 0 and 2
    assert by_id_flops(ops, "h3_1@r2") == 3e6 and by_id_flops(ops, "h0_0@r0") == 1e6
    by_id = {f"{o.name}@r{o.rank}": o for o in ops}
    assert by_id["mm2_1@r0"].m == 1024 // 3 and by_id["mm2_1@r0"].k == 256 and by_id["mm2_1@r0"].stream == "s1"
    assert by_id["cp3_0_2@r1"].nbytes == 3 * 4096 and "cp2_0_0@r1" not in by_id
    assert by_id["ar3_1@r2"].nbytes == 2 ** 13 and by_id["ar3_1@r2"].stream == "comm1"
    assert by_id["ar3_1@r2"].tags == (("phase", "c3"),)
    assert by_id["w2_1@r0"].deps == ("ar2_1", "ar1_1") and by_id["w2_1@r0"].flops == 3e9
    assert by_id["snd1_0@r3"].peer == 0 and by_id["snd1_0@r3"].nbytes == 256
    assert by_id["rcv1_0@r0"].peer == 3 and by_id["rcv1_0@r0"].nbytes == 256
    _interpreted(monkeypatch)
    _same(fast, _program(NESTED))


def test_large_foreach_matches_the_ops_written_one_by_one():
    looped = """\
schema_version: 1
name: g
world_size: 2
params: {chunks: 50}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - {name: "mm{i}", kind: matmul, m: 64*(i+1), n: 64, k: 64, dtype: bf16, stream: compute}
      - {name: "ar{i}", kind: all_reduce, bytes: "2**20 + i", stream: "comm{i % 3}", deps: ["mm{i}"]}
"""
    lines = ["schema_version: 1", "name: g", "world_size: 2", "ops:"]
    for i in range(50):
        lines.append(f"  - {{name: mm{i}, kind: matmul, m: {64 * (i + 1)}, n: 64, k: 64, dtype: bf16, "
                     "stream: compute}")
        lines.append(f"  - {{name: ar{i}, kind: all_reduce, bytes: {2 ** 20 + i}, stream: comm{i % 3}, "
                     f"deps: [mm{i}]}}")
    _same(_program(looped), _program("\n".join(lines) + "\n"), sources=False)


BAD_ITERATION = """\
schema_version: 1
name: bad
world_size: 2
params: {chunks: 6}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - name: mm{i}
        kind: matmul
        m: 4096 // (i - 3)
        n: 64
        k: 64
        dtype: bf16
"""


@pytest.mark.parametrize("text, line, field, what", [
    (BAD_ITERATION, 10, "ops[0].ops[0].m", "division by zero"),  # the 4th iteration divides by 0
    (BAD_ITERATION.replace("4096 // (i - 3)", "64 * (i - 2)"), 10, "ops[0].ops[0].m", "greater than 0"),
    (BAD_ITERATION.replace("name: mm{i}", "name: mm{i // 2}").replace("4096 // (i - 3)", "64"), 8,
     "ops[0].ops[0]", "used twice"),
    (BAD_ITERATION.replace("n: 64", "n: 64 * nope"), 11, "ops[0].ops[0].n", "unknown name 'nope'"),
    (BAD_ITERATION.replace("dtype: bf16", "dtype: bf16\n        when: i > zz"), 14, "ops[0].ops[0].when",
     "unknown name 'zz'"),
])
def test_an_error_inside_an_iteration_is_the_general_paths_error(monkeypatch, text, line, field, what):
    with pytest.raises(SpecError) as fast:
        load_text(text, "bad.yaml")
    _interpreted(monkeypatch)
    with pytest.raises(SpecError) as slow:
        load_text(text, "bad.yaml")
    assert str(fast.value) == str(slow.value)
    assert f"bad.yaml:{line}" in str(fast.value) and field in str(fast.value) and what in str(fast.value)
    assert fast.value.fix


@pytest.mark.parametrize("text", ["i", "{i}", " i ", "true", "s", "b", "big", "f", "nope", "64*2**20", "1/0",
                                  "'a' * 3", "range(3)", "i * 2 + 1", "2**100000", "x{i}y{i+1}", "mm{i}"])
def test_compiled_expressions_equal_evaluate(text):
    """compile_expr / compile_interpolate against evaluate / interpolate: values, types and errors."""
    from schedsim.expr import compile_expr, compile_interpolate, evaluate, interpolate

    env = {"i": 3, "s": "ab", "b": True, "big": 2 ** 5000, "f": 0.5}
    pairs = ((compile_expr, evaluate, text.strip("{}")), (compile_interpolate, interpolate, text))
    for compiled, reference, t in pairs:
        try:
            want = reference(t, env)
        except ExprError as e:
            with pytest.raises(ExprError, match=re.escape(str(e))):
                compiled(t)(env)
            continue
        got = compiled(t)(env)
        assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text", ["mm{i}", "{i}x", "a{i}b-c", "x{i}y{i+1}", "{s}_{i}_{n}", "p{n}q", "{i}", "{f}",
                                  "r{b}", "{i}{s}{f}"])
def test_a_foreach_field_vectorised_is_each_iteration_interpolated(text):
    """compile_interpolate_vector over the iterations of a loop (int, str, float and bool values; ``n`` the same in
    all) gives what interpolate gives for each, value and type."""
    from schedsim.expr import _Vec, compile_interpolate_vector, interpolate, vector_values

    loops = {"i": [0, 7, -3, 10**20], "s": ["a", "", "b{c}", "x"], "f": [0.5, 1e300, -0.0, 2.0],
             "b": [True, False, True, False]}
    got = compile_interpolate_vector(text)({"n": 4, **{k: None for k in loops}},
                                           {k: vector_values(v) for k, v in loops.items()}, 4)
    want = [interpolate(text, {"n": 4, **{k: v[j] for k, v in loops.items()}}) for j in range(4)]
    vals = got.a.tolist() if isinstance(got, _Vec) else [got] * 4
    assert vals == want and [type(x) for x in vals] == [type(x) for x in want]
