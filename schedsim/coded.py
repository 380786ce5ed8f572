"""Coded columns: per-row strings and tag sets as small integer codes into tables of distinct values.

A pipeline of 456,704 ops has as many distinct op names and tag sets, but each is made of a few values that
repeat: a name is ``<label><stage>.`` + ``<mb>`` + ``<suffix>``, a tag set is ``chunk``, ``mb``, ``phase`` or
``msg``, ``pp_op`` and ``stage``. Held as one code column per part (per key), such a column costs N integers
instead of N Python objects, and the timeline file writes it as numbers (``timeline.json`` version 3, see
:mod:`schedsim.sim.timeline`). The strings and dicts are built only when something reads them.

* :class:`Parts`: strings as the concatenation of categorical parts, ``"".join(values_k[codes_k[i]] for k)``.
* :class:`Codes`: N values as codes into a table of values, ``values[codes[i]]``: a ``foreach`` block's names and
  batch names, one string per iteration shared by the rows of that iteration's ranks.
* :class:`TagColumns`: tag sets as one categorical column per key, code -1 where a row lacks the key; a row's
  tag set is ``tuple(sorted((key, values[code]) ...))``, the form the lowering interns.

The pipeline emitter (:mod:`schedsim.lower.pipeline`) hands both over with its lazy runs of names and tag sets
(:meth:`schedsim.lower.table._Interner.reserve`); :func:`coded_of` assembles a Program's per-op columns from
those runs and the other (already made) items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from schedsim.tags import tag_value_key

__all__ = ["Codes", "Parts", "TagColumns", "coded_of", "non_finite"]

I32 = np.int32
#: The JSON scalars a tag value may be (``schedsim.spec.model``: strings, numbers, booleans or null).
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_SET = frozenset(_SCALARS)


def _obj(xs: Sequence[Any]) -> np.ndarray:
    """A 1-d object array of ``xs`` (tuples stay elements)."""
    return np.fromiter(xs, dtype=object, count=len(xs))


def _codes(c: Any, n: int, where: str, lo: int, hi: int) -> np.ndarray:
    """A JSON list of ``n`` integer codes in ``lo .. hi - 1`` as int32.

    Raises
    ------
    ValueError
        Not a flat list of integers, wrong length, or a code outside the range.
    """
    a = np.asarray(c)
    if a.ndim != 1 or (len(a) and a.dtype.kind not in "iu"):
        raise ValueError(f"{where}.codes is not a flat list of integers")
    if len(a) != n:
        raise ValueError(f"{where}.codes has {len(a)} entries, n_ops is {n}")
    if len(a) and (int(a.min()) < lo or int(a.max()) >= hi):
        raise ValueError(f"{where}.codes has codes outside {lo}..{hi - 1}")
    return a.astype(I32)


class Codes:
    """N values as codes into a table of values: row ``i`` holds ``values[codes[i]]``.

    Parameters
    ----------
    codes : int array of shape (N,)
        Each row's index into ``values`` (0 .. len(values) - 1); int32 or int64, maybe a read-only view.
    values : object array of shape (K,)
        The values (strings or None); they may repeat, and some may be used by no row.

    A ``foreach`` block whose ``name: "s{i}"`` is the same on every rank of an entry instanced per rank holds its
    names as the iteration's string, once, and each row's iteration (:mod:`schedsim.spec.block`); the lowering
    interns the strings in use, not a string per row (:func:`schedsim.lower.table._intern_codes`).
    """

    __slots__ = ("codes", "values")

    def __init__(self, codes: np.ndarray, values: np.ndarray) -> None:
        self.codes, self.values = codes, values

    @classmethod
    def of(cls, v: Any, n: int) -> Codes:
        """``n`` rows of ``v``: a value (every row's; a string or None) or an object array of ``n``."""
        if isinstance(v, np.ndarray):
            return cls(np.arange(n, dtype=np.int64), v if v.dtype == object else _obj(v.tolist()))
        one = np.empty(1, object)
        one[0] = v
        return cls(np.zeros(n, np.int64), one)

    @classmethod
    def cat(cls, parts: Sequence[Codes]) -> Codes:
        """The rows of ``parts`` one after the other (their tables joined; one table, once, where every part holds
        that same table: a field two entries of a block evaluate alike, a `rank` ring's batch names ``b{i}``)."""
        if len(parts) == 1:
            return parts[0]
        if parts and all(p.values is parts[0].values for p in parts):
            return cls(np.concatenate([p.codes for p in parts]), parts[0].values)
        off = np.cumsum([0] + [len(p.values) for p in parts[:-1]])
        codes = np.concatenate([p.codes + o for p, o in zip(parts, off.tolist(), strict=True)]) if parts else \
            np.zeros(0, np.int64)
        values = np.concatenate([p.values for p in parts]) if parts else np.zeros(0, object)
        return cls(codes, values)

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, idx: np.ndarray) -> Codes:
        """Rows ``idx`` (an int array), the same table."""
        return Codes(self.codes[idx], self.values)

    def array(self) -> np.ndarray:
        """Every row's value, an object array of N."""
        return self.values[self.codes]

    def tolist(self) -> list[Any]:
        """Every row's value, a list of N."""
        return self.array().tolist()

    def first_used(self) -> np.ndarray:
        """The codes some row holds, each once, in the order of their first row (int64)."""
        R, K = len(self.codes), len(self.values)
        first = np.full(K, R, np.int64)
        np.minimum.at(first, self.codes, np.arange(R, dtype=np.int64))
        used = np.flatnonzero(first < R)
        return used[np.argsort(first[used], kind="stable")]

    def compact(self) -> Codes:
        """The same rows with int32 codes where the table allows, and one code held once (a read-only broadcast
        view, no memory per row) where every row has it: what a block keeps through the lowering."""
        c = self.codes
        if len(c) and int(c.min()) == int(c.max()):
            return Codes(np.broadcast_to(c[:1].astype(I32 if len(self.values) < 2**31 else np.int64), c.shape),
                         self.values)
        return Codes(c.astype(I32, copy=False), self.values) if len(self.values) < 2**31 else self

    def written(self) -> np.ndarray:
        """Per value of the table, whether it is not None (bool)."""
        return np.fromiter((v is not None for v in self.values.tolist()), bool, len(self.values))

    def where(self, other: Codes, mask_of_values: np.ndarray) -> Codes:
        """Per row, this row's value where ``mask_of_values`` (bool, per value of this table) is true for it, else
        ``other``'s row (the same N rows)."""
        pick = mask_of_values[self.codes]
        return Codes(np.where(pick, self.codes, other.codes + len(self.values)),
                     np.concatenate([self.values, other.values]))


class Parts:
    """N strings, each the concatenation of one value per part: ``s[i] = "".join(v[c[i]] for v, c in parts)``.

    Parameters
    ----------
    parts : list of (values, codes)
        ``values`` a list of strings, ``codes`` int array of shape (N,) into it (every part the same N).

    Raises
    ------
    ValueError
        Parts of different lengths.
    """

    __slots__ = ("parts", "n")

    def __init__(self, parts: list[tuple[list[str], np.ndarray]]) -> None:
        self.parts = [(v if isinstance(v, list) else list(v), np.asarray(c)) for v, c in parts]
        lens = {len(c) for _v, c in self.parts}
        if len(lens) > 1:
            raise ValueError(f"Parts: parts of different lengths {sorted(lens)}")
        self.n = lens.pop() if lens else 0

    def __len__(self) -> int:
        return self.n

    def take(self, rows: Any) -> list[str]:
        """The strings of ``rows`` (int indices), in that order."""
        idx = np.asarray(rows, np.int64)
        if not self.parts:
            return [""] * len(idx)
        acc = None
        for v, c in self.parts:
            x = _obj(v)[c[idx]]
            acc = x if acc is None else acc + x
        return acc.tolist()  # type: ignore[union-attr]

    def strings(self) -> list[str]:
        """Every string, in row order."""
        return self.take(np.arange(self.n))

    def reindex(self, idx: np.ndarray) -> Parts:
        """Rows ``idx`` of these (int array), as new Parts."""
        return Parts([(v, c[idx]) for v, c in self.parts])

    @classmethod
    def of_items(cls, items: Sequence[str], codes: np.ndarray) -> Parts:
        """One part: the strings ``items`` and each row's index into them."""
        return cls([(list(items), np.asarray(codes, I32))])

    @staticmethod
    def concat(pieces: list[tuple[np.ndarray, Parts]], n: int) -> Parts:
        """N rows from ``(rows, parts)`` pieces that cover ``0 .. n - 1`` once; a piece with fewer parts adds
        empty strings."""
        if len(pieces) == 1 and len(pieces[0][0]) == n:
            return pieces[0][1]
        K = max((len(p.parts) for _r, p in pieces), default=0)
        out = []
        for k in range(K):
            values: list[str] = []
            codes = np.zeros(n, I32)
            for rows, p in pieces:
                if k < len(p.parts):
                    v, c = p.parts[k]
                    codes[rows] = c + len(values)
                    values.extend(v)
                else:
                    codes[rows] = len(values)
                    values.append("")
            out.append((values, codes))
        return Parts(out)

    def to_json(self) -> dict[str, Any]:
        """``{"parts": [{"values": [...], "codes": [...]}, ...]}`` (codes as numpy arrays)."""
        return {"parts": [{"values": v, "codes": c} for v, c in self.parts]}

    @classmethod
    def from_json(cls, d: Any, n: int | None, where: str) -> Parts:
        """Parts from :meth:`to_json`'s form; ``n`` the rows expected, None to take the first part's (every
        other part must have as many).

        Raises
        ------
        ValueError
            Not that form: no ``parts`` list, a part without string ``values`` or with codes of the wrong
            length or out of range.
        """
        if not isinstance(d, dict) or not isinstance(d.get("parts"), list) or set(d) != {"parts"}:
            raise ValueError(f"{where} is neither a list of strings nor {{\"parts\": [...]}}")
        out = []
        for k, p in enumerate(d["parts"]):
            w = f"{where}.parts[{k}]"
            if not isinstance(p, dict) or not isinstance(p.get("values"), list):
                raise ValueError(f"{w} is not an object with a 'values' list")
            if n is None:
                n = len(p["codes"]) if isinstance(p.get("codes"), list) else -1
            if not all(isinstance(x, str) for x in p["values"]):
                raise ValueError(f"{w}.values holds something other than strings")
            out.append((p["values"], _codes(p.get("codes"), n, w, 0, len(p["values"]))))
        if not out and n:
            raise ValueError(f"{where} has no parts for {n} rows")
        return cls(out)

    def items(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(strings, at)`` for rows ``codes`` (int array, entries ≥ 0): the distinct rows' strings (object
        array) and each entry's index into them; only those strings are made."""
        from schedsim.arrays import unique

        u, _first, inv = unique(np.asarray(codes, np.int64))
        return _obj(self.take(u)), inv


def non_finite(values: Callable[[], Iterable[Any]]) -> float | None:
    """The first NaN or ±inf float among the values ``values()`` iterates, None when there is none: a JSON file
    cannot hold one (Python's reader takes the ``NaN`` and ``Infinity`` tokens) and no tag value is one (the
    schedule language refuses them), so a timeline file with one was edited. The types are collected first by a
    C-level pass; the values are looked at only when a float is among them."""
    if float not in set(map(type, values())):
        return None
    return next((x for x in values() if type(x) is float and not math.isfinite(x)), None)


def _value_key(v: Any) -> tuple[type, Any]:
    """What tells two tag values apart: the type and the value, a float by its text (``1``, ``1.0`` and ``True``
    are equal in Python, and so are ``0.0`` and ``-0.0``): :func:`schedsim.graph.ops.tag_value_key`."""
    return tag_value_key(v)


class TagColumns:
    """N rows of tags as one categorical column per key.

    Parameters
    ----------
    keys : dict
        key -> ``(values, codes)``: the distinct values of that key and, per row, the index of its value or
        -1 when the row has no such key (int array of shape (N,), every key the same N). ``values`` is a list,
        or :class:`Parts` for string values made of parts (a pipeline's ``msg``, ``F<stage>.`` + ``<mb>``):
        then a value's string is made only when a row holding it is read.
    n : int
        Rows (needed when there are no keys).

    A row's tag set is ``tuple(sorted((key, values[code]) for each key with code >= 0))``; its dict has the
    keys in sorted order.

    Raises
    ------
    ValueError
        Columns of different lengths.
    """

    __slots__ = ("keys", "n", "_scalar")

    def __init__(self, keys: Mapping[str, tuple[list[Any] | Parts, np.ndarray]], n: int) -> None:
        self._scalar: bool | None = None
        self.keys = {k: (v if isinstance(v, (list, Parts)) else list(v), np.asarray(c))
                     for k, (v, c) in sorted(keys.items())}
        bad = [k for k, (_v, c) in self.keys.items() if len(c) != n]
        if bad:
            raise ValueError(f"TagColumns: key {bad[0]!r} has {len(self.keys[bad[0]][1])} codes for {n} rows")
        self.n = n

    def __len__(self) -> int:
        return self.n

    def scalar(self) -> bool:
        """Whether every value is a JSON scalar (what :meth:`to_json` needs; checked once)."""
        if self._scalar is None:
            self._scalar = all(isinstance(v, Parts) or set(map(type, v)) <= _SCALAR_SET
                               for v, _c in self.keys.values())
        return self._scalar

    def has(self, key: str) -> np.ndarray:
        """Per row, whether it has ``key`` (bool array)."""
        kc = self.keys.get(key)
        return np.zeros(self.n, bool) if kc is None else kc[1] >= 0

    def _combos(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(first, inverse)``: rows ``idx`` grouped by their combination of codes (one group per distinct tag
        set): the position in ``idx`` of each group's first row, and each row's group."""
        from schedsim.arrays import unique

        key = np.zeros(len(idx), np.int64)
        span = 1  # mixed radix while it fits in 62 bits, then re-coded densely
        for v, c in self.keys.values():
            r = len(v) + 1
            if span * r >= 1 << 62:
                _u, _f, key = unique(key)
                span = int(key.max()) + 1 if len(key) else 1
            key = key * r + (c[idx].astype(np.int64) + 1)
            span *= r
        _u, first, inv = unique(key)
        return first, inv

    def _sets(self, idx: np.ndarray) -> list[tuple[tuple[str, Any], ...]]:
        """The tag sets of rows ``idx``, built per pattern of present keys by zipping the keys' (key, value)
        pairs (no Python loop per row and key)."""
        pairs = [_pairs(k, v, c[idx]) for k, (v, c) in self.keys.items()]
        pattern = np.zeros(len(idx), np.int64)
        for j, (_p, c) in enumerate(pairs):
            pattern |= (c >= 0).astype(np.int64) << j
        out = np.empty(len(idx), object)
        from schedsim.arrays import unique  # not np.unique: it imports numpy.ma

        for pat in unique(pattern)[0].tolist():
            sel = np.flatnonzero(pattern == pat)
            cols = [p[c[sel]].tolist() for j, (p, c) in enumerate(pairs) if pat >> j & 1]
            out[sel] = _obj(list(zip(*cols, strict=True)) if cols else [()] * len(sel))
        return out.tolist()

    def take(self, rows: Any) -> list[tuple[tuple[str, Any], ...]]:
        """The tag sets (sorted ``(key, value)`` tuples) of ``rows``, in that order."""
        idx = np.asarray(rows, np.int64)
        first, inv = self._combos(idx)
        return _obj(self._sets(idx[first]))[inv].tolist()

    def dicts(self, rows: Any = None) -> list[dict[str, Any]]:
        """Per row of ``rows`` (default: all), its tags as a dict, one dict shared by the rows with equal tags
        (treat them as read-only)."""
        idx = np.arange(self.n) if rows is None else np.asarray(rows, np.int64)
        first, inv = self._combos(idx)
        return _obj(list(map(dict, self._sets(idx[first]))))[inv].tolist()

    def reindex(self, idx: np.ndarray) -> TagColumns:
        """Rows ``idx`` of these (int array), as new TagColumns."""
        return TagColumns({k: (v, c[idx]) for k, (v, c) in self.keys.items()}, len(idx))

    @classmethod
    def of_items(cls, sets: Sequence[tuple[tuple[str, Any], ...]], codes: np.ndarray) -> TagColumns:
        """From distinct tag sets (tuples of ``(key, value)`` pairs) and each row's index into them.

        Raises
        ------
        TypeError
            A value that cannot be hashed (a list or dict).
        """
        codes = np.asarray(codes, np.int64)
        per: dict[str, tuple[dict[tuple[type, Any], int], list[Any], np.ndarray]] = {}
        for s, ts in enumerate(sets):
            for k, v in ts:
                if k not in per:
                    per[k] = ({}, [], np.full(len(sets), -1, I32))
                index, values, at = per[k]
                vk = _value_key(v)
                j = index.get(vk)
                if j is None:
                    j = index[vk] = len(values)
                    values.append(v)
                at[s] = j
        return cls({k: (values, at[codes]) for k, (_i, values, at) in per.items()}, len(codes))

    @staticmethod
    def concat(pieces: list[tuple[np.ndarray, TagColumns]], n: int) -> TagColumns:
        """N rows from ``(rows, tags)`` pieces that cover ``0 .. n - 1`` once; equal values of a key (same type)
        share one entry."""
        if len(pieces) == 1 and len(pieces[0][0]) == n:
            return pieces[0][1]
        keys = sorted({k for _r, p in pieces for k in p.keys})
        out: dict[str, tuple[list[Any] | Parts, np.ndarray]] = {}
        for k in keys:
            held = [(rows, p.keys[k]) for rows, p in pieces if k in p.keys]
            if all(isinstance(v, Parts) for _r, (v, _c) in held):  # parts stay parts, one after the other
                off, vals = 0, []
                codes = np.full(n, -1, I32)
                for rows, (v, c) in held:
                    assert isinstance(v, Parts)
                    vals.append((np.arange(off, off + len(v)), v))
                    codes[rows] = np.where(c >= 0, c + off, -1)
                    off += len(v)
                out[k] = (Parts.concat(vals, off), codes)
                continue
            index: dict[tuple[type, Any], int] = {}
            values: list[Any] = []
            codes = np.full(n, -1, I32)
            for rows, p in pieces:
                if k not in p.keys:
                    continue
                v, c = p.keys[k]
                if isinstance(v, Parts):
                    v = v.strings()
                remap = np.full(len(v) + 1, -1, I32)  # code -1 (absent) picks the last entry
                for j, x in enumerate(v):
                    m = index.get(_value_key(x))
                    if m is None:
                        m = index[_value_key(x)] = len(values)
                        values.append(x)
                    remap[j] = m
                codes[rows] = remap[c]
            out[k] = (values, codes)
        return TagColumns(out, n)

    def to_json(self) -> dict[str, Any]:
        """``{"keys": {key: {"values": [...], "codes": [...]}, ...}}`` (codes as numpy arrays, -1 = absent);
        values held as :class:`Parts` are written in their form, ``{"parts": [...]}``."""
        return {"keys": {k: {"values": v.to_json() if isinstance(v, Parts) else v, "codes": c}
                         for k, (v, c) in self.keys.items()}}

    @classmethod
    def from_json(cls, d: Any, n: int, where: str) -> TagColumns:
        """TagColumns from :meth:`to_json`'s form.

        Raises
        ------
        ValueError
            Not that form: ``keys`` not an object, a key without a ``values`` list of JSON scalars (or strings
            as :class:`Parts`, ``{"parts": [...]}``), codes of the wrong length or outside -1 .. len(values) - 1.
        """
        if not isinstance(d, dict) or set(d) != {"keys"} or not isinstance(d["keys"], dict):
            raise ValueError(f"{where} is neither {{\"index\", \"values\"}} nor {{\"keys\": {{...}}}}")
        out = {}
        for k, e in d["keys"].items():
            w = f"{where}.keys[{k!r}]"
            if isinstance(e, dict) and isinstance(e.get("values"), dict):  # string values as parts
                vp = Parts.from_json(e["values"], None, f"{w}.values")
                out[k] = (vp, _codes(e.get("codes"), n, w, -1, len(vp)))
                continue
            if not isinstance(e, dict) or not isinstance(e.get("values"), list):
                raise ValueError(f"{w} is not an object with a 'values' list or parts")
            if not set(map(type, e["values"])) <= _SCALAR_SET:
                raise ValueError(f"{w}.values holds a list or object; tag values are strings, numbers, booleans "
                                 "or null")
            bad = non_finite(e["values"].__iter__)
            if bad is not None:
                raise ValueError(f"{w}.values holds {bad}, which is not JSON; tag values are finite numbers")
            out[k] = (e["values"], _codes(e.get("codes"), n, w, -1, len(e["values"])))
        return cls(out, n)


def _pairs(key: str, values: list[Any] | Parts, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs, at)``: ``(key, value)`` tuples (object array) and per row the index of its pair, -1 where the
    row lacks the key (``codes``, int array). From :class:`Parts` values only the rows' values are made."""
    if not isinstance(values, Parts):
        return _obj([(key, x) for x in values]), codes
    has = codes >= 0
    strs, inv = values.items(codes[has])
    at = np.full(len(codes), -1, np.int64)
    at[has] = inv
    return _obj([(key, x) for x in strs.tolist()]), at


def coded_of(table: Any, ids: np.ndarray, cls: Any) -> Any:
    """The per-row :class:`Parts` or :class:`TagColumns` (``cls``) of items ``table[ids[i]]``.

    ``table`` is a tuple of items or the lowering's interner (:class:`schedsim.lower.table._Interner`): rows
    whose id falls in a lazy run the interner holds columns of (``cls`` instances) take them from there, no
    item made (the run's own columns, not a copy, when row i is its row i); the others read their items
    (``take``, one per distinct id) into one more piece.
    """
    ids = np.asarray(ids)
    if ids.dtype not in (np.int32, np.int64):
        ids = ids.astype(np.int64)
    n = len(ids)
    runs = table.column_runs() if hasattr(table, "column_runs") else []
    pieces: list[tuple[np.ndarray, Any]] = []
    left = None  # the rows no run's columns hold (None: every row)
    for base, size, cols in runs:
        if not isinstance(cols, cls):
            continue
        if size == n and not pieces and bool((ids == np.arange(base, base + n)).all()):
            return cols  # row i is the run's row i (a pipeline's names and tags): its columns as they are
        sel = (ids >= base) & (ids < base + size)
        if left is not None:
            sel &= left
        if sel.any():
            rows = np.flatnonzero(sel)
            pieces.append((rows, cols.reindex(ids[rows].astype(np.int64) - base)))
            if left is None:
                left = np.ones(n, bool)
            left[rows] = False
    if left is None or left.any() or not n:
        rows = np.flatnonzero(left) if left is not None else ids[:0]  # every row: no index array of n made
        u, inv = _ids_unique(ids if left is None else ids[rows])
        items = table.take(u.tolist()) if hasattr(table, "column_runs") else [table[i] for i in u.tolist()]
        if left is None:  # one piece of every row: its columns as they are (concat's own shortcut)
            return cls.of_items(items, inv)
        pieces.append((rows, cls.of_items(items, inv)))
    return cls.concat(pieces, n)


def _ids_unique(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, inverse)`` of non-negative integer ids, as :func:`schedsim.arrays.unique` gives them (values
    ascending, int64): by a table of the ids in use when their range is at most about the rows' number (an
    interner's ids), with no sort; else by that sort."""
    from schedsim.arrays import unique

    if len(ids) and ids.ndim == 1 and ids.strides == (0,):  # one id on every row (a column of one value, a read-only
        # broadcast: every op without tags): the same values and inverse, the inverse a broadcast of 0 (no row array)
        return np.asarray(ids[:1], np.int64), np.broadcast_to(np.zeros(1, np.int64), ids.shape)
    top = int(ids.max()) + 1 if len(ids) else 0
    if len(ids) and int(ids.min()) >= 0 and top <= 4 * len(ids) + 64:
        seen = np.zeros(top, bool)
        seen[ids] = True
        u = np.flatnonzero(seen)
        code = np.zeros(top, np.int64)
        code[u] = np.arange(len(u))
        return u, code[ids]
    u, _first, inv = unique(np.asarray(ids, np.int64))
    return u, inv
