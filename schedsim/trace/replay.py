"""Replay an imported schedule (:mod:`schedsim.trace.to_schedule`) and ask what-ifs of it.

``schedsim replay DIR/schedule.yaml [--what-if 'nccl*0.5'] [--host-gaps 0] [--recost-comm]`` simulates the
schedule with the ``replay`` GPU model (recorded durations and launch times, no contention;
:mod:`schedsim.sim.engine`), holds it against the recorded times each op carries (tags ``start_us`` /
``end_us``), and, with a what-if, simulates the changed schedule and prints how each rank's makespan moves.

What-ifs (applied to the validated spec, op by op; :func:`what_if_spec`):

* ``PATTERN*FACTOR`` scales the recorded duration of the ops PATTERN names: ``nccl`` (NCCL kernels, collectives
  and send/recv), ``kernel`` (compute kernels), ``memcpy``, ``memset``, ``graph`` (ops of CUDA-graph launches),
  an op kind (``all_reduce``), or a glob on the kernel name (``*gemm*``, case-insensitive);
* ``host_gaps`` (``--host-gaps F`` or ``--what-if host_gaps=F``): a factor on every op's host time (``host_us``,
  and before a synchronisation the tag ``host_wait_before_us``; 0 drops the host gaps: a GPU-bound what-if). The
  host's waits in synchronisations are not host time: they follow the replayed GPU work;
* ``recost_comm``: collectives matched across ranks drop their recorded duration and take the profile's cost
  model; NCCL ops whose peers were not imported keep theirs, and so do those whose size the trace does not
  record (bytes 0: a kernel without ``In msg nelems``), each said in the output;
* ``max_connections=N`` (or ``CUDA_DEVICE_MAX_CONNECTIONS=N``, 1-32): replay with N hardware queues per rank:
  stream ``s`` of a rank (numbered by first launch) on queue ``s mod N``, and an op waiting for its stream
  predecessor or an event holds up the ops launched after it on its queue (host-device copies, on a copy engine,
  join no queue: :class:`schedsim.sim.replay._ReplayQueues`; rule hardware-queues of
  :mod:`schedsim.gpu.rules`; :func:`schedsim.sim.replay._run_replay`). The baseline replay has the queues
  the schedule's ``env`` declares (``CUDA_DEVICE_MAX_CONNECTIONS``, which ``import`` cannot read from a trace:
  write it into ``schedule.yaml`` for a run made with 1), else none: the recorded waits hold the run's. A false
  dependency of the recorded run that the import guessed from timing (no event rows) stays a dependency.

Makespan here is last end − first start over the ranks (as a trace's is), so the host time before the first
kernel does not count.
"""

from __future__ import annotations

import fnmatch
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from schedsim.errors import SpecError, printable
from schedsim.kinds import COMM_KINDS
from schedsim.sim.replay import GPU_GAP_TAG, HOST_WAIT_TAG
from schedsim.units import MAX_DURATION_US

__all__ = ["Connections", "HostGaps", "ReplayReport", "WhatIf", "parse_what_if", "replay_report", "what_if_spec"]


@dataclass(frozen=True)
class WhatIf:
    """One ``PATTERN*FACTOR`` scaling."""

    pattern: str
    factor: float


@dataclass(frozen=True)
class Connections:
    """``max_connections=N``: replay with ``CUDA_DEVICE_MAX_CONNECTIONS`` N (1-32)."""

    n: int


@dataclass(frozen=True)
class HostGaps:
    """``host_gaps=F``: the recorded host gaps times F (``--host-gaps F``; 0 drops them)."""

    factor: float


_CONNS = ("max_connections", "cuda_device_max_connections")
_HOST_GAPS = ("host_gaps",)
_KEY = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\s*")
_FIX = ("write e.g. 'nccl*0.5', 'kernel*0.8', 'memcpy*2', '*gemm**0.5' (factor >= 0), 'max_connections=1' or "
        "'host_gaps=0'")


def parse_what_if(text: str, file: str | None = None) -> WhatIf | Connections | HostGaps:
    """``'nccl*0.5'`` → ``WhatIf('nccl', 0.5)`` (the factor follows the last ``*``); ``'max_connections=1'`` (or
    ``CUDA_DEVICE_MAX_CONNECTIONS=1``) → ``Connections(1)``; ``'host_gaps=0'`` → ``HostGaps(0.0)``. Keys are
    case-insensitive; ``file`` (the schedule) names where the error is.

    Raises
    ------
    SpecError
        ``KEY=VALUE`` with a key that is none of these (naming the known keys); no ``*``, an empty pattern, or a
        factor that is not a finite number ≥ 0; a connection count that is not an integer 1-32 (CUDA's range).

    Examples
    --------
    >>> parse_what_if("nccl*0.5"), parse_what_if("*gemm**2")
    (WhatIf(pattern='nccl', factor=0.5), WhatIf(pattern='*gemm*', factor=2.0))
    >>> parse_what_if("max_connections=1"), parse_what_if("CUDA_DEVICE_MAX_CONNECTIONS=8")
    (Connections(n=1), Connections(n=8))
    >>> parse_what_if("host_gaps=0")
    HostGaps(factor=0.0)
    """
    key, eq, val = text.partition("=")
    if eq and "*" not in text and _KEY.fullmatch(key):
        k = key.strip().lower()
        if k in _CONNS:
            v = val.strip()
            if not (v.isdigit() and 1 <= int(v) <= 32):
                raise SpecError(f"--what-if {text!r}: CUDA_DEVICE_MAX_CONNECTIONS must be an integer 1-32",
                                file=file, path="--what-if",
                                fix="write e.g. 'max_connections=1' or 'max_connections=8'")
            return Connections(int(v))
        if k in _HOST_GAPS:
            f = _factor(val)
            if f is None:
                raise SpecError(f"--what-if {text!r}: host_gaps must be a factor >= 0", file=file, path="--what-if",
                                fix="write e.g. 'host_gaps=0' (drop the recorded host gaps) or 'host_gaps=0.5'")
            return HostGaps(f)
        raise SpecError(f"--what-if {text!r}: unknown what-if key {key.strip()!r}; the keys are max_connections "
                        "(or CUDA_DEVICE_MAX_CONNECTIONS) and host_gaps", file=file, path="--what-if", fix=_FIX)
    pat, sep, fac = text.rpartition("*")
    f = _factor(fac)
    if not sep or not pat or f is None:
        raise SpecError(f"--what-if {text!r}: not PATTERN*FACTOR, max_connections=N or host_gaps=F", file=file,
                        path="--what-if", fix=_FIX)
    return WhatIf(pat, f)


def _factor(text: str) -> float | None:
    """``text`` as a finite number >= 0, else None."""
    try:
        f = float(text)
    except ValueError:
        return None
    return f if 0.0 <= f < float("inf") else None


def _category(op: Any) -> str:
    tags = op.tags or {}
    if op.kind in COMM_KINDS or "nccl" in tags:
        return "nccl"
    if op.kind == "memcpy":
        return "memcpy"
    if "memset" in tags:
        return "memset"
    return "kernel"


def _matches(op: Any, w: WhatIf) -> bool:
    p = w.pattern.lower()
    tags = op.tags or {}
    if p in (_category(op), op.kind, str(tags.get("nccl", ""))) or (p == "graph" and "graph" in tags):
        return True
    name = str(tags.get("kernel", "")).lower()
    return bool(name) and fnmatch.fnmatchcase(name, p)


def what_if_spec(spec: Any, scales: list[WhatIf], host_gaps: float = 1.0,
                 recost_comm: bool = False, file: str | None = None) -> tuple[Any, list[str]]:
    """The spec with the what-ifs applied, and one line per change (what, how many ops, recorded µs before →
    after, summed over ranks).

    Raises
    ------
    SpecError
        A pattern that names no op, or a factor that takes an op's time past :data:`schedsim.units.MAX_DURATION_US`.
    """
    ops = list(spec.ops)
    lines: list[str] = []
    for w in scales:
        n = 0
        before = after = 0.0
        for i, op in enumerate(ops):
            if op.duration_us is not None and _matches(op, w):
                n += 1
                before += op.duration_us
                after += op.duration_us * w.factor
                _check_scaled(op, "duration_us", op.duration_us * w.factor, "--what-if", file)
                ops[i] = op.model_copy(update={"duration_us": op.duration_us * w.factor})
        if not n:
            raise SpecError(f"{w.pattern}*{w.factor:g}: no op with a recorded duration matches {w.pattern!r}",
                            file=file, path="--what-if",
                            fix="use nccl, kernel, memcpy, memset, an op kind or a glob on the kernel name ('*gemm*')")
        lines.append(f"{w.pattern}*{w.factor:g}: {n} ops, {before:,.1f} µs -> {after:,.1f} µs of GPU time")
    if host_gaps != 1.0:
        tot = sum(op.host_us + (op.tags or {}).get(HOST_WAIT_TAG, 0.0) for op in ops)
        ops = [_scale_host(op, host_gaps) for op in ops]
        for op in ops:
            _check_scaled(op, "host_us", op.host_us + (op.tags or {}).get(HOST_WAIT_TAG, 0.0), "--host-gaps", file)
        lines.append(f"host gaps x{host_gaps:g}: {tot:,.1f} µs -> {tot * host_gaps:,.1f} µs of host time "
                     "(waits in host synchronisations excluded: they follow the GPU)")
    if recost_comm:
        # an imported NCCL op of size 0 is one whose trace recorded no size (its kernel had no 'In msg nelems':
        # NCCL launches no kernel for an empty collective); timed by the profile it would be a 0-byte one, so it
        # keeps its recorded time, with every member of its name (the same collective on the other ranks)
        unsized = {op.name for op in ops if op.kind in COMM_KINDS and op.duration_us is not None
                   and not op.size_bytes()}
        n = kept = blind = 0
        for i, op in enumerate(ops):
            if op.kind in COMM_KINDS and op.duration_us is not None and op.name in unsized:
                blind += 1
            elif op.kind in COMM_KINDS and op.duration_us is not None:
                ops[i] = op.model_copy(update={"duration_us": None})
                n += 1
            elif "nccl" in (op.tags or {}):
                kept += 1
        kept_txt = f"; {kept} NCCL ops whose peers were not imported keep their recorded duration" if kept else ""
        if blind:
            kept_txt += f"; {blind} whose size the trace does not record keep their recorded duration"
        lines.append(f"collectives re-costed with the profile: {n} ops{kept_txt}")
    return spec.model_copy(update={"ops": ops}), lines


def _check_scaled(op: Any, field: str, value: float, option: str, file: str | None) -> None:
    """Refuse a what-if whose factor takes ``op``'s ``field`` (µs) out of an op time's valid range: past
    :data:`schedsim.units.MAX_DURATION_US` (the spec's bound on ``duration_us``), or not finite.

    Raises
    ------
    SpecError
        ``value`` is not finite or exceeds the bound (exit 2), naming the op and the option.
    """
    if not value <= MAX_DURATION_US:  # also NaN
        raise SpecError(f"op {printable(op.name, 80)}: {field} times the factor is {value:g} µs, past an op's "
                        f"limit of {MAX_DURATION_US:g} µs", file=file, path=option,
                        fix=f"pass a smaller {option} factor")


def _scale_host(op: Any, f: float) -> Any:
    """``op`` with its host time (``host_us`` and the time before a synchronisation) times ``f``."""
    tags = op.tags or {}
    if HOST_WAIT_TAG in tags:
        new_tags = {**tags, HOST_WAIT_TAG: tags[HOST_WAIT_TAG] * f}
        return op.model_copy(update={"host_us": op.host_us * f, "tags": new_tags})
    return op.model_copy(update={"host_us": op.host_us * f}) if op.host_us else op


@dataclass(frozen=True)
class ReplayReport:
    """A replay held against the recorded run.

    Attributes
    ----------
    trace_makespan_s, replay_makespan_s : float
        Last end − first start over all ranks (recorded, replayed).
    error : float
        replay / trace − 1.
    start_error_median : float
        Median over ops of |replay start − recorded start| (each from its first start) / trace makespan.
    per_rank_s : dict[int, float]
        Each rank's replayed last end − the first start of any rank.
    """

    trace_makespan_s: float
    replay_makespan_s: float
    error: float
    start_error_median: float
    per_rank_s: dict[int, float]


def replay_report(tl: Any, file: str | None = None) -> ReplayReport:
    """Hold a replayed Timeline against the recorded ``start_us`` / ``end_us`` tags of its ops.

    Raises
    ------
    SpecError
        The timeline's ops carry no recorded times (not a schedule written by ``schedsim import``), or a recorded
        ``start_us`` / ``end_us`` / ``host_wait_before_us`` / ``gpu_gap_us`` tag is not a finite number.
    """
    spans = [s for s in tl.spans if "start_us" in (s.tags or {})]
    if not spans:
        raise SpecError("the schedule's ops carry no recorded start_us/end_us tags", file=file,
                        fix="replay a schedule written by `schedsim import kineto|nsys FILES --out DIR`")
    for s in spans:
        for tag in ("start_us", "end_us", *(t for t in (HOST_WAIT_TAG, GPU_GAP_TAG) if t in s.tags)):
            v = s.tags.get(tag)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise SpecError(f"op {printable(s.name, 80)}: recorded tag {tag} is {printable(repr(v), 40)}, not a "
                                "finite number of µs", file=file, path=f"tags.{tag}",
                                fix="replay the schedule.yaml and schedule.ops.json that `schedsim import` wrote, "
                                "unedited (or re-import the trace)")
    rec0 = min(s.tags["start_us"] for s in spans) * 1e-6
    rec1 = max(s.tags["end_us"] for s in spans) * 1e-6
    rep0 = min(s.start_s for s in tl.spans)
    rep1 = max(s.end_s for s in tl.spans)
    trace_ms, replay_ms = rec1 - rec0, rep1 - rep0
    errs = [abs((s.start_s - rep0) - (s.tags["start_us"] * 1e-6 - rec0)) for s in spans]
    per_rank: dict[int, float] = {}
    for s in tl.spans:
        per_rank[s.rank] = max(per_rank.get(s.rank, 0.0), s.end_s - rep0)
    return ReplayReport(trace_ms, replay_ms, replay_ms / trace_ms - 1.0 if trace_ms > 0 else 0.0,
                        statistics.median(errs) / trace_ms if trace_ms > 0 else 0.0, per_rank)
