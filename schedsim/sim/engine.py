"""The discrete-event simulator: ``simulate(program, profile, options) -> Timeline``.

In: a :class:`~schedsim.lower.program.Program` (:func:`schedsim.lower.lower`, or
:func:`schedsim.api.lower_spec`, which names the schedule file in its errors) and a hardware profile.
Out: a :class:`~schedsim.sim.timeline.Timeline`.

One path per GPU execution model, chosen by ``gpu_model`` (argument, else the profile's ``gpu_model``, default
``waves``):

* ``waves`` (rules in :mod:`schedsim.gpu.rules`): :mod:`schedsim.sim.waves_columns` prepares flat arrays
  from the Program's columns and the compiled event loop (:mod:`schedsim.sim._cwaves`, required: built by
  ``pip install``) runs them: CTAs in waves with FIFO block dispatch, NCCL kernels holding SMs, hardware queues
  (``CUDA_DEVICE_MAX_CONNECTIONS``), communicators run in issue order, the host thread as a resource. It
  matches how the 2×H200 traces of run concurrent kernels ([evidence: 2xh200-concurrency]).
  :func:`_timeline_program` builds the span columns from the run, with no per-op objects.
* ``replay`` (:mod:`schedsim.sim.replay`): the replay of a recorded run (``schedsim import ... --out DIR`` writes
  ``DIR/schedule.yaml`` with measured durations). No contention: an op runs its solo duration (the recorded one,
  which already holds the contention of the run) as soon as it is ready; the host issues each rank's ops at
  the prefix sums of their ``host_us`` alone (the recorded gaps between launch calls already hold the calls'
  cost), so issue times are the recorded launch times. Streams, event waits and rendezvous as in ``waves``; hardware
  queues (``CUDA_DEVICE_MAX_CONNECTIONS``, rule hardware-queues of :mod:`schedsim.gpu.rules`) only where the schedule's
  ``env`` or ``max_connections`` names them. The dependency-only replay of Lumos (Liang et al., MLSys 2025) and
  of HTA's critical-path analysis.

``replay`` runs its own Python loop on the Program's ops as lists
(:func:`schedsim.sim.loop_arrays._compile_program`) with its timeline assembly and critical-path walk
(:func:`_timeline`, this module). The ``sharing`` model (processor sharing) is retired: naming it is an error
(:func:`schedsim.hardware.profile.check_gpu_model`). The Python form of the ``waves`` loop and the networkx feed
are test oracles (``tests/oracle/``), held bit-identical to this path by ``tests/oracle/test_differential.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from schedsim._gc import paused_gc
from schedsim.errors import DeadlockError, GraphError, ProfileError
from schedsim.gpu import host as gh
from schedsim.gpu import rates as gr
from schedsim.gpu import rules as gm
from schedsim.graph.ops import COMPUTE, Op, resource_of
from schedsim.hardware.profile import HardwareProfile, check_gpu_model
from schedsim.lower.program import OpNames, Program, ProgramInfo
from schedsim.sim.host_wait import host_wait_meta
from schedsim.sim.loop import HOST, _State, compiled_loop  # HOST is re-exported
from schedsim.sim.loop_arrays import _compile_program, _Compiled
from schedsim.sim.replay import _run_replay, check_recorded_tags
from schedsim.sim.timeline import SpanColumns, Timeline, _encode
from schedsim.sim.waves_columns import ProgramRun, _per_op, categorical, run_waves_program

__all__ = ["simulate", "HOST", "HOST_WAITS_META", "critical_walk"]



def simulate(G: Program, profile: HardwareProfile, *, launch: str | None = None,
             gpu_model: str | None = None, max_connections: int | None = None,
             model_executor: bool = False, iteration_gap_s: float = 0.0,
             sustained_s: float | None = None, makespan_only: bool = False) -> Timeline:
    """Simulate the Program ``G`` on ``profile``.

    Parameters
    ----------
    G : Program
        From :func:`schedsim.lower.lower` or :func:`schedsim.api.lower_spec` (a networkx graph is not taken:
        lower the spec it came from).
    profile : HardwareProfile
        Rates, tables and contention factors.
    launch : {"eager", "cuda_graph"}, optional
        Overrides ``G.graph["launch"]``.
    gpu_model : {"waves", "replay"}, optional
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
        ``power`` curve, :mod:`schedsim.gpu.power`): 0 (default) for iterations issued back to back.
    sustained_s : float, optional
        Seconds the GPUs had run such iterations before the ones predicted (a measured run's warm-up and timed
        iterations, :func:`schedsim.gpu.power.sustained_of`); None (default): the steady state. Under the
        profile's ``power.onset_s`` (times the duty) no GEMM slowdown applies.

    Returns
    -------
    Timeline
        ``source="predict"``; per op: start, end, solo duration and ready time
        (seconds); ``critical_path`` lists op ids from the first to the last. With ``waves`` and a profile
        ``power`` curve, the steady power state's GEMM slowdown is applied (a fixed point over up to four
        simulations, :mod:`schedsim.gpu.power`) and recorded in ``meta["power"]``.
    makespan_only : bool
        True where only the timeline's makespan and ``meta`` are read (``schedsim search``): the ``waves`` model's
        critical path is not walked (left empty) and the eager kernels' dispatch gap (:func:`kernel_gaps`) is not
        cut from their spans' starts; the makespan is the same (the gap only moves starts later, and runs start
        at 0 or later), and so is a ``power`` curve's duty (read before the gap). An imported schedule's NCCL
        kernels written as compute ops keep the resource ``compute`` (:func:`recorded_nccl_is_comm` not run:
        the resource does not move a span).

    Raises
    ------
    DeadlockError
        If ops remain that can never start (a wait-for cycle the static checks
        did not catch).
    GraphError
        An op with a solo duration that is NaN, infinite or negative (a profile whose rates are not finite).
    ProfileError
        Unknown or retired (``sharing``) ``gpu_model``, ``max_connections`` outside 1-32, ``iteration_gap_s``
        negative, NaN or infinite, or (``waves``) a GPU whose rate table is too large (:func:`_rate_tables`).
    BuildError
        The compiled event loop is not built or out of date (:func:`schedsim.sim.loop.compiled_loop`).
    TypeError
        ``G`` is not a Program.
    """
    if not isinstance(G, Program):
        raise TypeError(f"simulate takes a Program, not {type(G).__name__}: lower the schedule first "
                        "(schedsim.api.lower_spec(spec, file) or schedsim.lower.lower(spec))")
    info = G.graph_info(lazy_order=True)  # the order: meta, written lazily
    mode = launch or info.get("launch", "eager")
    model = profile.gpu_model if gpu_model is None else gpu_model
    check_gpu_model(model, "gpu_model")
    conns = max_connections or info.get("max_connections")
    if conns is not None and not 1 <= int(conns) <= 32:
        raise ProfileError(f"CUDA_DEVICE_MAX_CONNECTIONS must be 1-32 (got {conns})\n  fix: pick a value in 1-32")
    if not (math.isfinite(iteration_gap_s) and iteration_gap_s >= 0):
        raise ProfileError(f"iteration_gap_s must be a finite number of seconds >= 0 (got {iteration_gap_s})",
                           fix="pass the GPUs' idle time between iterations, 0 for back to back")
    if model == "waves" and profile.power is not None and profile.power.gemm_slowdown_by_duty:
        from schedsim.gpu.power import steady_state

        tl = steady_state(lambda p: _simulate_once(G, p, info, mode, model, conns, model_executor, makespan_only),
                          profile, iteration_gap_s, repeat=_repeats(G), sustained_s=sustained_s)
    else:
        tl = _simulate_once(G, profile, info, mode, model, conns, model_executor, makespan_only)
    if mode == "eager" and model != "replay" and not makespan_only:
        kernel_gaps(tl, _table_kernels(G), profile.launch.kernel_gap_s)
    # an imported schedule's (a lowering's other ops have none); the spans' resources alone change, which a
    # makespan does not read
    if not makespan_only and G.may_have_tag("nccl"):
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

    if not len(tl):
        return
    c = tl.columns
    _vals, has = c.tag_column("nccl")
    kinds, kcodes = c.kind
    rows = (np.asarray(has) >= 0) & np.isin(kcodes, [i for i, k in enumerate(kinds) if resource_of(k) == COMPUTE])
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
    # np.where(kernels & (end > start), np.minimum(gap_s, 0.5 * (end - start)), 0.0), in place on one array
    shift = np.subtract(end, start)
    shift *= 0.5
    np.minimum(gap_s, shift, out=shift)
    keep = end > start
    keep &= kernels
    np.logical_not(keep, out=keep)
    np.copyto(shift, 0.0, where=keep)
    del keep
    c.start_s = start + shift
    tl._spans = None  # rows are rebuilt from the shifted columns


def _table_kernels(G: Program) -> np.ndarray:
    """Per op, in the order of the timeline's spans (bool, shape (N,)): a kernel timed by a back-to-back table
    (a kind on the SMs, :func:`~schedsim.graph.ops.resource_of`: a GEMM, or a ``compute`` op not given
    ``duration_us``: a measured stage time holds no gap of its own)."""
    def table(op: Op) -> bool:
        return resource_of(op.kind) == COMPUTE and op.duration_s is None

    return np.array([table(t) for t in G.templates], bool)[G.tmpl] if len(G.tmpl) else np.zeros(0, bool)


def _simulate_once(G: Program, profile: HardwareProfile, info: ProgramInfo, mode: str, model: str,
                   conns: int | None, model_executor: bool, makespan_only: bool = False) -> Timeline:
    """One simulation of ``G`` (:func:`simulate` after its checks; ``waves`` with a power curve runs it again
    with slower GEMMs, :mod:`schedsim.gpu.power`). ``makespan_only``: :func:`simulate`'s."""
    with paused_gc():  # millions of small acyclic objects: GC passes would dominate
        if model == "waves":
            check_recorded_tags(G)  # rule host-wait's tags, read by the loop too
            run, note = _run_waves_program(G, profile, mode, conns, model_executor)
            tl = _timeline_program(G, info, profile, mode, run, path=not makespan_only)
            if note:
                tl.meta["warnings"] = [note]
            return tl
        if G.represented:  # the replay loop takes a collective's ranks from its members
            raise GraphError("a symmetric Program (a training step lowered for its representative ranks) runs only "
                             "on the waves model", fix="lower it with every rank (schedsim predict --full-ranks)")
        check_recorded_tags(G)
        c = _compile_program(G, profile, mode)
        st = _run_replay(c, mode, conns, G)
        return _timeline(info, profile, mode, c, st)


def _repeats(G: Program) -> np.ndarray:
    """Each op's ``repeat`` (kernels back to back), in the order of the timeline's spans (int64, shape (N,); a
    read-only broadcast of one value, no memory per op, when every template has the same)."""
    reps = np.array([t.repeat for t in G.templates], np.int64)
    if len(reps) and bool((reps == reps[0]).all()):
        return np.broadcast_to(reps[:1], G.tmpl.shape)
    return reps[G.tmpl]


def _p2p_hang_note(e: DeadlockError) -> str:
    """The warning of a run repeated without serializing lone send/recv (:func:`_run_waves_program`)."""
    first = str(e).splitlines()[1].strip() if "\n" in str(e) else str(e)
    return ("NCCL runs lone send/recv of one communicator in issue order, and this schedule's order would "
            f"hang there ({first}); predicted as if each send/recv progressed independently. Fix: use "
            "`p2p_batch` (batch_isend_irecv) or one process group per pair")


def _rate_tables(profile: HardwareProfile, rules: gm.GpuRules) -> gr.RateTables:
    """The ``waves`` loop's rate tables (:func:`schedsim.gpu.rates.rate_tables`).

    Raises ProfileError when they would exceed :data:`~schedsim.gpu.rates.MAX_TABLE` entries (a GPU of
    about a thousand SMs or more with one SM per NCCL kernel; shipped GPUs have 108-160)."""
    tab = gr.rate_tables(rules)
    if tab is None:
        raise ProfileError(f"profile {profile.name!r}: gpu.sms {rules.sms} with {rules.nccl_sms} SM(s) per NCCL kernel "
                           f"is too large for the waves model's rate table (({rules.sms} + 1) x "
                           f"({rules.sms} // {rules.nccl_sms} + 1) entries, over {gr.MAX_TABLE})",
                           fix="give gpu.sms the GPU's streaming multiprocessor count (H100 SXM: 132) and "
                               "nccl.sms_per_collective the SMs one NCCL kernel holds")
    return tab


def _run_waves_program(prog: Program, profile: HardwareProfile, mode: str, conns: int | None,
                       model_executor: bool) -> tuple[ProgramRun, str]:
    """The ``waves`` run from the Program's columns (:mod:`schedsim.sim.waves_columns`) in the compiled loop;
    if serializing lone send/recv on their communicator hangs, rerun without it (and say so: the note)."""
    rules = gm.GpuRules.from_profile(profile, conns)
    tab = _rate_tables(profile, rules)
    loop = compiled_loop()
    try:
        return run_waves_program(prog, profile, mode, rules, tab, rules.p2p_serialized, model_executor, loop), ""
    except DeadlockError as e:
        if not rules.p2p_serialized or not len(prog.p2p):
            raise
        return run_waves_program(prog, profile, mode, rules, tab, False, model_executor, loop), _p2p_hang_note(e)


def _timeline(info: ProgramInfo, profile: HardwareProfile, mode: str, c: _Compiled, state: _State) -> Timeline:
    """Span columns (rows are built only when asked for), critical path (bindings walked back from the last
    op to finish) and metadata."""
    ids, ops, N, world, job_of = c.ids, c.ops, c.N, c.world, c.job_of
    start, end, ready_t, binding, stream_t, host_s, host_call, host_from, _waits = state
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
    if state.host_waits:
        w = np.array(state.host_waits, np.float64).reshape(-1, 3)
        host_wait_meta(meta, ids, w[:, 0].astype(np.int64), np.array(ranks, np.int64), w[:, 1], w[:, 2])
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
    synchronisation for op ``host_from[i]`` (>= 0: :class:`schedsim.sim.replay._ReplayHost`, or a trace's
    recorded waits, :mod:`schedsim.trace.to_schedule`), does not end the walk: it goes on from that op, so the
    path runs GPU → host → GPU (HTA's critical path: kernel → sync → the host's launches; Holistic Trace Analysis,
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
               ids: list[str] | Callable[[], list[str]] | None = None) -> None:
    """``meta["host_issue_s"]``: per rank, seconds from the iteration's start until its host returned from its
    last call (rule host-issue of :mod:`schedsim.gpu.rules`; eager runs of the ``waves`` model), which ``compare``
    holds against ``schedsim execute``'s ``meta.host_issue_uninstrumented_s``; and, for up to
    :data:`~schedsim.gpu.host.HOST_CALL_META_MAX` ops, ``meta["host_call_end_s"]`` (``{op id: seconds}``,
    when each op's call returned), against ``execute``'s own (``ids``: a list, or a callable giving it)."""
    if host_s is not None and mode == "eager":
        meta["host_issue_s"] = np.asarray(host_s, np.float64).tolist()  # the floats float(x) gives, at C speed
        if host_call is not None and 0 < len(host_call) <= gh.HOST_CALL_META_MAX and ids is not None:
            names = ids() if callable(ids) else ids
            meta["host_call_end_s"] = {str(i): round(float(t), 9) for i, t in zip(names, host_call, strict=True)}


def _timeline_program(prog: Program, info: ProgramInfo, profile: HardwareProfile, mode: str,
                      run: ProgramRun, path: bool = True) -> Timeline:
    """:func:`_timeline` of a columnar run (:mod:`schedsim.sim.waves_columns`): the span columns from the
    Program's columns and interned tables (no per-op objects but the ids and tag references). ``path`` False: no
    critical path (:func:`simulate`'s ``makespan_only``)."""
    N = prog.N
    tps, tmpl = run.tps, run.tmpl  # not the run: its loop buffers are not held by the columns' functions
    res_code = np.array([0, 1, 2, 2, 2], np.int32)[run.res] if N else np.zeros(0, np.int32)
    names = OpNames(prog)  # the timeline holds these, not the Program (its edges and other columns)
    cols = SpanColumns(  # names, ids and tags stay coded (a pipeline's lazy runs unmade) until read
        names.ids, lambda: names.op_names(np.arange(N)), prog.rank.astype(np.int64),
        categorical(prog.streams, prog.stream_id), categorical(*_kind_codes(run)),
        categorical(("compute", "comm", "copy"), res_code), run.start, run.end, run.work, run.ready_t,
        _per_template(tps, tmpl, "nbytes"), _per_template(tps, tmpl, "flops"),  # made on first read
        None, run.stream_t, coded_ids=(prog.name_table, prog.name_id), coded_tags=names.tag_columns,
        name_parts=names.name_parts)
    at = np.zeros(0, np.int64)
    if N and path:  # from the latest end (lowest index among ties) back along the bindings, in C (_cwaves.walk):
        # the ops on the way but a rendezvous peer standing for its group's op, as _timeline's walk takes them
        out = np.empty(N, np.int32)
        n = compiled_loop().walk(run.binding, run.ogrp, int(np.argmax(run.end)), out)
        at = out[:n][::-1].astype(np.int64)
        del out
    meta = {"pipeline": dict(info["pipeline"])} if "pipeline" in info else {}
    # per-op host calls, not for a pipeline block (its op names are made on demand; _timeline does the same)
    _host_meta(meta, run.host_s, mode, None if "pipeline" in info else run.host_call, names.ids)
    if run.host_waits is not None:
        host_wait_meta(meta, names.ids, run.host_waits[0], prog.rank, *run.host_waits[1:])
    tl = Timeline(schedule=str(info.get("name", "")), source="predict", world_size=prog.world_size, launch=mode,
                  profile=profile.name, meta=meta, columns=cols)
    if path:
        tl.set_path_rows(names, at)  # in path order (critical_rows() sorts them); ids made where read
    tl.host_call_end_s = run.host_call
    return tl


def _per_template(tps: list[Op], tmpl: np.ndarray, field: str) -> Callable[[], np.ndarray]:
    """A function giving each op's ``field`` of its template class ``tps[tmpl[i]]`` (float64, shape (N,); a
    read-only broadcast where every op has one value, :func:`~schedsim.sim.waves_columns._per_op`): the timeline's
    ``bytes`` and ``flops``, made when first read (by the outputs, after the metrics)."""
    return lambda: _per_op(np.array([getattr(t, field) for t in tps], np.float64), tmpl)


def _kind_codes(run: ProgramRun) -> tuple[tuple[str, ...], np.ndarray]:
    """``(kinds, codes)``: the op kinds of a columnar run and each op's index into them, from its template
    classes (:func:`schedsim.sim.waves_columns.template_classes`; ``Program.kind`` reads every template)."""
    kinds = [t.kind for t in run.tps]
    values = tuple(dict.fromkeys(kinds))
    return values, np.array([values.index(k) for k in kinds], np.int32)[run.tmpl] if len(run.tmpl) else \
        np.zeros(0, np.int32)
