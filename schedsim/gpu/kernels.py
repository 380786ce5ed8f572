"""Kernel sizing for the ``waves`` GPU model (rules of :mod:`schedsim.gpu.rules`): how many CTAs a kernel
launches (:func:`kernel_ctas`), its last wave's share (:func:`kernel_tail`), how a kernel's work splits over
its waves (:func:`split_work`), and the boost of a memory-bound kernel (:func:`mem_boost`).
"""

from __future__ import annotations

import math

import numpy as np

from schedsim.gpu.cost import CostModel, peak_of
from schedsim.graph.ops import COMM, Op, resource_of
from schedsim.hardware.profile import HardwareProfile
from schedsim.kinds import KINDS

__all__ = ["MEM_WAVES", "MAX_POOLED_CTAS", "BYTES_PER_CTA", "mem_boost", "kernel_ctas", "kernel_tail", "split_work"]

#: Most waves of a memory-bound kernel (rule hbm-share): the granularity at which it takes SMs as they free up (more
#: waves cost the loop more events and change the end by at most a wave's time: 8 made a 1M-op schedule of
#: 50 MB adds beside GEMMs simulate in 5.4 s against 3.9 s with 4 and 2.3 s with 1, this VM).
MEM_WAVES = 4


#: Most CTAs of a ``repeat`` kernel's launches pooled into one kernel (:func:`kernel_ctas`): the loops count CTAs
#: in int32.
MAX_POOLED_CTAS = 1 << 24


#: Bytes moved per CTA of a non-GEMM kernel (rule cta-count): an estimate, not measured.
BYTES_PER_CTA = 65536.0


def mem_boost(profile: HardwareProfile, sms: int) -> float:
    """Rule hbm-share's β: how many times its full-GPU speed a memory-bound CTA can run on few SMs, SMs ·
    ``gpu.sm_stream_GBps`` / ``gpu.hbm_GBps``, at least 1 (1 when the profile has no ``sm_stream_GBps``)."""
    g = profile.gpu
    return 1.0 if not g.sm_stream_GBps else max(1.0, sms * g.sm_stream_GBps / g.hbm_GBps)


def kernel_ctas(op: Op, cost: CostModel, sms: int) -> tuple[int, int, int]:
    """``(ctas, waves, width)`` of a compute op (rule cta-count), over all ``repeat`` kernels.

    ``waves`` = repeat · ceil(CTAs of one kernel / sms): the solo time is split evenly over them; a kernel
    narrower than the GPU (or one whose launches would pool past :data:`MAX_POOLED_CTAS` CTAs) keeps one
    launch's CTAs and waves, each CTA lasting all its launches. ``width``: 0 for a compute-bound kernel, else
    (memory-bound, rule hbm-share) the SMs one kernel holds alone, min(CTAs, sms); a memory-bound kernel of more CTAs
    than SMs fills its waves, so that alone it takes its solo time. A ``compute`` op of unknown grid (given
    ``duration_us``, or FLOP without bytes) is one wave of sms − ``nccl.sms_per_collective`` CTAs (at least 1):
    room for one NCCL kernel beside it (rule cta-count). A kernel of more than :data:`MAX_POOLED_CTAS` CTAs counts as
    that many (in whole waves): it fills the GPU for its whole solo time either way, and the loops count CTAs
    in int32. A collective (only one of one rank runs on SMs, rule one-rank-collective) is the memory-bound kernel of
    its copy: 2 × ``nbytes`` moved.
    """
    if resource_of(op.kind) == COMM:
        op = Op(op.name, op.rank, "compute", op.stream, op.seq, nbytes=2.0 * op.nbytes, dtype=op.dtype,
                repeat=op.repeat)
    if KINDS[op.kind].cost == "gemm":
        measured = cost.measured_ctas(op)  # the grid the profile recorded, run in waves as it is
        one = measured if measured is not None else cost.gemm_ctas(op)  # else tiles times a split-K factor
        if measured is None:
            if -(-op.m * op.batch // 128) * -(-op.n // 128) < sms:
                one = min(one, sms)  # less than a wave of output tiles (split-K regime): one wave
            else:  # the tile width is unknown, so is the last wave's size: the kernel fills its waves
                one = -(-one // sms) * sms
        per_sm = cost.ctas_per_sm(op)
        if per_sm > 1:  # several CTAs fit on one SM: the kernel holds ceil(ctas / per_sm) SMs' worth of slots
            one = -(-one // per_sm)
        # else one CTA per output tile, run in waves (cuBLAS's grid for these shapes, 2xH200 probes)
        mem = 0
    elif op.duration_s is not None or not op.nbytes:  # a kernel of unknown grid: one wave beside one NCCL kernel
        one, mem = max(1, sms - min(cost.profile.nccl.sms_per_collective, sms)), 0
    else:
        g = cost.profile.gpu
        bound = not op.flops or op.nbytes / (g.hbm_GBps * 1e9) >= op.flops / (
            peak_of(g, op.dtype, cost.profile.name) * 1e12 * g.gemm_efficiency)
        one = max(1, min(sms * (MEM_WAVES if bound else 1), math.ceil(op.nbytes / BYTES_PER_CTA)))
        if bound and one > sms:  # whole waves: a lone kernel's partial last wave would run boosted (rule hbm-share)
            one = -(-one // sms) * sms
        mem = min(one, sms) if bound else 0
    if one > MAX_POOLED_CTAS:  # a kernel of past 2**24 CTAs (m = n = 2**40: 2**66 tiles) fills the GPU in whole
        one = max(sms, MAX_POOLED_CTAS // sms * sms)  # waves all the same: as many as the int32 loops count
    waves = -(-one // sms)
    if op.repeat > 1 and one >= sms and one * op.repeat <= MAX_POOLED_CTAS:
        return one * op.repeat, waves * op.repeat, mem  # the launches' waves one after another
    # one kernel's CTAs, each lasting repeat times longer: a kernel narrower than the GPU launched back to back
    # holds its SMs for all its launches (pooled, their CTAs would run side by side), and a pool past
    # MAX_POOLED_CTAS would overflow the loops' int32 counts
    return one, waves, mem


def kernel_tail(op: Op, cost: CostModel, sms: int) -> tuple[int, float]:
    """``(ctas, seconds)`` of GEMM ``op``'s second kernel (rule split-k), ``(0, 0.0)`` when it has none.

    The profile's ``gemm.reduce`` row (:meth:`schedsim.gpu.cost.CostModel.reduce_kernel`): its SM slots (grid over
    CTAs per SM), capped at one wave of ``sms``, each lasting the kernel's time alone (:func:`split_work` bounds
    it by the op's time); none for ``repeat`` > 1 (its kernels run as one job).
    """
    if KINDS[op.kind].cost != "gemm" or op.repeat != 1:
        return 0, 0.0
    red = cost.reduce_kernel(op)
    if red is None:
        return 0, 0.0
    return min(red[0], sms), red[1]


def split_work(work, tail_s):
    """``(main_s, tail_s)``: a GEMM op's ``work`` (seconds; a float or a float64 array) split between its main
    kernel and its reduction kernel (rule split-k), which together take ``work``. The reduction keeps its measured
    ``tail_s`` up to half of ``work`` (a row longer than that, or a GEMM a rule made shorter, such as a graph node
    from L2, would otherwise run the op past its own time).

    >>> [float(x) for x in split_work(10.0, 2.0) + split_work(3.0, 1.824)]
    [8.0, 2.0, 1.5, 1.5]
    """
    tail = np.minimum(tail_s, 0.5 * np.asarray(work))
    return work - tail, tail
