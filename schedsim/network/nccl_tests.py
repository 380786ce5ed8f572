"""Parse nccl-tests logs (``all_reduce_perf`` and friends) into busbw tables.

Pure Python: ``schedsim calibrate --from-nccl-tests LOG`` uses it without torch.

The reader is strict. Every data row is read exactly as nccl-tests prints it, or the whole log is refused
(:class:`~schedsim.errors.SchedsimError`, ``FILE:LINE: what`` and a ``fix``): a profile built from a row
read wrongly would give wrong predictions without a word.

**Columns.** The ``# size count type ...`` header line of the log names them (NVIDIA/nccl-tests
``src/util.cu`` ``writeResultHeader``, ``writeBenchmarkLinePreamble``, ``writeBenchmarkLineBody``, v2.19;
before about 2022 ``src/common.cu`` ``print_header``), and every row must have exactly those columns:

* current: ``size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong``, out-of-place
  first, then in-place; ``-C 1`` names the time column ``cputime``; per-iteration timing adds
  ``i_min i_max i_p99 i_cv%`` after each ``#wrong``, and ``-T`` a date and time at the end of the row;
* old: no ``root`` (and for some tests no ``redop``) column, the correctness column ``error``
  (``%5.0le``, e.g. ``0e+00``) or ``res``, and ``bytes`` / ``N`` / ``op`` for size / count / redop;
* the table ``schedsim calibrate`` prints (:func:`format_table`): one half, out-of-place.

A row without a header before it is read as the layout of its number of cells: 13 (current), 9 (current, one
half), 12 (old, no root) or 11 (old, no redop either).

**Cells** (the ``printf`` formats of those functions): size and count ``%12li`` (decimal integers without a
sign, so ``1e6`` or ``-1048576`` is refused, not read as 6 or as 1048576); root ``%6i`` (-1 where none); time,
algbw and busbw ``getFloatStr`` (``%.2f``, ``%.1f`` or ``%.0f``, else ``%.1e`` / ``%.0e``: no sign); ``#wrong``
``%6g`` of a count, or ``N/A``; type and redop the names of ``test_typenames`` / ``test_opnames``.

**Refused besides:** a nonzero ``#wrong`` or ``Out of bounds values``; a zero time; a size twice or out of
order, or rows of several types or ops in one run (``-d all``, ``-o all``, ``-N``); a busbw that is not
algbw × the nccl-tests bus factor of the collective and group size read (:func:`schedsim.network.links.bus_factor`,
within the printed rounding: the log's collective or group size is not the one read); an algbw that is not
size / time within the printed rounding of both (nccl-tests ``GetBw``; not checked for ``-C 1``'s cputime nor
hypercube); a count that is not size / type size exactly (/ ranks too for all_gather, reduce_scatter,
all_to_all, scatter, gather and hypercube, whose count column is per rank in nccl-tests); a run (a ``# nThread``
header or a binary name) without rows; a ``--collective`` or ``--ranks`` that the log contradicts.

**Skipped:** a line that is neither a comment (``#``) nor a row (its first word does not begin with a digit,
sign or point: the command line, ``NCCL INFO`` lines). :attr:`NcclTestsLog.skipped` lists them; the command
warns once per file (:func:`skipped_warning`).

**Glued text.** Logs pasted through a tool that lost the newlines, as in S4 of docs/sources.md, run rows
together on one line: the in-place ``#wrong`` of one row runs into the size of the next (``... 0.00 016 4
float ...`` is ``#wrong = 0`` then size 16), and the units header line into the first row
(``(GB/s)8 2 float``). A line holding several whole rows is read row by row, and a ``#wrong`` cell runs into
the next size only where the split is exact: ``#wrong`` is ``0``, ``N/A`` or ``Xe±DD`` (no printed size
starts with ``0``); anything else there is refused.

Which collective a log holds comes from the binary name in the text (``all_reduce_perf``,
``./build/all_gather_perf`` or ``# Collective test starting: sendrecv_perf``), else the file name, else the
``collective`` argument. The group size comes from the ``# Rank N ...`` device lines, else
``nThread × nGpus`` of the header, else the ``nranks`` argument; the number of nodes from the hosts those lines
name (``... on HOST device ...``); the NCCL release from NCCL's own ``NCCL version 2.27.5+cuda12.8`` line (rank 0
prints it, also inside ``NCCL INFO`` lines; still listed as skipped) or nccl-tests' ``# nccl-tests version ...
nccl-library=23004`` header (``NCCL_VERSION_CODE`` = major · 10000 + minor · 100 + patch), else None. The NCCL
settings that change NCCL's choice or its channels (``NCCL_ALGO``, ``NCCL_PROTO``, ``NCCL_MIN_CTAS``,
``NCCL_MAX_CTAS``, ``NCCL_MIN_NCHANNELS``, ``NCCL_MAX_NCHANNELS``) from any line that sets them (``mpirun -x
NCCL_MIN_CTAS=24``, ``export ...``) or from NCCL's ``NCCL_MIN_CTAS set by environment to 24`` (``NCCL_DEBUG=INFO``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedsim.errors import SchedsimError, printable

__all__ = ["NcclTestsRow", "NcclTestsLog", "parse_nccl_tests", "read_nccl_tests", "format_table",
           "skipped_warning", "COLLECTIVE_OF_BINARY"]

#: nccl-tests type names and their sizes in bytes (``src/common.cu`` ``test_typenames``, current and old).
TYPE_BYTES: dict[str, int] = {
    "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8, "bfloat16": 2,
    "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
#: ``src/common.cu`` ``test_opnames`` (``none`` where a test has no reduction; ``premulsum`` in some versions).
_REDOPS = {"sum", "prod", "max", "min", "avg", "none", "premulsum", "mulsum", "all"}

#: nccl-tests binary → schedsim collective key (the profile's ``collectives.tables`` keys).
COLLECTIVE_OF_BINARY: dict[str, str] = {
    "all_reduce_perf": "all_reduce",
    "all_gather_perf": "all_gather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "all_to_all",
    "broadcast_perf": "broadcast",
    "reduce_perf": "reduce",
    "sendrecv_perf": "sendrecv",
    "scatter_perf": "scatter",
    "gather_perf": "gather",
    "hypercube_perf": "hypercube",
}
_NCCL_VERSION_RE = re.compile(r"\bNCCL version ([0-9]+\.[0-9]+\.[0-9]+)")  # ASCII digits, as NCCL prints
_NCCL_LIBRARY_RE = re.compile(r"\bnccl-library=([0-9]{5,})\b")
#: an NCCL setting of the run: ``NCCL_MIN_CTAS=24`` (``mpirun -x``, ``export``, ``env``) or NCCL's own
#: ``NCCL INFO NCCL_MIN_CTAS set by environment to 24`` (ncclLoadParam, src/misc/param.cc)
_NCCL_ENV_RE = re.compile(r"\b(NCCL_(?:ALGO|PROTO|MIN_CTAS|MAX_CTAS|MIN_NCHANNELS|MAX_NCHANNELS|MIN_NRINGS|"
                          r"MAX_NRINGS))(?:=|\s+set by environment to\s+)([A-Za-z0-9^,;:_-]+)")
#: the legacy names NCCL still reads (``ncclMinNchannels``, src/graph/connect.cc); the new names win
_NCCL_ENV_ALIAS = {"NCCL_MIN_NRINGS": "NCCL_MIN_NCHANNELS", "NCCL_MAX_NRINGS": "NCCL_MAX_NCHANNELS"}
_BIN_RE = re.compile(r"\b(" + "|".join(COLLECTIVE_OF_BINARY) + r")\b")
_CALIBRATE_RE = re.compile(r"#\s*(all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|reduce|sendrecv|scatter|"
                           r"gather)\s+over\s+(\d+)\s+ranks?\b")

# cell formats (see the module docstring)
_INT = re.compile(r"0|[1-9]\d*")
_ROOT = re.compile(r"-1|0|[1-9]\d*")
_FLOAT = re.compile(r"(?:0|[1-9]\d*)(?:\.\d+)?|\d(?:\.\d+)?e[+-]\d{2,3}")
_WRONG = re.compile(r"N/A|0|[1-9]\d*|\d(?:\.\d+)?e[+-]\d{2,3}")
_GLUED = re.compile(r"(N/A|0|\d(?:\.\d+)?e[+-]\d\d)(0|[1-9]\d*)")  # a #wrong run into the next row's size
_DATE, _CLOCK = re.compile(r"\d{4}-\d\d-\d\d"), re.compile(r"\d\d:\d\d:\d\d")
_NUMLIKE = re.compile(r"[-+]?(?:\d|\.\d)")  # a row's first word begins so; any other line is not a row

#: header word → column role
_COLUMNS = {"size": "size", "bytes": "size", "count": "count", "N": "count", "type": "type", "redop": "redop",
            "op": "redop", "root": "root", "time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw",
            "#wrong": "wrong", "error": "error", "res": "error", "i_min": "extra", "i_max": "extra",
            "i_p99": "extra", "i_cv%": "extra", "timestamp": "stamp"}
_CELL = {"size": (_INT, "a byte count (a decimal integer without sign or exponent, nccl-tests %12li)"),
         "count": (_INT, "an element count (a decimal integer without sign or exponent, nccl-tests %12li)"),
         "root": (_ROOT, "a root rank (-1 or a rank, nccl-tests %6i)"),
         "time": (_FLOAT, "a time in us (a number without sign, nccl-tests getFloatStr)"),
         "algbw": (_FLOAT, "a bandwidth in GB/s (a number without sign, nccl-tests getFloatStr)"),
         "busbw": (_FLOAT, "a bandwidth in GB/s (a number without sign, nccl-tests getFloatStr)"),
         "extra": (_FLOAT, "a number without sign (nccl-tests getFloatStr)"),
         "wrong": (_WRONG, "a count of wrong elements or N/A (nccl-tests %6g)"),
         "error": (_WRONG, "an error magnitude such as 0e+00 (nccl-tests %5.0le)")}
_FIX_ROW = ("nccl-tests prints every row in these formats, so this one was changed or corrupted: re-run nccl-tests "
            "or correct the row (the whole log is refused so that no row is read wrongly)")


@dataclass(frozen=True)
class NcclTestsRow:
    """One size of an nccl-tests run.

    Attributes
    ----------
    size_bytes : int
        The size column (bytes): max(send, recv) buffer, the nccl-tests convention.
    count : int
        Elements, as printed.
    dtype : str
        nccl-tests type name (``float``, ``half`` ...).
    redop : str or None
        Reduction op (``sum``) or ``none``; None in old logs without the column.
    root : int or None
        Root rank; -1 where it does not apply; None in old logs.
    oop_time_us, oop_algbw_GBps, oop_busbw_GBps : float
        Out-of-place time (µs) and bandwidths (GB/s, 1e9 B/s).
    oop_wrong : float or None
        Out-of-place ``#wrong`` (None for ``N/A``).
    ip_time_us, ip_algbw_GBps, ip_busbw_GBps, ip_wrong : float or None
        The same for in-place (None if the row has no in-place half).
    line : int
        1-based line of the row in its file (0 when unknown).
    cputime : bool
        The time column is ``-C 1``'s CPU time, which nccl-tests does not compute the bandwidths from.
    """

    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    oop_time_us: float
    oop_algbw_GBps: float
    oop_busbw_GBps: float
    oop_wrong: float | None
    ip_time_us: float | None = None
    ip_algbw_GBps: float | None = None
    ip_busbw_GBps: float | None = None
    ip_wrong: float | None = None
    line: int = field(default=0, compare=False)
    cputime: bool = field(default=False, compare=False)

    @property
    def busbw_GBps(self) -> float:
        """The out-of-place busbw (GB/s), the figure nccl-tests users usually quote."""
        return self.oop_busbw_GBps

    @property
    def time_us(self) -> float:
        """The row's time, µs: the lesser of its out-of-place and in-place times where both are printed. Both
        time the same operation, and the larger carries a row's noise (a stall, a first call):
        NVIDIA/nccl-tests#309's 8 B all_reduce on 16 H100 printed 68.52 µs out of place and 24.70 in place, its
        16 B 24.96 and 24.93."""
        ip = self.ip_time_us
        return float(self.oop_time_us if ip is None or ip <= 0 else min(self.oop_time_us, ip))


@dataclass
class NcclTestsLog:
    """A parsed log: which collective, over how many ranks, and its rows in size order.

    ``skipped`` holds ``(line, text)`` of the lines of this run that were neither comments nor rows.
    """

    collective: str | None
    nranks: int | None
    rows: list[NcclTestsRow] = field(default_factory=list)
    avg_busbw_GBps: float | None = None
    source: str = "<text>"
    skipped: list[tuple[int, str]] = field(default_factory=list)
    nodes: int | None = None  # hosts named in the '# Rank N ... on HOST device' lines; None without them
    nccl_version: str | None = None  # the NCCL release that ran ("2.27.5"; module docstring); None if not printed
    #: NCCL settings the log prints (``NCCL_ALGO``, ``NCCL_PROTO``, ``NCCL_MIN_CTAS``, ``NCCL_MAX_CTAS``,
    #: ``NCCL_MIN_NCHANNELS``, ``NCCL_MAX_NCHANNELS``; the legacy ``NCCL_*_NRINGS`` under the new names): name -> value
    nccl_env: dict[str, str] = field(default_factory=dict)

    def table(self) -> list[tuple[int, float]]:
        """``[[size_bytes, busbw_GBps], ...]`` rows for a profile's ``collectives.tables``.

        The busbw is the row's time's (:attr:`NcclTestsRow.time_us`, the lesser of its two halves, as the tier fit
        takes it, :mod:`schedsim.network.fit`), ``size · bus factor / time`` (nccl-tests ``GetBw``, the formula the
        printed column comes from; :func:`schedsim.network.links.bus_factor`), to 6 significant digits: the time
        is printed to 4 or more, the bandwidth with 2 decimals, which at the small sizes is most of the figure
        (NVIDIA/nccl-tests#309's 512 B all_reduce on 16 ranks: 26.31 µs, busbw 0.0365 GB/s printed as 0.04;
        8 B to 64 B print 0.00), and a stalled half (that log's 256 B: 94.40 µs out of place, 25.90 in place)
        would hold up every larger size under the tables' monotone fit (:class:`schedsim.network.links.LinkTables`).
        Where the time is not the one the bandwidth was computed from (``-C 1``'s CPU time) or the collective has
        no bus factor (hypercube), the printed out-of-place busbw, and rows where it is 0.00 are dropped, since the
        cost model interpolates log(size) against busbw.

        Examples
        --------
        >>> row = NcclTestsRow(256, 64, "float", "sum", -1, 94.40, 0.0, 0.01, 0, 25.90, 0.01, 0.02, 0)
        >>> NcclTestsLog("all_reduce", 16, [row]).table()  # 256 B · 2·15/16 / 25.90 µs
        [(256, 0.0185328)]
        """
        from schedsim.network.links import bus_factor

        try:
            f = bus_factor(self.collective, self.nranks) if self.collective and self.nranks else None
        except KeyError:  # hypercube
            f = None
        out = []
        for r in self.rows:
            bw = (float(f"{r.size_bytes * f / (r.time_us * 1e3):.6g}") if f is not None and not r.cputime
                  else r.busbw_GBps)
            if bw > 0:
                out.append((r.size_bytes, bw))
        return out


def skipped_warning(logs: list[NcclTestsLog]) -> str | None:
    """One warning line for the skipped lines of ``logs`` (one file's runs), or None if none was skipped."""
    skipped = [s for log in logs for s in log.skipped]
    if not skipped:
        return None
    line, text = skipped[0]
    short = text if len(text) <= 60 else text[:57] + "..."
    return (f"{logs[0].source}: skipped {len(skipped)} line(s) that are neither '#' comments nor table rows "
            f"(first: line {line}: {short!r})")


@dataclass(frozen=True)
class _Layout:
    """The columns of a table (roles of :data:`_COLUMNS`), the header words, and where the header was."""

    roles: tuple[str, ...]
    words: tuple[str, ...]
    line: int

    @property
    def halves(self) -> int:
        return self.roles.count("time")


def _default(words: str) -> _Layout:
    w = tuple(words.split())
    return _Layout(tuple(_COLUMNS[x] for x in w), w, 0)


#: Layouts for rows with no header before them, by their number of cells: current (two halves, one half) and
#: old (no root; no redop either).
_DEFAULT = {13: _default("size count type redop root time algbw busbw #wrong time algbw busbw #wrong"),
            9: _default("size count type redop root time algbw busbw #wrong"),
            12: _default("size count type redop time algbw busbw error time algbw busbw error"),
            11: _default("size count type time algbw busbw error time algbw busbw error")}


def _bad(src: str, line: int, what: str, fix: str = _FIX_ROW) -> SchedsimError:
    return SchedsimError(f"{src}:{line}: {what}", fix=fix)


def _layout(words: list[str], src: str, line: int) -> _Layout:
    """The layout named by header words (from ``size``/``bytes`` on). Raises if nccl-tests never printed it."""
    roles = [_COLUMNS[w] for w in words]
    ok = roles[:3] == ["size", "count", "type"]
    i = 3
    for opt in ("redop", "root"):
        if i < len(roles) and roles[i] == opt:
            i += 1
    halves = 0
    while ok and i < len(roles) and roles[i] == "time":
        ok = roles[i:i + 4] in (["time", "algbw", "busbw", "wrong"], ["time", "algbw", "busbw", "error"])
        i += 4
        while i < len(roles) and roles[i] == "extra":
            i += 1
        halves += 1
    if i < len(roles) and roles[i] == "stamp":
        i += 1
    if not ok or halves not in (1, 2) or i != len(roles):
        raise _bad(src, line, f"the column header {' '.join(words)!r} is not one nccl-tests prints",
                   fix="keep the header lines nccl-tests printed ('# size count type redop root time algbw busbw "
                       "#wrong ...'); schedsim reads the rows by their columns")
    return _Layout(tuple(roles), tuple(words), line)


def _header_at(toks: list[str]) -> int | None:
    """Index of a column header (``size count type`` or ``bytes N type``) in a comment line's words."""
    for i in range(len(toks) - 2):
        if toks[i] in ("size", "bytes") and toks[i + 1] in ("count", "N") and toks[i + 2] == "type":
            return i
    return None


def _resolution(tok: str) -> float:
    """Half a unit of the last printed digit of a number cell (``0.01`` → 0.005, ``1.2e+07`` → 5e5)."""
    mant, _, exp = tok.partition("e")
    decimals = len(mant.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + (int(exp) if exp else 0))


@dataclass(frozen=True)
class _Cells:
    """A row's time, algbw and busbw cells as printed (out-of-place first); ``cputime`` where the time column is
    ``-C 1``'s CPU time, which nccl-tests does not compute the bandwidths from."""

    time: list[str]
    algbw: list[str]
    busbw: list[str]
    cputime: bool


def _read_rows(toks: list[str], lay: _Layout, src: str, line: int) -> list[tuple[NcclTestsRow, _Cells]]:
    """The rows of one line's row words (several where rows were glued): each row and its time and bandwidth
    cells."""
    out: list[tuple[NcclTestsRow, _Cells]] = []
    toks = list(toks)
    names = lay.words
    n = len(lay.roles)
    i = 0
    while i < len(toks):
        cells: dict[str, list[str]] = {}
        for c, role in enumerate(lay.roles):
            if i >= len(toks):
                raise _bad(src, line, f"a row ends after {c} of the {n} columns of the table header"
                           + (f" (line {lay.line})" if lay.line else "") + f": {' '.join(names)}")
            tok = toks[i]
            if role == "stamp":
                if i + 1 >= len(toks) or not (_DATE.fullmatch(tok) and _CLOCK.fullmatch(toks[i + 1])):
                    raise _bad(src, line, f"{tok!r} is not the timestamp (YYYY-MM-DD HH:MM:SS) of column {c + 1}")
                i += 2
                continue
            if role == "type":
                if tok not in TYPE_BYTES:
                    raise _bad(src, line, f"type {tok!r} (column {c + 1}) is not an nccl-tests type name; known: "
                               + ", ".join(TYPE_BYTES))
            elif role == "redop":
                if tok not in _REDOPS:
                    raise _bad(src, line, f"redop {tok!r} (column {c + 1}) is not an nccl-tests op name; known: "
                               + ", ".join(sorted(_REDOPS)))
            else:
                pat, desc = _CELL[role]
                if not pat.fullmatch(tok):
                    g = _GLUED.fullmatch(tok) if role in ("wrong", "error") and c == n - 1 else None
                    if g is None or i + 1 >= len(toks):
                        raise _bad(src, line, _cell_problem(lay, c, tok, desc))
                    tok = toks[i] = g.group(1)
                    toks.insert(i + 1, g.group(2))  # the next row's size
            cells.setdefault(role, []).append(tok)
            i += 1
        out.append((_row(cells, lay, src, line), _Cells(cells["time"], cells["algbw"], cells["busbw"],
                                                         "cputime" in lay.words)))
    return out


def _cell_problem(lay: _Layout, c: int, tok: str, desc: str) -> str:
    """What is wrong with cell ``c`` of a row: ``out-of-place busbw is nan: ...``, ``size '1e6' ...``."""
    role = lay.roles[c]
    half = ""
    if role not in ("size", "count", "root"):
        half = ("in-place " if lay.roles[:c + 1].count("time") == 2 else "out-of-place ")
    try:
        v = float(tok)
    except ValueError:
        v = None
    if v is not None and (not math.isfinite(v) or v < 0) and role not in ("size", "count", "root"):
        return f"{half}{lay.words[c]} is {v:g} (column {c + 1}): the run failed or the row was corrupted"
    what = f"{half}{lay.words[c]} {tok!r} (column {c + 1}) is not {desc}"
    if role in ("size", "count") and v is not None:
        what += (" (a negative size is not a size)" if v < 0 else
                 " (nccl-tests prints these as whole numbers, never with a point or an exponent)")
    return what


def _num(tok: str) -> float | None:
    return None if tok == "N/A" else float(tok)


def _row(cells: dict[str, list[str]], lay: _Layout, src: str, line: int) -> NcclTestsRow:
    t, a, b, w = cells["time"], cells["algbw"], cells["busbw"], cells.get("wrong", cells.get("error", []))
    for tt in t:
        if float(tt) <= 0:
            raise _bad(src, line, f"time {tt} us: a measured time is never zero")
    if "wrong" in cells:
        for half, x in zip(("out-of-place", "in-place"), cells["wrong"], strict=False):
            if x != "N/A" and float(x) != 0:
                raise _bad(src, line, f"{half} #wrong is {x}: NCCL returned wrong results, so its times do not "
                           "count", fix="fix the system and re-run nccl-tests (check with -c 1); a run with wrong "
                           "results is not a calibration")
    ip = lay.halves == 2
    return NcclTestsRow(
        size_bytes=int(cells["size"][0]), count=int(cells["count"][0]), dtype=cells["type"][0],
        redop=cells["redop"][0] if "redop" in cells else None,
        root=int(cells["root"][0]) if "root" in cells else None,
        oop_time_us=float(t[0]), oop_algbw_GBps=float(a[0]), oop_busbw_GBps=float(b[0]), oop_wrong=_num(w[0]),
        ip_time_us=float(t[1]) if ip else None, ip_algbw_GBps=float(a[1]) if ip else None,
        ip_busbw_GBps=float(b[1]) if ip else None, ip_wrong=_num(w[1]) if ip else None, line=line,
        cputime="cputime" in lay.words)


@dataclass
class _Run:
    """One run of a binary in a file, as read so far."""

    start: int
    binary: str | None = None
    binary_line: int = 0
    title: tuple[str, int] | None = None  # `schedsim calibrate`'s "# all_reduce over 2 ranks"
    header_n: int | None = None
    has_header: bool = False
    rank_ids: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    layout: _Layout | None = None
    rows: list[tuple[NcclTestsRow, _Cells]] = field(default_factory=list)
    avg: float | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)
    nccl_version: str | None = None
    nccl_env: dict[str, str] = field(default_factory=dict)

    @property
    def started(self) -> bool:
        return bool(self.rows) or self.has_header


def _scan(text: str, src: str) -> list[_Run]:
    """Split ``text`` into runs and read every row (see the module docstring)."""
    runs = [_Run(start=1)]
    for ln, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        run = runs[-1]
        mb = _BIN_RE.search(s)
        if mb and "concluded" not in s:  # "# Collective test concluded: X" ends a run; it starts none
            if run.started:
                run = _Run(start=ln)
                runs.append(run)
            if run.binary not in (None, mb.group(1)):
                raise _bad(src, ln, f"{mb.group(1)} after {run.binary} (line {run.binary_line}) with no table "
                           "between them", fix="pass a log in which each binary's run has its table")
            run.binary, run.binary_line = mb.group(1), ln
        mv = _NCCL_VERSION_RE.search(s)
        if mv and run.nccl_version is None:
            run.nccl_version = mv.group(1)
        for name, value in _NCCL_ENV_RE.findall(s):
            key = _NCCL_ENV_ALIAS.get(name, name)
            if name == key or key not in run.nccl_env:  # NCCL_MIN_NCHANNELS over NCCL_MIN_NRINGS
                run.nccl_env[key] = value.rstrip(".")
        if not s.startswith("#"):
            if _NUMLIKE.match(s):
                run.rows.extend(_read_rows(s.split(), _layout_for(run, s.split(), src, ln), src, ln))
            else:
                run.skipped.append((ln, s))
            continue
        if re.search(r"#\s*nThread\b", s):
            if run.started:
                run = _Run(start=ln)
                runs.append(run)
            run.has_header = True
            mt = re.search(r"nThread\s+(\d+)\s+nGpus\s+(\d+)", s)
            if mt:
                run.header_n = int(mt.group(1)) * int(mt.group(2))
        _comment(run, s, src, ln)
    return runs


def _comment(run: _Run, s: str, src: str, ln: int) -> None:
    """Read a ``#`` line into ``run``: title, ``# Rank`` lines, footer figures, the column header and any rows
    glued after the units header."""
    mc = _CALIBRATE_RE.search(s)
    if mc:
        run.title = (mc.group(1), int(mc.group(2)))
    ml = _NCCL_LIBRARY_RE.search(s)
    if ml and run.nccl_version is None:
        code = int(ml.group(1))  # NCCL_VERSION_CODE (nccl.h): major * 10000 + minor * 100 + patch
        run.nccl_version = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    run.rank_ids.update(int(x) for x in re.findall(r"#\s*Rank\s+(\d+)\s+Group", s))
    run.hosts.update(re.findall(r"#\s*Rank\s+\d+\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device", s))
    ma = re.search(r"Avg bus bandwidth\s*:\s*(\S+)", s)
    if ma:
        try:
            run.avg = float(ma.group(1))
        except ValueError:
            raise _bad(src, ln, f"Avg bus bandwidth {ma.group(1)!r} is not a number") from None
    mo = re.search(r"Out of bounds values\s*:\s*(\d+)", s)
    if mo and int(mo.group(1)):
        raise _bad(src, ln, f"{mo.group(1)} out-of-bounds values: NCCL returned wrong results, so the run's "
                   "times do not count", fix="fix the system and re-run nccl-tests; a run with wrong results is "
                   "not a calibration")
    toks = s.split()
    h = _header_at(toks)
    if h is not None:
        j = h
        while j < len(toks) and toks[j] in _COLUMNS:
            j += 1
        run.layout = _layout(toks[h:j], src, ln)
    rest = _after_units(toks)
    if rest:  # rows glued to the header line
        run.rows.extend(_read_rows(rest, _layout_for(run, rest, src, ln), src, ln))


def _after_units(toks: list[str]) -> list[str]:
    """Row words glued after the units header (``# (B) (elements) ... (GB/s)8 2 float ...``), up to the next
    ``#``; empty if none."""
    if "(B)" not in toks:
        return []
    j = toks.index("(B)")
    while j + 1 < len(toks) and toks[j + 1].startswith("("):
        j += 1
    tail = toks[j][toks[j].rindex(")") + 1:] if ")" in toks[j] else ""
    rest = ([tail] if tail else []) + toks[j + 1:]
    stop = next((k for k, t in enumerate(rest) if t.startswith("#")), len(rest))
    return rest[:stop]


def _layout_for(run: _Run, toks: list[str], src: str, ln: int) -> _Layout:
    if run.layout is not None:
        return run.layout
    if len(toks) in _DEFAULT:
        return _DEFAULT[len(toks)]
    raise _bad(src, ln, f"a row of {len(toks)} words with no column header before it",
               fix="keep the header lines nccl-tests printed ('# size count type redop root time algbw busbw "
                   "#wrong ...'): without them only rows of 13, 12, 11 or 9 columns can be read")


def _finish(run: _Run, src: str, collective: str | None, nranks: int | None, by_name: str | None) -> NcclTestsLog:
    """The log of a run that has rows: its collective (the text's, else ``collective``, else ``by_name``, the file
    name's), group size and checked rows."""
    where = f"{src}:{run.start}"
    coll = COLLECTIVE_OF_BINARY[run.binary] if run.binary else (run.title[0] if run.title else None)
    if collective is not None and coll is not None and collective != coll:
        raise SchedsimError(f"{where}: the log holds {coll} (line {run.binary_line or run.start}), not the "
                            f"{collective} given", fix=f"drop --collective {collective}, or pass the {collective} log")
    coll = coll or collective or by_name
    n: int | None = len(run.rank_ids) or (run.title[1] if run.title else None)
    if nranks is not None and n is not None and nranks != n:
        raise SchedsimError(f"{where}: the log lists {n} ranks, not the {nranks} given",
                            fix=f"drop --ranks {nranks}, or pass the log of a {nranks}-rank run")
    n = n or nranks or run.header_n
    rows = [r for r, _ in run.rows]
    for (prev, _), (r, _) in zip(run.rows, run.rows[1:], strict=False):
        if (r.dtype, r.redop) != (prev.dtype, prev.redop):
            raise _bad(src, r.line, f"rows of type {prev.dtype}/{prev.redop} (line {prev.line}) and "
                       f"{r.dtype}/{r.redop} in one run: one busbw table needs one type and one op",
                       fix="run nccl-tests with one -d type and one -o op, or keep one type's rows")
        if r.size_bytes <= prev.size_bytes:
            raise _bad(src, r.line, f"size {r.size_bytes} B after {prev.size_bytes} B (line {prev.line}): "
                       "nccl-tests prints each size once, growing", fix="pass one cycle of one run (-N 1), or "
                       "delete the repeated rows")
    if coll is not None and n is not None:
        _check_bus_factor(run, coll, n, src)
        _check_count(run, coll, n, src)
    _check_algbw(run, coll, src)
    return NcclTestsLog(collective=coll, nranks=n, rows=rows, avg_busbw_GBps=run.avg, source=src,
                        skipped=run.skipped, nodes=len(run.hosts) or None, nccl_version=run.nccl_version,
                        nccl_env=dict(run.nccl_env))


def _check_bus_factor(run: _Run, coll: str, n: int, src: str) -> None:
    """busbw = algbw × bus factor (nccl-tests ``src/<coll>.cu`` ``GetBw``) within the printed rounding."""
    from schedsim.network.links import bus_factor

    try:
        f = bus_factor(coll, n)
    except KeyError:  # hypercube: no factor schedsim knows
        return
    for r, cells in run.rows:
        for a, b in zip(cells.algbw, cells.busbw, strict=True):
            if abs(float(b) - float(a) * f) > _resolution(b) + _resolution(a) * f + 1e-9:
                raise _bad(src, r.line, f"busbw {b} GB/s is not algbw {a} x {f:g}, the nccl-tests bus factor of "
                           f"{coll} over {n} ranks: the log is not the {coll} over {n} ranks it was read as",
                           fix="pass --collective and --ranks as the run was (a header that lists fewer ranks than "
                               "ran, or another binary's log), or re-run nccl-tests")


#: Collectives whose nccl-tests count column is the per-rank count, size / (type size × ranks): the tests'
#: ``GetCollByteCount`` pass ``paramcount = count / nranks`` and print ``max(sendBytes, recvBytes)`` as the size
#: (nccl-tests v2.19 ``src/common.cu`` ``TimeTest``, ``src/all_gather.cu`` and the others).
_PER_RANK_COUNT = {"all_gather", "reduce_scatter", "all_to_all", "scatter", "gather", "hypercube"}


def _check_count(run: _Run, coll: str, n: int, src: str) -> None:
    """count × type size (× ranks for :data:`_PER_RANK_COUNT`, in a log nccl-tests printed; ``schedsim
    calibrate``'s tables count the whole buffer) = size, exactly: both are whole numbers nccl-tests derives from one
    element count."""
    ours = run.binary is None and run.title is not None  # "# all_gather over 8 ranks ..., schedsim calibrate"
    k = n if coll in _PER_RANK_COUNT and not ours else 1
    for r, _cells in run.rows:
        per = TYPE_BYTES[r.dtype]
        if r.count * per * k != r.size_bytes:
            how = f"{per} B per {r.dtype}" + (f" x {n} ranks" if k > 1 else "")
            want = r.size_bytes / (per * k)
            raise _bad(src, r.line, f"count {r.count} is not size {r.size_bytes} B / ({how}) = {want:g}: nccl-tests "
                       f"prints the count of the size it ran" + (f" ({coll}'s count per rank)" if k > 1 else ""),
                       fix=f"re-run nccl-tests or correct the row; if the log is not the {coll} over {n} ranks it was "
                           "read as, pass --collective and --ranks as the run was")


def _check_algbw(run: _Run, coll: str | None, src: str) -> None:
    """algbw = size / time (nccl-tests ``src/<coll>.cu`` ``GetBw``: the bytes of the size column over the time
    column; GB/s = B / (us × 1e3)) within the printed rounding of both; not for hypercube (size × (n-1)/n) and
    not where the time column is ``-C 1``'s CPU time."""
    if coll == "hypercube":
        return
    for r, cells in run.rows:
        if cells.cputime:
            continue
        for half, t, a in zip(("out-of-place", "in-place"), cells.time, cells.algbw, strict=False):
            tf, rt, af, ra = float(t), _resolution(t), float(a), _resolution(a)
            lo = r.size_bytes / ((tf + rt) * 1e3)  # the algbw of the longest time that prints as t
            hi = r.size_bytes / ((tf - rt) * 1e3) if tf > rt else math.inf
            if af + ra < lo * (1 - 1e-9) or af - ra > hi * (1 + 1e-9):
                raise _bad(src, r.line, f"{half} algbw {a} GB/s is not size / time = {r.size_bytes} B / {t} us = "
                           f"{r.size_bytes / (tf * 1e3):.4g} GB/s (nccl-tests GetBw), within the printed rounding")


def _parse_runs(text: str, src: str, collective: str | None, nranks: int | None,
                by_name: str | None = None) -> list[NcclTestsLog]:
    runs = _scan(text, src)
    logs = []
    for run in runs:
        if not run.rows:
            if run.started:
                raise _bad(src, run.start, f"the run of {run.binary or 'an nccl-tests binary'} starting here has "
                           "no table rows (it failed or the log was cut)", fix="pass a complete log, or delete "
                           "that run's lines")
            continue
        logs.append(_finish(run, src, collective, nranks, by_name))
    if not logs:
        raise SchedsimError(f"{src}: no nccl-tests data rows found", fix="pass the output of an nccl-tests binary "
                            "such as all_reduce_perf (rows: size count type redop root time algbw busbw #wrong "
                            "...); lines with a prefix (mpirun --tag-output, timestamps) must have it removed")
    logs[0].skipped = [s for r in runs if not r.rows for s in r.skipped] + logs[0].skipped
    return logs


def parse_nccl_tests(text: str, *, collective: str | None = None, nranks: int | None = None,
                     source: str = "<text>") -> NcclTestsLog:
    """Parse the text of one nccl-tests run.

    Parameters
    ----------
    text : str
        The log (see the module docstring for what is read and what is refused).
    collective : str, optional
        Collective key to use if the text does not name the binary.
    nranks : int, optional
        Group size to use if the header does not list the ranks.
    source : str
        Name used in error messages.

    Returns
    -------
    NcclTestsLog

    Raises
    ------
    SchedsimError
        ``SOURCE:LINE: ...`` for a row or header that is not exactly as nccl-tests prints it, a failed run, or
        a contradiction (module docstring); no rows; several runs (use :func:`read_nccl_tests`).

    Examples
    --------
    >>> log = parse_nccl_tests("# nThread 1 nGpus 2\\n 1024 256 float sum -1 10.0 0.10 0.10 0 9.0 0.11 0.11 0",
    ...                        collective="all_reduce")
    >>> (log.nranks, log.rows[0].size_bytes, log.rows[0].oop_busbw_GBps)
    (2, 1024, 0.1)
    """
    logs = _parse_runs(text, source, collective, nranks)
    if len(logs) > 1:
        raise SchedsimError(f"{source}: {len(logs)} runs in one text", fix="read it with read_nccl_tests")
    return logs[0]


def read_nccl_tests(path: str | Path, *, collective: str | None = None,
                    nranks: int | None = None) -> list[NcclTestsLog]:
    """Read one log file; a file holding several runs (one per binary) gives several logs.

    Raises
    ------
    SchedsimError
        Missing file, not a regular UTF-8 file within the size cap (:func:`schedsim.io.read_text_input`), no data
        rows, or no way to tell the collective or group size.
    """
    from schedsim.io import read_text_input

    p = Path(path)
    text = read_text_input(p, "nccl-tests log")  # a regular UTF-8 file within the size cap
    stem = _BIN_RE.search(p.name)
    try:
        logs = _parse_runs(text, str(p), collective, nranks, COLLECTIVE_OF_BINARY[stem.group(1)] if stem else None)
    except (ValueError, OverflowError) as e:  # a number past Python's 4,300-digit int limit, or past a float
        raise SchedsimError(f"{p}: a number in the log cannot be read ({e.__class__.__name__}: "
                            f"{printable(e, 120)})", fix="pass the log nccl-tests wrote, unedited") from None
    for log in logs:
        if log.collective is None:
            raise SchedsimError(f"{p}: cannot tell which collective the log measured",
                                fix="pass --collective all_reduce (or all_gather, reduce_scatter, ...)")
        if log.nranks is None:
            raise SchedsimError(f"{p}: cannot tell the number of ranks (no '# Rank N' lines or 'nGpus' header)",
                                fix="pass --ranks N")
    return logs


def format_table(rows: list[dict[str, Any]], title: str = "") -> str:
    """Format rows as an nccl-tests-style table.

    Each row dict has ``size`` (B), ``count``, ``type``, ``redop``, ``root``,
    ``time_us``, ``algbw`` and ``busbw`` (GB/s) and ``wrong`` (int or None): the out-of-place half; and
    optionally ``ip_busbw`` (GB/s), the in-place busbw of a log that has one (not printed).

    The footer ``# Avg bus bandwidth`` is nccl-tests' figure (``src/common.cu``: the mean of the busbw of every
    timed half, out-of-place and in-place, of every row) where every row gives ``ip_busbw``; otherwise it is the
    mean of the out-of-place busbw alone and says so (``(out-of-place only)``). NaN busbw are left out.
    """
    out = []
    if title:
        out.append(f"# {title}")
    out.append("#")
    out.append(f"# {'size':>12s} {'count':>12s} {'type':>8s} {'redop':>6s} {'root':>6s} "
               f"{'time':>9s} {'algbw':>8s} {'busbw':>8s} {'#wrong':>6s}")
    out.append(f"# {'(B)':>12s} {'(elements)':>12s} {'':>8s} {'':>6s} {'':>6s} {'(us)':>9s} {'(GB/s)':>8s} "
               f"{'(GB/s)':>8s}")
    for r in rows:
        t = r["time_us"]
        ts = f"{t:9.2f}" if t < 1e4 else f"{t:9.0f}"
        wrong = "N/A" if r.get("wrong") is None else str(int(r["wrong"]))
        out.append(f"  {int(r['size']):12d} {int(r['count']):12d} {r['type']:>8s} {r.get('redop', 'none'):>6s} "
                   f"{int(r.get('root', -1)):6d} {ts} {r['algbw']:8.2f} {r['busbw']:8.2f} {wrong:>6s}")
    both = bool(rows) and all(r.get("ip_busbw") is not None for r in rows)
    bws = [b for r in rows for b in ([r["busbw"], r["ip_busbw"]] if both else [r["busbw"]]) if not math.isnan(b)]
    if bws:
        out.append(f"# Avg bus bandwidth    : {sum(bws) / len(bws):.4f}" + ("" if both else " (out-of-place only)"))
    return "\n".join(out)
