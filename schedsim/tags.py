"""Tag values and tag sets as the lowering and the timeline key them: :func:`tag_value_key` tells two tag values
apart as a JSON file does, :class:`TagSet` and :func:`tag_set` key an op's tags so that ``x: true`` stays apart from
``x: 1``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TagSet", "tag_set", "tag_value_key", "HOST_WAIT_TAG", "HOST_WAIT_AFTER_TAG", "HOST_WAIT_SCOPE_TAG",
           "HOST_WAIT_ON_TAG", "HOST_WAIT_TAGS", "SCOPES"]

# Rule host-wait's tags (:mod:`schedsim.sim.host_wait`: what they mean and how the GPU models read them).
#: Tag of an op launched right after a host synchronisation: the host time (µs) from the previous issue to the
#: synchronising call. The host then waits for the op's predecessors (or, :data:`HOST_WAIT_SCOPE_TAG`, its rank's
#: earlier ops) before spending :data:`HOST_WAIT_AFTER_TAG` and the op's own ``host_us``.
HOST_WAIT_TAG = "host_wait_before_us"
#: Tag beside :data:`HOST_WAIT_TAG`: the host time (µs) of the synchronising call after the awaited work ended
#: (its return; ``kind: synchronize``'s ``host_us``); 0 where absent.
HOST_WAIT_AFTER_TAG = "host_wait_after_us"
#: Tag beside :data:`HOST_WAIT_TAG`: what the host waits for: ``device`` (every op its rank issued before this one,
#: ``torch.cuda.synchronize()``), ``stream`` or ``ops`` (:data:`HOST_WAIT_ON_TAG`); absent: the op's
#: predecessors (an imported synchronisation).
HOST_WAIT_SCOPE_TAG = "host_wait_scope"
#: Tag beside :data:`HOST_WAIT_SCOPE_TAG` ``stream`` (a stream's name) or ``ops`` (op names, space-separated).
HOST_WAIT_ON_TAG = "host_wait_on"
HOST_WAIT_TAGS = (HOST_WAIT_TAG, HOST_WAIT_AFTER_TAG, HOST_WAIT_SCOPE_TAG, HOST_WAIT_ON_TAG)
#: :data:`HOST_WAIT_SCOPE_TAG`'s values and their codes in :attr:`schedsim.sim.host_wait.HostWaits.scope` (0: the
#: op's predecessors).
SCOPES = {"device": 1, "stream": 2, "ops": 2}



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
