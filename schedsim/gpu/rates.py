"""The rate functions of the ``waves`` GPU model (rules of :mod:`schedsim.gpu.rules`) and their tables.

Communication beside compute (:func:`comm_factor`, :func:`transfer_comm_rate`), batched p2p
(:func:`batch_rate`), memory-bound kernels sharing HBM (:func:`mem_rate`), the gain of filling a wave
(:func:`fill_gain`), copies on the copy engines (:func:`copy_rate`), and every rate tabulated for the
compiled loop (:class:`RateTables`, :func:`rate_tables`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedsim.gpu.rules import GpuRules

__all__ = ["COPY_ENGINES", "REVERSE_ENGINE", "TAIL_CAP", "MAX_TABLE", "RateTables", "batch_rate", "comm_factor",
           "copy_rate", "fill_gain", "fill_gain_columns", "mem_rate", "rate_tables", "transfer_comm_rate"]


def comm_factor(slowdown: float, compute_sms: int, free_for_compute: int) -> float:
    """Time multiplier of an NCCL transfer on a rank (rule nccl-sms): 1 + (slowdown − 1)·min(1, held / available).

    >>> comm_factor(3.5, 116, 116)
    3.5
    >>> comm_factor(3.5, 58, 116)
    2.25
    """
    if slowdown == 1.0 or compute_sms <= 0:
        return 1.0
    return 1.0 + (slowdown - 1.0) * min(1.0, compute_sms / max(1, free_for_compute))


def batch_rate(rules: GpuRules, nccl_resident: bool, copying: bool) -> float:
    """Rate (solo seconds done per second) of a batch of compute CTAs: / ``gemm_slowdown_beside_nccl`` while an
    NCCL kernel is resident (rule nccl-sms), / (1 + γ) while a copy runs. The loops multiply it by :func:`mem_rate`
    when the kernel is memory-bound (rule hbm-share) and by the kernel's :func:`fill_gain` while a compute kernel waits
    (rule wave-tail).

    >>> r = GpuRules(8, 8, 2, 3.0, 1.5, False, 1.0, 0.0, 0.5)
    >>> batch_rate(r, True, True) == 1.0 / 1.5 / 1.5
    True
    """
    new = 1.0
    if nccl_resident and rules.gemm_slowdown_beside_nccl != 1.0:
        new /= rules.gemm_slowdown_beside_nccl
    if copying and rules.compute_slowdown_with_copy:
        new /= 1.0 + rules.compute_slowdown_with_copy
    return new


def mem_rate(rules: GpuRules, load: float) -> float:
    """Rule hbm-share's factor on a memory-bound CTA's rate: min(β, 1 / ``load``), ``load`` = Σ over the GPU's resident
    memory-bound kernels of (SMs it holds / its full width, min(its CTAs, SMs)): the share of HBM they would
    take at full speed (1 for one kernel holding all it can hold), β = :attr:`GpuRules.mem_boost`.

    >>> r = GpuRules(132, 8, 2, 3.0, 1.5, False, 1.0, 0.0, 0.5, mem_boost=2.28)
    >>> mem_rate(r, 8 / 132), mem_rate(r, 1.0), mem_rate(r, 2.0)  # few SMs; alone on all; two full kernels
    (2.28, 1.0, 0.5)
    """
    f = 1.0 / load
    return f if f < rules.mem_boost else rules.mem_boost


#: Copy engines of a rank, as ``ktype - 2`` of the loop's kernel arrays (:mod:`schedsim.sim.waves_columns`):
#: 0 h2d, 1 d2h, 2 d2d.
COPY_ENGINES = 3


#: The engine whose busy state slows each engine down (the reverse PCIe direction; d2d has none).
REVERSE_ENGINE = (1, 0, -1)


#: the most of a wave rule wave-tail takes back (tail / τ is capped here: a kernel of a few µs does not run at 10×)
TAIL_CAP = 0.25


def fill_gain(tau: float, tail_s: float) -> float:
    """Rule wave-tail: the rate factor 1 / (1 − min(tail / τ, :data:`TAIL_CAP`)) of a compute kernel whose waves take
    ``tau`` seconds and whose ragged end is ``tail_s`` (:meth:`schedsim.gpu.cost.CostModel.wave_tail`), applied
    while every CTA of it is placed and a compute kernel waits for SMs; 1.0 without a tail or for a kernel of
    no time.

    >>> fill_gain(160e-6, 8e-6) == 1.0 / (1.0 - 0.05), fill_gain(10e-6, 8e-6) == 1.0 / 0.75, fill_gain(0.0, 8e-6)
    (True, True, 1.0)
    """
    if not tail_s or tau <= 0.0:
        return 1.0
    return 1.0 / (1.0 - min(tail_s / tau, TAIL_CAP))


def fill_gain_columns(ktau: np.ndarray, ktype: np.ndarray, tail_s: np.ndarray) -> np.ndarray:
    """:func:`fill_gain` per kernel (float64; 1.0 for kernels that are not compute), bit for bit; ``tail_s`` per
    kernel."""
    ktau = np.asarray(ktau, np.float64)
    tail_s = np.asarray(tail_s, np.float64)
    at = np.flatnonzero((np.asarray(ktype) == 0) & (ktau > 0.0) & (tail_s != 0.0))
    out = np.ones(len(ktau))
    out[at] = 1.0 / (1.0 - np.minimum(tail_s[at] / ktau[at], TAIL_CAP))  # the kernels it applies to only
    return out


def copy_rate(rules: GpuRules, compute_resident: bool, engine: int = 0, reverse_busy: bool = False) -> float:
    """Rate of a copy on copy engine ``engine`` (0 h2d, 1 d2h, 2 d2d): 1 / (1 + δ) while compute CTAs are
    resident (``copy_slowdown_with_compute``), times 1 / (1 + ρ) while the reverse direction's engine copies
    (``reverse_busy``; ρ = ``h2d_slowdown_beside_d2h`` for h2d, ``d2h_slowdown_beside_h2d`` for d2h).

    Source of ρ: pinned 256 MiB copies on one H200 ([evidence: copy-duplex], torch 2.11,
    ``benchmarks/probes/memory/copy_duplex.py``, [evidence: copy-duplex]): alone
    53-55 GB/s each way; started together, d2h took 4.4 % longer and h2d ran at 1/1.35 of its solo rate while
    d2h ran (the PCIe link carries ~92 GB/s both ways, not 2 × 54, and d2h keeps its rate). ``calibrate``
    measures both factors (``executor.calibrate_copy._measure_duplex``).

    >>> r = GpuRules(8, 8, 2, 3.0, 1.5, False, 1.0, 0.25, 0.5, h2d_beside_d2h=0.25)
    >>> copy_rate(r, True), copy_rate(r, False, 0, True), copy_rate(r, False, 1, True)
    (0.8, 0.8, 1.0)
    """
    d = rules.copy_slowdown_with_compute
    rate = 1.0 / (1.0 + d) if compute_resident and d else 1.0
    rho = (rules.h2d_beside_d2h, rules.d2h_beside_h2d, 0.0)[engine] if reverse_busy else 0.0
    return rate / (1.0 + rho) if rho else rate


def transfer_comm_rate(rules: GpuRules, compute_held: int, nccl_held: int) -> float:
    """Rate factor of a rank's NCCL transfers, 1 / :func:`comm_factor`, with ``compute_held`` SMs held by compute
    CTAs and ``nccl_held`` by NCCL kernels (rule nccl-sms)."""
    return 1.0 / comm_factor(rules.nccl_slowdown, compute_held, rules.sms - nccl_held)


#: Largest comm table (entries) the compiled loop takes: (sms + 1) · (sms // nccl_sms + 1), 8 MiB of float64.
#: Only a profile with thousands of SMs exceeds it; its runs use the Python loop (which evaluates lazily).
MAX_TABLE = 1 << 20


@dataclass(frozen=True)
class RateTables:
    """Every rate the compiled ``waves`` loop (:mod:`schedsim.sim._cwaves`) reads, tabulated from the rule
    functions of this module (the Python loop calls the same functions), so both apply the same numbers
    bit for bit.

    The loops add only the mechanics of rule nccl-sms: a transfer's rate is the minimum over its link ends of
    ``comm[rank's state] / (transfers on that end)`` (a NIC end, where the network shares links:
    ``comm[rank's state] × the flow's share``), times ``one_way`` for a send/recv whose reverse directions are
    idle.
    """

    comm: list[float]  # [held · (sms // nccl_sms + 1) + nccl_held // nccl_sms]: transfer_comm_rate(...)
    batch: list[float]  # [nccl_resident · 2 + copying]: batch_rate(...)
    copy: list[float]  # [(engine · 2 + reverse busy) · 2 + compute resident]: copy_rate(...)
    one_way: float
    mem_boost: float  # rule hbm-share's β (mem_rate)


def rate_tables(rules: GpuRules) -> RateTables | None:
    """Tabulate :func:`transfer_comm_rate`, :func:`batch_rate` and :func:`copy_rate` for every state of an
    ``rules.sms``-SM GPU (NCCL kernels hold multiples of ``nccl_sms`` SMs); None when the comm table would
    exceed :data:`MAX_TABLE` entries."""
    S, ns = rules.sms, rules.nccl_sms
    if (S + 1) * (S // ns + 1) > MAX_TABLE:
        return None
    comm = [transfer_comm_rate(rules, h, n * ns) for h in range(S + 1) for n in range(S // ns + 1)]
    batch = [batch_rate(rules, bool(n), bool(c)) for n in (0, 1) for c in (0, 1)]
    copy = [copy_rate(rules, bool(h), e, bool(b)) for e in range(COPY_ENGINES) for b in (0, 1) for h in (0, 1)]
    return RateTables(comm, batch, copy, rules.p2p_one_way, rules.mem_boost)
