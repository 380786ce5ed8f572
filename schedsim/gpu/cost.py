"""Cost model: the solo (uncontended) duration of each op, from a hardware profile.

* **GEMM** (``matmul``): the measured table of the profile, for the op's dtype, as a time surface that never decreases
  as m, n or k grows (:class:`schedsim.gpu.gemm.GemmSurface`). On the grid of every measured m, n and k value, each
  node's estimate is the achieved FLOP/s interpolated by inverse-distance weighting (power 2) of log(FLOP/s) over the
  4 nearest measured shapes in (log2 m, log2 n, log2 k) space, held between the measured times of the shapes below and
  above it; the grid is then made monotone by L∞ isotonic regression of log time (:func:`schedsim.monotone.isotonic`),
  and a shape is read off it by multilinear interpolation of log time in log2 m, n, k (outside the measured values of
  an axis the FLOP/s of the nearest node stays: time in proportion to that dimension). A measured shape returns its
  measured time (the geometric mean of its rows if measured more than once), also where the table has a larger shape
  measured faster: such rows are another cuBLAS kernel (a different grid), not noise, which the monotone fit would
  pull to one time for both (docs/validation.md, "One-rank collectives and measured GEMM rows").
  Between measured shapes, and beyond them, the surface never decreases; a time can drop only onto or off a
  measured shape that ran faster or slower than the fit there (:meth:`CostModel.gemm_row`).
  time = max(kernel floor, that). With no entry for the dtype it falls back to a roofline: max(floor,
  FLOP / (peak·efficiency), bytes / HBM bw).
* **Generic compute**: ``duration_us`` if given, else the same roofline. A copy, collective or send/recv given
  ``duration_us`` (a replay of an imported trace) takes it too.
* **Collectives and send/recv**: the network model, :class:`schedsim.network.model.NetworkModel` (``CostModel.net``;
  its docstring tells which of NCCL's tuning model and the profile's nccl-tests tables times what).
* **memcpy**: latency + bytes / copy-engine bandwidth of the direction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from schedsim.gpu.gemm import GemmSurface, idw_times, transfer_times
from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS
from schedsim.network.model import NetworkModel

__all__ = ["CostModel", "cost_model", "shared_cost_models"]

#: 16-bit GEMM dtypes run the same cuBLAS kernel families (grid and tiles): a shape measured in one stands in for
#: the other where the profile has no row of its own (one H200: bf16 and fp16 2048x1024x8192 both ran
#: 128 CTAs, 44.3 and 46.6 µs; [evidence: elementwise-host])
_SIBLING = {"bf16": "fp16", "fp16": "bf16"}


def _shape_key(op: Op) -> tuple[str, int, int, int]:
    """A GEMM's key in the profile's per-shape rows: (dtype, m·batch, n, k), dtype ``fp32`` when unset."""
    return (op.dtype or "fp32", op.m * op.batch, op.n, op.k)


#: What an op's solo time depends on, by cost rule (its key in :class:`CostModel`'s cache; the kind keeps two kinds of
#: one rule apart).
_CACHE_KEY: dict[str, Callable[[Op], tuple[object, ...]]] = {
    "gemm": lambda op: (op.kind, op.dtype, op.m, op.n, op.k, op.batch),
    "roofline": lambda op: (op.kind, op.flops, op.nbytes, op.dtype),
    "copy": lambda op: (op.kind, op.direction, op.nbytes),
    "network": lambda op: (op.kind, op.nbytes, op.group),
}


class CostModel:
    """Solo durations in seconds for ops on one profile. Pure and deterministic; caches by shape."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self._floor = profile.gpu.kernel_floor_us * 1e-6
        self._gemm: dict[str, list[tuple[float, float, float, int, int, int, float]]] = {}
        logs: dict[tuple[str, int, int, int], list[float]] = {}
        for dtype, m, n, k, ms in profile.gemm.entries:
            rate = 2.0 * m * n * k / (ms * 1e-3)
            self._gemm.setdefault(dtype, []).append((math.log2(m), math.log2(n), math.log2(k), m, n, k, rate))
            logs.setdefault((dtype, m, n, k), []).append(math.log(ms * 1e-3))
        self._rows = {key: math.exp(sum(v) / len(v)) for key, v in logs.items()}  # seconds per measured shape
        self._ctas: dict[tuple[str, int, int, int], int] = {(d, m, n, k): c for d, m, n, k, c in profile.gemm.ctas}
        self._occ: dict[tuple[str, int, int, int], int] = {
            (d, m, n, k): c for d, m, n, k, c in profile.gemm.ctas_per_sm}
        self._reduce: dict[tuple[str, int, int, int], tuple[int, float]] = {
            (d, m, n, k): (c, us * 1e-6) for d, m, n, k, c, us in profile.gemm.reduce}
        self._tail: dict[tuple[str, int, int, int], float] = {
            (d, m, n, k): us * 1e-6 for d, m, n, k, us in profile.gemm.tail}
        self._tail_default = profile.gpu.wave_tail_us * 1e-6
        self._tail_near: dict[tuple[str, int, int, int], float] = {}  # nearest-row answers, by shape
        self._call: dict[tuple[str, int, int, int], float] = {(d, m, n, k): x for d, m, n, k, x in profile.gemm.call}
        # shapes with any per-shape kernel row: a 16-bit GEMM none of whose rows exist takes its sibling's, all of them
        self._kernel_shapes = {*self._ctas, *self._occ, *self._reduce, *self._call, *self._tail}
        self._fork_rows: dict[tuple[str, int, int, int], float] = {
            (d, m, n, k): us * 1e-6 for d, m, n, k, us in profile.launch.graph_fork_edges}
        self._graph_rows: dict[tuple[str, int, int, int], tuple[float, float]] = {
            (d, m, n, k): (w * 1e-3, c * 1e-3) for d, m, n, k, w, c in profile.gemm.graph}
        self._surfaces: dict[str, GemmSurface | None] = {}
        self._cache: dict[tuple[object, ...], float] = {}
        self._ref: CostModel | None = None
        #: The communication model: collectives and send/recv over the profile's links or topology.
        self.net = NetworkModel(profile, self._floor)
        #: Seconds of one kernel of an op, by its kind's cost rule (:data:`schedsim.kinds.CostRule`).
        self._rule: dict[str, Callable[[Op], float]] = {
            "gemm": self._matmul, "roofline": lambda op: self._roofline(op.flops, op.nbytes, op.dtype),
            "copy": self._memcpy, "network": lambda op: self.net.collective(op.kind, op.nbytes, op.group)}

    # -- compute ---------------------------------------------------------
    def gemm_rate(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """GEMM rate in FLOP/s, 2·m·n·k / :meth:`gemm_time`, or None if the table has no entry for ``dtype``."""
        t = self.gemm_time(dtype, m, n, k)
        return None if t is None else 2.0 * m * n * k / t

    def gemm_time(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """Seconds of an m×n×k GEMM (m, n, k >= 1) from the profile's table (module docstring), before the kernel
        floor: a measured shape's own time (:meth:`gemm_row`), else the monotone surface's, which is never less
        for a larger m, n or k. None if the table has no entry for ``dtype``."""
        row = self._rows.get((dtype, m, n, k))
        if row is not None:
            return row
        surf = self._surface(dtype)
        return None if surf is None else surf.time(m, n, k)

    def gemm_row(self, dtype: str, m: int, n: int, k: int) -> float | None:
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

                self._ref = CostModel(load_profile(ref_name))
            ref = self._ref._surface(dtype)
            if ref is not None:
                return GemmSurface(own, estimate=lambda shapes, fit: transfer_times(shapes, fit, ref),
                                    extra_axes=(ref.axes[0], ref.axes[1], ref.axes[2]))
        return GemmSurface(own, estimate=idw_times)

    def _kernel_key(self, op: Op) -> tuple[str, int, int, int]:
        """The key of ``op``'s per-shape kernel rows (grid, occupancy, reduction, host call, tail): its own shape's,
        or, when fp16 or bf16 has no row of any of these at that shape and the other 16-bit dtype has, the other's
        (:data:`_SIBLING`): all rows of one kernel come from one measured dtype, never a mix."""
        key = _shape_key(op)
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
        if not self._reduce or KINDS[op.kind].cost != "gemm":
            return None
        got: tuple[int, float] | None = self._reduce.get(self._kernel_key(op))
        return got

    def wave_tail(self, op: Op) -> float:
        """Seconds of compute op ``op``'s ragged last-wave end that a waiting compute kernel takes back (rule wave-tail
        of :mod:`schedsim.gpu.rules`): the profile's ``gemm.tail`` row for a GEMM of that (dtype, m·batch, n,
        k); for a GEMM without one, the row of the nearest measured shape of its dtype (least
        |Δlog2 m| + |Δlog2 n| + |Δlog2 k|; the mean of the rows tied nearest; fp16 and bf16 stand in for each
        other when a dtype has no row); else ``gpu.wave_tail_us``.
        Fitted by ``schedsim calibrate`` from the GEMM on 8 streams against back to back; e.g. one H200,
        [evidence: wave-tail]: fp32 1024×512×8192 8.5 µs, bf16 4096×4096×1024 5.6 µs
        ([evidence: wave-tail]). Why the nearest row: the tail follows the cuBLAS kernel,
        which follows dtype and shape, not one constant: bf16 with k = 8192 fitted 0–1 µs where fp32 fitted
        4–9 µs, and the median default (5.5 µs) predicted bf16 2048×1024×8192 on 8 streams 10–12 % short (one
        H200, [evidence: elementwise-host])."""
        if not self._tail or KINDS[op.kind].cost != "gemm":
            return self._tail_default
        key = self._kernel_key(op)
        got = self._tail.get(key)
        if got is None:
            got = self._tail_near.get(key)
        if got is None:
            got = self._tail_near[key] = self._nearest_tail(key)
        return got

    def gemm_call_extra(self, op: Op) -> float:
        """Seconds a GEMM ``op``'s host call costs beyond ``launch.eager_per_op_us`` (one call; rule host-issue of
        :mod:`schedsim.gpu.rules`): ``(x - 1) · eager_per_op_us`` with ``x`` its ``gemm.call`` row, else 0 (and
        0 for every other op). Can be negative (a row below 1)."""
        if not self._call or KINDS[op.kind].cost != "gemm":
            return 0.0
        x = self._call.get(self._kernel_key(op))
        return 0.0 if x is None else (x - 1.0) * self.profile.launch.eager_per_op_us * 1e-6

    def _nearest_tail(self, key: tuple[str, int, int, int]) -> float:
        dtype = key[0]
        if dtype in _SIBLING and not any(d == dtype for d, *_ in self._tail):
            dtype = _SIBLING[dtype]  # no row of its own: the other 16-bit dtype's (_SIBLING)
        rows = [(abs(math.log2(m / key[1])) + abs(math.log2(n / key[2])) + abs(math.log2(k / key[3])), t)
                for (d, m, n, k), t in self._tail.items() if d == dtype and min(key[1:]) > 0]
        if not rows:
            return self._tail_default
        best = min(r[0] for r in rows)
        near = [t for dist, t in rows if dist <= best + 1e-9]
        return sum(near) / len(near)

    def gemm_ctas(self, op: Op) -> int:
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

    def _roofline(self, flops: float, nbytes: float, dtype: str | None) -> float:
        g = self.profile.gpu
        peak = g.peak_tflops.get(dtype or "fp32", g.peak_tflops.get("fp32", 1.0)) * 1e12 * g.gemm_efficiency
        return max(self._floor, flops / peak if flops else 0.0, nbytes / (g.hbm_GBps * 1e9))

    def _matmul(self, op: Op) -> float:
        dtype = op.dtype or "fp32"
        if op.m * op.batch * op.n * op.k == 0:  # an empty GEMM (API-built graphs; the schema needs sizes >= 1)
            return self._floor
        t = self.gemm_time(dtype, op.m * op.batch, op.n, op.k)
        if t is None:
            return self._roofline(op.flops, op.nbytes, dtype)
        return max(self._floor, t)

    def _memcpy(self, op: Op) -> float:
        mc = self.profile.memcpy
        bw = {"h2d": mc.h2d_GBps, "d2h": mc.d2h_GBps}.get(op.direction or "d2d", mc.d2d_GBps / 2.0)
        return mc.latency_us * 1e-6 + op.nbytes / (bw * 1e9)

    def duration(self, op: Op) -> float:
        """Solo duration of ``op`` in seconds (no contention, no launch overhead); ``repeat`` kernels in a row."""
        if op.repeat != 1:
            return op.repeat * self._one(op)
        return self._one(op)

    def _one(self, op: Op) -> float:
        rule = KINDS[op.kind].cost  # the kind's cost rule (schedsim.kinds registry)
        if op.duration_s is not None and rule != "gemm":  # a measured duration (compute, or a replayed trace's op)
            return op.duration_s
        key = _CACHE_KEY[rule](op)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self._rule[rule](op)
        return t

    # -- graph nodes and operands from HBM (rule graph-nodes of schedsim.gpu.rules) ---------------------------
    def graph_row(self, op: Op) -> tuple[float, float] | None:
        """``(warm_s, cold_s)`` of one launch of GEMM ``op`` as a CUDA-graph node (profile ``gemm.graph``, exact
        (dtype, m·batch, n, k)), or None."""
        if KINDS[op.kind].cost != "gemm" or not self._graph_rows:
            return None
        return self._graph_rows.get(_shape_key(op))

    def graph_node_delta(self, op: Op) -> float:
        """Seconds a CUDA-graph node changes ``op``'s :meth:`duration` by (negative: shorter), all ``repeat``
        kernels: a GEMM with a ``gemm.graph`` row takes its measured warm node time, any other kernel adds
        ``launch.graph_per_op_us`` (rules host-issue and graph-nodes of :mod:`schedsim.gpu.rules`). Never takes an op
        below half its duration (an API-built op shorter than the saving). Collectives, p2p and copies take a positive
        ``graph_per_op_us`` but not a negative one (that saving was measured on compute kernels, ``add_``)."""
        if KINDS[op.kind].resource != "compute":  # collectives, p2p, copies: a per-node cost, never the kernels' saving
            return op.repeat * max(0.0, self.profile.launch.graph_per_op_us) * 1e-6
        d = self.duration(op)
        row = self.graph_row(op)
        delta = op.repeat * row[0] - d if row is not None else op.repeat * self.profile.launch.graph_per_op_us * 1e-6
        return max(delta, -0.5 * d)

    def graph_fork_s(self, op: Op) -> float:
        """Rule graph-forks's seconds for a CUDA-graph fork at ``op``: the ``launch.graph_fork_edges`` row of its GEMM
        shape (dtype, m·batch, n, k), else ``launch.graph_cross_stream_edge_us``."""
        if KINDS[op.kind].cost == "gemm" and self._fork_rows:
            got = self._fork_rows.get(_shape_key(op))
            if got is not None:
                return got
        return self.profile.launch.graph_cross_stream_edge_us * 1e-6

    def cold_extra(self, op: Op) -> float:
        """Seconds ``op`` takes longer when its operands come from HBM instead of L2 (rule graph-nodes): a GEMM with a
        ``gemm.graph`` row its ``cold - warm``; another GEMM, or a compute kernel the roofline puts at the kernel
        floor, ``gpu.hbm_miss_us``; anything else 0 (a bandwidth-bound kernel's roofline already uses the HBM rate;
        collectives and copies are timed from HBM-sized buffers). Once per op, not per ``repeat`` (its repeats
        reuse the same buffers)."""
        row = self.graph_row(op)
        if row is not None:
            return max(0.0, row[1] - row[0])
        miss = self.profile.gpu.hbm_miss_us * 1e-6
        if not miss:
            return 0.0
        if KINDS[op.kind].cost == "gemm":
            return miss
        if KINDS[op.kind].cost == "roofline" and op.duration_s is None and self._one(op) <= self._floor:
            return miss
        return 0.0

    @staticmethod
    def footprint(op: Op) -> float:
        """Bytes of device buffers ``op`` touches each iteration, for a rank's working set (rule graph-nodes):
        ``nbytes``
        (a GEMM's A, B and C; a compute op's bytes read and written; a copy's or collective's message), 0 for an
        op given only a duration."""
        return 0.0 if op.duration_s is not None else float(op.nbytes)

    def launch_overhead(self, op: Op, mode: str) -> float:
        """Host time to launch ``op``: eager per-op or per-collective overhead; 0 under a CUDA graph."""
        lp = self.profile.launch
        if mode == "cuda_graph":
            return 0.0
        return (lp.eager_per_collective_us if op.resource == "comm" else lp.eager_per_op_us) * 1e-6


#: Within :func:`shared_cost_models`: the CostModel built for each profile object, by ``id`` (the profile is kept
#: with it, so the id is not reused while the scope lasts).
_SHARED: ContextVar[dict[int, tuple[HardwareProfile, CostModel]] | None] = ContextVar("_SHARED", default=None)


@contextmanager
def shared_cost_models(models: dict[int, tuple[HardwareProfile, CostModel]] | None = None) -> Iterator[None]:
    """A scope (one prediction: :func:`schedsim.api.simulate_spec`) in which :func:`cost_model` builds one
    CostModel per profile object and hands the same one to every caller (the simulation and
    :func:`schedsim.notes.guesses`), so its caches (the NCCL cost of each group, GEMM surfaces) are filled once.
    The profile must not be changed inside the scope. ``models``: the CostModels by profile ``id``, kept by the
    caller across scopes (``schedsim search``'s points on one profile object); a new dict by default."""
    token = _SHARED.set({} if models is None else models)
    try:
        yield
    finally:
        _SHARED.reset(token)


def cost_model(profile: HardwareProfile) -> CostModel:
    """The CostModel of ``profile``: inside :func:`shared_cost_models` the one already built for this profile
    object (built on first use), else a new one."""
    shared = _SHARED.get()
    if shared is None:
        return CostModel(profile)
    hit = shared.get(id(profile))
    if hit is None or hit[0] is not profile:
        hit = shared[id(profile)] = (profile, CostModel(profile))
    return hit[1]
