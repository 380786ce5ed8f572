"""Oracle: ``_Interner.append_new``, the eager form of :meth:`schedsim.lower.table._Interner.reserve_new` (the
training block's op names appended as strings, each made at once), which ``reserve_new`` replaced: the same ids and
span, the items in the list at once. ``tests/lower/test_lazy_lowering.py`` compares the two."""

from __future__ import annotations

from collections.abc import Callable
from itertools import count
from typing import Any

from schedsim.lower.table import _SPAN, _Interner


def append_new(it: _Interner, seq: list[Any], may_hold: Callable[[Any], bool]) -> int:
    """Give the items of ``seq`` the next ids of ``it``, in order, without a lookup each; returns the first
    (``reserve_new``'s contract); with a lazy run pending, the items are registered at once."""
    items = it._items
    base = len(items)
    items.extend(seq)
    if it._lazy:  # placeholders of lazy runs: these items registered now (no span over a reserved run)
        it._ids.update(zip(seq, count(base)))
        return base
    u = it._unreg
    if u and u[-1][3] is _SPAN and u[-1][2] is may_hold:
        u[-1] = (u[-1][0], len(items) - u[-1][0], may_hold, _SPAN)
    else:
        u.append((base, len(seq), may_hold, _SPAN))
    return base
