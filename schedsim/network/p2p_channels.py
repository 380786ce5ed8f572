"""How many channels NCCL stripes one send/recv over, and the bandwidth that caps (issue 36).

NCCL runs a send/recv of Simple protocol on ``nChannels`` channels, one CTA each, and a channel moves a bounded rate
whatever the link. The count comes from two places of NVIDIA/nccl (v2.20.5 to v2.30.7, the releases
:mod:`schedsim.network.tuning` models; v2.18.5 and v2.19.3 give the same counts for the groups below):

* per communicator, ``ncclTopoComputeP2pChannels`` (src/graph/paths.cc): ``p2pnChannels`` =
  ``pow2Up(comm->nChannels)``; ``p2pnChannelsPerPeer`` = ``pow2Up`` of the least of ``p2pnChannels`` and
  ``ncclTopoGetNchannels`` over **every** rank of the communicator: an NVLink peer ``2 · max(1, path bw /
  ncclTopoNVLinkBw)`` (24 on an A100 NVSwitch: 240 / 20), a PCIe peer 2, a peer on another node
  ``NCCL_NCHANNELS_PER_NET_PEER`` (before v2.29.2 ``max(netCountByBw, nChannelsMax)``, ``nChannelsMax`` = 2
  halved while ``nChannelsMax · nRanks > p2pnChannels · 4``, ``p2pnChannels`` not yet a power of two; from
  v2.29.2 ``max(NICs, divUp(NIC GB/s, NCCL_P2P_PER_CHANNEL_NET_BW = 14))``). So one peer on another node gives
  the NVLink peers of that communicator the network's channel count: 2 on a DGX A100. From v2.23.4 at most
  ``p2pnChannels``; from v2.29.2, across nodes, halved while ``perPeer · divUp(nRanks,
  NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8) > p2pnChannels``.
* per operation, ``scheduleP2pTasksToPlan`` / ``addP2pToPlan`` (src/enqueue.cc): ``nChannelsMin`` =
  ``p2pnChannelsPerPeer`` halved while ``nChannelsMin · nRanks > p2pnChannels``; a message of ``b`` bytes starts
  on ``min(nChannelsMin, divUp(b, minPart))`` channels and doubles them, up to ``p2pnChannelsPerPeer``, while a
  part is above ``maxPart`` (``calcP2pChunkSize`` / ``calcP2pChannelCount``); ``minPart`` / ``maxPart`` =
  ``p2pChunkSize`` / 8 and × 32 in one node, / 2 and × 1 across nodes; ``p2pChunkSize`` =
  ``NCCL_P2P_NET_CHUNKSIZE`` 128 KiB across nodes, ``NCCL_P2P_NVL_CHUNKSIZE`` 512 KiB on NVLink,
  ``NCCL_P2P_PCI_CHUNKSIZE`` 128 KiB otherwise (src/init.cc ``computeBuffSizes``).

A DGX A100 example: a pipeline of 8 ranks in one node sends 25 MB on 4 channels (``nChannelsMin`` 32 → 4 for 8
ranks; 6.25 MB parts are below 16 MiB); the same ranks in a communicator of 2 or 4 nodes, on 2.

Which communicator: torch's ``ProcessGroupNCCL::pointToPoint`` runs a lone send/recv on a two-rank communicator
of its pair and a batched one (``batch_isend_irecv``) on the process group's: its written ``group:``, else the
ranks its family connects (:func:`schedsim.lower.p2p_comms.batch_communicators`), the process group ``execute``
creates and issues it on.

The rate of one channel, :data:`P2P_CHANNEL_GBPS`, is NCCL's own per-channel figure for a send/recv over the
network (``NCCL_P2P_PER_CHANNEL_NET_BW`` default 14 GB/s, src/graph/paths.cc, v2.29.2 on); ASSUMED the same over
NVLink and PCIe. Check (held out, not fitted): an 8xA100 NVLink ``sendrecv_perf -g 8`` at 128 MiB (8 channels
by the rules above) moved 110.81 GB/s, 13.9 GB/s a channel (li-plus/playground ``cuda/nccl.md``;
``benchmarks/accuracy/network_published.py``). LL (at most 16 KiB a channel) is not capped here.
"""

from __future__ import annotations

import math

__all__ = ["NET_CHUNK", "NVL_CHUNK", "P2P_CHANNEL_GBPS", "nvlink_link_bw", "op_channels", "peer_channels",
           "pow2_up"]

#: GB/s one p2p channel moves: NCCL's ``NCCL_P2P_PER_CHANNEL_NET_BW`` default (src/graph/paths.cc, v2.29.2 on)
P2P_CHANNEL_GBPS = 14.0
#: ``NCCL_P2P_NET_CHUNKSIZE`` (also ``NCCL_P2P_PCI_CHUNKSIZE``) and ``NCCL_P2P_NVL_CHUNKSIZE`` defaults, bytes
#: (src/init.cc)
NET_CHUNK = 1 << 17
NVL_CHUNK = 1 << 19
#: ``NCCL_NCHANNELS_PER_NET_PEER`` default before v2.29.2 (src/graph/paths.cc)
_NET_PEER_CHANNELS = 2
#: ``NCCL_MAX_DEV_WORK_P2P_PER_BATCH`` (src/include/device.h, v2.30.7)
_P2P_PER_BATCH = 8
#: ``ncclTopoNVLinkBw`` by architecture (src/graph/topo.h, v2.30.7: SM70 20, SM80 20, SM90 20.6, SM100 40.1 GB/s)
_NVLINK_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}


def pow2_up(v: int) -> int:
    """NCCL's ``pow2Up``: the least power of two >= ``v`` (1 for ``v`` <= 1).

    >>> pow2_up(24), pow2_up(2), pow2_up(1)
    (32, 2, 1)
    """
    return 1 << max(0, int(v) - 1).bit_length()


def nvlink_link_bw(arch: str) -> float:
    """``ncclTopoNVLinkBw``: GB/s NCCL counts for one NVLink of ``arch`` (src/graph/topo.h, v2.30.7)."""
    return _NVLINK_BW.get(arch, 20.0)


def peer_channels(*, p2pn: int, nvlink_path_bw: float | None, arch: str, local: int, nodes: int, nranks: int,
                  nic_count: int, nic_bw: float, since: tuple[int, int, int], nchannels: int | None = None) -> int:
    """``comm->p2pnChannelsPerPeer`` of a communicator of ``nranks`` ranks on ``nodes`` nodes, at most ``local``
    on one (``ncclTopoComputeP2pChannels``, module docstring). ``p2pn``: ``comm->p2pnChannels`` (a power of two);
    ``nvlink_path_bw``: GB/s of the NVLink path between two GPUs of a node (None: PCIe peers); ``nic_count`` and
    ``nic_bw``: the NICs a GPU uses and their GB/s together (``ncclTopoGetLocalNetCountByBw``); ``since``: the
    release (:attr:`schedsim.network.tuning.TunerConstants.since`); ``nchannels``: ``comm->p2pnChannels`` before
    ``pow2Up`` (``min(comm->nChannels, MAXCHANNELS)``; None: ``p2pn``), what a release before v2.29.2 scales a
    network peer's channels by (v2.20.5-1 ... v2.28.9-1, src/graph/paths.cc ``ncclTopoGetNchannels``).

    >>> kw = dict(p2pn=32, nvlink_path_bw=240.0, arch="ampere", nic_count=1, nic_bw=25.0, since=(2, 30, 7))
    >>> peer_channels(local=8, nodes=1, nranks=8, **kw)      # one DGX A100: 24 NVLink channels -> 32
    32
    >>> peer_channels(local=8, nodes=4, nranks=32, **kw)     # the same GPUs in a 4-node communicator
    2
    """
    least = p2pn
    if local > 1:
        if nvlink_path_bw is None:
            least = min(least, 2)
        else:
            least = min(least, 2 * max(1, int(nvlink_path_bw / nvlink_link_bw(arch))))
    if nodes > 1:
        net = _NET_PEER_CHANNELS
        if since >= (2, 29, 0):  # v2.29.2 (the (2, 29, 0) constants of schedsim.network.tuning)
            if nic_count > 0:
                net = max(nic_count, -(-int(nic_bw) // int(P2P_CHANNEL_GBPS)))
        else:  # "Avoid overloading channels with 8+ operations as we loose the sync warp"
            raw = p2pn if nchannels is None else nchannels
            while net * nranks > raw * 4 and net > 1:
                net //= 2
            net = max(max(1, nic_count), net)
        least = min(least, net)
    per_peer = pow2_up(least)
    if since >= (2, 23, 0):
        per_peer = min(per_peer, p2pn)
    if nodes > 1 and since >= (2, 29, 0):
        while per_peer * -(-nranks // _P2P_PER_BATCH) > p2pn and per_peer > 1:
            per_peer //= 2
    return per_peer


def op_channels(nbytes: float, *, per_peer: int, p2pn: int, nranks: int, nodes: int, chunk: int) -> int:
    """Channels one send (or recv) of ``nbytes`` runs on (``addP2pToPlan``, module docstring): ``per_peer`` =
    ``p2pnChannelsPerPeer``, ``chunk`` = ``comm->p2pChunkSize``.

    >>> op_channels(25e6, per_peer=32, p2pn=32, nranks=8, nodes=1, chunk=NVL_CHUNK)        # 4 parts of 6.25 MB
    4
    >>> op_channels(128 * 2**20, per_peer=32, p2pn=32, nranks=8, nodes=1, chunk=NVL_CHUNK)  # 16 MiB parts
    8
    >>> op_channels(10.5e6, per_peer=2, p2pn=16, nranks=16, nodes=2, chunk=NET_CHUNK)
    2
    """
    lo = per_peer
    while lo * nranks > p2pn and lo > 1:
        lo //= 2
    min_part = chunk // 2 if nodes > 1 else chunk // 8
    max_part = chunk if nodes > 1 else chunk * 32
    b = max(1, math.ceil(nbytes))
    n = max(1, min(lo, -(-b // min_part)))
    part = max(min_part, -(-b // n))
    while part > max_part and n <= per_peer // 2:
        n *= 2
        part = -(-b // n)
    return n
