"""The ``sharing`` GPU model's event loop (:func:`_run_sharing`): processor sharing, every running kernel
slowed equally. Kept selectable beside the ``waves`` model (:mod:`schedsim.sim.waves_columns`, the compiled
loop); :func:`schedsim.sim.engine.simulate` runs it with ``gpu_model="sharing"`` on the op lists of
:mod:`schedsim.sim.loop_arrays`.

How it works
------------
An event loop over a heap of ``(time, seq, ...)`` entries; the ``seq`` counter
breaks ties, so runs are deterministic (the SimPy ``Environment`` pattern).

* **Issue.** In eager mode each rank's host launches its ops in program order,
  each costing the profile's launch overhead; an op cannot start before its
  launch call has launched it (``launch.call_launch_fraction`` of the call in;
  default at its return). In ``cuda_graph`` mode one graph launch covers the
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

  - kernels running at once on one GPU share its SMs by occupancy: a GEMM's demand
    is its CTA count over the SMs (128×128 output tiles with split-K for skinny
    GEMMs, :meth:`schedsim.gpu.cost.CostModel.gemm_demand`), capped at 1, when the
    profile gives ``gpu.sms``; any other kernel has demand 1. While the demands of the running
    kernels sum to D ≤ 1 they all run at full speed; above that each runs at 1/D.
    Without ``gpu.sms`` every kernel has demand 1, so k kernels run at 1/k. On top,
    kernels run at 1/(1+alpha) while NCCL runs beside them
    (``contention.compute_slowdown_with_comm``) and 1/(1+gamma) while a copy
    engine is busy;
  - k collectives at once on a rank share its link: each at 1/k, and at
    1/(1+beta) while a kernel runs beside them; a collective spanning several
    ranks progresses at the slowest of its ranks' rates;
  - copies share their copy engine (one per direction) and run at 1/(1+delta)
    beside a kernel, and an h2d copy at 1/(1+rho_h2d) while the d2h engine copies
    (d2h at 1/(1+rho_d2h) while h2d copies; ``contention.h2d_slowdown_beside_d2h`` and
    ``d2h_slowdown_beside_h2d``, :func:`schedsim.gpu.rates.copy_rate`).

What it does not model
----------------------
* Network topology beyond one link class per group (no switches, no
  congestion between different ranks' links, no multi-hop routing).
* NCCL protocol or algorithm switches inside a size range beyond what the
  measured busbw table captures; NCCL channel/CTA counts.
* SM occupancy beyond the tile-count demand above: register/shared-memory
  limits, waves, and the order in which the block scheduler interleaves CTAs.
* Host-side blocking (``.item()``, ``synchronize``), Python overhead beyond the
  per-op launch cost, CPU contention, memory allocation, caching allocator.
* ``CUDA_DEVICE_MAX_CONNECTIONS`` and hardware queue false dependencies (the
  ``waves`` model has them).
* Clock/power throttling and run-to-run noise.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.sim.loop import HOST, _raise_deadlock, _State, set_rate
from schedsim.sim.loop_arrays import _Compiled


def _sharing_copy_rate(cq: list[int], res: int, delta: float, rho: dict[int, float]) -> float:
    """Rate of a copy on engine ``res`` (2 h2d, 3 d2h, 4 d2d) of a rank whose running jobs per resource are
    ``cq``: its engine shared by ``cq[res]`` copies, 1/(1+delta) beside a kernel, 1/(1+rho[res]) while the
    reverse direction's engine copies (:func:`schedsim.gpu.rates.copy_rate`)."""
    new = 1.0 / cq[res]
    if cq[0]:
        new /= 1.0 + delta
    if res != 4 and cq[5 - res] and rho[res]:
        new /= 1.0 + rho[res]
    return new


def _run_sharing(c: _Compiled, profile: HardwareProfile, mode: str, model_executor: bool = False) -> _State:
    """The processor-sharing loop (module docstring)."""
    ids, ops, N, world, npred, succ = c.ids, c.ops, c.N, c.world, c.npred, c.succ
    job_of, gmem, job_res, job_ranks, job_work, cost = (c.job_of, c.gmem, c.job_res, c.job_ranks, c.job_work,
                                                         c.cost)
    G_ = len(gmem)
    J = N + G_
    cn = profile.contention
    alpha, beta = cn.compute_slowdown_with_comm, cn.comm_slowdown_with_compute
    gamma, delta = cn.compute_slowdown_with_copy, cn.copy_slowdown_with_compute
    # an h2d (res 2) and a d2h copy (res 3) at once slow each other (gpu.rates.copy_rate's ρ): rho[res]
    rho = {2: cn.h2d_slowdown_beside_d2h, 3: cn.d2h_slowdown_beside_h2d}

    # SM demand of compute jobs (fraction of the GPU), see the module docstring
    job_dem = [1.0] * J
    if profile.gpu.sms:
        for i, op in enumerate(ops):
            if op.kind == "matmul":
                job_dem[i] = cost.gemm_demand(op)

    issue = _sharing_issue_times(ops, job_res, profile, mode, world, model_executor)

    # --- state ----------------------------------------------------------------
    start = [0.0] * N
    end = [-1.0] * N
    ready_t = [0.0] * N
    binding = [-1] * N
    jrem = [0.0] * J
    jrate = [0.0] * J
    jlast = [0.0] * J
    jver = [0] * J
    gready = [0] * G_
    cnt = [[0, 0, 0, 0, 0] for _ in range(world)]
    dem = [0.0] * world  # summed SM demand of the running kernels per rank
    running: list[list[int]] = [[] for _ in range(world)]
    heap: list[tuple[float, int, int, int]] = []
    push = heapq.heappush
    pop = heapq.heappop
    counter = itertools.count()

    # which resources' rates change when the count of resource `changed` changes on a rank
    affects = {
        0: {0} | ({1} if beta else set()) | ({2, 3, 4} if delta else set()),
        1: {1} | ({0} if alpha else set()),
    }
    for cres in (2, 3, 4):
        affects[cres] = {cres} | ({0} if gamma else set())
    if rho[3]:
        affects[2].add(3)  # the d2h copies' rate follows the h2d engine's
    if rho[2]:
        affects[3].add(2)

    def rerate(ranks: tuple[int, ...], t: float, changed: int) -> None:
        aff = affects[changed]
        if len(ranks) == 1:
            jobs = running[ranks[0]]
        else:
            jobs = []
            for q in ranks:
                for j in running[q]:
                    if j not in jobs:
                        jobs.append(j)
        for j in jobs:
            res = job_res[j]
            if res not in aff and jrate[j] > 0.0:
                continue
            if res == 1:
                new = 1.0
                for q in job_ranks[j]:
                    cq = cnt[q]
                    r = 1.0 / cq[1]
                    if cq[0]:
                        r /= 1.0 + beta
                    if r < new:
                        new = r
            else:
                cq = cnt[job_ranks[j][0]]
                if res == 0:
                    d = dem[job_ranks[j][0]]
                    new = 1.0 / d if d > 1.0 else 1.0
                    if cq[1]:
                        new /= 1.0 + alpha + (gamma if (cq[2] or cq[3] or cq[4]) else 0.0)
                    elif cq[2] or cq[3] or cq[4]:
                        new /= 1.0 + gamma
                else:
                    new = _sharing_copy_rate(cq, res, delta, rho)
            set_rate(j, new, t, jrate, jrem, jlast, jver, heap, counter)

    def make_ready(i: int, t: float) -> None:
        ready_t[i] = t
        j = job_of[i]
        if j >= N:
            g = j - N
            gready[g] += 1
            members = gmem[g]
            if gready[g] < len(members):
                return
            for m in members:
                if m != i:
                    binding[m] = i
                start[m] = t
        else:
            start[i] = t
            res = job_res[i]
            r = job_ranks[i][0]
            rl = running[r]
            if not rl:  # fast path: alone on its GPU, full rate
                cnt[r][res] += 1
                if res == 0:
                    dem[r] = job_dem[i]
                rl.append(i)
                jrem[i] = w = job_work[i]
                jlast[i] = t
                jrate[i] = 1.0
                v = jver[i] + 1
                jver[i] = v
                push(heap, (t + w, next(counter), i, v))
                return
        res = job_res[j]
        ranks = job_ranks[j]
        for q in ranks:
            cnt[q][res] += 1
            running[q].append(j)
        if res == 0:
            dem[ranks[0]] += job_dem[j]
        jrem[j] = job_work[j]
        jlast[j] = t
        jrate[j] = 0.0
        rerate(ranks, t, res)

    # --- run -------------------------------------------------------------------
    for i in range(N):
        if npred[i] == 0:
            if issue[i] > 0.0:
                binding[i] = HOST
                push(heap, (issue[i], next(counter), -1 - i, 0))
            else:
                make_ready(i, 0.0)
    done = 0
    while heap:
        t, _s, j, ver = pop(heap)
        if j < 0:
            make_ready(-1 - j, t)
            continue
        if ver != jver[j]:
            continue
        res = job_res[j]
        ranks = job_ranks[j]
        if j < N:
            r = ranks[0]
            cr = cnt[r]
            cr[res] -= 1
            if res == 0:
                dem[r] = dem[r] - job_dem[j] if cr[0] else 0.0
            rl = running[r]
            rl.remove(j)
            jrate[j] = -1.0
            if rl:
                rerate(ranks, t, res)
        else:
            for q in ranks:
                cnt[q][res] -= 1
                running[q].remove(j)
            jrate[j] = -1.0
            rerate(ranks, t, res)
        for i in (gmem[j - N] if j >= N else (j,)):
            end[i] = t
            done += 1
            for v in succ[i]:
                n = npred[v] - 1
                npred[v] = n
                if n:
                    continue
                if issue[v] > t:
                    binding[v] = HOST
                    push(heap, (issue[v], next(counter), -1 - v, 0))
                    continue
                binding[v] = i
                make_ready(v, t)
    if done < N:
        _raise_deadlock(ids, ops, end, npred, job_of, gmem, N)
    return _State(start, end, ready_t, binding, host_call=np.asarray(issue, np.float64))


def _sharing_issue_times(ops: list[Op], job_res: list[int], profile: HardwareProfile, mode: str,
                         world: int, model_executor: bool = False) -> list[float]:
    """Host issue time (s) of each op in the ``sharing`` model: per-op or per-collective launch cost plus
    ``host_us`` (and ``executor_extra_per_op_us`` with ``model_executor``, as in ``waves``' rule host-issue), in program
    order per rank; one graph launch under ``cuda_graph``."""
    lp = profile.launch
    if mode == "cuda_graph":
        return [lp.graph_launch_us * 1e-6] * len(ops)
    issue = [0.0] * len(ops)
    host = [0.0] * world
    ex = lp.executor_extra_per_op_us * 1e-6 if model_executor else 0.0
    op_oh, coll_oh = lp.eager_per_op_us * 1e-6 + ex, lp.eager_per_collective_us * 1e-6 + ex
    for i, op in enumerate(ops):
        r = op.rank
        h = host[r] + op.host_s + (coll_oh if op.resource == "comm" else op_oh)  # a 1-rank collective too
        host[r] = h
        issue[i] = h
    return issue
