"""``schedsim analyze``: kernel time shares, NCCL volumes, overlap, idle time and critical path.

Two tables that pipeline studies print from nsys traces of Megatron-LM runs, computed from a trace or a
timeline:

* **kernel time share**: per device, kernels grouped by
  ``{name}_{Stream N}``; share = the group's summed duration divided by
  (last kernel start − first kernel start); then min, max and mean duration
  in µs, sorted by share; the last line is the sum of the shares. Kernels
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
from typing import Any

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
        summed share still counts every row).

    Returns
    -------
    list of str
        A header per device, ``"{share:7.2f} min:{:10.2f} max:{:10.2f} avg:{:10.2f} {name}_{tid}"``
        rows, and the summed share.

    Notes
    -----
    Array passes over the rows: a group of one kernel takes its numbers from the arrays, a larger group sums its
    durations in start order one by one and averages them with :func:`math.fsum`, so the numbers are those of a
    loop over the sorted rows, bit for bit (a million kernels cost a few passes, not a million dict updates).
    """
    lines: list[str] = []
    for device, rows in kernel_rows.items():
        lines.append(_header(device))
        lines += _share_lines(rows, limit)
    return lines


def _share_lines(rows: list[tuple[str, str, float, float]], limit: int | None) -> list[str]:
    """One device's rows of :func:`kernel_share_table`, then its summed share."""
    import functools
    import operator

    import numpy as np

    n = len(rows)
    if not n:
        return [f"{0.0:7.2f}"]
    names, tids, ts_l, dur_l = zip(*rows, strict=True)
    keys: dict[str, int] = {}
    group = np.fromiter((keys.setdefault(f"{a}_{b}", len(keys)) for a, b in zip(names, tids, strict=True)),
                        np.int64, n)
    ts, dur = np.array(ts_l, dtype=float), np.array(dur_l, dtype=float)
    o = np.argsort(ts, kind="stable")
    g_o, d_o = group[o], dur[o]
    uniq, first = np.unique(g_o, return_index=True)
    in_order = uniq[np.argsort(first, kind="stable")]  # the groups in order of first start
    by_group = np.argsort(g_o, kind="stable")  # each group's rows in start order
    d_g = d_o[by_group]
    counts = np.bincount(g_o, minlength=len(keys))
    starts = np.cumsum(counts) - counts
    total = d_g[starts] + 0.0  # 0 + d: a group of one
    low, high, avg = d_g[starts].copy(), d_g[starts].copy(), d_g[starts].copy()
    for g in np.flatnonzero(counts > 1).tolist():
        d = d_g[starts[g]:starts[g] + counts[g]].tolist()
        total[g], low[g], high[g] = functools.reduce(operator.add, d, 0), min(d), max(d)
        avg[g] = math.fsum(d) / len(d)
    span = max(0.0, float(ts.max())) - float(ts.min())
    ranked = in_order[np.argsort(-total[in_order], kind="stable")]
    share = total[ranked] / span if span > 0 else np.full(len(ranked), math.nan)
    names_of = list(keys)
    shown = ranked if limit is None else ranked[:limit]
    out = [f"{sh:7.2f} min:{lo:10.2f} max:{hi:10.2f} avg:{av:10.2f} {names_of[g]}"
           for sh, lo, hi, av, g in zip(share[:len(shown)].tolist(), low[shown].tolist(), high[shown].tolist(),
                                        avg[shown].tolist(), shown.tolist(), strict=True)]
    if len(shown) < len(ranked):
        out.append(f"  ... {len(ranked) - len(shown)} more rows (--full)")
    out.append(f"{functools.reduce(operator.add, share.tolist(), 0.0):7.2f}")
    return out


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


def detect_format(path: str | Path) -> str:
    """``"nsys"``, ``"nsys-rep"``, ``"timeline"`` or ``"kineto"`` from a file's first bytes.

    Raises
    ------
    TraceError
        Missing or empty file, or content that is none of these.
    """
    p = Path(path)
    if p.suffix.lower() in (".nsys-rep", ".qdrep"):
        return "nsys-rep"
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot read ({e.strerror or e})") from None
    if head.startswith(b"SQLite format 3"):
        return "nsys"
    if not head:
        raise TraceError(f"{p}: empty file")
    from schedsim.trace.jsonstream import open_text

    try:
        with open_text(p) as f:
            text = f.read(4096)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TraceError(f"{p}: neither an nsys SQLite export nor a JSON trace ({e.__class__.__name__}: {e})") from None
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        raise TraceError(f"{p}: neither an nsys SQLite export (.sqlite) nor a JSON trace or timeline")
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
    for device, rows in res.kernel_rows.items():
        groups: dict[str, list[float]] = {}
        ts = [r[2] for r in rows]
        span = (max(ts) - min(ts)) if ts else 0.0
        for name, tid, _ts, dur in rows:
            groups.setdefault(f"{name}_{tid}", []).append(dur)
        kt[device] = sorted(({"name": k, "share": (sum(v) / span if span > 0 else None), "total_us": sum(v),
                              "count": len(v), "min_us": min(v), "max_us": max(v), "avg_us": sum(v) / len(v)}
                             for k, v in groups.items()), key=lambda d: -d["total_us"])
    nv: dict[str, dict[str, int]] = {}
    for device, nrows in res.nccl_rows.items():
        for name, n in nrows:
            nv.setdefault(device, {})
            nv[device][name] = nv[device].get(name, 0) + n
    return {"schedule": tl.schedule, "source": tl.source, "world_size": tl.world_size, "spans": len(tl),
            "kernel_share": kt, "nccl_volume_elements": nv, "metrics": m,
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


def pipeline_bubbles(tl: Timeline) -> dict[int, float] | None:
    """Bubble ratio per rank of a pipeline-tagged timeline: 1 − (time any compute op runs) / makespan,
    the idle-fraction convention of :mod:`schedsim.sim.pipeline_metrics`, which also counts compute
    outside F/B/I/W (optimizer step, embedding) as busy; so ``analyze`` of a predicted timeline
    prints the bubble ``predict`` does. Ranks without pipeline actions are left out; None without tags."""
    import numpy as np

    from schedsim.sim.metrics import length, merge_per_group

    c = tl.columns
    ov, oc = c.tag_column("pp_op")
    act = np.array([v in ("F", "B", "I", "W") for v in ov] + [False], bool)[oc]
    pp_ranks = np.unique(c.rank[act])
    if not len(pp_ranks):
        return None
    rv, rc = c.resource
    sel = np.isin(c.rank, pp_ranks) & (rc == (rv.index("compute") if "compute" in rv else -1))
    g, s, e = merge_per_group(c.rank[sel], c.start_s[sel], c.end_s[sel])
    cuts = np.searchsorted(g, pp_ranks).tolist() + [len(g)]
    mk = tl.makespan_s
    out = {}
    for j, r in enumerate(pp_ranks.tolist()):
        iv = list(zip(s[cuts[j]:cuts[j + 1]].tolist(), e[cuts[j]:cuts[j + 1]].tolist(), strict=True))
        out[r] = 1.0 - length(iv) / mk if mk > 0 else 0.0
    return out


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
        A file that is not readable JSON.
    """
    import gzip

    from schedsim.sim.timeline import Span

    raw: list[tuple[int, str, float, float]] = []
    for fi, p in enumerate(paths):
        try:
            with (gzip.open(p, "rt") if str(p).endswith(".gz") else open(p)) as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as e:
            raise TraceError(f"{p}: not a readable Kineto JSON trace: {e}") from None
        dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
        rank = int(dist["rank"]) if isinstance(dist.get("rank"), int) else fi
        evs = [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"
               and e.get("cat") == "user_annotation" and isinstance(e.get("ts"), (int, float))]
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


def _cap_devices(lines_of: dict[str, list[str]], full: bool, top: int, has_total: bool = True) -> list[str]:
    """Per-device tables: all when ``full``, else the first ``top`` rows of the first and last 2 devices."""
    devs = list(lines_of)
    keep = devs if full or len(devs) <= 4 else devs[:2] + devs[-2:]
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
    and the critical path.

    Unless ``full``, each of the two tables keeps its ``top`` largest rows for the first and last two devices,
    and the per-rank table the 3 worst and 3 best ranks (:func:`schedsim.report.summary.pick_ranks`).
    """
    from schedsim.report.summary import pick_ranks

    tl = res.timeline
    m = Metrics.of(tl)
    out = [(f"# {tl.schedule}: {len(tl)} spans on {len(m.ranks)} rank(s), "
            f"makespan {_fmt_t(m.makespan_s)}"), "",
           "## kernel time share (share of the first-to-last kernel start span, min/max/avg in us, name)"]
    kdevs = list(res.kernel_rows)
    kept = kdevs if full or len(kdevs) <= 4 else kdevs[:2] + kdevs[-2:]  # as _cap_devices keeps them
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
    out.append(f"all  overlap ratio {m.overlap_ratio:.3f}, exposed comm {_fmt_t(m.exposed_comm_s)}")
    bub = pipeline_bubbles(tl)
    if bub:
        out += ["", "## pipeline bubble per rank (idle fraction of the makespan: no compute op running)"]
        brows, bleft = pick_ranks(list(bub), bub, full)
        out += [f"{r:>4} {bub[r]:.4f}" for r in brows]
        if bleft:
            out.append(f"... {bleft} more ranks (--full)")
        out.append(f"all  {sum(bub.values()) / len(bub):.4f}")
    cp = m.critical_path
    out += ["", "## critical path" + (" (last-finishing chain on one rank; cross-rank waits not followed)"
                                      if tl.source == "import" else "")]
    if cp:
        cp_rows = tl.critical_rows()  # the path's rows, by id (no dict of every op)
        cols = tl.columns
        at = dict(zip(cols.ids_at(cp_rows.tolist()), zip(cols.start_s[cp_rows].tolist(),
                                                           cols.end_s[cp_rows].tolist(), strict=True), strict=True))
        busy = sum(at[c][1] - at[c][0] for c in cp if c in at)
        parts = ", ".join(f"{k} {_fmt_t(v)}" for k, v in m.critical_path_s.items())
        shown = cp if len(cp) <= max_cp else cp[: max_cp // 2] + ["..."] + cp[-max_cp // 2:]
        first, last = at.get(cp[0]), at.get(cp[-1])
        length = (last[1] - first[0]) if first and last else busy
        out.append(f"{len(cp)} ops over {_fmt_t(length)}: busy {_fmt_t(busy)} ({parts}), "
                   f"gaps {_fmt_t(max(0.0, length - busy))}")
        out.append(" -> ".join(shown))
    else:
        out.append("(none)")
    for w in res.warnings:
        out.append(f"warning: {w}")
    return "\n".join(out)


def to_json(res: ImportResult) -> str:
    """:func:`analysis_dict` as indented JSON text."""
    return json.dumps(analysis_dict(res), indent=1, default=str)
