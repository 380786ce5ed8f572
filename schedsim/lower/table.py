"""The column builder the expansions write into (hand-written ops in bulk, pipeline ops one by one).

A *template* is an :class:`~schedsim.graph.ops.Op` holding what many instances share (kind, sizes, cost
inputs, dtype, group of a collective, source); an instance adds its rank, name, tags, stream, peer, NCCL
batch, message tag and dependencies, each stored as a small integer into an interned table. Nothing
here makes one Python object per op instance except the pipeline's per-op list entries.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedsim.graph.ops import Op

__all__ = ["Table"]

I32 = np.int32


class _Interner:
    """Strings (or any hashable) to dense ids, in first-seen order."""

    __slots__ = ("ids", "items")

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.items: list[Any] = []

    def __call__(self, x: Any) -> int:
        i = self.ids.get(x)
        if i is None:
            i = self.ids[x] = len(self.items)
            self.items.append(x)
        return i


def _bulk_ids(interner: _Interner, values: list[Any]) -> list[int]:
    """Ids of ``values`` in ``interner`` (None -> -1), registering new ones in first-seen order."""
    ids, items = interner.ids, interner.items
    new = [x for x in dict.fromkeys(values) if x is not None and x not in ids]
    ids.update(zip(new, range(len(items), len(items) + len(new)), strict=True))
    items.extend(new)
    if None in values:
        look = dict(ids)
        look[None] = -1
        return list(map(look.__getitem__, values))
    return list(map(ids.__getitem__, values))


class Table:
    """Templates, interned tables and per-instance columns, appended in expansion order.

    Bulk blocks (:meth:`add_bulk`: one template on many ranks, the hand-written ops) come before
    single instances (:meth:`add_one`: the pipeline's ops); :meth:`columns` concatenates them.
    """

    def __init__(self) -> None:
        self.templates: list[Op] = []
        self.tmpl_deps: list[tuple[int, ...] | None] = []  # dep name ids shared by every instance, or None
        self.names = _Interner()
        self.tags = _Interner()
        self.streams = _Interner()
        self.strs = _Interner()  # p2p batch names and message tags
        self.tags(())
        self._bulk: list[tuple[int, np.ndarray]] = []
        self.rows: list[tuple[Any, ...]] = []  # single instances, interned when the columns are made

    def template(self, proto: Op, deps: tuple[str, ...] | None = None) -> int:
        """Register ``proto``; ``deps`` (names) when every instance has the same ones."""
        self.templates.append(proto)
        self.tmpl_deps.append(None if deps is None else tuple(self.names(d) for d in deps))
        return len(self.templates) - 1

    def add_bulk(self, t: int, ranks: np.ndarray) -> None:
        """Instances of template ``t`` on ``ranks``, with the template's name, tags, stream and deps."""
        self._bulk.append((t, ranks))

    def tag_id(self, tags: tuple) -> int:  # type: ignore[type-arg]
        """The id of a tag set, shared by every op that has it."""
        return self.tags(tags)

    def new_tag_id(self, tags: tuple) -> int:  # type: ignore[type-arg]
        """A fresh id for a tag set no other op has (a send's or recv's, which names its message): no lookup,
        so the tuple is never hashed."""
        self.tags.items.append(tags)
        return len(self.tags.items) - 1

    def add_one(self, t: int, rank: int, name: str, tags: int, stream: str, deps: tuple[str, ...] = (),
                peer: int = -1, batch: str | None = None, msg: str | None = None) -> None:
        """One instance of template ``t``; ``tags`` is an id from :meth:`tag_id` or :meth:`new_tag_id`."""
        self.rows.append((t, rank, name, tags, stream, deps, peer, batch, msg))

    def _single(self) -> dict[str, Any]:
        """The single instances' columns (names, tags, streams and strings interned in bulk)."""
        rows = self.rows
        if not rows:
            return {k: [] for k in ("tmpl", "rank", "name", "tags", "stream", "peer", "batch", "msg", "deps")}
        t, r, nm, tg, st, deps, pe, b, m = (list(c) for c in zip(*rows, strict=True))
        out: dict[str, Any] = {"tmpl": t, "rank": r, "peer": pe, "tags": tg}
        flat = [d for ds in deps for d in ds]
        out["name"] = _bulk_ids(self.names, nm + flat)[:len(nm)]
        ids = self.names.ids
        out["deps"] = [tuple([ids[d] for d in ds]) if ds else () for ds in deps]
        out["stream"] = _bulk_ids(self.streams, st)
        out["batch"] = _bulk_ids(self.strs, b)
        out["msg"] = _bulk_ids(self.strs, m)
        return out

    def _tmpl_cols(self) -> dict[str, np.ndarray]:
        """Per template: name, tags, stream, peer, batch and message-tag ids."""
        tp = self.templates
        n = len(tp)
        out = {k: np.full(n, -1, I32) for k in ("name", "tags", "stream", "peer", "batch", "msg")}
        for i, o in enumerate(tp):
            out["name"][i] = self.names(o.name)
            out["tags"][i] = self.tags(o.tags)
            out["stream"][i] = self.streams(o.stream)
            if o.peer is not None:
                out["peer"][i] = o.peer
            if o.p2p_batch is not None:
                out["batch"][i] = self.strs(o.p2p_batch)
            if o.tag is not None:
                out["msg"][i] = self.strs(o.tag)
        return out

    def columns(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(cols, dep_op, dep_name)``: the per-instance columns in expansion order, and the declared
        dependencies as (instance, name id) pairs in declared order."""
        tc = self._tmpl_cols()
        b_t = np.array([t for t, _r in self._bulk], I32)
        b_n = np.array([len(r) for _t, r in self._bulk], np.int64)
        one = self._single()
        tm = np.concatenate([np.repeat(b_t, b_n), np.array(one["tmpl"], I32)])
        nb = int(b_n.sum())
        ranks = [r.astype(I32, copy=False) for _t, r in self._bulk]
        cols = {"tmpl": tm, "rank": np.concatenate([*ranks, np.array(one["rank"], I32)])}
        for key in ("name", "tags", "stream", "peer", "batch", "msg"):
            cols[key] = np.concatenate([tc[key][tm[:nb]], np.array(one[key], I32)])
        # dependencies: bulk instances share their template's, single ones carry their own
        k_t = np.array([len(d or ()) for d in self.tmpl_deps], np.int64)
        flat_t = np.array([x for d in self.tmpl_deps for x in (d or ())], I32)
        cnt = k_t[tm[:nb]] if nb else np.zeros(0, np.int64)
        start = (np.cumsum(k_t) - k_t)[tm[:nb]] if nb else np.zeros(0, np.int64)
        tot = int(cnt.sum())
        off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        dep_op_b = np.repeat(np.arange(nb), cnt)
        dep_nm_b = flat_t[np.repeat(start, cnt) + off] if tot else np.zeros(0, I32)
        k_o = np.array([len(d) for d in one["deps"]], np.int64)
        dep_op_o = nb + np.repeat(np.arange(len(one["deps"])), k_o)
        dep_nm_o = np.array([x for d in one["deps"] for x in d], I32)
        return cols, np.concatenate([dep_op_b, dep_op_o]).astype(np.int64), np.concatenate([dep_nm_b, dep_nm_o])
