"""NCCL's own cost model: its algorithms, protocols, channel search and tuning constants (NCCL 2.20 to 2.30.7).

Everything here follows ``src/graph/tuning.cc`` (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``),
``src/graph/search.cc`` (``ncclTopoCompute``, ``ncclTopoDupChannels``), and for the channels and chunks a
collective runs with ``src/enqueue.cc`` (``topoGetAlgoInfo``, ``calcCollChunking``) and
``src/transport/nvls.cc`` (``ncclNvlsTuning``) of NVIDIA/nccl at v2.30.7
(``makefiles/version.mk``; commit 5067397c). The constants are NCCL's, copied, not fitted; tuning.cc's
constants and rules of earlier releases (from the v2.20.3-1 ... v2.30.7-1 tags) are kept too
(:class:`TunerConstants`, :func:`constants_for`), because NCCL chooses and estimates with the constants of
the release that runs (``nccl.version`` of a profile). Only tuning.cc is versioned: the channel search, the
enqueue.cc rules and the ``updateCollCostTable`` limits are v2.30.7's for every release. An NVLS-tree
all_reduce across nodes is timed as NCCL's estimate plus its pipeline fill (:func:`nvls_tree_fill`), which the
estimate leaves out.

Per (collective, algorithm, protocol) NCCL keeps a latency ``lat`` in µs and a bandwidth ``bw`` in GB/s
and predicts ``time_us = lat + nBytes / (1000 · bw)``; it runs the (algorithm, protocol) of least time that
``NCCL_ALGO`` / ``NCCL_PROTO`` allow. ``nBytes`` is the nccl-tests size column (``ncclFuncMaxSendRecvCount``:
the whole gathered buffer for all_gather and reduce_scatter). The chosen ring or tree then runs on the channels
``topoGetAlgoInfo`` of ``src/enqueue.cc`` gives it (fewer for few bytes: :func:`runtime_channels`), which times it.

Simplifications, stated:

* The channel search (``ncclTopoCompute``) is reduced to its bandwidth budget: a channel at speed ``s``
  takes ``s`` of every GPU's scale-up bandwidth and ``s`` of one NIC; the speeds tried, the ``.49`` stop
  rule, channel duplication and pass 2's speed increase are NCCL's. The tree graph takes the ring's
  channels and speed (NCCL searches it separately; on the topologies shipped they agree). Its pattern is
  ``NCCL_TOPO_PATTERN_TREE`` (tree busBw × .85 in tuning.cc) with one GPU per node, as search.cc sets it, and
  the balanced tree otherwise (NCCL's fallback to a simpler tree when the balanced one finds no channels is
  not modelled).
* NCCL's GPU-to-NIC PCIe paths are taken to be faster than the NIC.
* CollNet (SHARP in the fabric, NCCL's CollNet plugin) where the profile's fabric says so: CollNet Direct
  and Chain for all_reduce across nodes, and NVLS across nodes (NCCL enables NVLS beyond one node only with
  CollNet). The CollNet Direct graph is reduced to its budget like the ring's (:func:`collnet_direct_graph`);
  the Chain graph is the ring's (``collNetChainGraph->min/maxChannels = ringGraph->nChannels``, src/init.cc).
  CollNet all_gather / reduce_scatter (a plugin with ``iallgather`` / ``ireducescatter`` and one NIC per GPU)
  are not modelled. Without it, as in NCCL without a CollNet plugin, NVLS is single-node only and NVLS-tree
  serves all_reduce across nodes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["ALGOS", "PROTOS", "Graph", "TuneInput", "parse_nccl_list", "tune", "algo_time", "ring_graph",
           "nvls_graph", "collnet_direct_graph", "p2p_step", "runtime_channels", "runtime_bw_scale",
           "newer_than_modelled", "ChannelEnv", "comm_channels", "nvls_ctas", "channel_ceiling", "cta_bw_scale",
           "nvls_tree_chunk", "nvls_tree_fill", "TREE_PATTERN_BW"]

Algo = Literal["tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"]
Proto = Literal["LL", "LL128", "Simple"]
#: NCCL's algorithm and protocol order and names (``ncclAlgoStr``, ``ncclProtoStr``, src/init.cc)
ALGOS: tuple[Algo, ...] = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOS: tuple[Proto, ...] = ("LL", "LL128", "Simple")
_ALGO_NAMES = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain",
               "nvls": "nvls", "nvlstree": "nvls_tree", "pat": "pat"}
_ARCHS = ("volta", "ampere", "hopper", "blackwell")

# ---- tuning.cc constants per NCCL release -------------------------------------------------------------------
_T3 = tuple[float, float, float]
_Rows = tuple[_T3, _T3, _T3, _T3]  # Volta, Ampere, Hopper, Blackwell rows of a tuning.cc table (N1 / N2 / N4)


@dataclass(frozen=True)
class TunerConstants:
    """The constants and version-dependent rules of ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``
    (src/graph/tuning.cc of NVIDIA/nccl) from release ``since`` on: :func:`constants_for` picks the set of a
    version. µs and GB/s; per-arch tables have rows Volta, Ampere, Hopper, Blackwell (a release without a
    Blackwell row indexes Blackwell as Hopper: ``compCapIndex`` from ``minCompCap >= 90`` before 2.25).

    ``nvls_eff`` / ``per_ch_nvls_tree`` None: the NVLS and NVLS-tree bandwidth of releases before 2.28
    (``bw = min(bwIntra, bwInter)``, NVLS-tree ``bwInter / 2`` beyond 2 nodes, busBw x 5/6 to algorithm
    bandwidth); ``ring_ll_quarter``: ring LL busBw x 1/4 (across nodes, all_reduce, reduce) or 1/3, not .5
    (2.20); ``legacy_steps``: before 2.23 a ring all_reduce counts ``2 · nNodes`` network steps, the network
    hwLat is the algorithm's even with one GPU per node, ring LL128 takes .7 of busBw with one GPU per node, and
    NVLS all_gather / reduce_scatter bandwidth is converted x 5/6 too; ``pat_bw`` None: no PAT (before 2.23);
    ``nvls_agrs_90``: NVLS all_gather / reduce_scatter at ``min(bwIntra (ppn-1)/ppn, bwInter .9)`` (2.27);
    ``nvls_tree_corr_bw_x86``: the tree correction factors also correct NVLS-tree all_reduce on Blackwell
    with x86 hosts (2.29 on); ``ll128_blackwell``: LL128 is enabled on Blackwell (before 2.25 the LL128 rule's
    ``switch (minCompCap)`` has no case 100 and disables it)."""

    since: tuple[int, int, int]
    base_lat: Mapping[str, _T3]
    hw_lat: Mapping[str, Mapping[str, _T3]]
    ll_max_bw: _Rows
    per_ch_ring_ll128: _Rows
    per_ch_tree_ll128: _Rows
    per_ch_tree: _Rows
    per_ch_nvls_tree: _Rows | None
    nvls_eff: tuple[float, float, float, float] | None
    ring_ll_quarter: bool = False
    legacy_steps: bool = False
    pat_bw: float | None = .75
    nvls_agrs_90: bool = True
    nvls_tree_corr_bw_x86: bool = False
    ll128_blackwell: bool = True


def _hw_lat(tree_simple: _T3, nvls_nvl: float, nvls_tree_net: float) -> dict[str, dict[str, _T3]]:
    """tuning.cc's ``hwLat`` / ``hwLatencies`` [NVLink, PCI, network][algo][proto]; the entries that changed
    between releases as arguments (tree Simple on NVLink, PCI and the network; NVLS / NVLS-tree on NVLink;
    NVLS-tree on the network)."""
    return {
        "nvlink": {"tree": (0.6, 1.25, tree_simple[0]), "ring": (0.6, 1.9, 3.4), "collnet_direct": (0, 0, 3.7),
                   "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, nvls_nvl), "nvls_tree": (0, 0, nvls_nvl),
                   "pat": (0, 0, 4.0)},
        "pci": {"tree": (1.0, 1.9, tree_simple[1]), "ring": (1.0, 2.5, 5.7), "collnet_direct": (0, 0, 3.7),
                "collnet_chain": (0, 0, 2.8), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (0, 0, 4.0)},
        "net": {"tree": (5.0, 8.5, tree_simple[2]), "ring": (2.7, 4.0, 14.0), "collnet_direct": (0, 0, 31),
                "collnet_chain": (0, 0, 30), "nvls": (0, 0, 18), "nvls_tree": (0, 0, nvls_tree_net),
                "pat": (0, 0, 14)}}


def _base_lat(tree_simple: float) -> dict[str, _T3]:
    return {"tree": (6.8, 14.0, tree_simple), "ring": (6.6, 14.0, 8.4), "collnet_direct": (0, 0, 0),
            "collnet_chain": (0, 0, 0), "nvls": (0, 0, 0), "nvls_tree": (0, 0, 0), "pat": (8.0, 8.0, 8.0)}


_VOLTA_AMPERE_LL = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0))
_HOP_LL: _T3 = (141.0, 45.0, 35.0)
_RING_LL128_VA = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0))
_TREE_VA = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8))
_HOP_RING_LL128: _T3 = (36.7, 36.7, 36.7)
_HOP_TREE_LL128: _T3 = (36.7, 36.7, 29.0)
_HOP_TREE: _T3 = (38.7, 41.4, 36.0)


def _x2(r: _T3) -> _T3:
    return (2 * r[0], 2 * r[1], 2 * r[2])


#: One entry per release where tuning.cc's model changed, read from the tags of NVIDIA/nccl (v2.20.3-1 ...
#: v2.30.7-1, src/graph/tuning.cc). A version takes the last entry at or before it.
_RELEASES: tuple[TunerConstants, ...] = ()
_r = TunerConstants(  # v2.20.3: tree Simple baseLat 0 / hwLat 28; NVLS 23 us on NVLink; Hopper LL at Ampere's
    since=(2, 20, 0), base_lat=_base_lat(0.0), hw_lat=_hw_lat((28.0, 28.0, 28.0), 23.0, 14.0),
    ll_max_bw=(*_VOLTA_AMPERE_LL, (87.7, 22.5, 19.0), (87.7, 22.5, 19.0)),
    per_ch_ring_ll128=(*_RING_LL128_VA, _HOP_RING_LL128, _HOP_RING_LL128),
    per_ch_tree_ll128=(*_RING_LL128_VA, _HOP_TREE_LL128, _HOP_TREE_LL128),
    per_ch_tree=(*_TREE_VA, _HOP_TREE, _HOP_TREE), per_ch_nvls_tree=None, nvls_eff=None,
    ring_ll_quarter=True, legacy_steps=True, pat_bw=None, nvls_agrs_90=False, ll128_blackwell=False)
_RELEASES += (_r,)
_r = replace(_r, since=(2, 21, 0), hw_lat=_hw_lat((28.0, 28.0, 28.0), 25.0, 14.0),  # v2.21.5
             ring_ll_quarter=False, ll_max_bw=(*_VOLTA_AMPERE_LL, _HOP_LL, _HOP_LL))
_RELEASES += (_r,)
_r = replace(_r, since=(2, 23, 0), base_lat=_base_lat(8.4),  # v2.23.4: tree Simple 8.4 + 4 / 4 / 14 us, PAT
             hw_lat=_hw_lat((4.0, 4.0, 14.0), 25.0, 14.0), legacy_steps=False, pat_bw=.85)
_RELEASES += (_r,)
_r = replace(_r, since=(2, 24, 0), pat_bw=.75)  # v2.24.3
_RELEASES += (_r,)
_r = replace(_r, since=(2, 25, 0), ll_max_bw=(*_VOLTA_AMPERE_LL, _HOP_LL, _x2(_HOP_LL)),  # v2.25.1: Blackwell rows
             ll128_blackwell=True,
             per_ch_ring_ll128=(*_RING_LL128_VA, _HOP_RING_LL128, _x2(_HOP_RING_LL128)),
             per_ch_tree_ll128=(*_RING_LL128_VA, _HOP_TREE_LL128, _x2(_HOP_TREE_LL128)),
             per_ch_tree=(*_TREE_VA, _HOP_TREE, _x2(_HOP_TREE)))
_RELEASES += (_r,)
_r = replace(_r, since=(2, 27, 0), nvls_agrs_90=True)  # v2.27.3
_RELEASES += (_r,)
_r = replace(_r, since=(2, 28, 0), nvls_eff=(0.0, 0.0, 0.85, 0.74),  # v2.28.3: NVLS efficiency, perChMaxNVLSTree
             per_ch_tree_ll128=(*_RING_LL128_VA, _HOP_TREE_LL128, (55.6, 31.67, 20.0)),
             per_ch_tree=(*_TREE_VA, _HOP_TREE, (70.0, 42.8, 24.0)),
             per_ch_nvls_tree=(*_TREE_VA, (0.0, 57.7, 45.5), (0.0, 96.0, 43.1)))
_RELEASES += (_r,)
_r = replace(_r, since=(2, 28, 7), per_ch_ring_ll128=(*_RING_LL128_VA, _HOP_RING_LL128, (73.4, 34.6, 73.4)))
_RELEASES += (_r,)
_r = replace(_r, since=(2, 28, 9), hw_lat=_hw_lat((4.0, 4.0, 14.0), 25.0, 20.9),  # v2.28.9: NVLS-tree net 20.9
             per_ch_nvls_tree=(*_TREE_VA, (0.0, 57.7, 45.5), (0.0, 96.0, 43.8)))
_RELEASES += (_r,)
_r = replace(_r, since=(2, 29, 0), per_ch_ring_ll128=(*_RING_LL128_VA, _HOP_RING_LL128, (34.5, 34.6, 34.5)),
             nvls_tree_corr_bw_x86=True)  # v2.29.2
_RELEASES += (_r,)
_r = replace(_r, since=(2, 29, 7), per_ch_ring_ll128=(*_RING_LL128_VA, _HOP_RING_LL128, (40.0, 40.0, 40.0)))
_RELEASES += (_r,)
_r = replace(_r, since=(2, 30, 0), per_ch_nvls_tree=(*_TREE_VA, (0.0, 57.7, 45.5), (0.0, 96.0, 80.0)))  # v2.30.3
_RELEASES += (_r,)
del _r
#: The newest release modelled (makefiles/version.mk of v2.30.7-1); later versions take its constants
NCCL_VERSION = "2.30.7"
LATEST = _RELEASES[-1]


def parse_nccl_version(text: str) -> tuple[int, int, int]:
    """``"2.26.2"``, ``"2.26.2-1"`` or ``"v2.26.2-1"`` (as nccl-tests prints ``NCCL version 2.26.2+cuda12.2``:
    the ``+...`` suffix is dropped) -> (2, 26, 2).

    Raises
    ------
    ValueError
        Not major.minor.patch.

    >>> parse_nccl_version("2.27.5+cuda12.8")
    (2, 27, 5)
    """
    m = re.fullmatch(r"v?([0-9]+)\.([0-9]+)\.([0-9]+)(?:-[0-9]+)?(?:\+\S*)?", text.strip())  # ASCII digits only
    if m is None:
        raise ValueError(f"NCCL version {text!r} is not major.minor.patch (e.g. 2.26.2)")
    return int(m[1]), int(m[2]), int(m[3])


def constants_for(version: str | None) -> TunerConstants:
    """tuning.cc's constants and rules of NCCL ``version`` (None: the newest modelled, :data:`NCCL_VERSION`).

    Raises
    ------
    ValueError
        Not a version (:func:`parse_nccl_version`), or older than 2.20 (not modelled).

    >>> constants_for("2.21.5").hw_lat["net"]["nvls_tree"], constants_for("2.30.7").hw_lat["net"]["nvls_tree"]
    ((0, 0, 14.0), (0, 0, 20.9))
    """
    if version is None:
        return LATEST
    v = parse_nccl_version(version)
    if v < _RELEASES[0].since:
        raise ValueError(f"NCCL {version}: tuning constants are modelled from 2.20.0 to {NCCL_VERSION} (older "
                         "releases tune differently)")
    return next(c for c in reversed(_RELEASES) if c.since <= v)


def newer_than_modelled(version: str | None) -> str | None:
    """Where NCCL ``version`` is newer than the newest release modelled (:data:`NCCL_VERSION`), the sentence that
    says so: :func:`constants_for` gives it that release's constants, which NCCL ``version`` may have changed.
    None for None or a modelled release.

    Raises
    ------
    ValueError
        Not a version (:func:`parse_nccl_version`).

    >>> newer_than_modelled("2.31.0")
    'NCCL 2.31.0 is newer than the newest release modelled (2.30.7): tuning.cc constants of 2.30.7 stand in for it'
    """
    if version is None or parse_nccl_version(version) <= parse_nccl_version(NCCL_VERSION):
        return None
    return (f"NCCL {version} is newer than the newest release modelled ({NCCL_VERSION}): tuning.cc constants of "
            f"{NCCL_VERSION} stand in for it")


#: ``treeCorrectionFactor`` (tuning.cc), per protocol, for log2(nBytes / 64) = 0..23
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9))

# ---- search.cc: speeds tried per channel, GB/s ------------------------------------------------------------------
_SPEED_INTRA = {"pre": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}
_SPEED_INTER = {"pre": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4,
                        1.2, 0.24, 0.12),
                "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                           0.24, 0.12),
                "blackwell": (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                              6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
_MAX_RING_CHANNELS = 32  # ringGraph->maxChannels = MAXCHANNELS / 2 (src/init.cc; MAXCHANNELS 64, device.h)
_MAX_NVLS_ARITY = 32  # NCCL_MAX_NVLS_ARITY (device.h)
_MAX_DIRECT_ARITY = 7  # NCCL_MAX_DIRECT_ARITY (device.h): a CollNet Direct graph has at most 7 + 1 heads (search.cc)


# ---- enqueue.cc (topoGetAlgoInfo): channels and threads a collective runs with ------------------------------------
#: ``NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD`` (src/include/comm.h): bytes per thread below which NCCL drops a channel
_THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
#: ``NCCL_LL_MAX_NTHREADS``, ``NCCL_LL128_MAX_NTHREADS``, ``NCCL_SIMPLE_MAX_NTHREADS`` (src/include/device.h)
_MAX_NTHREADS = {"LL": 512, "LL128": 640, "Simple": 512}
_PCI_BW = 12.0  # PCI_BW (src/graph/topo.h): a ring of at most this many GB/s runs Simple with 256 threads
#: tuning.cc's factor on tree busBw where ``comm->maxTreePattern == NCCL_TOPO_PATTERN_TREE`` ("All NIC traffic going
#: to/from the same GPU", src/include/graph.h; NCCL 2.30.7, commit 5067397c; since 2.18.3-1, commit ea383122), which
#: search.cc's ``ncclTopoCompute`` sets on a node of one GPU (``if (ngpus == 1 && graph->pattern != ..._RING)``)
TREE_PATTERN_BW = .85


def parse_nccl_list(text: str, what: Literal["algo", "proto"]) -> dict[str, frozenset[str]]:
    """NCCL function name (``allreduce``, ...) -> the algorithms (schedsim names: ``nvls_tree``, ...) or protocols
    (``LL``, ``LL128``, ``Simple``) it may use, as ``parseList`` of tuning.cc (NCCL 2.24 to 2.30.7) reads an
    ``NCCL_ALGO`` / ``NCCL_PROTO`` string: ``"a,b"``, ``"^a"`` (all but), ``"a;allreduce:b"`` (a prefix, one of
    ``ncclFuncStr``: broadcast, reduce, allgather, reducescatter, allreduce, applies to that function; only the
    first entry may lack one). Names are case-insensitive (``strcasecmp``) and compared whole: a space is part of
    a name. ``strtok_r`` cuts the lists and skips empty pieces: ``"ring,"`` and ``"ring;"`` are ``"ring"``, and
    ``""`` (or ``"^"``) changes nothing. Raises ValueError for what NCCL refuses with ncclInvalidUsage: an
    unknown element or prefix, a later entry without a prefix.

    >>> sorted(parse_nccl_list("^nvls,nvlstree", "algo")["allreduce"])
    ['collnet_chain', 'collnet_direct', 'pat', 'ring', 'tree']
    >>> sorted(parse_nccl_list("LL,Simple;allreduce:LL128", "proto")["allreduce"])
    ['LL128']
    """
    names: dict[str, str] = dict(_ALGO_NAMES) if what == "algo" else {p.lower(): p for p in PROTOS}
    funcs = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")  # ncclFuncStr (src/init.cc)
    out = {f: frozenset(names.values()) for f in funcs}
    for i, entry in enumerate(text.split(";")):
        parts = [x for x in entry.split(":") if x]  # strtok_r skips empty pieces
        if not parts:
            if entry:  # colons only: NCCL reads no list from it
                raise ValueError(f"{text!r}: an entry of colons only, no function or {what} name")
            continue
        prefix, elems = (parts[0], parts[1]) if len(parts) > 1 else ("", parts[0])
        if not prefix and i:  # NCCL: a prefix-less entry anywhere but at the string's start
            raise ValueError(f"{text!r}: all entries except the first must have a prefix (function:)")
        if prefix and prefix.lower() not in funcs:
            raise ValueError(f"unknown NCCL function prefix {prefix!r}; one of {', '.join(funcs)}")
        negate = elems.startswith("^")
        toks = [t for t in (elems[1:] if negate else elems).split(",") if t]
        bad = next((t for t in toks if t.lower() not in names), None)
        if bad is not None:
            raise ValueError(f"unknown NCCL {what} {bad!r}; one of {', '.join(sorted(names))}")
        chosen = {names[t.lower()] for t in toks}
        got = frozenset(set(names.values()) - chosen) if negate else frozenset(chosen)
        for f in funcs:
            if not prefix or f == prefix.lower():
                out[f] = got
    return out


@dataclass(frozen=True)
class Graph:
    """One NCCL graph after the search: ``channels`` at ``bw_intra`` / ``bw_inter`` GB/s each."""

    channels: int
    bw_intra: float
    bw_inter: float


def _arch_row(arch: str) -> str:
    return "blackwell" if arch == "blackwell" else "hopper" if arch == "hopper" else "pre"


def ring_graph(arch: str, up_bw: float, local_gpus: int, nics: int, nic_bw: float, multi_node: bool) -> Graph:
    """Ring channels and per-channel speed as ``ncclTopoCompute`` finds them, on a bandwidth budget.

    A channel at speed ``s`` takes ``s`` of each GPU's scale-up bandwidth ``up_bw`` (when ``local_gpus`` > 1)
    and, across nodes, ``s`` of one of the ``nics`` NICs of ``nic_bw`` GB/s. Pass 1 starts at the fastest
    speed of NCCL's array (``sm90SpeedArrayInter`` ...) not above ``maxBw`` (the NIC, or ``up_bw`` in one node)
    and keeps the most ``channels · s``; it tries slower speeds while the next is above .49 of the best.
    ``ncclTopoDupChannels`` then doubles the channels at half speed when ``s`` >= 25 (Hopper on: not when
    ``s`` < 50 with more than 4 channels); pass 2 raises the speed while the channels still fit. No speed fits
    (links slower than NCCL's slowest): one channel at NCCL's fallback 0.1 GB/s, or at the NIC's or scale-up
    bandwidth where that is less (NCCL's figure would outrun the links).

    >>> ring_graph("hopper", 370.8, 8, 8, 50.0, False)   # DGX H100, one node: 12 channels of 30 GB/s
    Graph(channels=12, bw_intra=30.0, bw_inter=30.0)
    >>> ring_graph("hopper", 370.8, 8, 8, 50.0, True)    # across nodes, 8x 400 Gb/s NICs
    Graph(channels=8, bw_intra=45.0, bw_inter=45.0)
    """
    speeds = (_SPEED_INTER if multi_node else _SPEED_INTRA)[_arch_row(arch)]
    total = up_bw if local_gpus > 1 else (nic_bw * nics if multi_node else 5000.0)
    max_bw = nic_bw if multi_node else (up_bw if local_gpus > 1 else 5000.0)

    def fit(s: float) -> int:
        n = _MAX_RING_CHANNELS
        if local_gpus > 1:
            n = min(n, int(up_bw // s + 1e-9))
        if multi_node:
            n = min(n, nics * int(nic_bw // s + 1e-9))
        return max(n, 0)

    i = 0
    while i < len(speeds) - 1 and (speeds[i] > max_bw or speeds[i] > total):
        i += 1
    best_n, best_s = 0, 0.0
    while True:
        s = speeds[i]
        n = fit(s)
        if n * s > best_n * best_s:
            best_n, best_s = n, s
        if best_n == _MAX_RING_CHANNELS or best_n * best_s >= total:
            break
        if i + 1 < len(speeds) and (best_n == 0 or speeds[i + 1] / best_s > .49):
            i += 1
        else:
            break
    if best_n == 0:  # NCCL's fallback, "falling back to simple order" at bwIntra 0.1, but never above the links
        s = min(0.1, nic_bw if multi_node else math.inf, up_bw if local_gpus > 1 else math.inf)
        return Graph(1, s, s)
    n, s = best_n, best_s
    late = arch in ("hopper", "blackwell")
    if s >= 25.0 and not (late and s < 50.0 and n > 4):
        dup = min(2 * n, _MAX_RING_CHANNELS)
        s /= -(-dup // n)
        n = dup
    j = next((k for k, v in enumerate(speeds) if v <= s), len(speeds) - 1)
    while j > 0 and fit(speeds[j - 1]) >= n and speeds[j - 1] <= max_bw:
        j -= 1
        s = speeds[j]
    return Graph(n, s, s)


def nvls_graph(arch: str, up_bw: float, local_gpus: int, nics: int, nic_bw: float, multi_node: bool) -> Graph | None:
    """The NVLS graph (``NCCL_TOPO_PATTERN_NVLS``): one channel per head GPU (at most ``NCCL_MAX_NVLS_ARITY``;
    across nodes one head per NIC), each at the fastest speed for which a GPU's NVSwitch link carries its own
    head channel twice and every other once (``ncclTopoSearchTryNvls``): ``(heads + 1) · s <= up_bw``. Pass 2
    raises ``bw_inter`` while it stays below ``2 · bw_intra`` (and, across nodes, within the NIC).
    None before Hopper (NCCL: ``ccMin < 90``).

    >>> nvls_graph("hopper", 370.8, 8, 8, 50.0, False)
    Graph(channels=8, bw_intra=40.0, bw_inter=60.0)
    """
    if arch not in ("hopper", "blackwell") or local_gpus < 2:
        return None
    speeds = (_SPEED_INTER if multi_node else _SPEED_INTRA)[_arch_row(arch)]
    heads = min(_MAX_NVLS_ARITY, local_gpus, nics if multi_node else local_gpus)
    cap = nic_bw if multi_node else math.inf
    ok = [s for s in speeds if (heads + 1) * s <= up_bw + 1e-9 and s <= cap]
    if not ok:
        return None
    s = ok[0]
    inter = s
    for v in reversed(speeds):
        if inter < v < 2 * s and v <= cap:
            inter = v
    return Graph(heads, s, inter)


def collnet_direct_graph(arch: str, up_bw: float, local_gpus: int, nics: int, nic_bw: float) -> Graph | None:
    """The CollNet Direct graph (``NCCL_TOPO_PATTERN_COLLNET_DIRECT``, ``ncclTopoSearchTryCollnetDirect`` of
    search.cc), on a bandwidth budget: one channel per head GPU, at most ``NCCL_MAX_DIRECT_ARITY + 1`` = 8 and
    one per NIC; a head's channel at speed ``s`` sends and receives ``s / (local - 1)`` to and from every other
    GPU of the node, so a GPU carries ``s`` for its own channel and ``s / (local - 1)`` for each other head's:
    ``(1 + (heads - 1) / (local - 1)) · s <= up_bw``; ``s`` is the fastest of NCCL's inter-node speeds within
    that and the NIC. None with no NIC or no speed that fits.

    >>> collnet_direct_graph("hopper", 370.8, 8, 8, 50.0)   # 8 heads at 48 (2 x 48 <= 370.8, 48 <= 50)
    Graph(channels=8, bw_intra=48.0, bw_inter=48.0)
    """
    heads = min(_MAX_DIRECT_ARITY + 1, local_gpus, nics)
    if heads < 1:
        return None
    load = 1.0 + ((heads - 1) / (local_gpus - 1) if local_gpus > 1 else 0.0)
    ok = [v for v in _SPEED_INTER[_arch_row(arch)]
          if v <= nic_bw + 1e-9 and (local_gpus == 1 or load * v <= up_bw + 1e-9)]
    return Graph(heads, ok[0], ok[0]) if ok else None


#: ``MAXCHANNELS`` (src/include/device.h, NCCL 2.30.7): the most channels (CTAs) a communicator has
MAXCHANNELS = 64


@dataclass(frozen=True)
class ChannelEnv:
    """The channel-count settings NCCL reads from the environment (None: unset): ``NCCL_MIN_CTAS`` /
    ``NCCL_MAX_CTAS`` (``ncclConfig_t.minCTAs`` / ``maxCTAs``, src/init.cc: capped at ``MAXCHANNELS``, and a
    minimum above the maximum is lowered to it) and ``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS`` (or their
    legacy names ``NCCL_MIN_NRINGS`` / ``NCCL_MAX_NRINGS``; ``ncclMinNchannels`` / ``ncclMaxNchannels``,
    src/graph/connect.cc). Counts of channels, each one CTA of the collective kernel."""

    min_ctas: int | None = None
    max_ctas: int | None = None
    min_nchannels: int | None = None
    max_nchannels: int | None = None

    def ctas(self) -> tuple[int, int]:
        """``(minCTAs, maxCTAs)`` as src/init.cc leaves them (defaults 1 and ``MAXCHANNELS``)."""
        hi = min(MAXCHANNELS, self.max_ctas or MAXCHANNELS)
        return min(hi, self.min_ctas or 1), hi


NO_CHANNEL_ENV = ChannelEnv()


def comm_channels(ring: Graph, arch: str, multi_node: bool, env: ChannelEnv = NO_CHANNEL_ENV) -> int:
    """``comm->nChannels``, the ring and tree channels a communicator runs collectives on, as
    ``ncclTopoPostset`` (src/graph/connect.cc, NCCL 2.30.7) leaves it: twice the ring graph's channels
    (``connectRings`` duplicates each), twice again on Hopper and later across nodes when the ring graph's
    ``bwIntra > 45`` and fewer than 16, then ``min(NCCL_MAX_NCHANNELS, ·, maxCTAs)`` and raised (by copying
    channels) to ``max(NCCL_MIN_NCHANNELS, minCTAs)``; at most ``MAXCHANNELS``.

    >>> comm_channels(Graph(16, 22.5, 22.5), "hopper", True)                         # 2-node DGX H100
    32
    >>> comm_channels(Graph(16, 22.5, 22.5), "hopper", True, ChannelEnv(max_ctas=8))
    8
    >>> comm_channels(Graph(8, 45.0, 45.0), "hopper", True, ChannelEnv(min_ctas=24))  # 16 channels, raised to 24
    24
    """
    n = min(MAXCHANNELS, 2 * ring.channels)
    if arch in ("hopper", "blackwell") and multi_node and ring.bw_intra > 45.0 and n < 16:
        n = min(MAXCHANNELS, 2 * n)
    lo, hi = env.ctas()
    n = min(n, env.max_nchannels or MAXCHANNELS, hi)
    return min(MAXCHANNELS, max(n, env.min_nchannels or 0, lo))


def nvls_ctas(arch: str, multi_node: bool, env: ChannelEnv = NO_CHANNEL_ENV, *, nodes: int = 1, ppn: int = 8,
              nic_bw: float = 0.0, since: tuple[int, int, int] = LATEST.since) -> int:
    """``comm->nvlsChannels``, the CTAs NVLS and NVLS-tree run on (``ncclNvlsTuning``, src/transport/nvls.cc,
    NCCL 2.30.7): ``NVLS_NCHANNELS_SM90`` 16 on Hopper, on Blackwell ``NVLS_NCHANNELS_SM100`` 32 across nodes and
    ``NVLS_NCHANNELS_SM100_NVL`` 24 within one (v2.27.3 on; 32 in 2.25 and 2.26; up to v2.24.3 16 on any GPU, the
    default of ``NCCL_NVLS_NCHANNELS``, which is not modelled), clamped to ``[minCTAs, maxCTAs]``; ``since``: the
    release's :attr:`TunerConstants.since`. From 2.30 (v2.30.3), Blackwell across ``nodes`` takes the count of
    ``ncclNvlsTreeSm100Tuning`` (:func:`_sm100_tree_tuning`, from ``ppn`` and ``nic_bw`` GB/s).

    >>> nvls_ctas("hopper", True), nvls_ctas("hopper", True, ChannelEnv(min_ctas=24))
    (16, 24)
    >>> nvls_ctas("blackwell", True, nodes=3, ppn=8, nic_bw=50.0, since=(2, 30, 0))   # 48 <= NIC < 96 GB/s
    24
    """
    n = 16 if arch != "blackwell" or since < (2, 25, 0) else 32 if multi_node or since < (2, 27, 0) else 24
    if arch == "blackwell" and nodes > 1 and since >= _SM100_TREE_SINCE:
        n = _sm100_tree_tuning(nodes, ppn, nic_bw)[0]
    lo, hi = env.ctas()
    return max(lo, min(hi, n))


#: The first release with ``ncclNvlsTreeSm100Tuning`` (src/transport/nvls.cc; absent at v2.29.7-1, present at
#: v2.30.3-1, the first 2.30 tag: :attr:`TunerConstants.since` (2, 30, 0))
_SM100_TREE_SINCE = (2, 30, 0)


def _sm100_tree_tuning(nodes: int, ppn: int, nic_bw: float) -> tuple[int, int, int | None]:
    """``(nvlsChannels, nvlsChunkSize, nvlsTreeMaxChunkSize)`` that ``ncclNvlsTreeSm100Tuning`` (src/transport/
    nvls.cc, NCCL 2.30.7) sets for Blackwell across ``nodes`` of ``ppn`` GPUs on NICs of ``nic_bw`` GB/s
    (``comm->minNetBw``), with the GPU-to-NIC path beyond PXB (a PCIe detail no profile holds); a tree maximum of
    None is left unset, so that ``ncclNvlsTuning`` falls back to 64 KiB from 4 nodes, else the chunk size."""
    n, chunk, tree_max = 32, 128 * 1024, None
    if nodes == 2 and nic_bw >= 48.0:
        tree_max = 128 * 1024
        if ppn <= 4:
            chunk = tree_max = 256 * 1024
        elif ppn >= 16:
            tree_max = 64 * 1024
    elif nic_bw >= 96.0:
        if ppn <= 8:
            n, chunk, tree_max = 24, 256 * 1024, 256 * 1024
        else:
            tree_max = 128 * 1024 if ppn < 32 else 64 * 1024
    elif nic_bw >= 48.0:
        n, tree_max = 24, 128 * 1024
    return n, chunk, tree_max


#: ``NCCL_NVLS_CHUNKSIZE`` default (``NCCL_PARAM(NvlsChunkSize, ...)``, src/transport/nvls.cc, v2.21.5 ... v2.30.7)
NVLS_CHUNKSIZE = 128 * 1024


def nvls_tree_chunk(nbytes: float, nodes: int, nchannels: int, heads: int, arch: str = "hopper", ppn: int = 8,
                    nic_bw: float = 50.0, since: tuple[int, int, int] = (2, 30, 0)) -> int:
    """Bytes a head sends up (and receives down) the tree per channel and loop of an NVLS-tree all_reduce of
    ``nbytes``: ``calcCollChunking`` of src/enqueue.cc (NCCL 2.30.7; the same ramp from 2.20):
    ``chunkSize = min(nvlsChunkSize, nvlsTreeMaxChunkSize)``, then halved to 256 / 128 / 64 / 32 KiB while
    ``nBytes < 32 / 16 / 4 / 1 · concurrentOps · chunkSize`` with ``concurrentOps = nchannels · heads`` (the NVLS
    CTAs, :func:`nvls_ctas`, times the NVLS graph's heads). ``nvlsChunkSize`` is ``NCCL_NVLS_CHUNKSIZE`` (128 KiB)
    from 2.21 (v2.21.5); before it (``since``: the release's :attr:`TunerConstants.since`) the chunk starts at the
    Simple step, ``NCCL_BUFFSIZE / NCCL_STEPS`` = 4 MiB / 8 = 512 KiB (``computeCollChunkInfo``, v2.20.3).
    ``nvlsTreeMaxChunkSize`` 64 KiB from 4 nodes, else ``nvlsChunkSize`` (``ncclNvlsTuning``, src/transport/nvls.cc);
    on Blackwell across nodes from 2.30 ``ncclNvlsTreeSm100Tuning`` sets both (:func:`_sm100_tree_tuning`) from
    the nodes, ``ppn`` (GPUs a node) and ``nic_bw`` (GB/s, ``comm->minNetBw``).

    >>> nvls_tree_chunk(16 << 20, 8, 16, 8), nvls_tree_chunk(4 << 20, 2, 16, 8), nvls_tree_chunk(1 << 30, 2, 16, 8)
    (65536, 32768, 131072)
    """
    chunk = NVLS_CHUNKSIZE if since >= (2, 21, 0) else 4 * 1024 * 1024 // 8
    tree_max: int | None = None
    if arch == "blackwell" and nodes > 1 and since >= _SM100_TREE_SINCE:
        _n, chunk, tree_max = _sm100_tree_tuning(nodes, ppn, nic_bw)
    if tree_max is None:
        tree_max = 65536 if nodes >= 4 else chunk
    c = min(chunk, tree_max)
    ops = nchannels * heads
    for times, at in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if nbytes < times * ops * c and c > at:
            c = at
    return c


def nvls_tree_fill(nbytes: float, t: TuneInput, nic_bw: float = 50.0) -> float:
    """µs an NVLS-tree all_reduce of ``nbytes`` takes beyond NCCL's estimate ``lat + nBytes / bw``: the fill (and
    drain) of its pipeline across nodes. Each of NCCL's NVLS CTAs (:func:`nvls_ctas`) moves its data in loops of one
    chunk per head (:func:`nvls_tree_chunk`; a loop short of data splits it evenly over the heads, as the kernel's
    ``lastChunkCount`` does): ``RunWorkColl<..., NCCL_ALGO_NVLS_TREE, ...>`` (src/device/all_reduce.h) reduces a
    chunk on its head, sends it up the tree to its parent node, which reduces it with its own before sending on, and
    the root's result comes back down the same way, so a chunk crosses ``2 · depth`` network hops one after another,
    ``depth = ceil(log2(nNodes))``: the trees are ``ncclGetDtree(nNodes)`` (src/graph/connect.cc, trees.cc), whose
    root has one child, the highest power of 2 below ``nNodes`` (NCCL's latency counts ``2 · log2i(nNodes)`` hops,
    one fewer on 3, 5 to 7, 9 to 15 ... nodes), and every hop passes the chunks of all the CTAs through the head's
    NIC (the NVLS graph's ``bwInter`` GB/s) before the next hop has them. NCCL's bandwidth term counts the steady
    state only; the first chunk's way up and down the tree is this time: ``2 · depth · nCTAs · chunk / bwInter``.
    0 on one node or without NVLS.
    ``nbytes``: the nccl-tests size; ``t``: NCCL's view of the group (its NVLS graph, nodes, ranks, arch and
    channel settings, and its release: ``t.consts.since``); ``nic_bw``: GB/s of one NIC (``comm->minNetBw``, for
    Blackwell's chunk and CTA rule only).
    Evidence: NVIDIA/nccl-tests#309's 2-node log (NCCL 2.26.2) misses NCCL's estimate by an amount that steps with
    this chunk (docs/validation.md, "NVLS-tree's pipeline fill across nodes").

    >>> t = TuneInput(64, 8, "hopper", "nvlink", "intel", Graph(8, 45.0, 45.0), Graph(8, 40.0, 48.0))
    >>> round(nvls_tree_fill(16 << 20, t), 2)   # 2 · 3 hops · 16 CTAs · 64 KiB / 48 GB/s
    131.07
    """
    if t.nvls is None or t.nodes < 2 or t.nvls.bw_inter <= 0:
        return 0.0
    ppn, since = t.local_range[0] if t.local_range else t.ranks // t.nodes, t.consts.since  # comm->minLocalRanks
    nch = nvls_ctas(t.arch, True, t.channel_env, nodes=t.nodes, ppn=ppn, nic_bw=nic_bw, since=since)
    heads = t.nvls.channels
    c = nvls_tree_chunk(nbytes, t.nodes, nch, heads, t.arch, ppn, nic_bw, since)
    per = min(float(c), math.ceil(nbytes / (nch * heads)))
    depth = (t.nodes - 1).bit_length()  # ceil(log2(nNodes)): the deepest leaf of ncclGetBtree(nNodes)
    return 2 * depth * nch * per / (1000.0 * t.nvls.bw_inter)


@dataclass(frozen=True)
class TuneInput:
    """What ``ncclTopoTuneModel`` reads of a communicator: ``ranks`` over ``nodes`` (``ppn = ranks / nodes``),
    the GPU ``arch``, ``intra_hw`` (``nvlink`` or ``pci``), the CPU vendor, the ring/tree and NVLS graphs,
    ``lat_inter`` (``graph->latencyInter``, µs), ``lat_intra`` (µs added to every intra-node hwLat; not in NCCL,
    0 there) and whether LL128 is allowed (NVLink or better inside, Hopper:
    any NIC path up to PXN; before: up to PXB). ``collnet``: the fabric reduces in the network (SHARP) and NCCL
    runs its CollNet plugin (``config.collnetEnable``); ``nvswitch``: the node has an NVSwitch (NCCL's
    ``nvsCount``, which CollNet Direct needs); ``collnet_direct``: that graph (:func:`collnet_direct_graph`);
    ``consts``: the tuning.cc constants of the NCCL release that runs (:func:`constants_for`).
    ``local_range``: ``(comm->minLocalRanks, comm->maxLocalRanks)``, the fewest and most ranks on one node (None:
    ``ranks // nodes`` both, a group even over its nodes); tuning.cc itself reads ``nRanks / nNodes``, enqueue.cc's
    arity limits ``maxLocalRanks`` and ``ncclNvlsTreeSm100Tuning`` (src/transport/nvls.cc) ``minLocalRanks``.
    ``channel_env``: ``NCCL_MIN_CTAS`` and the other channel-count settings (:class:`ChannelEnv`); NCCL's
    estimate (``ncclTopoTuneModel``) reads the graphs' channels and does not see them, the time does
    (:func:`channel_ceiling`, :func:`cta_bw_scale`).

    ``lat_hop``: µs every network crossing takes beyond NCCL's figures that NCCL does not see (the transport's
    own, ``topology.nics.transport_latency_us``, and the fabric's switch hops, ``topology.fabric.latency_us``): 0
    in NCCL's view of a group (its choice), set only to time the run (:meth:`schedsim.network.NcclNetwork._lat_hop`,
    :func:`schedsim.network.net_crossings`); :func:`tune` leaves it out, and it is not counted again for Simple's
    flush (a local read of the receive buffer, ``ncclIbIflush``, src/transport/net_ib, not a network crossing).
    ``node_ranks``: the ranks on each node in the ring's order, for an uneven group's crossings (empty: ``ranks //
    nodes`` on each; :attr:`schedsim.network.GroupShape.counts`); NCCL's model does not read it.
    ``lat_spine``: µs more a crossing between two fabric leaves takes (two more switch hops), ``node_leaves``
    the leaf of each node in that order (:attr:`schedsim.network.GroupShape.node_leaves`; empty: one leaf); 0 and
    empty in NCCL's view, as ``lat_hop``.

    ``hw_intra`` / ``hw_inter`` replace NCCL's ``hwLatencies`` of the intra-node / network tier for the
    (algorithm, protocol) keys they hold, and ``bw_factor`` multiplies its bus bandwidth (before the conversion
    to algorithm bandwidth): a profile's measured, fitted or published ``timing`` figures (not NCCL's; NCCL
    chooses with its own constants, :meth:`schedsim.network.NcclNetwork.collective`)."""

    ranks: int
    nodes: int
    arch: str
    intra_hw: Literal["nvlink", "pci"]
    cpu_vendor: str
    ring: Graph
    nvls: Graph | None
    lat_inter: float = 0.0
    ll128: bool = True
    lat_intra: float = 0.0
    hw_intra: Mapping[tuple[str, str], float] | None = None
    hw_inter: Mapping[tuple[str, str], float] | None = None
    bw_factor: Mapping[tuple[str, str], float] | None = None
    collnet: bool = False
    nvswitch: bool = False
    collnet_direct: Graph | None = None
    consts: TunerConstants = LATEST
    channel_env: ChannelEnv = NO_CHANNEL_ENV
    local_range: tuple[int, int] | None = None
    lat_hop: float = 0.0
    node_ranks: tuple[int, ...] = ()
    lat_spine: float = 0.0
    node_leaves: tuple[int, ...] = ()


def _p(proto: str) -> int:
    return PROTOS.index(proto)


def _enabled(coll: str, a: str, p: str, t: TuneInput) -> bool:
    """Whether ``ncclTopoTuneModel`` fills (and leaves enabled) algorithm ``a`` with protocol ``p`` for ``coll``:
    broadcast and reduce run ring only; all_gather and reduce_scatter ring, NVLS or PAT; all_reduce no PAT;
    NVLS, NVLS-tree and PAT only Simple; NVLS-tree off on one node, NVLS off across nodes without CollNet, PAT
    only with one GPU per node; LL128 only where ``t.ll128`` (and on Blackwell from 2.25); NVLS graphs need 2
    channels. CollNet Direct and Chain (Simple only; ``busBw = 0`` otherwise in tuning.cc) across nodes with
    ``t.collnet``, Direct only on an NVSwitch node (``nvsCount == 0`` disables it). And as
    ``updateCollCostTable`` of src/enqueue.cc skips them: NVLS and NVLS-tree for other than all_reduce beyond 32
    local ranks (``NCCL_MAX_NVLS_ARITY``), CollNet Direct and Chain beyond 8 (``NCCL_MAX_DIRECT_ARITY + 1``)."""
    if coll in ("broadcast", "reduce") and a != "ring":
        return False
    # comm->maxLocalRanks (enqueue.cc's CollNet test; its NVLS test reads the rank's own comm->localRanks: the
    # fullest node's, whose ranks refuse NVLS first)
    local = t.local_range[1] if t.local_range else t.ranks / t.nodes
    if a in ("nvls", "nvls_tree") and coll != "allreduce" and local > _MAX_NVLS_ARITY:
        return False  # updateCollCostTable (enqueue.cc): NVLS beyond NCCL_MAX_NVLS_ARITY local ranks is all_reduce only
    if a in ("collnet_direct", "collnet_chain") and local > _MAX_DIRECT_ARITY + 1:
        return False  # updateCollCostTable: CollNet Direct and Chain only up to NCCL_MAX_DIRECT_ARITY + 1 local GPUs
    if coll in ("reducescatter", "allgather") and a not in ("pat", "ring", "nvls"):
        return False
    if a in ("collnet_direct", "collnet_chain"):  # all_reduce only here (CollNet AG/RS: module doc)
        return (t.collnet and t.nodes > 1 and coll == "allreduce" and p == "Simple"
                and (a == "collnet_chain" or (t.nvswitch and t.collnet_direct is not None)))
    if (coll == "allreduce" and a == "pat") or (a == "nvls_tree" and t.nodes == 1):
        return False
    if a == "nvls" and t.nodes > 1 and (not t.collnet or coll != "allreduce"):  # AG/RS need the plugin's iallgather
        return False
    if a == "pat" and (t.nodes != t.ranks or t.consts.pat_bw is None):  # PAT from 2.23 (ncclPatEnable)
        return False
    if a in ("nvls", "nvls_tree", "pat") and p != "Simple":
        return False
    if a in ("nvls", "nvls_tree") and (t.nvls is None or t.nvls.channels < 2):
        return False
    if p == "LL128" and t.arch == "blackwell" and not t.consts.ll128_blackwell:
        return False
    return not (p == "LL128" and not t.ll128)


def _bandwidth(coll: str, a: str, p: str, t: TuneInput, share: float = 1.0) -> float:
    """``comm->bandwidths[coll][a][p]`` (GB/s, algorithm bandwidth) as ``ncclTopoTuneModel`` computes it;
    ``share`` scales the ring graph's ``nChannels`` (:func:`runtime_bw_scale`)."""
    n, nodes, k = t.ranks, t.nodes, t.consts
    cc = _ARCHS.index(t.arch)
    idx2 = nodes - 1 if nodes <= 2 else 2
    ll_max = k.ll_max_bw[cc if nodes == 1 else (1 if t.cpu_vendor == "amd" else 0)][idx2]
    g = t.nvls if a in ("nvls", "nvls_tree") and t.nvls is not None else t.ring
    if a == "collnet_direct" and t.collnet_direct is not None:
        g = t.collnet_direct
    collnet = a in ("collnet_direct", "collnet_chain")
    bw = g.bw_intra if nodes <= 2 or collnet else g.bw_inter
    ppn = n / nodes
    if a in ("nvls", "nvls_tree"):
        bw = _nvls_channel_bw(coll, a, g, t)
    ch = g.channels * (share if g is t.ring else 1.0)
    bus = ch * bw
    if a == "ring" and p == "LL":
        quarter = nodes > 1 or coll in ("allreduce", "reduce")
        bus = min(ll_max, bus * ((.25 if quarter else 1 / 3) if k.ring_ll_quarter else .5))
    if a == "ring" and p == "LL128":
        bus = min(bus * (0.7 if k.legacy_steps and ppn < 2 else 0.92), ch * k.per_ch_ring_ll128[cc][idx2])
    if a == "tree" and coll == "allreduce":
        bus = min(bus * .92, ch * k.per_ch_tree[cc][idx2])
    if a == "tree" and p == "LL":
        bus = min(bus / 3.8, ll_max)
    if a == "tree" and p == "LL128":
        bus = min(bus * (7.0 / 9.0 if nodes == 1 else 120.0 / 128.0), ch * k.per_ch_tree_ll128[cc][idx2])
    if a == "tree" and (t.local_range[0] if t.local_range else n // nodes) == 1:
        # a node with one GPU: search.cc sets its tree's pattern to NCCL_TOPO_PATTERN_TREE (all NIC traffic through
        # one GPU), init.cc keeps the most of the ranks' patterns (maxTreePattern), and tuning.cc takes .85 of busBw
        bus *= TREE_PATTERN_BW
    if a == "pat" and k.pat_bw is not None:
        bus *= k.pat_bw
    if a == "collnet_direct":  # all_reduce: "Collnet+Direct requires all GPUs to have a local NIC"
        factor = (n / nodes) / g.channels  # GPU/NIC ratio
        factor -= (factor - 1) / 2
        bus /= factor
        if cc >= _ARCHS.index("hopper"):
            bus *= .85
    if t.bw_factor is not None and (a, p) in t.bw_factor:
        bus *= t.bw_factor[(a, p)]
    return bus * _to_algbw(coll, a, n, k)


def _nvls_channel_bw(coll: str, a: str, g: Graph, t: TuneInput) -> float:
    """GB/s per channel of NVLS or NVLS-tree (graph ``g``) before tuning.cc's refinements: from 2.28
    ``min(bwIntra · nvlsEfficiency · (nCh-1)/nCh · (2 for all_reduce, else (ppn-1)/ppn), bwInter (x2 for
    NVLS-tree on up to 2 nodes), perChMaxNVLSTreeBw)``; before, ``min(bwIntra, bwInter)`` (NVLS-tree:
    ``bwInter / 2`` beyond 2 nodes; 2.27's NVLS all_gather / reduce_scatter: ``min(bwIntra (ppn-1)/ppn,
    bwInter .9)``)."""
    k, nodes, ppn = t.consts, t.nodes, t.ranks / t.nodes
    cc = _ARCHS.index(t.arch)
    if k.nvls_eff is not None and k.per_ch_nvls_tree is not None:
        intra = g.bw_intra * k.nvls_eff[cc] * (g.channels - 1) / g.channels
        intra *= 2.0 if coll == "allreduce" else (ppn - 1) / ppn
        inter = g.bw_inter * (2 if nodes <= 2 and a == "nvls_tree" else 1)
        idx2 = nodes - 1 if nodes <= 2 else 2
        return min(intra, inter, k.per_ch_nvls_tree[cc][idx2] if a == "nvls_tree" else math.inf)
    if a == "nvls_tree":
        return min(g.bw_intra, g.bw_inter if nodes <= 2 else g.bw_inter / 2)
    if k.nvls_agrs_90 and coll != "allreduce":
        return min(g.bw_intra * (ppn - 1) / ppn, g.bw_inter * .9)
    return min(g.bw_intra, g.bw_inter)


def _to_algbw(coll: str, a: str, n: int, k: TunerConstants) -> float:
    """tuning.cc's "Convert bus BW to algorithm BW" ratio: ring (and NVLS, NVLS-tree from 2.28) ``nRanks /
    nsteps``, NVLS and NVLS-tree before 2.28 ``5/6``, the others ``.5``; 1 (no conversion) for all_gather and
    reduce_scatter other than ring (before 2.23: other than CollNet Direct, so NVLS's is converted too)."""
    if coll in ("allgather", "reducescatter") and a != "ring" and not (k.legacy_steps and a == "nvls"):
        return 1.0
    if a in ("nvls", "nvls_tree") and k.nvls_eff is None:
        return 5.0 / 6.0
    return n / _nsteps(coll, n) if a in ("ring", "nvls", "nvls_tree") else .5


def _nsteps(coll: str, n: int) -> int:
    return 2 * (n - 1) if coll == "allreduce" else (n - 1 if coll in ("reducescatter", "allgather") else n)


def _latency(coll: str, a: str, p: str, t: TuneInput) -> float:
    """``comm->latencies[coll][a][p]`` (µs) as ``ncclTopoTuneModel`` computes it."""
    n, nodes, pi, k = t.ranks, t.nodes, _p(p), t.consts
    ppn = n / nodes
    lat = k.base_lat[a][pi]
    hw_intra = _hw(t.hw_intra, a, p, k.hw_lat[t.intra_hw][a][pi])
    hw_net = _hw(t.hw_inter, a, p, k.hw_lat["net"]["tree" if ppn == 1 and not k.legacy_steps else a][pi])
    intra_lat = hw_intra + t.lat_intra
    inter_lat = hw_net + t.lat_inter
    if p == "Simple":
        inter_lat += t.lat_inter  # the flush
    if a == "ring":
        if coll in ("reduce", "broadcast"):
            return lat + (hw_intra if nodes == 1 else _hw(t.hw_inter, a, p, k.hw_lat["net"][a][pi]))  # sameChannels
        overhead = 0.0
        if nodes > 1:
            overhead = (2.0 if t.cpu_vendor == "amd" else 1.0) * (3 if p == "Simple" else 1)  # getNetOverhead
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if coll == "allreduce" else nodes - 1)
        if k.legacy_steps and coll == "allreduce" and nodes > 1:
            inter_steps = 2 * nodes  # before 2.23
        return lat + (_nsteps(coll, n) - inter_steps) * max(intra_lat, overhead) + inter_steps * inter_lat
    if a == "tree":
        return lat + (2 * ((n // nodes - 1) * intra_lat + _log2i(nodes) * inter_lat) if coll == "allreduce" else 0.0)
    if a == "collnet_direct":  # "Add 0.4 us arity serialization latency"; nRanks / nNodes of ints: C's integer
        return lat + 2 * (min(1, n // nodes - 1) * intra_lat + (n // nodes - 1) * 0.4) + inter_lat  # division
    if a == "collnet_chain":
        return lat + 2 * (n // nodes - 1) * intra_lat + inter_lat
    if a == "nvls":
        return intra_lat + (inter_lat if nodes > 1 else 0.0)
    if a == "nvls_tree":
        return lat + intra_lat + 2 * _log2i(nodes) * inter_lat
    return lat + _log2i(nodes) * (inter_lat / 3.5) + n * 2.8  # PAT


def _hw(over: Mapping[tuple[str, str], float] | None, a: str, p: str, nccl: float) -> float:
    """hwLat of (``a``, ``p``) on a tier: the profile's timing figure where it has one, else NCCL's."""
    return nccl if over is None else over.get((a, p), nccl)


def tune(coll: str, t: TuneInput) -> dict[tuple[str, str], tuple[float, float]]:
    """``(latency µs, bandwidth GB/s)`` per enabled (algorithm, protocol) of NCCL function ``coll``
    (``allreduce``, ``allgather``, ``reducescatter``, ``broadcast``, ``reduce``), as ``ncclTopoTuneModel``
    sets ``comm->latencies`` and ``comm->bandwidths`` (bandwidth already converted to algorithm bandwidth:
    ``× nRanks / nsteps`` for ring, NVLS and NVLS-tree, ``× .5`` for tree and CollNet). Pairs NCCL disables
    are left out.
    """
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for a in ALGOS:
        for p in PROTOS:
            if _enabled(coll, a, p, t):
                bw = _bandwidth(coll, a, p, t)
                if bw > 0:
                    out[(a, p)] = (_latency(coll, a, p, t), bw)
    return out


def runtime_channels(algo: str, proto: str, nbytes: float, ranks: int, ring: Graph, nchannels: int) -> int:
    """Channels a ring or tree collective of ``nbytes`` (nccl-tests size, NCCL's ``nBytes``) runs on, as
    ``topoGetAlgoInfo`` of src/enqueue.cc (NCCL 2.30.7) sets ``nMaxChannels``: from the communicator's channels
    ``nchannels`` (``comm->nChannels``, :func:`comm_channels` under the channel settings: :func:`channel_ceiling`)
    it drops one channel while ``nBytes < nc · nt · threadThreshold`` (down to 1), with ``nt`` =
    ``comm->maxThreads[algo][proto]`` (LL 512, LL128 640, Simple 512; ring Simple 256 where the ring graph's
    ``bwIntra · nChannels <= PCI_BW`` (12 GB/s), ``ncclTopoTuneModel``) and ``threadThreshold`` =
    ``NCCL_*_THREAD_THRESHOLD`` (LL 8, LL128 8, Simple 64; ring LL × ``nRanks``). Other algorithms keep
    ``nchannels`` (NVLS, NVLS-tree and CollNet channel counts are not reduced here). Communicator channels, not
    the ring graph's (:func:`runtime_bw_scale` converts).

    >>> runtime_channels("ring", "Simple", 128 * 1024, 16, Graph(16, 45.0, 45.0), 32)   # 128 KiB / (512 · 64) = 4
    4
    >>> runtime_channels("ring", "Simple", 8 << 20, 16, Graph(16, 45.0, 45.0), 32)      # all 32 of comm->nChannels
    32
    >>> runtime_channels("tree", "LL", 1024, 16, Graph(16, 45.0, 45.0), 32)
    1
    """
    unit = _channel_bytes(algo, proto, ranks, ring)
    if unit is None:
        return nchannels
    # NCCL's loop drops a channel while nBytes < nc * nt * threshold: it stops at the largest nc not above
    # nBytes / (nt * threshold), or at 1
    return max(1, min(nchannels, int(nbytes // unit)))


def _channel_bytes(algo: str, proto: str, ranks: int, ring: Graph) -> float | None:
    """``nt · threadThreshold`` of :func:`runtime_channels` (bytes per channel NCCL asks for), or None for the
    algorithms whose channels it does not reduce."""
    if algo not in ("ring", "tree"):
        return None
    nt = _MAX_NTHREADS[proto]
    if algo == "ring" and proto == "Simple" and ring.bw_intra * ring.channels <= _PCI_BW:
        nt = 256
    return float(nt * _THREAD_THRESHOLD[proto] * (ranks if algo == "ring" and proto == "LL" else 1))


def channel_steps(algo: str, proto: str, nbytes: float, ranks: int, ring: Graph, nchannels: int) -> list[float]:
    """The sizes above ``nbytes`` at which :func:`runtime_channels` gives the collective one more channel
    (``k · nt · threadThreshold`` up to ``nchannels``, the communicator's), in bytes, ascending; empty once it has
    them all.
    Timing a collective no slower than at these sizes keeps its time from falling as ``nbytes`` grows across a
    step (a smaller message does not take longer than a larger one: issue 33's rule for every cost).

    >>> channel_steps("ring", "Simple", 100 * 1024, 16, Graph(16, 45.0, 45.0), 32)[:2]   # steps of 512 · 64 B
    [131072.0, 163840.0]
    >>> channel_steps("nvls", "Simple", 1024, 16, Graph(16, 45.0, 45.0), 32)
    []
    """
    unit = _channel_bytes(algo, proto, ranks, ring)
    if unit is None:
        return []
    nc = runtime_channels(algo, proto, nbytes, ranks, ring, nchannels)
    return [k * unit for k in range(nc + 1, nchannels + 1) if k * unit > nbytes]


def runtime_bw_scale(coll: str, algo: str, proto: str, nc: int, t: TuneInput) -> float:
    """Fraction of NCCL's bandwidth (``comm->bandwidths``, computed for the ring graph's channels) a ring or tree
    collective gets on the ``nc`` communicator channels it runs on (:func:`runtime_channels`): NCCL's own
    bandwidth formula of ``ncclTopoTuneModel`` with the ring graph's ``nChannels`` scaled by
    ``min(1, nc / comm->nChannels)`` (:func:`comm_channels` without the channel settings). The communicator's
    channels are the graph's rings run twice (or four times, ``ncclTopoPostset``) over the same links, so each
    carries that share of the graph's bandwidth (an assumption: NCCL's estimate does not split it); copies above
    the default (``NCCL_MIN_CTAS``, ``copyChannels``) add none. 1 for the other algorithms and where no channel
    is dropped. NCCL chooses the algorithm with all channels (``ncclTopoGetAlgoTime``); this only times the choice.

    >>> t = TuneInput(16, 2, "hopper", "nvlink", "intel", Graph(16, 22.5, 22.5), None)
    >>> nc = runtime_channels("ring", "Simple", 128 * 1024, 16, t.ring, 32)   # 4 of comm->nChannels 32
    >>> runtime_bw_scale("allreduce", "ring", "Simple", nc, t)
    0.125
    """
    share = min(1.0, nc / comm_channels(t.ring, t.arch, t.nodes > 1))
    if algo not in ("ring", "tree") or share == 1.0:
        return 1.0
    full = _bandwidth(coll, algo, proto, t)
    return _bandwidth(coll, algo, proto, t, share) / full if full > 0 else 1.0


def channel_ceiling(t: TuneInput) -> int:
    """``comm->nChannels`` under ``t.channel_env`` (:func:`comm_channels`): the channels a ring or tree
    collective starts from (:func:`runtime_channels`). NCCL's bandwidth (``comm->bandwidths``) is the ring
    graph's channels × their speed, so a communicator with fewer channels than NCCL's default
    (``NCCL_MAX_CTAS``, ``NCCL_MAX_NCHANNELS``) runs at that fraction of it (:func:`runtime_bw_scale`); more
    (``NCCL_MIN_CTAS``, ``NCCL_MIN_NCHANNELS``) are copies of the same rings over the same links
    (``copyChannels``, src/graph/connect.cc), which NCCL's model gives no more bandwidth.

    >>> t = TuneInput(16, 2, "hopper", "nvlink", "intel", Graph(16, 22.5, 22.5), None)
    >>> channel_ceiling(t), channel_ceiling(replace(t, channel_env=ChannelEnv(max_ctas=8)))   # 8 of 32: 1/4
    (32, 8)
    """
    return comm_channels(t.ring, t.arch, t.nodes > 1, t.channel_env)


def cta_bw_scale(algo: str, t: TuneInput) -> float:
    """Fraction of NCCL's NVLS / NVLS-tree bandwidth a collective gets on :func:`nvls_ctas` under
    ``t.channel_env``: ``min(1, CTAs / default CTAs)`` (an assumption: each of the default CTAs drives an equal
    share of the NVLS graph's bandwidth, which NCCL's estimate, on the graph's heads, does not split; more CTAs
    than the default are not given more bandwidth, as for rings). 1 for the other algorithms
    (:func:`channel_ceiling` times those).

    >>> t = TuneInput(16, 2, "hopper", "nvlink", "intel", Graph(16, 22.5, 22.5), None)
    >>> cta_bw_scale("nvls_tree", replace(t, channel_env=ChannelEnv(max_ctas=4)))   # 4 of 16 CTAs
    0.25
    """
    if algo not in ("nvls", "nvls_tree") or t.channel_env == NO_CHANNEL_ENV:
        return 1.0
    multi, v = t.nodes > 1, t.consts.since
    return min(1.0, nvls_ctas(t.arch, multi, t.channel_env, since=v) / nvls_ctas(t.arch, multi, since=v))


def p2p_step(tier: Literal["nvlink", "pci", "net"], proto: str, arch: str,
             consts: TunerConstants = LATEST) -> tuple[float, float]:
    """``(latency µs, LL bandwidth cap GB/s)`` of one send/recv step on ``tier``: ring's baseLat plus one hwLat
    of the tier for ``proto`` (an assumption: tuning.cc has no send/recv entry; NCCL runs p2p on ring-like
    channels), and the one-node llMaxBw of ``arch``."""
    pi = _p(proto)
    return (consts.base_lat["ring"][pi] + consts.hw_lat[tier]["ring"][pi],
            consts.ll_max_bw[_ARCHS.index(arch)][0])


def _log2i(x: int) -> int:
    """NCCL's ``log2i``: floor(log2(x)) for x >= 1, 0 below."""
    return max(0, int(x).bit_length() - 1)


def correction_steps(coll: str, algo: str, nbytes: float) -> list[float]:
    """The sizes above ``nbytes`` at which :func:`algo_time` moves a tree or NVLS-tree (Blackwell, x86 hosts)
    all_reduce to the next bucket of NCCL's tree correction factor (``64 · 2^k`` bytes, up to the first size it no
    longer corrects), ascending; empty for the others. The factors are not monotone in the size (``_TREE_CORRECTION``),
    so a message just below a bucket can be timed slower than one at it; timing it no slower than at these sizes
    keeps the time from falling as ``nbytes`` grows (as :func:`channel_steps` does for the channel count).

    >>> correction_steps("allreduce", "tree", (1 << 28) + 1)   # log2(nBytes / 64) = 22: one bucket left
    [536870912.0]
    >>> correction_steps("allgather", "ring", 1024)
    []
    """
    limit = 23 if algo == "tree" else 24 if algo == "nvls_tree" else 0
    if coll != "allreduce" or not limit:
        return []
    log_size = _log2i(int(nbytes) >> 6) if int(nbytes) >> 6 else -1
    return [float(64 << k) for k in range(max(0, log_size + 1), limit + 1)]


def algo_time(coll: str, algo: str, proto: str, lat: float, bw: float, nbytes: float, nodes: int, ranks: int,
              channels: int, arch: str, *, x86: bool = True, consts: TunerConstants = LATEST) -> float:
    """``ncclTopoGetAlgoTime`` for one op (``numPipeOps`` 1), in µs: ``lat + nBytes / (1000 · bw)``, with the
    tree correction factor for all_reduce by log2(nBytes / 64) and the ring plateau (``lat × 1.4``, 1.9 before
    Ampere) for Simple all_reduce across nodes once ``nBytes / (nChannels · nRanks) >= 64``.

    NCCL (from 2.29; ``consts``) corrects NVLS-tree all_reduce by the same tree factors only on Blackwell with
    x86 hosts (``comm->cpuArch == NCCL_TOPO_CPU_ARCH_X86``; ``x86`` false for Arm hosts such as Grace). The time
    of an NVLS-tree all_reduce across nodes is this estimate plus its pipeline fill, which the estimate leaves out
    (:func:`nvls_tree_fill`)."""
    log_size = _log2i(int(nbytes) >> 6) if int(nbytes) >> 6 else -1
    if algo == "tree" and coll == "allreduce" and 0 <= log_size < 23:
        bw *= _TREE_CORRECTION[_p(proto)][log_size]
    if (algo == "nvls_tree" and coll == "allreduce" and 0 <= log_size < 24
            and arch == "blackwell" and x86 and consts.nvls_tree_corr_bw_x86):
        bw *= _TREE_CORRECTION[_p(proto)][log_size]
    if algo == "ring" and proto == "Simple" and nodes > 1 and coll == "allreduce" and nbytes / (channels * ranks) >= 64:
        lat *= 1.9 if arch == "volta" else 1.4
    return lat + nbytes / (1000.0 * bw)
