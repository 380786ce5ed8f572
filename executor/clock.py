"""The start of every timed iteration: all ranks begin at one instant, from one anchor.

Shared, line for line, by ``schedsim execute`` (:mod:`executor.runtime`, every iteration kind:
instrumented, uninstrumented, CUDA-graph replay, CPU) and the hand-written PyTorch references
(``benchmarks/accuracy/handwritten/harness.py``), so that both time their program the same way and differ
only in what they issue. It imports torch lazily and nothing from schedsim.

Why an aligned start
--------------------
A makespan is measured from the earliest rank's anchor (:func:`executor.timing.lean_makespans`).
After a plain host barrier the ranks leave it at different times: the last rank to be told sleeps
in a socket read and wakes a scheduler tick or a CPU idle-state exit later. On 2 H200s
(torch 2.11, gloo barrier on one host) that skew was 50-400 µs and bimodal, and it
went straight into the makespan of every schedule whose first collective waits for the late rank:
``tp_allreduce_graph`` eager measured 0.33 ms in some iterations and 0.70 ms in others, for the
executor and the hand-written script alike. The simulator starts every rank at t = 0.

So :meth:`IterationClock.start`, after a device synchronize, all-gathers every rank's wall clock
(``time.time_ns``) over the host (gloo) group, which is also the barrier, and each rank then
*spins* until ``max(clocks) + margin``: no rank sleeps, and ranks on one host share the clock, so
they leave within about a microsecond. Across hosts the alignment error is the clock
synchronisation (NTP/PTP) error, as for the time base itself (:mod:`executor.timing`). A rank
that reaches the spin after the agreed instant starts at once and is counted in
:attr:`IterationClock.late_starts` (its lateness stays in the makespan, as before). So is a rank
whose agreed instant lies more than ``margin + 50 ms`` ahead (hosts whose clocks disagree by more
than that): it spins only that long, so a bad clock cannot stall every iteration.

Anchor
------
On CUDA an event is recorded on an idle *anchor stream* and synchronised (spinning), the wall
clock is read just after (``anchor_ns``), and every stream of the iteration waits for that event;
device times are ``anchor_event.elapsed_time(end_event)``. On CPU ranks the anchor is the wall
clock itself.

Host thread
-----------
Just before the anchor, :meth:`IterationClock.start` reads the issuing thread's scheduling counters
(:class:`HostThreadProbe`); :meth:`IterationClock.host_row` after the iteration's wait gives what happened to that
thread in between (:data:`HOST_FIELDS`: wall, run and run-queue time, context switches, the CPUs it was on). A
host-bound iteration that ran slow says there whether its thread was preempted, slept, or ran all along on a
slower CPU; both programs record it alike.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from time import perf_counter_ns as _perf_ns
from time import thread_time_ns as _thread_ns
from typing import Any

__all__ = ["HOST_FIELDS", "START_MARGIN_S", "WAIT", "HostThreadProbe", "IterationClock", "aligned_start_ns",
           "host_columns", "start_margin_s", "thread_run_times", "threads_between", "threads_snapshot_at",
           "wait_events"]

START_MARGIN_S = 0.002
"""Default seconds between the latest rank's clock read and the common start (:func:`start_margin_s`): 2 ms,
several times the all-gather's exit skew measured above, so late starts are rare."""


WAIT = os.environ.get("SCHEDSIM_WAIT", "spin")
"""How the host waits for an iteration's end events (env ``SCHEDSIM_WAIT``): ``spin`` (default) polls them
without sleeping, as ``torch.cuda.Event.synchronize`` does under CUDA's default scheduling (it spins while the
process has fewer CUDA contexts than CPU cores: ``cudaDeviceScheduleAuto``, CUDA Runtime API); ``sleep`` polls
with sleeps of 20 µs doubling to 1 ms between polls (the executor's former wait), kept to compare."""


def wait_events(events: Iterable[Any], deadline_ns: int | None = None, how: str | None = None) -> list[Any]:
    """Wait until every event of ``events`` (objects with ``query()``) has completed; return those still pending
    when ``perf_counter_ns()`` passed ``deadline_ns`` (empty when all completed; no deadline when None).

    The wait of ``schedsim execute`` (every CUDA iteration kind). ``how`` (default :data:`WAIT`): ``"spin"``
    polls without sleeping, as the hand-written references' ``Event.synchronize()`` spins, so that both leave an
    iteration alike and start the next one from an equally warm host; ``"sleep"`` sleeps between polls.

    >>> class Done:
    ...     def query(self): return True
    >>> wait_events([Done(), Done()])
    []
    """
    how = how or WAIT
    if how not in ("spin", "sleep"):
        from schedsim.errors import SchedsimError

        raise SchedsimError(f"SCHEDSIM_WAIT={how!r} is neither 'spin' nor 'sleep'",
                            fix="unset SCHEDSIM_WAIT (spin), or set it to sleep")
    pending = list(events)
    spin = how != "sleep"
    sleep = 2e-5
    clock = time.perf_counter_ns
    while pending:
        pending = [e for e in pending if not e.query()]
        if not pending or (deadline_ns is not None and clock() > deadline_ns):
            break
        if not spin:
            time.sleep(sleep)
            sleep = min(sleep * 2, 1e-3)
    return pending


def start_margin_s() -> float:
    """Seconds between the latest rank's clock read and the common start: ``SCHEDSIM_START_MARGIN_S`` (0 to 10 s),
    else :data:`START_MARGIN_S`.

    Raises
    ------
    SchedsimError
        The variable is not a number from 0 to 10.
    """
    from schedsim.io import env_number

    return float(env_number("SCHEDSIM_START_MARGIN_S", START_MARGIN_S, low=0.0, high=10.0))


def aligned_start_ns(clocks_ns: Iterable[int], margin_s: float | None = None) -> int:
    """The common start (ns, wall clock): the latest rank's clock read plus ``margin_s`` seconds
    (default :func:`start_margin_s`).

    >>> aligned_start_ns([1_000_000_000, 1_000_300_000], 0.002)
    1002300000
    """
    return max(int(c) for c in clocks_ns) + round((start_margin_s() if margin_s is None else margin_s) * 1e9)


HOST_FIELDS = ("wall_s", "run_s", "runq_s", "vcsw", "ivcsw", "cpu_start", "cpu_end")
"""What :class:`HostThreadProbe` gives per iteration, from before its anchor to after its wait, for the thread that
issues it: wall seconds; seconds it ran on a CPU (``time.thread_time``: ``CLOCK_THREAD_CPUTIME_ID`` brings the running
thread's sum up to date, where ``/proc/thread-self/schedstat`` field 1 lags by up to a scheduler tick while it
runs); seconds it waited runnable in a run queue (field 2: another thread had its CPU); voluntary
and involuntary context switches (``getrusage(RUSAGE_THREAD)``: it blocked; it was preempted); the CPU it was on at
the start and at the end (``/proc/thread-self/stat`` field 39). Linux ``proc(5)``, ``getrusage(2)``. Where wall
exceeds run + runq the thread slept or its virtual CPU was stolen by the hypervisor (which the guest's run
time leaves out under paravirtual steal accounting); where run is the wall and the iteration still ran slow, the
CPU itself ran slower (a busy SMT sibling, the clock)."""


def _cpu_of(stat: bytes) -> int:
    """The CPU a task last ran on, field 39 of its procfs ``stat`` (fields 3 on follow the last ``)``: the name may
    hold one). Raises ValueError or IndexError on another layout."""
    return int(stat.rsplit(b")", 1)[1].split()[36])


class HostThreadProbe:
    """The calling thread's scheduling counters (:data:`HOST_FIELDS`), read without allocating a file object:
    the two procfs files are opened once by the thread that creates the probe (``/proc/thread-self`` is that
    thread) and re-read with ``os.pread``; about 5-20 µs a read. Fields the system lacks are None.

    >>> p = HostThreadProbe(); a = p.read(); row = p.delta(a, p.read())
    >>> len(row) == len(HOST_FIELDS) and row[0] >= 0
    True
    """

    def __init__(self) -> None:
        import weakref

        self._fds: list[int | None] = []
        for name in ("schedstat", "stat"):
            try:
                self._fds.append(os.open(f"/proc/thread-self/{name}", os.O_RDONLY))
            except OSError:
                self._fds.append(None)
        self._closer = weakref.finalize(self, _close_fds, [fd for fd in self._fds if fd is not None])

    def _pread(self, k: int, n: int) -> bytes | None:
        fd = self._fds[k]
        if fd is None:
            return None
        try:
            return os.pread(fd, n, 0)
        except OSError:
            return None

    def read(self) -> tuple[int, int, int | None, int | None, int | None, int | None, int]:
        """``(wall ns, run ns, run-queue ns, voluntary, involuntary switches, cpu, wall ns after)`` now: the run
        time is read between the two wall clocks, so that :meth:`delta`'s wall (``b``'s after minus ``a``'s before)
        holds the whole run interval; an interrupt charged to the thread between a wall read and the run read of
        ``b`` would otherwise count in the run and not in the wall."""
        wall = _perf_ns()
        runq: int | None
        cpu: int | None = None
        # run: CLOCK_THREAD_CPUTIME_ID, which brings the running thread's sum up to date (task_sched_runtime);
        # schedstat's field 1 is that sum as of the last tick or switch, stale by up to a tick while it runs
        run = _thread_ns()
        try:  # a file this system lays out otherwise (fewer fields, not numbers) counts as one it lacks
            runq = int((self._pread(0, 128) or b"").split()[1])
        except (ValueError, IndexError):
            runq = None
        try:
            cpu = _cpu_of(self._pread(1, 1024) or b"")
        except (ValueError, IndexError):
            pass
        vcsw: int | None = None
        ivcsw: int | None = None
        try:
            import resource

            ru = resource.getrusage(resource.RUSAGE_THREAD)
            vcsw, ivcsw = int(ru.ru_nvcsw), int(ru.ru_nivcsw)
        except (ImportError, AttributeError, OSError):
            pass
        return wall, run, runq, vcsw, ivcsw, cpu, _perf_ns()

    @staticmethod
    def delta(a: tuple[Any, ...], b: tuple[Any, ...]) -> list[float | int | None]:
        """One row of :data:`HOST_FIELDS` from two :meth:`read` results (``a`` before ``b``)."""

        def d(i: int, scale: float = 1.0) -> float | int | None:
            if a[i] is None or b[i] is None:
                return None
            return (b[i] - a[i]) * scale if scale != 1.0 else b[i] - a[i]

        return [(b[6] - a[0]) * 1e-9, d(1, 1e-9), d(2, 1e-9), d(3), d(4), a[5], b[5]]

    def close(self) -> None:
        """Close the two files (also done when the probe is collected); later reads give None fields."""
        self._closer()
        self._fds = [None, None]


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def host_columns(rows: list[list[Any]]) -> dict[str, list[Any]]:
    """:data:`HOST_FIELDS` rows (one per iteration) as columns ``{field: [value per iteration]}``, floats rounded
    to 0.1 µs.

    >>> host_columns([[0.0021, 0.002, 0.0, 0, 1, 3, 3]])["ivcsw"]
    [1]
    """
    out: dict[str, list[Any]] = {f: [] for f in HOST_FIELDS}
    for row in rows:
        for f, v in zip(HOST_FIELDS, row, strict=True):
            out[f].append(round(v, 7) if isinstance(v, float) else v)
    return out


def thread_run_times(task_dir: str = "/proc/self/task") -> dict[int, tuple[str, int, int | None]]:
    """``{tid: (name, run ns, cpu it last ran on)}`` of every thread of this process now (Linux procfs: each
    task's ``comm``, ``schedstat`` field 1 and ``stat`` field 39); ``{}`` where there is no procfs. A thread that
    ends while it is read is left out."""
    out: dict[int, tuple[str, int, int | None]] = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return out
    for t in tids:
        d = os.path.join(task_dir, t)
        try:
            with open(os.path.join(d, "comm"), "rb") as f:
                name = f.read().decode(errors="replace").strip()
            with open(os.path.join(d, "schedstat"), "rb") as f:
                run = int(f.read().split()[0])
            with open(os.path.join(d, "stat"), "rb") as f:
                cpu: int | None = _cpu_of(f.read())
        except (OSError, ValueError, IndexError):
            continue
        out[int(t)] = (name, run, cpu)
    return out


def threads_snapshot_at(warmup: int) -> int:
    """The iteration (0-based, warm-up ones first) before which :func:`thread_run_times` takes the snapshot that
    ``threads_uninstrumented`` / ``threads`` start from: the last warm-up iteration's (``warmup`` − 1), or the first
    iteration's where there is no warm-up. Both programs take it there (:meth:`executor.runtime.RankRunner._timed`,
    ``benchmarks/accuracy/handwritten/harness.py``), so each thread's run time covers that one untimed iteration too.

    Not just before the first timed iteration: the snapshot opens three procfs files per thread (~670 µs of CPU for 15
    threads on a 2-core VM), and the first timed iteration that followed it ran slow on both sides in recorded H100
    runs (docs/validation.md, "the executor against hand-written PyTorch, CPU analysis of the recorded runs").

    >>> threads_snapshot_at(5), threads_snapshot_at(1), threads_snapshot_at(0)
    (4, 0, 0)
    """
    return max(0, warmup - 1)


def threads_between(before: dict[int, tuple[str, int, int | None]], after: dict[int, tuple[str, int, int | None]],
                    main_tid: int | None = None) -> list[list[Any]]:
    """``[[name, run s, cpu], ...]``: how long each thread of the process ran between two
    :func:`thread_run_times` (a thread started in between from zero), longest first; the issuing thread
    (``main_tid``) named ``"main"``; threads that did not run are left out.

    >>> threads_between({1: ("python", 10, 0), 2: ("pt_nccl_watchdg", 5, 1)},
    ...                 {1: ("python", 2_000_010, 0), 2: ("pt_nccl_watchdg", 1_005, 2), 3: ("new", 500, 3)}, 1)
    [['main', 0.002, 0], ['pt_nccl_watchdg', 1e-06, 2], ['new', 5e-07, 3]]
    """
    rows = []
    for tid, (name, run, cpu) in after.items():
        ran = run - before[tid][1] if tid in before else run
        if ran > 0:
            rows.append(["main" if tid == main_tid else name, round(ran * 1e-9, 9), cpu])
    return sorted(rows, key=lambda r: -r[1])


class IterationClock:
    """Aligned start and anchor of one rank's timed iterations (see the module docstring).

    Parameters
    ----------
    device : torch.device
        The rank's device (``cpu`` for gloo ranks).
    world : int
        Number of ranks.
    group : process group or None
        A host (gloo) group over all ranks for the clock all-gather; None = the default group,
        which must then be gloo.
    anchor_stream : torch.cuda.Stream, optional
        Where the anchor event is recorded (CUDA); a new stream if None.
    margin_s : float, optional
        See :func:`start_margin_s` (its value when None).
    """

    def __init__(self, device: Any, world: int, group: Any = None, anchor_stream: Any = None,
                 margin_s: float | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.device = device
        self.cuda = device.type == "cuda"
        self.world = world
        self.group = group
        self.margin_s = start_margin_s() if margin_s is None else margin_s
        self.late_starts = 0
        self.probe = HostThreadProbe()
        self._host_start: tuple[Any, ...] | None = None
        self._mine = torch.zeros(1, dtype=torch.int64)
        self._all = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        if self.cuda:
            self.anchor_stream = anchor_stream if anchor_stream is not None else torch.cuda.Stream(device=device)
            self.anchor = torch.cuda.Event(enable_timing=True)

    def align(self) -> None:
        """Device synchronize, then (world > 1) all-gather the clocks and spin to the common start."""
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
        if self.world <= 1:
            return
        self._mine[0] = time.time_ns()
        self.dist.all_gather(self._all, self._mine, group=self.group)
        t0 = aligned_start_ns((int(t[0]) for t in self._all), self.margin_s)
        now = time.time_ns
        t = now()
        cap = t + round((self.margin_s + 0.05) * 1e9)
        if t > t0 or t0 > cap:
            self.late_starts += 1
            t0 = min(t0, cap)
        while now() < t0:
            pass

    def start(self, streams: Iterable[Any] = ()) -> int:
        """Align, read the host thread's counters (:meth:`host_row`), then anchor: returns ``anchor_ns`` (wall
        clock); on CUDA every stream in ``streams`` waits for the anchor event."""
        self.align()
        self._host_start = self.probe.read()
        if not self.cuda:
            return time.time_ns()
        ev = self.anchor
        ev.record(self.anchor_stream)
        ev.synchronize()
        anchor = time.time_ns()
        for s in streams:
            s.wait_event(ev)
        return anchor

    def host_row(self) -> list[float | int | None]:
        """The issuing thread's :data:`HOST_FIELDS` from the last :meth:`start` (just before its anchor) to now:
        call it after the iteration's wait. Outside the measured window on both ends, so it costs no makespan.

        Raises
        ------
        RuntimeError
            No :meth:`start` before.
        """
        if self._host_start is None:
            raise RuntimeError("IterationClock.host_row() before start()")
        return self.probe.delta(self._host_start, self.probe.read())

    def elapsed_s(self, event: Any) -> float:
        """Seconds from the anchor event to ``event`` (CUDA; both completed)."""
        return self.anchor.elapsed_time(event) * 1e-3
