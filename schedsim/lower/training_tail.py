"""The tail of a ``training:`` block's rank (:func:`schedsim.lower.training._emit_rank`; ``ranks`` is its
``_Ranks``, not imported here: training imports this module): the
``overlap_param_gather`` all-gathers at the step's start, what follows the optimizer step, and the marking of the
pipeline's send/recv tag sets as their message column (:func:`mark_pipeline_msg_tags`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from schedsim.kinds import P2P_KINDS
from schedsim.units import DTYPE_BYTES

if TYPE_CHECKING:
    from schedsim.lower.table import Table

#: Tags of the optimizer's kernels (the step and the gradient passes before it).
OPT_STEP_TAG = (("pp_op", "optimizer"),)


def mark_pipeline_msg_tags(table: Table, p2p_ids: Iterable[tuple[int, int, int]], own: set[int]) -> None:
    """Mark the pipeline's send/recv tag sets (the tag ids of ``p2p_ids``, :attr:`~schedsim.lower.pipeline_emitter.
    _Emitter.p2p_ids`' values) as their message column (:meth:`~schedsim.lower.table.Table.mark_msg_tags`), where
    ``table`` held no op before the block (the caller's test: no other op has these sets) and holds no send or recv
    but those of the templates ``own`` (no CP or TP ring): each set names the message that is its ops' ``msg``
    column, so the pairing (:func:`schedsim.lower.p2p._msg_values`) compares the column and reads no set. Where a
    ring's sends and recvs are there too nothing is marked (marking part of them made the pairing read each marked
    op's string)."""
    tids = np.unique(np.fromiter((x[1] for x in p2p_ids), np.int64))
    if not len(tids) or any(x.kind in P2P_KINDS for i, x in enumerate(table.templates) if i not in own):
        return
    mask = np.zeros(int(tids[-1] - tids[0]) + 1, bool)
    mask[tids - tids[0]] = True
    table.mark_msg_tags(int(tids[0]), mask)


def _param_gathers_at_start(ranks: Any, g: int, stages: list[int], params: dict[int, float],
                            dp_group: tuple[int, ...], edp_group: tuple[int, ...]) -> None:
    """Rank ``g``'s ``overlap_param_gather`` all-gathers of its stage chunks' parameters (``params``, per TP rank):
    the dense ones over ``dp_group``, the experts' over their own ``edp_group`` (where it has more than one rank),
    each chunk's on ``dp_comm`` with no dependence."""
    plan = ranks.plan
    param_e = DTYPE_BYTES[plan.dtype]
    for s in stages:
        ex = ranks.held[s]["experts"]
        ranks.one("all_gather", f"dp_param_allgather_s{s}", g, dp_group, (params[s] - ex) * param_e, plan.dtype, ())
        if ex and len(edp_group) > 1:
            ranks.one("all_gather", f"dp_expert_param_allgather_s{s}", g, edp_group, ex * param_e, plan.dtype, ())


def _after_step(ranks: Any, g: int, opt: int, mine: float, stepped: float,
                gathers: list[tuple[str, tuple[int, ...], float]], zero: bool = True) -> None:
    """Rank ``g``'s ops after its optimizer step (name id ``opt``) over ``stepped`` of its ``mine`` parameters:
    the 16-bit model weights from the fp32 main ones, the parameter all-gathers ``gathers`` (name, group,
    parameters: the distributed optimizer's, when not overlapped), and with ``zero`` the memset of the gradient
    buffer (Megatron's FSDP2 wrapper has none: its ``zero_grad_buffer`` does nothing)."""
    plan = ranks.plan
    grad_e, param_e = DTYPE_BYTES[plan.grad_dtype], DTYPE_BYTES[plan.dtype]
    if param_e != 4:  # MixedPrecisionOptimizer.step's _copy_main_params_to_model_params (multi_tensor_scale):
        # read 4, write param_e, on the rank's shard
        opt = ranks.one("compute", "optimizer_param_copy", g, (), (4 + param_e) * stepped, "fp32", (opt,),
                        stream="compute", tags=OPT_STEP_TAG)
    for name, group, count in gathers:
        opt = ranks.one("all_gather", name, g, group, count * param_e, plan.dtype, (opt,), stream="compute")
    # the gradient buffer zeroed for the next step (train_step's zero_grad_buffer, a memset of the rank's whole
    # buffer, distributed optimizer or not): issued at the next step's start, written here, where it costs the
    # same compute-stream time
    if zero:
        ranks.one("compute", "zero_grad_buffer", g, (), grad_e * mine, plan.grad_dtype, (opt,), stream="compute",
                  tags=OPT_STEP_TAG)


def host_sync_tags(t: Any, table: Table, rank: np.ndarray, tags: np.ndarray) -> np.ndarray | None:
    """The tag ids (a copy of ``tags``, int32 of shape (N,), ops in a Program's order: ranks ascending) with rule
    host-wait's tags (:mod:`schedsim.sim.host_wait`, scope ``stream`` on ``compute``, as ``kind: synchronize``
    writes them) on the ops a ``training:`` block's host synchronisations come before, or None where ``t`` asks
    for none: with ``get_batch_sync`` the first op of each microbatch's forward on the first and last (virtual)
    pipeline stage (Megatron's get_batch, ``broadcast_data``'s ``.cpu()``), with
    ``check_for_nan_in_loss_and_grad`` the op after each microbatch's forward on the last stage (loss_func's
    ``assert not loss.isnan()``). The forward's ops are those tagged ``phase: F``, ``pp_op: F`` and their
    ``stage`` and ``mb`` (:mod:`schedsim.lower.training`); a host wait both would put on one op is one."""
    from schedsim.tags import HOST_WAIT_ON_TAG, HOST_WAIT_SCOPE_TAG, HOST_WAIT_TAG

    if not (t.get_batch_sync or t.check_for_nan_in_loss_and_grad) or not len(tags):
        return None
    sets = table.tags.items
    stage = np.full(len(sets), -1, np.int64)
    mb = np.full(len(sets), -1, np.int64)
    for k, ts in enumerate(sets):
        d = dict(ts)
        if d.get("phase") == "F" and d.get("pp_op") == "F" and isinstance(d.get("stage"), int):
            stage[k], mb[k] = d["stage"], int(d.get("mb", 0))
    last = int(stage.max())
    tid = np.asarray(tags, np.int64)
    st = stage[tid]
    on = np.flatnonzero((st == 0) | (st == last)) if last >= 0 else np.zeros(0, np.int64)
    key = (np.asarray(rank, np.int64)[on] * (last + 1) + st[on]) * (int(mb.max()) + 1) + mb[tid[on]]
    marks: list[np.ndarray] = []
    if t.get_batch_sync:
        marks.append(on[np.unique(key, return_index=True)[1]])
    if t.check_for_nan_in_loss_and_grad:
        tail = on[len(key) - 1 - np.unique(key[::-1], return_index=True)[1]]  # each forward's last op
        tail = tail[st[tail] == last] + 1
        tail = tail[tail < len(tags)]
        marks.append(tail[np.asarray(rank)[tail] == np.asarray(rank)[tail - 1]])
    at = np.unique(np.concatenate(marks)) if marks else np.zeros(0, np.int64)
    if not len(at):
        return None
    out = np.array(tags, np.int32)
    wait = ((HOST_WAIT_TAG, 0.0), (HOST_WAIT_SCOPE_TAG, "stream"), (HOST_WAIT_ON_TAG, "compute"))
    new: dict[int, int] = {}
    for i in at.tolist():
        k = int(out[i])
        if k not in new:
            new[k] = table.tags(tuple(sorted({**dict(sets[k]), **dict(wait)}.items())))
        out[i] = new[k]
    return out
