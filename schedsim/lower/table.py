"""The column builder the expansions write into (hand-written ops as rows in bulk, pipeline ops as column
blocks, the per-op reference emitter and the block's collectives one by one).

A *template* is an :class:`~schedsim.graph.ops.Op` holding what many instances share (kind, sizes, cost
inputs, dtype, group of a collective, source); an instance adds its rank, name, tags, stream, peer, NCCL
batch, message tag and dependencies, each stored as a small integer into an interned table. Written op
entries equal but for name, dependencies and tags share one template (:func:`template_key`), so a
``foreach`` of 62,500 iterations has as many templates as its body has distinct entries. The pipeline's
columnar emitter hands its ops over as a :class:`Block` (numpy columns and a CSR of dependencies) and
reserves its names, tag sets and strings as lazy runs of the interners (:meth:`_Interner.reserve`): they are
made when a report, an error or an id reads them, and registered for lookup only when an item that could be
one of them is looked up. Nothing here makes one Python object per op instance.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import accumulate, compress, count, filterfalse, repeat
from typing import Any

import numpy as np

from schedsim.coded import Codes
from schedsim.graph.ops import Op, RankGroup

__all__ = ["Block", "Table", "template_key"]

I32 = np.int32
I32_C = array("i").itemsize == 4  # a C int is int32: array("i") converts a list of ints in a C loop


_SPAN: Any = np.zeros(0, np.int64)  # the ``register`` of a span of :meth:`_Interner.reserve_new`: every item of it


class _Interner:
    """Strings (or any hashable) to dense ids, in first-seen order.

    A run of new items can be appended *lazily* (:meth:`reserve`): their ids are taken at once, the items
    are made on first read (:attr:`items`, :meth:`item`, :meth:`take`), and they join the lookup table
    (:attr:`ids`) only when an item that could be one of them is looked up (or :attr:`ids` is read). A
    pipeline block's 456,704 op names cost nothing until a report, an error or an id needs them.
    """

    __slots__ = ("_ids", "_items", "_lazy", "_unreg", "_cols")

    def __init__(self) -> None:
        self._ids: dict[Any, int] = {}
        self._items: list[Any] = []
        self._lazy: list[tuple[int, int, Callable[[], list[Any]]]] = []  # (base, n, make): not made yet
        self._unreg: list[tuple[int, int, Callable[[Any], bool] | None, np.ndarray | None]] = []  # not in _ids
        self._cols: list[tuple[int, int, Any]] = []  # (base, n, columns) of the runs reserved with columns

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Any:
        """Every item in id order (the lazy runs made)."""
        return iter(self.items)

    def __getitem__(self, i: int) -> Any:
        """Item ``i`` (:meth:`item`), so the interner reads as a sequence."""
        return self.item(i)

    def __eq__(self, other: object) -> bool:
        """Equal to an interner or a sequence holding the same items in the same (id) order."""
        if isinstance(other, _Interner):
            return self.items == other.items
        if isinstance(other, (tuple, list)):
            return len(other) == len(self._items) and self.items == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __call__(self, x: Any) -> int:
        if self._unreg:
            self._touch(x)
        i = self._ids.get(x)
        if i is None:
            i = self._ids[x] = len(self._items)
            self._items.append(x)
        return i

    def get(self, x: Any) -> int | None:
        """The id of ``x``, None when it is not interned."""
        if self._unreg:
            self._touch(x)
        return self._ids.get(x)

    def append(self, x: Any) -> int:
        """A new id for ``x`` without a lookup (``x`` is never found by one): an item no other op shares."""
        if self._unreg:
            self._close_span()
        self._items.append(x)
        return len(self._items) - 1

    def reserve_new(self, n: int, make: Callable[[], list[Any]] | list[Any], may_hold: Callable[[Any], bool]) -> int:
        """Give the ``n`` items ``make()`` returns (or the list ``make``) the next ids, in order, without a lookup
        each; returns the first. The caller guarantees that they differ from each other and from every item
        interned so far, and that ``may_hold`` is true for each of them. They are made only when one is first read
        (:attr:`items`, :meth:`item`, :meth:`take`) or registered, and join the lookup table only when an item
        ``x`` with ``may_hold(x)`` is looked up or :attr:`ids` is read, so the ids are those that interning each
        item in turn gives, without a string made or a dictionary insertion per item where nothing reads them
        (the training block's op names and placed-op strings, :class:`schedsim.lower.pipeline_emitter._Emitter`,
        which no pass of ``schedsim search`` reads). The items of consecutive calls form one *span*, registered
        as a whole (the items interned between them by a lookup are in it too, with the ids they have), and one
        lazy run where no lookup came between them (:class:`_Pieces`), so a lookup scans one span, not one per
        call. The eager form, every item made at once: ``tests/oracle/eager_names.py``."""
        items = self._items
        base = len(items)
        if not n:
            return base
        items.extend(repeat(None, n))
        lz = self._lazy
        last = lz[-1] if lz else None
        if last is not None and type(last[2]) is _Pieces and last[0] + last[1] == base:
            last[2].parts.append(make)
            lz[-1] = (last[0], last[1] + n, last[2])
        else:
            lz.append((base, n, _Pieces([make])))
        u = self._unreg
        if u and u[-1][3] is _SPAN and u[-1][2] is may_hold:
            u[-1] = (u[-1][0], len(items) - u[-1][0], may_hold, _SPAN)
        else:
            u.append((base, n, may_hold, _SPAN))
        return base

    def may_hold_any(self, pred: Callable[[Any], bool]) -> bool:
        """Whether ``pred`` may hold for an item interned so far: true for any lazy or unregistered run, else
        whether it holds for one."""
        return bool(self._lazy or self._unreg) or any(map(pred, self._items))

    def _close_span(self) -> None:
        """Register the open span of :meth:`reserve_new`, if any, before an item that no lookup may find (or a
        lazy run) is appended after it."""
        if self._unreg and self._unreg[-1][3] is _SPAN:
            self._register(self._unreg[-1])

    def reserve(self, n: int, make: Callable[[], list[Any]], may_hold: Callable[[Any], bool] | None = None,
                register: np.ndarray | None = None, columns: Any = None) -> int:
        """Take ids ``base .. base + n - 1`` for ``n`` new items that ``make()`` returns (a list of ``n``) when
        one is first read; returns ``base``. The caller guarantees they differ from every item interned so far
        and from each other. Those at offsets ``register`` (int array; None = all) join the lookup table
        when an item ``x`` with ``may_hold(x)`` true (None: any item) is looked up, so ``may_hold`` must be
        true for each of them; the others are never found by a lookup (as :meth:`append` 's).

        ``columns`` (optional): the same ``n`` items in coded form (:class:`schedsim.coded.Parts` for names,
        :class:`schedsim.coded.TagColumns` for tag sets; ``columns.take(offsets)`` gives items equal to
        ``make()``'s), or a function that returns it (called on first use): :meth:`column_runs` hands it out,
        and :meth:`take` / :meth:`item` read a few items from it without making the run."""
        base = len(self._items)
        if not n:
            return base
        self._close_span()
        self._items.extend(repeat(None, n))
        self._lazy.append((base, n, make))
        if columns is not None:
            self._cols.append((base, n, columns))
        if register is None or len(register):
            self._unreg.append((base, n, may_hold, register))
        return base

    def _make(self, seg: tuple[int, int, Callable[[], list[Any]]]) -> None:
        base, n, make = seg
        vals = make()
        if len(vals) != n:
            raise AssertionError(f"a lazy block made {len(vals)} items for {n} ids")
        self._items[base:base + n] = vals
        self._lazy = [g for g in self._lazy if g is not seg]

    def _fill(self, lo: int, hi: int) -> None:
        """Make the lazy items whose ids fall in ``lo .. hi - 1``."""
        for seg in [g for g in self._lazy if g[0] < hi and g[0] + g[1] > lo]:
            self._make(seg)

    def _register(self, seg: tuple[int, int, Callable[[Any], bool] | None, np.ndarray | None]) -> None:
        base, n, _pred, which = seg
        self._fill(base, base + n)
        if which is None or which is _SPAN:
            self._ids.update(zip(self._items[base:base + n], range(base, base + n), strict=True))
        else:
            items = self._items
            self._ids.update((items[base + k], base + k) for k in which.tolist())
        self._unreg = [g for g in self._unreg if g is not seg]

    def _touch(self, x: Any) -> None:
        u = self._unreg
        if len(u) == 1:  # (most often one span)
            if u[0][2] is None or u[0][2](x):
                self._register(u[0])
            return
        for seg in [g for g in u if g[2] is None or g[2](x)]:
            self._register(seg)

    def touch_all(self, xs: Any) -> None:
        """Register the lazy runs any of ``xs`` could be in (before looking them up in :attr:`ids` directly)."""
        if self._unreg:
            for x in xs:
                self._touch(x)
                if not self._unreg:
                    break

    @property
    def ids(self) -> dict[Any, int]:
        """Item -> id, every lazy run registered."""
        while self._unreg:
            self._register(self._unreg[0])
        return self._ids

    @property
    def items(self) -> list[Any]:
        """Every item in id order, the lazy ones made."""
        while self._lazy:
            self._make(self._lazy[0])
        return self._items

    def column_runs(self) -> list[tuple[int, int, Any]]:
        """``(base, n, columns)`` of each run reserved with ``columns`` (:meth:`reserve`), made or not."""
        if any(callable(c) for _b, _n, c in self._cols):  # made on first use
            self._cols = [(b, n, c() if callable(c) else c) for b, n, c in self._cols]
        return list(self._cols)

    def any_item(self, pred: Callable[[Any], bool], in_columns: Callable[[Any], bool]) -> bool:
        """Whether ``pred(item)`` holds for some item: a lazy run reserved with ``columns`` (:meth:`reserve`) is
        asked ``in_columns(columns)`` instead (not made; true when any of its items may pass), the other lazy
        runs are made."""
        cols = {b: c for b, _n, c in self.column_runs()}
        for seg in sorted(self._lazy, key=lambda g: g[0]):
            if seg[0] in cols:
                if in_columns(cols[seg[0]]):
                    return True
            else:
                self._make(seg)
        items, at = self._items, 0
        for base, n, _make in sorted(self._lazy, key=lambda g: g[0]):  # those left: asked through their columns
            if any(map(pred, items[at:base])):
                return True
            at = base + n
        return any(map(pred, items[at:]))

    def item(self, i: int) -> Any:
        """Item ``i`` (making only the lazy run that holds it, or reading it from the run's columns)."""
        if self._lazy:
            return self.take((i,))[0]
        return self._items[i]

    def take(self, ids: Any) -> list[Any]:
        """Items of ``ids`` (ints), making only the lazy runs that hold them; from a run's columns (no run made)
        when the ids in it are under an eighth of it."""
        ids = list(ids)
        items = self._items
        if not (self._lazy and ids):
            return [items[i] for i in ids]
        a = np.asarray(ids, np.int64)
        cols = {g[0]: g[2] for g in self.column_runs()}
        got: list[tuple[np.ndarray, list[Any]]] = []
        for seg in [g for g in self._lazy if bool(((a >= g[0]) & (a < g[0] + g[1])).any())]:
            base, n, _make = seg
            at = np.flatnonzero((a >= base) & (a < base + n))
            if base in cols and 8 * len(at) < n:
                got.append((at, cols[base].take(a[at] - base)))
            else:
                self._make(seg)
        out = [items[i] for i in ids]
        for at, vals in got:
            for k, v in zip(at.tolist(), vals, strict=True):
                out[k] = v
        return out


class _Pieces:
    """The maker of a lazy run of :meth:`_Interner.reserve_new`: its calls' item lists (or their makers), in
    order, concatenated when the run is made."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts

    def __call__(self) -> list[Any]:
        out: list[Any] = []
        for p in self.parts:
            out.extend(p if isinstance(p, list) else p())
        return out


def _objects(x: Any) -> np.ndarray:
    """``x`` (a sequence of str or None) as a 1-d object array (a list of strings is not made a str array)."""
    if isinstance(x, np.ndarray) and x.dtype == object:
        return x
    out = np.empty(len(x), object)
    out[:] = list(x)
    return out


def _intern_new(interner: _Interner, seq: list[Any]) -> dict[Any, int]:
    """Intern the items of ``seq`` not interned yet, in first-seen order (as calling ``interner`` on each item in
    turn would); returns the interner's lookup table."""
    uniq = dict.fromkeys(seq)  # once: hashing a million fresh strings is most of the cost
    interner.touch_all(uniq)
    ids, items = interner._ids, interner._items
    new = list(filterfalse(ids.__contains__, uniq))  # C-level loops, no Python bytecode per item
    ids.update(zip(new, count(len(items))))
    items.extend(new)
    return ids


def _intern_all(interner: _Interner, seq: list[Any]) -> np.ndarray:
    """Ids of every item of ``seq`` (int32), interning the new ones in first-seen order. One item throughout (a
    row's tags, most often none) is looked up once: ``list.count`` compares in C, no hashing per item. Otherwise
    each item is looked up once; the new ones, when each occurs once (a ``foreach``'s names), take the next ids in
    order without a second lookup (a run's 1.25M names at 10M ops: three dict operations per name before); when
    none is interned yet, the lookups are one ``isdisjoint`` pass and the ids one dict made in order."""
    n = len(seq)
    if n > 1 and seq[0] == seq[-1] and seq.count(seq[0]) == n:
        return np.full(n, interner(seq[0]), I32)
    if interner._unreg:  # lazy runs to register first, item by item
        return np.fromiter(map(_intern_new(interner, seq).__getitem__, seq), I32, n)
    ids, items = interner._ids, interner._items
    if (not items and not ids) or ids.keys().isdisjoint(seq):  # every item is new (a table's first names, or a
        # foreach's second name column): one pass; where the items are distinct, their ids in first-seen order
        base = len(items)
        first = dict(zip(seq, count(base)))
        if len(first) == n:
            ids.update(first)  # into an empty dict: a copy of the table, no second hashing
            items.extend(seq)
            return np.arange(base, base + n, dtype=I32)
    got = np.fromiter(map(ids.get, seq, repeat(-1)), I32, n)
    new = got < 0
    if not new.any():
        return got
    fresh = list(compress(seq, new.tolist()))
    first = dict.fromkeys(fresh)  # the new items in first-seen order
    base = len(items)
    ids.update(zip(first, count(base)))
    items.extend(first)
    got[new] = np.arange(base, base + len(fresh), dtype=I32) if len(first) == len(fresh) else \
        np.fromiter(map(ids.__getitem__, fresh), I32, len(fresh))
    return got


def _intern_codes(interner: _Interner, col: Codes) -> np.ndarray:
    """Ids of every row of ``col`` (int32; -1 for None), interning the new values in the order of their first row:
    what :func:`_intern_all` of the rows' values (the Nones left out) gives, with a lookup per value of the table
    in use, not per row (a ``foreach`` block's names: a string per iteration, its ranks' rows sharing it)."""
    used = col.first_used()
    vals = col.values[used].tolist()
    tab = np.full(len(col.values), -1, I32)
    if None not in vals:  # no None (a name column): every value, as it is
        tab[used] = _intern_all(interner, vals)  # one lookup per value; fresh distinct ones none more
        return tab[col.codes]
    at = [k for k, v in zip(used.tolist(), vals, strict=True) if v is not None]
    if at:
        vals = [v for v in vals if v is not None]
        tab[at] = _intern_all(interner, vals)
    return tab[col.codes]


def _ids_of(interner: _Interner, x: Any) -> np.ndarray:
    """Ids of every item of ``x`` (a sequence, or :class:`~schedsim.coded.Codes`), interning the new ones in
    first-seen order (:func:`_intern_all`, :func:`_intern_codes`)."""
    if isinstance(x, Codes):
        return _intern_codes(interner, x)
    return _intern_all(interner, x.tolist() if isinstance(x, np.ndarray) else list(x))


def intern_list(interner: _Interner, seq: list[Any], distinct: bool = False) -> list[int]:
    """Ids of every item of ``seq`` (a list), interning the new ones in first-seen order: what ``[interner(x) for x
    in seq]`` gives, without a Python call per item. ``distinct``: the caller knows the items differ from each
    other (then, when none is interned yet, they take the next ids in order without a lookup each)."""
    ids = interner._ids
    if distinct and not interner._unreg and ids.keys().isdisjoint(seq):
        items = interner._items
        base = len(items)
        ids.update(zip(seq, count(base)))
        items.extend(seq)
        return list(range(base, base + len(seq)))
    return list(map(_intern_new(interner, seq).__getitem__, seq))


def template_key(p: Op) -> tuple[Any, ...]:
    """What instances of one shared template have in common: every field of ``p`` but its name, dependencies,
    tags and ``spec_index`` (each row carries its own; the template's name the first row that uses it). A
    collective's group is keyed by identity (one :class:`~schedsim.graph.ops.RankGroup` per distinct group in a
    lowering), other values by equality."""
    g = p.group
    return (p.kind, p.rank, p.stream, id(g) if isinstance(g, RankGroup) else g, p.peer, p.root, p.nbytes, p.flops,
            p.dtype, p.m, p.n, p.k, p.batch, p.repeat, p.duration_s, p.direction, p.tag, p.source, p.host_s,
            p.p2p_batch, p.splits, p.graph, p.comm)


class Table:
    """Templates, interned tables and per-instance columns, appended in expansion order.

    Written ops come as *rows* (:meth:`add_rows`: one op entry each, instanced on its ranks, its template shared
    through :meth:`shared_template`) before single instances (:meth:`add_ids` / :meth:`add_one`: the
    pipeline's ops); :meth:`columns` concatenates them.
    """

    def __init__(self) -> None:
        self.templates: list[Op] = []
        self.names = _Interner()
        self.tags = _Interner()
        self.streams = _Interner()
        self.strs = _Interner()  # p2p batch names and message tags
        self.tags(())
        self._shared: dict[tuple[Any, ...], int] = {}
        self._rows: list[tuple[np.ndarray, Any, np.ndarray, np.ndarray, Any, Any, Any]] = []
        # single instances. Per op, C int columns (int32; a value past it is an OverflowError): template, name,
        # stream, peer, batch and message ids, extended by whole arrays where the ops come in runs; rank and tag
        # set as values of *segments* (``_seg``: their lengths; an op of add_ids / add_one a segment of 1, a run
        # of add_run / add_placed one segment); the dependencies as (op, count) where an op has some, and the
        # name ids concatenated. Made arrays at the end (:meth:`_singles`).
        self.o_tmpl, self.o_name = array("i"), array("i")
        self.s_stream, self.s_peer, self.s_batch, self.s_msg = array("i"), array("i"), array("i"), array("i")
        self._seg: list[int] = []
        self.s_rank: list[int] = []
        self.s_tags: list[int] = []
        self._dep_at: list[int] = []  # ops (index among the single instances) with dependencies
        self._dep_n: list[int] = []  # how many each
        self._dep: list[int] = []  # their name ids, concatenated in order
        self._blocks: list[tuple[int, Block]] = []  # (single instances before it, block)
        self._msg_col: list[tuple[int, np.ndarray]] = []  # (first tag id, mask): see mark_msg_tags

    def template(self, proto: Op) -> int:
        """Register ``proto``; returns its id."""
        self.templates.append(proto)
        return len(self.templates) - 1

    def shared_template(self, proto: Op) -> int:
        """The id of the template that written ops equal to ``proto`` share (:func:`template_key`): registered
        on first use, without dependencies (each row carries its own)."""
        key = template_key(proto)
        t = self._shared.get(key)
        if t is None:
            t = self._shared[key] = self.template(replace(proto, deps=()) if proto.deps else proto)
        return t

    def add_rows(self, tmpl: np.ndarray, names: Any, dep_cnt: np.ndarray, deps: Any, ranks: Any, tags: Any,
                 strs: tuple[Any, Any] | None = None) -> None:
        """Written op entries (rows), each instanced on its ranks: ``tmpl`` int32[R] (from
        :meth:`shared_template`), ``names`` (R str, or :class:`~schedsim.coded.Codes` of R), ``dep_cnt``
        int64[R] and ``deps`` (the rows' dependency names, concatenated), ``ranks`` an int (every row on ranks
        0..ranks-1), a list of R int32 arrays, or an int array of R ranks (each row on one rank), ``tags`` (R tag
        sets, each ``tuple(sorted(tags.items()))``, or their Codes); ``strs`` None (the templates' ``p2p_batch``
        and ``tag``) or ``(batch, msg)``, each row's ``p2p_batch`` and message ``tag`` (R str or None each, or
        both :class:`~schedsim.coded.Codes`), whose templates then hold neither."""
        seq = deps.tolist() if isinstance(deps, np.ndarray) else list(deps)
        dep_ids = _intern_all(self.names, seq) if seq else np.zeros(0, I32)
        self._rows.append((np.asarray(tmpl, I32), names, np.asarray(dep_cnt, np.int64), dep_ids, ranks, tags, strs))

    def _row_strs(self) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Per row run of :meth:`add_rows`, its rows' batch and message-tag ids (int32[R] each, -1 none; None for
        a run that left them to its templates), interned in row order, each row's batch before its message,
        as the templates' would be (:meth:`_tmpl_cols`: a written op's template is first used by its row)."""
        out: list[tuple[np.ndarray, np.ndarray] | None] = []
        none = np.array(None, dtype=object)
        for *_x, strs in self._rows:
            if strs is None:
                out.append(None)
                continue
            b, m = strs
            if isinstance(b, Codes) and isinstance(m, Codes):
                if not m.written()[m.codes].any():  # no message tag: the batches alone
                    out.append((_intern_codes(self.strs, b), np.full(len(b), -1, I32)))
                    continue
                b, m = b.array(), m.array()
            b, m = _objects(b), _objects(m)
            R = len(b)
            flat = b
            if bool(np.not_equal(m, none).any()):  # message tags: each row's batch, then its tag
                flat = np.empty(2 * R, object)
                flat[0::2], flat[1::2] = b, m
            have = np.not_equal(flat, none).astype(bool)
            ids = np.full(len(flat), -1, I32)
            ids[have] = _intern_all(self.strs, flat[have].tolist())
            out.append((ids[0::2], ids[1::2]) if len(flat) > R else (ids, np.full(R, -1, I32)))
        return out

    def tag_id(self, tags: tuple) -> int:
        """The id of a tag set, shared by every op that has it."""
        return self.tags(tags)

    def new_tag_id(self, tags: tuple) -> int:
        """A fresh id for a tag set no other op has (a send's or recv's, which names its message): no lookup,
        so the tuple is never hashed."""
        return self.tags.append(tags)

    def name_id(self, name: str) -> int:
        """The id of op name ``name`` (interned)."""
        return self.names(name)

    def add_ids(self, t: int, rank: int, name: int, tags: int, stream: int, deps: tuple[int, ...], peer: int,
                batch: int, msg: int) -> None:
        """One instance of template ``t`` from interned ids (name, tags, stream, dependency names, batch and
        message strings; -1 = none): what the pipeline emitter, which keeps ids, writes."""
        if deps:
            self._dep_at.append(len(self.o_tmpl))
            self._dep_n.append(len(deps))
            self._dep.extend(deps)
        self.o_tmpl.append(t)
        self.o_name.append(name)
        self._seg.append(1)
        self.s_rank.append(rank)
        self.s_tags.append(tags)
        self.s_stream.append(stream)
        self.s_peer.append(peer)
        self.s_batch.append(batch)
        self.s_msg.append(msg)

    def add_run(self, tmpls: Any, rank: int, names: Any, tags: int, stream: int, first: tuple[int, ...]) -> None:
        """``len(tmpls)`` instances in a row, as that many :meth:`add_ids` calls would write them: template
        ``tmpls[i]`` named ``names[i]``, one rank, tag set and stream, no peer, batch or message; the first
        waits for the name ids ``first``, the others for nothing (their stream orders them). ``tmpls``, ``names``:
        sequences of ints (an ``array("i")`` is copied whole, not item by item)."""
        none = _NONE * len(tmpls)
        self.add_placed(tmpls, rank, names, tags, array("i", (stream,)) * len(tmpls), first, (), (), (), none, none,
                        none)

    def add_placed(self, tmpls: Any, rank: int, names: Any, tags: int, streams: Any, first: tuple[int, ...],
                   dep_at: Any, dep_n: Any, dep: Any, peers: Any, batches: Any, msgs: Any) -> None:
        """``len(tmpls)`` instances on one rank with one tag set, as that many :meth:`add_ids` calls would write
        them: op ``i`` of template ``tmpls[i]``, name id ``names[i]``, stream id ``streams[i]``, peer
        ``peers[i]``, batch and message string ids ``batches[i]``, ``msgs[i]`` (-1 none); op 0 waits for the name
        ids ``first``, and ops ``dep_at`` (ascending) for ``dep_n`` name ids each (``dep``, concatenated) too.
        The per-op columns: sequences of ints (an ``array("i")`` is copied whole)."""
        n = len(tmpls)
        if not n:
            return
        base = len(self.o_tmpl)
        at, cnt = self._dep_at, self._dep_n
        if first:
            at.append(base)
            cnt.append(len(first))
            self._dep.extend(first)
            if dep_at and dep_at[0] == 0:  # op 0's own after first's
                cnt[-1] += dep_n[0]
                dep_at, dep_n = dep_at[1:], dep_n[1:]
        if dep_at:  # (a plain run has none)
            at.extend(map(base.__add__, dep_at))
            cnt.extend(dep_n)
        if dep:  # (op 0's own, where dep_at's first was op 0, are here too)
            self._dep.extend(dep)
        self.o_tmpl.extend(tmpls)
        self.o_name.extend(names)
        self._seg.append(n)
        self.s_rank.append(rank)
        self.s_tags.append(tags)
        self.s_stream.extend(streams)
        self.s_peer.extend(peers)
        self.s_batch.extend(batches)
        self.s_msg.extend(msgs)

    def add_one(self, t: int, rank: int, name: str, tags: int, stream: str, deps: tuple[str, ...] = (),
                peer: int = -1, batch: str | None = None, msg: str | None = None) -> None:
        """One instance of template ``t``; ``tags`` is an id from :meth:`tag_id` or :meth:`new_tag_id`."""
        names = self.names
        self.add_ids(t, rank, names(name), tags, self.streams(stream), tuple([names(d) for d in deps]), peer,
                     -1 if batch is None else self.strs(batch), -1 if msg is None else self.strs(msg))

    def mark_msg_tags(self, base: int, mask: np.ndarray) -> None:
        """Tag sets ``base + k`` for ``k`` where ``mask`` (bool) is set carry a ``msg`` equal to the message
        string (the ``msg`` column) of every op that has them: a send's or recv's own tag set, which the
        send/recv pairing then compares through the column (:meth:`msg_in_column`) without reading it."""
        self._msg_col.append((base, np.asarray(mask, bool)))

    def msg_in_column(self, tag_ids: np.ndarray) -> np.ndarray:
        """Per tag id of ``tag_ids``, whether :meth:`mark_msg_tags` marked it (bool array)."""
        out = np.zeros(len(tag_ids), bool)
        t = np.asarray(tag_ids, np.int64)
        for base, mask in self._msg_col:
            k = t - base
            out |= (k >= 0) & (k < len(mask)) & np.take(mask, k, mode="clip")
        return out

    def add_block(self, block: Block) -> None:
        """A run of single instances as columns (:class:`Block`), after those added so far."""
        self._blocks.append((len(self.o_tmpl), block))

    @property
    def o_deps(self) -> list[tuple[int, ...]]:
        """Per single instance (:meth:`add_ids`, :meth:`add_one`, :meth:`add_block`, in order) the name ids
        of its dependencies (built on each call; the tests compare it)."""
        cnt = [0] * len(self.o_tmpl)
        for i, k in zip(self._dep_at, self._dep_n, strict=True):
            cnt[i] = k
        flat = self._dep
        ptr = [0, *accumulate(cnt)]
        mine = [tuple(flat[a:z]) for a, z in zip(ptr[:-1], ptr[1:], strict=True)]
        out: list[tuple[int, ...]] = []
        at = 0
        for pos, b in self._blocks:
            out.extend(mine[at:pos])
            out.extend(b.dep_tuples())
            at = pos
        out.extend(mine[at:])
        return out

    def _tmpl_cols(self) -> dict[str, np.ndarray]:
        """Per template: name, tags, stream, peer, batch and message-tag ids (each interner's new items interned in
        template order, a batch before its message: what interning template by template gives)."""
        ts = self.templates
        name = intern_list(self.names, [o.name for o in ts])
        tag = intern_list(self.tags, [o.tags for o in ts])
        stream = intern_list(self.streams, [o.stream for o in ts])
        peer = [-1 if o.peer is None else o.peer for o in ts]
        both = [x for o in ts for x in (o.p2p_batch, o.tag)]
        have = [k for k, x in enumerate(both) if x is not None]
        sid = [-1] * len(both)
        for k, i in zip(have, intern_list(self.strs, [both[k] for k in have]), strict=True):
            sid[k] = i
        return {k: np.array(v, I32).reshape(-1) for k, v in
                (("name", name), ("tags", tag), ("stream", stream), ("peer", peer), ("batch", sid[0::2]),
                 ("msg", sid[1::2]))}

    def empty(self) -> bool:
        """Whether no op is written yet (no row, instance or block)."""
        return not (self.o_tmpl or self._blocks or self._rows)

    def uniform(self) -> int | None:
        """W when the table holds only rows that each run on ranks 0..W-1 (no single instances): then every
        rank runs the same ops in the same order, and :func:`schedsim.lower.link.link` links one rank's."""
        ws = [r for _t, _n, _c, _d, r, _g, _s in self._rows]
        if self.o_tmpl or self._blocks or not ws or \
                not all(isinstance(w, (int, np.integer)) and w == ws[0] for w in ws):
            return None
        return int(ws[0])

    def columns(self, once: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(cols, dep_op, dep_name)``: the per-instance columns in expansion order, and the declared
        dependencies as (instance, name id) pairs in declared order. With ``once``, each row is instanced once,
        on rank 0 (see :meth:`uniform`)."""
        # interned now, in row order, as the templates' names and tags were (after the pipeline's)
        row_names = [_ids_of(self.names, nm) for _t, nm, _c, _d, _r, _g, _s in self._rows]
        row_tags = [_ids_of(self.tags, tg) for _t, _n, _c, _d, _r, tg, _s in self._rows]
        row_strs = self._row_strs()
        tc = self._tmpl_cols()
        tm_p, rank_p, name_p, tag_p, dop_p, dnm_p = [], [], [], [], [], []
        batch_p: list[np.ndarray] = []
        msg_p: list[np.ndarray] = []
        base = 0
        for (tmpl, _nm, cnt, dep_ids, ranks, _tg, _s), nid, tid, rs in zip(self._rows, row_names, row_tags,
                                                                            row_strs, strict=True):
            R = len(tmpl)
            per: Any = 1  # instances per row: one number for the whole run where it is one (a fast repeat)
            if once:
                rank_p.append(np.zeros(R, I32))
            elif isinstance(ranks, (int, np.integer)):
                per = int(ranks)
                rank_p.append(np.tile(np.arange(ranks, dtype=I32), R))
            elif isinstance(ranks, np.ndarray):
                rank_p.append(ranks.astype(I32, copy=False))
            else:
                per = np.array([len(r) for r in ranks], np.int64)
                rank_p.append(np.concatenate([np.asarray(r, I32) for r in ranks]) if R else np.zeros(0, I32))

            def rep(x: np.ndarray, per: Any = per) -> np.ndarray:
                return x if isinstance(per, int) and per == 1 else np.repeat(x, per)

            tm_p.append(rep(tmpl))
            name_p.append(rep(nid))
            tag_p.append(rep(tid))
            batch_p.append(tc["batch"][tm_p[-1]] if rs is None else rep(rs[0]))
            msg_p.append(tc["msg"][tm_p[-1]] if rs is None else rep(rs[1]))
            n = R * per if isinstance(per, int) else int(per.sum())
            row = rep(np.arange(R))
            icnt = cnt[row]
            tot = int(icnt.sum())
            if tot:
                dptr = np.cumsum(cnt) - cnt
                off = np.arange(tot) - np.repeat(np.cumsum(icnt) - icnt, icnt)
                dop_p.append(base + np.repeat(np.arange(n), icnt))
                dnm_p.append(dep_ids[np.repeat(dptr[row], icnt) + off])
            base += n
        singles = self._singles()
        tm_p.append(singles["tmpl"])
        rank_p.append(singles["rank"])
        tm = _cat(tm_p, I32)
        cols = {"tmpl": tm, "rank": _cat(rank_p, I32)}
        nb = base
        for key in ("name", "tags", "stream", "peer", "batch", "msg"):
            rows = {"name": name_p, "tags": tag_p, "batch": batch_p, "msg": msg_p}.get(key)
            head = np.concatenate(rows) if rows else tc[key][tm[:nb]]
            cols[key] = _cat([head, singles[key]], I32)
        dop_p.append(nb + singles["dep_op"] if nb else singles["dep_op"])
        dnm_p.append(singles["dep_name"])
        return cols, _cat(dop_p, np.int64), _cat(dnm_p, I32)

    def _singles(self) -> dict[str, np.ndarray]:
        """The single instances' columns (``tmpl`` .. ``msg`` int32) and declared dependencies (``dep_op``
        int64, from 0 at the first single instance; ``dep_name`` int32), the blocks spliced in order."""
        n = len(self.o_tmpl)
        lists: dict[str, np.ndarray] = {"tmpl": _ints(self.o_tmpl), "name": _ints(self.o_name)}
        for k in ("stream", "peer", "batch", "msg"):
            lists[k] = _ints(getattr(self, "s_" + k))
        seg = _ints(self._seg) if len(self._seg) != n else None  # None: every segment one op
        for k in ("rank", "tags"):
            v = _ints(getattr(self, "s_" + k))
            lists[k] = v if seg is None else np.repeat(v, seg)
        lists = {k: lists[k] for k in ("tmpl", "rank", "name", "tags", "stream", "peer", "batch", "msg")}
        k_o = np.zeros(n, np.int64)
        k_o[_ints(self._dep_at)] = _ints(self._dep_n)
        flat = _ints(self._dep)
        if not self._blocks:  # no splicing
            out = dict(lists)
            out["dep_op"] = np.repeat(np.arange(len(k_o)), k_o)
            out["dep_name"] = flat
            return out
        ptr = np.concatenate([[0], np.cumsum(k_o)])
        parts: dict[str, list[np.ndarray]] = {k: [] for k in (*lists, "dep_cnt", "dep_name")}
        at = 0
        for pos, b in [*self._blocks, (len(self.o_tmpl), None)]:
            for k, v in lists.items():
                parts[k].append(v[at:pos])
            parts["dep_cnt"].append(k_o[at:pos])
            parts["dep_name"].append(flat[ptr[at]:ptr[pos]])
            if b is not None:
                for k in lists:
                    parts[k].append(getattr(b, k))
                parts["dep_cnt"].append(np.diff(b.dep_ptr))
                parts["dep_name"].append(b.dep_name)
            at = pos
        out = {k: _cat(v, I32) for k, v in parts.items() if k != "dep_cnt"}
        cnt = _cat(parts["dep_cnt"], np.int64)
        out["dep_op"] = np.repeat(np.arange(len(cnt)), cnt)
        return out


def _ints(v: list[int] | array) -> np.ndarray:
    """``v`` (Python ints, or an ``array("i")``: copied, so that the array may grow on) as int32, shape (len(v),),
    writable: a list packed by ``struct`` (``"=<n>i"``: about 120 instructions an item, where ``array("i", v)``
    takes 250 and ``np.fromiter`` 220: both parse each item as a call's argument), into a bytearray; OverflowError
    for a value outside int32, as ``np.array`` raises (``array("i")`` names it, where ``struct`` would raise its
    own error)."""
    if isinstance(v, array) and v.itemsize == 4:
        return np.frombuffer(v, I32).copy() if len(v) else np.zeros(0, I32)
    if not v:
        return np.zeros(0, I32)
    try:
        return np.frombuffer(bytearray(struct.pack(f"={len(v)}i", *v)), I32)
    except struct.error:  # a value outside int32 (or not an int): array("i") raises the error to report
        return np.frombuffer(array("i", v), I32) if I32_C else np.fromiter(v, I32, len(v))


_NONE = array("i", (-1,))  # repeated: a run's column of "none" (-1)


def _cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """``np.concatenate(parts)`` as ``dtype``, without a copy when only one part is not empty (and has it)."""
    full = [x for x in parts if len(x)]
    if len(full) == 1:
        return np.asarray(full[0]).astype(dtype, copy=False).reshape(-1)
    return np.concatenate(parts, dtype=dtype) if parts else np.zeros(0, dtype)


@dataclass(frozen=True)
class Block:
    """A run of N single instances as columns, as the pipeline's columnar emitter writes them.

    ``tmpl``, ``rank``, ``name``, ``tags``, ``stream``, ``peer``, ``batch``, ``msg``: int arrays [N] (ids
    into the table's templates and interners, -1 = none, as :meth:`Table.add_ids` takes them);
    ``dep_ptr`` int64[N + 1] and ``dep_name`` (name ids) the declared dependencies as CSR, in declared order.
    """

    tmpl: np.ndarray
    rank: np.ndarray
    name: np.ndarray
    tags: np.ndarray
    stream: np.ndarray
    peer: np.ndarray
    batch: np.ndarray
    msg: np.ndarray
    dep_ptr: np.ndarray
    dep_name: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.tmpl)
        for f in ("rank", "name", "tags", "stream", "peer", "batch", "msg"):
            if len(getattr(self, f)) != n:
                raise ValueError(f"Block.{f} has {len(getattr(self, f))} entries for {n} ops")
        if len(self.dep_ptr) != n + 1 or int(self.dep_ptr[-1]) != len(self.dep_name):
            raise ValueError("Block.dep_ptr must have N + 1 offsets ending at len(dep_name)")

    def dep_tuples(self) -> list[tuple[int, ...]]:
        """Per op the tuple of its dependency name ids (what :meth:`Table.add_ids` takes)."""
        ptr, nm = self.dep_ptr.tolist(), self.dep_name.tolist()
        return [tuple(nm[a:z]) for a, z in zip(ptr[:-1], ptr[1:], strict=True)]
