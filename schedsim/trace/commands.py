"""CLI: ``schedsim import nsys|kineto FILE... --out DIR``, ``schedsim analyze TIMELINE|TRACE``, ``schedsim replay``,
``schedsim export chakra SCHEDULE --out DIR`` and ``schedsim compare PRED MEAS``.

Registered into :data:`schedsim.cli.app` by :func:`register` (the core calls it
when this module exists). Errors are :class:`~schedsim.errors.TraceError`
and leave through :func:`schedsim.cliutil.handle_errors` (``error: ...``, exit 2).
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from schedsim.errors import printable

__all__ = ["register", "write_timeline_json"]


class _Fmt(str, Enum):
    table = "table"
    json = "json"


def write_timeline_json(tl: Any, path: str | Path, metrics: dict[str, Any] | None = None) -> None:
    """Write an imported Timeline: :meth:`Timeline.write_json` (streamed, atomic)."""
    tl.write_json(path, metrics)


def _ops(path: Path | None) -> dict[str, dict[str, Any]] | None:
    if path is None:
        return None
    from schedsim.trace.common import load_op_names

    return load_op_names(path)


def _finish_import(res: Any, out: Path, fmt: _Fmt, inputs: list[Path]) -> None:
    from schedsim.outdir import output_set
    from schedsim.report.summary import fmt_time
    from schedsim.sim.metrics import Metrics

    tl = res.timeline
    sched = _build_schedule(res, tl, say=fmt != _Fmt.json)  # json: the guesses are in its output
    if sched is not None:  # the recorded run's critical path, walked along the schedule's dependencies
        from schedsim.trace.to_schedule import apply_recorded_path

        apply_recorded_path(tl, sched.path)
    metrics = Metrics.of(tl)
    target = out / "timeline.json"
    names: tuple[str, ...] = ("timeline.json",)
    if sched is not None:  # the run as a schedule to replay, and its ops file
        names += ("schedule.yaml", "schedule.ops.json")
    with output_set(out, "import", inputs=inputs, expect=names) as stage:
        write_timeline_json(tl, stage / "timeline.json", metrics.to_dict())
        if sched is not None:
            from schedsim.trace.to_schedule import write_schedule_files

            write_schedule_files(sched, stage / "schedule.yaml")
    n_ops = sum(1 for s in tl.spans if "#" not in s.id)
    if fmt == _Fmt.json:
        print(json.dumps({"timeline": str(target), "schedule": str(out / "schedule.yaml"), "spans": len(tl.spans),
                          "ops": n_ops, "schedule_guesses": sched.guesses if sched else [],
                          "ranks": sorted(metrics.ranks), "makespan_s": metrics.makespan_s,
                          "overlap_ratio": metrics.overlap_ratio, "warnings": res.warnings}, indent=1))
        return
    print(f"imported {len(tl.spans)} spans ({tl.meta.get('kernel_count', 0)} kernels, "
          f"{tl.meta.get('memcpy_count', 0)} memcpy, {tl.meta.get('memset_count', 0)} memset; "
          f"{n_ops} schedule ops) on {len(metrics.ranks)} rank(s); makespan {fmt_time(metrics.makespan_s)}, "
          f"overlap ratio {metrics.overlap_ratio:.3f}")
    for w in res.warnings:
        print(f"warning: {printable(w, 2000)}")
    if sched is not None:
        for n in sched.notes:
            print(f"note: {printable(n, 2000)}")
        print(f"wrote {printable(target)}, {printable(out / 'schedule.yaml')} ({sched.n_ops} ops, {sched.n_deps} "
              f"waits on other ops; replay: schedsim replay {printable(out / 'schedule.yaml')})")
    else:
        print(f"wrote {printable(target)}")


def _build_schedule(res: Any, tl: Any, say: bool = True) -> Any:
    """The replay schedule (:mod:`schedsim.trace.to_schedule`) of an import, not yet written (None without runtime
    rows kept); with ``say``, its guesses once on stderr."""
    if res.replay is None:
        return None
    import sys

    from schedsim.trace.to_schedule import build_replay_schedule

    files = tl.meta.get("files") or []
    ranks = tl.meta.get("ranks") or {}
    got = build_replay_schedule(res.replay, name=f"{tl.schedule}_replay",
                                source=", ".join(Path(f).name for f in files),
                                files={int(r): str(v["file"]) for r, v in ranks.items()
                                       if isinstance(v, dict) and isinstance(v.get("file"), str)})
    if got.guesses and say:
        print(f"warning: schedule.yaml: dependencies guessed: {printable('; '.join(got.guesses), 2000)}",
              file=sys.stderr)
    return got


OutOpt = typer.Option(..., "--out", "-o", help="Output folder; timeline.json and schedule.yaml (the run as a "
                                                 "schedule to replay) are written there.")
OpsOpt = typer.Option(None, "--ops", help="Predicted timeline.json or schedule YAML whose op names the "
                                          "NVTX ranges / user annotations carry (names of the form name@rN "
                                          "are always recognised).")
IterOpt = typer.Option(-1, "--iteration", help="When the ops repeat in the capture, which occurrence to keep "
                                              "(0 = first, -1 = last); the timeline is cut to it.")
FmtOpt = typer.Option(_Fmt.table, "--format", help="table for people, json for machines.")


def register(app: typer.Typer) -> None:
    """Add ``import nsys|kineto``, ``analyze``, ``replay``, ``export`` and ``compare`` to the schedsim CLI."""
    from schedsim.cliutil import handle_errors

    imp = typer.Typer(no_args_is_help=True, help="Import Nsight Systems or PyTorch profiler traces as a timeline.")

    @imp.command("nsys")
    @handle_errors
    def import_nsys_cmd(
        files: list[Path] = typer.Argument(..., help="nsys SQLite export(s): nsys export --type sqlite REPORT.nsys-rep"),
        out: Path = OutOpt,
        ops: Path | None = OpsOpt,
        iteration: int = IterOpt,
        fmt: _Fmt = FmtOpt,
    ) -> None:
        """Read kernels, memcpy/memset and NVTX ranges of Nsight Systems SQLite export(s) into timeline.json."""
        from schedsim._gc import paused_gc
        from schedsim.report.progress import status
        from schedsim.trace.nsys import import_nsys

        with paused_gc():  # as import kineto
            with status(f"importing {len(files)} nsys export(s)"):
                res = import_nsys(list(files), ops=_ops(ops), iteration=iteration,
                                  keep_kernel_rows=False, keep_runtime=True)
            _finish_import(res, out, fmt, [*files, *([ops] if ops else [])])

    @imp.command("kineto")
    @handle_errors
    def import_kineto_cmd(
        files: list[Path] = typer.Argument(..., help="Kineto trace(s), .json or .json.gz, one per rank."),
        out: Path = OutOpt,
        ops: Path | None = OpsOpt,
        iteration: int = IterOpt,
        fmt: _Fmt = FmtOpt,
    ) -> None:
        """Read PyTorch profiler (Kineto) traces, one per rank, into one multi-rank timeline.json."""
        from schedsim._gc import paused_gc
        from schedsim.report.progress import status
        from schedsim.trace.kineto import import_kineto

        with paused_gc():  # millions of decoded events and kept rows, none in a cycle: GC passes cost a third
            with status(f"importing {len(files)} Kineto trace(s)"):
                res = import_kineto(list(files), ops=_ops(ops), iteration=iteration,
                                    keep_kernel_rows=False, keep_runtime=True)
            _finish_import(res, out, fmt, [*files, *([ops] if ops else [])])

    app.add_typer(imp, name="import")

    exp = typer.Typer(no_args_is_help=True, help="Export a schedule in another tool's format.")

    @exp.command("chakra")
    @handle_errors
    def export_chakra_cmd(
        schedule: Path = typer.Argument(..., help="Schedule YAML (one written by schedsim import replays the run)."),
        out: Path = typer.Option(..., "--out", "-o", help="Output folder: <name>.<rank>.et per rank (and "
                                 "comm_group.json for collectives on part of the ranks)."),
        profile: str = typer.Option("h200", "--profile", "-p", help="Profile that times the ops a schedule does "
                                    "not give a recorded duration."),
        set_: list[str] = typer.Option([], "--set", help="Override a schedule parameter: name=value."),
        fmt: _Fmt = FmtOpt,
    ) -> None:
        """Write an MLCommons Chakra execution trace (ASTRA-sim's input) of a schedule: one node per op with its
        simulated (or recorded) duration and the ops it waits for."""
        from schedsim.api import simulate_spec
        from schedsim.hardware.profile import load_profile
        from schedsim.report.chakra import export_chakra, messages
        from schedsim.spec.loader import load_schedule
        from schedsim.spec.overrides import parse_overrides

        messages()  # refuse a missing protobuf before simulating
        spec = load_schedule(schedule, parse_overrides(set_))
        run = simulate_spec(spec, load_profile(profile), file=schedule)
        got = export_chakra(run, out, inputs=[schedule])
        if fmt == _Fmt.json:
            print(json.dumps({"files": [str(f) for f in got.files], "nodes": got.nodes}, indent=1))
            return
        print(f"wrote {len(got.files)} file(s) into {printable(out)}: {sum(got.nodes.values())} Chakra nodes on "
              f"{len(got.nodes)} rank(s) ({', '.join(printable(f.name) for f in got.files)})")

    app.add_typer(exp, name="export")

    @app.command("replay")
    @handle_errors
    def replay_cmd(
        schedule: Path = typer.Argument(..., help="schedule.yaml written by `schedsim import kineto|nsys ... "
                                        "--out DIR`."),
        what_if: list[str] = typer.Option([], "--what-if", help="PATTERN*FACTOR: scale the recorded durations of "
                                          "nccl, kernel, memcpy, memset ops, an op kind, or kernels whose name "
                                          "matches a glob ('*gemm*'); max_connections=N: replay with N hardware "
                                          "queues (CUDA_DEVICE_MAX_CONNECTIONS); host_gaps=F: a factor on the "
                                          "recorded host gaps. Repeatable."),
        host_gaps: float = typer.Option(1.0, "--host-gaps", help="Factor on the recorded host gaps (0 drops them)."),
        recost_comm: bool = typer.Option(False, "--recost-comm", help="Collectives take the profile's cost model "
                                         "instead of their recorded durations."),
        profile: str = typer.Option("h200", "--profile", "-p", help="Profile for --recost-comm."),
        fmt: _Fmt = FmtOpt,
    ) -> None:
        """Replay an imported run (recorded durations and launch times) against its trace, and what-ifs of it:
        how each rank's makespan moves."""
        _replay(schedule, what_if, host_gaps, recost_comm, profile, fmt)

    @app.command("analyze")
    @handle_errors
    def analyze_cmd(
        files: list[Path] = typer.Argument(..., help="timeline.json, nsys .sqlite export(s) or Kineto trace(s)."),
        chrome: Path | None = typer.Option(None, "--chrome", help="Also write a Chrome/Perfetto trace here."),
        ops: Path | None = OpsOpt,
        fmt: _Fmt = FmtOpt,
        full: bool = typer.Option(False, "--full", help="Print every rank, device and kernel row (default: top 10)."),
        charts: Path | None = typer.Option(None, "--charts", help="Write gantt.png and, for pipeline runs, "
                                                                 "pipeline.png / pipeline_time.png into this folder."),
    ) -> None:
        """Kernel time shares and NCCL volumes, overlap, idle time, critical path, and the
        bubble ratio per rank when range names carry pipeline actions (executor, torch pipelining, Megatron)."""
        from schedsim.io import claim_file, output_dir, output_target, refuse_input
        from schedsim.report.analysis import format_report
        from schedsim.report.progress import status
        from schedsim.trace.analyze import load_any, tag_pipeline, to_json

        inputs = [*files, *([ops] if ops else [])]
        if chrome is not None:  # refused before the reading, not after it
            output_target(chrome, "--chrome")
            refuse_input(chrome, inputs, "--chrome")
            claim_file(chrome, "chrome", "--chrome")  # a file there schedsim did not write is kept
        if charts is not None:
            output_dir(charts, "--charts", create=False)
        with status(f"reading {len(files)} file(s)"):
            _kind, res = load_any(list(files), ops=_ops(ops))
        tag_pipeline(res.timeline)
        if charts is not None:
            from schedsim.outdir import output_set
            from schedsim.report.charts import write_charts

            with output_set(charts, "analyze", inputs=inputs) as stage:
                write_charts(stage, res.timeline, f"{res.timeline.schedule} ({res.timeline.source})", formats=("png",))
        if chrome is not None:
            from schedsim.report.chrome import write_chrome_trace

            write_chrome_trace(chrome, [(res.timeline.source, res.timeline)])
        from schedsim.io import STDOUT_NAMES

        print(to_json(res) if fmt == _Fmt.json else printable(format_report(res, full=full), newlines=True))
        if fmt != _Fmt.json:
            for p in (chrome, charts):
                if p is not None and str(p) not in STDOUT_NAMES:
                    print(f"wrote {printable(p)}")

    _register_compare(app)


def _register_compare(app: typer.Typer) -> None:
    """Add ``compare`` (:mod:`schedsim.compare`, its views :mod:`schedsim.report.compare`) to the schedsim CLI."""
    from schedsim.cliutil import handle_errors, warn
    from schedsim.compare import load_timeline_arg
    from schedsim.report.compare import print_comparison, write_comparison

    @app.command()
    @handle_errors
    def compare(
        pred: Path = typer.Argument(..., help="Predicted timeline.json (or the folder holding it)."),
        meas: Path = typer.Argument(..., help="Measured timeline.json from execute or import (or its folder)."),
        out: Path | None = typer.Option(None, "--out", "-o",
                                           help="Output folder [default: schedsim_out/compare_<schedule>]."),
        fmt: _Fmt = FmtOpt,
        gantt: bool = typer.Option(True, "--gantt/--no-gantt", help="Draw the stacked Gantt chart (PNG and SVG)."),
        trace: bool | None = typer.Option(None, "--trace/--no-trace", help="Write compare_trace.json (Perfetto) "
                                             "[default: only up to 100,000 ops in the two timelines]."),
        pred_timed: Path | None = typer.Option(
            None, "--pred-timed", help="For a run that execute timed op by op (a CUDA graph, or an eager run whose "
            "timing cost it measured): the prediction of the run as timed (execute --compare's predicted_timed/, "
            "or predict --timed-graph), compared with the ops; PRED is then compared with the uninstrumented "
            "makespan."),
        different_schedules: bool = typer.Option(
            False, "--different-schedules", help="Compare timelines of two different schedules anyway (with a "
            "warning); they are refused otherwise. An imported timeline, named after its trace, is never refused."),
    ) -> None:
        """Compare predicted and measured timelines: makespan and per-op errors, overlap, Gantt and Perfetto trace."""
        p, m = load_timeline_arg(pred), load_timeline_arg(meas)
        pt = load_timeline_arg(pred_timed) if pred_timed is not None else None
        outdir = out or Path("schedsim_out") / f"compare_{m.schedule}"
        res, paths = write_comparison(p, m, outdir, gantt=gantt, pred_timed=pt, trace=trace,
                                      inputs=[x for x in (pred, meas, pred_timed) if x is not None],
                                      different_schedules=different_schedules)
        if fmt == _Fmt.json:
            slim = res.to_dict(per_op=False)
            if "ops" in slim:
                slim["ops"] = slim.pop("ops")  # printed last, after by_rank, as it always was
            print(json.dumps({**slim, "files": [str(x) for x in paths]}, indent=1, default=str))
            return
        for w in res.warnings:
            warn(f"the two timelines may not be comparable: {w}")
        print_comparison(res)
        print("wrote " + ", ".join(printable(x) for x in paths))


def _replay(schedule: Path, what_if: list[str], host_gaps: float, recost_comm: bool, profile: str, fmt: _Fmt) -> None:
    """``schedsim replay``: the replay against the recorded times, then the what-if's per-rank makespans."""
    from schedsim.api import load, simulate_spec
    from schedsim.errors import SpecError
    from schedsim.hardware.profile import load_profile
    from schedsim.report.summary import fmt_time
    from schedsim.trace.replay import Connections, HostGaps, WhatIf, parse_what_if, replay_report, what_if_spec

    if not (0.0 <= host_gaps < float("inf")):
        raise SpecError(f"{host_gaps:g} is not a factor >= 0", file=str(schedule), path="--host-gaps",
                        fix="pass e.g. 0 (drop the gaps) or 0.5")
    parsed = [parse_what_if(w, str(schedule)) for w in what_if]  # refused before the replays run
    host_gaps = ([host_gaps] + [w.factor for w in parsed if isinstance(w, HostGaps)])[-1]  # the last one given
    prof = load_profile(profile)
    spec = load(schedule)
    base = replay_report(simulate_spec(spec, prof, file=schedule, gpu_model="replay").timeline, str(schedule))
    out: dict[str, Any] = {"trace_makespan_s": base.trace_makespan_s, "replay_makespan_s": base.replay_makespan_s,
                           "error": base.error, "start_error_median": base.start_error_median}
    lines = [f"trace makespan {fmt_time(base.trace_makespan_s)}, replay {fmt_time(base.replay_makespan_s)} "
             f"({base.error:+.2%}); per-op start error median {base.start_error_median:.2%} of the makespan"]
    scales = [w for w in parsed if isinstance(w, WhatIf)]
    conns = [w.n for w in parsed if isinstance(w, Connections)][-1:]  # the last one given
    if parsed or host_gaps != 1.0 or recost_comm:
        spec2, changes = what_if_spec(spec, scales, host_gaps, recost_comm, str(schedule))
        if conns:
            was = spec.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
            changes.append(f"CUDA_DEVICE_MAX_CONNECTIONS {was if was is not None else 'not declared (no queue limit)'}"
                           f" -> {conns[0]}: stream k of a rank on hardware queue k mod {conns[0]}; an op that "
                           "waits holds up the ops launched after it on its queue")
        new = replay_report(simulate_spec(spec2, prof, file=schedule, gpu_model="replay",
                                          max_connections=conns[0] if conns else None).timeline)
        out["what_if"] = {"changes": changes, "makespan_s": new.replay_makespan_s,
                          "ranks": {r: {"before_s": base.per_rank_s[r], "after_s": t}
                                    for r, t in sorted(new.per_rank_s.items())}}
        lines += [f"what-if: {c}" for c in changes]
        for r, t in sorted(new.per_rank_s.items()):
            b = base.per_rank_s[r]
            lines.append(f"  rank {r}: makespan {fmt_time(b)} -> {fmt_time(t)} ({t / b - 1.0:+.1%})" if b > 0 else
                         f"  rank {r}: makespan {fmt_time(b)} -> {fmt_time(t)}")
    print(json.dumps(out, indent=1) if fmt == _Fmt.json else "\n".join(lines))
