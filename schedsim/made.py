"""``MadeOnRead``: the one base of schedsim's containers whose items are made on first read (the collectives'
keys of a lowered program, :class:`schedsim.lower.link.CollectiveKeys`; a pipeline's action texts,
:class:`schedsim.graph.info.ActionTexts`): read, compared, printed, copied and pickled as the plain container
that :meth:`MadeOnRead.made` returns."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["MadeOnRead"]


class MadeOnRead:
    """Reads, equality, ``repr`` and pickling through :meth:`made`, the plain container (made once, by the
    subclass). ``_PLAIN``: the plain container's type, which pickling rebuilds and equality compares with
    (``tuple`` or ``dict``); ``_COMPARES``: what equality accepts on the other side (``tuple`` or ``Mapping``).
    Unhashable, as the plain ``dict`` is (and a ``tuple`` of made strings would need making to hash)."""

    __slots__ = ()
    _PLAIN: ClassVar[type]
    _COMPARES: ClassVar[type]

    def made(self) -> Any:
        raise NotImplementedError

    def __getitem__(self, i: Any) -> Any:
        return self.made()[i]

    def __iter__(self) -> Any:
        return iter(self.made())

    def __len__(self) -> int:
        return len(self.made())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MadeOnRead):
            other = other.made()
        return self.made() == other if isinstance(other, self._COMPARES) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.made())

    def __reduce__(self) -> tuple[Any, ...]:
        return (self._PLAIN, (self.made(),))
