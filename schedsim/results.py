"""JSON form of the typed results (metrics, pipeline metrics, comparisons): one generic writer and reader.

A result is a tree of dataclasses, dicts, lists and tuples with str / int / float / bool / None leaves.
:func:`to_dict` writes it as the JSON object the outputs have always held (``timeline.json``'s
``metrics``, ``compare.json``): keys in field order, a field whose metadata has ``omit_none`` left out
while it is None. :func:`from_dict` reads such an object back into the dataclass, guided by the type
hints: dict keys typed ``int`` come back from JSON's strings, lists typed ``tuple`` become tuples.

>>> from dataclasses import dataclass, field
>>> @dataclass(frozen=True)
... class P:
...     per_rank: dict[int, float]
...     note: str | None = field(default=None, metadata={"omit_none": True})
>>> to_dict(P({0: 0.5}))
{'per_rank': {0: 0.5}}
>>> from_dict(P, {"per_rank": {"0": 0.5}, "note": "x"})
P(per_rank={0: 0.5}, note='x')
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar

__all__ = ["to_dict", "from_dict", "OMIT_NONE"]

T = TypeVar("T")

#: ``field(metadata=OMIT_NONE)``: the key is absent from the JSON form while the value is None.
OMIT_NONE = {"omit_none": True}

#: Leaf types: a list or tuple holding only these is copied in one step, not walked element by element
#: (a pipeline's per-rank action order holds ~10^5 strings).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def to_dict(obj: Any) -> Any:
    """The JSON-ready form of a result: dataclasses become dicts (field order), containers are copied."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = to_dict(v)
        return out
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return obj.copy() if _LEAVES.issuperset(map(type, obj)) else [to_dict(v) for v in obj]
    if isinstance(obj, tuple):
        return obj if _LEAVES.issuperset(map(type, obj)) else tuple(to_dict(v) for v in obj)
    return obj


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_dict(tp: type[T], data: Any) -> T:
    """Read ``data`` (as :func:`to_dict` wrote it, possibly through JSON) back as type ``tp``.

    Raises
    ------
    KeyError
        A required field is missing.
    TypeError, ValueError
        A value does not fit its type (e.g. a dict key typed int that is not a number).
    """
    return typing.cast(T, _read(tp, data))


#: Element types that :func:`_read` passes through as they are.
_PLAIN: frozenset[Any] = frozenset({Any, str, float, bool})


def _read(tp: Any, v: Any) -> Any:
    if v is None or tp is Any:
        return v
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _read(inner[0], v) if len(inner) == 1 else v
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        fields = dataclasses.fields(tp)
        missing = [f.name for f in fields if f.name not in v and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise KeyError(f"{tp.__name__}: missing {', '.join(missing)}")
        return tp(**{f.name: _read(hints[f.name], v[f.name]) for f in fields if f.name in v})
    if origin is dict or origin is collections.abc.Mapping:
        kt, vt = args or (Any, Any)
        return {(_read(kt, k) if kt is not str else k): _read(vt, x) for k, x in v.items()}
    if origin is list:
        (et,) = args or (Any,)
        if et in _PLAIN:  # what _read returns unchanged: one copy, not a call per element (long action lists)
            return list(v)
        return [_read(et, x) for x in v]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(args[0], x) for x in v)
        return tuple(_read(a, x) for a, x in zip(args, v, strict=True)) if args else tuple(v)
    if tp is int and isinstance(v, str):
        return int(v)
    return v
