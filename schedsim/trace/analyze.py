"""``schedsim analyze``: kernel time shares, NCCL volumes, overlap, idle time and critical path.

Two tables that pipeline studies print from nsys traces of Megatron-LM runs, computed from a trace or a
timeline:

* **kernel time share**: per device, kernels grouped by
  ``{name}_{Stream N}``; share = the group's summed duration divided by the
  device's kernel window (last kernel end − first kernel start); then min, max and mean duration
  in µs, sorted by share; the last line is the device's busy share, the fraction of the window in which
  any kernel runs (the union of the kernels' intervals). A group runs on one stream, whose kernels run one
  after another, so each share is at most 1, and so is the busy share; the sum of the rows is not printed,
  as kernels of concurrent streams would count twice in it. (S4's script, ``docs/sources.md``, divides by
  last *start* − first start and prints the rows' sum, which passes 1 on a device whose last kernel is long
  or whose streams overlap.) Kernels
  whose nsys ``shortName`` is ``Kernel`` are named after the first field (up to
  the first comma) of the outermost NVTX range that launched them.
* **NCCL volume**: per device, the element counts of the
  ``nccl:*`` ranges, summed per collective name and sorted by volume.
  Counts come from ``sizes = [[...]]`` in NVTX texts (nsys), from
  ``Input Dims`` or ``record_param_comms``' ``In msg nelems`` (Kineto), or
  from comm spans' ``in_nelems`` tags (timelines).

Then, per rank, from :class:`schedsim.sim.metrics.Metrics`: busy time
by resource, idle time, communication/computation overlap as HTA defines it
(|comm ∩ compute| / |comm|) and exposed communication, and the critical path.

A device whose kernels all start at the same instant (a zero span) prints ``nan`` shares, and NCCL
ranges without ``sizes`` are skipped.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any, NamedTuple

from schedsim.errors import TraceError
from schedsim.sim.metrics import Metrics
from schedsim.sim.timeline import Timeline
from schedsim.trace.common import ImportResult

__all__ = [
    "SEP",
    "analysis_dict",
    "detect_format",
    "format_report",
    "kernel_share_table",
    "load_any",
    "nccl_volume_table",
    "rows_from_timeline",
    "tag_pipeline",
    "kineto_ranges_timeline",
    "pipeline_bubbles",
    "PIPELINE_NAME_PATTERNS",
]

SEP = "-----------------------------"


def _header(device: str) -> str:
    return f"{SEP}{device}{SEP}"


class _KernelGroups(NamedTuple):
    """One device's kernels grouped by ``{name}_{tid}`` (:func:`_kernel_groups`): ``names[g]`` is group ``g``'s
    name; ``ranked`` the group codes by summed duration, largest first (ties in order of first start); ``count``,
    ``total``, ``low``, ``high``, ``avg`` per group code (µs; int64/float64 arrays of shape (groups,)); ``window``
    the device's kernel window (last kernel end − first kernel start, µs) and ``busy`` the time any kernel runs
    in it (union of the kernels' intervals, µs)."""

    names: list[str]
    ranked: Any
    count: Any
    total: Any
    low: Any
    high: Any
    avg: Any
    window: float
    busy: float


def _kernel_groups(rows: list[tuple[str, str, float, float]]) -> _KernelGroups:
    """Group one device's ``(kernel name, tid, ts_us, dur_us)`` rows (:class:`_KernelGroups`).

    Array passes over the rows: a group of one kernel takes its numbers from the arrays, a larger group adds its
    durations (in start order) with :func:`math.fsum`; the busy time is
    :func:`schedsim.sim.metrics.union_length` of ``[ts, ts + dur)``. A million kernels cost a few numpy passes,
    not a million dict updates.
    """
    import numpy as np

    from schedsim.sim.metrics import union_length

    n = len(rows)
    if not n:
        none = np.zeros(0)
        return _KernelGroups([], np.zeros(0, np.int64), np.zeros(0, np.int64), none, none, none, none, 0.0, 0.0)
    names, tids, ts_l, dur_l = zip(*rows, strict=True)
    keys: dict[str, int] = {}
    group = np.fromiter((keys.setdefault(f"{a}_{b}", len(keys)) for a, b in zip(names, tids, strict=True)),
                        np.int64, n)
    ts, dur = np.array(ts_l, dtype=float), np.array(dur_l, dtype=float)
    o = np.argsort(ts, kind="stable")
    g_o, d_o = group[o], dur[o]
    uniq, first = np.unique(g_o, return_index=True)
    in_order = uniq[np.argsort(first, kind="stable")]  # the groups in order of first start
    d_g = d_o[np.argsort(g_o, kind="stable")]  # each group's rows together, in start order
    count = np.bincount(g_o, minlength=len(keys))
    starts = np.cumsum(count) - count
    total, low, high = d_g[starts].copy(), d_g[starts].copy(), d_g[starts].copy()
    for g in np.flatnonzero(count > 1).tolist():
        d = d_g[starts[g]:starts[g] + count[g]].tolist()
        total[g], low[g], high[g] = math.fsum(d), min(d), max(d)
    end = ts + dur
    return _KernelGroups(list(keys), in_order[np.argsort(-total[in_order], kind="stable")], count, total, low, high,
                         total / count, float(end.max() - ts.min()), union_length(ts, end))


def kernel_share_table(kernel_rows: dict[str, list[tuple[str, str, float, float]]],
                       limit: int | None = None) -> list[str]:
    """Lines of the kernel time share table (module docstring).

    Parameters
    ----------
    kernel_rows : dict
        Device label → ``(kernel name, tid, ts_us, dur_us)`` in (stream, then trace) order; the
        stable sort by start time is done here.
    limit : int, optional
        Rows to write per device; past it one ``"  ... N more rows (--full)"`` line stands for the rest (the
        busy share still counts every kernel).

    Returns
    -------
    list of str
        A header per device, ``"{share:7.2f} min:{:10.2f} max:{:10.2f} avg:{:10.2f} {name}_{tid}"``
        rows, and the busy share; ``nan`` on a device whose kernel window is 0.
    """
    import numpy as np

    lines: list[str] = []
    for device, rows in kernel_rows.items():
        lines.append(_header(device))
        k = _kernel_groups(rows)
        shown = k.ranked if limit is None else k.ranked[:limit]
        share = k.total[shown] / k.window if k.window > 0 else np.full(len(shown), math.nan)
        lines += [f"{sh:7.2f} min:{lo:10.2f} max:{hi:10.2f} avg:{av:10.2f} {k.names[g]}"
                  for sh, lo, hi, av, g in zip(share.tolist(), k.low[shown].tolist(), k.high[shown].tolist(),
                                               k.avg[shown].tolist(), shown.tolist(), strict=True)]
        if len(shown) < len(k.ranked):
            lines.append(f"  ... {len(k.ranked) - len(shown)} more rows (--full)")
        lines.append(f"{k.busy / k.window if k.window > 0 else math.nan:7.2f}")
    return lines


def nccl_volume_table(nccl_rows: dict[str, list[tuple[str, int]]], devices: list[str] | None = None) -> list[str]:
    """Lines of the NCCL volume table: ``"{elements:14.2f} {collective}"`` per device.

    Parameters
    ----------
    nccl_rows : dict
        Device label → ``(collective range name, element count)``.
    devices : list of str, optional
        Device labels to print a header for even without NCCL rows (every device of the trace gets
        one).
    """
    lines: list[str] = []
    labels = list(devices or [])
    labels += [d for d in nccl_rows if d not in labels]
    for device in labels:
        lines.append(_header(device))
        v = sorted(nccl_rows.get(device, []), key=lambda x: x[1])
        total: dict[str, float] = {}
        for name, size in v:
            total[name] = total.get(name, 0) + size
        for name, size in sorted(total.items(), key=lambda d: d[1], reverse=True):
            lines.append(f"{size:14.2f} {name}")
    return lines


def rows_from_timeline(tl: Timeline) -> tuple[dict[str, list[tuple[str, str, float, float]]], dict[str, list[tuple[str, int]]]]:
    """Kernel-share and NCCL-volume table rows from a timeline's spans (for ``analyze timeline.json``).

    Every compute and comm span counts as a kernel (copies do not: the kernel table of a trace has
    kernels only), labelled ``Rank N``, tid ``Stream S``; µs are rounded to the ns.
    NCCL rows come from comm spans with an ``in_nelems`` tag (named
    ``nccl:{collective}``), else their ``bytes`` (named ``{kind} (bytes)``).
    """
    import numpy as np

    c = tl.columns
    krows: dict[str, list[tuple[str, str, float, float]]] = {}
    nrows: dict[str, list[tuple[str, int]]] = {}
    sv, sc = c.stream
    rv, rc = c.resource
    kv, kc = c.kind
    tids = [f"Stream {v}" for v in sv]
    tid_rank = np.argsort(np.argsort(np.array(tids, dtype=object), kind="stable"), kind="stable")
    code = {name: i for i, name in enumerate(rv)}
    rows = np.flatnonzero(rc != code.get("copy", -1))
    # by rank, then stream label, then row: the order the spans were sorted in (a stable sort on that key)
    rows = rows[np.lexsort((rows, tid_rank[sc[rows]] if len(sv) else rows, c.rank[rows]))]
    names, ranks, scodes = c.name, c.rank[rows].tolist(), sc[rows].tolist()
    ts = list(map(round, (c.start_s[rows] * 1e6).tolist(), itertools.repeat(3)))
    dur = list(map(round, ((c.end_s[rows] - c.start_s[rows]) * 1e6).tolist(), itertools.repeat(3)))
    is_comm = (rc[rows] == code.get("comm", -1)).tolist()
    nel_v, nel_c = c.tag_column("in_nelems")
    col_v, col_c = c.tag_column("collective")
    nel, col, kinds, nbytes = (nel_c[rows].tolist(), col_c[rows].tolist(), kc[rows].tolist(),
                               c.bytes[rows].tolist())
    label = ""
    for j, (i, r, k) in enumerate(zip(rows.tolist(), ranks, scodes, strict=True)):
        if not j or r != ranks[j - 1]:
            label = f"Rank {r}"
            kl, nl = krows.setdefault(label, []), nrows.get(label)
        kl.append((names[i], tids[k], ts[j], dur[j]))
        if is_comm[j]:
            n = nel_v[nel[j]] if nel[j] >= 0 else None
            row = ((f"nccl:{(col_v[col[j]] if col[j] >= 0 else None) or kv[kinds[j]]}", int(n)) if n is not None
                   else (f"{kv[kinds[j]]} (bytes)", int(nbytes[j])) if nbytes[j] else None)
            if row is not None:
                nl = nrows.setdefault(label, []) if nl is None else nl
                nl.append(row)
    return krows, nrows


_DETECT_FIX = ("pass a timeline.json, an nsys SQLite export (nsys export --type sqlite) or a Kineto trace "
               "(.json or .json.gz)")


def detect_format(path: str | Path) -> str:
    """``"nsys"``, ``"nsys-rep"``, ``"timeline"`` or ``"kineto"`` from a file's first bytes.

    Raises
    ------
    TraceError
        Missing, empty or not a regular file, past the size cap (:func:`schedsim.io.check_input`), or content
        that is none of these.
    """
    p = Path(path)
    if p.suffix.lower() in (".nsys-rep", ".qdrep"):
        return "nsys-rep"
    from schedsim.io import open_input

    with open_input(p, "trace") as f:  # a regular, non-empty file within the size cap: never a FIFO or device
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        return "nsys"
    from schedsim.trace.jsonstream import open_text

    try:
        with open_text(p) as f:
            text = f.read(4096)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: neither an nsys SQLite export nor a JSON trace ({e.__class__.__name__}: {e})",
                         fix=_DETECT_FIX) from None
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        raise TraceError(f"{p}: neither an nsys SQLite export (.sqlite) nor a JSON trace or timeline", fix=_DETECT_FIX)
    compact = stripped[:200].replace(" ", "").replace("\n", "")
    if '"format":"schedsim.timeline"' in compact:
        return "timeline"
    return "kineto"


def load_any(paths: list[Path], ops: dict[str, dict[str, Any]] | None = None) -> tuple[str, ImportResult]:
    """Read a timeline, nsys SQLite export(s) or Kineto trace(s), whichever ``paths`` are.

    Returns
    -------
    (format, ImportResult)
        For a timeline, the table rows come from :func:`rows_from_timeline`.

    Raises
    ------
    TraceError
        Mixed formats, an ``.nsys-rep``, or any import error.
    """
    if not paths:
        raise TraceError("no input file given")
    kinds = {detect_format(p) for p in paths}
    if len(kinds) > 1:
        raise TraceError(f"mixed inputs ({', '.join(sorted(kinds))}); analyze one kind of file at a time")
    kind = kinds.pop()
    if kind == "nsys-rep":
        from schedsim.trace.nsys import EXPORT_HINT

        p = paths[0]
        raise TraceError(f"{p}: an Nsight Systems report cannot be read directly; "
                         + EXPORT_HINT.format(stem=p.with_suffix("").name, name=p.name))
    if kind == "timeline":
        if len(paths) > 1:
            raise TraceError("analyze takes one timeline.json at a time")
        tl = Timeline.read_json(paths[0])
        k, n = rows_from_timeline(tl)
        return kind, ImportResult(tl, k, n, [])
    if kind == "nsys":
        from schedsim.trace.nsys import import_nsys

        return kind, import_nsys(list(paths), ops=ops)
    from schedsim.trace.kineto import import_kineto

    try:
        return kind, import_kineto(list(paths), ops=ops)
    except TraceError as e:
        # a CPU-only profile (gloo ranks) has no kernels to import; its record_function ranges still
        # carry the schedule's ops, which is what the pipeline view needs
        if "no GPU events" not in str(e):
            raise
        tl = kineto_ranges_timeline(list(paths))
        if not tl.spans:
            raise
        k, n = rows_from_timeline(tl)
        return kind, ImportResult(tl, k, n, [f"no GPU events in the trace: timed the {len(tl.spans)} "
                                             "record_function ranges of the last schedsim iteration instead"])


def analysis_dict(res: ImportResult) -> dict[str, Any]:
    """Everything ``analyze`` prints, as a JSON-able dict (``--format json``)."""
    tl = res.timeline
    m = Metrics.of(tl).to_dict()
    kt: dict[str, list[dict[str, Any]]] = {}
    busy_share: dict[str, float | None] = {}
    for device, rows in res.kernel_rows.items():
        k = _kernel_groups(rows)
        w = k.window
        busy_share[device] = k.busy / w if w > 0 else None
        kt[device] = [{"name": k.names[g], "share": (t / w if w > 0 else None), "total_us": t, "count": c,
                       "min_us": lo, "max_us": hi, "avg_us": av}
                      for g, t, c, lo, hi, av in zip(k.ranked.tolist(), *(a[k.ranked].tolist() for a in (
                          k.total, k.count, k.low, k.high, k.avg)), strict=True)]
    nv: dict[str, dict[str, int]] = {}
    for device, nrows in res.nccl_rows.items():
        for name, n in nrows:
            nv.setdefault(device, {})
            nv[device][name] = nv[device].get(name, 0) + n
    return {"schedule": tl.schedule, "source": tl.source, "world_size": tl.world_size, "spans": len(tl),
            "kernel_share": kt, "kernel_busy_share": busy_share, "nccl_volume_elements": nv, "metrics": m,
            "pipeline_bubble": pipeline_bubbles(tl), "warnings": res.warnings}


def _fmt_t(s: float) -> str:
    from schedsim.report.summary import fmt_time

    return fmt_time(s)


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


#: The characters a name that :data:`PIPELINE_NAME_PATTERNS` match can start with.
_PIPELINE_FIRST = frozenset("FBIWPf" "b")


def tag_pipeline(tl: Timeline) -> int:
    """Give pipeline tags (``pp_op``, ``stage``, ``mb``, ``phase``) to spans whose names carry a pipeline
    action (:data:`PIPELINE_NAME_PATTERNS`); returns how many spans were tagged. Spans that already
    have the tags are kept as they are. The executor's B ops are split into phases by their
    ``.I.`` / ``.W.`` part, as the pipeline block names them.
    """
    import numpy as np

    c = tl.columns
    _v, tagged = c.tag_column("pp_op")
    # only names that can start a pattern can match (the first characters of PIPELINE_NAME_PATTERNS): on the
    # columns, no Span row is built for a timeline with none (a million "mm{i}" / "ar{i}" ops)
    names = c.name
    if not any(names[i][:1] in _PIPELINE_FIRST for i in np.flatnonzero(tagged < 0).tolist()):
        return 0
    count: dict[tuple[int, str], int] = {}
    n = 0
    spans = list(tl.spans)
    for i, s in enumerate(spans):
        if s.tags and "pp_op" in s.tags:
            continue
        for pat in PIPELINE_NAME_PATTERNS:
            mt = pat.match(s.name)
            if mt is None:
                continue
            g = mt.groupdict()
            op = {"Forward": "F", "Backward": "B", "forward": "F", "backward": "B"}.get(g["op"], g["op"])
            stage = int(g["stage"]) if g.get("stage") is not None else s.rank
            if g.get("mb") is not None:
                mb = int(g["mb"])
            else:
                mb = count.get((s.rank, op), 0)
                count[(s.rank, op)] = mb + 1
            phase = "I" if ".I." in s.name else "W" if ".W." in s.name else op
            tags = {**(s.tags or {}), "pp_op": op, "stage": stage, "mb": mb, "phase": phase}
            spans[i] = s._replace(tags=tags, resource="compute")
            n += 1
            break
    if n:  # through the setter: columns built earlier (a version-2 timeline.json) would otherwise go stale
        tl.spans = spans
    return n


def pipeline_bubbles(tl: Timeline, metrics: Metrics | None = None) -> dict[int, float] | None:
    """Bubble ratio per rank of a pipeline-tagged timeline: compute idle / makespan (``docs/metrics.md``), from
    ``metrics`` (:class:`Metrics` of ``tl``, computed when not given), the idle-fraction convention of
    :mod:`schedsim.sim.pipeline_metrics`, which also counts compute outside F/B/I/W (optimizer step,
    embedding) as busy; so ``analyze`` of a predicted timeline prints the bubble ``predict`` does. Ranks
    without pipeline actions (a ``pp_op`` tag of F, B, I or W, read from the tag column) are left out; None
    without tags."""
    import numpy as np

    ov, oc = tl.columns.tag_column("pp_op")
    act = np.array([v in ("F", "B", "I", "W") for v in ov] + [False], bool)[oc]  # code -1: no tag
    pp_ranks = np.unique(tl.columns.rank[act]).tolist()
    if not pp_ranks:
        return None
    m = metrics or Metrics.of(tl)
    mk = m.makespan_s
    return {r: (m.ranks[r].compute_idle_s(mk) / mk if mk > 0 else 0.0) for r in pp_ranks}


def kineto_ranges_timeline(paths: list[Path]) -> Timeline:
    """A timeline of the ``user_annotation`` ranges (``record_function``) of Kineto traces, one per rank.

    Keeps the ranges that name a pipeline action (:data:`PIPELINE_NAME_PATTERNS`) or a send/recv, inside
    the last ``schedsim_iter*`` range of each file when there is one (the executor's ``--profiler``
    wraps each profiled iteration in one). The rank is ``distributedInfo.rank``, else the file's
    position. Times are the trace's ``ts`` (µs; ranks of one host share the clock) shifted so the
    earliest kept range starts at 0. Ranges are tagged by :func:`tag_pipeline`, sends and recvs with
    the message they carry (:func:`_p2p_msg`, so the trace draws send -> recv flows), and the critical
    path is the last-finishing chain (:func:`schedsim.trace.common.last_finishing_chain`).

    Raises
    ------
    TraceError
        A file that is not readable JSON (read with the guards of
        :class:`~schedsim.trace.jsonstream.TraceEventStream`), or a range whose ``ts``/``dur`` is not a time
        (:func:`~schedsim.trace.validate.check_event_times`).
    """
    from schedsim.sim.timeline import Span
    from schedsim.trace.jsonstream import TraceEventStream
    from schedsim.trace.validate import check_event_times

    raw: list[tuple[int, str, float, float]] = []
    for fi, p in enumerate(paths):
        stream = TraceEventStream(p)
        evs = []
        for e in stream:
            if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") == "user_annotation":
                check_event_times(p, stream.n_events, e, None)
                if isinstance(e.get("ts"), (int, float)):
                    evs.append(e)
        hdr = stream.header
        dist = hdr["distributedInfo"] if isinstance(hdr.get("distributedInfo"), dict) else {}
        rank = int(dist["rank"]) if isinstance(dist.get("rank"), int) else fi
        iters = [e for e in evs if str(e.get("name", "")).startswith("schedsim_iter")]
        lo, hi = -math.inf, math.inf
        if iters:
            last = max(iters, key=lambda e: e["ts"])
            lo, hi = last["ts"], last["ts"] + float(last.get("dur", 0))
        for e in evs:
            name = str(e.get("name", ""))
            keep = any(p.match(name) for p in PIPELINE_NAME_PATTERNS) or re.match(r"^(send|recv)", name)
            if keep and lo <= e["ts"] <= hi:
                raw.append((rank, name, float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    t0 = min((a for _r, _n, a, _b in raw), default=0.0)
    spans = []
    for rank, name, a, b in sorted(raw, key=lambda x: (x[0], x[2])):
        comm = name.startswith(("send", "recv"))
        kind = ("send" if name.startswith("send") else "recv") if comm else "compute"
        msg = _p2p_msg(name)
        spans.append(Span(f"{name}@r{rank}", name, rank, "comm" if comm else "compute", kind,
                          "comm" if comm else "compute", (a - t0) * 1e-6, (b - t0) * 1e-6,
                          tags={"msg": msg} if msg else None))
    ranks = sorted({s.rank for s in spans})
    tl = Timeline(Path(paths[0]).name.split(".")[0] if paths else "kineto", "import", len(ranks) or 1, spans=spans,
                  meta={"ranges": "record_function (user_annotation)"})
    tag_pipeline(tl)
    from schedsim.trace.common import last_finishing_chain

    tl.critical_path = last_finishing_chain(tl.spans)
    return tl


_P2P_NAME = re.compile(r"^(?P<dir>send|recv)(?P<op>[FB])(?P<stage>\d+)\.(?P<mb>\d+)$")


def _p2p_msg(name: str) -> str | None:
    """The message a pipeline send/recv range carries, as the pipeline block tags it (``msg``: the
    producing action and stage, then the microbatch): ``sendF2.5`` sends ``F2.5``; ``recvF3.5``
    receives ``F2.5`` (activations come from the stage before) and ``recvB1.5`` receives ``B2.5``
    (gradients come from the stage after). None for other names."""
    m = _P2P_NAME.match(name)
    if m is None:
        return None
    st = int(m["stage"])
    if m["dir"] == "recv":
        st += -1 if m["op"] == "F" else 1
    return f"{m['op']}{st}.{m['mb']}"


def _kept_devices(devs: list[str], full: bool) -> tuple[list[str], list[str]]:
    """``(devs, the devices whose tables are printed)``: all when ``full`` or at most 4, else the first and
    last 2."""
    return devs, (devs if full or len(devs) <= 4 else devs[:2] + devs[-2:])


def _cap_devices(lines_of: dict[str, list[str]], full: bool, top: int, has_total: bool = True) -> list[str]:
    """Per-device tables: all when ``full``, else the first ``top`` rows of the first and last 2 devices."""
    devs, keep = _kept_devices(list(lines_of), full)
    out: list[str] = []
    for d in keep:
        ls = lines_of[d]
        cut = len(ls) - 1 if has_total and len(ls) >= 2 else len(ls)
        head, rows, tail = ls[:1], ls[1:cut], ls[cut:]
        if not full and len(rows) > top:
            out += head + rows[:top] + [f"  ... {len(rows) - top} more rows (--full)"] + tail
        else:
            out += ls
    if len(keep) < len(devs):
        out.append(f"... {len(devs) - len(keep)} more devices (--full)")
    return out


def format_report(res: ImportResult, max_cp: int = 10, full: bool = False, top: int = 10) -> str:
    """The text ``schedsim analyze`` prints: kernel-share and NCCL-volume tables, then overlap/idle per rank
    and the critical path. Control characters in names are escaped (:func:`schedsim.errors.printable`).

    Unless ``full``, each of the two tables keeps its ``top`` largest rows for the first and last two devices,
    and the per-rank table the 3 worst and 3 best ranks (:func:`schedsim.report.summary.pick_ranks`).
    """
    from schedsim.report.summary import pick_ranks

    tl = res.timeline
    m = Metrics.of(tl)
    out = [(f"# {tl.schedule}: {len(tl)} spans on {len(m.ranks)} rank(s), "
            f"makespan {_fmt_t(m.makespan_s)}"), "",
           "## kernel time share (share of the device's first-kernel-start to last-kernel-end window, min/max/avg "
           "in us, name; last line: busy share, any kernel running)"]
    kdevs, kept = _kept_devices(list(res.kernel_rows), full)
    out += kernel_share_table({d: res.kernel_rows[d] for d in kept}, limit=None if full else top)
    if len(kept) < len(kdevs):
        out.append(f"... {len(kdevs) - len(kept)} more devices (--full)")
    out += ["", "## NCCL volume per collective, elements"]
    devs = list(res.kernel_rows) + [d for d in res.nccl_rows if d not in res.kernel_rows]
    nv = {d: nccl_volume_table({d: res.nccl_rows.get(d, [])}, devices=[d]) for d in devs}
    out += _cap_devices(nv, full, top, has_total=False)
    out += ["", "## per rank: busy time, idle time, comm/compute overlap (HTA: overlapped / total comm)"]
    out.append(f"{'rank':>4} {'makespan':>12} {'compute':>12} {'comm':>12} {'copy':>12} {'idle':>12} "
               f"{'exposed comm':>13} {'overlap':>8}")
    rows, left = pick_ranks(list(m.ranks), {r: d.idle_s + d.exposed_comm_s for r, d in m.ranks.items()},
                            full, tie={r: d.exposed_comm_s for r, d in m.ranks.items()})
    for r in rows:
        d = m.ranks[r]
        out.append(f"{r:>4} {_fmt_t(m.makespan_s):>12} {_fmt_t(d.busy_compute_s):>12} "
                   f"{_fmt_t(d.busy_comm_s):>12} {_fmt_t(d.busy_copy_s):>12} {_fmt_t(d.idle_s):>12} "
                   f"{_fmt_t(d.exposed_comm_s):>13} {d.overlap_ratio:>8.3f}")
    if left:
        out.append(f"... {left} more ranks (worst 3 and best 3 by idle + exposed comm shown; --full prints all)")
    out.append(f"all  overlap ratio {m.overlap_ratio:.3f}, exposed comm {_fmt_t(m.exposed_comm_s)}"
               + ("" if m.copy_overlap_ratio is None else f", copy overlap {m.copy_overlap_ratio:.3f}"))
    bub = pipeline_bubbles(tl, m)
    if bub:
        out += ["", "## pipeline bubble per rank (idle fraction of the makespan: no compute op running)"]
        brows, bleft = pick_ranks(list(bub), bub, full)
        out += [f"{r:>4} {bub[r]:.4f}" for r in brows]
        if bleft:
            out.append(f"... {bleft} more ranks (--full)")
        out.append(f"all  {sum(bub.values()) / len(bub):.4f}")
    cp = m.critical_path
    walk = tl.meta.get("critical_path_walk") if isinstance(tl.meta, dict) else None
    out += ["", "## critical path" + (f" (walked back along the {walk})" if walk else
                                      " (last-finishing chain on one rank; cross-rank waits not followed)"
                                      if tl.source == "import" else "")]
    if cp:
        from schedsim.report.summary import critical_path_parts

        shown = cp if len(cp) <= max_cp else cp[: max_cp // 2] + ["..."] + cp[-max_cp // 2:]
        out.append(f"{len(cp)} ops: {critical_path_parts(m, _fmt_t)}")
        out.append(" -> ".join(shown))
    else:
        out.append("(none)")
    for w in res.warnings:
        out.append(f"warning: {w}")
    from schedsim.errors import printable

    return "\n".join(printable(line) for line in out)  # kernel, range and op names come from the trace


def to_json(res: ImportResult) -> str:
    """:func:`analysis_dict` as indented JSON text."""
    return json.dumps(analysis_dict(res), indent=1, default=str)
