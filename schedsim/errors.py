"""Exception hierarchy of schedsim: one tree, every error a :class:`SchedsimError`.

A shallow hierarchy in the style of ``networkx.exception``::

    SchedsimError                       message, fix, detail
    ├── SpecError                       bad schedule YAML (file, line, column, field path)
    ├── ProfileError                    bad hardware profile
    ├── GraphError                      the schedule's DAG is unusable
    │   ├── CycleError                  a dependency cycle (lists the ops around it)
    │   └── DeadlockError               ranks would hang (also a PipelineScheduleError)
    ├── PipelineScheduleError(ValueError)  a pipeline order is invalid (rank x step grid)
    │   ├── ScheduleConfigError         bad generator arguments (rule + fix, no grid)
    │   ├── InsufficientMicrobatchesError  m below what the schedule needs
    │   └── DeadlockError               a cross-rank p2p wait cycle (ranks, grid)
    └── TraceError                      a trace or timeline file cannot be read

Every error keeps what is wrong (``message``), what to write instead (``fix``, one line or
``None``) and any long context (``detail``: an issue grid, a pipeline grid) as fields; ``str(e)``
joins them as::

    <message>
      fix: <fix>

    <detail>

The command line catches :class:`SchedsimError` only, prints its text and exits with code 2.
Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = [
    "ERROR_MARK",
    "CycleError",
    "DeadlockError",
    "GraphError",
    "InsufficientMicrobatchesError",
    "PipelineScheduleError",
    "ProfileError",
    "ScheduleConfigError",
    "SchedsimError",
    "SpecError",
    "TraceError",
    "format_pipeline_order",
    "printable",
]


def _escape_table(ascii_only: bool = False) -> dict[int, str]:
    """Code points :func:`printable` escapes: C0 and C1 controls and DEL (ESC starts terminal escape sequences,
    CR rewrites a line), the bidirectional overrides and isolates (Unicode TR #36; they reorder what a terminal
    shows), the line and paragraph separators U+2028/U+2029 (line breaks to YAML 1.1 and many viewers; with
    C0's LF/CR and C1's NEL every YAML line break is escaped), and lone surrogates (not encodable: they would
    crash a print). ``ascii_only``: those below U+0080 alone."""
    cps = [*range(0x20), 0x7F]
    if not ascii_only:
        cps += [*range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                *range(0xD800, 0xE000)]
    return {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in cps}


def _keep_nl(table: dict[int, str]) -> dict[int, str]:
    out = {**table}
    del out[0x0A]
    return out


#: The tables of an ASCII text (most names and messages; ``str.isascii`` is a flag of the string); the whole
#: tables, 2,100 code points (2% of a cold ``check`` to build), only once a text that is not ASCII is printed.
_ASCII_ESCAPES = _escape_table(ascii_only=True)
_ASCII_ESCAPES_KEEP_NL = _keep_nl(_ASCII_ESCAPES)
_ESCAPES: dict[int, str] = {}
_ESCAPES_KEEP_NL: dict[int, str] = {}


def _full_tables() -> tuple[dict[int, str], dict[int, str]]:
    if not _ESCAPES:
        _ESCAPES.update(_escape_table())
        _ESCAPES_KEEP_NL.update(_keep_nl(_ESCAPES))
    return _ESCAPES, _ESCAPES_KEEP_NL


def printable(text: object, limit: int | None = None, *, newlines: bool = False) -> str:
    """``str(text)`` safe to show on a terminal: control characters, bidi overrides and lone surrogates escaped
    as ``\\x1b`` / ``\\u202e`` (other Unicode kept), newlines too unless ``newlines``; cut to at most ``limit``
    characters with a note of how many were cut. The one function that every message, table and summary
    passes names and strings from an input through.

    Examples
    --------
    >>> printable("a\\x1b[2Jb\\rc")
    'a\\\\x1b[2Jb\\\\x0dc'
    >>> printable("x" * 100, 20)
    'xxxxxxxxxxxxx… (+87)'
    """
    s = text if isinstance(text, str) else str(text)
    if s.isascii():
        s = s.translate(_ASCII_ESCAPES_KEEP_NL if newlines else _ASCII_ESCAPES)
    else:
        escapes, keep_nl = _full_tables()
        s = s.translate(keep_nl if newlines else escapes)
    if limit is not None and len(s) > limit:
        keep = max(limit - 4 - len(str(len(s))), 0)  # room for the note "… (+N)"
        s = s[:keep] + f"… (+{len(s) - keep})"
    return s


class SchedsimError(Exception):
    """Base class of every error schedsim reports to a user.

    Parameters
    ----------
    message : str
        What is wrong.
    fix : str, optional
        One line telling the user what to do instead.
    detail : str, optional
        Context printed after a blank line (a grid of the ranks' issue order, ...).

    Examples
    --------
    >>> print(SchedsimError("op 'a' depends on itself", fix="remove it from its deps"))
    op 'a' depends on itself
      fix: remove it from its deps
    """

    def __init__(self, message: str = "", *, fix: str | None = None, detail: str | None = None) -> None:
        self.message = message
        self.fix = fix
        self.detail = detail
        super().__init__(self.format())

    def format(self) -> str:
        """``message``, then ``  fix: ...`` on the next line, then a blank line and ``detail``."""
        text = self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        if self.detail:
            text += f"\n\n{self.detail}"
        return text


class SpecError(SchedsimError):
    """A schedule file is invalid.

    Parameters
    ----------
    message : str
        What is wrong, in one line.
    file : str, optional
        Path of the YAML file.
    line, column : int, optional
        1-based position of the offending node in ``file``.
    path : str, optional
        Dotted field path, e.g. ``ops[3].m``.
    fix : str, optional
        One line telling the user what to write instead.
    detail : str, optional
        Context printed after a blank line.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        path: str | None = None,
        fix: str | None = None,
        detail: str | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.path = path
        super().__init__(message, fix=fix, detail=detail)

    def format(self) -> str:
        """``file:line:col: path: message`` and, on the next line, ``fix: ...``."""
        where = self.file or "<schedule>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        head = f"{where}: "
        if self.path:
            head += f"{self.path}: "
        return head + super().format()


class ProfileError(SchedsimError):
    """A hardware profile is missing, invalid or lacks a needed entry."""

    @classmethod
    def of_field(cls, path: object, err: Mapping[str, object]) -> ProfileError:
        """The error of a profile file ``path`` from pydantic's first error ``err`` (an item of
        ``ValidationError.errors()``): the field's dotted location, the message, the value given and the fix. A
        validator of a whole mapping names its one offending value as ``ctx["got"]`` (else the input, the mapping,
        is shown) and may give ``ctx["fix"]``; a ``le`` bound's fix names the bound."""
        loc = ".".join(str(x) for x in err["loc"])  # type: ignore[attr-defined]
        ctx: Mapping[str, object] = err.get("ctx") or {}  # type: ignore[assignment]
        le = ctx.get("le") if err["type"] == "less_than_equal" else None
        fix = f"give {loc} at most {le:g} (an upper bound: the field's description says why)" if le is not None \
            else ctx.get("fix", "see schedsim/hardware/profiles/h200.yaml for the format")
        return cls(f"{path}: {loc}: {err['msg']} (got {ctx.get('got', err.get('input'))!r})"[:400] + f"\n  fix: {fix}")


class GraphError(SchedsimError):
    """The schedule's DAG cannot be simulated or executed."""


class CycleError(GraphError):
    """The dependencies form a cycle; ``cycle`` lists the op ids around it."""

    def __init__(self, message: str, cycle: list[str], *, fix: str | None = None) -> None:
        self.cycle = cycle
        super().__init__(message, fix=fix)


#: Suffix of the failing row of a pipeline grid, as in torch's ``_format_pipeline_order``.
ERROR_MARK = "<-- ERROR HERE"


class PipelineScheduleError(SchedsimError, ValueError):
    """A pipeline schedule is invalid or would hang.

    Parameters
    ----------
    message : str
        What is wrong, naming the offending actions.
    fix : str, optional
        What to do instead.
    order : mapping of int to sequence, optional
        The rank -> actions order to print as a grid (the error's ``detail``).
    step : int, optional
        Row of the grid to mark with ``<-- ERROR HERE``.
    rank : int, optional
        Rank at fault, when there is one.
    actions : sequence, optional
        The offending actions.
    detail : str, optional
        Context printed after the grid's place when there is no ``order``.

    Attributes
    ----------
    rank, step, actions, grid
        As given; ``grid`` is the formatted table or ``""``.
    reason : str
        ``message`` (the name the pipeline library used first).
    """

    def __init__(
        self,
        message: str,
        *,
        fix: str | None = None,
        order: Mapping[int, Sequence[object | None]] | None = None,
        step: int | None = None,
        rank: int | None = None,
        actions: Sequence[object] = (),
        detail: str | None = None,
    ) -> None:
        self.rank = rank
        self.step = step
        self.actions = tuple(actions)
        self.grid = format_pipeline_order(order, error_step=step) if order is not None else ""
        self.reason = message
        super().__init__(message, fix=fix, detail=f"Pipeline schedule:\n{self.grid}" if self.grid else detail)

    def format(self) -> str:
        """``message; fix: ...`` on one line (the pipeline library's Python callers read one line), then the grid.

        A fix the schedule language adds later (``schedsim.spec.pipeline_block``) goes on its own line.
        """
        text = self.message + (f"; fix: {self.fix}" if self.fix else "")
        return text + (f"\n\n{self.detail}" if self.detail else "")


class ScheduleConfigError(PipelineScheduleError):
    """Generator arguments break a schedule's rule (message: rule, values, fix)."""


class InsufficientMicrobatchesError(PipelineScheduleError):
    """Fewer microbatches than the schedule needs.

    Sources: torchtitan#775 (PP hangs with m < p for the 1F1B family;
    torch ``Schedule1F1B`` rejects m < p) and DeepSeek ``dualpipev.py`` /
    torch ``ScheduleDualPipeV`` (m >= 2p).
    """


class DeadlockError(GraphError, PipelineScheduleError):
    """Real ranks would hang: mismatched collective order, unmatched p2p, or a wait cycle.

    One class for both places a hang is found: the DAG's static checks (``ops`` names the op ids
    the message mentions, in order, so callers can mark them without parsing the text) and a
    pipeline order's p2p simulation (``cycle`` holds the ranks around the wait cycle, ``order`` the
    grid).

    Parameters
    ----------
    message, fix, detail
        As :class:`SchedsimError`.
    ops : sequence of str, optional
        Op ids (``name@rN``) named by the message, in the order it names them.
    cycle : sequence, optional
        What waits around the cycle, in wait order: ranks (pipeline) or op names (DAG); empty if
        the stall is not a cycle.
    order, step, rank, actions
        As :class:`PipelineScheduleError`.
    """

    def __init__(
        self,
        message: str,
        *,
        fix: str | None = None,
        detail: str | None = None,
        ops: Sequence[str] = (),
        cycle: Sequence[int | str] = (),
        order: Mapping[int, Sequence[object | None]] | None = None,
        step: int | None = None,
        rank: int | None = None,
        actions: Sequence[object] = (),
    ) -> None:
        self.ops = tuple(ops)
        self.cycle = tuple(cycle)
        PipelineScheduleError.__init__(self, message, fix=fix, order=order, step=step, rank=rank, actions=actions,
                                       detail=detail)

    format = SchedsimError.format  # fix on its own line, as every error the DAG checks raise


class TraceError(SchedsimError):
    """A timeline or trace file is missing, truncated or malformed."""


class BuildError(SchedsimError):
    """schedsim's compiled part (:mod:`schedsim.sim._cwaves`) is not built, or was built from an older source."""


def format_pipeline_order(
    order: Mapping[int, Sequence[object | None]],
    error_step: int | None = None,
) -> str:
    """Format a rank -> actions order as a step (row) x rank (column) grid.

    Parameters
    ----------
    order : mapping of int to sequence of action or None
        Per-rank action lists; ``None`` prints as an empty (idle) cell.
    error_step : int, optional
        Row to mark with ``<-- ERROR HERE``.

    Returns
    -------
    str
        The table, one line per step, ending in a newline.

    Notes
    -----
    Layout of PyTorch's ``_format_pipeline_order``
    (``torch/distributed/pipelining/schedules.py``).

    Examples
    --------
    >>> print(format_pipeline_order({0: ["0F0", None], 1: [None, "1F0"]}, 1), end="")
            Rank 0 Rank 1
    Step 0: 0F0
    Step 1:        1F0    <-- ERROR HERE
    """
    ranks = sorted(order)
    cols = [["" if a is None else str(a) for a in order[r]] for r in ranks]
    num_steps = max((len(c) for c in cols), default=0)
    if error_step is not None:
        num_steps = max(num_steps, error_step + 1)
    width_idx = len(str(max(num_steps - 1, 0)))
    labels = [f"Step {str(i).zfill(width_idx)}" for i in range(num_steps)]
    rank_labels = [f"Rank {r}" for r in ranks]
    widths = [max([len(rank_labels[j])] + [len(x) for x in cols[j]]) for j in range(len(ranks))]
    pad = " " * (len(labels[0]) + 2) if labels else ""
    header = pad + " ".join(f"{lab:<{widths[j]}}" for j, lab in enumerate(rank_labels))
    lines = [header.rstrip()]
    for i, label in enumerate(labels):
        cells = [cols[j][i] if i < len(cols[j]) else "" for j in range(len(ranks))]
        row = f"{label}: " + " ".join(f"{c:<{widths[j]}}" for j, c in enumerate(cells))
        if error_step is not None and i == error_step:
            row = f"{row} {ERROR_MARK}"
        else:
            row = row.rstrip()
        lines.append(row)
    return "\n".join(lines) + "\n"
