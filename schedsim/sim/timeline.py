"""The Timeline: what ran where and when. One format for predict, execute and import.

A Timeline is backed by columns (:class:`SpanColumns`: numpy arrays of times, sizes and ranks,
dictionary-encoded stream/kind/resource); the :class:`Span` rows of :attr:`Timeline.spans` are built
only when something asks for them, so a million-op timeline costs tens of bytes per op, not hundreds.

JSON: ``timeline.json`` (``format: schedsim.timeline``) has two layouts, columns (versions 2 and 3) and
rows (version 1), and :meth:`Timeline.read_json` reads all three versions.

The layouts, field by field, and what the reader refuses are described in :mod:`schedsim.sim.timeline_json`,
which holds the JSON reading and writing.

Times are seconds from the start of the iteration (the earliest op start is 0
for measured timelines). ``solo_s`` is the op's uncontended duration
(predicted) and ``ready_s`` when its dependencies were met (null when unknown).
Where both are known, the breakdown says where the op's time went: ``wait_s``
(ready until start: waiting for the peers of a rendezvous), ``work_s`` (the
solo duration) and ``contention_s`` (the extra time from sharing the GPU or a
link with concurrent ops).

The columns are serialised with orjson (numpy arrays natively, one column at a time so the file is
never held as one string); without orjson the standard ``json`` module writes the same document.
link with concurrent ops). ``stream_s`` (predicted by the ``waves`` model, else
absent) is when the op's stream reached it: its dependencies done and the host at
the start of the op's call, which is when a CUDA event recorded just before the
call fires (what ``schedsim execute`` measures as an op's start).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from schedsim.errors import TraceError
from schedsim.io import atomic_write_bytes, atomic_write_text, atomic_writer, dumps_json, loads_json  # re-exported
from schedsim.outdir import output_set  # re-exported
from schedsim.sim import timeline_json
from schedsim.sim.path_ids import PathIds
from schedsim.sim.timeline_json import (
    _BASES,
    _FLOAT_COLS,
    ID_FORMAT,
    NameTable,
    _basable,
    _based,
    _big_ints_kept,
    _check_meta,
    _coded_json,
    _join_ids,
    _json_floats,
    _json_ids,
    _json_pieces,
    _json_tags,
    _load_doc,
    _MemoryJson,
    _RawPieces,
    _row_default,
    _strs,
)

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from schedsim.coded import Parts, TagColumns
    from schedsim.graph.info import PipelineInfo
    from schedsim.lower.program import OpNames, Program

__all__ = ["Timeline", "Span", "SpanColumns", "atomic_writer", "atomic_write_text", "atomic_write_bytes",
           "output_set", "dumps_json", "loads_json"]

FORMAT = "schedsim.timeline"


class Span(NamedTuple):
    """One op's interval on one rank and stream. Times in seconds.

    A NamedTuple: cheap to create by the million, immutable, positional or by keyword.
    """

    id: str
    name: str
    rank: int
    stream: str
    kind: str
    resource: str
    start_s: float
    end_s: float
    solo_s: float | None = None
    ready_s: float | None = None
    bytes: float = 0.0
    flops: float = 0.0
    tags: dict[str, Any] = {}  # noqa: RUF012 - never mutated in place
    stream_s: float | None = None  # when the stream reached the op (an event recorded before its call fires)

    @property
    def duration_s(self) -> float:
        """end_s − start_s, in seconds."""
        return self.end_s - self.start_s


#: A dictionary-encoded string column: (distinct values in order of first use, int32 codes of shape (n,)).
Categorical = tuple[list[str], "NDArray[np.int32]"]

#: How :meth:`SpanColumns.json_items` writes the columns: ``(names, tags, based)`` (:meth:`SpanColumns._json_forms`).
JsonForms = tuple[str, str, dict[str, str | None]]

#: Above this many spans :attr:`Timeline.makespan_s` builds the columns (one numpy max/min) rather than
#: walking the rows twice.
_COLUMNS_FOR_MAKESPAN = 50_000
_CAT_COLS = ("stream", "kind", "resource")


def _encode(values: Sequence[str], n: int) -> Categorical:
    import numpy as np

    cats = list(dict.fromkeys(values))
    if len(cats) <= 1:
        return cats, np.zeros(n, dtype=np.int32)
    index = {c: i for i, c in enumerate(cats)}
    return cats, np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=n)


def _decode(cat: Categorical) -> list[str]:
    cats, codes = cat
    if len(cats) == 1:
        return [cats[0]] * len(codes)
    return list(map(cats.__getitem__, codes.tolist()))


def _optional(a: np.ndarray) -> list[float | None]:
    """A float column as a list with None where the array holds NaN (unknown)."""
    import numpy as np

    out = a.tolist()
    if np.isnan(a).any():
        out = [None if x != x else x for x in out]
    return out


class SpanColumns:
    """The spans of a timeline as columns; row ``i`` of every column is one op.

    Attributes
    ----------
    id, name : list[str]
        Op id (``name@rN``; ``name#k@rN`` for repeated imported ranges) and op name. The constructor also
        takes a function that returns the list: then it is built on first access (a million ids cost ~0.1 s,
        which a run that writes no timeline never pays).
    rank : numpy.ndarray
        int64, shape (n,).
    stream, kind, resource : Categorical
        ``(values, codes)``: distinct strings in order of first use and int32 codes of shape (n,).
    start_s, end_s, solo_s, ready_s : numpy.ndarray
        float64 seconds, shape (n,); NaN in ``solo_s`` / ``ready_s`` means unknown (None in a Span).
    bytes, flops : numpy.ndarray
        float64 bytes moved and floating-point operations, shape (n,). The constructor also takes a function
        that returns the array: then it is made on first access (the simulator's, from each op's template: at 1M
        ops two arrays of 8 MB that the metrics, made before the outputs, do not read).
    tags : list[dict]
        Per row; an empty dict when the op has none.
    stream_s : numpy.ndarray or None
        float64 seconds, shape (n,): when the op's stream reached it (NaN: unknown); None when no op has it.

    ``coded_tags`` (constructor, instead of ``tags``): ``(tag_sets, tags_id)``, distinct tag sets as tuples of
    ``(key, value)`` pairs and each row's index into them, or a :class:`~schedsim.coded.TagColumns` (one coded
    column per key), or a function returning one (called when first needed); ``tags`` is then built on first
    access. The file gets the dicts of the rows that have tags (version 2) from the tuple form, the per-key
    columns (version 3) from the others when every value is a JSON scalar.

    ``coded_ids`` (constructor, optional): ``(names, name_id)``, a table of distinct names (a sequence, or the
    lowering's interner, whose lazy names are made only when read) and each row's index into it, such that
    ``name[i] == names[name_id[i]]`` and ``id[i] == f"{name[i]}@r{rank[i]}"`` (what the simulator has);
    :meth:`Timeline.write_json` then writes both columns from the table without building the per-row strings.

    ``name_parts`` (constructor, optional): the names as :class:`~schedsim.coded.Parts` (or a function returning
    them or None), with ``id[i] == f"{name[i]}@r{rank[i]}"``: where the names are not shared by rows (a
    pipeline's), the file gets the parts' codes (version 3) and no per-row string is made.

    Raises
    ------
    ValueError
        (constructor) when the columns differ in length.
    """

    __slots__ = ("_id", "_name", "_coded", "_tags", "_coded_tags", "_keyed", "_parts", "rank", "stream", "kind",
                 "resource", "start_s", "end_s", "solo_s", "ready_s", "_bytes", "_flops", "stream_s")

    def __init__(self, id: list[str] | Callable[[], list[str]], name: list[str] | Callable[[], list[str]],
                 rank: NDArray[np.int64], stream: Categorical, kind: Categorical, resource: Categorical,
                 start_s: NDArray[np.float64], end_s: NDArray[np.float64], solo_s: NDArray[np.float64],
                 ready_s: NDArray[np.float64], bytes: NDArray[np.float64] | Callable[[], NDArray[np.float64]],
                 flops: NDArray[np.float64] | Callable[[], NDArray[np.float64]],
                 tags: list[dict[str, Any]] | None, stream_s: NDArray[np.float64] | None = None, *,
                 coded_ids: tuple[NameTable, np.ndarray] | None = None,
                 coded_tags: tuple[Sequence[tuple[tuple[str, Any], ...]], np.ndarray] | TagColumns
                 | Callable[[], TagColumns] | None = None,
                 name_parts: Parts | Callable[[], Parts | None] | None = None) -> None:
        self._id, self._name, self.rank = id, name, rank
        self._coded, self._coded_tags, self._parts = coded_ids, coded_tags, name_parts
        self._keyed = coded_tags is not None and not isinstance(coded_tags, tuple)  # written as a column per key
        if tags is None and coded_tags is None:
            raise ValueError("SpanColumns: give tags or coded_tags")
        self.stream, self.kind, self.resource = stream, kind, resource
        self.start_s, self.end_s, self.solo_s, self.ready_s = start_s, end_s, solo_s, ready_s
        self._bytes, self._flops, self._tags, self.stream_s = bytes, flops, tags, stream_s
        n = len(rank)
        lens = {**({} if callable(id) else {"id": len(id)}), **({} if callable(name) else {"name": len(name)}),
                "stream": len(stream[1]), "kind": len(kind[1]), "resource": len(resource[1]),
                "start_s": len(start_s), "end_s": len(end_s), "solo_s": len(solo_s), "ready_s": len(ready_s),
                **({} if callable(bytes) else {"bytes": len(bytes)}),
                **({} if callable(flops) else {"flops": len(flops)}),
                **({} if tags is None else {"tags": len(tags)}),
                **({} if stream_s is None else {"stream_s": len(stream_s)})}
        bad = {k: v for k, v in lens.items() if v != n}
        if bad:
            raise ValueError(f"span columns differ in length: rank has {n}, " +
                             ", ".join(f"{k} has {v}" for k, v in bad.items()))

    def __getstate__(self) -> dict[str, Any]:
        """Pickling (and copying) builds the columns still held as functions first: a function may not pickle
        (nor the lowering's interner of names, kept as a tuple)."""
        self.id, self.name, self.tags, self.bytes, self.flops  # noqa: B018 - properties that build and keep them
        state = {k: getattr(self, k) for k in self.__slots__}
        state["_coded_tags"], state["_parts"] = self._tag_columns(), self._name_parts()
        if self._coded is not None and not isinstance(self._coded[0], (tuple, list)):
            state["_coded"] = (tuple(self._coded[0]), self._coded[1])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    @property
    def bytes(self) -> NDArray[np.float64]:
        """Bytes moved per row (made on first access when the constructor got a function)."""
        if callable(self._bytes):
            self._bytes = self._bytes()
        return self._bytes

    @bytes.setter
    def bytes(self, v: NDArray[np.float64]) -> None:
        self._bytes = v

    @property
    def flops(self) -> NDArray[np.float64]:
        """Floating-point operations per row (made on first access when the constructor got a function)."""
        if callable(self._flops):
            self._flops = self._flops()
        return self._flops

    @flops.setter
    def flops(self, v: NDArray[np.float64]) -> None:
        self._flops = v

    @property
    def id(self) -> list[str]:
        """Op ids (built on first access when the constructor got a function)."""
        if callable(self._id):
            self._id = self._id()
        return self._id

    @property
    def tags(self) -> list[dict[str, Any]]:
        """Per row, its tags (an empty dict when none); from ``coded_tags`` on first access, one dict per
        distinct tag set, shared by its rows."""
        if self._tags is None:
            self._tags = self._coded_tag_columns().dicts()
        return self._tags

    def tags_of(self, rows: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The tags of ``rows`` (ints), in that order, as :attr:`tags` gives them (treat them as read-only),
        built for those rows only while the per-row dicts are not made: a chart of a few lanes of a 214k-op run
        reads its lanes' tags, not every row's."""
        if self._tags is None:
            return self._coded_tag_columns().dicts(rows)
        tags = self._tags
        return [tags[i] for i in rows]

    def _tag_columns(self) -> TagColumns | None:
        """The coded tags as :class:`~schedsim.coded.TagColumns` (made from the constructor's form on first
        call and kept); None when the tags came as dicts."""
        from schedsim.coded import TagColumns

        ct = self._coded_tags
        if ct is None or isinstance(ct, TagColumns):
            return ct
        if isinstance(ct, tuple):
            ct = TagColumns.of_items(*ct)
        else:
            ct = ct()
        self._coded_tags = ct
        return ct

    def _coded_tag_columns(self) -> TagColumns:
        """:meth:`_tag_columns` where the tags are coded (the per-row dicts not built: the constructor got
        ``coded_tags``, as it gets ``tags`` or it)."""
        tc = self._tag_columns()
        assert tc is not None, "SpanColumns: no tags and no coded tags"
        return tc

    def _name_parts(self) -> Parts | None:
        """The names as :class:`~schedsim.coded.Parts` when the constructor gave them (made and kept)."""
        if callable(self._parts):
            self._parts = self._parts()
        return self._parts

    @property
    def name(self) -> list[str]:
        """Op names (built on first access when the constructor got a function)."""
        if callable(self._name):
            self._name = self._name()
        return self._name

    def __len__(self) -> int:
        return len(self.rank)

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> SpanColumns:
        """Transpose Span rows into columns (one pass per column; None → NaN)."""
        import numpy as np

        n = len(spans)
        if n == 0:
            f = np.zeros(0)
            return cls([], [], np.zeros(0, dtype=np.int64), ([], np.zeros(0, np.int32)), ([], np.zeros(0, np.int32)),
                       ([], np.zeros(0, np.int32)), f, f.copy(), f.copy(), f.copy(), f.copy(), f.copy(), [])
        ids, names, ranks, streams, kinds, res, st, en, solo, ready, by, fl, tags, ss = zip(*spans, strict=True)

        def floats(col: tuple[float | None, ...]) -> NDArray[np.float64]:
            try:
                return np.fromiter(col, dtype=np.float64, count=n)
            except TypeError:  # None (unknown) among the values
                return np.array(col, dtype=np.float64)

        return cls(list(ids), list(names), np.fromiter(ranks, dtype=np.int64, count=n), _encode(streams, n),
                   _encode(kinds, n), _encode(res, n), floats(st), floats(en), floats(solo), floats(ready),
                   floats(by), floats(fl), list(tags),
                   None if all(x is None for x in ss) else floats(ss))

    def ids_at(self, rows: list[int]) -> list[str]:
        """Op ids (``name@rN``) of ``rows`` only; a still-coded id column is not built."""
        if callable(self._id) and self._coded is not None:
            names, name_id = self._coded
            nid = name_id[rows].tolist() if len(rows) else []
            take = getattr(names, "take", None)  # the lowering's interner: a few lazy names made from codes
            nm = list(take(nid)) if take is not None else [names[k] for k in nid]
            return [f"{x}@r{r}" for x, r in zip(nm, self.rank[rows].tolist(), strict=True)]
        ids = self.id
        return [ids[i] for i in rows]

    def tagged(self, rows: np.ndarray, key: str) -> tuple[list[int], list[dict[str, Any]]]:
        """Of ``rows`` (int array), those whose tags hold ``key``, with their tag dicts; from the coded tag sets
        when the per-row dicts are not built (one dict per distinct set)."""
        import numpy as np

        if self._tags is None and self._coded_tags is not None:
            tc = self._coded_tag_columns()
            rows = np.asarray(rows, np.int64)
            rows = rows[tc.has(key)[rows]]
            return rows.tolist(), tc.dicts(rows)
        tags = self.tags
        out = [i for i in rows.tolist() if tags[i] and key in tags[i]]
        return out, [tags[i] for i in out]

    def tagged_rows(self) -> list[int]:
        """The rows whose tags are not empty, ascending; from the coded tags (a row has one where any key's code is
        not -1) when the per-row dicts are not built."""
        import numpy as np

        if self._tags is None and self._coded_tags is not None:
            tc = self._coded_tag_columns()
            some = np.zeros(tc.n, bool)
            for _values, codes in tc.keys.values():
                some |= codes >= 0
            return np.flatnonzero(some).tolist()
        return [i for i, t in enumerate(self.tags) if t]

    def tag_column(self, key: str) -> tuple[list[Any], np.ndarray]:
        """The tag ``key`` as a categorical column: ``(values, codes)``, row ``i`` holding ``values[codes[i]]``,
        or no such tag when ``codes[i]`` is -1 (int array of shape (N,)). From the coded tags without building
        the per-row dicts; from the dicts (one pass) when the tags came as dicts. Equal values of different
        types (``1`` and ``1.0``) stay distinct values."""
        import numpy as np

        from schedsim.coded import Parts

        tc = self._tag_columns() if self._tags is None else None
        if tc is not None:
            vc = tc.keys.get(key)
            if vc is None:
                return [], np.full(len(self), -1, np.int64)
            values, codes = vc
            return (values.strings() if isinstance(values, Parts) else values), codes
        index: dict[tuple[type, Any], int] = {}
        values = []
        codes = np.full(len(self), -1, np.int64)
        for i, t in enumerate(self.tags):
            if t and key in t:
                v = t[key]
                k = (type(v), v if v.__hash__ is not None else repr(v))
                if k not in index:
                    index[k] = len(values)
                    values.append(v)
                codes[i] = index[k]
        return values, codes

    def named_by(self, name_id: np.ndarray) -> bool:
        """Whether the rows are coded by this very name-id column (a Program's ``name_id``: the timeline was
        simulated from that Program, so row ``i`` is its op ``i``)."""
        return self._coded is not None and self._coded[1] is name_id

    def rows(self, rows: list[int]) -> list[Span]:
        """The Span rows ``rows`` (indices) only, as :meth:`to_spans` builds them."""
        import numpy as np

        c, idx = self, np.asarray(rows, np.int64)

        def pick(col: Categorical) -> list[str]:
            return [col[0][k] for k in col[1][idx].tolist()]

        ids, names, tags = c.id, c.name, c.tags
        return list(map(Span, [ids[i] for i in rows], [names[i] for i in rows], c.rank[idx].tolist(),
                        pick(c.stream), pick(c.kind), pick(c.resource), c.start_s[idx].tolist(),
                        c.end_s[idx].tolist(), _optional(c.solo_s[idx]), _optional(c.ready_s[idx]),
                        c.bytes[idx].tolist(), c.flops[idx].tolist(), [tags[i] for i in rows],
                        [None] * len(rows) if c.stream_s is None else _optional(c.stream_s[idx])))

    def to_spans(self) -> list[Span]:
        """Span rows, built in one pass (NaN → None for solo/ready)."""
        return list(map(Span, self.id, self.name, self.rank.tolist(), _decode(self.stream), _decode(self.kind),
                        _decode(self.resource), self.start_s.tolist(), self.end_s.tolist(), _optional(self.solo_s),
                        _optional(self.ready_s), self.bytes.tolist(), self.flops.tolist(), self.tags,
                        [None] * len(self.id) if self.stream_s is None else _optional(self.stream_s)))

    # -- JSON ---------------------------------------------------------------
    def _json_forms(self) -> JsonForms:
        """How :meth:`json_items` writes the names, the tags and the float columns: ``("shared" | "parts" |
        "lists", "keys" | "index", based)``, ``based`` the float columns written as a base and the rows that
        differ from it (module docstring): name -> its base (a column's name, or None: its first value). Only
        which columns: :meth:`json_items` makes each one's index and values as it yields it."""
        names = "lists"  # both coded forms hold id[i] == f"{name[i]}@r{rank[i]}" (the constructor's contract)
        if self._coded is not None and 4 * len(self._coded[0]) <= len(self.rank):
            names = "shared"  # names shared by rows: the table once, rows joined from it
        elif self._name_parts() is not None:
            names = "parts"
        keyed = self._keyed and self._coded_tag_columns().scalar()
        based = {}
        if names == "parts" or keyed:  # a version-3 document: its float columns may be based too
            for c, base in _BASES.items():
                if _basable(getattr(self, c), None if base is None else getattr(self, base)):
                    based[c] = base
        return names, "keys" if keyed else "index", based

    def json_version(self, forms: JsonForms | None = None) -> int:
        """The ``version`` of the document :meth:`json_items` makes: 3 when the names or tags are coded
        (module docstring), else 2. ``forms``: :meth:`_json_forms`' result, when already made."""
        forms = forms or self._json_forms()
        return 3 if forms[0] == "parts" or forms[1] == "keys" else 2

    def json_items(self, forms: JsonForms | None = None) -> Iterator[tuple[str, Any]]:
        """(key, JSON-ready value) per column, numpy arrays left as arrays (see :func:`dumps_json`).
        ``forms``: :meth:`_json_forms`' result, when already made."""
        names, tags, based = forms or self._json_forms()
        coded = self._coded  # "shared" only with the ids coded (_json_forms)
        if names == "shared" and tags == "keys":
            # a version-3 document anyway (its tags coded): the ids as their format and the names as one part
            # (the table once, a code per row), not two lists of a million strings (22 of a 1M-op file's 100 MB)
            assert coded is not None
            yield "id", {"format": ID_FORMAT}
            yield "name", {"parts": [{"values": list(coded[0]), "codes": coded[1]}]}
        elif names == "shared":
            assert coded is not None
            ids, nms = _coded_json(coded[0], coded[1], self.rank)
            yield "id", ids
            yield "name", nms
        elif names == "parts":
            yield "id", {"format": ID_FORMAT}
            parts = self._name_parts()
            assert parts is not None  # _json_forms: "parts" only with them
            yield "name", parts.to_json()
        else:
            yield "id", self.id
            yield "name", self.name
        yield "rank", self.rank
        for c in _CAT_COLS:
            cats, codes = getattr(self, c)
            yield c, {"values": cats, "codes": codes}
        def column(c: str) -> object:  # its based form made here, when written: one at a time
            if c not in based:
                return getattr(self, c)
            base = based[c]
            return _based(getattr(self, c), base, None if base is None else getattr(self, base))

        for c in _FLOAT_COLS:
            yield c, column(c)
        if self.stream_s is not None:
            yield "stream_s", column("stream_s")
        if tags == "keys":  # one coded column per key: no dict per row
            yield "tags", self._coded_tag_columns().to_json()
            return
        if self._tags is None:  # coded: the dicts of the rows with tags only
            import numpy as np

            tc = self._coded_tag_columns()
            some = np.zeros(len(self.rank), bool)
            for key in tc.keys:
                some |= tc.has(key)
            at = np.flatnonzero(some)
            yield "tags", {"index": at, "values": tc.dicts(at)}
            return
        tl = self.tags
        idx = list(compress(range(len(tl)), tl))
        yield "tags", {"index": idx, "values": [tl[i] for i in idx]}

    @classmethod
    def from_json(cls, d: dict[str, Any], n: int | None, where: str) -> SpanColumns:
        """Columns from the ``columns`` object of a version-2 or version-3 timeline (module docstring: ids,
        names and tags as lists or coded). ``d`` is taken over: each column's entry is removed once read, so
        its parsed list can be freed (the caller passes a copy of the document's object).

        Raises
        ------
        TraceError
            A column is missing, has the wrong type or length, or a code is out of range.
        """
        from functools import cache

        import numpy as np

        def col(key: str) -> Any:
            if key not in d:
                raise TraceError(f"{where}: columns: no {key!r} column", fix="re-run the command that wrote it")
            return d[key]

        try:
            n, ids, parts = _json_ids(col("id"), col("name"), n, col("rank"))
            d.pop("id")

            def num(key: str, kind: str, raw: Any = None) -> Any:
                """A 1-D column of numbers (``kind`` "i": integers, "f": floats, None allowed as NaN); no
                strings, booleans, nesting or fractions where integers belong."""
                a = np.asarray(col(key) if raw is None else raw)
                if a.ndim != 1:
                    raise ValueError(f"{key!r} is not a flat list")
                if a.dtype.kind == "O":  # None (NaN) among numbers, or mixed types
                    if kind == "i" or any(isinstance(x, (str, bool, list, dict)) for x in a):
                        raise ValueError(f"{key!r} holds something other than numbers")
                    return a.astype(np.float64)
                if a.dtype.kind not in ("iu" if kind == "i" else "iuf") and len(a):
                    raise ValueError(f"{key!r} holds {a.dtype.name} values, not "
                                     + ("integers" if kind == "i" else "numbers"))
                return a.astype(np.int64 if kind == "i" else np.float64, copy=False)

            cats = {}
            for c in _CAT_COLS:
                v = col(c)
                values, codes = [str(x) for x in v["values"]], num(c + ".codes", "i", v["codes"]).astype(np.int32)
                if len(codes) and (codes.min() < 0 or codes.max() >= len(values)):
                    raise ValueError(f"{c!r} has codes outside 0..{len(values) - 1}")
                cats[c] = (values, codes)
                del d[c], v
            floats = _json_floats(d, n, num)
            for c, a in floats.items():  # Infinity (Python's json reads the token; no writer makes it) nowhere,
                # NaN (null: unknown) only in the optional times, negatives not in bytes and FLOPs: the row
                # layout's checks (trace.validate); start/end are checked with their order (_check_columns)
                bad = ~((a >= 0) & (a < np.inf)) if c in ("bytes", "flops") else np.isinf(a)
                if bad.any():
                    i = int(np.argmax(bad))
                    raise ValueError(f"{c!r} holds a negative or non-finite value (row {i})" if c in ("bytes", "flops")
                                     else f"{c!r} holds {float(a[i])!r} (row {i}), not a finite number of seconds "
                                     "(null: unknown)")
            tags, coded = _json_tags(d.get("tags") or {"index": [], "values": []}, n)
            ranks = num("rank", "i")
            del d["rank"]
            ws = d.get("__world_size__")
            if len(ranks) and ws is not None and (ranks.min() < 0 or ranks.max() >= ws):
                raise ValueError(f"'rank' holds {int(ranks.min() if ranks.min() < 0 else ranks.max())}, outside "
                                 f"0..{ws - 1} (world_size {ws})")
            names: Any = cache(parts.strings) if parts is not None else _strs(d.pop("name"))
            return cls(ids if ids is not None else lambda: _join_ids(names() if callable(names) else names, ranks),
                       names, ranks,
                       cats["stream"], cats["kind"], cats["resource"], floats["start_s"], floats["end_s"],
                       floats["solo_s"], floats["ready_s"], floats["bytes"], floats["flops"], tags,
                       floats.get("stream_s"),
                       coded_tags=coded, name_parts=parts if ids is None else None)
        except TraceError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as e:
            raise TraceError(f"{where}: malformed columns ({e.__class__.__name__}: {e})\n"
                             "  fix: re-run the command that wrote it") from None


def _check_columns(c: SpanColumns, where: str) -> None:
    """Refuse columns with a non-finite start or end, ``end_s < start_s`` or two ops with one id.

    Raises
    ------
    TraceError
        Naming the file, the op and the fix.
    """
    import numpy as np

    fix = "the file is corrupt or was edited; re-run the command that wrote it"
    bad = ~(np.isfinite(c.start_s) & np.isfinite(c.end_s))
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(f"{where}: op {i} ({c.id[i]!r}): start_s/end_s is not a finite number of seconds", fix=fix)
    back = c.end_s < c.start_s
    if back.any():
        i = int(np.argmax(back))
        raise TraceError(f"{where}: op {i} ({c.id[i]!r}): end_s {float(c.end_s[i])!r} is before start_s "
                         f"{float(c.start_s[i])!r}", fix=fix)
    if not _ids_distinct(c) and len(set(c.id)) != len(c.id):
        seen: set[str] = set()
        dup = next(x for x in c.id if x in seen or seen.add(x))  # type: ignore[func-returns-value]
        raise TraceError(f"{where}: two ops share the id {dup!r}", fix=fix)


def _ids_distinct(c: SpanColumns) -> bool:
    """Whether ``c``'s ids are shown distinct by numbers, not a set of strings. Ids derived as
    ``f"{name}@r{rank}"`` (one id per (name, rank) pair: the rank is the digits after the last ``@r``) from
    names coded as one part of distinct values: distinct (code, rank) pairs, without making the ids. Otherwise
    distinct string hashes (equal strings hash alike; the hashes stay cached for matching, as
    :func:`schedsim.compare._match`). False means not shown (two ids share a hash or a pair): the strings are
    then compared."""
    import numpy as np

    from schedsim.coded import Parts

    p = c._parts
    if callable(c._id) and isinstance(p, Parts) and len(p.parts) == 1 and len(set(p.parts[0][0])) == len(p.parts[0][0]):
        key = p.parts[0][1].astype(np.int64) * (int(c.rank.max(initial=0)) + 1) + c.rank
    else:
        key = np.fromiter(map(hash, c.id), np.int64, len(c))
    key.sort()  # a sort: np.unique's hash path is several times slower on a million rows
    return bool((key[1:] != key[:-1]).all())


class Timeline:
    """Per-op start/end on each rank × stream, plus the critical path and metadata.

    Give either ``spans`` (rows) or ``columns`` (:class:`SpanColumns`); the other form is built on first
    access and cached. Treat both as read-only: assign a new list to :attr:`spans` to change the spans.

    Parameters
    ----------
    schedule, source : str
        Schedule name; ``predict``, ``execute`` or ``import``.
    world_size : int
        Ranks.
    launch : str
        ``eager`` or ``cuda_graph``.
    profile : str or None
        Hardware profile name (predicted timelines).
    spans : list[Span], optional
    critical_path : list[str], optional
        Op ids from the first op to the last (or a :class:`~schedsim.sim.path_ids.PathIds`).
    meta : dict, optional
    columns : SpanColumns, optional
        Instead of ``spans``.

    Raises
    ------
    ValueError
        Both ``spans`` and ``columns`` given.
    """

    def __init__(self, schedule: str, source: str, world_size: int, launch: str = "eager",
                 profile: str | None = None, spans: list[Span] | None = None,
                 critical_path: Sequence[str] | None = None, meta: dict[str, Any] | None = None, *,
                 columns: SpanColumns | None = None) -> None:
        if spans is not None and columns is not None:
            raise ValueError("Timeline: give spans or columns, not both")
        self.schedule, self.source, self.world_size, self.launch, self.profile = (
            schedule, source, world_size, launch, profile)
        self._spans: list[Span] | None = spans if spans is not None else (None if columns is not None else [])
        self._cols = columns
        self._makespan: float | None = None
        self._critical_path: Sequence[str] = critical_path if critical_path is not None else []
        self.meta: dict[str, Any] = meta if meta is not None else {}
        #: (critical_path as it was, its rows in path order): the simulator's (:meth:`set_path_rows`)
        self._cp_rows: tuple[Sequence[str], NDArray[np.int64]] | None = None
        #: Per row, when the op's host call returned (seconds, float64, shape (n,)): the simulator's issue times
        #: (rule host-issue of :mod:`schedsim.gpu.rules`), which the critical path's host calls are cut from
        #: (:func:`schedsim.sim.metrics.critical_path_segments`); None when unknown (not stored in timeline.json).
        self.host_call_end_s: NDArray[np.float64] | None = None

    @property
    def critical_path(self) -> Sequence[str]:
        """Op ids of the critical path, from the first op to the last: a list, or the simulator's
        :class:`~schedsim.sim.path_ids.PathIds` (its rows, each id made where it is read; equal to the list)."""
        return self._critical_path

    @critical_path.setter
    def critical_path(self, value: Sequence[str]) -> None:
        self._critical_path = value

    def set_path_rows(self, names: OpNames | Program, rows: NDArray[np.int64]) -> None:
        """Set :attr:`critical_path` to the ops ``rows`` (int64, in path order) of ``names`` (the program this
        timeline's rows are: a :class:`~schedsim.sim.path_ids.PathIds`, no id made), as the simulator knows it
        (:meth:`critical_rows`, :meth:`critical_path_order`, while the spans and the path are unchanged)."""
        ids = PathIds(names, rows)
        self._critical_path, self._cp_rows = ids, (ids, rows)

    def _known_rows(self) -> NDArray[np.int64] | None:
        """The rows in path order given with the path, while it is unchanged (the same object, or a list equal
        to the one given: a list may have been changed in place)."""
        known, cp = self._cp_rows, self._critical_path
        if known is None:
            return None
        if known[0] is cp and not isinstance(cp, list) or known[0] == cp:
            return known[1]
        return None

    def critical_rows(self) -> NDArray[np.int64]:
        """Rows (int64, ascending) of the ops whose id is on :attr:`critical_path`: from the simulator when it
        gave them and the path is unchanged since, else by a scan of the ids."""
        import numpy as np

        known = self._known_rows()
        if known is not None:
            return np.sort(known)
        on_path = set(self.critical_path)  # a membership scan, cheaper than an id → row dict of every op
        c = self.columns
        return np.flatnonzero(np.fromiter(map(on_path.__contains__, c.id), dtype=bool, count=len(c)))

    def critical_path_order(self) -> NDArray[np.int64] | None:
        """Rows (int64) of the :attr:`critical_path` ops in path order when the simulator gave them and the path
        is unchanged since, else None (:func:`schedsim.sim.metrics.critical_path_segments` then maps the ids)."""
        return self._known_rows()

    @property
    def spans(self) -> list[Span]:
        """The spans as rows (built from the columns on first access)."""
        if self._spans is None:
            assert self._cols is not None
            self._spans = self._cols.to_spans()
        return self._spans

    @spans.setter
    def spans(self, value: Iterable[Span]) -> None:
        self._spans, self._cols, self._makespan = list(value), None, None
        # the simulator's per-row arrays belong to the old spans
        self._cp_rows = self.host_call_end_s = None

    @property
    def columns(self) -> SpanColumns:
        """The spans as columns (built from the rows on first access)."""
        if self._cols is None:
            self._cols = SpanColumns.from_spans(self._spans or [])
        return self._cols

    @property
    def makespan_s(self) -> float:
        """Latest end minus earliest start (or 0 when ops start after 0), in seconds; 0 for an empty timeline."""
        if self._makespan is None:
            if len(self) == 0:
                self._makespan = 0.0
            elif self._cols is not None or len(self) > _COLUMNS_FOR_MAKESPAN:  # metrics build the columns anyway
                c = self.columns
                self._makespan = float(c.end_s.max()) - min(0.0, float(c.start_s.min()))
            else:
                sp = self.spans
                self._makespan = max(s.end_s for s in sp) - min(0.0, min(s.start_s for s in sp))
        return self._makespan

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self._spans) if self._spans is not None else len(self._cols or ())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timeline):
            return NotImplemented
        return (self._head_fields() == other._head_fields() and self.critical_path == other.critical_path
                and timeline_json.meta_equal(self.meta, other.meta) and self.spans == other.spans)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return (f"Timeline(schedule={self.schedule!r}, source={self.source!r}, world_size={self.world_size}, "
                f"launch={self.launch!r}, profile={self.profile!r}, ops={len(self)}, "
                f"makespan_s={self.makespan_s!r})")

    def _head_fields(self) -> tuple[str, str, int, str, str | None]:
        return self.schedule, self.source, self.world_size, self.launch, self.profile

    @property
    def pipeline(self) -> PipelineInfo | None:
        """The pipeline block this timeline ran, typed (:class:`~schedsim.graph.info.PipelineInfo`, read from
        ``meta["pipeline"]``, its JSON form); None when the timeline has none."""
        from schedsim.graph.info import PipelineInfo

        return PipelineInfo.of_meta(self.meta)

    def by_id(self) -> dict[str, Span]:
        """Spans keyed by op id (``name@rN``)."""
        return {s.id: s for s in self.spans}

    def lanes(self) -> list[tuple[int, str]]:
        """(rank, stream) pairs in rank order, streams in order of first use."""
        seen: dict[tuple[int, str], float] = {}
        for s in self.spans:
            key = (s.rank, s.stream)
            if key not in seen:
                seen[key] = len(seen)
        return sorted(seen, key=lambda k: (k[0], seen[k]))

    # -- JSON ---------------------------------------------------------------
    def _head(self, version: int, forms: JsonForms | None = None) -> dict[str, Any]:
        if version >= 2:
            version = self.columns.json_version(forms)
        h = {"format": FORMAT, "version": version, "schedule": self.schedule, "source": self.source,
             "profile": self.profile, "world_size": self.world_size, "launch": self.launch,
             "makespan_s": self.makespan_s, "meta": self.meta}
        if version >= 2:
            h["layout"] = "columns"
            h["n_ops"] = len(self)
        return h

    def to_dict(self, metrics: dict[str, Any] | None = None, *, layout: str = "columns") -> dict[str, Any]:
        """The JSON document :meth:`write_json` writes, as plain dicts and lists (small timelines).

        Raises
        ------
        ValueError
            Unknown ``layout``.
        """
        if layout == "columns":
            return _load_doc(b"".join(self._column_chunks(metrics)))
        if layout == "rows":
            return {**self._head(1), "ops": [_span_dict(s) for s in self.spans],
                    "critical_path": list(self.critical_path), "metrics": metrics or {}}
        raise ValueError(f"layout must be 'columns' or 'rows', not {layout!r}")

    def _column_chunks(self, metrics: dict[str, Any] | None) -> Iterator[bytes | memoryview]:
        """The version-2 document as byte chunks, one per column (never one string for the whole file)."""
        forms = self.columns._json_forms()  # made once: the based float columns compare whole columns
        n = len(self)
        period = n // self.world_size if self.world_size > 0 and n % self.world_size == 0 else 0  # rows per rank
        head = self._head(2, forms)
        meta = head["meta"]
        if type(meta) is dict and type(meta.get("memory")) is dict:  # each rank's long memory steps: the same
            # steps formatted once (_MemoryJson), in the same place of the text
            head["meta"] = {**meta, "memory": _MemoryJson(meta["memory"])}
        yield dumps_json(head)[:-1]
        yield b',"columns":{'
        for i, (k, v) in enumerate(self.columns.json_items(forms)):
            yield b"%s%s:" % (b"," if i else b"", dumps_json(k))
            if isinstance(v, _RawPieces):
                yield from v
            else:  # a long column's text in pieces, never whole (its repeats made once)
                yield from _json_pieces(v, period)
            del v  # a based column's index and values go before the next column's are made
        yield b'},\n"critical_path":'
        cp = self.critical_path
        yield from cp.json_pieces() if isinstance(cp, PathIds) else _json_pieces(cp)
        yield b',\n"metrics":'
        yield from _dict_pieces(metrics or {})  # the ranks' text of 100,000 ranks (31 MB) in pieces, never whole
        yield b"}\n"

    def write_json(self, path: str | Path, metrics: dict[str, Any] | None = None, *, layout: str = "columns") -> None:
        """Write the timeline JSON atomically.

        Parameters
        ----------
        layout : {"columns", "rows"}
            ``columns`` (version 2, the default) writes one column at a time with orjson; ``rows``
            (version 1) writes one op per line for tools that expect the original layout.

        Raises
        ------
        ValueError
            Unknown ``layout``.
        OSError
            The path cannot be written (nothing is left behind).
        """
        if layout == "columns":
            with atomic_writer(path, "wb", digest=True) as f:  # in an output set: its digest as written
                for chunk in self._column_chunks(metrics):
                    f.write(chunk)
        elif layout == "rows":
            with atomic_writer(path) as f:
                f.write(json.dumps(self._head(1), indent=1, default=_row_default)[:-2])
                f.write(',\n "ops": [')
                for i, s in enumerate(self.spans):
                    f.write(",\n  " if i else "\n  ")
                    f.write(json.dumps(_span_dict(s), default=str))
                f.write("\n ],\n \"critical_path\": ")
                f.write(json.dumps(list(self.critical_path)))
                f.write(",\n \"metrics\": ")
                f.write(json.dumps(metrics or {}, default=str))
                f.write("\n}\n")
        else:
            raise ValueError(f"layout must be 'columns' or 'rows', not {layout!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "<timeline>", consume: bool = False) -> Timeline:
        """Build a Timeline from its JSON dict, either layout. With ``consume`` the dict is the caller's no
        longer: its ``columns`` entry is taken out and each parsed list dropped once its array is made, so a
        million-row column's Python floats are freed while the next column is read (lower peak memory).

        Raises
        ------
        TraceError
            If the dict is not a schedsim timeline, or a span or column is malformed.
        """
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise TraceError(f"{where}: not a schedsim timeline (no \"format\": \"schedsim.timeline\")\n"
                             "  fix: pass a timeline.json written by schedsim predict, execute or import")
        from schedsim.trace.validate import check_timeline_doc

        check_timeline_doc(d, where)
        _check_meta(d.get("meta"), where)
        head = {"schedule": d.get("schedule", "?"), "source": d.get("source", "?"),
                "world_size": int(d.get("world_size", 1)), "launch": d.get("launch", "eager"),
                "profile": d.get("profile"), "critical_path": list(d.get("critical_path", [])),
                "meta": d.get("meta", {})}
        if "columns" in d:
            n = d.get("n_ops")
            raw = {**(d.pop("columns") if consume else d["columns"]), "__world_size__": head["world_size"]}
            cols = SpanColumns.from_json(raw, None if n is None else int(n), where)
            _check_columns(cols, where)
            return cls(**head, columns=cols)
        try:
            spans = [
                Span(id=o["id"], name=o["name"], rank=int(o["rank"]), stream=str(o["stream"]), kind=o["kind"],
                     resource=o.get("resource", "compute"), start_s=float(o["start_s"]), end_s=float(o["end_s"]),
                     solo_s=o.get("solo_s"), ready_s=o.get("ready_s"), bytes=float(o.get("bytes") or 0.0),
                     flops=float(o.get("flops") or 0.0), tags=o.get("tags") or {}, stream_s=o.get("stream_s"))
                for o in d.get("ops", [])
            ]
        except (KeyError, TypeError, ValueError) as e:
            raise TraceError(f"{where}: malformed op entry ({e.__class__.__name__}: {e})") from None
        return cls(**head, spans=spans)

    @classmethod
    def read_json(cls, path: str | Path) -> Timeline:
        """Read a timeline JSON file in either layout.

        Raises
        ------
        TraceError
            Missing, not a regular file, past the size cap (:func:`schedsim.io.read_input`), truncated or
            malformed.
        """
        from schedsim.io import parse_json, read_input

        p = Path(path)
        data = read_input(p, "timeline")  # a regular file within the size cap
        d = _big_ints_kept(parse_json(data, p, "timeline"), data)  # the depth limit; a clean error naming the
        # line of bad JSON
        del data  # the file's bytes, freed before the columns are built
        return cls.from_dict(d, where=str(p), consume=True)


def _dict_pieces(d: dict[str, object]) -> Iterator[bytes]:
    """``dumps_json(d)`` in pieces: a dict of string keys written key by key, a value that offers ``json_pieces``
    (:meth:`schedsim.sim.metrics.RankColumns.json_pieces`, the text ``dumps_json`` writes for it) piece by piece.
    Any other dict in one piece."""
    if not d or not all(type(k) is str for k in d):
        yield dumps_json(d)
        return
    for i, (k, v) in enumerate(d.items()):
        yield (b"," if i else b"{") + dumps_json(k) + b":"
        pieces = getattr(v, "json_pieces", None)
        if pieces is not None:
            yield from pieces()
        else:
            yield dumps_json(v)
    yield b"}"


def _span_dict(s: Span) -> dict[str, Any]:
    d = {"id": s.id, "name": s.name, "rank": s.rank, "stream": s.stream, "kind": s.kind, "resource": s.resource,
         "start_s": s.start_s, "end_s": s.end_s, "solo_s": s.solo_s, "ready_s": s.ready_s, "bytes": s.bytes,
         "flops": s.flops, "tags": s.tags}
    if s.stream_s is not None:
        d["stream_s"] = s.stream_s
    if s.solo_s is not None and s.ready_s is not None:
        d["breakdown"] = {"wait_s": s.start_s - s.ready_s, "work_s": s.solo_s,
                          "contention_s": (s.end_s - s.start_s) - s.solo_s}
    return d
