"""Safe arithmetic expressions for schedule fields.

Schedule fields may hold expressions such as ``M*world_size/chunks`` or
``range(chunks)``. They are parsed with :mod:`ast` and evaluated by walking a
whitelist of node types; :func:`eval` and :func:`exec` are never used, so a
schedule cannot run code, touch attributes or import modules.

Allowed: int/float/str/bool literals, names bound in the environment,
``+ - * / // % **``, unary ``+ -``, comparisons (also ``in``), ``and or not``, ``x if c else y``,
lists/tuples, subscripts, and the functions in :data:`FUNCTIONS` (``sizeof(dtype)`` gives bytes per element).

``and`` / ``or``, ``not``, chained comparisons and ``x if c else y`` follow Python (Language Reference 6.10-6.13):
``and`` / ``or`` stop at the deciding operand and return it, so ``tile or 8192`` is 8192 when ``tile`` is 0.

A ``/`` whose result is integral yields an ``int``, so ``8192*2/8`` is ``2048``.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from collections.abc import Callable, Mapping
from itertools import repeat
from typing import Any

__all__ = ["ExprError", "evaluate", "interpolate", "FUNCTIONS"]


class ExprError(ValueError):
    """An expression is malformed, uses a forbidden construct or an unknown name."""


def _div(a: Any, b: Any) -> Any:
    r = a / b
    if isinstance(r, float) and r.is_integer() and isinstance(a, int) and isinstance(b, int):
        return int(r)
    return r


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _div,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


#: Most list elements plus string characters one evaluation may build (ranges, list literals, repeats,
#: concatenations together); at least the op limit, so a ``foreach`` range the op limit allows is buildable.
MAX_ELEMENTS = 2_000_000
_budget = [MAX_ELEMENTS]


def _charge(n: int, what: str) -> None:
    _budget[0] -= n
    if _budget[0] < 0:
        from schedsim.io import work_limit as limit

        raise ExprError(f"{what} would make the expression build more than {_limit_elements(limit):,} list elements "
                        "and characters in all; write a smaller range or list (raise with --max-ops)")


#: A printf field of ``str % args``: its width and precision (``%-2000000000d``, ``%.9999999f``, ``%*d``).
_PRINTF_FIELD = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?[hlL]?[diouxXeEfFgGcrsa%]")


def _charge_binop(op: ast.operator, left: Any, right: Any) -> None:
    """Charge the strings and lists ``left op right`` builds to the budget before it is built: a repeat
    (``'a' * n``, at most 1,000,000 elements), a concatenation, a ``str % args`` format (:func:`_charge_format`).

    Raises
    ------
    ExprError
        Past the budget.
    """
    if isinstance(op, ast.Mult) and (isinstance(left, (str, list)) or isinstance(right, (str, list))):
        seq, times = (left, right) if isinstance(left, (str, list)) else (right, left)
        if isinstance(times, int) and len(seq) * max(times, 0) > 1_000_000:
            raise ExprError("a repeated string or list longer than 1,000,000 elements")
        if isinstance(times, int):
            _charge(len(seq) * max(times, 0), "a repeated string or list")
    if isinstance(op, ast.Add) and isinstance(left, (str, list)) and isinstance(right, (str, list)):
        _charge(len(left) + len(right), "a concatenation")
    if isinstance(op, ast.Mod) and isinstance(left, str):
        _charge_format(left, right)


def _charge_format(fmt: str, args: Any) -> None:
    """Charge ``fmt % args`` to the budget before it is built: the format's own characters, each field's
    width and precision, and each argument's text (a width from the arguments, ``*``, is refused)."""
    total = len(fmt)
    for m in _PRINTF_FIELD.finditer(fmt):
        width, prec = m.group(1), m.group(2)
        if width == "*" or prec == "*":
            raise ExprError("a printf width or precision from the arguments (%*d) is not allowed")
        for digits in (width, prec):
            if digits:
                if len(digits) > 7:
                    raise ExprError(f"a printf field of {len(digits)}-digit width or precision is too wide")
                total += int(digits)
    for a in args if isinstance(args, (list, tuple)) else (args,):
        total += len(a) if isinstance(a, (str, list)) else 0
    _charge(total, f"the formatted string {_short(fmt, 40)}")


def _limit_elements(limit: Any) -> int:
    return max(MAX_ELEMENTS, limit("SCHEDSIM_MAX_OPS"))


def _range(*args: int) -> list[int]:
    if len(args) > 3 or not all(isinstance(a, int) for a in args):
        raise ExprError("range() takes 1 to 3 integers")
    r = range(*args)
    _charge(len(r), f"range() of {len(r):,} elements")
    return list(r)


def _sizeof(dtype: str) -> int:
    from schedsim.units import DTYPE_BYTES

    if dtype not in DTYPE_BYTES:
        raise ExprError(f"sizeof: unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


FUNCTIONS: dict[str, Any] = {
    "sizeof": _sizeof,
    "range": _range,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "round": round,
    "len": len,
    "ceil": math.ceil,
    "floor": math.floor,
    "log2": math.log2,
    "sqrt": math.sqrt,
}


def _ev(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _ev(node.body, env)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float, str, bool)) or node.value is None:
            return node.value
        raise ExprError(f"constant {node.value!r} is not allowed")
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in ("true", "True"):
            return True
        if node.id in ("false", "False"):
            return False
        raise ExprError(f"unknown name {node.id!r}")
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _ev(node.left, env), _ev(node.right, env)
        if isinstance(node.op, ast.Pow) and isinstance(right, (int, float)) and isinstance(left, (int, float)):
            if abs(right) > 64 or (isinstance(left, int) and left.bit_length() * abs(right) > 4096):
                raise ExprError("power too large (exponent > 64 or a result over 4096 bits)")
        _charge_binop(node.op, left, right)
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError("division by zero") from None
        except TypeError as e:
            raise ExprError(str(e)) from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
        return _UNOPS[type(node.op)](_ev(node.operand, env))
    if isinstance(node, ast.BoolOp):
        return _ev_boolop(node, env)
    if isinstance(node, ast.Compare):
        left = _ev(node.left, env)
        for op, comp in zip(node.ops, node.comparators, strict=False):
            if type(op) not in _CMPOPS:
                raise ExprError("only == != < <= > >= in / not in comparisons are allowed")
            right = _ev(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _ev(node.body, env) if _ev(node.test, env) else _ev(node.orelse, env)
    if isinstance(node, (ast.List, ast.Tuple)):
        _charge(len(node.elts), "a list")
        return [_ev(e, env) for e in node.elts]
    if isinstance(node, ast.Subscript):
        return _ev(node.value, env)[_ev(node.slice, env)]
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise ExprError(f"only the functions {', '.join(sorted(FUNCTIONS))} may be called")
        return FUNCTIONS[node.func.id](*[_ev(a, env) for a in node.args])
    raise ExprError(f"{type(node).__name__} is not allowed in an expression")


def _ev_boolop(node: ast.BoolOp, env: Mapping[str, Any]) -> Any:
    """Python's rule (Language Reference 6.11, "Boolean operations"): evaluate left to right, stop at the first
    operand that decides the result (falsy for ``and``, truthy for ``or``) and return that operand itself, not a
    bool: ``tile or 8192`` is 8192 when ``tile`` is 0, else ``tile``."""
    is_and = isinstance(node.op, ast.And)
    for v in node.values[:-1]:
        val = _ev(v, env)
        if bool(val) != is_and:
            return val
    return _ev(node.values[-1], env)


def evaluate(text: str, env: Mapping[str, Any]) -> Any:
    """Evaluate an arithmetic expression safely.

    Parameters
    ----------
    text : str
        The expression, e.g. ``"M*world_size/chunks"``.
    env : mapping
        Names visible to the expression (schedule parameters, loop variables).

    Returns
    -------
    int, float, str, bool or list

    Raises
    ------
    ExprError
        On syntax errors, unknown names, forbidden constructs, division by zero.

    Examples
    --------
    >>> evaluate("M*world_size/chunks", {"M": 8192, "world_size": 2, "chunks": 8})
    2048
    >>> evaluate("range(3)", {})
    [0, 1, 2]
    """
    return _run(_parse(text.strip()), text, env, _element_budget())


def _element_budget() -> int:
    from schedsim.io import work_limit as limit

    try:
        return _limit_elements(limit)
    except Exception:  # a bad SCHEDSIM_MAX_OPS is reported by the loader's own check
        return MAX_ELEMENTS


def _run(tree: ast.Expression, text: str, env: Mapping[str, Any], budget: int) -> Any:
    _budget[0] = budget
    try:
        value = _ev(tree, env)
    except ExprError:
        raise
    except (ArithmeticError, ValueError, TypeError, IndexError, KeyError, RecursionError) as e:
        raise ExprError(f"{e.__class__.__name__}: {e}") from None
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4096:
        raise ExprError(f"{text!r}: result has more than 4096 bits")
    return value


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> ast.Expression:
    """Parse once per distinct text: a foreach evaluates the same few expressions for every iteration."""
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse expression {_short(text)}: {e.msg}") from None
    except (ValueError, MemoryError, RecursionError) as e:
        raise ExprError(f"cannot parse expression {_short(text)}: {e}") from None


def compile_expr(text: str) -> Callable[[Mapping[str, Any]], Any]:
    """Parse ``text`` once and return ``f(env)`` that equals ``evaluate(text, env)`` for every ``env``.

    For a ``foreach`` body evaluated once per iteration: the parse and the element budget
    (``SCHEDSIM_MAX_OPS``, read from the environment) are taken once, here.

    Raises
    ------
    ExprError
        Here, if ``text`` does not parse; from ``f``, as :func:`evaluate` would.
    """
    tree = _parse(text.strip())
    budget = _element_budget()
    body = tree.body
    if isinstance(body, ast.Name) and body.id not in ("true", "True", "false", "False"):
        name = body.id  # a loop variable or parameter alone (`{i}`): a lookup, no tree walk

        def lookup(env: Mapping[str, Any]) -> Any:
            v: Any = env.get(name)
            t = type(v)
            if t is str or t is float or (t is int and v.bit_length() <= 4096):
                return v
            return _run(tree, text, env, budget)  # anything else (a missing name too) as evaluate does it

        return lookup
    if not any(isinstance(n, ast.Name) for n in ast.walk(tree)):
        # no names: the same value in every env (`64*2**20`); an expression that fails keeps failing per call
        try:
            value = _run(tree, text, {}, budget)
        except ExprError:
            pass
        else:
            if type(value) in (int, float, str, bool):
                return lambda env: value
    return lambda env: _run(tree, text, env, budget)


def compile_interpolate(text: str) -> Callable[[Mapping[str, Any]], Any]:
    """Return ``f(env)`` equal to ``interpolate(text, env)``, with each ``{expr}`` part parsed once.

    Raises
    ------
    ExprError
        Here, if a part does not parse; from ``f``, as :func:`interpolate` would.
    """
    if "{" not in text:
        return lambda env: text
    m = _BRACES.fullmatch(text.strip())
    if m:
        return compile_expr(m.group(1))
    pieces = _BRACES.split(text)  # literal, expr, literal, expr, ..., literal
    lits = pieces[0::2]
    fns = [compile_expr(e) for e in pieces[1::2]]
    if len(fns) == 1:  # `mm{i}`
        head, f, tail = lits[0], fns[0], lits[1]
        return lambda env: head + str(f(env)) + tail

    def run(env: Mapping[str, Any]) -> str:
        out = [lits[0]]
        for f, lit in zip(fns, lits[1:], strict=True):
            out.append(str(f(env)))
            out.append(lit)
        return "".join(out)

    return run


def _short(text: str, n: int = 120) -> str:
    """``repr`` of an expression, cut to ``n`` characters (a 100 kB expression must not fill the terminal)."""
    return repr(text) if len(text) <= n else repr(text[:n]) + f"... ({len(text):,} characters)"


_BRACES = re.compile(r"\{([^{}]+)\}")


def interpolate(text: str, env: Mapping[str, Any]) -> Any:
    """Substitute ``{expr}`` parts of a string.

    A string that is exactly one ``{expr}`` returns the typed value
    (``"{chunks}"`` gives ``8``); otherwise each part is formatted into the text
    (``"mm{i}"`` gives ``"mm3"``). Strings without braces are returned unchanged.

    Examples
    --------
    >>> interpolate("ag{i}", {"i": 3})
    'ag3'
    >>> interpolate("{n*2}", {"n": 4})
    8
    """
    if "{" not in text:
        return text
    m = _BRACES.fullmatch(text.strip())
    if m:
        return evaluate(m.group(1), env)
    return _BRACES.sub(lambda mm: str(evaluate(mm.group(1), env)), text)


# ---------------------------------------------------------------------------------------------------------------
# Vectorised evaluation over a foreach block's iteration space
# ---------------------------------------------------------------------------------------------------------------


class NotVectorisable(Exception):
    """An expression uses a construct :func:`compile_vector` does not evaluate over arrays (a list, a subscript,
    ``in``, ``range``/``len``, a string operation); the caller evaluates it once per iteration instead."""


class _Vec:
    """Per-iteration values as a 1-d object array of Python objects, and whether all of them are numbers."""

    __slots__ = ("a", "num")

    def __init__(self, a: Any, num: bool) -> None:
        self.a, self.num = a, num


_NUM = (int, float, bool)
_BIG = 2 ** 4095


def vector_values(values: Any) -> _Vec:
    """Loop values (a list of Python scalars) as a :class:`_Vec` for :func:`compile_vector`."""
    import numpy as np

    a = np.empty(len(values), object)
    a[:] = values
    return _Vec(a, all(type(x) in _NUM for x in values))


def _pow_checked(a: Any, b: Any) -> Any:
    if isinstance(b, (int, float)) and isinstance(a, (int, float)):
        if abs(b) > 64 or (isinstance(a, int) and a.bit_length() * abs(b) > 4096):
            raise ExprError("power too large (exponent > 64 or a result over 4096 bits)")
    return a ** b


def _uses(node: ast.AST, loop: Mapping[str, Any]) -> bool:
    """Whether ``node`` names a loop variable. The names under a node are kept on it (parse trees are cached
    and walked at every node of every evaluation: a block per outer iteration of a nested ``foreach``)."""
    names = getattr(node, "_names_below", None)
    if names is None:
        names = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        node._names_below = names  # type: ignore[attr-defined]
    return not names.isdisjoint(loop)


def _as_array(v: Any, n: int) -> Any:
    import numpy as np

    if isinstance(v, _Vec):
        return v.a
    a = np.empty(n, object)
    a.fill(v)
    return a


def _truth(v: Any, n: int) -> Any:
    """Truth value of each element, as a bool array."""
    import numpy as np

    return np.frompyfunc(bool, 1, 1)(_as_array(v, n)).astype(bool)


def _bools(mask: Any) -> _Vec:
    return _Vec(mask.astype(object), True)


def _vec(node: ast.AST, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> Any:
    """Value of ``node`` for every iteration: a :class:`_Vec`, or a plain value where it does not depend on the
    loop variables (evaluated once, by :func:`_ev`)."""
    if not _uses(node, loop):
        return _ev(node, env)
    if isinstance(node, ast.Name):
        return loop[node.id]
    rule = _VEC_RULES.get(type(node))
    if rule is None:
        raise NotVectorisable(f"{type(node).__name__} over loop variables")
    return rule(node, env, loop, n)


def _is_num(x: Any) -> bool:
    return x.num if isinstance(x, _Vec) else type(x) in _NUM


def _vec_binop(node: Any, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> _Vec:
    import numpy as np

    op = type(node.op)
    if op not in _BINOPS:
        raise NotVectorisable(f"{op.__name__}")
    left, right = _vec(node.left, env, loop, n), _vec(node.right, env, loop, n)
    if not (_is_num(left) and _is_num(right)):
        raise NotVectorisable("arithmetic on non-numbers")
    a, b = _as_array(left, n), _as_array(right, n)
    if op is ast.Div:
        return _Vec(np.frompyfunc(_div, 2, 1)(a, b), True)
    if op is ast.Pow:
        return _Vec(np.frompyfunc(_pow_checked, 2, 1)(a, b), True)
    ufunc = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.FloorDiv: np.floor_divide,
             ast.Mod: np.remainder}[op]
    return _Vec(ufunc(a, b), True)


def _vec_unary(node: Any, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> _Vec:
    import numpy as np

    v = _vec(node.operand, env, loop, n)
    if isinstance(node.op, ast.Not):
        return _bools(~_truth(v, n))
    if not _is_num(v) or type(node.op) not in _UNOPS:
        raise NotVectorisable("sign of a non-number")
    return _Vec((np.negative if isinstance(node.op, ast.USub) else np.positive)(_as_array(v, n)), True)


def _vec_compare(node: Any, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> _Vec:
    import numpy as np

    ufuncs = {ast.Eq: np.equal, ast.NotEq: np.not_equal, ast.Lt: np.less, ast.LtE: np.less_equal,
              ast.Gt: np.greater, ast.GtE: np.greater_equal}
    if any(type(op) not in ufuncs for op in node.ops):
        raise NotVectorisable("in / not in")
    left = _as_array(_vec(node.left, env, loop, n), n)
    ok = np.ones(n, bool)
    for op, comp in zip(node.ops, node.comparators, strict=True):
        right = _as_array(_vec(comp, env, loop, n), n)
        ok &= np.asarray(ufuncs[type(op)](left, right), dtype=bool)
        left = right
    return _bools(ok)


def _vec_boolop(node: Any, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> _Vec:
    """``a and b and c`` / ``a or b or c`` per iteration, as :func:`_ev` does it: the operand that decides,
    itself. Every operand is evaluated for every iteration (one :func:`_ev` would skip does not change the
    value chosen; one that raises sends the caller to per-iteration evaluation)."""
    import numpy as np

    vals = [_vec(v, env, loop, n) for v in node.values]
    is_and = isinstance(node.op, ast.And)
    out = _as_array(vals[-1], n)
    for v in reversed(vals[:-1]):  # the first deciding operand wins: fold from the right
        decides = _truth(v, n) != is_and
        out = np.where(decides, _as_array(v, n), out)
    return _Vec(out, all(_is_num(v) for v in vals))


def _vec_ifexp(node: Any, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> _Vec:
    import numpy as np

    test = _truth(_vec(node.test, env, loop, n), n)
    body, orelse = _vec(node.body, env, loop, n), _vec(node.orelse, env, loop, n)
    return _Vec(np.where(test, _as_array(body, n), _as_array(orelse, n)), _is_num(body) and _is_num(orelse))


def _vec_call(node: Any, env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> _Vec:
    import numpy as np

    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords \
            or node.func.id in ("range", "len", "sizeof"):
        raise NotVectorisable("this call over loop variables")
    args = [_vec(a, env, loop, n) for a in node.args]
    if not args or not all(_is_num(x) for x in args):
        raise NotVectorisable("a function of non-numbers")
    out = np.frompyfunc(FUNCTIONS[node.func.id], len(args), 1)(*[_as_array(a, n) for a in args])
    return _Vec(out, all(type(x) in _NUM for x in out.tolist()))


_VEC_RULES: dict[type, Callable[..., _Vec]] = {ast.BinOp: _vec_binop, ast.UnaryOp: _vec_unary,
                                               ast.Compare: _vec_compare, ast.BoolOp: _vec_boolop,
                                               ast.IfExp: _vec_ifexp, ast.Call: _vec_call}


def compile_vector(text: str) -> Callable[[Mapping[str, Any], Mapping[str, _Vec], int], Any]:
    """Parse ``text`` once; return ``f(env, loop, n)``: the expression's value for each of ``n`` iterations.

    ``loop`` maps loop variables to their per-iteration values (:func:`vector_values`); ``env`` holds the
    other names. The result is a plain value when the expression does not use a loop variable, else a
    :class:`_Vec` whose elements are the values :func:`evaluate` gives for each iteration (object arrays
    apply Python's own operators element by element, so ints stay exact and ``/`` keeps its rule).

    Raises
    ------
    ExprError
        Here, if ``text`` does not parse.
    NotVectorisable
        From ``f``, for a construct it does not evaluate over arrays.
    Exception
        From ``f``, where :func:`evaluate` would raise for some iteration (the caller then evaluates per
        iteration, which raises :class:`ExprError` with the usual message).
    """
    import numpy as np

    tree = _parse(text.strip())
    budget = _element_budget()

    def run(env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> Any:
        _budget[0] = budget
        # object arrays apply Python's float rules (inf * 0 is nan, nan < 1 is False, no exception); numpy
        # would still print a RuntimeWarning from the FPU flags those set, which evaluate never prints
        with np.errstate(all="ignore"):
            v = _vec(tree.body, {k: x for k, x in env.items() if k not in loop}, loop, n)
        vals = v.a.tolist() if isinstance(v, _Vec) else [v]
        if isinstance(v, _Vec) and v.num and vals and -_BIG < min(vals) and max(vals) < _BIG:
            return v  # every int within 4096 bits (min/max run in C; the loop below in Python)
        if any(type(x) is int and x.bit_length() > 4096 for x in vals):
            raise ExprError(f"{text!r}: result has more than 4096 bits")
        return v

    return run


def compile_interpolate_vector(text: str) -> Callable[[Mapping[str, Any], Mapping[str, _Vec], int], Any]:
    """:func:`compile_vector` for :func:`interpolate`: ``f(env, loop, n)`` gives a plain value, or a
    :class:`_Vec` of the strings (or typed values, for a lone ``{expr}``) of each iteration."""
    import numpy as np

    if "{" not in text:
        return lambda env, loop, n: text
    m = _BRACES.fullmatch(text.strip())
    if m:
        return compile_vector(m.group(1))
    pieces = _BRACES.split(text)
    lits = pieces[0::2]
    fns = [compile_vector(e) for e in pieces[1::2]]

    def run(env: Mapping[str, Any], loop: Mapping[str, _Vec], n: int) -> Any:
        # each iteration's string made piece by piece, a C-level map per piece: str(x) is format(x, "") for these
        # types, and int's own repr where every value is an int (no bool); literal pieces are added as they are
        made: list[str] | None = None  # the strings so far, one per iteration, once a piece varies
        head = lits[0]  # the constant text before the first piece that varies
        for f, lit in zip(fns, lits[1:], strict=True):
            v = f(env, loop, n)
            if isinstance(v, _Vec):
                vals = v.a.tolist()
                types = set(map(type, vals))
                if not types <= {int, float, str, bool}:
                    raise NotVectorisable("a value that is not a number or string")
                strs = list(map(int.__repr__ if types == {int} else str, vals))
                if made is None:
                    made = list(map(head.__add__, strs)) if head else strs
                else:
                    made = list(map(str.__add__, made, strs))
            elif made is None:
                head += str(v)
            else:
                made = list(map(str.__add__, made, repeat(str(v), n)))
            if lit and made is not None:
                made = list(map(str.__add__, made, repeat(lit, n)))
            elif lit:
                head += lit
        if made is None:
            return head
        out = np.empty(n, object)
        out[:] = made
        return _Vec(out, False)

    return run
