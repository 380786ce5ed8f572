"""Checks on what the readers read: trace events, ``distributedInfo`` and timeline documents.

Every check raises :class:`~schedsim.errors.TraceError` naming the file, the
event (its position in the file's event array and its name) or op, what is
wrong, and a fix; the command line turns it into exit 2.

Bounds on Kineto times (µs, as written in the file):

* ``ts`` and ``dur`` must be finite numbers (Python's JSON reader accepts
  ``Infinity`` and ``NaN``) and not negative;
* ``dur`` at most :data:`MAX_DUR_US` = 1e12 µs (11.6 days): no profiled GPU
  activity runs that long;
* ``ts`` at most :data:`MAX_SPREAD_US` = 1e12 µs away from the file's first GPU
  event (``ts`` itself may be large: Kineto writes a clock in µs, about 5e12 on
  the 2xH200 Kineto traces of ``execute --profiler``, or epoch µs, about 1.8e15 in 2026).
  One stray event would otherwise stretch the timeline over years; and ``ts`` at
  most :data:`MAX_TS_US` = 1e17 µs (year 5138 as epoch µs).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from schedsim.errors import TraceError, printable

__all__ = ["MAX_DUR_US", "MAX_SPREAD_US", "MAX_TS_US", "check_event_times", "check_gpu_times", "check_header",
           "check_dist_info", "check_processes_distinct", "check_ranks_agree", "check_time_bases", "max_trace_events",
           "too_many_events",
           "check_timeline_doc", "check_stream_order", "decodable"]

MAX_DUR_US = 1e12
MAX_SPREAD_US = 1e12
MAX_TS_US = 1e17


_SURROGATE = re.compile("[\ud800-\udfff]")


def decodable(text: Any) -> str:
    r"""``str(text)`` with each lone surrogate (JSON's ``"\ud800"`` decodes to one) replaced by U+FFFD, so the
    name can be encoded as UTF-8: written to a file, drawn in a chart or printed.

    Examples
    --------
    >>> decodable("k\ud800x") == "k\ufffdx", decodable(7)
    (True, '7')
    """
    s = text if isinstance(text, str) else str(text)
    return s if s.isascii() else _SURROGATE.sub("\ufffd", s)


def _name(e: Any) -> str:
    """The event's category and name, quoted and escaped (:func:`schedsim.errors.printable`), for error messages."""
    if not isinstance(e, dict):
        return "?"
    return f"{printable(e.get('cat'), 40)} '{printable(e.get('name', '?'), 80)}'"


def check_event_times(path: str | Path, index: int, e: dict[str, Any], ref: float | None) -> None:
    """Refuse an event whose ``ts``/``dur`` (µs) is not finite, negative, or past the bounds above
    (:func:`check_gpu_times` refuses a GPU event without them).

    Parameters
    ----------
    path : str or Path
        The trace file, named in the error.
    index : int
        0-based position of the event in the file's event array.
    e : dict
        The event: ``ts`` and ``dur`` (µs; ``dur`` may be absent) are checked, ``name`` and ``cat`` are
        named in the error. Values that are not numbers are left to the reader's own error.
    ref : float or None
        The file's first GPU ``ts`` (µs), or None before the first one.

    Raises
    ------
    TraceError
    """
    bad = None
    for key in ("ts", "dur"):  # numbers; long decimals come as their text (the reader keeps them exact)
        v = e.get(key)
        if v is None:  # no dur is 0; no ts is the reader's "malformed event" error
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            bad = f"{key} is {str(v)[:40]!r}, not a number of µs"
        elif isinstance(v, str):
            try:
                float(v)
            except ValueError:
                bad = f"{key} is {v[:40]!r}, not a number of µs"
        if bad:
            raise TraceError(f"{path}: event #{index} ({_name(e)}): {bad}\n"
                             "  fix: the trace is corrupt or was edited; re-export it from the profiler, or remove "
                             "this event")
    if e.get("ts") is None:
        return
    try:
        ts = float(e["ts"])
        dur = float(e.get("dur") or 0.0)
    except OverflowError:  # an integer past 1e308
        ts = dur = math.inf
    for key, v in (("ts", ts), ("dur", dur)):
        if not math.isfinite(v):
            bad = f"{key} is {v}"
        elif v < 0:
            bad = f"{key} is negative ({v:g} µs)"
        if bad:
            break
    if bad is None and ts > MAX_TS_US:
        bad = f"ts is {ts:g} µs, past {MAX_TS_US:g} µs"
    if bad is None and dur > MAX_DUR_US:
        bad = f"dur is {dur:g} µs, past {MAX_DUR_US:g} µs (11.6 days)"
    if bad is None and ref is not None and abs(ts - ref) > MAX_SPREAD_US:
        bad = (f"ts is {ts:g} µs, {abs(ts - ref):g} µs away from the file's first GPU event at {ref:g} µs "
               f"(more than {MAX_SPREAD_US:g} µs)")
    if bad is not None:
        raise TraceError(f"{path}: event #{index} ({_name(e)}): {bad}\n"
                         "  fix: the trace is corrupt or was edited; re-export it from the profiler, or remove "
                         "this event")


def max_trace_events() -> int:
    """How many events of one kind (GPU activities, ranges) an import keeps at most: the limit
    ``SCHEDSIM_MAX_TRACE_EVENTS`` of :mod:`schedsim.spec.limits` (10,000,000 by default)."""
    from schedsim.io import work_limit as limit

    return limit("SCHEDSIM_MAX_TRACE_EVENTS")


def too_many_events(path: str | Path, what: str, cap: int) -> TraceError:
    """The error for a trace holding more than ``cap`` events of kind ``what`` (:func:`max_trace_events`)."""
    return TraceError(f"{path}: more than {cap:,} {what}, past the limit for one import",
                      fix="profile fewer steps, or raise the limit with the environment variable "
                          f"SCHEDSIM_MAX_TRACE_EVENTS={cap * 2}")


def check_time_bases(files: list[Path], bases_ns: list[int], labels: list[str], fix: str) -> None:
    """Refuse trace files of one import whose time origins (``bases_ns``: each file's absolute start, ns) are more
    than :data:`MAX_SPREAD_US` apart, the limit one file's events have around its first: the files of one run start
    together, so one of them is on another time base (a time origin left out of one puts its events near the
    epoch), and the timeline would span the years between. ``labels`` say each file's origin as written.

    Raises
    ------
    TraceError
        Naming the two files, the gap, their ``labels`` and ``fix``.
    """
    if len(files) < 2:
        return
    lo = min(range(len(files)), key=bases_ns.__getitem__)
    hi = max(range(len(files)), key=bases_ns.__getitem__)
    gap_us = (bases_ns[hi] - bases_ns[lo]) / 1000.0
    if gap_us > MAX_SPREAD_US:
        raise TraceError(f"{files[hi]}: it starts {gap_us:g} us after {files[lo]} (more than {MAX_SPREAD_US:g} us; "
                         f"{files[hi].name} {labels[hi]}, {files[lo].name} {labels[lo]}): the files of one run start "
                         "together, so they are on different time bases", fix=fix)


def check_ranks_agree(files: list[Path], ranks: list[int], worlds: list[int | None],
                      positional: list[bool] | None = None) -> None:
    """Refuse trace files of one import whose ``distributedInfo`` contradict each other: two ``world_size``
    values, two files with one rank, a rank at or past the ``world_size`` another file gives, or more files
    than ``world_size`` ranks.

    Parameters
    ----------
    files, ranks, worlds : lists, one entry per file
        The file, its rank (``distributedInfo.rank`` or its position) and its ``distributedInfo.world_size``
        (None when absent).
    positional : list of bool, optional
        Per file, whether its rank is its position (it has no ``distributedInfo.rank``): a clash then says so.

    Raises
    ------
    TraceError
        Naming both files and the fix.
    """
    seen: dict[int, int] = {}
    pos = positional or [False] * len(files)
    for i, (r, f) in enumerate(zip(ranks, files, strict=True)):
        if r in seen:
            j = seen[r]
            if pos[i] or pos[j]:
                which = [files[k] for k in (j, i) if pos[k]]
                raise TraceError(f"{f}: rank {r} is also claimed by {files[j]} ("
                                 + " and ".join(f"{x} has no distributedInfo.rank, so its place on the command line "
                                                "was taken as its rank" for x in which) + ")",
                                 fix="list the trace files in rank order (file k of rank k), or pass only files "
                                     "that name their rank in distributedInfo")
            raise TraceError(f"{f}: rank {r} is also claimed by {files[j]}", fix="pass one trace file per rank")
        seen[r] = i
    known = [(w, f) for w, f in zip(worlds, files, strict=True) if w is not None]
    if not known:
        return
    w0, f0 = known[0]
    for w, f in known[1:]:
        if w != w0:
            raise TraceError(f"{f}: distributedInfo.world_size is {w}, but {f0} says {w0}; the files are not of "
                             "one run", fix="pass the trace files of one run (one per rank)")
    for r, f in zip(ranks, files, strict=True):
        if r >= w0:
            raise TraceError(f"{f}: rank {r} is outside 0..{w0 - 1} (world_size {w0}, from {f0})",
                             fix="pass the trace files of one run; each rank's file names its rank in "
                                 "distributedInfo")
    if len(files) > w0:
        raise TraceError(f"{len(files)} trace files for a world_size of {w0} (from {f0})",
                         fix="pass at most one trace file per rank of one run")


def check_processes_distinct(rank_info: dict[int, dict[str, Any]], session_of: dict[str, int]) -> None:
    """Refuse nsys exports of one import that hold the same process twice: two ranks with one file, or with one
    (session start, process id, device) from two files (one capture exported, or passed, twice), where the
    session start is known (``session_of``: file → ``TARGET_INFO_SESSION_START_TIME``, 0 when absent).

    Raises
    ------
    TraceError
        Naming both files and the process.
    """
    seen: dict[tuple[Any, ...], str] = {}
    for info in rank_info.values():
        f = str(info.get("file"))
        start = session_of.get(f, 0)
        key = (f, info.get("pid"), info.get("device")) if not start else (start, info.get("pid"), info.get("device"))
        if key in seen:
            raise TraceError(f"{f}: process {info.get('pid')} on device {info.get('device')} is also in {seen[key]} "
                             "(the same capture twice)", fix="pass each rank's nsys export once")
        seen[key] = f


def check_gpu_times(path: str | Path, index: int, e: dict[str, Any]) -> None:
    """Refuse a GPU activity or annotation without ``ts`` or ``dur`` (a kernel without ``dur`` would count as
    0 µs); ``index`` and the event are named as in :func:`check_event_times`.

    Raises
    ------
    TraceError
    """
    missing = [k for k in ("ts", "dur") if e.get(k) is None]
    if missing:
        raise TraceError(f"{path}: event #{index} ({_name(e)}): no {' and no '.join(missing)}; a GPU event "
                         "needs ts and dur (µs), or its time would be made up",
                         fix="the trace is corrupt or was edited; re-export it from the profiler, or remove this "
                             "event")


def check_header(path: str | Path, hdr: dict[str, Any]) -> None:
    """Check a Kineto file's top-level values: ``distributedInfo`` (:func:`check_dist_info`) and
    ``baseTimeNanoseconds`` (a finite, non-negative number below 1e20 ns, year 5138 as epoch ns).

    Raises
    ------
    TraceError
    """
    dist = hdr.get("distributedInfo")
    if dist is not None and not isinstance(dist, dict):
        raise TraceError(f"{path}: distributedInfo is {str(dist)[:60]!r}, not an object\n"
                         "  fix: re-export the trace, or remove distributedInfo")
    check_dist_info(path, dist or {})
    base = hdr.get("baseTimeNanoseconds")
    if base is not None and (isinstance(base, bool) or not isinstance(base, (int, float))
                             or not 0 <= base < 1e20):  # also NaN and inf; an int past 1e308 compares exactly
        raise TraceError(f"{path}: baseTimeNanoseconds is {str(base)[:60]!r}, not a time in ns since the epoch\n"
                         "  fix: re-export the trace, or remove baseTimeNanoseconds (ts is then taken as epoch µs)")


def check_dist_info(path: str | Path, dist: dict[str, Any]) -> None:
    """Refuse a ``distributedInfo`` whose ``rank`` is outside ``[0, world_size)`` or whose sizes are not integers.

    Raises
    ------
    TraceError
    """
    rank, world = dist.get("rank"), dist.get("world_size")
    for key, v in (("rank", rank), ("world_size", world)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise TraceError(f"{path}: distributedInfo.{key} is {v!r}, not an integer\n"
                             "  fix: re-export the trace, or correct distributedInfo")
    from schedsim.io import work_limit as limit

    if isinstance(world, int) and world > limit("SCHEDSIM_MAX_RANKS"):
        raise TraceError(f"{path}: distributedInfo.world_size is {world:,}, past the limit of "
                         f"{limit('SCHEDSIM_MAX_RANKS'):,} ranks\n  fix: the trace is corrupt or was edited; if "
                         "you mean it, raise the environment variable SCHEDSIM_MAX_RANKS")
    if isinstance(world, int) and world < 1:
        raise TraceError(f"{path}: distributedInfo.world_size is {world}\n  fix: it must be at least 1")
    if isinstance(rank, int) and (rank < 0 or (isinstance(world, int) and rank >= world)):
        raise TraceError(f"{path}: distributedInfo.rank is {rank}, outside 0..{world - 1 if isinstance(world, int) else '∞'}"
                         f" (world_size {world})\n  fix: pass the trace files of one run; each rank's file "
                         "names its rank in distributedInfo")


#: Timeline ``version`` values this reader understands.
TIMELINE_VERSIONS = (1, 2, 3)  # 1: one object per op ("ops"); 2: columns; 3: columns, names and tags coded


def _tags_problem(tags: Any) -> str | None:
    """What is wrong with an op's ``tags`` in a row-layout timeline (not an object, or a NaN/±inf value, which
    is not JSON and which no tag holds), None when nothing is."""
    if tags is None:
        return None
    if not isinstance(tags, dict):
        return f"tags is {str(tags)[:60]!r}, not an object"
    bad = next((x for x in tags.values() if type(x) is float and not math.isfinite(x)), None)
    return None if bad is None else f"a tag value is {bad}, which is not JSON; tag values are finite numbers"


def check_timeline_doc(d: dict[str, Any], where: str) -> None:
    """Refuse a timeline document with an unknown version, a malformed op, ``end_s < start_s``, a
    non-finite time, or two ops with one id.

    Raises
    ------
    TraceError
        Naming the file, the op (position and id) and the fix.
    """
    v = d.get("version", 1)
    if v not in TIMELINE_VERSIONS or isinstance(v, bool):
        raise TraceError(f"{where}: timeline version {v!r} is not one this schedsim reads "
                         f"({', '.join(map(str, TIMELINE_VERSIONS))})\n"
                         "  fix: re-write the timeline with this schedsim (predict, execute or import)")
    ws = d.get("world_size", 1)
    if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
        raise TraceError(f"{where}: world_size is {str(ws)[:60]!r}, not a positive integer\n"
                         "  fix: the file is corrupt or was edited; re-run the command that wrote it")
    from schedsim.io import work_limit as limit

    if ws > limit("SCHEDSIM_MAX_RANKS"):
        raise TraceError(f"{where}: world_size is {ws:,}, past the limit of {limit('SCHEDSIM_MAX_RANKS'):,} ranks\n"
                         "  fix: the file is corrupt or was edited; if you mean it, raise SCHEDSIM_MAX_RANKS")
    n = d.get("n_ops")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise TraceError(f"{where}: n_ops is {str(n)[:60]!r}, not a count of ops\n"
                         "  fix: the file is corrupt or was edited; re-run the command that wrote it")
    for key, typ, what in (("critical_path", list, "a list of op ids"), ("meta", dict, "an object"),
                           ("columns", dict, "an object of columns")):
        if d.get(key) is not None and not isinstance(d.get(key), typ):
            raise TraceError(f"{where}: {key} is {str(d.get(key))[:60]!r}, not {what}\n"
                             "  fix: the file is corrupt or was edited; re-run the command that wrote it")
    ops = d.get("ops", [])
    if not isinstance(ops, list):
        raise TraceError(f"{where}: \"ops\" is not a list\n  fix: pass a timeline.json written by schedsim")
    seen: dict[str, int] = {}
    for i, o in enumerate(ops):
        if not isinstance(o, dict):
            raise TraceError(f"{where}: ops[{i}] is not an object\n  fix: pass a timeline.json written by schedsim")
        oid = o.get("id")
        for key in ("start_s", "end_s", "solo_s", "ready_s"):
            t = o.get(key)
            if key in ("solo_s", "ready_s") and (t is None or (isinstance(t, float) and math.isnan(t))):
                continue  # optional: null (or NaN, which the columnar layout writes) means unknown
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                raise TraceError(f"{where}: ops[{i}] ({oid!r}): {key} is {t!r}, not a finite number of seconds\n"
                                 "  fix: the file is corrupt or was edited; re-run the command that wrote it")
        r = o.get("rank")
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < ws:
            raise TraceError(f"{where}: ops[{i}] ({oid!r}): rank is {str(r)[:40]!r}, not an integer in 0..{ws - 1} "
                             f"(world_size {ws})\n  fix: the file is corrupt or was edited; re-run the command that "
                             "wrote it")
        for key in ("bytes", "flops"):
            v = o.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v < 0):
                raise TraceError(f"{where}: ops[{i}] ({oid!r}): {key} is {str(v)[:40]!r}, not a finite number "
                                 ">= 0\n  fix: the file is corrupt or was edited; re-run the command that wrote it")
        bad = _tags_problem(o.get("tags"))
        if bad:
            raise TraceError(f"{where}: ops[{i}] ({oid!r}): {bad}\n"
                             "  fix: the file is corrupt or was edited; re-run the command that wrote it")
        if o["end_s"] < o["start_s"]:
            raise TraceError(f"{where}: ops[{i}] ({oid!r}): end_s {o['end_s']!r} is before start_s {o['start_s']!r}\n"
                             "  fix: the file is corrupt or was edited; re-run the command that wrote it")
        if not isinstance(oid, str) or not oid:
            raise TraceError(f"{where}: ops[{i}]: id is {oid!r}, not a non-empty string\n"
                             "  fix: ids are name@rRANK strings; re-run the command that wrote the file")
        if oid in seen:
            raise TraceError(f"{where}: ops[{i}] and ops[{seen[oid]}] have the same id {oid!r}; one would be "
                             "silently dropped\n  fix: ids must be unique (name@rRANK); re-run the command that "
                             "wrote the file")
        seen[oid] = i


def check_stream_order(path: str | Path, lanes: dict[Any, list[tuple[int, int, str, int]]],
                       warnings: list[str], tol_ns: int = 1000) -> None:
    """Refuse events repeated on one CUDA stream, and warn of events that overlap on one.

    A CUDA stream runs its kernels and copies one after another, so two activities of one stream never
    overlap in a profile of one run (CUDA C Programming Guide, "Streams"). The same event twice (same
    name, start and duration) means the trace was concatenated or merged twice; it would count that
    work twice, so it is an error. A partial overlap of more than ``tol_ns`` (1 µs: Kineto's clock
    conversion jitter) is reported in ``warnings`` (the spans are kept as written).

    Parameters
    ----------
    lanes : dict
        (rank, device, stream) -> list of (start_ns, end_ns, name, event index) of that stream.

    Raises
    ------
    TraceError
        Naming both events, the stream and the fix.
    """
    overlaps = 0
    first = ""
    for (rank, dev, st), evs in lanes.items():
        evs.sort()
        for (a0, a1, an, ai), (b0, b1, bn, bi) in zip(evs, evs[1:]):
            if a0 == b0 and a1 == b1 and an == bn:
                raise TraceError(f"{path}: events #{ai} and #{bi} are the same {an!r} twice on rank {rank} device "
                                 f"{dev} stream {st} (start {a0} ns, end {a1} ns)\n  fix: the trace holds an event "
                                 "twice (merged or concatenated twice?); re-export it from the profiler")
            if b0 < a1 - tol_ns:
                overlaps += 1
                if not first:
                    first = (f"events #{ai} {an!r} and #{bi} {bn!r} on rank {rank} device {dev} stream {st} "
                             f"overlap by {(a1 - b0) / 1000:g} µs")
    if overlaps:
        warnings.append(f"{path}: {overlaps} pair(s) of events overlap on one CUDA stream, which runs them in order "
                        f"(first: {first}); the trace may merge two runs; spans are kept as written")
