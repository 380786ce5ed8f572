"""Shared pieces of the trace importers: device activities, op ranges, and the Timeline they become.

Both importers (:mod:`schedsim.trace.nsys`, :mod:`schedsim.trace.kineto`)
reduce a trace to

* **activities**: one per GPU kernel, memcpy or memset (:class:`Activity`),
  with times in nanoseconds on the importer's common time base;
* **op ranges**: NVTX ranges (nsys) or GPU user annotations (Kineto) whose
  names are schedule ops, with the activities that ran inside them.

:func:`build_timeline` turns those into a :class:`~schedsim.sim.timeline.Timeline`
(``source="import"``): each op range becomes one span with id
``"{name}@r{rank}"`` covering its kernels (the kernels launched inside the range), every
activity outside an op range stays a span of its own, and times are seconds
from the earliest kept event.

What this does not model: the critical path of an imported timeline is the
*last-finishing chain* on one rank (walk back from the latest end to the
latest span that ended before it started); cross-rank waits are not followed,
because a trace has no dependency edges.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from schedsim.sim.timeline import Span, Timeline

__all__ = [
    "DTYPE_BYTES",
    "PIPELINE_NAME_PATTERNS",
    "Activity",
    "ImportResult",
    "OpRange",
    "ReplayInput",
    "RuntimeRow",
    "SyncRow",
    "build_timeline",
    "check_clocks_of_import",
    "check_collective_clocks",
    "collective_kind",
    "is_nccl_kernel",
    "last_finishing_chain",
    "load_op_names",
    "match_op",
    "short_kernel_name",
]

#: Range names that carry a pipeline action, tried in order: the executor's and schedsim's own op
#: names (``F0.3.fwd``, ``B1.2.I.dgrad``: action, stage, microbatch), torch.distributed.pipelining's
#: ``PP:{stage}{F|B|I|W}{mb}`` (``_get_profiler_function_name``, torch 2.4+) and its older
#: ``Forward {mb}`` / ``Backward {mb}``, and Megatron-LM's ``forward-compute`` / ``backward-compute``
#: timer ranges (no stage or microbatch: the rank is the stage and microbatches count up per rank).
PIPELINE_NAME_PATTERNS = (
    re.compile(r"^(?P<op>[FBIW])(?P<stage>\d+)\.(?P<mb>\d+)(?:\.|$)"),
    re.compile(r"^PP:(?P<stage>\d+)(?P<op>[FBIW])(?P<mb>\d+)$"),
    re.compile(r"^(?P<op>Forward|Backward) (?P<mb>\d+)$"),
    re.compile(r"^(?P<op>forward|backward)-compute$"),
)

#: HTA's communication-kernel rule (``hta/common/types.py``) plus NCCL ≥ 2.19's ``ncclDevKernel_``.
_NCCL_RE = re.compile(r"^(?:void\s+)?(?:nccl|hip|hccl)|ncclKernel|ncclDevKernel")
_OP_ID_RE = re.compile(r"^(?P<name>.+)@r(?P<rank>\d+)$")

#: Bytes per element for the dtype names Kineto's ``record_param_comms`` and NCCL kernels use (lower case; the
#: former are c10's ``ScalarType`` names, ``c10/core/ScalarType.h``: ``ComplexFloat`` is two floats, ``QInt32`` 4).
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "bf16": 2, "double": 8, "float64": 8,
    "int8": 1, "int8_t": 1, "char": 1, "uint8": 1, "uint8_t": 1, "byte": 1, "bool": 1, "int": 4, "int32": 4,
    "int32_t": 4, "uint32": 4, "int64": 8, "long": 8, "int64_t": 8, "uint64": 8, "uint64_t": 8, "short": 2,
    "int16": 2, "uint16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "fp8": 1, "complexhalf": 4, "complexfloat": 8, "complexdouble": 16, "qint8": 1,
    "quint8": 1, "qint32": 4,
}

_COLLECTIVES = [
    ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"), ("reducescatter", "reduce_scatter"),
    ("reduce_scatter", "reduce_scatter"), ("allgather", "all_gather"), ("all_gather", "all_gather"),
    ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("broadcast", "broadcast"), ("bcast", "broadcast"),
    ("sendrecv", "sendrecv"), ("send", "send"), ("recv", "recv"), ("reduce", "reduce"), ("gather", "gather"),
    ("scatter", "scatter"), ("barrier", "barrier"),
]


class Activity(NamedTuple):
    """One GPU activity. Times are nanoseconds on the importer's time base (float)."""

    rank: int
    device: int
    stream: str
    name: str          # short kernel name, or "Memcpy HtoD" / "Memset"
    cat: str           # "kernel" | "memcpy" | "memset"
    start_ns: float
    end_ns: float
    bytes: float = 0.0
    tags: dict[str, Any] | None = None  # NCCL metadata, NVTX region ...


class OpRange(NamedTuple):
    """A range named after a schedule op, with the indices of the activities it launched."""

    name: str
    rank: int
    start_ns: float
    end_ns: float
    members: list[int]
    text: str


class RuntimeRow(NamedTuple):
    """One host-side CUDA runtime call (``cudaLaunchKernel``, ``cudaEventRecord``, ``cudaStreamSynchronize`` ...).
    Times are ns on the importer's time base; ``corr`` is the CUPTI correlation id its GPU activity carries."""

    rank: int
    name: str
    ts_ns: float
    dur_ns: float
    corr: Any
    thread: Any


class SyncRow(NamedTuple):
    """One CUPTI synchronisation record (Kineto ``cuda_sync``): ``Stream Wait Event`` of ``stream`` on the event
    recorded on ``wait_stream`` by the runtime call of correlation ``record_corr``; ``corr`` is the wait's own
    runtime call."""

    rank: int
    name: str
    stream: str
    ts_ns: float
    wait_stream: str | None
    record_corr: Any
    corr: Any


class ReplayInput(NamedTuple):
    """What :mod:`schedsim.trace.to_schedule` builds a replay schedule from: the activities (ns, one time base)
    with their correlation ids (``corr[i]`` of ``acts[i]``, None where the trace has none), the runtime rows, the
    synchronisation rows, the world size and the trace format (``kineto`` or ``nsys``)."""

    acts: list[Activity]
    corr: list[Any]
    runtime: list[RuntimeRow]
    syncs: list[SyncRow]
    world_size: int
    source: str
    #: The id of ``acts[i]``'s span in the imported timeline (``{kernel}#{n}@r{rank}``, :func:`build_timeline`'s
    #: ``span_ids``), None where it has none (folded into a named range, or outside the kept iteration).
    span_ids: list[str | None] | None = None


class ImportResult(NamedTuple):
    """What an importer returns: the timeline and, for ``analyze``, the rows of its kernel-share and
    NCCL-volume tables.

    Attributes
    ----------
    timeline : Timeline
        ``source="import"``.
    kernel_rows : dict[str, list[tuple[str, str, float, float]]]
        Per device label ("Device 0"): ``(name, tid, ts_us, dur_us)`` of every
        kernel, by device label, stream and trace order; a kernel nsys names "Kernel" already carries
        the name of the NVTX range that launched it (:mod:`schedsim.trace.analyze`).
    nccl_rows : dict[str, list[tuple[str, int]]]
        Per device label: ``(collective range name, element count)``.
    warnings : list[str]
        Things the importer skipped or guessed.
    replay : ReplayInput or None
        With ``keep_runtime``: the input of a replay schedule.
    """

    timeline: Timeline
    kernel_rows: dict[str, list[tuple[str, str, float, float]]]
    nccl_rows: dict[str, list[tuple[str, int]]]
    warnings: list[str]
    replay: ReplayInput | None = None


def is_nccl_kernel(name: str) -> bool:
    """True for NCCL/RCCL/HCCL communication kernels (``ncclKernel_*``, ``ncclDevKernel_*``).

    Examples
    --------
    >>> is_nccl_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    True
    >>> is_nccl_kernel("ampere_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nt")
    False
    """
    got = _NCCL_CACHE.get(name)  # a trace repeats few names, each long: the search costs µs, the lookup not
    if got is None:
        got = _NCCL_RE.search(name) is not None
        if len(_NCCL_CACHE) < 200_000:
            _NCCL_CACHE[name] = got
    return got


_NCCL_CACHE: dict[str, bool] = {}


_SHORT_CACHE: dict[str, str] = {}


def short_kernel_name(name: str) -> str:
    """Kernel name without return type, namespaces, template and parameter lists.

    This is what nsys stores as ``shortName``; Kineto only has the demangled
    signature. Results are cached and interned (a trace repeats few names).

    Examples
    --------
    >>> short_kernel_name("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, 4>(float*, int)")
    'CatArrayBatchedCopy'
    >>> short_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")
    'ncclKernel_AllReduce_RING_LL_Sum_float'
    """
    got = _SHORT_CACHE.get(name)
    if got is not None:
        return got
    out = []
    depth = 0
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    flat = "".join(out).strip()
    last = flat.split()[-1] if flat.split() else ""
    parts = [p for p in last.split("::") if p]
    short = parts[-1] if parts else name
    if len(_SHORT_CACHE) < 200_000:
        _SHORT_CACHE[name] = short
    return short


def collective_kind(kernel_name: str, collective: str | None = None) -> str:
    """The schedsim op kind of an NCCL kernel: ``all_reduce``, ``all_gather``, ``sendrecv`` ...

    ``collective`` (Kineto's ``Collective name`` argument) wins over the kernel name.

    Examples
    --------
    >>> collective_kind("ncclKernel_AllReduce_RING_LL_Sum_float")
    'all_reduce'
    >>> collective_kind("ncclDevKernel_SendRecv", None)
    'sendrecv'
    >>> collective_kind("ncclKernel_Broadcast_RING_LL_Sum_int8_t", "_allgather_base")
    'all_gather'
    """
    key = (kernel_name, collective)
    got = _KIND_CACHE.get(key)
    if got is None:
        got = _collective_kind(kernel_name, collective)
        if len(_KIND_CACHE) < 100_000:
            _KIND_CACHE[key] = got
    return got


_KIND_CACHE: dict[tuple[str, str | None], str] = {}


def _collective_kind(kernel_name: str, collective: str | None) -> str:
    for text in (collective, kernel_name):
        if not text:
            continue
        t = text.lower().replace("ncclkernel_", "").replace("nccldevkernel_", "").lstrip("_")
        t = t.split("(")[0]
        for key, kind in _COLLECTIVES:
            if t.startswith(key) or t.replace("_", "").startswith(key.replace("_", "")):
                return kind
    return "comm"


#: Collectives whose every rank's output needs every rank's input, so that no member's kernel can end before the
#: last member's starts. Not a broadcast's or reduce's root (its data wait in a peer's buffers), nor all_to_all
#: (NCCL's grouped send/recv: with per-peer sizes a rank may exchange with some peers only, and a zero size
#: is skipped).
WAITS_FOR_ALL = ("all_reduce", "all_gather", "reduce_scatter")
#: How far (µs) a member of one :data:`WAITS_FOR_ALL` collective may seem to start after another ended before
#: the files' clocks are taken to disagree: CUPTI's GPU timestamps on the host clock are good to about a µs.
CLOCK_SLACK_US = 10.0


def check_collective_clocks(acts_by_rank: dict[int, list[Activity]], where: Callable[[int], str]) -> None:
    """Refuse an import whose ranks' members of one :data:`WAITS_FOR_ALL` collective do not overlap in time.

    Each rank's NCCL kernels (``acts_by_rank[r]``, in launch order) are matched across ranks by process group
    (``pg_name`` tag), kind (:func:`collective_kind`) and occurrence (the n-th on that group); a member starting
    more than :data:`CLOCK_SLACK_US` after another ended means the ranks' files are on clocks that disagree (a 5 s
    offset between two hosts' clocks made a 410 µs step 5 s long), or that the captures begin at different
    collectives. ``where`` names a rank's file. A kernel without a ``pg_name`` (an nsys report's: its kernels name
    no communicator) is not matched, for the n-th all_reduce of two ranks may be two communicators' (tp=2 × pp=2:
    stage 1's tensor-parallel all_reduces run after stage 0's have ended).

    Raises
    ------
    TraceError
        Naming both ranks' files, the collective, the times and the offset.
    """
    from schedsim.errors import TraceError, printable

    groups: dict[tuple[str, str, int], dict[int, Activity]] = defaultdict(dict)
    for r, acts in acts_by_rank.items():
        seq: dict[tuple[str, str], int] = defaultdict(int)
        for a in acts:
            if a.cat != "kernel" or not is_nccl_kernel(a.name):
                continue
            tags = a.tags or {}
            if "pg_name" not in tags:  # the communicator unknown: its counterparts on other ranks too
                continue
            kind = collective_kind(a.name, tags.get("collective"))
            pg = str(tags["pg_name"])
            n = seq[(pg, kind)]
            seq[(pg, kind)] = n + 1
            if kind in WAITS_FOR_ALL:
                groups[(kind, pg, n)][r] = a
    t0 = min((a.start_ns for acts in acts_by_rank.values() for a in acts), default=0.0)
    for (kind, pg, n), got in groups.items():
        if len(got) < 2:
            continue
        late = max(got, key=lambda r: (got[r].start_ns, -r))
        early = min(got, key=lambda r: (got[r].end_ns, r))
        gap_us = (got[late].start_ns - got[early].end_ns) / 1000.0
        if gap_us > CLOCK_SLACK_US:
            raise TraceError(
                f"{where(late)}: {kind} #{n} on process group {printable(pg, 80)} starts at "
                f"{(got[late].start_ns - t0) / 1000.0:.3f} us, {gap_us:.3f} us after it ended on {where(early)} (at "
                f"{(got[early].end_ns - t0) / 1000.0:.3f} us; times from the import's first GPU event): every rank "
                f"of this {kind} needs every other rank's data, so its kernels run at once on all of them; the files' "
                f"clocks disagree by at least {gap_us:.3f} us (ranks profiled on hosts whose clocks differ), and every "
                "time across ranks would be off by that much; or the captures begin at different collectives (the "
                "n-th of a process group is matched with the n-th on every rank)",
                fix="profile every rank over the same steps (one torch.profiler schedule), on hosts whose clocks are "
                    "synchronised (PTP, or chrony to a few µs), or import each rank's file on its own")


def check_clocks_of_import(acts: list[Activity], rank_info: dict[int, dict[str, Any]]) -> None:
    """:func:`check_collective_clocks` of an import's activities (each rank's in start order; a communicator's
    kernels run in launch order), naming a rank's file from ``rank_info`` (rank -> ``{"file": ...}``)."""
    by_rank: dict[int, list[Activity]] = defaultdict(list)
    for a in sorted(acts, key=lambda a: a.start_ns):
        by_rank[a.rank].append(a)

    def where(r: int) -> str:
        f = (rank_info.get(r) or {}).get("file")
        return f"{f} (rank {r})" if isinstance(f, str) else f"rank {r}"

    check_collective_clocks(by_rank, where)


def load_op_names(path: str | Path) -> dict[str, dict[str, Any]]:
    """Op names (and their kind/resource) of a predicted timeline JSON or a schedule YAML.

    Parameters
    ----------
    path : str or Path
        ``timeline.json`` from ``schedsim predict``/``execute``, or a schedule YAML.

    Returns
    -------
    dict
        ``{op name: {"kind": ..., "resource": ...}}``.

    Raises
    ------
    TraceError
        If the file cannot be read as either.
    """
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        from schedsim.graph.build import build_graph
        from schedsim.graph.ops import resource_of
        from schedsim.spec.loader import load_schedule

        G = build_graph(load_schedule(p, {}), check=False)
        out: dict[str, dict[str, Any]] = {}
        for node, data in G.nodes(data=True):
            op = data.get("op")
            name = getattr(op, "name", None) or str(node).rsplit("@r", 1)[0]
            kind = getattr(op, "kind", "compute")
            out[name] = {"kind": kind, "resource": resource_of(kind)}
        return out
    tl = Timeline.read_json(p)
    return {s.name: {"kind": s.kind, "resource": s.resource} for s in tl.spans}


def match_op(text: str | None, ops: dict[str, dict[str, Any]] | None) -> str | None:
    """The schedule op a range names, or None.

    A range text ``mm0@r1`` (an op id) always names op ``mm0``. With ``ops``
    given, a text equal to an op name, or whose part before the first comma is
    (``torch.autograd.profiler.emit_nvtx`` appends ``, seq = ...``), names it.

    Examples
    --------
    >>> match_op("mm0@r1", None), match_op("mm0", None), match_op("mm0, seq = 3", {"mm0": {}})
    ('mm0', None, 'mm0')
    """
    if not text:
        return None
    m = _OP_ID_RE.match(text)
    if m:
        return m.group("name")
    if ops:
        if text in ops:
            return text
        head = text.split(",", 1)[0].strip()
        if head in ops:
            return head
    return None


def _op_span_kind(members: list[Activity], info: dict[str, Any] | None) -> tuple[str, str]:
    if info and info.get("kind"):
        return info["kind"], info.get("resource") or "compute"
    nccl = [a for a in members if a.cat == "kernel" and is_nccl_kernel(a.name)]
    if nccl:
        return collective_kind(nccl[0].name, (nccl[0].tags or {}).get("collective")), "comm"
    if members and all(a.cat != "kernel" for a in members):
        return "memcpy", "copy"
    return "compute", "compute"


def _activity_kind(a: Activity) -> tuple[str, str]:
    if a.cat == "kernel":
        if is_nccl_kernel(a.name):
            return collective_kind(a.name, (a.tags or {}).get("collective")), "comm"
        return "kernel", "compute"
    return a.cat, "copy"


def _occurrence(occ: dict[tuple[int, str], list[tuple[float, float, OpRange]]], iteration: int
                ) -> list[tuple[float, float, OpRange]]:
    """Each named op's ``iteration``-th occurrence (by start; negative from the last), where it has one.

    Raises
    ------
    TraceError
        ``occ`` is not empty and no op has that occurrence: the import would keep none of the named ops (and
        their kernels, folded into them, would go too).
    """
    chosen: list[tuple[float, float, OpRange]] = []
    for v in occ.values():
        v.sort(key=lambda x: x[0])
        k = iteration if iteration >= 0 else len(v) + iteration
        if 0 <= k < len(v):
            chosen.append(v[k])
    if occ and not chosen:
        from schedsim.errors import TraceError

        n = max(len(v) for v in occ.values())
        raise TraceError(f"--iteration {iteration}: the ops named in the trace occur at most {n} time(s), so that "
                         "occurrence keeps none of them",
                         fix=f"pass --iteration 0..{n - 1} (or -{n}..-1 from the last), or leave it out (the last)")
    return chosen


def build_timeline(
    acts: list[Activity],
    op_ranges: Iterable[OpRange],
    *,
    schedule: str,
    world_size: int,
    meta: dict[str, Any],
    ops: dict[str, dict[str, Any]] | None = None,
    iteration: int = -1,
    span_ids: list[str | None] | None = None,
) -> Timeline:
    """Assemble the imported Timeline.

    Parameters
    ----------
    acts : list of Activity
        All GPU activities (ns). The list is consumed (cleared) to bound memory.
    op_ranges : iterable of OpRange
        Ranges named after schedule ops; their members fold into one span each.
    schedule, world_size, meta
        Copied into the Timeline.
    ops : dict, optional
        Op name → kind/resource from the prediction (:func:`load_op_names`).
    iteration : int
        When the ops repeat (several iterations in one capture), which
        occurrence to keep: ``0`` first, ``-1`` last. The timeline is then
        cut to that iteration's window. An index past every op's occurrences raises
        :class:`~schedsim.errors.TraceError` (it would keep none of the named ops).
    span_ids : list, optional
        Filled with the span id of each activity (``span_ids[i]`` of ``acts[i]``; None for one folded into an op
        range or outside the kept window), for the replay schedule's ``trace_id`` tags.

    Returns
    -------
    Timeline
        Times in seconds from the earliest kept event; ids ``{op}@r{rank}`` for
        ops and ``{kernel}#{n}@r{rank}`` for the rest; ``critical_path`` from
        :func:`last_finishing_chain`.
    """
    folded: set[int] = set()
    occ: dict[tuple[int, str], list[tuple[float, float, OpRange]]] = defaultdict(list)
    for r in op_ranges:
        mem = [i for i in r.members if i not in folded] if r.members else []
        if not mem:
            continue
        folded.update(mem)
        start = min(acts[i].start_ns for i in mem)
        end = max(acts[i].end_ns for i in mem)
        occ[(r.rank, r.name)].append((start, end, r._replace(members=mem)))
    window: tuple[float, float] | None = None
    n_iter = max((len(v) for v in occ.values()), default=0)
    chosen = _occurrence(occ, iteration)
    if n_iter > 1 and chosen:
        window = (min(c[0] for c in chosen), max(c[1] for c in chosen))
        meta["iteration"] = {"index": iteration, "occurrences": n_iter,
                             "window_ns": [window[0], window[1]]}

    raw: list[tuple[float, float, Span]] = []
    for start, end, r in chosen:
        members = [acts[i] for i in r.members]
        first = min(members, key=lambda a: a.start_ns)
        kind, resource = _op_span_kind(members, (ops or {}).get(r.name))
        nbytes = sum(a.bytes for a in members)
        tags: dict[str, Any] = {"kernels": len(members), "device": first.device, "range": r.text}
        for a in members:
            if a.tags:
                tags.update({k: v for k, v in a.tags.items() if k not in tags})
        raw.append((start, end, Span(f"{r.name}@r{r.rank}", r.name, r.rank, first.stream, kind, resource, 0.0, 0.0,
                                     bytes=nbytes, tags=tags)))
    # t0 first, so each span is built once with its final times (no second copy of the list)
    if window is not None:
        t0 = window[0]
    else:
        t0 = min((x[0] for x in raw), default=float("inf"))
        for i, a in enumerate(acts):
            if i not in folded and a.start_ns < t0:
                t0 = a.start_ns
        if t0 == float("inf"):
            t0 = 0.0
    spans = [sp._replace(start_s=(s - t0) * 1e-9, end_s=(e - t0) * 1e-9) for s, e, sp in raw]
    del raw
    counters: dict[tuple[int, str], int] = defaultdict(int)
    kinds: dict[tuple[str, str, bool], tuple[str, str]] = {}
    put_id = _id_sink(span_ids, len(acts))
    for i, a in enumerate(acts):
        if i in folded:
            continue
        if window is not None and not (window[0] <= a.start_ns < window[1]):
            continue
        coll = (a.tags or {}).get("collective") if a.tags else None
        kkey = (a.name, a.cat, bool(coll))
        kr = kinds.get(kkey) if not coll else None
        if kr is None:
            kr = _activity_kind(a)
            if not coll:
                kinds[kkey] = kr
        n = counters[(a.rank, a.name)]
        counters[(a.rank, a.name)] = n + 1
        sid = f"{a.name}#{n}@r{a.rank}"
        put_id(i, sid)
        spans.append(Span(sid, a.name, a.rank, a.stream, kr[0], kr[1],
                          (a.start_ns - t0) * 1e-9, (a.end_ns - t0) * 1e-9, None, None, a.bytes, 0.0, a.tags or {}))
        acts[i] = None  # type: ignore[call-overload]  # free as we go
    acts.clear()
    spans.sort(key=lambda s: (s.rank, s.start_s))
    meta["t0_ns"] = t0
    tl = Timeline(schedule=schedule, source="import", world_size=world_size, launch="eager", profile=None,
                  spans=spans, meta=meta)
    tl.critical_path = last_finishing_chain(spans)
    return tl


def _id_sink(span_ids: list[str | None] | None, n: int) -> Callable[[int, str], None]:
    """Where :func:`build_timeline` puts activity ``i``'s span id: ``span_ids`` sized to ``n`` (None each), or
    nowhere."""
    if span_ids is None:
        return lambda _i, _sid: None
    span_ids[:] = [None] * n
    return span_ids.__setitem__


def last_finishing_chain(spans: list[Span]) -> list[str]:
    """Approximate critical path: from the latest-ending span, repeatedly step to the
    span on the same rank that ended last before the current one started.

    Returns op ids, earliest first. Cross-rank dependencies are not followed.

    Examples
    --------
    >>> a = Span("a@r0", "a", 0, "s", "k", "compute", 0.0, 1.0)
    >>> b = Span("b@r0", "b", 0, "s", "k", "compute", 1.5, 2.0)
    >>> c = Span("c@r0", "c", 0, "t", "k", "compute", 0.2, 1.2)
    >>> last_finishing_chain([a, b, c])
    ['c@r0', 'b@r0']
    """
    if not spans:
        return []
    by_rank: dict[int, list[Span]] = defaultdict(list)
    for s in spans:
        by_rank[s.rank].append(s)
    last = max(spans, key=lambda s: s.end_s)
    lst = sorted(by_rank[last.rank], key=lambda s: s.end_s)
    ends = [s.end_s for s in lst]
    j = len(lst) - 1
    while lst[j] is not last and j > 0:
        j -= 1
    path = [lst[j].id]
    while True:
        cur = lst[j]
        k = min(bisect.bisect_right(ends, cur.start_s) - 1, j - 1)
        if k < 0:
            break
        j = k
        path.append(lst[j].id)
    path.reverse()
    return path

