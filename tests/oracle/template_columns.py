"""Oracle: :meth:`schedsim.lower.table.Table._tmpl_cols` as it was before it interned each column in one call:
template by template, each interner called on the template's name, tag set, stream, then its batch and message
strings. ``tests/lower/test_lazy_lowering.py`` holds the package's columns and interners equal to these."""

from __future__ import annotations

from typing import Any

import numpy as np


def template_columns_one_by_one(table: Any) -> dict[str, np.ndarray]:
    """Per template: name, tags, stream, peer, batch and message-tag ids (int32), interned template by template."""
    names, tags, streams, strs = table.names, table.tags, table.streams, table.strs
    name, tag, stream, peer, batch, msg = [], [], [], [], [], []  # in this order: the ids are first-seen
    for o in table.templates:
        name.append(names(o.name))
        tag.append(tags(o.tags))
        stream.append(streams(o.stream))
        peer.append(-1 if o.peer is None else o.peer)
        batch.append(-1 if o.p2p_batch is None else strs(o.p2p_batch))
        msg.append(-1 if o.tag is None else strs(o.tag))
    return {k: np.array(v, np.int32).reshape(-1) for k, v in
            (("name", name), ("tags", tag), ("stream", stream), ("peer", peer), ("batch", batch), ("msg", msg))}
