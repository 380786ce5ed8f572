"""Oracle: the earlier forms of two per-op column passes around the ``waves`` loop, which the package replaced with
faster forms that give the same values bit for bit (``tests/oracle/test_column_forms.py`` compares them):

* :func:`tensor_duty`: :func:`schedsim.gpu.power.tensor_duty` with a copy of every selected GEMM row and the union's
  temporaries each a fresh array (the package skips the copies when every GEMM row counts and writes the union's
  temporaries into one buffer); the rows it reads are the package's (:func:`schedsim.gpu.power.tensor_gemm_rows`);
* :func:`one_entry`: :func:`schedsim.sim.waves_columns._one_entry` comparing the entries read after compressing them
  out of the buffer (the package compares through the mask: a compress of alternating kernel kinds, a million
  entries, was ~15x slower).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedsim.gpu.power import tensor_gemm_rows

I64 = np.int64


def tensor_duty(tl: Any, fp32_peak_flops: float, gap_s: float = 0.0, below: float = 0.0,
                repeat: np.ndarray | None = None) -> float:
    """Largest over ranks of (union of tensor-core GEMM intervals) / (makespan + ``gap_s``), in [0, 1]: the
    package's definition (:func:`schedsim.gpu.power.tensor_duty`), in its earlier form."""
    ms = tl.makespan_s
    rows = tensor_gemm_rows(tl, fp32_peak_flops, repeat) if len(tl) and ms > 0 else None  # unchanged: shared
    if rows is None:
        return 0.0
    c = tl.columns
    at, start, end, sel = rows
    rank, start, end = c.rank[at[sel]], start[sel], end[sel]
    bound = np.bincount(rank - rank.min(), weights=end - start).max() / (ms + gap_s)
    if bound < below:
        return float(bound)
    if len(rank) > 1 and not bool(((rank[1:] > rank[:-1]) | ((rank[1:] == rank[:-1]) & (start[1:] >= start[:-1])))
                                  .all()):
        order = np.lexsort((start, rank))
        rank, start, end = rank[order], start[order], end[order]
    off = (rank - rank.min()).astype(np.float64) * (2.0 * (end.max() - start.min()) + 1.0)
    s, e = start + off, end + off
    reach = np.maximum.accumulate(e)
    prev = np.concatenate(([-np.inf], reach[:-1]))
    covered = np.maximum(0.0, e - np.maximum(s, prev))
    busy = np.bincount(rank - rank.min(), weights=np.minimum(covered, e - s))
    return float(min(1.0, busy.max() / (ms + gap_s)))


def one_entry(a: np.ndarray, read: np.ndarray | None = None) -> np.ndarray:
    """``a`` as one entry when all its entries (those of ``read``, when given) are the same value bit for bit, else
    ``a`` itself: the package's rule (:func:`schedsim.sim.waves_columns._one_entry`), in its earlier form."""
    if len(a) < 2:
        return a
    bits = a.view(I64) if a.dtype == np.float64 else a
    if read is not None and not bool(read.all()):
        bits = bits[read]
        if not len(bits):
            return a[:1].copy()
    if bool((bits == bits[0]).all()):
        j = 0 if read is None else int(np.argmax(read))
        return a[j:j + 1].copy()
    return a
