"""Import Nsight Systems SQLite exports (``nsys export --type sqlite``) as a Timeline.

Tables read (the schema of NVIDIA Nsight Systems' SQLite exporter, "Exporter Overview" in its user guide):

* ``CUPTI_ACTIVITY_KIND_KERNEL``: start/end (ns), deviceId, streamId,
  correlationId, globalPid, shortName/demangledName (→ ``StringIds``);
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``: copies (resource ``copy``);
* ``NVTX_EVENTS``: push/pop (eventType 59) and start/end (60) ranges, text
  from ``text`` or ``textId`` → ``StringIds`` (``COALESCE(text, value)``);
* ``CUPTI_ACTIVITY_KIND_RUNTIME``: joins a range to the kernels launched
  inside it through ``correlationId`` (a range's kernels are those whose launch call falls inside it).

Columns are looked up by name with ``PRAGMA table_info``, so exports of other
nsys versions (which add or drop columns such as ``greenContextId``) load as
long as the columns used here exist; a missing required column is reported by
table and name. Rows are read through cursors; only the kernels themselves are
held in memory.

The tables read must be plain tables (a view or virtual table is refused when the file is opened: a
view can compute rows without end), their needed columns are checked before any row is read, names are
cut to :data:`MAX_NAME_CHARS`, and at most :func:`~schedsim.trace.validate.max_trace_events` activities or
ranges are kept. An activity that ends before it starts is an error naming its table and rowid. The
kernels of one CUDA graph launch share the launch's ``correlationId``; all of them belong to the NVTX
ranges around the launch.

Process and device: PID = ``globalPid / 0x1000000 % 0x1000000``. Each distinct
(device, process) pair becomes one rank, in device order; several files (one
per rank, e.g. one per MPI rank) are placed on one time base through
``TARGET_INFO_SESSION_START_TIME.utcEpochNs``.
"""

from __future__ import annotations

import ast
import functools
import math
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedsim.errors import TraceError, printable
from schedsim.io import check_input
from schedsim.trace.common import (
    Activity,
    ImportResult,
    OpRange,
    ReplayInput,
    RuntimeRow,
    build_timeline,
    check_clocks_of_import,
    is_nccl_kernel,
    match_op,
    short_kernel_name,
)
from schedsim.trace.validate import (
    MAX_DUR_US,
    check_processes_distinct,
    check_time_bases,
    max_trace_events,
    too_many_events,
)

__all__ = ["EXPORT_HINT", "import_nsys", "nvtx_events", "nvtx_sizes_nelems"]

EXPORT_HINT = ("export it to SQLite first:\n"
               "  nsys export --type sqlite --output {stem}.sqlite {name}\n"
               "then run: schedsim import nsys {stem}.sqlite --out DIR")

#: CUPTI_ACTIVITY_MEMCPY_KIND values.
_COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
              8: "DtoD", 9: "HtoH", 10: "PtoP"}
NVTX_PUSHPOP = 59
_MAX_DUR_NS = MAX_DUR_US * 1000
_REEXPORT = "export the report again with `nsys export --type sqlite` (a copy cut short or damaged does not read)"
NVTX_STARTEND = 60
#: Longest name or range text read (characters; SQL ``substr``): a CUTLASS kernel's demangled name runs to a
#: few thousand, an ``emit_nvtx`` range with the shapes of many inputs to some tens of thousands.
MAX_NAME_CHARS = 32_768
#: The tables this reader reads; each must be a plain table with rowids (no view, virtual table or
#: WITHOUT ROWID table: a view can compute without end, and nsys writes none).
READ_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds", "TARGET_INFO_SESSION_START_TIME",
               "PROCESSES")


def _open(path: Path) -> sqlite3.Connection:
    suffix = "".join(path.suffixes[-1:]).lower()
    if suffix in (".nsys-rep", ".qdrep"):
        raise TraceError(f"{path}: this is an Nsight Systems report, not its SQLite export; "
                         + EXPORT_HINT.format(stem=path.with_suffix("").name, name=path.name))
    check_input(path, "nsys")  # a regular file within the size cap: never a FIFO or device
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    if head != b"SQLite format 3\x00":
        hint = ""
        if head[:4] in (b"QDST", b"NSYS") or b"nsys" in head.lower():
            hint = "; " + EXPORT_HINT.format(stem=path.with_suffix("").name, name=path.name)
        raise TraceError(f"{path}: not an SQLite database (expected an `nsys export --type sqlite` file){hint}")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:  # a corrupt schema's message may not be UTF-8
        raise TraceError(f"{path}: unreadable SQLite file ({printable(e, 200)}); it may be truncated",
                         fix=_REEXPORT) from None
    conn.text_factory = _text  # names that are not UTF-8 read with U+FFFD instead of failing the import
    return conn


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class _Db:
    """Thin helper: table/column discovery and error wrapping."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self._cols: dict[str, list[str]] = {}
        self.tables: set[str] = set()
        for name, typ, odd in self.q(
                "SELECT name, type, upper(substr(sql, 1, 40)) LIKE 'CREATE VIRTUAL%' OR instr(upper(sql), "
                "'WITHOUT ROWID') > 0 FROM sqlite_master WHERE type IN ('table', 'view')"):
            if name not in READ_TABLES:
                continue
            if typ != "table" or odd:
                what = "a view" if typ != "table" else "a virtual or WITHOUT ROWID table"
                raise TraceError(f"{path}: {name} is {what}, not a table as `nsys export --type sqlite` writes it; "
                                 "reading it could compute without end",
                                 fix="pass the SQLite file nsys exported, unedited")
            self.tables.add(name)

    def q(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, args)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            raise TraceError(f"{self.path}: SQLite error ({printable(e, 200)}) in: {sql[:120]}; the file may be "
                             "truncated or corrupt", fix=_REEXPORT) from None

    def rows(self, sql: str, args: tuple[Any, ...] = ()):
        cur = self.q(sql, args)
        try:
            while True:
                batch = cur.fetchmany(10_000)
                if not batch:
                    return
                yield from batch
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            raise TraceError(f"{self.path}: SQLite error while reading ({printable(e, 200)}); the file may be "
                             "truncated or corrupt", fix=_REEXPORT) from None

    def cols(self, table: str) -> list[str]:
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.q(f"PRAGMA table_info([{table}])")]
        return self._cols[table]

    def need(self, table: str, cols: list[str], why: str) -> None:
        have = self.cols(table)
        missing = [c for c in cols if c not in have]
        if missing:
            raise TraceError(f"{self.path}: table {table} lacks column(s) {', '.join(missing)} needed for {why} "
                             f"(it has: {printable(', '.join(have), 300)}); this nsys export schema is not "
                             "supported",
                             fix="export the report with `nsys export --type sqlite` of nsys 2021 or later")

    def col_or_null(self, table: str, col: str, alias: str | None = None) -> str:
        return f"{col}" if col in self.cols(table) else f"NULL AS {alias or col}"

    def strings(self, sub_sql: str) -> dict[int, str]:
        if "StringIds" not in self.tables:
            raise TraceError(f"{self.path}: table StringIds is missing (names are stored there); "
                             "re-export with `nsys export --type sqlite`")
        return {int(i): v for i, v in self.rows(f"SELECT id, substr(value, 1, {MAX_NAME_CHARS}) FROM StringIds "
                                                  f"WHERE id IN ({sub_sql})")}

    def scalar(self, sql: str) -> Any:
        row = self.q(sql).fetchone()
        return row[0] if row else None


def _pid(global_id: int | None) -> int:
    return (int(global_id) // 0x1000000) % 0x1000000 if global_id is not None else 0


def import_nsys(
    paths: str | Path | list[str | Path],
    *,
    ops: dict[str, dict[str, Any]] | None = None,
    iteration: int = -1,
    schedule: str | None = None,
    keep_kernel_rows: bool = True,
    keep_runtime: bool = False,
) -> ImportResult:
    """Read one or more Nsight Systems SQLite exports into one Timeline.

    Parameters
    ----------
    paths : path or list of paths
        ``.sqlite`` files from ``nsys export --type sqlite``. Several files
        (one per process or node) are merged on the common time base of
        ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``; ranks are numbered
        across files in order.
    ops : dict, optional
        Schedule op names (:func:`schedsim.trace.common.load_op_names`).
        NVTX ranges named like an op, or like an op id ``name@rN`` (always
        recognised), become op spans covering the kernels launched inside them.
    iteration : int
        Which occurrence of repeated op ranges to keep (``-1``: the last).
    schedule : str, optional
        Timeline ``schedule`` field (default: the first file's stem).
    keep_kernel_rows : bool
        Also collect the kernel-share and NCCL-volume table rows (``analyze`` needs them; an
        import does not, and skipping them saves memory on big traces).
    keep_runtime : bool
        Also return the activities for a replay schedule (``ImportResult.replay``) with the
        ``CUPTI_ACTIVITY_KIND_RUNTIME`` calls that launched them (joined by correlationId), which give the launch
        order and times. Event record/wait and synchronisation calls are not read: cross-stream waits are
        guessed from timing (:mod:`schedsim.trace.to_schedule`).

    Returns
    -------
    ImportResult
        Timeline (times in s from the earliest GPU activity), per-kernel
        rows (µs) and NCCL volume rows; ``replay`` with ``keep_runtime``.

    Raises
    ------
    TraceError
        For an ``.nsys-rep`` (with the export command), a non-SQLite,
        truncated or corrupt file, or an export lacking GPU activity tables or
        a needed column.
    """
    files = [Path(p) for p in (paths if isinstance(paths, list) else [paths])]
    if not files:
        raise TraceError("no trace file given")
    acts: list[Activity] = []
    op_ranges: list[OpRange] = []
    kernel_rows: dict[str, list[tuple[str, str, float, float]]] = {}
    nccl_rows: dict[str, list[tuple[str, int]]] = {}
    warnings: list[str] = []
    rank_info: dict[int, dict[str, Any]] = {}
    bases: list[int] = []
    conns = []
    corr: list[Any] = []
    runtime: list[RuntimeRow] = []
    for p in files:
        db = _Db(_open(p), p)
        base = 0
        if "TARGET_INFO_SESSION_START_TIME" in db.tables and "utcEpochNs" in db.cols("TARGET_INFO_SESSION_START_TIME"):
            base = _epoch_ns(db, db.scalar("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME"))
        elif len(files) > 1:
            warnings.append(f"{p}: no TARGET_INFO_SESSION_START_TIME; its times are not aligned with the other files")
        bases.append(base)
        conns.append(db)
    try:
        check_time_bases(files, bases, [f"TARGET_INFO_SESSION_START_TIME.utcEpochNs {b}" if b else
                                        "without TARGET_INFO_SESSION_START_TIME" for b in bases],
                         "export every rank's report with one nsys version (`nsys export --type sqlite`), each with "
                         "its TARGET_INFO_SESSION_START_TIME, or import each file on its own")
    except TraceError:
        for db in conns:
            db.conn.close()
        raise
    base0 = min(bases)
    for fi, (db, base) in enumerate(zip(conns, bases, strict=False)):
        try:
            got = _read_one(db, base - base0, len(rank_info), ops, multi=len(files) > 1,
                            keep_kernel_rows=keep_kernel_rows, keep_runtime=keep_runtime)
            offset = len(acts)  # the file's activity indices, in its op ranges, follow the earlier files'
            acts += got.acts
            corr += [None if c is None else (fi, *c) for c in got.corr] if keep_runtime else []
            runtime += [r._replace(corr=(fi, *r.corr)) for r in got.runtime]
            op_ranges += [r._replace(members=[m + offset for m in r.members]) for r in got.op_ranges]
            for rows, new in ((kernel_rows, got.kernel_rows), (nccl_rows, got.nccl_rows)):
                for label, lst in new.items():
                    rows.setdefault(label, []).extend(lst)  # type: ignore[arg-type]
            rank_info.update(got.rank_info)
            warnings += got.warnings
        except (TypeError, ValueError, OverflowError, KeyError, IndexError) as e:
            # SQLite columns are untyped: a start/end/deviceId holding text reaches the reader's arithmetic
            raise TraceError(f"{db.path}: a table holds a value of the wrong type ({e.__class__.__name__}: "
                             f"{str(e)[:160]}); nsys exports integers for start, end, deviceId, streamId and "
                             "globalPid", fix="re-export the report with `nsys export --type sqlite`; the file "
                             "is corrupt or was edited") from None
        finally:
            db.conn.close()
    check_processes_distinct(rank_info, {str(p): b for p, b in zip(files, bases, strict=True)})
    if not acts:
        raise TraceError(f"{files[0]}: no kernels, memcpys or memsets in the capture; "
                         "was nsys run with `-t cuda`?")
    meta: dict[str, Any] = {"trace_format": "nsys-sqlite", "files": [str(p) for p in files], "ranks": rank_info,
                            "kernel_count": sum(1 for a in acts if a.cat == "kernel"),
                            "memcpy_count": sum(1 for a in acts if a.cat == "memcpy"),
                            "memset_count": sum(1 for a in acts if a.cat == "memset"),
                            "warnings": warnings}
    if not keep_runtime:  # with it, the replay schedule checks it after the collectives' sizes and order
        check_clocks_of_import(acts, rank_info)
    replay = (ReplayInput(list(acts), corr, runtime, [], max(1, len(rank_info)), "nsys", [])
              if keep_runtime else None)
    tl = build_timeline(acts, op_ranges, schedule=schedule or files[0].stem, world_size=max(1, len(rank_info)),
                        meta=meta, ops=ops, iteration=iteration, span_ids=None if replay is None else replay.span_ids)
    return ImportResult(tl, kernel_rows, nccl_rows, warnings, replay)


def _epoch_ns(db: _Db, raw: Any) -> int:
    """``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` as integer ns (0 when NULL).

    Raises
    ------
    TraceError
        A value that is not a finite number of ns.
    """
    if raw is None:
        return 0
    if isinstance(raw, int) or (isinstance(raw, float) and math.isfinite(raw)):
        return int(raw)
    raise TraceError(f"{db.path}: TARGET_INFO_SESSION_START_TIME.utcEpochNs is '{printable(raw, 40)}', not a "
                     "time in ns", fix="re-export the report with `nsys export --type sqlite`; the file is corrupt "
                     "or was edited")


@dataclass
class _FileRead:
    """What one SQLite export adds to an import; ``op_ranges`` index ``acts`` (this file's list)."""

    acts: list[Activity] = field(default_factory=list)
    op_ranges: list[OpRange] = field(default_factory=list)
    corr: list[Any] = field(default_factory=list)  # keep_runtime: (pid, correlationId) of each activity, or None
    runtime: list[RuntimeRow] = field(default_factory=list)  # keep_runtime: the runtime calls that launched them
    kernel_rows: dict[str, list[tuple[str, str, float, float]]] = field(default_factory=dict)
    nccl_rows: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    rank_info: dict[int, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Ranks:
    """One file's ranks: (device, pid) → rank, pid → device (kernels first), device → table label."""

    rank_of: dict[tuple[int, int], int]
    pid_to_device: dict[int, int]
    label_of: dict[int, str]
    info: dict[int, dict[str, Any]]


@dataclass
class _Kernels:
    """The kernel pass's indexes: pid → correlationId → activity index, the rows of analyze's kernel table
    (device, stream, seq, name, start, end), and activity index → table row for kernels named "Kernel"."""

    by_corr: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    table: list[tuple[int, int, int, str, int, int]] = field(default_factory=list)
    generic: dict[int, int] = field(default_factory=dict)
    more: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    graph_kernels: int = 0

    def index(self, pid: int, corr: int, idx: int) -> None:
        """Note that activity ``idx`` was launched by call ``corr`` of process ``pid``. The kernels of one CUDA
        graph launch (``cudaGraphLaunch``) share its correlationId, so a call may launch several: the first is
        in ``by_corr``, the others in ``more``."""
        have = self.by_corr[pid].setdefault(corr, idx)
        if have != idx:
            self.more.setdefault((pid, corr), []).append(idx)

    def launched(self, pid: int, corr: int) -> list[int]:
        """The activities call ``corr`` of process ``pid`` launched (none, one, or a graph's kernels)."""
        a = self.by_corr.get(pid, {}).get(corr)
        if a is None:
            return []
        return [a, *self.more.get((pid, corr), ())]


@dataclass
class _NvtxLinks:
    """What the NVTX sweep found (:func:`_link_nvtx`).

    ``region0``: activity index → the text of the outermost-registered push/pop range around the launch of
    a kernel named "Kernel" (its name in analyze's table); ``nvtx_kernel``: (device, text, thread label,
    registration no.) of push/pop ``nccl*`` ranges that launched kernels; ``op_ranges``: ranges named after
    schedule ops; ``tags``: activity index → NCCL metadata of the range to add to that kernel's tags.
    """

    region0: dict[int, str] = field(default_factory=dict)
    nvtx_kernel: list[tuple[int, str, str, int]] = field(default_factory=list)
    op_ranges: list[OpRange] = field(default_factory=list)
    tags: dict[int, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_K, _MC, _MS = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"


def _read_one(db: _Db, shift: int, rank0: int, ops: dict[str, dict[str, Any]] | None, multi: bool,
              keep_kernel_rows: bool = True, keep_runtime: bool = False) -> _FileRead:
    """Read one export: its ranks (numbered from ``rank0``), activities (times + ``shift`` ns), op ranges and
    analyze's table rows."""
    present = [t for t in (_K, _MC, _MS) if t in db.tables]
    if not present:
        raise TraceError(f"{db.path}: none of the tables {_K}, {_MC}, {_MS} exist, so the capture has no GPU "
                         "activity\n  fix: profile with `nsys profile -t cuda,nvtx ...` and export with "
                         "`nsys export --type sqlite`")
    _check_shapes(db, present)
    out = _FileRead()
    ranks = _ranks(db, present, rank0, multi)
    out.rank_info = ranks.info
    cap = max_trace_events()
    kern = _read_kernels(db, ranks, shift, out.acts, keep_kernel_rows, cap)
    _read_copies(db, ranks, shift, out.acts, kern, cap)
    if kern.graph_kernels:
        for info in out.rank_info.values():
            info["graph_kernels"] = kern.graph_kernels
    if keep_runtime:
        _launch_calls(db, shift, out, kern)
    links = _NvtxLinks()
    if "NVTX_EVENTS" in db.tables:
        links = _link_nvtx(db, shift, out.acts, kern, ranks.pid_to_device, ops, cap)
    for a, extra in links.tags.items():
        out.acts[a] = out.acts[a]._replace(tags={**(out.acts[a].tags or {}), **extra})
    out.op_ranges, out.warnings = links.op_ranges, links.warnings
    _table_rows(out, kern, links, ranks.label_of)
    return out


#: Host synchronisations a replay schedule orders launches by (:mod:`schedsim.trace.to_schedule`).
_HOST_SYNC = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"})


def _launch_calls(db: _Db, shift: int, out: _FileRead, kern: _Kernels) -> None:
    """For a replay schedule: each activity's (pid, correlationId) and the runtime calls that launched them
    (start + ``shift`` ns, duration, name without its ``_v3020`` suffix), on the rank of their activity, and the
    host synchronisations of the processes that launched them. Nothing without the runtime table."""
    out.corr = [None] * len(out.acts)
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in db.tables or not {"start", "end", "globalTid", "correlationId"} <= set(
            db.cols("CUPTI_ACTIVITY_KIND_RUNTIME")):
        return
    rank_of_pid: dict[int, int] = {}
    for pid, by in kern.by_corr.items():
        for c in by:
            for i in kern.launched(pid, c):
                out.corr[i] = (pid, c)
                rank_of_pid.setdefault(pid, out.acts[i].rank)
    name = ("(SELECT value FROM StringIds WHERE id = nameId)" if "StringIds" in db.tables
            and "nameId" in db.cols("CUPTI_ACTIVITY_KIND_RUNTIME") else "NULL")
    for t0, t1, gtid, corr, nm in db.rows(f"SELECT start, end, globalTid, correlationId, {name} FROM "
                                          "[CUPTI_ACTIVITY_KIND_RUNTIME]"):
        if t0 is None or corr is None:
            continue
        key = (_pid(gtid), int(corr))
        got = kern.launched(*key)
        name = re.sub(r"_v\d+$", "", str(nm or "cudaLaunchKernel"))  # cudaDeviceSynchronize_v3020
        if got:
            out.runtime.append(RuntimeRow(out.acts[got[0]].rank, name, float(t0 + shift), float((t1 or t0) - t0),
                                          key, gtid))
        elif name in _HOST_SYNC and key[0] in rank_of_pid:
            out.runtime.append(RuntimeRow(rank_of_pid[key[0]], name, float(t0 + shift), float((t1 or t0) - t0), key,
                                          gtid))


def _check_shapes(db: _Db, present: list[str]) -> None:
    """Refuse, before reading any row, a table this reader reads that lacks a column it needs (the views were
    refused when the file was opened, :class:`_Db`)."""
    for t in present:
        db.need(t, ["start", "end", "deviceId", "streamId"], "GPU activities")
    if "NVTX_EVENTS" in db.tables:
        db.need("NVTX_EVENTS", ["start", "end", "eventType"], "NVTX ranges")
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in db.tables:
            db.need("CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "globalTid", "correlationId"],
                    "linking NVTX ranges to kernels")
    if "StringIds" in db.tables:
        db.need("StringIds", ["id", "value"], "kernel and range names")


def _ranks(db: _Db, present: list[str], rank0: int, multi: bool) -> _Ranks:
    """Distinct (device, pid) pairs of the activity tables, one rank each in (device, pid) order."""
    pairs: set[tuple[int, int]] = set()
    from schedsim.io import work_limit as limit

    max_ranks = limit("SCHEDSIM_MAX_RANKS")
    for t in present:
        gp = "globalPid" if "globalPid" in db.cols(t) else "NULL"
        for dev, g in db.rows(f"SELECT DISTINCT deviceId, {gp} FROM [{t}]"):
            pairs.add((int(dev if dev is not None else 0), _pid(g)))
            if len(pairs) > max_ranks:
                raise TraceError(f"{db.path}: more than {max_ranks:,} (device, process) pairs in {t}, each a rank, "
                                 "past the limit of ranks", fix="the file is corrupt or was edited; if you mean it, "
                                 "raise the environment variable SCHEDSIM_MAX_RANKS")
    pnames: dict[int, str] = {}
    if "PROCESSES" in db.tables and {"pid", "name"} <= set(db.cols("PROCESSES")):
        pids = {p for _d, p in pairs}
        pnames = {int(pid): name for pid, name in db.rows(f"SELECT pid, substr(name, 1, {MAX_NAME_CHARS}) FROM "
                                                          "PROCESSES") if pid in pids}
    kernel_devs: set[tuple[int, int]] = set()
    if _K in db.tables:
        gp = "globalPid" if "globalPid" in db.cols(_K) else "NULL"
        kernel_devs = {(_pid(g), int(d)) for d, g in db.rows(f"SELECT DISTINCT deviceId, {gp} FROM [{_K}]")}
    pid_to_device: dict[int, int] = {}
    for pid, dev in sorted(kernel_devs, key=lambda x: (x[1], x[0])):
        pid_to_device.setdefault(pid, dev)
    rank_of: dict[tuple[int, int], int] = {}
    info: dict[int, dict[str, Any]] = {}
    for dev, pid in sorted(pairs):
        r = rank0 + len(rank_of)
        rank_of[(dev, pid)] = r
        info[r] = {"device": dev, "pid": pid, "process": pnames.get(pid), "file": str(db.path)}
        pid_to_device.setdefault(pid, dev)
    label_of = {dev: (f"Device {dev}" if not multi else f"{db.path.stem} Device {dev}") for dev, _p in pairs}
    return _Ranks(rank_of, pid_to_device, label_of, info)


def _kernel_name_columns(db: _Db) -> tuple[str, str, dict[int, str]]:
    """(short name column, full name column, StringIds map when names are ids) of the kernel table."""
    cols = db.cols(_K)
    name_col = next((c for c in ("shortName", "demangledName", "mangledName", "name") if c in cols), None)
    if name_col is None:
        raise TraceError(f"{db.path}: table {_K} has no kernel name column (shortName, demangledName or mangledName)")
    full_col = "demangledName" if "demangledName" in cols else name_col
    kind = db.q(f"SELECT typeof({name_col}) FROM [{_K}] WHERE {name_col} IS NOT NULL LIMIT 1").fetchone()
    strings: dict[int, str] = {}
    if kind and kind[0] == "integer":
        strings = db.strings(f"SELECT {name_col} FROM [{_K}] UNION SELECT {full_col} FROM [{_K}]")
    return _bounded(name_col), _bounded(full_col), strings


def _bounded(col: str) -> str:
    """SQL for column ``col`` with a text value cut to :data:`MAX_NAME_CHARS` (ids and numbers kept as they are)."""
    return f"CASE WHEN typeof({col}) = 'text' THEN substr({col}, 1, {MAX_NAME_CHARS}) ELSE {col} END"


def _bad_span(db: _Db, table: str, rowid: int, name: str, start: int, end: int) -> TraceError:
    """The error for an activity that ends before it starts (it would give a negative span and makespan) or
    lasts longer than :data:`~schedsim.trace.validate.MAX_DUR_US` (no profiled GPU activity runs 11.6 days)."""
    what = (f"ends at {end} ns, before it starts at {start} ns" if end < start else
            f"lasts {end - start:,} ns ({start} to {end}), longer than any profiled GPU activity")
    return TraceError(f"{db.path}: {table} row {rowid} ('{printable(name, 80)}') {what}",
                      fix="the export is corrupt or was edited; re-export the report with `nsys export --type "
                          f"sqlite`, or delete that row (SELECT * FROM {table} WHERE rowid = {rowid})")


def _read_kernels(db: _Db, ranks: _Ranks, shift: int, acts: list[Activity], keep_rows: bool,
                  cap: int) -> _Kernels:
    """Append the kernels to ``acts``; NCCL kernels carry their full (demangled) name in ``tags.kernel``.

    Raises
    ------
    TraceError
        A kernel that ends before it starts, or more than ``cap`` activities.
    """
    out = _Kernels()
    if _K not in db.tables:
        return out
    name_col, full_col, strings = _kernel_name_columns(db)
    short = "shortName" in db.cols(_K)
    sel = (f"SELECT rowid, start, end, deviceId, streamId, {db.col_or_null(_K, 'correlationId')}, "
           f"{db.col_or_null(_K, 'globalPid')}, {name_col}, {full_col}, {db.col_or_null(_K, 'graphNodeId')} "
           f"FROM [{_K}]")
    full_names: dict[str, str] = {}
    streams: dict[Any, str] = {}
    for seq, (rowid, start, end, dev, stream, corr, gpid, nid, fid, gnode) in enumerate(db.rows(sel)):
        if start is None or end is None:
            continue
        raw = strings.get(nid, nid) if isinstance(nid, int) else nid
        name = str(raw) if raw is not None else "?"
        if not short:
            name = short_kernel_name(name)
        if not 0 <= end - start <= _MAX_DUR_NS:
            raise _bad_span(db, _K, rowid, name, start, end)
        if len(acts) >= cap:
            raise too_many_events(db.path, "GPU activities (kernels, memcpys, memsets)", cap)
        if gnode is not None:
            out.graph_kernels += 1
        if name not in full_names:
            full = strings.get(fid, fid) if isinstance(fid, int) else fid
            full_names[name] = str(full) if full is not None else name
        dev = int(dev if dev is not None else 0)
        pid = _pid(gpid)
        idx = len(acts)
        tags = {"kernel": full_names[name]} if is_nccl_kernel(name) else None
        st = streams.get(stream)
        if st is None:
            st = streams[stream] = str(stream)
        acts.append(Activity(ranks.rank_of[(dev, pid)], dev, st, name, "kernel", float(start + shift),
                             float(end + shift), 0.0, tags))
        if corr is not None:
            out.index(pid, int(corr), idx)
        if keep_rows:
            if name == "Kernel":
                out.generic[idx] = len(out.table)
            out.table.append((dev, int(stream), seq, name, int(start), int(end)))
    return out


def _read_copies(db: _Db, ranks: _Ranks, shift: int, acts: list[Activity], kern: _Kernels, cap: int) -> None:
    """Append the memcpy and memset activities to ``acts`` and index them by correlationId.

    Raises
    ------
    TraceError
        A copy that ends before it starts, or more than ``cap`` activities.
    """
    for t, cat in ((_MC, "memcpy"), (_MS, "memset")):
        if t not in db.tables:
            continue
        kind_col = db.col_or_null(t, "copyKind") if cat == "memcpy" else "NULL"
        sel = (f"SELECT rowid, start, end, deviceId, streamId, {db.col_or_null(t, 'correlationId')}, "
               f"{db.col_or_null(t, 'globalPid')}, {db.col_or_null(t, 'bytes')}, {kind_col} FROM [{t}]")
        for rowid, start, end, dev, stream, corr, gpid, nbytes, ck in db.rows(sel):
            if start is None or end is None:
                continue
            dev = int(dev if dev is not None else 0)
            pid = _pid(gpid)
            name = f"Memcpy {_COPY_KIND.get(ck, 'Unknown')}" if cat == "memcpy" else "Memset"
            if not 0 <= end - start <= _MAX_DUR_NS:
                raise _bad_span(db, t, rowid, name, start, end)
            if len(acts) >= cap:
                raise too_many_events(db.path, "GPU activities (kernels, memcpys, memsets)", cap)
            if corr is not None:
                kern.index(pid, int(corr), len(acts))
            acts.append(Activity(ranks.rank_of[(dev, pid)], dev, str(stream), name, cat, float(start + shift),
                                 float(end + shift), float(nbytes or 0)))


def _table_rows(out: _FileRead, kern: _Kernels, links: _NvtxLinks, label_of: dict[int, str]) -> None:
    """Rows of analyze's kernel-share table (per device label, in (label, stream, order) order; a kernel named
    "Kernel" takes its NVTX region's first field as name) and NCCL-volume table (``nccl*`` ranges' sizes)."""
    table = kern.table
    order = sorted(range(len(table)), key=lambda i: (label_of[table[i][0]], f"Stream {table[i][1]}", table[i][2]))
    gk_inv = {v: k for k, v in kern.generic.items()}
    for i in order:
        dev, stream, _seq, name, start, end = table[i]
        if name == "Kernel" and i in gk_inv and gk_inv[i] in links.region0:
            name = links.region0[gk_inv[i]].split(",")[0]
        out.kernel_rows.setdefault(label_of[dev], []).append((name, f"Stream {stream}", start / 1000.0,
                                                              (end - start) / 1000.0))
    for dev, text, _tid, _reg in sorted(links.nvtx_kernel, key=lambda x: (label_of.get(x[0], f"Device {x[0]}"),
                                                                          x[2], x[3])):
        lbl = label_of.get(dev, f"Device {dev}")
        out.kernel_rows.setdefault(lbl, [])
        if text.startswith("nccl"):
            n = nvtx_sizes_nelems(text)
            if n is not None:
                out.nccl_rows.setdefault(lbl, []).append((text.split(",")[0], n))


#: One NVTX range: (start ns, end ns, eventType, text, device, pid, thread id).
_Range = tuple[int, int, int, Any, int, int, int]


def _nvtx_ranges(db: _Db, pid_to_device: dict[int, int], cap: int, warnings: list[str]) -> list[_Range]:
    """Push/pop and start/end ranges of processes that ran GPU work, by start (then row) order; texts cut to
    :data:`MAX_NAME_CHARS`. Ranges that end before they start are skipped, with one warning counting them.

    Raises
    ------
    TraceError
        More than ``cap`` ranges.
    """
    T = "NVTX_EVENTS"
    db.need(T, ["start", "end", "eventType"], "NVTX ranges")
    text, join = _nvtx_text(db)
    tid = "n.globalTid" if "globalTid" in db.cols(T) else "NULL"
    ranges: list[_Range] = []
    backwards = 0
    for start, end, etype, txt, gtid in db.rows(
            f"SELECT n.start, n.end, n.eventType, {text}, {tid} FROM [{T}] n {join} "
            f"WHERE n.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}) AND n.end IS NOT NULL AND n.start IS NOT NULL "
            f"ORDER BY n.start, n.rowid"):
        dev = pid_to_device.get(_pid(gtid))
        if dev is not None:
            if end < start:
                backwards += 1
                continue
            if len(ranges) >= cap:
                raise too_many_events(db.path, "NVTX ranges", cap)
            ranges.append((int(start), int(end), int(etype), txt, dev, _pid(gtid), int(gtid or 0) % 0x1000000))
    if backwards:
        warnings.append(f"{db.path}: {backwards} NVTX range(s) end before they start; skipped")
    return ranges


def _nvtx_text(db: _Db) -> tuple[str, str]:
    """SQL for an NVTX event's text (``COALESCE(text, StringIds.value via textId)``, cut to
    :data:`MAX_NAME_CHARS`) and the join it needs, over ``NVTX_EVENTS n``."""
    cols = db.cols("NVTX_EVENTS")
    text = "n.text" if "text" in cols else "NULL"
    join = ""
    if "textId" in cols and "StringIds" in db.tables:
        text, join = f"COALESCE({text}, s.value)", "LEFT JOIN StringIds s ON n.textId = s.id"
    return f"substr({text}, 1, {MAX_NAME_CHARS})", join


@dataclass
class _Sweep:
    """State of the sweep of runtime calls over NVTX ranges: the ranges open per device, each push/pop
    range's registration number (the order in which calls first saw it open), the activities launched inside
    each range of interest, and per "Kernel" activity its (registration no., range) with the lowest number."""

    active: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    reg: dict[int, int] = field(default_factory=dict)
    members: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    best: dict[int, tuple[int, int]] = field(default_factory=dict)


def _sweep_calls(db: _Db, ranges: list[_Range], kern: _Kernels, pid_to_device: dict[int, int],
                 interesting: list[bool]) -> _Sweep:
    """Walk the runtime calls in time order; a call belongs to a range when range.start < call.start <
    range.end, on the device of the calling process."""
    sw = _Sweep()
    rp, n = 0, len(ranges)
    for t, gtid, corr in db.rows("SELECT start, globalTid, correlationId FROM [CUPTI_ACTIVITY_KIND_RUNTIME] "
                                 "ORDER BY start, rowid"):
        if t is None:
            continue
        while rp < n and ranges[rp][0] < t:
            sw.active[ranges[rp][4]].append(rp)
            rp += 1
        pid = _pid(gtid)
        dev = pid_to_device.get(pid)
        open_ = sw.active.get(dev) if dev is not None else None
        if not open_:
            continue
        if any(ranges[i][1] <= t for i in open_):
            open_[:] = [i for i in open_ if ranges[i][1] > t]
            if not open_:
                continue
        for i in open_:
            if ranges[i][2] == NVTX_PUSHPOP and i not in sw.reg:
                sw.reg[i] = len(sw.reg)
        if corr is not None:
            for a in kern.launched(pid, int(corr)):  # a CUDA graph launch starts all of the graph's kernels
                _note_launch(sw, a, open_, ranges, kern.generic, interesting)
    return sw


def _note_launch(sw: _Sweep, a: int, open_: list[int], ranges: list[_Range], generic_kernel: dict[int, int],
                 interesting: list[bool]) -> None:
    for i in open_:
        if interesting[i]:
            sw.members[i].append(a)
    if a in generic_kernel:
        cands = [(sw.reg[i], i) for i in open_ if ranges[i][2] == NVTX_PUSHPOP]
        if cands:
            c = min(cands)
            if a not in sw.best or c < sw.best[a]:
                sw.best[a] = c


def _link_nvtx(db: _Db, shift: int, acts: list[Activity], kern: _Kernels, pid_to_device: dict[int, int],
               ops: dict[str, dict[str, Any]] | None, cap: int) -> _NvtxLinks:
    """Link NVTX ranges to the activities launched inside them (:class:`_NvtxLinks`).

    A runtime call belongs to a range when range.start < call.start < range.end (ties broken by the rows'
    order), per device (through the calling process); the call's ``correlationId`` names its kernel. A kernel
    called "Kernel" is named after the earliest-registered push/pop range around its launch. A CUDA graph
    launch belongs to the ranges around it with every kernel and copy of the graph (they share its
    correlationId).
    """
    out = _NvtxLinks()
    ranges = _nvtx_ranges(db, pid_to_device, cap, out.warnings)
    if not ranges:
        return out
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in db.tables:
        out.warnings.append(f"{db.path}: no CUPTI_ACTIVITY_KIND_RUNTIME table, so NVTX ranges cannot be linked to "
                            "kernels")
        return out
    db.need("CUPTI_ACTIVITY_KIND_RUNTIME", ["start", "globalTid", "correlationId"], "linking NVTX ranges to kernels")
    interesting = [txt is not None and (str(txt).startswith("nccl") or match_op(txt, ops) is not None)
                   for _s, _e, _t, txt, _d, _p, _tid in ranges]
    sw = _sweep_calls(db, ranges, kern, pid_to_device, interesting)
    for a, (_r, i) in sw.best.items():
        if ranges[i][3] is not None:
            out.region0[a] = str(ranges[i][3])
    for i, mem in sorted(sw.members.items()):
        start, end, etype, txt, dev, _p, thread = ranges[i]
        txt = str(txt)
        in_range = [m for m in mem if acts[m].cat == "kernel"]
        if etype == NVTX_PUSHPOP and in_range and txt.startswith("nccl"):
            out.nvtx_kernel.append((dev, txt, f"NVTX Kernel Thread {thread}", sw.reg.get(i, 0)))
            meta = nvtx_nccl_meta(txt)
            if meta:
                for m in in_range:
                    if is_nccl_kernel(acts[m].name):
                        out.tags[m] = {**out.tags.get(m, {}), **meta}
        name = match_op(txt, ops)
        if name is not None:
            uniq = sorted(set(mem))
            out.op_ranges.append(OpRange(name, acts[uniq[0]].rank, float(start + shift), float(end + shift), uniq,
                                         txt))
    return out


def nvtx_sizes_nelems(text: str) -> int | None:
    """Element count of the ``sizes = ...`` field of an NVTX range text.

    ``torch.autograd.profiler.emit_nvtx(record_shapes=True)`` writes the
    input shapes as ``sizes = [[...], ...], input_op_ids``. The shapes are
    read as nested tuples, so a one-element list collapses to its element,
    and the count is the size of an array of that shape: ``[[1024, 4096]]``
    is 4 194 304 elements and ``[[3], [3]]`` is 9. Ragged shapes, which
    have no such array, count the sum of the tensors' element counts.
    Returns None when the text has no ``sizes``.

    Examples
    --------
    >>> nvtx_sizes_nelems("nccl:all_reduce, seq = 1, sizes = [[1024, 4096]], input_op_ids = [(1, 0)]")
    4194304
    >>> nvtx_sizes_nelems("nccl:send, sizes = [[3], [3]], input_op_ids = []")
    9
    >>> nvtx_sizes_nelems("nccl:all_reduce, sizes = [[]], input_op_ids = []")
    1
    """
    m = _SIZES_RE.match(text)
    if not m:
        return None
    return _sizes_group_nelems(m.group(1))


_SIZES_RE = re.compile(r".*sizes = (.*?), input_op_ids")


@functools.lru_cache(maxsize=4096)
def _sizes_group_nelems(group: str) -> int | None:
    try:
        val = ast.literal_eval(group.replace("[", "(").replace("]", ")"))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return shape_size(val)


def shape_size(val: Any) -> int | None:
    """``np.ones(val).size`` without numpy; the sum of element counts where numpy would fail."""
    if isinstance(val, int):
        return val if val >= 0 else None
    if isinstance(val, (tuple, list)):
        if all(isinstance(v, int) for v in val):
            n = 1
            for v in val:
                n *= v
            return n
        parts = [shape_size(v) for v in val]
        if any(p is None for p in parts):
            return None
        return sum(p for p in parts if p is not None)
    return None


def nvtx_nccl_meta(text: str) -> dict[str, Any]:
    """Collective metadata from an NVTX range text (``nccl:all_reduce, ..., sizes = [[n]]``)."""
    out: dict[str, Any] = {"collective": text.split(",")[0].split(":", 1)[-1]}
    n = nvtx_sizes_nelems(text)
    if n is not None:
        out["in_nelems"] = n
    return out


def nvtx_events(path: str | Path) -> list[tuple[str | None, int, int, int | None]]:
    """Every NVTX event of an nsys SQLite export as ``(text, eventType, start_ns, end_ns)``.

    The text is ``COALESCE(text, StringIds.value via textId)``, cut to :data:`MAX_NAME_CHARS`, so ranges of
    the ``nvtx`` package (registered strings) are named too. Ordered by start.

    Raises
    ------
    TraceError
        Not an SQLite export, no ``NVTX_EVENTS`` table (capture without ``-t nvtx``), or more events than
        :func:`~schedsim.trace.validate.max_trace_events`.
    """
    p = Path(path)
    db = _Db(_open(p), p)
    try:
        if "NVTX_EVENTS" not in db.tables:
            raise TraceError(f"{p}: no NVTX_EVENTS table; profile with `nsys profile -t cuda,nvtx`")
        db.need("NVTX_EVENTS", ["start", "eventType"], "NVTX events")
        text, join = _nvtx_text(db)
        end = "n.end" if "end" in db.cols("NVTX_EVENTS") else "NULL"
        cap = max_trace_events()
        out: list[tuple[str | None, int, int, int | None]] = []
        for s, x, e, t in db.rows(f"SELECT n.start, {end}, n.eventType, {text} FROM NVTX_EVENTS n {join} "
                                  "ORDER BY n.start, n.rowid"):
            if len(out) >= cap:
                raise too_many_events(p, "NVTX events", cap)
            out.append((t, int(e), int(s), None if x is None else int(x)))
        return out
    finally:
        db.conn.close()
