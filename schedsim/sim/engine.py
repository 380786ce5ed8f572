"""The discrete-event simulator.

In: the DAG from :func:`schedsim.graph.build_graph` and a hardware profile.
Out: a :class:`~schedsim.sim.timeline.Timeline`.

Three GPU execution models, chosen by ``gpu_model`` (argument, else the
profile's ``gpu_model``, default ``waves``):

* ``waves`` (:mod:`schedsim.sim.waves`, rules in :mod:`schedsim.sim.gpu_model`, event loop compiled in
  :mod:`schedsim.sim._cwaves` when built, else in Python, with identical results):
  CTAs in waves with FIFO block dispatch, NCCL kernels holding SMs, hardware
  queues (``CUDA_DEVICE_MAX_CONNECTIONS``), communicators run in issue order,
  the host thread as a resource. It matches how the 2×H200 traces of
  run concurrent kernels ([evidence: 2xh200-concurrency]).
* ``sharing`` (this module, below): processor sharing, every running kernel
  slowed equally. Kept selectable while the ``waves`` model proves itself.
* ``replay`` (:func:`_run_replay`): the replay of a recorded run (``schedsim import ... --out DIR`` writes
  ``DIR/schedule.yaml`` with measured durations). No contention: an op runs its solo duration (the recorded one,
  which already holds the contention of the run) as soon as it is ready; the host issues each rank's ops at
  the prefix sums of their ``host_us`` alone (the recorded gaps between launch calls already hold the calls'
  cost), so issue times are the recorded launch times. Streams, event waits and rendezvous as below; hardware
  queues (``CUDA_DEVICE_MAX_CONNECTIONS``, rule 2 of :mod:`schedsim.sim.gpu_model`) only where the schedule's
  ``env`` or ``max_connections`` names them. The dependency-only replay of Lumos (Liang et al., MLSys 2025) and
  of HTA's critical-path analysis.

Both compile the DAG to arrays once (:func:`_compile`) and share the timeline
assembly and critical-path walk (:func:`_timeline`). A :class:`Program` simulated
with ``waves`` and the compiled loop skips that: :mod:`schedsim.sim.waves_columns`
feeds the loop from the Program's columns and :func:`_timeline_program` builds the
span columns from them, with bit-identical results and no per-op objects. The rest of this
docstring describes ``sharing``.

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
    GEMMs, :meth:`schedsim.cost.CostModel.gemm_demand`), capped at 1, when the
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
    ``d2h_slowdown_beside_h2d``, :func:`schedsim.sim.gpu_rates.copy_rate`).

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
import math
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from schedsim._gc import paused_gc
from schedsim.cost import CostModel
from schedsim.errors import DeadlockError, GraphError, ProfileError
from schedsim.graph.ops import Op, format_op_id, resource_of
from schedsim.hardware.profile import GPU_MODELS, HardwareProfile
from schedsim.kinds import PER_RANK_SIZE
from schedsim.lower.program import Program
from schedsim.sim import gpu_host as gh
from schedsim.sim import gpu_model as gm
from schedsim.sim import gpu_rates as gr
from schedsim.sim.loop import HOST, _raise_deadlock, _State, set_rate  # HOST is re-exported
from schedsim.sim.timeline import SpanColumns, Timeline, _encode

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["simulate", "HOST", "HOST_WAITS_META", "critical_walk"]

_KIND_RES = {"matmul": 0, "compute": 0, "memcpy": 2}  # anything else is communication (1)
_COPY_RES = {"h2d": 2, "d2h": 3, "d2d": 4}


def simulate(G: nx.DiGraph | Program, profile: HardwareProfile, *, launch: str | None = None,
             gpu_model: str | None = None, max_connections: int | None = None,
             model_executor: bool = False, iteration_gap_s: float = 0.0,
             sustained_s: float | None = None) -> Timeline:
    """Simulate the DAG ``G`` on ``profile``.

    Parameters
    ----------
    G : Program or networkx.DiGraph
        From :func:`schedsim.lower.lower` (read directly, no networkx) or
        :func:`schedsim.graph.build_graph`.
    profile : HardwareProfile
        Rates, tables and contention factors.
    launch : {"eager", "cuda_graph"}, optional
        Overrides ``G.graph["launch"]``.
    gpu_model : {"waves", "sharing"}, optional
        Overrides the profile's ``gpu_model``.
    max_connections : int, optional
        ``CUDA_DEVICE_MAX_CONNECTIONS`` (1-32); overrides the schedule's ``env`` and the profile's
        ``gpu.max_connections`` (``waves``; ``replay`` applies only this argument or the schedule's ``env``:
        without them it has no queue limit, the recorded waits holding the run's).
    model_executor : bool
        Add the profile's ``launch.executor_extra_per_op_us`` per op (predict what ``schedsim execute``
        measures rather than plain PyTorch; ``waves`` only).
    iteration_gap_s : float
        Seconds the GPUs idle between iterations, for the steady power state (``waves`` with a profile
        ``power`` curve, :mod:`schedsim.sim.power`): 0 (default) for iterations issued back to back.
    sustained_s : float, optional
        Seconds the GPUs had run such iterations before the ones predicted (a measured run's warm-up and timed
        iterations, :func:`schedsim.sim.power.sustained_of`); None (default): the steady state. Under the
        profile's ``power.onset_s`` (times the duty) no GEMM slowdown applies.

    Returns
    -------
    Timeline
        ``source="predict"``; per op: start, end, solo duration and ready time
        (seconds); ``critical_path`` lists op ids from the first to the last. With ``waves`` and a profile
        ``power`` curve, the steady power state's GEMM slowdown is applied (a fixed point over up to four
        simulations, :mod:`schedsim.sim.power`) and recorded in ``meta["power"]``.

    Raises
    ------
    DeadlockError
        If ops remain that can never start (a wait-for cycle the static checks
        did not catch).
    GraphError
        An op on a rank outside ``0 .. world_size - 1``, or with a solo duration that is NaN, infinite or
        negative (possible in a graph built through the API; the schema rules both out).
    ProfileError
        Unknown ``gpu_model``, ``max_connections`` outside 1-32, or ``iteration_gap_s`` negative, NaN or
        infinite.
    """
    info = G.graph_info(lazy_order=True) if isinstance(G, Program) else G.graph  # the order: meta, written lazily
    mode = launch or info.get("launch", "eager")
    model = gpu_model or profile.gpu_model
    if model not in GPU_MODELS:
        raise ProfileError(f"unknown gpu_model {model!r}\n  fix: use one of {', '.join(GPU_MODELS)}")
    conns = max_connections or info.get("max_connections")
    if conns is not None and not 1 <= int(conns) <= 32:
        raise ProfileError(f"CUDA_DEVICE_MAX_CONNECTIONS must be 1-32 (got {conns})\n  fix: pick a value in 1-32")
    if not (math.isfinite(iteration_gap_s) and iteration_gap_s >= 0):
        raise ProfileError(f"iteration_gap_s must be a finite number of seconds >= 0 (got {iteration_gap_s})",
                           fix="pass the GPUs' idle time between iterations, 0 for back to back")
    if model == "waves" and profile.power is not None and profile.power.gemm_slowdown_by_duty:
        from schedsim.sim.power import steady_state

        tl = steady_state(lambda p: _simulate_once(G, p, info, mode, model, conns, model_executor), profile,
                          iteration_gap_s, repeat=_repeats(G), sustained_s=sustained_s)
    else:
        tl = _simulate_once(G, profile, info, mode, model, conns, model_executor)
    if mode == "eager" and model != "replay":
        kernel_gaps(tl, _table_kernels(G), profile.launch.kernel_gap_s)
    recorded_nccl_is_comm(tl)
    return tl


def recorded_nccl_is_comm(tl: Timeline) -> None:
    """Give the spans of NCCL kernels that an import wrote as compute ops (tag ``nccl``: their peers were not
    imported, :mod:`schedsim.trace.to_schedule`) the resource ``comm``, in place, as the imported timeline has
    them: they ran communication, so busy comm, exposed comm and the overlap ratio (docs/metrics.md) count them
    there, and ``compare`` of the replay against the import holds like against like. Only the resource changes.

    >>> from schedsim.sim.timeline import Span
    >>> tl = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "compute", "compute", 0.0, 4e-6,
    ...                                              tags={"nccl": "all_reduce", "peers": "absent"}),
    ...                                         Span("b@r0", "b", 0, "s", "compute", "compute", 4e-6, 5e-6)])
    >>> recorded_nccl_is_comm(tl)
    >>> [s.resource for s in tl.spans]
    ['comm', 'compute']
    """
    from schedsim.graph.ops import COMM
    from schedsim.kinds import COMPUTE_KINDS

    if not len(tl):
        return
    c = tl.columns
    _vals, has = c.tag_column("nccl")
    kinds, kcodes = c.kind
    rows = (np.asarray(has) >= 0) & np.isin(kcodes, [i for i, k in enumerate(kinds) if k in COMPUTE_KINDS])
    if not rows.any():
        return
    values, codes = list(c.resource[0]), np.array(c.resource[1], copy=True)
    if COMM not in values:
        values.append(COMM)
    codes[rows] = values.index(COMM)
    c.resource = (values, codes)
    tl._spans = None  # rows are rebuilt from the changed column


def kernel_gaps(tl: Timeline, kernels: np.ndarray, gap_s: float) -> None:
    """Start each eager kernel's span ``gap_s`` into its time (``launch.kernel_gap_us``; at most half of it), in
    place: the back-to-back tables the kernel's time comes from hold the dispatch gap before it, which the
    GPU spends between the previous kernel's end and this one's first CTA, and which a Kineto kernel span does
    not hold (docs/metrics.md, "Per-op spans"). Its end, its ``stream_s`` and every other op stay, so the gap
    becomes part of the op's wait and the makespan does not move. ``kernels``: bool, shape (N,), the rows timed
    by such a table (:func:`_table_kernels`).

    >>> from schedsim.sim.timeline import Span
    >>> tl = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 4e-6),
    ...                                         Span("b@r0", "b", 0, "s", "compute", "compute", 4e-6, 5e-6)])
    >>> kernel_gaps(tl, np.array([True, True]), 1e-6)
    >>> [(round(s.start_s * 1e6, 3), round(s.end_s * 1e6, 3)) for s in tl.spans]
    [(1.0, 4.0), (4.5, 5.0)]
    """
    if gap_s <= 0 or not len(tl) or not kernels.any():
        return
    c = tl.columns
    start, end = np.asarray(c.start_s, np.float64), np.asarray(c.end_s, np.float64)
    shift = np.where(kernels & (end > start), np.minimum(gap_s, 0.5 * (end - start)), 0.0)
    c.start_s = start + shift
    tl._spans = None  # rows are rebuilt from the shifted columns


def _table_kernels(G: nx.DiGraph | Program) -> np.ndarray:  # type: ignore[type-arg]
    """Per op, in the order of the timeline's spans (bool, shape (N,)): a kernel timed by a back-to-back table
    (a GEMM, or a ``compute`` op not given ``duration_us``: a measured stage time holds no gap of its own)."""
    def table(op: Op) -> bool:
        return op.kind in ("matmul", "compute") and op.duration_s is None

    if isinstance(G, Program):
        return np.array([table(t) for t in G.templates], bool)[G.tmpl] if len(G.tmpl) else np.zeros(0, bool)
    return np.fromiter((table(d["op"]) for d in G._node.values()), bool, count=len(G))


def _simulate_once(G: nx.DiGraph | Program, profile: HardwareProfile, info: dict, mode: str, model: str,
                   conns: int | None, model_executor: bool) -> Timeline:
    """One simulation of ``G`` (:func:`simulate` after its checks; ``waves`` with a power curve runs it again
    with slower GEMMs, :mod:`schedsim.sim.power`)."""
    with paused_gc():  # millions of small acyclic objects: GC passes would dominate
        if isinstance(G, Program) and model == "waves":
            got = _run_waves_program(G, profile, mode, conns, model_executor)
            if got is not None:
                run, note = got
                tl = _timeline_program(G, info, profile, mode, run)
                if note:
                    tl.meta["warnings"] = [note]
                return tl
        c = _compile(G, profile, mode)
        if model == "replay":
            st = _run_replay(c, mode, conns)
        elif model == "sharing":
            st = _run_sharing(c, profile, mode, model_executor)
        else:
            st, note = _run_waves(G, profile, mode, c, conns, model_executor)
            if note:
                tl = _timeline(info, profile, mode, c, st)
                tl.meta["warnings"] = [note]
                return tl
        return _timeline(info, profile, mode, c, st)


def _repeats(G: nx.DiGraph | Program) -> np.ndarray:
    """Each op's ``repeat`` (kernels back to back), in the order of the timeline's spans (int64, shape (N,))."""
    if isinstance(G, Program):
        return np.array([t.repeat for t in G.templates], np.int64)[G.tmpl]
    return np.fromiter((d["op"].repeat for d in G._node.values()), np.int64, count=len(G))


def _p2p_hang_note(e: DeadlockError) -> str:
    """The warning of a run repeated without serializing lone send/recv (:func:`_run_waves`)."""
    first = str(e).splitlines()[1].strip() if "\n" in str(e) else str(e)
    return ("NCCL runs lone send/recv of one communicator in issue order, and this schedule's order would "
            f"hang there ({first}); predicted as if each send/recv progressed independently. Fix: use "
            "`p2p_batch` (batch_isend_irecv) or one process group per pair")


def _run_waves_program(prog: Program, profile: HardwareProfile, mode: str, conns: int | None,
                       model_executor: bool):
    """The ``waves`` run straight from the Program's columns (:mod:`schedsim.sim.waves_columns`), with the retry
    of :func:`_run_waves`; None when the compiled loop is not built or the rate tables do not fit (then the
    Op-list path runs)."""
    from schedsim.sim.loop import compiled_loop
    from schedsim.sim.waves_columns import run_waves_program

    rules = gm.GpuRules.from_profile(profile, conns)
    tab = gr.rate_tables(rules)
    loop = None if tab is None else compiled_loop()
    if tab is None or loop is None:
        return None
    try:
        return run_waves_program(prog, profile, mode, rules, tab, rules.p2p_serialized, model_executor, loop), ""
    except DeadlockError as e:
        if not rules.p2p_serialized or not len(prog.p2p):
            raise
        return run_waves_program(prog, profile, mode, rules, tab, False, model_executor, loop), _p2p_hang_note(e)


def _run_waves(G: nx.DiGraph | Program, profile: HardwareProfile, mode: str, c: _Compiled, conns: int | None,
               model_executor: bool) -> tuple[_State, str]:
    """The ``waves`` run; if serializing lone send/recv on their communicator hangs, rerun without it (and say so)."""
    from schedsim.sim.waves import run_waves

    try:
        return run_waves(c, profile, mode, max_connections=conns, model_executor=model_executor), ""
    except DeadlockError as e:
        if not profile.nccl.unbatched_p2p_serialized or not (len(G.p2p) if isinstance(G, Program)
                                                             else G.graph.get("p2p")):
            raise
        c = _compile(G, profile, mode)
        st = run_waves(c, profile, mode, max_connections=conns, model_executor=model_executor, p2p_serialized=False)
        return st, _p2p_hang_note(e)


class _Compiled(NamedTuple):
    """The DAG as arrays (index i = op i in program order per rank)."""

    ids: list[str]
    ops: list[Op]
    N: int
    world: int
    npred: list[int]
    succ: list[list[int]]
    job_of: list[int]  # j < N: op j alone; N + g: rendezvous group g
    gmem: list[list[int]]
    job_res: list[int]  # 0 compute, 1 comm, 2-4 copy engine (h2d, d2h, d2d)
    job_ranks: list[tuple[int, ...]]
    job_work: list[float]  # solo seconds (+ per-node graph overhead)
    cost: CostModel


def _compile(G: nx.DiGraph | Program, profile: HardwareProfile, mode: str) -> _Compiled:
    """The arrays of the event loops, from a Program (:func:`_compile_program`) or a networkx DAG."""
    if isinstance(G, Program):
        return _compile_program(G, profile, mode)
    cost = CostModel(profile)
    node_oh = gm.graph_node_terms(profile, mode)
    node_data = G._node  # plain dicts: much faster than the NodeView API at a million nodes
    ids = list(node_data)
    N = len(ids)
    index = {oid: i for i, oid in enumerate(ids)}
    ops = [d["op"] for d in node_data.values()]
    world = int(G.graph.get("world_size", 1 + max((o.rank for o in ops), default=0)))
    ranks = list(map(attrgetter("rank"), ops))
    if ranks and not (0 <= min(ranks) and max(ranks) < world):  # the loops index per-rank arrays by rank
        bad = next(o for o in ops if not 0 <= o.rank < world)
        raise GraphError(f"op {bad.id} is on rank {bad.rank} but the graph's world_size is {world}",
                         fix="set G.graph['world_size'] to the number of ranks, or put the op on a rank in "
                             f"0-{world - 1}")
    npred = [0] * N
    succ: list[list[int]] = []
    for nbrs in G._succ.values():
        s = [index[v] for v in nbrs]
        for j in s:
            npred[j] += 1
        succ.append(s)
    job_of = list(range(N))
    colls = list(G.graph.get("collectives", {}).values())
    gmem, lone = _coll_groups(np.cumsum([0] + [len(m) for m in colls]), [index[m] for ms in colls for m in ms])
    for s_id, r_id in G.graph.get("p2p", []):
        gmem.append([index[s_id], index[r_id]])
    J = N + len(gmem)
    job_res = [0] * J
    job_ranks: list[tuple[int, ...]] = [()] * J
    job_work = [0.0] * J
    terms = gm.memory_terms(ops, np.arange(N), np.array(ranks, np.int64), world, cost, mode)
    _jobs(ops, gmem, cost, node_oh, terms, job_of, job_res, job_ranks, job_work, lone)
    if mode == "cuda_graph":
        names: dict[str, int] = {}
        sid = np.array([names.setdefault(o.stream, len(names)) for o in ops], np.int64)
        src = np.repeat(np.arange(N, dtype=np.int64), [len(x) for x in succ])
        dst = np.fromiter((j for x in succ for j in x), np.int64, count=len(src))
        per_op = np.array([cost.graph_fork_s(o) for o in ops], float)
        _add_forks(gm.graph_fork_columns(N, src, dst, np.array(ranks, np.int64), sid, profile, mode, per_op), job_of,
                   job_work, lone)
    _check_work(ids, ops, N, job_work)
    return _Compiled(ids, ops, N, world, npred, succ, job_of, gmem, job_res, job_ranks, job_work, cost)


def _coll_groups(ptr: Sequence[int] | np.ndarray, idx: Sequence[int] | np.ndarray) -> tuple[list[list[int]], list[int]]:
    """Collectives as CSR (``ptr``, member op indices ``idx``) -> the rendezvous groups of those of two or more
    ranks, and the ops of those of one rank, a copy or nothing (rule 6b, :func:`gm.split_one_rank`)."""
    p, i, lone = gm.split_one_rank(np.asarray(ptr, np.int64), np.asarray(idx, np.int64))
    pl, il = p.tolist(), i.tolist()
    return [il[pl[k]:pl[k + 1]] for k in range(len(pl) - 1)], lone.tolist()


def _add_forks(fx: np.ndarray, job_of: list[int], job_work: list[float], lone: list[int]) -> None:
    """Rule 8 of :mod:`schedsim.sim.gpu_model` on the job arrays: ``fx`` seconds more for ops outside groups,
    but for collectives of one rank (``lone``: left as they are, as every collective is)."""
    fx[lone] = 0.0
    for i in np.flatnonzero(fx).tolist():
        if job_of[i] == i:
            job_work[i] += float(fx[i])


def _jobs(ops: list[Op], gmem: list[list[int]], cost: CostModel, node_oh: tuple[float, float],
          terms: tuple[np.ndarray | float, np.ndarray | float], job_of: list[int], job_res: list[int],
          job_ranks: list[tuple[int, ...]], job_work: list[float], lone: list[int]) -> None:
    """Fill each op's and each rendezvous group's resource, ranks and solo time (seconds); ``terms`` are rule 9's
    per-op node and HBM seconds (:func:`schedsim.sim.gpu_model.memory_terms`); ``lone``: the ops of collectives
    of one rank, a copy or nothing (rule 6b)."""
    N = len(ops)
    dur = cost.duration
    timing_s, empty_s = node_oh
    node_a, extra_a = (t.tolist() if isinstance(t, np.ndarray) else [t] * N for t in terms)
    node_work = gm.node_work
    kind_res = _KIND_RES
    for i, op in enumerate(ops):
        res = kind_res.get(op.kind, 1)
        if res == 2:
            res = _COPY_RES[op.direction or "d2d"]
        job_res[i] = res
        job_ranks[i] = (op.rank,)
        job_work[i] = node_work(dur(op), node_a[i], timing_s, empty_s, extra_a[i])
    for i in lone:
        job_res[i] = gm.one_rank_res(ops[i].kind)
    for g, idx in enumerate(gmem):
        j = N + g
        for i in idx:
            job_of[i] = j
        job_res[j] = 1
        job_ranks[j] = tuple(ops[i].rank for i in idx)
        i0 = idx[0]
        job_work[j] = node_work(dur(ops[i0]), node_a[i0], timing_s, empty_s, extra_a[i0])
        if ops[i0].kind in PER_RANK_SIZE:  # a size per member: the largest transfer ends the collective
            job_work[j] = max(job_work[i] for i in idx)
        for i in idx:
            job_work[i] = job_work[j]


def _compile_program(prog: Program, profile: HardwareProfile, mode: str) -> _Compiled:
    """:func:`_compile` from the Program's columns: the same arrays, without networkx."""
    cost = CostModel(profile)
    node_oh = gm.graph_node_terms(profile, mode)
    N = prog.N
    ids = prog.ids()
    ops = prog.ops()
    ptr, dst, _kind = prog.succ
    p, d = ptr.tolist(), dst.tolist()
    succ = [d[p[i]:p[i + 1]] for i in range(N)]
    npred = np.bincount(dst, minlength=N).tolist()
    gmem, lone = _coll_groups(prog.coll_ptr, prog.coll_idx)
    gmem += [list(x) for x in prog.p2p.tolist()]
    J = N + len(gmem)
    job_of = list(range(N))
    job_res = [0] * J
    job_ranks: list[tuple[int, ...]] = [()] * J
    job_work = [0.0] * J
    terms = gm.memory_terms(ops, np.arange(N), prog.rank.astype(np.int64), prog.world_size, cost, mode)
    _jobs(ops, gmem, cost, node_oh, terms, job_of, job_res, job_ranks, job_work, lone)
    src = np.repeat(np.arange(N, dtype=np.int64), np.diff(ptr))
    per_op = np.array([cost.graph_fork_s(o) for o in ops], float) if mode == "cuda_graph" else None
    _add_forks(gm.graph_fork_columns(N, src, dst, prog.rank.astype(np.int64), prog.stream_id.astype(np.int64),
                                     profile, mode, per_op),
               job_of, job_work, lone)
    _check_work(ids, ops, N, job_work)
    return _Compiled(ids, ops, N, prog.world_size, npred, succ, job_of, gmem, job_res, job_ranks, job_work, cost)


def _check_work(ids: list[str], ops: list[Op], N: int, job_work: list[float]) -> None:
    """Raise GraphError on a NaN, infinite or negative solo time.

    Such a time would spread through the timeline, or (negative) end an op before it starts and read as a
    deadlock; the schema bounds them, a graph built through the API may not. One sum and one min find any
    (an overflowing sum of finite values only costs a scan that finds nothing).
    """
    if job_work and not (min(job_work) >= 0.0 and math.isfinite(sum(job_work))):
        for i, w in enumerate(job_work[:N]):
            if not (w >= 0.0 and math.isfinite(w)):
                raise GraphError(f"op {ids[i]} ({ops[i].kind}) has a solo duration of {w} s",
                                 fix="give it a finite duration, FLOP and byte count >= 0 (and a profile whose "
                                     "rates are finite and > 0)")


def _sharing_copy_rate(cq: list[int], res: int, delta: float, rho: dict[int, float]) -> float:
    """Rate of a copy on engine ``res`` (2 h2d, 3 d2h, 4 d2d) of a rank whose running jobs per resource are
    ``cq``: its engine shared by ``cq[res]`` copies, 1/(1+delta) beside a kernel, 1/(1+rho[res]) while the
    reverse direction's engine copies (:func:`schedsim.sim.gpu_rates.copy_rate`)."""
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
    # an h2d (res 2) and a d2h copy (res 3) at once slow each other (gpu_rates.copy_rate's ρ): rho[res]
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
            c = cnt[r]
            c[res] -= 1
            if res == 0:
                dem[r] = dem[r] - job_dem[j] if c[0] else 0.0
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



def _rendezvous(members: list[int], last: int, ready_t: list[float], start: list[float], binding: list[int]) -> float:
    """Start every member of a rendezvous at the last one's ready time (it binds the others); that time."""
    t0 = ready_t[last]
    for m in members:
        start[m] = t0
        if m != last:
            binding[m] = last
    return t0


#: Tag of an imported op launched right after a host synchronisation (:mod:`schedsim.trace.to_schedule`): the
#: host time (µs) from the previous issue to the synchronising call. The ``replay`` model's host then waits for
#: the op's predecessors (the synchronised work) before spending the op's ``host_us``.
HOST_WAIT_TAG = "host_wait_before_us"


class _ReplayHost:
    """The host threads of the ``replay`` model: each rank issues its ops in program order, op i at
    ``clock + host_s`` (no launch costs: a recorded gap holds its call); an op tagged :data:`HOST_WAIT_TAG` is
    issued at ``max(clock + that tag, end of its predecessors) + host_s`` (the host blocked in a
    synchronisation), so the host stalls until they end. Under ``cuda_graph`` every op is issued at 0.
    ``host_from[i]``: the op whose end the host last waited for in such a synchronisation (its predecessor that
    ended last, where it ended after the host reached the call), at or before issuing op i; -1 where the host's
    calls up to op i never waited (the critical path's walk continues there, :func:`critical_walk`)."""

    def __init__(self, ops: list[Op], world: int, mode: str) -> None:
        self.order: list[list[int]] = [[] for _ in range(world)]
        self.before: dict[int, float] = {}
        graph = mode == "cuda_graph"
        self.host_s = [0.0 if graph else op.host_s for op in ops]
        for i, op in enumerate(ops):
            self.order[op.rank].append(i)
            b = dict(op.tags).get(HOST_WAIT_TAG) if op.tags and not graph else None
            if isinstance(b, (int, float)):
                self.before[i] = float(b) * 1e-6
        self.ptr = [0] * world
        self.clock = [0.0] * world
        self.waited = [-1] * world
        self.issue: list[float | None] = [None] * len(ops)
        self.host_from = [-1] * len(ops)

    def advance(self, r: int, npred: list[int], pred_end: list[float], last_pred: list[int], issued: Any) -> None:
        """Issue rank ``r``'s ops until one waits for unfinished work; ``issued(i)`` for each issued op whose
        predecessors are done (``pred_end[i]``: when the last of them ended, ``last_pred[i]``)."""
        order, k, clock = self.order[r], self.ptr[r], self.clock[r]
        while k < len(order):
            i = order[k]
            b = self.before.get(i)
            if b is not None and npred[i] > 0:
                break
            if b is not None:
                if pred_end[i] > clock + b:  # the host blocked until the synchronised work ended
                    self.waited[r] = last_pred[i]
                clock = max(clock + b, pred_end[i])
            clock += self.host_s[i]
            self.issue[i] = clock
            self.host_from[i] = self.waited[r]
            k += 1
            if npred[i] == 0:
                issued(i)
        self.ptr[r], self.clock[r] = k, clock


class _ReplayQueues:
    """The hardware queues of the ``replay`` model (rule 2 of :mod:`schedsim.sim.gpu_model`): stream ``s`` of a
    rank (numbered by first appearance, :func:`~schedsim.sim.gpu_model.stream_queues`) uses queue ``s mod conns``,
    which hands its ops to the GPU in issue (program) order; in a replay an op is handed over when it starts, so
    an op may start only once the op ahead of it in its queue has (an op ready before that is parked, and binds to
    the op ahead). No queue limit when ``conns`` is None."""

    def __init__(self, ops: list[Op], conns: int | None) -> None:
        self.prev = [-1] * len(ops)
        self.next = [-1] * len(ops)
        if conns is not None:
            last: dict[tuple[int, int], int] = {}
            for i, (op, q) in enumerate(zip(ops, gm.stream_queues(ops, int(conns)), strict=True)):
                p = last.get((op.rank, q), -1)
                self.prev[i] = p
                if p >= 0:
                    self.next[p] = i
                last[(op.rank, q)] = i
        # when the op ahead in the queue started (0 where there is none; None until it has)
        self.gate: list[float | None] = [0.0 if p < 0 else None for p in self.prev]
        self.parked: dict[int, float] = {}  # ready ops behind an op not yet started: when they were ready

    def submit(self, i: int, t: float, binding: list[int], go: Callable[[int, float], None]) -> None:
        """Op ``i`` is ready at ``t``: ``go(i, time)`` with the time it may start as far as its queue goes
        (``binding[i]`` the op ahead where that holds it), or park it until the op ahead starts."""
        gate = self.gate[i]
        if gate is None:
            self.parked[i] = t
        elif gate > t:
            binding[i] = self.prev[i]
            go(i, gate)
        else:
            go(i, t)

    def started(self, members: Sequence[int], t: float, binding: list[int], go: Callable[[int, float], None]) -> None:
        """Ops ``members`` start at ``t``: the op behind each in its queue may follow (:meth:`submit` again if it
        was parked)."""
        for i in members:
            k = self.next[i]
            if k >= 0:
                self.gate[k] = t
                if k in self.parked:
                    self.submit(k, self.parked.pop(k), binding, go)


def _run_replay(c: _Compiled, mode: str, conns: int | None = None) -> _State:
    """The ``replay`` model (module docstring): every job runs its solo seconds ``c.job_work`` from the moment it
    is ready; ready = issued (:class:`_ReplayHost`), every predecessor done and, for a rendezvous, every member
    ready (then all start at the last one's time). With ``conns`` (``CUDA_DEVICE_MAX_CONNECTIONS``: the
    schedule's ``env`` or ``max_connections``; none by default, as the recorded waits hold the run's), ready also
    needs the op ahead of it in its hardware queue handed to the GPU, which in a replay is its start (rule 2 of
    :mod:`schedsim.sim.gpu_model`: an op not yet ready holds up the ops behind it in its queue)."""
    ops, N, npred, succ, job_of, gmem, job_work = c.ops, c.N, list(c.npred), c.succ, c.job_of, c.gmem, c.job_work
    host = _ReplayHost(ops, c.world, mode)
    queues = _ReplayQueues(ops, conns)
    pred_end = [0.0] * N
    last_pred = [HOST] * N
    start, end, ready_t = [0.0] * N, [0.0] * N, [0.0] * N
    binding = [HOST] * N
    gready = [0] * len(gmem)
    glast = [-1] * len(gmem)
    heap: list[tuple[float, int, int]] = []
    counter = itertools.count()

    def make_ready(i: int, t: float) -> None:  # ready and past the op ahead in its hardware queue
        ready_t[i] = t
        j = job_of[i]
        if j < N:
            start[i] = t
            heapq.heappush(heap, (t + job_work[i], next(counter), i))
            queues.started((i,), t, binding, make_ready)
            return
        g = j - N
        gready[g] += 1
        if glast[g] < 0 or t >= ready_t[glast[g]]:
            glast[g] = i
        if gready[g] == len(gmem[g]):
            t0 = _rendezvous(gmem[g], glast[g], ready_t, start, binding)
            heapq.heappush(heap, (t0 + job_work[j], next(counter), j))
            queues.started(gmem[g], t0, binding, make_ready)

    def release(v: int) -> None:  # issued, predecessors done
        iv = host.issue[v]
        assert iv is not None
        if iv > pred_end[v]:
            queues.submit(v, iv, binding, make_ready)
        else:
            binding[v] = last_pred[v]
            queues.submit(v, pred_end[v], binding, make_ready)

    for r in range(c.world):
        host.advance(r, npred, pred_end, last_pred, release)
    done = 0
    while heap:
        t, _s, j = heapq.heappop(heap)
        for i in (gmem[j - N] if j >= N else (j,)):
            end[i] = t
            done += 1
            for v in succ[i]:
                npred[v] -= 1
                if t >= pred_end[v]:
                    pred_end[v], last_pred[v] = t, i
                if npred[v] == 0:
                    if host.issue[v] is not None:
                        release(v)
                    else:
                        host.advance(ops[v].rank, npred, pred_end, last_pred, release)
    if done < N:
        _raise_deadlock(c.ids, ops, end, npred, job_of, gmem, N)
    issue = np.array([t if t is not None else np.nan for t in host.issue], np.float64)
    return _State(start, end, ready_t, binding, host_call=issue, host_from=host.host_from)


def _sharing_issue_times(ops: list[Op], job_res: list[int], profile: HardwareProfile, mode: str,
                         world: int, model_executor: bool = False) -> list[float]:
    """Host issue time (s) of each op in the ``sharing`` model: per-op or per-collective launch cost plus
    ``host_us`` (and ``executor_extra_per_op_us`` with ``model_executor``, as in ``waves``' rule 1), in program
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


def _timeline(info: dict, profile: HardwareProfile, mode: str, c: _Compiled, state: _State) -> Timeline:
    """Span columns (rows are built only when asked for), critical path (bindings walked back from the last
    op to finish) and metadata."""
    ids, ops, N, world, job_of = c.ids, c.ops, c.N, c.world, c.job_of
    start, end, ready_t, binding, stream_t, host_s, host_call, host_from = state
    empty: dict = {}  # shared, never mutated
    tag_dicts: dict[tuple, dict] = {(): empty}  # one dict per distinct tag set

    def tags_of(t: tuple) -> dict:
        d = tag_dicts.get(t)
        if d is None:
            d = tag_dicts[t] = dict(t)
        return d

    def floats(x: Sequence[float] | np.ndarray) -> np.ndarray:
        return np.array(x, dtype=np.float64)

    names, ranks, streams, kinds, nbytes, flops, tags = (
        zip(*map(attrgetter("name", "rank", "stream", "kind", "nbytes", "flops", "tags"), ops), strict=True)
        if N else ((),) * 7)
    cols = SpanColumns(
        ids, list(names), np.array(ranks, dtype=np.int64), _encode(streams, N), _encode(kinds, N),
        _encode([resource_of(k) for k in kinds], N), floats(start), floats(end), floats(c.job_work[:N]),
        floats(ready_t), floats(nbytes), floats(flops), list(map(tags_of, tags)),
        None if stream_t is None else floats(stream_t))
    # critical path: walk bindings back from the last op to finish
    rows, waits = critical_walk(binding, cols.end_s, [j if j >= N else -1 for j in job_of[:N]], host_from)
    cp = [ids[i] for i in rows]
    meta: dict[str, Any] = {"pipeline": dict(info["pipeline"])} if "pipeline" in info else {}
    if waits:
        meta[HOST_WAITS_META] = [ids[i] for i in waits]
    _host_meta(meta, host_s, mode, None if "pipeline" in info else host_call, ids)
    tl = Timeline(schedule=str(info.get("name", "")), source="predict", world_size=world, launch=mode,
                  profile=profile.name, critical_path=cp, meta=meta, columns=cols)
    tl.host_call_end_s = None if host_call is None else np.asarray(host_call, np.float64)
    return tl


#: ``Timeline.meta`` key: ids of the critical path's ops that their host launched after a host synchronisation in
#: which it waited for the path's op before them (:func:`critical_walk`); the path's wait before each is host time
#: (``host_issue``, :func:`schedsim.sim.metrics.critical_path_segments`).
HOST_WAITS_META = "critical_path_host_waits"


def critical_walk(binding: Sequence[int], end: np.ndarray, group: Sequence[int],
                  host_from: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
    """The critical path: from the op that ends last (``end``, seconds, shape (N,); the lowest row among ties)
    back along ``binding`` (the op that released each, or :data:`HOST`) until an op its host released.

    A rendezvous member bound to another member of its group (``group[i] >= 0`` and equal) is left out: the
    member that released the group stands for it. An op its host released, where the host had waited in a
    synchronisation for op ``host_from[i]`` (>= 0: :class:`_ReplayHost`, or a trace's recorded waits,
    :mod:`schedsim.trace.to_schedule`), does not end the walk: it goes on from that op, so the path runs GPU →
    host → GPU (HTA's critical path: kernel → sync → the host's launches; Holistic Trace Analysis,
    ``critical_path_analysis.py``, ``CPEdgeType.SYNC_DEPENDENCY``).

    Returns
    -------
    (rows, waits) : tuple[list[int], list[int]]
        The path's rows in path order, and those of them its host released after waiting for the one before.

    >>> critical_walk([HOST, 0, HOST, 2], np.array([1.0, 2.0, 3.0, 4.0]), [-1] * 4, [-1, -1, 1, 1])
    ([0, 1, 2, 3], [2])
    """
    n = len(end)
    if not n:
        return [], []
    i = int(np.lexsort((-np.arange(n), end))[-1])  # latest end, lowest index among ties
    rows: list[int] = []
    waits: list[int] = []
    seen: set[int] = set()
    while i >= 0 and i not in seen:
        seen.add(i)
        b = binding[i]
        if not (b >= 0 and group[i] >= 0 and group[b] == group[i]):  # a rendezvous peer stands for it
            rows.append(i)
            if b == HOST and host_from is not None and host_from[i] >= 0:
                waits.append(i)
                b = host_from[i]
        i = b
    rows.reverse()
    waits.reverse()
    return rows, waits


def _host_meta(meta: dict, host_s: np.ndarray | None, mode: str, host_call: np.ndarray | None = None,
               ids: Any = None) -> None:
    """``meta["host_issue_s"]``: per rank, seconds from the iteration's start until its host returned from its
    last call (rule 1 of :mod:`schedsim.sim.gpu_model`; eager runs of the ``waves`` model), which ``compare``
    holds against ``schedsim execute``'s ``meta.host_issue_uninstrumented_s``; and, for up to
    :data:`~schedsim.sim.gpu_host.HOST_CALL_META_MAX` ops, ``meta["host_call_end_s"]`` (``{op id: seconds}``,
    when each op's call returned), against ``execute``'s own (``ids``: a list, or a callable giving it)."""
    if host_s is not None and mode == "eager":
        meta["host_issue_s"] = [float(x) for x in host_s]
        if host_call is not None and 0 < len(host_call) <= gh.HOST_CALL_META_MAX and ids is not None:
            names = ids() if callable(ids) else ids
            meta["host_call_end_s"] = {str(i): round(float(t), 9) for i, t in zip(names, host_call, strict=True)}


def _timeline_program(prog: Program, info: dict, profile: HardwareProfile, mode: str, run) -> Timeline:
    """:func:`_timeline` of a columnar run (:mod:`schedsim.sim.waves_columns`): the span columns from the
    Program's columns and interned tables (no per-op objects but the ids and tag references)."""
    from schedsim.sim.waves_columns import _per_op, categorical

    N = prog.N
    res_code = np.array([0, 1, 2, 2, 2], np.int32)[run.res] if N else np.zeros(0, np.int32)
    cols = SpanColumns(  # names, ids and tags stay coded (a pipeline's lazy runs unmade) until read
        prog.ids, lambda: prog.op_names(np.arange(N)), prog.rank.astype(np.int64),
        categorical(prog.streams, prog.stream_id), categorical(*_kind_codes(run)),
        categorical(("compute", "comm", "copy"), res_code), run.start, run.end, run.work, run.ready_t,
        _per_op(np.array([t.nbytes for t in run.tps], np.float64), run.tmpl),  # one value: a read-only broadcast
        _per_op(np.array([t.flops for t in run.tps], np.float64), run.tmpl),
        None, run.stream_t, coded_ids=(prog.name_table, prog.name_id), coded_tags=prog.tag_columns,
        name_parts=prog.name_parts)
    at = np.zeros(0, np.int64)
    if N:  # from the latest end (lowest index among ties) back along the bindings, in C (_cwaves.walk): the ops
        # on the way but a rendezvous peer standing for its group's op, as _timeline's walk takes them
        from schedsim.sim.loop import compiled_loop

        out = np.empty(N, np.int32)
        n = compiled_loop().walk(run.binding, run.ogrp, int(np.argmax(run.end)), out)
        at = out[:n][::-1].astype(np.int64)
        del out
    suffix = [format_op_id("", r) for r in range(prog.world_size)]  # "@r{rank}": ids joined, not formatted per op
    cp = list(map(str.__add__, prog.op_names(at), map(suffix.__getitem__, prog.rank[at].tolist())))
    meta = {"pipeline": dict(info["pipeline"])} if "pipeline" in info else {}
    # per-op host calls, not for a pipeline block (its op names are made on demand; _timeline does the same)
    _host_meta(meta, run.host_s, mode, None if "pipeline" in info else run.host_call, prog.ids)
    tl = Timeline(schedule=str(info.get("name", "")), source="predict", world_size=prog.world_size, launch=mode,
                  profile=profile.name, critical_path=cp, meta=meta, columns=cols)
    tl._cp_rows = (list(cp), at)  # in path order; critical_rows() sorts them
    tl.host_call_end_s = run.host_call
    return tl


def _kind_codes(run) -> tuple[tuple[str, ...], np.ndarray]:
    """``(kinds, codes)``: the op kinds of a columnar run and each op's index into them, from its template
    classes (:func:`schedsim.sim.waves_columns.template_classes`; ``Program.kind`` reads every template)."""
    kinds = [t.kind for t in run.tps]
    values = tuple(dict.fromkeys(kinds))
    return values, np.array([values.index(k) for k in kinds], np.int32)[run.tmpl] if len(run.tmpl) else \
        np.zeros(0, np.int32)
