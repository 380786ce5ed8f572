"""Step 3's general path: ``ops`` entries expanded one by one, ``foreach`` blocks as the cartesian product of
their loop variables and ``when`` conditions evaluated per iteration. A ``foreach`` whose body is plain op
entries becomes a :class:`~schedsim.spec.block.Block` instead (:mod:`schedsim.spec.block`), when it is worth one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from schedsim.expr import ExprError, _short, evaluate
from schedsim.spec.block import _block, _expand_plain, _plain_body, _worth_a_block
from schedsim.spec.context import _RANK, _Ctx, _eval_value
from schedsim.spec.model import NUMERIC_FIELDS
from schedsim.spec.yaml_reader import LDict, LList, Mark

TEMPLATES = True
"""Carry a plain ``foreach`` body as one :class:`Block` of columns (False: expand it iteration by iteration, the
general path; the tests compare the two)."""


def _expand_ops(items: Any, env: dict[str, Any], ctx: _Ctx, path: str, out: LList, index: int | None = None) -> None:
    """Expand a list of ops: `when`, groups, `foreach`, per-rank instances (`rank`), expressions.

    ``index`` is the position of ``items[0]`` in the list the user wrote (for one re-expanded op).
    """
    if not isinstance(items, list):
        raise ctx.err("`ops` must be a list", getattr(items, "mark", None), path,
                      fix="write ops: as a YAML list of '- name: ...' entries")
    marks = getattr(items, "item_marks", [None] * len(items))
    for i, item in enumerate(items):
        if index is not None:
            i = index
            m = getattr(item, "mark", None)
        else:
            m = marks[i] if i < len(marks) else None
        p = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise ctx.err("each op must be a mapping", m, p, fix="write '- name: x\\n  kind: matmul ...'")
        km = getattr(item, "key_marks", {})
        op = _literal_op(item, km, m)
        if op is not None:  # nothing to evaluate: no per-entry plan (a literal schedule of a million ops)
            ctx.count(op, op.mark, p)
            op["__path__"] = p
            out.append(op)
            out.item_marks.append(op.mark)
            continue
        plan = ctx.plan(item)
        per_rank = "rank" not in env and "ops" not in item and "foreach" not in item and plan.uses_rank
        if ("ops" in item or "foreach" in item) and "rank" not in env and _RANK.search(str(item.get("when", ""))):
            # a group or foreach taken by some ranks only (`when: rank == 0`): expand it once per rank with `rank`
            # bound, keeping each resulting op on that rank alone
            if not isinstance(env.get("world_size"), int):
                raise ctx.err("`rank` in a group's `when` needs an integer world_size", km.get("when", m), p + ".when",
                              fix="set world_size")
            for r in range(env["world_size"]):
                mine = LList()
                _expand_ops(LList([item]), {**env, "rank": r}, ctx, path, mine, index=i)
                for op in mine:
                    if op.get("ranks") is None or r in op["ranks"]:
                        op["ranks"] = [r]
                        out.append(op)
                        out.item_marks.append(op.mark)
            continue
        if "when" in item and not per_rank:
            try:
                cond = plan.when(env) if plan.when is not None else evaluate(str(item["when"]), env)
            except ExprError as e:
                raise ctx.err(f"bad `when` expression {_short(str(item['when']))}: {e}", km.get("when", m), p + ".when",
                              fix="check the types of the parameters it uses (e.g. --set values)") from None
            if not cond:
                continue
        if "ops" in item and "foreach" not in item:
            _only_keys(item, {"ops", "when"}, "a group of ops", ctx, m, p,
                       "a group holds only `ops:` and `when:` (and `foreach:` to repeat it); put op fields on the ops "
                       "inside it")
            _expand_ops(item["ops"], env, ctx, p + ".ops", out)  # a conditional group (`when:` + `ops:`)
            continue
        if "foreach" in item:
            _only_keys(item, {"foreach", "ops", "when"}, "a foreach block", ctx, m, p,
                       "a foreach block holds only `foreach:`, `ops:` and optionally `when:`")
            loops = item["foreach"]
            if not isinstance(loops, dict) or not loops:
                raise ctx.err("`foreach` must map loop variables to ranges or lists", km.get("foreach", m),
                              p + ".foreach", fix="write foreach: {i: range(chunks)}")
            names, values = [], []
            lkm = getattr(loops, "key_marks", {})
            for var, spec in loops.items():
                try:
                    vals = evaluate(spec, env) if isinstance(spec, str) else spec
                    if isinstance(vals, list) and any(issubclass(t, str) for t in set(map(type, vals))):  # the
                        # types in one C-level pass: range(chunks)'s million ints hold none
                        vals = [evaluate(v, env) if isinstance(v, str) and v.isidentifier() and v in env else v
                                for v in vals]
                except ExprError as e:
                    raise ctx.err(f"bad loop range for {var!r}: {e}", lkm.get(var, m), f"{p}.foreach.{var}",
                                  fix="write e.g. range(chunks) or a list [a, b]") from None
                if isinstance(vals, int):
                    vals = list(range(vals))
                if not isinstance(vals, list):
                    raise ctx.err(f"loop variable {var!r} must range over a list, got {_short(repr(vals))}",
                                  lkm.get(var, m), f"{p}.foreach.{var}",
                                  fix="write e.g. range(chunks) or a list [a, b]")
                names.append(var)
                values.append(vals)
            if "ops" not in item:
                raise ctx.err("a foreach block needs an `ops:` list", m, p, fix="add ops: [...] under foreach")
            _run_foreach(item["ops"], names, values, env, ctx, km.get("foreach", m), p, out)
            continue
        if per_rank:
            # the op is instanced per rank: one entry per rank, with `rank` bound in its expressions
            ranks = _eval_value("ranks", item.get("ranks"), env, ctx, km.get("ranks", m), p + ".ranks")
            if ranks is None:
                if not isinstance(env.get("world_size"), int):
                    raise ctx.err("`rank` in an op for all ranks needs an integer world_size", m, p,
                                  fix="set world_size, or give the op `ranks:`")
                ranks = list(range(env["world_size"]))
            for r in ranks:
                one = LDict(item)
                one.mark = getattr(item, "mark", m)
                one.key_marks = dict(km)
                one["ranks"] = [r]
                ctx.plans[id(one)] = plan.for_copy(one)  # compiled once for all ranks, dropped after use
                _expand_ops(LList([one]), {**env, "rank": r}, ctx, path, out, index=i)
                del ctx.plans[id(one)]
            continue
        op = LDict()
        op.mark = getattr(item, "mark", m)
        for k, f in plan.fields:
            fm = km.get(k, m)
            try:
                op[k] = f(env, fm) if f is not None else _eval_value(k, item[k], env, ctx, fm, f"{p}.{k}")
            except ExprError:  # _eval_value evaluates it again and raises with the file, line, field and fix
                op[k] = _eval_value(k, item[k], env, ctx, fm, f"{p}.{k}")
            op.key_marks[k] = fm
        op.key_marks["__source__"] = m
        ctx.count(op, op.mark, p)
        op["__path__"] = p
        out.append(op)
        out.item_marks.append(op.mark)


def _only_keys(item: Mapping[str, Any], allowed: set[str], what: str, ctx: _Ctx, m: Mark | None, p: str,
               fix: str) -> None:
    """Refuse the first key of ``item`` (in sorted order) outside ``allowed``, as unknown in ``what``."""
    extra = set(item) - allowed
    if extra:
        k = sorted(extra)[0]
        raise ctx.err(f"unknown key {k!r} in {what}", getattr(item, "key_marks", {}).get(k, m), f"{p}.{k}", fix=fix)


def _literal(key: str, v: Any) -> bool:
    """Whether a scalar field value is its own value in every environment: not a string, or a string of no
    ``{expr}`` and no ``rank`` outside a numeric field (``NUMERIC_FIELDS`` are expressions even unbraced)."""
    if isinstance(v, str):
        return key not in NUMERIC_FIELDS and "{" not in v and "rank" not in v
    return not isinstance(v, (list, dict))


def _literal_op(item: Mapping[str, Any], km: Mapping[str, Any], m: Mark | None) -> LDict | None:
    """The op entry ``item`` as :func:`_expand_ops` expands it where no field holds an expression (scalars and
    lists of scalars, ``ranks`` as ints; no ``when``, ``ops``, ``foreach``): the same values, types and marks
    as the compiled fields of :class:`_Plan` give, without compiling them. None for any other entry."""
    op = LDict()
    op.mark = getattr(item, "mark", m)
    for k, v in item.items():
        if k in ("when", "ops", "foreach"):
            return None
        if k == "ranks":  # as _compile_ranks
            if v is None or v == "all":
                v = None
            elif isinstance(v, int):
                v = [v]
            elif isinstance(v, list) and not any(isinstance(y, (str, list, dict)) for y in v):
                v = list(v)
            else:
                return None
        elif isinstance(v, list):  # as _compile_field's run_list
            if not all(_literal(k, x) for x in v):
                return None
            sub = LList(v)
            sub.mark = getattr(v, "mark", m)
            sub.item_marks = list(getattr(v, "item_marks", []))
            v = sub
        elif not _literal(k, v):
            return None
        op[k] = v
        op.key_marks[k] = km.get(k, m)
    op.key_marks["__source__"] = m
    return op


def _run_foreach(ops: Any, names: list[str], values: list[list[Any]], env: dict[str, Any], ctx: _Ctx,
                 mark: Mark | None, p: str, out: LList) -> None:
    """Expand a foreach block's ``ops`` once per combination of its loop ``values`` (the cartesian product).

    A body of plain op entries (:func:`_plain_body`) outside any per-rank expansion becomes one :class:`Block`
    (the whole iteration space at once, see :func:`_block`) where that succeeds; otherwise, and to raise its
    errors, the body is expanded iteration by iteration.
    """
    bulk = ctx.blocks and TEMPLATES and "rank" not in env
    body = _plain_body(ops, "rank" in env or "rank" in names, ctx, p + ".ops", per_rank=bulk)
    if body is not None and bulk and _worth_a_block(ops, values, ctx):
        blk = _block(body, names, values, env, ctx)
        if blk is not None:
            if blk.rows:
                out.append(blk)
                out.item_marks.append(mark)
            return
    if body is not None and any(b[6] is not None for b in body):
        body = None  # an entry instanced per rank: the general path expands each iteration
    for combo in itertools.product(*values):
        ctx.visit(mark, p + ".foreach")
        it_env = {**env, **dict(zip(names, combo, strict=False))}
        if body is None or not _expand_plain(body, it_env, ctx, out):
            _expand_ops(ops, it_env, ctx, p + ".ops", out)
