"""``schedsim execute``: one rank's whole run, from the schedule file to the files on rank 0.

Outputs (rank 0, in ``--out``), every file written atomically:

* ``timeline.json``: the measured timeline (``source: "execute"``), same format as predict's;
* ``trace.json``: Chrome/Perfetto trace of it; ``gantt.png``/``.svg`` unless ``--no-gantt``;
* ``env.json``: GPU, driver, torch, CUDA, NCCL, per-rank devices and the relevant variables;
* with ``--profiler``: ``kineto_rank<r>.json.gz`` (every rank) and ``timeline_kernels.json``;
* with ``--compare``: ``predicted/`` (predict's outputs) and ``compare/`` (compare's outputs); for a CUDA graph
  timed op by op also ``predicted_timed/`` (the prediction of that timed graph, whose ops ``compare/`` uses:
  :meth:`schedsim.hardware.profile.HardwareProfile.timed_graph`); with ``--profiler`` too, ``compare_kernels/``:
  the prediction against ``timeline_kernels.json``, each op's span from when it got the GPU and its wait apart
  (``docs/metrics.md, "Per-op spans"``).

On a failure (timeout, error, Ctrl-C/SIGTERM) every rank that can still act
writes ``failure_rank<r>.json`` (what failed, where, which ranks were missing)
and, if it finished timed iterations, ``partial_rank<r>.json``: its own timeline
over those iterations (relative to its own anchor). These and ``kineto_rank<r>.json.gz`` go into ``--out`` as its
other files do, through the folder's manifest (:func:`_rank_file`): a file of that name schedsim did not write is
kept, and the rank says so on stderr. Then it exits at once
(``os._exit``), since a process group with a hung collective cannot be torn
down cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from executor import ExecError
from schedsim.errors import SchedsimError
from schedsim.sim.timeline import atomic_write_text

__all__ = ["run_execute"]


def _groups_in_order(G: Any) -> list[tuple[int, ...]]:
    """The process groups to create, in the order every rank creates them: each collective's group (order of first
    member), then the send/recv groups :func:`_schedule_graph` put in ``G.graph["p2p_groups"]``."""
    seen: dict[tuple[int, ...], None] = {}
    from schedsim.graph.info import GraphInfo

    for members in GraphInfo.of(G).collectives.values():
        seen.setdefault(G.nodes[members[0]]["op"].group, None)
    for g in G.graph.get("p2p_groups") or ():
        seen.setdefault(tuple(g), None)
    return list(seen)


def _schedule_graph(spec: Any) -> Any:
    """:func:`schedsim.graph.build.build_graph`'s DAG of ``spec`` (checked), with the send/recv process groups of
    :func:`schedsim.lower.p2p_comms.p2p_groups` in ``G.graph``: ``p2p_groups`` (the groups, in creation order)
    and ``p2p_comm_of`` (op id -> its group's ranks). So every ``batch_isend_irecv`` runs on the communicator
    ``predict`` times it on (its family's, or its written ``group:``), not on the world's."""
    from schedsim.graph.build import graph_of
    from schedsim.lower import lower
    from schedsim.lower.p2p_comms import p2p_groups

    prog = lower(spec)
    G = graph_of(prog)
    G.graph["p2p_groups"], G.graph["p2p_comm_of"] = p2p_groups(prog)
    return G


def _sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _precheck(file: Path, sets: list[str], opts: Any, *, compare: bool, profile: str, device: str,
              cuda_graph: bool | None, rank: int, world: int, out: Path | None = None,
              parent: bool = False) -> tuple[Any, Any, Any]:
    """Everything that can be checked before any process group exists: the schedule, its graph, the
    world size, --cuda-graph without CUDA, the --compare profile, the output folder (``out``, default
    ``schedsim_out/<name>_execute``: a folder or nothing, whose ``timeline.json``, ``trace.json`` and ``env.json``
    are none or execute's own: :func:`schedsim.outdir.check_targets`). Returns ``(spec, G, profile)``.

    On bad input in one process, or in the ``parent`` that starts ``world`` ranks
    (:mod:`executor.launch`), the :class:`SchedsimError` is raised (the CLI prints it and exits 2).
    Under torchrun rank 0 prints it, every rank waits for the others
    (:func:`executor.dist.wait_for_all_ranks`) and all leave at once with exit 2, so torchrun sees
    exit 2 from every rank and one message.
    """
    from executor.dist import check_world_size
    from schedsim.errors import SchedsimError
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    try:
        spec = load_schedule(file, parse_overrides(sets or []))
        G = _schedule_graph(spec)
        check_world_size(spec.world_size, world, str(file), "world_size" in spec.params, started=not parent)
        from schedsim.io import output_dir

        outdir = output_dir(out or default_outdir(spec), create=False)
        from schedsim.outdir import check_targets

        # the files every run writes there: another command's (a predict folder's timeline.json) or a user's are
        # refused now, not after the run, when the other ranks would see rank 0 leave mid-collective
        check_targets(outdir, "execute", ("timeline.json", "trace.json", "env.json"), inputs=[file])
        if getattr(opts, "profiler", False):  # every rank's Kineto trace, before any rank has run
            check_targets(outdir, PROFILER_SET, [f"kineto_rank{r}.json.gz" for r in range(max(world, 1))],
                          inputs=[file])
        graph = bool(cuda_graph) if cuda_graph is not None else spec.launch == "cuda_graph"
        if graph and device == "cpu":
            raise ExecError("--cuda-graph needs CUDA (streams and graphs do not exist on CPU ranks)\n"
                            "  fix: drop --cuda-graph (or pass --eager), or run on GPUs")
        prof = None
        if compare:
            from schedsim.hardware.profile import load_profile

            prof = load_profile(profile)
    except SchedsimError as e:
        if world <= 1 or parent:
            raise
        from executor.dist import exit_now, wait_for_all_ranks

        if rank == 0:
            print(f"error: {e}", file=sys.stderr, flush=True)
        # torchrun kills the other workers as soon as one exits: leave together, at once
        wait_for_all_ranks("bad_input", world)
        exit_now(2)
    return spec, G, prof


def default_outdir(spec: Any) -> Path:
    """``schedsim_out/<name>_execute``: execute's output folder when ``--out`` is not given."""
    from schedsim.outdir import safe_dirname

    return Path("schedsim_out") / f"{safe_dirname(spec.name)}_execute"


def cpu_profile_note(prof: Any, profile: str, cuda: bool) -> str | None:
    """A warning when ``--compare`` on CPU ranks would predict with a GPU profile, else None.

    A profile measured on CPU ranks (``schedsim calibrate`` on gloo) names its GPU ``CPU ...``.
    """
    if cuda or prof is None or str(prof.gpu.name).upper().startswith("CPU"):
        return None
    return (f"warning: --compare on CPU ranks predicts with profile {profile!r} ({prof.gpu.name}), which models GPUs, "
            f"so the comparison says nothing about this run\n  fix: measure a CPU profile first: torchrun "
            f"--nproc-per-node N -m schedsim calibrate --backend gloo --quick --out cpu.yaml, then pass "
            f"--profile cpu.yaml")


def _nccl_env(env: Any) -> None:
    """Export the schedule's ``NCCL_ALGO`` / ``NCCL_PROTO`` / ``NCCL_MIN_CTAS`` and the other NCCL settings of
    :data:`schedsim.hardware.profile.NCCL_ENV_FIELDS`, and ``NCCL_P2P_DISABLE`` (its ``env``, as the prediction
    takes it) before NCCL initialises, unless the environment already sets them (NCCL reads the process environment
    at init)."""
    from schedsim.hardware.profile import NCCL_ENV_FIELDS

    for key in (*(k for k, _f in NCCL_ENV_FIELDS), "NCCL_P2P_DISABLE"):
        if key in env and key not in os.environ:
            os.environ[key] = str(env[key])


def _teardown_s() -> float:
    """``SCHEDSIM_TEARDOWN_S``: seconds a rank waits for the process-group teardown (default 5, at most 1 hour).

    Raises
    ------
    SchedsimError
        The variable is not a number from 0 to 3600.
    """
    from schedsim.io import env_number

    return float(env_number("SCHEDSIM_TEARDOWN_S", 5.0, low=0.0, high=3600.0))


def run_execute(file: Path, sets: list[str], out: Path | None, opts: Any, *, compare: bool, profile: str,
                backend: str, device: str, gantt: bool, cuda_graph: bool | None,
                max_connections: int | None = None) -> None:
    """Run the schedule on this rank (see :mod:`executor.runtime`) and write the outputs on rank 0.

    ``max_connections`` sets ``CUDA_DEVICE_MAX_CONNECTIONS`` (CUDA's hardware work queues per device;
    1 makes kernels start in host issue order) before CUDA initialises; it is recorded in the
    measured timeline's ``meta.max_connections``.

    After its last write a rank tears the process groups down under a deadline of
    ``SCHEDSIM_TEARDOWN_S`` seconds (default 5) and, past it, leaves at once (:func:`exit_now`).

    Raises
    ------
    SchedsimError
        Bad schedule, world-size mismatch, unsupported op, missing profile (before anything runs).
    """
    from executor.clock import start_margin_s
    from executor.dist import issue_thread, pin_issuer

    teardown_s = _teardown_s()  # a bad SCHEDSIM_* number is refused before anything runs
    start_margin_s()
    pin_issuer()
    issue_thread()
    if max_connections is not None:
        if max_connections < 1 or max_connections > 32:
            raise ExecError(f"--max-connections {max_connections}: CUDA accepts 1 to 32\n  fix: use 1 (issue order, "
                            "as Megatron sets it) to 32; CUDA's default is 8")
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = str(max_connections)
    from executor.dist import env_world, exit_now

    rank, world, _lr = env_world()

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, flush=True)

    spec, G, prof = _precheck(file, sets, opts, compare=compare, profile=profile, device=device,
                              cuda_graph=cuda_graph, rank=rank, world=world, out=out)
    opts.cuda_graph = bool(cuda_graph) if cuda_graph is not None else spec.launch == "cuda_graph"
    launch = "cuda_graph" if opts.cuda_graph else "eager"
    outdir = Path(out) if out else default_outdir(spec)
    outdir.mkdir(parents=True, exist_ok=True)

    from executor.dist import setup_dist

    _nccl_env(spec.env)
    ctx = setup_dist(backend, device, opts.timeout_s, _groups_in_order(G))
    if opts.cuda_graph and not ctx.cuda:
        raise ExecError("--cuda-graph needs CUDA (streams and graphs do not exist on CPU ranks)\n"
                        "  fix: drop --cuda-graph, or run on GPUs")
    note = cpu_profile_note(prof, profile, ctx.cuda) if compare else None
    if note:
        log(note)
    from executor.dist import warn_oversubscribed

    warn_oversubscribed(ctx.cuda, rank)
    signal.signal(signal.SIGTERM, _sigterm)
    runner = None
    try:
        from executor.checks import get_checker
        from executor.envinfo import global_env, rank_env
        from executor.runtime import RankRunner

        checker = get_checker(spec, G, ctx) if opts.check else None
        bindings = checker.bind() if checker is not None else None
        log(f"schedsim execute {spec.name}: {world} rank(s), backend {ctx.backend} on {ctx.device}, {launch}, "
            f"{opts.warmup} warm-up + {opts.iters} timed iterations")
        runner = RankRunner(G, ctx, opts, bindings, log)
        if checker is not None:
            orig_run = runner._one

            def one_with_reset(record: bool, profile: bool = False) -> Any:
                if runner.phase == "check":
                    if ctx.cuda:
                        import torch

                        torch.cuda.synchronize(ctx.device)
                    checker.before_check()
                return orig_run(record, profile)

            runner._one = one_with_reset  # type: ignore[method-assign]
        runner.run()
        check_res = checker.verify() if checker is not None else None
        host_costs = _measure_host(opts, ctx, runner)
        prof_map = None
        if opts.profiler and runner.prof_trace is not None:
            from executor.profiling import map_trace, save_trace

            trace = _rank_file(outdir, PROFILER_SET, f"kineto_rank{rank}.json.gz",
                               lambda path: save_trace(runner.prof_trace, path))
            prof_map = map_trace(trace, [o.name for o in runner.ops])
        payload = {"times": runner.times_dict(), "env": rank_env(ctx), "check": check_res, "profile": prof_map,
                   "notes": runner.notes() if rank == 0 else None, "timing": runner.timing_mode,
                   "nvtx": getattr(runner, "nvtx_how", None), "host_costs": host_costs,
                   "p2p_groups": runner.p2p_groups_used()}
        gathered = ctx.gather(payload)
    except (SchedsimError, KeyboardInterrupt, RuntimeError) as e:  # ExecError, or a refused kineto_rank<r> file
        _fail(e, rank, outdir, G, spec, runner, launch)
        raise  # unreachable: _fail exits
    if rank == 0:
        assert gathered is not None
        _write_outputs(gathered, G, spec, file, sets, outdir, opts, launch, ctx, global_env(ctx), compare, profile,
                       gantt, profile_note=note)
    if runner is not None:
        runner.close()
    ctx.barrier()
    fails = [p["check"] for p in (gathered or []) if p.get("check") and not p["check"]["ok"]]
    err = None
    if rank == 0 and fails:
        err = ExecError(f"--check failed: {fails[0]['what']}: relative error {fails[0]['rel_err']:.3g} > "
                        f"tolerance {fails[0]['tol']:.3g} on {len(fails)} rank(s)")
    if not ctx.close(deadline_s=teardown_s):
        print(f"rank {rank}: process-group teardown did not return within the deadline (SCHEDSIM_TEARDOWN_S); "
              "leaving without it", file=sys.stderr)
        if err is not None:
            print(f"error: {err}", file=sys.stderr)
        exit_now(2 if err is not None else 0)
    if err is not None:
        raise err


def _measure_host(opts: Any, ctx: Any, runner: Any) -> dict[str, float] | None:
    """With ``--measure-host``: this process's host costs by kind, measured by the runner after its timed
    iterations and before any profiled one (rank 0's; ``None`` elsewhere or without it)."""
    return getattr(runner, "host_costs", None) if opts.measure_host else None


#: The manifest set (:mod:`schedsim.outdir`) of each rank's ``failure_rank<r>.json`` / ``partial_rank<r>.json``.
FAILURE_SET = "execute-failure"
#: The manifest set of each rank's ``kineto_rank<r>.json.gz`` (``--profiler``).
PROFILER_SET = "execute-profiler"


def _rank_file(outdir: Path, command: str, name: str, write: Any) -> Any:
    """``write(path)`` of this rank's own file ``name`` into ``outdir`` through :func:`schedsim.outdir.output_set`
    with ``add`` (the other ranks' files of ``command``'s set kept): it replaces only ``command``'s own earlier,
    unchanged file of that name, never a user's. Returns what ``write`` returned.

    Raises
    ------
    SchedsimError
        ``outdir/name`` is a file schedsim did not write for ``command`` (nothing written).
    """
    from schedsim.outdir import output_set

    with output_set(outdir, command, expect=[name], add=True) as stage:
        return write(stage / name)


def _fail(e: BaseException, rank: int, outdir: Path, G: Any, spec: Any, runner: Any, launch: str) -> None:
    from executor.timing import rank_local_timeline

    interrupted = isinstance(e, KeyboardInterrupt)
    msg = "interrupted (Ctrl-C or SIGTERM)" if interrupted else str(e)
    if isinstance(e, RuntimeError) and not isinstance(e, ExecError):
        msg = f"communication or device error on rank {rank}: {e.__class__.__name__}: {str(e).strip()[:800]}"
    info: dict[str, Any] = {"rank": rank, "error": msg, "interrupted": interrupted,
                            "op": getattr(e, "op_id", None), "missing_ranks": getattr(e, "missing", None)}
    try:
        if runner is not None:
            info.update({"phase": runner.phase, "iteration": runner.iteration,
                         "completed_timed_iterations": len(runner.times.anchors_ns)})
            if runner.times.anchors_ns:
                tl = rank_local_timeline(G, runner.times_dict(), schedule=spec.name, launch=launch,
                                         meta={"error": msg, "rank": rank})
                try:
                    _rank_file(outdir, FAILURE_SET, f"partial_rank{rank}.json", tl.write_json)
                except SchedsimError as w:
                    print(f"rank {rank}: {w}", file=sys.stderr, flush=True)
        _rank_file(outdir, FAILURE_SET, f"failure_rank{rank}.json",
                   lambda path: atomic_write_text(path, json.dumps(info, indent=1)))
    except SchedsimError as w:
        print(f"rank {rank}: {w}", file=sys.stderr, flush=True)
    except BaseException:
        pass
    if not interrupted or rank == 0:
        print(f"error: rank {rank}: {msg}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(130 if interrupted else 2)


def _segment_meta(gathered: list[dict[str, Any]]) -> dict[str, Any]:
    """``graph_segments`` (the op ids of each captured CUDA graph segment, over every rank) and its note, or {}."""
    segments = [seg for p in gathered for seg in p["times"].get("segments") or []]
    if not segments:
        return {}
    return {"graph_segments": segments,
            "graph_segments_note": "the ops of each CUDA graph segment (graph_segments: op ids) are timed as the "
                                   "segment's whole replay; compare gives their predicted ops the segment's "
                                   "predicted span (docs/metrics.md, \"Per-op spans\")"}


def _write_outputs(gathered: list[dict[str, Any]], G: Any, spec: Any, file: Path, sets: list[str], outdir: Path,
                   opts: Any, launch: str, ctx: Any, genv: dict[str, Any], compare: bool, profile: str,
                   gantt: bool, profile_note: str | None = None) -> None:
    from executor.runtime import lean_warmup
    from executor.timing import assemble_timeline
    from schedsim.report.chrome import write_chrome_trace
    from schedsim.report.summary import print_summary
    from schedsim.sim.metrics import Metrics

    timing = gathered[0]["timing"]
    meta: dict[str, Any] = {
        "file": str(file), "set": list(sets or []), "backend": ctx.backend, "device": ctx.device.type,
        "iters": opts.iters, "warmup": opts.warmup, "warmup_uninstrumented": lean_warmup(opts), "timing": timing,
        "time_base": "aligned start (executor.clock: device sync, all-gather of the ranks' wall clocks, spin to the "
                     "latest + margin), then per-rank anchor (CUDA event synchronised + time.time_ns, or time.time_ns "
                     "on CPU); origin = earliest anchor of each iteration",
        "late_starts": sum(int(p["times"].get("late_starts", 0)) for p in gathered),
        "per_op": "median over timed iterations of ready/start/end; collectives and p2p start at the last "
                  "member's arrival",
        "materialised": gathered[0].get("notes") or {},
        # every rank's send/recv: the ranks of the process group torch ran it on (read back from torch)
        "p2p_process_groups": {k: v for p in gathered for k, v in sorted((p.get("p2p_groups") or {}).items())},
        "torch": genv["torch"], "nccl": genv["nccl"],
        "max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        "uninstrumented": "compiled flat step list per rank (executor.lean): launches, cross-stream event waits, "
                          "one end event per stream; timed like the hand-written references "
                          "(benchmarks/accuracy/handwritten)",
    }
    host = gathered[0].get("host_costs")
    if host:
        meta["host_costs_us"] = dict(host)
        meta["host_costs"] = ("plain PyTorch's host cost per call by kind, measured in rank 0's process after the "
                              "timed iterations (--measure-host; executor.calibrate_host.measure_here)")
    meta.update(_segment_meta(gathered))
    if timing == "cuda_graph_replay_total":
        meta["note"] = "per-op times are unavailable inside this CUDA graph: every op spans the whole replay"
    checks = [p["check"] for p in gathered if p.get("check")]
    if checks:
        meta["check"] = {"ok": all(c["ok"] for c in checks), "max_rel_err": max(c["rel_err"] for c in checks),
                         "tol": checks[0]["tol"], "what": checks[0]["what"]}
    tl = assemble_timeline(G, [p["times"] for p in gathered], schedule=spec.name, launch=launch, meta=meta)
    metrics = Metrics.of(tl)
    names = ["timeline.json", "trace.json", "env.json"]
    maps = {p["times"]["rank"]: p["profile"] for p in gathered if p.get("profile")}
    from schedsim.outdir import output_set

    ktl = None
    with output_set(outdir, "execute", inputs=[file], expect=names) as stage:  # execute's own set, all or nothing
        tl.write_json(stage / names[0], metrics.to_dict())
        write_chrome_trace(stage / names[1], [("measured", tl)], graph=G)  # the DAG it ran: dependency and p2p flows
        env = {**genv, "ranks": [p["env"] for p in gathered], "timing": timing, "nvtx_ranges": gathered[0].get("nvtx")}
        atomic_write_text(stage / names[2], json.dumps(env, indent=1))
        if gantt:
            from schedsim.report.gantt import write_gantt

            names += [p.name for p in write_gantt(stage / "gantt", [("measured", tl)],
                                                  title=f"{spec.name} measured ({ctx.backend}, {launch}): makespan "
                                                        f"{tl.makespan_s * 1e3:.3f} ms")]
        if maps:
            from executor.profiling import kernel_timeline

            atomic_write_text(stage / "profiler_ops.json", json.dumps(maps, indent=1))
            names.append("profiler_ops.json")
            ktl = kernel_timeline(tl, maps, {n: list(G.predecessors(n)) for n in G.nodes})
            if ktl is not None:
                ktl.write_json(stage / "timeline_kernels.json", Metrics.of(ktl).to_dict())
                names.append("timeline_kernels.json")
    from schedsim.outdir import retire_set

    # an earlier failed run's failure_rank<r>.json / partial_rank<r>.json, stale beside this run's timeline: removed
    # where unchanged since written (a user's file of that name, or one edited since, is kept)
    retire_set(outdir, FAILURE_SET)
    paths = [outdir / n for n in names]
    if maps:
        paths += [outdir / f"kineto_rank{r}.json.gz" for r in sorted(maps)]  # this run's, not an earlier one's
    from schedsim.compare import makespan_lines

    print_summary(tl, metrics, makespan_label="timeline makespan (median op times, instrumented)")
    print("\n".join(makespan_lines(tl.meta, tl.makespan_s)))
    if checks:
        c = tl.meta["check"]
        print(f"check {'PASSED' if c['ok'] else 'FAILED'}: {c['what']}: max relative error {c['max_rel_err']:.3g} "
              f"(tolerance {c['tol']:.3g})")
    if compare:
        from schedsim.api import predict_to_dir
        from schedsim.hardware.profile import HardwareProfile, load_profile
        from schedsim.report.compare import print_comparison, print_op_errors, write_comparison

        # predict with the hardware queues the run had (CUDA_DEVICE_MAX_CONNECTIONS, meta.max_connections):
        # without it, a --max-connections 1 run was compared with an 8-queue prediction (per-op 405 %)
        conn = tl.meta.get("max_connections")
        # and with the GPUs' idle between the timed iterations, which sets their steady power state
        from schedsim.gpu.power import iteration_gap_of, sustained_of

        prof: HardwareProfile = load_profile(profile)
        if host:  # predict with this process's host costs in place of the profile's (--measure-host)
            from executor.calibrate_host import launch_fields, with_host_costs

            prof = with_host_costs(prof, host)
            print(f"--compare predicts with {profile!r} and this process's host costs: "
                  + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in launch_fields(host).items()), flush=True)
        sim: dict[str, Any] = {"max_connections": int(conn) if conn else None,
                               "iteration_gap_s": iteration_gap_of(tl.meta, tl.world_size),
                               "sustained_s": sustained_of(tl.meta)}
        pred, _m, ppaths = predict_to_dir(file, sets, prof, outdir / "predicted", launch, gantt, **sim)
        pred_timed, tpaths = _timed_prediction(tl, prof, file, sets, outdir / "predicted_timed", launch, sim)
        paths += tpaths
        if pred_timed is None and (outdir / "predicted_timed").is_dir():  # an earlier run's, in this --out
            from schedsim.outdir import retire_set

            retire_set(outdir / "predicted_timed", "predict")
        res, cpaths = write_comparison(pred, tl, outdir / "compare", gantt=gantt, pred_timed=pred_timed,
                                       inputs=[file])
        print_comparison(res)
        if ktl is not None:  # each op's span from when it got the GPU, and its wait (docs/metrics.md, "Per-op spans")
            kpred, kpaths = _profiled_prediction(ktl, tl, prof, file, sets, outdir / "predicted_profiled", launch, sim)
            paths += kpaths
            kres, kpaths = write_comparison(kpred or pred, ktl, outdir / "compare_kernels", gantt=gantt, inputs=[file])
            cpaths += kpaths
            if kres.ops is not None:
                print_op_errors(kres.ops)
        if profile_note:
            print(profile_note, file=sys.stderr, flush=True)
        paths += ppaths + cpaths
    print("wrote " + ", ".join(str(p) for p in paths), flush=True)


def _timed_prediction(tl: Any, prof: Any, file: Path, sets: list[str], out: Path, launch: Any,
                      sim: dict[str, Any]) -> tuple[Any, list[Path]]:
    """The prediction of the run as it was timed op by op (:func:`schedsim.compare.timed_profile`), written to
    ``out``; ``(None, [])`` when the plain one stands for it. The uninstrumented makespan keeps the plain one."""
    from schedsim.api import predict_to_dir
    from schedsim.compare import timed_eager_measurement, timed_graph_measurement, timed_profile

    got = timed_profile(tl, prof)
    if got is None:
        if timed_graph_measurement(tl):
            print(f"note: profile {prof.name!r} has no launch.graph_timing_event_us: the timed graph's ops are "
                  "compared with the plain prediction (schedsim calibrate measures it)", file=sys.stderr)
        return None, []
    if timed_eager_measurement(tl):
        print(f"--compare: the timed iterations' events cost the host {tl.meta['timing_host_per_op_us']:.2f} us "
              "per op (issue loop, timed less uninstrumented): per-op spans against predicted_timed/", flush=True)
    timed, model_executor = got
    pred, _m, paths = predict_to_dir(file, sets, timed, out, launch, False, False, model_executor=model_executor,
                                     **sim)
    return pred, paths


def _profiled_prediction(ktl: Any, tl: Any, prof: Any, file: Path, sets: list[str], out: Path, launch: Any,
                         sim: dict[str, Any]) -> tuple[Any, list[Path]]:
    """The prediction of the profiled iterations, whose host ``torch.profiler`` slowed
    (:func:`schedsim.compare.profiled_profile`), written to ``out``; ``(None, [])`` when the plain one stands."""
    from schedsim.api import predict_to_dir
    from schedsim.compare import profiled_profile

    got = profiled_profile(ktl, tl, prof)
    if got is None:
        return None, []
    print(f"--compare: the profiler cost the host {got.launch.executor_extra_per_op_us:.2f} us per op (profiled "
          "iteration less uninstrumented): Kineto spans against predicted_profiled/", flush=True)
    pred, _m, paths = predict_to_dir(file, sets, got, out, launch, False, False, model_executor=True, **sim)
    return pred, paths


def meta_ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.3f} ms"
