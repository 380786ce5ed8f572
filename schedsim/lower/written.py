"""Hand-written ops (the spec's ``ops:``) to templates: one template per spec op, instanced on its ranks in bulk."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np

from schedsim.errors import GraphError
from schedsim.graph.ops import Op, RankGroup, tag_set
from schedsim.kinds import KINDS
from schedsim.lower.table import Table
from schedsim.spec.model import (
    CollectiveOp,
    ComputeOp,
    MatmulOp,
    RecvOp,
    ScheduleSpec,
    SendOp,
    SpecOp,
    SynchronizeOp,
)
from schedsim.units import DTYPE_BYTES

__all__ = ["op_instance", "add_written"]



def op_instance(s: SpecOp, r: int, seq: int, *, stream: str, group: tuple[int, ...], tags: tuple,
                source: str = "", spec_index: int = -1) -> Op:
    """The :class:`Op` of spec op ``s`` (a pydantic op model) on rank ``r``, at program position ``seq``.

    Sizes become bytes and FLOP: a matmul does ``2·batch·m·n·k`` FLOP and moves A, B and C once
    (``batch·(m·k + k·n + m·n)`` elements); a ``buffer: shard`` collective's message is the shard times the
    group size (the nccl-tests convention).
    """
    kind = s.kind
    common: dict[str, Any] = dict(name=s.name, rank=r, kind=kind, stream=stream, seq=seq, deps=tuple(s.deps),
                                  tags=tags, source=source, spec_index=spec_index, host_s=s.host_us * 1e-6)
    if s.graph is not None:
        common["graph"] = s.graph
    measured = getattr(s, "duration_us", None)  # a copy, collective or p2p with a measured duration (a replay)
    if measured is not None and KINDS[kind].resource != "compute":
        common["duration_s"] = measured * 1e-6
    if isinstance(s, MatmulOp):
        b = s.batch
        mm, nn, kk = s.m, s.n, s.k
        eb = DTYPE_BYTES[s.dtype]
        return Op(**common, m=mm, n=nn, k=kk, batch=b, dtype=s.dtype, repeat=s.repeat,
                  flops=2.0 * b * mm * nn * kk, nbytes=float(b * (mm * kk + kk * nn + mm * nn) * eb))
    if isinstance(s, ComputeOp):
        return Op(**common, flops=float(s.flops or 0.0), nbytes=float(s.bytes or 0.0),
                  dtype=s.dtype, repeat=s.repeat,
                  duration_s=None if s.duration_us is None else s.duration_us * 1e-6)
    if isinstance(s, CollectiveOp):
        splits = s.splits_of(r, tuple(group)) if s.send_bytes is not None else None
        if splits is not None:  # per-peer sizes: nccl-tests' size is this rank's larger buffer
            return Op(**common, group=group, nbytes=max(sum(splits[0]), sum(splits[1])), dtype=s.dtype,
                      root=s.root, splits=splits)
        size = s.size_bytes()
        if s.buffer == "shard":
            size *= len(group)
        return Op(**common, group=group, nbytes=float(size), dtype=s.dtype, root=s.root)
    if isinstance(s, (SendOp, RecvOp)):
        pair = (r, s.peer) if isinstance(s, SendOp) else (s.peer, r)
        return Op(**common, group=pair, peer=s.peer, nbytes=float(s.size_bytes()), dtype=s.dtype,
                  tag=s.tag, p2p_batch=s.p2p_batch, comm=None if s.group is None else tuple(sorted(s.group)))
    return Op(**common, nbytes=float(s.size_bytes()), direction=s.direction, dtype=s.dtype)


def sync_tags(s: SynchronizeOp) -> dict[str, Any]:
    """The tags of rule host-wait (:mod:`schedsim.sim.host_wait`) that a ``synchronize`` entry puts on its ranks'
    next op: the host reaches the call right after its previous one (``host_wait_before_us`` 0), waits for the
    scope's work and returns ``host_us`` later."""
    from schedsim.tags import HOST_WAIT_AFTER_TAG, HOST_WAIT_ON_TAG, HOST_WAIT_SCOPE_TAG, HOST_WAIT_TAG

    tags: dict[str, Any] = {HOST_WAIT_TAG: 0.0, HOST_WAIT_SCOPE_TAG: "ops" if s.scope == "events" else s.scope}
    if s.host_us:
        tags[HOST_WAIT_AFTER_TAG] = s.host_us
    if s.scope == "stream":
        tags[HOST_WAIT_ON_TAG] = s.stream
    elif s.scope == "events":
        tags[HOST_WAIT_ON_TAG] = " ".join(s.deps)
    return tags


class _Syncs:
    """The ``synchronize`` entries of :func:`add_written` (rule host-wait): per rank the one not yet put on an op,
    and the op names each rank issued so far (an ``events`` entry's ``deps`` must be among them)."""

    def __init__(self, every: tuple[int, ...], active: bool) -> None:
        self.every, self.active = every, active  # active: the spec has one (else rows() is the rows as they are)
        self.pending: dict[int, SynchronizeOp] = {}
        self.src: dict[int, str] = {}  # the pending entry's source, per rank
        self.names_on: dict[int, set[str]] = defaultdict(set)
        self.call_on: dict[int, tuple[str, str]] = {}  # the rank's last op's graph or p2p_batch (one host call)

    def take(self, s: Any, src: str) -> bool:
        """Record ``s`` where it is a ``synchronize`` entry (True), checked: one per rank between two ops, its
        ``deps`` written before it on each of its ranks."""
        if not self.active or not isinstance(s, SynchronizeOp):
            return False
        for r in s.ranks if s.ranks is not None else self.every:
            if r in self.pending:
                raise GraphError(f"{src}: synchronize {s.name!r} follows synchronize {self.pending[r].name!r} on "
                                 f"rank {r} with no op between them", fix="keep one of them (scope device waits for "
                                 "all the rank's work)")
            missing = [d for d in s.deps if d not in self.names_on.get(r, ())]
            if missing:
                raise GraphError(f"{src}: synchronize {s.name!r} on rank {r} waits for op {missing[0]!r}, which rank "
                                 f"{r} does not issue before it", fix="name ops written before the synchronize on "
                                 "the same rank (event.synchronize waits for work already issued)")
            self.pending[r], self.src[r] = s, src
        return True

    def entries(self, items: list[Any], sources: list[str]) -> Any:
        """``(item, source, k)`` for each item of ``items`` that is not a ``synchronize`` entry (those are taken,
        :meth:`take`), ``k`` the entries taken just before it."""
        k = 0
        for s, src in zip(items, sources, strict=True):
            if self.take(s, src):
                k += 1
                continue
            yield s, src, k
            k = 0

    def rows(self, s: Any, ranks: list[int] | None, each: list[Any], tags: tuple
             ) -> list[tuple[list[int] | None, tuple]]:
        """The rows of op entry ``s`` on ``ranks`` (None: every rank), one per element of ``each`` (its rank lists),
        with tags ``tags``: split where a ``synchronize`` is pending on some of a row's ranks, one row per group of
        ranks with the same pending entry, each with that entry's host-wait tags (:func:`sync_tags`) added; those
        entries are then used up.

        Raises
        ------
        GraphError
            A pending entry between two ops of one host call: one CUDA graph (``graph:``; CUDA refuses a
            synchronize while the stream captures) or one ``p2p_batch`` (one ``batch_isend_irecv``)."""
        if not self.active:
            return [(on, tags) for on in each]
        call = ("graph", s.graph) if getattr(s, "graph", None) else ("p2p_batch", s.p2p_batch) \
            if getattr(s, "p2p_batch", None) else None
        for r in ranks if ranks is not None else self.every:
            self.names_on[r].add(s.name)
            if call is not None and r in self.pending and self.call_on.get(r) == call:
                what, name = call or ("", "")
                raise GraphError(f"{self.src[r]}: synchronize {self.pending[r].name!r} is inside {what} {name!r} "
                                 f"on rank {r} (between its ops, one host call)",
                                 fix=f"move the synchronize before or after the {what}'s ops, or give the ops after "
                                     f"it another {what} name (a second call)")
            if call is not None:
                self.call_on[r] = call
            else:
                self.call_on.pop(r, None)
        out: list[tuple[list[int] | None, tuple]] = []
        for on in each:
            hit = [r for r in (on if on is not None else self.every) if r in self.pending] if self.pending else []
            if not hit:
                out.append((on, tags))
                continue
            groups: dict[int, list[int]] = {}
            for r in on if on is not None else self.every:
                groups.setdefault(id(self.pending[r]) if r in self.pending else 0, []).append(r)
            for key, rs in groups.items():
                out.append((rs, tags if key == 0 else tag_set({**s.tags, **sync_tags(self.pending[rs[0]])})))
            for r in hit:
                del self.pending[r]
        return out


def _models(spec: ScheduleSpec) -> tuple[list[Any], list[str]]:
    """``(items, sources)``: the spec's written ops as the loader kept them, without building the op models of
    its ``foreach`` blocks: op models and :class:`~schedsim.spec.block.Block` s, with the source text of
    each op model."""
    from schedsim.spec.model import _source_text

    layout = None if "ops" in spec.__dict__ else (spec.__pydantic_private__ or {}).get("_layout")
    if layout is None:
        return list(spec.ops), spec.sources()
    file = spec._file
    return list(layout.items), [_source_text(file, s) if s is not None else "" for s in layout.sources]


def _implicit_groups(items: list[Any]) -> dict[str, set[int]]:
    """Collectives written once per rank (``ranks: [0]``, ``ranks: [1]``, no ``group``), by name: one
    collective over all of those ranks, as a reader of the file expects. Blocks hold no such entries (the
    loader leaves them to the general path), so only op models are looked at."""
    implicit: dict[str, set[int]] = defaultdict(set)
    for s in items:
        if isinstance(s, CollectiveOp) and s.group is None and s.ranks is not None and len(s.ranks) == 1:
            implicit[s.name].update(s.ranks)
    return implicit


def _lone_collective(spec: ScheduleSpec, s: CollectiveOp, group: tuple[int, ...], src: str) -> GraphError:
    r0, w = group[0], spec.world_size
    every = str(list(range(w))) if w <= 8 else f"[0, 1, ..., {w - 1}]"
    kind = s.kind
    return GraphError(
        f"{src}: collective {s.name!r} runs on rank {r0} alone: without `group:` its communicator is the "
        f"ranks that issue it, here one, so it would be a 1-rank {kind} (a local copy), while a program that "
        f"calls {kind} on each rank runs one collective over all of them",
        fix=f"give it `group:` (the ranks that take part, e.g. group: {every}), "
        "or give each rank's entry the same name")


def add_written(spec: ScheduleSpec, table: Table) -> None:
    """Add the spec's hand-written ops to ``table`` as rows, in program order: each op entry instanced on its
    ranks, sharing a template with the entries equal to it but for name, dependencies and tags
    (:meth:`Table.shared_template`). A ``foreach`` block the loader kept whole
    (:class:`~schedsim.spec.block.Block`) is added in bulk: one template per representative, its rows'
    names, dependencies, tags and ranks as arrays; the result is the same as for its ops one by one.

    Raises
    ------
    GraphError
        A collective without ``group`` that only one rank of a wider world issues.
    """
    from schedsim.spec.block import Block

    world = spec.world_size
    all_ranks = np.arange(world, dtype=np.int32)
    items, sources = _models(spec)
    implicit = _implicit_groups(items)
    groups: dict[tuple[int, ...], RankGroup] = {}  # one shared group object per distinct group
    every = tuple(range(world))

    def group_of(g: tuple[int, ...]) -> RankGroup:
        group = groups.get(g)
        if group is None:
            group = groups[g] = RankGroup(g)
        return group

    rows: tuple[list[int], list[str], list[int], list[str], list[np.ndarray], list[tuple], list[str | None],
                list[str | None]] = ([], [], [], [], [], [], [], [])

    def flush() -> None:
        if rows[0]:
            ranks = world if all(r is all_ranks for r in rows[4]) else list(rows[4])
            table.add_rows(np.array(rows[0], np.int32), list(rows[1]), np.array(rows[2], np.int64), rows[3],
                           ranks, list(rows[5]), (list(rows[6]), list(rows[7])))
            for r in rows:
                r.clear()

    idx = 0
    syncs = _Syncs(every, any(isinstance(s, SynchronizeOp) for s in items))  # rule host-wait
    for s, src, skipped in syncs.entries(items, sources):
        idx += skipped
        if isinstance(s, Block):
            flush()
            first = np.unique(s.row_rep, return_index=True)[1].tolist()
            tids, rep_ranks = [], []
            for j, model in enumerate(s.models):  # (the loader sent single-rank collectives without group away)
                if getattr(model, "send_bytes", None) is not None:
                    raise GraphError(f"all_to_all {model.name!r}: per-peer sizes (send_bytes) inside a foreach are "
                                     "not supported yet", fix="write the all_to_all outside the foreach")
                stream = model.stream or KINDS[model.kind].resource  # the default stream: the kind's resource
                explicit, ranks = model.__dict__.get("group"), model.ranks
                g = tuple(sorted(explicit)) if explicit else tuple(sorted(ranks)) if ranks is not None else every
                proto = op_instance(model, ranks[0] if ranks else 0, 0, stream=stream, group=group_of(g),
                                    tags=tag_set(model.tags),
                                    source=_source_of(spec, s.sources[j]), spec_index=idx + first[j])
                tids.append(table.shared_template(_without_row_strs(proto)))
                rep_ranks.append(all_ranks if ranks is None else np.asarray(ranks, np.int32))
            if all(r is all_ranks for r in rep_ranks):
                on: Any = world
            elif all(len(r) == 1 for r in rep_ranks):  # each row on one rank (an entry instanced per rank)
                on = np.array([int(r[0]) for r in rep_ranks], np.int32)[s.row_rep]
            else:
                on = [rep_ranks[j] for j in s.row_rep.tolist()]
            table.add_rows(np.array(tids, np.int32)[s.row_rep], s.name_codes, s.dep_cnt, s.deps, on, s.tags,
                           (s.batch, s.msg))
            idx += s.rows
            continue
        ranks = s.ranks if s.ranks is not None else None
        explicit = s.__dict__.get("group")  # a field of collectives only (getattr of a missing one is slow)
        if isinstance(s, CollectiveOp) and explicit is None and ranks is not None and len(ranks) == 1 \
                and s.name in implicit:
            g = tuple(sorted(implicit[s.name]))
        else:
            g = tuple(sorted(explicit)) if explicit else tuple(sorted(ranks)) if ranks is not None else every
        group = group_of(g)
        stream = s.stream or KINDS[s.kind].resource
        if isinstance(s, CollectiveOp) and len(group) == 1 and world > 1 and explicit is None:
            raise _lone_collective(spec, s, group, src)
        tags = tag_set(s.tags)
        # an all_to_all with per-peer sizes: a template per rank (each its own sizes); else one for the entry
        each = [[r] for r in (ranks if ranks is not None else every)] \
            if isinstance(s, CollectiveOp) and s.send_bytes is not None else [ranks]
        for on, row_tags in syncs.rows(s, ranks, each, tags):
            proto = op_instance(s, on[0] if on else 0, 0, stream=stream, group=group, tags=row_tags, source=src,
                                spec_index=idx)
            rows[0].append(table.shared_template(_without_row_strs(proto)))
            rows[6].append(proto.p2p_batch)
            rows[7].append(proto.tag)
            rows[1].append(s.name)
            rows[2].append(len(s.deps))
            rows[3].extend(s.deps)
            rows[4].append(all_ranks if on is None else np.asarray(on, np.int32))
            rows[5].append(row_tags)
        idx += 1
    flush()


def _without_row_strs(proto: Op) -> Op:
    """``proto`` without its ``p2p_batch`` and ``tag``, which its row carries (:meth:`Table.add_rows`): the sends
    and recvs of a batched loop, a batch per iteration, share a template."""
    return replace(proto, p2p_batch=None, tag=None) if proto.p2p_batch is not None or proto.tag is not None \
        else proto


def _source_of(spec: ScheduleSpec, source: tuple[int | None, int | None, str]) -> str:
    from schedsim.spec.model import _source_text

    return _source_text(spec._file, source)
