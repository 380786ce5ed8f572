"""The GEMM part of the cost model (:class:`GemmCost`): the profile's measured GEMM table as a time surface that never
decreases as m, n or k grows (:class:`GemmSurface`), and its per-shape kernel rows (grid, occupancy, split-K
reduction, wave tail, host call, CUDA-graph node and fork times).

The rule (how the surface is fitted and read) is in :mod:`schedsim.gpu.cost`'s docstring, ``GEMM``;
:class:`GemmCost` builds one :class:`GemmSurface` per dtype on first use.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import TYPE_CHECKING, Any

from schedsim.monotone import isotonic

if TYPE_CHECKING:
    from schedsim.graph.ops import Op
    from schedsim.hardware.profile import HardwareProfile

__all__ = ["GemmCost", "GemmSurface", "idw_times", "transfer_times"]

#: 16-bit GEMM dtypes run the same cuBLAS kernel families (grid and tiles): a shape measured in one stands in for
#: the other where the profile has no row of its own (one H200: bf16 and fp16 2048x1024x8192 both ran
#: 128 CTAs, 44.3 and 46.6 µs; [evidence: elementwise-host])
_SIBLING = {"bf16": "fp16", "fp16": "bf16"}

#: A GEMM shape's key in the profile's per-shape rows: (dtype, m·batch, n, k).
ShapeKey = tuple[str, int, int, int]


def shape_key(op: Op) -> ShapeKey:
    """A GEMM's key in the profile's per-shape rows: (dtype, m·batch, n, k), dtype ``fp32`` when unset."""
    return (op.dtype or "fp32", op.m * op.batch, op.n, op.k)


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


class GemmCost:
    """Seconds and kernel sizes of GEMMs on one profile: its ``gemm`` section (measured table, per-shape kernel rows)
    and ``launch.graph_fork_edges``. Times are in seconds; keys are :func:`shape_key` s. Pure and deterministic;
    caches each dtype's surface."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self._gemm: dict[str, list[tuple[float, float, float, int, int, int, float]]] = {}
        logs: dict[ShapeKey, list[float]] = {}
        for dtype, m, n, k, ms in profile.gemm.entries:
            rate = 2.0 * m * n * k / (ms * 1e-3)
            self._gemm.setdefault(dtype, []).append((math.log2(m), math.log2(n), math.log2(k), m, n, k, rate))
            logs.setdefault((dtype, m, n, k), []).append(math.log(ms * 1e-3))
        self._rows = {key: math.exp(sum(v) / len(v)) for key, v in logs.items()}  # seconds per measured shape
        self._ctas: dict[ShapeKey, int] = {(d, m, n, k): c for d, m, n, k, c in profile.gemm.ctas}
        self._occ: dict[ShapeKey, int] = {(d, m, n, k): c for d, m, n, k, c in profile.gemm.ctas_per_sm}
        self._reduce: dict[ShapeKey, tuple[int, float]] = {
            (d, m, n, k): (c, us * 1e-6) for d, m, n, k, c, us in profile.gemm.reduce}
        self._tail: dict[ShapeKey, float] = {(d, m, n, k): us * 1e-6 for d, m, n, k, us in profile.gemm.tail}
        self.tail_default = profile.gpu.wave_tail_us * 1e-6
        self._tail_near: dict[ShapeKey, float] = {}  # nearest-row answers, by shape
        self._call: dict[ShapeKey, float] = {(d, m, n, k): x for d, m, n, k, x in profile.gemm.call}
        self._memset: dict[ShapeKey, float] = {(d, m, n, k): us * 1e-6 for d, m, n, k, us in profile.gemm.memset}
        # shapes with any per-shape kernel row: a 16-bit GEMM none of whose rows exist takes its sibling's, all of them
        self._kernel_shapes = {*self._ctas, *self._occ, *self._reduce, *self._call, *self._tail, *self._memset}
        self._fork_rows: dict[ShapeKey, float] = {
            (d, m, n, k): us * 1e-6 for d, m, n, k, us in profile.launch.graph_fork_edges}
        self._graph_rows: dict[ShapeKey, tuple[float, float]] = {
            (d, m, n, k): (w * 1e-3, c * 1e-3) for d, m, n, k, w, c in profile.gemm.graph}
        self._surfaces: dict[str, GemmSurface | None] = {}
        self._ref: GemmCost | None = None

    def rate(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """GEMM rate in FLOP/s, 2·m·n·k / :meth:`time`, or None if the table has no entry for ``dtype``."""
        t = self.time(dtype, m, n, k)
        return None if t is None else 2.0 * m * n * k / t

    def time(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """Seconds of an m×n×k GEMM (m, n, k >= 1) from the profile's table (:mod:`schedsim.gpu.cost`), before the
        kernel floor: a measured shape's own time (:meth:`row`), else the monotone surface's, which is never less
        for a larger m, n or k. None if the table has no entry for ``dtype``."""
        row = self._rows.get((dtype, m, n, k))
        if row is not None:
            return row
        surf = self._surface(dtype)
        return None if surf is None else surf.time(m, n, k)

    def row(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """Seconds the profile measured for exactly this GEMM shape (``gemm.entries``; the geometric mean of its
        rows when measured more than once), None if it is not measured."""
        return self._rows.get((dtype, m, n, k))

    def _surface(self, dtype: str) -> GemmSurface | None:
        if dtype not in self._surfaces:
            self._surfaces[dtype] = self._build_surface(dtype)
        return self._surfaces[dtype]

    def _build_surface(self, dtype: str) -> GemmSurface | None:
        """The dtype's surface. With ``gemm.shape_curve_from``, a node's estimate is the reference profile's time
        there scaled by the own nearest measured shape's time over the reference's time of that shape (the shape
        curve of the reference, the level of this GPU)."""
        pts = self._gemm.get(dtype)
        if not pts:
            return None
        own = [(p[3], p[4], p[5], 2.0 * p[3] * p[4] * p[5] / p[6]) for p in pts]
        ref_name = self.profile.gemm.shape_curve_from
        if ref_name:
            if self._ref is None:
                from schedsim.hardware.profile import load_profile

                self._ref = GemmCost(load_profile(ref_name))
            ref = self._ref._surface(dtype)
            if ref is not None:
                return GemmSurface(own, estimate=lambda shapes, fit: transfer_times(shapes, fit, ref),
                                    extra_axes=(ref.axes[0], ref.axes[1], ref.axes[2]))
        return GemmSurface(own, estimate=idw_times)

    def _kernel_key(self, op: Op) -> ShapeKey:
        """The key of ``op``'s per-shape kernel rows (grid, occupancy, reduction, host call, tail): its own shape's,
        or, when fp16 or bf16 has no row of any of these at that shape and the other 16-bit dtype has, the other's
        (:data:`_SIBLING`): all rows of one kernel come from one measured dtype, never a mix."""
        key = shape_key(op)
        if key[0] in _SIBLING and key not in self._kernel_shapes:
            other = (_SIBLING[key[0]], *key[1:])
            if other in self._kernel_shapes:
                return other
        return key

    def measured_ctas(self, op: Op) -> int | None:
        """The CTAs the profile's ``gemm.ctas`` records for exactly this GEMM's (dtype, m·batch, n, k) (for fp16 or
        bf16 without a row, the other one's at that shape), else None.

        Measured by ``schedsim calibrate`` from a Kineto trace (grid x·y·z of the GEMM kernel); e.g. on one H200
        (torch 2.11, cuBLAS) fp32 2048×1024×8192 ran as 8×8×2 = 128 CTAs (256×128 tiles, split-K 2)
        where the 128×128-tile rule gives a full wave ([evidence: coresidence]).
        """
        if not self._ctas:
            return None
        got: int | None = self._ctas.get(self._kernel_key(op))
        return got

    def ctas_per_sm(self, op: Op) -> int:
        """CTAs of GEMM ``op``'s kernel that one SM holds at once: the profile's ``gemm.ctas_per_sm`` row for its
        (dtype, m·batch, n, k), else 1 (rule cta-count of :mod:`schedsim.gpu.rules`)."""
        if not self._occ:
            return 1
        got = self._occ.get(self._kernel_key(op))
        return 1 if got is None else int(got)

    def reduce_kernel(self, op: Op) -> tuple[int, float] | None:
        """``(SM slots, seconds alone)`` of GEMM ``op``'s second kernel (cuBLAS's split-K reduction): the profile's
        ``gemm.reduce`` row for its (dtype, m·batch, n, k), else None (one kernel). Measured by ``schedsim
        calibrate`` from a Kineto trace; e.g. one H200, [evidence: stream-dispatch]: fp32 2048×1024×8192 runs a 128-CTA
        main kernel (0.70 ms) and a 128-CTA ``split_k`` kernel of 6.3 µs
        ([evidence: stream-dispatch]).
        """
        if not self._reduce:
            return None
        got: tuple[int, float] | None = self._reduce.get(self._kernel_key(op))
        return got

    def wave_tail(self, op: Op) -> float:
        """Seconds of GEMM ``op``'s ragged last-wave end that a waiting compute kernel takes back (rule wave-tail
        of :mod:`schedsim.gpu.rules`): the profile's ``gemm.tail`` row for a GEMM of that (dtype, m·batch, n,
        k); for a GEMM without one, the row of the nearest measured shape of its dtype (least
        |Δlog2 m| + |Δlog2 n| + |Δlog2 k|; the mean of the rows tied nearest; fp16 and bf16 stand in for each
        other when a dtype has no row); else ``gpu.wave_tail_us`` (:attr:`tail_default`).
        Fitted by ``schedsim calibrate`` from the GEMM on 8 streams against back to back; e.g. one H200,
        [evidence: wave-tail]: fp32 1024×512×8192 8.5 µs, bf16 4096×4096×1024 5.6 µs
        ([evidence: wave-tail]). Why the nearest row: the tail follows the cuBLAS kernel,
        which follows dtype and shape, not one constant: bf16 with k = 8192 fitted 0–1 µs where fp32 fitted
        4–9 µs, and the median default (5.5 µs) predicted bf16 2048×1024×8192 on 8 streams 10–12 % short (one
        H200, [evidence: elementwise-host])."""
        if not self._tail:
            return self.tail_default
        key = self._kernel_key(op)
        got = self._tail.get(key)
        if got is None:
            got = self._tail_near.get(key)
        if got is None:
            got = self._tail_near[key] = self._nearest_tail(key)
        return got

    def call_factor(self, op: Op) -> float | None:
        """GEMM ``op``'s ``gemm.call`` row: its host call's cost in units of ``launch.eager_per_op_us``, else None."""
        if not self._call:
            return None
        return self._call.get(self._kernel_key(op))

    def memset_gap(self, op: Op) -> float | None:
        """Seconds from GEMM ``op``'s memset to its main kernel on an idle GPU: its ``gemm.memset`` row (the call
        launches a memset, cuBLAS's split-K workspace, then the main kernel that much later; rule host-issue), else
        None (no memset). Measured by ``schedsim calibrate`` from a Kineto trace of calls on an idle GPU, the
        session's first left out (:func:`executor.calibrate_gemm.memset_gap_us`); one H100: fp16
        4096×4096×512 9.4-13.0 µs, bf16 4096³ 7.8-10.5 µs, behind another GEMM 1.5 µs (docs/validation.md, "a
        split-K GEMM's memset on an idle GPU")."""
        if not self._memset:
            return None
        return self._memset.get(self._kernel_key(op))

    def _nearest_tail(self, key: ShapeKey) -> float:
        dtype = key[0]
        if dtype in _SIBLING and not any(d == dtype for d, *_ in self._tail):
            dtype = _SIBLING[dtype]  # no row of its own: the other 16-bit dtype's (_SIBLING)
        rows = [(abs(math.log2(m / key[1])) + abs(math.log2(n / key[2])) + abs(math.log2(k / key[3])), t)
                for (d, m, n, k), t in self._tail.items() if d == dtype and min(key[1:]) > 0]
        if not rows:
            return self.tail_default
        best = min(r[0] for r in rows)
        near = [t for dist, t in rows if dist <= best + 1e-9]
        return sum(near) / len(near)

    def ctas(self, op: Op) -> int:
        """CTAs of one launch of GEMM ``op``: the measured grid when the profile has this shape
        (:meth:`measured_ctas`), else 128×128 output tiles times the split-K factor.

        ``gpu.sms`` missing counts as 132 (H100/H200 SXM) for the split-K rule.
        """
        got = self.measured_ctas(op)
        if got is not None:
            return got
        sms = self.profile.gpu.sms or 132
        tiles = max(1, -(-op.m * op.batch // 128) * -(-op.n // 128))  # an empty GEMM still launches one CTA
        if tiles < sms:
            tiles *= min(-(-sms // tiles), max(1, -(-op.k // 256)))
        return tiles

    def graph_row(self, op: Op) -> tuple[float, float] | None:
        """``(warm_s, cold_s)`` of one launch of GEMM ``op`` as a CUDA-graph node (profile ``gemm.graph``, exact
        (dtype, m·batch, n, k)), or None."""
        if not self._graph_rows:
            return None
        return self._graph_rows.get(shape_key(op))

    def fork_row(self, op: Op) -> float | None:
        """Seconds of a CUDA-graph fork at GEMM ``op``: its shape's ``launch.graph_fork_edges`` row, else None."""
        if not self._fork_rows:
            return None
        return self._fork_rows.get(shape_key(op))
