"""Read and write pipeline orders as PyTorch's CSV and as inline action lists.

CSV format (PyTorch ``PipelineScheduleMulti._dump_csv`` / ``_load_csv``,
``torch/distributed/pipelining/schedules.py``): row i is rank i, one cell per
step, written by :mod:`csv` with each action's torch notation; an empty cell
is an idle step. Rows may differ in length. ``format="compute_only"``
rejects p2p actions, as torch's ``_load_csv(format="compute_only")`` lowering
does; ``"compute_comms"`` accepts them.

Inline forms (for YAML specs and tests): ``{rank: "0F0 0F1 0B0 ..."}``,
``{rank: ["0F0", "0F1", ...]}``, ``["0F0 0F1 ...", "1F0 ..."]`` (index =
rank) or a list of lists. Tokens are separated by whitespace and/or commas;
``_`` or ``.`` marks an idle step.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Literal

from schedsim.pipeline.actions import (
    COMM_TYPES,
    PipelineOrder,
    ScheduleAction,
    parse_action,
)

__all__ = [
    "dumps_csv",
    "format_order",
    "loads_csv",
    "parse_order",
    "read_csv",
    "write_csv",
]

CsvFormat = Literal["compute_only", "compute_comms"]
_IDLE_TOKENS = frozenset({"", "_", "."})


#: Longest cell read as an action (the longest action, an overlapped pair such as ``(0F7;7B3)OVERLAP_F_B``, has
#: 20 characters); a longer one is refused and quoted only in part: a line of an unrelated file is not echoed.
MAX_CELL = 32


def _parse_cell(cell: str, where: str) -> ScheduleAction | None:
    text = cell.strip()
    if text in _IDLE_TOKENS:
        return None
    if len(text) > MAX_CELL:
        from schedsim.errors import printable

        raise ValueError(f"{where}: a cell of {len(text):,} characters ({printable(text, 20)!r}) is not a pipeline "
                         "action (is it the right file?)")
    try:
        return parse_action(text)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _check_format(order: PipelineOrder, fmt: CsvFormat, source: str) -> None:
    if fmt not in ("compute_only", "compute_comms"):
        raise ValueError(f"format must be 'compute_only' or 'compute_comms', got {fmt!r}")
    if fmt == "compute_only":
        for rank, acts in order.items():
            for step, act in enumerate(acts):
                if act is not None and act.type in COMM_TYPES:
                    raise ValueError(
                        f"{source}: rank {rank}, step {step}: {act} is a p2p action but "
                        "format='compute_only'; fix: read with format='compute_comms' "
                        "or drop the SEND/RECV cells"
                    )


def loads_csv(text: str, *, format: CsvFormat = "compute_only") -> PipelineOrder:
    """Parse PyTorch pipeline-CSV text.

    Parameters
    ----------
    text : str
        CSV content; row i is rank i.
    format : {"compute_only", "compute_comms"}, default "compute_only"
        As torch's ``_load_csv``; compute_only rejects SEND/RECV cells.

    Returns
    -------
    PipelineOrder
        ``{rank: [action or None, ...]}`` with the row lengths kept.

    Raises
    ------
    ValueError
        A malformed cell (message gives row, column and the valid form) or a
        p2p action under compute_only.
    """
    order: PipelineOrder = {}
    try:
        for rank, row in enumerate(csv.reader(io.StringIO(text))):
            order[rank] = [_parse_cell(cell, f"row {rank} (rank {rank}), column {col}")
                           for col, cell in enumerate(row)]
    except csv.Error as e:  # a field past the csv module's limit (131,072 characters), a NUL ...
        raise ValueError(f"row {len(order)}: not CSV ({e})") from None
    _check_format(order, format, "csv")
    return order


def read_csv(path: str | os.PathLike[str] | IO[str], *, format: CsvFormat = "compute_only") -> PipelineOrder:
    """Read a PyTorch pipeline CSV file (``_dump_csv`` output).

    Parameters
    ----------
    path : path or text file
        File to read.
    format : {"compute_only", "compute_comms"}, default "compute_only"

    Returns
    -------
    PipelineOrder

    Raises
    ------
    ValueError
        See :func:`loads_csv`; the message is prefixed with the file name.
    SchedsimError
        The file is missing, not a regular file, past the size cap or not UTF-8
        (:func:`schedsim.io.read_text_input`).
    """
    if hasattr(path, "read"):
        return loads_csv(path.read(), format=format)
    from schedsim.io import read_text_input

    text = read_text_input(path, "csv")  # a regular UTF-8 file within the size cap
    try:
        return loads_csv(text, format=format)
    except ValueError as exc:
        raise ValueError(f"{os.fspath(path)}: {exc}") from None


def dumps_csv(order: Mapping[int, Sequence[ScheduleAction | None]]) -> str:
    """Render an order as PyTorch pipeline-CSV text.

    Parameters
    ----------
    order : mapping of int to sequence of action or None
        Ranks must be 0..n-1 (row index = rank, as torch reads it).

    Returns
    -------
    str
        One ``\\r\\n``-terminated row per rank (the :mod:`csv` default, as torch).

    Raises
    ------
    ValueError
        Ranks are not 0..n-1.
    """
    if sorted(order) != list(range(len(order))):
        raise ValueError(f"CSV rows are ranks 0..n-1, got ranks {sorted(order)}; fix: renumber ranks")
    buf = io.StringIO()
    writer = csv.writer(buf)
    for rank in range(len(order)):
        writer.writerow(["" if a is None else str(a) for a in order[rank]])
    return buf.getvalue()


def write_csv(
    order: Mapping[int, Sequence[ScheduleAction | None]],
    path: str | os.PathLike[str] | IO[str],
) -> None:
    """Write an order as a PyTorch pipeline CSV (loadable by torch's ``_load_csv``).

    Parameters
    ----------
    order : mapping of int to sequence of action or None
    path : path or text file

    Raises
    ------
    ValueError
        Ranks are not 0..n-1.
    SchedsimError
        ``path`` names a folder, FIFO or device (:func:`schedsim.io.output_target`).
    """
    text = dumps_csv(order)
    if hasattr(path, "write"):
        path.write(text)
        return
    from schedsim.io import atomic_write_bytes

    # all or nothing; a FIFO or device is refused, - is standard output
    atomic_write_bytes(os.fspath(path), text.encode("utf-8"))


def _tokens(row: str | Iterable[str]) -> list[str]:
    if isinstance(row, str):
        return row.replace(",", " ").split()
    return [str(t) for t in row]


def parse_order(
    spec: Mapping[int | str, str | Sequence[str]] | Sequence[str | Sequence[str]],
) -> PipelineOrder:
    """Parse an inline per-rank action list.

    Parameters
    ----------
    spec : mapping or sequence
        ``{rank: "0F0 0F1 0B0"}``, ``{rank: ["0F0", ...]}``, or a sequence whose
        index is the rank, of strings or of lists of tokens. In a string,
        tokens are separated by spaces and/or commas; ``_`` or ``.`` (or an
        empty list item) is an idle step. Rank keys may be strings of digits
        (as YAML may give them).

    Returns
    -------
    PipelineOrder

    Raises
    ------
    ValueError
        A malformed token (message gives rank, position and the valid form) or
        a rank key that is not an integer.

    Examples
    --------
    >>> parse_order({0: "0F0 _ 0B0"})
    {0: [0F0, None, 0B0]}
    """
    items: Iterable[tuple[object, str | Sequence[str]]]
    items = spec.items() if isinstance(spec, Mapping) else enumerate(spec)
    order: PipelineOrder = {}
    for key, row in items:
        try:
            rank = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"rank key {key!r} is not an integer; fix: use {{0: '0F0 ...', 1: ...}}") from None
        order[rank] = [_parse_cell(tok, f"rank {rank}, position {i}") for i, tok in enumerate(_tokens(row))]
    return dict(sorted(order.items()))


def format_order(order: Mapping[int, Sequence[ScheduleAction | None]]) -> dict[int, str]:
    """Inverse of :func:`parse_order`: ``{rank: "0F0 _ 0B0"}``.

    Parameters
    ----------
    order : mapping of int to sequence of action or None

    Returns
    -------
    dict of int to str
        Space-separated tokens, ``_`` for idle steps.
    """
    return {r: " ".join("_" if a is None else str(a) for a in order[r]) for r in sorted(order)}
