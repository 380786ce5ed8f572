"""Cost model: the solo (uncontended) duration of each op, from a hardware profile.

* **GEMM** (``matmul``): the measured table of the profile, for the op's dtype.
  An exact shape returns its measured time. Otherwise the achieved FLOP/s is
  interpolated by inverse-distance weighting (power 2) of log(FLOP/s) over the
  4 nearest measured shapes in (log2 m, log2 n, log2 k) space, and
  time = max(kernel floor, FLOP / rate). With no entry for the dtype it falls
  back to a roofline: max(floor, FLOP / (peak·efficiency), bytes / HBM bw).
* **Generic compute**: ``duration_us`` if given, else the same roofline. A copy, collective or send/recv given
  ``duration_us`` (a replay of an imported trace) takes it too.
* **Collectives**: nccl-tests convention (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``):
  algbw = S / t, busbw = algbw × factor with factor 2(n−1)/n for all_reduce,
  (n−1)/n for all_gather, reduce_scatter, all_to_all, scatter and gather, 1 for
  broadcast, reduce and send/recv. A measured busbw-vs-size table for the
  collective and group size is interpolated linearly in log(size); below its
  smallest size alpha-beta with the smallest size's busbw (capped at that size's time), above
  its largest the last busbw. Without a table: alpha-beta on the link class,
  t = steps·alpha + factor·S / B_link, with steps 2(n−1) for all_reduce and n−1
  otherwise (ring algorithms; Thakur et al., IJHPCA 2005).
* **send/recv**: the ``sendrecv`` table for 2 ranks, else alpha + S / B_link.
* **memcpy**: latency + bytes / copy-engine bandwidth of the direction.
"""

from __future__ import annotations

import bisect
import math

from schedsim.graph.ops import Op
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import P2P_KINDS

__all__ = ["CostModel", "bus_factor"]

_BUS_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


#: Collectives that the executor calls in place (``dist.all_reduce``, ``dist.broadcast``, ``dist.reduce`` on one
#: buffer): on a group of one rank NCCL launches nothing for them (:meth:`CostModel.collective_time`).
ONE_RANK_NOP = frozenset({"all_reduce", "broadcast", "reduce"})


def bus_factor(kind: str, n: int) -> float:
    """busbw / algbw for collective ``kind`` over ``n`` ranks (nccl-tests ``doc/PERFORMANCE.md``).

    Examples
    --------
    >>> bus_factor("all_reduce", 4)
    1.5
    >>> bus_factor("all_gather", 2)
    0.5
    """
    return _BUS_FACTORS[kind](n)


#: 16-bit GEMM dtypes run the same cuBLAS kernel families (grid and tiles): a shape measured in one stands in for
#: the other where the profile has no row of its own (one H200, 2026-12-03: bf16 and fp16 2048x1024x8192 both ran
#: 128 CTAs, 44.3 and 46.6 µs; benchmarks/h200/elementwise_host_2026-12-03.md)
_SIBLING = {"bf16": "fp16", "fp16": "bf16"}


def _shape_key(op: Op) -> tuple[str, int, int, int]:
    """A GEMM's key in the profile's per-shape rows: (dtype, m·batch, n, k), dtype ``fp32`` when unset."""
    return (op.dtype or "fp32", op.m * op.batch, op.n, op.k)


class CostModel:
    """Solo durations in seconds for ops on one profile. Pure and deterministic; caches by shape."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self._floor = profile.gpu.kernel_floor_us * 1e-6
        self._gemm: dict[str, list[tuple[float, float, float, int, int, int, float]]] = {}
        for dtype, m, n, k, ms in profile.gemm.entries:
            rate = 2.0 * m * n * k / (ms * 1e-3)
            self._gemm.setdefault(dtype, []).append((math.log2(m), math.log2(n), math.log2(k), m, n, k, rate))
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
        self._tables: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
        for coll, by_n in profile.collectives.tables.items():
            for n, rows in by_n.items():
                rows = sorted(rows)
                self._tables[(coll, int(n))] = ([math.log(s) for s, _ in rows], [bw * 1e9 for _, bw in rows])
        self._cache: dict[tuple[object, ...], float] = {}
        self._ref: CostModel | None = None

    # -- compute ---------------------------------------------------------
    def gemm_rate(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """Interpolated GEMM rate in FLOP/s, or None if the table has no entry for ``dtype``."""
        pts = self._gemm.get(dtype)
        if not pts:
            return None
        lm, ln, lk = math.log2(m), math.log2(n), math.log2(k)
        ds = []
        for p in pts:
            d2 = (p[0] - lm) ** 2 + (p[1] - ln) ** 2 + (p[2] - lk) ** 2
            if d2 == 0.0:
                return p[6]
            ds.append((d2, p[6]))
        ds.sort()
        near = ds[:4]
        wsum = sum(1.0 / d for d, _ in near)
        return math.exp(sum(math.log(r) / d for d, r in near) / wsum)

    def _transfer_rate(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """Own nearest measured rate scaled by the reference profile's shape-efficiency ratio."""
        ref_name = self.profile.gemm.shape_curve_from
        pts = self._gemm.get(dtype)
        if not ref_name or not pts:
            return None
        if self._ref is None:
            from schedsim.hardware.profile import load_profile

            self._ref = CostModel(load_profile(ref_name))
        lm, ln, lk = math.log2(m), math.log2(n), math.log2(k)
        near = min(pts, key=lambda p: (p[0] - lm) ** 2 + (p[1] - ln) ** 2 + (p[2] - lk) ** 2)
        a = self._ref.gemm_rate(dtype, m, n, k)
        b = self._ref.gemm_rate(dtype, near[3], near[4], near[5])
        if a is None or b is None:
            return None
        return near[6] * a / b

    def gemm_demand(self, op: Op) -> float:
        """Fraction of the GPU's SMs a GEMM occupies, in (0, 1] (1 when the profile lacks ``gpu.sms``).

        CTAs = ceil(m·batch/128) · ceil(n/128) output tiles of 128×128 (the common cuBLAS/CUTLASS
        tile), times a split-K factor when the tiles alone cannot fill the GPU: min(ceil(SMs/tiles),
        ceil(k/256)), as libraries split long reductions of skinny GEMMs into slices of at least 256.
        Demand = min(1, CTAs / SMs). A heuristic, stated as such; it only matters for GEMMs small
        enough to leave SMs idle (e.g. 32×1024×1024 occupies 32 of 132 SMs on an H200).
        """
        sms = self.profile.gpu.sms
        if not sms:
            return 1.0
        return min(1.0, self.gemm_ctas(op) / sms)

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
        (2026-12-01, torch 2.11, cuBLAS) fp32 2048×1024×8192 ran as 8×8×2 = 128 CTAs (256×128 tiles, split-K 2)
        where the 128×128-tile rule gives a full wave (``benchmarks/h200/probe_coresidence_2026-12-01_1xh200.json``).
        """
        if not self._ctas:
            return None
        got: int | None = self._ctas.get(self._kernel_key(op))
        return got

    def ctas_per_sm(self, op: Op) -> int:
        """CTAs of GEMM ``op``'s kernel that one SM holds at once: the profile's ``gemm.ctas_per_sm`` row for its
        (dtype, m·batch, n, k), else 1 (rule 4 of :mod:`schedsim.sim.gpu_model`)."""
        if not self._occ:
            return 1
        got = self._occ.get(self._kernel_key(op))
        return 1 if got is None else int(got)

    def reduce_kernel(self, op: Op) -> tuple[int, float] | None:
        """``(SM slots, seconds alone)`` of GEMM ``op``'s second kernel (cuBLAS's split-K reduction): the profile's
        ``gemm.reduce`` row for its (dtype, m·batch, n, k), else None (one kernel). Measured by ``schedsim
        calibrate`` from a Kineto trace; e.g. one H200, 2026-12-02 18:50 UTC: fp32 2048×1024×8192 runs a 128-CTA
        main kernel (0.70 ms) and a 128-CTA ``split_k`` kernel of 6.3 µs
        (``benchmarks/h200/stream_dispatch_2026-12-02.md``).
        """
        if not self._reduce or op.kind != "matmul":
            return None
        got: tuple[int, float] | None = self._reduce.get(self._kernel_key(op))
        return got

    def wave_tail(self, op: Op) -> float:
        """Seconds of compute op ``op``'s ragged last-wave end that a waiting compute kernel takes back (rule 4c
        of :mod:`schedsim.sim.gpu_model`): the profile's ``gemm.tail`` row for a GEMM of that (dtype, m·batch, n,
        k); for a GEMM without one, the row of the nearest measured shape of its dtype (least
        |Δlog2 m| + |Δlog2 n| + |Δlog2 k|; the mean of the rows tied nearest; fp16 and bf16 stand in for each
        other when a dtype has no row); else ``gpu.wave_tail_us``.
        Fitted by ``schedsim calibrate`` from the GEMM on 8 streams against back to back; e.g. one H200,
        2026-12-02 21:51 UTC: fp32 1024×512×8192 8.5 µs, bf16 4096×4096×1024 5.6 µs
        (``benchmarks/h200/wave_tail_2026-12-02.md``). Why the nearest row: the tail follows the cuBLAS kernel,
        which follows dtype and shape, not one constant: bf16 with k = 8192 fitted 0–1 µs where fp32 fitted
        4–9 µs, and the median default (5.5 µs) predicted bf16 2048×1024×8192 on 8 streams 10–12 % short (one
        H200, 2026-12-03, ``benchmarks/h200/elementwise_host_2026-12-03.md``)."""
        if not self._tail or op.kind != "matmul":
            return self._tail_default
        key = self._kernel_key(op)
        got = self._tail.get(key)
        if got is None:
            got = self._tail_near.get(key)
        if got is None:
            got = self._tail_near[key] = self._nearest_tail(key)
        return got

    def gemm_call_extra(self, op: Op) -> float:
        """Seconds a GEMM ``op``'s host call costs beyond ``launch.eager_per_op_us`` (one call; rule 1 of
        :mod:`schedsim.sim.gpu_model`): ``(x - 1) · eager_per_op_us`` with ``x`` its ``gemm.call`` row, else 0 (and
        0 for every other op). Can be negative (a row below 1)."""
        if not self._call or op.kind != "matmul":
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
        (:meth:`measured_ctas`), else 128×128 output tiles times the split-K factor (see :meth:`gemm_demand`).

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
        rate = self._transfer_rate(dtype, op.m * op.batch, op.n, op.k)
        if rate is None:
            rate = self.gemm_rate(dtype, op.m * op.batch, op.n, op.k)
        if rate is None:
            return self._roofline(op.flops, op.nbytes, dtype)
        return max(self._floor, op.flops / rate)

    # -- communication ----------------------------------------------------
    def collective_time(self, kind: str, nbytes: float, ranks: tuple[int, ...]) -> float:
        """Time in seconds of collective ``kind`` moving ``nbytes`` (nccl-tests size) over ``ranks``.

        One rank: NCCL runs no collective (``ncclLaunchOneRank``, src/enqueue.cc: "for 1 rank, out-of-place is
        memcpy to self, and in-place is nop"), so the in-place kinds as the executor calls them (``all_reduce``,
        ``broadcast``, ``reduce``: :data:`ONE_RANK_NOP`) take 0 s and the others a device-to-device copy of
        ``nbytes``. One H200, 2026-12-02 12:12 UTC (``benchmarks/heldout_x1.sh``): a 1-rank 8 KiB all_reduce in
        a graph timed op by op spanned 1.2-1.3 µs, its two timing events' own span."""
        n = len(ranks)
        if n <= 1:
            if kind in ONE_RANK_NOP:
                return 0.0
            return max(self._floor, 2.0 * nbytes / (self.profile.memcpy.d2d_GBps * 1e9)) if nbytes else self._floor
        table_kind = "sendrecv" if kind in P2P_KINDS else kind
        factor = bus_factor(table_kind, n)
        tab = self._tables.get((table_kind, n))
        if tab is not None and nbytes > 0:
            xs, bws = tab
            x = math.log(nbytes)
            if x <= xs[0]:
                # below the smallest measured size: alpha-beta with that size's busbw
                link = self.profile.link_for(ranks)
                steps = 1 if table_kind == "sendrecv" else (2 * (n - 1) if table_kind == "all_reduce" else n - 1)
                return min(steps * link.latency_us * 1e-6 + nbytes * factor / bws[0], math.exp(xs[0]) * factor / bws[0])
            if x >= xs[-1]:
                bw = bws[-1]
            else:
                i = bisect.bisect_right(xs, x)
                f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
                bw = bws[i - 1] + f * (bws[i] - bws[i - 1])
                # busbw rises ~linearly with size where latency dominates, so between two latency-bound points
                # the interpolated time can dip below both (7.25 us at 1 KiB, 9.1 at 16 KiB on 2xH200, 4.2 at
                # 4 KiB); a larger message never finishes sooner, so the time is at least the lower point's
                return max(nbytes * factor / bw, math.exp(xs[i - 1]) * factor / bws[i - 1])
            return nbytes * factor / bw
        link = self.profile.link_for(ranks)
        if table_kind == "sendrecv":
            steps = 1
        elif table_kind == "all_reduce":
            steps = 2 * (n - 1)
        else:
            steps = n - 1
        return steps * link.latency_us * 1e-6 + factor * nbytes / (link.bandwidth_GBps * 1e9)

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
        kind = op.kind
        if op.duration_s is not None and kind != "matmul":  # a measured duration (compute, or a replayed trace's op)
            return op.duration_s
        if kind == "matmul":
            key: tuple[object, ...] = (kind, op.dtype, op.m, op.n, op.k, op.batch)
        elif kind == "compute":
            if op.duration_s is not None:
                return op.duration_s
            key = (kind, op.flops, op.nbytes, op.dtype)
        elif kind == "memcpy":
            key = (kind, op.direction, op.nbytes)
        else:
            key = (kind, op.nbytes, op.group)
        t = self._cache.get(key)
        if t is not None:
            return t
        if kind == "matmul":
            t = self._matmul(op)
        elif kind == "compute":
            t = self._roofline(op.flops, op.nbytes, op.dtype)
        elif kind == "memcpy":
            t = self._memcpy(op)
        else:
            t = self.collective_time(kind, op.nbytes, op.group)
        self._cache[key] = t
        return t

    # -- graph nodes and operands from HBM (rule 9 of schedsim.sim.gpu_model) ---------------------------
    def graph_row(self, op: Op) -> tuple[float, float] | None:
        """``(warm_s, cold_s)`` of one launch of GEMM ``op`` as a CUDA-graph node (profile ``gemm.graph``, exact
        (dtype, m·batch, n, k)), or None."""
        if op.kind != "matmul" or not self._graph_rows:
            return None
        return self._graph_rows.get(_shape_key(op))

    def graph_node_delta(self, op: Op) -> float:
        """Seconds a CUDA-graph node changes ``op``'s :meth:`duration` by (negative: shorter), all ``repeat``
        kernels: a GEMM with a ``gemm.graph`` row takes its measured warm node time, any other kernel adds
        ``launch.graph_per_op_us`` (rule 1 and 9 of :mod:`schedsim.sim.gpu_model`). Never takes an op below
        half its duration (an API-built op shorter than the saving). Collectives, p2p and copies take a positive
        ``graph_per_op_us`` but not a negative one (that saving was measured on compute kernels, ``add_``)."""
        if op.kind not in ("matmul", "compute"):  # collectives, p2p, copies: a per-node cost, never the kernels' saving
            return op.repeat * max(0.0, self.profile.launch.graph_per_op_us) * 1e-6
        d = self.duration(op)
        row = self.graph_row(op)
        delta = op.repeat * row[0] - d if row is not None else op.repeat * self.profile.launch.graph_per_op_us * 1e-6
        return max(delta, -0.5 * d)

    def graph_fork_s(self, op: Op) -> float:
        """Rule 8's seconds for a CUDA-graph fork at ``op``: the ``launch.graph_fork_edges`` row of its GEMM shape
        (dtype, m·batch, n, k), else ``launch.graph_cross_stream_edge_us``."""
        if op.kind == "matmul" and self._fork_rows:
            got = self._fork_rows.get(_shape_key(op))
            if got is not None:
                return got
        return self.profile.launch.graph_cross_stream_edge_us * 1e-6

    def cold_extra(self, op: Op) -> float:
        """Seconds ``op`` takes longer when its operands come from HBM instead of L2 (rule 9): a GEMM with a
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
        if op.kind == "matmul":
            return miss
        if op.kind == "compute" and op.duration_s is None and self._one(op) <= self._floor:
            return miss
        return 0.0

    @staticmethod
    def footprint(op: Op) -> float:
        """Bytes of device buffers ``op`` touches each iteration, for a rank's working set (rule 9): ``nbytes``
        (a GEMM's A, B and C; a compute op's bytes read and written; a copy's or collective's message), 0 for an
        op given only a duration."""
        return 0.0 if op.duration_s is not None else float(op.nbytes)

    def launch_overhead(self, op: Op, mode: str) -> float:
        """Host time to launch ``op``: eager per-op or per-collective overhead; 0 under a CUDA graph."""
        lp = self.profile.launch
        if mode == "cuda_graph":
            return 0.0
        return (lp.eager_per_collective_us if op.resource == "comm" else lp.eager_per_op_us) * 1e-6
