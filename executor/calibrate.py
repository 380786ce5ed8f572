"""``schedsim calibrate``: measure a hardware profile under torchrun.

What is measured (rank 0 alone unless said otherwise; the other ranks wait):

1. **GEMM** times: ``torch.matmul(a, b, out=c)`` on random inputs, as *kernel
   time when launched back to back* (:meth:`_Bench.time_batched`: R launches
   queued behind ``torch.cuda._sleep`` between two events, elapsed / R). For
   long GEMMs R = 1, i.e. the median of ``--iters`` single event-timed launches
   (the method of the shipped h200 table); for tiny ones a single launch would
   also time the event records and launch latency, which the eager launch
   overhead already accounts for. Input sets rotate (3) when they fit in 3× the
   L2 cache. Shapes: every matmul of the given schedules, ``--gemm MxNxK``
   extras and, unless ``--no-grid``, a default grid (the shapes of the shipped
   h200 table and S0 of docs/sources.md). ``fp32`` is timed with TF32 off, ``tf32`` with it on.
   On CUDA, for each shape also: its kernel's grid and CTAs per SM (the occupancy calculation from
   the Kineto record: ``gemm.ctas``, ``gemm.ctas_per_sm``); for GEMMs under 200 µs its time as a
   CUDA-graph node with operands in L2 and from HBM (``gemm.graph``, :func:`gemm_graph_times`) and,
   for the first 24 shapes, the graph-fork probe at that shape (``launch.graph_fork_edges``,
   :func:`fork_edge_rows`). Rules cta-count, graph-forks and graph-nodes of :mod:`schedsim.gpu.rules` use them.
2. **Collectives** (all ranks, world size ≥ 2): all_reduce, all_gather,
   reduce_scatter, all_to_all, broadcast, reduce, a sendrecv ring (one
   ``batch_isend_irecv`` per step) and unbatched one-way p2p over a size sweep;
   each size is timed on the GPU side (:meth:`_Bench.time_gpu_side`: calls
   queued back to back behind ``torch.cuda._sleep`` between two events, so the
   table holds kernel time and the host call cost stays in ``launch:``), as the
   slowest rank's median, printed as an
   nccl-tests-style table (size, count, type, redop, root, time, algbw, busbw,
   #wrong: every element of the output is checked against the expected value).
   busbw = algbw × the nccl-tests factor (:func:`schedsim.network.links.bus_factor`).
3. **Copies**: pinned h2d and d2h, and d2d (bytes read plus written), 256 MiB
   (8 MiB with ``--quick``).
4. **Launch overhead**: host time per op of (a) a plain loop of tiny
   ``torch.matmul`` launches and (b) the executor's own issue path over a
   two-stream probe of tiny ops with cross-stream waits, without per-op timing
   (stream switch, event waits, launch) and with it (plus start/end events and
   NVTX); of a small all_reduce call; of one ``CUDAGraph.replay()``; and the
   GPU time per node of a graph chain of ``add_`` minus its back-to-back time
   (``launch.graph_per_op_us``, negative on H200), the same chain from HBM
   (``gpu.hbm_miss_us``) and the device's L2 size (``gpu.l2_bytes``).
   The profile's ``launch:`` figures are plain PyTorch's host cost per call by
   kind (:mod:`executor.calibrate_host`): what a user's program pays. The
   executor's own extra cost per op is kept apart in
   ``executor_extra_per_op_us``; (b) stays in the JSON.
6. **NCCL beside GEMMs** (world ≥ 2, CUDA; :mod:`executor.calibrate_nccl`):
   the collective's slowdown beside wave-filling GEMMs, the GEMMs' slowdown
   beside it, the NCCL kernel's CTA count → the profile's ``nccl:`` section.
5. **Contention**: a bf16 GEMM series beside a pinned h2d copy against each
   alone (copy-engine factors): factor = time together / time alone − 1 over
   the overlapped part, each side sized to about the other's duration. Duplex
   copies (CUDA): streams of pinned h2d and d2h copies together against each
   alone (:func:`duplex_factors`).

Where each part lives: the options and the timer (``_Bench``) in :mod:`executor.calibrate_bench`; GEMMs and
their kernels' CTAs in :mod:`executor.calibrate_gemm`; launch overhead and CUDA-graph timings in
:mod:`executor.calibrate_graph`; copies, duplex copies and contention in :mod:`executor.calibrate_copy`;
collectives and p2p in :mod:`executor.calibrate_comm`; host costs per call in :mod:`executor.calibrate_host`;
NCCL beside GEMMs in :mod:`executor.calibrate_nccl`. This module runs them (:func:`run_calibrate`) and
assembles the profile.

Output: the profile YAML (validated as :class:`HardwareProfile`) and a JSON
of the raw measurements next to it (same stem, ``.json``). What is not
measured (peak rates, topology, links when world = 1) comes from ``--base``.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

from executor.calibrate_bench import CalibrateOptions, _Bench, _log
from executor.calibrate_comm import _sweep_collectives, p2p_one_way_speedup
from executor.calibrate_copy import _measure_contention, _measure_copies, _measure_duplex
from executor.calibrate_gemm import CALL_ROW_MAX_S, _gemm_shapes, _measure_gemms, measured_peaks
from executor.calibrate_graph import _l2_fields, _measure_launch, _set_graph_edge, _sig, graph_replay_figures
from executor.calibrate_host import (
    comm_host_costs,
    fresh_comm_fields,
    fresh_process_costs,
    gemm_call_rows,
    host_costs,
    launch_fields,
    median_costs,
)
from executor.calibrate_logs import base_profile_dict, default_profile_name, write_profile
from executor.calibrate_nccl import nccl_beside_gemm
from executor.dist import on_issuing_thread
from schedsim.io import CALIBRATION_GENERATOR

__all__ = ["run_calibrate"]


def run_calibrate(o: CalibrateOptions) -> dict[str, Any]:
    """Run the measurements and write the profile (rank 0). Returns the profile dict on rank 0.

    Raises
    ------
    SchedsimError
        Bad schedule, base profile or options.
    """
    import torch

    from executor.dist import env_world, setup_dist

    _rank, world, _lr = env_world()
    ctx = setup_dist(o.backend, o.device, 600.0, [tuple(range(world))])
    log = _log(ctx)
    b = _Bench(ctx, o.iters)
    raw: dict[str, Any] = {"generator": CALIBRATION_GENERATOR,  # first: the mark of schedsim's file (claim_file)
                           "date": datetime.date.today().isoformat(), "torch": torch.__version__,
                           "backend": ctx.backend, "world_size": world}
    dev_name = torch.cuda.get_device_properties(ctx.device).name if ctx.cuda else "CPU"
    raw["device"] = dev_name
    log(f"schedsim calibrate on {world} rank(s), {dev_name}, backend {ctx.backend}")
    from executor.dist import warn_oversubscribed

    warn_oversubscribed(ctx.cuda, ctx.rank)
    # the host cost of communication calls first, before the GEMM measurements run torch.profiler (after it, a
    # process's launches cost ~20 % more: benchmarks/probes/host/call_patterns.py --only after_profiler;
    # docs/validation.md, "Evidence cited by the code")
    # on the thread execute issues its iterations from (executor.dist.on_issuing_thread): PyTorch's NCCL Flight
    # Recorder gathers the caller's Python stack on every collective, so the probes' calls are made as deep as
    # execute's, not from the CLI's ~20 frames
    issuing = functools.partial(on_issuing_thread, device=ctx.device if ctx.cuda else None)
    comm_host = issuing(functools.partial(comm_host_costs, b))
    # a CUDA graph replay's host time and start likewise (a replay's start holds its call's host time)
    replay = graph_replay_figures(b) if ctx.cuda and ctx.rank == 0 else None
    if ctx.rank == 0:
        shapes = _gemm_shapes(o, ctx.cuda)
        log(f"[gemm] {len(shapes)} shapes")
        raw["gemm"] = _measure_gemms(b, shapes, log)
        raw["gemm_single_launch"] = b.single_gemm
        raw["gemm_ctas"] = b.gemm_ctas
        raw["gemm_graph"] = b.gemm_graph
        raw["gemm_fork"] = b.gemm_fork
        raw["gemm_ctas_per_sm"] = b.gemm_occ
        raw["gemm_reduce"] = b.gemm_reduce
        raw["gemm_memset"] = b.gemm_memset
        if ctx.cuda:
            from executor.calibrate_waves import measure_sm_stream, measure_wave_tail, pick_shapes

            sms = int(torch.cuda.get_device_properties(ctx.device).multi_processor_count)
            raw["wave_tail"] = [measure_wave_tail(torch, ctx.device, shape, grid, log)
                                for shape, grid in pick_shapes(raw["gemm"], b.gemm_ctas, sms)]
            raw["sm_stream"] = measure_sm_stream(torch, ctx.device, sms, log)
        raw["copies"] = _measure_copies(b, o.quick, log)
        raw["launch"] = _measure_launch(b, log, replay)
        # rule host-issue's gemm.call rows: the host call of each GEMM short enough for the host to bound it
        calls = [(r[0], r[1], r[2], r[3]) for r in raw["gemm"] if ctx.cuda and r[4] * 1e-3 <= CALL_ROW_MAX_S]
        raw["host"] = issuing(functools.partial(host_costs, b, log, calls))
        n_fresh = o.host_processes if o.host_processes is not None else (3 if ctx.cuda else 0)
        if n_fresh > 0:
            fresh = fresh_process_costs("cuda" if ctx.cuda else "cpu", n_fresh, log, gemms=calls)
            raw["host_fresh_requested"] = n_fresh
            if fresh:
                raw["host_in_process"] = dict(raw["host"])
                raw["host_fresh_processes"] = fresh
                raw["host"].update(median_costs(fresh))
            else:
                log(f"[launch] none of the {n_fresh} fresh processes finished: the launch section keeps this "
                    "process's own host costs")
        if ctx.cuda:
            raw["contention_copy"] = _measure_contention(b, o.quick, log)
            raw["duplex"] = _measure_duplex(b, o.quick, log)
            if not o.quick:
                from executor.calibrate_power import measure_power

                raw["power"] = measure_power(b.torch, ctx.device, log)
    ctx.barrier()
    if ctx.rank == 0:
        log("[launch] communication calls, host time: " + ", ".join(f"{k} {v:.2f} us" for k, v in comm_host.items()))
        if "host_in_process" in raw:  # this process's own figures stay beside the fresh processes' medians
            raw["host_in_process"].update(comm_host)
        raw["host"].update(fresh_comm_fields(comm_host, median_costs(raw.get("host_fresh_processes") or []), world))
    if world >= 2:
        raw["collectives"] = _sweep_collectives(b, o, log)
        raw["nodes"] = max(1, world // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world))))
        if ctx.cuda:
            raw["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
            raw["nccl"] = nccl_beside_gemm(b, o.quick, log)
    else:
        log("[collectives] world size 1: no collective sweep (it needs 2 or more ranks); collective tables, links "
            "and NCCL contention come from the base profile")
    prof = None
    if ctx.rank == 0:
        prof = _assemble(o, raw, ctx, dev_name)
        if raw.get("collectives"):
            _fit_scale_up(prof, raw, f"{dev_name}, {raw['date']}, torch {raw['torch']}")
        name = prof["name"]
        write_profile(prof, o.out, f"# {name}: measured by `schedsim calibrate` on {raw['date']} ({dev_name}, torch "
                      f"{raw['torch']}, {world} rank(s)); base profile {o.base!r} for what was not measured.")
        from schedsim.io import atomic_write_text, output_target

        if isinstance(output_target(o.out), Path):  # the raw measurements go beside a profile file, not to stdout
            atomic_write_text(Path(o.out).with_suffix(".json"), json.dumps(raw, indent=1), kind="calibration")
            log(f"wrote {o.out} and {Path(o.out).with_suffix('.json')}")
    ctx.barrier()
    ctx.close()
    return prof or {}


def _cpu_gpu_fields(g: dict[str, Any], gemm_rows: list[list[Any]], base: str, where: str) -> None:
    """The ``gpu`` section of a profile measured on CPU ranks, in place: no field of the base profile's GPU that
    describes that GPU stays. ``peak_tflops`` holds only the dtypes the GEMM table measured, each at its best
    measured rate (``gemm_efficiency`` 1: the roofline fallback is then that rate), so a dtype the run did not
    measure falls back to the fp32 rate (:mod:`schedsim.gpu.cost`'s rule) rather than the base GPU's datasheet peak;
    ``sms``, ``sm_stream_GBps`` (SM occupancy, rule hbm-share of :mod:`schedsim.gpu.rules`) are left out; a warning
    names what was dropped."""
    peaks = measured_peaks(gemm_rows)
    dropped = sorted(set(g.get("peak_tflops", {})) - set(peaks))
    g["peak_tflops"] = peaks or {"fp32": 1e-3}
    g["gemm_efficiency"] = 1.0
    gone = [k for k in ("sms", "sm_stream_GBps") if g.get(k) is not None]
    for k in gone:
        g[k] = None
    g["source"] = (f"CPU ranks: memory bandwidth from a host copy; peak_tflops = the best measured GEMM rate per "
                   f"dtype ({', '.join(peaks) or 'none measured: 1 GFLOP/s placeholder'}); not measured, so left "
                   f"out: the base profile {base!r}'s peaks for {', '.join(dropped) or 'no other dtype'} and its "
                   f"{', '.join(gone) or 'SM fields'}; {where}")
    print(f"warning: calibrate on CPU ranks: {base!r}'s GPU figures are not copied: peak_tflops only for the "
          f"measured {', '.join(peaks) or '(none)'}" + (f" (left out: {', '.join(dropped)})" if dropped else "")
          + (f"; {', '.join(gone)} left out" if gone else ""), file=sys.stderr, flush=True)


def _warn_base_peaks(base_gpu: str, gpu: str, base: str) -> None:
    """Warn when the profile keeps the base profile's ``peak_tflops`` (calibrate does not measure peaks) for
    another GPU than the base's (names differ in their first two words: "NVIDIA H200" vs "NVIDIA A100")."""
    if base_gpu.split()[:2] != gpu.split()[:2]:
        print(f"warning: calibrate: peak_tflops (the roofline for GEMMs outside the measured table) copied from "
              f"base profile {base!r} ({base_gpu}), not measured on {gpu}: pass --base with a profile of this GPU, "
              "or edit gpu.peak_tflops", file=sys.stderr, flush=True)


def _power_section(pw: dict[str, Any], where: str) -> dict[str, Any]:
    """The profile's ``power:`` section from :func:`executor.calibrate_power.measure_power`'s result ``pw``."""
    shape = "x".join(map(str, pw["shape"]))
    duties = ", ".join(f"{float(v):.2f}" for k, v in sorted(pw["achieved"].items()) if k != "1.0")
    out = {"gemm_slowdown_by_duty": pw["curve"],
           "source": f"measured {where} (executor/calibrate_power.py): bf16 {shape} GEMMs back to back "
                     f"and at duty cycles {duties}, sustained time over burst time, the idle-gap cost "
                     "of the least-slowed duty below 1 divided out; onset_s: when the back-to-back GEMMs first ran "
                     "slower by half the steady slowdown"}
    if pw.get("onset_s") is not None:
        out["onset_s"] = pw["onset_s"]
    return out


def _assemble(o: CalibrateOptions, raw: dict[str, Any], ctx: Any, dev_name: str) -> dict[str, Any]:
    d = base_profile_dict(o.base)
    date = raw["date"]
    where = f"{dev_name}, {date}, torch {raw['torch']}"
    d["name"] = default_profile_name(o.name, Path(o.out))
    d["description"] = (f"Measured by schedsim calibrate on {where} ({raw['world_size']} rank(s), {raw['backend']}). "
                        f"Unmeasured parts from profile {o.base!r}: {d.get('description', '').strip()[:300]}")
    cp = raw["copies"]
    L = raw["launch"]
    if ctx.cuda:
        base_gpu = d["gpu"]["name"]
        d["gpu"]["name"] = dev_name if dev_name.startswith("NVIDIA") else f"NVIDIA {dev_name}"
        _warn_base_peaks(base_gpu, d["gpu"]["name"], o.base)
        d["gpu"]["hbm_GBps"] = round(cp["d2d_GBps"], 1)
        if "kernel_floor_us" in L:
            d["gpu"]["kernel_floor_us"] = round(L["kernel_floor_us"], 2)
        d["gpu"].update(_l2_fields(L))
        from schedsim.hardware.profile import GPU

        if "sms" in GPU.model_fields:  # occupancy-aware sharing in the engine
            import torch

            d["gpu"]["sms"] = int(torch.cuda.get_device_properties(ctx.device).multi_processor_count)
        d["gpu"]["source"] = (f"peaks: base profile {o.base!r}; hbm_GBps: measured d2d copy (read+write); "
                              f"kernel_floor_us: back-to-back time of a 1-element add; sms: the device's "
                              f"multiprocessor "
                              f"count; l2_bytes: the device's L2_cache_size; hbm_miss_us: a graph node of add_ on "
                              f"32x1024 bf16 from HBM less in L2; {where}")
    else:
        d["gpu"]["name"] = "CPU (gloo ranks)"
        d["gpu"]["hbm_GBps"] = round(max(cp["d2d_GBps"], 0.1), 2)
        d["gpu"].update(_l2_fields(L))
        _cpu_gpu_fields(d["gpu"], raw["gemm"], o.base, where)
    H = raw["host"]
    fresh = raw.get("host_fresh_processes") or []
    fresh_kinds = [k for k in ("eager_per_op_us", "event_wait_us", "stream_switch_us", "memcpy_call_us",
                               "elementwise_call_us", "call_launch_fraction",
                               "executor_extra_per_op_us", "first_op_extra_us",
                               *(("eager_per_collective_us", "first_collective_extra_us",
                                  "collective_after_kernel_us", "collective_warmup_us")
                                 if raw["world_size"] == 1 else ()))
                  if any(k in f or (k == "collective_warmup_us" and "warmup_pair1_extra_us" in f) for f in fresh)]
    if any("cold_kernel_extra_us" in f for f in fresh):  # CUDA only; its collective kind at world 1 only
        fresh_kinds.append("cold_first_call_us" if raw["world_size"] == 1
                           else "cold_first_call_us (kernel, elementwise)")
    fresh_note = (f"; {', '.join(fresh_kinds)} are medians over {len(fresh)} fresh processes "
                  f"(calibrate_host.fresh_process_costs; this process's own figures are host_in_process in the .json)"
                  if fresh else
                  f"; none of the {raw['host_fresh_requested']} fresh processes asked for finished: this process's "
                  f"own host costs" if raw.get("host_fresh_requested") else "")
    d["launch"] = {
        "p2p_call_us": None, "batch_p2p_call_us": None, "event_wait_us": None,  # measured only where they exist
        **launch_fields(H),
        "graph_launch_us": round(L.get("graph_launch_us", d["launch"]["graph_launch_us"]), 2),
        "graph_per_op_us": round(L.get("graph_per_op_us", d["launch"]["graph_per_op_us"]), 3),
        "graph_start_us": (round(L["graph_start_us"], 2) if "graph_start_us" in L
                           else d["launch"].get("graph_start_us")),
        "graph_timing_event_us": round(L.get("graph_timing_event_us",
                                             d["launch"].get("graph_timing_event_us", 0.0)), 2),
        "graph_timing_gap_us": (round(L["graph_timing_gap_us"], 2) if "graph_timing_gap_us" in L
                                else d["launch"].get("graph_timing_gap_us")),
        "source": (f"measured {where}: host time per call of plain PyTorch (executor/calibrate_host.py), loops of "
                   f"200 calls with the GPU kept busy{fresh_note}: eager_per_op_us = torch.matmul 64x64; "
                   f"eager_per_collective_us"
                   f" = dist.all_reduce 1 KiB, calls back to back; collective_after_kernel_us = an fp32 1x2048x2048 "
                   f"GEMV and the all_reduce of its output alternating, the GPU idle, the pair's loop less the "
                   f"GEMV's (a collective right after a call of another kind); collective_warmup_us = the first 3 of "
                   f"8 such layers after the executor's iteration start (IterationClock.start), each less that "
                   f"pair, the first less first_op_extra_us + first_collective_extra_us "
                   f"(calibrate_host.tp_layer_costs); "
                   f"first_op_extra_us / first_collective_extra_us ="
                   f" first matmul / all_reduce after the executor's iteration start (IterationClock.start), the "
                   f"switch to the iteration's stream (torch.cuda.set_stream) timed with the matmul, minus steady; "
                   f"p2p_call_us = one "
                   f"dist.isend/irecv; batch_p2p_call_us = one "
                   f"batch_isend_irecv of a send+recv; event_wait_us = event.record + stream.wait_event; "
                   f"memcpy_call_us = a 4 KiB copy_; elementwise_call_us = torch.add(x, y, out=z) of 4 KiB uint8 "
                   f"(a bytes-only compute op); call_launch_fraction = (host time from a start event's record to "
                   f"the kernel's launch) / the call, a bf16 2048^3 matmul on an idle GPU against back to back; "
                   f"stream_switch_us = (a torch.cuda.set_stream switch + the "
                   f"matmul launch) - the launch (the context manager's is stream_context_us in the .json); "
                   f"graph_launch_us = CUDAGraph.replay() of a 1-node graph; graph_start_us = an event on the "
                   f"idle stream, that replay and an event after it, less the node's time in a graph chain; "
                   f"graph_per_op_us = GPU time of an add_ on 32x1024 bf16 as a node of a 64-node graph chain minus "
                   f"its back-to-back time (negative: a node is shorter; without an L2 size, a 300-node matmul "
                   f"graph, clamped at 0); "
                   f"graph_timing_event_us = span between an op's timing events in a 64-op graph (GEMM, add_) "
                   f"minus the untimed graph's time per op; graph_timing_gap_us = one op's end event to the next "
                   f"op's start event in that graph; "
                   f"executor_extra_per_op_us = schedsim execute's lean loop ({H['executor_lean_per_op_us']:.2f} "
                   f"us/op) minus the same two-stream probe by hand ({H['by_hand_per_op_us']:.2f} us/op); "
                   f"cold_first_call_us = the first add, 64x64 matmul and 1 KiB all_reduce after the host waited "
                   f"~2 ms for the GPU, less the same first calls after a synchronize (the add: less its steady "
                   f"call; executor/calibrate_host._cold_first_calls)"
                   if ctx.cuda else
                   f"measured on CPU ranks {where} (host time per call; no events or graphs on CPU ranks: graph "
                   f"values from {o.base!r}); executor_extra_per_op_us = lean loop minus the same ops by hand"
                   f"{fresh_note}"),
    }
    d["gpu"]["max_connections"] = int(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8"))
    if "nccl" in raw:
        nc = raw["nccl"]
        unb = {r["size"]: r["time_us"] for r in (raw.get("collectives") or {}).get("p2p_unbatched", [])}
        bat = {r["size"]: r["time_us"] for r in (raw.get("collectives") or {}).get("sendrecv", [])}
        pairs = ", ".join(f"{s} B {unb[s]:.1f}/{bat[s]:.1f} us" for s in sorted(unb) if s in bat)
        one_way = p2p_one_way_speedup(unb, bat)
        d["nccl"] = {"sms_per_collective": int(nc["sms_per_collective"] or 16),
                     "slowdown_beside_gemm": round(nc["slowdown_beside_gemm"], 3),
                     "gemm_slowdown_beside_nccl": round(nc["gemm_slowdown_beside_nccl"], 3),
                     "unbatched_p2p_serialized": True,
                     **({"p2p_one_way_speedup": round(one_way[0], 3)} if one_way else {}),
                     "source": (f"measured {where} (executor/calibrate_nccl.py): all_gather of {nc['comm_bytes']} B "
                                f"beside bf16 {nc['gemm_side']}^3 GEMM series issued first (comm slowdown) and "
                                f"after it (GEMM slowdown over the overlapped part); sms_per_collective = the NCCL "
                                f"kernel's grid in a Kineto trace"
                                + ("" if nc["sms_per_collective"] else " (no grid in the trace: NCCL's 16 assumed)")
                                + "; unbatched_p2p_serialized: NCCL docs (Group Calls) and PyTorch's eager-init "
                                  "warning; GPU-side p2p unbatched one-way / batched ring: " + (pairs or "n/a")
                                + (f"; p2p_one_way_speedup = batched exchange / one-way time at {one_way[1]} B "
                                   f"(the largest size of both sweeps), at least 1" if one_way else ""))}
    if not ctx.cuda:
        d.pop("power", None)  # a CPU profile has no GPU power limit
    if "power" in raw:
        d["power"] = _power_section(raw["power"], where)
    d["memcpy"] = {"h2d_GBps": round(cp["h2d_GBps"], 2), "d2h_GBps": round(cp["d2h_GBps"], 2),
                   "d2d_GBps": round(cp["d2d_GBps"], 1), "latency_us": round(cp["latency_us"], 2),
                   "source": f"measured {where}: pinned host buffers, {8 if o.quick else 256} MiB copies, median "
                             "of 10; d2d counts bytes read plus written; latency = a 4 KiB h2d copy"}
    d["gemm"] = {"source": f"measured {where}: torch.matmul(a, b, out=c) on random inputs; kernel time when "
                           "launched back to back (R launches queued behind torch.cuda._sleep, R = 2 ms / "
                           "single-launch "
                           "time capped at 200, elapsed / R, median of 5; R = 1 for long GEMMs, i.e. a single "
                           "event-timed launch, median of --iters), 3 rotating input sets when they fit in 3x L2; "
                           "'fp32' = TF32 off, 'tf32' = TF32 on; call rows: host time of one call over the 64x64 "
                           "matmul's, loops of 200 calls behind a sleep, GEMMs up to 0.2 ms, median over the fresh "
                           "host processes; memset rows: a Kineto trace of 5 calls, each on an idle GPU, the memset's "
                           "end to the main kernel's start, median of the last 4. Single-launch times are in the "
                           ".json next to this file"
                           if ctx.cuda else f"measured on CPU {where}",
                 "entries": [list(r) for r in raw["gemm"]], "shape_curve_from": None,
                 "ctas": [list(r) for r in raw.get("gemm_ctas", [])],
                 "graph": [list(r) for r in raw.get("gemm_graph", [])],
                 "ctas_per_sm": [list(r) for r in raw.get("gemm_ctas_per_sm", [])],
                 "reduce": [list(r) for r in raw.get("gemm_reduce", [])],
                 "memset": [list(r) for r in raw.get("gemm_memset", [])],
                 "call": gemm_call_rows(raw["host"])}
    coll = raw.get("collectives")
    if coll:
        n = raw["world_size"]
        tables = {k: {int(kk): vv for kk, vv in v.items()} for k, v in d["collectives"]["tables"].items()}
        for kind, rows in coll.items():
            if kind == "p2p_unbatched":  # no table of its own: kept in the .json and nccl.source
                continue
            tab = [[float(r["size"]), _sig(r["busbw"])] for r in rows if r["busbw"] > 0]
            if tab:
                tables.setdefault(kind, {})[n] = tab
        how = ("GPU-side kernel time: R back-to-back calls queued behind torch.cuda._sleep between two CUDA "
               "events, elapsed / R (R = 2^28 B / size, 2 to 200), median of 5, slowest rank; the host call cost is "
               "in launch:, single-launch host-inclusive times are in the .json" if ctx.cuda else
               "host time per call (median), slowest rank")
        d["collectives"] = {"tables": tables, "source": f"measured {where}: schedsim calibrate sweep over {n} ranks "
                            f"({raw['backend']}): {how}; nccl-tests busbw factors; sendrecv = batched ring "
                            f"(batch_isend_irecv)"}
        ar = coll.get("all_reduce") or []
        if ar:
            big = max(ar, key=lambda r: r["size"])
            small = min(ar, key=lambda r: r["size"])
            link = d["topology"]["intra_node_link"]
            d["links"][link] = {"bandwidth_GBps": _sig(max(r["busbw"] for r in ar)),
                                "latency_us": _sig(small["time_us"] / max(1, 2 * (n - 1))),
                                "source": f"measured {where}: best all_reduce busbw of the sweep; latency = the "
                                          f"smallest all_reduce ({small['size']} B) time / 2(n-1); largest size "
                                          f"{big['size']} B"}
    cont = dict(d["contention"])
    srcs = []
    if "contention_copy" in raw:
        cc = raw["contention_copy"]
        cont["compute_slowdown_with_copy"] = round(cc["compute_slowdown_with_copy"], 4)
        cont["copy_slowdown_with_compute"] = round(cc["copy_slowdown_with_compute"], 4)
        srcs.append(f"copy factors measured {where} (bf16 GEMM series beside a pinned h2d copy vs alone)")
    else:
        srcs.append(f"copy factors (compute_slowdown_with_copy, copy_slowdown_with_compute) from {o.base!r}: not "
                    "measured on these ranks")
    if "duplex" in raw:
        dx = raw["duplex"]
        cont["h2d_slowdown_beside_d2h"] = round(dx["h2d_slowdown_beside_d2h"], 4)
        cont["d2h_slowdown_beside_h2d"] = round(dx["d2h_slowdown_beside_h2d"], 4)
        srcs.append(f"duplex factors measured {where} ({int(dx['chunks'])} pinned copies of "
                    f"{int(dx['chunk_bytes']) >> 20} MiB each way, together vs alone)")
    else:
        srcs.append(f"duplex factors (h2d_slowdown_beside_d2h, d2h_slowdown_beside_h2d) from {o.base!r}: not "
                    "measured on these ranks")
    cont["source"] = "; ".join(srcs)
    d["contention"] = cont
    _set_graph_edge(d, L, o.base, raw.get("gemm_fork") or [])
    from executor.calibrate_waves import assemble_wave_tail

    assemble_wave_tail(d, raw, where)
    _set_sm_stream(d, raw.get("sm_stream"), where)
    return d


def _fit_scale_up(d: dict[str, Any], raw: dict[str, Any], where: str) -> None:
    """The sweep's tier figures, in place: on a base profile with ``topology.scale_up``, the collective sweep
    (``raw["collectives"]`` over ``raw["world_size"]`` ranks on ``raw["nodes"]`` nodes) fitted as
    ``calibrate --from-nccl-tests`` fits nccl-tests logs (:func:`schedsim.network.fit.logs_from_sweep`, then
    :func:`executor.calibrate_logs.fit_tiers`): ``topology.scale_up.timing`` from a sweep in one node,
    ``topology.nics.timing`` from one across nodes, each figure ``provenance: fitted`` and its ``source`` naming
    the sweep; the NCCL release that ran in ``nccl.version`` where the base states none. The fit's table and notes
    go to stderr (the profile may go to stdout)."""
    import contextlib

    from executor.calibrate_logs import fit_tiers
    from schedsim.network.fit import logs_from_sweep

    n, nodes = int(raw["world_size"]), int(raw.get("nodes") or 1)
    name = f"its collective sweep over {n} ranks on {nodes} node(s) ({raw['backend']}; {where})"
    logs = logs_from_sweep(raw["collectives"], n, name, nodes=nodes, nccl_version=raw.get("nccl_version"))
    with contextlib.redirect_stdout(sys.stderr):
        fit_tiers(d, logs, [name], how="(its collective sweep)")


def _set_sm_stream(d: dict[str, Any], rec: dict[str, Any] | None, where: str) -> None:
    """``gpu.sm_stream_GBps`` from :func:`executor.calibrate_waves.measure_sm_stream`'s record, its source said;
    the base profile's value stays when none was measured (CPU ranks, no free SM)."""
    if not rec:
        return
    d["gpu"]["sm_stream_GBps"] = rec["GBps_per_sm"]
    d["gpu"]["source"] += (f"; sm_stream_GBps: measured {where} (executor/calibrate_waves.measure_sm_stream): an "
                           f"add_ of {rec['bytes'] / 1e6:.1f} MB on the {rec['free_sms']} SMs a {rec['gemm_ctas']}-"
                           f"CTA bf16 GEMM leaves free, per SM, its Kineto span, median of {rec['runs']}")
