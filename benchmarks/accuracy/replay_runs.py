"""Re-predict measured accuracy cases with the current model and compare, on CPU in seconds.

For every case folder ``<run>/<case>/execute/timeline.json`` written by ``bash benchmarks/accuracy/two_gpu_suite.sh``
(a measured ``schedsim execute`` timeline), this predicts the same schedule with the same ``--set`` values,
launch mode and ``CUDA_DEVICE_MAX_CONNECTIONS`` (all in the measured timeline's ``meta`` and header) using a
given profile and the model in this checkout, and compares exactly as ``schedsim compare`` does
(:func:`schedsim.compare.compare_timelines`: per-op spans from "stream reached" to end when the measurement is
CUDA-event timed). The makespan error is against the uninstrumented makespan (the schedule's own cost); for a
case measured in several processes (``rep<N>/`` folders, ``HOST_REPEAT`` of ``two_gpu_suite.sh``) against the
median of the processes' uninstrumented makespans.

Usage (repo root)::

    python benchmarks/accuracy/replay_runs.py RUN_DIR [RUN_DIR ...] [--profile P] [--gpu-model waves] [--md OUT.md]

``--memset-rows OUT.yaml`` (with ``--profile``) first writes the profile with ``gemm.memset`` rows taken from the
runs' ``profiler_ops.json`` (a GEMM whose first kernel is a memset; on an idle GPU, its Kineto span less its busy
time: the memset's end to the main kernel's start, what ``calibrate`` records from one call; per shape the median,
a shape never idle takes the median over all) and replays with it.
``--fresh-host OUT.yaml`` (with ``--profile``, a calibrated profile with its ``.json`` next to it) first writes the
profile with the ``launch:`` fields it leaves unset computed from its calibration's fresh host processes by this
checkout's calibrate (``collective_after_kernel_us`` for a calibration older than that field) and replays with it.
``--host-rules`` (with ``--profile``, a calibrated profile with its ``.json``) replays every case with the profile's
``launch:`` fields and ``gemm.call`` rows rebuilt from its calibration's fresh host processes by each rule of
:data:`HOST_RULES` (calibrate's field-by-field median; one process's fields; one speed factor per process) and
prints per rule the makespan errors and the cases worse by more than 2 points than the median rule.
``--process-host`` predicts each case measured with ``execute --measure-host`` with that process's host costs.
``--profile`` defaults to each run's own calibrated profile (``RUN_DIR/*_calibrated.yaml``); give a profile
name (``h200x2``, ``h200``) or path to replay every case with it. Goals (issue 8): makespan error median
<= 3 %, worst <= 8 %; per-op median error <= 15 %; the uncalibrated ``h200`` within 10 % on makespans.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from schedsim.compare import compare_timelines, timed_profile
from schedsim.gpu.power import iteration_gap_of, sustained_of
from schedsim.hardware.profile import load_profile
from schedsim.sim.engine import simulate
from schedsim.sim.timeline import Timeline, atomic_write_text

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the suite's summary module, next to this file
from suite_summary import process_medians  # noqa: E402


def run_profile(run: Path) -> str:
    """The calibrated profile a run wrote (``*_calibrated.yaml``), else ``h200x2``."""
    found = sorted(run.glob("*_calibrated.yaml"))
    return str(found[0]) if found else "h200x2"


def replay_case(case: Path, profile: str, gpu_model: str | None = None, process_host: bool = False
                ) -> dict[str, Any]:
    """Predict and compare one measured case folder; returns a table row (times in seconds, errors as fractions).
    ``process_host``: predict with the host costs the case's process measured (``meta.host_costs_us``, written by
    ``execute --measure-host``) in place of the profile's, as ``execute --measure-host --compare`` does."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.graph.build import graph_of

    meas = Timeline.read_json(case / "execute" / "timeline.json")
    meta = meas.meta
    file, sets = Path(meta["file"]), list(meta.get("set") or [])
    spec = _load(file, sets)
    prog = lower_spec(spec, file)
    G = graph_of(prog)  # the DAG the kernel and host-call walks read
    prof = load_profile(profile)
    if process_host and meta.get("host_costs_us"):
        from executor.calibrate_host import with_host_costs

        prof = with_host_costs(prof, meta["host_costs_us"])
    conns = int(meta["max_connections"]) if meta.get("max_connections") else None
    kw: dict[str, Any] = {"launch": meas.launch, "gpu_model": gpu_model, "max_connections": conns,
          "iteration_gap_s": iteration_gap_of(meta, meas.world_size), "sustained_s": sustained_of(meta)}
    pred = simulate(prog, prof, **kw)
    pred.meta.update({"file": str(file), "set": sets})
    timed = None  # a run timed op by op: its ops against the prediction of the run as timed, as execute does
    got = timed_profile(meas, prof)  # a timed graph, or eager ops timed by events that cost the host
    if got is not None:
        timed = simulate(prog, got[0], model_executor=got[1], **kw)
    res = compare_timelines(pred, meas, pred_timed=timed).to_dict()  # the compare.json form
    ms = res["makespan"]
    un = ms.get("uninstrumented", {})
    plain_s = pred.makespan_s  # the plain prediction (ms["pred_s"] is the timed graph's when there is one)
    procs, _ref = process_medians(case)
    if len(procs) > 1:
        un = {"meas_s": statistics.median(procs), "error": plain_s / statistics.median(procs) - 1}
    ops = res.get("ops", {})
    own = process_host_rows(case, prog, load_profile(profile), kw) if process_host else []
    w = ops.get("worst") or {}
    span = _kernel_spans(case, meas, pred, G, lambda p: simulate(prog, p, model_executor=True, **kw), prof)
    hw = _handwritten_s(case)
    meas_s = un.get("meas_s", ms["meas_s"])
    return {"span_median": span.get("median_abs_error"), "wait_diff_s": span.get("wait_median_abs_diff_s"),
            "hw_s": hw, "hw_error": None if not hw else plain_s / hw - 1,
            "exec_vs_hw": None if not hw else meas_s / hw - 1,
            "case": case.name, "run": case.parent.name, "profile": prof.name, "launch": meas.launch,
            "max_connections": meta.get("max_connections"), "processes": max(1, len(procs)), "pred_s": plain_s,
            "meas_s": un.get("meas_s", ms["meas_s"]), "error": un.get("error", ms["error"]),
            "op_median": ops.get("median_abs_error"), "worst_id": w.get("id"), "worst_error": w.get("error"),
            "host_error": _worst_host_error(res.get("host_issue")),
            "by_kind": ops.get("by_kind", {}), "process_host": own,
            "host_calls": host_call_misses(case, G, pred), "phases": process_phases(case)}


def _processes(case: Path) -> list[Path]:
    """The case's measured processes: ``execute/`` and each ``rep<N>/execute/`` with a timeline."""
    return [d / "execute" for d in [case, *sorted(case.glob("rep*"))] if (d / "execute" / "timeline.json").is_file()]


def process_host_rows(case: Path, prog: Any, prof: Any, kw: dict[str, Any]) -> list[dict[str, Any]]:
    """Each process of the case that measured its own host costs (``execute --measure-host``:
    ``meta.host_costs_us``), predicted with them against its own uninstrumented makespan and host issue, as
    that process's ``--compare`` did: ``[{"process", "pred_s", "meas_s", "error", "host_error"}]`` (seconds,
    fractions). The suite (benchmarks/accuracy/one_gpu_suite.sh) runs that process as ``rep2/``. The figures are settled
    as ``measure_here`` settles them (:func:`executor.calibrate_host.settle_costs`; runs measured before it did
    have their later timing of the reference call as ``matmul_loop_us``)."""
    from executor.calibrate_host import settle_costs, with_host_costs

    out = []
    for d in _processes(case):
        meta = Timeline.read_json(d / "timeline.json").meta
        if not meta.get("host_costs_us") or not meta.get("makespan_uninstrumented_s"):
            continue
        pred = simulate(prog, with_host_costs(prof, settle_costs(dict(meta["host_costs_us"]))), **kw)
        meas_s = float(meta["makespan_uninstrumented_s"])
        issue = (meta.get("host_issue_uninstrumented_s") or [None])[0]
        pred_issue = (pred.meta.get("host_issue_s") or [None])[0]
        out.append({"process": d.parent.name, "pred_s": pred.makespan_s, "meas_s": meas_s,
                    "error": pred.makespan_s / meas_s - 1,
                    "host_error": None if not issue or pred_issue is None else pred_issue / issue - 1})
    return out


def host_call_misses(case: Path, G: Any, pred: Timeline) -> dict[str, list[float]]:
    """Per call class, the measured less the predicted host time of each call of an uninstrumented iteration
    (seconds), pooled over the case's processes: a call's time is its ``meta.host_call_end_s`` less the previous
    call's on its rank (the rank's first call: from the iteration's start), on both sides. The class is
    ``"KIND after PREVIOUS_KIND"`` (``"KIND first"`` for the rank's first call), the op kinds of ``G``. Empty
    where either side lacks the per-call times (a CUDA graph, a pipeline block)."""
    got = pred.meta.get("host_call_end_s") or {}
    out: dict[str, list[float]] = {}
    if not got:
        return out
    kind = {n: d["op"].kind for n, d in G.nodes(data=True)}
    for d in _processes(case):
        meas = Timeline.read_json(d / "timeline.json").meta.get("host_call_end_s") or {}
        prev: dict[int, str] = {}  # rank -> the previous op id
        for op in meas:
            r = int(op.rsplit("@r", 1)[1])
            p = prev.get(r)
            prev[r] = op
            if op not in got or (p is not None and p not in got):
                continue
            m = meas[op] - (meas[p] if p else 0.0)
            g = got[op] - (got[p] if p else 0.0)
            cls = f"{kind.get(op, '?')} " + (f"after {kind.get(p, '?')}" if p else "first")
            out.setdefault(cls, []).append(m - g)
    return out


def process_phases(case: Path) -> list[dict[str, Any]]:
    """Each process of the case (``execute/``, ``rep<N>/execute/``) that ran both uninstrumented and stamped
    iterations (``--host-calls``): ``[{"process", "lean_issue_s", "stamped_issue_s", "ratio", "iter_min_s",
    "iter_max_s"}]``. ``lean_issue_s`` is rank 0's host issue of an uninstrumented iteration (median,
    ``meta.host_issue_uninstrumented_s``), ``stamped_issue_s`` rank 0's last call end of the stamped iterations
    that ran after them (median, ``meta.host_call_end_s``), ``ratio`` the first over the second, ``iter_min_s`` /
    ``iter_max_s`` the fastest and slowest uninstrumented makespan (``meta.makespan_uninstrumented_iters_s``,
    None without). The lean issue also holds the end events' records after the last call (a few µs), so a ratio
    far from 1 says the process ran at another speed in one phase than in the other: the per-call readings of
    :func:`host_call_misses` then describe another iteration than the makespan."""
    out = []
    for d in _processes(case):
        meta = Timeline.read_json(d / "timeline.json").meta
        lean = (meta.get("host_issue_uninstrumented_s") or [None])[0]
        r0 = [v for k, v in (meta.get("host_call_end_s") or {}).items() if k.endswith("@r0")]
        if not lean or not r0:
            continue
        its = meta.get("makespan_uninstrumented_iters_s") or []
        out.append({"process": d.parent.name if d.parent != case else "execute", "lean_issue_s": float(lean),
                    "stamped_issue_s": max(r0), "ratio": float(lean) / max(r0),
                    "iter_min_s": min(its) if its else None, "iter_max_s": max(its) if its else None,
                    "thread": thread_summary(meta)})
    return out


def thread_summary(meta: dict[str, Any]) -> str:
    """Rank 0's issuing thread over the uninstrumented iterations (``meta.host_thread_uninstrumented``): the
    medians of its run and run-queue shares of the wall time and of its preemptions per iteration, the CPUs it ran
    on, and the other thread that ran longest beside it (``meta.threads_uninstrumented``); "" for runs that
    recorded neither (runs before the host-thread probe).

    >>> thread_summary({"host_thread_uninstrumented": [{"wall_s": [2.0, 2.0], "run_s": [2.0, 1.0],
    ...                 "runq_s": [0.0, 0.5], "ivcsw": [0, 2], "cpu_start": [1, 1], "cpu_end": [1, 2]}],
    ...                 "threads_uninstrumented": [[["main", 3.0, 1], ["pt_nccl_watchdg", 0.001, 3]]]})
    'run 75 %, runq 12 %, 1 preempted, CPUs [1, 2]; beside: pt_nccl_watchdg 1000 µs'
    """
    cols = (meta.get("host_thread_uninstrumented") or [None])[0]
    out = []
    if cols and cols.get("wall_s"):
        wall = cols["wall_s"]

        def med(f: str, share: bool) -> str:
            vals = [v / w if share else v for v, w in zip(cols.get(f) or [], wall, strict=False)
                    if v is not None and w]
            return "n/a" if not vals else (f"{100 * statistics.median(vals):.0f} %" if share
                                           else f"{statistics.median(vals):g}")

        cpus = sorted({c for f in ("cpu_start", "cpu_end") for c in cols.get(f) or [] if c is not None})
        out.append(f"run {med('run_s', True)}, runq {med('runq_s', True)}, {med('ivcsw', False)} preempted, "
                   f"CPUs {cpus}")
    others = [t for t in (meta.get("threads_uninstrumented") or [[]])[0] if t[0] != "main"]
    if others:
        out.append(f"beside: {others[0][0]} {others[0][1] * 1e6:.0f} µs")
    return "; ".join(out)


def process_phase_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per process, the uninstrumented iterations' issue against the stamped ones'
    (:func:`process_phases`)."""
    out = ["| case | process | lean issue ms | stamped issue ms | lean / stamped "
           "| uninstrumented makespans ms, min–max | host thread |", "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        for p in r.get("phases", []):
            span = "" if p["iter_min_s"] is None else f"{p['iter_min_s'] * 1e3:.3f}–{p['iter_max_s'] * 1e3:.3f}"
            out.append(f"| {r['case']} | {p['process']} | {p['lean_issue_s'] * 1e3:.3f} | "
                       f"{p['stamped_issue_s'] * 1e3:.3f} | {p['ratio']:.2f} | {span} | {p.get('thread', '')} |")
    return "\n".join(out)


def host_call_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per case and call class, the calls' count and the median of measured less predicted host time
    per call (µs): where a host model misses, by the call and the call before it (:func:`host_call_misses`)."""
    out = ["| case | call | calls | measured - predicted, median |", "|---|---|---:|---:|"]
    for r in rows:
        for cls, diffs in sorted(r.get("host_calls", {}).items()):
            out.append(f"| {r['case']} | {cls} | {len(diffs)} | {statistics.median(diffs) * 1e6:+.2f} µs |")
    return "\n".join(out)


def process_host_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: each process predicted with its own measured host costs (:func:`process_host_rows`)."""
    out = ["| case | process | predicted ms | measured ms | makespan err | host issue err |",
           "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        for p in r.get("process_host", []):
            out.append(f"| {r['case']} | {p['process']} | {p['pred_s'] * 1e3:.3f} | {p['meas_s'] * 1e3:.3f} | "
                       f"{_p(p['error'])} | {_p(p['host_error'])} |")
    return "\n".join(out)


def _kernel_spans(case: Path, meas: Timeline, pred: Timeline, G: Any, run: Any = None, prof: Any = None
                  ) -> dict[str, Any]:
    """compare.json's ``ops`` of the prediction against the case's Kineto kernel spans (``profiler_ops.json`` of
    ``execute --profiler``): each op from when it got the GPU, and its wait (docs/metrics.md, "Per-op spans");
    {} without. With ``run`` (a profile -> the simulated Timeline) and ``prof``, the prediction is of the profiled
    iteration, as ``execute --compare --profiler`` makes it (:func:`schedsim.compare.profiled_profile`)."""
    from executor.profiling import kernel_timeline
    from schedsim.compare import profiled_profile

    f = case / "execute" / "profiler_ops.json"
    if not f.is_file():
        return {}
    maps = {int(r): m for r, m in json.loads(f.read_text()).items()}
    ktl = kernel_timeline(meas, maps, {n: list(G.predecessors(n)) for n in G.nodes})
    if ktl is None:
        return {}
    got = None if run is None or prof is None else profiled_profile(ktl, meas, prof)
    return compare_timelines(pred if got is None else run(got), ktl).to_dict().get("ops", {})


def _handwritten_s(case: Path) -> float | None:
    """The hand-written reference's median makespan (s) of a case folder, median over its processes; None."""
    _procs, ref = process_medians(case)
    return statistics.median(ref) if ref else None


def _worst_host_error(host: dict[Any, Any] | None) -> float | None:
    """The host issue error (compare.json's ``host_issue``: predicted against measured issue time of an
    uninstrumented iteration, per rank) furthest from 0, or None when the run did not record it."""
    errs = [d["error"] for d in (host or {}).values() if d.get("error") is not None]
    return max(errs, key=abs) if errs else None


def cases(runs: list[Path]) -> list[Path]:
    """Measured case folders of the runs; a case measured in several runs is taken from the last run given."""
    found: dict[str, Path] = {}
    for run in runs:
        for d in sorted(run.iterdir()):
            if (d / "execute" / "timeline.json").is_file():
                found[d.name] = d
    return [found[k] for k in sorted(found)]


def _p(x: float | None, signed: bool = True) -> str:
    return "n/a" if x is None else (f"{x * 100:+.1f} %" if signed else f"{abs(x) * 100:.1f} %")


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of the rows plus the goal summary (issue 39's goals): the makespan error against the
    executor's uninstrumented makespan and against the hand-written reference, per-op medians on the span
    (got the GPU -> end: Kineto kernels, where the case ran with --profiler) and on the events' window (stream
    reached -> end), the wait difference, and the executor against the reference."""
    out = ["| case | launch | predicted ms | execute ms | hand-written ms | err vs execute | err vs hand-written "
           "| per-op span median | per-op events median | wait median abs diff | execute vs hand-written "
           "| host issue err | worst op (events) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        worst = "" if r["worst_id"] is None else f"{r['worst_id']} {_p(r['worst_error'])}"
        launch = r["launch"] + (f", conn={r['max_connections']}" if r["max_connections"] else "")
        hw = "" if r.get("hw_s") is None else f"{r['hw_s'] * 1e3:.3f}"
        wd = "" if r.get("wait_diff_s") is None else f"{r['wait_diff_s'] * 1e6:.1f} µs"
        out.append(f"| {r['case']} | {launch} | {r['pred_s'] * 1e3:.3f} | {r['meas_s'] * 1e3:.3f} | {hw} | "
                   f"{_p(r['error'])} | {_p(r.get('hw_error'))} | {_p(r.get('span_median'), False)} | "
                   f"{_p(r['op_median'], False)} | {wd} | {_p(r.get('exec_vs_hw'))} | {_p(r.get('host_error'))} | "
                   f"{worst} |")
    out += ["", goals(rows)]
    return "\n".join(out)


def goals(rows: list[dict[str, Any]]) -> str:
    """One line per goal of issue 39 over ``rows``: makespan |error| median <= 3 % and worst <= 8 % (against the
    executor and against hand-written PyTorch), per-op median <= 15 % (the span where measured, else the
    events' window), executor within 3 % of hand-written on every case."""
    def stat(xs: list[float]) -> str:
        return "n/a" if not xs else f"median {statistics.median(xs) * 100:.1f} %, worst {max(xs) * 100:.1f} %"
    ex = [abs(r["error"]) for r in rows if r["error"] is not None]
    hw = [abs(r["hw_error"]) for r in rows if r.get("hw_error") is not None]
    per = [r["span_median"] if r.get("span_median") is not None else r["op_median"] for r in rows
           if r.get("span_median") is not None or r["op_median"] is not None]
    ov = [abs(r["exec_vs_hw"]) for r in rows if r.get("exec_vs_hw") is not None]
    return (f"makespan |error| against the executor: {stat(ex)} ({len(ex)} cases; goal median <= 3 %, worst <= 8 %); "
            f"against hand-written: {stat(hw)} ({len(hw)} cases); per-op median (span, else events): "
            f"{sum(m <= 0.15 for m in per)}/{len(per)} cases <= 15 %; executor vs hand-written: {stat(ov)}, "
            f"{sum(x <= 0.03 for x in ov)}/{len(ov)} cases within 3 %")


def op_records(ex: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(op id, record)`` of one ``execute`` folder's ``profiler_ops.json`` (id ``NAME@rRANK``), empty without one."""
    f = ex / "profiler_ops.json"
    if not f.is_file():
        return []
    d = json.loads(f.read_text())
    return [(f"{name}@r{rank}", rec) for rank, r in d.items() for name, rec in r.get("ops", {}).items()]


def idle_memset_gaps(recs: list[tuple[str, dict[str, Any]]]) -> dict[str, float | None]:
    """Per op id whose first kernel is a memset: its span less its busy time (µs) when it started on an idle GPU
    (its call, ``cpu_start_us`` + ``cpu_dur_us``, returned after every earlier op of its rank had ended on the
    GPU; Kineto's one clock), else None (queued behind them).

    >>> r = [("a@r0", {"gpu_start_us": 0.0, "gpu_end_us": 180.0, "gpu_busy_us": 170.0, "cpu_start_us": -40.0,
    ...               "cpu_dur_us": 60.0, "kernels": ["Memset (Device)", "nvjet_coopA"]}),
    ...      ("b@r0", {"gpu_start_us": 181.5, "gpu_end_us": 345.0, "gpu_busy_us": 162.0, "cpu_start_us": 30.0,
    ...               "cpu_dur_us": 40.0,
    ...               "kernels": ["Memset (Device)", "nvjet_coopA"]}),
    ...      ("c@r0", {"gpu_start_us": 100.0, "gpu_end_us": 120.0, "gpu_busy_us": 20.0, "kernels": ["nvjet"]})]
    >>> idle_memset_gaps(r)
    {'a@r0': 10.0, 'b@r0': None}
    """
    timed = sorted(((rec["gpu_start_us"], op, rec) for op, rec in recs if rec.get("gpu_start_us") is not None),
                   key=lambda t: t[0])
    out: dict[str, float | None] = {}
    busy_until: dict[str, float] = {}
    for start, op, rec in timed:
        rank = op.rsplit("@r", 1)[1]
        idle = rec.get("cpu_start_us", start) + rec.get("cpu_dur_us", 0.0) > busy_until.get(rank, float("-inf"))
        ks = rec.get("kernels") or []
        if ks and str(ks[0]).startswith("Memset") and len(ks) >= 2:
            out[op] = rec["gpu_end_us"] - start - rec["gpu_busy_us"] if idle else None
        busy_until[rank] = max(busy_until.get(rank, float("-inf")), rec["gpu_end_us"])
    return out


def shapes_of(case: Path) -> dict[str, tuple[str, int, int, int]]:
    """GEMM shape ``(dtype, m·batch, n, k)`` per op id of a case's measured schedule (its ``meta`` file and sets)."""
    from schedsim.api import lower_spec
    from schedsim.clicore import load as _load
    from schedsim.gpu.gemm import shape_key
    from schedsim.graph.build import graph_of
    from schedsim.kinds import KINDS

    meta = Timeline.read_json(case / "execute" / "timeline.json").meta
    file = Path(meta["file"])
    G = graph_of(lower_spec(_load(file, list(meta.get("set") or [])), file))
    return {n: shape_key(d["op"]) for n, d in G.nodes(data=True) if KINDS[d["op"].kind].cost == "gemm"}


def memset_collect(runs: list[Path]) -> dict[tuple[str, int, int, int], list[float | None]]:
    """``gemm.memset`` from measured runs: per GEMM shape that launched a memset, its gaps over every process of
    every case (None: not idle)."""
    out: dict[tuple[str, int, int, int], list[float | None]] = {}
    for run in runs:
        for case in sorted(p.parent.parent for p in run.glob("*/execute/timeline.json")):
            shapes = None
            for ex in [case / "execute", *sorted(case.glob("rep*/execute"))]:
                gaps = idle_memset_gaps(op_records(ex))
                if not gaps:
                    continue
                shapes = shapes if shapes is not None else shapes_of(case)
                for op, g in gaps.items():
                    if op in shapes:
                        out.setdefault(shapes[op], []).append(g)
    return out


def memset_rows(found: dict[tuple[str, int, int, int], list[float | None]]) -> tuple[list[list[Any]], list[str]]:
    """``gemm.memset`` rows ``[dtype, m, n, k, gap_us]`` (sorted) and one table line per shape."""
    every = [g for gs in found.values() for g in gs if g is not None]
    if not every:
        return [], []
    pooled = statistics.median(every)
    out, lines = [], []
    for key in sorted(found):
        idle = [g for g in found[key] if g is not None]
        gap = statistics.median(idle) if idle else pooled
        out.append([*key, round(gap, 3)])
        listed = ", ".join(f"{g:.1f}" for g in idle)
        how = f"{len(idle)} idle: {listed}" if idle else "never idle: pooled median"
        lines.append(f"| {key[0]} {key[1]}x{key[2]}x{key[3]} | {len(found[key])} | {gap:.2f} | {how} |")
    return out, lines


def with_memset_rows(runs: list[Path], profile: str, out: Path) -> str:
    """Write ``profile`` with ``gemm.memset`` set from ``runs``' Kineto kernel lists (:func:`memset_collect`,
    :func:`memset_rows`) to ``out``, print the rows' table, and return ``out`` as a path string."""
    import yaml

    got, lines = memset_rows(memset_collect(runs))
    print("| shape | ops with a memset | gap µs | idle gaps µs |\n|---|---:|---:|---|\n" + "\n".join(lines))
    prof = load_profile(profile)
    prof = prof.model_copy(update={"gemm": prof.gemm.model_copy(update={"memset": [tuple(r) for r in got]})})
    atomic_write_text(out, yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False, width=200))
    return str(out)


#: figures of a fresh process that are ratios, not µs: kept as they are by the ``scaled`` rules of :data:`HOST_RULES`
RATIOS = ("call_launch_fraction",)
#: the fields whose geometric mean is a process's speed in the ``*_composite`` rules of :data:`HOST_RULES`
COMPOSITE = ("eager_per_op_us", "eager_per_collective_us", "elementwise_call_us", "collective_after_kernel_us")


def _mid(procs: Sequence[dict[str, float]], speed: Sequence[float]) -> list[dict[str, float]]:
    """The process of the median ``speed`` (of an even count the faster middle one)."""
    order = sorted(range(len(procs)), key=lambda i: speed[i])
    return [procs[order[(len(procs) - 1) // 2]]]


def _factor(procs: Sequence[dict[str, float]], keys: Sequence[str]) -> list[float]:
    """Per process, the geometric mean over ``keys`` (those every process has, > 0) of its figure over the
    processes' median: its speed factor (1 the median process, > 1 slower)."""
    keys = [k for k in keys if all(p.get(k, 0) > 0 for p in procs)]
    med = {k: statistics.median(p[k] for p in procs) for k in keys}
    return [math.exp(sum(math.log(p[k] / med[k]) for k in keys) / len(keys)) for p in procs]


def _scaled(procs: Sequence[dict[str, float]], keys: Sequence[str] = ("eager_per_op_us",)) -> list[dict[str, float]]:
    return [{k: (v if k in RATIOS or k.startswith("gemm_call:") else v / f) for k, v in p.items()}
            for p, f in zip(procs, _factor(procs, keys), strict=True)]


#: ways to combine a calibration's fresh host processes (settled) before calibrate's field-by-field median: the
#: processes whose median the profile takes. ``median``: all of them (calibrate's rule); ``mid_process``: the one
#: whose ``eager_per_op_us`` is the median (of an even count the faster middle one); ``fastest``: the lowest
#: ``eager_per_op_us``; ``scaled``: all, each one's µs figures divided by its ``eager_per_op_us`` over the median
#: one (one speed factor per process; :data:`RATIOS` and ``gemm_call:*`` ratios kept); ``mid_composite`` /
#: ``scaled_composite``: the same with the geometric mean over :data:`COMPOSITE` as the speed
HOST_RULES: dict[str, Callable[[Sequence[dict[str, float]]], list[dict[str, float]]]] = {
    "median": list,
    "mid_process": lambda ps: _mid(ps, [p["eager_per_op_us"] for p in ps]),
    "fastest": lambda ps: [min(ps, key=lambda p: p["eager_per_op_us"])],
    "scaled": _scaled,
    "mid_composite": lambda ps: _mid(ps, _factor(ps, COMPOSITE)),
    "scaled_composite": lambda ps: _scaled(ps, COMPOSITE),
}


def fresh_host_costs(calib: dict[str, Any], rule: str = "median") -> dict[str, float]:
    """The host figures this checkout's calibrate keeps from a calibration JSON's fresh host processes
    (``host_fresh_processes``: each process's loops, :func:`executor.calibrate_host.settle_costs`, then the median
    over the processes ``rule`` of :data:`HOST_RULES` gives, :func:`~executor.calibrate_host.median_costs`), µs per
    call and ``gemm_call:*`` ratios; empty without fresh processes."""
    from executor.calibrate_host import median_costs, settle_costs

    fresh = [settle_costs(dict(p)) for p in calib.get("host_fresh_processes") or []]
    return median_costs(HOST_RULES[rule](fresh)) if fresh else {}


def fresh_host_fields(calib: dict[str, Any]) -> dict[str, Any]:
    """The ``launch:`` fields of :func:`fresh_host_costs`, as :func:`~executor.calibrate_host.launch_fields`
    rounds them; empty without fresh processes."""
    from executor.calibrate_host import launch_fields

    return launch_fields(fresh_host_costs(calib))


def with_host_rule(profile: str, rule: str, out: Path) -> str:
    """Write ``profile`` (a calibrated profile, its calibration JSON next to it) with the ``launch:`` fields and
    ``gemm.call`` rows its fresh processes give under ``rule`` (:data:`HOST_RULES`, :func:`fresh_host_costs`) to
    ``out``; return ``out`` as a path string."""
    import yaml

    from executor.calibrate_host import gemm_call_rows, launch_fields

    costs = fresh_host_costs(json.loads(Path(profile).with_suffix(".json").read_text()), rule)
    prof = load_profile(profile)
    prof = prof.model_copy(update={
        "launch": prof.launch.model_copy(update=launch_fields(costs)),
        "gemm": prof.gemm.model_copy(update={"call": [tuple(r) for r in gemm_call_rows(costs)]})})
    atomic_write_text(out, yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False, width=200))
    return str(out)


def host_rule_tables(by_rule: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: per rule of :data:`HOST_RULES` the makespan |error| median / worst against the executor and
    against hand-written and the count of cases whose |error| grows by more than 2 points over the ``median`` rule;
    those cases; per case each rule's error against the executor / hand-written (%)."""
    base = {r["case"]: r for r in by_rule["median"]}

    def stat(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 100:.1f} / {max(xs) * 100:.1f} %" if xs else "n/a"

    out = ["| rule | vs execute median / worst | vs hand-written median / worst | cases worse > 2 pt |",
           "|---|---:|---:|---:|"]
    worse = ["| rule | case | vs | median rule | rule |", "|---|---|---|---:|---:|"]
    for rule, rows in by_rule.items():
        n = 0
        for r in rows:
            for key, vs in (("error", "execute"), ("hw_error", "hand-written")):
                b, c = base[r["case"]][key], r[key]
                if b is not None and c is not None and abs(c) - abs(b) > 0.02:
                    n += 1
                    worse.append(f"| {rule} | {r['case']} | {vs} | {_p(b)} | {_p(c)} |")
        out.append(f"| {rule} | {stat([abs(r['error']) for r in rows if r['error'] is not None])} | "
                   f"{stat([abs(r['hw_error']) for r in rows if r['hw_error'] is not None])} | {n} |")
    each = ["| case | " + " | ".join(by_rule) + " |", "|---|" + "---:|" * len(by_rule)]
    for case in base:
        got = [{r["case"]: r for r in rows}[case] for rows in by_rule.values()]
        each.append(f"| {case} | " + " | ".join(f"{_p(r['error'])} / {_p(r['hw_error'])}" for r in got) + " |")
    return "\n\n".join("\n".join(t) for t in (out, worse, each))


def with_fresh_host(profile: str, out: Path) -> str:
    """Write ``profile`` (a calibrated profile's path, its calibration JSON next to it: the same name with
    ``.json``) with the ``launch:`` fields it leaves unset (None) filled from :func:`fresh_host_fields` to ``out``:
    an older calibration's profile with the host figures its own loops give under this checkout's calibrate (e.g.
    ``collective_after_kernel_us`` from ``mixed_pair_us``); print them; return ``out`` as a path string."""
    import yaml

    prof = load_profile(profile)
    got = fresh_host_fields(json.loads(Path(profile).with_suffix(".json").read_text()))
    add = {k: v for k, v in got.items() if k in type(prof.launch).model_fields and getattr(prof.launch, k) is None}
    print("launch fields filled from the fresh host processes: "
          + (", ".join(f"{k} {v}" for k, v in add.items()) or "none"))
    prof = prof.model_copy(update={"launch": prof.launch.model_copy(update=add)})
    atomic_write_text(out, yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False, width=200))
    return str(out)


def print_kinds(r: dict[str, Any]) -> None:
    """``--kinds``: a replayed case's per-kind totals, one line per op kind."""
    for kind, d in r["by_kind"].items():
        print(f"  {r['case']:<24} {kind:<12} n={d['n']:<4} pred {d['pred_total_s'] * 1e3:9.3f} ms  meas "
              f"{d['meas_total_s'] * 1e3:9.3f} ms  median |err| {_p(d['median_abs_error'], False)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path,
                    help="run folders of benchmarks/accuracy/two_gpu_suite.sh (OUT or WORK)")
    ap.add_argument("--profile", default=None, help="profile name or path [default: each run's calibrated one]")
    ap.add_argument("--gpu-model", default=None, help="waves or replay [default: the profile's]")
    ap.add_argument("--md", type=Path, default=None, help="also write the table as markdown here")
    ap.add_argument("--kinds", action="store_true", help="also print per-kind totals of each case")
    ap.add_argument("--exclude", default=None, help="leave out cases whose name contains this (e.g. _sleep: the "
                    "wait A/B runs of benchmarks/accuracy/one_gpu_suite.sh)")
    ap.add_argument("--process-host", action="store_true", help="predict each case with the host costs its process "
                    "measured (execute --measure-host), where it did; and print each such process (execute/, rep<N>/) "
                    "predicted with its own host costs against its own makespan")
    ap.add_argument("--host-calls", action="store_true", help="also print, per case, measured less predicted host "
                    "time per call by op kind and the kind of the call before it, and per process its uninstrumented "
                    "iterations' host issue against its stamped ones' (a process that changed speed between them)")
    ap.add_argument("--memset-rows", type=Path, default=None, metavar="OUT.yaml", help="write --profile with "
                    "gemm.memset taken from the runs' Kineto kernel lists (profiler_ops.json: GEMMs whose first kernel "
                    "is a memset; the gap where the GPU was idle) to OUT.yaml, and replay with it")
    ap.add_argument("--fresh-host", type=Path, default=None, metavar="OUT.yaml", help="write --profile (a "
                    "calibrated profile, its .json next to it) with the launch fields it leaves unset filled from its "
                    "calibration's fresh host processes as this checkout's calibrate computes them, to OUT.yaml, and "
                    "replay with it (before --memset-rows)")
    ap.add_argument("--host-rules", action="store_true", help="replay with --profile (a calibrated profile, its "
                    ".json next to it) rebuilt from its fresh host processes by each rule of HOST_RULES (median: "
                    "calibrate's; one process; one speed factor per process), and print per rule the makespan errors "
                    "and the cases worse by > 2 points than the median rule")
    a = ap.parse_args(argv)
    if a.host_rules:
        return host_rules_main(a)
    for run in a.runs:
        if not run.is_dir():
            ap.error(f"{run}: not a run folder (give OUT or WORK of one_gpu_suite.sh / two_gpu_suite.sh, the folder "
                     "that holds one folder per case; unpack a runs.tgz first)")
    if a.fresh_host is not None:
        if not a.profile:
            ap.error("--fresh-host needs --profile (a calibrated profile with its .json next to it)")
        a.profile = with_fresh_host(a.profile, a.fresh_host)
    if a.memset_rows is not None:
        if not a.profile:
            ap.error("--memset-rows needs --profile (the profile to add the rows to)")
        a.profile = with_memset_rows(a.runs, a.profile, a.memset_rows)
    rows = []
    for case in cases(a.runs):
        if a.exclude and a.exclude in case.name:
            continue
        prof = a.profile or run_profile(case.parent)
        try:
            rows.append(replay_case(case, prof, a.gpu_model, a.process_host))
        except Exception as e:  # noqa: BLE001 - one broken case must not hide the others
            print(f"{case}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if a.kinds:
            print_kinds(rows[-1])
    md = table(rows)
    if a.process_host:
        md += "\n\n" + process_host_table(rows)
    if a.host_calls:
        md += "\n\n" + host_call_table(rows) + "\n\n" + process_phase_table(rows)
    print(md)
    if a.md:
        atomic_write_text(a.md, md + "\n")
    return 0


def host_rules_main(a: argparse.Namespace) -> int:
    """``--host-rules``: the runs replayed with one profile per rule of :data:`HOST_RULES`, written to a temporary
    folder; prints :func:`host_rule_tables` (and writes it to ``--md``)."""
    import tempfile

    if not a.profile:
        print("error: --host-rules needs --profile (a calibrated profile with its .json next to it)", file=sys.stderr)
        return 2
    by_rule: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rule in HOST_RULES:
            prof = with_host_rule(a.profile, rule, Path(tmp) / f"{rule}.yaml")
            by_rule[rule] = [replay_case(c, prof, a.gpu_model) for c in cases(a.runs)
                             if not (a.exclude and a.exclude in c.name)]
    md = host_rule_tables(by_rule)
    print(md)
    if a.md:
        atomic_write_text(a.md, md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
