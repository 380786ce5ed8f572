"""The column builder the expansions write into (hand-written ops as rows in bulk, pipeline ops one by one).

A *template* is an :class:`~schedsim.graph.ops.Op` holding what many instances share (kind, sizes, cost
inputs, dtype, group of a collective, source); an instance adds its rank, name, tags, stream, peer, NCCL
batch, message tag and dependencies, each stored as a small integer into an interned table. Written op
entries equal but for name, dependencies and tags share one template (:func:`template_key`), so a
``foreach`` of 62,500 iterations has as many templates as its body has distinct entries. Nothing here makes
one Python object per op instance except the pipeline's per-op list entries.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import count, filterfalse
from typing import Any

import numpy as np

from schedsim.graph.ops import Op, RankGroup

__all__ = ["Table", "template_key"]

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


def _intern_all(interner: _Interner, seq: list[Any]) -> np.ndarray:
    """Ids of every item of ``seq`` (int32), interning the new ones in first-seen order."""
    ids, items = interner.ids, interner.items
    new = list(filterfalse(ids.__contains__, dict.fromkeys(seq)))  # C-level loops, no Python bytecode per item
    ids.update(zip(new, count(len(items))))
    items.extend(new)
    return np.fromiter(map(ids.__getitem__, seq), I32, len(seq))


def template_key(p: Op) -> tuple[Any, ...]:
    """What instances of one shared template have in common: every field of ``p`` but its name, dependencies,
    tags and ``spec_index`` (each row carries its own; the template's name the first row that uses it). A
    collective's group is keyed by identity (one :class:`~schedsim.graph.ops.RankGroup` per distinct group in a
    lowering), other values by equality."""
    g = p.group
    return (p.kind, p.rank, p.stream, id(g) if isinstance(g, RankGroup) else g, p.peer, p.root, p.nbytes, p.flops,
            p.dtype, p.m, p.n, p.k, p.batch, p.repeat, p.duration_s, p.direction, p.tag, p.source, p.host_s,
            p.p2p_batch)


class Table:
    """Templates, interned tables and per-instance columns, appended in expansion order.

    Written ops come as *rows* (:meth:`add_rows`: one op entry each, instanced on its ranks, its template shared
    through :meth:`shared_template`) before single instances (:meth:`add_ids` / :meth:`add_one`: the
    pipeline's ops); :meth:`columns` concatenates them.
    """

    def __init__(self) -> None:
        self.templates: list[Op] = []
        self.names = _Interner()
        self.tags = _Interner()
        self.streams = _Interner()
        self.strs = _Interner()  # p2p batch names and message tags
        self.tags(())
        self._shared: dict[tuple[Any, ...], int] = {}
        self._rows: list[tuple[np.ndarray, Any, np.ndarray, np.ndarray, Any, Any]] = []
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

    def template(self, proto: Op) -> int:
        """Register ``proto``; returns its id."""
        self.templates.append(proto)
        return len(self.templates) - 1

    def shared_template(self, proto: Op) -> int:
        """The id of the template that written ops equal to ``proto`` share (:func:`template_key`): registered
        on first use, without dependencies (each row carries its own)."""
        key = template_key(proto)
        t = self._shared.get(key)
        if t is None:
            t = self._shared[key] = self.template(replace(proto, deps=()) if proto.deps else proto)
        return t

    def add_rows(self, tmpl: np.ndarray, names: Any, dep_cnt: np.ndarray, deps: Any, ranks: Any, tags: Any) -> None:
        """Written op entries (rows), each instanced on its ranks: ``tmpl`` int32[R] (from
        :meth:`shared_template`), ``names`` (R str), ``dep_cnt`` int64[R] and ``deps`` (the rows' dependency
        names, concatenated), ``ranks`` an int (every row on ranks 0..ranks-1) or a list of R int32 arrays,
        ``tags`` (R tag sets, each ``tuple(sorted(tags.items()))``)."""
        seq = deps.tolist() if isinstance(deps, np.ndarray) else list(deps)
        dep_ids = _intern_all(self.names, seq) if seq else np.zeros(0, I32)
        self._rows.append((np.asarray(tmpl, I32), names, np.asarray(dep_cnt, np.int64), dep_ids, ranks, tags))

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

    def uniform(self) -> int | None:
        """W when the table holds only rows that each run on ranks 0..W-1 (no single instances): then every
        rank runs the same ops in the same order, and :func:`schedsim.lower.link.link` links one rank's."""
        ws = [r for _t, _n, _c, _d, r, _g in self._rows]
        if self.o_tmpl or not ws or not all(isinstance(w, (int, np.integer)) and w == ws[0] for w in ws):
            return None
        return int(ws[0])

    def columns(self, once: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(cols, dep_op, dep_name)``: the per-instance columns in expansion order, and the declared
        dependencies as (instance, name id) pairs in declared order. With ``once``, each row is instanced once,
        on rank 0 (see :meth:`uniform`)."""
        def seq(x: Any) -> list[Any]:
            return x.tolist() if isinstance(x, np.ndarray) else list(x)

        # interned now, in row order, as the templates' names and tags were (after the pipeline's)
        row_names = [_intern_all(self.names, seq(nm)) for _t, nm, _c, _d, _r, _g in self._rows]
        row_tags = [_intern_all(self.tags, seq(tg)) for _t, _n, _c, _d, _r, tg in self._rows]
        tc = self._tmpl_cols()
        tm_p, rank_p, name_p, tag_p, dop_p, dnm_p = [], [], [], [], [], []
        base = 0
        for (tmpl, _nm, cnt, dep_ids, ranks, _tg), nid, tid in zip(self._rows, row_names, row_tags, strict=True):
            R = len(tmpl)
            if once:
                per = np.ones(R, np.int64)
                rank_p.append(np.zeros(R, I32))
            elif isinstance(ranks, (int, np.integer)):
                per = np.full(R, int(ranks), np.int64)
                rank_p.append(np.tile(np.arange(ranks, dtype=I32), R))
            else:
                per = np.array([len(r) for r in ranks], np.int64)
                rank_p.append(np.concatenate([np.asarray(r, I32) for r in ranks]) if R else np.zeros(0, I32))
            tm_p.append(np.repeat(tmpl, per))
            name_p.append(np.repeat(nid, per))
            tag_p.append(np.repeat(tid, per))
            n = int(per.sum())
            row = np.repeat(np.arange(R), per)
            icnt = cnt[row]
            tot = int(icnt.sum())
            if tot:
                dptr = np.cumsum(cnt) - cnt
                off = np.arange(tot) - np.repeat(np.cumsum(icnt) - icnt, icnt)
                dop_p.append(base + np.repeat(np.arange(n), icnt))
                dnm_p.append(dep_ids[np.repeat(dptr[row], icnt) + off])
            base += n
        tm_p.append(np.array(self.o_tmpl, I32))
        rank_p.append(np.array(self.o_rank, I32))
        tm = np.concatenate(tm_p).astype(I32, copy=False)
        cols = {"tmpl": tm, "rank": np.concatenate(rank_p).astype(I32, copy=False)}
        nb = base
        for key, lst in (("name", self.o_name), ("tags", self.o_tags), ("stream", self.o_stream),
                         ("peer", self.o_peer), ("batch", self.o_batch), ("msg", self.o_msg)):
            rows = {"name": name_p, "tags": tag_p}.get(key)
            head = np.concatenate(rows) if rows else tc[key][tm[:nb]]
            cols[key] = np.concatenate([head.astype(I32, copy=False), np.array(lst, I32)])
        k_o = np.array([len(d) for d in self.o_deps], np.int64)
        dop_p.append(nb + np.repeat(np.arange(len(self.o_deps)), k_o))
        dnm_p.append(np.array([x for d in self.o_deps for x in d], I32))
        return cols, np.concatenate(dop_p).astype(np.int64), np.concatenate(dnm_p).astype(I32)
