"""The object-based build's input, for the oracle of the build-time faults: one
:class:`~schedsim.graph.ops.Op` per instance of the expansion's columns (:class:`schedsim.lower.link._Cols`),
dependencies as declared names, before any rule is checked (a Program cannot be made from a schedule that
breaks one). :func:`tests.oracle.object_build.graph_from_ops` on these raises the object-based build's error.
"""

from __future__ import annotations

from typing import Any

from schedsim.graph.ops import Op
from schedsim.kinds import P2P_KINDS

__all__ = ["unlinked_ops"]


def unlinked_ops(cols: Any) -> list[Op]:
    """Op objects of the unlinked instances of ``cols`` (a ``_Cols``), in program order."""
    t = cols.table
    names = t.names.items
    dep_names: list[list[str]] = [[] for _ in range(cols.N)]
    for o, n in zip(cols.dep_op.tolist(), cols.dep_name.tolist(), strict=True):
        dep_names[o].append(names[n])
    out = []
    c = {k: v.tolist() for k, v in cols.c.items()}
    strs, tags, streams = t.strs.items, t.tags.items, t.streams.items
    for i in range(cols.N):
        p = t.templates[c["tmpl"][i]]
        r, pe, b, m = c["rank"][i], c["peer"][i], c["batch"][i], c["msg"][i]
        p2p = p.kind in P2P_KINDS
        out.append(Op(names[c["name"][i]], r, p.kind, streams[c["stream"][i]], c["seq"][i], tuple(dep_names[i]),
                      ((r, pe) if p.kind == "send" else (pe, r)) if p2p else p.group, pe if p2p else p.peer,
                      p.root, p.nbytes, p.flops, p.dtype, p.m, p.n, p.k, p.batch, p.repeat, p.duration_s,
                      p.direction, None if m < 0 else strs[m], tags[c["tags"][i]], p.source, p.spec_index,
                      p.host_s, None if b < 0 else strs[b]))
    return out
