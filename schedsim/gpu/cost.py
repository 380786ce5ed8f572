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

One class per part (Calculon's layout): :class:`~schedsim.gpu.gemm.GemmCost` (the GEMM table and per-shape kernel
rows), :class:`Roofline` (generic and fallback compute), :class:`CopyEngines` (memcpy), :class:`HostLaunch` (launch
costs on the host), :class:`~schedsim.network.model.NetworkModel` (communication); :class:`CostModel` times an op
by its kind's cost rule (:data:`schedsim.kinds.KINDS`) with them and caches the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from schedsim.errors import ProfileError
from schedsim.gpu.gemm import GemmCost
from schedsim.graph.ops import Op
from schedsim.hardware.profile import GPU, HardwareProfile
from schedsim.kinds import KINDS
from schedsim.network.model import NetworkModel

__all__ = ["CopyEngines", "CostModel", "HostLaunch", "Roofline", "cost_model", "peak_of", "shared_cost_models"]


#: What an op's solo time depends on, by cost rule (its key in :class:`CostModel`'s cache; the kind keeps two kinds of
#: one rule apart).
_CACHE_KEY: dict[str, Callable[[Op], tuple[object, ...]]] = {
    "gemm": lambda op: (op.kind, op.dtype, op.m, op.n, op.k, op.batch),
    "roofline": lambda op: (op.kind, op.flops, op.nbytes, op.dtype),
    "copy": lambda op: (op.kind, op.direction, op.nbytes),
    "network": lambda op: (op.kind, op.nbytes, op.group) if op.splits is None else (op.kind, op.group, op.splits,
                                                                                     op.rank),
}


def peak_of(gpu: GPU, dtype: str | None, profile: str = "") -> float:
    """Dense peak of ``dtype`` (None: fp32), TFLOP/s, for the roofline: ``gpu.peak_tflops[dtype]``, else the fp32
    peak standing in (a dtype the profile does not list). ``profile``: its name, for the error.

    Raises
    ------
    ProfileError
        Neither is listed: no peak to stand in (it took 1 TFLOP/s).
    """
    dt = dtype or "fp32"
    got = gpu.peak_tflops.get(dt)  # type: ignore[call-overload]
    if got is None:
        got = gpu.peak_tflops.get("fp32")
    if got is None:
        nor = "" if dt == "fp32" else " nor an fp32 one to stand in"
        raise ProfileError(f"profile {profile!r}: gpu.peak_tflops has no {dt} peak{nor} (it lists "
                           f"{', '.join(gpu.peak_tflops) or 'none'}), and {dt} kernels without a measured time "
                           "need one for the roofline",
                           fix=f"add gpu.peak_tflops.{dt} (dense TFLOP/s, with its source) to the profile, "
                               f"measure {dt} GEMMs (schedsim calibrate), or give the op a duration_us")
    return float(got)


class Roofline:
    """The memory- and FLOP-bound part: seconds of a kernel given its FLOP and bytes moved in HBM (module docstring,
    **Generic compute**), never under the profile's kernel floor."""

    def __init__(self, profile: HardwareProfile, floor_s: float) -> None:
        self.profile = profile
        self.floor = floor_s

    def time(self, flops: float, nbytes: float, dtype: str | None) -> float:
        """max(floor, FLOP / (peak of ``dtype``, else fp32's, × ``gpu.gemm_efficiency``), bytes / HBM bandwidth).

        Raises
        ------
        ProfileError
            ``flops`` > 0 and the profile lists neither peak (:func:`peak_of`)."""
        g = self.profile.gpu
        t_flop = flops / (peak_of(g, dtype, self.profile.name) * 1e12 * g.gemm_efficiency) if flops else 0.0
        return max(self.floor, t_flop, nbytes / (g.hbm_GBps * 1e9))


class CopyEngines:
    """The copy-engine part: seconds of a ``memcpy`` (module docstring)."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile

    def time(self, op: Op) -> float:
        """``memcpy.latency_us`` + bytes / bandwidth of the direction (device to device: half ``d2d_GBps``, a read
        and a write)."""
        mc = self.profile.memcpy
        bw = {"h2d": mc.h2d_GBps, "d2h": mc.d2h_GBps}.get(op.direction or "d2d", mc.d2d_GBps / 2.0)
        return mc.latency_us * 1e-6 + op.nbytes / (bw * 1e9)


class HostLaunch:
    """The host-launch part: what launching an op costs on the host (rule host-issue of :mod:`schedsim.gpu.rules`,
    the profile's ``launch`` section), beside the GEMM part's per-shape rows."""

    def __init__(self, profile: HardwareProfile, gemm: GemmCost) -> None:
        self.profile = profile
        self.gemm = gemm

    def launch_overhead(self, op: Op, mode: str) -> float:
        """Host time to launch ``op``: eager per-op or per-collective overhead; 0 under a CUDA graph."""
        lp = self.profile.launch
        if mode == "cuda_graph":
            return 0.0
        return (lp.eager_per_collective_us if op.resource == "comm" else lp.eager_per_op_us) * 1e-6

    def gemm_call_extra(self, op: Op) -> float:
        """Seconds a GEMM ``op``'s host call costs beyond ``launch.eager_per_op_us`` (one call): ``(x - 1) ·
        eager_per_op_us`` with ``x`` its ``gemm.call`` row (:meth:`GemmCost.call_factor`), else 0. Can be negative
        (a row below 1)."""
        x = self.gemm.call_factor(op)
        return 0.0 if x is None else (x - 1.0) * self.profile.launch.eager_per_op_us * 1e-6

    def graph_fork_s(self, op: Op, gemm: bool) -> float:
        """Rule graph-forks's seconds for a CUDA-graph fork at ``op``: for a GEMM (``gemm``) the
        ``launch.graph_fork_edges`` row of its shape (dtype, m·batch, n, k), else
        ``launch.graph_cross_stream_edge_us``."""
        got = self.gemm.fork_row(op) if gemm else None
        return self.profile.launch.graph_cross_stream_edge_us * 1e-6 if got is None else got


class CostModel:
    """Solo durations in seconds for ops on one profile, by the kind's cost rule (:data:`schedsim.kinds.CostRule`),
    from one part per rule (Calculon's one class per part): :attr:`gemm` (:class:`~schedsim.gpu.gemm.GemmCost`),
    :attr:`roofline` (:class:`Roofline`), :attr:`copy` (:class:`CopyEngines`), :attr:`net`
    (:class:`~schedsim.network.model.NetworkModel`); :attr:`host` (:class:`HostLaunch`) prices the launches. Pure
    and deterministic; caches by shape."""

    def __init__(self, profile: HardwareProfile) -> None:
        self.profile = profile
        self._floor = profile.gpu.kernel_floor_us * 1e-6
        #: The GEMM part: the measured table and per-shape kernel rows.
        self.gemm = GemmCost(profile)
        #: The memory- and FLOP-bound part.
        self.roofline = Roofline(profile, self._floor)
        #: The copy-engine part.
        self.copy = CopyEngines(profile)
        #: The host-launch part.
        self.host = HostLaunch(profile, self.gemm)
        #: The communication model: collectives and send/recv over the profile's links or topology.
        self.net = NetworkModel(profile, self._floor)
        self._cache: dict[tuple[object, ...], float] = {}
        #: Seconds of one kernel of an op, by its kind's cost rule (:data:`schedsim.kinds.CostRule`).
        self._rule: dict[str, Callable[[Op], float]] = {
            "gemm": self._matmul, "roofline": lambda op: self.roofline.time(op.flops, op.nbytes, op.dtype),
            "copy": self.copy.time, "network": lambda op: self.net.collective(op.kind, op.nbytes, op.group)
            if op.splits is None else self.net.all_to_all_split(op.rank, op.group, *op.splits)}

    # -- compute ---------------------------------------------------------
    def gemm_rate(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """:meth:`GemmCost.rate`."""
        return self.gemm.rate(dtype, m, n, k)

    def gemm_time(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """:meth:`GemmCost.time`."""
        return self.gemm.time(dtype, m, n, k)

    def gemm_row(self, dtype: str, m: int, n: int, k: int) -> float | None:
        """:meth:`GemmCost.row`."""
        return self.gemm.row(dtype, m, n, k)

    def measured_ctas(self, op: Op) -> int | None:
        """:meth:`GemmCost.measured_ctas`."""
        return self.gemm.measured_ctas(op)

    def ctas_per_sm(self, op: Op) -> int:
        """:meth:`GemmCost.ctas_per_sm`."""
        return self.gemm.ctas_per_sm(op)

    def gemm_ctas(self, op: Op) -> int:
        """:meth:`GemmCost.ctas`."""
        return self.gemm.ctas(op)

    def reduce_kernel(self, op: Op) -> tuple[int, float] | None:
        """:meth:`GemmCost.reduce_kernel` for an op of a kind the GEMM table times, else None (one kernel)."""
        return self.gemm.reduce_kernel(op) if KINDS[op.kind].cost == "gemm" else None

    def wave_tail(self, op: Op) -> float:
        """Seconds of compute op ``op``'s ragged last-wave end that a waiting compute kernel takes back: a GEMM's
        :meth:`GemmCost.wave_tail`, any other kernel's ``gpu.wave_tail_us``."""
        return self.gemm.wave_tail(op) if KINDS[op.kind].cost == "gemm" else self.gemm.tail_default

    def gemm_call_extra(self, op: Op) -> float:
        """:meth:`HostLaunch.gemm_call_extra` for a GEMM, 0 for every other op."""
        return self.host.gemm_call_extra(op) if KINDS[op.kind].cost == "gemm" else 0.0

    def gemm_memset_gap(self, op: Op) -> float:
        """:meth:`GemmCost.memset_gap` for a GEMM (seconds), 0 for every other op and for a GEMM without a row."""
        got = self.gemm.memset_gap(op) if KINDS[op.kind].cost == "gemm" else None
        return 0.0 if got is None else got

    def launch_overhead(self, op: Op, mode: str) -> float:
        """:meth:`HostLaunch.launch_overhead`."""
        return self.host.launch_overhead(op, mode)

    def _matmul(self, op: Op) -> float:
        dtype = op.dtype or "fp32"
        if op.m * op.batch * op.n * op.k == 0:  # an empty GEMM (API-built graphs; the schema needs sizes >= 1)
            return self._floor
        t = self.gemm.time(dtype, op.m * op.batch, op.n, op.k)
        if t is None:
            return self.roofline.time(op.flops, op.nbytes, dtype)
        return max(self._floor, t)

    def duration(self, op: Op) -> float:
        """Solo duration of ``op`` in seconds (no contention, no launch overhead); ``repeat`` kernels in a row."""
        if op.repeat != 1:
            return op.repeat * self._one(op)
        return self._one(op)

    def p2p_duration(self, op: Op, comm: tuple[int, ...] | None) -> float:
        """:meth:`duration` of send/recv ``op`` (``group`` its ``(src, dst)``) run on the communicator of ranks
        ``comm`` (a batched send/recv's process group; None: its pair's own, as :meth:`duration` takes it), which
        sets the channels NCCL stripes it over (:meth:`schedsim.network.NcclNetwork.p2p_channels`)."""
        if comm is None or op.duration_s is not None or op.splits is not None:
            return self.duration(op)
        key = ("p2p", op.kind, op.nbytes, op.group, comm)
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = self.net.collective(op.kind, op.nbytes, op.group, comm)
        return op.repeat * t

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
        """``(warm_s, cold_s)`` of one launch of GEMM ``op`` as a CUDA-graph node (:meth:`GemmCost.graph_row`), or
        None (also for an op of another kind)."""
        return self.gemm.graph_row(op) if KINDS[op.kind].cost == "gemm" else None

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
        """:meth:`HostLaunch.graph_fork_s` (a GEMM's own row when the profile has one)."""
        return self.host.graph_fork_s(op, KINDS[op.kind].cost == "gemm")

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

    def table_hbm_s(self, op: Op) -> float:
        """Seconds of :meth:`cold_extra` that ``op``'s back-to-back time already holds (rule graph-nodes), per kernel:
        for a GEMM with a ``gemm.graph`` row, its table time less the dispatch gap (``launch.kernel_gap_us``: what a
        graph node saves) less the row's warm node time, between 0 and the row's ``cold - warm``; 0 otherwise.
        ``calibrate`` times a shape back to back on 3 rotating input sets (``executor/calibrate_gemm.py``): where
        those pass L2, the table was timed from HBM in part. One H100 (docs/validation.md, "Operands from HBM the
        table already holds"): bf16 1024×512×8192 22.58 µs back to back, 19.13 / 21.56 µs as a warm / cold node,
        Kineto kernels of 20.5-21.8 µs with every operand cold (matmul_streams)."""
        row = self.graph_row(op)
        if row is None:
            return 0.0
        warm, cold = row
        return min(max(0.0, cold - warm), max(0.0, self._one(op) - self.profile.launch.kernel_gap_s - warm))

    @staticmethod
    def footprint(op: Op) -> float:
        """Bytes of device buffers ``op`` touches each iteration, for a rank's working set (rule graph-nodes):
        ``nbytes``
        (a GEMM's A, B and C; a compute op's bytes read and written; a copy's or collective's message), 0 for an
        op given only a duration."""
        return 0.0 if op.duration_s is not None else float(op.nbytes)


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
