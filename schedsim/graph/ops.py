"""The op instance: one op of the schedule on one rank.

An op id is ``"{name}@r{rank}"`` (``mm3@r0``); :func:`parse_op_id` reads it back,
so ids round-trip through text the way torch pipelining's ``_Action`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from schedsim.kinds import KINDS
from schedsim.tags import TagSet, tag_set, tag_value_key  # re-exported

__all__ = ["Op", "RankGroup", "TagSet", "tag_set", "tag_value_key", "format_op_id", "parse_op_id", "COMPUTE", "COMM",
           "COPY", "resource_of"]

COMPUTE = "compute"
COMM = "comm"
COPY = "copy"

_ID = re.compile(r"^(?P<name>.+)@r(?P<rank>\d+)$")


def format_op_id(name: str, rank: int) -> str:
    """Return the id of op ``name`` on ``rank``: ``"{name}@r{rank}"``."""
    return f"{name}@r{rank}"


def parse_op_id(op_id: str) -> tuple[str, int]:
    """Split an op id into ``(name, rank)``.

    Raises
    ------
    ValueError
        If ``op_id`` is not of the form ``name@rN``.

    Examples
    --------
    >>> parse_op_id("mm3@r0")
    ('mm3', 0)
    """
    m = _ID.match(op_id)
    if not m:
        raise ValueError(f"{op_id!r} is not an op id of the form name@rN")
    return m.group("name"), int(m.group("rank"))


def resource_of(kind: str) -> str:
    """Which GPU resource an op kind occupies: ``compute`` (SMs), ``comm`` (NCCL over a link) or ``copy``, from its
    registry entry (:data:`schedsim.kinds.KINDS`); ``comm`` for a kind outside it (an imported trace's ``barrier``)."""
    info = KINDS.get(kind)
    return info.resource if info is not None else COMM


class RankGroup(tuple):
    """A sorted tuple of ranks that computes its hash once.

    A plain tuple re-hashes all its items on every dict lookup; one collective over 100,000 ranks is
    100,000 ops sharing one group, so per-op lookups keyed by the group were quadratic in the world size.
    Equal to, and hashing like, the plain tuple of the same ranks.
    """

    _h: int

    def __hash__(self) -> int:
        try:
            return self._h
        except AttributeError:
            self._h = tuple.__hash__(self)
            return self._h


@dataclass(slots=True)
class Op:
    """One op on one rank, after expansion. Units are SI (bytes, FLOP, seconds).

    Treat an Op as immutable (it is not frozen only because frozen dataclasses
    construct about 5x slower, which matters at a million ops).
    ``host_s`` is Python time the user's program spends on the host before issuing
    the op (seconds); ``p2p_batch`` names the ``batch_isend_irecv`` call a send/recv
    belongs to (same name on one rank = one call, one fused NCCL kernel).
    ``repeat`` > 1 means that many identical kernels back to back (``flops`` and
    ``nbytes`` are per kernel). ``nbytes`` is the message size in the nccl-tests convention for collectives
    and p2p, the bytes copied for memcpy, and the bytes moved in HBM for compute
    (for matmul: A, B and C read or written once).
    ``nccl_group`` (an alias of ``p2p_batch``): send/recv ops of one rank with the same value are issued together,
    inside one ``ncclGroupStart``/``ncclGroupEnd`` (torch ``batch_isend_irecv``), at the position of the first of
    them; ``None`` means a lone (unbatched) ``isend``/``irecv``. See :mod:`schedsim.lower.checks`.
    ``graph`` names the CUDA graph the op is captured in (None: launched eagerly): consecutive ops of a rank with
    one name are one launch of it (:mod:`schedsim.lower.graphs`).
    """

    name: str
    rank: int
    kind: str
    stream: str
    seq: int
    deps: tuple[str, ...] = ()
    group: tuple[int, ...] = ()
    peer: int | None = None
    root: int | None = None
    nbytes: float = 0.0
    flops: float = 0.0
    dtype: str | None = None
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    repeat: int = 1
    duration_s: float | None = None
    direction: str | None = None
    tag: str | None = None
    tags: tuple[tuple[str, Any], ...] = ()
    source: str = field(default="", compare=False)
    spec_index: int = field(default=-1, compare=False)
    host_s: float = 0.0
    p2p_batch: str | None = None
    #: all_to_all with per-peer sizes: (bytes sent to, bytes received from) each member of ``group``, in group
    #: order (torch ``all_to_all_single``'s ``input_split_sizes`` / ``output_split_sizes`` × the element size);
    #: None: ``nbytes`` split evenly. ``nbytes`` is then the larger of the two sums (nccl-tests' size).
    splits: tuple[tuple[float, ...], tuple[float, ...]] | None = field(default=None, repr=False)
    graph: str | None = field(default=None, repr=False)  # repr as before the field (tests/data/lowering_golden.npz)
    #: a send/recv's process group as written (its ``group:``, sorted ranks); None: the family's, inferred
    #: (:func:`schedsim.lower.p2p_comms.batch_communicators`)
    comm: tuple[int, ...] | None = field(default=None, repr=False)

    def instance(self, name: str, rank: int, seq: int, deps: tuple[str, ...], tags: tuple) -> Op:
        """A copy of this prototype with a new name, rank, position, dependencies and tags."""
        return Op(name, rank, self.kind, self.stream, seq, deps, self.group, self.peer, self.root, self.nbytes,
                  self.flops, self.dtype, self.m, self.n, self.k, self.batch, self.repeat, self.duration_s,
                  self.direction, self.tag, tags, self.source, self.spec_index, self.host_s, self.p2p_batch,
                  self.splits, self.graph, self.comm)

    @property
    def nccl_group(self) -> str | None:
        """The NCCL group launch this op belongs to (its ``p2p_batch``), or None for a lone launch."""
        return self.p2p_batch

    @property
    def id(self) -> str:
        """``name@rN``; :func:`parse_op_id` reads it back."""
        return format_op_id(self.name, self.rank)

    @property
    def resource(self) -> str:
        """``compute``, ``comm`` or ``copy`` (:func:`resource_of`)."""
        return resource_of(self.kind)

    def __str__(self) -> str:
        return self.id
