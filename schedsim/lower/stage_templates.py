"""The templates of the training block's stage op lists (:mod:`schedsim.lower.training`): each distinct entry of
a layer's kernel lists validated once per process (:func:`stage_op`), and in a lowering one template per distinct
entry but for its name and per collective or ring send/recv shape (:class:`StageTemplates`), which the layers'
renamed copies of an entry (``l0.qkv``, ``l1.qkv``) share: a Program's op takes its name, stream and peer from its
own columns, not its template's. The per-entry registration it replaced is the oracle
``tests/oracle/stage_templates.py``. The stage chunks' lists are made once per distinct chunk shape
(:func:`per_chunk_shape`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from schedsim.graph.ops import Op
from schedsim.lower.pipeline import _stage_proto
from schedsim.lower.table import Table
from schedsim.spec.model import ScheduleSpec

#: :func:`stage_op`'s templates by :func:`stage_key` (a process's lowerings share them: ``schedsim search`` lowers
#: hundreds of configurations whose layers hold the same kernels); emptied when it reaches :data:`STAGE_OPS_KEPT`
#: entries.
_STAGE_OPS: dict[tuple[Any, ...], Op] = {}
STAGE_OPS_KEPT = 20_000


class Renamed(dict):  # type: ignore[type-arg]
    """A stage op entry that is entry ``src`` but for its name (:func:`schedsim.lower.training._renamed`: a layer's
    copy, ``l0.qkv`` of ``qkv``): its :func:`stage_key` is ``src``'s, so :meth:`StageTemplates.stage` finds its
    template by ``src`` (one lookup per entry the layers share, not a key made per copy)."""

    __slots__ = ("src",)

    def __init__(self, src: dict[str, Any], name: str) -> None:
        super().__init__(src)
        self["name"] = name
        self.src = src


def stage_key(o: dict[str, Any], phase: str) -> tuple[Any, ...]:
    """The key of stage op entry ``o`` of ``phase``: its items but its name, with their types, in order (the
    template does not depend on the name, which ``_stage_proto`` validates as ``x``; the types: 1, 1.0 and True
    differ). Unhashable where a value is a list or a dict (a lookup raises TypeError)."""
    d = o.copy()
    d.pop("name", None)
    return (phase, tuple(d.items()), tuple(map(type, d.values())))


def stage_op(spec: ScheduleSpec, o: dict[str, Any], k: int, phase: str, key: tuple[Any, ...]) -> Op:
    """:func:`~schedsim.lower.pipeline._stage_proto` of entry ``o`` (its ``k``-th op of ``phase``; ``key``:
    :func:`stage_key`, hashable), validated once per process for each key: the lowerings share the template
    object (templates are not changed once registered). An entry that fails (raising the error that names ``k``)
    is validated each time."""
    got = _STAGE_OPS.get(key)
    if got is None:
        got = _stage_proto(spec, o, k, phase)
        if len(_STAGE_OPS) >= STAGE_OPS_KEPT:
            _STAGE_OPS.clear()
        _STAGE_OPS[key] = got
    return got


class StageTemplates:
    """The stage op lists' template ids of one lowering into ``table`` (module docstring), each registered at its
    first use, so the template table does not depend on what :data:`_STAGE_OPS` holds."""

    def __init__(self, spec: ScheduleSpec, table: Table) -> None:
        self.spec, self.table = spec, table
        self.ids: dict[tuple[Any, ...], int] = {}  # stage_key -> template id
        self.comm_ids: dict[tuple[Any, ...], int] = {}  # a collective's or ring send/recv's shape -> template id
        self.own = 0  # how many entries got a template of their own (an unhashable value)
        # (id of a Renamed entry's src, phase) -> (src, its template id): the src kept, so the id names it
        self.by_src: dict[tuple[int, str], tuple[dict[str, Any], int]] = {}

    def stage(self, o: dict[str, Any], k: int, phase: str) -> int:
        """The template id of compute entry ``o`` (the ``k``-th of ``phase``); an entry with an unhashable value
        (a list or dict) gets a template of its own. A :class:`Renamed` entry takes its ``src``'s template, the
        one its own key gives (found once per ``src`` and phase)."""
        src = o.src if type(o) is Renamed else None
        if src is not None:
            got = self.by_src.get((id(src), phase))
            if got is not None and got[0] is src:
                return got[1]
            own = self.own
            tid = self._stage(o, k, phase)
            if self.own == own:
                self.by_src[(id(src), phase)] = (src, tid)
            return tid
        return self._stage(o, k, phase)

    def _stage(self, o: dict[str, Any], k: int, phase: str) -> int:
        """:meth:`stage` by the entry's own key."""
        key = stage_key(o, phase)
        try:
            got = self.ids.get(key)
        except TypeError:  # a list or dict value
            self.own += 1
            return self.table.template(_stage_proto(self.spec, o, k, phase))
        if got is None:
            got = self.ids[key] = self.table.template(stage_op(self.spec, o, k, phase, key))
        return got

    def comm(self, o: dict[str, Any], grp: tuple[int, ...]) -> int:
        """The template id of entry ``o``, a collective over ``grp`` on stream ``compute`` (``()``: a ring send or
        recv, on rank 0 and stream "", whose peer is the op's), one per (kind, group, bytes, dtype); the template
        is named as the first entry of its shape."""
        b = o["bytes"]
        key = (o["kind"], grp, b, type(b), o["dtype"])
        got = self.comm_ids.get(key)
        if got is None:
            got = self.comm_ids[key] = self.table.template(Op(
                name=o["name"], rank=grp[0] if grp else 0, kind=o["kind"], stream="compute" if grp else "", seq=0,
                group=grp, nbytes=b, dtype=o["dtype"], source="training"))
        return got



def per_chunk_shape(make: Callable[[int], Any], layers: Sequence[int]) -> dict[int, Any]:
    """``make(s)`` for every stage chunk ``s`` of a pipeline whose chunks hold ``layers[s]`` layers, made once per
    distinct (layers, first, last) and shared by the chunks alike: :func:`~schedsim.lower.training.stage_lists` of a
    chunk depends on its index only through those (its layer count, the embedding on the first chunk and the head
    on the last, the pipeline gathers, which read whether it is first or last), so the chunks alike share one dict
    of lists (read only)."""
    made: dict[tuple[int, bool, bool], Any] = {}
    out = {}
    for s, n in enumerate(layers):
        key = (n, s == 0, s == len(layers) - 1)
        if key not in made:
            made[key] = make(s)
        out[s] = made[key]
    return out
