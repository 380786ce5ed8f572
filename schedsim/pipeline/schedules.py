"""Pure generators of per-rank pipeline-parallel compute orders.

Every generator returns a :data:`~schedsim.pipeline.actions.PipelineOrder`:
``{rank: [action, ...]}``, the order in which each rank issues its compute
actions (F, I, B, W, or DualPipe's overlapped pair). The lists hold no idle
slots: timing is not part of an order, it comes from a simulator
(:func:`schedsim.pipeline.analytic.unit_time_makespan`, or the core).
PyTorch pads its orders with ``None`` for a lock-step picture; dropping those
gives exactly the lists here (tested against ``get_schedule_ops``).

Notation: p = pipeline ranks, m = microbatches, v = chunks (stages) per rank,
r = rank, g = Megatron's ``microbatch_group_size_per_vp_stage``.

Placement (:func:`stage_to_rank`): ``"loop"`` puts chunk c of rank r at stage
c*p + r (Megatron interleaving, torch ``generate_stage_to_rank_mapping(style=
"loop")``); ``"v"`` zig-zags, so with v=2 rank r holds stages r and 2p-1-r
(ZB-V, DualPipeV; torch ``style="v"``).

The generators live one family per module: GPipe and the 1F1B family (1F1B, interleaved 1F1B, looped BFS)
in :mod:`~schedsim.pipeline.schedules_1f1b`, the zero-bubble family (ZB-H1, interleaved zero bubble, ZB-V) in
:mod:`~schedsim.pipeline.schedules_zb`, DualPipeV in :mod:`~schedsim.pipeline.schedules_dualpipe`, and their
argument checks in :mod:`~schedsim.pipeline.schedules_common`. This module holds the registry
(:class:`ScheduleInfo`, :func:`get_schedule`, :func:`generate`) and stage placement (:func:`stage_to_rank`).

Sources: Megatron-LM d98e8a64 ``megatron/core/pipeline_parallel/schedules.py``;
PyTorch 00722e64 ``torch/distributed/pipelining/schedules.py``; DeepSeek
DualPipe 3da1bbe ``dualpipe/dualpipev.py``; sail-sg zero-bubble 39f2c186.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from schedsim.errors import ScheduleConfigError
from schedsim.pipeline.actions import (
    PipelineOrder,
)
from schedsim.pipeline.schedules_1f1b import gpipe, interleaved_1f1b, looped_bfs, one_f_one_b
from schedsim.pipeline.schedules_common import Placement
from schedsim.pipeline.schedules_dualpipe import dualpipev
from schedsim.pipeline.schedules_zb import interleaved_zero_bubble, zb_h1, zbv

__all__ = [
    "ScheduleInfo",
    "generate",
    "get_schedule",
    "min_microbatches",
    "schedule_names",
    "stage_to_rank",
]


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ScheduleInfo:
    """A registered schedule: generator, placement, chunk count, limits, source.

    Attributes
    ----------
    name : str
        Canonical schedsim name (``"1f1b"``).
    aliases : tuple of str
        Other accepted names, including PyTorch's ``get_schedule_class`` name.
    torch_name : str or None
        PyTorch's name, when torch has the schedule.
    placement : {"loop", "v"}
        Stage placement, see :func:`stage_to_rank`.
    fixed_chunks : int or None
        Chunks per rank when the schedule fixes it, else None (v is free).
    default_chunks : int
        v used when the caller passes none.
    source : str
        Where the ordering rule comes from.
    builder : callable
        The generator, ``builder(p, m[, v], **kwargs)``.
    min_m : callable
        ``min_m(p, v)``, the fewest microbatches (see :func:`min_microbatches`).
    checks_microbatches : bool
        Whether ``builder`` takes ``check_microbatches``.
    takes_group_size : bool
        Whether ``builder`` takes ``group_size``.
    """

    name: str
    aliases: tuple[str, ...]
    torch_name: str | None
    placement: Placement
    fixed_chunks: int | None
    default_chunks: int
    source: str
    builder: Callable[..., PipelineOrder] = field(repr=False)
    min_m: Callable[[int, int], int] = field(repr=False)
    checks_microbatches: bool = False
    takes_group_size: bool = False

    def chunks(self, v: int | None = None) -> int:
        """Resolve v: the fixed value, the caller's, or the default.

        Raises
        ------
        ScheduleConfigError
            v given but differs from a fixed chunk count.
        """
        if self.fixed_chunks is not None:
            if v is not None and v != self.fixed_chunks:
                raise ScheduleConfigError(
                    f"{self.name} runs exactly {self.fixed_chunks} chunk(s) per rank, "
                    f"got v={v}", fix=f"omit v or pass v={self.fixed_chunks}"
                )
            return self.fixed_chunks
        return self.default_chunks if v is None else v

    def num_stages(self, p: int, v: int | None = None) -> int:
        """Global stage count, ``p * chunks(v)``."""
        return p * self.chunks(v)

    def min_microbatches(self, p: int, v: int | None = None) -> int:
        """Fewest microbatches the schedule accepts (see :func:`min_microbatches`)."""
        return self.min_m(p, self.chunks(v))

    def stage_to_rank(self, p: int, v: int | None = None) -> dict[int, int]:
        """Stage -> rank map of this schedule's placement."""
        return stage_to_rank(self.placement, p, self.chunks(v))

    def generate(
        self,
        p: int,
        m: int,
        v: int | None = None,
        *,
        group_size: int | None = None,
        check_microbatches: bool = True,
    ) -> PipelineOrder:
        """Build the order; see :func:`generate`."""
        chunks = self.chunks(v)
        kwargs: dict[str, object] = {}
        if group_size is not None:
            if not self.takes_group_size:
                raise ScheduleConfigError(
                    f"{self.name} has no microbatch group size, got group_size="
                    f"{group_size}", fix="omit group_size (only interleaved_1f1b and interleaved_zb take it)"
                )
            kwargs["group_size"] = group_size
        if self.checks_microbatches:
            kwargs["check_microbatches"] = check_microbatches
        if self.fixed_chunks is None:
            return self.builder(p, m, chunks, **kwargs)
        return self.builder(p, m, **kwargs)


_REGISTRY: tuple[ScheduleInfo, ...] = (
    ScheduleInfo(
        name="gpipe",
        aliases=("GPipe",),
        torch_name="GPipe",
        placement="loop",
        fixed_chunks=1,
        default_chunks=1,
        source="PyTorch ScheduleGPipe",
        builder=gpipe,
        min_m=lambda p, v: 1,
    ),
    ScheduleInfo(
        name="1f1b",
        aliases=("1F1B", "one_f_one_b", "pipedream_flush"),
        torch_name="1F1B",
        placement="loop",
        fixed_chunks=1,
        default_chunks=1,
        source="Megatron forward_backward_pipelining_without_interleaving; PyTorch Schedule1F1B",
        builder=one_f_one_b,
        min_m=lambda p, v: p,
        checks_microbatches=True,
    ),
    ScheduleInfo(
        name="interleaved_1f1b",
        aliases=("Interleaved1F1B", "vpp", "virtual_pipeline"),
        torch_name="Interleaved1F1B",
        placement="loop",
        fixed_chunks=None,
        default_chunks=2,
        source="Megatron forward_backward_pipelining_with_interleaving; PyTorch ScheduleInterleaved1F1B",
        builder=interleaved_1f1b,
        min_m=lambda p, v: p,
        checks_microbatches=True,
        takes_group_size=True,
    ),
    ScheduleInfo(
        name="looped_bfs",
        aliases=("LoopedBFS", "bfs"),
        torch_name="LoopedBFS",
        placement="loop",
        fixed_chunks=None,
        default_chunks=2,
        source="PyTorch ScheduleLoopedBFS",
        builder=looped_bfs,
        min_m=lambda p, v: 1,
    ),
    ScheduleInfo(
        name="zb_h1",
        aliases=("ZB1P", "ZBH1", "zero_bubble_h1"),
        torch_name=None,
        placement="loop",
        fixed_chunks=1,
        default_chunks=1,
        source="PyTorch _get_1f1b_rank_ops(enable_zero_bubble=True) on one chunk; ZB paper ZB-H1",
        builder=zb_h1,
        min_m=lambda p, v: p,
        checks_microbatches=True,
    ),
    ScheduleInfo(
        name="interleaved_zb",
        aliases=("InterleavedZeroBubble", "interleaved_zero_bubble"),
        torch_name="InterleavedZeroBubble",
        placement="loop",
        fixed_chunks=None,
        default_chunks=2,
        source="PyTorch ScheduleInterleavedZeroBubble",
        builder=interleaved_zero_bubble,
        min_m=lambda p, v: p,
        checks_microbatches=True,
        takes_group_size=True,
    ),
    ScheduleInfo(
        name="zbv",
        aliases=("ZBVZeroBubble", "ZB-V", "zb_v"),
        torch_name="ZBVZeroBubble",
        placement="v",
        fixed_chunks=2,
        default_chunks=2,
        source="PyTorch ScheduleZBVZeroBubble; ZB paper section 6",
        builder=zbv,
        min_m=lambda p, v: 1,
    ),
    ScheduleInfo(
        name="dualpipev",
        aliases=("DualPipeV", "dualpipe_v"),
        torch_name="DualPipeV",
        placement="v",
        fixed_chunks=2,
        default_chunks=2,
        source="DeepSeek dualpipev.py; PyTorch ScheduleDualPipeV",
        builder=dualpipev,
        min_m=lambda p, v: 2 * p,
        checks_microbatches=True,
    ),
)


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(" ", "")


_LOOKUP: dict[str, ScheduleInfo] = {}
for _info in _REGISTRY:
    for _n in (_info.name, *_info.aliases):
        _LOOKUP[_norm(_n)] = _info


def schedule_names() -> list[str]:
    """Canonical names of the registered schedules, in registry order.

    Returns
    -------
    list of str
    """
    return [info.name for info in _REGISTRY]


def get_schedule(name: str) -> ScheduleInfo:
    """Look a schedule up by name.

    Matching ignores case, ``_``, ``-`` and spaces, so PyTorch's
    ``get_schedule_class`` names work too (``"Interleaved1F1B"``,
    ``"ZBVZeroBubble"``, ``"DualPipeV"``, ``"InterleavedZeroBubble"`` ...).

    Parameters
    ----------
    name : str
        Canonical name (:func:`schedule_names`) or alias.

    Returns
    -------
    ScheduleInfo

    Raises
    ------
    ScheduleConfigError
        Unknown name; the message lists the valid names and aliases.

    Examples
    --------
    >>> get_schedule("Interleaved1F1B").name
    'interleaved_1f1b'
    """
    info = _LOOKUP.get(_norm(str(name)))
    if info is None:
        valid = ", ".join(f"{i.name} ({', '.join(i.aliases)})" if i.aliases else i.name for i in _REGISTRY)
        raise ScheduleConfigError(f"unknown pipeline schedule {name!r}; valid names (aliases): {valid}")
    return info


def generate(
    name: str,
    p: int,
    m: int,
    v: int | None = None,
    *,
    group_size: int | None = None,
    check_microbatches: bool = True,
) -> PipelineOrder:
    """Generate a schedule's per-rank compute order by name.

    Parameters
    ----------
    name : str
        Schedule name or alias (see :func:`get_schedule`).
    p : int
        Pipeline ranks.
    m : int
        Microbatches.
    v : int, optional
        Chunks per rank; fixed by gpipe/1f1b/zb_h1 (1) and zbv/dualpipev (2),
        default 2 for interleaved_1f1b/interleaved_zb/looped_bfs.
    group_size : int, optional
        Microbatch group size for interleaved_1f1b (default p, Megatron) and
        interleaved_zb (default torch's ``m // max(1, m // p)``).
    check_microbatches : bool, default True
        Raise when m is below the schedule's minimum; pass False to build the
        (possibly broken) order anyway, e.g. to show it to :func:`validate`.

    Returns
    -------
    PipelineOrder
        ``{rank: [action, ...]}`` for ranks 0..p-1.

    Raises
    ------
    ScheduleConfigError
        Unknown name, bad p/m/v/group_size.
    InsufficientMicrobatchesError
        m below :func:`min_microbatches`.

    Examples
    --------
    >>> " ".join(map(str, generate("1f1b", 4, 8)[2][:5]))
    '2F0 2F1 2B0 2F2 2B1'
    """
    return get_schedule(name).generate(p, m, v, group_size=group_size, check_microbatches=check_microbatches)


def min_microbatches(name: str, p: int, v: int | None = None) -> int:
    """Fewest microbatches a schedule needs.

    gpipe, looped_bfs, zbv: 1 (zbv pads with n = max(2p-1, m)); 1f1b, zb_h1,
    interleaved_1f1b, interleaved_zb: p; dualpipev: 2p.

    Parameters
    ----------
    name : str
        Schedule name or alias.
    p : int
        Pipeline ranks.
    v : int, optional
        Chunks per rank.

    Returns
    -------
    int

    Notes
    -----
    Sources: torchtitan#775 (the 1F1B family hangs with m < p), torch
    ``Schedule1F1B`` (rejects m < p), Megatron's ``p <= group_size <= m``,
    DeepSeek ``dualpipev.py`` and torch ``ScheduleDualPipeV`` (m >= 2p).
    """
    return get_schedule(name).min_microbatches(p, v)


def stage_to_rank(name: str, p: int, v: int | None = None) -> dict[int, int]:
    """Stage -> rank placement for a schedule or a placement style.

    Parameters
    ----------
    name : str
        ``"loop"``, ``"v"``, or a schedule name (its placement is used).
    p : int
        Pipeline ranks.
    v : int, optional
        Chunks per rank (default: the schedule's; 1 for ``"loop"``, 2 for ``"v"``).

    Returns
    -------
    dict of int to int
        ``loop``: stage s on rank s mod p (chunk c of rank r is stage c*p+r).
        ``v``: chunk c = s // p runs down the ranks when c is even and back up
        when odd, so with v=2 rank r holds stages r and 2p-1-r.

    Raises
    ------
    ScheduleConfigError
        Unknown name or bad p/v.

    Notes
    -----
    Source: PyTorch ``_utils.generate_stage_to_rank_mapping`` (styles
    ``"loop"`` and ``"v"``); pipelines.md notation.

    Examples
    --------
    >>> stage_to_rank("v", 4)
    {0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 2, 6: 1, 7: 0}
    """
    if name in ("loop", "v"):
        style: str = name
        chunks = (1 if name == "loop" else 2) if v is None else v
    else:
        info = get_schedule(name)
        style, chunks = info.placement, info.chunks(v)
    if not isinstance(p, int) or p < 1 or not isinstance(chunks, int) or chunks < 1:
        raise ScheduleConfigError(f"stage_to_rank needs p >= 1 and v >= 1, got p={p!r}, v={chunks!r}")
    mapping: dict[int, int] = {}
    for s in range(p * chunks):
        c, pos = divmod(s, p)
        mapping[s] = pos if (style == "loop" or c % 2 == 0) else p - 1 - pos
    return mapping
