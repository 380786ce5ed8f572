"""Command line: ``schedsim predict | check | schema | profiles | sweep`` (+ execute, calibrate,
compare, import, analyze from their own modules).

Domain errors (:class:`~schedsim.errors.SchedsimError`) print ``error: ...`` on
stderr and exit with code 2, without a traceback. Any other exception is a bug.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from schedsim.errors import SchedsimError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Predict and execute comm/compute schedules of GPU clusters.")

DEFAULT_PROFILE = "h200"


class OutFormat(str, Enum):
    table = "table"
    json = "json"


class Launch(str, Enum):
    eager = "eager"
    cuda_graph = "cuda_graph"


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: turn SchedsimError into ``error: ...`` on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except SchedsimError as e:
            print(f"error: {e}", file=sys.stderr)
            raise typer.Exit(2) from None
        except OSError as e:  # an output or input path the OS refuses: the user's to fix
            where = f"{e.filename}: " if getattr(e, "filename", None) else ""
            print(f"error: {where}{e.strerror or e}\n  fix: choose a path you can write (and that is not a file "
                  "where a folder is needed, or the reverse)", file=sys.stderr)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            print("interrupted; outputs are written all or nothing, so none of this run's files were kept",
                  file=sys.stderr)
            raise typer.Exit(130) from None

    return wrapper


SetOpt = typer.Option(None, "--set", help="Override a schedule parameter: --set chunks=4 (repeatable).")
ProfileOpt = typer.Option(DEFAULT_PROFILE, "--profile", "-p", help="Hardware profile: a shipped name or a YAML path.")


def _load(file: Path, sets: Optional[list[str]]):  # type: ignore[no-untyped-def]
    from schedsim.spec.loader import load_schedule, parse_overrides

    return load_schedule(file, parse_overrides(sets or []))


def _build(spec, file: Path):  # type: ignore[no-untyped-def]
    """build_graph, with the schedule file named in every error."""
    from schedsim.graph.build import build_graph

    try:
        return build_graph(spec)
    except SchedsimError as e:
        if str(file) in str(e):
            raise
        raise SchedsimError(f"{file}: {e}") from None


def _safe_dirname(name: str) -> str:
    """A schedule name made safe as one folder name (no separators, no leading dots)."""
    import re

    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).lstrip(".") or "schedule"
    return clean[:100]


#: Above this many ops ``predict`` skips trace.json unless ``--trace`` asks for it: the Chrome JSON of a
#: 100k-op run is ~20 MB, about what ui.perfetto.dev opens without stalling, and writing it cost as
#: much as the simulation (issue 11: 6.7 s of 38 CPU-s at 1M ops).
TRACE_MAX_OPS = 100_000


def trace_wanted(n_ops: int, trace: bool | None) -> tuple[bool, str | None]:
    """Whether to write trace.json for ``n_ops`` ops: ``trace`` True/False is the user's choice (``--trace`` /
    ``--no-trace``); None means automatic (only up to :data:`TRACE_MAX_OPS`). Returns (write, note), the note
    being the one line to print when a large run's trace is skipped."""
    if trace is not None:
        return trace, None
    if n_ops <= TRACE_MAX_OPS:
        return True, None
    return False, (f"note: trace.json skipped ({n_ops:,} ops > {TRACE_MAX_OPS:,}); pass --trace to write it "
                   "(timeline.json has every op)")


def predict_to_dir(file: Path, sets: list[str] | None, profile: str, out: Path | None, launch: str | None,
                   gantt: bool = True, trace: bool | None = None):  # type: ignore[no-untyped-def]
    """Load, build, simulate and write timeline.json, trace.json (see :func:`trace_wanted`) and gantt.png/svg,
    with the cyclic GC paused throughout (the DAG and timeline are millions of acyclic objects).
    Returns (timeline, metrics, paths)."""
    from schedsim._gc import paused_gc

    with paused_gc():
        return _predict_to_dir(file, sets, profile, out, launch, gantt, trace)


def _predict_to_dir(file: Path, sets: list[str] | None, profile: str, out: Path | None, launch: str | None,
                    gantt: bool, trace: bool | None):  # type: ignore[no-untyped-def]
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate
    from schedsim.sim.metrics import compute_metrics
    from schedsim.sim.timeline import output_set

    spec = _load(file, sets)
    prof = load_profile(profile)
    G = _build(spec, file)
    tl = simulate(G, prof, launch=launch)
    tl.meta.update({"file": str(file), "set": list(sets or [])})
    metrics = compute_metrics(tl)
    from schedsim.sim.pipeline_metrics import pipeline_metrics

    pm = pipeline_metrics(tl)
    if pm is not None:
        metrics["pipeline"] = {k: val for k, val in pm.items() if k != "memory_timeline"}
    outdir = out or Path("schedsim_out") / _safe_dirname(spec.name)
    write_trace, note = trace_wanted(len(tl), trace)
    if note:
        print(note, file=sys.stderr)
    names = ["timeline.json"] + (["trace.json"] if write_trace else [])
    with output_set(outdir) as stage:
        tl.write_json(stage / "timeline.json", metrics)
        if write_trace:
            from schedsim.report.chrome import write_chrome_trace

            write_chrome_trace(stage / "trace.json", [("predicted", tl)])
        if gantt:
            from schedsim.report.gantt import write_gantt

            names += [p.name for p in write_gantt(
                stage / "gantt", [("predicted", tl)],
                title=f"{spec.name} on {prof.name} ({tl.launch}): makespan {tl.makespan_s * 1e3:.3f} ms")]
            if pm is not None:
                from schedsim.report.gantt import pipeline_view, write_memory_plot

                names += [p.name for p in write_gantt(
                    stage / "pipeline", [("predicted", pipeline_view(tl))], formats=("png",),
                    title=f"{spec.name}: pipeline view (F blue, B orange, I red, W green; "
                    "hatched = later virtual stage; numbers = microbatch)", min_label_frac=0.004, max_labels=5000)]
                names.append(write_memory_plot(stage / "memory.png", pm,
                                               title=f"{spec.name}: stored activations").name)
    paths = [outdir / n for n in names]
    return tl, metrics, paths


@app.command()
@handle_errors
def predict(
    file: Path = typer.Argument(..., help="Schedule YAML."),
    profile: str = ProfileOpt,
    set_: Optional[list[str]] = SetOpt,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default: schedsim_out/<schedule name>)."),
    fmt: OutFormat = typer.Option(OutFormat.table, "--format", help="table for people, json for machines."),
    launch: Optional[Launch] = typer.Option(None, "--launch", help="Override the schedule's launch mode."),
    gantt: bool = typer.Option(True, "--gantt/--no-gantt", help="Draw the Gantt chart (PNG and SVG)."),
    trace: Optional[bool] = typer.Option(None, "--trace/--no-trace", help="Write trace.json (Perfetto) "
                                         f"[default: only up to {TRACE_MAX_OPS:,} ops]."),
) -> None:
    """Simulate a schedule: summary table, timeline.json, trace.json (Perfetto) and gantt.png/svg."""
    from schedsim._gc import paused_gc

    with paused_gc():  # also through the summary: its tables walk the whole timeline
        _predict_cmd(file, set_, profile, out, fmt, launch, gantt, trace)


def _predict_cmd(file: Path, set_: Optional[list[str]], profile: str, out: Optional[Path], fmt: OutFormat,
                 launch: Optional[Launch], gantt: bool, trace: Optional[bool]) -> None:
    tl, metrics, paths = predict_to_dir(file, set_, profile, out, launch.value if launch else None, gantt, trace)
    if fmt == OutFormat.json:
        print(json.dumps({"schedule": tl.schedule, "profile": tl.profile, "metrics": metrics,
                          "files": [str(p) for p in paths]}, indent=1))
        return
    from schedsim.report.summary import print_summary

    print_summary(tl, metrics)
    if "pipeline" in metrics:
        from schedsim.report.summary import print_pipeline

        print_pipeline(metrics["pipeline"])
    print("wrote " + ", ".join(str(p) for p in paths))


@app.command()
@handle_errors
def check(
    file: Path = typer.Argument(..., help="Schedule YAML."),
    set_: Optional[list[str]] = SetOpt,
) -> None:
    """Validate a schedule (language rules and DAG checks) without simulating."""
    spec = _load(file, set_)
    G = _build(spec, file)
    ranks = G.graph["world_size"]
    print(f"ok: {file}: {spec.name}: {G.number_of_nodes()} ops on {ranks} rank(s), "
          f"{len(G.graph['collectives'])} collective(s), {len(G.graph['p2p'])} send/recv pair(s)")


@app.command()
@handle_errors
def schema(out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write to a file instead of stdout.")) -> None:
    """Print the JSON Schema of schedule files (for editor completion)."""
    from schedsim.spec.model import ScheduleSpec

    text = json.dumps(ScheduleSpec.model_json_schema(), indent=1)
    if out:
        from schedsim.sim.timeline import atomic_write_text

        atomic_write_text(out, text)
    else:
        print(text)


@app.command()
@handle_errors
def profiles() -> None:
    """List the shipped hardware profiles and where their numbers come from."""
    from schedsim.hardware.profile import list_profiles, load_profile

    for name in list_profiles():
        p = load_profile(name)
        print(f"{name:18s} {p.gpu.name}: {p.description.strip()[:150]}")


def _parse_sweep(items: list[str]) -> list[tuple[str, list[Any]]]:
    import yaml

    axes = []
    for item in items:
        if "=" not in item:
            raise SchedsimError(f"--set {item!r} is not key=v1,v2,...\n  fix: write e.g. --set chunks=1,2,4,8")
        k, v = item.split("=", 1)
        k = k.strip()
        vals = [yaml.safe_load(x) for x in v.split(",") if x.strip() != ""]
        if not vals:
            raise SchedsimError(f"--set {item!r} gives no values\n  fix: write e.g. --set {k}=1,2,4")
        if k in [a for a, _ in axes]:
            raise SchedsimError(f"--set {k}=... is given twice\n  fix: list all values once: --set {k}=v1,v2,...")
        axes.append((k, vals))
    return axes


def _sweep_point(file: Path, sets: list[str], profile: str, keep: Path | None) -> dict[str, Any]:
    """One sweep point (module level, so worker processes can run it): the table row, or ``{"error": msg}``.
    With ``keep`` (a folder), the point's timeline is written there as ``timeline_<setting>.json``."""
    from schedsim._gc import paused_gc
    from schedsim.hardware.profile import load_profile
    from schedsim.sim.engine import simulate
    from schedsim.sim.metrics import compute_metrics
    from schedsim.sim.pipeline_metrics import pipeline_metrics

    with paused_gc():
        try:
            tl = simulate(_build(_load(file, sets), file), load_profile(profile))
        except SchedsimError as e:  # returned, not raised: a worker's exception may not unpickle
            return {"error": str(e)}
        tl.meta.update({"file": str(file), "set": list(sets)})
        m = compute_metrics(tl)
        row: dict[str, Any] = {"makespan_s": m["makespan_s"], "exposed_comm_s": m["exposed_comm_s"],
                               "overlap_ratio": m["overlap_ratio"]}
        pm = pipeline_metrics(tl)
        if pm is not None:
            row["peak_memory_bytes"] = max(pm["peak_memory_bytes"].values())
            row["peak_memory_units"] = max(pm["peak_memory_units"].values())
            row["bubble_ratio"] = pm["bubble_of_makespan"]["overall"]
        if keep is not None:
            name = f"timeline_{_safe_dirname('_'.join(sets))}.json"
            tl.write_json(keep / name, m)
            row["timeline"] = name
        return row


def _sweep_rows(file: Path, points: list[list[str]], profile: str, keep: Path | None, jobs: int) -> list[dict[str, Any]]:
    """Run the points, serially (``jobs`` 1) or in ``jobs`` worker processes; rows in the order of ``points``.

    Raises
    ------
    SchedsimError
        The first failing point (in grid order), naming its setting; the points not yet started are cancelled.
    """
    def fail(sets: list[str], row: dict[str, Any]) -> SchedsimError:
        return SchedsimError(f"sweep setting {' '.join(sets)}: {row['error']}")

    if jobs <= 1 or len(points) <= 1:
        rows = []
        for sets in points:
            row = _sweep_point(file, sets, profile, keep)
            if "error" in row:
                raise fail(sets, row)
            rows.append(row)
        return rows
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(jobs, len(points))) as ex:
        futs = [ex.submit(_sweep_point, file, sets, profile, keep) for sets in points]
        rows = []
        for sets, fut in zip(points, futs):
            row = fut.result()
            if "error" in row:
                ex.shutdown(cancel_futures=True)
                raise fail(sets, row)
            rows.append(row)
        return rows


@app.command()
@handle_errors
def sweep(
    file: Path = typer.Argument(..., help="Schedule YAML."),
    set_: list[str] = typer.Option(..., "--set", help="key=v1,v2,... (repeat for a grid)."),
    profile: str = ProfileOpt,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default: schedsim_out/sweep_<schedule>)."),
    fmt: OutFormat = typer.Option(OutFormat.table, "--format"),
    jobs: int = typer.Option(1, "--jobs", "-j", min=0, help="Points simulated in parallel processes (0: one per CPU)."),
    keep_timelines: bool = typer.Option(False, "--keep-timelines",
                                        help="Also write each point's timeline_<setting>.json to the output folder."),
) -> None:
    """Predict a schedule over a grid of parameter values; print a table and plot makespan against the setting."""
    import os

    from schedsim.hardware.profile import load_profile

    axes = _parse_sweep(set_)
    prof = load_profile(profile)  # a bad profile fails here, once, not in every worker
    combos = list(itertools.product(*[vals for _k, vals in axes]))
    points = [[f"{k}={v}" for (k, _), v in zip(axes, combo)] for combo in combos]
    outdir = out or Path("schedsim_out") / f"sweep_{_safe_dirname(file.stem)}"
    from schedsim.sim.timeline import atomic_write_text, output_set

    with output_set(outdir) as stage:
        found = _sweep_rows(file, points, profile, stage if keep_timelines else None, jobs or os.cpu_count() or 1)
        rows = [{"setting": dict(zip([k for k, _ in axes], combo)), **row} for combo, row in zip(combos, found)]
        atomic_write_text(stage / "sweep.json", json.dumps(rows, indent=1))
        _plot_sweep(stage / "sweep", rows, axes, f"{file.stem} on {prof.name}")
    if fmt == OutFormat.json:
        print(json.dumps(rows, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    from schedsim.report.summary import fmt_time

    t = Table()
    for k, _ in axes:
        t.add_column(k)
    for col in ("makespan", "exposed comm", "overlap"):
        t.add_column(col, justify="right")
    has_mem = any("peak_memory_bytes" in r for r in rows)
    if has_mem:
        t.add_column("peak act. memory", justify="right")
        t.add_column("bubble", justify="right")
    for r in rows:
        cells = [str(r["setting"][k]) for k, _ in axes] + [fmt_time(r["makespan_s"]), fmt_time(r["exposed_comm_s"]),
                                                            f"{r['overlap_ratio']:.3f}"]
        if has_mem:
            cells += [f"{r.get('peak_memory_bytes', 0) / 2**20:.1f} MiB", f"{r.get('bubble_ratio') or 0:.3f}"]
        t.add_row(*cells)
    Console().print(t)
    kept = f" and {len(rows)} timeline_*.json" if keep_timelines else ""
    print(f"wrote {outdir / 'sweep.json'}, {outdir / 'sweep.png'}{kept}")


def _plot_sweep(stem: Path, rows: list[dict[str, Any]], axes: list[tuple[str, list[Any]]], title: str) -> None:
    import io

    from matplotlib.figure import Figure

    from schedsim.sim.timeline import atomic_write_bytes

    labels = [", ".join(f"{k}={r['setting'][k]}" for k, _ in axes) for r in rows]
    has_mem = any("peak_memory_bytes" in r for r in rows)
    fig = Figure(figsize=(max(6, 0.6 * len(rows) + 3), 4), dpi=110)
    ax = fig.add_subplot(111)
    xs = list(range(len(rows)))
    ax.plot(xs, [r["makespan_s"] * 1e3 for r in rows], marker="o", label="makespan (ms)")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("makespan (ms)")
    if has_mem:
        ax2 = ax.twinx()
        ax2.plot(xs, [r.get("peak_memory_bytes", 0) / 2**20 for r in rows], marker="s", color="tab:red")
        ax2.set_ylabel("peak activation memory (MiB)", color="tab:red")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(f"{stem}.png", buf.getvalue())


#: Commands defined in other modules, imported only when invoked (or listed by --help): the cold start of
#: ``check`` and ``predict`` pays for none of them.
_EXTENSIONS = {"execute": "executor.commands", "calibrate": "executor.commands", "compare": "schedsim.compare",
               "import": "schedsim.trace.commands", "analyze": "schedsim.trace.commands"}


def _extension_command(name: str) -> Any:
    """The click command ``name`` of its extension module, or None when the module is not installed."""
    try:
        mod = importlib.import_module(_EXTENSIONS[name])
    except ModuleNotFoundError as e:
        if e.name and _EXTENSIONS[name].startswith(e.name):
            return None
        raise
    sub = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    mod.register(sub)
    cmd = typer.main.get_command(sub)
    return cmd.commands.get(name) if isinstance(cmd, typer.core.TyperGroup) else cmd


class _LazyGroup(typer.core.TyperGroup):
    """The top-level group: its own commands, plus :data:`_EXTENSIONS` loaded on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        own = super().list_commands(ctx)
        return own + [n for n in _EXTENSIONS if n not in own]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in _EXTENSIONS:
            cmd = _extension_command(cmd_name)
            if cmd is not None:
                self.add_command(cmd, cmd_name)
        return cmd


app.info.cls = _LazyGroup


def main() -> None:
    """Console-script entry point."""
    app()
