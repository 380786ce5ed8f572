"""The block path of step 3: a ``foreach`` of plain op entries evaluated over its whole iteration space at
once (:func:`schedsim.expr.compile_vector`; an entry instanced per rank over iterations x ranks), kept as a
:class:`Block` of one representative op entry per distinct combination of its fields other than ``name``,
``deps``, ``tags``, ``p2p_batch`` and ``tag``, and a spec's ops as a :class:`Layout`. Anything a block cannot
settle raises ``_Abandon`` and the schedule takes the general path (:mod:`schedsim.spec.foreach`).
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schedsim.arrays import first_codes
from schedsim.coded import Codes
from schedsim.expr import ExprError
from schedsim.spec.context import _compile_ranks, _Ctx, _uses_rank
from schedsim.spec.model import NUMERIC_FIELDS
from schedsim.spec.yaml_reader import LDict, LList, Mark
from schedsim.tags import TagSet

__all__ = ["Block", "Layout", "SMALL_BLOCK", "SMALL_BLOCKS_KEPT"]

#: A block of fewer iterations than this is *small*: building it (vector fields, representatives validated as
#: in the general path) costs more than expanding its iterations one by one. An inner ``foreach`` is one block
#: per outer iteration; after :data:`SMALL_BLOCKS_KEPT` small blocks of one body, that body is expanded
#: iteration by iteration. ``benchmarks/speed/foreach_nested.py`` on the shared 2-core VM (load + lower,
#: two entries, 160,000 ops): 20,000 outer x 2 inner iterations took 8.9 CPU s as blocks, 3.8 s per iteration,
#: 2.8 s with this rule; 2,000 x 20 took 2.2 s as blocks, 3.4 s per iteration (both paths give the same
#: spec, tests/spec/test_foreach_template.py).
SMALL_BLOCK = 8


SMALL_BLOCKS_KEPT = 32


def _worth_a_block(ops: Any, values: list[list[Any]], ctx: _Ctx) -> bool:
    """Whether the body ``ops`` (as written) is still built as a block for a loop over ``values``: not when
    it has already been built as :data:`SMALL_BLOCKS_KEPT` small blocks and this loop is small too."""
    if math.prod(map(len, values)) >= SMALL_BLOCK:
        return True
    seen = ctx.small_blocks.get(id(ops), 0)
    ctx.small_blocks[id(ops)] = seen + 1
    return seen < SMALL_BLOCKS_KEPT


def _plain_body(items: Any, rank_bound: bool, ctx: _Ctx, path: str,
                per_rank: bool = False) -> list[tuple[Any, ...]] | None:
    """A foreach body made only of plain op entries, compiled for :func:`_expand_plain`; else None.

    Plain: a mapping without ``ops``/``foreach``, not instanced per rank (with ``per_rank``, for a
    :class:`Block`, also one that is), whose fields and ``when`` all compiled (see :class:`_Plan`). Anything
    else is left to :func:`_expand_ops`, once per iteration. Each entry is ``(when, fields, key_marks, mark,
    path, item, ranks)``; ``ranks`` is None, or for an entry instanced per rank (``rank`` in its fields, as
    :func:`_expand_ops` instances it) its ``ranks`` field compiled (:func:`_compile_ranks`); its ``fields``
    are then those of each rank's copy (``ranks: [rank]``, in the place :meth:`_Plan.for_copy` gives it).
    """
    if not isinstance(items, list):
        return None
    marks = getattr(items, "item_marks", [None] * len(items))
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "ops" in item or "foreach" in item:
            return None
        plan = ctx.plan(item)
        mine = plan.uses_rank and not rank_bound
        if (mine and not per_rank) or ("when" in item and plan.when is None) \
                or any(f is None for k, f in plan.fields if not (mine and k == "ranks")):
            return None
        m = marks[i] if i < len(marks) else None
        km = getattr(item, "key_marks", {})
        ranks = None
        plan_fields = plan.fields
        if mine:  # as _expand_ops instances it: a copy per rank, its mark the entry's own
            try:
                ranks = _compile_ranks(item.get("ranks"))
            except ExprError:
                return None
            m = getattr(item, "mark", m)
            plan_fields = [(k, _rank_only if k == "ranks" else f) for k, f in plan.fields]
            if "ranks" not in item:
                plan_fields.append(("ranks", _rank_only))
        fields = [(k, f, km.get(k, m)) for k, f in plan_fields]
        key_marks = {k: fm for k, _, fm in fields}
        key_marks["__source__"] = m
        out.append((plan.when, fields, key_marks, getattr(item, "mark", m), f"{path}[{i}]", item, ranks))
    return out


def _rank_only(env: Mapping[str, Any], mark: Mark | None) -> list[int]:
    """The ``ranks`` of one rank's copy of an entry instanced per rank: ``[rank]``."""
    return [env["rank"]]


def _expand_plain(body: list[tuple[Any, ...]], env: dict[str, Any], ctx: _Ctx, out: LList) -> bool:
    """One iteration of a plain foreach body (:func:`_plain_body`): the ops :func:`_expand_ops` would append.

    Returns False, having appended and counted nothing, when an expression fails: the caller then expands the
    iteration with :func:`_expand_ops`, which raises the error with its file, line, field and fix.
    """
    n0, entries, chars = len(out), ctx.entries, ctx.chars
    try:
        for when, fields, key_marks, mark, p, _item, _ranks in body:
            if when is not None and not when(env):
                continue
            op = _plain_op(fields, key_marks, mark, env)
            ctx.count(op, mark, p)
            op["__path__"] = p
            out.append(op)
            out.item_marks.append(mark)
    except ExprError:
        del out[n0:], out.item_marks[n0:]
        ctx.entries, ctx.chars = entries, chars
        return False
    return True


def _plain_op(fields: list[tuple[str, Any, Mark | None]], key_marks: dict[str, Any], mark: Mark | None,
              env: Mapping[str, Any]) -> LDict:
    """One op entry of a plain body, its fields evaluated in ``env``, without ``__path__`` (raises ExprError)."""
    op = LDict()
    op.mark = mark
    for k, f, fm in fields:
        op[k] = f(env, fm)
    op.key_marks = dict(key_marks)
    return op


class _Abandon(Exception):
    """A block cannot be built in bulk: the body is expanded by the general path (which raises its errors)."""


class Block:
    """A ``foreach`` block of plain op entries, expanded over its whole iteration space at once.

    Rows are the op entries the general path would produce, in its order (iterations in the order of
    ``itertools.product``, each iteration's entries in the order written, ``when`` applied). Rows of one entry
    whose fields other than ``name``, ``deps`` and ``tags`` are equal share one *representative*: the op entry of the
    first such row, built by the general path's code (:func:`_plain_op`) and validated by pydantic with the
    rest of the schedule. A row runs on its representative's ``ranks``.

    Attributes
    ----------
    reps : list of LDict
        Representative op entries, in order of their first row; ``models`` holds them validated.
    rep_deps : list of bool
        Whether the representative's entry writes ``deps``.
    rows : int
        Number of rows R.
    row_rep : int32[R]
        Representative of each row.
    names : object[R]
        Op name of each row (str), made from ``name_codes`` (:class:`~schedsim.coded.Codes`: the rows' names as
        codes into the distinct strings the block evaluated, one per iteration for a name without ``rank``).
    dep_cnt : int64[R] (a read-only view of one count where every row has it), deps : object[sum(dep_cnt)]
        Each row's ``deps`` (names, in the order written), concatenated row by row.
    tags : object[R] or Codes
        Each row's tags as ``tuple(sorted(tags.items()))`` (``()`` for none); ``rep_tags`` the keys of each
        representative's ``tags`` in the order written (None: not written).
    batch, msg : Codes
        Each row's ``p2p_batch`` (either spelling: :data:`_ROW_STRS`) and ``tag`` (None: not written), from the
        constructor's ``strs`` (per field of :data:`_ROW_STRS`, each row's value).
    """

    def __init__(self, reps: list[LDict], rep_deps: list[bool], rep_tags: list[list[str] | None], row_rep: Any,
                 names: Codes, dep_cnt: Any, deps: Any, tags: Any, strs: dict[str, Codes]) -> None:
        self.reps, self.rep_deps, self.rep_tags = reps, rep_deps, rep_tags
        self.rows = len(names)
        self.row_rep, self.name_codes, self.dep_cnt, self.deps, self.tags = row_rep, names, dep_cnt, deps, tags
        p2p = strs["p2p_batch"]
        written = p2p.written()
        self.batch = p2p if bool(written.all()) else p2p.where(strs["nccl_group"], written).compact()
        self.msg = strs["tag"]
        self.models: list[Any] = []
        self.sources: list[tuple[int | None, int | None, str]] = []

    @property
    def names(self) -> Any:
        """Each row's op name, an object array of R (made from :attr:`name_codes` on each call)."""
        return self.name_codes.array()

    def ops(self) -> list[Any]:
        """The rows as pydantic op models, equal to what validating the general path's entries gives: each
        representative's model with the row's ``name`` (and ``deps``, ``tags``)."""
        import numpy as np
        out = []
        models, has_deps, tag_keys = self.models, self.rep_deps, self.rep_tags
        dptr = np.zeros(self.rows + 1, np.int64)
        np.cumsum(self.dep_cnt, out=dptr[1:])
        deps, dp = self.deps.tolist(), dptr.tolist()
        batch, msg = self.batch.tolist(), self.msg.tolist()
        for r, (j, name, tags) in enumerate(zip(self.row_rep.tolist(), self.names.tolist(), self.tags.tolist(),
                                                strict=True)):
            upd: dict[str, Any] = {"name": name}
            written = models[j].__pydantic_fields_set__  # the representative's are its first row's
            if "p2p_batch" in written:
                upd["p2p_batch"] = batch[r]
            if "tag" in written:
                upd["tag"] = msg[r]
            if has_deps[j]:
                upd["deps"] = deps[dp[r]:dp[r + 1]]
            if tag_keys[j] is not None:
                d = dict(tags)
                upd["tags"] = {k: d[k] for k in tag_keys[j]}  # in the order written
            out.append(_copy_with(models[j], upd))
        return out


def _copy_with(model: Any, update: dict[str, Any]) -> Any:
    """``model.model_copy(update=update)`` (pydantic 2: a shallow copy, ``update`` written over its fields and
    added to its set fields) without the generic machinery: an op model has no extra fields and no private
    attributes (``extra="forbid"``), so this is all that call does for it, at a third of the time."""
    new = object.__new__(type(model))
    d = model.__dict__.copy()
    d.update(update)
    setattr_ = object.__setattr__
    setattr_(new, "__dict__", d)
    setattr_(new, "__pydantic_extra__", None)
    setattr_(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    setattr_(new, "__pydantic_private__", None)
    return new


class Layout:
    """The ops of a loaded schedule as written: op models and :class:`Block` s, in program order.

    A :class:`~schedsim.spec.model.ScheduleSpec` loaded with blocks keeps this instead of its ``ops`` list,
    which :meth:`materialise` builds on first access; the lowering reads the layout directly.
    ``items[k]`` is an op model (its source in ``sources[k]``) or a Block (with its own ``sources``).
    """

    def __init__(self, items: list[Any], sources: list[Any]) -> None:
        self.items, self.sources = items, sources

    def materialise(self) -> tuple[list[Any], list[tuple[int | None, int | None, str]]]:
        """``(ops, sources)`` as the general path gives them."""
        ops: list[Any] = []
        srcs: list[tuple[int | None, int | None, str]] = []
        for it, src in zip(self.items, self.sources, strict=True):
            if isinstance(it, Block):
                ops.extend(it.ops())
                srcs.extend(it.sources[j] for j in it.row_rep.tolist())
            else:
                ops.append(it)
                srcs.append(src)
        return ops, srcs


def _keyable(v: Any) -> Any:
    """A hashable key that tells apart values pydantic may treat differently (1, 1.0, True, -0.0, 0.0)."""
    t = type(v)
    if t is float:
        return (t, repr(v))
    if t is list or t is LList or t is tuple or t is TagSet:
        return (list, tuple(_keyable(x) for x in v))
    hash(v)
    return (t, v)


def _vector_field(key: str, v: Any) -> Any:
    """``f(env, loop, n)`` for field ``key`` written as ``v``: a plain value, a :class:`_Vec`, or (a list) a
    list of those; raises ExprError (does not parse) or _Abandon (a nested list or mapping)."""
    from schedsim.expr import NotVectorisable, _parse, compile_interpolate_vector, compile_vector

    def scalar(x: Any) -> Any:
        if not isinstance(x, str):
            return lambda env, loop, n: x
        if key in NUMERIC_FIELDS:
            return compile_vector(x.strip().removeprefix("{").removesuffix("}") if x.strip().startswith("{") else x)
        return compile_interpolate_vector(x)

    if key == "ranks":  # the same for every iteration unless it names a loop variable (then per iteration)
        f = _compile_ranks(v)
        texts = [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
        used = {nd.id for t in texts for nd in ast.walk(_parse(t.strip("{}").strip())) if isinstance(nd, ast.Name)}

        def ranks(env: Mapping[str, Any], loop: Mapping[str, Any], n: int) -> Any:
            if used & loop.keys():
                raise NotVectorisable("ranks from a loop variable")
            return f(env, None)

        return ranks
    if isinstance(v, dict):
        if key != "tags" or any(isinstance(x, (list, dict)) for x in v.values()):
            raise _Abandon
        key = "tag"
        subs = [(k2, scalar(x)) for k2, x in v.items()]
        return lambda env, loop, n: {k2: f(env, loop, n) for k2, f in subs}
    if isinstance(v, list):
        if any(isinstance(x, (list, dict)) for x in v):
            raise _Abandon
        fns = [scalar(x) for x in v]
        return lambda env, loop, n: [f(env, loop, n) for f in fns]
    return scalar(v)


def _values(vf: Any, f: Any, env: Mapping[str, Any], loop: Mapping[str, Any], n: int,
            envs: Any) -> Any:
    """The field's value for each of the ``n`` iterations: a plain value (the same in all), an object array,
    or a list of those (a list field). Vectorised by ``vf``; where that cannot be, ``f`` (the compiled scalar
    form) runs per iteration; an ExprError there abandons the block."""
    from schedsim.expr import _Vec

    try:
        v = vf(env, loop, n)
        if isinstance(v, list):
            return [x.a if isinstance(x, _Vec) else x for x in v]
        if isinstance(v, dict):
            return {k: x.a if isinstance(x, _Vec) else x for k, x in v.items()}
        return v.a if isinstance(v, _Vec) else v
    except ExprError:
        raise _Abandon from None
    except Exception:  # NotVectorisable, or an error some iteration raises: evaluate one by one
        pass
    try:
        vals = [f(e) for e in envs()]
    except ExprError:
        raise _Abandon from None
    if vals and isinstance(vals[0], dict):  # tags: one value per key
        return {k: _objects([d[k] for d in vals]) for k in vals[0]}
    return _objects([tuple(x) if isinstance(x, list) else x for x in vals])


def _objects(vals: list[Any]) -> Any:
    """A 1-d object array of ``vals`` (tuples stay one element each; numpy would make a 2-d array)."""
    import numpy as np
    out = np.empty(len(vals), object)
    for i, x in enumerate(vals):
        out[i] = x
    return out


def _block(body: list[tuple[Any, ...]], names: list[str], values: list[list[Any]], env: dict[str, Any],
           ctx: _Ctx) -> Block | None:
    """The rows of a plain foreach body (:func:`_plain_body`) over the whole iteration space, or None when
    the general path must expand it (an expression fails or cannot be evaluated in bulk, a loop value that is
    not a scalar, a name that is not a valid string, a limit of :class:`_Ctx` would be passed).

    Names, ``deps`` and every other field are evaluated over the iteration space at once
    (:func:`schedsim.expr.compile_vector`: numpy object arrays, Python's operators per element);
    representatives are built by the general path's own code and must agree with the bulk values.
    """
    import numpy as np

    from schedsim.expr import _Vec

    sizes = [len(v) for v in values]
    n = math.prod(sizes)
    if ctx.visits + n > ctx.max_ops:
        return None
    if n == 0:
        return _empty_block()
    loop: dict[str, Any] = {}
    stride = n
    for nm, vals, size in zip(names, values, sizes, strict=True):
        types = set(map(type, vals))
        if not types <= {int, float, str, bool}:
            return None
        stride //= size
        base = np.empty(size, object)
        base[:] = vals
        idx = np.tile(np.repeat(np.arange(size), stride), n // (size * stride))
        loop[nm] = _Vec(base[idx], str not in types)
    try:
        return _block_rows(body, names, loop, n, env, ctx)
    except _Abandon:
        return None


#: :data:`schedsim.spec.model.NAME_PATTERN`'s characters, and those it does not take first (or an empty name: a line
#: break); tests/spec/test_foreach_block_vs_general.py holds :func:`_names_ok` to the pattern
_NAME_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-[]"
_NOT_FIRST = re.compile(rb"\n[0-9.\-\[\]\n]")


def _names_ok(joined: str, nk: int) -> bool:
    """Whether ``joined`` is ``nk`` names each followed by a line break, each matching
    :data:`schedsim.spec.model.NAME_PATTERN`, by byte passes (not a regex over megabytes): ASCII, nothing but the
    pattern's characters and the ``nk`` breaks, and no name beginning with a character the pattern does not take
    first."""
    if joined.count("\n") != nk or not joined.isascii():
        return False
    if nk == 0:
        return joined == ""
    b = joined.encode("ascii")
    return b.translate(None, _NAME_CHARS) == b"\n" * nk and b[:1] not in b"0123456789.-[]\n" and \
        _NOT_FIRST.search(b) is None


@dataclass
class _Entry:
    """One body entry over the iterations its ``when`` keeps (see :func:`_entry_rows`)."""

    e: int  # position in the body
    keep: Any  # int64[nk]: the iterations kept
    names: Codes  # name of each row
    deps: list[Any]  # per dependency: a name, or object[nk] of names
    combo: Any  # int64[nk]: combination of the other fields' values
    firsts: Any  # int64: first row of each combination
    has_deps: bool
    vals: dict[str, Any]  # field -> plain value, object[nk], or a list of those (a list field)
    tags: list[tuple[tuple[str, Any], ...]]
    chars: int
    strs: dict[str, Codes]  # field of _ROW_STRS -> each row's value
    rank: Any  # object array: each row's rank (an entry instanced per rank) at ``at["ranks"]``, else None
    at: dict[str, Any]  # field -> int64[nk]: each row's index into the field's arrays in vals (absent: the row's own)


def _block_rows(body: list[tuple[Any, ...]], names: list[str], loop: dict[str, Any], n: int,
                env: dict[str, Any], ctx: _Ctx) -> Block:
    """:func:`_block` once the loop values are arrays; raises _Abandon where the general path must expand."""
    import numpy as np

    done: dict[tuple[bool, str], Any] = {}
    entries = [x for e, b in enumerate(body)
               if (x := _entry_rows(e, b, loop, n, env, done, ctx.plan(b[5]).vec)) is not None]
    if not entries:
        ctx.visits += n
        return _empty_block()
    E, R = len(body), sum(len(x.keep) for x in entries)
    chars = sum(x.chars for x in entries)
    if ctx.entries + R > ctx.max_ops or ctx.chars + chars > ctx.max_chars:
        raise _Abandon  # the general path raises the limit's error at the op that passes it
    # rows in the general path's order: by iteration, then entry
    order = np.argsort(np.concatenate([x.keep * E + x.e for x in entries]), kind="stable")
    inv = np.empty_like(order)
    inv[order] = np.arange(R)
    reps, rep_deps, rep_tags, gid = _representatives(entries, body, loop, env, E)
    row_rep = np.concatenate([gid[j][x.combo] for j, x in enumerate(entries)])[order].astype(np.int32)
    row_names = Codes.cat([x.names for x in entries]).take(order).compact()
    one = entries[0].tags[0]
    if all(x.tags.count(one) == len(x.tags) for x in entries):  # one tag set for every row (most often none)
        row_tags: Any = Codes.of(one, R).compact()
    else:
        row_tags = np.fromiter(itertools.chain.from_iterable(x.tags for x in entries), object, R)[order]
    row_strs = {k: Codes.cat([x.strs[k] for x in entries]).take(order).compact() for k in _ROW_STRS}
    per = np.array([len(x.deps) for x in entries], np.int64)
    dep_cnt = np.broadcast_to(per[:1], (R,)) if bool((per == per[0]).all()) else \
        np.repeat(per, [len(x.keep) for x in entries])[order]  # one count for all rows: held once
    dptr = np.cumsum(dep_cnt) - dep_cnt
    flat = np.empty(int(dep_cnt.sum()), object)
    off = 0
    for x in entries:
        start = dptr[inv[off:off + len(x.keep)]]
        for k, d in enumerate(x.deps):
            flat[start + k] = d
        off += len(x.keep)
    ctx.visits += n
    ctx.entries += R
    ctx.chars += chars
    return Block(reps, rep_deps, rep_tags, row_rep, row_names, dep_cnt, flat, row_tags, row_strs)


def _empty_block() -> Block:
    import numpy as np
    return Block([], [], [], np.zeros(0, np.int64), Codes.of(None, 0), np.zeros(0, np.int64),
                 np.zeros(0, object), np.zeros(0, object), {k: Codes.of(None, 0) for k in _ROW_STRS})


def _entry_rows(e: int, b: tuple[Any, ...], loop: Mapping[str, Any], n: int, env: dict[str, Any],
                done: dict[tuple[bool, str], Any], vec: dict[str, Any]) -> _Entry | None:
    """Entry ``e`` of the body over the iterations its ``when`` keeps (None: none kept): its fields' values,
    names, ``deps``, tags and combinations of the other fields (one representative each).

    An entry instanced per rank (``b[6]``, see :func:`_plain_body`) runs over iterations x its ranks (rank
    fastest, the general path's order), ``rank`` bound as one more loop variable and ``ranks`` = ``[rank]``.

    ``vec`` caches the entry's vectorised fields (:attr:`_Plan.vec`): an inner ``foreach`` is one block per
    outer iteration, and compiling its fields each time cost more than expanding a small inner loop."""
    import numpy as np

    from schedsim.expr import _Vec, compile_vector

    when, fields, _key_marks, _mark, _p, item, ranks_of = b
    it = None  # per candidate row, its iteration (entries instanced per rank)
    base_loop, base_n, base_done = loop, n, done  # per iteration: a field without `rank` is evaluated there
    if ranks_of is not None:
        rl = _entry_ranks(ranks_of, item, env, loop)
        if not rl:
            return None
        it = np.repeat(np.arange(n), len(rl))
        rl_col = np.empty(len(rl), object)
        rl_col[:] = rl
        L = len(rl)
        loop = _Lazy({**{k: (lambda v=v: _Vec(v.a[it], v.num)) for k, v in loop.items()},
                      "rank": lambda: _Vec(rl_col[np.arange(len(it)) % L], True)})
        n = len(it)
        done = {}  # the other entries' values are per iteration, not per (iteration, rank)

    def envs_of(keep: Any) -> Any:
        return _envs(env, loop, keep)

    keep = np.arange(n)
    if when is not None:
        def when_vec(env_: Any, loop_: Any, n_: int) -> Any:
            if "\0when" not in vec:
                vec["\0when"] = compile_vector(str(item["when"]))
            return vec["\0when"](env_, loop_, n_)

        w = _values(when_vec, when, env, loop, n, envs_of(keep))
        keep = np.flatnonzero(np.asarray(np.frompyfunc(bool, 1, 1)(w), dtype=bool) if isinstance(w, np.ndarray)
                              else np.full(n, bool(w)))
    nk = len(keep)
    if not nk:
        return None
    sub = _Lazy({k: (lambda k=k: _Vec(loop[k].a[keep], loop[k].num)) for k in loop})
    vals: dict[str, Any] = {}
    # the fields without `rank` of an entry instanced per rank: (values per iteration, each row's iteration), so
    # that names, batch names and characters are checked and counted once per iteration, not once per row; and
    # those with `rank` but no loop variable: (values per rank of the entry, each row's rank position)
    spread: dict[str, tuple[Any, Any]] = {}
    codes: dict[int, Any] = {}  # id of a column of vals -> its int codes where known (see _combos)
    # fields held as their values per iteration (per rank) and each row's index into them (``at``), not as a
    # column of nk Python objects (a `rank` ring's names, batch names, peers and ranks: 500,000 rows an entry),
    # where the rows are read through ``spread`` and ``codes`` alone (names, batch names, ints with codes)
    at: dict[str, Any] = {}
    at_rank = None if it is None else keep % len(rl)  # each row's position among the entry's ranks
    rows_it = None if it is None else it[keep]  # each row's iteration
    for k, f, fm in fields:
        if ranks_of is not None and k == "ranks":
            assert at_rank is not None
            vals[k] = [rl_col]
            at[k] = at_rank
            codes[id(rl_col)] = at_rank  # distinct ints: their positions are codes
            continue
        raw = item[k]
        if it is not None and not _uses_rank(raw, k):  # the same on every rank: once per iteration, then spread
            per_it = _field_values(k, f, fm, raw, vec, env, base_loop, base_n, base_n, np.arange(base_n),
                                   lambda keep_: _envs(env, base_loop, keep_), base_done)
            _per_iteration(k, per_it, rows_it, vals, at, spread)
            continue
        if it is not None and isinstance(raw, str) and not _names_any(raw, base_loop.keys()):
            # `rank` but no loop variable (`peer: (rank + 1) % world_size`): once per rank a row takes, then spread
            vals[k] = _per_rank(k, f, fm, raw, vec, env, rl, at_rank, spread, codes)
            if k in spread and vals[k] is spread[k][0]:
                at[k] = at_rank  # its values per rank, the rows' codes known (_per_rank)
            continue
        vals[k] = _field_values(k, f, fm, raw, vec, env, sub, nk, n, keep, envs_of, done)
    chars = _chars(vals, nk, spread)
    if chars > _max_chars():  # before names are joined and checked: the general path refuses at the op (field named)
        raise _Abandon
    names = _row_names(vals.get("name"), nk, spread.get("name"))
    tags = _tag_rows(vals.pop("tags", {}), nk)
    deps = vals.get("deps", [])
    if not isinstance(deps, list) or not all(
            type(d) is str or (isinstance(d, np.ndarray) and set(map(type, d.tolist())) == {str}) for d in deps):
        raise _Abandon
    strs = {k: _row_strs(k, vals.get(k), nk, spread.get(k)) for k in _ROW_STRS}
    combo, firsts = _combos(vals, nk, codes)
    return _Entry(e=e, keep=keep if it is None else rows_it, names=names, deps=deps, combo=combo, firsts=firsts,
                  has_deps="deps" in vals, vals=vals, tags=tags, chars=chars, strs=strs,
                  rank=None if it is None else vals["ranks"][0], at=at)


def _per_iteration(k: str, per_it: Any, rows: Any, vals: dict[str, Any], at: dict[str, Any],
                   spread: dict[str, tuple[Any, Any]]) -> None:
    """Field ``k`` of an entry instanced per rank, the same on every rank: its values per iteration ``per_it``
    (:func:`_values`' forms) taken by the rows at their iterations ``rows``. An array goes to ``spread``; a name or
    a field of :data:`_ROW_STRS`, which the rows read through ``spread`` alone (:func:`_row_names`,
    :func:`_row_strs`, :func:`_chars`), stays in ``vals`` as it is, each row's iteration in ``at``; any other
    field gets a value per row (:func:`_spread`)."""
    import numpy as np
    if isinstance(per_it, np.ndarray):
        spread[k] = (per_it, rows)
        if k in ("name", *_ROW_STRS):
            vals[k], at[k] = per_it, rows
            return
    vals[k] = _spread(per_it, rows)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names_any(text: str, names: Any) -> bool:
    """Whether ``text`` holds one of ``names`` as a word (an identifier anywhere in it, inside a string literal
    too: a field that may use a loop variable is evaluated per row)."""
    return not set(names).isdisjoint(_WORD.findall(text))


def _per_rank(k: str, f: Any, fm: Mark | None, raw: str, vec: dict[str, Any], env: dict[str, Any], rl: list[int],
              at_rank: Any, spread: dict[str, tuple[Any, Any]], codes: dict[int, Any]) -> Any:
    """Field ``k`` of an entry instanced per rank that uses ``rank`` and no loop variable: its values at the
    entry's ranks ``rl`` (a plain value, an object array of ``len(rl)``, or a list of those) evaluated
    (:func:`_values`) only at the positions ``at_rank`` (each row's position in ``rl``) holds. An array of values
    per rank goes to ``spread`` (``(per rank, at_rank)``) and, when they are ints, the rows' codes to ``codes``
    (by the array's id; see :func:`_combos`) and that array is returned as it is, the rows reading it at
    ``at_rank``; otherwise the rows' values (:func:`_spread`)."""
    import numpy as np

    from schedsim.expr import _Vec

    L = len(rl)
    took = np.flatnonzero(np.bincount(at_rank, minlength=L))  # the positions some row takes
    col = np.empty(L, object)
    col[:] = rl
    loop = {"rank": _Vec(col[took], True)}
    got = _field_values(k, f, fm, raw, vec, env, loop, len(took), len(took), np.arange(len(took)),
                        lambda keep_: _envs(env, loop, keep_), {})
    if len(took) < L:  # back to one value per position (the positions no row takes hold None)
        def full(v: Any) -> Any:
            if not isinstance(v, np.ndarray):
                return v
            out = np.empty(L, object)
            out[took] = v
            return out
        got = [full(x) for x in got] if isinstance(got, list) else full(got)
    if isinstance(got, np.ndarray):
        spread[k] = (got, at_rank)
        c = _int_codes(got[took])
        if c is not None:  # the values per rank stand for the rows (the caller reads them at at_rank)
            num = np.zeros(L, np.int64)
            num[took] = c
            codes[id(got)] = num[at_rank]
            return got
    return _spread(got, at_rank)


def _used(sp: tuple[Any, Any] | None) -> Any:
    """Of a spread field (``(values per iteration, each row's iteration)``), the values of the iterations some
    row takes, each once (every row's value is one of them): what checking the rows checks; None without."""
    import numpy as np
    if sp is None:
        return None
    per_it, rows = sp
    used = np.zeros(len(per_it), bool)
    used[rows] = True
    return per_it[used]


class _Lazy(Mapping[str, Any]):
    """Loop values (name -> :class:`~schedsim.expr._Vec`), each made by its function on first read: an entry
    instanced per rank has a row per (iteration, rank), and a column of a million Python objects is made only
    for the fields, ``when`` or environments that read it."""

    def __init__(self, make: dict[str, Any]) -> None:
        self._make = make
        self._got: dict[str, Any] = {}

    def __getitem__(self, k: str) -> Any:
        got = self._got.get(k)
        if got is None:
            got = self._got[k] = self._make[k]()
        return got

    def __contains__(self, k: object) -> bool:
        return k in self._make

    def __iter__(self) -> Any:
        return iter(self._make)

    def __len__(self) -> int:
        return len(self._make)


def _envs(env: dict[str, Any], loop: Mapping[str, Any], keep: Any) -> Any:
    """``envs()``: the environment of each iteration ``keep`` (loop values over ``env``), one by one (the
    loop values read when it is called)."""
    names = list(loop)

    def envs() -> Any:
        cols = [loop[nm].a[keep].tolist() for nm in names]
        return ({**env, **dict(zip(names, vals, strict=True))} for vals in zip(*cols, strict=True))
    return envs


def _field_values(k: str, f: Any, fm: Mark | None, raw: Any, vec: dict[str, Any], env: dict[str, Any],
                  sub: Mapping[str, Any], nk: int, n: int, keep: Any, envs_of: Any, done: dict[Any, Any]) -> Any:
    """Field ``k`` (written ``raw``, compiled ``f``) over the ``nk`` iterations ``keep`` of ``n`` (loop values
    ``sub``): :func:`_values` of its vectorised form (cached in ``vec``); a string evaluated over every iteration
    is evaluated alike in any field but a numeric one (`deps: ["mm{i}"]` and another entry's `name: mm{i}`),
    so it is computed once (``done``)."""
    one = raw[0] if type(raw) is LList and len(raw) == 1 else raw
    ck = (k in NUMERIC_FIELDS, one) if nk == n and type(one) is str else None
    if ck is not None and ck in done:
        return [done[ck]] if one is not raw else done[ck]
    vf = vec.get(k)
    if vf is None:
        try:
            vf = vec[k] = _vector_field(k, raw)
        except ExprError:
            raise _Abandon from None
    if type(one) is str and k not in NUMERIC_FIELDS and nk > 1:  # one row first: a long string x nk rows
        try:
            first = f(next(iter(envs_of(keep[:1])())), fm)
        except Exception:  # the full evaluation below reports it as it does
            first = None
        if isinstance(first, str) and len(first) * nk > _max_chars():
            raise _Abandon  # the general path refuses at the op that passes the limit, the field named
    got = _values(vf, (lambda env_: f(env_, fm)), env, sub, nk, envs_of(keep))
    if ck is not None:
        done[ck] = got[0] if one is not raw else got
    return got


def _spread(v: Any, idx: Any) -> Any:
    """Values per iteration (:func:`_values`' forms) taken at iterations ``idx``: one per row."""
    import numpy as np
    if isinstance(v, np.ndarray):
        return v[idx]
    if isinstance(v, list):
        return [_spread(x, idx) for x in v]
    if isinstance(v, dict):
        return {k: _spread(x, idx) for k, x in v.items()}
    return v


def _entry_ranks(ranks_of: Any, item: Mapping[str, Any], env: dict[str, Any], loop: Mapping[str, Any]) -> list[int]:
    """The ranks an entry instanced per rank runs on, in the order written (its ``ranks``, else 0..world_size-1,
    as :func:`_expand_ops`); _Abandon where that depends on the iteration or is not a list of distinct ints
    (the general path then evaluates, or refuses, it per iteration)."""
    from schedsim.expr import _parse

    v = item.get("ranks")
    texts = [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
    try:
        used = {nd.id for t in texts for nd in ast.walk(_parse(t.strip("{}").strip())) if isinstance(nd, ast.Name)}
        rl = ranks_of(env, None)
    except ExprError:
        raise _Abandon from None
    if used & loop.keys():
        raise _Abandon
    if rl is None:
        w = env.get("world_size")
        if type(w) is not int:
            raise _Abandon
        rl = list(range(w))
    if not isinstance(rl, list) or any(type(r) is not int for r in rl) or len(set(rl)) != len(rl):
        raise _Abandon
    return rl


#: Fields a row carries on its own, like its name, not in its representative's combination: a send's or recv's
#: ``p2p_batch`` (``nccl_group``, its alias) and message ``tag``, different in every iteration of a batched
#: loop. Each is a string (``p2p_batch`` a valid name) or absent (None).
_ROW_STRS = ("p2p_batch", "nccl_group", "tag")


def _coded(v: Any, nk: int, sp: tuple[Any, Any] | None) -> Codes:
    """The rows' values of a field as :class:`~schedsim.coded.Codes`: of a spread field (``sp``: values per
    iteration, each row's iteration) the iterations' values and each row's iteration, else ``v`` (one value, or
    an object array of ``nk``) as they are."""
    if sp is None:
        return Codes.of(v, nk)
    per_it, rows = sp
    return Codes(rows, Codes.of(per_it, len(per_it)).values)


def _row_strs(key: str, v: Any, nk: int, sp: tuple[Any, Any] | None = None) -> Codes:
    """The rows' ``key`` (:data:`_ROW_STRS`; None where not written), checked as pydantic checks it where it
    varies (else _Abandon; a constant value is the representative's, validated there). ``sp``: the field's
    values per iteration and each row's iteration (a spread field, :func:`_used`), checked once per value."""
    import numpy as np
    if not isinstance(v, np.ndarray):
        return Codes.of(v, nk)
    lst = (v if sp is None else _used(sp)).tolist()
    if set(map(type, lst)) != {str}:
        raise _Abandon
    if key != "tag":
        if not _names_ok("\n".join(lst) + "\n", len(lst)):
            raise _Abandon
    return _coded(v, nk, sp)


def _row_names(nm: Any, nk: int, sp: tuple[Any, Any] | None = None) -> Codes:
    """The rows' names, checked as pydantic checks ``name`` (else _Abandon); ``sp``: the names per iteration and
    each row's iteration (a spread field, :func:`_used`), checked once per name."""
    import numpy as np
    if not isinstance(nm, np.ndarray):
        if not isinstance(nm, str):
            raise _Abandon  # pydantic's error, worded by the general path
        lst = [nm]  # one name for many rows: on one rank each, or a duplicate _load_blocks finds
    else:
        lst = (nm if sp is None else _used(sp)).tolist()
    if set(map(type, lst)) != {str}:
        raise _Abandon  # pydantic's error, worded by the general path
    if not _names_ok("\n".join(lst) + "\n", len(lst)):
        raise _Abandon
    return _coded(nm, nk, sp)


def _tag_rows(tags: Any, nk: int) -> list[tuple[tuple[str, Any], ...]]:
    """Per row, ``tuple(sorted(tags.items()))`` (the lowering's tag set), from the tags' per-key values."""
    import numpy as np
    if not isinstance(tags, dict):
        raise _Abandon
    tcols = [zip(itertools.repeat(k, nk), v.tolist() if isinstance(v, np.ndarray) else itertools.repeat(v, nk),
                 strict=False) for k, v in sorted(tags.items())]
    rows = list(zip(*tcols, strict=True)) if tcols else [()] * nk
    try:
        hash(tuple(rows))
    except TypeError:
        raise _Abandon from None
    if any(v.dtype.kind in "fbO" if isinstance(v, np.ndarray) else type(v) in (bool, float) for v in tags.values()):
        rows = list(map(TagSet, rows))  # a boolean or float among the values: kept apart from 1 and 0
    return rows


def _max_chars() -> int:
    """``SCHEDSIM_MAX_CHARS`` (:func:`schedsim.spec.limits.limit`)."""
    from schedsim.spec.limits import limit
    return limit("SCHEDSIM_MAX_CHARS")


def _chars(vals: dict[str, Any], nk: int, spread: dict[str, tuple[Any, Any]] | None = None) -> int:
    """Characters of the rows' string fields, as :meth:`_Ctx.count` counts them; a field of ``spread`` (values
    per iteration, each row's iteration) from its values per iteration, each counted as often as rows take it."""
    import numpy as np
    chars = 0
    for k, v in vals.items():
        if isinstance(v, str):
            chars += len(v) * nk
        elif spread and k in spread and v.dtype.kind in "OU":
            per_it, rows = spread[k]
            lst = per_it.tolist()
            lens = np.fromiter(map(len, lst) if set(map(type, lst)) == {str} else
                               (len(x) if type(x) is str else 0 for x in lst), np.int64, len(lst))
            chars += int(lens[rows].sum())
        elif isinstance(v, np.ndarray) and v.dtype.kind in "OU":  # (arrays of numbers have no characters)
            lst = v.tolist()
            types = set(map(type, lst))
            if types == {str}:
                chars += sum(map(len, lst))
            elif str in types:
                chars += sum(len(x) for x in lst if type(x) is str)
    return chars


def _combos(vals: dict[str, Any], nk: int, known: dict[int, Any] | None = None) -> tuple[Any, Any]:
    """``(combo, firsts)``: per row, the id of its values of the fields other than name, deps and
    :data:`_ROW_STRS` (first-seen order), and the first row of each id. ``known``: ``id(column) -> codes`` of
    columns of ints whose codes (equal values, equal codes; any such numbering gives the same ids) are given,
    per row: such a column may hold its values once per rank (:func:`_per_rank`), which only its codes spread."""
    import numpy as np
    vary = [v for k, v in vals.items() if k not in ("name", "deps", *_ROW_STRS)
            and (isinstance(v, np.ndarray) or (isinstance(v, list) and any(isinstance(x, np.ndarray) for x in v)))]
    if not vary:
        return np.zeros(nk, np.int64), np.zeros(1, np.int64)
    flat = [c for v in vary for c in ([v] if isinstance(v, np.ndarray) else v) if isinstance(c, np.ndarray)]
    codes = [known[id(c)] if known and id(c) in known else _int_codes(c) for c in flat]
    if all(c is not None for c in codes):  # every varying value an int (a rank, a size): in bulk
        key, span = np.zeros(nk, np.int64), 1
        for c in codes:
            assert c is not None
            r = int(c.max()) + 1
            if span * r >= 1 << 62:  # renumber the key so far densely (values < nk) before it overflows
                key = np.unique(key, return_inverse=True)[1].reshape(-1)
                span = int(key.max()) + 1
            key, span = key * r + c, span * r  # distinct values stay distinct
        combo = first_codes(key)  # numbered by first row: a new id is the running maximum's step up by one
        return combo, np.flatnonzero(np.diff(np.maximum.accumulate(combo), prepend=-1))
    def rows(c: Any) -> list[Any]:  # a column's rows: its values, or its known codes (equal values, equal codes)
        return known[id(c)].tolist() if known and id(c) in known else c.tolist()
    cols = [rows(v) if isinstance(v, np.ndarray) else
            list(zip(*[rows(x) if isinstance(x, np.ndarray) else [x] * nk for x in v], strict=True))
            for v in vary]
    try:
        keys = [tuple(map(_keyable, k)) for k in zip(*cols, strict=True)]
    except TypeError:
        raise _Abandon from None
    ids: dict[Any, int] = {}
    combo = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, nk)
    return combo, np.unique(combo, return_index=True)[1]


def _int_codes(col: Any) -> Any:
    """``col`` (object[n]) as int64 codes in 0 .. 4n + 63 (equal values, equal codes) where every value is an
    ``int`` (not a bool: :func:`_keyable` tells ``1`` from ``True``) of at most 63 bits; else None."""
    import numpy as np
    lst = col.tolist()
    if set(map(type, lst)) != {int}:
        return None
    try:
        arr = np.array(lst, np.int64)
    except OverflowError:
        return None
    lo, hi = int(arr.min()), int(arr.max())
    if hi - lo < 4 * len(arr) + 64:  # a small range: the values less their minimum are the codes
        return arr - lo
    return np.unique(arr, return_inverse=True)[1].reshape(-1)


def _representatives(entries: list[_Entry], body: list[tuple[Any, ...]], loop: dict[str, Any],
                     env: dict[str, Any], E: int) -> tuple[list[LDict], list[bool], list[list[str] | None], list[Any]]:
    """The representative op entries in order of their first row, built by :func:`_plain_op` (the general
    path's code) and compared with the bulk values; and per entry, its combinations' representative ids."""
    import numpy as np
    rep_of = sorted(((int(x.keep[pos]) * E + x.e, j, c, pos) for j, x in enumerate(entries)
                     for c, pos in enumerate(x.firsts.tolist())))
    gid = [np.zeros(len(x.firsts), np.int64) for x in entries]
    reps: list[LDict] = []
    rep_deps: list[bool] = []
    rep_tags: list[list[str] | None] = []
    for i, (_key, j, c, pos) in enumerate(rep_of):
        x = entries[j]
        gid[j][c] = i
        _when, fields, key_marks, mark, p, _item, _ranks = body[x.e]
        t = int(x.keep[pos])
        it_env = {**env, **{k: v.a[t] for k, v in loop.items()}}
        if x.rank is not None:
            it_env["rank"] = x.rank[x.at["ranks"][pos]]
        try:
            op = _plain_op(fields, key_marks, mark, it_env)
        except ExprError:
            raise _Abandon from None
        for k, v in x.vals.items():  # the bulk values must be what the general path computes
            want = op[k]
            a = x.at[k][pos] if k in x.at else pos
            got = ([y[a] if isinstance(y, np.ndarray) else y for y in v] if isinstance(v, list)
                   else v[a] if isinstance(v, np.ndarray) else v)
            if _keyable(list(want) if isinstance(want, list) else want) != _keyable(got):
                raise _Abandon
        if _keyable(tuple(sorted(op.get("tags", {}).items()))) != _keyable(x.tags[pos]):
            raise _Abandon
        op["__path__"] = p
        reps.append(op)
        rep_deps.append(x.has_deps)
        rep_tags.append(list(op["tags"]) if "tags" in op else None)
    return reps, rep_deps, rep_tags, gid
