"""``schedsim search``: the Megatron-LM configurations of a ``training:`` block, ranked by predicted iteration
time under a memory limit, with the time-vs-memory Pareto front.

The block's model, batch and world size stay; the search varies tp, pp, cp, ep, the micro batch size, the
virtual stage size (``num_layers_per_virtual_pipeline_stage``) and the recomputation (``none``, ``selective``,
``full`` with ``uniform`` / 1). dp follows (world / (tp · pp · cp)). Sequence parallelism is kept as written, and
off where tp = 1 (as Megatron turns it off). A candidate is

* *refused* when Megatron's validation refuses it (:func:`schedsim.spec.training_block.refusal`, its reason
  kept), or when the interleaved schedule's rules on m refuse it at lowering;
* *over max-ops* when its lowering would pass the op limit (``--max-ops`` / ``SCHEDSIM_MAX_OPS``, the
  loader's own estimate :func:`schedsim.spec.limits.check_expansion`): a limit of this tool, not a refusal of
  Megatron's, so counted apart;
* *over memory* when :func:`schedsim.spec.training_block.memory_per_rank`'s total (parameters, gradients,
  optimizer states, activations of the most loaded pipeline stage) passes the limit;
* otherwise *simulated* (:func:`run_point`, in ``jobs`` local processes) on the profile.

A simulated point is on the Pareto front when no other simulated point is as fast and as light and strictly
better in one of them (:func:`pareto`: points tied on both are on it together). Points run in worker processes;
each worker rebuilds its schedule from the block's plain form, so the results do not depend on ``jobs``.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["SearchPoint", "candidates", "run_point", "worker_point", "pareto", "search"]

RECOMPUTE: dict[str, dict[str, Any]] = {
    "none": {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None},
    "selective": {"recompute_granularity": "selective", "recompute_method": None, "recompute_num_layers": None},
    "full": {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
}
"""The ``--recompute`` choices as Megatron arguments (``full``: every layer, one per checkpoint)."""


@dataclass
class SearchPoint:
    """One configuration: its ``setting`` (tp, pp, dp, micro_batch_size, vpp_layers, recompute), the block's
    plain form, its static memory estimate (bytes) and its outcome: ``status`` ``refused`` / ``over max-ops``
    / ``over memory`` / ``simulated`` (``reason`` for the first three), and when simulated ``iteration_s``,
    ``tflops_per_gpu``, ``mfu`` and ``pareto``."""

    setting: dict[str, Any]
    block: dict[str, Any] = field(repr=False)
    memory_bytes: float = 0.0
    status: str = "simulated"
    reason: str = ""
    iteration_s: float = 0.0
    tflops_per_gpu: float = 0.0
    mfu: float = 0.0
    pareto: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form (the block left out): ``dataclasses.asdict`` without the block, which it would copy
        deeply only to drop (the setting's values are numbers, strings and None: a shallow copy is a deep one)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "block"}
        d["setting"] = dict(self.setting)
        return d


def candidates(block: Any, world: int, *, tps: list[int], pps: list[int], mbss: list[int],
               recomputes: list[str], vpps: list[int | None], memory_limit: float, cps: list[int] | None = None,
               eps: list[int] | None = None, symmetric: bool = False) -> list[SearchPoint]:
    """Every combination of the axes, each refused, over memory, or left to simulate (module docstring).
    ``block`` is the schedule's :class:`~schedsim.spec.training_block.TrainingSpec`; ``memory_limit`` bytes;
    ``cps`` / ``eps``: context- and expert-parallel sizes to try (default: the block's own); ``symmetric``: the
    points will be lowered for their representative ranks (:func:`search`'s ``symmetric``), whose ops the op limit
    bounds."""
    from schedsim.spec.limits import _training_ops, limit
    from schedsim.spec.training_block import memory_per_rank, refusal, training_plan

    out = []
    for tp, pp, cp, ep, mbs, rc, vl in itertools.product(tps, pps, cps or [block.context_parallel_size],
                                                         eps or [block.expert_model_parallel_size], mbss,
                                                         recomputes, vpps):
        sp = bool(block.sequence_parallel and tp > 1)
        upd = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "micro_batch_size": mbs,
               "num_layers_per_virtual_pipeline_stage": vl, "data_parallel_size": None, "sequence_parallel": sp,
               "tp_comm_overlap": block.tp_comm_overlap and sp, "context_parallel_size": cp,
               "expert_model_parallel_size": ep, **RECOMPUTE[rc]}
        t = block.model_copy(update=upd)
        dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 0
        pt = SearchPoint({"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "micro_batch_size": mbs,
                          "vpp_layers": vl, "recompute": rc}, t.model_dump(exclude_none=True, exclude_unset=True))
        why = refusal(t, world)
        if why is not None:
            pt.status, pt.reason = "refused", f"{why[0]}: {why[1]}"
        elif (ops := _training_ops(pt.block, world, symmetric)) > limit("SCHEDSIM_MAX_OPS"):
            pt.status = "over max-ops"
            pt.reason = f"about {ops:,} op instances, past the limit of {limit('SCHEDSIM_MAX_OPS'):,} (--max-ops)"
        else:
            pt.memory_bytes = memory_per_rank(t, training_plan(t, world))["total"]
            if pt.memory_bytes > memory_limit:
                pt.status = "over memory"
                pt.reason = _over(pt.memory_bytes, memory_limit)
        out.append(pt)
    return out


def _over(need: float, limit: float) -> str:
    """``"need GiB > limit GiB"`` with the fewest decimals (1 to 6) that tell the two apart, else in bytes
    (a bare 1-decimal form read "80.0 GiB > 80.0 GiB" for a need a few MiB over)."""
    for d in range(1, 7):
        a, b = f"{need / 2**30:.{d}f}", f"{limit / 2**30:.{d}f}"
        if a != b:
            return f"{a} GiB > {b} GiB"
    a, b = f"{need:,.0f}", f"{limit:,.0f}"
    return f"{a} B > {b} B" if a != b else f"{need!r} B > {limit!r} B"


def run_point(name: str, world: int, block: dict[str, Any], profile: Any,
              symmetric: bool = False, env: dict[str, Any] | None = None) -> dict[str, Any] | str:
    """Simulate one configuration (module level, for worker processes): its iteration time, TFLOP/s per GPU and
    MFU, or the error message (a refusal at lowering). ``symmetric``: lower one representative rank per class
    (:func:`schedsim.lower.training.represented_ranks`; pass it only where
    :func:`~schedsim.sim.symmetry.symmetric_exact` holds on the profile; a point whose ranks are not laid out
    alike, :func:`~schedsim.sim.symmetry.layout_alike`, is lowered in full). ``env``: the schedule's ``env``
    (``CUDA_DEVICE_MAX_CONNECTIONS``, ``NCCL_ALGO`` / ``NCCL_PROTO``), as ``predict`` applies it."""
    from schedsim._gc import paused_gc

    # the cyclic collector paused for the whole point and restored once its objects are gone: lowering and
    # simulation allocate a point's worth of acyclic objects, which reference counting frees when _point returns
    # (a collection while they lived, or at the first allocation after restoring it within their scope, would
    # scan them all: 4 % of a point)
    with paused_gc():
        out = _point(name, world, block, profile, symmetric, env)
    return out


def _point(name: str, world: int, block: dict[str, Any], profile: Any, symmetric: bool,
           env: dict[str, Any] | None) -> dict[str, Any] | str:
    """:func:`run_point`'s work."""
    import yaml

    from schedsim.errors import SchedsimError
    from schedsim.gpu.cost import shared_cost_models
    from schedsim.lower import lower
    from schedsim.report.training import step_rate
    from schedsim.sim.engine import simulate
    from schedsim.sim.symmetry import layout_alike
    from schedsim.spec.loader import load_text

    # libyaml's emitter where PyYAML has it: the same text as safe_dump's for a block's plain values (numbers,
    # strings, booleans), in a fifth of the time (tests/report/test_search.py)
    text = yaml.dump({"schema_version": 1, "name": name, "world_size": world, **({"env": env} if env else {}),
                      "training": block}, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
    try:
        spec = load_text(text, f"<search {name}>")
        prof, run_prof = _profiles(profile, spec)
        # the point's groups may lie on the nodes unlike their representatives' (tp not dividing a node)
        symmetric = symmetric and _layout_alike(prof, spec, layout_alike)
        # as api.lower_spec without a file to name; the worded warnings are not kept here
        # the block's own lowering: its wait-for graph is hang-free by construction, not swept (lower's sweep)
        prog = lower(spec, symmetric=symmetric, warn=False, sweep=False)
        with shared_cost_models(_MODELS):
            tl = simulate(prog, run_prof, makespan_only=True)  # step_rate reads only the makespan
        for k in [k for k, (pr, _m) in _MODELS.items() if pr is not run_prof]:  # e.g. the power steady state's
            del _MODELS[k]
    except SchedsimError as e:
        return e.message
    it, _flops, rate, _peak, mfu = step_rate(spec, tl, prof)  # training_report's (the rest is not kept)
    return {"iteration_s": it, "tflops_per_gpu": rate, "mfu": mfu}


#: In this process: the profiles :func:`run_point` ran on, by (profile, the schedule's env), and their CostModels
#: (:func:`schedsim.gpu.cost.shared_cost_models`): the points of one search share the profile object, so each
#: NCCL group shape's costs and each GEMM surface are worked out once, not once a point. Pure caches: a point's
#: prediction is the same with or without them.
_PROFILES: dict[tuple[str | int, str], tuple[Any, Any]] = {}
_MODELS: dict[int, tuple[Any, Any]] = {}
#: In this process: :func:`~schedsim.sim.symmetry.layout_alike`'s answers, by profile and what they depend on (the
#: world size, tp, cp, dp, pp and ep, and what makes rank classes: ``tp_comm_overlap``, experts at capacity). A
#: pure cache, emptied with the others.
_LAYOUTS: dict[tuple[Any, ...], bool] = {}


def _layout_alike(prof: Any, spec: Any, layout_alike: Any) -> bool:
    """``layout_alike(prof, spec)``, kept in :data:`_LAYOUTS`: it reads only the profile's topology, the rank
    groups of the block's plan (:func:`~schedsim.lower.training.rank_groups`: tp, cp, dp, pp, ep) and its rank
    classes (:func:`~schedsim.lower.training.rank_classes`: also ``tp_comm_overlap`` and an expert at capacity)."""
    from schedsim.spec.training_block import training_plan

    t = spec.training
    plan = training_plan(t, spec.world_size)
    key = (id(prof), spec.world_size, plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, bool(t.tp_comm_overlap),
           bool(plan.experts and t.moe_expert_capacity_factor is not None))
    got = _LAYOUTS.get(key)
    if got is None:
        got = _LAYOUTS[key] = layout_alike(prof, spec)
    return got


def _profiles(profile: Any, spec: Any) -> tuple[Any, Any]:
    """The profile ``profile`` (a name or path, loaded once in this process; or a loaded profile, as a Dask worker
    gets it) and the one the point runs on (the schedule's
    ``NCCL_ALGO`` / ``NCCL_PROTO`` applied, as ``predict`` does)."""
    import json

    from schedsim.hardware.profile import load_profile

    key = (profile if isinstance(profile, str) else id(profile),
           json.dumps([dict(spec.env), dict(spec.env_sources())], sort_keys=True, default=str))
    got = _PROFILES.get(key)
    if got is None:
        prof = load_profile(profile) if isinstance(profile, str) else profile
        got = _PROFILES[key] = (prof, prof.with_nccl_env(spec.env, spec.env_sources()))
    return got


_WORKER_LOCK = threading.Lock()
_WORKER_SEARCH = [""]


def worker_point(token: str, profile: Any, name: str, world: int, block: dict[str, Any], symmetric: bool,
                 env: dict[str, Any] | None) -> dict[str, Any] | str:
    """:func:`run_point` as a Dask task (:func:`schedsim.search_cluster.run_on_dask`): one point at a time per
    process (a worker may run several threads; a point pauses the process's collector and uses its caches), the
    caches emptied when a task of another search (``token``) arrives, ``profile`` the loaded profile."""
    with _WORKER_LOCK:
        if _WORKER_SEARCH[0] != token:
            _PROFILES.clear()
            _MODELS.clear()
            _LAYOUTS.clear()
            _WORKER_SEARCH[0] = token
        return run_point(name, world, block, profile, symmetric, env)


def _warm_for_workers(profile: Any) -> None:
    """Before the worker processes start: import what :func:`_point` imports and load the profile (a name, through
    :func:`~schedsim.hardware.profile.load_profile`'s cache) in this process, so that workers started by fork
    inherit them instead of each importing and loading its own (about 0.2 CPU s a worker); where workers do not
    fork (another start method) it costs this process that once and changes nothing else."""
    import schedsim.gpu.cost
    import schedsim.gpu.power
    import schedsim.lower
    import schedsim.lower.check_errors
    import schedsim.lower.checks
    import schedsim.lower.graphs
    import schedsim.lower.link
    import schedsim.lower.training
    import schedsim.lower.written
    import schedsim.network.share
    import schedsim.pipeline.memory
    import schedsim.report.training
    import schedsim.sim.engine
    import schedsim.sim.symmetry  # noqa: F401
    from schedsim.hardware.profile import load_profile

    try:  # not built: each point then raises the BuildError that says how to build it
        from schedsim.sim import _cwaves  # type: ignore[attr-defined]  # noqa: F401
    except ImportError:
        pass
    if isinstance(profile, str):
        load_profile(profile)


def pareto(points: list[SearchPoint]) -> None:
    """Mark the simulated points that no other simulated point beats: none is as fast and as light and strictly
    better in one of iteration time and memory (so points tied on both are on the front together)."""
    done = sorted((p for p in points if p.status == "simulated"), key=lambda p: (p.iteration_s, p.memory_bytes))
    best = float("inf")
    last: tuple[float, float] | None = None  # (time, memory) of the last point on the front
    for p in done:
        p.pareto = p.memory_bytes < best or (p.iteration_s, p.memory_bytes) == last
        if p.memory_bytes < best:
            best, last = p.memory_bytes, (p.iteration_s, p.memory_bytes)


def search(name: str, world: int, points: list[SearchPoint], profile: str, jobs: int = 1,
           symmetric: bool = False, env: dict[str, Any] | None = None, dask: str | None = None) -> list[SearchPoint]:
    """Simulate the points left to simulate (``jobs`` processes, or on the Dask cluster at ``dask``:
    :func:`schedsim.search_cluster.run_on_dask`; a progress bar on a terminal), mark the Pareto
    front; returns every point, the simulated ones first by iteration time, then the others. ``symmetric``: each
    point lowered for one representative rank per class (:func:`schedsim.lower.training.represented_ranks`; the
    same predictions, where :func:`~schedsim.sim.symmetry.symmetric_exact` holds on the profile); ``env``: the
    schedule's ``env``, for every point (:func:`run_point`)."""
    from schedsim.report.progress import track

    _PROFILES.clear()  # the caches serve the points of one search (a profile file may change between searches)
    _MODELS.clear()
    _LAYOUTS.clear()
    todo = [p for p in points if p.status == "simulated"]
    if dask is not None and todo:
        from schedsim.hardware.profile import load_profile
        from schedsim.search_cluster import run_on_dask
        from schedsim.spec.limits import _training_ops

        # the loaded profile goes to the workers (they need not see its file); the largest points first
        results = run_on_dask(dask, jobs, worker_point, load_profile(profile),
                              [(name, world, p.block, symmetric, env) for p in todo],
                              [_training_ops(p.block, world, symmetric) for p in todo])
    elif jobs <= 1 or len(todo) <= 1:
        results = [run_point(name, world, p.block, profile, symmetric, env)
                   for p in track(todo, "search", total=len(todo))]
    else:
        from concurrent.futures import ProcessPoolExecutor

        from schedsim.spec.limits import _training_ops

        # the largest points first (by the loader's op estimate), so that the workers finish together: a large
        # point left for the end would run alone on one core; each result goes back to its own point
        big = sorted(range(len(todo)), key=lambda i: -_training_ops(todo[i].block, world, symmetric))
        _warm_for_workers(profile)
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as ex:
            futs = {i: ex.submit(run_point, name, world, todo[i].block, profile, symmetric, env) for i in big}
            done = {i: futs[i].result() for i in track(big, "search", total=len(big))}
        results = [done[i] for i in range(len(todo))]
    _PROFILES.clear()
    _MODELS.clear()
    _LAYOUTS.clear()
    for p, r in zip(todo, results, strict=True):
        if isinstance(r, str):
            p.status, p.reason = "refused", r
        else:
            p.iteration_s, p.tflops_per_gpu, p.mfu = r["iteration_s"], r["tflops_per_gpu"], r["mfu"]
    pareto(points)
    ran = sorted((p for p in points if p.status == "simulated"), key=lambda p: p.iteration_s)
    return ran + [p for p in points if p.status != "simulated"]


def write_plot(path: Any, points: list[SearchPoint], title: str) -> None:
    """Iteration time against memory per GPU of the simulated points, the Pareto front joined (PNG)."""
    from matplotlib.figure import Figure

    from schedsim.report.chart_base import write_figure

    fig = Figure(figsize=(7, 4.5), dpi=120)
    ax = fig.subplots()
    sim = [p for p in points if p.status == "simulated"]
    ax.scatter([p.memory_bytes / 2**30 for p in sim], [p.iteration_s for p in sim], s=14, color="0.6",
               label="configuration")
    front = sorted((p for p in sim if p.pareto), key=lambda p: p.memory_bytes)
    ax.plot([p.memory_bytes / 2**30 for p in front], [p.iteration_s for p in front], "o-", color="C3",
            label="Pareto front")
    for p in front:
        s = p.setting
        ax.annotate(f"tp{s['tp']} pp{s['pp']} b{s['micro_batch_size']} {s['recompute']}",
                    (p.memory_bytes / 2**30, p.iteration_s), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("memory per GPU, most loaded pipeline stage (GiB)")
    ax.set_ylabel("iteration time (s)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure(fig, path)
