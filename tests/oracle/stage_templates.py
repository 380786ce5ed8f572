"""Oracle: the training block's stage op templates as they were registered before the layers shared them
(:class:`schedsim.lower.stage_templates.StageTemplates`): one template for every (stage, phase, entry) of a
stage's op lists, and one for every collective or ring send/recv entry at each
:meth:`~schedsim.lower.training._Ranks.stage_protos` call, named as the entry (so ``l0.qkv`` and ``l1.qkv`` had a
template each, equal but for the collectives' names). ``tests/lower/test_training_lowering_runs.py`` holds the
package's lowering to the same ops and the same predictions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from schedsim.graph.ops import Op
from schedsim.lower import stage_templates as st


def _stage(self: Any, o: dict[str, Any], k: int, phase: str) -> int:
    """A template of its own for the entry (validated once per process, as :func:`st.stage_op` keeps it)."""
    key = st.stage_key(o, phase)
    try:
        hash(key)
    except TypeError:
        return int(self.table.template(st._stage_proto(self.spec, o, k, phase)))
    return int(self.table.template(st.stage_op(self.spec, o, k, phase, key)))


def _comm(self: Any, o: dict[str, Any], grp: tuple[int, ...]) -> int:
    """A template of its own for a collective entry over ``grp`` or (``()``) a ring send/recv, named as the entry."""
    op = Op(name=o["name"], rank=grp[0], kind=o["kind"], stream="compute", seq=0, group=grp, nbytes=o["bytes"],
            dtype=o["dtype"], source="training") if grp else \
        Op(name=o["name"], rank=0, kind=o["kind"], stream="", seq=0, nbytes=o["bytes"], dtype=o["dtype"],
           source="training")
    return int(self.table.template(op))


@contextmanager
def per_entry_templates() -> Iterator[None]:
    """Within it, lowerings register a template per stage op entry as before (module docstring)."""
    saved = st.StageTemplates.stage, st.StageTemplates.comm
    st.StageTemplates.stage, st.StageTemplates.comm = _stage, _comm  # type: ignore[method-assign]
    try:
        yield
    finally:
        st.StageTemplates.stage, st.StageTemplates.comm = saved  # type: ignore[method-assign]


def renamed_plain(ops: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """:func:`schedsim.lower.training._renamed` as it was: every copy a plain dict (no
    :class:`~schedsim.lower.stage_templates.Renamed`), so each copy's template is found by its own key."""
    out = []
    for o in ops:
        o = {**o, "name": prefix + o["name"]}
        if "after" in o:
            o.update(after=[prefix + n for n in o["after"]],
                     nccl_group=prefix + o["nccl_group"] if o.get("nccl_group") else "",
                     msg=prefix + o["msg"] if o.get("msg") else "")
        out.append(o)
    return out
