"""The named lists of schedsim, each defined once: op kinds, collective kinds, data types; and the op-kind registry.

Every other module imports these instead of spelling the names again. The op-kind lists are read from the
registry (a new kind is one entry); the ``Literal`` of data types is the definition of :data:`DTYPES`.

The registry (:data:`KINDS`, one :class:`KindInfo` per op kind) says what each stage does with a kind: the spec
model that validates it and the fields it needs, the GPU resource it occupies, the cost rule that times it, its
host-call class, the executor's kernel and the profile table that measures it. The stages read these entries rather
than testing kind names, so a new kind is its entry (and its tests). Entries are names, not functions: this module is
the lowest layer, and each stage maps the name to its own code (``schedsim.gpu.cost.CostModel`` the cost rule,
``executor.kernels`` the kernel).

Examples
--------
>>> COLLECTIVE_KINDS[:3]
('all_reduce', 'all_gather', 'reduce_scatter')
>>> "send" in COMM_KINDS and "send" not in COLLECTIVE_KINDS
True
>>> OP_KINDS == COMPUTE_KINDS + ("memcpy",) + P2P_KINDS + COLLECTIVE_KINDS
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args, overload

__all__ = [
    "COLLECTIVE_KINDS",
    "COMM_KINDS",
    "PER_RANK_SIZE",
    "COMPUTE_KINDS",
    "DTYPES",
    "KINDS",
    "KindInfo",
    "KindList",
    "OP_KINDS",
    "P2P_KINDS",
    "TABLE_KINDS",
    "TRACE_COLLECTIVE_KINDS",
    "DType",
    "TableKind",
    "kind_info",
]

#: Element types of tensors (sizes in :data:`schedsim.units.DTYPE_BYTES`).
DType = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int32", "int64", "uint8"]
DTYPES: tuple[str, ...] = get_args(DType)

#: What an op kind occupies on its GPU: SMs (``compute``), a copy engine (``copy``), NCCL over a link (``comm``).
Resource = Literal["compute", "copy", "comm"]
#: The cost rule of :class:`schedsim.gpu.cost.CostModel` that times a kind: the GEMM table, the roofline, the copy
#: engine, or the network model (:class:`schedsim.network.model.NetworkModel`).
CostRule = Literal["gemm", "roofline", "copy", "network"]
#: Host-call class of a kind (rule host-issue, :func:`schedsim.gpu.host.host_class`): a kernel, a copy, a
#: point-to-point message (NCCL send/recv) or a collective.
HostCall = Literal["kernel", "copy", "p2p", "collective"]
#: The nccl-tests bus factor of a kind, busbw / algbw over n ranks (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``:
#: 2(n-1)/n all_reduce; (n-1)/n all_gather, reduce_scatter, all_to_all; 1 broadcast, reduce; send/recv 1, one
#: message). scatter and gather move what all_gather does, (n-1)/n (:func:`schedsim.network.links.bus_factor`).
BusFactor = Literal["2(n-1)/n", "(n-1)/n", "1"]
#: A group of one rank: NCCL runs nothing (``nop``: in place, ``ncclLaunchOneRank``), copies to itself (``copy``),
#: or the kind is not a collective (``""``).
OneRank = Literal["nop", "copy", ""]


@dataclass(frozen=True)
class KindInfo:
    """One op kind's entry in the registry (module docstring).

    Attributes
    ----------
    name : str
        The kind as a schedule writes it.
    spec : str
        The class of :mod:`schedsim.spec.model` that validates a written op of this kind
        (:func:`schedsim.spec.model.build_op_models` gives it the kind); ``fields`` are the fields it requires
        (``tests/spec/test_kind_registry.py`` holds the two equal).
    resource, cost, host : str
        :data:`Resource`, :data:`CostRule`, :data:`HostCall`. ``resource`` also names the stream an op of the kind
        runs on when it names none (``compute``, ``copy``, ``comm``); ``host`` also makes the kind one of
        :data:`P2P_KINDS` or :data:`COLLECTIVE_KINDS`.
    executor : str
        The method of ``executor.kernels.Materializer`` that builds the op's torch call.
    table : str
        The kind of the profile's measured busbw table that times it (``sendrecv`` for send/recv), ``""`` none.
    one_rank : str
        :data:`OneRank`.
    rooted : bool
        A collective with a ``root`` rank (broadcast, reduce, scatter, gather), which must be in its group.
    per_rank_size : bool
        A collective whose members may each have a size of their own: all_to_all, which NCCL runs as grouped
        send/recv with a count per peer (torch ``all_to_all_single`` with split sizes), so ranks' totals differ
        (MoE); the largest transfer ends it.
    nccl : str
        NCCL's function name (``ncclFuncStr``, src/collectives.cc) of a collective that NCCL's tuning model times
        (src/graph/tuning.cc; :class:`schedsim.network.NcclNetwork` calls it with this name); ``""`` for send/recv and
        for the collectives NCCL runs as grouped send/recv (all_to_all, scatter, gather), which
        :meth:`schedsim.network.NcclNetwork.spread` times: there the ranks of a ``rooted`` kind send through the
        root's NIC alone, the others share their node's NICs.
    bus : str
        :data:`BusFactor`: its nccl-tests bus factor, which also gives the steps of the alpha-beta time on a link
        class (:class:`schedsim.network.links.LinkTables`: 2(n-1) for 2(n-1)/n, 1 for a p2p message, else n-1).
    sender : bool
        A p2p kind whose rank sends to its ``peer`` (send); a p2p kind without it receives from its ``peer``.
    chart : str
        The colour group of the kind's spans in every chart: the key of ``schedsim.report.chart_base.KIND_COLORS``
        whose colour they take when the kind has none of its own there (``""``: its own name).
    chakra : str
        How Chakra's execution trace schema (mlcommons/chakra ``schema/protobuf/et_def.proto``) writes an op of the
        kind (:mod:`schedsim.report.chakra`): its ``CollectiveCommType`` for a collective, its ``NodeType`` else
        (``COMM_SEND_NODE``, ``COMM_RECV_NODE``, ``COMP_NODE``).
    """

    name: str
    spec: str
    fields: tuple[str, ...]
    resource: Resource
    cost: CostRule
    host: HostCall
    executor: str
    table: str = ""
    one_rank: OneRank = ""
    rooted: bool = False
    per_rank_size: bool = False
    nccl: str = ""
    bus: BusFactor = "1"
    sender: bool = False
    chakra: str = "COMP_NODE"
    chart: str = ""


def _collective(name: str, one_rank: OneRank, nccl: str, bus: BusFactor, rooted: bool = False,
                per_rank_size: bool = False) -> KindInfo:
    """A collective's entry: timed from its own table; built by ``Materializer._<name>``; Chakra's
    ``CollectiveCommType`` is its name in capitals."""
    return KindInfo(name, "CollectiveOp", (), "comm", "network", "collective", f"_{name}", name, one_rank, rooted,
                    per_rank_size, nccl=nccl, bus=bus, chakra=name.upper())


class _Registry(dict[str, KindInfo]):
    """A dict that counts its changes (``version``), so that each :class:`KindList` reads it again only after one,
    and calls each of ``on_change`` after every change (:mod:`schedsim.spec.model` puts its
    :func:`~schedsim.spec.model.build_op_models` there: registering a kind is enough for schedules to name it).
    What a callback raises (an entry naming no spec model: KeyError) comes out of the change, and an addition it
    refuses is undone (the registry as it was, the callbacks run again)."""

    version = 0

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.on_change: list[Callable[[], None]] = []

    def _changed(self, before: dict[str, KindInfo] | None = None) -> None:
        self.version += 1
        try:
            for f in self.on_change:
                f()
        except Exception:
            if before is None:
                raise
            super().clear()  # refused: the registry as it was
            super().update(before)
            self._changed()
            raise

    def __setitem__(self, key: str, value: KindInfo) -> None:
        before = dict(self)
        super().__setitem__(key, value)
        self._changed(before)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._changed()

    def pop(self, *args: Any) -> Any:
        got = super().pop(*args)
        self._changed()
        return got

    def popitem(self) -> tuple[str, KindInfo]:
        got = super().popitem()
        self._changed()
        return got

    def setdefault(self, key: str, default: Any = None) -> Any:
        before = dict(self)
        got = super().setdefault(key, default)
        self._changed(before)
        return got

    def update(self, *args: Any, **kw: Any) -> None:
        before = dict(self)
        super().update(*args, **kw)
        self._changed(before)

    def clear(self) -> None:
        super().clear()
        self._changed()


#: The op-kind registry: kind name -> :class:`KindInfo`, in the order error messages and the schema list them. One-rank
#: collectives: the in-place kinds as the executor calls them (``dist.all_reduce``, ``broadcast``, ``reduce`` on one
#: buffer) are no-ops in NCCL (src/enqueue.cc, ``ncclLaunchOneRank``: "for 1 rank, out-of-place is memcpy to self,
#: and in-place is nop"); the others a copy.
KINDS: _Registry = _Registry((k.name, k) for k in (
    KindInfo("matmul", "MatmulOp", ("m", "n", "k"), "compute", "gemm", "kernel", "_matmul"),
    KindInfo("compute", "ComputeOp", (), "compute", "roofline", "kernel", "_compute"),
    KindInfo("memcpy", "MemcpyOp", ("direction",), "copy", "copy", "copy", "_memcpy"),
    KindInfo("send", "SendOp", ("peer",), "comm", "network", "p2p", "_send", "sendrecv", sender=True,
             chakra="COMM_SEND_NODE"),
    KindInfo("recv", "RecvOp", ("peer",), "comm", "network", "p2p", "_recv", "sendrecv", chakra="COMM_RECV_NODE"),
    _collective("all_reduce", "nop", "allreduce", "2(n-1)/n"),
    _collective("all_gather", "copy", "allgather", "(n-1)/n"),
    _collective("reduce_scatter", "copy", "reducescatter", "(n-1)/n"),
    _collective("broadcast", "nop", "broadcast", "1", rooted=True),
    _collective("reduce", "nop", "reduce", "1", rooted=True),
    _collective("all_to_all", "copy", "", "(n-1)/n", per_rank_size=True),
    _collective("scatter", "copy", "", "(n-1)/n", rooted=True),
    _collective("gather", "copy", "", "(n-1)/n", rooted=True),
))


class KindList(Sequence[str]):
    """The kinds of :data:`KINDS` whose entry passes the first of ``tests``, in the registry's order, then those
    passing the second..., then ``extra``; read from the registry at each use: a kind registered after import (a
    plugin, a test) is in every list that modules imported before (each read is kept until the registry next
    changes). Compares equal to a tuple of the same names; ``+`` gives a tuple. ``of``: list a field of the
    entries instead of their kind names (each value once, where not empty)."""

    def __init__(self, *tests: Callable[[KindInfo], bool], extra: tuple[str, ...] = (),
                 of: Callable[[KindInfo], str] | None = None) -> None:
        self._tests = tests
        self._extra = extra
        self._of = of
        self._version = -1
        self._tuple: tuple[str, ...] = ()
        self._set: frozenset[str] = frozenset()

    def _names(self) -> tuple[str, ...]:
        version = KINDS.version
        if version != self._version:  # the registry changed since the last read: read it again
            of = self._of
            names = (k if of is None else of(i) for t in self._tests for k, i in KINDS.items() if t(i))
            self._tuple = tuple(dict.fromkeys(n for n in names if n)) + self._extra
            self._set = frozenset(self._tuple)
            self._version = version
        return self._tuple

    def __contains__(self, kind: object) -> bool:
        if self._version != KINDS.version:
            self._names()
        return kind in self._set

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        return self._names()[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return self._names() + tuple(other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return tuple(other) + self._names()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, KindList)) else other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


#: Every op kind of the schedule language, in the registry's order. The lists below (:class:`KindList`) are read
#: from the registry at each use, so they hold kinds registered after import too.
OP_KINDS = KindList(lambda i: True)
#: Work on an SM: a GEMM from its shape, or compute given by time/FLOP/bytes.
COMPUTE_KINDS = KindList(lambda i: i.resource == "compute")
#: Point-to-point messages (NCCL send/recv).
P2P_KINDS = KindList(lambda i: i.host == "p2p")
#: NCCL collectives a schedule can issue.
COLLECTIVE_KINDS = KindList(lambda i: i.host == "collective")
#: The collectives, then the p2p kinds.
COMM_KINDS = KindList(lambda i: i.host == "collective", lambda i: i.host == "p2p")
#: Collectives whose members may each have a size of their own (:attr:`KindInfo.per_rank_size`).
PER_RANK_SIZE = KindList(lambda i: i.per_rank_size)
#: Kinds a hardware profile has a measured-time table for: the collectives' and the p2p exchange's
#: (:attr:`KindInfo.table`), read from the registry at each use like the lists above (a profile validates its table
#: keys against it when loaded).
TABLE_KINDS = KindList(lambda i: i.host == "collective", lambda i: i.host == "p2p", of=lambda i: i.table)
#: Collectives as imported traces name them: the schedule's, plus NCCL's barrier.
TRACE_COLLECTIVE_KINDS = KindList(lambda i: i.host == "collective", extra=("barrier",))

#: A key of a profile's measured tables: one of :data:`TABLE_KINDS` (:mod:`schedsim.hardware.profile` checks it
#: against the registry when a profile loads).
TableKind = str


def kind_info(kind: str) -> KindInfo:
    """The registry entry of op kind ``kind`` (:data:`KINDS`).

    Raises
    ------
    KeyError
        ``kind`` is not an op kind (the schema rejects such ops before any stage asks).

    Examples
    --------
    >>> kind_info("send").table, kind_info("all_reduce").one_rank, kind_info("memcpy").resource
    ('sendrecv', 'nop', 'copy')
    """
    return KINDS[kind]
