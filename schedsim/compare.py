"""Compare a predicted timeline with a measured (executed or imported) one.

Pure Python (no torch): ``schedsim compare PRED MEAS`` and ``schedsim execute
--compare`` use it, and so can the trace importer through
:func:`compare_timelines`.

What is compared
----------------
* **Makespan**: signed relative error ``(pred − meas) / meas``; when the
  measured timeline comes from ``schedsim execute``, also against its
  uninstrumented makespan (iterations timed as a whole, without per-op events
  or NVTX), which is what the schedule itself costs.
* **Per op**, matching ops by id (``name@rN``): the duration error of each
  op, then the median and worst absolute relative error, and the same grouped
  by op kind (with the summed predicted and measured time of each kind).
  Like is compared with like (:func:`op_window`): when the measured timeline
  is timed by CUDA events (``meta.timing == "cuda_events"``, what ``schedsim
  execute`` records), a measured op starts when its *stream* reached it (the
  previous op on the stream done, awaited events resolved, the host call
  issued; for a collective or send/recv, the last member's arrival) and its
  span includes the time its kernel waited for SMs behind other streams'
  kernels. The predicted op is then timed the same way: from its
  ``stream_s`` (dependencies done and the host at the start of the op's call,
  where the executor records the start event; ``waves`` model) or, lacking
  it, its ``ready_s``, the latest over its rendezvous group, to its end.
  Timelines whose start is the kernel's own start (imported Kineto traces,
  predictions on both sides) compare ``start_s`` → ``end_s``.
* **Overlap ratio and exposed communication** (definitions in
  :mod:`schedsim.sim.metrics`), predicted against measured.
* **Per rank, by resource**: the busy time of compute, communication and copy
  and the idle time. This is always reported, and it is *the* comparison when
  the ops cannot be matched by id (an imported trace names kernels, not schedule
  ops): then ``match.mode`` is ``"kind"``. A replay of an imported schedule
  (``schedsim import`` then ``predict``) is matched with the imported timeline by
  the ``trace_id`` tag each of its ops carries (:func:`as_trace_ids`).

Errors are signed: positive means the prediction is too long.

The result is a :class:`Comparison` (frozen dataclasses all the way down); ``Comparison.to_dict()`` is
``compare.json``, and ``Comparison.from_dict`` reads it back.
"""

import itertools
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from schedsim.errors import TraceError
from schedsim.hardware.profile import TIMED_EAGER_SUFFIX, TIMED_GRAPH_SUFFIX, HardwareProfile
from schedsim.kinds import P2P_KINDS, KindList
from schedsim.results import OMIT_NONE, from_dict, to_dict
from schedsim.sim.metrics import Metrics, represented
from schedsim.sim.timeline import Timeline

__all__ = ["compare_timelines", "event_timed", "op_window", "load_timeline_arg", "Comparison", "Pair", "MakespanError",
           "Uninstrumented", "Match", "OpErrors", "OpRow", "WorstOp", "KindErrors", "Delta", "Overlap",
           "ResourceDelta", "RankComparison", "measured_makespans", "makespan_lines", "MAKESPAN_LABELS",
           "profiled_profile"]


@dataclass(frozen=True)
class Pair:
    """One property of the two timelines (their ``schedule``, ``source`` or ``launch``): ``pred`` and ``meas``."""

    pred: str
    meas: str


@dataclass(frozen=True)
class Uninstrumented:
    """The prediction against the measured makespan without per-op instrumentation (``schedsim execute``);
    ``pred_s`` is set when that prediction is not the one of :attr:`MakespanError.pred_s` (a timed CUDA graph's
    ops are compared with a prediction of the timed graph, :func:`compare_timelines`)."""

    meas_s: float
    error: float | None
    abs_error_pct: float | None
    pred_s: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class MakespanError:
    """Makespans (seconds), signed relative ``error`` (None when the measured one is 0) and |error| in %, of the
    measured timeline (median op times; instrumented when ``schedsim execute`` timed it); ``counts`` names the
    comparison that is the verdict: ``"uninstrumented"`` (:attr:`uninstrumented`, whole iterations without per-op
    events, what the schedule itself costs) when the run has it, else ``"timeline"`` (this one)."""

    pred_s: float
    meas_s: float
    error: float | None
    abs_error_pct: float | None
    uninstrumented: Uninstrumented | None = field(default=None, metadata=OMIT_NONE)
    counts: str = "timeline"


#: How the outputs name each makespan of an executed run (:func:`measured_makespans`).
MAKESPAN_LABELS = {
    "uninstrumented": "uninstrumented iteration (median; whole iterations without per-op events: what the "
                      "schedule costs)",
    "instrumented": "instrumented iteration (median; with per-op CUDA events)",
    "timeline": "timeline of median op times (instrumented; the table, the Gantt and the per-op errors)",
}


def measured_makespans(meta: dict[str, Any], timeline_makespan_s: float) -> list[tuple[str, float]]:
    """The makespans an executed run has, as ``(kind, seconds)`` with the one that counts first: the
    uninstrumented iteration's median (``meta.makespan_uninstrumented_s``) when measured, the instrumented
    iteration's median (``meta.makespan_median_s``) and the makespan of the timeline of median op times
    (``timeline_makespan_s``; the median of each op's times need not give the median makespan,
    :mod:`executor.timing`). Kinds are keys of :data:`MAKESPAN_LABELS`.

    >>> measured_makespans({"makespan_median_s": 5.1e-3, "makespan_uninstrumented_s": 3.4e-3}, 5.3e-3)
    [('uninstrumented', 0.0034), ('instrumented', 0.0051), ('timeline', 0.0053)]
    >>> measured_makespans({}, 2.0)
    [('timeline', 2.0)]
    """
    out = []
    for kind, key in (("uninstrumented", "makespan_uninstrumented_s"), ("instrumented", "makespan_median_s")):
        v = meta.get(key)
        if isinstance(v, (int, float)) and v > 0:
            out.append((kind, float(v)))
    out.append(("timeline", float(timeline_makespan_s)))
    return out


def makespan_lines(meta: dict[str, Any], timeline_makespan_s: float) -> list[str]:
    """What ``schedsim execute`` prints about its makespans (:func:`measured_makespans`): one line naming the
    makespan that counts, then one per other makespan, saying what it is.

    >>> print("\\n".join(makespan_lines({"makespan_median_s": 5.107e-3, "makespan_uninstrumented_s": 3.444e-3},
    ...                                  5.321e-3)))  # doctest: +NORMALIZE_WHITESPACE
    makespan: 3.444 ms, the uninstrumented iteration (median; whole iterations without per-op events: what the
    schedule costs); compare judges the prediction against this one
      also 5.107 ms: the instrumented iteration (median; with per-op CUDA events)
      also 5.321 ms: the timeline of median op times (instrumented; the table, the Gantt and the per-op errors)
    """
    (kind, sec), *rest = measured_makespans(meta, timeline_makespan_s)
    return ([f"makespan: {sec * 1e3:.3f} ms, the {MAKESPAN_LABELS[kind]}; compare judges the prediction against "
             "this one"] + [f"  also {s * 1e3:.3f} ms: the {MAKESPAN_LABELS[k]}" for k, s in rest])


@dataclass(frozen=True)
class Match:
    """How ops were matched: ``mode`` ``"id"`` or ``"kind"``, counts, and the first 20 unmatched ids."""

    mode: str
    matched: int
    only_pred: list[str]
    only_meas: list[str]
    n_only_pred: int
    n_only_meas: int


@dataclass(frozen=True)
class OpRow:
    """One op matched by id: its windows (seconds) on both sides and the duration error."""

    id: str
    kind: str
    rank: int
    stream: str
    pred_start_s: float
    pred_dur_s: float
    meas_start_s: float
    meas_dur_s: float
    error: float | None
    pred_wait_s: float | None = field(default=None, metadata=OMIT_NONE)
    meas_wait_s: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class WorstOp:
    """The op with the largest |duration error|: durations in seconds."""

    id: str
    kind: str
    pred_s: float
    meas_s: float
    error: float | None


@dataclass(frozen=True)
class KindErrors:
    """The ops of one kind: count, summed durations (seconds), error of the sums, median |error|."""

    n: int
    pred_total_s: float
    meas_total_s: float
    total_error: float | None
    median_abs_error: float | None


@dataclass(frozen=True)
class OpErrors:
    """Per-op duration errors (matching by id only); ``span`` says which window was compared. When both sides
    know when each op got the GPU and when its stream reached it, ``wait_median_abs_diff_s`` is the median over
    ops of |predicted − measured wait| (seconds; the wait is ``start_s − stream_s``, docs/metrics.md, "Per-op
    spans")."""

    median_abs_error: float | None
    mean_abs_error: float | None
    worst: WorstOp | None
    by_kind: dict[str, KindErrors]
    per_op: list[OpRow]
    span: str
    wait_median_abs_diff_s: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Delta:
    """A timeline-wide metric on both sides; ``error`` is relative, or the difference for ratios."""

    pred: float
    meas: float
    error: float | None


@dataclass(frozen=True)
class OpCall:
    """One op's host call (seconds from its rank's previous call returning to its own), both sides."""

    id: str
    pred_s: float
    meas_s: float


@dataclass(frozen=True)
class HostCalls:
    """Per op, the host's call of an uninstrumented iteration (``meta.host_call_end_s`` on both sides): how
    many ops, the median |relative error| of their call times, and the ``largest`` excesses (measured − predicted),
    at most :data:`HOST_CALLS_SHOWN`."""

    n: int
    median_abs_error: float
    largest: list[OpCall]


#: ops :class:`HostCalls` names as the largest excesses
HOST_CALLS_SHOWN = 3


@dataclass(frozen=True)
class Overlap:
    """Overlap ratio (error = pred − meas), exposed and busy communication (seconds, summed over ranks)."""

    overlap_ratio: Delta
    exposed_comm_s: Delta
    busy_comm_s: Delta


@dataclass(frozen=True)
class ResourceDelta:
    """One rank's time on one resource (seconds) on both sides, and the relative error."""

    pred_s: float
    meas_s: float
    error: float | None


@dataclass(frozen=True)
class RankComparison:
    """One rank's busy time by resource, idle time and exposed communication, predicted against measured."""

    compute: ResourceDelta
    comm: ResourceDelta
    copy: ResourceDelta
    idle: ResourceDelta
    exposed_comm: ResourceDelta


@dataclass(frozen=True)
class Comparison:
    """A predicted timeline against a measured one (module docstring for what is compared).

    ``ops`` is None (and absent from the JSON form) unless ops were matched by id.
    """

    schedule: Pair
    source: Pair
    launch: Pair
    profile: str | None
    warnings: list[str]
    makespan: MakespanError
    match: Match
    ops: OpErrors | None = field(default=None, metadata=OMIT_NONE)
    overlap: Overlap | None = None
    by_rank: dict[int, RankComparison] = field(default_factory=dict)
    host_issue: dict[int, Delta] | None = field(default=None, metadata=OMIT_NONE)
    host_calls: HostCalls | None = field(default=None, metadata=OMIT_NONE)

    def to_dict(self, *, per_op: bool = True) -> dict[str, Any]:
        """The JSON form (``compare.json``); without ``per_op`` the per-op rows are left out. The per-op rows
        (up to 100,000) are made in one pass of plain field reads, not by the generic walk of
        :func:`schedsim.results.to_dict` (which gives the same dicts)."""
        import dataclasses
        import operator

        ops = self.ops
        rows = ops.per_op if ops is not None else []
        d: dict[str, Any] = to_dict(dataclasses.replace(self, ops=dataclasses.replace(ops, per_op=[]))
                                    if ops is not None and rows else self)
        if "ops" in d:
            if not per_op:
                del d["ops"]["per_op"]
            elif rows:
                fields = dataclasses.fields(OpRow)
                names = [f.name for f in fields]
                omit = {f.name for f in fields if f.metadata.get("omit_none")}  # left out when None, as to_dict
                get = operator.attrgetter(*names)
                d["ops"]["per_op"] = [{k: v for k, v in zip(names, get(r), strict=True)
                                       if v is not None or k not in omit} for r in rows]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Comparison":
        """Read :meth:`to_dict`'s form (e.g. ``compare.json``) back.

        Raises
        ------
        KeyError
            A required key is missing.
        """
        return from_dict(cls, d)

#: Share of ops that must match by id for the by-id comparison to be used.
MIN_MATCH_SHARE = 0.5
_TINY = 1e-12


def _rel(pred: float, meas: float) -> float | None:
    """Signed relative error (pred − meas) / meas, None when meas is 0."""
    if abs(meas) < _TINY:
        return None if abs(pred) >= _TINY else 0.0
    return (pred - meas) / meas


#: Op kinds that are not a rendezvous (no group start): those of the registry whose resource is not NCCL's.
_LOCAL_KINDS = KindList(lambda info: info.resource != "comm")


#: ``meta.timing`` values of timelines timed by CUDA events on each op's stream (eager; inside a CUDA graph).
EVENT_TIMINGS = frozenset({"cuda_events", "cuda_graph_external_events"})


def event_timed(tl: Timeline) -> bool:
    """True when ``tl`` was timed by CUDA events recorded on each op's stream (``schedsim execute``)."""
    return isinstance(tl.meta, dict) and tl.meta.get("timing") in EVENT_TIMINGS


def op_window(tl: Timeline, *, stream_reached: bool) -> dict[str, tuple[float, float]]:
    """``{op id: (start_s, end_s)}`` of every span, as the other side of the comparison measures it
    (:func:`_windows`, by id; an id that repeats keeps its last row).

    >>> from schedsim.sim.timeline import Span, Timeline
    >>> a = Span("ag@r0", "ag", 0, "nccl", "all_gather", "comm", 3.0, 5.0, ready_s=1.0)
    >>> b = Span("ag@r1", "ag", 1, "nccl", "all_gather", "comm", 3.0, 5.0, ready_s=2.0)
    >>> op_window(Timeline("x", "predict", 2, spans=[a, b]), stream_reached=True)["ag@r0"]
    (2.0, 5.0)
    """
    start, end = _windows(tl, stream_reached=stream_reached)
    return dict(zip(tl.columns.id, zip(start.tolist(), end.tolist(), strict=True), strict=True))


def _windows(tl: Timeline, *, stream_reached: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``tl.columns``, ``(start_s, end_s)`` arrays (float64, shape (n,)) of each op's window as the
    other side of the comparison measures it.

    With ``stream_reached`` the start is when the op's stream reached it: ``stream_s`` (predicted by
    ``waves``: dependencies done and the host at the start of the op's call), else ``ready_s``; for a
    collective or send/recv the latest of these over its rendezvous (same collective name on every rank; a
    send and its recv share ``tags.msg``), capped at ``end_s``; a row with neither keeps ``start_s``. This is
    what CUDA events recorded on the op's stream measure (``executor/timing.py``). Without it, ``(start_s,
    end_s)``. Column operations throughout: a million ops cost a few numpy passes and one dict of rendezvous.
    """
    c = tl.columns
    if not stream_reached:
        return c.start_s, c.end_s
    a = c.ready_s if c.stream_s is None else np.where(np.isnan(c.stream_s), c.ready_s, c.stream_s)
    kinds, kc = c.kind
    local = np.array([k in _LOCAL_KINDS for k in kinds], bool)[kc] if kinds else np.zeros(len(c), bool)
    p2p = np.array([k in P2P_KINDS for k in kinds], bool)[kc] if kinds else np.zeros(len(c), bool)
    group = np.full(len(c), -1, np.int64)  # the rendezvous of each row (-1: none)
    keys: dict[tuple[str, str], int] = {}
    coll = np.flatnonzero(~local & ~p2p)
    if len(coll):
        names = c.name
        group[coll] = [keys.setdefault(("coll", names[i]), len(keys)) for i in coll.tolist()]
    values, codes = c.tag_column("msg")
    msg = np.flatnonzero(p2p & (codes >= 0))
    if len(msg):
        of_value = np.array([keys.setdefault(("p2p", str(v)), len(keys)) for v in values], np.int64)
        group[msg] = of_value[codes[msg]]
    met = (group >= 0) & ~np.isnan(a)
    arrive = np.full(len(keys), -np.inf)
    np.maximum.at(arrive, group[met], a[met])
    t0 = a.copy()
    t0[met] = arrive[group[met]]
    return np.where(np.isnan(a), c.start_s, np.minimum(t0, c.end_s)), c.end_s


def graph_segments(tl: Timeline) -> list[list[str]]:
    """The op ids of each CUDA graph segment that ``tl`` timed as one replay (``meta.graph_segments``, written by
    ``schedsim execute`` for ops with ``graph:`` keys in an eager run); [] when none."""
    segs = tl.meta.get("graph_segments") if isinstance(tl.meta, dict) else None
    return [[str(i) for i in seg] for seg in segs if isinstance(seg, list)] if isinstance(segs, list) else []


def segment_windows(tl: Timeline, window: tuple[np.ndarray, np.ndarray],
                    segments: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """``window`` (per row of ``tl.columns``, start and end in seconds, as :func:`_windows` gives them) with every
    op of each segment given the segment's window: the earliest start and the latest end over the segment's ops
    found in ``tl`` (new arrays; ``window`` itself unchanged). What the other side measured for each of them when
    it timed the segment as one CUDA graph replay (:func:`graph_segments`)."""
    if not segments:
        return window
    start, end = window[0].copy(), window[1].copy()
    ids = tl.columns.id
    row = dict(zip(ids, range(len(ids)), strict=True))
    flat = list(itertools.chain.from_iterable(segments))  # one pass over the ids, no loop per segment
    rows = np.fromiter(map(row.get, flat, itertools.repeat(-1)), np.int64, len(flat))
    seg_of = np.repeat(np.arange(len(segments)), np.fromiter(map(len, segments), np.int64, len(segments)))
    found = rows >= 0
    rows, seg_of = rows[found], seg_of[found]
    lo, hi = np.full(len(segments), np.inf), np.full(len(segments), -np.inf)
    np.minimum.at(lo, seg_of, start[rows])
    np.maximum.at(hi, seg_of, end[rows])
    start[rows], end[rows] = lo[seg_of], hi[seg_of]
    return start, end


def _is_timed_prediction(tl: Timeline) -> bool:
    """A prediction of a CUDA graph timed op by op (``predict --timed-graph``, ``execute --compare``'s
    ``predicted_timed/``): ``meta.timed_graph``, or a profile named by :meth:`HardwareProfile.timed_graph`."""
    return (isinstance(tl.meta, dict) and bool(tl.meta.get("timed_graph"))) or str(tl.profile or "").endswith(
        TIMED_GRAPH_SUFFIX)


def _is_timed_eager_prediction(tl: Timeline) -> bool:
    """A prediction of an eager run timed op by op (``execute --compare``'s ``predicted_timed/`` of an eager run):
    a profile named by :meth:`HardwareProfile.timed_eager`."""
    return str(tl.profile or "").endswith(TIMED_EAGER_SUFFIX)


def timed_eager_measurement(tl: Timeline) -> bool:
    """True when ``tl`` is an eager CUDA run that ``schedsim execute`` timed op by op and that measured what the
    timing costs its host per op (``meta.timing_host_per_op_us``): its ops are compared with a prediction of the
    timed run (:meth:`~schedsim.hardware.profile.HardwareProfile.timed_eager`)."""
    return (tl.launch == "eager" and isinstance(tl.meta, dict)
            and isinstance(tl.meta.get("timing_host_per_op_us"), int | float))


def timed_profile(meas: Timeline, profile: HardwareProfile) -> tuple[HardwareProfile, bool] | None:
    """``(profile, model_executor)`` that predict ``meas`` as it was timed op by op, for its ops: a CUDA graph
    timed with event pairs (:meth:`HardwareProfile.timed_graph`; None when the profile has no
    ``graph_timing_event_us``), an eager run that measured its timing cost per op
    (:meth:`HardwareProfile.timed_eager`, simulated with ``model_executor``); None when the plain prediction
    stands for the run. ``execute --compare`` and ``benchmarks/accuracy/replay_runs.py`` both use it."""
    if timed_graph_measurement(meas):
        timed = profile.timed_graph()
        return None if timed is profile else (timed, False)
    if timed_eager_measurement(meas):
        return profile.timed_eager(float(meas.meta["timing_host_per_op_us"])), True
    return None


def profiled_profile(ktl: Timeline, meas: Timeline, profile: HardwareProfile) -> HardwareProfile | None:
    """The profile that predicts the profiled iterations of ``execute --profiler`` (Kineto kernels, ``ktl`` from
    :func:`executor.profiling.kernel_timeline`), simulated with ``model_executor=True``: ``launch.
    executor_extra_per_op_us`` set to the profiler's host cost per op, the profiled iteration's host time per op
    (``ktl.meta.host_per_op_us``) less the uninstrumented iteration's (``meas.meta.host_issue_uninstrumented_s``
    over the rank's ops), the largest over ranks, at least 0. None for a CUDA graph, or when either is missing.

    Why: each op's span is compared with that iteration's kernels, and ``torch.profiler`` slows the host: on one
    H100 matmul_streams bf16 chunks 16 issued its 513 ops at 92.7 µs each profiled against 10.5 µs uninstrumented,
    so no two of its GEMMs overlapped, while a prediction of the uninstrumented run stacks them on the SMs
    (245 of 255 in a row overlapping; docs/validation.md, "Operands from HBM the table already holds"), and the
    span of an op means one thing on both sides only for the same issue times (docs/metrics.md, "Per-op spans").
    Same reasoning as :meth:`HardwareProfile.timed_eager`, which does it for the event-timed iterations."""
    host = (ktl.meta or {}).get("host_per_op_us") or {}
    issue = (meas.meta or {}).get("host_issue_uninstrumented_s") or []
    if meas.launch == "cuda_graph" or not host or not issue:
        return None
    n = np.bincount(np.asarray(meas.columns.rank, np.int64), minlength=meas.world_size)
    extra = [float(us) - float(issue[int(r)]) * 1e6 / n[int(r)] for r, us in host.items()
             if int(r) < len(issue) and issue[int(r)] and n[int(r)]]
    if not extra:
        return None
    launch = profile.launch.model_copy(update={"executor_extra_per_op_us": max(0.0, max(extra))})
    return profile.model_copy(update={"launch": launch, "name": profile.name + "+profiled"})


def timed_graph_measurement(tl: Timeline) -> bool:
    """True when ``tl`` is a CUDA graph that ``schedsim execute`` timed op by op (``meta.timing`` is
    ``cuda_graph_external_events``): its ops hold their timing events' span, so they are compared with a
    prediction of the timed graph (:meth:`~schedsim.hardware.profile.HardwareProfile.timed_graph`)."""
    return isinstance(tl.meta, dict) and tl.meta.get("timing") == "cuda_graph_external_events"


#: The tag of a replayed op naming its span in the imported timeline (:data:`schedsim.trace.to_schedule.TRACE_ID_TAG`).
TRACE_ID_TAG = "trace_id"


def as_trace_ids(tl: Timeline, other: Timeline) -> Timeline:
    """``tl`` with the id of every span that carries a ``trace_id`` tag replaced by that tag (and its critical
    path renamed alike), when ``other`` is an imported timeline and ``tl`` is not: the replay of an imported
    schedule (its ops ``k12``, ``cp3``, ...) compared with the import, op by op, under the imported span ids
    (``{kernel}#{n}@r{rank}``). Otherwise ``tl`` itself.

    >>> from schedsim.sim.timeline import Span
    >>> p = Timeline("x", "predict", 1, spans=[Span("k0@r0", "k0", 0, "s7", "compute", "compute", 0.0, 1.0,
    ...                                         tags={"trace_id": "gemm#0@r0"})], critical_path=["k0@r0"])
    >>> got = as_trace_ids(p, Timeline("x", "import", 1))
    >>> [s.id for s in got.spans], got.critical_path
    (['gemm#0@r0'], ['gemm#0@r0'])
    """
    if other.source != "import" or tl.source == "import":
        return tl
    values, codes = tl.columns.tag_column(TRACE_ID_TAG)
    if not values:
        return tl
    ids = tl.columns.id
    new = [str(values[c]) if c >= 0 else i for i, c in zip(ids, codes.tolist(), strict=True)]
    renamed = dict(zip(ids, new, strict=True))
    out = Timeline(tl.schedule, tl.source, tl.world_size, tl.launch, tl.profile,
                   [s._replace(id=n) for s, n in zip(tl.spans, new, strict=True)],
                   [renamed.get(x, x) for x in tl.critical_path], tl.meta)
    out.host_call_end_s = tl.host_call_end_s
    return out


def _replayed(pred: Timeline, meas: Timeline) -> bool:
    """``pred`` is the replay of the import ``meas`` (its spans carry ``trace_id`` tags)."""
    return meas.source == "import" and pred.source != "import" and bool(pred.columns.tag_column(TRACE_ID_TAG)[0])


#: Largest ratio between the medians of a run's uninstrumented iterations in consecutive quarters that is not
#: reported as drift (:func:`iteration_drift`). Over 53 execute processes on one H100 every GPU-bound case read
#: 1.00-1.09, and the host-bound processes whose makespans differed from their twins' by up to 1.9x read
#: 1.21-1.94 (docs/validation.md, "One GPU: a run that changed speed").
DRIFT_WARN = 1.15


def iteration_drift(meta: object) -> tuple[float, list[float]] | None:
    """How much a measured run changed speed while it ran: the medians of its uninstrumented iterations
    (``meta.makespan_uninstrumented_iters_s``, seconds, in order) over four consecutive quarters (the last takes
    the remainder) and the ratio of the largest to the smallest; None with fewer than 8 iterations (or none)."""
    xs = meta.get("makespan_uninstrumented_iters_s") if isinstance(meta, dict) else None
    if not isinstance(xs, list) or len(xs) < 8 or not all(isinstance(x, (int, float)) and x > 0 for x in xs):
        return None
    q = len(xs) // 4
    meds = [statistics.median(xs[i * q:(i + 1) * q if i < 3 else len(xs)]) for i in range(4)]
    return max(meds) / min(meds), meds


def drift_host_thread(meta: object, meds: list[float]) -> str:
    """What rank 0's issuing thread did in the slowest and the fastest quarter of :func:`iteration_drift`
    (``meds``), from ``meta.host_thread_uninstrumented`` (``executor.clock.HOST_FIELDS`` per iteration): the
    medians of its run time and run-queue wait as shares of the wall time, its involuntary and voluntary context
    switches per iteration, and the CPUs it was on; "" without those columns (or with fewer values than
    iterations), "n/a" for a run-queue or switch column the run did not record in full. A file's columns are
    checked on read (``schedsim.sim.timeline_json``: a list of numbers each, or the file is refused).

    >>> meta = {"makespan_uninstrumented_iters_s": [2.0] * 4 + [1.0] * 4,
    ...         "host_thread_uninstrumented": [{"wall_s": [2.0] * 4 + [1.0] * 4, "run_s": [1.0] * 4 + [1.0] * 4,
    ...          "runq_s": [1.0] * 4 + [0.0] * 4, "vcsw": [0] * 8, "ivcsw": [3] * 4 + [0] * 4,
    ...          "cpu_start": [1] * 4 + [0] * 4, "cpu_end": [1] * 4 + [0] * 4}]}
    >>> for part in drift_host_thread(meta, [2.0, 2.0, 1.0, 1.0]).split(": ", 1)[1].split("; "):
    ...     print(part)
    ran 50 % of the wall, runnable 50 %, 3 preemptions and 0 blocks per iteration, CPUs [1]
    fastest: ran 100 %, runnable 0 %, 0 preemptions and 0 blocks, CPUs [0]
    """
    xs = meta.get("makespan_uninstrumented_iters_s") if isinstance(meta, dict) else None
    cols = meta.get("host_thread_uninstrumented") if isinstance(meta, dict) else None
    if not isinstance(xs, list) or not isinstance(cols, list) or not cols or not isinstance(cols[0], dict):
        return ""
    c = cols[0]
    n, q = len(xs), len(xs) // 4
    if any(len(c.get(f) or []) < n for f in ("wall_s", "run_s", "cpu_start", "cpu_end")):
        return ""

    def part(i: int) -> range:
        return range(i * q, (i + 1) * q if i < 3 else n)

    def med(f: str, idx: range, share: bool = False) -> float | None:
        if len(c.get(f) or []) < n:  # a column the run did not record, or with fewer values than iterations
            return None
        vals = [c[f][k] / c["wall_s"][k] if share else c[f][k] for k in idx
                if c[f][k] is not None and (not share or c["wall_s"][k])]
        return statistics.median(vals) if vals else None

    def desc(idx: range, long: bool) -> str:
        run, rq, iv, v = med("run_s", idx, True), med("runq_s", idx, True), med("ivcsw", idx), med("vcsw", idx)
        cpus = sorted({c[f][k] for f in ("cpu_start", "cpu_end") for k in idx if c[f][k] is not None})
        pct = lambda x: "n/a" if x is None else f"{100 * x:.0f} %"  # noqa: E731
        num = lambda x: "n/a" if x is None else f"{x:g}"  # noqa: E731
        return (f"ran {pct(run)}{' of the wall' if long else ''}, runnable {pct(rq)}, {num(iv)} preemptions and "
                f"{num(v)} blocks{' per iteration' if long else ''}, CPUs {cpus}")

    slow, fast = meds.index(max(meds)), meds.index(min(meds))
    return f"rank 0 host thread, slowest quarter: {desc(part(slow), True)}; fastest: {desc(part(fast), False)}"


def _drift_warning(meas: Timeline) -> list[str]:
    """A warning when :func:`iteration_drift` of ``meas`` exceeds :data:`DRIFT_WARN`, with
    :func:`drift_host_thread` when the run recorded its host thread."""
    d = iteration_drift(meas.meta)
    if d is None or d[0] <= DRIFT_WARN:
        return []
    host = drift_host_thread(meas.meta, d[1])
    return [f"the measured run changed speed while it ran: its uninstrumented iterations' medians by quarter "
            f"{', '.join(f'{m * 1e3:.4g}' for m in d[1])} ms ({d[0]:.2f}x between them): the process's host (or the "
            f"GPU's clock) drifted, and the measured makespan, their median, stands for none of them; rerun, or "
            f"compare several processes" + (f" ({host})" if host else "")]


def _warnings(pred: Timeline, meas: Timeline, pred_timed: Timeline | None = None) -> list[str]:
    """Why the timelines may not be comparable: different schedules, ``--set`` values or world sizes (of
    ``pred``, and of ``pred_timed`` when given, against ``meas``), a replay holding ops the import it is held
    against has no span for (``--ops`` ranges, ``--iteration``), a timed CUDA graph compared with a plain
    prediction, a ``pred_timed`` that is not a timed graph's prediction or meets no timed graph, or a ``pred`` of
    representative ranks only (a symmetric training step)."""
    warnings: list[str] = []
    for p in (pred,) if pred_timed is None else (pred, pred_timed):
        tag = "" if p is pred else " (--pred-timed)"
        if p.schedule != meas.schedule and not (_replayed(p, meas) and p.schedule == f"{meas.schedule}_replay"):
            warnings.append(f"different schedules{tag}: {p.schedule!r} vs {meas.schedule!r}")
        sp = p.meta.get("set") if isinstance(p.meta, dict) else None
        sm = meas.meta.get("set") if isinstance(meas.meta, dict) else None
        if sp is not None and sm is not None and sorted(sp) != sorted(sm):
            warnings.append(f"different --set values{tag}: {sorted(sp)} vs {sorted(sm)}")
        if p.world_size != meas.world_size:
            warnings.append(f"different world sizes{tag}: {p.world_size} vs {meas.world_size}")
        if _replayed(p, meas):
            gone = int((p.columns.tag_column(TRACE_ID_TAG)[1] < 0).sum())
            if gone:
                warnings.append(f"{gone} replayed op(s){tag} have no span in the imported timeline (their kernels "
                                "were folded into --ops ranges or lie outside the kept --iteration), so the "
                                "makespans and busy times hold different work; to compare the replay, import the "
                                "trace again without --ops")
    warnings += _represented(pred) + _drift_warning(meas)
    if pred_timed is None:
        if timed_graph_measurement(meas) and pred.launch == "cuda_graph" and not _is_timed_prediction(pred):
            warnings.append("the measured ops were timed inside a CUDA graph by event pairs, which lengthen each "
                            "op; compare them with a prediction of the timed graph (--pred-timed: execute "
                            "--compare's predicted_timed/, or predict --timed-graph with a profile that has "
                            "launch.graph_timing_event_us)")
        if timed_eager_measurement(meas) and pred.launch == "eager" and not _is_timed_eager_prediction(pred):
            warnings.append(f"the measured eager ops were timed in a loop that cost the host "
                            f"{meas.meta['timing_host_per_op_us']:g} us per op more than the uninstrumented run; "
                            "compare them with a prediction of the run as timed (--pred-timed: execute "
                            "--compare's predicted_timed/)")
        return warnings
    if timed_eager_measurement(meas):
        if not _is_timed_eager_prediction(pred_timed):
            warnings.append("--pred-timed is not a prediction of a timed eager run (its profile is not named "
                            f"'...{TIMED_EAGER_SUFFIX}'): use execute --compare's predicted_timed/")
    elif not timed_graph_measurement(meas):
        warnings.append(f"--pred-timed given, but the measured run was not timed op by op with a known cost "
                        f"(timing {meas.meta.get('timing') if isinstance(meas.meta, dict) else None!r}, launch "
                        f"{meas.launch!r}): compare with PRED alone")
    elif not _is_timed_prediction(pred_timed):
        warnings.append("--pred-timed is not a prediction of a timed graph (no meta.timed_graph): make it with "
                        "predict --timed-graph")
    if _is_timed_prediction(pred) or _is_timed_eager_prediction(pred):
        warnings.append("PRED is a prediction of a timed run; the plain prediction belongs there, the timed one "
                        "after --pred-timed")
    return warnings


def _represented(pred: Timeline) -> list[str]:
    """The warning for a ``pred`` of a symmetric training step, which holds its representative ranks only."""
    rep = represented(pred)
    return [f"the prediction simulated {len(rep['ranks'])} representative ranks of {rep['of']} (a symmetric "
            "training step): the other ranks' ops are matched by nothing, their busy times are their "
            "representatives'; predict --full-ranks simulates every rank"] if rep else []


def _makespan(ms_p: float, ms_m: float, meas: Timeline, ms_untimed: float | None = None) -> MakespanError:
    """``ms_p`` against the measured makespan ``ms_m``; the uninstrumented one (if ``meas`` has it) against
    ``ms_untimed`` when given (the untimed prediction of a timed CUDA graph), else against ``ms_p``."""
    err = _rel(ms_p, ms_m)
    un = meas.meta.get("makespan_uninstrumented_s") if isinstance(meas.meta, dict) else None
    unin = None
    if un:
        # schedsim execute also times whole iterations without per-op events/NVTX: the program's own cost
        base = ms_p if ms_untimed is None else ms_untimed
        eu = _rel(base, float(un))
        unin = Uninstrumented(float(un), eu, None if eu is None else abs(eu) * 100.0, ms_untimed)
    return MakespanError(ms_p, ms_m, err, None if err is None else abs(err) * 100.0, unin,
                         "uninstrumented" if unin is not None else "timeline")


def _rank_delta(p: Metrics, m: Metrics, r: int, key: str) -> ResourceDelta:
    a = getattr(p.ranks[r], key) if r in p.ranks else 0.0
    b = getattr(m.ranks[r], key) if r in m.ranks else 0.0
    return ResourceDelta(a, b, _rel(a, b))


def compare_timelines(pred: Timeline, meas: Timeline, *, max_ops_listed: int = 100000,
                      pred_timed: Timeline | None = None) -> Comparison:
    """Compare a predicted timeline with a measured one.

    Parameters
    ----------
    pred : Timeline
        Usually ``source="predict"``.
    meas : Timeline
        ``source="execute"`` or ``"import"``.
    max_ops_listed : int
        Cap on the per-op rows kept in the result (``ops.per_op``).
    pred_timed : Timeline, optional
        The prediction of the run *as it was timed op by op*, when that differs from ``pred``: a CUDA graph that
        ``schedsim execute --cuda-graph`` timed with event pairs around every op
        (:meth:`~schedsim.hardware.profile.HardwareProfile.timed_graph`), or an eager run whose timing events
        cost its host measurable time per op (:meth:`~schedsim.hardware.profile.HardwareProfile.timed_eager`).
        The ops, the (instrumented) makespan,
        the overlap and the per-rank busy times are then compared with it, and the uninstrumented makespan
        with ``pred``.

    Returns
    -------
    Comparison
        ``makespan`` (:class:`MakespanError`); ``match`` (:class:`Match`: mode ``"id"`` or ``"kind"``);
        ``ops`` (:class:`OpErrors`, by id only: median and mean |error|, the worst op, errors by kind and
        one :class:`OpRow` per op); ``overlap`` (:class:`Overlap`); ``by_rank`` {rank:
        :class:`RankComparison`} for compute, comm, copy, idle, exposed_comm. Times in seconds; errors are
        signed fractions ((pred − meas) / meas).

    Examples
    --------
    >>> from schedsim.sim.timeline import Span, Timeline
    >>> p = Timeline("x", "predict", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.1)])
    >>> m = Timeline("x", "execute", 1, spans=[Span("a@r0", "a", 0, "s", "matmul", "compute", 0.0, 1.0)])
    >>> round(compare_timelines(p, m).makespan.error, 3)
    0.1
    """
    untimed = None
    pred, meas = as_trace_ids(pred, meas), as_trace_ids(meas, pred)
    warns = _warnings(pred, meas, pred_timed)
    host_issue = _host_issue(pred, meas)
    host_calls = _host_calls(pred, meas)
    if pred_timed is not None:
        untimed, pred = Metrics.of(pred).makespan_s, pred_timed
    mp, mm = Metrics.of(pred), Metrics.of(meas)
    m = _match(pred, meas)
    share = m.n / max(1, min(m.n_p, m.n_m))
    mode = "id" if m.n and share >= MIN_MATCH_SHARE else "kind"
    ops = None
    if mode == "id":
        stream_reached = event_timed(meas) and not event_timed(pred)
        segs = graph_segments(meas)
        ops = _op_errors(m, pred, meas, max_ops_listed,
                         segment_windows(pred, _windows(pred, stream_reached=stream_reached), segs),
                         _windows(meas, stream_reached=False),
                         span=("stream reached -> end: wait + span (CUDA events on the op's stream)" if stream_reached
                               else "got the GPU -> end: span")
                         + ("; a CUDA graph segment's ops: the segment's span on both sides" if segs else "")
                         + ("" if untimed is None else
                            "; predicted as the timed eager run (its timing events' host time per op)"
                            if _is_timed_eager_prediction(pred) else
                            "; predicted by --pred-timed"
                            if timed_eager_measurement(meas) and not _is_timed_prediction(pred) else
                            "; predicted as the timed graph (its timing events' span in every op)"),
                         waits=not stream_reached)
    overlap = Overlap(Delta(mp.overlap_ratio, mm.overlap_ratio, mp.overlap_ratio - mm.overlap_ratio),
                      *[Delta(getattr(mp, k), getattr(mm, k), _rel(getattr(mp, k), getattr(mm, k)))
                        for k in ("exposed_comm_s", "busy_comm_s")])
    keys = (("compute", "busy_compute_s"), ("comm", "busy_comm_s"), ("copy", "busy_copy_s"), ("idle", "idle_s"),
            ("exposed_comm", "exposed_comm_s"))
    by_rank = {r: RankComparison(**{name: _rank_delta(mp, mm, r, key) for name, key in keys})
               for r in sorted(set(mp.ranks) | set(mm.ranks))}
    return Comparison(
        schedule=Pair(pred.schedule, meas.schedule), source=Pair(pred.source, meas.source),
        launch=Pair(pred.launch, meas.launch), profile=pred.profile, warnings=warns,
        makespan=_makespan(mp.makespan_s, mm.makespan_s, meas, untimed),
        match=Match(mode, m.n, m.only_p, m.only_m, m.n_p - m.n, m.n_m - m.n),
        ops=ops, overlap=overlap, by_rank=by_rank, host_issue=host_issue, host_calls=host_calls)


def _host_issue(pred: Timeline, meas: Timeline) -> dict[int, Delta] | None:
    """Per rank, the host's issue of one uninstrumented iteration: the prediction's ``meta.host_issue_s`` (when its
    host returned from the rank's last call) against ``schedsim execute``'s ``meta.host_issue_uninstrumented_s``
    (median host time of the lean loop's issue; eager CUDA runs), seconds; None unless both sides have it. In a
    host-bound run this separates the host's speed (a host cost per call off) from the GPU side of the model."""
    p = pred.meta.get("host_issue_s") if isinstance(pred.meta, dict) else None
    m = meas.meta.get("host_issue_uninstrumented_s") if isinstance(meas.meta, dict) else None
    if not (isinstance(p, list) and isinstance(m, list)):
        return None
    num = int | float
    out = {r: Delta(float(a), float(b), _rel(float(a), float(b)))
           for r, (a, b) in enumerate(zip(p, m, strict=False)) if isinstance(a, num) and isinstance(b, num)}
    return out or None


def _host_calls(pred: Timeline, meas: Timeline) -> HostCalls | None:
    """:class:`HostCalls` from both sides' ``meta.host_call_end_s`` (``{op id: s}`` in each rank's program
    order: a prediction of an eager run, ``schedsim execute``'s stamped iterations); a call's time is its end
    less the previous op's of its rank (the first op's: its end), compared for the ops whose previous op is the
    same on both sides; None unless both sides have such ops.

    >>> from schedsim.sim.timeline import Timeline
    >>> p = Timeline("x", "predict", 1, meta={"host_call_end_s": {"a@r0": 10e-6, "b@r0": 20e-6, "c@r0": 25e-6}})
    >>> m = Timeline("x", "execute", 1, meta={"host_call_end_s": {"a@r0": 40e-6, "b@r0": 50e-6, "c@r0": 55e-6}})
    >>> hc = _host_calls(p, m)
    >>> hc.n, round(hc.median_abs_error, 3), [(c.id, round(c.meas_s * 1e6, 1)) for c in hc.largest][:1]
    (3, 0.0, [('a@r0', 40.0)])
    >>> del m.meta["host_call_end_s"]["b@r0"]  # c@r0 follows a@r0 on one side only: not comparable
    >>> _host_calls(p, m).n
    1
    """
    p = pred.meta.get("host_call_end_s") if isinstance(pred.meta, dict) else None
    m = meas.meta.get("host_call_end_s") if isinstance(meas.meta, dict) else None
    if not (isinstance(p, dict) and isinstance(m, dict)):
        return None

    def calls(ends: dict[str, float]) -> dict[str, tuple[str | None, float]]:
        last: dict[str, tuple[str, float]] = {}
        out: dict[str, tuple[str | None, float]] = {}
        for op, t in ends.items():
            r = op.rsplit("@", 1)[-1]
            prev = last.get(r)
            out[op] = (None, float(t)) if prev is None else (prev[0], float(t) - prev[1])
            last[r] = (op, float(t))
        return out

    pp, pm = calls(p), calls(m)
    # an op's call is its end less its rank's previous op's: compared where both sides have the same previous op
    common = [op for op in pm if op in pp and pp[op][0] == pm[op][0]]
    cp, cm = {op: pp[op][1] for op in common}, {op: pm[op][1] for op in common}
    if not common:
        return None
    errs = [abs(e) for op in common if (e := _rel(cp[op], cm[op])) is not None]
    top = sorted(common, key=lambda op: cp[op] - cm[op])[:HOST_CALLS_SHOWN]
    return HostCalls(len(common), float(statistics.median(errs)) if errs else 0.0,
                     [OpCall(op, cp[op], cm[op]) for op in top if cm[op] > cp[op]])


@dataclass
class _Matched:
    """The ops of two timelines matched by id, as rows of their columns.

    ``n_p``/``n_m``: distinct ids on each side; ``rows_p``/``rows_m``: the rows of the matched ops on each side
    (int64, shape (n,)), in the order the predicted side first names them; ``keys[key_at[i]]`` is the id of
    matched op ``i``; ``only_p``/``only_m``: the first 20 unmatched ids of each side. An id that repeats on a side
    stands for its last row there, as in :meth:`Timeline.by_id`.
    """

    n_p: int
    n_m: int
    keys: list[str]
    key_at: np.ndarray
    rows_p: np.ndarray
    rows_m: np.ndarray
    only_p: list[str]
    only_m: list[str]

    @property
    def n(self) -> int:
        return len(self.rows_p)


def _match(pred: Timeline, meas: Timeline, listed: int = 20) -> _Matched:
    """Match the ops of ``pred`` and ``meas`` by id, on their id columns (no Span rows are built).

    Ids are matched by their string hashes (one sorted int64 array and a binary search, then the matched
    strings compared, so a hash collision cannot pair two ops); where a side repeats an id (or two of its ids
    share a hash), by dicts of ids instead, as :meth:`Timeline.by_id`.
    """
    ip, im = pred.columns.id, meas.columns.id
    hp = np.fromiter(map(hash, ip), np.int64, len(ip))
    by_hash = np.argsort(hp, kind="stable")
    sp = hp[by_hash]
    if len(ip) and len(im) and not (sp[1:] == sp[:-1]).any():  # no id repeats on the predicted side
        if ip == im:  # the same ids in the same order (a prediction against a run of its own schedule)
            rows = np.arange(len(ip))
            return _Matched(len(ip), len(im), ip, rows, rows, rows, [], [])
        hm = np.fromiter(map(hash, im), np.int64, len(im))
        order = np.argsort(hm, kind="stable")
        sm = hm[order]
        if not (sm[1:] == sm[:-1]).any():
            pos = np.empty(len(ip), np.int64)
            pos[by_hash] = np.minimum(np.searchsorted(sm, sp), len(sm) - 1)  # sorted queries: one sweep
            hit = sm[pos] == hp
            rows_p = np.flatnonzero(hit)
            rows_m = order[pos[hit]]
            if (np.array(ip, dtype=object)[rows_p] == np.array(im, dtype=object)[rows_m]).all():  # no collision
                taken = np.zeros(len(im), bool)
                taken[rows_m] = True
                return _Matched(len(ip), len(im), ip, rows_p, rows_p, rows_m,
                                [ip[i] for i in np.flatnonzero(~hit)[:listed].tolist()],
                                [im[i] for i in np.flatnonzero(~taken)[:listed].tolist()])
    import itertools

    pos_p = {k: i for i, k in enumerate(ip)}
    pos_m = {k: i for i, k in enumerate(im)}
    keys = list(pos_p)
    at = np.fromiter((pos_m.get(k, -1) for k in keys), np.int64, len(keys))
    found = at >= 0
    return _Matched(len(pos_p), len(pos_m), keys, np.flatnonzero(found),
                    np.fromiter(pos_p.values(), np.int64, len(keys))[found], at[found],
                    [keys[i] for i in np.flatnonzero(~found)[:listed].tolist()],
                    list(itertools.islice((k for k in pos_m if k not in pos_p), listed)))


def _rel_cols(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """:func:`_rel` element by element (float64 arrays of one shape); NaN where :func:`_rel` gives None."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (pred - meas) / meas
    tiny = np.abs(meas) < _TINY
    e[tiny] = np.where(np.abs(pred[tiny]) >= _TINY, np.nan, 0.0)
    return e


def _waits(tl: Timeline) -> np.ndarray:
    """Each row's wait (docs/metrics.md, "Per-op spans"): from its stream reaching the op (``stream_s``) to its
    start on the GPU, ``max(0, start_s - stream_s)`` in seconds (float64, shape (n,)); NaN where ``stream_s`` is
    unknown."""
    c = tl.columns
    if c.stream_s is None:
        return np.full(len(c), np.nan)
    return np.maximum(0.0, c.start_s - c.stream_s)  # NaN stays NaN: np.maximum propagates it


def _op_errors(m: _Matched, pred: Timeline, meas: Timeline, cap: int, wp: tuple[np.ndarray, np.ndarray],
               wm: tuple[np.ndarray, np.ndarray], span: str, waits: bool = False) -> OpErrors:
    """:class:`OpErrors` of the matched ops from the windows ``wp``/``wm`` (per row of each side's columns, as
    :func:`_windows` gives them); kind, rank and stream are the measured op's. With ``waits``, each op's
    predicted and measured wait (:func:`_waits`) and the median |difference| over the ops that have both.
    Column operations; Python objects only for the first ``cap`` rows listed. The sums and the mean add in the
    order of the rows as the Python built-ins do (``sum``, :func:`math.fsum` as :func:`statistics.fmean`), so
    the numbers are those of a row-by-row loop, bit for bit."""
    ps, pe = wp[0][m.rows_p], wp[1][m.rows_p]
    ms, me = wm[0][m.rows_m], wm[1][m.rows_m]
    pd, md = pe - ps, me - ms
    e = _rel_cols(pd, md)
    none = np.full(m.n, np.nan)
    pw, mw = (_waits(pred)[m.rows_p], _waits(meas)[m.rows_m]) if waits else (none, none)
    has = ~np.isnan(e)
    kinds, kc = meas.columns.kind
    kc = kc[m.rows_m]
    errs = np.abs(e[has])
    worst = None
    if len(errs):
        w = int(np.flatnonzero(has)[int(np.argmax(errs))])
        worst = WorstOp(m.keys[int(m.key_at[w])], kinds[int(kc[w])], float(pd[w]), float(md[w]),
                        float(e[w]))
    by_kind = {}
    for code in np.unique(kc).tolist():
        sel = kc == code
        tp, tm = sum(pd[sel].tolist()), sum(md[sel].tolist())
        ke = np.abs(e[sel & has])
        by_kind[kinds[code]] = KindErrors(int(sel.sum()), tp, tm, _rel(tp, tm),
                                          float(np.median(ke)) if len(ke) else None)
    rows = []
    if cap > 0:
        top = slice(0, cap)
        ids = [m.keys[i] for i in m.key_at[top].tolist()]
        streams, sc = meas.columns.stream
        ranks = meas.columns.rank[m.rows_m[top]].tolist()
        el = [None if x != x else x for x in e[top].tolist()]
        rows = list(map(OpRow, ids, [kinds[k] for k in kc[top].tolist()], ranks,
                        [streams[k] for k in sc[m.rows_m[top]].tolist()], ps[top].tolist(), pd[top].tolist(),
                        ms[top].tolist(), md[top].tolist(), el,
                        [None if x != x else x for x in pw[top].tolist()],
                        [None if x != x else x for x in mw[top].tolist()]))
    both = ~np.isnan(pw) & ~np.isnan(mw)
    return OpErrors(
        median_abs_error=float(np.median(errs)) if len(errs) else None,
        mean_abs_error=math.fsum(errs.tolist()) / len(errs) if len(errs) else None,
        worst=worst, by_kind=dict(sorted(by_kind.items())), per_op=rows, span=span,
        wait_median_abs_diff_s=float(np.median(np.abs(pw[both] - mw[both]))) if both.any() else None)


def load_timeline_arg(path: str | Path) -> Timeline:
    """Read a timeline from a ``timeline.json`` path or a folder holding one.

    Raises
    ------
    TraceError
        Missing or malformed file.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "timeline.json"
        if not p.exists():
            raise TraceError(f"{path}: folder has no timeline.json\n  fix: pass the --out folder of predict/execute, "
                             "or a timeline.json path")
    return Timeline.read_json(p)
