"""Collective and p2p times from a profile's measured tables and link classes (profiles without a cluster topology).

nccl-tests convention (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``): algbw = S / t, busbw = algbw × factor with
factor 2(n−1)/n for all_reduce, (n−1)/n for all_gather, reduce_scatter, all_to_all, scatter and gather, 1 for
broadcast, reduce and send/recv. A measured busbw-vs-size table for the collective and group size is
interpolated linearly in log(size), its times first made non-decreasing in size
(:func:`schedsim.monotone.isotonic_1d`); below its smallest size alpha-beta with the smallest size's busbw (capped
at that size's time), above its largest the last busbw. A table times only groups that span as many nodes as
it was measured over (``collectives.nodes``, default 1; nodes: rank // ``topology.gpus_per_node``, or the
caller's count). Without a table: alpha-beta on the
link class, t = steps·alpha + factor·S / B_link, with steps 2(n−1) for all_reduce, 1 for send/recv and n−1
otherwise (ring algorithms; Thakur et al., IJHPCA 2005).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from schedsim.kinds import KINDS, KindInfo, KindList
from schedsim.monotone import isotonic_1d

if TYPE_CHECKING:
    from schedsim.hardware.profile import HardwareProfile

__all__ = ["LinkTables", "bus_factor", "ONE_RANK_NOP"]

#: busbw / algbw by :data:`schedsim.kinds.BusFactor` (nccl-tests ``doc/PERFORMANCE.md``)
_FACTORS: dict[str, Callable[[int], float]] = {
    "2(n-1)/n": lambda n: 2.0 * (n - 1) / n,
    "(n-1)/n": lambda n: (n - 1) / n,
    "1": lambda n: 1.0,
}


#: Collectives that the executor calls in place (``dist.all_reduce``, ``dist.broadcast``, ``dist.reduce`` on one
#: buffer): on a group of one rank NCCL launches nothing for them
#: (:meth:`schedsim.network.model.NetworkModel.collective`; the registry's ``one_rank``, :data:`schedsim.kinds.KINDS`).
ONE_RANK_NOP = KindList(lambda info: info.one_rank == "nop")


def _entry(kind: str) -> KindInfo:
    """The registry entry of op kind ``kind``, or of the first kind a profile times with table ``kind``
    (``sendrecv``: send's). Raises KeyError for neither."""
    info = KINDS.get(kind)
    if info is None:
        info = next((i for i in KINDS.values() if i.table == kind), None)
        if info is None:
            raise KeyError(kind)
    return info


def bus_factor(kind: str, n: int) -> float:
    """busbw / algbw for collective ``kind`` (an op kind, or a table kind: ``sendrecv``) over ``n`` ranks: its
    registry entry's :attr:`schedsim.kinds.KindInfo.bus` (nccl-tests ``doc/PERFORMANCE.md``).

    Raises
    ------
    KeyError
        ``kind`` is neither an op kind nor a table kind (an nccl-tests log of another test: hypercube).

    Examples
    --------
    >>> bus_factor("all_reduce", 4)
    1.5
    >>> bus_factor("all_gather", 2)
    0.5
    """
    return _FACTORS[_entry(kind).bus](n)


def _ring_steps(kind: str, n: int) -> int:
    """Latency steps of ``kind`` (as :func:`bus_factor`) over ``n`` ranks on a link class: one for a p2p message,
    2(n-1) for a kind of bus factor 2(n-1)/n (ring all_reduce: a reduce-scatter then an all-gather), else n-1
    (Thakur et al., IJHPCA 2005)."""
    info = _entry(kind)
    if info.host == "p2p":
        return 1
    return 2 * (n - 1) if info.bus == "2(n-1)/n" else n - 1


class LinkTables:
    """A profile's ``collectives.tables`` (log size, busbw in B/s) and ``links``, timing groups of two or more."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self._tables: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
        for coll, by_n in profile.collectives.tables.items():
            for n, rows in by_n.items():
                rows = sorted(rows)
                # busbw from the monotone fit of the times (size / busbw; the bus factor is common to all rows):
                # a table measured with a larger size finishing sooner, as small sizes do, would predict a drop
                t = [s / (bw * 1e9) for s, bw in rows]
                fit = [math.exp(x) for x in isotonic_1d([math.log(x) for x in t])]
                self._tables[(coll, int(n))] = ([math.log(s) for s, _ in rows],
                                                [s / ft for (s, _), ft in zip(rows, fit, strict=True)])
        self._nodes: dict[tuple[str, int], int] = {(coll, int(n)): int(k)
                                                   for coll, by_n in profile.collectives.nodes.items()
                                                   for n, k in by_n.items()}

    def has(self, kind: str, n: int) -> bool:
        """Whether the profile has a table for ``kind`` (``sendrecv`` for send/recv) over ``n`` ranks."""
        return (kind, n) in self._tables

    def covers(self, kind: str, n: int, nodes: int) -> bool:
        """Whether a table for ``kind`` over ``n`` ranks exists and was measured over ``nodes`` nodes."""
        return (kind, n) in self._tables and self._nodes.get((kind, n), 1) == nodes

    def time(self, table_kind: str, nbytes: float, ranks: tuple[int, ...], nodes: int | None = None) -> float:
        """Seconds of ``table_kind`` (a collective kind, or ``sendrecv``) of ``nbytes`` (nccl-tests size) over
        ``ranks`` (two or more), by the module's rules; ``nodes`` the nodes the ranks span (default: by
        rank // ``gpus_per_node``).

        Raises
        ------
        ProfileError
            The profile lacks the link class the group needs (:meth:`HardwareProfile.link_for`).
        """
        n = len(ranks)
        factor = bus_factor(table_kind, n)
        tab = self._tables.get((table_kind, n))
        if tab is not None:
            if nodes is None:
                gpn = self.profile.topology.gpus_per_node
                nodes = len({r // gpn for r in ranks})
            if self._nodes.get((table_kind, n), 1) != nodes:
                tab = None  # measured over another number of nodes: the link classes instead
        if tab is not None and nbytes > 0:
            xs, bws = tab
            x = math.log(nbytes)
            if x <= xs[0]:
                # below the smallest measured size: alpha-beta with that size's busbw
                link = self.profile.link_for(ranks)
                steps = _ring_steps(table_kind, n)
                return min(steps * link.latency_us * 1e-6 + nbytes * factor / bws[0], math.exp(xs[0]) * factor / bws[0])
            if x >= xs[-1]:
                bw = bws[-1]
            else:
                i = bisect.bisect_right(xs, x)
                f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
                bw = bws[i - 1] + f * (bws[i] - bws[i - 1])
                # busbw rises ~linearly with size where latency dominates, so between two latency-bound points
                # the interpolated time can dip below both (7.25 us at 1 KiB, 9.1 at 16 KiB on 2xH200, 4.2 at
                # 4 KiB); a larger message never finishes sooner, so the time is at least the lower point's
                return max(nbytes * factor / bw, math.exp(xs[i - 1]) * factor / bws[i - 1])
            return nbytes * factor / bw
        link = self.profile.link_for(ranks)
        return _ring_steps(table_kind, n) * link.latency_us * 1e-6 + factor * nbytes / (link.bandwidth_GBps * 1e9)
