"""Which host-cost loop predicts a host-bound layer of matmul + all_reduce? (issue 8, held-out tp_allreduce.)

In one process (``torchrun --nproc-per-node N``, NCCL on CUDA, gloo on CPU) this prints one JSON line on rank 0:

* ``hand``: the tp_allreduce_graph layer written by hand (``x[1, k] @ W[k, n]`` fp32, then ``all_reduce`` of the
  ``[1, n]`` output on the current stream), ``--layers`` of them issued from an idle GPU (synchronize + barrier
  first, as the executor's aligned start leaves it), median of ``--reps``: ``host_us_per_layer`` (host loop time
  / layers) and ``total_us_per_layer`` (to the synchronize).
* ``hand_mm_only``: the same loop without the all_reduce.
* ``lean_keywords`` and ``lean_script_call``: the same layer from a step list, as ``execute``'s lean loop issues it
  (``partial(torch.matmul, x, w, out=y)``, then the all_reduce bound as ``partial(dist.all_reduce, y, group=None,
  async_op=False)``, the executor's former binding, or by :func:`executor.kernels.script_call`, its
  binding since: ``partial(dist.all_reduce, y)``, the call ``hand`` makes). The ways alternate, round by round.
* ``probe``: :func:`executor.calibrate_host.comm_host_costs` and :func:`executor.calibrate_host.host_costs` in the
  same process (busy-GPU loops of calls).

A layer's all_reduce share is ``hand.total_us_per_layer − hand_mm_only.total_us_per_layer``; calibrate's
``eager_per_collective_us`` (the loop of back-to-back calls, ``collective_loop_us``) estimates it, and the loop
alternating the call with a 64×64 matmul (``mixed_pair_us − matmul_loop_us``), its former source, is
printed for comparison. Results: [evidence: collective-host].

``--after`` (issue 39): the all_reduce's host cost after each kind of predecessor, :data:`AFTER_DOC`.

Usage: torchrun --standalone --nproc-per-node 1 benchmarks/probes/host/collective_call.py [--layers 64 --reps 20]
       python3 benchmarks/probes/host/collective_call.py --after [--reps 100]   (or under torchrun)
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

AFTER_DOC = """What does an all_reduce call cost on the host after each kind of predecessor, as calibrate and as
the executor issue it? (issue 39: the "all_reduce after matmul" and the iteration's first matmul under-charged on
one H100.)

One process, a world of one (plain ``python3``: as calibrate's fresh host processes, a ``HashStore`` group; under
``torchrun --nproc-per-node 1``: as ``schedsim execute``), NCCL on CUDA, gloo on CPU. Prints one JSON line
``PROBE {...}`` of medians (µs):

* ``calibrate``: :func:`executor.calibrate_host.tp_layer_costs` itself (``gemv_loop_us``, ``gemv_pair_us`` and
  their difference, calibrate's ``collective_after_kernel_us``; ``warmup_layer{k}_us``), once as calibrate's
  fresh process runs it (collector on) and once under :func:`schedsim._gc.frozen_gc` (the executor's timed loops);
  and the first 64×64 matmul and all_reduce after a synchronize + barrier (``*_after_sync_us``, calibrate's
  ``first_op_extra_us`` source until issue 39) and after ``IterationClock.start`` with the ``set_stream`` in the
  first call (``*_after_start_us``, its source since: ``_first_call_times``).
* ``pair_loops``: calibrate's pair loop (GEMV then all_reduce, 50 pairs after a synchronize, idle GPU) varied one
  thing at a time: ``cal`` (as calibrate: default stream, the all_reduce on the GEMV's output), ``sep_buf`` (the
  all_reduce on a buffer of its own, as the executor's Materializer binds it without ``--check``), ``side`` (on a
  stream of its own, current via ``torch.cuda.set_stream``), ``busy`` (a sleep kernel queued first), ``tpa``
  (tp_allreduce_graph's world-1 GEMV, fp32 1×1024 @ 1024×2048). Each gives ``pair_us``, ``mm_loop_us`` (the
  predecessor alone) and ``ar_after_us`` = their difference.
* ``iters``: whole iterations issued as the executor's lean loop issues them (:func:`executor.lean.compile_cuda`'s
  step kinds: ``functools.partial(torch.matmul, a, b, out=c)``, the all_reduce bound by
  :func:`executor.kernels.script_call`, ``set_stream`` on a stream change, a dependency event's record and
  ``wait_event`` across streams, the end event's record), each after :meth:`executor.clock.IterationClock.start`
  (the executor's object), the host clock read after every step as ``_lean_stamped`` does, the wait spinning
  (:func:`executor.clock.wait_events`), under ``frozen_gc``. Per variant: ``first_mm_us`` (the iteration's first
  call, its ``set_stream`` included, as the executor's stamps count it; ``first_step_us``: that ``set_stream`` alone,
  or the first call where there is none), ``ar_after_mm_us`` / ``mm_after_ar_us``
  (median over layers 4 on, and ``ar_layers_us`` / ``mm_layers_us``: per layer 1-8, median over iterations),
  ``issue_us`` (the issue loop) and ``makespan_us`` (anchor to end event, CUDA). Variants:

  - ``tpa``: tp_allreduce_graph at world 1 (8 layers, fp32 1×1024 @ 1024×2048, all_reduce of a separate
    ``[1, 2048]`` fp32 buffer), one stream; ``tpa_same_buf`` (the all_reduce on the matmul output);
    ``tpa_default`` (on the default stream, no ``set_stream``); ``tpa_busy`` (a ~1 ms sleep kernel queued on the
    stream before the issue: the GPU busy at every call); ``tpa_events`` (the linear on one stream, the all_reduce
    on another, a dependency event recorded after each call and waited for by the other stream: the executor's
    cross-stream steps); ``tpa_hostrow`` (the executor's ``clock.host_row()`` after each wait); ``tpa_deep``
    (issued :data:`DEEP` Python frames deeper: PyTorch's NCCL Flight Recorder, on by default, gathers the caller's
    Python stack on every collective, and the executor calls from ~27 frames, calibrate's fresh process from ~10);
  - ``tpw``: tpw_eager's 96 layers of fp32 1×2048 @ 2048×2048;
  - ``ffn``: tp_ffn at tp=1 (fp16 fc1 4096×4096×512, fc2 4096×512×4096, all_reduce of a separate 4096×512 fp16
    buffer: 4 MiB; the GPU busy with the GEMMs when the all_reduce is called); ``ffn_sync`` (a
    ``torch.cuda.synchronize`` step before the all_reduce: the same call on an idle GPU; the sync is its own
    stamp); ``ffn_small_ar`` (the all_reduce of an 8 KiB buffer after the same GEMMs); ``gemv_big_ar`` (tpa's GEMV
    then the 4 MiB fp16 all_reduce, idle GPU).

Variants run round-robin, ``--reps`` iterations each after ``--warmup``. ``--small`` divides every dimension by 16
(the CPU test). On CPU ranks the all_reduce is ``async_op=True`` (gloo) and waited for after the iteration, as
``execute``'s CPU loop; streams, events, sleeps and synchronizes do not exist there (the variants still run, equal).

Usage (one GPU; benchmarks/device_env.sh sourced): ``python3 collective_call.py --after [--reps 100]`` (as
calibrate's processes) or the same under ``torchrun --standalone --nproc-per-node 1`` (as schedsim execute).
"""

#: (m, n, k) and dtype of each case's matmuls at world 1 (schedules/tp_allreduce_graph.yaml, tp_ffn.yaml)
TPA = (1, 2048, 1024)
TPW = (1, 2048, 2048)
FC1, FC2 = (4096, 4096, 512), (4096, 512, 4096)
SLEEP_CYCLES = 2_000_000  # ~1 ms at ~2 GHz: longer than an 8-layer iteration's issue (~0.2-0.4 ms)
#: extra Python frames ``*_deep`` variants issue from: the executor calls a collective from ~27 frames (CLI, runner,
#: lean loop), calibrate's fresh process from ~10, a hand-written reference from ~6; PyTorch's NCCL Flight Recorder
#: (``TORCH_NCCL_TRACE_BUFFER_SIZE``, 2000 by default) gathers the caller's Python stack on every collective
DEEP = 17


def _at_depth(n: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` called ``n`` Python frames deeper than the caller."""
    return fn() if n <= 0 else _at_depth(n - 1, fn)


def _med(xs: Sequence[float]) -> float:
    return round(float(statistics.median(xs)), 3) if xs else float("nan")


class Probe:
    def __init__(self, small: bool, device: str) -> None:
        import torch
        import torch.distributed as dist

        from executor.calibrate_bench import _Bench
        from executor.clock import IterationClock
        from executor.dist import env_world, setup_dist

        self.torch, self.dist = torch, dist
        cuda = torch.cuda.is_available() and device != "cpu"
        world = env_world()[1]
        self.ctx = setup_dist("auto" if cuda else "gloo", "cuda" if cuda else "cpu", 60.0, [tuple(range(world))])
        self.cuda = self.ctx.cuda
        self.dev = self.ctx.device
        self.div = 16 if small else 1
        self.b = _Bench(self.ctx, 1)
        self.clock = IterationClock(self.dev, self.ctx.world, self.ctx.ctrl)
        self.streams = [torch.cuda.Stream(device=self.dev) for _ in range(2)] if self.cuda else []
        self.end_ev = torch.cuda.Event(enable_timing=True) if self.cuda else None
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 ops of the schedules: TF32 off, set once (tf32_plan)

    # -- tensors --------------------------------------------------------------------------------------------------
    def mm_operands(self, mnk: tuple[int, int, int], dtype: Any) -> tuple[Any, Any, Any]:
        torch = self.torch
        m, n, k = (max(1, d // self.div) if d > 1 else 1 for d in mnk)
        dt = dtype if self.cuda else torch.float32
        return (torch.randn(m, k, device=self.dev).to(dt), (torch.randn(k, n, device=self.dev) / k).to(dt),
                torch.empty(m, n, device=self.dev, dtype=dt))

    def buf(self, numel: int, dtype: Any) -> Any:
        dt = dtype if self.cuda else self.torch.float32
        return self.torch.zeros(max(1, numel // self.div), device=self.dev, dtype=dt)

    def ar_call(self, t: Any) -> Callable[[], Any]:
        """The all_reduce as the executor binds it: ``script_call`` (NCCL, current stream) or async on gloo."""
        from executor.kernels import script_call

        if self.cuda:
            return script_call(self.dist.all_reduce, (t,), {"group": None, "async_op": False})
        return functools.partial(self.dist.all_reduce, t, async_op=True)

    # -- calibrate's own probes -----------------------------------------------------------------------------------
    def calibrate_refs(self) -> dict[str, Any]:
        from executor.calibrate_host import _first_call_times, tiny_mm, tp_layer_costs
        from schedsim._gc import frozen_gc

        b = self.b
        out: dict[str, Any] = {}
        for tag in ("collector_on", "frozen_gc"):
            if tag == "frozen_gc":
                with frozen_gc():
                    r = tp_layer_costs(b) if self.cuda else tp_layer_costs(b, reps=3, pairs=4)
            else:
                r = tp_layer_costs(b) if self.cuda else tp_layer_costs(b, reps=3, pairs=4)
            r["collective_after_kernel_us"] = r["gemv_pair_us"] - r["gemv_loop_us"]
            out[tag] = {k: round(v, 3) for k, v in r.items()}
        a, bb, c = tiny_mm(b)
        x = self.torch.zeros(256, device=self.dev)

        def mm() -> None:
            self.torch.matmul(a, bb, out=c)

        def ar() -> Any:
            return self.dist.all_reduce(x, async_op=not self.cuda)

        fm, fa = _first_call_times(b, [mm, ar], 8)
        out["first_mm_after_sync_us"] = _med([t * 1e6 for t in fm[1:]])
        out["first_ar_after_sync_us"] = _med([t * 1e6 for t in fa[1:]])
        # calibrate's form since issue 39: after IterationClock.start, the set_stream timed with the first call
        fm, fa = _first_call_times(b, [mm, ar], 8, start=(self.clock, self.streams[0] if self.cuda else None))
        out["first_mm_after_start_us"] = _med([t * 1e6 for t in fm[1:]])
        out["first_ar_after_start_us"] = _med([t * 1e6 for t in fa[1:]])
        return out

    # -- pair loops (calibrate's form) ----------------------------------------------------------------------------
    def pair_loop(self, mm: Callable[[], Any], ar: Callable[[], Any], side: bool, busy: bool, reps: int,
                  pairs: int) -> dict[str, float]:
        torch, b = self.torch, self.b

        def loop(call: Callable[[], Any]) -> float:
            ts = []
            for _ in range(reps):
                b.sync()
                self.ctx.barrier()
                if side:
                    torch.cuda.set_stream(self.streams[0])
                if busy:
                    torch.cuda._sleep(SLEEP_CYCLES * 4)
                t0 = time.perf_counter()
                ws = [call() for _ in range(pairs)]
                ts.append((time.perf_counter() - t0) / pairs)
                if side:
                    torch.cuda.set_stream(torch.cuda.default_stream(self.dev))
                for w in ws:
                    if w is not None and not isinstance(w, torch.Tensor):
                        w.wait()
            b.sync()
            return float(statistics.median(ts)) * 1e6

        def pair() -> Any:
            mm()
            return ar()

        mm_us, pair_us = loop(mm), loop(pair)
        return {"mm_loop_us": round(mm_us, 3), "pair_us": round(pair_us, 3), "ar_after_us": round(pair_us - mm_us, 3)}

    def pair_loops(self, reps: int, pairs: int) -> dict[str, Any]:
        torch = self.torch
        x, w, y = self.mm_operands(TPW, torch.float32)
        sep = self.buf(y.numel(), torch.float32)
        xa, wa, ya = self.mm_operands(TPA, torch.float32)
        sepa = self.buf(ya.numel(), torch.float32)
        gemv = functools.partial(torch.matmul, x, w, out=y)
        cases = {"cal": (gemv, self.ar_call(y), False, False), "sep_buf": (gemv, self.ar_call(sep), False, False),
                 "side": (gemv, self.ar_call(sep), True, False), "busy": (gemv, self.ar_call(sep), False, True),
                 "tpa": (functools.partial(torch.matmul, xa, wa, out=ya), self.ar_call(sepa), True, False)}
        res: dict[str, dict[str, list[float]]] = {k: {} for k in cases}
        for _ in range(3):  # rounds, the cases alternating
            for key, (mm, ar, side, busy) in cases.items():
                got = self.pair_loop(mm, ar, side and self.cuda, busy and self.cuda, reps, pairs)
                for k, v in got.items():
                    res[key].setdefault(k, []).append(v)
        return {key: {k: _med(v) for k, v in d.items()} for key, d in res.items()}

    # -- iterations (the executor's form) -------------------------------------------------------------------------
    def variant(self, name: str) -> tuple[list[Callable[[], Any]], list[tuple[str, int]], bool, bool]:
        """``(steps, owners, busy, hostrow)``: owners per op ``(kind, index of its last step)``, kinds ``mm``, ``ar``
        and ``sync``."""
        torch = self.torch
        cuda = self.cuda
        s0 = self.streams[0] if cuda else None
        s1 = self.streams[1] if cuda else None
        steps: list[Callable[[], Any]] = []
        owners: list[tuple[str, int]] = []
        cur: list[Any] = [None]

        def on(s: Any) -> None:
            if cuda and s is not cur[0]:
                steps.append(functools.partial(torch.cuda.set_stream, s))
                cur[0] = s

        def op(kind: str, f: Callable[[], Any], s: Any, wait: Any = None, record: Any = None) -> None:
            on(s)
            if cuda and wait is not None:
                steps.append(functools.partial(s.wait_event, wait))
            steps.append(f)
            if cuda and record is not None:
                steps.append(functools.partial(record.record, s))
            owners.append((kind, len(steps) - 1))

        base = name.split("_")[0]
        if base in ("tpa", "tpw") or name == "gemv_big_ar":
            layers = 96 if base == "tpw" else 8
            mnk = TPW if base == "tpw" else TPA
            x, w, y = self.mm_operands(mnk, torch.float32)
            if name == "gemv_big_ar":
                t = self.buf(FC2[0] * FC2[1], torch.float16)
            else:
                t = y if name == "tpa_same_buf" else self.buf(y.numel(), torch.float32)
            mm = functools.partial(torch.matmul, x, w, out=y)
            ar = self.ar_call(t)
            two = name == "tpa_events"
            evs = [(torch.cuda.Event(), torch.cuda.Event()) if cuda and two else (None, None) for _ in range(layers)]
            sm = None if name == "tpa_default" or not cuda else s0
            sa = s1 if two else sm
            for li in range(layers):
                e_mm, e_ar = evs[li]
                op("mm", mm, sm, wait=evs[li - 1][1] if two and li else None, record=e_mm)
                op("ar", ar, sa, wait=e_mm, record=e_ar)
        elif base in ("ffn", ) or name in ("ffn_sync", "ffn_small_ar"):
            a1, b1, h = self.mm_operands(FC1, torch.float16)
            w2 = (torch.randn(h.shape[1], FC2[1] // self.div, device=self.dev) / h.shape[1]).to(h.dtype)
            out = torch.empty(h.shape[0], w2.shape[1], device=self.dev, dtype=h.dtype)
            t = self.buf(2048, torch.float32) if name == "ffn_small_ar" else self.buf(out.numel(), torch.float16)
            op("mm", functools.partial(torch.matmul, a1, b1, out=h), s0)
            op("mm", functools.partial(torch.matmul, h, w2, out=out), s0)
            if name == "ffn_sync" and cuda:
                op("sync", functools.partial(torch.cuda.synchronize, self.dev), s0)
            op("ar", self.ar_call(t), s0)
        else:
            raise ValueError(name)
        if cuda:
            steps.append(functools.partial(self.end_ev.record, cur[0] or torch.cuda.current_stream(self.dev)))
            owners.append(("end", len(steps) - 1))
        return steps, owners, name.endswith("_busy"), name.endswith("_hostrow")  # "_deep": in iterations()

    def one_iteration(self, steps: list[Callable[[], Any]], busy: bool,
                      hostrow: bool) -> tuple[list[int], float, float]:
        """Stamps (ns from the issue loop's start, per step), the issue loop's µs and the makespan µs (CUDA)."""
        from executor.clock import wait_events

        torch = self.torch
        clock = time.perf_counter_ns
        stamps = [0] * len(steps)
        self.clock.start(self.streams)
        if busy and self.cuda:
            torch.cuda.set_stream(self.streams[0])
            torch.cuda._sleep(SLEEP_CYCLES)
            torch.cuda.set_stream(torch.cuda.default_stream(self.dev))
        works = []
        issue = clock()
        try:
            for j, f in enumerate(steps):
                w = f()
                stamps[j] = clock() - issue
                if not self.cuda and w is not None and not isinstance(w, torch.Tensor):
                    works.append(w)  # gloo's async all_reduce (a matmul returns its out tensor)
        finally:
            if self.cuda:
                torch.cuda.set_stream(torch.cuda.default_stream(self.dev))
        issue_us = (clock() - issue) * 1e-3
        span = float("nan")
        if self.cuda:
            wait_events([self.end_ev])
            span = self.clock.elapsed_s(self.end_ev) * 1e6
        for w in works:
            w.wait()
        if hostrow:
            self.clock.host_row()
        return stamps, issue_us, span

    def iterations(self, names: Sequence[str], reps: int, warmup: int) -> dict[str, Any]:
        from schedsim._gc import frozen_gc

        built = {n: self.variant(n) for n in names}
        raw: dict[str, list[tuple[list[int], float, float]]] = {n: [] for n in names}
        with frozen_gc():
            for r in range(warmup + reps):
                for n in names:
                    steps, _owners, busy, hostrow = built[n]
                    got = _at_depth(DEEP if n.endswith("_deep") else 0,
                                    functools.partial(self.one_iteration, steps, busy, hostrow))
                    if r >= warmup:
                        raw[n].append(got)
        return {n: self.summarise(built[n][1], raw[n]) for n in names}

    @staticmethod
    def summarise(owners: list[tuple[str, int]], runs: list[tuple[list[int], float, float]]) -> dict[str, Any]:
        """Per-call µs from the stamps: a call's time is its last step's stamp less the previous call's."""
        calls: list[list[float]] = [[] for _ in owners]
        for stamps, _i, _s in runs:
            prev = 0
            for c, (_kind, j) in enumerate(owners):
                calls[c].append((stamps[j] - prev) * 1e-3)
                prev = stamps[j]
        kinds = [k for k, _ in owners]
        meds = [statistics.median(c) for c in calls]
        res: dict[str, Any] = {"first_mm_us": _med(calls[0]), "calls": len(owners) - (kinds[-1] == "end"),
                               "first_step_us": _med([r[0][0] * 1e-3 for r in runs]),
                               "issue_us": _med([r[1] for r in runs]), "makespan_us": _med([r[2] for r in runs]),
                               "issue_us_runs": [round(r[1], 1) for r in runs]}
        ar = [i for i, k in enumerate(kinds) if k == "ar" and i and kinds[i - 1] in ("mm", "sync")]
        mm = [i for i, k in enumerate(kinds) if k == "mm" and i and kinds[i - 1] == "ar"]
        res["ar_layers_us"] = [round(meds[i], 3) for i in ar[:8]]
        res["mm_layers_us"] = [round(meds[0], 3)] + [round(meds[i], 3) for i in mm[:7]]
        res["ar_after_mm_us"] = _med([meds[i] for i in (ar[3:] or ar)])
        res["mm_after_ar_us"] = _med([meds[i] for i in (mm[3:] or mm)])
        if "sync" in kinds:
            res["sync_us"] = _med(calls[kinds.index("sync")])
        if len(kinds) <= 5:
            res["per_call_us"] = {f"{k}{c}": round(meds[c], 3) for c, k in enumerate(kinds)}
        return res


VARIANTS = ("tpa", "tpa_same_buf", "tpa_default", "tpa_busy", "tpa_events", "tpa_hostrow", "tpa_deep", "tpw", "ffn",
            "ffn_sync", "ffn_small_ar", "gemv_big_ar")


def after_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="--after: " + AFTER_DOC.split("\n")[0])
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--reps", type=int, default=100, help="timed iterations per variant")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--loop-reps", type=int, default=7, help="loops per pair-loop figure (calibrate: 7)")
    ap.add_argument("--pairs", type=int, default=50, help="calls per pair loop (calibrate: 50)")
    ap.add_argument("--small", action="store_true", help="every dimension / 16 (the CPU test)")
    ap.add_argument("--only", default=",".join(VARIANTS), help="comma-separated iteration variants")
    a = ap.parse_args(argv)
    import os

    p = Probe(a.small, a.device)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"cuda": p.cuda, "world": p.ctx.world, "torchrun": "TORCHELASTIC_RUN_ID" in os.environ,
                           "small": a.small}
    if p.cuda:
        import torch

        res["device"] = torch.cuda.get_device_name(p.dev)
        res["torch"] = torch.__version__
        v = torch.cuda.nccl.version()
        res["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    names = [n for n in a.only.split(",") if n]
    p.iterations(names, 2, 1)  # every variant's kernels chosen and loaded before anything is timed
    res["trace_buffer_size"] = os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "default")
    res["calibrate"] = p.calibrate_refs()
    res["pair_loops"] = p.pair_loops(a.loop_reps, a.pairs)
    res["iters"] = p.iterations(names, a.reps, a.warmup)
    res["calibrate_after"] = p.calibrate_refs()  # the same probes again, last: drift within the process
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    p.dist.destroy_process_group()
    print("PROBE " + json.dumps(res), flush=True)
    return 0



def layer_loops_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n-total", type=int, default=2048)
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    from executor.calibrate_bench import _Bench
    from executor.calibrate_host import comm_host_costs, host_costs
    from executor.dist import env_world, setup_dist
    from executor.kernels import script_call

    cuda = torch.cuda.is_available()
    world = env_world()[1]
    ctx = setup_dist("auto" if cuda else "gloo", "cuda" if cuda else "cpu", 60.0, [tuple(range(world))])
    b = _Bench(ctx, 1)
    dev = ctx.device
    n = a.n_total // ctx.world
    x = torch.rand(1, a.k, device=dev)
    ws = [torch.rand(a.k, n, device=dev) for _ in range(a.layers)]
    outs = [torch.empty(1, n, device=dev) for _ in range(a.layers)]

    def hand(with_ar: bool) -> None:
        for i in range(a.layers):
            torch.matmul(x, ws[i], out=outs[i])
            if with_ar:
                dist.all_reduce(outs[i])

    def lean(bind: Any) -> Any:
        steps = [f for i in range(a.layers) for f in (functools.partial(torch.matmul, x, ws[i], out=outs[i]),
                                                       bind(outs[i]))]

        def run() -> None:
            for f in steps:
                f()
        return run

    ways = {"hand": lambda: hand(True), "hand_mm_only": lambda: hand(False),
            "lean_keywords": lean(lambda t: functools.partial(dist.all_reduce, t, group=None, async_op=False)),
            "lean_script_call": lean(lambda t: script_call(dist.all_reduce, (t,), {"group": None, "async_op": False}))}

    def loop(issue: Any) -> tuple[float, float]:
        b.sync()
        ctx.barrier()
        b.sync()
        t0 = time.perf_counter()
        issue()
        t1 = time.perf_counter()
        b.sync()
        t2 = time.perf_counter()
        return (t1 - t0) / a.layers * 1e6, (t2 - t0) / a.layers * 1e6

    res: dict[str, object] = {"world": ctx.world, "layers": a.layers, "cuda": cuda}
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
    for rep in range(a.reps + 3):
        for key in ways:
            got = loop(ways[key])
            if rep >= 3:
                runs[key].append(got)
    for key, rs in runs.items():
        res[key] = {"host_us_per_layer": statistics.median(r[0] for r in rs),
                    "total_us_per_layer": statistics.median(r[1] for r in rs),
                    "total_us_per_layer_runs": [round(r[1], 2) for r in rs]}
    probe = host_costs(b, lambda _m: None) if ctx.rank == 0 else {}
    ctx.barrier()
    probe.update(comm_host_costs(b))
    res["probe"] = {k: round(v, 2) for k, v in probe.items()}
    if ctx.rank == 0:
        print("PROBE " + json.dumps(res), flush=True)
    dist.destroy_process_group()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``--after``: :func:`after_main`; otherwise the layer loops (:func:`layer_loops_main`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--after" in args:
        args.remove("--after")
        return after_main(args)
    return layer_loops_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
