"""Python API for notebooks and scripts: load → predict → plot, sweep and compare.

>>> from schedsim import api
>>> spec = api.load_text('''
... schema_version: 1
... name: one_gemm
... world_size: 1
... ops: [{name: mm, kind: matmul, m: 4096, n: 4096, k: 4096, dtype: bf16}]
... ''')
>>> run = api.predict(spec, profile="h200")
>>> run.makespan_s > 0
True

Every function raises :class:`schedsim.errors.SchedsimError` subclasses on bad input, as the CLI
does. Figures are matplotlib ``Figure`` objects (no pyplot state); in Jupyter they display as the
last expression of a cell, or save them with ``fig.savefig("x.png")``.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from schedsim.errors import SchedsimError, SpecError
from schedsim.outdir import TRACE_MAX_OPS, trace_wanted  # re-exported
from schedsim.results import OMIT_NONE, to_dict

if TYPE_CHECKING:
    import networkx as nx
    import pandas as pd
    from matplotlib.figure import Figure
    from typing_extensions import Unpack

    from schedsim.compare import Comparison
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.lower.program import Program
    from schedsim.network.explain import ExplainRow
    from schedsim.sim.metrics import Metrics
    from schedsim.sim.pipeline_metrics import PipelineMetrics
    from schedsim.sim.timeline import Timeline
    from schedsim.spec.model import ScheduleSpec

__all__ = ["Run", "SimOptions", "PredictOptions", "SweepRow", "load", "load_text", "build", "lower_spec",
           "gpu_model_of", "simulate_spec", "predict",
           "predict_to_dir",
           "TRACE_MAX_OPS", "trace_wanted", "sweep",
           "compare", "plot_gantt", "plot_pipeline", "plot_memory", "to_pandas"]


class SimOptions(TypedDict, total=False):
    """The keyword options of :func:`schedsim.sim.engine.simulate` (its parameters after ``launch``)."""

    gpu_model: str | None
    max_connections: int | None
    model_executor: bool
    iteration_gap_s: float
    sustained_s: float | None


class PredictOptions(SimOptions, total=False):
    """The options of a prediction (:func:`simulate_spec`, :func:`predict`, :func:`predict_to_dir`): the
    simulator's (:class:`SimOptions`), and ``durations`` (``recorded`` or ``modeled``, :func:`gpu_model_of`) and
    ``full_ranks`` (a ``training:`` block lowered with every rank), which :func:`simulate_spec` takes out first."""

    durations: str | None
    full_ranks: bool


@dataclass
class Run:
    """One predicted run: the timeline, its :class:`~schedsim.sim.metrics.Metrics` (with ``pipeline`` and
    ``memory_peak`` when they apply) and the lowered program it came from (:class:`schedsim.lower.Program`);
    ``graph`` is its networkx DAG, built on first access."""

    timeline: Timeline
    metrics: Metrics
    program: Program | None = field(repr=False, default=None)
    _graph: nx.DiGraph | None = field(repr=False, default=None)

    @property
    def graph(self) -> nx.DiGraph | None:
        """The networkx DAG (:func:`schedsim.graph.build.graph_of`), built from ``program`` on first access."""
        if self._graph is None and self.program is not None:
            from schedsim.graph.build import graph_of

            self._graph = graph_of(self.program)
        return self._graph

    @property
    def makespan_s(self) -> float:
        """The timeline's makespan, seconds."""
        return self.timeline.makespan_s


@dataclass(frozen=True)
class SweepRow:
    """One point of a sweep (``api.sweep``, ``schedsim sweep``; ``sweep.json`` holds :meth:`to_dict`).

    ``setting`` maps each swept parameter to its value; times in seconds, ``overlap_ratio`` and
    ``bubble_ratio`` (idle fraction of the makespan, overall) as fractions, ``peak_memory_bytes`` /
    ``peak_memory_units`` the largest per-rank activation peak (bytes / microbatch units); the pipeline
    fields are None (and left out of the JSON form) without a pipeline, ``timeline`` without
    ``--keep-timelines``.
    """

    setting: dict[str, Any]
    makespan_s: float
    exposed_comm_s: float
    overlap_ratio: float
    peak_memory_bytes: float | None = field(default=None, metadata=OMIT_NONE)
    peak_memory_units: float | None = field(default=None, metadata=OMIT_NONE)
    bubble_ratio: float | None = field(default=None, metadata=OMIT_NONE)
    timeline: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, setting: dict[str, Any], m: Metrics, pm: PipelineMetrics | None,
           timeline: str | None = None) -> SweepRow:
        """The row of a point's :class:`Metrics` and :class:`PipelineMetrics` (None without a pipeline)."""
        mem = {} if pm is None else {"peak_memory_bytes": max(pm.peak_memory_bytes.values()),
                                     "peak_memory_units": max(pm.peak_memory_units.values()),
                                     "bubble_ratio": pm.bubble_of_makespan.overall}
        return cls(setting, m.makespan_s, m.exposed_comm_s, m.overlap_ratio, **mem, timeline=timeline)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a row of ``sweep.json``)."""
        d: dict[str, Any] = to_dict(self)
        return d


def load(path: str | Path, **params: Any) -> ScheduleSpec:
    """Load a schedule YAML file with parameter overrides (``load("x.yaml", chunks=4)``); a ScheduleSpec.

    Raises
    ------
    SpecError
        Unreadable file or invalid schedule (the message names file, line and field).
    """
    from schedsim.spec.loader import load_schedule

    return load_schedule(path, params)


def load_text(text: str, name: str = "<string>", **params: Any) -> ScheduleSpec:
    """Load a schedule from YAML text (the notebook-friendly twin of :func:`load`)."""
    from schedsim.spec.loader import load_text as _lt

    return _lt(text, name, params)


def build(spec: ScheduleSpec, file: str | Path | None = None) -> nx.DiGraph:
    """The checked DAG of ``spec`` (:func:`schedsim.graph.build.build_graph`), with ``file`` named in every error.

    Raises
    ------
    GraphError, DeadlockError, CycleError
        As :func:`~schedsim.graph.build.build_graph`; the message starts with ``file`` when given.
    """
    from schedsim.graph.build import graph_of

    return graph_of(lower_spec(spec, file))


def lower_spec(spec: ScheduleSpec, file: str | Path | None = None, symmetric: bool = False) -> Program:
    """The checked :class:`schedsim.lower.Program` of ``spec`` (:func:`schedsim.lower.lower`, ``symmetric`` passed
    on), with ``file`` named in every error.

    Raises
    ------
    GraphError, DeadlockError, CycleError, SpecError
        As :func:`~schedsim.graph.build.build_graph`; the message starts with ``file`` when given.
    """
    from schedsim.errors import SchedsimError
    from schedsim.lower import lower

    try:
        return lower(spec, symmetric=symmetric)
    except SchedsimError as e:
        if file is None or str(file) in str(e):
            raise
        e.message = f"{file}: {e.message}"  # same class and fields (a DeadlockError's ops, a CycleError's cycle)
        e.args = (e.format(),)
        raise


def gpu_model_of(spec: ScheduleSpec, gpu_model: str | None = None, durations: str | None = None,
                 file: str | Path | None = None) -> str | None:
    """The GPU model a prediction of ``spec`` runs: ``gpu_model`` where given, else ``replay`` where the
    durations are ``recorded`` (``durations``, else the schedule's ``durations`` field, which ``schedsim
    import`` writes), else None (the profile's ``gpu_model``).

    Raises
    ------
    SpecError
        ``durations`` and ``gpu_model`` both given and contradicting each other (``recorded`` is the ``replay``
        model; ``modeled`` any other).

    >>> from types import SimpleNamespace as N
    >>> gpu_model_of(N(durations="recorded")), gpu_model_of(N(durations="recorded"), "waves")
    ('replay', 'waves')
    >>> gpu_model_of(N(durations="modeled")) is None, gpu_model_of(N(durations="modeled"), None, "recorded")
    (True, 'replay')
    """
    if gpu_model is not None:
        if durations is not None and (gpu_model == "replay") != (durations == "recorded"):
            raise SpecError(f"--durations {durations} contradicts --gpu-model {gpu_model} (recorded durations are "
                            "the replay model)", file=str(file) if file is not None else None,
                            fix="pass one of them: --durations recorded (= --gpu-model replay) or --durations "
                            "modeled with --gpu-model waves")
        return gpu_model
    return "replay" if (durations or getattr(spec, "durations", "modeled")) == "recorded" else None


def simulate_spec(spec: ScheduleSpec, profile: HardwareProfile, *, file: str | Path | None = None,
                  launch: str | None = None, progress: bool = False, meta: dict[str, Any] | None = None,
                  release_ops: bool = False, **sim: Unpack[PredictOptions]) -> Run:
    """The chain after loading: :func:`build` → simulate → metrics, pipeline metrics and memory curve.

    ``profile`` is a HardwareProfile; ``sim`` (:class:`PredictOptions`) passes the engine's options (``gpu_model``,
    ``max_connections``, ``model_executor``, ``iteration_gap_s``), and ``full_ranks``: a ``training:`` block is
    lowered symmetrically (one representative rank per class of ranks that run alike,
    :func:`schedsim.lower.training.represented_ranks`) where that is exact on the profile
    (:func:`~schedsim.sim.symmetry.symmetric_exact`), unless ``full_ranks`` is true; the timeline then holds the
    representatives only (``timeline.meta["represented"]``, and a note). ``progress`` shows a status line on stderr for
    schedules of more than 20,000 ops; ``meta`` is added to ``timeline.meta`` first. ``metrics``
    gains ``pipeline`` (bubble and memory per rank) for pipeline schedules and ``memory_peak``
    (``rank``, ``bytes``, ``t_s``, ``op``) when the memory curve applies; the curve itself goes to
    ``timeline.meta["memory"]``, and the static checks' warnings (``program.warnings``: "may hang", ...) and the
    guesses the numbers rest on (:func:`schedsim.notes.guesses`) to ``timeline.meta["warnings"]``, as do NCCL
    settings no model of the profile reads (:func:`_unread_nccl_settings`). ``release_ops`` drops the spec's op
    models once it is lowered (:func:`_release_ops`; ``predict``, which reads
    nothing of them after).

    Raises
    ------
    SpecError
        Durations ``recorded`` (``durations=``, else the schedule's field; no ``gpu_model`` given) for a
        schedule none of whose ops carries a ``duration_us``; as :func:`gpu_model_of` and :func:`lower_spec`.
    """
    from schedsim.gpu.cost import shared_cost_models
    from schedsim.report.progress import status
    from schedsim.sim.engine import simulate

    durations = sim.pop("durations", None)
    recorded = sim.get("gpu_model") is None and (durations or getattr(spec, "durations", "modeled")) == "recorded"
    sim["gpu_model"] = gpu_model_of(spec, sim.get("gpu_model"), durations, file)
    symmetric = not sim.pop("full_ranks", False) and getattr(spec, "training", None) is not None
    if symmetric:
        from schedsim.sim.symmetry import symmetric_exact

        symmetric = symmetric_exact(profile, sim["gpu_model"], spec)
    prog = lower_spec(spec, file, symmetric)
    if release_ops:
        _release_ops(spec)
    if recorded and prog.N and all(t.duration_s is None for t in prog.templates):
        raise SpecError("durations: recorded, but no op carries a recorded duration (duration_us): the replay would "
                        "time every op with the profile's model, without its launch costs or contention",
                        file=str(file) if file is not None else None, path="durations",
                        fix="predict it with --durations modeled (the profile's GPU model), or replay a schedule "
                        "written by `schedsim import kineto|nsys FILES --out DIR`")
    # the schedule's NCCL_ALGO / NCCL_PROTO over the profile's
    profile = profile.with_nccl_env(spec.env, spec.env_sources())
    p2p = spec.env.get("NCCL_P2P_DISABLE")
    unread = _unread_nccl_settings(profile, p2p, spec.env_sources().get("NCCL_P2P_DISABLE"))
    with shared_cost_models():  # one CostModel of the profile for the simulation and the guesses
        with status(f"simulating {prog.N:,} ops", enabled=progress and prog.N > 20_000):
            options: SimOptions = sim  # durations and full_ranks taken out above
            tl = simulate(prog, profile, launch=launch, **options)
        run = _after_simulate(spec, profile, prog, tl, meta, sim)
    if unread:  # said with the other warnings (the summary, timeline.json)
        run.timeline.meta["warnings"] = [unread, *run.timeline.meta.get("warnings", [])]
    return run


def _unread_nccl_settings(profile: HardwareProfile, p2p: int | str | None = None,
                          p2p_where: str | None = None) -> str | None:
    """A warning naming the NCCL settings of ``profile.nccl`` (``NCCL_ALGO``, ``NCCL_MIN_CTAS`` and the others of
    :data:`schedsim.hardware.profile.NCCL_ENV_FIELDS`, from the profile or a schedule's ``env``) and a schedule's
    ``NCCL_P2P_DISABLE`` (``p2p``; its place in the schedule ``p2p_where``) that no model reads: without
    ``topology.scale_up`` collectives are timed by the profile's busbw tables or alpha-beta
    (:class:`schedsim.network.model.NetworkModel`), not NCCL's tuning model; None when there are none."""
    from schedsim.hardware.profile import NCCL_ENV_FIELDS, SCHEDULE_ENV_SOURCE
    from schedsim.network.pcie import P2P_DISABLE

    if profile.topology.scale_up is not None:
        return None
    names = [f"{key}={getattr(profile.nccl, f)}" for key, f in NCCL_ENV_FIELDS if getattr(profile.nccl, f) is not None]
    src, places = profile.nccl.source, []
    if names:  # the nccl: fields' place: the schedule's env lines that set them, else the profile
        places.append(src[len(SCHEDULE_ENV_SOURCE):] if src.startswith(SCHEDULE_ENV_SOURCE)
                      else f"profile {profile.name!r}: nccl")
    if p2p is not None:  # the schedule's own line: never in nccl.source (it sets topology.scale_up.p2p)
        names.append(f"{P2P_DISABLE}={p2p}")
        places.append(p2p_where or f"env.{P2P_DISABLE}")
    if not names:
        return None
    where = " and ".join(places)
    return (f"{where}: {', '.join(names)} change nothing: profile {profile.name!r} has no topology.scale_up, so its "
            "collectives are timed by its busbw tables or alpha-beta, not NCCL's tuning model that reads these "
            "settings; use a profile with topology.scale_up (dgx_h100, h200) to time them")


def _release_ops(spec: ScheduleSpec) -> None:
    """Drop a lowered spec's op models and their sources: the Program holds what the simulation and the outputs
    need, and the models of a replay of a 1 GB trace (452,880 ops) hold about 760 MiB until the process ends
    (``docs/validation.md``, "Import + replay of a 1 GB trace"). ``spec.ops`` raises AttributeError afterwards."""
    spec.__dict__.pop("ops", None)
    private = spec.__pydantic_private__
    if private is not None:
        private.update(_sources=[], _layout=None)


def _after_simulate(spec: ScheduleSpec, profile: HardwareProfile, prog: Program, tl: Timeline,
                    meta: dict[str, Any] | None, sim: PredictOptions) -> Run:
    """:func:`simulate_spec` after the simulation: links, warnings and guesses, memory curve and metrics."""
    from schedsim.lower.program import DagView
    from schedsim.report.memory import memory_over_time, static_memory
    from schedsim.sim.metrics import MemoryPeak, Metrics
    from schedsim.sim.pipeline_metrics import PipelineMetrics

    tl.meta.update(meta or {})
    from schedsim.sim.symmetry import mark_represented

    if mark_represented(tl, prog):  # a symmetric lowering: the representatives' ops only, and the outputs say so
        tl.meta["warnings"] = [*tl.meta.get("warnings", []), (
            f"simulated {len(prog.represented)} representative ranks of {prog.world_size} (the ranks of a "
            "training step that run alike have their representative's times); per-rank outputs show them only: "
            "--full-ranks simulates every rank")]
    from schedsim.network.share import link_utilisation

    cols = tl.columns  # rows in program order
    shared = (sim["gpu_model"] or profile.gpu_model) == "waves"  # the one GPU model that shares NICs and uplinks
    links = link_utilisation(profile, prog, cols.start_s, cols.end_s, cols.solo_s, shared) \
        if len(cols) == prog.N else None
    if links is not None:  # bytes per second on the shared links (NICs, leaf uplinks): trace.json and Gantt
        tl.meta["links"] = links
    from schedsim.notes import guesses

    said = guesses(prog, profile)  # where the numbers rest on a guess, the output says so (once per kind)
    # the static checks' warnings ("may hang", pairings the names contradict), which `check` prints, go there too
    if said or prog.warnings:
        tl.meta["warnings"] = [*tl.meta.get("warnings", []), *prog.warnings, *said]
    peak = None
    mem = memory_over_time(tl, DagView(prog), static_memory(prog.pipeline, spec.pipeline, tl.world_size))
    if mem is not None:
        tl.meta["memory"] = mem
        r, d = max(mem["ranks"].items(), key=lambda kv: kv[1]["peak_bytes"])
        peak = MemoryPeak(rank=r, bytes=d["peak_bytes"], t_s=d["peak_s"], op=d["peak_op"])
    classes = None
    if prog.represented:  # every rank's metrics from its representative's (totals and means over the world)
        from schedsim.lower.training import rank_classes

        classes = rank_classes(spec)
        tl.meta["represented"]["classes"] = classes.tolist()  # analyze and compare of timeline.json expand it too
    pm = PipelineMetrics.of(tl, classes, memory_timeline=False)  # the memory steps are in timeline.meta["memory"];
    # metrics keep the peaks
    metrics = dataclasses.replace(Metrics.of(tl, classes), pipeline=pm, memory_peak=peak)
    return Run(tl, metrics, prog)


def predict(spec: ScheduleSpec | str | Path, profile: str | HardwareProfile = "h200", launch: str | None = None,
            **sim: Unpack[PredictOptions]) -> Run:
    """Build the graph of ``spec`` (a ScheduleSpec, or a YAML path) and simulate it on ``profile``
    (a shipped name, a YAML path or a HardwareProfile). Adds pipeline metrics and the memory curve
    (``timeline.meta["memory"]``) when the schedule has them. ``sim``: the engine's options, as
    :func:`simulate_spec` (``gpu_model``, ``max_connections``, ``model_executor``, ``iteration_gap_s``)."""
    from schedsim.hardware.profile import HardwareProfile, load_profile

    if isinstance(spec, (str, Path)):
        spec = load(spec)
    prof = profile if isinstance(profile, HardwareProfile) else load_profile(profile)
    return simulate_spec(spec, prof, launch=launch, **sim)


#: The longest suffix (profile and overrides) :func:`default_outdir_name` keeps readable before it shortens it.
OUTDIR_SUFFIX_MAX = 80


def default_outdir_name(schedule: str, profile: str, overrides: dict[str, Any],
                        options: dict[str, Any] | None = None) -> str:
    """The folder ``predict`` writes into when no ``--out`` is given: ``<schedule>@<profile>``, the ``--set``
    overrides sorted by key, ``k=v``, then the command-line ``options`` that change the prediction (``--launch``,
    ``--gpu-model``, ...; :func:`predict_options`) as ``--k=v`` in the given order, all joined by commas, so runs
    with different settings or profiles keep separate folders and one setting always gets the same one (the
    order of ``--set`` does not matter). ``profile`` is :func:`profile_tag`'s name of the profile.

    The schedule name is made safe by :func:`schedsim.outdir.safe_dirname`. In the suffix, characters
    outside ``A-Z a-z 0-9 _ . + -`` become ``_``; where that changed anything, or the suffix is longer than
    :data:`OUTDIR_SUFFIX_MAX`, it is cut and 8 hex digits of the SHA-1 of the exact suffix are added, so two
    settings never share a folder.

    >>> default_outdir_name("allgather_mm8", "h200", {"chunks": 8})
    'allgather_mm8@h200,chunks=8'
    >>> default_outdir_name("x", "h200", {"dtype": "fp16", "chunks": 4})
    'x@h200,chunks=4,dtype=fp16'
    >>> default_outdir_name("x", "h200", {"path": "a/b"}).startswith("x@h200,path=a_b-")
    True
    >>> default_outdir_name("x", "h200", {"chunks": 4}, {"launch": "cuda_graph", "max-connections": 1})
    'x@h200,chunks=4,--launch=cuda_graph,--max-connections=1'
    """
    import hashlib
    import json
    import re

    from schedsim.outdir import safe_dirname

    def raw(v: Any) -> str:
        return json.dumps(v) if isinstance(v, bool) or v is None else str(v)

    def token(t: str) -> str:  # no token starts with a dot, so "..", "." stay plain names
        return re.sub(r"^\.", "_", re.sub(r"[^A-Za-z0-9_.+-]", "_", t))

    items = sorted((raw(k), raw(v)) for k, v in overrides.items())
    items += [(f"--{raw(k)}", raw(v)) for k, v in (options or {}).items()]
    exact = ",".join([raw(profile)] + [f"{k}={v}" for k, v in items])
    safe = ",".join([token(raw(profile))] + [f"{token(k)}={token(v)}" for k, v in items])
    changed = any(token(t) != t for t in [raw(profile)] + [x for kv in items for x in kv])
    if changed or len(safe) > OUTDIR_SUFFIX_MAX:
        digest = hashlib.sha1(exact.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[:OUTDIR_SUFFIX_MAX - 9]}-{digest}"
    return f"{safe_dirname(schedule)}@{safe}"


def profile_tag(prof: HardwareProfile) -> str:
    """The profile's part of :func:`default_outdir_name`: its name where it equals the shipped profile of that
    name (or that profile's :meth:`~schedsim.hardware.profile.HardwareProfile.timed_graph`), else the name and 8
    hex digits of the SHA-1 of its content (the JSON of every field, keys sorted): a profile file that keeps
    ``name: dgx_h100`` but changes a field gets a folder of its own, and the same content always the same one."""
    import hashlib
    import json

    from schedsim.hardware.profile import list_profiles, load_profile

    if prof.name in list_profiles():
        shipped = load_profile(prof.name)
        if prof == (shipped.timed_graph() if prof.is_timed_graph else shipped):
            return prof.name
    text = json.dumps(prof.model_dump(mode="json"), sort_keys=True)
    return f"{prof.name}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def predict_options(launch: str | None, prof: HardwareProfile, **sim: Unpack[PredictOptions]) -> dict[str, Any]:
    """The options of :func:`predict_to_dir` that change the prediction, as :func:`default_outdir_name` names
    them (the ``schedsim predict`` flag without ``--``): ``launch``, ``gpu-model``, ``durations``,
    ``max-connections``, where given; ``timed-graph`` (a
    :meth:`~schedsim.hardware.profile.HardwareProfile.timed_graph` profile), ``model-executor``, ``full-ranks``
    where on;
    ``iteration-gap-ms`` where not 0."""
    opts: dict[str, Any] = {}
    if launch is not None:
        opts["launch"] = launch
    if sim.get("gpu_model") is not None:
        opts["gpu-model"] = sim["gpu_model"]
    if sim.get("durations") is not None:
        opts["durations"] = sim["durations"]
    if sim.get("max_connections") is not None:
        opts["max-connections"] = sim["max_connections"]
    if prof.is_timed_graph:
        opts["timed-graph"] = True
    if sim.get("model_executor"):
        opts["model-executor"] = True
    if sim.get("iteration_gap_s"):
        opts["iteration-gap-ms"] = f"{sim['iteration_gap_s'] * 1e3:g}"
    if sim.get("full_ranks"):
        opts["full-ranks"] = True
    return opts


def predict_to_dir(file: Path, sets: list[str] | None, profile: str | HardwareProfile, out: Path | None,
                   launch: str | None,
                   gantt: bool = True, trace: bool | None = None, explain: list[ExplainRow] | None = None,
                   svg: bool | None = None, **sim: Unpack[PredictOptions]) -> tuple[Timeline, Metrics, list[Path]]:
    """``schedsim predict``: load ``file`` with ``--set`` strings, simulate, and write timeline.json,
    trace.json (see :func:`trace_wanted`) and (``gantt``) the charts, gantt.svg by the same rule as trace.json (``svg``:
    True/False the user's ``--svg`` / ``--no-svg``, None automatic), into ``out`` (default
    ``schedsim_out/<name>@<profile>[,k=v...][,--option=v...]``, :func:`default_outdir_name`), all or nothing,
    replacing an earlier predict's set whole and no other file (:func:`schedsim.outdir.output_set`); the cyclic GC is
    paused throughout (the DAG and timeline are millions of acyclic objects). Returns ``(timeline, metrics, paths
    written)``. ``profile`` is a profile name or YAML path, or a loaded profile. ``explain``, when a list, is
    filled with ``predict --explain``'s rows (:func:`schedsim.network.explain.explain_rows`) of the Program just
    simulated, so the schedule is loaded and lowered once.

    Raises
    ------
    SchedsimError
        Bad schedule, profile or overrides (the message names the file); ``out`` is not a folder, or holds a
        file of a name predict writes that is not predict's own earlier output.
    OSError
        ``out`` cannot be written.
    """
    import sys

    from schedsim._gc import paused_gc
    from schedsim.hardware.profile import load_profile
    from schedsim.outdir import output_set
    from schedsim.spec.loader import load_schedule
    from schedsim.spec.overrides import parse_overrides

    with paused_gc():
        spec = load_schedule(file, parse_overrides(sets or []))
        prof = load_profile(profile) if isinstance(profile, str) else profile
        run = simulate_spec(spec, prof, file=file, launch=launch, progress=True,
                            meta={"file": str(file), "set": list(sets or [])},
                            release_ops=explain is None and spec.training is None, **sim)
        if prof.is_timed_graph and run.timeline.launch == "cuda_graph":
            run.timeline.meta["timed_graph"] = True  # the graph as execute --cuda-graph times it (compare checks)
        tl, metrics = run.timeline, run.metrics
        if explain is not None:
            from schedsim.gpu.cost import CostModel
            from schedsim.network.explain import explain_rows

            prog = run.program if run.program is not None else lower_spec(spec, file)
            explain += explain_rows(prog, CostModel(prof.with_nccl_env(spec.env, spec.env_sources())))
        if spec.training is not None:  # what users compare with their Megatron logs (timeline.json's meta too)
            from schedsim.report.training import training_report

            tl.meta["training"] = training_report(spec, tl, prof).to_dict()
        outdir = out or Path("schedsim_out") / default_outdir_name(
            spec.name, profile_tag(prof), parse_overrides(sets or []), predict_options(launch, prof, **sim))
        write_trace, note = trace_wanted(len(tl), trace)
        if note:
            print(note, file=sys.stderr)
        write_svg, note = trace_wanted(len(tl), svg, "gantt.svg", "gantt.png has the same chart", "--svg")
        if note and gantt:
            print(note, file=sys.stderr)
        names = ["timeline.json"] + (["trace.json"] if write_trace else [])
        with output_set(outdir, "predict", inputs=[file], expect=names) as stage:
            tl.write_json(stage / "timeline.json", metrics.to_dict(ranks_as_columns=True))
            if write_trace:
                from schedsim.report.chrome import ProgramFlows, write_chrome_trace

                flows = run.graph if run.program is None else ProgramFlows(run.program)  # no networkx
                write_chrome_trace(stage / "trace.json", [("predicted", tl)], graph=flows)
                del flows
            del run  # the Program: its edges, templates and columns freed for the charts (the timeline keeps its
            # names and tags alone: lower.program.OpNames)
            if gantt:
                from schedsim.report.charts import write_charts

                names += [p.name for p in write_charts(stage, tl, f"{spec.name} on {prof.name} ({tl.launch})",
                                                       ("png", "svg") if write_svg else ("png",))]
    return tl, metrics, [outdir / n for n in names]


def sweep(path: str | Path, profile: str = "h200", **grid: list[Any]) -> list[dict[str, Any]]:
    """Predict every combination of ``grid`` values (``sweep("x.yaml", chunks=[1, 2, 4])``).

    Returns one row per setting, as ``sweep.json`` holds it (:meth:`SweepRow.to_dict`): ``setting`` (dict),
    ``makespan_s``, ``exposed_comm_s``, ``overlap_ratio`` and, for pipelines, ``peak_memory_bytes``,
    ``peak_memory_units`` and ``bubble_ratio``.
    """
    keys = list(grid)
    rows = []
    for combo in itertools.product(*[grid[k] for k in keys]):
        setting = dict(zip(keys, combo, strict=False))
        m = predict(load(path, **setting), profile).metrics
        rows.append(SweepRow.of(setting, m, m.pipeline).to_dict())
    return rows


def compare(pred: Run | Timeline | str | Path, meas: Timeline | str | Path, *,
            different_schedules: bool = False) -> Comparison:
    """:func:`schedsim.compare.compare_timelines` of a prediction and a measured timeline (objects or
    ``timeline.json`` paths / folders); timelines of different schedules are refused (``SchedsimError``) unless
    ``different_schedules``."""
    from schedsim.compare import compare_timelines, load_timeline_arg
    from schedsim.sim.timeline import Timeline

    p = pred.timeline if isinstance(pred, Run) else pred if isinstance(pred, Timeline) else load_timeline_arg(pred)
    m = meas if isinstance(meas, Timeline) else load_timeline_arg(meas)
    if not different_schedules:
        from schedsim.report.compare import refuse_different_schedules

        refuse_different_schedules(p, m)
    return compare_timelines(p, m)


def _tl(x: Run | Timeline) -> Timeline:
    return x.timeline if isinstance(x, Run) else x


def shown(fig: Figure) -> Figure:
    """``fig`` (a matplotlib Figure), displayable by Jupyter as the last expression of a cell: a Figure made
    without pyplot (as schedsim's charts are) has no rich display unless ``%matplotlib inline`` registered one,
    and shows as ``<Figure size ...>`` text; this gives it ``_repr_png_`` (IPython's rich display protocol, a PNG
    of the figure as ``savefig`` draws it). Every ``plot_*`` of this module returns its figure through it."""
    import io

    def _repr_png_() -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=fig.dpi)
        return buf.getvalue()

    cast("Any", fig)._repr_png_ = _repr_png_  # an attribute matplotlib's Figure does not declare
    return fig


def plot_gantt(*runs: Run | Timeline, title: str = "", labels: list[str] | None = None) -> Figure:
    """Gantt Figure of one or more runs (stacked lane by lane, e.g. predicted and measured); displays in
    Jupyter (:func:`shown`)."""
    from schedsim.report.gantt import draw_gantt

    tls = [_tl(r) for r in runs]
    names = labels or ([t.source for t in tls] if len({t.source for t in tls}) == len(tls)
                       else [f"{t.source} {i}" for i, t in enumerate(tls)])
    return shown(draw_gantt(list(zip(names, tls, strict=False)), title))


def plot_pipeline(run: Run | Timeline, mode: str = "steps", title: str = "") -> Figure:
    """Pipeline Figure: ``mode="steps"`` (the papers' unit steps) or ``"time"``; displays in Jupyter
    (:func:`shown`).

    A measured timeline (``import``) whose range names carry pipeline actions (executor, torch
    pipelining, Megatron: :data:`schedsim.trace.analyze.PIPELINE_NAME_PATTERNS`) is tagged first, as
    ``analyze --charts`` does; the run passed in is left unchanged.

    Raises
    ------
    SchedsimError
        No span is a pipeline action (F/B/I/W), so there is nothing to draw.
    """
    import copy

    from schedsim.report.pipeline_chart import draw_pipeline, pipeline_view
    from schedsim.trace.analyze import tag_pipeline

    tl = _tl(run)
    if not pipeline_view(tl).spans:
        tl = copy.copy(tl)
        tl.spans = list(tl.spans)
        if not tag_pipeline(tl) or not pipeline_view(tl).spans:
            raise SchedsimError(f"{tl.schedule}: no pipeline actions (F/B/I/W) in this timeline",
                                fix="draw it with plot_gantt")
    return shown(draw_pipeline(tl, title or tl.schedule, mode=mode))


def plot_memory(run: Run | Timeline, title: str = "") -> Figure:
    """Memory-over-time Figure of a run with ``meta["memory"]`` (from :func:`predict`); displays in Jupyter
    (:func:`shown`).

    Raises
    ------
    SchedsimError
        The timeline has no memory curve.
    """
    from schedsim.report.memory_chart import draw_memory

    tl = _tl(run)
    mem = (tl.meta or {}).get("memory")
    if not mem:
        raise SchedsimError(f"{tl.schedule}: this timeline has no memory curve",
                            fix="predict() adds one for pipelines and schedules with recv/gather buffers")
    curves = {int(r): d["steps"] for r, d in mem["ranks"].items()}  # (n, 2) arrays or [t_s, bytes] pairs
    static = {int(r): sum(d.get("static", {}).values()) for r, d in mem["ranks"].items()}
    peaks = {int(r): (d["peak_bytes"], d["peak_op"] or "start") for r, d in mem["ranks"].items()}
    return shown(draw_memory(curves, tl.makespan_s, title or tl.schedule, peaks, static=static))


def to_pandas(run: Run | Timeline) -> pd.DataFrame:
    """The spans as a pandas DataFrame: one row per op (id, name, rank, stream, kind, resource, start_s,
    end_s, duration_s, solo_s, ready_s, bytes, flops, plus one column per tag).

    Raises
    ------
    ImportError
        pandas is not installed (``pip install pandas``).
    """
    try:
        import pandas as pd
    except ImportError:
        raise ImportError("to_pandas needs pandas: pip install pandas") from None
    rows = []
    for s in _tl(run).spans:
        d = s._asdict()
        tags = d.pop("tags") or {}
        d["duration_s"] = s.end_s - s.start_s
        d.update({f"tag_{k}": v for k, v in tags.items()})
        rows.append(d)
    return pd.DataFrame(rows)
