"""Run one rank's ops of a schedule, iteration by iteration, and time them.

Issue model
-----------
Three runners share the setup and the phases (:class:`RankRunner`) and differ in how one
iteration is issued: :class:`CpuRunner`, :class:`CudaRunner` (eager) and
:class:`CudaGraphRunner`; ``RankRunner(...)`` returns the one for the context.

* **CUDA (NCCL).** One CUDA stream per schedule stream. The host walks the
  rank's ops in program order; for each op it switches to the op's stream,
  makes it wait (``wait_event``) on the end events of dependencies that live on
  other streams (same-stream order is the stream's own FIFO), records a start
  event, pushes an NVTX range named like the op, launches, pops and records an
  end event. The host never blocks inside an iteration.
* **CUDA graph** (``--cuda-graph``). After the eager warm-up, the iteration is
  captured once: every schedule stream forks from the capture stream and joins
  it at the end. Per-op timing inside the graph uses *external* timing events
  (``torch.cuda.Event(external=True)``, i.e. ``cudaEventRecordExternal`` nodes),
  which CUDA replays as real event records; dependencies use separate internal
  events. If the build cannot time external events, only the whole replay is
  timed (``meta.timing`` says which). NVTX ranges are host-side, so they show
  the capture, not the replays.
* **CUDA graphs beside eager ops** (ops with ``graph:``, :mod:`schedsim.lower.graphs`). After the eager warm-up,
  each segment (consecutive ops of one graph name) is captured on its first op's stream, its other streams forked
  from and joined to it, and the eager iteration replays it at its first op's place; the segment's dependencies
  on ops outside it are waited for on that stream before the replay. Every op of a segment is timed as the whole
  replay (:class:`CudaSegmentRunner`). A capture that fails leaves the ops eager (logged). On CPU ranks they run
  eagerly (logged).
* **CPU (gloo).** There are no streams. One host thread issues the ops in
  program order: compute and copies run inline; collectives and send/recv are
  started asynchronously (gloo runs them on its own threads) and finish in the
  background, their end time taken by a completion callback. Before an op
  starts, the host waits for its dependencies and for the previous op of its
  stream. So communication overlaps later compute as on a GPU, but a waiting op
  blocks the issue of everything after it (there are no per-stream queues).

Timing
------
Warm-up iterations, then ``iters`` timed iterations (CUDA events around every
op, or ``perf_counter_ns`` on CPU), then as many *uninstrumented* iterations
through the lean hot path (:mod:`executor.lean`: the rank's ops compiled into a
flat list of prepared calls; only the anchor and each stream's last event are
recorded), after a warm-up of that loop (:func:`lean_warmup`), to measure the makespan without the
instrumentation, then optionally
profiled and checked iterations. Each iteration starts at one instant on every rank, then
anchors (:class:`executor.clock.IterationClock`, shared with the hand-written references);
:mod:`executor.timing` explains the time base.

Timeouts
--------
Every wait has a deadline of ``--timeout`` seconds from the op's issue. When
it passes, the waiting rank reads the other ranks' progress (published by
:class:`executor.dist.ArrivalTracker`) and raises
:class:`executor.ExecTimeout` naming the op and the ranks of its group that had
not reached it.
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from executor import ExecError, ExecTimeout
from executor.clock import IterationClock, thread_run_times, threads_between, threads_snapshot_at, wait_events
from executor.dist import ArrivalTracker, DistContext, issuer_alone, on_issuing_thread
from executor.kernels import Binding, Materializer, OpImpl
from executor.lean import BatchedP2P, compile_cpu, compile_cuda, p2p_batches, run_cpu, tf32_plan
from executor.streams import ANCHOR, cuda_streams
from schedsim._gc import frozen_gc
from schedsim.graph.ops import Op
from schedsim.kinds import COMM_KINDS, P2P_KINDS

__all__ = ["RunOptions", "lean_warmup", "RankRunner", "CpuRunner", "CudaRunner", "CudaSegmentRunner", "CudaGraphRunner",
           "graph_runs", "nvtx_fns"]

_COMM_KINDS = COMM_KINDS  # read from the registry at each use (kinds registered after import too)


@dataclass
class RunOptions:
    """Options of ``schedsim execute`` that the runtime uses.

    Attributes
    ----------
    iters : int
        Timed iterations (the median is kept per op).
    warmup : int
        Untimed iterations first (NCCL communicator setup, cuBLAS heuristics, caches).
    lean_iters : int
        Uninstrumented iterations timed as a whole (0 to skip), after :func:`lean_warmup` untimed ones of the
        same loop.
    timeout_s : float
        Deadline of every wait, seconds from the op's issue.
    cuda_graph : bool
        Capture one iteration and replay it.
    profiler : bool
        Run two more iterations under torch.profiler (Kineto).
    check : bool
        Real data through ``--check`` bindings, verified after the run.
    nvtx : bool
        NVTX range per op (CUDA only).
    measure_host : bool
        After the run, measure the host cost per call by kind in this process
        (:func:`executor.calibrate_host.host_costs` on rank 0, :func:`~executor.calibrate_host.comm_host_costs`
        on every rank).
    host_call_iters : int
        Uninstrumented eager CUDA iterations, after the lean ones, whose issue loop also reads the host clock
        after each op's call (``meta.host_call_end_s``: when each op's call returned, the median over these
        iterations; a ``perf_counter_ns`` per op, about 0.1 µs). Not part of any makespan. 0 to skip.
    """

    iters: int = 20
    warmup: int = 5
    lean_iters: int = -1
    timeout_s: float = 300.0
    cuda_graph: bool = False
    profiler: bool = False
    check: bool = False
    nvtx: bool = True
    seed: int = 0
    measure_host: bool = False
    host_call_iters: int = 5


def _lean_timed(o: RunOptions) -> int:
    """Uninstrumented iterations timed: ``o.lean_iters``, or ``o.iters`` where it is negative."""
    return o.iters if o.lean_iters < 0 else o.lean_iters


def lean_warmup(o: RunOptions) -> int:
    """Untimed uninstrumented iterations run before the timed ones: ``o.warmup`` (none when no uninstrumented
    iteration is timed).

    The hand-written references time their loop after ``--warmup`` iterations of the very same loop
    (``benchmarks/accuracy/handwritten/harness.py``); the executor's uninstrumented loop (a compiled step list,
    :mod:`executor.lean`) first runs after the instrumented iterations, whose per-op Python path it does not
    share. Without a warm-up of its own, the first uninstrumented iteration of the H100 runs was the slowest:
    median +3.7 % over the next five in 47 eager processes (+5.3 % in the host-bound ones,
    the second +1.8 %), where the references' first timed iteration read −0.1 % (39 processes;
    docs/validation.md, "One GPU: what the executor's process does that a hand-written one does not").

    >>> lean_warmup(RunOptions(warmup=5, lean_iters=0)), lean_warmup(RunOptions(warmup=3))
    (0, 3)
    """
    return max(0, o.warmup) if _lean_timed(o) > 0 else 0


def nvtx_fns() -> tuple[Callable[[str], Any], Callable[[], Any], str]:
    """NVTX push/pop: the ``nvtx`` package when importable, else ``torch.cuda.nvtx``."""
    try:
        import nvtx

        push, pop = nvtx.push_range, nvtx.pop_range
        return (lambda m: push(message=m, domain="schedsim")), (lambda: pop(domain="schedsim")), \
            "nvtx package (domain schedsim)"
    except Exception:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop, "torch.cuda.nvtx"


def _noop() -> None:
    return None


class _Flag:
    """CPU arrival marker: set when the host issues the op."""

    __slots__ = ("v",)

    def __init__(self) -> None:
        self.v = False

    def query(self) -> bool:
        return self.v


@dataclass
class _Times:
    anchors_ns: list[int] = field(default_factory=list)
    start_s: list[list[float]] = field(default_factory=list)
    end_s: list[list[float]] = field(default_factory=list)
    lean: list[list[float]] = field(default_factory=list)
    issue_s: list[float] = field(default_factory=list)  # host seconds to issue each timed iteration (eager CUDA)
    lean_issue_s: list[float] = field(default_factory=list)  # the same for each uninstrumented iteration
    host_call_end_s: list[list[float]] = field(default_factory=list)  # per stamped iteration, per op (eager CUDA)
    lean_host: list[list[Any]] = field(default_factory=list)  # per uninstrumented iteration: executor.clock.HOST_FIELDS
    lean_threads: list[list[Any]] = field(default_factory=list)  # each thread's run time over them (threads_between)


class RankRunner:
    """Runs this rank's ops of ``G``: the setup and the phases shared by every device.

    ``RankRunner(...)`` builds the runner for the context: :class:`CpuRunner` on CPU ranks,
    :class:`CudaRunner` for eager CUDA, :class:`CudaGraphRunner` with ``opts.cuda_graph`` on CUDA.
    A subclass supplies one iteration of each kind (``_one``, ``_lean``, ``_profile_one``).

    Parameters
    ----------
    G : networkx.DiGraph
        The schedule's DAG.
    ctx : DistContext
    opts : RunOptions
    bindings : dict, optional
        op name → :class:`executor.kernels.Binding` (``--check``).
    log : callable
        Progress printer (rank 0 prints, others pass a no-op).
    """

    def __new__(cls, G: Any, ctx: DistContext, opts: RunOptions, *args: Any, **kwargs: Any) -> RankRunner:
        if cls is RankRunner:
            if not ctx.cuda:
                cls = CpuRunner
            elif opts.cuda_graph:
                cls = CudaGraphRunner
            else:  # ops with `graph:` are captured per segment (CudaSegmentRunner)
                cls = CudaSegmentRunner if any(G.nodes[n]["op"].graph for n in G.nodes) else CudaRunner
        return super().__new__(cls)

    def __init__(self, G: Any, ctx: DistContext, opts: RunOptions, bindings: dict[str, Binding] | None = None,
                 log: Callable[[str], None] = lambda s: None) -> None:
        import torch

        self.torch = torch
        self.G = G
        self.ctx = ctx
        self.opts = opts
        self.log = log
        rank = ctx.rank
        self.ops: list[Op] = sorted((G.nodes[n]["op"] for n in G.nodes if G.nodes[n]["op"].rank == rank),
                                    key=lambda o: o.seq)
        self.ids = [o.id for o in self.ops]
        graphed = sum(1 for o in self.ops if o.graph is not None)
        if graphed and not ctx.cuda:  # ops with `graph:` (schedsim.lower.graphs): launched one by one, and said so
            log(f"note: {graphed} ops of rank {rank} name a CUDA graph (graph:); they run eagerly (CPU ranks have no "
                "CUDA graphs), so their measured host time is one call per op, where the prediction has one graph "
                "launch per segment")
        self.prev_same, self.cross, self.waits, self.last_on_stream = stream_waits(self.ops)
        self.stream_names = list(dict.fromkeys(o.stream for o in self.ops))
        self.needs_dep_event = [False] * len(self.ops)
        for lst in self.cross:
            for d in lst:
                self.needs_dep_event[d] = True
        self._host_syncs()
        self.comm_idx = [i for i, o in enumerate(self.ops) if o.kind in _COMM_KINDS]
        # every rank's comm-op positions, to tell who has not arrived on a timeout
        per_rank: dict[int, list[str]] = {}
        for n in G.nodes:
            op = G.nodes[n]["op"]
            if op.kind in _COMM_KINDS:
                per_rank.setdefault(op.rank, []).append((op.seq, op.name))  # type: ignore[arg-type]
        self.comm_pos = {(r, name): k for r, lst in per_rank.items()
                         for k, (_s, name) in enumerate(sorted(lst))}
        self.peers: dict[str, list[int]] = {}
        from schedsim.graph.info import GraphInfo

        info = GraphInfo.of(G)
        for members in info.collectives.values():
            ranks = [G.nodes[m]["op"].rank for m in members]
            for m in members:
                if G.nodes[m]["op"].rank == rank:
                    self.peers[G.nodes[m]["op"].name] = [r for r in ranks if r != rank]
        for a, b in info.p2p:
            oa, ob = G.nodes[a]["op"], G.nodes[b]["op"]
            if oa.rank == rank:
                self.peers[oa.name] = [ob.rank]
            if ob.rank == rank:
                self.peers[ob.name] = [oa.rank]

        self.mat = Materializer(ctx, seed=opts.seed)
        bindings = bindings or {}
        self.impls: list[OpImpl] = [self.mat.make(o, bindings.get(o.name)) for o in self.ops]
        self.batches = p2p_batches(self.ops)
        self.p2p_comm_of: dict[str, tuple[int, ...]] = G.graph.get("p2p_comm_of") or {}
        self._bind_batches()
        self.lean_cuda: list[Callable[[], Any]] | None = None
        self.lean_owner: list[int] = []  # op index of each lean step (compile_cuda's owners)
        self.lean_tf32: bool | None = None
        self.lean_cpu: list[Any] | None = None
        self.tracker = ArrivalTracker(ctx.store, rank) if ctx.world > 1 else None
        self.clock = IterationClock(ctx.device, ctx.world, ctx.ctrl) if not ctx.cuda else None
        self.iteration = -opts.warmup
        self.phase = "warm-up"
        self.times = _Times()
        self.last_issue_s: float | None = None  # set by an eager CUDA iteration: its host issue loop's seconds
        self.timing_mode = "cuda_events" if ctx.cuda else "host_perf_counter"
        self.profile_iters = 2
        self.prof_trace: Any = None
        self.host_costs: dict[str, float] | None = None  # --measure-host: measure_here after the timed iterations

    def _host_syncs(self) -> None:
        """Rule host-wait's host synchronisations (:func:`host_syncs`): a CPU rank's issue waits for the awaited
        ops as for dependencies; a CUDA rank records an event after the ops an ``Event.synchronize()`` names."""
        self.host_syncs = host_syncs(self.ops, self.waits)
        for i, hs in enumerate(self.host_syncs):
            if hs is not None:
                self.waits[i] = sorted(set(self.waits[i]) | set(hs[1]))
                if hs[0] == "ops":
                    for d in hs[1]:
                        self.needs_dep_event[d] = True

    def _bind_batches(self) -> None:
        """Turn each ``p2p: batched`` group into one ``batch_isend_irecv`` (see :mod:`executor.lean`).

        The first member posts the whole group, after every dependency of every member (so its
        stream waits on the others' cross-stream dependencies and on their streams' previous ops);
        each member then makes its own stream wait for the group's works (CUDA), or completes with
        them (gloo).
        """
        cuda = self.ctx.cuda
        for members in self.batches:
            first = members[0]
            ranks, group = self.p2p_group(first)
            bp = BatchedP2P([self.impls[m].p2p for m in members], group)  # type: ignore[misc]
            mset = set(members)
            names = ", ".join(self.ops[m].name for m in members)
            pre = sorted({d for m in members for d in self.waits[m] if d not in mset})
            fs = self.ops[first].stream
            self.waits[first] = pre
            self.cross[first] = [d for d in pre if self.ops[d].stream != fs]
            for d in self.cross[first]:
                self.needs_dep_event[d] = True
            for k, m in enumerate(members):
                impl = self.impls[m]
                if k:
                    # CPU: the host waits for the group, as Megatron's _communicate does (req.wait())
                    self.waits[m] = [] if cuda else [first]
                    self.cross[m] = []
                if cuda:
                    impl.run = (lambda bp=bp: (bp.issue(), bp.wait_current())) if k == 0 else bp.wait_current
                else:
                    impl.run = bp.issue if k == 0 else _noop
                    impl.is_async = k == 0
                impl.fast = None
                impl.note = f"batch_isend_irecv [{names}] on group {list(ranks)}" + (
                    " (posted here)" if k == 0 else " (posted by " + self.ops[first].name + ")")

    def p2p_group(self, i: int) -> tuple[tuple[int, ...], Any]:
        """``(ranks, process group)`` that send/recv ``i`` (an index into this rank's ops) is issued on: the one
        ``execute`` created for it (``G.graph["p2p_comm_of"]``: its family's communicator or its written
        ``group:``; the process group None where that is the world), else the default group."""
        ranks = self.p2p_comm_of.get(self.ops[i].id)
        if ranks is None:
            return tuple(range(self.ctx.world)), None
        return tuple(ranks), self.ctx.groups.get(tuple(ranks))

    def p2p_groups_used(self) -> dict[str, list[int]]:
        """Per send/recv of this rank (op id), the ranks of the process group it was issued on, read back from
        torch (``get_process_group_ranks``; the world for the default group): what the run's ``meta`` records."""
        import torch.distributed as dist

        out: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            if op.kind in P2P_KINDS:
                _ranks, g = self.p2p_group(i)
                out[op.id] = sorted(dist.get_process_group_ranks(g)) if g is not None else list(range(self.ctx.world))
        return out

    # -- helpers ---------------------------------------------------------------
    def _timeout(self, i: int, waited_s: float) -> None:
        op = self.ops[i]
        missing: list[int] = []
        where = []
        peers = self.peers.get(op.name, [])
        if self.tracker is not None and peers:
            self.tracker.flush()
            prog = self.tracker.read(peers)
            for r in peers:
                p = prog.get(r)
                pos = self.comm_pos.get((r, op.name), 0)
                if p is None:
                    missing.append(r)
                    where.append(f"rank {r}: no progress report")
                    continue
                it, idx, cur = p
                if it == self.iteration and idx < 0:
                    where.append(f"rank {r}: progress not observable in {self.phase} iterations")
                    continue
                arrived = it > self.iteration or (it == self.iteration and idx > pos)
                if not arrived:
                    missing.append(r)
                    itxt = "not yet in this iteration" if it < self.iteration else f"{idx} of its comm ops reached"
                    where.append(f"rank {r}: {itxt}" + (f", host at op {cur!r}" if cur else ""))
        it_txt = f"{self.phase} iteration {self.iteration}"
        head = (f"timeout after {waited_s:.1f} s: {op.kind} {op.name!r} ({op.id}) did not complete on rank "
                f"{self.ctx.rank} ({it_txt})")
        if peers:
            grp = sorted(peers + [self.ctx.rank])
            if missing:
                head += f"; rank(s) {missing} of its group {grp} did not arrive"
            elif self.tracker is not None:
                head += f"; every rank of its group {grp} arrived (a hang inside the transfer?)"
        if where:
            head += "\n  " + "\n  ".join(where)
        head += "\n  fix: check that every rank reaches this op (deps, durations), or raise --timeout"
        raise ExecTimeout(head, op.id, missing)

    # -- one iteration of each kind (per device) ---------------------------------------
    def _one(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
        """One instrumented iteration: ``(anchor_ns, per-op start_s, per-op end_s)``."""
        raise NotImplementedError

    def _lean(self) -> tuple[int, float]:
        """One uninstrumented iteration: ``(anchor_ns, end_s)``."""
        raise NotImplementedError

    def _profile_one(self) -> None:
        """One iteration under torch.profiler."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """After the warm-up, before the timed iterations (CUDA graphs are captured here)."""
        if self.opts.cuda_graph:
            raise ExecError("--cuda-graph needs CUDA\n  fix: drop --cuda-graph on CPU ranks")

    def _sync(self) -> None:
        """Wait for the device (CUDA); nothing on CPU ranks."""

    def _timed(self, o: RunOptions) -> None:
        """The instrumented, then the uninstrumented (lean) iterations."""
        self.phase = "timed"
        for k in range(o.iters):
            self.iteration = k
            self.last_issue_s = None
            a, st, en = self._one(record=True)
            if self.last_issue_s is not None:
                self.times.issue_s.append(self.last_issue_s)
            self.times.anchors_ns.append(a)
            self.times.start_s.append(st)
            self.times.end_s.append(en)
            if (k + 1) % max(1, o.iters // 4) == 0 or k + 1 == o.iters:
                self.log(f"  timed iteration {k + 1}/{o.iters}")
        lean = _lean_timed(o)
        warm = lean_warmup(o)
        self.phase = "uninstrumented"
        threads0: dict[int, Any] = {}
        snap = threads_snapshot_at(warm)
        for k in range(warm + lean):
            if k == snap:  # every thread of the process over the timed uninstrumented iterations (executor.clock),
                threads0 = thread_run_times()  # an untimed iteration after the snapshot where there is one
            self.iteration = o.iters + k
            self.last_issue_s = None
            got = self._lean()
            if k < warm:  # the loop's own warm-up: untimed, as a hand-written script's warm-up iterations
                continue
            if self.clock is not None:
                self.times.lean_host.append(self.clock.host_row())
            self.times.lean.append(list(got))
            if self.last_issue_s is not None:
                self.times.lean_issue_s.append(self.last_issue_s)
        if lean:
            self.times.lean_threads = threads_between(threads0, thread_run_times(), threading.get_native_id())
        for k in range(self._host_call_iters(o)):
            self.iteration = o.iters + warm + lean + k
            self.times.host_call_end_s.append(self._lean_stamped())

    def _host_call_iters(self, o: RunOptions) -> int:
        """How many stamped iterations (:attr:`RunOptions.host_call_iters`) this runner runs: none but eager
        CUDA's (every rank runs the same count: the aligned start of each iteration needs all of them)."""
        return 0

    def _lean_stamped(self) -> list[float]:
        raise NotImplementedError

    # -- phases ------------------------------------------------------------------
    def run(self) -> _Times:
        """Warm up, (capture), time, time uninstrumented, profile and check; returns the timed data.

        Every phase that issues ops runs on one thread of its own (:func:`executor.dist.on_issuing_thread`; the
        caller waits): its Python stack starts fresh, as a script's does, so that PyTorch's NCCL Flight Recorder,
        which gathers the calling thread's stack on every collective, costs what it costs a script (the lean loop's
        collective is called 7 frames deep there, from ~26 on the CLI's thread). Its exceptions reach the caller
        unchanged.

        Raises
        ------
        ExecTimeout, ExecError
        """
        return on_issuing_thread(self._phases, self.ctx.device if self.ctx.cuda else None)

    def _phases(self) -> _Times:
        """:meth:`run`'s phases, on the issuing thread."""
        o = self.opts
        self.phase = "warm-up"
        for k in range(o.warmup):
            self.iteration = -o.warmup + k
            self._one(record=False)
        self._prepare()
        # the executor holds the spec, the DAG and the prediction, a hand-written script does not: out of the
        # collector's reach, collections out of the timed loops; SCHEDSIM_PIN_ISSUER=1: this thread on a CPU of its own
        with frozen_gc(), issuer_alone():
            self._timed(o)
        base = o.iters + lean_warmup(o) + _lean_timed(o) + self._host_call_iters(o)
        if o.measure_host:  # before the profiler: once torch.profiler has run, the process's launches cost more
            # (~20 % more per call: benchmarks/probes/host/call_patterns.py --only after_profiler;
            # docs/validation.md, "Evidence cited by the code")
            from executor.calibrate_host import measure_here

            self.phase = "host costs"
            with frozen_gc():  # the collector of the timed loops, whose host costs these are
                self.host_costs = measure_here(self.ctx)
        if o.profiler:
            self.phase = "profiled"
            self.prof_trace = self._profile(base)
            base += self.profile_iters
        if o.check:
            self.phase = "check"
            self.iteration = base
            self._one(record=False)
            self._sync()
        return self.times

    def _profile(self, base: int) -> Any:
        from torch.profiler import ProfilerActivity, profile, record_function

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.ctx.cuda else [])
        with profile(activities=acts) as prof:
            for k in range(self.profile_iters):
                self.iteration = base + k
                with record_function(f"schedsim_iter{k}"):
                    self._profile_one()
            self._sync()
        return prof

    def times_dict(self) -> dict[str, Any]:
        """What this rank sends to rank 0 (see :data:`executor.timing.RankTimes`)."""
        t = self.times
        return {"rank": self.ctx.rank, "ids": self.ids, "anchors_ns": t.anchors_ns, "start_s": t.start_s,
                "end_s": t.end_s, "lean": t.lean, "issue_s": t.issue_s, "lean_issue_s": t.lean_issue_s,
                "host_call_end_s": t.host_call_end_s, "lean_host": t.lean_host, "lean_threads": t.lean_threads,
                "late_starts": self.clock.late_starts if self.clock is not None else 0}

    def notes(self) -> dict[str, str]:
        return {impl.op.name: impl.note for impl in self.impls}

    def close(self) -> None:
        """Stop the progress thread and drop the compiled step lists."""
        if self.tracker is not None:
            self.tracker.stop()
        self.lean_cuda = self.lean_cpu = None


class CpuRunner(RankRunner):
    """CPU ranks (gloo): one host thread issues the ops in program order (see the module docstring)."""

    def _on_complete(self, work: Any, i: int, end: list[int], done: list[Any], err: list[Any]) -> None:
        ev = done[i]

        def finish(exc: BaseException | None) -> None:
            end[i] = time.perf_counter_ns()
            err[i] = exc
            ev.set()

        if work is None:
            finish(None)
            return
        try:
            fut = work.get_future()
        except Exception:
            fut = None
        if fut is not None:
            def cb(f: Any) -> None:
                try:
                    f.value()
                    finish(None)
                except BaseException as e:
                    finish(e)

            fut.then(cb)
            return

        def waiter() -> None:
            try:
                work.wait()
                finish(None)
            except BaseException as e:
                finish(e)

        threading.Thread(target=waiter, daemon=True).start()

    def _iter_cpu(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
        n = len(self.ops)
        done: list[Any] = [None] * n
        start = [0] * n
        end = [0] * n
        err: list[Any] = [None] * n
        markers = {i: _Flag() for i in self.comm_idx}
        if self.tracker is not None:
            self.tracker.begin(self.iteration, [markers[i] for i in self.comm_idx])
        timeout_ns = int(self.opts.timeout_s * 1e9)
        rf = None
        if profile:
            from torch.profiler import record_function as rf  # type: ignore[no-redef]
        anchor = self.clock.start()  # type: ignore[union-attr]
        t0 = time.perf_counter_ns()

        def wait_for(d: int) -> None:
            ev = done[d]
            if ev is not None and not ev.is_set():
                left = (start[d] + timeout_ns - time.perf_counter_ns()) * 1e-9
                if left <= 0 or not ev.wait(left):
                    self._timeout(d, (time.perf_counter_ns() - start[d]) * 1e-9)
            if err[d] is not None:
                raise ExecError(f"op {self.ids[d]} failed: {err[d].__class__.__name__}: {err[d]}")

        for i in range(n):
            for d in self.waits[i]:
                wait_for(d)
            impl = self.impls[i]
            if self.tracker is not None:
                self.tracker.current = impl.op.name
            ctxm = rf(impl.op.name) if rf is not None else None
            if ctxm is not None:
                ctxm.__enter__()
            start[i] = time.perf_counter_ns()
            if impl.is_async:
                done[i] = threading.Event()
                if i in markers:
                    markers[i].v = True
                self._on_complete(impl.run(), i, end, done, err)
            else:
                if i in markers:
                    markers[i].v = True
                impl.run()
                end[i] = time.perf_counter_ns()
            if ctxm is not None:
                ctxm.__exit__(None, None, None)
        for i in range(n):
            wait_for(i)
        return anchor, [(s - t0) * 1e-9 for s in start], [(e - t0) * 1e-9 for e in end]

    def _iter_cpu_lean(self) -> tuple[int, float]:
        """One uninstrumented CPU iteration: the compiled step list (:func:`executor.lean.run_cpu`)."""
        import datetime

        if self.lean_cpu is None:
            self.lean_cpu = compile_cpu(self.impls, self.waits)
        if self.tracker is not None:
            self.tracker.begin(self.iteration, None)
        td = datetime.timedelta(seconds=self.opts.timeout_s)
        n = len(self.impls)
        anchor = self.clock.start()  # type: ignore[union-attr]
        t0 = time.perf_counter_ns()
        run_cpu(self.lean_cpu, n, td)
        return anchor, (time.perf_counter_ns() - t0) * 1e-9

    def _one(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
        return self._iter_cpu(record, profile)

    def _lean(self) -> tuple[int, float]:
        return self._iter_cpu_lean()

    def _profile_one(self) -> None:
        self._iter_cpu(True, profile=True)


class CudaRunner(RankRunner):
    """Eager CUDA: one stream per schedule stream, events for cross-stream dependencies and timing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_cuda()

    def _init_cuda(self) -> None:
        torch = self.torch
        dev = self.ctx.device
        self.streams, note = cuda_streams(torch, dev, [*self.stream_names, ANCHOR])
        if note:
            self.log(note)
        self.anchor_stream = self.streams.pop(ANCHOR)
        self.stream_list = [self.streams[o.stream] for o in self.ops]
        self.clock = IterationClock(dev, self.ctx.world, self.ctx.ctrl, anchor_stream=self.anchor_stream)
        n = len(self.ops)
        ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self.ev_start = [ev() for _ in range(n)]
        self.ev_end = [ev() for _ in range(n)]
        self.ev_anchor = self.clock.anchor
        self.ev_stream_end = {s: ev() for s in self.stream_names}
        self.ev_dep = [torch.cuda.Event() if self.needs_dep_event[i] else None for i in range(n)]
        push, pop, how = nvtx_fns()
        self.nvtx_push, self.nvtx_pop, self.nvtx_how = push, pop, how
        self.graph: Any = None
        self.lean_graph: Any = None

    def _issue_cuda(self, timed: bool, profile: bool = False, capture: bool = False,
                    ev_start: list[Any] | None = None, ev_end: list[Any] | None = None) -> None:
        torch = self.torch
        ev_start = ev_start if ev_start is not None else self.ev_start
        ev_end = ev_end if ev_end is not None else self.ev_end
        ev_dep = self.ev_dep
        push, pop = self.nvtx_push, self.nvtx_pop
        use_nvtx = timed and self.opts.nvtx and not capture
        rf = None
        if profile:
            from torch.profiler import record_function as rf  # type: ignore[no-redef]
        set_stream = torch.cuda.set_stream
        cur = None
        syncs = getattr(self, "host_syncs", None)  # None: a runner built without __init__ (a test's)
        for i, impl in enumerate(self.impls):
            if syncs is not None and syncs[i] is not None and not capture:  # rule host-wait (not in a capture)
                self._host_sync(i, ev_end if timed else ev_dep)
            s = self.stream_list[i]
            if s is not cur:
                set_stream(s)
                cur = s
            for d in self.cross[i]:
                dep = ev_dep[d] if (capture or not timed) else ev_end[d]
                s.wait_event(dep)
            if timed:
                ev_start[i].record(s)
            if use_nvtx:
                push(impl.op.name)
            if rf is not None:
                with rf(impl.op.name):
                    impl.run()
            else:
                impl.run()
            if use_nvtx:
                pop()
            if timed:
                ev_end[i].record(s)
            if ev_dep[i] is not None and (capture or not timed):
                ev_dep[i].record(s)
        if not timed and not capture:
            for name in self.last_on_stream:
                self.ev_stream_end[name].record(self.streams[name])

    def _host_sync(self, i: int, events: list[Any]) -> None:
        """The host synchronisation before op ``i`` (:func:`host_syncs`): ``torch.cuda.synchronize()``, the stream's
        ``synchronize()``, or ``synchronize()`` on the awaited ops' ``events``."""
        hs = self.host_syncs[i]
        assert hs is not None
        scope, awaited, stream = hs
        if scope == "device":
            self.torch.cuda.synchronize()
        elif scope == "stream":
            if stream in self.streams:
                self.streams[stream].synchronize()
        else:
            for d in awaited:
                events[d].synchronize()

    def _begin_cuda(self, observable: bool = True) -> int:
        """Aligned start and anchor (:class:`executor.clock.IterationClock`); every stream waits for the anchor."""
        if self.tracker is not None:
            self.tracker.begin(self.iteration, [self.ev_start[i] for i in self.comm_idx] if observable else None)
        return self.clock.start(self.streams.values())

    def _wait_cuda(self, events: list[tuple[int, Any]], issue_ns: int) -> None:
        """Wait until all ``events`` complete (:func:`executor.clock.wait_events`, the hand-written references'
        wait: spinning unless ``SCHEDSIM_WAIT=sleep``); on the deadline, name the stuck op."""
        deadline = issue_ns + int(self.opts.timeout_s * 1e9)
        if wait_events([e for _i, e in events], deadline):
            self._timeout(self._stuck_cuda(), (time.perf_counter_ns() - issue_ns) * 1e-9)

    def _stuck_cuda(self) -> int:
        """The op to blame: a comm op that started but did not end, else the first op not ended."""
        first = 0
        for i in range(len(self.ops)):
            if not self.ev_end[i].query():
                if self.ops[i].kind in _COMM_KINDS and self.ev_start[i].query():
                    return i
                first = first or i
        for i in self.comm_idx:
            if not self.ev_end[i].query():
                return i
        return first

    def _iter_cuda(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
        torch = self.torch
        anchor = self._begin_cuda()
        issue = time.perf_counter_ns()
        try:
            self._issue_cuda(timed=True, profile=profile)
        finally:
            torch.cuda.set_stream(torch.cuda.default_stream(self.ctx.device))
        self.last_issue_s = (time.perf_counter_ns() - issue) * 1e-9  # the host's issue of the timed ops
        self._wait_cuda([(i, self.ev_end[i]) for i in self.last_on_stream.values()], issue)
        ea = self.ev_anchor
        st = [ea.elapsed_time(e) * 1e-3 for e in self.ev_start]
        en = [ea.elapsed_time(e) * 1e-3 for e in self.ev_end]
        return anchor, st, en

    def _compile_lean(self) -> list[Any]:
        if self.lean_cuda is None:
            self.lean_owner = []
            syncs = {i: functools.partial(self._host_sync, i, self.ev_dep)
                     for i, hs in enumerate(getattr(self, "host_syncs", ())) if hs is not None}
            self.lean_cuda = compile_cuda(self.torch, self.impls, self.stream_list, self.cross, self.ev_dep,
                                          [(self.streams[s], self.ev_stream_end[s]) for s in self.last_on_stream],
                                          owners=self.lean_owner, replays=self._lean_replays(), syncs=syncs)
            self.lean_tf32 = tf32_plan(self.impls)
        return self.lean_cuda

    def _lean_replays(self) -> dict[int, tuple[list[int], Any]]:
        """Captured CUDA graph segments the compiled step list replays (:func:`executor.lean.compile_cuda`'s
        ``replays``): none here."""
        return {}

    def _lean_stamped(self) -> list[float]:
        """One uninstrumented iteration that reads the host clock after every step: per op, seconds from the
        start of the issue loop to its call's return (its last step: the call, or the event record after it)."""
        stamps = [0] * len(self._compile_lean())
        self._iter_cuda_lean(stamps)
        out = [0.0] * len(self.ops)
        for j, i in enumerate(self.lean_owner):
            if i >= 0:
                out[i] = stamps[j] * 1e-9
        return out

    def _iter_cuda_lean(self, stamps: list[int] | None = None) -> tuple[int, float]:
        """One uninstrumented iteration: ``(anchor_ns, end_s)``; with ``stamps`` (one per step), each step's
        return in ns from the start of the issue loop is written there (:meth:`_lean_stamped`)."""
        torch = self.torch
        steps = self._compile_lean()
        if self.lean_tf32 is not None:
            self.mat._set_tf32(self.lean_tf32)  # outside the timed region, as a script sets it at the top
        anchor = self._begin_cuda(observable=False)
        clock = time.perf_counter_ns
        issue = clock()
        try:
            if stamps is None:
                for f in steps:
                    f()
            else:
                for j, f in enumerate(steps):
                    f()
                    stamps[j] = clock() - issue
        finally:
            torch.cuda.set_stream(torch.cuda.default_stream(self.ctx.device))
        self.last_issue_s = (clock() - issue) * 1e-9  # the lean loop's issue, same clock
        evs = list(self.ev_stream_end.values())
        self._wait_cuda([(-1, e) for e in evs], issue)
        return anchor, max(self.ev_anchor.elapsed_time(e) * 1e-3 for e in evs)

    def _one(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
        return self._iter_cuda(record, profile)

    def _lean(self) -> tuple[int, float]:
        return self._iter_cuda_lean()

    def _host_call_iters(self, o: RunOptions) -> int:
        return max(0, o.host_call_iters)

    def _profile_one(self) -> None:
        self._iter_cuda(True, profile=True)

    def _prepare(self) -> None:
        pass

    def _sync(self) -> None:
        self.torch.cuda.synchronize(self.ctx.device)

    def close(self) -> None:
        """Also drop the captured graphs (with the NCCL work captured in them) and synchronize the device,
        so that process-group teardown finds no graph holding the communicators (ranks hung in
        ``destroy_process_group`` after CUDA-graph runs with captured NCCL calls)."""
        super().close()
        torch = self.torch
        torch.cuda.synchronize(self.ctx.device)
        for g in (self.graph, self.lean_graph):
            if g is not None:
                try:
                    g.reset()
                except Exception:
                    pass
        self.graph = self.lean_graph = None
        torch.cuda.synchronize(self.ctx.device)


def stream_waits(ops: list[Op]) -> tuple[list[int | None], list[list[int]], list[list[int]], dict[str, int]]:
    """What each of one rank's ``ops`` (program order) waits for, as indices into ``ops``: the previous op on its
    stream (None for the first), its dependencies on other streams (``cross``: what the CUDA issue waits for with
    an event), all of them with the previous op (``waits``: the CPU issue's), and the last op of each stream."""
    index = {o.name: i for i, o in enumerate(ops)}
    last: dict[str, int] = {}
    prev_same: list[int | None] = []
    cross: list[list[int]] = []
    waits: list[list[int]] = []
    for i, o in enumerate(ops):
        p = last.get(o.stream)
        prev_same.append(p)
        last[o.stream] = i
        deps = [index[d] for d in o.deps if d in index]
        cross.append([d for d in deps if ops[d].stream != o.stream])
        waits.append(sorted(set(deps + ([p] if p is not None else []))))
    return prev_same, cross, waits, last


def host_syncs(ops: list[Op], waits: list[list[int]]) -> list[tuple[str, list[int], str | None] | None]:
    """Per op of one rank's ``ops`` (program order), the host synchronisation before its call (rule host-wait's
    tags, :mod:`schedsim.sim.host_wait`), or None: ``(scope, awaited, stream)``, the scope ``device``
    (``torch.cuda.synchronize()``; awaited: the last op of each stream before it), ``stream`` (that stream's
    ``synchronize()``; its last op before it) or ``ops`` (``Event.synchronize()`` on the ops named, or without a
    scope tag on the op's predecessors ``waits[i]``, as :func:`stream_waits` gives them).

    >>> from schedsim.graph.ops import Op
    >>> a = Op(name="a", rank=0, kind="compute", stream="s1", seq=0, duration_s=1e-4)
    >>> b = Op(name="b", rank=0, kind="compute", stream="s2", seq=1, duration_s=1e-4,
    ...        tags=(("host_wait_before_us", 0.0), ("host_wait_scope", "device")))
    >>> host_syncs([a, b], [[], []])
    [None, ('device', [0], None)]
    """
    from schedsim.tags import HOST_WAIT_ON_TAG, HOST_WAIT_SCOPE_TAG, HOST_WAIT_TAG

    index = {o.name: i for i, o in enumerate(ops)}
    last: dict[str, int] = {}
    out: list[tuple[str, list[int], str | None] | None] = []
    for i, o in enumerate(ops):
        d = dict(o.tags) if o.tags else {}
        if HOST_WAIT_TAG not in d:
            out.append(None)
        else:
            scope, on = d.get(HOST_WAIT_SCOPE_TAG), d.get(HOST_WAIT_ON_TAG)
            if scope == "device":
                out.append(("device", sorted(last.values()), None))
            elif scope == "stream":
                out.append(("stream", [last[on]] if on in last else [], str(on)))
            elif scope == "ops":
                out.append(("ops", sorted(index[n] for n in str(on).split() if index.get(n, i) < i), None))
            else:
                out.append(("ops", list(waits[i]), None))
        last[o.stream] = i
    return out


def graph_runs(ops: list[Op]) -> list[list[int]]:
    """The CUDA graph segments of one rank's ``ops`` (program order): runs of consecutive ops with one ``graph``
    name, as indices into ``ops`` (:func:`schedsim.lower.graphs.graph_segments`' launches on one rank)."""
    runs: list[list[int]] = []
    for i, o in enumerate(ops):
        if o.graph is None:
            continue
        if runs and runs[-1][-1] == i - 1 and ops[i - 1].graph == o.graph:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


class CudaSegmentRunner(CudaRunner):
    """Eager CUDA with ops captured in CUDA graphs (their ``graph:``): each segment captured after the warm-up and
    replayed in the eager iteration (module docstring). Without a captured segment, :class:`CudaRunner`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.segments = graph_runs(self.ops)
        self.seg_graphs: dict[int, Any] = {}  # first op of a segment -> its CUDAGraph

    def _capture_segment(self, seg: list[int]) -> Any:
        """One segment as a CUDAGraph: captured on its first op's stream, the other streams forked and joined;
        dependencies inside the segment as events captured with it."""
        torch = self.torch
        inside = set(seg)
        cap = self.stream_list[seg[0]]
        side = list({id(self.stream_list[i]): self.stream_list[i] for i in seg if self.stream_list[i] is not cap}
                    .values())
        marks = {d: torch.cuda.Event() for i in seg for d in self.cross[i] if d in inside}
        torch.cuda.synchronize(self.ctx.device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=cap, capture_error_mode="thread_local"):
            for st in side:
                st.wait_stream(cap)
            for i in seg:
                st = self.stream_list[i]
                torch.cuda.set_stream(st)
                for d in self.cross[i]:
                    if d in inside:
                        st.wait_event(marks[d])
                self.impls[i].run()
                if i in marks:
                    marks[i].record(st)
            for st in side:
                cap.wait_stream(st)
            torch.cuda.set_stream(cap)
        torch.cuda.synchronize(self.ctx.device)
        return g

    def _prepare(self) -> None:
        if self.tracker is not None:
            self.tracker.pause(True)
        try:
            for seg in self.segments:
                self.seg_graphs[seg[0]] = self._capture_segment(seg)
            self.log(f"captured {len(self.segments)} CUDA graph segment(s) on rank {self.ctx.rank}; each op of a "
                     "segment is timed as the segment's whole replay")
        except Exception as e:
            self.log(f"capturing the CUDA graph segments failed ({e.__class__.__name__}: {e}); their ops run "
                     "eagerly, so their measured host time is one call per op")
            self.seg_graphs = {}
        finally:
            if self.tracker is not None:
                self.tracker.pause(False)
            self.torch.cuda.set_stream(self.torch.cuda.default_stream(self.ctx.device))

    def _issue_cuda(self, timed: bool, profile: bool = False, capture: bool = False,
                    ev_start: list[Any] | None = None, ev_end: list[Any] | None = None) -> None:
        """The eager issue with each captured segment replayed at its first op's place; uninstrumented, the
        compiled step list (:meth:`_compile_lean`, its one form)."""
        if not self.seg_graphs:
            super()._issue_cuda(timed, profile, capture, ev_start, ev_end)
            return
        if not timed:
            for f in self._compile_lean():
                f()
            return
        by_head = {seg[0]: seg for seg in self.segments}
        n, i = len(self.impls), 0
        while i < n:
            seg = by_head.get(i, [i])
            self._issue_step(seg)
            i = seg[-1] + 1

    def _issue_step(self, seg: list[int]) -> None:
        """Issue one eager op (``seg`` of one op not captured) or replay one segment, on its first op's stream:
        after what it waits for outside it and its other streams' earlier work, before their later work; its
        ops' timing events around it."""
        torch = self.torch
        starts, ends = self.ev_start, self.ev_end
        i = seg[0]
        inside = set(seg)
        st = self.stream_list[i]
        torch.cuda.set_stream(st)
        side = list({id(x): x for x in (self.stream_list[j] for j in seg) if x is not st}.values())
        for other in side:
            st.wait_stream(other)
        for j in seg:
            for d in self.cross[j]:
                if d not in inside:
                    st.wait_event(ends[d])
        for j in seg:
            starts[j].record(st)
        if i in self.seg_graphs:
            self.seg_graphs[i].replay()
        else:
            self.impls[i].run()
        for j in seg:
            ends[j].record(st)
        for other in side:
            other.wait_stream(st)

    def _lean_replays(self) -> dict[int, tuple[list[int], Any]]:
        """Each captured segment, one replay at its first op's place in the compiled step list: the uninstrumented
        iteration costs the host what a hand-written script's does."""
        return {seg[0]: (seg, self.seg_graphs[seg[0]]) for seg in self.segments if seg[0] in self.seg_graphs}

    def _host_call_iters(self, o: RunOptions) -> int:
        """None on every rank of a schedule with graph segments (this runner's): a rank whose ops hold no segment, or
        whose capture failed, runs as many as the ranks that replay theirs (each iteration's aligned start is an
        all-gather over every rank: a count that differs by rank pairs one rank's iteration with another's)."""
        return 0

    def times_dict(self) -> dict[str, Any]:
        """Also ``segments``: the op ids of each captured segment (each of its ops timed as the whole replay)."""
        d = super().times_dict()
        d["segments"] = [[self.ids[j] for j in seg] for seg in self.segments if seg[0] in self.seg_graphs]
        return d

    def close(self) -> None:
        for g in self.seg_graphs.values():
            try:
                g.reset()
            except Exception:
                pass
        self.seg_graphs = {}
        super().close()


class CudaGraphRunner(CudaRunner):
    """CUDA with ``--cuda-graph``: eager warm-up, then one captured iteration replayed (module docstring)."""

    def _capture(self, timed: bool) -> tuple[Any, list[Any] | None, list[Any] | None]:
        torch = self.torch
        n = len(self.ops)
        gs = ge = None
        if timed:
            gs = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n)]
            ge = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n)]
        cap = self.anchor_stream
        torch.cuda.synchronize(self.ctx.device)
        if self.tracker is not None:
            self.tracker.pause(True)
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, stream=cap, capture_error_mode="thread_local"):
                for s in self.streams.values():
                    s.wait_stream(cap)
                self._issue_cuda(timed=timed, capture=True, ev_start=gs, ev_end=ge)
                for s in self.streams.values():
                    cap.wait_stream(s)
                torch.cuda.set_stream(cap)
        finally:
            if self.tracker is not None:
                self.tracker.pause(False)
        torch.cuda.synchronize(self.ctx.device)
        return g, gs, ge

    def _prepare_graphs(self) -> None:
        try:
            self.graph, self.gs, self.ge = self._capture(timed=True)
            self.timing_mode = "cuda_graph_external_events"
        except Exception as e:
            self.log(f"per-op timing inside the CUDA graph failed ({e.__class__.__name__}: {e}); "
                     "timing whole replays only")
            self.graph, self.gs, self.ge = self._capture(timed=False)
            self.timing_mode = "cuda_graph_replay_total"
        if self.opts.lean_iters:
            self.lean_graph = self._capture(timed=False)[0]

    def _replay(self, g: Any) -> tuple[int, float]:
        torch = self.torch
        if self.tracker is not None:
            timed = g is self.graph and self.gs is not None
            self.tracker.begin(self.iteration, [self.gs[i] for i in self.comm_idx] if timed else None)
        cap = self.anchor_stream
        anchor = self.clock.start()  # anchored on cap, the stream the graph replays on
        issue = time.perf_counter_ns()
        torch.cuda.set_stream(cap)
        g.replay()
        torch.cuda.set_stream(torch.cuda.default_stream(self.ctx.device))
        end = self.ev_stream_end[self.stream_names[0]]
        end.record(cap)
        self._wait_cuda([(-1, end)], issue)
        return anchor, self.ev_anchor.elapsed_time(end) * 1e-3

    def _iter_graph(self) -> tuple[int, list[float], list[float]]:
        anchor, total = self._replay(self.graph)
        ea = self.ev_anchor
        n = len(self.ops)
        if self.gs is not None:
            try:
                st = [ea.elapsed_time(e) * 1e-3 for e in self.gs]
                en = [ea.elapsed_time(e) * 1e-3 for e in self.ge]  # type: ignore[union-attr]
                return anchor, st, en
            except Exception as e:
                self.log(f"reading external events failed ({e}); timing whole replays only")
                self.gs = self.ge = None
                self.timing_mode = "cuda_graph_replay_total"
        return anchor, [0.0] * n, [total] * n

    def _prepare(self) -> None:
        self._prepare_graphs()
        for _ in range(2):  # replay warm-up
            self._iter_graph()

    def _one(self, record: bool, profile: bool = False) -> tuple[int, list[float], list[float]]:
        if self.graph is not None:
            return self._iter_graph()
        return self._iter_cuda(record, profile)

    def _lean(self) -> tuple[int, float]:
        if self.lean_graph is not None:
            return self._replay(self.lean_graph)
        return self._iter_cuda_lean()

    def _host_call_iters(self, o: RunOptions) -> int:
        return 0  # a replay has no per-op host calls

    def _profile_one(self) -> None:
        self._iter_graph()
