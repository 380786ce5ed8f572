"""The discrete-event simulator.

In: the DAG from :func:`schedsim.graph.build_graph` and a hardware profile.
Out: a :class:`~schedsim.sim.timeline.Timeline`.

How it works
------------
An event loop over a heap of ``(time, seq, ...)`` entries; the ``seq`` counter
breaks ties, so runs are deterministic (the SimPy ``Environment`` pattern).

* **Issue.** In eager mode each rank's host launches its ops in program order,
  each costing the profile's launch overhead; an op cannot start before its
  launch call returns. In ``cuda_graph`` mode one graph launch covers the
  iteration and each op pays a small per-node GPU overhead instead.
* **Ready.** An op is ready when it is issued, every dependency has finished
  (a cross-stream dependency is an event wait) and the previous op on its
  stream has finished (CUDA streams are in order).
* **Rendezvous.** A collective starts when every rank of its group is ready
  (it then runs on all of them at once); a send/recv pair starts when both
  sides are ready.
* **Sharing (processor sharing, fluid model).** Each running op has remaining
  solo work (seconds) and a rate ≤ 1, recomputed whenever the set of ops
  running on its rank changes:

  - k kernels running at once on one GPU each progress at 1/k (they share the
    SMs), and at 1/(1+alpha) of that while NCCL runs beside them
    (``contention.compute_slowdown_with_comm``) and 1/(1+gamma) while a copy
    engine is busy;
  - k collectives at once on a rank share its link: each at 1/k, and at
    1/(1+beta) while a kernel runs beside them; a collective spanning several
    ranks progresses at the slowest of its ranks' rates;
  - copies share their copy engine (one per direction) and run at 1/(1+delta)
    beside a kernel.

What it does not model
----------------------
* Network topology beyond one link class per group (no switches, no
  congestion between different ranks' links, no multi-hop routing).
* NCCL protocol or algorithm switches inside a size range beyond what the
  measured busbw table captures; NCCL channel/CTA counts.
* Kernel-level SM occupancy: concurrent kernels share the GPU evenly whatever
  their size; a small kernel beside a large one is slowed as much as the large.
* Host-side blocking (``.item()``, ``synchronize``), Python overhead beyond the
  per-op launch cost, CPU contention, memory allocation, caching allocator.
* ``CUDA_DEVICE_MAX_CONNECTIONS`` and hardware queue false dependencies.
* Clock/power throttling and run-to-run noise.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import networkx as nx

from schedsim.cost import CostModel
from schedsim.errors import DeadlockError
from schedsim.hardware.profile import HardwareProfile
from schedsim.sim.timeline import Span, Timeline

__all__ = ["simulate", "HOST"]

#: ``binding`` value meaning "the op waited for its host launch".
HOST = -2

_RES = {"compute": 0, "comm": 1}
_COPY_RES = {"h2d": 2, "d2h": 3, "d2d": 4}


def simulate(G: nx.DiGraph, profile: HardwareProfile, *, launch: str | None = None) -> Timeline:
    """Simulate the DAG ``G`` on ``profile``.

    Parameters
    ----------
    G : networkx.DiGraph
        From :func:`schedsim.graph.build_graph`.
    profile : HardwareProfile
        Rates, tables and contention factors.
    launch : {"eager", "cuda_graph"}, optional
        Overrides ``G.graph["launch"]``.

    Returns
    -------
    Timeline
        ``source="predict"``; per op: start, end, solo duration and ready time
        (seconds); ``critical_path`` lists op ids from the first to the last.

    Raises
    ------
    DeadlockError
        If ops remain that can never start (a wait-for cycle the static checks
        did not catch).
    """
    mode = launch or G.graph.get("launch", "eager")
    cost = CostModel(profile)
    c = profile.contention
    alpha, beta = c.compute_slowdown_with_comm, c.comm_slowdown_with_compute
    gamma, delta = c.compute_slowdown_with_copy, c.copy_slowdown_with_compute
    node_oh = profile.launch.graph_per_op_us * 1e-6 if mode == "cuda_graph" else 0.0
    graph_launch = profile.launch.graph_launch_us * 1e-6

    ids = list(G.nodes)
    N = len(ids)
    index = {oid: i for i, oid in enumerate(ids)}
    nodes = G.nodes
    ops = [nodes[oid]["op"] for oid in ids]
    world = int(G.graph.get("world_size", 1 + max((o.rank for o in ops), default=0)))

    # --- compile to arrays ------------------------------------------------
    npred = [0] * N
    succ: list[list[int]] = [[] for _ in range(N)]
    adj = G.succ
    for i, oid in enumerate(ids):
        s = succ[i]
        for v in adj[oid]:
            j = index[v]
            s.append(j)
            npred[j] += 1

    # jobs: one per non-rendezvous op, one per rendezvous group
    job_of = [-1] * N
    job_members: list[list[int]] = []
    job_ranks: list[tuple[int, ...]] = []
    job_res: list[int] = []
    job_work: list[float] = []
    for key, members in G.graph.get("collectives", {}).items():
        idx = [index[m] for m in members]
        j = len(job_members)
        for i in idx:
            job_of[i] = j
        job_members.append(idx)
        job_ranks.append(tuple(ops[i].rank for i in idx))
        job_res.append(1)
        job_work.append(cost.duration(ops[idx[0]]) + node_oh)
    for s_id, r_id in G.graph.get("p2p", []):
        idx = [index[s_id], index[r_id]]
        j = len(job_members)
        for i in idx:
            job_of[i] = j
        job_members.append(idx)
        job_ranks.append(tuple(ops[i].rank for i in idx))
        job_res.append(1)
        job_work.append(cost.duration(ops[idx[0]]) + node_oh)
    for i in range(N):
        if job_of[i] < 0:
            op = ops[i]
            j = len(job_members)
            job_of[i] = j
            job_members.append([i])
            job_ranks.append((op.rank,))
            res = _RES.get(op.resource)
            if res is None:
                res = _COPY_RES[op.direction or "d2d"]
            job_res.append(res)
            job_work.append(cost.duration(op) + node_oh)
    J = len(job_members)
    job_size = [len(m) for m in job_members]

    # --- host issue times ---------------------------------------------------
    issue = [0.0] * N
    if mode == "cuda_graph":
        issue = [graph_launch] * N
    else:
        host = defaultdict(float)
        for i, op in enumerate(ops):
            h = host[op.rank] + cost.launch_overhead(op, mode)
            host[op.rank] = h
            issue[i] = h

    # --- state ----------------------------------------------------------------
    start = [0.0] * N
    end = [-1.0] * N
    ready_t = [0.0] * N
    binding = [-1] * N
    jrem = [0.0] * J
    jrate = [0.0] * J
    jlast = [0.0] * J
    jver = [0] * J
    jready = [0] * J
    jlast_ready = [-1] * J
    cnt = [[0, 0, 0, 0, 0] for _ in range(world)]
    running: list[list[int]] = [[] for _ in range(world)]
    heap: list[tuple[float, int, int, int, int]] = []
    push = heapq.heappush
    pop = heapq.heappop
    seq = 0

    def rate(j: int) -> float:
        res = job_res[j]
        if res == 1:
            best = 1.0
            for q in job_ranks[j]:
                cq = cnt[q]
                r = 1.0 / cq[1]
                if cq[0]:
                    r /= 1.0 + beta
                if r < best:
                    best = r
            return best
        cq = cnt[job_ranks[j][0]]
        if res == 0:
            r = 1.0 / cq[0]
            slow = 1.0
            if cq[1]:
                slow += alpha
            if cq[2] or cq[3] or cq[4]:
                slow += gamma
            return r / slow
        r = 1.0 / cq[res]
        if cq[0]:
            r /= 1.0 + delta
        return r

    def rerate(ranks: tuple[int, ...], t: float) -> None:
        nonlocal seq
        if len(ranks) == 1:
            jobs = running[ranks[0]]
        else:
            seen: dict[int, None] = {}
            for q in ranks:
                for j in running[q]:
                    seen[j] = None
            jobs = list(seen)
        for j in jobs:
            new = rate(j)
            old = jrate[j]
            if new != old:
                if old > 0.0:
                    rem = jrem[j] - (t - jlast[j]) * old
                    jrem[j] = rem if rem > 0.0 else 0.0
                jlast[j] = t
                jrate[j] = new
                jver[j] += 1
                seq += 1
                push(heap, (t + jrem[j] / new, seq, 0, j, jver[j]))

    def start_job(j: int, t: float) -> None:
        res = job_res[j]
        for q in job_ranks[j]:
            cnt[q][res] += 1
            running[q].append(j)
        jrem[j] = job_work[j]
        jlast[j] = t
        jrate[j] = 0.0
        for i in job_members[j]:
            start[i] = t
        rerate(job_ranks[j], t)

    def make_ready(i: int, t: float) -> None:
        ready_t[i] = t
        j = job_of[i]
        sz = job_size[j]
        if sz == 1:
            start_job(j, t)
            return
        jready[j] += 1
        jlast_ready[j] = i
        if jready[j] == sz:
            last = i
            for m in job_members[j]:
                if m != last:
                    binding[m] = last
            start_job(j, t)

    # --- run -------------------------------------------------------------------
    t = 0.0
    for i in range(N):
        if npred[i] == 0:
            if issue[i] > 0.0:
                binding[i] = HOST
                seq += 1
                push(heap, (issue[i], seq, 1, i, 0))
            else:
                make_ready(i, 0.0)
    done = 0
    while heap:
        t, _s, typ, x, ver = pop(heap)
        if typ == 1:
            make_ready(x, t)
            continue
        if ver != jver[x]:
            continue
        j = x
        res = job_res[j]
        ranks = job_ranks[j]
        for q in ranks:
            cnt[q][res] -= 1
            running[q].remove(j)
        jrate[j] = -1.0
        rerate(ranks, t)
        for i in job_members[j]:
            end[i] = t
            done += 1
            for v in succ[i]:
                n = npred[v] - 1
                npred[v] = n
                if n == 0:
                    binding[v] = i
                    if issue[v] > t:
                        binding[v] = HOST
                        seq += 1
                        push(heap, (issue[v], seq, 1, v, 0))
                    else:
                        make_ready(v, t)
    if done < N:
        _raise_deadlock(ids, ops, end, npred, job_of, job_members, jready)

    spans = []
    for i, op in enumerate(ops):
        spans.append(Span(ids[i], op.name, op.rank, op.stream, op.kind, op.resource, start[i], end[i],
                          job_work[job_of[i]], ready_t[i], op.nbytes, op.flops,
                          dict(op.tags) if op.tags else {}))
    # critical path: walk bindings back from the last op to finish
    cp: list[str] = []
    if N:
        i = max(range(N), key=lambda k: (end[k], -k))
        seen_cp: set[int] = set()
        while i >= 0 and i not in seen_cp:
            seen_cp.add(i)
            b = binding[i]
            if not (b >= 0 and job_of[b] == job_of[i]):  # a peer of the same rendezvous stands for it
                cp.append(ids[i])
            i = b
        cp.reverse()
    return Timeline(schedule=str(G.graph.get("name", "")), source="predict", world_size=world, launch=mode,
                    profile=profile.name, spans=spans, critical_path=cp)


def _raise_deadlock(ids, ops, end, npred, job_of, job_members, jready) -> None:  # type: ignore[no-untyped-def]
    lines = []
    per_rank: dict[int, int] = {}
    for i, op in enumerate(ops):
        if end[i] < 0 and op.rank not in per_rank:
            per_rank[op.rank] = i
    for r, i in sorted(per_rank.items()):
        op = ops[i]
        if npred[i] > 0:
            why = f"waits on {npred[i]} unfinished predecessor(s)"
        else:
            members = job_members[job_of[i]]
            missing = [ids[m] for m in members if m != i]
            why = f"waits for its peers {', '.join(missing)} to arrive"
        lines.append(f"  rank {r}: {ids[i]} ({op.kind}) {why}")
    raise DeadlockError("the schedule deadlocks; stuck ops:\n" + "\n".join(lines)
                        + "\n  fix: make every rank reach its collectives and send/recv in a compatible order")
