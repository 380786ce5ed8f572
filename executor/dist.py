"""Process groups for the executor: backend and device choice, the world-size
check, a gloo control group, one sub-group per distinct collective group, and
the arrival tracker used to name the ranks that never reached a collective.

Facts relied on (PyTorch ``torch.distributed`` docs and ``ProcessGroupNCCL.hpp``; NCCL docs on CUDA graphs):

* ``init_process_group(device_id=...)`` initialises NCCL communicators eagerly,
  which keeps lazy init out of CUDA-graph capture;
* ``dist.new_group`` must be called by every rank, in the same order, even by
  ranks outside the group;
* the default NCCL op timeout is 10 min; ours is ``--timeout`` plus a margin so
  that the executor's own (named) timeout fires first.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from executor import ExecError

__all__ = ["DistContext", "check_world_size", "env_world", "resolve_backend", "setup_dist", "ArrivalTracker",
           "PIN_CPUS", "PIN_ISSUER", "issuer_alone", "pin_issuer", "ISSUE_THREAD", "issue_thread", "on_issuing_thread",
           "parse_cpulist", "gpu_local_cpus", "pinned_cpus", "pin_process", "cuda_pci_bus_id",
           "run_with_deadline", "exit_now", "wait_for_all_ranks", "oversubscription_warning", "warn_oversubscribed"]


def env_world() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the torchrun environment; ``(0, 1, 0)`` without it."""
    return (int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
            int(os.environ.get("LOCAL_RANK", "0")))


PIN_CPUS = "SCHEDSIM_PIN_CPUS"
"""Environment variable: where the host threads of ``execute``, ``calibrate`` (its fresh host processes too) and
the hand-written references run (:func:`pinned_cpus`); unset, the OS places them."""


def parse_cpulist(text: str) -> list[int]:
    """The CPUs of a Linux cpulist (``"0-3,8,10-11"``, the format of sysfs ``cpulist`` files and ``taskset -c``),
    ascending; empty text gives ``[]``.

    >>> parse_cpulist("0-3,8,10-11")
    [0, 1, 2, 3, 8, 10, 11]
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part.strip():
            continue
        lo, _, hi = part.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)


def gpu_local_cpus(pci_bus_id: str, sysfs: str = "/sys") -> list[int] | None:
    """The CPUs local to the PCI device ``pci_bus_id`` (``"0000:3b:00.0"``): its ``local_cpulist``, else the
    ``cpulist`` of its ``numa_node`` (Linux sysfs ABI, ``Documentation/ABI/testing/sysfs-bus-pci``); None when
    sysfs says neither (no such device, or ``numa_node`` -1)."""
    dev = os.path.join(sysfs, "bus", "pci", "devices", pci_bus_id.lower())
    try:
        with open(os.path.join(dev, "local_cpulist")) as f:
            cpus = parse_cpulist(f.read())
        if cpus:
            return cpus
    except OSError:
        pass
    try:
        with open(os.path.join(dev, "numa_node")) as f:
            node = int(f.read().strip())
        if node < 0:
            return None
        with open(os.path.join(sysfs, "devices", "system", "node", f"node{node}", "cpulist")) as f:
            return parse_cpulist(f.read()) or None
    except (OSError, ValueError):
        return None


def pinned_cpus(spec: str | None, local: list[int] | None, available: list[int],
                local_rank: int = 0) -> list[int] | None:
    """The CPUs a process is pinned to for ``SCHEDSIM_PIN_CPUS=spec``; None for no pinning.

    ``spec``: unset, empty or ``off``: None. ``numa``: the GPU's local CPUs ``local`` (:func:`gpu_local_cpus`;
    every available CPU when unknown). ``numa:N``: N of them, the ``local_rank``-th block of N (so the ranks of
    one host get disjoint cores, wrapping round), so every process of a kind runs on the same cores. Anything
    else: a cpulist (``"2-5"``). Always intersected with ``available`` (the process's allowed CPUs).

    Raises
    ------
    ExecError
        ``spec`` is malformed or leaves no available CPU.

    >>> pinned_cpus("numa:2", [0, 1, 2, 3, 4, 5], list(range(8)), local_rank=1)
    [2, 3]
    """
    if not spec or spec.strip().lower() == "off":
        return None
    spec = spec.strip().lower()
    allowed = set(available)
    try:
        if spec == "numa" or spec.startswith("numa:"):
            pool = [c for c in (local or available) if c in allowed]
            n = int(spec[5:]) if spec.startswith("numa:") else len(pool)
            if n <= 0:
                raise ValueError(spec)
            blocks = max(1, len(pool) // n)
            start = (local_rank % blocks) * n
            cpus = pool[start:start + n]
        else:
            cpus = [c for c in parse_cpulist(spec) if c in allowed]
    except ValueError:
        raise ExecError(f"{PIN_CPUS}={spec!r} is not 'numa', 'numa:N' (N > 0) or a cpulist such as '2-5'",
                            fix=f"unset {PIN_CPUS}, or set it to numa, numa:4 or 2-5") from None
    if not cpus:
        raise ExecError(f"{PIN_CPUS}={spec!r} leaves none of this process's CPUs ({sorted(allowed)})",
                            fix=f"name CPUs this process may use, or unset {PIN_CPUS}")
    return cpus


def pin_process(local_rank: int, pci_bus_id: str | None) -> list[int] | None:
    """Pin every thread of this process (and the threads it starts later) to :func:`pinned_cpus` of
    ``SCHEDSIM_PIN_CPUS`` for the GPU ``pci_bus_id`` (None: unknown, every available CPU counts as local); return
    the CPUs, or None when the variable is unset. Linux only (``os.sched_setaffinity``); elsewhere None."""
    spec = os.environ.get(PIN_CPUS)
    if not spec or not hasattr(os, "sched_setaffinity"):
        return None
    local = gpu_local_cpus(pci_bus_id) if pci_bus_id else None
    cpus = pinned_cpus(spec, local, sorted(os.sched_getaffinity(0)), local_rank)
    if cpus is None:
        return None
    _pin_threads(lambda tid: cpus)
    return cpus


def _pin_threads(where: Any) -> None:
    """Set the CPU affinity of every thread of this process to ``where(tid)`` (Linux ``/proc/self/task``; the
    calling thread alone where that cannot be listed)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [threading.get_native_id()]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, where(tid))
        except OSError:
            pass  # a thread that ended meanwhile


PIN_ISSUER = "SCHEDSIM_PIN_ISSUER"
"""Environment variable: ``1`` gives the thread that issues the timed iterations a CPU of its own
(:func:`issuer_alone`); unset or ``0``, every thread shares the process's CPUs."""


def pin_issuer() -> bool:
    """Whether ``SCHEDSIM_PIN_ISSUER`` asks for :func:`issuer_alone` (``execute`` reads it before anything runs).

    Raises
    ------
    ExecError
        The variable is neither 0 nor 1.
    """
    return _switch(PIN_ISSUER, False)


def _switch(name: str, default: bool) -> bool:
    """The 0/1 environment variable ``name`` (unset or empty: ``default``).

    Raises
    ------
    ExecError
        The variable is neither 0 nor 1.
    """
    flag = os.environ.get(name, "").strip()
    if flag not in ("0", "1", ""):
        other = "0" if default else "1"
        raise ExecError(f"{name}={flag!r} is neither 0 nor 1", fix=f"unset {name}, or set it to {other}")
    return default if flag == "" else flag == "1"


@contextmanager
def issuer_alone() -> Iterator[int | None]:
    """With ``SCHEDSIM_PIN_ISSUER=1`` and a process allowed on two CPUs or more (``SCHEDSIM_PIN_CPUS``, or the
    machine's): inside the block the calling thread runs alone on the last of the process's CPUs and every other
    thread of the process (NCCL's, CUDA's, gloo's: they exist once the warm-up ran) on its own CPUs but that one
    (on its own where that one is all it has); after it, every thread on the CPUs it had before (a thread started
    inside, on all of the process's). Yields that CPU, or None when nothing was changed (unset, one CPU, not Linux).

    ``execute`` times its iterations inside it, the hand-written references their warm-up and timed ones: a helper
    thread woken during an iteration then takes none of the issuing thread's time. The last CPU, not the first: a
    virtual machine's first CPU often takes the device interrupts.

    Raises
    ------
    ExecError
        The variable is neither 0 nor 1.
    """
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if not pin_issuer() or len(cpus) < 2:
        yield None
        return
    me, mine = threading.get_native_id(), cpus[-1:]
    before = _thread_affinities()  # each thread's own CPUs (NCCL's start on its GPU's NUMA node's, init.cc)

    def others(tid: int) -> list[int]:
        own = before.get(tid, set(cpus))
        return sorted(own - set(mine)) or sorted(own)

    _pin_threads(lambda tid: mine if tid == me else others(tid))
    try:
        yield mine[0]
    finally:
        _pin_threads(lambda tid: sorted(before.get(tid, cpus)))


ISSUE_THREAD = "SCHEDSIM_ISSUE_THREAD"
"""Environment variable: ``1`` (the default) issues ``execute``'s iterations and ``calibrate``'s host probes from a
thread of their own (:func:`on_issuing_thread`); ``0`` from the calling thread, as before (an A/B switch)."""

_T = TypeVar("_T")


def issue_thread() -> bool:
    """Whether ``SCHEDSIM_ISSUE_THREAD`` (default 1) asks for :func:`on_issuing_thread`'s own thread (``execute``
    reads it before anything runs).

    Raises
    ------
    ExecError
        The variable is neither 0 nor 1.
    """
    return _switch(ISSUE_THREAD, True)


class _Issuer(threading.Thread):
    """The thread of :func:`on_issuing_thread`: ``fn()`` on a Python stack of its own (``_bootstrap``,
    ``_bootstrap_inner`` and ``run`` under it), its result or exception kept for the caller."""

    def __init__(self, fn: Callable[[], Any], device: Any) -> None:
        super().__init__(name="schedsim-issuer", daemon=True)
        self.fn, self.device = fn, device
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            if self.device is not None:  # CUDA's current device is the calling host thread's
                import torch

                torch.cuda.set_device(self.device)
            self.result = self.fn()
        except BaseException as e:  # handed to the caller, KeyboardInterrupt included
            self.error = e
        finally:
            self.fn = _noop
            self.done.set()


def _noop() -> None:
    return None


def on_issuing_thread(fn: Callable[[], _T], device: Any = None, *, stop_wait_s: float = 2.0) -> _T:
    """``fn()`` run on a thread of its own whose Python stack starts fresh, as a script's starts at its module; the
    caller waits for it. Returns what ``fn`` returns and raises what it raises (the same exception object, so
    messages and exit codes do not change). With ``SCHEDSIM_ISSUE_THREAD=0``, ``fn()`` on the calling thread.

    Why: PyTorch's NCCL Flight Recorder (on by default) gathers the calling thread's whole Python stack on every
    collective (``FlightRecorder::record``, ``CapturedTraceback::gather``), at a cost per frame, largest on an
    iteration's first collective (measured with ``benchmarks/probes/host/collective_call.py --after``:
    docs/validation.md, "what differs between calibrate's
    pair and the executor's tp layers"). ``schedsim execute`` called its iterations ~26 frames deep (runpy, the CLI,
    the runner), a hand-written script ~4; on this thread the lean loop's call is 7 deep (3 of them ``threading``'s).

    What the thread changes, and how it is handled: ``device`` (a CUDA ``torch.device``, or None on CPU ranks)
    becomes the thread's current CUDA device (it is per host thread; so is torch's current stream, which every
    issue loop sets itself). Anything pinned to "the calling thread" (:func:`issuer_alone`, ``torch.profiler``'s
    CPU-side recording, CUDA graph capture in ``thread_local`` mode, the garbage collector's freeze, which is
    process-wide) is entered inside ``fn``, on this thread. Signals reach the main thread only: when the wait is
    interrupted (Ctrl-C, or ``execute``'s SIGTERM handler raising KeyboardInterrupt), KeyboardInterrupt is raised in
    the thread too (``PyThreadState_SetAsyncExc``; it lands at its next Python instruction), the caller waits up to
    ``stop_wait_s`` for it to stop and then raises its own.

    Raises
    ------
    BaseException
        Whatever ``fn`` raised, or the caller's own interruption.
    """
    if not issue_thread():
        return fn()
    t = _Issuer(fn, device)
    t.start()
    try:
        t.done.wait()  # an Event, not join(): an interrupted join() of Python 3.11 marks the thread stopped
    except BaseException:
        _interrupt(t)
        t.done.wait(stop_wait_s)
        raise
    if t.error is not None:
        err, t.error = t.error, None
        raise err
    return t.result  # type: ignore[no-any-return]


def _interrupt(t: threading.Thread) -> None:
    """Raise KeyboardInterrupt in ``t`` at its next Python instruction (CPython's ``PyThreadState_SetAsyncExc``)."""
    import ctypes

    if t.ident is not None and t.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(t.ident), ctypes.py_object(KeyboardInterrupt))


def _thread_affinities() -> dict[int, set[int]]:
    """``{tid: CPUs it may run on}`` of every thread of this process (Linux ``/proc/self/task``); ``{}`` where
    that cannot be listed, a thread that ended meanwhile left out."""
    out: dict[int, set[int]] = {}
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return out
    for tid in tids:
        try:
            out[tid] = set(os.sched_getaffinity(tid))
        except OSError:
            pass
    return out


def cuda_pci_bus_id(torch: Any, index: int) -> str | None:
    """sysfs name (``"0000:3b:00.0"``) of CUDA device ``index`` from torch's device properties; None when torch
    does not report it."""
    p = torch.cuda.get_device_properties(index)
    bus, dev, dom = (getattr(p, a, None) for a in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    if bus is None or dev is None:
        return None
    return f"{int(dom or 0):04x}:{int(bus):02x}:{int(dev):02x}.0"


def oversubscription_warning(cuda: bool, local_ranks: int | None = None, cores: int | None = None) -> str | None:
    """A warning when CPU ranks (gloo on CPU) outnumber this host's cores, else None: each rank then waits for a
    core as well as for its ops, so measured times hold time-slicing the schedule does not have.

    ``local_ranks`` defaults to torchrun's ``LOCAL_WORLD_SIZE`` (else ``WORLD_SIZE``), ``cores`` to the cores
    this process may run on (``os.sched_getaffinity``, else ``os.cpu_count``). GPU ranks are not judged: their
    ops run on the GPU.

    >>> oversubscription_warning(False, 4, 2)[:60]
    'warning: 4 CPU ranks on 2 cores: oversubscribed, measured ti'
    >>> oversubscription_warning(False, 2, 2) is None and oversubscription_warning(True, 8, 2) is None
    True
    """
    if cuda:
        return None
    n = local_ranks if local_ranks is not None else int(os.environ.get("LOCAL_WORLD_SIZE",
                                                                       os.environ.get("WORLD_SIZE", "1")))
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n <= cores:
        return None
    from schedsim.errors import SchedsimError

    return "warning: " + SchedsimError(f"{n} CPU ranks on {cores} cores: oversubscribed, measured times include "
                                       "waiting for a core", fix=f"run at most {cores} ranks on this host, or on "
                                       "GPUs").format()


def warn_oversubscribed(cuda: bool, rank: int) -> None:
    """Print :func:`oversubscription_warning` on stderr, once per run (rank 0)."""
    import sys

    w = oversubscription_warning(cuda)
    if w and rank == 0:
        print(w, file=sys.stderr, flush=True)


def check_world_size(spec_world: int, run_world: int, file: str, has_param: bool, started: bool = True) -> None:
    """Raise :class:`ExecError` if torchrun started (``started``; else: ``--nproc-per-node`` asks for) a different
    number of processes than the schedule has ranks.

    Called before any process group exists, so no collective can hang on it.
    """
    if spec_world == run_world:
        return
    fix = (f"run schedsim execute --nproc-per-node {spec_world} FILE (or torchrun with --nnodes × --nproc-per-node "
           f"= {spec_world})")
    if has_param:
        fix += f", or pass --set world_size={run_world} (the schedule takes world_size as a parameter)"
    how = (f"{run_world} process(es) were started (WORLD_SIZE={run_world})" if started
           else f"--nproc-per-node {run_world} asks for {run_world} rank(s)")
    raise ExecError(f"{file}: the schedule has world_size {spec_world} but {how}\n  fix: {fix}")


@dataclass
class DistContext:
    """Everything the runtime needs about the processes.

    Attributes
    ----------
    rank, world, local_rank : int
    backend : str
        ``"nccl"`` or ``"gloo"``.
    device : torch.device
    cuda : bool
    ctrl : Any
        Process group for host-side control (barriers, gathers): gloo. ``None``
        means the default group (which is gloo when the backend is gloo).
    store : Any
        The c10d store (for the arrival tracker), or None.
    groups : dict
        Sorted rank tuple → process group (``None`` = the default group).
    """

    rank: int
    world: int
    local_rank: int
    backend: str
    device: Any
    cuda: bool
    ctrl: Any = None
    store: Any = None
    groups: dict[tuple[int, ...], Any] = field(default_factory=dict)

    def barrier(self) -> None:
        """Host barrier over all ranks on the control group (after a device sync on CUDA)."""
        import torch
        import torch.distributed as dist

        if self.cuda:
            torch.cuda.synchronize(self.device)
        if self.world > 1:
            dist.barrier(group=self.ctrl)

    def gather(self, obj: Any) -> list[Any] | None:
        """Gather a picklable object to rank 0 over the control group (None on other ranks)."""
        import torch.distributed as dist

        if self.world == 1:
            return [obj]
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0, group=self.ctrl)
        return out

    def close(self, deadline_s: float | None = None) -> bool:
        """Destroy the process groups; True when that finished.

        With ``deadline_s``, teardown runs on a daemon thread and is abandoned after that
        many seconds: ``destroy_process_group`` was seen never to return on 2 H200s
        (torch 2.11, NCCL 2.28.9) after CUDA graphs had captured NCCL calls. The caller
        then leaves the process without it (:func:`exit_now`), so no run hangs at exit.
        """
        import torch.distributed as dist

        if not dist.is_initialized():
            return True

        def destroy() -> None:
            try:
                dist.destroy_process_group()
            except Exception:
                pass

        if deadline_s is None:
            destroy()
            return True
        return run_with_deadline(destroy, deadline_s)


def wait_for_all_ranks(tag: str, world: int, timeout_s: float = 30.0) -> bool:
    """Under torchrun, block until all ``world`` ranks reached this call (or ``timeout_s`` passed).

    Used before every rank exits 2 on bad input: torchrun kills the other workers as soon as
    one exits, so without it the slower ranks die of SIGTERM instead of exiting 2. It uses the
    torchrun agent's c10d store (``TORCHELASTIC_USE_AGENT_STORE``; ``MASTER_ADDR``/``MASTER_PORT``)
    as a client, with a key unique to the run and restart. Returns False (without waiting) when
    there is no such store, i.e. outside torchrun.
    """
    env = os.environ
    if world <= 1 or env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true" or "MASTER_ADDR" not in env:
        return False
    try:
        import torch.distributed as dist

        store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), world, False,
                              timeout=datetime.timedelta(seconds=timeout_s))
        key = f"schedsim/{tag}/{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        n = store.add(key, 1)
        if n >= world:  # the last to arrive opens the gate
            store.set(key + "/go", "1")
        # every rank blocks on the gate key: the store wakes them all at once (a 50 ms polling loop let the
        # first rank leave while the others slept, and torchrun then killed those with SIGTERM, not exit 2)
        store.wait([key + "/go"], datetime.timedelta(seconds=timeout_s))
        return True
    except Exception:
        return False


def run_with_deadline(fn: Any, deadline_s: float) -> bool:
    """Run ``fn()`` on a daemon thread; True if it returned within ``deadline_s`` seconds, else False
    (the thread is left behind; being a daemon, it does not keep the process alive)."""
    t = threading.Thread(target=fn, name="schedsim-teardown", daemon=True)
    t.start()
    t.join(deadline_s)
    return not t.is_alive()


def exit_now(code: int) -> None:
    """Flush stdout/stderr and leave the process at once (``os._exit``): no atexit handlers, no
    process-group destructors, which can block on communicators a CUDA graph still references."""
    import sys

    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(code)


def resolve_backend(backend: str, device: str, cuda_available: bool) -> tuple[str, bool]:
    """``(backend, whether the ranks use CUDA)`` for ``--backend`` and ``--device`` (see :func:`setup_dist`).

    Raises
    ------
    ExecError
        NCCL or CUDA asked for but not available.

    Examples
    --------
    >>> resolve_backend("auto", "auto", False)
    ('gloo', False)
    >>> resolve_backend("auto", "auto", True)
    ('nccl', True)
    """
    want_cuda = device == "cuda" or (device == "auto" and backend != "gloo" and cuda_available)
    if want_cuda and not cuda_available:
        raise ExecError("--device cuda: CUDA is not available in this torch build or machine\n"
                        "  fix: run on a GPU machine, or use --device cpu (gloo)")
    if backend == "auto":
        backend = "nccl" if want_cuda else "gloo"
    if backend == "nccl" and not want_cuda:
        raise ExecError("--backend nccl needs CUDA\n  fix: use --backend gloo on CPU")
    return backend, want_cuda


def setup_dist(backend: str, device: str, timeout_s: float, group_list: list[tuple[int, ...]]) -> DistContext:
    """Initialise torch.distributed for the executor.

    Parameters
    ----------
    backend : {"auto", "nccl", "gloo"}
        ``auto``: NCCL when CUDA is available (and ``device`` is not ``cpu``), else gloo.
    device : {"auto", "cuda", "cpu"}
    timeout_s : float
        The executor's op timeout (s); the process-group timeout is set above it.
    group_list : list of tuple of int
        Every distinct collective group of the schedule, in a deterministic order.

    Raises
    ------
    ExecError
        NCCL or CUDA asked for but not available.
    """
    import torch
    import torch.distributed as dist

    rank, world, local_rank = env_world()
    backend, want_cuda = resolve_backend(backend, device, torch.cuda.is_available())
    if want_cuda:
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
        pin_process(local_rank, cuda_pci_bus_id(torch, local_rank))
    else:
        dev = torch.device("cpu")
    pg_timeout = datetime.timedelta(seconds=float(timeout_s) + 60.0)
    kw: dict[str, Any] = {"backend": backend, "timeout": pg_timeout}
    if backend == "nccl":
        kw["device_id"] = dev
    if "MASTER_ADDR" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(**kw)
    else:
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1, **kw)
    ctrl = None
    if backend != "gloo" and world > 1:
        ctrl = dist.new_group(backend="gloo", timeout=pg_timeout)
    store = None
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:
        store = None
    ctx = DistContext(rank=rank, world=world, local_rank=local_rank, backend=backend, device=dev, cuda=want_cuda,
                      ctrl=ctrl, store=store)
    full = tuple(range(world))
    for g in group_list:
        if g in ctx.groups:
            continue
        ctx.groups[g] = None if g == full else dist.new_group(list(g), timeout=pg_timeout)
    return ctx


class ArrivalTracker:
    """Publish, every ``period_s``, how far this rank has got through its communication ops.

    The main thread hands over, per iteration, the list of markers of this
    rank's comm ops in program order; a marker has ``query() -> bool`` (a CUDA
    start event on GPUs: the GPU reached the op; a flag on CPU: the host issued
    it). A daemon thread publishes ``"<iteration>|<arrived count>|<current op>"``
    under ``schedsim/progress/<rank>`` in the c10d store. On a timeout, the rank
    that waits reads the others' progress to name who never arrived.
    """

    KEY = "schedsim/progress/"

    def __init__(self, store: Any, rank: int, period_s: float = 0.2) -> None:
        self.store = store
        self.rank = rank
        self.period_s = period_s
        self._lock = threading.Lock()
        self._iter = -1
        self._markers: list[Any] = []
        self._idx = 0
        self.current = ""
        self._last = ""
        self._paused = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if store is not None:
            self._publish(force=True)
            self._thread = threading.Thread(target=self._loop, name="schedsim-progress", daemon=True)
            self._thread.start()

    def begin(self, iteration: int, markers: list[Any] | None) -> None:
        """Start tracking iteration ``iteration`` (an int; warm-up iterations are negative).

        ``markers=None`` means this iteration's progress cannot be observed (uninstrumented CUDA
        iterations record no start events); the rank then publishes ``-1`` arrived ops (unknown).
        """
        with self._lock:
            self._iter = iteration
            self._markers = markers if markers is not None else []
            self._idx = 0 if markers is not None else -1

    def pause(self, paused: bool) -> None:
        """Stop querying markers (e.g. during CUDA-graph capture, where event queries are not allowed)."""
        self._paused = paused

    def _scan(self) -> None:
        with self._lock:
            if self._paused or self._idx < 0:
                return
            while self._idx < len(self._markers):
                try:
                    if not self._markers[self._idx].query():
                        break
                except Exception:
                    break
                self._idx += 1

    def state(self) -> str:
        self._scan()
        return f"{self._iter}|{self._idx}|{self.current}"

    def _publish(self, force: bool = False) -> None:
        s = self.state()
        if force or s != self._last:
            try:
                self.store.set(self.KEY + str(self.rank), s)
                self._last = s
            except Exception:
                pass

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._publish()

    def flush(self) -> None:
        """Publish now (called just before reading the others' progress)."""
        if self.store is not None:
            self._publish(force=True)

    def read(self, ranks: list[int], wait_s: float = 0.6) -> dict[int, tuple[int, int, str] | None]:
        """Progress of ``ranks`` as ``(iteration, arrived, current op)``; None where unknown."""
        out: dict[int, tuple[int, int, str] | None] = {}
        if self.store is None:
            return {r: None for r in ranks}
        time.sleep(wait_s)  # let the others' threads publish their latest state
        for r in ranks:
            try:
                if not self.store.check([self.KEY + str(r)]):
                    out[r] = None
                    continue
                it, idx, cur = self.store.get(self.KEY + str(r)).decode().split("|", 2)
                out[r] = (int(it), int(idx), cur)
            except Exception:
                out[r] = None
        return out

    def stop(self) -> None:
        self._stop.set()
