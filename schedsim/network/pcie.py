"""A PCIe scale-up domain with or without CUDA peer-to-peer, as NCCL sees it (NVIDIA/nccl v2.30.7-1).

``topology.scale_up.p2p`` (default true) says whether the GPUs of a node reach each other by CUDA peer-to-peer.

* **With** it NCCL's P2P transport moves data GPU to GPU over the PCIe path: through a PCIe switch (path types
  PATH_PIX / PATH_PXB), or through the root complex (PATH_PHB) where ``NCCL_P2P_LEVEL`` allows it, or on AMD hosts
  of at most two GPUs (``ncclTopoCheckP2p``, src/graph/paths.cc: ``p2pLevel = PATH_PXB``, ``PATH_SYS`` for AMD
  with ``nodes[DEV].count <= 2``).
* **Without** it (consumer GPUs whose driver reports no peer-to-peer, as S4's RTX 3090s; ``NCCL_P2P_DISABLE=1``,
  which sets the level to PATH_LOC in ``ncclGetLevel``; a path beyond ``NCCL_P2P_LEVEL``)
  ``ncclTopoComputePaths`` diverts every GPU-to-GPU path through the local CPU ("Divert all traffic through the
  CPU": ``addInterStep``, path type PATH_PHB, bandwidth the lesser of the GPU-to-CPU and CPU-to-GPU paths), and
  the transport is SHM, through host memory. ``bandwidth_GBps`` is then that path's: the GPU's own PCIe link,
  or less where GPUs share a switch's uplink to the CPU (the profile states it; NCCL's PCI_BW per x16 link,
  src/graph/topo.h and topo.cc ``kvDictPciGen``: 3 GB/s at Gen1 (2.5 GT/s), 6 Gen2, 12 Gen3, 24 Gen4, 48 Gen5).

What NCCL's own model then changes, and what schedsim changes with it:

* The channel search (src/graph/search.cc ``followPath``) charges each PCIe link of a PATH_PHB path that starts at
  a GPU and crosses an x86 Intel CPU ``INTEL_P2P_OVERHEAD(bw) = bw * 6 / 5`` for a channel of speed ``bw``
  (src/graph/topo.h: "Intel CPU convert GPU P2P traffic into 64B PCI TLPs, so GPU to GPU traffic consumes more
  PCI bandwidth"): the channels of a GPU fit in ``bandwidth_GBps / 1.2`` (:func:`path_bandwidth`), on
  ``topology.cpu_vendor: intel`` only (AMD and ARM hosts: no overhead). A P2P path through a switch crosses no
  CPU: no overhead.
* Nothing else of tuning.cc: both paths are NCCL_HW_PCI (``intraHw``: NVLink or not), so the same ``hwLat`` and
  ``baseLat``, and neither runs LL128 (``typeIntra <= PATH_NVB``), as ``scale_up.kind: pcie`` already has it.

A schedule's ``env: NCCL_P2P_DISABLE: 1`` turns peer-to-peer off as NCCL reads it (:func:`with_p2p_env`); 0
leaves the profile's (NCCL reads only 1). S0 (``pcie2``) and S4 (``rtx3090_pcie1x4``) have no ``scale_up``:
their measured tables and ``links.pcie`` time them, which this module does not touch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the profile's own types are not imported: schedsim.hardware.profile calls this module (no import cycle);
# ``up`` is a ScaleUp, ``topo`` a Topology, ``profile`` a HardwareProfile

__all__ = ["INTEL_P2P_OVERHEAD", "P2P_DISABLE", "check_p2p", "path_bandwidth", "with_p2p_env"]

#: PCIe bandwidth a GPU-to-GPU channel through an x86 Intel CPU consumes per unit of its speed
#: (src/graph/topo.h ``INTEL_P2P_OVERHEAD(bw) (bw * 6 / 5)``, NCCL v2.30.7-1)
INTEL_P2P_OVERHEAD = 6.0 / 5.0
#: The environment variable that turns NCCL's peer-to-peer off (src/graph/paths.cc ``ncclGetUserP2pLevel``)
P2P_DISABLE = "NCCL_P2P_DISABLE"


def check_p2p(up: Any) -> Any:
    """``up`` itself where its ``p2p`` fits its ``kind``.

    Raises
    ------
    ValueError
        ``p2p: false`` on NVLink or NVSwitch: without peer-to-peer NCCL sends through host memory over PCIe, whose
        bandwidth the tier (an NVLink figure) does not hold.
    """
    if not up.p2p and up.kind != "pcie":
        from pydantic_core import PydanticCustomError  # a ValueError whose ctx names the value and the fix

        raise PydanticCustomError(
            "p2p_kind", "p2p: false needs kind: pcie, not {kind} (without peer-to-peer NCCL's SHM transport goes "
            "through host memory over PCIe, whose bandwidth an NVLink tier does not hold)",
            {"kind": up.kind, "got": False, "fix": "set topology.scale_up.p2p: true, or kind: pcie with that PCIe "
             "path's bandwidth_GBps"})
    return up


def path_bandwidth(topo: Any) -> float:
    """GB/s of one GPU's scale-up path that NCCL's channel search can fill (``topo.scale_up``, which is set):
    ``bandwidth_GBps``, over :data:`INTEL_P2P_OVERHEAD` on an Intel host without peer-to-peer (module doc).

    >>> from schedsim.hardware.profile import Topology
    >>> up = {"kind": "pcie", "bandwidth_GBps": 24.0, "source": "PCIe Gen4 x16"}
    >>> path_bandwidth(Topology(gpus_per_node=4, arch="ampere", scale_up={**up, "p2p": False}))
    20.0
    >>> path_bandwidth(Topology(gpus_per_node=4, arch="ampere", cpu_vendor="amd", scale_up={**up, "p2p": False}))
    24.0
    """
    up = topo.scale_up
    assert up is not None
    if not up.p2p and topo.cpu_vendor == "intel":
        return float(up.bandwidth_GBps) / INTEL_P2P_OVERHEAD
    return float(up.bandwidth_GBps)


def with_p2p_env(profile: Any, env: Mapping[Any, Any], where: Mapping[str, str] | None = None) -> Any:
    """``profile`` with ``topology.scale_up.p2p`` false where the schedule's ``env`` sets ``NCCL_P2P_DISABLE`` to 1
    (its ``scale_up.source`` then names the setting, ``where[NCCL_P2P_DISABLE]``: ``file:line: env.KEY``);
    ``profile`` itself otherwise, and on a profile without ``topology.scale_up`` (its tables and links were
    measured as the machine ran; NCCL's model does not time it).

    Raises
    ------
    ProfileError
        ``NCCL_P2P_DISABLE: 1`` on a profile whose scale-up tier is NVLink or NVSwitch (:func:`check_p2p`).
    """
    from schedsim.errors import ProfileError

    up = profile.topology.scale_up
    if env.get(P2P_DISABLE) != 1 or up is None or not up.p2p:
        return profile
    place = (where or {}).get(P2P_DISABLE, f"env.{P2P_DISABLE}")
    if up.kind != "pcie":
        raise ProfileError(f"{place}: NCCL_P2P_DISABLE=1 on profile {profile.name!r}, whose scale-up tier is "
                           f"{up.kind}: without peer-to-peer NCCL goes through host memory over PCIe, and the profile "
                           "gives no PCIe bandwidth",
                           fix="drop NCCL_P2P_DISABLE, or use a profile with topology.scale_up.kind: pcie")
    new_up = up.model_copy(update={"p2p": False, "source": f"{up.source}; p2p: false by the schedule's {place}"})
    topo = profile.topology.model_copy(update={"scale_up": new_up})
    return profile.model_copy(update={"topology": topo})
