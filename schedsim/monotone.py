"""Monotone fits: the closest non-decreasing sequence or grid to measured values, in the max norm.

Used where a measured table must not predict that more work takes less time: GEMM time surfaces
(:mod:`schedsim.gpu.gemm`) and collective busbw tables (:mod:`schedsim.network.links`).
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["isotonic", "isotonic_1d"]


def isotonic_1d(y: list[float]) -> list[float]:
    """:func:`isotonic` of a sequence: the closest non-decreasing sequence in the max norm (unchanged if ``y``
    already never decreases)."""
    hi, lo = list(itertools.accumulate(y, max)), list(itertools.accumulate(reversed(y), min))[::-1]
    return [(a + b) / 2 for a, b in zip(hi, lo, strict=True)]


def isotonic(y: Any) -> Any:
    """L∞ isotonic regression of a grid ``y`` (an n-d numpy array) under the order "every index <=": the
    average of its least non-decreasing majorant (max over the indices below, a running max along each axis)
    and greatest non-decreasing minorant (min over the indices above). Of all grids that never decrease
    along any axis it is one of those closest to ``y`` in the max norm, and it is ``y`` itself where ``y``
    already never decreases (the "Basic" L∞ isotonic regression: Q. F. Stout, "Strict L∞ isotonic
    regression", J. Optim. Theory Appl. 152 (2012) 121-135; V. A. Ubhaya, "Isotone optimization, I",
    J. Approx. Theory 12 (1974) 146-159)."""
    import numpy as np

    hi, lo = y, y[tuple(slice(None, None, -1) for _ in range(y.ndim))]
    for ax in range(y.ndim):
        hi = np.maximum.accumulate(hi, axis=ax)
        lo = np.minimum.accumulate(lo, axis=ax)
    return (hi + lo[tuple(slice(None, None, -1) for _ in range(y.ndim))]) / 2
