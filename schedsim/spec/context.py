"""Step 3's evaluation context: the parameters and loop variables in scope while ``foreach`` blocks expand
(``_Ctx``), a field's expression compiled once and evaluated per iteration (:mod:`schedsim.expr`, never
``eval``), values of numeric fields and ``{expr}`` parts of strings, and whether an expression reads ``rank``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from schedsim.errors import SpecError
from schedsim.expr import ExprError, _short, compile_expr, compile_interpolate, evaluate, interpolate
from schedsim.spec.model import NUMERIC_FIELDS
from schedsim.spec.yaml_reader import LDict, LList, Mark


class _Ctx:
    def __init__(self, file: str, blocks: bool = True) -> None:
        self.file = file
        self.blocks = blocks  # a plain foreach body may become a Block (see _run_foreach)
        # what the expansion has really produced so far (the estimate of limits.check_expansion cannot see
        # loop ranges that depend on outer loop variables, nor strings built from parameters)
        self.entries = 0
        self.chars = 0
        self.visits = 0
        from schedsim.spec.limits import limit

        self.max_ops = limit("SCHEDSIM_MAX_OPS")
        self.max_chars = limit("SCHEDSIM_MAX_CHARS")
        self.plans: dict[int, _Plan] = {}  # id(op entry as written) -> its compiled form, see _plan
        self.small_blocks: dict[int, int] = {}  # id(foreach body as written) -> small blocks built of it

    def plan(self, item: Mapping[str, Any]) -> _Plan:
        """The compiled form of one op entry as written (made on first use, then reused every iteration)."""
        pl = self.plans.get(id(item))
        if pl is None or pl.item is not item:
            pl = self.plans[id(item)] = _Plan(item)
        return pl

    def count(self, op: Mapping[str, Any], mark: Mark | None, path: str) -> None:
        """Count one produced op entry and its string characters; refuse past ``--max-ops`` / the char limit."""
        self.entries += 1
        self.chars += sum(len(v) for v in op.values() if isinstance(v, str))
        if self.entries > self.max_ops:
            raise self.err(f"the ops expand to more than {self.max_ops:,} entries (a loop range that depends on an "
                           "outer loop variable is not seen by the estimate before expanding)", mark, path,
                           fix="make the loops smaller; if you mean it, raise the limit with --max-ops "
                           "(or the environment variable SCHEDSIM_MAX_OPS)")
        if self.chars > self.max_chars:
            raise self.err(f"the expanded op names and strings pass {self.max_chars:,} characters in all (a long "
                           "parameter string repeated in every op?)", mark, path,
                           fix="use shorter names/streams; if you mean it, raise the environment variable "
                           "SCHEDSIM_MAX_CHARS")

    def visit(self, mark: Mark | None, path: str) -> None:
        """Count one loop iteration (also those a `when:` drops), so that nested loops stay bounded."""
        self.visits += 1
        if self.visits > self.max_ops:
            raise self.err(f"the foreach loops run more than {self.max_ops:,} iterations in all", mark, path,
                           fix="make the loops smaller; if you mean it, raise the limit with --max-ops "
                           "(or the environment variable SCHEDSIM_MAX_OPS)")

    def err(self, msg: str, mark: Mark | None, path: str, fix: str | None = None) -> SpecError:
        return SpecError(
            msg, file=self.file, line=mark[0] if mark else None, column=mark[1] if mark else None, path=path, fix=fix
        )


_Field = Any  # Callable[[env, mark], value] or None (evaluate with _eval_value)


def _compile_scalar(key: str, v: Any) -> Any:
    """``f(env)`` equal to ``_eval_value(key, v, env, ...)`` for a scalar ``v`` (raises ExprError the same way)."""
    if not isinstance(v, str):
        return lambda env: v
    if key in NUMERIC_FIELDS:
        return compile_expr(v.strip().removeprefix("{").removesuffix("}") if v.strip().startswith("{") else v)
    return compile_interpolate(v)


def _compile_field(key: str, v: Any) -> _Field:
    """Compile one field of an op entry: its expressions are parsed once, not once per ``foreach`` iteration.

    Returns ``f(env, mark)`` giving the same value as :func:`_eval_value`, or None where the field is left to
    :func:`_eval_value` (nested lists and mappings, an expression that does not parse: its error is then
    raised by :func:`_eval_value` with the file, line and field as before).
    """
    try:
        if key == "ranks":
            return _compile_ranks(v)
        if isinstance(v, dict):  # tags: {mb: "{i}"}; a nested key is read as a field of that name
            if any(isinstance(x, (list, dict)) for x in v.values()):
                return None
            subs = [(k2, _compile_scalar(k2 if key != "tags" else "tag", x)) for k2, x in v.items()]
            kms = dict(getattr(v, "key_marks", {}))

            def run_dict(env: Mapping[str, Any], mark: Mark | None) -> LDict:
                out = LDict()
                out.mark = getattr(v, "mark", mark)
                for k2, f in subs:
                    out[k2] = f(env)
                    out.key_marks[k2] = kms.get(k2, mark)
                return out

            return run_dict
        if isinstance(v, list):
            if any(isinstance(x, (list, dict)) for x in v):
                return None
            fns = [_compile_scalar(key, x) for x in v]
            item_marks = list(getattr(v, "item_marks", []))
            vmark = getattr(v, "mark", None)

            def run_list(env: Mapping[str, Any], mark: Mark | None) -> LList:
                sub = LList(f(env) for f in fns)
                sub.mark = vmark if vmark is not None or hasattr(v, "mark") else mark
                sub.item_marks = list(item_marks)
                return sub

            return run_list
        f = _compile_scalar(key, v)
        return lambda env, mark: f(env)
    except ExprError:
        return None


def _compile_ranks(v: Any) -> _Field:
    """``f(env, mark)`` equal to ``_eval_value("ranks", v, env, ...)``: None for all ranks, else the list of
    ranks (a lone int or ``{expr}`` giving one becomes a one-rank list)."""
    if v is None or (isinstance(v, str) and v == "all"):
        return lambda env, mark: None
    if isinstance(v, str):
        f = compile_expr(v.strip("{}"))

        def run(env: Mapping[str, Any], mark: Mark | None) -> Any:
            x = f(env)
            if isinstance(x, int):
                return [x]
            if isinstance(x, list):
                return [evaluate(y.strip("{}"), env) if isinstance(y, str) else y for y in x]
            return x

        return run
    if isinstance(v, int):
        return lambda env, mark: [v]
    if isinstance(v, list):
        fns = [compile_expr(y.strip("{}")) if isinstance(y, str) else (lambda env, y=y: y) for y in v]
        return lambda env, mark: [f(env) for f in fns]
    return lambda env, mark: v


class _Plan:
    """One op entry as written, compiled once: its fields' expressions, its `when`, whether it uses `rank`."""

    def __init__(self, item: Mapping[str, Any]) -> None:
        self.item = item  # kept alive so that its id is not reused while the plan is cached
        self.uses_rank = any(_RANK.search(str(v)) if k == "when" else _uses_rank(v, k) for k, v in item.items()
                             if k != "ranks")
        self.fields = [(k, _compile_field(k, v)) for k, v in item.items() if k != "when"]
        self.vec: dict[str, Any] = {}  # field -> its vectorised form (_vector_field), made on a block's first use
        self.when = None
        if "when" in item:
            try:
                self.when = compile_expr(str(item["when"]))
            except ExprError:
                pass  # evaluated (and reported) by the general path

    def for_copy(self, one: Mapping[str, Any]) -> _Plan:
        """The plan of ``one``, a copy of this entry with its own ``ranks`` (the per-rank instances): the same
        compiled fields but ``ranks``, which is evaluated from the copy (appended where the entry had none)."""
        pl = object.__new__(_Plan)
        pl.item, pl.uses_rank, pl.when, pl.vec = one, self.uses_rank, self.when, {}
        pl.fields = [(k, None if k == "ranks" else f) for k, f in self.fields]  # `ranks` is the copy's own
        if "ranks" not in self.item:
            pl.fields.append(("ranks", None))
        return pl


def _suggest(key: str, valid: Sequence[str]) -> str | None:
    import difflib  # here: only a misspelt key needs it

    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return close[0] if close else None


def _eval_value(key: str, value: Any, env: Mapping[str, Any], ctx: _Ctx, mark: Mark | None, path: str) -> Any:
    """Evaluate one field value of an op or of the top level."""
    try:
        if key == "ranks":
            if value == "all" or value is None:
                return None
            if isinstance(value, str):
                value = evaluate(value.strip("{}"), env)
            if isinstance(value, int):
                return [value]
            if isinstance(value, list):
                return [evaluate(v.strip("{}"), env) if isinstance(v, str) else v for v in value]
            return value
        if isinstance(value, str):
            if key in NUMERIC_FIELDS:
                text = value.strip().removeprefix("{").removesuffix("}") if value.strip().startswith("{") else value
                return evaluate(text, env)
            return interpolate(value, env)
        if isinstance(value, list):
            sub = LList(_eval_value(key, v, env, ctx, mark, f"{path}[{i}]") for i, v in enumerate(value))
            sub.mark = getattr(value, "mark", mark)
            sub.item_marks = list(getattr(value, "item_marks", []))
            return sub
        if isinstance(value, dict):
            out = LDict()
            out.mark = getattr(value, "mark", mark)
            for k2, v2 in value.items():
                km = getattr(value, "key_marks", {}).get(k2, mark)
                out[k2] = _eval_value(k2 if key != "tags" else "tag", v2, env, ctx, km, f"{path}.{k2}")
                out.key_marks[k2] = km
            return out
        return value
    except ExprError as e:
        shown = _short(value) if isinstance(value, str) else _short(repr(value))
        names = ", ".join(sorted(k for k in env if not k.startswith("_"))) or "none defined"
        raise ctx.err(f"bad expression {shown}: {e}", mark, path,
                      fix=f"use parameters ({names}) with + - * / // % ** and range/min/max") from None


_RANK = re.compile(r"\brank\b")


def _uses_rank(v: Any, key: str = "") -> bool:
    """Whether a field value refers to the `rank` variable in an expression.

    A numeric field (``NUMERIC_FIELDS``: peer, bytes, m/n/k, ...) is an expression even without braces
    (``peer: (rank + 1) % 4``); any other string only inside ``{...}`` or as the bare word ``rank``.
    """
    if isinstance(v, str):
        if key in NUMERIC_FIELDS:
            return _RANK.search(v) is not None
        return "{" in v and _RANK.search(v) is not None or (_RANK.fullmatch(v.strip()) is not None)
    if isinstance(v, dict):
        return any(_uses_rank(x, k if key != "tags" else "tag") for k, x in v.items())
    if isinstance(v, list):
        return any(_uses_rank(x, key) for x in v)
    return False
