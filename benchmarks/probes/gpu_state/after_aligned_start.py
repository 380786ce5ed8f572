"""Kernel and collective times as a function of time since the executor's aligned start (2 ranks).

Why: in the final 2xH200 accuracy runs (2026-11-30 23:35 UTC, [evidence: accuracy-h200], "Host-bound
cases") every kernel of a sub-millisecond schedule ran several times slower than back to back right after
``executor.clock.IterationClock.start`` (device synchronize, clock all-gather, 2 ms spin) and sped up over
about 0.8 ms: tp_allreduce eager's 1x1024x1024 fp32 linear took 75, 48, 36, ... 16 us against 9.1 us in
the calibrated table. This probe measures that curve, so that the model can take it from a measurement
instead of a fit to the accuracy cases, and tells which part of the start causes it.

Per iteration it runs ``--layers`` times (linear 1 x K x K fp32, all_reduce of ``--ar-bytes``) on one stream,
with a CUDA event before and after each op (the op's span, as ``schedsim execute`` records it), after one
of three starts:

* ``aligned``: ``IterationClock.start`` (what ``execute`` does);
* ``sync``: ``torch.cuda.synchronize`` + a barrier, no spin;
* ``warm``: no synchronize, iterations back to back (the GPU never idles);
* ``busy``: like ``aligned``, but a spin kernel (``torch.cuda._sleep``) on a side stream keeps the GPU busy
  from the synchronize until just after the start (tells GPU idle from host state);
* ``spin``: synchronize + barrier + a 2 ms host spin, no clock all-gather;
* ``prefill``: like ``aligned``, but the anchor event is recorded behind a ~0.5 ms spin kernel, so the host
  issues the first ops while the GPU still waits (the GPU starts the iteration with a full queue).

Prints, per start and op position, the median span (us) over ``--iters`` iterations and writes them to
``--out`` (JSON). On CPU (gloo) it runs end to end with host timers, as a smoke test only.

Run: ``torchrun --nproc_per_node 2 benchmarks/probes/gpu_state/after_aligned_start.py``
(or ``bash benchmarks/probes/run.sh post_start``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from executor.clock import IterationClock

CYCLES_PER_S = 1.98e9  # H200 max SM clock (nvidia-smi, 2026-11-30): torch.cuda._sleep takes cycles


class Starts:
    """The iteration starts compared (module docstring), one method per mode."""

    MODES = ("aligned", "sync", "warm", "busy", "spin", "prefill")

    def __init__(self, dev: torch.device, world: int) -> None:
        self.cuda = dev.type == "cuda"
        self.dev = dev
        self.host = dist.new_group(backend="gloo") if self.cuda else None
        self.clock = IterationClock(dev, world, group=self.host)
        self.side = torch.cuda.Stream(device=dev) if self.cuda else None

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def _wait_anchor(self) -> None:
        if self.cuda:
            torch.cuda.current_stream().wait_event(self.clock.anchor)

    def aligned(self) -> None:
        self.clock.start()

    def sync(self) -> None:
        self._sync()
        dist.barrier(group=self.host)

    def warm(self) -> None:
        pass

    def busy(self) -> None:
        self._sync()
        if self.cuda:
            with torch.cuda.stream(self.side):
                torch.cuda._sleep(int((self.clock.margin_s + 0.003) * CYCLES_PER_S))
        self.clock.cuda = False  # align() without its device synchronize, which would wait for the spin kernel
        self.clock.align()
        self.clock.cuda = self.cuda
        if self.cuda:
            self.clock.anchor.record(self.clock.anchor_stream)
            self.clock.anchor.synchronize()
        self._wait_anchor()

    def spin(self) -> None:
        self.sync()
        t_end = time.perf_counter() + self.clock.margin_s
        while time.perf_counter() < t_end:
            pass

    def prefill(self) -> None:
        self.clock.align()
        if self.cuda:
            with torch.cuda.stream(self.clock.anchor_stream):
                torch.cuda._sleep(int(0.0005 * CYCLES_PER_S))
            self.clock.anchor.record(self.clock.anchor_stream)
        self._wait_anchor()


def _layers(a: argparse.Namespace, dev: torch.device) -> list[tuple[str, Callable[[], object]]]:
    """The op sequence: ``--layers`` times (linear 1 x K x K fp32, all_reduce of ``--ar-bytes``)."""
    x = torch.randn(1, a.k, device=dev)
    w = torch.randn(a.k, a.k, device=dev)
    y = torch.empty(1, a.k, device=dev)
    buf = torch.zeros(a.ar_bytes // 4, device=dev)
    ops: list[tuple[str, Callable[[], object]]] = [("linear", lambda: torch.matmul(x, w, out=y)),
                                                  ("all_reduce", lambda: dist.all_reduce(buf))]
    return [ops[i % 2] for i in range(2 * a.layers)]


def _measure(a: argparse.Namespace, starts: Starts, seq: list) -> dict[str, dict[str, float]]:
    """Median span (us) per op position, per start mode."""
    cuda = starts.cuda

    def stamp() -> object:
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def span(e0: object, e1: object) -> float:
        return e0.elapsed_time(e1) * 1e3 if cuda else (e1 - e0) * 1e6  # type: ignore[attr-defined,operator]

    result: dict[str, dict[str, float]] = {}
    for mode in Starts.MODES:
        begin = getattr(starts, mode)
        timed = []  # per timed iteration, the (before, after) stamps of every op
        for it in range(a.warmup + a.iters):
            begin()
            marks = []
            for _name, fn in seq:
                e0 = stamp()
                fn()
                marks.append((e0, stamp()))
            if it >= a.warmup:
                timed.append(marks)
        starts._sync()  # warm: once per mode, so the GPU never idles between iterations
        result[mode] = {f"{i}:{name}": statistics.median(span(*m[i]) for m in timed) for i, (name, _) in enumerate(seq)}
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--ar-bytes", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="probe_post_start.json")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    result = _measure(a, Starts(dev, world), _layers(a, dev))
    if rank == 0:
        how = "CUDA events" if cuda else "host timers (CPU smoke test)"
        print(f"median span (us) by op position, {world} ranks, {how}")
        print(f"{'op':<16}" + "".join(f"{m:>10}" for m in result))
        for key in result["aligned"]:
            print(f"{key:<16}" + "".join(f"{result[m][key]:10.1f}" for m in result))
        meta = {"device": torch.cuda.get_device_name(dev) if cuda else "cpu", "torch": torch.__version__,
                "world": world, "layers": a.layers, "k": a.k, "ar_bytes": a.ar_bytes, "iters": a.iters,
                "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
        from schedsim.io import atomic_write_text  # a temporary of its own: no user file named OUT.tmp is replaced

        atomic_write_text(a.out, json.dumps({"meta": meta, "median_span_us": result}, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
