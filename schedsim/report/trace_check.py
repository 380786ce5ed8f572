"""A strict checker of the Chrome trace-event JSON that schedsim writes (slices, metadata, flows, counters).

Perfetto's own trace processor cannot be used offline: the ``perfetto`` PyPI package (0.59.1)
downloads ``trace_processor_shell`` from commondatastorage at run time. This
checks the rules its JSON importer and the Trace Event Format spec
(docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAqJo) impose:

* the file is ``{"traceEvents": [...]}`` (or a bare list); every event has a known ``ph``;
  ``pid``/``tid`` are ints; ``ts`` and ``dur`` are finite numbers ≥ 0 (µs);
* ``M`` metadata: ``process_name``/``thread_name`` with a string ``args.name``,
  ``process_sort_index``/``thread_sort_index`` with an int ``args.sort_index``; every process and
  thread that holds a slice is named, and no pid (or pid/tid) gets two different names (two
  processes sharing a pid, which Perfetto would merge into one track);
* ``X`` slices on one thread nest (no partial overlap; Perfetto drops the rest);
* flows ``s``/``t``/``f``: each (``cat``, ``name``, ``id``), the key Perfetto's importer matches v1 flow
  events by, has one ``s`` and one ``f``, ``s.ts ≤ f.ts``, and
  each flow event binds to a slice on its thread (``s``, ``t`` and ``f`` with ``bp: "e"``: a slice
  enclosing ``ts``; ``f`` without ``bp``: a slice starting at or after ``ts``);
* ``C`` counters: ``name``, a non-empty ``args`` of finite numbers, the same arg keys on every
  sample of one (pid, name, id) track.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from schedsim.errors import TraceError

__all__ = ["check_trace", "check_trace_file", "TraceFormatError"]

_PH = set("XBEiIsftCMbenPOND")
_META = {"process_name": ("name", str), "thread_name": ("name", str), "process_sort_index": ("sort_index", int),
         "thread_sort_index": ("sort_index", int), "process_labels": ("labels", str)}
_EPS = 1e-3  # µs: the writer rounds to 0.1 ns


class TraceFormatError(TraceError):
    """A trace breaks the trace-event format; the message lists the first problems."""


def _int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_trace(trace: Any, *, require_flows: bool = False, require_counters: bool = False) -> dict[str, int]:
    """Validate a trace dict; return counts {slices, flows, counters, metadata}.

    Raises
    ------
    TraceFormatError
        Listing up to 20 problems, each naming the event index and the rule broken.
    """
    evs = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(evs, list):
        raise TraceFormatError("trace has no traceEvents list")
    c = _Checker()
    for i, e in enumerate(evs):
        if len(c.errs) >= 20:
            break
        c.event(i, e)
    c.check_nesting()
    c.check_flows()
    if require_flows and not c.n["flows"]:
        c.errs.append("no flow events")
    if require_counters and not c.n["counters"]:
        c.errs.append("no counter events")
    if c.errs:
        raise TraceFormatError("invalid trace:\n  " + "\n  ".join(c.errs[:20]))
    return c.n


class _Checker:
    """What :func:`check_trace` gathers event by event (slices per thread, names, flows, counter series), then
    checks as a whole; ``errs`` lists the problems found."""

    def __init__(self) -> None:
        self.errs: list[str] = []
        self.slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
        self.named_p: dict[int, str] = {}
        self.named_t: dict[tuple[int, int], str] = {}
        self.flows: dict[Any, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        self.ckeys: dict[tuple[int, str, Any], set[str]] = {}
        self.n = {"slices": 0, "flows": 0, "counters": 0, "metadata": 0}

    def event(self, i: int, e: Any) -> None:
        """Check one event and record what the whole-trace checks need."""
        if not isinstance(e, dict):
            self.errs.append(f"event {i}: not an object")
            return
        ph = e.get("ph")
        if ph not in _PH:
            self.errs.append(f"event {i}: unknown ph {ph!r}")
        elif not _int(e.get("pid")):
            self.errs.append(f"event {i} ({ph}): pid must be an int, got {e.get('pid')!r}")
        elif ph == "M":
            self.metadata(i, e)
        elif not _num(e.get("ts")) or e["ts"] < 0:
            self.errs.append(f"event {i} ({ph}): ts must be a finite number >= 0, got {e.get('ts')!r}")
        elif ph == "C":
            self.counter(i, e)
        elif not _int(e.get("tid")):
            self.errs.append(f"event {i} ({ph}): tid must be an int")
        elif ph == "X":
            self.slice(i, e)
        elif ph in "stf":
            if "id" not in e:
                self.errs.append(f"event {i}: flow event without id")
                return
            # Perfetto keys a v1 flow by (id, cat, name) (FlowTracker::GetFlowIdForV1Event)
            self.flows[(e.get("cat"), e.get("name"), e["id"])][ph].append({**e, "_i": i})

    def metadata(self, i: int, e: dict[str, Any]) -> None:
        self.n["metadata"] += 1
        spec = _META.get(e.get("name"))  # type: ignore[arg-type]
        args = e.get("args")
        if spec is None or not isinstance(args, dict) or not isinstance(args.get(spec[0]), spec[1]):
            self.errs.append(f"event {i}: bad metadata {e.get('name')!r} args {args!r}")
            return
        if e["name"] == "process_name":
            if self.named_p.setdefault(e["pid"], args["name"]) != args["name"]:
                self.errs.append(f"event {i}: pid {e['pid']} named {args['name']!r} but already "
                                 f"{self.named_p[e['pid']]!r} (two processes share a pid)")
        elif e["name"] == "thread_name":
            if not _int(e.get("tid")):
                self.errs.append(f"event {i}: thread_name without an int tid")
                return
            k = (e["pid"], e["tid"])
            if self.named_t.setdefault(k, args["name"]) != args["name"]:
                self.errs.append(f"event {i}: pid {k[0]} tid {k[1]} named {args['name']!r} but already "
                                 f"{self.named_t[k]!r} (two threads share a tid)")

    def counter(self, i: int, e: dict[str, Any]) -> None:
        self.n["counters"] += 1
        args = e.get("args")
        if not isinstance(e.get("name"), str) or not isinstance(args, dict) or not args \
                or not all(_num(v) for v in args.values()):
            self.errs.append(f"event {i}: counter needs a name and numeric args, got {args!r}")
            return
        key = (e["pid"], e["name"], e.get("id"))  # a counter track is (process, name, id)
        ks = set(args)
        if self.ckeys.setdefault(key, ks) != ks:
            self.errs.append(f"event {i}: counter {e['name']!r} on pid {e['pid']} changes its series {ks} "
                             f"(was {self.ckeys[key]})")

    def slice(self, i: int, e: dict[str, Any]) -> None:
        self.n["slices"] += 1
        if not _num(e.get("dur")) or e["dur"] < 0:
            self.errs.append(f"event {i}: X needs dur >= 0, got {e.get('dur')!r}")
        elif not isinstance(e.get("name"), str):
            self.errs.append(f"event {i}: X needs a string name")
        else:
            self.slices[(e["pid"], e["tid"])].append((float(e["ts"]), float(e["ts"]) + float(e["dur"])))

    def check_nesting(self) -> None:
        """Every thread with slices is named, and its slices nest (sorts each thread's slices by start)."""
        for key, lst in self.slices.items():
            if len(self.errs) >= 20:
                break
            if key[0] not in self.named_p:
                self.errs.append(f"pid {key[0]}: slices but no process_name")
            if key not in self.named_t:
                self.errs.append(f"pid {key[0]} tid {key[1]}: slices but no thread_name")
            lst.sort(key=lambda ab: (ab[0], -ab[1]))
            stack: list[float] = []
            for a, b in lst:
                while stack and stack[-1] <= a + _EPS:
                    stack.pop()
                if stack and b > stack[-1] + _EPS:
                    self.errs.append(f"pid {key[0]} tid {key[1]}: slice [{a}, {b}] overlaps the end of its "
                                     f"enclosing slice at {stack[-1]} (slices on one thread must nest)")
                    break
                stack.append(b)

    def check_flows(self) -> None:
        """One ``s`` and one ``f`` per flow, in time order, each flow event bound to a slice of its thread."""
        starts = {k: [a for a, _b in v] for k, v in self.slices.items()}
        # running max of the ends of the slices sorted by start: a slice encloses ts iff one starting at or
        # before ts ends at or after it, however many slices (children of a long parent) start in between
        reach: dict[tuple[int, int], list[float]] = {}
        for k, v in self.slices.items():
            acc, m = [], -math.inf
            for _a, b in v:
                m = max(m, b)
                acc.append(m)
            reach[k] = acc
        for (cat, fname, fid), d in self.flows.items():
            cat = f"{cat}:{fname}" if fname != cat else cat
            if len(self.errs) >= 20:
                break
            self.n["flows"] += 1
            if len(d.get("s", [])) != 1 or len(d.get("f", [])) != 1:
                self.errs.append(f"flow {cat}/{fid}: needs one 's' and one 'f', has {len(d.get('s', []))} and "
                                 f"{len(d.get('f', []))}")
                continue
            s, f = d["s"][0], d["f"][0]
            if s["ts"] > f["ts"] + _EPS:
                self.errs.append(f"flow {cat}/{fid}: starts at {s['ts']} after it ends at {f['ts']}")
            for e in [s, *d.get("t", []), f]:
                k = (e["pid"], e["tid"])
                if not _binds(e, starts.get(k, []), reach.get(k, [])):
                    self.errs.append(f"flow {cat}/{fid}: event {e['_i']} ({e['ph']}) at ts {e['ts']} binds to no "
                                     f"slice on pid {k[0]} tid {k[1]}")


def _binds(e: dict[str, Any], st: list[float], rc: list[float]) -> bool:
    """Whether a flow event binds to a slice of its thread (slice starts ``st``, running max of ends ``rc``):
    ``f`` without ``bp`` to one starting at or after ``ts``, the others to one enclosing ``ts``."""
    ts = e["ts"]
    if e["ph"] == "f" and e.get("bp") != "e":
        return bisect.bisect_left(st, ts - _EPS) < len(st)
    j = bisect.bisect_right(st, ts + _EPS)
    return j > 0 and rc[j - 1] >= ts - _EPS


def check_trace_file(path: str | Path, **kw: Any) -> dict[str, int]:
    """:func:`check_trace` of a JSON file (``.json`` or ``.json.gz``)."""
    import gzip

    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        raise TraceFormatError(f"{p}: not readable JSON: {e}") from None
    try:
        return check_trace(data, **kw)
    except TraceFormatError as e:
        raise TraceFormatError(f"{p}: {e}") from None
