"""The named lists of schedsim, each defined once: op kinds, collective kinds, data types.

Every other module imports these instead of spelling the names again. The ``Literal`` types are
the definitions (pydantic validates against them, mypy checks them); the tuples are derived from
them for run-time membership tests.

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

from typing import Literal, get_args

__all__ = [
    "COLLECTIVE_KINDS",
    "COMM_KINDS",
    "PER_RANK_SIZE",
    "COMPUTE_KINDS",
    "DTYPES",
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
