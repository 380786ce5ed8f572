"""The Timeline: what ran where and when. One format for predict, execute and import.

Stored column-wise so a million-op timeline stays cheap. JSON layout
(``format: schedsim.timeline``, ``version: 1``)::

    {"format": "schedsim.timeline", "version": 1,
     "schedule": "allgather_mm8", "source": "predict" | "execute" | "import",
     "profile": "h200" | null, "world_size": 2, "launch": "eager",
     "makespan_s": 0.0755, "meta": {...},
     "ops": [{"id": "mm0@r0", "name": "mm0", "rank": 0, "stream": "s0",
              "kind": "matmul", "resource": "compute",
              "start_s": ..., "end_s": ..., "solo_s": ..., "ready_s": ..., "stream_s": ...,
              "bytes": ..., "flops": ..., "tags": {...}}, ...],
     "critical_path": ["ag0@r0", "mm0@r0", ...],
     "metrics": {...}}

Times are seconds from the start of the iteration (the earliest op start is 0
for measured timelines). ``solo_s`` is the op's uncontended duration
(predicted) and ``ready_s`` when its dependencies were met (null when unknown).
Where both are known, ``breakdown`` says where the op's time went: ``wait_s``
(ready until start: waiting for the peers of a rendezvous), ``work_s`` (the
solo duration) and ``contention_s`` (the extra time from sharing the GPU or a
link with concurrent ops). ``stream_s`` (predicted by the ``waves`` model, else
absent) is when the op's stream reached it: its dependencies done and the host at
the start of the op's call, which is when a CUDA event recorded just before the
call fires (what ``schedsim execute`` measures as an op's start).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from schedsim.errors import TraceError

__all__ = ["Timeline", "Span", "atomic_writer", "atomic_write_text", "atomic_write_bytes", "output_set"]


class Span(NamedTuple):
    """One op's interval on one rank and stream. Times in seconds.

    A NamedTuple: cheap to create by the million, immutable, positional or by keyword.
    """

    id: str
    name: str
    rank: int
    stream: str
    kind: str
    resource: str
    start_s: float
    end_s: float
    solo_s: float | None = None
    ready_s: float | None = None
    bytes: float = 0.0
    flops: float = 0.0
    tags: dict[str, Any] = {}  # noqa: RUF012 - never mutated in place
    stream_s: float | None = None  # when the stream reached the op (an event recorded before its call fires)

    @property
    def duration_s(self) -> float:
        """end_s − start_s, in seconds."""
        return self.end_s - self.start_s


@dataclass
class Timeline:
    """Per-op start/end on each rank × stream, plus the critical path and metadata."""

    schedule: str
    source: str
    world_size: int
    launch: str = "eager"
    profile: str | None = None
    spans: list[Span] = field(default_factory=list)
    critical_path: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        """Latest end minus earliest start, in seconds (0 for an empty timeline)."""
        if not self.spans:
            return 0.0
        return max(s.end_s for s in self.spans) - min(0.0, min(s.start_s for s in self.spans))

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans)

    def __len__(self) -> int:
        return len(self.spans)

    def by_id(self) -> dict[str, Span]:
        """Spans keyed by op id (``name@rN``)."""
        return {s.id: s for s in self.spans}

    def lanes(self) -> list[tuple[int, str]]:
        """(rank, stream) pairs in rank order, streams in order of first use."""
        seen: dict[tuple[int, str], float] = {}
        for s in self.spans:
            key = (s.rank, s.stream)
            if key not in seen:
                seen[key] = len(seen)
        return sorted(seen, key=lambda k: (k[0], seen[k]))

    # -- JSON ---------------------------------------------------------------
    def _head(self) -> dict[str, Any]:
        return {"format": "schedsim.timeline", "version": 1, "schedule": self.schedule, "source": self.source,
                "profile": self.profile, "world_size": self.world_size, "launch": self.launch,
                "makespan_s": self.makespan_s, "meta": self.meta}

    def to_dict(self, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON document of the module docstring as a dict (small timelines; :meth:`write_json` streams)."""
        return {**self._head(), "ops": [_span_dict(s) for s in self.spans], "critical_path": self.critical_path,
                "metrics": metrics or {}}

    def write_json(self, path: str | Path, metrics: dict[str, Any] | None = None) -> None:
        """Write the timeline JSON atomically, one op at a time (a million-span timeline is never held as
        one string), in the layout of :meth:`to_dict`."""
        with atomic_writer(path) as f:
            f.write(json.dumps(self._head(), indent=1, default=str)[:-2])
            f.write(',\n "ops": [')
            for i, s in enumerate(self.spans):
                f.write(",\n  " if i else "\n  ")
                f.write(json.dumps(_span_dict(s), default=str))
            f.write("\n ],\n \"critical_path\": ")
            f.write(json.dumps(self.critical_path))
            f.write(",\n \"metrics\": ")
            f.write(json.dumps(metrics or {}, default=str))
            f.write("\n}\n")

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "<timeline>") -> Timeline:
        """Build a Timeline from its JSON dict.

        Raises
        ------
        TraceError
            If the dict is not a schedsim timeline or a span lacks a field.
        """
        if not isinstance(d, dict) or d.get("format") != "schedsim.timeline":
            raise TraceError(f"{where}: not a schedsim timeline (no \"format\": \"schedsim.timeline\")\n"
                             "  fix: pass a timeline.json written by schedsim predict, execute or import")
        try:
            spans = [
                Span(id=o["id"], name=o["name"], rank=int(o["rank"]), stream=str(o["stream"]), kind=o["kind"],
                     resource=o.get("resource", "compute"), start_s=float(o["start_s"]), end_s=float(o["end_s"]),
                     solo_s=o.get("solo_s"), ready_s=o.get("ready_s"), bytes=float(o.get("bytes") or 0.0),
                     flops=float(o.get("flops") or 0.0), tags=o.get("tags") or {}, stream_s=o.get("stream_s"))
                for o in d.get("ops", [])
            ]
        except (KeyError, TypeError, ValueError) as e:
            raise TraceError(f"{where}: malformed op entry ({e.__class__.__name__}: {e})") from None
        return cls(schedule=d.get("schedule", "?"), source=d.get("source", "?"), world_size=int(d.get("world_size", 1)),
                   launch=d.get("launch", "eager"), profile=d.get("profile"), spans=spans,
                   critical_path=list(d.get("critical_path", [])), meta=d.get("meta", {}))

    @classmethod
    def read_json(cls, path: str | Path) -> Timeline:
        """Read a timeline JSON file.

        Raises
        ------
        TraceError
            Missing, truncated or malformed file.
        """
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise TraceError(f"{p}: no such file") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceError(f"{p}: not valid JSON ({e}); the file may be truncated\n"
                             "  fix: re-run the command that wrote it") from None
        return cls.from_dict(d, where=str(p))


def _span_dict(s: Span) -> dict[str, Any]:
    d = {"id": s.id, "name": s.name, "rank": s.rank, "stream": s.stream, "kind": s.kind, "resource": s.resource,
         "start_s": s.start_s, "end_s": s.end_s, "solo_s": s.solo_s, "ready_s": s.ready_s, "bytes": s.bytes,
         "flops": s.flops, "tags": s.tags}
    if s.stream_s is not None:
        d["stream_s"] = s.stream_s
    if s.solo_s is not None and s.ready_s is not None:
        d["breakdown"] = {"wait_s": s.start_s - s.ready_s, "work_s": s.solo_s,
                          "contention_s": (s.end_s - s.start_s) - s.solo_s}
    return d


@contextmanager
def atomic_writer(path: str | Path, mode: str = "w") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success give it the umask's mode and rename it into place.

    A reader never sees a half-written file; on any exception (Ctrl-C included) the temporary file is
    removed and ``path`` keeps what it had.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the mode a plain open() would
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    A reader never sees a half-written file, and an interrupted write leaves
    the old file (or none) in place.
    """
    with atomic_writer(path, "wb") as f:
        f.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def output_set(outdir: str | Path) -> Iterator[Path]:
    """Write a set of output files all or nothing.

    Yields a staging folder inside ``outdir``; when the block finishes, every file in it is
    moved into ``outdir`` (``os.replace``, atomic per file). If the block raises, or the user
    presses Ctrl-C, the staging folder is removed and ``outdir`` keeps what it had.

    Raises
    ------
    OSError
        ``outdir`` cannot be created (e.g. it names an existing file).
    """
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".schedsim-staging-", dir=out))
    try:
        yield stage
        for f in sorted(stage.iterdir()):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
