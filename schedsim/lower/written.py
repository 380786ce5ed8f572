"""Hand-written ops (the spec's ``ops:``) to templates: one template per spec op, instanced on its ranks in bulk."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from schedsim.errors import GraphError
from schedsim.graph.ops import Op, RankGroup
from schedsim.kinds import P2P_KINDS
from schedsim.lower.table import Table
from schedsim.spec.model import COLLECTIVE_KINDS, ScheduleSpec
from schedsim.units import DTYPE_BYTES

__all__ = ["op_instance", "add_written", "DEFAULT_STREAM"]

#: The stream an op runs on when it names none.
DEFAULT_STREAM = {"matmul": "compute", "compute": "compute", "memcpy": "copy"}


def _size(o: object) -> int:
    return o.size_bytes()  # type: ignore[attr-defined,no-any-return]


def op_instance(s: object, r: int, seq: int, *, stream: str, group: tuple[int, ...], tags: tuple,  # type: ignore[type-arg]
                source: str = "", spec_index: int = -1) -> Op:
    """The :class:`Op` of spec op ``s`` (a pydantic op model) on rank ``r``, at program position ``seq``.

    Sizes become bytes and FLOP: a matmul does ``2·batch·m·n·k`` FLOP and moves A, B and C once
    (``batch·(m·k + k·n + m·n)`` elements); a ``buffer: shard`` collective's message is the shard times the
    group size (the nccl-tests convention).
    """
    kind = s.kind  # type: ignore[attr-defined]
    common = dict(name=s.name, rank=r, kind=kind, stream=stream, seq=seq, deps=tuple(s.deps),  # type: ignore[attr-defined]
                  tags=tags, source=source, spec_index=spec_index, host_s=s.host_us * 1e-6)  # type: ignore[attr-defined]
    if kind == "matmul":
        b = s.batch  # type: ignore[attr-defined]
        mm, nn, kk = s.m, s.n, s.k  # type: ignore[attr-defined]
        eb = DTYPE_BYTES[s.dtype]  # type: ignore[attr-defined]
        return Op(**common, m=mm, n=nn, k=kk, batch=b, dtype=s.dtype, repeat=s.repeat,  # type: ignore[attr-defined,arg-type]
                  flops=2.0 * b * mm * nn * kk, nbytes=float(b * (mm * kk + kk * nn + mm * nn) * eb))
    if kind == "compute":
        return Op(**common, flops=float(s.flops or 0.0), nbytes=float(s.bytes or 0.0),  # type: ignore[attr-defined,arg-type]
                  dtype=s.dtype, repeat=s.repeat,  # type: ignore[attr-defined]
                  duration_s=None if s.duration_us is None else s.duration_us * 1e-6)  # type: ignore[attr-defined]
    if kind in COLLECTIVE_KINDS:
        size = _size(s)
        if s.buffer == "shard":  # type: ignore[attr-defined]
            size *= len(group)
        return Op(**common, group=group, nbytes=float(size), dtype=s.dtype, root=s.root)  # type: ignore[attr-defined,arg-type]
    if kind in P2P_KINDS:
        pair = (r, s.peer) if kind == "send" else (s.peer, r)  # type: ignore[attr-defined]
        return Op(**common, group=pair, peer=s.peer, nbytes=float(_size(s)), dtype=s.dtype,  # type: ignore[attr-defined,arg-type]
                  tag=s.tag, p2p_batch=s.p2p_batch)  # type: ignore[attr-defined]
    return Op(**common, nbytes=float(_size(s)), direction=s.direction, dtype=s.dtype)  # type: ignore[attr-defined,arg-type]


def _implicit_groups(spec: ScheduleSpec) -> dict[str, set[int]]:
    """Collectives written once per rank (``ranks: [0]``, ``ranks: [1]``, no ``group``), by name: one
    collective over all of those ranks, as a reader of the file expects."""
    implicit: dict[str, set[int]] = defaultdict(set)
    for s in spec.ops:
        if s.kind in COLLECTIVE_KINDS and getattr(s, "group", None) is None and s.ranks is not None \
                and len(s.ranks) == 1:
            implicit[s.name].update(s.ranks)
    return implicit


def _lone_collective(spec: ScheduleSpec, s: object, group: tuple[int, ...], src: str) -> GraphError:
    r0, w = group[0], spec.world_size
    every = str(list(range(w))) if w <= 8 else f"[0, 1, ..., {w - 1}]"
    kind = s.kind  # type: ignore[attr-defined]
    return GraphError(
        f"{src}: collective {s.name!r} runs on rank {r0} alone: without `group:` its communicator is the "  # type: ignore[attr-defined]
        f"ranks that issue it, here one, so it would be a 1-rank {kind} (a local copy), while a program that "
        f"calls {kind} on each rank runs one collective over all of them",
        fix=f"give it `group:` (the ranks that take part, e.g. group: {every}), "
        "or give each rank's entry the same name")


def add_written(spec: ScheduleSpec, table: Table) -> None:
    """Add the spec's hand-written ops to ``table``: one template each, instanced on its ranks.

    Raises
    ------
    GraphError
        A collective without ``group`` that only one rank of a wider world issues.
    """
    world = spec.world_size
    all_ranks = np.arange(world, dtype=np.int32)
    implicit = _implicit_groups(spec)
    groups: dict[tuple[int, ...], RankGroup] = {}  # one shared group object per distinct group
    every = tuple(range(world))
    sources = spec.sources()
    for idx, s in enumerate(spec.ops):
        ranks = s.ranks if s.ranks is not None else None
        explicit = s.__dict__.get("group")  # a field of collectives only (getattr of a missing one is slow)
        if s.kind in COLLECTIVE_KINDS and explicit is None and ranks is not None and len(ranks) == 1 \
                and s.name in implicit:
            g = tuple(sorted(implicit[s.name]))
        else:
            g = tuple(sorted(explicit)) if explicit else tuple(sorted(ranks)) if ranks is not None else every
        group = groups.get(g)
        if group is None:
            group = groups[g] = RankGroup(g)
        stream = s.stream or DEFAULT_STREAM.get(s.kind, "comm")
        src = sources[idx]
        if s.kind in COLLECTIVE_KINDS and len(group) == 1 and world > 1 and explicit is None:
            raise _lone_collective(spec, s, group, src)
        proto = op_instance(s, ranks[0] if ranks else 0, 0, stream=stream, group=group,
                            tags=tuple(sorted(s.tags.items())), source=src, spec_index=idx)
        t = table.template(proto, proto.deps)
        table.add_bulk(t, all_ranks if ranks is None else np.asarray(ranks, np.int32))
