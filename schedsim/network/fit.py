"""Per-tier timing figures fitted to nccl-tests logs (``schedsim calibrate --from-nccl-tests``).

NCCL chooses an (algorithm, protocol) per size with its own tuning constants (:mod:`schedsim.network.tuning`);
what a log measures is how long that choice took on this machine. So each row of a log is assigned to the
(algorithm, protocol) NCCL runs at its size on its group, and per (tier, algorithm, protocol) two figures are
fitted by least squares of relative error over those rows (a row's time:
:attr:`~schedsim.network.nccl_tests.NcclTestsRow.time_us`):

* ``hw_latency_us``: the tier's per-step latency (NCCL's ``hwLatencies[tier][algo][proto]``), and
* ``bw_factor``: measured over NCCL's bus bandwidth of that (algorithm, protocol) on groups the tier bounds.
  A factor, so that it carries to other group shapes as NCCL's own bandwidth does (on 2 nodes NCCL doubles
  NVLS-tree's network share and caps it per channel by 1, 2 or 4+ nodes; a GB/s fitted on 2 nodes would
  overrate 4: NVIDIA/nccl-tests#309's 2-node log put NVLS-tree at 460.6 GB/s, 20 % too fast on its 4-node log).

NCCL's time (``ncclTopoGetAlgoTime``) is affine in both, given the choice: ``t = c0 + c_h · h + c_u / f``
(the tree correction and the ring plateau scale ``c_h`` and ``c_u``; NVLS-tree's pipeline fill, which takes
NCCL's chunk and network speed and neither figure, is in ``c0``; the coefficients are read off the model
itself, :meth:`schedsim.network.NcclNetwork.timed_with`). A row is timed as a prediction times it: at its own
size or, where the same choice runs faster there, at its next channel step or tree correction bucket
(:meth:`~schedsim.network.NcclNetwork.timed_size`, picked with the profile's figures before the fit: the
three-point solve needs one affine time per row, and the least of several is not affine, so a fit that moves the
figures far enough to change which size is fastest leaves that row timed at the old one). One-node logs fit the
scale-up tier; logs over several nodes fit the NICs' tier (``nics.timing``: the network hop's latency and the bus
bandwidth of groups across nodes) given the scale-up tier, which is fitted first when the same logs hold one-node
runs.

An (algorithm, protocol) whose rows do not separate the two figures (fewer than two sizes, or sizes all
latency-bound) gets its latency only; one no row used is not written (NCCL's constants stay).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedsim.kinds import KINDS

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from schedsim.hardware.profile import HardwareProfile
    from schedsim.network.nccl_tests import NcclTestsLog

__all__ = ["FittedFigure", "fit_tier_timing", "fit_profile", "fit_transport_latency", "fit_relative",
           "logs_from_sweep"]

#: Rows up to this size (B) fit a transport's latency (:func:`fit_transport_latency`): NCCL runs them on LL with
#: one channel, so their time is latency (published 2 x 8 H100 logs: a few µs of bandwidth term at 4 KiB).
TRANSPORT_FIT_MAX_BYTES = 4096


#: A bandwidth factor is fitted only where some row's bandwidth term (at the model's factor) is at least this share
#: of its time. The factor's relative error is the rows' timing noise over their largest share, and its effect on
#: a row's time that noise times the row's share over the largest; with every row far below (latency-bound) a
#: microsecond of noise becomes the bandwidth: an 8 B and a 16 B all_reduce over 4 ranks at 20.0 and 21.0 µs
#: (shares near 1e-4) fitted h200's ring/LL factor to 0.002, a 1 KiB to 64 KiB all_reduce on 4 ranks 36.7 µs for
#: 19.2 to 22.3. 5 %: tree/LL up to 8 KiB across 2 nodes reaches 6.7 % (tests/network/test_nccl_versions.py).
BANDWIDTH_SHARE_MIN = 0.05


@dataclass(frozen=True)
class FittedFigure:
    """Fitted figures of one (tier, algorithm, protocol): ``hw_latency_us`` (µs per step), ``bw_factor``
    (over NCCL's bus bandwidth; None where the rows do not constrain it), over ``rows`` rows with ``rms_pct``
    root-mean-square relative error (percent) of the fitted model on them."""

    tier: str
    key: str
    hw_latency_us: float
    bw_factor: float | None
    rows: int
    rms_pct: float


@dataclass(frozen=True)
class _Obs:
    """One row: time ``t`` (µs) = c0 + ch · h + cu / f; ``cb`` = cu / f at the model's factor now."""

    t: float
    c0: float
    ch: float
    cu: float
    cb: float


def logs_from_sweep(sweep: Mapping[str, Sequence[Mapping[str, Any]]], nranks: int, source: str, *, nodes: int = 1,
                    nccl_version: str | None = None) -> list[NcclTestsLog]:
    """``schedsim calibrate``'s collective sweep as the nccl-tests logs this module fits (one input for both
    ``calibrate --from-nccl-tests`` and ``calibrate`` on several GPUs): one log per collective of ``sweep``
    (:func:`executor.calibrate_comm._sweep_collectives`: kind -> rows of ``size`` B, ``count``, ``type``,
    ``redop``, ``root``, ``time_us`` (the slowest rank's), ``algbw`` and ``busbw`` GB/s, ``wrong``), over
    ``nranks`` ranks on ``nodes`` nodes, out-of-place only; ``source`` names it in notes. ``p2p_unbatched`` (a lone
    isend / irecv, no nccl-tests test) is left out, and so are rows of no positive time.

    >>> logs = logs_from_sweep({"all_reduce": [{"size": 1024, "count": 256, "type": "float", "redop": "sum",
    ...     "root": -1, "time_us": 10.0, "algbw": 0.1024, "busbw": 0.1024, "wrong": 0}]}, 2, "sweep")
    >>> (logs[0].collective, logs[0].nranks, logs[0].nodes, logs[0].rows[0].oop_time_us)
    ('all_reduce', 2, 1, 10.0)
    """
    from schedsim.network.nccl_tests import NcclTestsLog, NcclTestsRow

    out = []
    for kind, rows in sweep.items():
        if kind == "p2p_unbatched":
            continue
        got = [NcclTestsRow(int(r["size"]), int(r["count"]), str(r.get("type", "float")), r.get("redop"),
                            r.get("root"), float(r["time_us"]), float(r["algbw"]), float(r["busbw"]), r.get("wrong"))
               for r in rows if float(r["time_us"]) > 0]
        if got:
            out.append(NcclTestsLog(kind, nranks, got, source=f"{source} ({kind})", nodes=nodes,
                                    nccl_version=nccl_version))
    return out


def _tuned(kind: str) -> bool:
    """Whether ``kind`` is a collective that NCCL's tuning model times (its entry's ``nccl``, :data:`KINDS`)."""
    info = KINDS.get(kind)
    return info is not None and bool(info.nccl)


def _ranks(nranks: int, nodes: int, gpn: int) -> tuple[int, ...] | None:
    """Ranks of a log's group on a profile of ``gpn`` GPUs per node: ``nranks / nodes`` per node, in order."""
    if nodes < 1 or nranks % nodes or nranks // nodes > gpn or nranks < 2:
        return None
    per = nranks // nodes
    return tuple(node * gpn + g for node in range(nodes) for g in range(per))


def _observations(profile: HardwareProfile, logs: list[NcclTestsLog], tier: str
                  ) -> tuple[dict[str, list[_Obs]], list[str]]:
    """Rows of ``logs`` for ``tier`` (``scale_up``: one-node logs; ``nics``: logs across nodes), by the
    ``algo/proto`` NCCL runs them with, as affine observations; and notes on logs left out."""
    from schedsim.network import NcclNetwork

    net = NcclNetwork(profile)
    gpn = profile.topology.gpus_per_node
    out: dict[str, list[_Obs]] = {}
    notes: list[str] = []
    for log in logs:
        nodes = log.nodes or 1
        if (tier == "nics") != (nodes > 1):
            continue
        kind = str(log.collective)
        ranks = _ranks(int(log.nranks or 0), nodes, gpn)
        tuned = _tuned(kind)
        if not tuned or ranks is None:
            why = ("NCCL's tuning model times no such collective (send/recv based)" if not tuned
                   else f"{log.nranks} ranks over {nodes} node(s) do not fit {gpn} GPUs per node")
            notes.append(f"{log.source}: {kind} left out of the fit: {why}")
            continue
        for r in log.rows:
            t_us = r.time_us
            if t_us <= 0:
                continue
            got = net.collective(kind, r.size_bytes, ranks)
            if got is None:
                notes.append(f"{log.source}: {kind} on {len(ranks)} ranks is timed by the profile's tables or "
                             "links, not the NCCL model: left out of the fit")
                break
            a, p = got.algo, got.proto
            key = f"{a}/{p}"
            now = (profile.topology.scale_up if tier == "scale_up" else profile.topology.nics)
            old = now.timing.get(key) if now is not None else None
            b1 = old.bw_factor if old is not None and old.bw_factor is not None else 1.0
            b2 = 2.0 * b1
            # timed at the size whose time predict gives the row (its own, or the next channel step's)
            m = net.timed_size(kind, r.size_bytes, ranks, a, p)
            f0 = net.timed_with(kind, m, ranks, a, p, (tier, key, 0.0, b1))
            f1 = net.timed_with(kind, m, ranks, a, p, (tier, key, 1.0, b1))
            f2 = net.timed_with(kind, m, ranks, a, p, (tier, key, 0.0, b2))
            cu = (f0 - f2) / (1.0 / b1 - 1.0 / b2)
            out.setdefault(key, []).append(_Obs(t_us, f0 - cu / b1, f1 - f0, cu, cu / b1))
    return out, notes


def _solve(obs: list[_Obs]) -> tuple[float, float | None]:
    """(h, f) minimising sum(((c0 + ch h + cu / f) - t) / t)^2 with h >= 0, f > 0; f None where the rows do
    not constrain it (then h alone, at the model's factor now): fewer than two distinct bandwidth shares, or
    every row latency-bound (its bandwidth term at the model's factor now below :data:`BANDWIDTH_SHARE_MIN` of
    its time)."""
    def lsq1(xs: list[float], ys: list[float]) -> float:
        den = sum(x * x for x in xs)
        return sum(x * y for x, y in zip(xs, ys, strict=True)) / den if den > 0 else 0.0

    w = [1.0 / o.t for o in obs]
    y = [(o.t - o.c0) * wi for o, wi in zip(obs, w, strict=True)]
    xh = [o.ch * wi for o, wi in zip(obs, w, strict=True)]
    xu = [o.cu * wi for o, wi in zip(obs, w, strict=True)]
    shh, suu, shu = sum(a * a for a in xh), sum(b * b for b in xu), sum(a * b for a, b in zip(xh, xu, strict=True))
    sy_h = sum(a * b for a, b in zip(xh, y, strict=True))
    sy_u = sum(a * b for a, b in zip(xu, y, strict=True))
    det = shh * suu - shu * shu
    bound = max(o.cb / o.t for o in obs) >= BANDWIDTH_SHARE_MIN
    if bound and len({round(o.cu / o.t, 12) for o in obs}) >= 2 and det > 1e-12 * max(shh * suu, 1e-300):
        h = (sy_h * suu - sy_u * shu) / det
        u = (shh * sy_u - shu * sy_h) / det
        if h < 0:
            h, u = 0.0, lsq1(xu, y)
        if u > 0:
            return h, 1.0 / u
    y0 = [(o.t - o.c0 - o.cb) * wi for o, wi in zip(obs, w, strict=True)]
    return max(0.0, lsq1(xh, y0)), None


def fit_tier_timing(profile: HardwareProfile, logs: list[NcclTestsLog], tier: str
                    ) -> tuple[list[FittedFigure], list[str]]:
    """Fit ``tier`` (``scale_up`` or ``nics``) of ``profile`` to ``logs`` (module doc).

    Returns
    -------
    (figures, notes)
        One :class:`FittedFigure` per (algorithm, protocol) the logs' rows run; notes on logs left out.
    """
    from schedsim.network import NcclNetwork

    by_key, notes = _observations(profile, logs, tier)
    figs: list[FittedFigure] = []
    for key, obs in sorted(by_key.items()):
        h, b = _solve(obs)
        if not math.isfinite(h) or (b is not None and not math.isfinite(b)):
            notes.append(f"{tier} {key}: no finite fit to its {len(obs)} rows; NCCL's constants kept")
            continue
        figs.append(FittedFigure(tier, key, h, b, len(obs), 0.0))
    # the error of the fitted figures, re-timed by the model itself
    fitted = apply_figures(profile, figs, "fit check")
    net = NcclNetwork(fitted)
    done: list[FittedFigure] = []
    for f in figs:
        errs = []
        for log in logs:
            nodes = log.nodes or 1
            if (tier == "nics") != (nodes > 1) or not _tuned(str(log.collective)):
                continue
            ranks = _ranks(int(log.nranks or 0), nodes, profile.topology.gpus_per_node)
            if ranks is None:
                continue
            for r in log.rows:
                t_us = r.time_us
                got = net.collective(str(log.collective), r.size_bytes, ranks) if t_us > 0 else None
                if got is not None and f"{got.algo}/{got.proto}" == f.key:
                    errs.append((got.seconds * 1e6 - t_us) / t_us)
        rms = 100.0 * math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else 0.0
        done.append(FittedFigure(f.tier, f.key, f.hw_latency_us, f.bw_factor, f.rows, rms))
    return done, notes


def apply_figures(profile: HardwareProfile, figs: list[FittedFigure], source: str) -> HardwareProfile:
    """``profile`` with ``figs`` written into ``topology.scale_up.timing`` / ``topology.nics.timing``
    (provenance ``fitted``, ``source`` naming the logs)."""
    from schedsim.hardware.profile import HardwareProfile

    d = profile.model_dump()
    for f in figs:
        tier = d["topology"][f.tier]
        tier.setdefault("timing", {})[f.key] = {
            "hw_latency_us": round(f.hw_latency_us, 4),
            "bw_factor": None if f.bw_factor is None else round(f.bw_factor, 5),
            "provenance": "fitted",
            "source": f"{source}: {f.rows} rows, rms error {f.rms_pct:.1f} %" if f.rms_pct else source}
    return HardwareProfile.model_validate(d)


def _with_logs_version(profile: HardwareProfile, logs: list[NcclTestsLog], notes: list[str]) -> HardwareProfile:
    """``profile`` with ``nccl.version`` set to the one NCCL version ``logs`` name, where it has none (a note
    says which); unchanged, with a note, for logs of several versions or one older than modelled, and where the
    profile states a release other than the logs' (its constants time the fit)."""
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.network.tuning import NCCL_VERSION, constants_for, newer_than_modelled, parse_nccl_version

    versions = sorted({log.nccl_version for log in logs if log.nccl_version})
    if not versions:
        return profile
    stated = profile.nccl.version
    if stated is not None:
        def same(v: str) -> bool:
            try:
                return parse_nccl_version(v) == parse_nccl_version(stated)
            except ValueError:  # a log's version that is none (an NcclTestsLog built by hand): not the same
                return False

        if not all(same(v) for v in versions):
            notes.append(f"the logs ran NCCL {', '.join(versions)}, the base profile states nccl.version {stated}: "
                         f"fitted with NCCL {stated}'s tuning constants; remove nccl.version from the base to fit "
                         "with the logs' release")
        return profile
    mine = f"{NCCL_VERSION} (the newest modelled)"
    if len(versions) > 1:
        notes.append(f"the logs ran NCCL {', '.join(versions)}: fitted with NCCL {mine}'s tuning constants; "
                     "fit one version's logs at a time, or set nccl.version in the base")
        return profile
    try:
        constants_for(versions[0])
    except ValueError as e:
        notes.append(f"the logs ran NCCL {versions[0]}: {e}; fitted with NCCL {mine}'s")
        return profile
    newer = newer_than_modelled(versions[0])
    notes.append(f"the logs ran NCCL {versions[0]}: " + (f"{newer} (nccl.version set)" if newer else
                                                         "its tuning constants choose and time (nccl.version set)"))
    d = profile.model_dump()
    d["nccl"]["version"] = versions[0]
    return HardwareProfile.model_validate(d)


def _with_logs_env(profile: HardwareProfile, logs: list[NcclTestsLog], notes: list[str]) -> HardwareProfile:
    """``profile`` with the NCCL settings every one of ``logs`` prints (:attr:`NcclTestsLog.nccl_env`:
    ``NCCL_MIN_CTAS`` and the others of :data:`schedsim.hardware.profile.NCCL_ENV_FIELDS`) in its ``nccl:``
    fields the profile leaves unset, so the fit times the run as it ran (a note says which); settings the logs
    disagree on, that the profile states otherwise, or that are no valid value are left, with a note."""
    from pydantic import ValidationError

    from schedsim.hardware.profile import NCCL_ENV_FIELDS

    upd: dict[str, object] = {}
    for key, fld in NCCL_ENV_FIELDS:
        values = {log.nccl_env.get(key) for log in logs}
        given = sorted(v for v in values if v is not None)
        if not given:
            continue
        if len(values) > 1:
            notes.append(f"{key}: the logs set {', '.join(given)}" + (" and some leave it unset" if None in values
                         else "") + f"; not applied (fit logs of one setting at a time, or set nccl.{fld})")
            continue
        have = getattr(profile.nccl, fld)
        value: object = given[0] if fld in ("algo", "proto") else (int(given[0]) if given[0].isdigit() else given[0])
        if have is not None:
            if str(have) != given[0]:
                notes.append(f"{key}: the logs ran {given[0]}, the base profile states nccl.{fld} {have}: fitted "
                             f"with the profile's")
            continue
        try:
            profile.nccl.model_validate({**profile.nccl.model_dump(), fld: value})
        except ValidationError:
            notes.append(f"{key}={given[0]} in the logs is no value NCCL takes for nccl.{fld}: not applied")
            continue
        upd[fld] = value
        notes.append(f"the logs ran {key}={given[0]}: nccl.{fld} set")
    if not upd:
        return profile
    return profile.model_copy(update={"nccl": profile.nccl.model_copy(update=upd)})


def _with_transport(profile: HardwareProfile, h: float) -> HardwareProfile:
    """``profile`` with ``topology.nics.transport_latency_us`` = ``h`` (it has ``topology.nics``)."""
    from schedsim.hardware.profile import HardwareProfile

    d = profile.model_dump()
    d["topology"]["nics"]["transport_latency_us"] = h
    return HardwareProfile.model_validate(d)


def fit_relative(obs: Sequence[tuple[float, float, float]]) -> float | None:
    """``h`` of ``t = t0 + c · h`` over ``obs`` (a ``(t, t0, c)`` per row, ``t`` > 0) by least squares of relative
    error, closed-form (the model is affine in ``h``): ``Σ c (t − t0) / t² / Σ (c / t)²``; unbounded (a caller
    bounds it). None where no row has ``c`` non-zero (no row, or a figure no row depends on).

    >>> fit_relative([(12.0, 10.0, 2.0), (24.0, 20.0, 4.0)])
    1.0
    """
    den = sum((c / t) ** 2 for t, _, c in obs)
    if not obs or den <= 0:
        return None
    return sum(c * (t - t0) / (t * t) for t, t0, c in obs) / den


def fit_transport_latency(profile: HardwareProfile, logs: list[NcclTestsLog]) -> tuple[float | None, int, float]:
    """``topology.nics.transport_latency_us`` fitted to the rows of ``logs`` across nodes up to
    :data:`TRANSPORT_FIT_MAX_BYTES`: ``t = t0 + c · h`` per row (``t0`` the model's time without it, ``c`` the
    network crossings of NCCL's choice, :func:`schedsim.network.net_crossings`, read off the model), ``h`` by least
    squares of relative error, at least 0; a row's time as
    :attr:`~schedsim.network.nccl_tests.NcclTestsRow.time_us`. ``profile`` needs ``topology.nics``.

    Returns
    -------
    (h µs, rows, rms %)
        ``h`` None, with 0 rows, where no row qualifies (no log across nodes reaches down to 4 KiB).
    """
    from schedsim.network import NcclNetwork

    zero, one = NcclNetwork(_with_transport(profile, 0.0)), NcclNetwork(_with_transport(profile, 1.0))
    gpn = profile.topology.gpus_per_node
    obs: list[tuple[float, float, float]] = []  # (t, t0, c)
    for log in logs:
        nodes = log.nodes or 1
        ranks = _ranks(int(log.nranks or 0), nodes, gpn)
        if nodes < 2 or ranks is None or not _tuned(str(log.collective)):
            continue
        for r in log.rows:
            t_us = r.time_us
            if t_us <= 0 or r.size_bytes > TRANSPORT_FIT_MAX_BYTES:
                continue
            a = zero.collective(str(log.collective), r.size_bytes, ranks, floor=False)
            b = one.collective(str(log.collective), r.size_bytes, ranks, floor=False)
            if a is not None and b is not None:
                obs.append((t_us, a.seconds * 1e6, (b.seconds - a.seconds) * 1e6))
    raw = fit_relative(obs)
    if raw is None:
        return None, 0, 0.0
    h = max(0.0, raw)
    rms = 100.0 * math.sqrt(sum(((t0 + c * h - t) / t) ** 2 for t, t0, c in obs) / len(obs))
    return h, len(obs), rms


def fit_profile(profile: HardwareProfile, logs: list[NcclTestsLog], source: str, *, transport: bool = False
                ) -> tuple[HardwareProfile, list[FittedFigure], list[str]]:
    """Fit the scale-up tier to the one-node logs, then the NICs' tier to the logs across nodes given it. With
    ``transport``, first ``topology.nics.transport_latency_us`` to the rows across nodes up to 4 KiB
    (:func:`fit_transport_latency`; a note gives it), which the NICs' per-(algorithm, protocol) figures are then
    fitted beside.

    NCCL chooses and estimates with the constants of the release that ran: where the logs name one NCCL version
    (:attr:`NcclTestsLog.nccl_version`) and ``profile`` has no ``nccl.version``, the fit and the returned
    profile take that version (:func:`schedsim.network.tuning.constants_for`); logs of several versions, or one
    not modelled, leave the profile's and say so in a note, as does a profile that states another release; a
    release newer than the newest modelled is set, and a note says whose constants stand in for it. The NCCL
    settings the logs print (``NCCL_MIN_CTAS``, ``NCCL_ALGO``, ...) are set the same way (:func:`_with_logs_env`).

    Returns
    -------
    (profile, figures, notes)
        ``profile`` with the fitted figures written (provenance ``fitted``, ``source`` naming the logs), the
        figures, and notes on what was left out.

    Raises
    ------
    ProfileError
        ``profile`` has no ``topology.scale_up`` (no NCCL model to fit).
    """
    from schedsim.errors import ProfileError

    if profile.topology.scale_up is None:
        raise ProfileError(f"profile {profile.name!r} has no topology.scale_up: there are no tier figures to fit",
                           fix="pass --base with a cluster topology (e.g. dgx_h100, h200)")
    figs: list[FittedFigure] = []
    notes: list[str] = []
    profile = _with_logs_version(profile, logs, notes)
    profile = _with_logs_env(profile, logs, notes)
    if transport and profile.topology.nics is not None:
        h, rows, rms = fit_transport_latency(profile, logs)
        if h is None:
            notes.append(f"no transport latency fitted: no log across nodes has rows up to {TRANSPORT_FIT_MAX_BYTES} B")
        else:
            profile = _with_transport(profile, round(h, 4))
            notes.append(f"topology.nics.transport_latency_us fitted: {h:.3f} us a network crossing ({rows} rows up to "
                         f"{TRANSPORT_FIT_MAX_BYTES} B, rms error {rms:.1f} %)")
    for tier in ("scale_up", "nics"):
        if tier == "nics" and not any((log.nodes or 1) > 1 for log in logs):
            continue
        if tier == "nics" and profile.topology.nics is None:
            notes.append("logs across nodes left out of the fit: the profile has no topology.nics to fit")
            continue
        got, why = fit_tier_timing(profile, logs, tier)
        notes += why
        if got:
            profile = apply_figures(profile, got, source)
            figs += got
    return profile, figs, notes
