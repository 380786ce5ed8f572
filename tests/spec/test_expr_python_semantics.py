"""Schedule expressions behave as Python does (issue #33): ``and`` / ``or`` return an operand, ``not``, chained
comparisons and conditional expressions give Python's values, on every path that evaluates an expression
(:func:`schedsim.expr.evaluate`, the compiled scalar form of a ``foreach`` body and the vectorised form over
its whole iteration space)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedsim.expr import ExprError, NotVectorisable, compile_expr, compile_vector, evaluate, vector_values
from schedsim.spec import foreach
from schedsim.spec.loader import load_text


@pytest.mark.parametrize("text,env,want", [
    ("tile or 8192", {"tile": 0}, 8192),
    ("tile or 8192", {"tile": 512}, 512),
    ("i or 100", {"i": 0}, 100),
    ("i or 100", {"i": 3}, 3),
    ("i and 100", {"i": 0}, 0),
    ("i and 100", {"i": 2}, 100),
    ("s or 'default'", {"s": ""}, "default"),
    ("0 or 0.0 or ''", {}, ""),
    ("1 and 2 and 3", {}, 3),
    ("not i", {"i": 0}, True),
    ("0 < i < 4 == 3", {"i": 3}, False),   # 4 == 3 is false: the chain is false
    ("x if i else y", {"i": 0, "x": 1, "y": 2}, 2),
])
def test_boolean_operators_return_the_deciding_operand(text: str, env: dict[str, Any], want: Any) -> None:
    got = evaluate(text, env)
    assert got == want and type(got) is type(want)
    assert compile_expr(text)(env) == want


def test_and_or_short_circuit_as_python() -> None:
    """The operand after the deciding one is not evaluated: no division by zero here, as in Python."""
    assert evaluate("i == 0 or 10 // i", {"i": 0}) is True
    assert evaluate("i and 10 // i", {"i": 0}) == 0
    assert evaluate("i != 0 and 10 // i", {"i": 5}) == 2
    assert evaluate("0 < i < 10 // i", {"i": 0}) is False  # chained comparisons stop at the first false one
    with pytest.raises(ExprError, match="division by zero"):
        evaluate("i or 10 // i", {"i": 0})


TILE = """\
schema_version: 1
name: tile
world_size: 1
params: {tile: 0}
ops:
  - name: mm
    kind: matmul
    m: "tile or 8192"
    n: 256
    k: 256
    dtype: bf16
  - foreach: {i: range(3)}
    ops:
      - name: c{i}
        kind: matmul
        m: "i or 100"
        n: 64
        k: "{i and 32 or 16}"
        dtype: bf16
"""


@pytest.mark.parametrize("blocks", [True, False], ids=["vectorised", "general"])
def test_schedule_fields_take_pythons_value(blocks: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's inputs, through the loader: on the columnar foreach path and on the general path."""
    monkeypatch.setattr(foreach, "TEMPLATES", blocks)
    spec = load_text(TILE, "tile.yaml")
    ms = {op.name: (op.m, op.k) for op in spec.ops}
    assert ms == {"mm": (8192, 256), "c0": (100, 16), "c1": (1, 32), "c2": (2, 32)}


# ---------------------------------------------------------------------------------------------------------------
# Property: random small expressions over the supported grammar give what Python's eval gives
# ---------------------------------------------------------------------------------------------------------------

_ENV: dict[str, Any] = {"a": 0, "b": 3, "c": -2, "f": 1.5, "z": 0.0, "s": "ab", "e": "", "t": True, "u": False}
_ATOMS = st.sampled_from(["0", "1", "2", "-1", "0.0", "2.5", "True", "False", "''", "'ab'", "'x'",
                          *_ENV, "x"])  # x: the loop variable below
_BIN = ["+", "-", "*", "//", "%"]
_CMP = ["<", "<=", "==", "!=", ">", ">=", "in", "not in"]


def _expr(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, st.sampled_from(["and", "or"]), children).map(lambda p: f"({p[0]} {p[1]} {p[2]})"),
        st.lists(children, min_size=3, max_size=4).map(lambda xs: "(" + " or ".join(xs) + ")"),
        st.lists(children, min_size=3, max_size=4).map(lambda xs: "(" + " and ".join(xs) + ")"),
        children.map(lambda x: f"(not {x})"),
        st.tuples(children, st.lists(st.tuples(st.sampled_from(_CMP), children), min_size=1, max_size=3)).map(
            lambda p: "(" + p[0] + "".join(f" {op} {x}" for op, x in p[1]) + ")"),
        st.tuples(children, children, children).map(lambda p: f"({p[0]} if {p[1]} else {p[2]})"),
        st.tuples(children, st.sampled_from(_BIN), children).map(lambda p: f"({p[0]} {p[1]} {p[2]})"),
        children.map(lambda x: f"(-{x})"),
    )


EXPRS = st.recursive(_ATOMS, _expr, max_leaves=8)
LOOP = [-2, 0, 1, 3]


def _python(text: str, env: dict[str, Any]) -> tuple[bool, Any]:
    try:
        return True, eval(text, {"__builtins__": {}}, dict(env))  # noqa: S307 - the oracle, on generated text
    except Exception:  # noqa: BLE001 - any error Python raises: evaluate must raise ExprError
        return False, None


def _same(x: Any, y: Any) -> bool:
    if type(x) is not type(y):
        return False
    return x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(EXPRS)
def test_evaluate_equals_python_eval(text: str) -> None:
    """Scalar path (evaluate, compile_expr) for each loop value: Python's value and type, or ExprError where
    Python raises."""
    f = compile_expr(text)
    for x in LOOP:
        env = {**_ENV, "x": x}
        ok, want = _python(text, env)
        for run in (evaluate, lambda _text, env_: f(env_)):
            if ok:
                assert _same(run(text, env), want), (text, x, want)
            else:
                with pytest.raises(ExprError):
                    run(text, env)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(EXPRS)
def test_vectorised_evaluation_equals_python_eval(text: str) -> None:
    """Vectorised path over x in LOOP: each element is Python's value and type. Where it declines (a
    construct it leaves to per-iteration evaluation) or raises, the loader evaluates per iteration, which
    the scalar property covers; it may raise only where Python raises for some iteration or some operand
    Python skips would raise."""
    wants = [_python(text, {**_ENV, "x": x}) for x in LOOP]
    try:
        got = compile_vector(text)({k: v for k, v in _ENV.items()}, {"x": vector_values(LOOP)}, len(LOOP))
    except (NotVectorisable, ExprError, ArithmeticError, TypeError, ValueError):
        return
    vals = got.a.tolist() if hasattr(got, "a") else [got] * len(LOOP)
    for x, (ok, want), v in zip(LOOP, wants, vals, strict=True):
        assert ok and _same(v, want), (text, x, want, v)
