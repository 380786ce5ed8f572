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
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

__all__ = ["START_MARGIN_S", "WAIT", "IterationClock", "aligned_start_ns", "start_margin_s", "wait_events"]

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
        """Align, then anchor: returns ``anchor_ns`` (wall clock); on CUDA every stream in ``streams`` waits
        for the anchor event."""
        self.align()
        if not self.cuda:
            return time.time_ns()
        ev = self.anchor
        ev.record(self.anchor_stream)
        ev.synchronize()
        anchor = time.time_ns()
        for s in streams:
            s.wait_event(ev)
        return anchor

    def elapsed_s(self, event: Any) -> float:
        """Seconds from the anchor event to ``event`` (CUDA; both completed)."""
        return self.anchor.elapsed_time(event) * 1e-3
