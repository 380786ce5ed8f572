"""Network transports of a profile's NICs (``topology.nics.transport``) and each one's latency per network crossing
beyond NCCL's figures (``topology.nics.transport_latency_us``), which NCCL's net plugins do not report
(``ncclNetProperties.latency`` 0: NCCL's IB plugin, Google's FasTrak, aws-ofi-nccl by default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic_core import PydanticCustomError

__all__ = ["Transport", "TRANSPORT_LATENCY", "with_transport_latency", "over_base"]

#: A network transport's kind, as ``topology.nics.transport`` spells it: InfiniBand and RoCE (NCCL's IB plugin,
#: ``NET/IB``, drives both), Google's GPUDirect-TCPX (A3 High, plugin ``GPUDirectTCPX``) and GPUDirect-TCPXO (A3
#: Mega, Google's FasTrak plugin), AWS EFA (aws-ofi-nccl, ``NET/OFI``) and plain TCP sockets (NCCL's ``NET/Socket``)
Transport = Literal["infiniband", "roce", "tcpx", "tcpxo", "efa", "socket"]
#: Each transport's default ``transport_latency_us`` (µs a network crossing takes beyond NCCL's figures, which NCCL's
#: net plugins do not report: :class:`Nics`) as (µs, provenance, source), or None where neither a published figure
#: nor a sourced log gives one (the profile then states the figure). No vendor publishes this figure (a crossing's
#: latency beyond NCCL's own InfiniBand-set constants); the RoCE and TCPXO figures are fitted by
#: ``benchmarks/accuracy/network_published.py --transport-check`` (least squares of relative error on one log's
#: rows up to 4 KiB) and checked on another log of the same transport there (docs/validation.md, "Network:
#: transport kinds ... (issue 35)").
TRANSPORT_LATENCY: dict[str, tuple[float, str, str] | None] = {
    "infiniband": (0.0, "assumed", "NCCL's hwLat constants were set on InfiniBand; fitted check 0.26 us a crossing "
                   "on NVIDIA/nccl-tests#309 (2 x 8 H100, 8x 400G NDR, all_reduce 8 B..4 KiB), within that log's "
                   "noise"),
    "roce": (1.26, "fitted", "fitted on skypilot-org/skypilot examples/gcp_gpu_direct_tcpx/README.md, SkyPilot's "
             "all_gather on 2x a3-ultragpu-8g (8 H200, 8x 400G RoCE), 1..4 KiB, with a ring's LL network step at "
             "the tree's hwLat (schedsim.network.exposed_ring; 2.41 before it); checked on the same README's GCP "
             "run (2.26.6)"),
    "tcpxo": (37.33, "fitted", "fitted on lessizzmore/create-a3mega-ztan-fork ztan-NCCL-test-result, all_reduce on "
              "2x a3-megagpu-8g (8 H100, GPUDirect-TCPXO), 8 B..4 KiB, under Google's TCPXO NCCL environment that "
              "run sourced (NCCL_PROTO=Simple,LL128, NCCL_MIN_NCHANNELS=4: the a3_mega profile's nccl); checked on "
              "MG-Cafe/TCPXO-Enabled-A3-Mega-H100-Benchmarks' all_gather (another cluster, NCCL 2.28.7)"),
    "tcpx": None,
    "efa": None,
    "socket": None,
}


def with_transport_latency(data: Any) -> Any:
    """``data`` (a ``topology.nics`` mapping) with ``transport_latency_us`` from its ``transport``
    (:data:`TRANSPORT_LATENCY`) where it states none; anything else as it is (the fields validate it).

    Raises
    ------
    pydantic_core.PydanticCustomError
        The transport has no figure (tcpx, efa, socket) and ``data`` states none.

    >>> with_transport_latency({"transport": "tcpxo"})["transport_latency_us"]
    37.33
    >>> with_transport_latency({"transport": "tcpxo", "transport_latency_us": 40.0})["transport_latency_us"]
    40.0
    """
    if not isinstance(data, Mapping) or data.get("transport_latency_us") is not None:
        return data
    kind = data.get("transport")
    if not isinstance(kind, str) or kind not in TRANSPORT_LATENCY:
        return data  # None, or a name the field itself refuses with the list of kinds
    fig = TRANSPORT_LATENCY[kind]
    if fig is None:
        raise PydanticCustomError(
            "transport_latency", "transport: {kind} has no published or fitted topology.nics.transport_latency_us",
            {"kind": kind, "got": kind,
             "fix": "state topology.nics.transport_latency_us (µs a network crossing takes beyond "
             "NCCL's figures; measured: schedsim calibrate --from-nccl-tests LOG --transport-latency on an "
             "8 B..4 KiB run across nodes), or 0 for NCCL's own figures"})
    return {**data, "transport_latency_us": fig[0]}


def over_base(base: Any, over: Any) -> Any:
    """``over`` (a deriving profile's mapping, before it is merged over ``base``, its ``base:``'s) with
    ``topology.nics.transport_latency_us: None`` where its ``topology.nics`` names a ``transport`` other than
    ``base``'s and states no ``transport_latency_us``: a figure the base states is its own transport's (measured
    there), so the deriving profile's transport sets the figure (:func:`with_transport_latency`) rather than
    inherit it. Anything else as it is.

    >>> base = {"topology": {"nics": {"transport": "roce", "transport_latency_us": 5.0}}}
    >>> over_base(base, {"topology": {"nics": {"transport": "tcpxo"}}})
    {'topology': {'nics': {'transport': 'tcpxo', 'transport_latency_us': None}}}
    >>> over_base(base, {"topology": {"nics": {"transport": "roce"}}})
    {'topology': {'nics': {'transport': 'roce'}}}
    """
    topo, btopo = over.get("topology"), base.get("topology")
    nics = topo.get("nics") if isinstance(topo, Mapping) else None
    bnics = btopo.get("nics") if isinstance(btopo, Mapping) else None
    if not isinstance(nics, Mapping) or not isinstance(bnics, Mapping) or "transport" not in nics \
            or "transport_latency_us" in nics or nics["transport"] == bnics.get("transport"):
        return over
    return {**over, "topology": {**topo, "nics": {**nics, "transport_latency_us": None}}}
