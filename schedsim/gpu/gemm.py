"""The measured GEMM table of a profile as a time surface that never decreases as m, n or k grows.

The rule (how the surface is fitted and read) is in :mod:`schedsim.gpu.cost`'s docstring, ``GEMM``; the cost model
builds one :class:`GemmSurface` per dtype on first use.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any

from schedsim.monotone import isotonic

__all__ = ["GemmSurface", "idw_times", "transfer_times"]


def idw_times(shapes: Any, fit: Any) -> Any:
    """Seconds at ``shapes`` (rows log2 m, log2 n, log2 k) from measured ``fit`` rows (log2 m, log2 n, log2 k,
    seconds): 2·m·n·k over the FLOP/s interpolated by inverse-distance weighting (power 2) of log(FLOP/s) over
    the 4 nearest measured shapes (a measured shape gives its own time)."""
    import numpy as np

    log_rate = np.log(2.0) + (fit[:, 0] + fit[:, 1] + fit[:, 2]) * np.log(2.0) - np.log(fit[:, 3])
    d2 = ((shapes[:, None, :] - fit[None, :, :3]) ** 2).sum(axis=2)
    near = np.argsort(d2, axis=1, kind="stable")[:, :4]
    dn = np.take_along_axis(d2, near, axis=1)
    exact = dn[:, 0] == 0.0
    w = 1.0 / np.where(dn == 0.0, 1.0, dn)
    lr = (w * log_rate[near]).sum(axis=1) / w.sum(axis=1)
    lr = np.where(exact, log_rate[near[:, 0]], lr)
    return np.exp(np.log(2.0) + shapes.sum(axis=1) * np.log(2.0) - lr)


def transfer_times(shapes: Any, fit: Any, ref: GemmSurface) -> Any:
    """Seconds at ``shapes``: the reference surface's time there times own/reference time of the own nearest
    measured shape (``gemm.shape_curve_from``)."""
    import numpy as np

    d2 = ((shapes[:, None, :] - fit[None, :, :3]) ** 2).sum(axis=2)
    near = fit[np.argmin(d2, axis=1)]
    ref_at = np.array([ref.time(*(2.0 ** s)) for s in shapes])
    ref_near = np.array([ref.time(*(2.0 ** r[:3])) for r in near])
    return ref_at * near[:, 3] / ref_near


class GemmSurface:
    """One dtype's GEMM time surface, non-decreasing in m, n and k (:mod:`schedsim.gpu.cost` gives the rule).

    ``measured``: (m, n, k, seconds) rows; ``estimate(shapes, fit)`` gives the seconds at grid nodes (rows of
    log2 m, n, k) from the monotone fit of the measured rows; ``extra_axes`` (log2 m, n and k arrays) adds
    node values per axis.
    """

    def __init__(self, measured: list[tuple[int, int, int, float]], estimate: Any,
                 extra_axes: tuple[Any, ...] = ()) -> None:
        import numpy as np

        pts = np.array([[math.log2(m), math.log2(n), math.log2(k), t] for m, n, k, t in measured])
        le = (pts[:, None, :3] <= pts[None, :, :3]).all(axis=2)  # le[i, j]: shape i <= shape j on every axis
        lt = np.log(pts[:, 3])
        # the measured times, made monotone among themselves first (a no-op where they already are)
        fit_t = np.exp((np.where(le, lt[:, None], -np.inf).max(axis=0) + np.where(le.T, lt[:, None], np.inf)
                        .min(axis=0)) / 2)
        fit = np.column_stack([pts[:, :3], fit_t])
        # sorted distinct values without np.unique, whose module imports numpy.ma (a cold-start cost)
        self.axes = tuple(np.array(sorted(set(np.concatenate([pts[:, a], *extra_axes[a:a + 1]]).tolist())))
                          for a in range(3))
        grid = np.stack(np.meshgrid(*self.axes, indexing="ij"), axis=-1).reshape(-1, 3)
        est = np.log(estimate(grid, fit))
        # held between the measured times below and above each node, so that the fit keeps measured shapes
        below = (fit[None, :, :3] <= grid[:, None, :]).all(axis=2)
        above = (fit[None, :, :3] >= grid[:, None, :]).all(axis=2)
        lf = np.log(fit[:, 3])
        est = np.clip(est, np.where(below, lf, -np.inf).max(axis=1), np.where(above, lf, np.inf).min(axis=1))
        self.log_t = isotonic(est.reshape(tuple(len(a) for a in self.axes)))
        self._ax = [a.tolist() for a in self.axes]

    def time(self, m: float, n: float, k: float) -> float:
        """Seconds of an m×n×k GEMM: multilinear interpolation of log time in log2 m, n, k; outside the nodes of
        an axis the time is in proportion to that dimension (the edge node's FLOP/s)."""
        corners: list[tuple[int, float]] = []  # per axis: (lower index, weight of the upper one)
        extra = 0.0
        for q, ax in zip((math.log2(m), math.log2(n), math.log2(k)), self._ax, strict=True):
            if q <= ax[0]:
                corners.append((0, 0.0))
                extra += q - ax[0]
            elif q >= ax[-1]:
                corners.append((len(ax) - 1, 0.0))
                extra += q - ax[-1]
            else:
                i = bisect.bisect_right(ax, q) - 1
                corners.append((i, (q - ax[i]) / (ax[i + 1] - ax[i])))
        val = 0.0
        for bits in itertools.product((0, 1), repeat=3):
            w = 1.0
            idx = []
            for b, (i, f) in zip(bits, corners, strict=True):
                w *= f if b else 1.0 - f
                idx.append(i + b if b else i)
            if w:
                val += w * float(self.log_t[tuple(idx)])
        return math.exp(val) * 2.0 ** extra
