"""The JSON form of a :class:`~schedsim.sim.timeline.Timeline` (``timeline.json``, ``format: schedsim.timeline``):
the column encoders and decoders (categorical, coded names and tags, float columns against a base), the
streaming writer's pieces, and the checks of a document and its ``meta`` on reading.

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
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from schedsim.errors import TraceError
from schedsim.io import dumps_json, loads_json

if TYPE_CHECKING:
    import numpy as np

    from schedsim.coded import Parts, TagColumns


class NameTable(Protocol):
    """A table of distinct op names indexed by code: a sequence of strings, or the lowering's interner
    (:class:`schedsim.lower.table._Interner`, whose lazy runs of names are made when read)."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> str: ...

    def __iter__(self) -> Iterator[str]: ...


_orjson: Any
try:  # orjson: ~10x faster than json on the float columns, serialises numpy arrays without copies
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised by tests that hide orjson
    _orjson = None



#: The ``id`` column of a version-3 file whose ids are the names and ranks (``{"format": ID_FORMAT}``).
ID_FORMAT = "{name}@r{rank}"


_FLOAT_COLS = ("start_s", "end_s", "solo_s", "ready_s", "bytes", "flops")


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


def _differ(a: np.ndarray | None, base: np.ndarray | None) -> np.ndarray | None:
    """The rows (bool mask) where the float column ``a`` differs bit for bit from the column ``base`` or, when
    ``base`` is None, from ``a[0]``; None when ``a`` is None or empty."""
    import numpy as np

    if a is None or not len(a):
        return None
    bits = a.view(np.int64) if a.flags.c_contiguous else np.ascontiguousarray(a).view(np.int64)
    if base is None:
        return bits != bits[0]
    return bits != (base.view(np.int64) if base.flags.c_contiguous else np.ascontiguousarray(base).view(np.int64))


def _basable(a: np.ndarray | None, base: np.ndarray | None) -> bool:
    """Whether :func:`_based` gives the based form of ``a`` (at most half its rows differ), without making it:
    the writer decides the document's forms first and makes each based column as it writes it, one at a time."""
    import numpy as np

    diff = _differ(a, base)
    return diff is not None and 2 * int(np.count_nonzero(diff)) <= len(diff)


def _based(a: np.ndarray | None, base_name: str | None, base: np.ndarray | None) -> dict[str, Any] | None:
    """``{"base", "index", "values"}`` of the float column ``a`` against the column ``base`` (named ``base_name``)
    or, when ``base`` is None, against ``a[0]``; None when more than half the rows differ (bit for bit)."""
    import numpy as np

    diff = _differ(a, base)
    if diff is None or a is None:
        return None
    idx = np.flatnonzero(diff)
    del diff
    if 2 * len(idx) > len(a):
        return None
    if base is None:
        head = float(a[0])
        ref: Any = None if head != head else head  # NaN: null, as orjson writes it
    else:
        ref = base_name
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


def _repeated_pieces(a: np.ndarray, period: int) -> Iterator[bytes | memoryview] | None:
    """The JSON array of the float64, int64 or int32 column ``a`` (what ``dumps_json(a)`` gives) in pieces, where
    ``a`` repeats values bit for bit: every row the first row's value (a based column's values, most often one
    per kind of op), or a block of ``period`` rows repeated (a timeline whose ranks have as many ops each and run
    alike: ``period`` = rows / ranks; a coded column's codes, each rank's streams, kinds and names alike). Blocks
    of fewer than :data:`_JSON_PIECE` rows repeat whole (every block the first); longer ones piece by piece (a
    piece of a later block that is bit for bit the same piece of the first block). The text of what repeats is
    made once (one :func:`dumps_json` of its values, as :func:`_array_pieces`; the same bits give the same text,
    so the pieces join to the whole array's) and written again where it repeats; a piece that differs is written
    from its own values. None where nothing repeats so (another dtype, fewer than two blocks, a length that is no
    multiple of ``period``, no block or piece like the first's): then :func:`_array_pieces` writes it."""
    import numpy as np

    if a.dtype not in (np.float64, np.int64, np.int32) or len(a) < 2:
        return None
    c = a if a.flags.c_contiguous else np.ascontiguousarray(a)
    got = _repeat_of(c.view(np.int64) if a.dtype == np.float64 else c, period)
    return None if got is None else _block_pieces(a, *got)


def _repeat_of(bits: np.ndarray, period: int) -> tuple[int, list[list[bool]] | None] | None:
    """For :func:`_repeated_pieces`, of a column's bits (an integer view): ``(period, same)``, ``period`` 1 where every
    row is the first row, ``same`` None where every block repeats the first whole, else per later block and piece
    of a block whether it is the first block's piece (blocks of several pieces); None where nothing repeats. The
    comparisons run a piece at a time (no mask of the whole column: the write is near ``predict``'s peak RSS)."""
    n = len(bits)
    if int(bits.min()) == int(bits.max()):
        return 1, None
    if not (1 < period <= n // 2 and n % period == 0):
        return None
    first = bits[:period]
    if period <= _JSON_PIECE:  # blocks of one piece: every later block the first, a piece's worth at a time
        per = max(1, _JSON_PIECE // period) * period
        whole = all(bool((bits[k:k + per].reshape(-1, period) == first).all()) for k in range(period, n, per))
        return (period, None) if whole else None
    bounds = [*range(0, period, _JSON_PIECE), period]
    same = [[bool((bits[r + s:r + e] == first[s:e]).all()) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
            for r in range(period, n, period)]
    return (period, same) if any(map(any, same)) else None


def _block_pieces(a: np.ndarray, period: int, same: list[list[bool]] | None) -> Iterator[bytes | memoryview]:
    """:func:`_repeated_pieces`' pieces of ``a`` from :func:`_repeat_of`'s ``(period, same)``."""
    reps = len(a) // period
    # the first block's text, right-sized (bytes: orjson's own keeps room for ~32 bytes an entry)
    bounds = [*range(0, period, _JSON_PIECE), period]
    heads = [bytes(memoryview(dumps_json(a[s:e]))[1:-1]) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    yield b"["
    if same is None:  # every block the first (one piece each): blocks joined, a piece's rows at a time
        per = max(1, _JSON_PIECE // period)
        full = b",".join(heads * per)
        for k in range(0, reps, per):
            if k:
                yield b","
            yield full if k + per <= reps else b",".join(heads * (reps - k))
    else:
        for j, h in enumerate(heads):
            if j:
                yield b","
            yield h
        for r, row in enumerate(same, 1):
            for j, ok in enumerate(row):
                yield b","
                yield heads[j] if ok else memoryview(dumps_json(a[r * period + bounds[j]:r * period +
                                                                  bounds[j + 1]]))[1:-1]
    yield b"]"


def _json_pieces(v: Any, period: int = 0) -> Iterator[bytes | memoryview]:
    """``dumps_json(v)`` in pieces: a 1-d numpy array longer than :data:`_JSON_PIECE` through
    :func:`_repeated_pieces` (``period`` as there) or :func:`_array_pieces`, a list of more than
    :data:`_LIST_PIECE` strings through :func:`_str_pieces`; a dict of string keys or a short list
    that holds one (a coded column's ``{"values", "codes"}``, a based column's ``{"base", "index", "values"}``, the
    names' ``{"parts": [...]}``) entry by entry; anything else in one :func:`dumps_json`. No piece holds a long
    array's text whole (one dump of a 1M-op file's name parts held ~32 MiB of orjson's buffers for 7 MiB of
    text, the high-water mark of ``predict``'s heap)."""
    import numpy as np

    if isinstance(v, np.ndarray) and v.ndim == 1 and len(v) > _JSON_PIECE:
        yield from _repeated_pieces(v, period) or _array_pieces(v)
    elif type(v) is list and len(v) > _LIST_PIECE and set(map(type, v)) == {str}:
        yield from _str_pieces(v)
    elif type(v) is dict and all(type(k) is str for k in v) and _holds_long(v):
        for i, (k, x) in enumerate(v.items()):
            yield (b"," if i else b"{") + dumps_json(k) + b":"
            yield from _json_pieces(x, period)
        yield b"}"
    elif type(v) is list and _holds_long(v):
        for i, x in enumerate(v):
            yield b"," if i else b"["
            yield from _json_pieces(x, period)
        yield b"]"
    else:
        yield dumps_json(v)


#: Strings of a list serialised per :func:`dumps_json` call (:func:`_str_pieces`): orjson reserves ~254 bytes
#: of output per entry of a list and the bytes it returns keep that room (32 MiB for the 125,000 names of the
#: 1M-op benchmark, whose 1.2 MB of text set ``predict``'s high-water mark), where a numpy array's entry
#: reserves ~32.
_LIST_PIECE = 4096


def _str_pieces(v: list[str]) -> Iterator[bytes | memoryview]:
    """``dumps_json(v)`` of the list of strings ``v`` in pieces of :data:`_LIST_PIECE` strings (each string's
    text is its own, so the pieces join to the whole list's). A list holding a string that is no valid UTF-8 (a lone
    surrogate, which orjson refuses) in one dump: the standard library's fallback escapes every non-ASCII character
    of the list, not of the piece that holds it alone."""
    if len(v) <= _LIST_PIECE or not all(_utf8(v[k:k + _LIST_PIECE]) for k in range(0, len(v), _LIST_PIECE)):
        yield dumps_json(v)
        return
    yield b"["
    for k in range(0, len(v), _LIST_PIECE):
        if k:
            yield b","
        yield memoryview(dumps_json(v[k:k + _LIST_PIECE]))[1:-1]
    yield b"]"


def _utf8(v: list[str]) -> bool:
    """Whether every string of ``v`` encodes as UTF-8 (no lone surrogate): what orjson writes without the fallback.
    An ASCII text is (``str.isascii`` reads the joined string's flag; ~16 ms over the 1.25M names of 10M ops, where
    their dumps take ~100 ms); another is encoded."""
    text = "".join(v)
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _holds_long(v: dict[str, Any] | list[Any]) -> bool:
    """Whether the dict ``v`` or the list ``v`` of at most 64 entries holds, at any depth through such dicts and
    lists, a 1-d numpy array longer than :data:`_JSON_PIECE` or a list longer than :data:`_LIST_PIECE`."""
    import numpy as np

    if type(v) is list and len(v) > 64:
        return False
    entries: Iterable[Any] = v.values() if isinstance(v, dict) else v
    for x in entries:
        if isinstance(x, np.ndarray) and x.ndim == 1 and len(x) > _JSON_PIECE or type(x) is list and \
                len(x) > _LIST_PIECE:
            return True
        if (type(x) is dict or type(x) is list) and _holds_long(x):
            return True
    return False


#: A memory curve's ``steps`` of this many rows or more is written once for all ranks whose steps are the same
#: (:class:`_MemoryJson`); shorter ones are written where they stand.
_STEPS_SHARED = 1024


class _MemoryJson(Mapping[str, Any]):
    """``meta["memory"]`` (:func:`schedsim.report.memory.memory_over_time`'s curves, a dict) as timeline.json
    writes it (:meth:`json_bytes`, the text ``dumps_json`` gives the dict): each distinct long ``steps`` array
    (float64, shape (n, 2), :data:`_STEPS_SHARED` rows or more) is formatted once and its text put where every
    rank whose steps are the same bits has it (ranks that run alike, a ring's: 8 ranks' 125,001 steps are 28 MB
    of text). The same bits give the same text, so the bytes are the dict's. A mapping for writing, not reading
    (``dict(self)`` is the dict)."""

    def __init__(self, memory: dict[str, Any]) -> None:
        self._d = memory

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def json_bytes(self) -> bytes:
        import numpy as np

        from schedsim import io

        orjson = io._orjson
        frag = getattr(orjson, "Fragment", None)
        ranks = self._d.get("ranks")
        if frag is None or not isinstance(ranks, dict):
            return dumps_json(self._d)
        texts: dict[tuple[str, tuple[int, ...], bytes], Any] = {}
        out: dict[Any, Any] = {}
        for r, m in ranks.items():
            st = m.get("steps") if type(m) is dict else None
            if isinstance(st, np.ndarray) and len(st) >= _STEPS_SHARED:
                key = (st.dtype.str, st.shape, st.tobytes())
                text = texts.get(key)
                if text is None:
                    text = texts[key] = frag(dumps_json(st))
                m = {**m, "steps": text}
            out[r] = m
        try:
            return orjson.dumps({**self._d, "ranks": out}, default=io._orjson_default,
                                option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
        except orjson.JSONEncodeError:  # what orjson refuses (dumps_json's stdlib path): the dict as it is
            return dumps_json(self._d)


class _RawPieces:
    """JSON text in pieces (each iteration makes them anew, :data:`_JSON_PIECE` rows at a time), written as they
    are (:meth:`Timeline._column_chunks`): a million-row column never exists as one string."""

    def __init__(self, pieces: Callable[[], Iterator[bytes]]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        return self._pieces()


def _coded_json(names: NameTable, name_id: np.ndarray, rank: np.ndarray) -> tuple[_RawPieces, _RawPieces]:
    """The JSON arrays of the ``id`` (``name@rN``) and ``name`` columns of rows ``names[name_id[i]]`` on
    ``rank[i]``: each distinct name is encoded once (one :func:`dumps_json` of the table, split at its
    ``","`` separators, which an encoded string cannot hold: its quotes are escaped), and the rows are joined
    from those pieces, :data:`_JSON_PIECE` rows at a time, so no per-row string is made and no column is
    held whole."""
    import numpy as np

    n = len(name_id)
    if not n:
        return _RawPieces(lambda: iter((b"[]",))), _RawPieces(lambda: iter((b"[]",)))
    enc = b"".join(_str_pieces(list(names)))[2:-2].decode("utf-8").split('","')  # the strings escaped, unquoted
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


#: ``meta`` entries the readers take as numbers (or lists / dicts of numbers), as text, as a list of texts, as a
#: flag (``meta`` is free-form otherwise; see :func:`_check_meta`).
_META_NUMBERS = ("host_call_end_s", "host_costs_us", "host_issue_s", "host_issue_uninstrumented_s",
                 "makespan_iters_s", "makespan_median_s", "makespan_uninstrumented_iters_s",
                 "makespan_uninstrumented_s", "timing_host_per_op_us", "uninstrumented_period_s", "iterations",
                 "warmup_uninstrumented", "max_connections", "t0_ns")


_META_TEXT = ("file", "timing", "note", "gpu_model", "host_costs", "critical_path_walk")


_META_TEXTS = ("warnings", "set", "critical_path_host_waits")


_META_FLAG = ("timed_graph",)


_META_SECTIONS = ("memory", "power", "pipeline", "check", "iteration", "host_waits")


#: ``meta`` entries that are lists of lists of op ids, no id twice (``graph_segments``: each CUDA graph segment's
#: ops, which ``compare`` gives one span, :func:`schedsim.compare.segment_windows`).
_META_ID_GROUPS = ("graph_segments",)


#: ``meta`` entries that are per rank an object of columns, each a list of numbers or nulls
#: (``host_thread_uninstrumented``: ``executor.clock.HOST_FIELDS`` per uninstrumented iteration, which ``compare``'s
#: drift warning reads, :func:`schedsim.compare.drift_host_thread`).
_META_RANK_COLUMNS = ("host_thread_uninstrumented",)


def _id_groups_ok(v: Any) -> bool:
    """Whether ``v`` is a list of non-empty lists of non-empty strings, no string twice over all of them."""
    if not isinstance(v, list) or not all(isinstance(g, list) and g for g in v):
        return False
    flat = [x for g in v for x in g]
    return all(isinstance(x, str) and x for x in flat) and len(set(flat)) == len(flat)


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
    :data:`_META_SECTIONS` an object, :data:`_META_ID_GROUPS` a list of lists of op ids (no id twice),
    :data:`_META_RANK_COLUMNS` a list of objects (one per rank) of lists of numbers.

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
        elif k in _META_ID_GROUPS:
            ok = _id_groups_ok(v)
        elif k in _META_RANK_COLUMNS:
            ok = v is None or (isinstance(v, list) and all(
                isinstance(r, dict) and all(isinstance(c, list) and _meta_numbers_ok(c) for c in r.values())
                for r in v))
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
    return _big_ints_kept(loads_json(data), data)


def _big_ints_kept(d: Any, data: bytes) -> Any:
    """``d``, the document parsed from ``data``, or ``data`` read again by the standard library when orjson
    parsed it and may have made a tag integer past 64 bits a float (:func:`_tags_may_hold_big_ints`)."""
    if _orjson is not None and _tags_may_hold_big_ints(d):
        return json.loads(data)
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
    """The row layout's handler for its head: a mapping that is not a dict (a pipeline's order) as a dict, a
    numpy array (a memory curve's steps) as its nested lists (the text the lists give), anything else as
    ``str(obj)``."""
    from collections.abc import Mapping

    import numpy as np

    if isinstance(obj, Mapping):
        return dict(obj)
    return obj.tolist() if isinstance(obj, np.ndarray) else str(obj)


def meta_equal(a: Any, b: Any) -> bool:
    """Whether two ``meta`` values are equal as timeline.json writes them: dicts by keys and values, lists and
    tuples item by item, a numpy array (a memory curve's steps, :mod:`schedsim.report.memory`) against an array
    or nested lists by shape and values (``np.array_equal``), anything else by ``==``."""
    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            x, y = np.asarray(a), np.asarray(b)
        except ValueError:  # ragged lists: not an array's values
            return False
        return x.shape == y.shape and x.dtype.kind in "biuf" and y.dtype.kind in "biuf" and bool(np.array_equal(x, y))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(meta_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(meta_equal, a, b))
    return bool(a == b)
