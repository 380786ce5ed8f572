"""Expansion of a ``pipeline:`` block into ordinary ops of the core language.

A pipeline block names a schedule (GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V,
DualPipeV, or custom per-rank action lists / a torch pipeline CSV), its size
(p ranks, v chunks per rank, m microbatches) and what one stage costs: explicit
op lists for forward (F), backward-input (I) and backward-weight (W), or a
transformer-layer description. :func:`expand_pipeline` turns it into per-rank
ops, so ``predict``, the static checks and the executor treat it like any DAG:

* compute actions become ops on stream ``compute``, named ``F<stage>.<mb>.<op>``
  (``B`` = I then W for a full backward), tagged ``pp_op``, ``stage``, ``mb``,
  ``chunk``;
* each cross-rank stage boundary becomes a send/recv pair placed as Megatron
  issues it (recv just before the compute that needs it, send just after the
  compute that produced it: :func:`schedsim.pipeline.comms.add_p2p`);
  ``p2p: batched`` (Megatron ``batch_p2p_comm``: one ``batch_isend_irecv``
  per call, waited before the next compute) puts sends on stream ``pp_send``
  and recvs on ``pp_recv`` so the two halves of a batch progress together, and
  the next compute waits for the batch's sends as well as its recvs, and a
  batch is posted only after the compute before it finished (``batch_p2p_sync``
  calls ``torch.cuda.synchronize()``);
  ``overlapped`` (``overlap_p2p_comm``: lone isend/irecv, each pair of ranks its
  own communicator and stream, ``ProcessGroupNCCL.cpp`` ``pointToPoint``) puts
  them on one stream per peer and direction (``pp_sendF_r<peer>``,
  ``pp_recvB_r<peer>``, ...) and compute waits only for the recv it consumes.
  Default: batched for 1F1B (Megatron-LM forces ``overlap_p2p_comm`` off
  without interleaving and batches by default); overlapped for interleaved 1F1B
  (Megatron's default there) and for GPipe, ZB-H1, ZB-V and DualPipeV (torch
  pipelining issues their p2p asynchronously). Modelling a batch as two streams is an approximation of one
  ``ncclGroup``;
* the issue order of the p2p follows the framework that runs the schedule: Megatron for 1F1B and
  interleaved 1F1B (:func:`schedsim.pipeline.comms.megatron_interleaved_batched` for interleaving,
  each call's lone ops in ``_p2p_ops`` order when not batched), torch's ``_add_send_recv`` for GPipe,
  ZB-H1, ZB-V, DualPipeV, interleaved ZB and custom orders
  (:func:`schedsim.pipeline.comms.torch_add_send_recv`, each p2p action its own
  ``batch_isend_irecv``). Batched ops carry a ``p2p_batch`` name (``Op.nccl_group``) (see :mod:`schedsim.graph.nccl`), and
  the static checks verify the order under NCCL's rules;
* the order is validated first (:func:`schedsim.pipeline.validate`): missing or
  repeated microbatches, W before I, a stage on two ranks, too few
  microbatches, and cross-rank p2p wait cycles all fail with the rank × step grid.

Transformer stages follow Megatron-LM's GPT layer (TP=1, ``--transformer-impl
local``): per layer, forward = LN, QKV GEMM, two batched attention GEMMs,
softmax, projection GEMM, residual, LN, fc1 (×2 columns with SwiGLU), GeLU, fc2,
residual; backward-input = the data-gradient GEMMs (2 per weight GEMM pattern,
4 attention GEMMs) and elementwise backward; backward-weight = the four
weight-gradient GEMMs. Layer FLOPs match Narayanan et al., SC'21 (arXiv
2104.04473) eq. 1 (24·B·s·h²·(1 + s/6h) per forward pass without the logits
term). The first stage adds the embedding lookup, the last stage the logits
GEMM and cross-entropy. Stored activations per layer and microbatch are
``s·b·h·(34 + 5·a·s/h)`` bytes (Korthikanti et al., arXiv 2205.05198, no
recomputation, 16-bit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schedsim.errors import SpecError
from schedsim.graph.ops import Op
from schedsim.kinds import COMPUTE_KINDS
from schedsim.spec.model import OP_MODELS, ScheduleSpec
from schedsim.units import DTYPE_BYTES

__all__ = ["PipelineSpec", "TransformerSpec", "StageOps", "expand_pipeline"]


class _B(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class StageOps(_B):
    """Explicit per-stage cost: op lists (same fields as ordinary ops, without name/ranks/stream/deps)."""

    forward: list[dict[str, Any]] = Field(description="Ops of one forward (F) of one stage on one microbatch.")
    backward_input: list[dict[str, Any]] = Field(default_factory=list, description="Ops of I (input gradient).")
    backward_weight: list[dict[str, Any]] = Field(default_factory=list, description="Ops of W (weight gradient).")


class TransformerSpec(_B):
    """A GPT-style model split over the pipeline stages (Megatron-LM shapes)."""

    layers: int = Field(gt=0, description="Total transformer layers; split evenly over p·v stages.")
    hidden: int = Field(gt=0)
    ffn: int = Field(gt=0)
    heads: int = Field(gt=0)
    seq: int = Field(gt=0, description="Sequence length s.")
    micro_batch: int = Field(default=1, gt=0, description="Micro batch size b.")
    dtype: Literal["fp16", "bf16", "fp32"] = "fp16"
    vocab: int | None = Field(default=None, description="Padded vocabulary; adds embedding and logits (50304 for GPT-2).")
    swiglu: bool = Field(default=False, description="fc1 has 2·ffn columns (SwiGLU).")

    @model_validator(mode="after")
    def _heads_divide(self) -> Any:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


class PipelineSpec(_B):
    """The ``pipeline:`` block."""

    schedule: str = Field(description="gpipe | 1f1b | interleaved_1f1b | zb_h1 | zbv | dualpipev | custom "
                          "(torch names accepted).")
    p: int = Field(gt=0, description="Pipeline ranks.")
    m: int = Field(gt=0, description="Microbatches per step.")
    v: int | None = Field(default=None, gt=0, description="Virtual stages (chunks) per rank.")
    group_size: int | None = Field(default=None, description="Megatron microbatch_group_size_per_vp_stage.")
    placement: Literal["loop", "v"] | None = Field(default=None, description="loop (interleaved) or v (ZB-V, DualPipeV).")
    actions: dict[int, str | list[str]] | None = Field(default=None, description="Custom per-rank action lists "
                                                       "in torch notation, e.g. {0: '0F0 0F1 0B0 0B1'}.")
    csv: str | None = Field(default=None, description="A torch pipeline CSV (compute_only), relative to the schedule.")
    stage: StageOps | None = None
    transformer: TransformerSpec | None = None
    activation_bytes: int | None = Field(default=None, ge=0, description="p2p message size; default "
                                         "seq × micro_batch × hidden × bytes per element.")
    activation_memory_bytes: int | None = Field(default=None, ge=0, description="Activations one stage stores "
                                                "per microbatch; default from the transformer, else activation_bytes.")
    p2p: Literal["batched", "overlapped"] | None = None
    data_parallel: int = Field(default=1, gt=0, description="Pipeline replicas; adds a gradient all_reduce.")
    grad_allreduce_bytes: int | None = Field(default=None, ge=0, description="Per-rank gradient bytes for the "
                                             "data-parallel all_reduce; default 2 bytes × parameters.")
    tied_embedding_allreduce: bool = Field(default=False, description="All-reduce the embedding gradient between "
                                           "the first and last stage (Megatron, untied=False).")
    optimizer: bool = Field(default=False, description="Add the optimizer step (18 bytes/param moved).")

    @model_validator(mode="after")
    def _cost_given(self) -> Any:
        if self.schedule != "custom" and (self.actions is not None or self.csv is not None):
            raise ValueError("`actions`/`csv` are only read with schedule: custom; set schedule: custom or remove them")
        if (self.stage is None) == (self.transformer is None):
            raise ValueError("give exactly one of `stage` (op lists) or `transformer`")
        if self.schedule == "custom" and self.actions is None and self.csv is None:
            raise ValueError("schedule: custom needs `actions` or `csv`")
        return self


# ---------------------------------------------------------------- transformer
def _layer_ops(t: TransformerSpec) -> dict[str, list[dict[str, Any]]]:
    s, b, h, f, a = t.seq, t.micro_batch, t.hidden, t.ffn, t.heads
    e = DTYPE_BYTES[t.dtype]
    T = s * b
    f1 = 2 * f if t.swiglu else f
    dt = t.dtype

    def mm(name: str, m: int, n: int, k: int, batch: int = 1) -> dict[str, Any]:
        return {"name": name, "kind": "matmul", "m": m, "n": n, "k": k, "batch": batch, "dtype": dt}

    def ew(name: str, nbytes: int) -> dict[str, Any]:
        return {"name": name, "kind": "compute", "bytes": nbytes, "dtype": dt}

    fwd = [
        ew("ln1", 2 * T * h * e), mm("qkv", T, 3 * h, h), mm("scores", s, s, h // a, b * a),
        ew("softmax", 3 * b * a * s * s * e), mm("attn_v", s, h // a, s, b * a), mm("proj", T, h, h),
        ew("residual1", 3 * T * h * e), ew("ln2", 2 * T * h * e), mm("fc1", T, f1, h),
        ew("act", (f1 + f) * T * e),  # GeLU reads f, writes f; SwiGLU reads 2f, writes f
        mm("fc2", T, h, f), ew("residual2", 3 * T * h * e),
    ]
    bwd_i = [
        ew("residual2_bwd", 3 * T * h * e), mm("fc2_dgrad", T, f, h), ew("act_bwd", 3 * T * f1 * e),
        mm("fc1_dgrad", T, h, f1), ew("ln2_bwd", 4 * T * h * e), mm("proj_dgrad", T, h, h),
        mm("attn_v_dgrad", s, s, h // a, b * a), mm("attn_v_dgrad_v", s, h // a, s, b * a),
        ew("softmax_bwd", 4 * b * a * s * s * e), mm("scores_dgrad_q", s, h // a, s, b * a),
        mm("scores_dgrad_k", s, h // a, s, b * a), mm("qkv_dgrad", T, h, 3 * h), ew("ln1_bwd", 4 * T * h * e),
    ]
    bwd_w = [mm("fc2_wgrad", f, h, T), mm("fc1_wgrad", h, f1, T), mm("proj_wgrad", h, h, T),
             mm("qkv_wgrad", h, 3 * h, T)]
    return {"F": fwd, "I": bwd_i, "W": bwd_w}


def _transformer_stage(t: TransformerSpec, layers: int, first: bool, last: bool) -> dict[str, list[dict[str, Any]]]:
    ops = _layer_ops(t)
    out: dict[str, list[dict[str, Any]]] = {}
    for key, lst in ops.items():
        out[key] = [{**o, "repeat": layers} for o in lst]
    e = DTYPE_BYTES[t.dtype]
    T, h = t.seq * t.micro_batch, t.hidden
    if t.vocab:
        V = t.vocab
        if first:
            out["F"].insert(0, {"name": "embedding", "kind": "compute", "bytes": 2 * T * h * e, "dtype": t.dtype})
            out["W"].append({"name": "embedding_wgrad", "kind": "compute", "bytes": 3 * T * h * e, "dtype": t.dtype})
        if last:
            out["F"] += [{"name": "logits", "kind": "matmul", "m": T, "n": V, "k": h, "dtype": t.dtype},
                         {"name": "cross_entropy", "kind": "compute", "bytes": 3 * T * V * 4, "dtype": "fp32"}]
            out["I"].insert(0, {"name": "logits_dgrad", "kind": "matmul", "m": T, "n": h, "k": V, "dtype": t.dtype})
            out["W"].insert(0, {"name": "logits_wgrad", "kind": "matmul", "m": h, "n": V, "k": T, "dtype": t.dtype})
    return out


def _params_per_layer(t: TransformerSpec) -> int:
    f1 = 2 * t.ffn if t.swiglu else t.ffn
    return 4 * t.hidden * t.hidden + t.hidden * f1 + t.ffn * t.hidden + 4 * t.hidden


def _act_memory_per_layer(t: TransformerSpec) -> int:
    """Korthikanti et al. 2022 (arXiv 2205.05198) eq. 2: s·b·h·(34 + 5·a·s/h) bytes, 16-bit, no recompute."""
    s, b, h, a = t.seq, t.micro_batch, t.hidden, t.heads
    return int(s * b * h * (34 + 5 * a * s / h))


# ---------------------------------------------------------------- expansion
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


def _split_fix(message: str, *, custom: bool) -> tuple[str, str]:
    """Split a pipeline library message into (what is wrong, one fix line in YAML terms).

    The library's messages end in ``fix: ...`` aimed at Python callers (``format='compute_comms'``); a
    schedule file has no such argument, so those fixes are restated for the ``pipeline:`` block.
    """
    import re

    fix = ("give each rank its compute actions in torch notation (0F0, 1B3, 2I0, 2W0); schedsim adds the "
           "sends and recvs" if custom else "check schedule, p, m, v and group_size")
    m = re.search(r"(?:;|\(|\.)?\s*\(?fix: (.*?)\)?\s*$", message, re.S)
    if m is None:
        return message, fix
    head, lib_fix = message[:m.start()].rstrip(" ;,("), m.group(1).strip()
    if "format=" in lib_fix:
        lib_fix = ("drop the SEND/RECV cells: give a compute-only CSV (schedsim adds the p2p the way torch's "
                   "_add_send_recv does)")
    elif "parse_order" in lib_fix or "stage_to_rank" in lib_fix:
        lib_fix = fix
    return head, lib_fix


def _err(spec: ScheduleSpec, msg: str, path: str, fix: str) -> SpecError:
    return SpecError(msg, file=spec._file, path=path, fix=fix)


def expand_pipeline(spec: ScheduleSpec) -> tuple[list[Op], dict[str, Any]]:
    """Expand the pipeline block of ``spec`` into per-rank :class:`Op` instances (program order per rank).

    Returns ``(ops, info)``; ``info`` (schedule, p, v, m, placement, p2p mode, activation sizes, the compute
    order as text) goes to ``G.graph["pipeline"]``. The result is cached on ``spec``.

    Raises
    ------
    SpecError
        Invalid block (unknown key, unknown schedule, bad sizes).
    schedsim.pipeline.PipelineScheduleError
        The order would hang or is wrong (missing/duplicate microbatch, W before I,
        a stage on two ranks, too few microbatches, p2p wait cycle); the message
        shows the rank × step grid.
    """
    cached = getattr(spec, "_pipeline", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    from schedsim.graph.build import op_instance
    from schedsim.pipeline import add_p2p, get_schedule, parse_order, read_csv, stage_to_rank, validate
    from schedsim.pipeline.actions import ComputationType as CT

    try:
        pb = PipelineSpec.model_validate(spec.pipeline)
    except ValidationError as e:
        errs = e.errors(include_url=False)
        err = next((x for x in errs if x["type"] == "extra_forbidden"), errs[0])
        loc = ".".join(str(x) for x in err["loc"])
        fix = "see docs/schedule_language.md, section pipeline"
        if err["type"] == "extra_forbidden":
            import difflib

            close = difflib.get_close_matches(str(err["loc"][-1]), list(PipelineSpec.model_fields), n=1)
            fix = f"did you mean {close[0]!r}?" if close else fix
            raise _err(spec, f"unknown key {err['loc'][-1]!r}", f"pipeline.{loc}", fix) from None
        raise _err(spec, err["msg"].removeprefix("Value error, "), f"pipeline.{loc}" if loc else "pipeline",
                   fix) from None
    p, m = pb.p, pb.m
    dp = pb.data_parallel
    world = p * dp
    if spec.world_size != world:
        raise _err(spec, f"world_size is {spec.world_size} but the pipeline needs p × data_parallel = {p} × {dp} = {world}",
                   "world_size", f"set world_size: {world}")
    try:
        if pb.schedule == "custom":
            if pb.csv is not None:
                base = Path(spec._file).parent if spec._file and spec._file != "<schedule>" else Path(".")
                try:
                    order = read_csv(base / pb.csv, format="compute_comms")  # SEND/RECV cells: issued as written
                except (OSError, UnicodeDecodeError) as e:
                    raise _err(spec, f"cannot read pipeline csv {str(base / pb.csv)!r}: {e.__class__.__name__}",
                               "pipeline.csv", "give a torch pipeline CSV path relative to the schedule file") from None
            else:
                order = parse_order(pb.actions or {})
            stages = sorted({sub.stage for acts in order.values() for a in acts if a is not None
                             for sub in a.sub_actions})
            num_stages = len(stages)
            if num_stages >= p and stages == list(range(num_stages)) and num_stages % p:
                raise _err(spec, f"the custom actions run {num_stages} stages, which do not split evenly over p={p} "
                           "ranks (every rank runs v stages: placement loop or v)",
                           "pipeline.csv" if pb.csv is not None else "pipeline.actions",
                           f"give the actions {num_stages - num_stages % p} or {num_stages + p - num_stages % p} "
                           f"stages, or set p to a divisor of {num_stages}")
            if num_stages < p or stages != list(range(num_stages)):
                raise _err(spec, f"the custom actions run stages {stages[:8]}{'…' if len(stages) > 8 else ''}; "
                           f"a pipeline of p={p} needs stages 0..N-1 with N >= p", "pipeline.actions",
                           "give every rank its F/B (or I/W) actions, e.g. {0: '0F0 0B0', 1: '1F0 1B0'}")
            v = max(1, num_stages // p)
            placement = pb.placement or "loop"
            s2r = stage_to_rank(placement, p, v)
            if pb.placement is None and v > 1:
                from schedsim.pipeline.comms import infer_stage_to_rank

                try:
                    seen = infer_stage_to_rank(order)
                except ValueError:
                    seen = None
                vmap = stage_to_rank("v", p, v)
                if seen is not None and seen != {k: s2r[k] for k in seen} and seen == {k: vmap[k] for k in seen}:
                    where = "pipeline.csv" if pb.csv is not None else "pipeline.actions"
                    raise _err(spec, f"these actions place the stages in a V (rank 0 runs stages 0 and {num_stages - 1}, "
                               f"as ZB-V and DualPipeV do), but placement defaults to loop (rank 0 runs stages "
                               f"0, {p}, ...)", where, "set placement: v in the pipeline block")
            name = "custom"
        else:
            info = get_schedule(pb.schedule)
            v = info.chunks(pb.v)
            order = info.generate(p, m, v, group_size=pb.group_size)
            s2r = info.stage_to_rank(p, v) if pb.placement is None else stage_to_rank(pb.placement, p, v)
            num_stages = p * v
            name = info.name
        # cross-rank p2p wait cycles are found by the DAG's rendezvous check (with this grid attached)
        validate(order, p, m, num_stages, s2r, schedule=None if name == "custom" else name, check_p2p=False)
    except ValueError as e:
        from schedsim.errors import SchedsimError

        if isinstance(e, SchedsimError):
            if e.fix is None and "fix" not in e.message:  # a rejection always says what to do
                e.fix = ("give each stage one F and one B (or I then W) per microbatch 0..m-1, on the rank its "
                         "placement puts it" if pb.schedule == "custom" else "check schedule, p, m, v and group_size")
                e.args = (SchedsimError.format(e),)  # the schedule language's layout: fix on its own line
            raise
        msg, fix = _split_fix(str(e), custom=pb.schedule == "custom")
        raise _err(spec, msg, "pipeline.csv" if pb.csv is not None else "pipeline", fix) from None
    mode = pb.p2p or ("batched" if name == "1f1b" else "overlapped")
    # per rank: (action, NCCL batch id or None) in issue order
    steps: dict[int, list[tuple[Any, int | None]]] = {}
    if name == "interleaved_1f1b":
        if p == 2 and mode == "batched":
            raise _err(spec, "interleaved 1F1B with batched p2p needs p >= 3: with p = 2 one batch holds two sends "
                       "to the same peer, which NCCL pairs by issue order with the wrong recvs (Megatron-LM "
                       "arguments.py refuses it for the same reason)", "pipeline.p2p",
                       "use p2p: overlapped (Megatron's default for interleaving) or p >= 3")
        from schedsim.pipeline.comms import megatron_interleaved_batched

        for r, seq in megatron_interleaved_batched(p, m, v, pb.group_size).items():
            out_r: list[tuple[Any, int | None]] = []
            for i, x in enumerate(seq):
                if not isinstance(x, list):
                    out_r.append((x, None))
                elif mode == "batched":
                    out_r.extend((a, i) for a in x)
                else:
                    out_r.extend((a, None) for a in _megatron_p2p_ops_order(x, r))
            steps[r] = out_r
    else:
        from schedsim.pipeline.comms import align_recvs

        torch_run = name not in ("1f1b", "interleaved_1f1b")
        has_comms = any(a is not None and a.type in (CT.SEND_F, CT.RECV_F, CT.SEND_B, CT.RECV_B)
                        for acts in order.values() for a in acts)
        if has_comms:
            # a compute_comms order (torch CSV or actions with SEND/RECV): the user's issue order, as
            # torch's runtime executes it; the static checks decide whether it hangs. UNSHARD, RESHARD and
            # REDUCE_GRAD (torch's runtime CSV has them) carry no microbatch and no p2p: not modelled here
            lowered = {r: [a for a in acts if a is not None and (a.is_compute or a.is_comm)] for r, acts in order.items()}
            from schedsim.pipeline.comms import simulate_p2p

            try:  # a compute whose input is never received, a recv never sent, a rank waiting on itself
                simulate_p2p(lowered, s2r, num_stages)
            except ValueError as e:
                reason = getattr(e, "reason", None)
                if reason is not None and "(fix:" in reason:  # one `fix:` line, as every other rejection
                    head, fix = _split_fix(reason, custom=True)
                    grid = getattr(e, "grid", "")
                    e.args = (f"{head}\n  fix: {fix}" + (f"\n\nPipeline schedule:\n{grid}" if grid else ""),)
                raise
        elif torch_run:
            # torch runs these schedules (and custom action lists): its lowering, each p2p action its own
            # batch_isend_irecv (torch _PipelineScheduleRuntime._batch_p2p)
            from schedsim.pipeline.comms import torch_add_send_recv

            lowered = torch_add_send_recv(order, s2r, num_stages)
        else:
            lowered = align_recvs(add_p2p(order, s2r, num_stages), s2r)
            if mode == "overlapped":  # Megatron with batch_p2p_comm off: each call's lone ops in _p2p_ops order
                lowered = {r: _per_call(acts, r) for r, acts in lowered.items()}
        for r, acts in lowered.items():
            out_r = []
            bid, prev_comm = 0, False
            for a in acts:
                if a is None:
                    continue
                comm = a.type in (CT.SEND_F, CT.RECV_F, CT.SEND_B, CT.RECV_B)
                if comm and (not prev_comm or torch_run):
                    bid += 1
                out_r.append((a, bid if comm and (mode == "batched" or torch_run) else None))
                prev_comm = comm
            steps[r] = out_r

    # per-stage cost templates
    t = pb.transformer
    if t is not None:
        if t.layers % num_stages:
            raise _err(spec, f"{t.layers} layers do not split evenly over {num_stages} stages", "pipeline.transformer.layers",
                       f"use a multiple of p·v = {num_stages}")
        lps = t.layers // num_stages
        templates = {s: _transformer_stage(t, lps, s == 0, s == num_stages - 1) for s in range(num_stages)}
        act_bytes = pb.activation_bytes if pb.activation_bytes is not None else t.seq * t.micro_batch * t.hidden * DTYPE_BYTES[t.dtype]
        mem_bytes = pb.activation_memory_bytes if pb.activation_memory_bytes is not None else lps * _act_memory_per_layer(t)
        params_stage = lps * _params_per_layer(t)
        emb_bytes = (t.vocab or 0) * t.hidden * DTYPE_BYTES[t.dtype]
        dtype = t.dtype
    else:
        st = pb.stage
        assert st is not None
        tmpl = {"F": st.forward, "I": st.backward_input, "W": st.backward_weight}
        templates = {s: tmpl for s in range(num_stages)}
        act_bytes = pb.activation_bytes if pb.activation_bytes is not None else 0
        mem_bytes = pb.activation_memory_bytes if pb.activation_memory_bytes is not None else act_bytes
        params_stage = 0
        emb_bytes = 0
        dtype = "fp16"

    rank_stages = {r: sorted(st for st, rr in s2r.items() if rr == r) for r in range(p)}
    protos: dict[tuple[int, str], list[tuple[str, Op]]] = {}
    for st_idx in range(num_stages):
        for phase in ("F", "I", "W"):
            lst = templates[st_idx][phase] or [{"name": "noop", "kind": "compute", "duration_us": 0}]
            out_l = []
            for k, o in enumerate(lst):
                oname = str(o.get("name", k))
                d = {kk: vv for kk, vv in o.items() if kk != "name"}
                kind = d.get("kind")
                bad = sorted(set(d) & {"ranks", "stream", "deps"})
                if bad:
                    raise _err(spec, f"stage ops cannot set {bad[0]!r}: the pipeline places them (rank of the "
                               "stage, stream 'compute', dependencies from the schedule)", f"pipeline.stage.{phase}[{k}]",
                               f"remove {bad[0]!r} from the stage op")
                if kind not in (*COMPUTE_KINDS, "memcpy"):
                    raise _err(spec, f"stage ops must be compute work (matmul, compute, memcpy), got {kind!r}",
                               f"pipeline.stage.{phase}[{k}]",
                               "model communication with the block's activation_bytes, data_parallel or "
                               "tied_embedding_allreduce, or as hand-written ops")
                    raise _err(spec, f"unknown op kind {kind!r} in a stage op", f"pipeline.stage.{phase}[{k}]",
                               "kinds: " + ", ".join(OP_MODELS))
                try:
                    model = OP_MODELS[kind].model_validate({**d, "name": "x"})
                except ValidationError as e:
                    err = e.errors(include_url=False)[0]
                    raise _err(spec, f"{err['msg']} at {'.'.join(map(str, err['loc']))}",
                               f"pipeline.stage.{phase}[{k}]",
                               "stage ops take the fields of ordinary ops (kind, m/n/k, duration_us, bytes, ...)") from None
                out_l.append((oname, op_instance(model, 0, 0, stream="compute", group=(), tags=(), source="pipeline")))
            protos[(st_idx, phase)] = out_l
    ops: list[Op] = []
    for d in range(dp):
        off = d * p
        for r in range(p):
            rank = off + r
            prev_of: dict[tuple[int, str, int], str] = {}
            pending_sends: list[str] = []
            last_compute: str | None = None
            for act, batch_id in steps[r]:
                pair_deps: list[str] = []
                if len(act.sub_actions) > 1:  # DualPipe's overlapped F&B chunk starts when both inputs exist
                    for sub in act.sub_actions:
                        key = (sub.stage, "RECV_F" if sub.type is CT.F else "RECV_B", sub.microbatch)
                        if key in prev_of:
                            pair_deps.append(prev_of[key])
                for sub in act.sub_actions:
                    s, j, typ = sub.stage, sub.microbatch, sub.type
                    chunk = rank_stages[r].index(s)
                    tags = {"pp_op": typ.value, "stage": s, "mb": j, "chunk": chunk}
                    if typ in (CT.SEND_F, CT.RECV_F, CT.SEND_B, CT.RECV_B):
                        fwd = typ in (CT.SEND_F, CT.RECV_F)
                        if typ in (CT.SEND_F, CT.SEND_B):
                            peer = s2r[s + 1] if fwd else s2r[s - 1]
                            kind = "send"
                        else:
                            peer = s2r[s - 1] if fwd else s2r[s + 1]
                            kind = "recv"
                        opname = f"{'send' if kind == 'send' else 'recv'}{'F' if fwd else 'B'}{s}.{j}"
                        stream = f"pp_{kind}" if mode == "batched" else f"pp_{kind}{'F' if fwd else 'B'}_r{peer + off}"
                        deps = []
                        if kind == "send":
                            src_key = (s, "F" if fwd else "I", j)
                            if src_key in prev_of:
                                deps.append(prev_of[src_key])
                        if mode == "batched" and last_compute and last_compute not in deps:
                            # Megatron's batch_p2p_sync (default on) calls torch.cuda.synchronize() around each
                            # batch, so the host posts it only after all work issued before it has finished
                            deps.append(last_compute)
                        src_stage = s if kind == "send" else (s - 1 if fwd else s + 1)
                        msg = f"{'F' if fwd else 'B'}{src_stage}.{j}"  # the message: who produced it, which mb
                        pair = (rank, peer + off) if kind == "send" else (peer + off, rank)
                        ops.append(Op(name=opname, rank=rank, kind=kind, stream=stream, seq=0, deps=tuple(deps),
                                      group=pair, peer=peer + off, nbytes=float(act_bytes), dtype=dtype, tag=msg,
                                      tags=tuple(sorted({**tags, "msg": msg}.items())), source="pipeline",
                                      p2p_batch=None if batch_id is None else f"b{batch_id}"))
                        prev_of[(s, typ.value, j)] = opname
                        if kind == "send" and mode == "batched":
                            pending_sends.append(opname)
                        continue
                    parts = [("F", "F")] if typ is CT.F else [("I", "I")] if typ is CT.I else \
                        [("W", "W")] if typ is CT.W else [("I", "B"), ("W", "B")]
                    for phase, label in parts:
                        deps = []
                        if phase == "F":
                            if (s, "RECV_F", j) in prev_of:
                                deps.append(prev_of[(s, "RECV_F", j)])
                            elif s > 0 and (s - 1, "F", j) in prev_of:
                                deps.append(prev_of[(s - 1, "F", j)])
                        elif phase == "I":
                            if (s, "RECV_B", j) in prev_of:
                                deps.append(prev_of[(s, "RECV_B", j)])
                            elif s < num_stages - 1 and (s + 1, "I", j) in prev_of:
                                deps.append(prev_of[(s + 1, "I", j)])
                            elif (s, "F", j) in prev_of:
                                deps.append(prev_of[(s, "F", j)])
                        else:  # W needs its I
                            if (s, "I", j) in prev_of:
                                deps.append(prev_of[(s, "I", j)])
                        if pair_deps:
                            deps.extend(d for d in pair_deps if d not in deps)
                            pair_deps = []
                        if pending_sends:  # batched p2p: the call returns when its sends completed too
                            deps.extend(pending_sends)
                            pending_sends = []
                        ttags = tuple(sorted({**tags, "pp_op": label, "phase": phase}.items()))
                        last = None
                        for k, (tname, proto) in enumerate(protos[(s, phase)]):
                            oname = f"{label}{s}.{j}.{tname}" if label == phase else f"B{s}.{j}.{phase}.{tname}"
                            ops.append(proto.instance(oname, rank, 0, tuple(deps) if k == 0 and deps else (), ttags))
                            last = oname
                            last_compute = oname
                        prev_of[(s, phase, j)] = last  # type: ignore[assignment]
                    if label == "B":  # a full backward hands its input gradient on when the whole B is done
                        prev_of[(s, "I", j)] = prev_of[(s, "W", j)]
        # end of step: tied embedding all_reduce between first and last stage; DP gradient all_reduce
        if pb.tied_embedding_allreduce and emb_bytes and p > 1:
            first_r, last_r = off + s2r[0], off + s2r[num_stages - 1]
            grp = tuple(sorted({first_r, last_r}))
            for rr in grp:
                ops.append(Op(name="tied_embedding_allreduce", rank=rr, kind="all_reduce", stream="compute", seq=0,
                              group=grp, nbytes=float(emb_bytes), dtype=dtype,
                              tags=(("pp_op", "allreduce"),), source="pipeline"))
        if pb.optimizer and params_stage:
            for r in range(p):
                nst = sum(1 for st_ in range(num_stages) if s2r[st_] == r)
                ops.append(Op(name="optimizer_step", rank=off + r, kind="compute", stream="compute", seq=0,
                              nbytes=float(18 * params_stage * nst), dtype="fp32",
                              tags=(("pp_op", "optimizer"),), source="pipeline"))
    if dp > 1:
        for r in range(p):
            nst = sum(1 for st_ in range(num_stages) if s2r[st_] == r)
            gbytes = pb.grad_allreduce_bytes if pb.grad_allreduce_bytes is not None else 2 * params_stage * nst
            grp = tuple(d * p + r for d in range(dp))
            for rr in grp:
                ops.append(Op(name=f"dp_grad_allreduce_r{r}", rank=rr, kind="all_reduce", stream="compute", seq=0,
                              group=grp, nbytes=float(gbytes), dtype=dtype, tags=(("pp_op", "allreduce"),),
                              source="pipeline"))
    memory = None
    if t is not None:
        from schedsim.pipeline.memory import stage_params, static_memory

        memory = static_memory(stage_params(num_stages, t.layers // num_stages, _params_per_layer(t), hidden=t.hidden,
                                            seq=t.seq, vocab=t.vocab), s2r)
    info = {"schedule": name, "p": p, "m": m, "v": v, "num_stages": num_stages, "dp": dp, "static_memory": memory,
            "stage_to_rank": {int(k): int(val) for k, val in s2r.items()}, "p2p": mode,
            "activation_bytes": act_bytes, "activation_memory_bytes": mem_bytes,
            "order": {r: [str(a) for a in order[r] if a is not None] for r in order}}
    # program order: ops are appended rank by rank within a replica, so a stable sort by rank keeps it
    ops.sort(key=lambda o: o.rank)
    spec._pipeline = (ops, info)
    return ops, info
