"""The named lists of schedsim, each defined once: op kinds, collective kinds, data types; and the op-kind registry.

Every other module imports these instead of spelling the names again. The ``Literal`` types are
the definitions (pydantic validates against them, mypy checks them); the tuples are derived from
them for run-time membership tests.

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
from typing import Literal, get_args

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
    "CollectiveKind",
    "ComputeKind",
    "DType",
    "OpKind",
    "P2PKind",
    "TableKind",
    "kind_info",
]

#: Element types of tensors (sizes in :data:`schedsim.units.DTYPE_BYTES`).
DType = Literal["fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "int32", "int64", "uint8"]

#: Work on an SM: a GEMM from its shape, or compute given by time/FLOP/bytes.
ComputeKind = Literal["matmul", "compute"]
#: Point-to-point messages (NCCL send/recv).
P2PKind = Literal["send", "recv"]
#: NCCL collectives a schedule can issue.
CollectiveKind = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "scatter", "gather"
]
#: Every op kind of the schedule language, in the order the docs list them.
OpKind = Literal[ComputeKind, "memcpy", P2PKind, CollectiveKind]
#: Kinds a hardware profile has a measured-time table for: the collectives and the p2p exchange.
TableKind = Literal[CollectiveKind, "sendrecv"]

DTYPES: tuple[str, ...] = get_args(DType)
COMPUTE_KINDS: tuple[str, ...] = get_args(ComputeKind)
P2P_KINDS: tuple[str, ...] = get_args(P2PKind)
COLLECTIVE_KINDS: tuple[str, ...] = get_args(CollectiveKind)
COMM_KINDS: tuple[str, ...] = COLLECTIVE_KINDS + P2P_KINDS
#: Collectives whose members may each have a size of their own: all_to_all, which NCCL runs as grouped send/recv
#: with a count per peer (torch ``all_to_all_single`` with split sizes), so ranks' totals differ (MoE).
PER_RANK_SIZE: tuple[str, ...] = ("all_to_all",)
OP_KINDS: tuple[str, ...] = get_args(OpKind)
TABLE_KINDS: tuple[str, ...] = get_args(TableKind)
#: Collectives as imported traces name them: the schedule's, plus NCCL's barrier.
TRACE_COLLECTIVE_KINDS: tuple[str, ...] = COLLECTIVE_KINDS + ("barrier",)


#: What an op kind occupies on its GPU: SMs (``compute``), a copy engine (``copy``), NCCL over a link (``comm``).
Resource = Literal["compute", "copy", "comm"]
#: The cost rule of :class:`schedsim.gpu.cost.CostModel` that times a kind: the GEMM table, the roofline, the copy
#: engine, or the network model (:class:`schedsim.network.model.NetworkModel`).
CostRule = Literal["gemm", "roofline", "copy", "network"]
#: Host-call class of a kind (rule host-issue, :func:`schedsim.gpu.host.host_class`).
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
        The class of :mod:`schedsim.spec.model` that validates a written op of this kind; ``fields`` are the
        fields it requires (``tests/core/test_kind_registry.py`` holds the two equal).
    resource, cost, host : str
        :data:`Resource`, :data:`CostRule`, :data:`HostCall`. ``resource`` also names the stream an op of the kind
        runs on when it names none (``compute``, ``copy``, ``comm``).
    executor : str
        The method of ``executor.kernels.Kernels`` that builds the op's torch call.
    table : str
        The kind of the profile's measured busbw table that times it (``sendrecv`` for send/recv), ``""`` none.
    one_rank : str
        :data:`OneRank`.
    rooted : bool
        A collective with a ``root`` rank (broadcast, reduce, scatter, gather), which must be in its group.
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


def _collective(name: str, one_rank: OneRank, rooted: bool) -> KindInfo:
    return KindInfo(name, "CollectiveOp", (), "comm", "network", "collective", "_collective", name, one_rank, rooted)


#: The op-kind registry: kind name -> :class:`KindInfo`, in :data:`OP_KINDS` order. One-rank collectives: the
#: in-place kinds as the executor calls them (``dist.all_reduce``, ``broadcast``, ``reduce`` on one buffer) are
#: no-ops in NCCL (src/enqueue.cc, ``ncclLaunchOneRank``: "for 1 rank, out-of-place is memcpy to self, and in-place
#: is nop"); the others a copy.
KINDS: dict[str, KindInfo] = {k.name: k for k in (
    KindInfo("matmul", "MatmulOp", ("m", "n", "k"), "compute", "gemm", "kernel", "_matmul"),
    KindInfo("compute", "ComputeOp", (), "compute", "roofline", "kernel", "_compute"),
    KindInfo("memcpy", "MemcpyOp", ("direction",), "copy", "copy", "copy", "_memcpy"),
    KindInfo("send", "SendOp", ("peer",), "comm", "network", "p2p", "_p2p", "sendrecv"),
    KindInfo("recv", "RecvOp", ("peer",), "comm", "network", "p2p", "_p2p", "sendrecv"),
    *(_collective(c, "nop" if c in ("all_reduce", "broadcast", "reduce") else "copy",
                  c in ("broadcast", "reduce", "scatter", "gather")) for c in COLLECTIVE_KINDS),
)}


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
