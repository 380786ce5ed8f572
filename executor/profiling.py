"""``--profiler``: save the Kineto trace and map its kernels back to schedule ops.

The executor wraps every op's launch in ``torch.profiler.record_function(op
name)`` during two extra iterations under ``torch.profiler.profile``, the
whole iteration in ``record_function("schedsim_iter<k>")``. In the exported
Chrome/Kineto JSON (as ``torch.profiler``'s ``export_chrome_trace`` writes it):

* each op is a ``user_annotation`` event on the host thread;
* the CUDA runtime calls it made (``cuda_runtime`` / ``cuda_driver``:
  ``cudaLaunchKernel``, ``cudaMemcpyAsync``, NCCL's launches) lie inside it
  on the same thread and carry ``args.correlation``;
* the GPU activities (``kernel``, ``gpu_memcpy``, ``gpu_memset``) with the
  same ``correlation`` are the op's kernels.

So per op of the last profiled iteration: the first kernel start, the last
kernel end and the summed kernel time (µs, Kineto's clock). On CPU ranks the
annotation itself is the op's time. Under ``--cuda-graph`` kernels are
launched by ``cudaGraphLaunch`` and cannot be mapped to ops this way; the
mapping then reports only the replay.

Pure Python apart from the ``prof`` object handed in.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from schedsim.sim.timeline import Span, Timeline, atomic_write_bytes

__all__ = ["save_trace", "map_trace", "kernel_timeline"]

_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_RT_CATS = {"cuda_runtime", "cuda_driver"}


def save_trace(prof: Any, path: str | Path) -> dict[str, Any]:
    """Export ``prof`` (a finished ``torch.profiler.profile``) to ``path`` (gzip if it ends in .gz),
    atomically, and return the trace dict."""
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        raw = Path(tmp).read_bytes()
    finally:
        os.unlink(tmp)
    data = gzip.compress(raw, compresslevel=6) if str(path).endswith(".gz") else raw
    atomic_write_bytes(path, data)
    return json.loads(raw.decode("utf-8", errors="replace"))


def map_trace(trace: dict[str, Any], op_names: list[str], *, iteration: str | None = None) -> dict[str, Any]:
    """Map a Kineto trace's kernels to ops.

    Parameters
    ----------
    trace : dict
        The Chrome-trace JSON of one rank.
    op_names : list of str
        This rank's op names (the ``record_function`` names).
    iteration : str, optional
        Name of the iteration annotation to use (default: the last ``schedsim_iter*``).

    Returns
    -------
    dict
        ``{"iteration": name, "ops": {op name: {cpu_start_us, cpu_dur_us, gpu_start_us, gpu_end_us,
        gpu_busy_us, n_kernels, kernels (first 4 names), streams}}, "unmapped_kernels": int}``; GPU fields are
        absent when no kernel maps (CPU ranks, CUDA graphs).
    """
    evs = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    iters = sorted((e for e in evs if e.get("cat") == "user_annotation"
                    and str(e.get("name", "")).startswith("schedsim_iter")), key=lambda e: e["ts"])
    win = None
    if iteration is not None:
        win = next((e for e in iters if e["name"] == iteration), None)
    elif iters:
        win = iters[-1]
    lo, hi = (win["ts"], win["ts"] + win.get("dur", 0)) if win else (float("-inf"), float("inf"))
    names = set(op_names)
    anns = [e for e in evs if e.get("cat") == "user_annotation" and e.get("name") in names and lo <= e["ts"] <= hi]
    rts = [e for e in evs if e.get("cat") in _RT_CATS and "correlation" in (e.get("args") or {})]
    gpu: dict[Any, list[dict[str, Any]]] = {}
    for e in evs:
        if e.get("cat") in _GPU_CATS:
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                gpu.setdefault(c, []).append(e)
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in rts:
        by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for lst in by_thread.values():
        lst.sort(key=lambda e: e["ts"])
    out: dict[str, Any] = {}
    used: set[Any] = set()
    for a in anns:
        a0, a1 = a["ts"], a["ts"] + a.get("dur", 0)
        rec: dict[str, Any] = {"cpu_start_us": a0, "cpu_dur_us": a.get("dur", 0)}
        ks: list[dict[str, Any]] = []
        for r in by_thread.get((a.get("pid"), a.get("tid")), []):
            if a0 <= r["ts"] <= a1:
                c = r["args"]["correlation"]
                if c in gpu:
                    ks += gpu[c]
                    used.add(c)
        if ks:
            rec["gpu_start_us"] = min(k["ts"] for k in ks)
            rec["gpu_end_us"] = max(k["ts"] + k.get("dur", 0) for k in ks)
            rec["gpu_busy_us"] = sum(k.get("dur", 0) for k in ks)
            rec["n_kernels"] = len(ks)
            rec["kernels"] = list(dict.fromkeys(str(k.get("name", ""))[:120] for k in ks))[:4]
            rec["streams"] = sorted({str((k.get("args") or {}).get("stream", k.get("tid"))) for k in ks})
        out[a["name"]] = rec
    unmapped = sum(len(v) for c, v in gpu.items() if c not in used and (not win or lo <= v[0]["ts"] <= hi + 1e6))
    return {"iteration": win["name"] if win else None, "ops": out, "unmapped_kernels": unmapped}


def kernel_timeline(base: Timeline, maps: dict[int, dict[str, Any]],
                    preds: dict[str, list[str]] | None = None) -> Timeline | None:
    """A timeline whose spans are the mapped kernel intervals (first kernel start → last kernel end): each op's
    span from when it got the GPU (docs/metrics.md, "Per-op spans").

    Each rank's kernel times are shifted so that its earliest kernel starts
    where its earliest op starts in ``base`` (the event-timed timeline): Kineto
    and the CUDA events share no origin. With ``preds`` (op id → the ids it waits for on its rank: dependencies
    and the op before it on its stream, e.g. the DAG's predecessors), each span also gets ``stream_s``, when its
    stream reached it in the profiled iteration: the latest of its call's start (Kineto's host annotation, on the
    same clock as the kernels) and its predecessors' kernel ends, so ``start_s − stream_s`` is its wait (the
    launch and any time queued for SMs). Returns None when no op has kernels. Its ``meta.host_per_op_us`` (per rank
    with calls, µs): the profiled iteration's host time per op, first call start to last call end over the calls
    (Kineto's host annotations), which :func:`schedsim.compare.profiled_profile` reads.
    """
    spans = []
    host: dict[str, float] = {}
    for r, m in maps.items():
        ops = {k: v for k, v in m.get("ops", {}).items() if "gpu_start_us" in v}
        if not ops:
            continue
        mine = [s for s in base.spans if s.rank == r]
        if not mine:
            continue
        t0 = min(v["gpu_start_us"] for v in ops.values())
        b0 = min(s.start_s for s in mine)
        calls = [v for v in m.get("ops", {}).values() if "cpu_start_us" in v]
        if calls:
            first = min(float(v["cpu_start_us"]) for v in calls)
            last = max(float(v["cpu_start_us"]) + float(v.get("cpu_dur_us", 0.0)) for v in calls)
            host[str(r)] = round((last - first) / len(calls), 3)
        name_of = {s.id: s.name for s in mine}
        for s in mine:
            v = ops.get(s.name)
            if v is None:
                continue
            st = b0 + (v["gpu_start_us"] - t0) * 1e-6
            en = b0 + (v["gpu_end_us"] - t0) * 1e-6
            reach = None
            if preds is not None:
                ends = [ops[name_of[p]]["gpu_end_us"] for p in preds.get(s.id, ())
                        if p in name_of and name_of[p] in ops]
                at = max([float(v["cpu_start_us"]), *ends])
                reach = min(st, b0 + (at - t0) * 1e-6)
            spans.append(Span(s.id, s.name, s.rank, s.stream, s.kind, s.resource, st, en, None, None, s.bytes,
                              s.flops, {**s.tags, "gpu_busy_us": round(v["gpu_busy_us"], 3)}, reach))
    if not spans:
        return None
    return Timeline(schedule=base.schedule, source="execute", world_size=base.world_size, launch=base.launch,
                    spans=spans, meta={"timing": "kineto kernels (first start .. last end per op)",
                                       "host_per_op_us": host})
