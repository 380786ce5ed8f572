"""Chrome / Perfetto trace JSON of one or more timelines.

One process per rank (``pid``), one thread per stream (``tid``), ``ph: "X"``
complete events with ``ts``/``dur`` in microseconds, and ``M`` metadata events
naming them (Chrome Trace Event Format; Perfetto requires that events on one
track nest, so each stream gets its own track: perfetto.dev/docs/faq).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schedsim.sim.timeline import Timeline, atomic_write_text

__all__ = ["chrome_trace", "write_chrome_trace"]


def chrome_trace(timelines: list[tuple[str, Timeline]]) -> dict[str, Any]:
    """Trace dict for one or more labelled timelines (e.g. ``[("predicted", a), ("measured", b)]``).

    Each (label, rank) becomes a process, each stream a thread.
    """
    events: list[dict[str, Any]] = []
    pid_of: dict[tuple[str, int], int] = {}
    tid_of: dict[tuple[int, str], int] = {}
    multi = len(timelines) > 1
    for label, tl in timelines:
        for s in tl.spans:
            pkey = (label, s.rank)
            if pkey not in pid_of:
                pid = len(pid_of)
                pid_of[pkey] = pid
                name = f"{label} rank {s.rank}" if multi else f"rank {s.rank}"
                events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
                events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
            pid = pid_of[pkey]
            tkey = (pid, s.stream)
            if tkey not in tid_of:
                tid = len(tid_of)
                tid_of[tkey] = tid
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"stream {s.stream}"}})
            args: dict[str, Any] = {"id": s.id, "kind": s.kind}
            if s.bytes:
                args["bytes"] = s.bytes
            if s.flops:
                args["flops"] = s.flops
            if s.solo_s is not None:
                args["solo_us"] = round(s.solo_s * 1e6, 3)
            if s.tags:
                args.update({str(k): v for k, v in s.tags.items()})
            events.append({"ph": "X", "name": s.name, "cat": s.resource, "pid": pid, "tid": tid_of[tkey],
                           "ts": s.start_s * 1e6, "dur": (s.end_s - s.start_s) * 1e6, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "schedsim", "timelines": [lbl for lbl, _ in timelines]}}


def write_chrome_trace(path: str | Path, timelines: list[tuple[str, Timeline]]) -> None:
    """Write :func:`chrome_trace` atomically; open the file in ui.perfetto.dev or chrome://tracing."""
    atomic_write_text(path, json.dumps(chrome_trace(timelines)))
