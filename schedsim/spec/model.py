"""Pydantic v2 models of a schedule file (``schema_version: 1``).

Only the loader builds these; everything after the spec uses the frozen
:class:`schedsim.graph.ops.Op` dataclass. Every field is documented where it is
declared, so ``schedsim schema`` exports the descriptions for editors.

Message sizes follow the nccl-tests convention (``doc/PERFORMANCE.md``): the
size of a collective is the *size column* of nccl-tests, i.e. the larger of the
send and receive buffers of one rank: the all_gather output, the
reduce_scatter input, the all_reduce buffer, the all_to_all send buffer, the
broadcast/reduce buffer, scatter's send buffer on the root, gather's receive
buffer on the root. Write ``buffer: shard`` to give the per-rank piece instead
(the all_gather input, the reduce_scatter output); it is multiplied by the group
size.
"""

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from schedsim._pydantic import no_bool_numbers, plugins_off
from schedsim.kinds import COLLECTIVE_KINDS, COMM_KINDS, KINDS, DType
from schedsim.units import DTYPE_BYTES, MAX_BYTES, MAX_DIM, MAX_DURATION_US, MAX_FLOPS, MAX_REPEAT

if TYPE_CHECKING:
    from schedsim.spec.pipeline_block import PipelineSpec
    from schedsim.spec.training_block import TrainingSpec

__all__ = [
    "ScheduleSpec",
    "MatmulOp",
    "ComputeOp",
    "CollectiveOp",
    "SendOp",
    "RecvOp",
    "MemcpyOp",
    "SynchronizeOp",
    "OP_MODELS",
    "build_op_models",
    "COLLECTIVE_KINDS",
    "COMM_KINDS",
    "NUMERIC_FIELDS",
]


NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-\[\]]*$"



# Default factories are lambdas, not the builtins list and dict: building a model, pydantic inspects each
# factory's signature, and inspect.signature(list) parses its text signature with tokenize (~2 ms the first
# time, compiling tokenize's pattern; ~2% of a cold `check`).
# defer_build: the models are built at the end of this module, with pydantic's plugin discovery off (see
# schedsim._pydantic), and the bases that are never validated themselves (_Base, _OpBase, _SizedMixin, _P2P)
# are not built at all. Together 1.6% of the instructions of a cold `check` (callgrind).
class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class _OpBase(_Base):
    name: str = Field(
        pattern=NAME_PATTERN,
        description="Op name, unique on each rank. Letters, digits, _ . - [ ]; may use {expr}.",
    )
    ranks: list[int] | None = Field(
        default=None,
        description="Ranks the op runs on (one instance per rank). Omit or write 'all' for every rank. "
        "For a collective this is its group.",
    )
    stream: str | None = Field(
        default=None,
        description="Stream the op is issued on. Defaults: 'compute' for matmul/compute, 'comm' for "
        "collectives and send/recv, 'copy' for memcpy. Ops on one stream of one rank run in the order written.",
    )
    deps: list[str] = Field(
        default_factory=lambda: [],
        description="Names of ops on the same rank that must finish first (a CUDA event wait when the "
        "streams differ).",
    )
    tags: dict[str, Any] = Field(
        default_factory=lambda: {},
        description="Free-form labels kept in the timeline (e.g. microbatch, stage, phase): strings, numbers, "
        "booleans or null.",
    )
    host_us: float = Field(
        default=0.0, ge=0,
        description="Python time (µs) the program spends on the host thread just before issuing this op "
        "(data loading, bookkeeping); it delays this op's launch and every later one on the rank. Eager only: "
        "a CUDA graph replay skips it.",
    )
    graph: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="Name of a CUDA graph the op is captured in, beside the eager ops of the schedule: consecutive "
        "ops of a rank with the same name are one graph launch on the host (launch.graph_launch_us) instead of one "
        "call each. Omit to launch the op eagerly. Not with launch: cuda_graph (the whole schedule is one graph) "
        "nor host_us.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_bool_number(cls, data: Any) -> Any:
        """A YAML ``true`` / ``false`` given for a number (``bytes: true``, ``m: false``) is refused: pydantic's
        lax mode would read it as 1 / 0, a silently wrong size. Fields that take a boolean keep it."""
        return no_bool_numbers(cls.model_fields, data)

    @field_validator("tags")
    @classmethod
    def _scalar_tags(cls, v: dict[str, Any]) -> dict[str, Any]:
        """Tag values are strings, numbers, booleans or null: ops are grouped by their tag sets (the lowering
        interns them, the timeline and its pictures read them), which a list or mapping cannot key."""
        if set(map(type, v.values())) <= _TAG_TYPES:  # one C loop for the usual case
            return v
        for k, x in v.items():
            if x is not None and type(x) not in (str, int, float, bool):
                raise ValueError(f"tag {k!r} holds a {type(x).__name__} ({_short_repr(x)}); a tag value is a string, "
                                 "number, boolean or null: write it as one (e.g. a string \"0-3\" for a range)")
        return v


#: The types of a tag value (``_scalar_tags``).
_TAG_TYPES = frozenset({str, int, float, bool, type(None)})


def _short_repr(x: Any, n: int = 40) -> str:
    r = repr(x)
    return r if len(r) <= n else r[:n - 3] + "..."


def _one_size_of(m: Any) -> Any:
    """A sized op's check: exactly one of ``bytes`` or ``shape``, a shape of sizes >= 0 within the bytes limit."""
    if (m.bytes is None) == (m.shape is None):
        raise ValueError("give exactly one of `bytes` or `shape` (+ `dtype`)")
    if m.shape is not None and any(d < 0 for d in m.shape):
        raise ValueError("shape dimensions must be >= 0")
    if m.shape is not None and m.size_bytes() > MAX_BYTES:
        raise ValueError(f"the shape holds more than {MAX_BYTES:,} bytes (1 EiB); check its dimensions")
    return m


class _SizedMixin(_Base):
    bytes: int | None = Field(default=None, ge=0, le=MAX_BYTES, description="Message size in bytes (see `buffer`).")
    duration_us: float | None = Field(
        default=None, ge=0, le=MAX_DURATION_US,
        description="Measured duration in microseconds (a replay of an imported trace, `schedsim import ... --out "
        "DIR` writes it): the op takes it instead of the profile's cost model. Omit to model the op.")
    shape: list[int] | None = Field(default=None, description="Message shape; size = prod(shape) * dtype bytes.")
    dtype: DType = Field(default="fp32", description="Element type of the message.")

    @model_validator(mode="after")
    def _one_size(self) -> Any:
        return _one_size_of(self)

    def size_bytes(self) -> int:
        """Message size in bytes: ``bytes``, or prod(shape) × element size of ``dtype``."""
        if self.bytes is not None:
            return self.bytes
        n = 1
        for d in self.shape or []:
            n *= d
        return n * DTYPE_BYTES[self.dtype]


class MatmulOp(_OpBase):
    """``C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]``: 2·batch·m·n·k FLOP."""

    kind: str  # a Literal of the registry's kinds of this model (build_op_models)
    m: int = Field(gt=0, le=MAX_DIM, description="Rows of A and C.")
    n: int = Field(gt=0, le=MAX_DIM, description="Columns of B and C.")
    k: int = Field(gt=0, le=MAX_DIM, description="Inner dimension.")
    batch: int = Field(default=1, gt=0, le=MAX_DIM, description="Batch count of a batched GEMM.")
    dtype: DType = Field(default="fp32", description="fp32 means TF32 off; tf32 means TF32 on.")
    repeat: int = Field(default=1, gt=0, le=MAX_REPEAT, description="Identical kernels run back to back (e.g. one per layer).")


class ComputeOp(_OpBase):
    """A generic kernel: a fixed duration, or costed from FLOP and bytes moved (roofline)."""

    kind: str  # a Literal of the registry's kinds of this model (build_op_models)
    flops: float | None = Field(default=None, ge=0, le=MAX_FLOPS, description="Floating-point operations.")
    bytes: float | None = Field(default=None, ge=0, le=MAX_BYTES, description="Bytes read plus written in HBM.")
    duration_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US,
                                      description="Fixed duration in microseconds.")
    dtype: DType = Field(default="fp32", description="Precision the FLOP run at.")
    repeat: int = Field(default=1, gt=0, le=MAX_REPEAT, description="Identical kernels run back to back (e.g. one per layer).")

    @model_validator(mode="after")
    def _something(self) -> Any:
        if self.flops is None and self.bytes is None and self.duration_us is None:
            raise ValueError("give `duration_us`, or `flops` and/or `bytes`")
        return self


class CollectiveOp(_OpBase, _SizedMixin):
    """An NCCL collective over ``ranks``; it starts when every rank of the group has reached it."""

    kind: str  # a Literal of the registry's kinds of this model (build_op_models)
    buffer: Literal["total", "shard"] = Field(
        default="total",
        description="'total': the size is nccl-tests' size column (max of send/recv buffer). "
        "'shard': the size is one rank's piece (all_gather input, reduce_scatter output) and is "
        "multiplied by the group size.",
    )
    root: int = Field(default=0, ge=0, description="Root rank of broadcast, reduce, scatter, gather.")
    group: list[int] | None = Field(
        default=None,
        description="The communicator's ranks when this entry places the collective on only some of them "
        "(write one entry per rank, e.g. in per-rank programs). Default: `ranks`. Entries with the same name "
        "and group form one collective. Entries of one name written for single ranks (`ranks: [0]`, "
        "`ranks: [1]`) without `group` form one collective over all of those ranks.",
    )
    send_bytes: list[int] | list[list[int]] | None = Field(
        default=None,
        description="all_to_all only, in place of `bytes`/`shape`: the bytes this rank sends to each member of the "
        "group, in group order (torch `all_to_all_single`'s `input_split_sizes` × the element size; with "
        "`recv_bytes`), or a matrix for every rank, row i the bytes group member i sends to each member (its "
        "column j is what member j receives).",
    )
    recv_bytes: list[int] | None = Field(
        default=None,
        description="all_to_all with a `send_bytes` list: the bytes this rank receives from each member of the "
        "group, in group order (`output_split_sizes` × the element size). Each must equal what that member sends "
        "this rank.",
    )

    @model_validator(mode="after")
    def _one_size(self) -> Any:  # overrides _SizedMixin's: send_bytes is a size too
        if self.send_bytes is None:
            if self.recv_bytes is not None:
                raise ValueError("`recv_bytes` needs `send_bytes` (the bytes sent to each member)")
            return _one_size_of(self)
        if self.bytes is not None or self.shape is not None:
            raise ValueError("give `send_bytes` (per-peer sizes) or `bytes`/`shape`, not both")
        if "buffer" in self.model_fields_set:
            raise ValueError("`buffer` sizes `bytes`/`shape`; per-peer sizes are each rank's own bytes (remove "
                             "`buffer`)")
        return self

    def size_bytes(self) -> int:
        """Message size in bytes: ``bytes``, prod(shape) × element size, or with per-peer sizes the largest row or
        column sum of ``send_bytes`` / ``recv_bytes`` (nccl-tests' size, the larger buffer; the per-rank figure is
        :func:`schedsim.lower.written.a2a_splits`)."""
        if self.send_bytes is None:
            return super().size_bytes()
        rows = self.send_bytes
        if rows and isinstance(rows[0], list):
            m = [list(r) for r in rows]  # type: ignore[arg-type]
            return max([sum(r) for r in m] + [sum(c) for c in zip(*m, strict=False)] + [0])
        return max(sum(rows), sum(self.recv_bytes or []))  # type: ignore[arg-type]

    def splits_of(self, rank: int, group: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """(bytes sent to, bytes received from) each member of ``group`` (sorted ranks) on ``rank``: its
        ``send_bytes`` / ``recv_bytes`` lists, or the matrix's row and column of its group index; None without
        per-peer sizes. Call after :func:`schedsim.spec.validation` checked the lengths."""
        if self.send_bytes is None:
            return None
        rows = self.send_bytes
        if rows and isinstance(rows[0], list):
            i = group.index(rank)
            return (tuple(float(x) for x in rows[i]),  # type: ignore[union-attr]
                    tuple(float(r[i]) for r in rows))  # type: ignore[index]
        return tuple(float(x) for x in rows), tuple(float(x) for x in self.recv_bytes or ())  # type: ignore[arg-type]


class _P2P(_OpBase, _SizedMixin):
    peer: int = Field(ge=0, description="The other rank.")
    tag: str | None = Field(
        default=None, description="Which message this is. NCCL has no tags: sends and recvs between two ranks "
        "pair in issue order, so `check` rejects tags that disagree with that order.",
    )
    p2p_batch: str | None = Field(
        default=None, pattern=NAME_PATTERN,
        description="Name of a batch_isend_irecv call: the send/recv ops of one rank with the same p2p_batch are "
        "issued as one call and run as one fused NCCL kernel (Megatron's batch_p2p_comm). Omit for a lone "
        "isend/irecv, which NCCL runs in issue order with the communicator's other ops. A batch is issued at the "
        "position of its first op; its ops cannot block each other.",
    )
    group: list[int] | None = Field(
        default=None,
        description="The process group the send/recv is issued on (torch `P2POp(..., group=)` / "
        "`isend(..., group=)`), as its ranks: it must hold this rank and `peer`, and the matching recv names the "
        "same group. A batched send/recv runs on that group's NCCL communicator (torch "
        "ProcessGroupNCCL::pointToPoint treats a batch like a collective); a lone one on its pair's two-rank "
        "communicator. Default: the ranks that batched send/recv of its family connect (the stream its send is "
        "issued on; docs/schedule_language.md, \"NCCL ordering\"), which `execute` creates as one process group "
        "per family.",
    )


class SendOp(_P2P):
    """Point-to-point send to ``peer``; matched in order with the peer's recv."""

    kind: str  # a Literal of the registry's kinds of this model (build_op_models)


class RecvOp(_P2P):
    """Point-to-point receive from ``peer``."""

    kind: str  # a Literal of the registry's kinds of this model (build_op_models)


class MemcpyOp(_OpBase, _SizedMixin):
    """A copy over a copy engine: host to device, device to host, or device to device."""

    kind: str  # a Literal of the registry's kinds of this model (build_op_models)
    direction: Literal["h2d", "d2h", "d2d"] = Field(description="Copy direction; host memory is pinned.")


class SynchronizeOp(_Base):
    """A host synchronisation: the rank's host thread blocks until GPU work ends, then issues the rank's later ops
    (``torch.cuda.synchronize()``, ``stream.synchronize()``, ``event.synchronize()``; ``tensor.item()`` is a
    device-to-host copy and then this). Not a GPU op: it lowers to rule host-wait's tags on the rank's next op
    (:mod:`schedsim.sim.host_wait`; :func:`schedsim.lower.written.add_written`)."""

    kind: Literal["synchronize"]
    name: str = Field(pattern=NAME_PATTERN, description="Name of the synchronisation, unique on each rank.")
    ranks: list[int] | None = Field(default=None, description="Ranks whose host synchronises. Omit for every rank.")
    scope: Literal["device", "stream", "events"] | None = Field(
        default=None,
        description="What the host waits for: 'device' (default; torch.cuda.synchronize(): every op the rank "
        "issued before it), 'stream' (stream.synchronize(): the ops issued before it on `stream`) or 'events' "
        "(event.synchronize() on events recorded after the ops in `deps`; the default when `deps` is given).")
    stream: str | None = Field(default=None, description="The stream of scope 'stream'.")
    deps: list[str] = Field(
        default_factory=lambda: [],
        description="Scope 'events': names of ops of the same rank, written before it, whose ends the host waits for.")
    host_us: float = Field(
        default=0.0, ge=0, le=MAX_DURATION_US,
        description="Host time (µs) of the call after the awaited work ended (its return, the copy of an "
        "`.item()`); the next op's issue is that much later.")
    tags: dict[str, Any] = Field(default_factory=lambda: {}, description="Free-form labels (not kept: no span).")

    @model_validator(mode="before")
    @classmethod
    def _no_bool_number(cls, data: Any) -> Any:
        """A YAML boolean for ``host_us`` is refused, as for every op's numbers."""
        return no_bool_numbers(cls.model_fields, data)

    @model_validator(mode="after")
    def _scope_fields(self) -> Any:
        scope = self.scope or ("events" if self.deps else "device")
        if scope == "stream" and not self.stream:
            raise ValueError("scope 'stream' needs `stream:` (the stream whose work the host waits for)")
        if scope != "stream" and self.stream:
            raise ValueError(f"`stream` is for scope 'stream' (got scope {scope!r}): write scope: stream, or drop "
                             "`stream`")
        if scope == "events" and not self.deps:
            raise ValueError("scope 'events' needs `deps:` (the ops whose events the host waits for)")
        if scope != "events" and self.deps:
            raise ValueError(f"`deps` is for scope 'events' (got scope {scope!r}): drop `scope`, or drop `deps`")
        object.__setattr__(self, "scope", scope)
        return self


class _PipelineBlock:
    """The type of :attr:`ScheduleSpec.pipeline`: a :class:`~schedsim.spec.pipeline_block.PipelineSpec`, whose
    module (30 kB, four models to build) is imported only for a schedule with a ``pipeline:`` block or for the
    JSON Schema: a schedule of plain ops never loads it (2% of the instructions of a cold ``check`` from
    bytecode, 4% compiling from source; callgrind).

    :meth:`ScheduleSpec._pipeline_block` validates the block, and the core schema here keeps its result as it
    is (as the ``PipelineSpec`` type did: pydantic does not revalidate a model instance). The JSON Schema is
    ``PipelineSpec``'s: the core schema carries a reference named like the model's, so the block is one entry
    of ``$defs``, named ``PipelineSpec``, exactly as when the field was typed with the model.
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema(ref="schedsim.spec.pipeline_block.PipelineSpec:lazy")

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        from schedsim.spec.pipeline_block import PipelineSpec

        return handler(PipelineSpec.__pydantic_core_schema__)


class _TrainingBlock:
    """The type of :attr:`ScheduleSpec.training`: a :class:`~schedsim.spec.training_block.TrainingSpec`, whose
    validator (45 Megatron arguments with their constraints) is built the first time a schedule has a
    ``training:`` block, or for the JSON Schema: a schedule of plain ops never imports its module (see
    :data:`TRAINING_NUMERIC_KEYS`) nor builds it.

    Validation is the model's own (:meth:`TrainingSpec.model_validate` with the outer validation's context): its
    errors come back located under ``training`` (``('training', 'num_layers')``) with the same types and messages
    as when the field was typed with the model, and an instance is kept as it is. The JSON Schema is
    ``TrainingSpec``'s, one entry of ``$defs`` named ``TrainingSpec``, as for :class:`_PipelineBlock`.
    """

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        def validate(raw: Any, info: ValidationInfo) -> Any:
            from schedsim.spec.training_block import TrainingSpec

            if isinstance(raw, TrainingSpec):
                return raw
            if TrainingSpec.__pydantic_complete__ is not True:
                with plugins_off():
                    TrainingSpec.model_rebuild()
            return TrainingSpec.model_validate(raw, context=info.context)

        return core_schema.with_info_plain_validator_function(validate,
                                                              ref="schedsim.spec.training_block.TrainingSpec:lazy")

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> Any:
        from schedsim.spec.training_block import TrainingSpec

        with plugins_off():
            TrainingSpec.model_rebuild()
        return handler(TrainingSpec.__pydantic_core_schema__)


if TYPE_CHECKING:  # type checkers see the models; pydantic, the lazy types
    _PipelineField = PipelineSpec
    _TrainingField = TrainingSpec
else:
    _PipelineField = _PipelineBlock
    _TrainingField = _TrainingBlock


AnyOp = Annotated[
    MatmulOp | ComputeOp | CollectiveOp | SendOp | RecvOp | MemcpyOp | SynchronizeOp,
    Field(discriminator="kind"),
]

#: A written op as these models hold it (:data:`AnyOp` without its discriminator).
SpecOp = MatmulOp | ComputeOp | CollectiveOp | SendOp | RecvOp | MemcpyOp

#: The op model of each op kind, in the registry's order (:func:`build_op_models` fills it from
#: :data:`schedsim.kinds.KINDS`).
OP_MODELS: dict[str, type[SpecOp]] = {}


class ScheduleSpec(_Base):
    """A whole schedule file after parameters, ``foreach`` and expressions are expanded."""

    schema_version: Literal[1] = Field(description="Schedule language version; write 1.")
    name: str = Field(description="Schedule name, shown in reports.")
    description: str = Field(default="", description="What the schedule models and where it comes from.")
    world_size: int = Field(gt=0, description="Number of ranks (GPUs / processes).")
    launch: Literal["eager", "cuda_graph"] = Field(
        default="eager",
        description="'eager': the host launches each op (per-op launch overhead). 'cuda_graph': each "
        "rank's whole iteration is captured once and replayed (one graph launch).",
    )
    durations: Literal["modeled", "recorded"] = Field(
        default="modeled",
        description="'modeled': op times come from the profile's GPU model (gpu_model, waves by default). "
        "'recorded': the ops' duration_us and host_us are a recorded run's (schedsim import writes it): predict "
        "replays them with the 'replay' GPU model (each op its duration_us from the moment it is ready, issued at "
        "the prefix sums of host_us, no contention). `predict --durations` or `--gpu-model` overrides it.",
    )
    nccl_init: Literal["lazy", "eager"] = Field(
        default="lazy",
        description="When the program's process group creates its NCCL communicators. 'lazy' (torch's default: "
        "init_process_group without device_id): each rank creates a communicator at its first call on it, and "
        "the creation (ncclCommInitRank) waits for every rank of the communicator, so a first batched send/recv "
        "that only some ranks reach hangs (pytorch/pytorch#74701, the batch_isend_irecv docs). 'eager' "
        "(init_process_group(device_id=...)): created at init.",
    )
    env: dict[Literal["CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS",
                      "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_P2P_DISABLE"], int | str] = Field(
        default_factory=lambda: {},
        description="Environment the program runs with. CUDA_DEVICE_MAX_CONNECTIONS (1-32, CUDA default 8): "
        "hardware work queues; with 1 (Megatron-LM sets it) kernels start in host issue order whatever their "
        "stream. Overrides the profile's gpu.max_connections; `predict --max-connections` overrides both. "
        "NCCL_ALGO, NCCL_PROTO (NCCL's syntax, e.g. 'ring', '^LL128'): the algorithms and protocols NCCL may "
        "choose; override the profile's nccl.algo / nccl.proto (profiles with topology.scale_up). "
        "NCCL_MIN_CTAS, NCCL_MAX_CTAS, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS (integers >= 1): the channels NCCL "
        "runs a collective on; override nccl.min_ctas and the like. NCCL_P2P_DISABLE (0 or 1): 1 turns CUDA "
        "peer-to-peer off, NCCL's SHM transport through host memory (topology.scale_up.p2p; kind pcie).",
    )
    streams: list[str] | None = Field(
        default=None,
        description="Streams ops may use. When given, an op on an undeclared stream is an error "
        "(catches typos). Omit to allow any.",
    )

    @field_validator("world_size", mode="before")
    @classmethod
    def _world_size_no_bool(cls, v: object) -> object:
        """A YAML ``true`` / ``false`` (or an expression giving one, ``"{tp > 1}"``) is no rank count: pydantic's
        lax mode would read it as 1 / 0, as the ops' numbers refuse (``_no_bool_number``)."""
        if isinstance(v, bool):
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError("bool_for_number", "a number of ranks, not a boolean (YAML true/false)")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_no_bool(cls, v: object) -> object:
        """A YAML ``true`` / ``false`` is no setting (pydantic's ``int | str`` would read it as 1 / 0)."""
        if isinstance(v, dict):
            for key, n in v.items():
                if isinstance(n, bool):
                    what = "a string" if key in ("NCCL_ALGO", "NCCL_PROTO") else "an integer"
                    raise ValueError(f"{key} must be {what}, not a boolean (got {n!r})")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, int | str]) -> dict[str, int | str]:
        conns = v.get("CUDA_DEVICE_MAX_CONNECTIONS")
        if conns is not None and (not isinstance(conns, int) or not 1 <= conns <= 32):
            raise ValueError(f"CUDA_DEVICE_MAX_CONNECTIONS must be an integer 1-32 (got {conns!r})")
        for key, what in (("NCCL_ALGO", "algo"), ("NCCL_PROTO", "proto")):
            if key in v:
                if not isinstance(v[key], str):
                    raise ValueError(f"{key} must be a string such as 'ring' or '^LL128' (got {v[key]!r})")
                from schedsim.network.tuning import parse_nccl_list

                parse_nccl_list(str(v[key]), "algo" if what == "algo" else "proto")  # ValueError names the token
        for key in ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"):
            n = v.get(key)
            if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
                raise ValueError(f"{key} must be an integer >= 1, a channel count (got {n!r})")
        off = v.get("NCCL_P2P_DISABLE")
        if off is not None and (isinstance(off, str) or off not in (0, 1)):
            quoted = f": write {off.strip()} unquoted" if isinstance(off, str) and off.strip() in ("0", "1") else ""
            raise ValueError(f"NCCL_P2P_DISABLE must be 0 or 1 (got {off!r}{quoted}); NCCL reads only 1, P2P off")
        return v
    params: dict[str, Any] = Field(
        default_factory=lambda: {},
        description="Parameters with defaults; override with `--set name=value`. Fields may use them in "
        "expressions, e.g. `m: M*world_size/chunks`, and strings may use {expr}.",
    )
    ops: list[AnyOp] = Field(default_factory=lambda: [], description="The ops, in program order per rank.")
    pipeline: _PipelineField | None = Field(
        default=None, description="A pipeline block that expands into ops (see docs/pipelines.md)."
    )
    training: _TrainingField | None = Field(
        default=None, description="One Megatron-LM training step in Megatron's argument names (tp, pp, dp, "
        "micro/global batch, recompute, distributed optimizer...); lowers to every rank's ops "
        "(schedsim.spec.training_block)."
    )

    _file: str = PrivateAttr(default="<schedule>")
    _sources: list[tuple[int | None, int | None, str]] = PrivateAttr(default_factory=lambda: [])
    _layout: Any = PrivateAttr(default=None)  # ops kept as blocks by the loader (schedsim.spec.block.Layout)
    _env_lines: dict[str, int] = PrivateAttr(default_factory=lambda: {})  # line of each env key, from the loader

    def __getattr__(self, item: str) -> Any:
        """``ops`` of a spec the loader kept as a layout of ``foreach`` blocks: built on first access."""
        if item == "ops":
            layout = (self.__pydantic_private__ or {}).get("_layout")
            if layout is not None:
                ops, sources = layout.materialise()
                d = self.__dict__
                fields = {k: ops if k == "ops" else d[k] for k in type(self).model_fields if k == "ops" or k in d}
                d.clear()
                d.update(fields)  # in declaration order, as validation leaves them (repr, iteration)
                self.__pydantic_private__.update(_sources=sources, _layout=None)  # type: ignore[union-attr]
                return ops
        return super().__getattr__(item)  # type: ignore[misc]

    def _whole(self) -> None:
        if "ops" not in self.__dict__:
            self.ops  # noqa: B018 (materialise)

    def model_dump(self, *a: Any, **kw: Any) -> dict[str, Any]:  # noqa: D102
        self._whole()
        return super().model_dump(*a, **kw)

    def model_dump_json(self, *a: Any, **kw: Any) -> str:  # noqa: D102
        self._whole()
        return super().model_dump_json(*a, **kw)

    def model_copy(self, *a: Any, **kw: Any) -> Any:  # noqa: D102
        self._whole()
        return super().model_copy(*a, **kw)

    def __eq__(self, other: object) -> bool:
        self._whole()
        if isinstance(other, ScheduleSpec):
            other._whole()
        return super().__eq__(other)

    def __repr_args__(self) -> Any:
        self._whole()
        return super().__repr_args__()

    def __iter__(self) -> Any:
        self._whole()
        return super().__iter__()

    def __getstate__(self) -> dict[Any, Any]:
        self._whole()
        return super().__getstate__()

    def __copy__(self) -> Any:
        self._whole()
        return super().__copy__()

    def __deepcopy__(self, memo: Any = None) -> Any:
        self._whole()
        return super().__deepcopy__(memo)

    def model_post_init(self, context: Any) -> None:
        """Record the file and each op's source (line, column, path) from the validation context, as the
        loader passes them (``{"file": ..., "sources": [...]}``); the spec is not changed afterwards."""
        if isinstance(context, dict):
            self._file = str(context.get("file", self._file))
            self._sources = list(context.get("sources", ()))
            self._env_lines = dict(context.get("env_lines", {}))

    def env_sources(self) -> dict[str, str]:
        """``file:line: env.KEY`` of each setting of ``env`` (``file: env.KEY`` without a known line)."""
        lines = self._env_lines
        return {k: f"{self._file}:{lines[k]}: env.{k}" if k in lines else f"{self._file}: env.{k}" for k in self.env}

    def source_of(self, index: int) -> str:
        """``file:line`` and field path of op ``index`` (for error messages)."""
        self._whole()
        sources = self._sources
        if index < len(sources):
            return _source_text(self._file, sources[index])
        return self._file

    def sources(self) -> list[str]:
        """:meth:`source_of` of every op, in order (the private attributes are read once, not once per op)."""
        self._whole()
        file, sources = self._file, self._sources
        return [_source_text(file, sources[i]) if i < len(sources) else file for i in range(len(self.ops))]

    @field_validator("pipeline", mode="before")
    @classmethod
    def _pipeline_block(cls, raw: Any, info: ValidationInfo) -> Any:
        """The block as a :class:`PipelineSpec`; a bad key or value is a :class:`SpecError` naming
        ``pipeline.<key>`` and a fix (the file comes from the validation context's ``file``)."""
        if raw is None:
            return raw
        from pydantic import ValidationError

        from schedsim.errors import SpecError
        from schedsim.spec.pipeline_block import PipelineSpec

        if isinstance(raw, PipelineSpec):
            return raw

        try:
            return PipelineSpec.model_validate(raw)
        except ValidationError as e:
            file = (info.context or {}).get("file", "<schedule>")
            errs = e.errors(include_url=False)
            err = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])
            loc = ".".join(str(x) for x in err["loc"])
            fix = "see docs/schedule_language.md, section pipeline"
            if err["type"] == "extra_forbidden":
                import difflib

                close = difflib.get_close_matches(str(err["loc"][-1]), list(PipelineSpec.model_fields), n=1)
                raise SpecError(f"unknown key {err['loc'][-1]!r}", file=file, path=f"pipeline.{loc}",
                                fix=f"did you mean {close[0]!r}?" if close else fix) from None
            raise SpecError(err["msg"].removeprefix("Value error, "), file=file,
                            path=f"pipeline.{loc}" if loc else "pipeline", fix=fix) from None

    @model_validator(mode="after")
    def _need_ops(self) -> Any:
        if not self.ops and self.pipeline is None and self.training is None:
            raise ValueError("the schedule has no ops: add an `ops:` list (or a `pipeline:` or `training:` block)")
        if self.pipeline is not None and self.training is not None:
            raise ValueError("a schedule has one `pipeline:` or one `training:` block, not both (the training block "
                             "makes its own pipeline)")
        return self


def build_op_models() -> None:
    """Build the op models from the op-kind registry (:data:`schedsim.kinds.KINDS`): each entry's ``spec`` names
    the model that validates its kind, so each model's ``kind`` field is the ``Literal`` of the kinds whose entry
    names it, :data:`OP_MODELS` maps every kind to its model (filled in place: importers keep the same dict),
    and :attr:`ScheduleSpec.ops` is the union of the models named, discriminated by ``kind``. A new kind is then
    its registry entry alone. Run once at import, and by the registry after each change of it
    (:attr:`schedsim.kinds.KINDS` ``.on_change``).

    Raises
    ------
    KeyError
        An entry names no model of this module.
    """
    import operator

    from pydantic.fields import FieldInfo

    models = {k: globals()[info.spec] for k, info in KINDS.items()}
    OP_MODELS.clear()
    OP_MODELS.update(models)
    named = list(dict.fromkeys(models.values()))
    models_all: list[Any] = [*named, SynchronizeOp]  # a host synchronisation: an entry of `ops`, not a GPU kind
    for model in named:
        kinds = tuple(k for k, m in models.items() if m is model)
        kind: Any = Literal.__getitem__(kinds)
        model.__pydantic_fields__["kind"] = FieldInfo.from_annotation(kind)
    union: Any = Union.__getitem__(tuple(models_all))
    item: Any = operator.getitem(Annotated, (union, Field(discriminator="kind")))  # AnyOp, of the models named
    ScheduleSpec.__pydantic_fields__["ops"] = FieldInfo.merge_field_infos(ScheduleSpec.__pydantic_fields__["ops"],
                                                                          annotation=list[item])
    with plugins_off():  # the concrete models (see _Base); ScheduleSpec last, so it reuses the op models' schemas
        for model in (*models_all, ScheduleSpec):
            model.model_rebuild(force=True)


build_op_models()
KINDS.on_change.append(build_op_models)  # a kind registered (or removed) later: the models follow


def _source_text(file: str, source: tuple[int | None, int | None, str]) -> str:
    line, _col, path = source
    return f"{file}:{line} ({path})" if line else f"{file} ({path})"


def _numeric_fields() -> frozenset[str]:
    import typing

    def numeric(tp: object) -> bool:
        if tp in (int, float):
            return True
        if typing.get_origin(tp) is typing.Literal:
            return False
        return any(numeric(a) for a in typing.get_args(tp))

    out = set()
    for model in set(OP_MODELS.values()):
        for fname, f in model.model_fields.items():
            if numeric(f.annotation):
                out.add(fname)
    out |= {"world_size", "shape", "ranks", "group"}
    # numeric keys of the pipeline block (schedsim.spec.pipeline_block)
    out |= {"p", "m", "v", "group_size", "layers", "hidden", "ffn", "heads", "seq", "micro_batch", "vocab",
            "activation_bytes", "activation_memory_bytes", "data_parallel", "grad_allreduce_bytes"}
    return frozenset(out | TRAINING_NUMERIC_KEYS)


#: The numeric keys of the training block (:class:`~schedsim.spec.training_block.TrainingSpec`'s int and float
#: fields, and the short aliases of :data:`~schedsim.spec.training_block.ALIASES`), written out here so that a
#: schedule without a ``training:`` block never imports that module (~3% of a cold ``check``);
#: tests/spec/test_training_block.py checks this set against the model.
TRAINING_NUMERIC_KEYS = frozenset({
    "attention_dropout", "context_parallel_size", "data_parallel_size", "decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers", "expert_model_parallel_size", "ffn_hidden_size", "global_batch_size",
    "hidden_dropout", "hidden_size", "make_vocab_size_divisible_by", "micro_batch_size", "moe_expert_capacity_factor",
    "moe_router_topk", "num_attention_heads", "num_experts", "num_layers", "num_layers_per_virtual_pipeline_stage",
    "num_query_groups", "pipeline_model_parallel_size", "recompute_num_layers", "seq_length",
    "tensor_model_parallel_size", "vocab_size", "zero_bubble_max_pending_backward", "tp", "pp", "dp", "cp", "ep"})


#: Fields whose string values are arithmetic expressions (``m: M/chunks``).
NUMERIC_FIELDS: frozenset[str] = _numeric_fields()
