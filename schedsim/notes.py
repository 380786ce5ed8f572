"""Warnings with a kind, printed one line per kind, and the guesses a prediction rests on.

* :class:`Note`: a warning's text (a ``str``, so every list of warnings keeps working) with its ``kind``.
  :func:`kind_of` gives any warning's kind: a Note's own, else the text with its particulars (quoted names, op ids
  ``name@rN``, numbers) blanked, so warnings that differ only in those are one kind.
* :func:`summarize`: one line per kind, in order of first appearance: the first warning's text and, when the kind
  came more than once, how many times (``check`` and ``predict`` print these; never silence, never a flood).
  A warning's first line is its text; a ``fix:`` line may follow.
* :func:`guesses`: where a predicted number depends on a guess rather than a measurement of the profile, one
  Note per kind of guess, naming how many ops it touches (``predict`` adds them to ``timeline.meta["warnings"]``):
  a GEMM of a dtype the profile's GEMM table has no rows for (timed by the roofline, ``gpu.peak_tflops`` times
  ``gpu.gemm_efficiency``, :mod:`schedsim.gpu.cost`), of a dtype without its own peak either (the fp32 peak then
  stands in), a collective of a kind and group size without a busbw table (alpha-beta on the link's
  latency and bandwidth), a collective NCCL's tuning model times (:mod:`schedsim.network`) on a topology whose
  figures are published or assumed, or whose ``nccl.version`` is newer than the newest release modelled (that
  release's tuning constants stand in), and a profile whose sections' sources mark values ASSUMED; and
  communication ops that move 0 bytes (no size was given: a pipeline block of ``stage`` op lists has no parameter
  count for its data-parallel all-reduce), whose time is no transfer's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schedsim.gpu.cost import CostModel
    from schedsim.graph.ops import Op
    from schedsim.hardware.profile import HardwareProfile
    from schedsim.lower.program import Program

__all__ = ["Note", "kind_of", "summarize", "guesses"]

#: How a guess's note begins (:func:`guesses`).
ESTIMATE = "an estimate, not a measurement: "
_PARTICULARS = re.compile(r"'[^']*'|\"[^\"]*\"|\S+@r\d+|\d+(?:[.,]\d+)*(?:e[+-]?\d+)?")


class Note(str):
    """A warning: its text, and ``kind`` (a short stable key, e.g. ``"gemm-roofline"``).

    >>> n = Note("3 matmul ops: roofline", "gemm-roofline")
    >>> n, n.kind, n == "3 matmul ops: roofline"
    ('3 matmul ops: roofline', 'gemm-roofline', True)
    """

    kind: str

    def __new__(cls, text: str, kind: str) -> Note:
        self = super().__new__(cls, text)
        self.kind = kind
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # pickles (sweep's worker processes) keep the kind
        return (Note, (str(self), self.kind))


def kind_of(w: str) -> str:
    """The kind of warning ``w``: a :class:`Note`'s ``kind``, else its first line with quoted names, op ids and
    numbers blanked.

    >>> kind_of("send 'a@r0' and recv 'b@r1' pair by order") == kind_of("send 'c@r2' and recv 'd@r3' pair by order")
    True
    """
    k = getattr(w, "kind", None)
    return k if isinstance(k, str) else _PARTICULARS.sub("…", str(w).split("\n", 1)[0])


def summarize(warnings: Iterable[str]) -> list[str]:
    """One warning per kind (:func:`kind_of`), in order of first appearance: ``warning: <its text>``, or
    ``warning (N of this kind, the first shown): <the first one's text>`` when there were several.

    >>> summarize(["op 'a' is late", "op 'b' is late", "no table"])
    ["warning (2 of this kind, the first shown): op 'a' is late", 'warning: no table']
    """
    first: dict[str, str] = {}
    count: dict[str, int] = {}
    for w in warnings:
        k = kind_of(w)
        first.setdefault(k, str(w))
        count[k] = count.get(k, 0) + 1
    return [(f"warning ({count[k]} of this kind, the first shown): " if count[k] > 1 else "warning: ") + first[k]
            for k in first]


def _note(message: str, fix: str, kind: str) -> Note:
    """A Note whose text is ``message`` and its ``fix`` line, worded as errors word theirs
    (:meth:`schedsim.errors.SchedsimError.format`)."""
    from schedsim.errors import SchedsimError

    return Note(SchedsimError(message, fix=fix).format(), kind)


def guesses(prog: Program, profile: HardwareProfile) -> list[Note]:
    """The guesses the prediction of the Program ``prog`` on ``profile`` (a HardwareProfile) rests on, one Note
    per kind (module docstring), each naming the ops (instances) it touches and the fix; empty when every GEMM
    and collective has measured rows.

    Raises nothing: a template the cost model cannot read is left to the simulator's own errors.
    """
    import numpy as np

    counts = np.bincount(prog.tmpl, minlength=len(prog.templates)).tolist() if prog.N else [0] * len(prog.templates)
    tables = {d for d, *_ in profile.gemm.entries}
    peaks = set(profile.gpu.peak_tflops)
    coll_tables = {(k, int(n)) for k, by_n in profile.collectives.tables.items() for n in by_n}
    roof: dict[str, int] = {}
    no_peak: dict[str, int] = {}
    alpha: dict[tuple[str, int], int] = {}
    nccl: dict[tuple[str, int], int] = {}
    empty: dict[str, int] = {}
    cost_box: list[CostModel] = []  # the CostModel, built on the first collective a topology may time
    from schedsim.kinds import COLLECTIVE_KINDS, KINDS, P2P_KINDS

    for t, n_inst in zip(prog.templates, counts, strict=True):
        if not n_inst:
            continue
        if KINDS[t.kind].cost == "gemm":
            dt = t.dtype or "fp32"
            if dt not in tables and not profile.gemm.shape_curve_from:
                roof[dt] = roof.get(dt, 0) + n_inst
                if dt not in peaks:
                    no_peak[dt] = no_peak.get(dt, 0) + n_inst
        elif (t.kind in COLLECTIVE_KINDS or t.kind in P2P_KINDS) and t.duration_s is None \
                and (len(t.group) if t.group else 2) > 1:  # a measured duration is no guess
            key = (KINDS[t.kind].table, len(t.group) if t.group else 2)
            into = nccl if _nccl_model_times(t, profile, cost_box) else alpha if key not in coll_tables else {}
            into[key] = into.get(key, 0) + n_inst
            if not t.nbytes:
                empty[t.kind] = empty.get(t.kind, 0) + n_inst
    out: list[Note] = []
    if empty:
        what = ", ".join(f"{n} {k}" for k, n in empty.items())
        out.append(_note(f"{what} op(s) move 0 bytes: timed as a launch that moves nothing (a pipeline block's "
                         "send/recv without `activation_bytes`, or its data-parallel all_reduce of `stage` op lists "
                         "without `grad_allreduce_bytes`, has no size to move)",
                         "give the size: `bytes:` on the op; in a pipeline block `activation_bytes` and "
                         "`grad_allreduce_bytes`, or a `transformer`", "comm-zero-bytes"))
    if roof:
        what = ", ".join(f"{n} {dt}" for dt, n in roof.items())
        out.append(_note(f"{ESTIMATE}{what} matmul op(s) have no measured GEMM rows on profile {profile.name!r}: "
                         f"timed by the roofline (gpu.peak_tflops x gemm_efficiency {profile.gpu.gemm_efficiency})",
                         "calibrate those dtypes, or choose a profile that measured them", "gemm-roofline"))
    if no_peak:
        what = ", ".join(f"{n} {dt}" for dt, n in no_peak.items())
        out.append(_note(f"{ESTIMATE}{what} matmul op(s) have no gpu.peak_tflops of their dtype on profile "
                         f"{profile.name!r}: the fp32 peak stands in", "add the dtype's peak to the profile",
                         "peak-fallback"))
    if alpha:
        what = ", ".join(f"{n} {k} op(s) on {g} ranks" for (k, g), n in alpha.items())
        out.append(_note(f"{ESTIMATE}{what}: no busbw table on profile {profile.name!r}: alpha-beta on the link's "
                         "latency and bandwidth", "calibrate --from-nccl-tests with that group size",
                         "collective-alpha-beta"))
    if nccl:
        out += _nccl_model_notes(prog, profile, nccl)
    assumed = _assumed_sections(profile.model_dump(mode="json"))
    if not _spans_nodes(prog, profile):  # the scale-out tier times nothing on one node
        assumed = [a for a in assumed if not a.startswith(("topology.nics", "topology.fabric"))]
    if assumed:
        out.append(_note(f"{ESTIMATE}profile {profile.name!r} holds values its sources mark ASSUMED, in "
                         f"{', '.join(assumed)}: numbers that use them are not measured",
                         "calibrate this machine (schedsim calibrate) to replace them", "profile-assumed"))
    return out


def _nccl_model_notes(prog: Program, profile: HardwareProfile, nccl: dict[tuple[str, int], int]) -> list[Note]:
    """The guesses of the ops NCCL's tuning model times (``nccl``: their count by (table, group size)): a
    topology not measured on this machine, an ``nccl.version`` newer than the newest release modelled."""
    from schedsim.network.tuning import newer_than_modelled

    out = []
    unmeasured = _unmeasured_tiers(profile, _spans_nodes(prog, profile))
    if unmeasured:
        what = ", ".join(f"{n} {k} op(s) on {g} ranks" for (k, g), n in nccl.items())
        out.append(_note(f"{ESTIMATE}{what}: timed by NCCL's tuning model (schedsim.network) on profile "
                         f"{profile.name!r}: its {', '.join(unmeasured)} figures are published or "
                         "assumed, not measured on this machine",
                         "calibrate --from-nccl-tests with logs of this machine", "collective-nccl-model"))
    newer = newer_than_modelled(profile.nccl.version)
    if newer:
        out.append(_note(f"{ESTIMATE}profile {profile.name!r}: nccl.version: {newer}, choosing and timing the "
                         f"{sum(nccl.values())} collective or send/recv op(s) NCCL's tuning model times",
                         "where that release's src/graph/tuning.cc is the newest modelled's "
                         "(schedsim.network.tuning), set nccl.version to the newest modelled", "nccl-version-newer"))
    return out


def _nccl_model_times(t: Op, profile: HardwareProfile, cost_box: list[CostModel]) -> bool:
    """Whether the NCCL model (:meth:`schedsim.network.model.NetworkModel.cost`) times collective or send/recv
    template ``t`` on ``profile``, not its tables or link classes. ``cost_box`` caches the CostModel."""
    if getattr(profile.topology, "scale_up", None) is None:
        return False
    from schedsim.errors import ProfileError

    if not cost_box:  # inside a prediction, the simulation's own (schedsim.gpu.cost.shared_cost_models)
        from schedsim.gpu.cost import cost_model

        cost_box.append(cost_model(profile))
    ranks = tuple(t.group) if t.group else (t.rank, t.peer if t.peer is not None else t.rank)
    try:
        return bool(cost_box[0].net.cost(t.kind, t.nbytes, ranks) is not None)
    except ProfileError:  # a rank without a GPU: left to the simulator's own error
        return False


def _unmeasured_tiers(profile: HardwareProfile, spans: bool) -> list[str]:
    """The topology tiers the NCCL model reads (``topology.scale_up``; ``nics`` and ``fabric`` when the ranks
    ``spans`` nodes) that are not measured: no ``timing`` figure of the tier is measured or fitted, and its
    ``provenance`` (where the profile sets it) is published or assumed, else its ``source`` says ``PUBLISHED``
    or ``ASSUMED``."""
    topo = profile.topology
    tiers: list[tuple[str, Any]] = [("topology.scale_up", topo.scale_up)]  # ScaleUp, Nics, Fabric
    if spans:
        tiers += [("topology.nics", topo.nics), ("topology.fabric", topo.fabric)]

    def unmeasured(tier: Any) -> bool:
        if any(f.provenance in ("measured", "fitted") for f in getattr(tier, "timing", {}).values()):
            return False
        if "provenance" in tier.model_fields_set:
            return tier.provenance in ("published", "assumed")
        return "PUBLISHED" in tier.source or "ASSUMED" in tier.source

    return [name for name, tier in tiers if tier is not None and unmeasured(tier)]


def _spans_nodes(prog: Program, profile: HardwareProfile) -> bool:
    """Whether the ranks of ``prog`` sit on more than one node of ``profile``'s topology (rank r on GPU
    ``placement[r]``, else GPU r; node = GPU // gpus_per_node). No topology: False."""
    topo = getattr(profile, "topology", None)
    g = getattr(topo, "gpus_per_node", 0) if topo is not None else 0
    if not g:
        return False
    import numpy as np

    pl = getattr(topo, "placement", None)
    gpus = np.asarray(pl[:prog.world_size], np.int64) if pl else np.arange(prog.world_size, dtype=np.int64)
    if not len(gpus):  # (a placement of no ranks: none, as an empty world)
        gpus = np.arange(prog.world_size, dtype=np.int64)
    node = gpus // g  # every rank's node at once (a set of 100,000 ints took 35 ms)
    return bool(len(node)) and int(node.min()) != int(node.max())


def _assumed_sections(d: Any, path: str = "") -> list[str]:
    """The dotted paths of the sections of a profile dict whose ``source`` says ``ASSUMED``.

    >>> _assumed_sections({"gpu": {"source": "ASSUMED datasheet"}, "links": {"nvlink": {"source": "measured"}}})
    ['gpu']
    """
    if isinstance(d, dict):
        here = [path] if path and "ASSUMED" in str(d.get("source", "")) else []
        return here + [p for k, v in d.items() for p in _assumed_sections(v, f"{path}.{k}" if path else str(k))]
    return []
