"""``predict --explain``: the algorithm and protocol each collective and send/recv of a schedule runs.

One row per distinct (kind, size, group) of the lowered Program (for send/recv: per (size, sender,
receiver)), with the time :class:`schedsim.gpu.cost.CostModel` gives it alone and where it came from.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, TypedDict

from schedsim.gpu.cost import CostModel
from schedsim.kinds import COLLECTIVE_KINDS, KINDS, P2P_KINDS

if TYPE_CHECKING:
    from schedsim.lower.program import Program

__all__ = ["ExplainRow", "explain_rows", "format_explain"]


class ExplainRow(TypedDict):
    """One row of :func:`explain_rows`: the op ``kind``, its ``bytes``, the group's rank count (``ranks``) and its
    ranks as text (``group``), the nodes it spans (None without a cluster topology), NCCL's ``algo`` and ``proto``
    (or ``table``/``links``/``recorded`` and ``-``), and its time alone in microseconds (``time_us``)."""

    kind: str
    bytes: int
    ranks: int
    group: str
    nodes: int | None
    algo: str
    proto: str
    time_us: float


def explain_rows(program: Program, cost: CostModel) -> list[ExplainRow]:
    """Rows ``{kind, bytes, ranks, group, nodes, algo, proto, time_us}`` for ``program``'s communication
    (``ranks`` a count, ``group`` as text).

    ``algo`` / ``proto`` are NCCL's (:class:`schedsim.network.NcclNetwork`) on a profile with
    ``topology.scale_up``; otherwise ``table`` (a measured busbw table of the profile) or ``links``
    (alpha-beta on the profile's link class), and ``-``; ``recorded`` and ``-`` for ops given ``duration_us`` (an
    imported run's), which the prediction runs for that long: ``time_us`` is then the median of their recorded
    durations (per op template). ``nodes`` is None where the profile has no cluster topology. Sends are listed,
    not their recvs (one transfer). An all_to_all with per-peer sizes is one row per distinct op: ``bytes`` its
    largest member's (the larger of what it sends and receives), ``time_us`` the op's, its busiest member's
    (:meth:`schedsim.network.model.NetworkModel.all_to_all_split`), as the simulator runs it.
    """
    seen: set[tuple[Any, ...]] = set()
    rows: list[ExplainRow] = []
    recorded: dict[tuple[str, float, tuple[int, ...]], list[float]] = {}
    net = cost.net.nccl

    def row(kind: str, nbytes: float, ranks: tuple[int, ...], algo: str, proto: str, t: float) -> None:
        nodes = net.shape(ranks).nodes if net is not None and len(ranks) > 1 else None
        rows.append({"kind": kind, "bytes": int(nbytes), "ranks": len(ranks), "group": _group(kind, ranks),
                     "nodes": nodes, "algo": algo, "proto": proto, "time_us": t * 1e6})

    def add(kind: str, nbytes: float, ranks: tuple[int, ...], duration_s: float | None,
            comm: tuple[int, ...] | None = None) -> None:
        key = (kind, nbytes, ranks)
        if duration_s is not None:  # a recorded duration (an imported run): what the prediction runs
            recorded.setdefault(key, []).append(duration_s)
            return
        if (*key, comm) in seen:
            return
        seen.add((*key, comm))
        got = cost.net.cost(kind, nbytes, ranks, comm)
        if got is not None:
            algo, proto, t = got.algo, got.proto, got.seconds
        else:
            table_kind = KINDS[kind].table
            algo = "table" if cost.net.has_table(table_kind, ranks) else "links"
            proto, t = "-", cost.net.collective(kind, nbytes, ranks, comm)
        row(kind, nbytes, ranks, algo, proto, t)

    split = set()
    for k, t in enumerate(program.templates):
        if t.kind in COLLECTIVE_KINDS and t.splits is not None and t.duration_s is None:
            split.add(k)
        elif t.kind in COLLECTIVE_KINDS:
            add(t.kind, t.nbytes, tuple(t.group), t.duration_s)
    for args in _split_rows(program, cost, split):
        row(*args)
    sends = [i for i, t in enumerate(program.templates) if t.kind in P2P_KINDS and KINDS[t.kind].sender]
    if sends:
        import numpy as np

        from schedsim.lower.p2p_comms import batch_communicators

        cid, comms = batch_communicators(program)  # a batched send's communicator, as the simulator times it
        mask = np.isin(program.tmpl, sends)
        for k, r, q, c in {(int(a), int(b), int(c), int(d)) for a, b, c, d in
                           zip(program.tmpl[mask], program.rank[mask], program.peer[mask], cid[mask], strict=True)}:
            add("send", program.templates[k].nbytes, (r, q), program.templates[k].duration_s,
                comms[c] if c >= 0 else None)
    for (kind, nbytes, ranks), ds in recorded.items():
        row(kind, nbytes, ranks, "recorded", "-", statistics.median(ds))
    rows.sort(key=lambda x: (x["kind"], x["bytes"], x["ranks"], x["group"]))
    return rows


def _split_rows(program: Program, cost: CostModel, split: set[int]) -> list[tuple[str, float, tuple[int, ...], str,
                                                                                   str, float]]:
    """``(kind, bytes, group, algo, proto, seconds)`` of each distinct all_to_all whose members' templates (indices
    ``split``) carry per-peer sizes: its largest member's bytes and its time, its busiest member's
    (:meth:`schedsim.network.model.NetworkModel.all_to_all_split`, as the simulator times each member); ``algo`` /
    ``proto`` as for the uniform all_to_all of those bytes."""
    if not split:
        return []
    out = []
    seen: set[tuple[object, ...]] = set()
    tm, rk = program.tmpl.tolist(), program.rank.tolist()
    for members in program.collectives().values():
        if tm[members[0]] not in split:
            continue
        ts = [(rk[i], program.templates[tm[i]]) for i in members]
        kind, group = ts[0][1].kind, tuple(ts[0][1].group)
        key = (kind, group, tuple((r, t.splits) for r, t in ts))
        if key in seen:
            continue
        seen.add(key)
        nbytes = max(t.nbytes for _r, t in ts)
        got = cost.net.cost(kind, nbytes, group)
        algo, proto = (got.algo, got.proto) if got is not None else (
            "table" if cost.net.has_table(KINDS[kind].table, group) else "links", "-")
        out.append((kind, nbytes, group, algo, proto,
                    max(cost.net.all_to_all_split(r, group, *(t.splits or ((), ()))) for r, t in ts)))
    return out


def _group(kind: str, ranks: tuple[int, ...]) -> str:
    """``src->dst`` for a send; ``a..b`` for consecutive ranks; else the first ranks, then ``...``."""
    if kind in P2P_KINDS:
        return f"{ranks[0]}->{ranks[-1]}"
    if ranks and list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}..{ranks[-1]}"
    head = ",".join(str(r) for r in ranks[:4])
    return head + (",..." if len(ranks) > 4 else "")


def format_explain(rows: list[ExplainRow]) -> str:
    """The rows as a text table (one line per row, a header first; columns as wide as their widest cell, so
    ``collnet_direct/Simple`` and long group lists keep the time column aligned)."""
    ap = [r["algo"] + "/" + r["proto"] for r in rows]
    wg = max([18, *(len(r["group"]) for r in rows)])
    wa = max([18, *map(len, ap)])
    lines = [f"{'collective':15} {'bytes':>14} {'ranks':{wg}} {'nodes':>5}  {'algo/proto':{wa}} {'time (us)':>11}"]
    for r, a in zip(rows, ap, strict=True):
        nodes = "-" if r["nodes"] is None else str(r["nodes"])
        lines.append(f"{r['kind']:15} {r['bytes']:>14,} {r['group']:{wg}} {nodes:>5}  {a:{wa}} {r['time_us']:>11.2f}")
    return "\n".join(lines)
