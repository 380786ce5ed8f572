"""Import PyTorch profiler (Kineto) traces, one file per rank, as one Timeline.

Events read (the Kineto JSON that ``torch.profiler`` exports; sample traces
from facebookresearch/HolisticTraceAnalysis, ``tests/data``):

* ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (GPU: ``pid`` = device,
  ``args.stream``; older traces spell the categories ``Kernel``/``Memcpy``/``Memset``);
* ``gpu_user_annotation``: ``record_function`` ranges projected on the GPU;
  one named after a schedule op becomes that op's span;
* collective metadata from NCCL kernels' args and ``record_param_comms``
  (``Collective name``, ``In/Out msg nelems``, ``Group size``, ``dtype``,
  ``Process Group Name/Ranks``), and the CPU-side ``nccl:*`` ranges with
  ``Input Dims`` (``record_shapes=True``) for the per-collective volume.

Time base: an event's absolute time is ``baseTimeNanoseconds + ts·1000`` (ts in
µs; traces without ``baseTimeNanoseconds`` carry epoch µs in ``ts``), so the
files of several ranks line up on the wall clock; the rank is
``distributedInfo.rank`` (else the file's position), and the files of one import must agree on
``world_size`` (:func:`~schedsim.trace.validate.check_ranks_agree`). A file whose kernels ran on several
GPUs (one process driving devices 0 and 1) gives one rank per GPU (:func:`_split_devices`), so
stream ids stay per device. GPU events need ``ts`` and ``dur``
(:func:`~schedsim.trace.validate.check_gpu_times`). Files are streamed with
:class:`~schedsim.trace.jsonstream.TraceEventStream`; CPU events other than the
few above are dropped as they are read.

Timestamps are read exactly: ``ts`` and ``dur`` become integer nanoseconds from their decimal text
(epoch µs with 3 decimals has 19-20 significant digits, more than a float's 15-17, so a float parse
moves events by up to 0.25 µs and merges kernels 240 ns apart). Numbers longer than 15 characters
are kept as their text by the JSON decoder (:func:`~schedsim.trace.jsonstream.keep_long`) and converted by
:func:`_ns`.
"""

from __future__ import annotations

import bisect
import operator
import re
from array import array
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from schedsim.errors import TraceError, printable
from schedsim.trace.common import (
    DTYPE_BYTES,
    Activity,
    ImportResult,
    OpRange,
    ReplayInput,
    RuntimeRow,
    SyncRow,
    build_timeline,
    check_clocks_of_import,
    is_nccl_kernel,
    match_op,
    short_kernel_name,
)
from schedsim.trace.jsonstream import TraceEventStream
from schedsim.trace.nsys import shape_size
from schedsim.trace.validate import (
    MAX_DUR_US,
    MAX_SPREAD_US,
    MAX_TS_US,
    check_event_times,
    check_gpu_times,
    check_header,
    check_ranks_agree,
    check_stream_order,
    check_time_bases,
    decodable,
    max_trace_events,
    too_many_events,
)


def _ns(v: Any) -> int:
    """A Kineto time in µs (int, float or decimal text) as exact integer nanoseconds (rounded half even).

    Raises
    ------
    TypeError
        ``v`` is a boolean, null, list or object.
    ValueError
        ``v`` is not a finite decimal number (``"abc"``, ``"NaN"``, infinity).

    Examples
    --------
    >>> _ns(12), _ns("4458676522690.655"), _ns("1.0005"), _ns("1.0015"), _ns(2.5), _ns(1e-05), _ns("7.")
    (12000, 4458676522690655, 1000, 1002, 2500, 0, 7000)
    """
    t = type(v)
    if t is int:
        return v * 1000
    if t is str:
        text = v
    elif t is float:
        text = repr(v)
    else:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise TypeError(f"time {v!r} is not a number")
        if isinstance(v, int):
            return int(v) * 1000
        text = v if isinstance(v, str) else repr(v)
    whole, _dot, frac = text.partition(".")  # the common text, digits and at most 3 decimals: no Decimal needed
    n = len(frac)
    if n <= 3 and text.isascii() and whole.isdigit() and (not n or frac.isdigit()):
        return int(whole) * 1000 + int(frac) * _FRAC_SCALE[n] if n else int(whole) * 1000
    from decimal import Decimal, InvalidOperation

    try:
        d = Decimal(text)
        if not d.is_finite():
            raise ValueError
        return int((d * 1000).to_integral_value())
    except (InvalidOperation, ValueError, OverflowError):
        raise ValueError(f"time {v!r} is not a finite decimal number of µs") from None


#: The factor that makes ``n`` (1-3) decimals of a µs time nanoseconds (:func:`_ns`).
_FRAC_SCALE = (0, 100, 10, 1)

__all__ = ["COLLECTIVE_ARGS", "import_kineto", "input_dims_nelems"]

#: Kineto arg name -> Span tag name.
COLLECTIVE_ARGS = {
    "Collective name": "collective", "In msg nelems": "in_nelems", "Out msg nelems": "out_nelems",
    "Group size": "group_size", "dtype": "dtype", "Process Group Name": "pg_name",
    "Process Group Description": "pg_desc", "Process Group Ranks": "pg_ranks",
}
_KERNEL = {"kernel"}
_MEMCPY = {"gpu_memcpy", "memcpy"}
_MEMSET = {"gpu_memset", "memset"}
_GPU = _KERNEL | _MEMCPY | _MEMSET | {"gpu_user_annotation"}
_CHECKED = _GPU | {"user_annotation", "cpu_op"}
#: Runtime calls a replay schedule orders ops by (:mod:`schedsim.trace.to_schedule`).
REPLAY_RUNTIME = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                            "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy", "cudaMemset", "cudaEventRecord",
                            "cudaEventRecordWithFlags", "cudaStreamWaitEvent", "cudaDeviceSynchronize",
                            "cudaStreamSynchronize", "cudaEventSynchronize", "cudaGraphLaunch", "cuGraphLaunch",
                            "cudaLaunchCooperativeKernel"})


def input_dims_nelems(dims: Any) -> int | None:
    """Element count of Kineto ``Input Dims``, as :func:`schedsim.trace.nsys.nvtx_sizes_nelems` counts ``sizes``.

    Lists become tuples, so a one-element list collapses to its element
    (``[[19618307]]`` → 19 618 307, ``[[3], [3]]`` → 3·3).

    Examples
    --------
    >>> input_dims_nelems([[19618307]]), input_dims_nelems([[1024, 4096]]), input_dims_nelems([[3], [3]])
    (19618307, 4194304, 9)
    """

    def conv(v: Any) -> Any:
        if isinstance(v, list):
            return conv(v[0]) if len(v) == 1 else tuple(conv(x) for x in v)
        return v

    return shape_size(conv(dims))


def _nelems(tags: dict[str, Any], key: str) -> int:
    """An element count tag (``in_nelems``/``out_nelems``): 0 when absent.

    Raises
    ------
    ValueError
        Not a non-negative integer (or its decimal text); the reader reports the event as malformed.
    """
    v = tags.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
        raise ValueError(f"{key} is '{printable(v, 40)}', not a count of elements")
    return int(v)


def _msg_bytes(tags: dict[str, Any]) -> float:
    n = max(_nelems(tags, "in_nelems"), _nelems(tags, "out_nelems"))
    dt = str(tags.get("dtype") or "").lower().replace("torch.", "")
    return float(n * DTYPE_BYTES.get(dt, 0))


def import_kineto(
    paths: str | Path | list[str | Path],
    *,
    ops: dict[str, dict[str, Any]] | None = None,
    iteration: int = -1,
    schedule: str | None = None,
    keep_kernel_rows: bool = True,
    keep_runtime: bool = False,
) -> ImportResult:
    """Read Kineto trace files (``.json`` or ``.json.gz``), one per rank, into one Timeline.

    Parameters
    ----------
    paths : path or list of paths
        One trace per rank. Ranks come from ``distributedInfo.rank``.
    ops : dict, optional
        Schedule op names (:func:`schedsim.trace.common.load_op_names`);
        ``gpu_user_annotation`` ranges named like an op (or ``name@rN``)
        become op spans covering the GPU work inside them on that stream.
    iteration : int
        Which occurrence of repeated op annotations to keep (``-1``: last).
    schedule : str, optional
        Timeline ``schedule`` field (default: first file's stem).
    keep_kernel_rows : bool
        Also collect the per-kernel rows of ``analyze``'s kernel-share and NCCL-volume tables (more memory).
    keep_runtime : bool
        Also keep what a replay schedule needs (``ImportResult.replay``, a
        :class:`~schedsim.trace.common.ReplayInput`): every activity (ns, common time base) with its
        ``correlation`` id, the ``cuda_runtime`` rows (launches, event record/wait, synchronisations) and the
        ``cuda_sync`` rows (``Stream Wait Event``: waiting ``stream``, ``wait_on_stream``,
        ``wait_on_cuda_event_record_corr_id``; PyTorch's ``enable_cuda_sync_events``).

    Returns
    -------
    ImportResult
        Timeline (s from the earliest GPU event), kernel rows (µs) and NCCL
        volume rows per device; ``replay`` with ``keep_runtime``.

    Raises
    ------
    TraceError
        Truncated/corrupt gzip or JSON, a file that is not a trace, two files
        claiming one rank, or no GPU events at all.
    """
    files = [Path(p) for p in (paths if isinstance(paths, list) else [paths])]
    if not files:
        raise TraceError("no trace file given")
    acc = _Read(cap=max_trace_events())
    for fi, path in enumerate(files):
        _read_file(path, fi, acc, len(files))
    check_ranks_agree(files, acc.ranks, acc.worlds, acc.positional)
    if not acc.acts:
        raise TraceError(f"{files[0]}: no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace",
                         fix="profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], or pass a "
                             "schedsim timeline.json to analyze/compare instead")
    check_time_bases(files, acc.bases, ["without baseTimeNanoseconds" if b is None else f"baseTimeNanoseconds {b}"
                                        for b in acc.base_given],
                     "pass the trace files of one run as torch.profiler exported them (each with its "
                     "baseTimeNanoseconds), or import each file on its own")
    base0 = min(acc.bases)
    shift_ns = {rank: float(b - base0) for rank, b in zip(acc.ranks, acc.bases, strict=False)}
    _shift(acc.acts, shift_ns)
    op_ranges = _op_ranges(acc, ops, shift_ns)
    multi = len(files) > 1

    def label(rank: int, dev: int) -> str:
        return f"Rank {rank} Device {dev}" if multi else f"Device {dev}"

    kernel_rows = _kernel_rows(acc, label) if keep_kernel_rows else {}
    nccl_rows = _nccl_rows(acc, label)
    world = _split_devices(acc, op_ranges)
    acts = acc.acts
    if not keep_runtime:  # with it, the replay schedule checks it after the collectives' sizes and order
        check_clocks_of_import(acts, acc.rank_info)
    replay = _replay_input(acc, shift_ns, world) if keep_runtime else None
    meta: dict[str, Any] = {"trace_format": "kineto", "files": [str(p) for p in files], "ranks": acc.rank_info,
                            "kernel_count": sum(1 for a in acts if a.cat == "kernel"),
                            "memcpy_count": sum(1 for a in acts if a.cat == "memcpy"),
                            "memset_count": sum(1 for a in acts if a.cat == "memset"),
                            "origin_ns": base0, "warnings": acc.warnings,
                            "record_param_comms": [dict(t, rank=r) for r, _th, _ts, _d, t in acc.rpc][:10_000]}
    tl = build_timeline(acts, op_ranges, schedule=schedule or files[0].name.split(".")[0],
                        world_size=world, meta=meta, ops=ops, iteration=iteration,
                        span_ids=None if replay is None else replay.span_ids)
    return ImportResult(tl, kernel_rows, nccl_rows, acc.warnings, replay)


def _replay_input(acc: _Read, shift_ns: dict[int, float], world: int) -> ReplayInput:
    """The activities and runtime rows of the import on one time base (ns from the first file's first GPU
    event), for :mod:`schedsim.trace.to_schedule`. Runtime rows keep their file's rank (a file that drove
    several GPUs split into ranks has them on its first one)."""
    ref_of = dict(zip(acc.ranks, acc.refs, strict=False))

    def rel(rank: int, ts: int) -> float:
        return float(ts - ref_of.get(rank, 0)) + shift_ns.get(rank, 0.0)

    runtime = [RuntimeRow(r, name, rel(r, ts), float(dur), corr, tid) for r, name, ts, dur, corr, tid in acc.runtime]
    syncs = [SyncRow(r, name, st, rel(r, ts), wait_st, rec, corr) for r, name, st, ts, wait_st, rec, corr in acc.syncs]
    return ReplayInput(list(acc.acts), list(acc.corr), runtime, syncs, world, "kineto", [])


#: A ``gpu_user_annotation``: rank, name, device, stream (None: none written), ts (ns), dur (ns), External id.
_Annot = tuple[int, str, int, str | None, int, int, Any]
#: A CPU ``nccl:*`` range: rank, (pid, tid), ts (ns), dur (ns), name, Input Dims.
_NcclCpu = tuple[int, tuple[Any, Any], int, int, str, Any]
#: A ``record_param_comms`` event: rank, (pid, tid), ts (ns), dur (ns), collective tags.
_Rpc = tuple[int, tuple[Any, Any], int, int, dict[str, Any]]


@dataclass
class _Read:
    """Everything the files of one import add up to.

    ``acts`` hold times in ns relative to their file's first GPU event (``refs``) until :func:`_shift`;
    ``raw_ts`` / ``raw_dur`` keep each activity's ts and dur as written (µs) for analyze's kernel table;
    ``bases`` are each file's absolute origin (ns, exact integers).
    """

    acts: list[Activity] = field(default_factory=list)
    raw_ts: array = field(default_factory=lambda: array("d"))
    raw_dur: array = field(default_factory=lambda: array("d"))
    annots: list[_Annot] = field(default_factory=list)
    nccl_cpu: list[_NcclCpu] = field(default_factory=list)
    rpc: list[_Rpc] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    base_given: list[int | float | None] = field(default_factory=list)  # per file: baseTimeNanoseconds as written
    refs: list[float] = field(default_factory=list)
    rank_info: dict[int, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    streams: dict[Any, str] = field(default_factory=dict)
    full_names: dict[str, str] = field(default_factory=dict)
    world: int = 0
    worlds: list[int | None] = field(default_factory=list)
    positional: list[bool] = field(default_factory=list)  # per file: its rank is its position (no distributedInfo)
    cap: int = 10_000_000
    corr: list[Any] = field(default_factory=list)  # each activity's correlation id (None: none written)
    #: ``cuda_runtime`` rows: rank, name, ts (ns), dur (ns), correlation, thread
    runtime: list[tuple[int, str, int, int, Any, Any]] = field(default_factory=list)
    #: ``cuda_sync`` rows: rank, name, stream, ts (ns), wait_on_stream, record correlation, correlation
    syncs: list[tuple[int, str, str, int, str | None, Any, Any]] = field(default_factory=list)


@dataclass
class _File:
    """One file being read: its rank by position, first GPU timestamp (ns), CPU process name, and the GPU
    events per (rank, device, stream) lane for :func:`check_stream_order`."""

    path: Path
    pos_rank: int
    ref: int | None = None
    pname: Any = None
    lanes: dict[tuple[int, int, str], list[tuple[int, int, str, int]]] = field(
        default_factory=lambda: defaultdict(list))


def _read_file(path: Path, fi: int, acc: _Read, n_files: int) -> None:
    """Stream one trace file into ``acc`` (module docstring for what is kept): each run of events the reader
    decodes at once by :func:`_read_run`, or one event at a time by :func:`_read_event` where that finds a time
    it must word an error for."""
    stream = TraceEventStream(path, long_floats_as_text=True)  # exact timestamps (module docstring)
    f = _File(path, fi)
    first = len(acc.acts)
    starts = (len(acc.annots), len(acc.nccl_cpu), len(acc.rpc), len(acc.runtime), len(acc.syncs))
    actions: dict[Any, int] = {}
    for run in stream.batches():
        at = stream.n_events
        if not _read_run(run, at, f, acc, actions):
            for k, e in enumerate(run):
                _read_event(e, at + k, f, acc)
    check_stream_order(path, f.lanes, acc.warnings)
    f.lanes.clear()
    hdr = stream.header
    check_header(path, hdr)
    dist: dict[str, Any] = hdr["distributedInfo"] if isinstance(hdr.get("distributedInfo"), dict) else {}
    rank = dist.get("rank")
    acc.positional.append(not isinstance(rank, int))
    if not isinstance(rank, int):
        if n_files > 1:
            acc.warnings.append(f"{path}: no distributedInfo.rank; using its position {fi} as the rank")
        rank = fi
    acc.world = max(acc.world, int(dist.get("world_size") or 0))
    acc.worlds.append(dist.get("world_size") if isinstance(dist.get("world_size"), int) else None)
    base = hdr.get("baseTimeNanoseconds")
    ref = f.ref if f.ref is not None else 0
    acc.refs.append(ref)
    # absolute origin of this file in ns, an exact integer (ts may be epoch µs)
    acc.bases.append((int(base) if isinstance(base, (int, float)) else 0) + ref)
    acc.base_given.append(base if isinstance(base, (int, float)) else None)
    acc.ranks.append(rank)
    if rank != fi:
        _renumber(acc, first, starts, rank)
    devices = sorted({a.device for a in acc.acts[first:]})
    acc.rank_info[rank] = {"file": str(path), "devices": devices, "process": f.pname,
                           "schemaVersion": hdr.get("schemaVersion"), "events": stream.n_events,
                           "nccl_version": dist.get("nccl_version"), "pg_config": dist.get("pg_config")}


#: What :func:`_read_run` does with an event of a category: drop it, check its times and keep it if its name says
#: so (``cpu_op``, ``user_annotation``), check and keep it (``gpu_user_annotation``; a kernel, memcpy or memset,
#: the first of which sets the file's reference time), keep it if its name is a :data:`REPLAY_RUNTIME` call
#: (``cuda_runtime``, ``cuda_driver``), keep it (``cuda_sync``), read its process name (no category).
_DROP, _CHECK, _GPU_ANNOT, _GPU_ACT, _RUNTIME, _SYNC, _META = range(7)
_NUM = frozenset({int, float, str})
_NUM_OR_NONE = _NUM | {type(None)}
_GET_TS, _GET_DUR = operator.methodcaller("get", "ts"), operator.methodcaller("get", "dur")
_GET_CAT = operator.methodcaller("get", "cat")
#: What reading a malformed event raises (:func:`_read_event` words it).
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError)
#: JSON's names of the types a decoded value can have, for errors.
_JSON_TYPE = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _action(cat: Any) -> int:
    """The :func:`_read_run` action of an event of category ``cat`` (what :func:`_read_event` does with it)."""
    if cat is None:
        return _META
    c = cat.lower() if isinstance(cat, str) else ""
    if c in _KERNEL or c in _MEMCPY or c in _MEMSET:
        return _GPU_ACT
    if c == "gpu_user_annotation":
        return _GPU_ANNOT
    if c in _CHECKED:
        return _CHECK
    return _RUNTIME if c in ("cuda_runtime", "cuda_driver") else _SYNC if c == "cuda_sync" else _DROP


def _read_event(e: Any, index: int, f: _File, acc: _Read, times_checked: bool = False) -> None:
    """Read event number ``index`` of the file (check its times unless ``times_checked``, keep what it adds).

    Raises
    ------
    TraceError
        Its times are bad (:mod:`schedsim.trace.validate`), it is malformed, or the import holds too many events.
    """
    if not isinstance(e, dict):
        return
    cat = e.get("cat")
    if cat is None:
        _process_name(e, f)
        return
    path = f.path
    c = cat.lower() if isinstance(cat, str) else ""
    if c in _CHECKED:
        if c in _GPU:
            check_gpu_times(path, index, e)
        if not times_checked:
            check_event_times(path, index, e, None if f.ref is None else f.ref / 1000.0)  # ref is in ns
    try:
        _take(e, c, f, acc, index)
    except _MALFORMED as err:
        args = e.get("args")
        why = (f"its args is a JSON {_JSON_TYPE.get(type(args), type(args).__name__)}, not an object"
               if args is not None and not isinstance(args, dict) else
               f"{err.__class__.__name__}: {printable(err, 120)}")
        raise TraceError(f"{path}: event #{index}: malformed {printable(cat, 40)} event ({why}): {_excerpt(e)}",
                         fix="re-export the trace from the profiler") from None
    if len(acc.acts) > acc.cap or len(acc.annots) > acc.cap or len(acc.nccl_cpu) + len(acc.rpc) > acc.cap:
        raise too_many_events(path, "GPU activities or ranges of one kind", acc.cap)


def _read_run(run: list[Any], base: int, f: _File, acc: _Read, actions: dict[Any, int]) -> bool:
    """Read a run of events (numbers ``base``...) as :func:`_read_event` reads each, with the times of the
    checked ones (``cpu_op``, ``user_annotation``, GPU events: a third of a trace's events, most of them then
    dropped) checked at once by :func:`_times_ok` and the events nothing keeps skipped. False, having read
    nothing, when the run is short or a time fails that check: :func:`_read_event` then reads each event and
    words the first error, as it would have alone.

    ``actions`` caches each category's :func:`_action`.
    """
    if len(run) < 64:
        return False
    sorted_run = _sort_run(run, f, actions)
    if sorted_run is None:
        return False
    checked, work, ref_from, ref_ts = sorted_run
    try:
        ref = f.ref / 1000.0 if f.ref is not None else _ns(ref_ts) / 1000.0 if ref_from >= 0 else 0.0
    except (TypeError, ValueError):
        return False
    if not _times_ok(checked, ref_from if ref_from >= 0 else len(checked), ref):
        return False
    for k, e, runtime in work:
        if runtime:  # the most common kept row, read without the per-event dispatch (an error is worded below)
            try:
                acc.runtime.append(_runtime_row(e, f))
                continue
            except _MALFORMED:
                pass
        _read_event(e, base + k, f, acc, times_checked=True)
    return True


def _sort_run(run: list[Any], f: _File, actions: dict[Any, int]
              ) -> tuple[list[dict[str, Any]], list[tuple[int, dict[str, Any], bool]], int, Any] | None:
    """For :func:`_read_run`: the events whose times are checked, the events read (position in the run, event,
    whether it is a kept runtime row; in order), from which checked event on the file's reference time applies
    (-1: none in the run) and the ``ts`` of the event that sets it (the file's first kernel, memcpy or memset).
    The categories are looked up in C-level passes, so a dropped event costs no Python step; None (the run is
    read event by event) when an event is not a mapping or its category cannot key a dict."""
    try:
        cats = list(map(_GET_CAT, run))
        for cat in set(cats).difference(actions):
            actions[cat] = _action(cat)
        codes = np.fromiter(map(actions.__getitem__, cats), np.int8, len(cats))
    except (AttributeError, TypeError, KeyError):
        return None
    checked: list[dict[str, Any]] = []
    work: list[tuple[int, dict[str, Any], bool]] = []
    ref_from = 0 if f.ref is not None else -1
    ref_ts: Any = None
    for k in np.flatnonzero(codes).tolist():  # _DROP is 0
        e = run[k]
        a = actions[cats[k]]
        if a == _META or a == _SYNC:
            work.append((k, e, False))
            continue
        name = e.get("name")
        if a == _RUNTIME:
            if type(name) is not str:
                work.append((k, e, False))  # _take words what is wrong with it
            elif name in REPLAY_RUNTIME:  # _take keeps it
                work.append((k, e, True))
            continue
        checked.append(e)
        if a == _GPU_ACT or a == _GPU_ANNOT:
            work.append((k, e, False))
            if ref_from < 0 and a == _GPU_ACT:  # this event sets the file's reference time
                ref_from, ref_ts = len(checked), e.get("ts")
        elif name == "record_param_comms" or (isinstance(name, str) and name.startswith("nccl:")):
            work.append((k, e, False))
    return checked, work, ref_from, ref_ts


def _times_ok(evs: list[dict[str, Any]], ref_from: int, ref: float) -> bool:
    """Whether :func:`~schedsim.trace.validate.check_event_times` passes every event of ``evs``, ``ref`` (µs)
    the file's first GPU ``ts`` for the events from position ``ref_from`` on, None for those before; the same
    conditions on arrays (``ts``/``dur`` numbers or their text, finite, not negative, within the bounds)."""
    ts: list[Any] = list(map(_GET_TS, evs))
    dur: list[Any] = list(map(_GET_DUR, evs))
    dur_types = set(map(type, dur))
    if not (set(map(type, ts)) <= _NUM and dur_types <= _NUM_OR_NONE):
        return False  # a bool, null ts, list or object: the per-event check words it
    try:
        t = np.array(list(map(float, ts)), dtype=np.float64)
        d = np.array(list(map(float, dur)) if type(None) not in dur_types else
                     [0.0 if v is None else float(v) for v in dur], dtype=np.float64)
    except (ValueError, OverflowError):
        return False
    with np.errstate(invalid="ignore"):
        ok = (np.isfinite(t) & np.isfinite(d) & (t >= 0) & (d >= 0) & (t <= MAX_TS_US) & (d <= MAX_DUR_US))
        ok[ref_from:] &= np.abs(t[ref_from:] - ref) <= MAX_SPREAD_US
    return bool(ok.all())


def _excerpt(e: Any) -> str:
    """The first 200 characters of an event's text, escaped (:func:`schedsim.errors.printable`); '?' if it cannot
    be written."""
    try:
        return printable(str(e)[:200])
    except (RecursionError, ValueError):  # nested too deep for repr, or an integer too long to print
        return "?"


def _process_name(e: dict[str, Any], f: _File) -> None:
    """The CPU process's name (GPU "processes" have small pids: the device index)."""
    if (e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict)
            and f.pname is None and str(e.get("pid", "")).isdigit() and int(e["pid"]) > 1024):
        f.pname = e["args"].get("name")


def _take(e: dict[str, Any], c: str, f: _File, acc: _Read, n_event: int) -> None:
    """Keep one event of lowercase category ``c``, or drop it."""
    if c in _KERNEL or c in _MEMCPY or c in _MEMSET:
        _gpu_activity(e, c, f, acc, n_event)
    elif c == "gpu_user_annotation":
        args = e.get("args") or {}
        st = args.get("stream", e.get("tid"))
        acc.annots.append((f.pos_rank, decodable(e.get("name")), int(args.get("device", e.get("pid", 0)) or 0),
                           None if st is None or isinstance(st, (bool, dict, list)) else str(st), _ns(e["ts"]),
                           _ns(e["dur"]), args.get("External id")))
    elif c == "cuda_runtime" or c == "cuda_driver":
        if e.get("name") in REPLAY_RUNTIME:
            acc.runtime.append(_runtime_row(e, f))
    elif c == "cuda_sync":
        args = e.get("args") or {}
        ws = args.get("wait_on_stream")
        acc.syncs.append((f.pos_rank, str(e.get("name")), str(args.get("stream", e.get("tid"))), _ns(e["ts"]),
                          None if ws is None or ws == -1 else str(ws), args.get("wait_on_cuda_event_record_corr_id"),
                          args.get("correlation")))
    elif c in ("user_annotation", "cpu_op"):
        name = e.get("name")
        if name == "record_param_comms":
            args = e.get("args") or {}
            tags = _collective_tags(args)
            _msg_bytes(tags)  # refuses element counts that are not counts
            acc.rpc.append((f.pos_rank, _thread(e), _ns(e["ts"]), _ns(e.get("dur") or 0), tags))
        elif isinstance(name, str) and name.startswith("nccl:"):
            args = e.get("args") or {}
            acc.nccl_cpu.append((f.pos_rank, _thread(e), _ns(e["ts"]), _ns(e.get("dur") or 0),
                                 decodable(name), args.get("Input Dims")))


def _runtime_row(e: dict[str, Any], f: _File) -> tuple[int, str, int, int, Any, Any]:
    """A kept ``cuda_runtime`` / ``cuda_driver`` row (:attr:`_Read.runtime`); raises as :func:`_take` reports."""
    args = e.get("args") or {}
    return (f.pos_rank, e["name"], _ns(e["ts"]), _ns(e.get("dur") or 0), args.get("correlation"), _thread(e))


def _collective_tags(args: dict[str, Any]) -> dict[str, Any]:
    """The collective arguments of an event (:data:`COLLECTIVE_ARGS`) as span tags; text made encodable
    (:func:`~schedsim.trace.validate.decodable`)."""
    return {tag: decodable(args[k]) if isinstance(args[k], str) else args[k]
            for k, tag in COLLECTIVE_ARGS.items() if k in args}


def _thread(e: dict[str, Any]) -> tuple[Any, Any]:
    """A CPU event's (pid, tid), as a key: values that are not numbers or strings become '?'."""
    pid, tid = e.get("pid"), e.get("tid")
    ok = (int, float, str, type(None))
    return (pid if isinstance(pid, ok) else "?", tid if isinstance(tid, ok) else "?")


def _gpu_activity(e: dict[str, Any], c: str, f: _File, acc: _Read, n_event: int) -> None:
    """A kernel, memcpy or memset: an :class:`Activity` (NCCL kernels tagged with their collective args)."""
    args = e.get("args") or {}
    ts = _ns(e["ts"])
    dur = _ns(e["dur"])
    dev = int(args.get("device", e.get("pid", 0)) or 0)
    st0 = args.get("stream", e.get("tid", "?"))
    st = acc.streams.get(st0)
    if st is None:
        st = acc.streams[st0] = str(st0)
    name = decodable(e.get("name", "?"))
    tags = None
    nbytes = 0.0
    if c in _KERNEL:
        short = short_kernel_name(name)
        acc.full_names.setdefault(short, name)
        cat_s = "kernel"
        if is_nccl_kernel(name):
            tags = {"kernel": name}
            tags.update(_collective_tags(args))
            nbytes = _msg_bytes(tags)
        name = short
    else:
        cat_s = "memcpy" if c in _MEMCPY else "memset"
        nbytes = float(args.get("bytes") or 0.0)
    if f.ref is None:
        f.ref = ts
    rel = float(ts - f.ref)
    acc.acts.append(Activity(f.pos_rank, dev, st, name, cat_s, rel, rel + dur, nbytes, tags))
    acc.corr.append(args.get("correlation"))
    f.lanes[(f.pos_rank, dev, st)].append((ts, ts + dur, name, n_event))
    acc.raw_ts.append(float(e["ts"]))
    acc.raw_dur.append(float(e["dur"]))


def _renumber(acc: _Read, first: int, starts: tuple[int, ...], rank: int) -> None:
    """Give the file's events (activities from ``first``, the lists from ``starts``) its header's rank."""
    for i in range(first, len(acc.acts)):
        acc.acts[i] = acc.acts[i]._replace(rank=rank)
    lists: tuple[list[Any], ...] = (acc.annots, acc.nccl_cpu, acc.rpc, acc.runtime, acc.syncs)
    for lst, start in zip(lists, starts, strict=True):
        for i in range(start, len(lst)):
            lst[i] = (rank, *lst[i][1:])


def _shift(acts: list[Activity], shift_ns: dict[int, float]) -> None:
    """Move each rank's activities onto the common time base (``shift_ns`` per rank)."""
    if any(shift_ns.values()):
        for i, a in enumerate(acts):
            s = shift_ns[a.rank]
            if s:
                acts[i] = a._replace(start_ns=a.start_ns + s, end_ns=a.end_ns + s)


def pipeline_range_name(name: str | None) -> bool:
    """Whether a range name carries a pipeline action or a pipeline send/recv
    (:data:`schedsim.trace.common.PIPELINE_NAME_PATTERNS`, ``send|recv`` + ``F|B`` + stage ``.`` microbatch).

    >>> pipeline_range_name("F0.3.0"), pipeline_range_name("sendB1.2"), pipeline_range_name("nccl:coalesced")
    (True, True, False)
    """
    from schedsim.trace.common import PIPELINE_NAME_PATTERNS

    if not name:
        return False
    return bool(_P2P_RANGE.match(name)) or any(p.match(name) for p in PIPELINE_NAME_PATTERNS)


_P2P_RANGE = re.compile(r"^(send|recv)[FB]\d+\.\d+$")


def _op_ranges(acc: _Read, ops: dict[str, dict[str, Any]] | None, shift_ns: dict[int, float]) -> list[OpRange]:
    """Annotations named after schedule ops → op ranges over the activities of their lane inside them
    (1 ns slack); the parts of one annotation (same External id) are merged. Without ``ops``, annotations
    named like a pipeline action or a pipeline send/recv (:func:`pipeline_range_name`: the executor's
    ``F0.3.0``, ``sendF0.3``, torch pipelining's ``PP:0F3``, Megatron's ``forward-compute``) count as ops too.

    An annotation with no stream number, or one no activity of its device ran on, takes the activities of
    every stream of its device inside its window; one warning counts them."""
    cand = [a for a in acc.annots if match_op(a[1], ops) is not None
            or (ops is None and pipeline_range_name(a[1]))]
    if not cand:
        return []
    acts = acc.acts
    ref_of = dict(zip(acc.ranks, acc.refs, strict=False))
    lanes: dict[tuple[int, int, str | None], list[int]] = defaultdict(list)
    for i, a in enumerate(acts):
        lanes[(a.rank, a.device, a.stream)].append(i)
    by_device = None
    starts = {k: [acts[i].start_ns for i in v] for k, v in lanes.items()}
    merged: dict[tuple[int, str, Any], list[tuple[float, float, list[int]]]] = defaultdict(list)
    no_stream = 0
    for rank, name, dev, st, ts, dur, ext in cand:
        key: tuple[int, int, str | None] = (rank, dev, st)
        if key not in lanes:  # no stream number, or none of the device's: the device's work in the window
            no_stream += 1
            if by_device is None:
                by_device = _device_lanes(acts)
                lanes.update(by_device)
                starts.update({k: [acts[i].start_ns for i in v] for k, v in by_device.items()})
            key = (rank, dev, None)
        s0 = float(ts - ref_of[rank]) + shift_ns.get(rank, 0.0)
        s1 = s0 + dur
        lo = bisect.bisect_left(starts.get(key, []), s0 - 1.0)
        hi = bisect.bisect_right(starts.get(key, []), s1 + 1.0)
        mem = [j for j in lanes.get(key, [])[lo:hi] if acts[j].end_ns <= s1 + 1.0]
        merged[(rank, name, ext if ext is not None else (st, ts))].append((s0, s1, mem))
    if no_stream:
        acc.warnings.append(f"{no_stream} gpu_user_annotation range(s) named after ops have no stream number, or "
                            "one no GPU activity of their device ran on; each took the GPU work of every stream "
                            "of its device inside its time window")
    out = []
    for (rank, name, _ext), parts in merged.items():
        mem = sorted({j for _a, _b, m in parts for j in m})
        out.append(OpRange(match_op(name, ops) or name, rank, min(p[0] for p in parts), max(p[1] for p in parts),
                           mem, name))
    return out


def _device_lanes(acts: list[Activity]) -> dict[tuple[int, int, str | None], list[int]]:
    """Activity indices per (rank, device), by start time, under the stream key None."""
    out: dict[tuple[int, int, str | None], list[int]] = defaultdict(list)
    for i, a in enumerate(acts):
        out[(a.rank, a.device, None)].append(i)
    for v in out.values():
        v.sort(key=lambda i: acts[i].start_ns)
    return out


def _split_devices(acc: _Read, op_ranges: list[OpRange]) -> int:
    """Give each GPU its own timeline rank when a file's process drove several; return the world size.

    A process that drives several GPUs (one Kineto file with activities on devices 0 and 1) would otherwise
    put both GPUs' streams in one rank, where stream 7 of device 0 and stream 7 of device 1 are one lane and
    per-rank busy times and shares count two GPUs against one makespan. Ranks are then numbered in
    (file rank, device) order; ``rank_info`` of each says its file, ``distributed_rank`` and ``device``.
    Activities, op ranges and ``record_param_comms`` (CPU side: the process's first device) are renumbered.
    A file splits, one rank per device it has activities on, when kernels ran on more than one of its
    devices (a peer copy seen on another device does not split it); any other file stays one rank. Without
    a file that splits nothing changes and the world size is the largest of ``distributedInfo.world_size``
    and the number of files.
    """
    kernel_devs: dict[int, set[int]] = defaultdict(set)
    for a in acc.acts:
        if a.cat == "kernel":
            kernel_devs[a.rank].add(a.device)
    if all(len(d) <= 1 for d in kernel_devs.values()):
        return max(acc.world, len(acc.rank_info), 1)
    new: dict[tuple[int, int], int] = {}
    first: dict[int, int] = {}
    info: dict[int, dict[str, Any]] = {}
    multi = []
    for r in sorted(acc.rank_info):
        old = acc.rank_info[r]
        devs = old["devices"] or [0]
        first[r] = len(info)
        if len(kernel_devs.get(r, ())) <= 1:
            new.update({(r, d): first[r] for d in devs})
            info[first[r]] = {**old, "distributed_rank": r}
            continue
        multi.append(f"{old['file']} (devices {', '.join(map(str, devs))})")
        for d in devs:
            new[(r, d)] = len(info)
            info[new[(r, d)]] = {**old, "devices": [d], "device": d, "distributed_rank": r}
    acts = acc.acts
    for i, a in enumerate(acts):
        acts[i] = a._replace(rank=new[(a.rank, a.device)])
    for i, o in enumerate(op_ranges):
        if o.members:
            op_ranges[i] = o._replace(rank=acts[o.members[0]].rank)
        else:
            op_ranges[i] = o._replace(rank=first[o.rank])
    acc.rpc[:] = [(first.get(r, r), th, ts, dur, tags) for r, th, ts, dur, tags in acc.rpc]
    acc.rank_info = info
    acc.warnings.append(f"one process drove several GPUs in {'; '.join(multi)}: each GPU is its own rank of the "
                        f"timeline ({len(info)} ranks, numbered by file rank, then device)")
    return len(info)


def _kernel_rows(acc: _Read, label: Callable[[int, int], str]) -> dict[str, list[tuple[str, str, float, float]]]:
    """Rows of analyze's kernel-share table per device label: (name, "Stream S", ts µs, dur µs) as written."""
    acts = acc.acts
    rows: dict[str, list[tuple[str, str, float, float]]] = {}
    order = sorted((i for i, a in enumerate(acts) if a.cat == "kernel"),
                   key=lambda i: (label(acts[i].rank, acts[i].device), f"Stream {acts[i].stream}", i))
    for i in order:
        a = acts[i]
        rows.setdefault(label(a.rank, a.device), []).append((a.name, f"Stream {a.stream}", acc.raw_ts[i],
                                                             acc.raw_dur[i]))
    return rows


def _nccl_rows(acc: _Read, label: Callable[[int, int], str]) -> dict[str, list[tuple[str, int]]]:
    """Rows of analyze's NCCL-volume table: each CPU ``nccl:*`` range's elements, from its Input Dims or else
    from a ``record_param_comms`` of the same thread that overlaps it."""
    rows: dict[str, list[tuple[str, int]]] = {}
    rpc_by_thread: dict[tuple[int, Any], list[tuple[float, float, dict[str, Any]]]] = defaultdict(list)
    for rank, th, ts, dur, tags in acc.rpc:
        rpc_by_thread[(rank, th)].append((ts, dur, tags))
    dev_of_rank = {r: (info["devices"][0] if info["devices"] else 0) for r, info in acc.rank_info.items()}
    for rank, th, ts, dur, name, dims in sorted(acc.nccl_cpu, key=lambda x: (x[0], x[2])):
        n = input_dims_nelems(dims) if dims else None
        if n is None:
            for rts, rdur, tags in rpc_by_thread.get((rank, th), []):
                if rts <= ts + dur and ts <= rts + rdur and tags.get("in_nelems") is not None:
                    n = _nelems(tags, "in_nelems")
                    break
        if n is not None:
            rows.setdefault(label(rank, dev_of_rank.get(rank, 0)), []).append((name, n))
    return rows
