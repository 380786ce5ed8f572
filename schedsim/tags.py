"""Tag values and tag sets as the lowering and the timeline key them: :func:`tag_value_key` tells two tag values
apart as a JSON file does, :class:`TagSet` and :func:`tag_set` key an op's tags so that ``x: true`` stays apart from
``x: 1``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TagSet", "tag_set", "tag_value_key"]


def tag_value_key(v: Any) -> tuple[type, Any]:
    """What tells two tag values apart in a JSON file: the type and the value, a float by its text (``1``,
    ``1.0`` and ``true`` are equal in Python, and so are ``0.0`` and ``-0.0``)."""
    t = type(v)
    return (t, repr(v)) if t is float else (t, v)


class TagSet(tuple):
    """A tag set (sorted ``(key, value)`` pairs) that may hold a boolean or a float: equal only to a tag set of the
    same keys and values of the same types (:func:`tag_value_key`), so a table keyed by tag sets (the lowering's
    interner, a dict of tag sets) keeps ``x: true`` apart from ``x: 1``. Its hash is the tuple's (``1``, ``1.0``
    and ``True`` hash alike), so it may meet a plain tuple in one dict: the comparison then decides."""

    __slots__ = ()
    __hash__ = tuple.__hash__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple):
            return NotImplemented
        return len(self) == len(other) and all(
            type(p) is tuple and len(p) == 2 and p[0] == k and tag_value_key(p[1]) == tag_value_key(v)
            for (k, v), p in zip(self, other, strict=True))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __reduce__(self) -> tuple[Any, ...]:
        return TagSet, (tuple(self),)


_TYPED = (bool, float)


def tag_set(tags: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """An op's tags as the lowering keys them: ``tuple(sorted(tags.items()))``, a :class:`TagSet` when a value is
    a boolean or a float (then only values of the same type are equal)."""
    ts = tuple(sorted(tags.items()))
    return TagSet(ts) if any(type(v) in _TYPED for _k, v in ts) else ts
