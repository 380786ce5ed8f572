"""What a user compares with a Megatron-LM log, for a schedule with a ``training:`` block.

* **iteration time**: the predicted makespan of one step (Megatron's ``elapsed time per iteration``);
* **TFLOP/s per GPU**: Megatron's ``num_floating_point_operations`` for the global batch
  (:func:`schedsim.spec.training_block.model_flops`) / iteration time / GPUs, as Megatron's
  ``throughput per GPU (TFLOP/s/GPU)`` log line computes it (``megatron/training/training.py``
  ``training_log``);
* **MFU**: that rate over the profile's dense peak for the parameters' dtype (``gpu.peak_tflops``);
* **TFLOP/s per GPU as current Megatron-LM logs it** (``tflops_per_gpu_causal``): the same with the core
  attention counted at half for the causal mask (``model_flops(..., causal=True)``: Megatron-LM since 2025-03);
* **exposed communication by kind**, seconds, mean over ranks: time a rank's TP collectives (``tp``), the
  context-parallel ring's send/recv (``cp``), the experts' token all-to-all (``ep``), pipeline send/recv
  (``pp``) and data-parallel gradient and parameter collectives (``dp``: the reductions, the tied embedding
  all-reduce, the distributed optimizer's all-gather, FSDP2's all-gathers and reduce-scatters) run while none of
  its compute does, each kind counting only what the kinds before it (tp, cp, ep, pp, dp) and compute do not
  already cover;
* **bubble**: mean over ranks of the time nothing runs on a rank (no compute, no communication);
* **memory per GPU** of the most loaded pipeline stage (the first where the stages are even),
  :func:`schedsim.spec.training_block.memory_per_rank`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from schedsim.kinds import P2P_KINDS

__all__ = ["TrainingReport", "training_report", "step_rate", "print_training", "exposed_by_kind"]

KINDS = ("tp", "cp", "ep", "pp", "dp", "other")


@dataclass(frozen=True)
class TrainingReport:
    """One step's figures (module docstring); seconds, FLOP, bytes."""

    world: int
    tp: int
    pp: int
    dp: int
    cp: int
    v: int
    m: int
    micro_batch: int
    global_batch: int
    schedule: str
    dtype: str
    iteration_s: float
    flops: float
    tflops_per_gpu: float
    peak_tflops: float
    mfu: float
    exposed_s: dict[str, float]
    bubble_s: float
    memory: dict[str, float]
    recompute: str
    tflops_per_gpu_causal: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON form."""
        return asdict(self)


def exposed_by_kind(tl: Any, classes: Any = None) -> tuple[dict[str, float], float]:
    """Exposed communication per kind (``tp``, ``cp``, ``ep``, ``pp``, ``dp``, ``other``) and the bubble, each
    the mean over ranks in seconds (module docstring); ``classes``: per rank of the world, the rank of ``tl`` that
    stands for it (a symmetric lowering's, :func:`schedsim.lower.training.rank_classes`), the mean then being the
    world's, added up as its full timeline would add it. TP collectives are the collectives tagged with a pipeline
    action (they run inside F/I/W/B) other than all-to-all, and the sends and recvs of streams ``tp_comm`` /
    ``tp_send`` / ``tp_recv`` (``tp_comm_overlap``'s ring), cp those of ``cp_comm`` / ``cp_send`` /
    ``cp_recv``, ep the all-to-alls, pp the other sends and recvs, dp those tagged ``comm: dp``."""
    from schedsim.sim.metrics import merged, union_length

    c = tl.columns
    res_vals, res_codes = c.resource
    kind_vals, kind_codes = c.kind
    comm_code = res_vals.index("comm") if "comm" in res_vals else -9
    comp_code = res_vals.index("compute") if "compute" in res_vals else -9
    is_p2p = np.isin(kind_codes, [i for i, k in enumerate(kind_vals) if k in P2P_KINDS])
    is_a2a = np.isin(kind_codes, [i for i, k in enumerate(kind_vals) if k == "all_to_all"])
    stream_vals, stream_codes = c.stream
    is_cp = np.isin(stream_codes, [i for i, v in enumerate(stream_vals) if v in ("cp_comm", "cp_send", "cp_recv")])
    is_tp_ring = np.isin(stream_codes, [i for i, v in enumerate(stream_vals) if v in ("tp_comm", "tp_send",
                                                                                       "tp_recv")])
    cv, cc = c.tag_column("comm")
    is_dp = np.isin(cc, [i for i, v in enumerate(cv) if v == "dp"]) | np.isin(
        stream_codes, [i for i, v in enumerate(stream_vals) if v in ("fsdp_all_gather", "fsdp_reduce_scatter")])
    pv, pc = c.tag_column("pp_op")
    in_action = np.isin(pc, [i for i, v in enumerate(pv) if v in ("F", "I", "W", "B")])
    comm = res_codes == comm_code
    cls = np.full(len(res_codes), -1, np.int64)
    cls[res_codes == comp_code] = 0
    cls[comm] = 6  # other
    cls[comm & in_action & ~is_p2p] = 1
    cls[comm & in_action & is_a2a] = 3
    cls[comm & is_p2p] = 4
    cls[comm & is_p2p & is_cp] = 2
    cls[comm & is_p2p & is_tp_ring] = 1  # tp_comm_overlap's ring exchange
    cls[comm & is_dp] = 5
    makespan = tl.makespan_s
    rank = np.asarray(c.rank)
    # one stable sort by rank instead of a mask per rank (O(n log n), not O(n x ranks)); each rank's rows keep
    # their timeline order, so every sum below is the one the per-rank masks gave
    order = np.argsort(rank, kind="stable")
    ranks, first = np.unique(rank[order], return_index=True)
    bounds = [*first.tolist(), len(order)]
    start_s, end_s, cls_o = np.asarray(c.start_s)[order], np.asarray(c.end_s)[order], cls[order]
    per: dict[int, tuple[list[float], float]] = {}  # rank -> (its exposed time per kind, its bubble)
    for i in range(len(ranks)):
        lo, hi = bounds[i], bounds[i + 1]
        s_all, e_all = start_s[lo:hi], end_s[lo:hi]
        k_all = cls_o[lo:hi]
        keep = k_all == 0
        covered = union_length(s_all[keep], e_all[keep])
        adds = []
        for code in range(1, len(KINDS) + 1):
            keep = keep | (k_all == code)
            now = union_length(s_all[keep], e_all[keep])
            adds.append(now - covered)
            covered = now
        a, b = merged(s_all[k_all >= 0], e_all[k_all >= 0])
        per[int(ranks[i])] = adds, makespan - float((b - a).sum())
    tot = dict.fromkeys(KINDS, 0.0)
    bubble = 0.0
    each = ranks.tolist() if classes is None else np.asarray(classes).tolist()
    for r in each:  # in rank order, as one pass over every rank adds them
        adds, idle = per[r]
        for kind, x in zip(KINDS, adds, strict=True):
            tot[kind] += x
        bubble += idle
    n = max(1, len(each))
    return {k: v / n for k, v in tot.items()}, bubble / n


def step_rate(spec: Any, tl: Any, profile: Any) -> tuple[float, float, float, float, float]:
    """``(iteration_s, flops, tflops_per_gpu, peak_tflops, mfu)`` of a simulated training step (``spec`` with a
    ``training:`` block, its timeline, the profile it ran on): the makespan (s), Megatron's FLOP per step
    (:func:`schedsim.spec.training_block.model_flops`), TFLOP/s per GPU (FLOP / s / world / 1e12), the profile's
    dense peak of the step's dtype (TFLOP/s) and MFU (the rate over that peak; 0 without one): the figures of
    :func:`training_report` that ``schedsim search`` ranks by."""
    from schedsim.spec.training_block import model_flops, training_plan

    t = spec.training
    plan = training_plan(t, spec.world_size)
    flops = model_flops(t, plan)
    it = tl.makespan_s
    peak = float(profile.gpu.peak_tflops.get(plan.dtype, 0.0))
    rate = flops / it / spec.world_size / 1e12 if it > 0 else 0.0
    return it, flops, rate, peak, rate / peak if peak else 0.0


def training_report(spec: Any, tl: Any, profile: Any) -> TrainingReport:
    """The figures of a simulated training step (``spec`` with a ``training:`` block, its timeline, the
    profile it ran on)."""
    from schedsim.spec.training_block import memory_per_rank, model_flops, training_plan

    t = spec.training
    plan = training_plan(t, spec.world_size)
    it, flops, rate, peak, mfu = step_rate(spec, tl, profile)
    world = spec.world_size
    classes = None
    if tl.meta.get("represented"):  # a symmetric lowering's timeline: its representatives stand for every rank
        from schedsim.lower.training import rank_classes

        classes = rank_classes(spec)
    exposed, bubble = exposed_by_kind(tl, classes)
    rc = t.recompute_granularity or "none"
    if t.recompute_granularity == "full":
        rc += f" ({t.recompute_method}, {t.recompute_num_layers})"
    return TrainingReport(world=world, tp=plan.tp, pp=plan.pp, dp=plan.dp, cp=plan.cp, v=plan.v, m=plan.m,
                          micro_batch=t.micro_batch_size, global_batch=plan.global_batch, schedule=plan.schedule,
                          dtype=plan.dtype, iteration_s=it, flops=flops, tflops_per_gpu=rate, peak_tflops=peak,
                          mfu=mfu, exposed_s=exposed, bubble_s=bubble,
                          memory=memory_per_rank(t, plan), recompute=rc,
                          tflops_per_gpu_causal=rate * model_flops(t, plan, causal=True) / flops if flops else 0.0)


def print_training(d: dict[str, Any]) -> None:
    """Print a :class:`TrainingReport`'s JSON form as four lines."""
    from schedsim.report.summary import fmt_bytes, fmt_time

    print(f"training: {d['world']} GPUs = tp {d['tp']} × pp {d['pp']} × dp {d['dp']} (cp {d['cp']}), "
          f"{d['schedule']}{' v=' + str(d['v']) if d['v'] > 1 else ''}, m={d['m']} microbatches of "
          f"{d['micro_batch']}, global batch {d['global_batch']}, {d['dtype']}, recompute {d['recompute']}")
    print(f"  iteration time {fmt_time(d['iteration_s'])}   {d['tflops_per_gpu']:.1f} TFLOP/s per GPU "
          f"(Narayanan et al. 2021 eq. 3: {d['flops']:.4g} FLOP per step)   " + (
              f"MFU {100 * d['mfu']:.1f} % of {d['peak_tflops']:.0f} TFLOP/s {d['dtype']} peak" if d["peak_tflops"]
              else f"MFU – (the profile lists no {d['dtype']} peak: gpu.peak_tflops.{d['dtype']})"))
    if d.get("tflops_per_gpu_causal"):
        print(f"  (Megatron-LM since 2025-03 counts causal attention at half: {d['tflops_per_gpu_causal']:.1f} "
              "TFLOP/s per GPU in its log)")
    ex = d["exposed_s"]
    print("  exposed communication (mean over ranks): " + ", ".join(
        f"{k.upper()} {fmt_time(ex[k])}" for k in ("tp", "cp", "ep", "pp", "dp")
        if k in ex and (k in ("tp", "pp", "dp") or ex[k]))
        + (f", other {fmt_time(ex['other'])}" if ex.get("other") else "") + f"; bubble (nothing runs) "
        f"{fmt_time(d['bubble_s'])}")
    mem = d["memory"]
    where = f"pipeline stage {mem['stage']} (the most loaded)" if mem.get("stage") else "first pipeline stage"
    print(f"  memory per GPU, {where}: " + ", ".join(
        f"{k} {fmt_bytes(mem[k])}" for k in ("params", "grads", "optimizer", "gathered", "activations") if k in mem)
        + f"; total {fmt_bytes(mem['total'])} (Megatron's distributed-optimizer bytes/param, Korthikanti et al. "
        "2022 activations)")
