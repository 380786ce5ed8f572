"""A plain `foreach` body carried whole (schedsim.spec.block.Block, lowered in bulk, linked for one rank when
every op runs on all ranks) gives the same spec, the same Program (every column, array and template) and the
same errors as the general path, which expands and validates every iteration's op entry and links every op
(``foreach.TEMPLATES = False``, ``link.UNIFORM = False``)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.errors import SchedsimError
from schedsim.lower import link, lower
from schedsim.spec import foreach
from schedsim.spec.loader import load_schedule, load_text

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for d in ("schedules", "examples") for p in (ROOT / d).rglob("*.yaml")
                 if "foreach" in p.read_text())


@pytest.fixture
def general(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Call ``general(f)`` to run ``f`` on the general path: no blocks, and every op linked (no
    ``link._link_uniform``)."""

    def run(f):  # type: ignore[no-untyped-def]
        with monkeypatch.context() as m:
            m.setattr(foreach, "TEMPLATES", False)
            m.setattr(link, "UNIFORM", False)
            return f()

    return run


def same_program(a, b) -> None:  # type: ignore[no-untyped-def]
    """Every field of two Programs equal: arrays (dtype, shape, values), tables, templates (with their source,
    name and spec_index, which Op equality leaves out). Not ``remake``: how a uniform lowering makes its released
    fields again (Program.release_linked), not what the Program holds; the fields it makes are compared."""
    for f in dataclasses.fields(a):
        if f.name == "remake":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name
    assert [(t.source, t.spec_index, t.name) for t in a.templates] == \
        [(t.source, t.spec_index, t.name) for t in b.templates]


def _outcome(load):  # type: ignore[no-untyped-def]
    try:
        spec = load()
        return spec, lower(spec)
    except SchedsimError as e:
        return e, None


def assert_same_outcome(load, general) -> None:  # type: ignore[no-untyped-def]
    (fast, pf), (slow, ps) = _outcome(load), general(lambda: _outcome(load))
    if isinstance(slow, SchedsimError):
        assert type(fast) is type(slow) and str(fast) == str(slow)
        return
    assert not isinstance(fast, SchedsimError), fast
    assert fast.ops == slow.ops and fast._sources == slow._sources
    same_program(pf, ps)


def test_shipped_schedules_with_foreach_lower_to_the_same_program(general):
    assert len(SHIPPED) >= 7
    for path in SHIPPED:
        spec = load_schedule(path)
        assert spec._layout is not None, path  # the block path was taken
        same_program(lower(spec), general(lambda path=path: lower(load_schedule(path))))


def test_the_benchmark_input_lowers_to_the_same_program(general, monkeypatch):
    path = ROOT / "benchmarks/data/overlap_gen.yaml"
    over = {"world_size": 4, "chunks": 300}
    linked = []
    real = link._link_uniform
    monkeypatch.setattr(link, "_link_uniform", lambda *a: linked.append(real(*a)) or linked[-1])
    prog = lower(load_schedule(path, over))
    assert linked and linked[0] is not None  # linked for rank 0, then repeated
    same_program(prog, general(lambda: lower(load_schedule(path, over))))
    # by hand: 2 ops per chunk per rank; one template per body entry; ar{i} waits for mm{i} on its rank
    assert prog.N == 2 * 300 * 4 and len(prog.templates) == 2
    ids = prog.ids()
    assert ids[:3] == ["mm0@r0", "ar0@r0", "mm1@r0"] and ids[600] == "mm0@r1"
    assert prog.dep_idx[:2].tolist() == [0, 2] and prog.dep_ptr[1:4].tolist() == [0, 1, 1]
    assert prog.templates[1].nbytes == 64 * 2 ** 20 and prog.templates[0].flops == 2.0 * 4096 ** 3


MIXED = """\
schema_version: 1
name: mixed
world_size: 3
streams: [compute, comm, copy, s0, s1, s2]
params: {chunks: 5, M: 1024}
ops:
  - {name: first, kind: compute, duration_us: 3, ranks: [0]}
  - {name: first, kind: compute, duration_us: 2, ranks: [1, 2]}
  - foreach: {i: range(chunks), j: [0, 1]}
    ops:
      - name: mm{i}_{j}
        kind: matmul
        m: M // (i + 1)
        n: "{64 * (j + 1)}"
        k: 64
        dtype: bf16
        stream: s{(i + j) % 3}
        tags: {phase: "p{j}", mb: "{i}"}
      - name: ar{i}_{j}
        kind: all_reduce
        when: i % 2 == 0 or j == 1
        shape: [i + 1, 16]
        stream: comm
        deps: ["mm{i}_{j}", first]
      - {name: "cp{i}_{j}", kind: memcpy, direction: h2d, bytes: 256, host_us: 1.5, deps: ["mm{i}_{j}"]}
  - foreach: {s: [a, b]}
    ops:
      - {name: "tail_{s}", kind: compute, flops: 1e9, stream: compute, deps: [mm4_1]}
"""


def test_a_mixed_schedule_gives_the_same_spec_program_and_model_behaviour(general):
    spec = load_text(MIXED, "m.yaml")
    assert spec._layout is not None and "ops" not in spec.__dict__
    slow = general(lambda: load_text(MIXED, "m.yaml"))
    prog = lower(spec)
    assert "ops" not in spec.__dict__  # lowering reads the layout, not the op models
    same_program(prog, general(lambda: lower(load_text(MIXED, "m.yaml"))))
    # by hand: per rank 10 mm, 8 ar (i even: 3*2, i odd: j = 1 only, 2), 10 cp, 1 first, 2 tail
    assert prog.N == 3 * (10 + 8 + 10 + 1 + 2)
    # the pydantic model behaves as the general path's: ops built on access, dump, equality, copies, pickle
    fresh = load_text(MIXED, "m.yaml")
    assert fresh == slow and fresh.model_dump() == slow.model_dump() and repr(fresh) == repr(slow)
    for other in (load_text(MIXED, "m.yaml"), load_text(MIXED, "m.yaml")):
        assert copy.deepcopy(other) == slow and pickle.loads(pickle.dumps(other)) == slow
    assert spec.ops == slow.ops and spec.sources() == slow.sources()
    assert [o.model_fields_set for o in spec.ops] == [o.model_fields_set for o in slow.ops]
    ar = next(o for o in spec.ops if o.name == "ar2_0")
    mm = next(o for o in spec.ops if o.name == "mm3_1")
    assert mm.tags == {"phase": "p1", "mb": 3} and list(mm.tags) == ["phase", "mb"]
    assert ar.shape == [3, 16] and ar.deps == ["mm2_0", "first"] and spec.ops[14] is ar
    assert spec.source_of(14) == slow.source_of(14) == "m.yaml:19 (ops[2].ops[1])"


BAD = """\
schema_version: 1
name: bad
world_size: 2
params: {chunks: 6}
ops:
  - foreach: {i: range(chunks)}
    ops:
      - name: mm{i}
        kind: matmul
        m: 64 * (i + 1)
        n: 64
        k: 64
        dtype: bf16
      - name: ar{i}
        kind: all_reduce
        bytes: 1024
        deps: ["mm{i}"]
"""


@pytest.mark.parametrize("old, new, what", [
    ("m: 64 * (i + 1)", "m: 64 * (i - 2)", "greater than 0"),  # a negative size from an expression
    ("bytes: 1024", "bytes: 1024 * (3 - i)", "greater than or equal to 0"),
    ("m: 64 * (i + 1)", "m: 4096 // (i - 3)", "division by zero"),
    ("m: 64 * (i + 1)", "m: 64 / (i + 1)", "fraction"),  # 64/3 is not an integer
    ("name: mm{i}", "name: mm{i // 2}", "used twice"),
    ("name: ar{i}", "name: \"{i}ar\"", "should match pattern"),
    ("name: ar{i}", "name: \"ar {i}\"", "should match pattern"),  # a space inside
    ("name: ar{i}", "name: \"ar{i}\u00e9\"", "should match pattern"),  # not ASCII
    ("name: ar{i}", "name: \"{['ar', '.a', 'b'][i % 3]}{i}\"", "should match pattern"),  # a bad first character
    ("name: ar{i}", "name: \"{i}\"", "valid string"),
    ("deps: [\"mm{i}\"]", "deps: [\"mm{i + 1}\"]", "mm6"),  # the last iteration depends on an op that does not exist
    ("deps: [\"mm{i}\"]", "deps: [\"{i}\"]", "valid string"),
    ("kind: all_reduce", "kind: all_reduc", "all_reduce"),
    ("n: 64", "n: 64\n        nn: 1", "unknown key 'nn'"),
    ("dtype: bf16", "dtype: \"{['bf16', 'fp4'][i % 2]}\"", "fp4"),
])
def test_bad_input_in_a_block_raises_the_general_paths_error(general, old, new, what):
    text = BAD.replace(old, new)
    assert text != BAD
    err = _both_paths_error(general, text)
    assert what in str(err) and err.fix


def _both_paths_error(general, text: str) -> SchedsimError:  # type: ignore[no-untyped-def]
    """The error lowering ``text`` raises on the block path, checked equal to the general path's."""
    with pytest.raises(SchedsimError) as fast:
        lower(load_text(text, "bad.yaml"))
    with pytest.raises(SchedsimError) as slow:
        general(lambda: lower(load_text(text, "bad.yaml")))
    assert type(fast.value) is type(slow.value) and str(fast.value) == str(slow.value)
    return fast.value


def test_names_checked_in_bulk_as_the_pattern_checks_them():
    """The block path checks a million names as bytes at once (``_names_ok``): it accepts exactly what
    ``NAME_PATTERN``, one name per line, accepts."""
    import re

    from schedsim.spec.block import _names_ok
    from schedsim.spec.model import NAME_PATTERN

    name_re = re.compile(f"(?:{NAME_PATTERN.removeprefix('^').removesuffix('$')}\n)*")  # one name per line

    cases = ["", "a\n", "a\nb_1.c-[2]\n", "_x\n", "a\n\n", "a\n1b\n", "a\n.b\n", "a\n-b\n", "a\n[b\n", "9\n",
             "a b\n", "a\tb\n", "a\nb", "\u00e9\n", "a\u00e9\n", "a\n\u00e9\n", "a$\n", "a\nb\n\n"]
    got = [_names_ok(t, t.count("\n") + (not t.endswith("\n") and t != "")) for t in cases]  # nk: names in t
    assert got == [name_re.fullmatch(t) is not None for t in cases]
    assert got == [all(re.fullmatch(NAME_PATTERN, nm) for nm in t.split("\n")[:-1]) and t.endswith("\n") or t == ""
                   for t in cases]
    assert got[:4] == [True] * 4 and got[4:7] == [False] * 3


NESTED = """\
schema_version: 1
name: nested
world_size: 2
ops:
  - foreach: {i: range(6)}
    ops:
      - {name: "head{i}", kind: compute, duration_us: 1}
      - foreach: {c: range(i)}
        ops:
          - {name: "cp{i}_{c}", kind: memcpy, direction: h2d, bytes: "1024 * (c + 1)", deps: ["head{i}"]}
          - {name: "k{i}_{c}", kind: compute, flops: 1e6, deps: ["cp{i}_{c}"]}
"""


def test_inner_blocks_and_the_limits_the_estimate_cannot_see_are_the_general_paths(general, monkeypatch):
    """An inner loop whose range depends on the outer variable is one block per outer iteration; the limit on
    entries (which the estimate before expanding cannot see here) is raised at the same op."""
    spec = load_text(NESTED, "n.yaml")
    assert spec._layout is not None
    same_program(lower(spec), general(lambda: lower(load_text(NESTED, "n.yaml"))))
    assert len(spec.ops) == 6 + 2 * 15 and spec.ops[-2].bytes == 5 * 1024  # by hand: sum(range(6)) copies
    # the counts made while expanding back up the estimate (limits.check_expansion), which is turned off here
    monkeypatch.setattr("schedsim.spec.limits.check_expansion", lambda *a: None)
    for var, value, what in (("SCHEDSIM_MAX_OPS", "25", "more than 25 entries"),
                             ("SCHEDSIM_MAX_OPS", "12", "more than 12 "),
                             ("SCHEDSIM_MAX_CHARS", "150", "pass 150 characters")):
        monkeypatch.setenv(var, value)
        with pytest.raises(SchedsimError) as fast:
            load_text(NESTED, "n.yaml")
        with pytest.raises(SchedsimError) as slow:
            general(lambda: load_text(NESTED, "n.yaml"))
        assert str(fast.value) == str(slow.value) and what in str(fast.value)
        monkeypatch.delenv(var)


_EXPRS = st.sampled_from(["64", "64 * (i + 1)", "128 // (i + 1)", "64 * (i % 3 + 1)", "i * 32 + 32",
                          "2 ** (i + 4)", "64 if i < 2 else 32", "max(i, 1) * 16", "{32 * (j + 1)}",
                          "64 * (i - 1)", "64 / (j + 1)", "16 * (i > 1) + 16", "64 * (-1) ** i"])
_NAMES = st.sampled_from(["e{e}_{i}_{j}", "e{e}_{j}_{i}", "e{e}op{i * 10 + j}", "e{e}x{i + j}", "{i}"])


@st.composite
def _blocks(draw):  # type: ignore[no-untyped-def]
    """A schedule with one op before a two-variable foreach block of 1-3 entries; most are valid, some break
    a rule (a size <= 0, a name used twice or not a string, a dependency on a missing op)."""
    ni, nj = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    lines = ["schema_version: 1", "name: gen", f"world_size: {draw(st.integers(1, 3))}", "ops:",
             "  - {name: pre, kind: compute, duration_us: 1}",
             f"  - foreach: {{i: range({ni}), j: {list(range(nj))}}}", "    ops:"]
    for e in range(draw(st.integers(1, 3))):
        name = "mm{i}_{j}" if e == 0 else draw(_NAMES).replace("{e}", str(e))
        kind = draw(st.sampled_from(["matmul", "compute", "all_reduce", "memcpy"]))
        lines.append(f"      - name: \"{name}\"")
        lines.append(f"        kind: {kind}")
        size = draw(_EXPRS)
        if kind == "matmul":
            lines += [f"        m: \"{size}\"", "        n: 64", f"        k: \"{draw(_EXPRS)}\""]
        elif kind == "compute":
            lines.append(f"        flops: \"{size}\"")
        elif kind == "memcpy":
            lines += [f"        bytes: \"{size}\"", "        direction: d2h"]
        else:
            lines.append(f"        shape: [\"{size}\", 4]")
        if draw(st.booleans()):
            lines.append(f"        stream: \"{draw(st.sampled_from(['s{i % 2}', 'main', 's{j}']))}\"")
        if draw(st.booleans()):
            lines.append(f"        when: \"{draw(st.sampled_from(['i % 2 == 0', 'j == 0 or i > 2', 'i > 9']))}\"")
        if e:
            deps = draw(st.lists(st.sampled_from(["pre", "mm{i}_{j}", "mm{i}_{j}", "mm{i - 1}_{j}"]), max_size=2))
            if deps:
                quoted = ", ".join(f'"{d}"' for d in deps)
                lines.append(f"        deps: [{quoted}]")
        if draw(st.booleans()):
            lines.append("        tags: {phase: \"p{j}\"}")
    return "\n".join(lines) + "\n"


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_blocks())
def test_generated_blocks_give_the_general_paths_spec_program_or_error(general, text):
    assert_same_outcome(lambda: load_text(text, "gen.yaml"), general)


@pytest.mark.parametrize("text", ["i", "i * 2 + 1", "64 / (i + 4)", "7 / 2", "i // 2 - i % 3", "2 ** (i + 3)",
                                  "2 ** i", "-i", "+f", "not i", "i > 0 and i < 3", "i == 1 or f > 1",
                                  "0 < i <= 2", "i if i > 0 else 0.5", "max(i, 1) * min(i, 2)", "abs(i) + f",
                                  "round(f * i)", "ceil(i / 3)", "sizeof(d) * i", "1 / i", "i % 0", "2 ** (i * 40)",
                                  "s + 'x'", "s * i", "i in [1, 2]", "[i][0]", "len(s) + i", "nope + i", "M * i",
                                  "M * 2 ** 4000 * 2 ** (i + 3)"])
def test_vector_evaluation_equals_evaluate_per_iteration(text):
    """compile_vector over i = -3..3 gives, element by element, the value and type evaluate gives; where it
    raises, evaluate raises for some iteration or the construct is left to per-iteration evaluation."""
    from schedsim.expr import ExprError, NotVectorisable, compile_vector, evaluate, vector_values

    iters = list(range(-3, 4))
    env = {"f": 1.5, "s": "ab", "d": "bf16", "M": 3}
    want, failed = [], False
    for i in iters:
        try:
            want.append(evaluate(text, {**env, "i": i}))
        except ExprError:
            failed = True
    try:
        got = compile_vector(text)(env, {"i": vector_values(iters)}, len(iters))
    except NotVectorisable:
        assert text in ("s + 'x'", "s * i", "i in [1, 2]", "[i][0]", "len(s) + i")
        return
    except Exception:  # noqa: BLE001 - any error: the block is expanded by the general path
        assert failed, text
        return
    assert not failed, text
    vals = got.a.tolist() if hasattr(got, "a") else [got] * len(iters)
    assert vals == want and [type(v) for v in vals] == [type(v) for v in want]


LOOP_VALUES = """\
schema_version: 1
name: values
world_size: 2
params: {scale: 2}
ops:
  - foreach: {s: [up, down], f: [0.5, 1.5, 2.0], b: [true, false]}
    ops:
      - name: "op_{s}_{f}_{b}"
        kind: compute
        flops: 1e9 * f * scale
        duration_us: "{f if b else 2 * f}"
        stream: "{s}"
        tags: {dir: "{s}", half: "{f < 1}"}
"""


def test_string_float_and_bool_loop_values_give_the_general_paths_program(general):
    spec = load_text(LOOP_VALUES, "v.yaml")
    assert spec._layout is not None
    same_program(lower(spec), general(lambda: lower(load_text(LOOP_VALUES, "v.yaml"))))
    assert spec.ops == general(lambda: load_text(LOOP_VALUES, "v.yaml")).ops
    op = spec.ops[3]  # product order: s, then f, then b: (up, 1.5, False)
    assert (op.name, op.flops, op.duration_us, op.stream, op.tags) == \
        ("op_up_1.5_False", 3e9, 3.0, "up", {"dir": "up", "half": False})


_SIZES = st.sampled_from(["64", "i + 1", "(i + 1) * W", "W // (i + 1)", "{i * 8 + 8}", "i - 1", "1e3 * (i + 1)",
                          "2.5", "i / 2", "True", "i > 1"])


def _kind_lines(draw, kind: str) -> list[str]:  # type: ignore[no-untyped-def]
    size = draw(_SIZES)
    if kind == "matmul":
        return [f"        m: \"{size}\"", "        n: 16", f"        k: \"{draw(_SIZES)}\"",
                f"        repeat: \"{draw(st.sampled_from(['1', 'i + 1']))}\""]
    if kind == "compute":
        host = [f"        host_us: \"{draw(_SIZES)}\""] if draw(st.booleans()) else []
        return [f"        flops: \"{size}\"", *host]
    if kind == "memcpy":
        return [f"        shape: [\"{size}\", 2]", f"        direction: {draw(st.sampled_from(['h2d', 'd2d']))}"]
    if kind in ("send", "recv"):
        return [f"        bytes: \"{size}\"", f"        peer: {1 if kind == 'send' else 0}"]
    out = [f"        bytes: \"{size}\""] + (["        buffer: shard"] if draw(st.booleans()) else [])
    if kind == "broadcast":
        out.append(f"        root: \"{draw(st.sampled_from(['0', 'i % W', '1']))}\"")
    if draw(st.booleans()):
        out.append(f"        group: {draw(st.sampled_from(['[0]', '[0, 1]', '[0, 1, 2, 3]']))}")
    return out


def _entry_lines(draw, blk: int, e: int, suffix: str) -> list[str]:  # type: ignore[no-untyped-def]
    kind = draw(st.sampled_from(["matmul", "compute", "all_reduce", "all_gather", "memcpy", "broadcast", "send",
                                 "recv"]))
    lines = [f"      - name: \"b{blk}e{e}_{{i}}{suffix}\"", f"        kind: {kind}", *_kind_lines(draw, kind)]
    if draw(st.booleans()):
        lines.append(f"        stream: \"{draw(st.sampled_from(['s{i % 2}', 'a', 'comm', 'zz']))}\"")
    if draw(st.booleans()):
        lines.append("        ranks: " + draw(st.sampled_from(["[0, 1]", "[1]", "all", '"{i % W}"', '[0, "{W - 1}"]'])))
    if draw(st.booleans()):
        lines.append('        dtype: "' + draw(st.sampled_from(["bf16", "{'fp16' if i > 1 else 'bf16'}"])) + '"')
    if draw(st.booleans()):
        lines.append(f"        when: \"{draw(st.sampled_from(['i % 2 == 0', 'i != 1', 'W > 1']))}\"")
    deps = draw(st.lists(st.sampled_from([f"b{blk}e0_{{i}}{suffix}", "x0", f"b0e0_{{i}}{suffix}", "b0e1_{i - 1}"]),
                         max_size=2))
    if deps and e:
        quoted = ", ".join(f'"{d}"' for d in deps)
        lines.append(f"        deps: [{quoted}]")
    if draw(st.booleans()):
        lines.append("        tags: {mb: \"{i}\", phase: fwd, n: \"i * 2\"}")
    return lines


@st.composite
def _schedules(draw):  # type: ignore[no-untyped-def]
    """Up to three blocks, with ops between them, over every op kind: collectives with `buffer`, `root` and
    `group`, sends and recvs, `ranks` (constant or from the loop variable), declared streams, dtypes from
    expressions, `repeat`, `host_us`, tags with numeric keys, dependencies across blocks. Most break a rule
    somewhere (a send to itself, a root outside the group, an undeclared stream, a size <= 0, a missing
    dependency); the rest are valid."""
    lines = ["schema_version: 1", "name: g", "world_size: \"{W}\"",
             f"params: {{W: {draw(st.integers(1, 4))}, n: {draw(st.integers(0, 5))}}}"]
    if draw(st.booleans()):
        lines.append("streams: [compute, comm, copy, a, b, s0, s1]")
    lines.append("ops:")
    for blk in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            ranks = draw(st.sampled_from(["[0]", "all", "[0, 1]"]))
            lines.append(f"  - {{name: x{blk}, kind: compute, duration_us: 1, ranks: {ranks}}}")
        loops = draw(st.sampled_from(["{i: range(n)}", "{i: range(n), k: [0, 1]}", "{i: [3, 1, 2]}",
                                      "{i: range(n), s: [a, b]}"]))
        suffix = "_{k}" if "k:" in loops else "_{s}" if "s:" in loops else ""
        lines += [f"  - foreach: {loops}", "    ops:"]
        for e in range(draw(st.integers(1, 3))):
            lines += _entry_lines(draw, blk, e, suffix)
    return "\n".join(lines) + "\n"


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_schedules())
def test_generated_schedules_of_every_op_kind_give_the_general_paths_outcome(general, text):
    assert_same_outcome(lambda: load_text(text, "gen.yaml"), general)


PER_RANK = """\
schema_version: 1
name: per_rank
world_size: 4
nccl_init: eager  # ranks 0 and 1 batch on the world communicator alone: lazily created it would hang
params: {n: 6}
ops:
  - foreach: {i: range(n)}
    ops:
      - {name: "f{i}", kind: compute, duration_us: 2}
      - {name: "s{i}", kind: send, bytes: 1024, peer: 1, ranks: [0], deps: ["f{i}"], p2p_batch: "b{i}"}
      - {name: "r{i}", kind: recv, bytes: 1024, peer: 0, ranks: 1, p2p_batch: "b{i}"}
      - {name: "ar{i}", kind: all_reduce, bytes: 4096, ranks: [2, 3], deps: ["f{i}"]}
      - {name: "g{i}", kind: all_gather, bytes: 4096, ranks: [0, 1], group: [0, 1]}
      - {name: "w{i}", kind: compute, flops: 1e9, ranks: "{i % 4}", when: i % 2 == 1}
      - {name: "x{i}", kind: compute, flops: 1e9, ranks: ["{i % 2}", 3]}
"""


def test_entries_with_ranks_give_the_general_paths_program(general):
    """A block whose entries run on some ranks (constant `ranks`, from the loop variable, sends and recvs,
    collectives over a subset) gives the general path's Program; a collective written for single ranks
    without `group` is left to the general path, which forms its collective or refuses it."""
    spec = load_text(PER_RANK, "p.yaml")
    assert spec._layout is not None
    prog = lower(spec)
    same_program(prog, general(lambda: lower(load_text(PER_RANK, "p.yaml"))))
    assert spec.ops == general(lambda: load_text(PER_RANK, "p.yaml")).ops
    # by hand, per iteration: f on 4 ranks, s, r, ar on 2, g on 2, w (odd i) on 1, x on 2
    assert prog.N == 6 * (4 + 1 + 1 + 2 + 2 + 2) + 3
    # by hand: rank 0 runs 6 f, 6 s, 6 g and x for even i (21 ops), rank 1 6 f, 6 r, 6 g, w1, w5 and x for odd i
    # (23), rank 2 6 f and 6 ar (12): ar0 follows f0 on rank 2 (index 45) and on rank 3 (index 57)
    assert prog.p2p.shape == (6, 2) and prog.collectives()["ar0#2,3"] == [45, 57]
    assert "w3@r3" in prog.ids() and "w1@r1" in prog.ids() and "x5@r1" in prog.ids()
    lone = PER_RANK.replace('ranks: [2, 3], deps: ["f{i}"]', 'ranks: "{2 + i % 2}"')
    with pytest.raises(SchedsimError) as fast:
        lower(load_text(lone, "p.yaml"))
    with pytest.raises(SchedsimError) as slow:
        general(lambda: lower(load_text(lone, "p.yaml")))
    assert str(fast.value) == str(slow.value) and "alone" in str(fast.value)


RING = """\
schema_version: 1
name: ring
world_size: "{W}"
params: {W: 3, n: 4}
ops:
  - foreach: {i: range(n)}
    ops:
      - {name: "s{i}", kind: send, peer: (rank + 1) % W, bytes: 1024, stream: p2p, p2p_batch: "b{i}"}
      - {name: "r{i}", kind: recv, peer: (rank - 1) % W, bytes: 1024, stream: p2p, p2p_batch: "b{i}"}
"""


@pytest.mark.parametrize("old, new", [
    ('name: "s{i}"', 'name: "s{i // 2}"'),  # s0 twice on every rank
    ('name: "r{i}"', 'name: "s{i}"'),  # a recv named as the send of its iteration, on the same rank
    ('name: "r{i}"', 'name: "r{i % 3}"'),  # r0 twice on every rank, the last iteration's
])
def test_a_name_used_twice_on_a_rank_by_entries_per_rank_is_the_general_paths_error(general, old, new):
    """Rows instanced per rank are checked for a (name, rank) used twice by a sort of keys made of the names'
    hashes, in bulk; the error raised is the general path's, whichever two rows share a name on a rank."""
    text = RING.replace(old, new)
    assert text != RING
    assert "twice" in str(_both_paths_error(general, text))
    spec = load_text(RING.replace("p2p_batch", "tag"), "ring.yaml")  # the names as written: distinct per rank
    assert spec._layout is not None and spec._layout.items[0].rows == 4 * 2 * 3


def test_pairs_repeat_by_name_and_rank_not_by_hash():
    """``_pair_repeats``: names numbered exactly (a dict), so names whose hashes collide (here a ``str`` whose
    hash is 7) are told apart; an equal (name, rank) pair always repeats."""
    from schedsim.spec.loader import _pair_repeats

    class Same(str):
        def __hash__(self) -> int:
            return 7

    assert not _pair_repeats([Same("a"), Same("b")], [np.array([0, 0])])
    assert _pair_repeats([Same("a"), Same("a")], [np.array([0, 0])])
    assert not _pair_repeats(["a", "b", "a"], [np.array([0, 0, 1])])
    assert _pair_repeats(["a", "b", "a"], [np.array([1, 0, 1])])
    assert not _pair_repeats([], [])


def test_a_ring_written_with_rank_is_one_block_of_few_templates(general):
    """Entries instanced per rank (`peer: (rank + 1) % W`) stay in the block, a representative per rank and
    entry, the batch of every iteration carried by its row: the general path's Program with 2W templates."""
    spec = load_text(RING, "ring.yaml")
    assert spec._layout is not None
    blk = spec._layout.items[0]
    assert blk.rows == 4 * 2 * 3 and len(blk.reps) == 2 * 3  # per iteration and entry, ranks 0, 1, 2
    assert blk.names.tolist()[:7] == ["s0", "s0", "s0", "r0", "r0", "r0", "s1"]
    assert blk.batch.tolist()[:7] == ["b0"] * 6 + ["b1"]
    prog = lower(spec)
    assert len(prog.templates) == 6 and prog.N == 24
    assert [t.peer for t in prog.templates] == [1, 2, 0, 2, 0, 1]  # (rank + 1) % 3, then (rank - 1) % 3
    assert prog.ids()[:4] == ["s0@r0", "r0@r0", "s1@r0", "r1@r0"]
    same_program(prog, general(lambda: lower(load_text(RING, "ring.yaml"))))
    assert spec.ops == general(lambda: load_text(RING, "ring.yaml")).ops


@st.composite
def _rank_blocks(draw):  # type: ignore[no-untyped-def]
    """A foreach block whose entries use `rank`: pairs of sends and recvs around a ring (peers and sizes from
    `rank`, batches and message tags per iteration or not), computes with `rank` in their size, name, tags,
    `when` or `ranks`; some break a rule (a send to itself, a name used twice on a rank, a rank listed twice)."""
    W = draw(st.integers(2, 4))
    lines = ["schema_version: 1", "name: g", "world_size: \"{W}\"", f"params: {{W: {W}, n: {draw(st.integers(1, 3))}}}",
             "ops:", "  - {name: pre, kind: compute, duration_us: 1}", "  - foreach: {i: range(n)}", "    ops:"]
    for e in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            k = draw(st.integers(1, W - 1))
            size = draw(st.sampled_from(["1024 * (src + 1)", "512 * (i + 1)", "256"]))
            batch = draw(st.sampled_from(["b{i}", "b{i}", "b", "b{i}", "", "{i}x"]))
            tag = draw(st.sampled_from(["", "m{i}"]))
            bad = draw(st.sampled_from([""] * 14 + ["self", "dup"]))
            back = f"(rank - {k}) % W"
            for kind, peer, src in (("send", f"(rank + {k}) % W", "rank"), ("recv", back, back)):
                f = [f"name: \"{'x' if bad == 'dup' else kind[0]}{e}_{{i}}\"", f"kind: {kind}",
                     f"peer: \"{'rank' if bad == 'self' else peer}\"", f"bytes: \"{size.replace('src', src)}\""]
                f += [f"p2p_batch: \"{batch}\""] if batch else []
                f += [f"tag: \"{tag}\""] if tag else []
                lines.append("      - {" + ", ".join(f) + "}")
            continue
        name = draw(st.sampled_from(["c%d_{i}", "c%d_{i}_{rank}"] * 3 + ["c%d"])) % e
        f = [f"name: \"{name}\"", "kind: compute",
             f"duration_us: \"{draw(st.sampled_from(['rank + 1', 'i + 1', '2']))}\""]
        if draw(st.booleans()):
            f.append("tags: {r: \"{rank}\"}")
        if draw(st.booleans()):
            f.append(f"ranks: {draw(st.sampled_from(['[0]', '[1, 0]', 'all', '[0, 0]', '{W - 1}']))}")
        if draw(st.booleans()):
            f.append(f"when: \"{draw(st.sampled_from(['rank % 2 == 0', 'i > 0', 'rank != i']))}\"")
        if draw(st.booleans()):
            f.append("deps: [pre]")
        lines.append("      - {" + ", ".join(f) + "}")
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(_rank_blocks())
def test_generated_blocks_with_rank_give_the_general_paths_outcome(general, text):
    assert_same_outcome(lambda: load_text(text, "gen.yaml"), general)
