"""The reference pipeline emitter: :class:`_Emitter` writes one rank's ops of one replica into a
:class:`~schedsim.lower.table.Table`, one Python step per action, tracking what each new op waits for.

:func:`schedsim.lower.pipeline.expand_pipeline` uses it with ``reference=True`` and for the orders the column
emitter (:class:`schedsim.lower.pipeline._FastEmitter`) does not take; the training block
(:mod:`schedsim.lower.training`) drives it directly, placing ops of a stage's list by :class:`ProtoPlace`.
tests/pipeline/test_expand_columns.py asserts both emitters give the same table for every schedule kind.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import count
from typing import Any

import numpy as np

from schedsim.lower.pipeline_plan import PipelinePlan
from schedsim.lower.table import Table, intern_list
from schedsim.pipeline.actions import COMM_TYPES
from schedsim.pipeline.actions import ComputationType as CT

_VALUE = {t: t.value for t in CT}  # an enum's .value is a descriptor call; this is a dict lookup

#: In this process: (name prefix, the id of a phase's op names or NCCL group / message suffixes in
#: :data:`_SUFFIX_IDS`) -> the full strings, kept across lowerings (the points of a ``schedsim search`` name their
#: ops alike), so that each string is made and hashed once, not once a lowering; at most this many runs, then
#: forgotten all at once. A pure cache: the names interned are the same.
NAME_RUNS_MAX = 1 << 14
_NAME_RUNS: dict[tuple[str, int], list[str]] = {}
#: In this process: a tuple of name suffixes -> its id, unique for the process's life (ids are never reused, so a
#: key of :data:`_NAME_RUNS` made with an id names one tuple even after this store was forgotten): the key of a
#: run's strings is then a short tuple, not one hashed and compared over its 60 suffixes at every phase.
_SUFFIX_IDS: dict[tuple[str, ...], int] = {}
_SUFFIX_COUNT = count()


def suffix_id(suffixes: tuple[str, ...]) -> int:
    """The process-wide id of the tuple ``suffixes`` (:data:`_SUFFIX_IDS`); at most :data:`NAME_RUNS_MAX` kept,
    then forgotten all at once (a tuple seen again takes a new id)."""
    got = _SUFFIX_IDS.get(suffixes)
    if got is None:
        if len(_SUFFIX_IDS) >= NAME_RUNS_MAX:
            _SUFFIX_IDS.clear()
        got = _SUFFIX_IDS[suffixes] = next(_SUFFIX_COUNT)
    return got


def _full_names(pre: str, sid: int, suffixes: tuple[str, ...]) -> list[str]:
    """``[pre + x for x in suffixes]`` (``sid``: ``suffix_id(suffixes)``), kept in :data:`_NAME_RUNS` (the list is
    shared: not to be changed)."""
    key = (pre, sid)
    full = _NAME_RUNS.get(key)
    if full is None:
        if len(_NAME_RUNS) >= NAME_RUNS_MAX:
            _NAME_RUNS.clear()
        full = _NAME_RUNS[key] = list(map(pre.__add__, suffixes))
    return full


#: ``array("i", range(len))``, grown on demand up to :data:`ID_RANGE_MAX` ids: :func:`_id_range` slices it (a copy
#: in C) instead of converting a range int by int
ID_RANGE_MAX = 1 << 20
_ID_RANGE = [array("i", range(1 << 12))]


def _id_range(base: int, n: int) -> array:
    """``array("i", range(base, base + n))`` (a new array)."""
    hi = base + n
    got = _ID_RANGE[0]
    if hi > len(got):
        if hi > ID_RANGE_MAX:
            return array("i", range(base, hi))
        got = _ID_RANGE[0] = array("i", range(min(max(hi, 2 * len(got)), ID_RANGE_MAX)))
    return got[base:hi]


def _gather(src: array, at: np.ndarray) -> array:
    """``array("i", [src[k] for k in at])`` (``src`` an ``array("i")``, ``at`` intp[n], n >= 1) as one numpy gather:
    converting item by item from an iterator costs about 1,000 instructions an item (an alias run of 68 ops: 69 k
    against 6 k)."""
    return array("i", np.frombuffer(src, np.intc)[at].tobytes())


def emitted_name(x: Any) -> bool:
    """Whether op name ``x`` may be one the training block's emitter appends without a lookup
    (:attr:`_Emitter.fresh`, :meth:`~schedsim.lower.table._Interner.reserve_new`): a compute phase's (``F``, ``I``,
    ``W`` or ``B``, then the stage's number: :meth:`_Emitter.compute`) or a pipeline send's or recv's (``sendF``,
    ``recvB`` and so on, then the stage's number: :meth:`_Emitter.p2p`). A lookup of such a name registers them."""
    return (x[:1] in _LABELS and x[1:2].isdigit()) or (x[:4] in _P2P and x[4:5] in _FB and x[5:6].isdigit())


def emitted_str(x: Any) -> bool:
    """Whether NCCL group or message string ``x`` may be one the training block's emitter appends without a lookup
    (:attr:`_Emitter.fresh_strs`): a placed op's (:class:`ProtoPlace`), its phase's name prefix (``F<s>.<mb>.``,
    ``B<s>.<mb>.I.``: a label, the stage's number, two dots at least) then a suffix. The pipeline's messages
    (``F<s>.<mb>``: one dot) and batch names (``b<id>``) are not: their lookups register nothing."""
    return x[:1] in _LABELS and x[1:2].isdigit() and x.count(".") >= 2


_LABELS = frozenset("FIWB")
#: a compute action's phases, (phase, label): F, I and W one each, anything else a full backward B = I then W
_PARTS = {CT.F: (("F", "F"),), CT.I: (("I", "I"),), CT.W: (("W", "W"),)}
_PARTS_B = (("I", "B"), ("W", "B"))
_P2P = frozenset(("send", "recv"))
_FB = frozenset("FB")


@dataclass(frozen=True)
class ProtoPlace:
    """Where an op of a stage's op list goes when it is not the next kernel of stream ``compute`` (a third item
    of a ``protos`` row): its ``stream`` id (-1: compute), the earlier ops of the same phase it waits for
    (``after``: their indices in the row list), its ``peer`` global rank (send/recv), and the suffixes of its
    NCCL group name (``batch``) and message (``msg``), each prefixed by the action's name (``F<s>.<mb>.``).
    ``side``: the phase does not end with this op (a stage's collective on its own stream, :mod:`schedsim.lower.
    pipeline`): what waits for the phase (its send, the next phase) waits for the last op that is not ``side``."""

    stream: int = -1
    after: tuple[int, ...] = ()
    peer: int = -1
    batch: str = ""
    msg: str = ""
    side: bool = False
    #: (the phase's first row only) also waits for the rank's last op on stream ``compute`` before the phase, in
    #: the actions emitted so far (FSDP2's root pre-forward: its all-gather streams wait for the current stream)
    after_compute: bool = False


@dataclass(frozen=True)
class _Run:
    """A stage's phase as a run of rows (:meth:`_Emitter._run`): per op its template, name (without the
    action's prefix), stream id and peer global rank (-1 none); the ops that wait for earlier ops of the phase
    (their indices), and the suffixes of the NCCL group names and messages there are; ``plain`` when every op is
    the next kernel of stream ``compute`` (no :class:`ProtoPlace`: :meth:`Table.add_run`)."""

    tmpls: tuple[int, ...]
    names: tuple[str, ...]
    plain: bool
    streams: tuple[int, ...]
    peers: tuple[int, ...]
    after: tuple[tuple[int, tuple[int, ...]], ...]  # (op, the earlier ops it waits for), where it waits
    strs: tuple[tuple[int, int, str], ...]  # (op, 2·op for its group name or 2·op + 1 its message, suffix)
    distinct: bool  # no two ops of the phase share a name
    cols: tuple[array, array, array]  # tmpls, streams and peers as C int arrays (Table copies them whole)
    # of ``after`` and ``strs``: the ops with in-phase dependencies, how many each, their op indices concatenated,
    # and per suffix its place (2·op or 2·op + 1) and the suffix, in order
    shape: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[str, ...]]
    end: int = -1  # the op the phase ends with: the last one not ProtoPlace.side
    on_compute: int = -1  # the last op on stream ``compute`` (-1: none)
    nid: int = -1  # suffix_id(names): the key of the phase's names under a prefix
    sid: int = -1  # suffix_id of the suffixes of ``shape`` (every op's, in order)
    # the distinct suffixes in first-seen order and their suffix_id; per column (group names, messages) the ops
    # that have a string and the index of theirs among the distinct ones: where every string is new, op k's id is
    # the first id appended plus that index (_Emitter._placed_cols)
    uniq: tuple[str, ...] = ()
    uid: int = -1
    batch_at: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    msg_at: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
    none: array = field(default_factory=lambda: array("i"))  # -1 per op
    lead_after_compute: bool = False  # the first row's ProtoPlace.after_compute
    # where another rank's run of this stage list holds the same ops in another order (an odd ring position's
    # recv before its send, training's _ring_order): that run's nid and, per op here, the index of the op of the
    # same name there (its NCCL group and message suffixes the same): under one prefix, op k's name and string ids
    # are that run's at perm[k] (_Emitter.compute)
    alias: tuple[int, np.ndarray] | None = None  # (nid, perm: intp[n])


@dataclass
class _Emitter:
    """Writes one rank's ops of one replica into the table, tracking what each new op waits for (by name id).

    A pipeline rank ``r``'s peer is global rank ``off + r``, or ``ranks[r]`` when ``ranks`` is given (the
    training block's Megatron layout, :mod:`schedsim.lower.training`, which also places its data-parallel
    gradient buckets between a backward's ops through ``on_op``)."""

    table: Table
    plan: PipelinePlan
    protos: dict[tuple[int, str], list[tuple[str, int]]]
    p2p_tmpl: dict[str, int]
    chunk_of: dict[int, int]
    rank: int
    off: int
    prev_of: dict[tuple[int, str, int], int] = field(default_factory=dict)
    pending_sends: list[int] = field(default_factory=list)
    last_compute: int | None = None
    last_on_compute: int | None = None  # the name id of the rank's last op on stream ``compute`` so far
    pair_deps: list[int] = field(default_factory=list)
    streams: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (kind, F/B, peer) -> stream id
    batches: dict[int, int] = field(default_factory=dict)  # batch id -> id of its name "b<id>"
    p2p_consts: dict[tuple[Any, int], tuple[Any, ...]] = field(default_factory=dict)  # (type, stage) -> shared
    compute_stream: int = -1
    ranks: tuple[int, ...] = ()
    on_op: Any = None  # called after each compute op as on_op(stage, mb, phase, op name, name id)
    # on_op_last[stage]: the one microbatch whose W phase of that stage on_op may act in (None: any phase); the
    # other phases are written as one run of rows (Table.add_run, or Table.add_placed where ops are placed by their
    # row) instead of op by op (reduce_after_last_backward's rule, checked inline: no call per phase)
    on_op_last: Mapping[int, int] | None = None
    # (name prefix, the phase's op names) -> their name ids: the same on every rank of a stage, so an emitter
    # that shares it with the other ranks' (the training block) interns each name once
    name_ids: dict[tuple[str, int], Any] = field(default_factory=dict)  # keyed by (prefix, _Run.nid)
    # intern a send's or recv's tag set (Table.tag_id) instead of a fresh one per op: the training block, whose
    # data-parallel replicas repeat every pipeline rank's tag sets
    shared_p2p_tags: bool = False
    runs: dict[tuple[int, str], Any] = field(default_factory=dict)  # (stage, phase) -> _run's answer
    # with shared_p2p_tags: (type, stage, microbatch) -> a send's or recv's name, tag set and message ids, the same
    # on every rank of the stage; shared like name_ids
    p2p_ids: dict[tuple[Any, int, int], tuple[int, int, int]] = field(default_factory=dict)
    # (name prefix, the phase's op names) -> _placed_cols's answer, shared like name_ids
    placed_ids: dict[tuple[str, int], Any] = field(default_factory=dict)
    # when the table held no name emitted_name accepts before the block's (None: not kept), the name prefixes
    # (``F<s>.<mb>.``) of the phases written so far (value -1) and the sends' and recvs' names with their ids:
    # a phase under a prefix not in it, its names distinct, has only new names (each is its prefix, which the
    # stage and microbatch numbers end, then a name of the stage's list), and so has a send or recv not in it (no
    # other op's name starts as emitted_name's): they are appended without a lookup (_Interner.reserve_new).
    # Shared like name_ids.
    fresh: dict[str, int] | None = None
    # with ``fresh``: the table held no NCCL group or message string emitted_str accepts before the block's, so a
    # phase whose names are new (fresh's rule) has new placed-op strings too (its prefix begins each): they are
    # appended without a lookup (_placed_cols)
    fresh_strs: bool = False
    # (sorted op names' suffix_id) -> (nid, names, per op its (group, message) suffixes) of the first run with
    # those ops: a later run with them in another order is its alias (_Run.alias). Shared like name_ids.
    orders: dict[int, tuple[int, tuple[str, ...], dict[int, tuple[str, str]]]] = field(default_factory=dict)
    # (a phase's rows, as a tuple) -> its _Run, shared like orders (None: not kept): a rank whose stage list holds
    # the rows another rank's held (every rank of a stage but the ring positions' own rows) takes that _Run. Its
    # alias is the same: the first run with its ops registered in ``orders`` stays the first.
    run_cache: dict[tuple[Any, ...], Any] | None = None
    #: Megatron's interleaved 1F1B with ``overlap_p2p_comm`` (lone isend/irecv through torch's ProcessGroupNCCL),
    #: in its issue order (:func:`schedsim.pipeline.comms.megatron_interleaved_batched` with ``overlap``): a recv
    #: waits for the compute issued before it (``ProcessGroupNCCL``'s ``syncStreams`` makes the NCCL stream wait for
    #: the current stream at every call; the recv_prev follows a forward, the recv_next a backward or the last
    #: warmup forward), and a forward (backward) waits for every send and recv of the rank's previous forward
    #: (backward) call, its own input's or not (Megatron-LM ``core/pipeline_parallel/schedules.py``
    #: ``forward_backward_pipelining_with_interleaving``: ``for req in fwd_wait_handles: req.wait()`` before the
    #: forward, ``bwd_wait_handles`` before the backward, the cooldown's calls with ``wait_on_reqs``; the same in
    #: the Zero Bubble fork, sail-sg/zero-bubble-pipeline-parallelism 425b42e)
    megatron_overlap: bool = False
    last_fwd: int | None = None  # with megatron_overlap: the name id of the rank's last forward's last op
    # with megatron_overlap: "F"/"B" -> the name ids of the p2p ops of that direction not yet waited for
    unwaited: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.compute_stream = self.table.streams("compute")

    def _global(self, peer: int) -> int:
        return self.ranks[peer] if self.ranks else peer + self.off

    def action(self, act: Any, batch_id: int | None) -> None:
        """Emit the ops of one action (a compute, a send/recv, or DualPipe's overlapped F&B pair)."""
        if self.pair_deps:
            self.pair_deps = []
        subs = act.sub_actions
        if len(subs) > 1:  # DualPipe's overlapped F&B chunk starts when both inputs exist
            for sub in subs:
                key = (sub.stage, "RECV_F" if sub.type is CT.F else "RECV_B", sub.microbatch)
                if key in self.prev_of:
                    self.pair_deps.append(self.prev_of[key])
        for sub in subs:
            if sub.type in COMM_TYPES:
                self.p2p(sub, batch_id)
            else:
                self.compute(sub)

    def _stream(self, kind: str, d: str, peer: int) -> int:
        key = (kind, d, peer)
        sid = self.streams.get(key)
        if sid is None:
            name = f"pp_{kind}" if self.plan.mode == "batched" else f"pp_{kind}{d}_r{self._global(peer)}"
            sid = self.streams[key] = self.table.streams(name)
        return sid

    def _batch(self, batch_id: int | None) -> int:
        if batch_id is None:
            return -1
        b = self.batches.get(batch_id)
        if b is None:
            b = self.batches[batch_id] = self.table.strs(f"b{batch_id}")
        return b

    def _p2p_const(self, typ: Any, s: int) -> tuple[Any, ...]:
        """What every send/recv of type ``typ`` at stage ``s`` shares: its template, stream, peer, the name and
        message prefixes, the key of the compute a send carries, its pp_op value and chunk."""
        s2r = self.plan.s2r
        fwd = typ in (CT.SEND_F, CT.RECV_F)
        kind = "send" if typ in (CT.SEND_F, CT.SEND_B) else "recv"
        if kind == "send":
            peer = s2r[s + 1] if fwd else s2r[s - 1]
        else:
            peer = s2r[s - 1] if fwd else s2r[s + 1]
        d = "F" if fwd else "B"
        src_phase = ("F" if fwd else "I") if kind == "send" else None
        src_stage = s if kind == "send" else (s - 1 if fwd else s + 1)  # the message: who produced it
        c = (self.p2p_tmpl[kind], self._stream(kind, d, peer), self._global(peer), f"{kind}{d}{s}.",
             f"{d}{src_stage}.", src_phase, _VALUE[typ], self.chunk_of[s], kind == "send")
        self.p2p_consts[(typ, s)] = c
        return c

    def p2p(self, sub: Any, batch_id: int | None) -> None:
        """One send or recv, on the stream its p2p mode gives it, waiting for the compute it carries."""
        s, j, typ = sub.stage, sub.microbatch, sub.type
        c = self.p2p_consts.get((typ, s))
        tmpl, stream, peer, name_pre, msg_pre, src_phase, value, chunk, is_send = \
            self._p2p_const(typ, s) if c is None else c
        table = self.table
        shared = self.shared_p2p_tags
        kept = self.p2p_ids.get((typ, s, j)) if shared else None
        if kept is None:
            sj = str(j)
            name = name_pre + sj
            fresh = self.fresh
            if fresh is None:
                opname = table.names(name)
            else:  # the name of a send or recv not written yet is new (fresh's rule); the other ranks' find it there
                opname = fresh.get(name, -1)
                if opname < 0:
                    opname = fresh[name] = table.names.reserve_new(1, [name], emitted_name)
            msg = msg_pre + sj  # the message: who produced it, which mb
            tset = (("chunk", chunk), ("mb", j), ("msg", msg), ("pp_op", value), ("stage", s))
            # Table.tag_id (interned) or Table.new_tag_id (no lookup)
            tags = table.tags(tset) if shared else table.tags.append(tset)
        else:  # another rank's of this stage: the same name, tag set and message (all interned)
            opname, tags, msg_id = kept
        src = None if src_phase is None else self.prev_of.get((s, src_phase, j))
        deps: tuple[int, ...] = () if src is None else (src,)
        batched = self.plan.mode == "batched"
        if batched and self.last_compute is not None and self.last_compute not in deps:
            # Megatron's batch_p2p_sync (default on) calls torch.cuda.synchronize() around each
            # batch, so the host posts it only after all work issued before it has finished
            deps += (self.last_compute,)
        if self.megatron_overlap:
            fwd = typ is CT.SEND_F or typ is CT.RECV_F
            self.unwaited.setdefault("F" if fwd else "B", []).append(opname)
            if not is_send:  # posted after the last forward (recv_prev) or the last compute (recv_next)
                at = self.last_fwd if fwd else self.last_compute
                if at is not None and at not in deps:
                    deps += (at,)
        bid = -1 if batch_id is None else self._batch(batch_id)
        if kept is None:
            msg_id = table.strs(msg)
            if shared:
                self.p2p_ids[(typ, s, j)] = (opname, tags, msg_id)
        table.add_ids(tmpl, self.rank, opname, tags, stream, deps, peer, bid, msg_id)
        self.prev_of[(s, value, j)] = opname
        if is_send and batched:
            self.pending_sends.append(opname)

    def _input(self, s: int, j: int, phase: str) -> tuple[int, ...]:
        """What the first op of phase ``phase`` of (stage ``s``, microbatch ``j``) waits for."""
        prev_of = self.prev_of
        if phase == "F":
            for key in ((s, "RECV_F", j), (s - 1, "F", j) if s > 0 else None):
                if key is not None and key in prev_of:
                    return (prev_of[key],)
        elif phase == "I":
            last = self.plan.num_stages - 1
            for key in ((s, "RECV_B", j), (s + 1, "I", j) if s < last else None, (s, "F", j)):
                if key is not None and key in prev_of:
                    return (prev_of[key],)
        elif (s, "I", j) in prev_of:  # W needs its I
            return (prev_of[(s, "I", j)],)
        return ()

    def _run(self, s: int, phase: str) -> _Run | None:
        """Phase ``phase`` of stage ``s`` as one run of rows (:class:`_Run`; ops placed by their row, the
        context-parallel and TP rings' :class:`ProtoPlace`, included); None where the row list is empty."""
        key = (s, phase)
        if key not in self.runs:
            rows = self.protos[key]
            run = None
            cache, ck = self.run_cache, None
            if cache is not None and rows:
                ck = tuple(rows)
                run = cache.get(ck)
                if run is not None:
                    self.runs[key] = run
                    return run  # type: ignore[no-any-return]
            if rows:
                cs, n = self.compute_stream, len(rows)
                names = tuple([r[0] for r in rows])
                tmpls = tuple([r[1] for r in rows])
                # the rows placed by a ProtoPlace (few: a ring's send/recv, an asynchronous collective), by index;
                # every other row is the next kernel of stream compute
                at: dict[int, ProtoPlace] = {k: r[2] for k, r in enumerate(rows) if len(r) > 2}  # type: ignore[misc]
                stream_l, peer_l = [cs] * n, [-1] * n
                for k, a in at.items():
                    if a.stream >= 0:
                        stream_l[k] = a.stream
                    peer_l[k] = a.peer
                streams, peers = tuple(stream_l), tuple(peer_l)
                after = tuple((k, a.after) for k, a in at.items() if a.after)
                sfx = [(k, x) for k, a in at.items() for x in (a.batch, a.msg)]
                strs = tuple((k, 2 * k + (i % 2), x) for i, (k, x) in enumerate(sfx) if x)
                uniq = tuple(dict.fromkeys(x[2] for x in strs))
                where = {x: i for i, x in enumerate(uniq)}
                cols = [tuple(x for x in strs if x[1] % 2 == c) for c in (0, 1)]
                end = n - 1  # the last row that is not side (the last row where every one is)
                while end >= 0 and end in at and at[end].side:
                    end -= 1
                on_compute = n - 1  # the last row on stream compute (-1: none)
                while on_compute >= 0 and stream_l[on_compute] != cs:
                    on_compute -= 1
                distinct = len(set(names)) == n
                run = _Run(tmpls, names, not at, streams, peers, after, strs, distinct,
                           (array("i", tmpls), array("i", streams), array("i", peers)),
                           (tuple(k for k, _a in after), tuple(len(a) for _k, a in after),
                            tuple(i for _k, a in after for i in a), tuple(x[1] for x in strs),
                            tuple(x[2] for x in strs)),
                           end=end if end >= 0 else n - 1, on_compute=on_compute,
                           nid=suffix_id(names), sid=suffix_id(tuple(x[2] for x in strs)), uniq=uniq,
                           uid=suffix_id(uniq),
                           batch_at=(tuple(x[0] for x in cols[0]), tuple(where[x[2]] for x in cols[0])),
                           msg_at=(tuple(x[0] for x in cols[1]), tuple(where[x[2]] for x in cols[1])),
                           none=array("i", (-1,)) * n,
                           lead_after_compute=0 in at and at[0].after_compute,
                           alias=self._alias(names, {k: (a.batch, a.msg) for k, a in at.items()}) if distinct
                           else None)
                if ck is not None and cache is not None:
                    cache[ck] = run
            self.runs[key] = run
        return self.runs[key]  # type: ignore[no-any-return]

    def _alias(self, names: tuple[str, ...], pairs: dict[int, tuple[str, str]]) -> tuple[int, np.ndarray] | None:
        """:attr:`_Run.alias` of a run of ops ``names`` (distinct) with NCCL group and message suffixes ``pairs``
        (by op index; ``("", "")`` where absent), registering it in :attr:`orders` when it is the first with these
        ops."""
        nid = suffix_id(names)
        first = self.orders.setdefault(suffix_id(tuple(sorted(names))), (nid, names, pairs))
        if first[0] == nid:
            return None
        at = {x: k for k, x in enumerate(first[1])}
        perm = tuple(at[x] for x in names)
        none = ("", "")
        theirs = first[2]
        if any(theirs.get(i, none) != pairs.get(k, none) for k, i in enumerate(perm)):
            return None
        return first[0], np.array(perm, np.intp)

    def _placed_cols(self, pre: str, run: _Run, ids: Any, new: bool) -> tuple[Any, Any, list[int], array, array]:
        """Of a run with placed ops under name prefix ``pre`` (name ids ``ids``): the ops that wait for ops of
        their own phase, how many each, those ops' name ids (concatenated), and each op's NCCL group name's and
        message's string ids (-1: none), interned in the op-by-op order (each op's group name, then its message)
        and kept for the other ranks (the same strings): :meth:`Table.add_placed`'s arguments. ``new``: none of
        the strings is interned yet (:attr:`fresh_strs`), so the distinct ones take the next ids in first-seen
        order (what interning them in turn gives) without a lookup each."""
        key = (pre, run.nid)
        got = self.placed_ids.get(key)
        if got is None:
            dep_at, dep_n, flat, ats, sfx = run.shape
            alias = None if run.alias is None else self.placed_ids.get((pre, run.alias[0]))
            if alias is not None and run.alias is not None:  # the same strings as the other order's (_Run.alias)
                perm = run.alias[1]
                batch, msg = _gather(alias[3], perm), _gather(alias[4], perm)
            elif new:
                base = self.table.strs.reserve_new(len(run.uniq), partial(_full_names, pre, run.uid, run.uniq),
                                                   emitted_str) if run.uniq else 0
                cols = []
                for at, which in (run.batch_at, run.msg_at):
                    col = run.none  # no string in the column: the run's -1s, shared (read only)
                    if at:
                        col = array("i", run.none)
                        deque(map(col.__setitem__, at, map(base.__add__, which)), maxlen=0)  # in C
                    cols.append(col)
                batch, msg = cols
            else:
                both = [-1] * (2 * len(ids))  # each op's group name, then its message
                sids = intern_list(self.table.strs, _full_names(pre, run.sid, sfx))
                deque(map(both.__setitem__, ats, sids), maxlen=0)  # both[at] = sid, in C
                batch, msg = array("i", both[0::2]), array("i", both[1::2])
            got = self.placed_ids[key] = (dep_at, dep_n, list(map(ids.__getitem__, flat)), batch, msg)
        return got  # type: ignore[no-any-return]

    def compute(self, sub: Any) -> None:
        """The ops of one F, I, W or full backward B (= I then W) of a stage on a microbatch."""
        s, j, typ = sub.stage, sub.microbatch, sub.type
        chunk = self.chunk_of[s]
        table = self.table
        runs = self.runs
        for phase, label in _PARTS.get(typ, _PARTS_B):
            first = self._input(s, j, phase)
            if self.megatron_overlap and phase != "W":  # the previous call of this direction, waited for
                held = self.unwaited.pop("F" if phase == "F" else "B", None)
                if held:
                    first += tuple(x for x in held if x not in first)
            if self.pair_deps or self.pending_sends:
                deps = list(first)
                if self.pair_deps:
                    deps.extend(d for d in self.pair_deps if d not in deps)
                    self.pair_deps = []
                if self.pending_sends:  # batched p2p: the call returns when its sends completed too
                    deps.extend(self.pending_sends)
                    self.pending_sends = []
                first = tuple(deps)
            tags = table.tags((("chunk", chunk), ("mb", j), ("phase", phase), ("pp_op", label), ("stage", s)))
            pre = f"{label}{s}.{j}." if label == phase else f"B{s}.{j}.{phase}."
            run = runs[(s, phase)] if (s, phase) in runs else self._run(s, phase)
            if run is not None and run.lead_after_compute and self.last_on_compute is not None \
                    and self.last_on_compute not in first:
                first += (self.last_on_compute,)
            if run is not None and (self.on_op is None or (
                    self.on_op_last is not None and (phase != "W" or j != self.on_op_last.get(s)))):
                self._write_run(s, j, phase, pre, run, tags, first)
            else:
                self._write_rows(s, j, phase, pre, run, tags, first)
        if typ is CT.F:
            self.last_fwd = self.last_compute
        if typ is not CT.F and typ is not CT.I and typ is not CT.W:  # a full backward hands its input gradient
            self.prev_of[(s, "I", j)] = self.prev_of[(s, "W", j)]  # on when the whole B is done

    def _run_ids(self, pre: str, run: _Run) -> tuple[Any, bool]:
        """The name ids of ``run``'s ops under prefix ``pre`` (an array, kept in :attr:`name_ids` for the other
        ranks), and whether they were all new (then the placed strings are too, where :attr:`fresh_strs`)."""
        key = (pre, run.nid)
        ids = self.name_ids.get(key)
        if ids is not None:
            return ids, False
        table, fresh, new = self.table, self.fresh, False
        alias = None if run.alias is None else self.name_ids.get((pre, run.alias[0]))
        if alias is not None and run.alias is not None:  # the other order's names, interned (_Run.alias)
            ids = _gather(alias, run.alias[1])
        elif fresh is not None and run.distinct and pre not in fresh:  # every name new (fresh's rule)
            base = table.names.reserve_new(len(run.names), partial(_full_names, pre, run.nid, run.names),
                                           emitted_name)
            ids = _id_range(base, len(run.names))
            new = self.fresh_strs
        else:
            ids = array("i", intern_list(table.names, _full_names(pre, run.nid, run.names), run.distinct))
        if fresh is not None:
            fresh[pre] = -1
        self.name_ids[key] = ids
        return ids, new

    def _write_run(self, s: int, j: int, phase: str, pre: str, run: _Run, tags: int, first: tuple[int, ...]) -> None:
        """:meth:`compute`'s phase as one run of rows (:meth:`Table.add_placed`)."""
        table = self.table
        ids, new = self._run_ids(pre, run)
        if run.plain:
            table.add_placed(run.cols[0], self.rank, ids, tags, run.cols[1], first, (), (), (), run.none, run.none,
                             run.none)
        else:
            dep_at, dep_n, dep, batch, msg = self._placed_cols(pre, run, ids, new)
            table.add_placed(run.cols[0], self.rank, ids, tags, run.cols[1], first, dep_at, dep_n, dep, run.cols[2],
                             batch, msg)
        if run.on_compute >= 0:
            self.last_on_compute = ids[run.on_compute]
        self.last_compute = ids[-1]
        self.prev_of[(s, phase, j)] = ids[run.end]

    def _write_rows(self, s: int, j: int, phase: str, pre: str, run: _Run | None, tags: int,
                    first: tuple[int, ...]) -> None:
        """:meth:`compute`'s phase op by op (:meth:`_rows`: ``on_op`` acts in it, or no run)."""
        if run is None:  # an empty row list: the first row's after_compute as the op-by-op path reads it
            lead = self.protos[(s, phase)][:1]
            if lead and len(lead[0]) > 2 and lead[0][2].after_compute and self.last_on_compute is not None \
                    and self.last_on_compute not in first:  # type: ignore[misc]
                first += (self.last_on_compute,)
        fresh = self.fresh
        new = False
        known = None if run is None else self.name_ids.get((pre, run.nid))  # another rank's, this phase
        if fresh is not None:
            if pre not in fresh:  # every name new where they differ (fresh's rule): appended, not looked up
                new = run.distinct if run is not None else _distinct(self.protos[(s, phase)])
            fresh[pre] = -1
        oname, end, done = self._rows(s, j, phase, pre, tags, first, new, known)
        if run is not None and known is None:
            self.name_ids[(pre, run.nid)] = array("i", done)
        self.last_compute = oname
        self.prev_of[(s, phase, j)] = oname if end < 0 else end

    def _rows(self, s: int, j: int, phase: str, pre: str, tags: int, first: tuple[int, ...],
              new: bool = False, known: Any = None) -> tuple[int, int, list[int]]:
        """:meth:`compute`'s op-by-op path for one phase: each row of the stage's phase added on its own; returns
        the last op's name id, the last one that is not ``side`` (-1: none) and every op's name id. ``new``: the
        phase's names are new (:attr:`fresh`'s rule), each appended without a lookup (the ids a lookup gives; a
        name ``on_op`` interns between two is not one emitted_name accepts, so none of them); ``known``: their ids,
        interned by another rank's phase of the same names (:attr:`name_ids`), not looked up."""
        table, names, compute = self.table, self.table.names, self.compute_stream
        done: list[int] = []
        oname = end = -1
        for k, row in enumerate(self.protos[(s, phase)]):
            tname, tid = row[0], row[1]
            oname = known[k] if known is not None else names.reserve_new(1, [pre + tname], emitted_name) if new \
                else names(pre + tname)
            if len(row) > 2:  # an op placed by its row (training's context-parallel ring): ProtoPlace
                at: ProtoPlace = row[2]  # type: ignore[misc]
                table.add_ids(tid, self.rank, oname, tags, compute if at.stream < 0 else at.stream,
                              first + tuple(done[i] for i in at.after), at.peer,
                              table.strs(pre + at.batch) if at.batch else -1,
                              table.strs(pre + at.msg) if at.msg else -1)
                if at.stream < 0:
                    self.last_on_compute = oname
            else:
                table.add_ids(tid, self.rank, oname, tags, compute, first, -1, -1, -1)
                self.last_on_compute = oname
            done.append(oname)
            if len(row) <= 2 or not row[2].side:  # type: ignore[misc]
                end = oname
            first = ()
            if self.on_op is not None:
                self.on_op(s, j, phase, tname, oname)
        return oname, end, done


def _distinct(rows: list[Any]) -> bool:
    """Whether no two rows of a phase's list share an op name."""
    return len({r[0] for r in rows}) == len(rows)


def megatron_overlapped(plan: PipelinePlan) -> bool:
    """Whether ``plan`` is Megatron's interleaved 1F1B with ``overlap_p2p_comm`` (lone isend/irecv: ``p2p:
    overlapped``, v > 1, Megatron's order rather than torch's), whose recvs and passes take the waits of
    :attr:`_Emitter.megatron_overlap`; a ``pipeline:`` block and a ``training:`` block alike."""
    return plan.mode == "overlapped" and plan.name == "interleaved_1f1b" and plan.v > 1 and not plan.torch_rules


def last_backward(plan: PipelinePlan) -> dict[int, int]:
    """Per stage, the microbatch of its last backward (W, or full B) in its rank's program order: after that
    action's weight gradients the stage chunk's gradients are complete. Both Megatron-LM schedules run a chunk's
    backwards in microbatch order (``megatron/core/pipeline_parallel/schedules.py``), so there it is ``m - 1``."""
    c = plan.cols
    if c is not None:  # rows in program order per rank; a later row of a stage overwrites an earlier one
        back = np.flatnonzero(c.typ >= 2)  # type codes 0..3: F, I, B, W
        return dict(zip(c.stage[back].tolist(), c.mb[back].tolist(), strict=True))
    out: dict[int, int] = {}
    for acts in plan.actions().values():
        for a in acts:
            if a is not None:
                for x in a.sub_actions:
                    if x.type is CT.W or x.type is CT.B:
                        out[x.stage] = x.microbatch
    return out


def reduce_after_last_backward(em: _Emitter, last: Mapping[int, int], ready: Mapping[int, Mapping[str, Any]],
                               issue: Callable[[int, Any, int], None]) -> None:
    """Megatron-LM's ``overlap_grad_reduce`` rule, on emitter ``em``: a gradient bucket's reduction is issued as
    soon as the backward that completes it has run (``megatron/core/distributed/param_and_grad_buffer.py``:
    ``register_grad_ready`` starts a bucket's ``start_grad_sync`` when its last parameter's gradient is ready,
    which happens in the last microbatch's backward, the earlier ones running under ``no_sync``). ``last``: per
    stage, the microbatch of its last backward (:func:`last_backward`); ``ready``: per stage, weight-gradient op
    name (the W phase's, or a full B's W part) -> the bucket it completes; ``issue(stage, bucket, name id of that
    op)`` writes the reduction, called right after the op, so that it comes next in the rank's program order.
    Used by the ``training:`` block (Megatron's buckets) and the ``pipeline:`` block (one per model chunk)."""

    def on_op(s: int, j: int, phase: str, name: str, nid: int) -> None:
        b = ready[s].get(name) if phase == "W" and j == last.get(s) else None
        if b is not None:
            issue(s, b, nid)

    em.on_op = on_op
    em.on_op_last = last
