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
``distributedInfo.rank`` (else the file's position). Files are streamed with
:class:`~schedsim.trace.jsonstream.TraceEventStream`; CPU events other than the
few above are dropped as they are read.

Timestamps are read exactly: ``ts`` and ``dur`` become integer nanoseconds from their decimal text
(epoch µs with 3 decimals has 19-20 significant digits, more than a float's 15-17, so a float parse
moves events by up to 0.25 µs and merges kernels 240 ns apart). Numbers longer than 15 characters
are kept as their text by the JSON decoder (:func:`_keep_long`) and converted by :func:`_ns`.
"""

from __future__ import annotations

import bisect
import json
from array import array
from collections import defaultdict
from pathlib import Path
from typing import Any

from schedsim.errors import TraceError
from schedsim.trace.common import (
    DTYPE_BYTES,
    Activity,
    ImportResult,
    OpRange,
    build_timeline,
    check_rank_unique,
    is_nccl_kernel,
    match_op,
    short_kernel_name,
)
from schedsim.trace.jsonstream import TraceEventStream

def _keep_long(text: str) -> float | str:
    """JSON ``parse_float``: a float, or the text itself when a float cannot hold it exactly (> 15 chars)."""
    return text if len(text) > 15 else float(text)


def _ns(v: Any) -> int:
    """A Kineto time in µs (int, float or decimal text) as exact integer nanoseconds (rounded half even).

    Raises
    ------
    TypeError
        ``v`` is a boolean, null, list or object.
    ValueError
        ``v`` is not a finite decimal number (``"abc"``, ``"NaN"``, infinity).
    """
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"time {v!r} is not a number")
    if isinstance(v, int):
        return v * 1000
    from decimal import Decimal, InvalidOperation

    try:
        d = Decimal(v if isinstance(v, str) else repr(v))
        if not d.is_finite():
            raise ValueError
        return int((d * 1000).to_integral_value())
    except (InvalidOperation, ValueError, OverflowError):
        raise ValueError(f"time {v!r} is not a finite decimal number of µs") from None


from schedsim.trace.nsys import shape_size
from schedsim.trace.validate import check_event_times, check_header, check_stream_order

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
_CHECKED = _KERNEL | _MEMCPY | _MEMSET | {"gpu_user_annotation", "user_annotation", "cpu_op"}


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


def _msg_bytes(tags: dict[str, Any]) -> float:
    n = max(int(tags.get("in_nelems") or 0), int(tags.get("out_nelems") or 0))
    dt = str(tags.get("dtype") or "").lower().replace("torch.", "")
    return float(n * DTYPE_BYTES.get(dt, 0))


def import_kineto(
    paths: str | Path | list[str | Path],
    *,
    ops: dict[str, dict[str, Any]] | None = None,
    iteration: int = -1,
    schedule: str | None = None,
    keep_kernel_rows: bool = True,
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

    Returns
    -------
    ImportResult
        Timeline (s from the earliest GPU event), kernel rows (µs) and NCCL
        volume rows per device.

    Raises
    ------
    TraceError
        Truncated/corrupt gzip or JSON, a file that is not a trace, two files
        claiming one rank, or no GPU events at all.
    """
    files = [Path(p) for p in (paths if isinstance(paths, list) else [paths])]
    if not files:
        raise TraceError("no trace file given")
    acts: list[Activity] = []
    spans_of_file: list[tuple[int, int]] = []
    ranks: list[int] = []
    bases: list[int] = []
    warnings: list[str] = []
    rank_info: dict[int, dict[str, Any]] = {}
    annots: list[tuple[int, str, int, str, float, float, Any]] = []  # rank, name, device, stream, ts, dur, ext id
    nccl_cpu: list[tuple[int, tuple[Any, Any], float, float, str, Any]] = []
    rpc: list[tuple[int, tuple[Any, Any], float, float, dict[str, Any]]] = []
    world = 0
    full_names: dict[str, str] = {}
    raw_ts = array("d")  # per activity: ts and dur as written in the file (µs)
    raw_dur = array("d")
    refs: list[float] = []
    streams: dict[Any, str] = {}
    for fi, path in enumerate(files):
        stream = TraceEventStream(path)
        stream._dec = json.JSONDecoder(parse_float=_keep_long)  # exact timestamps (module docstring)
        first = len(acts)
        stream_lanes: dict[tuple[int, int, str], list[tuple[int, int, str, int]]] = defaultdict(list)
        pname = None
        pos_rank = fi
        file_annots_start = len(annots)
        file_nccl_start, file_rpc_start = len(nccl_cpu), len(rpc)
        ref: int | None = None  # this file's first GPU timestamp (ns); times are kept relative to it
        for e in stream:
            if not isinstance(e, dict):
                continue
            cat = e.get("cat")
            if cat is None:
                # the CPU process's name (GPU "processes" have small pids: the device index)
                if (e.get("ph") == "M" and e.get("name") == "process_name" and isinstance(e.get("args"), dict)
                        and pname is None and str(e.get("pid", "")).isdigit() and int(e["pid"]) > 1024):
                    pname = e["args"].get("name")
                continue
            c = cat.lower() if isinstance(cat, str) else ""
            if c in _CHECKED:
                check_event_times(path, stream.n_events, e, None if ref is None else ref / 1000.0)  # ref is in ns
            try:
                if c in _KERNEL or c in _MEMCPY or c in _MEMSET:
                    args = e.get("args") or {}
                    ts = _ns(e["ts"])
                    dur = _ns(e.get("dur") or 0)
                    dev = int(args.get("device", e.get("pid", 0)) or 0)
                    st0 = args.get("stream", e.get("tid", "?"))
                    st = streams.get(st0)
                    if st is None:
                        st = streams[st0] = str(st0)
                    name = str(e.get("name", "?"))
                    tags = None
                    nbytes = 0.0
                    if c in _KERNEL:
                        short = short_kernel_name(name)
                        full_names.setdefault(short, name)
                        cat_s = "kernel"
                        if is_nccl_kernel(name):
                            tags = {"kernel": name}
                            for k, v in COLLECTIVE_ARGS.items():
                                if k in args:
                                    tags[v] = args[k]
                            nbytes = _msg_bytes(tags)
                        name = short
                    else:
                        cat_s = "memcpy" if c in _MEMCPY else "memset"
                        nbytes = float(args.get("bytes") or 0.0)
                    if ref is None:
                        ref = ts
                    rel = float(ts - ref)
                    acts.append(Activity(pos_rank, dev, st, name, cat_s, rel, rel + dur, nbytes, tags))
                    stream_lanes[(pos_rank, dev, st)].append((ts, ts + dur, name, stream.n_events))
                    raw_ts.append(float(e["ts"]))
                    raw_dur.append(float(e.get("dur") or 0.0))
                elif c == "gpu_user_annotation":
                    args = e.get("args") or {}
                    annots.append((pos_rank, str(e.get("name")), int(args.get("device", e.get("pid", 0)) or 0),
                                   str(args.get("stream", e.get("tid", "?"))), _ns(e["ts"]),
                                   _ns(e.get("dur") or 0), args.get("External id")))
                elif c in ("user_annotation", "cpu_op"):
                    name = e.get("name")
                    if name == "record_param_comms":
                        args = e.get("args") or {}
                        rpc.append((pos_rank, (e.get("pid"), e.get("tid")), _ns(e["ts"]), _ns(e.get("dur") or 0),
                                    {COLLECTIVE_ARGS[k]: v for k, v in args.items() if k in COLLECTIVE_ARGS}))
                    elif isinstance(name, str) and name.startswith("nccl:"):
                        args = e.get("args") or {}
                        nccl_cpu.append((pos_rank, (e.get("pid"), e.get("tid")), _ns(e["ts"]),
                                         _ns(e.get("dur") or 0), name, args.get("Input Dims")))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
                raise TraceError(f"{path}: event #{stream.n_events}: malformed {cat} event ({err.__class__.__name__}: "
                                 f"{err}): {str(e)[:200]}\n  fix: re-export the trace from the profiler") from None
        check_stream_order(path, stream_lanes, warnings)
        del stream_lanes
        hdr = stream.header
        check_header(path, hdr)
        dist = hdr.get("distributedInfo") if isinstance(hdr.get("distributedInfo"), dict) else {}
        rank = dist.get("rank")
        if not isinstance(rank, int):
            if len(files) > 1:
                warnings.append(f"{path}: no distributedInfo.rank; using its position {fi} as the rank")
            rank = fi
        world = max(world, int(dist.get("world_size") or 0))
        base = hdr.get("baseTimeNanoseconds")
        ref = ref if ref is not None else 0
        refs.append(ref)
        # absolute origin of this file in ns, an exact integer (ts may be epoch µs)
        bases.append((int(base) if isinstance(base, (int, float)) else 0) + ref)
        ranks.append(rank)
        spans_of_file.append((first, len(acts)))
        if rank != pos_rank:
            for i in range(first, len(acts)):
                acts[i] = acts[i]._replace(rank=rank)
            for lst, start in ((annots, file_annots_start), (nccl_cpu, file_nccl_start), (rpc, file_rpc_start)):
                for i in range(start, len(lst)):
                    lst[i] = (rank, *lst[i][1:])  # type: ignore[index]
        devices = sorted({a.device for a in acts[first:]})
        rank_info[rank] = {"file": str(path), "devices": devices, "process": pname,
                           "schemaVersion": hdr.get("schemaVersion"), "events": stream.n_events,
                           "nccl_version": dist.get("nccl_version"), "pg_config": dist.get("pg_config")}
    check_rank_unique(ranks, files)
    if not acts:
        raise TraceError(f"{files[0]}: no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace; "
                         "was the profiler run with ProfilerActivity.CUDA?")
    # -- common time base ------------------------------------------------------------------------
    base0 = min(bases)
    shift_ns = {rank: float(b - base0) for rank, b in zip(ranks, bases, strict=False)}
    ref_of = dict(zip(ranks, refs, strict=False))
    if any(shift_ns.values()):
        for i, a in enumerate(acts):
            s = shift_ns[a.rank]
            if s:
                acts[i] = a._replace(start_ns=a.start_ns + s, end_ns=a.end_ns + s)

    # -- op annotations -> op ranges -----------------------------------------------------------
    op_ranges: list[OpRange] = []
    cand = [a for a in annots if match_op(a[1], ops) is not None]
    if cand:
        lanes: dict[tuple[int, int, str], list[int]] = defaultdict(list)
        for i, a in enumerate(acts):
            lanes[(a.rank, a.device, a.stream)].append(i)
        starts = {k: [acts[i].start_ns for i in v] for k, v in lanes.items()}
        merged: dict[tuple[int, str, Any], list[tuple[float, float, list[int]]]] = defaultdict(list)
        for rank, name, dev, st, ts, dur, ext in cand:
            key = (rank, dev, st)
            s0 = float(ts - ref_of[rank]) + shift_ns.get(rank, 0.0)
            s1 = s0 + dur
            lo = bisect.bisect_left(starts.get(key, []), s0 - 1.0)
            hi = bisect.bisect_right(starts.get(key, []), s1 + 1.0)
            mem = [j for j in lanes.get(key, [])[lo:hi] if acts[j].end_ns <= s1 + 1.0]
            mkey = (rank, name, ext if ext is not None else (st, ts))
            merged[mkey].append((s0, s1, mem))
        for (rank, name, _ext), parts in merged.items():
            mem = sorted({j for _a, _b, m in parts for j in m})
            op_ranges.append(OpRange(match_op(name, ops) or name, rank, min(p[0] for p in parts),
                                     max(p[1] for p in parts), mem, name))

    # -- rows of analyze's kernel-share and NCCL-volume tables ----------------------------------------
    multi = len(files) > 1

    def label(rank: int, dev: int) -> str:
        return f"Rank {rank} Device {dev}" if multi else f"Device {dev}"

    kernel_rows: dict[str, list[tuple[str, str, float, float]]] = {}
    order = sorted((i for i, a in enumerate(acts) if a.cat == "kernel" and keep_kernel_rows),
                   key=lambda i: (label(acts[i].rank, acts[i].device), f"Stream {acts[i].stream}", i))
    for i in order:
        a = acts[i]
        kernel_rows.setdefault(label(a.rank, a.device), []).append((a.name, f"Stream {a.stream}", raw_ts[i], raw_dur[i]))
    nccl_rows: dict[str, list[tuple[str, int]]] = {}
    rpc_by_thread: dict[tuple[int, Any], list[tuple[float, float, dict[str, Any]]]] = defaultdict(list)
    for rank, th, ts, dur, tags in rpc:
        rpc_by_thread[(rank, th)].append((ts, dur, tags))
    dev_of_rank = {r: (info["devices"][0] if info["devices"] else 0) for r, info in rank_info.items()}
    for rank, th, ts, dur, name, dims in sorted(nccl_cpu, key=lambda x: (x[0], x[2])):
        n = input_dims_nelems(dims) if dims else None
        if n is None:
            for rts, rdur, tags in rpc_by_thread.get((rank, th), []):
                if rts <= ts + dur and ts <= rts + rdur and tags.get("in_nelems") is not None:
                    n = int(tags["in_nelems"])
                    break
        if n is not None:
            nccl_rows.setdefault(label(rank, dev_of_rank.get(rank, 0)), []).append((name, n))

    meta: dict[str, Any] = {"trace_format": "kineto", "files": [str(p) for p in files], "ranks": rank_info,
                            "kernel_count": sum(1 for a in acts if a.cat == "kernel"),
                            "memcpy_count": sum(1 for a in acts if a.cat == "memcpy"),
                            "memset_count": sum(1 for a in acts if a.cat == "memset"),
                            "origin_ns": base0, "warnings": warnings,
                            "record_param_comms": [dict(t, rank=r) for r, _th, _ts, _d, t in rpc][:10_000]}
    tl = build_timeline(acts, op_ranges, schedule=schedule or files[0].name.split(".")[0],
                        world_size=max(world, len(rank_info), 1), meta=meta, ops=ops, iteration=iteration)
    return ImportResult(tl, kernel_rows, nccl_rows, warnings)
