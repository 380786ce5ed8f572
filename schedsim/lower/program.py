"""The lowered schedule: a frozen table of op instances and the integer arrays of its DAG.

:func:`schedsim.lower.lower` produces it from a :class:`~schedsim.spec.model.ScheduleSpec`; the simulator
reads it directly (:func:`schedsim.sim.engine.simulate`), and :func:`schedsim.graph.build.graph_of` turns
it into the networkx graph that users, the executor and error messages see (same node ids, attributes and
graph info).

Layout (N op instances in program order: ranks ascending, each rank's ops in the order written, a
pipeline block's ops after the hand-written ones)::

    tmpl, rank, seq, name, tags, stream, peer, batch, msg   int32[N]   (ids into the tables below; -1 = none)
    dep_ptr int32[N+1], dep_idx int32[...]                  declared dependencies (CSR, op indices)
    stream_edges, dep_edges  int32[E, 2]                    the DAG's edges, in the order networkx gets them
    coll_ptr int64[C+1], coll_idx int64[...]                members of each collective (key ``coll_keys[c]``)
    p2p int64[P, 2]                                         matched (send, recv) pairs, NCCL's pairing order

The dependency CSR and the edges are int32 (:data:`NARROW`; int64 when N or their length is 2**31 or more, where the
event loop stops with its own error): half the memory of the int64 arrays the lowering builds. A column of
:data:`SHARED` that holds one value throughout (no tags, no peer, no batch, no message tag: every op of a
compute and collective schedule) is a read-only broadcast of it (stride 0), no memory per op (:func:`_shared`).

The op names, tag sets and strings those ids index are ``names``, ``tagsets`` and ``strs``, made on first
read from ``name_table``, ``tag_table`` and ``str_table`` (the lowering's interners, whose pipeline runs are
lazy; tuples once pickled).

A template (``templates[tmpl[i]]``, an :class:`~schedsim.graph.ops.Op`) holds what instances share: kind,
sizes and cost inputs (bytes, FLOP, m/n/k, dtype, repeat, duration), the group of a collective, source.
Its name, tags and spec index are those of the first op that uses it, and its ``deps`` are empty where
instances declare their own: read an instance's from the columns (or :meth:`Program.ops`).
Op names, ids and :class:`Op` objects are built only on request (:meth:`Program.ids`, :meth:`Program.ops`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict, TypeVar

import numpy as np

from schedsim.arrays import unique  # re-exported
from schedsim.graph.ops import Op
from schedsim.kinds import KINDS, P2P_KINDS

if TYPE_CHECKING:  # an annotation only: graph.info's three dataclasses cost ~1% of a cold `check` to create
    from collections.abc import Callable, Collection, Sequence

    from numpy.typing import NDArray

    from schedsim.coded import Parts, TagColumns
    from schedsim.graph.info import PipelineInfo
    from schedsim.lower.table import _Interner

__all__ = ["Program", "OpNames", "DagView", "batch_heads", "group_sizes", "rendezvous_groups", "required",
           "split_one_rank", "stable_order", "unique"]


def required(name: str) -> Callable[..., Any]:
    """The function ``name`` of the compiled module :mod:`schedsim.sim._cwaves` that the package has no other form of
    (its numpy or Python form is a test oracle, ``tests/oracle/numpy_helpers.py``).

    Raises
    ------
    BuildError
        The module is not built (no C compiler at install) or lacks ``name`` (built from an older ``_cwaves.c``).
    """
    from schedsim.errors import BuildError

    try:
        from schedsim.sim import _cwaves  # type: ignore[attr-defined]
    except ImportError as e:
        raise BuildError(f"schedsim's compiled helpers (schedsim.sim._cwaves) are not built: {e}",
                         fix="reinstall with a C compiler present (pip install -e . in a checkout, pip install "
                             "schedsim elsewhere) or install a schedsim wheel") from None
    fn = getattr(_cwaves, name, None)
    if fn is None:
        raise BuildError(f"schedsim's compiled helpers at {getattr(_cwaves, '__file__', '?')} lack {name} (built from "
                         "an older _cwaves.c)",
                         fix="rebuild them: pip install -e . in a checkout, or reinstall schedsim")
    return fn


def stable_order(key: np.ndarray, space: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of a 1-d array of ints in ``0 .. space - 1``. When ``space`` is small
    enough for a table (at most ``4·len(key) + 65536``) and the key takes at most 65,536 distinct values (the
    (rank, stream) pairs of a program, the (src, dst) pairs of its send/recvs), the values are renumbered
    densely in order and sorted as 16-bit codes, which numpy sorts stably by radix (O(n)); else by argsort."""
    n = len(key)
    if space <= 65536:
        return np.argsort(key.astype(np.uint16), kind="stable")
    if n and space <= 4 * n + 65536:
        seen = np.zeros(space, bool)
        seen[key] = True
        code = np.cumsum(seen, dtype=np.int32)
        if int(code[-1]) <= 65536:
            code -= 1
            return np.argsort(code.astype(np.uint16)[key], kind="stable")
    return np.argsort(key, kind="stable")


def batch_heads(rank: np.ndarray, batch: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(at, ascending)``: per op (of the ops ``idx``, ascending, with their ``rank`` and NCCL ``batch`` id,
    -1 = none) the index of the first op of its batch on its rank (its own when it has none), as the issue
    position NCCL posts it at; and whether ``at`` ascends with ``idx`` (each batch's members follow each
    other among these ops).

    When on every rank the batches come as runs of consecutive p2p ops with ascending batch ids (a pipeline's
    order: no batch id comes back later), each run is one whole batch: its first member is the run's, found
    without sorting; otherwise by :func:`unique` of (rank, batch)."""
    at = idx.copy()
    bm = batch >= 0
    if not bm.any():
        return at, True
    n = len(idx)
    same_rank = rank[1:] == rank[:-1]
    cont = np.zeros(n, bool)
    cont[1:] = same_rank & bm[1:] & (batch[1:] == batch[:-1])
    starts = np.flatnonzero(~cont)
    bs = starts[bm[starts]]  # the runs of batched ops
    sb, sr = batch[bs], rank[bs]
    nxt = sr[1:] == sr[:-1]  # consecutive batch runs on one rank
    if bool((sb[1:][nxt] > sb[:-1][nxt]).all()) and _ranks_ascend(rank):
        if len(starts) < n:  # a run of two or more: its members take its first's position
            at[:] = idx[starts[np.cumsum(~cont) - 1]]
        return at, True
    nb = int(batch.max()) + 1
    key = rank[bm].astype(np.int64) * nb + batch[bm]
    _u, first, inv = unique(key)
    at[bm] = idx[bm][first][inv.reshape(-1)]
    return at, False


def _ranks_ascend(rank: np.ndarray) -> bool:
    return len(rank) < 2 or bool((rank[1:] >= rank[:-1]).all())


#: The Program's index arrays stored as int32 when every value fits (:meth:`Program.__post_init__`): op indices
#: below N and offsets up to their CSR's length.
NARROW = ("dep_ptr", "dep_idx", "stream_edges", "dep_edges")


#: The Program's fields that :meth:`Program.release_linked` drops where :attr:`Program.remake` can make them again:
#: the DAG's edges, the dependency CSR, the collectives' members, the per-rank order and the name ids, which the
#: simulator reads only to build its own successor lists and group arrays (the static checks, the memory curve,
#: trace.json and the timeline's names read them again after it, made anew).
REMADE = ("dep_ptr", "dep_idx", "stream_edges", "dep_edges", "coll_idx", "seq", "name_id")


def _narrow(a: NDArray[np.int64], bound: int) -> NDArray[np.int32] | NDArray[np.int64]:
    """``a`` (an int64 array of values in ``0 .. bound``) as int32 when ``bound`` is below 2**31; else as it is."""
    if isinstance(a, np.ndarray) and a.dtype == np.int64 and bound < 2**31:
        return a.astype(np.int32)
    return a


#: The per-op columns kept as one shared value where every op has the same (:func:`_shared`).
SHARED = ("tags_id", "peer", "batch", "msg")


def _shared(a: NDArray[np.int32]) -> NDArray[np.int32]:
    """``a`` (a 1-d column) as a read-only broadcast of its one value when every entry holds it (at 1M ops, 4 MB
    less each), else as it is. Readers index it as any array; a compiled pass that needs a contiguous buffer
    copies it (``np.ascontiguousarray``), a temporary."""
    if isinstance(a, np.ndarray) and a.ndim == 1 and len(a) > 1 and a.strides != (0,) and bool((a == a[0]).all()):
        return np.broadcast_to(a[:1].copy(), a.shape)
    return a


_T = TypeVar("_T")


def _freeze(v: _T) -> _T:
    """``v`` with its arrays (``v`` itself, or the members of a tuple of arrays) made read-only."""
    for a in v if isinstance(v, tuple) and v and isinstance(v[0], np.ndarray) else (v,):  # not the name tables
        if isinstance(a, np.ndarray):
            a.flags.writeable = False
    return v


class UniformLinks(NamedTuple):
    """What makes a uniform lowering's linked arrays (:data:`REMADE`) from rank 0's (:func:`schedsim.lower.link.
    _link_uniform`, whose expressions :meth:`make` repeats, so the arrays are the same): op ``k·R + r`` is row ``r``
    on rank ``k``. Rank 0's arrays: ``se1`` stream edges (E1, 2), ``tgt1`` each declared dependency's
    target, ``dep_op1`` its op, ``crow`` the collectives' rows, ``seq1`` the per-rank order, ``name1`` the name ids;
    ``R`` ops per rank,
    ``W`` ranks, ``it`` the index dtype; ``n_dep`` the Program's number of declared dependencies."""

    se1: np.ndarray
    tgt1: np.ndarray
    dep_op1: np.ndarray
    crow: np.ndarray
    seq1: np.ndarray
    name1: np.ndarray
    R: int
    W: int
    it: type  # np.int32 or np.int64
    n_dep: int

    def make(self, name: str) -> np.ndarray:
        """The Program's field ``name`` (one of :data:`REMADE`) as :func:`schedsim.lower.link._link_uniform` makes
        it."""
        off: np.ndarray = np.arange(self.W, dtype=self.it) * self.R
        if name == "stream_edges":
            return (self.se1.astype(self.it)[None, :, :] + off[:, None, None]).reshape(-1, 2)
        if name == "dep_idx":
            return (self.tgt1.astype(self.it)[None, :] + off[:, None]).reshape(-1)
        if name == "dep_edges":
            tgt = (self.tgt1.astype(self.it)[None, :] + off[:, None]).reshape(-1)
            dep_op = (self.dep_op1.astype(self.it)[None, :] + off[:, None]).reshape(-1)
            return np.stack([tgt, dep_op], axis=1) if len(tgt) else np.zeros((0, 2), self.it)
        if name == "dep_ptr":
            dep_ptr: np.ndarray = np.zeros(self.R * self.W + 1, self.it)
            np.cumsum(np.tile(np.bincount(self.dep_op1, minlength=self.R).astype(self.it), self.W), out=dep_ptr[1:])
            return dep_ptr
        if name == "coll_idx":
            return (self.crow[:, None].astype(np.int64) + off[None, :].astype(np.int64)).reshape(-1)
        if name == "seq":
            return np.tile(self.seq1, self.W)
        if name == "name_id":
            return np.tile(self.name1, self.W)
        raise KeyError(name)


class _ProgramInfo(TypedDict):
    name: str
    world_size: int
    launch: str


class ProgramInfo(_ProgramInfo, total=False):
    """:meth:`Program.graph_info`: what ``G.graph`` of the networkx DAG holds and the simulator reads. ``name``,
    ``world_size`` and ``launch`` always; ``max_connections`` (``CUDA_DEVICE_MAX_CONNECTIONS``, 1-32), ``pipeline``
    (:meth:`schedsim.graph.info.PipelineInfo.to_dict`) and ``nccl_init`` (``eager``) where set."""

    max_connections: int
    pipeline: dict[str, Any]
    nccl_init: str


@dataclass(frozen=True, eq=False)
class Program:
    """A lowered schedule (module docstring). Arrays are read-only; derived views are cached."""

    name: str
    world_size: int
    launch: str
    file: str
    max_connections: int | None
    pipeline: PipelineInfo | None
    templates: tuple[Op, ...]
    name_table: tuple[str, ...] | _Interner  # the op names: a tuple, or the lowering's interner (``names``)
    tag_table: tuple[tuple[tuple[str, object], ...], ...] | _Interner  # the tag sets, likewise (``tagsets``)
    streams: tuple[str, ...]
    str_table: tuple[str, ...] | _Interner  # p2p batch names and message tags, likewise (``strs``)
    tmpl: NDArray[np.int32]
    rank: NDArray[np.int32]
    seq: NDArray[np.int32]
    name_id: NDArray[np.int32]
    tags_id: NDArray[np.int32]
    stream_id: NDArray[np.int32]
    peer: NDArray[np.int32]
    batch: NDArray[np.int32]
    msg: NDArray[np.int32]
    dep_ptr: NDArray[np.int32] | NDArray[np.int64]
    dep_idx: NDArray[np.int32] | NDArray[np.int64]
    stream_edges: NDArray[np.int32] | NDArray[np.int64]
    dep_edges: NDArray[np.int32] | NDArray[np.int64]
    coll_keys: Sequence[str]  # a tuple, or the lowering's keys made on first read (lower.link.CollectiveKeys)
    coll_ptr: NDArray[np.int64]
    coll_idx: NDArray[np.int64]
    p2p: NDArray[np.int64]
    warnings: tuple[str, ...] = ()
    checked: bool = False
    nccl_init: str = "lazy"  # the schedule's `nccl_init`
    #: The ranks a symmetric lowering wrote, each standing for its class of ranks that run alike
    #: (:func:`schedsim.lower.training.represented_ranks`); ``()``: every rank's ops are here. A collective keeps its
    #: full group in its template (cost, links) and has only its represented members in ``coll_ptr``/``coll_idx``.
    represented: tuple[int, ...] = ()
    #: What remakes the fields of :data:`REMADE` after :meth:`release_linked` (a lowering of rank 0's ops on every
    #: rank, :func:`schedsim.lower.link._link_uniform`: :class:`UniformLinks`), else None.
    remake: UniformLinks | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = len(self.tmpl)
        for f in NARROW:  # op indices below N, dep_ptr's offsets up to len(dep_idx)
            a = getattr(self, f)
            object.__setattr__(self, f, _narrow(a, max(n, len(self.dep_idx), a.size)))
        for f in SHARED:
            object.__setattr__(self, f, _shared(getattr(self, f)))
        for v in self.__dict__.values():
            _freeze(v)

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The op names, indexed by :attr:`name_id` (made on first read: a pipeline block's are built lazily)."""
        t = self.name_table
        return t if isinstance(t, tuple) else tuple(t.items)

    @cached_property
    def tagsets(self) -> tuple[tuple, ...]:
        """The tag sets (each ``tuple(sorted(tags.items()))``), indexed by :attr:`tags_id` (made on first read)."""
        t = self.tag_table
        return t if isinstance(t, tuple) else tuple(t.items)

    @cached_property
    def strs(self) -> tuple[str, ...]:
        """The p2p batch names and message tags, indexed by :attr:`batch` and :attr:`msg` (made on first read)."""
        t = self.str_table
        return t if isinstance(t, tuple) else tuple(t.items)

    def release_linked(self) -> None:
        """Drop the fields of :data:`REMADE` where :attr:`remake` can make them again (a uniform lowering's): the
        simulator calls it once its successor lists are built from the edges (:mod:`schedsim.sim.waves_columns`),
        so that they are not held through the event loop, the metrics and the outputs (their size: docs/validation.md,
        "fast38q"). A later read makes the field again, the same dtype, shape and values
        (:meth:`__getattr__`); without ``remake`` nothing is dropped."""
        if self.remake is not None:
            for f in REMADE:
                self.__dict__.pop(f, None)

    def __getattr__(self, name: str) -> np.ndarray:
        """A field of :data:`REMADE` dropped by :meth:`release_linked`, made again by :attr:`remake` (and kept)
        as the lowering made it (narrowed as :meth:`__post_init__` narrows it, read-only).

        Raises
        ------
        AttributeError
            ``name`` is not such a field, or the Program has no ``remake``.
        """
        remake = self.__dict__.get("remake")
        if name not in REMADE or remake is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        a = remake.make(name)
        if name in NARROW:
            a = _narrow(a, max(len(self.tmpl), remake.n_dep, a.size))
        self.__dict__[name] = _freeze(a)
        return a

    def __getstate__(self) -> dict[str, object]:
        """The state with the name, tag and string tables as tuples (the lowering's interners hold closures)."""
        state = dict(self.__dict__)
        state["name_table"], state["tag_table"], state["str_table"] = self.names, self.tagsets, self.strs
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        """Unpickling and :func:`copy.copy`/:func:`copy.deepcopy` restore the arrays (and cached views) writable;
        make them read-only again."""
        self.__dict__.update(state)
        self.__post_init__()

    # ---------------------------------------------------------------- sizes and per-op views
    @property
    def N(self) -> int:
        """Number of op instances."""
        return int(self.tmpl.shape[0])

    @cached_property
    def kind(self) -> np.ndarray:
        """Per op, its kind as an index into :attr:`kinds`."""
        return _freeze(np.array([self.kinds.index(t.kind) for t in self.templates], np.int32)[self.tmpl]
                       if self.templates else np.zeros(0, np.int32))

    @cached_property
    def kinds(self) -> tuple[str, ...]:
        """The op kinds that occur, in template order (``kind`` indexes it)."""
        return tuple(dict.fromkeys(t.kind for t in self.templates))

    def kind_mask(self, kinds: Collection[str]) -> NDArray[np.bool_]:
        """Boolean mask of the ops whose kind is in ``kinds``."""
        codes = [i for i, k in enumerate(self.kinds) if k in kinds]
        return np.isin(self.kind, codes)

    @cached_property
    def nbytes(self) -> np.ndarray:
        """Per op: message / moved bytes (float64)."""
        return _freeze(np.array([t.nbytes for t in self.templates], np.float64)[self.tmpl] if self.templates
                       else np.zeros(0))

    @cached_property
    def succ(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The DAG as CSR ``(ptr, idx, kind)`` with duplicate edges merged (``kind`` 1 = dep, 0 = stream), each
        op's successors in the order networkx lists them (stream edges first, then dependencies)."""
        e = np.concatenate([self.stream_edges.reshape(-1, 2), self.dep_edges.reshape(-1, 2)], dtype=np.int64)
        n = self.N
        key = e[:, 0] * n + e[:, 1]
        uniq, first, inv = unique(key)
        isdep = np.zeros(len(uniq), bool)
        isdep[inv[len(self.stream_edges):]] = True
        order = np.argsort(first, kind="stable")
        src, dst, kind = e[first[order], 0], e[first[order], 1], isdep[order]
        o2 = np.argsort(src, kind="stable")
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
        return _freeze((ptr, dst[o2], kind[o2].astype(np.int8)))

    # ---------------------------------------------------------------- names and objects, on request
    def ids(self) -> list[str]:
        """Op ids ``name@rN`` in program order (built on each call)."""
        if not self.N:
            return []
        # one object-array concatenation per op of its name and its rank's "@rN" (interned halves; ~4x a
        # per-op f-string)
        names = np.empty(len(self.names), object)
        names[:] = self.names
        tails = np.array([f"@r{r}" for r in range(int(self.rank.max()) + 1)], dtype=object)
        return (names[self.name_id] + tails[self.rank]).tolist()

    def op_names(self, rows: Sequence[int] | np.ndarray) -> list[str]:
        """The names of ops ``rows`` (ints), making no lazy run of names for a few of them (the critical path)."""
        nid = self.name_id[np.asarray(rows, np.int64)].tolist()
        t = self.name_table
        if isinstance(t, tuple) or "names" in self.__dict__:
            names = self.names
            return [names[k] for k in nid]
        return t.take(nid)

    def name_parts(self) -> Parts | None:
        """The op names as :class:`schedsim.coded.Parts` (row ``i`` is op ``i``'s name) when a pipeline block
        coded its names (no name made; the other ops' as one more part of their names), else None."""
        from schedsim.coded import Parts, coded_of

        t = self.name_table
        if isinstance(t, tuple) or not any(isinstance(c, Parts) for _b, _n, c in t.column_runs()):
            return None
        return coded_of(t, self.name_id, Parts)

    def tag_columns(self) -> TagColumns:
        """The op tag sets as :class:`schedsim.coded.TagColumns` (row ``i`` is op ``i``'s): a pipeline block's from
        its per-event columns (no tag set made), the others' from their distinct tag sets."""
        from schedsim.coded import TagColumns, coded_of

        return coded_of(self.tag_table, self.tags_id, TagColumns)

    def may_have_tag(self, key: str) -> bool:
        """Whether a tag set of the tag table holds ``key`` (a set that no op has counts too: false means no op
        has the tag), from the distinct sets, a pipeline block's lazy run through its columns (unmade): no
        per-op column built."""
        def holds(s: tuple[tuple[str, object], ...]) -> bool:
            return key in map(itemgetter(0), s)  # compared in C

        t = self.tag_table
        if isinstance(t, tuple):
            return any(map(holds, t))
        return t.any_item(holds, lambda cols: key in cols.keys)

    def op_id(self, i: int) -> str:
        """The id of op ``i``."""
        t, k = self.name_table, int(self.name_id[i])
        name = self.names[k] if isinstance(t, tuple) or "names" in self.__dict__ else t.item(k)
        return f"{name}@r{int(self.rank[i])}"

    def ops(self) -> list[Op]:
        """One :class:`Op` per instance, in program order, equal to what the object-based build made."""
        names, tagsets, strs, tps = self.names, self.tagsets, self.strs, self.templates
        dptr, didx, nid = self.dep_ptr.tolist(), self.dep_idx.tolist(), self.name_id.tolist()
        out: list[Op] = []
        append = out.append
        cols = zip(self.tmpl.tolist(), self.rank.tolist(), nid, self.seq.tolist(), self.tags_id.tolist(),
                   self.stream_id.tolist(), self.peer.tolist(), self.batch.tolist(), self.msg.tolist(), strict=True)
        streams = self.streams
        p2p = frozenset(P2P_KINDS)  # the registry's p2p kinds now, for the loop
        for i, (t, r, n, s, tg, st, pe, b, m) in enumerate(cols):
            p = tps[t]
            kind = p.kind
            if kind in p2p:
                group: tuple[int, ...] = (r, pe) if KINDS[kind].sender else (pe, r)
                peer: int | None = pe
            else:
                group, peer = p.group, p.peer
            a, z = dptr[i], dptr[i + 1]
            deps = p.deps if p.deps else (tuple(names[nid[j]] for j in didx[a:z]) if z > a else ())
            append(Op(names[n], r, kind, streams[st], s, deps, group, peer, p.root, p.nbytes, p.flops, p.dtype,
                      p.m, p.n, p.k, p.batch, p.repeat, p.duration_s, p.direction, None if m < 0 else strs[m],
                      tagsets[tg], p.source, p.spec_index, p.host_s, None if b < 0 else strs[b], p.splits, p.graph,
                      p.comm))
        return out

    def collectives(self) -> dict[str, list[int]]:
        """Collective key (``name#r0,r1,...``) -> member op indices, keys in order of first member."""
        ptr, idx = self.coll_ptr.tolist(), self.coll_idx.tolist()
        return {k: idx[ptr[c]:ptr[c + 1]] for c, k in enumerate(self.coll_keys)}

    def graph_info(self, *, lazy_order: bool = False) -> ProgramInfo:
        """``name``, ``world_size``, ``launch`` (and ``max_connections``, ``pipeline`` when set), as
        ``G.graph`` holds them; ``lazy_order``: the pipeline's order left unmade
        (:meth:`schedsim.graph.info.PipelineInfo.to_dict`)."""
        info: ProgramInfo = {"name": self.name, "world_size": self.world_size, "launch": self.launch}
        if self.max_connections is not None:
            info["max_connections"] = self.max_connections
        if self.pipeline is not None:
            info["pipeline"] = self.pipeline.to_dict(lazy_order=lazy_order)
        if self.nccl_init != "lazy":
            info["nccl_init"] = self.nccl_init
        return info


class OpNames:
    """What a timeline keeps of a :class:`Program` to name and tag its rows: the name and tag tables and the
    ``name_id``, ``tags_id`` and ``rank`` columns, with the Program's own :meth:`~Program.ids`,
    :meth:`~Program.op_names`, :meth:`~Program.name_parts`, :meth:`~Program.tag_columns` and
    :attr:`~Program.names` (the same functions, read from these fields; the names the Program had made already
    are shared). The Program's other columns, edges and templates are not held, so they are freed with the
    Program (``predict`` drops it before drawing the charts)."""

    def __init__(self, prog: Program) -> None:
        self.name_table, self.tag_table = prog.name_table, prog.tag_table
        self.name_id, self.tags_id, self.rank, self.N = prog.name_id, prog.tags_id, prog.rank, prog.N
        if "names" in prog.__dict__:
            self.__dict__["names"] = prog.__dict__["names"]

    if TYPE_CHECKING:  # the Program's functions below, as their signatures read on these fields
        names: tuple[str, ...]

        def ids(self) -> list[str]: ...
        def op_names(self, rows: Sequence[int] | np.ndarray) -> list[str]: ...
        def name_parts(self) -> Parts | None: ...
        def tag_columns(self) -> TagColumns: ...
    else:
        names = Program.names
        ids = Program.ids
        op_names = Program.op_names
        name_parts = Program.name_parts
        tag_columns = Program.tag_columns


class DagView:
    """The read-only slice of the networkx API that reports use (``id in view``, ``successors(id)``,
    ``edges[u, v]["kind"]``), answered from a Program without building networkx."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self._index: dict[str, int] | None = None

    def _idx(self) -> dict[str, int]:
        if self._index is None:
            self._index = {oid: i for i, oid in enumerate(self.prog.ids())}
        return self._index

    def __contains__(self, op_id: object) -> bool:
        return op_id in self._idx()

    def successors(self, op_id: str) -> list[str]:
        """Successor op ids of ``op_id`` (stream and dependency edges)."""
        ptr, dst, _k = self.prog.succ
        i = self._idx()[op_id]
        return [self.prog.op_id(int(j)) for j in dst[ptr[i]:ptr[i + 1]]]

    @property
    def edges(self) -> _Edges:
        """``edges[u, v]`` -> ``{"kind": "dep" | "stream"}``."""
        return _Edges(self)


class _Edges:
    def __init__(self, view: DagView) -> None:
        self.view = view

    def __getitem__(self, uv: tuple[str, str]) -> dict[str, str]:
        ptr, dst, kind = self.view.prog.succ
        idx = self.view._idx()
        i, j = idx[uv[0]], idx[uv[1]]
        pos = int(ptr[i]) + int(np.flatnonzero(dst[ptr[i]:ptr[i + 1]] == j)[0])
        return {"kind": "dep" if kind[pos] else "stream"}


def group_sizes(prog: Program) -> np.ndarray:
    """Per collective (``coll_ptr`` order), the ranks of its group as written (int64): its member count, or more
    in a symmetric lowering (:attr:`Program.represented`), where only the represented members issue it."""
    glen = np.array([len(t.group) for t in prog.templates], np.int64)
    return glen[prog.tmpl[prog.coll_idx[prog.coll_ptr[:-1]]]] if len(prog.coll_ptr) > 1 else np.zeros(0, np.int64)


def split_one_rank(ptr: np.ndarray, idx: np.ndarray, group: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rule one-rank-collective on collectives as CSR (``ptr`` int64 of shape (C + 1,), member op indices ``idx``): the
    collectives of two or more members as CSR (``ptr``, ``idx``: the rendezvous groups), and the op indices
    (int64) of those of one member, which run as a copy (:func:`schedsim.gpu.rules.one_rank_res`) with no
    rendezvous (rule one-rank-collective of :mod:`schedsim.gpu.rules`). ``group``: each collective's group size where it
    has fewer members (:func:`group_sizes`); a group of one rank is then told by it.

    >>> p, i, lone = split_one_rank(np.array([0, 1, 3, 4]), np.array([5, 6, 7, 8]))
    >>> p.tolist(), i.tolist(), lone.tolist()
    ([0, 2], [6, 7], [5, 8])
    """
    ptr = np.asarray(ptr, np.int64)
    idx = np.asarray(idx, np.int64)
    sizes = np.diff(ptr)
    one = (sizes if group is None else group) == 1
    if not one.any():
        return ptr, idx, np.zeros(0, np.int64)
    lone = idx[ptr[:-1][one]]
    keep = sizes[~one]
    new_ptr = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(keep, out=new_ptr[1:])
    return new_ptr, idx[np.repeat(~one, sizes)], lone


def rendezvous_groups(prog: Program) -> tuple[np.ndarray, np.ndarray, int, int, np.ndarray]:
    """Rendezvous groups (collectives of two or more ranks, then send/recv pairs) as CSR ``(ptr, members)``,
    their count, the collectives' count, and the ops of collectives of one rank (a copy, no rendezvous: rule
    one-rank-collective, :func:`split_one_rank`)."""
    cptr, cidx, lone = split_one_rank(prog.coll_ptr, prog.coll_idx, group_sizes(prog) if prog.represented else None)
    C = len(cptr) - 1
    P = len(prog.p2p)
    if not P:  # no send/recv pairs: the collectives' CSR as it is (read only), not a copy of its members
        return cptr, cidx, C, C, lone
    pairs = np.asarray(prog.p2p, np.int64).reshape(-1)
    ptr = np.concatenate([cptr, int(cptr[-1]) + 2 * np.arange(1, P + 1)])
    return ptr, np.concatenate([cidx, pairs]), C + P, C, lone
