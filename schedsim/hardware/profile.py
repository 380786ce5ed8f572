"""Hardware profiles (YAML with units in the key names), validated with pydantic.

A profile says where each number comes from (``source`` fields). Units are
converted to SI once, by the accessor methods. Profiles ship as package data
in ``schedsim/hardware/profiles/*.yaml`` and are chosen with
``--profile NAME|PATH``.
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from schedsim._pydantic import bool_for_number, holds_bool, plugins_off, signature_once
from schedsim.errors import ProfileError, printable
from schedsim.hardware.placement import check_placement
from schedsim.hardware.profile_files import (  # noqa: F401 - _builtin_dir, _parse_yaml: re-exported for the tests
    RETIRED_FIELDS,
    _builtin_dir,
    _parse_yaml,
    _stamp,
    list_profiles,
    profile_data,
    retired_fields,
)
from schedsim.hardware.transports import Transport, with_transport_latency
from schedsim.kinds import TABLE_KINDS, DType, TableKind

__all__ = ["HardwareProfile", "load_profile", "list_profiles", "LinkClass", "GPU_MODELS", "check_gpu_model"]

#: Simulator GPU execution models (``gpu_model`` of a profile, ``predict --gpu-model``).
GPU_MODELS = ("waves", "replay")

#: GPU models once accepted and since retired: what each was (the message of :func:`check_gpu_model`).
RETIRED_GPU_MODELS = {"sharing": "processor sharing, every running kernel slowed equally"}


def check_gpu_model(model: str, where: str) -> None:
    """Refuse a GPU model name that is not one of :data:`GPU_MODELS`; ``where`` names its source in the message
    (a profile file's ``gpu_model``, ``--gpu-model``).

    Raises
    ------
    ProfileError
        A retired model (:data:`RETIRED_GPU_MODELS`, ``sharing``) or an unknown name, with the fix.

    >>> check_gpu_model("waves", "--gpu-model")
    >>> try:
    ...     check_gpu_model("sharing", "--gpu-model")
    ... except ProfileError as e:
    ...     print(e.message)
    --gpu-model: the 'sharing' GPU model (processor sharing, every running kernel slowed equally) is retired
    """
    if model in GPU_MODELS:
        return
    fix = ("use waves (the default: CTAs in waves, hardware queues, schedsim.gpu.rules), or replay for a schedule "
           "of recorded durations")
    if model in RETIRED_GPU_MODELS:
        raise ProfileError(f"{where}: the {model!r} GPU model ({RETIRED_GPU_MODELS[model]}) is retired", fix=fix)
    raise ProfileError(f"{where}: unknown GPU model {printable(model, 40)!r}", fix=fix)

LinkClass = Literal["nvlink", "pcie", "network"]
GemmDType = DType
NonNegFloat = Annotated[float, Field(ge=0)]
#: The most a rate field (GB/s, Gb/s, TFLOP/s) may give: 1 PB/s is ~50x the fastest HBM, 1e6 TFLOP/s ~50x any GPU's
#: peak; more is a unit slip (B/s written as GB/s, FLOP/s as TFLOP/s) that would time the ops using it as free
RATE_MAX = 1e6
Rate = Annotated[float, Field(gt=0, le=RATE_MAX)]  # a rate in its field's unit


# Default factories are lambdas, not list or dict: see the note in schedsim.spec.model. The models are built
# at the end of the class definitions, with pydantic's plugin discovery off (see schedsim.spec.model).
class _B(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    @signature_once
    def _no_bool_number(cls, v: Any, info: ValidationInfo) -> Any:
        """A YAML ``true`` / ``false`` given for a number (``max_ctas: true``) is refused: pydantic's lax mode
        would read it as 1 / 0. Fields that take a boolean keep it."""
        if info.field_name is not None and holds_bool(v) and bool_for_number(  # the walk only where a boolean is
                v, cls.model_fields[info.field_name].annotation):
            raise ValueError("a number, not a boolean")
        return v


class GPU(_B):
    """Per-GPU rates. Peaks in TFLOP/s (1e12 FLOP/s), bandwidth in GB/s (1e9 B/s), times in µs; ``source`` says where."""

    name: str = Field(description="GPU model.")
    hbm_GBps: float = Field(ge=1e-6, le=RATE_MAX, description="Achievable HBM bandwidth, GB/s (1e9 B/s).")
    peak_tflops: dict[GemmDType, Rate] = Field(description="Dense peak per dtype, TFLOP/s (roofline fallback).")
    gemm_efficiency: float = Field(default=0.75, gt=0, le=1,
                                   description="Fraction of peak a large GEMM reaches when no table entry exists.")
    kernel_floor_us: float = Field(default=5.0, ge=0, description="Shortest kernel time, µs (latency floor).")
    sms: int | None = Field(default=None, gt=0, description="Streaming multiprocessors, over which CTAs run in "
                            "waves (:mod:`schedsim.gpu.rules`, wave-dispatch). Omit for 132 (H100/H200 SXM).")
    max_connections: int = Field(
        default=8, ge=1, le=32,
        description="CUDA_DEVICE_MAX_CONNECTIONS: host-to-GPU hardware work queues per context (1-32, CUDA default "
        "8; CUDA programming guide, environment variables). Streams share queues round robin; with 1, kernels "
        "start in host issue order whatever their stream (false serialization).")
    cross_stream_latency_us: float = Field(
        default=0.0, ge=0,
        description="GPU-side delay, µs, before a kernel released by an op on another stream (an event wait) "
        "reaches the GPU, beyond a same-stream successor's (waves model).")
    sm_stream_GBps: float | None = Field(
        default=None, gt=0, le=RATE_MAX,
        description="HBM bandwidth, GB/s, one SM reaches in an elementwise kernel that holds few SMs (waves rule "
        "5: a memory-bound kernel's CTAs run up to sms x this / hbm_GBps times their full-GPU speed). One H200, "
        "69 (bf16 add_ of 12.6 and 50.3 MB on the 4 SMs a 128-CTA GEMM leaves free: 0.275 TB/s; "
        "benchmarks/probes/sm/dispatch_order.py). None: such CTAs keep their full-GPU speed.")
    l2_bytes: float | None = Field(
        default=None, gt=0, description="L2 cache size, bytes (torch.cuda.get_device_properties().L2_cache_size; "
        "H200: 62,914,560). Enables rule graph-nodes of schedsim.gpu.rules (operands from HBM when a rank's buffers "
        "exceed L2); omit to treat every operand as L2-resident, as the GEMM table measured it.")
    l2_cold_span: tuple[float, float] = Field(
        default=(0.45, 0.85), description="[from, to]: fractions of l2_bytes over which a rank's working set goes "
        "from L2-resident to read from HBM (linear in between; one H200, "
        "benchmarks/probes/memory/l2_residency.py: a graph chain of bf16 32x1024x1024 GEMMs over N weight sets ran 3.66 "
        "us per GEMM up to 27 MB, 3.89 at 36 MB, 4.26 at 45 MB, 4.35-4.45 from 53 MB).")
    hbm_miss_us: float = Field(
        default=0.0, ge=0, description="GPU time, us, a short kernel (one the roofline puts at the kernel floor, "
        "or a GEMM without a gemm.graph row) adds when its operands come from HBM rather than L2 (rule graph-nodes). "
        "One H200: add_ on 32x1024 bf16 in a graph 1.17 -> 1.73 us (0.56).")
    wave_tail_us: float = Field(
        default=0.0, ge=0,
        description="Ragged end of a GEMM's last wave, µs, that a compute kernel waiting for SMs takes back (waves "
        "model, rule wave-tail of schedsim.gpu.rules) for compute kernels that are not GEMMs, and GEMMs of a dtype "
        "with no gemm.tail row (others take their dtype's nearest row, CostModel.wave_tail): a kernel whose CTAs "
        "are all placed runs its main kernel's waves of τ seconds at 1 / (1 - min(tail / τ, 0.25)) while a "
        "compute kernel waits in its rank's dispatch FIFO. Back-to-back table times (one stream) include the "
        "ragged end, so 0 reproduces them; schedsim calibrate sets it to the median of the gemm.tail rows it fits.")
    source: str = Field(description="Where these numbers come from.")

    @field_validator("l2_cold_span")
    @classmethod
    def _span(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= v[0] <= v[1]:
            raise ValueError("must be [from, to] with 0 <= from <= to (fractions of l2_bytes), e.g. [0.45, 0.85]")
        return v


class Launch(_B):
    """Host (CPU thread) cost per call of plain PyTorch, µs; ``graph_per_op_us`` is GPU-side.

    The ``None`` fields default as the profile contract says: ``p2p_call_us`` to ``eager_per_collective_us``,
    ``batch_p2p_call_us`` to 1.5 × ``p2p_call_us``, ``event_wait_us`` to 2.0, ``memcpy_call_us`` to
    ``eager_per_op_us`` and ``elementwise_call_us`` to half of it (read them through the ``*_s`` accessors, in s).
    """

    eager_per_op_us: float = Field(ge=0, description="Host time to launch one kernel in eager mode, µs.")
    eager_per_collective_us: float = Field(ge=0, description="Host time to launch one NCCL call in eager mode, µs.")
    graph_launch_us: float = Field(ge=0, description="Host time of one cudaGraphLaunch, µs.")
    graph_start_us: float | None = Field(default=None, ge=0, description="GPU-side start of a replayed CUDA graph, "
                                         "µs: from an event recorded on the idle stream just before "
                                         "CUDAGraph.replay() to the graph's first node starting (calibrate: a "
                                         "one-node graph, the event pair's time less the node's). A graph's "
                                         "nodes reach the GPU this long after its launch call began; default: "
                                         "when the launch returns (graph_launch_us).")
    graph_per_op_us: float = Field(ge=-100, description="GPU time, µs, a kernel's node in a CUDA graph adds to "
                                   "(negative: saves on) its back-to-back time on a stream (the GEMM table's and "
                                   "kernel floor's method); one H200: -0.75 to -0.90 for every small "
                                   "kernel measured ([evidence: timed-graph]). "
                                   "GEMMs with a gemm.graph row use that row instead.")
    graph_cross_stream_edge_us: float = Field(default=0.0, ge=0, description="GPU-side time, µs, a graph node "
                                              "holds its stream when a node on another stream depends on it (a "
                                              "fork; rule graph-forks of schedsim.gpu.rules). Default 0: not measured.")
    graph_fork_edges: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, NonNegFloat]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, us]: graph_cross_stream_edge_us for a fork at a GEMM of that shape (calibrate "
        "measures it per GEMM shape of the schedules: 64 layers of that GEMM, an m x n copy and the same GEMM on "
        "another stream waiting for the first, less the main stream alone, less the model's own share); forks at "
        "other ops use graph_cross_stream_edge_us.")
    kernel_gap_us: float | None = Field(default=None, ge=0, description="GPU time, µs, between a kernel's end "
                                        "and the start of the next kernel queued behind it on its stream (the "
                                        "dispatch gap). Every back-to-back time (the GEMM table, the kernel floor, "
                                        "the elementwise rates) holds it once per kernel; a kernel's Kineto span "
                                        "does not. An eager kernel's predicted span therefore starts this much "
                                        "into its time (docs/metrics.md, 'Per-op spans'). Default: "
                                        "-graph_per_op_us where that is negative (a graph node runs that much "
                                        "shorter than back to back: the gap a graph does not pay), else 0.")
    p2p_call_us: float | None = Field(default=None, ge=0, description="Host time of one unbatched dist.isend/irecv, "
                                      "µs (default: eager_per_collective_us).")
    batch_p2p_call_us: float | None = Field(default=None, ge=0, description="Host time of one "
                                            "dist.batch_isend_irecv of a send+recv pair, µs (default: 1.5 x p2p_call_us).")
    event_wait_us: float | None = Field(default=None, ge=0, description="Host time of event.record + "
                                        "stream.wait_event for one cross-stream dependency, µs (default 2.0).")
    memcpy_call_us: float | None = Field(default=None, ge=0, description="Host time of one tensor.copy_ (h2d/d2h) "
                                         "call, µs (default: eager_per_op_us).")
    elementwise_call_us: float | None = Field(default=None, ge=0, description="Host time of one elementwise "
                                              "torch.add(a, b, out=c), µs: what a bytes-only compute op costs the "
                                              "host (execute and the references run it so); default: "
                                              "0.5 x eager_per_op_us (the add / 64x64 matmul ratio, 0.49-0.53 in 6 "
                                              "fresh processes, one H200, [evidence: elementwise-host]).")
    stream_switch_us: float = Field(default=0.0, ge=0, description="Extra host time of switching the "
                                    "current stream (torch.cuda.set_stream, as the executor and the references do), "
                                    "charged to an op whose stream differs from the previous op's on its rank, µs "
                                    "(default 0: not measured).")
    executor_extra_per_op_us: float = Field(default=0.0, ge=0, description="schedsim execute's own extra host cost "
                                            "per op, µs; used only when a prediction models the executor.")
    first_op_extra_us: float = Field(default=0.0, ge=0, description="Extra host time of a rank's first kernel launch "
                                     "of an iteration (the host has just waited for the device), µs; default 0: not "
                                     "measured (executor/calibrate_host.py measures it).")
    first_collective_extra_us: float = Field(default=0.0, ge=0, description="Extra host time of a rank's first "
                                             "collective or send/recv call of an iteration, µs; default 0.")
    collective_after_kernel_us: float | None = Field(default=None, ge=0, description="Host µs of a collective call "
        "right after another kind's call on its rank (rule host-issue); default: eager_per_collective_us.")
    collective_warmup_us: list[NonNegativeFloat] = Field(default_factory=lambda: [], description="More host time, µs, "
        "of a rank's k-th collective call of an eager iteration (k = 1, 2, ...: one value each, in order), on top "
        "of first_op_extra_us / first_collective_extra_us: the warm-up of the first linear + all_reduce layers "
        "after the executor's iteration start (executor/calibrate_host.py, warmup_layer_us). Empty: none.")
    cold_first_call_us: dict[Literal["kernel", "collective", "elementwise"], NonNegativeFloat] = Field(
        default_factory=lambda: {},
        description="More host time, µs, of a rank's first kernel launch, collective call and elementwise call "
        "of an iteration when the host waited cold_wait_us or longer for the GPU before it (the previous "
        "iteration GPU-bound: its first calls run cold), on top of first_op_extra_us / first_collective_extra_us. "
        "One H200 (schedsim execute's meta.host_call_end_s, five GPU-bound runs waiting 1.2-2.6 ms): "
        "kernel 19-33, collective 24 (all_reduce) to 59 (all_gather), elementwise 11-20. Empty: none.")
    cold_wait_us: float = Field(default=250.0, gt=0, description="Host wait for the GPU at an iteration's end, "
                                "µs, from which cold_first_call_us applies (measured: none at 0-7 µs of wait, "
                                "all at 1.2-2.6 ms; 250 is a guess between).")
    call_launch_fraction: float = Field(default=1.0, gt=0, le=1, description="Fraction of a call's host time "
                                        "after which its kernel reaches the GPU (the launch happens inside the "
                                        "call; the rest is the call's return path). Default 1: at its return "
                                        "(not measured); executor/calibrate_host.py measures it on a matmul.")
    graph_timing_event_us: float = Field(default=0.0, ge=0, description="GPU time, µs, that the pair of timing "
                                         "events around an op (external event-record nodes, how schedsim execute "
                                         "--cuda-graph times each op) adds to the op's span in a graph replay; "
                                         "used only to predict such a timed replay "
                                         "(HardwareProfile.timed_graph). Default 0: not measured.")
    graph_timing_gap_us: float | None = Field(default=None, ge=0, description="GPU time, µs, between two adjacent "
                                              "timing events in a graph replay (one op's end event and the next "
                                              "op's start): the whole span of a timed op that runs nothing on the "
                                              "GPU (a one-rank in-place collective). Default: graph_timing_event_us.")
    graph_timed: bool = Field(default=False, description="True in a profile from HardwareProfile.timed_graph: "
                              "every op of a CUDA graph holds its timing events (graph_timing_event_us, or "
                              "graph_timing_gap_us for an op that runs nothing): a graph timed op by op.")
    eager_timed: bool = Field(default=False, description="True in a profile from HardwareProfile.timed_eager: "
                              "every op of an eager run holds its pair of timing events on the GPU too "
                              "(graph_timing_event_us, or graph_timing_gap_us for an op that runs nothing).")
    source: str

    @property
    def p2p_call_s(self) -> float:
        """Host time of one unbatched isend/irecv call, seconds."""
        return (self.eager_per_collective_us if self.p2p_call_us is None else self.p2p_call_us) * 1e-6

    @property
    def batch_p2p_call_s(self) -> float:
        """Host time of one batch_isend_irecv call, seconds."""
        return 1.5 * self.p2p_call_s if self.batch_p2p_call_us is None else self.batch_p2p_call_us * 1e-6

    @property
    def kernel_gap_s(self) -> float:
        """The dispatch gap between two kernels back to back on a stream, seconds (``kernel_gap_us``, default
        ``max(0, -graph_per_op_us)``)."""
        return (max(0.0, -self.graph_per_op_us) if self.kernel_gap_us is None else self.kernel_gap_us) * 1e-6

    @property
    def event_wait_s(self) -> float:
        """Host time of one cross-stream event record + wait, seconds."""
        return (2.0 if self.event_wait_us is None else self.event_wait_us) * 1e-6

    @property
    def stream_switch_s(self) -> float:
        """Extra host time of one stream switch, seconds."""
        return self.stream_switch_us * 1e-6

    @property
    def elementwise_call_s(self) -> float:
        """Host time of one elementwise ``torch.add(a, b, out=c)`` call, seconds."""
        return (0.5 * self.eager_per_op_us if self.elementwise_call_us is None else self.elementwise_call_us) * 1e-6

    @property
    def memcpy_call_s(self) -> float:
        """Host time of one copy_ call, seconds."""
        return (self.eager_per_op_us if self.memcpy_call_us is None else self.memcpy_call_us) * 1e-6


#: The most µs a network latency field of a profile may give (``topology.scale_up.latency_us``,
#: ``topology.nics.latency_us``, ``transport_latency_us``, ``topology.fabric.latency_us``, ``links.<class>.latency_us``):
#: 1 s a crossing or switch hop, some 10^5 times any
#: fabric's (InfiniBand, RoCE and TCP hops take 1-100 µs); more is a unit slip (ms or ns written as µs), and a
#: figure near float's limit sums, over a collective's crossings, to an infinite time that the loader never names
NET_LATENCY_MAX_US = 1e6


class Link(_B):
    """One link class for the alpha-beta fallback: t = steps·latency + factor·bytes / bandwidth (Thakur et al. 2005)."""

    bandwidth_GBps: float = Field(ge=1e-6, le=RATE_MAX, description="Per-GPU unidirectional bandwidth, GB/s: the busbw a large collective reaches.")
    latency_us: float = Field(ge=0, le=NET_LATENCY_MAX_US, description="Per-step latency alpha, µs (at most 1e6).")
    source: str


#: GPU generations NCCL's tuning tables distinguish (``NCCL_NUM_COMPCAPS`` of src/graph/tuning.cc, NCCL 2.30.7)
GpuArch = Literal["volta", "ampere", "hopper", "blackwell"]


#: Where a network figure comes from: a specification or paper (published), a guess (assumed), a run on this
#: machine (measured), or ``schedsim calibrate --from-nccl-tests`` on nccl-tests logs (fitted)
Provenance = Literal["published", "assumed", "measured", "fitted"]
#: NCCL's algorithm and protocol names as schedsim spells them (schedsim.network.tuning.ALGOS, PROTOS)
_TIMING_ALGOS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
_TIMING_PROTOS = ("LL", "LL128", "Simple")


class TierTiming(_B):
    """How long one NCCL (algorithm, protocol) takes on a tier, where NCCL's own tuning constants are not the
    machine's: NCCL still chooses the algorithm with its constants (that is what it runs); these figures time
    the choice (:mod:`schedsim.network`)."""

    hw_latency_us: float | None = Field(default=None, ge=0, description="Replaces NCCL's hwLatencies[tier][algo]"
                                        "[proto] (src/graph/tuning.cc), µs per step of this tier, in the time.")
    bw_factor: float | None = Field(default=None, gt=0, description="Multiplies NCCL's bus bandwidth of this "
                                    "(algo, proto) (after tuning.cc's refinements, before its conversion to "
                                    "algorithm bandwidth) for groups this tier bounds (scale_up: one node; nics: "
                                    "across nodes). A factor, not GB/s: NCCL's bandwidth already depends on the "
                                    "group (channels, nodes: 2-node NVLS-tree doubles its network share), which a "
                                    "fixed GB/s fitted on one group shape would not.")
    provenance: Provenance
    source: str


def _timing_keys(v: dict[str, TierTiming]) -> dict[str, TierTiming]:
    """Keys are ``algo/proto`` in schedsim's spelling (``ring/LL``, ``nvls_tree/Simple``)."""
    for k in v:
        a, _, p = k.partition("/")
        if a not in _TIMING_ALGOS or p not in _TIMING_PROTOS:
            raise ValueError(f"timing key {k!r} is not algo/proto: algo one of {', '.join(_TIMING_ALGOS)}, proto "
                             f"one of {', '.join(_TIMING_PROTOS)} (e.g. 'ring/LL')")
    return v


TimingMap = Annotated[dict[str, TierTiming], AfterValidator(_timing_keys)]


class ScaleUp(_B):
    """The scale-up domain of a node: NVLink through NVSwitch, direct NVLink, or PCIe (:mod:`schedsim.network`)."""

    kind: Literal["nvswitch", "nvlink", "pcie"] = Field(description="How the GPUs of a node reach each other; "
                                                       "pcie: NCCL's PCI latencies, no LL128.")
    bandwidth_GBps: float = Field(ge=1e-6, le=RATE_MAX, description="Per-GPU, one-direction bandwidth, GB/s, in NCCL's topology "
                                  "units: NVLink links x NCCL's per-link figure (src/graph/topo.h: SM80_NVLINK_BW 20, "
                                  "SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1; H100 SXM 18 x 20.6 = 370.8), or the "
                                  "PCIe path's (PCI_BW 12 for Gen3 x16, 24 Gen4, 48 Gen5; without peer-to-peer the "
                                  "GPU's path to host memory, which NCCL's SHM transport takes).")
    p2p: bool = Field(default=True, description="CUDA peer-to-peer between the GPUs (NCCL's P2P transport); false "
                      "(kind pcie only): consumer GPUs, NCCL_P2P_DISABLE=1: NCCL's SHM transport through host memory "
                      "(schedsim.network.pcie). A schedule's env NCCL_P2P_DISABLE overrides it.")
    nvls: bool = Field(default=False, description="NVLink SHARP (NVLS) available: an NVSwitch of Hopper or later "
                       "with multicast (NCCL_NVLS_ENABLE).")
    latency_us: float = Field(default=0.0, ge=0, le=NET_LATENCY_MAX_US, description="Latency added per intra-node "
                              "step, µs, beyond NCCL's hwLat (default 0: NCCL's own figures). At most 1e6 "
                              "(NET_LATENCY_MAX_US: more is a unit slip).")
    timing: TimingMap = Field(default_factory=lambda: {}, description="algo/proto -> figures that time "
                                          "NCCL's choice on this tier (TierTiming); not listed: NCCL's constants.")
    provenance: Provenance = Field(default="assumed", description="Where bandwidth_GBps and latency_us come from.")
    source: str

    @model_validator(mode="after")
    def _nvls_needs_nvswitch(self) -> "ScaleUp":
        """NVLS is NVSwitch multicast: NCCL enables it only where the GPU reports multicast support
        (``ncclNvlsInit``, src/transport/nvls.cc) and its search finds NVLS channels through an NVSwitch node
        (``ncclTopoSearchTryNvls``, src/graph/search.cc). PCIe or direct NVLink has neither. ``p2p: false`` on
        NVLink is :func:`schedsim.network.pcie.check_p2p`'s error."""
        if self.nvls and self.kind != "nvswitch":
            raise ValueError(f"nvls: true needs kind: nvswitch, not {self.kind} (NVLink SHARP is NVSwitch "
                             "multicast; NCCL enables NVLS only on an NVSwitch)")
        from schedsim.network.pcie import check_p2p

        return check_p2p(self)


class Nics(_B):
    """The scale-out NICs of one node and which GPU uses which (rail-optimised: local GPU i on NIC i, NIC i of
    every node on rail i; NCCL's rings pair same-rail NICs, so rails cross the spine only between leaves)."""

    per_node: int = Field(gt=0, le=640, description="Compute NICs per node (NCCL_TOPO_MAX_NODES: 640 at most).")
    bandwidth_Gbps: float = Field(ge=1e-3, le=RATE_MAX, description="Line rate of one NIC, Gb/s (NCCL: speed / 8000 GB/s; "
                                  "400 Gb/s NDR -> 50 GB/s).")
    goodput: float | None = Field(default=None, ge=1e-3, le=1, description="Share of line rate a NIC moves for "
                                  "send/recv and all_to_all and as a shared link (RDMA's goodput; NCCL's maintainers: "
                                  "48 GB/s per 400G NIC, 24 per 200G, 12 per 100G: .96; rings and trees keep NCCL's "
                                  "channel speeds, src/graph/search.cc). None: 1.")
    gpu_to_nic: list[NonNegativeInt] | None = Field(
        default=None, description="Local GPU i uses NIC gpu_to_nic[i]; default: GPU i on NIC i * per_node // "
        "gpus_per_node (rail-optimised when per_node == gpus_per_node).")
    latency_us: float = Field(default=0.0, ge=0, le=NET_LATENCY_MAX_US, description="The net plugin's reported "
                              "latency, µs (ncclNetProperties.latency -> graph->latencyInter), which NCCL adds to its "
                              "network hop (twice for Simple: the flush) and chooses with; NCCL's IB plugin (IB and "
                              "RoCE), its socket plugin and Google's FasTrak (GPUDirect-TCPXO) plugin report 0. At "
                              "most 1e6 (1 s; NET_LATENCY_MAX_US: more is a unit slip, and near float's limit the "
                              "sum over a collective's steps is infinite).")
    transport: Transport | None = Field(default=None, description="The network's transport, which sets the default "
                                        "transport_latency_us (schedsim.hardware.transports). None: 0.")
    transport_latency_us: float = Field(default=0.0, ge=0, le=NET_LATENCY_MAX_US, description="µs each network "
                                        "crossing takes beyond NCCL's figures, which NCCL does not see (its net "
                                        "plugins report 0): it times the run (once per crossing of the chosen "
                                        "algorithm's longest chain, schedsim.network.net_crossings), not NCCL's "
                                        "choice. Default: the transport's (schedsim.hardware.transports), else 0 "
                                        "(NCCL's figures hold InfiniBand: NVIDIA/nccl-tests#309). Stated, it overrides "
                                        "the transport's (measured: calibrate --from-nccl-tests --transport-latency). "
                                        "At most 1e6 (NET_LATENCY_MAX_US: more is a unit slip).")
    timing: TimingMap = Field(default_factory=lambda: {}, description="algo/proto -> figures that time "
                                          "NCCL's choice across nodes (network hwLat per hop, bus bandwidth of a group "
                                          "across nodes); not listed: NCCL's constants.")
    provenance: Provenance = Field(default="assumed", description="Where bandwidth_Gbps, latency_us and "
                                   "transport_latency_us come from.")
    source: str

    @model_validator(mode="before")
    @classmethod
    def _transport_latency(cls, data: Any) -> Any:
        return with_transport_latency(data)

    @field_validator("gpu_to_nic")
    @classmethod
    def _nic_exists(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        n = info.data.get("per_node")
        if v is not None and n is not None:
            bad = [x for x in v if x >= n]
            if bad:
                raise ValueError(f"rail to a missing NIC: NIC {bad[0]} named but the node has per_node = {n} NICs "
                                 f"(0..{n - 1})")
        return v


class Fabric(_B):
    """The scale-out fabric between NICs: one switch, or leaf/spine with an oversubscription ratio."""

    kind: Literal["single_switch", "leaf_spine"] = Field(default="leaf_spine", description="single_switch: every "
                                                        "node on one switch (nodes_per_leaf ignored).")
    nodes_per_leaf: int | None = Field(default=None, gt=0, description="Nodes under one leaf (per rail); groups "
                                       "within one leaf do not cross the spine. None: every node on one leaf.")
    oversubscription: float = Field(default=1.0, ge=1.0, description="Leaf down / up bandwidth ratio: traffic "
                                    "that crosses the spine gets 1/oversubscription of the NIC rate.")
    latency_us: float = Field(default=0.0, ge=0, le=NET_LATENCY_MAX_US, description="Latency per switch hop, µs, "
                              "that each network crossing takes beyond NCCL's figures (one hop within a leaf, three "
                              "across leaves); it times the run but not NCCL's choice, since NCCL's topology has no "
                              "switch (default 0: NCCL's own figures hold the switch, as they do on InfiniBand). At "
                              "most 1e6 (1 s a hop; NET_LATENCY_MAX_US: more is a unit slip, and near float's limit "
                              "the sum over a chain's hops is infinite).")
    sharp: bool = Field(default=False, description="The switches reduce in the network (NVIDIA SHARP) and NCCL "
                        "runs its CollNet plugin (NCCL_COLLNET_ENABLE=1): CollNet Direct / Chain and NVLS across "
                        "nodes for all_reduce (schedsim.network.tuning).")
    provenance: Provenance = Field(default="assumed", description="Where oversubscription and latency_us come from.")
    source: str


class Topology(_B):
    """Ranks r and q share a node when r // gpus_per_node == q // gpus_per_node; which link class each side uses.

    With ``scale_up`` (and ``nics`` for more than one node) collectives follow NCCL's own tuning model on this
    topology (:mod:`schedsim.network`); without, the link classes of ``links`` (alpha-beta) and the tables.
    ``placement`` maps rank r to GPU ``placement[r]`` (node = GPU // gpus_per_node); default GPU r.
    """

    gpus_per_node: int = Field(gt=0)
    intra_node_link: LinkClass = "nvlink"
    inter_node_link: LinkClass = "network"
    nodes: int | None = Field(default=None, gt=0, description="Nodes of the cluster (None: as many as the "
                              "schedule's world needs).")
    arch: GpuArch | None = Field(default=None, description="GPU generation for NCCL's tuning constants.")
    cpu_vendor: Literal["intel", "amd", "arm"] = Field(default="intel", description="Host CPU vendor (NCCL's "
                                                       "llMaxBws row and network post overhead across nodes, where "
                                                       "arm counts as intel; scale_up.p2p false: intel's 6/5 PCIe "
                                                       "overhead, schedsim.network.pcie).")
    scale_up: ScaleUp | None = None
    nics: Nics | None = None
    fabric: Fabric | None = None
    nccl_within_node: bool = Field(default=True, description="Groups inside one node use the NCCL model too; "
                                   "false: they keep links and the collective tables (as calibrated), and only "
                                   "groups across nodes use the NCCL model.")
    placement: list[NonNegativeInt] | None = Field(default=None, description="GPU of rank r (global index "
                                                    "node * gpus_per_node + local GPU); default: rank r on GPU r.")

    @field_validator("nics")
    @classmethod
    def _rails(cls, v: Nics | None, info: ValidationInfo) -> Nics | None:
        g = info.data.get("gpus_per_node")
        if v is not None and v.gpu_to_nic is not None and g is not None and len(v.gpu_to_nic) != g:
            raise ValueError(f"gpu_to_nic names {len(v.gpu_to_nic)} GPUs but gpus_per_node is {g}: give one NIC "
                             "per local GPU")
        return v

    @field_validator("placement")
    @classmethod
    def _placement(cls, v: list[int] | None, info: ValidationInfo) -> list[int] | None:
        if v is None:
            return v
        return check_placement(v, info.data.get("gpus_per_node"), info.data.get("nodes"))

    @model_validator(mode="after")
    def _cluster(self) -> "Topology":
        if self.scale_up is not None and self.arch is None:
            raise ValueError("scale_up needs arch (volta, ampere, hopper or blackwell) for NCCL's tuning constants")
        if self.nics is not None and self.scale_up is None:
            raise ValueError("nics needs scale_up: the NCCL model of a group across nodes runs its intra-node part "
                             "on the scale-up domain")
        return self


class Memcpy(_B):
    """Copy-engine bandwidths in GB/s (pinned host memory; d2d counts bytes read plus written) and a latency in µs."""

    h2d_GBps: float = Field(ge=1e-6, le=RATE_MAX)
    d2h_GBps: float = Field(ge=1e-6, le=RATE_MAX)
    d2d_GBps: float = Field(ge=1e-6, le=RATE_MAX, description="Bytes read plus written per second.")
    latency_us: float = Field(default=5.0, ge=0)
    source: str


class GemmTable(_B):
    """Measured single-GEMM times: rows ``[dtype, m, n, k, time_ms]``; see :class:`schedsim.gpu.cost.CostModel`."""

    source: str
    entries: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, PositiveFloat]] = Field(
        default_factory=lambda: [], description="[dtype, m, n, k, time_ms] measured single-GEMM times (batch 1).")
    shape_curve_from: str | None = Field(
        default=None,
        description="Name of another profile whose measured GEMM table supplies the shape-efficiency curve for "
        "shapes this table lacks: rate(shape) = own rate(nearest) * ref rate(shape) / ref rate(nearest).")
    ctas: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, ctas]: the CTAs (grid x*y*z) of the kernel the BLAS library launched for "
        "that shape, from a Kineto trace (calibrate on CUDA records it); shapes not listed use the 128x128-tile "
        "rule of CostModel.gemm_ctas.")
    ctas_per_sm: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, ctas_per_sm]: how many CTAs of that GEMM's kernel one SM holds at once (the "
        "CUDA occupancy calculation from the kernel's block size, registers and shared memory in a Kineto trace; "
        "calibrate records shapes above 1). Rule cta-count of schedsim.gpu.rules then counts ceil(ctas / ctas_per_sm) "
        "SMs for it; shapes not listed hold one CTA per SM.")
    reduce: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, PositiveInt,
                       PositiveFloat]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, slots, us]: the second kernel the BLAS library launches for that GEMM (cuBLAS's "
        "split-K reduction): the SMs one wave of it holds (its grid over the CTAs one SM fits) and its time alone in "
        "microseconds, from a Kineto trace (calibrate on CUDA records it). Rule split-k of schedsim.gpu.rules "
        "hands it to the GPU when the main kernel ends; it is part of the table's time. Shapes not listed run as "
        "one kernel.")
    tail: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, NonNegFloat]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, us]: that GEMM's ragged last-wave end, µs, which a compute kernel waiting for "
        "SMs takes back (rule wave-tail of schedsim.gpu.rules); calibrate on CUDA fits it per schedule GEMM of at "
        "least half a wave from the GEMM run 8 to a stream on 8 streams. Shapes not listed take the nearest listed "
        "shape of their dtype (CostModel.wave_tail), and gpu.wave_tail_us when their dtype has none.")
    call: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, PositiveFloat]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, x]: the host time of one torch.matmul(a, b, out=c) call of that shape as a "
        "multiple of launch.eager_per_op_us (the 64x64 call), both timed in one process (calibrate on CUDA: every "
        "GEMM it times, the schedules', --gemm and the default grid, of at most 0.2 ms, where the host can bound "
        "them; the median over its fresh host processes). bf16 1024x512x8192, whose call launches two "
        "kernels (split-K, gemm.reduce), cost 1.29x on one H200 (call + add less the add's loop; "
        "[evidence: elementwise-host]). Rule host-issue of schedsim.gpu.rules; shapes not listed: 1.")
    memset: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, NonNegFloat]] = Field(
        default_factory=lambda: [], description="[dtype, m, n, k, gap_us]: its call launches a memset before its "
        "main kernel (cuBLAS split-K 'coopA' zeroing a workspace); gap_us: idle GPU, the memset's end to the main "
        "kernel's start (Kineto, one call; calibrate), the host's second launch. Rule host-issue; unlisted: none.")
    graph: list[tuple[GemmDType, PositiveInt, PositiveInt, PositiveInt, PositiveFloat, PositiveFloat]] = Field(
        default_factory=lambda: [],
        description="[dtype, m, n, k, warm_ms, cold_ms]: one GEMM's GPU time as a node of a CUDA-graph chain, its "
        "operands in L2 (one input set reused) and from HBM (a pool of input sets of at least 4x L2); calibrate "
        "measures them for the schedules' GEMMs. warm_ms is its time in a graph; cold_ms - warm_ms what HBM "
        "operands add, in a graph or eagerly (rule graph-nodes of schedsim.gpu.rules).")


def _table_kind(key: str) -> str:
    """A table key that is one of :data:`schedsim.kinds.TABLE_KINDS` as the registry holds it now (a kind
    registered after import included); pydantic's ``literal_error`` otherwise, with the message it gives a
    ``Literal`` of those keys."""
    if key not in TABLE_KINDS:
        names = [repr(k) for k in TABLE_KINDS]
        listed = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else "".join(names)
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": listed})
    return key


#: A key of a profile's measured tables, checked against the registry when the profile loads.
TableKey = Annotated[TableKind, AfterValidator(_table_kind)]


class CollectiveTables(_B):
    """busbw-vs-size tables in the nccl-tests convention (``doc/PERFORMANCE.md``), per collective and group size."""

    source: str
    tables: dict[TableKey, dict[PositiveInt, Annotated[list[tuple[PositiveFloat, Rate]], Field(min_length=1)]]] = Field(
        default_factory=lambda: {},
        description="collective -> group size -> [[size_bytes, busbw_GBps], ...] in the nccl-tests convention "
        "(size = the size column; busbw = algbw * factor). Keys: all_reduce, all_gather, reduce_scatter, "
        "broadcast, reduce, all_to_all, sendrecv, ...",
    )
    nodes: dict[TableKey, dict[PositiveInt, PositiveInt]] = Field(
        default_factory=lambda: {},
        description="collective -> group size -> nodes its table was measured over (calibrate --from-nccl-tests "
        "records it from the log's hosts); not listed: 1. A table times only groups that span that many nodes.",
    )


class Contention(_B):
    """Dimensionless slowdown factors between kernels and copies (rules of :mod:`schedsim.gpu.rates`), each ``x``
    in one form: the slowed op takes ``1 + x`` times its time (runs ``1/(1+x)`` as fast); 0 is no slowdown.
    (``nccl``'s and ``power``'s factors are the time multipliers themselves, ``1 + x``, 1 none.)"""

    @model_validator(mode="before")
    @classmethod
    def _drop_retired(cls, data: Any) -> Any:
        """The :data:`RETIRED_FIELDS` of this section left out (:func:`load_profile` warns about them)."""
        if isinstance(data, Mapping) and any(f in data for sec, f in RETIRED_FIELDS if sec == "contention"):
            return {k: v for k, v in data.items() if ("contention", k) not in RETIRED_FIELDS}
        return data

    compute_slowdown_with_copy: float = Field(default=0.0, ge=0, description="gamma: a kernel runs 1/(1+gamma) as "
                                              "fast while a copy engine transfers on the same GPU.")
    copy_slowdown_with_compute: float = Field(default=0.0, ge=0, description="delta: a copy runs 1/(1+delta) as fast "
                                              "while a kernel runs on the same GPU.")
    h2d_slowdown_beside_d2h: float = Field(default=0.0, ge=0, description="A pinned host-to-device copy runs "
                                           "1/(1+x) as fast while a device-to-host copy runs on the same GPU "
                                           "(both PCIe directions busy; `waves` model).")
    d2h_slowdown_beside_h2d: float = Field(default=0.0, ge=0, description="A device-to-host copy runs 1/(1+x) as "
                                           "fast while a host-to-device copy runs on the same GPU.")
    source: str


class Nccl(_B):
    """How NCCL kernels use the GPU (the ``waves`` model, :mod:`schedsim.gpu.rules`).

    One CTA per channel, each on its own SM (NCCL issues 689/181: up to 640 threads x 96 registers, so NCCL
    CTAs do not share an SM). Defaults: 16 SMs; no slowdowns until measured.
    """

    sms_per_collective: int = Field(default=16, ge=1, description="SMs (CTAs, one per channel) a collective "
                                    "or p2p kernel occupies.")
    slowdown_beside_gemm: float = Field(default=1.0, ge=1.0, description="Comm kernel time multiplier when "
                                        "concurrent kernels hold all the other SMs; scaled linearly by the "
                                        "fraction of those SMs they hold.")
    gemm_slowdown_beside_nccl: float = Field(default=1.0, ge=1.0, description="Compute kernel time multiplier "
                                             "while an NCCL kernel is resident beside it.")
    p2p_one_way_speedup: float = Field(default=1.0, ge=1.0, description="How much faster a send/recv runs than "
                                       "the `sendrecv` table (a two-way exchange) when nothing uses the reverse "
                                       "direction of its link (exchange time / one-way time).")
    unbatched_p2p_serialized: bool = Field(default=True, description="Unbatched send/recv share the default "
                                           "process group's communicator (PyTorch eager init) and run in issue "
                                           "order with its other ops; false: one communicator per pair (lazy init).")
    algo: str | None = Field(default=None, description="NCCL_ALGO as NCCL reads it (src/graph/tuning.cc "
                             "parseList): e.g. 'ring', '^nvls,nvlstree', 'ring;allreduce:tree'; restricts the "
                             "algorithms the NCCL model chooses from (topology.scale_up profiles).")
    proto: str | None = Field(default=None, description="NCCL_PROTO as NCCL reads it: e.g. 'Simple', '^LL128', "
                              "'LL,Simple;allreduce:LL128'.")
    version: str | None = Field(default=None, description="NCCL release whose tuning.cc constants choose and time "
                                "collectives (NCCL's model changed between releases: e.g. NVLS-tree's network step "
                                "14 µs up to 2.28.7, 20.9 from 2.28.9; NVLS bandwidth before 2.28 is timed at 2.28.3's "
                                "prediction, schedsim.network.timing_table), as nccl-tests prints it ('2.26.2'); "
                                "2.20.0 or later; None: the newest modelled, 2.30.7 "
                                "(schedsim.network.tuning.constants_for).")
    min_ctas: int | None = Field(default=None, ge=1, description="NCCL_MIN_CTAS: at least this many channels "
                                 "(CTAs) per collective (src/graph/connect.cc, src/transport/nvls.cc); extra ring "
                                 "channels are copies of the same rings and add no bandwidth "
                                 "(schedsim.network.tuning.channel_ceiling). None: NCCL's default (1).")
    max_ctas: int | None = Field(default=None, ge=1, description="NCCL_MAX_CTAS: at most this many channels (CTAs) "
                                 "per collective; fewer than NCCL's default run at that fraction of its bandwidth "
                                 "(schedsim.network.tuning.channel_ceiling, cta_bw_scale). None: 64 (MAXCHANNELS).")
    min_nchannels: int | None = Field(default=None, ge=1, description="NCCL_MIN_NCHANNELS: at least this many ring "
                                      "and tree channels (not NVLS's). None: unset.")
    max_nchannels: int | None = Field(default=None, ge=1, description="NCCL_MAX_NCHANNELS: at most this many ring "
                                      "and tree channels (not NVLS's). None: unset.")
    source: str = "defaults (not measured)"

    @field_validator("version")
    @classmethod
    def _nccl_version(cls, v: str | None) -> str | None:
        if v is not None:
            from schedsim.network.tuning import constants_for

            constants_for(v)  # raises ValueError: not major.minor.patch, or older than modelled
        return v

    @field_validator("algo", "proto")
    @classmethod
    def _nccl_list(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None:
            from schedsim.network.tuning import parse_nccl_list

            parse_nccl_list(v, "algo" if info.field_name == "algo" else "proto")  # raises ValueError, naming the token
        return v


class Power(_B):
    """The board power limit under sustained load (the ``waves`` model, :mod:`schedsim.gpu.power`)."""

    gemm_slowdown_by_duty: list[tuple[Annotated[float, Field(ge=0, le=1)],
                                      Annotated[float, Field(ge=1)]]] = Field(
        default_factory=lambda: [],
        description="[[tensor-core duty 0-1, GEMM time multiplier >= 1], ...] sorted by duty: how much longer every "
        "GEMM takes than the table (timed in bursts at the boost clock) when tensor-core GEMMs keep the GPU busy "
        "that fraction of the time; 1 below the first point, linear between points. Empty: no power model.")
    onset_s: float | None = Field(
        default=None, ge=0,
        description="Seconds of back-to-back tensor-core GEMMs that run at the table's speed before the limiter "
        "lowers the clock (None: the slowdown holds from the start). A run whose GPU had been under load for "
        "less than this, times its duty, before the iterations measured runs them at the table's speed.")
    source: str = "not measured"

    @field_validator("gemm_slowdown_by_duty")
    @classmethod
    def _sorted(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(v, v[1:], strict=False)):
            raise ValueError("points must have increasing duty and non-decreasing multipliers; "
                             "sort them by duty, e.g. [[0.6, 1.0], [0.75, 1.035], [1.0, 1.166]]")
        return v


#: The name suffix of a profile from :meth:`HardwareProfile.timed_graph`; predictions made with one say so in their
#: meta (``timed_graph: true``), and a timeline's ``profile`` carries it.
TIMED_GRAPH_SUFFIX = "+timed_graph"
#: name suffix of a profile from :meth:`HardwareProfile.timed_eager`
TIMED_EAGER_SUFFIX = "+timed_eager"


class HardwareProfile(_B):
    """A machine: GPU rates, launch overheads, links, copy engines, measured tables and contention factors."""

    name: str
    description: str = ""
    gpu: GPU
    launch: Launch
    topology: Topology
    links: dict[LinkClass, Link]
    memcpy: Memcpy
    gemm: GemmTable
    collectives: CollectiveTables
    contention: Contention
    nccl: Nccl = Field(default_factory=Nccl)
    gpu_model: Literal["waves", "replay"] = Field(
        default="waves", description="GPU execution model of the simulator: 'waves' (CTAs in waves, FIFO block "
        "dispatch, hardware queues; :mod:`schedsim.gpu.rules`) or 'replay' "
        "(recorded durations, no contention: replaying an imported trace; :mod:`schedsim.sim.engine`).")
    power: Power | None = Field(default=None, description="Sustained-load GEMM slowdown (waves model); omit for none.")

    def with_gemm_slowdown(self, factor: float) -> "HardwareProfile":
        """This profile with every GEMM ``factor`` times slower: table times × factor, dense peaks / factor
        (the SM clock falls for every kernel class; :mod:`schedsim.gpu.power`). ``factor`` >= 1."""
        entries = [(d, m, n, k, t * factor) for d, m, n, k, t in self.gemm.entries]
        graph = [(d, m, n, k, w * factor, c * factor) for d, m, n, k, w, c in self.gemm.graph]
        gemm = self.gemm.model_copy(update={"entries": entries, "graph": graph})
        gpu = self.gpu.model_copy(update={"peak_tflops": {d: v / factor for d, v in self.gpu.peak_tflops.items()}})
        return self.model_copy(update={"gemm": gemm, "gpu": gpu})

    def timed_graph(self) -> "HardwareProfile":
        """This profile for predicting a CUDA-graph replay timed op by op, as ``schedsim execute --cuda-graph``
        times it: ``launch.graph_timed`` set, so that every op of a graph also holds
        ``launch.graph_timing_event_us``, the span its pair of external event-record nodes adds
        (:func:`schedsim.gpu.rules.graph_node_terms`).

        Source: one H200 [evidence: timed-graph] (3 processes, 64-op chains
        in one graph): a timed op's span exceeded the untimed graph's time per op by 2.0-2.2 µs (32×1024×1024
        bf16 GEMMs: 3.51 → 5.50-5.73 µs; ``add_``: 1.02 → 3.14-3.20 µs); 1.25-1.28 µs passes between one op's end
        event and the next op's start event (``launch.graph_timing_gap_us``): that is the whole span of an op
        that runs nothing, and between ops it lies outside every span and is not modelled. Returns
        ``self`` when the term is 0 (not measured: nothing to add) or the profile is timed already."""
        if self.launch.graph_timing_event_us <= 0 or self.is_timed_graph:
            return self
        launch = self.launch.model_copy(update={"graph_timed": True})
        return self.model_copy(update={"launch": launch, "name": self.name + TIMED_GRAPH_SUFFIX})

    def timed_eager(self, per_op_us: float) -> "HardwareProfile":
        """This profile for predicting an eager run timed op by op, as ``schedsim execute`` times it (an event
        record before and after every op): ``launch.executor_extra_per_op_us`` set to ``per_op_us``, the host time
        per op that timing adds, which the run itself measures (``meta.timing_host_per_op_us``,
        :func:`executor.timing.timing_host_per_op_us`); simulate it with ``model_executor=True``. Name suffix
        :data:`TIMED_EAGER_SUFFIX`. The plain prediction models plain PyTorch's calls and ``per_op_us`` is the
        timed loop over the lean one, so the lean loop's own extra over plain PyTorch (the profile's
        ``executor_extra_per_op_us``, 0.05–1.6 µs measured) is left out of both.

        Why: in a host-bound eager run the timing events are host time the uninstrumented run does not pay
        (allgather_mm bf16 chunks 16 on one H200: 9.18 ms timed against 6.30 uninstrumented), so a
        prediction of the uninstrumented run queues ops on the GPU that the timed run issued late and ran at once
        (per-op median 181 % on that case; 34 % with 5 µs per op added;
        [evidence: elementwise-host]).

        On the GPU the events of an eager op cost what they cost in a graph: ``launch.eager_timed`` is set, so that
        every op also holds ``launch.graph_timing_event_us`` (:func:`schedsim.gpu.rules.graph_node_terms`).
        allgather_mm bf16 chunks 16, timed eager on one H200, [evidence: elementwise-host], where the GPU ran the chunk
        GEMMs back to back: each span exceeded the untimed kernel by 2.1-3.2 µs (``add_`` 4.3-4.8 µs against 2.3;
        1024×512×8192 bf16 GEMMs 21-24 against 20.3), and 1.3-1.6 µs passed between one op's end event and the
        next op's start event, as in a timed graph (2.0-2.2 and 1.25-1.28 µs there, :meth:`timed_graph`).

        >>> from schedsim.hardware.profile import load_profile
        >>> p = load_profile("h200").timed_eager(5.0)
        >>> p.name, p.launch.executor_extra_per_op_us, p.launch.eager_timed
        ('h200+timed_eager', 5.0, True)
        """
        launch = self.launch.model_copy(update={"executor_extra_per_op_us": max(0.0, float(per_op_us)),
                                                "eager_timed": True})
        return self.model_copy(update={"launch": launch, "name": self.name + TIMED_EAGER_SUFFIX})

    def with_nccl_env(self, env: Mapping[Any, Any], where: Mapping[str, str] | None = None) -> "HardwareProfile":
        """This profile with a schedule's ``NCCL_ALGO`` / ``NCCL_PROTO`` (its ``env``) in place of ``nccl.algo`` /
        ``nccl.proto``, and ``NCCL_MIN_CTAS`` and the other keys of :data:`NCCL_ENV_FIELDS` in place of their
        fields, as NCCL reads the environment over its defaults; ``self`` when ``env`` sets none.
        ``where``: each key's place in the schedule (``file:line: env.NCCL_ALGO``), kept in ``nccl.source`` after
        :data:`SCHEDULE_ENV_SOURCE` so errors about these settings name the schedule, not the profile."""
        from schedsim.network.pcie import with_p2p_env  # NCCL_P2P_DISABLE: topology.scale_up.p2p

        me, upd = with_p2p_env(self, env, where), {f: env[k] for k, f in NCCL_ENV_FIELDS if k in env}
        if not upd:
            return me
        places = [(where or {}).get(k, f"env.{k}") for k, _f in NCCL_ENV_FIELDS if k in env]
        upd["source"] = SCHEDULE_ENV_SOURCE + " and ".join(places)
        return me.model_copy(update={"nccl": me.nccl.model_copy(update=upd)})

    @property
    def is_timed_graph(self) -> bool:
        """True for a profile from :meth:`timed_graph` (``launch.graph_timed``)."""
        return self.launch.graph_timed

    def link_for(self, ranks: tuple[int, ...]) -> Link:
        """Link class joining ``ranks``: intra-node if they share a node, else inter-node.

        Raises
        ------
        ProfileError
            If the profile lacks that link class.
        """
        g = self.topology.gpus_per_node
        same = len({r // g for r in ranks}) <= 1
        cls = self.topology.intra_node_link if same else self.topology.inter_node_link
        if cls not in self.links:
            raise ProfileError(f"profile {self.name!r} has no {cls!r} link for ranks {list(ranks)}"
                               f"\n  fix: add links.{cls} (bandwidth_GBps, latency_us, source) to the profile")
        return self.links[cls]


with plugins_off():  # the parts first, so HardwareProfile reuses their schemas
    for _model in (GPU, Launch, Link, ScaleUp, Nics, Fabric, Topology, Memcpy, GemmTable, CollectiveTables,
                   Contention, Nccl, Power, HardwareProfile):
        _model.model_rebuild()


#: How ``nccl.source`` begins when a schedule's ``env`` set ``nccl.algo`` / ``nccl.proto``
#: (:meth:`HardwareProfile.with_nccl_env`); the places in the schedule follow it.
SCHEDULE_ENV_SOURCE = "the schedule's "
#: The NCCL environment variables a schedule's ``env`` may set, and the ``nccl:`` field each replaces
NCCL_ENV_FIELDS: tuple[tuple[str, str], ...] = (
    ("NCCL_ALGO", "algo"), ("NCCL_PROTO", "proto"), ("NCCL_MIN_CTAS", "min_ctas"), ("NCCL_MAX_CTAS", "max_ctas"),
    ("NCCL_MIN_NCHANNELS", "min_nchannels"), ("NCCL_MAX_NCHANNELS", "max_nchannels"))


#: :func:`load_profile`'s profiles, by argument (a path by its absolute form): the
#: :func:`~schedsim.hardware.profile_files._stamp` of each file read (the profile, its bases) and the profile; the 16
#: last loaded.
_LOADED: dict[str, tuple[list[tuple], HardwareProfile]] = {}


def load_profile(name_or_path: str) -> HardwareProfile:
    """Load a shipped profile by name, or a profile YAML by path (:func:`~schedsim.hardware.profile_files.
    profile_data`); the same object again while every file it read (it and its ``base:`` chain) is unchanged
    (path, inode, size, modification and change times, taken before each read), else read anew: an edit between
    two ``api.predict`` calls of one process is seen.

    Raises
    ------
    ProfileError
        Unknown name, unreadable file, or a field that fails validation
        (the message names the field).
    """
    # a path by its absolute form: one relative path read from two folders is two files
    key = os.path.abspath(name_or_path) if Path(name_or_path).suffix else name_or_path
    got = _LOADED.get(key)
    if got is not None and all(_stamp(Path(s[0])) == s for s in got[0]):
        return got[1]
    read: list[tuple] = []
    p, data = profile_data(name_or_path, read)
    if isinstance(data.get("gpu_model"), str):
        check_gpu_model(data["gpu_model"], f"{p}: gpu_model")
    try:
        prof = HardwareProfile.model_validate(data)
    except ValidationError as e:
        raise ProfileError.of_field(p, e.errors(include_url=False)[0]) from None
    _LOADED.pop(key, None)
    _LOADED[key] = (read, prof)
    while len(_LOADED) > 16:
        del _LOADED[next(iter(_LOADED))]
    return prof
