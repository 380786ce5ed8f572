"""Command line: ``schedsim predict | check | schema | profiles | sweep`` (+ execute, calibrate,
compare, import, analyze from their own modules).

Domain errors (:class:`~schedsim.errors.SchedsimError`) print ``error: ...`` on
stderr and exit with code 2, without a traceback. Any other exception is a bug.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import typer

from schedsim import clicore
from schedsim.api import TRACE_MAX_OPS, SweepRow
from schedsim.api import build as _build  # noqa: F401  (scripts and tests take the networkx build from here)
from schedsim.clicore import Durations, Launch, load, set_max_ops
from schedsim.cliutil import DEFAULT_PROFILE, OutFormat, handle_errors
from schedsim.errors import SchedsimError, printable

#: Help is plain text (click's formatter), not rich markup: markup read "[default: ...]" in a help string as a tag
#: and deleted it, and rich's option tables cut words with "…" at 80 columns; plain help wraps at the terminal width.
HELP_MARKUP: Any = None

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=HELP_MARKUP, help="Predict and execute comm/compute schedules of GPU clusters.")

#: This module's commands by name, built into click commands only when invoked (or listed by --help), as
#: :data:`_EXTENSIONS` are: typer turns every parameter of every registered command into a click parameter
#: when it builds the group, ~1% of the instructions of a cold ``check`` for the four it does not run.
_OWN: dict[str, Any] = {}


def _command(fn: Any) -> Any:
    """Declare ``fn`` a command of this module (see :data:`_OWN`); its name is the function's."""
    _OWN[fn.__name__] = fn
    return fn


SetOpt = typer.Option(None, "--set", help="Override a schedule parameter: --set chunks=4 (repeatable).")
ProfileOpt = typer.Option(DEFAULT_PROFILE, "--profile", "-p", help="Hardware profile: a shipped name or a YAML path.")


MaxOpsOpt = typer.Option(None, "--max-ops", min=1, help="Refuse schedules estimated (before expanding) to have "
                         "more op instances than this, summed over ranks [default: 2,000,000; env SCHEDSIM_MAX_OPS].")


@_command
@handle_errors
def predict(
    file: Path = typer.Argument(..., help="Schedule YAML."),
    profile: str = ProfileOpt,
    set_: list[str] | None = SetOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (default: "
                                    "schedsim_out/<schedule name>@<profile>,<k=v of --set, sorted>,<--option=v of "
                                    "the options that change the prediction>)."),
    fmt: OutFormat = typer.Option(OutFormat.table, "--format", help="table for people, json for machines."),
    launch: Launch | None = typer.Option(None, "--launch", help="Override the schedule's launch mode."),
    gantt: bool = typer.Option(True, "--gantt/--no-gantt", help="Draw the Gantt chart (PNG and SVG)."),
    all_ranks: bool = typer.Option(False, "--all-ranks", help="Print every rank (default: totals, worst and best)."),
    gpu_model: str | None = typer.Option(None, "--gpu-model", metavar="[waves|replay]", help="GPU execution "
                                         "model (default: the profile's gpu_model, waves)."),
    durations: Durations | None = typer.Option(None, "--durations", help="recorded: replay the ops' recorded "
                                               "duration_us and host_us (the replay GPU model); modeled: the "
                                               "profile's GPU model [default: the schedule's durations field, "
                                               "recorded in schedules written by schedsim import]."),
    max_connections: int | None = typer.Option(None, "--max-connections", min=1, max=32,
                                                  help="CUDA_DEVICE_MAX_CONNECTIONS (1-32); overrides the schedule's "
                                                  "env and the profile."),
    model_executor: bool = typer.Option(False, "--model-executor", help="Add schedsim execute's own host cost per "
                                        "op (launch.executor_extra_per_op_us) to predict what execute measures."),
    iteration_gap_ms: float = typer.Option(0.0, "--iteration-gap-ms", min=0.0,
                                           help="GPU idle between iterations, ms, for the steady power state (a "
                                           "profile power curve): 0 = back to back; execute's compare uses the "
                                           "idle it measured (uninstrumented_period_s - makespan_uninstrumented_s)."),
    max_ops: int | None = MaxOpsOpt,
    trace: bool | None = typer.Option(None, "--trace/--no-trace", help="Write trace.json (Perfetto) "
                                         f"[default: only up to {TRACE_MAX_OPS:,} ops]."),
    svg: bool | None = typer.Option(None, "--svg/--no-svg", help="Write gantt.svg beside gantt.png "
                                    f"[default: only up to {TRACE_MAX_OPS:,} ops]."),
    timed_graph: bool = typer.Option(False, "--timed-graph", help="Predict a CUDA graph as schedsim execute "
                                     "--cuda-graph times it, op by op (the profile's launch.graph_timing_event_us "
                                     "in every op): the prediction to compare its ops with (compare --pred-timed)."),
    explain: bool = typer.Option(False, "--explain", help="Also print each collective's and send's NCCL algorithm "
                                 "and protocol (NCCL's tuning model on a profile with topology.scale_up) and time."),
    full_ranks: bool = typer.Option(False, "--full-ranks", help="Simulate every rank of a training: block (default: "
                                    "one representative of each class of ranks that run alike, where exact; the "
                                    "outputs then show the representatives)."),
) -> None:
    """Simulate a schedule: summary table, timeline.json, trace.json (Perfetto) and gantt.png/svg."""
    clicore.predict(file, profile, set_, out, fmt, launch, gantt, all_ranks, gpu_model, durations, max_connections,
                    model_executor, iteration_gap_ms, max_ops, trace, timed_graph, explain, full_ranks, svg)


@_command
@handle_errors
def check(
    file: Path = typer.Argument(..., help="Schedule YAML."),
    set_: list[str] | None = SetOpt,
    max_ops: int | None = MaxOpsOpt,
) -> None:
    """Validate a schedule (language rules and DAG checks) without simulating."""
    clicore.check(file, set_, max_ops)


@_command
@handle_errors
def schema(out: Path | None = typer.Option(None, "--out", "-o", help="Write to a file instead of stdout."),
           expanded: bool = typer.Option(False, "--expanded", help="The schema of the spec after expansion "
                                         "(what the pydantic models check) instead of what users write.")) -> None:
    """Print the JSON Schema of schedule files as written (for editors; see docs/schedule_language.md)."""
    if out:
        from schedsim.io import claim_file

        claim_file(out, "schema", "--out")  # refused before the work: a user's file there is kept
    if expanded:
        from schedsim.spec.model import ScheduleSpec

        text = json.dumps(ScheduleSpec.model_json_schema(), indent=1)
    else:
        from schedsim.spec.user_schema import user_schema

        text = json.dumps(user_schema(), indent=1)
    if out:
        from schedsim.io import atomic_write_text

        atomic_write_text(out, text, kind="schema")
    else:
        print(text)


@_command
@handle_errors
def profiles() -> None:
    """List the shipped hardware profiles and where their numbers come from."""
    import shutil
    import textwrap

    from schedsim.hardware.profile import list_profiles, load_profile

    width = max(40, shutil.get_terminal_size((80, 24)).columns - 1)  # wrapped whole, never cut mid-word
    for name in list_profiles():
        p = load_profile(name)
        print(f"{name}  ({p.gpu.name})")
        print(textwrap.fill(" ".join(p.description.split()), width, initial_indent="    ", subsequent_indent="    "))


def _parse_sweep(items: list[str]) -> list[tuple[str, list[Any]]]:
    from schedsim.errors import printable
    from schedsim.spec.overrides import parse_value

    axes: list[tuple[str, list[Any]]] = []
    for item in items:
        if "=" not in item:
            raise SchedsimError(f"--set {printable(item, 80)!r} is not key=v1,v2,...",
                                fix="write e.g. --set chunks=1,2,4,8")
        k, v = item.split("=", 1)
        k = k.strip()
        vals = [parse_value(x, f"--set {printable(k, 80)}") for x in v.split(",") if x.strip() != ""]
        if not vals:
            raise SchedsimError(f"--set {item!r} gives no values\n  fix: write e.g. --set {k}=1,2,4")
        texts = [x.strip() for x in v.split(",") if x.strip() != ""]
        twice = next((x for i, x in enumerate(texts) if x in texts[:i]), None)
        if twice is not None:  # the same point twice: simulated twice, one timeline_*.json kept for both
            raise SchedsimError(f"--set {printable(k, 80)}=... lists {printable(twice, 80)!r} twice",
                                fix=f"list each value of {printable(k, 80)} once")
        if k in [a for a, _ in axes]:
            raise SchedsimError(f"--set {k}=... is given twice\n  fix: list all values once: --set {k}=v1,v2,...")
        axes.append((k, vals))
    return axes


def _sweep_point(file: Path, sets: list[str], profile: str, keep: Path | None) -> tuple[SweepRow, list[str]] | str:
    """One sweep point (module level, so worker processes can run it), simulated as ``predict`` simulates it
    (:func:`schedsim.api.simulate_spec`: the schedule's ``env`` NCCL_ALGO / NCCL_PROTO, its GPU model): its row
    (``setting`` still empty) and its warnings (``timeline.meta["warnings"]``), or the error message. With
    ``keep`` (a folder), the point's timeline is written there as ``timeline_<setting>.json``."""
    from schedsim._gc import paused_gc
    from schedsim.api import simulate_spec
    from schedsim.hardware.profile import load_profile

    with paused_gc():
        try:
            run = simulate_spec(load(file, sets), load_profile(profile), file=file,
                                meta={"file": str(file), "set": list(sets)})
        except SchedsimError as e:  # returned, not raised: a worker's exception may not unpickle
            return str(e)
        tl, m = run.timeline, run.metrics
        name = None
        if keep is not None:
            from schedsim.outdir import safe_dirname

            name = f"timeline_{safe_dirname('_'.join(sets))}.json"
            tl.write_json(keep / name, m.to_dict())
        return SweepRow.of({}, m, m.pipeline, timeline=name), list(tl.meta.get("warnings", []))


def _sweep_rows(file: Path, points: list[list[str]], profile: str, keep: Path | None, jobs: int
                ) -> list[tuple[SweepRow, list[str]]]:
    """Run the points, serially (``jobs`` 1) or in ``jobs`` worker processes; (row, warnings) in the order of
    ``points``.

    Raises
    ------
    SchedsimError
        The first failing point (in grid order), naming its setting; the points not yet started are cancelled.
    """
    def fail(sets: list[str], msg: str) -> SchedsimError:
        return SchedsimError(f"sweep setting {' '.join(sets)}: {msg}")

    if jobs <= 1 or len(points) <= 1:
        rows = []
        for sets in points:
            row = _sweep_point(file, sets, profile, keep)
            if isinstance(row, str):
                raise fail(sets, row)
            rows.append(row)
        return rows
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(jobs, len(points))) as ex:
        futs = [ex.submit(_sweep_point, file, sets, profile, keep) for sets in points]
        rows = []
        for sets, fut in zip(points, futs, strict=False):
            row = fut.result()
            if isinstance(row, str):
                ex.shutdown(cancel_futures=True)
                raise fail(sets, row)
            rows.append(row)
        return rows


@_command
@handle_errors
def sweep(
    file: Path = typer.Argument(..., help="Schedule YAML."),
    set_: list[str] = typer.Option(..., "--set", help="key=v1,v2,... (repeat for a grid)."),
    profile: str = ProfileOpt,
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (default: schedsim_out/sweep_<schedule>)."),
    fmt: OutFormat = typer.Option(OutFormat.table, "--format"),
    max_ops: int | None = MaxOpsOpt,
    jobs: int = typer.Option(1, "--jobs", "-j", min=0, help="Points simulated in parallel processes (0: one per CPU)."),
    keep_timelines: bool = typer.Option(False, "--keep-timelines",
                                        help="Also write each point's timeline_<setting>.json to the output folder."),
) -> None:
    """Predict a schedule over a grid of parameter values; print a table and plot makespan against the setting."""
    import os

    set_max_ops(max_ops)
    from schedsim.hardware.profile import load_profile

    axes = _parse_sweep(set_)
    prof = load_profile(profile)  # a bad profile fails here, once, not in every worker
    combos = list(itertools.product(*[vals for _k, vals in axes]))
    points = [[f"{k}={v}" for (k, _), v in zip(axes, combo, strict=False)] for combo in combos]
    from schedsim.io import atomic_write_text
    from schedsim.outdir import output_set, safe_dirname

    outdir = out or Path("schedsim_out") / f"sweep_{safe_dirname(file.stem)}"

    with output_set(outdir, "sweep", inputs=[file], expect=("sweep.json", "sweep.png")) as stage:
        found = _sweep_rows(file, points, profile, stage if keep_timelines else None, jobs or os.cpu_count() or 1)
        keys = [k for k, _ in axes]
        rows = [dataclasses.replace(row, setting=dict(zip(keys, combo, strict=True))).to_dict()
                for combo, (row, _) in zip(combos, found, strict=True)]
        atomic_write_text(stage / "sweep.json", json.dumps(rows, indent=1))
        from schedsim.report.charts import write_sweep_plot

        write_sweep_plot(stage / "sweep.png", rows, axes, f"{file.stem} on {prof.name}")
    from schedsim.notes import summarize

    said = dict.fromkeys(w for _, ws in found for w in ws)  # a warning every point gives is said once
    for line in summarize(list(said)):  # one line per kind of warning, as predict prints them
        print(printable(line, 2000, newlines=True), file=sys.stderr)
    if fmt == OutFormat.json:
        print(json.dumps(rows, indent=1))
        return
    from rich.markup import escape
    from rich.table import Table

    from schedsim.report.summary import _ratio, fmt_time, make_console

    t = Table()
    for k, _ in axes:
        t.add_column(escape(printable(k, 80)))
    for col in ("makespan", "exposed comm", "overlap"):
        t.add_column(col, justify="right")
    has_mem = any("peak_memory_bytes" in r for r in rows)
    if has_mem:
        t.add_column("peak act. memory", justify="right")
        t.add_column("bubble", justify="right")
    for r in rows:
        cells = [escape(printable(r["setting"][k], 80)) for k, _ in axes] + [fmt_time(r["makespan_s"]),
                                                                            fmt_time(r["exposed_comm_s"]),
                                                            # "–" without communication (docs/metrics.md): a ratio
                                                            # of 0 with nothing exposed means |N| = 0
                                                            _ratio(r["overlap_ratio"],
                                                                   float(r["overlap_ratio"] or r["exposed_comm_s"]))]
        if has_mem:
            cells += [f"{r.get('peak_memory_bytes', 0) / 2**20:.1f} MiB", f"{r.get('bubble_ratio') or 0:.3f}"]
        t.add_row(*cells)
    make_console().print(t)
    kept = f" and {len(rows)} timeline_*.json" if keep_timelines else ""
    print(f"wrote {printable(outdir / 'sweep.json')}, {printable(outdir / 'sweep.png')}{kept}")


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SchedsimError(f"--{what} {text!r} is not a list of integers", fix=f"write e.g. --{what} 1,2,4") from None
    if not vals or min(vals) < 1:
        raise SchedsimError(f"--{what} {text!r} needs positive integers", fix=f"write e.g. --{what} 1,2,4")
    return list(dict.fromkeys(vals))  # each value once: a repeated one is the same configuration


@_command
@handle_errors
def search(
    file: Path = typer.Argument(..., help="Schedule YAML with a training: block."),
    profile: str = ProfileOpt,
    memory_gib: float = typer.Option(80.0, "--memory-gib", min=0.0, help="Memory per GPU a configuration may use."),
    tp: str = typer.Option("", "--tp", help="Tensor-parallel sizes to try (default 1,2,4,8 up to world size)."),
    pp: str = typer.Option("", "--pp", help="Pipeline sizes to try (default powers of 2 up to world size)."),
    cp: str = typer.Option("", "--cp", help="Context-parallel sizes to try (default the block's)."),
    ep: str = typer.Option("", "--ep", help="Expert-parallel sizes to try (default the block's)."),
    micro_batch_size: str = typer.Option("1,2,4", "--micro-batch-size", help="Micro batch sizes to try."),
    recompute: str = typer.Option("none,selective,full", "--recompute", help="Recomputation choices to try."),
    vpp_layers: str = typer.Option("", "--vpp-layers", help="Layers per virtual pipeline stage to try besides none."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=0, help="Configurations simulated in parallel processes (0: one "
                             "per CPU)."),
    top: int = typer.Option(20, "--top", min=1, help="Rows of the table."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (default: "
                                    "schedsim_out/search_<schedule>)."),
    fmt: OutFormat = typer.Option(OutFormat.table, "--format"),
    max_ops: int | None = MaxOpsOpt,
    full_ranks: bool = typer.Option(False, "--full-ranks", help="Simulate every rank of each configuration "
                                    "(default: one representative of each class of ranks that run alike, where "
                                    "exact: the same predictions)."),
    dask: str | None = typer.Option(None, "--dask", metavar="ADDRESS", help="Simulate the configurations on a Dask "
                                    "cluster: its scheduler's address (tcp://HOST:8786), or 'local' for -j worker "
                                    "processes of this machine (needs pip install 'schedsim[cluster]'; the same "
                                    "results as without)."),
) -> None:
    """Rank a training block's Megatron configurations (tp, pp, cp, ep, micro batch, virtual stages, recompute) by
    predicted iteration time under a memory limit; write search.json and the time-vs-memory Pareto plot."""
    import os

    set_max_ops(max_ops)
    from schedsim.hardware.profile import load_profile
    from schedsim.search import RECOMPUTE, candidates, write_plot
    from schedsim.search import search as run_search

    spec = load(file, None)
    if spec.training is None:
        raise SchedsimError(f"{file}: search needs a training: block", fix="add a training: block (see "
                            "docs/schedule_language.md, section training)")
    if getattr(spec, "ops", None):  # each point is the training: block alone (schedsim.search.run_point)
        from schedsim.cliutil import warn

        warn(f"{file}: search times the training: block alone; the schedule's {len(spec.ops)} hand-written op "
             "instance(s) beside it are in no search point (predict times them)")
    prof = load_profile(profile)
    world = spec.world_size
    bad = [r for r in recompute.split(",") if r not in RECOMPUTE]
    if bad:
        raise SchedsimError(f"--recompute {bad[0]!r} is not a choice", fix="use none, selective and/or full")
    pow2 = [1 << k for k in range(world.bit_length()) if 1 << k <= world]
    from schedsim.sim.symmetry import symmetric_exact

    symmetric = not full_ranks and symmetric_exact(prof)
    points = candidates(spec.training, world, tps=_ints(tp, "tp") if tp else [x for x in pow2 if x <= 8],
                        pps=_ints(pp, "pp") if pp else pow2, mbss=_ints(micro_batch_size, "micro-batch-size"),
                        recomputes=list(dict.fromkeys(recompute.split(","))),
                        vpps=[None, *(_ints(vpp_layers, "vpp-layers") if vpp_layers else [])],
                        memory_limit=memory_gib * 2**30, cps=_ints(cp, "cp") if cp else None,
                        eps=_ints(ep, "ep") if ep else None, symmetric=symmetric)
    n_sim = sum(p.status == "simulated" for p in points)
    if dask is None and n_sim >= 10_000:
        from schedsim.cliutil import warn

        warn(f"{file}: {n_sim:,} configurations to simulate on this machine; a cluster runs them faster: --dask "
             "tcp://HOST:8786 (a Dask scheduler, pip install 'schedsim[cluster]')")
    done = run_search(spec.name, world, points, profile, jobs or os.cpu_count() or 1, symmetric, dict(spec.env),
                      dask=dask)
    from schedsim.io import atomic_write_text
    from schedsim.outdir import output_set, safe_dirname

    outdir = out or Path("schedsim_out") / f"search_{safe_dirname(file.stem)}"
    rows = [p.to_dict() for p in done]
    with output_set(outdir, "search", inputs=[file], expect=("search.json", "search.png")) as stage:
        atomic_write_text(stage / "search.json", json.dumps(rows, indent=1))
        write_plot(stage / "search.png", done, f"{spec.name} on {prof.name}: {world} GPUs, ≤ {memory_gib:g} GiB")
    if fmt == OutFormat.json:
        print(json.dumps(rows, indent=1))
        return
    _print_search(done, top)
    print(f"wrote {outdir / 'search.json'}, {outdir / 'search.png'}")


def _print_search(done: list[Any], top: int) -> None:
    from rich.table import Table

    from schedsim.report.summary import fmt_time, make_console

    t = Table()
    for col in ("tp", "pp", "cp", "ep", "dp", "micro batch", "vpp layers", "recompute", "iteration", "TFLOP/s/GPU",
                "MFU", "memory", "Pareto"):
        t.add_column(col, justify="right")
    ran = [p for p in done if p.status == "simulated"]
    for p in ran[:top]:
        s = p.setting
        t.add_row(str(s["tp"]), str(s["pp"]), str(s["cp"]), str(s["ep"]), str(s["dp"]), str(s["micro_batch_size"]),
                  str(s["vpp_layers"] or "-"),
                  s["recompute"], fmt_time(p.iteration_s), f"{p.tflops_per_gpu:.1f}",
                  f"{100 * p.mfu:.1f} %" if p.mfu or not p.tflops_per_gpu else "– (no peak)",
                  f"{p.memory_bytes / 2**30:.1f} GiB", "*" if p.pareto else "")
    make_console().print(t)
    refused = sum(p.status == "refused" for p in done)
    over = sum(p.status == "over memory" for p in done)
    big = sum(p.status == "over max-ops" for p in done)
    print(f"{len(done)} configurations: {len(ran)} simulated, {refused} refused by Megatron's rules, {over} over the "
          f"memory limit, {big} past --max-ops (too many ops to simulate; search.json gives each one's reason)")


def _version(value: bool) -> None:
    if value:
        from schedsim import __version__

        print(f"schedsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the schedsim version and exit."),
          debug: bool = typer.Option(False, "--debug", help="Show the traceback of an internal error (also "
                                     "SCHEDSIM_DEBUG=1).")) -> None:
    """Predict and execute comm/compute schedules of GPU clusters."""
    if debug:
        import os

        os.environ["SCHEDSIM_DEBUG"] = "1"  # read by cliutil.handle_errors, and by executor ranks started from here


#: Commands defined in other modules, imported only when invoked (or listed by --help): the cold start of
#: ``check`` and ``predict`` pays for none of them.
_EXTENSIONS = {"execute": "executor.commands", "calibrate": "executor.commands", "compare": "schedsim.trace.commands",
               "import": "schedsim.trace.commands", "analyze": "schedsim.trace.commands",
               "replay": "schedsim.trace.commands", "export": "schedsim.trace.commands"}


def _extension_command(name: str) -> Any:
    """The click command ``name``: one of :data:`_OWN`, or of its extension module (None when that module is
    not installed)."""
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=HELP_MARKUP)
    if name in _OWN:
        sub.command()(_OWN[name])
        return typer.main.get_command(sub)
    try:
        mod = importlib.import_module(_EXTENSIONS[name])
    except ModuleNotFoundError as e:
        if e.name and _EXTENSIONS[name].startswith(e.name):
            return None
        raise
    mod.register(sub)
    cmd = typer.main.get_command(sub)
    return cmd.commands.get(name) if isinstance(cmd, typer.core.TyperGroup) else cmd


class _LazyGroup(typer.core.TyperGroup):
    """The top-level group: :data:`_OWN` and :data:`_EXTENSIONS`, each built on first use."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list with each command's first sentence whole, wrapped to the terminal (click cuts it
        with "..." to fit one line)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        return own + [n for n in (*_OWN, *_EXTENSIONS) if n not in own]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and (cmd_name in _OWN or cmd_name in _EXTENSIONS):
            cmd = _extension_command(cmd_name)
            if cmd is not None:
                self.add_command(cmd, cmd_name)
        elif cmd is None:  # a mistyped name: typer suggests close ones among the commands built, so build ours
            for name in _OWN:
                if name not in self.commands:
                    self.add_command(_extension_command(name), name)
        return cmd


app.info.cls = _LazyGroup


#: Commands that run user work under torchrun (their BLAS threads are the user's business).
_WORKLOAD_COMMANDS = frozenset({"execute", "calibrate"})


def main() -> None:
    """Run the command line of ``sys.argv`` with typer, in :func:`schedsim.clicore.run_process` (``python -m
    schedsim`` runs a plain ``check`` or ``predict`` without typer: :func:`schedsim.clicore.fast_command`)."""
    clicore.run_process(_app, workload=len(sys.argv) >= 2 and sys.argv[1] in _WORKLOAD_COMMANDS)


def _app() -> None:
    """Run :data:`app` and exit with its code; a usage error (an unknown option, a missing argument, a bad value
    of an option) is worded as every bad input is, ``error:`` and ``fix:`` lines and exit 2, and Ctrl-C outside a
    command exits 130."""
    from schedsim.cliutil import print_error

    try:
        rc = app(standalone_mode=False)
    except typer.Abort:  # Ctrl-C (or end of input) outside a command's own handler
        raise KeyboardInterrupt from None
    except typer.TyperException as e:  # click's UsageError and its kin
        ctx = getattr(e, "ctx", None)
        cmd = ctx.command_path if ctx is not None else "schedsim"
        print_error(f"{e.format_message() if hasattr(e, 'format_message') else e}\n  fix: see `{cmd} --help`")
        sys.exit(getattr(e, "exit_code", 2) or 2)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":  # python -m schedsim.cli runs the command line, as python -m schedsim does
    main()
