"""The critical path of a simulated timeline as row numbers: :class:`PathIds`, a read-only sequence of op ids
(``name@r<rank>``, :func:`schedsim.graph.ops.format_op_id`) that holds the path's rows (int64, in path order) and
the names they are made from, and makes an id string only where one is read. timeline.json writes its text a few
thousand ids at a time (:meth:`PathIds.json_pieces`), so a long path is never held as strings (figures in
docs/validation.md, fast38s)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np

    from schedsim.lower.program import OpNames, Program

#: Ids made per step when the whole path is iterated (a few thousand strings alive at a time, not the path's).
_STEP = 4096


class PathIds(Sequence[str]):
    """Op ids of the rows ``rows`` (int64, shape (n,), in path order) of the program ``names`` (an
    :class:`~schedsim.lower.program.OpNames` or :class:`~schedsim.lower.program.Program`: ``name_id``, ``rank``,
    ``op_names(rows)``, ``name_table``). Equal to the list of its ids (and to another ``PathIds`` of the same ids);
    a slice is a list; pickled as that list. Read-only."""

    __slots__ = ("names", "rows")

    def __init__(self, names: OpNames | Program, rows: np.ndarray) -> None:
        self.names, self.rows = names, rows

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return self.ids_of(self.rows[i])
        return self.ids_of(self.rows[[i]])[0]  # an index past the end raises IndexError, as a list's

    def __iter__(self) -> Iterator[str]:
        for k in range(0, len(self.rows), _STEP):
            yield from self.ids_of(self.rows[k:k + _STEP])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PathIds):
            if other.names is self.names and len(other.rows) == len(self.rows) and \
                    bool((other.rows == self.rows).all()):
                return True
            return list(self) == list(other)
        if isinstance(other, list):
            return len(other) == len(self) and list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a list's

    def __repr__(self) -> str:
        return f"PathIds({len(self)} ops)"

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)

    def ids_of(self, rows: np.ndarray) -> list[str]:
        """The ids (``name@r<rank>``) of ``rows`` (ints) of the program."""
        p = self.names
        rank = p.rank[rows].tolist()
        tails = {r: f"@r{r}" for r in set(rank)}  # format_op_id("", r): joined, not formatted per op
        return list(map(str.__add__, p.op_names(rows), map(tails.__getitem__, rank)))

    def rank_list(self) -> list[int]:
        """Each op's rank, in path order."""
        return self.names.rank[self.rows].tolist()

    def json_pieces(self) -> Iterator[bytes]:
        """``dumps_json(list(self))`` as timeline.json's writer gives a list of ids
        (:func:`~schedsim.sim.timeline_json._json_pieces`), the same bytes: the ids made :data:`_LIST_PIECE` at a
        time and each piece's text kept (as bytes, smaller than the strings), then written; a
        path holding an id that is no valid UTF-8 (a lone surrogate, which orjson refuses) in one dump of the whole
        list, whose standard-library fallback escapes every non-ASCII character of the list."""
        from schedsim.io import dumps_json
        from schedsim.sim.timeline_json import _LIST_PIECE, _utf8

        rows, n = self.rows, len(self.rows)
        if n <= _LIST_PIECE:
            yield dumps_json(list(self))
            return
        texts: list[bytes] = []
        for k in range(0, n, _LIST_PIECE):
            ids = self.ids_of(rows[k:k + _LIST_PIECE])
            if not _utf8(ids):
                del texts, ids
                yield dumps_json(list(self))
                return
            texts.append(dumps_json(ids)[1:-1])  # a copy: orjson's bytes keep ~254 bytes of room an entry
        yield b"["
        for k, t in enumerate(texts):
            if k:
                yield b","
            yield t
        yield b"]"
