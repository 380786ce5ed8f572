"""Oracle: :func:`schedsim.report.chrome._rows_json`, :func:`schedsim.report.chrome._cut` and
:func:`schedsim.report.chrome._json_strs` as they were before the compiled ``_cwaves.join_rows``, ``_cwaves.cut`` and
``_cwaves.item_bounds`` took them over: numpy forms, the rows' pieces laid side by side as the bytes of one matrix per
:data:`ROWS` rows whose NUL padding is then dropped, each piece cut out of a sliding window over the text, and the
strings found by their quotes after an even run of backslashes (the 100k-op trace.json of ``overlap_gen.yaml``:
~0.17 CPU s of ``_rows_json``, its ``bytes.replace`` and ``_cut``, ~0.07 of ``_json_strs``), and the numbers' texts
found at the array's commas (:func:`json_values`); and the Python loop
over a counter's samples of :func:`schedsim.report.chrome._rate_samples` that ``_cwaves.held_samples`` runs
(:func:`held_samples`). The tests hold the package's forms equal to these, byte for byte."""

from __future__ import annotations

import numpy as np

__all__ = ["ROWS", "cut", "held_samples", "json_strs", "json_values", "rows_json"]

ROWS = 32_768  # rows of a columnar block joined at once: bounds the bytes held while joining


def cut(raw: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The pieces ``raw[starts[i]:ends[i]]`` of ``raw`` (uint8) as a bytes array (numpy ``S``; shape (n,), n >= 1)."""
    lens = ends - starts
    w = max(int(lens.max()), 1)
    m = np.lib.stride_tricks.sliding_window_view(np.concatenate([raw, np.zeros(w, np.uint8)]), w)[starts]
    m *= np.arange(w, dtype=np.int32) < lens[:, None]  # the bytes past each piece's end: NUL
    return m.view(f"S{w}").reshape(-1)


def rows_json(pieces: list[bytes | np.ndarray], n: int) -> bytes:
    """``n`` JSON texts joined by commas, row ``i`` the concatenation of each piece's: a ``bytes`` piece is the
    same in every row, an array piece (numpy ``S``, shape (n,)) gives each row its own (``b""``: nothing).
    The pieces are laid side by side as the bytes of one matrix per :data:`ROWS` rows, whose NUL padding is then
    dropped (JSON text holds no NUL byte: orjson writes it ``\\u0000``)."""
    out = []
    for lo in range(0, n, ROWS):
        hi = min(n, lo + ROWS)
        cols = []
        for p in [*pieces, b","]:
            if isinstance(p, bytes):
                cols.append(np.broadcast_to(np.frombuffer(p, np.uint8), (hi - lo, len(p))))
            else:
                cols.append(np.ascontiguousarray(p[lo:hi]).view(np.uint8).reshape(hi - lo, p.dtype.itemsize))
        out.append(np.concatenate(cols, axis=1).tobytes().replace(b"\0", b""))
    return b"".join(out)[:-1]


def json_strs(xs: list[str]) -> np.ndarray:
    """The JSON text of each string of ``xs`` (quotes included) as a bytes array (numpy ``S``; shape (n,)), from
    one :func:`dumps_json` of the list: the strings are between its quotes that do not follow an odd number of
    backslashes (those that do are escaped, inside a string), the first of each pair opening one."""
    from schedsim.sim.timeline import dumps_json

    if not xs:
        return np.zeros(0, "S1")
    raw = np.frombuffer(dumps_json(list(xs)), np.uint8)
    pos = np.arange(len(raw))
    last_other = np.maximum.accumulate(np.where(raw != ord("\\"), pos, -1))  # last byte not a backslash, to each
    q = np.flatnonzero(raw == ord('"'))
    q = q[(q - 1 - last_other[q - 1]) % 2 == 0]  # the raw[0] == "[": q >= 1
    return cut(raw, q[0::2], q[1::2] + 1)


def held_samples(xs: list[float]) -> list[bool]:
    """Per sample of ``xs``, whether it is kept: not within 1e-9 (relative) of the last one kept, the first always
    (``_rate_samples``' loop before ``_cwaves.held_samples``)."""
    keep = [True] * len(xs)
    kept = None
    for i, x in enumerate(xs):
        if kept is not None and abs(kept - x) <= 1e-9 * max(1.0, abs(x)):
            keep[i] = False  # unchanged: a counter sample holds until the next one
        else:
            kept = x
    return keep


def json_values(a: np.ndarray) -> np.ndarray:
    """The JSON text of each value of the numeric array ``a`` (shape (n,)) as ``dumps_json`` writes it (NaN and
    inf as ``null``), as a bytes array (numpy ``S``; shape (n,)): the items between the array's commas."""
    from schedsim.sim.timeline import dumps_json

    if not len(a):
        return np.zeros(0, "S1")
    raw = np.frombuffer(dumps_json(np.ascontiguousarray(a)), np.uint8)  # [v,v,...,v]
    ends = np.flatnonzero((raw == ord(",")) | (raw == ord("]")))
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 1, ends[:-1] + 1
    return cut(raw, starts, ends)
