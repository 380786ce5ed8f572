"""The GPU's power state under sustained GEMM load, for the profile's ``power:`` section (``schedsim calibrate``).

The GEMM table is timed in short bursts, at the boost clock. Under sustained tensor-core load the board's power
limiter lowers the SM clock, and every GEMM takes longer (:mod:`schedsim.gpu.power`). This measures how much
longer, as a function of the duty cycle, on rank 0's GPU, with one bf16 GEMM (default 4096×16384×4096, the
executor's uniform operands):

* back to back for ``seconds``: the median over the last 40 % of the window, over the burst time (the median of
  the GEMMs that start in the first 30 ms) is the multiplier at duty 1, and when the GEMMs first run slower
  by half that is the onset (:func:`onset_of`, the profile's ``power.onset_s``);
* for each duty d < 1: one GEMM between two events, the host waits for its end, then keeps the GPU idle for
  t·(1 − d)/d; the steady median over the burst time. Every GEMM after an idle gap pays a small extra cost
  that does not depend on the duty (+3 % on one H200 [evidence: power-duty]): the
  smallest ratio below duty 1 is taken as that cost and divided out (:func:`curve_from`), so the curve holds
  the power limiter alone, which is what the simulator applies.

A one-second idle precedes each level (the limiter forgets the previous one within a second on H200). ~12 s.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

DUTIES = (0.9, 0.75, 0.6, 0.45)


def curve_from(points: dict[float, float]) -> list[list[float]]:
    """The profile curve ``[[duty, multiplier], ...]`` from measured ``{duty: steady / burst}`` (duty 1 is back
    to back). Below duty 1 every ratio holds the cost of a GEMM after an idle gap times the limiter's slowdown
    (≥ 1), so the smallest of them bounds the gap cost from above: it is divided out of every duty < 1, and
    the duties below the one that read it are dropped (their excess over it is a longer gap's cost, not the
    limiter's). Multipliers are clipped to ≥ 1 and made non-decreasing in duty; points up to the last at 1.0
    collapse into one.

    A ratio that is not a positive finite number (0 where a level's GEMMs read no time, NaN where a level had
    none) is not a measurement: it is left out, as a duty never reached. No such point left: ``[]`` (no curve,
    the profile then applies no slowdown).

    Source: the lowest duty's ratio was the divisor until one H100 calibration read it above the next duty's,
    which flattened the curve well below the two earlier H100 calibrations' (docs/validation.md, "model misses that
    are not host noise"); where the lowest duty reads the least, both rules agree.

    >>> curve_from({1.0: 1.163, 0.9: 1.156, 0.75: 1.065, 0.6: 1.028, 0.45: 1.03})
    [[0.6, 1.0], [0.75, 1.036], [0.9, 1.1245], [1.0, 1.163]]
    >>> curve_from({1.0: 1.163, 0.9: 1.156, 0.45: 0.0})
    [[0.9, 1.0], [1.0, 1.163]]
    """
    points = {d: r for d, r in points.items() if math.isfinite(r) and r > 0.0 and math.isfinite(d)}
    if not points:
        return []
    lows = [d for d in points if d < 1.0]
    gap_cost = 1.0
    if lows:
        least = min(lows, key=lambda d: (points[d], -d))  # on a tie the higher duty: fewer points dropped
        gap_cost = points[least]
        points = {d: r for d, r in points.items() if d >= least}
    adj = sorted((d, max(1.0, r / gap_cost if d < 1.0 else r)) for d, r in points.items())
    out: list[list[float]] = []
    best = 1.0
    for d, r in adj:
        best = max(best, r)
        out.append([round(d, 4), round(best, 4)])
    last_one = max((i for i, (_, r) in enumerate(out) if r == 1.0), default=0)
    return out[last_one:]


def onset_of(at: list[float], dur: list[float], burst: float, steady: float, window: int = 5) -> float | None:
    """Seconds from the first of back-to-back GEMMs (start times ``at``, durations ``dur``, seconds) until the
    median of ``window`` consecutive GEMMs first exceeds the burst time by half the steady slowdown
    (``steady`` = steady / burst); None when the steady slowdown is under 2 % (no onset to see).

    >>> onset_of([0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06], [1.0] * 4 + [1.2] * 3, 1.0, 1.2, window=3)
    0.04
    """
    if steady < 1.02 or len(dur) < window:
        return None
    limit = burst * (1 + (steady - 1) / 2)
    for i in range(len(dur) - window + 1):
        if statistics.median(dur[i:i + window]) > limit:
            return round(at[i + window // 2], 4)
    return None


def measure_power(torch: Any, dev: Any, log: Callable[[str], None], shape: tuple[int, int, int] = (4096, 16384, 4096),
                  seconds: float = 1.2) -> dict[str, Any]:
    """``{"shape", "burst_ms", "points": {duty: steady / burst}, "achieved": {duty: measured duty}, "curve"}``;
    times from CUDA events. Needs CUDA."""
    m, n, k = shape
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.rand(m, k, device=dev, dtype=torch.float32, generator=g).to(torch.bfloat16)
    b = torch.rand(k, n, device=dev, dtype=torch.float32, generator=g).to(torch.bfloat16)
    c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed() -> float:
        e0.record()
        torch.matmul(a, b, out=c)
        e1.record()
        e1.synchronize()
        return float(e0.elapsed_time(e1)) / 1e3

    for _ in range(5):
        timed()
    time.sleep(1.0)
    one = timed()
    count = max(8, int(seconds / one))
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
    torch.cuda._sleep(2_000_000)  # queue fills before the first GEMM starts
    for i in range(count):
        ev[i].record()
        torch.matmul(a, b, out=c)
    ev[count].record()
    torch.cuda.synchronize()
    dur = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(count)]
    at = [ev[0].elapsed_time(ev[i]) / 1e3 for i in range(count)]
    burst = statistics.median([d for t, d in zip(at, dur, strict=True) if t < 0.03] or dur[:3])
    points = {1.0: statistics.median(dur[int(0.6 * count):]) / burst}
    onset = onset_of(at, dur, burst, points[1.0])
    achieved = {1.0: 1.0}
    for duty in DUTIES:
        time.sleep(1.0)
        t0 = time.perf_counter()
        seq: list[tuple[float, float]] = []
        while (now := time.perf_counter() - t0) < seconds:
            d = timed()
            seq.append((now, d))
            stop = time.perf_counter() + d * (1 - duty) / duty
            while time.perf_counter() < stop:
                pass
        points[duty] = statistics.median(d for t, d in seq if t >= 0.6 * seconds) / burst
        achieved[duty] = sum(d for _, d in seq) / (time.perf_counter() - t0)
    curve = curve_from({round(achieved[d], 3): r for d, r in points.items()})  # at the duty each level reached
    log(f"[power] bf16 {m}x{n}x{k}: burst {burst * 1e3:.4f} ms; onset {onset}; sustained/burst " + ", ".join(
        f"duty {achieved[d]:.2f}: {r:.3f}" for d, r in sorted(points.items())) + f"; curve {curve}")
    return {"shape": [m, n, k], "burst_ms": burst * 1e3, "onset_s": onset,
            "points": {str(d): r for d, r in points.items()},
            "achieved": {str(d): v for d, v in achieved.items()}, "curve": curve}
