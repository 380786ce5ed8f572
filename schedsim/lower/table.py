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
        # single instances
        self.o_tmpl: list[int] = []
        self.o_rank: list[int] = []
        self.o_name: list[int] = []
        self.o_tags: list[int] = []
        self.o_stream: list[int] = []
        self.o_peer: list[int] = []
        self.o_batch: list[int] = []
        self.o_msg: list[int] = []
        self.o_deps: list[tuple[int, ...]] = []

    def template(self, proto: Op, deps: tuple[str, ...] | None = None) -> int:
        """Register ``proto``; ``deps`` (names) when every instance has the same ones."""
        self.templates.append(proto)
        if deps is None:
            self.tmpl_deps.append(None)
        else:
            names = self.names
            ids = names.ids
            self.tmpl_deps.append(tuple([ids[d] if d in ids else names(d) for d in deps]))
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

    def name_id(self, name: str) -> int:
        """The id of op name ``name`` (interned)."""
        return self.names(name)

    def add_ids(self, t: int, rank: int, name: int, tags: int, stream: int, deps: tuple[int, ...], peer: int,
                batch: int, msg: int) -> None:
        """One instance of template ``t`` from interned ids (name, tags, stream, dependency names, batch and
        message strings; -1 = none): what the pipeline emitter, which keeps ids, writes."""
        self.o_tmpl.append(t)
        self.o_rank.append(rank)
        self.o_name.append(name)
        self.o_tags.append(tags)
        self.o_stream.append(stream)
        self.o_peer.append(peer)
        self.o_batch.append(batch)
        self.o_msg.append(msg)
        self.o_deps.append(deps)

    def add_one(self, t: int, rank: int, name: str, tags: int, stream: str, deps: tuple[str, ...] = (),
                peer: int = -1, batch: str | None = None, msg: str | None = None) -> None:
        """One instance of template ``t``; ``tags`` is an id from :meth:`tag_id` or :meth:`new_tag_id`."""
        names = self.names
        ids = names.ids
        n = ids.get(name)
        if n is None:
            n = names(name)
        self.o_tmpl.append(t)
        self.o_rank.append(rank)
        self.o_name.append(n)
        self.o_tags.append(tags)
        st = self.streams.ids.get(stream)
        self.o_stream.append(self.streams(stream) if st is None else st)
        self.o_peer.append(peer)
        self.o_batch.append(-1 if batch is None else self.strs(batch))
        self.o_msg.append(-1 if msg is None else self.strs(msg))
        self.o_deps.append(tuple([ids[d] if d in ids else names(d) for d in deps]) if deps else ())

    def _tmpl_cols(self) -> dict[str, np.ndarray]:
        """Per template: name, tags, stream, peer, batch and message-tag ids."""
        names, tags, streams, strs = self.names, self.tags, self.streams, self.strs
        name, tag, stream, peer, batch, msg = [], [], [], [], [], []  # in this order: the ids are first-seen
        for o in self.templates:
            name.append(names(o.name))
            tag.append(tags(o.tags))
            stream.append(streams(o.stream))
            peer.append(-1 if o.peer is None else o.peer)
            batch.append(-1 if o.p2p_batch is None else strs(o.p2p_batch))
            msg.append(-1 if o.tag is None else strs(o.tag))
        return {k: np.array(v, I32).reshape(-1) for k, v in
                (("name", name), ("tags", tag), ("stream", stream), ("peer", peer), ("batch", batch), ("msg", msg))}

    def columns(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(cols, dep_op, dep_name)``: the per-instance columns in expansion order, and the declared
        dependencies as (instance, name id) pairs in declared order."""
        tc = self._tmpl_cols()
        b_t = np.array([t for t, _r in self._bulk], I32)
        b_n = np.array([len(r) for _t, r in self._bulk], np.int64)
        tm = np.concatenate([np.repeat(b_t, b_n), np.array(self.o_tmpl, I32)])
        nb = int(b_n.sum())
        ranks = [r.astype(I32, copy=False) for _t, r in self._bulk]
        cols = {"tmpl": tm, "rank": np.concatenate([*ranks, np.array(self.o_rank, I32)]) if ranks or self.o_rank
                else np.zeros(0, I32)}
        for key, lst in (("name", self.o_name), ("tags", self.o_tags), ("stream", self.o_stream),
                         ("peer", self.o_peer), ("batch", self.o_batch), ("msg", self.o_msg)):
            cols[key] = np.concatenate([tc[key][tm[:nb]], np.array(lst, I32)])
        # dependencies: bulk instances share their template's, single ones carry their own
        k_t = np.array([len(d or ()) for d in self.tmpl_deps], np.int64)
        flat_t = np.array([x for d in self.tmpl_deps for x in (d or ())], I32)
        cnt = k_t[tm[:nb]] if nb else np.zeros(0, np.int64)
        start = (np.cumsum(k_t) - k_t)[tm[:nb]] if nb else np.zeros(0, np.int64)
        tot = int(cnt.sum())
        off = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        dep_op_b = np.repeat(np.arange(nb), cnt)
        dep_nm_b = flat_t[np.repeat(start, cnt) + off] if tot else np.zeros(0, I32)
        k_o = np.array([len(d) for d in self.o_deps], np.int64)
        dep_op_o = nb + np.repeat(np.arange(len(self.o_deps)), k_o)
        dep_nm_o = np.array([x for d in self.o_deps for x in d], I32)
        return cols, np.concatenate([dep_op_b, dep_op_o]).astype(np.int64), np.concatenate([dep_nm_b, dep_nm_o])
