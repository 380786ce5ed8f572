"""Parse nccl-tests logs (``all_reduce_perf`` and friends) into busbw tables.

Pure Python: ``schedsim calibrate --from-nccl-tests LOG`` uses it without torch.

Formats accepted (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``, ``src/common.cu``):

* **current** (about 2022 on): data rows are
  ``size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong``,
  out-of-place first, then in-place; ``#wrong`` may be ``N/A``; ``-C 1`` names
  the time column ``cputime`` (same position);
* **old** (before about 2020): no ``root`` column (and no ``redop`` for
  gather-type tests), the correctness column is ``error`` printed as ``%5.0le``
  (``0e+00``);
* **glued text**: logs pasted through a tool that lost the newlines, as in S4 of
  docs/sources.md, where the in-place ``#wrong`` of one row runs into the size of the next
  (``... 0.00 016 4 float ...`` is ``#wrong = 0`` then size 16) and the last
  header line runs into the first row (``(GB/s)8 2 float``).

How rows are found without trusting newlines: the text is split on
whitespace and every *type* token (``float``, ``half``, ``bfloat16``,
``int8`` ...) preceded by an integer count and a token ending in digits is a
row anchor. When a glued token has to be split between ``#wrong`` and the next
size, the split chosen is the one whose size equals ``count × sizeof(type)``
(the nccl-tests definition of the size column), else one whose size is a
multiple of ``count``.

Which collective a log holds comes from the binary name in the text
(``all_reduce_perf``, ``./build/all_gather_perf`` or ``# Collective test
starting: sendrecv_perf``), else the file name, else the ``collective``
argument. The group size comes from the ``# Rank N ...`` device lines, else
``nThread × nGpus`` of the header, else the ``nranks`` argument.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedsim.errors import SchedsimError, printable

__all__ = ["NcclTestsRow", "NcclTestsLog", "parse_nccl_tests", "read_nccl_tests", "format_table",
           "COLLECTIVE_OF_BINARY"]

#: nccl-tests type names and their sizes in bytes (``src/common.cu`` ``test_typenames``).
TYPE_BYTES: dict[str, int] = {
    "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8, "bfloat16": 2,
    "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
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
_BIN_RE = re.compile(r"\b(" + "|".join(COLLECTIVE_OF_BINARY) + r")\b")
_NUM_RE = re.compile(r"^[-+]?((\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|nan|inf|infinity)$", re.IGNORECASE)


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

    @property
    def busbw_GBps(self) -> float:
        """The out-of-place busbw (GB/s), the figure nccl-tests users usually quote."""
        return self.oop_busbw_GBps


@dataclass
class NcclTestsLog:
    """A parsed log: which collective, over how many ranks, and its rows in size order."""

    collective: str | None
    nranks: int | None
    rows: list[NcclTestsRow] = field(default_factory=list)
    avg_busbw_GBps: float | None = None
    source: str = "<text>"

    def table(self) -> list[tuple[int, float]]:
        """``[[size_bytes, busbw_GBps], ...]`` rows for a profile's ``collectives.tables``.

        Rows with a zero busbw (sizes too small to register) are dropped, since
        the cost model interpolates log(size) against busbw.
        """
        return [(r.size_bytes, r.busbw_GBps) for r in self.rows if r.busbw_GBps > 0]


def _value(tok: str) -> float | None:
    """A numeric cell, or None for ``N/A``. Raises ValueError otherwise."""
    if tok.upper() == "N/A":
        return None
    if _NUM_RE.match(tok):
        return float(tok)
    raise ValueError(tok)


def _is_cell(tok: str) -> bool:
    try:
        _value(tok)
        return True
    except ValueError:
        return False


def _split_glued(tok: str, count: int, tbytes: int) -> tuple[str, int] | None:
    """Split a size token that may carry the previous row's ``#wrong`` in front of it.

    Returns ``(prefix, size)``: the prefix is ``""`` when nothing was glued.
    """
    m = re.search(r"(\d+)$", tok)
    if not m:
        return None
    digits = m.group(1)
    head = tok[: m.start()]
    head = re.sub(r"^.*\)", "", head)  # "(GB/s)8": a header word glued in front
    want = count * tbytes
    cands = [(head + digits[:i], int(digits[i:])) for i in range(len(digits)) if digits[i:] and
             (digits[i] != "0" or i == len(digits) - 1)]
    for pre, size in cands:  # exact: size = count * sizeof(type)
        if size == want:
            return pre, size
    for pre, size in cands:  # a multiple of count (older versions printed per-rank counts)
        if count and size % count == 0 and size // count in (1, 2, 4, 8, 16):
            return pre, size
    return head, int(digits)


_CALIBRATE_RE = re.compile(r"#\s*(all_reduce|all_gather|reduce_scatter|all_to_all|broadcast|reduce|sendrecv|scatter|gather)\s+over\s+(\d+)\s+ranks?\b")

class _NoRows(SchedsimError):
    """A text holds no data row (a log with several runs may have empty ones)."""


def _row_problems(r: NcclTestsRow) -> list[str]:
    """What is wrong with one row: non-finite or negative times and bandwidths, a nonzero ``#wrong``."""
    out = []
    where = f"row size {r.size_bytes} B ({r.count} {r.dtype})"
    for half, vals in (("out-of-place", (r.oop_time_us, r.oop_algbw_GBps, r.oop_busbw_GBps, r.oop_wrong)),
                       ("in-place", (r.ip_time_us, r.ip_algbw_GBps, r.ip_busbw_GBps, r.ip_wrong))):
        for col, v in zip(("time", "algbw", "busbw", "#wrong"), vals, strict=False):
            if v is None:
                continue
            if not math.isfinite(v) or v < 0:
                out.append(f"{where}: {half} {col} is {v:g}")
            elif col == "#wrong" and v >= 1 and v == int(v):  # old logs' max-error column may be e.g. 2e-07
                out.append(f"{where}: {half} #wrong is {v:g} (NCCL returned wrong results)")
    return out


def parse_nccl_tests(text: str, *, collective: str | None = None, nranks: int | None = None,
                     source: str = "<text>") -> NcclTestsLog:
    """Parse the text of one nccl-tests run.

    Parameters
    ----------
    text : str
        The log, with or without its newlines (see the module docstring).
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
        If no data row is found.

    Examples
    --------
    >>> log = parse_nccl_tests("# nThread 1 nGpus 2\\n 1024 256 float sum -1 10.0 0.10 0.10 0 9.0 0.11 0.11 0",
    ...                        collective="all_reduce")
    >>> (log.nranks, log.rows[0].size_bytes, log.rows[0].oop_busbw_GBps)
    (2, 1024, 0.1)
    """
    coll = collective
    m = _BIN_RE.search(text)
    if m:
        coll = COLLECTIVE_OF_BINARY[m.group(1)]
    n = nranks
    mc = _CALIBRATE_RE.search(text)  # the title `schedsim calibrate` prints: "# all_reduce over 2 ranks (nccl), ..."
    if mc:
        coll = coll or mc.group(1)
        n = n or int(mc.group(2))
    rank_ids = set(int(x) for x in re.findall(r"#\s*Rank\s+(\d+)\s+Group", text))
    if rank_ids and n is None:
        n = len(rank_ids)
    if n is None:
        mt = re.search(r"nThread\s+(\d+)\s+nGpus\s+(\d+)", text)
        if mt:
            n = int(mt.group(1)) * int(mt.group(2))
    avg = None
    ma = re.search(r"Avg bus bandwidth\s*:\s*([-+\d.eE]+)", text)
    if ma:
        avg = float(ma.group(1))

    toks = text.split()
    anchors: list[int] = []
    for i, t in enumerate(toks):
        if t in TYPE_BYTES and i >= 2 and toks[i - 1].isdigit() and re.search(r"\d$", toks[i - 2]):
            anchors.append(i)
    rows: list[NcclTestsRow] = []
    problems: list[str] = []
    glued_prefix: dict[int, str] = {}
    sizes: dict[int, int] = {}
    for a in anchors:
        count = int(toks[a - 1])
        sp = _split_glued(toks[a - 2], count, TYPE_BYTES[toks[a]])
        if sp is None:
            continue
        glued_prefix[a], sizes[a] = sp
    for k, a in enumerate(anchors):
        if a not in sizes:
            continue
        dtype = toks[a]
        count = int(toks[a - 1])
        j = a + 1
        redop: str | None = None
        root: int | None = None
        if j < len(toks) and toks[j].lower() in _REDOPS:
            redop = toks[j]
            j += 1
        stop = anchors[k + 1] - 2 if k + 1 < len(anchors) else len(toks)
        cells: list[str] = []
        while j < stop and _is_cell(toks[j]):
            cells.append(toks[j])
            j += 1
        nxt = anchors[k + 1] if k + 1 < len(anchors) else None
        tail = glued_prefix.get(nxt, "") if nxt is not None else ""
        if tail:
            cells.append(tail)
        # a leading integer cell before 8 (or 4) values is the root column
        if len(cells) in (9, 5) and re.fullmatch(r"-?\d+", cells[0]):
            root = int(cells[0])
            cells = cells[1:]
        if len(cells) > 8:  # -I 1 and other extra columns: the last 8 per the reference advice
            cells = cells[-8:]
        if len(cells) < 4:
            continue
        try:
            vals = [_value(c) for c in cells]
        except ValueError:
            continue
        oop = vals[:4]
        ip = vals[4:8] if len(vals) >= 8 else [None, None, None, None]
        if oop[0] is None or oop[1] is None or oop[2] is None:
            continue
        row = NcclTestsRow(size_bytes=sizes[a], count=count, dtype=dtype, redop=redop, root=root,
                           oop_time_us=oop[0], oop_algbw_GBps=oop[1], oop_busbw_GBps=oop[2], oop_wrong=oop[3],
                           ip_time_us=ip[0], ip_algbw_GBps=ip[1], ip_busbw_GBps=ip[2], ip_wrong=ip[3])
        problems.extend(_row_problems(row))
        rows.append(row)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise SchedsimError(f"{source}: {len(problems)} bad value(s) in nccl-tests rows: " + "; ".join(problems[:5])
                            + more + "\n  fix: a nan/inf/negative time or bandwidth, or a nonzero #wrong, means the "
                            "run failed or was corrupted; re-run nccl-tests (check -c 1 correctness output) and pass "
                            "a clean log, or delete those rows")
    if not rows:
        raise _NoRows(f"{source}: no nccl-tests data rows found", fix="pass the output of an nccl-tests "
                            "binary such as all_reduce_perf (rows: size count type redop root time algbw busbw "
                            "#wrong ...)")
    rows.sort(key=lambda r: r.size_bytes)
    return NcclTestsLog(collective=coll, nranks=n, rows=rows, avg_busbw_GBps=avg, source=source)


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
    if collective is None:
        stem = _BIN_RE.search(p.name)
        if stem:
            collective = COLLECTIVE_OF_BINARY[stem.group(1)]
    # split at each "# nThread" header: one run per header
    starts = [m.start() for m in re.finditer(r"#\s*nThread", text)]
    for k in range(1, len(starts)):
        # the binary name (``./build/all_gather_perf ...``) of run k comes before its header: keep it with run k,
        # or run k would take the file's or the previous run's collective
        names = list(_BIN_RE.finditer(text, starts[k - 1], starts[k]))
        if names:
            starts[k] = text.rfind("\n", starts[k - 1], names[-1].start()) + 1
    chunks = [text] if len(starts) <= 1 else [text[a:b] for a, b in zip([0] + starts[1:], starts[1:] + [len(text)], strict=True)]
    logs = []
    for c in chunks:
        try:
            log = parse_nccl_tests(c, collective=collective, nranks=nranks, source=str(p))
        except _NoRows:
            if len(chunks) > 1:
                continue
            raise
        except SchedsimError:
            raise
        except (ValueError, OverflowError) as e:  # a number past Python's 4,300-digit int limit, or past a float
            raise SchedsimError(f"{p}: a number in the log cannot be read ({e.__class__.__name__}: "
                                f"{printable(e, 120)})", fix="pass the log nccl-tests wrote, unedited") from None
        if log.collective is None:
            raise SchedsimError(f"{p}: cannot tell which collective the log measured",
                                fix="pass --collective all_reduce (or all_gather, reduce_scatter, ...)")
        if log.nranks is None:
            raise SchedsimError(f"{p}: cannot tell the number of ranks (no '# Rank N' lines or 'nGpus' header)",
                                fix="pass --ranks N")
        logs.append(log)
    if not logs:
        raise SchedsimError(f"{p}: no nccl-tests data rows found")
    return logs


def format_table(rows: list[dict[str, Any]], title: str = "") -> str:
    """Format rows as an nccl-tests-style table.

    Each row dict has ``size`` (B), ``count``, ``type``, ``redop``, ``root``,
    ``time_us``, ``algbw`` and ``busbw`` (GB/s) and ``wrong`` (int or None).
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
    bws = [r["busbw"] for r in rows if not math.isnan(r["busbw"])]
    if bws:
        out.append(f"# Avg bus bandwidth    : {sum(bws) / len(bws):.4f}")
    return "\n".join(out)
