"""The Timeline: what ran where and when. One format for predict, execute and import.

A Timeline is backed by columns (:class:`SpanColumns`: numpy arrays of times, sizes and ranks,
dictionary-encoded stream/kind/resource); the :class:`Span` rows of :attr:`Timeline.spans` are built
only when something asks for them, so a million-op timeline costs tens of bytes per op, not hundreds.

JSON: ``timeline.json`` (``format: schedsim.timeline``) has two layouts, columns (versions 2 and 3) and
rows (version 1), and :meth:`Timeline.read_json` reads all three versions.

Columns (``version: 2``, ``layout: columns``; what :meth:`Timeline.write_json` writes unless a column is
coded, below)::

    {"format": "schedsim.timeline", "version": 2, "layout": "columns",
     "schedule": "allgather_mm8", "source": "predict" | "execute" | "import",
     "profile": "h200" | null, "world_size": 2, "launch": "eager",
     "makespan_s": 0.0755, "meta": {...}, "n_ops": 274,
     "columns": {"id": ["mm0@r0", ...], "name": ["mm0", ...], "rank": [0, ...],
                 "stream": {"values": ["s0", "comm"], "codes": [0, 1, ...]},
                 "kind": {"values": [...], "codes": [...]},
                 "resource": {"values": [...], "codes": [...]},
                 "start_s": [...], "end_s": [...], "solo_s": [... | null], "ready_s": [... | null],
                 "bytes": [...], "flops": [...],
                 "tags": {"index": [3, 7, ...], "values": [{...}, {...}, ...]}},
     "critical_path": ["ag0@r0", "mm0@r0", ...],
     "metrics": {...}}

Every column holds ``n_ops`` entries; row ``i`` of all columns is one op. ``stream``, ``kind`` and
``resource`` are dictionary encoded (``values[codes[i]]``). ``tags`` is sparse: only the rows in
``index`` have tags. The breakdown of the row layout is not stored: it is
``start_s − ready_s`` (wait), ``solo_s`` (work) and ``end_s − start_s − solo_s`` (contention).

Coded columns (``version: 3``, ``layout: columns``): version 2 where ``id``, ``name`` or ``tags`` may instead
be coded, so that a simulated timeline is written without one Python object per op (a pipeline's 456,704
distinct names and tag sets are made of a few thousand parts and values)::

     "id": {"format": "{name}@r{rank}"},                 # id[i] = name[i] + "@r" + str(rank[i])
     "name": {"parts": [{"values": ["F0.", "sendF0.", ...], "codes": [0, 1, ...]},
                        {"values": ["0", "1", ...], "codes": [...]},
                        {"values": [".0", ""], "codes": [...]}]},  # name[i] = "".join(values[codes[i]])
     "tags": {"keys": {"mb": {"values": [0, 1, ...], "codes": [0, 0, 1, ..., -1]},
                       "phase": {"values": ["F", "I", "W"], "codes": [...]},
                       "msg": {"values": {"parts": [{"values": ["F-1.", "F0.", ...], "codes": [1, ...]},
                                                    {"values": ["0", "1", ...], "codes": [0, ...]}]},
                               "codes": [-1, 0, ...]}, ...}}

A name is the concatenation of one value per part (every part's ``codes`` has ``n_ops`` entries). Each tag key
is a categorical column of its own: row ``i`` has the tag ``key: values[codes[i]]`` when ``codes[i] ≥ 0``
and lacks the key at -1; values are JSON scalars, and ``1``, ``1.0`` and ``true`` are distinct values. A key's
``values`` may instead be strings as parts, in the form of ``name`` (``values[k]`` the concatenation of part
``k``'s values, every part's ``codes`` as long as the first's): a pipeline's messages, 130k distinct strings
of a few hundred parts, written without one string each. A row's tags are its keys in sorted order. Each of
the three columns may also come in its version-2 form. The writer uses version 3 for a timeline simulated from
a Program (:func:`schedsim.sim.engine.simulate`): its tags as key columns, a pipeline's names as parts
(:mod:`schedsim.coded`), names that ranks share (``mm{i}`` on every rank) as one part (the distinct names once,
a code per row), and then ``id`` by its format; the others, and timelines built from spans, are written as
version 2, which older readers take.

Version 3 may also write any float column (``start_s``, ``end_s``, ``solo_s``, ``ready_s``, ``bytes``,
``flops``, ``stream_s``) as a base and the rows that differ from it::

     "ready_s": {"base": "start_s", "index": [4, 9, ...], "values": [0.25, null, ...]},
     "bytes": {"base": 0.0, "index": [], "values": []}

Row ``i`` of such a column is row ``i`` of the column ``base`` names (one listed before it, in the order above)
or the number ``base`` (null: NaN), except at the rows of ``index`` (ascending,
distinct), which hold ``values`` (null: NaN). Equal means bit for bit, so -0.0 and NaN round-trip. The writer
uses the form where at most half the rows differ: ``ready_s`` against ``start_s`` (ops that did not wait),
``stream_s`` against ``ready_s``, a column of one value (``bytes`` of a compute-only schedule) against it.

The reader refuses a coded column that is malformed (a code out of range, a ``codes`` list of the wrong length,
a part value that is not a string (of a name or of a tag key's values), a tag value that is a list or object,
a float column's base that is not an earlier column, an index that is not ascending rows or not as long as
its values, a float column holding ±Infinity, or negative ``bytes``/``flops``) with a
:class:`~schedsim.errors.TraceError` naming the column; in every version a tag value that is NaN or ±Infinity
(not JSON: Python's reader takes the tokens) is refused likewise.

Rows (``version: 1``, the original layout; still read, and written with ``layout="rows"``)::

    {..., "version": 1,
     "ops": [{"id": "mm0@r0", "name": "mm0", "rank": 0, "stream": "s0",
              "kind": "matmul", "resource": "compute",
              "start_s": ..., "end_s": ..., "solo_s": ..., "ready_s": ..., "stream_s": ...,
              "bytes": ..., "flops": ..., "tags": {...},
              "breakdown": {"wait_s": ..., "work_s": ..., "contention_s": ...}}, ...],
     "critical_path": [...], "metrics": {...}}

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
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from schedsim.errors import TraceError
from schedsim.io import atomic_write_bytes, atomic_write_text, atomic_writer, dumps_json, loads_json  # re-exported
from schedsim.outdir import output_set  # re-exported

if TYPE_CHECKING:
    import numpy as np

    from schedsim.coded import Parts, TagColumns
    from schedsim.graph.info import PipelineInfo

try:  # orjson: ~10x faster than json on the float columns, serialises numpy arrays without copies
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by tests that hide orjson
    _orjson = None

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
Categorical = tuple[list[str], "np.ndarray"]

#: Above this many spans :attr:`Timeline.makespan_s` builds the columns (one numpy max/min) rather than
#: walking the rows twice.
_COLUMNS_FOR_MAKESPAN = 50_000
#: The ``id`` column of a version-3 file whose ids are the names and ranks (``{"format": ID_FORMAT}``).
ID_FORMAT = "{name}@r{rank}"
_FLOAT_COLS = ("start_s", "end_s", "solo_s", "ready_s", "bytes", "flops")
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
        float64 bytes moved and floating-point operations, shape (n,).
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
                 "resource", "start_s", "end_s", "solo_s", "ready_s", "bytes", "flops", "stream_s")

    def __init__(self, id: list[str] | Callable[[], list[str]], name: list[str] | Callable[[], list[str]],
                 rank: np.ndarray, stream: Categorical, kind: Categorical, resource: Categorical,
                 start_s: np.ndarray, end_s: np.ndarray, solo_s: np.ndarray, ready_s: np.ndarray, bytes: np.ndarray,
                 flops: np.ndarray, tags: list[dict[str, Any]] | None, stream_s: np.ndarray | None = None, *,
                 coded_ids: tuple[Sequence[str], np.ndarray] | None = None,
                 coded_tags: tuple[Sequence[tuple[tuple[str, Any], ...]], np.ndarray] | TagColumns
                 | Callable[[], TagColumns] | None = None,
                 name_parts: Parts | Callable[[], Parts] | None = None) -> None:
        self._id, self._name, self.rank = id, name, rank
        self._coded, self._coded_tags, self._parts = coded_ids, coded_tags, name_parts
        self._keyed = coded_tags is not None and not isinstance(coded_tags, tuple)  # written as a column per key
        if tags is None and coded_tags is None:
            raise ValueError("SpanColumns: give tags or coded_tags")
        self.stream, self.kind, self.resource = stream, kind, resource
        self.start_s, self.end_s, self.solo_s, self.ready_s = start_s, end_s, solo_s, ready_s
        self.bytes, self.flops, self._tags, self.stream_s = bytes, flops, tags, stream_s
        n = len(rank)
        lens = {**({} if callable(id) else {"id": len(id)}), **({} if callable(name) else {"name": len(name)}),
                "stream": len(stream[1]), "kind": len(kind[1]), "resource": len(resource[1]),
                "start_s": len(start_s), "end_s": len(end_s), "solo_s": len(solo_s), "ready_s": len(ready_s),
                "bytes": len(bytes), "flops": len(flops), **({} if tags is None else {"tags": len(tags)}),
                **({} if stream_s is None else {"stream_s": len(stream_s)})}
        bad = {k: v for k, v in lens.items() if v != n}
        if bad:
            raise ValueError(f"span columns differ in length: rank has {n}, " +
                             ", ".join(f"{k} has {v}" for k, v in bad.items()))

    def __getstate__(self) -> dict[str, Any]:
        """Pickling (and copying) builds the columns still held as functions first: a function may not pickle
        (nor the lowering's interner of names, kept as a tuple)."""
        self.id, self.name, self.tags  # noqa: B018 - properties that build and keep the lists
        state = {k: getattr(self, k) for k in self.__slots__}
        state["_coded_tags"], state["_parts"] = self._tag_columns(), self._name_parts()
        if self._coded is not None and not isinstance(self._coded[0], (tuple, list)):
            state["_coded"] = (tuple(self._coded[0]), self._coded[1])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

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
            self._tags = self._tag_columns().dicts()  # type: ignore[union-attr]
        return self._tags

    def tags_of(self, rows: Any) -> list[dict[str, Any]]:
        """The tags of ``rows`` (ints), in that order, as :attr:`tags` gives them (treat them as read-only),
        built for those rows only while the per-row dicts are not made: a chart of a few lanes of a 214k-op run
        reads its lanes' tags, not every row's."""
        if self._tags is None:
            tc = self._tag_columns()
            return tc.dicts(rows)  # type: ignore[union-attr]
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

        def floats(col: tuple[Any, ...]) -> np.ndarray:
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

    def tagged(self, rows: Any, key: str) -> tuple[list[int], list[dict[str, Any]]]:
        """Of ``rows`` (int array), those whose tags hold ``key``, with their tag dicts; from the coded tag sets
        when the per-row dicts are not built (one dict per distinct set)."""
        import numpy as np

        if self._tags is None and self._coded_tags is not None:
            tc = self._tag_columns()
            rows = np.asarray(rows, np.int64)
            rows = rows[tc.has(key)[rows]]  # type: ignore[union-attr]
            return rows.tolist(), tc.dicts(rows)  # type: ignore[union-attr]
        tags = self.tags
        out = [i for i in rows.tolist() if tags[i] and key in tags[i]]
        return out, [tags[i] for i in out]

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

    def named_by(self, name_id: Any) -> bool:
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
    def _json_forms(self) -> tuple[str, str, dict[str, dict[str, Any]]]:
        """How :meth:`json_items` writes the names, the tags and the float columns: ``("shared" | "parts" |
        "lists", "keys" | "index", based)``, ``based`` the float columns written as a base and the rows that
        differ from it (module docstring), by name."""
        names = "lists"  # both coded forms hold id[i] == f"{name[i]}@r{rank[i]}" (the constructor's contract)
        if self._coded is not None and 4 * len(self._coded[0]) <= len(self.rank):
            names = "shared"  # names shared by rows: the table once, rows joined from it
        elif self._name_parts() is not None:
            names = "parts"
        keyed = self._keyed and self._tag_columns().scalar()  # type: ignore[union-attr]
        based = {}
        if names == "parts" or keyed:  # a version-3 document: its float columns may be based too
            for c, base in _BASES.items():
                got = _based(getattr(self, c), base, None if base is None else getattr(self, base))
                if got is not None:
                    based[c] = got
        return names, "keys" if keyed else "index", based

    def json_version(self, forms: tuple[str, str, dict[str, dict[str, Any]]] | None = None) -> int:
        """The ``version`` of the document :meth:`json_items` makes: 3 when the names or tags are coded
        (module docstring), else 2. ``forms``: :meth:`_json_forms`' result, when already made."""
        forms = forms or self._json_forms()
        return 3 if forms[0] == "parts" or forms[1] == "keys" else 2

    def json_items(self, forms: tuple[str, str, dict[str, dict[str, Any]]] | None = None
                   ) -> Iterator[tuple[str, Any]]:
        """(key, JSON-ready value) per column, numpy arrays left as arrays (see :func:`dumps_json`).
        ``forms``: :meth:`_json_forms`' result, when already made."""
        names, tags, based = forms or self._json_forms()
        if names == "shared" and tags == "keys":
            # a version-3 document anyway (its tags coded): the ids as their format and the names as one part
            # (the table once, a code per row), not two lists of a million strings (22 of a 1M-op file's 100 MB)
            yield "id", {"format": ID_FORMAT}
            yield "name", {"parts": [{"values": list(self._coded[0]), "codes": self._coded[1]}]}  # type: ignore[index]
        elif names == "shared":
            ids, nms = _coded_json(self._coded[0], self._coded[1], self.rank)  # type: ignore[index]
            yield "id", ids
            yield "name", nms
        elif names == "parts":
            yield "id", {"format": ID_FORMAT}
            yield "name", self._name_parts().to_json()  # type: ignore[union-attr]
        else:
            yield "id", self.id
            yield "name", self.name
        yield "rank", self.rank
        for c in _CAT_COLS:
            cats, codes = getattr(self, c)
            yield c, {"values": cats, "codes": codes}
        for c in _FLOAT_COLS:
            yield c, based.get(c, getattr(self, c))
        if self.stream_s is not None:
            yield "stream_s", based.get("stream_s", self.stream_s)
        if tags == "keys":  # one coded column per key: no dict per row
            yield "tags", self._tag_columns().to_json()  # type: ignore[union-attr]
            return
        if self._tags is None:  # coded: the dicts of the rows with tags only
            import numpy as np

            tc = self._tag_columns()
            some = np.zeros(len(self.rank), bool)
            for key in tc.keys:  # type: ignore[union-attr]
                some |= tc.has(key)  # type: ignore[union-attr]
            at = np.flatnonzero(some)
            yield "tags", {"index": at, "values": tc.dicts(at)}  # type: ignore[union-attr]
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


def _json_floats(d: dict[str, Any], n: int, num: Callable[..., Any]) -> dict[str, np.ndarray]:
    """The float columns of the ``columns`` object ``d`` (``stream_s`` only when present), plain lists read by
    ``num`` (their lengths checked by the constructor) and based ones (module docstring) by :func:`_unbase`, in
    the order a base must come before its column."""
    floats: dict[str, np.ndarray] = {}
    for c in (*_FLOAT_COLS, "stream_s"):
        raw = d.get(c)
        if isinstance(raw, dict):
            floats[c] = _unbase(c, raw, floats, n, num)
        elif c != "stream_s" or raw is not None:
            floats[c] = num(c, "f")
        d.pop(c, None)  # the parsed list, freed now that its array is made
    return floats


def _unbase(key: str, raw: dict[str, Any], done: dict[str, Any], n: int, num: Callable[..., Any]) -> np.ndarray:
    """The float column ``key`` from its based form ``raw`` (module docstring), ``done`` the columns read before it.

    Raises
    ------
    ValueError
        Keys other than base/index/values, a base that is not an earlier column of n rows or a float, an index
        that is not ascending rows 0..n-1, index and values of different lengths.
    """
    import numpy as np

    if set(raw) != {"base", "index", "values"}:
        raise ValueError(f"{key!r} is an object without exactly the keys base, index, values")
    base = raw["base"]
    if isinstance(base, str):
        if base not in done:
            raise ValueError(f"{key!r} has base {base[:40]!r}, not a float column written before it")
        if len(done[base]) != n:
            raise ValueError(f"{key!r} has base {base!r} of {len(done[base])} rows, not {n}")
        out = done[base].copy()
    elif base is None or (isinstance(base, (int, float)) and not isinstance(base, bool)):
        try:
            out = np.full(n, np.nan if base is None else float(base))
        except OverflowError:
            raise ValueError(f"{key!r} has base {str(base)[:40]}..., past the float range") from None
    else:
        raise ValueError(f"{key!r} has base {str(base)[:40]!r}, neither a column name nor a number")
    idx = num(key + ".index", "i", raw["index"])
    vals = num(key + ".values", "f", raw["values"])
    if len(idx) != len(vals):
        raise ValueError(f"{key!r} has {len(idx)} index entries and {len(vals)} values")
    if len(idx) and (idx[0] < 0 or idx[-1] >= n or not bool((idx[1:] > idx[:-1]).all())):
        raise ValueError(f"{key!r} has an index that is not ascending rows 0..{n - 1}")
    out[idx] = vals
    return out


#: Elements of a numpy column serialised per :func:`dumps_json` call: the pieces (~1 MiB of text) are freed and
#: their memory reused, where one string per column (19 MiB for a million floats) is paged in afresh each time.
_JSON_PIECE = 1 << 16


#: The float columns a version-3 file may write as a base and the rows that differ (module docstring): against
#: a column (an op's ready time is its start when it did not wait; its stream reached it when it was ready, unless
#: the host was late) or, None, against the column's first value (the per-template columns, often one value).
_BASES: dict[str, str | None] = {"solo_s": None, "ready_s": "start_s", "bytes": None, "flops": None,
                                 "stream_s": "ready_s"}


def _based(a: np.ndarray | None, base_name: str | None, base: np.ndarray | None) -> dict[str, Any] | None:
    """``{"base", "index", "values"}`` of the float column ``a`` against the column ``base`` (named ``base_name``)
    or, when ``base`` is None, against ``a[0]``; None when more than half the rows differ (bit for bit)."""
    import numpy as np

    if a is None or not len(a):
        return None
    n = len(a)
    bits = a.view(np.int64) if a.flags.c_contiguous else np.ascontiguousarray(a).view(np.int64)
    if base is None:
        diff = bits != bits[0]
        head = float(a[0])
        ref: Any = None if head != head else head  # NaN: null, as orjson writes it
    else:
        diff = bits != (base.view(np.int64) if base.flags.c_contiguous else np.ascontiguousarray(base).view(np.int64))
        ref = base_name
    idx = np.flatnonzero(diff)
    if 2 * len(idx) > n:
        return None
    return {"base": ref, "index": idx, "values": a[idx]}


def _array_pieces(a: np.ndarray) -> Iterator[bytes | memoryview]:
    """The JSON array of the 1-d numpy array ``a`` (what ``dumps_json(a)`` gives) in pieces."""
    yield b"["
    for k in range(0, len(a), _JSON_PIECE):
        p = dumps_json(a[k:k + _JSON_PIECE])
        if k:
            yield b","
        yield memoryview(p)[1:-1]
    yield b"]"


class _RawPieces:
    """JSON text in pieces (each iteration makes them anew, :data:`_JSON_PIECE` rows at a time), written as they
    are (:meth:`Timeline._column_chunks`): a million-row column never exists as one string."""

    def __init__(self, pieces: Callable[[], Iterator[bytes]]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        return self._pieces()


def _coded_json(names: Sequence[str], name_id: np.ndarray, rank: np.ndarray) -> tuple[_RawPieces, _RawPieces]:
    """The JSON arrays of the ``id`` (``name@rN``) and ``name`` columns of rows ``names[name_id[i]]`` on
    ``rank[i]``: each distinct name is encoded once (one :func:`dumps_json` of the table, split at its
    ``","`` separators, which an encoded string cannot hold: its quotes are escaped), and the rows are joined
    from those pieces, :data:`_JSON_PIECE` rows at a time, so no per-row string is made and no column is
    held whole."""
    import numpy as np

    n = len(name_id)
    if not n:
        return _RawPieces(lambda: iter((b"[]",))), _RawPieces(lambda: iter((b"[]",)))
    enc = dumps_json(list(names))[2:-2].decode("utf-8").split('","')  # the table's strings escaped, unquoted
    head = np.empty(len(enc), object)
    head[:] = [f'"{e}@r' for e in enc]
    tail = np.empty(int(rank.max()) + 1, object)
    tail[:] = [f'{r}",' for r in range(len(tail))]
    quoted = np.empty(len(enc), object)
    quoted[:] = [f'"{e}",' for e in enc]

    def rows(join: Callable[[int, int], str]) -> Iterator[bytes]:
        yield b"["
        for k in range(0, n, _JSON_PIECE):
            text = join(k, min(k + _JSON_PIECE, n))  # str.join: ~5x bytes.join, which takes each piece's buffer
            yield (text if k + _JSON_PIECE < n else text[:-1]).encode()  # the last row's comma dropped
        yield b"]"

    def ids(a: int, b: int) -> str:
        pieces = np.empty(2 * (b - a), object)
        pieces[0::2] = head[name_id[a:b]]
        pieces[1::2] = tail[rank[a:b]]
        return "".join(pieces.tolist())

    def nms(a: int, b: int) -> str:
        return "".join(quoted[name_id[a:b]].tolist())

    return _RawPieces(lambda: rows(ids)), _RawPieces(lambda: rows(nms))


def _json_ids(raw_id: Any, raw_name: Any, n: int | None, raw_rank: Any) -> tuple[int, list[str] | None, Parts | None]:
    """``(n_ops, ids, parts)`` from the ``id`` and ``name`` columns: ``ids`` None when they are the names and ranks
    (``{"format": ID_FORMAT}``), ``parts`` the names' :class:`~schedsim.coded.Parts` when coded.

    Raises
    ------
    ValueError
        An ``id`` object of another format, a list of the wrong length, malformed parts.
    """
    from schedsim.coded import Parts

    derived = isinstance(raw_id, dict)
    if derived and raw_id != {"format": ID_FORMAT}:
        raise ValueError(f"'id' is neither a list of strings nor {{\"format\": \"{ID_FORMAT}\"}}")
    if n is None:
        n = len(raw_rank if derived else raw_id)
    ids = None if derived else _strs(raw_id)
    if ids is not None and len(ids) != n:
        raise ValueError(f"'id' has {len(ids)} entries, n_ops is {n}")
    return n, ids, Parts.from_json(raw_name, n, "'name'") if isinstance(raw_name, dict) else None


def _json_tags(t: Any, n: int) -> tuple[list[dict[str, Any]] | None, TagColumns | None]:
    """``(tags, coded)`` from the ``tags`` column: the per-row dicts of the sparse version-2 form, or the
    :class:`~schedsim.coded.TagColumns` of the version-3 form (then ``tags`` None).

    Raises
    ------
    ValueError
        An index that is not a row, a value that is not an object, malformed key columns.
    """
    from schedsim.coded import TagColumns

    if isinstance(t, dict) and "index" not in t and "values" not in t:  # version 3: a column per key
        return None, TagColumns.from_json(t, n, "'tags'")
    from itertools import chain

    from schedsim.coded import non_finite

    tags: list[dict[str, Any]] = [{}] * n
    for i, v in zip(t["index"], t["values"], strict=True):
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n or not isinstance(v, dict):
            raise ValueError(f"tags: index {str(i)[:20]} is not a row 0..{n - 1}, or its value is not an object")
        tags[i] = v
    bad = non_finite(lambda: chain.from_iterable(map(dict.values, t["values"])))
    if bad is not None:
        raise ValueError(f"tags: a value is {bad}, which is not JSON; tag values are finite numbers")
    return tags, None


def _strs(raw: Any) -> list[str]:
    """``raw`` itself when it is a list of strings (one C-level pass over the types), else ``[str(x) for x in
    raw]``."""
    if type(raw) is list and set(map(type, raw)) <= {str}:
        return raw
    return [str(x) for x in raw]


def _join_ids(names: list[str], rank: np.ndarray) -> list[str]:
    """``f"{names[i]}@r{rank[i]}"`` per row, by one object-array concatenation (the "@rN" strings made once)."""
    import numpy as np

    if not len(names):
        return []
    tails = np.array([f"@r{r}" for r in range(int(rank.max()) + 1)], dtype=object)
    return (np.fromiter(names, object, len(names)) + tails[rank]).tolist()


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
        Op ids from the first op to the last.
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
                 critical_path: list[str] | None = None, meta: dict[str, Any] | None = None, *,
                 columns: SpanColumns | None = None) -> None:
        if spans is not None and columns is not None:
            raise ValueError("Timeline: give spans or columns, not both")
        self.schedule, self.source, self.world_size, self.launch, self.profile = (
            schedule, source, world_size, launch, profile)
        self._spans: list[Span] | None = spans if spans is not None else (None if columns is not None else [])
        self._cols = columns
        self._makespan: float | None = None
        self.critical_path: list[str] = critical_path if critical_path is not None else []
        self.meta: dict[str, Any] = meta if meta is not None else {}
        self._cp_rows: tuple[list[str], np.ndarray] | None = None  # (critical_path as it was, rows in path order)
        #: Per row, when the op's host call returned (seconds, float64, shape (n,)): the simulator's issue times
        #: (rule 1 of :mod:`schedsim.sim.gpu_model`), which the critical path's host calls are cut from
        #: (:func:`schedsim.sim.metrics.critical_path_segments`); None when unknown (not stored in timeline.json).
        self.host_call_end_s: np.ndarray | None = None

    def critical_rows(self) -> np.ndarray:
        """Rows (int64, ascending) of the ops whose id is on :attr:`critical_path`: from the simulator when it
        gave them and the path is unchanged since, else by a scan of the ids."""
        import numpy as np

        known = self._cp_rows
        if known is not None and known[0] == self.critical_path:
            return np.sort(known[1])
        on_path = set(self.critical_path)  # a membership scan, cheaper than an id → row dict of every op
        c = self.columns
        return np.flatnonzero(np.fromiter(map(on_path.__contains__, c.id), dtype=bool, count=len(c)))

    def critical_path_order(self) -> np.ndarray | None:
        """Rows (int64) of the :attr:`critical_path` ops in path order when the simulator gave them and the path
        is unchanged since, else None (:func:`schedsim.sim.metrics.critical_path_segments` then maps the ids)."""
        known = self._cp_rows
        return known[1] if known is not None and known[0] == self.critical_path else None

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
        self._cp_rows = self.host_call_end_s = None  # the simulator's per-row arrays belong to the old spans

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
                and self.meta == other.meta and self.spans == other.spans)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return (f"Timeline(schedule={self.schedule!r}, source={self.source!r}, world_size={self.world_size}, "
                f"launch={self.launch!r}, profile={self.profile!r}, ops={len(self)}, "
                f"makespan_s={self.makespan_s!r})")

    def _head_fields(self) -> tuple[Any, ...]:
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
    def _head(self, version: int, forms: Any = None) -> dict[str, Any]:
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
            return {**self._head(1), "ops": [_span_dict(s) for s in self.spans], "critical_path": self.critical_path,
                    "metrics": metrics or {}}
        raise ValueError(f"layout must be 'columns' or 'rows', not {layout!r}")

    def _column_chunks(self, metrics: dict[str, Any] | None) -> Iterator[bytes | memoryview]:
        """The version-2 document as byte chunks, one per column (never one string for the whole file)."""
        forms = self.columns._json_forms()  # made once: the based float columns compare whole columns
        yield dumps_json(self._head(2, forms))[:-1]
        yield b',"columns":{'
        for i, (k, v) in enumerate(self.columns.json_items(forms)):
            yield b"%s%s:" % (b"," if i else b"", dumps_json(k))
            if isinstance(v, _RawPieces):
                yield from v
            elif getattr(v, "ndim", 0) == 1 and len(v) > _JSON_PIECE:
                yield from _array_pieces(v)
            else:
                yield dumps_json(v)
        yield b'},\n"critical_path":' + dumps_json(self.critical_path)
        yield b',\n"metrics":' + dumps_json(metrics or {}) + b"}\n"

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
            with atomic_writer(path, "wb") as f:
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
                f.write(json.dumps(self.critical_path))
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
        d = parse_json(data, p, "timeline")  # the depth limit; a clean error naming the line of bad JSON
        if _orjson is not None and _tags_may_hold_big_ints(d):
            d = json.loads(data)
        del data  # the file's bytes, freed before the columns are built
        return cls.from_dict(d, where=str(p), consume=True)


#: ``meta`` entries the readers take as numbers (or lists / dicts of numbers), as text, as a list of texts, as a
#: flag (``meta`` is free-form otherwise; see :func:`_check_meta`).
_META_NUMBERS = ("host_call_end_s", "host_costs_us", "host_issue_s", "host_issue_uninstrumented_s",
                 "makespan_iters_s", "makespan_median_s", "makespan_uninstrumented_iters_s",
                 "makespan_uninstrumented_s", "timing_host_per_op_us", "uninstrumented_period_s", "iterations",
                 "max_connections", "t0_ns")
_META_TEXT = ("file", "timing", "note", "gpu_model", "host_costs", "critical_path_walk")
_META_TEXTS = ("warnings", "set", "critical_path_host_waits")
_META_FLAG = ("timed_graph",)
_META_SECTIONS = ("memory", "power", "pipeline", "check", "iteration")


def _meta_numbers_ok(v: Any) -> bool:
    """Whether ``v`` is null, a finite number, or a list / dict of those (one level of nesting)."""
    def num(x: Any) -> bool:
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x))

    if isinstance(v, dict):
        return all(num(x) for x in v.values())
    if isinstance(v, list):
        return all(num(x) for x in v)
    return num(v)


def _check_meta(meta: Any, where: str) -> None:
    """Refuse a ``meta`` whose entries the readers use as numbers or texts hold something else: each of
    :data:`_META_NUMBERS` must be a finite number (or a list/dict of them, as ``host_call_end_s``),
    :data:`_META_TEXT` a string, :data:`_META_TEXTS` a list of strings, :data:`_META_FLAG` a boolean,
    :data:`_META_SECTIONS` an object.

    Raises
    ------
    TraceError
        Naming the file and the entry.
    """
    if not isinstance(meta, dict):
        return  # absent (None); a meta of another type is refused by check_timeline_doc
    for k, v in meta.items():
        ok = True
        if k in _META_NUMBERS:
            ok = _meta_numbers_ok(v)
        elif k in _META_TEXT:
            ok = v is None or isinstance(v, str)
        elif k in _META_TEXTS:
            ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
        elif k in _META_FLAG:
            ok = v is None or isinstance(v, bool)
        elif k in _META_SECTIONS:
            ok = v is None or isinstance(v, dict)
            if ok and k == "memory" and v is not None:  # {"ranks": {rank: {...}}} (schedsim.report.memory)
                ranks = v.get("ranks") or {}
                ok = isinstance(ranks, dict) and all(isinstance(x, dict) for x in ranks.values())
        if not ok:
            from schedsim.errors import printable

            raise TraceError(f"{where}: meta.{printable(k, 60)} is {printable(repr(v), 60)}, not what schedsim "
                             "writes there", fix="the file is corrupt or was edited; re-run the command that wrote it")


def _load_doc(data: bytes) -> Any:
    """A timeline document parsed from ``data`` (:func:`loads_json`), read again by the standard library when
    orjson made a tag integer past 64 bits a float (:func:`_tags_may_hold_big_ints`).

    Raises
    ------
    ValueError
        Not JSON.
    """
    d = loads_json(data)
    if _orjson is not None and _tags_may_hold_big_ints(d):
        d = json.loads(data)
    return d


def _tags_may_hold_big_ints(d: Any) -> bool:
    """Whether a parsed timeline document's tag values hold a whole float of magnitude at least 2**63, which is
    what orjson makes of an integer literal past 64 bits (orjson reads up to 2**64 - 1 and down to -2**63
    exactly). The value types are collected by C-level maps; only when a float is among them are the floats
    looked at. A malformed document gives False (the reader's checks word its error)."""
    from itertools import chain

    c = d.get("columns") if isinstance(d, dict) else None
    t = c.get("tags") if isinstance(c, dict) else None

    def values() -> Iterator[Any]:
        if isinstance(t, dict) and "keys" in t:  # version 3: a values list per key (parts: strings only)
            return chain.from_iterable(e["values"] for e in t["keys"].values() if isinstance(e["values"], list))
        if isinstance(t, dict):  # version 2: the tagged rows' dicts
            return chain.from_iterable(map(dict.values, t["values"]))
        return chain.from_iterable(map(dict.values, (o.get("tags") or {} for o in d.get("ops", ()))))  # version 1

    try:
        if float not in set(map(type, values())):
            return False
        return any(type(x) is float and x.is_integer() and abs(x) >= 2.0**63 for x in values())
    except (TypeError, AttributeError, KeyError):
        return False


def _row_default(obj: Any) -> Any:
    """The row layout's handler for its head: a mapping that is not a dict (a pipeline's order) as a dict,
    anything else as ``str(obj)``."""
    from collections.abc import Mapping

    return dict(obj) if isinstance(obj, Mapping) else str(obj)


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


