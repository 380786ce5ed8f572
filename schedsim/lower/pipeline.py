"""Lowering of a ``pipeline:`` block into op instances (the block's meaning is documented in
:mod:`schedsim.spec.pipeline_block`, which defines its schema).

:func:`expand_pipeline` validates the compute order (:func:`schedsim.pipeline.validate`), places the p2p as
the framework that runs the schedule issues them (Megatron for 1F1B and interleaved 1F1B, torch's
``_add_send_recv`` otherwise), and writes one instance per op into a :class:`~schedsim.lower.table.Table`:
each stage's F/I/W op list is one template per op, instanced per (stage, microbatch) with its name, tags and
dependencies; sends and recvs share one template per kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from schedsim.graph.info import PipelineInfo
from schedsim.graph.ops import Op
from schedsim.kinds import COMPUTE_KINDS
from schedsim.lower.table import Table
from schedsim.lower.written import op_instance
from schedsim.pipeline.actions import COMM_TYPES
from schedsim.pipeline.actions import ComputationType as CT
from schedsim.spec.model import OP_MODELS, ScheduleSpec
from schedsim.spec.pipeline_block import (
    PipelinePlan,
    PipelineSpec,
    StageCost,
    block_error,
    block_info,
    pipeline_block,
    plan_of,
    split_fix,
    stage_cost,
)

__all__ = ["expand_pipeline"]

_VALUE = {t: t.value for t in CT}  # an enum's .value is a descriptor call; this is a dict lookup

def _megatron_p2p_ops_order(ops: list[Any], rank: int) -> list[Any]:
    """The p2p actions of one Megatron p2p call in the order ``_p2p_ops`` posts them as lone isend/irecv.

    Even pipeline ranks: send_next, recv_prev, send_prev, recv_next; odd ranks: recv_prev, send_next,
    recv_next, send_prev (Megatron-LM ``core/pipeline_parallel/p2p_communication.py``), so two
    neighbours never both send first on their shared communicator, which hangs on NCCL.
    SEND_F is send_next, RECV_F recv_prev, SEND_B send_prev, RECV_B recv_next.
    """
    from schedsim.pipeline.actions import ComputationType as CT

    pos = ({CT.SEND_F: 0, CT.RECV_F: 1, CT.SEND_B: 2, CT.RECV_B: 3} if rank % 2 == 0 else
           {CT.RECV_F: 0, CT.SEND_F: 1, CT.RECV_B: 2, CT.SEND_B: 3})
    return sorted(ops, key=lambda a: pos[a.type])


def _per_call(acts: list[Any], rank: int) -> list[Any]:
    """Apply :func:`_megatron_p2p_ops_order` to each run of p2p actions between two computes."""
    from schedsim.pipeline.actions import COMM_TYPES

    out: list[Any] = []
    run: list[Any] = []
    for a in acts:
        if a is not None and a.type in COMM_TYPES:
            run.append(a)
            continue
        out.extend(_megatron_p2p_ops_order(run, rank))
        run = []
        if a is not None:
            out.append(a)
    out.extend(_megatron_p2p_ops_order(run, rank))
    return out


Steps = dict[int, list[tuple[Any, "int | None"]]]  # per rank: (action, NCCL batch id or None) in issue order


def _interleaved_steps(spec: ScheduleSpec, pb: PipelineSpec, plan: PipelinePlan) -> Steps:
    """Megatron's interleaved 1F1B issue order (:func:`schedsim.pipeline.comms.megatron_interleaved_batched`)."""
    from schedsim.pipeline.comms import megatron_interleaved_batched

    if plan.p == 2 and plan.mode == "batched":
        raise block_error(spec, "interleaved 1F1B with batched p2p needs p >= 3: with p = 2 one batch holds two sends "
                   "to the same peer, which NCCL pairs by issue order with the wrong recvs (Megatron-LM "
                   "arguments.py refuses it for the same reason)", "pipeline.p2p",
                   "use p2p: overlapped (Megatron's default for interleaving) or p >= 3")
    steps: Steps = {}
    for r, seq in megatron_interleaved_batched(plan.p, plan.m, plan.v, pb.group_size).items():
        out_r: list[tuple[Any, int | None]] = []
        for i, x in enumerate(seq):
            if not isinstance(x, list):
                out_r.append((x, None))
            elif plan.mode == "batched":
                out_r.extend((a, i) for a in x)
            else:
                out_r.extend((a, None) for a in _megatron_p2p_ops_order(x, r))
        steps[r] = out_r
    return steps


def _user_comms(plan: PipelinePlan) -> dict[int, list[Any]]:
    """A compute_comms order (torch CSV or actions with SEND/RECV) as the user issues it; raises the p2p
    simulation's error (a compute whose input is never received, a recv never sent) with one fix line."""
    from schedsim.pipeline.comms import simulate_p2p

    # UNSHARD, RESHARD and REDUCE_GRAD (torch's runtime CSV has them) carry no microbatch and no p2p
    lowered = {r: [a for a in acts if a is not None and (a.is_compute or a.is_comm)] for r, acts in plan.order.items()}
    try:
        simulate_p2p(lowered, plan.s2r, plan.num_stages)
    except ValueError as e:
        reason = getattr(e, "reason", None)
        if reason is not None and "(fix:" in reason:  # one `fix:` line, as every other rejection
            head, fix = split_fix(reason, custom=True)
            grid = getattr(e, "grid", "")
            e.args = (f"{head}\n  fix: {fix}" + (f"\n\nPipeline schedule:\n{grid}" if grid else ""),)
        raise
    return lowered


def _lowered_steps(plan: PipelinePlan) -> Steps:
    """The p2p of every schedule but interleaved 1F1B: the user's, torch's ``_add_send_recv``, or Megatron's."""
    from schedsim.pipeline import add_p2p
    from schedsim.pipeline.actions import COMM_TYPES
    from schedsim.pipeline.comms import align_recvs, torch_add_send_recv

    torch_run = plan.name not in ("1f1b", "interleaved_1f1b")
    if any(a is not None and a.type in COMM_TYPES for acts in plan.order.values() for a in acts):
        lowered = _user_comms(plan)
    elif torch_run:
        # torch runs these schedules (and custom action lists): each p2p action its own batch_isend_irecv
        # (torch _PipelineScheduleRuntime._batch_p2p)
        lowered = torch_add_send_recv(plan.order, plan.s2r, plan.num_stages)
    else:
        lowered = align_recvs(add_p2p(plan.order, plan.s2r, plan.num_stages), plan.s2r)
        if plan.mode == "overlapped":  # Megatron with batch_p2p_comm off: each call's lone ops in _p2p_ops order
            lowered = {r: _per_call(acts, r) for r, acts in lowered.items()}
    steps: Steps = {}
    batch_ids = plan.mode == "batched" or torch_run
    for r, acts in lowered.items():
        out_r: list[tuple[Any, int | None]] = []
        bid, prev_comm = 0, False
        for a in acts:
            if a is None:
                continue
            comm = a.type in COMM_TYPES
            if comm and (not prev_comm or torch_run):
                bid += 1
            out_r.append((a, bid if comm and batch_ids else None))
            prev_comm = comm
        steps[r] = out_r
    return steps


def _stage_proto(spec: ScheduleSpec, o: dict[str, Any], k: int, phase: str) -> Op:
    """The template of one stage op (validated as an ordinary op of its kind)."""
    d = {kk: vv for kk, vv in o.items() if kk != "name"}
    kind = d.get("kind")
    where = f"pipeline.stage.{phase}[{k}]"
    bad = sorted(set(d) & {"ranks", "stream", "deps"})
    if bad:
        raise block_error(spec, f"stage ops cannot set {bad[0]!r}: the pipeline places them (rank of the "
                   "stage, stream 'compute', dependencies from the schedule)", where,
                   f"remove {bad[0]!r} from the stage op")
    if kind not in (*COMPUTE_KINDS, "memcpy"):
        raise block_error(spec, f"stage ops must be compute work (matmul, compute, memcpy), got {kind!r}", where,
                   "model communication with the block's activation_bytes, data_parallel or "
                   "tied_embedding_allreduce, or as hand-written ops")
    try:
        model = OP_MODELS[kind].model_validate({**d, "name": "x"})
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise block_error(spec, f"{err['msg']} at {'.'.join(map(str, err['loc']))}", where,
                   "stage ops take the fields of ordinary ops (kind, m/n/k, duration_us, bytes, ...)") from None
    return op_instance(model, 0, 0, stream="compute", group=(), tags=(), source="pipeline")


def _stage_templates(spec: ScheduleSpec, cost: StageCost, num_stages: int,
                     table: Table) -> dict[tuple[int, str], list[tuple[str, int]]]:
    """Per (stage, phase): the stage's ops as ``(name, template id)``; an empty phase is one zero-time op."""
    protos: dict[tuple[int, str], list[tuple[str, int]]] = {}
    for st_idx in range(num_stages):
        for phase in ("F", "I", "W"):
            lst = cost.templates[st_idx][phase] or [{"name": "noop", "kind": "compute", "duration_us": 0}]
            protos[(st_idx, phase)] = [(str(o.get("name", k)), table.template(_stage_proto(spec, o, k, phase)))
                                       for k, o in enumerate(lst)]
    return protos


@dataclass
class _Emitter:
    """Writes one rank's ops of one replica into the table, tracking what each new op waits for (by name id)."""

    table: Table
    plan: PipelinePlan
    protos: dict[tuple[int, str], list[tuple[str, int]]]
    p2p_tmpl: dict[str, int]
    chunk_of: dict[int, int]
    rank: int
    off: int
    prev_of: dict[tuple[int, str, int], int] = field(default_factory=dict)
    pending_sends: list[int] = field(default_factory=list)
    last_compute: int | None = None
    pair_deps: list[int] = field(default_factory=list)
    streams: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (kind, F/B, peer) -> stream id
    batches: dict[int, int] = field(default_factory=dict)  # batch id -> id of its name "b<id>"
    p2p_consts: dict[tuple[Any, int], tuple[Any, ...]] = field(default_factory=dict)  # (type, stage) -> shared
    compute_stream: int = -1

    def __post_init__(self) -> None:
        self.compute_stream = self.table.streams("compute")

    def action(self, act: Any, batch_id: int | None) -> None:
        """Emit the ops of one action (a compute, a send/recv, or DualPipe's overlapped F&B pair)."""
        self.pair_deps = []
        subs = act.sub_actions
        if len(subs) > 1:  # DualPipe's overlapped F&B chunk starts when both inputs exist
            for sub in subs:
                key = (sub.stage, "RECV_F" if sub.type is CT.F else "RECV_B", sub.microbatch)
                if key in self.prev_of:
                    self.pair_deps.append(self.prev_of[key])
        for sub in subs:
            if sub.type in COMM_TYPES:
                self.p2p(sub, batch_id)
            else:
                self.compute(sub)

    def _stream(self, kind: str, d: str, peer: int) -> int:
        key = (kind, d, peer)
        sid = self.streams.get(key)
        if sid is None:
            name = f"pp_{kind}" if self.plan.mode == "batched" else f"pp_{kind}{d}_r{peer + self.off}"
            sid = self.streams[key] = self.table.streams(name)
        return sid

    def _batch(self, batch_id: int | None) -> int:
        if batch_id is None:
            return -1
        b = self.batches.get(batch_id)
        if b is None:
            b = self.batches[batch_id] = self.table.strs(f"b{batch_id}")
        return b

    def _p2p_const(self, typ: Any, s: int) -> tuple[Any, ...]:
        """What every send/recv of type ``typ`` at stage ``s`` shares: its template, stream, peer, the name and
        message prefixes, the key of the compute a send carries, its pp_op value and chunk."""
        s2r = self.plan.s2r
        fwd = typ in (CT.SEND_F, CT.RECV_F)
        kind = "send" if typ in (CT.SEND_F, CT.SEND_B) else "recv"
        if kind == "send":
            peer = s2r[s + 1] if fwd else s2r[s - 1]
        else:
            peer = s2r[s - 1] if fwd else s2r[s + 1]
        d = "F" if fwd else "B"
        src_phase = ("F" if fwd else "I") if kind == "send" else None
        src_stage = s if kind == "send" else (s - 1 if fwd else s + 1)  # the message: who produced it
        c = (self.p2p_tmpl[kind], self._stream(kind, d, peer), peer + self.off, f"{kind}{d}{s}.",
             f"{d}{src_stage}.", src_phase, _VALUE[typ], self.chunk_of[s], kind == "send")
        self.p2p_consts[(typ, s)] = c
        return c

    def p2p(self, sub: Any, batch_id: int | None) -> None:
        """One send or recv, on the stream its p2p mode gives it, waiting for the compute it carries."""
        s, j, typ = sub.stage, sub.microbatch, sub.type
        c = self.p2p_consts.get((typ, s))
        tmpl, stream, peer, name_pre, msg_pre, src_phase, value, chunk, is_send = \
            self._p2p_const(typ, s) if c is None else c
        table = self.table
        sj = str(j)
        names = table.names  # interned inline: nearly every p2p name is new
        opname = names.ids.setdefault(name_pre + sj, len(names.items))
        if opname == len(names.items):
            names.items.append(name_pre + sj)
        deps = []
        if src_phase is not None:
            src = self.prev_of.get((s, src_phase, j))
            if src is not None:
                deps.append(src)
        batched = self.plan.mode == "batched"
        if batched and self.last_compute is not None and self.last_compute not in deps:
            # Megatron's batch_p2p_sync (default on) calls torch.cuda.synchronize() around each
            # batch, so the host posts it only after all work issued before it has finished
            deps.append(self.last_compute)
        msg = msg_pre + sj  # the message: who produced it, which mb
        tags = table.new_tag_id((("chunk", chunk), ("mb", j), ("msg", msg), ("pp_op", value), ("stage", s)))
        table.add_ids(tmpl, self.rank, opname, tags, stream, tuple(deps), peer,
                      -1 if batch_id is None else self._batch(batch_id), table.strs(msg))
        self.prev_of[(s, value, j)] = opname
        if is_send and batched:
            self.pending_sends.append(opname)

    def _input(self, s: int, j: int, phase: str) -> list[int]:
        """What the first op of phase ``phase`` of (stage ``s``, microbatch ``j``) waits for."""
        prev_of = self.prev_of
        if phase == "F":
            for key in ((s, "RECV_F", j), (s - 1, "F", j) if s > 0 else None):
                if key is not None and key in prev_of:
                    return [prev_of[key]]
        elif phase == "I":
            last = self.plan.num_stages - 1
            for key in ((s, "RECV_B", j), (s + 1, "I", j) if s < last else None, (s, "F", j)):
                if key is not None and key in prev_of:
                    return [prev_of[key]]
        elif (s, "I", j) in prev_of:  # W needs its I
            return [prev_of[(s, "I", j)]]
        return []

    def compute(self, sub: Any) -> None:
        """The ops of one F, I, W or full backward B (= I then W) of a stage on a microbatch."""
        s, j, typ = sub.stage, sub.microbatch, sub.type
        parts = [("F", "F")] if typ is CT.F else [("I", "I")] if typ is CT.I else \
            [("W", "W")] if typ is CT.W else [("I", "B"), ("W", "B")]
        chunk = self.chunk_of[s]
        table = self.table
        names = table.names
        compute = self.compute_stream
        for phase, label in parts:
            deps = self._input(s, j, phase)
            if self.pair_deps:
                deps.extend(d for d in self.pair_deps if d not in deps)
                self.pair_deps = []
            if self.pending_sends:  # batched p2p: the call returns when its sends completed too
                deps.extend(self.pending_sends)
                self.pending_sends = []
            tags = table.tag_id((("chunk", chunk), ("mb", j), ("phase", phase), ("pp_op", label), ("stage", s)))
            first = tuple(deps)
            oname = -1
            for tname, tid in self.protos[(s, phase)]:
                oname = names(f"{label}{s}.{j}.{tname}" if label == phase else f"B{s}.{j}.{phase}.{tname}")
                table.add_ids(tid, self.rank, oname, tags, compute, first, -1, -1, -1)
                first = ()
            self.last_compute = oname
            self.prev_of[(s, phase, j)] = oname
        if parts[0][1] == "B":  # a full backward hands its input gradient on when the whole B is done
            self.prev_of[(s, "I", j)] = self.prev_of[(s, "W", j)]


def _collective(table: Table, name: str, group: tuple[int, ...], nbytes: float, dtype: str) -> None:
    """An all_reduce of the block (tied embedding, data-parallel gradients) on every rank of ``group``."""
    proto = Op(name=name, rank=group[0], kind="all_reduce", stream="compute", seq=0, group=group,
               nbytes=float(nbytes), dtype=dtype, tags=(("pp_op", "allreduce"),), source="pipeline")
    t = table.template(proto)
    for rr in group:
        table.add_one(t, rr, name, table.tag_id(proto.tags), "compute")


def _end_of_step(pb: PipelineSpec, plan: PipelinePlan, cost: StageCost, table: Table, off: int) -> None:
    """Per replica: the tied-embedding all_reduce between first and last stage, and the optimizer step."""
    p, s2r, num_stages = plan.p, plan.s2r, plan.num_stages
    if pb.tied_embedding_allreduce and cost.emb_bytes and p > 1:
        grp = tuple(sorted({off + s2r[0], off + s2r[num_stages - 1]}))
        _collective(table, "tied_embedding_allreduce", grp, cost.emb_bytes, cost.dtype)
    if pb.optimizer and cost.params_stage:
        for r in range(p):
            nst = sum(1 for st_ in range(num_stages) if s2r[st_] == r)
            proto = Op(name="optimizer_step", rank=off + r, kind="compute", stream="compute", seq=0,
                       nbytes=float(18 * cost.params_stage * nst), dtype="fp32", tags=(("pp_op", "optimizer"),),
                       source="pipeline")
            table.add_one(table.template(proto), off + r, proto.name, table.tag_id(proto.tags), "compute")


def expand_pipeline(spec: ScheduleSpec, table: Table) -> PipelineInfo:
    """Write the op instances of the spec's pipeline block into ``table`` (program order per rank).

    Returns the block's :class:`~schedsim.graph.info.PipelineInfo` (schedule, p, v, m, placement, p2p mode,
    activation sizes, the compute order as text), the Program's ``pipeline``.

    Raises
    ------
    SpecError
        Invalid block (unknown key, unknown schedule, bad sizes).
    schedsim.pipeline.PipelineScheduleError
        The order would hang or is wrong (missing/duplicate microbatch, W before I,
        a stage on two ranks, too few microbatches, p2p wait cycle); the message
        shows the rank × step grid.
    """
    pb = pipeline_block(spec)
    p, dp = pb.p, pb.data_parallel
    if spec.world_size != p * dp:
        raise block_error(spec, f"world_size is {spec.world_size} but the pipeline needs p × data_parallel = "
                          f"{p} × {dp} = {p * dp}", "world_size", f"set world_size: {p * dp}")
    plan = plan_of(spec, pb)
    steps = _interleaved_steps(spec, pb, plan) if plan.name == "interleaved_1f1b" else _lowered_steps(plan)
    cost = stage_cost(spec, pb, plan.num_stages)
    protos = _stage_templates(spec, cost, plan.num_stages, table)
    p2p_tmpl = {k: table.template(Op(name=k, rank=0, kind=k, stream="", seq=0, nbytes=float(cost.act_bytes),
                                     dtype=cost.dtype, source="pipeline")) for k in ("send", "recv")}
    rank_stages = {r: sorted(st for st, rr in plan.s2r.items() if rr == r) for r in range(p)}
    chunk_of = {st: rank_stages[r].index(st) for st, r in plan.s2r.items()}
    for d in range(dp):
        off = d * p
        for r in range(p):
            em = _Emitter(table, plan, protos, p2p_tmpl, chunk_of, off + r, off)
            for act, batch_id in steps[r]:
                em.action(act, batch_id)
        _end_of_step(pb, plan, cost, table, off)
    if dp > 1:
        num_stages = plan.num_stages
        for r in range(p):
            nst = sum(1 for st_ in range(num_stages) if plan.s2r[st_] == r)
            gbytes = pb.grad_allreduce_bytes if pb.grad_allreduce_bytes is not None else 2 * cost.params_stage * nst
            _collective(table, f"dp_grad_allreduce_r{r}", tuple(d * p + r for d in range(dp)), gbytes, cost.dtype)
    return block_info(pb, plan, cost)
