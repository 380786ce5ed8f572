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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

__all__ = [
    "COLLECTIVE_KINDS",
    "COMM_KINDS",
    "PER_RANK_SIZE",
    "COMPUTE_KINDS",
    "DTYPES",
    "KINDS",
    "KindInfo",
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
        (``tests/core/test_kind_registry.py`` holds the two equal).
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


def _collective(name: str, one_rank: OneRank, rooted: bool = False, per_rank_size: bool = False) -> KindInfo:
    return KindInfo(name, "CollectiveOp", (), "comm", "network", "collective", "_collective", name, one_rank, rooted,
                    per_rank_size)


#: The op-kind registry: kind name -> :class:`KindInfo`, in the order error messages and the schema list them. One-rank
#: collectives: the in-place kinds as the executor calls them (``dist.all_reduce``, ``broadcast``, ``reduce`` on one
#: buffer) are no-ops in NCCL (src/enqueue.cc, ``ncclLaunchOneRank``: "for 1 rank, out-of-place is memcpy to self,
#: and in-place is nop"); the others a copy.
KINDS: dict[str, KindInfo] = {k.name: k for k in (
    KindInfo("matmul", "MatmulOp", ("m", "n", "k"), "compute", "gemm", "kernel", "_matmul"),
    KindInfo("compute", "ComputeOp", (), "compute", "roofline", "kernel", "_compute"),
    KindInfo("memcpy", "MemcpyOp", ("direction",), "copy", "copy", "copy", "_memcpy"),
    KindInfo("send", "SendOp", ("peer",), "comm", "network", "p2p", "_p2p", "sendrecv"),
    KindInfo("recv", "RecvOp", ("peer",), "comm", "network", "p2p", "_p2p", "sendrecv"),
    _collective("all_reduce", "nop"),
    _collective("all_gather", "copy"),
    _collective("reduce_scatter", "copy"),
    _collective("broadcast", "nop", rooted=True),
    _collective("reduce", "nop", rooted=True),
    _collective("all_to_all", "copy", per_rank_size=True),
    _collective("scatter", "copy", rooted=True),
    _collective("gather", "copy", rooted=True),
)}

#: Every op kind of the schedule language, in the registry's order. The lists below are read from the
#: registry when this module is imported.
OP_KINDS: tuple[str, ...] = tuple(KINDS)
#: Work on an SM: a GEMM from its shape, or compute given by time/FLOP/bytes.
COMPUTE_KINDS: tuple[str, ...] = tuple(k for k, i in KINDS.items() if i.resource == "compute")
#: Point-to-point messages (NCCL send/recv).
P2P_KINDS: tuple[str, ...] = tuple(k for k, i in KINDS.items() if i.host == "p2p")
#: NCCL collectives a schedule can issue.
COLLECTIVE_KINDS: tuple[str, ...] = tuple(k for k, i in KINDS.items() if i.host == "collective")
COMM_KINDS: tuple[str, ...] = COLLECTIVE_KINDS + P2P_KINDS
#: Collectives whose members may each have a size of their own (:attr:`KindInfo.per_rank_size`).
PER_RANK_SIZE: tuple[str, ...] = tuple(k for k, i in KINDS.items() if i.per_rank_size)
#: Kinds a hardware profile has a measured-time table for: the collectives and the p2p exchange.
TABLE_KINDS: tuple[str, ...] = tuple(dict.fromkeys(KINDS[k].table for k in COMM_KINDS if KINDS[k].table))
#: Collectives as imported traces name them: the schedule's, plus NCCL's barrier.
TRACE_COLLECTIVE_KINDS: tuple[str, ...] = COLLECTIVE_KINDS + ("barrier",)

if TYPE_CHECKING:
    TableKind = str
else:
    #: A key of a profile's measured tables (pydantic validates against it): one of :data:`TABLE_KINDS`.
    TableKind = Literal[TABLE_KINDS]


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
